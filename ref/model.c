// normgrow: the Qwen3 decoder (teacher and student, Pre- and Post-Norm),
// forward and backward through the backend op table.
#include "normgrow/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"

// ---------------------------------------------------------------- parameters

ng_norm_placement ng_block_placement(const ng_model_config *c, int64_t l) {
  switch (c->norm_placement) {
    case NG_NORM_PRE:
    case NG_NORM_POST:
    case NG_NORM_LNS:
    case NG_NORM_SANDWICH:
    case NG_NORM_DEEPNORM: return c->norm_placement;
    case NG_NORM_MIXLN: return l < c->mixln_post_layers ? NG_NORM_POST : NG_NORM_PRE;
    case NG_NORM_HYBRID: return c->layer_placements[l];
  }
  NG_ASSERT(!"ng_norm_placement out of range");
  return NG_NORM_PRE;
}

ng_block_layout ng_block_layout_of(const ng_model_config *c, int64_t l) {
  ng_block_layout lay = {.norm_scale = 1.0f, .alpha = 1.0f, .n_weights = c->layer_scale ? 13 : 11};
  switch (ng_block_placement(c, l)) {
    case NG_NORM_PRE: lay.input_norm = true; return lay;
    case NG_NORM_POST: lay.output_norm = true; return lay;
    case NG_NORM_LNS:
      lay.input_norm = true;
      lay.norm_scale = (float)(1.0 / sqrt((double)(l + 1)));
      return lay;
    case NG_NORM_SANDWICH:
      lay.input_norm = lay.sublayer_norms = true;
      lay.n_weights += 2;
      return lay;
    case NG_NORM_DEEPNORM:
      lay.output_norm = true;
      lay.alpha = (float)c->deepnorm_alpha;
      return lay;
    case NG_NORM_MIXLN:
    case NG_NORM_HYBRID: break;  // ng_block_placement never says mixln or hybrid
  }
  NG_ASSERT(!"block placement out of range");
  return lay;
}

bool ng_model_has_output_norms(const ng_model_config *c) {
  for (int64_t l = 0; l < c->num_hidden_layers; l++)
    if (ng_block_layout_of(c, l).output_norm) return true;
  return false;
}

// A parameter named "model.layers.<layer>.<name>", or just <name> for layer -1.
static ng_param *add_param(ng_model *m, bool trainable, float **w, float **g, int ndim,
                           int64_t d0, int64_t d1, const char *name, int64_t layer) {
  NG_ASSERT(m->n_params < m->max_params);
  ng_param *p = &m->params[m->n_params++];
  if (layer < 0)
    snprintf(p->name, sizeof p->name, "%s", name);
  else
    snprintf(p->name, sizeof p->name, "model.layers.%lld.%s", (long long)layer, name);
  p->layer = layer;
  p->grad_view = g;
  p->data_view = w;
  p->ndim = ndim;
  p->shape[0] = d0;
  p->shape[1] = ndim == 2 ? d1 : 1;
  p->numel = (size_t)d0 * (size_t)p->shape[1];
  if (m->be) {  // a model without a backend is a skeleton: names and shapes only
    p->data = m->be->alloc(m->be, p->numel * sizeof(float));
    p->grad = trainable ? m->be->alloc(m->be, p->numel * sizeof(float)) : NULL;
  }
  *w = p->data;
  *g = p->grad;
  return p;
}

// One weight of block i in role r: "model.layers.<i>.<name>" of shape [d0] or [d0, d1].
static void add_block_param(ng_model *m, bool trainable, int64_t i, ng_block_role r, float **w,
                            float **g, int ndim, int64_t d0, int64_t d1, const char *name) {
  add_param(m, trainable, w, g, ndim, d0, d1, name, i)->role = r;
}

// Block i's weights, as its layout has them.
static void add_layer_params(ng_model *m, bool trainable, int64_t i) {
  const ng_model_config *c = &m->cfg;
  ng_block_layout lay = ng_block_layout_of(c, i);
  int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
  int64_t Hd = c->num_attention_heads * hd, KVd = c->num_key_value_heads * hd;
  ng_layer *w = &m->w.layers[i], *g = &m->g.layers[i];
  int first = m->n_params;
  if (lay.input_norm)
    add_block_param(m, trainable, i, NG_ROLE_INPUT_NORM, &w->input_layernorm,
                    &g->input_layernorm, 1, D, 0, "input_layernorm.weight");
  add_block_param(m, trainable, i, NG_ROLE_Q, &w->q_proj, &g->q_proj, 2, Hd, D,
                  "self_attn.q_proj.weight");
  add_block_param(m, trainable, i, NG_ROLE_K, &w->k_proj, &g->k_proj, 2, KVd, D,
                  "self_attn.k_proj.weight");
  add_block_param(m, trainable, i, NG_ROLE_V, &w->v_proj, &g->v_proj, 2, KVd, D,
                  "self_attn.v_proj.weight");
  add_block_param(m, trainable, i, NG_ROLE_O, &w->o_proj, &g->o_proj, 2, D, Hd,
                  "self_attn.o_proj.weight");
  if (c->layer_scale)
    add_block_param(m, trainable, i, NG_ROLE_ATT_SCALE, &w->attn_layer_scale,
                    &g->attn_layer_scale, 1, D, 0, "self_attn.layer_scale");
  add_block_param(m, trainable, i, NG_ROLE_Q_NORM, &w->q_norm, &g->q_norm, 1, hd, 0,
                  "self_attn.q_norm.weight");
  add_block_param(m, trainable, i, NG_ROLE_K_NORM, &w->k_norm, &g->k_norm, 1, hd, 0,
                  "self_attn.k_norm.weight");
  // post_attention_layernorm: on the attention output (sandwich), else on res1
  add_block_param(m, trainable, i, lay.sublayer_norms ? NG_ROLE_ATT_OUT_NORM : NG_ROLE_MLP_IN_NORM,
                  &w->post_attention_layernorm, &g->post_attention_layernorm, 1, D, 0,
                  "post_attention_layernorm.weight");
  if (lay.sublayer_norms)
    add_block_param(m, trainable, i, NG_ROLE_MLP_IN_NORM, &w->pre_feedforward_layernorm,
                    &g->pre_feedforward_layernorm, 1, D, 0, "pre_feedforward_layernorm.weight");
  if (lay.output_norm || lay.sublayer_norms)  // on res2, or (sandwich) on the MLP output
    add_block_param(m, trainable, i, lay.output_norm ? NG_ROLE_OUTPUT_NORM : NG_ROLE_MLP_OUT_NORM,
                    &w->post_feedforward_layernorm, &g->post_feedforward_layernorm, 1, D, 0,
                    "post_feedforward_layernorm.weight");
  add_block_param(m, trainable, i, NG_ROLE_GATE, &w->gate_proj, &g->gate_proj, 2, F, D,
                  "mlp.gate_proj.weight");
  add_block_param(m, trainable, i, NG_ROLE_UP, &w->up_proj, &g->up_proj, 2, F, D,
                  "mlp.up_proj.weight");
  add_block_param(m, trainable, i, NG_ROLE_DOWN, &w->down_proj, &g->down_proj, 2, D, F,
                  "mlp.down_proj.weight");
  if (c->layer_scale)
    add_block_param(m, trainable, i, NG_ROLE_MLP_SCALE, &w->mlp_layer_scale, &g->mlp_layer_scale,
                    1, D, 0, "mlp.layer_scale");
  NG_ASSERT(m->n_params - first == lay.n_weights && lay.n_weights <= NG_BLOCK_MAX_WEIGHTS);
}

int64_t ng_model_n_weights(const ng_model_config *c) {
  int64_t n = 1 + c->final_norm + !c->tie_word_embeddings;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) n += ng_block_layout_of(c, l).n_weights;
  return n;
}

static const float *head_weight(const ng_model *m) {
  return m->cfg.tie_word_embeddings ? m->w.embed_tokens : m->w.lm_head;
}

// Whether p is a weight of the linear ops: the head's, or a block's projection
// (a block's 2-D weights; its norms and layer scales are 1-D).
static bool is_linear_weight(const ng_model *m, const ng_param *p) {
  return p->layer >= 0 ? p->ndim == 2 : p->data == head_weight(m);
}

// The bf16 copies of the linear ops' weights, for a backend that reads them.
static void add_rounded_copies(ng_model *m) {
  for (int i = 0; i < m->n_params && m->be && m->be->bf16_weights; i++) {
    ng_param *p = &m->params[i];
    if (is_linear_weight(m, p)) p->rounded = m->be->alloc(m->be, p->numel * sizeof(uint16_t));
  }
}

ng_model *ng_model_create(ng_backend *be, const ng_model_config *cfg, bool trainable) {
  ng_model *m = ng_xcalloc(1, sizeof *m);
  m->cfg = *cfg;
  m->be = be;
  int64_t L = cfg->num_hidden_layers, V = cfg->vocab_size, D = cfg->hidden_size;
  m->max_params = (int)ng_model_n_weights(cfg);
  m->params = ng_xcalloc((size_t)m->max_params, sizeof(ng_param));
  m->w.layers = ng_xcalloc((size_t)L, sizeof(ng_layer));
  m->g.layers = ng_xcalloc((size_t)L, sizeof(ng_layer));
  m->growth_gate = ng_xmalloc((size_t)L * sizeof(float));
  for (int64_t i = 0; i < L; i++) m->growth_gate[i] = 1.0f;
  m->widened = -1;
  add_param(m, trainable, &m->w.embed_tokens, &m->g.embed_tokens, 2, V, D,
            "model.embed_tokens.weight", -1);
  for (int64_t i = 0; i < L; i++) add_layer_params(m, trainable, i);
  if (cfg->final_norm)
    add_param(m, trainable, &m->w.norm, &m->g.norm, 1, D, 0, "model.norm.weight", -1);
  if (!cfg->tie_word_embeddings)
    add_param(m, trainable, &m->w.lm_head, &m->g.lm_head, 2, V, D, "lm_head.weight", -1);
  NG_ASSERT(m->n_params == m->max_params);
  add_rounded_copies(m);
  return m;
}

int ng_model_check_file(const ng_model_config *cfg, const ng_st_file *f, const char *prefix) {
  if (f->n < ng_model_n_weights(cfg))  // names of L blocks cost memory: none for a short file
    return ng_fail("%s: %d tensors, but a model of %lld blocks has %lld weights", f->path, f->n,
                   (long long)cfg->num_hidden_layers, (long long)ng_model_n_weights(cfg));
  ng_model *m = ng_model_create(NULL, cfg, false);
  int rc = 0;
  for (int i = 0; i < m->n_params && rc == 0; i++) {
    const ng_param *p = &m->params[i];
    char full[160];
    snprintf(full, sizeof full, "%s%s", prefix, p->name);
    rc = ng_st_check(f, full, p->ndim, p->shape, true);
  }
  ng_model_free(m);
  return rc;
}

void ng_model_free(ng_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_params && m->be; i++) {
    const ng_param *p = &m->params[i];
    if (!p->bf16) m->be->free(m->be, p->data);  // else it lies in block_scratch
    m->be->free(m->be, p->bf16);
    m->be->free(m->be, p->rounded);
    m->be->free(m->be, p->grad);
  }
  if (m->be) m->be->free(m->be, m->block_scratch);
  free(m->params);
  free(m->w.layers);
  free(m->g.layers);
  free(m->growth_gate);
  free(m);
}

const ng_param *ng_model_find(const ng_model *m, const char *name) {
  for (int i = 0; i < m->n_params; i++)
    if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
  return NULL;
}

int ng_model_load(ng_model *m, const ng_st_file *f, const char *prefix) {
  int rc = 0;
  for (int i = 0; i < m->n_params && rc == 0; i++) {
    const ng_param *p = &m->params[i];
    char full[160];
    snprintf(full, sizeof full, "%s%s", prefix, p->name);
    float *host = ng_xmalloc(p->numel * sizeof(float));
    rc = ng_st_load_f32(f, full, p->ndim, p->shape, host);
    if (rc == 0) m->be->upload(m->be, p->data, host, p->numel * sizeof(float));
    free(host);
  }
  return rc;
}

bool ng_param_is_layer_scale(const ng_param *p) {
  return p->role == NG_ROLE_ATT_SCALE || p->role == NG_ROLE_MLP_SCALE;
}

// Every entry of p set to v.
static void set_all(ng_model *m, const ng_param *p, float v) {
  float *host = ng_xmalloc(p->numel * sizeof(float));
  for (size_t j = 0; j < p->numel; j++) host[j] = v;
  m->be->upload(m->be, p->data, host, p->numel * sizeof(float));
  free(host);
}

// What a freshly initialised 1-D tensor p holds: cfg.layer_scale_init for a layer
// scale, else (norm gains) 1.
static float fresh_1d(const ng_model *m, const ng_param *p) {
  return ng_param_is_layer_scale(p) ? (float)m->cfg.layer_scale_init : 1.0f;
}

// Matrices N(0, std^2), norm gains 1, layer scales cfg.layer_scale_init.
static void init_param(ng_model *m, const ng_param *p, ng_rng *r, double std) {
  if (p->ndim == 1) {
    set_all(m, p, fresh_1d(m, p));
    return;
  }
  float *host = ng_xmalloc(p->numel * sizeof(float));
  ng_rng_fill_normal(r, host, p->numel, 0.0, std);
  m->be->upload(m->be, p->data, host, p->numel * sizeof(float));
  free(host);
}

void ng_model_init_random(ng_model *m, ng_rng *r, double std) {
  for (int i = 0; i < m->n_params; i++) init_param(m, &m->params[i], r, std);
}

// Block `layer`'s weight in role r, or NULL.
static const ng_param *block_param(const ng_model *m, int64_t layer, ng_block_role r) {
  for (int i = 0; i < m->n_params; i++)
    if (m->params[i].layer == layer && m->params[i].role == r) return &m->params[i];
  return NULL;
}

const ng_param *ng_model_find_in_layer(const ng_model *m, const ng_param *p, int64_t layer) {
  return p->layer < 0 ? ng_model_find(m, p->name) : block_param(m, layer, p->role);
}

int ng_model_copy_block(ng_model *dst, int64_t dl, const ng_model *src, int64_t sl) {
  for (int i = 0; i < dst->n_params; i++) {
    const ng_param *p = &dst->params[i];
    if (p->layer != dl) continue;
    const ng_param *q = ng_model_find_in_layer(src, p, sl);
    if (!q) {  // a norm the source's placement lacks (e.g. an output norm from a pre block),
      set_all(dst, p, fresh_1d(dst, p));  // or a layer scale the source has not
      continue;
    }
    if (q->numel != p->numel || q->shape[0] != p->shape[0])
      return ng_fail("%s: shape differs from the source's %s", p->name, q->name);
    if (q->bf16) {
      dst->be->widen_bf16(dst->be, q->bf16, (int64_t)q->numel, p->data);
    } else {
      dst->be->copy(dst->be, p->data, q->data, p->numel * sizeof(float));
    }
  }
  return 0;
}

int ng_model_copy_io(ng_model *dst, const ng_model *src) {
  for (int i = 0; i < dst->n_params; i++) {
    const ng_param *p = &dst->params[i];
    if (p->layer >= 0) continue;
    const ng_param *q = ng_model_find(src, p->name);
    if (!q && strcmp(p->name, "lm_head.weight") == 0)  // a tied source: its head is its embedding
      q = ng_model_find(src, "model.embed_tokens.weight");
    if (!q) continue;
    if (q->numel != p->numel || q->shape[0] != p->shape[0])
      return ng_fail("%s: shape differs from the source's", p->name);
    dst->be->copy(dst->be, p->data, q->data, p->numel * sizeof(float));
  }
  return 0;
}

void ng_model_deepnorm_init(ng_model *m, int64_t final_depth) {
  if (m->cfg.norm_placement != NG_NORM_DEEPNORM) return;
  NG_ASSERT(final_depth >= m->cfg.num_hidden_layers);
  float beta = (float)pow(8.0 * (double)final_depth, -0.25);
  for (int i = 0; i < m->n_params; i++) {
    ng_param *p = &m->params[i];
    switch (p->role) {
      case NG_ROLE_V:
      case NG_ROLE_O:
      case NG_ROLE_GATE:
      case NG_ROLE_UP:
      case NG_ROLE_DOWN: m->be->scale(m->be, p->data, beta, (int64_t)p->numel, p->data); break;
      case NG_ROLE_NONE:
      case NG_ROLE_INPUT_NORM:
      case NG_ROLE_Q:
      case NG_ROLE_K:
      case NG_ROLE_Q_NORM:
      case NG_ROLE_K_NORM:
      case NG_ROLE_ATT_OUT_NORM:
      case NG_ROLE_MLP_IN_NORM:
      case NG_ROLE_MLP_OUT_NORM:
      case NG_ROLE_OUTPUT_NORM:
      case NG_ROLE_ATT_SCALE:
      case NG_ROLE_MLP_SCALE: break;
    }
  }
}

void ng_model_init_block(ng_model *m, int64_t layer, ng_rng *r, double std) {
  for (int i = 0; i < m->n_params; i++)
    if (m->params[i].layer == layer) init_param(m, &m->params[i], r, std);
}

double ng_model_matmul_params(const ng_model *m, bool trainable_only) {
  double n = 0.0;
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    bool embed = strcmp(p->name, "model.embed_tokens.weight") == 0;
    if (p->ndim == 2 && (!embed || m->cfg.tie_word_embeddings) && !(trainable_only && p->frozen))
      n += (double)p->numel;
  }
  return n;
}

double ng_attention_flops(const ng_model_config *c, int64_t B, int64_t T) {
  return 4.0 * (double)c->head_dim * (double)c->num_attention_heads * (double)T * (double)(T + 1) /
         2.0 * (double)B * (double)c->num_hidden_layers;
}

// Whether x [n] holds only bf16 numbers: fp32s whose lower 16 bits are zero.
static bool all_bf16(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &x[i], sizeof bits);
    if (bits & 0xffffu) return false;
  }
  return true;
}

static bool blocks_are_bf16(const ng_model *m) {
  bool exact = true;
  for (int i = 0; i < m->n_params && exact; i++) {
    const ng_param *p = &m->params[i];
    if (p->layer < 0) continue;
    float *host = ng_xmalloc(p->numel * sizeof(float));
    m->be->download(m->be, host, p->data, p->numel * sizeof(float));
    exact = all_bf16(host, p->numel);
    free(host);
  }
  return exact;
}

// p's bf16 bits in a new backend buffer; its fp32 data freed, `data` at `at`.
static void hold_param_bf16(ng_model *m, ng_param *p, float *at) {
  float *host = ng_xmalloc(p->numel * sizeof(float));
  uint16_t *bits = ng_xmalloc(p->numel * sizeof(uint16_t));
  m->be->download(m->be, host, p->data, p->numel * sizeof(float));
  for (size_t j = 0; j < p->numel; j++) {
    uint32_t b;
    memcpy(&b, &host[j], sizeof b);
    bits[j] = (uint16_t)(b >> 16);
  }
  p->bf16 = m->be->alloc(m->be, p->numel * sizeof(uint16_t));
  m->be->upload(m->be, p->bf16, bits, p->numel * sizeof(uint16_t));
  m->be->free(m->be, p->rounded);  // the held bits are its rounding
  p->rounded = NULL;
  m->be->free(m->be, p->data);
  p->data = *p->data_view = at;
  free(host);
  free(bits);
}

bool ng_model_hold_bf16(ng_model *m) {
  for (int i = 0; i < m->n_params; i++) NG_ASSERT(!m->params[i].grad);
  if (m->block_scratch || !blocks_are_bf16(m)) return m->block_scratch != NULL;
  size_t block = 0;  // floats of the largest block
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += m->params[i].layer == l ? m->params[i].numel : 0;
    block = n > block ? n : block;
  }
  m->block_scratch = m->be->alloc(m->be, block * sizeof(float));
  size_t at = 0;  // a block's parameters follow each other in params, in one order
  for (int i = 0; i < m->n_params; i++) {
    ng_param *p = &m->params[i];
    if (p->layer < 0) continue;
    if (i == 0 || m->params[i - 1].layer != p->layer) at = 0;
    hold_param_bf16(m, p, m->block_scratch + at);
    at += p->numel;
  }
  m->widened = -1;
  return true;
}

// Block l's weights into the scratch when the model holds its blocks in bf16.
static void widen_block(ng_model *m, int64_t l) {
  if (!m->block_scratch || m->widened == l) return;
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    if (p->layer == l) m->be->widen_bf16(m->be, p->bf16, (int64_t)p->numel, p->data);
  }
  m->widened = l;
}

void ng_model_freeze(ng_model *m, int64_t layer, bool frozen) {
  for (int i = 0; i < m->n_params; i++) {
    ng_param *p = &m->params[i];
    if (p->layer != layer || !p->grad) continue;
    p->frozen = frozen;
    *p->grad_view = frozen ? NULL : p->grad;
  }
}

void ng_model_zero_grad(ng_model *m) {
  for (int i = 0; i < m->n_params; i++)
    if (m->params[i].grad) m->be->zero(m->be, m->params[i].grad, m->params[i].numel * sizeof(float));
}

// ---------------------------------------------------------------- activations

static float *buf(ng_backend *be, int64_t n) { return be->alloc(be, (size_t)n * sizeof(float)); }
static uint16_t *buf_bf16(ng_backend *be, int64_t n) {
  return be->alloc(be, (size_t)n * sizeof(uint16_t));
}

ng_block_layout ng_block_layouts_union(const ng_model_config *c, int64_t first, int64_t last) {
  ng_block_layout u = ng_block_layout_of(c, first);
  for (int64_t l = first + 1; l <= last; l++) {
    ng_block_layout b = ng_block_layout_of(c, l);
    u.input_norm |= b.input_norm;
    u.sublayer_norms |= b.sublayer_norms;
    u.output_norm |= b.output_norm;
    if (b.alpha != 1.0f) u.alpha = b.alpha;
  }
  return u;
}

// Saved values for blocks of layout lay (model.h: a buffer lay does not use is
// NULL), with the linear layers' bf16 inputs when `inputs_bf16`.
static void block_acts_alloc(const ng_model *m, int64_t B, int64_t T, ng_block_layout lay,
                             bool inputs_bf16, ng_block_acts *s) {
  const ng_model_config *c = &m->cfg;
  ng_backend *be = m->be;
  int64_t N = B * T, D = c->hidden_size, F = c->intermediate_size;
  int64_t H = c->num_attention_heads, KV = c->num_key_value_heads, hd = c->head_dim;
  if (lay.input_norm) {
    s->att_in = buf(be, N * D);
    s->rstd_in = buf(be, N);
  }
  s->q = buf(be, N * H * hd);
  s->k = buf(be, N * KV * hd);
  s->v = buf(be, N * KV * hd);
  s->rstd_q = buf(be, N * H);
  s->rstd_k = buf(be, N * KV);
  s->qr = buf(be, N * H * hd);
  s->kr = buf(be, N * KV * hd);
  s->att = buf(be, N * H * hd);
  s->lse = buf(be, N * H);
  if (lay.sublayer_norms || lay.alpha != 1.0f) s->att_out = buf(be, N * D);
  if (lay.sublayer_norms) s->rstd_ao = buf(be, N);
  s->res1 = buf(be, N * D);
  s->mlp_in = buf(be, N * D);
  s->rstd_mi = buf(be, N);
  s->gate = buf(be, N * F);
  s->up = buf(be, N * F);
  s->act = buf(be, N * F);
  if (lay.sublayer_norms) {
    s->mlp_out = buf(be, N * D);
    s->rstd_mo = buf(be, N);
  }
  if (lay.output_norm) {
    s->res2 = buf(be, N * D);
    s->rstd_out = buf(be, N);
  }
  if (c->layer_scale) {
    s->att_branch = buf(be, N * D);
    s->mlp_branch = buf(be, N * D);
  }
  if (inputs_bf16) {
    s->att_in_bf16 = buf_bf16(be, N * D);
    s->att_bf16 = buf_bf16(be, N * H * hd);
    s->mlp_in_bf16 = buf_bf16(be, N * D);
    s->act_bf16 = buf_bf16(be, N * F);
  }
}

static void block_acts_free(ng_backend *be, ng_block_acts *s) {
  float *all[] = {s->att_in,  s->rstd_in,    s->q,          s->k,       s->v,      s->rstd_q,
                  s->rstd_k,  s->qr,         s->kr,         s->att,     s->lse,    s->att_out,
                  s->rstd_ao, s->res1,       s->mlp_in,     s->rstd_mi, s->gate,   s->up,
                  s->act,     s->mlp_out,    s->rstd_mo,    s->res2,    s->rstd_out,
                  s->att_branch, s->mlp_branch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
  uint16_t *all_bf16[] = {s->att_in_bf16, s->att_bf16, s->mlp_in_bf16, s->act_bf16};
  for (size_t i = 0; i < sizeof all_bf16 / sizeof all_bf16[0]; i++) be->free(be, all_bf16[i]);
}

static void grad_ws_alloc(const ng_model *m, int64_t N, int64_t chunk, ng_grad_ws *w) {
  const ng_model_config *c = &m->cfg;
  ng_backend *be = m->be;
  int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
  int64_t Hd = c->num_attention_heads * hd, KVd = c->num_key_value_heads * hd;
  w->dh[0] = buf(be, N * D);
  w->dh[1] = buf(be, N * D);
  w->dres2 = buf(be, N * D);
  w->dres1 = buf(be, N * D);
  w->dmlp_in = buf(be, N * D);
  w->datt_in = buf(be, N * D);
  w->dgate = buf(be, N * F);
  w->dup = buf(be, N * F);
  w->dact = buf(be, N * F);
  w->datt = buf(be, N * Hd);
  w->dq = buf(be, N * Hd);
  w->dk = buf(be, N * KVd);
  w->dv = buf(be, N * KVd);
  w->dq_raw = buf(be, N * Hd);
  w->dk_raw = buf(be, N * KVd);
  w->dfinal = buf(be, N * D);
  w->dgrowth_gated = buf(be, N * D);
  w->dlogits = buf(be, chunk * c->vocab_size);
  if (c->layer_scale) w->dbranch = buf(be, N * D);
}

static void grad_ws_free(ng_backend *be, ng_grad_ws *w) {
  float *all[] = {w->dh[0], w->dh[1], w->dres2, w->dres1, w->dmlp_in, w->datt_in,
                  w->dgate, w->dup,   w->dact,  w->datt,  w->dq,      w->dk,
                  w->dv,    w->dq_raw, w->dk_raw, w->dfinal, w->dgrowth_gated, w->dlogits, w->dbranch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
}

ng_acts *ng_acts_create_with(const ng_model *m, int64_t B, int64_t T, const ng_acts_options *o) {
  const ng_model_config *c = &m->cfg;
  NG_ASSERT(!o->recompute || o->for_backward);
  ng_acts *a = ng_xcalloc(1, sizeof *a);
  a->B = B;
  a->T = T;
  a->N = B * T;
  a->for_backward = o->for_backward;
  a->recompute = o->recompute;
  a->chunk = o->chunk > 0 && o->chunk < a->N ? o->chunk : a->N;
  a->n_hidden = a->for_backward ? (int)c->num_hidden_layers + 1 : 2;
  a->hidden = ng_xcalloc((size_t)a->n_hidden, sizeof(float *));
  for (int i = 0; i < a->n_hidden; i++) a->hidden[i] = buf(m->be, a->N * c->hidden_size);
  a->n_blocks = a->for_backward && !a->recompute ? (int)c->num_hidden_layers : 1;
  a->blocks = ng_xcalloc((size_t)a->n_blocks, sizeof(ng_block_acts));
  bool inputs_bf16 = a->for_backward && m->be->bf16_weights;  // rounded once a step
  for (int i = 0; i < a->n_blocks; i++)  // one set shared by all blocks, or each block's own
    block_acts_alloc(m, B, T, ng_block_layouts_union(c, a->n_blocks == 1 ? 0 : i,
                                            a->n_blocks == 1 ? c->num_hidden_layers - 1 : i),
                     inputs_bf16, &a->blocks[i]);
  if (c->final_norm) {
    a->final_in = buf(m->be, a->N * c->hidden_size);
    a->rstd_final = buf(m->be, a->N);
  }
  if (inputs_bf16) a->head_in_bf16 = buf_bf16(m->be, a->N * c->hidden_size);
  a->logits = buf(m->be, a->chunk * c->vocab_size);
  if (a->for_backward) grad_ws_alloc(m, a->N, a->chunk, &a->ws);
  return a;
}

ng_acts *ng_acts_create(const ng_model *m, int64_t B, int64_t T, bool for_backward) {
  ng_acts_options o = {.for_backward = for_backward};
  return ng_acts_create_with(m, B, T, &o);
}

int64_t ng_loss_chunk_default(const ng_model_config *c, int64_t N) {
  int64_t rows = NG_LOSS_CHUNK_BYTES / ((int64_t)sizeof(float) * (c->vocab_size + c->hidden_size));
  return rows < 1 ? 1 : rows > N ? N : rows;
}

void ng_acts_free(const ng_model *m, ng_acts *a) {
  if (!a) return;
  ng_backend *be = m->be;
  for (int i = 0; i < a->n_hidden; i++) be->free(be, a->hidden[i]);
  for (int i = 0; i < a->n_blocks; i++) block_acts_free(be, &a->blocks[i]);
  be->free(be, a->final_in);
  be->free(be, a->rstd_final);
  be->free(be, a->head_in_bf16);
  be->free(be, a->logits);
  grad_ws_free(be, &a->ws);  // NULL buffers (no workspace) are no-ops
  free(a->hidden);
  free(a->blocks);
  free(a);
}

float *ng_acts_hidden(const ng_acts *a, int64_t l) {
  return a->for_backward ? a->hidden[l] : a->hidden[l % 2];
}

// ---------------------------------------------------------------- linear layers

// The linear layer of weights p[0..n) [out_i, in] with their bf16 forms: the
// held bits (always current), or the rounded copies, current when `rounded`
// says this forward has filled them.
static ng_linear linear_of(int n, const ng_param *const p[], bool rounded) {
  ng_linear l = {.n = n, .bf16_ready = rounded};
  for (int i = 0; i < n; i++) {
    l.W[i] = p[i]->data;
    l.out[i] = p[i]->shape[0];
    l.W_bf16[i] = p[i]->bf16 ? p[i]->bf16 : p[i]->rounded;
    l.bf16_ready = l.bf16_ready || p[i]->bf16;
  }
  return l;
}

// Block l's projections in roles r[0..n) as one linear layer (in a's pass).
static ng_linear block_linear(const ng_model *m, const ng_acts *a, int64_t l, int n,
                              const ng_block_role r[]) {
  const ng_param *p[NG_LINEAR_MAX];
  for (int i = 0; i < n; i++) {
    p[i] = block_param(m, l, r[i]);
    NG_ASSERT(p[i]);
  }
  return linear_of(n, p, a->blocks_rounded);
}

// The projections of the attention's input: q_proj [H*hd, D], k_proj, v_proj [KV*hd, D].
static ng_linear qkv_proj(const ng_model *m, const ng_acts *a, int64_t l) {
  return block_linear(m, a, l, 3, (ng_block_role[]){NG_ROLE_Q, NG_ROLE_K, NG_ROLE_V});
}

// The projections of the MLP's input: gate_proj, up_proj [F, D].
static ng_linear gate_up_proj(const ng_model *m, const ng_acts *a, int64_t l) {
  return block_linear(m, a, l, 2, (ng_block_role[]){NG_ROLE_GATE, NG_ROLE_UP});
}

// o_proj [D, H*hd], down_proj [D, F].
static ng_linear o_proj(const ng_model *m, const ng_acts *a, int64_t l) {
  return block_linear(m, a, l, 1, (ng_block_role[]){NG_ROLE_O});
}
static ng_linear down_proj(const ng_model *m, const ng_acts *a, int64_t l) {
  return block_linear(m, a, l, 1, (ng_block_role[]){NG_ROLE_DOWN});
}

// The head [V, D] (lm_head, or the embeddings when tied).
static ng_linear head_linear(const ng_model *m, const ng_acts *a) {
  const ng_param *p = NULL;
  for (int i = 0; i < m->n_params && !p; i++)
    if (m->params[i].data == head_weight(m)) p = &m->params[i];
  return linear_of(1, &p, a->head_rounded);
}

// l with the bf16 rounding of its input kept in copy (NULL: none): written by
// a forward, read (`ready`) by the backward of the same pass.
static ng_linear with_input(ng_linear l, uint16_t *copy, bool ready) {
  l.x_bf16 = copy;
  l.x_ready = copy && ready;
  return l;
}

// y [N, out] = x [N, in] W^T for a linear layer of one weight W [out, in].
static void linear_forward(ng_backend *be, ng_linear l, const float *x, int64_t N, int64_t in,
                           float *y) {
  be->linear_forward(be, l, x, N, in, &y);
}

// dW [out, in] += dy^T x (skipped when dW is NULL: frozen);
// dx [N, in] = dy W + beta_dx * dx, for a linear layer of one weight W.
static void linear_backward(ng_backend *be, ng_linear l, const float *x, const float *dy,
                            int64_t N, int64_t in, float beta_dx, float *dx, float *dW) {
  be->linear_backward(be, l, x, &dy, N, in, beta_dx, dx, &dW);
}

// ---------------------------------------------------------------- block forward

static ng_attn_shape attn_shape(const ng_model *m, const ng_acts *a) {
  return (ng_attn_shape){a->B, a->T, m->cfg.num_attention_heads,
                         m->cfg.num_key_value_heads, m->cfg.head_dim};
}

// att_in [N, D] -> s->att [N, H*hd]: projections, q_norm/k_norm, rotary, attention.
static void attention_forward(ng_model *m, const ng_acts *a, int64_t l, const float *att_in,
                              ng_block_acts *s) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  const ng_layer *w = &m->w.layers[l];
  ng_attn_shape as = attn_shape(m, a);
  int64_t N = a->N, D = c->hidden_size, hd = as.hd;
  float eps = (float)c->rms_norm_eps;
  // q [N, H*hd], k, v [N, KV*hd]
  be->linear_forward(be, with_input(qkv_proj(m, a, l), s->att_in_bf16, false), att_in, N, D,
                     (float *const[]){s->q, s->k, s->v});
  be->rmsnorm_forward(be, s->q, w->q_norm, N * as.H, hd, eps, s->qr, s->rstd_q);  // per head
  be->rmsnorm_forward(be, s->k, w->k_norm, N * as.KV, hd, eps, s->kr, s->rstd_k);
  be->rope_forward(be, s->qr, as.B, as.T, as.H, hd, c->rope_theta);   // qr [B, T, H, hd]
  be->rope_forward(be, s->kr, as.B, as.T, as.KV, hd, c->rope_theta);  // kr [B, T, KV, hd]
  be->attention_forward(be, as, s->qr, s->kr, s->v, s->att, s->lse);  // att [N, H*hd]
}

// y = alpha x + f [n] (alpha x written to y first: f may be y only when alpha is 1).
static void scaled_add(ng_backend *be, float alpha, const float *x, const float *f, int64_t n,
                       float *y) {
  if (alpha == 1.0f) {
    be->add(be, x, f, n, y);
    return;
  }
  NG_ASSERT(f != y);
  be->scale(be, x, alpha, n, y);
  be->add(be, y, f, n, y);
}

// The norm in front of block w's MLP (N_mi): sandwich's pre_feedforward_layernorm,
// else post_attention_layernorm.
static float *mlp_in_norm(const ng_layer *w, ng_block_layout lay) {
  return lay.sublayer_norms ? w->pre_feedforward_layernorm : w->post_attention_layernorm;
}

// With layer_scale: y [N, D] = gamma [D] * y, the sublayer's branch term y
// saved into saved [N, D] first; without, nothing.
static void layer_scale_forward(ng_model *m, const ng_acts *a, const float *gamma, float *y,
                                float *saved) {
  if (!m->cfg.layer_scale) return;
  int64_t N = a->N, D = m->cfg.hidden_size;
  m->be->copy(m->be, saved, y, (size_t)N * D * sizeof(float));
  m->be->channel_scale_forward(m->be, saved, gamma, N, D, y);
}

// With layer_scale: d of the sublayer's branch term [N, D] into ws->dbranch, given dy
// [N, D] of the scaled output, and dgamma [D] += sum over rows of dy * saved;
// returns ws->dbranch. Without: dy itself.
static const float *layer_scale_backward(ng_model *m, const ng_acts *a, const float *gamma,
                                         const float *saved, const float *dy, float *dgamma) {
  if (!m->cfg.layer_scale) return dy;
  m->be->channel_scale_backward(m->be, saved, gamma, dy, a->N, m->cfg.hidden_size,
                                a->ws.dbranch, dgamma);
  return a->ws.dbranch;
}

// d of a sublayer's output `out` [N, D] (att_out or mlp_out), given d of its
// residual term gamma (sublayer_norms ? N(out) : out) [N, D]: back through the
// layer scale (gamma, the saved branch, dgamma += ...) and, with sublayer norms,
// the norm N (gains nw, saved rstd, dgains ng += ...) into ws->dres2. Returns it.
static const float *branch_backward(ng_model *m, const ng_acts *a, ng_block_layout lay,
                                    const float *dterm, const float *gamma, const float *branch,
                                    float *dgamma, const float *out, const float *nw,
                                    const float *rstd, float *ng) {
  const float *d = layer_scale_backward(m, a, gamma, branch, dterm, dgamma);
  if (!lay.sublayer_norms) return d;
  float *dout = a->ws.dres2;
  int64_t N = a->N, D = m->cfg.hidden_size;
  m->be->zero(m->be, dout, (size_t)N * D * sizeof(float));
  m->be->rmsnorm_backward(m->be, out, nw, rstd, d, N, D, dout, ng);
  return dout;
}

// x [N, D] -> out [N, D], saving into s (see model.h for the placements).
static void block_forward(ng_model *m, const ng_acts *a, int64_t l, const float *x, float *out,
                          ng_block_acts *s) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  const ng_layer *w = &m->w.layers[l];
  ng_block_layout lay = ng_block_layout_of(c, l);
  int64_t N = a->N, D = c->hidden_size, F = c->intermediate_size, nd = N * D;
  int64_t Hd = c->num_attention_heads * c->head_dim;
  float eps = (float)c->rms_norm_eps, c_l = lay.norm_scale;
  if (lay.input_norm) {
    be->rmsnorm_forward(be, x, w->input_layernorm, N, D, eps, s->att_in, s->rstd_in);
    if (c_l != 1.0f) be->scale(be, s->att_in, c_l, nd, s->att_in);    // lns
  }
  attention_forward(m, a, l, lay.input_norm ? s->att_in : x, s);
  float *att_out = s->att_out ? s->att_out : s->res1;
  linear_forward(be, with_input(o_proj(m, a, l), s->att_bf16, false), s->att, N, Hd,
                 att_out);                                          // att_out [N, D]
  float *branch = att_out;
  if (lay.sublayer_norms) {                                          // N_pa(att_out)
    be->rmsnorm_forward(be, att_out, w->post_attention_layernorm, N, D, eps, s->res1, s->rstd_ao);
    branch = s->res1;
  }
  layer_scale_forward(m, a, w->attn_layer_scale, branch, s->att_branch);  // gamma_attn branch
  scaled_add(be, lay.alpha, x, branch, nd, s->res1);                 // res1 = alpha x + ...
  be->rmsnorm_forward(be, s->res1, mlp_in_norm(w, lay), N, D, eps, s->mlp_in, s->rstd_mi);
  if (c_l != 1.0f) be->scale(be, s->mlp_in, c_l, nd, s->mlp_in);    // lns
  be->linear_forward(be, with_input(gate_up_proj(m, a, l), s->mlp_in_bf16, false), s->mlp_in,
                     N, D, (float *const[]){s->gate, s->up});      // gate, up [N, F]
  be->swiglu_forward(be, s->gate, s->up, N * F, s->act);            // act [N, F]
  float *mlp_out = lay.sublayer_norms ? s->mlp_out : out;
  linear_forward(be, with_input(down_proj(m, a, l), s->act_bf16, false), s->act, N, F,
                 mlp_out);                                          // mlp_out [N, D]
  if (lay.sublayer_norms)                                           // N_pf(mlp_out)
    be->rmsnorm_forward(be, mlp_out, w->post_feedforward_layernorm, N, D, eps, out, s->rstd_mo);
  layer_scale_forward(m, a, w->mlp_layer_scale, out, s->mlp_branch);  // gamma_mlp branch
  if (lay.output_norm) {
    scaled_add(be, lay.alpha, s->mlp_in, out, nd, s->res2);         // res2 = alpha mlp_in + ...
    be->rmsnorm_forward(be, s->res2, w->post_feedforward_layernorm, N, D, eps, out, s->rstd_out);
  } else {
    be->add(be, s->res1, out, nd, out);                             // y = res2 = res1 + ...
  }
}

// The head's input [N, D]: the final norm's output, or the last hidden state.
static float *head_input(const ng_model *m, const ng_acts *a) {
  return m->cfg.final_norm ? a->final_in : ng_acts_hidden(a, m->cfg.num_hidden_layers);
}

// h [N, D] -> final_in [N, D] (with final_norm)
static void final_norm_forward(ng_model *m, ng_acts *a, const float *h) {
  const ng_model_config *c = &m->cfg;
  if (c->final_norm)
    m->be->rmsnorm_forward(m->be, h, m->w.norm, a->N, c->hidden_size, (float)c->rms_norm_eps,
                           a->final_in, a->rstd_final);
}

// head input rows [row0, row0 + rows) [rows, D] -> logits [rows, V]
void ng_model_logits(ng_model *m, ng_acts *a, int64_t row0, int64_t rows) {
  NG_ASSERT(rows >= 1 && rows <= a->chunk && row0 >= 0 && row0 + rows <= a->N);
  int64_t D = m->cfg.hidden_size;
  uint16_t *copy = a->head_in_bf16 ? a->head_in_bf16 + row0 * D : NULL;
  linear_forward(m->be, with_input(head_linear(m, a), copy, false), head_input(m, a) + row0 * D,
                 rows, D, a->logits);
  a->head_rounded = true;
}

// The block with its sublayers zeroed: with an output norm res1 = alpha x,
// mlp_in = N_pa(res1), y = N_pf(alpha mlp_in); else (the sublayers' outputs,
// normed or not, are zero) y = x.
static void block_forward_norms(ng_model *m, const ng_acts *a, int64_t l, const float *x,
                                float *out, ng_block_acts *s) {
  ng_backend *be = m->be;
  const ng_layer *w = &m->w.layers[l];
  ng_block_layout lay = ng_block_layout_of(&m->cfg, l);
  int64_t N = a->N, D = m->cfg.hidden_size;
  float eps = (float)m->cfg.rms_norm_eps;
  if (!lay.output_norm) {
    be->copy(be, out, x, (size_t)N * D * sizeof(float));
    return;
  }
  be->scale(be, x, lay.alpha, N * D, s->res1);
  be->rmsnorm_forward(be, s->res1, w->post_attention_layernorm, N, D, eps, s->mlp_in, s->rstd_mi);
  be->scale(be, s->mlp_in, lay.alpha, N * D, s->res2);
  be->rmsnorm_forward(be, s->res2, w->post_feedforward_layernorm, N, D, eps, out, s->rstd_out);
}

// The saved values block l uses: its own, or the one shared set.
static ng_block_acts *saved(const ng_acts *a, int64_t l) {
  return &a->blocks[a->n_blocks == 1 ? 0 : l];
}

// Block l of a forward: ng_acts_hidden(a, l) -> ng_acts_hidden(a, l + 1).
static void forward_block(ng_model *m, ng_acts *a, int64_t l, ng_block_mode mode) {
  ng_backend *be = m->be;
  int64_t D = m->cfg.hidden_size;
  const float *x = ng_acts_hidden(a, l);
  float *out = ng_acts_hidden(a, l + 1);
  ng_block_acts *s = saved(a, l);
  widen_block(m, l);
  switch (mode) {
    case NG_BLOCK_SKIP:
      be->copy(be, out, x, (size_t)a->N * D * sizeof(float));
      break;
    case NG_BLOCK_NORMS:
      block_forward_norms(m, a, l, x, out, s);
      break;
    case NG_BLOCK_RUN:
      block_forward(m, a, l, x, out, s);
      if (m->growth_gate[l] != 1.0f) be->lerp(be, x, out, m->growth_gate[l], a->N * D, out);  // growth gate
      break;
  }
}

void ng_model_forward(ng_model *m, ng_acts *a, const int32_t *tokens,
                      const ng_block_mode *modes) {
  ng_backend *be = m->be;
  int64_t L = m->cfg.num_hidden_layers, D = m->cfg.hidden_size;
  a->blocks_rounded = a->head_rounded = false;  // the weights may have changed since
  be->embedding_forward(be, tokens, m->w.embed_tokens, a->N, D, ng_acts_hidden(a, 0));
  for (int64_t l = 0; l < L; l++) {
    ng_block_mode mode = modes ? modes[l] : NG_BLOCK_RUN;
    NG_ASSERT(mode == NG_BLOCK_RUN || !a->for_backward);
    forward_block(m, a, l, mode);
    if (a->on_block) a->on_block(a->on_block_ctx, a, l, saved(a, l));
  }
  a->blocks_rounded = true;
  final_norm_forward(m, a, ng_acts_hidden(a, L));
}

// ---------------------------------------------------------------- block backward

// d att [N, H*hd] -> datt_in [N, D] (written), accumulating the attention weights' grads.
static void attention_backward(ng_model *m, const ng_acts *a, int64_t l, const float *att_in,
                               const ng_block_acts *s, ng_grad_ws *ws) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  const ng_layer *w = &m->w.layers[l], *g = &m->g.layers[l];
  ng_attn_shape as = attn_shape(m, a);
  int64_t N = a->N, D = c->hidden_size, hd = as.hd, Hd = as.H * hd, KVd = as.KV * hd;
  be->attention_backward(be, as, s->qr, s->kr, s->v, s->att, s->lse, ws->datt, ws->dq, ws->dk,
                         ws->dv);
  be->rope_backward(be, ws->dq, as.B, as.T, as.H, hd, c->rope_theta);
  be->rope_backward(be, ws->dk, as.B, as.T, as.KV, hd, c->rope_theta);
  be->zero(be, ws->dq_raw, (size_t)N * Hd * sizeof(float));
  be->zero(be, ws->dk_raw, (size_t)N * KVd * sizeof(float));
  be->rmsnorm_backward(be, s->q, w->q_norm, s->rstd_q, ws->dq, N * as.H, hd, ws->dq_raw, g->q_norm);
  be->rmsnorm_backward(be, s->k, w->k_norm, s->rstd_k, ws->dk, N * as.KV, hd, ws->dk_raw, g->k_norm);
  be->linear_backward(be, with_input(qkv_proj(m, a, l), s->att_in_bf16, true), att_in,
                      (const float *const[]){ws->dq_raw, ws->dk_raw, ws->dv}, N, D, 0.0f,
                      ws->datt_in, (float *const[]){g->q_proj, g->k_proj, g->v_proj});
}

// dy [N, D] -> dx [N, D] (written) for block l with input x.
static void block_backward(ng_model *m, const ng_acts *a, int64_t l, const float *x,
                           const float *dy, float *dx) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  const ng_layer *w = &m->w.layers[l], *g = &m->g.layers[l];
  const ng_block_acts *s = saved(a, l);
  ng_grad_ws *ws = (ng_grad_ws *)&a->ws;
  ng_block_layout lay = ng_block_layout_of(c, l);
  int64_t N = a->N, D = c->hidden_size, F = c->intermediate_size;
  int64_t Hd = c->num_attention_heads * c->head_dim;
  size_t nd = (size_t)N * D * sizeof(float);
  float c_l = lay.norm_scale;
  const float *dres2 = dy;
  if (lay.output_norm) {  // y = N_pf(res2)
    be->zero(be, ws->dres2, nd);
    be->rmsnorm_backward(be, s->res2, w->post_feedforward_layernorm, s->rstd_out, dy, N, D,
                         ws->dres2, g->post_feedforward_layernorm);
    dres2 = ws->dres2;
  }
  // res2 = alpha (...) + gamma_mlp branch; branch = sublayer_norms ? N_pf(mlp_out) : mlp_out
  // (no placement has both an output norm and sublayer norms: ws->dres2 is free then)
  const float *dmlp_out =
      branch_backward(m, a, lay, dres2, w->mlp_layer_scale, s->mlp_branch, g->mlp_layer_scale,
                      s->mlp_out, w->post_feedforward_layernorm, s->rstd_mo,
                      g->post_feedforward_layernorm);
  // mlp_out = down(act); act = silu(gate(mlp_in)) up(mlp_in)
  linear_backward(be, with_input(down_proj(m, a, l), s->act_bf16, true), s->act, dmlp_out, N, F,
                  0.0f, ws->dact, g->down_proj);
  be->swiglu_backward(be, s->gate, s->up, ws->dact, N * F, ws->dgate, ws->dup);
  be->linear_backward(be, with_input(gate_up_proj(m, a, l), s->mlp_in_bf16, true), s->mlp_in,
                      (const float *const[]){ws->dgate, ws->dup}, N, D, 0.0f, ws->dmlp_in,
                      (float *const[]){g->gate_proj, g->up_proj});
  // res2 = alpha (output_norm ? mlp_in : res1) + ...
  if (lay.output_norm) {
    scaled_add(be, lay.alpha, dres2, ws->dmlp_in, N * D, ws->dres1);
    be->copy(be, ws->dmlp_in, ws->dres1, nd);
    be->zero(be, ws->dres1, nd);
  } else {
    be->copy(be, ws->dres1, dres2, nd);
  }
  // mlp_in = N_mi(res1) c
  if (c_l != 1.0f) be->scale(be, ws->dmlp_in, c_l, N * D, ws->dmlp_in);  // lns
  be->rmsnorm_backward(be, s->res1, mlp_in_norm(w, lay), s->rstd_mi, ws->dmlp_in, N, D,
                       ws->dres1, mlp_in_norm(g, lay));
  // res1 = alpha x + gamma_attn branch; branch = sublayer_norms ? N_pa(att_out) : att_out;
  // att_out = o_proj(att)
  const float *datt_out =
      branch_backward(m, a, lay, ws->dres1, w->attn_layer_scale, s->att_branch, g->attn_layer_scale,
                      s->att_out, w->post_attention_layernorm, s->rstd_ao,
                      g->post_attention_layernorm);
  linear_backward(be, with_input(o_proj(m, a, l), s->att_bf16, true), s->att, datt_out, N, Hd,
                  0.0f, ws->datt, g->o_proj);
  attention_backward(m, a, l, lay.input_norm ? s->att_in : x, s, ws);
  be->scale(be, ws->dres1, lay.alpha, N * D, dx);
  if (lay.input_norm) {
    if (c_l != 1.0f) be->scale(be, ws->datt_in, c_l, N * D, ws->datt_in);  // lns
    be->rmsnorm_backward(be, x, w->input_layernorm, s->rstd_in, ws->datt_in, N, D, dx,
                         g->input_layernorm);
  } else {
    be->add(be, dx, ws->datt_in, N * D, dx);
  }
}

// dlogits [rows, V] of rows [row0, row0 + rows) -> their dfinal [rows, D]
// (written); d head weight [V, D] += dlogits^T head input rows (after the
// rows' logits: their input's bf16 copy is ready).
static void head_backward(ng_model *m, ng_acts *a, int64_t row0, int64_t rows) {
  const ng_model_config *c = &m->cfg;
  int64_t D = c->hidden_size;
  float *dhead = c->tie_word_embeddings ? m->g.embed_tokens : m->g.lm_head;
  uint16_t *copy = a->head_in_bf16 ? a->head_in_bf16 + row0 * D : NULL;
  linear_backward(m->be, with_input(head_linear(m, a), copy, true), head_input(m, a) + row0 * D,
                  a->ws.dlogits, rows, D, 0.0f, a->ws.dfinal + row0 * D, dhead);
}

// Valid rows (target >= 0) of targets [N] (backend).
static int64_t count_valid(ng_backend *be, const int32_t *targets, int64_t N) {
  int32_t *host = ng_xmalloc((size_t)N * sizeof(int32_t));
  be->download(be, host, targets, (size_t)N * sizeof(int32_t));
  int64_t n = 0;
  for (int64_t i = 0; i < N; i++) n += host[i] >= 0;
  free(host);
  return n;
}

double ng_loss_mix(double kd_weight, double ce, double kd) {
  return kd_weight * kd + (1.0 - kd_weight) * ce;
}

void ng_model_loss(ng_model *m, ng_acts *a, const ng_loss_teacher *t, const int32_t *targets,
                   ng_loss_params lp, bool grad, double *ce, double *kd, int64_t *n_valid) {
  NG_ASSERT(!grad || a->for_backward);
  NG_ASSERT(!t || !t->model || t->acts->chunk >= a->chunk);
  ng_backend *be = m->be;
  int64_t N = a->N, V = m->cfg.vocab_size;
  if (lp.n_norm == 0) lp.n_norm = count_valid(be, targets, N);
  *ce = *kd = 0.0;
  *n_valid = 0;
  for (int64_t row0 = 0; row0 < N; row0 += a->chunk) {
    int64_t rows = N - row0 < a->chunk ? N - row0 : a->chunk, nv;
    double c_ce, c_kd;
    float *dlogits = grad ? a->ws.dlogits : NULL;
    ng_model_logits(m, a, row0, rows);                                  // [rows, V]
    if (t && t->topk_ids) {
      be->ce_kd_topk(be, a->logits, t->topk_ids + row0 * t->k, t->topk_vals + row0 * t->k,
                     t->topk_lse + row0, t->topk_rest + row0, t->k, targets + row0, rows, V,
                     lp, dlogits, &c_ce, &c_kd, &nv);
    } else {
      const float *teacher = t && t->logits ? t->logits + row0 * V : NULL;
      if (t && t->model) {
        ng_model_logits(t->model, t->acts, row0, rows);                 // [rows, V]
        teacher = t->acts->logits;
      }
      be->ce_kd(be, a->logits, teacher, targets + row0, rows, V, lp, dlogits, &c_ce, &c_kd, &nv);
    }
    *ce += c_ce;
    *kd += c_kd;
    *n_valid += nv;
    if (grad) head_backward(m, a, row0, rows);
  }
}

// y = (1 - g) x + g Block(x): dx = (1 - g) dy + Block'(g dy), through dgrowth_gated.
static void gated_block_backward(ng_model *m, const ng_acts *a, int64_t l, const float *x,
                                 const float *dy, float *dx) {
  ng_backend *be = m->be;
  float g = m->growth_gate[l];
  int64_t n = a->N * m->cfg.hidden_size;
  if (g == 1.0f) {
    block_backward(m, a, l, x, dy, dx);
    return;
  }
  be->scale(be, dy, g, n, a->ws.dgrowth_gated);
  block_backward(m, a, l, x, a->ws.dgrowth_gated, dx);
  be->scale(be, dy, 1.0f - g, n, a->ws.dgrowth_gated);
  be->add(be, dx, a->ws.dgrowth_gated, n, dx);
}

// dfinal [N, D] -> d h_L [N, D] (written into out)
static void final_norm_backward(ng_model *m, ng_acts *a, float *out) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  int64_t N = a->N, D = c->hidden_size;
  if (!c->final_norm) {
    be->copy(be, out, a->ws.dfinal, (size_t)N * D * sizeof(float));
    return;
  }
  be->zero(be, out, (size_t)N * D * sizeof(float));
  be->rmsnorm_backward(be, ng_acts_hidden(a, c->num_hidden_layers), m->w.norm, a->rstd_final,
                       a->ws.dfinal, N, D, out, m->g.norm);
}

void ng_model_backward(ng_model *m, ng_acts *a, const int32_t *tokens) {
  NG_ASSERT(a->for_backward);
  ng_backend *be = m->be;
  int64_t L = m->cfg.num_hidden_layers;
  float **dh = a->ws.dh;
  final_norm_backward(m, a, dh[L % 2]);
  for (int64_t l = L - 1; l >= 0; l--) {
    if (a->recompute) forward_block(m, a, l, NG_BLOCK_RUN);  // block l's saved values again
    gated_block_backward(m, a, l, ng_acts_hidden(a, l), dh[(l + 1) % 2], dh[l % 2]);
  }
  if (m->g.embed_tokens)
    be->embedding_backward(be, tokens, dh[0], a->N, m->cfg.hidden_size, m->g.embed_tokens);
}
