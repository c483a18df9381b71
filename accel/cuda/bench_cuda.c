// normgrow bench_cuda: one Qwen3 transformer block (Pre-Norm, q/k norms, RoPE,
// causal GQA attention, SwiGLU MLP) forward + backward through the CUDA
// backend's op table, in bf16 and fp32, at the toy-medium shape of `normgrow
// bench` and at the paper's block (hidden 4096, 32 query and 8 key-value heads
// of 128, FFN 12288, T 2048). First, in the same run, the ceiling: a cuBLAS bf16
// GEMM (bf16 in and out, fp32 accumulation) at 4096 x 12288 x 4096, the block's
// widest product. Reports the step time (median of repeats), TFLOP/s, MFU against
// the H200's dense peak (bf16 tensor cores 989 TFLOP/s, fp32 without tensor cores
// 67 TFLOP/s) and against the measured ceiling, and each op's share of one step
// (each op timed between synchronizations).
//
// FLOPs are counted as in `normgrow bench`: 2 x matmul-params x tokens forward
// and twice that backward, plus causal attention 4 x hd x H x T(T+1)/2 per
// sequence forward and twice that backward (recomputation is not counted).
//
//   bench_cuda [toy|paper] [fp32|bf16] [--reps N]    (default: all, 5 repeats)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/backend_cuda.h"
#include "normgrow/common.h"
#include "normgrow/registry.h"
#include "normgrow/rng.h"

typedef struct {
  const char *name;
  int64_t B, T, D, H, KV, hd, F;
} block_shape;

// Parameters, activations and gradients of one block, all on the device.
typedef struct {
  float *wq, *wk, *wv, *wo, *wg, *wu, *wd, *ln1, *ln2, *qn, *kn;                     // weights
  float *gq, *gk, *gv, *go, *gg, *gu, *gd, *gln1, *gln2, *gqn, *gkn;                 // their grads
  float *x, *xn, *rs1, *q0, *k0, *q, *k, *v, *rq, *rk, *att, *lse, *h, *hn, *rs2;    // forward
  float *gate, *up, *s, *y;
  float *dy, *dh, *ds, *dgate, *dup, *dhn, *datt, *dq, *dk, *dv, *dq0, *dk0, *dxn, *dx;  // backward
} block;

#define MAX_OPS 40
static struct {
  bool on;
  double t_last;
  int n;
  const char *name[MAX_OPS];
  double t[MAX_OPS];
} timing;

static void sync(ng_backend *be, const float *p) {
  float tmp;
  be->download(be, &tmp, p, sizeof tmp);
}

// When timing, the time since the previous mark is charged to `name`.
static void mark(ng_backend *be, const float *p, const char *name) {
  if (!timing.on) return;
  sync(be, p);
  double now = ng_now();
  int i = 0;
  while (i < timing.n && strcmp(timing.name[i], name) != 0) i++;
  if (i == timing.n && timing.n < MAX_OPS) timing.name[timing.n++] = name;
  if (i < MAX_OPS) timing.t[i] += now - timing.t_last;
  timing.t_last = now;
}

static float *dev_rand(ng_backend *be, ng_rng *r, int64_t n, double mean, double std) {
  float *h = ng_xmalloc((size_t)n * sizeof(float));
  ng_rng_fill_normal(r, h, (size_t)n, mean, std);
  float *d = be->alloc(be, (size_t)n * sizeof(float));
  be->upload(be, d, h, (size_t)n * sizeof(float));
  free(h);
  return d;
}

static void block_create(ng_backend *be, const block_shape *s, block *b) {
  ng_rng r;
  ng_rng_seed(&r, 1);
  int64_t N = s->B * s->T, D = s->D, Q = s->H * s->hd, K = s->KV * s->hd, F = s->F;
  float **w[] = {&b->wq, &b->wk, &b->wv, &b->wo, &b->wg, &b->wu, &b->wd};
  int64_t wn[] = {Q * D, K * D, K * D, D * Q, F * D, F * D, D * F};
  for (int i = 0; i < 7; i++) *w[i] = dev_rand(be, &r, wn[i], 0.0, 0.02);
  float **g[] = {&b->ln1, &b->ln2, &b->qn, &b->kn};
  int64_t gn[] = {D, D, s->hd, s->hd};
  for (int i = 0; i < 4; i++) *g[i] = dev_rand(be, &r, gn[i], 1.0, 0.1);
  b->x = dev_rand(be, &r, N * D, 0.0, 1.0);
  b->dy = dev_rand(be, &r, N * D, 0.0, 1.0);
  struct {
    float **p;
    int64_t n;
  } bufs[] = {{&b->gq, Q * D}, {&b->gk, K * D}, {&b->gv, K * D}, {&b->go, D * Q},
              {&b->gg, F * D}, {&b->gu, F * D}, {&b->gd, D * F}, {&b->gln1, D},
              {&b->gln2, D}, {&b->gqn, s->hd}, {&b->gkn, s->hd}, {&b->xn, N * D},
              {&b->rs1, N}, {&b->q0, N * Q}, {&b->k0, N * K}, {&b->q, N * Q},
              {&b->k, N * K}, {&b->v, N * K}, {&b->rq, N * s->H}, {&b->rk, N * s->KV},
              {&b->att, N * Q}, {&b->lse, N * s->H}, {&b->h, N * D}, {&b->hn, N * D},
              {&b->rs2, N}, {&b->gate, N * F}, {&b->up, N * F}, {&b->s, N * F},
              {&b->y, N * D}, {&b->dh, N * D}, {&b->ds, N * F}, {&b->dgate, N * F},
              {&b->dup, N * F}, {&b->dhn, N * D}, {&b->datt, N * Q}, {&b->dq, N * Q},
              {&b->dk, N * K}, {&b->dv, N * K}, {&b->dq0, N * Q}, {&b->dk0, N * K},
              {&b->dxn, N * D}, {&b->dx, N * D}};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    *bufs[i].p = be->alloc(be, (size_t)bufs[i].n * sizeof(float));
}

static void block_free(ng_backend *be, block *b) {
  float **all = (float **)b;
  for (size_t i = 0; i < sizeof *b / sizeof(float *); i++) be->free(be, all[i]);
}

// y [N, D] = h + mlp(norm(h)), h = x + o_proj(attn(q/k norms, rope(q, k), v))
static void forward(ng_backend *be, const block_shape *s, block *b) {
  int64_t N = s->B * s->T, D = s->D, Q = s->H * s->hd, K = s->KV * s->hd, F = s->F;
  ng_attn_shape as = {s->B, s->T, s->H, s->KV, s->hd};
  be->rmsnorm_forward(be, b->x, b->ln1, N, D, 1e-6f, b->xn, b->rs1);
  mark(be, b->xn, "rmsnorm");
  be->matmul(be, false, true, N, Q, D, b->xn, b->wq, 0.0f, b->q0);
  be->matmul(be, false, true, N, K, D, b->xn, b->wk, 0.0f, b->k0);
  be->matmul(be, false, true, N, K, D, b->xn, b->wv, 0.0f, b->v);
  mark(be, b->v, "matmul qkv");
  be->rmsnorm_forward(be, b->q0, b->qn, N * s->H, s->hd, 1e-6f, b->q, b->rq);
  be->rmsnorm_forward(be, b->k0, b->kn, N * s->KV, s->hd, 1e-6f, b->k, b->rk);
  mark(be, b->k, "rmsnorm");
  be->rope_forward(be, b->q, s->B, s->T, s->H, s->hd, 1e6);
  be->rope_forward(be, b->k, s->B, s->T, s->KV, s->hd, 1e6);
  mark(be, b->k, "rope");
  be->attention_forward(be, as, b->q, b->k, b->v, b->att, b->lse);
  mark(be, b->att, "attention forward");
  be->matmul(be, false, true, N, D, Q, b->att, b->wo, 0.0f, b->h);
  mark(be, b->h, "matmul o");
  be->add(be, b->x, b->h, N * D, b->h);
  mark(be, b->h, "add");
  be->rmsnorm_forward(be, b->h, b->ln2, N, D, 1e-6f, b->hn, b->rs2);
  mark(be, b->hn, "rmsnorm");
  be->matmul(be, false, true, N, F, D, b->hn, b->wg, 0.0f, b->gate);
  be->matmul(be, false, true, N, F, D, b->hn, b->wu, 0.0f, b->up);
  mark(be, b->up, "matmul gate/up");
  be->swiglu_forward(be, b->gate, b->up, N * F, b->s);
  mark(be, b->s, "swiglu");
  be->matmul(be, false, true, N, D, F, b->s, b->wd, 0.0f, b->y);
  mark(be, b->y, "matmul down");
  be->add(be, b->h, b->y, N * D, b->y);
  mark(be, b->y, "add");
}

// Gradients of every weight (accumulated) and dx from dy.
static void backward(ng_backend *be, const block_shape *s, block *b) {
  int64_t N = s->B * s->T, D = s->D, Q = s->H * s->hd, K = s->KV * s->hd, F = s->F;
  ng_attn_shape as = {s->B, s->T, s->H, s->KV, s->hd};
  size_t nd = (size_t)(N * D) * sizeof(float);
  be->matmul(be, true, false, D, F, N, b->dy, b->s, 1.0f, b->gd);
  be->matmul(be, false, false, N, F, D, b->dy, b->wd, 0.0f, b->ds);
  mark(be, b->ds, "matmul down");
  be->swiglu_backward(be, b->gate, b->up, b->ds, N * F, b->dgate, b->dup);
  mark(be, b->dup, "swiglu");
  be->matmul(be, true, false, F, D, N, b->dgate, b->hn, 1.0f, b->gg);
  be->matmul(be, true, false, F, D, N, b->dup, b->hn, 1.0f, b->gu);
  be->matmul(be, false, false, N, D, F, b->dgate, b->wg, 0.0f, b->dhn);
  be->matmul(be, false, false, N, D, F, b->dup, b->wu, 1.0f, b->dhn);
  mark(be, b->dhn, "matmul gate/up");
  be->copy(be, b->dh, b->dy, nd);
  be->rmsnorm_backward(be, b->h, b->ln2, b->rs2, b->dhn, N, D, b->dh, b->gln2);
  mark(be, b->dh, "rmsnorm");
  be->matmul(be, true, false, D, Q, N, b->dh, b->att, 1.0f, b->go);
  be->matmul(be, false, false, N, Q, D, b->dh, b->wo, 0.0f, b->datt);
  mark(be, b->datt, "matmul o");
  be->attention_backward(be, as, b->q, b->k, b->v, b->att, b->lse, b->datt, b->dq, b->dk, b->dv);
  mark(be, b->dv, "attention backward");
  be->rope_backward(be, b->dq, s->B, s->T, s->H, s->hd, 1e6);
  be->rope_backward(be, b->dk, s->B, s->T, s->KV, s->hd, 1e6);
  mark(be, b->dk, "rope");
  be->zero(be, b->dq0, (size_t)(N * Q) * sizeof(float));
  be->zero(be, b->dk0, (size_t)(N * K) * sizeof(float));
  be->rmsnorm_backward(be, b->q0, b->qn, b->rq, b->dq, N * s->H, s->hd, b->dq0, b->gqn);
  be->rmsnorm_backward(be, b->k0, b->kn, b->rk, b->dk, N * s->KV, s->hd, b->dk0, b->gkn);
  mark(be, b->dk0, "rmsnorm");
  be->matmul(be, true, false, Q, D, N, b->dq0, b->xn, 1.0f, b->gq);
  be->matmul(be, true, false, K, D, N, b->dk0, b->xn, 1.0f, b->gk);
  be->matmul(be, true, false, K, D, N, b->dv, b->xn, 1.0f, b->gv);
  be->matmul(be, false, false, N, D, Q, b->dq0, b->wq, 0.0f, b->dxn);
  be->matmul(be, false, false, N, D, K, b->dk0, b->wk, 1.0f, b->dxn);
  be->matmul(be, false, false, N, D, K, b->dv, b->wv, 1.0f, b->dxn);
  mark(be, b->dxn, "matmul qkv");
  be->copy(be, b->dx, b->dh, nd);
  be->rmsnorm_backward(be, b->x, b->ln1, b->rs1, b->dxn, N, D, b->dx, b->gln1);
  mark(be, b->dx, "rmsnorm");
}

static double block_flops(const block_shape *s) {
  double N = (double)(s->B * s->T), D = (double)s->D, Q = (double)(s->H * s->hd);
  double K = (double)(s->KV * s->hd), F = (double)s->F;
  double params = D * (Q + 2 * K) + Q * D + 3 * D * F;
  double att = 4.0 * (double)s->hd * (double)s->H * (double)s->T * (double)(s->T + 1) / 2.0 * (double)s->B;
  return 3.0 * (2.0 * params * N + att);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// A CUDA or cuBLAS call of the ceiling (both succeed with 0): failure ends the bench.
#define CU(call)                                                                         \
  do {                                                                                   \
    int rc_ = (int)(call);                                                               \
    if (rc_ != 0) {                                                                      \
      fprintf(stderr, "bench_cuda: %s failed (%d) at %s:%d\n", #call, rc_, __FILE__, __LINE__); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

// The ceiling: C [M, N] = A [M, K] B [K, N] in bf16 on cuBLAS (random inputs of
// std 1; fp32 accumulation, bf16 output), M x N x K = 4096 x 12288 x 4096, the
// median of `reps` runs timed with CUDA events after 3 warm-ups. TFLOP/s.
static double gemm_ceiling(int reps) {
  const int64_t M = 4096, N = 12288, K = 4096;
  size_t na = (size_t)(M * K), nb = (size_t)(K * N);
  uint16_t *h = ng_xmalloc((nb > na ? nb : na) * sizeof(uint16_t));
  float *f = ng_xmalloc((nb > na ? nb : na) * sizeof(float));
  ng_rng r;
  ng_rng_seed(&r, 2);
  void *A, *B, *C;
  CU(cudaMalloc(&A, na * 2));
  CU(cudaMalloc(&B, nb * 2));
  CU(cudaMalloc(&C, (size_t)(M * N) * 2));
  ng_rng_fill_normal(&r, f, na, 0.0, 1.0);
  ng_to_bf16(f, (int64_t)na, h);
  CU(cudaMemcpy(A, h, na * 2, cudaMemcpyHostToDevice));
  ng_rng_fill_normal(&r, f, nb, 0.0, 1.0);
  ng_to_bf16(f, (int64_t)nb, h);
  CU(cudaMemcpy(B, h, nb * 2, cudaMemcpyHostToDevice));
  free(h);
  free(f);
  cublasHandle_t blas;
  CU(cublasCreate(&blas));
  cudaEvent_t t0, t1;
  CU(cudaEventCreate(&t0));
  CU(cudaEventCreate(&t1));
  const float one = 1.0f, zero = 0.0f;
  double *ms = ng_xcalloc((size_t)reps, sizeof(double));
  for (int i = -3; i < reps; i++) {  // row-major C = A B is column-major C^T = B^T A^T
    CU(cudaEventRecord(t0, 0));
    CU(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, B, CUDA_R_16BF,
                    (int)N, A, CUDA_R_16BF, (int)K, &zero, C, CUDA_R_16BF, (int)N,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CU(cudaEventRecord(t1, 0));
    CU(cudaEventSynchronize(t1));
    float e;
    CU(cudaEventElapsedTime(&e, t0, t1));
    if (i >= 0) ms[i] = e;
  }
  qsort(ms, (size_t)reps, sizeof(double), cmp_double);
  double tflops = 2.0 * (double)M * (double)N * (double)K / (ms[reps / 2] * 1e-3) / 1e12;
  printf("ceiling: cuBLAS bf16 GEMM %lld x %lld x %lld (bf16 in and out, fp32 accumulation): "
         "%.3f ms, %.1f TFLOP/s (median of %d), %.1f%% of 989\n",
         (long long)M, (long long)N, (long long)K, ms[reps / 2], tflops, reps, 100.0 * tflops / 989.0);
  free(ms);
  CU(cudaEventDestroy(t0));
  CU(cudaEventDestroy(t1));
  CU(cublasDestroy(blas));
  CU(cudaFree(A));
  CU(cudaFree(B));
  CU(cudaFree(C));
  return tflops;
}

static void bench(ng_backend *be, bool bf16, const block_shape *s, int reps, double ceiling) {
  block b;
  block_create(be, s, &b);
  forward(be, s, &b);  // warm-up (also sizes the scratch and the RoPE tables)
  backward(be, s, &b);
  sync(be, b.dx);
  double *t = ng_xcalloc((size_t)reps, sizeof(double));
  for (int r = 0; r < reps; r++) {
    double t0 = ng_now();
    forward(be, s, &b);
    backward(be, s, &b);
    sync(be, b.dx);
    t[r] = ng_now() - t0;
  }
  qsort(t, (size_t)reps, sizeof(double), cmp_double);
  double step = t[reps / 2], flops = block_flops(s), peak = bf16 ? 989e12 : 67e12;
  printf("%s %s: B=%lld T=%lld D=%lld H=%lld KV=%lld hd=%lld F=%lld; forward + backward %.3f ms "
         "(median of %d), %.1f GFLOP, %.1f TFLOP/s, MFU %.1f%% of %s %.0f TFLOP/s, %.1f%% of the "
         "measured bf16 GEMM ceiling\n",
         s->name, be->name, (long long)s->B, (long long)s->T, (long long)s->D, (long long)s->H,
         (long long)s->KV, (long long)s->hd, (long long)s->F, step * 1e3, reps, flops / 1e9,
         flops / step / 1e12, 100.0 * flops / step / peak, bf16 ? "bf16" : "fp32", peak / 1e12,
         100.0 * flops / step / 1e12 / ceiling);
  memset(&timing, 0, sizeof timing);
  timing.on = true;
  sync(be, b.dx);
  timing.t_last = ng_now();
  forward(be, s, &b);
  backward(be, s, &b);
  timing.on = false;
  double total = 0.0;
  for (int i = 0; i < timing.n; i++) total += timing.t[i];
  for (int i = 0; i < timing.n; i++)
    printf("  %-20s %9.3f ms %5.1f%%\n", timing.name[i], timing.t[i] * 1e3,
           100.0 * timing.t[i] / total);
  free(t);
  block_free(be, &b);
}

int main(int argc, char **argv) {
  const block_shape shapes[] = {
      {"toy-medium", 8, 256, 512, 8, 4, 64, 1536},
      {"paper", 1, 2048, 4096, 32, 8, 128, 12288},
  };
  const char *shape = NULL, *prec = NULL;
  int reps = 5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "toy") == 0 || strcmp(argv[i], "paper") == 0) shape = argv[i];
    else if (strcmp(argv[i], "fp32") == 0 || strcmp(argv[i], "bf16") == 0) prec = argv[i];
    else {
      fprintf(stderr, "bench_cuda: unknown argument \"%s\" (usage: bench_cuda [toy|paper] [fp32|bf16] [--reps N])\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1 || reps > 100) {
    fprintf(stderr, "bench_cuda: --reps: expected a count 1..100\n");
    return 2;
  }
  const char *why;
  if (!ng_cuda_available(&why)) {
    fprintf(stderr, "bench_cuda: %s\n", why);
    return 1;
  }
  double ceiling = gemm_ceiling(20);
  for (int p = 1; p >= 0; p--) {  // bf16, then fp32
    if (prec && strcmp(prec, p ? "bf16" : "fp32") != 0) continue;
    ng_backend *be = ng_backend_open("cuda", p ? NG_PREC_BF16 : NG_PREC_FP32);
    if (!be) {
      fprintf(stderr, "bench_cuda: %s\n", ng_error());
      return 1;
    }
    printf("%s %s: %s\n", be->name, ng_precision_name(be->precision), be->kernels(be));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      if (!shape || strncmp(shapes[i].name, shape, strlen(shape)) == 0) bench(be, p, &shapes[i], reps, ceiling);
    ng_backend_close(be);
  }
  return 0;
}
