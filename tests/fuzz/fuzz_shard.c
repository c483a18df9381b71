// Fuzz target: a token shard, opened and read as training and evaluation
// read it (every token of a batch below the vocabulary).
#include "normgrow/data.h"
#include "readers.h"

static int fuzz_shard(const uint8_t *data, size_t n) {
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "shard.bin"), data, n);
  ng_shard s;
  if (ng_shard_open(&s, path) != 0) return ng_fuzz_refused();
  enum { B = 2, T = 8 };
  int32_t tok[B * T], tgt[B * T];
  ng_rng r;
  ng_rng_seed(&r, 1);
  if (ng_batch_sample(&s, &r, B, T, tok, tgt) == 0) {
    for (int i = 0; i < B * T; i++) NG_FUZZ_REQUIRE((uint32_t)tok[i] < s.vocab_size && (uint32_t)tgt[i] < s.vocab_size);
    ng_batch_fixed(&s, 3, B, T, tok, tgt);
    for (int i = 0; i < B * T; i++) NG_FUZZ_REQUIRE((uint32_t)tok[i] < s.vocab_size && (uint32_t)tgt[i] < s.vocab_size);
  } else {
    ng_fuzz_refused();
  }
  ng_shard_close(&s);
  return 0;
}
NG_FUZZ_TARGET(fuzz_shard)
