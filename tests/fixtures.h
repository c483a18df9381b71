// normgrow tests: a small model shared by the tests that grow or diagnose one.
#ifndef NORMGROW_TESTS_FIXTURES_H
#define NORMGROW_TESTS_FIXTURES_H

#include <stdio.h>
#include <unistd.h>

#include "normgrow/data.h"
#include "normgrow/model.h"

// Hidden 16, 4 query / 2 kv heads of 4, FFN 24, untied head, final norm; weights
// N(0, 0.3^2) and norm gains 1 + N(0, 0.3^2) (away from 1, as in a trained model).
// A random model of placement np (deepnorm: alpha 1.5; mixln: the first
// post_layers blocks post) with norm gains 1 + N(0, 0.3^2).
static inline ng_model *test_placed_model(ng_backend *be, ng_norm_placement np, int64_t post_layers,
                                          int64_t L, int64_t vocab, uint64_t seed, bool trainable) {
  ng_model_config c = {.vocab_size = vocab, .hidden_size = 16, .intermediate_size = 24,
                       .num_hidden_layers = L, .num_attention_heads = 4, .num_key_value_heads = 2,
                       .head_dim = 4, .rope_theta = 1e4, .rms_norm_eps = 1e-6,
                       .tie_word_embeddings = false, .final_norm = true, .norm_placement = np,
                       .deepnorm_alpha = np == NG_NORM_DEEPNORM ? 1.5 : 0.0,
                       .mixln_post_layers = np == NG_NORM_MIXLN ? post_layers : 0};
  ng_model *m = ng_model_create(be, &c, trainable);
  ng_rng r;
  ng_rng_seed(&r, seed);
  ng_model_init_random(m, &r, 0.3);
  for (int i = 0; i < m->n_params; i++)
    if (m->params[i].ndim == 1) ng_rng_fill_normal(&r, m->params[i].data, m->params[i].numel, 1.0, 0.3);
  return m;
}

// The same with mixln's first block post.
static inline ng_model *test_small_model(ng_backend *be, ng_norm_placement np, int64_t L,
                                         int64_t vocab, uint64_t seed, bool trainable) {
  return test_placed_model(be, np, 1, L, vocab, seed, trainable);
}

// Byte-level token shards <dir>/train.bin and val.bin (a tenth, seed 3) from
// the license texts every Debian system ships; false if none is there or the
// build fails.
static inline bool test_license_shards(const char *dir, ng_data_stats *st) {
  static const char *texts[] = {"GPL-3", "GPL-2", "LGPL-2.1", "Apache-2.0", "MPL-2.0", "GFDL-1.3", "Artistic"};
  const char *files[7];
  char paths[7][96];
  int n = 0;
  for (int i = 0; i < 7; i++) {
    snprintf(paths[n], sizeof paths[n], "/usr/share/common-licenses/%s", texts[i]);
    if (access(paths[n], R_OK) == 0) files[n] = paths[n], n++;
  }
  return n && ng_data_build(files, n, "", 0.1, 3, dir, st) == 0;
}

#endif
