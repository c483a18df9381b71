// normgrow bench: one full distillation training step (teacher forward,
// student forward and backward, fused loss, AdamW) at a toy-medium shape and
// at the same shape with Qwen3's vocabulary of 151936, each with the loss over
// all tokens at once and in chunks (ng_model_loss): step time against the
// machine's sgemm GFLOP/s and the process's peak memory, measured in the same run.
//
// FLOPs are counted as 2 x matmul-params x tokens for a forward and 6 x for
// forward + backward (embedding gathers count none; a tied head counts once),
// plus causal attention: 4 x hd x H x T(T+1)/2 per sequence and layer forward
// (scores and values over the causal triangle), twice that for the backward.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/model.h"
#include "normgrow/optim.h"
#include "normgrow/rng.h"

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

typedef struct {
  double teacher, forward, loss, backward, optim;
} step_times;

// One distillation step: the forwards to the head inputs, the chunked head and
// loss with its backward (ng_model_loss), the blocks' backward, AdamW.
static void train_step(ng_model *teacher, ng_acts *ta, ng_model *student, ng_acts *sa,
                       ng_adamw *opt, const int32_t *tokens, const int32_t *targets,
                       step_times *t) {
  ng_optim_config oc = {3e-4, 0.9, 0.95, 1e-8, 0.1, 1.0};
  ng_loss_params lp = {0.5, 2.0, 0, 0};
  ng_loss_teacher lt = {.model = teacher, .acts = ta};
  double ce, kd, t0 = ng_now();
  int64_t nv;
  ng_model_forward(teacher, ta, tokens, NULL);
  double t1 = ng_now();
  ng_model_forward(student, sa, tokens, NULL);
  double t2 = ng_now();
  ng_model_zero_grad(student);
  ng_model_loss(student, sa, &lt, targets, lp, true, &ce, &kd, &nv);
  double t3 = ng_now();
  ng_model_backward(student, sa, tokens);
  double t4 = ng_now();
  ng_adamw_step(student, opt, &oc, oc.lr);
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
  ng_acts_options to = {.chunk = chunk}, so = {.train = true, .chunk = chunk};
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
  ng_model *skeleton = ng_model_create(NULL, mc, false);
  double P = ng_model_matmul_params(skeleton, false), att = ng_attention_flops(mc, sh->B, sh->T);
  ng_model_free(skeleton);
  double flops = 6.0 * P * N + 3.0 * att + 2.0 * P * N + att;  // student fwd+bwd, teacher fwd
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

int cmd_bench(const ng_cli *c) {
  int64_t steps = 3;
  if (ng_cli_int_opt(c, "steps", 1, 1000, &steps)) return ng_cli_error(ng_error());
  ng_backend *be = ng_backend_get(c->backend);
  if (!be) return ng_cli_error(ng_error());
  ng_model_config mc = {.vocab_size = 8192, .hidden_size = 512, .intermediate_size = 1536,
                        .num_hidden_layers = 4, .num_attention_heads = 8,
                        .num_key_value_heads = 4, .head_dim = 64, .rope_theta = 1e6,
                        .rms_norm_eps = 1e-6, .tie_word_embeddings = false,
                        .final_norm = true, .norm_placement = NG_NORM_PRE};
  printf("BLAS: %s; kernels %s\n", ng_blas_config(), ng_blas_corename());
  printf("bench: backend %s, %d threads; each shape: one distillation step, the loss over all "
         "tokens at once vs in chunks (peak memory: the process's, per variant)\n",
         be->name, omp_get_max_threads());
  bench_shape toy = {mc, 8, 256}, large_vocab = {mc, 8, 256};
  large_vocab.mc.vocab_size = 151936;  // Qwen3's vocabulary
  bench_one(be, &toy, steps);
  bench_one(be, &large_vocab, steps);
  return 0;
}
