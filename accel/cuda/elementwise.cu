// normgrow CUDA backend: embedding, RMSNorm, RoPE, SwiGLU, elementwise ops, the
// per-channel scale, sumsq, AdamW, widen_bf16 and row_rms. Formulas are those of
// ref/backend_cpu.c; every reduction runs in a fixed order (no atomics), so results
// are deterministic.
#include <cub/cub.cuh>
#include <stdlib.h>

#include "ngcuda.h"

#define EW_THREADS 256

// Grid-stride loop over [0, n) with 64-bit indices.
#define FOR_EACH(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// ------------------------------------------------------------------ embedding

// out [N, D] = weight [V, D] rows picked by tokens [N]
__global__ void embed_fwd_k(const int32_t *tokens, const float *weight, int64_t N, int64_t D,
                            float *out) {
  FOR_EACH(e, N * D) out[e] = weight[(int64_t)tokens[e / D] * D + e % D];
}

void ngc_embedding_forward(ng_backend *be, const int32_t *tokens, const float *weight, int64_t N,
                           int64_t D, float *out) {
  (void)be;
  if (N * D == 0) return;
  embed_fwd_k<<<ngc_blocks(N * D, EW_THREADS), EW_THREADS>>>(tokens, weight, N, D, out);
  CK_LAUNCH();
}

__global__ void iota_k(int32_t *x, int64_t n) {
  FOR_EACH(i, n) x[i] = (int32_t)i;
}

// One block per position p of the stably sorted tokens: the block at the start
// of a run of equal ids owns that row of dweight and adds the run's dout rows
// in token order, as the reference does (dweight first, then each row).
__global__ void embed_bwd_k(const int32_t *ids, const int32_t *pos, const float *dout, int64_t N,
                            int64_t D, float *dweight) {
  int64_t p = blockIdx.x;
  if (p > 0 && ids[p] == ids[p - 1]) return;
  float *dst = dweight + (int64_t)ids[p] * D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = dst[c];
    for (int64_t q = p; q < N && ids[q] == ids[p]; q++) acc += dout[(int64_t)pos[q] * D + c];
    dst[c] = acc;
  }
}

// dweight [V, D] += dout [N, D] scattered by tokens: a stable radix sort of
// (token, position) pairs (CUB), then one owner per distinct token.
void ngc_embedding_backward(ng_backend *be, const int32_t *tokens, const float *dout, int64_t N,
                            int64_t D, float *dweight) {
  if (N == 0 || D == 0) return;
  NG_ASSERT(N <= INT32_MAX);
  size_t cub_bytes = 0, ids_bytes = ((size_t)N * sizeof(int32_t) + 255) / 256 * 256;
  CK(cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, tokens, (int32_t *)NULL, (int32_t *)NULL,
                                     (int32_t *)NULL, (int)N));
  char *ws = (char *)ngc_scratch(ngc(be), 3 * ids_bytes + cub_bytes);
  int32_t *ids = (int32_t *)ws, *pos_in = (int32_t *)(ws + ids_bytes),
          *pos = (int32_t *)(ws + 2 * ids_bytes);
  iota_k<<<ngc_blocks(N, EW_THREADS), EW_THREADS>>>(pos_in, N);
  CK_LAUNCH();
  CK(cub::DeviceRadixSort::SortPairs(ws + 3 * ids_bytes, cub_bytes, tokens, ids, pos_in, pos,
                                     (int)N));
  embed_bwd_k<<<(unsigned)N, EW_THREADS>>>(ids, pos, dout, N, D, dweight);
  CK_LAUNCH();
}

// ------------------------------------------------------------------ RMSNorm

// One block per row r of x [R, C]: the sum over C of x^2 in double.
__device__ double row_sumsq(const float *xr, int64_t C, double *sh) {
  double ss = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += (double)xr[c] * xr[c];
  return ngc_block_reduce(ss, sh, ngc_sum());
}

// y [R, C] = w * x * rstd; rstd [R] = 1 / sqrt(mean(x^2) + eps)
__global__ void rmsnorm_fwd_k(const float *x, const float *w, int64_t C, float eps, float *y,
                              float *rstd) {
  __shared__ double sh[ROW_THREADS];
  int64_t r = blockIdx.x;
  const float *xr = x + r * C;
  float rs = (float)(1.0 / sqrt(row_sumsq(xr, C, sh) / (double)C + (double)eps));
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[r * C + c] = w[c] * (xr[c] * rs);
}

void ngc_rmsnorm_forward(ng_backend *be, const float *x, const float *w, int64_t R, int64_t C,
                         float eps, float *y, float *rstd) {
  (void)be;
  if (R == 0) return;
  rmsnorm_fwd_k<<<(unsigned)R, ROW_THREADS>>>(x, w, C, eps, y, rstd);
  CK_LAUNCH();
}

// dx [R, C] += rstd (g - xh mean(g xh)) with xh = x rstd, g = dy w; one block per row.
__global__ void rmsnorm_bwd_dx_k(const float *x, const float *w, const float *rstd,
                                 const float *dy, int64_t C, float *dx) {
  __shared__ double sh[ROW_THREADS];
  int64_t r = blockIdx.x;
  const float *xr = x + r * C, *dyr = dy + r * C;
  float rs = rstd[r];
  double dot = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += (double)(dyr[c] * w[c]) * (xr[c] * rs);
  float mean = (float)(ngc_block_reduce(dot, sh, ngc_sum()) / (double)C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dx[r * C + c] += rs * (dyr[c] * w[c] - xr[c] * rs * mean);
}

// part [nblk, C]: sum over the rows of block b (NORM_ROW_BLOCK rows, in order) of
// dy x rstd (rstd NULL: dy x).
__global__ void column_part_k(const float *x, const float *rstd, const float *dy, int64_t R,
                              int64_t C, float *part) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, b = blockIdx.y;
  if (c >= C) return;
  int64_t r1 = (b + 1) * NORM_ROW_BLOCK < R ? (b + 1) * NORM_ROW_BLOCK : R;
  float acc = 0.0f;
  for (int64_t r = b * NORM_ROW_BLOCK; r < r1; r++)
    acc += dy[r * C + c] * (rstd ? x[r * C + c] * rstd[r] : x[r * C + c]);
  part[b * C + c] = acc;
}

// dw [C] += the block partials, in block order.
__global__ void column_sum_k(const float *part, int64_t nblk, int64_t C, float *dw) {
  FOR_EACH(c, C) {
    float acc = dw[c];
    for (int64_t b = 0; b < nblk; b++) acc += part[b * C + c];
    dw[c] = acc;
  }
}

// dw [C] += sum over the R rows of dy x rstd (rstd NULL: dy x), over fixed row
// blocks and then the blocks in order: rmsnorm's dw and channel_scale's dgamma.
static void column_sum(ng_backend *be, const float *x, const float *rstd, const float *dy,
                       int64_t R, int64_t C, float *dw) {
  int64_t nblk = ngc_tiles(R, NORM_ROW_BLOCK);
  NG_ASSERT(nblk <= NGC_GRID_Y_MAX);
  float *part = (float *)ngc_scratch(ngc(be), (size_t)nblk * C * sizeof(float));  // [nblk, C]
  column_part_k<<<dim3((unsigned)ngc_tiles(C, EW_THREADS), (unsigned)nblk), EW_THREADS>>>(
      x, rstd, dy, R, C, part);
  CK_LAUNCH();
  column_sum_k<<<ngc_blocks(C, EW_THREADS), EW_THREADS>>>(part, nblk, C, dw);
  CK_LAUNCH();
}

void ngc_rmsnorm_backward(ng_backend *be, const float *x, const float *w, const float *rstd,
                          const float *dy, int64_t R, int64_t C, float *dx, float *dw) {
  if (R == 0) return;
  rmsnorm_bwd_dx_k<<<(unsigned)R, ROW_THREADS>>>(x, w, rstd, dy, C, dx);
  CK_LAUNCH();
  if (dw) column_sum(be, x, rstd, dy, R, C, dw);
}

// y [R, C] = x * gamma [C] (y may alias x)
__global__ void channel_scale_k(const float *x, const float *gamma, int64_t R, int64_t C,
                                float *y) {
  FOR_EACH(e, R * C) y[e] = x[e] * gamma[e % C];
}

void ngc_channel_scale_forward(ng_backend *be, const float *x, const float *gamma, int64_t R,
                               int64_t C, float *y) {
  (void)be;
  if (R * C == 0) return;
  channel_scale_k<<<ngc_blocks(R * C, EW_THREADS), EW_THREADS>>>(x, gamma, R, C, y);
  CK_LAUNCH();
}

// dgamma before dx: dx may alias dy.
void ngc_channel_scale_backward(ng_backend *be, const float *x, const float *gamma,
                                const float *dy, int64_t R, int64_t C, float *dx,
                                float *dgamma) {
  if (R * C == 0) return;
  if (dgamma) column_sum(be, x, NULL, dy, R, C, dgamma);
  channel_scale_k<<<ngc_blocks(R * C, EW_THREADS), EW_THREADS>>>(dy, gamma, R, C, dx);
  CK_LAUNCH();
}

// rms [R] = sqrt(mean over C of x^2); one block per row.
__global__ void row_rms_k(const float *x, int64_t C, float *rms) {
  __shared__ double sh[ROW_THREADS];
  double ss = row_sumsq(x + blockIdx.x * C, C, sh);
  if (threadIdx.x == 0) rms[blockIdx.x] = (float)sqrt(ss / (double)C);
}

void ngc_row_rms(ng_backend *be, const float *x, int64_t R, int64_t C, float *rms) {
  (void)be;
  if (R == 0) return;
  row_rms_k<<<(unsigned)R, ROW_THREADS>>>(x, C, rms);
  CK_LAUNCH();
}

// ------------------------------------------------------------------ RoPE

// cos/sin tables [T, hd/2]: angle = t * theta^(-2j/hd), in double.
__global__ void rope_table_k(int64_t T, int64_t hd, double theta, float *cs, float *sn) {
  int64_t half = hd / 2;
  FOR_EACH(e, T * half) {
    double a = (double)(e / half) * pow(theta, -2.0 * (double)(e % half) / (double)hd);
    cs[e] = (float)cos(a);
    sn[e] = (float)sin(a);
  }
}

// x [B, T, nh, hd]: (x1, x2) <- (x1 cos - x2 sin, x2 cos + x1 sin); sign -1 inverts.
__global__ void rope_k(float *x, int64_t BT, int64_t T, int64_t nh, int64_t hd, const float *cs,
                       const float *sn, float sign) {
  int64_t half = hd / 2;
  FOR_EACH(e, BT * nh * half) {
    int64_t j = e % half, bth = e / half, t = (bth / nh) % T;
    float *x1 = x + bth * hd, *x2 = x1 + half;
    float c = cs[t * half + j], s = sign * sn[t * half + j], a = x1[j], b = x2[j];
    x1[j] = a * c - b * s;
    x2[j] = b * c + a * s;
  }
}

// The tables for (T, hd, theta), kept on the device until another shape asks.
static const float *rope_tables(ngc_ctx *c, int64_t T, int64_t hd, double theta) {
  if (c->rope_cs && c->rope_key[0] == (double)T && c->rope_key[1] == (double)hd &&
      c->rope_key[2] == theta)
    return c->rope_cs;
  CK(cudaFree(c->rope_cs));  // implicitly synchronizes with kernels still reading it
  size_t n = (size_t)T * (hd / 2);
  CK(cudaMalloc(&c->rope_cs, 2 * n * sizeof(float) + sizeof(float)));
  rope_table_k<<<ngc_blocks((int64_t)n, EW_THREADS), EW_THREADS>>>(T, hd, theta, c->rope_cs,
                                                                  c->rope_cs + n);
  CK_LAUNCH();
  c->rope_key[0] = (double)T;
  c->rope_key[1] = (double)hd;
  c->rope_key[2] = theta;
  return c->rope_cs;
}

static void rope(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh, int64_t hd,
                 double theta, float sign) {
  if (B * T * nh * (hd / 2) == 0) return;
  const float *cs = rope_tables(ngc(be), T, hd, theta);
  rope_k<<<ngc_blocks(B * T * nh * (hd / 2), EW_THREADS), EW_THREADS>>>(
      x, B * T, T, nh, hd, cs, cs + T * (hd / 2), sign);
  CK_LAUNCH();
}

void ngc_rope_forward(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh, int64_t hd,
                      double theta) {
  rope(be, x, B, T, nh, hd, theta, 1.0f);
}

void ngc_rope_backward(ng_backend *be, float *dx, int64_t B, int64_t T, int64_t nh, int64_t hd,
                       double theta) {
  rope(be, dx, B, T, nh, hd, theta, -1.0f);
}

// ------------------------------------------------------------------ SwiGLU and elementwise

__device__ inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// s [n] = silu(gate) * up
__global__ void swiglu_fwd_k(const float *gate, const float *up, int64_t n, float *s) {
  FOR_EACH(i, n) s[i] = gate[i] * sigmoidf_(gate[i]) * up[i];
}

// dgate = ds up silu'(gate), silu'(g) = sig(g) (1 + g (1 - sig(g))); dup = ds silu(gate)
__global__ void swiglu_bwd_k(const float *gate, const float *up, const float *ds, int64_t n,
                             float *dgate, float *dup) {
  FOR_EACH(i, n) {
    float g = gate[i], sg = sigmoidf_(g);
    dgate[i] = ds[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
    dup[i] = ds[i] * g * sg;
  }
}

void ngc_swiglu_forward(ng_backend *be, const float *gate, const float *up, int64_t n, float *s) {
  (void)be;
  if (n == 0) return;
  swiglu_fwd_k<<<ngc_blocks(n, EW_THREADS), EW_THREADS>>>(gate, up, n, s);
  CK_LAUNCH();
}

void ngc_swiglu_backward(ng_backend *be, const float *gate, const float *up, const float *ds,
                         int64_t n, float *dgate, float *dup) {
  (void)be;
  if (n == 0) return;
  swiglu_bwd_k<<<ngc_blocks(n, EW_THREADS), EW_THREADS>>>(gate, up, ds, n, dgate, dup);
  CK_LAUNCH();
}

// y [n] = ca a + cb b (b may be NULL: y = ca a); y may alias a or b. add, lerp
// and scale are this one kernel with their coefficients.
__global__ void axpby_k(float ca, const float *a, float cb, const float *b, int64_t n, float *y) {
  FOR_EACH(i, n) y[i] = b ? ca * a[i] + cb * b[i] : ca * a[i];
}

static void axpby(float ca, const float *a, float cb, const float *b, int64_t n, float *y) {
  if (n == 0) return;
  axpby_k<<<ngc_blocks(n, EW_THREADS), EW_THREADS>>>(ca, a, cb, b, n, y);
  CK_LAUNCH();
}

void ngc_add(ng_backend *be, const float *a, const float *b, int64_t n, float *y) {
  (void)be;
  axpby(1.0f, a, 1.0f, b, n, y);
}

void ngc_lerp(ng_backend *be, const float *a, const float *b, float g, int64_t n, float *y) {
  (void)be;
  axpby(1.0f - g, a, g, b, n, y);
}

void ngc_scale(ng_backend *be, const float *x, float s, int64_t n, float *y) {
  (void)be;
  axpby(s, x, 0.0f, NULL, n, y);
}

// ------------------------------------------------------------------ storage

// y [n] = x [n] widened from bf16: its bits are the upper half of y's (exact).
__global__ void widen_bf16_k(const uint16_t *x, int64_t n, float *y) {
  FOR_EACH(i, n) y[i] = __uint_as_float((uint32_t)x[i] << 16);
}

void ngc_widen_bf16(ng_backend *be, const uint16_t *x, int64_t n, float *y) {
  (void)be;
  if (n == 0) return;
  widen_bf16_k<<<ngc_blocks(n, EW_THREADS), EW_THREADS>>>(x, n, y);
  CK_LAUNCH();
}

// ------------------------------------------------------------------ optimizer

// part [nblk]: sum of x^2 over block b's SUMSQ_BLOCK elements, in double.
__global__ void sumsq_k(const float *x, int64_t n, double *part) {
  __shared__ double sh[ROW_THREADS];
  int64_t b0 = blockIdx.x * (int64_t)SUMSQ_BLOCK, b1 = b0 + SUMSQ_BLOCK < n ? b0 + SUMSQ_BLOCK : n;
  double acc = 0.0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) acc += (double)x[i] * x[i];
  acc = ngc_block_reduce(acc, sh, ngc_sum());
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

// Two passes: fixed blocks on the device, then the block sums in order on the host.
double ngc_sumsq(ng_backend *be, const float *x, int64_t n) {
  if (n == 0) return 0.0;
  int64_t nblk = ngc_tiles(n, SUMSQ_BLOCK);
  double *part = (double *)ngc_scratch(ngc(be), (size_t)nblk * sizeof(double));  // [nblk]
  sumsq_k<<<(unsigned)nblk, ROW_THREADS>>>(x, n, part);
  CK_LAUNCH();
  double *host = (double *)ng_xmalloc((size_t)nblk * sizeof(double));
  CK(cudaMemcpy(host, part, (size_t)nblk * sizeof(double), cudaMemcpyDeviceToHost));
  double total = 0.0;
  for (int64_t b = 0; b < nblk; b++) total += host[b];
  free(host);
  return total;
}

// PyTorch AdamW (see ref/backend_cpu.c), coefficients computed on the host in double.
__global__ void adamw_k(float *p, const float *g, float *m, float *v, int64_t n, float b1, float b2,
                        float gs, float step, float sqbc2, float eps, float keep) {
  FOR_EACH(i, n) {
    float gi = g[i] * gs;
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] = p[i] * keep - step * m[i] / (sqrtf(v[i]) / sqbc2 + eps);
  }
}

void ngc_adamw(ng_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
               ng_adamw_params ap, bool decay) {
  (void)be;
  if (n == 0) return;
  double bc1 = 1.0 - pow(ap.beta1, (double)ap.step), bc2 = 1.0 - pow(ap.beta2, (double)ap.step);
  adamw_k<<<ngc_blocks(n, EW_THREADS), EW_THREADS>>>(
      p, g, m, v, n, (float)ap.beta1, (float)ap.beta2, (float)ap.grad_scale, (float)(ap.lr / bc1),
      (float)sqrt(bc2), (float)ap.eps, decay ? (float)(1.0 - ap.lr * ap.weight_decay) : 1.0f);
  CK_LAUNCH();
}
