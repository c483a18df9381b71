// normgrow CUDA backend: launch geometry, host-callable (C and CUDA) so that
// tests can check it on a machine without a GPU.
//
// Attention runs in tiles of ATT_TILE query rows x ATT_TILE key rows with
// ATT_THREADS threads (a 16 x 16 grid, each thread owning 4 x 4 scores), head
// dimension at most ATT_HD_MAX. Shared memory per block must stay within
// NGC_SMEM_OPTIN, the H100/H200 (sm_90) per-block opt-in limit.
#ifndef NORMGROW_ACCEL_CUDA_LAUNCH_H
#define NORMGROW_ACCEL_CUDA_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATT_TILE 64
#define ATT_THREADS 256
#define ATT_HD_MAX 128
#define NGC_SMEM_OPTIN (227 * 1024)
#define NGC_GRID_Y_MAX 65535

// Threads per block of the row kernels (RMSNorm, row_rms, the fused loss).
#define ROW_THREADS 256
// Rows per block of the RMSNorm dw partial sums (fixed: results do not depend on the GPU).
#define NORM_ROW_BLOCK 64
// Elements per block of sumsq's first pass.
#define SUMSQ_BLOCK (1 << 14)

#ifdef __CUDACC__
#define NGC_HOST_DEVICE __host__ __device__
#else
#define NGC_HOST_DEVICE
#endif

typedef enum { NGC_ATT_FWD, NGC_ATT_BWD_DQ, NGC_ATT_BWD_DKV } ngc_att_kernel;

// Row stride (in floats) of an fp32 [ATT_TILE, hd] tile in shared memory:
// hd + 1, so that the 16 lanes reading one column of 16 rows hit 16 banks.
static inline NGC_HOST_DEVICE int64_t ngc_att_ld(int64_t hd) { return hd + 1; }
// Tiles covering n rows.
static inline NGC_HOST_DEVICE int64_t ngc_tiles(int64_t n, int64_t tile) {
  return (n + tile - 1) / tile;
}
// Dynamic shared memory of one attention block, in bytes. bf16 selects the
// tensor-core forward (hd a multiple of 16), which holds bf16 tiles.
size_t ngc_att_smem(ngc_att_kernel k, int64_t hd, bool bf16);
// Whether the bf16 tensor-core attention kernels take this head dimension.
bool ngc_att_wmma_ok(int64_t hd);
// Dynamic shared memory of the top-k fused loss: a bit per vocabulary id.
size_t ngc_topk_smem(int64_t V);

// The teacher cache's top-k selection (topk.cu, one block of ROW_THREADS per
// row): a radix select of the k-th largest value over NGC_SELECT_PASSES digits
// of NGC_SELECT_BITS of each value's key, then every thread takes the values
// above it and the lowest tied ones from its own contiguous part of the row,
// at offsets that a scan over the threads gives (ascending ids, no atomics in
// the output). The pieces that decide the result, host-callable for tests:
#define NGC_SELECT_BITS 8
#define NGC_SELECT_BINS (1 << NGC_SELECT_BITS)
#define NGC_SELECT_PASSES (32 / NGC_SELECT_BITS)
// A float's key: unsigned integers in the floats' order (-0 just below +0).
static inline NGC_HOST_DEVICE uint32_t ngc_select_key(float x) {
  union {
    float f;
    uint32_t u;
  } b = {x};
  return b.u & 0x80000000u ? ~b.u : b.u | 0x80000000u;
}
// Of the counts of one pass's digits (hist [NGC_SELECT_BINS]), the digit that
// holds the value of rank *left (1-based, from the largest); *left becomes its
// rank among the values of that digit.
static inline NGC_HOST_DEVICE uint32_t ngc_select_digit(const uint32_t *hist, uint32_t *left) {
  uint32_t d = NGC_SELECT_BINS - 1;
  while (*left > hist[d]) *left -= hist[d--];
  return d;
}
// Thread t of n: its part [*lo, *hi) of a row of V values.
static inline NGC_HOST_DEVICE void ngc_select_part(int64_t V, int64_t n, int64_t t, int64_t *lo,
                                                   int64_t *hi) {
  *lo = V * t / n;
  *hi = V * (t + 1) / n;
}
// c [n] <- its exclusive prefix sums.
static inline NGC_HOST_DEVICE void ngc_select_scan(uint32_t *c, int64_t n) {
  uint32_t sum = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t v = c[i];
    c[i] = sum;
    sum += v;
  }
}

#ifdef __cplusplus
}
#endif

#endif
