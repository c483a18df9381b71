// normgrow: the communicator of one process, and the choice of communicator.
#include "normgrow/comm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/backend.h"
#include "normgrow/common.h"

// One rank: a sum over the ranks is the buffer itself, a gather a copy.
static void single_allreduce_f32(ng_comm *c, float *buf, int64_t n) { (void)c, (void)buf, (void)n; }
static void single_allreduce_f64(ng_comm *c, double *buf, int64_t n) { (void)c, (void)buf, (void)n; }

static void single_copy(ng_comm *c, const float *send, float *recv, int64_t n) {
  (void)c;
  if (send != recv) memmove(recv, send, (size_t)n * sizeof(float));
}

static void single_broadcast(ng_comm *c, void *buf, size_t bytes, int root) {
  (void)c, (void)buf, (void)bytes, (void)root;
}

static void single_barrier(ng_comm *c) { (void)c; }

static void single_abort(ng_comm *c, int code) {
  (void)c;
  exit(code);
}

static void single_close(ng_comm *c) { free(c); }

ng_comm *ng_comm_single(void) {
  ng_comm *c = ng_xcalloc(1, sizeof *c);
  *c = (ng_comm){.name = "single", .kind = NG_COMM_SINGLE, .rank = 0, .size = 1,
                 .allreduce_f32 = single_allreduce_f32, .allreduce_f64 = single_allreduce_f64,
                 .reduce_scatter_f32 = single_copy, .allgather_f32 = single_copy,
                 .broadcast = single_broadcast, .barrier = single_barrier,
                 .abort = single_abort, .close = single_close};
  return c;
}

// mpirun (OpenMPI) tells each process its place in the job through these.
static bool started_by_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

ng_comm *ng_comm_open(void) {
  if (!started_by_mpirun()) return ng_comm_single();
  return ng_comm_mpi();
}

void ng_comm_close(ng_comm *c) {
  if (c) c->close(c);
}

int ng_comm_bind(ng_comm *c, ng_backend *be) {
  if (be->host_memory) return 0;
  switch (c->kind) {
    case NG_COMM_SINGLE:
    case NG_COMM_NCCL: return 0;
    case NG_COMM_MPI:
      if (!be->bind_comm)
        return ng_fail("backend \"%s\": its buffers are device memory and this build has no "
                       "communicator for them (ranks of mpirun need one)", be->name);
      return be->bind_comm(be, c);
  }
  return ng_fail("communicator \"%s\": unknown kind", c->name);
}
