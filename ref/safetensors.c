// normgrow: safetensors reader (mmap + strict validation) and atomic writer.
#include "normgrow/safetensors.h"

#include "normgrow/common.h"
#include "normgrow/config.h"
#include "normgrow/fileio.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Tensor data is little-endian; the conversions below copy it as host values
// (a little-endian host: fileio.h).

#define NG_METADATA_KEY "__metadata__"
// Room for "[" + NG_ST_MAX_DIMS numbers of up to 20 digits + separators + "]".
#define NG_SHAPE_STR_LEN (2 + NG_ST_MAX_DIMS * 21 + 1)

static const struct {
  const char *name;
  size_t size;
} dtype_info[NG_DTYPE_COUNT] = {
    [NG_BOOL] = {"BOOL", 1}, [NG_U8] = {"U8", 1},   [NG_I8] = {"I8", 1},
    [NG_I16] = {"I16", 2},   [NG_U16] = {"U16", 2}, [NG_F16] = {"F16", 2},
    [NG_BF16] = {"BF16", 2}, [NG_I32] = {"I32", 4}, [NG_U32] = {"U32", 4},
    [NG_F32] = {"F32", 4},   [NG_F64] = {"F64", 8}, [NG_I64] = {"I64", 8},
    [NG_U64] = {"U64", 8},
};

const char *ng_dtype_name(ng_dtype d) {
  NG_ASSERT(d >= 0 && d < NG_DTYPE_COUNT);
  return dtype_info[d].name;
}

size_t ng_dtype_size(ng_dtype d) {
  NG_ASSERT(d >= 0 && d < NG_DTYPE_COUNT);
  return dtype_info[d].size;
}

static int dtype_from_name(const char *s, ng_dtype *out) {
  for (int d = 0; d < NG_DTYPE_COUNT; d++) {
    if (strcmp(s, dtype_info[d].name) == 0) {
      *out = (ng_dtype)d;
      return 0;
    }
  }
  return -1;
}

// "[2,3]" (or "[]" for a scalar) into buf of NG_SHAPE_STR_LEN bytes.
static const char *shape_str(char *buf, int ndim, const int64_t *shape) {
  size_t len = 0;
  buf[len++] = '[';
  for (int i = 0; i < ndim; i++) {
    len += (size_t)snprintf(buf + len, NG_SHAPE_STR_LEN - len, "%s%" PRId64, i ? "," : "",
                            shape[i]);
  }
  snprintf(buf + len, NG_SHAPE_STR_LEN - len, "]");
  return buf;
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// Returns a name that occurs more than once in names[0..n), or NULL.
// Sorting a copy keeps this O(n log n) even for huge hostile headers.
static const char *find_duplicate(char *const *names, int n) {
  if (n < 2) return NULL;
  char **sorted = ng_xmalloc((size_t)n * sizeof *sorted);
  memcpy(sorted, names, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
  const char *dup = NULL;
  for (int i = 1; i < n && !dup; i++) {
    if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
  }
  free(sorted);
  return dup;
}

// ---------------------------------------------------------------------------
// Reader

void ng_st_close(ng_st_file *f) {
  for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
  free(f->tensors);
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_keys[i]);
    free(f->meta_values[i]);
  }
  free(f->meta_keys);
  free(f->meta_values);
  ng_unmap_file(f->map, f->map_size);
  free(f->path);
  memset(f, 0, sizeof *f);
}

// Header length: u64 little-endian, bounded, and inside the file.
static int read_header_len(const ng_st_file *f, size_t *len) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | f->map[i];
  if (n > NG_ST_MAX_HEADER) {
    return ng_fail("%s: header length %" PRIu64 " exceeds the limit of %u bytes", f->path,
                   n, NG_ST_MAX_HEADER);
  }
  if (n > f->map_size - 8) {
    return ng_fail("%s: header length %" PRIu64 " exceeds file size %zu", f->path, n,
                   f->map_size);
  }
  *len = (size_t)n;
  return 0;
}

static bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Parses the header as one JSON object that starts at its first byte (as the
// reference reader requires) and is followed only by whitespace (the writer's
// space padding). cJSON may read one byte past the length it is given, so it
// parses a NUL-terminated copy rather than the mapping itself.
static int parse_header_json(const ng_st_file *f, size_t len, cJSON **root) {
  char *text = ng_xmalloc(len + 1);
  memcpy(text, f->map + 8, len);
  text[len] = '\0';
  const char *end = NULL;
  cJSON *json = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  bool valid = json != NULL;
  for (const char *p = end; valid && p < text + len; p++) valid = is_json_space(*p);
  bool object = valid && text[0] == '{' && cJSON_IsObject(json);
  free(text);
  if (!object) {
    cJSON_Delete(json);
    return valid ? ng_fail("%s: header is not a JSON object", f->path)
                 : ng_fail("%s: header is not valid JSON", f->path);
  }
  *root = json;
  return 0;
}

// JSON numbers are doubles. Sizes and offsets must be integral values in
// [0, 2^53), where doubles are exact; this rejects negatives, fractions and
// numbers too large to denote a byte count unambiguously.
static bool json_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!(d >= 0.0 && d < 9007199254740992.0)) return false;
  uint64_t u = (uint64_t)d;
  if ((double)u != d) return false;
  *out = u;
  return true;
}

// "__metadata__": an object whose values are all strings.
static int parse_metadata(ng_st_file *f, const cJSON *meta) {
  if (!cJSON_IsObject(meta)) {
    return ng_fail("%s: " NG_METADATA_KEY " is not a JSON object", f->path);
  }
  int n = cJSON_GetArraySize(meta);
  f->meta_keys = ng_xcalloc((size_t)n, sizeof *f->meta_keys);
  f->meta_values = ng_xcalloc((size_t)n, sizeof *f->meta_values);
  for (const cJSON *kv = meta->child; kv; kv = kv->next) {
    if (!cJSON_IsString(kv)) {
      return ng_fail("%s: " NG_METADATA_KEY " value for \"%s\" is not a string", f->path,
                     kv->string);
    }
    f->meta_keys[f->n_meta] = ng_xstrdup(kv->string);
    f->meta_values[f->n_meta] = ng_xstrdup(kv->valuestring);
    f->n_meta++;
  }
  const char *dup = find_duplicate(f->meta_keys, f->n_meta);
  if (dup) return ng_fail("%s: duplicate " NG_METADATA_KEY " key \"%s\"", f->path, dup);
  return 0;
}

// A tensor entry has exactly the keys dtype, shape and data_offsets; they go
// into found[0..3) in that order.
static int tensor_fields(const ng_st_file *f, const cJSON *entry, const cJSON *found[3]) {
  const char *name = entry->string;
  if (!cJSON_IsObject(entry)) {
    return ng_fail("%s: tensor \"%s\": entry is not a JSON object", f->path, name);
  }
  static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
  for (const cJSON *kv = entry->child; kv; kv = kv->next) {
    int k = 0;
    while (k < 3 && strcmp(kv->string, keys[k]) != 0) k++;
    if (k == 3) {
      return ng_fail("%s: tensor \"%s\": unexpected key \"%s\"", f->path, name,
                     kv->string);
    }
    if (found[k]) {
      return ng_fail("%s: tensor \"%s\": duplicate key \"%s\"", f->path, name, keys[k]);
    }
    found[k] = kv;
  }
  for (int k = 0; k < 3; k++) {
    if (!found[k]) {
      return ng_fail("%s: tensor \"%s\": missing \"%s\"", f->path, name, keys[k]);
    }
  }
  return 0;
}

static int parse_shape(const ng_st_file *f, ng_st_tensor *t, const cJSON *shape) {
  if (!cJSON_IsArray(shape)) {
    return ng_fail("%s: tensor \"%s\": shape is not an array", f->path, t->name);
  }
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > NG_ST_MAX_DIMS) {
    return ng_fail("%s: tensor \"%s\": shape has %d dimensions, at most %d supported",
                   f->path, t->name, ndim, NG_ST_MAX_DIMS);
  }
  t->ndim = 0;
  for (const cJSON *v = shape->child; v; v = v->next) {
    uint64_t dim;
    if (!json_uint(v, &dim)) {
      return ng_fail("%s: tensor \"%s\": shape[%d] is not a non-negative integer",
                     f->path, t->name, t->ndim);
    }
    t->shape[t->ndim++] = (int64_t)dim;
  }
  return 0;
}

static int parse_offsets(const ng_st_file *f, ng_st_tensor *t, const cJSON *offsets) {
  uint64_t begin, end;
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
      !json_uint(offsets->child, &begin) || !json_uint(offsets->child->next, &end) ||
      begin > end) {
    return ng_fail(
        "%s: tensor \"%s\": data_offsets must be [begin, end] with "
        "0 <= begin <= end",
        f->path, t->name);
  }
  t->begin = (size_t)begin;
  t->end = (size_t)end;
  return 0;
}

// numel x element size must equal the byte span given by data_offsets.
static int check_tensor_size(const ng_st_file *f, ng_st_tensor *t) {
  char shape[NG_SHAPE_STR_LEN];
  size_t numel = 1, bytes = 0;
  bool overflow = false;
  for (int i = 0; i < t->ndim && !overflow; i++) {
    overflow = ng_mul_size(numel, (size_t)t->shape[i], &numel) != 0;
  }
  if (overflow || ng_mul_size(numel, ng_dtype_size(t->dtype), &bytes) != 0) {
    return ng_fail("%s: tensor \"%s\": shape %s x %s overflows the address space",
                   f->path, t->name, shape_str(shape, t->ndim, t->shape),
                   ng_dtype_name(t->dtype));
  }
  if (bytes != t->end - t->begin) {
    return ng_fail(
        "%s: tensor \"%s\": shape %s x %s is %zu bytes but data_offsets "
        "span %zu",
        f->path, t->name, shape_str(shape, t->ndim, t->shape), ng_dtype_name(t->dtype),
        bytes, t->end - t->begin);
  }
  t->numel = numel;
  return 0;
}

static int parse_tensor(const ng_st_file *f, const cJSON *entry, ng_st_tensor *t) {
  const cJSON *fields[3] = {NULL, NULL, NULL};
  t->name = ng_xstrdup(entry->string);
  if (tensor_fields(f, entry, fields) != 0) return -1;
  const cJSON *dtype = fields[0], *shape = fields[1], *offsets = fields[2];
  if (!cJSON_IsString(dtype)) {
    return ng_fail("%s: tensor \"%s\": dtype is not a string", f->path, t->name);
  }
  if (dtype_from_name(dtype->valuestring, &t->dtype) != 0) {
    return ng_fail("%s: tensor \"%s\": unknown dtype \"%s\"", f->path, t->name,
                   dtype->valuestring);
  }
  if (parse_shape(f, t, shape) != 0 || parse_offsets(f, t, offsets) != 0) return -1;
  return check_tensor_size(f, t);
}

// Splits the header object into the metadata and the tensor entries.
static int parse_entries(ng_st_file *f, const cJSON *root) {
  int n_entries = cJSON_GetArraySize(root);
  const cJSON *meta = NULL;
  f->tensors = ng_xcalloc((size_t)n_entries, sizeof *f->tensors);
  for (const cJSON *e = root->child; e; e = e->next) {
    if (strcmp(e->string, NG_METADATA_KEY) == 0) {
      if (meta) return ng_fail("%s: duplicate " NG_METADATA_KEY, f->path);
      meta = e;
      continue;
    }
    // Counted before parsing so that ng_st_close frees a partly parsed name.
    ng_st_tensor *t = &f->tensors[f->n++];
    if (parse_tensor(f, e, t) != 0) return -1;
  }
  if (meta && parse_metadata(f, meta) != 0) return -1;

  char **names = ng_xmalloc((size_t)f->n * sizeof *names);
  for (int i = 0; i < f->n; i++) names[i] = f->tensors[i].name;
  const char *dup = find_duplicate(names, f->n);
  if (dup) ng_fail("%s: tensor \"%s\": duplicate tensor name", f->path, dup);
  free(names);
  return dup ? -1 : 0;
}

// Data-offset order; zero-size tensors first at a shared offset, then by name
// so that the order is fully determined.
static int cmp_tensor_offset(const void *a, const void *b) {
  const ng_st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

// Sorted by offset, the tensors must tile the data section exactly: the first
// begins at 0, each begins where the previous one ended (no gap, no overlap)
// and the last ends at the end of the file (no trailing or missing bytes).
static int check_layout(ng_st_file *f, size_t data_start) {
  size_t data_size = f->map_size - data_start;
  qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_tensor_offset);
  size_t pos = 0;
  for (int i = 0; i < f->n; i++) {
    ng_st_tensor *t = &f->tensors[i];
    if (t->begin != pos && i == 0) {
      return ng_fail("%s: tensor \"%s\": data begins at byte %zu, not at 0 (gap)",
                     f->path, t->name, t->begin);
    }
    if (t->begin != pos) {
      return ng_fail(
          "%s: tensor \"%s\": data begins at byte %zu but tensor \"%s\" "
          "ends at %zu (%s)",
          f->path, t->name, t->begin, f->tensors[i - 1].name, pos,
          t->begin > pos ? "gap" : "overlap");
    }
    if (t->end > data_size) {
      return ng_fail(
          "%s: tensor \"%s\": data ends at byte %zu, past the end of the "
          "%zu-byte data section (truncated file?)",
          f->path, t->name, t->end, data_size);
    }
    t->data = f->map + data_start + t->begin;
    pos = t->end;
  }
  if (pos != data_size) {
    return ng_fail(
        "%s: tensors end at byte %zu but the data section has %zu bytes "
        "(trailing bytes)",
        f->path, pos, data_size);
  }
  return 0;
}

static int load(ng_st_file *f) {
  size_t header_len = 0;
  cJSON *root = NULL;
  // The 8-byte header length is mandatory.
  if (ng_map_file(f->path, 8, "safetensors header length", &f->map, &f->map_size) != 0 ||
      read_header_len(f, &header_len) != 0 ||
      parse_header_json(f, header_len, &root) != 0) {
    return -1;
  }
  int rc = parse_entries(f, root);
  cJSON_Delete(root);
  if (rc != 0) return -1;
  return check_layout(f, 8 + header_len);
}

int ng_st_open(ng_st_file *f, const char *path) {
  memset(f, 0, sizeof *f);
  f->path = ng_xstrdup(path);
  if (load(f) != 0) {
    ng_st_close(f);
    return -1;
  }
  return 0;
}

const ng_st_tensor *ng_st_find(const ng_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++) {
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  }
  return NULL;
}

const char *ng_st_meta(const ng_st_file *f, const char *key) {
  for (int i = 0; i < f->n_meta; i++) {
    if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
  }
  return NULL;
}

// ---------------------------------------------------------------------------
// Conversions. t->data may be unaligned: elements are read with memcpy.

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

float ng_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

float ng_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant x 2^-24, exact in fp32
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf, nan
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t ng_f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040);  // quiet nan
  // Round to nearest even; a carry into the exponent correctly gives inf.
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

uint16_t ng_f32_to_f16(float x) {
  uint32_t u = f32_bits(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff);  // nan
  if (a >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {                      // normal: rebias exponent 127 -> 15
    a -= 112u << 23;
    return sign | (uint16_t)((a + 0xfffu + ((a >> 13) & 1)) >> 13);
  }
  // Subnormal result in units of 2^-24: a value below 2^-25 rounds to zero.
  uint32_t exp = a >> 23;
  if (exp < 102) return sign;
  uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // value = mant x 2^(exp-150)
  uint32_t shift = 126 - exp;                   // 14..24
  uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;  // may carry into 0x400: min normal
  return sign | (uint16_t)q;
}

int ng_st_to_f32(const ng_st_file *f, const ng_st_tensor *t, float *dst) {
  const uint8_t *src = t->data;
  switch (t->dtype) {
    case NG_F32:
      if (t->numel) memcpy(dst, src, t->numel * sizeof *dst);
      return 0;
    case NG_BF16:
    case NG_F16:
      for (size_t i = 0; i < t->numel; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = t->dtype == NG_BF16 ? ng_bf16_to_f32(h) : ng_f16_to_f32(h);
      }
      return 0;
    default:
      return ng_fail("%s: tensor \"%s\": dtype %s cannot be converted to F32", f->path,
                     t->name, ng_dtype_name(t->dtype));
  }
}

int ng_st_to_i32(const ng_st_file *f, const ng_st_tensor *t, int32_t *dst) {
  const uint8_t *src = t->data;
  switch (t->dtype) {
    case NG_I32:
      if (t->numel) memcpy(dst, src, t->numel * sizeof *dst);
      return 0;
    case NG_I64:
      for (size_t i = 0; i < t->numel; i++) {
        int64_t v;
        memcpy(&v, src + 8 * i, sizeof v);
        if (v < INT32_MIN || v > INT32_MAX) {
          return ng_fail("%s: tensor \"%s\": I64 value %" PRId64
                         " at index %zu does "
                         "not fit in int32",
                         f->path, t->name, v, i);
        }
        dst[i] = (int32_t)v;
      }
      return 0;
    default:
      return ng_fail("%s: tensor \"%s\": dtype %s cannot be converted to I32", f->path,
                     t->name, ng_dtype_name(t->dtype));
  }
}

// Finds `name` and checks that its shape is exactly shape[0..ndim).
static const ng_st_tensor *find_shaped(const ng_st_file *f, const char *name, int ndim,
                                       const int64_t *shape) {
  NG_ASSERT(ndim >= 0 && ndim <= NG_ST_MAX_DIMS);
  const ng_st_tensor *t = ng_st_find(f, name);
  if (!t) {
    ng_fail("%s: tensor \"%s\" is missing", f->path, name);
    return NULL;
  }
  bool same = t->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char got[NG_SHAPE_STR_LEN], want[NG_SHAPE_STR_LEN];
    ng_fail("%s: tensor \"%s\" has shape %s, expected %s", f->path, name,
            shape_str(got, t->ndim, t->shape), shape_str(want, ndim, shape));
    return NULL;
  }
  return t;
}

static bool is_float_dtype(ng_dtype d) {
  return d == NG_F32 || d == NG_BF16 || d == NG_F16;
}

int ng_st_check(const ng_st_file *f, const char *name, int ndim, const int64_t *shape,
                bool floating) {
  const ng_st_tensor *t = find_shaped(f, name, ndim, shape);
  if (!t) return -1;
  bool ok =
      floating ? is_float_dtype(t->dtype) : t->dtype == NG_I32 || t->dtype == NG_I64;
  if (!ok) {
    return ng_fail("%s: tensor \"%s\" has dtype %s, expected %s", f->path, name,
                   ng_dtype_name(t->dtype), floating ? "F32, BF16 or F16" : "I32 or I64");
  }
  return 0;
}

int ng_st_load_f32(const ng_st_file *f, const char *name, int ndim, const int64_t *shape,
                   float *dst) {
  const ng_st_tensor *t = find_shaped(f, name, ndim, shape);
  return t ? ng_st_to_f32(f, t, dst) : -1;
}

int ng_st_load_i32(const ng_st_file *f, const char *name, int ndim, const int64_t *shape,
                   int32_t *dst) {
  const ng_st_tensor *t = find_shaped(f, name, ndim, shape);
  return t ? ng_st_to_i32(f, t, dst) : -1;
}

// ---------------------------------------------------------------------------
// Writer

typedef struct {
  char *name;
  ng_dtype dtype;
  int ndim;
  int64_t shape[NG_ST_MAX_DIMS];
  const void *data;
  size_t bytes;
} writer_tensor;

typedef struct {
  char *key, *value;
} writer_meta;

struct ng_st_writer {
  int n, cap;
  writer_tensor *tensors;
  int n_meta, cap_meta;
  writer_meta *meta;
};

ng_st_writer *ng_st_writer_new(void) { return ng_xcalloc(1, sizeof(ng_st_writer)); }

void ng_st_writer_free(ng_st_writer *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++) free(w->tensors[i].name);
  free(w->tensors);
  for (int i = 0; i < w->n_meta; i++) {
    free(w->meta[i].key);
    free(w->meta[i].value);
  }
  free(w->meta);
  free(w);
}

// Grows *items (of `size`-byte elements) so that it holds at least n + 1.
static void *grow(void *items, int n, int *cap, size_t size) {
  if (n < *cap) return items;
  *cap = *cap ? 2 * *cap : 16;
  return ng_xrealloc(items, (size_t)*cap * size);
}

void ng_st_writer_meta(ng_st_writer *w, const char *key, const char *value) {
  for (int i = 0; i < w->n_meta; i++) NG_ASSERT(strcmp(w->meta[i].key, key) != 0);
  w->meta = grow(w->meta, w->n_meta, &w->cap_meta, sizeof *w->meta);
  w->meta[w->n_meta].key = ng_xstrdup(key);
  w->meta[w->n_meta].value = ng_xstrdup(value);
  w->n_meta++;
}

void ng_st_writer_add(ng_st_writer *w, const char *name, ng_dtype dtype, int ndim,
                      const int64_t *shape, const void *data) {
  NG_ASSERT(strcmp(name, NG_METADATA_KEY) != 0);
  for (int i = 0; i < w->n; i++) NG_ASSERT(strcmp(w->tensors[i].name, name) != 0);
  NG_ASSERT(ndim >= 0 && ndim <= NG_ST_MAX_DIMS);
  w->tensors = grow(w->tensors, w->n, &w->cap, sizeof *w->tensors);
  writer_tensor *t = &w->tensors[w->n++];
  t->name = ng_xstrdup(name);
  t->dtype = dtype;
  t->ndim = ndim;
  t->data = data;
  t->bytes = ng_dtype_size(dtype);
  for (int i = 0; i < ndim; i++) {
    NG_ASSERT(shape[i] >= 0);
    t->shape[i] = shape[i];
    NG_ASSERT(ng_mul_size(t->bytes, (size_t)shape[i], &t->bytes) == 0);
  }
  NG_ASSERT(data != NULL || t->bytes == 0);
}

static cJSON *json_checked(cJSON *item) {
  if (!item) ng_abort_at(__FILE__, __LINE__, "out of memory");
  return item;
}

// Integers are emitted verbatim (cJSON would print large doubles as 1e+16).
static cJSON *json_int(int64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  return json_checked(cJSON_CreateRaw(buf));
}

static void json_add(cJSON *obj, const char *key, cJSON *item) {
  NG_ASSERT(cJSON_AddItemToObject(obj, key, item));
}

// The unpadded header JSON: metadata (if any), then tensors in insertion order.
static char *writer_header(const ng_st_writer *w) {
  cJSON *root = json_checked(cJSON_CreateObject());
  if (w->n_meta) {
    cJSON *meta = json_checked(cJSON_CreateObject());
    for (int i = 0; i < w->n_meta; i++) {
      json_add(meta, w->meta[i].key, json_checked(cJSON_CreateString(w->meta[i].value)));
    }
    json_add(root, NG_METADATA_KEY, meta);
  }
  size_t offset = 0;
  for (int i = 0; i < w->n; i++) {
    const writer_tensor *t = &w->tensors[i];
    cJSON *entry = json_checked(cJSON_CreateObject());
    json_add(entry, "dtype", json_checked(cJSON_CreateString(ng_dtype_name(t->dtype))));
    cJSON *shape = json_checked(cJSON_CreateArray());
    for (int d = 0; d < t->ndim; d++) {
      NG_ASSERT(cJSON_AddItemToArray(shape, json_int(t->shape[d])));
    }
    json_add(entry, "shape", shape);
    cJSON *offsets = json_checked(cJSON_CreateArray());
    NG_ASSERT(cJSON_AddItemToArray(offsets, json_int((int64_t)offset)));
    NG_ASSERT(cJSON_AddItemToArray(offsets, json_int((int64_t)(offset + t->bytes))));
    json_add(entry, "data_offsets", offsets);
    json_add(root, t->name, entry);
    NG_ASSERT(t->bytes <= SIZE_MAX - offset);
    offset += t->bytes;
  }
  char *text = ng_json_print(root, false);
  cJSON_Delete(root);
  return text;
}

// ng_write_fn: the whole file (ctx is the writer).
static bool write_contents(FILE *fp, void *ctx) {
  const ng_st_writer *w = ctx;
  char *json = writer_header(w);
  size_t len = strlen(json), padded = (len + 7) & ~(size_t)7;
  uint8_t len_le[8];
  for (int i = 0; i < 8; i++) len_le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  bool ok = fwrite(len_le, 1, 8, fp) == 8 && fwrite(json, 1, len, fp) == len;
  for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
  cJSON_free(json);
  for (int i = 0; ok && i < w->n; i++) {
    const writer_tensor *t = &w->tensors[i];
    ok = t->bytes == 0 || fwrite(t->data, 1, t->bytes, fp) == t->bytes;
  }
  return ok;
}

int ng_st_writer_save(ng_st_writer *w, const char *path) {
  return ng_write_atomic(path, write_contents, w);
}
