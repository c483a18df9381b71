// normgrow train RUN.json [--seed S] [--run-dir DIR] | normgrow train --resume RUN_DIR
// [--stop-after STEP] (ends the run after that step, as a kill would: for tests)
#include <stdlib.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/run.h"

static int parse_count(const char *opt, const char *s, int64_t min, int64_t *out) {
  char *end = NULL;
  long long v = s ? strtoll(s, &end, 10) : -1;
  if (!s) return 0;
  if (*s == 0 || *end || v < min) {
    ng_fail("--%s: expected an integer >= %lld", opt, (long long)min);
    return -1;
  }
  *out = v;
  return 0;
}

int cmd_train(const ng_cli *c) {
  ng_train_args a = {.resume_dir = ng_cli_opt(c, "resume"), .overrides = {.seed = -1}};
  a.config_path = c->npos == 1 ? c->pos[0] : NULL;
  a.overrides.run_dir = ng_cli_opt(c, "run-dir");
  if ((a.config_path != NULL) == (a.resume_dir != NULL))
    return ng_cli_error("train: give either RUN.json or --resume RUN_DIR");
  if (parse_count("seed", ng_cli_opt(c, "seed"), 0, &a.overrides.seed) ||
      parse_count("stop-after", ng_cli_opt(c, "stop-after"), 1, &a.stop_after) ||
      ng_train(&a))
    return ng_cli_error(ng_error());
  return 0;
}
