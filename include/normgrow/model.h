// normgrow: the Qwen3 decoder, written once against the backend op table: the
// frozen teacher (forward only) and the trainable student, with each block's
// norms placed as its placement says (docs/golden-contract.md):
//
//   pre:      a = x + Attn(N_in(x));             y = a + MLP(N_pa(a))
//   post:     a = N_pa(x + Attn(x));             y = N_pf(a + MLP(a))
//   lns:      pre with N_in's and N_pa's outputs divided by sqrt(l), l = 1..L the
//             block's position in the current stack (LayerNorm-Scaling)
//   sandwich: a = x + N_pa(Attn(N_in(x)));       y = a + N_pf(MLP(N_ff(a)))
//             (Peri-LN; N_ff = pre_feedforward_layernorm)
//   deepnorm: a = N_pa(alpha x + Attn(x));       y = N_pf(alpha a + MLP(a))
//   mixln:    blocks l <= mixln_post_layers are post blocks, the others pre
//   hybrid:   block l is a pre or a post block as layer_placements[l - 1] says
//
// Every block is computed by one code path, driven by its layout
// (ng_block_layout_of: which norms it has, its norm scale c and residual
// scale alpha), with these saved values:
//   att_in  = input_norm ? N_in(x) c : x;       att_out = o_proj(Attn(att_in));
//   res1    = alpha x + (sublayer_norms ? N_pa(att_out) : att_out);
//   mlp_in  = N_mi(res1) c;                      mlp_out = MLP(mlp_in);
//   res2    = alpha (output_norm ? mlp_in : res1) + (sublayer_norms ? N_pf(mlp_out) : mlp_out);
//   y       = output_norm ? N_pf(res2) : res2,
// N_mi being pre_feedforward_layernorm with sublayer norms, else
// post_attention_layernorm. res1 and res2 are the residual sums before any norm.
//
// With model.layer_scale_init (LayerScale) each sublayer's branch term is scaled
// per channel as it enters its residual sum, by the block's learnable
// gamma_attn [D] (self_attn.layer_scale) and gamma_mlp [D] (mlp.layer_scale):
//   res1 = alpha x + gamma_attn (sublayer_norms ? N_pa(att_out) : att_out);
//   res2 = alpha (...) + gamma_mlp (sublayer_norms ? N_pf(mlp_out) : mlp_out),
// saving the unscaled branch terms as att_branch and mlp_branch. So for pre and
// lns: a = x + gamma_attn Attn(N_in(x)); y = a + gamma_mlp MLP(N_pa(a)); for
// sandwich the scale is on the normed sublayer output: a = x + gamma_attn
// N_pa(Attn(N_in(x))); for post, deepnorm and mixln's and hybrid's post blocks the scaled
// branch is added before the output norm: a = N_pa(alpha x + gamma_attn Attn(x)).
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
  float *input_layernorm;             // [D]        with an input norm
  float *q_proj, *k_proj, *v_proj;    // [H*hd, D], [KV*hd, D], [KV*hd, D]
  float *o_proj;                      // [D, H*hd]
  float *q_norm, *k_norm;             // [hd]
  float *post_attention_layernorm;    // [D]
  float *pre_feedforward_layernorm;   // [D]        sandwich only
  float *post_feedforward_layernorm;  // [D]        with an output or sublayer norms
  float *gate_proj, *up_proj;         // [F, D]
  float *down_proj;                   // [D, F]
  float *attn_layer_scale;            // [D]        self_attn.layer_scale, with layer_scale
  float *mlp_layer_scale;             // [D]        mlp.layer_scale, with layer_scale
} ng_layer;

typedef struct {
  float *embed_tokens;  // [V, D]
  ng_layer *layers;     // [L]
  float *norm;          // [D] when final_norm
  float *lm_head;       // [V, D] when not tied
} ng_weights;

// What a block tensor computes, whatever its name in its placement: a block
// copied into one of another placement maps tensors by role (Qwen3's
// post_attention_layernorm, the norm before the MLP, is sandwich's
// pre_feedforward_layernorm). NG_ROLE_NONE: not a block tensor.
typedef enum {
  NG_ROLE_NONE = 0,
  NG_ROLE_INPUT_NORM,     // on the attention input (input_layernorm)
  NG_ROLE_Q, NG_ROLE_K, NG_ROLE_V, NG_ROLE_O, NG_ROLE_Q_NORM, NG_ROLE_K_NORM,
  NG_ROLE_ATT_OUT_NORM,   // on the attention output (sandwich's post_attention_layernorm)
  NG_ROLE_MLP_IN_NORM,    // on res1, feeding the MLP (post_attention_layernorm; sandwich's
                          // pre_feedforward_layernorm)
  NG_ROLE_MLP_OUT_NORM,   // on the MLP output (sandwich's post_feedforward_layernorm)
  NG_ROLE_OUTPUT_NORM,    // on res2, the block output (post's post_feedforward_layernorm)
  NG_ROLE_GATE, NG_ROLE_UP, NG_ROLE_DOWN,
  NG_ROLE_ATT_SCALE,      // gamma_attn (self_attn.layer_scale), with layer_scale
  NG_ROLE_MLP_SCALE,      // gamma_mlp (mlp.layer_scale), with layer_scale
} ng_block_role;

typedef struct {
  char name[96];        // Hugging Face name, e.g. "model.layers.0.mlp.up_proj.weight"
  ng_block_role role;   // its role in its block (NG_ROLE_NONE outside blocks)
  int ndim;
  int64_t shape[2];
  size_t numel;
  float *data;          // backend buffer
  float *grad;          // backend buffer, NULL for a model without gradients
  bool frozen;          // no gradient accumulated, no optimizer update
  int64_t layer;        // block index, or -1 for embeddings, final norm and head
  float **grad_view;    // the field of ng_model.g that shows `grad` (NULL while frozen)
  float **data_view;    // the field of ng_model.w that shows `data`
  uint16_t *bf16;       // backend [numel]: a block weight held in bf16 (ng_model_hold_bf16);
                        // `data` is then its place in the model's one-block scratch
  uint16_t *rounded;    // backend [numel]: a matmul weight rounded to bf16 by the linear ops
                        // of a backend that reads bf16 weights (ng_backend.bf16_weights),
                        // filled by each forward; else NULL
} ng_param;

typedef struct {
  ng_model_config cfg;
  ng_backend *be;
  int n_params;         // at most max_params, checked as they are added
  int max_params;       // ng_model_n_weights(&cfg)
  ng_param *params;     // embed, layers in order, norm, lm_head
  ng_weights w, g;      // typed views of params[].data and params[].grad
  float *growth_gate;   // host [L]: block l computes y = (1 - g) x + g Block(x); 1 = plain
  float *block_scratch; // blocks held in bf16: the fp32 weights of one block, else NULL
  int64_t widened;      // the block whose weights block_scratch holds (-1: none)
} ng_model;

// How a block runs in a forward (block-removal ablations).
typedef enum {
  NG_BLOCK_RUN = 0,
  NG_BLOCK_SKIP,    // the identity: the block with its norms skipped
  NG_BLOCK_NORMS,   // sublayers zeroed, norms kept: y = N_pf(alpha N_pa(alpha x)) with
                    // an output norm (post, deepnorm), else the identity
} ng_block_mode;

// Saved values of one block's forward (see the top of this file). A buffer
// the block's layout does not use is NULL.
typedef struct {
  float *att_in, *rstd_in;       // [N, D], [N]      with an input norm
  float *q, *k, *v;              // [N, H*hd], [N, KV*hd] x 2: raw projections
  float *rstd_q, *rstd_k;        // [N*H], [N*KV]
  float *qr, *kr;                // q, k after q_norm/k_norm and rotary
  float *att, *lse;              // [N, H*hd], [B, H, T]
  float *att_out, *rstd_ao;      // [N, D], [N]      with sublayer norms (att_out also
                                 //                  with alpha != 1; else it is in res1)
  float *res1, *mlp_in, *rstd_mi;  // [N, D], [N, D], [N]
  float *gate, *up, *act;        // [N, F] x 3: act = silu(gate) * up
  float *mlp_out, *rstd_mo;      // [N, D], [N]      with sublayer norms
  float *res2, *rstd_out;        // [N, D], [N]      with an output norm (else res2 is y)
  float *att_branch, *mlp_branch;  // [N, D] x 2     layer_scale only: the branch terms
                                   //                before their scales (see above)
  // The linear layers' inputs as the forward rounded them to bf16, read by the
  // backward (ng_linear.x_bf16; training on a backend that reads bf16 weights):
  uint16_t *att_in_bf16, *att_bf16;  // [N, D] (q/k/v's input, att_in or x), [N, H*hd]
  uint16_t *mlp_in_bf16, *act_bf16;  // [N, D], [N, F]
} ng_block_acts;

// Backward scratch, shared by all blocks.
typedef struct {
  float *dh[2];                  // [N, D] ping-pong residual gradient
  float *dres2, *dres1, *dmlp_in, *datt_in;  // [N, D]; dres2 also holds d mlp_out,
                                             // then d att_out, with sublayer norms
  float *dgate, *dup, *dact;     // [N, F]
  float *datt, *dq, *dk, *dv;    // [N, H*hd], [N, H*hd], [N, KV*hd] x 2
  float *dq_raw, *dk_raw;        // [N, H*hd], [N, KV*hd]
  float *dfinal, *dgrowth_gated;  // [N, D]: dfinal = d loss / d head input
  float *dlogits;                // [chunk, V]
  float *dbranch;                // [N, D] layer_scale only: d of a sublayer's branch term
} ng_grad_ws;

typedef struct ng_acts ng_acts;

// Called by ng_model_forward after block l (0-based) has written its output
// ng_acts_hidden(a, l + 1), with the block's saved values s (those of an
// NG_BLOCK_RUN block; block l's input is still ng_acts_hidden(a, l)).
typedef void (*ng_block_hook)(void *ctx, const ng_acts *a, int64_t l, const ng_block_acts *s);

// How a forward's activations are kept.
typedef struct {
  bool for_backward;  // keep what the backward needs, with the backward workspace
  bool recompute;     // (for_backward) keep only each block's input; the backward
                      // recomputes the block's saved values from it (same ops: same bits)
  int64_t chunk;      // rows of the logits buffers: the loss runs over chunks of this
                      // many tokens (ng_model_loss); 0 = all N
} ng_acts_options;

// Activations of one forward at batch shape [B, T]. With `for_backward`, every
// block's values are kept for the backward (with `recompute` one block's at a
// time, rebuilt from the kept block inputs); without (teacher, evaluation),
// one block's scratch is reused by all blocks and only two hidden buffers exist.
// Logits exist only for a chunk of rows at a time.
struct ng_acts {
  int64_t B, T, N;
  bool for_backward, recompute;
  int64_t chunk;         // rows of logits and dlogits (1..N)
  int n_hidden;          // L + 1 when training, else 2
  float **hidden;        // residual stream [N, D] (use ng_acts_hidden)
  int n_blocks;          // L when training without recompute, else 1
  ng_block_acts *blocks;
  float *final_in, *rstd_final;  // [N, D] head input (normed if final_norm), [N]
  uint16_t *head_in_bf16;  // [N, D] the head input's rounding, as the blocks' inputs' (or NULL)
  float *logits;         // [chunk, V]: logits of the rows of the last ng_model_logits
  bool blocks_rounded;   // the block weights' `rounded` copies hold this forward's weights
  bool head_rounded;     // the head weight's `rounded` copy does (after this forward's logits)
  ng_grad_ws ws;         // for_backward only
  ng_block_hook on_block;  // NULL, or called after every block of a forward
  void *on_block_ctx;
};

// What one block holds and computes, derived from its placement by one switch
// (ref/model.c): every other part of the block is common.
typedef struct {
  bool input_norm;      // input_layernorm in front of attention (pre, lns, sandwich)
  bool sublayer_norms;  // sandwich: post_attention_layernorm on the attention output,
                        // post_feedforward_layernorm on the MLP output, and
                        // pre_feedforward_layernorm (not post_attention_layernorm) before the MLP
  bool output_norm;     // post_feedforward_layernorm on the block's output (post,
                        // deepnorm); the MLP's residual is then its input N_pa(res1)
  float norm_scale;     // c on N_in's and N_mi's outputs: lns 1/sqrt(l), else 1
  float alpha;          // the residual's scale: deepnorm_alpha, else 1
  int n_weights;        // weight tensors of the block, layer scales included (at most
                        // NG_BLOCK_MAX_WEIGHTS)
} ng_block_layout;

// Fields of ng_layer: no block holds more weight tensors (sandwich's 13 and
// the two layer scales).
#define NG_BLOCK_MAX_WEIGHTS 15

// The placement block l (0-based) of a model of config c computes: its own
// placement; for mixln post (l < mixln_post_layers) or pre; for hybrid
// layer_placements[l]. Never mixln or hybrid: every per-block placement of
// normgrow is resolved here, and everything else asks this function.
ng_norm_placement ng_block_placement(const ng_model_config *c, int64_t l);
ng_block_layout ng_block_layout_of(const ng_model_config *c, int64_t l);
// The layout whose saved values serve blocks first..last (one set shared by
// blocks of several layouts): the union of their norms, an alpha not 1 if one has.
ng_block_layout ng_block_layouts_union(const ng_model_config *c, int64_t first, int64_t last);
// Whether some block of c has an output norm (its res1, res2 diagnostic points
// and its norms-only ablation).
bool ng_model_has_output_norms(const ng_model_config *c);

// The number of weight tensors of a model of config c: its blocks' (11 or
// more each, by placement, and 2 more with layer_scale), the embeddings, and
// the final norm and untied head when it has them.
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
// Whether p is one of its block's layer scales (self_attn.layer_scale, mlp.layer_scale).
bool ng_param_is_layer_scale(const ng_param *p);
// Matrices N(0, std^2), norm gains 1, layer scales cfg.layer_scale_init, drawn in
// parameter order.
void ng_model_init_random(ng_model *m, ng_rng *r, double std);
// DeepNet's initialisation rule for a deepnorm model just drawn at random:
// v_proj, o_proj, gate_proj, up_proj and down_proj of every block multiplied
// by beta = (8 final_depth)^(-1/4), final_depth the depth the model ends at
// (after growth). Any other placement is left as it is.
void ng_model_deepnorm_init(ng_model *m, int64_t final_depth);
void ng_model_zero_grad(ng_model *m);
// Random init of one block only (as ng_model_init_random; no deepnorm beta).
void ng_model_init_block(ng_model *m, int64_t layer, ng_rng *r, double std);
// The parameter of m that plays p's role in block `layer` (p's own name for
// non-block parameters); NULL if m has none (e.g. a norm another placement lacks).
const ng_param *ng_model_find_in_layer(const ng_model *m, const ng_param *p, int64_t layer);
// Copy block sl of src into block dl of dst (same backend), by role (never by
// name); a norm of dl that sl's placement lacks gets gains 1 (an input norm of
// a pre block copied from a post block, say).
int ng_model_copy_block(ng_model *dst, int64_t dl, const ng_model *src, int64_t sl);
// Copy embeddings, final norm and head (a tied source's embedding serves as head).
int ng_model_copy_io(ng_model *dst, const ng_model *src);
// Matmul parameters (all 2-D weights; the embedding only when it is the tied
// head), optionally only the trainable ones: the "params" of 6 x params x tokens.
double ng_model_matmul_params(const ng_model *m, bool trainable_only);
// Forward FLOPs of causal attention: 4 hd H T(T+1)/2 per sequence and layer.
double ng_attention_flops(const ng_model_config *c, int64_t B, int64_t T);
// Hold the block weights of a forward-only model in bf16 when every one of
// them is exactly a bf16 number (a model loaded from a bf16 checkpoint): each
// block is widened (exactly, ng_backend.widen_bf16) into one shared fp32 block
// as it runs, so every forward gives the same bits in about half the memory.
// Embeddings, final norm and head stay fp32. Returns whether it did.
bool ng_model_hold_bf16(ng_model *m);
// Freeze (or unfreeze) every parameter of block `layer` (-1: embeddings, final
// norm and head). Frozen parameters get no gradient and no update.
void ng_model_freeze(ng_model *m, int64_t layer, bool frozen);

// Forward-only (teacher, evaluation) or training activations, logits of all N rows.
ng_acts *ng_acts_create(const ng_model *m, int64_t B, int64_t T, bool for_backward);
ng_acts *ng_acts_create_with(const ng_model *m, int64_t B, int64_t T, const ng_acts_options *o);
void ng_acts_free(const ng_model *m, ng_acts *a);
// Residual stream after block l (l = 0: embedding output). In a forward without
// `for_backward`, only the latest one is still there.
float *ng_acts_hidden(const ng_acts *a, int64_t l);

// Bytes a chunk of the loss may hold in one [chunk, V] logits buffer by default.
#define NG_LOSS_CHUNK_BYTES (256ll << 20)
// Default rows of a loss chunk: a row holds V logits and D head inputs, so
// NG_LOSS_CHUNK_BYTES / (4 (V + D)) rows, at least 1 and at most N.
int64_t ng_loss_chunk_default(const ng_model_config *c, int64_t N);

// Forward of tokens [B*T] (backend buffer) to the head input (a->final_in, or
// the last hidden state without final_norm): no logits. modes (host, [L], may
// be NULL = all NG_BLOCK_RUN) selects block-removal ablations (no `for_backward`).
void ng_model_forward(ng_model *m, ng_acts *a, const int32_t *tokens,
                      const ng_block_mode *modes);
// Logits [rows, V] of rows [row0, row0 + rows) of the last forward into
// a->logits (rows <= a->chunk).
void ng_model_logits(ng_model *m, ng_acts *a, int64_t row0, int64_t rows);

// The teacher of ng_model_loss, one of: a model whose forward ran on the same
// tokens (its head runs chunk by chunk beside the student's; its acts' chunk
// at least the student's); its logits of all rows; the rows of a top-k cache;
// or none (all NULL: CE alone).
typedef struct {
  ng_model *model;
  ng_acts *acts;
  const float *logits;                // [N, V] backend, or NULL
  const int32_t *topk_ids;            // [N, k] backend, or NULL
  const float *topk_vals, *topk_lse;  // [N, k], [N]
  const float *topk_rest;             // [N]
  int64_t k;
} ng_loss_teacher;

// Output head and fused loss (ng_backend.ce_kd, or ce_kd_topk with a cache)
// of the last forward of a, over chunks of a->chunk rows: for each chunk the
// head matmuls, the loss terms and, with `grad` (for_backward acts), d loss / d
// logits and from it the chunk's rows of a->ws.dfinal (d head input, written)
// and its share of the head weight's gradient (accumulated), before the next
// chunk. targets [N] (backend). lp.n_norm: the rows the loss is averaged over
// (0: the valid rows of these N). Returns ce, kd of the N rows and their
// valid count; the same as one call over all rows up to fp32 reduction order.
void ng_model_loss(ng_model *m, ng_acts *a, const ng_loss_teacher *t, const int32_t *targets,
                   ng_loss_params lp, bool grad, double *ce, double *kd, int64_t *n_valid);
// The distillation loss of a teacher's ce and kd, the one whose gradient
// ng_model_loss computes: kd_weight kd + (1 - kd_weight) ce.
double ng_loss_mix(double kd_weight, double ce, double kd);
// Backward from a->ws.dfinal (ng_model_loss with `grad`): accumulates d loss /
// d param into the gradients. With `recompute`, block l's saved values are
// rebuilt from its kept input first.
void ng_model_backward(ng_model *m, ng_acts *a, const int32_t *tokens);

#endif
