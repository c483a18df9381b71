// normgrow: AdamW with global-norm gradient clipping, PyTorch semantics.
//
//   norm = sqrt(sum over all trainable tensors of |g|^2)
//   g <- g * grad_clip / (norm + 1e-6)    only when grad_clip > 0 and that factor < 1
//   p <- p * (1 - lr * weight_decay)      tensors of 2 or more dimensions only
//   m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
#ifndef NORMGROW_OPTIM_H
#define NORMGROW_OPTIM_H

#include "normgrow/comm.h"
#include "normgrow/config.h"
#include "normgrow/model.h"

typedef struct {
  int n;               // one state per model parameter, in ng_model order
  int64_t *steps;      // steps taken by each parameter (PyTorch keeps one per tensor)
  float **m, **v;      // backend buffers [numel]
} ng_adamw;

ng_adamw *ng_adamw_create(const ng_model *model);
void ng_adamw_free(const ng_model *model, ng_adamw *opt);
// Global L2 norm of the gradients of the trainable parameters (before clipping).
double ng_grad_norm(const ng_model *model);
// One step at learning rate lr (schedules pass their own); returns the
// gradient norm before clipping. Frozen parameters and those without
// gradients are skipped (and left out of the norm).
double ng_adamw_step(ng_model *model, ng_adamw *opt, const ng_optim_config *oc, double lr);

// Data-parallel AdamW, ZeRO stage 1. Each parameter of n values is cut into
// `size` slices of s = ceil(n / size) values; rank r owns values
// [r s, min((r + 1) s, n)) of every parameter and holds the AdamW moments of
// those only (`shard` values in all). A step, for the trainable parameters
// (frozen ones and those without gradients take no part, on any rank):
//   g      <- reduce-scatter of each gradient (padded to size x s): the sum
//             over ranks of this rank's slices
//   norm   <- sqrt(allreduce(sumsq(g)))   the global norm, clipped as above
//   AdamW on the rank's slices of parameters and moments (every rank counts
//   the steps of every parameter in the ng_adamw)
//   parameters <- all-gather of each rank's slices: the same bits on every rank
// The backend's buffers are the communicator's (host memory with MPI, device
// memory with NCCL: comm.h ng_comm_bind).
typedef struct {
  ng_comm *comm;
  int n;                    // parameters of the layout
  int64_t total;            // their values
  int64_t *slice, *at;      // [n]: s of parameter i; where its slice starts in g, m, v
  int64_t shard, staging;   // sum of the slices; the largest slice
  float *flat, *part;       // backend buffers [size x staging], [staging]
  float *g, *m, *v;         // backend buffers [shard]: reduced gradients, AdamW moments
} ng_zero;

ng_zero *ng_zero_create(ng_comm *comm);
void ng_zero_free(ng_backend *be, ng_zero *z);
// The rank keeps its slices of opt's whole moments, whose buffers are freed
// (NULL): opt then holds only the steps (after creating, loading or growing it).
void ng_zero_shard_moments(const ng_model *model, ng_adamw *opt, ng_zero *z);
// opt's moments whole again on every rank, gathered from the ranks' slices (for
// a growth); collective.
void ng_zero_whole_moments(const ng_model *model, ng_adamw *opt, ng_zero *z);
// The whole moments in host arrays m[i], v[i] [numel] made on rank `root` (for
// a checkpoint: NULL elsewhere; free with ng_zero_free_host); collective.
void ng_zero_host_moments(const ng_model *model, ng_zero *z, int root, float ***m, float ***v);
void ng_zero_free_host(int n, float **m, float **v);
// One step on sharded moments; returns the global gradient norm before clipping.
double ng_zero_step(ng_model *model, ng_adamw *opt, ng_zero *z, const ng_optim_config *oc,
                    double lr);
// Whether every rank holds the same bits of every parameter as rank 0
// (collective; the host copy is one parameter at a time).
bool ng_zero_weights_agree(const ng_model *model, ng_comm *comm);

#endif
