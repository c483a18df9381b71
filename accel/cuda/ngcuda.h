// normgrow CUDA backend: what its translation units share (CUDA C++ only).
#ifndef NORMGROW_ACCEL_CUDA_NGCUDA_H
#define NORMGROW_ACCEL_CUDA_NGCUDA_H

#include <cuda_runtime.h>
#include <stdint.h>

// common.h is C11; its _Noreturn is spelled [[noreturn]] in C++.
#define _Noreturn [[noreturn]]
extern "C" {
#include "normgrow/backend.h"
#include "normgrow/common.h"
}
#undef _Noreturn

#include "launch.h"

// A failing CUDA or cuBLAS call is an environment failure (device lost, out of
// memory): it aborts with the call, the file and line.
void ngc_die(const char *what, const char *detail, const char *file, int line);
#define CK(call)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) ngc_die(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)
// After a kernel launch, naming the launching function: launch-configuration
// errors surface here; with NG_CUDA_SYNC=1 in the environment it also waits for
// the kernel, so that a fault while it runs (an illegal address) names its own
// launch rather than the next synchronizing call.
void ngc_check_launch(const char *where, const char *file, int line);
#define CK_LAUNCH() ngc_check_launch(__func__, __FILE__, __LINE__)

// The backend's context (be.ctx): the op table first, one per opened backend.
struct ngc_ctx {
  ng_backend be;
  void *blas;        // cublasHandle_t
  void *ws;          // device scratch of ws_bytes, grown on demand
  size_t ws_bytes;
  float *rope_cs;    // device cos/sin tables [T, hd/2] each, for rope_key
  double rope_key[3];  // T, hd, theta of the tables held
  char kernels[256];   // what ng_backend.kernels returns
};

static inline ngc_ctx *ngc(ng_backend *be) { return (ngc_ctx *)be->ctx; }
static inline bool ngc_bf16(const ng_backend *be) { return be->precision == NG_PREC_BF16; }
// Device scratch of at least `bytes` (contents undefined, valid until the next call).
void *ngc_scratch(ngc_ctx *c, size_t bytes);

// Grid size for n elements at `threads` per block, capped for grid-stride loops.
static inline unsigned ngc_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

// Deterministic block reductions (fixed tree over the threads of one block;
// blockDim.x a power of two <= 1024). `sh` holds blockDim.x values; the result
// is returned to every thread.
template <typename T, typename Op>
__device__ inline T ngc_block_reduce(T v, T *sh, Op op) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  T r = sh[0];
  __syncthreads();
  return r;
}
struct ngc_sum {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct ngc_max {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};

// Launchers of the op table (one per op, see backend.h for shapes).
void ngc_embedding_forward(ng_backend *be, const int32_t *tokens, const float *weight, int64_t N,
                           int64_t D, float *out);
void ngc_embedding_backward(ng_backend *be, const int32_t *tokens, const float *dout, int64_t N,
                            int64_t D, float *dweight);
void ngc_rmsnorm_forward(ng_backend *be, const float *x, const float *w, int64_t R, int64_t C,
                         float eps, float *y, float *rstd);
void ngc_rmsnorm_backward(ng_backend *be, const float *x, const float *w, const float *rstd,
                          const float *dy, int64_t R, int64_t C, float *dx, float *dw);
void ngc_rope_forward(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh, int64_t hd,
                      double theta);
void ngc_rope_backward(ng_backend *be, float *dx, int64_t B, int64_t T, int64_t nh, int64_t hd,
                       double theta);
void ngc_attention_forward(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                           const float *v, float *out, float *lse);
void ngc_attention_backward(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            const float *dout, float *dq, float *dk, float *dv);
void ngc_swiglu_forward(ng_backend *be, const float *gate, const float *up, int64_t n, float *s);
void ngc_swiglu_backward(ng_backend *be, const float *gate, const float *up, const float *ds,
                         int64_t n, float *dgate, float *dup);
void ngc_add(ng_backend *be, const float *a, const float *b, int64_t n, float *y);
void ngc_lerp(ng_backend *be, const float *a, const float *b, float g, int64_t n, float *y);
void ngc_scale(ng_backend *be, const float *x, float s, int64_t n, float *y);
void ngc_channel_scale_forward(ng_backend *be, const float *x, const float *gamma, int64_t R,
                               int64_t C, float *y);
void ngc_channel_scale_backward(ng_backend *be, const float *x, const float *gamma,
                                const float *dy, int64_t R, int64_t C, float *dx, float *dgamma);
void ngc_ce_kd(ng_backend *be, const float *logits, const float *teacher, const int32_t *targets,
               int64_t N, int64_t V, ng_loss_params lp, float *dlogits, double *ce, double *kd,
               int64_t *n_valid);
void ngc_ce_kd_topk(ng_backend *be, const float *logits, const int32_t *topk_ids,
                    const float *topk_vals, const float *topk_lse, const float *topk_rest,
                    int64_t k, const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                    float *dlogits, double *ce, double *kd, int64_t *n_valid);
double ngc_sumsq(ng_backend *be, const float *x, int64_t n);
void ngc_adamw(ng_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
               ng_adamw_params ap, bool decay);
void ngc_widen_bf16(ng_backend *be, const uint16_t *x, int64_t n, float *y);
void ngc_row_rms(ng_backend *be, const float *x, int64_t R, int64_t C, float *rms);
void ngc_topk(ng_backend *be, const float *logits, int64_t R, int64_t ld, int64_t V, int64_t k,
              double inv_tau, uint32_t *ids, float *vals, float *lse, float *rest);

#endif
