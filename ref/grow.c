// normgrow: depth growth of a student and the matching optimizer state.
#include "normgrow/grow.h"

#include <math.h>
#include <stdlib.h>

#include "normgrow/common.h"

// o_proj and down_proj of block j set to zero: the block's sublayers output 0.
static void zero_outputs(ng_model *m, int64_t j) {
  const ng_model_config *c = &m->cfg;
  size_t o = (size_t)c->hidden_size * (size_t)(c->num_attention_heads * c->head_dim);
  size_t down = (size_t)c->hidden_size * (size_t)c->intermediate_size;
  m->be->zero(m->be, m->w.layers[j].o_proj, o * sizeof(float));
  m->be->zero(m->be, m->w.layers[j].down_proj, down * sizeof(float));
}

// o_proj and down_proj of block j times s.
static void scale_outputs(ng_model *m, int64_t j, double s) {
  const ng_model_config *c = &m->cfg;
  int64_t o = c->hidden_size * c->num_attention_heads * c->head_dim;
  int64_t down = c->hidden_size * c->intermediate_size;
  m->be->scale(m->be, m->w.layers[j].o_proj, (float)s, o, m->w.layers[j].o_proj);
  m->be->scale(m->be, m->w.layers[j].down_proj, (float)s, down, m->w.layers[j].down_proj);
}

// Block j's layer scales set to model.layer_scale_init, whatever its init
// copied into them (copy_below copies the trained scales of the block below).
static void reset_layer_scales(ng_model *m, int64_t j) {
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    if (p->layer != j || !ng_param_is_layer_scale(p)) continue;
    float *host = ng_xmalloc(p->numel * sizeof(float));
    for (size_t k = 0; k < p->numel; k++) host[k] = (float)m->cfg.layer_scale_init;
    m->be->upload(m->be, p->data, host, p->numel * sizeof(float));
    free(host);
  }
}

// New block j of the grown model m; nth: how many new blocks precede it.
static int init_new_block(ng_model *m, int64_t j, int64_t nth, const ng_grow_rule *r) {
  switch (r->init) {
    case NG_INIT_COPY_BELOW:
      return ng_model_copy_block(m, j, m, j - 1);
    case NG_INIT_TEACHER:
      if (r->teacher_layers[nth] >= r->teacher->cfg.num_hidden_layers)
        return ng_fail("growth.teacher_layers: teacher layer %lld does not exist (the teacher has %lld)",
                       (long long)r->teacher_layers[nth], (long long)r->teacher->cfg.num_hidden_layers);
      ng_model_init_block(m, j, r->rng, r->std);  // for a norm the teacher's placement lacks
      return ng_model_copy_block(m, j, r->teacher, r->teacher_layers[nth]);
    case NG_INIT_ZERO_OUT:
      ng_model_init_block(m, j, r->rng, r->std);
      zero_outputs(m, j);
      return 0;
    case NG_INIT_GATE:
      ng_model_init_block(m, j, r->rng, r->std);
      m->growth_gate[j] = 0.0f;
      return 0;
    case NG_INIT_RANDOM:
      ng_model_init_block(m, j, r->rng, r->std);
      return 0;
  }
  return ng_fail("unknown growth init");
}

void ng_grow_layout(ng_grow_position pos, int64_t d, int64_t k, int64_t *from_old) {
  int64_t n = 0;
  for (int64_t j = 0; j < d; j++) {
    from_old[n++] = j;
    int64_t add = pos == NG_GROW_TOP ? (j == d - 1 ? k : 0)
                  : pos == NG_GROW_MIDDLE ? (j == (d - 1) / 2 ? k : 0)
                                          : (j + 1) * k / d - j * k / d;
    for (int64_t i = 0; i < add; i++) from_old[n++] = -1;
  }
}

int ng_grow_config(const ng_model_config *old, int64_t new_depth, ng_grow_position pos,
                   const ng_norm_placement *new_placement, ng_model_config *out, int64_t *from_old) {
  int64_t d = old->num_hidden_layers;
  NG_ASSERT(new_depth >= d);
  ng_grow_layout(pos, d, new_depth - d, from_old);
  *out = *old;
  out->num_hidden_layers = new_depth;
  if (!new_placement && old->norm_placement == NG_NORM_HYBRID)
    return ng_fail("growth.new_block_placement: a hybrid model has no placement of its own for its new "
                   "blocks: name it");
  if (!new_placement) return ng_model_config_validate(out, "growth");
  if (new_depth > NG_MAX_LAYERS)
    return ng_fail("growth.new_block_placement: %lld blocks, but a hybrid model has at most %d",
                   (long long)new_depth, NG_MAX_LAYERS);
  for (int64_t j = 0; j < new_depth; j++)
    out->layer_placements[j] = from_old[j] >= 0 ? ng_block_placement(old, from_old[j]) : *new_placement;
  out->norm_placement = NG_NORM_HYBRID;
  out->mixln_post_layers = 0;
  return ng_model_config_validate(out, "growth");
}

const char *ng_grow_hybrid_change(const ng_model_config *c, const ng_grow_rule *r) {
  NG_ASSERT(r->new_placement != NULL);
  bool identity_pre = r->init == NG_INIT_GATE || r->init == NG_INIT_ZERO_OUT ||
                      (c->layer_scale && c->layer_scale_init == 0.0);
  switch (*r->new_placement) {
    case NG_NORM_PRE:
      return identity_pre ? NULL
                          : "new pre blocks do not start as the identity (growth.init is none of "
                            "\"gate\" and \"zero_out\", and model.layer_scale_init is not 0)";
    case NG_NORM_POST:
      return r->init == NG_INIT_GATE
                 ? NULL
                 : "new post blocks do not start as the identity (only growth.init \"gate\" makes "
                   "them so: with nothing added by its sublayers a post block still computes "
                   "N_pf(N_pa(x)))";
    case NG_NORM_LNS:
    case NG_NORM_SANDWICH:
    case NG_NORM_DEEPNORM:
    case NG_NORM_MIXLN:
    case NG_NORM_HYBRID: break;  // ng_grow_config refuses these
  }
  NG_ASSERT(!"a new block placement other than pre or post");
  return NULL;
}

int ng_model_grow(const ng_model *old, int64_t new_depth, const ng_grow_rule *rule,
                  ng_model **out, int64_t *from_old) {
  ng_model_config cfg;
  if (ng_grow_config(&old->cfg, new_depth, rule->position, rule->new_placement, &cfg, from_old))
    return -1;
  ng_model *m = ng_model_create(old->be, &cfg, true);
  int rc = ng_model_copy_io(m, old);
  for (int64_t j = 0, nth = 0; j < new_depth && rc == 0; j++) {
    if (from_old[j] >= 0) {
      rc = ng_model_copy_block(m, j, old, from_old[j]);
      m->growth_gate[j] = old->growth_gate[from_old[j]];
    } else {
      rc = init_new_block(m, j, nth++, rule);
      reset_layer_scales(m, j);
      if (rc == 0 && rule->depth_scaled) scale_outputs(m, j, 1.0 / sqrt(2.0 * (double)(j + 1)));
    }
  }
  if (rc) {
    ng_model_free(m);
    return -1;
  }
  *out = m;
  return 0;
}

ng_adamw *ng_adamw_regrow(const ng_model *old, const ng_adamw *oo, const ng_model *grown,
                          const int64_t *from_old, bool reset) {
  ng_adamw *o = ng_adamw_create(grown);
  ng_backend *be = grown->be;
  for (int i = 0; i < grown->n_params && !reset; i++) {
    const ng_param *p = &grown->params[i];
    int64_t src_layer = p->layer < 0 ? -1 : from_old[p->layer];
    if (p->layer >= 0 && src_layer < 0) continue;  // a new block starts at zero
    const ng_param *q = ng_model_find_in_layer(old, p, src_layer);
    if (!q) continue;
    int k = (int)(q - old->params);
    be->copy(be, o->m[i], oo->m[k], p->numel * sizeof(float));
    be->copy(be, o->v[i], oo->v[k], p->numel * sizeof(float));
    o->steps[i] = oo->steps[k];
  }
  return o;
}

// ---------------------------------------------------------------- the stream's scale

double ng_stream_rms(ng_model *m, const int32_t *tokens, int64_t B, int64_t T) {
  ng_acts_options ao = {.chunk = 1};  // no logits are made here
  ng_acts *a = ng_acts_create_with(m, B, T, &ao);
  ng_model_forward(m, a, tokens, NULL);
  int64_t n = a->N * m->cfg.hidden_size;
  double ms = m->be->sumsq(m->be, ng_acts_hidden(a, m->cfg.num_hidden_layers), n) / (double)n;
  ng_acts_free(m, a);
  return sqrt(ms);
}

int ng_stream_rescalable(const ng_model_config *c, const char *where) {
  switch (c->norm_placement) {
    case NG_NORM_PRE:
    case NG_NORM_LNS:
      break;
    case NG_NORM_POST:
    case NG_NORM_DEEPNORM:
    case NG_NORM_MIXLN:
    case NG_NORM_HYBRID:
      return ng_fail("%s: the stream of a %s model cannot be rescaled (its blocks' outputs are "
                     "normed)", where, ng_norm_placement_title(c->norm_placement));
    case NG_NORM_SANDWICH:
      return ng_fail("%s: the stream of a %s model cannot be rescaled by its output projections "
                     "(each sublayer's output is normed before it is added)", where,
                     ng_norm_placement_title(c->norm_placement));
  }
  if (!c->final_norm)
    return ng_fail("%s: needs model.final_norm (without it the head reads the stream and "
                   "the logits would scale)", where);
  return 0;
}

// By how much parameter p is scaled when the stream is scaled by c (1: not).
static double stream_factor(const ng_model *m, const ng_param *p, double c) {
  if (p->layer >= 0) {
    const ng_layer *w = &m->w.layers[p->layer];
    return p->data_view == &w->o_proj || p->data_view == &w->down_proj ? c : 1.0;
  }
  if (p->data_view == &m->w.embed_tokens) return c;
  if (p->data_view == &m->w.norm && m->cfg.tie_word_embeddings) return 1.0 / c;
  return 1.0;
}

void ng_rescale_stream(ng_model *m, ng_adamw *opt, double c) {
  NG_ASSERT(c > 0.0 && isfinite(c) && ng_stream_rescalable(&m->cfg, "rescale") == 0);
  ng_backend *be = m->be;
  for (int i = 0; i < m->n_params; i++) {
    ng_param *p = &m->params[i];
    double s = stream_factor(m, p, c);
    if (s == 1.0) continue;
    int64_t n = (int64_t)p->numel;
    be->scale(be, p->data, (float)s, n, p->data);
    if (!opt) continue;
    be->scale(be, opt->m[i], (float)(1.0 / s), n, opt->m[i]);
    be->scale(be, opt->v[i], (float)(1.0 / (s * s)), n, opt->v[i]);
  }
}
