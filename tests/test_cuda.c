// The CUDA backend against the CPU reference, op by op, at odd shapes (tiles
// cut by every size), through upload and download; the checks a first run on a
// GPU needs (cuBLAS's bf16 rounding and fp32 without TF32, bf16 attention against
// the CPU's own bf16 kernel, the loss at Qwen3's vocabulary under every
// divergence, RMSNorm's dw past 131k rows, NG_CUDA_SYNC naming a faulting
// launch); a single-process NCCL smoke; NCCL's refusals (the communicator of its
// ranks). Without a usable device it checks only the launch geometry, the top-k
// selection's steps and those
// refusals and prints one "skip" line saying why (a failure instead when
// NG_REQUIRE_GPU is set, as tools/gpu_check.sh does).
//
//   test_cuda [GROUP...]   only those groups (default: all); "sanitize" is the small
//                          set compute-sanitizer runs: attention_wide, loss, optimizer
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if __has_include(<nccl.h>)
#include <cuda_runtime_api.h>
#include <nccl.h>
#define HAVE_NCCL 1
#endif

#include "../accel/cuda/launch.h"
#include "check.h"
#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/backend_cuda.h"
#include "normgrow/common.h"
#include "normgrow/registry.h"
#include "normgrow/rng.h"
#include "normgrow/topk.h"

// ------------------------------------------------------------------ host-side: launch geometry

static void test_launch_geometry(void) {
  bool fits = true;
  for (int64_t hd = 1; hd <= ATT_HD_MAX; hd++)
    for (int k = NGC_ATT_FWD; k <= NGC_ATT_BWD_DKV; k++)
      fits = fits && ngc_att_smem((ngc_att_kernel)k, hd, false) <= NGC_SMEM_OPTIN &&
             (!ngc_att_wmma_ok(hd) || ngc_att_smem((ngc_att_kernel)k, hd, true) <= NGC_SMEM_OPTIN);
  CHECK(fits, "cuda attention shared memory within the sm_90 opt-in limit for hd 1..128",
        "hd 128 dK/dV needs %zu bytes", ngc_att_smem(NGC_ATT_BWD_DKV, 128, false));
  // hd 128: Q and K-or-V [64, 129] + P [64, 65] floats; dK/dV: 4 tiles + P and dS.
  CHECK(ngc_att_smem(NGC_ATT_FWD, 128, false) == (2 * 64 * 129 + 64 * 65) * 4 &&
            ngc_att_smem(NGC_ATT_BWD_DKV, 128, false) == (4 * 64 * 129 + 2 * 64 * 65) * 4,
        "cuda attention shared memory sizes at hd 128", "fwd %zu dkv %zu",
        ngc_att_smem(NGC_ATT_FWD, 128, false), ngc_att_smem(NGC_ATT_BWD_DKV, 128, false));
  // bf16 dK/dV at hd 128: K, V, Q, dO [64, 136] bf16, S and dP [64, 68] fp32, P and dS
  // [64, 72] bf16, the dK and dV accumulators [64, 132] fp32.
  CHECK(ngc_att_smem(NGC_ATT_BWD_DKV, 128, true) ==
            64 * (4 * 136 * 2 + 2 * 68 * 4 + 2 * 72 * 2 + 2 * 132 * 4) &&
            ngc_att_smem(NGC_ATT_FWD, 128, true) == 64 * (2 * 136 * 2 + 68 * 4 + 72 * 2 + 132 * 4),
        "cuda bf16 attention shared memory sizes at hd 128", "fwd %zu dkv %zu",
        ngc_att_smem(NGC_ATT_FWD, 128, true), ngc_att_smem(NGC_ATT_BWD_DKV, 128, true));
  CHECK(ngc_att_wmma_ok(16) && ngc_att_wmma_ok(128) && !ngc_att_wmma_ok(40) &&
            !ngc_att_wmma_ok(144) && !ngc_att_wmma_ok(0),
        "cuda bf16 attention takes head dims that are multiples of 16 up to 128", "wrong rule");
  // The paper-scale block: T 4096 in 64 tiles; B*H = 32 and B*KV = 8 blocks in y.
  CHECK(ngc_tiles(4096, ATT_TILE) == 64 && ngc_tiles(4097, ATT_TILE) == 65 && ngc_tiles(1, 64) == 1,
        "cuda attention tile counts", "%lld", (long long)ngc_tiles(4097, ATT_TILE));
  CHECK(ATT_THREADS == 16 * 16 && ATT_TILE == 16 * 4 && ATT_HD_MAX <= 16 * 8,
        "cuda attention thread grid covers a tile (16 x 16 threads, 4 x 4 scores, 8 columns of hd)",
        "constants changed");
  // Qwen3's vocabulary: a bit per id fits the default 48 KiB without opting in.
  CHECK(ngc_topk_smem(151936) == 4748 * 4 && ngc_topk_smem(151936) <= 48 * 1024,
        "cuda top-k bitmask for a 151936-id vocabulary", "%zu bytes", ngc_topk_smem(151936));
}

// ------------------------------------------------------------------ host-side: the top-k selection

// topk.cu's block on the host, thread after thread, through launch.h's pieces
// (the keys, each pass's digit, the parts, the scans): ids, vals [k] of x [V].
static void select_like_block(const float *x, int64_t V, int64_t k, uint32_t *ids, float *vals) {
  uint32_t prefix = 0, left = (uint32_t)k, mask = 0;
  for (int pass = 0; pass < NGC_SELECT_PASSES; pass++) {
    int shift = 32 - NGC_SELECT_BITS * (pass + 1);
    uint32_t hist[NGC_SELECT_BINS] = {0};
    for (int64_t j = 0; j < V; j++) {
      uint32_t key = ngc_select_key(x[j]);
      if ((key & mask) == prefix) hist[(key >> shift) & (NGC_SELECT_BINS - 1)]++;
    }
    prefix |= ngc_select_digit(hist, &left) << shift;
    mask |= (uint32_t)(NGC_SELECT_BINS - 1) << shift;
  }
  uint32_t above[ROW_THREADS] = {0}, tied[ROW_THREADS] = {0}, first_tied = (uint32_t)k - left;
  int64_t lo, hi;
  for (int t = 0; t < ROW_THREADS; t++) {
    ngc_select_part(V, ROW_THREADS, t, &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
      above[t] += ngc_select_key(x[j]) > prefix;
      tied[t] += ngc_select_key(x[j]) == prefix;
    }
  }
  ngc_select_scan(above, ROW_THREADS);
  ngc_select_scan(tied, ROW_THREADS);
  for (int t = 0; t < ROW_THREADS; t++) {
    ngc_select_part(V, ROW_THREADS, t, &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
      uint32_t key = ngc_select_key(x[j]);
      int64_t slot = -1;
      if (key > prefix) {
        slot = above[t]++;
      } else if (key == prefix) {
        if (tied[t] < left) slot = first_tied + tied[t];
        tied[t]++;
      }
      if (slot >= 0) ids[slot] = (uint32_t)j, vals[slot] = x[j];
    }
  }
}

static const float *sort_row;  // the row compared by by_value_then_id
static int by_value_then_id(const void *a, const void *b) {
  uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
  if (sort_row[i] != sort_row[j]) return sort_row[i] > sort_row[j] ? -1 : 1;
  return i < j ? -1 : i > j;
}
static int by_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

// Whether ids, vals [k] are the k largest of x [V] by (value, then the lowest id)
// in the kernel's order (those above the k-th value ascending, then the tied
// ones), and hold the values ng_top_k selects (the same multiset).
static bool selection_ok(const float *x, int64_t V, int64_t k, const uint32_t *ids, const float *vals) {
  uint32_t *order = ng_xmalloc((size_t)V * sizeof(uint32_t)), *cpu_ids = ng_xmalloc((size_t)k * sizeof(uint32_t));
  float *cpu_vals = ng_xmalloc((size_t)k * sizeof(float)), *got = ng_xmalloc((size_t)k * sizeof(float));
  for (int64_t j = 0; j < V; j++) order[j] = (uint32_t)j;
  sort_row = x;
  qsort(order, (size_t)V, sizeof *order, by_value_then_id);
  float kth = x[order[k - 1]];
  qsort(order, (size_t)k, sizeof *order, by_value_then_id);  // (already so)
  bool ok = true;
  int64_t n_above = 0;
  for (int64_t i = 0; i < k; i++) n_above += x[order[i]] > kth;
  for (int64_t i = 0; i < k; i++) {
    ok = ok && vals[i] == x[ids[i]] && ids[i] < V;
    bool is_above = i < n_above;
    ok = ok && (is_above ? x[ids[i]] > kth : x[ids[i]] == kth);
    if (i > 0 && i != n_above) ok = ok && ids[i] > ids[i - 1];  // ascending in each group
  }
  for (int64_t i = n_above; i < k && ok; i++) {  // the lowest tied ids
    int64_t lower = 0;
    for (uint32_t j = 0; j < ids[i]; j++) lower += x[j] == kth;
    ok = lower == i - n_above;
  }
  ng_top_k(x, V, k, cpu_ids, cpu_vals);
  memcpy(got, vals, (size_t)k * sizeof(float));
  qsort(cpu_vals, (size_t)k, sizeof(float), by_float);
  qsort(got, (size_t)k, sizeof(float), by_float);
  ok = ok && memcmp(cpu_vals, got, (size_t)k * sizeof(float)) == 0;
  free(order), free(cpu_ids), free(cpu_vals), free(got);
  return ok;
}

// Rows of Qwen3's width and of odd ones, k from 1 to V, values spread or
// crowded onto a few levels (ties at the k-th value), negative and zero ones.
static void test_topk_selection(void) {
  struct {
    int64_t V, k;
    int levels;  // 0: random floats; n: n values only
  } cases[] = {{151936, 32, 0}, {151936, 1, 0}, {1000, 7, 0}, {1000, 1000, 0}, {37, 5, 0},
               {300, 256, 0},   {1000, 50, 3},  {1000, 999, 2}, {255, 17, 4}, {5000, 64, 1}};
  ng_rng r;
  ng_rng_seed(&r, 11);
  int bad = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t V = cases[c].V, k = cases[c].k;
    float *x = ng_xmalloc((size_t)V * sizeof(float)), *vals = ng_xmalloc((size_t)k * sizeof(float));
    uint32_t *ids = ng_xmalloc((size_t)k * sizeof(uint32_t));
    for (int64_t j = 0; j < V; j++)
      x[j] = cases[c].levels ? (float)ng_rng_below(&r, (uint64_t)cases[c].levels) - 1.0f
                             : (float)(ng_rng_uniform(&r) * 40.0 - 20.0);
    select_like_block(x, V, k, ids, vals);
    if (!selection_ok(x, V, k, ids, vals)) {
      printf("# top-k selection differs: V %lld, k %lld, %d levels\n", (long long)V, (long long)k, cases[c].levels);
      bad++;
    }
    free(x), free(vals), free(ids);
  }
  CHECK(bad == 0, "cuda top-k selection (its steps on the host): the k largest, ties by the lowest ids, "
        "ng_top_k's values", "%d of 10 cases differ", bad);
  CHECK(ngc_select_key(-1.0f) < ngc_select_key(-0.0f) && ngc_select_key(-0.0f) < ngc_select_key(0.0f) &&
            ngc_select_key(0.0f) < ngc_select_key(1e-30f) && ngc_select_key(3.0f) < ngc_select_key(INFINITY) &&
            ngc_select_key(-INFINITY) < ngc_select_key(-3e38f),
        "cuda top-k keys order the floats", "wrong order");
}

// ------------------------------------------------------------------ device vs CPU

static ng_backend *cpu, *dev;
static const char *label;  // "cuda fp32", "cuda bf16": names every check
static ng_rng rng;

static float *rnd(int64_t n, double std) {
  float *x = ng_xmalloc((size_t)(n ? n : 1) * sizeof(float));
  ng_rng_fill_normal(&rng, x, (size_t)n, 0.0, std);
  return x;
}
static void *up(const void *h, size_t bytes) {
  void *d = dev->alloc(dev, bytes);
  dev->upload(dev, d, h, bytes);
  return d;
}
static float *upf(const float *h, int64_t n) { return up(h, (size_t)n * sizeof(float)); }
static float *downf(const float *d, int64_t n) {
  float *h = ng_xmalloc((size_t)(n ? n : 1) * sizeof(float));
  dev->download(dev, h, d, (size_t)n * sizeof(float));
  return h;
}


// Tolerances: fp32 from the golden contract; bf16 forward 3e-2 (gradients of
// bf16 products are compared at 0.1 relative L2 in the contract, here per tensor).
static bool bf16_mode;
static double tol_fwd(void) { return bf16_mode ? 3e-2 : 1e-4; }
static double tol_grad(void) { return bf16_mode ? 1e-1 : 1e-3; }

// Downloads the device result d [n], compares with the CPU's h [n], frees d's copy.
static void expect(const char *what, const float *d, const float *h, int64_t n, double tol) {
  float *got = downf(d, n);
  double e = ng_test_max_rel(got, h, n);
  char name[200];
  snprintf(name, sizeof name, "%s %s", label, what);
  CHECK(e <= tol, name, "relative error %.3g > %.3g", e, tol);
  free(got);
}

// Gradients by the golden contract (docs/golden-contract.md). fp32: per tensor
// with its scale floor: with G the largest max|expected| of the n tensors, tensor
// i's error is max|got - exp| / max(max|exp|, 1e-3 G), so that a gradient zero by
// symmetry (T = 1: dq, dk) is rounding noise compared with the others' scale, not
// with its own; at most 1e-3. bf16: all of them together by relative L2, at most
// 0.1 (there such a gradient is bf16 noise of about 1e-3 G).
static void expect_grads(const char *what, const char *const names[], float *const d[],
                         float *const h[], const int64_t n[], int count) {
  double G = 0.0, dsum = 0.0, ssum = 0.0;
  for (int i = 0; i < count; i++)
    for (int64_t j = 0; j < n[i]; j++) G = fmax(G, fabs((double)h[i][j]));
  char name[240];
  for (int i = 0; i < count; i++) {
    float *got = downf(d[i], n[i]);
    double diff = 0.0, scale = 0.0;
    for (int64_t j = 0; j < n[i]; j++) {
      double e = (double)got[j] - h[i][j];
      diff = fmax(diff, isnan(got[j]) ? INFINITY : fabs(e));
      scale = fmax(scale, fabs((double)h[i][j]));
      dsum += isnan(got[j]) ? INFINITY : e * e;
      ssum += (double)h[i][j] * h[i][j];
    }
    free(got);
    if (bf16_mode) continue;
    double e = diff / fmax(fmax(scale, 1e-3 * G), 1e-30);
    snprintf(name, sizeof name, "%s %s %s (scale floor 1e-3 x %.3g)", label, what, names[i], G);
    CHECK(e <= 1e-3, name, "error %.3g > 1e-3", e);
  }
  if (!bf16_mode) return;
  double e = sqrt(dsum / fmax(ssum, 1e-300));
  snprintf(name, sizeof name, "%s %s, all gradients: relative L2 %.2g", label, what, e);
  CHECK(e <= 0.1, name, "above 0.1");
}

static void test_matmul(void) {
  const int64_t M = 37, N = 29, K = 53;
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    float *A = rnd(M * K, 1.0), *B = rnd(K * N, 1.0), *C = rnd(M * N, 1.0);
    float *dA = upf(A, M * K), *dB = upf(B, K * N), *dC = upf(C, M * N);
    cpu->matmul(cpu, ta, tb, M, N, K, A, B, 0.5f, C);
    dev->matmul(dev, ta, tb, M, N, K, dA, dB, 0.5f, dC);
    char what[64];
    snprintf(what, sizeof what, "matmul ta=%d tb=%d beta=0.5", ta, tb);
    expect(what, dC, C, M * N, tol_fwd());
    free(A), free(B), free(C);
    dev->free(dev, dA), dev->free(dev, dB), dev->free(dev, dC);
  }
  float *C = rnd(6, 1.0), *dC = upf(C, 6);
  cpu->matmul(cpu, false, false, 2, 3, 0, NULL, NULL, 0.25f, C);
  dev->matmul(dev, false, false, 2, 3, 0, NULL, NULL, 0.25f, dC);
  expect("matmul K=0 scales C by beta", dC, C, 6, 0.0);
  for (int i = 0; i < 6; i++) C[i] = NAN;  // beta 0 must not read C
  dev->upload(dev, dC, C, 6 * sizeof(float));
  dev->matmul(dev, false, false, 2, 3, 0, NULL, NULL, 0.0f, dC);
  float zero[6] = {0};
  expect("matmul K=0 beta=0 writes zeros, not reading C (NaN there)", dC, zero, 6, 0.0);
  free(C);
  dev->free(dev, dC);
}

// What cuBLAS does to the inputs, exactly: A [M, K] times the identity [K, K] is A
// as the matmul's inputs see it (every product is a * 1 or a * 0, every sum exact).
// fp32 mode keeps 1 + 2^-12 and 1 + 2^-20 (TF32's 10-bit mantissa would round them
// to 1); bf16 mode rounds A to nearest, ties to even, as the CPU's ng_round_bf16
// does, on values where truncation or ties away from zero would differ.
static void test_matmul_rounding(void) {
  enum { M = 8, K = 16 };
  static const float ulp7 = 1.0f / 128, ulp8 = 1.0f / 256;
  float A[M * K], I[K * K] = {0}, want[M * K], trunc[M * K];
  for (int i = 0; i < M * K; i++) {
    float base = (float)(1 + i % 5) * (i % 2 ? -1.0f : 1.0f);
    switch (i % 4) {  // fp32 probes, and bf16 ties and near-ties
      case 0: A[i] = bf16_mode ? base * (1.0f + ulp8) : base * (1.0f + 1.0f / 4096); break;
      case 1: A[i] = bf16_mode ? base * (1.0f + ulp7 + ulp8) : base * (1.0f + 1.0f / 1048576); break;
      case 2: A[i] = base * (1.0f + ulp8 + 1.0f / 65536); break;
      default: A[i] = base * (1.0f + 3.0f / 65536); break;
    }
  }
  for (int k = 0; k < K; k++) I[k * K + k] = 1.0f;
  if (bf16_mode) {
    ng_round_bf16(A, M * K, want);
    for (int i = 0; i < M * K; i++) {
      uint32_t u;
      memcpy(&u, &A[i], sizeof u);
      u &= 0xffff0000u;
      memcpy(&trunc[i], &u, sizeof u);
    }
  } else {
    memcpy(want, A, sizeof A);
  }
  float *dA = upf(A, M * K), *dI = upf(I, K * K), *dC = upf(want, M * K);
  dev->matmul(dev, false, false, M, K, K, dA, dI, 0.0f, dC);
  float *got = downf(dC, M * K);
  char name[160];
  // exact: A times the identity: each output is one product by 1 plus products
  // by 0, whatever the order (and each input rounded to bf16 first in bf16 mode)
  if (bf16_mode) {
    bool differ = memcmp(want, trunc, sizeof want) != 0;
    snprintf(name, sizeof name, "%s matmul rounds its inputs to bf16 to nearest even (%s)", label,
             "a truncating or ties-away rounding fails it");
    CHECK(differ && memcmp(got, want, sizeof want) == 0, name, "got %.9g for %.9g (want %.9g)",
          got[0], A[0], want[0]);
  } else {
    snprintf(name, sizeof name, "%s matmul is plain fp32, no TF32: 1 + 2^-12 and 1 + 2^-20 survive",
             label);
    CHECK(memcmp(got, want, sizeof want) == 0, name, "got %.9g for %.9g", got[0], A[0]);
  }
  free(got);
  dev->free(dev, dA), dev->free(dev, dI), dev->free(dev, dC);
}

static void test_embedding(void) {
  const int64_t V = 41, D = 19, N = 77;
  int32_t tok[77];
  for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)ng_rng_below(&rng, i < 40 ? 5 : V);  // repeats
  float *W = rnd(V * D, 1.0), *out = rnd(N * D, 1.0), *dW = rnd(V * D, 1.0);
  int32_t *dtok = up(tok, sizeof tok);
  float *dWd = upf(W, V * D), *dout = upf(out, N * D), *ddW = upf(dW, V * D);
  cpu->embedding_forward(cpu, tok, W, N, D, out);
  dev->embedding_forward(dev, dtok, dWd, N, D, dout);
  expect("embedding_forward", dout, out, N * D, 0.0);
  cpu->embedding_backward(cpu, tok, out, N, D, dW);
  dev->embedding_backward(dev, dtok, dout, N, D, ddW);
  expect("embedding_backward (accumulates, repeated tokens)", ddW, dW, V * D, 0.0);
  free(W), free(out), free(dW);
  dev->free(dev, dtok), dev->free(dev, dWd), dev->free(dev, dout), dev->free(dev, ddW);
}

// RMSNorm forward and backward at R rows of C; dw sums R / 64 row-block partials
// (131139 rows: 2050 of them, past q/k norms' 2^17 rows of a micro-batch).
static void test_rmsnorm(int64_t R, int64_t C) {
  float *x = rnd(R * C, 2.0), *w = rnd(C, 1.0), *y = rnd(R * C, 1.0), *rs = rnd(R, 1.0);
  float *dy = rnd(R * C, 1.0), *dx = rnd(R * C, 1.0), *dw = rnd(C, 1.0);
  float *dxd = upf(x, R * C), *dwd = upf(w, C), *dyd = upf(y, R * C), *drs = upf(rs, R);
  float *ddy = upf(dy, R * C), *ddx = upf(dx, R * C), *ddw = upf(dw, C);
  char what[120];
  int len = snprintf(what, sizeof what, "rmsnorm R=%lld C=%lld ", (long long)R, (long long)C);
  cpu->rmsnorm_forward(cpu, x, w, R, C, 1e-6f, y, rs);
  dev->rmsnorm_forward(dev, dxd, dwd, R, C, 1e-6f, dyd, drs);
  snprintf(what + len, sizeof what - len, "forward y");
  expect(what, dyd, y, R * C, tol_fwd());
  snprintf(what + len, sizeof what - len, "forward rstd");
  expect(what, drs, rs, R, tol_fwd());
  cpu->rmsnorm_backward(cpu, x, w, rs, dy, R, C, dx, dw);
  dev->rmsnorm_backward(dev, dxd, dwd, drs, ddy, R, C, ddx, ddw);
  snprintf(what + len, sizeof what - len, "backward dx (accumulates)");
  expect(what, ddx, dx, R * C, tol_grad());
  snprintf(what + len, sizeof what - len, "backward dw (accumulates, %lld row blocks)",
           (long long)ngc_tiles(R, NORM_ROW_BLOCK));
  expect(what, ddw, dw, C, tol_grad());
  cpu->rmsnorm_backward(cpu, x, w, rs, dy, R, C, dx, NULL);
  dev->rmsnorm_backward(dev, dxd, dwd, drs, ddy, R, C, ddx, NULL);
  snprintf(what + len, sizeof what - len, "backward without dw");
  expect(what, ddx, dx, R * C, tol_grad());
  float *rms = rnd(R, 1.0), *drms = upf(rms, R);
  cpu->row_rms(cpu, x, R, C, rms);
  dev->row_rms(dev, dxd, R, C, drms);
  snprintf(what + len, sizeof what - len, "row_rms");
  expect(what, drms, rms, R, tol_fwd());
  free(x), free(w), free(y), free(rs), free(dy), free(dx), free(dw), free(rms);
  float *all[] = {dxd, dwd, dyd, drs, ddy, ddx, ddw, drms};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dev->free(dev, all[i]);
}

// channel_scale: y = x gamma in place; dx = dy gamma aliasing dy, dgamma
// accumulated over 3 row blocks (and NULL).
static void test_channel_scale(void) {
  const int64_t R = 131, C = 70;
  float *x = rnd(R * C, 2.0), *g = rnd(C, 1.0), *y = ng_xmalloc((size_t)(R * C) * sizeof(float));
  float *dy = rnd(R * C, 1.0), *dg = rnd(C, 1.0);
  memcpy(y, x, (size_t)(R * C) * sizeof(float));
  float *dxd = upf(x, R * C), *dyd = upf(y, R * C), *dgd = upf(g, C), *ddy = upf(dy, R * C);
  float *ddg = upf(dg, C);
  cpu->channel_scale_forward(cpu, y, g, R, C, y);
  dev->channel_scale_forward(dev, dyd, dgd, R, C, dyd);
  expect("channel_scale_forward (in place)", dyd, y, R * C, tol_fwd());
  cpu->channel_scale_backward(cpu, x, g, dy, R, C, dy, dg);
  dev->channel_scale_backward(dev, dxd, dgd, ddy, R, C, ddy, ddg);
  expect("channel_scale_backward dx (aliasing dy)", ddy, dy, R * C, tol_grad());
  expect("channel_scale_backward dgamma (accumulates, 3 row blocks)", ddg, dg, C, tol_grad());
  cpu->channel_scale_backward(cpu, x, g, dy, R, C, dy, NULL);
  dev->channel_scale_backward(dev, dxd, dgd, ddy, R, C, ddy, NULL);
  expect("channel_scale_backward without dgamma", ddy, dy, R * C, tol_grad());
  free(x), free(g), free(y), free(dy), free(dg);
  float *all[] = {dxd, dyd, dgd, ddy, ddg};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dev->free(dev, all[i]);
}

static void test_rope(void) {
  const int64_t B = 2, T = 11, nh = 3, hd = 10, n = B * T * nh * hd;
  float *x = rnd(n, 1.0), *dx = upf(x, n);
  cpu->rope_forward(cpu, x, B, T, nh, hd, 1e4);
  dev->rope_forward(dev, dx, B, T, nh, hd, 1e4);
  expect("rope_forward", dx, x, n, tol_fwd());
  cpu->rope_backward(cpu, x, B, T, nh, hd, 5e5);
  dev->rope_backward(dev, dx, B, T, nh, hd, 5e5);
  expect("rope_backward (another theta)", dx, x, n, tol_fwd());
  free(x);
  dev->free(dev, dx);
}

// bf16 attention on tensor cores against the CPU's own bf16 kernel on the same
// inputs (ng_cpu_attention_*, bf16: q, k, v, dout, P and dS rounded to bf16, fp32
// sums), relative L2 per tensor. The kernels round the same values but for P in
// the forward: the GPU rounds exp(s - running max) per tile of 64 keys before
// normalizing, the CPU the normalized P; that alone moves out, and through
// rowsum(dO * O) dq and dk, by about 2e-3 (a float64 simulation of both at T 130,
// GQA 3, hd 64 and 128: at most 2.1e-3 out, 2.4e-3 dq and dk), while lse and dv
// differ only by fp32 summation order. Bounds: 5e-3, and 2e-5 (lse), 5e-4 (dv);
// against fp32 the bf16 bounds are 3e-2 and 0.1.
static void as_cpu_bf16(ng_attn_shape s, const float *q, const float *k, const float *v,
                        const float *dout, const float *od, const float *ld, float *const dd[3]) {
  int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd, nl = s.B * s.H * s.T;
  const int64_t n[5] = {nq, nl, nq, nk, nk};
  const double tol[5] = {5e-3, 2e-5, 5e-3, 5e-3, 5e-4};
  const char *const part[5] = {"out", "lse", "dq", "dk", "dv"};
  const float *dev_t[5] = {od, ld, dd[0], dd[1], dd[2]};
  float *want[5];
  for (int p = 0; p < 5; p++) want[p] = ng_xcalloc((size_t)n[p], sizeof(float));
  ng_cpu_attention_forward(s, q, k, v, want[0], want[1], true);
  ng_cpu_attention_backward(s, q, k, v, want[0], want[1], dout, want[2], want[3], want[4], true);
  for (int p = 0; p < 5; p++) {
    float *got = downf(dev_t[p], n[p]);
    double e = ng_test_rel_l2(got, want[p], n[p]);
    char name[200];
    snprintf(name, sizeof name,
             "%s attention B=%lld T=%lld H=%lld KV=%lld hd=%lld %s as the CPU's bf16 kernel: "
             "relative L2 %.2g", label, (long long)s.B, (long long)s.T, (long long)s.H,
             (long long)s.KV, (long long)s.hd, part[p], e);
    CHECK(e <= tol[p], name, "above %.0e", tol[p]);
    free(got);
    free(want[p]);
  }
}

static void test_attention_shape(ng_attn_shape s) {
  int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd, nl = s.B * s.H * s.T;
  float *q = rnd(nq, 1.0), *k = rnd(nk, 1.0), *v = rnd(nk, 1.0), *o = rnd(nq, 1.0), *l = rnd(nl, 1.0);
  float *dout = rnd(nq, 1.0), *dq = rnd(nq, 1.0), *dk = rnd(nk, 1.0), *dv = rnd(nk, 1.0);
  float *qd = upf(q, nq), *kd = upf(k, nk), *vd = upf(v, nk), *od = upf(o, nq), *ld = upf(l, nl);
  float *doutd = upf(dout, nq), *dqd = upf(dq, nq), *dkd = upf(dk, nk), *dvd = upf(dv, nk);
  char what[160];
  int len = snprintf(what, sizeof what, "attention B=%lld T=%lld H=%lld KV=%lld hd=%lld ",
                     (long long)s.B, (long long)s.T, (long long)s.H, (long long)s.KV, (long long)s.hd);
  cpu->attention_forward(cpu, s, q, k, v, o, l);
  dev->attention_forward(dev, s, qd, kd, vd, od, ld);
  snprintf(what + len, sizeof what - len, "forward out");
  expect(what, od, o, nq, tol_fwd());
  snprintf(what + len, sizeof what - len, "forward lse");
  expect(what, ld, l, nl, tol_fwd());
  cpu->attention_backward(cpu, s, q, k, v, o, l, dout, dq, dk, dv);
  dev->attention_backward(dev, s, qd, kd, vd, od, ld, doutd, dqd, dkd, dvd);
  float *const dd[] = {dqd, dkd, dvd}, *const hh[] = {dq, dk, dv};
  const int64_t nn[] = {nq, nk, nk};
  const char *const nm[] = {"dq", "dk", "dv"};
  snprintf(what + len, sizeof what - len, "backward");
  expect_grads(what, nm, dd, hh, nn, 3);
  if (bf16_mode && ngc_att_wmma_ok(s.hd) && s.T > 1) as_cpu_bf16(s, q, k, v, dout, od, ld, dd);
  // Determinism: a second backward gives the same bits.
  float *first = downf(dkd, nk);
  dev->attention_backward(dev, s, qd, kd, vd, od, ld, doutd, dqd, dkd, dvd);
  float *second = downf(dkd, nk);  // exact: the same call again on the same inputs
  snprintf(what, sizeof what, "%s attention backward twice: identical dk (T=%lld)", label,
           (long long)s.T);
  CHECK(memcmp(first, second, (size_t)nk * sizeof(float)) == 0, what, "bits differ");
  free(first), free(second);
  float *hostbufs[] = {q, k, v, o, l, dout, dq, dk, dv};
  float *devbufs[] = {qd, kd, vd, od, ld, doutd, dqd, dkd, dvd};
  for (int i = 0; i < 9; i++) free(hostbufs[i]), dev->free(dev, devbufs[i]);
}

static void test_elementwise(void) {
  const int64_t n = 1001;
  float *g = rnd(n, 2.0), *u = rnd(n, 1.0), *s = rnd(n, 1.0), *ds = rnd(n, 1.0);
  float *dg = rnd(n, 1.0), *du = rnd(n, 1.0);
  float *gd = upf(g, n), *ud = upf(u, n), *sd = upf(s, n), *dsd = upf(ds, n), *dgd = upf(dg, n),
        *dud = upf(du, n);
  cpu->swiglu_forward(cpu, g, u, n, s);
  dev->swiglu_forward(dev, gd, ud, n, sd);
  expect("swiglu_forward", sd, s, n, tol_fwd());
  cpu->swiglu_backward(cpu, g, u, ds, n, dg, du);
  dev->swiglu_backward(dev, gd, ud, dsd, n, dgd, dud);
  expect("swiglu_backward dgate", dgd, dg, n, tol_grad());
  expect("swiglu_backward dup", dud, du, n, tol_grad());
  cpu->add(cpu, g, u, n, g);  // aliasing y = a
  dev->add(dev, gd, ud, n, gd);
  expect("add (y aliases a)", gd, g, n, 0.0);
  cpu->lerp(cpu, g, u, 0.3f, n, u);  // y = b
  dev->lerp(dev, gd, ud, 0.3f, n, ud);
  expect("lerp (y aliases b)", ud, u, n, 1e-6);  // the GPU may fuse a multiply-add
  cpu->scale(cpu, u, -1.5f, n, s);
  dev->scale(dev, ud, -1.5f, n, sd);
  expect("scale", sd, s, n, 0.0);
  float *hb[] = {g, u, s, ds, dg, du}, *db[] = {gd, ud, sd, dsd, dgd, dud};
  for (int i = 0; i < 6; i++) free(hb[i]), dev->free(dev, db[i]);
}

// The loss's inputs and dlogits on one side (host for the CPU, device memory).
typedef struct {
  float *s, *t, *vals, *lse, *ds;
  int32_t *tg, *ids;
} loss_bufs;

// One call of the fused loss on be: with the top-k cache (k > 0 and a teacher), the
// full teacher, or none.
static void loss_call(ng_backend *be, const loss_bufs *b, bool teacher, int64_t k, int64_t N,
                      int64_t V, ng_loss_params lp, double *ce, double *kd, int64_t *nv) {
  if (k && teacher)
    be->ce_kd_topk(be, b->s, b->ids, b->vals, b->lse, k, b->tg, N, V, lp, b->ds, ce, kd, nv);
  else
    be->ce_kd(be, b->s, teacher ? b->t : NULL, b->tg, N, V, lp, b->ds, ce, kd, nv);
}

// ce, kd and dlogits of the fused loss over N rows of V (softmaxes over Vu) with a
// full teacher, none (forward_kl only: the same for every divergence), or a top-k
// cache of k, under divergence dv (jsd: beta 0.3), averaged over n_norm rows (0:
// the valid rows); every fourth row from the second ignored.
static void test_loss(int64_t N, int64_t V, int64_t Vu, int64_t k, int64_t n_norm, ng_divergence dv) {
  ng_loss_params lp = {0.4, 2.0, Vu, n_norm, dv, dv == NG_DIV_JSD ? 0.3 : 0.0};
  int32_t *tg = ng_xmalloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) tg[i] = i % 4 == 1 ? -1 : (int32_t)ng_rng_below(&rng, (uint64_t)Vu);
  float *s = rnd(N * V, 3.0), *t = rnd(N * V, 3.0), *ds = rnd(N * V, 1.0);
  int32_t *ids = ng_xmalloc((size_t)(N * k + 1) * sizeof(int32_t));
  float *vals = ng_xmalloc((size_t)(N * k + 1) * sizeof(float)), *lse = ng_xmalloc((size_t)N * sizeof(float));
  for (int64_t i = 0; k && i < N; i++) {
    ng_top_k(t + i * V, Vu, k, (uint32_t *)ids + i * k, vals + i * k);
    lse[i] = ng_logsumexp(t + i * V, Vu, 1.0 / lp.temperature);
  }
  loss_bufs h = {s, t, vals, lse, ds, tg, ids};
  loss_bufs d = {upf(s, N * V), upf(t, N * V), upf(vals, N * k + 1), upf(lse, N), upf(ds, N * V),
                 up(tg, (size_t)N * sizeof(int32_t)), up(ids, (size_t)(N * k + 1) * sizeof(int32_t))};
  for (int teacher = dv == NG_DIV_FORWARD_KL ? 0 : 1; teacher < 2; teacher++) {
    double ce[3], kd[3];
    int64_t nv[3];
    loss_call(cpu, &h, teacher, k, N, V, lp, &ce[0], &kd[0], &nv[0]);
    loss_call(dev, &d, teacher, k, N, V, lp, &ce[1], &kd[1], &nv[1]);
    char what[200];
    int len = snprintf(what, sizeof what, "ce_kd%s %s (%s, N=%lld V=%lld k=%lld n_norm=%lld)",
                       k && teacher ? "_topk" : "", ng_divergence_name(dv),
                       !teacher ? "no teacher" : k ? "top-k teacher" : "full teacher", (long long)N,
                       (long long)V, (long long)k, (long long)n_norm);
    snprintf(what + len, sizeof what - len, " dlogits");
    expect(what, d.ds, ds, N * V, 1e-3);
    char name[260];
    snprintf(name, sizeof name, "%s %.*s: ce, kd, n_valid", label, len, what);
    CHECK(fabs(ce[1] - ce[0]) <= 1e-4 * fabs(ce[0]) && fabs(kd[1] - kd[0]) <= 1e-4 * fabs(kd[0]) + 1e-12 &&
              nv[0] == nv[1],
          name, "ce %.9g vs %.9g, kd %.9g vs %.9g, n %lld vs %lld", ce[1], ce[0], kd[1], kd[0],
          (long long)nv[1], (long long)nv[0]);
    // Determinism: the same call again gives the same bits.
    float *first = downf(d.ds, N * V);
    loss_call(dev, &d, teacher, k, N, V, lp, &ce[2], &kd[2], &nv[2]);
    float *second = downf(d.ds, N * V);  // exact: the same call again on the same inputs
    snprintf(name, sizeof name, "%s %.*s twice: identical bits", label, len, what);
    CHECK(ce[2] == ce[1] && kd[2] == kd[1] && memcmp(first, second, (size_t)(N * V) * sizeof(float)) == 0,
          name, "results differ");
    free(first), free(second);
  }
  free(tg), free(s), free(t), free(ds), free(ids), free(vals), free(lse);
  void *db[] = {d.s, d.t, d.vals, d.lse, d.ds, d.tg, d.ids};
  for (int i = 0; i < 7; i++) dev->free(dev, db[i]);
}

static void test_optimizer(void) {
  const int64_t n = 50001;
  float *x = rnd(n, 1.0), *xd = upf(x, n);
  double a = cpu->sumsq(cpu, x, n), b = dev->sumsq(dev, xd, n);
  char name[100];
  snprintf(name, sizeof name, "%s sumsq (4 blocks, double)", label);
  CHECK(fabs(a - b) <= 1e-12 * a, name, "%.17g vs %.17g", b, a);
  float *g = rnd(n, 1e-2), *m = rnd(n, 1e-3), *v = rnd(n, 1e-5), *gd = upf(g, n);
  for (int i = 0; i < n; i++) v[i] = fabsf(v[i]);
  float *md = upf(m, n), *vd = upf(v, n);
  ng_adamw_params ap = {3e-3, 0.9, 0.95, 1e-8, 0.1, 3, 0.7};
  for (int decay = 0; decay < 2; decay++) {
    cpu->adamw(cpu, x, g, m, v, n, ap, decay);
    dev->adamw(dev, xd, gd, md, vd, n, ap, decay);
    snprintf(name, sizeof name, "adamw decay=%d p", decay);
    expect(name, xd, x, n, 1e-6);
    snprintf(name, sizeof name, "adamw decay=%d m, v", decay);
    expect(name, md, m, n, 1e-6);
    expect(name, vd, v, n, 1e-6);
  }
  free(x), free(g), free(m), free(v);
  dev->free(dev, xd), dev->free(dev, gd), dev->free(dev, md), dev->free(dev, vd);
}

static void test_memory(void) {
  float h[100], back[100];
  for (int i = 0; i < 100; i++) h[i] = (float)i;
  float *d = dev->alloc(dev, sizeof h);
  dev->download(dev, back, d, sizeof back);
  bool zero = true;
  for (int i = 0; i < 100; i++) zero = zero && back[i] == 0.0f;  // exact: zero-filled
  char name[100];
  snprintf(name, sizeof name, "%s alloc is zero-filled", label);
  CHECK(zero, name, "nonzero bytes");
  dev->upload(dev, d, h, sizeof h);
  dev->copy(dev, d + 10, d, 50 * sizeof(float));  // overlapping: memmove semantics
  memmove(h + 10, h, 50 * sizeof(float));
  expect("copy (overlapping)", d, h, 100, 0.0);
  dev->zero(dev, d + 5, 7 * sizeof(float));
  memset(h + 5, 0, 7 * sizeof(float));
  expect("zero", d, h, 100, 0.0);
  dev->free(dev, d);
  dev->free(dev, NULL);
}

// The device's top-k of rows of logits (a row stride past V, ties in some rows)
// against the CPU's: the same values, the kernel's ids (selection_ok) and the
// log-sum-exp within a sum in another order.
static void test_topk(void) {
  int64_t R = 13, V = 1000, ld = 1003, k = 40;
  float *x = rnd(R * ld, 5.0);
  for (int64_t j = 0; j < V; j++) x[2 * ld + j] = (float)(j % 3);  // row 2: three levels
  uint32_t *ids = ng_xmalloc((size_t)(R * k) * sizeof(uint32_t)), *cids = ng_xmalloc((size_t)(R * k) * sizeof(uint32_t));
  float *vals = ng_xmalloc((size_t)(R * k) * sizeof(float)), *cvals = ng_xmalloc((size_t)(R * k) * sizeof(float));
  float lse[13], clse[13];
  float *dx = upf(x, R * ld), *dvals = dev->alloc(dev, (size_t)(R * k) * sizeof(float));
  float *dlse = dev->alloc(dev, sizeof lse);
  uint32_t *dids = dev->alloc(dev, (size_t)(R * k) * sizeof(uint32_t));
  dev->topk(dev, dx, R, ld, V, k, 0.5, dids, dvals, dlse);
  dev->download(dev, ids, dids, (size_t)(R * k) * sizeof(uint32_t));
  dev->download(dev, vals, dvals, (size_t)(R * k) * sizeof(float));
  dev->download(dev, lse, dlse, sizeof lse);
  cpu->topk(cpu, x, R, ld, V, k, 0.5, cids, cvals, clse);
  bool ok = true;
  double worst = 0.0;
  for (int64_t r = 0; r < R; r++) {
    ok = ok && selection_ok(x + r * ld, V, k, ids + r * k, vals + r * k);
    worst = fmax(worst, fabs((double)lse[r] - clse[r]) / fabs((double)clse[r]));
  }
  char name[120];
  snprintf(name, sizeof name, "%s topk: the CPU's values, the kernel's ids, lse within 1e-6", label);
  CHECK(ok && worst <= 1e-6, name, "selection %s, lse off by %.2e", ok ? "right" : "wrong", worst);
  dev->free(dev, dx), dev->free(dev, dvals), dev->free(dev, dlse), dev->free(dev, dids);
  free(x), free(ids), free(cids), free(vals), free(cvals);
}

static void test_rmsnorm_all(void) {
  test_rmsnorm(131, 70);
  test_rmsnorm(131139, 128);
}

// Head dims 16, 40 (no tensor cores: fp32 tiles in bf16 mode too), 8 at T = 1, 128
// and 64 at other cuts of the tiles.
static void test_attention(void) {
  ng_attn_shape shapes[] = {
      {2, 67, 4, 2, 16}, {1, 130, 6, 2, 40}, {1, 1, 2, 1, 8}, {1, 70, 2, 2, 128}, {1, 64, 3, 1, 64}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_attention_shape(shapes[i]);
}

// Head dims 64 and 128 at T = 130 (a third tile of 2 rows), GQA 3.
static void test_attention_wide(void) {
  test_attention_shape((ng_attn_shape){1, 130, 6, 2, 64});
  test_attention_shape((ng_attn_shape){1, 130, 6, 2, 128});
}

static void test_loss_all(void) {
  test_loss(9, 300, 290, 0, 0, NG_DIV_FORWARD_KL);
  test_loss(9, 300, 290, 0, 20, NG_DIV_FORWARD_KL);  // chunked-loss normalisation: 20 rows, not 7
  test_loss(9, 300, 290, 7, 0, NG_DIV_FORWARD_KL);
  test_loss(9, 300, 290, 7, 11, NG_DIV_FORWARD_KL);
  test_loss(9, 300, 290, 290, 0, NG_DIV_FORWARD_KL);  // k = vocab_used: the exact divergence
  for (int dv = NG_DIV_REVERSE_KL; dv <= NG_DIV_LAST; dv++) {
    test_loss(9, 300, 290, 0, 0, (ng_divergence)dv);
    test_loss(9, 300, 290, 7, 11, (ng_divergence)dv);
    test_loss(9, 300, 290, 290, 0, (ng_divergence)dv);
  }
  // Qwen3's vocabulary (151936 rows for 151669 tokens), a top-64 cache.
  for (int dv = NG_DIV_FORWARD_KL; dv <= NG_DIV_LAST; dv++) test_loss(3, 151936, 151669, 64, 0, (ng_divergence)dv);
}

static void test_kernels(void) {
  dev->synchronize(dev);
  const char *k = dev->kernels(dev);
  char name[300];
  snprintf(name, sizeof name, "%s names its matmul kernels: %.200s", label, k);
  CHECK(strstr(k, "cuBLAS") && strstr(k, bf16_mode ? "FAST_16BF" : "no TF32"), name,
        "expected cuBLAS and its compute type");
}

// The groups of device checks, run in each precision.
typedef struct {
  const char *name;
  void (*run)(void);
  bool sanitize;  // in the set compute-sanitizer runs
} group;
static const group groups[] = {
    {"memory", test_memory, false},           {"topk", test_topk, false},
    {"matmul", test_matmul, false},
    {"rounding", test_matmul_rounding, false}, {"embedding", test_embedding, false},
    {"rmsnorm", test_rmsnorm_all, false},      {"rope", test_rope, false},
    {"elementwise", test_elementwise, false},  {"attention", test_attention, false},
    {"attention_wide", test_attention_wide, true}, {"loss", test_loss_all, true},
    {"optimizer", test_optimizer, true},      {"channel_scale", test_channel_scale, false},
    {"kernels", test_kernels, false},
};

// Whether the command line asks for group `name` (nothing asks for all).
static int n_asked;
static char **asked;
static bool wanted(const char *name, bool sanitize) {
  if (n_asked == 0) return true;
  for (int i = 0; i < n_asked; i++)
    if (strcmp(asked[i], name) == 0 || (sanitize && strcmp(asked[i], "sanitize") == 0)) return true;
  return false;
}

// NG_CUDA_SYNC=1: a kernel reading an illegal address, in a child process (the
// fault ends its CUDA context), is named by its own launch, not by the download
// that follows it.
static void test_sync(void) {
  char self[400], cmd[600];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  self[len > 0 ? len : 0] = 0;
  snprintf(cmd, sizeof cmd, "NG_CUDA_SYNC=1 '%s' --fault 2>&1", self);
  FILE *f = popen(cmd, "r");
  char out[2000] = "";
  size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
  out[n] = 0;
  int st = f ? pclose(f) : -1;
  CHECK(st != 0 && strstr(out, "launched by axpby") && strstr(out, "NG_CUDA_SYNC=1") &&
            strstr(out, "elementwise.cu"),
        "NG_CUDA_SYNC=1: a kernel's illegal address names its launch (axpby, elementwise.cu)",
        "status %d: %.300s", st, out);
}

// The child of test_sync: add over an address no allocation holds, then a download.
static int fault(void) {
  ng_backend *be = ng_backend_open("cuda", NG_PREC_FP32);
  if (!be) return 2;
  float *bad = (float *)(uintptr_t)0x100, x, *ok = be->alloc(be, sizeof x);
  be->add(be, bad, bad, 1 << 20, bad);
  be->download(be, &x, ok, sizeof x);
  return 0;
}

// NCCL on one GPU without MPI: a communicator of one rank (ncclCommInitAll), an
// all-reduce and a broadcast on device buffers, destroyed. NCCL over several ranks
// waits for a machine of several GPUs (tools/gpu_check.sh runs mpirun -np 1 where
// it is there).
static void test_nccl_smoke(void) {
#ifdef HAVE_NCCL
  enum { n = 1000 };
  int device = 0, version = 0;
  ncclComm_t comm;
  ncclGetVersion(&version);
  ncclResult_t r = ncclCommInitAll(&comm, 1, &device);
  char name[120];
  snprintf(name, sizeof name, "nccl %d: a communicator of one rank on device 0", version);
  CHECK(r == ncclSuccess, name, "%s", ncclGetErrorString(r));
  if (r != ncclSuccess) return;
  float h[n], back[n], *send, *recv;
  for (int i = 0; i < n; i++) h[i] = (float)i - 0.5f;
  cudaError_t e = cudaMalloc((void **)&send, sizeof h);
  if (e == cudaSuccess) e = cudaMalloc((void **)&recv, sizeof h);
  if (e == cudaSuccess) e = cudaMemcpy(send, h, sizeof h, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemset(recv, 0, sizeof h);
  r = e == cudaSuccess ? ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, 0) : ncclSuccess;
  if (e == cudaSuccess && r == ncclSuccess) e = cudaMemcpy(back, recv, sizeof h, cudaMemcpyDeviceToHost);
  // exact: a sum over one rank is its own values
  CHECK(e == cudaSuccess && r == ncclSuccess && memcmp(back, h, sizeof h) == 0,
        "nccl: all-reduce of 1000 floats over one rank, device to device: the values", "%s, %s",
        cudaGetErrorString(e), ncclGetErrorString(r));
  if (e == cudaSuccess) e = cudaMemset(recv, 0, sizeof h);
  r = e == cudaSuccess ? ncclBroadcast(send, recv, sizeof h, ncclChar, 0, comm, 0) : ncclSuccess;
  if (e == cudaSuccess && r == ncclSuccess) e = cudaMemcpy(back, recv, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(e == cudaSuccess && r == ncclSuccess && memcmp(back, h, sizeof h) == 0,
        "nccl: broadcast from rank 0: the bytes", "%s, %s", cudaGetErrorString(e), ncclGetErrorString(r));
  cudaFree(send);
  cudaFree(recv);
  r = ncclCommDestroy(comm);
  CHECK(r == ncclSuccess, "nccl: the communicator destroyed", "%s", ncclGetErrorString(r));
#else
  CHECK(false, "nccl: a communicator of one rank", "this build has no nccl.h");
#endif
}

// NCCL's refusals, on communicators whose ops are never called: one that is not
// MPI's (the unique id travels over MPI), and, without a device, any.
static void test_nccl_refusals(const char *no_device) {
  ng_comm *one = ng_comm_single(), mpi = *one;
  mpi.kind = NG_COMM_MPI, mpi.name = "mpi";
  int rc = ng_cuda_bind_comm(NULL, one);
  CHECK(rc == -1 && strstr(ng_error(), "NCCL") && strstr(ng_error(), "\"single\"") &&
            one->kind == NG_COMM_SINGLE,
        "nccl: a single-process communicator is refused in one line", "status %d, \"%s\"", rc, ng_error());
  if (no_device) {
    rc = ng_cuda_bind_comm(NULL, &mpi);
    CHECK(rc == -1 && strstr(ng_error(), "NCCL") && strstr(ng_error(), no_device) &&
              mpi.kind == NG_COMM_MPI && strcmp(mpi.name, "mpi") == 0,
          "nccl without a device: refused in one line with the reason, the communicator unchanged",
          "status %d, \"%s\"", rc, ng_error());
  }
  ng_comm_close(one);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--fault") == 0) return fault();
  n_asked = argc - 1, asked = argv + 1;
  for (int i = 0; i < n_asked; i++) {
    bool known = strcmp(asked[i], "sanitize") == 0 || strcmp(asked[i], "sync") == 0 ||
                 strcmp(asked[i], "nccl") == 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) known |= strcmp(asked[i], groups[g].name) == 0;
    if (!known) {
      fprintf(stderr, "test_cuda: unknown group \"%s\"\n", asked[i]);
      return 2;
    }
  }
  test_launch_geometry();
  test_topk_selection();
  const char *why;
  bool gpu = ng_cuda_available(&why);
  test_nccl_refusals(gpu ? NULL : why);
  if (!gpu) {
    CHECK(ng_backend_open("cuda", NG_PREC_FP32) == NULL && strstr(ng_error(), why) != NULL,
          "cuda backend without a device: NULL and the reason", "got \"%s\"", ng_error());
    if (getenv("NG_REQUIRE_GPU"))  // set by tools/gpu_check.sh: a skip there is a failure
      CHECK(false, "cuda device required (NG_REQUIRE_GPU is set)", "%s", why);
    else
      printf("skip test_cuda device checks: %s\n", why);
    return TEST_RESULT();
  }
  cpu = ng_backend_cpu();
  for (int m = 0; m < 2; m++) {
    bf16_mode = m == 1;
    label = bf16_mode ? "cuda bf16" : "cuda fp32";
    dev = ng_backend_open("cuda", bf16_mode ? NG_PREC_BF16 : NG_PREC_FP32);
    CHECK(dev != NULL, bf16_mode ? "cuda bf16 opens" : "cuda fp32 opens", "%s", ng_error());
    if (!dev) continue;
    ng_rng_seed(&rng, 7);
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
      if (wanted(groups[g].name, groups[g].sanitize)) groups[g].run();
    ng_backend_close(dev);
  }
  if (wanted("sync", false)) test_sync();
  if (wanted("nccl", false)) test_nccl_smoke();
  return TEST_RESULT();
}
