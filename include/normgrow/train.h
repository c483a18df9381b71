// normgrow: the trainer: runs or resumes one arm (run.h is its configuration
// and curriculum), through the backend its run config names (registry.h).
#ifndef NORMGROW_TRAIN_H
#define NORMGROW_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/run.h"

typedef struct {
  const char *config_path;   // a new run of this arm (with `overrides`), or
  const char *resume_dir;    // the run to continue from its last checkpoint
  ng_run_overrides overrides;  // on resume, only backend and precision apply
  bool force;                // a new run may replace a run in its directory
  int64_t extend_tokens;     // > 0 (resume only): append a stage of this many
                             // tokens at the final depth, its LR constant at the
                             // floor of the schedule it follows (config.json
                             // records it)
  int64_t stop_after;        // > 0: end after this step, as a kill would (tests)
} ng_train_args;

// Run or resume one arm; a resumed run ends with weights bit-identical to an
// uninterrupted one (same thread count). The run directory is the trainer's
// through rundir.h: a new run refuses a directory that holds any of a run's
// files (every one but train.lock) unless `force`, which removes them first.
// Resuming a finished run says so on stderr and returns 0.
//
// SIGINT and SIGTERM: the first finishes the current step, writes the
// checkpoint (atomically) and makes ng_train return that signal's number (> 0;
// nothing else returns > 0); a second one ends the process at once with status
// 128 + signal. The previous handlers are restored on return.
//
// A step whose loss, gradient norm or weights are not finite, or whose CE is
// absurd (docs/runs.md, "Non-finite or runaway training"), stops the run with
// NG_TRAIN_DIVERGED: nothing of the step is written but the last record of
// metrics.jsonl, {"event": "diverged", "step": S, ..., "why": "..."}, which a
// resume from the last checkpoint cuts with the rest after it. Any other
// failure returns -1; both with the message in ng_error() (for a divergence
// under MPI, rank 0's alone: every rank stops at that step, and the other
// ranks' messages are empty).
#define NG_TRAIN_DIVERGED (-2)
int ng_train(const ng_train_args *args);

#endif
