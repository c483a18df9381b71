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
#ifndef NORMGROW_DATA_H
#define NORMGROW_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/rng.h"

#define NG_SHARD_MAGIC "NGTOKENS"
#define NG_SHARD_VERSION 1u
#define NG_SHARD_HEADER 32u

// The byte-level toy tokenizer: ids 0..255 are bytes, 256 is <|endoftext|>.
#define NG_BYTE_VOCAB 257u
#define NG_BYTE_EOT 256u

typedef struct {
  char *path;
  uint8_t *map;
  size_t map_size;
  uint32_t vocab_size, separator;
  uint64_t n_tokens;
  const uint32_t *tokens;   // n_tokens ids, inside the mapping
} ng_shard;

// Memory-map and validate (magic, version, sizes, file length, every id < vocab).
int ng_shard_open(ng_shard *s, const char *path);
void ng_shard_close(ng_shard *s);  // safe on a zeroed struct
// Atomic write (temporary file, then rename).
int ng_shard_write(const char *path, uint32_t vocab_size, uint32_t separator,
                   const uint32_t *tokens, uint64_t n);

// Training batch: B windows of T+1 consecutive tokens, each starting at a
// uniform position drawn from r: tokens [B*T] = w[0..T), targets [B*T] = w[1..T].
// Fails if the shard holds fewer than T+1 tokens.
int ng_batch_sample(const ng_shard *s, ng_rng *r, int64_t B, int64_t T, int32_t *tokens,
                    int32_t *targets);
// Evaluation batch `index` of a fixed set: windows start at (index*B + b) * T,
// wrapping around the shard; the same every time it is asked for.
void ng_batch_fixed(const ng_shard *s, int64_t index, int64_t B, int64_t T, int32_t *tokens,
                    int32_t *targets);

// Byte-level tokenization of documents into a train and a validation shard.
// Each document (a whole file, or each record of a file split on lines equal
// to `record_sep`, when not NULL) becomes its bytes then NG_BYTE_EOT. Empty
// records are dropped. A document goes to validation when a draw from a
// generator seeded with `seed` (one draw per document, in input order) falls
// below val_fraction. Writes <out_dir>/train.bin and <out_dir>/val.bin.
typedef struct {
  uint64_t docs[2], tokens[2];  // [train, val]
} ng_data_stats;
int ng_data_build(const char *const *files, int n_files, const char *record_sep,
                  double val_fraction, uint64_t seed, const char *out_dir, ng_data_stats *st);

#endif
