// normgrow: the fp32 CPU reference backend, the numerical oracle.
//
// Matmuls go through cblas_sgemm (OpenBLAS, OpenMP build: it runs
// single-threaded when called inside one of our parallel regions). Everything
// else is a plain loop with OpenMP. Reductions whose result must not depend on
// scheduling are done over fixed blocks and summed in order, so that a thread
// count fixes every bit.
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/divergence.h"
#include "normgrow/topk.h"

// Rows per block in reductions over rows (independent of the thread count).
#define ROW_BLOCK 64
// Most query rows per attention block (see att_rows): a thread's score buffer
// is at most one [T, T] block (two floats at T = 1).
#define ATT_ROWS 64

static void *cpu_alloc(ng_backend *be, size_t bytes) {
  (void)be;
  return ng_xcalloc(bytes, 1);
}
static void cpu_free(ng_backend *be, void *p) { (void)be; free(p); }
static void cpu_copy(ng_backend *be, void *dst, const void *src, size_t bytes) {
  (void)be;
  if (bytes) memmove(dst, src, bytes);
}
static void cpu_zero(ng_backend *be, void *p, size_t bytes) {
  (void)be;
  if (bytes) memset(p, 0, bytes);
}

// C [M, N] = op(A) op(B) + beta C
static void cpu_matmul(ng_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const float *A, const float *B, float beta, float *C) {
  (void)be;
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (int)M, (int)N, (int)K, 1.0f, A, ta ? (int)M : (int)K, B, tb ? (int)K : (int)N,
              beta, C, (int)N);
}

// out [N, D] = weight [V, D] rows picked by tokens [N]
static void cpu_embedding_forward(ng_backend *be, const int32_t *tokens, const float *weight,
                                  int64_t N, int64_t D, float *out) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    memcpy(out + (size_t)i * D, weight + (size_t)tokens[i] * D, (size_t)D * sizeof(float));
}

// dweight [V, D] += dout [N, D] scattered by tokens. Each thread owns a slice
// of columns and walks all tokens in order: no races, fixed summation order.
static void cpu_embedding_backward(ng_backend *be, const int32_t *tokens, const float *dout,
                                   int64_t N, int64_t D, float *dweight) {
  (void)be;
  const int64_t cols = 64;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < D; c0 += cols) {
    int64_t c1 = c0 + cols < D ? c0 + cols : D;
    for (int64_t i = 0; i < N; i++) {
      float *dst = dweight + (size_t)tokens[i] * D;
      const float *src = dout + (size_t)i * D;
      for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
    }
  }
}

// y [R, C] = w * x * rstd; rstd [R] = 1 / sqrt(mean(x^2) + eps)
static void cpu_rmsnorm_forward(ng_backend *be, const float *x, const float *w, int64_t R,
                                int64_t C, float eps, float *y, float *rstd) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++) {
    const float *xr = x + (size_t)r * C;
    float *yr = y + (size_t)r * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
    float rs = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
    rstd[r] = rs;
    for (int64_t c = 0; c < C; c++) yr[c] = w[c] * (xr[c] * rs);
  }
}

// dw [C] += sum over the R rows of dy * (x * rstd) (rstd NULL: dy * x): reduced
// over fixed blocks of rows, then the block partials in order (the same bits
// for every thread count). rmsnorm's dw and channel_scale's dgamma.
static void column_sums(const float *x, const float *rstd, const float *dy, int64_t R,
                        int64_t C, float *dw) {
  int64_t nblk = (R + ROW_BLOCK - 1) / ROW_BLOCK;
  float *part = ng_xcalloc((size_t)nblk * (size_t)C, sizeof(float));  // [nblk, C]
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblk; b++) {
    float *pw = part + (size_t)b * C;
    int64_t r1 = (b + 1) * ROW_BLOCK < R ? (b + 1) * ROW_BLOCK : R;
    for (int64_t r = b * ROW_BLOCK; r < r1; r++) {
      const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
      for (int64_t c = 0; c < C; c++) pw[c] += dyr[c] * (rstd ? xr[c] * rstd[r] : xr[c]);
    }
  }
  for (int64_t b = 0; b < nblk; b++)
    for (int64_t c = 0; c < C; c++) dw[c] += part[(size_t)b * C + c];
  free(part);
}

// With xh = x * rstd and g = dy * w:
//   dx += rstd * (g - xh * mean(g * xh)),  dw += sum over rows of dy * xh
// (column_sums); dw == NULL (a frozen gain) skips it.
static void cpu_rmsnorm_backward(ng_backend *be, const float *x, const float *w,
                                 const float *rstd, const float *dy, int64_t R, int64_t C,
                                 float *dx, float *dw) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++) {
    const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
    float *dxr = dx + (size_t)r * C;
    float rs = rstd[r];
    double dot = 0.0;
    for (int64_t c = 0; c < C; c++) dot += (double)(dyr[c] * w[c]) * (xr[c] * rs);
    float mean = (float)(dot / (double)C);
    for (int64_t c = 0; c < C; c++) dxr[c] += rs * (dyr[c] * w[c] - xr[c] * rs * mean);
  }
  if (dw) column_sums(x, rstd, dy, R, C, dw);
}

void ng_rope_table(int64_t T, int64_t hd, double theta, float *cs, float *sn) {
  int64_t half = hd / 2;
  for (int64_t j = 0; j < half; j++) {
    double inv_freq = pow(theta, -2.0 * (double)j / (double)hd);
    for (int64_t t = 0; t < T; t++) {
      double a = (double)t * inv_freq;
      cs[(size_t)t * half + j] = (float)cos(a);
      sn[(size_t)t * half + j] = (float)sin(a);
    }
  }
}

// x [B, T, nh, hd]: (x1, x2) <- (x1 cos - x2 sin, x2 cos + x1 sin); sign = -1
// applies the inverse rotation (the backward of a rotation is its transpose).
static void rope_apply(float *x, int64_t B, int64_t T, int64_t nh, int64_t hd, double theta,
                       float sign) {
  int64_t half = hd / 2;
  float *cs = ng_xmalloc((size_t)T * half * sizeof(float));
  float *sn = ng_xmalloc((size_t)T * half * sizeof(float));
  ng_rope_table(T, hd, theta, cs, sn);
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float *c = cs + (size_t)(bt % T) * half, *s = sn + (size_t)(bt % T) * half;
    for (int64_t h = 0; h < nh; h++) {
      float *x1 = x + ((size_t)bt * nh + h) * hd, *x2 = x1 + half;
      for (int64_t j = 0; j < half; j++) {
        float a = x1[j], b = x2[j], sj = sign * s[j];
        x1[j] = a * c[j] - b * sj;
        x2[j] = b * c[j] + a * sj;
      }
    }
  }
  free(cs);
  free(sn);
}

static void cpu_rope_forward(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh,
                             int64_t hd, double theta) {
  (void)be;
  rope_apply(x, B, T, nh, hd, theta, 1.0f);
}

static void cpu_rope_backward(ng_backend *be, float *dx, int64_t B, int64_t T, int64_t nh,
                              int64_t hd, double theta) {
  (void)be;
  rope_apply(dx, B, T, nh, hd, theta, -1.0f);
}

// Scores of query rows [r0, r1) against keys [0, r1) of one (b, h):
// S [r1-r0, r1] = scale * Q[r0:r1] K[0:r1]^T (Q rows strided by H*hd, K by KV*hd).
static void att_scores(ng_attn_shape s, const float *q, const float *k, int64_t b, int64_t h,
                       int64_t r0, int64_t r1, float *S) {
  int64_t kvh = h / (s.H / s.KV);
  const float *qb = q + (((size_t)b * s.T + r0) * s.H + h) * s.hd;
  const float *kb = k + ((size_t)b * s.T * s.KV + kvh) * s.hd;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)r1, (int)s.hd,
              (float)(1.0 / sqrt((double)s.hd)), qb, (int)(s.H * s.hd), kb,
              (int)(s.KV * s.hd), 0.0f, S, (int)r1);
}

// Row-block causal softmax: P = exp(S - lse) for key j <= query i, else 0.
// With lse_in == NULL the lse of each row is computed and stored in lse_out.
static void att_probs(float *S, int64_t r0, int64_t r1, const float *lse_in, float *lse_out) {
  int64_t ld = r1;
  for (int64_t i = r0; i < r1; i++) {
    float *row = S + (size_t)(i - r0) * ld;
    float lse;
    if (lse_in) {
      lse = lse_in[i];
    } else {
      float mx = row[0];
      for (int64_t j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
      double sum = 0.0;
      for (int64_t j = 0; j <= i; j++) sum += exp((double)(row[j] - mx));
      lse = mx + (float)log(sum);
      lse_out[i] = lse;
    }
    for (int64_t j = 0; j <= i; j++) row[j] = expf(row[j] - lse);
    for (int64_t j = i + 1; j < ld; j++) row[j] = 0.0f;
  }
}

// Query rows per block: at most ATT_ROWS, and in the backward (which holds two
// blocks, P and dP) at most T/2, so that a thread's scores fit one [T, T] block.
static int64_t att_rows(int64_t T, bool backward) {
  int64_t cap = backward ? (T / 2 > 0 ? T / 2 : 1) : T;
  return cap < ATT_ROWS ? cap : ATT_ROWS;
}

static int64_t att_block_end(int64_t r0, int64_t rows, int64_t T) {
  return r0 + rows < T ? r0 + rows : T;
}

// ---------------------------------------------------------------- bf16 rounding

// The upper 16 bits of fp32 bits u rounded to nearest, ties to even; NaN stays
// NaN (made quiet), infinities stay infinite. Branch-free, so that loops over
// it vectorize.
static inline uint32_t bf16_bits(uint32_t u) {
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded;
}

static float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u = bf16_bits(u) << 16;
  memcpy(&x, &u, sizeof x);
  return x;
}

// Elements per parallel chunk of the conversions (memory-bound loops).
#define CONVERT_CHUNK 16384

// x [n] rounded to bf16: as bf16 bits into h, or (h NULL) as fp32 into f.
__attribute__((target_clones("avx512f", "default")))
static void convert_block(const float *x, int64_t n, uint16_t *h, float *f) {
  if (h) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, x + i, sizeof u);
      h[i] = (uint16_t)bf16_bits(u);
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, x + i, sizeof u);
      u = bf16_bits(u) << 16;
      memcpy(f + i, &u, sizeof u);
    }
  }
}

// The same in parallel chunks; a short x (one chunk: a row inside another
// parallel loop) without entering an OpenMP construct.
static void convert_bf16(const float *x, int64_t n, uint16_t *h, float *f) {
  if (n <= CONVERT_CHUNK) {
    convert_block(x, n, h, f);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += CONVERT_CHUNK) {
    int64_t e = c + CONVERT_CHUNK < n ? c + CONVERT_CHUNK : n;
    convert_block(x + c, e - c, h ? h + c : NULL, f ? f + c : NULL);
  }
}

void ng_round_bf16(const float *x, int64_t n, float *y) { convert_bf16(x, n, NULL, y); }

void ng_to_bf16(const float *x, int64_t n, uint16_t *y) { convert_bf16(x, n, y, NULL); }

// x [n] itself, or with bf16 a rounded copy (freed by the caller).
static const float *matmul_input(const float *x, int64_t n, bool bf16) {
  if (!bf16) return x;
  float *y = ng_xmalloc((size_t)n * sizeof(float));
  ng_round_bf16(x, n, y);
  return y;
}

static void free_input(const float *copy, const float *x) {
  if (copy != x) free((void *)copy);
}

// Rounds a thread's own block x [n] in place (within a parallel region).
static void round_block(float *x, int64_t n, bool bf16) {
  if (bf16)
    for (int64_t i = 0; i < n; i++) x[i] = round_bf16(x[i]);
}

// q [B,T,H,hd], k, v [B,T,KV,hd] -> out [B,T,H,hd], lse [B,H,T]
void ng_cpu_attention_forward(ng_attn_shape s, const float *q0, const float *k0,
                              const float *v0, float *out, float *lse, bool bf16) {
  int64_t rows = att_rows(s.T, false), nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd;
  const float *q = matmul_input(q0, nq, bf16), *k = matmul_input(k0, nk, bf16),
              *v = matmul_input(v0, nk, bf16);
#pragma omp parallel
  {
    float *S = ng_xmalloc((size_t)rows * s.T * sizeof(float));  // [rows, T]
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; bh++) {
      int64_t b = bh / s.H, h = bh % s.H, kvh = h / (s.H / s.KV);
      float *lse_bh = lse + (size_t)bh * s.T;
      for (int64_t r0 = 0; r0 < s.T; r0 += rows) {
        int64_t r1 = att_block_end(r0, rows, s.T);
        att_scores(s, q, k, b, h, r0, r1, S);
        att_probs(S, r0, r1, NULL, lse_bh);
        round_block(S, (r1 - r0) * r1, bf16);
        // out[r0:r1, h] [r1-r0, hd] = P [r1-r0, r1] V[0:r1, kvh] [r1, hd]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(r1 - r0), (int)s.hd,
                    (int)r1, 1.0f, S, (int)r1, v + ((size_t)b * s.T * s.KV + kvh) * s.hd,
                    (int)(s.KV * s.hd), 0.0f, out + (((size_t)b * s.T + r0) * s.H + h) * s.hd,
                    (int)(s.H * s.hd));
      }
    }
    free(S);
  }
  free_input(q, q0);
  free_input(k, k0);
  free_input(v, v0);
}

static void cpu_attention_forward(ng_backend *be, ng_attn_shape s, const float *q,
                                  const float *k, const float *v, float *out, float *lse) {
  (void)be;
  ng_cpu_attention_forward(s, q, k, v, out, lse, false);
}

// The matmul inputs of the attention backward: q, k, v, dout as given, or
// rounded to bf16 (dout also as given, for rowsum(dO * O)).
typedef struct {
  const float *q, *k, *v, *dout_mm;
  bool bf16;
} att_inputs;

// One row block of the attention backward for (b, h), P recomputed from lse:
//   dP = dO V^T;  dS = P * (dP - rowsum(dO * O));  dV += P^T dO;
//   dQ = scale dS K;  dK += scale dS^T Q.
static void att_backward_block(ng_attn_shape s, const att_inputs *in, const float *out,
                               const float *lse, const float *dout, float *dq, float *dk,
                               float *dv, int64_t b, int64_t h, int64_t r0, int64_t r1, float *P,
                               float *dP) {
  int64_t kvh = h / (s.H / s.KV), n = r1 - r0;
  int ldq = (int)(s.H * s.hd), ldk = (int)(s.KV * s.hd);
  float scale = (float)(1.0 / sqrt((double)s.hd));
  size_t qoff = (((size_t)b * s.T + r0) * s.H + h) * s.hd;
  size_t koff = ((size_t)b * s.T * s.KV + kvh) * s.hd;
  att_scores(s, in->q, in->k, b, h, r0, r1, P);
  att_probs(P, r0, r1, lse + ((size_t)b * s.H + h) * s.T, NULL);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)r1, (int)s.hd, 1.0f,
              in->dout_mm + qoff, ldq, in->v + koff, ldk, 0.0f, dP, (int)r1);
  for (int64_t i = 0; i < n; i++) {
    const float *o = out + qoff + (size_t)i * ldq, *d = dout + qoff + (size_t)i * ldq;
    double di = 0.0;
    for (int64_t c = 0; c < s.hd; c++) di += (double)o[c] * d[c];
    float *p = P + (size_t)i * r1, *dp = dP + (size_t)i * r1;
    for (int64_t j = 0; j < r1; j++) dp[j] = p[j] * (dp[j] - (float)di);  // dP <- dS
  }
  round_block(P, n * r1, in->bf16);
  round_block(dP, n * r1, in->bf16);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)r1, (int)s.hd, (int)n, 1.0f, P,
              (int)r1, in->dout_mm + qoff, ldq, 1.0f, dv + koff, ldk);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)s.hd, (int)r1, scale, dP,
              (int)r1, in->k + koff, ldk, 0.0f, dq + qoff, ldq);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)r1, (int)s.hd, (int)n, scale, dP,
              (int)r1, in->q + qoff, ldq, 1.0f, dk + koff, ldk);
}

// Parallel over (b, kv head): the query heads sharing a kv head run in one
// task, so dk and dv accumulate without races and in a fixed order.
void ng_cpu_attention_backward(ng_attn_shape s, const float *q, const float *k, const float *v,
                               const float *out, const float *lse, const float *dout, float *dq,
                               float *dk, float *dv, bool bf16) {
  int64_t rows = att_rows(s.T, true), group = s.H / s.KV;
  int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd;
  memset(dk, 0, (size_t)nk * sizeof(float));
  memset(dv, 0, (size_t)nk * sizeof(float));
  att_inputs in = {matmul_input(q, nq, bf16), matmul_input(k, nk, bf16),
                   matmul_input(v, nk, bf16), matmul_input(dout, nq, bf16), bf16};
#pragma omp parallel
  {
    float *P = ng_xmalloc(2 * (size_t)rows * s.T * sizeof(float));  // [2 * rows, T]
#pragma omp for schedule(static)
    for (int64_t bk = 0; bk < s.B * s.KV; bk++) {
      int64_t b = bk / s.KV, kvh = bk % s.KV;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; h++)
        for (int64_t r0 = 0; r0 < s.T; r0 += rows)
          att_backward_block(s, &in, out, lse, dout, dq, dk, dv, b, h, r0,
                             att_block_end(r0, rows, s.T), P, P + (size_t)rows * s.T);
    }
    free(P);
  }
  free_input(in.q, q);
  free_input(in.k, k);
  free_input(in.v, v);
  free_input(in.dout_mm, dout);
}

static void cpu_attention_backward(ng_backend *be, ng_attn_shape s, const float *q,
                                   const float *k, const float *v, const float *out,
                                   const float *lse, const float *dout, float *dq, float *dk,
                                   float *dv) {
  (void)be;
  ng_cpu_attention_backward(s, q, k, v, out, lse, dout, dq, dk, dv, false);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// s [n] = silu(gate) * up
static void cpu_swiglu_forward(ng_backend *be, const float *gate, const float *up, int64_t n,
                               float *s) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) s[i] = gate[i] * sigmoidf(gate[i]) * up[i];
}

// dgate = ds * up * silu'(gate), silu'(g) = sig(g) (1 + g (1 - sig(g))); dup = ds * silu(gate)
static void cpu_swiglu_backward(ng_backend *be, const float *gate, const float *up,
                                const float *ds, int64_t n, float *dgate, float *dup) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float g = gate[i], sg = sigmoidf(g);
    dgate[i] = ds[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
    dup[i] = ds[i] * g * sg;
  }
}

// y [n] = a + b
static void cpu_add(ng_backend *be, const float *a, const float *b, int64_t n, float *y) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

// y [n] = (1 - g) a + g b
static void cpu_lerp(ng_backend *be, const float *a, const float *b, float g, int64_t n,
                     float *y) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = (1.0f - g) * a[i] + g * b[i];
}

// y [n] = s x
static void cpu_scale(ng_backend *be, const float *x, float s, int64_t n, float *y) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
}

// y [R, C] = x * gamma [C]
static void cpu_channel_scale_forward(ng_backend *be, const float *x, const float *gamma,
                                      int64_t R, int64_t C, float *y) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < C; c++) y[(size_t)r * C + c] = x[(size_t)r * C + c] * gamma[c];
}

// dx = dy * gamma; dgamma += sum over rows of dy * x (column_sums), first, as dx
// may alias dy.
static void cpu_channel_scale_backward(ng_backend *be, const float *x, const float *gamma,
                                       const float *dy, int64_t R, int64_t C, float *dx,
                                       float *dgamma) {
  (void)be;
  if (dgamma) column_sums(x, NULL, dy, R, C, dgamma);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < C; c++) dx[(size_t)r * C + c] = dy[(size_t)r * C + c] * gamma[c];
}

static float row_max(const float *x, int64_t V) {
  float mx = x[0];
  for (int64_t j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
  return mx;
}

// e [V] = exp((x - max x) / tau); returns the sum (so lse = max/tau + log(sum)).
static double exp_shifted(const float *x, int64_t V, float mx, float inv_tau, float *e) {
  double z = 0.0;
  for (int64_t j = 0; j < V; j++) {
    e[j] = expf((x[j] - mx) * inv_tau);
    z += e[j];
  }
  return z;
}

// The teacher of the fused loss: full logits [N, V], or a top-k cache.
typedef struct {
  const float *logits;                    // [N, V], or NULL
  const int32_t *ids;                     // [N, k] cached ids, or NULL
  const float *vals, *lse, *rest;         // [N, k] cached logits, [N] lse, [N] log Q_rest
  int64_t k;
} teacher_ref;

static bool has_teacher(const teacher_ref *t) { return t->logits || t->ids; }

// The teacher's distribution at temperature tau is written unnormalised into
// tgt [V], to be multiplied by *tgt_scale; the KL divergence is returned.

// Full teacher row t [V]: tgt = exp((t - max t) / tau), scale 1/zt; returns
// KL(pt || pst) = sum_j pt_j (log pt_j - log pst_j), given pst's max ms and sum zst.
static double kd_full_row(const float *s, const float *t, int64_t V, float ms, double zst,
                          float inv_tau, float *tgt, double *tgt_scale) {
  float mt = row_max(t, V);
  double zt = exp_shifted(t, V, mt, inv_tau, tgt), kl = 0.0;
  // log pt_j - log pst_j = ((t_j - mt) - (s_j - ms)) / tau + log(zst / zt)
  double log_ratio = log(zst) - log(zt);
  for (int64_t j = 0; j < V; j++)
    kl += (double)tgt[j] / zt * ((double)((t[j] - mt) - (s[j] - ms)) * inv_tau + log_ratio);
  *tgt_scale = 1.0 / zt;
  return kl;
}

// Top-k teacher row: q_j = exp(v_j / tau - lse) on the k cached ids, tail
// mass q_r = exp(rest), the cache's; the student's pst = est / zst (est [V] unnormalised,
// from s [V] with max ms) has tail mass p_r over the ids not cached, summed
// directly (1 - sum would leave only rounding when the cache holds nearly
// every id). When the cache holds every id there is no tail. KL of the
// bucketed distributions:
//   sum_j q_j (log q_j - log pst_j) + q_r log(q_r / p_r),
// with log pst_j = (s_j - ms) / tau - log sum exp((s - ms) / tau) in double (a
// stored lse cancels no rounding, and est underflows for far-off logits). Its
// gradient (times tau) is pst - tgt with tgt_j = q_j on cached ids and
// pst_j q_r / p_r elsewhere (written relative to zst: scale 1/zst).
static double kd_topk_row(ng_topk_row c, const float *s, float ms, const float *est, double zst,
                          int64_t V, double tau, float *tgt, double *tgt_scale) {
  double inv_tau = 1.0 / tau, zd = 0.0;
  for (int64_t j = 0; j < V; j++) zd += exp(((double)s[j] - ms) * inv_tau);
  double off = 0.0, tail;
  memcpy(tgt, est, (size_t)V * sizeof(float));
  for (int64_t j = 0; j < c.k; j++) tgt[c.ids[j]] = 0.0f;  // tgt: est on the ids not cached
  for (int64_t j = 0; j < V; j++) off += tgt[j];
  double kl = ng_topk_fkl_cached(c, s, ms, inv_tau, log(zd));
  kl += ng_topk_fkl_rest(c, off, zst, &tail);
  for (int64_t j = 0; j < V; j++) tgt[j] = (float)(tgt[j] * tail);
  ng_topk_fkl_target(c, inv_tau, zst, tgt);
  *tgt_scale = 1.0 / zst;
  return kl;
}

// The top-k cache's terms, every CPU backend's (backend_cpu.h).
double ng_topk_fkl_cached(ng_topk_row c, const float *s, float ms, double inv_tau, double log_z) {
  double kl = 0.0;
  for (int64_t j = 0; j < c.k; j++) {
    double lq = (double)c.vals[j] * inv_tau - c.lse;
    kl += exp(lq) * (lq - (((double)s[c.ids[j]] - ms) * inv_tau - log_z));
  }
  return kl;
}

double ng_topk_fkl_rest(ng_topk_row c, double off, double z, double *tail) {
  double p_r = off / z, q_r = off > 0.0 ? exp((double)c.rest) : 0.0;
  *tail = off > 0.0 ? q_r / p_r : 0.0;
  return q_r > 0.0 ? q_r * ((double)c.rest - log(p_r)) : 0.0;
}

void ng_topk_fkl_target(ng_topk_row c, double inv_tau, double z, float *r) {
  for (int64_t j = 0; j < c.k; j++) r[c.ids[j]] = (float)(exp((double)c.vals[j] * inv_tau - c.lse) * z);
}

double ng_topk_bucket_rest(ng_divergence d, double beta, ng_topk_row c, int64_t V, double p_rest,
                           double *g_rest, double *gbar) {
  *g_rest = 0.0;
  if (c.k == V) return 0.0;  // the cache holds every id: no rest bucket
  double D = ng_bucket_term(d, beta, (double)c.rest, log(p_rest), g_rest);
  *gbar += p_rest * *g_rest;
  return D;
}

double ng_topk_bucket_id(ng_divergence d, double beta, ng_topk_row c, int64_t j, const float *s,
                         float ms, double inv_tau, double log_z, double *g, double *gbar) {
  double lp = ((double)s[c.ids[j]] - ms) * inv_tau - log_z;
  double D = ng_bucket_term(d, beta, (double)c.vals[j] * inv_tau - c.lse, lp, g);
  *gbar += exp(lp) * *g;
  return D;
}

// Reverse KL or JSD of one row between bucketed distributions: every id its
// own bucket with a full teacher t [V]; with a top-k cache (ids, vals [k], lse,
// rest) each cached id and "every other id" (Q_rest = exp(rest), P_rest the
// student's mass there). Student: lp_j = (s_j - ms)/tau - log zd, in
// double. Returns D and writes dz [V] = dD/dz (z = s / tau):
//   dz_i = p_i (g_b(i) - sum_b P_b g_b), g_b from ng_bucket_term (divergence.h).
static double div_bucket_row(ng_divergence d, double beta, const float *s, float ms,
                             const float *t, ng_topk_row c, int64_t V, double tau, double *dz) {
  double inv_tau = 1.0 / tau, zd = 0.0, D = 0.0, gbar = 0.0;
  for (int64_t j = 0; j < V; j++) zd += exp(((double)s[j] - ms) * inv_tau);
  double log_zd = log(zd);
  if (t) {
    float mt = row_max(t, V);
    double zt = 0.0;
    for (int64_t j = 0; j < V; j++) zt += exp(((double)t[j] - mt) * inv_tau);
    double log_zt = log(zt);
    for (int64_t j = 0; j < V; j++) {
      double lp = ((double)s[j] - ms) * inv_tau - log_zd, lq = ((double)t[j] - mt) * inv_tau - log_zt;
      D += ng_bucket_term(d, beta, lq, lp, &dz[j]);
      gbar += exp(lp) * dz[j];
    }
  } else {
    // dz first holds p_i on the ids not cached (0 on the cached ones): P_rest.
    double p_rest = 0.0, g_rest;
    for (int64_t j = 0; j < V; j++) dz[j] = exp(((double)s[j] - ms) * inv_tau - log_zd);
    for (int64_t j = 0; j < c.k; j++) dz[c.ids[j]] = 0.0;
    for (int64_t j = 0; j < V; j++) p_rest += dz[j];
    D += ng_topk_bucket_rest(d, beta, c, V, p_rest, &g_rest, &gbar);
    for (int64_t j = 0; j < V; j++) dz[j] = g_rest;
    for (int64_t j = 0; j < c.k; j++)
      D += ng_topk_bucket_id(d, beta, c, j, s, ms, inv_tau, log_zd, &dz[c.ids[j]], &gbar);
  }
  for (int64_t j = 0; j < V; j++) dz[j] = exp(((double)s[j] - ms) * inv_tau - log_zd) * (dz[j] - gbar);
  return D;
}

// The kd term of one row, the one place its divergence is chosen: returns
// D(p_t, p_s) at temperature tau and writes dz [V] = dD/dz, z = s / tau.
// est [V] holds exp((s - ms)/tau) with sum zst; tgt [V] is scratch.
static double kd_row(const teacher_ref *t, int64_t i, const float *s, float ms, const float *est,
                     double zst, int64_t stride, int64_t V, ng_loss_params lp, float *tgt,
                     double *dz) {
  const float *tr = t->logits ? t->logits + (size_t)i * stride : NULL;
  ng_topk_row c = {0};
  if (t->ids)
    c = (ng_topk_row){.ids = t->ids + (size_t)i * t->k, .vals = t->vals + (size_t)i * t->k,
                      .lse = t->lse[i], .rest = t->rest[i], .k = t->k};
  double kl = 0.0, tgt_scale = 0.0;
  switch (lp.divergence) {
    case NG_DIV_FORWARD_KL:  // dz = pst - tgt
      kl = tr ? kd_full_row(s, tr, V, ms, zst, (float)(1.0 / lp.temperature), tgt, &tgt_scale)
              : kd_topk_row(c, s, ms, est, zst, V, lp.temperature, tgt, &tgt_scale);
      for (int64_t j = 0; j < V; j++) dz[j] = est[j] / zst - tgt[j] * tgt_scale;
      return kl;
    case NG_DIV_REVERSE_KL:
    case NG_DIV_JSD:
      return div_bucket_row(lp.divergence, lp.beta, s, ms, tr, c, V, lp.temperature, dz);
  }
  NG_ASSERT(!"ng_divergence out of range");
  return 0.0;
}

// One row i of the fused loss over its first V columns (rows `stride` apart),
// max-subtracted. With ps = softmax(s), pst =
// softmax(s/tau) and tgt the teacher's distribution at tau:
//   ce_i = log sum exp(s) - s_y,   kl_i = KL(tgt || pst) (see the kd_*_row),
//   d/ds = w ((1-a) (ps - onehot) + a tau (pst - tgt)),  or w (ps - onehot)
// without a teacher, where w = 1/n_valid (or 1/lp.n_norm); for the other
// divergences pst - tgt is their dD/dz (kd_row). scratch holds 3 rows of V
// floats, dz a row of V doubles.
static void ce_kd_row(const float *s, const teacher_ref *t, int64_t i, int32_t y, int64_t stride,
                      int64_t V, ng_loss_params lp, double w, float *ds, float *scratch,
                      double *dz, double *ce, double *kl) {
  float *ps = scratch, *est = scratch + V, *tgt = scratch + 2 * V;
  float ms = row_max(s, V), inv_tau = (float)(1.0 / lp.temperature);
  double zs = exp_shifted(s, V, ms, 1.0f, ps), zst = 1.0;
  *ce = (double)ms + log(zs) - (double)s[y];
  *kl = 0.0;
  bool teacher = has_teacher(t);
  double a_ce = teacher ? 1.0 - lp.kd_weight : 1.0, a_kd = teacher ? lp.kd_weight * lp.temperature : 0.0;
  if (teacher) {
    zst = exp_shifted(s, V, ms, inv_tau, est);
    *kl = kd_row(t, i, s, ms, est, zst, stride, V, lp, tgt, dz);
  }
  if (!ds) return;
  for (int64_t j = 0; j < V; j++) {
    double g = a_ce * ps[j] / zs;
    if (teacher) g += a_kd * dz[j];
    ds[j] = (float)(w * g);
  }
  ds[y] -= (float)(w * a_ce);
}

void ng_cpu_loss_rows(ng_loss_row_fn *row, const void *ctx, size_t scratch_bytes, bool teacher,
                      const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                      float *dlogits, double *ce, double *kd, int64_t *n_valid) {
  int64_t Vu = lp.vocab_used > 0 && lp.vocab_used < V ? lp.vocab_used : V;
  int64_t nv = 0;
  for (int64_t i = 0; i < N; i++) nv += targets[i] >= 0;
  int64_t n_norm = lp.n_norm > 0 ? lp.n_norm : nv;
  double w = n_norm ? 1.0 / (double)n_norm : 0.0;
  double *row_ce = ng_xcalloc((size_t)N, sizeof(double));  // [N]
  double *row_kl = ng_xcalloc((size_t)N, sizeof(double));  // [N]
#pragma omp parallel
  {
    void *scratch = ng_xmalloc(scratch_bytes);  // per thread
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; i++) {
      float *ds = dlogits ? dlogits + (size_t)i * V : NULL;
      if (targets[i] < 0) {
        if (ds) memset(ds, 0, (size_t)V * sizeof(float));
        continue;
      }
      if (ds && Vu < V) memset(ds + Vu, 0, (size_t)(V - Vu) * sizeof(float));  // padding ids
      row(ctx, i, targets[i], Vu, lp, w, ds, scratch, &row_ce[i], &row_kl[i]);
    }
    free(scratch);
  }
  double sce = 0.0, skl = 0.0;
  for (int64_t i = 0; i < N; i++) {
    sce += row_ce[i];
    skl += row_kl[i];
  }
  free(row_ce);
  free(row_kl);
  *ce = sce * w;
  *kd = teacher ? lp.temperature * lp.temperature * skl * w : 0.0;
  *n_valid = nv;
}

// The reference's rows: logits [N, V] and its teacher.
typedef struct {
  const float *logits;
  const teacher_ref *t;
  int64_t V;
} cpu_rows;

// ce_kd_row of row i; scratch: dz, a row of V doubles, then 3 rows of V floats.
static void cpu_loss_row(const void *ctx, int64_t i, int32_t y, int64_t Vu, ng_loss_params lp,
                         double w, float *ds, void *scratch, double *ce, double *kl) {
  const cpu_rows *c = ctx;
  double *dz = scratch;
  ce_kd_row(c->logits + (size_t)i * c->V, c->t, i, y, c->V, Vu, lp, w, ds, (float *)(dz + c->V), dz,
            ce, kl);
}

static void ce_kd_rows(const float *logits, const teacher_ref *t, const int32_t *targets,
                       int64_t N, int64_t V, ng_loss_params lp, float *dlogits, double *ce,
                       double *kd, int64_t *n_valid) {
  cpu_rows c = {logits, t, V};
  size_t scratch = (size_t)V * (sizeof(double) + 3 * sizeof(float));
  ng_cpu_loss_rows(cpu_loss_row, &c, scratch, has_teacher(t), targets, N, V, lp, dlogits, ce, kd,
                   n_valid);
}

static void cpu_ce_kd(ng_backend *be, const float *logits, const float *teacher,
                      const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                      float *dlogits, double *ce, double *kd, int64_t *n_valid) {
  (void)be;
  teacher_ref t = {.logits = teacher};
  ce_kd_rows(logits, &t, targets, N, V, lp, dlogits, ce, kd, n_valid);
}

static void cpu_ce_kd_topk(ng_backend *be, const float *logits, const int32_t *topk_ids,
                           const float *topk_vals, const float *topk_lse, const float *topk_rest,
                           int64_t k, const int32_t *targets, int64_t N, int64_t V,
                           ng_loss_params lp, float *dlogits, double *ce, double *kd,
                           int64_t *n_valid) {
  (void)be;
  teacher_ref t = {.ids = topk_ids, .vals = topk_vals, .lse = topk_lse, .rest = topk_rest, .k = k};
  ce_kd_rows(logits, &t, targets, N, V, lp, dlogits, ce, kd, n_valid);
}

// Sum of squares over fixed blocks, then the block sums in order.
static double cpu_sumsq(ng_backend *be, const float *x, int64_t n) {
  (void)be;
  const int64_t blk = 1 << 14;
  int64_t nblk = (n + blk - 1) / blk;
  double *part = ng_xcalloc((size_t)nblk, sizeof(double));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t e = (b + 1) * blk < n ? (b + 1) * blk : n;
    double acc = 0.0;
    for (int64_t i = b * blk; i < e; i++) acc += (double)x[i] * x[i];
    part[b] = acc;
  }
  double total = 0.0;
  for (int64_t b = 0; b < nblk; b++) total += part[b];
  free(part);
  return total;
}

// PyTorch AdamW: p *= 1 - lr wd (decay only); m, v moments of g * grad_scale;
// p -= lr (m / bc1) / (sqrt(v / bc2) + eps).
static void cpu_adamw(ng_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
                      ng_adamw_params ap, bool decay) {
  (void)be;
  double bc1 = 1.0 - pow(ap.beta1, (double)ap.step), bc2 = 1.0 - pow(ap.beta2, (double)ap.step);
  float b1 = (float)ap.beta1, b2 = (float)ap.beta2, gs = (float)ap.grad_scale;
  float step = (float)(ap.lr / bc1), sqbc2 = (float)sqrt(bc2), eps = (float)ap.eps;
  float keep = decay ? (float)(1.0 - ap.lr * ap.weight_decay) : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] * gs;
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] = p[i] * keep - step * m[i] / (sqrtf(v[i]) / sqbc2 + eps);
  }
}

// y [n] = x [n] widened from bf16: its bits are the upper half of y's
static void cpu_widen_bf16(ng_backend *be, const uint16_t *x, int64_t n, float *y) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)x[i] << 16;
    memcpy(&y[i], &bits, sizeof bits);
  }
}

// rms [R] = sqrt(mean over C of x^2)
static void cpu_row_rms(ng_backend *be, const float *x, int64_t R, int64_t C, float *rms) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; c++) ss += (double)x[(size_t)r * C + c] * x[(size_t)r * C + c];
    rms[r] = (float)sqrt(ss / (double)C);
  }
}

// Each row's top k and log masses: ng_top_k and ng_topk_logmass (topk.h).
static void cpu_topk(ng_backend *be, const float *logits, int64_t R, int64_t ld, int64_t V, int64_t k,
                     double inv_tau, uint32_t *ids, float *vals, float *lse, float *rest) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++) {
    const float *x = logits + (size_t)r * ld;
    ng_top_k(x, V, k, ids + (size_t)r * k, vals + (size_t)r * k);
    ng_topk_logmass(x, V, vals + (size_t)r * k, k, inv_tau, &lse[r], &rest[r]);
  }
}

static void cpu_nothing(ng_backend *be) { (void)be; }

static const char *cpu_kernels(ng_backend *be) {
  static char text[64];
  (void)be;
  snprintf(text, sizeof text, "OpenBLAS %s", ng_blas_corename());
  return text;
}

static ng_backend cpu_backend = {
    .name = "cpu",
    .precision = NG_PREC_FP32,
    .divergences = 1u << NG_DIV_FORWARD_KL | 1u << NG_DIV_REVERSE_KL | 1u << NG_DIV_JSD,
    .host_memory = true,
    .bf16_weights = false,
    .synchronize = cpu_nothing,  // every op has finished when it returns
    .destroy = cpu_nothing,      // a static instance
    .kernels = cpu_kernels,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .matmul = cpu_matmul,
    .linear_forward = ng_linear_forward_matmuls,
    .linear_backward = ng_linear_backward_matmuls,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .add = cpu_add,
    .lerp = cpu_lerp,
    .scale = cpu_scale,
    .channel_scale_forward = cpu_channel_scale_forward,
    .channel_scale_backward = cpu_channel_scale_backward,
    .ce_kd = cpu_ce_kd,
    .ce_kd_topk = cpu_ce_kd_topk,
    .sumsq = cpu_sumsq,
    .adamw = cpu_adamw,
    .widen_bf16 = cpu_widen_bf16,
    .row_rms = cpu_row_rms,
    .topk = cpu_topk,
};

ng_backend *ng_backend_cpu(void) { return &cpu_backend; }

// ---------------------------------------------------------------- BLAS kernels

const char *ng_blas_corename(void) { return openblas_get_corename(); }
const char *ng_blas_config(void) { return openblas_get_config(); }

const char *ng_blas_family_origin(void) {
  if (!getenv("OPENBLAS_CORETYPE")) return "chosen by OpenBLAS";
  return getenv(NG_BLAS_CORETYPE_MARK) ? "chosen by normgrow" : "preset by OPENBLAS_CORETYPE";
}

// OpenBLAS kernel families by the instruction set they use: 0 generic SSE,
// 1 AVX, 2 AVX2, 3 AVX-512. Families not listed (other vendors, newer Intel
// names) are never replaced.
typedef struct {
  const char *name;
  int level;
} blas_family;

static const blas_family families[] = {
    {"Prescott", 0}, {"Core2", 0},    {"Penryn", 0},   {"Dunnington", 0},
    {"Nehalem", 0},  {"Atom", 0},     {"Sandybridge", 1}, {"Haswell", 2},
    {"SkylakeX", 3},
};

int ng_cpu_simd_level(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  if (__builtin_cpu_supports("avx")) return 1;
  return 0;
}

const char *ng_blas_better_family(const char *running, int level) {
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
    if (running && strcasecmp(running, families[i].name) == 0 && families[i].level < level)
      for (size_t j = 0; j < sizeof families / sizeof families[0]; j++)
        if (families[j].level == level) return families[j].name;
  return NULL;
}

const char *ng_blas_better_coretype(void) {
  return ng_blas_better_family(openblas_get_corename(), ng_cpu_simd_level());
}
