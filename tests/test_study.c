// The study's run configs (configs/toy, configs/toy-large, configs/paper and their variants):
// every one parses; the learning rate at the stage boundaries of the growing
// arms, restarted per stage (the main reading) and continued (continued-lr/),
// against the schedule computed by hand, and which schedule each control has;
// the token accountings of reading A (the arms' own directories) and reading B
// (readingB/) and of the rehearsal set; toy-large against toy; the 3.09 B student's arms (student-3.09b/) by their
// parameters; the paper arms' sampling and structural token ids, checked
// against the Qwen3 tokenizer when it is there ($NG_TOKENIZER, else
// $NG_ROOT/../shared/data/qwen3-tokenizer; one skip line without it).
#include <cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "run_counts.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/lr_schedule.h"
#include "normgrow/model.h"
#include "normgrow/run.h"
#include "normgrow/tokenizer.h"

static const char *root;

static int load(const char *rel, ng_run_config *rc) { return load_config(root, rel, rc); }

// ---------------------------------------------------------------- every config

// Every run config under configs/ (one and two directories deep) parses; the
// model configs (no "stages") are left out.
static void test_every_config_parses(void) {
  const char *patterns[] = {"configs/*/*.json", "configs/*/*/*.json"};
  int n = 0, bad = 0;
  for (int p = 0; p < 2; p++) {
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s/%s", root, patterns[p]);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) continue;
    for (size_t i = 0; i < g.gl_pathc; i++) {
      char *text = NULL;
      NG_ASSERT(ng_read_file(g.gl_pathv[i], 1 << 20, &text, NULL) == 0);
      bool is_run = strstr(text, "\"stages\"") != NULL;
      free(text);
      if (!is_run) continue;
      ng_run_config rc;
      if (ng_run_config_load(g.gl_pathv[i], NULL, &rc) != 0) {
        printf("# %s\n", ng_error());
        bad++;
      } else {
        ng_run_config_free(&rc);
      }
      n++;
    }
    globfree(&g);
  }
  // toy: teacher + 7 arms + 3 interventions + 2 continued + 5 reading B + 2 hybrid; paper
  // the same without the teacher, the interventions and the hybrid arms, and the 7 arms of
  // the 3.09 B student; toy-large and rehearsal: teacher + 7 arms
  CHECK(bad == 0 && n == 57, "every run config under configs/ parses (57)", "%d of %d fail", bad, n);
}

// ---------------------------------------------------------------- schedules

// The schedule of run.h by hand: linear warmup over W tokens (the first step
// already at one batch's share), then cosine from peak to floor over the
// rest of a segment of `total` tokens; t counts from the segment's start.
static double lr_by_hand(const ng_lr_schedule *lr, int64_t t, int64_t total, int64_t per_step) {
  if (t < lr->warmup_tokens) return lr->peak * fmin(1.0, (double)(t + per_step) / (double)lr->warmup_tokens);
  double p = (double)(t - lr->warmup_tokens) / (double)(total - lr->warmup_tokens);
  return lr->floor + (lr->peak - lr->floor) * 0.5 * (1.0 + cos(M_PI * p));
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

// The LR of the first and the last step of every stage of a growing arm:
// restarted (each stage its own segment) or continued (one segment).
static bool boundaries_ok(const ng_run_config *rc, bool restarted) {
  int64_t per_step = rc->batch * rc->seq, before = 0, total = run_tokens(rc);
  bool ok = rc->n_stages == 3;
  for (int s = 0; ok && s < rc->n_stages; s++) {
    int64_t n = rc->stages[s].tokens, last = n - per_step;
    double first = ng_lr_at(rc, s, 0), end = ng_lr_at(rc, s, last);
    double want_first = restarted ? lr_by_hand(&rc->stages[s].lr, 0, n, per_step)
                                  : lr_by_hand(&rc->stages[s].lr, before, total, per_step);
    double want_end = restarted ? lr_by_hand(&rc->stages[s].lr, last, n, per_step)
                                : lr_by_hand(&rc->stages[s].lr, before + last, total, per_step);
    printf("# %s stage %d: LR %.6g at its first step, %.6g at its last\n", rc->name, s + 1, first, end);
    ok = close_to(first, want_first) && close_to(end, want_end) && rc->stages[s].restart_lr == (restarted || s == 0);
    before += n;
  }
  return ok;
}

// Two arms have the same LR at every step (their stages of equal tokens).
static bool same_schedule(const ng_run_config *a, const ng_run_config *b) {
  int64_t per_step = a->batch * a->seq;
  if (run_tokens(a) != run_tokens(b) || per_step != b->batch * b->seq) return false;
  int sa = 0, sb = 0;
  int64_t ta = 0, tb = 0;
  for (int64_t t = 0; t < run_tokens(a); t += per_step) {
    // exact: the same scalar formula of equal parsed numbers where the arms agree
    if (ng_lr_at(a, sa, ta) != ng_lr_at(b, sb, tb)) return false;
    if ((ta += per_step) == a->stages[sa].tokens) sa++, ta = 0;
    if ((tb += per_step) == b->stages[sb].tokens) sb++, tb = 0;
  }
  return true;
}

// The growing arms of <scale>/<dir> against the schedule by hand.
static void check_boundaries(const char *scale, const char *dir, bool restarted) {
  static const char *const placements[] = {"pre", "post"};
  for (int p = 0; p < 2; p++) {
    char rel[128], name[256];
    ng_run_config rc;
    snprintf(rel, sizeof rel, "%s/%sgrow-%s", scale, dir, placements[p]);
    int r = load(rel, &rc);
    snprintf(name, sizeof name, "%s: %s (LR at every stage's first and last step by hand)", rel,
             restarted ? "warmup and cosine restarted at each stage" : "one warmup and cosine over all stages");
    CHECK(r == 0 && boundaries_ok(&rc, restarted), name, "differs");
    if (r == 0) ng_run_config_free(&rc);
  }
}

// <scale>/<a> and <scale>/<b> have the same LR at every step (or, when !same, differ).
static bool schedules_match(const char *scale, const char *a, const char *b, bool same) {
  char ra[128], rb[128];
  ng_run_config x, y;
  snprintf(ra, sizeof ra, "%s/%s", scale, a);
  snprintf(rb, sizeof rb, "%s/%s", scale, b);
  if (load(ra, &x)) return false;
  if (load(rb, &y)) {
    ng_run_config_free(&x);
    return false;
  }
  bool ok = same_schedule(&x, &y) == same;
  ng_run_config_free(&x);
  ng_run_config_free(&y);
  return ok;
}

// The growing arms restart the schedule per stage and control-lr-restarts has
// their LR at every step; where a scale has the continued variant
// (continued-lr/) and reading B, they are checked too, and the joint arm has
// the continued schedule.
static void test_schedules(const char *scale, bool variants) {
  char name[256];
  check_boundaries(scale, "", true);
  snprintf(name, sizeof name, "%s: control-lr-restarts has grow-post's LR at every step", scale);
  CHECK(schedules_match(scale, "control-lr-restarts", "grow-post", true), name, "schedules differ");
  if (!variants) return;
  check_boundaries(scale, "continued-lr/", false);
  snprintf(name, sizeof name, "%s: joint-post has continued-lr/grow-post's LR at every step, grow-post not", scale);
  CHECK(schedules_match(scale, "joint-post", "continued-lr/grow-post", true) &&
            schedules_match(scale, "grow-post", "continued-lr/grow-post", false),
        name, "schedules differ");
  check_boundaries(scale, "readingB/", true);
  snprintf(name, sizeof name, "%s reading B: control-lr-restarts has grow-post's LR at every step", scale);
  CHECK(schedules_match(scale, "readingB/control-lr-restarts", "readingB/grow-post", true), name,
        "schedules differ");
}

// ---------------------------------------------------------------- accountings

enum { JOINT, GROW_PRE, GROW_POST, EXTRA, LAYER, RESTARTS, N_ARMS };
static const char *const arm_files[N_ARMS] = {"joint-post", "grow-pre", "grow-post", "control-extra-tokens",
                                              "control-layer-tokens", "control-lr-restarts"};

// The arms of a reading: reading A's from <scale>/, reading B's from
// <scale>/readingB/ (its joint arm is reading A's).
static int load_reading(const char *scale, bool b, ng_run_config *rc) {
  char rel[128];
  for (int i = 0; i < N_ARMS; i++) {
    snprintf(rel, sizeof rel, "%s/%s%s", scale, b && i != JOINT ? "readingB/" : "", arm_files[i]);
    if (load(rel, &rc[i])) {
      for (int k = 0; k < i; k++) ng_run_config_free(&rc[k]);
      return -1;
    }
  }
  return 0;
}

static void test_reading_a(const char *scale) {
  ng_run_config rc[N_ARMS];
  char name[256];
  int r = load_reading(scale, false, rc);
  bool ok = r == 0;
  int64_t T = ok ? run_tokens(&rc[JOINT]) : 0;
  for (int i = 0; ok && i < rc[GROW_POST].n_stages; i++) ok = rc[GROW_POST].stages[i].tokens * 3 == T;
  ok = ok && run_tokens(&rc[GROW_PRE]) == T && run_tokens(&rc[GROW_POST]) == T &&
       run_tokens(&rc[RESTARTS]) == T && 3 * layer_tokens(&rc[GROW_POST]) == 2 * layer_tokens(&rc[JOINT]) &&
       3 * run_tokens(&rc[EXTRA]) == 4 * T && layer_tokens(&rc[LAYER]) == layer_tokens(&rc[GROW_POST]);
  snprintf(name, sizeof name, "%s reading A: every arm the joint arm's tokens (growth in thirds, 2/3 of its "
           "layer-tokens); extra-tokens 4/3 of them, layer-tokens growth's layer-tokens", scale);
  CHECK(ok, name, "sizes differ");
  if (r == 0)
    for (int i = 0; i < N_ARMS; i++) ng_run_config_free(&rc[i]);
}

// The file's JSON without the given keys ("a" or "a.b", n of them).
static cJSON *settings_of(const char *rel, const char *const *keys, int n) {
  char path[1024], *text = NULL;
  snprintf(path, sizeof path, "%s/configs/%s.json", root, rel);
  NG_ASSERT(ng_read_file(path, 1 << 20, &text, NULL) == 0);
  cJSON *j = cJSON_Parse(text);
  free(text);
  NG_ASSERT(j);
  for (int i = 0; i < n; i++) {
    char key[128];
    snprintf(key, sizeof key, "%s", keys[i]);
    char *dot = strchr(key, '.');
    if (dot) *dot = '\0';
    cJSON *parent = dot ? cJSON_GetObjectItemCaseSensitive(j, key) : j;
    if (parent) cJSON_DeleteItemFromObjectCaseSensitive(parent, dot ? dot + 1 : key);
  }
  return j;
}

// <a> and <b> (relative to configs/) agree but for the keys.
static bool same_settings(const char *a, const char *b, const char *const *keys, int n) {
  cJSON *x = settings_of(a, keys, n), *y = settings_of(b, keys, n);
  bool same = cJSON_Compare(x, y, true);
  cJSON_Delete(x);
  cJSON_Delete(y);
  return same;
}

static void test_reading_b(const char *scale) {
  ng_run_config rc[N_ARMS];
  char name[256];
  int r = load_reading(scale, true, rc);
  bool ok = r == 0;
  int64_t S = ok ? run_tokens(&rc[JOINT]) : 0;  // the joint arm: one pass over the shard
  for (int a = GROW_PRE; ok && a <= GROW_POST; a++)
    for (int i = 0; ok && i < rc[a].n_stages; i++) ok = rc[a].n_stages == 3 && rc[a].stages[i].tokens == S;
  for (int i = 0; ok && i < rc[RESTARTS].n_stages; i++)
    ok = rc[RESTARTS].n_stages == 3 && rc[RESTARTS].stages[i].tokens == S &&
         rc[RESTARTS].stages[i].depth == rc[JOINT].model.num_hidden_layers;
  ok = ok && run_tokens(&rc[EXTRA]) == run_tokens(&rc[GROW_POST]) && rc[EXTRA].n_stages == 1 &&
       layer_tokens(&rc[LAYER]) == layer_tokens(&rc[GROW_POST]) && rc[LAYER].n_stages == 1 &&
       layer_tokens(&rc[GROW_POST]) > layer_tokens(&rc[JOINT]);
  snprintf(name, sizeof name, "%s reading B: every growth stage the joint arm's tokens; extra-tokens growth's "
           "tokens, layer-tokens growth's layer-tokens, lr-restarts growth's stages at full depth", scale);
  CHECK(ok, name, "sizes differ");
  if (r == 0) {
    if (strcmp(scale, "paper") == 0)
      printf("# paper reading B: growth %lld tokens, %lld layer-tokens; joint %lld, %lld\n",
             (long long)run_tokens(&rc[GROW_POST]), (long long)layer_tokens(&rc[GROW_POST]),
             (long long)S, (long long)layer_tokens(&rc[JOINT]));
    for (int i = 0; i < N_ARMS; i++) ng_run_config_free(&rc[i]);
  }
  static const char *const changed[] = {"name", "run_dir", "stages"};  // a reading B arm's
  bool same = true;
  for (int i = GROW_PRE; i < N_ARMS; i++) {
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/%s", scale, arm_files[i]);
    snprintf(b, sizeof b, "%s/readingB/%s", scale, arm_files[i]);
    same &= same_settings(a, b, changed, 3);
  }
  snprintf(name, sizeof name, "%s reading B: each arm is reading A's but for its name, run_dir and stages", scale);
  CHECK(same, name, "another setting differs");
}

// ---------------------------------------------------------------- hybrid growth

// configs/toy/hybrid: grow-pre growing post blocks and grow-post growing pre
// blocks, each the demo's arm but for its name, run_dir and
// growth.new_block_placement; their last stage's students are hybrid models
// whose first stage's blocks keep their placement (new blocks on top).
static void test_hybrid_arms(void) {
  static const char *const changed[] = {"name", "run_dir", "growth.new_block_placement"};
  static const struct {
    const char *base, *arm;
    ng_norm_placement prefix, grown;
  } arms[] = {{"toy/grow-pre", "toy/hybrid/grow-pre-post", NG_NORM_PRE, NG_NORM_POST},
              {"toy/grow-post", "toy/hybrid/grow-post-pre", NG_NORM_POST, NG_NORM_PRE}};
  for (int i = 0; i < 2; i++) {
    ng_run_config rc;
    bool ok = same_settings(arms[i].base, arms[i].arm, changed, 3) && load(arms[i].arm, &rc) == 0;
    if (ok) {
      ng_model_config last = ng_stage_model(&rc, rc.n_stages - 1);
      ok = rc.hybrid_growth && rc.new_block_placement == arms[i].grown && last.norm_placement == NG_NORM_HYBRID;
      for (int64_t l = 0; ok && l < last.num_hidden_layers; l++)
        ok = ng_block_placement(&last, l) == (l < rc.stages[0].depth ? arms[i].prefix : arms[i].grown);
      ng_run_config_free(&rc);
    }
    char name[192];
    snprintf(name, sizeof name, "%s is %s but for its name, run_dir and new_block_placement; its last "
             "stage's blocks are %s below, %s above", arms[i].arm, arms[i].base,
             ng_norm_placement_name(arms[i].prefix), ng_norm_placement_name(arms[i].grown));
    CHECK(ok, name, "another setting differs, or the placements");
  }
}

// ---------------------------------------------------------------- the larger toy study

// Each toy-large config is the toy one but for what docs/assumptions.md's
// "larger toy study" table changes: paths, shape, tokens, init std, LR,
// evaluation, checkpoints, and the teacher's sampling.
static void test_toy_large(void) {
  static const char *const arms[] = {"teacher", "joint-pre", "joint-post", "grow-pre", "grow-post",
                                     "control-extra-tokens", "control-layer-tokens", "control-lr-restarts"};
  static const char *const changed[] = {
      "run_dir", "teacher", "data.train", "data.val", "data.sampling", "model.hidden_size",
      "model.intermediate_size", "model.num_hidden_layers", "model.num_attention_heads",
      "model.num_key_value_heads", "init.std", "lr", "stages", "eval", "checkpoint_every_steps"};
  int n = (int)(sizeof changed / sizeof *changed), differ = 0;
  for (int i = 0; i < 8; i++) {
    char a[128], b[128];
    snprintf(a, sizeof a, "toy/%s", arms[i]);
    snprintf(b, sizeof b, "toy-large/%s", arms[i]);
    if (!same_settings(a, b, changed, n)) {
      printf("# %s differs from %s in another setting\n", b, a);
      differ++;
    }
  }
  CHECK(differ == 0, "toy-large: every config is the toy's but for paths, shape, tokens, init std, LR, "
        "evaluation and checkpoints", "%d differ", differ);
}

// ---------------------------------------------------------------- the 3.09 B student

// configs/paper/student-3.09b: the seven arms with FFN 13,312, by hand
//   one block  q_proj, o_proj 4096 x 4096; k_proj, v_proj 1024 x 4096; q_norm,
//              k_norm 128; two norms 4096; gate_, up_, down_proj 4096 x 13312
//              = 33,554,432 + 8,388,608 + 256 + 8,192 + 163,577,856 = 205,529,344
//   9 blocks + embeddings, untied head, final norm (2 x 151936 x 4096 + 4096)
//              = 1,849,764,096 + 1,244,663,808 = 3,094,427,904
// and each is the main arm but for its name, run_dir and FFN size.
static void test_student_309b(void) {
  static const char *const arms[] = {"joint-pre", "joint-post", "grow-pre", "grow-post",
                                     "control-extra-tokens", "control-layer-tokens", "control-lr-restarts"};
  static const char *const changed[] = {"name", "run_dir", "model.intermediate_size"};
  const int64_t block = 2 * 4096LL * 4096 + 2 * 1024LL * 4096 + 2 * 128 + 2 * 4096 + 3 * 4096LL * 13312;
  const int64_t io = 2 * 151936LL * 4096 + 4096;
  int bad = 0;
  for (int i = 0; i < 7; i++) {
    char rel[128], main_arm[128];
    snprintf(rel, sizeof rel, "paper/student-3.09b/%s", arms[i]);
    snprintf(main_arm, sizeof main_arm, "paper/%s", arms[i]);
    ng_run_config rc;
    if (load(rel, &rc)) {
      printf("# %s: %s\n", rel, ng_error());
      bad++;
      continue;
    }
    ng_model *m = ng_model_create(NULL, &rc.model, false);  // a skeleton: sizes only
    int64_t total = 0;
    for (int k = 0; k < m->n_params; k++) total += (int64_t)m->params[k].numel;
    ng_model_free(m);
    if (total != 3094427904LL || total != 9 * block + io || !same_settings(main_arm, rel, changed, 3)) {
      printf("# %s: %lld parameters, or another setting than its FFN differs from %s\n", rel,
             (long long)total, main_arm);
      bad++;
    }
    ng_run_config_free(&rc);
  }
  CHECK(bad == 0 && block == 205529344LL, "paper/student-3.09b: the seven arms with FFN 13,312, 3,094,427,904 parameters each",
        "%d differ", bad);
}

// ---------------------------------------------------------------- paper data settings

static bool listed(const ng_run_config *rc, uint32_t id) {
  for (int i = 0; i < rc->n_structural; i++)
    if ((uint32_t)rc->structural_tokens[i] == id) return true;
  return false;
}

// The tokenizer's one id for `text`, or UINT32_MAX when it takes several.
static uint32_t single_id(ng_tok_state *st, const char *text) {
  ng_ids ids = {0};
  NG_ASSERT(ng_tokenizer_encode(st, text, strlen(text), &ids) == 0);
  uint32_t id = ids.n == 1 ? ids.ids[0] : UINT32_MAX;
  free(ids.ids);
  return id;
}

// Every paper arm samples by epochs and lists the same structural ids, not the
// separator; with the tokenizer: each listed id decodes to white space holding
// a line break or a tab, or holds a code fence, and runs of 1 to 8 newlines,
// of 1 to 4 tabs, "\r\n" and "```" are each one listed id.
static void test_paper_data(void) {
  static const char *const arms[] = {"joint-pre", "joint-post", "grow-pre", "grow-post", "control-extra-tokens",
                                     "control-layer-tokens", "control-lr-restarts", "continued-lr/grow-pre",
                                     "continued-lr/grow-post", "readingB/grow-pre", "readingB/grow-post",
                                     "readingB/control-extra-tokens", "readingB/control-layer-tokens",
                                     "readingB/control-lr-restarts"};
  ng_run_config first, rc;
  char rel[128];
  snprintf(rel, sizeof rel, "paper/%s", arms[0]);
  if (load(rel, &first)) {
    CHECK(false, "paper arms load", "%s", rel);
    return;
  }
  bool ok = first.sampling == NG_SAMPLE_EPOCH && !listed(&first, 151643) && first.n_structural > 2;
  for (size_t i = 1; ok && i < sizeof arms / sizeof arms[0]; i++) {
    snprintf(rel, sizeof rel, "paper/%s", arms[i]);
    ok = load(rel, &rc) == 0;
    if (!ok) break;
    ok = rc.sampling == NG_SAMPLE_EPOCH && rc.n_structural == first.n_structural &&
         memcmp(rc.structural_tokens, first.structural_tokens, sizeof rc.structural_tokens) == 0;
    ng_run_config_free(&rc);
  }
  CHECK(ok, "paper arms: data.sampling \"epoch\", the same structural ids, the separator 151643 not among them",
        "an arm differs");

  char path[1024];
  const char *env = getenv("NG_TOKENIZER");
  snprintf(path, sizeof path, "%s/tokenizer.json", env ? env : "");
  if (!env) snprintf(path, sizeof path, "%s/../shared/data/qwen3-tokenizer/tokenizer.json", root);
  ng_tokenizer *t = NULL;
  if (access(path, R_OK) != 0 || ng_tokenizer_load(path, &t) != 0) {
    printf("# skip structural ids against the Qwen3 tokenizer: none at %s (set NG_TOKENIZER)\n", path);
    ng_run_config_free(&first);
    return;
  }
  bool decoded = true;
  for (int i = 0; i < first.n_structural && decoded; i++) {
    uint32_t id = (uint32_t)first.structural_tokens[i];
    char *text = NULL;
    size_t len = 0;
    decoded = ng_tokenizer_decode(t, &id, 1, &text, &len) == 0 &&
              (strstr(text, "```") || (strspn(text, " \t\r\n") == len && strpbrk(text, "\n\t")));
    if (!decoded) printf("# structural id %u is \"%s\"\n", id, text ? text : "?");
    free(text);
  }
  ng_tok_state *st = ng_tok_state_create(t);
  bool runs = listed(&first, single_id(st, "\r\n")) && listed(&first, single_id(st, "```"));
  char text[16];
  for (int k = 1; k <= 8; k++) {
    memset(text, '\n', (size_t)k);
    text[k] = 0;
    runs &= listed(&first, single_id(st, text));
    if (k <= 4) {
      memset(text, '\t', (size_t)k);
      runs &= listed(&first, single_id(st, text));
    }
  }
  CHECK(decoded && runs, "paper structural ids: white space with a line break or tab, or a code fence; every run "
        "of 1-8 newlines, 1-4 tabs, \"\\r\\n\" and \"```\" is one listed id (Qwen3 tokenizer)", "an id is missing "
        "or is not structure");
  ng_tok_state_free(st);
  ng_tokenizer_free(t);
  ng_run_config_free(&first);
}

int main(void) {
  root = getenv("NG_ROOT");
  if (!root) {
    fprintf(stderr, "set NG_ROOT (tests/run.sh does)\n");
    return 1;
  }
  test_every_config_parses();
  test_schedules("toy", true);
  test_schedules("paper", true);
  test_schedules("toy-large", false);
  test_reading_a("toy");
  test_reading_a("paper");
  test_reading_a("toy-large");
  test_reading_a("rehearsal");
  test_reading_b("toy");
  test_reading_b("paper");
  test_hybrid_arms();
  test_toy_large();
  test_student_309b();
  test_paper_data();
  return TEST_RESULT();
}
