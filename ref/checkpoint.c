// normgrow: checkpoint save and load (see checkpoint.h for the layout).
#include "normgrow/checkpoint.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "normgrow/common.h"
#include "normgrow/hf.h"
#include "normgrow/plan.h"
#include "normgrow/run.h"

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

// Every field checked for its type and range before any is used: counts in
// [0, 2^53 - 1], a gate origin in [-1, step], a parameter's Adam steps in
// [0, step]. Sets st->gate_origin (allocated [L]) and the model's frozen flags.
static int parse_state_json(const cJSON *s, ng_model *m, ng_adamw *o, ng_train_state *st) {
  static const char *const keys[] = {"step", "stage", "step_in_stage", "tokens", "layer_tokens",
                                     "flops", "rng", "gate_origin", "frozen", "adam_steps", NULL};
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
      json_array_len(s, "frozen", L, &frozen) || bool_entries(frozen, "frozen") ||
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

static int parse_state(const char *text, ng_model *m, ng_adamw *o, ng_train_state *st) {
  cJSON *s = cJSON_Parse(text);
  int rc = s ? parse_state_json(s, m, o, st) : ng_fail("state: not valid JSON");
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
  if (rc == 0) rc = ng_model_load(m, &f, "");
  if (rc == 0 && o) rc = load_optimizer(&f, m, o);
  if (rc == 0 && st) {
    const char *state = ng_st_meta(&f, "state");
    rc = state ? parse_state(state, m, o, st) : ng_fail("__metadata__.state: missing");
  }
  ng_st_close(&f);
  if (rc) {
    ng_adamw_free(m, o);
    ng_model_free(m);
    if (st) free(st->gate_origin), st->gate_origin = NULL;
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
