// normgrow: RUN.json parsing. Defaults are written into the JSON tree before
// it is read, so that the resolved configuration (every value explicit) is
// what the run directory records and what a resume reads back.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/grow.h"  // ng_stream_rescalable
#include "normgrow/run.h"

// Adds `def` under `key` when obj lacks it (otherwise frees def).
static void default_item(cJSON *obj, const char *key, cJSON *def) {
  if (cJSON_IsObject(obj) && !cJSON_GetObjectItemCaseSensitive(obj, key))
    cJSON_AddItemToObject(obj, key, def);
  else
    cJSON_Delete(def);
}

static int choose(const char *where, const char *key, const char *value,
                  const char *const *names, int *out) {
  for (int i = 0; names[i]; i++)
    if (strcmp(value, names[i]) == 0) return *out = i, 0;
  char list[256] = "";
  for (int i = 0; names[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "", names[i]);
  return ng_fail("%s.%s: unknown value \"%s\" (one of %s)", where, key, value, list);
}

static int json_enum(const cJSON *obj, const char *where, const char *key,
                     const char *const *names, int *out) {
  const char *s;
  return ng_json_str(obj, where, key, &s) || choose(where, key, s, names, out);
}

static int json_path(const cJSON *obj, const char *where, const char *key, char *dst, size_t n) {
  const char *s;
  if (ng_json_str(obj, where, key, &s)) return -1;
  if (!*s || strlen(s) >= n) return ng_fail("%s.%s: expected a path of 1..%zu characters", where, key, n - 1);
  snprintf(dst, n, "%s", s);
  return 0;
}

// An array of integers in [lo, hi), at most max entries.
static int json_int_list(const cJSON *arr, const char *where, int64_t lo, int64_t hi,
                         int64_t max, int64_t *out, int64_t *n) {
  if (!cJSON_IsArray(arr)) return ng_fail("%s: expected an array of integers", where);
  *n = 0;
  for (const cJSON *it = arr->child; it; it = it->next) {
    if (*n == max) return ng_fail("%s: more than %lld entries", where, (long long)max);
    char what[64];
    snprintf(what, sizeof what, "%s[%lld]", where, (long long)*n);
    if (ng_json_int_value(it, what, lo, hi - 1, &out[*n])) return -1;
    ++*n;
  }
  return 0;
}

static cJSON *section(const cJSON *root, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(root, key);
}

static const char *const lr_shapes[] = {"cosine", "linear", "constant", NULL};
static const char *const positions[] = {"top", "interleave", "middle", NULL};
static const char *const inits[] = {"random", "copy_below", "zero_out", "gate", "teacher", NULL};

static int parse_lr(const cJSON *o, const char *where, ng_lr_schedule *lr) {
  static const char *const keys[] = {"peak", "floor", "warmup_tokens", "shape", NULL};
  int shape;
  if (ng_json_expect_object(o, where) || ng_json_only_keys(o, where, keys) ||
      ng_json_num(o, where, "peak", 0.0, 10.0, &lr->peak) ||
      ng_json_num(o, where, "floor", 0.0, 10.0, &lr->floor) ||
      ng_json_int(o, where, "warmup_tokens", 0, INT64_MAX / 4, &lr->warmup_tokens) ||
      json_enum(o, where, "shape", lr_shapes, &shape))
    return -1;
  if (lr->floor > lr->peak) {
    char floor[NG_SHORTEST_CHARS], peak[NG_SHORTEST_CHARS];
    ng_shortest(lr->floor, floor);
    ng_shortest(lr->peak, peak);
    return ng_fail("%s.floor: %s is above peak %s", where, floor, peak);
  }
  lr->shape = (ng_lr_shape)shape;
  return 0;
}

static int parse_data(cJSON *o, ng_run_config *rc) {
  static const char *const keys[] = {"train", "val", "batch", "seq", "micro_batch", "sampling", NULL};
  static const char *const samplings[] = {"uniform", "epoch", NULL};
  int sampling;
  if (ng_json_expect_object(o, "data") || ng_json_only_keys(o, "data", keys) ||
      json_path(o, "data", "train", rc->train_path, sizeof rc->train_path) ||
      json_path(o, "data", "val", rc->val_path, sizeof rc->val_path) ||
      ng_json_int(o, "data", "batch", 1, 4096, &rc->batch) ||
      ng_json_int(o, "data", "seq", 1, 1 << 20, &rc->seq))
    return -1;
  default_item(o, "micro_batch", cJSON_CreateNumber((double)rc->batch));
  default_item(o, "sampling", cJSON_CreateString("uniform"));
  if (ng_json_int(o, "data", "micro_batch", 1, rc->batch, &rc->micro_batch) ||
      json_enum(o, "data", "sampling", samplings, &sampling))
    return -1;
  rc->sampling = (ng_sampling)sampling;
  if (rc->batch % rc->micro_batch != 0)
    return ng_fail("data.micro_batch: %lld does not divide data.batch %lld",
                   (long long)rc->micro_batch, (long long)rc->batch);
  return 0;
}

static int parse_train(cJSON *o, ng_run_config *rc) {
  static const char *const keys[] = {"loss_chunk_tokens", "recompute", "teacher_bf16", NULL};
  default_item(o, "loss_chunk_tokens", cJSON_CreateNumber(0));
  default_item(o, "recompute", cJSON_CreateBool(false));
  default_item(o, "teacher_bf16", cJSON_CreateBool(true));
  return ng_json_expect_object(o, "train") || ng_json_only_keys(o, "train", keys) ||
         ng_json_int(o, "train", "loss_chunk_tokens", 0, INT64_MAX / 4, &rc->loss_chunk) ||
         ng_json_bool(o, "train", "recompute", &rc->recompute) ||
         ng_json_bool(o, "train", "teacher_bf16", &rc->teacher_bf16);
}

static int parse_optim(cJSON *o, ng_run_config *rc) {
  static const char *const keys[] = {"beta1", "beta2", "eps", "weight_decay", "grad_clip",
                                     "state_on_growth", NULL};
  static const char *const states[] = {"keep", "reset", NULL};
  int state;
  default_item(o, "state_on_growth", cJSON_CreateString("keep"));
  if (ng_json_expect_object(o, "optim") || ng_json_only_keys(o, "optim", keys) ||
      ng_json_num(o, "optim", "beta1", 0.0, 0.999999, &rc->optim.beta1) ||
      ng_json_num(o, "optim", "beta2", 0.0, 0.999999999, &rc->optim.beta2) ||
      ng_json_num(o, "optim", "eps", 0.0, 1.0, &rc->optim.eps) ||
      ng_json_num(o, "optim", "weight_decay", 0.0, 1e3, &rc->optim.weight_decay) ||
      ng_json_num(o, "optim", "grad_clip", 0.0, 1e30, &rc->optim.grad_clip) ||
      json_enum(o, "optim", "state_on_growth", states, &state))
    return -1;
  rc->reset_state_on_growth = state == 1;
  return 0;
}

static int parse_init(cJSON *o, ng_run_config *rc) {
  static const char *const keys[] = {"std", "layers", "embeddings", "freeze_embeddings",
                                     "deepnorm_beta", NULL};
  static const char *const sources[] = {"random", "teacher", NULL};
  int emb;
  bool deepnorm = rc->model.norm_placement == NG_NORM_DEEPNORM;
  default_item(o, "layers", cJSON_CreateString("random"));
  default_item(o, "embeddings", cJSON_CreateString("random"));
  default_item(o, "freeze_embeddings", cJSON_CreateFalse());
  if (deepnorm) default_item(o, "deepnorm_beta", cJSON_CreateTrue());
  if (ng_json_expect_object(o, "init") || ng_json_only_keys(o, "init", keys) ||
      ng_json_num(o, "init", "std", 0.0, 10.0, &rc->init_std) ||
      json_enum(o, "init", "embeddings", sources, &emb) ||
      ng_json_bool(o, "init", "freeze_embeddings", &rc->freeze_embeddings))
    return -1;
  if (!deepnorm && section(o, "deepnorm_beta"))
    return ng_fail("init.deepnorm_beta: only a deepnorm model has DeepNet's beta init");
  if (deepnorm && ng_json_bool(o, "init", "deepnorm_beta", &rc->deepnorm_beta)) return -1;
  rc->embeddings_from_teacher = emb == 1;
  const cJSON *layers = section(o, "layers");
  if (cJSON_IsString(layers)) {
    if (strcmp(layers->valuestring, "random") != 0)
      return ng_fail("init.layers: expected \"random\", a list of teacher layers or {\"every\": k}");
    rc->n_init_layers = 0;
    return 0;
  }
  if (cJSON_IsObject(layers)) {  // {"every": k}: student block i <- teacher layer i k
    static const char *const every_keys[] = {"every", NULL};
    int64_t k;
    if (ng_json_only_keys(layers, "init.layers", every_keys) ||
        ng_json_int(layers, "init.layers", "every", 1, NG_MAX_LAYERS, &k))
      return -1;
    rc->n_init_layers = rc->stages[0].depth;
    for (int64_t i = 0; i < rc->n_init_layers; i++) rc->init_layers[i] = i * k;
    return 0;
  }
  if (json_int_list(layers, "init.layers", 0, NG_MAX_LAYERS, NG_MAX_LAYERS, rc->init_layers,
                    &rc->n_init_layers))
    return -1;
  if (rc->n_init_layers != rc->stages[0].depth)
    return ng_fail("init.layers: %lld teacher layers for a first stage of depth %lld",
                   (long long)rc->n_init_layers, (long long)rc->stages[0].depth);
  return 0;
}

// The interventions on the stream's scale (grow.h): each refused where it
// cannot act.
static int parse_growth_scale(cJSON *o, ng_run_config *rc) {
  default_item(o, "rescale_stream", cJSON_CreateFalse());
  default_item(o, "depth_scaled_init", cJSON_CreateFalse());
  if (ng_json_bool(o, "growth", "rescale_stream", &rc->rescale_stream) ||
      ng_json_bool(o, "growth", "depth_scaled_init", &rc->depth_scaled_init) ||
      (rc->rescale_stream && ng_stream_rescalable(&rc->model, "growth.rescale_stream")))
    return -1;
  if (rc->depth_scaled_init && rc->grow_init != NG_INIT_RANDOM && rc->grow_init != NG_INIT_GATE)
    return ng_fail("growth.depth_scaled_init: scales a random init; growth.init must be \"random\" or \"gate\"");
  return 0;
}

// A run ends with every growth gate open: the last growth has gate_steps
// steps after it (final.safetensors, weights without a training state, is
// read with its gates open).
static int check_ramps_end(const ng_run_config *rc) {
  int last = 0;
  for (int s = 1; s < rc->n_stages; s++)
    if (rc->stages[s].depth != rc->stages[s - 1].depth) last = s;
  int64_t after = 0;
  for (int s = last; last > 0 && s < rc->n_stages; s++) after += ng_stage_steps(rc, s);
  if (last == 0 || after >= rc->gate_steps) return 0;
  return ng_fail("growth.gate_steps: %lld, but the last growth (stages[%d]) has %lld steps after "
                 "it: a run must end with its gates open",
                 (long long)rc->gate_steps, last, (long long)after);
}

// growth.new_block_placement (optional): pre blocks grown on a post model, or
// post blocks on a pre model. A run's model is never given as hybrid: growth
// makes it.
static int parse_new_block_placement(const cJSON *o, ng_run_config *rc) {
  ng_norm_placement prefix = rc->model.norm_placement, p;
  if (prefix == NG_NORM_HYBRID)
    return ng_fail("model.norm_placement: a run's hybrid student is made by growth: give its first "
                   "stage's placement (\"pre\" or \"post\") and growth.new_block_placement");
  rc->hybrid_growth = cJSON_HasObjectItem(o, "new_block_placement");
  if (!rc->hybrid_growth) return 0;
  const char *name;
  if (ng_json_str(o, "growth", "new_block_placement", &name)) return -1;
  if (ng_norm_placement_from_name(name, &p) || (p != NG_NORM_PRE && p != NG_NORM_POST))
    return ng_fail("growth.new_block_placement: \"%s\" is neither \"pre\" nor \"post\"", name);
  if (prefix != NG_NORM_PRE && prefix != NG_NORM_POST)
    return ng_fail("growth.new_block_placement: grows on a pre or post model; model.norm_placement is "
                   "\"%s\"", ng_norm_placement_name(prefix));
  if (p == prefix)
    return ng_fail("growth.new_block_placement: \"%s\" is model.norm_placement itself; leave the key "
                   "out", name);
  if (rc->rescale_stream)
    return ng_fail("growth.rescale_stream: the stream of a model with post blocks cannot be rescaled "
                   "(their outputs are normed); growth.new_block_placement makes one");
  rc->new_block_placement = p;
  return 0;
}

static int parse_growth(cJSON *o, ng_run_config *rc) {
  static const char *const keys[] = {"position",       "init",          "gate_steps", "teacher_layers",
                                     "rescale_stream", "depth_scaled_init", "new_block_placement", NULL};
  int pos, init;
  default_item(o, "gate_steps", cJSON_CreateNumber(0));
  default_item(o, "teacher_layers", cJSON_CreateArray());
  if (ng_json_expect_object(o, "growth") || ng_json_only_keys(o, "growth", keys) ||
      json_enum(o, "growth", "position", positions, &pos) ||
      json_enum(o, "growth", "init", inits, &init) ||
      ng_json_int(o, "growth", "gate_steps", 0, INT64_MAX / 4, &rc->gate_steps) ||
      json_int_list(section(o, "teacher_layers"), "growth.teacher_layers", 0, NG_MAX_LAYERS,
                    NG_MAX_LAYERS, rc->grow_teacher_layers, &rc->n_grow_teacher_layers))
    return -1;
  rc->grow_position = (ng_grow_position)pos;
  rc->grow_init = (ng_grow_init)init;
  if (parse_growth_scale(o, rc) || parse_new_block_placement(o, rc)) return -1;
  if (rc->grow_init == NG_INIT_GATE && rc->gate_steps < 1)
    return ng_fail("growth.gate_steps: the gate init needs at least 1 ramp step");
  if (rc->grow_init == NG_INIT_GATE && check_ramps_end(rc)) return -1;
  int64_t added = rc->stages[rc->n_stages - 1].depth - rc->stages[0].depth;
  if (rc->grow_init == NG_INIT_TEACHER && rc->n_grow_teacher_layers != added)
    return ng_fail("growth.teacher_layers: %lld entries for %lld new blocks",
                   (long long)rc->n_grow_teacher_layers, (long long)added);
  return 0;
}

// Stage i: depth, tokens (a whole number of batches), its schedule.
static int parse_stage(cJSON *o, int i, const ng_lr_schedule *run_lr, ng_run_config *rc) {
  static const char *const keys[] = {"depth", "tokens", "restart_lr", "lr", "freeze_existing", NULL};
  char where[32];
  snprintf(where, sizeof where, "stages[%d]", i);
  ng_stage *s = &rc->stages[i];
  default_item(o, "restart_lr", cJSON_CreateBool(i == 0 || section(o, "lr") != NULL));
  default_item(o, "freeze_existing", cJSON_CreateFalse());
  if (ng_json_expect_object(o, where) || ng_json_only_keys(o, where, keys) ||
      ng_json_int(o, where, "depth", 1, NG_MAX_LAYERS, &s->depth) ||
      ng_json_int(o, where, "tokens", 1, INT64_MAX / 4, &s->tokens) ||
      ng_json_bool(o, where, "restart_lr", &s->restart_lr) ||
      ng_json_bool(o, where, "freeze_existing", &s->freeze_existing))
    return -1;
  int64_t per_step = rc->batch * rc->seq;
  if (s->tokens % per_step != 0)
    return ng_fail("%s.tokens: %lld is not a whole number of batches of %lld tokens", where,
                   (long long)s->tokens, (long long)per_step);
  if (i > 0 && s->depth < rc->stages[i - 1].depth)
    return ng_fail("%s.depth: %lld is below the depth %lld of the stage before (students only grow)",
                   where, (long long)s->depth, (long long)rc->stages[i - 1].depth);
  if (s->freeze_existing && (i == 0 || s->depth == rc->stages[i - 1].depth))
    return ng_fail("%s.freeze_existing: only a stage that grows the student can freeze its older blocks", where);
  const cJSON *own = section(o, "lr");
  if (own && !s->restart_lr) return ng_fail("%s.lr: a stage with its own schedule must restart it", where);
  if (i == 0 && !s->restart_lr) return ng_fail("%s.restart_lr: the first stage starts its schedule", where);
  s->segment_start = s->restart_lr ? i : rc->stages[i - 1].segment_start;
  if (own) {
    char w[48];
    snprintf(w, sizeof w, "%s.lr", where);
    return parse_lr(own, w, &s->lr);
  }
  s->lr = i > 0 && !s->restart_lr ? rc->stages[i - 1].lr : *run_lr;
  return 0;
}

static int parse_stages(cJSON *arr, const ng_lr_schedule *lr, ng_run_config *rc) {
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
    return ng_fail("stages: expected a non-empty array");
  if (cJSON_GetArraySize(arr) > NG_MAX_STAGES) return ng_fail("stages: more than %d", NG_MAX_STAGES);
  rc->n_stages = 0;
  for (cJSON *it = arr->child; it; it = it->next)
    if (parse_stage(it, rc->n_stages++, lr, rc)) return -1;
  // The run's token and layer-token counts (tokens x depth, summed) are int64
  // in the trainer and exact JSON integers in its checkpoints.
  int64_t tokens = 0, layer_tokens = 0;
  for (int i = 0; i < rc->n_stages; i++) {
    const ng_stage *s = &rc->stages[i];
    if (s->tokens > NG_JSON_MAX_INT - tokens)
      return ng_fail("stages[%d].tokens: %lld brings the run's tokens past 2^53 - 1", i,
                     (long long)s->tokens);
    if (s->tokens > (NG_JSON_MAX_INT - layer_tokens) / s->depth)
      return ng_fail("stages[%d].tokens: %lld x depth %lld brings the run's layer-tokens past 2^53 - 1",
                     i, (long long)s->tokens, (long long)s->depth);
    tokens += s->tokens;
    layer_tokens += s->tokens * s->depth;
  }
  if (rc->stages[rc->n_stages - 1].depth != rc->model.num_hidden_layers)
    return ng_fail("stages: the last depth %lld differs from model.num_hidden_layers %lld",
                   (long long)rc->stages[rc->n_stages - 1].depth,
                   (long long)rc->model.num_hidden_layers);
  if (rc->model.mixln_post_layers > rc->stages[0].depth)  // every stage's model is valid
    return ng_fail("model.mixln_post_layers: %lld post blocks, but stages[0] has depth %lld",
                   (long long)rc->model.mixln_post_layers, (long long)rc->stages[0].depth);
  return 0;
}

static int parse_eval(cJSON *o, ng_run_config *rc) {
  static const char *const keys[] = {"every_steps", "batches", NULL};
  return ng_json_expect_object(o, "eval") || ng_json_only_keys(o, "eval", keys) ||
         ng_json_int(o, "eval", "every_steps", 1, INT64_MAX / 4, &rc->eval_every) ||
         ng_json_int(o, "eval", "batches", 1, 100000, &rc->eval_batches);
}

static int parse_structural(const cJSON *arr, ng_run_config *rc) {
  int64_t v[NG_MAX_STRUCTURAL], n;
  if (json_int_list(arr, "structural_tokens", 0, rc->model.vocab_size, NG_MAX_STRUCTURAL, v, &n)) return -1;
  rc->n_structural = (int)n;
  for (int64_t i = 0; i < n; i++) rc->structural_tokens[i] = (int32_t)v[i];
  return 0;
}

static int parse_cache(const cJSON *o, ng_run_config *rc) {
  static const char *const keys[] = {"train", "val", NULL};
  rc->use_cache = true;
  return ng_json_expect_object(o, "teacher_cache") || ng_json_only_keys(o, "teacher_cache", keys) ||
         json_path(o, "teacher_cache", "train", rc->cache_train, sizeof rc->cache_train) ||
         json_path(o, "teacher_cache", "val", rc->cache_val, sizeof rc->cache_val);
}

static int parse_distill(cJSON *root, ng_run_config *rc) {
  const char *extra = section(root, "teacher") ? "teacher" : section(root, "loss") ? "loss"
                      : section(root, "teacher_cache") ? "teacher_cache" : NULL;
  if (!rc->distill)
    return extra ? ng_fail("%s: a pretrain run has no teacher and no KD loss", extra) : 0;
  const cJSON *cache = section(root, "teacher_cache");
  if (cache && parse_cache(cache, rc)) return -1;
  if ((!cache || section(root, "teacher")) &&
      json_path(root, "run", "teacher", rc->teacher_path, sizeof rc->teacher_path))
    return -1;
  return ng_loss_config_parse(section(root, "loss"), "loss", &rc->loss);
}

// One training step's activations: tokens per step x (depth + 1) x the widest
// row a token has (hidden, FFN, attention, vocabulary), at most 2^52 values, so
// that every count of them (plan.h's, the trainer's buffers, in bytes and with
// plan's constant factors) stays inside int64.
static int check_step_size(const ng_run_config *rc) {
  const ng_model_config *m = &rc->model;
  double width = (double)m->hidden_size + (double)m->intermediate_size +
                 (double)(m->num_attention_heads + m->num_key_value_heads) * ((double)m->head_dim + 1.0) +
                 (double)m->vocab_size;
  double values = (double)rc->batch * (double)rc->seq * (double)(m->num_hidden_layers + 1) * width;
  if (values > 0x1p52)
    return ng_fail("data: batch %lld x seq %lld tokens per step give %.3g activation values for this "
                   "model, more than 2^52", (long long)rc->batch, (long long)rc->seq, values);
  return 0;
}

static int parse_root(cJSON *root, ng_run_config *rc) {
  static const char *const keys[] = {"name",  "seed",  "run_dir", "mode",   "data",
                                     "model", "teacher", "teacher_cache", "loss",  "optim",  "lr",
                                     "init",  "growth", "stages", "eval",   "structural_tokens",
                                     "checkpoint_every_steps", "train", "backend", "precision",
                                     NULL};
  static const char *const modes[] = {"pretrain", "distill", NULL};
  const char *name;
  int64_t seed;
  int mode;
  ng_lr_schedule lr;
  default_item(root, "structural_tokens", cJSON_CreateArray());
  default_item(root, "checkpoint_every_steps", cJSON_CreateNumber(1000));
  default_item(root, "backend", cJSON_CreateString("cpu"));
  default_item(root, "precision", cJSON_CreateString("fp32"));
  const char *backend, *precision;
  if (ng_json_expect_object(root, "run") || ng_json_only_keys(root, "run", keys) ||
      ng_json_str(root, "run", "name", &name) ||
      ng_json_int(root, "run", "seed", 0, INT64_MAX / 2, &seed) ||
      json_path(root, "run", "run_dir", rc->run_dir, sizeof rc->run_dir) ||
      json_enum(root, "run", "mode", modes, &mode) || parse_data(section(root, "data"), rc) ||
      ng_model_config_parse(section(root, "model"), "model", &rc->model) || check_step_size(rc))
    return -1;
  snprintf(rc->name, sizeof rc->name, "%s", name);
  rc->seed = (uint64_t)seed;
  rc->distill = mode == 1;
  cJSON *growth = section(root, "growth");
  if (!growth) cJSON_AddItemToObject(root, "growth", growth = cJSON_CreateObject());
  default_item(growth, "position", cJSON_CreateString("top"));
  default_item(growth, "init", cJSON_CreateString("random"));
  cJSON *train = section(root, "train");
  if (!train) cJSON_AddItemToObject(root, "train", train = cJSON_CreateObject());
  cJSON *init = section(root, "init");
  if (!init) cJSON_AddItemToObject(root, "init", init = cJSON_CreateObject());
  default_item(init, "std", cJSON_CreateNumber(0.02));
  if (parse_distill(root, rc) || parse_optim(section(root, "optim"), rc) ||
      parse_lr(section(root, "lr"), "lr", &lr) || parse_stages(section(root, "stages"), &lr, rc) ||
      parse_init(init, rc) || parse_growth(growth, rc) || parse_eval(section(root, "eval"), rc) ||
      parse_structural(section(root, "structural_tokens"), rc) || parse_train(train, rc) ||
      ng_json_int(root, "run", "checkpoint_every_steps", 1, INT64_MAX / 4, &rc->checkpoint_every) ||
      ng_json_str(root, "run", "backend", &backend) ||
      ng_json_str(root, "run", "precision", &precision))
    return -1;
  if (strlen(backend) >= sizeof rc->backend) return ng_fail("backend: \"%s\" is too long", backend);
  snprintf(rc->backend, sizeof rc->backend, "%s", backend);
  if (ng_precision_parse(precision, &rc->precision)) return -1;
  if ((!rc->distill || !rc->teacher_path[0]) &&
      (rc->n_init_layers || rc->embeddings_from_teacher || rc->grow_init == NG_INIT_TEACHER))
    return ng_fail("init: copying from a teacher needs mode \"distill\" and a \"teacher\"");
  return 0;
}

#define MAX_SET_KEY 256  // characters of a --set's key

// The value of a --set: its text as JSON, else the text as a string.
static cJSON *set_value(const char *text) {
  cJSON *v = cJSON_ParseWithOpts(text, NULL, true);
  return v ? v : cJSON_CreateString(text);
}

// Puts value (owned) at the path key (its parts separated by dots, each
// NUL-ended in place) below node; `set` is the whole --set, for messages.
static int put_at(cJSON *node, char *key, const char *set, cJSON *value) {
  for (char *part = key;;) {
    char *next = strchr(part, '.');
    if (next) *next++ = 0;
    int above = part == key ? 0 : (int)(part - key - 1);  // the length of node's path
    cJSON *child = NULL;
    if (!*part) {
      cJSON_Delete(value);
      return ng_fail("--set %s: an empty part in the key", set);
    }
    if (cJSON_IsArray(node)) {
      int size = cJSON_GetArraySize(node);
      char *end;
      long i = strtol(part, &end, 10);
      if (*part < '0' || *part > '9' || *end || i >= size) {
        cJSON_Delete(value);
        return ng_fail("--set %s: %.*s has %d entr%s: \"%s\" is not the index of one", set, above,
                       set, size, size == 1 ? "y" : "ies", part);
      }
      if (!next) {
        NG_ASSERT(cJSON_ReplaceItemInArray(node, (int)i, value));
        return 0;
      }
      child = cJSON_GetArrayItem(node, (int)i);
    } else if (cJSON_IsObject(node)) {
      child = cJSON_GetObjectItemCaseSensitive(node, part);
      if (!next) {
        NG_ASSERT(child ? cJSON_ReplaceItemInObjectCaseSensitive(node, part, value)
                        : cJSON_AddItemToObject(node, part, value));
        return 0;
      }
      if (!child) child = cJSON_AddObjectToObject(node, part);
    } else {
      cJSON_Delete(value);
      return ng_fail("--set %s: %.*s is a value, not an object or array", set, above, set);
    }
    node = child;
    part = next;
  }
}

// One --set KEY=VALUE into root (ng_run_overrides).
static int apply_set(cJSON *root, const char *set) {
  const char *eq = strchr(set, '=');
  if (!eq || eq == set) return ng_fail("--set %s: expected KEY=VALUE (a key such as lr.peak)", set);
  char key[MAX_SET_KEY];
  if ((size_t)(eq - set) >= sizeof key) return ng_fail("--set %s: the key is too long", set);
  snprintf(key, sizeof key, "%.*s", (int)(eq - set), set);
  return put_at(root, key, set, set_value(eq + 1));
}

static int apply_overrides(cJSON *root, const ng_run_overrides *ov) {
  if (!ov || !cJSON_IsObject(root)) return 0;
  for (int i = 0; i < ov->n_sets; i++)
    if (apply_set(root, ov->sets[i])) return -1;
  if (ov->seed >= 0) {
    cJSON_DeleteItemFromObjectCaseSensitive(root, "seed");
    cJSON_AddNumberToObject(root, "seed", (double)ov->seed);
  }
  const char *keys[] = {"run_dir", "backend", "precision"};
  const char *vals[] = {ov->run_dir, ov->backend, ov->precision};
  for (int i = 0; i < 3; i++)
    if (vals[i]) {
      cJSON_DeleteItemFromObjectCaseSensitive(root, keys[i]);
      cJSON_AddStringToObject(root, keys[i], vals[i]);
    }
  return 0;
}

const char *ng_config_not_run(const cJSON *root) {
  if (!cJSON_IsObject(root) || cJSON_GetObjectItemCaseSensitive(root, "stages")) return NULL;
  if (cJSON_GetObjectItemCaseSensitive(root, "architectures") ||
      cJSON_GetObjectItemCaseSensitive(root, "model_type"))
    return "a Hugging Face model's config, not a run config: its directory serves as a run's "
           "\"teacher\", or in `normgrow diag DIR --data SHARD`";
  if (cJSON_GetObjectItemCaseSensitive(root, "vocab_size"))
    return "a model config, not a run config: it is what a run config's \"model\" holds, and "
           "`normgrow plan RUN.json --teacher-config FILE` takes it";
  return NULL;
}

static int parse_with(const char *text, const char *where, const ng_run_overrides *ov,
                      ng_run_config *rc) {
  memset(rc, 0, sizeof *rc);
  cJSON *root = cJSON_Parse(text);
  if (!root) return ng_fail("%s: not valid JSON (near byte %td)", where, cJSON_GetErrorPtr() - text);
  const char *other = ng_config_not_run(root);
  if (other) {
    cJSON_Delete(root);
    return ng_fail("%s: %s", where, other);
  }
  char named[600];  // where, and whether --set changed what it holds
  snprintf(named, sizeof named, "%s%s", where, ov && ov->n_sets ? " (with --set)" : "");
  int r = apply_overrides(root, ov) || parse_root(root, rc);
  if (r == 0) rc->json = ng_json_print(root, true);
  cJSON_Delete(root);
  return r ? ng_fail_prefix(named) : 0;
}

int ng_run_config_parse(const char *text, const char *where, ng_run_config *rc) {
  return parse_with(text, where, NULL, rc);
}

int ng_run_config_load(const char *path, const ng_run_overrides *ov, ng_run_config *rc) {
  char *text;
  if (ng_read_file(path, NG_MAX_CONFIG_BYTES, &text, NULL) != 0) return -1;
  int r = parse_with(text, path, ov, rc);
  free(text);
  return r;
}

int ng_run_config_extend(const ng_run_config *rc, int64_t tokens, ng_run_config *out) {
  memset(out, 0, sizeof *out);
  int64_t per_step = rc->batch * rc->seq;
  if (tokens % per_step != 0)
    return ng_fail("--extend-tokens: %lld is not a whole number of batches of %lld tokens",
                   (long long)tokens, (long long)per_step);
  if (rc->n_stages == NG_MAX_STAGES)
    return ng_fail("--extend-tokens: the run already has %d stages, the most there can be",
                   NG_MAX_STAGES);
  const ng_stage *last = &rc->stages[rc->n_stages - 1];
  cJSON *root = cJSON_Parse(rc->json), *stage = cJSON_CreateObject();
  NG_ASSERT(root && stage);
  cJSON_AddNumberToObject(stage, "depth", (double)last->depth);
  cJSON_AddNumberToObject(stage, "tokens", (double)tokens);
  cJSON_AddTrueToObject(stage, "restart_lr");
  cJSON *lr = cJSON_AddObjectToObject(stage, "lr");
  cJSON_AddNumberToObject(lr, "peak", last->lr.floor);
  cJSON_AddNumberToObject(lr, "floor", last->lr.floor);
  cJSON_AddNumberToObject(lr, "warmup_tokens", 0);
  cJSON_AddStringToObject(lr, "shape", "constant");
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(root, "stages"), stage);
  char *text = ng_json_print(root, true);
  cJSON_Delete(root);
  int r = ng_run_config_parse(text, "--extend-tokens", out);
  free(text);
  return r;
}

void ng_run_config_free(ng_run_config *rc) {
  free(rc->json);
  rc->json = NULL;
}

int64_t ng_stage_steps(const ng_run_config *rc, int stage) {
  return rc->stages[stage].tokens / (rc->batch * rc->seq);
}

int64_t ng_run_steps(const ng_run_config *rc) {
  int64_t n = 0;
  for (int s = 0; s < rc->n_stages; s++) n += ng_stage_steps(rc, s);
  return n;
}

ng_model_config ng_stage_model(const ng_run_config *rc, int stage) {
  ng_model_config c = rc->model, grown;
  c.num_hidden_layers = rc->stages[0].depth;
  int64_t from_old[NG_MAX_LAYERS];  // stage depths are at most NG_MAX_LAYERS
  for (int s = 1; s <= stage; s++) {
    if (rc->stages[s].depth == c.num_hidden_layers) continue;
    // Valid by the parser: depths up to NG_MAX_LAYERS, a pre or post model, pre or post new blocks.
    NG_ASSERT(ng_grow_config(&c, rc->stages[s].depth, rc->grow_position,
                             rc->hybrid_growth ? &rc->new_block_placement : NULL, &grown, from_old) == 0);
    c = grown;
  }
  return c;
}
