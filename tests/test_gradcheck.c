// Finite-difference gradient checks of every op of the CPU backend and of the
// whole model in both norm placements. The probe loss f = sum(r * y) (r a
// fixed random tensor) is accumulated in double; each input entry is moved by
// +-h and (f+ - f-) / 2h is compared with the backward's gradient:
// max |fd - analytic| / max |analytic| over the checked entries <= TOL_*.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/model.h"
#include "normgrow/rng.h"

#define TOL_OP 2e-3     // single ops: fp32 rounding and O(h^2) terms stay below 1e-4
#define TOL_MODEL 1e-2  // whole model: errors compound through the layers (seen: 1.2e-3)
#define H_STEP 1e-2

static ng_backend *be;
static ng_rng rng;

static float *randn(size_t n, double mean, double std) {
  float *x = ng_xmalloc(n * sizeof(float));
  ng_rng_fill_normal(&rng, x, n, mean, std);
  return x;
}

static double dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}

// A function of the current inputs, evaluated by its forward in fp32.
typedef double (*probe_fn)(void *ctx);

// The step of the central differences (test_model takes a smaller one for sandwich).
static double h_step = H_STEP;

// Central differences on (up to `max_checks` evenly spaced) entries of x.
static double fd_error(float *x, size_t n, const float *analytic, probe_fn f, void *ctx,
                       size_t max_checks) {
  size_t stride = n > max_checks ? n / max_checks : 1;
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)analytic[i]));
  for (size_t i = 0; i < n; i += stride) {
    float save = x[i];
    x[i] = save + (float)h_step;
    double fp = f(ctx);
    x[i] = save - (float)h_step;
    double fm = f(ctx);
    x[i] = save;
    double fd = (fp - fm) / (2.0 * h_step);
    worst = fmax(worst, fabs(fd - analytic[i]));
  }
  return scale > 0.0 ? worst / scale : worst;
}

static void check_grad(double err, double tol, const char *what) {
  char name[320];
  snprintf(name, sizeof name, "%s: relative error %.1e", what, err);
  CHECK(err <= tol, name, "above %.0e", tol);
}
#define CHECK_GRAD(err, name) check_grad((err), TOL_OP, (name))

// ---------------------------------------------------------------- matmul

typedef struct {
  bool ta, tb;
  int64_t M, N, K;
  float *A, *B, *C, *r;
} mm_ctx;

static double mm_probe(void *p) {
  mm_ctx *c = p;
  be->matmul(be, c->ta, c->tb, c->M, c->N, c->K, c->A, c->B, 0.0f, c->C);
  return dot(c->C, c->r, (size_t)(c->M * c->N));
}

static void test_matmul(bool ta, bool tb) {
  mm_ctx c = {ta, tb, 3, 4, 5, randn(15, 0, 1), randn(20, 0, 1), randn(12, 0, 1), randn(12, 0, 1)};
  // dA = r op(B)^T (stored as A), dB = op(A)^T r (stored as B), via the same op.
  float *dA = ng_xcalloc(15, sizeof(float)), *dB = ng_xcalloc(20, sizeof(float));
  if (!ta) be->matmul(be, false, !tb, 3, 5, 4, c.r, c.B, 0.0f, dA);      // [M,K] = r [M,N] B'
  else be->matmul(be, tb, true, 5, 3, 4, c.B, c.r, 0.0f, dA);            // [K,M] = B' r^T
  if (!tb) be->matmul(be, !ta, false, 5, 4, 3, c.A, c.r, 0.0f, dB);      // [K,N] = A'^T r
  else be->matmul(be, true, ta, 4, 5, 3, c.r, c.A, 0.0f, dB);            // [N,K] = r^T A'
  char name[64];
  snprintf(name, sizeof name, "matmul ta=%d tb=%d dA", ta, tb);
  CHECK_GRAD(fd_error(c.A, 15, dA, mm_probe, &c, 100), name);
  snprintf(name, sizeof name, "matmul ta=%d tb=%d dB", ta, tb);
  CHECK_GRAD(fd_error(c.B, 20, dB, mm_probe, &c, 100), name);
  free(c.A); free(c.B); free(c.C); free(c.r); free(dA); free(dB);
}

// ---------------------------------------------------------------- embedding

typedef struct {
  int32_t tok[6];
  float *w, *out, *r;
} emb_ctx;

static double emb_probe(void *p) {
  emb_ctx *c = p;
  be->embedding_forward(be, c->tok, c->w, 6, 3, c->out);
  return dot(c->out, c->r, 18);
}

static void test_embedding(void) {
  emb_ctx c = {{1, 3, 1, 0, 4, 1}, randn(15, 0, 1), ng_xcalloc(18, sizeof(float)), randn(18, 0, 1)};
  float *dw = ng_xcalloc(15, sizeof(float));
  be->embedding_backward(be, c.tok, c.r, 6, 3, dw);
  CHECK_GRAD(fd_error(c.w, 15, dw, emb_probe, &c, 100), "embedding dweight (repeated ids)");
  free(c.w); free(c.out); free(c.r); free(dw);
}

// ---------------------------------------------------------------- rmsnorm

typedef struct {
  int64_t R, C;
  float *x, *w, *y, *rstd, *r;
} rms_ctx;

static double rms_probe(void *p) {
  rms_ctx *c = p;
  be->rmsnorm_forward(be, c->x, c->w, c->R, c->C, 1e-5f, c->y, c->rstd);
  return dot(c->y, c->r, (size_t)(c->R * c->C));
}

static void test_rmsnorm(void) {
  rms_ctx c = {4, 6, randn(24, 0, 1), randn(6, 1, 0.3), ng_xcalloc(24, 4), ng_xcalloc(4, 4),
               randn(24, 0, 1)};
  float *dx = randn(24, 0, 1), *dx0 = ng_xmalloc(24 * 4), *dw = ng_xcalloc(6, 4);
  memcpy(dx0, dx, 24 * 4);
  rms_probe(&c);
  be->rmsnorm_backward(be, c.x, c.w, c.rstd, c.r, 4, 6, dx, dw);
  for (int i = 0; i < 24; i++) dx[i] -= dx0[i];  // the backward accumulates
  CHECK_GRAD(fd_error(c.x, 24, dx, rms_probe, &c, 100), "rmsnorm dx (accumulated)");
  CHECK_GRAD(fd_error(c.w, 6, dw, rms_probe, &c, 100), "rmsnorm dw");
  free(c.x); free(c.w); free(c.y); free(c.rstd); free(c.r); free(dx); free(dx0); free(dw);
}

// ---------------------------------------------------------------- channel scale

typedef struct {
  float *x, *gamma, *y, *r;
} cs_ctx;

static double cs_probe(void *p) {
  cs_ctx *c = p;
  be->channel_scale_forward(be, c->x, c->gamma, 5, 6, c->y);
  return dot(c->y, c->r, 30);
}

static void test_channel_scale(void) {
  cs_ctx c = {randn(30, 0, 1), randn(6, 0, 1), ng_xcalloc(30, 4), randn(30, 0, 1)};
  float *dx = ng_xcalloc(30, 4), *dgamma = ng_xcalloc(6, 4);
  be->channel_scale_backward(be, c.x, c.gamma, c.r, 5, 6, dx, dgamma);
  CHECK_GRAD(fd_error(c.x, 30, dx, cs_probe, &c, 100), "channel_scale dx");
  CHECK_GRAD(fd_error(c.gamma, 6, dgamma, cs_probe, &c, 100), "channel_scale dgamma");
  free(c.x); free(c.gamma); free(c.y); free(c.r); free(dx); free(dgamma);
}

// ---------------------------------------------------------------- rotary

typedef struct {
  float *x, *work, *r;
  size_t n;
} rope_ctx;

static double rope_probe(void *p) {
  rope_ctx *c = p;
  memcpy(c->work, c->x, c->n * sizeof(float));
  be->rope_forward(be, c->work, 2, 5, 3, 8, 100.0);
  return dot(c->work, c->r, c->n);
}

static void test_rope(void) {
  size_t n = 2 * 5 * 3 * 8;
  rope_ctx c = {randn(n, 0, 1), ng_xmalloc(n * 4), randn(n, 0, 1), n};
  float *dx = ng_xmalloc(n * 4);
  memcpy(dx, c.r, n * 4);
  be->rope_backward(be, dx, 2, 5, 3, 8, 100.0);
  CHECK_GRAD(fd_error(c.x, n, dx, rope_probe, &c, 1000), "rope dx");
  // Position 0 is the identity; the rotation preserves norms.
  memcpy(c.work, c.x, n * 4);
  be->rope_forward(be, c.work, 2, 5, 3, 8, 100.0);
  double n0 = dot(c.x, c.x, n), n1 = dot(c.work, c.work, n);
  // exact at position 0: cos 0 = 1 and sin 0 = 0, so x cos + rot(x) sin = x.
  CHECK(memcmp(c.work, c.x, 3 * 8 * 4) == 0 && fabs(n0 - n1) < 1e-4 * n0, "rope identity at 0, norm kept",
        "norms %g %g", n0, n1);
  free(c.x); free(c.work); free(c.r); free(dx);
}

// ---------------------------------------------------------------- attention

typedef struct {
  ng_attn_shape s;
  float *q, *k, *v, *out, *lse, *r;
} att_ctx;

static double att_probe(void *p) {
  att_ctx *c = p;
  be->attention_forward(be, c->s, c->q, c->k, c->v, c->out, c->lse);
  return dot(c->out, c->r, (size_t)(c->s.B * c->s.T * c->s.H * c->s.hd));
}

static void test_attention(int64_t H, int64_t KV, int64_t T) {
  ng_attn_shape s = {2, T, H, KV, 4};
  size_t nq = (size_t)(s.B * s.T * H * s.hd), nk = (size_t)(s.B * s.T * KV * s.hd);
  att_ctx c = {s, randn(nq, 0, 1), randn(nk, 0, 1), randn(nk, 0, 1), ng_xcalloc(nq, 4),
               ng_xcalloc((size_t)(s.B * H * T), 4), randn(nq, 0, 1)};
  float *dq = ng_xcalloc(nq, 4), *dk = ng_xcalloc(nk, 4), *dv = ng_xcalloc(nk, 4);
  att_probe(&c);
  be->attention_backward(be, s, c.q, c.k, c.v, c.out, c.lse, c.r, dq, dk, dv);
  char name[80];
  snprintf(name, sizeof name, "attention H=%lld KV=%lld T=%lld dq", (long long)H, (long long)KV, (long long)T);
  CHECK_GRAD(fd_error(c.q, nq, dq, att_probe, &c, 400), name);
  snprintf(name, sizeof name, "attention H=%lld KV=%lld T=%lld dk", (long long)H, (long long)KV, (long long)T);
  CHECK_GRAD(fd_error(c.k, nk, dk, att_probe, &c, 400), name);
  snprintf(name, sizeof name, "attention H=%lld KV=%lld T=%lld dv", (long long)H, (long long)KV, (long long)T);
  CHECK_GRAD(fd_error(c.v, nk, dv, att_probe, &c, 400), name);
  free(c.q); free(c.k); free(c.v); free(c.out); free(c.lse); free(c.r); free(dq); free(dk); free(dv);
}

// Causality: the output at position t must not change when keys/values after t do.
static void test_attention_causal(void) {
  ng_attn_shape s = {1, 6, 2, 1, 4};
  size_t nq = 6 * 2 * 4, nk = 6 * 4;
  float *q = randn(nq, 0, 1), *k = randn(nk, 0, 1), *v = randn(nk, 0, 1);
  float *o1 = ng_xcalloc(nq, 4), *o2 = ng_xcalloc(nq, 4), *lse = ng_xcalloc(12, 4);
  be->attention_forward(be, s, q, k, v, o1, lse);
  for (size_t i = 3 * 4; i < nk; i++) k[i] += 5.0f, v[i] -= 3.0f;  // change positions 3..5
  be->attention_forward(be, s, q, k, v, o2, lse);
  // exact: the same call at the same shapes; the changed keys and values reach
  // rows 0..2 only through P's masked entries, exact zeros (0 x v adds nothing).
  CHECK(memcmp(o1, o2, 3 * 2 * 4 * 4) == 0 && memcmp(o1, o2, nq * 4) != 0,
        "attention is causal", "outputs before position 3 changed, or none after");
  free(q); free(k); free(v); free(o1); free(o2); free(lse);
}

// ---------------------------------------------------------------- swiglu

typedef struct {
  float *g, *u, *s, *r;
} glu_ctx;

static double glu_probe(void *p) {
  glu_ctx *c = p;
  be->swiglu_forward(be, c->g, c->u, 20, c->s);
  return dot(c->s, c->r, 20);
}

static void test_swiglu(void) {
  glu_ctx c = {randn(20, 0, 2), randn(20, 0, 1), ng_xcalloc(20, 4), randn(20, 0, 1)};
  float *dg = ng_xcalloc(20, 4), *du = ng_xcalloc(20, 4);
  be->swiglu_backward(be, c.g, c.u, c.r, 20, dg, du);
  CHECK_GRAD(fd_error(c.g, 20, dg, glu_probe, &c, 100), "swiglu dgate");
  CHECK_GRAD(fd_error(c.u, 20, du, glu_probe, &c, 100), "swiglu dup");
  free(c.g); free(c.u); free(c.s); free(c.r); free(dg); free(du);
}

// ---------------------------------------------------------------- fused loss

typedef struct {
  float *logits, *teacher;
  int32_t targets[5];
  ng_loss_params lp;
} loss_ctx;

static double loss_probe(void *p) {
  loss_ctx *c = p;
  double ce, kd;
  int64_t nv;
  be->ce_kd(be, c->logits, c->teacher, c->targets, 5, 7, c->lp, NULL, &ce, &kd, &nv);
  return c->teacher ? ng_loss_mix(c->lp.kd_weight, ce, kd) : ce;
}

static void test_loss(bool teacher, double tau, ng_divergence dv, double beta) {
  loss_ctx c = {randn(35, 0, 3), teacher ? randn(35, 0, 3) : NULL, {2, -1, 6, 0, 3},
                {0.7, tau, 0, 0, dv, beta}};
  float *d = ng_xcalloc(35, 4);
  double ce, kd;
  int64_t nv;
  be->ce_kd(be, c.logits, c.teacher, c.targets, 5, 7, c.lp, d, &ce, &kd, &nv);
  char name[80];
  snprintf(name, sizeof name, "ce+kd dlogits teacher=%d tau=%g %s beta=%g", teacher, tau,
           ng_divergence_name(dv), beta);
  CHECK_GRAD(fd_error(c.logits, 35, d, loss_probe, &c, 100), name);
  bool ignored_zero = true;
  for (int j = 0; j < 7; j++) ignored_zero &= d[7 + j] == 0.0f;  // exact: an ignored row is zero-filled
  CHECK(nv == 4 && ignored_zero, "ce+kd ignores target -1", "n_valid %lld", (long long)nv);
  free(c.logits); free(c.teacher); free(d);
}

// The top-k cache form of the loss: its own gradient, and exact KD at k = V.
typedef struct {
  float *logits, *vals, lse[5], rest[5];
  int32_t ids[5 * 7], targets[5];
  int64_t k;
  ng_loss_params lp;
} topk_ctx;

static double topk_probe(void *p) {
  topk_ctx *c = p;
  double ce, kd;
  int64_t nv;
  be->ce_kd_topk(be, c->logits, c->ids, c->vals, c->lse, c->rest, c->k, c->targets, 5, 7, c->lp, NULL,
                 &ce, &kd, &nv);
  return ng_loss_mix(c->lp.kd_weight, ce, kd);
}

// Whether id j is among ids [n].
static bool among(const int32_t *ids, int n, int j) {
  for (int u = 0; u < n; u++)
    if (ids[u] == j) return true;
  return false;
}

// Teacher logits t [5, 7] into a cache of its k largest per row (k = 7: all,
// in a shuffled order) with the log-sum-exp at the temperature and the log
// mass off the cached ids (-inf at k = 7).
static void make_cache(topk_ctx *c, const float *t) {
  c->vals = ng_xmalloc(5 * 7 * sizeof(float));
  for (int i = 0; i < 5; i++) {
    const float *row = t + i * 7;
    double mx = row[0], z = 0.0;
    for (int j = 1; j < 7; j++) mx = fmax(mx, row[j]);
    for (int j = 0; j < 7; j++) z += exp((row[j] - mx) / c->lp.temperature);
    c->lse[i] = (float)(mx / c->lp.temperature + log(z));
    int order[7] = {3, 0, 6, 1, 5, 2, 4}, n = 0;
    for (int r = 0; r < 7 && n < c->k; r++) {  // the k largest, by rank (ties impossible here)
      int best = -1;
      for (int j = 0; j < 7; j++) {
        bool used = among(c->ids + i * c->k, n, order[j]);
        if (!used && (best < 0 || row[order[j]] > row[best])) best = order[j];
      }
      c->ids[i * c->k + n] = best;
      c->vals[i * c->k + n++] = row[best];
    }
    double off = 0.0;  // summed over the ids not cached
    for (int j = 0; j < 7; j++)
      off += among(c->ids + i * c->k, (int)c->k, j) ? 0.0 : exp((row[j] - mx) / c->lp.temperature);
    c->rest[i] = (float)(log(off) - log(z));  // -inf at k = 7
  }
}

static void test_loss_topk(ng_divergence dv, double beta) {
  float *teacher = randn(35, 0, 3);
  for (int64_t k = 3; k <= 7; k += 4) {
    topk_ctx c = {randn(35, 0, 3), NULL, {0}, {0}, {0}, {2, -1, 6, 0, 3}, k, {0.6, 2.0, 0, 0, dv, beta}};
    make_cache(&c, teacher);
    float *d = ng_xcalloc(35, 4), *d_full = ng_xcalloc(35, 4);
    double ce, kd, ce_full, kd_full;
    int64_t nv;
    be->ce_kd_topk(be, c.logits, c.ids, c.vals, c.lse, c.rest, k, c.targets, 5, 7, c.lp, d, &ce, &kd, &nv);
    char name[96];
    snprintf(name, sizeof name, "ce+kd (%s) from a top-%lld cache: dlogits",
             ng_divergence_name(dv), (long long)k);
    CHECK_GRAD(fd_error(c.logits, 35, d, topk_probe, &c, 100), name);
    if (k == 7) {
      be->ce_kd(be, c.logits, teacher, c.targets, 5, 7, c.lp, d_full, &ce_full, &kd_full, &nv);
      double dd = 0.0;
      for (int i = 0; i < 35; i++) dd = fmax(dd, fabs((double)d[i] - d_full[i]));
      // ce exactly: the same row code on the same logits computes it under
      // either teacher kind; only the kd term differs.
      CHECK(ce == ce_full && fabs(kd - kd_full) <= 1e-6 * kd_full && dd <= 1e-6,
            dv == NG_DIV_FORWARD_KL ? "ce+kd from a top-V cache equals the exact loss"
            : dv == NG_DIV_REVERSE_KL ? "reverse_kl from a top-V cache equals the exact one"
                                      : "jsd from a top-V cache equals the exact one", "kd %.9g vs %.9g, dlogits %.2e", kd, kd_full, dd);
    }
    free(c.logits); free(c.vals); free(d); free(d_full);
  }
  free(teacher);
}

// D(Q, P) of one row's buckets (log-masses lq, lp [n]) under divergence dv, in double.
static double bucket_divergence(ng_divergence dv, double beta, const double *lq, const double *lp, int n) {
  double D = 0.0;
  for (int b = 0; b < n; b++) {
    double q = exp(lq[b]), p = exp(lp[b]), m = beta * q + (1.0 - beta) * p;
    switch (dv) {
      case NG_DIV_FORWARD_KL: D += q * (lq[b] - lp[b]); break;
      case NG_DIV_REVERSE_KL: D += p * (lp[b] - lq[b]); break;
      case NG_DIV_JSD: D += beta * q * (lq[b] - log(m)) + (1.0 - beta) * p * (lp[b] - log(m)); break;
    }
  }
  return D;
}

// A confident teacher: in each row one logit 40 above the others (N(0, 3^2)),
// tau 1, a top-3 cache. Its mass off the cache (about e^-35) lies far below the
// rounding of its fp32 log-sum-exp (about 4e-6), so 1 - sum Q_j is rounding
// there (0, or 1e-6 for 1e-15); the cache's own log mass keeps it. The loss
// equals the bucketed divergence computed in double from the full teacher
// logits (buckets: the 3 cached ids and the rest), and its gradient checks.
static void test_loss_topk_confident(ng_divergence dv, double beta) {
  float *teacher = randn(35, 0, 3);
  for (int i = 0; i < 5; i++) teacher[i * 7 + (3 * i) % 7] += 40.0f;
  topk_ctx c = {randn(35, 0, 3), NULL, {0}, {0}, {0}, {2, -1, 6, 0, 3}, 3, {1.0, 1.0, 0, 0, dv, beta}};
  make_cache(&c, teacher);
  double want = 0.0, kd, ce;
  int64_t nv, valid = 0;
  for (int i = 0; i < 5; i++) {
    if (c.targets[i] < 0) continue;
    const float *t = teacher + i * 7, *s = c.logits + i * 7;
    double zt = 0.0, zs = 0.0, lq[4], lp[4], qr = 0.0, pr = 0.0;
    for (int j = 0; j < 7; j++) zt += exp(t[j]), zs += exp(s[j]);
    for (int j = 0; j < 7; j++)
      if (!among(c.ids + i * 3, 3, j)) qr += exp(t[j]) / zt, pr += exp(s[j]) / zs;
    for (int u = 0; u < 3; u++) lq[u] = t[c.ids[i * 3 + u]] - log(zt), lp[u] = s[c.ids[i * 3 + u]] - log(zs);
    lq[3] = log(qr), lp[3] = log(pr);
    want += bucket_divergence(dv, beta, lq, lp, 4);
    valid++;
  }
  want /= (double)valid;
  float *d = ng_xcalloc(35, 4);
  be->ce_kd_topk(be, c.logits, c.ids, c.vals, c.lse, c.rest, 3, c.targets, 5, 7, c.lp, d, &ce, &kd, &nv);
  char name[128];
  snprintf(name, sizeof name, "%s from a top-3 cache of a confident teacher (rest e^-35): the "
           "bucketed divergence of the full teacher", ng_divergence_name(dv));
  CHECK(isfinite(kd) && fabs(kd - want) <= 1e-5 * fabs(want), name, "kd %.9g, expected %.9g", kd, want);
  snprintf(name, sizeof name, "%s from a top-3 cache of a confident teacher: dlogits", ng_divergence_name(dv));
  CHECK_GRAD(fd_error(c.logits, 35, d, topk_probe, &c, 100), name);
  free(c.logits); free(c.vals); free(d); free(teacher);
}

// A vocabulary padded past the tokenizer's: with vocab_used = 5 of 7 columns
// the loss equals the loss of the 5-column logits, padding columns get zero
// gradient, for both teacher kinds.
static void test_loss_padded_vocab(void) {
  float *s7 = randn(35, 0, 3), *t7 = randn(35, 0, 3), s5[25], t5[25];
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) s5[i * 5 + j] = s7[i * 7 + j], t5[i * 5 + j] = t7[i * 7 + j];
  for (int i = 0; i < 35; i++) t7[i] += (i % 7 >= 5) * 50.0f;  // a padded row the teacher likes
  int32_t y[5] = {2, -1, 4, 0, 3};
  ng_loss_params full = {0.6, 2.0, 0, 0, NG_DIV_FORWARD_KL, 0.0}, used = {0.6, 2.0, 5, 0, NG_DIV_FORWARD_KL, 0.0};
  float d7[35], d5[25];
  double ce7, kd7, ce5, kd5;
  int64_t nv;
  be->ce_kd(be, s7, t7, y, 5, 7, used, d7, &ce7, &kd7, &nv);
  be->ce_kd(be, s5, t5, y, 5, 5, full, d5, &ce5, &kd5, &nv);
  // exact: each row's loss runs over its first 5 columns in the same order
  // either way (row-wise code, no BLAS; rows summed in the same order).
  bool same = ce7 == ce5 && kd7 == kd5;
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 7; j++) same &= d7[i * 7 + j] == (j < 5 ? d5[i * 5 + j] : 0.0f);
  CHECK(same, "padded vocabulary: loss over the used ids only, zero gradient on padding",
        "ce %.9g vs %.9g, kd %.9g vs %.9g", ce7, ce5, kd7, kd5);
  free(s7);
  free(t7);
}

// lp.n_norm: calls over row chunks, each averaging over the whole batch's
// valid rows, add up to one call (the same dlogits row for row).
static void test_loss_norm_rows(void) {
  float *logits = randn(35, 0, 3), *teacher = randn(35, 0, 3);
  int32_t targets[5] = {2, -1, 6, 0, 3};
  float *whole = ng_xcalloc(35, 4), *parts = ng_xcalloc(35, 4);
  ng_loss_params lp = {0.7, 2.0, 0, 0, NG_DIV_FORWARD_KL, 0.0};
  double ce, kd, ce1, kd1, ce2, kd2;
  int64_t nv, nv1, nv2;
  be->ce_kd(be, logits, teacher, targets, 5, 7, lp, whole, &ce, &kd, &nv);
  lp.n_norm = nv;
  be->ce_kd(be, logits, teacher, targets, 2, 7, lp, parts, &ce1, &kd1, &nv1);
  be->ce_kd(be, logits + 14, teacher + 14, targets + 2, 3, 7, lp, parts + 14, &ce2, &kd2, &nv2);
  double err = fmax(fabs(ce1 + ce2 - ce), fabs(kd1 + kd2 - kd));
  // dlogits exactly: each row's come from that row alone and the same n_norm.
  CHECK(nv1 + nv2 == nv && err < 1e-12 && memcmp(whole, parts, 35 * 4) == 0,
        "ce_kd with n_norm: chunks of 2 and 3 rows add up to the whole call",
        "valid %lld + %lld of %lld, loss error %.3g, dlogits equal %d", (long long)nv1,
        (long long)nv2, (long long)nv, err, memcmp(whole, parts, 35 * 4) == 0);
  free(logits); free(teacher); free(whole); free(parts);
}

// Large logits: the max-subtracted log-sum-exp stays finite and exact.
static void test_loss_stable(ng_divergence dv, double beta) {
  float logits[4] = {1000.0f, 999.0f, -1000.0f, 998.0f}, teacher[4] = {-500.f, 800.f, 0.f, 700.f};
  int32_t y = 0;
  double ce, kd;
  int64_t nv;
  ng_loss_params lp = {0.5, 1.0, 0, 0, dv, beta};
  be->ce_kd(be, logits, teacher, &y, 1, 4, lp, NULL, &ce, &kd, &nv);
  double expect = log(1.0 + exp(-1.0) + exp(-2.0));
  char name[80];
  snprintf(name, sizeof name, "ce+kd (%s) stable at |logits| 1000", ng_divergence_name(dv));
  CHECK(isfinite(kd) && fabs(ce - expect) < 1e-6, name, "ce %.9g expected %.9g", ce, expect);
}

// ---------------------------------------------------------------- whole model

typedef struct {
  ng_model *m;
  ng_acts *a;
  int32_t *tokens, *targets;
  float *teacher;
  ng_loss_params lp;
} model_ctx;

// The loss of a forward (the chunked head and loss; with `grad` its backward
// into the head's gradient and d head input).
static double model_loss(model_ctx *c, bool grad) {
  double ce, kd;
  int64_t nv;
  ng_loss_teacher t = {.logits = c->teacher};
  ng_model_forward(c->m, c->a, c->tokens, NULL);
  ng_model_loss(c->m, c->a, &t, c->targets, c->lp, grad, &ce, &kd, &nv);
  return c->teacher ? ng_loss_mix(c->lp.kd_weight, ce, kd) : ce;
}

static double model_probe(void *p) { return model_loss(p, false); }

// With model.layer_scale_init in the models of test_model (their scales drawn N(1, 0.2^2)).
static bool layer_scale;

// gate: every block's growth gate; frozen: block 0 frozen (its gradients must stay 0);
// chunk: rows of a loss chunk (0: all); recompute: block values recomputed in the backward.
static void test_model(ng_norm_placement np, bool tied, bool final_norm, int64_t H, int64_t KV,
                       float gate, bool frozen, int64_t chunk, bool recompute) {
  ng_model_config mc = {.vocab_size = 11, .hidden_size = 12, .intermediate_size = 10,
                        .num_hidden_layers = 2, .num_attention_heads = H, .num_key_value_heads = KV,
                        .head_dim = 4, .rope_theta = 1e4, .rms_norm_eps = 1e-6,
                        .tie_word_embeddings = tied, .final_norm = final_norm, .norm_placement = np,
                        .deepnorm_alpha = np == NG_NORM_DEEPNORM ? 1.7 : 0.0,
                        .mixln_post_layers = np == NG_NORM_MIXLN ? 1 : 0,  // block 1 post, 2 pre
                        .layer_scale = layer_scale};
  // hybrid: untied blocks pre, post (post grown on pre), tied post, pre (pre grown on post)
  mc.layer_placements[0] = tied ? NG_NORM_POST : NG_NORM_PRE;
  mc.layer_placements[1] = tied ? NG_NORM_PRE : NG_NORM_POST;
  int64_t B = 2, T = 4, N = B * T;
  model_ctx c = {ng_model_create(be, &mc, true), NULL, ng_xmalloc(N * 4), ng_xmalloc(N * 4),
                 randn((size_t)(N * mc.vocab_size), 0, 2), {0.6, 1.5, 0, 0, NG_DIV_FORWARD_KL, 0.0}};
  ng_acts_options ao = {.for_backward = true, .recompute = recompute, .chunk = chunk};
  c.a = ng_acts_create_with(c.m, B, T, &ao);
  for (int i = 0; i < c.m->n_params; i++) {
    ng_param *p = &c.m->params[i];
    ng_rng_fill_normal(&rng, p->data, p->numel, p->ndim == 1 ? 1.0 : 0.0,
                       p->ndim == 1 ? 0.2 : 1.0 / sqrt((double)p->shape[1]) * (i == 0 ? 2 : 1));
  }
  for (int64_t i = 0; i < N; i++) {
    c.tokens[i] = (int32_t)ng_rng_below(&rng, 11);
    c.targets[i] = i % 5 == 2 ? -1 : (int32_t)ng_rng_below(&rng, 11);
  }
  for (int64_t l = 0; l < mc.num_hidden_layers; l++) c.m->growth_gate[l] = gate;
  if (frozen) ng_model_freeze(c.m, 0, true);
  ng_model_zero_grad(c.m);
  model_loss(&c, true);
  ng_model_backward(c.m, c.a, c.tokens);
  // Sandwich norms each sublayer's output: where a row of it is small the loss
  // curves sharply, and central differences at H_STEP measure the curvature
  // (seen: 2.7e-1 at 1e-2, 1.6e-2 at 2e-3, 4.9e-3 at 4e-4, on one draw).
  h_step = np == NG_NORM_SANDWICH ? 4e-4 : H_STEP;
  double worst = 0.0;
  const char *worst_name = "";
  for (int i = 0; i < c.m->n_params; i++) {
    ng_param *p = &c.m->params[i];
    if (p->frozen) {
      bool zero = true;
      for (size_t j = 0; j < p->numel; j++) zero &= p->grad[j] == 0.0f;  // exact: zeroed, never written
      if (!zero) worst = INFINITY, worst_name = p->name;
      continue;
    }
    double e = fd_error(p->data, p->numel, p->grad, model_probe, &c, 24);
    if (e > worst) worst = e, worst_name = p->name;
  }
  char name[256];
  snprintf(name, sizeof name,
           "model %s%s tied=%d final_norm=%d H=%lld KV=%lld gate=%g frozen=%d chunk=%lld "
           "recompute=%d: every parameter (worst %s)",
           ng_norm_placement_name(np), layer_scale ? " layer_scale" : "", tied, final_norm, (long long)H, (long long)KV, gate,
           frozen, (long long)chunk, recompute, worst_name);
  check_grad(worst, TOL_MODEL, name);
  h_step = H_STEP;
  ng_acts_free(c.m, c.a);
  ng_model_free(c.m);
  free(c.tokens); free(c.targets); free(c.teacher);
}

int main(void) {
  be = ng_backend_cpu();
  ng_rng_seed(&rng, 42);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) test_matmul(ta, tb);
  test_embedding();
  test_rmsnorm();
  test_rope();
  test_attention(4, 2, 5);
  test_attention(3, 3, 7);
  test_attention(4, 1, 70);  // more than one row block of queries
  test_attention_causal();
  test_swiglu();
  test_loss(false, 1.0, NG_DIV_FORWARD_KL, 0.0);
  test_loss(true, 1.0, NG_DIV_FORWARD_KL, 0.0);
  test_loss(true, 2.5, NG_DIV_FORWARD_KL, 0.0);
  test_loss_stable(NG_DIV_FORWARD_KL, 0.0);
  test_loss_norm_rows();
  test_loss_topk(NG_DIV_FORWARD_KL, 0.0);
  test_loss_padded_vocab();
  test_model(NG_NORM_PRE, false, true, 4, 2, 1.0f, false, 0, false);
  test_model(NG_NORM_PRE, true, false, 2, 2, 1.0f, false, 0, false);
  test_model(NG_NORM_POST, false, false, 4, 2, 1.0f, false, 0, false);
  test_model(NG_NORM_POST, true, true, 4, 1, 1.0f, false, 0, false);
  test_model(NG_NORM_PRE, false, true, 4, 2, 0.3f, true, 0, false);   // growth gate, frozen block 0
  test_model(NG_NORM_POST, false, true, 4, 2, 0.3f, true, 0, false);
  test_model(NG_NORM_PRE, true, true, 4, 2, 0.3f, false, 3, true);    // loss chunks of 3 of 8 rows,
  test_model(NG_NORM_POST, false, false, 4, 2, 1.0f, false, 1, true);  // recomputed blocks
  test_model(NG_NORM_LNS, false, true, 4, 2, 1.0f, false, 0, false);   // LayerNorm-Scaling
  test_model(NG_NORM_LNS, true, false, 4, 1, 0.3f, true, 3, true);
  test_model(NG_NORM_SANDWICH, false, true, 4, 2, 1.0f, false, 0, false);  // Peri-LN
  test_model(NG_NORM_SANDWICH, true, false, 4, 1, 0.3f, true, 3, true);
  test_model(NG_NORM_DEEPNORM, false, true, 4, 2, 1.0f, false, 0, false);  // alpha 1.7
  test_model(NG_NORM_DEEPNORM, true, false, 4, 1, 0.3f, true, 3, true);
  test_model(NG_NORM_MIXLN, false, true, 4, 2, 1.0f, false, 0, false);     // a post and a pre block
  test_model(NG_NORM_MIXLN, true, false, 4, 1, 0.3f, false, 3, true);      // sharing recomputed values
  for (int dv = NG_DIV_REVERSE_KL; dv <= NG_DIV_LAST; dv++) {  // the other divergences
    double beta = dv == NG_DIV_JSD ? 0.3 : 0.0;
    test_loss(true, 1.0, (ng_divergence)dv, beta);
    test_loss(true, 2.5, (ng_divergence)dv, beta);
    test_loss_stable((ng_divergence)dv, beta);
    test_loss_topk((ng_divergence)dv, beta);
  }
  test_channel_scale();
  layer_scale = true;  // LayerScale in every placement, with the gate, freezing, chunks, recompute
  test_model(NG_NORM_PRE, false, true, 4, 2, 1.0f, false, 0, false);
  test_model(NG_NORM_POST, true, true, 4, 1, 1.0f, false, 0, false);
  test_model(NG_NORM_LNS, false, true, 4, 2, 0.3f, true, 0, false);
  test_model(NG_NORM_PRE, true, false, 4, 2, 0.3f, true, 3, true);
  test_model(NG_NORM_SANDWICH, false, true, 4, 2, 1.0f, false, 0, false);
  test_model(NG_NORM_SANDWICH, true, false, 4, 1, 0.3f, true, 3, true);
  test_model(NG_NORM_DEEPNORM, false, true, 4, 2, 1.0f, false, 0, false);
  test_model(NG_NORM_MIXLN, true, false, 4, 1, 0.3f, false, 3, true);
  // Hybrid last, so that the draws of the cases above stay as they were.
  test_model(NG_NORM_HYBRID, false, true, 4, 2, 0.3f, false, 0, false);
  test_model(NG_NORM_HYBRID, true, false, 4, 1, 1.0f, false, 3, true);
  layer_scale = false;
  test_model(NG_NORM_HYBRID, false, true, 4, 2, 1.0f, false, 0, false);    // a pre, then a post block
  test_model(NG_NORM_HYBRID, true, true, 4, 1, 0.3f, true, 0, false);      // a post, then a pre block
  test_model(NG_NORM_HYBRID, false, false, 4, 2, 0.3f, false, 3, true);    // recomputed, in chunks
  for (int dv = NG_DIV_FORWARD_KL; dv <= NG_DIV_LAST; dv++)  // last too, for the same reason
    test_loss_topk_confident((ng_divergence)dv, dv == NG_DIV_JSD ? 0.3 : 0.0);
  return TEST_RESULT();
}
