// Training runs end to end on real English text (the license texts every
// Debian system ships): a teacher pretrained, a student grown over 3 stages
// while distilled. Checks the stage boundaries, the token / layer-token / FLOP
// accounting against hand computation, that validation CE and KD fall, that a
// stopped and resumed run ends bit-identical, and the configuration errors.
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/data.h"
#include "normgrow/golden.h"
#include "normgrow/run.h"
#include "normgrow/train.h"
#include "normgrow/rundir.h"
#include "normgrow/topk.h"

static char dir[64];
enum { B = 8, T = 32, D = 32, F = 64, H = 4, KV = 2, HD = 8, V = 257 };

static void write_file(const char *path, const char *fmt, ...) {
  FILE *f = fopen(path, "w");
  NG_ASSERT(f);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

static int train(const char *config_path) {
  ng_train_args a = {.config_path = config_path, .overrides = {.seed = -1}};
  return ng_train(&a);
}

// The whole file, or NULL when it cannot be read.
static char *read_file(const char *path, size_t *n) {
  char *text = NULL;
  return ng_read_file(path, (size_t)1 << 30, &text, n) == 0 ? text : NULL;
}

static const char *model_json(int layers, const char *placement) {
  static char buf[512];
  snprintf(buf, sizeof buf,
           "{\"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,"
           " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"rope_theta\": 10000,"
           " \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, \"norm_placement\": \"%s\", \"final_norm\": true}",
           V, D, F, layers, H, KV, HD, placement);
  return buf;
}

static const char *common_json(void) {
  static char buf[1024];
  snprintf(buf, sizeof buf,
           "\"data\": {\"train\": \"%s/train.bin\", \"val\": \"%s/val.bin\", \"batch\": %d, \"seq\": %d},"
           " \"optim\": {\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"weight_decay\": 0.1, \"grad_clip\": 1.0},"
           " \"lr\": {\"peak\": 0.01, \"floor\": 0.001, \"warmup_tokens\": 2048, \"shape\": \"cosine\"},"
           " \"eval\": {\"every_steps\": 10, \"batches\": 4}, \"checkpoint_every_steps\": 10",
           dir, dir, B, T);
  return buf;
}

// The student arm: 3 stages of 20 steps, depths 1, 2, 3 (Post-Norm, gate growth).
static void write_arm(const char *path, const char *run, const char *extra) {
  write_file(path,
             "{\"name\": \"arm\", \"seed\": 5, \"run_dir\": \"%s/%s\", \"mode\": \"distill\", %s,"
             " \"model\": %s, \"teacher\": \"%s/teacher/final.safetensors\","
             " \"loss\": {\"kd_weight\": 0.5, \"temperature\": 2.0},"
             " \"growth\": {\"position\": \"top\", \"init\": \"gate\", \"gate_steps\": 5},"
             " \"stages\": [{\"depth\": 1, \"tokens\": 5120}, {\"depth\": 2, \"tokens\": 5120},"
             " {\"depth\": 3, \"tokens\": 5120}] %s}",
             dir, run, common_json(), model_json(3, "post"), dir, extra);
}

static bool make_data(void) {
  ng_data_stats st = {0};
  bool ok = test_license_shards(dir, &st);
  printf("# data: license texts, %llu + %llu tokens\n", (unsigned long long)st.tokens[0],
         (unsigned long long)st.tokens[1]);
  return ok;
}

// ---------------------------------------------------------------- metrics

typedef struct {
  int n;
  cJSON **rec;
} metrics;

static metrics read_metrics(const char *run) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, run);
  metrics m = {0};
  size_t n;
  char *text = read_file(path, &n), *save = NULL;
  for (char *line = text ? strtok_r(text, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
    m.rec = realloc(m.rec, (size_t)(m.n + 1) * sizeof(cJSON *));
    m.rec[m.n++] = cJSON_Parse(line);
  }
  free(text);
  return m;
}

static void metrics_free(metrics *m) {
  for (int i = 0; i < m->n; i++) cJSON_Delete(m->rec[i]);
  free(m->rec);
}

static double num(const cJSON *j, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool is(const cJSON *j, const char *event) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "event");
  return cJSON_IsString(v) && strcmp(v->valuestring, event) == 0;
}

// Matmul parameters of a tied model of `layers` blocks, by hand.
static double params(int layers) {
  double block = 2.0 * D * H * HD + 2.0 * D * KV * HD + 3.0 * D * F;
  return block * layers + (double)V * D;
}

static double attention(int layers) { return 4.0 * HD * H * T * (T + 1) / 2.0 * B * layers; }

static void check_accounting(const metrics *m) {
  int growths = 0, steps = 0;
  bool depth_ok = true, tokens_ok = true;
  double layer_tokens = 0.0, flops = 0.0, growth_steps[2] = {0};
  bool flops_ok = true, preserved = true;
  for (int i = 0; i < m->n; i++) {
    const cJSON *r = m->rec[i];
    if (is(r, "growth")) {
      if (growths < 2) growth_steps[growths] = num(r, "step");
      growths++;
      // exact: the new top block has gate 0 (1 x + 0 y = x); the blocks below
      // and the head run the same calls at the same shapes and threads
      preserved &= num(r, "val_ce_before") == num(r, "val_ce_after");
      continue;
    }
    if (!is(r, "step")) continue;
    steps++;
    int depth = steps <= 20 ? 1 : steps <= 40 ? 2 : 3;
    layer_tokens += (double)depth * B * T;
    flops += 6.0 * params(depth) * B * T + 3.0 * attention(depth) + 2.0 * params(2) * B * T + attention(2);
    // exact: whole numbers below 2^53
    depth_ok &= num(r, "depth") == depth && num(r, "step") == steps;
    tokens_ok &= num(r, "tokens") == (double)steps * B * T && num(r, "layer_tokens") == layer_tokens;
    flops_ok &= fabs(num(r, "flops") - flops) <= 1e-12 * flops;
  }
  CHECK(steps == 60 && growths == 2 && growth_steps[0] == 20 && growth_steps[1] == 40,
        "stage boundaries fall exactly at 5120 and 10240 tokens", "%d steps, %d growths at %g, %g", steps,
        growths, growth_steps[0], growth_steps[1]);
  CHECK(depth_ok && tokens_ok, "depth, tokens and layer-tokens of every step match hand computation",
        "mismatch (layer-tokens by hand %g)", layer_tokens);
  CHECK(flops_ok, "FLOPs of every step match 6 x params x tokens + attention (+ teacher forward)",
        "by hand %.6e", flops);
  CHECK(preserved, "the gate growth keeps validation CE exactly", "CE changed at a growth");
}

static void check_learning(const metrics *m) {
  const cJSON *first = NULL, *last = NULL;
  for (int i = 0; i < m->n; i++)
    if (is(m->rec[i], "eval")) {
      if (!first) first = m->rec[i];
      last = m->rec[i];
    }
  NG_ASSERT(first && last);
  double ce0 = num(first, "val_ce"), ce1 = num(last, "val_ce"), kd0 = num(first, "val_kd"), kd1 = num(last, "val_kd");
  char name[160];
  snprintf(name, sizeof name, "distillation on real text lowers validation CE %.3f -> %.3f and KD %.3f -> %.3f",
           ce0, ce1, kd0, kd1);
  CHECK(ce1 < ce0 - 0.05 && kd1 < kd0 - 0.05, name, "did not fall");
}

// ---------------------------------------------------------------- resume

static bool same_file(const char *a, const char *b) {
  size_t na, nb;
  char *x = read_file(a, &na), *y = read_file(b, &nb);
  bool same = x && y && na == nb && memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

static void check_resume(int64_t stop) {
  char run[32], path[160], final_a[160], final_b[160], name[128];
  snprintf(run, sizeof run, "stopped%lld", (long long)stop);
  snprintf(path, sizeof path, "%s/%s.json", dir, run);
  write_arm(path, run, "");
  ng_train_args first = {.config_path = path, .overrides = {.seed = -1}, .stop_after = stop};
  bool ok = ng_train(&first) == 0;
  snprintf(path, sizeof path, "%s/%s", dir, run);
  ng_train_args resume = {.resume_dir = path};
  ok = ok && ng_train(&resume) == 0;
  snprintf(final_a, sizeof final_a, "%s/arm/final.safetensors", dir);
  snprintf(final_b, sizeof final_b, "%s/%s/final.safetensors", dir, run);
  metrics a = read_metrics("arm"), b = read_metrics(run);
  bool same_log = a.n == b.n;  // exact: a resume repeats the same ops in the same order
  for (int i = 0; same_log && i < a.n; i++) same_log = num(a.rec[i], "step") == num(b.rec[i], "step") && num(a.rec[i], "flops") == num(b.rec[i], "flops");
  snprintf(name, sizeof name, "stopped after step %lld and resumed: final weights bit-identical, log continues", (long long)stop);
  CHECK(ok && same_file(final_a, final_b) && same_log, name, "%s", ok ? "outputs differ" : ng_error());
  metrics_free(&a);
  metrics_free(&b);
}

// ---------------------------------------------------------------- run directory

// The files of a finished run's directory are those of rundir.h's list, every one.
static void check_run_files(const char *run) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s", dir, run);
  DIR *d = opendir(path);
  int seen[NG_RUN_FILES] = {0}, others = 0;
  char other[sizeof(((struct dirent *)0)->d_name)] = "";
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    int f = 0;
    while (f < NG_RUN_FILES && strcmp(e->d_name, ng_run_file_name((ng_run_file)f)) != 0) f++;
    if (f < NG_RUN_FILES) seen[f]++;
    else if (others++ == 0) snprintf(other, sizeof other, "%s", e->d_name);
  }
  if (d) closedir(d);
  int missing = 0;
  for (int f = 0; f < NG_RUN_FILES; f++) missing += seen[f] != 1;
  CHECK(d && others == 0 && missing == 0,
        "a finished run's directory holds every file of the run-file list and no other",
        "%d files not on the list (first %s), %d of the list missing", others, other, missing);
}

// docs/runs.md's table "The files of a run directory" names rundir.h's files, in order.
static void check_run_files_documented(void) {
  const char *root = getenv("NG_ROOT");
  char path[512], *text = NULL;
  snprintf(path, sizeof path, "%s/docs/runs.md", root ? root : ".");
  const char *at = ng_read_file(path, (size_t)1 << 20, &text, NULL) == 0
                       ? strstr(text, "\n## The files of a run directory\n")
                       : NULL;
  int f = 0;
  bool same = at != NULL;
  // the table's rows: "| `name` | ..." lines, up to the first line that is no row
  for (at = at ? strstr(at, "\n|") : NULL; same && at && at[1] == '|'; at = strchr(at + 1, '\n')) {
    if (strncmp(at, "\n| `", 4) != 0) continue;  // the header and its rule
    const char *name = at + 4;
    size_t n = strcspn(name, "`");
    same = f < NG_RUN_FILES && strlen(ng_run_file_name((ng_run_file)f)) == n &&
           strncmp(name, ng_run_file_name((ng_run_file)f), n) == 0;
    f++;
  }
  CHECK(same && f == NG_RUN_FILES, "docs/runs.md's table of a run's files names rundir.h's list, in order",
        "%s: row %d differs (set NG_ROOT: tests/run.sh does)", path, f);
  free(text);
}

// A new run's directory that holds any file of a run but the lock is refused,
// naming it; --force removes it and keeps the lock.
static void check_claim(void) {
  char run[160], path[200];
  snprintf(run, sizeof run, "%s/claimed", dir);
  ng_rundir d = {.lock_fd = -1};
  NG_ASSERT(ng_make_dir(run) == 0);
  snprintf(path, sizeof path, "%s/backend.jsonl", run);
  write_file(path, "{}\n");
  bool refused = ng_rundir_lock(&d, run) == 0 && ng_rundir_claim(&d, false) != 0 &&
                 strstr(ng_error(), "holds a run (backend.jsonl)") != NULL;
  bool forced = ng_rundir_claim(&d, true) == 0 && access(path, F_OK) != 0 &&
                ng_rundir_has(run, NG_RUN_LOCK) && ng_rundir_claim(&d, false) == 0;
  ng_rundir_close(&d);
  CHECK(refused && forced, "a directory holding only backend.jsonl is claimed as a run's: refused, then "
        "replaced with --force (train.lock kept)", "refused %d, forced %d: %s", refused, forced, ng_error());
}

// ---------------------------------------------------------------- settings

// Replaces the first `from` in the file by `to`.
static void edit_file(const char *path, const char *from, const char *to) {
  size_t n;
  char *text = read_file(path, &n), *at = strstr(text, from);
  NG_ASSERT(at);
  *at = 0;
  write_file(path, "%s%s%s", text, to, at + strlen(from));
  free(text);
}

// The arm as `run` at a peak learning rate of 0.002 (at the arm's 0.01 its
// loss spikes near step 19 and any rounding difference grows from there),
// its config text with `from` replaced by `to` (from NULL: as is), stopped
// after `stop` steps (0: the whole run).
static int train_variant(const char *run, const char *extra, const char *from, const char *to,
                         int64_t stop) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s.json", dir, run);
  write_arm(path, run, extra);
  edit_file(path, "\"peak\": 0.01, \"floor\": 0.001", "\"peak\": 0.002, \"floor\": 0.0002");
  if (from) edit_file(path, from, to);
  ng_train_args a = {.config_path = path, .overrides = {.seed = -1}, .stop_after = stop};
  return ng_train(&a);
}

// Worst over tensors of max |a - b| / max |b| between the weights of two
// checkpoints (0: bit-identical); INFINITY when they do not load or match.
static double weights_diff(const char *run_a, const char *run_b, const char *file) {
  char a[160], b[160];
  snprintf(a, sizeof a, "%s/%s/%s", dir, run_a, file);
  snprintf(b, sizeof b, "%s/%s/%s", dir, run_b, file);
  ng_model *x = NULL, *y = NULL;
  double worst = INFINITY;
  if (ng_checkpoint_load(a, ng_backend_cpu(), false, &x, NULL, NULL) == 0 &&
      ng_checkpoint_load(b, ng_backend_cpu(), false, &y, NULL, NULL) == 0 && x->n_params == y->n_params) {
    worst = 0.0;
    for (int i = 0; i < x->n_params; i++) {
      double d = 0.0, m = 0.0;
      for (size_t j = 0; j < x->params[i].numel; j++) {
        d = fmax(d, fabs((double)x->params[i].data[j] - y->params[i].data[j]));
        m = fmax(m, fabs((double)y->params[i].data[j]));
      }
      worst = fmax(worst, m > 0 ? d / m : d);
    }
  }
  ng_model_free(x);
  ng_model_free(y);
  return worst;
}

// Hybrid growth: the Post-Norm arm growing Pre-Norm blocks on top (gate): each
// growth keeps val CE exactly and logs the grown blocks' placements; the
// checkpoints hold the per-block placements (post, pre, pre at the end); a run
// stopped between the growths resumes to the same bits.
static void check_hybrid_growth(void) {
  static const char *const runs[] = {"hybrid", "hybrid_stopped"};
  char path[160];
  bool ok = true;
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s.json", dir, runs[i]);
    write_arm(path, runs[i], "");
    edit_file(path, "\"gate_steps\": 5}", "\"gate_steps\": 5, \"new_block_placement\": \"pre\"}");
    ng_train_args a = {.config_path = path, .overrides = {.seed = -1}, .stop_after = i ? 30 : 0};
    ok = ok && ng_train(&a) == 0;
  }
  snprintf(path, sizeof path, "%s/hybrid_stopped", dir);
  ng_train_args resume = {.resume_dir = path};
  ok = ok && ng_train(&resume) == 0;
  CHECK(ok, "distill a Post-Norm student growing Pre-Norm blocks, and stop and resume it", "%s", ng_error());
  metrics m = read_metrics("hybrid");
  int growths = 0;
  bool preserved = true, listed = true;
  static const char *const want[2][3] = {{"post", "pre"}, {"post", "pre", "pre"}};
  for (int i = 0; i < m.n; i++) {
    if (!is(m.rec[i], "growth")) continue;
    // exact: gate 0 (see check_accounting)
    preserved &= num(m.rec[i], "val_ce_before") == num(m.rec[i], "val_ce_after");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(m.rec[i], "block_placements");
    listed &= growths < 2 && cJSON_GetArraySize(list) == growths + 2;
    for (int l = 0; listed && l < growths + 2; l++)
      listed &= strcmp(cJSON_GetArrayItem(list, l)->valuestring, want[growths][l]) == 0;
    growths++;
  }
  metrics_free(&m);
  CHECK(growths == 2 && preserved && listed,
        "hybrid growth: gate growth keeps val CE exactly; the growth records list post, pre (, pre)",
        "%d growths", growths);
  ng_model *final = NULL;
  snprintf(path, sizeof path, "%s/hybrid/final.safetensors", dir);
  bool placed = ng_checkpoint_load(path, ng_backend_cpu(), false, &final, NULL, NULL) == 0 &&
                final->cfg.norm_placement == NG_NORM_HYBRID && ng_block_placement(&final->cfg, 0) == NG_NORM_POST &&
                ng_block_placement(&final->cfg, 1) == NG_NORM_PRE && ng_block_placement(&final->cfg, 2) == NG_NORM_PRE &&
                ng_model_find(final, "model.layers.2.input_layernorm.weight") &&
                !ng_model_find(final, "model.layers.0.input_layernorm.weight");
  ng_model_free(final);
  CHECK(placed, "hybrid growth: the final checkpoint is a hybrid model of blocks post, pre, pre", "%s", ng_error());
  // exact: the resume continues the same ops in the same order
  CHECK(weights_diff("hybrid", "hybrid_stopped", "final.safetensors") == 0.0,
        "hybrid growth: stopped after step 30 (between the growths) and resumed: final weights bit-identical",
        "weights differ");
}

// Largest |loss difference| over the step records both logs have (up to
// `steps`), and whether their tokens, layer-tokens and FLOPs are equal.
static double loss_diff(const char *run_a, const char *run_b, int64_t steps, bool *same_accounting) {
  metrics a = read_metrics(run_a), b = read_metrics(run_b);
  double worst = 0.0;
  int n = 0;
  *same_accounting = true;
  for (int i = 0, j = 0; i < a.n && j < b.n;) {
    if (!is(a.rec[i], "step") || num(a.rec[i], "step") > (double)steps) { i++; continue; }
    if (!is(b.rec[j], "step")) { j++; continue; }
    worst = fmax(worst, fabs(num(a.rec[i], "loss") - num(b.rec[j], "loss")));
    // exact: the same formula of the config's numbers on both sides, not of the micro-batches
    *same_accounting &= num(a.rec[i], "tokens") == num(b.rec[j], "tokens") &&
                        num(a.rec[i], "layer_tokens") == num(b.rec[j], "layer_tokens") &&
                        num(a.rec[i], "flops") == num(b.rec[j], "flops");
    i++, j++, n++;
  }
  if (n != steps) worst = INFINITY;
  metrics_free(&a);
  metrics_free(&b);
  return worst;
}

// `run` against `base` after 30 steps (a growth at step 20 inside): their
// matmuls differ in shape, so they round apart, by an amount that depends on
// the BLAS kernel family and thread count (after 30 AdamW steps, seen up to
// 1.0e-5 of the weights and 2.2e-8 in the losses under Sandybridge, Haswell
// and SkylakeX at 1 to 3 threads). The weights are held to the contract's
// forward bound, relative; the losses to 1e-6; the accounting is equal.
// Prints the differences.
static bool close_after_30(const char *run, const char *base) {
  bool same_accounting;
  double w = weights_diff(run, base, "checkpoint.safetensors"), l = loss_diff(run, base, 30, &same_accounting);
  printf("# %s vs %s after 30 steps: weights %.3g relative, losses %.3g\n", run, base, w, l);
  return w <= NG_GOLDEN_TOL_FORWARD && l < 1e-6 && same_accounting;
}

// The loss over chunks of 1 and 3 tokens against all 256 at once. The head's
// weight gradient sums over tokens chunk by chunk (a reduction order of its
// own, finer than micro-batches').
static void check_chunks(void) {
  int rc = train_variant("chunk1", ", \"train\": {\"loss_chunk_tokens\": 1}", NULL, NULL, 30) ||
           train_variant("chunk3", ", \"train\": {\"loss_chunk_tokens\": 3}", NULL, NULL, 30);
  bool c1 = rc == 0 && close_after_30("chunk1", "whole30");
  bool c3 = rc == 0 && close_after_30("chunk3", "whole30");
  CHECK(c1 && c3, "loss in chunks of 1 and of 3 tokens vs all 256 at once: 30 steps, weights within "
        "1e-4 relative, losses within 1e-6, accounting unchanged", "%s", rc ? ng_error() : "differ");
}

// Micro-batches of 2 rows (4 per step) against the whole batch of 8, and a
// stopped micro-batch run resumes bit for bit.
static void check_micro_batches(void) {
  const char *from = "\"batch\": 8,", *to = "\"batch\": 8, \"micro_batch\": 2,";
  int rc = train_variant("micro30", "", from, to, 30);
  CHECK(rc == 0 && close_after_30("micro30", "whole30"),
        "micro-batches of 2 vs the batch of 8: 30 steps, weights within 1e-4 relative, losses within 1e-6, "
        "tokens, layer-tokens and FLOPs unchanged", "%s", rc ? ng_error() : "differ");
  char path[160];
  snprintf(path, sizeof path, "%s/micro30", dir);
  ng_train_args resume = {.resume_dir = path};
  rc = ng_train(&resume) || train_variant("micro", "", from, to, 0);
  double w = weights_diff("micro30", "micro", "final.safetensors");
  // exact: both runs take micro-batches of 2; the resume continues the same ops in the same order
  CHECK(rc == 0 && w == 0.0, "micro-batches: stopped after step 30 and resumed, final weights bit-identical",
        "%s", rc ? ng_error() : "weights differ");
}

// Recomputed block values: the same ops in the same order, the same bits.
static void check_recompute(void) {
  int rc = train_variant("recompute30", ", \"train\": {\"recompute\": true}", NULL, NULL, 30);
  double w = weights_diff("recompute30", "whole30", "checkpoint.safetensors");
  // exact: the backward recomputes a block by the forward's own calls at the
  // same shapes; every matmul of the step keeps its shape
  CHECK(rc == 0 && w == 0.0, "train.recompute: weights after 30 steps bit-identical to keeping every "
        "block's values", "%s", rc ? ng_error() : "weights differ");
}

// data.sampling "epoch" on the first 2000 tokens of the shard (62 windows, the
// 60 steps of 8 windows about 7.7 epochs): stopped after step 30 (inside the
// fourth epoch) and resumed, the final weights are bit-identical to an
// uninterrupted run's, and differ from uniform sampling's.
static void check_epochs(void) {
  char from[160], small[160];
  snprintf(from, sizeof from, "%s/train.bin", dir);
  snprintf(small, sizeof small, "%s/small.bin", dir);
  ng_shard s;
  NG_ASSERT(ng_shard_open(&s, from) == 0 && s.n_tokens >= 2000);
  uint32_t *ids = ng_xmalloc(2000 * sizeof *ids);
  for (int i = 0; i < 2000; i++) ids[i] = s.parts[0].tokens[i];
  NG_ASSERT(ng_shard_write(small, s.vocab_size, s.separator, ids, 2000) == 0);
  free(ids);
  ng_shard_close(&s);
  char path[160];
  snprintf(path, sizeof path, "%s/epoch30", dir);
  const char *train = "/train.bin\"", *uniform = "/small.bin\"", *epoch = "/small.bin\", \"sampling\": \"epoch\"";
  int rc = train_variant("uniform_small", "", train, uniform, 0) || train_variant("epoch30", "", train, epoch, 30);
  ng_train_args resume = {.resume_dir = path};
  rc = rc || ng_train(&resume) || train_variant("epoch", "", train, epoch, 0);
  double w = weights_diff("epoch30", "epoch", "final.safetensors");
  double u = weights_diff("epoch", "uniform_small", "final.safetensors");
  printf("# epoch sampling vs uniform on the same shard: weights %.3g relative apart\n", u);
  // w exactly: the resume continues the same ops in the same order
  CHECK(rc == 0 && w == 0.0 && u > 0.0, "data.sampling epoch: stopped after step 30 (epoch 4 of 8) and "
        "resumed, final weights bit-identical; they differ from uniform sampling's", "%s",
        rc ? ng_error() : "weights differ, or sampling had no effect");
}

// The hard-label CE of a run's first step (its first batch, before any update).
static double first_step_ce(const char *run) {
  metrics m = read_metrics(run);
  double ce = NAN;
  for (int i = 0; i < m.n && isnan(ce); i++)
    if (is(m.rec[i], "step")) ce = num(m.rec[i], "ce");
  metrics_free(&m);
  return ce;
}

// The same from top-k caches of the teacher (k 8) on the small shard and the
// validation shard: the cache's windows in epoch order, resumed bit for bit.
// They are the shard's own epoch windows in the same order: a cache run's first
// batch is the exact teacher's run's (check_epochs' "epoch"), so the student's
// CE there agrees (to rounding: the loss ops differ), where another batch's
// (uniform sampling's) does not.
static void check_epochs_cached(void) {
  const char *splits[2][2] = {{"small.bin", "small.topk"}, {"val.bin", "val.topk"}};
  char path[160], cache[160];
  ng_model *teacher = NULL;
  snprintf(path, sizeof path, "%s/teacher/final.safetensors", dir);
  bool built = ng_model_open(path, ng_backend_cpu(), false, &teacher) == 0;
  for (int i = 0; built && i < 2; i++) {
    ng_shard s;
    snprintf(path, sizeof path, "%s/%s", dir, splits[i][0]);
    snprintf(cache, sizeof cache, "%s/%s", dir, splits[i][1]);
    built = ng_shard_open(&s, path) == 0 && ng_topk_build(teacher, &s, 8, T, 2.0, 16, cache) == 0;
    ng_shard_close(&s);
  }
  ng_model_free(teacher);
  char extra[400];
  snprintf(extra, sizeof extra, ", \"teacher_cache\": {\"train\": \"%s/small.topk\", \"val\": \"%s/val.topk\"}",
           dir, dir);
  const char *train = "/train.bin\"", *epoch = "/small.bin\", \"sampling\": \"epoch\"";
  int rc = !built || train_variant("cache_epoch30", extra, train, epoch, 30);
  snprintf(path, sizeof path, "%s/cache_epoch30", dir);
  ng_train_args resume = {.resume_dir = path};
  rc = rc || ng_train(&resume) || train_variant("cache_epoch", extra, train, epoch, 0) ||
       train_variant("cache_uniform", extra, train, "/small.bin\"", 0);
  double w = weights_diff("cache_epoch30", "cache_epoch", "final.safetensors");
  double u = weights_diff("cache_epoch", "cache_uniform", "final.safetensors");
  // w exactly: the resume continues the same ops in the same order
  CHECK(rc == 0 && w == 0.0 && u > 0.0, "data.sampling epoch from top-k caches: stopped after step 30 and "
        "resumed, final weights bit-identical; they differ from uniform sampling's", "%s",
        rc ? ng_error() : "weights differ, or sampling had no effect");
  double cached = first_step_ce("cache_epoch"), exact = first_step_ce("epoch"), other = first_step_ce("uniform_small");
  CHECK(fabs(cached - exact) <= 1e-6 * exact && fabs(other - exact) > 1e-3 * exact,
        "data.sampling epoch: a cache run's first batch is the exact teacher's run's (first-step CE equal to "
        "1e-6, another batch's apart by more than 1e-3)", "cache %.9g, exact %.9g, uniform %.9g", cached, exact,
        other);
}

// The reverse KL from a top-k cache whose every position leaves the teacher no
// mass outside its k ids (small.topk with each log mass off the cache set to
// -inf, as a teacher whose other logits are all -inf would store it): the run
// stops at step 1 with one line naming the KD term and the cause; forward KL
// from the same cache trains.
static void check_reverse_kl_cache(void) {
  char path[160], cache[160];
  snprintf(path, sizeof path, "%s/small.topk", dir);
  snprintf(cache, sizeof cache, "%s/empty_rest.topk", dir);
  size_t n;
  char *bytes = read_file(path, &n);
  NG_ASSERT(bytes && n > NG_TOPK_HEADER);
  uint32_t k, seq;
  uint64_t windows;
  memcpy(&k, bytes + 12, 4);
  memcpy(&seq, bytes + 20, 4);
  memcpy(&windows, bytes + 32, 8);
  size_t P = (size_t)windows * seq, rest = NG_TOPK_HEADER + 8 * P * k + 4 * P;
  NG_ASSERT(n == rest + 4 * P);
  float none = -INFINITY;
  for (size_t i = 0; i < P; i++) memcpy(bytes + rest + 4 * i, &none, 4);
  FILE *f = fopen(cache, "wb");
  NG_ASSERT(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0);
  free(bytes);
  char extra[400];
  snprintf(extra, sizeof extra, ", \"teacher_cache\": {\"train\": \"%s\", \"val\": \"%s/val.topk\"}", cache, dir);
  for (int rkl = 0; rkl < 2; rkl++) {
    const char *run = rkl ? "cache_rkl" : "cache_fkl";
    snprintf(path, sizeof path, "%s/%s.json", dir, run);
    write_arm(path, run, extra);
    edit_file(path, "/train.bin\"", "/small.bin\"");
    if (rkl) edit_file(path, "\"kd_weight\"", "\"divergence\": \"reverse_kl\", \"kd_weight\"");
    ng_train_args a = {.config_path = path, .overrides = {.seed = -1}, .stop_after = 2};
    int rc = ng_train(&a);
    if (!rkl)
      CHECK(rc == 0, "forward KL from a top-k cache that leaves no teacher mass outside its ids: trains",
            "%s", ng_error());
    else
      CHECK(rc != 0 && strstr(ng_error(), "step 1 ") && strstr(ng_error(), "the KD term is not finite") &&
                strstr(ng_error(), "the reverse KL from a top-k cache") && strstr(ng_error(), "forward_kl or jsd") &&
                !strchr(ng_error(), '\n'),
            "reverse KL from that cache: stops at step 1 in one line naming the KD term and the cache",
            "rc %d: %s", rc, rc ? ng_error() : "");
  }
}

// The runs the settings are compared with: the arm at its lower learning rate, 30 steps.
static void check_settings(void) {
  int rc = train_variant("whole30", "", NULL, NULL, 30);
  CHECK(rc == 0, "the arm at peak learning rate 0.002 for 30 steps", "%s", ng_error());
  check_chunks();
  check_micro_batches();
  check_recompute();
  check_epochs();
  check_epochs_cached();
  check_reverse_kl_cache();
}

// ---------------------------------------------------------------- bad configs

static void expect_bad(const char *name, const char *extra_or_null, const char *replace_from,
                       const char *replace_to, const char *want) {
  char path[160];
  snprintf(path, sizeof path, "%s/bad.json", dir);
  write_arm(path, "bad", extra_or_null ? extra_or_null : "");
  if (replace_from) {
    size_t n;
    char *text = read_file(path, &n), *at = strstr(text, replace_from);
    NG_ASSERT(at);
    *at = 0;
    write_file(path, "%s%s%s", text, replace_to, at + strlen(replace_from));
    free(text);
  }
  int rc = train(path);
  CHECK(rc != 0 && strstr(ng_error(), want) && !strchr(ng_error(), '\n'), name, "rc %d, message: %s", rc, ng_error());
}

// The arm with model.norm_placement `placement` and growth.new_block_placement
// `grown` (with rescale_stream when `rescale`): refused in one line with `want`.
static void expect_bad_hybrid(const char *name, const char *placement, const char *grown, bool rescale,
                              const char *want) {
  char path[160], from[64], to[128];
  snprintf(path, sizeof path, "%s/bad.json", dir);
  write_arm(path, "bad", "");
  snprintf(to, sizeof to, "\"norm_placement\": \"%s\"", placement);
  edit_file(path, "\"norm_placement\": \"post\"", to);
  snprintf(from, sizeof from, "\"gate_steps\": 5}");
  snprintf(to, sizeof to, "\"gate_steps\": 5, \"new_block_placement\": \"%s\"%s}", grown,
           rescale ? ", \"rescale_stream\": true" : "");
  edit_file(path, from, to);
  int rc = train(path);
  CHECK(rc != 0 && strstr(ng_error(), want) && !strchr(ng_error(), '\n'), name, "rc %d, message: %s", rc, ng_error());
}

static void check_bad_configs(void) {
  expect_bad_hybrid("new_block_placement of the model's own placement", "post", "post", false,
                    "growth.new_block_placement: \"post\" is model.norm_placement itself");
  expect_bad_hybrid("new_block_placement lns", "post", "lns", false,
                    "growth.new_block_placement: \"lns\" is neither");
  expect_bad_hybrid("new_block_placement on a sandwich model", "sandwich", "pre", false,
                    "growth.new_block_placement: grows on a pre or post model");
  expect_bad_hybrid("rescale_stream with post blocks grown on a pre model", "pre", "post", true,
                    "growth.rescale_stream: the stream of a model with post blocks");
  expect_bad("a hybrid model in a run config", NULL, "\"norm_placement\": \"post\"",
             "\"norm_placement\": \"hybrid\", \"layer_placements\": [\"pre\", \"post\", \"pre\"]",
             "model.norm_placement: a run's hybrid student is made by growth");
  expect_bad("a zero depth", NULL, "{\"depth\": 2, \"tokens\": 5120}", "{\"depth\": 0, \"tokens\": 5120}", "stages[1].depth");
  expect_bad("a depth below the one before", NULL, "\"stages\": [{\"depth\": 1", "\"stages\": [{\"depth\": 3", "only grow");
  expect_bad("a zero-token stage", NULL, "{\"depth\": 2, \"tokens\": 5120}", "{\"depth\": 2, \"tokens\": 0}", "stages[1].tokens");
  expect_bad("tokens not a whole number of batches", NULL, "{\"depth\": 2, \"tokens\": 5120}", "{\"depth\": 2, \"tokens\": 5000}", "whole number of batches");
  expect_bad("no stages", NULL, "\"stages\": [{\"depth\": 1, \"tokens\": 5120}, {\"depth\": 2, \"tokens\": 5120}, {\"depth\": 3, \"tokens\": 5120}]", "\"stages\": []", "stages: expected a non-empty array");
  expect_bad("unknown growth init", NULL, "\"init\": \"gate\"", "\"init\": \"mirror\"", "growth.init: unknown value \"mirror\"");
  expect_bad("unknown growth position", NULL, "\"position\": \"top\"", "\"position\": \"bottom\"", "growth.position: unknown value \"bottom\"");
  expect_bad("unknown key", ", \"warmup\": 3", NULL, NULL, "unknown key \"warmup\"");
  expect_bad("unknown precision", ", \"precision\": \"fp16\"", NULL, NULL, "precision \"fp16\": expected fp32 or bf16");
  expect_bad("unknown backend", ", \"backend\": \"tpu\"", NULL, NULL, "backend \"tpu\" is not built");
  expect_bad("freezing on a stage that does not grow", NULL, "{\"depth\": 1, \"tokens\": 5120}", "{\"depth\": 1, \"tokens\": 5120, \"freeze_existing\": true}", "freeze_existing");
  expect_bad("missing teacher file", NULL, "teacher/final.safetensors", "teacher/none.safetensors", "none.safetensors");
  expect_bad("teacher of another vocabulary", NULL, "teacher/final.safetensors", "wide.safetensors", "vocabulary");
  expect_bad("unknown data.sampling", NULL, "\"batch\": 8,", "\"batch\": 8, \"sampling\": \"shuffle\",", "data.sampling: unknown value \"shuffle\"");
  expect_bad("micro_batch not dividing the batch", NULL, "\"batch\": 8,", "\"batch\": 8, \"micro_batch\": 3,", "data.micro_batch");
  expect_bad("unknown train key", ", \"train\": {\"chunk\": 3}", NULL, NULL, "unknown key \"chunk\"");
  expect_bad("rescale_stream on Post-Norm", NULL, "\"gate_steps\": 5}", "\"gate_steps\": 5, \"rescale_stream\": true}",
             "growth.rescale_stream: the stream of a Post-Norm model cannot be rescaled");
  expect_bad("depth_scaled_init with a copied block", NULL, "\"init\": \"gate\", \"gate_steps\": 5}",
             "\"init\": \"copy_below\", \"depth_scaled_init\": true}", "growth.depth_scaled_init");
  expect_bad("last depth differs from the model", NULL, "{\"depth\": 3, \"tokens\": 5120}", "{\"depth\": 4, \"tokens\": 5120}", "num_hidden_layers");
  expect_bad("mixln with more post blocks than the first stage's depth", NULL, "\"norm_placement\": \"post\"",
             "\"norm_placement\": \"mixln\", \"mixln_post_layers\": 2", "model.mixln_post_layers");
  expect_bad("deepnorm without its alpha", NULL, "\"norm_placement\": \"post\"", "\"norm_placement\": \"deepnorm\"",
             "model.deepnorm_alpha");
}

// A student started from teacher layers {"every": 1} and its embeddings, trained
// at learning rate 0: its final weights are the teacher's, tensor for tensor.
static void check_init_from_teacher(void) {
  char path[160];
  snprintf(path, sizeof path, "%s/copy.json", dir);
  write_file(path,
             "{\"name\": \"copy\", \"seed\": 5, \"run_dir\": \"%s/copy\", \"mode\": \"distill\", %s,"
             " \"model\": %s, \"teacher\": \"%s/teacher/final.safetensors\","
             " \"loss\": {\"kd_weight\": 0.5, \"temperature\": 2.0},"
             " \"init\": {\"layers\": {\"every\": 1}, \"embeddings\": \"teacher\"},"
             " \"stages\": [{\"depth\": 2, \"tokens\": 2560, \"lr\": {\"peak\": 0, \"floor\": 0,"
             " \"warmup_tokens\": 0, \"shape\": \"constant\"}}]}",
             dir, common_json(), model_json(2, "pre"), dir);
  int rc = train(path);
  char a[160], b[160];
  snprintf(a, sizeof a, "%s/teacher/final.safetensors", dir);
  snprintf(b, sizeof b, "%s/copy/final.safetensors", dir);
  ng_model *teacher = NULL, *student = NULL;
  bool same = rc == 0 && ng_checkpoint_load(a, ng_backend_cpu(), false, &teacher, NULL, NULL) == 0 &&
              ng_checkpoint_load(b, ng_backend_cpu(), false, &student, NULL, NULL) == 0 &&
              teacher->n_params == student->n_params;
  // exact: at learning rate 0 AdamW writes p x 1 - 0 x update = p
  for (int i = 0; same && i < student->n_params; i++)
    same = memcmp(student->params[i].data, teacher->params[i].data, student->params[i].numel * 4) == 0;
  CHECK(same, "student initialised from teacher layers (every 1) and embeddings holds the teacher's tensors",
        "%s", rc ? ng_error() : "tensors differ");
  ng_model_free(teacher);
  ng_model_free(student);
}

// A teacher checkpoint whose vocabulary differs from the student's.
static void write_wide_teacher(void) {
  ng_model_config c = {.vocab_size = 300, .hidden_size = D, .intermediate_size = F, .num_hidden_layers = 1,
                       .num_attention_heads = H, .num_key_value_heads = KV, .head_dim = HD, .rope_theta = 1e4,
                       .rms_norm_eps = 1e-6, .tie_word_embeddings = true, .final_norm = true};
  ng_model *m = ng_model_create(ng_backend_cpu(), &c, false);
  char path[160];
  snprintf(path, sizeof path, "%s/wide.safetensors", dir);
  NG_ASSERT(ng_checkpoint_save(path, m, NULL, NULL) == 0);
  ng_model_free(m);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/ng_train_XXXXXX");
  NG_ASSERT(mkdtemp(dir));
  CHECK(make_data(), "token shards from the Debian license texts", "%s", ng_error());
  char path[160];
  snprintf(path, sizeof path, "%s/teacher.json", dir);
  write_file(path,
             "{\"name\": \"teacher\", \"seed\": 1, \"run_dir\": \"%s/teacher\", \"mode\": \"pretrain\", %s,"
             " \"model\": %s, \"stages\": [{\"depth\": 2, \"tokens\": 30720}]}",
             dir, common_json(), model_json(2, "pre"));
  CHECK(train(path) == 0, "pretrain a toy teacher", "%s", ng_error());
  snprintf(path, sizeof path, "%s/arm.json", dir);
  write_arm(path, "arm", "");
  CHECK(train(path) == 0, "distill a growing Post-Norm student", "%s", ng_error());
  check_run_files("arm");
  check_run_files_documented();
  check_claim();
  metrics m = read_metrics("arm");
  check_accounting(&m);
  check_learning(&m);
  metrics_free(&m);
  check_init_from_teacher();
  check_resume(30);  // inside stage 2
  check_resume(40);  // at the stage boundary, before the growth
  check_settings();
  check_hybrid_growth();
  write_wide_teacher();
  check_bad_configs();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
