// normgrow runs [DIR] [--long]: the run directories under DIR (default "runs";
// a run directory holds a run's config.json, normgrow/rundir.h), one line each within
// LINE_COLS columns: its path under DIR, its state, step, final validation CE
// and the settings in which it differs from the others listed, as many as fit
// (--long adds every one of them in full, one a line, below its run). When DIR
// is itself a run directory: that run, with every setting. A directory that
// cannot be read gets its line with the reason, the others are listed, and
// the status is 1. Links below DIR are not followed (a link back into the tree
// would list its runs again, without end).
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/rundir.h"
#include "settings.h"

#define MAX_DEPTH 4        // runs/study/arm is 2 deep
#define LINE_COLS 100      // a run's line
#define NAME_COLS 30       // longer paths are cut (shown_name)
#define STATE_COLS 23      // "stopped (no checkpoint)"
#define SHORT_VALUE_COLS 24  // values in a run's line are cut there

typedef struct {
  char *dir, *name;    // its path, and the part under DIR
  ng_rundir_status r;
  char *error;         // why it could not be read (NULL: it was)
  ng_flat_config flat;
} run_entry;

typedef struct {
  size_t n;
  run_entry *runs;
} run_list;

static int by_dir(const void *a, const void *b) {
  return strcmp(((const run_entry *)a)->dir, ((const run_entry *)b)->dir);
}

// Every run directory at or below `dir`, not below a run directory; entries
// that are links are passed by.
static void find_runs(const char *dir, int depth, run_list *out) {
  if (ng_rundir_is_run(dir)) {
    out->runs = ng_xrealloc(out->runs, (out->n + 1) * sizeof *out->runs);
    out->runs[out->n++] = (run_entry){.dir = ng_xstrdup(dir)};
    return;
  }
  DIR *d = depth < MAX_DEPTH ? opendir(dir) : NULL;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char *sub = ng_path_join(dir, e->d_name);
    struct stat st;
    if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) find_runs(sub, depth + 1, out);
    free(sub);
  }
  if (d) closedir(d);
}

// Each run read; the part of its path under root is its name.
static void read_runs(const char *root, run_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    run_entry *e = &l->runs[i];
    const char *under = e->dir + strlen(root);
    while (*under == '/') under++;
    e->name = ng_xstrdup(*under ? under : e->dir);
    if (ng_rundir_read(e->dir, &e->r) != 0) {
      const char *msg = ng_error();
      size_t n = strlen(e->dir);  // the line names the directory already
      e->error = ng_xstrdup(strncmp(msg, e->dir, n) == 0 && msg[n] == '/' ? msg + n + 1 : msg);
    }
    ng_flatten_config(e->r.config, &e->flat);
  }
}

// The keys of the readable runs' configs, each once, in order of first
// appearance, that differ between them (run_dir aside: it always does).
static size_t differing_keys(const run_list *l, const char ***out) {
  ng_flat_config *flat = ng_xcalloc(l->n ? l->n : 1, sizeof *flat);
  size_t n = 0;
  for (size_t i = 0; i < l->n; i++)
    if (!l->runs[i].error) flat[n++] = l->runs[i].flat;
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
  free(flat);
  *out = keys;
  return nk;
}

// `text` in at most `room` columns: cut with "..." when longer.
static void put_cut(const char *text, size_t room) {
  size_t len = strlen(text);
  if (len <= room) fputs(text, stdout);
  else if (room >= 3) printf("%.*s...", (int)(room - 3), text);
}

// "key=value" with the value cut at SHORT_VALUE_COLS.
static void difference_item(const ng_flat_config *f, const char *key, char *item, size_t size) {
  const char *v = ng_flat_value(f, key);
  if (!v) v = "(absent)";
  size_t vlen = strlen(v);
  snprintf(item, size, "%s=%.*s%s", key, (int)(vlen > SHORT_VALUE_COLS ? SHORT_VALUE_COLS - 3 : vlen), v,
           vlen > SHORT_VALUE_COLS ? "..." : "");
}

// "key=value, ..." in `room` columns: every key when all fit; else, in order,
// those that fit beside ", +N more" (one too long for what is left is passed
// by, so a short difference after a long one is still shown), then ", +N more".
static void put_differences(const ng_flat_config *f, const char **keys, size_t nk, size_t room) {
  if (nk == 0) {
    fputs("-", stdout);
    return;
  }
  char (*item)[256] = ng_xcalloc(nk, sizeof *item);
  size_t all = 0;
  for (size_t k = 0; k < nk; k++) {
    difference_item(f, keys[k], item[k], sizeof item[k]);
    all += strlen(item[k]) + (k ? 2 : 0);
  }
  size_t reserve = all <= room ? 0 : (size_t)snprintf(NULL, 0, ", +%zu more", nk);
  size_t used = 0, shown = 0;
  for (size_t k = 0; k < nk; k++) {
    size_t len = strlen(item[k]) + (shown ? 2 : 0);
    if (used + len + reserve > room) continue;
    printf("%s%s", shown ? ", " : "", item[k]);
    used += len;
    shown++;
  }
  if (shown < nk) printf("%s+%zu more", shown ? ", " : "", nk - shown);
  free(item);
}

// A path as shown in at most `cols` columns, written to out (cols + 1 bytes at
// least). A longer one keeps its first component and as many of its last ones
// as fit, "/.../" between them (a sweep's group and a run's seed,
// "hybrid-pre-post/.../seed1"); where not even its first and last component
// fit, its end, "..." before it.
static void shown_name(const char *name, int cols, char *out) {
  int len = (int)strlen(name);
  const char *first_end = strchr(name, '/');
  if (len <= cols) {
    strcpy(out, name);
    return;
  }
  int head = first_end ? (int)(first_end - name) : len;
  for (const char *s = first_end ? first_end + 1 : name + len; s < name + len; s++)
    if (s[-1] == '/' && head + 5 + (int)(name + len - s) <= cols) {  // the longest tail that fits
      sprintf(out, "%.*s/.../%s", head, name, s);
      return;
    }
  sprintf(out, "...%s", name + len - (cols - 3));
}

static void put_name(const char *name, int cols) {
  char shown[NAME_COLS + 1];
  shown_name(name, cols, shown);
  printf("%-*s", cols, shown);
}

// One run's line: name, state, step, final CE, then its differences in what
// is left of LINE_COLS; or name and why it could not be read.
static void put_line(const run_entry *e, int name_cols, const char **keys, size_t nk) {
  put_name(e->name, name_cols);
  if (e->error) {
    int used = name_cols + printf("  unreadable: ");
    put_cut(e->error, used < LINE_COLS ? (size_t)(LINE_COLS - used) : 0);
    putchar('\n');
    return;
  }
  char state[64], step[48], ce[24] = "-";
  ng_rundir_state(&e->r, state, sizeof state);
  snprintf(step, sizeof step, "%lld/%lld", (long long)e->r.last_step, (long long)e->r.steps_total);
  if (e->r.has_eval) snprintf(ce, sizeof ce, "%.4f", e->r.final_ce);
  int used = name_cols + printf("  %-*s %13s %8s  ", STATE_COLS, state, step, ce);
  put_differences(&e->flat, keys, nk, used < LINE_COLS ? (size_t)(LINE_COLS - used) : 0);
  putchar('\n');
}

// Below a run's line: the keys given, in full, one a line (or the reason it
// could not be read).
static void put_details(const run_entry *e, const char **keys, size_t nk) {
  if (e->error) printf("    %s\n", e->error);
  for (size_t k = 0; k < nk && !e->error; k++) {
    const char *v = ng_flat_value(&e->flat, keys[k]);
    printf("    %s = %s\n", keys[k], v ? v : "(absent)");
  }
}

static void put_header(int name_cols) {
  printf("%-*s  %-*s %13s %8s  %s\n", name_cols, "run", STATE_COLS, "state", "step", "final CE",
         "differs in");
}

static void list_free(run_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    run_entry *e = &l->runs[i];
    ng_rundir_status_free(&e->r);
    ng_flat_config_free(&e->flat);
    free(e->dir);
    free(e->name);
    free(e->error);
  }
  free(l->runs);
}

// DIR itself a run: its line, then every setting.
static void show_one(const run_entry *e) {
  int cols = (int)strlen(e->name);
  put_header(cols < NAME_COLS ? cols : NAME_COLS);
  put_line(e, cols < NAME_COLS ? cols : NAME_COLS, NULL, 0);
  const char **all = ng_xcalloc(e->flat.n ? e->flat.n : 1, sizeof *all);
  for (size_t k = 0; k < e->flat.n; k++) all[k] = e->flat.key[k];
  put_details(e, all, e->flat.n);
  free(all);
}

static void show_list(const run_list *l, bool details) {
  const char **keys = NULL;
  size_t nk = differing_keys(l, &keys);
  int cols = 3;
  for (size_t i = 0; i < l->n; i++) {
    char shown[NAME_COLS + 1];
    shown_name(l->runs[i].name, NAME_COLS, shown);
    if ((int)strlen(shown) > cols) cols = (int)strlen(shown);
  }
  put_header(cols);
  for (size_t i = 0; i < l->n; i++) {
    put_line(&l->runs[i], cols, keys, nk);
    if (details) put_details(&l->runs[i], keys, nk);
  }
  free(keys);
}

int cmd_runs(const ng_cli *c) {
  const char *root = c->npos ? c->pos[0] : "runs";
  struct stat st;
  if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
    ng_fail("runs: %s is not a directory", root);
    return ng_cli_error(ng_error());
  }
  run_list l = {0};
  find_runs(root, 0, &l);
  if (l.n) qsort(l.runs, l.n, sizeof *l.runs, by_dir);
  read_runs(root, &l);
  size_t bad = 0;
  for (size_t i = 0; i < l.n; i++) bad += l.runs[i].error != NULL;
  if (l.n == 0)
    printf("runs: no run directory (one with a run's config.json) under %s\n", root);
  else if (l.n == 1 && strcmp(l.runs[0].dir, root) == 0)
    show_one(&l.runs[0]);
  else
    show_list(&l, ng_cli_opt(c, "long") != NULL);
  size_t n = l.n;
  list_free(&l);
  if (bad == 0) return 0;
  ng_fail("runs: %zu of %zu run directories could not be read (the reason is on each one's line)",
          bad, n);
  return ng_cli_error(ng_error());
}
