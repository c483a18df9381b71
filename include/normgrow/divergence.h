// normgrow: the reverse KL and the JSD between bucketed distributions, one bucket
// at a time: the term shared by the CPU reference (ref/backend_cpu.c) and the CUDA
// kernel (accel/cuda/loss.cu), the same operations in the same order on both.
// C11 and CUDA C++ (host and device).
#ifndef NORMGROW_DIVERGENCE_H
#define NORMGROW_DIVERGENCE_H

#include <math.h>

#include "normgrow/enums.h"

#ifdef __CUDACC__
#define NG_HOST_DEVICE __host__ __device__
#else
#define NG_HOST_DEVICE
#endif

// The contribution of bucket b to D(teacher, student), with lq, lp the
// log-probabilities of the teacher's and the student's bucket, and in *g dD/dP_b
// up to a constant (which the softmax's gradient cancels):
//   reverse_kl: P (lp - lq),                                g = lp - lq;
//   jsd:        beta Q (lq - lm) + (1-beta) P (lp - lm),    g = (1-beta) (lp - lm),
// lm = log(beta Q + (1-beta) P). An empty bucket (probability 0) adds nothing.
// forward_kl is no sum of such terms (its rows have their own code): 0.
static inline NG_HOST_DEVICE double ng_bucket_term(ng_divergence d, double beta, double lq,
                                                   double lp, double *g) {
  double P = exp(lp), Q = exp(lq);
  *g = 0.0;
  if (P == 0.0 && Q == 0.0) return 0.0;
  switch (d) {
    case NG_DIV_FORWARD_KL: return 0.0;
    case NG_DIV_REVERSE_KL:
      *g = P > 0.0 ? lp - lq : 0.0;
      return P > 0.0 ? P * (lp - lq) : 0.0;
    case NG_DIV_JSD: {
      double a = log(beta) + lq, b = log1p(-beta) + lp, hi = a > b ? a : b;
      double lm = hi + log(exp(a - hi) + exp(b - hi));
      *g = P > 0.0 ? (1.0 - beta) * (lp - lm) : 0.0;
      return (Q > 0.0 ? beta * Q * (lq - lm) : 0.0) + (P > 0.0 ? (1.0 - beta) * P * (lp - lm) : 0.0);
    }
  }
  return 0.0;
}

#endif
