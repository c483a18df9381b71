// normgrow CUDA backend: the context, memory ops, matmul (cuBLAS), the op table
// and its opening.
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ngcuda.h"
#include "normgrow/backend_cuda.h"

void ngc_die(const char *what, const char *detail, const char *file, int line) {
  fprintf(stderr, "normgrow: cuda: %s failed: %s (%s:%d)\n", what, detail, file, line);
  abort();
}

void ngc_check_launch(const char *where, const char *file, int line) {
  static int sync = -1;  // NG_CUDA_SYNC, read once
  if (sync < 0) {
    const char *e = getenv("NG_CUDA_SYNC");
    sync = e && strcmp(e, "1") == 0;
  }
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    char what[160];
    snprintf(what, sizeof what, "the kernel launched by %s%s", where,
             sync ? " (NG_CUDA_SYNC=1: waited for it)" : "");
    ngc_die(what, cudaGetErrorString(e), file, line);
  }
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
  if (K == 0) {  // op(A) op(B) is zero; beta 0 does not read C (it may hold NaN)
    if (beta == 0.0f) CK(cudaMemsetAsync(C, 0, (size_t)(M * N) * sizeof(float), 0));
    else ngc_scale(be, C, beta, M * N, C);
    return;
  }
  NG_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX);
  const float one = 1.0f;
  cublasComputeType_t ct = ngc_bf16(be) ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
  CK_BLAS(cublasGemmEx((cublasHandle_t)c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                       ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, B,
                       CUDA_R_32F, tb ? (int)K : (int)N, A, CUDA_R_32F, ta ? (int)M : (int)K,
                       &beta, C, CUDA_R_32F, (int)N, ct, CUBLAS_GEMM_DEFAULT));
  CK_LAUNCH();
}

// ------------------------------------------------------------------ the backend

// Every op issued so far is on the default stream of the process's device.
static void cu_synchronize(ng_backend *be) {
  (void)be;
  CK(cudaDeviceSynchronize());
}

static void cu_destroy(ng_backend *be) {
  ngc_ctx *c = ngc(be);
  CK(cudaDeviceSynchronize());
  if (c->blas) CK_BLAS(cublasDestroy((cublasHandle_t)c->blas));
  CK(cudaFree(c->ws));
  CK(cudaFree(c->rope_cs));
  free(c);
}

static const char *cu_kernels(ng_backend *be) { return ngc(be)->kernels; }

static const ng_backend cuda_table = {
    .name = "cuda",
    .precision = NG_PREC_FP32,
    .divergences = 1u << NG_DIV_FORWARD_KL | 1u << NG_DIV_REVERSE_KL | 1u << NG_DIV_JSD,
    .host_memory = false,
    .bf16_weights = false,  // its linear ops are its matmuls (ng_linear_*_matmuls)
    .bind_comm = ng_cuda_bind_comm,
    .ctx = NULL,
    .synchronize = cu_synchronize,
    .destroy = cu_destroy,
    .kernels = cu_kernels,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .matmul = cu_matmul,
    .linear_forward = ng_linear_forward_matmuls,
    .linear_backward = ng_linear_backward_matmuls,
    .embedding_forward = ngc_embedding_forward,
    .embedding_backward = ngc_embedding_backward,
    .rmsnorm_forward = ngc_rmsnorm_forward,
    .rmsnorm_backward = ngc_rmsnorm_backward,
    .rope_forward = ngc_rope_forward,
    .rope_backward = ngc_rope_backward,
    .attention_forward = ngc_attention_forward,
    .attention_backward = ngc_attention_backward,
    .swiglu_forward = ngc_swiglu_forward,
    .swiglu_backward = ngc_swiglu_backward,
    .add = ngc_add,
    .lerp = ngc_lerp,
    .scale = ngc_scale,
    .channel_scale_forward = ngc_channel_scale_forward,
    .channel_scale_backward = ngc_channel_scale_backward,
    .ce_kd = ngc_ce_kd,
    .ce_kd_topk = ngc_ce_kd_topk,
    .sumsq = ngc_sumsq,
    .adamw = ngc_adamw,
    .widen_bf16 = ngc_widen_bf16,
    .row_rms = ngc_row_rms,
    .topk = ngc_topk,
};

bool ng_cuda_available(const char **why) {
  static char msg[512];
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the next launch check to find
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

// The matmul kernels in words: cuBLAS's version, the compute type, the device.
static void describe(ngc_ctx *c) {
  int version = 0;
  cudaDeviceProp p;
  CK_BLAS(cublasGetVersion((cublasHandle_t)c->blas, &version));
  int device;
  CK(cudaGetDevice(&device));
  CK(cudaGetDeviceProperties(&p, device));
  const char *mode = ngc_bf16(&c->be)
                         ? "CUBLAS_COMPUTE_32F_FAST_16BF: bf16 tensor cores, fp32 accumulation"
                         : "CUBLAS_COMPUTE_32F, default math mode: plain fp32, no TF32";
  snprintf(c->kernels, sizeof c->kernels, "cuBLAS %d.%d.%d %s on %.100s (sm_%d%d)",
           version / 10000, version / 100 % 100, version % 100, mode, p.name, p.major, p.minor);
}

// The process's device: one per rank of a node, mpirun's local rank modulo the
// devices (0 for a process that mpirun did not start).
static int rank_device(void) {
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int n = 1;
  CK(cudaGetDeviceCount(&n));
  return local ? atoi(local) % n : 0;
}

ng_backend *ng_backend_cuda_open(ng_precision prec) {
  const char *why;
  if (!ng_cuda_available(&why)) {
    ng_fail("backend \"cuda\": %s", why);
    return NULL;
  }
  ngc_ctx *c = (ngc_ctx *)ng_xcalloc(1, sizeof *c);
  c->be = cuda_table;
  c->be.precision = prec;
  c->be.ctx = c;
  cublasHandle_t h;
  CK(cudaSetDevice(rank_device()));
  CK_BLAS(cublasCreate(&h));
  CK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  c->blas = h;
  describe(c);
  return &c->be;
}
