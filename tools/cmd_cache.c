// normgrow teacher-cache TEACHER SHARD OUT --k K --temperature TAU --seq T [--batch B] [--force]
// Under mpirun the ranks share the windows: OUT is then a manifest of their parts (topk.h).
#include <stdio.h>

#include "cli.h"
#include "normgrow/checkpoint.h"
#include "normgrow/comm.h"
#include "normgrow/common.h"
#include "normgrow/registry.h"
#include "normgrow/topk.h"

int cmd_teacher_cache(const ng_cli *c) {
  int64_t k = 32, seq = 128, batch = 8;
  double tau = 1.0;
  if (ng_cli_int_opt(c, "k", 1, 1000000, &k) || ng_cli_num_opt(c, "temperature", 1e-3, true, 1e3, &tau) ||
      ng_cli_int_opt(c, "seq", 1, 1 << 20, &seq) || ng_cli_int_opt(c, "batch", 1, 4096, &batch))
    return ng_cli_error(ng_error());
  if (ng_cli_may_replace(c, c->pos[2], "a teacher cache")) return ng_cli_error(ng_error());
  ng_comm *comm = ng_comm_open();
  ng_backend *be = comm ? ng_cli_backend(c) : NULL;
  ng_model *teacher = NULL;
  ng_shard s = {0};
  int rc = !be || ng_model_open(c->pos[0], be, false, &teacher) || ng_shard_open(&s, c->pos[1]) ||
           ng_topk_build_ranks(teacher, &s, k, seq, tau, batch, c->pos[2], comm);
  if (rc == 0 && comm->rank == 0)
    printf("teacher-cache: %s: k %lld, %llu windows of %lld tokens, temperature %g%s\n", c->pos[2],
           (long long)k, (unsigned long long)((s.n_tokens - 1) / (uint64_t)seq), (long long)seq, tau,
           comm->size > 1 ? " (a manifest of the ranks' parts)" : "");
  ng_shard_close(&s);
  ng_model_free(teacher);
  ng_backend_close(be);
  ng_comm_close(comm);
  return rc ? ng_cli_error(ng_error()) : 0;
}
