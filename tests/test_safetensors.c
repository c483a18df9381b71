// Tests for ref/safetensors.c: writer/reader round trip, fp16/bf16 conversion,
// and one hand-crafted bad file per validation rule of the reader.
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/safetensors.h"

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

static char g_dir[] = "/tmp/ng_test_st_XXXXXX";

// Full path of `name` inside the test directory (one static buffer per slot).
static const char *tmp_path(const char *name) {
  static char bufs[4][512];
  static int slot;
  char *buf = bufs[slot++ % 4];
  snprintf(buf, sizeof bufs[0], "%s/%s", g_dir, name);
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  NG_ASSERT(fp);
  NG_ASSERT(n == 0 || fwrite(data, 1, n, fp) == n);
  NG_ASSERT(fclose(fp) == 0);
}

// Reads a whole file into a malloc'd buffer; *n receives its size.
static uint8_t *read_bytes(const char *path, size_t *n) {
  char *text;
  NG_ASSERT(ng_read_file(path, SIZE_MAX, &text, n) == 0);
  return (uint8_t *)text;
}

// A safetensors file by hand: header length `hlen` (the header's own length
// when 0), the header text, then `data_len` bytes of `data` (zeros if NULL).
static const char *write_st(const char *name, uint64_t hlen, const char *header,
                            const void *data, size_t data_len) {
  size_t header_len = strlen(header), n = 8 + header_len + data_len;
  uint8_t *buf = ng_xcalloc(n, 1);
  if (hlen == 0) hlen = header_len;
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hlen >> (8 * i));
  memcpy(buf + 8, header, header_len);
  if (data) memcpy(buf + 8 + header_len, data, data_len);
  const char *path = tmp_path(name);
  write_bytes(path, buf, n);
  free(buf);
  return path;
}

static bool is_zeroed(const ng_st_file *f) {
  static const ng_st_file zero;
  return memcmp(f, &zero, sizeof zero) == 0;
}

// Opening must fail with one line that names the file, the tensor (if any)
// and contains `what`; the struct must be left zeroed.
static void expect_bad_file(const char *test, const char *file, const char *tensor,
                            const char *what) {
  ng_st_file f;
  char name[128];
  int rc = ng_st_open(&f, tmp_path(file));
  const char *err = ng_error();
  snprintf(name, sizeof name, "%s rejected", test);
  CHECK(rc == -1, name, "ng_st_open returned %d", rc);
  snprintf(name, sizeof name, "%s: message names the file", test);
  CHECK(strstr(err, file) != NULL, name, "message: %s", err);
  snprintf(name, sizeof name, "%s: message says why", test);
  CHECK(strstr(err, what) != NULL && !strchr(err, '\n'), name, "want \"%s\" in: %s", what,
        err);
  if (tensor) {
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\"", tensor);
    snprintf(name, sizeof name, "%s: message names the tensor", test);
    CHECK(strstr(err, quoted) != NULL, name, "want %s in: %s", quoted, err);
  }
  snprintf(name, sizeof name, "%s: struct left empty", test);
  CHECK(is_zeroed(&f), name, "fields left set after failure");
  ng_st_close(&f);
}

static void expect_bad(const char *test, const char *header, size_t data_len,
                       const char *tensor, const char *what) {
  char file[96];
  snprintf(file, sizeof file, "bad_%s.safetensors", test);
  write_st(file, 0, header, NULL, data_len);
  expect_bad_file(test, file, tensor, what);
}

static float from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// ---------------------------------------------------------------------------

static void test_bf16(void) {
  CHECK(ng_f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0", "got %04x", ng_f32_to_bf16(1.0f));
  CHECK(ng_f32_to_bf16(-0.0f) == 0x8000, "bf16 -0", "got %04x", ng_f32_to_bf16(-0.0f));
  CHECK(ng_f32_to_bf16(from_bits(0x3f808000)) == 0x3f80, "bf16 tie rounds down to even",
        "got %04x", ng_f32_to_bf16(from_bits(0x3f808000)));
  CHECK(ng_f32_to_bf16(from_bits(0x3f818000)) == 0x3f82, "bf16 tie rounds up to even",
        "got %04x", ng_f32_to_bf16(from_bits(0x3f818000)));
  CHECK(ng_f32_to_bf16(from_bits(0x3f808001)) == 0x3f81, "bf16 above tie rounds up",
        "got %04x", ng_f32_to_bf16(from_bits(0x3f808001)));
  CHECK(ng_f32_to_bf16(from_bits(0x00018000)) == 0x0002, "bf16 subnormal tie", "got %04x",
        ng_f32_to_bf16(from_bits(0x00018000)));
  CHECK(ng_f32_to_bf16(from_bits(0x7f7f7fff)) == 0x7f7f, "bf16 below overflow",
        "got %04x", ng_f32_to_bf16(from_bits(0x7f7f7fff)));
  CHECK(ng_f32_to_bf16(from_bits(0x7f7fffff)) == 0x7f80, "bf16 FLT_MAX rounds to inf",
        "got %04x", ng_f32_to_bf16(from_bits(0x7f7fffff)));
  CHECK(ng_f32_to_bf16(-INFINITY) == 0xff80, "bf16 -inf", "got %04x",
        ng_f32_to_bf16(-INFINITY));
  uint16_t snan = ng_f32_to_bf16(from_bits(0x7f800001));  // payload only in low bits
  CHECK((snan & 0x7f80) == 0x7f80 && (snan & 0x7f), "bf16 nan stays nan", "got %04x",
        snan);
  // exact: every bf16 (and f16) number is a float, and widening is exact
  CHECK(ng_bf16_to_f32(0xc020) == -2.5f, "bf16 to f32", "got %g", ng_bf16_to_f32(0xc020));

  int bad = 0;
  for (uint32_t h = 0; h <= 0xffff; h++) {
    float v = ng_bf16_to_f32((uint16_t)h);
    uint16_t back = ng_f32_to_bf16(v);
    bad += isnan(v) ? !((back & 0x7f80) == 0x7f80 && (back & 0x7f)) : back != h;
  }
  CHECK(bad == 0, "bf16 exhaustive round trip", "%d values changed", bad);
}

// Checks that f32_to_f16(x) is the nearest half, ties to even (x >= 0, finite).
static bool f16_is_nearest(float x) {
  uint16_t h = ng_f32_to_f16(x);
  if (h == 0x7c00) return x >= 65520.0f;
  if (h > 0x7c00) return false;
  double d = fabs((double)x - ng_f16_to_f32(h));
  double lo = h > 0 ? fabs((double)x - ng_f16_to_f32(h - 1)) : INFINITY;
  double hi = h < 0x7bff ? fabs((double)x - ng_f16_to_f32(h + 1)) : fabs(x - 65536.0);
  if (d > lo || d > hi) return false;
  // exact: the difference of two floats is exact in double, so a tie compares equal
  return (d != lo && d != hi) || (h & 1) == 0;
}

static void test_f16(void) {
  static const struct {
    float x;
    uint16_t want;
    const char *name;
  } cases[] = {
      {1.0f, 0x3c00, "f16 1.0"},
      {-0.0f, 0x8000, "f16 -0"},
      {0x1.002p0f, 0x3c00, "f16 tie rounds down to even"},
      {0x1.006p0f, 0x3c02, "f16 tie rounds up to even"},
      {0x1.00201p0f, 0x3c01, "f16 above tie rounds up"},
      {0x1p-24f, 0x0001, "f16 smallest subnormal"},
      {0x1p-25f, 0x0000, "f16 half the smallest subnormal ties to zero"},
      {0x1.000002p-25f, 0x0001, "f16 just above half rounds up"},
      {0x1.8p-24f, 0x0002, "f16 subnormal tie rounds up to even"},
      {0x1.4p-23f, 0x0002, "f16 subnormal tie rounds down to even"},
      {0x1.ff8p-15f, 0x03ff, "f16 largest subnormal"},
      {0x1.ffcp-15f, 0x0400, "f16 subnormal rounds up into normal"},
      {0x1p-14f, 0x0400, "f16 smallest normal"},
      {1e-10f, 0x0000, "f16 underflow to zero"},
      {-0x1p-24f, 0x8001, "f16 negative subnormal"},
      {65504.0f, 0x7bff, "f16 max"},
      {0x1.ffdffep15f, 0x7bff, "f16 just below overflow"},
      {65520.0f, 0x7c00, "f16 overflow tie goes to inf"},
      {1e6f, 0x7c00, "f16 overflow to inf"},
      {-1e6f, 0xfc00, "f16 negative overflow to -inf"},
      {INFINITY, 0x7c00, "f16 inf"},
      {-INFINITY, 0xfc00, "f16 -inf"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = ng_f32_to_f16(cases[i].x);
    CHECK(got == cases[i].want, cases[i].name, "%a -> %04x, want %04x", cases[i].x, got,
          cases[i].want);
  }
  uint16_t nan16 = ng_f32_to_f16(from_bits(0x7f800001));
  CHECK((nan16 & 0x7c00) == 0x7c00 && (nan16 & 0x3ff), "f16 nan stays nan", "got %04x",
        nan16);

  // exact: every f16 number is a float, and widening is exact
  CHECK(ng_f16_to_f32(0x0001) == 0x1p-24f, "f16 to f32 subnormal", "got %a",
        ng_f16_to_f32(0x0001));
  CHECK(ng_f16_to_f32(0x83ff) == -0x1.ff8p-15f, "f16 to f32 negative subnormal", "got %a",
        ng_f16_to_f32(0x83ff));
  CHECK(ng_f16_to_f32(0x3555) == 0.333251953125f, "f16 to f32 normal", "got %a",
        ng_f16_to_f32(0x3555));
  CHECK(ng_f16_to_f32(0x7bff) == 65504.0f, "f16 to f32 max", "got %a",
        ng_f16_to_f32(0x7bff));
  CHECK(isinf(ng_f16_to_f32(0xfc00)) && ng_f16_to_f32(0xfc00) < 0, "f16 to f32 -inf",
        "got %a", ng_f16_to_f32(0xfc00));
  CHECK(isnan(ng_f16_to_f32(0x7c01)) && isnan(ng_f16_to_f32(0xfe00)), "f16 to f32 nan",
        "got %a", ng_f16_to_f32(0x7c01));
  CHECK(signbit(ng_f16_to_f32(0x8000)) && ng_f16_to_f32(0x8000) == 0, "f16 to f32 -0",
        "got %a", ng_f16_to_f32(0x8000));

  int bad = 0;
  for (uint32_t h = 0; h <= 0xffff; h++) {
    float v = ng_f16_to_f32((uint16_t)h);
    uint16_t back = ng_f32_to_f16(v);
    bad += isnan(v) ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h;
  }
  CHECK(bad == 0, "f16 exhaustive round trip", "%d values changed", bad);

  // Every 4099th float up to past the overflow threshold, both signs.
  bad = 0;
  for (uint32_t u = 0; u < 0x47900000u; u += 4099) {
    float x = from_bits(u);
    bad += !f16_is_nearest(x) || ng_f32_to_f16(-x) != (ng_f32_to_f16(x) | 0x8000);
  }
  CHECK(bad == 0, "f16 sweep rounds to nearest even", "%d values misrounded", bad);
}

// ---------------------------------------------------------------------------

static const float k_f32[6] = {1.0f, -2.0f, 3.5f, 0.0f, 1e-3f, -7.0f};
static const uint16_t k_f16[3] = {0x3c00, 0x0001, 0xfc00};
static const int32_t k_i32[4] = {1, -2, INT32_MAX, INT32_MIN};
static const int64_t k_i64_big[3] = {5, -6, (int64_t)1 << 40};
static const int64_t k_i64[2] = {7, -8};
static const float k_scalar = 42.0f;

// Builds the round-trip file; order of addition is the order on disk.
static int save_roundtrip(const char *path) {
  uint16_t bf16[4];
  const float bf16_src[4] = {1.0f, -2.5f, 0.15625f, 3e38f};
  for (int i = 0; i < 4; i++) bf16[i] = ng_f32_to_bf16(bf16_src[i]);
  ng_st_writer *w = ng_st_writer_new();
  ng_st_writer_meta(w, "format", "pt");
  ng_st_writer_meta(w, "step", "12");
  ng_st_writer_add(w, "f32", NG_F32, 2, (const int64_t[]){2, 3}, k_f32);
  ng_st_writer_add(w, "bf16", NG_BF16, 1, (const int64_t[]){4}, bf16);
  ng_st_writer_add(w, "f16", NG_F16, 1, (const int64_t[]){3}, k_f16);
  ng_st_writer_add(w, "i32", NG_I32, 2, (const int64_t[]){2, 2}, k_i32);
  ng_st_writer_add(w, "i64big", NG_I64, 1, (const int64_t[]){3}, k_i64_big);
  ng_st_writer_add(w, "i64", NG_I64, 1, (const int64_t[]){2}, k_i64);
  ng_st_writer_add(w, "empty", NG_F32, 2, (const int64_t[]){0, 5}, NULL);
  ng_st_writer_add(w, "scalar", NG_F32, 0, NULL, &k_scalar);
  int rc = ng_st_writer_save(w, path);
  ng_st_writer_free(w);
  return rc;
}

static bool dir_has_temp_file(const char *dir) {
  DIR *d = opendir(dir);
  NG_ASSERT(d);
  bool found = false;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    found |= strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return found;
}

static void test_roundtrip_layout(const char *path) {
  size_t n;
  uint8_t *bytes = read_bytes(path, &n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
  CHECK(hlen % 8 == 0 && 8 + hlen <= n, "writer pads header to 8 bytes", "length %llu",
        (unsigned long long)hlen);
  static const char prefix[] =
      "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"12\"},"
      "\"f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}";
  CHECK(n > 8 + sizeof prefix && memcmp(bytes + 8, prefix, sizeof prefix - 1) == 0,
        "writer header JSON", "header: %.*s", (int)(hlen < 300 ? hlen : 300), bytes + 8);
  CHECK(bytes[8 + hlen - 1] == ' ' || bytes[8 + hlen - 1] == '}',
        "header ends in padding", "last byte %02x", bytes[8 + hlen - 1]);
  free(bytes);
}

static void test_roundtrip(void) {
  const char *path = tmp_path("rt.safetensors");
  CHECK(save_roundtrip(path) == 0, "writer saves", "%s", ng_error());
  CHECK(!dir_has_temp_file(g_dir), "writer leaves no temp file", "found *.tmp.* in %s",
        g_dir);
  test_roundtrip_layout(path);

  const char *path2 = tmp_path("rt2.safetensors");
  CHECK(save_roundtrip(path2) == 0, "writer saves again", "%s", ng_error());
  size_t n1, n2;
  uint8_t *b1 = read_bytes(path, &n1), *b2 = read_bytes(path2, &n2);
  CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0, "writer output is deterministic",
        "sizes %zu vs %zu", n1, n2);
  free(b1);
  free(b2);

  ng_st_file f;
  int rc = ng_st_open(&f, path);
  CHECK(rc == 0, "round trip opens", "%s", ng_error());
  if (rc != 0) return;
  static const char *const order[8] = {"f32",    "bf16", "f16",   "i32",
                                       "i64big", "i64",  "empty", "scalar"};
  bool in_order = f.n == 8;
  for (int i = 0; in_order && i < 8; i++) {
    in_order = strcmp(f.tensors[i].name, order[i]) == 0;
  }
  CHECK(in_order, "tensors in data order", "n=%d", f.n);
  CHECK(f.n_meta == 2 && strcmp(ng_st_meta(&f, "format"), "pt") == 0 &&
            strcmp(ng_st_meta(&f, "step"), "12") == 0 && ng_st_meta(&f, "nope") == NULL,
        "metadata round trip", "n_meta=%d", f.n_meta);

  // exact below: F32 is stored as is, and the bf16 and f16 values are their widenings
  float f32[6] = {0};
  CHECK(ng_st_load_f32(&f, "f32", 2, (const int64_t[]){2, 3}, f32) == 0 &&
            memcmp(f32, k_f32, sizeof f32) == 0,
        "F32 round trip", "%s", ng_error());
  const ng_st_tensor *t = ng_st_find(&f, "bf16");
  float bf[4] = {0};
  CHECK(t && t->dtype == NG_BF16 && t->numel == 4 && ng_st_to_f32(&f, t, bf) == 0 &&
            bf[0] == 1.0f && bf[1] == -2.5f && bf[2] == 0.15625f &&
            fabsf(bf[3] - 3e38f) < 3e36f,
        "BF16 round trip", "%g %g %g %g", bf[0], bf[1], bf[2], bf[3]);
  float h[3] = {0};
  CHECK(ng_st_load_f32(&f, "f16", 1, (const int64_t[]){3}, h) == 0 && h[0] == 1.0f &&
            h[1] == 0x1p-24f && isinf(h[2]) && h[2] < 0,
        "F16 round trip", "%a %a %a", h[0], h[1], h[2]);
  int32_t i32[4] = {0};
  CHECK(ng_st_load_i32(&f, "i32", 2, (const int64_t[]){2, 2}, i32) == 0 &&
            memcmp(i32, k_i32, sizeof i32) == 0,
        "I32 round trip", "%s", ng_error());
  int32_t i64[2] = {0};
  CHECK(ng_st_load_i32(&f, "i64", 1, (const int64_t[]){2}, i64) == 0 && i64[0] == 7 &&
            i64[1] == -8,
        "I64 round trip", "%s", ng_error());
  t = ng_st_find(&f, "empty");
  CHECK(t && t->ndim == 2 && t->shape[0] == 0 && t->shape[1] == 5 && t->numel == 0 &&
            t->begin == t->end &&
            ng_st_load_f32(&f, "empty", 2, (const int64_t[]){0, 5}, NULL) == 0,
        "0-element tensor round trip", "%s", ng_error());
  float scalar = 0;
  t = ng_st_find(&f, "scalar");
  CHECK(t && t->ndim == 0 && t->numel == 1 &&
            ng_st_load_f32(&f, "scalar", 0, NULL, &scalar) == 0 && scalar == 42.0f,
        "scalar round trip", "%s", ng_error());

  int32_t big[3];
  CHECK(ng_st_load_i32(&f, "i64big", 1, (const int64_t[]){3}, big) == -1 &&
            strstr(ng_error(), "\"i64big\"") && strstr(ng_error(), "does not fit"),
        "I64 out of int32 range is an error", "%s", ng_error());
  CHECK(ng_st_load_f32(&f, "missing", 1, (const int64_t[]){1}, f32) == -1 &&
            strstr(ng_error(), "rt.safetensors: tensor \"missing\" is missing"),
        "missing tensor named", "%s", ng_error());
  CHECK(ng_st_load_f32(&f, "f32", 2, (const int64_t[]){3, 2}, f32) == -1 &&
            strstr(ng_error(),
                   "rt.safetensors: tensor \"f32\" has shape [2,3], "
                   "expected [3,2]"),
        "wrong shape named", "%s", ng_error());
  CHECK(ng_st_load_f32(&f, "f32", 1, (const int64_t[]){6}, f32) == -1 &&
            strstr(ng_error(), "expected [6]"),
        "wrong ndim named", "%s", ng_error());
  CHECK(ng_st_load_f32(&f, "i32", 2, (const int64_t[]){2, 2}, f32) == -1 &&
            strstr(ng_error(), "\"i32\"") && strstr(ng_error(), "I32"),
        "wrong dtype for f32 named", "%s", ng_error());
  CHECK(ng_st_load_i32(&f, "f32", 2, (const int64_t[]){2, 3}, i32) == -1 &&
            strstr(ng_error(), "\"f32\"") && strstr(ng_error(), "F32"),
        "wrong dtype for i32 named", "%s", ng_error());
  CHECK(ng_st_check(&f, "bf16", 1, (const int64_t[]){4}, true) == 0 &&
            ng_st_check(&f, "i64", 1, (const int64_t[]){2}, false) == 0 &&
            ng_st_check(&f, "scalar", 0, NULL, true) == 0,
        "check accepts matching tensors", "%s", ng_error());
  CHECK(ng_st_check(&f, "i32", 2, (const int64_t[]){2, 2}, true) == -1 &&
            strstr(ng_error(), "tensor \"i32\" has dtype I32, expected F32, BF16 or F16"),
        "check rejects an integer tensor as floating", "%s", ng_error());
  CHECK(ng_st_check(&f, "f16", 1, (const int64_t[]){3}, false) == -1 &&
            strstr(ng_error(), "tensor \"f16\" has dtype F16, expected I32 or I64"),
        "check rejects a float tensor as integer", "%s", ng_error());
  CHECK(ng_st_check(&f, "f32", 2, (const int64_t[]){2, 2}, true) == -1 &&
            strstr(ng_error(), "has shape [2,3], expected [2,2]"),
        "check rejects a wrong shape", "%s", ng_error());
  CHECK(ng_st_check(&f, "nope", 0, NULL, true) == -1 &&
            strstr(ng_error(), "rt.safetensors: tensor \"nope\" is missing"),
        "check rejects a missing tensor", "%s", ng_error());
  ng_st_close(&f);
  CHECK(is_zeroed(&f), "close zeroes the struct", "fields left set");
  ng_st_close(&f);  // safe on a zeroed struct
}

static void test_writer_errors(void) {
  ng_st_writer *w = ng_st_writer_new();
  ng_st_writer_add(w, "x", NG_F32, 0, NULL, &k_scalar);
  const char *path = tmp_path("nodir/x.safetensors");
  CHECK(ng_st_writer_save(w, path) == -1 && strstr(ng_error(), path),
        "save into a missing directory fails", "%s", ng_error());
  struct stat st;
  CHECK(stat(tmp_path("nodir"), &st) != 0, "failed save creates nothing", "nodir exists");

  // rename() over a directory fails after the temp file was written.
  const char *dir = tmp_path("adir");
  NG_ASSERT(mkdir(dir, 0700) == 0);
  CHECK(ng_st_writer_save(w, dir) == -1 && strstr(ng_error(), dir),
        "save over a directory fails", "%s", ng_error());
  CHECK(!dir_has_temp_file(g_dir), "failed save removes its temp file", "found *.tmp.*");
  rmdir(dir);
  ng_st_writer_free(w);

  // An empty writer gives a valid file with no tensors.
  w = ng_st_writer_new();
  path = tmp_path("nothing.safetensors");
  ng_st_file f;
  CHECK(ng_st_writer_save(w, path) == 0 && ng_st_open(&f, path) == 0 && f.n == 0 &&
            f.n_meta == 0,
        "empty writer round trip", "%s", ng_error());
  ng_st_close(&f);
  ng_st_writer_free(w);
}

// ---------------------------------------------------------------------------
// Hand-crafted files the reader must accept.

static void test_valid_edge_cases(void) {
  ng_st_file f;
  write_st("empty_header.safetensors", 0, "{}", NULL, 0);
  CHECK(ng_st_open(&f, tmp_path("empty_header.safetensors")) == 0 && f.n == 0,
        "header-only file opens", "%s", ng_error());
  ng_st_close(&f);

  write_st("meta_only.safetensors", 0, "{\"__metadata__\":{\"a\":\"b\"}}\n\t  ", NULL, 0);
  CHECK(ng_st_open(&f, tmp_path("meta_only.safetensors")) == 0 && f.n == 0 &&
            f.n_meta == 1 && strcmp(ng_st_meta(&f, "a"), "b") == 0,
        "metadata-only file with whitespace padding opens", "%s", ng_error());
  ng_st_close(&f);

  // Zero-size tensors anywhere in the tiling, sorted before a tensor at the same offset.
  write_st("zeros.safetensors", 0,
           "{\"z2\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"z1\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
           NULL, 4);
  int rc = ng_st_open(&f, tmp_path("zeros.safetensors"));
  CHECK(rc == 0 && f.n == 3 && strcmp(f.tensors[0].name, "z1") == 0 &&
            strcmp(f.tensors[1].name, "a") == 0 && strcmp(f.tensors[2].name, "z2") == 0,
        "zero-size tensors in the tiling", "%s", ng_error());
  ng_st_close(&f);

  // A header of odd length leaves the data unaligned; conversions must cope.
  const float vals[3] = {1.5f, -2.0f, 0x1p-130f};
  const char *hdr = "{\"v\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}";
  NG_ASSERT(strlen(hdr) % 4 != 0);
  write_st("unaligned.safetensors", 0, hdr, vals, sizeof vals);
  float got[3] = {0};  // exact below: F32 as stored, F16 widened
  rc = ng_st_open(&f, tmp_path("unaligned.safetensors"));
  CHECK(rc == 0 && ng_st_load_f32(&f, "v", 1, (const int64_t[]){3}, got) == 0 &&
            memcmp(got, vals, sizeof vals) == 0,
        "unaligned data converts", "%s", ng_error());
  ng_st_close(&f);

  const uint16_t halfs[2] = {0x3c00, 0x8001};
  write_st("unaligned16.safetensors", 0,
           "{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", halfs,
           sizeof halfs);
  rc = ng_st_open(&f, tmp_path("unaligned16.safetensors"));
  CHECK(rc == 0 && ng_st_to_f32(&f, &f.tensors[0], got) == 0 && got[0] == 1.0f &&
            got[1] == -0x1p-24f,
        "unaligned F16 converts", "%s", ng_error());
  ng_st_close(&f);
}

// ---------------------------------------------------------------------------
// One hand-crafted bad file per validation rule.

#define T1(name, dtype, shape, offsets)                                                 \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets \
  "}"

static void test_bad_files(void) {
  write_bytes(tmp_path("bad_empty.safetensors"), "", 0);
  expect_bad_file("empty file", "bad_empty.safetensors", NULL, "too short");
  write_bytes(tmp_path("bad_short.safetensors"), "\x02\0\0\0\0", 5);
  expect_bad_file("5-byte file", "bad_short.safetensors", NULL, "too short");
  expect_bad_file("missing file", "does_not_exist.safetensors", NULL, "cannot open");
  NG_ASSERT(mkdir(tmp_path("dir.safetensors"), 0700) == 0);
  expect_bad_file("directory", "dir.safetensors", NULL, "not a regular file");
  rmdir(tmp_path("dir.safetensors"));

  write_st("bad_hlen_limit.safetensors", NG_ST_MAX_HEADER + 1ull, "{}", NULL, 0);
  expect_bad_file("header length over limit", "bad_hlen_limit.safetensors", NULL,
                  "exceeds the limit");
  write_st("bad_hlen_file.safetensors", 999999, "{}", NULL, 110);
  expect_bad_file("header longer than file", "bad_hlen_file.safetensors", NULL,
                  "header length 999999 exceeds file size 120");
  write_st("bad_hlen_huge.safetensors", UINT64_MAX, "{}", NULL, 0);
  expect_bad_file("header length 2^64-1", "bad_hlen_huge.safetensors", NULL, "exceeds");

  const char *w24 = "{" T1("w", "F32", "[2,3]", "[0,24]") "}";
  expect_bad("truncated", w24, 20, "w", "past the end");
  expect_bad("trailing", w24, 28, NULL, "trailing bytes");
  expect_bad("no_tensors_but_data", "{}", 8, NULL, "trailing bytes");
  expect_bad("not_json", "{\"w\": {", 0, NULL, "header is not valid JSON");
  expect_bad("trailing_garbage", "{} x", 0, NULL, "header is not valid JSON");
  expect_bad("zero_length_header", "", 0, NULL, "header is not valid JSON");
  expect_bad("leading_space", " {}", 0, NULL, "header is not a JSON object");
  expect_bad("array_header", "[1,2,3]", 0, NULL, "header is not a JSON object");
  expect_bad("string_header", "\"{}\"", 0, NULL, "header is not a JSON object");
  expect_bad("entry_not_object", "{\"w\":5}", 0, "w", "not a JSON object");
  expect_bad("dtype_fp8", "{" T1("w", "F8_E4M3", "[2]", "[0,2]") "}", 2, "w",
             "unknown dtype \"F8_E4M3\"");
  expect_bad("dtype_q4", "{" T1("w", "Q4", "[2]", "[0,1]") "}", 1, "w", "unknown dtype");
  expect_bad("dtype_number", "{\"w\":{\"dtype\":4,\"shape\":[],\"data_offsets\":[0,4]}}",
             4, "w", "dtype is not a string");
  expect_bad("shape_negative", "{" T1("w", "F32", "[-2,3]", "[0,24]") "}", 24, "w",
             "shape[0]");
  expect_bad("shape_fraction", "{" T1("w", "F32", "[2,1.5]", "[0,12]") "}", 12, "w",
             "shape[1]");
  expect_bad("shape_huge", "{" T1("w", "F32", "[1e300]", "[0,4]") "}", 4, "w",
             "shape[0]");
  expect_bad("shape_string", "{" T1("w", "F32", "[\"2\"]", "[0,8]") "}", 8, "w",
             "shape[0]");
  expect_bad("shape_not_array", "{" T1("w", "F32", "2", "[0,8]") "}", 8, "w",
             "shape is not an array");
  expect_bad("shape_9_dims", "{" T1("w", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4,
             "w", "9 dimensions");
  expect_bad("shape_overflow",
             "{" T1("w", "F32", "[4294967296,4294967296,4294967296]", "[0,4]") "}", 4,
             "w", "overflows");
  expect_bad("size_mismatch", "{" T1("param.x", "F32", "[2,3]", "[0,20]") "}", 20,
             "param.x", "shape [2,3] x F32 is 24 bytes but data_offsets span 20");
  expect_bad("offsets_reversed", "{" T1("w", "U8", "[4]", "[8,4]") "}", 8, "w",
             "data_offsets");
  expect_bad("offsets_three", "{" T1("w", "U8", "[4]", "[0,4,8]") "}", 8, "w",
             "data_offsets");
  expect_bad("offsets_negative", "{" T1("w", "U8", "[0]", "[-1,-1]") "}", 0, "w",
             "data_offsets");
  expect_bad("offsets_fraction", "{" T1("w", "U8", "[1]", "[0.5,1.5]") "}", 2, "w",
             "data_offsets");
  expect_bad("first_not_at_zero", "{" T1("w", "F32", "[2]", "[4,12]") "}", 12, "w",
             "gap");
  expect_bad("gap",
             "{" T1("a", "F32", "[2]", "[0,8]") "," T1("b", "F32", "[2]", "[12,20]") "}",
             20, "b", "gap");
  expect_bad("overlap",
             "{" T1("a", "F32", "[2]", "[0,8]") "," T1("b", "F32", "[2]", "[4,12]") "}",
             12, "b", "overlap");
  expect_bad("duplicate_name",
             "{" T1("a", "F32", "[1]", "[0,4]") "," T1("a", "F32", "[1]", "[4,8]") "}", 8,
             "a", "duplicate");
  expect_bad("meta_not_string", "{\"__metadata__\":{\"k\":1}}", 0, NULL,
             "value for \"k\" is not a string");
  expect_bad("meta_not_object", "{\"__metadata__\":[\"k\"]}", 0, NULL,
             "not a JSON object");
  expect_bad("meta_duplicate_key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
             NULL, "duplicate __metadata__ key \"k\"");
  expect_bad("meta_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, NULL,
             "duplicate __metadata__");
  expect_bad("missing_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "w",
             "missing \"data_offsets\"");
  expect_bad("missing_dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "w",
             "missing \"dtype\"");
  expect_bad("extra_key",
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
             4, "w", "unexpected key \"x\"");
  expect_bad("repeated_key",
             "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
             "w", "duplicate key \"dtype\"");
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  NG_ASSERT(d);
  char path[512];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  CHECK(rmdir(dir) == 0, "test directory removed", "rmdir %s failed", dir);
}

int main(void) {
  NG_ASSERT(mkdtemp(g_dir) != NULL);
  test_bf16();
  test_f16();
  test_roundtrip();
  test_writer_errors();
  test_valid_edge_cases();
  test_bad_files();
  remove_dir(g_dir);
  return TEST_RESULT();
}
