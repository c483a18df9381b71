// normgrow: AdamW over the model's parameters through the backend op table.
#include "normgrow/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

// The factor the gradients are scaled by for a gradient norm `norm`.
static double clip_coef(const ng_optim_config *oc, double norm) {
  double c = oc->grad_clip > 0.0 ? oc->grad_clip / (norm + 1e-6) : 1.0;
  return c < 1.0 ? c : 1.0;
}

double ng_adamw_step(ng_model *model, ng_adamw *o, const ng_optim_config *oc, double lr) {
  NG_ASSERT(o->n == model->n_params);
  double norm = ng_grad_norm(model), coef = clip_coef(oc, norm);
  for (int i = 0; i < model->n_params; i++) {
    ng_param *p = &model->params[i];
    if (!p->grad || p->frozen) continue;
    ng_adamw_params ap = {lr, oc->beta1, oc->beta2, oc->eps, oc->weight_decay, ++o->steps[i], coef};
    model->be->adamw(model->be, p->data, p->grad, o->m[i], o->v[i], (int64_t)p->numel, ap,
                     p->ndim >= 2);
  }
  return norm;
}

// ---------------------------------------------------------------- ZeRO stage 1

ng_zero *ng_zero_create(ng_comm *comm) {
  ng_zero *z = ng_xcalloc(1, sizeof *z);
  z->comm = comm;
  return z;
}

static void free_buffers(ng_backend *be, ng_zero *z) {
  float **bufs[] = {&z->flat, &z->part, &z->g, &z->m, &z->v};
  for (int i = 0; i < 5; i++) {
    be->free(be, *bufs[i]);
    *bufs[i] = NULL;
  }
  free(z->slice);
  free(z->at);
  z->slice = z->at = NULL;
}

void ng_zero_free(ng_backend *be, ng_zero *z) {
  if (!z) return;
  free_buffers(be, z);
  free(z);
}

// The slices of the model's parameters (buffers made anew, zero, when it grew:
// ng_zero_shard_moments then fills the moments).
static void zero_layout(ng_zero *z, const ng_model *model) {
  int64_t total = 0, size = z->comm->size;
  for (int i = 0; i < model->n_params; i++) total += (int64_t)model->params[i].numel;
  if (z->slice && z->n == model->n_params && z->total == total) return;
  ng_backend *be = model->be;
  free_buffers(be, z);
  z->n = model->n_params;
  z->total = total;
  z->slice = ng_xmalloc((size_t)z->n * sizeof(int64_t));
  z->at = ng_xmalloc((size_t)z->n * sizeof(int64_t));
  z->shard = z->staging = 0;
  for (int i = 0; i < z->n; i++) {
    z->slice[i] = ((int64_t)model->params[i].numel + size - 1) / size;
    z->at[i] = z->shard;
    z->shard += z->slice[i];
    if (z->slice[i] > z->staging) z->staging = z->slice[i];
  }
  size_t slot = (size_t)z->staging * sizeof(float), shard = (size_t)z->shard * sizeof(float);
  z->flat = be->alloc(be, slot * (size_t)size);
  z->part = be->alloc(be, slot);
  z->g = be->alloc(be, shard);
  z->m = be->alloc(be, shard);
  z->v = be->alloc(be, shard);
}

// Where this rank's slice of parameter i starts in it, and how many values it has.
static int64_t slice_of(const ng_zero *z, const ng_model *model, int i, int64_t *count) {
  int64_t n = (int64_t)model->params[i].numel, s = z->slice[i], from = z->comm->rank * s;
  *count = from >= n ? 0 : (n - from < s ? n - from : s);
  return from;
}

// Parameter i's n values <- every rank's slice `mine` of it, gathered: into the
// backend buffer buf, or the host array host (either may be NULL).
static void gather_param(ng_zero *z, const ng_model *model, int i, const float *mine, float *buf,
                         float *host) {
  ng_backend *be = model->be;
  int64_t count, s = z->slice[i];
  size_t bytes = model->params[i].numel * sizeof(float);
  slice_of(z, model, i, &count);
  if (count > 0 && mine != z->part) be->copy(be, z->part, mine, (size_t)count * sizeof(float));
  z->comm->allgather_f32(z->comm, z->part, z->flat, s);
  if (buf) be->copy(be, buf, z->flat, bytes);
  if (host) be->download(be, host, z->flat, bytes);
}

// This rank's slices of the per-parameter buffers bufs, packed into out[shard].
static void pack_slices(const ng_zero *z, const ng_model *model, float *const *bufs, float *out) {
  int64_t count;
  for (int i = 0; i < z->n; i++) {
    int64_t from = slice_of(z, model, i, &count);
    if (count > 0) model->be->copy(model->be, out + z->at[i], bufs[i] + from, (size_t)count * sizeof(float));
  }
}

void ng_zero_shard_moments(const ng_model *model, ng_adamw *o, ng_zero *z) {
  NG_ASSERT(o->n == model->n_params);
  zero_layout(z, model);
  pack_slices(z, model, o->m, z->m);
  pack_slices(z, model, o->v, z->v);
  for (int i = 0; i < o->n; i++) {
    model->be->free(model->be, o->m[i]);
    model->be->free(model->be, o->v[i]);
    o->m[i] = o->v[i] = NULL;
  }
}

void ng_zero_whole_moments(const ng_model *model, ng_adamw *o, ng_zero *z) {
  NG_ASSERT(o->n == model->n_params && z->n == o->n);
  ng_backend *be = model->be;
  for (int i = 0; i < o->n; i++) {
    size_t bytes = model->params[i].numel * sizeof(float);
    if (!o->m[i]) o->m[i] = be->alloc(be, bytes);
    if (!o->v[i]) o->v[i] = be->alloc(be, bytes);
    gather_param(z, model, i, z->m + z->at[i], o->m[i], NULL);
    gather_param(z, model, i, z->v + z->at[i], o->v[i], NULL);
  }
}

void ng_zero_host_moments(const ng_model *model, ng_zero *z, int root, float ***m, float ***v) {
  NG_ASSERT(z->n == model->n_params);
  bool mine = root == z->comm->rank;
  *m = mine ? ng_xcalloc((size_t)z->n, sizeof(float *)) : NULL;
  *v = mine ? ng_xcalloc((size_t)z->n, sizeof(float *)) : NULL;
  for (int i = 0; i < z->n; i++) {
    size_t bytes = model->params[i].numel * sizeof(float);
    float *hm = mine ? ((*m)[i] = ng_xmalloc(bytes)) : NULL;
    float *hv = mine ? ((*v)[i] = ng_xmalloc(bytes)) : NULL;
    gather_param(z, model, i, z->m + z->at[i], NULL, hm);
    gather_param(z, model, i, z->v + z->at[i], NULL, hv);
  }
}

void ng_zero_free_host(int n, float **m, float **v) {
  for (int i = 0; m && i < n; i++) free(m[i]);
  for (int i = 0; v && i < n; i++) free(v[i]);
  free(m);
  free(v);
}

// Whether parameter p takes part in a step.
static bool steps(const ng_param *p) { return p->grad && !p->frozen; }

double ng_zero_step(ng_model *model, ng_adamw *o, ng_zero *z, const ng_optim_config *oc,
                    double lr) {
  NG_ASSERT(o->n == model->n_params && z->n == o->n);
  ng_backend *be = model->be;
  int64_t size = z->comm->size, count;
  be->zero(be, z->g, (size_t)z->shard * sizeof(float));
  for (int i = 0; i < z->n; i++) {  // g <- this rank's slices of the summed gradients
    const ng_param *p = &model->params[i];
    if (!steps(p)) continue;
    be->zero(be, z->flat, (size_t)(size * z->slice[i]) * sizeof(float));
    be->copy(be, z->flat, p->grad, p->numel * sizeof(float));
    z->comm->reduce_scatter_f32(z->comm, z->flat, z->g + z->at[i], z->slice[i]);
  }
  double ss = be->sumsq(be, z->g, z->shard);  // padding and frozen slices are zeros
  z->comm->allreduce_f64(z->comm, &ss, 1);
  double norm = sqrt(ss), coef = clip_coef(oc, norm);
  for (int i = 0; i < z->n; i++) {
    ng_param *p = &model->params[i];
    if (!steps(p)) continue;
    ng_adamw_params ap = {lr, oc->beta1, oc->beta2, oc->eps, oc->weight_decay, ++o->steps[i], coef};
    int64_t from = slice_of(z, model, i, &count);
    if (count > 0)
      be->adamw(be, p->data + from, z->g + z->at[i], z->m + z->at[i], z->v + z->at[i], count, ap,
                p->ndim >= 2);
    gather_param(z, model, i, p->data + from, p->data, NULL);
  }
  return norm;
}

bool ng_zero_weights_agree(const ng_model *model, ng_comm *comm) {
  double differ = 0.0;
  for (int i = 0; i < model->n_params; i++) {
    const ng_param *p = &model->params[i];
    size_t bytes = p->numel * sizeof(float);
    char *mine = ng_xmalloc(bytes), *root = ng_xmalloc(bytes);
    model->be->download(model->be, mine, p->data, bytes);
    memcpy(root, mine, bytes);
    comm->broadcast(comm, root, bytes, 0);
    differ += memcmp(mine, root, bytes) != 0;
    free(mine);
    free(root);
  }
  comm->allreduce_f64(comm, &differ, 1);
  return differ == 0.0;
}
