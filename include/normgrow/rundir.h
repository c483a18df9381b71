// normgrow: a run directory, the files one training run keeps (docs/runs.md
// "The files of a run directory"): written by the trainer through an
// ng_rundir it holds for the run's life, read back by `runs`, `report`,
// `diag` and a resume.
//
// The writer, in the order the trainer calls it:
//   ng_rundir_lock      the directory (made if missing) locked for the holder's
//                       life: flock on train.lock, which holds the holder's pid
//   ng_rundir_claim     a new run's directory: refused when it holds a run's
//                       files, unless --force, which removes them
//   ng_rundir_write_config  config.json (atomically)
//   ng_rundir_open_logs metrics.jsonl and diag.jsonl anew, or on resume cut
//                       back (atomically) to the records up to the checkpoint
//   ng_rundir_log       a record appended; ng_rundir_check_logs says whether
//                       an append failed (a full disk)
//   ng_rundir_close     the logs closed and the lock released
// A process that holds no ng_rundir (a rank other than 0) passes a zeroed one
// with lock_fd -1: its records are dropped.
//
// Like everything in normgrow, functions that return int return 0 on success
// and -1 after one message (ng_error) naming the directory or the file.
#ifndef NORMGROW_RUNDIR_H
#define NORMGROW_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cJSON.h>

#include "normgrow/run.h"

// ---------------------------------------------------------------- files

// The files of a run directory: the one list (docs/runs.md's table names the
// same, tools/report/runs.py those the report reads).
typedef enum {
  NG_RUN_CONFIG,      // config.json: the resolved run config
  NG_RUN_METRICS,     // metrics.jsonl: a record per step, evaluation and growth
  NG_RUN_DIAG,        // diag.jsonl: residual statistics per evaluation and growth
  NG_RUN_DIAG_FINAL,  // diag_final.json: the same with the ablation, at the end
  NG_RUN_BACKEND,     // backend.jsonl: where each process computed
  NG_RUN_CHECKPOINT,  // checkpoint.safetensors: weights, moments, training state
  NG_RUN_FINAL,       // final.safetensors: the weights at the end
  NG_RUN_LOCK,        // train.lock: the pid of the process that trains the run
} ng_run_file;
#define NG_RUN_FILES (NG_RUN_LOCK + 1)

const char *ng_run_file_name(ng_run_file f);
// "<dir>/<name>", malloc'd.
char *ng_rundir_path(const char *dir, ng_run_file f);
// Whether the file exists in dir.
bool ng_rundir_has(const char *dir, ng_run_file f);

// ---------------------------------------------------------------- writer

// The JSON-lines logs a run appends to step by step.
typedef enum { NG_LOG_METRICS, NG_LOG_DIAG } ng_run_log;
#define NG_RUN_LOGS (NG_LOG_DIAG + 1)

typedef struct {
  char dir[512];
  int lock_fd;                // train.lock, locked for the holder's life (-1: none)
  FILE *logs[NG_RUN_LOGS];    // NULL: not open (records are dropped)
  int log_errno;              // the error of the first failed append (0: none)
} ng_rundir;

// Makes `dir` (and its parents) and locks it. A directory that a live process
// holds is refused, naming its pid; the lock of a killed process is gone with
// it. The file stays (removing it would let two processes lock two files).
int ng_rundir_lock(ng_rundir *d, const char *dir);
// A new run's directory: refused when it holds any of a run's files (every
// file but train.lock), naming them and `--resume`, unless `force`, which
// removes them.
int ng_rundir_claim(const ng_rundir *d, bool force);
int ng_rundir_write_config(const ng_rundir *d, const char *json);
// The logs anew (resume_step < 0), or cut back to the records a run resumed at
// its checkpoint of resume_step keeps, and opened for appending. A record is
// kept when its step is at most resume_step, except a growth at resume_step
// (a growth follows the step it is logged with, so the resumed run grows, and
// logs it, again).
int ng_rundir_open_logs(ng_rundir *d, int64_t resume_step);
// Appends j as one line to the log (when open) and frees j. A failed append
// is remembered, not reported: the logs record what the checkpoints already
// hold, so the run stops at the end of its step (ng_rundir_check_logs).
void ng_rundir_log(ng_rundir *d, ng_run_log log, cJSON *j);
// -1 with one line naming the log, the error and how to resume when an
// append has failed.
int ng_rundir_check_logs(const ng_rundir *d);
// One line j appended to a log written once per process (backend.jsonl):
// the file anew when `anew`; frees j.
int ng_rundir_append_line(ng_rundir *d, ng_run_file f, bool anew, cJSON *j);
void ng_rundir_close(ng_rundir *d);

// ---------------------------------------------------------------- resume

// `normgrow train --resume DIR`: refused, saying what DIR is and what would
// work, when it is no run directory: nothing there, a file (a run's
// checkpoint, another checkpoint, anything else), a data directory, or a
// directory without config.json. (A config.json that is not a run's is the
// run config loader's to name.)
int ng_rundir_check_resumable(const char *dir);
// The run config in dir/config.json (ng_run_config_load, with `ov`).
int ng_rundir_load_config(const char *dir, const ng_run_overrides *ov, ng_run_config *rc);

// ---------------------------------------------------------------- reader

// Whether `dir` is a run directory: it holds config.json, and that file is
// not a JSON object without "stages" (as a Hugging Face directory's is). A
// config.json that cannot be read counts as a run's, so that reading it names
// the problem.
bool ng_rundir_is_run(const char *dir);

// A run directory as `runs`, `report` and `diag` see it.
typedef struct {
  cJSON *config;         // config.json as the file has it
  int64_t steps_total;   // the run's steps (ng_run_steps of the config)
  int64_t last_step;     // of the last record of metrics.jsonl (0: none)
  int64_t ckpt_step;     // of checkpoint.safetensors' state (-1: none)
  bool has_eval;         // metrics.jsonl has an eval record
  double final_ce;       // the val_ce of its last one
  bool finished;         // that record is at steps_total
  bool diverged;         // the last record is a "diverged" one (train.h): the
                         // run stopped there, at last_step
  long trainer;          // the pid of the process that trains it now (0: none;
                         // -1: one does, its pid not yet written)
} ng_rundir_status;

// Reads config.json (required; a run config as `train` reads it, ng_run_config_parse),
// metrics.jsonl and the checkpoint's state (either may be missing), and asks
// train.lock whether a process trains the run: its lock is taken for a moment
// (a `train` starting on the directory in that moment is refused, as for any
// process that holds it). Files that are not regular files are refused, never
// waited on; -1 with a message naming the file.
int ng_rundir_read(const char *dir, ng_rundir_status *s);
void ng_rundir_status_free(ng_rundir_status *s);
// The run's state in a few words: "finished", "running (pid N)", "diverged
// (step N)", "stopped (checkpoint N)", "stopped (no checkpoint)" or "not started".
void ng_rundir_state(const ng_rundir_status *s, char *buf, size_t n);

#endif
