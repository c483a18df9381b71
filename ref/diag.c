// normgrow: residual-stream diagnostics and block-removal ablations (diag.h).
//
// Choices the header leaves open:
// - "median_abs" is exact: the lower median sorted[ceil(n/2) - 1] (the same
//   nearest rank as the STATS percentiles) of |h| over every entry of the
//   point in all batches, found by radix selection in two passes over the
//   batches (|h| >= 0 orders as its fp32 bits): counts of the upper 16 bits
//   give the median's upper half, counts of the lower 16 bits of the entries
//   in that half give the rest. A point keeps 2^16 counts, not its entries.
// - max_abs and top: the earliest position wins a tie.
// - Ablation CE and KD are the mean over batches of each batch's mean over
//   its non-ignored tokens.
// - Non-finite numbers (no token in a class; a zero median) are JSON null.
#include "normgrow/diag.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"

// ---------------------------------------------------------------- token classes

static bool is_structural(int32_t token, const ng_diag_options *o) {
  for (int i = 0; i < o->n_structural; i++)
    if (o->structural[i] == token) return true;
  return false;
}

// A separator of -1 matches no token (ids are >= 0).
ng_token_class ng_token_class_of(const int32_t *tokens, int64_t T, int64_t i,
                                 const ng_diag_options *o) {
  if (i % T == 0) return NG_TOK_WINDOW_START;
  if (tokens[i] == o->separator) return NG_TOK_SEPARATOR;
  if (tokens[i - 1] == o->separator) return NG_TOK_AFTER_SEPARATOR;
  if (is_structural(tokens[i], o)) return NG_TOK_STRUCTURAL;
  return NG_TOK_ORDINARY;
}

const char *ng_token_class_name(ng_token_class c) {
  switch (c) {
    case NG_TOK_WINDOW_START: return "window_start";
    case NG_TOK_SEPARATOR: return "separator";
    case NG_TOK_AFTER_SEPARATOR: return "after_separator";
    case NG_TOK_STRUCTURAL: return "structural";
    case NG_TOK_ORDINARY: return "ordinary";
    case NG_TOK_CLASSES: break;
  }
  return "?";
}

// ---------------------------------------------------------------- statistics

static void swap_float(float *a, float *b) {
  float t = *a;
  *a = *b;
  *b = t;
}

// The k-th smallest (0-based) of v [n], reordering v (nth-element by
// quickselect with Hoare partitioning).
static float kth_smallest(float *v, int64_t n, int64_t k) {
  NG_ASSERT(k >= 0 && k < n);
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    float pivot = v[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot) i++;
      while (v[j] > pivot) j--;
      if (i <= j) swap_float(&v[i++], &v[j--]);
    }
    // now v[lo..j] <= pivot, v[i..hi] >= pivot, and v(j..i) == pivot
    if (k <= j) {
      hi = j;
    } else if (k >= i) {
      lo = i;
    } else {
      return v[k];
    }
  }
  return v[k];
}

// Nearest-rank p-th percentile of v [n] (reordered): sorted[ceil(p n / 100) - 1].
static double percentile(float *v, int64_t n, int64_t p) {
  return kth_smallest(v, n, (p * n + 99) / 100 - 1);
}

ng_rms_stats ng_rms_stats_of(const float *values, int64_t n) {
  ng_rms_stats s = {n, NAN, NAN, NAN, NAN};
  if (n == 0) return s;
  double sum = 0.0, sq = 0.0, max = -INFINITY;
  for (int64_t i = 0; i < n; i++) sum += values[i];
  s.mean = sum / (double)n;
  for (int64_t i = 0; i < n; i++) {
    double d = values[i] - s.mean;
    sq += d * d;
    max = fmax(max, values[i]);
  }
  s.std = sqrt(sq / (double)n);
  s.max = max;
  float *copy = ng_xmalloc((size_t)n * sizeof(float));
  memcpy(copy, values, (size_t)n * sizeof(float));
  double p99 = percentile(copy, n, 99);
  s.p99_over_median = p99 / percentile(copy, n, 50);
  free(copy);
  return s;
}

// ---------------------------------------------------------------- JSON helpers

static void add_num(cJSON *o, const char *key, double v) {
  if (isfinite(v)) {
    cJSON_AddNumberToObject(o, key, v);
  } else {
    cJSON_AddNullToObject(o, key);
  }
}

static cJSON *stats_json(ng_rms_stats s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "count", (double)s.count);
  add_num(o, "mean", s.mean);
  add_num(o, "std", s.std);
  add_num(o, "max", s.max);
  add_num(o, "p99_over_median", s.p99_over_median);
  return o;
}

// ---------------------------------------------------------------- ranks

void ng_diag_share(int64_t units, int rank, int size, int64_t *first, int64_t *end) {
  *first = units * rank / size;
  *end = units * (rank + 1) / size;
}

// This rank's share of the input's batches.
static void my_batches(const ng_diag_input *in, ng_comm *comm, int64_t *first, int64_t *end) {
  ng_diag_share(in->batches, comm->rank, comm->size, first, end);
}

// ---------------------------------------------------------------- batches

// One fixed batch on the host and on the backend.
typedef struct {
  int32_t *tokens, *targets;          // host [N]
  int32_t *dev_tokens, *dev_targets;  // backend [N]
} batch;

static batch batch_alloc(ng_backend *be, int64_t N) {
  size_t bytes = (size_t)N * sizeof(int32_t);
  return (batch){ng_xmalloc(bytes), ng_xmalloc(bytes), be->alloc(be, bytes), be->alloc(be, bytes)};
}

static void batch_load(ng_backend *be, const ng_diag_input *in, int64_t index, batch *b) {
  size_t bytes = (size_t)(in->B * in->T) * sizeof(int32_t);
  ng_batch_fixed(in->data, index, in->B, in->T, b->tokens, b->targets);
  be->upload(be, b->dev_tokens, b->tokens, bytes);
  be->upload(be, b->dev_targets, b->targets, bytes);
}

static void batch_free(ng_backend *be, batch *b) {
  free(b->tokens);
  free(b->targets);
  be->free(be, b->dev_tokens);
  be->free(be, b->dev_targets);
}

// ---------------------------------------------------------------- residual points

typedef enum { POINT_HIDDEN, POINT_RES1, POINT_RES2 } point_kind;
static const char *const kind_names[] = {"hidden", "res1", "res2"};

// What is gathered of one residual point over all batches (host memory).
typedef struct {
  point_kind kind;
  int64_t layer;   // hidden: 0..L; res1, res2: 1..L
  float *rms;      // [n_tok] per-token RMS, flat positions in batch order
  int64_t *count;  // [2^16] entries by the upper 16 bits of |h| (pass 0), then, of
                   // those whose upper bits are median_hi, by the lower 16 (pass 1)
  int64_t rank;    // the median's rank among the entries counted
  uint32_t median_hi, median_bits;
  float max_abs;
  int64_t max_at;  // flat entry of the max: position * D + dim
} point_acc;

#define HALF_BUCKETS 65536

// hidden.0, then for each block l: (with an output norm: post, deepnorm, mixln's
// post blocks) res1.l, res2.l, then hidden.l.
static point_acc *points_create(const ng_model *m, int64_t n_tok, int *n_points) {
  int64_t L = m->cfg.num_hidden_layers, D = m->cfg.hidden_size;
  point_acc *p = ng_xcalloc(1 + 3 * (size_t)L, sizeof *p);
  int n = 0;
  p[n++] = (point_acc){.kind = POINT_HIDDEN, .layer = 0};
  for (int64_t l = 1; l <= L; l++) {
    if (ng_block_layout_of(&m->cfg, l - 1).output_norm) {
      p[n++] = (point_acc){.kind = POINT_RES1, .layer = l};
      p[n++] = (point_acc){.kind = POINT_RES2, .layer = l};
    }
    p[n++] = (point_acc){.kind = POINT_HIDDEN, .layer = l};
  }
  for (int i = 0; i < n; i++) {
    p[i].rms = ng_xcalloc((size_t)n_tok, sizeof(float));  // zeros: another rank's tokens
    p[i].count = ng_xcalloc(HALF_BUCKETS, sizeof(int64_t));
    p[i].rank = (n_tok * D + 1) / 2 - 1;
    p[i].max_abs = -INFINITY;
  }
  *n_points = n;
  return p;
}

static void points_free(point_acc *p, int n_points) {
  for (int i = 0; i < n_points; i++) {
    free(p[i].rms);
    free(p[i].count);
  }
  free(p);
}

// The bucket of count [2^16] that holds the entry of rank *rank (0-based);
// *rank becomes its rank inside that bucket.
static uint32_t bucket_of_rank(const int64_t *count, int64_t *rank) {
  uint32_t b = 0;
  while (*rank >= count[b]) *rank -= count[b++];
  return b;
}

// Adds the `index`-th batch of point p from its values x [N, D] (backend) in
// `pass` (0: RMS, max and upper-half counts; 1: lower-half counts); rms_dev is
// backend scratch [N], h host scratch [N, D].
static void point_add_batch(ng_backend *be, const float *x, int64_t N, int64_t D, int64_t index,
                            int pass, float *rms_dev, float *h, point_acc *p) {
  int64_t first = index * N * D;
  if (pass == 0) {
    be->row_rms(be, x, N, D, rms_dev);                                     // rms [N]
    be->download(be, p->rms + index * N, rms_dev, (size_t)N * sizeof(float));
  }
  be->download(be, h, x, (size_t)(N * D) * sizeof(float));                // h [N, D]
  for (int64_t i = 0; i < N * D; i++) {
    float a = fabsf(h[i]);
    uint32_t bits;
    memcpy(&bits, &a, sizeof bits);
    if (pass == 1) {
      if (bits >> 16 == p->median_hi) p->count[bits & 0xffffu]++;
      continue;
    }
    p->count[bits >> 16]++;
    if (a > p->max_abs) {
      p->max_abs = a;
      p->max_at = first + i;
    }
  }
}

// The ranks' counts of every point summed (as doubles: exact below 2^53).
static void sum_counts(ng_comm *comm, point_acc *p, int n_points) {
  if (comm->size == 1) return;
  double *c = ng_xmalloc((size_t)n_points * HALF_BUCKETS * sizeof(double));
  for (int i = 0; i < n_points; i++)
    for (int b = 0; b < HALF_BUCKETS; b++) c[(size_t)i * HALF_BUCKETS + b] = (double)p[i].count[b];
  comm->allreduce_f64(comm, c, (int64_t)n_points * HALF_BUCKETS);
  for (int i = 0; i < n_points; i++)
    for (int b = 0; b < HALF_BUCKETS; b++) p[i].count[b] = (int64_t)c[(size_t)i * HALF_BUCKETS + b];
  free(c);
}

// After pass 0 over every rank: each point's per-token RMS (zeros where another
// rank's tokens are, so the sum is exact) and its largest |h|, the largest of
// the ranks' in rank order (their positions ascend with the rank: a tie keeps
// the earliest).
static void gather_pass0(ng_comm *c, point_acc *p, int n_points, int64_t n_tok) {
  if (c->size == 1) return;
  for (int i = 0; i < n_points; i++) c->allreduce_f32(c, p[i].rms, n_tok);
  size_t slots = (size_t)c->size * (size_t)n_points * 2;
  double *m = ng_xcalloc(slots, sizeof(double));
  for (int i = 0; i < n_points; i++) {
    double *mine = m + ((size_t)c->rank * (size_t)n_points + (size_t)i) * 2;
    mine[0] = p[i].max_abs;  // -inf on a rank without batches
    mine[1] = (double)p[i].max_at;
  }
  c->allreduce_f64(c, m, (int64_t)slots);
  for (int i = 0; i < n_points; i++) {
    p[i].max_abs = -INFINITY;
    for (int r = 0; r < c->size; r++) {
      const double *at = m + ((size_t)r * (size_t)n_points + (size_t)i) * 2;
      if (at[0] > p[i].max_abs) p[i].max_abs = (float)at[0], p[i].max_at = (int64_t)at[1];
    }
  }
  free(m);
}

// After pass 0: the median's upper half, and the counts zeroed for pass 1;
// after pass 1: the median's bits.
static void point_end_pass(point_acc *p, int pass) {
  if (pass == 0) {
    p->median_hi = bucket_of_rank(p->count, &p->rank);
    memset(p->count, 0, HALF_BUCKETS * sizeof(int64_t));
  } else {
    p->median_bits = p->median_hi << 16 | bucket_of_rank(p->count, &p->rank);
  }
}

// What a forward's block hook gathers into: the points of one batch.
typedef struct {
  ng_backend *be;
  point_acc *p;
  int n_points;
  int64_t D, index;
  int pass;
  float *rms_dev;  // backend [N]
  float *h;        // host [N, D]
} collect_ctx;

// ng_block_hook: after block l, the points it made (res1, res2 and hidden of
// layer l + 1), and before them hidden.0 (block 0's input, still there).
static void collect_block(void *ctx, const ng_acts *a, int64_t l, const ng_block_acts *s) {
  collect_ctx *c = ctx;
  for (int i = 0; i < c->n_points; i++) {
    point_acc *p = &c->p[i];
    const float *x = NULL;
    switch (p->kind) {
      case POINT_HIDDEN:
        if (p->layer == l + 1 || (l == 0 && p->layer == 0)) x = ng_acts_hidden(a, p->layer);
        break;
      case POINT_RES1:
        if (p->layer == l + 1) x = s->res1;
        break;
      case POINT_RES2:
        if (p->layer == l + 1) x = s->res2;
        break;
    }
    if (x) point_add_batch(c->be, x, a->N, c->D, c->index, c->pass, c->rms_dev, c->h, p);
  }
}

// Forwards every fixed batch of this rank's share twice (the two passes of the
// median) with forward-only activations, gathering each point as its block
// makes it (no block's values outlive the block), then the ranks' gathered
// together; tokens: host [n_tok], every batch's.
static void points_collect(ng_model *m, const ng_diag_input *in, ng_comm *comm, point_acc *p,
                           int n_points, int32_t *tokens) {
  ng_backend *be = m->be;
  int64_t N = in->B * in->T, first, end;
  my_batches(in, comm, &first, &end);
  int32_t *targets = ng_xmalloc((size_t)N * sizeof(int32_t));
  for (int64_t b = 0; b < in->batches; b++) ng_batch_fixed(in->data, b, in->B, in->T, tokens + b * N, targets);
  free(targets);
  ng_acts_options ao = {.chunk = 1};  // no logits are made here
  ng_acts *a = ng_acts_create_with(m, in->B, in->T, &ao);
  batch bt = batch_alloc(be, N);
  int64_t D = m->cfg.hidden_size;
  collect_ctx c = {be, p, n_points, D, 0, 0, be->alloc(be, (size_t)N * sizeof(float)),
                   ng_xmalloc((size_t)(N * D) * sizeof(float))};
  a->on_block = collect_block;
  a->on_block_ctx = &c;
  for (c.pass = 0; c.pass < 2; c.pass++) {
    for (c.index = first; c.index < end; c.index++) {
      batch_load(be, in, c.index, &bt);
      ng_model_forward(m, a, bt.dev_tokens, NULL);
    }
    if (c.pass == 0) gather_pass0(comm, p, n_points, in->batches * N);
    sum_counts(comm, p, n_points);
    for (int i = 0; i < n_points; i++) point_end_pass(&p[i], c.pass);
  }
  be->free(be, c.rms_dev);
  free(c.h);
  batch_free(be, &bt);
  ng_acts_free(m, a);
}

// What the JSON of every point needs besides the point itself.
typedef struct {
  int64_t n_tok, D;
  const int32_t *tokens;        // [n_tok]
  const ng_token_class *cls;    // [n_tok]
  float *scratch;               // [n_tok]
  int top_k;
} points_ctx;

// {"all": STATS, "<class>": STATS...}; *mean_all: the mean over all tokens.
static cJSON *rms_json(const points_ctx *c, const float *rms, double *mean_all) {
  cJSON *o = cJSON_CreateObject();
  ng_rms_stats all = ng_rms_stats_of(rms, c->n_tok);
  *mean_all = all.mean;
  cJSON_AddItemToObject(o, "all", stats_json(all));
  for (int k = 0; k < NG_TOK_CLASSES; k++) {
    int64_t n = 0;
    for (int64_t i = 0; i < c->n_tok; i++)
      if (c->cls[i] == (ng_token_class)k) c->scratch[n++] = rms[i];
    cJSON_AddItemToObject(o, ng_token_class_name((ng_token_class)k), stats_json(ng_rms_stats_of(c->scratch, n)));
  }
  return o;
}

static cJSON *max_abs_json(const points_ctx *c, point_acc *p) {
  int64_t pos = p->max_at / c->D;
  float median;
  memcpy(&median, &p->median_bits, sizeof median);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "value", p->max_abs);
  cJSON_AddNumberToObject(o, "median_abs", median);
  add_num(o, "ratio", p->max_abs / median);
  cJSON_AddNumberToObject(o, "token", c->tokens[pos]);
  cJSON_AddNumberToObject(o, "position", (double)pos);
  cJSON_AddNumberToObject(o, "dim", (double)(p->max_at % c->D));
  return o;
}

// [{"token", "position", "rms"}] of the top_k largest RMS, largest first.
static cJSON *top_json(const points_ctx *c, const float *rms) {
  int64_t k = c->top_k < c->n_tok ? c->top_k : c->n_tok, n = 0;
  int64_t *best = ng_xmalloc((size_t)(k > 0 ? k : 1) * sizeof(int64_t));  // positions, descending
  for (int64_t i = 0; i < c->n_tok; i++) {
    if (n == k && (k == 0 || rms[i] <= rms[best[k - 1]])) continue;
    int64_t j = n < k ? n++ : k - 1;  // insertion slot, dropping the smallest when full
    for (; j > 0 && rms[best[j - 1]] < rms[i]; j--) best[j] = best[j - 1];
    best[j] = i;
  }
  cJSON *arr = cJSON_CreateArray();
  for (int64_t j = 0; j < n; j++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "token", c->tokens[best[j]]);
    cJSON_AddNumberToObject(t, "position", (double)best[j]);
    cJSON_AddNumberToObject(t, "rms", rms[best[j]]);
    cJSON_AddItemToArray(arr, t);
  }
  free(best);
  return arr;
}

// One point's object. *hidden_mean: the mean RMS of the latest hidden point,
// for "growth"; a hidden point replaces it with its own.
static cJSON *point_json(const points_ctx *c, point_acc *p, double *hidden_mean) {
  char name[48];
  snprintf(name, sizeof name, "%s.%lld", kind_names[p->kind], (long long)p->layer);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddStringToObject(o, "kind", kind_names[p->kind]);
  cJSON_AddNumberToObject(o, "layer", (double)p->layer);
  double mean;
  cJSON_AddItemToObject(o, "rms", rms_json(c, p->rms, &mean));
  if (p->kind == POINT_HIDDEN) {
    if (p->layer >= 1) add_num(o, "growth", mean / *hidden_mean);
    *hidden_mean = mean;
  }
  cJSON_AddItemToObject(o, "max_abs", max_abs_json(c, p));
  cJSON_AddItemToObject(o, "top", top_json(c, p->rms));
  return o;
}

static cJSON *points_json(ng_model *m, const ng_diag_input *in, const ng_diag_options *o,
                          ng_comm *comm) {
  int64_t n_tok = in->batches * in->B * in->T;
  int n_points;
  point_acc *p = points_create(m, n_tok, &n_points);
  int32_t *tokens = ng_xmalloc((size_t)n_tok * sizeof(int32_t));
  points_collect(m, in, comm, p, n_points, tokens);
  // the batches' rows one after another: [batches*B, T]
  ng_token_class *cls = ng_xmalloc((size_t)n_tok * sizeof(ng_token_class));
  for (int64_t i = 0; i < n_tok; i++) cls[i] = ng_token_class_of(tokens, in->T, i, o);
  points_ctx c = {n_tok, m->cfg.hidden_size, tokens, cls,
                  ng_xmalloc((size_t)n_tok * sizeof(float)), o->top_k};
  cJSON *arr = cJSON_CreateArray();
  double hidden_mean = NAN;
  for (int i = 0; i < n_points; i++) cJSON_AddItemToArray(arr, point_json(&c, &p[i], &hidden_mean));
  free(c.scratch);
  free(cls);
  free(tokens);
  points_free(p, n_points);
  return arr;
}

// ---------------------------------------------------------------- ablation

// ce, kd of a forward of tokens with the block modes.
static void loss_with(ng_model *m, ng_acts *a, const int32_t *tokens, const int32_t *targets,
                      const ng_loss_teacher *t, ng_loss_params lp, const ng_block_mode *modes,
                      double *ce, double *kd) {
  int64_t n_valid;
  ng_model_forward(m, a, tokens, modes);
  ng_model_loss(m, a, t, targets, lp, false, ce, kd, &n_valid);
}

void ng_diag_ablation_batch(ng_model *m, ng_acts *a, const int32_t *tokens,
                            const int32_t *targets, const ng_loss_teacher *t,
                            ng_loss_params lp, double *ce, double *kd) {
  NG_ASSERT(!a->for_backward);
  int64_t L = m->cfg.num_hidden_layers;
  ng_block_mode *modes = ng_xcalloc((size_t)L, sizeof *modes);  // all NG_BLOCK_RUN
  loss_with(m, a, tokens, targets, t, lp, modes, &ce[0], &kd[0]);
  for (int64_t l = 0; l < L; l++) {
    modes[l] = NG_BLOCK_SKIP;
    loss_with(m, a, tokens, targets, t, lp, modes, &ce[1 + l], &kd[1 + l]);
    if (ng_block_layout_of(&m->cfg, l).output_norm) {
      modes[l] = NG_BLOCK_NORMS;
      loss_with(m, a, tokens, targets, t, lp, modes, &ce[1 + L + l], &kd[1 + L + l]);
    }
    modes[l] = NG_BLOCK_RUN;
  }
  free(modes);
}

// {"ce", "kd"} and, against intact = {ce, kd}, {"dce", "dkd"}; kd only with_kd.
static cJSON *loss_json(double ce, double kd, bool with_kd, const double *intact) {
  cJSON *o = cJSON_CreateObject();
  add_num(o, "ce", ce);
  if (with_kd) add_num(o, "kd", kd);
  if (intact) {
    add_num(o, "dce", ce - intact[0]);
    if (with_kd) add_num(o, "dkd", kd - intact[1]);
  }
  return o;
}

// ce, kd [1 + 2L] as laid out by ng_diag_ablation_batch, averaged over batches.
static cJSON *ablation_to_json(const ng_model *m, const double *ce, const double *kd,
                               bool with_kd) {
  int64_t L = m->cfg.num_hidden_layers;
  double intact[2] = {ce[0], kd[0]};
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "intact", loss_json(ce[0], kd[0], with_kd, NULL));
  cJSON *blocks = cJSON_AddArrayToObject(o, "blocks");
  for (int64_t l = 1; l <= L; l++) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddNumberToObject(b, "block", (double)l);
    cJSON_AddItemToObject(b, "skip", loss_json(ce[l], kd[l], with_kd, intact));
    if (ng_block_layout_of(&m->cfg, l - 1).output_norm)
      cJSON_AddItemToObject(b, "norms_only", loss_json(ce[L + l], kd[L + l], with_kd, intact));
    cJSON_AddItemToArray(blocks, b);
  }
  return o;
}

static cJSON *ablation_json(ng_model *m, const ng_diag_input *in, ng_comm *comm) {
  ng_backend *be = m->be;
  ng_model *teacher = in->teacher;
  size_t n = 1 + 2 * (size_t)m->cfg.num_hidden_layers;
  double *ce = ng_xcalloc(n, sizeof(double)), *kd = ng_xcalloc(n, sizeof(double));
  double *ce_sum = ng_xcalloc(n, sizeof(double)), *kd_sum = ng_xcalloc(n, sizeof(double));
  int64_t N = in->B * in->T;
  ng_acts_options ao = {.chunk = in->chunk > 0 ? in->chunk : ng_loss_chunk_default(&m->cfg, N)};
  ng_acts *a = ng_acts_create_with(m, in->B, in->T, &ao);
  ng_acts *ta = teacher ? ng_acts_create_with(teacher, in->B, in->T, &ao) : NULL;
  ng_loss_teacher lt = {.model = teacher, .acts = ta};
  batch bt = batch_alloc(be, N);
  int64_t first, end;
  my_batches(in, comm, &first, &end);
  for (int64_t b = first; b < end; b++) {
    batch_load(be, in, b, &bt);
    if (ta) ng_model_forward(teacher, ta, bt.dev_tokens, NULL);  // to the teacher's head input
    ng_diag_ablation_batch(m, a, bt.dev_tokens, bt.dev_targets, &lt, in->loss, ce, kd);
    for (size_t i = 0; i < n; i++) {
      ce_sum[i] += ce[i] / (double)in->batches;
      kd_sum[i] += kd[i] / (double)in->batches;
    }
  }
  comm->allreduce_f64(comm, ce_sum, (int64_t)n);
  comm->allreduce_f64(comm, kd_sum, (int64_t)n);
  cJSON *o = ablation_to_json(m, ce_sum, kd_sum, teacher != NULL);
  batch_free(be, &bt);
  ng_acts_free(m, a);
  if (ta) ng_acts_free(teacher, ta);
  free(ce);
  free(kd);
  free(ce_sum);
  free(kd_sum);
  return o;
}

// ---------------------------------------------------------------- the report

cJSON *ng_diag_json(ng_model *m, const ng_diag_input *in, const ng_diag_options *o,
                    bool ablation, int64_t step, int64_t tokens) {
  ng_comm *one = ng_comm_single();
  cJSON *j = ng_diag_json_ranks(m, in, o, ablation, step, tokens, one);
  ng_comm_close(one);
  return j;
}

cJSON *ng_diag_json_ranks(ng_model *m, const ng_diag_input *in, const ng_diag_options *o,
                          bool ablation, int64_t step, int64_t tokens, ng_comm *comm) {
  NG_ASSERT(in->batches >= 1 && in->B >= 1 && in->T >= 1 && o->top_k >= 0);
  NG_ASSERT((int64_t)in->data->vocab_size <= m->cfg.vocab_size);
  NG_ASSERT(!in->teacher || (in->teacher->be == m->be &&
                             in->teacher->cfg.vocab_size == m->cfg.vocab_size));
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "step", (double)step);
  cJSON_AddNumberToObject(j, "tokens", (double)tokens);
  cJSON_AddNumberToObject(j, "depth", (double)m->cfg.num_hidden_layers);
  cJSON_AddStringToObject(j, "placement", ng_norm_placement_name(m->cfg.norm_placement));
  cJSON_AddItemToObject(j, "points", points_json(m, in, o, comm));
  if (ablation) cJSON_AddItemToObject(j, "ablation", ablation_json(m, in, comm));
  return j;
}
