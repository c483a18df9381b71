// normgrow: the learning-rate schedule (lr_schedule.h).
#include "normgrow/lr_schedule.h"

#include <math.h>

// Warmup from 0 to peak over warmup_tokens, then peak -> floor over the rest
// of the segment (the stages that share this schedule), by shape.
double ng_lr_at(const ng_run_config *rc, int stage, int64_t tokens_done_in_stage) {
  const ng_stage *s = &rc->stages[stage];
  int64_t t = tokens_done_in_stage, total = 0;
  for (int i = s->segment_start; i < rc->n_stages && rc->stages[i].segment_start == s->segment_start; i++) {
    if (i < stage) t += rc->stages[i].tokens;
    total += rc->stages[i].tokens;
  }
  const ng_lr_schedule *lr = &s->lr;
  if (t < lr->warmup_tokens)  // linear warmup, the first step already above 0
    return lr->peak * fmin(1.0, (double)(t + rc->batch * rc->seq) / (double)lr->warmup_tokens);
  if (lr->shape == NG_LR_CONSTANT || total <= lr->warmup_tokens) return lr->peak;
  double p = (double)(t - lr->warmup_tokens) / (double)(total - lr->warmup_tokens);
  double f = lr->shape == NG_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * p)) : 1.0 - p;
  return lr->floor + (lr->peak - lr->floor) * f;
}
