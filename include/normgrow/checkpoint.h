// normgrow: checkpoints. One safetensors file, written atomically:
//   tensors   every parameter under its Hugging Face name (F32), and with an
//             optimizer "optim.m.<name>", "optim.v.<name>" (AdamW moments)
//   metadata  "format": "normgrow-checkpoint-1", "model": the model config
//             (JSON, at the checkpoint's depth), and for a training state
//             "state": {"step", "stage", "step_in_stage", "tokens",
//             "layer_tokens", "flops", "rng": [4 words of 16 hex digits, not all
//             0], "gate_origin": [L] in [-1, step], "gate_steps" (the ramps'
//             length, growth.gate_steps; older files lack it: below),
//             "frozen": [L] booleans, "adam_steps": [one per parameter] in
//             [0, step]}; counts are integers in [0, 2^53 - 1], step_in_stage
//             at most step. Every number is written so that it reads back
//             exactly.
#ifndef NORMGROW_CHECKPOINT_H
#define NORMGROW_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/model.h"
#include "normgrow/optim.h"
#include "normgrow/rng.h"

#define NG_CKPT_FORMAT "normgrow-checkpoint-1"

typedef struct {
  int64_t step, stage, step_in_stage, tokens, layer_tokens;
  double flops;
  ng_rng rng;             // the batch generator: the data position of uniform sampling
                          // (epoch sampling's is tokens / seq, data.h)
  int64_t *gate_origin;   // [L] step at which block l's gate ramp began, -1 for none
  int64_t gate_steps;     // the ramps' length (growth.gate_steps)
} ng_train_state;

// The growth gate g of a block whose ramp began at step `origin` (-1: none),
// in the weights after `step` steps, which is also the gate that step `step`
// (counted from 1) trains with: min(1, (step - origin) / gate_steps), and 1
// without a ramp. The trainer and every reader of a checkpoint take a gate
// from here and nowhere else.
float ng_gate_at(int64_t origin, int64_t step, int64_t gate_steps);
// Sets every block's gate m->growth_gate[l] from st's ramps at `step`.
void ng_set_gates(ng_model *m, const ng_train_state *st, int64_t step);

// Saves the model, and the optimizer and state when not NULL.
int ng_checkpoint_save(const char *path, const ng_model *m, const ng_adamw *opt,
                       const ng_train_state *st);
// The same file with the AdamW moments given as host arrays m_host[i],
// v_host[i] [numel] (opt gives the steps): a data-parallel run's rank 0 gathers
// them there from the ranks' slices (ng_zero_host_moments).
int ng_checkpoint_save_moments(const char *path, const ng_model *m, const ng_adamw *opt,
                               float *const *m_host, float *const *v_host,
                               const ng_train_state *st);
// Loads a model (any normgrow checkpoint) with the growth gates of its
// training state at its step (a file of weights only, final.safetensors, has
// every gate open: a run ends with its ramps done, run.h). With opt, the
// optimizer and the state (st), which the file must then hold; with st alone,
// the state when the file holds one (st->gate_origin NULL when it holds none).
// st->gate_origin is allocated [L]; frozen flags are restored on the model. A
// state without gate_steps (an older file) with a ramp begun takes it from the
// growth.gate_steps of the run's config.json beside the file.
int ng_checkpoint_load(const char *path, ng_backend *be, bool trainable, ng_model **m,
                       ng_adamw **opt, ng_train_state *st);

// Load a model for use (a teacher, a student to diagnose): a normgrow
// checkpoint file, or a Hugging Face Qwen3 directory.
int ng_model_open(const char *path, ng_backend *be, bool trainable, ng_model **out);

#endif
