// normgrow: the teacher top-k cache (format in topk.h).
#include "normgrow/topk.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/plan.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "normgrow's file formats are little-endian; this host is not"
#endif

typedef struct {
  char magic[8];
  uint32_t version, k, vocab_size, seq;
  double temperature;
  uint64_t windows, shard_tokens, shard_checksum, reserved;
} topk_header;
_Static_assert(sizeof(topk_header) == NG_TOPK_HEADER, "top-k cache header is 64 bytes");

uint64_t ng_shard_checksum(const ng_shard *s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int f = 0; f < s->n_parts; f++) {  // the bytes of every token, in order
    const uint8_t *p = (const uint8_t *)s->parts[f].tokens;
    for (uint64_t i = 0; i < s->parts[f].n * 4; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  }
  return h;
}

// ---------------------------------------------------------------- building

// The k largest of x [V] into ids/vals, in no particular order. Replacing the
// smallest kept value rescans for the new smallest: rare after the first
// entries, so about V + k^2 log(V/k) steps per row.
void ng_top_k(const float *x, int64_t V, int64_t k, uint32_t *ids, float *vals) {
  int64_t lo = 0;  // where the smallest kept value is
  for (int64_t j = 0; j < V; j++) {
    if (j < k) {
      ids[j] = (uint32_t)j, vals[j] = x[j];
      if (x[j] < vals[lo]) lo = j;
      continue;
    }
    if (x[j] <= vals[lo]) continue;
    ids[lo] = (uint32_t)j, vals[lo] = x[j];
    for (int64_t i = 0; i < k; i++)
      if (vals[i] < vals[lo]) lo = i;
  }
}

float ng_logsumexp(const float *x, int64_t V, double inv_tau) {
  float mx = x[0];
  for (int64_t j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
  double z = 0.0;
  for (int64_t j = 0; j < V; j++) z += exp(((double)x[j] - mx) * inv_tau);
  return (float)((double)mx * inv_tau + log(z));
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, (off_t)off);
    if (w < 0) return ng_fail("%s: cannot write: %s", path, strerror(errno));
    p += w, n -= (size_t)w, off += (uint64_t)w;
  }
  return 0;
}

typedef struct {
  int fd;
  const char *path;  // the cache file (written through its temp file)
  uint64_t P, k;
  int64_t vocab;  // the shard's ids [0, vocab): a padded teacher's other rows are left out
} cache_out;

// Rows [p0, p0 + rows) of logits [rows, V] (their first o->vocab columns)
// into the file's three regions.
static int write_rows(const cache_out *o, const float *logits, int64_t V, uint64_t p0,
                      int64_t rows, double inv_tau, uint32_t *ids, float *vals, float *lse) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    ng_top_k(logits + (size_t)r * V, o->vocab, (int64_t)o->k, ids + (size_t)r * o->k, vals + (size_t)r * o->k);
    lse[r] = ng_logsumexp(logits + (size_t)r * V, o->vocab, inv_tau);
  }
  uint64_t kb = o->k * 4, base = NG_TOPK_HEADER;
  return pwrite_all(o->fd, ids, (size_t)rows * kb, base + p0 * kb, o->path) ||
         pwrite_all(o->fd, vals, (size_t)rows * kb, base + o->P * kb + p0 * kb, o->path) ||
         pwrite_all(o->fd, lse, (size_t)rows * 4, base + 2 * o->P * kb + p0 * 4, o->path);
}

// Windows [w0, w0 + nb) through the teacher, into the file.
static int build_batch(ng_model *t, ng_acts *a, const ng_shard *s, const cache_out *o,
                       int64_t seq, uint64_t w0, int64_t nb, double inv_tau, int32_t *tok,
                       uint32_t *ids, float *vals, float *lse) {
  ng_backend *be = t->be;
  int64_t V = t->cfg.vocab_size, n = nb * seq;
  ng_shard_read(s, w0 * (uint64_t)seq, n, tok);
  for (int64_t i = n; i < a->N; i++) tok[i] = 0;  // a short last batch: padding rows
  int32_t *dtok = be->alloc(be, (size_t)a->N * sizeof(int32_t));
  be->upload(be, dtok, tok, (size_t)a->N * sizeof(int32_t));
  ng_model_forward(t, a, dtok, NULL);
  ng_model_logits(t, a, 0, a->N);  // [N, V]: the acts hold all rows
  be->free(be, dtok);
  float *logits = ng_xmalloc((size_t)n * (size_t)V * sizeof(float));
  be->download(be, logits, a->logits, (size_t)n * (size_t)V * sizeof(float));
  int rc = write_rows(o, logits, V, w0 * (uint64_t)seq, n, inv_tau, ids, vals, lse);
  free(logits);
  return rc;
}

static int build_into(ng_model *t, const ng_shard *s, topk_header *h, int64_t batch,
                      cache_out *o) {
  int64_t seq = h->seq;
  if (pwrite_all(o->fd, h, sizeof *h, 0, o->path)) return -1;
  ng_acts *a = ng_acts_create(t, batch, seq, false);
  int32_t *tok = ng_xmalloc((size_t)(batch * seq) * sizeof(int32_t));
  uint32_t *ids = ng_xmalloc((size_t)(batch * seq) * o->k * sizeof(uint32_t));
  float *vals = ng_xmalloc((size_t)(batch * seq) * o->k * sizeof(float));
  float *lse = ng_xmalloc((size_t)(batch * seq) * sizeof(float));
  int rc = 0;
  for (uint64_t w0 = 0; w0 < h->windows && rc == 0; w0 += (uint64_t)batch) {
    int64_t nb = h->windows - w0 < (uint64_t)batch ? (int64_t)(h->windows - w0) : batch;
    rc = build_batch(t, a, s, o, seq, w0, nb, 1.0 / h->temperature, tok, ids, vals, lse);
  }
  free(tok), free(ids), free(vals), free(lse);
  ng_acts_free(t, a);
  return rc;
}

// build_into's buffers within the machine's memory: the teacher's forward
// with logits of every row [N, V], their host copy, and per row its token,
// k ids and values and the log-sum-exp.
static int check_build_memory(const ng_model *t, int64_t batch, int64_t seq, int64_t k) {
  ng_acts_options all_rows = {0};
  double N = (double)batch * (double)seq, V = (double)t->cfg.vocab_size;
  double bytes = 4.0 * (double)ng_plan_acts_floats(&t->cfg, batch, seq, &all_rows) + 4.0 * N * V +
                 N * (8.0 + 8.0 * (double)k);
  char what[160];
  snprintf(what, sizeof what, "teacher-cache: --batch %lld x --seq %lld (k %lld)", (long long)batch,
           (long long)seq, (long long)k);
  return ng_plan_check_more_memory(&t->cfg, bytes, what);
}

int ng_topk_build(ng_model *teacher, const ng_shard *s, int64_t k, int64_t seq,
                  double temperature, int64_t batch, const char *path) {
  if (k < 1 || k > (int64_t)s->vocab_size) return ng_fail("--k: %lld is outside [1, %u]", (long long)k, s->vocab_size);
  if (s->vocab_size > teacher->cfg.vocab_size)
    return ng_fail("%s: vocabulary of %u tokens, larger than the teacher's %lld", s->path, s->vocab_size, (long long)teacher->cfg.vocab_size);
  if (seq < 1 || s->n_tokens < (uint64_t)seq + 1) return ng_fail("%s: shorter than one window of %lld + 1 tokens", s->path, (long long)seq);
  topk_header h = {.version = NG_TOPK_VERSION, .k = (uint32_t)k, .vocab_size = s->vocab_size,
                   .seq = (uint32_t)seq, .temperature = temperature,
                   .windows = (s->n_tokens - 1) / (uint64_t)seq, .shard_tokens = s->n_tokens,
                   .shard_checksum = ng_shard_checksum(s)};
  memcpy(h.magic, NG_TOPK_MAGIC, 8);
  int64_t nb = h.windows < (uint64_t)batch ? (int64_t)h.windows : batch;  // no buffers for windows that do not exist
  if (check_build_memory(teacher, nb, seq, k)) return -1;
  ng_temp_file out;
  if (ng_temp_create(&out, path) != 0) return -1;
  cache_out o = {fileno(out.fp), path, h.windows * (uint64_t)seq, (uint64_t)k, s->vocab_size};
  return ng_temp_commit(&out, build_into(teacher, s, &h, nb, &o));
}

// ---------------------------------------------------------------- reading

static int check_header(const topk_header *h, size_t size, const ng_shard *s) {
  if (memcmp(h->magic, NG_TOPK_MAGIC, 8) != 0) return ng_fail("not a normgrow top-k cache (bad magic)");
  if (h->version != NG_TOPK_VERSION) return ng_fail("version %u, expected %u", h->version, NG_TOPK_VERSION);
  if (h->k < 1 || h->k > h->vocab_size || h->seq < 1 || h->reserved != 0 ||
      !(h->temperature > 0.0) || !isfinite(h->temperature))
    return ng_fail("header: k %u, vocab_size %u, seq %u, temperature %g are not valid", h->k,
                   h->vocab_size, h->seq, h->temperature);
  size_t P, row, body;
  if (ng_mul_size(h->windows, h->seq, &P) || ng_mul_size(h->k, 8, &row) ||
      ng_mul_size(P, row + 4, &body) || body > SIZE_MAX - NG_TOPK_HEADER ||
      size != NG_TOPK_HEADER + body)
    return ng_fail("file is %zu bytes, header says 64 + %llu windows x %u positions x (8 x %u + 4)",
                   size, (unsigned long long)h->windows, h->seq, h->k);
  if (h->shard_tokens != s->n_tokens || h->shard_checksum != ng_shard_checksum(s) ||
      h->vocab_size != s->vocab_size)
    return ng_fail("was made from another shard than %s", s->path);
  // As the builder counts them: every window and its last target inside the
  // shard (windows x seq + 1 <= tokens), and at least one.
  uint64_t fit = s->n_tokens > 0 ? (s->n_tokens - 1) / h->seq : 0;
  if (h->windows != fit || h->windows == 0)
    return ng_fail("header: %llu windows of %u tokens, but %s (%llu tokens) holds %llu",
                   (unsigned long long)h->windows, h->seq, s->path,
                   (unsigned long long)s->n_tokens, (unsigned long long)fit);
  return 0;
}

int ng_topk_open(ng_topk_cache *c, const char *path, const ng_shard *s) {
  memset(c, 0, sizeof *c);
  uint8_t *map;
  size_t size;
  if (ng_map_file(path, NG_TOPK_HEADER, "top-k cache header", &map, &size) != 0) return -1;
  topk_header h;
  memcpy(&h, map, sizeof h);
  if (check_header(&h, size, s) != 0) {
    ng_unmap_file(map, size);
    return ng_fail_prefix(path);
  }
  uint64_t P = h.windows * h.seq;
  *c = (ng_topk_cache){ng_xstrdup(path), map, size, h.k, h.vocab_size, h.seq,
                       h.temperature, h.windows, h.shard_tokens, h.shard_checksum,
                       (const uint32_t *)(map + NG_TOPK_HEADER),
                       (const float *)(map + NG_TOPK_HEADER + P * h.k * 4),
                       (const float *)(map + NG_TOPK_HEADER + 2 * P * h.k * 4)};
  return 0;
}

void ng_topk_close(ng_topk_cache *c) {
  ng_unmap_file(c->map, c->map_size);
  free(c->path);
  memset(c, 0, sizeof *c);
}

int ng_topk_batch(const ng_topk_cache *c, const ng_shard *s, const int64_t *windows, int64_t B,
                  int32_t *tokens, int32_t *targets, int32_t *ids, float *vals, float *lse) {
  uint64_t T = c->seq, k = c->k;
  for (int64_t b = 0; b < B; b++) {
    NG_ASSERT(windows[b] >= 0 && (uint64_t)windows[b] < c->windows);
    uint64_t p0 = (uint64_t)windows[b] * T;
    ng_shard_read(s, p0, (int64_t)T, tokens + (uint64_t)b * T);
    ng_shard_read(s, p0 + 1, (int64_t)T, targets + (uint64_t)b * T);
    for (uint64_t i = 0; i < T * k; i++) {
      uint32_t id = c->ids[p0 * k + i];
      if (id >= c->vocab_size)
        return ng_fail("%s: id %u at position %llu is >= vocab_size %u", c->path, id,
                       (unsigned long long)(p0 + i / k), c->vocab_size);
      ids[(uint64_t)b * T * k + i] = (int32_t)id;
    }
    for (uint64_t i = 0; i < T * k; i++)
      if (!isfinite(c->vals[p0 * k + i]))
        return ng_fail("%s: value %g at position %llu is not finite", c->path, c->vals[p0 * k + i],
                       (unsigned long long)(p0 + i / k));
    for (uint64_t t = 0; t < T; t++)
      if (!isfinite(c->lse[p0 + t]))
        return ng_fail("%s: log-sum-exp %g at position %llu is not finite", c->path, c->lse[p0 + t],
                       (unsigned long long)(p0 + t));
    memcpy(vals + (uint64_t)b * T * k, c->vals + p0 * k, T * k * sizeof(float));
    memcpy(lse + (uint64_t)b * T, c->lse + p0, T * sizeof(float));
  }
  return 0;
}
