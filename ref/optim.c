// normgrow: AdamW over the model's parameters through the backend op table.
#include "normgrow/optim.h"

#include <math.h>
#include <stdlib.h>

#include "normgrow/common.h"

ng_adamw *ng_adamw_create(const ng_model *model) {
  ng_adamw *o = ng_xcalloc(1, sizeof *o);
  ng_backend *be = model->be;
  o->n = model->n_params;
  o->m = ng_xcalloc((size_t)o->n, sizeof(float *));
  o->v = ng_xcalloc((size_t)o->n, sizeof(float *));
  o->steps = ng_xcalloc((size_t)o->n, sizeof(int64_t));
  for (int i = 0; i < o->n; i++) {
    o->m[i] = be->alloc(be, model->params[i].numel * sizeof(float));
    o->v[i] = be->alloc(be, model->params[i].numel * sizeof(float));
  }
  return o;
}

void ng_adamw_free(const ng_model *model, ng_adamw *o) {
  if (!o) return;
  for (int i = 0; i < o->n; i++) {
    model->be->free(model->be, o->m[i]);
    model->be->free(model->be, o->v[i]);
  }
  free(o->m);
  free(o->v);
  free(o->steps);
  free(o);
}

double ng_grad_norm(const ng_model *model) {
  double ss = 0.0;
  for (int i = 0; i < model->n_params; i++) {
    const ng_param *p = &model->params[i];
    if (p->grad && !p->frozen) ss += model->be->sumsq(model->be, p->grad, (int64_t)p->numel);
  }
  return sqrt(ss);
}

double ng_adamw_step(ng_model *model, ng_adamw *o, const ng_optim_config *oc, double lr) {
  NG_ASSERT(o->n == model->n_params);
  double norm = ng_grad_norm(model), coef = 1.0;
  if (oc->grad_clip > 0.0) {
    double c = oc->grad_clip / (norm + 1e-6);
    if (c < 1.0) coef = c;
  }
  for (int i = 0; i < model->n_params; i++) {
    ng_param *p = &model->params[i];
    if (!p->grad || p->frozen) continue;
    ng_adamw_params ap = {lr, oc->beta1, oc->beta2, oc->eps, oc->weight_decay, ++o->steps[i], coef};
    model->be->adamw(model->be, p->data, p->grad, o->m[i], o->v[i], (int64_t)p->numel, ap,
                     p->ndim >= 2);
  }
  return norm;
}
