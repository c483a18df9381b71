// Tests for ref/tokenizer.c against Qwen3's tokenizer.json: every id of the
// committed vectors (made by Hugging Face `tokenizers`, tools/tokenizer_vectors.py),
// decoding, threads, and the refusal of malformed or unsupported files.
// The tokenizer is $NG_TOKENIZER, else $NG_ROOT/../shared/data/qwen3-tokenizer;
// without it the test skips with one line.
#include "normgrow/common.h"
#include "normgrow/data.h"
#include "normgrow/fileio.h"
#include "normgrow/rng.h"
#include "normgrow/tokenizer.h"

#include <cJSON.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

typedef struct {
  char *name;
  uint8_t *text;
  size_t len;
  uint32_t *ids;
  size_t n_ids;
} vector;

static const ng_tokenizer *g_tok;
static char g_dir[] = "/tmp/ng_test_tokenizer_XXXXXX";

static uint8_t *from_hex(const char *hex, size_t *len) {
  *len = strlen(hex) / 2;
  uint8_t *out = ng_xmalloc(*len + 1);
  for (size_t i = 0; i < *len; i++) {
    unsigned v;
    NG_ASSERT(sscanf(hex + 2 * i, "%2x", &v) == 1);
    out[i] = (uint8_t)v;
  }
  return out;
}

static int load_vectors(const char *path, vector **out) {
  char *text;
  NG_ASSERT(ng_read_file(path, SIZE_MAX, &text, NULL) == 0);
  cJSON *root = cJSON_Parse(text);
  NG_ASSERT(root);
  const cJSON *cases = cJSON_GetObjectItem(root, "cases");
  int n = cJSON_GetArraySize(cases), i = 0;
  vector *v = ng_xcalloc((size_t)n, sizeof *v);
  for (const cJSON *c = cases->child; c; c = c->next, i++) {
    v[i].name = ng_xstrdup(cJSON_GetObjectItem(c, "name")->valuestring);
    v[i].text = from_hex(cJSON_GetObjectItem(c, "text_hex")->valuestring, &v[i].len);
    const cJSON *ids = cJSON_GetObjectItem(c, "ids");
    v[i].n_ids = (size_t)cJSON_GetArraySize(ids);
    v[i].ids = ng_xmalloc((v[i].n_ids + 1) * sizeof *v[i].ids);
    size_t k = 0;
    for (const cJSON *e = ids->child; e; e = e->next) v[i].ids[k++] = (uint32_t)e->valuedouble;
  }
  cJSON_Delete(root);
  free(text);
  *out = v;
  return n;
}

static ng_ids encode(ng_tok_state *s, const void *text, size_t len) {
  ng_ids ids = {0};
  NG_ASSERT(ng_tokenizer_encode(s, text, len, &ids) == 0);
  return ids;
}

static bool same_ids(const ng_ids *a, const uint32_t *b, size_t n) {
  return a->n == n && (n == 0 || memcmp(a->ids, b, n * sizeof *b) == 0);
}

// The first position where got and want differ, for the message.
static size_t first_diff(const ng_ids *got, const vector *v) {
  size_t i = 0;
  while (i < got->n && i < v->n_ids && got->ids[i] == v->ids[i]) i++;
  return i;
}

// Every named case on its own line; the random ones together.
static void test_vectors(const vector *v, int n) {
  ng_tok_state *s = ng_tok_state_create(g_tok);
  int random_bad = 0, n_random = 0;
  char name[160];
  for (int i = 0; i < n; i++) {
    ng_ids got = encode(s, v[i].text, v[i].len);
    bool ok = same_ids(&got, v[i].ids, v[i].n_ids);
    if (strncmp(v[i].name, "random ", 7) == 0) {
      n_random++;
      if (!ok && random_bad++ == 0)
        printf("# %s: ids differ at position %zu\n", v[i].name, first_diff(&got, &v[i]));
    } else {
      size_t at = first_diff(&got, &v[i]);
      snprintf(name, sizeof name, "tokenizer ids: %s", v[i].name);
      CHECK(ok, name, "%zu ids, expected %zu; first difference at %zu (got %u, want %u)", got.n,
            v[i].n_ids, at, at < got.n ? got.ids[at] : 0, at < v[i].n_ids ? v[i].ids[at] : 0);
    }
    free(got.ids);
  }
  snprintf(name, sizeof name, "tokenizer ids: %d random mixes of scripts, spaces, specials", n_random);
  CHECK(random_bad == 0 && n_random > 0, name, "%d of %d differ", random_bad, n_random);
  ng_tok_state_free(s);
}

// Decoding gives the text back where it is valid NFC UTF-8, and in every case
// text that encodes to the same ids.
static void test_decode(const vector *v, int n) {
  static const char *const exact[] = {"english prose", "python code", "c code", "chinese",
                                      "arabic", "devanagari", "thai", "emoji zwj", "crlf",
                                      "tabs", "special tokens", "whitespace runs"};
  ng_tok_state *s = ng_tok_state_create(g_tok);
  int exact_bad = 0, n_exact = 0, again_bad = 0;
  for (int i = 0; i < n; i++) {
    char *text;
    size_t len;
    NG_ASSERT(ng_tokenizer_decode(g_tok, v[i].ids, v[i].n_ids, &text, &len) == 0);
    for (size_t k = 0; k < sizeof exact / sizeof *exact; k++) {
      if (strcmp(v[i].name, exact[k]) != 0) continue;
      n_exact++;
      exact_bad += len != v[i].len || memcmp(text, v[i].text, len) != 0;
    }
    ng_ids again = encode(s, text, len);
    again_bad += !same_ids(&again, v[i].ids, v[i].n_ids);
    free(again.ids);
    free(text);
  }
  CHECK(exact_bad == 0 && n_exact == (int)(sizeof exact / sizeof *exact),
        "tokenizer decode gives valid NFC text back", "%d of %d differ", exact_bad, n_exact);
  CHECK(again_bad == 0, "tokenizer encode(decode(ids)) = ids", "%d cases differ", again_bad);
  char *text = NULL;
  size_t len;
  const uint32_t bad[] = {9707, 151669};
  CHECK(ng_tokenizer_decode(g_tok, bad, 2, &text, &len) != 0 &&
            strstr(ng_error(), "id 151669 (position 1)"),
        "tokenizer decode refuses an id past the vocabulary", "%s", ng_error());
  free(text);
  ng_tok_state_free(s);
}

// All vectors encoded by several threads at once, each with its own state,
// three rounds (warm caches): the same ids.
static void test_threads(const vector *v, int n) {
  int bad = 0;
#pragma omp parallel num_threads(4) reduction(+ : bad)
  {
    ng_tok_state *s = ng_tok_state_create(g_tok);
    for (int round = 0; round < 3; round++) {
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < n; i++) {
        ng_ids got = encode(s, v[i].text, v[i].len);
        bad += !same_ids(&got, v[i].ids, v[i].n_ids);
        free(got.ids);
      }
    }
    ng_tok_state_free(s);
  }
  CHECK(bad == 0, "tokenizer ids with 4 threads sharing one tokenizer", "%d encodings differ", bad);
}

// Every vector with the text taken in the smallest pieces (a cut before every
// ASCII byte, where no piece is yet kept): the same ids.
static void test_pieces(const vector *v, int n) {
  ng_tok_state *s = ng_tok_state_create(g_tok);
  ng_tok_state_set_piece(s, 1);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    ng_ids got = encode(s, v[i].text, v[i].len);
    bad += !same_ids(&got, v[i].ids, v[i].n_ids);
    free(got.ids);
  }
  CHECK(bad == 0, "tokenizer ids with the text in 1-byte pieces", "%d of %d vectors differ", bad, n);
  ng_tok_state_free(s);
}

// Whitespace past PCRE2's default match limit (10M; the run is one match that
// backtracks over it): encoded and decoded back. A word one byte longer than
// NG_TOKENIZER_MAX_WORD: refused with one line.
static void test_limits(void) {
  size_t n = 10500000, big = NG_TOKENIZER_MAX_WORD + 1;
  char *text = ng_xmalloc(big);
  memset(text, ' ', n);
  ng_tok_state *s = ng_tok_state_create(g_tok);
  ng_ids ids = {0};
  char *back = NULL;
  size_t len = 0;
  bool ok = ng_tokenizer_encode(s, text, n, &ids) == 0 &&
            ng_tokenizer_decode(g_tok, ids.ids, ids.n, &back, &len) == 0 && len == n &&
            memcmp(back, text, n) == 0;
  CHECK(ok, "tokenizer encodes a run of 10.5M spaces", "%s", ng_error());
  free(back);
  memset(text, 'a', big);
  ids.n = 0;
  int rc = ng_tokenizer_encode(s, text, big, &ids);
  CHECK(rc != 0 && strstr(ng_error(), "longer than the tokenizer's limit of 67108864 bytes") &&
            !strchr(ng_error(), '\n'),
        "tokenizer refuses a word of 64 MiB + 1 bytes", "rc %d, %s", rc, ng_error());
  free(ids.ids);
  ng_tok_state_free(s);
  free(text);
}

// A megabyte of spaces and one of a letter: one word each, no regex stack overflow.
static void test_long_words(void) {
  size_t n = (size_t)1 << 20;
  char *text = ng_xmalloc(n);
  ng_tok_state *s = ng_tok_state_create(g_tok);
  bool ok = true;
  for (int k = 0; k < 2 && ok; k++) {
    memset(text, k ? 'a' : ' ', n);
    ng_ids ids = {0};
    char *back = NULL;
    size_t len = 0;
    ok = ng_tokenizer_encode(s, text, n, &ids) == 0 &&
         ng_tokenizer_decode(g_tok, ids.ids, ids.n, &back, &len) == 0 && len == n &&
         memcmp(back, text, n) == 0 && ids.n < n / 4;
    free(ids.ids);
    free(back);
  }
  CHECK(ok, "tokenizer encodes 1 MiB words and decodes them back", "%s", ng_error());
  ng_tok_state_free(s);
  free(text);
}

// A word after a shorter one in the same state (its scratch sized for the
// first, then reused): the ids a fresh state gives. BPE queues can hold more
// entries than a word has bytes (" requirements": 13 bytes, 16 entries).
static void test_state_reuse(void) {
  static const char *const words[] = {" requirements", "Acknowledgements", " SUSTAINED",
                                      "functional", " redistribute", "                "};
  int bad = 0;
  char first[64];
  for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
    size_t n = strlen(words[w]);
    ng_tok_state *ref = ng_tok_state_create(g_tok);
    ng_ids want = encode(ref, words[w], n);
    for (size_t m = 2; m < n; m++) {
      ng_tok_state *s = ng_tok_state_create(g_tok);
      memset(first, 'q', m);
      ng_ids a = encode(s, first, m), b = encode(s, words[w], n);
      bad += !same_ids(&b, want.ids, want.n);
      free(a.ids);
      free(b.ids);
      ng_tok_state_free(s);
    }
    free(want.ids);
    ng_tok_state_free(ref);
  }
  CHECK(bad == 0, "tokenizer state reused for a longer word", "%d words differ", bad);
}

// normgrow data with the tokenizer: the header holds the tokenizer's vocabulary
// and <|endoftext|>; each document is its ids and the separator; the same
// with 1 and 2 threads.
static void test_data_shard(void) {
  static const char *const docs[] = {"Hello world, it's a test.\n\u4e2d\u6587 caf\u00e9", "  second\r\n doc 123",
                                     "third<|endoftext|>doc"};
  char in[256], out[256], text[512] = "";
  snprintf(in, sizeof in, "%s/corpus.txt", g_dir);
  for (int d = 0; d < 3; d++) {
    strcat(text, docs[d]);
    strcat(text, "\n%\n");
  }
  FILE *fp = fopen(in, "wb");
  NG_ASSERT(fp && fputs(text, fp) >= 0 && fclose(fp) == 0);
  ng_data_options o = {.record_sep = "%", .tokenizer = g_tok, .val_fraction = 0.5, .seed = 2};
  const char *ins[] = {in};
  ng_tok_state *s = ng_tok_state_create(g_tok);
  bool ok = true;
  for (int threads = 1; threads <= 2; threads++) {
    snprintf(out, sizeof out, "%s/shards%d", g_dir, threads);
    omp_set_num_threads(threads);
    ng_data_stats st;
    ok = ok && ng_data_prepare(ins, 1, &o, out, &st) == 0;
    ng_ids want[2] = {{0}, {0}};
    ng_rng r;
    ng_rng_seed(&r, o.seed);
    for (int d = 0; ok && d < 3; d++) {
      int k = ng_rng_uniform(&r) < o.val_fraction ? 1 : 0;
      NG_ASSERT(ng_tokenizer_encode(s, docs[d], strlen(docs[d]), &want[k]) == 0);
      NG_ASSERT(ng_tokenizer_encode(s, "<|endoftext|>", 13, &want[k]) == 0);
    }
    for (int k = 0; ok && k < 2; k++) {
      ng_shard sh;
      ok = ng_shard_open(&sh, st.path[k]) == 0;
      if (!ok) break;
      int32_t *t = ng_xmalloc((sh.n_tokens + 1) * sizeof *t);
      ng_shard_read(&sh, 0, (int64_t)sh.n_tokens, t);
      ok = sh.vocab_size == 151669 && sh.separator == 151643 && sh.n_tokens == want[k].n;
      for (size_t i = 0; ok && i < want[k].n; i++) ok = t[i] == (int32_t)want[k].ids[i];
      free(t);
      ng_shard_close(&sh);
    }
    free(want[0].ids);
    free(want[1].ids);
    for (int k = 0; k < 2; k++)
      if (st.path[k]) unlink(st.path[k]);
    ng_data_stats_free(&st);
    rmdir(out);
  }
  unlink(in);
  omp_set_num_threads(1);
  CHECK(ok, "data --tokenizer: vocab 151669, separator 151643, each document's ids, any threads",
        "%s", ng_error());
  ng_tok_state_free(s);
}

// A FIFO as the tokenizer (reading one blocks until a writer comes): refused
// at once with one line. A hang ends the test by SIGALRM.
static void test_fifo(void) {
  char fifo[256];
  snprintf(fifo, sizeof fifo, "%s/tokenizer.json", g_dir);
  NG_ASSERT(mkfifo(fifo, 0600) == 0);
  ng_tokenizer *t = NULL;
  alarm(20);
  int rc = ng_tokenizer_load(g_dir, &t);
  alarm(0);
  CHECK(rc != 0 && !t && strstr(ng_error(), "tokenizer.json: not a regular file"),
        "tokenizer refuses a FIFO", "rc %d, %s", rc, ng_error());
  unlink(fifo);
}

static void test_facts(const char *path) {
  uint32_t eot = 0;
  CHECK(ng_tokenizer_vocab_size(g_tok) == 151669 &&
            ng_tokenizer_added_id(g_tok, "<|endoftext|>", &eot) == 0 && eot == 151643,
        "tokenizer vocab size 151669, <|endoftext|> = 151643", "%u, %u",
        ng_tokenizer_vocab_size(g_tok), eot);
  char *dir = ng_xstrdup(path);
  *strrchr(dir, '/') = 0;
  ng_tokenizer *t = NULL;
  CHECK(ng_tokenizer_load(dir, &t) == 0 && ng_tokenizer_vocab_size(t) == 151669,
        "tokenizer loads from a model directory", "%s", ng_error());
  ng_tokenizer_free(t);
  free(dir);
}

// ---------------------------------------------------------------------------
// Malformed and unsupported files

static char *g_json;
static size_t g_json_len;

// The real file with the `n` bytes at `at` replaced by `to` (or, when `at` is
// NULL, cut to `keep` bytes); loading it must fail with a message holding the
// path and `want`.
static void refused_edit(const char *test, const char *at, size_t n, const char *to, size_t keep,
                         const char *want) {
  char path[256];
  snprintf(path, sizeof path, "%s/bad.json", g_dir);
  FILE *fp = fopen(path, "wb");
  NG_ASSERT(fp);
  if (at) {
    fwrite(g_json, 1, (size_t)(at - g_json), fp);
    fputs(to, fp);
    fputs(at + n, fp);
  } else {
    fwrite(g_json, 1, keep, fp);
  }
  NG_ASSERT(fclose(fp) == 0);
  ng_tokenizer *t = NULL;
  int rc = ng_tokenizer_load(path, &t);
  char name[160];
  snprintf(name, sizeof name, "tokenizer refuses %s", test);
  CHECK(rc != 0 && !t && strstr(ng_error(), path) && strstr(ng_error(), want) &&
            !strchr(ng_error(), '\n'),
        name, "rc %d, message \"%s\", want \"%s\"", rc, ng_error(), want);
  ng_tokenizer_free(t);
  unlink(path);
}

// The first `from` replaced by `to`, or (from NULL) the file cut to `keep` bytes.
static void expect_refused(const char *test, const char *from, const char *to, size_t keep,
                           const char *want) {
  const char *at = from ? strstr(g_json, from) : NULL;
  NG_ASSERT(at || !from);
  refused_edit(test, at, from ? strlen(from) : 0, to, keep, want);
}

static size_t line_at(const char *p) {
  size_t line = 1;
  for (const char *q = g_json; q < p; q++) line += *q == '\n';
  return line;
}

static void test_refusals(const char *path) {
  NG_ASSERT(ng_read_file(path, SIZE_MAX, &g_json, &g_json_len) == 0);
  // Cut inside the merges: the message names the line where the text stops.
  size_t cut = (size_t)(strstr(g_json, "\"merges\"") - g_json) + 5000, line = 1;
  for (size_t i = 0; i < cut; i++) line += g_json[i] == '\n';
  char want[64];
  snprintf(want, sizeof want, "line %zu: not valid JSON", line);
  expect_refused("a truncated file", NULL, NULL, cut, want);
  expect_refused("an empty file", NULL, NULL, 0, "line 1: not valid JSON");
  // Both injected merges stand on the line of the "merges" key.
  size_t merges_line = line_at(strstr(g_json, "\"merges\""));
  char merge_want[160];
  snprintf(merge_want, sizeof merge_want,
           "line %zu: model.merges[0]: \"no_such_token\" is not in model.vocab", merges_line);
  expect_refused("a merge naming an unknown token", "\"merges\": [",
                 "\"merges\": [[\"Ġ\", \"no_such_token\"], ", 0, merge_want);
  snprintf(merge_want, sizeof merge_want,
           "line %zu: model.merges[0]: the merged token is not in model.vocab", merges_line);
  expect_refused("a merge whose result is not a token", "\"merges\": [",
                 "\"merges\": [[\"ä\", \"!\"], ", 0, merge_want);
  // Merge 1000 (the file has one "[" line per merge): its first string replaced.
  const char *m = strstr(g_json, "\"merges\"");
  for (int i = 0; i <= 1000; i++) m = strstr(m + 1, "\n      [");
  const char *first = strchr(m, '"'), *end = strchr(first + 1, '"');
  snprintf(merge_want, sizeof merge_want,
           "line %zu: model.merges[1000]: \"no_such_token\" is not in model.vocab", line_at(m + 1));
  refused_edit("merge 1000 naming an unknown token", first, (size_t)(end - first) + 1,
               "\"no_such_token\"", 0, merge_want);
  expect_refused("a normalizer other than NFC", "\"type\": \"NFC\"", "\"type\": \"NFKC\"",
                 0, "normalizer NFKC");
  expect_refused("a Split behavior other than Isolated", "\"Isolated\"", "\"Removed\"", 0,
                 "Split behavior Removed");
  expect_refused("BPE dropout", "\"dropout\": null", "\"dropout\": 0.1", 0, "BPE dropout");
  expect_refused("byte fallback", "\"byte_fallback\": false", "\"byte_fallback\": true", 0,
                 "BPE byte_fallback");
  expect_refused("an added token that strips", "\"lstrip\": false", "\"lstrip\": true", 0,
                 "added_tokens[0] with lstrip");
  expect_refused("a ByteLevel prefix space", "\"add_prefix_space\": false", "\"add_prefix_space\": true",
                 0, "pre_tokenizer.pretokenizers[1] ByteLevel with add_prefix_space");
  expect_refused("truncation", "\"truncation\": null", "\"truncation\": {\"max_length\": 8}", 0,
                 "truncation");
  expect_refused("a WordPiece model", "\"type\": \"BPE\"", "\"type\": \"WordPiece\"", 0,
                 "model type WordPiece");
  expect_refused("a bad regex", "\"Regex\": \"", "\"Regex\": \"(", 0, "Split regex");
  // What tokenizers' reader refuses (or, \u0000, cJSON would cut short).
  expect_refused("\"special\": null", "\"special\": true", "\"special\": null", 0,
                 "added_tokens[0].special is not a boolean");
  expect_refused("\"fuse_unk\": 1", "\"fuse_unk\": false", "\"fuse_unk\": 1", 0,
                 "model.fuse_unk is not a boolean");
  expect_refused("a vocabulary key with \\u0000", "\"!\": 0,", "\"!\\u0000x\": 151700, \"!\": 0,",
                 0, "a string holding \\u0000");
  expect_refused("a key tokenizers does not know", "\"version\": \"1.0\",",
                 "\"version\": \"1.0\", \"extra\": 1,", 0, "key \"extra\" at the top");
  expect_refused("merges in both forms", "\"merges\": [", "\"merges\": [\"\u0120 \u0120\", ", 0,
                 "model.merges[1]: \"a b\" strings and [\"a\", \"b\"] pairs mixed");
  expect_refused("an added id with a fraction", "\"id\": 151643,", "\"id\": 151643.0,", 0,
                 "a number with a fraction or an exponent");
  refused_edit("text after the JSON object", g_json + g_json_len, 0, "x", 0,
               "text after the JSON object");
  // What Oniguruma reads otherwise than PCRE2, and normgrow does not translate.
  expect_refused("\\d in the regex", "\\\\p{N}|", "\\\\d|", 0, "Split regex: \"\\d\" at offset");
  expect_refused("(?i:ss) in the regex", "(?i:'s|", "(?i:ss|", 0,
                 "Oniguruma's case folding matches these two to one character too");
  free(g_json);
}

static const char *tokenizer_path(char *buf, size_t n) {
  const char *env = getenv("NG_TOKENIZER"), *root = getenv("NG_ROOT");
  if (env)
    snprintf(buf, n, "%s/tokenizer.json", env);
  else
    snprintf(buf, n, "%s/../shared/data/qwen3-tokenizer/tokenizer.json", root ? root : ".");
  return access(buf, R_OK) == 0 ? buf : NULL;
}

int main(void) {
  char path[1024], vectors[1024];
  const char *root = getenv("NG_ROOT");
  if (!tokenizer_path(path, sizeof path)) {
    printf("# skip test_tokenizer: no Qwen3 tokenizer.json at %s (set NG_TOKENIZER)\n", path);
    return 0;
  }
  snprintf(vectors, sizeof vectors, "%s/tests/fixtures/tokenizer/vectors.json", root ? root : ".");
  NG_ASSERT(mkdtemp(g_dir));
  ng_tokenizer *t = NULL;
  if (ng_tokenizer_load(path, &t) != 0) {
    printf("FAIL tokenizer loads: %s\n", ng_error());
    return 1;
  }
  g_tok = t;
  vector *v;
  int n = load_vectors(vectors, &v);
  test_vectors(v, n);
  test_decode(v, n);
  test_threads(v, n);
  test_pieces(v, n);
  test_long_words();
  test_limits();
  test_state_reuse();
  test_data_shard();
  test_facts(path);
  test_fifo();
  test_refusals(path);
  for (int i = 0; i < n; i++) {
    free(v[i].name);
    free(v[i].text);
    free(v[i].ids);
  }
  free(v);
  ng_tokenizer_free(t);
  rmdir(g_dir);
  return TEST_RESULT();
}
