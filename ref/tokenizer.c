// normgrow: the Hugging Face byte-level BPE tokenizer (tokenizer.h).
#include "normgrow/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cJSON.h>
#include <ctype.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "nfc_unicode9.h"
#include "regex_unicode.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"

#define MAX_JSON_BYTES ((size_t)1 << 30)
#define MAX_ID ((uint32_t)1 << 24)  // ids past 16M are refused as implausible
#define NO_TOKEN UINT32_MAX
#define EMPTY_PAIR UINT64_MAX
#define JIT_STACK_MAX ((size_t)64 << 20)
#define PIECE ((size_t)64 << 10)     // text normalized and split at a time, at least
#define MAX_WORD NG_TOKENIZER_MAX_WORD
#define MATCH_LIMIT 10000000         // a search's match limit (PCRE2's default) ...
#define MATCH_PER_BYTE 8             // ... and more for each byte it may look at
#define SCRATCH_KEEP ((size_t)4 << 20)  // bytes of each scratch buffer kept between texts
// The word cache: direct-mapped, words of at most CACHE_WORD bytes and CACHE_IDS ids.
#define CACHE_SLOTS ((size_t)1 << 15)
#define CACHE_WORD 26
#define CACHE_IDS 12

typedef struct {
  uint32_t off, len;  // bytes in the pool; len NO_TOKEN: no token has this id
} span;

typedef struct {
  uint64_t key;       // a << 32 | b, or EMPTY_PAIR
  uint32_t rank, id;  // merge rank, id of the merged token
} pair_slot;

typedef struct {
  span content;
  uint32_t id;
} added_token;

struct ng_tokenizer {
  uint8_t *pool;  // every token's bytes
  size_t pool_len, pool_cap;
  span *tok;  // [vocab_size]
  uint32_t vocab_size;
  uint32_t *vocab_slots;  // BPE vocabulary by bytes: id + 1, 0 empty
  size_t vocab_mask;
  pair_slot *pairs;  // merges by pair of ids
  size_t pair_mask;
  uint32_t byte_id[256];  // each byte's BPE token
  added_token *added;
  int n_added;
  bool added_first[256];  // bytes some added token starts with
  bool nfc;
  pcre2_code *re;
  size_t lookbehind;  // bytes before a search's start the regex may look at
};

typedef struct {
  uint8_t len, n_ids;  // len 0: empty slot
  uint8_t bytes[CACHE_WORD];
  uint32_t ids[CACHE_IDS];
} cache_slot;

struct ng_tok_state {
  const ng_tokenizer *t;
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit;
  uint8_t *fix;  // repaired text
  size_t fix_cap;
  uint8_t *norm;  // normalized text
  size_t norm_len, norm_cap;
  uint32_t *sym, *rank;  // BPE of a word (bpe_merge)
  size_t word_cap;        // of sym and rank
  uint64_t *tree;
  size_t tree_cap, leaves;
  cache_slot *cache;
  size_t piece;  // bytes of text normalized and split at a time, at least
};

// ---------------------------------------------------------------------------
// Hashing

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key) {
  key *= 0x9e3779b97f4a7c15ULL;
  return key ^ (key >> 31);
}

static size_t table_size(size_t n) {
  size_t size = 16;
  while (size < 2 * n) size *= 2;
  return size;
}

// The BPE token whose bytes are s[0..n), or NO_TOKEN.
static uint32_t vocab_find(const ng_tokenizer *t, const uint8_t *s, size_t n) {
  for (size_t i = hash_bytes(s, n) & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
    uint32_t v = t->vocab_slots[i];
    if (v == 0) return NO_TOKEN;
    span sp = t->tok[v - 1];
    if (sp.len == n && memcmp(t->pool + sp.off, s, n) == 0) return v - 1;
  }
}

static const pair_slot *pair_find(const ng_tokenizer *t, uint32_t a, uint32_t b) {
  uint64_t key = (uint64_t)a << 32 | b;
  for (size_t i = hash_pair(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
    if (t->pairs[i].key == key) return &t->pairs[i];
    if (t->pairs[i].key == EMPTY_PAIR) return NULL;
  }
}

// ---------------------------------------------------------------------------
// UTF-8

// The length of the well-formed UTF-8 sequence at s[0..n) (Unicode table
// 3-7), or 0 with *bad set to the length (>= 1) of its maximal ill-formed prefix.
static size_t utf8_seq(const uint8_t *s, size_t n, size_t *bad) {
  uint8_t c = s[0], lo = 0x80, hi = 0xBF;
  size_t need;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t i = 1; i < need; i++) {
    if (i >= n || s[i] < lo || s[i] > hi) {
      *bad = i;
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return need;
}

// A code point of valid UTF-8 at s (n > 0 bytes left); its length into *len.
static int32_t utf8_decode(const uint8_t *s, size_t n, size_t *len) {
  size_t bad;
  *len = utf8_seq(s, n, &bad);
  if (*len == 0) return -1;
  static const uint8_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  int32_t cp = s[0] & lead_mask[*len];
  for (size_t i = 1; i < *len; i++) cp = cp << 6 | (s[i] & 0x3F);
  return cp;
}

// ---------------------------------------------------------------------------
// The GPT-2 byte-level alphabet: bytes 33..126, 161..172 and 174..255 are the
// characters of the same value; the other 68 bytes, in order, are U+0100 upward.

#define BYTE_CHARS 324

static void byte_alphabet(int16_t byte_of[BYTE_CHARS]) {
  for (int c = 0; c < BYTE_CHARS; c++) byte_of[c] = -1;
  int extra = 0;
  for (int b = 0; b < 256; b++) {
    bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    byte_of[self ? b : 256 + extra++] = (int16_t)b;
  }
}

// The bytes a byte-level string stands for, appended to the pool; false if a
// character is outside the alphabet.
static bool pool_add_byte_level(ng_tokenizer *t, const int16_t *byte_of, const char *str,
                                span *out) {
  size_t n = strlen(str);
  if (t->pool_len + n > t->pool_cap) {
    t->pool_cap = 2 * (t->pool_len + n) + 4096;
    t->pool = ng_xrealloc(t->pool, t->pool_cap);
  }
  const uint8_t *s = (const uint8_t *)str;
  size_t m = 0;
  for (size_t i = 0, len; i < n; i += len) {
    int32_t cp = utf8_decode(s + i, n - i, &len);
    if (cp < 0 || cp >= BYTE_CHARS || byte_of[cp] < 0) return false;
    t->pool[t->pool_len + m++] = (uint8_t)byte_of[cp];
  }
  *out = (span){(uint32_t)t->pool_len, (uint32_t)m};
  t->pool_len += m;
  return true;
}

// ---------------------------------------------------------------------------
// Loading: features
//
// Where tokenizers' reader (serde) refuses a file, so does normgrow's: a key of
// the wrong type, a flag missing, a key it does not know at the top.

static int unsupported(const char *path, const char *feature, const char *value) {
  return ng_fail("%s: uses %s%s%s, which normgrow's tokenizer does not implement", path, feature,
                 value ? " " : "", value ? value : "");
}

static const char *json_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool has_type(const cJSON *o, const char *type) {
  const char *s = json_str(o, "type");
  return s && strcmp(s, type) == 0;
}

static const char *type_of(const cJSON *o) {
  const char *s = json_str(o, "type");
  return s ? s : "(no type)";
}

// How tokenizers reads a boolean key: it must be there, or it may be absent
// (then true), or it may be absent or null (then false).
typedef enum { FLAG_REQUIRED, FLAG_DEFAULT_TRUE, FLAG_OPTIONAL } flag_rule;

// The boolean `key` of `o` (`where` in messages) into *on.
static int json_flag(const char *path, const char *where, const cJSON *o, const char *key,
                     flag_rule rule, bool *on) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  *on = rule == FLAG_DEFAULT_TRUE;
  if (cJSON_IsBool(v)) *on = cJSON_IsTrue(v);
  else if (!(v == NULL && rule != FLAG_REQUIRED) && !(cJSON_IsNull(v) && rule == FLAG_OPTIONAL))
    return ng_fail("%s: %s%s%s is %s, which tokenizers refuses (true or false%s)", path, where,
                   where[0] ? "." : "", key, v ? "not a boolean" : "missing",
                   rule == FLAG_OPTIONAL ? ", or null" : "");
  return 0;
}

// The optional `key` of `o` (`where` in messages): absent or null (*v NULL),
// or of the cJSON type `type` (*v the value).
static int json_optional(const char *path, const char *where, const cJSON *o, const char *key,
                         int type, const char *type_name, const cJSON **v) {
  *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!*v || cJSON_IsNull(*v)) {
    *v = NULL;
    return 0;
  }
  if (((*v)->type & 0xFF) == type) return 0;
  return ng_fail("%s: %s%s%s is not %s or null, which tokenizers refuses", path, where,
                 where[0] ? "." : "", key, type_name);
}

// The ByteLevel pre-tokenizer, post-processor or decoder, as Qwen3 has them:
// no prefix space, and in the pre-tokenizer no regex of its own (offsets
// trimming changes no ids; the other two change none with use_regex).
static int check_byte_level(const char *path, const cJSON *o, const char *where, bool pre) {
  if (!has_type(o, "ByteLevel")) {
    char what[96];
    snprintf(what, sizeof what, "%s type", where);
    return unsupported(path, what, type_of(o));
  }
  bool prefix, trim, regex;
  if (json_flag(path, where, o, "add_prefix_space", FLAG_REQUIRED, &prefix) != 0 ||
      json_flag(path, where, o, "trim_offsets", FLAG_REQUIRED, &trim) != 0 ||
      json_flag(path, where, o, "use_regex", FLAG_DEFAULT_TRUE, &regex) != 0)
    return -1;
  char what[96];
  snprintf(what, sizeof what, "%s ByteLevel with", where);
  if (prefix) return unsupported(path, what, "add_prefix_space");
  if (pre && regex) return unsupported(path, what, "use_regex (true when absent)");
  return 0;
}

// An absent/null part, or a ByteLevel one.
static int check_optional_byte_level(const char *path, const cJSON *root, const char *key) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
  return !o || cJSON_IsNull(o) ? 0 : check_byte_level(path, o, key, false);
}

static int check_normalizer(ng_tokenizer *t, const char *path, const cJSON *root) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (!o || cJSON_IsNull(o)) return 0;
  if (!has_type(o, "NFC")) return unsupported(path, "normalizer", type_of(o));
  t->nfc = true;
  return 0;
}

// ---------------------------------------------------------------------------
// The regex. `tokenizers` compiles it with Oniguruma (its default syntax, a
// recent Unicode), normgrow with PCRE2 10.42 (Unicode 14.0, UTF and Unicode
// properties). The pattern is read construct by construct, and only those
// that mean the same to both, or are rewritten here so that they do, go on
// to PCRE2; anything else is refused by name:
//   - literals and escaped ASCII punctuation, ., \t \n \r \f \a \e, \xHH and
//     \x{H...}; \uHHHH as \x{HHHH}, and \v (to Oniguruma the vertical tab
//     alone) as \x{B};
//   - \p{L} and \p{N}, widened by the letters and digits assigned since
//     Unicode 14.0 (regex_unicode.h), and outside classes \P{L} \p{^L} (and
//     N) as the class of the rest (to Oniguruma \pL is "pL": refused);
//   - \s as the Unicode White_Space list (PCRE2's \s also holds U+180E, out
//     of White_Space since Unicode 6.3), and outside classes \S;
//   - \h (to Oniguruma a hexadecimal digit) as 0-9a-fA-F, and outside
//     classes \H;
//   - classes [...] and [^...] of these and ranges (not nested, no && or
//     POSIX names, no ']' first);
//   - ( (?: (?= (?! (?<= (?<! ) and |, and the quantifiers ? * + {n} {n,}
//     {n,m}, greedy or lazy (not possessive);
//   - (?i: ... ) holding only ASCII literals, (?: ) and |, with no "ss",
//     "st", "ff", "fi" or "fl": Oniguruma's case folding matches ß, ﬆ, ﬀ, ﬁ
//     and ﬂ to those, PCRE2's does not.

#define WHITE_SPACE "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define HEX_DIGITS "0-9a-fA-F"
#define MAX_GROUPS 64  // groups open at once

typedef struct {
  char *s;
  size_t n, cap;
} text_buf;

static void put(text_buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = 2 * (b->n + n + 1);
    b->s = ng_xrealloc(b->s, b->cap);
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void put_str(text_buf *b, const char *s) { put(b, s, strlen(s)); }

// "\p{L}" or "\p{N}" and the ranges of regex_unicode.h, as class items.
static char *property_items(char prop) {
  const uint32_t(*r)[2] = prop == 'L' ? regex_new_letters : regex_new_digits;
  size_t n = prop == 'L' ? sizeof regex_new_letters / sizeof *r : sizeof regex_new_digits / sizeof *r;
  text_buf b = {0};
  put_str(&b, prop == 'L' ? "\\p{L}" : "\\p{N}");
  char item[48];
  for (size_t i = 0; i < n; i++)
    put(&b, item, (size_t)snprintf(item, sizeof item, "\\x{%X}-\\x{%X}", r[i][0], r[i][1]));
  return b.s;
}

typedef struct {
  const char *path, *pat, *p;  // the pattern, and its next character
  text_buf out;
  char *letters, *digits;  // property_items
  bool in_class;
  int depth, caseless;  // groups open; the depth of the (?i: group, 0 outside one
  char last;            // in (?i:, the ASCII letter just before (lowercase), else 0
} regex_reader;

static int untranslated(const regex_reader *r, size_t n, const char *why) {
  return ng_fail("%s: pre_tokenizer Split regex: \"%.*s\" at offset %zu: %s", r->path, (int)n,
                 r->p, (size_t)(r->p - r->pat), why);
}

static int take(regex_reader *r, size_t n) {
  put(&r->out, r->p, n);
  r->p += n;
  return 0;
}

// Class items, or outside a class the class of them ("[^" when negated).
static int take_items(regex_reader *r, size_t n, const char *items, bool negated) {
  if (r->in_class && negated) return untranslated(r, n, "not translated inside a class");
  if (!r->in_class) put_str(&r->out, negated ? "[^" : "[");
  put_str(&r->out, items);
  if (!r->in_class) put_str(&r->out, "]");
  r->p += n;
  return 0;
}

static size_t hex_run(const char *s, size_t max) {
  size_t k = 0;
  while (k < max && s[k] && strchr("0123456789abcdefABCDEF", s[k])) k++;
  return k;
}

// \p{L} \P{L} \p{^L}, and N: the length of the escape, its letter and whether
// it is negated; 0 if it is none of these. (To Oniguruma \pL is "pL".)
static size_t letter_or_digit(const char *p, char *prop, bool *negated) {
  static const char *const forms[] = {"\\p{?}", "\\P{?}", "\\p{^?}"};
  for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
    size_t n = strlen(forms[f]), q = (size_t)(strchr(forms[f], '?') - forms[f]);
    if (strncmp(p, forms[f], q) != 0 || (p[q] != 'L' && p[q] != 'N') ||
        strncmp(p + q + 1, forms[f] + q + 1, n - q - 1) != 0)
      continue;
    *prop = p[q];
    *negated = f > 0;
    return n;
  }
  return 0;
}

static int take_escape(regex_reader *r) {
  const char *p = r->p;
  char prop, item[16];
  bool negated;
  size_t n = letter_or_digit(p, &prop, &negated);
  if (n > 0) return take_items(r, n, prop == 'L' ? r->letters : r->digits, negated);
  if (p[1] == 's' || p[1] == 'S') return take_items(r, 2, WHITE_SPACE, p[1] == 'S');
  if (p[1] == 'h' || p[1] == 'H') return take_items(r, 2, HEX_DIGITS, p[1] == 'H');
  if (p[1] && strchr("tnrfae", p[1])) return take(r, 2);
  if (p[1] == 'v') {
    put_str(&r->out, "\\x{B}");
    r->p += 2;
    return 0;
  }
  if (p[1] == 'x' && p[2] == '{' && hex_run(p + 3, 8) > 0 && p[3 + hex_run(p + 3, 8)] == '}')
    return take(r, 4 + hex_run(p + 3, 8));
  if (p[1] == 'x' && hex_run(p + 2, 2) > 0) return take(r, 2 + hex_run(p + 2, 2));
  if (p[1] == 'u' && hex_run(p + 2, 4) == 4) {
    put(&r->out, item, (size_t)snprintf(item, sizeof item, "\\x{%.4s}", p + 2));
    r->p += 6;
    return 0;
  }
  if (p[1] > 0x20 && p[1] < 0x7f && !isalnum((unsigned char)p[1])) return take(r, 2);
  return untranslated(r, p[1] ? 2 : 1, "not translated from Oniguruma to PCRE2");
}

static int open_group(regex_reader *r) {
  static const char *const kinds[] = {"(?:", "(?=", "(?!", "(?<=", "(?<!", "(?i:", "("};
  if (r->depth == MAX_GROUPS) return untranslated(r, 1, "groups nested too deep");
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    size_t n = strlen(kinds[k]);
    if (strncmp(r->p, kinds[k], n) != 0 || (n == 1 && r->p[1] == '?')) continue;
    if (r->caseless && k != 0)
      return untranslated(r, n, "inside (?i: only literals, (?: and | are translated");
    r->depth++;
    if (strcmp(kinds[k], "(?i:") == 0) r->caseless = r->depth;
    return take(r, n);
  }
  return untranslated(r, 3, "a group kind not translated from Oniguruma to PCRE2");
}

// A quantifier: ? * + or {n} {n,} {n,m}, then ? for lazy; not possessive.
static int take_quantifier(regex_reader *r) {
  size_t n = 1;
  if (r->p[0] == '{') {
    size_t lo = strspn(r->p + 1, "0123456789"), hi = 0;
    if (lo > 0 && r->p[1 + lo] == ',') hi = 1 + strspn(r->p + 2 + lo, "0123456789");
    if (lo == 0 || r->p[1 + lo + hi] != '}')
      return untranslated(r, 1, "a { that is no {n}, {n,} or {n,m} (write \\{ for the character)");
    n = 2 + lo + hi;
  }
  if (r->caseless) return untranslated(r, n, "inside (?i: only literals, (?: and | are translated");
  if (r->p[n] == '+') return untranslated(r, n + 1, "possessive (Oniguruma reads {n,m}+ otherwise)");
  return take(r, n + (r->p[n] == '?'));
}

// A literal character (its UTF-8 bytes).
static int take_literal(regex_reader *r) {
  unsigned char c = (unsigned char)r->p[0];
  size_t bad, n = utf8_seq((const uint8_t *)r->p, strlen(r->p), &bad);
  if (n == 0) return untranslated(r, bad, "not valid UTF-8");
  if (r->caseless && c >= 0x80)
    return untranslated(r, n, "inside (?i: only ASCII characters are translated");
  if (r->caseless) {
    static const char *const folded[] = {"ss", "st", "ff", "fi", "fl"};
    char l = isalpha(c) ? (char)tolower(c) : 0;
    for (size_t k = 0; l && r->last && k < sizeof folded / sizeof *folded; k++)
      if (folded[k][0] == r->last && folded[k][1] == l)
        return untranslated(r, 1, "Oniguruma's case folding matches these two to one character too");
    r->last = l;
  }
  return take(r, n);
}

static int take_in_class(regex_reader *r) {
  if (r->p[0] == '[' || (r->p[0] == '&' && r->p[1] == '&'))
    return untranslated(r, r->p[0] == '[' ? 1 : 2, "nested classes, && and POSIX names are not translated");
  if (r->p[0] == ']') r->in_class = false;
  return r->p[0] == '\\' ? take_escape(r) : take_literal(r);
}

static int take_next(regex_reader *r) {
  char c = r->p[0];
  if (r->in_class) return take_in_class(r);
  if (c == '\\') {
    if (r->caseless && !(r->p[1] > 0x20 && r->p[1] < 0x7f && !isalnum((unsigned char)r->p[1])))
      return untranslated(r, 2, "inside (?i: only literals, (?: and | are translated");
    r->last = 0;
    return take_escape(r);
  }
  if (c == '[') {
    if (r->caseless) return untranslated(r, 1, "inside (?i: only literals, (?: and | are translated");
    size_t n = 1 + (r->p[1] == '^');
    if (r->p[n] == ']') return untranslated(r, n + 1, "a class with ']' first");
    r->in_class = true;
    return take(r, n);
  }
  if (c == '(') return open_group(r);
  if (c == ')') {
    if (r->depth == r->caseless) r->caseless = 0;
    r->depth -= r->depth > 0;
    return take(r, 1);
  }
  if (c == '|') {
    r->last = 0;
    return take(r, 1);
  }
  if (c == '?' || c == '*' || c == '+' || c == '{') return take_quantifier(r);
  if (c == '^' || c == '$')
    return untranslated(r, 1, "Oniguruma's ^ and $ match at every line; not translated");
  if (c == '.' && r->caseless)
    return untranslated(r, 1, "inside (?i: only literals, (?: and | are translated");
  return take_literal(r);
}

// The file's pattern as a PCRE2 pattern into *out (malloc'd), or a refusal.
static int translate_regex(const char *path, const char *pat, char **out) {
  regex_reader r = {.path = path, .pat = pat, .p = pat};
  r.letters = property_items('L');
  r.digits = property_items('N');
  put(&r.out, "", 0);
  int rc = 0;
  while (rc == 0 && *r.p) rc = take_next(&r);
  free(r.letters);
  free(r.digits);
  if (rc != 0) {
    free(r.out.s);
    return -1;
  }
  *out = r.out.s;
  return 0;
}

static int compile_regex(ng_tokenizer *t, const char *path, const char *file_pattern) {
  char *pattern;
  if (translate_regex(path, file_pattern, &pattern) != 0) return -1;
  int err;
  PCRE2_SIZE at;
  pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
  NG_ASSERT(cc && pcre2_set_newline(cc, PCRE2_NEWLINE_LF) == 0);  // Oniguruma's . stops at \n
  t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                        &at, cc);
  pcre2_compile_context_free(cc);
  free(pattern);
  if (!t->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return ng_fail("%s: pre_tokenizer Split regex: %s (PCRE2, at offset %zu of the pattern as "
                   "translated)", path, (char *)msg, (size_t)at);
  }
  // Without JIT, pcre2_match interprets.
  pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
  uint32_t chars = 0;
  pcre2_pattern_info(t->re, PCRE2_INFO_MAXLOOKBEHIND, &chars);
  t->lookbehind = 4 * ((size_t)chars + 1);
  return 0;
}

// Sequence [Split(Regex, Isolated), ByteLevel].
static int check_pre_tokenizer(ng_tokenizer *t, const char *path, const cJSON *root) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  if (!o || cJSON_IsNull(o)) return unsupported(path, "no pre_tokenizer", NULL);
  if (!has_type(o, "Sequence")) return unsupported(path, "pre_tokenizer type", type_of(o));
  const cJSON *seq = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers");
  if (cJSON_GetArraySize(seq) != 2 || !cJSON_IsArray(seq))
    return unsupported(path, "a pre_tokenizer Sequence other than [Split, ByteLevel]", NULL);
  const cJSON *split = cJSON_GetArrayItem(seq, 0);
  if (!has_type(split, "Split")) return unsupported(path, "pre_tokenizer", type_of(split));
  const char *behavior = json_str(split, "behavior");
  if (!behavior || strcmp(behavior, "Isolated") != 0)
    return unsupported(path, "Split behavior", behavior ? behavior : "(none)");
  bool invert;
  if (json_flag(path, "pre_tokenizer.pretokenizers[0]", split, "invert", FLAG_REQUIRED, &invert))
    return -1;
  if (invert) return unsupported(path, "Split with invert", NULL);
  const char *regex = json_str(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
  if (!regex) return unsupported(path, "a Split pattern that is not a Regex", NULL);
  if (check_byte_level(path, cJSON_GetArrayItem(seq, 1), "pre_tokenizer.pretokenizers[1]", true))
    return -1;
  return compile_regex(t, path, regex);
}

static int check_model_features(const char *path, const cJSON *m) {
  if (!has_type(m, "BPE")) return unsupported(path, "model type", type_of(m));
  const cJSON *dropout, *unk, *prefix, *suffix;
  bool fuse_unk, fallback, ignore_merges;
  if (json_optional(path, "model", m, "dropout", cJSON_Number, "a number", &dropout) ||
      json_optional(path, "model", m, "unk_token", cJSON_String, "a string", &unk) ||
      json_optional(path, "model", m, "continuing_subword_prefix", cJSON_String, "a string",
                    &prefix) ||
      json_optional(path, "model", m, "end_of_word_suffix", cJSON_String, "a string", &suffix) ||
      json_flag(path, "model", m, "fuse_unk", FLAG_OPTIONAL, &fuse_unk) ||
      json_flag(path, "model", m, "byte_fallback", FLAG_OPTIONAL, &fallback) ||
      json_flag(path, "model", m, "ignore_merges", FLAG_OPTIONAL, &ignore_merges))
    return -1;
  if (dropout) return unsupported(path, "BPE dropout", NULL);
  if (unk) return unsupported(path, "BPE unk_token", NULL);  // fuse_unk then changes nothing
  if (fallback) return unsupported(path, "BPE byte_fallback", NULL);
  if (ignore_merges) return unsupported(path, "BPE ignore_merges", NULL);
  if (prefix && prefix->valuestring[0])
    return unsupported(path, "BPE continuing_subword_prefix", NULL);
  if (suffix && suffix->valuestring[0]) return unsupported(path, "BPE end_of_word_suffix", NULL);
  return 0;
}

// The keys at the top are those tokenizers knows (it refuses a file with any
// other), "version" is "1.0", truncation and padding are off.
static int check_top(const char *path, const cJSON *root) {
  static const char *const known[] = {"version",        "truncation",    "padding",
                                      "added_tokens",   "normalizer",    "pre_tokenizer",
                                      "post_processor", "decoder",       "model"};
  for (const cJSON *e = root->child; e; e = e->next) {
    size_t k = 0;
    while (k < sizeof known / sizeof *known && strcmp(e->string, known[k]) != 0) k++;
    if (k == sizeof known / sizeof *known)
      return ng_fail("%s: key \"%s\" at the top, which tokenizers refuses", path, e->string);
  }
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version"), *truncation, *padding;
  if (version && !(cJSON_IsString(version) && strcmp(version->valuestring, "1.0") == 0))
    return ng_fail("%s: version is not \"1.0\", which tokenizers refuses", path);
  if (json_optional(path, "", root, "truncation", cJSON_Object, "an object", &truncation) ||
      json_optional(path, "", root, "padding", cJSON_Object, "an object", &padding))
    return -1;
  if (truncation) return unsupported(path, "truncation", NULL);
  if (padding) return unsupported(path, "padding", NULL);
  return 0;
}

static int check_features(ng_tokenizer *t, const char *path, const cJSON *root) {
  if (check_top(path, root) != 0) return -1;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(model)) return ng_fail("%s: no \"model\" object", path);
  return check_normalizer(t, path, root) || check_pre_tokenizer(t, path, root) ||
                 check_optional_byte_level(path, root, "post_processor") ||
                 check_optional_byte_level(path, root, "decoder") ||
                 check_model_features(path, model)
             ? -1
             : 0;
}

// ---------------------------------------------------------------------------
// Loading: vocabulary, added tokens, merges

static int json_id(const char *path, const char *where, const cJSON *v, uint32_t *id) {
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= MAX_ID ||
      v->valuedouble != (double)(uint32_t)v->valuedouble)
    return ng_fail("%s: %s: id is not an integer in 0..%u", path, where, MAX_ID - 1);
  *id = (uint32_t)v->valuedouble;
  return 0;
}

// One past the largest id of model.vocab.
static int count_ids(const char *path, const cJSON *vocab, uint32_t *n) {
  *n = 0;
  char where[64];
  for (const cJSON *e = vocab->child; e; e = e->next) {
    uint32_t id = 0;
    snprintf(where, sizeof where, "model.vocab \"%.32s\"", e->string);
    if (json_id(path, where, e, &id) != 0) return -1;
    if (id + 1 > *n) *n = id + 1;
  }
  if (*n == 0) return ng_fail("%s: model.vocab is empty", path);
  return 0;
}

static int read_vocab(ng_tokenizer *t, const char *path, const cJSON *vocab) {
  int16_t byte_of[BYTE_CHARS];
  byte_alphabet(byte_of);
  size_t n = (size_t)cJSON_GetArraySize(vocab);
  t->vocab_mask = table_size(n) - 1;
  t->vocab_slots = ng_xcalloc(t->vocab_mask + 1, sizeof *t->vocab_slots);
  for (const cJSON *e = vocab->child; e; e = e->next) {
    uint32_t id = (uint32_t)e->valuedouble;  // checked by count_ids
    if (t->tok[id].len != NO_TOKEN)
      return ng_fail("%s: model.vocab: id %u is given to two tokens", path, id);
    if (!pool_add_byte_level(t, byte_of, e->string, &t->tok[id]))
      return unsupported(path, "a vocabulary outside the byte-level alphabet: token",
                         e->string);
    span sp = t->tok[id];  // the keys differ (check_keys), so do their bytes
    size_t i = hash_bytes(t->pool + sp.off, sp.len) & t->vocab_mask;
    while (t->vocab_slots[i]) i = (i + 1) & t->vocab_mask;
    t->vocab_slots[i] = id + 1;
  }
  for (int b = 0; b < 256; b++) {
    uint8_t byte = (uint8_t)b;
    t->byte_id[b] = vocab_find(t, &byte, 1);
    if (t->byte_id[b] == NO_TOKEN)
      return unsupported(path, "a vocabulary without all 256 bytes (unknown tokens)", NULL);
  }
  return 0;
}

// The id of the added token with `content`, NO_TOKEN if there is none yet.
static uint32_t added_before(const ng_tokenizer *t, const char *content) {
  size_t len = strlen(content);
  for (int a = 0; a < t->n_added; a++) {
    span c = t->added[a].content;
    if (c.len == len && memcmp(t->pool + c.off, content, len) == 0) return t->added[a].id;
  }
  return NO_TOKEN;
}

// The model.vocab token whose key is `content`, NO_TOKEN if none.
static uint32_t vocab_key(ng_tokenizer *t, const int16_t *byte_of, const char *content) {
  size_t mark = t->pool_len;
  span sp;
  uint32_t id = pool_add_byte_level(t, byte_of, content, &sp) ? vocab_find(t, t->pool + sp.off, sp.len)
                                                               : NO_TOKEN;
  t->pool_len = mark;  // scratch only
  return id;
}

// The id tokenizers gives a new added token: the number of model.vocab's
// entries, or one past the largest added id when that is as large.
static uint32_t next_added_id(const ng_tokenizer *t, uint32_t n_vocab) {
  uint32_t next = n_vocab;
  for (int a = 0; a < t->n_added; a++)
    if (t->added[a].id >= next) next = t->added[a].id + 1;
  return next;
}

// The flags of added token e (`where`): true or false, each of them; the
// four that change matching false.
static int check_added_flags(const char *path, const char *where, const cJSON *e) {
  static const char *const flags[] = {"single_word", "lstrip", "rstrip", "normalized", "special"};
  for (size_t f = 0; f < sizeof flags / sizeof *flags; f++) {
    bool on;
    if (json_flag(path, where, e, flags[f], FLAG_REQUIRED, &on) != 0) return -1;
    char what[80];
    snprintf(what, sizeof what, "%s with", where);
    if (on && strcmp(flags[f], "special") != 0) return unsupported(path, what, flags[f]);
  }
  return 0;
}

// Added tokens match their content as written, never stripped or normalized.
// Each gets the id tokenizers gives it, in the file's order (its "id" in the
// file only draws a warning from tokenizers where it differs): the id of the
// added token or model.vocab token with that content, else next_added_id.
static int read_added(ng_tokenizer *t, const char *path, const cJSON *added, uint32_t n_vocab) {
  int16_t byte_of[BYTE_CHARS];
  byte_alphabet(byte_of);
  int n = added ? cJSON_GetArraySize(added) : 0, i = 0;
  t->added = ng_xcalloc((size_t)n + 1, sizeof *t->added);
  for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
    char where[64];
    snprintf(where, sizeof where, "added_tokens[%d]", i);
    uint32_t file_id;
    if (check_added_flags(path, where, e) != 0 ||
        json_id(path, where, cJSON_GetObjectItemCaseSensitive(e, "id"), &file_id) != 0)
      return -1;
    const char *content = json_str(e, "content");
    if (!content || !content[0]) return ng_fail("%s: %s: no content", path, where);
    if (added_before(t, content) != NO_TOKEN) continue;
    size_t len = strlen(content);
    span sp = {(uint32_t)t->pool_len, (uint32_t)len};
    uint32_t id = vocab_key(t, byte_of, content);
    if (id == NO_TOKEN) {
      id = next_added_id(t, n_vocab);
      if (id >= MAX_ID) return ng_fail("%s: %s: id %u past %u", path, where, id, MAX_ID - 1);
      if (id >= t->vocab_size) {
        t->tok = ng_xrealloc(t->tok, ((size_t)id + 1) * sizeof *t->tok);
        for (uint32_t k = t->vocab_size; k <= id; k++) t->tok[k] = (span){0, NO_TOKEN};
        t->vocab_size = id + 1;
      }
      if (t->tok[id].len != NO_TOKEN)
        return ng_fail("%s: %s: tokenizers numbers it %u, which model.vocab gives another token",
                       path, where, id);
      t->tok[id] = sp;
    }
    if (t->pool_len + len > t->pool_cap) {
      t->pool_cap = 2 * (t->pool_len + len);
      t->pool = ng_xrealloc(t->pool, t->pool_cap);
    }
    memcpy(t->pool + t->pool_len, content, len);
    t->pool_len += len;
    t->added[t->n_added++] = (added_token){sp, id};
    t->added_first[(uint8_t)content[0]] = true;
  }
  return 0;
}

// The token named by one side of a merge, in byte-level characters.
static int merge_side(ng_tokenizer *t, const char *path, int rank, const char *s, size_t n,
                      const int16_t *byte_of, uint32_t *id) {
  char *str = ng_xmalloc(n + 1);
  memcpy(str, s, n);
  str[n] = 0;
  size_t mark = t->pool_len;
  span sp;
  bool ok = pool_add_byte_level(t, byte_of, str, &sp);
  *id = ok ? vocab_find(t, t->pool + sp.off, sp.len) : NO_TOKEN;
  t->pool_len = mark;  // scratch only
  int rc = *id == NO_TOKEN
               ? ng_fail("%s: model.merges[%d]: \"%s\" is not in model.vocab", path, rank, str)
               : 0;
  free(str);
  return rc;
}

// A merge is "a b" (one space) or ["a", "b"].
static int merge_parts(const char *path, int rank, const cJSON *e, const char **a, size_t *na,
                       const char **b, size_t *nb) {
  if (cJSON_IsString(e)) {
    const char *sp = strchr(e->valuestring, ' ');
    if (sp && !strchr(sp + 1, ' ')) {
      *a = e->valuestring;
      *na = (size_t)(sp - *a);
      *b = sp + 1;
      *nb = strlen(*b);
      return 0;
    }
  } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
             cJSON_IsString(cJSON_GetArrayItem(e, 0)) && cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
    *a = cJSON_GetArrayItem(e, 0)->valuestring;
    *b = cJSON_GetArrayItem(e, 1)->valuestring;
    *na = strlen(*a);
    *nb = strlen(*b);
    return 0;
  }
  return ng_fail("%s: model.merges[%d]: not \"a b\" or [\"a\", \"b\"]", path, rank);
}

// A later merge of the same pair replaces an earlier one, as in `tokenizers`.
static void pair_insert(ng_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t id) {
  uint64_t key = (uint64_t)a << 32 | b;
  size_t i = hash_pair(key) & t->pair_mask;
  while (t->pairs[i].key != EMPTY_PAIR && t->pairs[i].key != key) i = (i + 1) & t->pair_mask;
  t->pairs[i] = (pair_slot){key, rank, id};
}

// The line of the file on which model.merges[rank] starts, 0 if not found: a
// scan from the "merges" key that counts the array's elements (strings or
// arrays of strings).
static size_t merge_line(const char *text, int rank) {
  const char *p = text;
  for (;;) {  // "merges" : [
    const char *key = strstr(p, "\"merges\"");
    if (!key) return 0;
    p = key + 8;
    p += strspn(p, " \t\r\n");
    if (*p != ':') continue;
    p += 1 + strspn(p + 1, " \t\r\n");
    if (*p == '[') break;
  }
  int element = -1, depth = 0;
  bool in_string = false;
  for (p++; *p; p++) {
    if (in_string) {
      if (*p == '\\' && p[1]) p++;
      else if (*p == '"') in_string = false;
      continue;
    }
    if (depth == 0 && (*p == '"' || *p == '[') && ++element == rank) {
      size_t line = 1;
      for (const char *q = text; q < p; q++) line += *q == '\n';
      return line;
    }
    if (*p == '"') in_string = true;
    else if (*p == '[') depth++;
    else if (*p == ']' && depth-- == 0) return 0;
  }
  return 0;
}

// Puts the line of the failing merge after the path in the message.
static int merge_fail(const char *path, const char *text, int rank) {
  size_t line = merge_line(text, rank), skip = strlen(path) + 2;
  if (line == 0 || strlen(ng_error()) < skip) return -1;
  char msg[768];
  snprintf(msg, sizeof msg, "%s", ng_error() + skip);
  return ng_fail("%s: line %zu: %s", path, line, msg);
}

static int read_merges(ng_tokenizer *t, const char *path, const char *text, const cJSON *merges) {
  int16_t byte_of[BYTE_CHARS];
  byte_alphabet(byte_of);
  size_t n = (size_t)cJSON_GetArraySize(merges);
  t->pair_mask = table_size(2 * n) - 1;
  t->pairs = ng_xmalloc((t->pair_mask + 1) * sizeof *t->pairs);
  for (size_t i = 0; i <= t->pair_mask; i++) t->pairs[i].key = EMPTY_PAIR;
  uint8_t *joined = NULL;
  int rank = 0, rc = 0;
  bool strings = cJSON_IsString(merges->child);  // tokenizers takes one form or the other
  for (const cJSON *e = merges->child; e; e = e->next, rank++) {
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    uint32_t ia, ib;
    if (cJSON_IsString(e) != strings) {
      rc = ng_fail("%s: model.merges[%d]: \"a b\" strings and [\"a\", \"b\"] pairs mixed, which "
                   "tokenizers refuses", path, rank);
      break;
    }
    rc = merge_parts(path, rank, e, &a, &na, &b, &nb) ||
                 merge_side(t, path, rank, a, na, byte_of, &ia) ||
                 merge_side(t, path, rank, b, nb, byte_of, &ib)
             ? -1
             : 0;
    if (rc != 0) break;
    span sa = t->tok[ia], sb = t->tok[ib];
    joined = ng_xrealloc(joined, (size_t)sa.len + sb.len);
    memcpy(joined, t->pool + sa.off, sa.len);
    memcpy(joined + sa.len, t->pool + sb.off, sb.len);
    uint32_t id = vocab_find(t, joined, (size_t)sa.len + sb.len);
    if (id == NO_TOKEN) {
      rc = ng_fail("%s: model.merges[%d]: the merged token is not in model.vocab", path, rank);
      break;
    }
    pair_insert(t, ia, ib, (uint32_t)rank, id);
  }
  free(joined);
  return rc == 0 ? 0 : merge_fail(path, text, rank);
}

static int read_tokens(ng_tokenizer *t, const char *path, const char *text, const cJSON *root) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (!cJSON_IsObject(vocab)) return ng_fail("%s: model.vocab is not an object", path);
  if (!cJSON_IsArray(merges)) return ng_fail("%s: model.merges is not an array", path);
  if (added && !cJSON_IsArray(added))
    return ng_fail("%s: added_tokens is not an array, which tokenizers refuses", path);
  if (count_ids(path, vocab, &t->vocab_size) != 0) return -1;
  t->tok = ng_xmalloc((size_t)t->vocab_size * sizeof *t->tok);
  for (uint32_t i = 0; i < t->vocab_size; i++) t->tok[i] = (span){0, NO_TOKEN};
  uint32_t n_vocab = (uint32_t)cJSON_GetArraySize(vocab);
  return read_vocab(t, path, vocab) || read_merges(t, path, text, merges) ||
                 read_added(t, path, added, n_vocab)
             ? -1
             : 0;
}

// ---------------------------------------------------------------------------
// Loading: the JSON text

static size_t line_of(const char *text, const char *at) {
  size_t line = 1;
  for (const char *p = text; p < at; p++) line += *p == '\n';
  return line;
}

// The length of the JSON number at p, and whether it has a fraction or an exponent.
static size_t number_at(const char *p, const char *end, bool *fraction) {
  size_t n = 0;
  *fraction = false;
  while (p + n < end && strchr("0123456789+-.eE", p[n]) && p[n]) {
    *fraction |= p[n] == '.' || p[n] == 'e' || p[n] == 'E';
    n++;
  }
  return n;
}

// What cJSON takes but tokenizers (serde_json) refuses, or normgrow's reader
// could not keep, in text[0..end) (the JSON value) and after it: UTF-8 that is
// not valid, a control character inside a string, a \u0000 escape (a string
// of cJSON ends there, so a key would be cut short), text after the value. A
// number with a fraction or an exponent is refused only later (*fraction_at,
// else NULL): tokenizers reads ids as integers, and cJSON reads 600.0 as 600.
static int check_json_text(const char *path, const char *text, const char *end, size_t len,
                           const char **fraction_at) {
  *fraction_at = NULL;
  bool in_string = false;
  for (const char *p = text; p < text + len;) {
    size_t bad, k = utf8_seq((const uint8_t *)p, (size_t)(text + len - p), &bad);
    unsigned char c = (unsigned char)*p;
    if (k == 0) return ng_fail("%s: line %zu: not valid UTF-8, which tokenizers refuses", path, line_of(text, p));
    if (p >= end && !strchr(" \t\r\n", c))
      return ng_fail("%s: line %zu: text after the JSON object, which tokenizers refuses", path,
                     line_of(text, p));
    bool fraction;
    if (in_string && c < 0x20)
      return ng_fail("%s: line %zu: a control character inside a string, which tokenizers refuses",
                     path, line_of(text, p));
    if (in_string && c == '\\' && end - p > 5 && memcmp(p + 1, "u0000", 5) == 0)
      return ng_fail("%s: line %zu: a string holding \\u0000, which normgrow's reader cannot keep",
                     path, line_of(text, p));
    if (in_string && c == '\\') k = 2;  // the escaped character
    else if (c == '"') in_string = !in_string;
    else if (!in_string && (c == '-' || (c >= '0' && c <= '9'))) {
      k = number_at(p, end, &fraction);
      if (fraction && !*fraction_at) *fraction_at = p;
    }
    p += k;
  }
  return 0;
}

static int by_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// No object holds a key twice (cJSON reads the first, tokenizers the last, or refuses).
static int check_keys(const char *path, const cJSON *node) {
  for (const cJSON *c = node->child; c; c = c->next)
    if (check_keys(path, c) != 0) return -1;
  if (!cJSON_IsObject(node) || !node->child) return 0;
  size_t n = (size_t)cJSON_GetArraySize(node), i = 0;
  const char **keys = ng_xmalloc(n * sizeof *keys);
  for (const cJSON *c = node->child; c; c = c->next) keys[i++] = c->string;
  qsort(keys, n, sizeof *keys, by_key);
  int rc = 0;
  for (i = 1; i < n && rc == 0; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0)
      rc = ng_fail("%s: key \"%s\" twice in one object", path, keys[i]);
  free(keys);
  return rc;
}

// The file's JSON, checked as tokenizers would read it; the first number
// with a fraction or an exponent into *fraction_at (else NULL).
static cJSON *parse_json(const char *path, const char *text, size_t len, const char **fraction_at) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!root) {
    ng_fail("%s: line %zu: not valid JSON (truncated or malformed)", path,
            line_of(text, end && end < text + len ? end : text + len));
    return NULL;
  }
  if (check_json_text(path, text, end, len, fraction_at) != 0 || check_keys(path, root) != 0) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

int ng_tokenizer_load(const char *path, ng_tokenizer **out) {
  *out = NULL;
  struct stat st;
  char *file = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? ng_path_join(path, "tokenizer.json")
                                                          : ng_xstrdup(path);
  char *text = NULL;
  size_t len;
  cJSON *root = NULL;
  ng_tokenizer *t = ng_xcalloc(1, sizeof *t);
  // A FIFO or a device would block the read, or never end.
  int rc = stat(file, &st) == 0 && !S_ISREG(st.st_mode)
               ? ng_fail("%s: not a regular file", file)
               : ng_read_file(file, MAX_JSON_BYTES, &text, &len);
  const char *fraction_at = NULL;
  if (rc == 0 && !(root = parse_json(file, text, len, &fraction_at))) rc = -1;
  if (rc == 0 && !cJSON_IsObject(root)) rc = ng_fail("%s: not a JSON object", file);
  if (rc == 0) rc = check_features(t, file, root);
  if (rc == 0 && fraction_at)
    rc = ng_fail("%s: line %zu: a number with a fraction or an exponent, where tokenizers reads "
                 "an integer id", file, line_of(text, fraction_at));
  if (rc == 0) rc = read_tokens(t, file, text, root);
  cJSON_Delete(root);
  free(text);
  free(file);
  if (rc != 0) {
    ng_tokenizer_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

void ng_tokenizer_free(ng_tokenizer *t) {
  if (!t) return;
  pcre2_code_free(t->re);
  free(t->pool);
  free(t->tok);
  free(t->vocab_slots);
  free(t->pairs);
  free(t->added);
  free(t);
}

uint32_t ng_tokenizer_vocab_size(const ng_tokenizer *t) { return t->vocab_size; }

int ng_tokenizer_added_id(const ng_tokenizer *t, const char *content, uint32_t *id) {
  size_t n = strlen(content);
  for (int i = 0; i < t->n_added; i++) {
    span c = t->added[i].content;
    if (c.len == n && memcmp(t->pool + c.off, content, n) == 0) {
      *id = t->added[i].id;
      return 0;
    }
  }
  return ng_fail("the tokenizer has no added token \"%s\"", content);
}

// ---------------------------------------------------------------------------
// Encoding state

ng_tok_state *ng_tok_state_create(const ng_tokenizer *t) {
  ng_tok_state *s = ng_xcalloc(1, sizeof *s);
  s->t = t;
  s->md = pcre2_match_data_create_from_pattern(t->re, NULL);
  s->mctx = pcre2_match_context_create(NULL);
  s->jit = pcre2_jit_stack_create(32 << 10, JIT_STACK_MAX, NULL);
  NG_ASSERT(s->md && s->mctx && s->jit);
  pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
  s->cache = ng_xcalloc(CACHE_SLOTS, sizeof *s->cache);
  s->piece = PIECE;
  return s;
}

void ng_tok_state_set_piece(ng_tok_state *s, size_t bytes) { s->piece = bytes > 0 ? bytes : 1; }

void ng_tok_state_free(ng_tok_state *s) {
  if (!s) return;
  pcre2_match_data_free(s->md);
  pcre2_match_context_free(s->mctx);
  pcre2_jit_stack_free(s->jit);
  free(s->fix);
  free(s->norm);
  free(s->sym);
  free(s->rank);
  free(s->tree);
  free(s->cache);
  free(s);
}

static void ids_reserve(ng_ids *o, size_t more) {
  NG_ASSERT(more < SIZE_MAX / 8 - o->n);
  if (o->n + more <= o->cap) return;
  o->cap = o->n + more > 2 * o->cap ? o->n + more : 2 * o->cap;
  o->ids = ng_xrealloc(o->ids, o->cap * sizeof *o->ids);
}

// ---------------------------------------------------------------------------
// BPE of one word
//
// A word of n bytes is a sequence of symbols, each a token over the bytes
// [i, i + its length). At a symbol's first byte i, sym[i] is its token and
// rank[i] the merge rank of it and the symbol after (NO_RANK if they have no
// merge, or i starts no symbol); at its last byte, if it is longer than one,
// sym holds COVERED | i, which finds the symbol before another in one step.
// The merge to do, the lowest rank and the leftmost among equals, is the root
// of a tournament tree over blocks of BLOCK bytes: each leaf the least
// rank << 32 | i of its block, each node the least of its two children.
// A merge changes three ranks: of the one merged away, of the merged symbol
// and of the one before it; a block is scanned again only when its least
// entry goes up. About 8.5 bytes a byte of the word.

#define COVERED ((uint32_t)1 << 31)
#define NO_RANK UINT32_MAX
#define NO_MERGE UINT64_MAX
#define BLOCK 64

static uint32_t pair_rank(const ng_tokenizer *t, uint32_t a, uint32_t b) {
  const pair_slot *p = pair_find(t, a, b);
  return p ? p->rank : NO_RANK;
}

static uint32_t token_len(const ng_tokenizer *t, uint32_t id) { return t->tok[id].len; }

// The first byte of the symbol before the one starting at i > 0.
static size_t symbol_before(const ng_tok_state *s, size_t i) {
  uint32_t last = s->sym[i - 1];
  return last & COVERED ? last & ~COVERED : i - 1;
}

// The least rank << 32 | i of block b, NO_MERGE if it has no merge.
static uint64_t block_least(const ng_tok_state *s, size_t n, size_t b) {
  uint64_t least = NO_MERGE;
  for (size_t i = b * BLOCK, end = i + BLOCK < n ? i + BLOCK : n; i < end; i++) {
    uint64_t key = (uint64_t)s->rank[i] << 32 | i;
    if (s->rank[i] != NO_RANK && key < least) least = key;
  }
  return least;
}

// The nodes above node k, up to the first that stays as it is.
static void tree_up(ng_tok_state *s, size_t k) {
  for (k /= 2; k >= 1; k /= 2) {
    uint64_t l = s->tree[2 * k], r = s->tree[2 * k + 1], least = l < r ? l : r;
    if (s->tree[k] == least) return;
    s->tree[k] = least;
  }
}

// Sets the rank of the pair at i, and the tree.
static void set_rank(ng_tok_state *s, size_t n, size_t i, uint32_t rank) {
  uint64_t old = (uint64_t)s->rank[i] << 32 | i, key = (uint64_t)rank << 32 | i;
  size_t k = s->leaves + i / BLOCK;
  s->rank[i] = rank;
  if (rank != NO_RANK && key < s->tree[k]) s->tree[k] = key;
  else if (s->tree[k] == old) s->tree[k] = block_least(s, n, i / BLOCK);
  else return;
  tree_up(s, k);
}

// Room for a word of n bytes (n <= MAX_WORD): its symbols, ranks and tree.
static void grow_word(ng_tok_state *s, size_t n) {
  size_t blocks = (n + BLOCK - 1) / BLOCK;
  for (s->leaves = 1; s->leaves < blocks;) s->leaves *= 2;
  if (n > s->word_cap) {
    s->word_cap = n;
    s->sym = ng_xrealloc(s->sym, n * sizeof *s->sym);
    s->rank = ng_xrealloc(s->rank, n * sizeof *s->rank);
  }
  if (2 * s->leaves > s->tree_cap) {
    s->tree_cap = 2 * s->leaves;
    s->tree = ng_xrealloc(s->tree, s->tree_cap * sizeof *s->tree);
  }
  for (size_t k = 0; k < 2 * s->leaves; k++) s->tree[k] = NO_MERGE;
}

// The symbols of w[0..n) after every merge, appended to out.
static void bpe_merge(ng_tok_state *s, const uint8_t *w, size_t n, ng_ids *out) {
  const ng_tokenizer *t = s->t;
  grow_word(s, n);
  for (size_t i = 0; i < n; i++) s->sym[i] = t->byte_id[w[i]];
  for (size_t i = 0; i < n; i++) s->rank[i] = i + 1 < n ? pair_rank(t, s->sym[i], s->sym[i + 1]) : NO_RANK;
  for (size_t b = 0; b * BLOCK < n; b++) s->tree[s->leaves + b] = block_least(s, n, b);
  for (size_t k = s->leaves - 1; k >= 1; k--)
    s->tree[k] = s->tree[2 * k] < s->tree[2 * k + 1] ? s->tree[2 * k] : s->tree[2 * k + 1];
  while (s->tree[1] != NO_MERGE) {
    size_t i = (uint32_t)s->tree[1], j = i + token_len(t, s->sym[i]);
    size_t end = j + token_len(t, s->sym[j]);
    s->sym[i] = pair_find(t, s->sym[i], s->sym[j])->id;
    s->sym[end - 1] = COVERED | (uint32_t)i;
    set_rank(s, n, j, NO_RANK);
    set_rank(s, n, i, end < n ? pair_rank(t, s->sym[i], s->sym[end]) : NO_RANK);
    if (i > 0) {
      size_t h = symbol_before(s, i);
      set_rank(s, n, h, pair_rank(t, s->sym[h], s->sym[i]));
    }
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i += token_len(t, s->sym[i])) m++;
  ids_reserve(out, m);
  for (size_t i = 0; i < n; i += token_len(t, s->sym[i])) out->ids[out->n++] = s->sym[i];
}

// A word's ids, from the cache when it is there.
static void encode_word(ng_tok_state *s, const uint8_t *w, size_t n, ng_ids *out) {
  if (n == 1) {
    ids_reserve(out, 1);
    out->ids[out->n++] = s->t->byte_id[w[0]];
    return;
  }
  cache_slot *c = n <= CACHE_WORD ? &s->cache[hash_bytes(w, n) & (CACHE_SLOTS - 1)] : NULL;
  if (c && c->len == n && memcmp(c->bytes, w, n) == 0) {
    ids_reserve(out, c->n_ids);
    memcpy(out->ids + out->n, c->ids, c->n_ids * sizeof *c->ids);
    out->n += c->n_ids;
    return;
  }
  size_t first = out->n;
  bpe_merge(s, w, n, out);
  size_t m = out->n - first;
  if (c && m <= CACHE_IDS) {
    c->len = (uint8_t)n;
    c->n_ids = (uint8_t)m;
    memcpy(c->bytes, w, n);
    memcpy(c->ids, out->ids + first, m * sizeof *c->ids);
  }
}

// ---------------------------------------------------------------------------
// Encoding text

static uint8_t *fix_reserve(ng_tok_state *s, size_t n) {
  if (n > s->fix_cap) {
    s->fix_cap = n > 2 * s->fix_cap ? n : 2 * s->fix_cap;
    s->fix = ng_xrealloc(s->fix, s->fix_cap);
  }
  return s->fix;
}

// Valid UTF-8 with U+FFFD for each maximal ill-formed subsequence. Returns
// the text itself when it is valid, else s->fix; *needs_nfc when some code
// point is U+0300 or above (every text below that is already NFC).
static const uint8_t *repair_utf8(ng_tok_state *s, const uint8_t *text, size_t *n,
                                  bool *needs_nfc) {
  size_t len = *n, i = 0, bad = 0;
  *needs_nfc = false;
  for (size_t k; i < len; i += k) {
    if (text[i] < 0x80) {
      k = 1;
      continue;
    }
    *needs_nfc |= text[i] >= 0xCC;
    k = utf8_seq(text + i, len - i, &bad);
    if (k == 0) break;
  }
  if (i >= len) return text;
  *needs_nfc = true;  // U+FFFD
  uint8_t *o = fix_reserve(s, 3 * len);  // each bad byte grows to at most 3
  memcpy(o, text, i);
  size_t m = i;
  for (size_t k; i < len; i += k) {
    k = utf8_seq(text + i, len - i, &bad);
    if (k > 0) {
      memcpy(o + m, text + i, k);
      m += k;
    } else {
      memcpy(o + m, "\xEF\xBF\xBD", 3);
      m += 3;
      k = bad;
    }
  }
  *n = m;
  return o;
}

// Hangul's T index 0: U+11A7 stands for "no trailing consonant" in the
// composition of LVT syllables, and is itself a vowel that composes with nothing.
#define HANGUL_T_BASE 0x11A7

// Whether cp is a starter that `tokenizers`' NFC leaves as it is, composing
// nothing across it, where utf8proc would not: the characters its Unicode 9.0
// tables do not know but utf8proc's do normalize (nfc_unicode9.h), and U+11A7,
// which utf8proc 2.8 composes into a preceding LV syllable with T index 0,
// losing it.
static bool nfc_barrier(int32_t cp) {
  if (cp == HANGUL_T_BASE) return true;
  size_t lo = 0, hi = sizeof nfc_after_unicode9 / sizeof *nfc_after_unicode9;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if ((uint32_t)cp < nfc_after_unicode9[mid][0]) hi = mid;
    else if ((uint32_t)cp > nfc_after_unicode9[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

static void norm_append(ng_tok_state *s, const uint8_t *bytes, size_t n) {
  if (s->norm_len + n > s->norm_cap) {
    s->norm_cap = 2 * (s->norm_len + n);
    s->norm = ng_xrealloc(s->norm, s->norm_cap);
  }
  memcpy(s->norm + s->norm_len, bytes, n);
  s->norm_len += n;
}

static int nfc_append(ng_tok_state *s, const uint8_t *text, size_t n) {
  utf8proc_uint8_t *nfc = NULL;
  utf8proc_ssize_t m = utf8proc_map(text, (utf8proc_ssize_t)n, &nfc,
                                    UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (m < 0) return ng_fail("NFC normalization: %s", utf8proc_errmsg(m));
  norm_append(s, nfc, (size_t)m);
  free(nfc);
  return 0;
}

// NFC as `tokenizers` computes it, onto the end of s->norm: a barrier (a character it
// does not know, or U+11A7) is a starter that maps to itself and composes with
// nothing, so it stays as it is and the runs between barriers are normalized
// on their own.
static int nfc_unicode9(ng_tok_state *s, const uint8_t *text, size_t n) {
  size_t run = 0;
  for (size_t i = 0, k; i < n; i += k) {
    int32_t cp = utf8_decode(text + i, n - i, &k);  // valid: repaired
    if (!nfc_barrier(cp)) continue;
    if (i > run && nfc_append(s, text + run, i - run) != 0) return -1;
    norm_append(s, text + i, k);
    run = i + k;
  }
  return run < n ? nfc_append(s, text + run, n - run) : 0;
}

// text[0..n) repaired and normalized onto the end of s->norm.
static int normalize_onto(ng_tok_state *s, const uint8_t *text, size_t n) {
  bool needs_nfc;
  text = repair_utf8(s, text, &n, &needs_nfc);
  if (needs_nfc && s->t->nfc) return nfc_unicode9(s, text, n);
  norm_append(s, text, n);
  return 0;
}

// ---------------------------------------------------------------------------
// Words
//
// A segment (the text between added tokens) goes through in pieces of at
// least s->piece bytes, each cut before an ASCII byte, across which neither UTF-8
// repair nor NFC looks: a piece is repaired and normalized onto the end of
// s->norm, and the regex finds the words there as `tokenizers` does: each match
// and each gap between matches is a word, and an empty match splits the gap
// unless it comes right where the previous match ended. A match that could go
// on past the text so far (PCRE2_PARTIAL_HARD) waits for the next piece, as
// long at least as the text kept, so that no text is searched more than a
// few times over. The text before the word waiting is dropped, but for what a
// lookbehind may look at.

typedef struct {
  size_t gap;    // in s->norm: the start of the text that is no word yet
  size_t at;     // where the next search starts
  bool matched;  // some match ended at gap
} splitter;

static int regex_fail(int rc) {
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(rc, msg, sizeof msg);
  return ng_fail("tokenizer regex: %s", (char *)msg);
}

static int too_long(void) {
  return ng_fail("a word (a regex match, or the text between two) longer than the tokenizer's "
                 "limit of %zu bytes", MAX_WORD);
}

// The ids of the word s->norm[from..to).
static int word(ng_tok_state *s, size_t from, size_t to, ng_ids *out) {
  if (to - from > MAX_WORD) return too_long();
  encode_word(s, s->norm + from, to - from, out);
  return 0;
}

// A search's match limit: PCRE2's default, and more for each byte it may look
// at (a run of whitespace is one match that backtracks over the run).
static uint32_t match_limit(size_t bytes) {
  return bytes < (UINT32_MAX - MATCH_LIMIT) / MATCH_PER_BYTE
             ? MATCH_LIMIT + MATCH_PER_BYTE * (uint32_t)bytes
             : UINT32_MAX;
}

// The words of s->norm from sp->gap on that the text so far decides (all of
// them when `last`, the segment's end), encoded.
static int split_words(ng_tok_state *s, splitter *sp, bool last, ng_ids *out) {
  size_t n = s->norm_len;
  uint32_t options = PCRE2_NO_UTF_CHECK | (last ? 0 : PCRE2_PARTIAL_HARD);
  const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
  while (sp->at <= n) {
    pcre2_set_match_limit(s->mctx, match_limit(n - sp->at));
    int rc = pcre2_match(s->t->re, s->norm, n, sp->at, options, s->md, s->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) {
      sp->at = n + last;  // no match starts before the end
      break;
    }
    if (rc == PCRE2_ERROR_PARTIAL || (rc >= 0 && ov[0] == n && !last)) {
      sp->at = ov[0];  // the text after decides
      break;
    }
    if (rc < 0) return regex_fail(rc);
    size_t from = ov[0], to = ov[1];
    if (from == to && sp->matched && from == sp->gap) {  // search on from the next character
      size_t bad;
      sp->at = from + (from < n ? utf8_seq(s->norm + from, n - from, &bad) : 1);
      continue;
    }
    if ((from > sp->gap && word(s, sp->gap, from, out) != 0) ||
        (to > from && word(s, from, to, out) != 0))
      return -1;
    sp->gap = sp->at = to;
    sp->matched = true;
  }
  if (last) return sp->gap < n ? word(s, sp->gap, n, out) : 0;
  return sp->at - sp->gap > MAX_WORD ? too_long() : 0;  // the gap ends at a match after at
}

// Drops the text before the word waiting, but for the lookbehind of the next search.
static void drop_done(ng_tok_state *s, splitter *sp) {
  size_t keep = sp->at > s->t->lookbehind ? sp->at - s->t->lookbehind : 0;
  while (keep > 0 && (s->norm[keep] & 0xC0) == 0x80) keep--;
  if (keep > sp->gap) keep = sp->gap;
  memmove(s->norm, s->norm + keep, s->norm_len - keep);
  s->norm_len -= keep;
  sp->gap -= keep;
  sp->at -= keep;
}

// The end of the piece of text[0..n) that starts at `from`: `want` bytes on,
// or more, up to an ASCII byte; n if there is none.
static size_t piece_end(const uint8_t *text, size_t n, size_t from, size_t want) {
  if (n - from <= want) return n;
  const uint8_t *p = text + from + want;
  while (p < text + n && *p >= 0x80) p++;
  return (size_t)(p - text);
}

// A piece of text between added tokens: repaired, normalized, split, BPE'd.
static int encode_segment(ng_tok_state *s, const uint8_t *text, size_t n, ng_ids *out) {
  splitter sp = {0, 0, false};
  s->norm_len = 0;
  for (size_t from = 0; from < n;) {
    size_t to = piece_end(text, n, from, s->norm_len > s->piece ? s->norm_len : s->piece);
    if (normalize_onto(s, text + from, to - from) != 0 || split_words(s, &sp, to == n, out) != 0)
      return -1;
    if (to < n) drop_done(s, &sp);
    from = to;
  }
  return 0;
}

// The leftmost added token in text[from..n), longest first; returns its
// position (n if none) and sets *which.
static size_t find_added(const ng_tokenizer *t, const uint8_t *text, size_t from, size_t n,
                         int *which) {
  for (size_t i = from; i < n; i++) {
    if (!t->added_first[text[i]]) continue;
    uint32_t best = 0;
    for (int a = 0; a < t->n_added; a++) {
      span c = t->added[a].content;
      if (c.len > best && c.len <= n - i && memcmp(t->pool + c.off, text + i, c.len) == 0) {
        best = c.len;
        *which = a;
      }
    }
    if (best > 0) return i;
  }
  return n;
}

// Gives back the scratch that a long word or piece grew past SCRATCH_KEEP.
static void trim_scratch(ng_tok_state *s) {
  if (s->fix_cap > SCRATCH_KEEP) {
    free(s->fix);
    s->fix = NULL;
    s->fix_cap = 0;
  }
  if (s->norm_cap > SCRATCH_KEEP) {
    free(s->norm);
    s->norm = NULL;
    s->norm_cap = 0;
  }
  if (s->word_cap > SCRATCH_KEEP / sizeof *s->sym) {
    free(s->sym);
    free(s->rank);
    free(s->tree);
    s->sym = s->rank = NULL;
    s->tree = NULL;
    s->word_cap = s->tree_cap = 0;
  }
}

int ng_tokenizer_encode(ng_tok_state *s, const char *text_in, size_t n, ng_ids *out) {
  const uint8_t *text = (const uint8_t *)text_in;
  size_t at = 0;
  int rc = 0;
  while (at < n && rc == 0) {
    int a = -1;
    size_t m = find_added(s->t, text, at, n, &a);
    rc = encode_segment(s, text + at, m - at, out);
    if (rc != 0 || m == n) break;
    ids_reserve(out, 1);
    out->ids[out->n++] = s->t->added[a].id;
    at = m + s->t->added[a].content.len;
  }
  trim_scratch(s);
  return rc;
}

int ng_tokenizer_decode(const ng_tokenizer *t, const uint32_t *ids, size_t n, char **text,
                        size_t *len) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] >= t->vocab_size || t->tok[ids[i]].len == NO_TOKEN)
      return ng_fail("id %u (position %zu) names no token of the tokenizer", ids[i], i);
    total += t->tok[ids[i]].len;
  }
  char *o = ng_xmalloc(total + 1);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    span sp = t->tok[ids[i]];
    memcpy(o + m, t->pool + sp.off, sp.len);
    m += sp.len;
  }
  o[m] = 0;
  *text = o;
  *len = m;
  return 0;
}
