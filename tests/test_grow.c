// Depth growth: layouts, function preservation at the moment of growth, exact
// copies, and the optimizer state that follows the old blocks.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/grow.h"

static ng_backend *be;

static ng_model *small_model(ng_norm_placement np, int64_t L, uint64_t seed) {
  return test_small_model(be, np, L, 23, seed, true);
}

// logits [B*T, V] of a fixed batch (caller frees). Where a growth keeps the
// function they are compared exactly: the old blocks run the same calls at the
// same shapes and threads before and after, and a new block adds exact zeros
// (gate 0: 1 x + 0 y = x; zeroed o_proj and down_proj, or layer scales 0: a
// branch of 0 x finite terms is 0, and x + 0 = x).
static float *logits_of(ng_model *m) {
  int32_t tokens[2 * 6] = {1, 5, 7, 2, 9, 22, 0, 3, 3, 14, 8, 11};
  ng_acts *a = ng_acts_create(m, 2, 6, false);
  ng_model_forward(m, a, tokens, NULL);
  ng_model_logits(m, a, 0, a->N);
  size_t n = (size_t)a->N * (size_t)m->cfg.vocab_size;
  float *out = ng_xmalloc(n * sizeof(float));
  memcpy(out, a->logits, n * sizeof(float));
  ng_acts_free(m, a);
  return out;
}

static double max_diff(const float *a, const float *b, size_t n) {
  double d = 0.0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
  return d;
}

static void test_layouts(void) {
  int64_t f[16];
  ng_grow_layout(NG_GROW_TOP, 3, 2, f);
  CHECK(f[0] == 0 && f[1] == 1 && f[2] == 2 && f[3] == -1 && f[4] == -1, "layout top 3+2", "got %lld %lld %lld %lld %lld",
        (long long)f[0], (long long)f[1], (long long)f[2], (long long)f[3], (long long)f[4]);
  ng_grow_layout(NG_GROW_MIDDLE, 4, 2, f);
  CHECK(f[0] == 0 && f[1] == 1 && f[2] == -1 && f[3] == -1 && f[4] == 2 && f[5] == 3, "layout middle 4+2", "got %lld %lld %lld",
        (long long)f[1], (long long)f[2], (long long)f[4]);
  ng_grow_layout(NG_GROW_INTERLEAVE, 3, 3, f);
  CHECK(f[0] == 0 && f[1] == -1 && f[2] == 1 && f[3] == -1 && f[4] == 2 && f[5] == -1, "layout interleave 3+3", "got %lld %lld",
        (long long)f[1], (long long)f[2]);
  ng_grow_layout(NG_GROW_INTERLEAVE, 6, 3, f);
  CHECK(f[0] == 0 && f[1] == 1 && f[2] == -1 && f[3] == 2 && f[4] == 3 && f[5] == -1 && f[8] == -1 && f[7] == 5,
        "layout interleave 6+3", "got %lld %lld", (long long)f[2], (long long)f[5]);
}

// Grows m to 4 blocks by `init` at `pos` into *g; returns the max logit change.
static double grow_into(ng_model *m, ng_grow_init init, ng_grow_position pos, ng_model **g,
                        int64_t *from_old) {
  ng_rng r;
  ng_rng_seed(&r, 8);
  ng_grow_rule rule = {pos, init, 0.3, &r, NULL, NULL, false, NULL};
  float *before = logits_of(m);
  NG_ASSERT(ng_model_grow(m, 4, &rule, g, from_old) == 0);
  float *after = logits_of(*g);
  double d = max_diff(before, after, 12 * 23);
  free(before);
  free(after);
  return d;
}

// Grows a 2-block model to 4 blocks by `init`; returns the max logit change.
static double grow_change(ng_norm_placement np, ng_grow_init init, ng_grow_position pos) {
  ng_model *m = small_model(np, 2, 7), *g;
  int64_t from_old[4];
  double d = grow_into(m, init, pos, &g, from_old);
  ng_model_free(m);
  ng_model_free(g);
  return d;
}

static void test_function_preservation(void) {
  for (int np = 0; np < 2; np++) {
    const char *p = np ? "post" : "pre";
    char name[96];
    for (int pos = 0; pos < 3; pos++) {
      double d = grow_change((ng_norm_placement)np, NG_INIT_GATE, (ng_grow_position)pos);
      snprintf(name, sizeof name, "gate init keeps the logits exactly (%s, position %d)", p, pos);
      // exact: see logits_of
      CHECK(d == 0.0, name, "max change %.3e", d);
    }
    double d = grow_change((ng_norm_placement)np, NG_INIT_RANDOM, NG_GROW_TOP);
    snprintf(name, sizeof name, "random init changes the logits (%s)", p);
    CHECK(d > 1e-3, name, "max change %.3e", d);
  }
  double pre = grow_change(NG_NORM_PRE, NG_INIT_ZERO_OUT, NG_GROW_INTERLEAVE);
  // exact: see logits_of
  CHECK(pre == 0.0, "zero_out init keeps the logits exactly under Pre-Norm", "max change %.3e", pre);
  // Under Post-Norm a block with zeroed o_proj and down_proj still computes
  // y = N_pf(N_pa(x)): the function changes. Documented, not a bug.
  double post = grow_change(NG_NORM_POST, NG_INIT_ZERO_OUT, NG_GROW_INTERLEAVE);
  CHECK(post > 1e-3, "zero_out init does NOT keep the function under Post-Norm", "max change %.3e", post);
  // LNS: a block's norm outputs scale with 1/sqrt(position). New identity
  // blocks on top keep the function; inserted below older blocks they move
  // those up and change their scale.
  double top = grow_change(NG_NORM_LNS, NG_INIT_GATE, NG_GROW_TOP);
  double zero_top = grow_change(NG_NORM_LNS, NG_INIT_ZERO_OUT, NG_GROW_TOP);
  double inter = grow_change(NG_NORM_LNS, NG_INIT_GATE, NG_GROW_INTERLEAVE);
  // exact: see logits_of
  CHECK(top == 0.0 && zero_top == 0.0, "LNS: gate and zero_out on top keep the logits exactly",
        "max change %.3e, %.3e", top, zero_top);
  CHECK(inter > 1e-3, "LNS: new blocks interleaved below older ones change the function",
        "max change %.3e", inter);
}

// Which growth inits keep the function, per placement (docs/design.md, "Growth
// by placement"): for each position (top, interleave, middle), what growing
// 2 -> 4 -> 6 blocks does to the logits at the growth steps:
//   K  keeps them exactly at every step
//   E  keeps them up to the norms' eps (< 1e-5) at every step, not exactly: new
//      post-style blocks on top rescale each token, which the final norm undoes
//   C  changes them (by more than 1e-3) at some step
// mixln's P: the first P blocks are post. grown (hybrid growth): the placement
// of every new block, NULL for the model's own.
enum { C, K, E };
static const ng_norm_placement PRE_BLOCKS = NG_NORM_PRE, POST_BLOCKS = NG_NORM_POST;
static const struct {
  ng_norm_placement placement;
  int64_t P;
  ng_grow_init init;
  int keeps[3];  // by ng_grow_position
  const ng_norm_placement *grown;
} preservation[] = {
    {NG_NORM_PRE, 0, NG_INIT_GATE, {K, K, K}, NULL},        {NG_NORM_PRE, 0, NG_INIT_ZERO_OUT, {K, K, K}, NULL},
    {NG_NORM_POST, 0, NG_INIT_GATE, {K, K, K}, NULL},       {NG_NORM_POST, 0, NG_INIT_ZERO_OUT, {E, C, C}, NULL},
    {NG_NORM_LNS, 0, NG_INIT_GATE, {K, C, C}, NULL},        {NG_NORM_LNS, 0, NG_INIT_ZERO_OUT, {K, C, C}, NULL},
    {NG_NORM_SANDWICH, 0, NG_INIT_GATE, {K, K, K}, NULL},   {NG_NORM_SANDWICH, 0, NG_INIT_ZERO_OUT, {K, K, K}, NULL},
    {NG_NORM_DEEPNORM, 0, NG_INIT_GATE, {K, K, K}, NULL},   {NG_NORM_DEEPNORM, 0, NG_INIT_ZERO_OUT, {E, C, C}, NULL},
    {NG_NORM_MIXLN, 1, NG_INIT_GATE, {K, K, K}, NULL},      {NG_NORM_MIXLN, 1, NG_INIT_ZERO_OUT, {K, K, K}, NULL},
    {NG_NORM_MIXLN, 2, NG_INIT_GATE, {K, C, C}, NULL},      {NG_NORM_MIXLN, 2, NG_INIT_ZERO_OUT, {K, C, C}, NULL},
    {NG_NORM_PRE, 0, NG_INIT_RANDOM, {C, C, C}, NULL},      {NG_NORM_POST, 0, NG_INIT_RANDOM, {C, C, C}, NULL},
    {NG_NORM_LNS, 0, NG_INIT_RANDOM, {C, C, C}, NULL},      {NG_NORM_SANDWICH, 0, NG_INIT_RANDOM, {C, C, C}, NULL},
    {NG_NORM_DEEPNORM, 0, NG_INIT_RANDOM, {C, C, C}, NULL}, {NG_NORM_MIXLN, 1, NG_INIT_RANDOM, {C, C, C}, NULL},
    // hybrid: post blocks grown on a pre model, pre blocks on a post model (on
    // top, zeroed post blocks renorm what the final norm renorms again: eps)
    {NG_NORM_PRE, 0, NG_INIT_GATE, {K, K, K}, &POST_BLOCKS},
    {NG_NORM_PRE, 0, NG_INIT_ZERO_OUT, {E, C, C}, &POST_BLOCKS},
    {NG_NORM_PRE, 0, NG_INIT_RANDOM, {C, C, C}, &POST_BLOCKS},
    {NG_NORM_POST, 0, NG_INIT_GATE, {K, K, K}, &PRE_BLOCKS},
    {NG_NORM_POST, 0, NG_INIT_ZERO_OUT, {K, K, K}, &PRE_BLOCKS},
    {NG_NORM_POST, 0, NG_INIT_RANDOM, {C, C, C}, &PRE_BLOCKS},
    {NG_NORM_POST, 0, NG_INIT_COPY_BELOW, {C, C, C}, &PRE_BLOCKS},
};

static const char *init_name(ng_grow_init init) {
  switch (init) {
    case NG_INIT_RANDOM: return "random";
    case NG_INIT_COPY_BELOW: return "copy_below";
    case NG_INIT_ZERO_OUT: return "zero_out";
    case NG_INIT_GATE: return "gate";
    case NG_INIT_TEACHER: return "teacher";
  }
  return "?";
}

static void test_preservation_table(void) {
  static const char *const positions[] = {"top", "interleave", "middle"};
  static const char *const says[] = {"changes", "keeps", "keeps up to eps"};
  static const int64_t depths[] = {2, 4, 6};
  for (size_t i = 0; i < sizeof preservation / sizeof preservation[0]; i++) {
    for (int pos = 0; pos < 3; pos++) {
      ng_model *m = test_placed_model(be, preservation[i].placement, preservation[i].P, depths[0], 23,
                                      7, true);
      ng_rng r;
      ng_rng_seed(&r, 8);
      ng_grow_rule rule = {(ng_grow_position)pos, preservation[i].init, 0.3, &r, NULL, NULL, false,
                           preservation[i].grown};
      int want = preservation[i].keeps[pos];
      double change[2];
      for (int step = 0; step < 2; step++) {  // every growth step
        int64_t from_old[6];
        ng_model *g;
        float *before = logits_of(m);
        NG_ASSERT(ng_model_grow(m, depths[step + 1], &rule, &g, from_old) == 0);
        float *after = logits_of(g);
        change[step] = max_diff(before, after, 12 * 23);
        free(before);
        free(after);
        ng_model_free(m);
        m = g;
      }
      ng_model_free(m);
      double most = fmax(change[0], change[1]);
      // exact: see logits_of (K)
      bool as_said = want == K ? most == 0.0 : want == E ? most > 0.0 && most < 1e-5 : most > 1e-3;
      char name[192];
      snprintf(name, sizeof name, "%s (P %lld)%s%s: %s init at %s %s the function (every growth step)",
               ng_norm_placement_name(preservation[i].placement), (long long)preservation[i].P,
               preservation[i].grown ? ", new blocks " : "",
               preservation[i].grown ? ng_norm_placement_name(*preservation[i].grown) : "",
               init_name(preservation[i].init), positions[pos], says[want]);
      CHECK(as_said, name, "max changes %.3e, %.3e", change[0], change[1]);
      if (!preservation[i].grown || pos != NG_GROW_INTERLEAVE) continue;
      // What the trainer says at a hybrid growth: nothing exactly where the
      // new blocks are identities (K); a reason where they are not.
      const ng_model_config prefix = {.norm_placement = preservation[i].placement};
      const char *why = ng_grow_hybrid_change(&prefix, &rule);
      snprintf(name, sizeof name, "%s, new blocks %s, %s init: the growth %s",
               ng_norm_placement_name(preservation[i].placement), ng_norm_placement_name(*preservation[i].grown),
               init_name(preservation[i].init), want == K ? "logs no change" : "logs why the function changes");
      CHECK((why == NULL) == (want == K), name, "%s", why ? why : "no reason");
    }
  }
}

// Teacher (Qwen3, pre) layers copied into a sandwich student map by role:
// the teacher's post_attention_layernorm (before its MLP) becomes the
// student's pre_feedforward_layernorm; the student's post_attention_layernorm
// (on the attention output) and post_feedforward_layernorm keep their init.
static void test_teacher_by_role(void) {
  ng_model *m = small_model(NG_NORM_SANDWICH, 1, 3), *g, *teacher = small_model(NG_NORM_PRE, 3, 4);
  ng_rng r;
  ng_rng_seed(&r, 1);
  int64_t from_old[2], tl[1] = {2};
  ng_grow_rule rule = {NG_GROW_TOP, NG_INIT_TEACHER, 0.3, &r, teacher, tl, false, NULL};
  NG_ASSERT(ng_model_grow(m, 2, &rule, &g, from_old) == 0);
  const ng_param *ff = ng_model_find(g, "model.layers.1.pre_feedforward_layernorm.weight");
  const ng_param *pa = ng_model_find(g, "model.layers.1.post_attention_layernorm.weight");
  const ng_param *pf = ng_model_find(g, "model.layers.1.post_feedforward_layernorm.weight");
  const ng_param *in = ng_model_find(g, "model.layers.1.input_layernorm.weight");
  const ng_param *t_pa = ng_model_find(teacher, "model.layers.2.post_attention_layernorm.weight");
  const ng_param *t_in = ng_model_find(teacher, "model.layers.2.input_layernorm.weight");
  bool ones = true;  // exact below: copies, and gains set to 1
  for (size_t j = 0; j < pa->numel; j++) ones &= pa->data[j] == 1.0f && pf->data[j] == 1.0f;
  CHECK(memcmp(ff->data, t_pa->data, ff->numel * 4) == 0 && memcmp(in->data, t_in->data, in->numel * 4) == 0 &&
            ones,
        "a pre teacher layer into a sandwich block: post_attention_layernorm -> pre_feedforward_layernorm, "
        "the sublayer-output norms keep gains 1",
        "tensors differ");
  ng_model_free(g);
  ng_model_free(m);
  ng_model_free(teacher);
}

// A mixln post block pushed above P by growth becomes a pre block: shared
// tensors follow it by role, its new input_layernorm has gains 1.
static void test_mixln_block_moves(void) {
  ng_model *m = test_placed_model(be, NG_NORM_MIXLN, 2, 2, 23, 5, true), *g;
  ng_rng r;
  ng_rng_seed(&r, 1);
  int64_t from_old[4];
  ng_grow_rule rule = {NG_GROW_INTERLEAVE, NG_INIT_GATE, 0.3, &r, NULL, NULL, false, NULL};
  NG_ASSERT(ng_model_grow(m, 4, &rule, &g, from_old) == 0);  // old block 2 is now block 3
  const ng_param *in = ng_model_find(g, "model.layers.2.input_layernorm.weight");
  const ng_param *pa = ng_model_find(g, "model.layers.2.post_attention_layernorm.weight");
  const ng_param *old_pa = ng_model_find(m, "model.layers.1.post_attention_layernorm.weight");
  bool ones = in != NULL && from_old[2] == 1;  // exact below: gains set to 1, and a copy
  for (size_t j = 0; ones && j < in->numel; j++) ones &= in->data[j] == 1.0f;
  CHECK(ones && memcmp(pa->data, old_pa->data, pa->numel * 4) == 0 &&
            !ng_model_find(g, "model.layers.2.post_feedforward_layernorm.weight"),
        "mixln: a post block moved above P keeps its shared tensors and gets input_layernorm gains 1",
        "from_old[2] = %lld", (long long)from_old[2]);
  ng_model_free(g);
  ng_model_free(m);
}

static bool same_block(const ng_model *a, int64_t la, const ng_model *b, int64_t lb) {
  for (int i = 0; i < a->n_params; i++) {
    const ng_param *p = &a->params[i];
    if (p->layer != la) continue;
    const ng_param *q = ng_model_find_in_layer(b, p, lb);
    if (!q || memcmp(p->data, q->data, p->numel * sizeof(float)) != 0) return false;  // exact: copies
  }
  return true;
}

// Hybrid growth: post blocks interleaved into a pre model (2 -> 4), then pre
// blocks into that (4 -> 6, another rule): every old block keeps its
// placement and its tensors exactly, every new block is of the rule's
// placement with its own norms; the config says so, and reads back.
static void test_hybrid_placements(void) {
  ng_model *m = small_model(NG_NORM_PRE, 2, 5), *g, *h;
  ng_rng r;
  ng_rng_seed(&r, 1);
  int64_t from_old[6], from_g[6];
  ng_grow_rule post = {NG_GROW_INTERLEAVE, NG_INIT_RANDOM, 0.3, &r, NULL, NULL, false, &POST_BLOCKS};
  ng_grow_rule pre = {NG_GROW_TOP, NG_INIT_RANDOM, 0.3, &r, NULL, NULL, false, &PRE_BLOCKS};
  NG_ASSERT(ng_model_grow(m, 4, &post, &g, from_old) == 0 && ng_model_grow(g, 6, &pre, &h, from_g) == 0);
  static const ng_norm_placement want[6] = {NG_NORM_PRE, NG_NORM_POST, NG_NORM_PRE,
                                            NG_NORM_POST, NG_NORM_PRE, NG_NORM_PRE};
  bool placed = h->cfg.norm_placement == NG_NORM_HYBRID && g->cfg.norm_placement == NG_NORM_HYBRID;
  bool norms = true, kept = true;
  for (int64_t l = 0; l < 6; l++) {
    placed &= ng_block_placement(&h->cfg, l) == want[l];
    char in[96], pf[96];
    snprintf(in, sizeof in, "model.layers.%lld.input_layernorm.weight", (long long)l);
    snprintf(pf, sizeof pf, "model.layers.%lld.post_feedforward_layernorm.weight", (long long)l);
    norms &= (ng_model_find(h, in) != NULL) == (want[l] == NG_NORM_PRE) &&
             (ng_model_find(h, pf) != NULL) == (want[l] == NG_NORM_POST);
    int64_t in_g = from_g[l], in_m = in_g >= 0 ? from_old[in_g] : -1;
    if (in_g >= 0) kept &= same_block(h, l, g, in_g) && ng_block_placement(&g->cfg, in_g) == want[l];
    if (in_m >= 0) kept &= same_block(h, l, m, in_m);
  }
  cJSON *j = ng_model_config_to_json(&h->cfg);
  ng_model_config back;
  bool reads = ng_model_config_parse(j, "model", &back) == 0 && back.norm_placement == NG_NORM_HYBRID;
  for (int64_t l = 0; reads && l < 6; l++) reads &= ng_block_placement(&back, l) == want[l];
  cJSON_Delete(j);
  CHECK(placed && norms, "hybrid growth: blocks pre, post, pre, post, pre, pre with their own norms",
        "placement %d", (int)h->cfg.norm_placement);
  CHECK(kept, "hybrid growth: old blocks keep their placement and tensors exactly (two growths)", "differ");
  CHECK(reads, "hybrid growth: the grown config reads back with its per-block placements", "%s", ng_error());
  ng_model_free(h);
  ng_model_free(g);
  ng_model_free(m);
}

// Mix-LN with P post blocks and the hybrid model of P "post" entries, then
// "pre" ones, are one model: the same tensors, the same logits (exact: the
// same blocks run the same calls, ng_block_placement being their one source).
static void test_mixln_is_hybrid(void) {
  ng_model *mix = test_placed_model(be, NG_NORM_MIXLN, 2, 3, 23, 5, false);
  ng_model_config c = mix->cfg;
  c.norm_placement = NG_NORM_HYBRID;
  c.mixln_post_layers = 0;
  c.layer_placements[0] = c.layer_placements[1] = NG_NORM_POST;
  c.layer_placements[2] = NG_NORM_PRE;
  ng_model *hyb = ng_model_create(be, &c, false);
  bool same = hyb->n_params == mix->n_params;
  for (int i = 0; same && i < hyb->n_params; i++) {
    const ng_param *q = ng_model_find(mix, hyb->params[i].name);
    same = q && q->numel == hyb->params[i].numel;
    if (same) memcpy(hyb->params[i].data, q->data, q->numel * sizeof(float));
  }
  float *a = logits_of(mix), *b = same ? logits_of(hyb) : NULL;
  CHECK(same && memcmp(a, b, 12 * 23 * sizeof(float)) == 0,
        "mixln P 2 and hybrid post, post, pre: the same tensors and logits", "differ");
  free(a);
  free(b);
  ng_model_free(mix);
  ng_model_free(hyb);
}

// A hybrid growth past NG_MAX_LAYERS blocks, or to a placement other than pre
// or post, and the growth of a hybrid model without a new block placement are
// refused in one line.
static void test_hybrid_refusals(void) {
  ng_model_config c = {.vocab_size = 5, .hidden_size = 4, .intermediate_size = 4, .num_hidden_layers = 2,
                       .num_attention_heads = 1, .num_key_value_heads = 1, .head_dim = 2, .rope_theta = 1e4,
                       .rms_norm_eps = 1e-6, .norm_placement = NG_NORM_POST}, out;
  static int64_t from_old[NG_MAX_LAYERS + 1];
  const ng_norm_placement lns = NG_NORM_LNS;
  int deep = ng_grow_config(&c, NG_MAX_LAYERS + 1, NG_GROW_TOP, &PRE_BLOCKS, &out, from_old);
  CHECK(deep != 0 && strstr(ng_error(), "growth.new_block_placement") && !strchr(ng_error(), '\n'),
        "hybrid growth past NG_MAX_LAYERS blocks is refused", "%s", ng_error());
  int other = ng_grow_config(&c, 3, NG_GROW_TOP, &lns, &out, from_old);
  CHECK(other != 0 && strstr(ng_error(), "growth.layer_placements[2]") && !strchr(ng_error(), '\n'),
        "hybrid growth of lns blocks is refused", "%s", ng_error());
  NG_ASSERT(ng_grow_config(&c, 3, NG_GROW_TOP, &PRE_BLOCKS, &out, from_old) == 0);
  int own = ng_grow_config(&out, 4, NG_GROW_TOP, NULL, &c, from_old);
  CHECK(own != 0 && strstr(ng_error(), "growth.new_block_placement: a hybrid model") && !strchr(ng_error(), '\n'),
        "a hybrid model grown without a new block placement is refused", "%s", ng_error());
}

// DeepNet's beta at random init: v, o, gate, up, down scaled; q, k and norms not.
static void test_deepnorm_init(void) {
  ng_model *a = small_model(NG_NORM_DEEPNORM, 2, 9), *b = small_model(NG_NORM_DEEPNORM, 2, 9);
  ng_model_deepnorm_init(b, 6);
  float beta = (float)pow(48.0, -0.25);
  bool ok = true;
  for (int i = 0; i < a->n_params; i++) {
    const ng_param *p = &a->params[i], *q = &b->params[i];
    bool scaled = strstr(p->name, "v_proj") || strstr(p->name, "o_proj") || strstr(p->name, "mlp.");
    // exact: the init multiplies each weight by the same float beta (one rounding)
    for (size_t j = 0; j < p->numel; j++) ok &= q->data[j] == (scaled ? p->data[j] * beta : p->data[j]);
  }
  CHECK(ok, "deepnorm init: beta = (8 L_final)^(-1/4) on v_proj, o_proj and the MLP only", "mismatch");
  ng_model_free(a);
  ng_model_free(b);
}


static void test_copies(void) {
  ng_model *m = small_model(NG_NORM_POST, 2, 3), *g, *teacher = small_model(NG_NORM_PRE, 5, 4);
  ng_rng r;
  ng_rng_seed(&r, 1);
  int64_t from_old[4], tl[2] = {4, 1};
  ng_grow_rule copy = {NG_GROW_INTERLEAVE, NG_INIT_COPY_BELOW, 0.3, &r, NULL, NULL, false, NULL};
  NG_ASSERT(ng_model_grow(m, 4, &copy, &g, from_old) == 0);
  CHECK(same_block(g, 1, g, 0) && same_block(g, 3, g, 2) && same_block(g, 0, m, 0) && same_block(g, 2, m, 1),
        "copy_below duplicates the block below exactly; old blocks kept", "tensors differ");
  // exact: gates are set, not computed
  CHECK(g->growth_gate[1] == 1.0f && g->growth_gate[3] == 1.0f, "copy_below blocks are plain (gate 1)", "gates %g %g", g->growth_gate[1], g->growth_gate[3]);
  ng_model_free(g);
  ng_grow_rule from_teacher = {NG_GROW_TOP, NG_INIT_TEACHER, 0.3, &r, teacher, tl, false, NULL};
  NG_ASSERT(ng_model_grow(m, 4, &from_teacher, &g, from_old) == 0);
  // A Post-Norm block from a Pre-Norm teacher: every shared tensor copied;
  // post_feedforward_layernorm keeps its init (gains 1). Exact: copies and set values.
  bool shared = true;
  for (int i = 0; i < g->n_params; i++) {
    const ng_param *p = &g->params[i];
    if (p->layer != 2) continue;
    const ng_param *q = ng_model_find_in_layer(teacher, p, 4);
    shared &= q ? memcmp(p->data, q->data, p->numel * 4) == 0 : p->data[0] == 1.0f && p->data[p->numel - 1] == 1.0f;
  }
  CHECK(shared, "teacher init copies teacher layers 4 and 1 into the new blocks", "tensors differ");
  ng_model_free(g);
  ng_model_free(m);
  ng_model_free(teacher);
}

static void test_optimizer_follows(void) {
  ng_model *m = small_model(NG_NORM_PRE, 2, 5), *g;
  ng_adamw *o = ng_adamw_create(m);
  for (int i = 0; i < m->n_params; i++) {
    for (size_t j = 0; j < m->params[i].numel; j++) o->m[i][j] = (float)(i + 1), o->v[i][j] = (float)(2 * i + 1);
    o->steps[i] = 7;
  }
  ng_rng r;
  ng_rng_seed(&r, 1);
  ng_grow_rule rule = {NG_GROW_MIDDLE, NG_INIT_RANDOM, 0.3, &r, NULL, NULL, false, NULL};
  int64_t from_old[3];
  NG_ASSERT(ng_model_grow(m, 3, &rule, &g, from_old) == 0);  // blocks: old 0, new, old 1
  ng_adamw *keep = ng_adamw_regrow(m, o, g, from_old, false), *reset = ng_adamw_regrow(m, o, g, from_old, true);
  bool ok = true;
  for (int i = 0; i < g->n_params; i++) {
    const ng_param *p = &g->params[i];
    int64_t src = p->layer < 0 ? -1 : from_old[p->layer];
    const ng_param *q = p->layer >= 0 && src < 0 ? NULL : ng_model_find_in_layer(m, p, src);
    float want_m = q ? (float)(q - m->params + 1) : 0.0f;  // exact: moments copied or zeroed
    ok &= keep->m[i][0] == want_m && keep->steps[i] == (q ? 7 : 0) && reset->m[i][0] == 0.0f && reset->steps[i] == 0;
  }
  CHECK(ok, "AdamW moments and steps follow old blocks; new blocks and resets start at zero", "mismatch");
  ng_adamw_free(g, keep);
  ng_adamw_free(g, reset);
  ng_adamw_free(m, o);
  ng_model_free(g);
  ng_model_free(m);
}

// A small model of placement np with tied or untied embeddings; its stream
// grows large (embeddings of std 3) so that a rescale has work to do.
static ng_model *stream_model(ng_norm_placement np, bool tied) {
  ng_model *base = small_model(np, 3, 11);
  ng_model_config c = base->cfg;
  c.tie_word_embeddings = tied;
  ng_model *m = ng_model_create(be, &c, true);
  NG_ASSERT(ng_model_copy_block(m, 0, base, 0) == 0 && ng_model_copy_block(m, 1, base, 1) == 0 &&
            ng_model_copy_block(m, 2, base, 2) == 0 && ng_model_copy_io(m, base) == 0);
  ng_rng r;
  ng_rng_seed(&r, 12);
  ng_rng_fill_normal(&r, m->w.embed_tokens, (size_t)(c.vocab_size * c.hidden_size), 0.0, 3.0);
  m->growth_gate[1] = 0.5f;  // a gated block scales with the rest
  ng_model_free(base);
  return m;
}

static double stream_rms_of(ng_model *m) {
  int32_t tokens[2 * 6] = {1, 5, 7, 2, 9, 22, 0, 3, 3, 14, 8, 11};
  return ng_stream_rms(m, tokens, 2, 6);
}

// The stream rescaled to unit RMS: the logits stay (up to the norms' eps), for
// Pre-Norm and LNS, tied and untied; the moments follow the gradients' scale.
static void test_rescale_stream(void) {
  for (int np = 0; np < 3; np += 2)  // pre, lns
    for (int tied = 0; tied < 2; tied++) {
      ng_model *m = stream_model((ng_norm_placement)np, tied);
      float *before = logits_of(m);
      double r0 = stream_rms_of(m);
      ng_rescale_stream(m, NULL, 1.0 / r0);
      double r1 = stream_rms_of(m);
      float *after = logits_of(m);
      double d = ng_test_max_rel(after, before, 12 * 23);
      char name[128];
      snprintf(name, sizeof name, "rescale_stream (%s, %s): unit RMS at the head's input, same logits",
               np ? "lns" : "pre", tied ? "tied" : "untied");
      CHECK(r0 > 3.0 && fabs(r1 - 1.0) < 1e-5 && d < 1e-5, name, "RMS %.4g -> %.7g, logits max rel change %.3e", r0,
            r1, d);
      free(before);
      free(after);
      ng_model_free(m);
    }
  ng_model *m = stream_model(NG_NORM_PRE, true);
  ng_adamw *o = ng_adamw_create(m);
  for (int i = 0; i < m->n_params; i++)
    for (size_t j = 0; j < m->params[i].numel; j++) o->m[i][j] = 1.0f, o->v[i][j] = 1.0f;
  ng_rescale_stream(m, o, 0.5);
  bool ok = true;
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    bool writer = p->layer >= 0 ? strstr(p->name, "o_proj") || strstr(p->name, "down_proj")
                                : strcmp(p->name, "model.embed_tokens.weight") == 0;
    float s = writer ? 0.5f : strcmp(p->name, "model.norm.weight") == 0 ? 2.0f : 1.0f;
    // exact: 1 scaled by powers of two
    ok &= o->m[i][0] == 1.0f / s && o->v[i][p->numel - 1] == 1.0f / (s * s);
  }
  CHECK(ok, "rescale_stream: moments of a tensor scaled by s become m / s, v / s^2", "mismatch");
  ng_adamw_free(m, o);
  ng_model_free(m);
  ng_model_config c = {0};
  c.norm_placement = NG_NORM_POST;
  c.final_norm = true;
  int post = ng_stream_rescalable(&c, "x");
  CHECK(post != 0 && strstr(ng_error(), "Post-Norm"), "rescale_stream refused for Post-Norm", "%s", ng_error());
  c.norm_placement = NG_NORM_PRE;
  c.final_norm = false;
  int no_final = ng_stream_rescalable(&c, "x");
  CHECK(no_final != 0 && strstr(ng_error(), "final_norm"), "rescale_stream refused without a final norm", "%s", ng_error());
}

// depth_scaled: new block l's o_proj and down_proj are those of the same
// random init times 1/sqrt(2 l); a gated new block still keeps the function.
static void test_depth_scaled(void) {
  ng_model *m = small_model(NG_NORM_PRE, 2, 9), *plain, *scaled;
  int64_t from_old[4];
  for (int gate = 0; gate < 2; gate++) {
    ng_rng r1, r2;
    ng_rng_seed(&r1, 4);
    ng_rng_seed(&r2, 4);
    ng_grow_init init = gate ? NG_INIT_GATE : NG_INIT_RANDOM;
    ng_grow_rule a = {NG_GROW_TOP, init, 0.3, &r1, NULL, NULL, false, NULL}, b = {NG_GROW_TOP, init, 0.3, &r2, NULL, NULL, true, NULL};
    NG_ASSERT(ng_model_grow(m, 4, &a, &plain, from_old) == 0 && ng_model_grow(m, 4, &b, &scaled, from_old) == 0);
    bool ok = true;
    for (int i = 0; i < plain->n_params; i++) {
      const ng_param *p = &plain->params[i], *q = &scaled->params[i];
      bool writer = strstr(p->name, "o_proj") || strstr(p->name, "down_proj");
      float s = p->layer >= 2 && writer ? (float)(1.0 / sqrt(2.0 * (double)(p->layer + 1))) : 1.0f;
      // exact: the same draws times the same float s (one rounding)
      for (size_t j = 0; j < p->numel; j++) ok &= q->data[j] == s * p->data[j];
    }
    char name[96];
    snprintf(name, sizeof name, "depth_scaled (%s): new block l's o_proj, down_proj times 1/sqrt(2 l)",
             gate ? "gate" : "random");
    CHECK(ok, name, "tensors differ");
    if (gate) {
      float *before = logits_of(m), *after = logits_of(scaled);
      double d = max_diff(before, after, 12 * 23);
      // exact: see logits_of
      CHECK(d == 0.0, "depth_scaled gate init keeps the logits exactly", "max change %.3e", d);
      free(before);
      free(after);
    }
    ng_model_free(plain);
    ng_model_free(scaled);
  }
  ng_model_free(m);
}

// A 2-block model with layer scales: its scales drawn like its gains (as trained
// ones would be), new blocks' scales at `init`.
static ng_model *layer_scale_model(ng_norm_placement np, double init) {
  ng_model *base = small_model(np, 2, 7);
  ng_model_config c = base->cfg;
  c.layer_scale = true;
  c.layer_scale_init = init;
  ng_model_free(base);
  ng_model *m = ng_model_create(be, &c, true);
  ng_rng r;
  ng_rng_seed(&r, 7);
  ng_model_init_random(m, &r, 0.3);
  for (int i = 0; i < m->n_params; i++)
    if (m->params[i].ndim == 1) ng_rng_fill_normal(&r, m->params[i].data, m->params[i].numel, 1.0, 0.3);
  return m;
}

// Grows a layer-scale model to 4 blocks; the max logit change, and whether
// every new block's scales equal `init` and every old block's are kept.
static double layer_scale_change(ng_norm_placement np, double init, ng_grow_init how,
                                 ng_grow_position pos, bool *scales_ok) {
  ng_model *m = layer_scale_model(np, init), *g;
  int64_t from_old[4];
  double d = grow_into(m, how, pos, &g, from_old);
  *scales_ok = true;
  for (int i = 0; i < g->n_params; i++) {
    const ng_param *p = &g->params[i];
    if (!ng_param_is_layer_scale(p)) continue;
    int64_t src = from_old[p->layer];
    const ng_param *q = src >= 0 ? ng_model_find_in_layer(m, p, src) : NULL;
    for (size_t k = 0; k < p->numel; k++)  // exact: copied, or set to init
      *scales_ok &= p->data[k] == (q ? q->data[k] : (float)init);
  }
  ng_model_free(m);
  ng_model_free(g);
  return d;
}

// LayerScale at a growth: new blocks' scales start at layer_scale_init under
// every init (copy_below too) and old blocks keep theirs; with init 0 a new
// block is the identity in Pre-Norm, LNS (on top) and sandwich (the scale is on
// its normed sublayer outputs): the logits stay exactly.
static void test_layer_scale_growth(void) {
  static const struct {
    ng_norm_placement np;
    ng_grow_init how;
    ng_grow_position pos;
    const char *what;
  } exact[] = {{NG_NORM_PRE, NG_INIT_RANDOM, NG_GROW_TOP, "pre, random, top"},
               {NG_NORM_PRE, NG_INIT_COPY_BELOW, NG_GROW_INTERLEAVE, "pre, copy_below, interleave"},
               {NG_NORM_LNS, NG_INIT_RANDOM, NG_GROW_TOP, "lns, random, top"},
               {NG_NORM_SANDWICH, NG_INIT_RANDOM, NG_GROW_INTERLEAVE, "sandwich, random, interleave"},
               {NG_NORM_SANDWICH, NG_INIT_COPY_BELOW, NG_GROW_TOP, "sandwich, copy_below, top"}};
  char name[160];
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
    bool scales;
    double d = layer_scale_change(exact[i].np, 0.0, exact[i].how, exact[i].pos, &scales);
    snprintf(name, sizeof name, "layer scales at init 0 keep the logits exactly (%s)", exact[i].what);
    // exact: see logits_of
    CHECK(d == 0.0, name, "max change %.3e", d);
    snprintf(name, sizeof name, "new blocks' scales at layer_scale_init, old ones kept (%s)",
             exact[i].what);
    CHECK(scales, name, "scales differ");
  }
  bool scales;
  double post = layer_scale_change(NG_NORM_POST, 0.0, NG_INIT_RANDOM, NG_GROW_INTERLEAVE, &scales);
  // A Post-Norm block with zero scales still computes y = N_pf(N_pa(x)): below
  // an old block it hands that block a renormed input (on top, with the final
  // norm after it and fresh gains 1, only eps would show).
  CHECK(post > 1e-3 && scales,
        "layer scales at init 0 do NOT keep the function under Post-Norm (interleave)",
        "max change %.3e", post);
  // Hybrid growth with layer scales at 0, random init interleaved: new pre
  // blocks on a post model are identities, new post blocks on a pre model are
  // not; the growth's log line says so.
  for (int k = 0; k < 2; k++) {
    ng_model *m = layer_scale_model(k ? NG_NORM_PRE : NG_NORM_POST, 0.0), *g;
    ng_rng r;
    ng_rng_seed(&r, 8);
    ng_grow_rule rule = {NG_GROW_INTERLEAVE, NG_INIT_RANDOM, 0.3, &r, NULL, NULL, false,
                         k ? &POST_BLOCKS : &PRE_BLOCKS};
    int64_t from_old[4];
    float *before = logits_of(m);
    NG_ASSERT(ng_model_grow(m, 4, &rule, &g, from_old) == 0);
    float *after = logits_of(g);
    double d = max_diff(before, after, 12 * 23);
    const char *why = ng_grow_hybrid_change(&m->cfg, &rule);
    // exact: see logits_of
    CHECK(k ? d > 1e-3 && why != NULL : d == 0.0 && why == NULL,
          k ? "layer scales at init 0: post blocks grown on a pre model change the function, and say so"
            : "layer scales at init 0: pre blocks grown on a post model keep the logits exactly",
          "max change %.3e; %s", d, why ? why : "no reason logged");
    free(before);
    free(after);
    ng_model_free(m);
    ng_model_free(g);
  }
  double small = layer_scale_change(NG_NORM_PRE, 0.01, NG_INIT_RANDOM, NG_GROW_TOP, &scales);
  double unit = layer_scale_change(NG_NORM_PRE, 1.0, NG_INIT_RANDOM, NG_GROW_TOP, &scales);
  snprintf(name, sizeof name,
           "layer scales at init 0.01 change the logits less than at 1 (pre, random: %.2e vs %.2e)",
           small, unit);
  CHECK(small > 0.0 && small < 0.1 * unit && scales, name, "not smaller");
}

int main(void) {
  be = ng_backend_cpu();
  test_layouts();
  test_function_preservation();
  test_preservation_table();
  test_teacher_by_role();
  test_deepnorm_init();
  test_mixln_block_moves();
  test_hybrid_placements();
  test_hybrid_refusals();
  test_mixln_is_hybrid();
  test_copies();
  test_optimizer_follows();
  test_rescale_stream();
  test_depth_scaled();
  test_layer_scale_growth();
  return TEST_RESULT();
}
