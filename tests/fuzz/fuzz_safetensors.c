// Fuzz target: a safetensors file as it comes (header length, JSON header,
// data), through the generic reader, the golden-case reader and the checkpoint
// loader.
#include "readers.h"

static int fuzz_safetensors(const uint8_t *data, size_t n) {
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "in.safetensors"), data, n);
  ng_fuzz_safetensors_file(path);
  ng_fuzz_golden_file(path);
  ng_fuzz_checkpoint_file(path);
  return 0;
}
NG_FUZZ_TARGET(fuzz_safetensors)
