// normgrow: the training loop of one arm: distillation (or pretraining), the
// depth-growth curriculum, evaluation, checkpoints, metrics and resume.
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/comm.h"
#include "normgrow/common.h"
#include "normgrow/data.h"
#include "normgrow/diag.h"
#include "normgrow/fileio.h"
#include "normgrow/grow.h"
#include "normgrow/lr_schedule.h"
#include "normgrow/plan.h"
#include "normgrow/registry.h"
#include "normgrow/run.h"
#include "normgrow/train.h"
#include "normgrow/rundir.h"
#include "normgrow/safetensors.h"
#include "normgrow/topk.h"

typedef struct {
  double ce, kd, teacher_ce;
} eval_result;

typedef struct {
  ng_run_config rc;
  ng_backend *be;
  ng_shard train, val;
  ng_model *teacher, *student;
  ng_adamw *opt;
  ng_comm *comm;   // the ranks of a data-parallel run (one: "single")
  ng_zero *zero;   // the sharded optimizer step of a run of several ranks
  ng_acts *tacts, *sacts, *eval_acts;
  ng_train_state st;
  int32_t *h_tokens, *h_targets, *tokens, *targets;  // host and backend [B*T]
  ng_topk_cache cache_train, cache_val;               // when the run uses caches
  int32_t *h_ids, *ids;                               // [B*T, k] host, backend
  float *h_vals, *vals, *h_lse, *lse, *h_rest, *rest; // [B*T, k], [B*T], [B*T]
  int64_t *windows;                                   // [B]
  ng_epoch_order epochs;  // the windows' order under data.sampling "epoch"
  double t_start, last_report, last_loss;
  eval_result last_eval;  // of the latest evaluation (valid once evaluated)
  bool evaluated;
  int64_t steps_total, steps_at_start;
  int64_t stop_after;  // stop (as if killed) after the checkpoint of this step; 0 = never
  ng_rundir dir;        // rank 0's: the run directory, locked for the run's life
} trainer;

// ---------------------------------------------------------------- setup

static int open_data(trainer *t) {
  const ng_run_config *rc = &t->rc;
  if (ng_shard_open(&t->train, rc->train_path) || ng_shard_open(&t->val, rc->val_path)) return -1;
  for (const ng_shard *s = &t->train; s; s = s == &t->train ? &t->val : NULL) {
    // A model's vocabulary may be padded past the tokenizer's (the shard's):
    // the loss then runs over the shard's ids only (ng_loss_params.vocab_used).
    if (s->vocab_size > rc->model.vocab_size || s->vocab_size != t->train.vocab_size)
      return ng_fail("%s: vocabulary of %u tokens, but model.vocab_size is %lld (and %s has %u)",
                     s->path, s->vocab_size, (long long)rc->model.vocab_size, t->train.path,
                     t->train.vocab_size);
    if (s->n_tokens < (uint64_t)rc->seq + 1)
      return ng_fail("%s: %llu tokens, fewer than one window of seq + 1 = %lld", s->path,
                     (unsigned long long)s->n_tokens, (long long)rc->seq + 1);
  }
  return 0;
}

static int open_caches(trainer *t) {
  const ng_run_config *rc = &t->rc;
  if (!rc->use_cache) return 0;
  if (ng_topk_open(&t->cache_train, rc->cache_train, &t->train) ||
      ng_topk_open(&t->cache_val, rc->cache_val, &t->val))
    return -1;
  for (const ng_topk_cache *c = &t->cache_train; c; c = c == &t->cache_train ? &t->cache_val : NULL) {
    if (c->seq != rc->seq) return ng_fail("%s: windows of %u tokens, data.seq is %lld", c->path, c->seq, (long long)rc->seq);
    if (c->temperature != rc->loss.temperature)
      return ng_fail("%s: made at temperature %g, loss.temperature is %g", c->path, c->temperature, rc->loss.temperature);
  }
  if (t->cache_train.k != t->cache_val.k)
    return ng_fail("%s: k %u differs from %s's %u", rc->cache_val, t->cache_val.k, rc->cache_train, t->cache_train.k);
  return 0;
}

// The windows training batches are drawn from by index: a teacher cache's,
// or the shard's non-overlapping ones (data.sampling "epoch").
static int64_t train_windows(const trainer *t) {
  return t->rc.use_cache ? (int64_t)t->cache_train.windows : ng_epoch_windows(&t->train, t->rc.seq);
}

// Host memory of the epoch order (one int64 per window).
static double epoch_order_bytes(const trainer *t) {
  return t->rc.sampling == NG_SAMPLE_EPOCH ? 8.0 * (double)train_windows(t) : 0.0;
}

// Before anything is allocated by the run's sizes: each stage's host memory
// within the machine's. On every backend the host holds a checkpoint's copy of
// the weights and AdamW moments (plan.h) and the batches (token ids and
// targets, and top-k cache entries); a backend in host memory holds all of the
// plan's total. (A teacher is as large as the tensors its files hold.)
static int check_run_memory(const trainer *t) {
  const ng_run_config *rc = &t->rc;
  ng_plan_device dev = {.tflops = 1.0, .memory_gib = 1.0, .devices = 1, .bytes_per_param = 4};
  double N = (double)rc->batch * (double)rc->seq, k = rc->use_cache ? t->cache_train.k : 0.0;
  for (int s = 0; s < rc->n_stages; s++) {
    ng_plan_stage p;
    ng_plan_stage_of(rc, s, NULL, &dev, &p);
    char what[320];
    snprintf(what, sizeof what,
             "%s: stage %d (model.hidden_size %lld, model.intermediate_size %lld, model.vocab_size %lld "
             "at depth %lld; data.batch %lld x data.seq %lld%s)",
             rc->name, s + 1, (long long)rc->model.hidden_size,
             (long long)rc->model.intermediate_size, (long long)rc->model.vocab_size,
             (long long)rc->stages[s].depth, (long long)rc->batch, (long long)rc->seq,
             rc->use_cache ? " x the teacher cache's k" : "");
    double bytes = (double)(t->be->host_memory ? p.total : p.checkpoint) + N * (8.0 + (k > 0 ? 8.0 * k + 8.0 : 0.0)) +
                   epoch_order_bytes(t);
    if (ng_check_memory(bytes, what)) return -1;
  }
  return 0;
}

static int load_teacher(trainer *t) {
  if (!t->rc.distill || !t->rc.teacher_path[0]) return 0;
  if (ng_model_open(t->rc.teacher_path, t->be, false, &t->teacher)) return ng_fail_prefix("teacher");
  if (t->rc.teacher_bf16) ng_model_hold_bf16(t->teacher);  // when its blocks are bf16 numbers
  if (t->teacher->cfg.vocab_size != t->rc.model.vocab_size)
    return ng_fail("teacher %s: vocabulary of %lld tokens, the student's is %lld", t->rc.teacher_path,
                   (long long)t->teacher->cfg.vocab_size, (long long)t->rc.model.vocab_size);
  return 0;
}

// Fresh student at the first stage's depth: random, or copied from the teacher.
static int init_student(trainer *t) {
  const ng_run_config *rc = &t->rc;
  ng_model_config cfg = ng_stage_model(rc, 0);
  ng_rng init;
  ng_rng_seed(&init, rc->seed ^ 0x696e6974ULL);  // "init": a stream of its own
  t->student = ng_model_create(t->be, &cfg, true);
  ng_model_init_random(t->student, &init, rc->init_std);
  if (rc->deepnorm_beta) ng_model_deepnorm_init(t->student, rc->model.num_hidden_layers);  // beta at the final depth
  for (int64_t l = 0; l < rc->n_init_layers; l++) {
    if (rc->init_layers[l] >= t->teacher->cfg.num_hidden_layers)
      return ng_fail("init.layers[%lld]: the teacher has %lld layers", (long long)l,
                     (long long)t->teacher->cfg.num_hidden_layers);
    if (ng_model_copy_block(t->student, l, t->teacher, rc->init_layers[l])) return ng_fail_prefix("init.layers");
  }
  if (rc->embeddings_from_teacher && ng_model_copy_io(t->student, t->teacher))
    return ng_fail_prefix("init.embeddings");
  t->opt = ng_adamw_create(t->student);
  t->st.gate_origin = ng_xmalloc((size_t)cfg.num_hidden_layers * sizeof(int64_t));
  for (int64_t l = 0; l < cfg.num_hidden_layers; l++) t->st.gate_origin[l] = -1;
  t->st.gate_steps = rc->gate_steps;
  ng_rng_seed(&t->st.rng, rc->seed);
  return 0;
}

// Rows of a loss chunk (train.loss_chunk_tokens, or the default for the model).
static int64_t loss_chunk(const ng_run_config *rc) {
  int64_t N = rc->micro_batch * rc->seq;
  return rc->loss_chunk > 0 ? rc->loss_chunk : ng_loss_chunk_default(&rc->model, N);
}

static void alloc_batches(trainer *t) {
  size_t N = (size_t)(t->rc.batch * t->rc.seq), bytes = N * sizeof(int32_t);
  t->h_tokens = ng_xmalloc(bytes);
  t->h_targets = ng_xmalloc(bytes);
  t->tokens = t->be->alloc(t->be, bytes);
  t->targets = t->be->alloc(t->be, bytes);
  if (t->rc.use_cache) {
    size_t k = t->cache_train.k;
    t->h_ids = ng_xmalloc(N * k * sizeof(int32_t));
    t->h_vals = ng_xmalloc(N * k * sizeof(float));
    t->h_lse = ng_xmalloc(N * sizeof(float));
    t->h_rest = ng_xmalloc(N * sizeof(float));
    t->ids = t->be->alloc(t->be, N * k * sizeof(int32_t));
    t->vals = t->be->alloc(t->be, N * k * sizeof(float));
    t->lse = t->be->alloc(t->be, N * sizeof(float));
    t->rest = t->be->alloc(t->be, N * sizeof(float));
  } else if (t->teacher) {
    ng_acts_options o = {.chunk = loss_chunk(&t->rc)};
    t->tacts = ng_acts_create_with(t->teacher, t->rc.micro_batch, t->rc.seq, &o);
  }
  if (t->rc.use_cache || t->rc.sampling == NG_SAMPLE_EPOCH)
    t->windows = ng_xmalloc((size_t)t->rc.batch * sizeof(int64_t));
  if (t->rc.sampling == NG_SAMPLE_EPOCH)  // "epoch": a stream of its own
    ng_epoch_order_init(&t->epochs, t->rc.seed ^ 0x65706f6368ULL, train_windows(t));
}

// Activations of one micro-batch; they follow the student's depth.
static void student_acts(trainer *t) {
  const ng_run_config *rc = &t->rc;
  ng_acts_free(t->student, t->sacts);
  ng_acts_free(t->student, t->eval_acts);
  ng_acts_options train = {.for_backward = true, .recompute = rc->recompute, .chunk = loss_chunk(rc)};
  ng_acts_options eval = {.chunk = loss_chunk(rc)};
  t->sacts = ng_acts_create_with(t->student, rc->micro_batch, rc->seq, &train);
  t->eval_acts = ng_acts_create_with(t->student, rc->micro_batch, rc->seq, &eval);
}

static void upload_batch(trainer *t) {
  size_t N = (size_t)(t->rc.batch * t->rc.seq), bytes = N * sizeof(int32_t);
  t->be->upload(t->be, t->tokens, t->h_tokens, bytes);
  t->be->upload(t->be, t->targets, t->h_targets, bytes);
}

// A batch of the cache's windows (their index in t->windows) with its teacher
// entries, uploaded.
static int cache_batch(trainer *t, const ng_topk_cache *c, const ng_shard *s) {
  size_t N = (size_t)(t->rc.batch * t->rc.seq), k = c->k;
  if (ng_topk_batch(c, s, t->windows, t->rc.batch, t->h_tokens, t->h_targets, t->h_ids,
                    t->h_vals, t->h_lse, t->h_rest))
    return -1;
  upload_batch(t);
  t->be->upload(t->be, t->ids, t->h_ids, N * k * sizeof(int32_t));
  t->be->upload(t->be, t->vals, t->h_vals, N * k * sizeof(float));
  t->be->upload(t->be, t->lse, t->h_lse, N * sizeof(float));
  t->be->upload(t->be, t->rest, t->h_rest, N * sizeof(float));
  return 0;
}

// Micro-batch j of the current batch: its rows of tokens and targets, and of
// the top-k cache entries (a run with caches).
typedef struct {
  const int32_t *tokens, *targets;
  ng_loss_teacher cache;
} micro_batch;

static micro_batch micro_of(const trainer *t, int64_t j) {
  int64_t n = t->rc.micro_batch * t->rc.seq, row0 = j * n, k = t->cache_train.k;
  micro_batch mb = {t->tokens + row0, t->targets + row0, {0}};
  if (t->rc.use_cache)
    mb.cache = (ng_loss_teacher){.topk_ids = t->ids + row0 * k, .topk_vals = t->vals + row0 * k,
                                 .topk_lse = t->lse + row0, .topk_rest = t->rest + row0, .k = k};
  return mb;
}

static int64_t n_micro(const trainer *t) { return t->rc.batch / t->rc.micro_batch; }

// Rank 0 of a data-parallel run (the only one of one process) logs and writes
// the run's files; evaluations and diagnostics are every rank's.
static bool is_root(const trainer *t) { return t->comm->rank == 0; }

// This rank's micro-batches [*j0, *j1) of a training batch: every rank draws
// the whole batch and takes its even share of the micro-batches.
static void my_micro(const trainer *t, int64_t *j0, int64_t *j1) {
  int64_t m = n_micro(t), r = t->comm->rank, n = t->comm->size;
  *j0 = m * r / n;
  *j1 = m * (r + 1) / n;
}

// The loss parameters of the current batch: averaged over its valid targets.
static ng_loss_params batch_loss_params(const trainer *t) {
  const ng_run_config *rc = &t->rc;
  int64_t N = rc->batch * rc->seq, n_valid = 0;
  for (int64_t i = 0; i < N; i++) n_valid += t->h_targets[i] >= 0;
  return (ng_loss_params){rc->loss.kd_weight, rc->loss.temperature, t->train.vocab_size, n_valid,
                          rc->loss.divergence, rc->loss.beta};
}

// The chunked loss of the last forward of the student's acts a on micro-batch
// mb against the teacher: its forward in t->tacts, the cache's rows, or none;
// its ce and kd (shares of the batch's) are added into *ce, *kd.
static void loss_of(trainer *t, ng_acts *a, const micro_batch *mb, ng_loss_params lp, bool grad,
                    double *ce, double *kd) {
  ng_loss_teacher full = {.model = t->teacher, .acts = t->tacts}, none = {0};
  const ng_loss_teacher *teacher = t->rc.use_cache ? &mb->cache : t->tacts ? &full : &none;
  double c, k;
  int64_t nv;
  ng_model_loss(t->student, a, teacher, mb->targets, lp, grad, &c, &k, &nv);
  *ce += c;
  *kd += k;
}

// ---------------------------------------------------------------- logging

// Wall-clock time, seconds since the Unix epoch (UTC), to the millisecond.
static double wall_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000000) / 1e3;
}

// The fields every record of metrics.jsonl starts with (docs/runs.md).
static cJSON *record(const trainer *t, const char *event) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "event", event);
  cJSON_AddNumberToObject(j, "step", (double)t->st.step);
  cJSON_AddNumberToObject(j, "time", wall_clock());
  cJSON_AddNumberToObject(j, "stage", (double)t->st.stage + 1);  // numbered from 1
  cJSON_AddNumberToObject(j, "depth", (double)t->student->cfg.num_hidden_layers);
  cJSON_AddNumberToObject(j, "tokens", (double)t->st.tokens);
  cJSON_AddNumberToObject(j, "layer_tokens", (double)t->st.layer_tokens);
  cJSON_AddNumberToObject(j, "flops", t->st.flops);
  return j;
}

static void progress(trainer *t, double loss, bool force) {
  double tnow = ng_now();
  bool tty = isatty(STDERR_FILENO);
  if (!is_root(t)) return;
  if (!force && tnow - t->last_report < (tty ? 0.2 : 10.0)) return;
  t->last_report = tnow;
  int64_t done = t->st.step - t->steps_at_start, left = t->steps_total - t->st.step;
  double rate = done > 0 ? (double)done / (tnow - t->t_start) : 0.0;
  double eta = rate > 0 ? (double)left / rate : 0.0;
  char val[48] = "";
  if (t->evaluated) snprintf(val, sizeof val, " val CE %.4f", t->last_eval.ce);
  fprintf(stderr, "%s%s: stage %lld/%d depth %lld step %lld/%lld loss %.4f%s %.0f tok/s ETA %dm%02ds%s",
          tty ? "\r" : "", t->rc.name, (long long)t->st.stage + 1, t->rc.n_stages,
          (long long)t->student->cfg.num_hidden_layers, (long long)t->st.step,
          (long long)t->steps_total, loss, val, rate * (double)(t->rc.batch * t->rc.seq),
          (int)eta / 60, (int)eta % 60, tty ? "\033[K" : "\n");
}

// ---------------------------------------------------------------- evaluation


// The teacher's forward of micro-batch mb (none with caches or in
// pretraining); with teacher_ce its own CE on mb is added into *teacher_ce.
static void teacher_forward(trainer *t, const micro_batch *mb, ng_loss_params lp,
                            double *teacher_ce) {
  if (t->rc.use_cache || !t->teacher) return;
  ng_model_forward(t->teacher, t->tacts, mb->tokens, NULL);
  if (teacher_ce) {
    double ce, kd;
    int64_t nv;
    ng_model_loss(t->teacher, t->tacts, NULL, mb->targets, lp, false, &ce, &kd, &nv);
    *teacher_ce += ce;
  }
}

// Validation batch b: the fixed windows of the shard, or of the val cache.
static int eval_batch(trainer *t, int64_t b) {
  const ng_run_config *rc = &t->rc;
  if (!rc->use_cache) {
    ng_batch_fixed(&t->val, b, rc->batch, rc->seq, t->h_tokens, t->h_targets);
    upload_batch(t);
    return 0;
  }
  for (int64_t r = 0; r < rc->batch; r++)
    t->windows[r] = (int64_t)(((uint64_t)b * (uint64_t)rc->batch + (uint64_t)r) % t->cache_val.windows);
  return cache_batch(t, &t->cache_val, &t->val);
}

// Student CE and KD, and the teacher's CE, over the fixed validation batches.
// Every rank takes its share of their micro-batches (ng_diag_share over all of
// them, batch by batch in order); the sums of the ranks' shares are the result.
static int evaluate(trainer *t, eval_result *r) {
  const ng_run_config *rc = &t->rc;
  int64_t m = n_micro(t), first, end;
  ng_diag_share(rc->eval_batches * m, t->comm->rank, t->comm->size, &first, &end);
  double sums[3] = {0.0, 0.0, 0.0};  // ce, kd, teacher_ce
  for (int64_t b = first / m; b < rc->eval_batches && b * m < end; b++) {
    if (eval_batch(t, b)) return -1;
    ng_loss_params lp = batch_loss_params(t);
    double ce = 0.0, kd = 0.0;
    for (int64_t j = b * m < first ? first - b * m : 0; j < m && b * m + j < end; j++) {
      micro_batch mb = micro_of(t, j);
      teacher_forward(t, &mb, lp, &sums[2]);
      ng_model_forward(t->student, t->eval_acts, mb.tokens, NULL);
      loss_of(t, t->eval_acts, &mb, lp, false, &ce, &kd);
    }
    sums[0] += ce / (double)rc->eval_batches;
    sums[1] += kd / (double)rc->eval_batches;
  }
  t->comm->allreduce_f64(t->comm, sums, 3);
  *r = (eval_result){sums[0], sums[1], sums[2] / (double)rc->eval_batches};
  return 0;
}

// Residual-stream diagnostics (and with `ablation` the block removals) over
// the validation batches, shared by the ranks (diag.h).
static cJSON *diagnose(trainer *t, bool ablation) {
  const ng_run_config *rc = &t->rc;
  // micro-batches: fixed batch b's rows are micro-batches b m .. b m + m - 1
  ng_diag_input in = {&t->val, rc->eval_batches * n_micro(t), rc->micro_batch, rc->seq,
                      t->tacts ? t->teacher : NULL,
                      {rc->loss.kd_weight, rc->loss.temperature, t->val.vocab_size, 0, rc->loss.divergence, rc->loss.beta},
                      loss_chunk(rc)};
  ng_diag_options o = {(int32_t)t->val.separator, rc->n_structural, rc->structural_tokens, 5};
  return ng_diag_json_ranks(t->student, &in, &o, ablation, t->st.step, t->st.tokens, t->comm);
}

static int log_eval(trainer *t) {
  eval_result r;
  if (evaluate(t, &r)) return -1;
  cJSON *j = record(t, "eval");
  cJSON_AddNumberToObject(j, "val_ce", r.ce);
  if (t->rc.distill) cJSON_AddNumberToObject(j, "val_kd", r.kd);
  if (t->tacts) cJSON_AddNumberToObject(j, "teacher_ce", r.teacher_ce);
  ng_rundir_log(&t->dir, NG_LOG_METRICS, j);
  ng_rundir_log(&t->dir, NG_LOG_DIAG, diagnose(t, false));
  t->last_eval = r;
  t->evaluated = true;
  progress(t, t->last_loss, true);  // every evaluation shows in the progress line
  return 0;
}

// <run_dir>/diag_final.json: the diagnostics with the ablation, at the end.
static int write_final_diag(trainer *t) {
  char *path = ng_rundir_path(t->rc.run_dir, NG_RUN_DIAG_FINAL);
  cJSON *j = diagnose(t, true);  // every rank takes part
  char *text = ng_json_print(j, true);
  cJSON_Delete(j);
  int rc = is_root(t) ? ng_write_text_atomic(path, text) : 0;
  free(text);
  free(path);
  return rc;
}

// ---------------------------------------------------------------- growth

// diag.jsonl's record of a growth (diag.h): the grown model's diagnostics with
// "event": "growth" and the new blocks (numbered from 1; block b receives
// hidden.<b-1>); from_old [depth] as ng_model_grow fills it.
static void log_growth_diag(trainer *t, const int64_t *from_old) {
  cJSON *j = diagnose(t, false), *fresh = cJSON_CreateArray();
  for (int64_t b = 0; b < t->student->cfg.num_hidden_layers; b++)
    if (from_old[b] < 0) cJSON_AddItemToArray(fresh, cJSON_CreateNumber((double)b + 1));
  cJSON_AddStringToObject(j, "event", "growth");
  cJSON_AddItemToObject(j, "new_blocks", fresh);
  ng_rundir_log(&t->dir, NG_LOG_DIAG, j);
}

// growth.rescale_stream: the student's stream (and its moments) multiplied by
// c = 1 / its RMS over the first fixed batch of the training shard, which
// every rank draws alike; returns c.
static double rescale_stream(trainer *t) {
  const ng_run_config *rc = &t->rc;
  int64_t N = rc->micro_batch * rc->seq;
  size_t bytes = (size_t)N * sizeof(int32_t);
  int32_t *tokens = ng_xmalloc(bytes), *targets = ng_xmalloc(bytes);
  ng_batch_fixed(&t->train, 0, rc->micro_batch, rc->seq, tokens, targets);
  int32_t *dev = t->be->alloc(t->be, bytes);
  t->be->upload(t->be, dev, tokens, bytes);
  double c = 1.0 / ng_stream_rms(t->student, dev, rc->micro_batch, rc->seq);
  ng_rescale_stream(t->student, t->opt, c);
  t->be->free(t->be, dev);
  free(tokens);
  free(targets);
  return c;
}

// The placement of each block of m, by name (a growth record's block_placements).
static cJSON *block_placements(const ng_model *m) {
  cJSON *list = cJSON_CreateArray();
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
    cJSON_AddItemToArray(list, cJSON_CreateString(ng_norm_placement_name(ng_block_placement(&m->cfg, l))));
  return list;
}

static int grow(trainer *t, int stage) {
  const ng_run_config *rc = &t->rc;
  int64_t d = t->student->cfg.num_hidden_layers, nd = rc->stages[stage].depth;
  eval_result before = {0}, after = {0};
  if (evaluate(t, &before)) return -1;
  if (t->zero) ng_zero_whole_moments(t->student, t->opt, t->zero);  // every rank regrows
  double stream_scale = rc->rescale_stream ? rescale_stream(t) : 1.0;
  ng_rng init;
  ng_rng_seed(&init, rc->seed ^ (0x67726f77ULL + (uint64_t)stage));  // "grow" + stage
  ng_grow_rule rule = {rc->grow_position, rc->grow_init, rc->init_std, &init, t->teacher,
                       rc->grow_teacher_layers + (d - rc->stages[0].depth), rc->depth_scaled_init,
                       rc->hybrid_growth ? &rc->new_block_placement : NULL};
  ng_model *grown;
  int64_t *from_old = ng_xmalloc((size_t)nd * sizeof(int64_t));
  if (ng_model_grow(t->student, nd, &rule, &grown, from_old)) {
    free(from_old);
    return -1;
  }
  ng_adamw *opt = ng_adamw_regrow(t->student, t->opt, grown, from_old, rc->reset_state_on_growth);
  int64_t *origin = ng_xmalloc((size_t)nd * sizeof(int64_t));
  for (int64_t j = 0; j < nd; j++)
    origin[j] = from_old[j] >= 0 ? t->st.gate_origin[from_old[j]]
                                 : (rc->grow_init == NG_INIT_GATE ? t->st.step : -1);
  ng_acts_free(t->student, t->sacts);
  ng_acts_free(t->student, t->eval_acts);
  t->sacts = t->eval_acts = NULL;
  ng_adamw_free(t->student, t->opt);
  ng_model_free(t->student);
  free(t->st.gate_origin);
  t->student = grown;
  t->opt = opt;
  if (t->zero) ng_zero_shard_moments(t->student, t->opt, t->zero);
  t->st.gate_origin = origin;
  for (int64_t j = 0; j < nd; j++) ng_model_freeze(t->student, j, rc->stages[stage].freeze_existing && from_old[j] >= 0);
  student_acts(t);
  log_growth_diag(t, from_old);
  free(from_old);
  if (evaluate(t, &after)) return -1;
  cJSON *j = record(t, "growth");
  cJSON_AddNumberToObject(j, "depth_before", (double)d);
  cJSON_AddNumberToObject(j, "val_ce_before", before.ce);
  cJSON_AddNumberToObject(j, "val_ce_after", after.ce);
  if (rc->rescale_stream) cJSON_AddNumberToObject(j, "stream_scale", stream_scale);
  if (rc->hybrid_growth) cJSON_AddItemToObject(j, "block_placements", block_placements(t->student));
  if (rc->distill) {
    cJSON_AddNumberToObject(j, "val_kd_before", before.kd);
    cJSON_AddNumberToObject(j, "val_kd_after", after.kd);
  }
  ng_rundir_log(&t->dir, NG_LOG_METRICS, j);
  if (is_root(t))
    fprintf(stderr, "%s%s: grew %lld -> %lld blocks at step %lld: val CE %.4f -> %.4f\n",
            isatty(STDERR_FILENO) ? "\n" : "", rc->name, (long long)d, (long long)nd,
            (long long)t->st.step, before.ce, after.ce);
  const char *change = rc->hybrid_growth ? ng_grow_hybrid_change(&t->student->cfg, &rule) : NULL;
  if (is_root(t) && change)
    fprintf(stderr, "%s: the growth to %lld blocks changed the function: %s\n", rc->name, (long long)nd,
            change);
  return 0;
}

// ---------------------------------------------------------------- one step

// FLOPs of one step, by the rule of plan.h (which `normgrow plan` uses too).
static double step_flops(const trainer *t) {
  return ng_model_step_flops(t->student, t->tacts ? t->teacher : NULL, t->rc.batch, t->rc.seq);
}

// The indices of the next training batch's windows (t->windows): drawn from
// the generator (one draw each), or the next ones of the epoch order (the
// run's tokens so far / seq windows are used).
static void draw_windows(trainer *t) {
  const ng_run_config *rc = &t->rc;
  int64_t first = t->st.tokens / rc->seq, n = train_windows(t);
  for (int64_t b = 0; b < rc->batch; b++) {
    switch (rc->sampling) {
      case NG_SAMPLE_UNIFORM: t->windows[b] = (int64_t)ng_rng_below(&t->st.rng, (uint64_t)n); break;
      case NG_SAMPLE_EPOCH: t->windows[b] = ng_epoch_window(&t->epochs, first + b); break;
    }
  }
}

// The next training batch: from a teacher cache's windows, the shard's
// windows in epoch order, or (uniform, no cache) windows starting anywhere.
static int next_batch(trainer *t) {
  const ng_run_config *rc = &t->rc;
  if (rc->use_cache) {
    draw_windows(t);
    return cache_batch(t, &t->cache_train, &t->train);
  }
  if (rc->sampling == NG_SAMPLE_EPOCH) {
    draw_windows(t);
    ng_batch_windows(&t->train, t->windows, rc->batch, rc->seq, t->h_tokens, t->h_targets);
  } else if (ng_batch_sample(&t->train, &t->st.rng, rc->batch, rc->seq, t->h_tokens, t->h_targets)) {
    return -1;
  }
  upload_batch(t);
  return 0;
}

// AdamW on one process; ZeRO stage 1 over the ranks of a data-parallel run.
static double optimizer_step(trainer *t, double lr) {
  if (!t->zero) return ng_adamw_step(t->student, t->opt, &t->rc.optim, lr);
  return ng_zero_step(t->student, t->opt, t->zero, &t->rc.optim, lr);
}

// ---------------------------------------------------------------- non-finite values

// The first parameter of m whose weights (with `grads`: whose gradient, of a
// trainable parameter) hold a NaN or an Inf; NULL when none does. One sumsq
// per tensor: a sync point.
static const ng_param *first_nonfinite(const ng_model *m, bool grads) {
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    const float *x = grads ? (p->frozen ? NULL : p->grad) : p->data;
    if (x && !isfinite(m->be->sumsq(m->be, x, (int64_t)p->numel))) return p;
  }
  return NULL;
}

// A training CE (nats per token) above this many times ln(vocabulary), the CE
// of a uniform guess, is no sane training: a weight has run away while every
// number stays finite (docs/runs.md).
#define CE_BOUND_UNIFORMS 100.0

// Stops the run at step t->st.step, which diverged (`why`): its "diverged"
// record ends metrics.jsonl, and one line says why and what to do: `fix` in
// config.json, then resume from the last checkpoint, or start again without
// one. Every rank of an MPI run stops at this step (each sees the same loss,
// gradient norm and weights): rank 0's line says so, the others' messages are
// empty. NG_TRAIN_DIVERGED.
static int stop_diverged(trainer *t, const char *why, const char *fix) {
  const char *d = t->rc.run_dir;
  cJSON *j = record(t, "diverged");
  cJSON_AddStringToObject(j, "why", why);
  ng_rundir_log(&t->dir, NG_LOG_METRICS, j);
  if (!is_root(t)) {
    ng_fail("%s", "");
    return NG_TRAIN_DIVERGED;
  }
  bool ckpt = ng_rundir_has(d, NG_RUN_CHECKPOINT);
  ng_fail("%s: step %lld (stage %lld): %s; stopped, nothing of the step written but its \"diverged\" record in "
          "metrics.jsonl; %s%s%s: %s in %s/config.json and `normgrow train %s%s%s`",
          t->rc.name, (long long)t->st.step, (long long)t->st.stage + 1, why,
          ckpt ? "the last checkpoint in " : "no checkpoint yet", ckpt ? d : "", ckpt ? " stands" : "", fix, d,
          ckpt ? "--resume " : "", d, ckpt ? "" : "/config.json --force");
  return NG_TRAIN_DIVERGED;
}

// After the update of step t->st.step: a non-finite loss, gradient norm or
// weight, or a CE above the bound, stops the run (stop_diverged) before
// anything else of the step is logged or written, with one line naming the
// step, the stage and what went wrong (the KD term, when the CE is finite and
// the loss is not; else the first non-finite tensor) and what to change.
static int check_sane(trainer *t, double loss, double ce, double gnorm) {
  bool bad = !isfinite(loss) || !isfinite(gnorm);
  const ng_param *g = bad ? first_nonfinite(t->student, true) : NULL;
  const ng_param *w = g ? NULL : first_nonfinite(t->student, false);
  double bound = CE_BOUND_UNIFORMS * log((double)t->train.vocab_size);
  char why[320];
  bool rkl_cache = false;  // the fix is another divergence or teacher, not a lower lr
  if (!isfinite(loss) && isfinite(ce)) {
    // The reverse KL between a top-k cache's buckets is infinite where the
    // cache leaves the teacher's rest bucket empty (docs/golden-contract.md).
    rkl_cache = t->rc.loss.divergence == NG_DIV_REVERSE_KL && t->rc.cache_train[0];
    snprintf(why, sizeof why, "the KD term is not finite (loss %g, CE %g)%s", loss, ce,
             rkl_cache ? ": the reverse KL from a top-k cache is infinite at a position whose cache "
                         "leaves no teacher mass outside its k ids"
                       : "");
  } else if (bad || w) {
    char what[160] = "the loss";
    if (g) snprintf(what, sizeof what, "the gradient of %s", g->name);
    if (w) snprintf(what, sizeof what, "%s (updated)", w->name);
    snprintf(why, sizeof why, "non-finite training (loss %g, grad norm %g), first in %s", loss, gnorm,
             what);
  } else if (ce > bound) {
    snprintf(why, sizeof why,
             "training CE %g nats per token, above %g x ln(vocabulary %u) = %.1f (a uniform guess "
             "costs ln %u): a weight has run away",
             ce, CE_BOUND_UNIFORMS, t->train.vocab_size, bound, t->train.vocab_size);
  } else {
    return 0;
  }
  return stop_diverged(t, why, rkl_cache ? "distil with loss.divergence forward_kl or jsd, or from the full teacher,"
                                         : "lower lr");
}

// One step of training and its record: 0, -1 on an error, NG_TRAIN_DIVERGED
// when check_sane stops the run.
static int train_step(trainer *t) {
  const ng_run_config *rc = &t->rc;
  int64_t N = rc->batch * rc->seq;
  double t0 = ng_now(), lr = ng_lr_at(rc, (int)t->st.stage, t->st.step_in_stage * N), ce, kd;
  if (next_batch(t)) return -1;
  ng_set_gates(t->student, &t->st, t->st.step + 1);  // growth gates ramp from 0 to 1
  ng_loss_params lp = batch_loss_params(t);
  ce = kd = 0.0;
  ng_model_zero_grad(t->student);
  int64_t j0, j1;
  my_micro(t, &j0, &j1);
  for (int64_t j = j0; j < j1; j++) {  // gradients add up over the micro-batches
    micro_batch mb = micro_of(t, j);
    teacher_forward(t, &mb, lp, NULL);
    ng_model_forward(t->student, t->sacts, mb.tokens, NULL);
    loss_of(t, t->sacts, &mb, lp, true, &ce, &kd);
    ng_model_backward(t->student, t->sacts, mb.tokens);
  }
  double sums[2] = {ce, kd}, gnorm = optimizer_step(t, lr);
  t->comm->allreduce_f64(t->comm, sums, 2);  // the shares of every rank's micro-batches
  ce = sums[0];
  kd = sums[1];
  t->st.flops += step_flops(t);
  t->st.step++;
  t->st.step_in_stage++;
  t->st.tokens += N;
  t->st.layer_tokens += N * t->student->cfg.num_hidden_layers;
  double loss = rc->distill ? ng_loss_mix(rc->loss.kd_weight, ce, kd) : ce;
  if (check_sane(t, loss, ce, gnorm)) return NG_TRAIN_DIVERGED;
  cJSON *j = record(t, "step");
  cJSON_AddNumberToObject(j, "lr", lr);
  cJSON_AddNumberToObject(j, "loss", loss);
  cJSON_AddNumberToObject(j, "ce", ce);
  if (rc->distill) cJSON_AddNumberToObject(j, "kd", kd);
  cJSON_AddNumberToObject(j, "grad_norm", gnorm);
  cJSON_AddNumberToObject(j, "tokens_per_s", (double)N / (ng_now() - t0));
  ng_rundir_log(&t->dir, NG_LOG_METRICS, j);
  t->last_loss = loss;
  progress(t, loss, false);
  return 0;
}

// ---------------------------------------------------------------- signals

// The first SIGINT or SIGTERM asks the loop to stop after its current step;
// a second one ends the process at once, after one line saying what stands:
// quit_line[quit_which], made ready (the other buffer written, then the index
// flipped) at the start and after every checkpoint, since the handler may only
// write it.
static volatile sig_atomic_t stop_signal, quit_which;
static char quit_line[2][1536];

static void on_signal(int sig) {
  if (stop_signal) {
    const char *line = quit_line[quit_which];
    ssize_t w = write(STDERR_FILENO, line, strlen(line));  // async-signal-safe
    (void)w;
    _exit(128 + sig);
  }
  stop_signal = sig;
  static const char msg[] =
      "\nnormgrow: stopping after this step to write a checkpoint (signal again to quit at once)\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);  // async-signal-safe
  (void)w;
}

typedef struct {
  struct sigaction old_int, old_term;
} signal_handlers;

// The line of a second signal: the run's checkpoint at `step` stands (none
// yet: step < 0).
static void ready_quit_line(const trainer *t, int64_t step) {
  char *line = quit_line[!quit_which];
  const char *dir = t->rc.run_dir;
  if (step < 0)
    snprintf(line, sizeof quit_line[0],
             "\nnormgrow: quit at once by a second signal, before the run's first checkpoint: "
             "start it again with `normgrow train %s/config.json --force`\n", dir);
  else
    snprintf(line, sizeof quit_line[0],
             "\nnormgrow: quit at once by a second signal: %s/checkpoint.safetensors (step %lld) "
             "stands, the steps after it are lost; continue with `normgrow train --resume %s`\n",
             dir, (long long)step, dir);
  quit_which = !quit_which;
}

static void catch_signals(signal_handlers *h) {
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  stop_signal = 0;
  sigaction(SIGINT, &sa, &h->old_int);
  sigaction(SIGTERM, &sa, &h->old_term);
}

static void release_signals(const signal_handlers *h) {
  sigaction(SIGINT, &h->old_int, NULL);
  sigaction(SIGTERM, &h->old_term, NULL);
}

// ---------------------------------------------------------------- run

// Whether a signal asked any rank to stop (all ranks agree, after the same step);
// its number is this rank's own or SIGTERM.
static int stop_requested(trainer *t) {
  double any = stop_signal != 0;
  t->comm->allreduce_f64(t->comm, &any, 1);
  if (any > 0.0 && !stop_signal) stop_signal = SIGTERM;
  return stop_signal;
}

// Every rank takes part (the ranks' weights compared, the moments gathered);
// rank 0 writes.
static int save_checkpoint(trainer *t, ng_run_file file, bool with_state) {
  if (t->zero && !ng_zero_weights_agree(t->student, t->comm))
    return ng_fail("step %lld: the ranks' weights differ", (long long)t->st.step);
  char *path = ng_rundir_path(t->rc.run_dir, file);
  int rc = 0;
  if (t->zero && with_state) {  // the moments gathered to rank 0's host memory
    float **m, **v;
    ng_zero_host_moments(t->student, t->zero, 0, &m, &v);
    rc = is_root(t) ? ng_checkpoint_save_moments(path, t->student, t->opt, m, v, &t->st) : 0;
    ng_zero_free_host(t->student->n_params, m, v);
  } else if (is_root(t)) {
    rc = ng_checkpoint_save(path, t->student, with_state ? t->opt : NULL, with_state ? &t->st : NULL);
    if (rc == 0 && with_state) ready_quit_line(t, t->st.step);
  }
  free(path);
  return rc;
}

// 0 at the end (or at --stop-after), a signal's number when one stopped the
// run after its checkpoint, -1 on error.
static int run_stages(trainer *t) {
  const ng_run_config *rc = &t->rc;
  if (t->stop_after && t->st.step >= t->stop_after) return 0;
  for (; t->st.stage < rc->n_stages; t->st.stage++, t->st.step_in_stage = 0) {
    int s = (int)t->st.stage;
    bool grows = rc->stages[s].depth != t->student->cfg.num_hidden_layers;
    if (t->st.step_in_stage == 0 && !grows)  // freezing lasts one growing stage
      for (int64_t l = 0; l < t->student->cfg.num_hidden_layers; l++) ng_model_freeze(t->student, l, false);
    if (t->st.step_in_stage == 0 && grows && grow(t, s)) return -1;
    while (t->st.step_in_stage < ng_stage_steps(rc, s)) {
      int err = train_step(t);
      if (err) return err;
      if ((t->st.step % rc->eval_every == 0 && log_eval(t)) || ng_rundir_check_logs(&t->dir)) return -1;
      if (t->st.step % rc->checkpoint_every == 0 && save_checkpoint(t, NG_RUN_CHECKPOINT, true))
        return -1;
      if (t->st.step == t->stop_after) return 0;  // a stop: no final checkpoint
      if (stop_requested(t)) return save_checkpoint(t, NG_RUN_CHECKPOINT, true) ? -1 : stop_signal;
    }
  }
  t->st.stage = rc->n_stages - 1;
  t->st.step_in_stage = ng_stage_steps(rc, rc->n_stages - 1);
  // Resumed from the checkpoint of the last step: its evaluation is logged, only
  // what follows the checkpoint is to be written.
  bool at_end = t->steps_at_start == t->steps_total;
  if (!at_end &&
      ((t->st.step % rc->eval_every != 0 && log_eval(t)) || ng_rundir_check_logs(&t->dir)))
    return -1;
  return (!at_end && save_checkpoint(t, NG_RUN_CHECKPOINT, true)) || write_final_diag(t) ||
         save_checkpoint(t, NG_RUN_FINAL, false);
}

// Whether a run at its last step has its end's files (a process stopped between
// the last checkpoint and them has not).
static bool end_written(const trainer *t) {
  return ng_rundir_has(t->rc.run_dir, NG_RUN_DIAG_FINAL) && ng_rundir_has(t->rc.run_dir, NG_RUN_FINAL);
}

// A new run's directory, rank 0's: locked, claimed (`force` replaces a run
// there), its config.json written.
static int take_run_dir(trainer *t, bool force) {
  if (!is_root(t)) return 0;  // rank 0 holds it for the run; the others write nothing
  return ng_rundir_lock(&t->dir, t->rc.run_dir) || ng_rundir_claim(&t->dir, force) ||
                 ng_rundir_write_config(&t->dir, t->rc.json)
             ? -1
             : 0;
}

// The logs, rank 0's: anew, or on resume cut back to the checkpoint (the
// resumed run writes the rest again).
static int open_logs(trainer *t, bool resume) {
  return is_root(t) ? ng_rundir_open_logs(&t->dir, resume ? t->st.step : -1) : 0;
}

// The run's config.json with a stage of `tokens` more appended (written back).
static int extend_run(trainer *t, const char *config_path, int64_t tokens) {
  ng_run_config ext;
  if (ng_run_config_extend(&t->rc, tokens, &ext) || ng_write_text_atomic(config_path, ext.json)) {
    ng_run_config_free(&ext);
    return -1;
  }
  ng_run_config_free(&t->rc);
  t->rc = ext;
  const ng_stage *s = &t->rc.stages[t->rc.n_stages - 1];
  fprintf(stderr, "%s: stage %d added: %lld tokens at depth %lld, LR %g (in config.json)\n",
          t->rc.name, t->rc.n_stages, (long long)tokens, (long long)s->depth, s->lr.peak);
  return 0;
}

// The backend and precision of the run's configuration (the command line's if given).
static int open_backend(trainer *t) {
  t->be = ng_backend_open(t->rc.backend, t->rc.precision);
  if (!t->be || ng_comm_bind(t->comm, t->be)) return -1;
  return t->rc.distill ? ng_backend_check_divergence(t->be, t->rc.loss.divergence) : 0;
}

// The resolved backend and the process's environment (normgrow's version,
// threads, OpenBLAS kernel family, wall-clock time): backend.jsonl, a line at
// the start and one at every resume.
static int log_backend(trainer *t, bool resume) {
  if (!is_root(t)) return 0;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "step", (double)t->st.step);
  cJSON_AddStringToObject(j, "backend", t->be->name);
  cJSON_AddStringToObject(j, "precision", ng_precision_name(t->be->precision));
  cJSON_AddStringToObject(j, "normgrow", NG_VERSION);
  cJSON_AddNumberToObject(j, "threads", omp_get_max_threads());
  if (t->comm->size > 1) cJSON_AddNumberToObject(j, "ranks", t->comm->size);  // data-parallel
  if (t->comm->kind != NG_COMM_SINGLE) cJSON_AddStringToObject(j, "comm", t->comm->name);  // mpirun's
  cJSON_AddStringToObject(j, "blas_kernels", ng_blas_corename());
  cJSON_AddStringToObject(j, "blas_kernels_origin", ng_blas_family_origin());
  cJSON_AddNumberToObject(j, "time", wall_clock());
  return ng_rundir_append_line(&t->dir, NG_RUN_BACKEND, !resume, j);
}

// The checkpoint's gate ramps run over the config's growth.gate_steps (a
// change would make another run): checked once a ramp has begun.
static int check_gate_steps(trainer *t, const char *config, const char *path) {
  for (int64_t l = 0; l < t->student->cfg.num_hidden_layers; l++)
    if (t->st.gate_origin[l] >= 0 && t->st.gate_steps != t->rc.gate_steps)
      return ng_fail("%s: growth.gate_steps is %lld, but the gate ramps of %s run over %lld "
                     "steps (block %lld's from step %lld); growth must stay as it was",
                     config, (long long)t->rc.gate_steps, path, (long long)t->st.gate_steps,
                     (long long)l + 1, (long long)t->st.gate_origin[l]);
  t->st.gate_steps = t->rc.gate_steps;
  return 0;
}

// The run's checkpoint (at `path`) loaded and checked against its config (at
// `config`), which is extended (rewritten) only once the checkpoint has loaded.
static int resume_checkpoint(trainer *t, const char *dir, const char *config, const char *path,
                             int64_t extend_tokens) {
  if (!ng_rundir_has(dir, NG_RUN_CHECKPOINT))
    return ng_fail("%s: a run's config.json but no checkpoint.safetensors (the first is written "
                   "at step %lld); start the run again with `normgrow train %s/config.json --force`",
                   dir, (long long)t->rc.checkpoint_every, dir);
  if (ng_checkpoint_load(path, t->be, true, &t->student, &t->opt, &t->st)) return -1;
  const ng_param *bad = first_nonfinite(t->student, false);
  if (bad)
    return ng_fail("%s: tensor %s holds a NaN or an Inf: this checkpoint cannot be resumed", path,
                   bad->name);
  if (t->st.stage >= t->rc.n_stages) return ng_fail("%s: stage %lld of %d", path, (long long)t->st.stage, t->rc.n_stages);
  if (check_gate_steps(t, config, path)) return -1;
  return extend_tokens > 0 && extend_run(t, config, extend_tokens) ? -1 : 0;
}

// The run in `dir` at its checkpoint, on the overrides' backend and precision
// when given.
static int resume_from(trainer *t, const char *dir, const ng_run_overrides *ov,
                       int64_t extend_tokens) {
  ng_run_overrides where = {.seed = -1, .backend = ov->backend, .precision = ov->precision};
  // What DIR is, and its config read, before the lock writes anything there.
  if (ng_rundir_check_resumable(dir) || ng_rundir_load_config(dir, &where, &t->rc) ||
      (is_root(t) && ng_rundir_lock(&t->dir, dir)) || open_backend(t))
    return -1;
  char *config = ng_rundir_path(dir, NG_RUN_CONFIG), *ckpt = ng_rundir_path(dir, NG_RUN_CHECKPOINT);
  int rc = resume_checkpoint(t, dir, config, ckpt, extend_tokens);
  free(config);
  free(ckpt);
  if (rc == 0) snprintf(t->rc.run_dir, sizeof t->rc.run_dir, "%s", dir);
  return rc;
}

// The run's last line on stderr: how to continue a stopped run, or a summary
// of a finished one.
static void closing_line(const trainer *t, int stopped) {
  const ng_run_config *rc = &t->rc;
  double secs = ng_now() - t->t_start;
  if (!is_root(t)) return;
  if (stopped > 0) {
    fprintf(stderr,
            "%s: stopped by %s after step %lld of %lld; checkpoint written to "
            "%s/checkpoint.safetensors; continue with `normgrow train --resume %s`\n",
            rc->name, stopped == SIGINT ? "SIGINT" : "SIGTERM", (long long)t->st.step,
            (long long)t->steps_total, rc->run_dir, rc->run_dir);
  } else if (t->st.step == t->steps_total) {
    char val[80] = "";  // (none evaluated by a process that resumed at the end)
    if (t->evaluated)
      snprintf(val, sizeof val, ", final val CE %.4f", t->last_eval.ce);
    if (t->evaluated && t->tacts)
      snprintf(val + strlen(val), sizeof val - strlen(val), " (teacher %.4f)", t->last_eval.teacher_ce);
    fprintf(stderr,
            "%s: finished: step %lld, %lld tokens%s, %dm%02ds in this "
            "invocation; in %s: final.safetensors, metrics.jsonl, diag.jsonl, diag_final.json\n",
            rc->name, (long long)t->st.step, (long long)t->st.tokens, val,
            (int)secs / 60, (int)secs % 60, rc->run_dir);
  }
}

static void trainer_free(trainer *t) {
  if (t->student) {
    ng_acts_free(t->student, t->sacts);
    ng_acts_free(t->student, t->eval_acts);
    ng_adamw_free(t->student, t->opt);
  }
  if (t->teacher) ng_acts_free(t->teacher, t->tacts);
  if (t->be) ng_zero_free(t->be, t->zero);
  ng_comm_close(t->comm);
  ng_model_free(t->student);
  ng_model_free(t->teacher);
  if (t->be) {
    t->be->free(t->be, t->tokens);
    t->be->free(t->be, t->targets);
  }
  free(t->h_tokens);
  free(t->h_targets);
  free(t->st.gate_origin);
  if (t->be) {
    t->be->free(t->be, t->ids);
    t->be->free(t->be, t->vals);
    t->be->free(t->be, t->lse);
    t->be->free(t->be, t->rest);
  }
  free(t->h_ids);
  free(t->h_vals);
  free(t->h_lse);
  free(t->h_rest);
  free(t->windows);
  ng_epoch_order_free(&t->epochs);
  ng_topk_close(&t->cache_train);
  ng_topk_close(&t->cache_val);
  ng_shard_close(&t->train);
  ng_shard_close(&t->val);
  ng_run_config_free(&t->rc);
  ng_backend_close(t->be);
  ng_rundir_close(&t->dir);  // releases the run directory
}

// The ranks of the run: the communicator, and the sharded optimizer when there
// are several.
static int open_comm(trainer *t) {
  t->comm = ng_comm_open();
  if (!t->comm) return -1;
  if (t->comm->size > 1) t->zero = ng_zero_create(t->comm);
  return 0;
}

// A rank that fails ends every rank of the run (the others would wait for it
// in their next collective): its error on stderr, then the communicator's abort.
static void fail_ranks(const trainer *t) {
  if (!t->comm || t->comm->size == 1) return;
  fprintf(stderr, "normgrow (rank %d of %d): %s\n", t->comm->rank, t->comm->size, ng_error());
  t->comm->abort(t->comm, 1);
}

int ng_train(const ng_train_args *args) {
  trainer t = {.stop_after = args->stop_after, .dir = {.lock_fd = -1}};
  const char *resume_dir = args->resume_dir;
  if (open_comm(&t)) return -1;
  int rc = resume_dir ? resume_from(&t, resume_dir, &args->overrides, args->extend_tokens)
                      : (ng_run_config_load(args->config_path, &args->overrides, &t.rc) ||
                                 open_backend(&t)
                             ? -1
                             : 0);
  t.steps_total = rc == 0 ? ng_run_steps(&t.rc) : 0;
  if (rc == 0 && resume_dir && t.st.step == t.steps_total && end_written(&t)) {
    fprintf(stderr,
            "%s: %s is finished (step %lld of %lld); to train on: `normgrow train --resume %s "
            "--extend-tokens N`\n",
            t.rc.name, resume_dir, (long long)t.st.step, (long long)t.steps_total, resume_dir);
    trainer_free(&t);
    return 0;
  }
  if (rc == 0) rc = open_data(&t) || open_caches(&t) || check_run_memory(&t) || load_teacher(&t) ? -1 : 0;
  // A new run's directory is made (and claimed) once its inputs have opened.
  if (rc == 0 && !resume_dir)
    rc = init_student(&t) || take_run_dir(&t, args->force) ? -1 : 0;
  if (rc == 0 && resume_dir && is_root(&t))
    fprintf(stderr, "%s: resuming %s from its checkpoint at step %lld of %lld (stage %lld of %d)\n",
            t.rc.name, resume_dir, (long long)t.st.step, (long long)t.steps_total,
            (long long)t.st.stage + 1, t.rc.n_stages);
  if (rc == 0) {
    if (t.rc.freeze_embeddings) ng_model_freeze(t.student, -1, true);
    if (t.zero) ng_zero_shard_moments(t.student, t.opt, t.zero);
    alloc_batches(&t);
    student_acts(&t);
    t.steps_at_start = t.st.step;
    t.t_start = ng_now();
    bool resume = resume_dir != NULL;
    rc = open_logs(&t, resume) || log_backend(&t, resume) ? -1 : 0;
    signal_handlers h;
    ready_quit_line(&t, resume ? t.st.step : -1);
    catch_signals(&h);
    if (rc == 0) rc = run_stages(&t);
    release_signals(&h);
    if (rc >= 0 && isatty(STDERR_FILENO)) fputc('\n', stderr);
    if (rc >= 0) closing_line(&t, rc);
  }
  if (rc == -1) fail_ranks(&t);  // (a divergence stops every rank by itself: stop_diverged)
  trainer_free(&t);
  return rc;
}
