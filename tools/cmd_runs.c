// normgrow runs [DIR]: the run directories under DIR (default "runs"; a run
// directory holds a run's config.json, rundir.h), one line each: its state, step, final
// validation CE and the settings in which it differs from the others listed.
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "rundir.h"

#define MAX_DEPTH 4          // runs/study/arm is 2 deep
#define MAX_VALUE_CHARS 40   // longer values (stage lists) are cut

typedef struct {
  size_t n;
  char **dirs;
} dir_list;

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// Every run directory at or below `dir`, not below a run directory.
static void find_runs(const char *dir, int depth, dir_list *out) {
  if (ng_rundir_is_run(dir)) {
    out->dirs = ng_xrealloc(out->dirs, (out->n + 1) * sizeof(char *));
    out->dirs[out->n++] = ng_xstrdup(dir);
    return;
  }
  DIR *d = depth < MAX_DEPTH ? opendir(dir) : NULL;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char *sub = ng_path_join(dir, e->d_name);
    struct stat st;
    if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode)) find_runs(sub, depth + 1, out);
    free(sub);
  }
  if (d) closedir(d);
}

static void state_of(const ng_rundir *r, char *buf, size_t n) {
  if (r->finished)
    snprintf(buf, n, "finished");
  else if (r->ckpt_step >= 0)
    snprintf(buf, n, "stopped (checkpoint at step %lld)", (long long)r->ckpt_step);
  else if (r->last_step > 0)
    snprintf(buf, n, "stopped (no checkpoint)");
  else
    snprintf(buf, n, "not started");
}

// The keys of every config, each once, in order of first appearance, that
// differ between the runs (run_dir aside: it always does).
static size_t differing_keys(const ng_flat_config *flat, size_t n, const char ***out) {
  const char **keys = NULL;
  size_t nk = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < flat[i].n; k++) {
      const char *key = flat[i].key[k];
      bool seen = strcmp(key, "run_dir") == 0 || ng_flat_agree(flat, n, key);
      for (size_t q = 0; q < nk && !seen; q++) seen = strcmp(keys[q], key) == 0;
      if (seen) continue;
      keys = ng_xrealloc(keys, (nk + 1) * sizeof *keys);
      keys[nk++] = key;
    }
  *out = keys;
  return nk;
}

// "key=value, ..." of one run for the differing keys ("-" when none).
static void put_differences(const ng_flat_config *f, const char **keys, size_t nk) {
  for (size_t k = 0; k < nk; k++) {
    const char *v = ng_flat_value(f, keys[k]);
    if (!v) v = "(absent)";
    int len = (int)strlen(v);
    printf("%s%s=%.*s%s", k ? ", " : "", keys[k], len > MAX_VALUE_CHARS ? MAX_VALUE_CHARS : len, v,
           len > MAX_VALUE_CHARS ? "..." : "");
  }
  if (nk == 0) fputs("-", stdout);
}

int cmd_runs(const ng_cli *c) {
  const char *root = c->npos ? c->pos[0] : "runs";
  struct stat st;
  if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
    ng_fail("runs: %s is not a directory", root);
    return ng_cli_error(ng_error());
  }
  dir_list runs = {0};
  find_runs(root, 0, &runs);
  qsort(runs.dirs, runs.n, sizeof(char *), by_name);
  ng_rundir *r = ng_xcalloc(runs.n ? runs.n : 1, sizeof *r);
  ng_flat_config *flat = ng_xcalloc(runs.n ? runs.n : 1, sizeof *flat);
  int rc = 0;
  for (size_t i = 0; i < runs.n && rc == 0; i++) {
    rc = ng_rundir_read(runs.dirs[i], &r[i]);
    ng_flatten_config(r[i].config, &flat[i]);
  }
  const char **keys = NULL;
  size_t nk = rc == 0 ? differing_keys(flat, runs.n, &keys) : 0;
  if (rc == 0 && runs.n == 0) printf("runs: no run directory (one with a run's config.json) under %s\n", root);
  if (rc == 0 && runs.n > 0)
    printf("%-36s %-34s %13s %9s  %s\n", "run", "state", "step", "final CE", "differs in");
  for (size_t i = 0; i < runs.n && rc == 0; i++) {
    char state[64], step[32], ce[16] = "-";
    state_of(&r[i], state, sizeof state);
    snprintf(step, sizeof step, "%lld/%lld", (long long)r[i].last_step, (long long)r[i].steps_total);
    if (r[i].has_eval) snprintf(ce, sizeof ce, "%.4f", r[i].final_ce);
    printf("%-36s %-34s %13s %9s  ", runs.dirs[i], state, step, ce);
    put_differences(&flat[i], keys, nk);
    putchar('\n');
  }
  for (size_t i = 0; i < runs.n; i++) {
    ng_rundir_free(&r[i]);
    ng_flat_config_free(&flat[i]);
    free(runs.dirs[i]);
  }
  free(keys);
  free(runs.dirs);
  free(r);
  free(flat);
  return rc ? ng_cli_error(ng_error()) : 0;
}
