// normgrow: a run directory as `report` and `runs` see it: its config.json,
// how far its metrics.jsonl got, and its checkpoint's step.
#ifndef NORMGROW_TOOLS_RUNDIR_H
#define NORMGROW_TOOLS_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

typedef struct {
  cJSON *config;         // config.json
  int64_t steps_total;   // sum of stages[].tokens / (data.batch * data.seq)
  int64_t last_step;     // of the last record of metrics.jsonl (0: none)
  int64_t ckpt_step;     // of checkpoint.safetensors' state (-1: none)
  bool has_eval;         // metrics.jsonl has an eval record
  double final_ce;       // the val_ce of its last one
  bool finished;         // that record is at steps_total
} ng_rundir;

// Whether `dir` is a run directory: it holds config.json, and that file is
// not a JSON object without "stages" (as a Hugging Face directory's is). A
// config.json that cannot be read counts as a run's, so that reading it names
// the problem.
bool ng_rundir_is_run(const char *dir);
// Reads config.json (required), metrics.jsonl and the checkpoint's state
// (either may be missing); -1 with a message naming the file.
int ng_rundir_read(const char *dir, ng_rundir *r);
void ng_rundir_free(ng_rundir *r);

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
