// normgrow data: text files -> byte-level token shards DIR/train.bin, DIR/val.bin.
//   normgrow data FILE... --out DIR [--records-split LINE] [--val-fraction F] [--seed S] [--force]
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/data.h"
#include "normgrow/fileio.h"

#define DEFAULT_VAL_FRACTION 0.05
#define DEFAULT_SEED 0

// A decimal number strictly between 0 and 1.
static int parse_fraction(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == 0 || *end != 0 || errno != 0 || !(v > 0.0 && v < 1.0))
    return ng_fail("--val-fraction: \"%s\" is not a number in (0, 1)", s);
  *out = v;
  return 0;
}

// Decimal digits only (strtoull alone would accept "-1" and " 7"), fitting in 64 bits.
static int parse_seed(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s < '0' || *s > '9' || *end != 0 || errno != 0)
    return ng_fail("--seed: \"%s\" is not an unsigned 64-bit integer", s);
  *out = (uint64_t)v;
  return 0;
}

int cmd_data(const ng_cli *c) {
  const char *out = ng_cli_opt(c, "out"), *sep = ng_cli_opt(c, "records-split");
  const char *frac_opt = ng_cli_opt(c, "val-fraction"), *seed_opt = ng_cli_opt(c, "seed");
  double frac = DEFAULT_VAL_FRACTION;
  uint64_t seed = DEFAULT_SEED;
  if ((frac_opt && parse_fraction(frac_opt, &frac) != 0) ||
      (seed_opt && parse_seed(seed_opt, &seed) != 0))
    return ng_cli_error(ng_error());
  if (!out) return ng_cli_error("data: --out DIR is required");
  char *shard[2] = {ng_path_join(out, "train.bin"), ng_path_join(out, "val.bin")};
  int taken = ng_cli_may_replace(c, shard[0], "token shards that runs may be trained on") ||
              ng_cli_may_replace(c, shard[1], "token shards that runs may be evaluated on");
  free(shard[0]);
  free(shard[1]);
  if (taken) return ng_cli_error(ng_error());

  ng_data_stats st;
  if (ng_data_build(c->pos, c->npos, sep, frac, seed, out, &st) != 0)
    return ng_cli_error(ng_error());
  printf("data: %" PRIu64 " documents (train %" PRIu64 ", val %" PRIu64 "), %" PRIu64
         " tokens (train %" PRIu64 ", val %" PRIu64 ") -> %s/train.bin, %s/val.bin\n",
         st.docs[0] + st.docs[1], st.docs[0], st.docs[1], st.tokens[0] + st.tokens[1],
         st.tokens[0], st.tokens[1], out, out);
  return 0;
}
