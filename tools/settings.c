// normgrow: the settings of a run config as "key=value" leaves (settings.h).
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"
#include "normgrow/config.h"

static void flat_add(ng_flat_config *f, const char *key, const cJSON *v) {
  f->key = ng_xrealloc(f->key, (f->n + 1) * sizeof(char *));
  f->value = ng_xrealloc(f->value, (f->n + 1) * sizeof(char *));
  f->key[f->n] = ng_xstrdup(key);
  f->value[f->n++] = ng_json_print(v, false);
}

static void flatten(const cJSON *o, const char *prefix, ng_flat_config *f) {
  for (const cJSON *it = o->child; it; it = it->next) {
    size_t len = strlen(prefix) + strlen(it->string) + 2;
    char *key = ng_xmalloc(len);
    snprintf(key, len, "%s%s%s", prefix, *prefix ? "." : "", it->string);
    if (cJSON_IsObject(it))
      flatten(it, key, f);
    else
      flat_add(f, key, it);
    free(key);
  }
}

void ng_flatten_config(const cJSON *config, ng_flat_config *out) {
  memset(out, 0, sizeof *out);
  if (cJSON_IsObject(config)) flatten(config, "", out);
}

void ng_flat_config_free(ng_flat_config *f) {
  for (size_t i = 0; i < f->n; i++) {
    free(f->key[i]);
    cJSON_free(f->value[i]);
  }
  free(f->key);
  free(f->value);
}

const char *ng_flat_value(const ng_flat_config *f, const char *key) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->key[i], key) == 0) return f->value[i];
  return NULL;
}

bool ng_flat_agree(const ng_flat_config *f, size_t n, const char *key) {
  const char *first = ng_flat_value(&f[0], key);
  for (size_t i = 1; i < n; i++) {
    const char *v = ng_flat_value(&f[i], key);
    if ((v == NULL) != (first == NULL) || (v && strcmp(v, first) != 0)) return false;
  }
  return true;
}
