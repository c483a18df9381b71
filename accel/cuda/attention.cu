// normgrow CUDA backend: causal grouped-query attention, tiled with an online
// softmax (the flash style). Scores exist only as [ATT_TILE, ATT_TILE] tiles in
// shared memory; the forward saves lse [B, H, T] and the backward recomputes
// P = exp(S - lse) from it.
//
// A block of ATT_THREADS threads is a 16 x 16 grid (ty, tx); in a score tile
// it owns rows ty + 16 i and columns tx + 16 j (i, j < 4), in an [ATT_TILE, hd]
// tile rows ty + 16 i and columns tx + 16 c (c < NC = hd / 16 rounded up to a
// power of two). The 16 threads of one row are 16 lanes of one warp, so row
// statistics reduce with shuffles.
//
// The backward is deterministic without atomics: dQ comes from one block per
// query tile looping over its key tiles; dK and dV from one block per key tile
// looping, in a fixed order, over the heads of its group and their query tiles.
//
// bf16 mode: the forward's two products run on tensor cores (WMMA 16x16x16,
// bf16 inputs, fp32 accumulation); softmax statistics stay fp32. The backward
// runs the fp32 kernels in both modes.
#include <mma.h>
#include <cuda_bf16.h>
#include <math.h>

#include "ngcuda.h"

#define RPT 4  // score rows (and columns) per thread

// Where (b, h, t) of q [B, T, nh, hd] starts.
__device__ inline int64_t row_at(int64_t b, int64_t t, int64_t T, int64_t nh, int64_t h, int64_t hd) {
  return ((b * T + t) * nh + h) * hd;
}

// tile [ATT_TILE, ld] <- rows t0.. of head h of x [B, T, nh, hd] (zero past T).
__device__ void load_tile(float *tile, int64_t ld, const float *x, int64_t b, int64_t t0,
                          int64_t T, int64_t nh, int64_t h, int64_t hd) {
  for (int64_t e = threadIdx.x; e < ATT_TILE * hd; e += blockDim.x) {
    int64_t r = e / hd, d = e % hd, t = t0 + r;
    tile[r * ld + d] = t < T ? x[row_at(b, t, T, nh, h, hd) + d] : 0.0f;
  }
}

// s [i][j] = scale * A[ty + 16 i] . B[tx + 16 j] over hd (A, B [ATT_TILE, ld] tiles)
__device__ void tile_dot(const float *A, const float *Bt, int64_t ld, int64_t hd, float scale,
                         float s[RPT][RPT]) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float acc[RPT][RPT] = {};
  for (int64_t d = 0; d < hd; d++) {
    float a[RPT], b[RPT];
    for (int i = 0; i < RPT; i++) a[i] = A[(ty + 16 * i) * ld + d];
    for (int j = 0; j < RPT; j++) b[j] = Bt[(tx + 16 * j) * ld + d];
    for (int i = 0; i < RPT; i++)
      for (int j = 0; j < RPT; j++) acc[i][j] += a[i] * b[j];
  }
  for (int i = 0; i < RPT; i++)
    for (int j = 0; j < RPT; j++) s[i][j] = scale * acc[i][j];
}

// acc [i][c] += sum over j < ATT_TILE of P[ty + 16 i][j] X[j][tx + 16 c]
// (P [ATT_TILE, ATT_TILE + 1], X [ATT_TILE, ld]).
template <int NC>
__device__ void tile_accum(const float *P, const float *X, int64_t ld, int64_t hd, float acc[RPT][NC]) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int j = 0; j < ATT_TILE; j++) {
    float p[RPT];
    for (int i = 0; i < RPT; i++) p[i] = P[(ty + 16 * i) * (ATT_TILE + 1) + j];
    for (int c = 0; c < NC; c++) {
      int64_t col = tx + 16 * c;
      float x = col < hd ? X[j * ld + col] : 0.0f;
      for (int i = 0; i < RPT; i++) acc[i][c] += p[i] * x;
    }
  }
}

// Reductions over the 16 lanes that hold one row.
__device__ inline float row_max16(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float row_sum16(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One online-softmax step on a score tile s (rows q0 + ty + 16 i, keys k0 + tx
// + 16 j; masked where key > query or key >= T): updates the running max m and
// sum l of each row, turns s into p = exp(s - m) and returns in alpha the factor
// the row's accumulator must be rescaled by.
__device__ void online_softmax(float s[RPT][RPT], int64_t q0, int64_t k0, int64_t T, float m[RPT],
                               float l[RPT], float alpha[RPT]) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int i = 0; i < RPT; i++) {
    int64_t qi = q0 + ty + 16 * i;
    float mx = -INFINITY;
    for (int j = 0; j < RPT; j++) {
      int64_t kj = k0 + tx + 16 * j;
      if (kj > qi || kj >= T) s[i][j] = -INFINITY;
      mx = fmaxf(mx, s[i][j]);
    }
    float m_new = fmaxf(m[i], row_max16(mx)), sum = 0.0f;
    for (int j = 0; j < RPT; j++) {
      s[i][j] = expf(s[i][j] - m_new);
      sum += s[i][j];
    }
    alpha[i] = expf(m[i] - m_new);
    l[i] = l[i] * alpha[i] + row_sum16(sum);
    m[i] = m_new;
  }
}

// out rows q0.. of head h = acc / l; lse = m + log l.
template <int NC, typename Acc>
__device__ void write_out(Acc acc, const float m[RPT], const float l[RPT], float *out, float *lse,
                          int64_t b, int64_t h, int64_t q0, int64_t T, int64_t H, int64_t hd) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int i = 0; i < RPT; i++) {
    int64_t t = q0 + ty + 16 * i;
    if (t >= T) continue;
    for (int c = 0; c < NC; c++)
      if (tx + 16 * c < hd) out[row_at(b, t, T, H, h, hd) + tx + 16 * c] = acc(i, c) / l[i];
    if (tx == 0) lse[(b * H + h) * T + t] = m[i] + logf(l[i]);
  }
}

// Query tiles heaviest first (the last tile sees every key).
__device__ inline int64_t query_tile() { return gridDim.x - 1 - blockIdx.x; }

// grid (query tiles, B * H): out [B, T, H, hd], lse [B, H, T]
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_fwd_k(ng_attn_shape s, float scale,
                                                         const float *q, const float *k,
                                                         const float *v, float *out, float *lse) {
  extern __shared__ float sm[];
  int64_t ld = ngc_att_ld(s.hd), qt = query_tile(), q0 = qt * ATT_TILE;
  int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, kvh = h / (s.H / s.KV);
  float *Qs = sm, *KVs = Qs + ATT_TILE * ld, *Ps = KVs + ATT_TILE * ld;
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile(Qs, ld, q, b, q0, s.T, s.H, h, s.hd);
  float m[RPT], l[RPT], acc[RPT][NC] = {};
  for (int i = 0; i < RPT; i++) m[i] = -INFINITY, l[i] = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    int64_t k0 = kt * ATT_TILE;
    __syncthreads();  // the previous tile's P and V are consumed
    load_tile(KVs, ld, k, b, k0, s.T, s.KV, kvh, s.hd);
    __syncthreads();
    float sc[RPT][RPT], alpha[RPT];
    tile_dot(Qs, KVs, ld, s.hd, scale, sc);
    online_softmax(sc, q0, k0, s.T, m, l, alpha);
    for (int i = 0; i < RPT; i++) {
      for (int c = 0; c < NC; c++) acc[i][c] *= alpha[i];
      for (int j = 0; j < RPT; j++) Ps[(ty + 16 * i) * (ATT_TILE + 1) + tx + 16 * j] = sc[i][j];
    }
    __syncthreads();  // K consumed, P written
    load_tile(KVs, ld, v, b, k0, s.T, s.KV, kvh, s.hd);
    __syncthreads();
    tile_accum<NC>(Ps, KVs, ld, s.hd, acc);
  }
  write_out<NC>([&](int i, int c) { return acc[i][c]; }, m, l, out, lse, b, h, q0, s.T, s.H, s.hd);
}

// ------------------------------------------------------------------ bf16 forward (WMMA)

namespace wm = nvcuda::wmma;
typedef __nv_bfloat16 bf16;

// tile [ATT_TILE, ld] bf16 <- rows t0.. of head h of x (zero past T), rounded to nearest.
__device__ void load_tile_bf16(bf16 *tile, int64_t ld, const float *x, int64_t b, int64_t t0,
                               int64_t T, int64_t nh, int64_t h, int64_t hd) {
  for (int64_t e = threadIdx.x; e < ATT_TILE * hd; e += blockDim.x) {
    int64_t r = e / hd, d = e % hd, t = t0 + r;
    tile[r * ld + d] = __float2bfloat16_rn(t < T ? x[row_at(b, t, T, nh, h, hd) + d] : 0.0f);
  }
}

// One warp: C [16, 16] (fp32, row stride ldc) = (accumulate ? C : 0) + A B over
// `steps` slices of 16 along k. A is bf16 row-major (slice s at A + 16 s); B is
// bf16 in layout LB, slice s at B + s * b_step.
template <typename LB>
__device__ void mma_tile(const bf16 *A, int lda, const bf16 *B, int ldb, int b_step, int steps,
                         float *C, int ldc, bool accumulate) {
  wm::fragment<wm::accumulator, 16, 16, 16, float> f;
  if (accumulate) wm::load_matrix_sync(f, C, ldc, wm::mem_row_major);
  else wm::fill_fragment(f, 0.0f);
  for (int s = 0; s < steps; s++) {
    wm::fragment<wm::matrix_a, 16, 16, 16, bf16, wm::row_major> fa;
    wm::fragment<wm::matrix_b, 16, 16, 16, bf16, LB> fb;
    wm::load_matrix_sync(fa, A + 16 * s, lda);
    wm::load_matrix_sync(fb, B + s * b_step, ldb);
    wm::mma_sync(f, fa, fb, f);
  }
  wm::store_matrix_sync(C, f, ldc, wm::mem_row_major);
}

// The same forward with S = Q K^T and O += P V as 16x16 WMMA tiles, spread
// over the 8 warps. hd is a multiple of 16; NC = hd / 16.
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_fwd_wmma_k(ng_attn_shape s, float scale,
                                                              const float *q, const float *k,
                                                              const float *v, float *out,
                                                              float *lse) {
  extern __shared__ __align__(128) unsigned char smb[];
  const int hd = 16 * NC, ldb = hd + 8, lds = ATT_TILE + 4, ldp = ATT_TILE + 8, ldo = hd + 4;
  bf16 *Qb = (bf16 *)smb, *KVb = Qb + ATT_TILE * ldb;
  float *S = (float *)(KVb + ATT_TILE * ldb);
  bf16 *Pb = (bf16 *)(S + ATT_TILE * lds);
  float *O = (float *)(Pb + ATT_TILE * ldp);
  int64_t qt = query_tile(), q0 = qt * ATT_TILE;
  int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, kvh = h / (s.H / s.KV);
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16, warp = threadIdx.x / 32;
  load_tile_bf16(Qb, ldb, q, b, q0, s.T, s.H, h, hd);
  for (int e = threadIdx.x; e < ATT_TILE * ldo; e += blockDim.x) O[e] = 0.0f;
  float m[RPT], l[RPT];
  for (int i = 0; i < RPT; i++) m[i] = -INFINITY, l[i] = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    int64_t k0 = kt * ATT_TILE;
    __syncthreads();  // the previous tile's products are stored
    load_tile_bf16(KVb, ldb, k, b, k0, s.T, s.KV, kvh, hd);
    __syncthreads();
    for (int t = warp; t < 16; t += 8)  // S [64, 64] = Q K^T: 4 x 4 tiles
      mma_tile<wm::col_major>(Qb + t / 4 * 16 * ldb, ldb, KVb + t % 4 * 16 * ldb, ldb, 16, NC,
                              S + t / 4 * 16 * lds + t % 4 * 16, lds, false);
    __syncthreads();  // S complete, K consumed
    load_tile_bf16(KVb, ldb, v, b, k0, s.T, s.KV, kvh, hd);
    float sc[RPT][RPT], alpha[RPT];
    for (int i = 0; i < RPT; i++)
      for (int j = 0; j < RPT; j++) sc[i][j] = scale * S[(ty + 16 * i) * lds + tx + 16 * j];
    online_softmax(sc, q0, k0, s.T, m, l, alpha);
    for (int i = 0; i < RPT; i++) {
      for (int j = 0; j < RPT; j++)
        Pb[(ty + 16 * i) * ldp + tx + 16 * j] = __float2bfloat16_rn(sc[i][j]);
      for (int c = 0; c < NC; c++) O[(ty + 16 * i) * ldo + tx + 16 * c] *= alpha[i];
    }
    __syncthreads();  // V, P and the rescaled O in place
    for (int t = warp; t < 4 * NC; t += 8)  // O [64, hd] += P V: 4 x NC tiles
      mma_tile<wm::row_major>(Pb + t / NC * 16 * ldp, ldp, KVb + t % NC * 16, ldb, 16 * ldb,
                              ATT_TILE / 16, O + t / NC * 16 * ldo + t % NC * 16, ldo, true);
  }
  __syncthreads();
  write_out<NC>([&](int i, int c) { return O[(ty + 16 * i) * ldo + tx + 16 * c]; }, m, l, out, lse,
                b, h, q0, s.T, s.H, hd);
}

// ------------------------------------------------------------------ backward

// delta [B, H, T] = rowsum(dout * out) in double, one thread per row.
__global__ void att_delta_k(ng_attn_shape s, const float *out, const float *dout, float *delta) {
  int64_t n = s.B * s.H * s.T;
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < n;
       r += (int64_t)gridDim.x * blockDim.x) {
    int64_t t = r % s.T, h = (r / s.T) % s.H, b = r / (s.T * s.H);
    const float *o = out + row_at(b, t, s.T, s.H, h, s.hd), *d = dout + row_at(b, t, s.T, s.H, h, s.hd);
    double acc = 0.0;
    for (int64_t c = 0; c < s.hd; c++) acc += (double)o[c] * d[c];
    delta[r] = (float)acc;
  }
}

// dS of a score tile from S and dP: p = exp(s - lse) where key <= query < T,
// ds = p (dp - delta). Rows index queries when by_row, else columns do.
__device__ void tile_ds(float sc[RPT][RPT], float dp[RPT][RPT], const float *lse_r,
                        const float *delta_r, int64_t q0, int64_t k0, int64_t T, bool by_row) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int i = 0; i < RPT; i++)
    for (int j = 0; j < RPT; j++) {
      int qi = by_row ? i : j, kj = by_row ? j : i;
      int64_t qpos = q0 + (by_row ? ty : tx) + 16 * qi, kpos = k0 + (by_row ? tx : ty) + 16 * kj;
      bool valid = qpos < T && kpos <= qpos;
      float p = valid ? expf(sc[i][j] - lse_r[qi]) : 0.0f;
      sc[i][j] = p;
      dp[i][j] = p * (dp[i][j] - delta_r[qi]);
    }
}

// grid (query tiles, B * H): dq rows of one query tile = scale dS K over its key tiles.
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_dq_k(ng_attn_shape s, float scale,
                                                            const float *q, const float *k,
                                                            const float *v, const float *lse,
                                                            const float *delta,
                                                            const float *dout, float *dq) {
  extern __shared__ float sm[];
  int64_t ld = ngc_att_ld(s.hd), qt = query_tile(), q0 = qt * ATT_TILE;
  int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, kvh = h / (s.H / s.KV);
  float *Qs = sm, *dOs = Qs + ATT_TILE * ld, *Ks = dOs + ATT_TILE * ld, *Vs = Ks + ATT_TILE * ld;
  float *dSs = Vs + ATT_TILE * ld;
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile(Qs, ld, q, b, q0, s.T, s.H, h, s.hd);
  load_tile(dOs, ld, dout, b, q0, s.T, s.H, h, s.hd);
  float lse_r[RPT], delta_r[RPT], acc[RPT][NC] = {};
  for (int i = 0; i < RPT; i++) {
    int64_t t = q0 + ty + 16 * i, r = blockIdx.y * s.T + t;
    lse_r[i] = t < s.T ? lse[r] : 0.0f;
    delta_r[i] = t < s.T ? delta[r] : 0.0f;
  }
  for (int64_t kt = 0; kt <= qt; kt++) {
    int64_t k0 = kt * ATT_TILE;
    __syncthreads();
    load_tile(Ks, ld, k, b, k0, s.T, s.KV, kvh, s.hd);
    load_tile(Vs, ld, v, b, k0, s.T, s.KV, kvh, s.hd);
    __syncthreads();
    float sc[RPT][RPT], dp[RPT][RPT];
    tile_dot(Qs, Ks, ld, s.hd, scale, sc);
    tile_dot(dOs, Vs, ld, s.hd, 1.0f, dp);
    tile_ds(sc, dp, lse_r, delta_r, q0, k0, s.T, true);
    for (int i = 0; i < RPT; i++)
      for (int j = 0; j < RPT; j++) dSs[(ty + 16 * i) * (ATT_TILE + 1) + tx + 16 * j] = dp[i][j];
    __syncthreads();
    tile_accum<NC>(dSs, Ks, ld, s.hd, acc);
  }
  for (int i = 0; i < RPT; i++) {
    int64_t t = q0 + ty + 16 * i;
    for (int c = 0; c < NC && t < s.T; c++)
      if (tx + 16 * c < s.hd) dq[row_at(b, t, s.T, s.H, h, s.hd) + tx + 16 * c] = scale * acc[i][c];
  }
}

// grid (key tiles, B * KV): dk, dv rows of one key tile, summed over the heads
// of the group and their query tiles (from the diagonal on) in order:
// dV = P^T dO, dK = scale dS^T Q.
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_dkv_k(ng_attn_shape s, float scale,
                                                             const float *q, const float *k,
                                                             const float *v, const float *lse,
                                                             const float *delta,
                                                             const float *dout, float *dk,
                                                             float *dv) {
  extern __shared__ float sm[];
  int64_t ld = ngc_att_ld(s.hd), kt = blockIdx.x, k0 = kt * ATT_TILE, nq = gridDim.x;
  int64_t b = blockIdx.y / s.KV, kvh = blockIdx.y % s.KV, group = s.H / s.KV;
  float *Ks = sm, *Vs = Ks + ATT_TILE * ld, *Qs = Vs + ATT_TILE * ld, *dOs = Qs + ATT_TILE * ld;
  float *Ps = dOs + ATT_TILE * ld, *dSs = Ps + ATT_TILE * (ATT_TILE + 1);
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile(Ks, ld, k, b, k0, s.T, s.KV, kvh, s.hd);
  load_tile(Vs, ld, v, b, k0, s.T, s.KV, kvh, s.hd);
  float dka[RPT][NC] = {}, dva[RPT][NC] = {};
  for (int64_t h = kvh * group; h < (kvh + 1) * group; h++)
    for (int64_t qt = kt; qt < nq; qt++) {
      int64_t q0 = qt * ATT_TILE;
      float lse_c[RPT], delta_c[RPT];
      for (int j = 0; j < RPT; j++) {
        int64_t t = q0 + tx + 16 * j, r = (b * s.H + h) * s.T + t;
        lse_c[j] = t < s.T ? lse[r] : 0.0f;
        delta_c[j] = t < s.T ? delta[r] : 0.0f;
      }
      __syncthreads();
      load_tile(Qs, ld, q, b, q0, s.T, s.H, h, s.hd);
      load_tile(dOs, ld, dout, b, q0, s.T, s.H, h, s.hd);
      __syncthreads();
      float sc[RPT][RPT], dp[RPT][RPT];  // rows: keys, columns: queries
      tile_dot(Ks, Qs, ld, s.hd, scale, sc);
      tile_dot(Vs, dOs, ld, s.hd, 1.0f, dp);
      tile_ds(sc, dp, lse_c, delta_c, q0, k0, s.T, false);
      for (int i = 0; i < RPT; i++)
        for (int j = 0; j < RPT; j++) {
          Ps[(ty + 16 * i) * (ATT_TILE + 1) + tx + 16 * j] = sc[i][j];
          dSs[(ty + 16 * i) * (ATT_TILE + 1) + tx + 16 * j] = dp[i][j];
        }
      __syncthreads();
      tile_accum<NC>(Ps, dOs, ld, s.hd, dva);
      tile_accum<NC>(dSs, Qs, ld, s.hd, dka);
    }
  for (int i = 0; i < RPT; i++) {
    int64_t t = k0 + ty + 16 * i;
    for (int c = 0; c < NC && t < s.T; c++)
      if (tx + 16 * c < s.hd) {
        int64_t o = row_at(b, t, s.T, s.KV, kvh, s.hd) + tx + 16 * c;
        dk[o] = scale * dka[i][c];
        dv[o] = dva[i][c];
      }
  }
}

// ------------------------------------------------------------------ launchers

// Registers per thread grow with NC; the head dimension picks the smallest
// instance that covers it.
static int nc_for(int64_t hd) {
  NG_ASSERT(hd > 0 && hd <= ATT_HD_MAX);
  return hd <= 16 ? 1 : hd <= 32 ? 2 : hd <= 64 ? 4 : 8;
}

// Launches kernel `kern` with `smem` bytes of dynamic shared memory (opting in above 48 KiB).
template <typename K, typename... Args>
static void launch(K kern, dim3 grid, size_t smem, Args... args) {
  NG_ASSERT(smem <= NGC_SMEM_OPTIN && grid.y <= NGC_GRID_Y_MAX);
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  kern<<<grid, ATT_THREADS, smem>>>(args...);
  CK_LAUNCH();
}

#define BY_NC(nc, call)                    \
  switch (nc) {                            \
    case 1: { const int NC = 1; call; break; } \
    case 2: { const int NC = 2; call; break; } \
    case 4: { const int NC = 4; call; break; } \
    default: { const int NC = 8; call; break; } \
  }

static float att_scale(int64_t hd) { return (float)(1.0 / sqrt((double)hd)); }

void ngc_attention_forward(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                           const float *v, float *out, float *lse) {
  if (s.B * s.H * s.T == 0) return;
  dim3 grid((unsigned)ngc_tiles(s.T, ATT_TILE), (unsigned)(s.B * s.H));
  float scale = att_scale(s.hd);
  if (ngc(be)->bf16 && ngc_att_wmma_ok(s.hd)) {
    size_t smem = ngc_att_smem(NGC_ATT_FWD, s.hd, true);
    switch (s.hd / 16) {
      case 1: launch(att_fwd_wmma_k<1>, grid, smem, s, scale, q, k, v, out, lse); break;
      case 2: launch(att_fwd_wmma_k<2>, grid, smem, s, scale, q, k, v, out, lse); break;
      case 3: launch(att_fwd_wmma_k<3>, grid, smem, s, scale, q, k, v, out, lse); break;
      case 4: launch(att_fwd_wmma_k<4>, grid, smem, s, scale, q, k, v, out, lse); break;
      case 5: launch(att_fwd_wmma_k<5>, grid, smem, s, scale, q, k, v, out, lse); break;
      case 6: launch(att_fwd_wmma_k<6>, grid, smem, s, scale, q, k, v, out, lse); break;
      case 7: launch(att_fwd_wmma_k<7>, grid, smem, s, scale, q, k, v, out, lse); break;
      default: launch(att_fwd_wmma_k<8>, grid, smem, s, scale, q, k, v, out, lse); break;
    }
    return;
  }
  size_t smem = ngc_att_smem(NGC_ATT_FWD, s.hd, false);
  BY_NC(nc_for(s.hd), launch(att_fwd_k<NC>, grid, smem, s, scale, q, k, v, out, lse));
}

void ngc_attention_backward(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            const float *dout, float *dq, float *dk, float *dv) {
  if (s.B * s.H * s.T == 0) return;
  float *delta = (float *)ngc_scratch(ngc(be), (size_t)(s.B * s.H * s.T) * sizeof(float));
  att_delta_k<<<ngc_blocks(s.B * s.H * s.T, 256), 256>>>(s, out, dout, delta);
  CK_LAUNCH();
  unsigned tiles = (unsigned)ngc_tiles(s.T, ATT_TILE);
  float scale = att_scale(s.hd);
  size_t smem_q = ngc_att_smem(NGC_ATT_BWD_DQ, s.hd, false);
  size_t smem_kv = ngc_att_smem(NGC_ATT_BWD_DKV, s.hd, false);
  BY_NC(nc_for(s.hd),
        launch(att_bwd_dq_k<NC>, dim3(tiles, (unsigned)(s.B * s.H)), smem_q, s, scale, q, k, v,
               lse, (const float *)delta, dout, dq);
        launch(att_bwd_dkv_k<NC>, dim3(tiles, (unsigned)(s.B * s.KV)), smem_kv, s, scale, q, k,
               v, lse, (const float *)delta, dout, dk, dv));
}
