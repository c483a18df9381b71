// Fuzz target: a checkpoint's metadata. The input's parts are the "model" and
// "state" JSON; the tensors are those of the model the "model" config
// describes (when it is small), zero-filled, with an optimizer, so that a
// mutated state reaches every field's validation (the safetensors targets
// fuzz the file's bytes).
#include <cJSON.h>

#include "normgrow/config.h"
#include "readers.h"

static int fuzz_checkpoint(const uint8_t *data, size_t n) {
  const uint8_t *ptr[2];
  size_t len[2];
  if (ng_fuzz_parts(data, n, ptr, len, 2) != 2) return 0;
  char *model = strndup((const char *)ptr[0], len[0]), *state = strndup((const char *)ptr[1], len[1]);
  NG_ASSERT(model && state);
  cJSON *j = cJSON_Parse(model);
  ng_model_config cfg;
  bool small = j && ng_model_config_parse(j, "model", &cfg) == 0 && ng_model_n_weights(&cfg) <= 400;
  ng_model *skel = small ? ng_model_create(NULL, &cfg, false) : NULL;
  size_t numel = 0;
  for (int i = 0; skel && i < skel->n_params; i++) numel += skel->params[i].numel;
  ng_st_writer *w = ng_st_writer_new();
  ng_st_writer_meta(w, "format", NG_CKPT_FORMAT);
  ng_st_writer_meta(w, "model", model);
  ng_st_writer_meta(w, "state", state);
  float *zeros = skel && numel <= (1 << 20) ? ng_xcalloc(numel, sizeof(float)) : NULL;
  char name[128];
  for (int i = 0; zeros && i < skel->n_params; i++) {
    const ng_param *p = &skel->params[i];
    ng_st_writer_add(w, p->name, NG_F32, p->ndim, p->shape, zeros);
    snprintf(name, sizeof name, "optim.m.%s", p->name);
    ng_st_writer_add(w, name, NG_F32, p->ndim, p->shape, zeros);
    snprintf(name, sizeof name, "optim.v.%s", p->name);
    ng_st_writer_add(w, name, NG_F32, p->ndim, p->shape, zeros);
  }
  char path[512];
  NG_ASSERT(ng_st_writer_save(w, ng_fuzz_path(path, sizeof path, "ckpt.safetensors")) == 0);
  ng_st_writer_free(w);
  ng_fuzz_checkpoint_file(path);
  free(zeros);
  ng_model_free(skel);
  cJSON_Delete(j);
  free(model);
  free(state);
  return 0;
}
NG_FUZZ_TARGET(fuzz_checkpoint)
