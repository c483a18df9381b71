// normgrow: the teacher top-k cache. The teacher runs once over a token shard;
// every arm of a study then distils from the cache instead of the teacher.
//
// The teacher sees the shard as consecutive windows of seq tokens (window w
// holds tokens [w*seq, w*seq + seq), predicting [w*seq + 1, w*seq + seq]), so
// a run that uses a cache draws its batches from these same windows. For each
// position the cache keeps the k largest teacher logits (ids, values; ids in
// no particular order), the log-sum-exp of ALL logits at the cache's
// temperature, and the log of the teacher's mass on the other ids, summed over
// those ids themselves (1 minus the cached mass would keep only the rounding of
// the stored lse where the rest is below it: a reverse KL would see an empty
// bucket where the student has mass). KD is then computed between bucketed
// distributions {the k cached tokens, everything else}: exact for k = V; for
// k < V the tail of the teacher's distribution is lumped into one bucket (see
// ng_backend.ce_kd_topk).
//
// File (little-endian), version 3:
//   offset  0  char[8]  magic "NGTOPKC1"
//   offset  8  u32      version (3)
//   offset 12  u32      k
//   offset 16  u32      vocab_size
//   offset 20  u32      seq (window length)
//   offset 24  f64      temperature
//   offset 32  u64      windows
//   offset 40  u64      shard token count
//   offset 48  u64      shard checksum (FNV-1a 64 over the shard's token bytes)
//   offset 56  u64      first window (0 in version 3)
//   offset 64  u32      ids   [P, k]   P = windows * seq
//              f32      vals  [P, k]
//              f32      lse   [P]
//              f32      rest  [P]      log of the mass off the cached ids (<= 0; -inf: none)
// The file is exactly 64 + 8 P k + 8 P bytes. Version 3 holds every window of
// the shard ((shard tokens - 1) / seq of them). Version 4 is a part: `windows`
// windows from `first window` on, the same layout; parts are read only through
// a manifest, a JSON file beside them naming them in window order
//   {"format": "normgrow-topk-parts", "windows": W, "files": [{"file": NAME}, ...]}
// whose parts agree on k, vocabulary, seq, temperature and shard, and cover
// windows 0 .. W - 1 one after another, W = (shard tokens - 1) / seq. A path
// given as a cache is either: a version 3 file or such a manifest. Versions 1
// and 2 (a file, a part) had no rest region; they are refused, to be made again.
#ifndef NORMGROW_TOPK_H
#define NORMGROW_TOPK_H

#include <stdint.h>

#include "normgrow/comm.h"
#include "normgrow/data.h"
#include "normgrow/model.h"

#define NG_TOPK_MAGIC "NGTOPKC1"
#define NG_TOPK_VERSION 3u
#define NG_TOPK_PART_VERSION 4u
#define NG_TOPK_HEADER 64u

// One file of a cache: windows [first_window, first_window + windows).
typedef struct {
  uint8_t *map;
  size_t map_size;
  uint64_t first_window, windows;
  const uint32_t *ids;   // [windows seq, k]
  const float *vals;     // [windows seq, k]
  const float *lse;      // [windows seq]
  const float *rest;     // [windows seq]
} ng_topk_part;

typedef struct {
  char *path;
  uint32_t k, vocab_size, seq;
  double temperature;
  uint64_t windows, shard_tokens, shard_checksum;
  int n_parts;           // 1 for a version 3 file
  ng_topk_part *parts;   // in window order
  // The first part's (a version 3 file's: the whole cache's) map and regions.
  uint8_t *map;
  size_t map_size;
  const uint32_t *ids;
  const float *vals;
  const float *lse;
  const float *rest;
} ng_topk_cache;

uint64_t ng_shard_checksum(const ng_shard *s);
// The k largest of x [V] into ids, vals [k], in no particular order.
void ng_top_k(const float *x, int64_t V, int64_t k, uint32_t *ids, float *vals);
// The row's log masses at 1 / tau = inv_tau, given its k largest values vals
// [k] as ng_top_k keeps them (of values tied with the smallest kept, the ones
// kept are counted off): lse = log sum_j exp(x_j / tau) and rest = log sum_{j
// not kept} exp(x_j / tau) - lse (-inf when every id is kept), each sum
// max-subtracted and in double over the ids themselves.
void ng_topk_logmass(const float *x, int64_t V, const float *vals, int64_t k, double inv_tau,
                     float *lse, float *rest);

// Runs `teacher` over every window of `s` (batch windows at a time, at most
// all of them), its top k selected by the teacher's backend (ng_backend.topk:
// only a row's k ids and values and its two log masses leave it), and writes the
// cache atomically.
int ng_topk_build(ng_model *teacher, const ng_shard *s, int64_t k, int64_t seq,
                  double temperature, int64_t batch, const char *path);
// The same over the ranks of comm, every one calling it alike: one rank writes
// `path` as ng_topk_build does; of n > 1, rank r builds windows [W r / n,
// W (r + 1) / n) into the part "<path>.part-<r+1>-of-<n>", and once every part
// is written rank 0 writes the manifest `path` naming them. An error of any
// rank fails every rank (no manifest is written).
int ng_topk_build_ranks(ng_model *teacher, const ng_shard *s, int64_t k, int64_t seq,
                        double temperature, int64_t batch, const char *path, ng_comm *comm);
// Memory-map and validate a cache (a file, or a manifest and its parts): the
// headers (a version 1 or 2 one refused: made again) and sizes; that it was made from `s` (its token count, checksum and
// vocabulary, and windows = (tokens - 1) / seq).
int ng_topk_open(ng_topk_cache *c, const char *path, const ng_shard *s);
void ng_topk_close(ng_topk_cache *c);  // safe on a zeroed struct

// Batch of B windows (indices in [0, windows)): tokens, targets [B*seq] from
// the shard; ids, vals [B*seq, k], lse and rest [B*seq] from the cache (ids
// checked against the vocabulary, vals and lse for being finite, rest for
// being a log-mass: at most 0, -inf allowed, NaN not).
int ng_topk_batch(const ng_topk_cache *c, const ng_shard *s, const int64_t *windows, int64_t B,
                  int32_t *tokens, int32_t *targets, int32_t *ids, float *vals, float *lse,
                  float *rest);

#endif
