// What the CUDA backend alone must show, beside test_backends (every op of the
// table against the CPU at the shared shapes, cuda among the backends): its
// launch geometry and its top-k selection's steps, checked on the host; its
// refusals without a device (opening it, NCCL's binding); and on a GPU the
// checks a first run needs: cuBLAS's bf16 rounding and fp32 without TF32, bf16
// attention on tensor cores against the CPU's own bf16 kernel, the top-k
// kernel's ids in its own order and its rest against the CPU's, the kernels it
// names, NG_CUDA_SYNC naming a faulting launch, and a single-process NCCL smoke.
// Without a usable device it prints one "skip" line saying why after the host
// checks (a failure instead when NG_REQUIRE_GPU is set, as tools/gpu_check.sh
// does).
//
//   test_cuda [GROUP...]   only those device groups (default: all): rounding,
//                          attention_bf16, topk, kernels, sync, nccl
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

// ------------------------------------------------------------------ device checks

static ng_backend *dev;
static const char *label;  // "cuda fp32", "cuda bf16": names every check
static bool bf16_mode;
static ng_rng rng;

static float *rnd(int64_t n, double std) {
  float *x = ng_xmalloc((size_t)(n ? n : 1) * sizeof(float));
  ng_rng_fill_normal(&rng, x, (size_t)n, 0.0, std);
  return x;
}
static void *up(const void *h, size_t bytes) {
  void *d = dev->alloc(dev, bytes);
  if (h) dev->upload(dev, d, h, bytes);
  return d;
}
static float *upf(const float *h, int64_t n) { return up(h, (size_t)n * sizeof(float)); }
static void *down(const void *d, size_t bytes) {
  void *h = ng_xmalloc(bytes ? bytes : 1);
  dev->download(dev, h, d, bytes);
  return h;
}
static float *downf(const float *d, int64_t n) { return down(d, (size_t)n * sizeof(float)); }

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

// bf16 attention on tensor cores against the CPU's own bf16 kernel on the same
// inputs (ng_cpu_attention_*, bf16: q, k, v, dout, P and dS rounded to bf16, fp32
// sums), relative L2 per tensor. The kernels round the same values but for P in
// the forward: the GPU rounds exp(s - running max) per tile of 64 keys before
// normalizing, the CPU the normalized P; that alone moves out, and through
// rowsum(dO * O) dq and dk, by about 2e-3 (a float64 simulation of both at T 130,
// GQA 3, hd 64 and 128: at most 2.1e-3 out, 2.4e-3 dq and dk), while lse and dv
// differ only by fp32 summation order. Bounds: 5e-3, and 2e-5 (lse), 5e-4 (dv);
// against fp32 (test_backends) the bf16 bounds are 3e-2 and 0.1.
static void attention_as_cpu_bf16(ng_attn_shape s) {
  int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd, nl = s.B * s.H * s.T;
  const int64_t n[5] = {nq, nl, nq, nk, nk};
  const double tol[5] = {5e-3, 2e-5, 5e-3, 5e-3, 5e-4};
  const char *const part[5] = {"out", "lse", "dq", "dk", "dv"};
  float *q = rnd(nq, 1.0), *k = rnd(nk, 1.0), *v = rnd(nk, 1.0), *dout = rnd(nq, 1.0), *want[5];
  float *d[9] = {upf(q, nq), upf(k, nk), upf(v, nk), upf(dout, nq)};  // then out, lse, dq, dk, dv
  for (int p = 0; p < 5; p++) {
    want[p] = ng_xcalloc((size_t)n[p], sizeof(float));
    d[4 + p] = upf(NULL, n[p]);
  }
  dev->attention_forward(dev, s, d[0], d[1], d[2], d[4], d[5]);
  dev->attention_backward(dev, s, d[0], d[1], d[2], d[4], d[5], d[3], d[6], d[7], d[8]);
  ng_cpu_attention_forward(s, q, k, v, want[0], want[1], true);
  ng_cpu_attention_backward(s, q, k, v, want[0], want[1], dout, want[2], want[3], want[4], true);
  for (int p = 0; p < 5; p++) {
    float *got = downf(d[4 + p], n[p]);
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
  free(q), free(k), free(v), free(dout);
  for (int i = 0; i < 9; i++) dev->free(dev, d[i]);
}

// The tensor-core shapes of test_backends' list (hd a multiple of 16, T > 1), in bf16.
static void test_attention_bf16(void) {
  static const ng_attn_shape shapes[] = {
      {2, 67, 4, 2, 16}, {1, 70, 2, 2, 128}, {1, 64, 3, 1, 64}, {1, 130, 6, 2, 64}, {1, 130, 6, 2, 128}};
  for (size_t i = 0; bf16_mode && i < sizeof shapes / sizeof shapes[0]; i++) attention_as_cpu_bf16(shapes[i]);
}

// The device's top-k of R rows of logits [R, ld] (row 2 on three levels: ties at
// the k-th value) in the kernel's own order (selection_ok), and rest, the log of
// the mass off the kept ids: within 1e-6 of the CPU's (double sums in another
// order; which tied ids are kept does not change it), below 0, and -inf for both
// when k = V. Its values and log-sum-exp against the CPU's are test_backends'.
static void topk_rows(int64_t R, int64_t V, int64_t ld, int64_t k) {
  float *x = rnd(R * ld, 5.0);
  for (int64_t j = 0; j < V; j++) x[2 * ld + j] = (float)(j % 3);
  float *dx = upf(x, R * ld), *dvals = upf(NULL, R * k), *dlse = upf(NULL, R), *drest = upf(NULL, R);
  uint32_t *dids = up(NULL, (size_t)(R * k) * sizeof(uint32_t));
  dev->topk(dev, dx, R, ld, V, k, 0.5, dids, dvals, dlse, drest);
  uint32_t *ids = down(dids, (size_t)(R * k) * sizeof(uint32_t));
  float *vals = downf(dvals, R * k), *rest = downf(drest, R);
  ng_backend *cpu = ng_backend_cpu();
  uint32_t *cpu_ids = ng_xmalloc((size_t)(R * k) * sizeof(uint32_t));
  float *cpu_vals = ng_xmalloc((size_t)(R * k) * sizeof(float)), *cpu_lse = ng_xmalloc((size_t)R * sizeof(float));
  float *cpu_rest = ng_xmalloc((size_t)R * sizeof(float));
  cpu->topk(cpu, x, R, ld, V, k, 0.5, cpu_ids, cpu_vals, cpu_lse, cpu_rest);
  bool ok = true, rest_ok = true;
  double worst = 0.0;
  for (int64_t r = 0; r < R; r++) {
    ok = ok && selection_ok(x + r * ld, V, k, ids + r * k, vals + r * k);
    if (k == V) {
      rest_ok = rest_ok && rest[r] == -INFINITY && cpu_rest[r] == -INFINITY;
    } else {
      rest_ok = rest_ok && isfinite(rest[r]) && rest[r] < 0.0f && isfinite(cpu_rest[r]);
      worst = fmax(worst, fabs((double)rest[r] - cpu_rest[r]) / fabs((double)cpu_rest[r]));
    }
  }
  char name[200];
  snprintf(name, sizeof name, "%s topk V=%lld k=%lld: the kernel's ids in its order (ties: the lowest ids)",
           label, (long long)V, (long long)k);
  CHECK(ok, name, "selection wrong");
  snprintf(name, sizeof name, "%s topk V=%lld k=%lld: rest as the CPU's, %s (%.1e)", label, (long long)V,
           (long long)k, k == V ? "-inf" : "within 1e-6", worst);
  CHECK(rest_ok && worst <= 1e-6, name, "row 0: %.9g, the CPU's %.9g", rest[0], cpu_rest[0]);
  dev->free(dev, dx), dev->free(dev, dvals), dev->free(dev, dlse), dev->free(dev, drest), dev->free(dev, dids);
  free(x), free(ids), free(vals), free(rest), free(cpu_ids), free(cpu_vals), free(cpu_lse), free(cpu_rest);
}

static void test_topk(void) {
  topk_rows(13, 1000, 1003, 40);
  topk_rows(3, 1000, 1003, 1000);
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
static const struct {
  const char *name;
  void (*run)(void);
} groups[] = {
    {"rounding", test_matmul_rounding},
    {"attention_bf16", test_attention_bf16},
    {"topk", test_topk},
    {"kernels", test_kernels},
};

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
  int n_asked = argc - 1;
  char **asked = argv + 1;
  for (int i = 0; i < n_asked; i++) {
    bool known = strcmp(asked[i], "sync") == 0 || strcmp(asked[i], "nccl") == 0;
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
  for (int m = 0; m < 2; m++) {
    bf16_mode = m == 1;
    label = bf16_mode ? "cuda bf16" : "cuda fp32";
    dev = ng_backend_open("cuda", bf16_mode ? NG_PREC_BF16 : NG_PREC_FP32);
    CHECK(dev != NULL, bf16_mode ? "cuda bf16 opens" : "cuda fp32 opens", "%s", ng_error());
    if (!dev) continue;
    ng_rng_seed(&rng, 7);
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
      if (ng_test_wanted(asked, n_asked, groups[g].name)) groups[g].run();
    ng_backend_close(dev);
  }
  if (ng_test_wanted(asked, n_asked, "sync")) test_sync();
  if (ng_test_wanted(asked, n_asked, "nccl")) test_nccl_smoke();
  return TEST_RESULT();
}
