// normgrow: golden cases: validation, evaluation, comparison and generation.
#include "normgrow/golden.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/model.h"
#include "normgrow/optim.h"
#include "normgrow/plan.h"
#include "normgrow/rng.h"
#include "normgrow/topk.h"

// ---------------------------------------------------------------- tensor lists

static ng_named_tensor *list_add(ng_tensor_list *l, const char *name, int ndim,
                                 const int64_t *shape) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 32;
    l->t = ng_xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
  }
  ng_named_tensor *t = &l->t[l->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->numel = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->numel *= (size_t)shape[i];
  }
  t->data = ng_xcalloc(t->numel, sizeof(float));
  return t;
}

void ng_tensor_list_free(ng_tensor_list *l) {
  for (int i = 0; i < l->n; i++) free(l->t[i].data);
  free(l->t);
  memset(l, 0, sizeof *l);
}

const ng_named_tensor *ng_tensor_list_find(const ng_tensor_list *l, const char *name) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->t[i].name, name) == 0) return &l->t[i];
  return NULL;
}

// ---------------------------------------------------------------- opening a case

static int parse_config(ng_golden_case *gc) {
  const ng_st_file *f = &gc->file;
  const char *format = ng_st_meta(f, "format"), *text = ng_st_meta(f, "config");
  if (!format || strcmp(format, NG_GOLDEN_FORMAT) != 0)
    return ng_fail("__metadata__.format: expected \"%s\"", NG_GOLDEN_FORMAT);
  if (!text) return ng_fail("__metadata__.config: missing");
  cJSON *root = cJSON_Parse(text);
  if (!root) return ng_fail("__metadata__.config: not valid JSON");
  static const char *const keys[] = {"model", "loss", "optim", NULL};
  int rc = ng_json_expect_object(root, "config") || ng_json_only_keys(root, "config", keys) ||
                   ng_model_config_parse(cJSON_GetObjectItemCaseSensitive(root, "model"),
                                         "config.model", &gc->model) ||
                   ng_loss_config_parse(cJSON_GetObjectItemCaseSensitive(root, "loss"),
                                        "config.loss", &gc->loss) ||
                   ng_optim_config_parse(cJSON_GetObjectItemCaseSensitive(root, "optim"),
                                         "config.optim", &gc->optim)
               ? -1
               : 0;
  cJSON_Delete(root);
  if (rc == 0) gc->config_json = ng_xstrdup(text);
  return rc;
}

// Token ids must lie in [lo, V) (targets may be -1).
static int check_ids(const char *name, const int32_t *ids, int64_t n, int64_t T, int32_t lo,
                     int64_t V) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < lo || ids[i] >= V)
      return ng_fail("tensor \"%s\": id %d at [%lld, %lld] is outside [%d, %lld)", name, ids[i],
                     (long long)(i / T), (long long)(i % T), lo, (long long)V);
  return 0;
}

// Without in.teacher_topk_rest, log Q_rest by section 4's rule for a cache
// without it: log max(0, 1 - sum_j Q_j), in double.
static void rest_from_cached(ng_golden_case *gc) {
  double inv_tau = 1.0 / gc->loss.temperature;
  for (int64_t i = 0; i < gc->B * gc->T; i++) {
    double q_sum = 0.0;
    for (int64_t j = 0; j < gc->topk; j++)
      q_sum += exp((double)gc->topk_vals[i * gc->topk + j] * inv_tau - gc->topk_lse[i]);
    gc->topk_rest[i] = (float)log(fmax(1.0 - q_sum, 0.0));
  }
}

// in.teacher_topk_rest [B, T]: log-masses (at most 0, -inf allowed).
static int read_rest(ng_golden_case *gc) {
  int64_t shape[2] = {gc->B, gc->T};
  if (ng_st_load_f32(&gc->file, "in.teacher_topk_rest", 2, shape, gc->topk_rest)) return -1;
  for (int64_t i = 0; i < gc->B * gc->T; i++)
    if (!(gc->topk_rest[i] <= 0.0f))
      return ng_fail("tensor \"in.teacher_topk_rest\": %g at (%lld, %lld) is not a log-probability "
                     "(at most 0)", gc->topk_rest[i], (long long)(i / gc->T), (long long)(i % gc->T));
  return 0;
}

// The optional top-k teacher: in.teacher_topk_ids [B, T, k] (ids in [0, V)),
// in.teacher_topk_values [B, T, k], in.teacher_topk_lse [B, T]: all or none;
// with them, optionally in.teacher_topk_rest [B, T].
static int read_topk(ng_golden_case *gc) {
  const ng_st_file *f = &gc->file;
  const ng_st_tensor *ids = ng_st_find(f, "in.teacher_topk_ids");
  bool vals = ng_st_find(f, "in.teacher_topk_values"), lse = ng_st_find(f, "in.teacher_topk_lse");
  bool rest = ng_st_find(f, "in.teacher_topk_rest");
  if (!ids && !vals && !lse && !rest) return 0;
  if (!ids || !vals || !lse)
    return ng_fail("in.teacher_topk_ids, _values and _lse: give all three or none (_rest only with them)");
  int64_t V = gc->model.vocab_size, N = gc->B * gc->T;
  if (ids->ndim != 3 || ids->shape[2] < 1 || ids->shape[2] > V)
    return ng_fail("tensor \"in.teacher_topk_ids\": expected shape [B, T, k] with 1 <= k <= %lld", (long long)V);
  gc->topk = ids->shape[2];
  int64_t shape[3] = {gc->B, gc->T, gc->topk};
  gc->topk_ids = ng_xmalloc((size_t)(N * gc->topk) * sizeof(int32_t));
  gc->topk_vals = ng_xmalloc((size_t)(N * gc->topk) * sizeof(float));
  gc->topk_lse = ng_xmalloc((size_t)N * sizeof(float));
  gc->topk_rest = ng_xmalloc((size_t)N * sizeof(float));
  if (ng_st_load_i32(f, "in.teacher_topk_ids", 3, shape, gc->topk_ids) ||
      check_ids("in.teacher_topk_ids", gc->topk_ids, N * gc->topk, gc->T * gc->topk, 0, V) ||
      ng_st_load_f32(f, "in.teacher_topk_values", 3, shape, gc->topk_vals) ||
      ng_st_load_f32(f, "in.teacher_topk_lse", 2, shape, gc->topk_lse))
    return -1;
  if (rest) return read_rest(gc);
  rest_from_cached(gc);
  return 0;
}

static int read_inputs(ng_golden_case *gc) {
  const ng_st_file *f = &gc->file;
  const ng_st_tensor *tok = ng_st_find(f, "in.tokens");
  if (!tok) return ng_fail("tensor \"in.tokens\" is missing");
  if (tok->ndim != 2 || tok->shape[0] < 1 || tok->shape[1] < 1)
    return ng_fail("tensor \"in.tokens\": expected shape [B, T] with B, T >= 1");
  gc->B = tok->shape[0];
  gc->T = tok->shape[1];
  int64_t N = gc->B * gc->T, V = gc->model.vocab_size, shape[3] = {gc->B, gc->T, V};
  gc->tokens = ng_xmalloc((size_t)N * sizeof(int32_t));
  gc->targets = ng_xmalloc((size_t)N * sizeof(int32_t));
  if (ng_st_load_i32(f, "in.tokens", 2, shape, gc->tokens) ||
      ng_st_load_i32(f, "in.targets", 2, shape, gc->targets) ||
      check_ids("in.tokens", gc->tokens, N, gc->T, 0, V) ||
      check_ids("in.targets", gc->targets, N, gc->T, -1, V))
    return -1;
  if (ng_st_find(f, "in.teacher_logits")) {
    if (ng_st_check(f, "in.teacher_logits", 3, shape, true)) return -1;
    gc->teacher = ng_xmalloc((size_t)N * (size_t)V * sizeof(float));
    if (ng_st_load_f32(f, "in.teacher_logits", 3, shape, gc->teacher)) return -1;
  }
  return read_topk(gc);
}

// Every tensor must be an input, a weight of this config, or an output.
static int check_names(const ng_golden_case *gc) {
  ng_model *skel = ng_model_create(NULL, &gc->model, false);
  int rc = 0;
  for (int i = 0; i < gc->file.n && rc == 0; i++) {
    const char *name = gc->file.tensors[i].name;
    bool ok = strncmp(name, "out.", 4) == 0 || strcmp(name, "in.tokens") == 0 ||
              strcmp(name, "in.targets") == 0 || strcmp(name, "in.teacher_logits") == 0 ||
              strcmp(name, "in.teacher_topk_ids") == 0 || strcmp(name, "in.teacher_topk_values") == 0 ||
              strcmp(name, "in.teacher_topk_lse") == 0 || strcmp(name, "in.teacher_topk_rest") == 0 ||
              (strncmp(name, "param.", 6) == 0 && ng_model_find(skel, name + 6));
    if (!ok) rc = ng_fail("tensor \"%s\" is not part of this case's configuration", name);
  }
  ng_model_free(skel);
  return rc;
}

int ng_golden_open(ng_golden_case *gc, const char *path) {
  memset(gc, 0, sizeof *gc);
  if (ng_st_open(&gc->file, path)) return -1;
  if (parse_config(gc) || ng_model_check_file(&gc->model, &gc->file, "param.") ||
      check_names(gc) || read_inputs(gc)) {
    ng_fail_prefix(path);
    ng_golden_close(gc);
    return -1;
  }
  return 0;
}

void ng_golden_close(ng_golden_case *gc) {
  ng_st_close(&gc->file);
  free(gc->config_json);
  free(gc->tokens);
  free(gc->targets);
  free(gc->teacher);
  free(gc->topk_ids);
  free(gc->topk_vals);
  free(gc->topk_lse);
  free(gc->topk_rest);
  memset(gc, 0, sizeof *gc);
}

// ---------------------------------------------------------------- evaluation

static void *upload(ng_backend *be, const void *src, size_t bytes) {
  void *d = be->alloc(be, bytes);
  be->upload(be, d, src, bytes);
  return d;
}

static void download_as(ng_backend *be, ng_tensor_list *out, const char *name, int ndim,
                        const int64_t *shape, const float *src) {
  ng_named_tensor *t = list_add(out, name, ndim, shape);
  be->download(be, t->data, src, t->numel * sizeof(float));
}

static void add_scalar(ng_tensor_list *out, const char *name, double v) {
  int64_t one = 1;
  list_add(out, name, 1, &one)->data[0] = (float)v;
}

typedef struct {
  ng_backend *be;
  const ng_golden_case *gc;
  int32_t *tokens, *targets;  // backend buffers
  float *teacher;             // backend buffer or NULL
} eval_ctx;

static ng_loss_params loss_params(const ng_golden_case *gc) {
  return (ng_loss_params){gc->loss.kd_weight, gc->loss.temperature, 0, 0, gc->loss.divergence,
                          gc->loss.beta};
}

// The chunked head and loss of the last forward of a (with `grad`, d loss /
// d head input and the head's gradient); returns the loss.
static double loss_of(const eval_ctx *e, ng_model *m, ng_acts *a, bool grad, double *ce,
                      double *kd) {
  ng_loss_teacher t = {.logits = e->teacher};
  int64_t nv;
  ng_model_loss(m, a, &t, e->targets, loss_params(e->gc), grad, ce, kd, &nv);
  return e->teacher ? ng_loss_mix(e->gc->loss.kd_weight, *ce, *kd) : *ce;
}

// out.logits [B, T, V], gathered chunk by chunk into a backend buffer [N, V] (caller frees).
static float *all_logits(const eval_ctx *e, ng_model *m, ng_acts *a, ng_tensor_list *out) {
  ng_backend *be = e->be;
  int64_t N = a->N, V = m->cfg.vocab_size, ls[3] = {e->gc->B, e->gc->T, V};
  float *logits = be->alloc(be, (size_t)(N * V) * sizeof(float));
  for (int64_t row0 = 0; row0 < N; row0 += a->chunk) {
    int64_t rows = N - row0 < a->chunk ? N - row0 : a->chunk;
    ng_model_logits(m, a, row0, rows);
    be->copy(be, logits + row0 * V, a->logits, (size_t)(rows * V) * sizeof(float));
  }
  download_as(be, out, "out.logits", 3, ls, logits);
  return logits;
}

// out.hidden.<l>, out.rms.<l> for l = 0..L
static void emit_hidden(const eval_ctx *e, const ng_acts *a, ng_tensor_list *out) {
  const ng_golden_case *gc = e->gc;
  int64_t D = gc->model.hidden_size, hs[3] = {gc->B, gc->T, D};
  float *rms = e->be->alloc(e->be, (size_t)a->N * sizeof(float));
  for (int64_t l = 0; l <= gc->model.num_hidden_layers; l++) {
    char name[64];
    snprintf(name, sizeof name, "out.hidden.%lld", (long long)l);
    download_as(e->be, out, name, 3, hs, ng_acts_hidden(a, l));
    e->be->row_rms(e->be, ng_acts_hidden(a, l), a->N, D, rms);
    snprintf(name, sizeof name, "out.rms.%lld", (long long)l);
    download_as(e->be, out, name, 2, hs, rms);
  }
  e->be->free(e->be, rms);
}

// out.<prefix><name> for every parameter, from its data or its gradient.
static void emit_params(const eval_ctx *e, const ng_model *m, const char *prefix, bool grad,
                        ng_tensor_list *out) {
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    char name[160];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    download_as(e->be, out, name, p->ndim, p->shape, grad ? p->grad : p->data);
  }
}

// out.topk_kd, out.topk_loss [1] (the chunked loss of the last forward of a)
// and out.topk_dlogits [B, T, V] (ng_backend.ce_kd_topk over all of logits
// [N, V]): the loss with the teacher given by its top-k cache.
static void emit_topk(const eval_ctx *e, ng_model *m, ng_acts *a, const float *logits,
                      ng_tensor_list *out) {
  const ng_golden_case *gc = e->gc;
  ng_backend *be = e->be;
  int64_t N = gc->B * gc->T, V = gc->model.vocab_size, k = gc->topk, nv;
  ng_loss_teacher t = {.topk_ids = upload(be, gc->topk_ids, (size_t)(N * k) * sizeof(int32_t)),
                       .topk_vals = upload(be, gc->topk_vals, (size_t)(N * k) * sizeof(float)),
                       .topk_lse = upload(be, gc->topk_lse, (size_t)N * sizeof(float)),
                       .topk_rest = upload(be, gc->topk_rest, (size_t)N * sizeof(float)),
                       .k = k};
  float *d = be->alloc(be, (size_t)(N * V) * sizeof(float));
  ng_loss_params lp = loss_params(gc);
  double ce, kd;
  ng_model_loss(m, a, &t, e->targets, lp, false, &ce, &kd, &nv);
  add_scalar(out, "out.topk_kd", kd);
  add_scalar(out, "out.topk_loss", ng_loss_mix(lp.kd_weight, ce, kd));
  be->ce_kd_topk(be, logits, t.topk_ids, t.topk_vals, t.topk_lse, t.topk_rest, k, e->targets, N, V,
                 lp, d, &ce, &kd, &nv);
  int64_t shape[3] = {gc->B, gc->T, V};
  download_as(be, out, "out.topk_dlogits", 3, shape, d);
  be->free(be, (void *)t.topk_ids);
  be->free(be, (void *)t.topk_vals);
  be->free(be, (void *)t.topk_lse);
  be->free(be, (void *)t.topk_rest);
  be->free(be, d);
}

// out.ablation_ce [L]: ce with block l skipped, each in turn.
static void emit_ablation(const eval_ctx *e, ng_model *m, const ng_acts_options *o,
                          ng_tensor_list *out) {
  int64_t L = m->cfg.num_hidden_layers;
  ng_acts_options fo = {.chunk = o->chunk};
  ng_acts *a = ng_acts_create_with(m, e->gc->B, e->gc->T, &fo);
  ng_block_mode *modes = ng_xcalloc((size_t)L, sizeof(ng_block_mode));
  ng_named_tensor *t = list_add(out, "out.ablation_ce", 1, &L);
  for (int64_t l = 0; l < L; l++) {
    double ce, kd;
    modes[l] = NG_BLOCK_SKIP;
    ng_model_forward(m, a, e->tokens, modes);
    loss_of(e, m, a, false, &ce, &kd);
    t->data[l] = (float)ce;
    modes[l] = NG_BLOCK_RUN;
  }
  free(modes);
  ng_acts_free(m, a);
}

// The evaluation's model (weights, gradients), training activations, logits
// and teacher logits [B*T, V] within the machine's memory.
static int check_eval_memory(const ng_golden_case *gc, const ng_acts_options *o) {
  ng_acts_options ao = {.for_backward = true, .recompute = o->recompute, .chunk = o->chunk};
  double N = (double)gc->B * (double)gc->T, V = (double)gc->model.vocab_size;
  double bytes = 4.0 * ((double)ng_plan_count_params(&gc->model, 0, false).total +
                        (double)ng_plan_acts_floats(&gc->model, gc->B, gc->T, &ao) + 2.0 * N * V);
  char what[1100];
  snprintf(what, sizeof what, "%s: inputs of B %lld x T %lld", gc->file.path, (long long)gc->B, (long long)gc->T);
  return ng_plan_check_more_memory(&gc->model, bytes, what);
}

int ng_golden_eval(const ng_golden_case *gc, ng_backend *be, const ng_acts_options *o,
                   ng_tensor_list *out) {
  int64_t N = gc->B * gc->T, V = gc->model.vocab_size;
  if (ng_backend_check_divergence(be, gc->loss.divergence) || check_eval_memory(gc, o)) return -1;
  eval_ctx e = {be, gc, upload(be, gc->tokens, (size_t)N * sizeof(int32_t)),
                upload(be, gc->targets, (size_t)N * sizeof(int32_t)),
                gc->teacher ? upload(be, gc->teacher, (size_t)N * V * sizeof(float)) : NULL};
  ng_model *m = ng_model_create(be, &gc->model, true);
  if (ng_model_load(m, &gc->file, "param.")) {
    ng_model_free(m);
    return -1;
  }
  ng_acts_options ao = {.for_backward = true, .recompute = o->recompute, .chunk = o->chunk};
  ng_acts *a = ng_acts_create_with(m, gc->B, gc->T, &ao);
  ng_model_forward(m, a, e.tokens, NULL);
  float *logits = all_logits(&e, m, a, out);
  if (gc->topk) emit_topk(&e, m, a, logits, out);
  be->free(be, logits);
  ng_model_zero_grad(m);
  double ce, kd, loss = loss_of(&e, m, a, true, &ce, &kd);
  add_scalar(out, "out.ce", ce);
  add_scalar(out, "out.kd", kd);
  add_scalar(out, "out.loss", loss);
  emit_hidden(&e, a, out);
  ng_model_backward(m, a, e.tokens);
  emit_params(&e, m, "out.grad.", true, out);
  ng_acts_free(m, a);
  emit_ablation(&e, m, o, out);
  ng_adamw *opt = ng_adamw_create(m);
  ng_adamw_step(m, opt, &gc->optim, gc->optim.lr);
  emit_params(&e, m, "out.step.", false, out);
  ng_adamw_free(m, opt);
  ng_model_free(m);
  be->free(be, e.tokens);
  be->free(be, e.targets);
  be->free(be, e.teacher);
  return 0;
}

int ng_golden_write(const ng_golden_case *gc, const ng_tensor_list *out, bool with_inputs,
                    const char *path) {
  ng_st_writer *w = ng_st_writer_new();
  ng_st_writer_meta(w, "format", NG_GOLDEN_FORMAT);
  ng_st_writer_meta(w, "config", gc->config_json);
  for (int i = 0; with_inputs && i < gc->file.n; i++) {
    const ng_st_tensor *t = &gc->file.tensors[i];
    if (strncmp(t->name, "out.", 4) != 0)
      ng_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
  }
  for (int i = 0; i < out->n; i++)
    ng_st_writer_add(w, out->t[i].name, NG_F32, out->t[i].ndim, out->t[i].shape, out->t[i].data);
  int rc = ng_st_writer_save(w, path);
  ng_st_writer_free(w);
  return rc;
}

// ---------------------------------------------------------------- comparison

static const char *const family_names[NG_FAM_COUNT] = {"logits",   "losses", "hidden", "rms",
                                                       "ablation", "grad",   "step"};

const char *ng_golden_family_name(ng_golden_family f) { return family_names[f]; }

double ng_golden_family_tol(ng_golden_family f, ng_precision p) {
  switch (p) {
    case NG_PREC_FP32:
      return f == NG_FAM_GRAD ? NG_GOLDEN_TOL_GRAD
                              : f == NG_FAM_STEP ? NG_GOLDEN_TOL_STEP : NG_GOLDEN_TOL_FORWARD;
    case NG_PREC_BF16:
      return f == NG_FAM_GRAD ? NG_GOLDEN_BF16_TOL_GRAD_L2
                              : f == NG_FAM_STEP ? INFINITY : NG_GOLDEN_BF16_TOL_FORWARD;
  }
  return 0.0;
}

static ng_golden_family family_of(const char *name) {
  if (strncmp(name, "out.hidden.", 11) == 0) return NG_FAM_HIDDEN;
  if (strncmp(name, "out.rms.", 8) == 0) return NG_FAM_RMS;
  if (strncmp(name, "out.grad.", 9) == 0) return NG_FAM_GRAD;
  if (strncmp(name, "out.step.", 9) == 0) return NG_FAM_STEP;
  if (strcmp(name, "out.ablation_ce") == 0) return NG_FAM_ABLATION;
  if (strcmp(name, "out.logits") == 0) return NG_FAM_LOGITS;
  if (strcmp(name, "out.topk_dlogits") == 0) return NG_FAM_GRAD;
  return NG_FAM_LOSSES;
}

static double max_abs(const float *x, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
  return m;
}

// max|got - exp| / max(max|exp|, floor) (max|got - exp| when both are zero).
static double rel_error(const float *got, const float *exp, size_t n, double floor) {
  double d = 0.0, scale = fmax(max_abs(exp, n), floor);
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)got[i] - exp[i]));
  if (isnan(d) || isnan(scale)) return INFINITY;
  return scale > 0.0 ? d / scale : d;
}

static bool is_param_grad(const char *name) { return strncmp(name, "out.grad.", 9) == 0; }

// G of the contract's scale floor: the largest max|expected| over every
// out.grad.* tensor of the case. A gradient that is zero by symmetry holds only
// rounding noise, which differs between machines; its error is measured
// against 1e-3 G rather than against its own noise.
static double grad_scale(const ng_tensor_list *exp) {
  double g = 0.0;
  for (int i = 0; i < exp->n; i++)
    if (is_param_grad(exp->t[i].name)) g = fmax(g, max_abs(exp->t[i].data, exp->t[i].numel));
  return g;
}

// Global-norm clipping coefficient of the expected gradients.
static double clip_coef(const ng_golden_case *gc, const ng_tensor_list *exp) {
  double ss = 0.0;
  for (int i = 0; i < exp->n; i++)
    if (is_param_grad(exp->t[i].name))
      for (size_t j = 0; j < exp->t[i].numel; j++) ss += (double)exp->t[i].data[j] * exp->t[i].data[j];
  double c = gc->optim.grad_clip / (sqrt(ss) + 1e-6);
  return gc->optim.grad_clip > 0.0 && c < 1.0 ? c : 1.0;
}

// AdamW update error / lr, over entries whose clipped expected gradient is not
// negligible: |coef g| > max(1e-3 coef G, 100 eps). Below that the first
// step's update lr g / (|g| + eps) is ill-conditioned in g.
static double step_error(const ng_golden_case *gc, const char *param, const float *got,
                         const float *exp, const ng_tensor_list *expl, double coef, double G) {
  char gname[160];
  snprintf(gname, sizeof gname, "out.grad.%s", param);
  const ng_named_tensor *g = ng_tensor_list_find(expl, gname);
  if (!g) return INFINITY;
  char pname[160];
  snprintf(pname, sizeof pname, "param.%s", param);
  const ng_st_tensor *pt = ng_st_find(&gc->file, pname);
  if (!pt || pt->numel != g->numel) return INFINITY;
  float *p = ng_xmalloc(pt->numel * sizeof(float));
  if (ng_st_to_f32(&gc->file, pt, p)) {
    free(p);
    return INFINITY;
  }
  double thr = fmax(NG_GOLDEN_GRAD_FLOOR * G * coef, 100.0 * gc->optim.eps), err = 0.0;
  for (size_t i = 0; i < g->numel; i++) {
    if (fabs((double)g->data[i] * coef) <= thr) continue;
    double du = ((double)got[i] - p[i]) - ((double)exp[i] - p[i]);
    err = isnan(du) ? INFINITY : fmax(err, fabs(du));
  }
  free(p);
  return gc->optim.lr > 0.0 ? err / gc->optim.lr : err;
}

static int load_expected(const ng_golden_case *gc, ng_tensor_list *exp) {
  for (int i = 0; i < gc->file.n; i++) {
    const ng_st_tensor *t = &gc->file.tensors[i];
    if (strncmp(t->name, "out.", 4) != 0) continue;
    if (t->ndim > 3) return ng_fail("tensor \"%s\": more than 3 dimensions", t->name);
    ng_named_tensor *e = list_add(exp, t->name, t->ndim, t->shape);
    if (ng_st_to_f32(&gc->file, t, e->data)) return -1;
  }
  return 0;
}

static bool same_shape(const ng_named_tensor *a, const ng_named_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

static void note(ng_golden_report *rep, ng_golden_family f, double err, const char *name) {
  if (err > rep->err[f] || (isinf(err) && !isinf(rep->err[f]))) {
    rep->err[f] = err;
    snprintf(rep->worst[f], sizeof rep->worst[f], "%s", name);
  }
  if (!(err <= rep->tol[f])) rep->n_bad++;
}

// Sums of squared differences and of squared expected values (for relative L2).
typedef struct {
  double diff, exp;
} l2_sums;

static void add_l2(l2_sums *s, const float *got, const float *exp, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - exp[i];
    s->diff += d * d;
    s->exp += (double)exp[i] * exp[i];
  }
}

static double rel_l2(l2_sums s) {
  if (isnan(s.diff)) return INFINITY;
  return s.exp > 0.0 ? sqrt(s.diff / s.exp) : sqrt(s.diff);
}

// The fp32 rules: every tensor by itself (docs/golden-contract.md "fp32").
static double fp32_error(const ng_golden_case *gc, const ng_tensor_list *exp,
                         const ng_named_tensor *e, const ng_named_tensor *g, double coef,
                         double G) {
  if (family_of(e->name) == NG_FAM_STEP)
    return step_error(gc, e->name + 9, g->data, e->data, exp, coef, G);
  double floor = is_param_grad(e->name) ? NG_GOLDEN_GRAD_FLOOR * G : 0.0;
  return rel_error(g->data, e->data, e->numel, floor);
}

// The bf16 rules: forward by the plain rule, out.grad.* pooled into *grads
// (noted at the end), other gradients by their own relative L2, steps not compared.
static double bf16_error(const ng_named_tensor *e, const ng_named_tensor *g, l2_sums *grads) {
  switch (family_of(e->name)) {
    case NG_FAM_STEP:
      return 0.0;
    case NG_FAM_GRAD: {
      if (is_param_grad(e->name)) {
        add_l2(grads, g->data, e->data, e->numel);
        return 0.0;
      }
      l2_sums own = {0};
      add_l2(&own, g->data, e->data, e->numel);
      return rel_l2(own);
    }
    case NG_FAM_LOGITS: case NG_FAM_LOSSES: case NG_FAM_HIDDEN: case NG_FAM_RMS:
    case NG_FAM_ABLATION: case NG_FAM_COUNT:
      break;
  }
  return rel_error(g->data, e->data, e->numel, 0.0);
}

int ng_golden_compare_with(const ng_golden_case *gc, const ng_tensor_list *exp,
                           const ng_tensor_list *got, ng_precision p, ng_golden_report *rep) {
  memset(rep, 0, sizeof *rep);
  for (int f = 0; f < NG_FAM_COUNT; f++) {
    rep->tol[f] = ng_golden_family_tol((ng_golden_family)f, p);
    if (p == NG_PREC_BF16 && rep->tol[f] == NG_GOLDEN_BF16_TOL_FORWARD &&
        ng_block_layouts_union(&gc->model, 0, gc->model.num_hidden_layers - 1).sublayer_norms)
      rep->tol[f] = NG_GOLDEN_BF16_TOL_FORWARD_SANDWICH;
  }
  if (exp->n == 0) return ng_fail("no out.* tensors to compare with");
  double coef = clip_coef(gc, exp), G = grad_scale(exp);
  l2_sums grads = {0};
  for (int i = 0; i < exp->n; i++) {
    const ng_named_tensor *e = &exp->t[i], *g = ng_tensor_list_find(got, e->name);
    double err = INFINITY;
    if (g && same_shape(e, g))
      err = p == NG_PREC_BF16 ? bf16_error(e, g, &grads) : fp32_error(gc, exp, e, g, coef, G);
    note(rep, family_of(e->name), err, e->name);
  }
  if (p == NG_PREC_BF16) note(rep, NG_FAM_GRAD, rel_l2(grads), "out.grad.* (relative L2)");
  for (int i = 0; i < got->n; i++)  // outputs the case does not expect
    if (!ng_tensor_list_find(exp, got->t[i].name)) note(rep, family_of(got->t[i].name), INFINITY, got->t[i].name);
  return 0;
}

int ng_golden_compare(const ng_golden_case *gc, const ng_tensor_list *got, ng_precision p,
                      ng_golden_report *rep) {
  ng_tensor_list exp = {0};
  int rc = load_expected(gc, &exp) ? -1 : ng_golden_compare_with(gc, &exp, got, p, rep);
  ng_tensor_list_free(&exp);
  return rc;
}

// ---------------------------------------------------------------- making cases

#define MAX_SPEC_BYTES (1 << 20)  // a spec is under 1 KB

typedef struct {
  uint64_t seed;
  int64_t batch, seq;
  bool teacher;
  int64_t topk;    // 0: no top-k teacher inputs
  bool topk_rest;  // with in.teacher_topk_rest
  double ignore_fraction;
  ng_model_config model;
  ng_loss_config loss;
  ng_optim_config optim;
  char *config_json;
} golden_spec;

static int parse_spec(const char *path, golden_spec *s) {
  static const char *const keys[] = {"seed",  "batch", "seq", "teacher", "topk", "topk_rest",
                                     "ignore_fraction", "model", "loss", "optim", NULL};
  char *text;
  if (ng_read_file(path, MAX_SPEC_BYTES, &text, NULL) != 0) return -1;
  cJSON *root = cJSON_Parse(text);
  free(text);
  if (!root) return ng_fail("%s: not valid JSON", path);
  int64_t seed;
  int rc = ng_json_expect_object(root, "spec") || ng_json_only_keys(root, "spec", keys) ||
           ng_json_int(root, "spec", "seed", 0, INT64_MAX / 2, &seed) ||
           ng_json_int(root, "spec", "batch", 1, 64, &s->batch) ||
           ng_json_int(root, "spec", "seq", 1, 4096, &s->seq) ||
           ng_json_bool(root, "spec", "teacher", &s->teacher) ||
           (cJSON_GetObjectItemCaseSensitive(root, "topk") &&
            ng_json_int(root, "spec", "topk", 1, INT32_MAX, &s->topk)) ||
           (cJSON_GetObjectItemCaseSensitive(root, "topk_rest") &&
            ng_json_bool(root, "spec", "topk_rest", &s->topk_rest)) ||
           ng_json_num(root, "spec", "ignore_fraction", 0.0, 1.0, &s->ignore_fraction) ||
           ng_model_config_parse(cJSON_GetObjectItemCaseSensitive(root, "model"), "model", &s->model) ||
           ng_loss_config_parse(cJSON_GetObjectItemCaseSensitive(root, "loss"), "loss", &s->loss) ||
           ng_optim_config_parse(cJSON_GetObjectItemCaseSensitive(root, "optim"), "optim", &s->optim);
  if (rc == 0 && s->topk && (!s->teacher || s->topk > s->model.vocab_size))
    rc = ng_fail("spec.topk: needs \"teacher\": true and at most vocab_size ids");
  if (rc == 0 && s->topk_rest && !s->topk) rc = ng_fail("spec.topk_rest: needs \"topk\"");
  if (rc == 0) {
    s->seed = (uint64_t)seed;
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "model", ng_model_config_to_json(&s->model));
    cJSON_AddItemToObject(cfg, "loss", ng_loss_config_to_json(&s->loss));
    cJSON_AddItemToObject(cfg, "optim", ng_optim_config_to_json(&s->optim));
    s->config_json = ng_json_print(cfg, false);
    cJSON_Delete(cfg);
  }
  cJSON_Delete(root);
  return rc ? ng_fail_prefix(path) : 0;
}

// Random weights with O(1) activations: matrices N(0, 1/fan_in), embeddings
// N(0, 1), norm gains 1 + N(0, 0.1^2) (so that their gradients are exercised).
static void random_weights(ng_rng *r, const ng_model *skel, float **data) {
  for (int i = 0; i < skel->n_params; i++) {
    const ng_param *p = &skel->params[i];
    data[i] = ng_xmalloc(p->numel * sizeof(float));
    bool embed = strcmp(p->name, "model.embed_tokens.weight") == 0;
    if (p->ndim == 1)
      ng_rng_fill_normal(r, data[i], p->numel, 1.0, 0.1);
    else
      ng_rng_fill_normal(r, data[i], p->numel, 0.0, embed ? 1.0 : 1.0 / sqrt((double)p->shape[1]));
  }
}

typedef struct {
  uint32_t *ids;
  float *vals, *lse, *rest;
} topk_inputs;

// The teacher's exact top-k per position, its log-sum-exp at the temperature
// and (with spec.topk_rest) its log mass off the top k, as a top-k cache holds
// them (t->* freed by the caller after the writer has saved).
static void add_topk(ng_st_writer *w, const golden_spec *s, const float *teacher, topk_inputs *t) {
  int64_t N = s->batch * s->seq, V = s->model.vocab_size, k = s->topk;
  int64_t shape[3] = {s->batch, s->seq, k};
  t->ids = ng_xmalloc((size_t)(N * k) * sizeof(uint32_t));
  t->vals = ng_xmalloc((size_t)(N * k) * sizeof(float));
  t->lse = ng_xmalloc((size_t)N * sizeof(float));
  t->rest = ng_xmalloc((size_t)N * sizeof(float));
  for (int64_t i = 0; i < N; i++) {
    ng_top_k(teacher + i * V, V, k, t->ids + i * k, t->vals + i * k);
    ng_topk_logmass(teacher + i * V, V, t->vals + i * k, k, 1.0 / s->loss.temperature, &t->lse[i],
                    &t->rest[i]);
  }
  ng_st_writer_add(w, "in.teacher_topk_ids", NG_I32, 3, shape, t->ids);
  ng_st_writer_add(w, "in.teacher_topk_values", NG_F32, 3, shape, t->vals);
  ng_st_writer_add(w, "in.teacher_topk_lse", NG_F32, 2, shape, t->lse);
  if (s->topk_rest) ng_st_writer_add(w, "in.teacher_topk_rest", NG_F32, 2, shape, t->rest);
}

static int write_inputs(const golden_spec *s, const char *path) {
  int64_t N = s->batch * s->seq, V = s->model.vocab_size;
  int64_t shape[3] = {s->batch, s->seq, V};
  ng_rng r;
  ng_rng_seed(&r, s->seed);
  int32_t *tokens = ng_xmalloc((size_t)N * sizeof(int32_t)), *targets = ng_xmalloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) {
    tokens[i] = (int32_t)ng_rng_below(&r, (uint64_t)V);
    targets[i] = (int32_t)ng_rng_below(&r, (uint64_t)V);
    if (ng_rng_uniform(&r) < s->ignore_fraction) targets[i] = -1;
  }
  float *teacher = NULL;
  if (s->teacher) {
    teacher = ng_xmalloc((size_t)N * V * sizeof(float));
    ng_rng_fill_normal(&r, teacher, (size_t)N * V, 0.0, 2.0);
  }
  ng_model *skel = ng_model_create(NULL, &s->model, false);
  float **data = ng_xcalloc((size_t)skel->n_params, sizeof(float *));
  random_weights(&r, skel, data);
  ng_st_writer *w = ng_st_writer_new();
  ng_st_writer_meta(w, "format", NG_GOLDEN_FORMAT);
  ng_st_writer_meta(w, "config", s->config_json);
  ng_st_writer_add(w, "in.tokens", NG_I32, 2, shape, tokens);
  ng_st_writer_add(w, "in.targets", NG_I32, 2, shape, targets);
  if (teacher) ng_st_writer_add(w, "in.teacher_logits", NG_F32, 3, shape, teacher);
  topk_inputs topk = {0};
  if (s->topk) add_topk(w, s, teacher, &topk);
  for (int i = 0; i < skel->n_params; i++) {
    char name[112];  // the writer copies names
    snprintf(name, sizeof name, "param.%s", skel->params[i].name);
    ng_st_writer_add(w, name, NG_F32, skel->params[i].ndim, skel->params[i].shape, data[i]);
  }
  int rc = ng_st_writer_save(w, path);
  free(topk.ids);
  free(topk.vals);
  free(topk.lse);
  free(topk.rest);
  ng_st_writer_free(w);
  for (int i = 0; i < skel->n_params; i++) free(data[i]);
  free(data);
  ng_model_free(skel);
  free(tokens);
  free(targets);
  free(teacher);
  return rc;
}

int ng_golden_make(const char *spec_path, const char *out_path, ng_backend *be) {
  golden_spec s = {0};
  if (parse_spec(spec_path, &s)) return -1;
  int rc = write_inputs(&s, out_path);
  free(s.config_json);
  if (rc) return -1;
  ng_golden_case gc;
  if (ng_golden_open(&gc, out_path)) return -1;
  ng_tensor_list out = {0};
  ng_acts_options whole = {0};  // the loss over all rows at once
  rc = ng_golden_eval(&gc, be, &whole, &out);
  if (rc == 0) rc = ng_golden_write(&gc, &out, true, out_path);
  ng_tensor_list_free(&out);
  ng_golden_close(&gc);
  return rc;
}
