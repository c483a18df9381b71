// normgrow: the oneDNN backend (accel/backend_onednn.c), a host backend: the
// CPU's op table (backend_cpu.h) with oneDNN matmul primitives (fp32 with
// fpmath mode strict, or bf16 inputs converted on the fly with fp32
// accumulation), and in bf16 attention's products as batched bf16 matmuls.
// Built with make ONEDNN=1 (the default); the registry lists it as "onednn".
#ifndef NORMGROW_BACKEND_ONEDNN_H
#define NORMGROW_BACKEND_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

#include "normgrow/backend.h"

// The backend in precision p (ng_backend_close frees it). bf16 needs AVX-512
// BF16 or AMX and is refused without, NULL with an ng_fail message saying so.
ng_backend *ng_backend_onednn_open(ng_precision p);

// Best GFLOP/s of oneDNN's matmul C [M, N] f32 = A [M, K] B^T with A and B
// already bf16 (the kernel alone, no conversion): the bf16 ceiling of
// `normgrow bench`, C written again and again (in cache once it fits); with
// out_to_memory the mean over calls that each write another C, none of them in
// cache (to memory, as a training step's outputs go). *impl receives oneDNN's
// implementation name; 0 (and impl "none") when this CPU has no bf16 matmul.
double ng_onednn_bf16_gflops(int64_t M, int64_t N, int64_t K, bool out_to_memory, char *impl,
                             size_t impl_n);

#endif
