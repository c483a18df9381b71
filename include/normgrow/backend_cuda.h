// normgrow: the CUDA backend (accel/cuda), the op table of backend.h on one GPU.
//
// Two precisions share every kernel and every buffer layout (fp32 row-major
// in device memory, as the op table says):
//   fp32  cuBLAS in plain fp32 (CUBLAS_COMPUTE_32F under the default math
//         mode: no TF32) and fp32 kernels: the golden-exact mode.
//   bf16  every matmul input rounded to bf16 on tensor cores with fp32
//         accumulation (cuBLAS compute type 32F_FAST_16BF; attention's
//         products, forward and backward, on WMMA bf16 tiles when the head
//         dimension is a multiple of 16, else the fp32 kernels), everything
//         else as in fp32: master weights, moments, norms, softmax statistics
//         and the loss stay fp32.
// Values returned to the host (ce, kd, n_valid, sumsq), download and
// synchronize are synchronization points; every other op is asynchronous on
// the default stream of the process's device, in order. Results are
// deterministic: no float atomics, fixed reduction orders.
//
// Built with make CUDA=1 (the default where nvcc is found); the registry
// (registry.h) lists it as "cuda".
#ifndef NORMGROW_BACKEND_CUDA_H
#define NORMGROW_BACKEND_CUDA_H

#include <stdbool.h>

#include "normgrow/backend.h"
#include "normgrow/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// The backend in precision p on the process's device: device 0, or under
// mpirun the rank's local rank on its node modulo the node's devices
// (ng_backend_close frees it); NULL with an ng_fail message saying why when no
// device can be used (no driver, no GPU, or a GPU this build has no code for).
ng_backend *ng_backend_cuda_open(ng_precision p);

// Whether a device can be used; when not, *why (if not NULL) says why in one
// line (the text stays valid for the program's life).
bool ng_cuda_available(const char **why);

// The backend's bind_comm (comm.h ng_comm_bind): makes the "mpi" communicator c
// "nccl", in place (accel/cuda/comm_nccl.c). Rank 0 makes NCCL's unique id and
// broadcasts it over MPI; every rank joins on its current device. Collective.
// -1 with one ng_fail line when c is not MPI's, no device can be used, or NCCL
// cannot start on some rank (every rank then fails alike).
int ng_cuda_bind_comm(ng_backend *be, ng_comm *c);

#ifdef __cplusplus
}
#endif

#endif
