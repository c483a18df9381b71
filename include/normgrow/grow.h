// normgrow: growing a student in depth at a stage boundary.
//
// The grown model keeps every old block (copied, in order) and places new ones
// by ng_grow_layout. New blocks start as the rule says:
//   random      N(0, std^2) matrices, gains 1
//   copy_below  a copy of the block directly below it in the grown model
//   zero_out    random, with o_proj and down_proj zeroed: under Pre-Norm the
//               block is then an exact identity; under Post-Norm it still
//               computes y = N_pf(N_pa(x)), so the function changes
//   gate        random, wrapped in y = (1 - g) x + g Block(x) with g = 0 at
//               growth (an identity in both placements), ramped up by the trainer
//   teacher     a copy of a teacher layer (teacher_layers, one per new block)
// A new block is of the placement the model's own rule gives its position,
// unless the rule names a new_placement (hybrid growth: growth.new_block_placement):
// then every new block is a block of that placement (pre or post) and every old
// block keeps the placement it had, so the grown model is "hybrid" (config.h),
// e.g. post blocks on a pre prefix. A new pre block starts as the identity
// under gate and zero_out (and with layer scales at 0), a new post block only
// under gate: with nothing added by its sublayers it still computes
// y = N_pf(N_pa(x)) (ng_grow_hybrid_change says so at a growth).
// Under LNS (LayerNorm-Scaling) a block's norm outputs are divided by
// sqrt(position): a new block (zero_out or gate: an identity) below older
// ones moves them up and shrinks their scale, so growth preserves the function
// only when every new block goes on top ("position": "top").
//
// Interventions on the scale of the residual stream at a growth (docs/design.md):
//   depth_scaled   a new block's o_proj and down_proj (the writers to the
//                  stream) are multiplied by 1/sqrt(2 l), l its 1-based position
//                  in the grown model, after its random init (random or gate
//                  only; a gated block still starts as an identity)
//   ng_rescale_stream  the whole stream of the model before growth multiplied by
//                  c (1 / its RMS: unit RMS at the new blocks' input)
#ifndef NORMGROW_GROW_H
#define NORMGROW_GROW_H

#include "normgrow/model.h"
#include "normgrow/optim.h"

// Where new blocks go (growth.position) and how they start (growth.init).
typedef enum { NG_GROW_TOP, NG_GROW_INTERLEAVE, NG_GROW_MIDDLE } ng_grow_position;
typedef enum {
  NG_INIT_RANDOM, NG_INIT_COPY_BELOW, NG_INIT_ZERO_OUT, NG_INIT_GATE, NG_INIT_TEACHER
} ng_grow_init;

// Where new blocks go when a model of depth d grows by k: fills from_old
// [d + k] with the old index of each block of the grown model, or -1 for a
// new block. top: appended; middle: after old block floor((d-1)/2);
// interleave: spread evenly, after old block j go
// floor((j+1) k / d) - floor(j k / d) new blocks.
void ng_grow_layout(ng_grow_position pos, int64_t d, int64_t k, int64_t *from_old);

typedef struct {
  ng_grow_position position;
  ng_grow_init init;
  double std;                    // random init
  ng_rng *rng;                   // random init draws
  const ng_model *teacher;       // init teacher
  const int64_t *teacher_layers; // init teacher: one per new block
  bool depth_scaled;             // new blocks' o_proj, down_proj times 1/sqrt(2 l)
  const ng_norm_placement *new_placement;  // NULL: the model's own rule; else (pre
                                           // or post) every new block's placement
} ng_grow_rule;

// The config of a model of config `old` grown to new_depth at `pos`, and
// from_old [new_depth] as ng_grow_layout fills it. With new_placement NULL,
// old's config at the new depth (each block as old's placement says for its
// new position); else a hybrid config in which each old block keeps the
// placement it had and each new block is *new_placement. -1 with a message
// when that config is invalid (a hybrid model of more than NG_MAX_LAYERS
// blocks, a new placement other than pre or post, a prefix block of another)
// and when a hybrid `old` has no new_placement.
int ng_grow_config(const ng_model_config *old, int64_t new_depth, ng_grow_position pos,
                   const ng_norm_placement *new_placement, ng_model_config *out, int64_t *from_old);

// At a growth by r into a model of config c with r->new_placement: why its new
// blocks do not start as the identity (the grown model computes another
// function), or NULL when they do. A pre block starts as the identity under the
// gate and zero_out inits and with layer scales at 0 (model.layer_scale_init);
// a post block only under the gate init.
const char *ng_grow_hybrid_change(const ng_model_config *c, const ng_grow_rule *r);

// Grows `old` to new_depth into *out (same backend, trainable), its config by
// ng_grow_config. from_old gets [new_depth] old block indices (-1 = new).
// Gates of old blocks carry over; new blocks get gate 0 under the gate rule, else 1. With model.layer_scale_init
// a new block's layer scales start at it under every rule (0: the block adds
// nothing to the stream until they are trained).
int ng_model_grow(const ng_model *old, int64_t new_depth, const ng_grow_rule *rule,
                  ng_model **out, int64_t *from_old);

// The RMS of the residual stream a model hands its head: sqrt(mean over tokens
// and channels of h^2) at hidden.L, over a forward of tokens [B*T] (backend).
double ng_stream_rms(ng_model *m, const int32_t *tokens, int64_t B, int64_t T);

// Whether the stream of a model of config c can be rescaled without changing
// its function: every block reads the stream through a scale-invariant norm
// (pre, lns) and the head reads it through the final norm. Post-Norm (each
// block's output is already normed: no stream to rescale) and a model without
// final norm (the logits would scale) are refused: -1 with a message naming
// `where`.
int ng_stream_rescalable(const ng_model_config *c, const char *where);

// Multiplies the residual stream by c > 0 for every input: the embeddings and
// every block's o_proj and down_proj are multiplied by c (the stream is their
// sum; a gated block's y = (1 - g) x + g Block(x) scales with them), and with
// tied embeddings the final norm's gain by 1/c (the head then sees c E and
// N(h) w / c: the same logits). Every norm that reads the stream is
// scale-invariant, so the function is kept up to the norms' eps (RMSNorm(c x)
// = RMSNorm(x) when eps << mean(x^2)). With opt, the AdamW moments of each
// scaled tensor follow its gradient, which scales by the inverse: m / s, v / s^2
// for a tensor scaled by s. Asserts ng_stream_rescalable.
void ng_rescale_stream(ng_model *m, ng_adamw *opt, double c);

// AdamW state for the grown model: moments and step counts of old parameters
// follow them to their new place (unless reset); new parameters start at zero.
ng_adamw *ng_adamw_regrow(const ng_model *old, const ng_adamw *old_opt, const ng_model *grown,
                          const int64_t *from_old, bool reset);

#endif
