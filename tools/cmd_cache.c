// normgrow teacher-cache TEACHER SHARD OUT --k K --temperature TAU --seq T [--batch B]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/topk.h"

static int number(const ng_cli *c, const char *key, double def, double lo, double hi, double *out) {
  const char *s = ng_cli_opt(c, key);
  char *end = NULL;
  *out = s ? strtod(s, &end) : def;
  if (s && (*s == 0 || *end || !(*out >= lo && *out <= hi)))
    return ng_fail("--%s: \"%s\" is not a number in [%g, %g]", key, s, lo, hi);
  return 0;
}

int cmd_teacher_cache(const ng_cli *c) {
  double k, tau, seq, batch;
  if (number(c, "k", 32, 1, 1e6, &k) || number(c, "temperature", 1.0, 1e-3, 1e3, &tau) ||
      number(c, "seq", 128, 1, 1 << 20, &seq) || number(c, "batch", 8, 1, 4096, &batch))
    return ng_cli_error(ng_error());
  if (k != floor(k) || seq != floor(seq) || batch != floor(batch))
    return ng_cli_error("--k, --seq, --batch: expected whole numbers");
  ng_backend *be = ng_backend_get(c->backend);
  ng_model *teacher = NULL;
  ng_shard s = {0};
  int rc = !be || ng_model_open(c->pos[0], be, false, &teacher) || ng_shard_open(&s, c->pos[1]) ||
           ng_topk_build(teacher, &s, (int64_t)k, (int64_t)seq, tau, (int64_t)batch, c->pos[2]);
  if (rc == 0)
    printf("teacher-cache: %s: k %lld, %llu windows of %lld tokens, temperature %g\n", c->pos[2],
           (long long)k, (unsigned long long)((s.n_tokens - 1) / (uint64_t)seq), (long long)seq, tau);
  ng_shard_close(&s);
  ng_model_free(teacher);
  return rc ? ng_cli_error(ng_error()) : 0;
}
