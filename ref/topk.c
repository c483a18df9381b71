// normgrow: the teacher top-k cache (format in topk.h).
#include "normgrow/topk.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/plan.h"

typedef struct {
  char magic[8];
  uint32_t version, k, vocab_size, seq;
  double temperature;
  uint64_t windows, shard_tokens, shard_checksum, first_window;
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

void ng_topk_logmass(const float *x, int64_t V, const float *vals, int64_t k, double inv_tau,
                     float *lse, float *rest) {
  float mx = x[0], kth = vals[0];
  for (int64_t j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
  for (int64_t j = 1; j < k; j++) kth = vals[j] < kth ? vals[j] : kth;
  int64_t tied = 0;  // ids tied with the smallest kept value, less the kept ones
  for (int64_t j = 0; j < k; j++) tied -= vals[j] == kth;
  double z = 0.0, off = 0.0;
  for (int64_t j = 0; j < V; j++) {
    double e = exp(((double)x[j] - mx) * inv_tau);
    z += e;
    if (x[j] < kth) off += e;
    tied += x[j] == kth;
  }
  off += (double)tied * exp(((double)kth - mx) * inv_tau);
  *lse = (float)((double)mx * inv_tau + log(z));
  *rest = (float)(log(off) - log(z));
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

// The backend's top-k of a batch [rows, k], [rows] and [rows], downloaded to the host.
typedef struct {
  uint32_t *ids, *dev_ids;
  float *vals, *dev_vals, *lse, *dev_lse, *rest, *dev_rest;
} topk_rows;

// Rows [p0, p0 + rows) of `r` (host) into the file's four regions.
static int write_rows(const cache_out *o, const topk_rows *r, uint64_t p0, int64_t rows) {
  uint64_t kb = o->k * 4, base = NG_TOPK_HEADER;
  return pwrite_all(o->fd, r->ids, (size_t)rows * kb, base + p0 * kb, o->path) ||
         pwrite_all(o->fd, r->vals, (size_t)rows * kb, base + o->P * kb + p0 * kb, o->path) ||
         pwrite_all(o->fd, r->lse, (size_t)rows * 4, base + 2 * o->P * kb + p0 * 4, o->path) ||
         pwrite_all(o->fd, r->rest, (size_t)rows * 4, base + 2 * o->P * kb + o->P * 4 + p0 * 4, o->path);
}

// Windows [w0, w0 + nb) through the teacher, their top k selected by the
// backend (the logits stay there), into the file.
// (w0: the shard's window, at window `at` of the file.)
static int build_batch(ng_model *t, ng_acts *a, const ng_shard *s, const cache_out *o,
                       int64_t seq, uint64_t w0, uint64_t at, int64_t nb, double inv_tau,
                       int32_t *tok, int32_t *dtok, topk_rows *r) {
  ng_backend *be = t->be;
  int64_t n = nb * seq;
  size_t k = (size_t)o->k;
  ng_shard_read(s, w0 * (uint64_t)seq, n, tok);
  for (int64_t i = n; i < a->N; i++) tok[i] = 0;  // a short last batch: padding rows
  be->upload(be, dtok, tok, (size_t)a->N * sizeof(int32_t));
  ng_model_forward(t, a, dtok, NULL);
  ng_model_logits(t, a, 0, a->N);  // [N, V]: the acts hold all rows
  be->topk(be, a->logits, n, t->cfg.vocab_size, o->vocab, (int64_t)k, inv_tau, r->dev_ids, r->dev_vals,
           r->dev_lse, r->dev_rest);
  be->download(be, r->ids, r->dev_ids, (size_t)n * k * sizeof(uint32_t));
  be->download(be, r->vals, r->dev_vals, (size_t)n * k * sizeof(float));
  be->download(be, r->lse, r->dev_lse, (size_t)n * sizeof(float));
  be->download(be, r->rest, r->dev_rest, (size_t)n * sizeof(float));
  return write_rows(o, r, at * (uint64_t)seq, n);
}

// The file's windows [h->first_window, + h->windows), batch at a time.
static int build_into(ng_model *t, const ng_shard *s, topk_header *h, int64_t batch,
                      cache_out *o) {
  ng_backend *be = t->be;
  int64_t seq = h->seq;
  size_t N = (size_t)(batch * seq), k = o->k;
  if (pwrite_all(o->fd, h, sizeof *h, 0, o->path)) return -1;
  ng_acts *a = ng_acts_create(t, batch, seq, false);
  int32_t *tok = ng_xmalloc(N * sizeof(int32_t)), *dtok = be->alloc(be, N * sizeof(int32_t));
  topk_rows r = {ng_xmalloc(N * k * sizeof(uint32_t)), be->alloc(be, N * k * sizeof(uint32_t)),
                 ng_xmalloc(N * k * sizeof(float)), be->alloc(be, N * k * sizeof(float)),
                 ng_xmalloc(N * sizeof(float)), be->alloc(be, N * sizeof(float)),
                 ng_xmalloc(N * sizeof(float)), be->alloc(be, N * sizeof(float))};
  int rc = 0;
  for (uint64_t w0 = 0; w0 < h->windows && rc == 0; w0 += (uint64_t)batch) {
    int64_t nb = h->windows - w0 < (uint64_t)batch ? (int64_t)(h->windows - w0) : batch;
    rc = build_batch(t, a, s, o, seq, h->first_window + w0, w0, nb, 1.0 / h->temperature, tok, dtok, &r);
  }
  free(tok), free(r.ids), free(r.vals), free(r.lse), free(r.rest);
  be->free(be, dtok), be->free(be, r.dev_ids), be->free(be, r.dev_vals), be->free(be, r.dev_lse);
  be->free(be, r.dev_rest);
  ng_acts_free(t, a);
  return rc;
}

// build_into's buffers within the machine's memory: the teacher's forward
// with logits of every row [N, V], and per row its token and its k ids and
// values and two log masses, on the host and on the backend (counted twice: a
// host backend's are the host's).
static int check_build_memory(const ng_model *t, int64_t batch, int64_t seq, int64_t k) {
  ng_acts_options all_rows = {0};
  double N = (double)batch * (double)seq;
  double bytes = 4.0 * (double)ng_plan_acts_floats(&t->cfg, batch, seq, &all_rows) +
                 2.0 * N * (12.0 + 8.0 * (double)k);
  char what[160];
  snprintf(what, sizeof what, "teacher-cache: --batch %lld x --seq %lld (k %lld)", (long long)batch,
           (long long)seq, (long long)k);
  return ng_plan_check_more_memory(&t->cfg, bytes, what);
}

// One file of windows [h.first_window, + h.windows), written atomically.
static int build_file(ng_model *teacher, const ng_shard *s, topk_header h, int64_t batch,
                      const char *path) {
  int64_t nb = h.windows < (uint64_t)batch ? (int64_t)h.windows : batch;  // no buffers for windows that do not exist
  if (check_build_memory(teacher, nb, h.seq, h.k)) return -1;
  ng_temp_file out;
  if (ng_temp_create(&out, path) != 0) return -1;
  cache_out o = {fileno(out.fp), path, h.windows * (uint64_t)h.seq, (uint64_t)h.k, s->vocab_size};
  return ng_temp_commit(&out, build_into(teacher, s, &h, nb, &o));
}

// The manifest of n parts of "<path>.part-<i>-of-<n>" (topk.h).
static int write_manifest(const char *path, int n, uint64_t windows) {
  cJSON *m = cJSON_CreateObject(), *files = cJSON_CreateArray();
  cJSON_AddStringToObject(m, "format", "normgrow-topk-parts");
  cJSON_AddNumberToObject(m, "windows", (double)windows);
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  for (int i = 0; i < n; i++) {
    char name[1100];
    snprintf(name, sizeof name, "%.1000s.part-%d-of-%d", base, i + 1, n);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "file", name);
    cJSON_AddItemToArray(files, f);
  }
  cJSON_AddItemToObject(m, "files", files);
  char *text = ng_json_print(m, true);
  cJSON_Delete(m);
  int rc = ng_write_text_atomic(path, text);
  free(text);
  return rc;
}

int ng_topk_build(ng_model *teacher, const ng_shard *s, int64_t k, int64_t seq,
                  double temperature, int64_t batch, const char *path) {
  ng_comm *one = ng_comm_single();
  int rc = ng_topk_build_ranks(teacher, s, k, seq, temperature, batch, path, one);
  ng_comm_close(one);
  return rc;
}

int ng_topk_build_ranks(ng_model *teacher, const ng_shard *s, int64_t k, int64_t seq,
                        double temperature, int64_t batch, const char *path, ng_comm *comm) {
  if (k < 1 || k > (int64_t)s->vocab_size) return ng_fail("--k: %lld is outside [1, %u]", (long long)k, s->vocab_size);
  if (s->vocab_size > teacher->cfg.vocab_size)
    return ng_fail("%s: vocabulary of %u tokens, larger than the teacher's %lld", s->path, s->vocab_size, (long long)teacher->cfg.vocab_size);
  if (seq < 1 || s->n_tokens < (uint64_t)seq + 1) return ng_fail("%s: shorter than one window of %lld + 1 tokens", s->path, (long long)seq);
  topk_header h = {.version = NG_TOPK_VERSION, .k = (uint32_t)k, .vocab_size = s->vocab_size,
                   .seq = (uint32_t)seq, .temperature = temperature,
                   .windows = (s->n_tokens - 1) / (uint64_t)seq, .shard_tokens = s->n_tokens,
                   .shard_checksum = ng_shard_checksum(s)};
  memcpy(h.magic, NG_TOPK_MAGIC, 8);
  if (comm->size == 1) return build_file(teacher, s, h, batch, path);
  uint64_t W = h.windows, n = (uint64_t)comm->size, r = (uint64_t)comm->rank;
  if (W < n)
    return ng_fail("%s: %llu windows of %lld tokens for %d ranks: fewer than one each", s->path,
                   (unsigned long long)W, (long long)seq, comm->size);
  h.version = NG_TOPK_PART_VERSION;
  h.first_window = W * r / n;
  h.windows = W * (r + 1) / n - h.first_window;
  char part[1100], why[1100] = "";
  snprintf(part, sizeof part, "%.1000s.part-%d-of-%d", path, comm->rank + 1, comm->size);
  double failed = build_file(teacher, s, h, batch, part) != 0;
  if (failed > 0.0) snprintf(why, sizeof why, "%s", ng_error());
  comm->allreduce_f64(comm, &failed, 1);  // every rank's part written, or a failure
  if (why[0]) return ng_fail("%s", why);
  if (failed > 0.0) return ng_fail("%s: another rank failed to write its part (its error is its own)", path);
  return comm->rank == 0 ? write_manifest(path, comm->size, W) : 0;
}

// ---------------------------------------------------------------- reading

// A file's header against its size and the shard (checksum `sum`): a version 3
// file holds every window; a part (version 4) windows from `first` on.
static int check_header(const topk_header *h, size_t size, const ng_shard *s, uint64_t sum,
                        uint32_t version, uint64_t first) {
  if (memcmp(h->magic, NG_TOPK_MAGIC, 8) != 0) return ng_fail("not a normgrow top-k cache (bad magic)");
  if (h->version == 1 || h->version == 2)
    return ng_fail("version %u, a cache without the teacher's mass off the cached ids: make it again "
                   "with `normgrow teacher-cache`", h->version);
  if (h->version != version)
    return ng_fail("version %u, expected %u (%s)", h->version, version,
                   version == NG_TOPK_VERSION ? "a part is read through its manifest" : "a part of a manifest");
  if (h->k < 1 || h->k > h->vocab_size || h->seq < 1 || !(h->temperature > 0.0) || !isfinite(h->temperature))
    return ng_fail("header: k %u, vocab_size %u, seq %u, temperature %g are not valid", h->k,
                   h->vocab_size, h->seq, h->temperature);
  if (h->first_window != first)
    return ng_fail("header: first window %llu, expected %llu", (unsigned long long)h->first_window,
                   (unsigned long long)first);
  size_t P, row, body;
  if (ng_mul_size(h->windows, h->seq, &P) || ng_mul_size(h->k, 8, &row) ||
      ng_mul_size(P, row + 8, &body) || body > SIZE_MAX - NG_TOPK_HEADER ||
      size != NG_TOPK_HEADER + body)
    return ng_fail("file is %zu bytes, header says 64 + %llu windows x %u positions x (8 x %u + 8)",
                   size, (unsigned long long)h->windows, h->seq, h->k);
  if (h->shard_tokens != s->n_tokens || h->shard_checksum != sum || h->vocab_size != s->vocab_size)
    return ng_fail("was made from another shard than %s", s->path);
  // As the builder counts them: every window and its last target inside the
  // shard (windows x seq + 1 <= tokens), and at least one.
  uint64_t fit = s->n_tokens > 0 ? (s->n_tokens - 1) / h->seq : 0;
  bool whole = version == NG_TOPK_VERSION;
  if (h->windows == 0 || (whole ? h->windows != fit : h->windows > fit - first || first > fit))
    return ng_fail("header: %llu windows of %u tokens%s, but %s (%llu tokens) holds %llu",
                   (unsigned long long)h->windows, h->seq, whole ? "" : " in a part", s->path,
                   (unsigned long long)s->n_tokens, (unsigned long long)fit);
  return 0;
}

// Maps and checks one file into p; *h: its header.
static int map_part(ng_topk_part *p, const char *path, const ng_shard *s, uint64_t sum, uint32_t version,
                    uint64_t first, topk_header *h) {
  uint8_t *map;
  size_t size;
  if (ng_map_file(path, NG_TOPK_HEADER, "top-k cache header", &map, &size) != 0) return -1;
  memcpy(h, map, sizeof *h);
  if (check_header(h, size, s, sum, version, first) != 0) {
    ng_unmap_file(map, size);
    return ng_fail_prefix(path);
  }
  uint64_t P = h->windows * h->seq;
  *p = (ng_topk_part){map, size, h->first_window, h->windows,
                      (const uint32_t *)(map + NG_TOPK_HEADER),
                      (const float *)(map + NG_TOPK_HEADER + P * h->k * 4),
                      (const float *)(map + NG_TOPK_HEADER + 2 * P * h->k * 4),
                      (const float *)(map + NG_TOPK_HEADER + 2 * P * h->k * 4 + P * 4)};
  return 0;
}

// The parts a manifest names, each checked against the first and following it.
static int open_manifest(ng_topk_cache *c, const ng_shard *s, uint64_t sum, topk_header *first) {
  char *text;
  if (ng_read_file(c->path, (size_t)1 << 26, &text, NULL) != 0) return -1;
  cJSON *m = cJSON_Parse(text);
  free(text);
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
  const cJSON *windows = cJSON_GetObjectItemCaseSensitive(m, "windows");
  const char *format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "format"));
  int rc = 0;
  if (!m || !format || strcmp(format, "normgrow-topk-parts") != 0 || !cJSON_IsArray(files) ||
      cJSON_GetArraySize(files) < 1 || !cJSON_IsNumber(windows))
    rc = ng_fail("%s: not a normgrow top-k manifest (format \"normgrow-topk-parts\", windows, files)", c->path);
  if (rc == 0) c->parts = ng_xcalloc((size_t)cJSON_GetArraySize(files), sizeof *c->parts);
  uint64_t next = 0;
  const cJSON *f = rc == 0 ? files->child : NULL;
  for (; f && rc == 0; f = f->next) {
    char *file = ng_manifest_part_path(
        c->path, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "file")), c->n_parts);
    if (!file) rc = -1;
    topk_header h;
    if (rc == 0 && map_part(&c->parts[c->n_parts], file, s, sum, NG_TOPK_PART_VERSION, next, &h))
      rc = ng_fail_prefix(c->path);
    if (rc == 0) c->n_parts++, next += h.windows;
    if (rc == 0 && c->n_parts == 1) *first = h;
    if (rc == 0 && (h.k != first->k || h.seq != first->seq || h.temperature != first->temperature))
      rc = ng_fail("%s: %s: k %u, seq %u, temperature %g; the first part's are %u, %u, %g", c->path, file,
                   h.k, h.seq, h.temperature, first->k, first->seq, first->temperature);
    free(file);
  }
  uint64_t fit = rc == 0 ? (s->n_tokens - 1) / first->seq : 0;
  if (rc == 0 && (next != fit || windows->valuedouble != (double)fit))
    rc = ng_fail("%s: its parts hold %llu windows, the manifest says %.0f, %s holds %llu", c->path,
                 (unsigned long long)next, windows->valuedouble, s->path, (unsigned long long)fit);
  cJSON_Delete(m);
  first->windows = next;
  return rc;
}

int ng_topk_open(ng_topk_cache *c, const char *path, const ng_shard *s) {
  memset(c, 0, sizeof *c);
  c->path = ng_xstrdup(path);
  uint64_t sum = ng_shard_checksum(s);
  topk_header h;
  int rc;
  if (ng_is_manifest(path)) {
    rc = open_manifest(c, s, sum, &h);
  } else {
    c->parts = ng_xcalloc(1, sizeof *c->parts);
    rc = map_part(&c->parts[0], path, s, sum, NG_TOPK_VERSION, 0, &h);
    c->n_parts = rc == 0;
  }
  if (rc != 0) {
    ng_topk_close(c);
    return -1;
  }
  const ng_topk_part *p = &c->parts[0];
  c->k = h.k, c->vocab_size = h.vocab_size, c->seq = h.seq, c->temperature = h.temperature;
  c->windows = h.windows, c->shard_tokens = h.shard_tokens, c->shard_checksum = h.shard_checksum;
  c->map = p->map, c->map_size = p->map_size, c->ids = p->ids, c->vals = p->vals, c->lse = p->lse;
  c->rest = p->rest;
  return 0;
}

void ng_topk_close(ng_topk_cache *c) {
  for (int i = 0; i < c->n_parts; i++) ng_unmap_file(c->parts[i].map, c->parts[i].map_size);
  free(c->parts);
  free(c->path);
  memset(c, 0, sizeof *c);
}

// The part holding window w; *p0: w's first position in it.
static const ng_topk_part *part_of(const ng_topk_cache *c, uint64_t w, uint64_t *p0) {
  int i = 0;
  while (w >= c->parts[i].first_window + c->parts[i].windows) i++;
  *p0 = (w - c->parts[i].first_window) * c->seq;
  return &c->parts[i];
}

int ng_topk_batch(const ng_topk_cache *c, const ng_shard *s, const int64_t *windows, int64_t B,
                  int32_t *tokens, int32_t *targets, int32_t *ids, float *vals, float *lse,
                  float *rest) {
  uint64_t T = c->seq, k = c->k;
  for (int64_t b = 0; b < B; b++) {
    NG_ASSERT(windows[b] >= 0 && (uint64_t)windows[b] < c->windows);
    uint64_t at = (uint64_t)windows[b] * T, p0;  // the shard's position, the part's
    const ng_topk_part *p = part_of(c, (uint64_t)windows[b], &p0);
    ng_shard_read(s, at, (int64_t)T, tokens + (uint64_t)b * T);
    ng_shard_read(s, at + 1, (int64_t)T, targets + (uint64_t)b * T);
    for (uint64_t i = 0; i < T * k; i++) {
      uint32_t id = p->ids[p0 * k + i];
      if (id >= c->vocab_size)
        return ng_fail("%s: id %u at position %llu is >= vocab_size %u", c->path, id,
                       (unsigned long long)(at + i / k), c->vocab_size);
      ids[(uint64_t)b * T * k + i] = (int32_t)id;
    }
    for (uint64_t i = 0; i < T * k; i++)
      if (!isfinite(p->vals[p0 * k + i]))
        return ng_fail("%s: value %g at position %llu is not finite", c->path, p->vals[p0 * k + i],
                       (unsigned long long)(at + i / k));
    for (uint64_t t = 0; t < T; t++)
      if (!isfinite(p->lse[p0 + t]))
        return ng_fail("%s: log-sum-exp %g at position %llu is not finite", c->path, p->lse[p0 + t],
                       (unsigned long long)(at + t));
    for (uint64_t t = 0; t < T; t++)
      if (!(p->rest[p0 + t] <= 0.0f))
        return ng_fail("%s: log mass off the cache %g at position %llu is not a log-probability "
                       "(at most 0)", c->path, p->rest[p0 + t], (unsigned long long)(at + t));
    memcpy(vals + (uint64_t)b * T * k, p->vals + p0 * k, T * k * sizeof(float));
    memcpy(lse + (uint64_t)b * T, p->lse + p0, T * sizeof(float));
    memcpy(rest + (uint64_t)b * T, p->rest + p0, T * sizeof(float));
  }
  return 0;
}
