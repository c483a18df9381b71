// normgrow: one training run ("arm"): its configuration, curriculum and loop.
//
// RUN.json (every key is checked; unknown keys are errors):
// {
//   "name": "grow-post", "seed": 1, "run_dir": "runs/toy/grow-post",
//   "mode": "distill" | "pretrain",
//   "data": {"train": "train.bin", "val": "val.bin", "batch": 8, "seq": 64,
//            "micro_batch": 8,  (rows of one forward/backward: each step's
//            batch runs as batch / micro_batch micro-batches whose gradients
//            add up, the loss averaged over the whole batch's valid targets;
//            default the whole batch; must divide batch)
//            "sampling": "uniform" | "epoch"},  (how training windows are
//            drawn: "uniform" (the default), each window's start uniform over
//            the shard, with replacement, from the run's generator; "epoch",
//            the shard's non-overlapping windows (or a teacher cache's), each
//            once per epoch in a seeded order reshuffled every epoch
//            (ng_epoch_order, data.h), its position the run's tokens / seq)
//   "model": { model config of the student at its final depth (config.h); with
//              growth.new_block_placement, that of its first stage's blocks, and
//              never "hybrid": ng_stage_model gives each stage's model },
//   "teacher": "runs/toy/teacher/final.safetensors",          (distill only; a
//              normgrow checkpoint or a Hugging Face Qwen3 directory)
//   "teacher_cache": {"train": "train.topk", "val": "val.topk"},  (optional: KD
//              from top-k caches of the teacher, topk.h; "teacher" is then
//              needed only to copy layers or embeddings from it)
//   "loss": {"kd_weight": 0.5, "temperature": 2.0,               (distill only)
//            "divergence": "forward_kl"|"reverse_kl"|"jsd",       (optional, default
//            "beta": 0.5},                                         forward_kl; beta in
//                                                                  (0, 1), jsd only)
//   "optim": {"beta1", "beta2", "eps", "weight_decay", "grad_clip", "state_on_growth": "keep"|"reset"},
//   "lr": {"peak": 3e-3, "floor": 3e-4, "warmup_tokens": 8192, "shape": "cosine"|"linear"|"constant"},
//   "init": {"std": 0.02, "layers": "random" | [teacher layer per student block]
//                                  | {"every": k} (block i <- teacher layer i k),
//            "embeddings": "random" | "teacher", "freeze_embeddings": false,
//            "deepnorm_beta": true},  (deepnorm only: DeepNet's init, v_proj, o_proj and
//                                     the MLP's matrices of the first stage's blocks times
//                                     beta = (8 L)^(-1/4), L the final depth (blocks
//                                     added by growth start at init.std); false: every
//                                     matrix at init.std)
//   "growth": {"position": "top"|"interleave"|"middle",
//              "init": "random"|"copy_below"|"zero_out"|"gate"|"teacher",
//              "gate_steps": 50,  (the gate init's ramp, in steps; the last growth
//                                  must have as many after it: a run ends with
//                                  every gate open)
//              "teacher_layers": [..one per new block, in order..],
//              "rescale_stream": false,  (at each growth, the stream of the model
//                                        before it multiplied by 1 / its RMS over
//                                        the first fixed training batch: unit RMS at
//                                        the new blocks' input; Pre-Norm and LNS with
//                                        a final norm; grow.h, docs/design.md)
//              "depth_scaled_init": false,  (new blocks' o_proj and down_proj times
//                                        1/sqrt(2 l), l their position; random or gate)
//              "new_block_placement": "post"},  (optional, "pre" or "post", the other
//                                        one than model.norm_placement's "pre" or "post":
//                                        every new block is of this placement, every old
//                                        one keeps its own, so the grown student is a
//                                        hybrid model (grow.h, config.h); without it new
//                                        blocks are of the model's placement)
//   "stages": [{"depth": 3, "tokens": 65536, "restart_lr": false, "lr": {...},
//               "freeze_existing": false}, ...],
//   "eval": {"every_steps": 50, "batches": 4},
//   "checkpoint_every_steps": 100,
//   "train": {"loss_chunk_tokens": 0,  (tokens per chunk of the output head and loss, of
//                                      student and teacher alike; 0: ng_loss_chunk_default)
//             "recompute": false,      (keep only each block's input in the forward and
//                                      recompute its values in the backward: same bits)
//             "teacher_bf16": true}    (a teacher whose block weights are all bf16 numbers,
//                                      as loaded from a bf16 checkpoint, holds them in bf16
//                                      and widens one block at a time as it runs: the same
//                                      logits in half the memory; false keeps them fp32)
//   "backend": "cpu" | "onednn", "precision": "fp32" | "bf16"
// }
// Optional keys: teacher/loss (pretrain), teacher_cache, lr inside a stage (that stage then
// restarts with its own schedule), restart_lr (default false: the stage
// continues the schedule of the stage before), freeze_existing (default false),
// growth (when every stage has the same depth), init.layers/embeddings
// (default random), init.deepnorm_beta (default true), structural_tokens
// (diagnostics; at most NG_MAX_STRUCTURAL ids), checkpoint_every_steps, data.micro_batch, data.sampling, train (and
// each of its keys). Evaluation and diagnostics
// run in micro-batches too (the diagnostics' ablation CE is then the mean over
// micro-batches). Integers are exact JSON integers (at most 2^53 - 1). A run's
// tokens and its layer-tokens (tokens x depth, summed over the stages) are at
// most 2^53 - 1, as its checkpoints record them; one step's activations (batch
// x seq x (depth + 1) x the widest per-token row) at most 2^52 values; the
// model at most 2^40 parameters (config.h). Before the run allocates by these
// sizes, each stage's memory (plan.h) is checked against the machine's
// (ng_check_memory): a backend in host memory needs the plan's total there,
// any backend the host copies of a checkpoint and the batches; a stage that
// needs more is refused with one line naming it and the fields that size it.
// backend (default "cpu") and precision (default "fp32"): where the run computes,
// not what it computes (a run may resume on another backend).
#ifndef NORMGROW_RUN_H
#define NORMGROW_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/config.h"
#include "normgrow/enums.h"
#include "normgrow/grow.h"

#define NG_MAX_STAGES 16
#define NG_MAX_STRUCTURAL 32  // structural_tokens ids

typedef enum { NG_SAMPLE_UNIFORM, NG_SAMPLE_EPOCH } ng_sampling;
typedef enum { NG_LR_COSINE, NG_LR_LINEAR, NG_LR_CONSTANT } ng_lr_shape;

typedef struct {
  double peak, floor;
  int64_t warmup_tokens;
  ng_lr_shape shape;
} ng_lr_schedule;

typedef struct {
  int64_t depth, tokens;
  bool restart_lr, freeze_existing;
  ng_lr_schedule lr;      // resolved: its own, or the one it continues
  int64_t segment_start;  // index of the first stage of its schedule segment
} ng_stage;

typedef struct {
  char name[128];
  uint64_t seed;
  char run_dir[512];
  bool distill;
  char train_path[512], val_path[512];
  int64_t batch, seq;
  int64_t micro_batch;       // divides batch
  ng_sampling sampling;      // how training windows are drawn
  int64_t loss_chunk;        // train.loss_chunk_tokens (0: the default)
  bool recompute;
  bool teacher_bf16;         // hold a bf16 teacher's blocks in bf16 (ng_model_hold_bf16)
  ng_model_config model;     // the student at its final depth
  char teacher_path[512];    // "" when only a cache is given
  bool use_cache;            // KD from top-k caches of the teacher
  char cache_train[512], cache_val[512];
  ng_loss_config loss;
  ng_optim_config optim;     // lr unused: the schedule gives it
  bool reset_state_on_growth;
  double init_std;
  int64_t n_init_layers;     // 0: random blocks
  int64_t init_layers[NG_MAX_LAYERS];
  bool embeddings_from_teacher, freeze_embeddings;
  bool deepnorm_beta;        // init.deepnorm_beta (false for every other placement)
  ng_grow_position grow_position;
  ng_grow_init grow_init;
  int64_t gate_steps;
  bool rescale_stream, depth_scaled_init;  // interventions on the stream's scale (grow.h)
  bool hybrid_growth;        // growth.new_block_placement given: new blocks are of
  ng_norm_placement new_block_placement;  // this placement (pre or post)
  int64_t n_grow_teacher_layers;
  int64_t grow_teacher_layers[NG_MAX_LAYERS];
  int n_stages;
  ng_stage stages[NG_MAX_STAGES];
  int64_t eval_every, eval_batches;
  int64_t checkpoint_every;
  int n_structural;
  int32_t structural_tokens[NG_MAX_STRUCTURAL];  // extra structural token ids for diagnostics
  char backend[32];          // the backend the run computes on
  ng_precision precision;
  char *json;                // the resolved configuration (written to the run dir)
} ng_run_config;

// Values given on the command line that replace the file's.
// sets: "KEY=VALUE" each (`normgrow train --set`), applied in order before the
// others: KEY a path of object keys and array indices joined by dots
// ("lr.peak", "stages.0.tokens", "model.norm_placement"); a missing object on
// the way is created, a missing last key added (the run config's own checks
// then refuse a key it does not know); VALUE JSON ("5e-4", "true", "[1, 2]",
// "\"top\""), or else the text itself as a string ("top"). A config with sets
// is named "PATH (with --set)" in its errors.
typedef struct {
  int64_t seed;          // >= 0: replaces "seed"
  const char *run_dir;   // not NULL: replaces "run_dir"
  const char *backend;   // not NULL: replaces "backend"
  const char *precision; // not NULL: replaces "precision"
  int n_sets;
  const char *const *sets;
} ng_run_overrides;

// Loading refuses a file that is no run config with one line saying what it
// is and what takes it (ng_config_not_run), before any key is checked.
int ng_run_config_load(const char *path, const ng_run_overrides *ov, ng_run_config *rc);
int ng_run_config_parse(const char *text, const char *where, ng_run_config *rc);
// *out: rc with one stage appended: `tokens` (a whole number of batches) at the
// final depth, with its own constant LR at the floor of the last stage's
// schedule (a decayed schedule continued at its end). How a finished run
// trains on (`normgrow train --resume DIR --extend-tokens N`).
int ng_run_config_extend(const ng_run_config *rc, int64_t tokens, ng_run_config *out);
void ng_run_config_free(ng_run_config *rc);

// What a JSON object without "stages" is when it is a model's config, and
// what takes it: a Hugging Face config.json ("architectures" or "model_type")
// or a normgrow model config ("vocab_size"); NULL for anything else.
const char *ng_config_not_run(const cJSON *root);

// The student's model config at stage `stage`: model at that stage's depth,
// with hybrid growth each growth before it made by ng_grow_config (grow.h).
ng_model_config ng_stage_model(const ng_run_config *rc, int stage);

// Steps of a stage (its tokens are a whole number of batches).
int64_t ng_stage_steps(const ng_run_config *rc, int stage);
// Steps of the whole run (every stage).
int64_t ng_run_steps(const ng_run_config *rc);
// (The learning rate of each step: lr_schedule.h.)
// (Running one: ng_train, train.h.)

#endif
