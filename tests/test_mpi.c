// normgrow tests: the communicators and the sharded (ZeRO-1) optimizer step.
//
//   test_mpi               the single-process communicator here, then this
//                          program's `ranks` mode under mpirun with 3 ranks
//                          (one "skip" line when mpirun cannot start)
//   test_mpi ranks         (under mpirun) every collective against values
//                          known in closed form, and the ZeRO-1 step against
//                          AdamW on the summed gradients; rank 0 reports
//   test_mpi compare A B   the largest |difference| of the parameters of two
//                          checkpoints on stdout (status 1 when their tensors
//                          differ in shape; tests/t_mpi.sh uses it)
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "normgrow/checkpoint.h"
#include "normgrow/comm.h"
#include "normgrow/common.h"
#include "normgrow/optim.h"

// Each collective on a few values whose sums are exact in fp32; the failures.
static int collectives(ng_comm *c) {
  int r = c->rank, n = c->size, bad = 0;
  enum { M = 5 };
  float a[M], send[3 * M * 4], recv[3 * M * 4];
  for (int i = 0; i < M; i++) a[i] = (float)r + 0.5f * (float)i;
  c->allreduce_f32(c, a, M);
  for (int i = 0; i < M; i++) bad += a[i] != (float)(n * (n - 1) / 2) + (float)n * 0.5f * (float)i;
  double d[2] = {r + 0.25, -1.0};
  c->allreduce_f64(c, d, 2);
  bad += d[0] != n * (n - 1) / 2.0 + 0.25 * n || d[1] != -n;
  for (int k = 0; k < n * M; k++) send[k] = (float)((r + 1) * k);
  c->reduce_scatter_f32(c, send, recv, M);
  for (int j = 0; j < M; j++) bad += recv[j] != (float)((r * M + j) * n * (n + 1) / 2);
  for (int j = 0; j < M; j++) send[j] = (float)(100 * r + j);
  c->allgather_f32(c, send, recv, M);
  for (int k = 0; k < n * M; k++) bad += recv[k] != (float)(100 * (k / M) + k % M);
  int root = n - 1, b = r;
  c->broadcast(c, &b, sizeof b, root);
  bad += b != root;
  c->barrier(c);
  return bad;
}

static const ng_model_config tiny = {.vocab_size = 37, .hidden_size = 16, .intermediate_size = 24,
                                     .num_hidden_layers = 2, .num_attention_heads = 2,
                                     .num_key_value_heads = 1, .head_dim = 8, .rope_theta = 1e4,
                                     .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
                                     .final_norm = true};

// Rank r's gradient of n values at a step and parameter: multiples of 1/8, so
// any sum of them is exact.
static void fake_grad(size_t n, int step, int param, int rank, float *g) {
  ng_rng rng;
  ng_rng_seed(&rng, 1000000u * (uint64_t)rank + 1000u * (uint64_t)step + (uint64_t)param);
  for (size_t k = 0; k < n; k++) g[k] = (float)((int)ng_rng_below(&rng, 17) - 8) / 8.0f;
}

// Three ZeRO-1 steps (gradients differing by rank, one block frozen, clipping on)
// against AdamW on one process with the ranks' gradients summed; the largest
// |difference| of the parameters.
static double zero_vs_adamw(ng_comm *c) {
  ng_backend *be = ng_backend_open("cpu", NG_PREC_FP32);
  ng_model *dp = ng_model_create(be, &tiny, true), *one = ng_model_create(be, &tiny, true);
  ng_rng init;
  ng_rng_seed(&init, 7);
  ng_model_init_random(dp, &init, 0.1);
  ng_rng_seed(&init, 7);
  ng_model_init_random(one, &init, 0.1);
  ng_model_freeze(dp, 1, true);
  ng_model_freeze(one, 1, true);
  ng_adamw *o_dp = ng_adamw_create(dp), *o_one = ng_adamw_create(one);
  ng_zero *z = ng_zero_create(c);
  ng_zero_shard_moments(dp, o_dp, z);
  ng_optim_config oc = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < dp->n_params; i++) {
      if (!dp->params[i].grad) continue;
      size_t n = dp->params[i].numel;
      float *g = malloc(n * sizeof *g), *sum = calloc(n, sizeof *sum);
      for (int r = 0; r < c->size; r++) {
        fake_grad(n, step, i, r, g);
        for (size_t k = 0; k < n; k++) sum[k] += g[k];
        if (r == c->rank) be->upload(be, dp->params[i].grad, g, n * sizeof *g);
      }
      be->upload(be, one->params[i].grad, sum, n * sizeof *sum);
      free(g);
      free(sum);
    }
    ng_zero_step(dp, o_dp, z, &oc, 1e-2);
    ng_adamw_step(one, o_one, &oc, 1e-2);
  }
  double worst = 0.0;
  for (int i = 0; i < dp->n_params; i++)
    for (size_t k = 0; k < dp->params[i].numel; k++)
      worst = fmax(worst, fabs((double)dp->params[i].data[k] - (double)one->params[i].data[k]));
  float **hm, **hv;  // the moments gathered to the host of rank 0 (a checkpoint's)
  ng_zero_host_moments(dp, z, 0, &hm, &hv);
  ng_zero_whole_moments(dp, o_dp, z);
  for (int i = 0; i < dp->n_params; i++)
    for (size_t k = 0; k < dp->params[i].numel; k++) {
      worst = fmax(worst, fabs((double)o_dp->m[i][k] - (double)o_one->m[i][k]));
      worst = fmax(worst, fabs((double)o_dp->v[i][k] - (double)o_one->v[i][k]));
      if (hm) worst = fmax(worst, fabs((double)hm[i][k] - (double)o_one->m[i][k]));
      if (hv) worst = fmax(worst, fabs((double)hv[i][k] - (double)o_one->v[i][k]));
    }
  if (c->rank == 0 && !hm) worst = INFINITY;
  ng_zero_free_host(dp->n_params, hm, hv);
  bool agree = ng_zero_weights_agree(dp, c);
  if (!agree) worst = INFINITY;
  ng_zero_free(be, z);
  ng_adamw_free(dp, o_dp);
  ng_adamw_free(one, o_one);
  ng_model_free(dp);
  ng_model_free(one);
  ng_backend_close(be);
  return worst;
}

static int ranks(void) {
  ng_comm *c = ng_comm_open();
  if (!c) {
    printf("FAIL mpi: %s\n", ng_error());
    return 1;
  }
  double bad = collectives(c), worst = zero_vs_adamw(c);
  c->allreduce_f64(c, &bad, 1);
  c->allreduce_f64(c, &worst, 1);  // a sum of non-negative numbers: 0 only when all are
  if (c->rank == 0) {
    CHECK(bad == 0 && c->size == 3, "mpi 3 ranks: allreduce f32/f64, reduce-scatter, all-gather, broadcast, barrier",
          "%g wrong values, %d ranks", bad, c->size);
    CHECK(worst < 1e-6, "mpi 3 ranks: ZeRO-1 step equals AdamW on the summed gradients (global-norm clipping, a frozen block)",
          "differs by %g", worst);
  }
  ng_comm_close(c);
  return TEST_RESULT();
}

static int compare(const char *a, const char *b) {
  ng_backend *be = ng_backend_open("cpu", NG_PREC_FP32);
  ng_model *x, *y;
  if (ng_model_open(a, be, false, &x) || ng_model_open(b, be, false, &y)) {
    fprintf(stderr, "%s\n", ng_error());
    return 2;
  }
  double worst = 0.0;
  int rc = x->n_params != y->n_params;
  for (int i = 0; !rc && i < x->n_params; i++) {
    rc = x->params[i].numel != y->params[i].numel;
    for (size_t k = 0; !rc && k < x->params[i].numel; k++)
      worst = fmax(worst, fabs((double)x->params[i].data[k] - (double)y->params[i].data[k]));
  }
  printf("%.3g\n", worst);
  ng_model_free(x);
  ng_model_free(y);
  ng_backend_close(be);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "ranks") == 0) return ranks();
  if (argc == 4 && strcmp(argv[1], "compare") == 0) return compare(argv[2], argv[3]);
  ng_comm *one = ng_comm_single();
  CHECK(collectives(one) == 0, "single-process communicator: collectives of one rank", "wrong values");
  CHECK(zero_vs_adamw(one) == 0.0, "ZeRO-1 step on one rank equals AdamW bit for bit", "differs");
  ng_comm_close(one);
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  if (system("mpirun --oversubscribe -np 1 true >/dev/null 2>&1") != 0) {
    printf("skip mpi: mpirun cannot start here\n");
    return TEST_RESULT();
  }
  char cmd[4200];
  // Under `make asan`, LeakSanitizer would report OpenMPI's own allocations
  // that it keeps until exit (hwloc, its plugins): the ranks' leak check is off.
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" "
                            "mpirun --oversubscribe -np 3 %s ranks", argv[0]);
  fflush(stdout);
  int st = system(cmd);
  CHECK(st == 0, "mpi 3 ranks: the ranks ended cleanly", "status %d", st);
  return TEST_RESULT();
}
