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
// Under LNS (LayerNorm-Scaling) a block's norm outputs are divided by
// sqrt(position): a new block (zero_out or gate: an identity) below older
// ones moves them up and shrinks their scale, so growth preserves the function
// only when every new block goes on top ("position": "top").
#ifndef NORMGROW_GROW_H
#define NORMGROW_GROW_H

#include "normgrow/model.h"
#include "normgrow/optim.h"
#include "normgrow/run.h"

typedef struct {
  ng_grow_position position;
  ng_grow_init init;
  double std;                    // random init
  ng_rng *rng;                   // random init draws
  const ng_model *teacher;       // init teacher
  const int64_t *teacher_layers; // init teacher: one per new block
} ng_grow_rule;

// Grows `old` to new_depth into *out (same backend, trainable). from_old gets
// [new_depth] old block indices (-1 = new). Gates of old blocks carry over;
// new blocks get gate 0 under the gate rule, else 1.
int ng_model_grow(const ng_model *old, int64_t new_depth, const ng_grow_rule *rule,
                  ng_model **out, int64_t *from_old);

// AdamW state for the grown model: moments and step counts of old parameters
// follow them to their new place (unless reset); new parameters start at zero.
ng_adamw *ng_adamw_regrow(const ng_model *old, const ng_adamw *old_opt, const ng_model *grown,
                          const int64_t *from_old, bool reset);

#endif
