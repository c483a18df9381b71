// normgrow: diagnostics of the residual stream and block-removal ablations.
//
// Residual points: "hidden.<l>" for l = 0 (embedding output) .. L (output of
// block l, as out.hidden.<l> in docs/golden-contract.md), and for Post-Norm blocks also
// "res1.<l>" and "res2.<l>" (l = 1..L): the sums x + Attn(x) and
// a + MLP(a) before their norms (Post-Norm pins the output RMS by
// construction, so its spread is partly built in; these are not pinned).
//
// Token classes of a position t in a row (a window of T tokens): the window's
// first position (t = 0, whatever its token: where attention sinks and massive
// activations sit, as every later position attends to it); the document
// separator; the first token after a separator (t > 0 and the token at t-1 is
// the separator); structural (one of the configured ids, e.g. newline);
// ordinary (the rest). A token belongs to the first class that applies, in
// that order.
//
// JSON written by ng_diag_json (one object; the training loop appends one per
// evaluation to <run_dir>/diag.jsonl, and writes <run_dir>/diag_final.json
// with the ablation at the end; `normgrow diag` prints the same, with step and
// tokens null when unknown and a "settings" object; docs/runs.md). At each
// growth the training loop also appends to diag.jsonl the grown model's object
// (before any step at its new depth) with two more keys: "event": "growth" and
// "new_blocks": [b, ...], the new blocks numbered from 1 (block b receives the
// stream hidden.<b-1>); evaluation records have no "event".
// {"step": S, "tokens": N, "depth": L, "placement": "pre"|"post"|"lns"|"sandwich"|...,
//  "points": [{"name": "hidden.3", "kind": "hidden"|"res1"|"res2", "layer": 3,
//              "rms": {"all": STATS, "window_start": STATS, "separator": STATS,
//                      "after_separator": STATS, "structural": STATS, "ordinary": STATS},
//              "growth": mean RMS / mean RMS of hidden.<l-1> (hidden points, l >= 1),
//              "max_abs": {"value", "median_abs", "ratio", "token", "position", "dim"},
//              "top": [{"token", "position", "rms"}, ...]}, ...],
//  "ablation": {"intact": {"ce", "kd"},
//               "blocks": [{"block": l, "skip": {"ce", "kd", "dce", "dkd"},
//                           "norms_only": {...same...}  (blocks with an output
//                                                        norm only)}, ...]}}
// res1.l and res2.l exist for the blocks with an output norm (post, deepnorm,
// mixln's post blocks): the residual sums before those norms.
// STATS = {"count", "mean", "std", "max", "p99_over_median"} over tokens of
// the per-token RMS sqrt(mean over D of h^2) (no eps); a class with no token
// has count 0 and null values. "position" is the flat index b*T + t in the
// batches, in order. kd and dkd only with a teacher; "ablation" only when asked.
//
// Over the ranks of a data-parallel run (ng_diag_json_ranks), every rank calls
// it with the same model and inputs and forwards only its share of
// the batches: rank r of n the batches [batches r / n, batches (r + 1) / n).
// The ranks then sum what they gathered: each point's per-token RMS (a rank's
// tokens, zeros elsewhere: the sum is exact), the median's counts (exact), the
// ablation's CE and KD; the largest |h| is the largest of the ranks' (the
// earliest position on a tie). Every rank gets the same JSON; the residual
// points are the bits of one process, the ablation's means within the
// rounding of a sum in another order.
#ifndef NORMGROW_DIAG_H
#define NORMGROW_DIAG_H

#include <stdbool.h>
#include <stdint.h>

#include <cJSON.h>

#include "normgrow/backend.h"
#include "normgrow/comm.h"
#include "normgrow/data.h"
#include "normgrow/model.h"

typedef enum {
  NG_TOK_WINDOW_START, NG_TOK_SEPARATOR, NG_TOK_AFTER_SEPARATOR, NG_TOK_STRUCTURAL, NG_TOK_ORDINARY,
  NG_TOK_CLASSES
} ng_token_class;

// The class's JSON key: "window_start", "separator", "after_separator",
// "structural", "ordinary".
const char *ng_token_class_name(ng_token_class c);

typedef struct {
  int32_t separator;          // document separator id, -1 for none
  int n_structural;
  const int32_t *structural;  // [n_structural]
  int top_k;                  // how many largest-RMS tokens to list per point
} ng_diag_options;

// Class of position i of a row-major [B, T] token batch.
ng_token_class ng_token_class_of(const int32_t *tokens, int64_t T, int64_t i,
                                 const ng_diag_options *o);

typedef struct {
  int64_t count;
  double mean, std, max, p99_over_median;  // std: population (divide by count)
} ng_rms_stats;

// Statistics of values [n]: mean, std, max and p99 / median (nearest-rank
// percentiles on the sorted values: p-th = sorted[ceil(p/100 n) - 1]).
ng_rms_stats ng_rms_stats_of(const float *values, int64_t n);

typedef struct {
  // What the batches to look at are: `batches` fixed validation batches of [B, T].
  const ng_shard *data;
  int64_t batches, B, T;
  ng_model *teacher;          // for KD in the ablation, may be NULL
  ng_loss_params loss;
  int64_t chunk;              // rows of a loss chunk (0: ng_loss_chunk_default)
} ng_diag_input;

// The share of `units` (batches, micro-batches) of rank `rank` of `size`:
// [units rank / size, units (rank + 1) / size).
void ng_diag_share(int64_t units, int rank, int size, int64_t *first, int64_t *end);

// Residual statistics (and, with `ablation`, the block-removal ablation) of
// model m as JSON (see above); step/tokens are copied into it.
cJSON *ng_diag_json(ng_model *m, const ng_diag_input *in, const ng_diag_options *o,
                    bool ablation, int64_t step, int64_t tokens);
// The same with the batches shared by the ranks of comm (above); every rank
// calls it and gets the JSON.
cJSON *ng_diag_json_ranks(ng_model *m, const ng_diag_input *in, const ng_diag_options *o,
                          bool ablation, int64_t step, int64_t tokens, ng_comm *comm);

// The ablation of ng_diag_json on one batch (also for golden checks): forwards
// of tokens, targets [B*T] with a (non-train acts of [B, T]) and the chunked
// loss (ng_model_loss) against the teacher t or NULL (backend buffers). Writes
// ce, kd [1 + 2L]: [0] intact, [l] block l (1-based) skipped, [L + l] block l
// with sublayers zeroed and norms kept (Post-Norm only; Pre-Norm leaves these
// untouched, as there it equals skipping). kd is 0 without teacher logits.
void ng_diag_ablation_batch(ng_model *m, ng_acts *a, const int32_t *tokens,
                            const int32_t *targets, const ng_loss_teacher *t,
                            ng_loss_params lp, double *ce, double *kd);

#endif
