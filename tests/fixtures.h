// normgrow tests: a small model shared by the tests that grow or diagnose one.
#ifndef NORMGROW_TESTS_FIXTURES_H
#define NORMGROW_TESTS_FIXTURES_H

#include "normgrow/model.h"

// Hidden 16, 4 query / 2 kv heads of 4, FFN 24, untied head, final norm; weights
// N(0, 0.3^2) and norm gains 1 + N(0, 0.3^2) (away from 1, as in a trained model).
static inline ng_model *test_small_model(ng_backend *be, ng_norm_placement np, int64_t L,
                                         int64_t vocab, uint64_t seed, bool trainable) {
  ng_model_config c = {.vocab_size = vocab, .hidden_size = 16, .intermediate_size = 24,
                       .num_hidden_layers = L, .num_attention_heads = 4, .num_key_value_heads = 2,
                       .head_dim = 4, .rope_theta = 1e4, .rms_norm_eps = 1e-6,
                       .tie_word_embeddings = false, .final_norm = true, .norm_placement = np};
  ng_model *m = ng_model_create(be, &c, trainable);
  ng_rng r;
  ng_rng_seed(&r, seed);
  ng_model_init_random(m, &r, 0.3);
  for (int i = 0; i < m->n_params; i++)
    if (m->params[i].ndim == 1) ng_rng_fill_normal(&r, m->params[i].data, m->params[i].numel, 1.0, 0.3);
  return m;
}

#endif
