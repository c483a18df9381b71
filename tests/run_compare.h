// normgrow tests: two parsed configurations compared field by field, doubles
// bit for bit (the round-trip invariants of test_json and the run-config fuzz
// target): exact, because a config is written in digits that read back to the
// same double, and parsing is correctly rounded.
#ifndef NORMGROW_TESTS_RUN_COMPARE_H
#define NORMGROW_TESTS_RUN_COMPARE_H

#include <stdbool.h>
#include <string.h>

#include "normgrow/run.h"

static inline bool ng_same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

#define SAME(f) (a->f == b->f)
#define SAME_BYTES(f) (memcmp(&a->f, &b->f, sizeof a->f) == 0)
#define SAME_STR(f) (strcmp(a->f, b->f) == 0)

static inline bool ng_same_model(const ng_model_config *a, const ng_model_config *b) {
  return SAME(vocab_size) && SAME(hidden_size) && SAME(intermediate_size) && SAME(num_hidden_layers) &&
         SAME(num_attention_heads) && SAME(num_key_value_heads) && SAME(head_dim) &&
         ng_same_bits(a->rope_theta, b->rope_theta) && ng_same_bits(a->rms_norm_eps, b->rms_norm_eps) &&
         SAME(tie_word_embeddings) && SAME(final_norm) && SAME(norm_placement) &&
         SAME(layer_scale) && ng_same_bits(a->layer_scale_init, b->layer_scale_init);
}

static inline bool ng_same_stage(const ng_stage *a, const ng_stage *b) {
  return SAME(depth) && SAME(tokens) && SAME(restart_lr) && SAME(freeze_existing) &&
         ng_same_bits(a->lr.peak, b->lr.peak) && ng_same_bits(a->lr.floor, b->lr.floor) &&
         SAME(lr.warmup_tokens) && SAME(lr.shape) && SAME(segment_start);
}

// Every field of two parsed run configs, doubles bit for bit.
static inline bool ng_same_run(const ng_run_config *a, const ng_run_config *b) {
  bool same = SAME_STR(name) && SAME(seed) && SAME_STR(run_dir) && SAME(distill) &&
              SAME_STR(train_path) && SAME_STR(val_path) && SAME(batch) && SAME(seq) &&
              ng_same_model(&a->model, &b->model) && SAME_STR(teacher_path) && SAME(use_cache) &&
              SAME_STR(cache_train) && SAME_STR(cache_val) && SAME_BYTES(loss) && SAME_BYTES(optim) &&
              SAME(reset_state_on_growth) && SAME_BYTES(init_std) && SAME(n_init_layers) &&
              SAME_BYTES(init_layers) && SAME(embeddings_from_teacher) && SAME(freeze_embeddings) &&
              SAME(deepnorm_beta) &&
              SAME(grow_position) && SAME(grow_init) && SAME(gate_steps) &&
              SAME(n_grow_teacher_layers) && SAME_BYTES(grow_teacher_layers) && SAME(n_stages) &&
              SAME(eval_every) && SAME(eval_batches) && SAME(checkpoint_every) &&
              SAME(n_structural) && SAME_BYTES(structural_tokens);
  for (int i = 0; same && i < a->n_stages; i++) same = ng_same_stage(&a->stages[i], &b->stages[i]);
  return same;
}

#undef SAME
#undef SAME_BYTES
#undef SAME_STR

#endif
