// normgrow's commands written in Python. `normgrow report` is the Python
// package tools/report (tools/report/__init__.py says what it reads and
// writes): the command runs `python3 -m report ARGS...` with the tools
// directory on PYTHONPATH, in place of normgrow itself, so its output and exit
// status are the command's.
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
static char *find_tools(void) {
  const char *env = getenv("NG_TOOLS");
  if (env && *env) return ng_xstrdup(env);
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  for (char *slash; (slash = strrchr(exe, '/')) != NULL;) {
    *slash = 0;
    char *tools = ng_path_join(exe, "tools");
    if (holds_report(tools)) return tools;
    free(tools);
  }
  return *NG_SOURCE_TOOLS && holds_report(NG_SOURCE_TOOLS) ? ng_xstrdup(NG_SOURCE_TOOLS) : NULL;
}

int cmd_report(const ng_cli *c) {
  char *tools = find_tools();
  if (!tools)
    return ng_cli_error("report: cannot find tools/report above the executable (set NG_TOOLS to the tools directory)");
  const char *old = getenv("PYTHONPATH");
  size_t n = strlen(tools) + (old ? strlen(old) : 0) + 2;
  char *path = ng_xmalloc(n);
  snprintf(path, n, "%s%s%s", tools, old && *old ? ":" : "", old && *old ? old : "");
  setenv("PYTHONPATH", path, 1);
  const char *python = getenv("NG_PYTHON");
  if (!python || !*python) python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  // python -m report, the positional arguments, then the options as given
  // (--force and --follow are flags: the report command's table in normgrow.c)
  const char **argv = ng_xcalloc((size_t)c->npos + 2 * (size_t)c->nextra + 4, sizeof(char *));
  int k = 0;
  argv[k++] = python;
  argv[k++] = "-m";
  argv[k++] = "report";
  for (int i = 0; i < c->npos; i++) argv[k++] = c->pos[i];
  char **opts = ng_xcalloc((size_t)c->nextra + 1, sizeof(char *));
  for (int i = 0; i < c->nextra; i++) {
    size_t len = strlen(c->extra_key[i]) + 3;
    opts[i] = ng_xmalloc(len);
    snprintf(opts[i], len, "--%s", c->extra_key[i]);
    argv[k++] = opts[i];
    if (strcmp(c->extra_key[i], "force") != 0 && strcmp(c->extra_key[i], "follow") != 0) argv[k++] = c->extra_val[i];
  }
  fflush(NULL);
  execvp(python, (char *const *)argv);
  int err = errno;  // exec returns only on failure
  for (int i = 0; i < c->nextra; i++) free(opts[i]);
  free(opts);
  free(argv);
  free(path);
  free(tools);
  char msg[PATH_MAX + 160];
  snprintf(msg, sizeof msg, "report: cannot run %s: %s (the report is a Python package: install python3, "
           "or set NG_PYTHON)", python, strerror(err));
  return ng_cli_error(msg);
}
