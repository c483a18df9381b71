// normgrow: what a run costs before it runs. Parameters, memory and FLOPs of
// every stage, from the run configuration alone (no data, no weights).
//
// Parameters are counted on model skeletons (ng_model_create(NULL, ...)).
//
// Memory of one stage on one device, in bytes (P: the student's
// parameters, bpp: bytes per parameter; n = micro_batch x T tokens of one
// forward/backward, c = rows of a loss chunk, train.loss_chunk_tokens or
// ng_loss_chunk_default; with top-k caches the teacher does not run):
//   weights, gradients, AdamW m and v   P bpp each (gradients and moments are
//                                       allocated for frozen tensors too)
//   training activations                4 x ng_plan_acts_floats(student, n, train, recompute, c)
//                                       (onednn bf16: + 2 x ng_plan_acts_bf16, the linear
//                                       inputs' bf16 copies)
//   evaluation activations              4 x ng_plan_acts_floats(student, n, forward, c)
//   teacher (distill)                   P_teacher bpp (blocks held in bf16: 2 bytes each, and one
//                                       fp32 block) + 4 x ng_plan_acts_floats(teacher, n, forward, c)
//                                       (only its weights with top-k caches, when "teacher" is given)
// and, at times, on top of all these (the largest of them counts):
//   diagnostics at each evaluation      the residual points: a forward-only set (chunk 1)
//                                       and on the host the per-token RMS of every point over
//                                       the evaluation batches (4 x points x eval tokens) and
//                                       its 2^16 counts for the exact median; then the
//                                       ablation: forward-only sets of student and teacher
//   a checkpoint                        a host copy of the weights and AdamW moments, 3 P x 4
// Activations are fp32 floats, as the reference allocates them (onednn bf16: and the copies above).
//
// Device and host. A backend in host memory (cpu, onednn) holds all of this in
// one memory. A device backend (cuda: ng_plan_device_backend) holds on each
// device the weights, gradients, moments, activations, teacher and the
// diagnostics' device sets (the residual points' forward set and [n] RMS
// scratch, or the ablation's forward sets); the host of rank 0 holds the
// program (NG_PLAN_RUNTIME_BYTES) and the larger of a checkpoint's copy and the
// diagnostics' host arrays (RMS per evaluation token of every point, its 2^16
// median counts, an [n, D] scratch, the tokens and their classes; every rank
// of a data-parallel run holds these arrays whole, as the ranks gather them).
//
// On `devices` devices the run is data parallel with the AdamW moments sharded
// (ZeRO stage 1, ref/train.c): each device holds the weights, gradients,
// activations, teacher and transients, 1/devices of the moments, and (from 2
// devices) the step's buffers (`zero`, fp32, optim.h's ng_zero): the staging of
// one parameter, devices x s + s values with s = ceil(largest / devices), and
// the reduced gradients of its slices, ceil(P / devices) values. Rank 0 gathers
// a checkpoint's moments into the checkpoint's host copy (no more memory). Not counted:
// batches of token ids and top-k cache entries (8 k + 8 bytes per token), the
// program, its libraries and backend scratch (NG_PLAN_RUNTIME_BYTES stands for them).
//
// FLOPs of one step, the trainer's rule (ref/train.c), with P the matmul
// parameters of ng_model_matmul_params and A the forward attention FLOPs of
// ng_attention_flops:
//   student (4 P_all + 2 P_trainable) N + 3 A_student;   teacher 2 P_teacher N + A_teacher
// (no teacher term with top-k caches). Besides these ("model FLOPs"), what a
// stage runs as well, with F(c, E) = 2 P_c E + A_c a forward of model c over E
// tokens, F'(c, E) the same without the head (2 V D E less), H = 2 V D E the
// head alone, and E = eval.batches x batch x seq the evaluation's tokens:
//   recompute (train.recompute)  each step every block's forward again in the
//                                backward: F'(student, N)
//   an evaluation                F(student, E) + F(teacher, E) + H (the teacher's
//                                own CE), the teacher terms only where it runs
//   its diagnostics              the residual points: two passes of F'(student, E)
//   the final ablation           F'(teacher, E) and, for the intact model and
//                                each ablation (each block skipped; each block
//                                with an output norm reduced to its norms),
//                                F(student, E) + H (the teacher's logits in the
//                                loss) less one block's F for an ablation
// Evaluations (each with its diagnostics) come every eval.every_steps steps and
// once more at the end when the last step is not one of them; a stage that
// grows adds one before the growth (at the old depth) and one after, with its
// diagnostics; the last stage adds the ablation. Data-parallel ranks share
// every part, so the stage's time is all of it / (devices x sustained rate).
//
// Communication of the ZeRO-1 step on n > 1 devices, bytes each device sends
// (and receives) per step: the trainable parameters' gradients reduce-scattered
// and their weights all-gathered, fp32, each over a ring: 2 (n - 1)/n x 4 x
// P_trainable (each tensor's padding to n slices, under n values, left out).
// Its time at a bus bandwidth of b GB/s (NCCL's "busBw": for these two
// collectives, (n - 1)/n x bytes / seconds) is bytes / (b 1e9) per step, not
// overlapped with compute (the step issues them after the backward).
#ifndef NORMGROW_PLAN_H
#define NORMGROW_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/config.h"
#include "normgrow/model.h"
#include "normgrow/run.h"

// Parameters of one model as the trainer holds it.
typedef struct {
  int64_t total;            // every parameter
  int64_t trainable;        // those neither frozen block nor frozen embeddings/head
  double matmul;            // ng_model_matmul_params(all): the P of the FLOP rule
  double matmul_trainable;  // ng_model_matmul_params(trainable only)
  int64_t largest;          // values of the largest parameter tensor
} ng_plan_params;

// Counts of the model `c` with `frozen_blocks` of its blocks frozen and, with
// `freeze_io`, its embeddings, final norm and head (as ng_model_freeze(-1)).
ng_plan_params ng_plan_count_params(const ng_model_config *c, int64_t frozen_blocks, bool freeze_io);

// Floats of the saved values (one ng_block_acts) that serve blocks first..last
// (0-based; the union of their layouts) for N tokens.
int64_t ng_plan_block_floats(const ng_model_config *c, int64_t first, int64_t last, int64_t N);
// Floats of the backward workspace (ng_grad_ws) for N tokens, logits chunks of `chunk` rows.
int64_t ng_plan_grad_ws_floats(const ng_model_config *c, int64_t N, int64_t chunk);
// Floats of the activations at batch [B, T] exactly as ng_acts_create_with(o) allocates them.
int64_t ng_plan_acts_floats(const ng_model_config *c, int64_t B, int64_t T, const ng_acts_options *o);
// bf16 values it allocates besides on a backend that reads bf16 weights
// (ng_backend.bf16_weights): a training forward's linear inputs rounded for
// its backward, per token 2 D + H hd + F for each set of block values and D
// for the head; none without for_backward.
int64_t ng_plan_acts_bf16(const ng_model_config *c, int64_t B, int64_t T, const ng_acts_options *o);

// The program, its libraries, OpenMP and OpenBLAS buffers: what the process
// holds before it allocates a model (measured on the CPU reference).
#define NG_PLAN_RUNTIME_BYTES (48ll << 20)

// FLOPs of one training step by the trainer's rule; teacher NULL without one.
double ng_plan_step_flops(const ng_model_config *student, const ng_plan_params *sp,
                          const ng_model_config *teacher, const ng_plan_params *tp, int64_t B,
                          int64_t T);
// The same for built models: the student's backward counts its trainable
// matmuls (frozen blocks, embeddings); teacher NULL without one (or with a cache).
double ng_model_step_flops(const ng_model *student, const ng_model *teacher, int64_t B, int64_t T);

// The hardware a plan is made for.
typedef struct {
  double tflops;            // sustained TFLOP/s of one device over every FLOP counted
  double memory_gib;        // memory of one device
  int64_t devices;
  int64_t bytes_per_param;  // weights, gradients and AdamW moments
  bool teacher_bf16;        // the teacher's checkpoint stores its blocks in bf16: with
                            // train.teacher_bf16 they are held so (2 bytes each, plus
                            // one fp32 block to widen into)
  double bus_gbps;          // collective bus bandwidth between devices, GB/s (0: none given)
} ng_plan_device;

// One stage of a run.
typedef struct {
  int64_t depth, tokens, steps;
  ng_plan_params student, teacher;   // teacher all zero without one
  int64_t micro_batch, chunk;        // the settings planned (the run config's)
  bool recompute;
  // Bytes of the whole run on one device. total: the persistent parts, the
  // largest transient one (diag or checkpoint) and NG_PLAN_RUNTIME_BYTES.
  // weights and teacher_weights hold, on onednn bf16, the bf16 copies of the
  // linear weights too (2 bytes each; a held teacher's blocks need none).
  int64_t weights, grads, adamw, acts, eval_acts, teacher_weights, teacher_acts;
  int64_t diag, checkpoint, total;   // diag and total in one memory (a host backend's)
  int64_t diag_device, diag_host;    // the diagnostics' parts on a device backend
  bool device_backend;               // the run's backend keeps device memory apart
  // Bytes on each of the devices (data parallel, ZeRO-1; total on one device of
  // a host backend). host: rank 0's host memory besides, on a device backend
  // (0 on a host backend, whose per_device holds everything).
  int64_t adamw_per_device, zero, per_device, host;
  double per_device_gib;             // per_device in GiB
  bool fits;                         // per_device_gib <= memory_gib
  int64_t devices_needed;            // the fewest devices on which it fits; 0: none
                                     // (the parts every device holds exceed one)
  double flops;                      // training, the trainer's rule (model FLOPs)
  double recompute_flops, eval_flops, diag_flops, ablation_flops;  // besides (above)
  int64_t evals;                     // evaluations in the stage, a growth's two included
  double seconds;                    // all of the FLOPs / (devices x tflops x 1e12)
  double comm_bytes;                 // per device and step (ZeRO-1, above; 0 on one device)
  double comm_seconds;               // of the stage: steps x comm_bytes / (bus_gbps 1e9); 0
                                     // on one device or without bus_gbps
} ng_plan_stage;

// Plan stage `stage` of rc with its settings (data.micro_batch,
// train.recompute, train.loss_chunk_tokens); teacher NULL for a pretrain run,
// a run from top-k caches without a teacher, or an unknown teacher.
void ng_plan_stage_of(const ng_run_config *rc, int stage, const ng_model_config *teacher,
                      const ng_plan_device *dev, ng_plan_stage *out);

// Bytes of the diagnostics of `student` over n_eval tokens in batches of
// [B, T] (the "diagnostics at each evaluation" part above; forward_teacher
// NULL without a teacher forward in the ablation); loss chunks of `chunk` rows.
// By where they are: the residual points' device set and host arrays, which
// are held together, then the ablation's device sets.
typedef struct {
  int64_t points_device, points_host, ablation_device;
} ng_plan_diag;
ng_plan_diag ng_plan_diag_parts(const ng_model_config *student, const ng_model_config *forward_teacher,
                                int64_t n_eval, int64_t B, int64_t T, int64_t chunk);
// Their peak in one memory: the larger of the points' two parts together and the ablation.
int64_t ng_plan_diag_bytes(const ng_model_config *student, const ng_model_config *forward_teacher,
                           int64_t n_eval, int64_t B, int64_t T, int64_t chunk);

// Whether the backend of that name keeps its buffers in device memory, apart
// from the host's (cuda); known by name, so that a build without it plans it.
bool ng_plan_device_backend(const char *backend);

// Checks against this machine's memory (common.h's ng_check_memory), before
// anything is allocated by sizes read from a file or a config; on failure one
// line names `source` and the size fields, and -1 is returned.
//   a model as a loader holds it: fp32 weights, gradients when `trainable`,
//   AdamW moments with `optimizer`, and NG_PLAN_RUNTIME_BYTES. (After the
//   file's tensors were checked against the config: a skeleton is made.)
int ng_plan_check_model_memory(const ng_model_config *c, bool trainable, bool optimizer,
                               const char *source);
//   `extra` bytes on top of a model already held: `what` says by which
//   settings (the fields of c, the model's, are named too).
int ng_plan_check_more_memory(const ng_model_config *c, double extra, const char *what);

// A model config from a JSON file holding one object in config.h's keys.
int ng_plan_read_model_config(const char *path, ng_model_config *out);

#endif
