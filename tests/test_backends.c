// Every op of the backend table on every backend of the build, in every
// precision it runs here, against the fp32 CPU reference. Inputs go in by
// upload and results come back by download only (a backend's buffers are
// never read directly), at the shapes of one list shared by every backend:
// odd sizes that cut the tiles and row blocks of any backend's kernels (cuda's
// among them: tiles of 64 queries and keys, 256 threads per row, 64-row
// partials, 16384-element sumsq blocks). A backend's second call of the
// attention backward and of the loss on the same inputs gives the same bits.
//
//   test_backends [BACKEND [OP...]]   only that backend (against the CPU) and
//                                      only those ops' shapes (default: all);
//                                      e.g. "cuda attention loss adamw", the set
//                                      tools/gpu_check.sh runs under compute-sanitizer
// Bounds (docs/golden-contract.md): fp32 forward values max|got - exp| / max|exp|
// <= 1e-4, gradients <= 1e-3 with the contract's scale floor (each gradient of
// an op call relative to at least 1e-3 of the largest of them: a gradient that
// is zero by symmetry holds rounding noise, which differs between BLAS kernel
// families and thread counts); bf16 forward values <= 3e-2 by the plain rule,
// the gradients of an op call together by relative L2 <= 0.1. Integer results
// must match exactly.
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/model.h"
#include "normgrow/optim.h"
#include "normgrow/registry.h"
#include "normgrow/rng.h"

// Every input is drawn from one generator, seeded once.
static ng_rng rng;

// FWD and GRAD are held to the contract's bounds for forward values and
// gradients; EXACT is for ops of one correctly rounded IEEE-754 operation per
// element (a copy, a + b, s * x), which give the same bits on every backend
// and device, whatever the precision mode (such ops run in fp32 in both);
// FEW for ops of a few fp32 roundings per element and no sum (lerp, AdamW; fp32
// in both modes too): within 1e-6 of the reference, relative to its largest
// value (a contraction to an FMA, or another order of the same few
// operations, moves an element by an ulp or two).
typedef enum { FWD, GRAD, EXACT, FEW } kind;

// The backend under test and the reference.
typedef struct {
  ng_backend *be, *ref;
  char label[64];  // "onednn bf16"
} target;

// ---------------------------------------------------------------- buffers

#define MAX_BUFS 16
// A backend's buffers of one op call, freed together.
typedef struct {
  ng_backend *be;
  void *p[MAX_BUFS];
  int n;
} bufs;

// A backend buffer of `bytes`, holding host data h when h is not NULL.
static void *up(bufs *b, const void *h, size_t bytes) {
  NG_ASSERT(b->n < MAX_BUFS);
  void *p = b->be->alloc(b->be, bytes);
  if (h) b->be->upload(b->be, p, h, bytes);
  return b->p[b->n++] = p;
}

static float *upf(bufs *b, const float *h, int64_t n) { return up(b, h, (size_t)n * sizeof(float)); }

static void *down_bytes(bufs *b, const void *d, size_t bytes) {
  void *h = ng_xmalloc(bytes);
  b->be->download(b->be, h, d, bytes);
  return h;
}

static float *down(bufs *b, const void *d, int64_t n) { return down_bytes(b, d, (size_t)n * sizeof(float)); }

// Whether the download of d [n] holds h [n] bit for bit.
static bool same_bits(bufs *b, const float *d, const float *h, int64_t n) {
  float *got = down(b, d, n);
  bool same = memcmp(got, h, (size_t)n * sizeof(float)) == 0;
  free(got);
  return same;
}

static void release(bufs *b) {
  for (int i = 0; i < b->n; i++) b->be->free(b->be, b->p[i]);
  b->n = 0;
}

static float *randn(int64_t n, double std) {
  float *x = ng_xmalloc((size_t)n * sizeof(float));
  ng_rng_fill_normal(&rng, x, (size_t)n, 0.0, std);
  return x;
}

// ---------------------------------------------------------------- comparison

static double sumsq(const float *x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

// got against exp [n] by the rule of t's precision; frees got. A gradient is
// compared alone here: the op's only one (its own scale is the floor's).
static void compare(const target *t, const char *what, kind k, float *got, const float *exp,
                    int64_t n) {
  bool bf16 = t->be->precision == NG_PREC_BF16;
  char name[256];
  if (k == EXACT) {
    snprintf(name, sizeof name, "%s: %s: bit for bit (relative error %.1e)", t->label, what,
             ng_test_max_rel(got, exp, n));
    CHECK(memcmp(got, exp, (size_t)n * sizeof(float)) == 0, name, "bits differ");
    free(got);
    return;
  }
  double err = bf16 && k == GRAD ? ng_test_rel_l2(got, exp, n) : ng_test_max_rel(got, exp, n);
  double tol = k == FEW ? 1e-6 : bf16 ? (k == GRAD ? 0.1 : 3e-2) : (k == GRAD ? 1e-3 : 1e-4);
  snprintf(name, sizeof name, "%s: %s: %s error %.1e", t->label, what,
           bf16 && k == GRAD ? "relative L2" : "relative", err);
  CHECK(err <= tol, name, "above %.0e", tol);
  free(got);
}

// r[1] (the backend under test) against r[0] (the reference), both [n];
// frees both. The rest names the check, printf-style.
NG_PRINTF(5, 6)
static void compare_runs(const target *t, kind k, float *r[2], int64_t n, const char *fmt, ...) {
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  compare(t, what, k, r[1], r[0], n);
  free(r[0]);
  r[0] = r[1] = NULL;
}

// One gradient output of an op call: r[0] the reference's, r[1] the backend's, [n].
typedef struct {
  const char *part;  // "dq"
  float **r;
  int64_t n;
} grad_out;

static double max_abs(const float *x, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
  return m;
}

// The gradients g[0..count) of one op call by the contract's rules: in fp32
// each within 1e-3 of max(its own max|exp|, 1e-3 G), G the largest max|exp| of
// them all; in bf16 all of them together by relative L2. Frees every r.
static void compare_grads(const target *t, const char *op, const grad_out *g, int count) {
  char name[256], parts[64] = "";
  if (t->be->precision == NG_PREC_BF16) {
    double d = 0.0, s = 0.0;
    for (int j = 0; j < count; j++) {
      for (int64_t i = 0; i < g[j].n; i++) {
        double e = (double)g[j].r[1][i] - g[j].r[0][i];
        d += e * e;
        s += (double)g[j].r[0][i] * g[j].r[0][i];
      }
      snprintf(parts + strlen(parts), sizeof parts - strlen(parts), "%s%s", j ? ", " : "", g[j].part);
    }
    double err = isnan(d) ? INFINITY : s > 0.0 ? sqrt(d / s) : sqrt(d);
    snprintf(name, sizeof name, "%s: %s backward %s: relative L2 error %.1e", t->label, op, parts, err);
    CHECK(err <= 0.1, name, "above 1e-01");
  } else {
    double G = 0.0;
    for (int j = 0; j < count; j++) G = fmax(G, max_abs(g[j].r[0], g[j].n));
    for (int j = 0; j < count; j++) {
      double d = 0.0;
      for (int64_t i = 0; i < g[j].n; i++) d = fmax(d, fabs((double)g[j].r[1][i] - g[j].r[0][i]));
      double scale = fmax(max_abs(g[j].r[0], g[j].n), 1e-3 * G);
      double err = isnan(d) ? INFINITY : scale > 0.0 ? d / scale : d;
      snprintf(name, sizeof name, "%s: %s backward %s: relative error %.1e", t->label, op, g[j].part, err);
      CHECK(err <= 1e-3, name, "above 1e-03");
    }
  }
  for (int j = 0; j < count; j++) {
    free(g[j].r[0]);
    free(g[j].r[1]);
    g[j].r[0] = g[j].r[1] = NULL;
  }
}

static void compare_scalar(const target *t, const char *what, double got, double exp) {
  float *g = ng_xmalloc(sizeof(float)), e = (float)exp;
  *g = (float)got;
  compare(t, what, FWD, g, &e, 1);
}

// A sum accumulated in double over fixed blocks (sumsq): each backend adds
// within a block in its own order, which moves the total by far less than
// 1e-12 relative (about sqrt(n) 2^-53).
static void compare_double_sum(const target *t, const char *what, double got, double exp) {
  double err = fabs(got - exp) / fmax(fabs(exp), 1e-300);
  char name[256];
  snprintf(name, sizeof name, "%s: %s: relative error %.1e", t->label, what, err);
  CHECK(err <= 1e-12, name, "above 1e-12");
}

// The backend of run i: the reference first, then the one under test.
static ng_backend *run_be(const target *t, int i) { return i ? t->be : t->ref; }

static void free2(float *r[2]) {
  free(r[0]);
  r[0] = NULL;
  free(r[1]);
  r[1] = NULL;
}

// ---------------------------------------------------------------- ops

static float *copyf(const float *x, int64_t n) {
  float *y = ng_xmalloc((size_t)n * sizeof(float));
  memcpy(y, x, (size_t)n * sizeof(float));
  return y;
}

// upload, alloc (zero-filled), copy, an overlapping copy of the first n - n/3
// floats onto [n/3, n) (memmove's result), zero and download of n floats.
static void test_memory(const target *t, int64_t n) {
  int64_t shift = n / 3;
  float *x = randn(n, 1.0), *moved = copyf(x, n), *fresh[2] = {0}, *r[2] = {0}, *o[2] = {0};
  float *z[2] = {0};
  memmove(moved + shift, moved, (size_t)(n - shift) * sizeof(float));
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d = upf(&b, x, n), *e = upf(&b, NULL, n);
    fresh[i] = down(&b, e, n);
    b.be->copy(b.be, e, d, (size_t)n * sizeof(float));
    r[i] = down(&b, e, n);
    b.be->copy(b.be, e + shift, e, (size_t)(n - shift) * sizeof(float));
    o[i] = down(&b, e, n);
    b.be->zero(b.be, d, (size_t)n * sizeof(float));
    b.be->synchronize(b.be);
    z[i] = down(&b, d, n);
    release(&b);
  }
  char name[160];
  snprintf(name, sizeof name,
           "%s: alloc zero-filled, upload, copy (and overlapping), download, zero of %lld floats",
           t->label, (long long)n);
  // exact: copies and zero fills move bits; no arithmetic touches them.
  bool same = memcmp(r[1], x, (size_t)n * sizeof(float)) == 0 &&
              memcmp(o[1], moved, (size_t)n * sizeof(float)) == 0;
  for (int64_t i = 0; i < n; i++) same &= z[1][i] == 0.0f && fresh[1][i] == 0.0f;
  CHECK(same, name, "values changed");
  free2(fresh);
  free2(r);
  free2(o);
  free2(z);
  free(x);
  free(moved);
}

// With beta 0, C holds NaN: beta 0 must not read C.
static void test_matmul(const target *t, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                        float beta) {
  float *A = randn(M * K, 1.0), *B = randn(K * N, 1.0), *C = randn(M * N, 1.0), *r[2];
  for (int64_t i = 0; beta == 0.0f && i < M * N; i++) C[i] = NAN;
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *dA = upf(&b, A, M * K), *dB = upf(&b, B, K * N), *dC = upf(&b, C, M * N);
    b.be->matmul(b.be, ta, tb, M, N, K, dA, dB, beta, dC);
    r[i] = down(&b, dC, M * N);
    release(&b);
  }
  compare_runs(t, FWD, r, M * N, "matmul ta=%d tb=%d M=%lld N=%lld K=%lld beta=%g%s", ta, tb,
           (long long)M, (long long)N, (long long)K, beta, beta == 0.0f ? " (C NaN before)" : "");
  free(A);
  free(B);
  free(C);
}

// Linear layers sharing x [N, in]: forward y_i and backward dW_i (accumulated;
// the last NULL: frozen, when `frozen`), dx (beta_dx; NaN before with beta 0)
// against the CPU by the contract's bounds; and on the backend under test, bit
// for bit against its own matmul op called as backend.h describes
// (ng_linear_*_matmuls): the same roundings of the same inputs into the same
// matmuls in the same order.
static void test_linear(const target *t, int n, const int64_t out[], int64_t N, int64_t in,
                        float beta_dx, bool frozen) {
  float *x = randn(N * in, 1.0), *dx0 = randn(N * in, 1.0), *W[NG_LINEAR_MAX], *dy[NG_LINEAR_MAX];
  float *dW0[NG_LINEAR_MAX], *y[NG_LINEAR_MAX][2], *dW[NG_LINEAR_MAX][2], *dx[2];
  for (int64_t k = 0; beta_dx == 0.0f && k < N * in; k++) dx0[k] = NAN;
  for (int i = 0; i < n; i++) {
    W[i] = randn(out[i] * in, 1.0);
    dy[i] = randn(N * out[i], 1.0);
    dW0[i] = randn(out[i] * in, 1.0);
  }
  bool same = true;
  for (int r = 0; r < 3; r++) {  // the CPU, the backend, the backend's matmuls
    bufs b = {.be = run_be(t, r > 0)};
    ng_linear l = {.n = n};
    float *dys[NG_LINEAR_MAX], *ys[NG_LINEAR_MAX], *dWs[NG_LINEAR_MAX];
    float *dx_d = upf(&b, dx0, N * in), *x_d = upf(&b, x, N * in);
    for (int i = 0; i < n; i++) {
      l.W[i] = upf(&b, W[i], out[i] * in);
      l.out[i] = out[i];
      dys[i] = upf(&b, dy[i], N * out[i]);
      ys[i] = upf(&b, NULL, N * out[i]);
      dWs[i] = frozen && i == n - 1 ? NULL : upf(&b, dW0[i], out[i] * in);
    }
    if (r < 2) {
      b.be->linear_forward(b.be, l, x_d, N, in, ys);
      b.be->linear_backward(b.be, l, x_d, (const float *const *)dys, N, in, beta_dx, dx_d, dWs);
    } else {
      ng_linear_forward_matmuls(b.be, l, x_d, N, in, ys);
      ng_linear_backward_matmuls(b.be, l, x_d, (const float *const *)dys, N, in, beta_dx, dx_d, dWs);
    }
    for (int i = 0; i < n; i++) {
      if (r < 2) y[i][r] = down(&b, ys[i], N * out[i]);
      else same &= same_bits(&b, ys[i], y[i][1], N * out[i]);
      if (r < 2) dW[i][r] = dWs[i] ? down(&b, dWs[i], out[i] * in) : NULL;
      else if (dWs[i]) same &= same_bits(&b, dWs[i], dW[i][1], out[i] * in);
    }
    if (r < 2) dx[r] = down(&b, dx_d, N * in);
    else same &= same_bits(&b, dx_d, dx[1], N * in);
    release(&b);
  }
  char op[128];
  snprintf(op, sizeof op, "linear n=%d N=%lld in=%lld out=%lld.. beta_dx=%g%s", n, (long long)N,
           (long long)in, (long long)out[0], beta_dx, frozen ? " (last frozen)" : "");
  char name[256];
  snprintf(name, sizeof name, "%s: %s: the same bits as its matmuls one by one", t->label, op);
  // exact: the same bf16 roundings (elementwise) of the same inputs, into the same
  // cached primitives with the same beta, called in the same order.
  CHECK(same, name, "bits differ");
  grad_out g[NG_LINEAR_MAX + 1] = {{"dx", dx, N * in}};
  int ng = 1;
  for (int i = 0; i < n; i++) {
    compare_runs(t, FWD, y[i], N * out[i], "%s forward y%d", op, i);
    if (dW[i][0]) g[ng++] = (grad_out){"dW", dW[i], out[i] * in};
  }
  compare_grads(t, op, g, ng);
  for (int i = 0; i < n; i++) {
    free(W[i]);
    free(dy[i]);
    free(dW0[i]);
  }
  free(x);
  free(dx0);
}

static void test_embedding(const target *t, int64_t N, int64_t V, int64_t D) {
  int32_t *tok = ng_xmalloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)ng_rng_below(&rng, (uint64_t)V);
  float *W = randn(V * D, 1.0), *dout = randn(N * D, 1.0), *dW0 = randn(V * D, 1.0);
  float *y[2], *dW[2];
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    int32_t *dt = up(&b, tok, (size_t)N * sizeof(int32_t));
    float *dw = upf(&b, W, V * D), *dy = upf(&b, NULL, N * D), *ddo = upf(&b, dout, N * D);
    float *ddw = upf(&b, dW0, V * D);
    b.be->embedding_forward(b.be, dt, dw, N, D, dy);
    b.be->embedding_backward(b.be, dt, ddo, N, D, ddw);
    y[i] = down(&b, dy, N * D);
    dW[i] = down(&b, ddw, V * D);
    release(&b);
  }
  compare_runs(t, EXACT, y, N * D, "embedding N=%lld V=%lld D=%lld forward", (long long)N,
           (long long)V, (long long)D);
  compare_runs(t, GRAD, dW, V * D, "embedding N=%lld V=%lld D=%lld backward", (long long)N,
           (long long)V, (long long)D);
  free(tok);
  free(W);
  free(dout);
  free(dW0);
}

static void test_rmsnorm(const target *t, int64_t R, int64_t C, bool with_dw) {
  float *x = randn(R * C, 2.0), *w = randn(C, 1.0), *dy = randn(R * C, 1.0);
  float *dx0 = randn(R * C, 1.0), *dw0 = randn(C, 1.0);
  float *y[2], *rstd[2], *dx[2], *dw[2] = {0};
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_x = upf(&b, x, R * C), *d_w = upf(&b, w, C), *d_y = upf(&b, NULL, R * C);
    float *d_r = upf(&b, NULL, R), *d_dy = upf(&b, dy, R * C), *d_dx = upf(&b, dx0, R * C);
    float *d_dw = with_dw ? upf(&b, dw0, C) : NULL;
    b.be->rmsnorm_forward(b.be, d_x, d_w, R, C, 1e-6f, d_y, d_r);
    b.be->rmsnorm_backward(b.be, d_x, d_w, d_r, d_dy, R, C, d_dx, d_dw);
    y[i] = down(&b, d_y, R * C);
    rstd[i] = down(&b, d_r, R);
    dx[i] = down(&b, d_dx, R * C);
    if (with_dw) dw[i] = down(&b, d_dw, C);
    release(&b);
  }
  compare_runs(t, FWD, y, R * C, "rmsnorm R=%lld C=%lld forward y", (long long)R, (long long)C);
  compare_runs(t, FWD, rstd, R, "rmsnorm R=%lld C=%lld forward rstd", (long long)R, (long long)C);
  char op[96];
  snprintf(op, sizeof op, "rmsnorm R=%lld C=%lld (dw %s)", (long long)R, (long long)C,
           with_dw ? "too" : "NULL");
  grad_out g[2] = {{"dx", dx, R * C}, {"dw", dw, C}};
  compare_grads(t, op, g, with_dw ? 2 : 1);
  free(x);
  free(w);
  free(dy);
  free(dx0);
  free(dw0);
}

// channel_scale forward (in place) and backward (dx aliasing dy; dgamma
// accumulated onto dgamma0, or NULL), against the reference and, for the
// reference itself, against the formula in double.
static void test_channel_scale(const target *t, int64_t R, int64_t C, bool with_dgamma) {
  float *x = randn(R * C, 2.0), *gamma = randn(C, 1.0), *dy = randn(R * C, 1.0);
  float *dg0 = randn(C, 1.0), *y[2], *dx[2], *dg[2] = {0};
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_x = upf(&b, x, R * C), *d_y = upf(&b, x, R * C), *d_g = upf(&b, gamma, C);
    float *d_dy = upf(&b, dy, R * C), *d_dg = with_dgamma ? upf(&b, dg0, C) : NULL;
    b.be->channel_scale_forward(b.be, d_y, d_g, R, C, d_y);
    b.be->channel_scale_backward(b.be, d_x, d_g, d_dy, R, C, d_dy, d_dg);
    y[i] = down(&b, d_y, R * C);
    dx[i] = down(&b, d_dy, R * C);
    if (with_dgamma) dg[i] = down(&b, d_dg, C);
    release(&b);
  }
  float *fy = ng_xmalloc((size_t)(R * C) * sizeof(float)), *fdx = ng_xmalloc((size_t)(R * C) * sizeof(float));
  float *fdg = ng_xmalloc((size_t)C * sizeof(float));
  for (int64_t c = 0; c < C; c++) {
    double acc = dg0[c];
    for (int64_t r = 0; r < R; r++) {
      fy[r * C + c] = (float)((double)x[r * C + c] * gamma[c]);
      fdx[r * C + c] = (float)((double)dy[r * C + c] * gamma[c]);
      acc += (double)dy[r * C + c] * x[r * C + c];
    }
    fdg[c] = (float)acc;
  }
  target formula = {t->ref, t->ref, ""};
  snprintf(formula.label, sizeof formula.label, "%s reference", t->ref->name);
  char what[96];
  snprintf(what, sizeof what, "channel_scale R=%lld C=%lld against the formula: y", (long long)R,
           (long long)C);
  compare(&formula, what, FWD, copyf(y[0], R * C), fy, R * C);
  snprintf(what, sizeof what, "channel_scale R=%lld C=%lld against the formula: dx", (long long)R,
           (long long)C);
  compare(&formula, what, GRAD, copyf(dx[0], R * C), fdx, R * C);
  if (with_dgamma) {
    snprintf(what, sizeof what, "channel_scale R=%lld C=%lld against the formula: dgamma",
             (long long)R, (long long)C);
    compare(&formula, what, GRAD, copyf(dg[0], C), fdg, C);
  }
  compare_runs(t, FWD, y, R * C, "channel_scale R=%lld C=%lld forward (in place)", (long long)R,
               (long long)C);
  char op[96];
  snprintf(op, sizeof op, "channel_scale R=%lld C=%lld (dx aliasing dy, dgamma %s)", (long long)R,
           (long long)C, with_dgamma ? "too" : "NULL");
  grad_out g[2] = {{"dx", dx, R * C}, {"dgamma", dg, C}};
  compare_grads(t, op, g, with_dgamma ? 2 : 1);
  free(x);
  free(gamma);
  free(dy);
  free(dg0);
  free(fy);
  free(fdx);
  free(fdg);
}

static void test_rope(const target *t, int64_t B, int64_t T, int64_t nh, int64_t hd, double theta) {
  int64_t n = B * T * nh * hd;
  float *x = randn(n, 1.0), *fwd[2], *bwd[2];
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d = upf(&b, x, n), *e = upf(&b, x, n);
    b.be->rope_forward(b.be, d, B, T, nh, hd, theta);
    b.be->rope_backward(b.be, e, B, T, nh, hd, theta);
    fwd[i] = down(&b, d, n);
    bwd[i] = down(&b, e, n);
    release(&b);
  }
  compare_runs(t, FWD, fwd, n, "rope B=%lld T=%lld nh=%lld hd=%lld theta=%g forward",
               (long long)B, (long long)T, (long long)nh, (long long)hd, theta);
  compare_runs(t, GRAD, bwd, n, "rope B=%lld T=%lld nh=%lld hd=%lld theta=%g backward",
               (long long)B, (long long)T, (long long)nh, (long long)hd, theta);
  free(x);
}

// A host backend's bf16 attention against the CPU's bf16 kernel on the same
// inputs (got[p][1]: out, lse, dq, dk, dv): the same bf16 rounding of q, k,
// v, dout, P and dS, so they differ only by fp32 summation order and the
// exponential's implementation, and by the rare bf16 roundings those flip:
// relative L2 <= 2e-4 each (measured: 8e-5 at most), where P off by 0.1% or
// a missing scale gives 1.6e-3 and more. A gradient's L2 is floored at 1e-3
// of the largest gradient's (the contract's scale floor): at T = 1, dq and dk
// are zero but for rounding.
static void attention_as_cpu_bf16(const target *t, ng_attn_shape s, const float *q,
                                  const float *k, const float *v, const float *dout,
                                  float **got[5], const int64_t sizes[5],
                                  const char *const parts[5]) {
  float *want[5];
  for (int p = 0; p < 5; p++) want[p] = ng_xcalloc((size_t)sizes[p], sizeof(float));
  ng_cpu_attention_forward(s, q, k, v, want[0], want[1], true);
  ng_cpu_attention_backward(s, q, k, v, want[0], want[1], dout, want[2], want[3], want[4], true);
  double G = 0.0;  // the largest gradient's L2 norm
  for (int p = 2; p < 5; p++) G = fmax(G, sqrt(sumsq(want[p], sizes[p])));
  for (int p = 0; p < 5; p++) {
    double floor = p < 2 ? 0.0 : 1e-3 * G, d = 0.0;
    for (int64_t i = 0; i < sizes[p]; i++) d += ((double)got[p][1][i] - want[p][i]) * ((double)got[p][1][i] - want[p][i]);
    double err = isnan(d) ? INFINITY : sqrt(d) / fmax(sqrt(sumsq(want[p], sizes[p])), floor);
    char name[256];
    snprintf(name, sizeof name,
             "%s: attention B=%lld T=%lld H=%lld KV=%lld hd=%lld %s as the CPU's bf16 kernel: "
             "relative L2 error %.1e",
             t->label, (long long)s.B, (long long)s.T, (long long)s.H, (long long)s.KV,
             (long long)s.hd, parts[p], err);
    CHECK(err <= 2e-4, name, "above 2e-4");
    free(want[p]);
  }
}

static void test_attention(const target *t, ng_attn_shape s) {
  int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd, nl = s.B * s.H * s.T;
  float *q = randn(nq, 1.0), *k = randn(nk, 1.0), *v = randn(nk, 1.0), *dout = randn(nq, 1.0);
  float *out[2], *lse[2], *dq[2], *dk[2], *dv[2];
  bool again = false;
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_q = upf(&b, q, nq), *d_k = upf(&b, k, nk), *d_v = upf(&b, v, nk);
    float *d_o = upf(&b, NULL, nq), *d_l = upf(&b, NULL, nl), *d_do = upf(&b, dout, nq);
    float *d_dq = upf(&b, NULL, nq), *d_dk = upf(&b, NULL, nk), *d_dv = upf(&b, NULL, nk);
    b.be->attention_forward(b.be, s, d_q, d_k, d_v, d_o, d_l);
    b.be->attention_backward(b.be, s, d_q, d_k, d_v, d_o, d_l, d_do, d_dq, d_dk, d_dv);
    out[i] = down(&b, d_o, nq);
    lse[i] = down(&b, d_l, nl);
    dq[i] = down(&b, d_dq, nq);
    dk[i] = down(&b, d_dk, nk);
    dv[i] = down(&b, d_dv, nk);
    if (i == 1) {  // the backend under test: the same backward again
      b.be->attention_backward(b.be, s, d_q, d_k, d_v, d_o, d_l, d_do, d_dq, d_dk, d_dv);
      again = same_bits(&b, d_dq, dq[1], nq) && same_bits(&b, d_dk, dk[1], nk) &&
              same_bits(&b, d_dv, dv[1], nk);
    }
    release(&b);
  }
  const char *parts[5] = {"forward out", "forward lse", "backward dq", "backward dk",
                          "backward dv"};
  float **res[5] = {out, lse, dq, dk, dv};
  int64_t sizes[5] = {nq, nl, nq, nk, nk};
  if (t->be->precision == NG_PREC_BF16 && t->be->host_memory)
    attention_as_cpu_bf16(t, s, q, k, v, dout, res, sizes, parts);
  char op[96];
  snprintf(op, sizeof op, "attention B=%lld T=%lld H=%lld KV=%lld hd=%lld", (long long)s.B,
           (long long)s.T, (long long)s.H, (long long)s.KV, (long long)s.hd);
  char name[256];
  snprintf(name, sizeof name, "%s: %s backward twice: the same dq, dk, dv bits", t->label, op);
  // exact: the same call on the same inputs and the same threads.
  CHECK(again, name, "bits differ");
  for (int p = 0; p < 2; p++) compare_runs(t, FWD, res[p], sizes[p], "%s %s", op, parts[p]);
  grad_out g[3] = {{"dq", dq, nq}, {"dk", dk, nk}, {"dv", dv, nk}};
  compare_grads(t, op, g, 3);
  free(q);
  free(k);
  free(v);
  free(dout);
}

static void test_swiglu(const target *t, int64_t n) {
  float *g = randn(n, 2.0), *u = randn(n, 1.0), *ds = randn(n, 1.0), *s[2], *dg[2], *du[2];
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_g = upf(&b, g, n), *d_u = upf(&b, u, n), *d_s = upf(&b, NULL, n);
    float *d_ds = upf(&b, ds, n), *d_dg = upf(&b, NULL, n), *d_du = upf(&b, NULL, n);
    b.be->swiglu_forward(b.be, d_g, d_u, n, d_s);
    b.be->swiglu_backward(b.be, d_g, d_u, d_ds, n, d_dg, d_du);
    s[i] = down(&b, d_s, n);
    dg[i] = down(&b, d_dg, n);
    du[i] = down(&b, d_du, n);
    release(&b);
  }
  compare_runs(t, FWD, s, n, "swiglu n=%lld forward", (long long)n);
  char op[32];
  snprintf(op, sizeof op, "swiglu n=%lld", (long long)n);
  grad_out gr[2] = {{"dgate", dg, n}, {"dup", du, n}};
  compare_grads(t, op, gr, 2);
  free(g);
  free(u);
  free(ds);
}

// add (aliasing its first input), lerp (aliasing its second), scale (in place), row_rms, sumsq.
static void test_elementwise(const target *t, int64_t R, int64_t C) {
  int64_t n = R * C;
  float *a = randn(n, 1.0), *c = randn(n, 1.0), *add[2], *lerp[2], *scale[2], *rms[2];
  double ss[2];
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_a = upf(&b, a, n), *d_c = upf(&b, c, n), *d_l = upf(&b, c, n);
    float *d_s = upf(&b, a, n), *d_r = upf(&b, NULL, R);
    b.be->add(b.be, d_a, d_c, n, d_a);
    b.be->lerp(b.be, d_a, d_l, 0.3f, n, d_l);
    b.be->scale(b.be, d_s, -1.7f, n, d_s);
    b.be->row_rms(b.be, d_s, R, C, d_r);
    ss[i] = b.be->sumsq(b.be, d_c, n);
    add[i] = down(&b, d_a, n);
    lerp[i] = down(&b, d_l, n);
    scale[i] = down(&b, d_s, n);
    rms[i] = down(&b, d_r, R);
    release(&b);
  }
  char name[64];
  compare_runs(t, EXACT, add, n, "add n=%lld", (long long)n);
  compare_runs(t, FEW, lerp, n, "lerp n=%lld", (long long)n);
  compare_runs(t, EXACT, scale, n, "scale n=%lld", (long long)n);
  compare_runs(t, FWD, rms, R, "row_rms R=%lld C=%lld", (long long)R, (long long)C);
  snprintf(name, sizeof name, "sumsq n=%lld", (long long)n);
  compare_double_sum(t, name, ss[1], ss[0]);
  free(a);
  free(c);
}

// The fused loss at [N, V], softmaxes over the first Vu columns: ce_kd with a
// full teacher (or none), or ce_kd_topk from a top-k teacher of k when k > 0,
// under divergence dv (jsd: beta 0.3), averaged over n_norm rows (0: the call's
// valid rows); every fifth row from the fourth ignored. The backend under test
// calls it twice: the same ce, kd and dlogits bits.
static void test_loss(const target *t, int64_t N, int64_t V, int64_t Vu, bool teacher, int64_t k,
                      int64_t n_norm, ng_divergence dv) {
  float *logits = randn(N * V, 3.0), *tl = randn(N * V, 3.0), *dl[2];
  int32_t *y = ng_xmalloc((size_t)N * sizeof(int32_t)), *ids = ng_xmalloc((size_t)(N * k + 1) * 4);
  float *vals = ng_xmalloc((size_t)(N * k + 1) * sizeof(float)), *lse = ng_xmalloc((size_t)N * 4);
  float *rest = ng_xmalloc((size_t)N * 4);
  for (int64_t i = 0; i < N; i++) {
    y[i] = i % 5 == 3 ? -1 : (int32_t)ng_rng_below(&rng, (uint64_t)Vu);
    double sum = 0.0, off = 0.0;
    for (int64_t j = 0; j < Vu; j++) sum += exp((double)tl[i * V + j] / 2.0);
    for (int64_t j = k; j < Vu; j++) off += exp((double)tl[i * V + j] / 2.0);
    lse[i] = (float)log(sum);
    rest[i] = (float)(log(off) - log(sum));
    for (int64_t j = 0; j < k; j++) {  // the first k ids stand for the top k (any set works)
      ids[i * k + j] = (int32_t)j;
      vals[i * k + j] = tl[i * V + j];
    }
  }
  ng_loss_params lp = {0.5, 2.0, Vu, n_norm, dv, dv == NG_DIV_JSD ? 0.3 : 0.0};
  double ce[3], kd[3];
  int64_t nv[3];
  bool again = false;
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_l = upf(&b, logits, N * V), *d_t = upf(&b, tl, N * V), *d_d = upf(&b, NULL, N * V);
    int32_t *d_y = up(&b, y, (size_t)N * sizeof(int32_t));
    int32_t *d_ids = k ? up(&b, ids, (size_t)(N * k) * sizeof(int32_t)) : NULL;
    float *d_v = k ? upf(&b, vals, N * k) : NULL, *d_lse = k ? upf(&b, lse, N) : NULL;
    float *d_rest = k ? upf(&b, rest, N) : NULL;
    for (int c = i; c <= 2 * i; c++) {  // c: 0 the reference, 1 and 2 the backend twice
      if (k > 0)
        b.be->ce_kd_topk(b.be, d_l, d_ids, d_v, d_lse, d_rest, k, d_y, N, V, lp, d_d, &ce[c], &kd[c],
                         &nv[c]);
      else
        b.be->ce_kd(b.be, d_l, teacher ? d_t : NULL, d_y, N, V, lp, d_d, &ce[c], &kd[c], &nv[c]);
      if (c < 2) dl[i] = down(&b, d_d, N * V);
    }
    // exact: the same call on the same inputs and the same threads.
    if (i == 1) again = same_bits(&b, d_d, dl[1], N * V) && ce[2] == ce[1] && kd[2] == kd[1] && nv[2] == nv[1];
    release(&b);
  }
  char name[256], what[96];
  snprintf(what, sizeof what, "%s%s%s N=%lld V=%lld (%lld used) n_norm=%lld",
           k ? "ce_kd_topk" : teacher ? "ce_kd" : "ce", teacher || k ? " " : "",
           teacher || k ? ng_divergence_name(dv) : "", (long long)N, (long long)V, (long long)Vu,
           (long long)n_norm);
  snprintf(name, sizeof name, "%s: %s: valid rows %lld", t->label, what, (long long)nv[1]);
  CHECK(nv[1] == nv[0], name, "expected %lld", (long long)nv[0]);
  snprintf(name, sizeof name, "%s: %s twice: the same ce, kd and dlogits bits", t->label, what);
  CHECK(again, name, "results differ");
  snprintf(name, sizeof name, "%s ce", what);
  compare_scalar(t, name, ce[1], ce[0]);
  if (teacher || k) {
    snprintf(name, sizeof name, "%s kd", what);
    compare_scalar(t, name, kd[1], kd[0]);
  }
  compare_runs(t, GRAD, dl, N * V, "%s dlogits", what);
  free(logits);
  free(tl);
  free(y);
  free(ids);
  free(vals);
  free(lse);
  free(rest);
}

// One call over N rows against two calls over rows [0, split) and [split, N)
// given the whole call's valid rows as n_norm, on the backend under test
// alone: ce and kd add up, dlogits are the same row for row, bit for bit.
static void test_loss_chunks(const target *t, int64_t N, int64_t V, int64_t split) {
  float *logits = randn(N * V, 3.0), *tl = randn(N * V, 3.0);
  int32_t *y = ng_xmalloc((size_t)N * sizeof(int32_t));
  int64_t nv = 0;
  for (int64_t i = 0; i < N; i++) {
    y[i] = i % 4 == 1 ? -1 : (int32_t)ng_rng_below(&rng, (uint64_t)V);
    nv += y[i] >= 0;
  }
  bufs b = {.be = t->be};
  float *d_l = upf(&b, logits, N * V), *d_t = upf(&b, tl, N * V), *d_d = upf(&b, NULL, N * V);
  float *d_c = upf(&b, NULL, N * V);
  int32_t *d_y = up(&b, y, (size_t)N * sizeof(int32_t));
  ng_loss_params lp = {0.3, 1.5, 0, 0, NG_DIV_FORWARD_KL, 0.0};
  double ce, kd, ce_a, kd_a, ce_b, kd_b;
  int64_t n, n_a, n_b;
  t->be->ce_kd(t->be, d_l, d_t, d_y, N, V, lp, d_d, &ce, &kd, &n);
  lp.n_norm = nv;
  int64_t rest = N - split;
  t->be->ce_kd(t->be, d_l, d_t, d_y, split, V, lp, d_c, &ce_a, &kd_a, &n_a);
  t->be->ce_kd(t->be, d_l + split * V, d_t + split * V, d_y + split, rest, V, lp, d_c + split * V,
               &ce_b, &kd_b, &n_b);
  float *whole = down(&b, d_d, N * V), *chunks = down(&b, d_c, N * V);
  char name[192];
  snprintf(name, sizeof name, "%s: ce_kd over 2 chunks (n_norm = %lld valid rows of %lld) adds up",
           t->label, (long long)nv, (long long)N);
  CHECK(n == nv && n_a + n_b == nv && fabs(ce_a + ce_b - ce) <= 1e-12 * fabs(ce) &&
            fabs(kd_a + kd_b - kd) <= 1e-12 * fabs(kd),
        name, "ce %.17g + %.17g vs %.17g, kd %.17g + %.17g vs %.17g, rows %lld + %lld vs %lld",
        ce_a, ce_b, ce, kd_a, kd_b, kd, (long long)n_a, (long long)n_b, (long long)n);
  snprintf(name, sizeof name, "%s: ce_kd over 2 chunks: the same dlogits, bit for bit", t->label);
  // exact: each row's dlogits are computed from that row alone (one thread or
  // one GPU block per row, no BLAS) and the same 1 / n_norm, whatever the rows
  // around it; ce and kd above sum the rows in another grouping (1e-12).
  CHECK(memcmp(whole, chunks, (size_t)(N * V) * sizeof(float)) == 0, name, "dlogits differ");
  free(whole);
  free(chunks);
  release(&b);
  free(logits);
  free(tl);
  free(y);
}

// widen_bf16 of n values (random upper halves, signed zeros, infinities, a NaN): exact.
static void test_widen_bf16(const target *t, int64_t n) {
  uint16_t *x = ng_xmalloc((size_t)n * sizeof(uint16_t));
  float *exp = ng_xmalloc((size_t)n * sizeof(float));
  static const uint16_t special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0x0001};
  for (int64_t i = 0; i < n; i++) {
    x[i] = i < 6 ? special[i] : (uint16_t)ng_rng_below(&rng, 65536);
    uint32_t bits = (uint32_t)x[i] << 16;
    memcpy(&exp[i], &bits, sizeof bits);
  }
  bufs b = {.be = t->be};
  uint16_t *d_x = up(&b, x, (size_t)n * sizeof(uint16_t));
  float *d_y = upf(&b, NULL, n);
  t->be->widen_bf16(t->be, d_x, n, d_y);
  float *got = down(&b, d_y, n);
  char name[128];
  snprintf(name, sizeof name, "%s: widen_bf16 n=%lld: exact bits", t->label, (long long)n);
  // exact: every bf16 number is a float; widening appends 16 zero bits.
  CHECK(memcmp(got, exp, (size_t)n * sizeof(float)) == 0, name, "bits differ");
  free(got);
  release(&b);
  free(x);
  free(exp);
}

static void test_adamw(const target *t, int64_t n, bool decay) {
  float *p = randn(n, 1.0), *g = randn(n, 1.0), *m = randn(n, 0.1), *v = randn(n, 0.1), *r[2];
  for (int64_t i = 0; i < n; i++) v[i] = v[i] * v[i];
  ng_adamw_params ap = {1e-3, 0.9, 0.95, 1e-8, 0.1, 3, 0.5};
  float *mo[2], *vo[2];
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_p = upf(&b, p, n), *d_g = upf(&b, g, n), *d_m = upf(&b, m, n), *d_v = upf(&b, v, n);
    b.be->adamw(b.be, d_p, d_g, d_m, d_v, n, ap, decay);
    r[i] = down(&b, d_p, n);
    mo[i] = down(&b, d_m, n);
    vo[i] = down(&b, d_v, n);
    release(&b);
  }
  compare_runs(t, FEW, r, n, "adamw n=%lld decay=%d weights", (long long)n, decay);
  compare_runs(t, FEW, mo, n, "adamw n=%lld decay=%d first moments", (long long)n, decay);
  compare_runs(t, FEW, vo, n, "adamw n=%lld decay=%d second moments", (long long)n, decay);
  free(p);
  free(g);
  free(m);
  free(v);
}

static int by_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}
static int by_id(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

// Whether ids, vals [k] are a top k of row x [V] with the values of the
// reference's top k ref [k]: k distinct ids below V, each holding its value,
// the same values as a multiset (sorts vals and ref).
static bool topk_row_ok(const float *x, int64_t V, int64_t k, const uint32_t *ids, float *vals,
                        float *ref) {
  uint32_t *sorted = ng_xmalloc((size_t)k * sizeof(uint32_t));
  memcpy(sorted, ids, (size_t)k * sizeof(uint32_t));
  qsort(sorted, (size_t)k, sizeof *sorted, by_id);
  bool ok = true;
  for (int64_t j = 0; j < k; j++)  // exact: each value is a copy of the row's
    ok = ok && ids[j] < V && vals[j] == x[ids[j]] && (j == 0 || sorted[j] > sorted[j - 1]);
  qsort(vals, (size_t)k, sizeof(float), by_float);
  qsort(ref, (size_t)k, sizeof(float), by_float);
  free(sorted);
  return ok && memcmp(vals, ref, (size_t)k * sizeof(float)) == 0;
}

// topk of R rows of logits [R, ld] over their first V columns (row 1 on three
// levels: ties at the k-th value); which tied ids are taken is the backend's.
// The log-sum-exp and the log mass off the kept ids: within 1e-6 of the
// reference's, relative (double sums in another order); -inf alike at k = V.
static void test_topk(const target *t, int64_t R, int64_t V, int64_t ld, int64_t k) {
  float *x = randn(R * ld, 5.0), *vals[2], *lse[2], *rest[2];
  uint32_t *ids[2];
  for (int64_t j = 0; R > 1 && j < V; j++) x[ld + j] = (float)(j % 3);
  for (int i = 0; i < 2; i++) {
    bufs b = {.be = run_be(t, i)};
    float *d_x = upf(&b, x, R * ld), *d_v = upf(&b, NULL, R * k), *d_l = upf(&b, NULL, R);
    float *d_r = upf(&b, NULL, R);
    uint32_t *d_i = up(&b, NULL, (size_t)(R * k) * sizeof(uint32_t));
    b.be->topk(b.be, d_x, R, ld, V, k, 0.5, d_i, d_v, d_l, d_r);
    ids[i] = down_bytes(&b, d_i, (size_t)(R * k) * sizeof(uint32_t));
    vals[i] = down(&b, d_v, R * k);
    lse[i] = down(&b, d_l, R);
    rest[i] = down(&b, d_r, R);
    release(&b);
  }
  bool ok = true;
  double worst = 0.0;
  for (int64_t r = 0; r < R; r++) {
    ok = ok && topk_row_ok(x + r * ld, V, k, ids[1] + r * k, vals[1] + r * k, vals[0] + r * k);
    worst = fmax(worst, fabs((double)lse[1][r] - lse[0][r]) / fabs((double)lse[0][r]));
    if (k == V) ok = ok && isinf(rest[1][r]) && isinf(rest[0][r]) && rest[0][r] < 0 && rest[1][r] < 0;
    else worst = fmax(worst, fabs((double)rest[1][r] - rest[0][r]) / fabs((double)rest[0][r]));
  }
  char name[192];
  snprintf(name, sizeof name, "%s: topk R=%lld V=%lld ld=%lld k=%lld: the reference's values, lse "
           "and rest within 1e-6 (%.1e)", t->label, (long long)R, (long long)V, (long long)ld,
           (long long)k, worst);
  CHECK(ok && worst <= 1e-6, name, "selection %s", ok ? "right" : "wrong");
  free2(vals);
  free2(lse);
  free2(rest);
  free(ids[0]);
  free(ids[1]);
  free(x);
}

// ---------------------------------------------------------------- the shape list

// Every backend runs every entry, but those marked device_only: a device
// backend's alone (on the host they cut nothing and cost more than the rest).
// "cuda:" names the cut of its kernels an entry was added for.
static const int64_t memory_n[] = {1, 1001};
static const struct { int64_t M, N, K; } matmul_shapes[] = {
    {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 130, 96}, {3, 5, 0}, {37, 29, 53},
    {150, 170, 120}};  // onednn bf16: inputs of more than one 16384-element conversion chunk
static const float matmul_betas[] = {0.0f, 1.0f, 0.5f};  // beta 0: C NaN before
// ---------------------------------------------------------------- weight copies

// l's forward and backward on x_d, dy_d into y_d, dx_d and dW_d (zeroed first).
static void linear_pass(const target *t, ng_linear l, float *x_d, float *dy_d, int64_t N,
                        int64_t in, float *y_d, float *dx_d, float *dW_d) {
  t->be->linear_forward(t->be, l, x_d, N, in, &y_d);
  t->be->zero(t->be, dW_d, (size_t)(l.out[0] * in) * sizeof(float));
  t->be->linear_backward(t->be, l, x_d, (const float *const[]){dy_d}, N, in, 0.0f, dx_d,
                         (float *const[]){dW_d});
}

// One operand's bf16 copy on a backend that reads one, the weight W
// (ng_linear.W_bf16) or the input x (x_bf16): not ready, the forward writes
// the operand's rounding into it and y is unchanged; ready, the forward and
// backward read the copy, not the operand (a copy of another operand A2's
// rounding: y, dx and dW are A2's, bit for bit).
static void test_copy(const target *t, bool input, int64_t N, int64_t in, int64_t out) {
  int64_t n = input ? N * in : out * in;
  float *x = randn(N * in, 1.0), *W = randn(out * in, 1.0), *A2 = randn(n, 1.0);
  float *dy = randn(N * out, 1.0);
  uint16_t *want = ng_xmalloc((size_t)n * sizeof(uint16_t));
  bufs b = {.be = t->be};
  float *x_d = upf(&b, x, N * in), *W_d = upf(&b, W, out * in), *A2_d = upf(&b, A2, n);
  float *dy_d = upf(&b, dy, N * out), *y_d = upf(&b, NULL, N * out), *dx_d = upf(&b, NULL, N * in);
  float *dW_d = upf(&b, NULL, out * in);
  uint16_t *copy = up(&b, NULL, (size_t)n * sizeof(uint16_t));
  // y, dx and dW with A2 and no copy: what a copy of A2's rounding must give
  ng_linear plain = {.n = 1, .W = {input ? W_d : A2_d}, .out = {out}};
  linear_pass(t, plain, input ? A2_d : x_d, dy_d, N, in, y_d, dx_d, dW_d);
  float *y2 = down(&b, y_d, N * out), *dx2 = down(&b, dx_d, N * in), *dW2 = down(&b, dW_d, out * in);
  plain.W[0] = W_d;
  t->be->linear_forward(t->be, plain, x_d, N, in, &y_d);
  float *y1 = down(&b, y_d, N * out);
  ng_linear l = plain;
  if (input) l.x_bf16 = copy;
  else l.W_bf16[0] = copy;
  t->be->linear_forward(t->be, l, x_d, N, in, &y_d);
  bool own = same_bits(&b, y_d, y1, N * out);
  uint16_t *got = down_bytes(&b, copy, (size_t)n * sizeof(uint16_t));
  ng_to_bf16(input ? x : W, n, want);
  bool filled = memcmp(got, want, (size_t)n * sizeof(uint16_t)) == 0;
  ng_to_bf16(A2, n, want);
  t->be->upload(t->be, copy, want, (size_t)n * sizeof(uint16_t));
  if (input) l.x_ready = true;
  else l.bf16_ready = true;
  linear_pass(t, l, x_d, dy_d, N, in, y_d, dx_d, dW_d);
  bool read = same_bits(&b, y_d, y2, N * out) && same_bits(&b, dx_d, dx2, N * in) &&
              same_bits(&b, dW_d, dW2, out * in);
  char name[200];
  snprintf(name, sizeof name, "%s: linear N=%lld in=%lld out=%lld: fills the %s's bf16 copy "
           "(rounded), reads it when ready (y, dx, dW from the copy, bit for bit)",
           t->label, (long long)N, (long long)in, (long long)out, input ? "input" : "weight");
  CHECK(filled && own && read, name, "filled %d, y unchanged %d, copy read %d", filled, own, read);
  release(&b);
  free(got);
  free(want);
  free(y1);
  free(y2);
  free(dx2);
  free(dW2);
  free(x);
  free(W);
  free(A2);
  free(dy);
}

// A tied frozen teacher (2 blocks) and an untied Post-Norm student (2 blocks)
// on be, distilled for 4 AdamW steps from seed 7, the loss in chunks of 5 of
// the 14 rows, the student's blocks recomputed in its backward or kept.
// Returns the student's weights one after another (host, *count floats) and
// whether every linear weight of both models had a bf16 copy (ng_param.rounded)
// and the student's activations the bf16 copies of every linear input.
static float *distill_steps(ng_backend *be, bool recompute, int64_t *count, bool *copies) {
  enum { Bq = 2, Tq = 7, Nq = Bq * Tq, V = 37 };
  ng_model_config c = {.vocab_size = V, .hidden_size = 16, .intermediate_size = 24,
                       .num_hidden_layers = 2, .num_attention_heads = 2, .num_key_value_heads = 1,
                       .head_dim = 8, .rope_theta = 1e4, .rms_norm_eps = 1e-6,
                       .tie_word_embeddings = true, .final_norm = true, .norm_placement = NG_NORM_PRE};
  ng_model *teacher = ng_model_create(be, &c, false);
  c.tie_word_embeddings = false;
  c.norm_placement = NG_NORM_POST;
  ng_model *m = ng_model_create(be, &c, true);
  ng_rng r;
  ng_rng_seed(&r, 7);
  ng_model_init_random(teacher, &r, 0.2);
  ng_model_init_random(m, &r, 0.2);
  int32_t ids[2 * Nq];
  for (int i = 0; i < 2 * Nq; i++) ids[i] = (int32_t)ng_rng_below(&r, V);
  bufs b = {.be = be};
  int32_t *tokens = up(&b, ids, sizeof(int32_t) * Nq), *targets = up(&b, ids + Nq, sizeof(int32_t) * Nq);
  ng_acts_options so = {.for_backward = true, .recompute = recompute, .chunk = 5}, to = {.chunk = 5};
  ng_acts *sa = ng_acts_create_with(m, Bq, Tq, &so), *ta = ng_acts_create_with(teacher, Bq, Tq, &to);
  ng_adamw *o = ng_adamw_create(m);
  ng_optim_config oc = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
  ng_loss_params lp = {.kd_weight = 0.5, .temperature = 1.0, .divergence = NG_DIV_FORWARD_KL};
  ng_loss_teacher t = {.model = teacher, .acts = ta};
  for (int step = 0; step < 4; step++) {
    double ce, kd;
    int64_t nv;
    ng_model_zero_grad(m);
    ng_model_forward(teacher, ta, tokens, NULL);
    ng_model_forward(m, sa, tokens, NULL);
    ng_model_loss(m, sa, &t, targets, lp, true, &ce, &kd, &nv);
    ng_model_backward(m, sa, tokens);
    ng_adamw_step(m, o, &oc, 1e-2);
  }
  *copies = sa->head_in_bf16 != NULL;
  for (int i = 0; i < sa->n_blocks; i++) {
    const ng_block_acts *s = &sa->blocks[i];
    *copies = *copies && s->att_in_bf16 && s->att_bf16 && s->mlp_in_bf16 && s->act_bf16;
  }
  for (int k = 0; k < 2; k++) {
    const ng_model *x = k ? m : teacher;
    for (int i = 0; i < x->n_params; i++) {
      const ng_param *p = &x->params[i];
      bool head_or_block = p->layer >= 0 || strcmp(p->name, "model.embed_tokens.weight") != 0 ||
                           x->cfg.tie_word_embeddings;
      if (p->ndim == 2 && head_or_block) *copies = *copies && p->rounded;
    }
  }
  *count = 0;
  for (int i = 0; i < m->n_params; i++) *count += (int64_t)m->params[i].numel;
  float *w = ng_xmalloc((size_t)*count * sizeof(float));
  size_t at = 0;
  for (int i = 0; i < m->n_params; at += m->params[i++].numel)
    be->download(be, w + at, m->params[i].data, m->params[i].numel * sizeof(float));
  release(&b);
  ng_adamw_free(m, o);
  ng_acts_free(m, sa);
  ng_acts_free(teacher, ta);
  ng_model_free(m);
  ng_model_free(teacher);
  return w;
}

// A backend that reads bf16 weights (ng_backend.bf16_weights) trains the same
// with the models' bf16 copies of the weights and of the linear inputs as
// rounding each at every use, blocks recomputed or kept; another keeps no copies.
static void run_weight_copies(const target *t) {
  for (int rc = 0; rc < 2; rc++) {
    int64_t n, n0;
    bool copies, copies0;
    float *w = distill_steps(t->be, rc, &n, &copies);
    char name[280];
    if (!t->be->bf16_weights) {
      snprintf(name, sizeof name, "%s: the models keep no bf16 copies (recompute %d)", t->label, rc);
      CHECK(!copies, name, "a model has copies");
      free(w);
      continue;
    }
    t->be->bf16_weights = false;  // the same backend rounding every operand at every use
    float *w0 = distill_steps(t->be, rc, &n0, &copies0);
    t->be->bf16_weights = true;
    // exact: a copy holds the same elementwise rounding of the same values, read
    // by the same primitives in the same order
    bool same = n == n0 && memcmp(w, w0, (size_t)n * sizeof(float)) == 0;
    snprintf(name, sizeof name,
             "%s: 4 distillation steps (chunked loss, blocks %s, frozen tied teacher) with the "
             "bf16 copies of weights and linear inputs: the student's weights bit-identical to "
             "rounding at every use",
             t->label, rc ? "recomputed" : "kept");
    CHECK(copies && !copies0 && same, name, "copies %d (without: %d), weights %s", copies,
          copies0, same ? "the same" : "differ");
    free(w);
    free(w0);
  }
}

static const struct {
  int n;
  int64_t out[NG_LINEAR_MAX], N, in;
  float beta_dx;
  bool frozen;
} linear_shapes[] = {
    {1, {5}, 7, 3, 0.0f, false},          {1, {0}, 4, 3, 1.0f, false},  // an empty output
    {3, {33, 17, 17}, 37, 29, 0.0f, false},  // q/k/v
    {2, {65, 65}, 130, 96, 1.0f, true},      // gate/up, up frozen, dx accumulated
    {3, {130, 64, 1}, 150, 120, 0.5f, false}};  // onednn bf16: many conversion chunks
static const struct { int64_t N, V, D; } embedding_shapes[] = {
    {1, 1, 3}, {37, 11, 13}, {77, 41, 19}};  // cuda: tokens repeated across blocks
static const struct {
  int64_t R, C;
  bool with_dw, device_only;
} rmsnorm_shapes[] = {
    {1, 1, true, false},  {33, 65, true, false},   {7, 19, false, false},
    {131, 70, true, false},  // cuda: three blocks of 64 rows for dw
    {131, 70, false, false},
    {130, 1000, true, false},  // onednn: vector tails, three row blocks of dw
    {131139, 128, true, true},  // cuda: 2050 row-block partials, past a micro-batch's 2^17 q/k-norm rows
};
static const struct {
  int64_t B, T, nh, hd;
  double theta;
} rope_shapes[] = {{1, 1, 1, 2, 1e4}, {2, 9, 3, 10, 1e4}, {2, 11, 3, 10, 5e5},
                   {2, 37, 2, 66, 1e4}};  // onednn: a half of 33, a vector tail
static const ng_attn_shape attention_shapes[] = {
    {1, 1, 2, 1, 4},    {2, 7, 4, 2, 6},
    {1, 70, 3, 1, 8},    // more than one row block
    {2, 800, 4, 2, 8},   // onednn: query blocks of 40 positions, dk and dv summed over 20
    {1, 777, 2, 1, 8},   // onednn: blocks of 37 (the largest divisor of T that fits)
    {2, 67, 4, 2, 16},   // cuda: the second tile of 3 rows, bf16 on tensor cores
    {1, 130, 6, 2, 40},  // cuda: hd 40, fp32 tiles in bf16 mode too
    {1, 1, 2, 1, 8},     // cuda: T = 1 (dq and dk zero by symmetry)
    {1, 70, 2, 2, 128},  {1, 64, 3, 1, 64},  // cuda: the widest head, one whole tile
    {1, 130, 6, 2, 64},  {1, 130, 6, 2, 128},  // cuda: a third tile of 2 rows, GQA 3
    {2, 37, 6, 2, 16},   // onednn: groups of 3, softmax rows with vector tails
};
static const int64_t swiglu_n[] = {1, 1027, 1001, 40001};  // onednn: parallel chunks and a tail
static const struct { int64_t R, C; } elementwise_shapes[] = {
    {1, 1}, {9, 131}, {131, 70}, {1, 50001},  // cuda: 4 sumsq blocks
    {131, 307}};  // onednn: parallel chunks and a tail
static const struct {
  int64_t N, V, Vu;  // Vu: the used vocabulary, the rest padding
  bool teacher;      // a full teacher (k == 0)
  int64_t k, n_norm;
  bool every_divergence;  // else forward KL alone
  bool device_only;
} loss_shapes[] = {
    {1, 2, 1, false, 0, 0, false, false},
    {13, 37, 36, false, 0, 0, false, false},
    {13, 37, 36, true, 0, 0, true, false},
    {13, 37, 36, true, 0, 40, false, false},
    {9, 29, 28, false, 5, 0, false, false},
    {9, 29, 28, false, 5, 17, true, false},
    {9, 29, 28, false, 28, 0, true, false},  // k = vocab_used: the exact divergence
    {9, 300, 290, false, 0, 0, false, false},  // cuda: rows past a block of 256 threads
    {9, 300, 290, false, 0, 20, false, false},  // chunked-loss normalisation: 20 rows, not 7
    {9, 300, 290, true, 0, 0, true, false},
    {9, 300, 290, false, 7, 0, false, false},
    {9, 300, 290, false, 7, 11, true, false},
    {9, 300, 290, false, 290, 0, true, false},
    {7, 1001, 1001, false, 0, 0, false, false},  // onednn: a vector body and a tail
    {7, 1001, 1001, true, 0, 0, true, false},
    {7, 1001, 1000, false, 16, 0, true, false},
    {3, 151936, 151669, false, 64, 0, true, true},  // cuda: Qwen3's vocabulary, a top-64 bitmask
};
static const struct {
  int64_t n;
  bool decay;
} adamw_shapes[] = {{1, true}, {999, false}, {50001, false}, {50001, true}};
static const int64_t widen_n[] = {7, 1000};
static const struct {
  int64_t R, C;
  bool with_dgamma;
} channel_scale_shapes[] = {
    {1, 1, true}, {130, 67, true},  // three row blocks of the dgamma reduction
    {7, 19, false}, {131, 70, true}, {131, 70, false}};
static const struct { int64_t R, V, ld, k; } topk_shapes[] = {
    {13, 1000, 1003, 40}, {2, 37, 37, 37}, {2, 151936, 151936, 64}};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void run_memory(const target *t) {
  for (size_t i = 0; i < COUNT(memory_n); i++) test_memory(t, memory_n[i]);
}
static void run_matmul(const target *t) {
  for (size_t s = 0; s < COUNT(matmul_shapes); s++)
    for (int tr = 0; tr < 4; tr++)
      for (size_t b = 0; b < COUNT(matmul_betas); b++)
        test_matmul(t, tr & 1, tr >> 1, matmul_shapes[s].M, matmul_shapes[s].N, matmul_shapes[s].K,
                    matmul_betas[b]);
}
static void run_linear(const target *t) {
  for (size_t i = 0; i < COUNT(linear_shapes); i++)
    test_linear(t, linear_shapes[i].n, linear_shapes[i].out, linear_shapes[i].N, linear_shapes[i].in,
                linear_shapes[i].beta_dx, linear_shapes[i].frozen);
  if (t->be->bf16_weights) {
    test_copy(t, false, 37, 29, 33);
    test_copy(t, true, 37, 29, 33);
  }
}
static void run_embedding(const target *t) {
  for (size_t i = 0; i < COUNT(embedding_shapes); i++)
    test_embedding(t, embedding_shapes[i].N, embedding_shapes[i].V, embedding_shapes[i].D);
}
static void run_rmsnorm(const target *t) {
  for (size_t i = 0; i < COUNT(rmsnorm_shapes); i++)
    if (!rmsnorm_shapes[i].device_only || !t->be->host_memory)
      test_rmsnorm(t, rmsnorm_shapes[i].R, rmsnorm_shapes[i].C, rmsnorm_shapes[i].with_dw);
}
static void run_rope(const target *t) {
  for (size_t i = 0; i < COUNT(rope_shapes); i++)
    test_rope(t, rope_shapes[i].B, rope_shapes[i].T, rope_shapes[i].nh, rope_shapes[i].hd,
              rope_shapes[i].theta);
}
static void run_attention(const target *t) {
  for (size_t i = 0; i < COUNT(attention_shapes); i++) test_attention(t, attention_shapes[i]);
}
static void run_swiglu(const target *t) {
  for (size_t i = 0; i < COUNT(swiglu_n); i++) test_swiglu(t, swiglu_n[i]);
}
static void run_elementwise(const target *t) {
  for (size_t i = 0; i < COUNT(elementwise_shapes); i++)
    test_elementwise(t, elementwise_shapes[i].R, elementwise_shapes[i].C);
}
static void run_loss(const target *t) {
  for (size_t i = 0; i < COUNT(loss_shapes); i++) {
    if (loss_shapes[i].device_only && t->be->host_memory) continue;
    int last = loss_shapes[i].every_divergence ? NG_DIV_LAST : NG_DIV_FORWARD_KL;
    for (int dv = NG_DIV_FORWARD_KL; dv <= last; dv++)
      test_loss(t, loss_shapes[i].N, loss_shapes[i].V, loss_shapes[i].Vu, loss_shapes[i].teacher,
                loss_shapes[i].k, loss_shapes[i].n_norm, (ng_divergence)dv);
  }
  test_loss_chunks(t, 11, 23, 4);
  test_loss_chunks(t, 11, 1001, 5);  // onednn: the vector body and tail row by row
}
static void run_adamw(const target *t) {
  for (size_t i = 0; i < COUNT(adamw_shapes); i++) test_adamw(t, adamw_shapes[i].n, adamw_shapes[i].decay);
}
static void run_widen_bf16(const target *t) {
  for (size_t i = 0; i < COUNT(widen_n); i++) test_widen_bf16(t, widen_n[i]);
}
static void run_channel_scale(const target *t) {
  for (size_t i = 0; i < COUNT(channel_scale_shapes); i++)
    test_channel_scale(t, channel_scale_shapes[i].R, channel_scale_shapes[i].C,
                       channel_scale_shapes[i].with_dgamma);
}
static void run_topk(const target *t) {
  for (size_t i = 0; i < COUNT(topk_shapes); i++)
    test_topk(t, topk_shapes[i].R, topk_shapes[i].V, topk_shapes[i].ld, topk_shapes[i].k);
}
static void run_kernels(const target *t) {
  const char *k = t->be->kernels(t->be);
  char name[256];
  snprintf(name, sizeof name, "%s: names its matmul kernels: %.100s", t->label, k ? k : "NULL");
  CHECK(k && k[0], name, "no description");
}

// The ops by name, in the order they run.
static const struct {
  const char *name;
  void (*run)(const target *t);
} ops[] = {
    {"memory", run_memory},   {"matmul", run_matmul},         {"linear", run_linear},
    {"embedding", run_embedding},
    {"rmsnorm", run_rmsnorm}, {"rope", run_rope},             {"attention", run_attention},
    {"swiglu", run_swiglu},   {"elementwise", run_elementwise}, {"loss", run_loss},
    {"adamw", run_adamw},     {"widen_bf16", run_widen_bf16}, {"channel_scale", run_channel_scale},
    {"topk", run_topk},       {"weight_copies", run_weight_copies}, {"kernels", run_kernels},
};

// The command line's ops (none: every one).
static int n_asked;
static char **asked;

// Every op of the list on backend `name` in each precision it opens in.
static void test_backend(const char *name) {
  for (int p = 0; p < 2; p++) {
    ng_precision prec = p ? NG_PREC_BF16 : NG_PREC_FP32;
    target t = {ng_backend_open(name, prec), ng_backend_cpu(), ""};
    snprintf(t.label, sizeof t.label, "%s %s", name, ng_precision_name(prec));
    if (!t.be) {  // a precision this backend or this machine does not run
      // Where a GPU is required (tools/gpu_check.sh), cuda must open.
      if (strcmp(name, "cuda") == 0 && getenv("NG_REQUIRE_GPU"))
        CHECK(false, "cuda opens (NG_REQUIRE_GPU is set)", "%s", ng_error());
      else
        printf("skip %s: %s\n", p ? t.label : name, ng_error());
      if (p == 0) return;  // no fp32 (no device): the backend cannot run here at all
      continue;
    }
    for (size_t o = 0; o < COUNT(ops); o++)
      if (ng_test_wanted(asked, n_asked, ops[o].name)) ops[o].run(&t);
    ng_backend_close(t.be);
  }
}

// "cpu, onednn" -> each name in turn, or the one asked for.
int main(int argc, char **argv) {
  ng_rng_seed(&rng, 7);
  const char *only = argc > 1 ? argv[1] : NULL;
  n_asked = argc > 2 ? argc - 2 : 0, asked = argv + 2;
  for (int i = 0; i < n_asked; i++) {
    bool known = false;
    for (size_t o = 0; o < COUNT(ops); o++) known |= strcmp(asked[i], ops[o].name) == 0;
    if (!known) {
      fprintf(stderr, "test_backends: unknown op \"%s\"\n", asked[i]);
      return 2;
    }
  }
  char *names = ng_xstrdup(ng_backend_names()), *save = NULL;
  bool found = false;
  for (char *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
    if (only && strcmp(name, only) != 0) continue;
    found = true;
    test_backend(name);
  }
  free(names);
  if (!found) {
    fprintf(stderr, "test_backends: this build has no backend \"%s\" (%s)\n", only, ng_backend_names());
    return 2;
  }
  return TEST_RESULT();
}
