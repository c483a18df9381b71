// normgrow: the oneDNN backend, on the CPU.
//
// Buffers are host memory, as in the CPU backend, whose ops it shares: its
// table starts as a copy of the CPU's and replaces the matmul (and, in bf16,
// attention). Matmuls run as oneDNN matmul primitives, created once per shape
// (transposes, M, N, K, beta) and kept in a cache.
// - fp32: f32 inputs with fpmath mode strict, so that no environment variable
//   (ONEDNN_DEFAULT_FPMATH_MODE) can lower the precision inside.
// - bf16: both inputs are converted to bf16 on the fly at every matmul (the
//   model keeps only its fp32 master weights: there are no bf16 copies to
//   refresh after an optimizer step), multiplied with fp32 accumulation into
//   the fp32 output. Attention runs the CPU kernel on bf16-rounded inputs.
#include <dnnl.h>
#include <dnnl_debug.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"

// A failing oneDNN call is an environment or programming error.
#define DNNL_OK(call)                                                          \
  do {                                                                         \
    dnnl_status_t st_ = (call);                                                \
    if (st_ != dnnl_success) ng_abort_at(__FILE__, __LINE__, dnnl_status2str(st_)); \
  } while (0)

// One cached matmul primitive and its memory objects (data handles set per call).
typedef struct {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c;
} mm_prim;

typedef struct {
  ng_backend be;  // first member: the backend is the context
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  mm_prim *prims;
  int n, cap;
  uint16_t *abuf, *bbuf;  // bf16 inputs of the current matmul
  size_t acap, bcap;      // their capacities in elements
  char kernels[256];      // "oneDNN" and the distinct implementations chosen
} onednn;

static onednn *ctx_of(ng_backend *be) { return (onednn *)be->ctx; }

// A 2-D plain memory descriptor [rows, cols], stored transposed ([cols, rows]) when t.
static dnnl_memory_desc_t plain_md(int64_t rows, int64_t cols, bool t, dnnl_data_type_t dt) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {rows, cols}, strides = {t ? 1 : cols, t ? rows : 1};
  DNNL_OK(dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides));
  return md;
}

static void note_kernel(onednn *o, const char *impl) {
  if (strstr(o->kernels, impl)) return;
  size_t n = strlen(o->kernels);
  snprintf(o->kernels + n, sizeof o->kernels - n, "%s%s", n ? ", " : "oneDNN ", impl);
}

// C [M, N] = op(A) [M, K] op(B) [K, N] + beta C, in the backend's precision.
static mm_prim *make_prim(onednn *o, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          float beta) {
  dnnl_data_type_t in = o->be.precision == NG_PREC_BF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a = plain_md(M, K, ta, in), b = plain_md(K, N, tb, in),
                     c = plain_md(M, N, false, dnnl_f32);
  dnnl_matmul_desc_t desc;
  DNNL_OK(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c));
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
  if (o->n == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 16;
    o->prims = ng_xrealloc(o->prims, (size_t)o->cap * sizeof *o->prims);
  }
  mm_prim *p = &o->prims[o->n++];
  *p = (mm_prim){ta, tb, M, N, K, beta, NULL, NULL, NULL, NULL};
  const char *impl = NULL;
  DNNL_OK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
  note_kernel(o, impl);
  DNNL_OK(dnnl_primitive_create(&p->prim, pd));
  DNNL_OK(dnnl_memory_create(&p->a, &a, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&p->b, &b, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&p->c, &c, o->engine, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_primitive_desc_destroy(pd));
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

// x [n] as bf16 in *buf (grown to n elements as needed).
static const void *bf16_input(const float *x, int64_t n, uint16_t **buf, size_t *cap) {
  if ((size_t)n > *cap) {
    free(*buf);
    *cap = (size_t)n;
    *buf = ng_xmalloc(*cap * sizeof(uint16_t));
  }
  ng_to_bf16(x, n, *buf);
  return *buf;
}

// C [M, N] = op(A) op(B) + beta * C (ng_backend.matmul)
static void onednn_matmul(ng_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          const float *A, const float *B, float beta, float *C) {
  onednn *o = ctx_of(be);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // no products: C = beta C
    be->scale(be, C, beta, M * N, C);
    return;
  }
  const void *a = A, *b = B;
  if (be->precision == NG_PREC_BF16) {
    a = bf16_input(A, M * K, &o->abuf, &o->acap);
    b = bf16_input(B, K * N, &o->bbuf, &o->bcap);
  }
  mm_prim *p = find_prim(o, ta, tb, M, N, K, beta);
  DNNL_OK(dnnl_memory_set_data_handle(p->a, (void *)a));
  DNNL_OK(dnnl_memory_set_data_handle(p->b, (void *)b));
  DNNL_OK(dnnl_memory_set_data_handle(p->c, C));
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
  DNNL_OK(dnnl_primitive_execute(p->prim, o->stream, 3, args));
  DNNL_OK(dnnl_stream_wait(o->stream));
}

static void onednn_attention_forward(ng_backend *be, ng_attn_shape s, const float *q,
                                     const float *k, const float *v, float *out, float *lse) {
  ng_cpu_attention_forward(s, q, k, v, out, lse, be->precision == NG_PREC_BF16);
}

static void onednn_attention_backward(ng_backend *be, ng_attn_shape s, const float *q,
                                      const float *k, const float *v, const float *out,
                                      const float *lse, const float *dout, float *dq, float *dk,
                                      float *dv) {
  bool bf16 = be->precision == NG_PREC_BF16;
  ng_cpu_attention_backward(s, q, k, v, out, lse, dout, dq, dk, dv, bf16);
}

static void onednn_synchronize(ng_backend *be) { DNNL_OK(dnnl_stream_wait(ctx_of(be)->stream)); }

static void onednn_destroy(ng_backend *be) {
  onednn *o = ctx_of(be);
  for (int i = 0; i < o->n; i++) {
    dnnl_primitive_destroy(o->prims[i].prim);
    dnnl_memory_destroy(o->prims[i].a);
    dnnl_memory_destroy(o->prims[i].b);
    dnnl_memory_destroy(o->prims[i].c);
  }
  free(o->prims);
  free(o->abuf);
  free(o->bbuf);
  dnnl_stream_destroy(o->stream);
  dnnl_engine_destroy(o->engine);
  free(o);
}

static const char *onednn_kernels(ng_backend *be) {
  const onednn *o = ctx_of(be);
  return o->kernels[0] ? o->kernels : "oneDNN (no matmul yet)";
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
  DNNL_OK(dnnl_engine_create(&o->engine, dnnl_cpu, 0));
  DNNL_OK(dnnl_stream_create(&o->stream, o->engine, dnnl_stream_default_flags));
  return &o->be;
}
