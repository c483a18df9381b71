// normgrow bench: one full distillation training step (teacher forward,
// student forward and backward, fused loss, AdamW) at a toy-medium shape,
// reported against the machine's sgemm GFLOP/s measured in the same run.
//
// FLOPs are counted as 2 x matmul-params x tokens for a forward and 6 x for
// forward + backward (embedding gathers count none; a tied head counts once),
// plus causal attention: 4 x hd x H x T(T+1)/2 per sequence and layer forward
// (scores and values over the causal triangle), twice that for the backward.
#include <cblas.h>
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

static void train_step(ng_model *teacher, ng_acts *ta, ng_model *student, ng_acts *sa,
                       ng_adamw *opt, const int32_t *tokens, const int32_t *targets,
                       step_times *t) {
  ng_backend *be = student->be;
  ng_optim_config oc = {3e-4, 0.9, 0.95, 1e-8, 0.1, 1.0};
  ng_loss_params lp = {0.5, 2.0, 0};
  double ce, kd, t0 = ng_now();
  int64_t nv;
  ng_model_forward(teacher, ta, tokens, NULL);
  double t1 = ng_now();
  ng_model_forward(student, sa, tokens, NULL);
  double t2 = ng_now();
  be->ce_kd(be, sa->logits, ta->logits, targets, sa->N, student->cfg.vocab_size, lp,
            sa->ws.dlogits, &ce, &kd, &nv);
  double t3 = ng_now();
  ng_model_zero_grad(student);
  ng_model_backward(student, sa, tokens);
  double t4 = ng_now();
  ng_adamw_step(student, opt, &oc, oc.lr);
  double t5 = ng_now();
  *t = (step_times){t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4};
}

int cmd_bench(const ng_cli *c) {
  const char *steps_opt = ng_cli_opt(c, "steps");
  int steps = steps_opt ? atoi(steps_opt) : 3;
  if (steps < 1 || steps > 1000) return ng_cli_error("--steps: expected a count 1..1000");
  ng_model_config mc = {.vocab_size = 8192, .hidden_size = 512, .intermediate_size = 1536,
                        .num_hidden_layers = 4, .num_attention_heads = 8,
                        .num_key_value_heads = 4, .head_dim = 64, .rope_theta = 1e6,
                        .rms_norm_eps = 1e-6, .tie_word_embeddings = false,
                        .final_norm = true, .norm_placement = NG_NORM_PRE};
  int64_t B = 8, T = 256, N = B * T;
  ng_backend *be = ng_backend_get(c->backend);
  if (!be) return ng_cli_error(ng_error());
  printf("BLAS: %s; kernels %s\n", ng_blas_config(), ng_blas_corename());
  printf("bench: backend %s, %d threads; teacher and student: D=%lld L=%lld H=%lld KV=%lld hd=%lld "
         "F=%lld V=%lld; batch %lld x %lld tokens\n",
         be->name, omp_get_max_threads(), (long long)mc.hidden_size, (long long)mc.num_hidden_layers,
         (long long)mc.num_attention_heads, (long long)mc.num_key_value_heads,
         (long long)mc.head_dim, (long long)mc.intermediate_size, (long long)mc.vocab_size,
         (long long)B, (long long)T);
  double g_head = sgemm_gflops(N, mc.vocab_size, mc.hidden_size);
  double g_mlp = sgemm_gflops(N, mc.intermediate_size, mc.hidden_size);
  double ceiling = g_head > g_mlp ? g_head : g_mlp;
  printf("sgemm ceiling: %.1f GFLOP/s ([%lld x %lld] x [%lld x %lld]^T: %.1f; MLP shape: %.1f)\n",
         ceiling, (long long)N, (long long)mc.hidden_size, (long long)mc.vocab_size,
         (long long)mc.hidden_size, g_head, g_mlp);

  ng_rng r;
  ng_rng_seed(&r, 1234);
  ng_model *teacher = ng_model_create(be, &mc, false), *student = ng_model_create(be, &mc, true);
  ng_model_init_random(teacher, &r, 0.02);
  ng_model_init_random(student, &r, 0.02);
  size_t ids_bytes = (size_t)N * sizeof(int32_t);
  int32_t *host = ng_xmalloc(2 * ids_bytes);  // tokens [N], targets [N]
  for (int64_t i = 0; i < 2 * N; i++) host[i] = (int32_t)ng_rng_below(&r, (uint64_t)mc.vocab_size);
  int32_t *tokens = be->alloc(be, ids_bytes), *targets = be->alloc(be, ids_bytes);
  be->upload(be, tokens, host, ids_bytes);
  be->upload(be, targets, host + N, ids_bytes);
  free(host);
  ng_acts *ta = ng_acts_create(teacher, B, T, false), *sa = ng_acts_create(student, B, T, true);
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
  double t = total[steps / 2], P = ng_model_matmul_params(student, false);
  double att = ng_attention_flops(&mc, B, T);
  double flops = 6.0 * P * N + 3.0 * att + 2.0 * ng_model_matmul_params(teacher, false) * N + att;
  printf("step: %.3f s (median of %d): teacher fwd %.3f, student fwd %.3f, loss %.3f, "
         "backward %.3f, adamw %.3f\n",
         t, steps, sum.teacher, sum.forward, sum.loss, sum.backward, sum.optim);
  printf("throughput: %.0f tokens/s, %.1f GFLOP/s (%.1f GFLOP per step) = %.0f%% of the sgemm "
         "ceiling\n",
         (double)N / t, flops / t / 1e9, flops / 1e9, 100.0 * flops / t / 1e9 / ceiling);
  free(total);
  ng_adamw_free(student, opt);
  ng_acts_free(teacher, ta);
  ng_acts_free(student, sa);
  be->free(be, tokens);
  be->free(be, targets);
  ng_model_free(teacher);
  ng_model_free(student);
  return 0;
}
