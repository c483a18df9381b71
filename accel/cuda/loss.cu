// normgrow CUDA backend: the fused softmax + CE + KD over the vocabulary, with
// a full teacher or a top-k cache, under every divergence (forward KL, reverse
// KL, JSD). One block per row; the formulas (and the float/double split of every
// term) are those of ref/backend_cpu.c, the bucket term of reverse KL and JSD the
// very code it runs (normgrow/divergence.h). Per-row ce and kd come back to the
// host and are summed there in row order.
#include <math.h>
#include <stdlib.h>

#include "ngcuda.h"
extern "C" {
#include "normgrow/divergence.h"
}

// The teacher: full logits [N, V], or a top-k cache (ids, vals [N, k], lse and
// rest [N]), or neither.
struct teacher_ref {
  const float *logits;
  const int32_t *ids;
  const float *vals, *lse, *rest;
  int64_t k;
};

// One row of a top-k cache (the reference's ng_topk_row): ids, vals [k]; lse, so
// that Q_j = exp(vals_j / tau - lse); rest = log Q_rest, the teacher's log mass on
// the other ids (-inf: none). ids is NULL without a cache.
struct topk_row {
  const int32_t *ids;
  const float *vals;
  float lse, rest;
  int64_t k;
};

// Per-call constants: a_ce, a_kd the weights of the two gradients, w = 1 / n_norm
// (lp.n_norm, or this call's valid rows when it is 0); the divergence and its beta.
struct loss_consts {
  double a_ce, a_kd, w, tau, beta;
  float inv_tau;
  bool teacher;
  ng_divergence div;
};

// What the gradient of a row's kd term, dz = dD/dz (z = s / tau), needs besides the
// row. forward_kl: dz_j = est_j / zst - tgt_j tgt_scale, with the full teacher's max
// mt, or the top-k tail = q_r / p_r on the ids not cached (kd_full, kd_topk).
// reverse_kl, jsd: dz_j = p_j (g_j - gbar), lp_j = (s_j - ms) / tau - log_zd, g_j the
// bucket term's of column j (full teacher: lq_j from mt and log_zt), or g_rest for
// the ids a top-k cache does not hold (kd_bucket).
struct kd_grad {
  double zst, tgt_scale, tail;
  float mt;
  double log_zd, log_zt, g_rest, gbar;
};

struct row_red {
  double *shd;
  float *shf;
  __device__ double sum(double v) const { return ngc_block_reduce(v, shd, ngc_sum()); }
  __device__ float max(const float *x, int64_t V) const {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
    return ngc_block_reduce(m, shf, ngc_max());
  }
  // sum over j of expf((x_j - mx) inv_tau), the floats summed in double
  __device__ double exp_sum(const float *x, int64_t V, float mx, float inv_tau) const {
    double z = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) z += expf((x[j] - mx) * inv_tau);
    return sum(z);
  }
};

__device__ inline bool cached(const unsigned *bits, int64_t j) { return bits[j / 32] >> (j % 32) & 1u; }

// KL of the full teacher row t against the student at tau (see kd_full_row);
// *zt receives the teacher's sum, *mt its max.
__device__ double kd_full(const row_red &r, const float *s, const float *t, int64_t V, float ms,
                          double zst, float inv_tau, float *mt, double *zt) {
  *mt = r.max(t, V);
  *zt = r.exp_sum(t, V, *mt, inv_tau);
  double log_ratio = log(zst) - log(*zt), kl = 0.0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float tg = expf((t[j] - *mt) * inv_tau);
    kl += (double)tg / *zt * ((double)((t[j] - *mt) - (s[j] - ms)) * inv_tau + log_ratio);
  }
  return r.sum(kl);
}

// KL of the bucketed top-k teacher c (see kd_topk_row): Q_j on the cached ids,
// q_r = exp(c.rest) on the others, where the student's share of zst is p_r = off /
// zst (none, q_r = 0, when off is 0); *tail receives q_r / p_r.
__device__ double kd_topk(const row_red &r, const unsigned *bits, const topk_row &c, const float *s,
                          float ms, double zst, int64_t V, double tau, float inv_tau_f,
                          double *tail) {
  double inv_tau = 1.0 / tau, zd = 0.0, off = 0.0, kl = 0.0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    zd += exp(((double)s[j] - ms) * inv_tau);
    if (!cached(bits, j)) off += expf((s[j] - ms) * inv_tau_f);
  }
  double log_zd = log(r.sum(zd));
  off = r.sum(off);
  for (int64_t j = threadIdx.x; j < c.k; j += blockDim.x) {
    double lq = (double)c.vals[j] * inv_tau - c.lse;
    kl += exp(lq) * (lq - (((double)s[c.ids[j]] - ms) * inv_tau - log_zd));
  }
  kl = r.sum(kl);
  double p_r = off / zst, q_r = off > 0.0 ? exp((double)c.rest) : 0.0;
  if (q_r > 0.0) kl += q_r * ((double)c.rest - log(p_r));
  *tail = off > 0.0 ? q_r / p_r : 0.0;
  return kl;
}

// Reverse KL or JSD of the row between bucketed distributions (div_bucket_row of
// the reference): every id its own bucket with a full teacher row t; with a top-k
// cache c (bits marks its ids) each cached id and "every other id", the teacher's
// mass there Q_rest = exp(c.rest). Returns D; fills log_zd, mt, log_zt, g_rest and
// gbar of *kg.
__device__ double kd_bucket(const row_red &r, const loss_consts &lc, const unsigned *bits,
                            const float *t, const topk_row &c, const float *s, float ms, int64_t V,
                            kd_grad *kg) {
  double inv_tau = 1.0 / lc.tau, zd = 0.0, D = 0.0, gbar = 0.0, g;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) zd += exp(((double)s[j] - ms) * inv_tau);
  kg->log_zd = log(r.sum(zd));
  if (t) {
    kg->mt = r.max(t, V);
    double zt = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) zt += exp(((double)t[j] - kg->mt) * inv_tau);
    kg->log_zt = log(r.sum(zt));
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      double lp = ((double)s[j] - ms) * inv_tau - kg->log_zd;
      double lq = ((double)t[j] - kg->mt) * inv_tau - kg->log_zt;
      D += ng_bucket_term(lc.div, lc.beta, lq, lp, &g);
      gbar += exp(lp) * g;
    }
  } else {
    double p_rest = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
      if (!cached(bits, j)) p_rest += exp(((double)s[j] - ms) * inv_tau - kg->log_zd);
    p_rest = r.sum(p_rest);
    kg->g_rest = 0.0;
    if (c.k < V) {  // (k = V: the cache holds every id, no rest bucket)
      double d_rest = ng_bucket_term(lc.div, lc.beta, (double)c.rest, log(p_rest), &kg->g_rest);
      if (threadIdx.x == 0) D += d_rest, gbar += p_rest * kg->g_rest;  // once in the block's sums
    }
    for (int64_t j = threadIdx.x; j < c.k; j += blockDim.x) {
      double lp = ((double)s[c.ids[j]] - ms) * inv_tau - kg->log_zd;
      double lq = (double)c.vals[j] * inv_tau - c.lse;
      D += ng_bucket_term(lc.div, lc.beta, lq, lp, &g);
      gbar += exp(lp) * g;
    }
  }
  kg->gbar = r.sum(gbar);
  return r.sum(D);
}

// dz of column j of the row (see kd_grad); t the full teacher's row or NULL, in_cache
// whether a top-k cache holds j (its dz is kd_dz_cached's).
__device__ double kd_dz(const loss_consts &lc, const kd_grad &kg, const float *s, float ms,
                        const float *t, bool in_cache, int64_t j) {
  switch (lc.div) {
    case NG_DIV_FORWARD_KL: {
      float est = expf((s[j] - ms) * lc.inv_tau);
      float tgt = t ? expf((t[j] - kg.mt) * lc.inv_tau) : in_cache ? 0.0f : (float)(est * kg.tail);
      return est / kg.zst - tgt * kg.tgt_scale;
    }
    case NG_DIV_REVERSE_KL:
    case NG_DIV_JSD: {
      double inv_tau = 1.0 / lc.tau, lp = ((double)s[j] - ms) * inv_tau - kg.log_zd, g = kg.g_rest;
      if (t) ng_bucket_term(lc.div, lc.beta, ((double)t[j] - kg.mt) * inv_tau - kg.log_zt, lp, &g);
      return exp(lp) * (g - kg.gbar);
    }
  }
  return 0.0;
}

// dz of the cached id `id`, its cached logit `val`, the cache's lse.
__device__ double kd_dz_cached(const loss_consts &lc, const kd_grad &kg, const float *s, float ms,
                               int32_t id, float val, float lse) {
  double inv_tau = 1.0 / lc.tau, lq = (double)val * inv_tau - lse;
  switch (lc.div) {
    case NG_DIV_FORWARD_KL: {
      float est = expf((s[id] - ms) * lc.inv_tau), tgt = (float)(exp(lq) * kg.zst);
      return est / kg.zst - tgt * kg.tgt_scale;
    }
    case NG_DIV_REVERSE_KL:
    case NG_DIV_JSD: {
      double lp = ((double)s[id] - ms) * inv_tau - kg.log_zd, g;
      ng_bucket_term(lc.div, lc.beta, lq, lp, &g);
      return exp(lp) * (g - kg.gbar);
    }
  }
  return 0.0;
}

// One row of the fused loss (grid: N rows of stride V; softmaxes over Vu columns).
__global__ void __launch_bounds__(ROW_THREADS) ce_kd_k(const float *logits, teacher_ref t,
                                                       const int32_t *targets, int64_t V,
                                                       int64_t Vu, loss_consts lc, float *dlogits,
                                                       double *row_ce, double *row_kl) {
  __shared__ double shd[ROW_THREADS];
  __shared__ float shf[ROW_THREADS];
  extern __shared__ unsigned bits[];  // top-k: a bit per id in the cache
  row_red r = {shd, shf};
  int64_t i = blockIdx.x;
  int32_t y = targets[i];
  float *ds = dlogits ? dlogits + i * V : NULL;
  if (y < 0) {
    for (int64_t j = threadIdx.x; ds && j < V; j += blockDim.x) ds[j] = 0.0f;
    if (threadIdx.x == 0) row_ce[i] = row_kl[i] = 0.0;
    return;
  }
  for (int64_t j = Vu + threadIdx.x; ds && j < V; j += blockDim.x) ds[j] = 0.0f;  // padding ids
  const float *s = logits + i * V;
  float ms = r.max(s, Vu);
  double zs = r.exp_sum(s, Vu, ms, 1.0f), kl = 0.0;
  const float *trow = t.logits ? t.logits + i * V : NULL;
  topk_row c = {};
  if (t.ids) c = {t.ids + i * t.k, t.vals + i * t.k, t.lse[i], t.rest[i], t.k};
  kd_grad kg = {};
  if (c.ids) {
    for (int64_t j = threadIdx.x; j < ngc_tiles(V, 32); j += blockDim.x) bits[j] = 0u;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < c.k; j += blockDim.x)
      atomicOr(&bits[c.ids[j] / 32], 1u << (c.ids[j] % 32));  // integer: order-independent
    __syncthreads();
  }
  if (lc.teacher) {
    switch (lc.div) {
      case NG_DIV_FORWARD_KL:
        kg.zst = r.exp_sum(s, Vu, ms, lc.inv_tau);
        if (trow) {
          double zt;
          kl = kd_full(r, s, trow, Vu, ms, kg.zst, lc.inv_tau, &kg.mt, &zt);
          kg.tgt_scale = 1.0 / zt;
        } else {
          kl = kd_topk(r, bits, c, s, ms, kg.zst, Vu, lc.tau, lc.inv_tau, &kg.tail);
          kg.tgt_scale = 1.0 / kg.zst;
        }
        break;
      case NG_DIV_REVERSE_KL:
      case NG_DIV_JSD:
        kl = kd_bucket(r, lc, bits, trow, c, s, ms, Vu, &kg);
        break;
    }
  }
  if (threadIdx.x == 0) {
    row_ce[i] = (double)ms + log(zs) - (double)s[y];
    row_kl[i] = kl;
  }
  if (!ds) return;
  // d/ds_j = w (a_ce ps_j + a_kd dz_j), ps = softmax(s), dz as in the reference.
  for (int64_t j = threadIdx.x; j < Vu; j += blockDim.x) {
    double g = lc.a_ce * expf(s[j] - ms) / zs;
    if (lc.teacher) g += lc.a_kd * kd_dz(lc, kg, s, ms, trow, c.ids && cached(bits, j), j);
    ds[j] = (float)(lc.w * g);
  }
  __syncthreads();
  if (c.ids) {  // the cached ids
    for (int64_t j = threadIdx.x; j < c.k; j += blockDim.x)
      ds[c.ids[j]] = (float)(lc.w * (lc.a_ce * expf(s[c.ids[j]] - ms) / zs +
                                     lc.a_kd * kd_dz_cached(lc, kg, s, ms, c.ids[j], c.vals[j], c.lse)));
    __syncthreads();
  }
  if (threadIdx.x == 0) ds[y] -= (float)(lc.w * lc.a_ce);
}

// Counts the valid rows (a synchronization point), runs the rows, sums them in
// order; ce, kd and dlogits are divided by n_norm (see loss_consts).
static void ce_kd_run(ng_backend *be, const float *logits, teacher_ref t, const int32_t *targets,
                      int64_t N, int64_t V, ng_loss_params lp, float *dlogits, double *ce,
                      double *kd, int64_t *n_valid) {
  int64_t Vu = lp.vocab_used > 0 && lp.vocab_used < V ? lp.vocab_used : V, nv = 0;
  *ce = *kd = 0.0;
  *n_valid = 0;
  if (N == 0) return;
  int32_t *tg = (int32_t *)ng_xmalloc((size_t)N * sizeof(int32_t));
  CK(cudaMemcpy(tg, targets, (size_t)N * sizeof(int32_t), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < N; i++) nv += tg[i] >= 0;
  free(tg);
  bool teacher = t.logits || t.ids;
  int64_t n_norm = lp.n_norm > 0 ? lp.n_norm : nv;
  loss_consts lc = {teacher ? 1.0 - lp.kd_weight : 1.0, teacher ? lp.kd_weight * lp.temperature : 0.0,
                    n_norm ? 1.0 / (double)n_norm : 0.0, lp.temperature, lp.beta,
                    (float)(1.0 / lp.temperature), teacher, lp.divergence};
  double *rows = (double *)ngc_scratch(ngc(be), 2 * (size_t)N * sizeof(double));  // ce [N], kl [N]
  size_t smem = t.ids ? ngc_topk_smem(V) : 0;
  NG_ASSERT(smem <= NGC_SMEM_OPTIN);
  CK(cudaFuncSetAttribute(ce_kd_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  ce_kd_k<<<(unsigned)N, ROW_THREADS, smem>>>(logits, t, targets, V, Vu, lc, dlogits, rows,
                                              rows + N);
  CK_LAUNCH();
  double *host = (double *)ng_xmalloc(2 * (size_t)N * sizeof(double));
  CK(cudaMemcpy(host, rows, 2 * (size_t)N * sizeof(double), cudaMemcpyDeviceToHost));
  double sce = 0.0, skl = 0.0;
  for (int64_t i = 0; i < N; i++) {
    sce += host[i];
    skl += host[N + i];
  }
  free(host);
  double w = lc.w;
  *ce = sce * w;
  *kd = teacher ? lp.temperature * lp.temperature * skl * w : 0.0;
  *n_valid = nv;
}

void ngc_ce_kd(ng_backend *be, const float *logits, const float *teacher, const int32_t *targets,
               int64_t N, int64_t V, ng_loss_params lp, float *dlogits, double *ce, double *kd,
               int64_t *n_valid) {
  teacher_ref t = {teacher, NULL, NULL, NULL, NULL, 0};
  ce_kd_run(be, logits, t, targets, N, V, lp, dlogits, ce, kd, n_valid);
}

void ngc_ce_kd_topk(ng_backend *be, const float *logits, const int32_t *topk_ids,
                    const float *topk_vals, const float *topk_lse, const float *topk_rest,
                    int64_t k, const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                    float *dlogits, double *ce, double *kd, int64_t *n_valid) {
  teacher_ref t = {NULL, topk_ids, topk_vals, topk_lse, topk_rest, k};
  ce_kd_run(be, logits, t, targets, N, V, lp, dlogits, ce, kd, n_valid);
}
