// The teacher top-k cache: its entries against the teacher's own logits, the
// file's validation, a cache built by several ranks into parts and a manifest,
// read as one process's.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/golden.h"
#include "normgrow/topk.h"

static char dir[64];
static ng_backend *be;

static ng_model_config teacher_config(void) {
  return (ng_model_config){.vocab_size = 40, .hidden_size = 16, .intermediate_size = 24, .num_hidden_layers = 2,
                           .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 4, .rope_theta = 1e4,
                           .rms_norm_eps = 1e-6, .tie_word_embeddings = true, .final_norm = true};
}

static ng_model *teacher(void) {
  ng_model_config c = teacher_config();
  ng_model *m = ng_model_create(be, &c, false);
  ng_rng r;
  ng_rng_seed(&r, 3);
  ng_model_init_random(m, &r, 0.5);
  return m;
}

static void path_of(char *out, size_t n, const char *file) { snprintf(out, n, "%s/%s", dir, file); }

// Window w of the shard through the teacher: its logits [seq, V] (caller frees).
static float *window_logits(ng_model *t, const ng_shard *s, int64_t w, int64_t seq) {
  int32_t tok[16];
  ng_shard_read(s, (uint64_t)(w * seq), seq, tok);
  ng_acts *a = ng_acts_create(t, 1, seq, false);
  ng_model_forward(t, a, tok, NULL);
  ng_model_logits(t, a, 0, a->N);
  size_t n = (size_t)seq * (size_t)t->cfg.vocab_size;
  float *out = ng_xmalloc(n * sizeof(float));
  memcpy(out, a->logits, n * sizeof(float));
  ng_acts_free(t, a);
  return out;
}

// The cache's entries for the last window against the teacher's logits, over
// the shard's ids [0, Vs) (a teacher padded past them: its other rows left out).
// The cache ran the teacher over a batch of windows, this check over one window:
// two matmuls of different shapes, which a BLAS blocks (and so rounds)
// differently. So values are held to the contract's forward bound, relative to
// the row's largest |logit| (docs/golden-contract.md), and the selection to
// "no id left out is above the smallest cached value by more than that bound":
// exact only where no two logits lie within rounding of each other.
static void test_entries(ng_model *t, const ng_shard *s, const ng_topk_cache *c, const char *name) {
  int64_t V = 40, Vs = c->vocab_size, k = c->k, seq = c->seq, w = (int64_t)c->windows - 1;
  float *logits = window_logits(t, s, w, seq);
  bool ids_ok = true;
  double worst_val = 0.0, worst_excess = 0.0, worst_lse = 0.0, worst_rest = 0.0;
  for (int64_t p = 0; p < seq; p++) {
    const float *row = logits + p * V;
    const uint32_t *ids = c->ids + ((uint64_t)w * seq + p) * k;
    const float *vals = c->vals + ((uint64_t)w * seq + p) * k;
    bool cached[40] = {false};
    double scale = 0.0, kth = INFINITY;
    for (int64_t j = 0; j < Vs; j++) scale = fmax(scale, fabs(row[j]));
    for (int64_t j = 0; j < k; j++) {
      ids_ok &= ids[j] < Vs && !cached[ids[j] < Vs ? ids[j] : 0];
      if (ids[j] >= Vs) continue;
      cached[ids[j]] = true;
      worst_val = fmax(worst_val, fabs(vals[j] - row[ids[j]]) / scale);
      kth = fmin(kth, vals[j]);
    }
    for (int64_t j = 0; j < Vs; j++)
      if (!cached[j]) worst_excess = fmax(worst_excess, (row[j] - kth) / scale);
    double mx = row[0], z = 0.0, off = 0.0;
    for (int64_t j = 1; j < Vs; j++) mx = fmax(mx, row[j]);
    for (int64_t j = 0; j < Vs; j++) z += exp((row[j] - mx) / c->temperature);
    for (int64_t j = 0; j < Vs; j++) off += cached[j] ? 0.0 : exp((row[j] - mx) / c->temperature);
    worst_lse = fmax(worst_lse, fabs(c->lse[(uint64_t)w * seq + p] - (mx / c->temperature + log(z))));
    worst_rest = fmax(worst_rest, fabs(c->rest[(uint64_t)w * seq + p] - log(off / z)));
  }
  CHECK(ids_ok && worst_val <= NG_GOLDEN_TOL_FORWARD && worst_excess <= NG_GOLDEN_TOL_FORWARD &&
            worst_lse < 1e-5 && worst_rest < 1e-5,
        name, "ids %s, value error %.2e, an id left out above the k-th by %.2e, lse error %.2e, rest "
        "error %.2e (bound %.0e)", ids_ok ? "distinct and in range" : "out of range or repeated",
        worst_val, worst_excess, worst_lse, worst_rest, NG_GOLDEN_TOL_FORWARD);
  free(logits);
}

static void write_bytes(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(p, 1, n, f);
  fclose(f);
}

static void expect_open_error(const char *name, const char *path, const ng_shard *s, const char *want) {
  ng_topk_cache c;
  int rc = ng_topk_open(&c, path, s);
  CHECK(rc != 0 && strstr(ng_error(), want) && strstr(ng_error(), path), name, "rc %d: %s", rc, ng_error());
  if (rc == 0) ng_topk_close(&c);
}

static void test_validation(const ng_topk_cache *c, const ng_shard *s, const ng_shard *other) {
  char path[128];
  path_of(path, sizeof path, "bad.topk");
  write_bytes(path, c->map, c->map_size - 4);
  expect_open_error("truncated cache", path, s, "bytes");
  uint8_t *copy = ng_xmalloc(c->map_size);
  memcpy(copy, c->map, c->map_size);
  copy[0] = 'X';
  write_bytes(path, copy, c->map_size);
  expect_open_error("bad magic", path, s, "magic");
  memcpy(copy, c->map, c->map_size);
  copy[12] = 0;  // k = 0
  write_bytes(path, copy, c->map_size);
  expect_open_error("k of 0", path, s, "not valid");
  memcpy(copy, c->map, c->map_size);
  copy[8] = 1;  // a cache of the format without the rest region
  write_bytes(path, copy, c->map_size);
  expect_open_error("a version 1 cache is refused, to be made again", path, s,
                    "version 1, a cache without the teacher's mass off the cached ids: make it again");
  // A header of 0 windows with a body of 0 bytes (a division by zero in the trainer before).
  uint64_t windows = 0;
  memcpy(copy, c->map, NG_TOPK_HEADER);
  memcpy(copy + 32, &windows, 8);
  write_bytes(path, copy, NG_TOPK_HEADER);
  expect_open_error("0 windows", path, s, "0 windows");
  // One window more than the shard holds, with a body of the size it implies:
  // its batches would read tokens past the shard's end.
  size_t row = (size_t)c->seq * (8 * (size_t)c->k + 8), big = c->map_size + row;
  uint8_t *longer = ng_xcalloc(big, 1);
  memcpy(longer, c->map, NG_TOPK_HEADER);
  windows = c->windows + 1;
  memcpy(longer + 32, &windows, 8);
  write_bytes(path, longer, big);
  expect_open_error("a window past the shard's end", path, s, "windows");
  free(longer);
  free(copy);
  expect_open_error("cache of another shard", c->path, other, "another shard");
}

// A cache whose value (or log-sum-exp) at a position of window 2 is not
// finite, or whose log mass off the cache there is not a log-probability: the
// batch holding that window is refused, naming the position.
static void expect_batch_error(const char *name, const ng_topk_cache *c, const ng_shard *s, size_t offset,
                               float bad, const char *want) {
  char path[128];
  path_of(path, sizeof path, "nonfinite.topk");
  uint8_t *copy = ng_xmalloc(c->map_size);
  memcpy(copy, c->map, c->map_size);
  memcpy(copy + offset, &bad, 4);
  write_bytes(path, copy, c->map_size);
  free(copy);
  ng_topk_cache d;
  NG_ASSERT(ng_topk_open(&d, path, s) == 0);
  size_t T = d.seq, k = d.k;
  int32_t *tok = ng_xmalloc(T * 4), *tgt = ng_xmalloc(T * 4), *ids = ng_xmalloc(T * k * 4);
  float *vals = ng_xmalloc(T * k * 4), *lse = ng_xmalloc(T * 4), *rest = ng_xmalloc(T * 4);
  int64_t w = 1;
  int ok_other = ng_topk_batch(&d, s, &w, 1, tok, tgt, ids, vals, lse, rest);
  w = 2;
  int rc = ng_topk_batch(&d, s, &w, 1, tok, tgt, ids, vals, lse, rest);
  CHECK(ok_other == 0 && rc != 0 && strstr(ng_error(), want) && strstr(ng_error(), path), name, "rc %d: %s", rc, ng_error());
  free(tok), free(tgt), free(ids), free(vals), free(lse), free(rest);
  ng_topk_close(&d);
}

static void test_nonfinite(const ng_topk_cache *c, const ng_shard *s) {
  size_t P = c->windows * c->seq, k = c->k, pos = 2 * (size_t)c->seq + 3;
  size_t vals = NG_TOPK_HEADER + P * k * 4, lse = NG_TOPK_HEADER + 2 * P * k * 4, rest = lse + P * 4;
  expect_batch_error("a NaN value in the cache is refused", c, s, vals + (pos * k + 1) * 4, NAN, "value nan at position 35");
  expect_batch_error("an infinite log-sum-exp in the cache is refused", c, s, lse + pos * 4, INFINITY,
                     "log-sum-exp inf at position 35");
  expect_batch_error("a NaN log mass off the cache is refused", c, s, rest + pos * 4, NAN,
                     "log mass off the cache nan at position 35");
  expect_batch_error("a log mass off the cache above 0 is refused", c, s, rest + pos * 4, 0.5f,
                     "log mass off the cache 0.5 at position 35 is not a log-probability");
}

// A teacher whose logits of one batch need more than twice the machine's
// memory (a skeleton: nothing of it is allocated): refused naming the
// settings, before any buffer or file.
static void test_memory(const ng_shard *s) {
  ng_model_config c = teacher_config();
  while (4.0 * 12 * 16 * (double)c.vocab_size < 2.0 * ng_machine_memory()) c.vocab_size *= 2;
  ng_model *skel = ng_model_create(NULL, &c, false);
  char path[128];
  path_of(path, sizeof path, "huge.topk");
  int rc = ng_topk_build(skel, s, 5, 16, 2.0, 100, path);
  CHECK(rc != 0 && strstr(ng_error(), "teacher-cache: --batch 12 x --seq 16 (k 5)") &&
            strstr(ng_error(), "of memory of this machine") && access(path, F_OK) != 0,
        "a teacher whose batch of logits exceeds the machine's memory is refused, no file made", "rc %d: %s", rc,
        ng_error());
  ng_model_free(skel);
}

// ---------------------------------------------------------------- parts and a manifest

static void no_sum(ng_comm *c, double *buf, int64_t n) { (void)c, (void)buf, (void)n; }

// Every window's entries of a and b the same, bit for bit.
static bool same_entries(const ng_topk_cache *a, const ng_topk_cache *b, const ng_shard *s) {
  int64_t T = a->seq, k = a->k;
  int32_t *tok = ng_xmalloc((size_t)T * 4), *tgt = ng_xmalloc((size_t)T * 4);
  int32_t *ids[2] = {ng_xmalloc((size_t)(T * k) * 4), ng_xmalloc((size_t)(T * k) * 4)};
  float *vals[2] = {ng_xmalloc((size_t)(T * k) * 4), ng_xmalloc((size_t)(T * k) * 4)};
  float *lse[2] = {ng_xmalloc((size_t)T * 4), ng_xmalloc((size_t)T * 4)};
  float *rest[2] = {ng_xmalloc((size_t)T * 4), ng_xmalloc((size_t)T * 4)};
  bool same = a->windows == b->windows && a->k == b->k && a->seq == b->seq;
  for (int64_t w = 0; same && w < (int64_t)a->windows; w++) {
    same = ng_topk_batch(a, s, &w, 1, tok, tgt, ids[0], vals[0], lse[0], rest[0]) == 0 &&
           ng_topk_batch(b, s, &w, 1, tok, tgt, ids[1], vals[1], lse[1], rest[1]) == 0 &&
           memcmp(ids[0], ids[1], (size_t)(T * k) * 4) == 0 && memcmp(vals[0], vals[1], (size_t)(T * k) * 4) == 0 &&
           memcmp(lse[0], lse[1], (size_t)T * 4) == 0 && memcmp(rest[0], rest[1], (size_t)T * 4) == 0;
  }
  free(tok), free(tgt);
  for (int i = 0; i < 2; i++) free(ids[i]), free(vals[i]), free(lse[i]), free(rest[i]);
  return same;
}

// The cache built by 3 ranks (here one after another, on communicators whose
// sums do nothing; rank 0, which writes the manifest, last) reads as the one
// file one process builds, window for window; a part alone, a manifest with a
// part missing, out of order or a wrong count, and more ranks than windows are
// refused in one line.
static void test_parts(ng_model *t, const ng_shard *s) {
  char one[128], many[128], bad[128], text[1024];
  path_of(one, sizeof one, "one.topk");
  path_of(many, sizeof many, "many.topk");
  path_of(bad, sizeof bad, "bad-manifest.topk");
  NG_ASSERT(ng_topk_build(t, s, 5, 16, 2.0, 1, one) == 0);
  int rc = 0;
  for (int r = 2; r >= 0; r--) {
    ng_comm rank = {.name = "fake", .rank = r, .size = 3, .allreduce_f64 = no_sum};
    rc |= ng_topk_build_ranks(t, s, 5, 16, 2.0, 1, many, &rank);
  }
  ng_topk_cache a, b;
  bool opened = rc == 0 && ng_topk_open(&a, one, s) == 0 && ng_topk_open(&b, many, s) == 0;
  CHECK(opened && b.n_parts == 3 && b.parts[1].first_window == 4 && b.parts[2].windows == 4 &&
            same_entries(&a, &b, s),
        "3 ranks: parts of 4 windows and a manifest, read as the one process's cache, window for window",
        "rc %d: %s", rc, ng_error());
  if (opened) ng_topk_close(&a), ng_topk_close(&b);
  char part[160];
  snprintf(part, sizeof part, "%s.part-2-of-3", many);
  expect_open_error("a part opened alone is refused", part, s, "manifest");
  struct {
    const char *name, *files, *want;
    int windows;
  } cases[] = {
      {"a manifest without its second part", "\"many.topk.part-1-of-3\", \"many.topk.part-3-of-3\"", "first window", 12},
      {"a manifest of parts out of order", "\"many.topk.part-2-of-3\", \"many.topk.part-1-of-3\", \"many.topk.part-3-of-3\"",
       "first window", 12},
      {"a manifest of too few windows", "\"many.topk.part-1-of-3\", \"many.topk.part-2-of-3\", \"many.topk.part-3-of-3\"",
       "manifest says 11", 11},
      {"a manifest naming a missing file", "\"many.topk.part-1-of-3\", \"absent.topk\"", "absent.topk", 12},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char files[400] = "", *at = files;
    for (const char *f = cases[i].files; *f;) {  // "a", "b" -> {"file": "a"}, {"file": "b"}
      const char *end = strchr(f + 1, '"');
      at += sprintf(at, "%s{\"file\": %.*s}", at == files ? "" : ", ", (int)(end - f + 1), f);
      f = end + 1 + strspn(end + 1, ", ");
    }
    snprintf(text, sizeof text, "{\"format\": \"normgrow-topk-parts\", \"windows\": %d, \"files\": [%s]}",
             cases[i].windows, files);
    write_bytes(bad, (const uint8_t *)text, strlen(text));
    expect_open_error(cases[i].name, bad, s, cases[i].want);
  }
  ng_comm crowd = {.name = "fake", .rank = 0, .size = 13, .allreduce_f64 = no_sum};
  rc = ng_topk_build_ranks(t, s, 5, 16, 2.0, 1, bad, &crowd);
  CHECK(rc != 0 && strstr(ng_error(), "12 windows of 16 tokens for 13 ranks"),
        "more ranks than windows: refused in one line", "rc %d: %s", rc, ng_error());
}

// ng_topk_logmass on rows whose answer is known in closed form: a confident
// row (one logit 30 above 39 zeros, k = 1, tau 1), whose rest mass 39 e^-30
// lies below the rounding of its fp32 log-sum-exp, so that 1 - Q_1 is 0 where
// the rest is log 39 - 30 - log(1 + 39 e^-30); a row with ties at the k-th
// value (3, then 1 three times, then 0; k = 2): one 1 kept, the rest 2 e + 1.
static void test_logmass(void) {
  float x[40] = {30.0f}, vals[2], lse, rest;
  uint32_t ids[2];
  ng_top_k(x, 40, 1, ids, vals);
  ng_topk_logmass(x, 40, vals, 1, 1.0, &lse, &rest);
  double want = log(39.0) - 30.0 - log1p(39.0 * exp(-30.0));
  double old_rule = 1.0 - exp((double)vals[0] - lse);  // 1 - Q_1 from the stored lse
  CHECK(ids[0] == 0 && fabs(rest - want) <= 1e-6 * fabs(want) && old_rule <= 0.0,
        "a confident row's mass off its top 1 (39 e^-30), where 1 - Q_1 is 0 at fp32's lse",
        "rest %.9g, expected %.9g; 1 - Q_1 = %.3g", rest, want, old_rule);
  float tied[5] = {3.0f, 1.0f, 1.0f, 1.0f, 0.0f};
  ng_top_k(tied, 5, 2, ids, vals);
  ng_topk_logmass(tied, 5, vals, 2, 1.0, &lse, &rest);
  double z = exp(3.0) + 3.0 * exp(1.0) + 1.0;
  CHECK(fabs(lse - log(z)) <= 1e-6 && fabs(rest - log((2.0 * exp(1.0) + 1.0) / z)) <= 1e-6,
        "a row tied at the k-th value: the tied ids not kept are in the rest",
        "lse %.9g (expected %.9g), rest %.9g (expected %.9g)", lse, log(z), rest,
        log((2.0 * exp(1.0) + 1.0) / z));
  ng_topk_logmass(tied, 5, tied, 5, 1.0, &lse, &rest);
  CHECK(isinf(rest) && rest < 0, "every id kept: the rest is -inf", "rest %g", rest);
}

int main(void) {
  be = ng_backend_cpu();
  test_logmass();
  snprintf(dir, sizeof dir, "/tmp/ng_topk_XXXXXX");
  NG_ASSERT(mkdtemp(dir));
  uint32_t tokens[200], other_tokens[200];
  ng_rng r;
  ng_rng_seed(&r, 9);
  for (int i = 0; i < 200; i++) tokens[i] = (uint32_t)ng_rng_below(&r, 40), other_tokens[i] = tokens[i] ^ 1;
  char shard_path[128], other_path[128], cache_path[128];
  path_of(shard_path, sizeof shard_path, "s.bin");
  path_of(other_path, sizeof other_path, "o.bin");
  path_of(cache_path, sizeof cache_path, "s.topk");
  NG_ASSERT(ng_shard_write(shard_path, 40, 39, tokens, 200) == 0);
  NG_ASSERT(ng_shard_write(other_path, 40, 39, other_tokens, 200) == 0);
  ng_shard s, other;
  NG_ASSERT(ng_shard_open(&s, shard_path) == 0 && ng_shard_open(&other, other_path) == 0);
  ng_model *t = teacher();
  CHECK(ng_topk_build(t, &s, 5, 16, 2.0, 3, cache_path) == 0, "build a top-5 cache (batches of 3 windows)", "%s", ng_error());
  ng_topk_cache c;
  CHECK(ng_topk_open(&c, cache_path, &s) == 0 && c.windows == 199 / 16 && c.k == 5,
        "open and validate the cache", "%s", ng_error());
  test_entries(t, &s, &c, "cache holds the teacher's k largest logits, the log-sum-exp and the log mass off them");
  test_validation(&c, &s, &other);
  test_nonfinite(&c, &s);
  // A batch larger than the windows (12 here) gets buffers for the windows only:
  // 2^40 windows' buffers cannot be allocated.
  char clamped_path[128];
  path_of(clamped_path, sizeof clamped_path, "clamped.topk");
  ng_topk_cache d;
  int rc = ng_topk_build(t, &s, 5, 16, 2.0, (int64_t)1 << 40, clamped_path);
  ng_topk_close(&c);
  NG_ASSERT(ng_topk_build(t, &s, 5, 16, 2.0, 12, cache_path) == 0 && ng_topk_open(&c, cache_path, &s) == 0);
  // exact: both builds run the teacher on batches of the same 12 windows (the
  // same calls at the same shapes and threads)
  CHECK(rc == 0 && ng_topk_open(&d, clamped_path, &s) == 0 && d.map_size == c.map_size &&
            memcmp(d.map, c.map, c.map_size) == 0,
        "a batch of 2^40 windows on a shard of 12 builds the cache of a batch of 12", "rc %d: %s", rc, ng_error());
  ng_topk_close(&d);
  ng_topk_close(&c);
  // A shard of 30 ids for a teacher of 40 rows (a padded vocabulary).
  char small_path[128];
  path_of(small_path, sizeof small_path, "small.bin");
  for (int i = 0; i < 200; i++) tokens[i] %= 30;
  ng_shard small;
  NG_ASSERT(ng_shard_write(small_path, 30, 29, tokens, 200) == 0 && ng_shard_open(&small, small_path) == 0);
  NG_ASSERT(ng_topk_build(t, &small, 5, 16, 1.0, 4, cache_path) == 0 && ng_topk_open(&c, cache_path, &small) == 0);
  test_entries(t, &small, &c, "padded teacher vocabulary: cache over the shard's ids only");
  ng_topk_close(&c);
  ng_shard_close(&small);
  test_memory(&s);
  test_parts(t, &s);
  ng_model_free(t);
  ng_shard_close(&s);
  ng_shard_close(&other);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
