// normgrow fuzz harnesses: each reader driven as the product drives it, with
// the invariants every reader keeps (a failure is one line, printable).
#ifndef NORMGROW_TESTS_FUZZ_READERS_H
#define NORMGROW_TESTS_FUZZ_READERS_H

#include "fuzz.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/data.h"
#include "normgrow/golden.h"
#include "normgrow/safetensors.h"
#include "normgrow/tokenizer.h"

// A reader's failure: a message of one line without control characters.
static inline int ng_fuzz_refused(void) {
  const char *e = ng_error();
  NG_FUZZ_REQUIRE(e[0] != 0);
  for (const unsigned char *p = (const unsigned char *)e; *p; p++) NG_FUZZ_REQUIRE(*p >= 0x20 && *p != 0x7f);
  return 0;
}

// ng_st_open, then every tensor converted as the loaders convert it.
static inline void ng_fuzz_safetensors_file(const char *path) {
  ng_st_file f;
  if (ng_st_open(&f, path) != 0) {
    ng_fuzz_refused();
    return;
  }
  (void)ng_st_meta(&f, "format");
  for (int i = 0; i < f.n; i++) {
    const ng_st_tensor *t = &f.tensors[i];
    size_t numel = (t->end - t->begin) / ng_dtype_size(t->dtype);
    void *dst = ng_xmalloc(numel * sizeof(float));
    if (ng_st_to_f32(&f, t, dst) != 0) ng_fuzz_refused();
    if (ng_st_to_i32(&f, t, dst) != 0) ng_fuzz_refused();
    NG_FUZZ_REQUIRE(ng_st_find(&f, t->name) == t);
    free(dst);
  }
  ng_st_close(&f);
}

static inline void ng_fuzz_golden_file(const char *path) {
  ng_golden_case gc;
  if (ng_golden_open(&gc, path) != 0) {
    ng_fuzz_refused();
    return;
  }
  ng_golden_close(&gc);
}

// A checkpoint as `train --resume` loads it (optimizer and state), and as a
// teacher or a model to diagnose.
static inline void ng_fuzz_checkpoint_file(const char *path) {
  ng_backend *be = ng_backend_cpu();
  ng_model *m = NULL;
  ng_adamw *o = NULL;
  ng_train_state st = {0};
  if (ng_checkpoint_load(path, be, true, &m, &o, &st) == 0) {
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) NG_FUZZ_REQUIRE(st.gate_origin[l] >= -1 && st.gate_origin[l] <= st.step);
    for (int i = 0; i < o->n; i++) NG_FUZZ_REQUIRE(o->steps[i] >= 0 && o->steps[i] <= st.step);
    ng_adamw_free(m, o);
    ng_model_free(m);
    free(st.gate_origin);
  } else {
    ng_fuzz_refused();
  }
  m = NULL;
  if (ng_checkpoint_load(path, be, false, &m, NULL, NULL) == 0)
    ng_model_free(m);
  else
    ng_fuzz_refused();
}

// A token shard (a file or a manifest), read as training and evaluation read
// it: every token of a batch below the vocabulary.
static inline void ng_fuzz_shard_file(const char *path) {
  ng_shard s;
  if (ng_shard_open(&s, path) != 0) {
    ng_fuzz_refused();
    return;
  }
  enum { B = 2, T = 8 };
  int32_t tok[B * T], tgt[B * T];
  ng_rng r;
  ng_rng_seed(&r, 1);
  if (ng_batch_sample(&s, &r, B, T, tok, tgt) == 0) {
    for (int i = 0; i < B * T; i++) NG_FUZZ_REQUIRE((uint32_t)tok[i] < s.vocab_size && (uint32_t)tgt[i] < s.vocab_size);
    ng_batch_fixed(&s, 3, B, T, tok, tgt);
    for (int i = 0; i < B * T; i++) NG_FUZZ_REQUIRE((uint32_t)tok[i] < s.vocab_size && (uint32_t)tgt[i] < s.vocab_size);
  } else {
    ng_fuzz_refused();
  }
  ng_shard_close(&s);
}

// text[0..n) encoded with a tokenizer the reader took, into *ids, and again
// with the text in 1-byte pieces: the same outcome and the same ids, each
// below the vocabulary, that decode. Returns the encoding's status.
static inline int ng_fuzz_encode(const ng_tokenizer *t, const char *text, size_t n, ng_ids *ids) {
  ng_tok_state *st = ng_tok_state_create(t), *small = ng_tok_state_create(t);
  ng_tok_state_set_piece(small, 1);
  ng_ids again = {0};
  int rc = ng_tokenizer_encode(st, text, n, ids), rc_small = ng_tokenizer_encode(small, text, n, &again);
  NG_FUZZ_REQUIRE(rc == rc_small);
  if (rc == 0) {
    NG_FUZZ_REQUIRE(again.n == ids->n && (ids->n == 0 || memcmp(again.ids, ids->ids, ids->n * sizeof *ids->ids) == 0));
    for (size_t i = 0; i < ids->n; i++) NG_FUZZ_REQUIRE(ids->ids[i] < ng_tokenizer_vocab_size(t));
    char *back = NULL;
    size_t back_len = 0;
    NG_FUZZ_REQUIRE(ng_tokenizer_decode(t, ids->ids, ids->n, &back, &back_len) == 0);
    free(back);
  } else {
    ng_fuzz_refused();
  }
  free(again.ids);
  ng_tok_state_free(small);
  ng_tok_state_free(st);
  return rc;
}

#endif
