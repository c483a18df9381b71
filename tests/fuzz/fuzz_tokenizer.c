// Fuzz target: a tokenizer.json, then a text to encode (the input's two parts,
// fuzz.h). A file the reader takes encodes the text (ng_fuzz_encode: the same
// ids in 1-byte pieces, ids below its vocabulary that decode).
#include "readers.h"

static int fuzz_tokenizer(const uint8_t *data, size_t n) {
  const uint8_t *ptr[2];
  size_t len[2];
  int k = ng_fuzz_parts(data, n, ptr, len, 2);
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "tokenizer.json"), ptr[0], len[0]);
  ng_tokenizer *t = NULL;
  if (ng_tokenizer_load(path, &t) != 0) return ng_fuzz_refused();
  ng_ids ids = {0};
  ng_fuzz_encode(t, k > 1 ? (const char *)ptr[1] : "", k > 1 ? len[1] : 0, &ids);
  free(ids.ids);
  ng_tokenizer_free(t);
  return 0;
}
NG_FUZZ_TARGET(fuzz_tokenizer)
