// normgrow bench: one full distillation training step (teacher forward,
// student forward and backward, fused loss, AdamW) at a toy-medium shape, on
// the fp32 reference (cpu), onednn fp32 and onednn bf16 (or on the one backend
// named), reported against two ceilings measured in the same run: OpenBLAS
// sgemm and oneDNN's bf16 matmul. Then the same shape with Qwen3's vocabulary
// of 151936, with the loss over all tokens at once and in chunks
// (ng_model_loss): step time and the process's peak memory of each. Between
// them, the fused loss alone under every divergence and teacher kind.
//
// FLOPs are counted by the trainer's rule (ng_model_step_flops, plan.h): 2 x
// matmul-params x tokens for a forward and 6 x for forward + backward
// (embedding gathers count none; a tied head counts once), plus causal
// attention: 4 x hd x H x T(T+1)/2 per sequence and layer forward (scores and
// values over the causal triangle), twice that for the backward. The same
// count in every precision: a bf16 step does the same work.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/model.h"
#include "normgrow/optim.h"
#include "normgrow/plan.h"
#include "normgrow/registry.h"
#include "normgrow/rng.h"
#ifdef NG_WITH_ONEDNN  // set by the Makefile when it builds the oneDNN backend
#include "normgrow/backend_onednn.h"
#endif

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Best GFLOP/s of C [M, N] = A [M, K] B^T over a few repeats.
static double sgemm_gflops(int64_t M, int64_t N, int64_t K) {
  float *A = ng_xcalloc((size_t)(M * K), sizeof(float)), *B = ng_xcalloc((size_t)(N * K), sizeof(float));
  float *C = ng_xcalloc((size_t)(M * N), sizeof(float));
  for (int64_t i = 0; i < M * K; i++) A[i] = (float)(i % 7) * 0.1f;
  for (int64_t i = 0; i < N * K; i++) B[i] = (float)(i % 5) * 0.1f;
  double best = 0.0;
  for (int r = 0; r < 4; r++) {
    double t0 = ng_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)K,
                B, (int)K, 0.0f, C, (int)N);
    double g = 2.0 * (double)M * N * K / (ng_now() - t0) / 1e9;
    if (r > 0 && g > best) best = g;  // the first call warms up
  }
  free(A);
  free(B);
  free(C);
  return best;
}

// ---------------------------------------------------------------- profile

// Where a step's time goes: the backend's ops timed by wrappers around them
// (exact for host backends, whose ops have finished when they return; a device
// backend would need a synchronize in each wrapper).
typedef enum {
  P_MATMUL,
  P_ATTENTION,
  P_NORM,
  P_LOSS,
  P_ADAMW,
  P_ROPE,
  P_SWIGLU,
  P_ELEMENTWISE,  // add, lerp, scale, channel_scale
  P_EMBEDDING,
  P_COUNT
} part;
static const char *const part_names[P_COUNT] = {"matmuls", "attention", "rmsnorm",
                                                "loss",    "adamw",     "rope",
                                                "swiglu",  "add/scale", "embedding"};
static double part_time[P_COUNT];
static ng_backend inner;  // the backend's own ops, called by the timed ones
static int timed_depth;   // an op inside a timed op (a linear layer's matmuls) counts once

#define TIMED(p, call)                                  \
  do {                                                  \
    double t0_ = ng_now();                              \
    timed_depth++;                                      \
    call;                                               \
    if (--timed_depth == 0) part_time[p] += ng_now() - t0_; \
  } while (0)

static void t_matmul(ng_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     const float *A, const float *B, float beta, float *C) {
  TIMED(P_MATMUL, inner.matmul(be, ta, tb, M, N, K, A, B, beta, C));
}
static void t_linear_fwd(ng_backend *be, ng_linear l, const float *x, int64_t N, int64_t in,
                         float *const y[]) {
  TIMED(P_MATMUL, inner.linear_forward(be, l, x, N, in, y));
}
static void t_linear_bwd(ng_backend *be, ng_linear l, const float *x, const float *const dy[],
                         int64_t N, int64_t in, float beta_dx, float *dx, float *const dW[]) {
  TIMED(P_MATMUL, inner.linear_backward(be, l, x, dy, N, in, beta_dx, dx, dW));
}
static void t_att_fwd(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                      const float *v, float *out, float *lse) {
  TIMED(P_ATTENTION, inner.attention_forward(be, s, q, k, v, out, lse));
}
static void t_att_bwd(ng_backend *be, ng_attn_shape s, const float *q, const float *k,
                      const float *v, const float *out, const float *lse, const float *dout,
                      float *dq, float *dk, float *dv) {
  TIMED(P_ATTENTION, inner.attention_backward(be, s, q, k, v, out, lse, dout, dq, dk, dv));
}
static void t_norm_fwd(ng_backend *be, const float *x, const float *w, int64_t R, int64_t C,
                       float eps, float *y, float *rstd) {
  TIMED(P_NORM, inner.rmsnorm_forward(be, x, w, R, C, eps, y, rstd));
}
static void t_norm_bwd(ng_backend *be, const float *x, const float *w, const float *rstd,
                       const float *dy, int64_t R, int64_t C, float *dx, float *dw) {
  TIMED(P_NORM, inner.rmsnorm_backward(be, x, w, rstd, dy, R, C, dx, dw));
}
static void t_ce_kd(ng_backend *be, const float *logits, const float *teacher,
                    const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                    float *dlogits, double *ce, double *kd, int64_t *n_valid) {
  TIMED(P_LOSS, inner.ce_kd(be, logits, teacher, targets, N, V, lp, dlogits, ce, kd, n_valid));
}
static void t_adamw(ng_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
                    ng_adamw_params ap, bool decay) {
  TIMED(P_ADAMW, inner.adamw(be, p, g, m, v, n, ap, decay));
}

static void t_rope_fwd(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh, int64_t hd,
                       double theta) {
  TIMED(P_ROPE, inner.rope_forward(be, x, B, T, nh, hd, theta));
}
static void t_rope_bwd(ng_backend *be, float *dx, int64_t B, int64_t T, int64_t nh, int64_t hd,
                       double theta) {
  TIMED(P_ROPE, inner.rope_backward(be, dx, B, T, nh, hd, theta));
}
static void t_swiglu_fwd(ng_backend *be, const float *gate, const float *up, int64_t n, float *s) {
  TIMED(P_SWIGLU, inner.swiglu_forward(be, gate, up, n, s));
}
static void t_swiglu_bwd(ng_backend *be, const float *gate, const float *up, const float *ds,
                         int64_t n, float *dgate, float *dup) {
  TIMED(P_SWIGLU, inner.swiglu_backward(be, gate, up, ds, n, dgate, dup));
}
static void t_add(ng_backend *be, const float *a, const float *b, int64_t n, float *y) {
  TIMED(P_ELEMENTWISE, inner.add(be, a, b, n, y));
}
static void t_lerp(ng_backend *be, const float *a, const float *b, float g, int64_t n, float *y) {
  TIMED(P_ELEMENTWISE, inner.lerp(be, a, b, g, n, y));
}
static void t_scale(ng_backend *be, const float *x, float s, int64_t n, float *y) {
  TIMED(P_ELEMENTWISE, inner.scale(be, x, s, n, y));
}
static void t_cscale_fwd(ng_backend *be, const float *x, const float *gamma, int64_t R, int64_t C,
                         float *y) {
  TIMED(P_ELEMENTWISE, inner.channel_scale_forward(be, x, gamma, R, C, y));
}
static void t_cscale_bwd(ng_backend *be, const float *x, const float *gamma, const float *dy,
                         int64_t R, int64_t C, float *dx, float *dgamma) {
  TIMED(P_ELEMENTWISE, inner.channel_scale_backward(be, x, gamma, dy, R, C, dx, dgamma));
}
static void t_embed_fwd(ng_backend *be, const int32_t *tokens, const float *weight, int64_t N,
                        int64_t D, float *out) {
  TIMED(P_EMBEDDING, inner.embedding_forward(be, tokens, weight, N, D, out));
}
static void t_embed_bwd(ng_backend *be, const int32_t *tokens, const float *dout, int64_t N,
                        int64_t D, float *dweight) {
  TIMED(P_EMBEDDING, inner.embedding_backward(be, tokens, dout, N, D, dweight));
}

static void profile_on(ng_backend *be) {
  inner = *be;
  memset(part_time, 0, sizeof part_time);
  be->matmul = t_matmul;
  be->linear_forward = t_linear_fwd;
  be->linear_backward = t_linear_bwd;
  be->attention_forward = t_att_fwd;
  be->attention_backward = t_att_bwd;
  be->rmsnorm_forward = t_norm_fwd;
  be->rmsnorm_backward = t_norm_bwd;
  be->ce_kd = t_ce_kd;
  be->adamw = t_adamw;
  be->rope_forward = t_rope_fwd;
  be->rope_backward = t_rope_bwd;
  be->swiglu_forward = t_swiglu_fwd;
  be->swiglu_backward = t_swiglu_bwd;
  be->add = t_add;
  be->lerp = t_lerp;
  be->scale = t_scale;
  be->channel_scale_forward = t_cscale_fwd;
  be->channel_scale_backward = t_cscale_bwd;
  be->embedding_forward = t_embed_fwd;
  be->embedding_backward = t_embed_bwd;
}

static void profile_off(ng_backend *be) { *be = inner; }

// ---------------------------------------------------------------- the step

typedef struct {
  double teacher, forward, loss, backward, optim;
} step_times;

// One distillation step: the forwards to the head inputs, the chunked head and
// loss with its backward (ng_model_loss), the blocks' backward, AdamW.
static void train_step(ng_model *teacher, ng_acts *ta, ng_model *student, ng_acts *sa,
                       ng_adamw *opt, const int32_t *tokens, const int32_t *targets,
                       step_times *t) {
  ng_backend *be = student->be;
  ng_optim_config oc = {3e-4, 0.9, 0.95, 1e-8, 0.1, 1.0};
  ng_loss_params lp = {0.5, 2.0, 0, 0, NG_DIV_FORWARD_KL, 0.0};
  ng_loss_teacher lt = {.model = teacher, .acts = ta};
  double ce, kd, t0 = ng_now();
  int64_t nv;
  ng_model_forward(teacher, ta, tokens, NULL);
  be->synchronize(be);
  double t1 = ng_now();
  ng_model_forward(student, sa, tokens, NULL);
  be->synchronize(be);
  double t2 = ng_now();
  ng_model_zero_grad(student);
  ng_model_loss(student, sa, &lt, targets, lp, true, &ce, &kd, &nv);
  double t3 = ng_now();
  ng_model_backward(student, sa, tokens);
  be->synchronize(be);
  double t4 = ng_now();
  ng_adamw_step(student, opt, &oc, oc.lr);
  be->synchronize(be);
  double t5 = ng_now();
  *t = (step_times){t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4};
}

// A shape's teacher and student (the same config) and a batch of random ids.
typedef struct {
  ng_model_config mc;
  int64_t B, T;
} bench_shape;

typedef struct {
  double median, peak_gib;
  step_times mean;
} bench_result;

// `steps` timed steps (after one warm-up) with the loss in chunks of `chunk`
// rows (0: all); everything is made and freed inside, so the peak resident
// memory (reset at the start) is this variant's.
static void run_variant(ng_backend *be, const bench_shape *sh, int64_t chunk, int steps,
                        bench_result *res) {
  bool peak_known = ng_peak_rss_reset() == 0;
  int64_t N = sh->B * sh->T;
  ng_rng r;
  ng_rng_seed(&r, 1234);
  ng_model *teacher = ng_model_create(be, &sh->mc, false), *student = ng_model_create(be, &sh->mc, true);
  ng_model_init_random(teacher, &r, 0.02);
  ng_model_init_random(student, &r, 0.02);
  size_t ids_bytes = (size_t)N * sizeof(int32_t);
  int32_t *host = ng_xmalloc(2 * ids_bytes);  // tokens [N], targets [N]
  for (int64_t i = 0; i < 2 * N; i++) host[i] = (int32_t)ng_rng_below(&r, (uint64_t)sh->mc.vocab_size);
  int32_t *tokens = be->alloc(be, ids_bytes), *targets = be->alloc(be, ids_bytes);
  be->upload(be, tokens, host, ids_bytes);
  be->upload(be, targets, host + N, ids_bytes);
  free(host);
  ng_acts_options to = {.chunk = chunk}, so = {.for_backward = true, .chunk = chunk};
  ng_acts *ta = ng_acts_create_with(teacher, sh->B, sh->T, &to);
  ng_acts *sa = ng_acts_create_with(student, sh->B, sh->T, &so);
  ng_adamw *opt = ng_adamw_create(student);
  step_times st, sum = {0};
  double *total = ng_xcalloc((size_t)steps, sizeof(double));
  train_step(teacher, ta, student, sa, opt, tokens, targets, &st);  // warm-up
  for (int s = 0; s < steps; s++) {
    train_step(teacher, ta, student, sa, opt, tokens, targets, &st);
    total[s] = st.teacher + st.forward + st.loss + st.backward + st.optim;
    sum.teacher += st.teacher / steps;
    sum.forward += st.forward / steps;
    sum.loss += st.loss / steps;
    sum.backward += st.backward / steps;
    sum.optim += st.optim / steps;
  }
  qsort(total, (size_t)steps, sizeof(double), cmp_double);
  *res = (bench_result){total[steps / 2], peak_known ? (double)ng_peak_rss() / 1073741824.0 : NAN, sum};
  free(total);
  ng_adamw_free(student, opt);
  ng_acts_free(teacher, ta);
  ng_acts_free(student, sa);
  be->free(be, tokens);
  be->free(be, targets);
  ng_model_free(teacher);
  ng_model_free(student);
}

static void print_variant(const char *label, const bench_result *r, double flops, int steps,
                          int64_t N, double ceiling) {
  printf("  %-24s step %.3f s (median of %d): teacher fwd %.3f, student fwd %.3f, head+loss %.3f, "
         "backward %.3f, adamw %.3f\n",
         label, r->median, steps, r->mean.teacher, r->mean.forward, r->mean.loss,
         r->mean.backward, r->mean.optim);
  printf("  %-24s %.0f tokens/s, %.1f GFLOP/s = %.0f%% of the sgemm ceiling; peak memory %.2f GiB\n",
         "", (double)N / r->median, flops / r->median / 1e9, 100.0 * flops / r->median / 1e9 / ceiling,
         r->peak_gib);
}

// One shape: the loss over all tokens at once, then in chunks of the default size.
static void bench_one(ng_backend *be, const bench_shape *sh, int steps) {
  const ng_model_config *mc = &sh->mc;
  int64_t N = sh->B * sh->T, chunk = ng_loss_chunk_default(mc, N);
  printf("\nshape: teacher and student D=%lld L=%lld H=%lld KV=%lld hd=%lld F=%lld V=%lld; batch "
         "%lld x %lld tokens\n",
         (long long)mc->hidden_size, (long long)mc->num_hidden_layers,
         (long long)mc->num_attention_heads, (long long)mc->num_key_value_heads,
         (long long)mc->head_dim, (long long)mc->intermediate_size, (long long)mc->vocab_size,
         (long long)sh->B, (long long)sh->T);
  double g_head = sgemm_gflops(N, mc->vocab_size, mc->hidden_size);
  double g_mlp = sgemm_gflops(N, mc->intermediate_size, mc->hidden_size);
  double ceiling = g_head > g_mlp ? g_head : g_mlp;
  printf("  sgemm ceiling: %.1f GFLOP/s ([%lld x %lld] x [%lld x %lld]^T: %.1f; MLP shape: %.1f)\n",
         ceiling, (long long)N, (long long)mc->hidden_size, (long long)mc->vocab_size,
         (long long)mc->hidden_size, g_head, g_mlp);
  ng_model *skeleton = ng_model_create(NULL, mc, false);  // teacher and student alike
  double flops = ng_model_step_flops(skeleton, skeleton, sh->B, sh->T);
  ng_model_free(skeleton);
  bench_result whole, chunked;
  run_variant(be, sh, 0, steps, &whole);
  run_variant(be, sh, chunk, steps, &chunked);
  char label[64];
  snprintf(label, sizeof label, "loss over all %lld rows", (long long)N);
  print_variant(label, &whole, flops, steps, N, ceiling);
  snprintf(label, sizeof label, "loss in chunks of %lld", (long long)chunk);
  print_variant(label, &chunked, flops, steps, N, ceiling);
  printf("  chunked / whole: step time %.2fx, peak memory %.2fx\n", chunked.median / whole.median,
         chunked.peak_gib / whole.peak_gib);
}

typedef struct {
  ng_model_config mc;
  int64_t B, T;
  int steps;
  double sgemm, bf16;  // the ceilings (GFLOP/s)
  double bf16_mem;     // the bf16 matmul at the MLP shape, its output to memory (GFLOP/s)
} bench_setup;

// One backend under test: its models, batch, and the times of its steps.
typedef struct {
  ng_backend *be;
  ng_model *teacher, *student;
  ng_acts *ta, *sa;
  ng_adamw *opt;
  int32_t *tokens, *targets;
  double *total;              // [steps] seconds of each step
  step_times mean;            // the step's parts, mean over the steps
  double parts[P_COUNT], all; // time by op, summed over the steps
  double outside;             // the median step's time outside the matmuls (run_report)
} bench_run;

// Models, batch and one warm-up step on be.
static void run_open(bench_run *r, const bench_setup *s, ng_backend *be) {
  int64_t N = s->B * s->T;
  ng_rng g;
  ng_rng_seed(&g, 1234);
  *r = (bench_run){.be = be};
  r->teacher = ng_model_create(be, &s->mc, false);
  r->student = ng_model_create(be, &s->mc, true);
  ng_model_init_random(r->teacher, &g, 0.02);
  ng_model_init_random(r->student, &g, 0.02);
  size_t ids_bytes = (size_t)N * sizeof(int32_t);
  int32_t *host = ng_xmalloc(2 * ids_bytes);  // tokens [N], targets [N]
  for (int64_t i = 0; i < 2 * N; i++) host[i] = (int32_t)ng_rng_below(&g, (uint64_t)s->mc.vocab_size);
  r->tokens = be->alloc(be, ids_bytes);
  r->targets = be->alloc(be, ids_bytes);
  be->upload(be, r->tokens, host, ids_bytes);
  be->upload(be, r->targets, host + N, ids_bytes);
  free(host);
  r->ta = ng_acts_create(r->teacher, s->B, s->T, false);
  r->sa = ng_acts_create(r->student, s->B, s->T, true);
  r->opt = ng_adamw_create(r->student);
  r->total = ng_xcalloc((size_t)s->steps, sizeof(double));
  step_times st;
  train_step(r->teacher, r->ta, r->student, r->sa, r->opt, r->tokens, r->targets, &st);
}

// Step k, timed as a whole, by part and by op.
static void run_step(bench_run *r, const bench_setup *s, int k) {
  step_times st;
  profile_on(r->be);
  train_step(r->teacher, r->ta, r->student, r->sa, r->opt, r->tokens, r->targets, &st);
  profile_off(r->be);
  r->total[k] = st.teacher + st.forward + st.loss + st.backward + st.optim;
  r->all += r->total[k];
  for (int p = 0; p < P_COUNT; p++) r->parts[p] += part_time[p];
  r->mean.teacher += st.teacher / s->steps;
  r->mean.forward += st.forward / s->steps;
  r->mean.loss += st.loss / s->steps;
  r->mean.backward += st.backward / s->steps;
  r->mean.optim += st.optim / s->steps;
}

// Prints the run's median step, throughput and time by op; returns tokens/s.
static double run_report(bench_run *r, const bench_setup *s) {
  ng_backend *be = r->be;
  int64_t N = s->B * s->T;
  qsort(r->total, (size_t)s->steps, sizeof(double), cmp_double);
  double t = r->total[s->steps / 2], att = ng_attention_flops(&s->mc, s->B, s->T);
  double flops = ng_model_step_flops(r->student, r->teacher, s->B, s->T);
  double gflops = flops / t / 1e9, ceiling = be->precision == NG_PREC_BF16 ? s->bf16 : s->sgemm;
  printf("%s %s: step %.3f s (median of %d): teacher fwd %.3f, student fwd %.3f, loss %.3f, "
         "backward %.3f, adamw %.3f\n",
         be->name, ng_precision_name(be->precision), t, s->steps, r->mean.teacher,
         r->mean.forward, r->mean.loss, r->mean.backward, r->mean.optim);
  printf("  %.0f tokens/s, %.1f GFLOP/s (%.1f GFLOP per step) = %.0f%% of the %s ceiling\n",
         (double)N / t, gflops, flops / 1e9, 100.0 * gflops / ceiling,
         be->precision == NG_PREC_BF16 ? "bf16 matmul" : "sgemm");
  printf("  time by op, per step (share of the step):");
  double rest = r->all;
  for (int p = 0; p < P_COUNT; p++) {
    printf(" %s %.3f s (%.0f%%),", part_names[p], r->parts[p] / s->steps,
           100.0 * r->parts[p] / r->all);
    rest -= r->parts[p];
  }
  printf(" other ops %.3f s (%.0f%%)\n", rest / s->steps, 100.0 * rest / r->all);
  // The 2-D matmuls' share of the FLOPs (attention's products are its own)
  // and the part of the step outside them, per step.
  double mm_s = r->parts[P_MATMUL] / s->steps, mm_gflops = (flops - 4.0 * att) / mm_s / 1e9;
  r->outside = t * (1.0 - r->parts[P_MATMUL] / r->all);
  printf("  matmuls %.1f GFLOP/s = %.0f%% of the ceiling; outside them %.3f s per step\n",
         mm_gflops, 100.0 * mm_gflops / ceiling, r->outside);
  printf("  kernels: %s\n", be->kernels(be));
  return (double)N / t;
}

static void run_close(bench_run *r) {
  ng_backend *be = r->be;
  free(r->total);
  ng_adamw_free(r->student, r->opt);
  ng_acts_free(r->teacher, r->ta);
  ng_acts_free(r->student, r->sa);
  be->free(be, r->tokens);
  be->free(be, r->targets);
  ng_model_free(r->teacher);
  ng_model_free(r->student);
  ng_backend_close(be);
}

// The ceilings of one round: the best sgemm, and (with_bf16) the best oneDNN
// bf16 matmul, over the head and MLP shapes, and the bf16 matmul at the MLP
// shape writing its output to memory (*bf16_mem). (At the head shape the fp32
// output, [N, V], makes the bf16 matmul memory-bound: measured on one core 440
// GFLOP/s there against 1,050 at the MLP shape.)
static void ceilings(const bench_setup *s, bool with_bf16, double *sgemm, double *bf16,
                     double *bf16_mem, char *impl, size_t n) {
  int64_t N = s->B * s->T;
  double g_head = sgemm_gflops(N, s->mc.vocab_size, s->mc.hidden_size);
  double g_mlp = sgemm_gflops(N, s->mc.intermediate_size, s->mc.hidden_size);
  *sgemm = g_head > g_mlp ? g_head : g_mlp;
  *bf16 = *bf16_mem = 0.0;
  if (!with_bf16) return;
#ifdef NG_WITH_ONEDNN
  int64_t V = s->mc.vocab_size, D = s->mc.hidden_size, F = s->mc.intermediate_size;
  double b_head = ng_onednn_bf16_gflops(N, V, D, false, impl, n);
  double b_mlp = ng_onednn_bf16_gflops(N, F, D, false, impl, n);
  *bf16 = b_head > b_mlp ? b_head : b_mlp;
  *bf16_mem = ng_onednn_bf16_gflops(N, F, D, true, impl, n);
#else
  (void)impl;  // a build without oneDNN opens no bf16 step
  (void)n;
#endif
}

// The fused loss alone (ce_kd, ce_kd_topk with dlogits) under every divergence,
// from full teacher logits and from a top-LOSS_TOPK cache of them (the
// reference's top-k scan), on each backend under test whose loss ops are not
// an earlier one's (onednn bf16 shares fp32's): one call over the step's rows
// [B*T, V] of logits ~ N(0, 3^2), tau 2 (JSD beta 0.5), best of `steps`
// calls; the ratio to the first backend's.
#define LOSS_TOPK 64
#define LOSS_TAU 2.0
typedef struct {
  float *logits, *teacher, *vals, *lse, *rest, *dlogits;  // the backend's copies
  int32_t *targets, *ids;
} loss_bufs;

static loss_bufs loss_upload(ng_backend *be, const loss_bufs *h, int64_t N, int64_t V) {
  size_t rows = (size_t)(N * V) * sizeof(float), cache = (size_t)(N * LOSS_TOPK) * sizeof(float);
  loss_bufs d = {be->alloc(be, rows), be->alloc(be, rows), be->alloc(be, cache),
                 be->alloc(be, (size_t)N * sizeof(float)), be->alloc(be, (size_t)N * sizeof(float)),
                 be->alloc(be, rows),
                 be->alloc(be, (size_t)N * sizeof(int32_t)), be->alloc(be, cache)};
  be->upload(be, d.logits, h->logits, rows);
  be->upload(be, d.teacher, h->teacher, rows);
  be->upload(be, d.vals, h->vals, cache);
  be->upload(be, d.lse, h->lse, (size_t)N * sizeof(float));
  be->upload(be, d.rest, h->rest, (size_t)N * sizeof(float));
  be->upload(be, d.targets, h->targets, (size_t)N * sizeof(int32_t));
  be->upload(be, d.ids, h->ids, cache);
  return d;
}

static void loss_free(ng_backend *be, loss_bufs *d) {
  void *all[] = {d->logits, d->teacher, d->vals, d->lse, d->rest, d->dlogits, d->targets, d->ids};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->free(be, all[i]);
}

// The best of `steps` calls of one divergence and teacher kind, in seconds.
static double loss_time(ng_backend *be, const loss_bufs *d, int64_t N, int64_t V,
                        ng_divergence dv, bool topk, int steps) {
  ng_loss_params lp = {0.5, LOSS_TAU, 0, 0, dv, dv == NG_DIV_JSD ? 0.5 : 0.0};
  double best = INFINITY, ce, kd;
  int64_t nv;
  for (int k = 0; k < steps; k++) {
    double t0 = omp_get_wtime();
    if (topk)
      be->ce_kd_topk(be, d->logits, d->ids, d->vals, d->lse, d->rest, LOSS_TOPK, d->targets, N, V,
                     lp, d->dlogits, &ce, &kd, &nv);
    else
      be->ce_kd(be, d->logits, d->teacher, d->targets, N, V, lp, d->dlogits, &ce, &kd, &nv);
    be->synchronize(be);
    double t = omp_get_wtime() - t0;
    best = t < best ? t : best;
  }
  return best;
}

// The host rows of bench_losses: logits and teacher [N, V], targets [N], and
// the teacher's top-LOSS_TOPK cache by the reference's scan.
static loss_bufs loss_inputs(int64_t N, int64_t V) {
  ng_rng g;
  ng_rng_seed(&g, 4321);
  size_t rows = (size_t)(N * V) * sizeof(float), cache = (size_t)(N * LOSS_TOPK) * sizeof(float);
  loss_bufs h = {ng_xmalloc(rows), ng_xmalloc(rows), ng_xmalloc(cache), ng_xmalloc((size_t)N * sizeof(float)),
                 ng_xmalloc((size_t)N * sizeof(float)), NULL, ng_xmalloc((size_t)N * sizeof(int32_t)),
                 ng_xmalloc(cache)};
  ng_rng_fill_normal(&g, h.logits, (size_t)(N * V), 0.0, 3.0);
  ng_rng_fill_normal(&g, h.teacher, (size_t)(N * V), 0.0, 3.0);
  for (int64_t i = 0; i < N; i++) h.targets[i] = (int32_t)ng_rng_below(&g, (uint64_t)V);
  ng_backend *cpu = ng_backend_cpu();
  cpu->topk(cpu, h.teacher, N, V, V, LOSS_TOPK, 1.0 / LOSS_TAU, (uint32_t *)h.ids, h.vals, h.lse,
            h.rest);
  return h;
}

static void bench_losses(bench_run *runs, int n, const bench_setup *s) {
  int64_t N = s->B * s->T, V = s->mc.vocab_size;
  int m = 0, which[3];  // the runs whose loss ops are not an earlier run's
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < m; j++)
      seen = seen || (runs[which[j]].be->ce_kd == runs[i].be->ce_kd &&
                      runs[which[j]].be->ce_kd_topk == runs[i].be->ce_kd_topk);
    if (!seen) which[m++] = i;
  }
  printf("\nthe fused loss alone, with its dlogits: one call over %lld rows of V=%lld, tau %g (best of %d):\n",
         (long long)N, (long long)V, LOSS_TAU, s->steps);
  loss_bufs h = loss_inputs(N, V), d[3];
  for (int j = 0; j < m; j++) d[j] = loss_upload(runs[which[j]].be, &h, N, V);
  free(h.logits), free(h.teacher), free(h.vals), free(h.lse), free(h.rest), free(h.targets), free(h.ids);
  for (int dv = 0; dv <= NG_DIV_LAST; dv++)
    for (int topk = 0; topk < 2; topk++) {
      char kind[32];
      snprintf(kind, sizeof kind, topk ? "top-%d cache:" : "full teacher:", LOSS_TOPK);
      printf("  %-10s %-14s", ng_divergence_name((ng_divergence)dv), kind);
      double first = 0.0;
      for (int j = 0; j < m; j++) {
        ng_backend *be = runs[which[j]].be;
        double t = loss_time(be, &d[j], N, V, (ng_divergence)dv, topk, s->steps);
        first = j ? first : t;
        printf("%s %s %.4f s", j ? "," : "", be->name, t);
        if (j) printf(" (%.1fx)", first / t);
      }
      printf("\n");
    }
  for (int j = 0; j < m; j++) loss_free(runs[which[j]].be, &d[j]);
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof(double), cmp_double);
  return x[n / 2];
}

int cmd_bench(const ng_cli *c) {
  bench_setup s = {
      .mc = {.vocab_size = 8192, .hidden_size = 512, .intermediate_size = 1536,
             .num_hidden_layers = 4, .num_attention_heads = 8, .num_key_value_heads = 4,
             .head_dim = 64, .rope_theta = 1e6, .rms_norm_eps = 1e-6,
             .tie_word_embeddings = false, .final_norm = true, .norm_placement = NG_NORM_PRE},
      .B = 8, .T = 256, .steps = 3};
  int64_t steps = 3;
  if (ng_cli_int_opt(c, "steps", 1, 1000, &steps)) return ng_cli_error(ng_error());
  s.steps = (int)steps;
  // The named backend, or the fp32 reference, onednn fp32 and onednn bf16
  // (the reference alone in a build without oneDNN; without onednn bf16 on a
  // CPU that has no bf16 kernels).
  const char *names[3] = {"cpu", "onednn", "onednn"};
  ng_precision precs[3] = {NG_PREC_FP32, NG_PREC_FP32, NG_PREC_BF16};
#ifdef NG_WITH_ONEDNN
  int n = 3;
#else
  int n = 1;
#endif
  if (c->backend || c->precision) {
    names[0] = c->backend ? c->backend : "cpu";
    if (c->precision && ng_precision_parse(c->precision, &precs[0])) return ng_cli_error(ng_error());
    n = 1;
  }
  bench_run runs[3];
  bool named = c->backend || c->precision;
  for (int i = 0; i < n; i++) {
    ng_backend *be = ng_backend_open(names[i], precs[i]);
    if (!be && !named && precs[i] == NG_PREC_BF16) {  // a CPU without bf16 kernels: the rest
      printf("bench: onednn bf16 left out: %s\n", ng_error());
      n = i;
      break;
    }
    if (!be) {
      for (int j = 0; j < i; j++) run_close(&runs[j]);
      return ng_cli_error(ng_error());
    }
    run_open(&runs[i], &s, be);
  }
  bool with_bf16 = false;
  for (int i = 0; i < n; i++) with_bf16 = with_bf16 || runs[i].be->precision == NG_PREC_BF16;
  const ng_model_config *mc = &s.mc;
  printf("BLAS: %s; kernels %s (%s)\n", ng_blas_config(), ng_blas_corename(), ng_blas_family_origin());
  printf("bench: %d threads; teacher and student: D=%lld L=%lld H=%lld KV=%lld hd=%lld F=%lld "
         "V=%lld; batch %lld x %lld tokens; %d rounds, each one step of every backend and the "
         "ceilings (medians reported)\n",
         omp_get_max_threads(), (long long)mc->hidden_size, (long long)mc->num_hidden_layers,
         (long long)mc->num_attention_heads, (long long)mc->num_key_value_heads,
         (long long)mc->head_dim, (long long)mc->intermediate_size, (long long)mc->vocab_size,
         (long long)s.B, (long long)s.T, s.steps);
  // Rounds interleave the backends, so that a machine whose load drifts
  // slows them alike and the ratios hold.
  double *sg = ng_xcalloc((size_t)s.steps, sizeof(double)), *bf = ng_xcalloc((size_t)s.steps, sizeof(double));
  double *bm = ng_xcalloc((size_t)s.steps, sizeof(double));
  char impl[128];
  for (int k = 0; k < s.steps; k++) {
    ceilings(&s, with_bf16, &sg[k], &bf[k], &bm[k], impl, sizeof impl);
    for (int i = 0; i < n; i++) run_step(&runs[i], &s, k);
  }
  s.sgemm = median(sg, s.steps);
  s.bf16 = median(bf, s.steps);
  s.bf16_mem = median(bm, s.steps);
  free(sg);
  free(bf);
  free(bm);
  printf("sgemm ceiling (OpenBLAS %s, best of the head [%lld x %lld] x [%lld x %lld]^T and MLP "
         "shapes): %.1f GFLOP/s\n",
         ng_blas_corename(), (long long)(s.B * s.T), (long long)mc->hidden_size,
         (long long)mc->vocab_size, (long long)mc->hidden_size, s.sgemm);
  if (with_bf16)
    printf("bf16 matmul ceiling (oneDNN %s, best of the same shapes, bf16 inputs): %.1f GFLOP/s = "
           "%.1fx sgemm\n"
           "  the same matmul at the MLP shape writing its fp32 output to memory, as a step's outputs "
           "go: %.1f GFLOP/s = %.0f%% of the ceiling\n",
           impl, s.bf16, s.bf16 / s.sgemm, s.bf16_mem, 100.0 * s.bf16_mem / s.bf16);
  double tps[3];
  for (int i = 0; i < n; i++) tps[i] = run_report(&runs[i], &s);
  if (!named && n >= 2) {  // the reference first, then the onednn steps
    double ref = (double)(s.B * s.T) / tps[0];  // the reference's median step (s)
    printf("tokens/s against the fp32 reference (with free matmuls at most: the reference's step "
           "over the time outside them):");
    for (int i = 1; i < n; i++)
      printf("%s onednn %s %.2fx (%.2fx)", i > 1 ? "," : "", ng_precision_name(runs[i].be->precision),
             tps[i] / tps[0], ref / runs[i].outside);
    printf("\n");
  }
  bench_losses(runs, n, &s);
  for (int i = 0; i < n; i++) run_close(&runs[i]);
  // Qwen3's vocabulary, on the first backend: the loss whole vs in chunks.
  ng_backend *be = ng_backend_open(names[0], precs[0]);
  if (!be) return ng_cli_error(ng_error());
  bench_shape large = {s.mc, s.B, s.T};
  large.mc.vocab_size = 151936;
  printf("\n%s %s at Qwen3's vocabulary: one distillation step, the loss over all tokens at "
         "once vs in chunks (peak memory: the process's, per variant)",
         be->name, ng_precision_name(be->precision));
  bench_one(be, &large, s.steps);
  ng_backend_close(be);
  return 0;
}
