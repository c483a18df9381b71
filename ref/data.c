// normgrow: token shards (mmap + strict validation, manifests of several
// files, atomic and streaming writes) and batches.
#include "normgrow/data.h"

#include "normgrow/common.h"
#include "normgrow/config.h"
#include "normgrow/fileio.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Tokens are read from and written to the file as host u32 values (a
// little-endian host: fileio.h).

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
  for (int i = 0; i < s->n_parts; i++) ng_unmap_file(s->parts[i].map, s->parts[i].map_size);
  free(s->parts);
  free(s->path);
  memset(s, 0, sizeof *s);
}

// Magic, version, reserved word, vocabulary and separator of the file at
// `map`. The vocabulary is bounded by INT32_MAX because batches hand ids out
// as int32.
static int check_header(const char *path, const uint8_t *h, uint32_t *vocab, uint32_t *sep) {
  if (memcmp(h + OFF_MAGIC, NG_SHARD_MAGIC, MAGIC_LEN) != 0)
    return ng_fail("%s: not a normgrow token shard (bad magic)", path);
  uint32_t version = get_u32(h + OFF_VERSION), reserved = get_u32(h + OFF_RESERVED);
  if (version != NG_SHARD_VERSION)
    return ng_fail("%s: unsupported token shard version %" PRIu32 " (expected %u)", path,
                   version, NG_SHARD_VERSION);
  if (reserved != 0)
    return ng_fail("%s: reserved header field is %" PRIu32 ", expected 0", path, reserved);
  *vocab = get_u32(h + OFF_VOCAB);
  *sep = get_u32(h + OFF_SEP);
  if (*vocab < 1 || *vocab > INT32_MAX)
    return ng_fail("%s: vocab_size %" PRIu32 " is not in 1..%d", path, *vocab, INT32_MAX);
  if (*sep >= *vocab)
    return ng_fail("%s: separator %" PRIu32 " is >= vocab_size %" PRIu32, path, *sep, *vocab);
  return 0;
}

// The file is exactly 32 + 4 n bytes (compared by division: no overflow).
static int check_length(const char *path, ng_shard_part *p) {
  uint64_t n = get_u64(p->map + OFF_COUNT);
  size_t body = p->map_size - NG_SHARD_HEADER;
  if (body % 4 != 0 || body / 4 != n)
    return ng_fail("%s: file is %zu bytes, header says %u + 4 x %" PRIu64, path, p->map_size,
                   NG_SHARD_HEADER, n);
  p->n = n;
  p->tokens = (const uint32_t *)(p->map + NG_SHARD_HEADER);  // page-aligned mapping + 32
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

// Maps one shard file as the shard's next part; the first sets vocab_size and
// separator, the others must agree.
static int open_part(ng_shard *s, const char *path) {
  ng_shard_part *p = &s->parts[s->n_parts];
  *p = (ng_shard_part){.first = s->n_tokens};
  uint32_t vocab = 0, sep = 0;
  if (ng_map_file(path, NG_SHARD_HEADER, "token shard header", &p->map, &p->map_size) != 0)
    return -1;
  s->n_parts++;
  if (check_header(path, p->map, &vocab, &sep) != 0 || check_length(path, p) != 0) return -1;
  if (s->n_parts > 1 && (vocab != s->vocab_size || sep != s->separator))
    return ng_fail("%s: vocab_size %" PRIu32 " and separator %" PRIu32 " differ from %s's", path,
                   vocab, sep, s->path);
  s->vocab_size = vocab;
  s->separator = sep;
  s->n_tokens += p->n;
  return check_tokens(path, p->tokens, p->n, vocab);
}

static int manifest_u64(const char *path, const cJSON *o, const char *key, uint64_t max,
                        uint64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)max ||
      v->valuedouble != (double)(uint64_t)v->valuedouble)
    return ng_fail("%s: \"%s\" is not an integer in 0..%" PRIu64, path, key, max);
  *out = (uint64_t)v->valuedouble;
  return 0;
}

// Every file the manifest names, in order; the totals must match it.
static int open_manifest(ng_shard *s, const char *text) {
  cJSON *m = cJSON_Parse(text);
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
  const char *format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "format"));
  uint64_t vocab, sep, n;
  int rc = 0;
  if (!m || !format || strcmp(format, "normgrow-shards") != 0 || !cJSON_IsArray(files) ||
      cJSON_GetArraySize(files) < 1)
    rc = ng_fail("%s: not a normgrow shard manifest (format \"normgrow-shards\", files)", s->path);
  if (rc == 0)
    rc = manifest_u64(s->path, m, "vocab_size", INT32_MAX, &vocab) ||
                 manifest_u64(s->path, m, "separator", INT32_MAX, &sep) ||
                 manifest_u64(s->path, m, "n_tokens", UINT64_MAX / 8, &n)
             ? -1
             : 0;
  if (rc == 0) s->parts = ng_xcalloc((size_t)cJSON_GetArraySize(files), sizeof *s->parts);
  const cJSON *f = rc == 0 ? files->child : NULL;
  for (; f && rc == 0; f = f->next) {
    char *file = ng_manifest_part_path(
        s->path, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "file")), s->n_parts);
    rc = file ? open_part(s, file) : -1;
    free(file);
  }
  if (rc == 0 && (vocab != s->vocab_size || sep != s->separator || n != s->n_tokens))
    rc = ng_fail("%s: says vocab_size %" PRIu64 ", separator %" PRIu64 ", %" PRIu64
                 " tokens; its files hold %" PRIu32 ", %" PRIu32 ", %" PRIu64,
                 s->path, vocab, sep, n, s->vocab_size, s->separator, s->n_tokens);
  cJSON_Delete(m);
  return rc;
}

char *ng_manifest_part_path(const char *manifest, const char *name, int i) {
  if (!name || !name[0] || strchr(name, '/')) {
    ng_fail("%s: files[%d]: \"file\" is not a file name", manifest, i);
    return NULL;
  }
  char *dir = ng_xstrdup(manifest), *slash = strrchr(dir, '/');
  if (slash) slash[1] = 0;
  char *file = ng_path_join(slash ? dir : ".", name);
  free(dir);
  return file;
}

// A manifest is a regular file that starts with '{'; anything else is read as
// a shard file (which refuses what is not a regular file).
bool ng_is_manifest(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  char c = 0;
  bool yes = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read(fd, &c, 1) == 1 && c == '{';
  if (fd >= 0) close(fd);
  return yes;
}

int ng_shard_open(ng_shard *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = ng_xstrdup(path);
  char *text = NULL;
  int rc;
  if (ng_is_manifest(path)) {
    rc = ng_read_file(path, (size_t)1 << 26, &text, NULL) || open_manifest(s, text) ? -1 : 0;
  } else {
    s->parts = ng_xcalloc(1, sizeof *s->parts);
    rc = open_part(s, path);
  }
  free(text);
  if (rc != 0) ng_shard_close(s);
  return rc;
}

// The part holding token `i` (< n_tokens): the last whose first is <= i.
static const ng_shard_part *part_of(const ng_shard *s, uint64_t i) {
  int lo = 0, hi = s->n_parts - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->parts[mid].first <= i) lo = mid;
    else hi = mid - 1;
  }
  return &s->parts[lo];
}

void ng_shard_read(const ng_shard *s, uint64_t start, int64_t n, int32_t *out) {
  NG_ASSERT(n >= 0 && start <= s->n_tokens && (uint64_t)n <= s->n_tokens - start);
  for (int64_t done = 0; done < n;) {
    const ng_shard_part *p = part_of(s, start + (uint64_t)done);
    uint64_t at = start + (uint64_t)done - p->first, k = p->n - at;
    if (k > (uint64_t)(n - done)) k = (uint64_t)(n - done);
    for (uint64_t t = 0; t < k; t++) out[done + (int64_t)t] = (int32_t)p->tokens[at + t];
    done += (int64_t)k;  // ids < vocab_size <= INT32_MAX (checked on open)
  }
}

// ---------------------------------------------------------------------------
// Writer

typedef struct {
  uint32_t vocab_size, separator;
  const uint32_t *tokens;
  uint64_t n;
} shard_contents;

static void make_header(uint8_t h[NG_SHARD_HEADER], uint32_t vocab_size, uint32_t separator,
                        uint64_t n) {
  memset(h, 0, NG_SHARD_HEADER);
  memcpy(h + OFF_MAGIC, NG_SHARD_MAGIC, MAGIC_LEN);
  put_u32(h + OFF_VERSION, NG_SHARD_VERSION);
  put_u32(h + OFF_VOCAB, vocab_size);
  put_u32(h + OFF_SEP, separator);
  put_u64(h + OFF_COUNT, n);
}

// ng_write_fn: the header, then the tokens.
static bool write_shard_contents(FILE *fp, void *ctx) {
  const shard_contents *c = ctx;
  uint8_t h[NG_SHARD_HEADER];
  make_header(h, c->vocab_size, c->separator, c->n);
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
  ng_shard_read(s, start, T, tokens);
  ng_shard_read(s, start + 1, T, targets);
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
// Epochs

void ng_epoch_order_init(ng_epoch_order *e, uint64_t seed, int64_t n_windows) {
  NG_ASSERT(n_windows >= 1 && (uint64_t)n_windows <= SIZE_MAX / sizeof *e->order);
  *e = (ng_epoch_order){.seed = seed, .n_windows = n_windows, .epoch = -1,
                        .order = ng_xmalloc((size_t)n_windows * sizeof *e->order)};
}

void ng_epoch_order_free(ng_epoch_order *e) {
  free(e->order);
  memset(e, 0, sizeof *e);
}

// The order of epoch `epoch`: 0..n-1 shuffled by Fisher-Yates (one draw per
// position from the top down).
static void shuffle_epoch(ng_epoch_order *e, int64_t epoch) {
  ng_rng r;
  ng_rng_seed(&r, e->seed ^ ((uint64_t)epoch * 0x9e3779b97f4a7c15ULL));
  for (int64_t k = 0; k < e->n_windows; k++) e->order[k] = k;
  for (int64_t k = e->n_windows - 1; k > 0; k--) {
    int64_t j = (int64_t)ng_rng_below(&r, (uint64_t)k + 1), w = e->order[k];
    e->order[k] = e->order[j];
    e->order[j] = w;
  }
  e->epoch = epoch;
}

int64_t ng_epoch_window(ng_epoch_order *e, int64_t i) {
  NG_ASSERT(i >= 0 && e->order);
  int64_t epoch = i / e->n_windows;
  if (epoch != e->epoch) shuffle_epoch(e, epoch);
  return e->order[i % e->n_windows];
}

int64_t ng_epoch_windows(const ng_shard *s, int64_t T) {
  NG_ASSERT(T >= 1);
  return s->n_tokens < 1 ? 0 : (int64_t)((s->n_tokens - 1) / (uint64_t)T);
}

void ng_batch_windows(const ng_shard *s, const int64_t *windows, int64_t B, int64_t T,
                      int32_t *tokens, int32_t *targets) {
  int64_t n = ng_epoch_windows(s, T);
  for (int64_t b = 0; b < B; b++) {
    NG_ASSERT(windows[b] >= 0 && windows[b] < n);
    copy_window(s, (uint64_t)windows[b] * (uint64_t)T, T, tokens + b * T, targets + b * T);
  }
}

// ---------------------------------------------------------------------------
// Streaming writer

struct ng_shard_writer {
  char *dir, *name;
  uint32_t vocab_size, separator;
  uint64_t file_tokens, total;
  int n_files;
  ng_temp_file *files;  // [n_files], the last one being filled
  char **paths;         // their final names
  uint64_t *counts;     // their token counts
};

int ng_shard_writer_open(ng_shard_writer **out, const char *dir, const char *name,
                         uint32_t vocab_size, uint32_t separator, uint64_t file_tokens) {
  NG_ASSERT(file_tokens > 0 && vocab_size >= 1 && vocab_size <= INT32_MAX);
  NG_ASSERT(separator < vocab_size);
  ng_shard_writer *w = ng_xcalloc(1, sizeof *w);
  *w = (ng_shard_writer){.dir = ng_xstrdup(dir), .name = ng_xstrdup(name), .vocab_size = vocab_size,
                         .separator = separator, .file_tokens = file_tokens};
  *out = w;
  return 0;
}

uint64_t ng_shard_writer_count(const ng_shard_writer *w) { return w->total; }

// The next file, "<name>-NNNNN.bin", with a header whose count comes at the end.
static int start_file(ng_shard_writer *w) {
  int i = w->n_files;
  w->files = ng_xrealloc(w->files, (size_t)(i + 1) * sizeof *w->files);
  w->paths = ng_xrealloc(w->paths, (size_t)(i + 1) * sizeof *w->paths);
  w->counts = ng_xrealloc(w->counts, (size_t)(i + 1) * sizeof *w->counts);
  char file[64 + 256];
  snprintf(file, sizeof file, "%.256s-%05d.bin", w->name, i);
  w->paths[i] = ng_path_join(w->dir, file);
  w->counts[i] = 0;
  if (ng_temp_create(&w->files[i], w->paths[i]) != 0) {
    free(w->paths[i]);
    return -1;
  }
  w->n_files++;
  uint8_t h[NG_SHARD_HEADER];
  make_header(h, w->vocab_size, w->separator, 0);
  if (fwrite(h, 1, sizeof h, w->files[i].fp) != sizeof h)
    return ng_fail("%s: cannot write: %s", w->paths[i], strerror(errno));
  return 0;
}

int ng_shard_writer_append(ng_shard_writer *w, const uint32_t *ids, size_t n) {
  while (n > 0) {
    if (w->n_files == 0 || w->counts[w->n_files - 1] == w->file_tokens)
      if (start_file(w) != 0) return -1;
    int f = w->n_files - 1;
    uint64_t room = w->file_tokens - w->counts[f];
    size_t k = n < room ? n : (size_t)room;
    for (size_t i = 0; i < k; i++) NG_ASSERT(ids[i] < w->vocab_size);
    if (fwrite(ids, sizeof *ids, k, w->files[f].fp) != k)
      return ng_fail("%s: cannot write: %s", w->paths[f], strerror(errno));
    w->counts[f] += k;
    w->total += k;
    ids += k;
    n -= k;
  }
  return 0;
}

// The manifest of several files (see data.h).
static int write_manifest(const ng_shard_writer *w, const char *path) {
  cJSON *m = cJSON_CreateObject(), *files = cJSON_CreateArray();
  cJSON_AddStringToObject(m, "format", "normgrow-shards");
  cJSON_AddNumberToObject(m, "version", 1);
  cJSON_AddNumberToObject(m, "vocab_size", w->vocab_size);
  cJSON_AddNumberToObject(m, "separator", w->separator);
  cJSON_AddNumberToObject(m, "n_tokens", (double)w->total);
  for (int i = 0; i < w->n_files; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "file", strrchr(w->paths[i], '/') + 1);
    cJSON_AddNumberToObject(f, "n_tokens", (double)w->counts[i]);
    cJSON_AddItemToArray(files, f);
  }
  cJSON_AddItemToObject(m, "files", files);
  char *text = ng_json_print(m, true);
  int rc = ng_write_text_atomic(path, text);
  free(text);
  cJSON_Delete(m);
  return rc;
}

// Each file's header gets its count; then every file is renamed into place.
// A failure removes the files already renamed.
static int commit_files(ng_shard_writer *w, int rc) {
  int committed = 0;
  for (int i = 0; i < w->n_files; i++) {
    uint8_t h[NG_SHARD_HEADER];
    make_header(h, w->vocab_size, w->separator, w->counts[i]);
    if (rc == 0 && (fflush(w->files[i].fp) != 0 ||
                    pwrite(fileno(w->files[i].fp), h, sizeof h, 0) != (ssize_t)sizeof h))
      rc = ng_fail("%s: cannot write: %s", w->paths[i], strerror(errno));
    rc = ng_temp_commit(&w->files[i], rc);
    if (rc == 0) committed++;
  }
  for (int i = 0; rc != 0 && i < committed; i++) remove(w->paths[i]);
  return rc;
}

int ng_shard_writer_finish(ng_shard_writer *w, int rc, char **path) {
  if (rc == 0 && w->n_files == 0) rc = start_file(w);  // an empty shard is still a shard
  if (w->n_files == 1) {  // a single file is <name>.bin
    char file[64 + 256];
    snprintf(file, sizeof file, "%.256s.bin", w->name);
    free(w->paths[0]);
    w->paths[0] = ng_path_join(w->dir, file);
    w->files[0].path = w->paths[0];
  }
  rc = commit_files(w, rc);
  char *out = NULL;
  if (rc == 0 && w->n_files > 1) {
    char file[64 + 256];
    snprintf(file, sizeof file, "%.256s.manifest.json", w->name);
    out = ng_path_join(w->dir, file);
    rc = write_manifest(w, out);
    for (int i = 0; rc != 0 && i < w->n_files; i++) remove(w->paths[i]);
  } else if (rc == 0) {
    out = ng_xstrdup(w->paths[0]);
  }
  if (rc != 0) {
    free(out);
    out = NULL;
  }
  if (path) *path = out;
  else free(out);
  for (int i = 0; i < w->n_files; i++) free(w->paths[i]);
  free(w->paths);
  free(w->files);
  free(w->counts);
  free(w->dir);
  free(w->name);
  free(w);
  return rc;
}

// ---------------------------------------------------------------------------
// A shard's files

// Whether `file` is "<name>-NNNNN.bin" (five or more digits): a part of the
// shard `name`, as start_file names them.
static bool is_part(const char *file, const char *name) {
  size_t k = strlen(name);
  if (strncmp(file, name, k) != 0 || file[k] != '-') return false;
  const char *digits = file + k + 1, *end = digits;
  while (*end >= '0' && *end <= '9') end++;
  return end - digits >= 5 && strcmp(end, ".bin") == 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(char ***paths, int *n, char *path) {
  *paths = ng_xrealloc(*paths, (size_t)(*n + 1) * sizeof **paths);
  (*paths)[(*n)++] = path;
}

// `file` in dir, when something is there under that name.
static void add_if_there(char ***paths, int *n, const char *dir, const char *file) {
  char *path = ng_path_join(dir, file);
  struct stat st;
  if (lstat(path, &st) == 0) add_path(paths, n, path);
  else free(path);
}

char **ng_shard_files(const char *dir, const char *name, int *n) {
  char **paths = NULL, file[64 + 256];
  *n = 0;
  snprintf(file, sizeof file, "%.256s.manifest.json", name);
  add_if_there(&paths, n, dir, file);
  int first_part = *n;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (is_part(e->d_name, name)) add_path(&paths, n, ng_path_join(dir, e->d_name));
  if (d) closedir(d);
  if (*n > first_part) qsort(paths + first_part, (size_t)(*n - first_part), sizeof *paths, by_name);
  snprintf(file, sizeof file, "%.256s.bin", name);
  add_if_there(&paths, n, dir, file);
  return paths;
}
