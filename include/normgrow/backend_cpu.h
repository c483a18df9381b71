// normgrow: the CPU backend's kernels, shared with other host backends.
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

// y [n] = x rounded to the nearest bf16 (ties to even), kept as fp32 (y may
// alias x). NaN and infinities pass unchanged.
void ng_round_bf16(const float *x, int64_t n, float *y);
// y [n] = x rounded to bf16, stored as bf16 (the upper 16 bits).
void ng_to_bf16(const float *x, int64_t n, uint16_t *y);

// The CPU attention (ng_backend.attention_forward/backward). With bf16 the
// inputs of its products are rounded to bf16 (q, k, v, dout, the
// probabilities P and the score gradients dS): fp32 sums of bf16 products,
// exactly what a bf16 kernel with fp32 accumulation computes.
void ng_cpu_attention_forward(ng_attn_shape s, const float *q, const float *k, const float *v,
                              float *out, float *lse, bool bf16);
void ng_cpu_attention_backward(ng_attn_shape s, const float *q, const float *k, const float *v,
                               const float *out, const float *lse, const float *dout, float *dq,
                               float *dk, float *dv, bool bf16);

#endif
