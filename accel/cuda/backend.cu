// normgrow CUDA backend: the context, memory ops, matmul (cuBLAS) and the op table.
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

#include "ngcuda.h"
#include "normgrow/backend_cuda.h"

void ngc_die(const char *what, const char *detail, const char *file, int line) {
  fprintf(stderr, "normgrow: cuda: %s failed: %s (%s:%d)\n", what, detail, file, line);
  abort();
}

#define CK_BLAS(call)                                                                   \
  do {                                                                                  \
    cublasStatus_t s_ = (call);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) ngc_die(#call, cublasGetStatusString(s_), __FILE__, __LINE__); \
  } while (0)

void *ngc_scratch(ngc_ctx *c, size_t bytes) {
  if (bytes > c->ws_bytes) {
    CK(cudaDeviceSynchronize());  // earlier kernels may still read the old scratch
    CK(cudaFree(c->ws));
    c->ws = NULL;
    CK(cudaMalloc(&c->ws, bytes));
    c->ws_bytes = bytes;
  }
  return c->ws;
}

// ------------------------------------------------------------------ memory

static void *cu_alloc(ng_backend *be, size_t bytes) {
  (void)be;
  void *p = NULL;
  if (bytes == 0) return NULL;
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, 0, bytes));
  return p;
}

static void cu_free(ng_backend *be, void *p) {
  (void)be;
  if (p) CK(cudaFree(p));
}

static void cu_upload(ng_backend *be, void *dst, const void *src, size_t bytes) {
  (void)be;
  if (bytes) CK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void cu_download(ng_backend *be, void *dst, const void *src, size_t bytes) {
  (void)be;
  if (bytes) CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

// memmove semantics: overlapping ranges go through the scratch.
static void cu_copy(ng_backend *be, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const char *d = (const char *)dst, *s = (const char *)src;
  if (d < s + bytes && s < d + bytes) {
    void *tmp = ngc_scratch(ngc(be), bytes);
    CK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, 0));
    src = tmp;
  }
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}

static void cu_zero(ng_backend *be, void *p, size_t bytes) {
  (void)be;
  if (bytes) CK(cudaMemsetAsync(p, 0, bytes, 0));
}

// ------------------------------------------------------------------ matmul

// C [M, N] = op(A) op(B) + beta C, row-major. cuBLAS is column-major: a
// row-major [r, c] matrix is its column-major transpose, so it computes
// C^T [N, M] = op(B)^T op(A)^T with the operands swapped. fp32 mode computes
// in fp32 (CUBLAS_COMPUTE_32F under the default math mode: no TF32); bf16
// mode rounds A and B to bf16 on tensor cores and accumulates in fp32.
static void cu_matmul(ng_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const float *A, const float *B, float beta, float *C) {
  ngc_ctx *c = ngc(be);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // op(A) op(B) is zero
    ngc_scale(be, C, beta, M * N, C);
    return;
  }
  NG_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX);
  const float one = 1.0f;
  cublasComputeType_t ct = c->bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
  CK_BLAS(cublasGemmEx((cublasHandle_t)c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                       ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, B,
                       CUDA_R_32F, tb ? (int)K : (int)N, A, CUDA_R_32F, ta ? (int)M : (int)K,
                       &beta, C, CUDA_R_32F, (int)N, ct, CUBLAS_GEMM_DEFAULT));
}

// ------------------------------------------------------------------ the table

static ngc_ctx make_ctx(const char *name, bool bf16) {
  ngc_ctx c = {};
  c.bf16 = bf16;
  ng_backend *t = &c.be;
  t->name = name;
  t->alloc = cu_alloc;
  t->free = cu_free;
  t->upload = cu_upload;
  t->download = cu_download;
  t->copy = cu_copy;
  t->zero = cu_zero;
  t->matmul = cu_matmul;
  t->embedding_forward = ngc_embedding_forward;
  t->embedding_backward = ngc_embedding_backward;
  t->rmsnorm_forward = ngc_rmsnorm_forward;
  t->rmsnorm_backward = ngc_rmsnorm_backward;
  t->rope_forward = ngc_rope_forward;
  t->rope_backward = ngc_rope_backward;
  t->attention_forward = ngc_attention_forward;
  t->attention_backward = ngc_attention_backward;
  t->swiglu_forward = ngc_swiglu_forward;
  t->swiglu_backward = ngc_swiglu_backward;
  t->add = ngc_add;
  t->lerp = ngc_lerp;
  t->scale = ngc_scale;
  t->ce_kd = ngc_ce_kd;
  t->ce_kd_topk = ngc_ce_kd_topk;
  t->sumsq = ngc_sumsq;
  t->adamw = ngc_adamw;
  t->row_rms = ngc_row_rms;
  return c;
}

static ngc_ctx ctx_fp32 = make_ctx("cuda", false), ctx_bf16 = make_ctx("cuda-bf16", true);

bool ng_cuda_available(const char **why) {
  static char msg[512];
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(msg, sizeof msg, "no usable CUDA device (%s)", cudaGetErrorString(e));
  } else if (n == 0) {
    snprintf(msg, sizeof msg, "no CUDA device");
  } else {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    if (p.major < 9) {
      snprintf(msg, sizeof msg, "device 0 (%.200s) is sm_%d%d; this build needs sm_90 or newer",
               p.name, p.major, p.minor);
    } else {
      return true;
    }
  }
  if (why) *why = msg;
  return false;
}

// The context's cuBLAS handle, created on first use (default math mode: no TF32).
static ng_backend *ready(ngc_ctx *c) {
  const char *why;
  if (!ng_cuda_available(&why)) {
    ng_fail("backend \"%s\": %s", c->be.name, why);
    return NULL;
  }
  if (!c->blas) {
    cublasHandle_t h;
    CK(cudaSetDevice(0));
    CK_BLAS(cublasCreate(&h));
    CK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    c->blas = h;
  }
  return &c->be;
}

ng_backend *ng_backend_cuda(void) { return ready(&ctx_fp32); }
ng_backend *ng_backend_cuda_bf16(void) { return ready(&ctx_bf16); }
