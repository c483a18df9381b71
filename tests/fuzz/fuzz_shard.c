// Fuzz target: a token shard, opened and read as training and evaluation
// read it (every token of a batch below the vocabulary).
#include "readers.h"

static int fuzz_shard(const uint8_t *data, size_t n) {
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "shard.bin"), data, n);
  ng_fuzz_shard_file(path);
  return 0;
}
NG_FUZZ_TARGET(fuzz_shard)
