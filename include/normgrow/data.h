// normgrow: token shards, the byte-level toy tokenizer, and batches.
//
// Shard file (little-endian), version 1:
//   offset  0  char[8]  magic "NGTOKENS"
//   offset  8  u32      version (1)
//   offset 12  u32      vocab_size (every token < vocab_size)
//   offset 16  u32      separator id (document separator, < vocab_size)
//   offset 20  u32      reserved, 0
//   offset 24  u64      token count n
//   offset 32  u32[n]   tokens
// The file is exactly 32 + 4 n bytes. Documents are stored one after the
// other, each followed by the separator, as Qwen3 pretraining packs them.
//
// A large shard is several such files and a manifest, a JSON file that reads
// as the one shard of all its files' tokens in order:
//   {"format": "normgrow-shards", "version": 1, "vocab_size": V, "separator": S,
//    "n_tokens": N, "files": [{"file": "train-00000.bin", "n_tokens": n0}, ...]}
// File names are relative to the manifest's directory; every file has the
// manifest's vocab_size and separator, and the counts add up to N.
#ifndef NORMGROW_DATA_H
#define NORMGROW_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/rng.h"
#include "normgrow/tokenizer.h"

#define NG_SHARD_MAGIC "NGTOKENS"
#define NG_SHARD_VERSION 1u
#define NG_SHARD_HEADER 32u

// The byte-level toy tokenizer: ids 0..255 are bytes, 256 is <|endoftext|>.
#define NG_BYTE_VOCAB 257u
#define NG_BYTE_EOT 256u

typedef struct {
  uint8_t *map;
  size_t map_size;
  uint64_t first, n;       // this file holds the shard's tokens [first, first + n)
  const uint32_t *tokens;  // n ids, inside the mapping
} ng_shard_part;

typedef struct {
  char *path;
  uint32_t vocab_size, separator;
  uint64_t n_tokens;
  int n_parts;             // 1 for a shard file, one per file of a manifest
  ng_shard_part *parts;
} ng_shard;

// Memory-map and validate a shard file or a manifest and all its files (magic,
// version, sizes, file length, every id < vocab).
int ng_shard_open(ng_shard *s, const char *path);
void ng_shard_close(ng_shard *s);  // safe on a zeroed struct
// Whether path is a manifest (of shards, or of a top-k cache's parts): a regular
// file that starts with '{'.
bool ng_is_manifest(const char *path);
// The path of a manifest's part: `name` (its files[i].file), a plain file name,
// in the manifest's directory. NULL, with an error naming the manifest and i,
// when name is missing, empty or holds a '/'. The caller frees it.
char *ng_manifest_part_path(const char *manifest, const char *name, int i);
// Tokens [start, start + n) (< n_tokens), across files, into out as int32.
void ng_shard_read(const ng_shard *s, uint64_t start, int64_t n, int32_t *out);
// Atomic write (temporary file, then rename).
int ng_shard_write(const char *path, uint32_t vocab_size, uint32_t separator,
                   const uint32_t *tokens, uint64_t n);

// A shard written as it comes: <dir>/<name>.bin, or, once more than
// `file_tokens` tokens come, <dir>/<name>-00000.bin, ... and the manifest
// <dir>/<name>.manifest.json. Nothing appears under those names before
// ng_shard_writer_finish succeeds; a failed or abandoned writer leaves nothing.
typedef struct ng_shard_writer ng_shard_writer;
int ng_shard_writer_open(ng_shard_writer **w, const char *dir, const char *name,
                         uint32_t vocab_size, uint32_t separator, uint64_t file_tokens);
int ng_shard_writer_append(ng_shard_writer *w, const uint32_t *ids, size_t n);
uint64_t ng_shard_writer_count(const ng_shard_writer *w);
// rc == 0: completes every file and returns the path to read the shard from
// (the .bin or the manifest; malloc'd) in *path. rc != 0: removes everything.
// Frees the writer either way.
int ng_shard_writer_finish(ng_shard_writer *w, int rc, char **path);

// The files of the shard `name` that are in `dir`, in either form, in the
// order to remove them: <name>.manifest.json, the parts <name>-NNNNN.bin (any
// number of them, whatever the manifest says), <name>.bin. Sets *n; the paths
// and the array are malloc'd.
char **ng_shard_files(const char *dir, const char *name, int *n);

// Training batch: B windows of T+1 consecutive tokens, each starting at a
// uniform position drawn from r: tokens [B*T] = w[0..T), targets [B*T] = w[1..T].
// Fails if the shard holds fewer than T+1 tokens.
int ng_batch_sample(const ng_shard *s, ng_rng *r, int64_t B, int64_t T, int32_t *tokens,
                    int32_t *targets);
// Epoch sampling: the shard read as its n = (n_tokens - 1) / T windows of T+1
// tokens, window k = tokens [k T, k T + T] (consecutive windows share one
// token: the last target of one is the first input of the next). Epoch e uses
// every window once, in the order of a Fisher-Yates shuffle drawn from a
// generator seeded with seed ^ (e * 0x9e3779b97f4a7c15): the i-th window of a
// run (i from 0 over the whole run) is window order_e[i mod n] of epoch
// e = i / n. The order depends on (seed, n, i) only, so a run resumes it from
// the count of windows it has used, and every rank of a data-parallel run
// draws the same windows.
typedef struct {
  uint64_t seed;
  int64_t n_windows;
  int64_t epoch;   // the epoch whose order is held; -1 before the first
  int64_t *order;  // [n_windows]
} ng_epoch_order;

// n_windows >= 1.
void ng_epoch_order_init(ng_epoch_order *e, uint64_t seed, int64_t n_windows);
// The index of the run's i-th window (i >= 0), in [0, n_windows).
int64_t ng_epoch_window(ng_epoch_order *e, int64_t i);
void ng_epoch_order_free(ng_epoch_order *e);  // safe on a zeroed struct
// Windows of a shard read as epochs (above): (n_tokens - 1) / T.
int64_t ng_epoch_windows(const ng_shard *s, int64_t T);
// Training batch of the windows windows[0..B) (each < ng_epoch_windows):
// tokens [B*T] = w[0..T), targets [B*T] = w[1..T].
void ng_batch_windows(const ng_shard *s, const int64_t *windows, int64_t B, int64_t T,
                      int32_t *tokens, int32_t *targets);
// Evaluation batch `index` of a fixed set: windows start at (index*B + b) * T,
// wrapping around the shard; the same every time it is asked for.
void ng_batch_fixed(const ng_shard *s, int64_t index, int64_t B, int64_t T, int32_t *tokens,
                    int32_t *targets);

// A corpus into a train and a validation shard (ref/corpus.c).
//
// Inputs are files and directories (every file below one, in name order); a
// file is plain text or gzip (told by its first bytes). Its documents are
//   - the whole file (the default),
//   - records: the text between lines equal to `record_sep`; the newline that
//     ends a record's last line belongs to no document; or
//   - JSONL: each non-blank line a JSON object whose string field
//     `jsonl_field` is the document. The line holds that object and only
//     whitespace after it, no key of the object twice, and no NUL character
//     anywhere (escaped as \u0000 or a raw byte): documents hold none.
// A document is tokenized, byte-level (ids 0..255 are bytes, NG_BYTE_EOT the
// separator) or by `tokenizer` (its "<|endoftext|>" the separator), and
// followed by the separator. Empty or whitespace-only documents are dropped;
// every other one draws once, in input order, from a generator seeded with
// `seed`, and goes to validation when the draw is below val_fraction. The
// splits go to <out_dir>/train and <out_dir>/val (ng_shard_writer: .bin, or
// files and a manifest). Documents are tokenized by all OpenMP threads in
// batches of a fixed size; the shards do not depend on the thread count.
// Memory is bounded by a batch plus the largest document (at most max_doc
// bytes, 1 GiB by default): a longer document, record or line is refused as
// soon as that many of its bytes are read.
// A malformed input fails with one message naming the file (and the line),
// and leaves no shard behind.
typedef struct {
  const char *record_sep;         // NULL: not records
  const char *jsonl_field;        // NULL: not JSONL
  const ng_tokenizer *tokenizer;  // NULL: byte-level
  double val_fraction;            // in (0, 1)
  uint64_t seed;
  uint64_t max_tokens;   // > 0: the training split ends at exactly this many tokens
                         // (its last document cut there); input stops being read
  uint64_t file_tokens;  // tokens per shard file; 0: NG_DATA_FILE_TOKENS
  bool progress;         // progress lines on stderr (bytes/s, tokens/s, ETA)
  uint64_t max_doc;      // bytes of the longest document, record or line; 0: NG_DATA_MAX_DOC
} ng_data_options;
#define NG_DATA_FILE_TOKENS ((uint64_t)1 << 28)  // 1 GiB files
#define NG_DATA_MAX_DOC ((uint64_t)1 << 30)      // 1 GiB

typedef struct {
  uint64_t docs[2], tokens[2];  // [train, val]
  char *path[2];                // the shard to read each split from (malloc'd)
  uint64_t bytes;               // input bytes read (decompressed)
  double seconds;
} ng_data_stats;
int ng_data_prepare(const char *const *inputs, int n_inputs, const ng_data_options *o,
                    const char *out_dir, ng_data_stats *st);
void ng_data_stats_free(ng_data_stats *st);

// Byte-level shards of whole files, or of records when record_sep is not NULL.
int ng_data_build(const char *const *files, int n_files, const char *record_sep,
                  double val_fraction, uint64_t seed, const char *out_dir, ng_data_stats *st);

#endif
