// normgrow: the backend registry, what callers use to get a backend: the
// backends this build has, opened by name and precision, so that no command
// and not the trainer names a backend in code.
//
// The registry sits above every backend (ref/registry.c is built as its own
// library, linked above the backends' and the core's): a build lists "cpu",
// then "onednn" when it has the oneDNN backend (make ONEDNN=1, the default),
// then "cuda" when it has the CUDA backend (make CUDA=1, the default where nvcc
// is found).
#ifndef NORMGROW_REGISTRY_H
#define NORMGROW_REGISTRY_H

#include "normgrow/backend.h"

// Opens backend `name` ("cpu", "onednn", "cuda") in precision p; NULL with an error
// message naming it when the build lacks it or it cannot run p on this machine.
ng_backend *ng_backend_open(const char *name, ng_precision p);
// Synchronizes and destroys a backend from ng_backend_open (NULL: no-op).
void ng_backend_close(ng_backend *be);
// The names of the backends this build has, comma-separated ("cpu, onednn").
const char *ng_backend_names(void);

#endif
