// normgrow CUDA backend: causal grouped-query attention, tiled with an online
// softmax (the flash style). Scores exist only as [ATT_TILE, ATT_TILE] tiles in
// shared memory; the forward saves lse [B, H, T] and the backward recomputes
// P = exp(S - lse) from it.
//
// A block of ATT_THREADS threads is a 16 x 16 grid (ty, tx); in a score tile
// it owns rows ty + 16 i and columns tx + 16 j (i, j < 4), in an [ATT_TILE, hd]
// tile rows ty + 16 i and columns tx + 16 c (c < NC = hd / 16 rounded up). The 16 threads of one row are 16 lanes of one warp, so row
// statistics reduce with shuffles.
//
// The backward is deterministic without atomics: dQ comes from one block per
// query tile looping over its key tiles; dK and dV from one block per key tile
// looping, in a fixed order, over the heads of its group and their query tiles.
//
// bf16 mode (head dimensions that are multiples of 16): every product of the
// forward and the backward runs on tensor cores (WMMA 16x16x16, bf16 inputs,
// fp32 accumulation); softmax statistics, delta and dS stay fp32 until they
// become a product's input.
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

// The tensors of one call: the forward reads q, k, v and writes out, lse_out;
// the backward reads q, k, v, lse, dout and delta [B, H, T] and writes dq, dk, dv.
struct att_args {
  const float *q, *k, *v, *lse, *dout, *delta;
  float *out, *lse_out, *dq, *dk, *dv;
};

// Query tiles heaviest first (the last tile sees every key).
__device__ inline int64_t query_tile() { return gridDim.x - 1 - blockIdx.x; }

// grid (query tiles, B * H): out [B, T, H, hd], lse [B, H, T]
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_fwd_k(ng_attn_shape s, float scale, att_args a) {
  extern __shared__ float sm[];
  int64_t ld = ngc_att_ld(s.hd), qt = query_tile(), q0 = qt * ATT_TILE;
  int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, kvh = h / (s.H / s.KV);
  float *Qs = sm, *KVs = Qs + ATT_TILE * ld, *Ps = KVs + ATT_TILE * ld;
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile(Qs, ld, a.q, b, q0, s.T, s.H, h, s.hd);
  float m[RPT], l[RPT], acc[RPT][NC] = {};
  for (int i = 0; i < RPT; i++) m[i] = -INFINITY, l[i] = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    int64_t k0 = kt * ATT_TILE;
    __syncthreads();  // the previous tile's P and V are consumed
    load_tile(KVs, ld, a.k, b, k0, s.T, s.KV, kvh, s.hd);
    __syncthreads();
    float sc[RPT][RPT], alpha[RPT];
    tile_dot(Qs, KVs, ld, s.hd, scale, sc);
    online_softmax(sc, q0, k0, s.T, m, l, alpha);
    for (int i = 0; i < RPT; i++) {
      for (int c = 0; c < NC; c++) acc[i][c] *= alpha[i];
      for (int j = 0; j < RPT; j++) Ps[(ty + 16 * i) * (ATT_TILE + 1) + tx + 16 * j] = sc[i][j];
    }
    __syncthreads();  // K consumed, P written
    load_tile(KVs, ld, a.v, b, k0, s.T, s.KV, kvh, s.hd);
    __syncthreads();
    tile_accum<NC>(Ps, KVs, ld, s.hd, acc);
  }
  write_out<NC>([&](int i, int c) { return acc[i][c]; }, m, l, a.out, a.lse_out, b, h, q0, s.T, s.H, s.hd);
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

// lse and delta of the 4 query rows (or columns) q0 + lane + 16 i of head bh (0 past T).
__device__ void row_stats(const float *lse, const float *delta, int64_t bh, int64_t q0, int lane,
                          int64_t T, float lse_r[RPT], float delta_r[RPT]) {
  for (int i = 0; i < RPT; i++) {
    int64_t t = q0 + lane + 16 * i;
    lse_r[i] = t < T ? lse[bh * T + t] : 0.0f;
    delta_r[i] = t < T ? delta[bh * T + t] : 0.0f;
  }
}

// x rows t0 + ty + 16 i (< T) of head h of x [B, T, nh, hd] = scale acc(i, c).
template <int NC, typename Acc>
__device__ void write_rows(Acc acc, float scale, float *x, int64_t b, int64_t t0, int64_t T,
                           int64_t nh, int64_t h, int64_t hd) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int i = 0; i < RPT; i++) {
    int64_t t = t0 + ty + 16 * i;
    for (int c = 0; c < NC && t < T; c++)
      if (tx + 16 * c < hd) x[row_at(b, t, T, nh, h, hd) + tx + 16 * c] = scale * acc(i, c);
  }
}

// The dK/dV reduction order (the same in both modes): the heads of kv head
// kvh in order, each over its query tiles from key tile kt to the last;
// step(h, q0, lse, delta) gets the tile's lse and delta of the thread's 4 query
// columns.
template <typename Step>
__device__ void dkv_order(ng_attn_shape s, const att_args &a, int64_t b, int64_t kvh, int64_t kt,
                          Step step) {
  int64_t group = s.H / s.KV;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; h++)
    for (int64_t qt = kt; qt < gridDim.x; qt++) {
      float lse_c[RPT], delta_c[RPT];
      row_stats(a.lse, a.delta, b * s.H + h, qt * ATT_TILE, threadIdx.x % 16, s.T, lse_c, delta_c);
      step(h, qt * ATT_TILE, lse_c, delta_c);
    }
}

// grid (query tiles, B * H): dq rows of one query tile = scale dS K over its key tiles.
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_dq_k(ng_attn_shape s, float scale, att_args a) {
  extern __shared__ float sm[];
  int64_t ld = ngc_att_ld(s.hd), qt = query_tile(), q0 = qt * ATT_TILE;
  int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, kvh = h / (s.H / s.KV);
  float *Qs = sm, *dOs = Qs + ATT_TILE * ld, *Ks = dOs + ATT_TILE * ld, *Vs = Ks + ATT_TILE * ld;
  float *dSs = Vs + ATT_TILE * ld;
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile(Qs, ld, a.q, b, q0, s.T, s.H, h, s.hd);
  load_tile(dOs, ld, a.dout, b, q0, s.T, s.H, h, s.hd);
  float lse_r[RPT], delta_r[RPT], acc[RPT][NC] = {};
  row_stats(a.lse, a.delta, blockIdx.y, q0, ty, s.T, lse_r, delta_r);
  for (int64_t kt = 0; kt <= qt; kt++) {
    int64_t k0 = kt * ATT_TILE;
    __syncthreads();
    load_tile(Ks, ld, a.k, b, k0, s.T, s.KV, kvh, s.hd);
    load_tile(Vs, ld, a.v, b, k0, s.T, s.KV, kvh, s.hd);
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
  write_rows<NC>([&](int i, int c) { return acc[i][c]; }, scale, a.dq, b, q0, s.T, s.H, h, s.hd);
}

// grid (key tiles, B * KV): dk, dv rows of one key tile, summed over the heads
// of the group and their query tiles (from the diagonal on) in order:
// dV = P^T dO, dK = scale dS^T Q.
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_dkv_k(ng_attn_shape s, float scale, att_args a) {
  extern __shared__ float sm[];
  int64_t ld = ngc_att_ld(s.hd), kt = blockIdx.x, k0 = kt * ATT_TILE;
  int64_t b = blockIdx.y / s.KV, kvh = blockIdx.y % s.KV;
  float *Ks = sm, *Vs = Ks + ATT_TILE * ld, *Qs = Vs + ATT_TILE * ld, *dOs = Qs + ATT_TILE * ld;
  float *Ps = dOs + ATT_TILE * ld, *dSs = Ps + ATT_TILE * (ATT_TILE + 1);
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile(Ks, ld, a.k, b, k0, s.T, s.KV, kvh, s.hd);
  load_tile(Vs, ld, a.v, b, k0, s.T, s.KV, kvh, s.hd);
  float dka[RPT][NC] = {}, dva[RPT][NC] = {};
  dkv_order(s, a, b, kvh, kt, [&](int64_t h, int64_t q0, const float *lse_c, const float *delta_c) {
    __syncthreads();
    load_tile(Qs, ld, a.q, b, q0, s.T, s.H, h, s.hd);
    load_tile(dOs, ld, a.dout, b, q0, s.T, s.H, h, s.hd);
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
  });
  write_rows<NC>([&](int i, int c) { return dka[i][c]; }, scale, a.dk, b, k0, s.T, s.KV, kvh, s.hd);
  write_rows<NC>([&](int i, int c) { return dva[i][c]; }, 1.0f, a.dv, b, k0, s.T, s.KV, kvh, s.hd);
}

// ------------------------------------------------------------------ bf16 (WMMA)
//
// The same three kernels with every product on tensor cores: bf16 tiles
// [ATT_TILE, hd + 8] (hd = 16 NC), products into fp32 score tiles
// [ATT_TILE, ATT_TILE + 4] read back by the 16 x 16 thread grid for the
// softmax, bf16 probability tiles [ATT_TILE, ATT_TILE + 8] as inputs of the
// next product, and fp32 accumulators [ATT_TILE, hd + 4] in shared memory.

namespace wm = nvcuda::wmma;
typedef __nv_bfloat16 bf16;

template <int NC>
struct wtile {
  static constexpr int hd = 16 * NC, ldt = hd + 8, lds = ATT_TILE + 4, ldp = ATT_TILE + 8,
                       ldo = hd + 4;
};

// Hands out consecutive regions of dynamic shared memory (each a multiple of 32 bytes).
struct smem_carver {
  unsigned char *p;
  template <typename T>
  __device__ T *take(int n) {
    T *r = (T *)p;
    p += n * sizeof(T);
    return r;
  }
};

// tile [ATT_TILE, ld] bf16 <- rows t0.. of head h of x (zero past T), rounded to nearest.
__device__ void load_tile_bf16(bf16 *tile, int64_t ld, const float *x, int64_t b, int64_t t0,
                               int64_t T, int64_t nh, int64_t h, int64_t hd) {
  for (int64_t e = threadIdx.x; e < ATT_TILE * hd; e += blockDim.x) {
    int64_t r = e / hd, d = e % hd, t = t0 + r;
    tile[r * ld + d] = __float2bfloat16_rn(t < T ? x[row_at(b, t, T, nh, h, hd) + d] : 0.0f);
  }
}

__device__ void zero_smem(float *x, int n) {
  for (int e = threadIdx.x; e < n; e += blockDim.x) x[e] = 0.0f;
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

// S [ATT_TILE, ATT_TILE] = A B^T for tiles A, B [ATT_TILE, hd]; 16 products over the 8 warps.
template <int NC>
__device__ void scores_wmma(const bf16 *A, const bf16 *B, float *S) {
  typedef wtile<NC> W;
  for (int t = threadIdx.x / 32; t < 16; t += 8)
    mma_tile<wm::col_major>(A + t / 4 * 16 * W::ldt, W::ldt, B + t % 4 * 16 * W::ldt, W::ldt, 16,
                            NC, S + t / 4 * 16 * W::lds + t % 4 * 16, W::lds, false);
}

// O [ATT_TILE, hd] += P X for P [ATT_TILE, ATT_TILE], X [ATT_TILE, hd]; 4 NC products over the 8 warps.
template <int NC>
__device__ void accum_wmma(const bf16 *P, const bf16 *X, float *O) {
  typedef wtile<NC> W;
  for (int t = threadIdx.x / 32; t < 4 * NC; t += 8)
    mma_tile<wm::row_major>(P + t / NC * 16 * W::ldp, W::ldp, X + t % NC * 16, W::ldt, 16 * W::ldt,
                            ATT_TILE / 16, O + t / NC * 16 * W::ldo + t % NC * 16, W::ldo, true);
}

// The thread's 4 x 4 scores of an fp32 score tile, times scale.
__device__ void read_scores(const float *S, int lds, float scale, float sc[RPT][RPT]) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int i = 0; i < RPT; i++)
    for (int j = 0; j < RPT; j++) sc[i][j] = scale * S[(ty + 16 * i) * lds + tx + 16 * j];
}

// The thread's 4 x 4 values into a bf16 score tile.
__device__ void write_scores_bf16(bf16 *P, int ldp, float x[RPT][RPT]) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int i = 0; i < RPT; i++)
    for (int j = 0; j < RPT; j++) P[(ty + 16 * i) * ldp + tx + 16 * j] = __float2bfloat16_rn(x[i][j]);
}

// The thread's P (in sc) and dS (in dp) of a tile pair (see tile_ds) from the
// products S = A1 B1^T (times scale) and dP = A2 B2^T, held in S and dP.
template <int NC>
__device__ void ds_wmma(const bf16 *A1, const bf16 *B1, const bf16 *A2, const bf16 *B2, float *S,
                        float *dP, float scale, const float *lse, const float *delta, int64_t q0,
                        int64_t k0, int64_t T, bool by_row, float sc[RPT][RPT], float dp[RPT][RPT]) {
  scores_wmma<NC>(A1, B1, S);
  scores_wmma<NC>(A2, B2, dP);
  __syncthreads();
  read_scores(S, wtile<NC>::lds, scale, sc);
  read_scores(dP, wtile<NC>::lds, 1.0f, dp);
  tile_ds(sc, dp, lse, delta, q0, k0, T, by_row);
}

// Forward: grid (query tiles, B * H), as att_fwd_k.
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_fwd_wmma_k(ng_attn_shape s, float scale, att_args a) {
  typedef wtile<NC> W;
  extern __shared__ __align__(128) unsigned char smb[];
  smem_carver c = {smb};
  bf16 *Qb = c.take<bf16>(ATT_TILE * W::ldt), *KVb = c.take<bf16>(ATT_TILE * W::ldt);
  float *S = c.take<float>(ATT_TILE * W::lds);
  bf16 *Pb = c.take<bf16>(ATT_TILE * W::ldp);
  float *O = c.take<float>(ATT_TILE * W::ldo);
  int64_t qt = query_tile(), q0 = qt * ATT_TILE;
  int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, kvh = h / (s.H / s.KV);
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile_bf16(Qb, W::ldt, a.q, b, q0, s.T, s.H, h, W::hd);
  zero_smem(O, ATT_TILE * W::ldo);
  float m[RPT], l[RPT];
  for (int i = 0; i < RPT; i++) m[i] = -INFINITY, l[i] = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    int64_t k0 = kt * ATT_TILE;
    __syncthreads();  // the previous tile's products are stored
    load_tile_bf16(KVb, W::ldt, a.k, b, k0, s.T, s.KV, kvh, W::hd);
    __syncthreads();
    scores_wmma<NC>(Qb, KVb, S);
    __syncthreads();  // S complete, K consumed
    load_tile_bf16(KVb, W::ldt, a.v, b, k0, s.T, s.KV, kvh, W::hd);
    float sc[RPT][RPT], alpha[RPT];
    read_scores(S, W::lds, scale, sc);
    online_softmax(sc, q0, k0, s.T, m, l, alpha);
    write_scores_bf16(Pb, W::ldp, sc);
    for (int i = 0; i < RPT; i++)
      for (int cc = 0; cc < NC; cc++) O[(ty + 16 * i) * W::ldo + tx + 16 * cc] *= alpha[i];
    __syncthreads();  // V, P and the rescaled O in place
    accum_wmma<NC>(Pb, KVb, O);
  }
  __syncthreads();
  write_out<NC>([&](int i, int cc) { return O[(ty + 16 * i) * W::ldo + tx + 16 * cc]; }, m, l, a.out,
                a.lse_out, b, h, q0, s.T, s.H, W::hd);
}

// Shared memory of the bf16 backward kernels: the block's own tiles (dQ: Q and
// dO; dK/dV: K and V), the loop's tiles (K and V; Q and dO), the fp32 S and dP,
// then n bf16 score tiles and n accumulators (dQ: dS and dQ; dK/dV: P, dS and
// dK, dV). ngc_att_smem counts the same regions.
template <int NC>
struct bwd_smem {
  bf16 *own1, *own2, *loop1, *loop2, *sb[2];
  float *S, *dP, *acc[2];
  __device__ bwd_smem(unsigned char *p, int n) {
    typedef wtile<NC> W;
    smem_carver c = {p};
    bf16 **tiles[4] = {&own1, &own2, &loop1, &loop2};
    for (int i = 0; i < 4; i++) *tiles[i] = c.take<bf16>(ATT_TILE * W::ldt);
    S = c.take<float>(ATT_TILE * W::lds);
    dP = c.take<float>(ATT_TILE * W::lds);
    for (int i = 0; i < n; i++) sb[i] = c.take<bf16>(ATT_TILE * W::ldp);
    for (int i = 0; i < n; i++) acc[i] = c.take<float>(ATT_TILE * W::ldo);
  }
};

// dQ: grid (query tiles, B * H), as att_bwd_dq_k.
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_dq_wmma_k(ng_attn_shape s, float scale, att_args a) {
  typedef wtile<NC> W;
  extern __shared__ __align__(128) unsigned char smb[];
  bwd_smem<NC> m(smb, 1);
  bf16 *Qb = m.own1, *dOb = m.own2, *Kb = m.loop1, *Vb = m.loop2, *dSb = m.sb[0];
  float *S = m.S, *dP = m.dP, *acc = m.acc[0];
  int64_t qt = query_tile(), q0 = qt * ATT_TILE;
  int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, kvh = h / (s.H / s.KV);
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile_bf16(Qb, W::ldt, a.q, b, q0, s.T, s.H, h, W::hd);
  load_tile_bf16(dOb, W::ldt, a.dout, b, q0, s.T, s.H, h, W::hd);
  zero_smem(acc, ATT_TILE * W::ldo);
  float lse_r[RPT], delta_r[RPT];
  row_stats(a.lse, a.delta, blockIdx.y, q0, ty, s.T, lse_r, delta_r);
  for (int64_t kt = 0; kt <= qt; kt++) {
    int64_t k0 = kt * ATT_TILE;
    __syncthreads();
    load_tile_bf16(Kb, W::ldt, a.k, b, k0, s.T, s.KV, kvh, W::hd);
    load_tile_bf16(Vb, W::ldt, a.v, b, k0, s.T, s.KV, kvh, W::hd);
    __syncthreads();
    float sc[RPT][RPT], dp[RPT][RPT];
    ds_wmma<NC>(Qb, Kb, dOb, Vb, S, dP, scale, lse_r, delta_r, q0, k0, s.T, true, sc, dp);
    write_scores_bf16(dSb, W::ldp, dp);
    __syncthreads();
    accum_wmma<NC>(dSb, Kb, acc);
  }
  __syncthreads();
  write_rows<NC>([&](int i, int cc) { return acc[(ty + 16 * i) * W::ldo + tx + 16 * cc]; }, scale,
                 a.dq, b, q0, s.T, s.H, h, W::hd);
}

// dK, dV: grid (key tiles, B * KV), as att_bwd_dkv_k; score tiles are [keys, queries].
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_dkv_wmma_k(ng_attn_shape s, float scale, att_args a) {
  typedef wtile<NC> W;
  extern __shared__ __align__(128) unsigned char smb[];
  bwd_smem<NC> m(smb, 2);
  bf16 *Kb = m.own1, *Vb = m.own2, *Qb = m.loop1, *dOb = m.loop2, *Pb = m.sb[0], *dSb = m.sb[1];
  float *S = m.S, *dP = m.dP, *dKa = m.acc[0], *dVa = m.acc[1];
  int64_t kt = blockIdx.x, k0 = kt * ATT_TILE;
  int64_t b = blockIdx.y / s.KV, kvh = blockIdx.y % s.KV;
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_tile_bf16(Kb, W::ldt, a.k, b, k0, s.T, s.KV, kvh, W::hd);
  load_tile_bf16(Vb, W::ldt, a.v, b, k0, s.T, s.KV, kvh, W::hd);
  zero_smem(dKa, ATT_TILE * W::ldo);
  zero_smem(dVa, ATT_TILE * W::ldo);
  dkv_order(s, a, b, kvh, kt, [&](int64_t h, int64_t q0, const float *lse_c, const float *delta_c) {
    __syncthreads();
    load_tile_bf16(Qb, W::ldt, a.q, b, q0, s.T, s.H, h, W::hd);
    load_tile_bf16(dOb, W::ldt, a.dout, b, q0, s.T, s.H, h, W::hd);
    __syncthreads();
    float sc[RPT][RPT], dp[RPT][RPT];  // rows: keys, columns: queries
    ds_wmma<NC>(Kb, Qb, Vb, dOb, S, dP, scale, lse_c, delta_c, q0, k0, s.T, false, sc, dp);
    write_scores_bf16(Pb, W::ldp, sc);
    write_scores_bf16(dSb, W::ldp, dp);
    __syncthreads();
    accum_wmma<NC>(Pb, dOb, dVa);
    accum_wmma<NC>(dSb, Qb, dKa);
  });
  __syncthreads();
  write_rows<NC>([&](int i, int cc) { return dKa[(ty + 16 * i) * W::ldo + tx + 16 * cc]; }, scale,
                 a.dk, b, k0, s.T, s.KV, kvh, W::hd);
  write_rows<NC>([&](int i, int cc) { return dVa[(ty + 16 * i) * W::ldo + tx + 16 * cc]; }, 1.0f,
                 a.dv, b, k0, s.T, s.KV, kvh, W::hd);
}

// ------------------------------------------------------------------ launchers

// Launches kernel `kern` (`what` names it) with `smem` bytes of dynamic shared
// memory (opting in above 48 KiB).
template <typename K, typename... Args>
static void launch(const char *what, K kern, dim3 grid, size_t smem, Args... args) {
  NG_ASSERT(smem <= NGC_SMEM_OPTIN && grid.y <= NGC_GRID_Y_MAX);
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  kern<<<grid, ATT_THREADS, smem>>>(args...);
  ngc_check_launch(what, __FILE__, __LINE__);
}

// `call` with the constant NC = hd / 16 rounded up (registers per thread and
// the bf16 tiles grow with NC).
#define NC_CASE(n, call) \
  case n: {              \
    const int NC = n;    \
    call;                \
    break;               \
  }
#define BY_NC(hd, call)                                                   \
  do {                                                                    \
    NG_ASSERT((hd) > 0 && (hd) <= ATT_HD_MAX);                            \
    switch (((hd) + 15) / 16) {                                           \
      NC_CASE(1, call) NC_CASE(2, call) NC_CASE(3, call) NC_CASE(4, call) \
      NC_CASE(5, call) NC_CASE(6, call) NC_CASE(7, call) NC_CASE(8, call) \
    }                                                                     \
  } while (0)

static float att_scale(int64_t hd) { return (float)(1.0 / sqrt((double)hd)); }

// bf16 mode takes the tensor-core kernels when the head dimension allows.
static bool use_wmma(ng_backend *be, int64_t hd) { return ngc_bf16(be) && ngc_att_wmma_ok(hd); }

void ngc_attention_forward(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                           const float *v, float *out, float *lse) {
  if (s.B * s.H * s.T == 0) return;
  dim3 grid((unsigned)ngc_tiles(s.T, ATT_TILE), (unsigned)(s.B * s.H));
  float scale = att_scale(s.hd);
  bool w = use_wmma(be, s.hd);
  size_t smem = ngc_att_smem(NGC_ATT_FWD, s.hd, w);
  att_args a = {q, k, v, NULL, NULL, NULL, out, lse, NULL, NULL, NULL};
  if (w) BY_NC(s.hd, launch("attention forward (bf16)", att_fwd_wmma_k<NC>, grid, smem, s, scale, a));
  else BY_NC(s.hd, launch("attention forward", att_fwd_k<NC>, grid, smem, s, scale, a));
}

void ngc_attention_backward(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            const float *dout, float *dq, float *dk, float *dv) {
  if (s.B * s.H * s.T == 0) return;
  float *delta = (float *)ngc_scratch(ngc(be), (size_t)(s.B * s.H * s.T) * sizeof(float));
  att_delta_k<<<ngc_blocks(s.B * s.H * s.T, 256), 256>>>(s, out, dout, delta);
  CK_LAUNCH();
  unsigned tiles = (unsigned)ngc_tiles(s.T, ATT_TILE);
  dim3 gq(tiles, (unsigned)(s.B * s.H)), gkv(tiles, (unsigned)(s.B * s.KV));
  float scale = att_scale(s.hd);
  att_args a = {q, k, v, lse, dout, delta, NULL, NULL, dq, dk, dv};
  bool w = use_wmma(be, s.hd);
  size_t sq = ngc_att_smem(NGC_ATT_BWD_DQ, s.hd, w), skv = ngc_att_smem(NGC_ATT_BWD_DKV, s.hd, w);
  if (w)
    BY_NC(s.hd, launch("attention backward dQ (bf16)", att_bwd_dq_wmma_k<NC>, gq, sq, s, scale, a);
          launch("attention backward dK, dV (bf16)", att_bwd_dkv_wmma_k<NC>, gkv, skv, s, scale, a));
  else
    BY_NC(s.hd, launch("attention backward dQ", att_bwd_dq_k<NC>, gq, sq, s, scale, a);
          launch("attention backward dK, dV", att_bwd_dkv_k<NC>, gkv, skv, s, scale, a));
}
