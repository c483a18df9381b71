// normgrow: the communicator over NCCL (comm.h "nccl"), the cuda backend's
// bind_comm. An "mpi" communicator is bound in place: its MPI ops move to a
// copy (`host`) that keeps carrying host buffers; device buffers go through
// NCCL on the legacy default stream, where the backend queues every op.
// NCCL ships with the CUDA toolkit normgrow is built with (the Makefile links
// -lnccl when the toolkit has nccl.h); built without it, binding is refused.
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "normgrow/backend_cuda.h"
#include "normgrow/comm.h"
#include "normgrow/common.h"

#if __has_include(<nccl.h>)
#include <mpi.h>
#include <nccl.h>

typedef struct {
  ng_comm *host;     // the MPI communicator as it was before binding
  ncclComm_t nccl;
} nccl_state;

static nccl_state *state(ng_comm *c) { return (nccl_state *)c->impl; }

static void nccl_abort(ng_comm *c, int code) {
  ncclCommAbort(state(c)->nccl);
  state(c)->host->abort(state(c)->host, code);
}

// A failed NCCL call (a peer gone, a device error): one line, then every rank
// ends, as MPI's errors do.
static void check(ng_comm *c, ncclResult_t r, const char *what) {
  if (r == ncclSuccess) return;
  fprintf(stderr, "normgrow (rank %d of %d): NCCL %s: %s\n", c->rank, c->size, what,
          ncclGetErrorString(r));
  nccl_abort(c, 1);
}

// Whether p is device memory (anything else is the host's: MPI carries it).
static bool on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the backend's next launch check
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

// The memory of a call's two buffers: both device, or both host.
static bool both_on_device(const void *a, const void *b) {
  bool d = on_device(a);
  NG_ASSERT(d == on_device(b));
  return d;
}

static void nccl_allreduce_f32(ng_comm *c, float *buf, int64_t n) {
  if (on_device(buf))
    check(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, state(c)->nccl, 0), "all-reduce");
  else
    state(c)->host->allreduce_f32(state(c)->host, buf, n);
}

static void nccl_allreduce_f64(ng_comm *c, double *buf, int64_t n) {
  if (on_device(buf))
    check(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat64, ncclSum, state(c)->nccl, 0), "all-reduce");
  else
    state(c)->host->allreduce_f64(state(c)->host, buf, n);
}

// recv[n] <- the sum over ranks of send[rank n, rank n + n).
static void nccl_reduce_scatter_f32(ng_comm *c, const float *send, float *recv, int64_t n) {
  if (both_on_device(send, recv))
    check(c, ncclReduceScatter(send, recv, (size_t)n, ncclFloat32, ncclSum, state(c)->nccl, 0),
          "reduce-scatter");
  else
    state(c)->host->reduce_scatter_f32(state(c)->host, send, recv, n);
}

// recv[size x n] <- every rank's send[n], in rank order.
static void nccl_allgather_f32(ng_comm *c, const float *send, float *recv, int64_t n) {
  if (both_on_device(send, recv))
    check(c, ncclAllGather(send, recv, (size_t)n, ncclFloat32, state(c)->nccl, 0), "all-gather");
  else
    state(c)->host->allgather_f32(state(c)->host, send, recv, n);
}

static void nccl_broadcast(ng_comm *c, void *buf, size_t bytes, int root) {
  if (on_device(buf))
    check(c, ncclBroadcast(buf, buf, bytes, ncclUint8, root, state(c)->nccl, 0), "broadcast");
  else
    state(c)->host->broadcast(state(c)->host, buf, bytes, root);
}

// Every rank's queued device work finished, then MPI's barrier.
static void nccl_barrier(ng_comm *c) {
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    fprintf(stderr, "normgrow (rank %d of %d): barrier: %s\n", c->rank, c->size, cudaGetErrorString(e));
    nccl_abort(c, 1);
  }
  state(c)->host->barrier(state(c)->host);
}

static void nccl_close(ng_comm *c) {
  nccl_state *s = state(c);
  ncclCommDestroy(s->nccl);
  s->host->close(s->host);
  free(s);
  free(c);
}

// NCCL on the current device for the ranks of c, MPI's; c made "nccl".
static int start(ng_comm *c) {
  // Rank 0's id, and the result of making it, to every rank over MPI.
  struct {
    ncclResult_t made;
    ncclUniqueId id;
  } msg = {ncclSuccess, {{0}}};
  if (c->rank == 0) msg.made = ncclGetUniqueId(&msg.id);
  c->broadcast(c, &msg, sizeof msg, 0);
  if (msg.made != ncclSuccess)
    return ng_fail("NCCL: no unique id on rank 0 (%s)", ncclGetErrorString(msg.made));
  ncclComm_t nc;
  ncclResult_t r = ncclCommInitRank(&nc, c->size, msg.id, c->rank);
  double failed = r != ncclSuccess;  // every rank learns whether any failed
  c->allreduce_f64(c, &failed, 1);
  if (failed != 0.0) {
    if (r == ncclSuccess) ncclCommDestroy(nc);
    return ng_fail("NCCL: could not start on %.0f of %d ranks (this rank: %s)", failed, c->size,
                   ncclGetErrorString(r));
  }
  nccl_state *s = ng_xcalloc(1, sizeof *s);
  s->host = ng_xmalloc(sizeof *s->host);
  *s->host = *c;
  s->nccl = nc;
  *c = (ng_comm){.name = "nccl", .kind = NG_COMM_NCCL, .rank = c->rank, .size = c->size,
                 .impl = s, .allreduce_f32 = nccl_allreduce_f32,
                 .allreduce_f64 = nccl_allreduce_f64, .reduce_scatter_f32 = nccl_reduce_scatter_f32,
                 .allgather_f32 = nccl_allgather_f32, .broadcast = nccl_broadcast,
                 .barrier = nccl_barrier, .abort = nccl_abort, .close = nccl_close};
  return 0;
}
#else
static int start(ng_comm *c) {
  (void)c;
  return ng_fail("NCCL: this build has none (the CUDA toolkit it was built with has no nccl.h)");
}
#endif

int ng_cuda_bind_comm(ng_backend *be, ng_comm *c) {
  (void)be;  // its device is the current one: NCCL takes that
  const char *why;
  if (c->kind != NG_COMM_MPI)
    return ng_fail("NCCL: communicator \"%s\" cannot carry NCCL's unique id (it needs MPI's)", c->name);
  if (!ng_cuda_available(&why)) return ng_fail("NCCL: %s", why);
  return start(c);
}
