// normgrow: safetensors reading (memory-mapped, validated) and atomic writing.
//
// Format: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "string", ...}}, then the raw little-endian data.
// The reader validates as the format's reference implementation does: header
// length bounded (NG_ST_MAX_HEADER) and inside the file; valid JSON object;
// known dtype; shape x element size == byte span; spans contiguous from 0,
// non-overlapping and ending exactly at the end of the file (no trailing
// bytes); no duplicate names; metadata values are strings. Every error names
// the file and, where there is one, the tensor.
#ifndef NORMGROW_SAFETENSORS_H
#define NORMGROW_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NG_ST_MAX_HEADER (100u * 1000u * 1000u)  // bytes, as the reference reader
#define NG_ST_MAX_DIMS 8

typedef enum {
  NG_BOOL, NG_U8, NG_I8, NG_I16, NG_U16, NG_F16, NG_BF16, NG_I32, NG_U32,
  NG_F32, NG_F64, NG_I64, NG_U64, NG_DTYPE_COUNT
} ng_dtype;

const char *ng_dtype_name(ng_dtype d);   // "F32", ...
size_t ng_dtype_size(ng_dtype d);        // bytes per element

typedef struct {
  char *name;
  ng_dtype dtype;
  int ndim;
  int64_t shape[NG_ST_MAX_DIMS];
  size_t numel;
  size_t begin, end;            // byte span relative to the data section
  const uint8_t *data;          // points into the mapping
} ng_st_tensor;

typedef struct {
  char *path;
  uint8_t *map;                 // whole file, read-only mapping
  size_t map_size;
  int n;                        // number of tensors
  ng_st_tensor *tensors;        // in data-offset order
  int n_meta;
  char **meta_keys, **meta_values;
} ng_st_file;

// Open and validate. On failure returns -1, *f is left empty (nothing to close).
int ng_st_open(ng_st_file *f, const char *path);
void ng_st_close(ng_st_file *f);

const ng_st_tensor *ng_st_find(const ng_st_file *f, const char *name);
const char *ng_st_meta(const ng_st_file *f, const char *key);  // NULL if absent

// Convert a tensor of F32, BF16 or F16 into fp32 (dst holds t->numel floats).
int ng_st_to_f32(const ng_st_file *f, const ng_st_tensor *t, float *dst);
// Convert a tensor of I32 or I64 into int32 (I64 values must fit).
int ng_st_to_i32(const ng_st_file *f, const ng_st_tensor *t, int32_t *dst);

// Find `name` and check that its shape is exactly shape[0..ndim) and, with
// `floating`, that its dtype is F32, BF16 or F16 (else I32 or I64). No data is read.
int ng_st_check(const ng_st_file *f, const char *name, int ndim, const int64_t *shape,
                bool floating);
// Find `name`, check that its shape is exactly shape[0..ndim), convert into dst.
// Errors: "<file>: tensor <name>: missing" / "has shape [..], expected [..]" / dtype.
int ng_st_load_f32(const ng_st_file *f, const char *name, int ndim,
                   const int64_t *shape, float *dst);
int ng_st_load_i32(const ng_st_file *f, const char *name, int ndim,
                   const int64_t *shape, int32_t *dst);

// Scalar conversions (round to nearest even for the narrowing ones).
float ng_bf16_to_f32(uint16_t h);
float ng_f16_to_f32(uint16_t h);
uint16_t ng_f32_to_bf16(float x);
uint16_t ng_f32_to_f16(float x);

// Writer. Tensors are referenced, not copied: `data` must stay valid until
// ng_st_writer_save returns. Data is given in the tensor's own dtype.
typedef struct ng_st_writer ng_st_writer;
ng_st_writer *ng_st_writer_new(void);
void ng_st_writer_free(ng_st_writer *w);
void ng_st_writer_meta(ng_st_writer *w, const char *key, const char *value);
void ng_st_writer_add(ng_st_writer *w, const char *name, ng_dtype dtype, int ndim,
                      const int64_t *shape, const void *data);
// Replaces `path` atomically (ng_write_atomic in fileio.h). Tensors are
// laid out in the order they were added; the header is padded with spaces to
// a multiple of 8 bytes. Output is a pure function of the inputs.
int ng_st_writer_save(ng_st_writer *w, const char *path);

#endif
