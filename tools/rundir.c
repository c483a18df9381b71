// normgrow: run directories read for `report` and `runs` (see rundir.h).
#include "rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normgrow/common.h"
#include "normgrow/config.h"
#include "normgrow/fileio.h"
#include "normgrow/run.h"
#include "normgrow/safetensors.h"

// 1 when `path` is a regular file, 0 when nothing is there; otherwise -1 and a
// message (a FIFO would block the reader that opened it).
static int regular_file(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return errno == ENOENT ? 0 : ng_fail("%s: cannot open: %s", path, strerror(errno));
  return S_ISREG(st.st_mode) ? 1 : ng_fail("%s: not a regular file", path);
}

bool ng_rundir_is_run(const char *dir) {
  char *path = ng_path_join(dir, "config.json"), *text = NULL;
  int there = regular_file(path);
  bool yes = there != 0;
  if (there == 1 && ng_read_file(path, NG_MAX_CONFIG_BYTES, &text, NULL) == 0) {
    cJSON *j = cJSON_Parse(text);
    yes = !cJSON_IsObject(j) || cJSON_GetObjectItemCaseSensitive(j, "stages");
    cJSON_Delete(j);
  }
  free(text);
  free(path);
  return yes;
}

// config.json through the run config's own parser: its steps, and its tree.
static int read_config(const char *dir, ng_rundir *r) {
  char *path = ng_path_join(dir, "config.json"), *text = NULL;
  ng_run_config rc;
  int there = regular_file(path);
  int err = there != 1 || ng_read_file(path, NG_MAX_CONFIG_BYTES, &text, NULL) ||
            ng_run_config_parse(text, path, &rc);
  if (there == 0) ng_fail("%s: missing", path);
  if (!err) {
    r->steps_total = ng_run_steps(&rc);
    r->config = cJSON_Parse(text);
    ng_run_config_free(&rc);
  }
  free(text);
  free(path);
  return err ? -1 : 0;
}

// One record of metrics.jsonl: its step, and the val_ce of an eval record.
static int metrics_record(const char *line, const char *where, ng_rundir *r) {
  cJSON *j = cJSON_Parse(line);
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event");
  const cJSON *ce = cJSON_GetObjectItemCaseSensitive(j, "val_ce");
  char what[PATH_MAX + 48];
  snprintf(what, sizeof what, "%s: step", where);
  int rc = 0;
  if (!cJSON_IsObject(j) || !cJSON_IsString(ev))
    rc = ng_fail("%s: not a metrics record (\"event\" and \"step\")", where);
  else
    rc = ng_json_int_value(cJSON_GetObjectItemCaseSensitive(j, "step"), what, 0, NG_JSON_MAX_INT,
                           &r->last_step);
  if (rc == 0 && strcmp(ev->valuestring, "eval") == 0) {
    r->has_eval = true;
    r->final_ce = cJSON_IsNumber(ce) ? ce->valuedouble : NAN;
    r->finished = r->last_step == r->steps_total;
  } else {
    r->finished = false;
  }
  cJSON_Delete(j);
  return rc;
}

// The step of the last record and the val_ce of the last eval record.
static int read_metrics(const char *dir, ng_rundir *r) {
  char *path = ng_path_join(dir, "metrics.jsonl"), *line = NULL;
  int there = regular_file(path);
  FILE *f = there == 1 ? fopen(path, "r") : NULL;
  size_t cap = 0;
  int rc = there < 0 ? -1 : 0;
  if (there == 1 && !f) rc = ng_fail("%s: cannot open: %s", path, strerror(errno));
  for (long no = 1; f && rc == 0 && getline(&line, &cap, f) > 0; no++) {
    if (line[strspn(line, " \t\r\n")] == 0) continue;
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%ld", path, no);
    rc = metrics_record(line, where, r);
  }
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
  if (regular_file(path) == 1 && ng_st_open(&f, path) == 0) {
    cJSON *state = ng_st_meta(&f, "state") ? cJSON_Parse(ng_st_meta(&f, "state")) : NULL;
    int64_t step;
    if (ng_json_int(state, "state", "step", 0, NG_JSON_MAX_INT, &step) == 0) r->ckpt_step = step;
    cJSON_Delete(state);
    ng_st_close(&f);
  }
  free(path);
}

// Whether a process holds train.lock (train.c's lock_run_dir), and its pid,
// which the file holds.
static void read_trainer(const char *dir, ng_rundir *r) {
  char *path = ng_path_join(dir, "train.lock");
  int fd = regular_file(path) == 1 ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
  r->trainer = 0;
  if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    char pid[24] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    pid[n > 0 ? n : 0] = 0;
    char *end;
    long v = strtol(pid, &end, 10);
    r->trainer = v > 0 && end != pid && *end == '\n' ? v : -1;
  }
  if (fd >= 0) close(fd);  // releases a lock taken here
  free(path);
}

int ng_rundir_read(const char *dir, ng_rundir *r) {
  memset(r, 0, sizeof *r);
  if (read_config(dir, r) || read_metrics(dir, r)) {
    ng_rundir_free(r);
    return -1;
  }
  read_checkpoint_step(dir, r);
  read_trainer(dir, r);
  return 0;
}

void ng_rundir_free(ng_rundir *r) {
  cJSON_Delete(r->config);
  r->config = NULL;
}

void ng_rundir_state(const ng_rundir *r, char *buf, size_t n) {
  if (r->trainer > 0)
    snprintf(buf, n, "running (pid %ld)", r->trainer);
  else if (r->trainer < 0)
    snprintf(buf, n, "running");
  else if (r->finished)
    snprintf(buf, n, "finished");
  else if (r->ckpt_step >= 0)
    snprintf(buf, n, "stopped (checkpoint %lld)", (long long)r->ckpt_step);
  else if (r->last_step > 0)
    snprintf(buf, n, "stopped (no checkpoint)");
  else
    snprintf(buf, n, "not started");
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
