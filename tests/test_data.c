// Tests for ref/data.c: shard round trip, one bad file per validation rule of
// the reader, sampled and fixed batches, and ng_data_build (whole files,
// "%"-separated records, the EOT after each document, the seeded split).
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/data.h"
#include "normgrow/rng.h"

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char g_dir[] = "/tmp/ng_test_data_XXXXXX";

// Full path of `name` inside the test directory. Each call has its own
// buffer, never reused, so that paths stay valid for the whole run.
static const char *tmp_path(const char *name) {
  static char bufs[256][512];
  static int slot;
  NG_ASSERT(slot < 256);
  char *buf = bufs[slot++];
  snprintf(buf, sizeof bufs[0], "%s/%s", g_dir, name);
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  NG_ASSERT(fp);
  NG_ASSERT(n == 0 || fwrite(data, 1, n, fp) == n);
  NG_ASSERT(fclose(fp) == 0);
}

static void write_text(const char *path, const char *text) {
  write_bytes(path, text, strlen(text));
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static bool is_zeroed(const ng_shard *s) {
  static const ng_shard zero;
  return memcmp(s, &zero, sizeof zero) == 0;
}

// Number of entries in the test directory whose name contains ".tmp.".
static int count_temp_files(void) {
  DIR *d = opendir(g_dir);
  NG_ASSERT(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

// ---------------------------------------------------------------------------
// Shard files

static void test_roundtrip(void) {
  const uint32_t tokens[] = {0, 5, 9, 3, 9, 1};
  const char *path = tmp_path("round.bin");
  int rc = ng_shard_write(path, 10, 9, tokens, 6);
  CHECK(rc == 0, "shard write", "%s", ng_error());
  CHECK(count_temp_files() == 0, "shard write leaves no temporary file", "found some");
  ng_shard s;
  rc = ng_shard_open(&s, path);
  CHECK(rc == 0, "shard open", "%s", ng_error());
  if (rc != 0) return;
  CHECK(s.vocab_size == 10 && s.separator == 9 && s.n_tokens == 6, "shard header round trip",
        "vocab %u sep %u n %llu", s.vocab_size, s.separator, (unsigned long long)s.n_tokens);
  CHECK(memcmp(s.parts[0].tokens, tokens, sizeof tokens) == 0, "shard tokens round trip", "differ");
  CHECK(s.parts[0].map_size == NG_SHARD_HEADER + sizeof tokens && memcmp(s.parts[0].map, "NGTOKENS", 8) == 0,
        "shard file is header + 4 n bytes", "%zu bytes", s.parts[0].map_size);
  CHECK(strcmp(s.path, path) == 0, "shard keeps its path", "%s", s.path);
  ng_shard_close(&s);
  CHECK(is_zeroed(&s), "shard close zeroes", "not zeroed");
  ng_shard_close(&s);  // safe on a zeroed struct

  rc = ng_shard_write(path, 1, 0, NULL, 0);
  CHECK(rc == 0 && ng_shard_open(&s, path) == 0 && s.n_tokens == 0 && s.vocab_size == 1,
        "empty shard round trip", "%s", ng_error());
  ng_shard_close(&s);
}

static void expect_write_error(const char *test, uint32_t vocab, uint32_t sep,
                               const uint32_t *tokens, uint64_t n, const char *what) {
  const char *path = tmp_path("unwritten.bin");
  int rc = ng_shard_write(path, vocab, sep, tokens, n);
  const char *err = ng_error();
  CHECK(rc == -1 && strstr(err, path) && strstr(err, what) && !exists(path), test,
        "rc %d, message: %s", rc, err);
}

static void test_write_errors(void) {
  const uint32_t tokens[] = {1, 2, 12};
  expect_write_error("shard write rejects token >= vocab", 12, 0, tokens, 3,
                     "token 12 at position 2 is >= vocab_size 12");
  expect_write_error("shard write rejects separator >= vocab", 13, 13, tokens, 3,
                     "separator 13 is >= vocab_size 13");
  expect_write_error("shard write rejects vocab 0", 0, 0, NULL, 0, "vocab_size 0");
  const char *path = tmp_path("no-such-dir/x.bin");
  int rc = ng_shard_write(path, 13, 0, tokens, 3);
  CHECK(rc == -1 && strstr(ng_error(), "no-such-dir/x.bin"), "shard write to a missing dir fails",
        "rc %d, message: %s", rc, ng_error());
}

// A shard by hand: the header fields given, then `n_stored` tokens (0, 1, 2, ...).
typedef struct {
  const char *magic;
  uint32_t version, vocab, sep, reserved;
  uint64_t count;
  size_t n_stored, extra_bytes;  // tokens actually written; junk bytes after them
  int64_t bad_pos;               // when >= 0, the token there is set to vocab
} raw_shard;

static void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static const char *write_raw(const char *name, const raw_shard *r) {
  size_t n = NG_SHARD_HEADER + 4 * r->n_stored + r->extra_bytes;
  uint8_t *buf = ng_xcalloc(n, 1);
  memcpy(buf, r->magic, 8);
  put_le(buf + 8, r->version, 4);
  put_le(buf + 12, r->vocab, 4);
  put_le(buf + 16, r->sep, 4);
  put_le(buf + 20, r->reserved, 4);
  put_le(buf + 24, r->count, 8);
  for (size_t i = 0; i < r->n_stored; i++) {
    uint32_t t = (int64_t)i == r->bad_pos || r->vocab == 0 ? r->vocab : (uint32_t)i % r->vocab;
    put_le(buf + NG_SHARD_HEADER + 4 * i, t, 4);
  }
  const char *path = tmp_path(name);
  write_bytes(path, buf, n);
  free(buf);
  return path;
}

static raw_shard good_raw(void) {
  return (raw_shard){.magic = "NGTOKENS", .version = 1, .vocab = 257, .sep = 256,
                     .count = 20, .n_stored = 20, .bad_pos = -1};
}

// Opening must fail with one line that names the file and contains `what`;
// the struct must be left zeroed.
static void expect_bad_shard(const char *test, const char *path, const char *what) {
  ng_shard s;
  memset(&s, 0xab, sizeof s);
  int rc = ng_shard_open(&s, path);
  const char *err = ng_error();
  bool one_line = strchr(err, '\n') == NULL;
  CHECK(rc == -1 && strstr(err, path) && strstr(err, what) && one_line && is_zeroed(&s), test,
        "rc %d, zeroed %d, message: %s", rc, is_zeroed(&s), err);
  if (rc == 0) ng_shard_close(&s);
}

static void test_bad_shards(void) {
  raw_shard r = good_raw();
  ng_shard s;
  int rc = ng_shard_open(&s, write_raw("good.bin", &r));
  CHECK(rc == 0, "hand-made shard opens", "%s", ng_error());
  ng_shard_close(&s);

  r = good_raw(), r.magic = "NGTOKENZ";
  expect_bad_shard("bad magic", write_raw("magic.bin", &r),
                   "not a normgrow token shard (bad magic)");
  r = good_raw(), r.version = 2;
  expect_bad_shard("bad version", write_raw("version.bin", &r), "version 2");
  r = good_raw(), r.reserved = 7;
  expect_bad_shard("reserved not 0", write_raw("reserved.bin", &r), "reserved header field is 7");
  r = good_raw(), r.vocab = 0, r.sep = 0;
  expect_bad_shard("vocab 0", write_raw("vocab0.bin", &r), "vocab_size 0");
  r = good_raw(), r.vocab = 0x80000000u, r.sep = 0;
  expect_bad_shard("vocab past int32", write_raw("vocabbig.bin", &r), "vocab_size 2147483648");
  r = good_raw(), r.sep = 257;
  expect_bad_shard("separator >= vocab", write_raw("sep.bin", &r),
                   "separator 257 is >= vocab_size 257");
  r = good_raw(), r.n_stored = 19;
  expect_bad_shard("truncated tokens", write_raw("trunc.bin", &r),
                   "file is 108 bytes, header says 32 + 4 x 20");
  r = good_raw(), r.extra_bytes = 4;
  expect_bad_shard("trailing token", write_raw("trail4.bin", &r),
                   "file is 116 bytes, header says 32 + 4 x 20");
  r = good_raw(), r.extra_bytes = 1;
  expect_bad_shard("trailing byte", write_raw("trail1.bin", &r),
                   "file is 113 bytes, header says 32 + 4 x 20");
  r = good_raw(), r.count = UINT64_MAX / 2;  // 32 + 4 n overflows 64 bits
  expect_bad_shard("huge token count", write_raw("huge.bin", &r), "header says 32 + 4 x");
  r = good_raw(), r.bad_pos = 13;
  expect_bad_shard("token >= vocab", write_raw("token.bin", &r),
                   "token 257 at position 13 is >= vocab_size 257");

  uint8_t short_file[20] = "NGTOKENS";
  write_bytes(tmp_path("short.bin"), short_file, sizeof short_file);
  expect_bad_shard("file shorter than the header", tmp_path("short.bin"), "file is 20 bytes");
  write_bytes(tmp_path("empty.bin"), "", 0);
  expect_bad_shard("empty file", tmp_path("empty.bin"), "file is 0 bytes");
  expect_bad_shard("missing file", tmp_path("absent.bin"), "cannot open");
  expect_bad_shard("directory", g_dir, "not a regular file");
}

// ---------------------------------------------------------------------------
// Batches

// A shard whose token at position i is i (vocab n, so ids are positions).
static void open_identity_shard(ng_shard *s, const char *name, uint32_t n) {
  uint32_t *tokens = ng_xmalloc(n * sizeof *tokens);
  for (uint32_t i = 0; i < n; i++) tokens[i] = i;
  const char *path = tmp_path(name);
  NG_ASSERT(ng_shard_write(path, n ? n : 1, 0, tokens, n) == 0);
  NG_ASSERT(ng_shard_open(s, path) == 0);
  free(tokens);
}

// Every window is tokens start..start+T-1, targets one further; returns false
// otherwise. Starts go to starts[0..B).
static bool windows_ok(const int32_t *tok, const int32_t *tgt, int64_t B, int64_t T,
                       int64_t *starts) {
  for (int64_t b = 0; b < B; b++) {
    starts[b] = tok[b * T];
    for (int64_t t = 0; t < T; t++) {
      if (tok[b * T + t] != starts[b] + t || tgt[b * T + t] != starts[b] + t + 1) return false;
    }
  }
  return true;
}

static void test_batch_sample(void) {
  enum { N = 20, B = 4, T = 5 };
  ng_shard s;
  open_identity_shard(&s, "ident.bin", N);
  int32_t tok[B * T], tgt[B * T], tok2[B * T], tgt2[B * T];
  int64_t starts[B];
  ng_rng r, r2, ref;
  ng_rng_seed(&r, 42);
  ng_rng_seed(&r2, 42);
  ng_rng_seed(&ref, 42);
  int rc = ng_batch_sample(&s, &r, B, T, tok, tgt);
  CHECK(rc == 0 && windows_ok(tok, tgt, B, T, starts),
        "sampled windows are consecutive, targets shifted", "rc %d %s", rc, ng_error());
  bool same_draws = true;
  for (int b = 0; b < B; b++) same_draws &= starts[b] == (int64_t)ng_rng_below(&ref, N - T);
  CHECK(same_draws, "one draw ng_rng_below(n - T) per window, in order", "starts differ");
  ng_batch_sample(&s, &r2, B, T, tok2, tgt2);
  CHECK(memcmp(tok, tok2, sizeof tok) == 0 && memcmp(tgt, tgt2, sizeof tgt) == 0,
        "sampled batch deterministic for a seed", "differ");

  bool seen[N] = {false}, in_range = true, ok = true;
  for (int i = 0; i < 500 && ok; i++) {
    ok = ng_batch_sample(&s, &r, B, T, tok, tgt) == 0 && windows_ok(tok, tgt, B, T, starts);
    for (int b = 0; b < B; b++) {
      in_range &= starts[b] >= 0 && starts[b] <= N - T - 1;
      if (starts[b] >= 0 && starts[b] < N) seen[starts[b]] = true;
    }
  }
  bool all_seen = true;
  for (int p = 0; p <= N - T - 1; p++) all_seen &= seen[p];
  CHECK(ok && in_range && all_seen, "sampled starts cover exactly 0..n-T-1",
        "ok %d in_range %d all_seen %d", ok, in_range, all_seen);
  ng_shard_close(&s);

  open_identity_shard(&s, "exact.bin", T + 1);
  rc = ng_batch_sample(&s, &r, B, T, tok, tgt);
  CHECK(rc == 0 && windows_ok(tok, tgt, B, T, starts) && starts[0] == 0 && starts[B - 1] == 0,
        "shard of T+1 tokens: the one window", "rc %d", rc);
  ng_shard_close(&s);

  open_identity_shard(&s, "short.bin", T);
  rc = ng_batch_sample(&s, &r, B, T, tok, tgt);
  CHECK(rc == -1 && strstr(ng_error(), "short.bin") && strstr(ng_error(), "T+1 = 6"),
        "shard shorter than T+1 rejected", "rc %d, message: %s", rc, ng_error());
  ng_shard_close(&s);
}

static void test_batch_fixed(void) {
  enum { N = 20, B = 3, T = 5 };
  ng_shard s;
  open_identity_shard(&s, "fixed.bin", N);
  int32_t tok[B * T], tgt[B * T], tok2[B * T], tgt2[B * T];
  int64_t starts[B];
  ng_batch_fixed(&s, 0, B, T, tok, tgt);
  bool ok = windows_ok(tok, tgt, B, T, starts);
  CHECK(ok && starts[0] == 0 && starts[1] == 5 && starts[2] == 10, "fixed batch 0 starts at b*T",
        "starts %lld %lld %lld", (long long)starts[0], (long long)starts[1], (long long)starts[2]);
  // Windows 3, 4, 5 start at 15, 20, 25 mod (n - T = 15).
  ng_batch_fixed(&s, 1, B, T, tok, tgt);
  ok = windows_ok(tok, tgt, B, T, starts);
  CHECK(ok && starts[0] == 0 && starts[1] == 5 && starts[2] == 10,
        "fixed batch wraps modulo n - T", "starts %lld %lld %lld", (long long)starts[0],
        (long long)starts[1], (long long)starts[2]);
  ng_batch_fixed(&s, 7, B, T, tok, tgt);
  ng_batch_fixed(&s, 7, B, T, tok2, tgt2);
  ok = windows_ok(tok, tgt, B, T, starts);
  CHECK(ok && memcmp(tok, tok2, sizeof tok) == 0 && memcmp(tgt, tgt2, sizeof tgt) == 0,
        "fixed batch deterministic", "differ");
  CHECK(starts[0] == (7 * B * T) % (N - T) && starts[2] == ((7 * B + 2) * T) % (N - T),
        "fixed batch start formula", "starts %lld %lld", (long long)starts[0],
        (long long)starts[2]);
  ng_shard_close(&s);
}

// Epoch order over n windows, 3 epochs asked in order: every window exactly
// once per epoch (counted), a different order each epoch, the same windows
// when asked from a fresh order at any point (a resume), and another seed
// another order.
static void test_epoch_order(void) {
  enum { N = 37, EPOCHS = 3 };
  ng_epoch_order e, fresh, other;
  ng_epoch_order_init(&e, 7, N);
  int64_t got[EPOCHS][N];
  bool in_range = true;
  for (int64_t i = 0; i < EPOCHS * N; i++) {
    got[i / N][i % N] = ng_epoch_window(&e, i);
    in_range &= got[i / N][i % N] >= 0 && got[i / N][i % N] < N;
  }
  bool once = in_range;
  for (int ep = 0; ep < EPOCHS && once; ep++) {
    int count[N] = {0};
    for (int k = 0; k < N; k++) count[got[ep][k]]++;
    for (int k = 0; k < N; k++) once &= count[k] == 1;
  }
  CHECK(once, "epoch order: every window exactly once in each of 3 epochs (counted)", "a window "
        "is missing or repeated");
  bool reshuffled = memcmp(got[0], got[1], sizeof got[0]) != 0 && memcmp(got[1], got[2], sizeof got[1]) != 0;
  bool shuffled = false;
  for (int k = 0; k < N; k++) shuffled |= got[0][k] != k;
  CHECK(reshuffled && shuffled, "epoch order: shuffled, and reshuffled every epoch", "orders repeat");
  bool resumes = true;
  for (int64_t start = 0; start < EPOCHS * N; start += 11) {  // a fresh order, as on a resume
    ng_epoch_order_init(&fresh, 7, N);
    for (int64_t i = start; i < EPOCHS * N; i++) resumes &= ng_epoch_window(&fresh, i) == got[i / N][i % N];
    ng_epoch_order_free(&fresh);
  }
  CHECK(resumes, "epoch order: a fresh order asked from any window on gives the same windows",
        "differ");
  ng_epoch_order_init(&other, 8, N);
  bool differs = false;
  for (int k = 0; k < N; k++) differs |= ng_epoch_window(&other, k) != got[0][k];
  CHECK(differs, "epoch order: another seed, another order", "same order");
  ng_epoch_order_free(&other);
  ng_epoch_order_free(&e);
}

// Window k of the epoch reading is tokens [k T, k T + T]: the last one whole.
static void test_batch_windows(void) {
  enum { N = 21, B = 3, T = 5 };
  ng_shard s;
  open_identity_shard(&s, "windows.bin", N);
  int32_t tok[B * T], tgt[B * T];
  int64_t starts[B], windows[B] = {3, 0, 2};
  ng_batch_windows(&s, windows, B, T, tok, tgt);
  bool ok = windows_ok(tok, tgt, B, T, starts);
  CHECK(ng_epoch_windows(&s, T) == 4 && ok && starts[0] == 15 && starts[1] == 0 && starts[2] == 10,
        "epoch windows: (n - 1) / T of them, window k starts at k T",
        "%lld windows, starts %lld %lld %lld", (long long)ng_epoch_windows(&s, T),
        (long long)starts[0], (long long)starts[1], (long long)starts[2]);
  ng_shard_close(&s);
}

// ---------------------------------------------------------------------------
// ng_data_build

// The expected shards: each document's bytes then EOT, routed by one uniform
// draw per document from a generator seeded with `seed`.
typedef struct {
  uint32_t ids[2][4096];
  uint64_t n[2], docs[2];
} expected;

static void expect_split(expected *e, const char *const *docs, int n_docs, double frac,
                         uint64_t seed) {
  memset(e, 0, sizeof *e);
  ng_rng r;
  ng_rng_seed(&r, seed);
  for (int d = 0; d < n_docs; d++) {
    int k = ng_rng_uniform(&r) < frac ? 1 : 0;
    for (const char *p = docs[d]; *p; p++) e->ids[k][e->n[k]++] = (uint8_t)*p;
    e->ids[k][e->n[k]++] = NG_BYTE_EOT;
    e->docs[k]++;
    NG_ASSERT(e->n[k] < 4000);
  }
}

// The first seed from 0 whose split puts documents in both halves.
static uint64_t mixed_seed(const char *const *docs, int n_docs, double frac) {
  expected *e = ng_xmalloc(sizeof *e);
  uint64_t seed = 0;
  for (expect_split(e, docs, n_docs, frac, seed); e->docs[0] == 0 || e->docs[1] == 0;)
    expect_split(e, docs, n_docs, frac, ++seed);
  free(e);
  return seed;
}

// Whether `path` is a byte-vocabulary shard holding exactly ids[0..n).
static bool shard_holds(const char *path, const uint32_t *ids, uint64_t n) {
  ng_shard s;
  if (ng_shard_open(&s, path) != 0) return false;
  bool ok = s.vocab_size == NG_BYTE_VOCAB && s.separator == NG_BYTE_EOT && s.n_tokens == n &&
            (n == 0 || memcmp(s.parts[0].tokens, ids, n * sizeof *ids) == 0);
  ng_shard_close(&s);
  return ok;
}

// Builds from files and compares shards and stats with the expected split of `docs`.
static void check_build(const char *test, const char *const *files, int n_files,
                        const char *sep, const char *const *docs, int n_docs, double frac) {
  uint64_t seed = mixed_seed(docs, n_docs, frac);
  expected *e = ng_xmalloc(sizeof *e);
  expect_split(e, docs, n_docs, frac, seed);
  const char *out = tmp_path("out");
  ng_data_stats st;
  int rc = ng_data_build(files, n_files, sep, frac, seed, out, &st);
  bool stats = st.docs[0] == e->docs[0] && st.docs[1] == e->docs[1] && st.tokens[0] == e->n[0] &&
               st.tokens[1] == e->n[1];
  bool train = shard_holds(tmp_path("out/train.bin"), e->ids[0], e->n[0]);
  bool val = shard_holds(tmp_path("out/val.bin"), e->ids[1], e->n[1]);
  CHECK(rc == 0 && stats && train && val, test, "rc %d (%s), stats %d, train %d, val %d", rc,
        rc ? ng_error() : "", stats, train, val);
  free(e);
}

static void test_build_whole_files(void) {
  write_text(tmp_path("a.txt"), "hello\n%\nworld\n");
  write_text(tmp_path("b.txt"), "xy");
  write_text(tmp_path("c.txt"), "\xff\x80\x01tail\n\n");  // any byte is a token
  write_text(tmp_path("blank.txt"), " \n\t\n");
  write_bytes(tmp_path("empty.txt"), "", 0);
  const char *files[] = {tmp_path("a.txt"), tmp_path("blank.txt"), tmp_path("b.txt"),
                         tmp_path("empty.txt"), tmp_path("c.txt")};
  // Whole files verbatim (no record split, no newline stripped); blank files dropped.
  const char *docs[] = {"hello\n%\nworld\n", "xy", "\xff\x80\x01tail\n\n"};
  check_build("whole files become documents, each followed by EOT", files, 5, NULL, docs, 3, 0.5);
}

static void test_build_records(void) {
  write_text(tmp_path("f1"),
             "first line\nsecond\n%\n"  // record "first line\nsecond"
             "B\n%\n"                   // "B"
             "%\n"                      // empty record: dropped
             "  \n\t\n%\n"              // whitespace only: dropped
             "50%\n%%\n %\n%\n"         // "50%", "%%" and " %" are not separator lines
             "\n\nlast\n\n%\n");        // leading blank lines kept, one trailing '\n' stripped
  write_text(tmp_path("f2"), "x\n%\ny\n");  // no final separator: last record "y"
  write_text(tmp_path("f3"), "q\n%");       // separator line without its newline
  write_text(tmp_path("f4"), "%\n");        // only a separator: no documents
  const char *files[] = {tmp_path("f1"), tmp_path("f2"), tmp_path("f3"), tmp_path("f4")};
  const char *docs[] = {"first line\nsecond", "B", "50%\n%%\n %", "\n\nlast\n", "x", "y", "q"};
  check_build("records split on \"%\" lines, in input order", files, 4, "%", docs, 7, 0.4);

  write_text(tmp_path("para"), "p1\nstill p1\n\np2\n\n\n\np3");
  const char *para[] = {"p1\nstill p1", "p2", "p3"};
  const char *pfiles[] = {tmp_path("para")};
  check_build("empty separator splits on blank lines", pfiles, 1, "", para, 3, 0.5);
}

// Many small records, to see the split move with the seed.
static const char *many_records(void) {
  static char text[64 * 1024];
  size_t len = 0;
  for (int i = 0; i < 300; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "record %d\n%%\n", i);
  const char *path = tmp_path("many");
  write_text(path, text);
  return path;
}

static uint8_t *read_all(const char *path, size_t *n) {
  char *text;
  NG_ASSERT(ng_read_file(path, SIZE_MAX, &text, n) == 0);
  return (uint8_t *)text;
}

// Whether the two files have the same bytes.
static bool same_file(const char *a, const char *b) {
  size_t na, nb;
  uint8_t *x = read_all(a, &na), *y = read_all(b, &nb);
  bool same = na == nb && memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

static void test_build_determinism(void) {
  const char *files[] = {many_records()};
  ng_data_stats st1, st2, st3;
  int rc = ng_data_build(files, 1, "%", 0.2, 5, tmp_path("d1"), &st1);
  if (rc == 0) rc = ng_data_build(files, 1, "%", 0.2, 5, tmp_path("d2"), &st2);
  if (rc == 0) rc = ng_data_build(files, 1, "%", 0.2, 6, tmp_path("d3"), &st3);
  CHECK(rc == 0 && st1.docs[0] + st1.docs[1] == 300, "300 records built", "rc %d %s", rc,
        ng_error());
  CHECK(same_file(tmp_path("d1/train.bin"), tmp_path("d2/train.bin")) &&
            same_file(tmp_path("d1/val.bin"), tmp_path("d2/val.bin")),
        "same seed, same shards", "differ");
  CHECK(!same_file(tmp_path("d1/val.bin"), tmp_path("d3/val.bin")),
        "another seed, another split", "identical");
  CHECK(st1.docs[1] > 30 && st1.docs[1] < 90, "val share near val_fraction",
        "%llu of 300 for 0.2", (unsigned long long)st1.docs[1]);
  // Rebuilding into an existing directory replaces the shards.
  rc = ng_data_build(files, 1, "%", 0.2, 6, tmp_path("d1"), &st1);
  CHECK(rc == 0 && same_file(tmp_path("d1/val.bin"), tmp_path("d3/val.bin")),
        "existing output directory reused", "rc %d %s", rc, ng_error());
}

static void expect_build_error(const char *test, const char *const *files, int n_files,
                               const char *sep, double frac, const char *out, const char *what) {
  ng_data_stats st;
  char train[600];
  snprintf(train, sizeof train, "%s/train.bin", out);
  int rc = ng_data_build(files, n_files, sep, frac, 0, out, &st);
  const char *err = ng_error();
  CHECK(rc == -1 && strstr(err, what) && !exists(train) && st.docs[0] + st.docs[1] == 0, test,
        "rc %d, message: %s", rc, err);
}

static void test_build_errors(void) {
  const char *files[] = {many_records()};
  const char *out = tmp_path("err");
  expect_build_error("val_fraction 0 rejected", files, 1, "%", 0.0, out, "val_fraction 0");
  expect_build_error("val_fraction 1 rejected", files, 1, "%", 1.0, out, "val_fraction 1");
  expect_build_error("negative val_fraction rejected", files, 1, "%", -0.5, out, "val_fraction");
  expect_build_error("NaN val_fraction rejected", files, 1, "%", NAN, out, "val_fraction");
  expect_build_error("empty validation split", files, 1, "%", 1e-9, out,
                     "no documents in the validation split; raise --val-fraction");
  expect_build_error("empty training split", files, 1, "%", 1.0 - 1e-9, out,
                     "no documents in the training split");
  const char *blank[] = {tmp_path("f4")};
  expect_build_error("no documents at all", blank, 1, "%", 0.5, out, "no documents");
  const char *missing[] = {files[0], tmp_path("nope.txt")};
  expect_build_error("missing input named", missing, 2, "%", 0.5, out, "nope.txt: cannot open");
  expect_build_error("separator with a newline", files, 1, "%\n", 0.5, out, "newline");
  CHECK(!exists(out), "no output directory made on input errors", "%s exists", out);
  const char *under_file = tmp_path("f4/out");  // f4 is a file: no directory can go under it
  expect_build_error("output directory under a file", files, 1, "%", 0.5, under_file,
                     "f4: exists and is not a directory");
  expect_build_error("output is a file", files, 1, "%", 0.5, files[0], "not a directory");
}

// ---------------------------------------------------------------------------

// Removes dir and everything under it (the tests make at most one level).
static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  NG_ASSERT(d);
  char path[1024];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    NG_ASSERT(lstat(path, &st) == 0);
    if (S_ISDIR(st.st_mode))
      remove_tree(path);
    else
      NG_ASSERT(unlink(path) == 0);
  }
  closedir(d);
  NG_ASSERT(rmdir(dir) == 0);
}

int main(void) {
  NG_ASSERT(mkdtemp(g_dir) != NULL);
  test_roundtrip();
  test_write_errors();
  test_bad_shards();
  test_batch_sample();
  test_batch_fixed();
  test_epoch_order();
  test_batch_windows();
  test_build_whole_files();
  test_build_records();
  test_build_determinism();
  test_build_errors();
  remove_tree(g_dir);
  CHECK(!exists(g_dir), "test directory removed", "%s remains", g_dir);
  return TEST_RESULT();
}
