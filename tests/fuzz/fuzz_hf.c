// Fuzz target: a Hugging Face directory. The input's parts (fuzz.h) are
// config.json, then either model.safetensors, or model.safetensors.index.json
// and its two shards model-00001-of-00002.safetensors and
// model-00002-of-00002.safetensors. Read as a teacher is read.
#include "normgrow/backend_cpu.h"
#include "normgrow/hf.h"
#include "readers.h"

static int fuzz_hf(const uint8_t *data, size_t n) {
  static const char *const single[] = {"config.json", "model.safetensors"};
  static const char *const sharded[] = {"config.json", "model.safetensors.index.json",
                                        "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
  const uint8_t *ptr[4];
  size_t len[4];
  int k = ng_fuzz_parts(data, n, ptr, len, 4);
  const char *const *names = k > 2 ? sharded : single;
  char dir[512], path[600];
  ng_fuzz_path(dir, sizeof dir, "hf");
  mkdir(dir, 0700);
  for (int i = 0; i < 5; i++) {  // nothing left from the input before
    snprintf(path, sizeof path, "%s/%s", dir, i < 4 ? sharded[i] : single[1]);
    unlink(path);
  }
  for (int i = 0; i < k; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    ng_fuzz_write(path, ptr[i], len[i]);
  }
  ng_model_config cfg;
  if (ng_hf_read_config(dir, &cfg) != 0) ng_fuzz_refused();
  ng_model *m = NULL;
  if (ng_hf_load(dir, ng_backend_cpu(), false, &m) == 0)
    ng_model_free(m);
  else
    ng_fuzz_refused();
  return 0;
}
NG_FUZZ_TARGET(fuzz_hf)
