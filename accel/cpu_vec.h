// normgrow: the oneDNN backend's vectorised host kernels.
//
// Each computes what the CPU reference's op of the same name computes
// (ref/backend_cpu.c, the oracle), in fp32 with the same formulas; what
// differs is the order of the sums (vector lanes, then the lanes together)
// and the exponential (cpu_vec.c's own, within 1 ulp of the correctly rounded
// exp on a sweep of [-87, 88]). Every
// function is compiled twice, for AVX-512 and for plain x86-64, and the
// loader picks the one this CPU runs (GCC's target_clones); the choice is
// ng_vec_family(). Rows are independent: a row's results do not depend on
// the rows around it or on the thread count.
#ifndef NORMGROW_ACCEL_CPU_VEC_H
#define NORMGROW_ACCEL_CPU_VEC_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/backend.h"

// "AVX-512", "AVX2" or "x86-64 (no AVX2)": the clone these kernels run here.
const char *ng_vec_family(void);

// The ops below have the op table's signatures and meanings (backend.h); be
// is not used. They fill the oneDNN backend's table in both precisions (the
// loss, norms and optimizer stay fp32 in bf16 mode).

// ng_backend.ce_kd: CE alone, or CE + KD over full teacher logits under every
// divergence, one pass per row each for the maxima, the three exponentials
// (student at 1 and at tau, teacher at tau, with their sums and, for the
// forward KL, its term), the reverse KL's or JSD's buckets (their log in
// fp32, vlog) and dlogits.
void ng_vec_ce_kd(ng_backend *be, const float *logits, const float *teacher,
                  const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                  float *dlogits, double *ce, double *kd, int64_t *n_valid);
// ng_backend.ce_kd_topk: the same passes over the student's row; the k cached
// ids and the rest bucket in double, as the reference's rows (k is small).
void ng_vec_ce_kd_topk(ng_backend *be, const float *logits, const int32_t *topk_ids,
                       const float *topk_vals, const float *topk_lse, const float *topk_rest,
                       int64_t k, const int32_t *targets, int64_t N, int64_t V,
                       ng_loss_params lp, float *dlogits, double *ce, double *kd,
                       int64_t *n_valid);

void ng_vec_rmsnorm_forward(ng_backend *be, const float *x, const float *w, int64_t R, int64_t C,
                            float eps, float *y, float *rstd);
void ng_vec_rmsnorm_backward(ng_backend *be, const float *x, const float *w, const float *rstd,
                             const float *dy, int64_t R, int64_t C, float *dx, float *dw);
void ng_vec_rope_forward(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh, int64_t hd,
                         double theta);
void ng_vec_rope_backward(ng_backend *be, float *dx, int64_t B, int64_t T, int64_t nh, int64_t hd,
                          double theta);
void ng_vec_swiglu_forward(ng_backend *be, const float *gate, const float *up, int64_t n,
                           float *s);
void ng_vec_swiglu_backward(ng_backend *be, const float *gate, const float *up, const float *ds,
                            int64_t n, float *dgate, float *dup);
void ng_vec_add(ng_backend *be, const float *a, const float *b, int64_t n, float *y);
void ng_vec_lerp(ng_backend *be, const float *a, const float *b, float g, int64_t n, float *y);
void ng_vec_scale(ng_backend *be, const float *x, float s, int64_t n, float *y);
// In double, over fixed chunks summed in order.
double ng_vec_sumsq(ng_backend *be, const float *x, int64_t n);
void ng_vec_adamw(ng_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
                  ng_adamw_params ap, bool decay);

// One causal row of attention scores S [n] (query i sees keys 0..i: n = i + 1;
// the rest of the row is the caller's), in place: S = exp(scale S - lse) with
// lse = log sum exp(scale S), max-subtracted, summed in double; returns lse.
float ng_vec_softmax_row(float *S, int64_t n, float scale);
// The same row given its lse (the backward): S = exp(scale S - lse).
void ng_vec_softmax_row_given(float *S, int64_t n, float scale, float lse);

// dP [n] = P * (dP - di) for a row of the attention backward.
void ng_vec_softmax_grad_row(const float *P, float di, int64_t n, float *dP);

#endif
