// normgrow: the communicator over MPI (MPI_COMM_WORLD), on host buffers.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "normgrow/comm.h"
#include "normgrow/common.h"

// MPI counts are int: larger buffers go in pieces of at most 2^30 values.
#define MPI_PIECE ((int64_t)1 << 30)

static void mpi_allreduce(void *buf, int64_t n, MPI_Datatype type, size_t size) {
  for (int64_t i = 0; i < n; i += MPI_PIECE) {
    int64_t k = n - i < MPI_PIECE ? n - i : MPI_PIECE;
    MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)i * size, (int)k, type, MPI_SUM, MPI_COMM_WORLD);
  }
}

static void mpi_allreduce_f32(ng_comm *c, float *buf, int64_t n) {
  (void)c;
  mpi_allreduce(buf, n, MPI_FLOAT, sizeof(float));
}

static void mpi_allreduce_f64(ng_comm *c, double *buf, int64_t n) {
  (void)c;
  mpi_allreduce(buf, n, MPI_DOUBLE, sizeof(double));
}

static void mpi_reduce_scatter_f32(ng_comm *c, const float *send, float *recv, int64_t n) {
  NG_ASSERT(n <= INT32_MAX);
  MPI_Reduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, (int)n, MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
  (void)c;
}

static void mpi_allgather_f32(ng_comm *c, const float *send, float *recv, int64_t n) {
  NG_ASSERT(n <= INT32_MAX);
  MPI_Allgather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
  (void)c;
}

static void mpi_broadcast(ng_comm *c, void *buf, size_t bytes, int root) {
  (void)c;
  for (size_t i = 0; i < bytes; i += (size_t)MPI_PIECE) {
    size_t k = bytes - i < (size_t)MPI_PIECE ? bytes - i : (size_t)MPI_PIECE;
    MPI_Bcast((char *)buf + i, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
  }
}

static void mpi_barrier(ng_comm *c) {
  (void)c;
  MPI_Barrier(MPI_COMM_WORLD);
}

static void mpi_abort(ng_comm *c, int code) {
  (void)c;
  MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_close(ng_comm *c) { free(c); }

static void finalize_at_exit(void) {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

ng_comm *ng_comm_mpi(void) {
  int started = 0;
  MPI_Initialized(&started);
  if (!started) {
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      ng_fail("MPI: MPI_Init_thread failed");
      return NULL;
    }
    atexit(finalize_at_exit);
  }
  // A failed collective (a rank that died) ends every rank rather than returning.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  ng_comm *c = ng_xcalloc(1, sizeof *c);
  *c = (ng_comm){.name = "mpi", .kind = NG_COMM_MPI, .allreduce_f32 = mpi_allreduce_f32,
                 .allreduce_f64 = mpi_allreduce_f64, .reduce_scatter_f32 = mpi_reduce_scatter_f32,
                 .allgather_f32 = mpi_allgather_f32, .broadcast = mpi_broadcast,
                 .barrier = mpi_barrier, .abort = mpi_abort, .close = mpi_close};
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size);
  return c;
}
