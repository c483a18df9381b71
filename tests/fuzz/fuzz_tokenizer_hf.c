// Fuzz target, differential against Hugging Face `tokenizers`: a tokenizer.json,
// a text, and what `tokenizers` made of the two (the input's three parts,
// fuzz.h), as tools/tokenizer_hf_cases.py writes them: a line "<hash> refused"
// (it refuses the file), "<hash> unsupported" (it takes the file, normgrow
// refuses it by name) or "<hash> ids <id> ..." (the text's ids), the hash the
// FNV-1a 64 of the input up to that line's separator, in hex. Where the hash
// holds (the kept inputs, replayed by `make test`), normgrow must do the same;
// every input keeps the invariants of fuzz_tokenizer.c, so a mutated one,
// whose hash no longer holds, still fuzzes the reader and the encoder.
#include <inttypes.h>

#include "readers.h"

static uint64_t fnv1a64(const uint8_t *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  return h;
}

// What the third part (at `part` in data, `line` a NUL-terminated copy) says
// of the first two: 'r' refused, 'u' unsupported, 'i' ids (*ids_text in
// line), 0 if its hash does not hold.
static char expected(const uint8_t *data, const uint8_t *part, const char *line,
                     const char **ids_text) {
  char hex[17], word[16] = "";
  size_t hashed = (size_t)(part - data) - (sizeof NG_FUZZ_SEPARATOR - 1);
  snprintf(hex, sizeof hex, "%016" PRIx64, fnv1a64(data, hashed));
  int at = 0;
  if (strncmp(line, hex, 16) != 0 || line[16] != ' ' ||
      sscanf(line + 17, "%15s%n", word, &at) != 1)
    return 0;
  *ids_text = line + 17 + at;
  if (strcmp(word, "refused") == 0) return 'r';
  if (strcmp(word, "unsupported") == 0) return 'u';
  return strcmp(word, "ids") == 0 ? 'i' : 0;
}

// Whether the ids are those written in `text` (decimal, blank-separated).
static int same_ids(const ng_ids *ids, const char *text) {
  size_t i = 0;
  for (char *end;; text = end) {
    unsigned long v = strtoul(text, &end, 10);
    if (end == text) return i == ids->n;
    if (i >= ids->n || v != ids->ids[i++]) return 0;
  }
}

static int fuzz_tokenizer_hf(const uint8_t *data, size_t n) {
  const uint8_t *ptr[3];
  size_t len[3];
  int k = ng_fuzz_parts(data, n, ptr, len, 3);
  char *line = NULL;  // the third part, NUL-terminated
  const char *ids_text = "";
  char want = 0;
  if (k == 3) {
    line = ng_xmalloc(len[2] + 1);
    memcpy(line, ptr[2], len[2]);
    line[len[2]] = 0;
    want = expected(data, ptr[2], line, &ids_text);
  }
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "tokenizer.json"), ptr[0], len[0]);
  ng_tokenizer *t = NULL;
  if (ng_tokenizer_load(path, &t) != 0) {
    ng_fuzz_refused();
    NG_FUZZ_REQUIRE(want != 'i');
  } else {
    NG_FUZZ_REQUIRE(want != 'r' && want != 'u');
    ng_ids ids = {0};
    int rc = ng_fuzz_encode(t, k > 1 ? (const char *)ptr[1] : "", k > 1 ? len[1] : 0, &ids);
    NG_FUZZ_REQUIRE(want != 'i' || (rc == 0 && same_ids(&ids, ids_text)));
    free(ids.ids);
    ng_tokenizer_free(t);
  }
  free(line);
  return 0;
}
NG_FUZZ_TARGET(fuzz_tokenizer_hf)
