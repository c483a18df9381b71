// normgrow: corpora into token shards (ng_data_prepare, data.h).
//
// One pass: a reader thread fills a batch of documents (a fixed amount of
// text), all threads tokenize the batch's documents, and the documents then go,
// in input order, to the train or validation writer. Batches are cut by size
// alone, so the shards are the same for any thread count.
#include "normgrow/common.h"
#include "normgrow/data.h"
#include "normgrow/fileio.h"
#include "normgrow/tokenizer.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define BATCH_BYTES ((size_t)32 << 20)
#define BATCH_DOCS 65536
#define READ_CHUNK ((size_t)1 << 20)
#define PROGRESS_EVERY 10.0  // seconds between progress lines

// ---------------------------------------------------------------------------
// Input files: the files given, and every regular file below a directory
// given, in name order (byte order, not the locale's).

typedef struct {
  char **path;
  int n, cap;
  uint64_t bytes;  // on disk
} file_list;

static void list_add(file_list *l, const char *path, uint64_t bytes) {
  if (l->n == l->cap) {
    l->cap = 2 * l->cap + 16;
    l->path = ng_xrealloc(l->path, (size_t)l->cap * sizeof *l->path);
  }
  l->path[l->n++] = ng_xstrdup(path);
  l->bytes += bytes;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_path(file_list *l, const char *path, int depth);

static int list_dir(file_list *l, const char *path, int depth) {
  DIR *d = opendir(path);
  if (!d) return ng_fail("%s: cannot open directory: %s", path, strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (n == cap) names = ng_xrealloc(names, (cap = 2 * cap + 16) * sizeof *names);
    names[n++] = ng_path_join(path, e->d_name);
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (rc == 0) rc = list_path(l, names[i], depth + 1);
    free(names[i]);
  }
  free(names);
  return rc;
}

static int list_path(file_list *l, const char *path, int depth) {
  struct stat st;
  if (stat(path, &st) != 0) return ng_fail("%s: cannot open: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    if (depth > 64) return ng_fail("%s: directories nested too deep", path);
    return list_dir(l, path, depth);
  }
  if (depth == 0 || S_ISREG(st.st_mode))  // no FIFOs or devices from directories
    list_add(l, path, (uint64_t)st.st_size);
  return 0;
}

static void list_free(file_list *l) {
  for (int i = 0; i < l->n; i++) free(l->path[i]);
  free(l->path);
}

// ---------------------------------------------------------------------------
// A file as a stream of lines; zlib reads plain and gzip files alike.

typedef struct {
  const char *path;
  gzFile gz;
  uint8_t *buf;  // unread bytes: buf[start..end)
  size_t start, end, cap;
  size_t scanned;  // of the unread bytes, how many are known to hold no '\n'
  bool eof;
  uint64_t line;  // of the next line, from 1
  size_t max_line;  // bytes of the longest line (without its '\n')
} stream;

static int stream_open(stream *s, const char *path, size_t max_line) {
  s->path = path;
  s->max_line = max_line;
  s->start = s->end = s->scanned = 0;
  s->eof = false;
  s->line = 1;
  errno = 0;
  s->gz = gzopen(path, "rb");
  if (!s->gz) return ng_fail("%s: cannot open: %s", path, strerror(errno ? errno : ENOMEM));
  gzbuffer(s->gz, 1 << 18);
  return 0;
}

static void stream_close(stream *s) {
  if (s->gz) gzclose(s->gz);
  s->gz = NULL;
}

// zlib's verdict on the stream, where it has one (corrupt or truncated gzip).
static int stream_check(stream *s) {
  int err;
  const char *msg = gzerror(s->gz, &err);
  if (err == Z_OK) return 0;
  return ng_fail("%s: line %" PRIu64 ": corrupt gzip data (%s)", s->path, s->line,
                 err == Z_BUF_ERROR ? "unexpected end of file" : msg);
}

// Reads more, keeping the unread bytes (moved to the front, buffer grown when
// full). The unread bytes are at most one line (max_line), so the buffer
// never grows past max_line + READ_CHUNK.
static int stream_fill(stream *s) {
  if (s->start > 0) {
    memmove(s->buf, s->buf + s->start, s->end - s->start);
    s->end -= s->start;
    s->start = 0;
  }
  if (s->cap - s->end < READ_CHUNK) {
    NG_ASSERT(s->end <= s->max_line);
    size_t most = s->max_line + READ_CHUNK;
    s->cap = s->cap == 0 ? 4 * READ_CHUNK : 2 * s->cap;
    if (s->cap > most) s->cap = most;
    s->buf = ng_xrealloc(s->buf, s->cap);
  }
  int got = gzread(s->gz, s->buf + s->end, (unsigned)READ_CHUNK);
  if (got < 0) return stream_check(s);
  if (got == 0) {
    s->eof = true;
    return stream_check(s);
  }
  s->end += (size_t)got;
  return 0;
}

// The next line (with its '\n', if it has one) into *line/*len: 1, or 0 at
// the end of the file, or -1. Each byte is searched for '\n' once, and a line
// is refused as soon as more than max_line of its bytes are read.
static int stream_line(stream *s, const uint8_t **line, size_t *len) {
  for (;;) {
    size_t unread = s->end - s->start;
    uint8_t *from = s->buf + s->start;
    uint8_t *nl = unread > s->scanned ? memchr(from + s->scanned, '\n', unread - s->scanned) : NULL;
    size_t n = nl ? (size_t)(nl - from) : unread;  // the line's bytes so far, without '\n'
    if (n > s->max_line)
      return ng_fail("%s: line %" PRIu64 ": longer than %zu bytes", s->path, s->line, s->max_line);
    if (nl || (s->eof && unread > 0)) {
      *line = from;
      *len = n + (nl != NULL);
      s->start += *len;
      s->scanned = 0;
      s->line++;
      return 1;
    }
    if (s->eof) return 0;
    s->scanned = unread;
    if (stream_fill(s) != 0) return -1;
  }
}

// ---------------------------------------------------------------------------
// A batch of documents

typedef struct {
  size_t off, len;   // the document (or its JSON line) in the arena
  int file;
  uint64_t line;     // where it starts
  bool blank;        // empty or only whitespace: dropped
  ng_ids ids;        // its tokens and the separator
  char *error;       // a message, when it could not be read or tokenized
} doc;

typedef struct {
  uint8_t *arena;
  size_t used, cap;
  doc *docs;
  int n;
} batch;

static uint8_t *arena_reserve(batch *b, size_t more) {
  if (b->used + more > b->cap) {
    b->cap = b->used + more > 2 * b->cap ? b->used + more : 2 * b->cap;
    b->arena = ng_xrealloc(b->arena, b->cap);
  }
  return b->arena + b->used;
}

static void arena_add(batch *b, const uint8_t *bytes, size_t n) {
  memcpy(arena_reserve(b, n), bytes, n);
  b->used += n;
}

static void batch_clear(batch *b) {
  for (int i = 0; i < b->n; i++) {
    free(b->docs[i].ids.ids);
    free(b->docs[i].error);
  }
  b->n = 0;
  b->used = 0;
}

// ---------------------------------------------------------------------------
// The reader: documents of the files, one after the other, into batches.

typedef enum { DOCS_WHOLE, DOCS_RECORDS, DOCS_JSONL } doc_kind;

typedef struct {
  const file_list *files;
  doc_kind kind;
  const char *record_sep;
  int file;          // the file being read (files->n: all read)
  bool open, done;   // its stream is open; it has no documents left
  stream s;
  uint64_t disk_done;  // on-disk bytes of the files finished
  uint64_t bytes;      // bytes read (decompressed)
  size_t max_doc;      // bytes of the longest document and line
} reader;

// A new document at the end of the arena, from line `line` of the current file.
static doc *doc_begin(reader *r, batch *b, uint64_t line) {
  doc *d = &b->docs[b->n++];
  *d = (doc){.off = b->used, .file = r->file, .line = line};
  return d;
}

static void doc_end(batch *b, doc *d) { d->len = b->used - d->off; }

static int read_whole(reader *r, batch *b) {
  doc *d = doc_begin(r, b, 1);
  while (!r->s.eof) {
    if (stream_fill(&r->s) != 0) return -1;
    arena_add(b, r->s.buf, r->s.end);
    r->bytes += r->s.end;
    if (b->used - d->off > r->max_doc)
      return ng_fail("%s: a whole-file document larger than %zu bytes (use --records-split or "
                     "--jsonl-field)", r->s.path, r->max_doc);
    r->s.start = r->s.end = 0;
  }
  doc_end(b, d);
  r->done = true;
  return 1;
}

// Lines up to a separator line; the last record ends with the file. One
// trailing '\n' is stripped: it ends the last line, before the separator.
static int read_record(reader *r, batch *b) {
  doc *d = doc_begin(r, b, r->s.line);
  size_t sep_len = strlen(r->record_sep);
  const uint8_t *line;
  size_t len;
  int got;
  while ((got = stream_line(&r->s, &line, &len)) == 1) {
    r->bytes += len;
    size_t content = len - (line[len - 1] == '\n');
    if (content == sep_len && memcmp(line, r->record_sep, sep_len) == 0) break;
    arena_add(b, line, len);
    if (b->used - d->off > r->max_doc)
      return ng_fail("%s: line %" PRIu64 ": a record larger than %zu bytes", r->s.path, d->line,
                     r->max_doc);
  }
  if (got < 0) return -1;
  if (got == 0) r->done = true;
  if (b->used > d->off && b->arena[b->used - 1] == '\n') b->used--;
  doc_end(b, d);
  return 1;
}

// The next non-blank line, unparsed (the workers parse it).
static int read_jsonl(reader *r, batch *b) {
  const uint8_t *line;
  size_t len;
  int got;
  while ((got = stream_line(&r->s, &line, &len)) == 1) {
    r->bytes += len;
    size_t k = 0;
    while (k < len && memchr(" \t\r\n", line[k], 4)) k++;
    if (k == len) continue;
    doc *d = doc_begin(r, b, r->s.line - 1);
    arena_add(b, line, len);
    doc_end(b, d);
    return 1;
  }
  if (got == 0) r->done = true;
  return got;
}

static void reader_next_file(reader *r) {
  stream_close(&r->s);
  struct stat st;
  if (stat(r->files->path[r->file], &st) == 0) r->disk_done += (uint64_t)st.st_size;
  r->open = false;
  r->file++;
}

// One document into the batch: 1, or 0 when every file is read, or -1.
static int reader_next(reader *r, batch *b) {
  for (;;) {
    if (r->open && r->done) reader_next_file(r);
    if (r->file == r->files->n) return 0;
    if (!r->open) {
      if (stream_open(&r->s, r->files->path[r->file], r->max_doc) != 0) return -1;
      r->open = true;
      r->done = false;
    }
    int got;
    switch (r->kind) {
      case DOCS_WHOLE: got = read_whole(r, b); break;
      case DOCS_RECORDS: got = read_record(r, b); break;
      case DOCS_JSONL: got = read_jsonl(r, b); break;
      default: NG_ASSERT(0);
    }
    if (got != 0) return got;
  }
}

// Documents until the batch holds BATCH_BYTES of text or BATCH_DOCS documents.
static int reader_fill(reader *r, batch *b) {
  if (!b->docs) b->docs = ng_xcalloc(BATCH_DOCS, sizeof *b->docs);
  while (b->used < BATCH_BYTES && b->n < BATCH_DOCS) {
    int got = reader_next(r, b);
    if (got <= 0) return got;
  }
  return 1;
}

// On-disk bytes read so far (compressed bytes, for gzip files).
static uint64_t reader_disk(const reader *r) {
  int64_t at = r->open ? (int64_t)gzoffset(r->s.gz) : 0;
  return r->disk_done + (uint64_t)(at > 0 ? at : 0);
}

// ---------------------------------------------------------------------------
// Tokenizing a document (all threads)

typedef struct {
  const ng_data_options *o;
  uint32_t separator;
  ng_tok_state **states;  // one per thread, when there is a tokenizer
} encoder;

// C-locale whitespace, independent of setlocale.
static bool is_blank(const uint8_t *bytes, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (!memchr(" \t\n\v\f\r", bytes[i], 6)) return false;
  }
  return true;
}

static void ids_push(ng_ids *o, uint32_t id) {
  if (o->n == o->cap) {
    o->cap = 2 * o->cap + 64;
    o->ids = ng_xrealloc(o->ids, o->cap * sizeof *o->ids);
  }
  o->ids[o->n++] = id;
}

static int encode_text(const encoder *e, ng_tok_state *st, const uint8_t *text, size_t len,
                       ng_ids *out) {
  if (e->o->tokenizer) return ng_tokenizer_encode(st, (const char *)text, len, out);
  for (size_t i = 0; i < len; i++) ids_push(out, text[i]);  // a byte's id is its value
  return 0;
}

// The first NUL of a JSON line as a column from 1 (0: none): a NUL byte, or
// a \u0000 escape (one whose backslash is not itself escaped, i.e. follows an
// even number of backslashes).
static size_t first_nul(const uint8_t *line, size_t len) {
  const uint8_t *raw = memchr(line, 0, len);
  size_t end = raw ? (size_t)(raw - line) : len;
  for (const uint8_t *p = line; (p = memmem(p, end - (size_t)(p - line), "\\u0000", 6)) != NULL; p++) {
    size_t at = (size_t)(p - line), before = 0;
    while (before < at && line[at - 1 - before] == '\\') before++;
    if (before % 2 == 0) return at + 1;
  }
  return raw ? end + 1 : 0;
}

// A key that the object holds twice, or NULL.
static const char *twice(const cJSON *o) {
  int n = cJSON_GetArraySize(o), i = 0;
  const char **keys = ng_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
  for (const cJSON *it = o->child; it; it = it->next) keys[i++] = it->string;
  qsort(keys, (size_t)n, sizeof *keys, by_name);
  const char *dup = NULL;
  for (i = 1; i < n && !dup; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
  free(keys);
  return dup;
}

// Up to 24 bytes of the line from `at`, its newline aside, for a message.
static int excerpt(const uint8_t *line, size_t len, size_t at) {
  size_t n = len - at < 24 ? len - at : 24;
  while (n > 0 && (line[at + n - 1] == '\n' || line[at + n - 1] == '\r')) n--;
  return (int)n;
}

// The text of a JSON line: its string field. The line is one JSON object and
// nothing else but whitespace, holds no key twice (Python's json would take
// the last, cJSON the first) and no NUL (cJSON's strings end at one).
static int json_text(const encoder *e, const uint8_t *line, size_t len, cJSON **json,
                     const uint8_t **text, size_t *text_len) {
  size_t nul = first_nul(line, len);
  if (nul) return ng_fail("a NUL character (\\u0000) at column %zu: documents hold none", nul);
  const char *end = NULL, *s = (const char *)line;
  *json = cJSON_ParseWithLengthOpts(s, len, &end, false);
  size_t at = end ? (size_t)(end - s) : 0;
  if (!*json)
    return ng_fail("not valid JSON at column %zu: \"%.*s\"", at + 1, excerpt(line, len, at), s + at);
  while (at < len && memchr(" \t\r\n", line[at], 4)) at++;
  if (at < len)
    return ng_fail("text after the JSON object at column %zu: \"%.*s\"", at + 1,
                   excerpt(line, len, at), s + at);
  if (!cJSON_IsObject(*json)) return ng_fail("not a JSON object");
  const char *dup = twice(*json);
  if (dup) return ng_fail("the key \"%s\" twice", dup);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(*json, e->o->jsonl_field);
  if (!cJSON_IsString(v)) return ng_fail("no string field \"%s\"", e->o->jsonl_field);
  *text = (const uint8_t *)v->valuestring;
  *text_len = strlen(v->valuestring);
  return 0;
}

static void encode_doc(const encoder *e, ng_tok_state *st, const batch *b, doc *d,
                       const file_list *files) {
  const uint8_t *text = b->arena + d->off;
  size_t len = d->len;
  cJSON *json = NULL;
  int rc = e->o->jsonl_field ? json_text(e, text, len, &json, &text, &len) : 0;
  if (rc == 0) {
    d->blank = is_blank(text, len);
    if (!d->blank) rc = encode_text(e, st, text, len, &d->ids);
    if (!d->blank) ids_push(&d->ids, e->separator);
  }
  cJSON_Delete(json);
  if (rc != 0) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: line %" PRIu64 ": %s", files->path[d->file], d->line,
             ng_error());
    d->error = ng_xstrdup(msg);
  }
}

static void encode_batch(const encoder *e, batch *b, const file_list *files) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < b->n; i++) {
    ng_tok_state *st = e->states ? e->states[omp_get_thread_num()] : NULL;
    encode_doc(e, st, b, &b->docs[i], files);
  }
}

// ---------------------------------------------------------------------------
// The splits

typedef struct {
  ng_rng rng;
  const ng_data_options *o;
  ng_shard_writer *w[2];  // [train, val]
  uint64_t docs[2];
  bool full;  // the training split has max_tokens
} splits;

// The batch's documents, in order, to their splits; stops at max_tokens.
static int place_batch(splits *sp, const batch *b) {
  for (int i = 0; i < b->n && !sp->full; i++) {
    const doc *d = &b->docs[i];
    if (d->error) return ng_fail("%s", d->error);
    if (d->blank) continue;
    int which = ng_rng_uniform(&sp->rng) < sp->o->val_fraction ? 1 : 0;
    size_t n = d->ids.n;
    if (which == 0 && sp->o->max_tokens > 0) {
      uint64_t room = sp->o->max_tokens - ng_shard_writer_count(sp->w[0]);
      if (n >= room) {
        n = (size_t)room;
        sp->full = true;
      }
    }
    if (ng_shard_writer_append(sp->w[which], d->ids.ids, n) != 0) return -1;
    sp->docs[which]++;
  }
  return 0;
}

static int check_splits(const splits *sp) {
  if (sp->docs[0] + sp->docs[1] == 0)
    return ng_fail("no documents in the input files (all empty or whitespace)");
  if (sp->docs[1] == 0)
    return ng_fail("no documents in the validation split; raise --val-fraction");
  if (sp->docs[0] == 0) return ng_fail("no documents in the training split; lower --val-fraction");
  return 0;
}

// ---------------------------------------------------------------------------
// Progress

static void human_duration(double s, char *buf, size_t n) {
  if (s < 100) snprintf(buf, n, "%.0fs", s);
  else if (s < 6000) snprintf(buf, n, "%.0fmin", s / 60);
  else snprintf(buf, n, "%.1fh", s / 3600);
}

// "data: 1.23 GB read, 27.3 MB/s, 312.4M tokens, 6.90M tokens/s, 38%, ETA 12min"
static void print_progress(const reader *r, const splits *sp, const file_list *files,
                           double elapsed) {
  uint64_t tokens = ng_shard_writer_count(sp->w[0]) + ng_shard_writer_count(sp->w[1]);
  double done = files->bytes ? (double)reader_disk(r) / (double)files->bytes : 0;
  if (sp->o->max_tokens) {
    double by_tokens = (double)ng_shard_writer_count(sp->w[0]) / (double)sp->o->max_tokens;
    if (by_tokens > done) done = by_tokens;
  }
  char eta[32] = "?";
  if (done > 0) human_duration(elapsed * (1 - done) / done, eta, sizeof eta);
  fprintf(stderr, "data: %.2f GB read, %.1f MB/s, %.1fM tokens, %.2fM tokens/s, %.0f%%, ETA %s\n",
          (double)r->bytes / 1e9, (double)r->bytes / 1e6 / elapsed, (double)tokens / 1e6,
          (double)tokens / 1e6 / elapsed, 100 * done, eta);
}

// ---------------------------------------------------------------------------

static int check_options(int n_inputs, const ng_data_options *o) {
  if (n_inputs < 1) return ng_fail("no input files");
  if (!(o->val_fraction > 0.0 && o->val_fraction < 1.0))  // also rejects NaN
    return ng_fail("val_fraction %g is not in (0, 1)", o->val_fraction);
  if (o->record_sep && o->jsonl_field)
    return ng_fail("--records-split and --jsonl-field exclude each other");
  if (o->record_sep && strchr(o->record_sep, '\n'))
    return ng_fail("record separator \"%s\" contains a newline, so no line can equal it",
                   o->record_sep);
  return 0;
}

// Reads, tokenizes and places batch after batch until the input or the
// training split's max_tokens ends.
static int run(reader *r, const encoder *e, splits *sp, const file_list *files, double t0) {
  batch b = {0};
  double last = t0;
  int got = 1;
  while (got > 0 && !sp->full) {
    got = reader_fill(r, &b);
    if (got >= 0) encode_batch(e, &b, files);
    if (got >= 0 && place_batch(sp, &b) != 0) got = -1;
    batch_clear(&b);
    double now = ng_now();
    if (sp->o->progress && now - last >= PROGRESS_EVERY) {
      print_progress(r, sp, files, now - t0);
      last = now;
    }
  }
  free(b.arena);
  free(b.docs);
  return got < 0 ? -1 : check_splits(sp);
}

static void remove_shard(const char *dir, const char *name) {
  int n;
  char **files = ng_shard_files(dir, name, &n);
  for (int i = 0; i < n; i++) {
    remove(files[i]);
    free(files[i]);
  }
  free(files);
}

static bool dir_exists(const char *dir) {
  struct stat st;
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

int ng_data_prepare(const char *const *inputs, int n_inputs, const ng_data_options *o,
                    const char *out_dir, ng_data_stats *st) {
  NG_ASSERT(o && out_dir && st);
  memset(st, 0, sizeof *st);
  if (check_options(n_inputs, o) != 0) return -1;
  file_list files = {0};
  int rc = 0;
  for (int i = 0; i < n_inputs && rc == 0; i++) rc = list_path(&files, inputs[i], 0);
  if (rc == 0 && files.n == 0) rc = ng_fail("no input files (the directories given are empty)");
  encoder e = {o, NG_BYTE_EOT, NULL};
  uint32_t vocab = NG_BYTE_VOCAB;
  if (rc == 0 && o->tokenizer) {
    vocab = ng_tokenizer_vocab_size(o->tokenizer);
    rc = ng_tokenizer_added_id(o->tokenizer, "<|endoftext|>", &e.separator);
  }
  bool made_dir = rc == 0 && !dir_exists(out_dir);
  if (rc == 0) rc = ng_make_dir(out_dir);
  if (rc != 0) {
    list_free(&files);
    return -1;
  }

  int nt = omp_get_max_threads();
  if (o->tokenizer) {
    e.states = ng_xcalloc((size_t)nt, sizeof *e.states);
    for (int i = 0; i < nt; i++) e.states[i] = ng_tok_state_create(o->tokenizer);
  }
  splits sp = {.o = o};
  ng_rng_seed(&sp.rng, o->seed);
  uint64_t file_tokens = o->file_tokens ? o->file_tokens : NG_DATA_FILE_TOKENS;
  ng_shard_writer_open(&sp.w[0], out_dir, "train", vocab, e.separator, file_tokens);
  ng_shard_writer_open(&sp.w[1], out_dir, "val", vocab, e.separator, file_tokens);
  reader r = {.files = &files,
              .kind = o->jsonl_field ? DOCS_JSONL : o->record_sep ? DOCS_RECORDS : DOCS_WHOLE,
              .record_sep = o->record_sep};
  r.max_doc = o->max_doc ? (size_t)o->max_doc : (size_t)NG_DATA_MAX_DOC;
  double t0 = ng_now();
  rc = run(&r, &e, &sp, &files, t0);
  for (int k = 0; k < 2; k++) {
    st->tokens[k] = ng_shard_writer_count(sp.w[k]);
    int wrc = ng_shard_writer_finish(sp.w[k], rc, &st->path[k]);
    if (rc == 0) rc = wrc;
  }
  if (rc != 0 && st->path[0]) remove_shard(out_dir, "train");  // in place before val failed
  stream_close(&r.s);
  free(r.s.buf);
  if (rc == 0) {
    st->docs[0] = sp.docs[0];
    st->docs[1] = sp.docs[1];
    st->bytes = r.bytes;
    st->seconds = ng_now() - t0;
  } else {
    ng_data_stats_free(st);
    memset(st, 0, sizeof *st);
    if (made_dir) rmdir(out_dir);
  }
  for (int i = 0; e.states && i < nt; i++) ng_tok_state_free(e.states[i]);
  free(e.states);
  list_free(&files);
  return rc;
}

void ng_data_stats_free(ng_data_stats *st) {
  for (int k = 0; k < 2; k++) {
    free(st->path[k]);
    st->path[k] = NULL;
  }
}

int ng_data_build(const char *const *files, int n_files, const char *record_sep,
                  double val_fraction, uint64_t seed, const char *out_dir, ng_data_stats *st) {
  ng_data_options o = {.record_sep = record_sep, .val_fraction = val_fraction, .seed = seed};
  int rc = ng_data_prepare(files, n_files, &o, out_dir, st);
  ng_data_stats_free(st);
  return rc;
}
