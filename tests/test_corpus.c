// Tests for the streaming shard writer, manifests read as one shard, and
// ng_data_prepare on corpora: JSONL, gzip, directories, --max-tokens, thread
// counts, and malformed inputs (one message naming file and line, nothing left).
// Byte-level throughout, so nothing here needs the Qwen3 tokenizer.
#include "normgrow/common.h"
#include "normgrow/data.h"
#include "normgrow/fileio.h"
#include "normgrow/rng.h"

#include <dirent.h>
#include <omp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"

static char g_dir[] = "/tmp/ng_test_corpus_XXXXXX";

static char *path_in(const char *dir, const char *name) { return ng_path_join(dir, name); }

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  NG_ASSERT(fp && (n == 0 || fwrite(data, 1, n, fp) == n) && fclose(fp) == 0);
}

static void write_gzip(const char *path, const char *text) {
  gzFile gz = gzopen(path, "wb");
  NG_ASSERT(gz && gzwrite(gz, text, (unsigned)strlen(text)) == (int)strlen(text));
  NG_ASSERT(gzclose(gz) == Z_OK);
}

static uint8_t *read_all(const char *path, size_t *n) {
  char *text = NULL;
  if (ng_read_file(path, SIZE_MAX, &text, n) != 0) return NULL;
  return (uint8_t *)text;
}

static bool same_file(const char *a, const char *b) {
  size_t na, nb;
  uint8_t *x = read_all(a, &na), *y = read_all(b, &nb);
  bool same = x && y && na == nb && memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

// Names in `dir` (any), for "nothing left behind" checks.
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// All tokens of a shard (file or manifest), via ng_shard_read.
static int32_t *shard_tokens(const char *path, uint64_t *n) {
  ng_shard s;
  if (ng_shard_open(&s, path) != 0) return NULL;
  int32_t *t = ng_xmalloc((s.n_tokens + 1) * sizeof *t);
  ng_shard_read(&s, 0, (int64_t)s.n_tokens, t);
  *n = s.n_tokens;
  ng_shard_close(&s);
  return t;
}

// ---------------------------------------------------------------------------
// Writer and manifest

static void blocked(int sig) {
  (void)sig;
  static const char msg[] = "FAIL a reader waited on a FIFO for 20 s\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(1);
}

static void test_writer_manifest(void) {
  char *dir = path_in(g_dir, "w");
  NG_ASSERT(ng_make_dir(dir) == 0);
  uint32_t ids[1000];
  for (int i = 0; i < 1000; i++) ids[i] = (uint32_t)(i * 7 % 50);
  // The same tokens as one file and as files of 300 (appended in uneven pieces).
  ng_shard_writer *one, *many;
  char *one_path = NULL, *many_path = NULL;
  NG_ASSERT(ng_shard_writer_open(&one, dir, "one", 50, 49, 1 << 20) == 0);
  NG_ASSERT(ng_shard_writer_open(&many, dir, "many", 50, 49, 300) == 0);
  for (int at = 0, k = 1; at < 1000; at += k, k = k * 3 % 97 + 1) {
    int n = at + k > 1000 ? 1000 - at : k;
    NG_ASSERT(ng_shard_writer_append(one, ids + at, (size_t)n) == 0);
    NG_ASSERT(ng_shard_writer_append(many, ids + at, (size_t)n) == 0);
  }
  CHECK(ng_shard_writer_finish(one, 0, &one_path) == 0 && ng_shard_writer_finish(many, 0, &many_path) == 0,
        "shard writer finishes", "%s", ng_error());
  char *want_many = path_in(dir, "many.manifest.json"), *want_one = path_in(dir, "one.bin");
  char *f3 = path_in(dir, "many-00003.bin"), *f4 = path_in(dir, "many-00004.bin");
  CHECK(strcmp(one_path, want_one) == 0 && strcmp(many_path, want_many) == 0 &&
            access(f3, R_OK) == 0 && access(f4, R_OK) != 0,
        "1000 tokens in files of 300: 4 files and a manifest; in one: one.bin", "%s, %s", one_path,
        many_path);
  uint64_t n1 = 0, n2 = 0;
  int32_t *t1 = shard_tokens(one_path, &n1), *t2 = shard_tokens(many_path, &n2);
  bool same = t1 && t2 && n1 == 1000 && n2 == 1000;
  for (int i = 0; same && i < 1000; i++) same = t1[i] == (int32_t)ids[i] && t2[i] == t1[i];
  CHECK(same, "a manifest reads as one shard of its files' tokens", "%s", ng_error());
  free(t1);
  free(t2);

  // Fixed batches whose windows cross file boundaries: the same as from one file.
  ng_shard a, b;
  NG_ASSERT(ng_shard_open(&a, one_path) == 0 && ng_shard_open(&b, many_path) == 0);
  int32_t ta[4 * 77], ga[4 * 77], tb[4 * 77], gb[4 * 77];
  bool batches = a.n_parts == 1 && b.n_parts == 4;
  for (int64_t i = 0; batches && i < 12; i++) {
    ng_batch_fixed(&a, i, 4, 77, ta, ga);
    ng_batch_fixed(&b, i, 4, 77, tb, gb);
    batches = memcmp(ta, tb, sizeof ta) == 0 && memcmp(ga, gb, sizeof ga) == 0;
  }
  CHECK(batches, "batches from a manifest equal those from one file", "%d parts", b.n_parts);
  ng_shard_close(&a);
  ng_shard_close(&b);

  // An abandoned writer leaves nothing.
  int before = count_entries(dir);
  ng_shard_writer *w;
  NG_ASSERT(ng_shard_writer_open(&w, dir, "gone", 50, 49, 10) == 0);
  NG_ASSERT(ng_shard_writer_append(w, ids, 35) == 0);
  char *gone = NULL;
  ng_fail("stopped");
  CHECK(ng_shard_writer_finish(w, -1, &gone) == -1 && !gone && count_entries(dir) == before,
        "an abandoned shard writer leaves no file", "%d entries, %d before", count_entries(dir), before);

  // Manifests that do not match their files.
  size_t len;
  char *manifest = (char *)read_all(many_path, &len);
  struct {
    const char *name, *from, *to, *want;
  } bad[] = {
      {"a count that is off", "\"n_tokens\":\t1000", "\"n_tokens\":\t999", "999 tokens; its files hold"},
      {"a missing file", "many-00002.bin", "many-00009.bin", "many-00009.bin: cannot open"},
      {"another vocabulary", "\"vocab_size\":\t50", "\"vocab_size\":\t51", "vocab_size 51"},
      {"a path for a name", "many-00002.bin", "../many-00002.bin", "is not a file name"},
      {"not a manifest", "normgrow-shards", "other", "not a normgrow shard manifest"},
      {"a FIFO for a file", "many-00002.bin", "fifo.bin", "fifo.bin: not a regular file"},
  };
  char *bad_path = path_in(dir, "bad.manifest.json"), *fifo = path_in(dir, "fifo.bin");
  NG_ASSERT(mkfifo(fifo, 0600) == 0);
  signal(SIGALRM, blocked);
  alarm(20);  // nothing here may wait on a FIFO
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *at = strstr(manifest, bad[i].from);
    NG_ASSERT(at);
    FILE *fp = fopen(bad_path, "wb");
    fwrite(manifest, 1, (size_t)(at - manifest), fp);
    fputs(bad[i].to, fp);
    fputs(at + strlen(bad[i].from), fp);
    fclose(fp);
    ng_shard s;
    int rc = ng_shard_open(&s, bad_path);
    char name[128];
    snprintf(name, sizeof name, "manifest with %s refused", bad[i].name);
    CHECK(rc != 0 && strstr(ng_error(), bad[i].want), name, "%s", ng_error());
  }
  ng_shard s;
  int rc = ng_shard_open(&s, fifo);
  CHECK(rc != 0 && strstr(ng_error(), "fifo.bin: not a regular file"), "a FIFO for a shard refused",
        "%s", ng_error());
  alarm(0);
  unlink(fifo);
  free(fifo);
  free(bad_path);
  free(manifest);
  free(one_path);
  free(many_path);
  free(want_one);
  free(want_many);
  free(f3);
  free(f4);
  free(gone);
  free(dir);
}

// ---------------------------------------------------------------------------
// ng_data_prepare

static const char *g_jsonl =
    "{\"text\": \"first doc\", \"id\": 1}\n"
    "\n"
    "{\"id\": 2, \"text\": \"second\\ndoc \\u00e9\"}\n"
    "{\"text\": \"   \"}\n"
    "{\"text\": \"third\"}";

// JSONL (plain and gzip) and a directory: documents and their bytes in order.
static void test_inputs(void) {
  char *dir = path_in(g_dir, "in"), *sub = path_in(dir, "sub");
  NG_ASSERT(ng_make_dir(sub) == 0);
  char *a = path_in(dir, "a.jsonl"), *b = path_in(sub, "b.jsonl.gz"), *out = path_in(g_dir, "o1");
  write_bytes(a, g_jsonl, strlen(g_jsonl));
  write_gzip(b, "{\"text\": \"gz one\"}\n{\"text\": \"gz two\"}\n");
  const char *in[] = {dir};
  ng_data_options o = {.jsonl_field = "text", .val_fraction = 0.3, .seed = 4};
  ng_data_stats st;
  int rc = ng_data_prepare(in, 1, &o, out, &st);
  CHECK(rc == 0 && st.docs[0] + st.docs[1] == 5, "JSONL and gzip JSONL below a directory: 5 documents",
        "rc %d (%s), %llu documents", rc, ng_error(), (unsigned long long)(st.docs[0] + st.docs[1]));
  // Each document's bytes and 256, in the split its draw sends it to.
  const char *docs[] = {"first doc", "second\ndoc \xc3\xa9", "third", "gz one", "gz two"};
  uint32_t want[2][64];
  uint64_t nw[2] = {0, 0};
  ng_rng r;
  ng_rng_seed(&r, o.seed);
  for (int d = 0; d < 5; d++) {
    int k = ng_rng_uniform(&r) < o.val_fraction ? 1 : 0;
    for (const char *c = docs[d]; *c; c++) want[k][nw[k]++] = (uint8_t)*c;
    want[k][nw[k]++] = NG_BYTE_EOT;
  }
  bool ok = rc == 0 && nw[0] > 0 && nw[1] > 0;
  for (int k = 0; ok && k < 2; k++) {
    uint64_t n = 0;
    int32_t *t = shard_tokens(st.path[k], &n);
    ok = t && n == nw[k];
    for (uint64_t i = 0; ok && i < n; i++) ok = t[i] == (int32_t)want[k][i];
    free(t);
  }
  CHECK(ok, "JSONL fields (escapes decoded) in input order, blank ones dropped", "%s", ng_error());
  ng_data_stats_free(&st);
  free(a);
  free(b);
  free(sub);
  free(dir);
  free(out);
}

// Lines that come close to what is refused are read: a backslash before
// "u0000" (no NUL), whitespace and CR after the object, a key that another
// object inside holds too.
static void test_jsonl_edges(void) {
  const char text[] = "{\"text\": \"a\\\\u0000\"}  \r\n"
                      "{\"text\": \"b\", \"meta\": {\"text\": 1}}\n"
                      "{\"text\": \"\\ud83d\\ude00\"}\n";
  char *in = path_in(g_dir, "edges.jsonl"), *out = path_in(g_dir, "edges_out");
  write_bytes(in, text, strlen(text));
  const char *ins[] = {in};
  ng_data_options o = {.jsonl_field = "text", .val_fraction = 0.5, .seed = 0};
  ng_data_stats st;
  int rc = ng_data_prepare(ins, 1, &o, out, &st);
  // "a\u0000" (7 bytes), "b", U+1F600 (4 bytes), each and a separator.
  CHECK(rc == 0 && st.docs[0] + st.docs[1] == 3 && st.tokens[0] + st.tokens[1] == 8 + 2 + 5,
        "JSONL lines close to the refused ones are read", "rc %d (%s), %llu tokens", rc, ng_error(),
        (unsigned long long)(st.tokens[0] + st.tokens[1]));
  ng_data_stats_free(&st);
  free(in);
  free(out);
}

// Records of many lines, with 1 and 3 threads, whole and gzip'd: the same files.
static void test_threads_and_gzip(void) {
  size_t cap = 1 << 22, n = 0;
  char *text = ng_xmalloc(cap);
  for (int i = 0; i < 20000; i++)
    n += (size_t)snprintf(text + n, cap - n, "record %d %.*s\n%%\n", i, i % 50, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
  char *plain = path_in(g_dir, "recs.txt"), *gz = path_in(g_dir, "recs.txt.gz");
  write_bytes(plain, text, n);
  gzFile g = gzopen(gz, "wb");
  NG_ASSERT(g && gzwrite(g, text, (unsigned)n) == (int)n && gzclose(g) == Z_OK);
  char *o1 = path_in(g_dir, "t1"), *o3 = path_in(g_dir, "t3"), *og = path_in(g_dir, "tg");
  ng_data_options o = {.record_sep = "%", .val_fraction = 0.1, .seed = 9, .file_tokens = 100000};
  ng_data_stats s1, s3, sg;
  const char *in_plain[] = {plain}, *in_gz[] = {gz};
  omp_set_num_threads(1);
  int rc = ng_data_prepare(in_plain, 1, &o, o1, &s1);
  omp_set_num_threads(3);
  rc |= ng_data_prepare(in_plain, 1, &o, o3, &s3);
  rc |= ng_data_prepare(in_gz, 1, &o, og, &sg);
  omp_set_num_threads(1);
  bool same = rc == 0;
  const char *names[] = {"train-00000.bin", "train-00003.bin", "train.manifest.json", "val.bin"};
  for (int i = 0; same && i < 4; i++) {
    char *a = path_in(o1, names[i]), *b = path_in(o3, names[i]), *c = path_in(og, names[i]);
    same = same_file(a, b) && same_file(a, c);
    free(a);
    free(b);
    free(c);
  }
  CHECK(same && s1.docs[0] + s1.docs[1] == 20000, "shards the same for 1 and 3 threads, plain and gzip",
        "rc %d (%s)", rc, ng_error());

  // --max-tokens: the training split is cut at exactly that many.
  char *om = path_in(g_dir, "tm");
  ng_data_options m = o;
  m.max_tokens = 123457;
  ng_data_stats sm;
  rc = ng_data_prepare(in_plain, 1, &m, om, &sm);
  uint64_t nm = 0;
  int32_t *tm = rc == 0 ? shard_tokens(sm.path[0], &nm) : NULL, *tf = NULL;
  uint64_t nf = 0;
  tf = shard_tokens(s1.path[0], &nf);
  CHECK(rc == 0 && nm == 123457 && tm && tf && memcmp(tm, tf, nm * sizeof *tm) == 0 &&
            sm.docs[1] < s1.docs[1],
        "--max-tokens cuts the training split at exactly N tokens, a prefix of the full one",
        "rc %d, %llu tokens", rc, (unsigned long long)nm);
  free(tm);
  free(tf);
  ng_data_stats_free(&s1);
  ng_data_stats_free(&s3);
  ng_data_stats_free(&sg);
  ng_data_stats_free(&sm);
  free(text);
  free(plain);
  free(gz);
  free(o1);
  free(o3);
  free(og);
  free(om);
}

// A malformed input: -1, one line naming the file and line, no directory left.
static void expect_refused(const char *test, const char *name, const void *bytes, size_t n,
                           const ng_data_options *o, const char *want) {
  char *in = path_in(g_dir, name), *out = path_in(g_dir, "bad_out");
  write_bytes(in, bytes, n);
  const char *ins[] = {in};
  ng_data_stats st;
  int rc = ng_data_prepare(ins, 1, o, out, &st);
  char full[256];
  snprintf(full, sizeof full, "%s: %s", in, want);
  CHECK(rc == -1 && strstr(ng_error(), full) && !strchr(ng_error(), '\n') && access(out, F_OK) != 0,
        test, "rc %d, message \"%s\", want \"%s\"", rc, ng_error(), full);
  unlink(in);
  free(in);
  free(out);
}

// The same for a JSONL file whose documents are the string field `field`.
static void expect_input_error(const char *test, const char *name, const void *bytes, size_t n,
                               const char *field, const char *want) {
  ng_data_options o = {.jsonl_field = field, .val_fraction = 0.5, .seed = 1};
  expect_refused(test, name, bytes, n, &o, want);
}

// JSONL lines refused, each with what is wrong where (after "<file>: "): what
// Python's json reads otherwise, or what would be read wrongly, among them.
static const struct {
  const char *name, *text, *want;
} bad_jsonl[] = {
    {"a line that is not JSON", "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": oops}\n",
     "line 3: not valid JSON at column 10: \"oops}\""},
    {"a line that is not an object", "{\"text\": \"ok\"}\n[\"text\", \"ok\"]\n", "line 2: not a JSON object"},
    {"a field with an escaped NUL", "{\"text\": \"ok\"}\n{\"text\": \"hello\\u0000world\"}\n",
     "line 2: a NUL character (\\u0000) at column 16"},
    {"a NUL in another field", "{\"text\": \"ok\"}\n{\"id\": \"\\\\\\u0000\", \"text\": \"b\"}\n",
     "line 2: a NUL character (\\u0000) at column 11"},
    {"two JSON objects on one line", "{\"text\": \"a\"} {\"text\": \"b\"}\n",
     "line 1: text after the JSON object at column 15: \"{\"text\": \"b\"}\""},
    {"text after the object", "{\"text\": \"ok\"}\n\n{\"text\": \"a\"}garbage\r\n",
     "line 3: text after the JSON object at column 14: \"garbage\""},
    {"a key twice", "{\"text\": \"a\", \"id\": 1, \"text\": \"b\"}\n", "line 1: the key \"text\" twice"},
    {"a lone UTF-16 surrogate", "{\"text\": \"ok\"}\n{\"text\": \"a\\ud800\"}\n",
     "line 2: not valid JSON at column 12: \"\\ud800\"}\""},
    {"a line without the field", "{\"text\": \"ok\"}\n\n{\"body\": \"x\"}\n", "line 3: no string field \"text\""},
    {"a field that is not a string", "{\"text\": 5}\n", "line 1: no string field \"text\""},
};

static void test_malformed(void) {
  for (size_t i = 0; i < sizeof bad_jsonl / sizeof *bad_jsonl; i++) {
    char name[128];
    snprintf(name, sizeof name, "JSONL: %s is refused", bad_jsonl[i].name);
    expect_input_error(name, "bad.jsonl", bad_jsonl[i].text, strlen(bad_jsonl[i].text), "text",
                       bad_jsonl[i].want);
  }
  const char raw_nul[] = "{\"text\": \"ok\"}\n{\"text\": \"hello\0world\"}\n";
  expect_input_error("JSONL: a line with a NUL byte is refused", "bad.jsonl", raw_nul, sizeof raw_nul - 1,
                     "text", "line 2: a NUL character (\\u0000) at column 16");

  // A gzip file with its middle overwritten, and one cut short.
  char *gz = path_in(g_dir, "g.gz");
  size_t cap = 400000, n = 0;
  char *text = ng_xmalloc(cap);
  for (int i = 0; i < 10000; i++) n += (size_t)snprintf(text + n, cap - n, "{\"text\": \"line %d\"}\n", i * 7919 % 10007);
  gzFile g = gzopen(gz, "wb");
  NG_ASSERT(g && gzwrite(g, text, (unsigned)n) == (int)n && gzclose(g) == Z_OK);
  size_t len;
  uint8_t *bytes = read_all(gz, &len);
  uint8_t *corrupt = ng_xmalloc(len);
  memcpy(corrupt, bytes, len);
  for (size_t i = len / 2; i < len / 2 + 64; i++) corrupt[i] ^= 0x5a;
  expect_input_error("a corrupt gzip file", "d.jsonl.gz", corrupt, len, "text", "line ");
  CHECK(strstr(ng_error(), "corrupt gzip data"), "a corrupt gzip file is named as such", "%s", ng_error());
  expect_input_error("a truncated gzip file", "e.jsonl.gz", bytes, len * 2 / 3, "text", "line ");
  CHECK(strstr(ng_error(), "corrupt gzip data (unexpected end of file)"),
        "a truncated gzip file is named as such", "%s", ng_error());
  free(corrupt);
  free(bytes);
  free(text);
  unlink(gz);
  free(gz);
}

// Lines and documents past the limit (made small here: max_doc) are refused
// as soon as the reader has seen that many bytes of them; one of exactly the
// limit is read.
static void test_limits(void) {
  enum { LIMIT = 4096 };
  size_t cap = 5 * LIMIT;
  char *text = ng_xmalloc(cap);
  ng_data_options jsonl = {.jsonl_field = "text", .val_fraction = 0.5, .seed = 0, .max_doc = LIMIT};
  // {"text": "xxx..."}: 12 bytes around the x's.
  size_t n = (size_t)snprintf(text, cap, "{\"text\": \"a\"}\n{\"text\": \"%0*d\"}\n{\"text\": \"b\"}\n",
                              LIMIT + LIMIT / 2 - 12, 0);
  expect_refused("a JSONL line of 1.5 times the limit is refused", "long.jsonl", text, n, &jsonl,
                 "line 2: longer than 4096 bytes");
  n = (size_t)snprintf(text, cap, "{\"text\": \"a\"}\n{\"text\": \"%0*d\"}\n{\"text\": \"b\"}\n",
                       LIMIT - 12, 0);
  char *in = path_in(g_dir, "limit.jsonl"), *out = path_in(g_dir, "limit_out");
  write_bytes(in, text, n);
  const char *ins[] = {in};
  ng_data_stats st;
  int rc = ng_data_prepare(ins, 1, &jsonl, out, &st);
  CHECK(rc == 0 && st.tokens[0] + st.tokens[1] == 2 + (LIMIT - 12) + 1 + 2,
        "a JSONL line of exactly the limit is read", "rc %d (%s)", rc, ng_error());
  ng_data_stats_free(&st);
  memset(text, 'y', cap);
  memcpy(text, "{\"text\": \"a\"}\n{\"text\": \"", 25);
  expect_refused("a JSONL line without a newline past the limit is refused", "long2.jsonl", text, cap,
                 &jsonl, "line 2: longer than 4096 bytes");
  ng_data_options records = {.record_sep = "%", .val_fraction = 0.5, .seed = 0, .max_doc = LIMIT};
  memset(text, 'y', cap);
  memcpy(text, "a\n%\n", 4);
  expect_refused("a record's line past the limit is refused", "long.txt", text, cap, &records,
                 "line 3: longer than 4096 bytes");
  free(in);
  free(out);
  free(text);
}

// A split that cannot be put in place (val.bin is a directory here) fails the
// whole prepare and takes the split already in place with it.
static void test_no_half_output(void) {
  char *out = path_in(g_dir, "half"), *blocker = path_in(out, "val.bin"), *in = path_in(g_dir, "half.txt");
  char *inside = path_in(blocker, "x");
  NG_ASSERT(ng_make_dir(blocker) == 0);
  write_bytes(inside, "x", 1);
  const char text[] = "one\n%\ntwo\n%\nthree\n%\nfour\n";
  write_bytes(in, text, strlen(text));
  const char *ins[] = {in};
  ng_data_options o = {.record_sep = "%", .val_fraction = 0.5, .seed = 1};
  ng_data_stats st;
  int rc = ng_data_prepare(ins, 1, &o, out, &st);
  CHECK(rc == -1 && count_entries(out) == 1, "a split that cannot be put in place leaves no other split",
        "rc %d, %d entries (%s)", rc, count_entries(out), ng_error());
  unlink(inside);
  rmdir(blocker);
  free(inside);
  free(in);
  free(blocker);
  free(out);
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *p = path_in(dir, e->d_name);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
    else unlink(p);
    free(p);
  }
  closedir(d);
  rmdir(dir);
}

int main(void) {
  NG_ASSERT(mkdtemp(g_dir));
  test_writer_manifest();
  test_inputs();
  test_jsonl_edges();
  test_threads_and_gzip();
  test_malformed();
  test_no_half_output();
  test_limits();
  remove_tree(g_dir);
  return TEST_RESULT();
}
