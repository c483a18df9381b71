// normgrow train RUN.json [--seed S] [--run-dir DIR] [--force]
// normgrow train --resume RUN_DIR [--extend-tokens N]
// and either with [--backend NAME] [--precision fp32|bf16] (replace the run's own)
// [--stop-after STEP] (ends the run after that step, as a kill would: for tests)
// A run stopped by SIGINT or SIGTERM (after its checkpoint) exits 128 + signal.
#include <stdint.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/run.h"

int cmd_train(const ng_cli *c) {
  ng_train_args a = {.resume_dir = ng_cli_opt(c, "resume"), .overrides = {.seed = -1},
                     .force = ng_cli_opt(c, "force") != NULL};
  a.config_path = c->npos == 1 ? c->pos[0] : NULL;
  a.overrides.run_dir = ng_cli_opt(c, "run-dir");
  a.overrides.backend = c->backend;
  a.overrides.precision = c->precision;
  if ((a.config_path != NULL) == (a.resume_dir != NULL))
    return ng_cli_error("train: give either RUN.json or --resume RUN_DIR");
  if (a.resume_dir && (a.force || a.overrides.run_dir || ng_cli_opt(c, "seed")))
    return ng_cli_error("train: --resume continues a run as it is: no --force, --seed or --run-dir");
  if (!a.resume_dir && ng_cli_opt(c, "extend-tokens"))
    return ng_cli_error("train: --extend-tokens continues a run: use it with --resume RUN_DIR");
  if (ng_cli_int_opt(c, "seed", 0, INT64_MAX / 2, &a.overrides.seed) ||
      ng_cli_int_opt(c, "stop-after", 1, INT64_MAX / 2, &a.stop_after) ||
      ng_cli_int_opt(c, "extend-tokens", 1, INT64_MAX / 4, &a.extend_tokens))
    return ng_cli_error(ng_error());
  int rc = ng_train(&a);
  if (rc > 0) return 128 + rc;  // stopped by that signal, the checkpoint written
  return rc ? ng_cli_error(ng_error()) : 0;
}
