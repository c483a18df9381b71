// normgrow: the backend registry, the backends this build has.
#include <stdio.h>
#include <string.h>

#include "normgrow/backend.h"
#include "normgrow/common.h"
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
    {"onednn", ng_backend_onednn_open},
#ifdef NG_WITH_CUDA  // set by the Makefile when it builds accel/cuda
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

int ng_backend_check_divergence(const ng_backend *be, ng_divergence d) {
  if (be->divergences & 1u << d) return 0;
  return ng_fail("backend \"%s\" does not compute the %s divergence (the cpu and onednn backends do)",
                 be->name, ng_divergence_name(d));
}

const char *ng_backend_names(void) {
  static char names[128];
  if (!names[0])
    for (size_t i = 0; i < N_BACKENDS; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
               backends[i].name);
  return names;
}

const char *ng_precision_name(ng_precision p) {
  switch (p) {
    case NG_PREC_FP32: return "fp32";
    case NG_PREC_BF16: return "bf16";
  }
  return "?";
}

int ng_precision_parse(const char *s, ng_precision *p) {
  if (strcmp(s, "fp32") == 0) *p = NG_PREC_FP32;
  else if (strcmp(s, "bf16") == 0) *p = NG_PREC_BF16;
  else return ng_fail("precision \"%s\": expected fp32 or bf16", s);
  return 0;
}
