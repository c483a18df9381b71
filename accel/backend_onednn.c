// normgrow: the oneDNN backend, on the CPU.
//
// Buffers are host memory, as in the CPU backend, whose ops it shares: its
// table starts as a copy of the CPU's and replaces the matmul, attention, and
// the loss, norms, RoPE, SwiGLU, elementwise ops and AdamW (vectorised:
// cpu_vec.h; the loss and norms stay fp32 in bf16 mode).
// Matmuls run as oneDNN matmul primitives, created once per shape
// (transposes, M, N, K, beta) and kept in a cache.
// - fp32: f32 inputs with fpmath mode strict, so that no environment variable
//   (ONEDNN_DEFAULT_FPMATH_MODE) can lower the precision inside.
// - bf16: both inputs are converted to bf16 on the fly at every matmul (the
//   model keeps only its fp32 master weights: there are no bf16 copies to
//   refresh after an optimizer step), multiplied with fp32 accumulation into
//   the fp32 output.
// Attention's products run as batched matmuls over heads (see "attention"
// below), in the backend's precision.
#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/backend_onednn.h"
#include "normgrow/common.h"

#include "cpu_vec.h"

// A failing oneDNN call is an environment or programming error.
#define DNNL_OK(call)                                                          \
  do {                                                                         \
    dnnl_status_t st_ = (call);                                                \
    if (st_ != dnnl_success) ng_abort_at(__FILE__, __LINE__, dnnl_status2str(st_)); \
  } while (0)

// A matmul primitive and its memory objects (data handles set per call).
typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c;
} mm_exec;

// One cached 2-D matmul primitive.
typedef struct {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  mm_exec x;
} mm_prim;

// The batched matmuls of one attention shape (see "attention" below), for
// s.B the batch rows of one slice.
typedef struct {
  ng_attn_shape s;
  mm_exec scores, values, grads;
} att_prims;

// A growable host buffer.
typedef struct {
  void *p;
  size_t cap;  // bytes
} scratch;

// The attention's buffers, per batch slice: heads-major copies of its
// inputs, scores and their gradients, products before the layout change.
enum { A_Q, A_K, A_V, A_DO, A_S, A_DP, A_PB, A_DSB, A_OQ, A_OK, A_OV, A_COUNT };

typedef struct {
  ng_backend be;  // first member: the backend is the context
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  mm_prim *prims;
  int n, cap;
  att_prims *att;
  int n_att, cap_att;
  scratch abuf, bbuf;        // bf16 inputs of the current matmul
  scratch att_buf[A_COUNT];  // the attention's buffers
  // The distinct oneDNN implementations chosen so far, comma-separated: of the
  // 2-D matmuls, of attention's products; and the description kernels() gives.
  char mm_impl[128], att_impl[128], kernels[512];
} onednn;

static onednn *ctx_of(ng_backend *be) { return (onednn *)be->ctx; }

// A 2-D plain memory descriptor [rows, cols], stored transposed ([cols, rows]) when t.
static dnnl_memory_desc_t plain_md(int64_t rows, int64_t cols, bool t, dnnl_data_type_t dt) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {rows, cols}, strides = {t ? 1 : cols, t ? rows : 1};
  DNNL_OK(dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides));
  return md;
}

// Adds impl to the list (128 chars) unless it is there.
static void note_kernel(char *list, const char *impl) {
  if (strstr(list, impl)) return;
  size_t n = strlen(list);
  snprintf(list + n, 128 - n, "%s%s", n ? ", " : "", impl);
}

// A matmul primitive C = A B over the descriptors, fpmath mode strict, with
// C = A B + beta C when beta != 0; its implementation noted in `impls`.
static mm_exec make_exec(onednn *o, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b,
                         const dnnl_memory_desc_t *c, float beta, char *impls) {
  dnnl_matmul_desc_t desc;
  DNNL_OK(dnnl_matmul_desc_init(&desc, a, b, NULL, c));
  dnnl_primitive_attr_t attr;
  DNNL_OK(dnnl_primitive_attr_create(&attr));
  DNNL_OK(dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_strict));
  if (beta != 0.0f) {
    dnnl_post_ops_t po;
    DNNL_OK(dnnl_post_ops_create(&po));
    DNNL_OK(dnnl_post_ops_append_sum(po, beta));
    DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
    DNNL_OK(dnnl_post_ops_destroy(po));
  }
  dnnl_primitive_desc_t pd;
  DNNL_OK(dnnl_primitive_desc_create(&pd, &desc, attr, o->engine, NULL));
  DNNL_OK(dnnl_primitive_attr_destroy(attr));
  const char *impl = NULL;
  DNNL_OK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
  note_kernel(impls, impl);
  mm_exec x;
  DNNL_OK(dnnl_primitive_create(&x.prim, pd));
  DNNL_OK(dnnl_memory_create(&x.a, a, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&x.b, b, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&x.c, c, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_primitive_desc_destroy(pd));
  return x;
}

static void run_exec(onednn *o, const mm_exec *x, const void *a, const void *b, float *c) {
  DNNL_OK(dnnl_memory_set_data_handle(x->a, (void *)a));
  DNNL_OK(dnnl_memory_set_data_handle(x->b, (void *)b));
  DNNL_OK(dnnl_memory_set_data_handle(x->c, c));
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, x->a}, {DNNL_ARG_WEIGHTS, x->b}, {DNNL_ARG_DST, x->c}};
  DNNL_OK(dnnl_primitive_execute(x->prim, o->stream, 3, args));
  DNNL_OK(dnnl_stream_wait(o->stream));
}

static void free_exec(mm_exec *x) {
  dnnl_primitive_destroy(x->prim);
  dnnl_memory_destroy(x->a);
  dnnl_memory_destroy(x->b);
  dnnl_memory_destroy(x->c);
}

// C [M, N] = op(A) [M, K] op(B) [K, N] + beta C, in the backend's precision.
static mm_prim *make_prim(onednn *o, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          float beta) {
  dnnl_data_type_t in = o->be.precision == NG_PREC_BF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a = plain_md(M, K, ta, in), b = plain_md(K, N, tb, in),
                     c = plain_md(M, N, false, dnnl_f32);
  if (o->n == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 16;
    o->prims = ng_xrealloc(o->prims, (size_t)o->cap * sizeof *o->prims);
  }
  mm_prim *p = &o->prims[o->n++];
  *p = (mm_prim){ta, tb, M, N, K, beta, make_exec(o, &a, &b, &c, beta, o->mm_impl)};
  return p;
}

static mm_prim *find_prim(onednn *o, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          float beta) {
  for (int i = 0; i < o->n; i++) {
    mm_prim *p = &o->prims[i];
    if (p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->beta == beta)
      return p;
  }
  return make_prim(o, ta, tb, M, N, K, beta);
}

// buf grown to at least `bytes`; its contents are not kept.
static void *scratch_get(scratch *buf, size_t bytes) {
  if (bytes > buf->cap) {
    free(buf->p);
    buf->cap = bytes;
    buf->p = ng_xmalloc(bytes);
  }
  return buf->p;
}

// Elements per chunk of the conversions to bf16: at most this many, ng_to_bf16
// converts without entering OpenMP.
#define BF16_CHUNK 16384

// a [na], b [nb] = A, B rounded to bf16, in one parallel region over chunks of
// both (a matmul's two inputs: one fork and join, not two).
static void to_bf16_pair(const float *A, int64_t na, const float *B, int64_t nb, uint16_t *a,
                         uint16_t *b) {
  int64_t ca = (na + BF16_CHUNK - 1) / BF16_CHUNK, cb = (nb + BF16_CHUNK - 1) / BF16_CHUNK;
#pragma omp parallel for schedule(static) if (ca + cb > 1)
  for (int64_t c = 0; c < ca + cb; c++) {
    bool in_a = c < ca;
    int64_t i = (in_a ? c : c - ca) * BF16_CHUNK, n = in_a ? na : nb;
    int64_t e = i + BF16_CHUNK < n ? i + BF16_CHUNK : n;
    ng_to_bf16((in_a ? A : B) + i, e - i, (in_a ? a : b) + i);
  }
}

// C [M, N] = op(A) op(B) + beta * C (ng_backend.matmul)
static void onednn_matmul(ng_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          const float *A, const float *B, float beta, float *C) {
  onednn *o = ctx_of(be);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // no products: C = beta C, and beta 0 does not read C
    if (beta == 0.0f) be->zero(be, C, (size_t)(M * N) * sizeof(float));
    else be->scale(be, C, beta, M * N, C);
    return;
  }
  const void *a = A, *b = B;
  if (be->precision == NG_PREC_BF16) {
    uint16_t *ha = scratch_get(&o->abuf, (size_t)(M * K) * sizeof(uint16_t));
    uint16_t *hb = scratch_get(&o->bbuf, (size_t)(K * N) * sizeof(uint16_t));
    to_bf16_pair(A, M * K, B, K * N, ha, hb);
    a = ha;
    b = hb;
  }
  run_exec(o, &find_prim(o, ta, tb, M, N, K, beta)->x, a, b, C);
}

// ---------------------------------------------------------------- attention
//
// Attention as batched matmuls over all heads of a batch slice, with
// G = H / KV query heads per kv head (a kv head is broadcast over its group):
//   forward:  S = Q K^T;  P = causal softmax(scale S), lse saved;  O = P V
//   backward: S = Q K^T;  P = exp(scale S - lse);  dP = dO V^T;
//             dS = P * (dP - rowsum(dO * O));  dV = P^T dO;
//             dQ = scale dS K;  dK = scale dS^T Q
// The matmul inputs (Q, K, V, dO, P, dS) are in heads-major layout ([b,
// head, t, hd], so that a kv head's G query heads are one [G*T, hd] block),
// in bf16 in bf16 mode (P and dS as bf16 copies of the fp32 rows), fp32
// otherwise (P and dS the score rows themselves); products accumulate in
// fp32 (oneDNN's fpmath mode strict in fp32 mode) and change layout back to
// [B, T, heads, hd] at the end. Scores are whole [T, T] blocks, the causal
// mask applied in the softmax (P = 0 above the diagonal, so dS = 0 there).
// Three primitives serve the five products:
//   scores [bs, KV, G, T, T] = X [bs, KV, G, T, hd] Y^T, Y [bs, KV, 1, T, hd]
//       (S = Q K^T, dP = dO V^T);
//   values [bs, KV, G, T, hd] = A [bs, KV, G, T, T] Y, Y [bs, KV, 1, T, hd]
//       (O = P V, dQ = dS K);
//   grads  [bs, KV, T, hd] = A^T [bs, KV, T, G*T] X [bs, KV, G*T, hd]
//       (dV = P^T dO, dK = dS^T Q: the sum over the group is the G*T reduction).

// The most scores (floats, 8 MiB) one batch slice holds: batches are
// processed in slices of as many [H, T, T] blocks as fit, at least one. At
// the bench's shape (two slices of four batch rows) measured on one thread
// 15% faster than one whole-batch slice (the scores stay nearer in cache);
// smaller slices gain a little more there but each slice is another round
// of parallel regions, which costs on a loaded machine.
#define ATT_SCORES_MAX ((int64_t)1 << 21)

static int64_t att_slice(ng_attn_shape s) {
  int64_t per = s.H * s.T * s.T, bs = ATT_SCORES_MAX / per;
  if (bs < 1) bs = 1;
  return bs < s.B ? bs : s.B;
}

// Dense row-major strides of dims [n].
static void dense_strides(int n, const dnnl_dims_t d, dnnl_dims_t st) {
  st[n - 1] = 1;
  for (int i = n - 2; i >= 0; i--) st[i] = st[i + 1] * d[i + 1];
}

static dnnl_memory_desc_t md_of(int n, const dnnl_dims_t d, const dnnl_dims_t st,
                                dnnl_data_type_t dt) {
  dnnl_memory_desc_t md;
  DNNL_OK(dnnl_memory_desc_init_by_strides(&md, n, d, dt, st));
  return md;
}

static dnnl_memory_desc_t dense_md(int n, const dnnl_dims_t d, dnnl_data_type_t dt) {
  dnnl_dims_t st;
  dense_strides(n, d, st);
  return md_of(n, d, st, dt);
}

// The backend's matmul input type and its size in bytes.
static dnnl_data_type_t in_type(const onednn *o) {
  return o->be.precision == NG_PREC_BF16 ? dnnl_bf16 : dnnl_f32;
}
static size_t in_size(const onednn *o) { return o->be.precision == NG_PREC_BF16 ? 2 : 4; }

static att_prims make_att(onednn *o, ng_attn_shape s) {
  int64_t B = s.B, KV = s.KV, G = s.H / s.KV, T = s.T, hd = s.hd;
  att_prims p = {.s = s};
  dnnl_data_type_t in = in_type(o);
  dnnl_dims_t x = {B, KV, G, T, hd}, y = {B, KV, 1, T, hd}, yt = {B, KV, 1, hd, T},
              yts = {KV * T * hd, T * hd, T * hd, 1, hd}, sc = {B, KV, G, T, T};
  dnnl_memory_desc_t mx = dense_md(5, x, in), my = dense_md(5, y, in),
                     myt = md_of(5, yt, yts, in), ms = dense_md(5, sc, dnnl_f32),
                     msb = dense_md(5, sc, in), mo = dense_md(5, x, dnnl_f32);
  p.scores = make_exec(o, &mx, &myt, &ms, 0.0f, o->att_impl);
  p.values = make_exec(o, &msb, &my, &mo, 0.0f, o->att_impl);
  dnnl_dims_t at = {B, KV, T, G * T}, ats = {KV * G * T * T, G * T * T, 1, T},
              xg = {B, KV, G * T, hd}, g = {B, KV, T, hd};
  dnnl_memory_desc_t mat = md_of(4, at, ats, in), mxg = dense_md(4, xg, in),
                     mg = dense_md(4, g, dnnl_f32);
  p.grads = make_exec(o, &mat, &mxg, &mg, 0.0f, o->att_impl);
  return p;
}

static const att_prims *find_att(onednn *o, ng_attn_shape s) {
  for (int i = 0; i < o->n_att; i++) {
    ng_attn_shape t = o->att[i].s;
    if (t.B == s.B && t.T == s.T && t.H == s.H && t.KV == s.KV && t.hd == s.hd) return &o->att[i];
  }
  if (o->n_att == o->cap_att) {
    o->cap_att = o->cap_att ? 2 * o->cap_att : 4;
    o->att = ng_xrealloc(o->att, (size_t)o->cap_att * sizeof *o->att);
  }
  o->att[o->n_att] = make_att(o, s);
  return &o->att[o->n_att++];
}

// y [B, nh, T, hd] = x [B, T, nh, hd], rounded to bf16 (bf16) or fp32 copies.
static void to_heads(const float *x, int64_t B, int64_t T, int64_t nh, int64_t hd, bool bf16,
                     void *y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * nh * T; r++) {
    int64_t b = r / (nh * T), h = r / T % nh, t = r % T;
    const float *xr = x + ((b * T + t) * nh + h) * hd;
    if (bf16) ng_to_bf16(xr, hd, (uint16_t *)y + r * hd);
    else memcpy((float *)y + r * hd, xr, (size_t)hd * sizeof(float));
  }
}

// x [B, T, nh, hd] = scale * y [B, nh, T, hd].
static void from_heads(const float *y, float scale, int64_t B, int64_t T, int64_t nh,
                       int64_t hd, float *x) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * nh * T; r++) {
    int64_t b = r / (nh * T), h = r / T % nh, t = r % T;
    float *xr = x + ((b * T + t) * nh + h) * hd;
    const float *yr = y + r * hd;
    for (int64_t c = 0; c < hd; c++) xr[c] = scale * yr[c];
  }
}

static float att_scale(ng_attn_shape s) { return (float)(1.0 / sqrt((double)s.hd)); }

// The causal softmax of the score rows S [B*H*T, T] (row r: query i = r % T),
// in place: P = exp(scale S - lse) for key j <= i, else 0; lse [B*H*T]; Pb =
// P in bf16 (NULL: fp32 mode, P stays in S).
static void att_softmax(ng_attn_shape s, float *S, float *lse, uint16_t *Pb) {
  float scale = att_scale(s);
  int64_t R = s.B * s.H * s.T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++) {
    int64_t i = r % s.T;
    float *row = S + r * s.T;
    lse[r] = ng_vec_softmax_row(row, i + 1, scale);
    memset(row + i + 1, 0, (size_t)(s.T - i - 1) * sizeof(float));
    if (Pb) ng_to_bf16(row, s.T, Pb + r * s.T);
  }
}

// The backward's row steps, in place: S [B*H*T, T] -> P = exp(scale S - lse)
// (causal), then dP [B*H*T, T] -> dS = P * (dP - rowsum(dO * O)); Pb, dSb =
// P, dS in bf16 (NULL: fp32 mode). out, dout [B, T, H, hd].
static void att_softmax_backward(ng_attn_shape s, float *S, const float *lse, const float *out,
                                 const float *dout, float *dP, uint16_t *Pb, uint16_t *dSb) {
  float scale = att_scale(s);
  int64_t R = s.B * s.H * s.T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; r++) {
    int64_t b = r / (s.H * s.T), h = r / s.T % s.H, i = r % s.T;
    size_t off = (size_t)((b * s.T + i) * s.H + h) * s.hd;
    double di = 0.0;
    for (int64_t c = 0; c < s.hd; c++) di += (double)out[off + c] * dout[off + c];
    float *pr = S + r * s.T, *dp = dP + r * s.T;
    ng_vec_softmax_row_given(pr, i + 1, scale, lse[r]);
    memset(pr + i + 1, 0, (size_t)(s.T - i - 1) * sizeof(float));
    ng_vec_softmax_grad_row(pr, (float)di, s.T, dp);
    if (Pb) ng_to_bf16(pr, s.T, Pb + r * s.T);
    if (dSb) ng_to_bf16(dp, s.T, dSb + r * s.T);
  }
}

// The slice's buffer k of n elements of `size` bytes.
static void *att_buf(onednn *o, int k, int64_t n, size_t size) {
  return scratch_get(&o->att_buf[k], (size_t)n * size);
}

// The bf16 copy of scores [n] (buffer k), or NULL in fp32 mode.
static uint16_t *bf16_scores(onednn *o, int k, int64_t n) {
  return o->be.precision == NG_PREC_BF16 ? att_buf(o, k, n, 2) : NULL;
}

// One batch slice of the forward (s.B = its batch rows).
static void att_forward_slice(onednn *o, ng_attn_shape s, const float *q, const float *k,
                              const float *v, float *out, float *lse) {
  const att_prims *p = find_att(o, s);
  int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd, ns = s.B * s.H * s.T * s.T;
  bool bf16 = o->be.precision == NG_PREC_BF16;
  size_t es = in_size(o);
  void *Q = att_buf(o, A_Q, nq, es), *K = att_buf(o, A_K, nk, es), *V = att_buf(o, A_V, nk, es);
  uint16_t *Pb = bf16_scores(o, A_PB, ns);
  float *S = att_buf(o, A_S, ns, 4), *O = att_buf(o, A_OQ, nq, 4);
  to_heads(q, s.B, s.T, s.H, s.hd, bf16, Q);
  to_heads(k, s.B, s.T, s.KV, s.hd, bf16, K);
  to_heads(v, s.B, s.T, s.KV, s.hd, bf16, V);
  run_exec(o, &p->scores, Q, K, S);  // S [bs, H, T, T] = Q K^T
  att_softmax(s, S, lse, Pb);
  run_exec(o, &p->values, Pb ? (void *)Pb : S, V, O);  // O [bs, H, T, hd] = P V
  from_heads(O, 1.0f, s.B, s.T, s.H, s.hd, out);
}

// One batch slice of the backward.
static void att_backward_slice(onednn *o, ng_attn_shape s, const float *q, const float *k,
                               const float *v, const float *out, const float *lse,
                               const float *dout, float *dq, float *dk, float *dv) {
  const att_prims *p = find_att(o, s);
  int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.KV * s.hd, ns = s.B * s.H * s.T * s.T;
  bool bf16 = o->be.precision == NG_PREC_BF16;
  size_t es = in_size(o);
  void *Q = att_buf(o, A_Q, nq, es), *K = att_buf(o, A_K, nk, es), *V = att_buf(o, A_V, nk, es);
  void *dO = att_buf(o, A_DO, nq, es);
  uint16_t *Pb = bf16_scores(o, A_PB, ns), *dSb = bf16_scores(o, A_DSB, ns);
  float *S = att_buf(o, A_S, ns, 4), *dP = att_buf(o, A_DP, ns, 4);
  float *OQ = att_buf(o, A_OQ, nq, 4), *OK = att_buf(o, A_OK, nk, 4), *OV = att_buf(o, A_OV, nk, 4);
  const void *P_in = Pb ? (void *)Pb : S, *dS_in = dSb ? (void *)dSb : dP;
  float scale = att_scale(s);
  to_heads(q, s.B, s.T, s.H, s.hd, bf16, Q);
  to_heads(k, s.B, s.T, s.KV, s.hd, bf16, K);
  to_heads(v, s.B, s.T, s.KV, s.hd, bf16, V);
  to_heads(dout, s.B, s.T, s.H, s.hd, bf16, dO);
  run_exec(o, &p->scores, Q, K, S);    // S = Q K^T
  run_exec(o, &p->scores, dO, V, dP);  // dP = dO V^T
  att_softmax_backward(s, S, lse, out, dout, dP, Pb, dSb);
  run_exec(o, &p->grads, P_in, dO, OV);   // dV [bs, KV, T, hd] = P^T dO
  run_exec(o, &p->grads, dS_in, Q, OK);   // dK^T / scale = dS^T Q
  run_exec(o, &p->values, dS_in, K, OQ);  // dQ / scale = dS K
  from_heads(OV, 1.0f, s.B, s.T, s.KV, s.hd, dv);
  from_heads(OK, scale, s.B, s.T, s.KV, s.hd, dk);
  from_heads(OQ, scale, s.B, s.T, s.H, s.hd, dq);
}

// The slice of batch rows [b0, b0 + s.B) of attention shape full.
static size_t q_off(ng_attn_shape full, int64_t b0) { return (size_t)(b0 * full.T * full.H * full.hd); }
static size_t kv_off(ng_attn_shape full, int64_t b0) { return (size_t)(b0 * full.T * full.KV * full.hd); }

static void onednn_attention_forward(ng_backend *be, ng_attn_shape s, const float *q,
                                     const float *k, const float *v, float *out, float *lse) {
  int64_t bs = att_slice(s);
  for (int64_t b0 = 0; b0 < s.B; b0 += bs) {
    ng_attn_shape sl = s;
    sl.B = s.B - b0 < bs ? s.B - b0 : bs;
    att_forward_slice(ctx_of(be), sl, q + q_off(s, b0), k + kv_off(s, b0), v + kv_off(s, b0),
                      out + q_off(s, b0), lse + b0 * s.H * s.T);
  }
}

static void onednn_attention_backward(ng_backend *be, ng_attn_shape s, const float *q,
                                      const float *k, const float *v, const float *out,
                                      const float *lse, const float *dout, float *dq, float *dk,
                                      float *dv) {
  int64_t bs = att_slice(s);
  for (int64_t b0 = 0; b0 < s.B; b0 += bs) {
    ng_attn_shape sl = s;
    sl.B = s.B - b0 < bs ? s.B - b0 : bs;
    size_t oq = q_off(s, b0), ok = kv_off(s, b0);
    att_backward_slice(ctx_of(be), sl, q + oq, k + ok, v + ok, out + oq, lse + b0 * s.H * s.T,
                       dout + oq, dq + oq, dk + ok, dv + ok);
  }
}

static void onednn_synchronize(ng_backend *be) { DNNL_OK(dnnl_stream_wait(ctx_of(be)->stream)); }

static void onednn_destroy(ng_backend *be) {
  onednn *o = ctx_of(be);
  for (int i = 0; i < o->n; i++) free_exec(&o->prims[i].x);
  for (int i = 0; i < o->n_att; i++) {
    free_exec(&o->att[i].scores);
    free_exec(&o->att[i].values);
    free_exec(&o->att[i].grads);
  }
  free(o->prims);
  free(o->att);
  free(o->abuf.p);
  free(o->bbuf.p);
  for (int k = 0; k < A_COUNT; k++) free(o->att_buf[k].p);
  dnnl_stream_destroy(o->stream);
  dnnl_engine_destroy(o->engine);
  free(o);
}

// The kernel family of each op, as run so far: "matmuls: oneDNN
// brg:avx512_core_bf16; attention: ...; loss, ...: AVX-512".
static const char *onednn_kernels(ng_backend *be) {
  onednn *o = ctx_of(be);
  snprintf(o->kernels, sizeof o->kernels,
           "matmuls: oneDNN %s; attention: oneDNN %s products, %s softmax rows; loss, RMSNorm, "
           "RoPE, SwiGLU, add/scale, AdamW: %s",
           o->mm_impl[0] ? o->mm_impl : "(none yet)", o->att_impl[0] ? o->att_impl : "(none yet)",
           ng_vec_family(), ng_vec_family());
  return o->kernels;
}

// bf16 runs on oneDNN's AVX-512 BF16 or AMX kernels only.
static bool has_bf16_kernels(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
         (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

ng_backend *ng_backend_onednn_open(ng_precision p) {
  if (p == NG_PREC_BF16 && !has_bf16_kernels()) {
    ng_fail("backend \"onednn\": bf16 needs a CPU with AVX-512 BF16 or AMX; this one has "
            "neither (use --precision fp32)");
    return NULL;
  }
  onednn *o = ng_xcalloc(1, sizeof *o);
  o->be = *ng_backend_cpu();
  o->be.name = "onednn";
  o->be.precision = p;
  o->be.ctx = o;
  o->be.synchronize = onednn_synchronize;
  o->be.destroy = onednn_destroy;
  o->be.kernels = onednn_kernels;
  o->be.matmul = onednn_matmul;
  o->be.attention_forward = onednn_attention_forward;
  o->be.attention_backward = onednn_attention_backward;
  // The loss, norms, RoPE, SwiGLU, elementwise ops, sum of squares and AdamW
  // vectorised (cpu_vec.h), in both precisions.
  o->be.rmsnorm_forward = ng_vec_rmsnorm_forward;
  o->be.rmsnorm_backward = ng_vec_rmsnorm_backward;
  o->be.rope_forward = ng_vec_rope_forward;
  o->be.rope_backward = ng_vec_rope_backward;
  o->be.swiglu_forward = ng_vec_swiglu_forward;
  o->be.swiglu_backward = ng_vec_swiglu_backward;
  o->be.add = ng_vec_add;
  o->be.lerp = ng_vec_lerp;
  o->be.scale = ng_vec_scale;
  o->be.sumsq = ng_vec_sumsq;
  o->be.adamw = ng_vec_adamw;
  o->be.ce_kd = ng_vec_ce_kd;
  DNNL_OK(dnnl_engine_create(&o->engine, dnnl_cpu, 0));
  DNNL_OK(dnnl_stream_create(&o->stream, o->engine, dnnl_stream_default_flags));
  return &o->be;
}

// ---------------------------------------------------------------- the bf16 ceiling

double ng_onednn_bf16_gflops(int64_t M, int64_t N, int64_t K, char *impl, size_t impl_n) {
  dnnl_engine_t eng;
  dnnl_stream_t str;
  snprintf(impl, impl_n, "none");
  if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0.0;
  dnnl_stream_create(&str, eng, dnnl_stream_default_flags);
  dnnl_memory_desc_t a, b, c;
  dnnl_dims_t ad = {M, K}, as = {K, 1}, bd = {K, N}, bs = {1, K}, cd = {M, N}, cs = {N, 1};
  dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as);
  dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_bf16, bs);
  dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs);
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  double best = 0.0;
  if (dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c) == dnnl_success &&
      dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL) == dnnl_success &&
      dnnl_primitive_create(&prim, pd) == dnnl_success) {
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    snprintf(impl, impl_n, "%s", name ? name : "?");
    uint16_t *A = ng_xcalloc((size_t)(M * K), 2), *B = ng_xcalloc((size_t)(N * K), 2);
    float *C = ng_xcalloc((size_t)(M * N), sizeof(float));
    for (int64_t i = 0; i < M * K; i++) A[i] = 0x3f80;  // 1.0
    for (int64_t i = 0; i < N * K; i++) B[i] = 0x3e80;  // 0.25
    dnnl_memory_t ma, mb, mc;
    dnnl_memory_create(&ma, &a, eng, A);
    dnnl_memory_create(&mb, &b, eng, B);
    dnnl_memory_create(&mc, &c, eng, C);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    for (int r = 0; r < 6; r++) {
      double t0 = ng_now();
      dnnl_primitive_execute(prim, str, 3, args);
      dnnl_stream_wait(str);
      double g = 2.0 * (double)M * N * K / (ng_now() - t0) / 1e9;
      if (r > 0 && g > best) best = g;
    }
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    free(A);
    free(B);
    free(C);
  }
  if (prim) dnnl_primitive_destroy(prim);
  if (pd) dnnl_primitive_desc_destroy(pd);
  dnnl_stream_destroy(str);
  dnnl_engine_destroy(eng);
  return best;
}
