// normgrow: the teacher top-k cache. The teacher runs once over a token shard;
// every arm of a study then distils from the cache instead of the teacher.
//
// The teacher sees the shard as consecutive windows of seq tokens (window w
// holds tokens [w*seq, w*seq + seq), predicting [w*seq + 1, w*seq + seq]), so
// a run that uses a cache draws its batches from these same windows. For each
// position the cache keeps the k largest teacher logits (ids, values; ids in
// no particular order) and the log-sum-exp of ALL logits at the cache's
// temperature. KD is then computed between bucketed distributions {the k
// cached tokens, everything else}: exact for k = V; for k < V the tail of the
// teacher's distribution is lumped into one bucket (see ng_backend.ce_kd_topk).
//
// File (little-endian), version 1:
//   offset  0  char[8]  magic "NGTOPKC1"
//   offset  8  u32      version (1)
//   offset 12  u32      k
//   offset 16  u32      vocab_size
//   offset 20  u32      seq (window length)
//   offset 24  f64      temperature
//   offset 32  u64      windows
//   offset 40  u64      shard token count
//   offset 48  u64      shard checksum (FNV-1a 64 over the shard's token bytes)
//   offset 56  u64      reserved, 0
//   offset 64  u32      ids   [P, k]   P = windows * seq
//              f32      vals  [P, k]
//              f32      lse   [P]
// The file is exactly 64 + 8 P k + 4 P bytes.
#ifndef NORMGROW_TOPK_H
#define NORMGROW_TOPK_H

#include <stdint.h>

#include "normgrow/data.h"
#include "normgrow/model.h"

#define NG_TOPK_MAGIC "NGTOPKC1"
#define NG_TOPK_VERSION 1u
#define NG_TOPK_HEADER 64u

typedef struct {
  char *path;
  uint8_t *map;
  size_t map_size;
  uint32_t k, vocab_size, seq;
  double temperature;
  uint64_t windows, shard_tokens, shard_checksum;
  const uint32_t *ids;   // [P, k]
  const float *vals;     // [P, k]
  const float *lse;      // [P]
} ng_topk_cache;

uint64_t ng_shard_checksum(const ng_shard *s);
// The k largest of x [V] into ids, vals [k], in no particular order.
void ng_top_k(const float *x, int64_t V, int64_t k, uint32_t *ids, float *vals);
// log sum_j exp(x_j / tau) with inv_tau = 1 / tau, max-subtracted, in double.
float ng_logsumexp(const float *x, int64_t V, double inv_tau);

// Runs `teacher` over every window of `s` (batch windows at a time, at most
// all of them) and writes the cache atomically.
int ng_topk_build(ng_model *teacher, const ng_shard *s, int64_t k, int64_t seq,
                  double temperature, int64_t batch, const char *path);
// Memory-map and validate the header and size; check that it was made from `s`
// (its token count, checksum and vocabulary, and windows = (tokens - 1) / seq).
int ng_topk_open(ng_topk_cache *c, const char *path, const ng_shard *s);
void ng_topk_close(ng_topk_cache *c);  // safe on a zeroed struct

// Batch of B windows (indices in [0, windows)): tokens, targets [B*seq] from
// the shard; ids, vals [B*seq, k] and lse [B*seq] from the cache (ids checked
// against the vocabulary, vals and lse for being finite).
int ng_topk_batch(const ng_topk_cache *c, const ng_shard *s, const int64_t *windows, int64_t B,
                  int32_t *tokens, int32_t *targets, int32_t *ids, float *vals, float *lse);

#endif
