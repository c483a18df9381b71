// Fuzz target: a shard of several files. The input's parts (fuzz.h) are the
// manifest train.manifest.json, then its files train-00000.bin and
// train-00001.bin (the names `normgrow data --file-tokens` writes); read as
// training and evaluation read a shard.
#include "readers.h"

static int fuzz_manifest(const uint8_t *data, size_t n) {
  static const char *const names[] = {"train.manifest.json", "train-00000.bin", "train-00001.bin"};
  const uint8_t *ptr[3];
  size_t len[3];
  int k = ng_fuzz_parts(data, n, ptr, len, 3);
  char dir[512], path[600];
  ng_fuzz_path(dir, sizeof dir, "manifest");
  mkdir(dir, 0700);
  for (int i = 0; i < 3; i++) {  // nothing left from the input before
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  for (int i = 0; i < k; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    ng_fuzz_write(path, ptr[i], len[i]);
  }
  snprintf(path, sizeof path, "%s/%s", dir, names[0]);
  ng_fuzz_shard_file(path);
  return 0;
}
NG_FUZZ_TARGET(fuzz_manifest)
