// normgrow train RUN.json | normgrow train --resume RUN_DIR  [--stop-after STEP]
#include <stdlib.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/run.h"

int cmd_train(const ng_cli *c) {
  const char *resume = ng_cli_opt(c, "resume");
  if ((c->npos == 1) == (resume != NULL))
    return ng_cli_error("train: give either RUN.json or --resume RUN_DIR");
  const char *stop = ng_cli_opt(c, "stop-after");
  char *end = NULL;
  long long stop_after = stop ? strtoll(stop, &end, 10) : 0;
  if (stop && (*end || stop_after < 1)) return ng_cli_error("--stop-after: expected a step number >= 1");
  if (ng_train(resume ? NULL : c->pos[0], resume, stop_after)) return ng_cli_error(ng_error());
  return 0;
}
