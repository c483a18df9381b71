// normgrow tests: the repository's run configs, loaded, and their training
// totals, summed over their stages.
#ifndef NORMGROW_TESTS_RUN_COUNTS_H
#define NORMGROW_TESTS_RUN_COUNTS_H

#include <stdint.h>
#include <stdio.h>

#include "normgrow/common.h"
#include "normgrow/run.h"

// <root>/configs/<rel>.json, resolved; prints why not.
static inline int load_config(const char *root, const char *rel, ng_run_config *rc) {
  char path[1024];
  snprintf(path, sizeof path, "%s/configs/%s.json", root, rel);
  int r = ng_run_config_load(path, NULL, rc);
  if (r) printf("# %s: %s\n", path, ng_error());
  return r;
}

// Tokens of the whole run.
static inline int64_t run_tokens(const ng_run_config *rc) {
  int64_t n = 0;
  for (int i = 0; i < rc->n_stages; i++) n += rc->stages[i].tokens;
  return n;
}

// Sum over stages of depth x tokens: the active-layer-token count.
static inline int64_t layer_tokens(const ng_run_config *rc) {
  int64_t n = 0;
  for (int i = 0; i < rc->n_stages; i++) n += rc->stages[i].depth * rc->stages[i].tokens;
  return n;
}

#endif
