// JSON that normgrow writes reads back exactly: numbers print to the shortest
// decimal that round-trips (cJSON alone keeps 15 digits), integers are exact
// JSON integers (|n| <= 2^53 - 1) or refused, and the round-trip invariants
// hold: a resolved run config parses back to the same config, a checkpoint's
// model metadata and training state read back bit for bit. Also the parse-time
// bounds that keep a run's counts inside int64 (stage token sums, parameters).
#include <cJSON.h>
#include <float.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "run_compare.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/config.h"
#include "normgrow/fileio.h"
#include "normgrow/model.h"
#include "normgrow/rng.h"
#include "normgrow/run.h"

static char dir[64];

// ---------------------------------------------------------------- numbers

static void test_print_exact(void) {
  const double v[] = {0.1 * 3, 10000.000000000002, 0.30000000000000004, 0.1 * 3 * 0.01,
                      (double)NG_JSON_MAX_INT, 9007199254740992.0, 1e-6 * 3, -0.0,
                      5e-324, DBL_MIN, DBL_MAX, 1.0 / 3.0, 2.0 / 3.0, 123456789.123456789};
  int n = (int)(sizeof v / sizeof v[0]);
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
  char *text = ng_json_print(a, false);
  cJSON *back = cJSON_Parse(text);
  bool same = cJSON_GetArraySize(back) == n;
  int bad = -1;
  for (int i = 0; same && i < n; i++)
    if (!(same = ng_same_bits(cJSON_GetArrayItem(back, i)->valuedouble, v[i]))) bad = i;
  CHECK(same, "numbers written as JSON read back bit for bit (0.1 x 3, 10000.000000000002, 2^53 - 1, -0, subnormals, DBL_MAX)",
        "entry %d: %.17g came back as %.17g in %s", bad, bad >= 0 ? v[bad] : 0.0,
        bad >= 0 ? cJSON_GetArrayItem(back, bad)->valuedouble : 0.0, text);
  free(text);
  cJSON_Delete(back);
  cJSON_Delete(a);

  // Shortest: no digits beyond those that round-trip; non-finite as null, as before.
  cJSON *o = cJSON_Parse("{\"a\": 0.1, \"b\": 1000, \"c\": [1e-6, 0.5]}");
  cJSON_AddItemToObject(o, "d", cJSON_CreateNumber(NAN));
  text = ng_json_print(o, false);
  CHECK(strcmp(text, "{\"a\":0.1,\"b\":1000,\"c\":[1e-06,0.5],\"d\":null}") == 0,
        "numbers print in their shortest round-trip form (0.1, not 0.10000000000000001)", "%s", text);
  char *twice = ng_json_print(o, false);
  CHECK(strcmp(text, twice) == 0 && cJSON_IsNumber(cJSON_GetObjectItem(o, "a")),
        "printing leaves the tree as it was", "%s then %s", text, twice);
  free(text);
  free(twice);
  cJSON_Delete(o);
}

static int parse_int(const char *json, int64_t min, int64_t max, int64_t *out) {
  cJSON *o = cJSON_Parse(json);
  NG_ASSERT(o);
  int rc = ng_json_int(o, "t", "n", min, max, out);
  cJSON_Delete(o);
  return rc;
}

static void test_int_bounds(void) {
  int64_t v = 0;
  // 2^61 against the bound INT64_MAX / 4 = 2^61 - 1: a bound compared in double admits it.
  int rc = parse_int("{\"n\": 2305843009213693952}", 0, INT64_MAX / 4, &v);
  CHECK(rc != 0 && strstr(ng_error(), "t.n"), "2^61 is refused under a bound of INT64_MAX / 4",
        "rc %d, n %lld, %s", rc, (long long)v, ng_error());
  rc = parse_int("{\"n\": 9007199254740992}", 0, INT64_MAX, &v);
  CHECK(rc != 0 && strstr(ng_error(), "2^53"), "2^53 is refused: JSON does not hold the integers around it exactly",
        "rc %d, %s", rc, ng_error());
  rc = parse_int("{\"n\": -9007199254740992}", INT64_MIN, 0, &v);
  CHECK(rc != 0 && strstr(ng_error(), "2^53"), "-2^53 is refused", "rc %d, %s", rc, ng_error());
  rc = parse_int("{\"n\": 1e300}", 0, INT64_MAX, &v);
  CHECK(rc != 0 && strstr(ng_error(), "t.n"), "1e300 is refused (no out-of-range cast)", "rc %d, %s", rc, ng_error());
  rc = parse_int("{\"n\": 9007199254740991}", 0, INT64_MAX, &v);
  CHECK(rc == 0 && v == NG_JSON_MAX_INT, "2^53 - 1 is read exactly", "rc %d, %lld, %s", rc, (long long)v, ng_error());
  rc = parse_int("{\"n\": 11}", 0, 10, &v);
  CHECK(rc != 0 && strstr(ng_error(), "t.n: 11 is outside [0, 10]"), "an integer above its bound is refused, naming it",
        "%s", ng_error());
}

// A range message shows the value and its bounds as a person writes them: the
// shortest decimal that reads back to each double, and the large integer
// limits by name (a bound past 2^53 - 1 is 2^53 - 1: nothing above it is read).
static void test_range_messages(void) {
  static const struct {
    const char *json;
    double min, max;
    const char *want;
  } nums[] = {
      {"{\"x\": -0.003}", 0.0, 10.0, "t.x: -0.003 is outside [0, 10]"},
      {"{\"x\": 1}", 0.0, 0.999999999, "t.x: 1 is outside [0, 0.999999999]"},
      {"{\"x\": 0.30000000000000004}", 0.0, 0.1 * 3 - 0.1, "t.x: 0.30000000000000004 is outside [0, 0.20000000000000004]"},
  };
  for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
    cJSON *o = cJSON_Parse(nums[i].json);
    double v;
    int rc = ng_json_num(o, "t", "x", nums[i].min, nums[i].max, &v);
    cJSON_Delete(o);
    char name[160];
    snprintf(name, sizeof name, "range message \"%s\"", nums[i].want);
    CHECK(rc != 0 && strcmp(ng_error(), nums[i].want) == 0, name, "got \"%s\"", ng_error());
  }
  static const struct {
    const char *json;
    int64_t min, max;
    const char *want;
  } ints[] = {
      {"{\"n\": 0}", 1, INT64_MAX / 4, "t.n: 0 is outside [1, 2^53 - 1]"},
      {"{\"n\": 0}", 1, INT32_MAX, "t.n: 0 is outside [1, 2^31 - 1]"},
      {"{\"n\": 2000000}", 1, 1 << 20, "t.n: 2000000 is outside [1, 2^20]"},
      {"{\"n\": 5000}", 1, 4096, "t.n: 5000 is outside [1, 4096]"},
      {"{\"n\": 1}", -5, 0, "t.n: 1 is outside [-5, 0]"},
  };
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
    int64_t v;
    int rc = parse_int(ints[i].json, ints[i].min, ints[i].max, &v);
    char name[160];
    snprintf(name, sizeof name, "range message \"%s\"", ints[i].want);
    CHECK(rc != 0 && strcmp(ng_error(), ints[i].want) == 0, name, "got \"%s\"", ng_error());
  }
}

// ---------------------------------------------------------------- run configs

// Values a script computes: each is one ulp or so from the decimal a person writes.
static const char *crafted_run =
    "{\"name\": \"r\", \"seed\": 9007199254740991, \"run_dir\": \"runs/r\", \"mode\": \"distill\","
    " \"data\": {\"train\": \"t.bin\", \"val\": \"v.bin\", \"batch\": 4, \"seq\": 8},"
    " \"model\": {\"vocab_size\": 64, \"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 2,"
    "   \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 4, \"rope_theta\": 10000.000000000002,"
    "   \"rms_norm_eps\": 0.30000000000000004, \"tie_word_embeddings\": true, \"norm_placement\": \"post\", \"final_norm\": true},"
    " \"teacher\": \"t.safetensors\", \"loss\": {\"kd_weight\": 0.30000000000000004, \"temperature\": 2.0000000000000004,"
    " \"divergence\": \"jsd\", \"beta\": 0.30000000000000004},"
    " \"optim\": {\"beta1\": 0.9000000000000001, \"beta2\": 0.9500000000000001, \"eps\": 3.0000000000000004e-08,"
    "   \"weight_decay\": 0.10000000000000002, \"grad_clip\": 1.0000000000000002},"
    " \"lr\": {\"peak\": 0.0030000000000000005, \"floor\": 0.00030000000000000003, \"warmup_tokens\": 64, \"shape\": \"cosine\"},"
    " \"init\": {\"std\": 0.020000000000000004},"
    " \"growth\": {\"position\": \"interleave\", \"init\": \"gate\", \"gate_steps\": 10},"
    " \"stages\": [{\"depth\": 1, \"tokens\": 320}, {\"depth\": 2, \"tokens\": 320,"
    "   \"lr\": {\"peak\": 0.0030000000000000005, \"floor\": 0, \"warmup_tokens\": 0, \"shape\": \"linear\"}}],"
    " \"eval\": {\"every_steps\": 9007199254740991, \"batches\": 2}, \"checkpoint_every_steps\": 7}";

// parse(text) -> its resolved JSON -> parse again: the same config.
static void check_round_trip(const char *name, const char *text) {
  ng_run_config a, b;
  int rc = ng_run_config_parse(text, name, &a);
  if (rc) {
    CHECK(false, name, "does not parse: %s", ng_error());
    return;
  }
  rc = ng_run_config_parse(a.json, "resolved", &b);
  CHECK(rc == 0 && ng_same_run(&a, &b) && strcmp(a.json, b.json) == 0, name, "%s",
        rc ? ng_error() : "the resolved config reads back different");
  if (rc == 0) ng_run_config_free(&b);
  ng_run_config_free(&a);
}

static void test_run_round_trip(void) {
  ng_run_config rc;
  NG_ASSERT(ng_run_config_parse(crafted_run, "crafted", &rc) == 0);
  // exact: the text holds each product in digits that read back to it (strtod
  // and the compiler both round correctly)
  CHECK(rc.stages[0].lr.peak == 0.1 * 3 * 0.01 && rc.stages[0].lr.peak != 0.003 &&
            rc.model.rope_theta != 10000.0 && rc.optim.beta1 != 0.9 &&
            rc.model.rms_norm_eps == 0.1 * 3 && rc.eval_every == NG_JSON_MAX_INT &&
            rc.loss.divergence == NG_DIV_JSD && rc.loss.beta == 0.1 * 3,
        "the crafted config holds the values a script computes", "peak %.17g", rc.stages[0].lr.peak);
  ng_run_config_free(&rc);
  check_round_trip("resolved run config parses back to the same config (0.1 x 3 x 0.01, 10000.000000000002, 2^53 - 1)",
                   crafted_run);
  const char *root = getenv("NG_ROOT");
  char pattern[600];
  snprintf(pattern, sizeof pattern, "%s/configs/*/*.json", root ? root : ".");
  glob_t g;
  int n = 0;
  if (glob(pattern, 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) {
      char *text = NULL;
      cJSON *j = ng_read_file(g.gl_pathv[i], 1 << 20, &text, NULL) == 0 ? cJSON_Parse(text) : NULL;
      if (j && cJSON_GetObjectItem(j, "stages")) {  // a run config, not a model config
        char name[700];
        snprintf(name, sizeof name, "round trip of %s", strstr(g.gl_pathv[i], "configs/"));
        check_round_trip(name, text);
        n++;
      }
      cJSON_Delete(j);
      free(text);
    }
    globfree(&g);
  }
  CHECK(n >= 10, "the repository's run configs were all round-tripped", "%d found by %s", n, pattern);
}

// --extend-tokens rewrites config.json: every earlier value reads back exactly,
// and the new stage runs at the last stage's floor.
static void test_extend_exact(void) {
  ng_run_config a, b;
  NG_ASSERT(ng_run_config_parse(crafted_run, "crafted", &a) == 0);
  int rc = ng_run_config_extend(&a, 640, &b);
  bool same = rc == 0 && b.n_stages == a.n_stages + 1;
  for (int i = 0; same && i < a.n_stages; i++)
    same = a.stages[i].lr.peak == b.stages[i].lr.peak && a.stages[i].lr.floor == b.stages[i].lr.floor &&
           a.stages[i].lr.warmup_tokens == b.stages[i].lr.warmup_tokens &&
           a.stages[i].tokens == b.stages[i].tokens;
  same = same && b.model.rope_theta == a.model.rope_theta &&
         b.model.rms_norm_eps == a.model.rms_norm_eps && b.optim.beta1 == a.optim.beta1 &&
         b.eval_every == a.eval_every;
  CHECK(same, "an extended config keeps every value of the crafted one to the bit", "%s",
        rc ? ng_error() : "a value changed");
  if (rc == 0) ng_run_config_free(&b);
  ng_run_config_free(&a);
}

// The crafted config with `from` replaced by `to`: must fail naming `want`.
static void expect_bad_run(const char *name, const char *from, const char *to, const char *want) {
  const char *at = strstr(crafted_run, from);
  NG_ASSERT(at);
  char text[8192];
  snprintf(text, sizeof text, "%.*s%s%s", (int)(at - crafted_run), crafted_run, to, at + strlen(from));
  ng_run_config rc;
  int r = ng_run_config_parse(text, "bad run", &rc);
  CHECK(r != 0 && strstr(ng_error(), want), name, "rc %d: %s", r, ng_error());
  if (r == 0) ng_run_config_free(&rc);
}

static void test_run_bounds(void) {
  const char *stages = "\"stages\": [{\"depth\": 1, \"tokens\": 320}, {\"depth\": 2, \"tokens\": 320,";
  expect_bad_run("stage tokens of 2^61 are refused (beyond 2^53 - 1)", stages,
                 "\"stages\": [{\"depth\": 1, \"tokens\": 2305843009213693952}, {\"depth\": 2, \"tokens\": 320,",
                 "stages[0].tokens");
  expect_bad_run("stage tokens summing past 2^53 - 1 are refused", stages,
                 "\"stages\": [{\"depth\": 1, \"tokens\": 4503599627370496}, {\"depth\": 2, \"tokens\": 4503599627370496,",
                 "stages[1].tokens");
  expect_bad_run("tokens x depth summing past 2^53 - 1 are refused", stages,
                 "\"stages\": [{\"depth\": 1, \"tokens\": 320}, {\"depth\": 2, \"tokens\": 4503599627370496,",
                 "layer-tokens");
  expect_bad_run("eval.every_steps of 2^53 is refused", "\"every_steps\": 9007199254740991",
                 "\"every_steps\": 9007199254740992", "eval.every_steps");
  expect_bad_run("activations of a step beyond 2^52 values are refused (plan's int64 counts wrapped)",
                 "\"batch\": 4, \"seq\": 8}, \"model\": {\"vocab_size\": 64,",
                 "\"batch\": 4096, \"seq\": 1048576}, \"model\": {\"vocab_size\": 2147483647,", "activation values");
  expect_bad_run("a model of more than 2^40 parameters is refused",
                 "\"hidden_size\": 16, \"intermediate_size\": 24",
                 "\"hidden_size\": 1048576, \"intermediate_size\": 2147483647", "parameters");
}

// ---------------------------------------------------------------- checkpoints

static void test_checkpoint_round_trip(void) {
  ng_backend *be = ng_backend_cpu();
  ng_model_config c = {.vocab_size = 32, .hidden_size = 8, .intermediate_size = 12, .num_hidden_layers = 2,
                       .num_attention_heads = 2, .num_key_value_heads = 1, .head_dim = 4,
                       .rope_theta = 10000.000000000002, .rms_norm_eps = 0.1 * 3,
                       .tie_word_embeddings = false, .final_norm = true, .norm_placement = NG_NORM_POST};
  ng_model *m = ng_model_create(be, &c, true);
  ng_adamw *o = ng_adamw_create(m);
  int64_t origin[2] = {-1, 3};
  ng_train_state st = {.step = 9, .stage = 1, .step_in_stage = 4, .tokens = NG_JSON_MAX_INT,
                       .layer_tokens = NG_JSON_MAX_INT, .flops = 1e15 * 0.1 * 3, .gate_origin = origin,
                       .gate_steps = NG_JSON_MAX_INT};
  ng_rng_seed(&st.rng, 77);
  for (int i = 0; i < o->n; i++) o->steps[i] = i % 10;
  char path[128];
  snprintf(path, sizeof path, "%s/exact.safetensors", dir);
  NG_ASSERT(ng_checkpoint_save(path, m, o, &st) == 0);
  ng_model *m2 = NULL;
  ng_adamw *o2 = NULL;
  ng_train_state st2 = {0};
  int rc = ng_checkpoint_load(path, be, true, &m2, &o2, &st2);
  bool cfg_same = rc == 0 && ng_same_model(&m2->cfg, &m->cfg);
  CHECK(cfg_same, "a checkpoint's model metadata reads back bit-exact (rope_theta 10000.000000000002, rms_norm_eps 0.1 x 3)",
        "%s", rc ? ng_error() : "config differs");
  bool st_same = rc == 0 && st2.step == st.step && st2.stage == st.stage &&
                 st2.step_in_stage == st.step_in_stage && st2.tokens == st.tokens &&
                 st2.layer_tokens == st.layer_tokens && ng_same_bits(st2.flops, st.flops) &&
                 memcmp(&st2.rng, &st.rng, sizeof st.rng) == 0 && st2.gate_origin[0] == -1 &&
                 st2.gate_origin[1] == 3 && st2.gate_steps == st.gate_steps && memcmp(o2->steps, o->steps, (size_t)o->n * sizeof(int64_t)) == 0;
  CHECK(st_same, "a checkpoint's training state reads back exactly (flops 3e14 x (0.1 x 3), counts of 2^53 - 1)",
        "%s", rc ? ng_error() : "state differs");
  if (rc == 0) {
    ng_adamw_free(m2, o2);
    ng_model_free(m2);
    free(st2.gate_origin);
  }
  ng_adamw_free(m, o);
  ng_model_free(m);
}

// ---------------------------------------------------------------- placements

// A model config of three blocks, Pre-Norm.
static ng_model_config toy_model(void) {
  return (ng_model_config){.vocab_size = 7, .hidden_size = 4, .intermediate_size = 6,
                           .num_hidden_layers = 3, .num_attention_heads = 2,
                           .num_key_value_heads = 1, .head_dim = 2, .rope_theta = 1e4,
                           .rms_norm_eps = 1e-6, .final_norm = true};
}

// Every placement's name reads back to it through a model config; an unknown
// one is refused naming the field; a model of each placement, with and
// without layer scales, has exactly the weights its block layout derives (the
// parameter array is bounded by it: NG_BLOCK_MAX_WEIGHTS covers the largest).
static void test_placements(void) {
  ng_model_config c = toy_model();
  int most = 0;  // the most weights of a block
  for (int k = 0; k <= 2 * NG_NORM_LAST + 1; k++) {
    int p = k / 2;
    c.norm_placement = (ng_norm_placement)p;
    c.layer_scale = k % 2 == 1;
    c.layer_scale_init = c.layer_scale ? 0.5 : 0.0;
    c.deepnorm_alpha = p == NG_NORM_DEEPNORM ? 1.5 : 0.0;
    c.mixln_post_layers = p == NG_NORM_MIXLN ? 2 : 0;
    for (int64_t l = 0; l < c.num_hidden_layers; l++)  // hybrid: post, pre, post
      c.layer_placements[l] = l % 2 ? NG_NORM_PRE : NG_NORM_POST;
    cJSON *j = ng_model_config_to_json(&c);
    ng_model_config back;
    int rc = ng_model_config_parse(j, "model", &back);
    bool blocks_back = true;
    for (int64_t l = 0; rc == 0 && l < c.num_hidden_layers; l++)
      blocks_back &= ng_block_placement(&back, l) == ng_block_placement(&c, l);
    char name[96];
    snprintf(name, sizeof name, "placement %s%s reads back", ng_norm_placement_name(c.norm_placement),
             c.layer_scale ? " with layer scales" : "");
    // exact: written in digits that read back to the same double
    CHECK(rc == 0 && back.norm_placement == c.norm_placement &&
              back.deepnorm_alpha == c.deepnorm_alpha &&
              back.mixln_post_layers == c.mixln_post_layers &&
              back.layer_scale == c.layer_scale && back.layer_scale_init == c.layer_scale_init &&
              blocks_back,
          name, "rc %d, got %d", rc, (int)back.norm_placement);
    ng_model *m = ng_model_create(NULL, &c, false);
    bool blocks_ok = m->n_params == ng_model_n_weights(&c);
    for (int64_t l = 0; l < c.num_hidden_layers; l++) {
      ng_block_layout lay = ng_block_layout_of(&c, l);
      int per_block = 0;
      for (int i = 0; i < m->n_params; i++) per_block += m->params[i].layer == l;
      char in[96], ff[96], pf[96], ls[96];
      snprintf(in, sizeof in, "model.layers.%lld.input_layernorm.weight", (long long)l);
      snprintf(ff, sizeof ff, "model.layers.%lld.pre_feedforward_layernorm.weight", (long long)l);
      snprintf(pf, sizeof pf, "model.layers.%lld.post_feedforward_layernorm.weight", (long long)l);
      snprintf(ls, sizeof ls, "model.layers.%lld.mlp.layer_scale", (long long)l);
      if (lay.n_weights > most) most = lay.n_weights;
      blocks_ok = blocks_ok && per_block == lay.n_weights && lay.n_weights <= NG_BLOCK_MAX_WEIGHTS &&
                  (ng_model_find(m, in) != NULL) == lay.input_norm &&
                  (ng_model_find(m, ff) != NULL) == lay.sublayer_norms &&
                  (ng_model_find(m, pf) != NULL) == (lay.output_norm || lay.sublayer_norms) &&
                  (ng_model_find(m, ls) != NULL) == c.layer_scale;
    }
    snprintf(name, sizeof name, "placement %s%s: blocks hold their layout's weights",
             ng_norm_placement_name(c.norm_placement), c.layer_scale ? " with layer scales" : "");
    CHECK(blocks_ok, name, "%d params of %lld", m->n_params, (long long)ng_model_n_weights(&c));
    ng_model_free(m);
    cJSON_Delete(j);
  }
  CHECK(most == NG_BLOCK_MAX_WEIGHTS, "NG_BLOCK_MAX_WEIGHTS is the largest block's weights",
        "%d vs %d (sandwich with layer scales)", most, NG_BLOCK_MAX_WEIGHTS);
  c.layer_scale = false;
  c.layer_scale_init = 0.0;
  // mixln: blocks 1..P post, the others pre; lns scales by 1/sqrt(l); deepnorm's alpha
  c.norm_placement = NG_NORM_MIXLN;
  c.mixln_post_layers = 2;
  c.deepnorm_alpha = 0.0;
  CHECK(ng_block_placement(&c, 0) == NG_NORM_POST && ng_block_placement(&c, 1) == NG_NORM_POST &&
            ng_block_placement(&c, 2) == NG_NORM_PRE,
        "mixln: blocks l <= P are post, the others pre", "P = %lld", (long long)c.mixln_post_layers);
  ng_model_config hybrid = c;
  hybrid.norm_placement = NG_NORM_HYBRID;
  hybrid.mixln_post_layers = 0;
  hybrid.layer_placements[0] = hybrid.layer_placements[2] = NG_NORM_PRE;
  hybrid.layer_placements[1] = NG_NORM_POST;
  CHECK(ng_block_placement(&hybrid, 0) == NG_NORM_PRE && ng_block_placement(&hybrid, 1) == NG_NORM_POST &&
            ng_block_placement(&hybrid, 2) == NG_NORM_PRE && ng_block_layout_of(&hybrid, 1).output_norm &&
            !ng_block_layout_of(&hybrid, 1).input_norm && ng_block_layout_of(&hybrid, 2).input_norm,
        "hybrid: block l is layer_placements[l - 1]", "placements %d %d %d", (int)ng_block_placement(&hybrid, 0),
        (int)ng_block_placement(&hybrid, 1), (int)ng_block_placement(&hybrid, 2));
  ng_model_config lns = c, deep = c;
  lns.norm_placement = NG_NORM_LNS;
  lns.mixln_post_layers = 0;
  deep.norm_placement = NG_NORM_DEEPNORM;
  deep.mixln_post_layers = 0;
  deep.deepnorm_alpha = 2.5;
  // exact: 1 / sqrt(4) and the double 2.5 are floats
  CHECK(ng_block_layout_of(&lns, 3).norm_scale == 0.5f && ng_block_layout_of(&lns, 0).norm_scale == 1.0f &&
            ng_block_layout_of(&deep, 1).alpha == 2.5f && ng_block_layout_of(&deep, 1).output_norm,
        "lns's scale is 1/sqrt(l); deepnorm's residual scale is its alpha", "alpha %g", deep.deepnorm_alpha);
}

// A placement's keys: refused with one line naming the field when out of
// range, missing, or given to a placement without them.
static void test_placement_keys(void) {
  static const struct {
    const char *placement, *key, *value, *field;
  } bad[] = {
      {"deepnorm", "deepnorm_alpha", "0", "model.deepnorm_alpha"},
      {"deepnorm", "deepnorm_alpha", "-1", "model.deepnorm_alpha"},
      {"deepnorm", "deepnorm_alpha", "\"2\"", "model.deepnorm_alpha"},
      {"deepnorm", NULL, NULL, "model.deepnorm_alpha"},
      {"pre", "deepnorm_alpha", "2", "model.deepnorm_alpha"},
      {"mixln", "mixln_post_layers", "4", "model.mixln_post_layers"},
      {"mixln", "mixln_post_layers", "-1", "model.mixln_post_layers"},
      {"mixln", "mixln_post_layers", "1.5", "model.mixln_post_layers"},
      {"mixln", NULL, NULL, "model.mixln_post_layers"},
      {"post", "mixln_post_layers", "1", "model.mixln_post_layers"},
      {"hybrid", NULL, NULL, "model.layer_placements"},
      {"hybrid", "layer_placements", "[\"pre\", \"post\"]", "model.layer_placements"},
      {"hybrid", "layer_placements", "[\"pre\", \"lns\", \"post\"]", "model.layer_placements[1]"},
      {"hybrid", "layer_placements", "[\"pre\", \"post\", \"hybrid\"]", "model.layer_placements[2]"},
      {"hybrid", "layer_placements", "[\"pre\", \"post\", \"middle\"]", "model.layer_placements[2]"},
      {"hybrid", "layer_placements", "[\"pre\", \"post\", 1]", "model.layer_placements[2]"},
      {"hybrid", "layer_placements", "\"post\"", "model.layer_placements"},
      {"pre", "layer_placements", "[\"pre\", \"post\", \"pre\"]", "model.layer_placements"},
  };
  ng_model_config c = toy_model();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cJSON *j = ng_model_config_to_json(&c);
    cJSON_ReplaceItemInObject(j, "norm_placement", cJSON_CreateString(bad[i].placement));
    if (bad[i].key) cJSON_AddItemToObject(j, bad[i].key, cJSON_Parse(bad[i].value));
    ng_model_config back;
    int rc = ng_model_config_parse(j, "model", &back);
    char name[128];
    snprintf(name, sizeof name, "%s with %s = %s is refused naming the field", bad[i].placement,
             bad[i].key ? bad[i].key : "no key", bad[i].value ? bad[i].value : "-");
    CHECK(rc != 0 && strstr(ng_error(), bad[i].field) != NULL && !strchr(ng_error(), '\n'), name,
          "rc %d: %s", rc, ng_error());
    cJSON_Delete(j);
  }
}

static void test_unknown_placement(void) {
  ng_model_config c = toy_model();
  cJSON *j = ng_model_config_to_json(&c);
  cJSON_ReplaceItemInObject(j, "norm_placement", cJSON_CreateString("middle"));
  ng_model_config back;
  int rc = ng_model_config_parse(j, "model", &back);
  CHECK(rc != 0 && strstr(ng_error(), "model.norm_placement") != NULL,
        "an unknown placement is refused naming the field", "rc %d: %s", rc, ng_error());
  cJSON_Delete(j);
}

// ---------------------------------------------------------------- layer scale

// model.layer_scale_init: absent means no layer scales and is not written back
// (configs and cases without it read and print as before); present, it reads
// back bit for bit, each block holds self_attn.layer_scale and mlp.layer_scale
// [D] initialised to it, and a checkpoint keeps both; a wrong type is refused.
static void test_layer_scale(void) {
  ng_model_config c = {.vocab_size = 7, .hidden_size = 4, .intermediate_size = 6,
                       .num_hidden_layers = 2, .num_attention_heads = 2,
                       .num_key_value_heads = 1, .head_dim = 2, .rope_theta = 1e4,
                       .rms_norm_eps = 1e-6, .final_norm = true, .norm_placement = NG_NORM_PRE};
  cJSON *j = ng_model_config_to_json(&c);
  ng_model_config back;
  CHECK(!cJSON_HasObjectItem(j, "layer_scale_init") && ng_model_config_parse(j, "model", &back) == 0 &&
            !back.layer_scale,
        "a model config without layer_scale_init has no layer scales and writes none", "read back");
  cJSON_AddNumberToObject(j, "layer_scale_init", 0.1 * 3 * 0.01);
  int rc = ng_model_config_parse(j, "model", &back);
  CHECK(rc == 0 && back.layer_scale && ng_same_bits(back.layer_scale_init, 0.1 * 3 * 0.01),
        "layer_scale_init reads (0.1 x 3 x 0.01, bit for bit)", "%s", rc ? ng_error() : "value");
  cJSON *again = ng_model_config_to_json(&back);
  ng_model_config back2;
  CHECK(ng_model_config_parse(again, "model", &back2) == 0 && ng_same_model(&back, &back2),
        "layer_scale_init writes back exactly", "differs");
  cJSON_Delete(again);
  cJSON_ReplaceItemInObject(j, "layer_scale_init", cJSON_CreateString("small"));
  rc = ng_model_config_parse(j, "model", &back2);
  CHECK(rc != 0 && strstr(ng_error(), "model.layer_scale_init"),
        "a layer_scale_init that is not a number is refused naming it", "%s", rc ? ng_error() : "accepted");
  cJSON_Delete(j);

  ng_backend *be = ng_backend_cpu();
  ng_model *m = ng_model_create(be, &back, true);
  ng_rng r;
  ng_rng_seed(&r, 5);
  ng_model_init_random(m, &r, 0.5);
  const ng_param *ga = ng_model_find(m, "model.layers.1.self_attn.layer_scale");
  const ng_param *gm = ng_model_find(m, "model.layers.1.mlp.layer_scale");
  bool init = ga && gm && ga->numel == 4 && gm->numel == 4 && ga->ndim == 1;
  for (size_t i = 0; init && i < 4; i++)
    // exact: the scales are set to that float
    init = ga->data[i] == (float)back.layer_scale_init && gm->data[i] == (float)back.layer_scale_init;
  CHECK(init && m->n_params == ng_model_n_weights(&back) &&
            ng_model_n_weights(&back) == ng_model_n_weights(&c) + 2 * c.num_hidden_layers,
        "each block holds self_attn.layer_scale and mlp.layer_scale [D] at layer_scale_init",
        "%d params", m->n_params);
  for (int i = 0; i < m->n_params; i++)  // distinct values, so that a load must place each
    for (size_t k = 0; k < m->params[i].numel; k++) m->params[i].data[k] += (float)(i + k) * 1e-3f;
  char path[128];
  snprintf(path, sizeof path, "%s/layer_scale.safetensors", dir);
  NG_ASSERT(ng_checkpoint_save(path, m, NULL, NULL) == 0);
  ng_model *m2 = NULL;
  rc = ng_checkpoint_load(path, be, false, &m2, NULL, NULL);
  bool same = rc == 0 && ng_same_model(&m2->cfg, &m->cfg) && m2->n_params == m->n_params;
  for (int i = 0; same && i < m->n_params; i++)  // exact: a checkpoint stores F32 as is
    same = strcmp(m2->params[i].name, m->params[i].name) == 0 &&
           memcmp(m2->params[i].data, m->params[i].data, m->params[i].numel * sizeof(float)) == 0;
  CHECK(same, "a checkpoint keeps layer_scale_init and the layer scales", "%s",
        rc ? ng_error() : "differs");
  ng_model_free(m2);
  ng_model_free(m);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/ng_json_XXXXXX");
  NG_ASSERT(mkdtemp(dir));
  test_print_exact();
  test_placement_keys();
  test_unknown_placement();
  test_int_bounds();
  test_range_messages();
  test_run_round_trip();
  test_extend_exact();
  test_run_bounds();
  test_checkpoint_round_trip();
  test_placements();
  test_layer_scale();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
