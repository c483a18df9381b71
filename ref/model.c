// normgrow: the Qwen3 decoder (teacher and student, Pre- and Post-Norm),
// forward and backward through the backend op table.
#include "normgrow/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"

// ---------------------------------------------------------------- parameters

ng_block_layout ng_block_layout_of(ng_norm_placement p) {
  switch (p) {
    case NG_NORM_PRE: return (ng_block_layout){.input_norm = true, .n_weights = 11};
    case NG_NORM_POST: return (ng_block_layout){.output_norm = true, .n_weights = 11};
    case NG_NORM_LNS:
      return (ng_block_layout){.input_norm = true, .depth_scaled = true, .n_weights = 11};
  }
  NG_ASSERT(!"ng_norm_placement out of range");
  return (ng_block_layout){0};
}

// A parameter named "model.layers.<layer>.<name>", or just <name> for layer -1.
static void add_param(ng_model *m, bool trainable, float **w, float **g, int ndim, int64_t d0,
                      int64_t d1, const char *name, int64_t layer) {
  NG_ASSERT(m->n_params < ng_model_n_weights(&m->cfg));
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
}

// Weight tensors of one block: its placement's, and the two layer scales.
static int block_weights(const ng_model_config *c) {
  return ng_block_layout_of(c->norm_placement).n_weights + (c->layer_scale ? 2 : 0);
}

// Block i's weights, as its placement's layout has them.
static void add_layer_params(ng_model *m, bool trainable, int64_t i) {
  const ng_model_config *c = &m->cfg;
  ng_block_layout lay = ng_block_layout_of(c->norm_placement);
  int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
  int64_t Hd = c->num_attention_heads * hd, KVd = c->num_key_value_heads * hd;
  ng_layer *w = &m->w.layers[i], *g = &m->g.layers[i];
  int first = m->n_params;
  if (lay.input_norm)
    add_param(m, trainable, &w->input_layernorm, &g->input_layernorm, 1, D, 0,
              "input_layernorm.weight", i);
  add_param(m, trainable, &w->q_proj, &g->q_proj, 2, Hd, D, "self_attn.q_proj.weight", i);
  add_param(m, trainable, &w->k_proj, &g->k_proj, 2, KVd, D, "self_attn.k_proj.weight", i);
  add_param(m, trainable, &w->v_proj, &g->v_proj, 2, KVd, D, "self_attn.v_proj.weight", i);
  add_param(m, trainable, &w->o_proj, &g->o_proj, 2, D, Hd, "self_attn.o_proj.weight", i);
  if (c->layer_scale)
    add_param(m, trainable, &w->attn_layer_scale, &g->attn_layer_scale, 1, D, 0,
              "self_attn.layer_scale", i);
  add_param(m, trainable, &w->q_norm, &g->q_norm, 1, hd, 0, "self_attn.q_norm.weight", i);
  add_param(m, trainable, &w->k_norm, &g->k_norm, 1, hd, 0, "self_attn.k_norm.weight", i);
  add_param(m, trainable, &w->post_attention_layernorm, &g->post_attention_layernorm, 1, D, 0,
            "post_attention_layernorm.weight", i);
  if (lay.output_norm)
    add_param(m, trainable, &w->post_feedforward_layernorm, &g->post_feedforward_layernorm, 1,
              D, 0, "post_feedforward_layernorm.weight", i);
  add_param(m, trainable, &w->gate_proj, &g->gate_proj, 2, F, D, "mlp.gate_proj.weight", i);
  add_param(m, trainable, &w->up_proj, &g->up_proj, 2, F, D, "mlp.up_proj.weight", i);
  add_param(m, trainable, &w->down_proj, &g->down_proj, 2, D, F, "mlp.down_proj.weight", i);
  if (c->layer_scale)
    add_param(m, trainable, &w->mlp_layer_scale, &g->mlp_layer_scale, 1, D, 0, "mlp.layer_scale",
              i);
  NG_ASSERT(m->n_params - first == block_weights(c) && block_weights(c) <= NG_BLOCK_MAX_WEIGHTS);
}

int64_t ng_model_n_weights(const ng_model_config *c) {
  int64_t block = block_weights(c);
  return block * c->num_hidden_layers + 1 + c->final_norm + !c->tie_word_embeddings;
}

ng_model *ng_model_create(ng_backend *be, const ng_model_config *cfg, bool trainable) {
  ng_model *m = ng_xcalloc(1, sizeof *m);
  m->cfg = *cfg;
  m->be = be;
  int64_t L = cfg->num_hidden_layers, V = cfg->vocab_size, D = cfg->hidden_size;
  m->params = ng_xcalloc((size_t)ng_model_n_weights(cfg), sizeof(ng_param));
  m->w.layers = ng_xcalloc((size_t)L, sizeof(ng_layer));
  m->g.layers = ng_xcalloc((size_t)L, sizeof(ng_layer));
  m->gate = ng_xmalloc((size_t)L * sizeof(float));
  for (int64_t i = 0; i < L; i++) m->gate[i] = 1.0f;
  m->widened = -1;
  add_param(m, trainable, &m->w.embed_tokens, &m->g.embed_tokens, 2, V, D,
            "model.embed_tokens.weight", -1);
  for (int64_t i = 0; i < L; i++) add_layer_params(m, trainable, i);
  if (cfg->final_norm)
    add_param(m, trainable, &m->w.norm, &m->g.norm, 1, D, 0, "model.norm.weight", -1);
  if (!cfg->tie_word_embeddings)
    add_param(m, trainable, &m->w.lm_head, &m->g.lm_head, 2, V, D, "lm_head.weight", -1);
  NG_ASSERT(m->n_params == ng_model_n_weights(cfg));
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
    m->be->free(m->be, p->grad);
  }
  if (m->be) m->be->free(m->be, m->block_scratch);
  free(m->params);
  free(m->w.layers);
  free(m->g.layers);
  free(m->gate);
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

bool ng_param_is_layer_scale(const ng_model *m, const ng_param *p) {
  if (p->layer < 0) return false;
  const ng_layer *w = &m->w.layers[p->layer];
  return p->data_view == &w->attn_layer_scale || p->data_view == &w->mlp_layer_scale;
}

// Matrices N(0, std^2), norm gains 1, layer scales cfg.layer_scale_init.
static void init_param(ng_model *m, const ng_param *p, ng_rng *r, double std) {
  float *host = ng_xmalloc(p->numel * sizeof(float));
  if (p->ndim == 1) {
    float v = ng_param_is_layer_scale(m, p) ? (float)m->cfg.layer_scale_init : 1.0f;
    for (size_t j = 0; j < p->numel; j++) host[j] = v;
  } else {
    ng_rng_fill_normal(r, host, p->numel, 0.0, std);
  }
  m->be->upload(m->be, p->data, host, p->numel * sizeof(float));
  free(host);
}

void ng_model_init_random(ng_model *m, ng_rng *r, double std) {
  for (int i = 0; i < m->n_params; i++) init_param(m, &m->params[i], r, std);
}

// Name of p with its block index replaced by `layer` ("model.layers.<layer>.<rest>").
static void name_at_layer(const ng_param *p, int64_t layer, char *out, size_t n) {
  const char *rest = strchr(p->name + strlen("model.layers."), '.');
  snprintf(out, n, "model.layers.%lld%s", (long long)layer, rest);
}

const ng_param *ng_model_find_in_layer(const ng_model *m, const ng_param *p, int64_t layer) {
  if (p->layer < 0) return ng_model_find(m, p->name);
  char name[128];
  name_at_layer(p, layer, name, sizeof name);
  return ng_model_find(m, name);
}

int ng_model_copy_block(ng_model *dst, int64_t dl, const ng_model *src, int64_t sl) {
  for (int i = 0; i < dst->n_params; i++) {
    const ng_param *p = &dst->params[i];
    if (p->layer != dl) continue;
    const ng_param *q = ng_model_find_in_layer(src, p, sl);
    if (!q) continue;  // e.g. post_feedforward_layernorm from a Pre-Norm source: keeps its init
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
  m->be->free(m->be, p->data);
  p->data = *p->data_view = at;
  free(host);
  free(bits);
}

bool ng_model_hold_bf16(ng_model *m) {
  for (int i = 0; i < m->n_params; i++) NG_ASSERT(!m->params[i].grad);
  if (m->block_scratch || !blocks_are_bf16(m)) return m->block_scratch != NULL;
  size_t block = 0;  // floats of one block: every block has the same parameters
  for (int i = 0; i < m->n_params; i++) block += m->params[i].layer == 0 ? m->params[i].numel : 0;
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

static void block_acts_alloc(const ng_model *m, int64_t B, int64_t T, ng_block_acts *s) {
  const ng_model_config *c = &m->cfg;
  ng_backend *be = m->be;
  int64_t N = B * T, D = c->hidden_size, F = c->intermediate_size;
  int64_t H = c->num_attention_heads, KV = c->num_key_value_heads, hd = c->head_dim;
  ng_block_layout lay = ng_block_layout_of(c->norm_placement);
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
  s->res1 = buf(be, N * D);
  s->mlp_in = buf(be, N * D);
  s->rstd_pa = buf(be, N);
  s->gate = buf(be, N * F);
  s->up = buf(be, N * F);
  s->act = buf(be, N * F);
  if (lay.output_norm) {
    s->res2 = buf(be, N * D);
    s->rstd_pf = buf(be, N);
  }
  if (c->layer_scale) {
    s->attn_out = buf(be, N * D);
    s->mlp_out = buf(be, N * D);
  }
}

static void block_acts_free(ng_backend *be, ng_block_acts *s) {
  float *all[] = {s->att_in, s->rstd_in, s->q,    s->k,    s->v,      s->rstd_q,
                  s->rstd_k, s->qr,      s->kr,   s->att,  s->lse,    s->res1,
                  s->mlp_in, s->rstd_pa, s->gate, s->up,   s->act,    s->res2, s->rstd_pf,
                  s->attn_out, s->mlp_out};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
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
  w->dgated = buf(be, N * D);
  w->dlogits = buf(be, chunk * c->vocab_size);
  if (c->layer_scale) w->dbranch = buf(be, N * D);
}

static void grad_ws_free(ng_backend *be, ng_grad_ws *w) {
  float *all[] = {w->dh[0], w->dh[1], w->dres2, w->dres1, w->dmlp_in, w->datt_in,
                  w->dgate, w->dup,   w->dact,  w->datt,  w->dq,      w->dk,
                  w->dv,    w->dq_raw, w->dk_raw, w->dfinal, w->dgated, w->dlogits, w->dbranch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
}

ng_acts *ng_acts_create_with(const ng_model *m, int64_t B, int64_t T, const ng_acts_options *o) {
  const ng_model_config *c = &m->cfg;
  NG_ASSERT(!o->recompute || o->train);
  ng_acts *a = ng_xcalloc(1, sizeof *a);
  a->B = B;
  a->T = T;
  a->N = B * T;
  a->train = o->train;
  a->recompute = o->recompute;
  a->chunk = o->chunk > 0 && o->chunk < a->N ? o->chunk : a->N;
  a->n_hidden = a->train ? (int)c->num_hidden_layers + 1 : 2;
  a->hidden = ng_xcalloc((size_t)a->n_hidden, sizeof(float *));
  for (int i = 0; i < a->n_hidden; i++) a->hidden[i] = buf(m->be, a->N * c->hidden_size);
  a->n_blocks = a->train && !a->recompute ? (int)c->num_hidden_layers : 1;
  a->blocks = ng_xcalloc((size_t)a->n_blocks, sizeof(ng_block_acts));
  for (int i = 0; i < a->n_blocks; i++) block_acts_alloc(m, B, T, &a->blocks[i]);
  if (c->final_norm) {
    a->final_in = buf(m->be, a->N * c->hidden_size);
    a->rstd_final = buf(m->be, a->N);
  }
  a->logits = buf(m->be, a->chunk * c->vocab_size);
  if (a->train) grad_ws_alloc(m, a->N, a->chunk, &a->ws);
  return a;
}

ng_acts *ng_acts_create(const ng_model *m, int64_t B, int64_t T, bool train) {
  ng_acts_options o = {.train = train};
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
  be->free(be, a->logits);
  grad_ws_free(be, &a->ws);  // NULL buffers (no workspace) are no-ops
  free(a->hidden);
  free(a->blocks);
  free(a);
}

float *ng_acts_hidden(const ng_acts *a, int64_t l) {
  return a->train ? a->hidden[l] : a->hidden[l % 2];
}

// ---------------------------------------------------------------- linear layers

// y [N, out] = x [N, in] W^T, W [out, in]
static void linear_forward(ng_backend *be, const float *x, const float *W, int64_t N,
                           int64_t in, int64_t out, float *y) {
  be->matmul(be, false, true, N, out, in, x, W, 0.0f, y);
}

// dW [out, in] += dy^T x (skipped when dW is NULL: frozen);
// dx [N, in] = dy W + beta_dx * dx.
static void linear_backward(ng_backend *be, const float *x, const float *W, const float *dy,
                            int64_t N, int64_t in, int64_t out, float beta_dx, float *dx,
                            float *dW) {
  if (dW) be->matmul(be, true, false, out, in, N, dy, x, 1.0f, dW);
  be->matmul(be, false, false, N, in, out, dy, W, beta_dx, dx);
}

// ---------------------------------------------------------------- block forward

static ng_attn_shape attn_shape(const ng_model *m, const ng_acts *a) {
  return (ng_attn_shape){a->B, a->T, m->cfg.num_attention_heads,
                         m->cfg.num_key_value_heads, m->cfg.head_dim};
}

// att_in [N, D] -> s->att [N, H*hd]: projections, q_norm/k_norm, rotary, attention.
static void attention_forward(ng_model *m, const ng_acts *a, const ng_layer *w,
                              const float *att_in, ng_block_acts *s) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  ng_attn_shape as = attn_shape(m, a);
  int64_t N = a->N, D = c->hidden_size, hd = as.hd;
  float eps = (float)c->rms_norm_eps;
  linear_forward(be, att_in, w->q_proj, N, D, as.H * hd, s->q);   // q [N, H*hd]
  linear_forward(be, att_in, w->k_proj, N, D, as.KV * hd, s->k);  // k [N, KV*hd]
  linear_forward(be, att_in, w->v_proj, N, D, as.KV * hd, s->v);  // v [N, KV*hd]
  be->rmsnorm_forward(be, s->q, w->q_norm, N * as.H, hd, eps, s->qr, s->rstd_q);  // per head
  be->rmsnorm_forward(be, s->k, w->k_norm, N * as.KV, hd, eps, s->kr, s->rstd_k);
  be->rope_forward(be, s->qr, as.B, as.T, as.H, hd, c->rope_theta);   // qr [B, T, H, hd]
  be->rope_forward(be, s->kr, as.B, as.T, as.KV, hd, c->rope_theta);  // kr [B, T, KV, hd]
  be->attention_forward(be, as, s->qr, s->kr, s->v, s->att, s->lse);  // att [N, H*hd]
}

// The factor on block l's (0-based) norm outputs: 1/sqrt(l + 1) when depth-scaled (lns), else 1.
static float norm_scale(ng_block_layout lay, int64_t l) {
  return lay.depth_scaled ? (float)(1.0 / sqrt((double)(l + 1))) : 1.0f;
}

// With layer_scale: y [N, D] = gamma [D] * y, the sublayer's output y saved
// into saved [N, D] first; without, nothing.
static void layer_scale_forward(ng_model *m, const ng_acts *a, const float *gamma, float *y,
                                float *saved) {
  if (!m->cfg.layer_scale) return;
  int64_t N = a->N, D = m->cfg.hidden_size;
  m->be->copy(m->be, saved, y, (size_t)N * D * sizeof(float));
  m->be->channel_scale_forward(m->be, saved, gamma, N, D, y);
}

// With layer_scale: d of the sublayer's output [N, D] into ws->dbranch, given dy
// [N, D] of the scaled output, and dgamma [D] += sum over rows of dy * saved;
// returns ws->dbranch. Without: dy itself.
static const float *layer_scale_backward(ng_model *m, const ng_acts *a, const float *gamma,
                                         const float *saved, const float *dy, float *dgamma) {
  if (!m->cfg.layer_scale) return dy;
  m->be->channel_scale_backward(m->be, saved, gamma, dy, a->N, m->cfg.hidden_size,
                                a->ws.dbranch, dgamma);
  return a->ws.dbranch;
}

// x [N, D] -> out [N, D], saving into s (see model.h for the placements).
static void block_forward(ng_model *m, const ng_acts *a, int64_t l, const float *x, float *out,
                          ng_block_acts *s) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  const ng_layer *w = &m->w.layers[l];
  ng_block_layout lay = ng_block_layout_of(c->norm_placement);
  int64_t N = a->N, D = c->hidden_size, F = c->intermediate_size;
  int64_t Hd = c->num_attention_heads * c->head_dim;
  float eps = (float)c->rms_norm_eps;
  float c_l = norm_scale(lay, l);
  if (lay.input_norm) {
    be->rmsnorm_forward(be, x, w->input_layernorm, N, D, eps, s->att_in, s->rstd_in);
    if (c_l != 1.0f) be->scale(be, s->att_in, c_l, N * D, s->att_in);  // lns
  }
  attention_forward(m, a, w, lay.input_norm ? s->att_in : x, s);
  linear_forward(be, s->att, w->o_proj, N, Hd, D, s->res1);       // o [N, D]
  layer_scale_forward(m, a, w->attn_layer_scale, s->res1, s->attn_out);  // o = gamma_attn o
  be->add(be, x, s->res1, N * D, s->res1);                         // res1 = x + o
  be->rmsnorm_forward(be, s->res1, w->post_attention_layernorm, N, D, eps, s->mlp_in, s->rstd_pa);
  if (c_l != 1.0f) be->scale(be, s->mlp_in, c_l, N * D, s->mlp_in);  // lns
  linear_forward(be, s->mlp_in, w->gate_proj, N, D, F, s->gate);  // gate [N, F]
  linear_forward(be, s->mlp_in, w->up_proj, N, D, F, s->up);      // up [N, F]
  be->swiglu_forward(be, s->gate, s->up, N * F, s->act);          // act [N, F]
  linear_forward(be, s->act, w->down_proj, N, F, D, out);         // mlp [N, D]
  layer_scale_forward(m, a, w->mlp_layer_scale, out, s->mlp_out);  // mlp = gamma_mlp mlp
  if (lay.output_norm) {
    be->add(be, s->mlp_in, out, N * D, s->res2);                   // res2 = mlp_in + mlp
    be->rmsnorm_forward(be, s->res2, w->post_feedforward_layernorm, N, D, eps, out, s->rstd_pf);
  } else {
    be->add(be, s->res1, out, N * D, out);                         // y = res2 = res1 + mlp
  }
}

// The head's input [N, D]: the final norm's output, or the last hidden state.
static float *head_input(const ng_model *m, const ng_acts *a) {
  return m->cfg.final_norm ? a->final_in : ng_acts_hidden(a, m->cfg.num_hidden_layers);
}

static const float *head_weight(const ng_model *m) {
  return m->cfg.tie_word_embeddings ? m->w.embed_tokens : m->w.lm_head;
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
  linear_forward(m->be, head_input(m, a) + row0 * D, head_weight(m), rows, D, m->cfg.vocab_size,
                 a->logits);
}

// The block with its sublayers zeroed: with an output norm (post) res1 = x,
// mlp_in = N_pa(x), y = N_pf(mlp_in); else (pre) y = x.
static void block_forward_norms(ng_model *m, const ng_acts *a, int64_t l, const float *x,
                                float *out, ng_block_acts *s) {
  ng_backend *be = m->be;
  const ng_layer *w = &m->w.layers[l];
  int64_t N = a->N, D = m->cfg.hidden_size;
  float eps = (float)m->cfg.rms_norm_eps;
  if (!ng_block_layout_of(m->cfg.norm_placement).output_norm) {
    be->copy(be, out, x, (size_t)N * D * sizeof(float));
    return;
  }
  be->rmsnorm_forward(be, x, w->post_attention_layernorm, N, D, eps, s->mlp_in, s->rstd_pa);
  be->rmsnorm_forward(be, s->mlp_in, w->post_feedforward_layernorm, N, D, eps, out, s->rstd_pf);
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
      if (m->gate[l] != 1.0f) be->lerp(be, x, out, m->gate[l], a->N * D, out);  // growth gate
      break;
  }
}

void ng_model_forward(ng_model *m, ng_acts *a, const int32_t *tokens,
                      const ng_block_mode *modes) {
  ng_backend *be = m->be;
  int64_t L = m->cfg.num_hidden_layers, D = m->cfg.hidden_size;
  be->embedding_forward(be, tokens, m->w.embed_tokens, a->N, D, ng_acts_hidden(a, 0));
  for (int64_t l = 0; l < L; l++) {
    ng_block_mode mode = modes ? modes[l] : NG_BLOCK_RUN;
    NG_ASSERT(mode == NG_BLOCK_RUN || !a->train);
    forward_block(m, a, l, mode);
    if (a->on_block) a->on_block(a->on_block_ctx, a, l, saved(a, l));
  }
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
  linear_backward(be, att_in, w->q_proj, ws->dq_raw, N, D, Hd, 0.0f, ws->datt_in, g->q_proj);
  linear_backward(be, att_in, w->k_proj, ws->dk_raw, N, D, KVd, 1.0f, ws->datt_in, g->k_proj);
  linear_backward(be, att_in, w->v_proj, ws->dv, N, D, KVd, 1.0f, ws->datt_in, g->v_proj);
}

// dy [N, D] -> dx [N, D] (written) for block l with input x.
static void block_backward(ng_model *m, const ng_acts *a, int64_t l, const float *x,
                           const float *dy, float *dx) {
  ng_backend *be = m->be;
  const ng_model_config *c = &m->cfg;
  const ng_layer *w = &m->w.layers[l], *g = &m->g.layers[l];
  const ng_block_acts *s = saved(a, l);
  ng_grad_ws *ws = (ng_grad_ws *)&a->ws;
  ng_block_layout lay = ng_block_layout_of(c->norm_placement);
  int64_t N = a->N, D = c->hidden_size, F = c->intermediate_size;
  int64_t Hd = c->num_attention_heads * c->head_dim;
  size_t nd = (size_t)N * D * sizeof(float);
  const float *dres2 = dy;
  if (lay.output_norm) {
    be->zero(be, ws->dres2, nd);
    be->rmsnorm_backward(be, s->res2, w->post_feedforward_layernorm, s->rstd_pf, dy, N, D,
                         ws->dres2, g->post_feedforward_layernorm);
    dres2 = ws->dres2;
  }
  // res2 = (output_norm ? mlp_in : res1) + gamma_mlp down(act)
  const float *dmlp_out = layer_scale_backward(m, a, w->mlp_layer_scale, s->mlp_out, dres2,
                                               g->mlp_layer_scale);
  linear_backward(be, s->act, w->down_proj, dmlp_out, N, F, D, 0.0f, ws->dact, g->down_proj);
  be->swiglu_backward(be, s->gate, s->up, ws->dact, N * F, ws->dgate, ws->dup);
  linear_backward(be, s->mlp_in, w->gate_proj, ws->dgate, N, D, F, 0.0f, ws->dmlp_in, g->gate_proj);
  linear_backward(be, s->mlp_in, w->up_proj, ws->dup, N, D, F, 1.0f, ws->dmlp_in, g->up_proj);
  if (lay.output_norm) {
    be->add(be, ws->dmlp_in, dres2, N * D, ws->dmlp_in);
    be->zero(be, ws->dres1, nd);
  } else {
    be->copy(be, ws->dres1, dres2, nd);
  }
  // mlp_in = N_pa(res1) c; res1 = x + gamma_attn o_proj(att)
  float c_l = norm_scale(lay, l);
  if (c_l != 1.0f) be->scale(be, ws->dmlp_in, c_l, N * D, ws->dmlp_in);  // lns
  be->rmsnorm_backward(be, s->res1, w->post_attention_layernorm, s->rstd_pa, ws->dmlp_in, N, D,
                       ws->dres1, g->post_attention_layernorm);
  const float *dattn_out = layer_scale_backward(m, a, w->attn_layer_scale, s->attn_out,
                                                ws->dres1, g->attn_layer_scale);
  linear_backward(be, s->att, w->o_proj, dattn_out, N, Hd, D, 0.0f, ws->datt, g->o_proj);
  attention_backward(m, a, l, lay.input_norm ? s->att_in : x, s, ws);
  be->copy(be, dx, ws->dres1, nd);
  if (lay.input_norm) {
    if (c_l != 1.0f) be->scale(be, ws->datt_in, c_l, N * D, ws->datt_in);  // lns
    be->rmsnorm_backward(be, x, w->input_layernorm, s->rstd_in, ws->datt_in, N, D, dx,
                         g->input_layernorm);
  } else {
    be->add(be, dx, ws->datt_in, N * D, dx);
  }
}

// dlogits [rows, V] of rows [row0, row0 + rows) -> their dfinal [rows, D]
// (written); d head weight [V, D] += dlogits^T head input rows.
static void head_backward(ng_model *m, ng_acts *a, int64_t row0, int64_t rows) {
  const ng_model_config *c = &m->cfg;
  int64_t D = c->hidden_size;
  float *dhead = c->tie_word_embeddings ? m->g.embed_tokens : m->g.lm_head;
  linear_backward(m->be, head_input(m, a) + row0 * D, head_weight(m), a->ws.dlogits, rows, D,
                  c->vocab_size, 0.0f, a->ws.dfinal + row0 * D, dhead);
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

void ng_model_loss(ng_model *m, ng_acts *a, const ng_loss_teacher *t, const int32_t *targets,
                   ng_loss_params lp, bool grad, double *ce, double *kd, int64_t *n_valid) {
  NG_ASSERT(!grad || a->train);
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
                     t->topk_lse + row0, t->k, targets + row0, rows, V, lp, dlogits, &c_ce,
                     &c_kd, &nv);
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

// y = (1 - g) x + g Block(x): dx = (1 - g) dy + Block'(g dy), through dgated.
static void gated_block_backward(ng_model *m, const ng_acts *a, int64_t l, const float *x,
                                 const float *dy, float *dx) {
  ng_backend *be = m->be;
  float g = m->gate[l];
  int64_t n = a->N * m->cfg.hidden_size;
  if (g == 1.0f) {
    block_backward(m, a, l, x, dy, dx);
    return;
  }
  be->scale(be, dy, g, n, a->ws.dgated);
  block_backward(m, a, l, x, a->ws.dgated, dx);
  be->scale(be, dy, 1.0f - g, n, a->ws.dgated);
  be->add(be, dx, a->ws.dgated, n, dx);
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
  NG_ASSERT(a->train);
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
