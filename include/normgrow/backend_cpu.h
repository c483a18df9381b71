// normgrow: the CPU backend (ref/backend_cpu.c), the fp32 reference of the op
// table (OpenMP loops and OpenBLAS's cblas_sgemm): the oracle every other
// backend is tested against; its kernels, shared with other host backends;
// and its probes of OpenBLAS and of the CPU.
//
// A backend whose buffers are host memory (oneDNN) starts from the CPU op
// table (*ng_backend_cpu()) and replaces only the ops it does better; the
// kernels below are the CPU's own, exposed for the ones it runs in another
// precision.
#ifndef NORMGROW_BACKEND_CPU_H
#define NORMGROW_BACKEND_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/backend.h"

// The fp32 CPU reference backend, fp32 only: a static instance, closing it
// does nothing.
ng_backend *ng_backend_cpu(void);

// y [n] = x rounded to the nearest bf16 (ties to even), kept as fp32 (y may
// alias x). NaN and infinities pass unchanged.
void ng_round_bf16(const float *x, int64_t n, float *y);
// y [n] = x rounded to bf16, stored as bf16 (the upper 16 bits).
void ng_to_bf16(const float *x, int64_t n, uint16_t *y);

// One row i of the fused loss, its target y >= 0, over its first Vu columns:
// the row's CE and KL (the divergence before tau^2) into ce and kl and, where
// ds is not NULL, its dlogits [Vu] scaled by w. scratch is the calling
// thread's own, of the bytes ng_cpu_loss_rows was given.
typedef void ng_loss_row_fn(const void *ctx, int64_t i, int32_t y, int64_t Vu, ng_loss_params lp,
                            double w, float *ds, void *scratch, double *ce, double *kl);

// The fused loss's row loop over logits' rows [N, V] (ce_kd, ce_kd_topk), for
// every backend that brings its own row: rows of target -1 left out (their
// dlogits zeroed), the padding columns (Vu = lp.vocab_used .. V) zeroed, w =
// 1 / (lp.n_norm, else the valid rows); ce = w sum of the rows' CE, kd = tau^2
// w sum of their KL (0 without a teacher), summed in row order.
void ng_cpu_loss_rows(ng_loss_row_fn *row, const void *ctx, size_t scratch_bytes, bool teacher,
                      const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                      float *dlogits, double *ce, double *kd, int64_t *n_valid);

// A row's top-k teacher cache (docs/golden-contract.md section 4): the cached
// ids and the teacher's logits there (ids, vals [k]), lse, the log-sum-exp of
// all its logits at the temperature, so Q_j = exp(vals_j / tau - lse), and
// rest = log Q_rest, the log of its mass on the other ids (-inf: none). Its
// terms against a student row s [V] with max ms and log-partition log_z at tau
// (lp_j = (s_j - ms) / tau - log_z), each in double, in one order, for every
// CPU backend's loss row:
typedef struct {
  const int32_t *ids;
  const float *vals;
  float lse, rest;
  int64_t k;
} ng_topk_row;
// Forward KL over the cached ids: sum_j Q_j (lq_j - lp_s(ids_j)).
double ng_topk_fkl_cached(ng_topk_row c, const float *s, float ms, double inv_tau, double log_z);
// Forward KL's rest bucket, Q_r log(Q_r / p_r) with Q_r = exp(c.rest) and p_r =
// off / z the student's mass off the cache (off of its partition z; none when
// off is 0); *tail = Q_r / p_r (0 without a rest), the teacher's share of an
// id off the cache relative to the student's.
double ng_topk_fkl_rest(ng_topk_row c, double off, double z, double *tail);
// r [ids_j] = Q_j z on the cached ids: the forward KL's target relative to z.
void ng_topk_fkl_target(ng_topk_row c, double inv_tau, double z, float *r);
// Reverse KL or JSD (beta), the rest bucket of a row of V ids (Q_rest =
// exp(c.rest), P_rest = p_rest; none when the cache holds every id, k = V):
// its term, its ng_bucket_term gradient in *g_rest (0 without one), and P_rest
// g_rest added to *gbar.
double ng_topk_bucket_rest(ng_divergence d, double beta, ng_topk_row c, int64_t V, double p_rest,
                           double *g_rest, double *gbar);
// The same for the bucket of cached id j: its term, *g, and p g added to *gbar.
double ng_topk_bucket_id(ng_divergence d, double beta, ng_topk_row c, int64_t j, const float *s,
                         float ms, double inv_tau, double log_z, double *g, double *gbar);

// RoPE's cos/sin tables cs, sn [T, hd/2]: angle t theta^(-2j/hd), computed in
// double (every backend's rotation reads these values).
void ng_rope_table(int64_t T, int64_t hd, double theta, float *cs, float *sn);

// The CPU attention (ng_backend.attention_forward/backward). With bf16 the
// inputs of its products are rounded to bf16 (q, k, v, dout, the
// probabilities P and the score gradients dS): fp32 sums of bf16 products,
// exactly what a bf16 kernel with fp32 accumulation computes.
void ng_cpu_attention_forward(ng_attn_shape s, const float *q, const float *k, const float *v,
                              float *out, float *lse, bool bf16);
void ng_cpu_attention_backward(ng_attn_shape s, const float *q, const float *k, const float *v,
                               const float *out, const float *lse, const float *dout, float *dq,
                               float *dk, float *dv, bool bf16);

// The CPU backend's BLAS (OpenBLAS): the kernel family it runs ("SkylakeX")
// and its build configuration.
const char *ng_blas_corename(void);
const char *ng_blas_config(void);
// Who chose that family, in words for logs: "preset by OPENBLAS_CORETYPE" (the
// environment set it before normgrow started), "chosen by normgrow" (over
// OpenBLAS's generic fallback, see below; normgrow marks its own setting with
// NG_BLAS_CORETYPE_BY_NORMGROW=1) or "chosen by OpenBLAS" (by CPU model).
const char *ng_blas_family_origin(void);
#define NG_BLAS_CORETYPE_MARK "NG_BLAS_CORETYPE_BY_NORMGROW"
// OpenBLAS picks its kernels by CPU model and falls back to generic ones
// (Prescott: SSE3, about 6x slower sgemm) on models it does not know, even
// when the CPU has AVX2 or AVX-512. Returns the family this CPU's features
// allow ("SkylakeX" with AVX-512F, "Haswell" with AVX2 + FMA, "Sandybridge"
// with AVX) when the running one is an older generic family; NULL when the
// running family is already right or is one normgrow does not rank.
const char *ng_blas_better_coretype(void);
// The rule itself: the family for SIMD level `level` (0 SSE, 1 AVX, 2 AVX2 +
// FMA, 3 AVX-512F) when `running` is a ranked family below it, else NULL.
const char *ng_blas_better_family(const char *running, int level);
// This CPU's SIMD level as the operating system enables it.
int ng_cpu_simd_level(void);

#endif
