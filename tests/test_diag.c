// Diagnostics: statistics and token classes by hand, residual points against
// embedding rows, a direct forward and the golden cases, the block-removal
// ablation against out.ablation_ce, and the `normgrow diag` command.
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/diag.h"
#include "normgrow/golden.h"

#define V 23        // vocabulary of the small models and the hand-made shard
#define SEP 22      // its separator
#define BATCHES 3
#define BB 2        // batch
#define TT 8        // seq

static ng_backend *be;
static char dir[] = "/tmp/ng_diag_XXXXXX";
static char shard_path[600];

static double rel_err(double got, double want) {
  return fabs(got - want) / fmax(fabs(want), 1e-30);
}

static const cJSON *at(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key);
}

static double num(const cJSON *o) { return cJSON_IsNumber(o) ? o->valuedouble : NAN; }

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

// ---------------------------------------------------------------- by hand

static bool stats_are(ng_rms_stats s, int64_t count, double mean, double std, double max,
                      double ratio) {
  // max exactly: it is one of the given values, chosen, not computed.
  return s.count == count && rel_err(s.mean, mean) < 1e-12 && fabs(s.std - std) < 1e-9 &&
         s.max == max && rel_err(s.p99_over_median, ratio) < 1e-12;
}

static void test_rms_stats(void) {
  float ten[10] = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6};  // 1..10 shuffled
  ng_rms_stats s = ng_rms_stats_of(ten, 10);
  // p99 = sorted[ceil(9.9) - 1] = 10, median = sorted[ceil(5) - 1] = 5
  CHECK(stats_are(s, 10, 5.5, sqrt(8.25), 10, 2.0), "stats of 1..10",
        "mean %g std %g max %g ratio %g", s.mean, s.std, s.max, s.p99_over_median);
  float three[3] = {100, 1, 2};  // p99 = sorted[ceil(2.97) - 1] = 100, median = sorted[1] = 2
  s = ng_rms_stats_of(three, 3);
  CHECK(stats_are(s, 3, 103.0 / 3, sqrt((pow(100 - 103.0 / 3, 2) + pow(1 - 103.0 / 3, 2) +
                                         pow(2 - 103.0 / 3, 2)) / 3),
                  100, 50.0),
        "stats of {100, 1, 2}", "mean %g std %g ratio %g", s.mean, s.std, s.p99_over_median);
  float many[200];  // 1..200 descending: p99 = sorted[197] = 198, median = sorted[99] = 100
  for (int i = 0; i < 200; i++) many[i] = (float)(200 - i);
  s = ng_rms_stats_of(many, 200);
  CHECK(stats_are(s, 200, 100.5, sqrt((200.0 * 200 - 1) / 12), 200, 1.98),
        "stats of 1..200 (nearest rank, not interpolated)", "std %g ratio %g", s.std,
        s.p99_over_median);
  float one = 2.5f;
  s = ng_rms_stats_of(&one, 1);
  CHECK(stats_are(s, 1, 2.5, 0, 2.5, 1.0), "stats of one value", "ratio %g", s.p99_over_median);
  s = ng_rms_stats_of(NULL, 0);
  CHECK(s.count == 0 && isnan(s.mean) && isnan(s.std) && isnan(s.max) && isnan(s.p99_over_median),
        "stats of nothing: count 0, no values", "mean %g", s.mean);
}

static void test_token_classes(void) {
  enum { W = NG_TOK_WINDOW_START, S = NG_TOK_SEPARATOR, A = NG_TOK_AFTER_SEPARATOR, X = NG_TOK_STRUCTURAL,
         O = NG_TOK_ORDINARY };
  int32_t structural[] = {10};
  ng_diag_options o = {SEP, 1, structural, 0};
  // [3, 6]: separators, a token after one, a structural id (also right after a
  // separator), a separator ending a row and one starting the next (the first
  // position of every row is its window's start, whatever its token)
  const int32_t tokens[18] = {5,   SEP, 7,  10, SEP, SEP,   //
                              9,   10,  3,  3,  3,   SEP,   //
                              SEP, 10,  4,  4,  10,  4};
  const int want[18] = {W, S, A, X, S, S,  //
                        W, X, O, O, O, S,  //
                        W, A, O, O, X, O};
  int bad = -1;
  for (int i = 0; i < 18 && bad < 0; i++)
    if ((int)ng_token_class_of(tokens, 6, i, &o) != want[i]) bad = i;
  CHECK(bad < 0, "token classes of a hand-made batch", "position %d is class %d, want %d", bad,
        bad < 0 ? 0 : (int)ng_token_class_of(tokens, 6, bad, &o), bad < 0 ? 0 : want[bad]);
  ng_diag_options none = {-1, 0, NULL, 0};
  CHECK(ng_token_class_of(tokens, 6, 0, &none) == NG_TOK_WINDOW_START &&
            ng_token_class_of(tokens, 6, 1, &none) == NG_TOK_ORDINARY &&
            ng_token_class_of(tokens, 6, 2, &none) == NG_TOK_ORDINARY &&
            ng_token_class_of(tokens, 6, 3, &none) == NG_TOK_ORDINARY,
        "no separator, no structural ids: window starts, the rest ordinary", "a separator or structural class");
}

// ---------------------------------------------------------------- small models

static ng_model *small_model(ng_norm_placement np, int64_t L, int64_t vocab, uint64_t seed) {
  return test_small_model(be, np, L, vocab, seed, false);
}

// 300 tokens of ids < V: separators (about 1 in 8) and the structural id 3 among the rest.
static void write_shard(void) {
  uint32_t tokens[300];
  ng_rng r;
  ng_rng_seed(&r, 5);
  for (int i = 0; i < 300; i++) {
    uint32_t u = (uint32_t)ng_rng_below(&r, 24);
    tokens[i] = u >= 21 ? SEP : u % 7 == 0 ? 3 : u;
  }
  snprintf(shard_path, sizeof shard_path, "%s/val.bin", dir);
  NG_ASSERT(ng_shard_write(shard_path, V, SEP, tokens, 300) == 0);
}

static const int32_t structural_ids[] = {3};

static cJSON *report(ng_model *m, ng_model *teacher, int n_structural, bool ablation) {
  ng_shard s;
  NG_ASSERT(ng_shard_open(&s, shard_path) == 0);
  ng_diag_input in = {&s, BATCHES, BB, TT, teacher, {0.5, 2.0, 0, 0, NG_DIV_FORWARD_KL, 0.0}, 0};
  ng_diag_options o = {SEP, n_structural, structural_ids, 3};
  cJSON *j = ng_diag_json(m, &in, &o, ablation, 7, 1234);
  ng_shard_close(&s);
  return j;
}

// The fixed batches one after another: tokens, targets [BATCHES * BB * TT].
static void all_batches(int32_t *tokens, int32_t *targets) {
  ng_shard s;
  NG_ASSERT(ng_shard_open(&s, shard_path) == 0);
  for (int b = 0; b < BATCHES; b++)
    ng_batch_fixed(&s, b, BB, TT, tokens + b * BB * TT, targets + b * BB * TT);
  ng_shard_close(&s);
}

// ---------------------------------------------------------------- hidden.0 by classes

static const char *const class_keys[NG_TOK_CLASSES] = {"window_start", "separator", "after_separator",
                                                       "structural", "ordinary"};

// hidden.0 is the embedding: per-class mean RMS from the embedding rows themselves.
static void test_hidden0_classes(void) {
  ng_model *m = small_model(NG_NORM_PRE, 2, V, 11);
  cJSON *j = report(m, NULL, 1, false);
  enum { N = BATCHES * BB * TT };
  int32_t tokens[N], targets[N];
  all_batches(tokens, targets);
  ng_diag_options o = {SEP, 1, structural_ids, 0};
  int64_t D = m->cfg.hidden_size, count[NG_TOK_CLASSES] = {0};
  double sum[NG_TOK_CLASSES] = {0}, all = 0.0;
  for (int i = 0; i < N; i++) {
    const float *e = m->w.embed_tokens + (size_t)tokens[i] * (size_t)D;  // host (CPU backend)
    double ss = 0.0;
    for (int64_t d = 0; d < D; d++) ss += (double)e[d] * e[d];
    ng_token_class k = ng_token_class_of(tokens, TT, i, &o);
    count[k]++;
    sum[k] += sqrt(ss / (double)D);
    all += sqrt(ss / (double)D);
  }
  const cJSON *rms = at(cJSON_GetArrayItem(at(j, "points"), 0), "rms");
  double worst = rel_err(num(at(at(rms, "all"), "mean")), all / N);
  bool counts_ok = num(at(at(rms, "all"), "count")) == N;
  for (int k = 0; k < NG_TOK_CLASSES; k++) {
    const cJSON *c = at(rms, class_keys[k]);
    counts_ok &= count[k] > 0 && num(at(c, "count")) == (double)count[k];
    worst = fmax(worst, rel_err(num(at(c, "mean")), sum[k] / (double)count[k]));
  }
  CHECK(counts_ok, "hidden.0: every class present, counts as in the batches", "separators %lld",
        (long long)count[NG_TOK_SEPARATOR]);
  CHECK(worst < 1e-6, "hidden.0: per-class mean RMS = mean RMS of the embedding rows",
        "worst relative error %.3g", worst);
  CHECK(strcmp(cJSON_GetStringValue(at(j, "placement")), "pre") == 0 && num(at(j, "step")) == 7 &&
            num(at(j, "tokens")) == 1234 && num(at(j, "depth")) == 2 && !at(j, "ablation") &&
            cJSON_GetArraySize(at(j, "points")) == 3,
        "pre report: header fields, 3 points, no ablation unless asked", "placement %s",
        cJSON_GetStringValue(at(j, "placement")));
  cJSON_Delete(j);
  ng_model_free(m);
}

// ---------------------------------------------------------------- every point, directly

// Expected statistics of one point: mean and max RMS, max |h| and where, lower median |h|.
typedef struct {
  double mean_rms, max_rms, max_abs, median_abs;
  int64_t max_pos, max_dim;
} point_want;

// Accumulates rows [N, D] of one batch (its first flat position `first`).
static void want_add(point_want *w, const float *h, int64_t N, int64_t D, int64_t first,
                     float *abs_all) {
  for (int64_t i = 0; i < N; i++) {
    double ss = 0.0;
    for (int64_t d = 0; d < D; d++) {
      double v = fabs((double)h[i * D + d]);
      ss += v * v;
      abs_all[(first + i) * D + d] = (float)v;
      if (v > w->max_abs) {
        w->max_abs = v;
        w->max_pos = first + i;
        w->max_dim = d;
      }
    }
    w->mean_rms += sqrt(ss / (double)D);
    w->max_rms = fmax(w->max_rms, (float)sqrt(ss / (double)D));
  }
}

// Point p (0-based in the report's order: hidden.0, then per block l res1.l
// and res2.l when it has an output norm, then hidden.l): its name into `name`
// (when not NULL) and its values in a train-mode forward a (when not NULL).
static const float *point_at(const ng_model *m, const ng_acts *a, int p, char *name, size_t n) {
  int i = 0;
  for (int64_t l = 0; l <= m->cfg.num_hidden_layers; l++) {
    bool res = l > 0 && ng_block_layout_of(&m->cfg, l - 1).output_norm;
    for (int k = res ? 0 : 2; k < 3; k++, i++) {
      if (i != p) continue;
      if (name) snprintf(name, n, "%s.%lld", k == 0 ? "res1" : k == 1 ? "res2" : "hidden", (long long)l);
      if (!a) return NULL;
      return k == 2 ? ng_acts_hidden(a, l) : k == 0 ? a->blocks[l - 1].res1 : a->blocks[l - 1].res2;
    }
  }
  if (name) snprintf(name, n, "(none)");
  return NULL;
}

static int n_points(const ng_model *m) {
  int n = 1;
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
    n += ng_block_layout_of(&m->cfg, l).output_norm ? 3 : 1;
  return n;
}

static point_want direct_point(ng_model *m, int p) {
  enum { N = BB * TT };
  int32_t tokens[BATCHES * N], targets[BATCHES * N];
  all_batches(tokens, targets);
  int64_t D = m->cfg.hidden_size;
  float *abs_all = ng_xmalloc((size_t)(BATCHES * N * D) * sizeof(float));
  point_want w = {0};
  ng_acts *a = ng_acts_create(m, BB, TT, true);
  for (int b = 0; b < BATCHES; b++) {
    ng_model_forward(m, a, tokens + b * N, NULL);  // CPU backend: host buffers
    want_add(&w, point_at(m, a, p, NULL, 0), N, D, (int64_t)b * N, abs_all);
  }
  ng_acts_free(m, a);
  w.mean_rms /= BATCHES * N;
  qsort(abs_all, (size_t)(BATCHES * N * D), sizeof(float), cmp_float);
  w.median_abs = abs_all[(BATCHES * N * D + 1) / 2 - 1];
  free(abs_all);
  return w;
}

static void check_points(ng_model *m, const cJSON *points, const char *what, int want_n) {
  int n = cJSON_GetArraySize(points), bad = n == want_n && n == n_points(m) ? -1 : n;
  double worst = 0.0, growth_err = 0.0, prev_hidden = NAN;
  for (int p = 0; p < n && bad < 0; p++) {
    const cJSON *pt = cJSON_GetArrayItem(points, p);
    const char *name = cJSON_GetStringValue(at(pt, "name"));
    char want_name[32];
    point_at(m, NULL, p, want_name, sizeof want_name);
    if (!name || strcmp(name, want_name) != 0) bad = p;
    point_want w = direct_point(m, p);
    const cJSON *mx = at(pt, "max_abs");
    worst = fmax(worst, rel_err(num(at(at(at(pt, "rms"), "all"), "mean")), w.mean_rms));
    worst = fmax(worst, rel_err(num(at(at(at(pt, "rms"), "all"), "max")), w.max_rms));
    worst = fmax(worst, rel_err(num(at(mx, "value")), w.max_abs));
    worst = fmax(worst, rel_err(num(at(mx, "median_abs")), w.median_abs));
    if (num(at(mx, "position")) != w.max_pos || num(at(mx, "dim")) != w.max_dim) bad = p;
    double mean = num(at(at(at(pt, "rms"), "all"), "mean"));
    if (strncmp(name ? name : "", "hidden.", 7) == 0) {
      if (p > 0) growth_err = fmax(growth_err, rel_err(num(at(pt, "growth")), mean / prev_hidden));
      prev_hidden = mean;
    } else if (at(pt, "growth")) {
      bad = p;  // growth only on hidden points
    }
  }
  char name[96];
  snprintf(name, sizeof name, "%s: names, max_abs position and dim of every point", what);
  CHECK(bad < 0, name, "point %d of %d", bad, n);
  snprintf(name, sizeof name, "%s: every point's RMS mean, max, max|h| and median|h| = a direct forward", what);
  CHECK(worst < 1e-6, name, "worst relative error %.3g", worst);
  snprintf(name, sizeof name, "%s: growth = mean RMS over that of the hidden point below", what);
  CHECK(growth_err < 1e-12, name, "worst relative error %.3g", growth_err);
}

// top: largest RMS first, as many as asked; an absent class is count 0 and nulls.
static void check_top_and_empty(const cJSON *j) {
  bool ok = true;
  const cJSON *pt;
  cJSON_ArrayForEach(pt, at(j, "points")) {
    const cJSON *top = at(pt, "top");
    ok &= cJSON_GetArraySize(top) == 3;
    // exact: the top list and the stats read the same stored RMS values.
    ok &= num(at(cJSON_GetArrayItem(top, 0), "rms")) == num(at(at(at(pt, "rms"), "all"), "max"));
    for (int i = 1; i < cJSON_GetArraySize(top); i++)
      ok &= num(at(cJSON_GetArrayItem(top, i), "rms")) <= num(at(cJSON_GetArrayItem(top, i - 1), "rms"));
  }
  CHECK(ok, "top: 3 tokens per point, largest RMS first, the first is the max", "%s", "not so");
  const cJSON *st = at(at(cJSON_GetArrayItem(at(j, "points"), 1), "rms"), "structural");
  CHECK(num(at(st, "count")) == 0 && cJSON_IsNull(at(st, "mean")) && cJSON_IsNull(at(st, "std")) &&
            cJSON_IsNull(at(st, "max")) && cJSON_IsNull(at(st, "p99_over_median")),
        "a class without tokens: count 0, null values", "count %g", num(at(st, "count")));
}

// The report's ablation = the mean over the batches of ng_diag_ablation_batch.
static void check_ablation(ng_model *m, ng_model *teacher, const cJSON *abl) {
  enum { N = BB * TT, L = 3, R = 1 + 2 * L };  // R: results of ng_diag_ablation_batch
  NG_ASSERT(m->cfg.num_hidden_layers == L);
  int32_t tokens[BATCHES * N], targets[BATCHES * N];
  all_batches(tokens, targets);
  double ce[R], kd[R], mean_ce[R] = {0}, mean_kd[R] = {0};
  ng_acts *a = ng_acts_create(m, BB, TT, false), *ta = ng_acts_create(teacher, BB, TT, false);
  for (int b = 0; b < BATCHES; b++) {
    ng_model_forward(teacher, ta, tokens + b * N, NULL);
    ng_loss_teacher lt = {.model = teacher, .acts = ta};
    ng_diag_ablation_batch(m, a, tokens + b * N, targets + b * N, &lt,
                           (ng_loss_params){0.5, 2.0, 0, 0, NG_DIV_FORWARD_KL, 0.0}, ce, kd);
    for (int i = 0; i < R; i++) {
      mean_ce[i] += ce[i] / BATCHES;
      mean_kd[i] += kd[i] / BATCHES;
    }
  }
  ng_acts_free(m, a);
  ng_acts_free(teacher, ta);
  const cJSON *in = at(abl, "intact");
  double worst = fmax(rel_err(num(at(in, "ce")), mean_ce[0]), rel_err(num(at(in, "kd")), mean_kd[0]));
  bool shape_ok = cJSON_GetArraySize(at(abl, "blocks")) == L;
  for (int l = 1; l <= L; l++) {
    const cJSON *b = cJSON_GetArrayItem(at(abl, "blocks"), l - 1);
    const cJSON *skip = at(b, "skip"), *norms = at(b, "norms_only");
    bool has_norms = ng_block_layout_of(&m->cfg, l - 1).output_norm;
    shape_ok &= num(at(b, "block")) == l && (norms != NULL) == has_norms;
    worst = fmax(worst, rel_err(num(at(skip, "ce")), mean_ce[l]));
    worst = fmax(worst, rel_err(num(at(skip, "dkd")), mean_kd[l] - mean_kd[0]));
    if (!has_norms) continue;
    worst = fmax(worst, rel_err(num(at(norms, "ce")), mean_ce[L + l]));
    worst = fmax(worst, rel_err(num(at(norms, "dce")), mean_ce[L + l] - mean_ce[0]));
  }
  const char *p = ng_norm_placement_name(m->cfg.norm_placement);
  char name[160];
  snprintf(name, sizeof name, "%s ablation: one entry per block, 1-based, norms_only where the block has an output norm", p);
  CHECK(shape_ok, name, "%d blocks", cJSON_GetArraySize(at(abl, "blocks")));
  snprintf(name, sizeof name, "%s ablation: ce, kd, dce, dkd = mean over batches of the batch ablation", p);
  // 1e-12: the report runs the same calls at the same shapes (one loss chunk of
  // the batch); only the doubles of the mean over batches may sum apart
  CHECK(worst < 1e-12, name, "worst relative error %.3g", worst);
  snprintf(name, sizeof name, "%s ablation: kd with a teacher", p);
  CHECK(mean_kd[0] > 0.0, name, "kd %g", mean_kd[0]);
}

static void test_points(void) {
  ng_model *pre = small_model(NG_NORM_PRE, 3, V, 12), *post = small_model(NG_NORM_POST, 3, V, 13);
  ng_model *teacher = small_model(NG_NORM_PRE, 2, V, 14);
  cJSON *j = report(pre, NULL, 1, false);
  check_points(pre, at(j, "points"), "pre", 4);
  cJSON_Delete(j);
  j = report(post, teacher, 0, true);
  check_points(post, at(j, "points"), "post", 10);
  check_top_and_empty(j);
  check_ablation(post, teacher, at(j, "ablation"));
  cJSON_Delete(j);
  // the other placements: res1, res2 and norms_only exactly where a block has an
  // output norm (deepnorm: every block; mixln: block 1 of 3; sandwich, lns: none)
  static const struct {
    ng_norm_placement p;
    int n_points;
  } others[] = {{NG_NORM_DEEPNORM, 10}, {NG_NORM_MIXLN, 6}, {NG_NORM_SANDWICH, 4}, {NG_NORM_LNS, 4}};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    ng_model *m = small_model(others[i].p, 3, V, 15 + i);
    j = report(m, teacher, 0, true);
    check_points(m, at(j, "points"), ng_norm_placement_name(others[i].p), others[i].n_points);
    check_ablation(m, teacher, at(j, "ablation"));
    cJSON_Delete(j);
    ng_model_free(m);
  }
  j = report(pre, NULL, 1, true);
  const cJSON *b0 = cJSON_GetArrayItem(at(at(j, "ablation"), "blocks"), 0);
  CHECK(!at(at(at(j, "ablation"), "intact"), "kd") && !at(at(b0, "skip"), "kd") &&
            !at(at(b0, "skip"), "dkd") && at(at(b0, "skip"), "dce") && !at(b0, "norms_only"),
        "pre ablation without teacher: no kd, no dkd, no norms_only", "%s", "keys differ");
  cJSON_Delete(j);
  ng_model_free(pre);
  ng_model_free(post);
  ng_model_free(teacher);
}

// The norms-only mode of block 1 = the block run with o_proj and down_proj
// zeroed, bit for bit, in every placement (deepnorm: N_pf(alpha N_pa(alpha x))).
static void test_norms_mode(void) {
  enum { N = BB * TT };
  int32_t tokens[BATCHES * N], targets[BATCHES * N];
  all_batches(tokens, targets);
  for (int p = 0; p <= NG_NORM_LAST; p++) {
    ng_model *m = small_model((ng_norm_placement)p, 3, V, 30 + (uint64_t)p);
    ng_acts *a = ng_acts_create(m, BB, TT, false);
    ng_block_mode modes[3] = {NG_BLOCK_RUN, NG_BLOCK_NORMS, NG_BLOCK_RUN};
    size_t n = (size_t)N * (size_t)V;
    float *want = ng_xmalloc(n * sizeof(float));
    ng_model_forward(m, a, tokens, modes);
    ng_model_logits(m, a, 0, N);
    memcpy(want, a->logits, n * sizeof(float));
    const ng_layer *w = &m->w.layers[1];
    int64_t D = m->cfg.hidden_size, F = m->cfg.intermediate_size;
    memset(w->o_proj, 0, (size_t)(D * m->cfg.num_attention_heads * m->cfg.head_dim) * sizeof(float));
    memset(w->down_proj, 0, (size_t)(D * F) * sizeof(float));
    ng_model_forward(m, a, tokens, NULL);
    ng_model_logits(m, a, 0, N);
    char name[96];
    snprintf(name, sizeof name, "%s: the norms-only block = the block with its sublayers zeroed",
             ng_norm_placement_name((ng_norm_placement)p));
    // exact: zeroed o_proj and down_proj make each sublayer's matmul exactly 0
    // (sums of 0 x finite, in any order and kernel) and x + 0 = x; every other
    // call is the same one, at the same shapes and threads, as the norms-only run.
    CHECK(memcmp(want, a->logits, n * sizeof(float)) == 0, name, "logits differ");
    free(want);
    ng_acts_free(m, a);
    ng_model_free(m);
  }
}

// ---------------------------------------------------------------- golden cases

static float *load_out(const ng_golden_case *gc, const char *name, int ndim, const int64_t *shape,
                       size_t n) {
  float *x = ng_xmalloc(n * sizeof(float));
  NG_ASSERT(ng_st_load_f32(&gc->file, name, ndim, shape, x) == 0);
  return x;
}

// Batch ablation against out.ablation_ce, out.ce, out.kd; norms_only differs
// from skip (blocks with an output norm).
static void golden_ablation(const ng_golden_case *gc, ng_model *m, const char *name) {
  int64_t L = m->cfg.num_hidden_layers;
  double *ce = ng_xcalloc(1 + 2 * (size_t)L, sizeof(double));
  double *kd = ng_xcalloc(1 + 2 * (size_t)L, sizeof(double));
  ng_acts *a = ng_acts_create(m, gc->B, gc->T, false);
  ng_loss_teacher lt = {.logits = gc->teacher};
  ng_diag_ablation_batch(m, a, gc->tokens, gc->targets, &lt,
                         (ng_loss_params){gc->loss.kd_weight, gc->loss.temperature, 0, 0, gc->loss.divergence, gc->loss.beta}, ce, kd);
  ng_acts_free(m, a);  // CPU backend: the case's host buffers serve as backend buffers
  int64_t one = 1;
  float *want = load_out(gc, "out.ablation_ce", 1, &L, (size_t)L);
  float *want_ce = load_out(gc, "out.ce", 1, &one, 1), *want_kd = load_out(gc, "out.kd", 1, &one, 1);
  double worst = fmax(rel_err(ce[0], want_ce[0]), fabs(kd[0] - want_kd[0]) / fmax(fabs(want_kd[0]), 1.0));
  double min_gap = INFINITY;
  for (int64_t l = 1; l <= L; l++) {
    worst = fmax(worst, rel_err(ce[l], want[l - 1]));
    if (ng_block_layout_of(&m->cfg, l - 1).output_norm) min_gap = fmin(min_gap, fabs(ce[L + l] - ce[l]));
  }
  char what[200];
  snprintf(what, sizeof what, "%s: intact ce, kd and skip ce of every block = out.ce, out.kd, out.ablation_ce", name);
  // the contract's forward bound: the case's outputs may come from another
  // machine, BLAS kernel family or thread count (seen: 9e-8 under Haswell)
  CHECK(worst <= NG_GOLDEN_TOL_FORWARD, what, "worst relative error %.3g", worst);
  if (ng_model_has_output_norms(&m->cfg)) {
    snprintf(what, sizeof what, "%s: norms_only ce differs from skip ce for every block with an output norm", name);
    CHECK(min_gap > 1e-5, what, "smallest |difference| %.3g", min_gap);
  }
  free(want);
  free(want_ce);
  free(want_kd);
  free(ce);
  free(kd);
}

// The case's tokens as a shard whose fixed batch 0 is exactly the case's batch:
// its rows one after another, then one more token.
static void golden_hidden(const ng_golden_case *gc, ng_model *m, const char *name) {
  int64_t B = gc->B, T = gc->T, N = B * T, L = m->cfg.num_hidden_layers, D = m->cfg.hidden_size;
  uint32_t *ids = ng_xcalloc((size_t)N + 1, sizeof(uint32_t));
  for (int64_t i = 0; i < N; i++) ids[i] = (uint32_t)gc->tokens[i];
  char path[700];
  snprintf(path, sizeof path, "%s/golden.bin", dir);
  uint32_t vocab = (uint32_t)m->cfg.vocab_size;
  NG_ASSERT(ng_shard_write(path, vocab, vocab - 1, ids, (uint64_t)N + 1) == 0);
  ng_shard s;
  NG_ASSERT(ng_shard_open(&s, path) == 0);
  ng_diag_input in = {&s, 1, B, T, NULL, {0.5, 2.0, 0, 0, NG_DIV_FORWARD_KL, 0.0}, 0};
  ng_diag_options o = {(int32_t)vocab - 1, 0, NULL, 1};
  cJSON *j = ng_diag_json(m, &in, &o, false, 0, 0);
  double worst = 0.0;
  int64_t rs[2] = {B, T}, hs[3] = {B, T, D};
  for (int64_t l = 0; l <= L; l++) {
    char tn[64];
    snprintf(tn, sizeof tn, "out.rms.%lld", (long long)l);
    float *rms = load_out(gc, tn, 2, rs, (size_t)N);
    snprintf(tn, sizeof tn, "out.hidden.%lld", (long long)l);
    float *h = load_out(gc, tn, 3, hs, (size_t)(N * D));
    double mean = 0.0, max_abs = 0.0;
    for (int64_t i = 0; i < N; i++) mean += rms[i] / (double)N;
    for (int64_t i = 0; i < N * D; i++) max_abs = fmax(max_abs, fabs(h[i]));
    snprintf(tn, sizeof tn, "hidden.%lld", (long long)l);
    const cJSON *pt = NULL, *it;
    cJSON_ArrayForEach(it, at(j, "points")) {
      if (strcmp(cJSON_GetStringValue(at(it, "name")), tn) == 0) pt = it;
    }
    worst = fmax(worst, rel_err(num(at(at(at(pt, "rms"), "all"), "mean")), mean));
    worst = fmax(worst, rel_err(num(at(at(pt, "max_abs"), "value")), max_abs));
    free(rms);
    free(h);
  }
  char what[200];
  snprintf(what, sizeof what, "%s: hidden.<l> mean RMS and max|h| = out.rms.<l>, out.hidden.<l>", name);
  // the contract's forward bound: the case's outputs may come from another
  // machine, BLAS kernel family or thread count (seen: 4.3e-7 under Sandybridge)
  CHECK(worst <= NG_GOLDEN_TOL_FORWARD, what, "worst relative error %.3g", worst);
  cJSON_Delete(j);
  ng_shard_close(&s);
  free(ids);
}

static void test_golden(const char *root) {
  char pattern[600];
  snprintf(pattern, sizeof pattern, "%s/golden/*.safetensors", root);
  glob_t g;
  NG_ASSERT(glob(pattern, 0, NULL, &g) == 0);
  CHECK(g.gl_pathc >= 2, "golden cases found", "%zu", g.gl_pathc);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    ng_golden_case gc;
    NG_ASSERT(ng_golden_open(&gc, g.gl_pathv[i]) == 0);
    ng_model *m = ng_model_create(be, &gc.model, false);
    NG_ASSERT(ng_model_load(m, &gc.file, "param.") == 0);
    const char *name = strrchr(g.gl_pathv[i], '/') + 1;
    golden_ablation(&gc, m, name);
    golden_hidden(&gc, m, name);
    ng_model_free(m);
    ng_golden_close(&gc);
  }
  globfree(&g);
}

// ---------------------------------------------------------------- the command

static const char *bin;
static char student_ckpt[600], teacher_ckpt[600];

// Runs `normgrow diag ARGS` with stdout to out_path; returns its exit status,
// and its stderr in err (one line expected on failure). The command runs this
// process's BLAS kernels (OPENBLAS_CORETYPE set to them), so that its numbers
// are the same operations as the in-process ones they are compared with bit
// for bit: unset, normgrow would choose other kernels where OpenBLAS fell back
// to its generic ones (tools/normgrow.c) and round its matmuls otherwise.
static int run_diag(const char *args, const char *out_path, char *err, size_t err_size) {
  char cmd[4000], err_path[620];
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
  snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE='%s' '%s' diag %s >'%s' 2>'%s'", ng_blas_corename(), bin,
           args, out_path, err_path);
  int rc = system(cmd);
  FILE *f = fopen(err_path, "r");
  size_t n = f ? fread(err, 1, err_size - 1, f) : 0;
  err[n] = 0;
  if (f) fclose(f);
  return rc;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = ng_xmalloc((size_t)n + 1);
  s[fread(s, 1, (size_t)n, f)] = 0;
  fclose(f);
  return s;
}

static void expect_error(const char *name, const char *args, const char *want) {
  char err[2000], out[620], what[200];
  snprintf(out, sizeof out, "%s/stdout.txt", dir);
  int rc = run_diag(args, out, err, sizeof err);
  char *nl = strchr(err, '\n');
  bool one_line = nl && nl[1] == 0 && strncmp(err, "normgrow: ", 10) == 0;
  snprintf(what, sizeof what, "diag rejects %s", name);
  CHECK(rc != 0 && one_line && strstr(err, want), what, "status %d, stderr \"%s\"", rc, err);
}

// The good checkpoint and shard with `extra` options.
static void bad_option(const char *name, const char *extra, const char *want) {
  char args[2000];
  snprintf(args, sizeof args, "'%s' --data '%s' %s", student_ckpt, shard_path, extra);
  expect_error(name, args, want);
}

static void test_command(void) {
  ng_model *student = small_model(NG_NORM_POST, 3, V, 13), *teacher = small_model(NG_NORM_PRE, 2, V, 14);
  ng_model *wide = small_model(NG_NORM_PRE, 1, V + 7, 15);
  char wide_ckpt[620], wide_shard[620], short_shard[620], out[620], stdout_path[620], args[3000];
  snprintf(student_ckpt, sizeof student_ckpt, "%s/student.safetensors", dir);
  snprintf(teacher_ckpt, sizeof teacher_ckpt, "%s/teacher.safetensors", dir);
  snprintf(wide_ckpt, sizeof wide_ckpt, "%s/wide.safetensors", dir);
  snprintf(wide_shard, sizeof wide_shard, "%s/wide.bin", dir);
  snprintf(short_shard, sizeof short_shard, "%s/short.bin", dir);
  NG_ASSERT(ng_checkpoint_save(student_ckpt, student, NULL, NULL) == 0);
  NG_ASSERT(ng_checkpoint_save(teacher_ckpt, teacher, NULL, NULL) == 0);
  NG_ASSERT(ng_checkpoint_save(wide_ckpt, wide, NULL, NULL) == 0);
  uint32_t few[5] = {1, 2, SEP, 3, 4};
  NG_ASSERT(ng_shard_write(wide_shard, V + 7, SEP, few, 5) == 0);
  NG_ASSERT(ng_shard_write(short_shard, V, SEP, few, 5) == 0);

  // the file holds what ng_diag_json gives in-process, with the ablation; step and
  // tokens null (a checkpoint without a training state), and the settings used
  snprintf(out, sizeof out, "%s/diag.json", dir);
  snprintf(stdout_path, sizeof stdout_path, "%s/stdout.txt", dir);
  snprintf(args, sizeof args, "'%s' --data '%s' --teacher '%s' --batches %d --batch %d --seq %d --top 3 --out '%s'",
           student_ckpt, shard_path, teacher_ckpt, BATCHES, BB, TT, out);
  char err[2000];
  int rc = run_diag(args, stdout_path, err, sizeof err);
  cJSON *j = report(student, teacher, 0, true);
  cJSON_ReplaceItemInObjectCaseSensitive(j, "step", cJSON_CreateNull());
  cJSON_ReplaceItemInObjectCaseSensitive(j, "tokens", cJSON_CreateNull());
  char *want = ng_json_print(j, true), *got = slurp(out), *printed = slurp(stdout_path);
  cJSON *got_json = got ? cJSON_Parse(got) : NULL;
  cJSON *settings = cJSON_DetachItemFromObjectCaseSensitive(got_json, "settings");
  char *got_text = got_json ? ng_json_print(got_json, true) : NULL;
  CHECK(rc == 0 && got_text && strcmp(got_text, want) == 0 && printed && printed[0] == 0,
        "diag --out FILE: the JSON of ng_diag_json, ablation included, nothing on stdout",
        "status %d, stderr %s", rc, err);
  CHECK(num(at(settings, "batches")) == BATCHES && num(at(settings, "batch")) == BB &&
            num(at(settings, "seq")) == TT && cJSON_IsString(at(settings, "teacher")) &&
            cJSON_IsNull(at(settings, "run_dir")) && strstr(err, "step and tokens unknown"),
        "diag names the settings it used (JSON \"settings\" and one line on stderr)", "%s", err);
  cJSON_Delete(settings);
  cJSON_Delete(got_json);
  cJSON_free(got_text);
  cJSON_Delete(j);
  cJSON_free(want);
  free(printed);

  // an existing FILE is replaced only with --force: refused in one line, unchanged
  snprintf(args, sizeof args, "'%s' --data '%s' --batches 1 --out '%s'", student_ckpt, shard_path, out);
  expect_error("an existing --out FILE without --force", args, "--force");
  char *kept = slurp(out);
  CHECK(kept && got && strcmp(kept, got) == 0, "diag leaves an existing --out FILE as it was", "file changed");
  free(kept);
  snprintf(args, sizeof args, "'%s' --data '%s' --batches 1 --out '%s' --force", student_ckpt, shard_path, out);
  rc = run_diag(args, stdout_path, err, sizeof err);
  kept = slurp(out);
  CHECK(rc == 0 && kept && got && strcmp(kept, got) != 0, "diag --out FILE --force replaces it", "status %d, %s", rc, err);
  free(kept);
  free(got);

  // defaults (4 x 8 x 128 tokens wrap around the shard) and stdout
  snprintf(args, sizeof args, "'%s' --data '%s'", student_ckpt, shard_path);
  rc = run_diag(args, stdout_path, err, sizeof err);
  got = slurp(stdout_path);
  j = got ? cJSON_Parse(got) : NULL;
  const cJSON *all = at(at(cJSON_GetArrayItem(at(j, "points"), 0), "rms"), "all");
  const cJSON *b1 = cJSON_GetArrayItem(at(at(j, "ablation"), "blocks"), 0);
  CHECK(rc == 0 && num(at(all, "count")) == 4 * 8 * 128 &&
            cJSON_GetArraySize(at(cJSON_GetArrayItem(at(j, "points"), 0), "top")) == 5 &&
            at(b1, "norms_only") && !at(at(b1, "skip"), "kd"),
        "diag to stdout with the default batches, top 5, no teacher: no kd", "status %d, stderr %s", rc, err);
  cJSON_Delete(j);
  free(got);

  bad_option("an unknown option", "--batchs 2", "--batchs");
  bad_option("zero batches", "--batches 0", "--batches");
  bad_option("a batch that is not a number", "--batch 8x", "--batch");
  bad_option("a negative seq", "--seq -3", "--seq");
  bad_option("a negative top", "--top -1", "--top");
  bad_option("kd-weight above 1", "--kd-weight 1.5", "--kd-weight");
  bad_option("temperature 0", "--temperature 0", "--temperature");
  bad_option("a structural id past the vocabulary", "--structural 3,23", "--structural");
  bad_option("an empty structural id", "--structural 3,,4", "empty");
  bad_option("an unknown backend", "--backend nope", "nope");
  snprintf(args, sizeof args, "--teacher '%s'", wide_ckpt);
  bad_option("a teacher of another vocabulary", args, "teacher's vocabulary");
  snprintf(args, sizeof args, "--teacher '%s/none.safetensors'", dir);
  bad_option("a missing teacher", args, "none.safetensors");
  snprintf(args, sizeof args, "--out '%s/no-such-dir/diag.json'", dir);
  bad_option("an unwritable --out", args, "no-such-dir/diag.json");
  snprintf(args, sizeof args, "'%s'", student_ckpt);
  expect_error("a missing --data", args, "--data");
  snprintf(args, sizeof args, "'%s' --data '%s'", student_ckpt, wide_shard);
  expect_error("a shard of another vocabulary", args, "wide.bin");
  snprintf(args, sizeof args, "'%s' --data '%s' --seq 8", student_ckpt, short_shard);
  expect_error("a shard shorter than seq + 1", args, "short.bin");
  snprintf(args, sizeof args, "'%s/none.safetensors' --data '%s'", dir, shard_path);
  expect_error("a missing checkpoint", args, "none.safetensors");
  snprintf(args, sizeof args, "'%s' --data '%s'", shard_path, shard_path);
  expect_error("a shard given as the checkpoint", args, "val.bin");
  ng_model_free(student);
  ng_model_free(teacher);
  ng_model_free(wide);
}

int main(void) {
  const char *root = getenv("NG_ROOT");
  bin = getenv("NG_BIN");
  if (!root || !bin) {
    fprintf(stderr, "set NG_ROOT and NG_BIN (tests/run.sh does)\n");
    return 1;
  }
  be = ng_backend_cpu();
  NG_ASSERT(mkdtemp(dir) != NULL);
  write_shard();
  test_rms_stats();
  test_token_classes();
  test_hidden0_classes();
  test_points();
  test_norms_mode();
  test_golden(root);
  test_command();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
