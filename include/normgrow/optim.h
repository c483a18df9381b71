// normgrow: AdamW with global-norm gradient clipping, PyTorch semantics.
//
//   norm = sqrt(sum over all trainable tensors of |g|^2)
//   g <- g * grad_clip / (norm + 1e-6)    only when grad_clip > 0 and that factor < 1
//   p <- p * (1 - lr * weight_decay)      tensors of 2 or more dimensions only
//   m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
#ifndef NORMGROW_OPTIM_H
#define NORMGROW_OPTIM_H

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

#endif
