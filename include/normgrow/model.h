// normgrow: the Qwen3 decoder, written once against the backend op table: the
// frozen teacher (forward only) and the trainable student, with each block's
// norms placed before its sublayers (Pre-Norm, Qwen3's own) or after the
// residual add (Post-Norm).
//
//   pre:  a = x + Attn(N_in(x));  y = a + MLP(N_pa(a))
//   post: a = N_pa(x + Attn(x));  y = N_pf(a + MLP(a))
//
// Both are computed by one code path with these saved values:
//   att_in = pre ? N_in(x) : x;   res1 = x + o_proj(Attn(att_in));
//   mlp_in = N_pa(res1);          res2 = (pre ? res1 : mlp_in) + MLP(mlp_in);
//   y = pre ? res2 : N_pf(res2).
// res1 and res2 are the residual sums x + F(x) before any norm.
#ifndef NORMGROW_MODEL_H
#define NORMGROW_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/backend.h"
#include "normgrow/config.h"
#include "normgrow/rng.h"
#include "normgrow/safetensors.h"

// Weights (or their gradients) of one decoder block, Hugging Face names.
typedef struct {
  float *input_layernorm;             // [D]        pre only
  float *q_proj, *k_proj, *v_proj;    // [H*hd, D], [KV*hd, D], [KV*hd, D]
  float *o_proj;                      // [D, H*hd]
  float *q_norm, *k_norm;             // [hd]
  float *post_attention_layernorm;    // [D]
  float *post_feedforward_layernorm;  // [D]        post only
  float *gate_proj, *up_proj;         // [F, D]
  float *down_proj;                   // [D, F]
} ng_layer;

typedef struct {
  float *embed_tokens;  // [V, D]
  ng_layer *layers;     // [L]
  float *norm;          // [D] when final_norm
  float *lm_head;       // [V, D] when not tied
} ng_weights;

typedef struct {
  char name[96];        // Hugging Face name, e.g. "model.layers.0.mlp.up_proj.weight"
  int ndim;
  int64_t shape[2];
  size_t numel;
  float *data;          // backend buffer
  float *grad;          // backend buffer, NULL for a model without gradients
  bool frozen;          // no gradient accumulated, no optimizer update
  int64_t layer;        // block index, or -1 for embeddings, final norm and head
  float **grad_view;    // the field of ng_model.g that shows `grad` (NULL while frozen)
} ng_param;

typedef struct {
  ng_model_config cfg;
  ng_backend *be;
  int n_params;
  ng_param *params;     // embed, layers in order, norm, lm_head
  ng_weights w, g;      // typed views of params[].data and params[].grad
  float *gate;          // host [L]: block l computes y = (1 - g) x + g Block(x); 1 = plain
} ng_model;

// How a block runs in a forward (block-removal ablations).
typedef enum {
  NG_BLOCK_RUN = 0,
  NG_BLOCK_SKIP,    // the identity: the block with its norms skipped
  NG_BLOCK_NORMS,   // sublayers zeroed, norms kept: pre = identity, post y = N_pf(N_pa(x))
} ng_block_mode;

// Saved values of one block's forward (see the top of this file).
typedef struct {
  float *att_in, *rstd_in;       // [N, D], [N]      pre only
  float *q, *k, *v;              // [N, H*hd], [N, KV*hd] x 2: raw projections
  float *rstd_q, *rstd_k;        // [N*H], [N*KV]
  float *qr, *kr;                // q, k after q_norm/k_norm and rotary
  float *att, *lse;              // [N, H*hd], [B, H, T]
  float *res1, *mlp_in, *rstd_pa;  // [N, D], [N, D], [N]
  float *gate, *up, *act;        // [N, F] x 3: act = silu(gate) * up
  float *res2, *rstd_pf;         // [N, D], [N]      post only (pre: res2 is the output)
} ng_block_acts;

// Backward scratch, shared by all blocks.
typedef struct {
  float *dh[2];                  // [N, D] ping-pong residual gradient
  float *dres2, *dres1, *dmlp_in, *datt_in;  // [N, D]
  float *dgate, *dup, *dact;     // [N, F]
  float *datt, *dq, *dk, *dv;    // [N, H*hd], [N, H*hd], [N, KV*hd] x 2
  float *dq_raw, *dk_raw;        // [N, H*hd], [N, KV*hd]
  float *dfinal, *dgated;        // [N, D]
  float *dlogits;                // [N, V]
} ng_grad_ws;

// Activations of one forward at batch shape [B, T]. With `train`, every
// block's values are kept for the backward; without (teacher, evaluation),
// one block's scratch is reused by all blocks and only two hidden buffers exist.
typedef struct {
  int64_t B, T, N;
  bool train;
  int n_hidden;          // L + 1 when training, else 2
  float **hidden;        // residual stream [N, D] (use ng_acts_hidden)
  int n_blocks;
  ng_block_acts *blocks;
  float *final_in, *rstd_final;  // [N, D] head input (normed if final_norm), [N]
  float *logits;         // [N, V]
  ng_grad_ws ws;         // train only (zeroed for ng_acts_create_kept)
} ng_acts;

// The number of weight tensors of a model of config c: 11 per block, the
// embeddings, and the final norm and untied head when it has them.
int64_t ng_model_n_weights(const ng_model_config *c);
// Allocate a model with zeroed weights (and zeroed gradients if `trainable`).
// With be == NULL, a skeleton: parameter names and shapes, no buffers.
ng_model *ng_model_create(ng_backend *be, const ng_model_config *cfg, bool trainable);
// Check, before anything is allocated, that `f` holds every weight of cfg as
// "<prefix><HF name>" with its exact shape and a floating-point dtype (a file
// with fewer tensors than cfg has weights is refused before the names are made).
int ng_model_check_file(const ng_model_config *cfg, const ng_st_file *f, const char *prefix);
void ng_model_free(ng_model *m);
const ng_param *ng_model_find(const ng_model *m, const char *name);
// Load every weight from `f` as "<prefix><HF name>"; shapes checked, F32/BF16/F16 accepted.
int ng_model_load(ng_model *m, const ng_st_file *f, const char *prefix);
// Matrices N(0, std^2), norm gains 1, drawn in parameter order.
void ng_model_init_random(ng_model *m, ng_rng *r, double std);
void ng_model_zero_grad(ng_model *m);
// Random init of one block only (as ng_model_init_random).
void ng_model_init_block(ng_model *m, int64_t layer, ng_rng *r, double std);
// The parameter of m that plays p's role in block `layer` (p's own name for
// non-block parameters); NULL if m has none (e.g. a norm of the other placement).
const ng_param *ng_model_find_in_layer(const ng_model *m, const ng_param *p, int64_t layer);
// Copy block sl of src into block dl of dst (same backend), by role; tensors
// only one of them has (norms of the other placement) are left alone.
int ng_model_copy_block(ng_model *dst, int64_t dl, const ng_model *src, int64_t sl);
// Copy embeddings, final norm and head (a tied source's embedding serves as head).
int ng_model_copy_io(ng_model *dst, const ng_model *src);
// Matmul parameters (all 2-D weights; the embedding only when it is the tied
// head), optionally only the trainable ones: the "params" of 6 x params x tokens.
double ng_model_matmul_params(const ng_model *m, bool trainable_only);
// Forward FLOPs of causal attention: 4 hd H T(T+1)/2 per sequence and layer.
double ng_attention_flops(const ng_model_config *c, int64_t B, int64_t T);
// Freeze (or unfreeze) every parameter of block `layer` (-1: embeddings, final
// norm and head). Frozen parameters get no gradient and no update.
void ng_model_freeze(ng_model *m, int64_t layer, bool frozen);

ng_acts *ng_acts_create(const ng_model *m, int64_t B, int64_t T, bool train);
// Every block's values kept (as with `train`), but no backward workspace: for
// looking inside a forward (diagnostics), not for training.
ng_acts *ng_acts_create_kept(const ng_model *m, int64_t B, int64_t T);
void ng_acts_free(const ng_model *m, ng_acts *a);
// Residual stream after block l (l = 0: embedding output). In a forward without
// `train`, only the latest one is still there.
float *ng_acts_hidden(const ng_acts *a, int64_t l);

// Forward of tokens [B*T] (backend buffer) to a->logits. modes (host, [L], may
// be NULL = all NG_BLOCK_RUN) selects block-removal ablations (no `train`).
void ng_model_forward(ng_model *m, ng_acts *a, const int32_t *tokens,
                      const ng_block_mode *modes);
// Backward from a->ws.dlogits: accumulates d loss / d param into the gradients.
void ng_model_backward(ng_model *m, ng_acts *a, const int32_t *tokens);

#endif
