// normgrow: the learning rate of every step of a run.
//
// The stages of a run form segments that share one schedule: a stage with
// restart_lr starts a segment with its own "lr", a stage without it continues
// the schedule of the stage before (run.h). Within a segment the rate warms up
// linearly from 0 to peak over warmup_tokens (the first step already above 0),
// then goes from peak to floor over the rest of the segment's tokens by shape:
// cosine, linear, or constant (peak throughout).
#ifndef NORMGROW_LR_SCHEDULE_H
#define NORMGROW_LR_SCHEDULE_H

#include <stdint.h>

#include "normgrow/run.h"

// Learning rate of the step that starts `tokens_done_in_stage` into `stage`.
double ng_lr_at(const ng_run_config *rc, int stage, int64_t tokens_done_in_stage);

#endif
