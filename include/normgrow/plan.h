// normgrow: what a run costs before it runs. Parameters, memory and FLOPs of
// every stage, from the run configuration alone (no data, no weights).
//
// Parameters are counted on model skeletons (ng_model_create(NULL, ...)).
//
// Memory of one stage, all devices together, in bytes (P: the student's
// parameters, bpp: bytes per parameter, N = B T tokens of one step):
//   weights, gradients, AdamW m and v   P bpp each (gradients and moments are
//                                       allocated for frozen tensors too)
//   training activations                4 x ng_plan_acts_floats(student, NG_ACTS_TRAIN
//                                       or NG_ACTS_TRAIN_RECOMPUTE)
//   evaluation activations              4 x ng_plan_acts_floats(student, NG_ACTS_FORWARD):
//                                       the trainer keeps a forward-only set too
//   diagnostics at each evaluation      4 x ng_plan_acts_floats(student, NG_ACTS_KEPT): the
//                                       residual statistics forward with every value kept
//                                       (no backward workspace), while everything above
//                                       stays allocated
//   teacher (distill)                   P_teacher bpp + 4 x ng_plan_acts_floats(teacher, NG_ACTS_FORWARD);
//                                       with top-k caches (teacher_cache) the teacher does not
//                                       run: only its weights, when "teacher" is given
// Activations are fp32 floats, as the reference allocates them. Not counted:
// batches of token ids and top-k cache entries (8 k + 4 bytes per token), and
// backend scratch.
//
// FLOPs of one step, the trainer's rule (ref/train.c), with P the matmul
// parameters of ng_model_matmul_params and A the forward attention FLOPs of
// ng_attention_flops:
//   student (4 P_all + 2 P_trainable) N + 3 A_student;   teacher 2 P_teacher N + A_teacher
// (no teacher term with top-k caches). Evaluations are not counted.
#ifndef NORMGROW_PLAN_H
#define NORMGROW_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/config.h"
#include "normgrow/run.h"

// Parameters of one model as the trainer holds it.
typedef struct {
  int64_t total;            // every parameter
  int64_t trainable;        // those neither frozen block nor frozen embeddings/head
  double matmul;            // ng_model_matmul_params(all): the P of the FLOP rule
  double matmul_trainable;  // ng_model_matmul_params(trainable only)
} ng_plan_params;

// Counts of the model `c` with `frozen_blocks` of its blocks frozen and, with
// `freeze_io`, its embeddings, final norm and head (as ng_model_freeze(-1)).
ng_plan_params ng_plan_count_params(const ng_model_config *c, int64_t frozen_blocks, bool freeze_io);

// Which activations a forward keeps.
typedef enum {
  NG_ACTS_FORWARD,          // teacher and evaluation: two hidden buffers, one block's scratch
  NG_ACTS_KEPT,             // every block's saved values, no workspace (diagnostics)
  NG_ACTS_TRAIN,            // every block's saved values, the backward workspace
  NG_ACTS_TRAIN_RECOMPUTE,  // as TRAIN, but only one block's saved values at a time
} ng_acts_kind;

// Floats of one block's saved values (ng_block_acts) for N tokens.
int64_t ng_plan_block_floats(const ng_model_config *c, int64_t N);
// Floats of the backward workspace (ng_grad_ws) for N tokens.
int64_t ng_plan_grad_ws_floats(const ng_model_config *c, int64_t N);
// Floats of the activations of one step at batch [B, T]: for FORWARD and TRAIN
// exactly what ng_acts_create allocates, for KEPT what ng_acts_create_kept does.
int64_t ng_plan_acts_floats(const ng_model_config *c, int64_t B, int64_t T, ng_acts_kind kind);

// FLOPs of one training step by the trainer's rule; teacher NULL without one.
double ng_plan_step_flops(const ng_model_config *student, const ng_plan_params *sp,
                          const ng_model_config *teacher, const ng_plan_params *tp, int64_t B,
                          int64_t T);

// The hardware a plan is made for.
typedef struct {
  double tflops;            // sustained TFLOP/s of one device
  double memory_gib;        // memory of one device
  int64_t devices;
  int64_t bytes_per_param;  // weights, gradients and AdamW moments
  bool recompute;           // activation recomputation (NG_ACTS_TRAIN_RECOMPUTE)
} ng_plan_device;

// One stage of a run.
typedef struct {
  int64_t depth, tokens, steps;
  ng_plan_params student, teacher;   // teacher all zero without one
  // Bytes, all devices together.
  int64_t weights, grads, adamw, acts, eval_acts, diag_acts, teacher_weights, teacher_acts, total;
  double per_device_gib;             // total / devices (everything sharded evenly)
  bool fits;                         // per_device_gib <= memory_gib
  int64_t devices_needed;            // ceil(total / memory_gib)
  double flops, seconds;             // flops / (devices x tflops x 1e12)
} ng_plan_stage;

// Plan stage `stage` of rc; teacher NULL for a pretrain run, a run from top-k
// caches without a teacher, or an unknown teacher.
void ng_plan_stage_of(const ng_run_config *rc, int stage, const ng_model_config *teacher,
                      const ng_plan_device *dev, ng_plan_stage *out);

// A model config from a JSON file holding one object in config.h's keys.
int ng_plan_read_model_config(const char *path, ng_model_config *out);

#endif
