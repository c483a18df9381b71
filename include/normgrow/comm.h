// normgrow: a communicator between the processes ("ranks") of a data-parallel run.
//
// Every collective is called by all ranks in the same order with the same sizes;
// the buffers are the backend's (host memory for the CPU backends). Sums are
// element-wise over the ranks, in an order fixed by the world size, so a run is
// deterministic for a given number of ranks.
//
//   allreduce_f32/_f64  buf[n] <- sum over ranks of buf[n]               (in place)
//   reduce_scatter_f32  recv[n] <- sum over ranks of send[rank n .. rank n + n)
//                       (send holds size x n values)
//   allgather_f32       recv[size x n]: rank r's send[n] at recv + r n
//   broadcast           buf[bytes] <- root's buf
//   barrier             returns once every rank has entered it
//   abort               ends every rank of the run with status `code` (a rank that
//                       fails must not leave the others waiting in a collective)
//
// Implementations:
//   "single"  one process: sums and gathers of one rank are copies
//   "mpi"     MPI (OpenMPI) on host buffers, MPI_COMM_WORLD, errors fatal: a rank
//             that dies ends the whole run (mpirun aborts the others)
#ifndef NORMGROW_COMM_H
#define NORMGROW_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct ng_comm ng_comm;
struct ng_comm {
  const char *name;  // "single" | "mpi"
  int rank, size;
  void (*allreduce_f32)(ng_comm *c, float *buf, int64_t n);
  void (*allreduce_f64)(ng_comm *c, double *buf, int64_t n);
  void (*reduce_scatter_f32)(ng_comm *c, const float *send, float *recv, int64_t n);
  void (*allgather_f32)(ng_comm *c, const float *send, float *recv, int64_t n);
  void (*broadcast)(ng_comm *c, void *buf, size_t bytes, int root);
  void (*barrier)(ng_comm *c);
  void (*abort)(ng_comm *c, int code);
  void (*close)(ng_comm *c);
};

// The communicator of this process: "mpi" when it was started by mpirun (and
// normgrow was built with MPI), else "single". MPI is initialized on the first
// call and finalized at exit.
ng_comm *ng_comm_open(void);
// The single-process communicator.
ng_comm *ng_comm_single(void);
// The MPI communicator over MPI_COMM_WORLD; NULL (with a line on stderr) when
// this build has no MPI.
ng_comm *ng_comm_mpi(void);
void ng_comm_close(ng_comm *c);  // NULL is a no-op

#endif
