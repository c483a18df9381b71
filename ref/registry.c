// normgrow: the backend registry (registry.h), the backends this build has.
// Built apart from the core, above every backend library: NG_WITH_ONEDNN and
// NG_WITH_CUDA (set by the Makefile when it builds those backends) list them.
#include <stdio.h>
#include <string.h>

#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/registry.h"
#ifdef NG_WITH_ONEDNN
#include "normgrow/backend_onednn.h"
#endif
#ifdef NG_WITH_CUDA
#include "normgrow/backend_cuda.h"
#endif

static ng_backend *cpu_open(ng_precision p) {
  if (p != NG_PREC_FP32) {
    ng_fail("backend \"cpu\" is the fp32 reference: precision %s needs another backend (onednn)",
            ng_precision_name(p));
    return NULL;
  }
  return ng_backend_cpu();
}

typedef struct {
  const char *name;
  ng_backend *(*open)(ng_precision p);
} registered;

static const registered backends[] = {
    {"cpu", cpu_open},
#ifdef NG_WITH_ONEDNN
    {"onednn", ng_backend_onednn_open},
#endif
#ifdef NG_WITH_CUDA
    {"cuda", ng_backend_cuda_open},
#endif
};
#define N_BACKENDS (sizeof backends / sizeof backends[0])

ng_backend *ng_backend_open(const char *name, ng_precision p) {
  for (size_t i = 0; i < N_BACKENDS; i++)
    if (strcmp(name, backends[i].name) == 0) return backends[i].open(p);
  ng_fail("backend \"%s\" is not built into this binary (available: %s)", name,
          ng_backend_names());
  return NULL;
}

void ng_backend_close(ng_backend *be) {
  if (!be) return;
  be->synchronize(be);
  be->destroy(be);
}

const char *ng_backend_names(void) {
  static char names[128];
  if (!names[0])
    for (size_t i = 0; i < N_BACKENDS; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
               backends[i].name);
  return names;
}
