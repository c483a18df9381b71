// normgrow: a communicator between the processes ("ranks") of a data-parallel run.
//
// Every collective is called by all ranks in the same order with the same sizes.
// A buffer is the backend's (host memory for the CPU backends, device memory
// for cuda once ng_comm_bind has run) or the host's (the scalars of a step, a
// check's copies): "mpi" and "single" take host memory, "nccl" either (both
// buffers of one call in the same memory). Sums are element-wise over the
// ranks, in an order fixed by the world size (NCCL's: by its algorithm on the
// machine's topology), so a run is deterministic for a given number of ranks.
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
//   "nccl"    an "mpi" communicator bound to the cuda backend (accel/cuda/
//             comm_nccl.c): device buffers through NCCL on the backend's stream
//             (the default stream of the rank's device), in order with its ops;
//             host buffers through MPI as before. Rank 0's NCCL unique id is
//             broadcast over MPI. barrier waits for the device, then MPI's
//             barrier; abort ends NCCL, then MPI's abort. A rank that dies is
//             seen by mpirun, which ends the others (NCCL alone would wait).
#ifndef NORMGROW_COMM_H
#define NORMGROW_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct ng_backend ng_backend;

typedef enum { NG_COMM_SINGLE, NG_COMM_MPI, NG_COMM_NCCL } ng_comm_kind;

typedef struct ng_comm ng_comm;
struct ng_comm {
  const char *name;  // "single" | "mpi" | "nccl"
  ng_comm_kind kind;
  int rank, size;
  void *impl;        // the implementation's own state (NULL for single and mpi)
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

// Makes c carry collectives on backend be's buffers, in place (c stays the same
// object): the backend decides.
//   host-memory backend (cpu, onednn)     c unchanged
//   one process, "single"                 c unchanged (one rank has no collective
//                                         on the backend's buffers: no ZeRO step)
//   device backend (cuda) and "mpi"       be->bind_comm: "nccl" (any size, 1 too)
//   already bound ("nccl")                c unchanged
// Returns 0, or -1 with one ng_fail line (a device backend this build has no
// communicator for; NCCL that cannot start: no GPU, an init error).
int ng_comm_bind(ng_comm *c, ng_backend *be);

#endif
