// normgrow's commands written in Python. `normgrow report` is the Python
// package tools/report (tools/report/__init__.py says what it reads and
// writes), `normgrow sweep` the package tools/sweep (which trains with this
// executable, $NG_BIN, and reads its runs with the report's package): the
// command runs `python3 -m PACKAGE ARGS...` with the tools directory on
// PYTHONPATH, in place of normgrow itself, so its output and exit status are
// the command's.
// The tools directory: $NG_TOOLS, else the nearest directory above the
// executable that holds tools/report (build/normgrow -> tools/report), else
// the source tree it was built from. Python: $NG_PYTHON, else /usr/bin/python3
// (where Debian's numpy, scipy and matplotlib are), else python3 on PATH.
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"

#ifndef NG_SOURCE_TOOLS
#define NG_SOURCE_TOOLS ""
#endif

static bool holds_report(const char *tools) {
  char *main_py = ng_path_join(tools, "report/__main__.py");
  bool yes = access(main_py, R_OK) == 0;
  free(main_py);
  return yes;
}

// The directory that holds the report package (malloc'd), or NULL.
// exe: this executable's path.
static char *find_tools(const char *exe_path) {
  const char *env = getenv("NG_TOOLS");
  if (env && *env) return ng_xstrdup(env);
  char exe[PATH_MAX];
  snprintf(exe, sizeof exe, "%s", exe_path);
  for (char *slash; (slash = strrchr(exe, '/')) != NULL;) {
    *slash = 0;
    char *tools = ng_path_join(exe, "tools");
    if (holds_report(tools)) return tools;
    free(tools);
  }
  return *NG_SOURCE_TOOLS && holds_report(NG_SOURCE_TOOLS) ? ng_xstrdup(NG_SOURCE_TOOLS) : NULL;
}

// Runs `python3 -m package`, the positional arguments, then the options as
// given; `flags` (NULL-terminated) are the command's options without a value
// (its flags in normgrow.c's table). --backend and --precision, which
// normgrow's parser keeps for itself, are passed on when given, and so is the
// global --threads when `threads` (the package takes it).
static int run_python(const ng_cli *c, const char *package, const char *const *flags, bool threads) {
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  char *tools = find_tools(exe);
  if (!tools) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s: cannot find tools/report above the executable (set NG_TOOLS to the tools directory)",
             package);
    return ng_cli_error(msg);
  }
  const char *old = getenv("PYTHONPATH");
  size_t n = strlen(tools) + (old ? strlen(old) : 0) + 2;
  char *path = ng_xmalloc(n);
  snprintf(path, n, "%s%s%s", tools, old && *old ? ":" : "", old && *old ? old : "");
  setenv("PYTHONPATH", path, 1);
  if (*exe) setenv("NG_BIN", exe, 1);  // the normgrow a sweep trains with: this one
  const char *python = getenv("NG_PYTHON");
  if (!python || !*python) python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const char **argv = ng_xcalloc((size_t)c->npos + 2 * (size_t)c->nextra + 10, sizeof(char *));
  char **opts = ng_xcalloc((size_t)c->nextra + 1, sizeof(char *));
  char n_threads[32];
  int k = 0;
  argv[k++] = python;
  argv[k++] = "-m";
  argv[k++] = package;
  for (int i = 0; i < c->npos; i++) argv[k++] = c->pos[i];
  for (int i = 0; i < c->nextra; i++) {
    size_t len_opt = strlen(c->extra_key[i]) + 3;
    opts[i] = ng_xmalloc(len_opt);
    snprintf(opts[i], len_opt, "--%s", c->extra_key[i]);
    argv[k++] = opts[i];
    bool flag = false;
    for (const char *const *f = flags; *f; f++) flag = flag || strcmp(*f, c->extra_key[i]) == 0;
    if (!flag) argv[k++] = c->extra_val[i];
  }
  if (threads && c->threads > 0) {
    snprintf(n_threads, sizeof n_threads, "%lld", (long long)c->threads);
    argv[k++] = "--threads";
    argv[k++] = n_threads;
  }
  if (c->backend) argv[k++] = "--backend", argv[k++] = c->backend;
  if (c->precision) argv[k++] = "--precision", argv[k++] = c->precision;
  fflush(NULL);
  execvp(python, (char *const *)argv);
  int err = errno;  // exec returns only on failure
  for (int i = 0; i < c->nextra; i++) free(opts[i]);
  free(opts);
  free(argv);
  free(path);
  free(tools);
  char msg[PATH_MAX + 160];
  snprintf(msg, sizeof msg, "%s: cannot run %s: %s (the %s is a Python package: install python3, "
           "or set NG_PYTHON)", package, python, strerror(err), package);
  return ng_cli_error(msg);
}

int cmd_report(const ng_cli *c) {
  return run_python(c, "report", (const char *const[]){"force", "follow", NULL}, false);
}

int cmd_sweep(const ng_cli *c) { return run_python(c, "sweep", (const char *const[]){NULL}, true); }
