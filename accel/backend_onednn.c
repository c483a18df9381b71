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
// - bf16: the inputs are converted to bf16 on the fly (the model keeps only
//   its fp32 master weights: there are no bf16 copies to refresh after an
//   optimizer step), multiplied with fp32 accumulation into the fp32 output: a
//   matmul converts both of its inputs; linear layers sharing an input
//   (ng_backend.linear_forward, linear_backward) convert x, each weight and
//   each dy once for all their matmuls.
// Attention runs per (batch row, kv head) pair on one thread each, its
// products as oneDNN matmuls over query blocks whose scores stay in cache (see
// "attention" below), in the backend's precision.
#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <omp.h>
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

// A matmul primitive and its memory objects (data handles set per call). Its
// scratchpad is the caller's (oneDNN's user mode), so that primitives of
// different threads run at once.
typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c, pad;
  size_t pad_bytes;
} mm_exec;

// One cached 2-D matmul primitive.
typedef struct {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  mm_exec x;
} mm_prim;

// The matmuls of one attention shape (see "attention" below), of one thread.
typedef struct {
  ng_attn_shape s;
  mm_exec scores, values, grads;
} att_prims;

// A growable host buffer.
typedef struct {
  void *p;
  size_t cap;  // bytes
} scratch;

// The attention's buffers, per thread: its pair's inputs gathered, a query
// block's scores and their gradients, products before they are scattered.
enum { A_Q, A_K, A_V, A_DO, A_S, A_DP, A_PB, A_DSB, A_OQ, A_OK, A_OV, A_COUNT };

// The bf16 inputs of a matmul (B_X: A, B_W: B) or of linear layers: x, W_i, dy_i.
enum { B_X, B_W, B_DY = B_W + NG_LINEAR_MAX, B_COUNT = B_DY + NG_LINEAR_MAX };

// What one thread of the attention owns.
typedef struct {
  dnnl_stream_t stream;
  scratch pad;  // oneDNN's scratchpad
  scratch buf[A_COUNT];
  att_prims *att;
  int n_att, cap_att;
} att_worker;

typedef struct {
  ng_backend be;  // first member: the backend is the context
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  mm_prim *prims;
  int n, cap;
  scratch bf[B_COUNT];  // bf16 inputs of the current matmul or linear layers
  scratch pad;         // the 2-D matmuls' scratchpad
  att_worker *workers;  // one per OpenMP thread
  int n_workers;
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
  DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
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
  const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  x.pad_bytes = dnnl_memory_desc_get_size(pad);
  DNNL_OK(dnnl_primitive_create(&x.prim, pd));
  DNNL_OK(dnnl_memory_create(&x.a, a, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&x.b, b, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&x.c, c, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&x.pad, pad, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_primitive_desc_destroy(pd));
  return x;
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

// C = A B by x on `stream`, with `pad` as its scratchpad.
static void run_exec(dnnl_stream_t stream, scratch *pad, const mm_exec *x, const void *a,
                     const void *b, float *c) {
  DNNL_OK(dnnl_memory_set_data_handle(x->a, (void *)a));
  DNNL_OK(dnnl_memory_set_data_handle(x->b, (void *)b));
  DNNL_OK(dnnl_memory_set_data_handle(x->c, c));
  DNNL_OK(dnnl_memory_set_data_handle(x->pad, scratch_get(pad, x->pad_bytes)));
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, x->a},
                            {DNNL_ARG_WEIGHTS, x->b},
                            {DNNL_ARG_DST, x->c},
                            {DNNL_ARG_SCRATCHPAD, x->pad}};
  DNNL_OK(dnnl_primitive_execute(x->prim, stream, 4, args));
  DNNL_OK(dnnl_stream_wait(stream));
}

static void free_exec(mm_exec *x) {
  dnnl_primitive_destroy(x->prim);
  dnnl_memory_destroy(x->a);
  dnnl_memory_destroy(x->b);
  dnnl_memory_destroy(x->c);
  dnnl_memory_destroy(x->pad);
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

// Elements per chunk of the conversions to bf16: at most this many, ng_to_bf16
// converts without entering OpenMP.
#define BF16_CHUNK 16384

// dst[i] [len[i]] = src[i] rounded to bf16 for i < n, in one parallel region over
// chunks of them all (a matmul's or a linear layer's inputs: one fork and join).
static void to_bf16_all(int n, const float *const src[], const int64_t len[],
                        uint16_t *const dst[]) {
  int64_t first[2 * NG_LINEAR_MAX + 2];  // the first chunk of each input; first[n]: the count
  first[0] = 0;
  for (int i = 0; i < n; i++) first[i + 1] = first[i] + (len[i] + BF16_CHUNK - 1) / BF16_CHUNK;
#pragma omp parallel for schedule(static) if (first[n] > 1)
  for (int64_t c = 0; c < first[n]; c++) {
    int i = 0;
    while (c >= first[i + 1]) i++;
    int64_t a = (c - first[i]) * BF16_CHUNK, e = a + BF16_CHUNK < len[i] ? a + BF16_CHUNK : len[i];
    ng_to_bf16(src[i] + a, e - a, dst[i] + a);
  }
}

// The bf16 buffer k (B_X, B_W + i, B_DY + i) of n elements.
static uint16_t *bf16_buf(onednn *o, int k, int64_t n) {
  return scratch_get(&o->bf[k], (size_t)n * sizeof(uint16_t));
}

// C [M, N] = op(A) op(B) + beta * C, A and B in the backend's input type.
static void mm_run(onednn *o, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                   const void *B, float beta, float *C) {
  run_exec(o->stream, &o->pad, &find_prim(o, ta, tb, M, N, K, beta)->x, A, B, C);
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
  if (be->precision == NG_PREC_FP32) {
    mm_run(o, ta, tb, M, N, K, A, B, beta, C);
    return;
  }
  uint16_t *a = bf16_buf(o, B_X, M * K), *b = bf16_buf(o, B_W, K * N);
  to_bf16_all(2, (const float *[]){A, B}, (int64_t[]){M * K, K * N}, (uint16_t *[]){a, b});
  mm_run(o, ta, tb, M, N, K, a, b, beta, C);
}

// The inputs of one linear call to round to bf16, at most x, each dy_i and
// each W_i, and where their roundings go.
typedef struct {
  int n;
  const float *src[2 * NG_LINEAR_MAX + 1];
  int64_t len[2 * NG_LINEAR_MAX + 1];
  uint16_t *dst[2 * NG_LINEAR_MAX + 1];
} rounding;

// dst [n]: src [n] to be rounded into it (by to_bf16_all over r).
static const uint16_t *round_into(rounding *r, const float *src, int64_t n, uint16_t *dst) {
  r->src[r->n] = src;
  r->len[r->n] = n;
  return r->dst[r->n++] = dst;
}

// src [n] in bf16: the model's copy when ready, else src's rounding (into the
// model's copy when it keeps one, else into this backend's buffer k).
static const uint16_t *operand_bf16(onednn *o, rounding *r, const float *src, int64_t n,
                                    uint16_t *copy, bool ready, int k) {
  if (copy && ready) return copy;
  return round_into(r, src, n, copy ? copy : bf16_buf(o, k, n));
}

// W_i [out_i, in] and x [N, in] of l in bf16.
static const uint16_t *weight_bf16(onednn *o, rounding *r, ng_linear l, int i, int64_t in) {
  return operand_bf16(o, r, l.W[i], l.out[i] * in, l.W_bf16[i], l.bf16_ready, B_W + i);
}
static const uint16_t *input_bf16(onednn *o, rounding *r, ng_linear l, const float *x, int64_t n) {
  return operand_bf16(o, r, x, n, l.x_bf16, l.x_ready, B_X);
}

// Linear layers sharing x (ng_backend.linear_forward): in bf16 mode x and each
// weight rounded once (either not at all when its copy is ready), then the
// same matmuls as onednn_matmul's.
static void onednn_linear_forward(ng_backend *be, ng_linear l, const float *x, int64_t N,
                                  int64_t in, float *const y[]) {
  onednn *o = ctx_of(be);
  if (be->precision == NG_PREC_FP32 || N == 0 || in == 0) {
    ng_linear_forward_matmuls(be, l, x, N, in, y);
    return;
  }
  rounding r = {0};
  const uint16_t *xb = input_bf16(o, &r, l, x, N * in), *w[NG_LINEAR_MAX];
  for (int i = 0; i < l.n; i++) w[i] = weight_bf16(o, &r, l, i, in);
  to_bf16_all(r.n, r.src, r.len, r.dst);
  for (int i = 0; i < l.n; i++)
    if (l.out[i]) mm_run(o, false, true, N, l.out[i], in, xb, w[i], 0.0f, y[i]);
}

// (ng_backend.linear_backward): in bf16 mode x, each dy_i and each weight
// rounded once (x or a weight not at all when its copy is ready), then the
// same matmuls as onednn_matmul's, in the same order.
static void onednn_linear_backward(ng_backend *be, ng_linear l, const float *x,
                                   const float *const dy[], int64_t N, int64_t in,
                                   float beta_dx, float *dx, float *const dW[]) {
  onednn *o = ctx_of(be);
  bool empty = N == 0 || in == 0;
  for (int i = 0; i < l.n; i++) empty = empty || l.out[i] == 0;
  if (be->precision == NG_PREC_FP32 || empty) {  // (an empty product: the matmuls' own rules)
    ng_linear_backward_matmuls(be, l, x, dy, N, in, beta_dx, dx, dW);
    return;
  }
  rounding r = {0};
  const uint16_t *xb = input_bf16(o, &r, l, x, N * in);
  const uint16_t *w[NG_LINEAR_MAX], *d[NG_LINEAR_MAX];
  for (int i = 0; i < l.n; i++) {
    w[i] = weight_bf16(o, &r, l, i, in);
    d[i] = round_into(&r, dy[i], N * l.out[i], bf16_buf(o, B_DY + i, N * l.out[i]));
  }
  to_bf16_all(r.n, r.src, r.len, r.dst);
  for (int i = 0; i < l.n; i++) {
    if (dW[i]) mm_run(o, true, false, l.out[i], in, N, d[i], xb, 1.0f, dW[i]);
    mm_run(o, false, false, N, in, l.out[i], d[i], w[i], i == 0 ? beta_dx : 1.0f, dx);
  }
}

// ---------------------------------------------------------------- attention
//
// Attention per (batch row, kv head) pair, one pair a task of one thread, with
// G = H / KV query heads per kv head sharing its keys and values:
//   forward:  S = Q K^T;  P = causal softmax(scale S), lse saved;  O = P V
//   backward: S = Q K^T;  P = exp(scale S - lse);  dP = dO V^T;
//             dS = P * (dP - rowsum(dO * O));  dV = P^T dO;
//             dQ = scale dS K;  dK = scale dS^T Q
// A pair's K and V ([T, hd]) are gathered once; its queries are taken in
// blocks of tq positions, all G heads of each ([tq*G, hd], row (t - t0)*G + j
// for position t and the group's head j: one contiguous G*hd run of q per
// position), so a block's scores [tq*G, T] stay in the thread's cache (at
// most ATT_BLOCK_SCORES floats). The matmul inputs (Q, K, V, dO, P, dS) are
// bf16 in bf16 mode (P and dS as bf16 copies of the fp32 rows), fp32
// otherwise (P and dS the score rows themselves); products accumulate in
// fp32. Scores span all T keys, the causal mask applied in the softmax (P = 0
// past the diagonal, so dS = 0 there); dK and dV add up over a pair's blocks
// in block order. Each thread runs its own single-threaded primitives (inside
// the parallel region oneDNN does not fork) on its own stream and scratchpad:
//   scores [tq*G, T]  = X [tq*G, hd] Y^T, Y [T, hd]    (S = Q K^T, dP = dO V^T)
//   values [tq*G, hd] = A [tq*G, T] Y                  (O = P V, dQ / scale = dS K)
//   grads  [T, hd]   += A^T X, A [tq*G, T], X [tq*G, hd] (dV = P^T dO, dK / scale = dS^T Q)

// The most scores (floats, 256 KiB) of one query block: measured at the
// bench's shape, a block in L2 is faster than whole [T, T] slices streamed
// through memory.
#define ATT_BLOCK_SCORES ((int64_t)1 << 16)

// Query positions per block: the largest divisor of T whose block of scores
// fits ATT_BLOCK_SCORES (at least 1), so that every block has one shape.
static int64_t att_block(ng_attn_shape s) {
  int64_t G = s.H / s.KV, tq = ATT_BLOCK_SCORES / (G * s.T);
  if (tq >= s.T) return s.T;
  while (tq > 1 && s.T % tq) tq--;
  return tq < 1 ? 1 : tq;
}

// The backend's matmul input type and its size in bytes.
static dnnl_data_type_t in_type(const onednn *o) {
  return o->be.precision == NG_PREC_BF16 ? dnnl_bf16 : dnnl_f32;
}
static size_t in_size(const onednn *o) { return o->be.precision == NG_PREC_BF16 ? 2 : 4; }

static att_prims make_att(onednn *o, ng_attn_shape s, int64_t tq) {
  int64_t M = tq * s.H / s.KV, T = s.T, hd = s.hd;
  dnnl_data_type_t in = in_type(o);
  att_prims p = {.s = s};
  dnnl_memory_desc_t x = plain_md(M, hd, false, in), y = plain_md(T, hd, false, in),
                     yt = plain_md(hd, T, true, in), sc = plain_md(M, T, false, dnnl_f32),
                     a = plain_md(M, T, false, in), at = plain_md(T, M, true, in),
                     o32 = plain_md(M, hd, false, dnnl_f32), g32 = plain_md(T, hd, false, dnnl_f32);
  p.scores = make_exec(o, &x, &yt, &sc, 0.0f, o->att_impl);
  p.values = make_exec(o, &a, &y, &o32, 0.0f, o->att_impl);
  p.grads = make_exec(o, &at, &x, &g32, 1.0f, o->att_impl);
  return p;
}

// The calling thread's worker (created outside the parallel region).
static att_worker *worker(onednn *o) { return &o->workers[omp_get_thread_num()]; }

// Workers for n threads: each with its own stream.
static void att_workers(onednn *o, int n) {
  if (n <= o->n_workers) return;
  o->workers = ng_xrealloc(o->workers, (size_t)n * sizeof *o->workers);
  for (int w = o->n_workers; w < n; w++) {
    o->workers[w] = (att_worker){0};
    DNNL_OK(dnnl_stream_create(&o->workers[w].stream, o->engine, dnnl_stream_default_flags));
  }
  o->n_workers = n;
}

// The worker's primitives for shape s (made on first use, by the worker's thread).
static const att_prims *find_att(onednn *o, att_worker *w, ng_attn_shape s) {
  for (int i = 0; i < w->n_att; i++) {
    ng_attn_shape t = w->att[i].s;
    if (t.B == s.B && t.T == s.T && t.H == s.H && t.KV == s.KV && t.hd == s.hd) return &w->att[i];
  }
  if (w->n_att == w->cap_att) {
    w->cap_att = w->cap_att ? 2 * w->cap_att : 4;
    w->att = ng_xrealloc(w->att, (size_t)w->cap_att * sizeof *w->att);
  }
  att_prims p;
#pragma omp critical(normgrow_onednn_att)
  p = make_att(o, s, att_block(s));
  w->att[w->n_att] = p;
  return &w->att[w->n_att++];
}

// y [n, w] = rows x + i * ld (i < n), rounded to bf16 (bf16) or fp32 copies.
static void gather_rows(const float *x, int64_t n, int64_t w, int64_t ld, bool bf16, void *y) {
  for (int64_t i = 0; i < n; i++) {
    if (bf16) ng_to_bf16(x + i * ld, w, (uint16_t *)y + i * w);
    else memcpy((float *)y + i * w, x + i * ld, (size_t)w * sizeof(float));
  }
}

// Rows x + i * ld (i < n) = scale * y [n, w].
static void scatter_rows(const float *y, float scale, int64_t n, int64_t w, int64_t ld, float *x) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t c = 0; c < w; c++) x[i * ld + c] = scale * y[i * w + c];
}

static float att_scale(ng_attn_shape s) { return (float)(1.0 / sqrt((double)s.hd)); }

// The worker's buffer k of n elements of `size` bytes.
static void *att_buf(att_worker *w, int k, int64_t n, size_t size) {
  return scratch_get(&w->buf[k], (size_t)n * size);
}

// The bf16 copy of scores [n] (buffer k), or NULL in fp32 mode.
static uint16_t *bf16_scores(const onednn *o, att_worker *w, int k, int64_t n) {
  return o->be.precision == NG_PREC_BF16 ? att_buf(w, k, n, 2) : NULL;
}

// A pair (b, g) of shape s: its first query head, and the offsets of its rows
// in q-like [B, T, H, hd], k-like [B, T, KV, hd] and lse [B, H, T] tensors.
typedef struct {
  int64_t h0;
  size_t q, k, lse;
} att_pair;

static att_pair pair_of(ng_attn_shape s, int64_t pair) {
  int64_t b = pair / s.KV, g = pair % s.KV, G = s.H / s.KV;
  return (att_pair){g * G, (size_t)(b * s.T * s.H + g * G) * s.hd,
                    (size_t)(b * s.T * s.KV + g) * s.hd, (size_t)(b * s.H + g * G) * s.T};
}

// What a pair's forward and backward share: the thread's worker and
// primitives, the block geometry, a query block's buffers, and the pair's keys
// and values gathered.
typedef struct {
  att_worker *w;
  const att_prims *p;
  int64_t G, tq, M;  // query heads per kv head, positions per block, rows per block (tq*G)
  bool bf16;
  void *Q, *K, *V;   // a block's queries [M, hd]; the pair's K, V [T, hd] (input type)
  float *S;          // a block's scores [M, T]
  uint16_t *Pb;      // P in bf16 [M, T] (NULL: fp32 mode)
} att_task;

static att_task att_begin(onednn *o, ng_attn_shape s, att_pair pr, const float *k,
                          const float *v) {
  att_task a = {.w = worker(o), .G = s.H / s.KV, .tq = att_block(s),
                .bf16 = o->be.precision == NG_PREC_BF16};
  size_t es = in_size(o);
  a.p = find_att(o, a.w, s);
  a.M = a.tq * a.G;
  a.Q = att_buf(a.w, A_Q, a.M * s.hd, es);
  a.K = att_buf(a.w, A_K, s.T * s.hd, es);
  a.V = att_buf(a.w, A_V, s.T * s.hd, es);
  a.S = att_buf(a.w, A_S, a.M * s.T, 4);
  a.Pb = bf16_scores(o, a.w, A_PB, a.M * s.T);
  gather_rows(k + pr.k, s.T, s.hd, s.KV * s.hd, a.bf16, a.K);
  gather_rows(v + pr.k, s.T, s.hd, s.KV * s.hd, a.bf16, a.V);
  return a;
}

// The forward of one pair.
static void att_forward_pair(onednn *o, ng_attn_shape s, att_pair pr, const float *q,
                             const float *k, const float *v, float *out, float *lse) {
  att_task a = att_begin(o, s, pr, k, v);
  int64_t T = s.T, ld = s.H * s.hd;
  float *O = att_buf(a.w, A_OQ, a.M * s.hd, 4), scale = att_scale(s);
  for (int64_t t0 = 0; t0 < T; t0 += a.tq) {
    gather_rows(q + pr.q + t0 * ld, a.tq, a.G * s.hd, ld, a.bf16, a.Q);
    run_exec(a.w->stream, &a.w->pad, &a.p->scores, a.Q, a.K, a.S);  // S [tq*G, T] = Q K^T
    for (int64_t r = 0; r < a.M; r++) {
      int64_t i = t0 + r / a.G, j = r % a.G;
      float *row = a.S + r * T;
      lse[pr.lse + j * T + i] = ng_vec_softmax_row(row, i + 1, scale);
      memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
      if (a.Pb) ng_to_bf16(row, T, a.Pb + r * T);
    }
    // O = P V
    run_exec(a.w->stream, &a.w->pad, &a.p->values, a.Pb ? (void *)a.Pb : a.S, a.V, O);
    scatter_rows(O, 1.0f, a.tq, a.G * s.hd, ld, out + pr.q + t0 * ld);
  }
}

// The backward's row steps of one query block (rows r = (t - t0)*G + j), in
// place: S -> P = exp(scale S - lse) (causal), dP -> dS = P * (dP -
// rowsum(dO * O)); Pb, dSb = P, dS in bf16 (NULL: fp32 mode).
static void att_rows_backward(ng_attn_shape s, att_pair pr, int64_t t0, int64_t M,
                              const float *lse, const float *out, const float *dout, float *S,
                              float *dP, uint16_t *Pb, uint16_t *dSb) {
  int64_t G = s.H / s.KV, T = s.T;
  float scale = att_scale(s);
  for (int64_t r = 0; r < M; r++) {
    int64_t i = t0 + r / G, j = r % G;
    size_t off = pr.q + (size_t)(i * s.H + j) * s.hd;
    double di = 0.0;
    for (int64_t c = 0; c < s.hd; c++) di += (double)out[off + c] * dout[off + c];
    float *p_row = S + r * T, *dp_row = dP + r * T;
    ng_vec_softmax_row_given(p_row, i + 1, scale, lse[pr.lse + j * T + i]);
    memset(p_row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
    ng_vec_softmax_grad_row(p_row, (float)di, T, dp_row);
    if (Pb) ng_to_bf16(p_row, T, Pb + r * T);
    if (dSb) ng_to_bf16(dp_row, T, dSb + r * T);
  }
}

// The backward of one pair.
static void att_backward_pair(onednn *o, ng_attn_shape s, att_pair pr, const float *q,
                              const float *k, const float *v, const float *out,
                              const float *lse, const float *dout, float *dq, float *dk,
                              float *dv) {
  att_task a = att_begin(o, s, pr, k, v);
  att_worker *w = a.w;
  int64_t T = s.T, hd = s.hd, ld = s.H * hd;
  void *dO = att_buf(w, A_DO, a.M * hd, in_size(o));
  float *dP = att_buf(w, A_DP, a.M * T, 4), *OQ = att_buf(w, A_OQ, a.M * hd, 4),
        *OK = att_buf(w, A_OK, T * hd, 4), *OV = att_buf(w, A_OV, T * hd, 4);
  uint16_t *dSb = bf16_scores(o, w, A_DSB, a.M * T);
  const void *P_in = a.Pb ? (void *)a.Pb : a.S, *dS_in = dSb ? (void *)dSb : dP;
  float scale = att_scale(s);
  memset(OK, 0, (size_t)(T * hd) * sizeof(float));
  memset(OV, 0, (size_t)(T * hd) * sizeof(float));
  for (int64_t t0 = 0; t0 < T; t0 += a.tq) {
    gather_rows(q + pr.q + t0 * ld, a.tq, a.G * hd, ld, a.bf16, a.Q);
    gather_rows(dout + pr.q + t0 * ld, a.tq, a.G * hd, ld, a.bf16, dO);
    run_exec(w->stream, &w->pad, &a.p->scores, a.Q, a.K, a.S);  // S = Q K^T
    run_exec(w->stream, &w->pad, &a.p->scores, dO, a.V, dP);    // dP = dO V^T
    att_rows_backward(s, pr, t0, a.M, lse, out, dout, a.S, dP, a.Pb, dSb);
    run_exec(w->stream, &w->pad, &a.p->grads, P_in, dO, OV);     // dV [T, hd] += P^T dO
    run_exec(w->stream, &w->pad, &a.p->grads, dS_in, a.Q, OK);   // dK / scale += dS^T Q
    run_exec(w->stream, &w->pad, &a.p->values, dS_in, a.K, OQ);  // dQ / scale = dS K
    scatter_rows(OQ, scale, a.tq, a.G * hd, ld, dq + pr.q + t0 * ld);
  }
  scatter_rows(OV, 1.0f, T, hd, s.KV * hd, dv + pr.k);
  scatter_rows(OK, scale, T, hd, s.KV * hd, dk + pr.k);
}

static void onednn_attention_forward(ng_backend *be, ng_attn_shape s, const float *q,
                                     const float *k, const float *v, float *out, float *lse) {
  onednn *o = ctx_of(be);
  att_workers(o, omp_get_max_threads());
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < s.B * s.KV; pair++)
    att_forward_pair(o, s, pair_of(s, pair), q, k, v, out, lse);
}

static void onednn_attention_backward(ng_backend *be, ng_attn_shape s, const float *q,
                                      const float *k, const float *v, const float *out,
                                      const float *lse, const float *dout, float *dq, float *dk,
                                      float *dv) {
  onednn *o = ctx_of(be);
  att_workers(o, omp_get_max_threads());
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < s.B * s.KV; pair++)
    att_backward_pair(o, s, pair_of(s, pair), q, k, v, out, lse, dout, dq, dk, dv);
}

static void onednn_synchronize(ng_backend *be) { DNNL_OK(dnnl_stream_wait(ctx_of(be)->stream)); }

static void onednn_destroy(ng_backend *be) {
  onednn *o = ctx_of(be);
  for (int i = 0; i < o->n; i++) free_exec(&o->prims[i].x);
  free(o->prims);
  for (int w = 0; w < o->n_workers; w++) {
    att_worker *aw = &o->workers[w];
    for (int i = 0; i < aw->n_att; i++) {
      free_exec(&aw->att[i].scores);
      free_exec(&aw->att[i].values);
      free_exec(&aw->att[i].grads);
    }
    free(aw->att);
    free(aw->pad.p);
    for (int k = 0; k < A_COUNT; k++) free(aw->buf[k].p);
    dnnl_stream_destroy(aw->stream);
  }
  free(o->workers);
  for (int k = 0; k < B_COUNT; k++) free(o->bf[k].p);
  free(o->pad.p);
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
  o->be.bf16_weights = p == NG_PREC_BF16;
  o->be.ctx = o;
  o->be.synchronize = onednn_synchronize;
  o->be.destroy = onednn_destroy;
  o->be.kernels = onednn_kernels;
  o->be.matmul = onednn_matmul;
  o->be.linear_forward = onednn_linear_forward;
  o->be.linear_backward = onednn_linear_backward;
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
  o->be.ce_kd_topk = ng_vec_ce_kd_topk;
  DNNL_OK(dnnl_engine_create(&o->engine, dnnl_cpu, 0));
  DNNL_OK(dnnl_stream_create(&o->stream, o->engine, dnnl_stream_default_flags));
  return &o->be;
}

// ---------------------------------------------------------------- the bf16 ceiling

// With out_to_memory, ng_onednn_bf16_gflops writes each call into another of
// CEILING_OUTPUTS outputs, pushed out of the caches first by writing
// CEILING_FLUSH bytes (more than the last-level cache of the machines measured:
// 480 MiB on the Xeon).
#define CEILING_OUTPUTS 8
#define CEILING_FLUSH ((size_t)1 << 30)

double ng_onednn_bf16_gflops(int64_t M, int64_t N, int64_t K, bool out_to_memory, char *impl,
                             size_t impl_n) {
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
    int outs = out_to_memory ? CEILING_OUTPUTS : 1;
    float *C = ng_xmalloc((size_t)(outs * M * N) * sizeof(float));
    memset(C, 0, (size_t)(outs * M * N) * sizeof(float));  // touched: no page faults timed
    if (out_to_memory) {
      char *flush = ng_xmalloc(CEILING_FLUSH);
      memset(flush, 1, CEILING_FLUSH);
      free(flush);
    }
    for (int64_t i = 0; i < M * K; i++) A[i] = 0x3f80;  // 1.0
    for (int64_t i = 0; i < N * K; i++) B[i] = 0x3e80;  // 0.25
    dnnl_memory_t ma, mb, mc;
    dnnl_memory_create(&ma, &a, eng, A);
    dnnl_memory_create(&mb, &b, eng, B);
    dnnl_memory_create(&mc, &c, eng, C);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double took = 0.0;  // out_to_memory: calls 1..5 in all (the first creates oneDNN's state)
    for (int r = 0; r < 6; r++) {
      DNNL_OK(dnnl_memory_set_data_handle(mc, C + (size_t)(r % outs) * (size_t)(M * N)));
      double t0 = ng_now();
      dnnl_primitive_execute(prim, str, 3, args);
      dnnl_stream_wait(str);
      double t = ng_now() - t0, g = 2.0 * (double)M * N * K / t / 1e9;
      if (r > 0 && g > best) best = g;
      took += r > 0 ? t : 0.0;
    }
    if (out_to_memory) best = 5.0 * 2.0 * (double)M * N * K / took / 1e9;
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
