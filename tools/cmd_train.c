// normgrow train RUN.json | normgrow train --resume RUN_DIR
#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/run.h"

int cmd_train(const ng_cli *c) {
  const char *resume = ng_cli_opt(c, "resume");
  if ((c->npos == 1) == (resume != NULL))
    return ng_cli_error("train: give either RUN.json or --resume RUN_DIR");
  if (ng_train(resume ? NULL : c->pos[0], resume)) return ng_cli_error(ng_error());
  return 0;
}
