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
  float **bufs[] = {&z->flat, &z->part, &z->m, &z->v};
  for (int i = 0; i < 4; i++) {
    be->free(be, *bufs[i]);
    *bufs[i] = NULL;
  }
}

void ng_zero_free(ng_backend *be, ng_zero *z) {
  if (!z) return;
  free_buffers(be, z);
  free(z);
}

// The flat layout of the model's parameters (buffers made anew, zero, when it
// grew: ng_zero_shard_moments then fills the moments).
static void zero_layout(ng_zero *z, const ng_model *model) {
  int64_t total = 0, size = z->comm->size;
  for (int i = 0; i < model->n_params; i++) total += (int64_t)model->params[i].numel;
  if (total == z->total && z->flat) return;
  ng_backend *be = model->be;
  free_buffers(be, z);
  z->total = total;
  z->shard = (total + size - 1) / size;
  size_t bytes = (size_t)z->shard * sizeof(float);
  z->flat = be->alloc(be, bytes * (size_t)size);
  z->part = be->alloc(be, bytes);
  z->m = be->alloc(be, bytes);
  z->v = be->alloc(be, bytes);
}

// This rank's values [*lo, *hi) of parameter values [off, off + n); empty when lo >= hi.
static void owned(const ng_zero *z, int64_t off, int64_t n, int64_t *lo, int64_t *hi) {
  int64_t b = z->comm->rank * z->shard, e = b + z->shard;
  *lo = off > b ? off : b;
  *hi = off + n < e ? off + n : e;
}

// out[shard] <- this rank's values of bufs (one buffer of numel values per parameter).
static void pack_owned(const ng_zero *z, const ng_model *model, float *const *bufs, float *out) {
  ng_backend *be = model->be;
  int64_t b = z->comm->rank * z->shard, off = 0, lo, hi;
  for (int i = 0; i < model->n_params; off += (int64_t)model->params[i++].numel) {
    owned(z, off, (int64_t)model->params[i].numel, &lo, &hi);
    if (lo < hi) be->copy(be, out + (lo - b), bufs[i] + (lo - off), (size_t)(hi - lo) * sizeof(float));
  }
}

// bufs whole on every rank: each rank's mine[shard] gathered, then unflattened.
static void gather_whole(ng_zero *z, const ng_model *model, const float *mine, float **bufs) {
  ng_backend *be = model->be;
  z->comm->allgather_f32(z->comm, mine, z->flat, z->shard);
  int64_t off = 0;
  for (int i = 0; i < model->n_params; off += (int64_t)model->params[i++].numel)
    be->copy(be, bufs[i], z->flat + off, model->params[i].numel * sizeof(float));
}

void ng_zero_shard_moments(const ng_model *model, ng_adamw *o, ng_zero *z) {
  NG_ASSERT(o->n == model->n_params);
  zero_layout(z, model);
  pack_owned(z, model, o->m, z->m);
  pack_owned(z, model, o->v, z->v);
  for (int i = 0; i < o->n; i++) {
    model->be->free(model->be, o->m[i]);
    model->be->free(model->be, o->v[i]);
    o->m[i] = o->v[i] = NULL;
  }
}

void ng_zero_whole_moments(const ng_model *model, ng_adamw *o, ng_zero *z) {
  NG_ASSERT(o->n == model->n_params);
  ng_backend *be = model->be;
  for (int i = 0; i < o->n; i++) {
    if (!o->m[i]) o->m[i] = be->alloc(be, model->params[i].numel * sizeof(float));
    if (!o->v[i]) o->v[i] = be->alloc(be, model->params[i].numel * sizeof(float));
  }
  gather_whole(z, model, z->m, o->m);
  gather_whole(z, model, z->v, o->v);
}

double ng_zero_step(ng_model *model, ng_adamw *o, ng_zero *z, const ng_optim_config *oc,
                    double lr) {
  NG_ASSERT(o->n == model->n_params && z->total > 0);
  ng_backend *be = model->be;
  int64_t b = z->comm->rank * z->shard, off = 0, lo, hi;
  be->zero(be, z->flat, (size_t)(z->shard * z->comm->size) * sizeof(float));
  for (int i = 0; i < model->n_params; off += (int64_t)model->params[i++].numel) {
    const ng_param *p = &model->params[i];
    if (p->grad && !p->frozen) be->copy(be, z->flat + off, p->grad, p->numel * sizeof(float));
  }
  z->comm->reduce_scatter_f32(z->comm, z->flat, z->part, z->shard);
  double ss = be->sumsq(be, z->part, z->shard);
  z->comm->allreduce_f64(z->comm, &ss, 1);
  double norm = sqrt(ss), coef = clip_coef(oc, norm);
  off = 0;
  for (int i = 0; i < model->n_params; off += (int64_t)model->params[i++].numel) {
    ng_param *p = &model->params[i];
    if (!p->grad || p->frozen) continue;
    ng_adamw_params ap = {lr, oc->beta1, oc->beta2, oc->eps, oc->weight_decay, ++o->steps[i], coef};
    owned(z, off, (int64_t)p->numel, &lo, &hi);
    if (lo < hi)
      be->adamw(be, p->data + (lo - off), z->part + (lo - b), z->m + (lo - b), z->v + (lo - b),
                hi - lo, ap, p->ndim >= 2);
  }
  float **data = ng_xmalloc((size_t)model->n_params * sizeof(float *));
  for (int i = 0; i < model->n_params; i++) data[i] = model->params[i].data;
  pack_owned(z, model, data, z->part);
  gather_whole(z, model, z->part, data);
  free(data);
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
