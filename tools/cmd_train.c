// normgrow train RUN.json [--set KEY=VALUE]... [--seed S] [--run-dir DIR] [--force] [--check]
// normgrow train --resume RUN_DIR [--extend-tokens N]
// and either with [--backend NAME] [--precision fp32|bf16] (replace the run's own)
// [--stop-after STEP] (ends the run after that step, as a kill would: for tests)
// --set KEY=VALUE (repeatable): a key of RUN.json replaced (ng_run_overrides, run.h);
// --check: RUN.json with its overrides resolved and printed (every default
// explicit, as the run directory's config.json would hold it), nothing trained.
// A run stopped by SIGINT or SIGTERM (after its checkpoint) exits 128 + signal;
// one its sanity check stopped (it diverged: NG_TRAIN_DIVERGED) exits 3.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/run.h"
#include "normgrow/train.h"

enum { EXIT_DIVERGED = 3 };  // a run its sanity check stopped

// The values of every --set, in order (malloc'd; *n of them).
static const char **collect_sets(const ng_cli *c, int *n) {
  const char **sets = ng_xcalloc((size_t)c->nextra + 1, sizeof(char *));
  *n = 0;
  for (int i = 0; i < c->nextra; i++)
    if (strcmp(c->extra_key[i], "set") == 0) sets[(*n)++] = c->extra_val[i];
  return sets;
}

// --check: the resolved config on stdout.
static int check_config(const ng_train_args *a) {
  ng_run_config rc;
  if (ng_run_config_load(a->config_path, &a->overrides, &rc)) return ng_cli_error(ng_error());
  fputs(rc.json, stdout);
  fputc('\n', stdout);
  ng_run_config_free(&rc);
  return 0;
}

static int train(const ng_cli *c, ng_train_args *a) {
  a->config_path = c->npos == 1 ? c->pos[0] : NULL;
  a->overrides.run_dir = ng_cli_opt(c, "run-dir");
  a->overrides.backend = c->backend;
  a->overrides.precision = c->precision;
  if ((a->config_path != NULL) == (a->resume_dir != NULL))
    return ng_cli_error("train: give either RUN.json or --resume RUN_DIR");
  if (a->resume_dir && (a->force || a->overrides.run_dir || ng_cli_opt(c, "seed") || a->overrides.n_sets ||
                        ng_cli_opt(c, "check")))
    return ng_cli_error("train: --resume continues a run as it is: no --force, --seed, --run-dir, --set or --check");
  if (!a->resume_dir && ng_cli_opt(c, "extend-tokens"))
    return ng_cli_error("train: --extend-tokens continues a run: use it with --resume RUN_DIR");
  if (ng_cli_int_opt(c, "seed", 0, INT64_MAX / 2, &a->overrides.seed) ||
      ng_cli_int_opt(c, "stop-after", 1, INT64_MAX / 2, &a->stop_after) ||
      ng_cli_int_opt(c, "extend-tokens", 1, INT64_MAX / 4, &a->extend_tokens))
    return ng_cli_error(ng_error());
  if (ng_cli_opt(c, "check")) return check_config(a);
  int rc = ng_train(a);
  if (rc > 0) return 128 + rc;  // stopped by that signal, the checkpoint written
  if (rc == NG_TRAIN_DIVERGED) {
    if (ng_error()[0]) ng_cli_error(ng_error());  // one line for all the ranks of a run
    return EXIT_DIVERGED;
  }
  return rc ? ng_cli_error(ng_error()) : 0;
}

int cmd_train(const ng_cli *c) {
  int n_sets;
  const char **sets = collect_sets(c, &n_sets);
  ng_train_args a = {.resume_dir = ng_cli_opt(c, "resume"),
                     .overrides = {.seed = -1, .n_sets = n_sets, .sets = sets},
                     .force = ng_cli_opt(c, "force") != NULL};
  int rc = train(c, &a);
  free(sets);
  return rc;
}
