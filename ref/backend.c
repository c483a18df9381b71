// normgrow: the op table's own rules (backend.h) and the names of its enums
// (enums.h), the same for every backend.
#include <string.h>

#include "normgrow/backend.h"
#include "normgrow/common.h"
#include "normgrow/enums.h"

void ng_linear_forward_matmuls(ng_backend *be, ng_linear l, const float *x, int64_t N,
                               int64_t in, float *const y[]) {
  for (int i = 0; i < l.n; i++) be->matmul(be, false, true, N, l.out[i], in, x, l.W[i], 0.0f, y[i]);
}

void ng_linear_backward_matmuls(ng_backend *be, ng_linear l, const float *x,
                                const float *const dy[], int64_t N, int64_t in, float beta_dx,
                                float *dx, float *const dW[]) {
  for (int i = 0; i < l.n; i++) {
    if (dW[i]) be->matmul(be, true, false, l.out[i], in, N, dy[i], x, 1.0f, dW[i]);
    be->matmul(be, false, false, N, in, l.out[i], dy[i], l.W[i], i == 0 ? beta_dx : 1.0f, dx);
  }
}

int ng_backend_check_divergence(const ng_backend *be, ng_divergence d) {
  if (be->divergences & 1u << d) return 0;
  return ng_fail("backend \"%s\" does not compute the %s divergence (the cpu and onednn backends do)",
                 be->name, ng_divergence_name(d));
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
