// Fuzz target: a tokenizer.json, then a text to encode (the input's two parts,
// fuzz.h). A file the reader takes encodes the text into ids below its
// vocabulary, and decodes them again.
#include <stdbool.h>

#include "normgrow/tokenizer.h"
#include "readers.h"

static int fuzz_tokenizer(const uint8_t *data, size_t n) {
  const uint8_t *ptr[2];
  size_t len[2];
  int k = ng_fuzz_parts(data, n, ptr, len, 2);
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "tokenizer.json"), ptr[0], len[0]);
  ng_tokenizer *t = NULL;
  if (ng_tokenizer_load(path, &t) != 0) return ng_fuzz_refused();
  ng_tok_state *st = ng_tok_state_create(t);
  ng_ids ids = {0};
  const char *text = k > 1 ? (const char *)ptr[1] : "";
  if (ng_tokenizer_encode(st, text, k > 1 ? len[1] : 0, &ids) == 0) {
    for (size_t i = 0; i < ids.n; i++) NG_FUZZ_REQUIRE(ids.ids[i] < ng_tokenizer_vocab_size(t));
    char *back = NULL;
    size_t back_len = 0;
    NG_FUZZ_REQUIRE(ng_tokenizer_decode(t, ids.ids, ids.n, &back, &back_len) == 0);
    free(back);
  } else {
    ng_fuzz_refused();
  }
  free(ids.ids);
  ng_tok_state_free(st);
  ng_tokenizer_free(t);
  return 0;
}
NG_FUZZ_TARGET(fuzz_tokenizer)
