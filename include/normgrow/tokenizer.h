// normgrow: the Hugging Face byte-level BPE tokenizer, read from a tokenizer.json
// (Qwen3's), encoding exactly as the `tokenizers` library does.
//
// Encoding a text, in order (each step as the file describes it):
//   1. added tokens: every occurrence of an added token's content (special or
//      not, e.g. "<|endoftext|>") is that token's id; the leftmost match wins,
//      the longest among those starting there. The text between them goes on:
//   2. UTF-8 repair: invalid UTF-8 becomes U+FFFD, one per maximal ill-formed
//      subsequence (as Python's bytes.decode("utf-8", "replace"), the only way
//      such bytes can reach the Python library);
//   3. normalizer: NFC (utf8proc), or none. `tokenizers` normalizes with
//      Unicode 9.0 tables, so a character assigned later is left as it is
//      (ref/nfc_unicode9.h lists those utf8proc would otherwise move, compose
//      or decompose) and the text between such characters is normalized alone;
//      so is the text around U+11A7, which utf8proc 2.8 would drop after an LV
//      syllable (taking it for "no trailing consonant");
//   4. pre-tokenizer: the Split regex of the file (PCRE2, UTF + Unicode
//      properties, JIT), behaviour "Isolated": every match and every gap
//      between matches is a word, and an empty match splits a gap unless it
//      comes right where the previous match ended. PCRE2 10.42 has Unicode
//      14.0 properties, `tokenizers`' Oniguruma later ones: \p{L} and \p{N} are
//      widened by the letters and digits assigned since (ref/regex_unicode.h),
//      and \s and \S mean Unicode White_Space (PCRE2's \s also holds U+180E);
//   5. byte-level: a word's UTF-8 bytes are its initial symbols (the vocabulary
//      and merges, written in the GPT-2 byte-to-character alphabet, are mapped
//      back to bytes when the file is read);
//   6. BPE: the adjacent pair of lowest merge rank is merged, the leftmost one
//      on ties, until no pair has a merge.
// Steps 2-4 take the text between added tokens in pieces (cut before ASCII
// bytes, across which neither the repair nor NFC looks; a regex match that may
// go on past a piece waits for the next), so the memory an encoding takes does
// not grow with the text, but with its longest word: about 8.5 bytes a byte,
// and a word longer than NG_TOKENIZER_MAX_WORD is refused. A regex search may
// backtrack in proportion to the text it looks at: `tokenizers`' Oniguruma
// gives up (a panic) past 10M steps, as on a run of 10M spaces, which normgrow
// splits as the regex does without that limit.
// A file using anything else (other normalizers or pre-tokenizers, Split
// behaviours, BPE dropout, unk/byte fallback, added tokens that strip or are
// normalized, truncation, padding, templates that add tokens, regex constructs
// Oniguruma reads otherwise) is refused with one message naming the feature,
// never encoded differently; so is a file `tokenizers`' reader refuses (a key of
// the wrong type or missing, an unknown key at the top, an id with a fraction,
// text after the JSON), and one with a \u0000 in a string. An added token's id
// is the one `tokenizers` gives it, whatever the file says: the id of the
// model.vocab key equal to its content, else the next after the vocabulary's
// entries and the added tokens before it.
//
// Decoding concatenates each id's bytes (an added token's content), so the
// round trip is exact for valid UTF-8 text already in NFC.
#ifndef NORMGROW_TOKENIZER_H
#define NORMGROW_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

// The longest word (a regex match, or the text between two) encoding takes.
#define NG_TOKENIZER_MAX_WORD ((size_t)64 << 20)

typedef struct ng_tokenizer ng_tokenizer;
// Per-thread encoding state: regex match data, scratch, a cache of words.
typedef struct ng_tok_state ng_tok_state;

// A growable id array; encode appends to it. Free ids with free().
typedef struct {
  uint32_t *ids;
  size_t n, cap;
} ng_ids;

// `path` is a tokenizer.json or a directory holding one.
int ng_tokenizer_load(const char *path, ng_tokenizer **out);
void ng_tokenizer_free(ng_tokenizer *t);  // NULL is fine
// One past the largest id (151669 for Qwen3: 151643 BPE tokens + 26 added).
uint32_t ng_tokenizer_vocab_size(const ng_tokenizer *t);
// The id of the added token whose content is `content` (e.g. "<|endoftext|>").
int ng_tokenizer_added_id(const ng_tokenizer *t, const char *content, uint32_t *id);

ng_tok_state *ng_tok_state_create(const ng_tokenizer *t);
void ng_tok_state_free(ng_tok_state *s);  // NULL is fine
// Appends the ids of text[0..len) to out. Fails on a word longer than
// NG_TOKENIZER_MAX_WORD, or if the regex engine does (message names the error).
int ng_tokenizer_encode(ng_tok_state *s, const char *text, size_t len, ng_ids *out);
// Encoding takes text in pieces of at least `bytes` (64 KiB unless set); any
// size gives the same ids.
void ng_tok_state_set_piece(ng_tok_state *s, size_t bytes);

// The bytes of ids[0..n) into *text (malloc'd, NUL-terminated), their count
// into *len. An id that names no token is an error.
int ng_tokenizer_decode(const ng_tokenizer *t, const uint32_t *ids, size_t n, char **text,
                        size_t *len);

#endif
