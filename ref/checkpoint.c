// normgrow: checkpoint save and load (see checkpoint.h for the layout).
#include "normgrow/checkpoint.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/hf.h"
#include "normgrow/plan.h"
#include "normgrow/run.h"

float ng_gate_at(int64_t origin, int64_t step, int64_t gate_steps) {
  return origin < 0 ? 1.0f : (float)fmin(1.0, (double)(step - origin) / (double)gate_steps);
}

void ng_set_gates(ng_model *m, const ng_train_state *st, int64_t step) {
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
    m->growth_gate[l] = ng_gate_at(st->gate_origin[l], step, st->gate_steps);
}

// Host copies of backend buffers, kept until the writer has saved.
typedef struct {
  int n;
  float **bufs;
} host_copies;

static const float *host_copy(host_copies *h, ng_backend *be, const float *src, size_t numel) {
  float *d = ng_xmalloc(numel * sizeof(float));
  be->download(be, d, src, numel * sizeof(float));
  h->bufs = ng_xrealloc(h->bufs, (size_t)(h->n + 1) * sizeof(float *));
  return h->bufs[h->n++] = d;
}

static void host_copies_free(host_copies *h) {
  for (int i = 0; i < h->n; i++) free(h->bufs[i]);
  free(h->bufs);
}

static cJSON *state_json(const ng_model *m, const ng_adamw *opt, const ng_train_state *st) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "step", (double)st->step);
  cJSON_AddNumberToObject(s, "stage", (double)st->stage);
  cJSON_AddNumberToObject(s, "step_in_stage", (double)st->step_in_stage);
  cJSON_AddNumberToObject(s, "tokens", (double)st->tokens);
  cJSON_AddNumberToObject(s, "layer_tokens", (double)st->layer_tokens);
  cJSON_AddNumberToObject(s, "flops", st->flops);
  cJSON *rng = cJSON_AddArrayToObject(s, "rng");
  for (int i = 0; i < 4; i++) {
    char hex[20];
    snprintf(hex, sizeof hex, "%016" PRIx64, st->rng.s[i]);
    cJSON_AddItemToArray(rng, cJSON_CreateString(hex));
  }
  cJSON_AddNumberToObject(s, "gate_steps", (double)st->gate_steps);
  cJSON *gates = cJSON_AddArrayToObject(s, "gate_origin");
  cJSON *frozen = cJSON_AddArrayToObject(s, "frozen");
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
    cJSON_AddItemToArray(gates, cJSON_CreateNumber((double)st->gate_origin[l]));
    bool f = false;
    for (int i = 0; i < m->n_params; i++) f |= m->params[i].layer == l && m->params[i].frozen;
    cJSON_AddItemToArray(frozen, cJSON_CreateBool(f));
  }
  cJSON *steps = cJSON_AddArrayToObject(s, "adam_steps");
  for (int i = 0; i < opt->n; i++) cJSON_AddItemToArray(steps, cJSON_CreateNumber((double)opt->steps[i]));
  return s;
}

static char *print_and_free(cJSON *j) {
  char *t = ng_json_print(j, false);
  cJSON_Delete(j);
  return t;
}

// The checkpoint, its moments from opt's backend buffers or, when m_host is
// not NULL, from host arrays.
static int save(const char *path, const ng_model *m, const ng_adamw *opt, float *const *m_host,
                float *const *v_host, const ng_train_state *st) {
  ng_st_writer *w = ng_st_writer_new();
  host_copies h = {0};
  char *model_json = print_and_free(ng_model_config_to_json(&m->cfg));
  char *state = st && opt ? print_and_free(state_json(m, opt, st)) : NULL;
  ng_st_writer_meta(w, "format", NG_CKPT_FORMAT);
  ng_st_writer_meta(w, "model", model_json);
  if (state) ng_st_writer_meta(w, "state", state);
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    ng_st_writer_add(w, p->name, NG_F32, p->ndim, p->shape, host_copy(&h, m->be, p->data, p->numel));
  }
  for (int i = 0; opt && i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    char name[128];
    snprintf(name, sizeof name, "optim.m.%s", p->name);
    ng_st_writer_add(w, name, NG_F32, p->ndim, p->shape,
                     m_host ? m_host[i] : host_copy(&h, m->be, opt->m[i], p->numel));
    snprintf(name, sizeof name, "optim.v.%s", p->name);
    ng_st_writer_add(w, name, NG_F32, p->ndim, p->shape,
                     v_host ? v_host[i] : host_copy(&h, m->be, opt->v[i], p->numel));
  }
  int rc = ng_st_writer_save(w, path);
  ng_st_writer_free(w);
  host_copies_free(&h);
  free(model_json);
  free(state);
  return rc;
}

int ng_checkpoint_save(const char *path, const ng_model *m, const ng_adamw *opt,
                       const ng_train_state *st) {
  return save(path, m, opt, NULL, NULL, st);
}

int ng_checkpoint_save_moments(const char *path, const ng_model *m, const ng_adamw *opt,
                               float *const *m_host, float *const *v_host,
                               const ng_train_state *st) {
  return save(path, m, opt, m_host, v_host, st);
}

// ---------------------------------------------------------------- loading

static int load_buffer(const ng_st_file *f, const char *name, const ng_param *p, ng_backend *be,
                       float *dst) {
  float *host = ng_xmalloc(p->numel * sizeof(float));
  int rc = ng_st_load_f32(f, name, p->ndim, p->shape, host);
  if (rc == 0) be->upload(be, dst, host, p->numel * sizeof(float));
  free(host);
  return rc;
}

static int load_optimizer(const ng_st_file *f, const ng_model *m, ng_adamw *o) {
  for (int i = 0; i < m->n_params; i++) {
    char name[128];
    snprintf(name, sizeof name, "optim.m.%s", m->params[i].name);
    if (load_buffer(f, name, &m->params[i], m->be, o->m[i])) return -1;
    snprintf(name, sizeof name, "optim.v.%s", m->params[i].name);
    if (load_buffer(f, name, &m->params[i], m->be, o->v[i])) return -1;
  }
  return 0;
}

static int json_array_len(const cJSON *s, const char *key, int64_t n, cJSON **out) {
  cJSON *a = cJSON_GetObjectItemCaseSensitive(s, key);
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
    return ng_fail("state.%s: expected an array of %lld entries", key, (long long)n);
  *out = a;
  return 0;
}

// state.rng[i]: a word of exactly 16 hex digits, as the writer prints it.
static int parse_rng_word(const cJSON *w, int i, uint64_t *out) {
  const char *s = cJSON_IsString(w) ? w->valuestring : "";
  bool hex = strlen(s) == 16;
  for (int j = 0; hex && j < 16; j++) hex = isxdigit((unsigned char)s[j]) != 0;
  if (!hex) return ng_fail("state.rng[%d]: expected a word of 16 hex digits", i);
  *out = strtoull(s, NULL, 16);
  return 0;
}

static int parse_rng(const cJSON *a, ng_rng *rng) {
  uint64_t any = 0;
  for (int i = 0; i < 4; i++) {
    if (parse_rng_word(cJSON_GetArrayItem(a, i), i, &rng->s[i])) return -1;
    any |= rng->s[i];
  }
  return any ? 0 : ng_fail("state.rng: all four words are 0, which is no generator state");
}

// The entries of the array state.<key> as integers in [min, max].
static int int_entries(const cJSON *a, const char *key, int64_t min, int64_t max, int64_t *out) {
  int i = 0;
  for (const cJSON *it = a->child; it; it = it->next, i++) {
    char what[64];
    snprintf(what, sizeof what, "state.%s[%d]", key, i);
    if (ng_json_int_value(it, what, min, max, &out[i])) return -1;
  }
  return 0;
}

static int bool_entries(const cJSON *a, const char *key) {
  int i = 0;
  for (const cJSON *it = a->child; it; it = it->next, i++)
    if (!cJSON_IsBool(it)) return ng_fail("state.%s[%d]: expected true or false", key, i);
  return 0;
}

// growth.gate_steps of the run's config.json beside the checkpoint at `path`
// (a state written before gate_steps was, whose block `l` began a ramp at
// step `origin`).
static int gate_steps_beside(const char *path, int64_t l, int64_t origin, int64_t *out) {
  char *copy = ng_xstrdup(path), *config = ng_path_join(dirname(copy), "config.json"), *text = NULL;
  cJSON *j = access(config, F_OK) == 0 && ng_read_file(config, 1 << 20, &text, NULL) == 0
                 ? cJSON_Parse(text)
                 : NULL;
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "growth"), "gate_steps");
  int rc = cJSON_IsNumber(g) && g->valuedouble >= 1 && g->valuedouble <= (double)NG_JSON_MAX_INT
               ? (*out = (int64_t)g->valuedouble, 0)
               : ng_fail("state.gate_steps: missing (a checkpoint of an earlier normgrow), and no "
                         "run config.json beside it gives growth.gate_steps; block %lld's gate "
                         "ramp began at step %lld",
                         (long long)l + 1, (long long)origin);
  cJSON_Delete(j);
  free(text);
  free(config);
  free(copy);
  return rc;
}

// state.gate_steps: at least 1 once a ramp has begun; from the run's
// config.json when an older file lacks it.
static int parse_gate_steps(const cJSON *s, const char *path, int64_t L, ng_train_state *st) {
  int64_t l = 0;
  while (l < L && st->gate_origin[l] < 0) l++;
  st->gate_steps = 0;
  if (!cJSON_GetObjectItemCaseSensitive(s, "gate_steps"))
    return l < L ? gate_steps_beside(path, l, st->gate_origin[l], &st->gate_steps) : 0;
  if (ng_json_int(s, "state", "gate_steps", 0, NG_JSON_MAX_INT, &st->gate_steps)) return -1;
  if (l < L && st->gate_steps < 1)
    return ng_fail("state.gate_steps: 0, but block %lld's gate ramp began at step %lld",
                   (long long)l + 1, (long long)st->gate_origin[l]);
  return 0;
}

// Every field checked for its type and range before any is used: counts in
// [0, 2^53 - 1], a gate origin in [-1, step], a parameter's Adam steps in
// [0, step]. Sets st->gate_origin (allocated [L]) and the model's frozen flags.
static int parse_state_json(const cJSON *s, const char *path, ng_model *m, ng_adamw *o,
                            ng_train_state *st) {
  static const char *const keys[] = {"step",        "stage",      "step_in_stage", "tokens",
                                     "layer_tokens", "flops",      "rng",           "gate_origin",
                                     "gate_steps",  "frozen",     "adam_steps",    NULL};
  const int64_t max = NG_JSON_MAX_INT, L = m->cfg.num_hidden_layers;
  cJSON *rng = NULL, *gates = NULL, *frozen = NULL, *steps = NULL;
  st->gate_origin = ng_xcalloc((size_t)L, sizeof(int64_t));
  if (ng_json_expect_object(s, "state") || ng_json_only_keys(s, "state", keys) ||
      ng_json_int(s, "state", "step", 0, max, &st->step) ||
      ng_json_int(s, "state", "stage", 0, NG_MAX_STAGES - 1, &st->stage) ||
      ng_json_int(s, "state", "step_in_stage", 0, st->step, &st->step_in_stage) ||
      ng_json_int(s, "state", "tokens", 0, max, &st->tokens) ||
      ng_json_int(s, "state", "layer_tokens", 0, max, &st->layer_tokens) ||
      ng_json_num(s, "state", "flops", 0.0, 1e30, &st->flops) ||
      json_array_len(s, "rng", 4, &rng) || parse_rng(rng, &st->rng) ||
      json_array_len(s, "gate_origin", L, &gates) ||
      int_entries(gates, "gate_origin", -1, st->step, st->gate_origin) ||
      parse_gate_steps(s, path, L, st) || json_array_len(s, "frozen", L, &frozen) || bool_entries(frozen, "frozen") ||
      json_array_len(s, "adam_steps", m->n_params, &steps))
    return -1;
  int64_t *adam = ng_xcalloc((size_t)m->n_params, sizeof(int64_t));
  int rc = int_entries(steps, "adam_steps", 0, st->step, adam);
  if (rc == 0 && o) memcpy(o->steps, adam, (size_t)m->n_params * sizeof(int64_t));
  free(adam);
  for (int64_t l = 0; rc == 0 && l < L; l++)
    ng_model_freeze(m, l, cJSON_IsTrue(cJSON_GetArrayItem(frozen, (int)l)));
  return rc;
}

static int parse_state(const char *text, const char *path, ng_model *m, ng_adamw *o,
                       ng_train_state *st) {
  cJSON *s = cJSON_Parse(text);
  int rc = s ? parse_state_json(s, path, m, o, st) : ng_fail("state: not valid JSON");
  cJSON_Delete(s);
  return rc;
}

static int read_model_config(const ng_st_file *f, ng_model_config *cfg) {
  const char *format = ng_st_meta(f, "format"), *text = ng_st_meta(f, "model");
  if (!format || strcmp(format, NG_CKPT_FORMAT) != 0)
    return ng_fail("not a normgrow checkpoint (__metadata__.format is not \"%s\")", NG_CKPT_FORMAT);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  int rc = j ? ng_model_config_parse(j, "__metadata__.model", cfg)
             : ng_fail("__metadata__.model: missing or not valid JSON");
  cJSON_Delete(j);
  return rc;
}

int ng_checkpoint_load(const char *path, ng_backend *be, bool trainable, ng_model **out,
                       ng_adamw **opt, ng_train_state *st) {
  ng_st_file f;
  ng_model_config cfg;
  if (ng_st_open(&f, path)) return -1;
  int rc = read_model_config(&f, &cfg) || ng_model_check_file(&cfg, &f, "") ||
                   ng_plan_check_model_memory(&cfg, trainable, opt != NULL, path)
               ? -1
               : 0;
  ng_model *m = rc ? NULL : ng_model_create(be, &cfg, trainable);
  ng_adamw *o = m && opt ? ng_adamw_create(m) : NULL;
  ng_train_state own = {0}, *s = st ? st : &own;  // the gates are read whoever asks
  const char *state = ng_st_meta(&f, "state");
  s->gate_origin = NULL;
  if (rc == 0) rc = ng_model_load(m, &f, "");
  if (rc == 0 && o) rc = load_optimizer(&f, m, o);
  if (rc == 0 && opt && !state) rc = ng_fail("__metadata__.state: missing");
  if (rc == 0 && state) rc = parse_state(state, path, m, o, s);
  if (rc == 0 && state) ng_set_gates(m, s, s->step);
  ng_st_close(&f);
  if (rc || !st) free(s->gate_origin), s->gate_origin = NULL;
  if (rc) {
    ng_adamw_free(m, o);
    ng_model_free(m);
    return ng_fail_prefix(path);
  }
  *out = m;
  if (opt) *opt = o;
  return 0;
}

int ng_model_open(const char *path, ng_backend *be, bool trainable, ng_model **out) {
  struct stat st;
  if (stat(path, &st) != 0) return ng_fail("%s: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) return ng_hf_load(path, be, trainable, out);
  return ng_checkpoint_load(path, be, trainable, out, NULL, NULL);
}
