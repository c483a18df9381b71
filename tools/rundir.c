// normgrow: run directories read for `report` and `runs` (see rundir.h).
#include "rundir.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "normgrow/common.h"
#include "normgrow/config.h"
#include "normgrow/fileio.h"
#include "normgrow/safetensors.h"

#define MAX_CONFIG_BYTES (1 << 20)

bool ng_rundir_is_run(const char *dir) {
  char *path = ng_path_join(dir, "config.json"), *text = NULL;
  bool yes = access(path, F_OK) == 0;
  if (yes && ng_read_file(path, MAX_CONFIG_BYTES, &text, NULL) == 0) {
    cJSON *j = cJSON_Parse(text);
    yes = !cJSON_IsObject(j) || cJSON_GetObjectItemCaseSensitive(j, "stages");
    cJSON_Delete(j);
  }
  free(text);
  free(path);
  return yes;
}

static int read_config(const char *dir, ng_rundir *r) {
  char *path = ng_path_join(dir, "config.json"), *text;
  int rc = ng_read_file(path, MAX_CONFIG_BYTES, &text, NULL);
  if (rc == 0) {
    r->config = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(r->config)) rc = ng_fail("%s: not a valid JSON object", path);
  }
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(r->config, "data"), *s;
  int64_t batch = 0, seq = 0, tokens = 0, t;
  if (rc == 0 && (ng_json_int(data, "config.json: data", "batch", 1, INT64_MAX, &batch) ||
                  ng_json_int(data, "config.json: data", "seq", 1, INT64_MAX, &seq)))
    rc = ng_fail_prefix(dir);
  const cJSON *stages = rc == 0 ? cJSON_GetObjectItemCaseSensitive(r->config, "stages") : NULL;
  cJSON_ArrayForEach(s, stages) {
    if (ng_json_int(s, "config.json: stages[]", "tokens", 1, INT64_MAX / 4, &t)) {
      rc = ng_fail_prefix(dir);
      break;
    }
    tokens += t;
  }
  if (rc == 0) r->steps_total = tokens / (batch * seq);
  free(path);
  return rc;
}

// The step of the last record and the val_ce of the last eval record.
static int read_metrics(const char *dir, ng_rundir *r) {
  char *path = ng_path_join(dir, "metrics.jsonl"), *line = NULL;
  FILE *f = fopen(path, "r");
  size_t cap = 0;
  int rc = 0;
  for (long no = 1; f && rc == 0 && getline(&line, &cap, f) > 0; no++) {
    if (line[strspn(line, " \t\r\n")] == 0) continue;
    cJSON *j = cJSON_Parse(line);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event");
    const cJSON *ce = cJSON_GetObjectItemCaseSensitive(j, "val_ce");
    if (!cJSON_IsNumber(step) || !cJSON_IsString(ev)) {
      rc = ng_fail("%s:%ld: not a metrics record (\"event\" and \"step\")", path, no);
    } else {
      r->last_step = (int64_t)step->valuedouble;
      if (strcmp(ev->valuestring, "eval") == 0) {
        r->has_eval = true;
        r->final_ce = cJSON_IsNumber(ce) ? ce->valuedouble : NAN;
        r->finished = r->last_step == r->steps_total;
      } else {
        r->finished = false;
      }
    }
    cJSON_Delete(j);
  }
  if (!f && errno != ENOENT) rc = ng_fail("%s: %s", path, strerror(errno));
  if (f) fclose(f);
  free(line);
  free(path);
  return rc;
}

// The step in checkpoint.safetensors' state (its header only).
static void read_checkpoint_step(const char *dir, ng_rundir *r) {
  char *path = ng_path_join(dir, "checkpoint.safetensors");
  ng_st_file f;
  r->ckpt_step = -1;
  if (access(path, F_OK) == 0 && ng_st_open(&f, path) == 0) {
    cJSON *state = ng_st_meta(&f, "state") ? cJSON_Parse(ng_st_meta(&f, "state")) : NULL;
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "step");
    if (cJSON_IsNumber(step)) r->ckpt_step = (int64_t)step->valuedouble;
    cJSON_Delete(state);
    ng_st_close(&f);
  }
  free(path);
}

int ng_rundir_read(const char *dir, ng_rundir *r) {
  memset(r, 0, sizeof *r);
  if (read_config(dir, r) || read_metrics(dir, r)) return -1;
  read_checkpoint_step(dir, r);
  return 0;
}

void ng_rundir_free(ng_rundir *r) {
  cJSON_Delete(r->config);
  r->config = NULL;
}

// ---------------------------------------------------------------- settings

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
