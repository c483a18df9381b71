// Fuzz target: a run config. The round-trip invariant: the resolved config a
// run directory records parses back to the same config. Then what a run and
// `normgrow plan` compute from an accepted config: steps, the learning rate at
// every stage's first and last step, each stage's memory and FLOPs (signed
// overflow is a UBSan finding), its counts exact in JSON, its parameters
// within NG_MAX_PARAMS.
#include "../run_compare.h"
#include "normgrow/lr_schedule.h"
#include "normgrow/plan.h"
#include "readers.h"

static void check_schedule(const ng_run_config *rc) {
  int64_t steps = 0, per_step = rc->batch * rc->seq, layer_tokens = 0;
  ng_plan_device dev = {.devices = 1, .memory_gib = 80, .tflops = 100, .bytes_per_param = 4};
  for (int s = 0; s < rc->n_stages; s++) {
    int64_t k = ng_stage_steps(rc, s);
    NG_FUZZ_REQUIRE(k >= 1 && steps <= INT64_MAX - k);
    steps += k;
    // What a checkpoint records of the run is an exact JSON integer.
    NG_FUZZ_REQUIRE(rc->stages[s].tokens <= (NG_JSON_MAX_INT - layer_tokens) / rc->stages[s].depth);
    layer_tokens += rc->stages[s].tokens * rc->stages[s].depth;
    double first = ng_lr_at(rc, s, 0), last = ng_lr_at(rc, s, (k - 1) * per_step);
    NG_FUZZ_REQUIRE(first >= 0 && first <= 10 && last >= 0 && last <= 10);
    ng_plan_stage st;
    ng_plan_stage_of(rc, s, NULL, &dev, &st);
    NG_FUZZ_REQUIRE(st.student.total > 0 && st.student.total <= NG_MAX_PARAMS && st.total > 0 && st.flops > 0);
  }
}

static int fuzz_run_config(const uint8_t *data, size_t n) {
  char *text = ng_xmalloc(n + 1);
  memcpy(text, data, n);
  text[n] = 0;
  ng_run_config a, b;
  int rc = ng_run_config_parse(text, "run", &a);
  free(text);
  if (rc != 0) return ng_fuzz_refused();
  NG_FUZZ_REQUIRE(ng_run_config_parse(a.json, "resolved", &b) == 0);
  NG_FUZZ_REQUIRE(ng_same_run(&a, &b) && strcmp(a.json, b.json) == 0);
  check_schedule(&a);
  ng_run_config_free(&a);
  ng_run_config_free(&b);
  return 0;
}
NG_FUZZ_TARGET(fuzz_run_config)
