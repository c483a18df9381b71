// normgrow tests: the communicators, their choice by the backend, and the
// sharded (ZeRO-1) optimizer step.
//
//   test_mpi               the single-process communicator and ng_comm_bind's
//                          choice here, then this program's `ranks` mode
//                          under mpirun with 3 ranks (one "skip" line when
//                          mpirun cannot start)
//   test_mpi ranks N BACKEND
//                          (under mpirun -np N) the communicator bound to
//                          BACKEND (cuda: NCCL), every collective on its
//                          buffers and on the host against values known in
//                          closed form, and the ZeRO-1 step on BACKEND against
//                          AdamW on the summed gradients; rank 0 reports
//   test_mpi compare A B   the largest |difference| of the parameters of two
//                          checkpoints on stdout (status 1 when their tensors
//                          differ in shape; tests/t_mpi.sh uses it)
//   test_mpi evals A B     the evaluations of two run directories: metrics.jsonl's
//                          records but the steps', diag.jsonl and diag_final.json,
//                          record by record; prints the largest relative difference
//                          of their numbers ("time" left out), whether the residual
//                          points are bit for bit the same (and every key), and the records read
//                          (status 1 when their shapes differ; tests/t_mpi.sh)
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "check.h"
#include "normgrow/checkpoint.h"
#include "normgrow/fileio.h"
#include "normgrow/comm.h"
#include "normgrow/common.h"
#include "normgrow/optim.h"
#include "normgrow/registry.h"

// A backend copy of buf[bytes]; buf itself with `host`.
static void *put(ng_backend *be, bool host, void *buf, size_t bytes) {
  if (host) return buf;
  void *copy = be->alloc(be, bytes);
  be->upload(be, copy, buf, bytes);
  return copy;
}

// buf[bytes] <- copy, which is freed (nothing with `host`).
static void take(ng_backend *be, bool host, void *buf, void *copy, size_t bytes) {
  if (host) return;
  be->download(be, buf, copy, bytes);
  be->free(be, copy);
}

// Each collective on a few values whose sums are exact in fp32: the f32 ones on
// the backend's buffers, allreduce_f64 and broadcast on the host's and the
// backend's; the failures.
static int collectives(ng_comm *c, ng_backend *be) {
  int r = c->rank, n = c->size, bad = 0;
  enum { M = 5 };
  float a[M], send[3 * M * 4], recv[3 * M * 4];
  for (int i = 0; i < M; i++) a[i] = (float)r + 0.5f * (float)i;
  float *ba = put(be, false, a, sizeof a);
  c->allreduce_f32(c, ba, M);
  take(be, false, a, ba, sizeof a);
  // exact here and below: halves and small integers, whose sums fp32 and fp64 hold in any order
  for (int i = 0; i < M; i++) bad += a[i] != (float)(n * (n - 1) / 2) + (float)n * 0.5f * (float)i;
  for (int host = 0; host < 2; host++) {
    double d[2] = {r + 0.25, -1.0}, *bd = put(be, host, d, sizeof d);
    c->allreduce_f64(c, bd, 2);
    take(be, host, d, bd, sizeof d);
    bad += d[0] != n * (n - 1) / 2.0 + 0.25 * n || d[1] != -n;
    int root = n - 1, b = r, *bb = put(be, host, &b, sizeof b);
    c->broadcast(c, bb, sizeof b, root);
    take(be, host, &b, bb, sizeof b);
    bad += b != root;
  }
  float *bs = be->alloc(be, sizeof send), *br = be->alloc(be, sizeof recv);
  for (int k = 0; k < n * M; k++) send[k] = (float)((r + 1) * k);
  be->upload(be, bs, send, sizeof send);
  c->reduce_scatter_f32(c, bs, br, M);
  be->download(be, recv, br, sizeof recv);
  for (int j = 0; j < M; j++) bad += recv[j] != (float)((r * M + j) * n * (n + 1) / 2);
  for (int j = 0; j < M; j++) send[j] = (float)(100 * r + j);
  be->upload(be, bs, send, sizeof send);
  c->allgather_f32(c, bs, br, M);
  be->download(be, recv, br, sizeof recv);
  for (int k = 0; k < n * M; k++) bad += recv[k] != (float)(100 * (k / M) + k % M);
  be->free(be, bs);
  be->free(be, br);
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

// max |host[k] - buf[k]| over n values, buf a backend buffer.
static double host_vs_backend(ng_backend *be, const float *host, const float *buf, size_t n) {
  float *h = malloc(n * sizeof *h);
  be->download(be, h, buf, n * sizeof *h);
  double worst = 0.0;
  for (size_t k = 0; k < n; k++) worst = fmax(worst, fabs((double)host[k] - (double)h[k]));
  free(h);
  return worst;
}

// max |a[k] - b[k]| over n values of two backend buffers.
static double backend_vs_backend(ng_backend *be, const float *a, const float *b, size_t n) {
  float *h = malloc(n * sizeof *h);
  be->download(be, h, a, n * sizeof *h);
  double worst = host_vs_backend(be, h, b, n);
  free(h);
  return worst;
}

// Three ZeRO-1 steps on backend be (gradients differing by rank, one block
// frozen, clipping on) against AdamW on one process with the ranks' gradients
// summed; the largest |difference| of the parameters and moments.
static double zero_vs_adamw(ng_comm *c, ng_backend *be) {
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
    worst = fmax(worst, backend_vs_backend(be, dp->params[i].data, one->params[i].data, dp->params[i].numel));
  float **hm, **hv;  // the moments gathered to the host of rank 0 (a checkpoint's)
  ng_zero_host_moments(dp, z, 0, &hm, &hv);
  ng_zero_whole_moments(dp, o_dp, z);
  for (int i = 0; i < dp->n_params; i++) {
    size_t n = dp->params[i].numel;
    worst = fmax(worst, backend_vs_backend(be, o_dp->m[i], o_one->m[i], n));
    worst = fmax(worst, backend_vs_backend(be, o_dp->v[i], o_one->v[i], n));
    if (hm) worst = fmax(worst, host_vs_backend(be, hm[i], o_one->m[i], n));
    if (hv) worst = fmax(worst, host_vs_backend(be, hv[i], o_one->v[i], n));
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
  return worst;
}

// Under mpirun -np n: the communicator bound to backend `name`, its collectives
// and the ZeRO-1 step there.
static int ranks(int n, const char *name) {
  ng_comm *c = ng_comm_open();
  ng_backend *be = c ? ng_backend_open(name, NG_PREC_FP32) : NULL;
  if (!be || ng_comm_bind(c, be)) {
    printf("FAIL mpi on %s: %s\n", name, ng_error());
    return 1;
  }
  double bad = collectives(c, be), worst = zero_vs_adamw(c, be);
  c->allreduce_f64(c, &bad, 1);
  c->allreduce_f64(c, &worst, 1);  // a sum of non-negative numbers: 0 only when all are
  if (c->rank == 0) {
    char what[200];
    const char *want = be->host_memory ? "mpi" : "nccl";  // the backend's choice
    snprintf(what, sizeof what, "%s %d ranks on %s: allreduce f32/f64, reduce-scatter, all-gather, broadcast, barrier",
             c->name, n, name);
    CHECK(bad == 0 && c->size == n && strcmp(c->name, want) == 0, what,
          "%g wrong values, %d ranks, communicator %s (want %s)", bad, c->size, c->name, want);
    snprintf(what, sizeof what, "%s %d ranks on %s: ZeRO-1 step equals AdamW on the summed gradients (global-norm clipping, a frozen block)",
             c->name, n, name);
    CHECK(worst < 1e-6, what, "differs by %g", worst);
  }
  ng_comm_close(c);
  ng_backend_close(be);
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

// What two evaluations' JSON differ by.
typedef struct {
  double worst;      // largest |a - b| / max(|a|, |b|) of their numbers
  bool points_same;  // every number under "points" equal
  bool shape_same;   // the same keys, arrays and kinds throughout
} json_diff;

// a and b walked together; `points`: under a "points" key.
static void diff_json(const cJSON *a, const cJSON *b, bool points, json_diff *d) {
  if ((a->type & 0xff) != (b->type & 0xff)) {
    d->shape_same = false;
    return;
  }
  if (cJSON_IsNumber(a)) {
    double x = a->valuedouble, y = b->valuedouble, m = fmax(fabs(x), fabs(y));
    if (x != y) d->worst = fmax(d->worst, m > 0.0 ? fabs(x - y) / m : 0.0);
    if (points && x != y) d->points_same = false;
    return;
  }
  if (cJSON_IsString(a)) {
    d->shape_same = d->shape_same && strcmp(a->valuestring, b->valuestring) == 0;
    return;
  }
  const cJSON *x = a->child, *y = b->child;
  for (; x && y; x = x->next, y = y->next) {
    bool keyed = x->string && y->string;
    if (keyed && strcmp(x->string, y->string) != 0) d->shape_same = false;
    if (keyed && strcmp(x->string, "time") == 0) continue;
    diff_json(x, y, points || (keyed && strcmp(x->string, "points") == 0), d);
  }
  if (x || y) d->shape_same = false;
}

// The records of a JSON-lines file (a JSON file: one record) but its steps'; NULL
// when it cannot be read.
static cJSON *records_of(const char *dir, const char *file) {
  char path[1200], *text;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (ng_read_file(path, 1 << 28, &text, NULL) != 0) return NULL;
  cJSON *all = cJSON_CreateArray();
  const char *end = NULL;
  for (const char *at = text; *at;) {
    cJSON *j = cJSON_ParseWithOpts(at, &end, false);
    if (!j) break;
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event");
    if (cJSON_IsString(ev) && strcmp(ev->valuestring, "step") == 0) {
      cJSON_Delete(j);
    } else {
      cJSON_AddItemToArray(all, j);
    }
    at = end + strspn(end, " \n");
  }
  free(text);
  return all;
}

static int compare_evals(const char *a, const char *b) {
  static const char *const files[] = {"metrics.jsonl", "diag.jsonl", "diag_final.json"};
  json_diff d = {0.0, true, true};
  int n = 0;
  for (int i = 0; i < 3; i++) {
    cJSON *x = records_of(a, files[i]), *y = records_of(b, files[i]);
    if (!x || !y) d.shape_same = false;
    if (x && y) diff_json(x, y, false, &d), n += cJSON_GetArraySize(x);
    cJSON_Delete(x);
    cJSON_Delete(y);
  }
  printf("%.3g %d %d\n", d.worst, d.points_same && d.shape_same, n);
  return d.shape_same ? 0 : 1;
}

static int bound;  // calls of fake_bind

static int fake_bind(ng_backend *be, ng_comm *c) {
  (void)be;
  bound++;
  c->name = "bound";
  return 0;
}

// ng_comm_bind's choice, on communicators whose ops are never called: a host
// backend keeps any; a device backend keeps "single" and "nccl", binds "mpi"
// through its bind_comm (cuda: NCCL), and without one is refused in one line.
static void test_bind(ng_backend *cpu) {
  ng_backend dev = *cpu;
  dev.name = "fakegpu";
  dev.host_memory = false;
  dev.bind_comm = NULL;
  ng_comm *one = ng_comm_single(), mpi = *one, nccl = *one;
  mpi.kind = NG_COMM_MPI, mpi.name = "mpi";
  nccl.kind = NG_COMM_NCCL, nccl.name = "nccl";
  CHECK(ng_comm_bind(one, cpu) == 0 && ng_comm_bind(&mpi, cpu) == 0 && one->kind == NG_COMM_SINGLE &&
            mpi.kind == NG_COMM_MPI && strcmp(mpi.name, "mpi") == 0,
        "comm bind: a host-memory backend keeps single and mpi", "changed");
  CHECK(ng_comm_bind(one, &dev) == 0 && one->kind == NG_COMM_SINGLE,
        "comm bind: a device backend in one process keeps single", "changed");
  int rc = ng_comm_bind(&mpi, &dev);
  CHECK(rc == -1 && strstr(ng_error(), "\"fakegpu\"") &&
            mpi.kind == NG_COMM_MPI,
        "comm bind: a device backend with no communicator under mpirun is refused in one line",
        "status %d, \"%s\"", rc, ng_error());
  dev.bind_comm = fake_bind;
  CHECK(ng_comm_bind(&mpi, &dev) == 0 && bound == 1 && strcmp(mpi.name, "bound") == 0,
        "comm bind: a device backend under mpirun binds through its bind_comm", "%d calls", bound);
  CHECK(ng_comm_bind(&nccl, &dev) == 0 && bound == 1, "comm bind: a bound communicator is kept",
        "bound again");
  ng_comm_close(one);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "ranks") == 0) return ranks(atoi(argv[2]), argv[3]);
  if (argc == 4 && strcmp(argv[1], "compare") == 0) return compare(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "evals") == 0) return compare_evals(argv[2], argv[3]);
  ng_backend *cpu = ng_backend_open("cpu", NG_PREC_FP32);
  ng_comm *one = ng_comm_single();
  CHECK(collectives(one, cpu) == 0, "single-process communicator: collectives of one rank", "wrong values");
  // exact: the gradients are multiples of 1/8 (their norm's sum is exact in any
  // order) and one rank's shard is the whole tensor: the same element-wise AdamW
  CHECK(zero_vs_adamw(one, cpu) == 0.0, "ZeRO-1 step on one rank equals AdamW bit for bit", "differs");
  ng_comm_close(one);
  test_bind(cpu);
  ng_backend_close(cpu);
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
                            "mpirun --oversubscribe -np 3 %s ranks 3 cpu", argv[0]);
  fflush(stdout);
  int st = system(cmd);
  CHECK(st == 0, "mpi 3 ranks: the ranks ended cleanly", "status %d", st);
  return TEST_RESULT();
}
