// normgrow: checkpoint save and load (see checkpoint.h for the layout).
#include "normgrow/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "normgrow/common.h"
#include "normgrow/hf.h"

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
  char *t = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return t;
}

int ng_checkpoint_save(const char *path, const ng_model *m, const ng_adamw *opt,
                       const ng_train_state *st) {
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
    ng_st_writer_add(w, name, NG_F32, p->ndim, p->shape, host_copy(&h, m->be, opt->m[i], p->numel));
    snprintf(name, sizeof name, "optim.v.%s", p->name);
    ng_st_writer_add(w, name, NG_F32, p->ndim, p->shape, host_copy(&h, m->be, opt->v[i], p->numel));
  }
  int rc = ng_st_writer_save(w, path);
  ng_st_writer_free(w);
  host_copies_free(&h);
  free(model_json);
  free(state);
  return rc;
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

static int parse_state(const char *text, ng_model *m, ng_adamw *o, ng_train_state *st) {
  cJSON *s = cJSON_Parse(text), *rng, *gates, *frozen, *steps;
  int64_t L = m->cfg.num_hidden_layers;
  int rc = !s || ng_json_int(s, "state", "step", 0, INT64_MAX / 2, &st->step) ||
           ng_json_int(s, "state", "stage", 0, 1000, &st->stage) ||
           ng_json_int(s, "state", "step_in_stage", 0, INT64_MAX / 2, &st->step_in_stage) ||
           ng_json_int(s, "state", "tokens", 0, INT64_MAX / 2, &st->tokens) ||
           ng_json_int(s, "state", "layer_tokens", 0, INT64_MAX / 2, &st->layer_tokens) ||
           ng_json_num(s, "state", "flops", 0.0, 1e30, &st->flops) ||
           json_array_len(s, "rng", 4, &rng) || json_array_len(s, "gate_origin", L, &gates) ||
           json_array_len(s, "frozen", L, &frozen) ||
           json_array_len(s, "adam_steps", m->n_params, &steps)
               ? -1 : 0;
  if (!s) rc = ng_fail("state: not valid JSON");
  for (int i = 0; rc == 0 && i < 4; i++) {
    const cJSON *w = cJSON_GetArrayItem(rng, i);
    char *end = NULL;
    st->rng.s[i] = cJSON_IsString(w) ? strtoull(w->valuestring, &end, 16) : 0;
    if (!end || *end || !*w->valuestring) rc = ng_fail("state.rng[%d]: expected a hex word", i);
  }
  st->gate_origin = ng_xcalloc((size_t)L, sizeof(int64_t));
  for (int64_t l = 0; rc == 0 && l < L; l++) {
    st->gate_origin[l] = (int64_t)cJSON_GetArrayItem(gates, (int)l)->valuedouble;
    ng_model_freeze(m, l, cJSON_IsTrue(cJSON_GetArrayItem(frozen, (int)l)));
  }
  for (int i = 0; rc == 0 && o && i < m->n_params; i++)
    o->steps[i] = (int64_t)cJSON_GetArrayItem(steps, i)->valuedouble;
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
  int rc = read_model_config(&f, &cfg) || ng_model_check_file(&cfg, &f, "") ? -1 : 0;
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
