// normgrow: token shards (mmap + strict validation, atomic writes), batches,
// and the byte-level toy tokenizer that turns text files into shards.
#include "normgrow/data.h"

#include "normgrow/common.h"
#include "normgrow/fileio.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Tokens are read from and written to the file as host u32 values.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "normgrow assumes a little-endian host"
#endif

// Header field offsets (see data.h).
enum {
  OFF_MAGIC = 0, OFF_VERSION = 8, OFF_VOCAB = 12, OFF_SEP = 16, OFF_RESERVED = 20, OFF_COUNT = 24
};
#define MAGIC_LEN 8

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p) {
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

// ---------------------------------------------------------------------------
// Reader

void ng_shard_close(ng_shard *s) {
  ng_unmap_file(s->map, s->map_size);
  free(s->path);
  memset(s, 0, sizeof *s);
}

// Magic, version, reserved word, vocabulary and separator. The vocabulary is
// bounded by INT32_MAX because batches hand ids out as int32.
static int check_header(ng_shard *s) {
  const uint8_t *h = s->map;
  if (memcmp(h + OFF_MAGIC, NG_SHARD_MAGIC, MAGIC_LEN) != 0)
    return ng_fail("%s: not a normgrow token shard (bad magic)", s->path);
  uint32_t version = get_u32(h + OFF_VERSION), reserved = get_u32(h + OFF_RESERVED);
  if (version != NG_SHARD_VERSION)
    return ng_fail("%s: unsupported token shard version %" PRIu32 " (expected %u)", s->path,
                   version, NG_SHARD_VERSION);
  if (reserved != 0)
    return ng_fail("%s: reserved header field is %" PRIu32 ", expected 0", s->path, reserved);
  s->vocab_size = get_u32(h + OFF_VOCAB);
  s->separator = get_u32(h + OFF_SEP);
  if (s->vocab_size < 1 || s->vocab_size > INT32_MAX)
    return ng_fail("%s: vocab_size %" PRIu32 " is not in 1..%d", s->path, s->vocab_size,
                   INT32_MAX);
  if (s->separator >= s->vocab_size)
    return ng_fail("%s: separator %" PRIu32 " is >= vocab_size %" PRIu32, s->path, s->separator,
                   s->vocab_size);
  return 0;
}

// The file is exactly 32 + 4 n bytes (compared by division: no overflow).
static int check_length(ng_shard *s) {
  uint64_t n = get_u64(s->map + OFF_COUNT);
  size_t body = s->map_size - NG_SHARD_HEADER;
  if (body % 4 != 0 || body / 4 != n)
    return ng_fail("%s: file is %zu bytes, header says %u + 4 x %" PRIu64, s->path, s->map_size,
                   NG_SHARD_HEADER, n);
  s->n_tokens = n;
  s->tokens = (const uint32_t *)(s->map + NG_SHARD_HEADER);  // page-aligned mapping + 32
  return 0;
}

// Every token < vocab_size; names the first offender.
static int check_tokens(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab) {
  for (uint64_t i = 0; i < n; i++) {
    if (tokens[i] >= vocab)
      return ng_fail("%s: token %" PRIu32 " at position %" PRIu64 " is >= vocab_size %" PRIu32,
                     path, tokens[i], i, vocab);
  }
  return 0;
}

int ng_shard_open(ng_shard *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = ng_xstrdup(path);
  if (ng_map_file(path, NG_SHARD_HEADER, "token shard header", &s->map, &s->map_size) != 0 ||
      check_header(s) != 0 || check_length(s) != 0 ||
      check_tokens(s->path, s->tokens, s->n_tokens, s->vocab_size) != 0) {
    ng_shard_close(s);
    return -1;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Writer

typedef struct {
  uint32_t vocab_size, separator;
  const uint32_t *tokens;
  uint64_t n;
} shard_contents;

// ng_write_fn: the header, then the tokens.
static bool write_shard_contents(FILE *fp, void *ctx) {
  const shard_contents *c = ctx;
  uint8_t h[NG_SHARD_HEADER] = {0};
  memcpy(h + OFF_MAGIC, NG_SHARD_MAGIC, MAGIC_LEN);
  put_u32(h + OFF_VERSION, NG_SHARD_VERSION);
  put_u32(h + OFF_VOCAB, c->vocab_size);
  put_u32(h + OFF_SEP, c->separator);
  put_u64(h + OFF_COUNT, c->n);
  return fwrite(h, 1, sizeof h, fp) == sizeof h &&
         (c->n == 0 || fwrite(c->tokens, sizeof *c->tokens, (size_t)c->n, fp) == (size_t)c->n);
}

// The same rules as the reader, so that whatever is written can be opened.
int ng_shard_write(const char *path, uint32_t vocab_size, uint32_t separator,
                   const uint32_t *tokens, uint64_t n) {
  NG_ASSERT(n <= SIZE_MAX / sizeof *tokens && (tokens != NULL || n == 0));
  if (vocab_size < 1 || vocab_size > INT32_MAX)
    return ng_fail("%s: vocab_size %" PRIu32 " is not in 1..%d", path, vocab_size, INT32_MAX);
  if (separator >= vocab_size)
    return ng_fail("%s: separator %" PRIu32 " is >= vocab_size %" PRIu32, path, separator,
                   vocab_size);
  if (check_tokens(path, tokens, n, vocab_size) != 0) return -1;
  shard_contents c = {vocab_size, separator, tokens, n};
  return ng_write_atomic(path, write_shard_contents, &c);
}

// ---------------------------------------------------------------------------
// Batches

// Window w = tokens [start, start + T]: inputs w[0..T), targets w[1..T].
static void copy_window(const ng_shard *s, uint64_t start, int64_t T, int32_t *tokens,
                        int32_t *targets) {
  const uint32_t *w = s->tokens + start;
  for (int64_t t = 0; t < T; t++) {
    tokens[t] = (int32_t)w[t];  // < vocab_size <= INT32_MAX (checked on open)
    targets[t] = (int32_t)w[t + 1];
  }
}

// A start is uniform over the n - T positions whose window fits: [0, n - T - 1].
// One draw per window, for b = 0..B-1 in order.
int ng_batch_sample(const ng_shard *s, ng_rng *r, int64_t B, int64_t T, int32_t *tokens,
                    int32_t *targets) {
  NG_ASSERT(B >= 1 && T >= 1);
  if (s->n_tokens < (uint64_t)T + 1)
    return ng_fail("%s: shard holds %" PRIu64 " tokens, fewer than one window of T+1 = %" PRId64,
                   s->path, s->n_tokens, T + 1);
  for (int64_t b = 0; b < B; b++) {
    uint64_t start = ng_rng_below(r, s->n_tokens - (uint64_t)T);
    copy_window(s, start, T, tokens + b * T, targets + b * T);
  }
  return 0;
}

// Window b of batch `index` is window number k = index*B + b of the fixed set;
// it starts at (k * T) mod (n - T). The modulus is the number of starts whose
// window fits, so windows past the end wrap to the beginning of the shard (and
// after a wrap are no longer aligned to multiples of T).
void ng_batch_fixed(const ng_shard *s, int64_t index, int64_t B, int64_t T, int32_t *tokens,
                    int32_t *targets) {
  NG_ASSERT(B >= 1 && T >= 1 && index >= 0);
  NG_ASSERT(s->n_tokens >= (uint64_t)T + 1);  // callers learn this from ng_batch_sample
  uint64_t per_batch = (uint64_t)B * (uint64_t)T;
  NG_ASSERT(per_batch / (uint64_t)B == (uint64_t)T);
  NG_ASSERT((uint64_t)index <= (UINT64_MAX - per_batch) / per_batch);  // k * T cannot overflow
  uint64_t n_starts = s->n_tokens - (uint64_t)T, first = (uint64_t)index * per_batch;
  for (int64_t b = 0; b < B; b++) {
    uint64_t start = (first + (uint64_t)(b * T)) % n_starts;
    copy_window(s, start, T, tokens + b * T, targets + b * T);
  }
}

// ---------------------------------------------------------------------------
// Byte-level tokenization into a train and a validation split

typedef struct {
  uint32_t *ids;
  size_t n, cap;
} token_buf;

typedef struct {
  ng_rng rng;
  double val_fraction;
  token_buf split[2];  // [train, val]
  uint64_t docs[2];
} builder;

static void append_tokens(token_buf *t, const uint8_t *bytes, size_t len) {
  NG_ASSERT(len < SIZE_MAX / sizeof *t->ids - t->n - 1);
  size_t need = t->n + len + 1;
  if (need > t->cap) {
    t->cap = need > 2 * t->cap ? need : 2 * t->cap;
    t->ids = ng_xrealloc(t->ids, t->cap * sizeof *t->ids);
  }
  for (size_t i = 0; i < len; i++) t->ids[t->n++] = bytes[i];  // a byte's id is its value
  t->ids[t->n++] = NG_BYTE_EOT;
}

// C-locale whitespace, independent of setlocale.
static bool is_blank(const uint8_t *bytes, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (!memchr(" \t\n\v\f\r", bytes[i], 6)) return false;
  }
  return true;
}

// A document that is empty or only whitespace is dropped (and draws nothing);
// any other draws once and goes to validation if the draw < val_fraction.
static void add_document(builder *b, const uint8_t *bytes, size_t len) {
  if (is_blank(bytes, len)) return;
  int which = ng_rng_uniform(&b->rng) < b->val_fraction ? 1 : 0;
  append_tokens(&b->split[which], bytes, len);
  b->docs[which]++;
}

// A record is the text between separator lines. The newline that ends its
// last line comes before the separator line and belongs to no document, so
// exactly one trailing '\n' is stripped.
static void add_record(builder *b, const uint8_t *bytes, size_t len) {
  if (len > 0 && bytes[len - 1] == '\n') len--;
  add_document(b, bytes, len);
}

// Records of `text` separated by lines whose content (without the '\n') is
// exactly `sep`. A last line without '\n' can be a separator too. Bytes are
// compared as they are: "%\r" is not "%".
static void split_records(builder *b, const uint8_t *text, size_t len, const char *sep) {
  size_t sep_len = strlen(sep), record = 0, line = 0;
  while (line < len) {
    const uint8_t *nl = memchr(text + line, '\n', len - line);
    size_t line_end = nl ? (size_t)(nl - text) : len, next = nl ? line_end + 1 : len;
    if (line_end - line == sep_len && memcmp(text + line, sep, sep_len) == 0) {
      add_record(b, text + record, line - record);
      record = next;
    }
    line = next;
  }
  add_record(b, text + record, len - record);
}

static int write_split(const char *dir, const char *name, const token_buf *t) {
  char *path = ng_path_join(dir, name);
  int rc = ng_shard_write(path, NG_BYTE_VOCAB, NG_BYTE_EOT, t->ids, t->n);
  free(path);
  return rc;
}

// Each file whole, or its records, into the builder, in input order.
static int tokenize_files(builder *b, const char *const *files, int n_files,
                          const char *record_sep) {
  for (int i = 0; i < n_files; i++) {
    char *text;
    size_t len;
    if (ng_read_file(files[i], SIZE_MAX, &text, &len) != 0) return -1;
    if (record_sep)
      split_records(b, (const uint8_t *)text, len, record_sep);
    else
      add_document(b, (const uint8_t *)text, len);
    free(text);
  }
  return 0;
}

static int check_splits(const builder *b) {
  if (b->docs[0] + b->docs[1] == 0)
    return ng_fail("no documents in the input files (all empty or whitespace)");
  if (b->docs[1] == 0) return ng_fail("no documents in the validation split; raise --val-fraction");
  if (b->docs[0] == 0) return ng_fail("no documents in the training split; lower --val-fraction");
  return 0;
}

int ng_data_build(const char *const *files, int n_files, const char *record_sep,
                  double val_fraction, uint64_t seed, const char *out_dir, ng_data_stats *st) {
  NG_ASSERT(out_dir && st);
  memset(st, 0, sizeof *st);
  if (n_files < 1) return ng_fail("no input files");
  if (!(val_fraction > 0.0 && val_fraction < 1.0))  // also rejects NaN
    return ng_fail("val_fraction %g is not in (0, 1)", val_fraction);
  if (record_sep && strchr(record_sep, '\n'))
    return ng_fail("record separator \"%s\" contains a newline, so no line can equal it",
                   record_sep);

  builder b = {.val_fraction = val_fraction};
  ng_rng_seed(&b.rng, seed);
  int rc = tokenize_files(&b, files, n_files, record_sep);
  if (rc == 0) rc = check_splits(&b);
  if (rc == 0) rc = ng_make_dir(out_dir);
  if (rc == 0) rc = write_split(out_dir, "train.bin", &b.split[0]);
  if (rc == 0) rc = write_split(out_dir, "val.bin", &b.split[1]);
  if (rc == 0) {
    for (int k = 0; k < 2; k++) {
      st->docs[k] = b.docs[k];
      st->tokens[k] = b.split[k].n;
    }
  }
  free(b.split[0].ids);
  free(b.split[1].ids);
  return rc;
}
