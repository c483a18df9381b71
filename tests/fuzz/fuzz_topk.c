// Fuzz target: a top-k cache with the shard it was made from (parts: shard,
// cache). The cache is read as it comes, then again with its header's shard
// fields (token count, checksum, vocabulary) set to the shard's and its body
// cut or padded to the size the header implies, so that a mutated k, seq,
// temperature or window count gets past the size and shard checks. A cache
// that opens is read whole through ng_topk_batch, as training reads it.
#include <math.h>

#include "normgrow/topk.h"
#include "readers.h"

static void read_cache(const char *path, const ng_shard *s) {
  ng_topk_cache c;
  if (ng_topk_open(&c, path, s) != 0) {
    ng_fuzz_refused();
    return;
  }
  NG_FUZZ_REQUIRE(c.windows >= 1 && c.windows * c.seq + 1 <= s->n_tokens);
  size_t T = c.seq, k = c.k;
  int32_t *tok = ng_xmalloc(T * 4), *tgt = ng_xmalloc(T * 4), *ids = ng_xmalloc(T * k * 4);
  float *vals = ng_xmalloc(T * k * 4), *lse = ng_xmalloc(T * 4), *rest = ng_xmalloc(T * 4);
  for (int64_t w = 0; w < (int64_t)c.windows; w++) {
    if (ng_topk_batch(&c, s, &w, 1, tok, tgt, ids, vals, lse, rest) != 0) {
      ng_fuzz_refused();
      continue;
    }
    for (size_t i = 0; i < T * k; i++) NG_FUZZ_REQUIRE((uint32_t)ids[i] < c.vocab_size && isfinite(vals[i]));
    for (size_t t = 0; t < T; t++)
      NG_FUZZ_REQUIRE(isfinite(lse[t]) && rest[t] <= 0.0f && (uint32_t)tgt[t] < s->vocab_size);
  }
  free(tok), free(tgt), free(ids), free(vals), free(lse), free(rest);
  ng_topk_close(&c);
}

// The cache with the shard's fields and the body size its header implies.
static void read_fitted(const uint8_t *cache, size_t n, const ng_shard *s, const char *path) {
  if (n < NG_TOPK_HEADER) return;
  uint32_t k, seq;
  uint64_t windows, checksum = ng_shard_checksum(s);
  memcpy(&k, cache + 12, 4), memcpy(&seq, cache + 20, 4), memcpy(&windows, cache + 32, 8);
  double body = (double)windows * seq * (8.0 * k + 8.0);
  if (body > (double)(1 << 16)) return;  // a small cache: many executions per second
  size_t size = NG_TOPK_HEADER + (size_t)body;
  uint8_t *f = ng_xcalloc(size, 1);
  memcpy(f, cache, n < size ? n : size);
  memcpy(f + 16, &s->vocab_size, 4), memcpy(f + 40, &s->n_tokens, 8), memcpy(f + 48, &checksum, 8);
  ng_fuzz_write(path, f, size);
  free(f);
  read_cache(path, s);
}

static int fuzz_topk(const uint8_t *data, size_t n) {
  const uint8_t *ptr[2];
  size_t len[2];
  if (ng_fuzz_parts(data, n, ptr, len, 2) != 2) return 0;
  char shard_path[512], cache_path[512];
  ng_fuzz_write(ng_fuzz_path(shard_path, sizeof shard_path, "topk_shard.bin"), ptr[0], len[0]);
  ng_fuzz_write(ng_fuzz_path(cache_path, sizeof cache_path, "cache.topk"), ptr[1], len[1]);
  ng_shard s;
  if (ng_shard_open(&s, shard_path) != 0) return ng_fuzz_refused();
  read_cache(cache_path, &s);
  read_fitted(ptr[1], len[1], &s, cache_path);
  ng_shard_close(&s);
  return 0;
}
NG_FUZZ_TARGET(fuzz_topk)
