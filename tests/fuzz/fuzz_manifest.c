// Fuzz target: a shard of several files. The input's parts (fuzz.h) are the
// manifest train.manifest.json, then its files train-00000.bin and
// train-00001.bin (the names `normgrow data --file-tokens` writes); read as
// training and evaluation read a shard.
#include "readers.h"

static int fuzz_manifest(const uint8_t *data, size_t n) {
  static const char *const names[] = {"train.manifest.json", "train-00000.bin", "train-00001.bin"};
  char dir[512], path[600];
  ng_fuzz_write_files(data, n, "manifest", names, 3, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/%s", dir, names[0]);
  ng_fuzz_shard_file(path);
  return 0;
}
NG_FUZZ_TARGET(fuzz_manifest)
