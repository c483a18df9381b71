// normgrow: checkpoints. One safetensors file, written atomically:
//   tensors   every parameter under its Hugging Face name (F32), and with an
//             optimizer "optim.m.<name>", "optim.v.<name>" (AdamW moments)
//   metadata  "format": "normgrow-checkpoint-1", "model": the model config
//             (JSON, at the checkpoint's depth), and for a training state
//             "state": {"step", "stage", "step_in_stage", "tokens",
//             "layer_tokens", "flops", "rng": [4 words of 16 hex digits, not all
//             0], "gate_origin": [L] in [-1, step], "frozen": [L] booleans,
//             "adam_steps": [one per parameter] in [0, step]}; counts are
//             integers in [0, 2^53 - 1], step_in_stage at most step. Every
//             number is written so that it reads back exactly.
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
} ng_train_state;

// Saves the model, and the optimizer and state when not NULL.
int ng_checkpoint_save(const char *path, const ng_model *m, const ng_adamw *opt,
                       const ng_train_state *st);
// The same file with the AdamW moments given as host arrays m_host[i],
// v_host[i] [numel] (opt gives the steps): a data-parallel run's rank 0 gathers
// them there from the ranks' slices (ng_zero_host_moments).
int ng_checkpoint_save_moments(const char *path, const ng_model *m, const ng_adamw *opt,
                               float *const *m_host, float *const *v_host,
                               const ng_train_state *st);
// Loads a model (any normgrow checkpoint); the optimizer and state when the
// pointers are not NULL (the file must then hold them). st->gate_origin is
// allocated [L]; frozen flags are restored on the model.
int ng_checkpoint_load(const char *path, ng_backend *be, bool trainable, ng_model **m,
                       ng_adamw **opt, ng_train_state *st);

// Load a model for use (a teacher, a student to diagnose): a normgrow
// checkpoint file, or a Hugging Face Qwen3 directory.
int ng_model_open(const char *path, ng_backend *be, bool trainable, ng_model **out);

#endif
