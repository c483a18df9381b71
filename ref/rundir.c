// normgrow: a run directory, written and read (rundir.h).
#include "normgrow/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/config.h"
#include "normgrow/fileio.h"
#include "normgrow/safetensors.h"

// ---------------------------------------------------------------- files

static const char *const file_names[NG_RUN_FILES] = {
    [NG_RUN_CONFIG] = "config.json",
    [NG_RUN_METRICS] = "metrics.jsonl",
    [NG_RUN_DIAG] = "diag.jsonl",
    [NG_RUN_DIAG_FINAL] = "diag_final.json",
    [NG_RUN_BACKEND] = "backend.jsonl",
    [NG_RUN_CHECKPOINT] = "checkpoint.safetensors",
    [NG_RUN_FINAL] = "final.safetensors",
    [NG_RUN_LOCK] = "train.lock",
};

// The file of each log.
static const ng_run_file log_files[NG_RUN_LOGS] = {[NG_LOG_METRICS] = NG_RUN_METRICS,
                                                   [NG_LOG_DIAG] = NG_RUN_DIAG};

const char *ng_run_file_name(ng_run_file f) { return file_names[f]; }

char *ng_rundir_path(const char *dir, ng_run_file f) { return ng_path_join(dir, file_names[f]); }

bool ng_rundir_has(const char *dir, ng_run_file f) {
  char *path = ng_rundir_path(dir, f);
  bool yes = access(path, F_OK) == 0;
  free(path);
  return yes;
}

// The pid that train.lock holds: -1 when none is written (yet) as a line.
static long lock_holder(int fd) {
  char pid[24] = "";
  ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
  pid[n > 0 ? n : 0] = 0;
  char *end;
  long v = strtol(pid, &end, 10);
  return v > 0 && end != pid && *end == '\n' ? v : -1;
}

// ---------------------------------------------------------------- writer

int ng_rundir_lock(ng_rundir *d, const char *dir) {
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  if (ng_make_dir(dir) != 0) return -1;
  char *path = ng_rundir_path(dir, NG_RUN_LOCK);
  int rc = 0;
  d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (d->lock_fd < 0) {
    rc = ng_fail("%s: cannot open: %s", path, strerror(errno));
  } else if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    long pid = lock_holder(d->lock_fd);
    char who[32] = "(pid not yet written)";
    if (pid > 0) snprintf(who, sizeof who, "%ld", pid);
    rc = err != EWOULDBLOCK ? ng_fail("%s: cannot lock: %s", path, strerror(err))
                            : ng_fail("%s: in use by process %s, which trains it (%s is locked); "
                                      "wait for it to end or stop it", dir, who, path);
  } else {
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(d->lock_fd, 0) != 0 || pwrite(d->lock_fd, pid, (size_t)n, 0) != n)
      rc = ng_fail("%s: cannot write: %s", path, strerror(errno));
  }
  free(path);
  return rc;
}

int ng_rundir_claim(const ng_rundir *d, bool force) {
  char found[256] = "";
  for (int f = 0; f < NG_RUN_FILES; f++) {
    if (f == NG_RUN_LOCK) continue;  // the lock this process holds
    char *path = ng_rundir_path(d->dir, (ng_run_file)f);
    bool there = access(path, F_OK) == 0;
    int err = there && force && unlink(path) != 0 ? errno : 0;
    if (err) ng_fail("%s: cannot remove: %s", path, strerror(err));
    free(path);
    if (err) return -1;
    if (there)
      snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s", found[0] ? ", " : "",
               file_names[f]);
  }
  if (found[0] && !force)
    return ng_fail("%s holds a run (%s): continue it with `normgrow train --resume %s`, or "
                   "replace it with --force",
                   d->dir, found, d->dir);
  return 0;
}

int ng_rundir_write_config(const ng_rundir *d, const char *json) {
  char *path = ng_rundir_path(d->dir, NG_RUN_CONFIG);
  int rc = ng_write_text_atomic(path, json);
  free(path);
  return rc;
}

// Whether a resumed run keeps this record (ng_rundir_open_logs).
static bool keep_record(const char *line, int64_t resume_step) {
  cJSON *j = cJSON_Parse(line);
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event");
  bool growth = cJSON_IsString(ev) && strcmp(ev->valuestring, "growth") == 0;
  bool keep = cJSON_IsNumber(step) && (step->valuedouble < (double)resume_step ||
                                       (step->valuedouble == (double)resume_step && !growth));
  cJSON_Delete(j);
  return keep;
}

typedef struct {
  FILE *in;  // the old log; NULL when there is none
  int64_t resume_step;
} kept_records;

// ng_write_fn: the records of the old log that keep_record keeps.
static bool copy_kept_records(FILE *out, void *ctx) {
  const kept_records *k = ctx;
  if (!k->in) return true;
  char *line = NULL;
  size_t cap = 0;
  bool ok = true;
  while (ok && getline(&line, &cap, k->in) > 0)
    if (keep_record(line, k->resume_step)) ok = fputs(line, out) >= 0;
  free(line);
  return ok && !ferror(k->in);
}

// One log anew, or cut back to resume_step and opened for appending.
static int open_log(ng_rundir *d, ng_run_log log, int64_t resume_step) {
  char *path = ng_rundir_path(d->dir, log_files[log]);
  int rc = 0;
  if (resume_step >= 0) {
    kept_records k = {fopen(path, "r"), resume_step};
    rc = ng_write_atomic(path, copy_kept_records, &k);
    if (k.in) fclose(k.in);
  }
  if (rc == 0) d->logs[log] = fopen(path, resume_step >= 0 ? "a" : "w");
  if (rc == 0 && !d->logs[log]) rc = ng_fail("%s: %s", path, strerror(errno));
  free(path);
  return rc;
}

int ng_rundir_open_logs(ng_rundir *d, int64_t resume_step) {
  d->log_errno = 0;
  for (int l = 0; l < NG_RUN_LOGS; l++)
    if (open_log(d, (ng_run_log)l, resume_step)) return -1;
  return 0;
}

// Appends j as a line to f (NULL: dropped) and frees j; a failed append's
// error is kept in d->log_errno (the first one only).
static void append_line(ng_rundir *d, FILE *f, cJSON *j) {
  if (f) {
    char *s = ng_json_print(j, false);
    if ((fprintf(f, "%s\n", s) < 0 || fflush(f) != 0) && d->log_errno == 0)
      d->log_errno = errno ? errno : EIO;
    free(s);
  }
  cJSON_Delete(j);
}

void ng_rundir_log(ng_rundir *d, ng_run_log log, cJSON *j) { append_line(d, d->logs[log], j); }

int ng_rundir_check_logs(const ng_rundir *d) {
  for (int l = 0; l < NG_RUN_LOGS; l++)
    if (d->logs[l] && ferror(d->logs[l]))
      return ng_fail("%s/%s: cannot append: %s; stopped (the last checkpoint stands: `normgrow "
                     "train --resume %s` rewrites the log from it)",
                     d->dir, file_names[log_files[l]],
                     strerror(d->log_errno ? d->log_errno : EIO), d->dir);
  return 0;
}

int ng_rundir_append_line(ng_rundir *d, ng_run_file f, bool anew, cJSON *j) {
  char *path = ng_rundir_path(d->dir, f);
  FILE *out = fopen(path, anew ? "w" : "a");
  int rc = out ? 0 : ng_fail("%s: %s", path, strerror(errno));
  if (out) {
    append_line(d, out, j);
    bool ok = !ferror(out);
    if (fclose(out) != 0 && ok) ok = false, d->log_errno = errno;
    if (!ok) rc = ng_fail("%s: cannot append: %s", path, strerror(d->log_errno ? d->log_errno : EIO));
  } else {
    cJSON_Delete(j);
  }
  free(path);
  return rc;
}

void ng_rundir_close(ng_rundir *d) {
  for (int l = 0; l < NG_RUN_LOGS; l++) {
    if (d->logs[l]) fclose(d->logs[l]);
    d->logs[l] = NULL;
  }
  if (d->lock_fd >= 0) close(d->lock_fd);  // releases the run directory
  d->lock_fd = -1;
}

// ---------------------------------------------------------------- resume

// --resume FILE: a checkpoint of a run (then the run's directory resumes),
// another checkpoint, or another file.
static int resume_file(const char *file) {
  ng_st_file f;
  bool ckpt = ng_st_open(&f, file) == 0;
  if (ckpt) {
    const char *format = ng_st_meta(&f, "format");
    ckpt = format && strcmp(format, NG_CKPT_FORMAT) == 0;
    ng_st_close(&f);
  }
  char *copy = ng_xstrdup(file), *run = dirname(copy);
  int rc = ckpt && ng_rundir_has(run, NG_RUN_CONFIG)
               ? ng_fail("%s: a checkpoint file of the run in %s, not a run directory: resume that "
                         "run with `normgrow train --resume %s`", file, run, run)
           : ckpt ? ng_fail("%s: a checkpoint file, not a run directory: --resume takes the "
                            "directory a run trains in; a checkpoint serves as a run's "
                            "\"teacher\", or in `normgrow diag` and `normgrow export`", file)
                  : ng_fail("%s: a file, not a run directory: --resume takes the directory a run "
                            "trains in (`normgrow runs` lists those under runs/)", file);
  free(copy);
  return rc;
}

int ng_rundir_check_resumable(const char *dir) {
  static const char *const shards[] = {"train.bin", "train.manifest.json", "val.bin",
                                       "val.manifest.json", NULL};
  struct stat st;
  if (stat(dir, &st) != 0)
    return ng_fail("%s: nothing there; --resume takes the directory of a run (`normgrow runs` "
                   "lists those under runs/)", dir);
  if (!S_ISDIR(st.st_mode)) return resume_file(dir);
  for (int i = 0; shards[i]; i++) {
    char *path = ng_path_join(dir, shards[i]);
    bool there = access(path, F_OK) == 0;
    free(path);
    if (there)
      return ng_fail("%s: a data directory (it holds %s), not a run directory: a run config names "
                     "its shards in data.train and data.val, and --resume takes the directory a "
                     "run trains in", dir, shards[i]);
  }
  if (!ng_rundir_has(dir, NG_RUN_CONFIG))
    return ng_fail("%s: no config.json, so no run to resume (start one with `normgrow train "
                   "RUN.json --run-dir %s`)", dir, dir);
  return 0;
}

int ng_rundir_load_config(const char *dir, const ng_run_overrides *ov, ng_run_config *rc) {
  char *path = ng_rundir_path(dir, NG_RUN_CONFIG);
  int r = ng_run_config_load(path, ov, rc);
  free(path);
  return r;
}

// ---------------------------------------------------------------- reader

// 1 when `path` is a regular file, 0 when nothing is there; otherwise -1 and a
// message (a FIFO would block the reader that opened it).
static int regular_file(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return errno == ENOENT ? 0 : ng_fail("%s: cannot open: %s", path, strerror(errno));
  return S_ISREG(st.st_mode) ? 1 : ng_fail("%s: not a regular file", path);
}

bool ng_rundir_is_run(const char *dir) {
  char *path = ng_rundir_path(dir, NG_RUN_CONFIG), *text = NULL;
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
static int read_config(const char *dir, ng_rundir_status *s) {
  char *path = ng_rundir_path(dir, NG_RUN_CONFIG), *text = NULL;
  ng_run_config rc;
  int there = regular_file(path);
  int err = there != 1 || ng_read_file(path, NG_MAX_CONFIG_BYTES, &text, NULL) ||
            ng_run_config_parse(text, path, &rc);
  if (there == 0) ng_fail("%s: missing", path);
  if (!err) {
    s->steps_total = ng_run_steps(&rc);
    s->config = cJSON_Parse(text);
    ng_run_config_free(&rc);
  }
  free(text);
  free(path);
  return err ? -1 : 0;
}

// One record of metrics.jsonl: its step, the val_ce of an eval record, and
// whether it is a "diverged" one.
static int metrics_record(const char *line, const char *where, ng_rundir_status *s) {
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
                           &s->last_step);
  bool eval = rc == 0 && strcmp(ev->valuestring, "eval") == 0;
  if (eval) {
    s->has_eval = true;
    s->final_ce = cJSON_IsNumber(ce) ? ce->valuedouble : NAN;
  }
  s->finished = eval && s->last_step == s->steps_total;
  s->diverged = rc == 0 && strcmp(ev->valuestring, "diverged") == 0;
  cJSON_Delete(j);
  return rc;
}

// The step of the last record and the val_ce of the last eval record.
static int read_metrics(const char *dir, ng_rundir_status *s) {
  char *path = ng_rundir_path(dir, NG_RUN_METRICS), *line = NULL;
  int there = regular_file(path);
  FILE *f = there == 1 ? fopen(path, "r") : NULL;
  size_t cap = 0;
  int rc = there < 0 ? -1 : 0;
  if (there == 1 && !f) rc = ng_fail("%s: cannot open: %s", path, strerror(errno));
  for (long no = 1; f && rc == 0 && getline(&line, &cap, f) > 0; no++) {
    if (line[strspn(line, " \t\r\n")] == 0) continue;
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%ld", path, no);
    rc = metrics_record(line, where, s);
  }
  if (f) fclose(f);
  free(line);
  free(path);
  return rc;
}

// The step in checkpoint.safetensors' state (its header only).
static void read_checkpoint_step(const char *dir, ng_rundir_status *s) {
  char *path = ng_rundir_path(dir, NG_RUN_CHECKPOINT);
  ng_st_file f;
  s->ckpt_step = -1;
  if (regular_file(path) == 1 && ng_st_open(&f, path) == 0) {
    cJSON *state = ng_st_meta(&f, "state") ? cJSON_Parse(ng_st_meta(&f, "state")) : NULL;
    int64_t step;
    if (ng_json_int(state, "state", "step", 0, NG_JSON_MAX_INT, &step) == 0) s->ckpt_step = step;
    cJSON_Delete(state);
    ng_st_close(&f);
  }
  free(path);
}

// Whether a process holds train.lock (ng_rundir_lock), and its pid.
static void read_trainer(const char *dir, ng_rundir_status *s) {
  char *path = ng_rundir_path(dir, NG_RUN_LOCK);
  int fd = regular_file(path) == 1 ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
  s->trainer = 0;
  if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) s->trainer = lock_holder(fd);
  if (fd >= 0) close(fd);  // releases a lock taken here
  free(path);
}

int ng_rundir_read(const char *dir, ng_rundir_status *s) {
  memset(s, 0, sizeof *s);
  if (read_config(dir, s) || read_metrics(dir, s)) {
    ng_rundir_status_free(s);
    return -1;
  }
  read_checkpoint_step(dir, s);
  read_trainer(dir, s);
  return 0;
}

void ng_rundir_status_free(ng_rundir_status *s) {
  cJSON_Delete(s->config);
  s->config = NULL;
}

void ng_rundir_state(const ng_rundir_status *s, char *buf, size_t n) {
  if (s->trainer > 0)
    snprintf(buf, n, "running (pid %ld)", s->trainer);
  else if (s->trainer < 0)
    snprintf(buf, n, "running");
  else if (s->finished)
    snprintf(buf, n, "finished");
  else if (s->diverged)
    snprintf(buf, n, "diverged (step %lld)", (long long)s->last_step);
  else if (s->ckpt_step >= 0)
    snprintf(buf, n, "stopped (checkpoint %lld)", (long long)s->ckpt_step);
  else if (s->last_step > 0)
    snprintf(buf, n, "stopped (no checkpoint)");
  else
    snprintf(buf, n, "not started");
}
