// normgrow: a run directory as `report` and `runs` see it: its config.json,
// how far its metrics.jsonl got, its checkpoint's step, and whether a process
// trains it now.
#ifndef NORMGROW_TOOLS_RUNDIR_H
#define NORMGROW_TOOLS_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

typedef struct {
  cJSON *config;         // config.json as the file has it
  int64_t steps_total;   // the run's steps (ng_run_steps of the config)
  int64_t last_step;     // of the last record of metrics.jsonl (0: none)
  int64_t ckpt_step;     // of checkpoint.safetensors' state (-1: none)
  bool has_eval;         // metrics.jsonl has an eval record
  double final_ce;       // the val_ce of its last one
  bool finished;         // that record is at steps_total
  long trainer;          // the pid of the process that trains it now (0: none;
                         // -1: one does, its pid not yet written)
} ng_rundir;

// Whether `dir` is a run directory: it holds config.json, and that file is
// not a JSON object without "stages" (as a Hugging Face directory's is). A
// config.json that cannot be read counts as a run's, so that reading it names
// the problem.
bool ng_rundir_is_run(const char *dir);
// Reads config.json (required; a run config as `train` reads it, ng_run_config_parse),
// metrics.jsonl and the checkpoint's state (either may be missing), and asks
// train.lock whether a process trains the run: its lock is taken for a moment
// (a `train` starting on the directory in that moment is refused, as for any
// process that holds it). Files that are not regular files are refused, never
// waited on; -1 with a message naming the file.
int ng_rundir_read(const char *dir, ng_rundir *r);
void ng_rundir_free(ng_rundir *r);
// The run's state in a few words: "finished", "running (pid N)", "stopped
// (checkpoint N)", "stopped (no checkpoint)" or "not started".
void ng_rundir_state(const ng_rundir *r, char *buf, size_t n);

// The settings of a config as "key=value" leaves: objects are walked
// ("loss.kd_weight"), arrays and scalars are values (compact JSON).
typedef struct {
  size_t n;
  char **key, **value;
} ng_flat_config;

void ng_flatten_config(const cJSON *config, ng_flat_config *out);
void ng_flat_config_free(ng_flat_config *f);
// The value of `key`, or NULL when the config has none.
const char *ng_flat_value(const ng_flat_config *f, const char *key);
// Whether `key` has the same value (or is absent) in every one of n configs.
bool ng_flat_agree(const ng_flat_config *f, size_t n, const char *key);

#endif
