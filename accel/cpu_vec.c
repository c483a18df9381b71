// normgrow: the oneDNN backend's vectorised host kernels (cpu_vec.h).
//
// The pattern throughout: a parallel driver (OpenMP over rows, or over chunks
// of a flat array) calls a kernel on one row or chunk; the kernel is a plain
// loop under `omp simd`, compiled for AVX-512, for AVX2 and for plain x86-64 by
// target_clones (an OpenMP region's body is not cloned, so the kernels hold
// none). Sums over a row reduce in vector lanes (in double where the
// reference sums in double) and then the lanes together: a fixed order for a
// given clone, whatever the thread count.
#include "cpu_vec.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/divergence.h"

#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// Elements per parallel chunk of the flat elementwise ops (memory-bound).
#define VEC_CHUNK 16384
// Rows per block in the column sums of the RMSNorm gain's gradient.
#define ROW_BLOCK 64

const char *ng_vec_family(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? "AVX-512"
         : __builtin_cpu_supports("avx2") ? "AVX2"
                                          : "x86-64 (no AVX2)";
}

// ---------------------------------------------------------------- exp

// exp(x) in fp32 without a library call, so that loops over it vectorise:
// x = n ln2 + r, |r| <= ln2 / 2 (n rounded by the 1.5 * 2^23 trick, ln2 in two
// parts), exp(r) by Cephes' expf polynomial (within 1 ulp of the correctly
// rounded exp on a sweep of [-87, 88]), times 2^n built in the exponent bits. x is clamped to [ln FLT_MIN,
// 88] (e^88 ~ 1.7e38, below FLT_MAX): below, the result is 0; above, e^88.
// NaN stays NaN.
static inline float vexp(float x) {
  const float lo = -87.3365447f, hi = 88.0f, magic = 12582912.0f;  // 1.5 * 2^23
  float xc = x > hi ? hi : x < lo ? lo : x;
  float t = xc * 1.44269504088896341f + magic, n = t - magic;
  int32_t ti;
  memcpy(&ti, &t, sizeof ti);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = p * r * r + r + 1.0f;
  int32_t bits = (ti - 0x4B400000 + 127) * (1 << 23);  // 2^n: n + 127 in the exponent
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return x < lo ? 0.0f : e * scale;
}

// log(x) in fp32 without a library call, so that loops over it vectorise: x =
// m 2^e with m in [sqrt(1/2), sqrt(2)) from the bits, log(m) = log(1 + f) by
// Cephes' logf polynomial, plus e ln2 (ln2 in two parts): within 1 ulp of the
// correctly rounded log on a sweep of every seventh normal float (0.82 at
// worst). x is clamped below at FLT_MIN, the smallest normal (the divergences
// multiply such a log by a probability under FLT_MIN); x is finite and not
// negative.
static inline float vlog(float x) {
  float xc = x < FLT_MIN ? FLT_MIN : x, m;
  int32_t bits;
  memcpy(&bits, &xc, sizeof bits);
  int32_t e = ((bits >> 23) & 0xff) - 127, mb = (bits & 0x007fffff) | 0x3f800000;  // m in [1, 2)
  memcpy(&m, &mb, sizeof m);
  if (m > 1.41421356f) {
    m *= 0.5f;
    e += 1;
  }
  float f = m - 1.0f, z = f * f, fe = (float)e;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = p * f * z + fe * -2.12194440e-4f - 0.5f * z;
  return f + y + fe * 0.693359375f;
}

// ---------------------------------------------------------------- reductions

VEC_CLONES
static float row_max(const float *x, int64_t n) {
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}

// e [n] = exp((x - mx) k); returns sum e, in double.
VEC_CLONES
static double exp_sum(const float *x, int64_t n, float mx, float k, float *e) {
  double z = 0.0;
#pragma omp simd reduction(+ : z)
  for (int64_t j = 0; j < n; j++) {
    float v = vexp((x[j] - mx) * k);
    e[j] = v;
    z += v;
  }
  return z;
}

// et [n] = exp((t - mt) k); *zt = sum et and returns sum et ((t - mt) - (s - ms)),
// both in double: the forward KL's pass over the teacher's row t.
VEC_CLONES
static double teacher_pass(const float *t, const float *s, int64_t n, float mt, float ms, float k,
                           float *et, double *zt) {
  double z = 0.0, dot = 0.0;
#pragma omp simd reduction(+ : z, dot)
  for (int64_t j = 0; j < n; j++) {
    float v = vexp((t[j] - mt) * k);
    et[j] = v;
    z += v;
    dot += (double)(v * ((t[j] - mt) - (s[j] - ms)));
  }
  *zt = z;
  return dot;
}

// ds [n] = c1 ps + c2 est - c3 et (et NULL: c1 ps).
VEC_CLONES
static void loss_grad(const float *ps, const float *est, const float *et, int64_t n, float c1,
                      float c2, float c3, float *ds) {
  if (!et) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) ds[j] = c1 * ps[j];
    return;
  }
#pragma omp simd
  for (int64_t j = 0; j < n; j++) ds[j] = c1 * ps[j] + (c2 * est[j] - c3 * et[j]);
}

// ---------------------------------------------------------------- the loss

// A row's teacher: full logits t [V], a top-k cache (ids, vals [k], its lse at
// the temperature and log mass off the cache), or neither (CE alone).
typedef struct {
  const float *t;
  ng_topk_row c;  // c.ids NULL: no cache
} row_teacher;

// What the kd term of a row leaves for its gradient: forward KL, dz = est /
// zst - tgt / tgt_z (tgt in the row r); the bucketed divergences, dz = est /
// zst * (g - gbar) (g in the row r).
typedef struct {
  double kl, tgt_z, gbar;
} kd_terms;

// Forward KL from a full teacher row t [V]: r = exp((t - mt) / tau), tgt_z =
// zt; KL(pt || pst) = (1/tau) sum_j pt_j ((t_j - mt) - (s_j - ms)) + log(zst / zt).
static kd_terms fkl_full(const float *s, const float *t, int64_t V, float ms, double zst,
                         float inv_tau, float *r) {
  double zt;
  float mt = row_max(t, V);
  double dot = teacher_pass(t, s, V, mt, ms, inv_tau, r, &zt);
  return (kd_terms){.kl = dot * inv_tau / zt + log(zst) - log(zt), .tgt_z = zt};
}

// r [n] = e [n] (the row's exponentials) with the k cached ids zeroed; returns
// sum r, in double: the student's mass off the cache, summed directly (zst -
// the cached mass would leave only rounding when the cache holds nearly every id).
VEC_CLONES
static double off_cache(const float *e, const int32_t *ids, int64_t k, int64_t n, float *r) {
  memcpy(r, e, (size_t)n * sizeof(float));
  for (int64_t j = 0; j < k; j++) r[ids[j]] = 0.0f;
  double z = 0.0;
#pragma omp simd reduction(+ : z)
  for (int64_t j = 0; j < n; j++) z += r[j];
  return z;
}

// r [n] *= c.
VEC_CLONES
static void scale_row(float *r, int64_t n, float c) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) r[j] *= c;
}

// Forward KL from a top-k cache, the reference's kd_topk_row: q_j = exp(v_j /
// tau - lse) on the cached ids, tail mass q_r = exp(rest) against the
// student's p_r off the cache; r = tgt relative to zst (tgt_z = zst): q_j zst
// on the cached ids, est_j q_r / p_r elsewhere.
static kd_terms fkl_topk(ng_topk_row c, const float *s, const float *est, float ms, double zst,
                         int64_t V, double inv_tau, float *r) {
  double off = off_cache(est, c.ids, c.k, V, r), tail;
  double kl = ng_topk_fkl_cached(c, s, ms, inv_tau, log(zst));
  kl += ng_topk_fkl_rest(c, off, zst, &tail);
  scale_row(r, V, (float)tail);
  ng_topk_fkl_target(c, inv_tau, zst, r);
  return (kd_terms){.kl = kl, .tgt_z = zst};
}

// The reverse KL and the JSD over a full teacher, one id a bucket, read the
// log-ratio of the student's probability to the teacher's at tau,
//   r = lp - lq = ((s - ms) - (t - mt)) / tau + log(zt / zst),
// formed from the two rows' differences and one constant (lp and lq apart
// would each carry a rounding of their size, which r, near 0 where the two
// distributions agree, does not). P = est / zst and Q = et / zt.

// Reverse KL: g [n] = r where P > 0 (else 0); returns D = sum P g (also gbar).
VEC_CLONES
static double rkl_pass(const float *s, const float *t, const float *est, int64_t n, float ms,
                       float mt, float inv_tau, float c, float inv_zst, float *g) {
  double D = 0.0;
#pragma omp simd reduction(+ : D)
  for (int64_t j = 0; j < n; j++) {
    float P = est[j] * inv_zst, r = ((s[j] - ms) - (t[j] - mt)) * inv_tau + c;
    float gj = P > 0.0f ? r : 0.0f;
    g[j] = gj;
    D += (double)(P * gj);
  }
  return D;
}

// JSD (beta b): et [n] in, g [n] out (g may alias et). With M = b Q + (1-b) P,
// lq - lm = -log(b + (1-b) e^r) and lp - lm = r + (lq - lm), taken for r > 0
// as lp - lm = -log((1-b) + b e^-r) (no exponential of a positive number):
//   D = sum b Q (lq - lm) + (1-b) P (lp - lm),  g = (1-b) (lp - lm) where P > 0;
// returns D, and *gbar = sum P g, both in double.
VEC_CLONES
static double jsd_pass(const float *s, const float *t, const float *est, const float *et,
                       int64_t n, float ms, float mt, float inv_tau, float c, float inv_zst,
                       float inv_zt, float b, double *gbar, float *g) {
  double D = 0.0, gb = 0.0;
#pragma omp simd reduction(+ : D, gb)
  for (int64_t j = 0; j < n; j++) {
    float P = est[j] * inv_zst, Q = et[j] * inv_zt, r = ((s[j] - ms) - (t[j] - mt)) * inv_tau + c;
    bool up = r > 0.0f;
    float e = vexp(up ? -r : r), L = vlog(up ? (1.0f - b) + b * e : b + (1.0f - b) * e);
    float lpm = up ? -L : r - L, lqm = lpm - r;
    float gj = P > 0.0f ? (1.0f - b) * lpm : 0.0f;
    g[j] = gj;
    D += (double)((Q > 0.0f ? b * Q * lqm : 0.0f) + P * gj);
    gb += (double)(P * gj);
  }
  *gbar = gb;
  return D;
}

// Reverse KL or JSD from a full teacher row t [V] (r: the teacher's
// exponentials, then g).
static kd_terms bucket_full(ng_divergence d, double beta, const float *s, const float *t,
                            const float *est, int64_t V, float ms, double zst, float inv_tau,
                            float *r) {
  float mt = row_max(t, V);
  double zt = exp_sum(t, V, mt, inv_tau, r);
  float c = (float)(log(zt) - log(zst)), inv_zst = (float)(1.0 / zst);
  kd_terms k = {0};
  switch (d) {
    case NG_DIV_REVERSE_KL:
      k.kl = k.gbar = rkl_pass(s, t, est, V, ms, mt, inv_tau, c, inv_zst, r);
      return k;
    case NG_DIV_JSD:
      k.kl = jsd_pass(s, t, est, r, V, ms, mt, inv_tau, c, inv_zst, (float)(1.0 / zt), (float)beta,
                      &k.gbar, r);
      return k;
    case NG_DIV_FORWARD_KL: break;  // fkl_full
  }
  NG_ASSERT(!"bucket_full: not a bucketed divergence");
  return k;
}

// r [n] = c.
VEC_CLONES
static void fill_row(float *r, int64_t n, float c) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) r[j] = c;
}

// Reverse KL or JSD from a top-k cache, the reference's buckets: each cached
// id, and "every other id" (Q_rest = exp(rest), P_rest the student's
// mass there; none when the cache holds every id); g = g_rest off the cache.
static kd_terms bucket_topk(ng_divergence d, double beta, ng_topk_row c, const float *s,
                            const float *est, int64_t V, float ms, double zst, double inv_tau,
                            float *r) {
  double log_zst = log(zst), p_rest = off_cache(est, c.ids, c.k, V, r) / zst, g_rest, g;
  kd_terms k = {0};
  k.kl += ng_topk_bucket_rest(d, beta, c, V, p_rest, &g_rest, &k.gbar);
  fill_row(r, V, (float)g_rest);
  for (int64_t j = 0; j < c.k; j++) {
    k.kl += ng_topk_bucket_id(d, beta, c, j, s, ms, inv_tau, log_zst, &g, &k.gbar);
    r[c.ids[j]] = (float)g;
  }
  return k;
}

// ds [n] = c1 ps + c2 est (g - gbar): the bucketed divergences' gradient.
VEC_CLONES
static void bucket_grad(const float *ps, const float *est, const float *g, int64_t n, float c1,
                        float c2, float gbar, float *ds) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) ds[j] = c1 * ps[j] + c2 * (est[j] * (g[j] - gbar));
}

// The kd term of a row and its gradient's row r, the one place its
// divergence and teacher kind are chosen (kd_grad reads r).
static kd_terms kd_row(const row_teacher *tc, const float *s, const float *est, int64_t V,
                       float ms, double zst, ng_loss_params lp, float *r) {
  double inv_tau = 1.0 / lp.temperature;
  switch (lp.divergence) {
    case NG_DIV_FORWARD_KL:
      return tc->t ? fkl_full(s, tc->t, V, ms, zst, (float)inv_tau, r)
                   : fkl_topk(tc->c, s, est, ms, zst, V, inv_tau, r);
    case NG_DIV_REVERSE_KL:
    case NG_DIV_JSD:
      return tc->t ? bucket_full(lp.divergence, lp.beta, s, tc->t, est, V, ms, zst, (float)inv_tau, r)
                   : bucket_topk(lp.divergence, lp.beta, tc->c, s, est, V, ms, zst, inv_tau, r);
  }
  NG_ASSERT(!"ng_divergence out of range");
  return (kd_terms){0};
}

// ds [V] = c1 ps + c_kd dD/dz from kd_row's terms k and row r (c_kd = w a_kd).
static void kd_grad(ng_divergence d, const float *ps, const float *est, const float *r, kd_terms k,
                    int64_t V, double zst, float c1, double c_kd, float *ds) {
  switch (d) {
    case NG_DIV_FORWARD_KL:  // dz = est / zst - r / tgt_z
      loss_grad(ps, est, r, V, c1, (float)(c_kd / zst), (float)(c_kd / k.tgt_z), ds);
      return;
    case NG_DIV_REVERSE_KL:
    case NG_DIV_JSD:  // dz = est / zst (r - gbar)
      bucket_grad(ps, est, r, V, c1, (float)(c_kd / zst), (float)k.gbar, ds);
      return;
  }
  NG_ASSERT(!"ng_divergence out of range");
}

// One row s [V] of the fused loss, its teacher tc (or none), target y; with
// ps = softmax(s), pst = softmax(s / tau) (est = exp((s - ms) / tau), sum zst):
//   ce = log sum exp(s) - s_y;  kl = D(pt, pst) (kd_row);
//   ds = w ((1 - a) (ps - onehot) + a tau dD/dz), or w (ps - onehot) without a teacher.
// scratch holds 3 rows of V floats (ps, est, the kd term's row).
static void loss_row(const float *s, const row_teacher *tc, int32_t y, int64_t V, ng_loss_params lp,
                     double w, float *ds, float *scratch, double *ce, double *kl) {
  float *ps = scratch, *est = scratch + V, *r = scratch + 2 * V;
  float ms = row_max(s, V);
  double zs = exp_sum(s, V, ms, 1.0f, ps);
  *ce = (double)ms + log(zs) - (double)s[y];
  *kl = 0.0;
  bool teacher = tc->t || tc->c.ids;
  double a_ce = teacher ? 1.0 - lp.kd_weight : 1.0, a_kd = teacher ? lp.kd_weight * lp.temperature : 0.0;
  float c1 = (float)(w * a_ce / zs);
  if (!teacher) {
    if (ds) loss_grad(ps, NULL, NULL, V, c1, 0.0f, 0.0f, ds);
  } else {
    double zst = exp_sum(s, V, ms, (float)(1.0 / lp.temperature), est);
    kd_terms k = kd_row(tc, s, est, V, ms, zst, lp, r);
    *kl = k.kl;
    if (ds) kd_grad(lp.divergence, ps, est, r, k, V, zst, c1, w * a_kd, ds);
  }
  if (ds) ds[y] -= (float)(w * a_ce);
}

// The rows of ng_vec_ce_kd and ng_vec_ce_kd_topk: logits [N, V] and a full
// teacher [N, V], a top-k cache (ids, vals [N, k], lse, rest [N]) or neither.
typedef struct {
  const float *logits, *teacher;
  const int32_t *ids;
  const float *vals, *lse, *rest;
  int64_t k, V;
} vec_rows;

// loss_row of row i; scratch: 3 rows of Vu floats.
static void vec_loss_row(const void *ctx, int64_t i, int32_t y, int64_t Vu, ng_loss_params lp,
                         double w, float *ds, void *scratch, double *ce, double *kl) {
  const vec_rows *c = ctx;
  row_teacher tc = {.t = c->teacher ? c->teacher + (size_t)i * c->V : NULL};
  if (c->ids) tc.c = (ng_topk_row){.ids = c->ids + (size_t)i * c->k, .vals = c->vals + (size_t)i * c->k,
                                   .lse = c->lse[i], .rest = c->rest[i], .k = c->k};
  loss_row(c->logits + (size_t)i * c->V, &tc, y, Vu, lp, w, ds, scratch, ce, kl);
}

static void vec_loss_rows(const vec_rows *c, const int32_t *targets, int64_t N, ng_loss_params lp,
                          float *dlogits, double *ce, double *kd, int64_t *n_valid) {
  int64_t Vu = lp.vocab_used > 0 && lp.vocab_used < c->V ? lp.vocab_used : c->V;
  ng_cpu_loss_rows(vec_loss_row, c, 3 * (size_t)Vu * sizeof(float), c->teacher || c->ids, targets, N,
                   c->V, lp, dlogits, ce, kd, n_valid);
}

void ng_vec_ce_kd(ng_backend *be, const float *logits, const float *teacher,
                  const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                  float *dlogits, double *ce, double *kd, int64_t *n_valid) {
  (void)be;
  vec_rows c = {.logits = logits, .teacher = teacher, .V = V};
  vec_loss_rows(&c, targets, N, lp, dlogits, ce, kd, n_valid);
}

void ng_vec_ce_kd_topk(ng_backend *be, const float *logits, const int32_t *topk_ids,
                       const float *topk_vals, const float *topk_lse, const float *topk_rest,
                       int64_t k, const int32_t *targets, int64_t N, int64_t V,
                       ng_loss_params lp, float *dlogits, double *ce, double *kd,
                       int64_t *n_valid) {
  (void)be;
  vec_rows c = {.logits = logits, .ids = topk_ids, .vals = topk_vals, .lse = topk_lse,
                .rest = topk_rest, .k = k, .V = V};
  vec_loss_rows(&c, targets, N, lp, dlogits, ce, kd, n_valid);
}

// ---------------------------------------------------------------- RMSNorm

// y [C] = w x rstd, rstd = 1 / sqrt(mean(x^2) + eps), returned.
VEC_CLONES
static float rmsnorm_row(const float *x, const float *w, int64_t C, float eps, float *y) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < C; c++) ss += (double)(x[c] * x[c]);
  float rs = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
#pragma omp simd
  for (int64_t c = 0; c < C; c++) y[c] = w[c] * (x[c] * rs);
  return rs;
}

void ng_vec_rmsnorm_forward(ng_backend *be, const float *x, const float *w, int64_t R, int64_t C,
                            float eps, float *y, float *rstd) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++)
    rstd[r] = rmsnorm_row(x + (size_t)r * C, w, C, eps, y + (size_t)r * C);
}

// dx [C] += rs (g - xh mean(g xh)), xh = x rs, g = dy w.
VEC_CLONES
static void rmsnorm_grad_row(const float *x, const float *w, float rs, const float *dy, int64_t C,
                             float *dx) {
  double dot = 0.0;
#pragma omp simd reduction(+ : dot)
  for (int64_t c = 0; c < C; c++) dot += (double)((dy[c] * w[c]) * (x[c] * rs));
  float mean = (float)(dot / (double)C);
#pragma omp simd
  for (int64_t c = 0; c < C; c++) dx[c] += rs * (dy[c] * w[c] - x[c] * rs * mean);
}

// pw [C] += sum over rows [r0, r1) of dy x rstd.
VEC_CLONES
static void gain_grad_rows(const float *x, const float *rstd, const float *dy, int64_t r0,
                           int64_t r1, int64_t C, float *pw) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
    float rs = rstd[r];
#pragma omp simd
    for (int64_t c = 0; c < C; c++) pw[c] += dyr[c] * (xr[c] * rs);
  }
}

// dw [C] += the block partials [nblk, C], in order.
VEC_CLONES
static void add_partials(const float *part, int64_t nblk, int64_t C, float *dw) {
  for (int64_t b = 0; b < nblk; b++) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++) dw[c] += part[(size_t)b * C + c];
  }
}

void ng_vec_rmsnorm_backward(ng_backend *be, const float *x, const float *w, const float *rstd,
                             const float *dy, int64_t R, int64_t C, float *dx, float *dw) {
  (void)be;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++)
    rmsnorm_grad_row(x + (size_t)r * C, w, rstd[r], dy + (size_t)r * C, C, dx + (size_t)r * C);
  if (!dw) return;
  // dw over fixed blocks of rows, then the block partials in order.
  int64_t nblk = (R + ROW_BLOCK - 1) / ROW_BLOCK;
  float *part = ng_xcalloc((size_t)nblk * (size_t)C, sizeof(float));  // [nblk, C]
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblk; b++)
    gain_grad_rows(x, rstd, dy, b * ROW_BLOCK, (b + 1) * ROW_BLOCK < R ? (b + 1) * ROW_BLOCK : R,
                   C, part + (size_t)b * C);
  add_partials(part, nblk, C, dw);
  free(part);
}

// ---------------------------------------------------------------- RoPE

// One head x [hd]: (x1, x2) <- (x1 c - x2 sn, x2 c + x1 sn), sn = sign * s.
VEC_CLONES
static void rope_head(float *x, const float *c, const float *s, int64_t half, float sign) {
  float *x1 = x, *x2 = x + half;
#pragma omp simd
  for (int64_t j = 0; j < half; j++) {
    float a = x1[j], b = x2[j], sj = sign * s[j];
    x1[j] = a * c[j] - b * sj;
    x2[j] = b * c[j] + a * sj;
  }
}

// x [B, T, nh, hd] rotated in place; sign -1: by the inverse rotation (the backward).
static void rope(float *x, int64_t B, int64_t T, int64_t nh, int64_t hd, double theta,
                 float sign) {
  int64_t half = hd / 2;
  float *cs = ng_xmalloc((size_t)(T * half) * sizeof(float));  // [T, half]
  float *sn = ng_xmalloc((size_t)(T * half) * sizeof(float));  // [T, half]
  ng_rope_table(T, hd, theta, cs, sn);
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float *c = cs + (size_t)(bt % T) * half, *s = sn + (size_t)(bt % T) * half;
    for (int64_t h = 0; h < nh; h++) rope_head(x + ((size_t)bt * nh + h) * hd, c, s, half, sign);
  }
  free(cs);
  free(sn);
}

void ng_vec_rope_forward(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh, int64_t hd,
                         double theta) {
  (void)be;
  rope(x, B, T, nh, hd, theta, 1.0f);
}

void ng_vec_rope_backward(ng_backend *be, float *dx, int64_t B, int64_t T, int64_t nh, int64_t hd,
                          double theta) {
  (void)be;
  rope(dx, B, T, nh, hd, theta, -1.0f);
}

// ---------------------------------------------------------------- elementwise

// The flat ops, one chunk of n elements at a time.
typedef enum { OP_ADD, OP_LERP, OP_SCALE, OP_SWIGLU, OP_SWIGLU_GRAD } flat_op;

typedef struct {
  const float *a, *b, *c;  // inputs: add a, b; lerp a, b; scale a; swiglu gate a, up b, ds c
  float k;                 // lerp's g, scale's s
  float *y, *z;            // outputs (swiglu's backward: dgate y, dup z)
} flat_args;

static inline float sigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }

VEC_CLONES
static void flat_chunk(flat_op op, const flat_args *f, int64_t i0, int64_t i1) {
  const float *a = f->a, *b = f->b, *c = f->c;
  float *y = f->y, *z = f->z, k = f->k;
  switch (op) {
    case OP_ADD:
#pragma omp simd
      for (int64_t i = i0; i < i1; i++) y[i] = a[i] + b[i];
      return;
    case OP_LERP:
#pragma omp simd
      for (int64_t i = i0; i < i1; i++) y[i] = (1.0f - k) * a[i] + k * b[i];
      return;
    case OP_SCALE:
#pragma omp simd
      for (int64_t i = i0; i < i1; i++) y[i] = k * a[i];
      return;
    case OP_SWIGLU:  // s = silu(gate) up
#pragma omp simd
      for (int64_t i = i0; i < i1; i++) y[i] = a[i] * sigmoid(a[i]) * b[i];
      return;
    case OP_SWIGLU_GRAD:  // dgate = ds up silu'(gate), dup = ds silu(gate)
#pragma omp simd
      for (int64_t i = i0; i < i1; i++) {
        float g = a[i], sg = sigmoid(g), d = c[i];
        y[i] = d * b[i] * sg * (1.0f + g * (1.0f - sg));
        z[i] = d * g * sg;
      }
      return;
  }
}

// op over [0, n) in parallel chunks; a short array without entering OpenMP.
static void flat(flat_op op, flat_args f, int64_t n) {
  if (n <= VEC_CHUNK) {
    flat_chunk(op, &f, 0, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += VEC_CHUNK)
    flat_chunk(op, &f, i, i + VEC_CHUNK < n ? i + VEC_CHUNK : n);
}

void ng_vec_add(ng_backend *be, const float *a, const float *b, int64_t n, float *y) {
  (void)be;
  flat(OP_ADD, (flat_args){.a = a, .b = b, .y = y}, n);
}

void ng_vec_lerp(ng_backend *be, const float *a, const float *b, float g, int64_t n, float *y) {
  (void)be;
  flat(OP_LERP, (flat_args){.a = a, .b = b, .k = g, .y = y}, n);
}

void ng_vec_scale(ng_backend *be, const float *x, float s, int64_t n, float *y) {
  (void)be;
  flat(OP_SCALE, (flat_args){.a = x, .k = s, .y = y}, n);
}

void ng_vec_swiglu_forward(ng_backend *be, const float *gate, const float *up, int64_t n,
                           float *s) {
  (void)be;
  flat(OP_SWIGLU, (flat_args){.a = gate, .b = up, .y = s}, n);
}

void ng_vec_swiglu_backward(ng_backend *be, const float *gate, const float *up, const float *ds,
                            int64_t n, float *dgate, float *dup) {
  (void)be;
  flat(OP_SWIGLU_GRAD, (flat_args){.a = gate, .b = up, .c = ds, .y = dgate, .z = dup}, n);
}

// ---------------------------------------------------------------- AdamW

typedef struct {
  float b1, b2, gs, step, sqbc2, eps, keep;
} adamw_consts;

VEC_CLONES
static void adamw_chunk(float *p, const float *g, float *m, float *v, int64_t i0, int64_t i1,
                        adamw_consts k) {
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) {
    float gi = g[i] * k.gs;
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * gi;
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * gi * gi;
    p[i] = p[i] * k.keep - k.step * m[i] / (sqrtf(v[i]) / k.sqbc2 + k.eps);
  }
}

// The reference's AdamW, element for element the same operations.
void ng_vec_adamw(ng_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
                  ng_adamw_params ap, bool decay) {
  (void)be;
  double bc1 = 1.0 - pow(ap.beta1, (double)ap.step), bc2 = 1.0 - pow(ap.beta2, (double)ap.step);
  adamw_consts k = {(float)ap.beta1, (float)ap.beta2, (float)ap.grad_scale,
                    (float)(ap.lr / bc1), (float)sqrt(bc2), (float)ap.eps,
                    decay ? (float)(1.0 - ap.lr * ap.weight_decay) : 1.0f};
  if (n <= VEC_CHUNK) {
    adamw_chunk(p, g, m, v, 0, n, k);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += VEC_CHUNK)
    adamw_chunk(p, g, m, v, i, i + VEC_CHUNK < n ? i + VEC_CHUNK : n, k);
}

// ---------------------------------------------------------------- sum of squares

VEC_CLONES
static double sumsq_chunk(const float *x, int64_t i0, int64_t i1) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = i0; i < i1; i++) acc += (double)x[i] * x[i];
  return acc;
}

// Over fixed chunks, then the chunk sums in order (the same bits for every
// thread count).
double ng_vec_sumsq(ng_backend *be, const float *x, int64_t n) {
  (void)be;
  int64_t nblk = (n + VEC_CHUNK - 1) / VEC_CHUNK;
  double *part = ng_xcalloc((size_t)nblk, sizeof(double));  // [nblk]
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblk; b++)
    part[b] = sumsq_chunk(x, b * VEC_CHUNK, (b + 1) * VEC_CHUNK < n ? (b + 1) * VEC_CHUNK : n);
  double total = 0.0;
  for (int64_t b = 0; b < nblk; b++) total += part[b];
  free(part);
  return total;
}

// ---------------------------------------------------------------- attention rows

VEC_CLONES
static float scaled_max(const float *S, int64_t n, float scale) {
  float m = scale * S[0];
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; j++) m = scale * S[j] > m ? scale * S[j] : m;
  return m;
}

float ng_vec_softmax_row(float *S, int64_t n, float scale) {
  float mx = scaled_max(S, n, scale);
  double z = exp_sum(S, n, mx / scale, scale, S);
  float inv = (float)(1.0 / z);
  flat(OP_SCALE, (flat_args){.a = S, .k = inv, .y = S}, n);
  return mx + (float)log(z);
}

VEC_CLONES
void ng_vec_softmax_row_given(float *S, int64_t n, float scale, float lse) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) S[j] = vexp(scale * S[j] - lse);
}

VEC_CLONES
void ng_vec_softmax_grad_row(const float *P, float di, int64_t n, float *dP) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) dP[j] = P[j] * (dP[j] - di);
}
