// Non-finite training: a run that really diverges (stage 2 at a learning rate
// of 10 with a weight decay of 1000: the weights grow ~10^4-fold a step) stops
// at that step with one line naming the step, the stage and the first
// non-finite tensor (NG_TRAIN_DIVERGED), ends metrics.jsonl with a "diverged"
// record of that step, writes no checkpoint or final weights from that state,
// and resumes from its last checkpoint once config.json has a sane learning
// rate (the resume re-reads it). A checkpoint with one Inf weight (written by
// the test into a real checkpoint) is refused on resume with the tensor named,
// and left as it was; one with a finite but absurd weight (1e30) stops at the
// next step on the CE bound (100 x ln(vocabulary)).
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/registry.h"
#include "normgrow/safetensors.h"
#include "normgrow/run.h"
#include "normgrow/train.h"

static char dir[64];
static ng_backend *be;

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  NG_ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

// The whole file, or NULL when it cannot be read.
static char *slurp(const char *path, size_t *n) {
  char *text = NULL;
  return ng_read_file(path, (size_t)1 << 30, &text, n) == 0 ? text : NULL;
}

// Replaces the first `from` in the file by `to`.
static void edit_file(const char *path, const char *from, const char *to) {
  size_t n;
  char *text = slurp(path, &n), *at = strstr(text, from);
  NG_ASSERT(at);
  *at = 0;
  char *out = ng_xmalloc(n + strlen(to) + 1);
  sprintf(out, "%s%s%s", text, to, at + strlen(from));
  write_file(path, out);
  free(out);
  free(text);
}

// Pretraining, 2 blocks, 10 steps at LR 1e-3, then 20 steps of stage 2 at the
// LR `peak2` (constant); weight decay `wd`; a checkpoint every 10 steps.
static void write_config(const char *path, const char *run, const char *peak2, const char *wd) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"name\": \"nf\", \"seed\": 2, \"run_dir\": \"%s/%s\", \"mode\": \"pretrain\","
           " \"data\": {\"train\": \"%s/train.bin\", \"val\": \"%s/val.bin\", \"batch\": 4, \"seq\": 16},"
           " \"model\": {\"vocab_size\": 257, \"hidden_size\": 16, \"intermediate_size\": 32,"
           " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
           " \"head_dim\": 8, \"rope_theta\": 10000, \"rms_norm_eps\": 1e-6,"
           " \"tie_word_embeddings\": true, \"norm_placement\": \"pre\", \"final_norm\": true},"
           " \"optim\": {\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"weight_decay\": %s, \"grad_clip\": 1.0},"
           " \"lr\": {\"peak\": 0.001, \"floor\": 0.001, \"warmup_tokens\": 0, \"shape\": \"constant\"},"
           " \"stages\": [{\"depth\": 2, \"tokens\": 640},"
           " {\"depth\": 2, \"tokens\": 1280, \"lr\": {\"peak\": %s, \"floor\": 0.0, \"warmup_tokens\": 0,"
           " \"shape\": \"constant\"}}],"
           " \"eval\": {\"every_steps\": 10, \"batches\": 2}, \"checkpoint_every_steps\": 10}",
           dir, run, dir, dir, wd, peak2);
  write_file(path, text);
}

// Whether every weight of the checkpoint is finite; with `step` the file
// holds a training state, its step into *step.
static bool finite_checkpoint(const char *path, int64_t *step) {
  ng_model *m = NULL;
  ng_adamw *o = NULL;
  ng_train_state st = {0};
  if (ng_checkpoint_load(path, be, true, &m, step ? &o : NULL, step ? &st : NULL)) return false;
  bool ok = true;
  for (int i = 0; i < m->n_params; i++)
    for (size_t j = 0; j < m->params[i].numel; j++) ok = ok && isfinite(m->params[i].data[j]);
  if (step) *step = st.step;
  free(st.gate_origin);
  ng_adamw_free(m, o);
  ng_model_free(m);
  return ok;
}

// The steps and learning rates of the "step" records of a metrics log.
static int read_steps(const char *path, int64_t *steps, double *lrs, int max) {
  size_t n;
  char *text = slurp(path, &n), *save = NULL;
  int k = 0;
  for (char *line = text ? strtok_r(text, "\n", &save) : NULL; line && k < max;
       line = strtok_r(NULL, "\n", &save)) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event");
    if (cJSON_IsString(ev) && strcmp(ev->valuestring, "step") == 0) {
      steps[k] = (int64_t)cJSON_GetObjectItemCaseSensitive(j, "step")->valuedouble;
      lrs[k++] = cJSON_GetObjectItemCaseSensitive(j, "lr")->valuedouble;
    }
    cJSON_Delete(j);
  }
  free(text);
  return k;
}

// The last record of a metrics log: its event and step, and its "why" (""
// when it has none) into why[n]. False when the log has no record.
static bool last_record(const char *path, char *event, size_t n_event, int64_t *step, char *why, size_t n) {
  size_t len;
  char *text = slurp(path, &len), *last = NULL, *save = NULL;
  for (char *line = text ? strtok_r(text, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save))
    last = line;
  cJSON *j = last ? cJSON_Parse(last) : NULL;
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event"), *w = cJSON_GetObjectItemCaseSensitive(j, "why");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
  bool ok = cJSON_IsString(ev) && cJSON_IsNumber(st);
  if (ok) {
    snprintf(event, n_event, "%s", ev->valuestring);
    snprintf(why, n, "%s", cJSON_IsString(w) ? w->valuestring : "");
    *step = (int64_t)st->valuedouble;
  }
  cJSON_Delete(j);
  free(text);
  return ok;
}

// Whether the metrics log ends with the "diverged" record of `step`, whose
// "why" is the reason the stop's message `msg` gives.
static bool diverged_record(const char *path, int64_t step, const char *msg) {
  char event[32], why[400];
  int64_t at;
  return last_record(path, event, sizeof event, &at, why, sizeof why) && strcmp(event, "diverged") == 0 &&
         at == step && why[0] && strstr(msg, why);
}

// Whether a stop's message names what stopped it: the first non-finite value
// (the gradient of a tensor, an updated tensor, or the loss), or the CE bound.
static bool stop_named(const char *msg) {
  return (strstr(msg, "non-finite") &&
          (strstr(msg, "first in the gradient of ") || strstr(msg, " (updated)") ||
           strstr(msg, "first in the loss"))) ||
         (strstr(msg, "training CE") && strstr(msg, "above 100 x ln(vocabulary 257) = 554.9"));
}

// Stage 2 diverges: the run stops at a step of stage 2 (the CE bound or a
// non-finite value, whichever comes first), names what stopped it, keeps
// the checkpoint of step 10 and writes no final weights; config.json then gets
// a sane LR and weight decay and the run resumes from step 10 to the end.
static void check_divergence(void) {
  char config[160], run[96], ckpt[160], final[160], metrics[160];
  snprintf(config, sizeof config, "%s/diverge.json", dir);
  snprintf(run, sizeof run, "%s/diverge", dir);
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", run);
  snprintf(final, sizeof final, "%s/final.safetensors", run);
  snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run);
  write_config(config, "diverge", "10", "1000");
  ng_train_args a = {.config_path = config, .overrides = {.seed = -1}};
  int rc = ng_train(&a);
  const char *msg = ng_error();
  long step = 0;
  const char *at = strstr(msg, ": step ");
  if (at) step = strtol(at + 7, NULL, 10);
  int64_t ckpt_step = -1;
  bool named = strstr(msg, "(stage 2)") && strchr(msg, '\n') == NULL && stop_named(msg) &&
               strstr(msg, "; the last checkpoint in ") && strstr(msg, "`normgrow train --resume ");
  CHECK(rc == NG_TRAIN_DIVERGED && named && step > 10 && step <= 30,
        "a diverging run stops at its step with one line", "status %d: %s", rc, msg);
  printf("# %s\n", msg);
  CHECK(diverged_record(metrics, step, msg), "metrics.jsonl ends with the \"diverged\" record of that step and why",
        "stopped at step %ld: %s", step, msg);
  CHECK(finite_checkpoint(ckpt, &ckpt_step) && ckpt_step == 10 && access(final, F_OK) != 0,
        "the diverged run leaves its last good checkpoint (step 10) and no final weights",
        "checkpoint step %lld, final %s", (long long)ckpt_step,
        access(final, F_OK) == 0 ? "written" : "absent");
  int64_t steps[64];
  double lrs[64];
  int n = read_steps(metrics, steps, lrs, 64);
  CHECK(n == step - 1 && steps[n - 1] == step - 1, "metrics.jsonl ends with the last finite step",
        "%d step records, the last %lld, stopped at %ld", n, n ? (long long)steps[n - 1] : -1LL, step);

  // Resume after lowering stage 2's LR (and the decay) in the run's config.json.
  char run_config[160];
  snprintf(run_config, sizeof run_config, "%s/config.json", run);
  edit_file(run_config, "\"peak\":\t10", "\"peak\":\t0.0005");
  edit_file(run_config, "\"weight_decay\":\t1000", "\"weight_decay\":\t0.1");
  ng_train_args r = {.resume_dir = run};
  rc = ng_train(&r);
  n = read_steps(metrics, steps, lrs, 64);
  bool order = n == 30;
  // exact: a constant schedule logs its peak, the config's number read back from its digits
  for (int i = 0; order && i < n; i++) order = steps[i] == i + 1 && lrs[i] == (i < 10 ? 0.001 : 0.0005);
  char *log = slurp(metrics, NULL);
  bool cut = log && !strstr(log, "\"diverged\"");
  free(log);
  CHECK(rc == 0 && finite_checkpoint(final, NULL) && order && cut,
        "resumed from step 10 with the LR of the edited config.json: 30 finite steps, the diverged record cut",
        "status %d (%s), %d step records, the diverged record %s", rc, rc ? ng_error() : "", n,
        cut ? "cut" : "still there");
}

// A copy of the checkpoint `path` (in place) with element 3 of `name` set to `value`.
static void poison(const char *path, const char *name, float value) {
  ng_st_file f;
  NG_ASSERT(ng_st_open(&f, path) == 0);
  ng_st_writer *w = ng_st_writer_new();
  float *bad = NULL;
  for (int i = 0; i < f.n_meta; i++) ng_st_writer_meta(w, f.meta_keys[i], f.meta_values[i]);
  for (int i = 0; i < f.n; i++) {
    const ng_st_tensor *t = &f.tensors[i];
    const void *data = t->data;
    if (strcmp(t->name, name) == 0) {
      NG_ASSERT(t->dtype == NG_F32 && t->numel >= 4);
      bad = ng_xmalloc(t->numel * sizeof(float));
      memcpy(bad, t->data, t->numel * sizeof(float));
      bad[3] = value;
      data = bad;
    }
    ng_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, data);
  }
  NG_ASSERT(bad && ng_st_writer_save(w, path) == 0);
  ng_st_writer_free(w);
  ng_st_close(&f);
  free(bad);
}

// A finished run whose checkpoint has one Inf weight: --resume (to train on)
// refuses it naming the tensor, and changes no file of the run.
static void check_poisoned(void) {
  char config[160], run[96], ckpt[160], final[160], run_config[160];
  snprintf(config, sizeof config, "%s/poison.json", dir);
  snprintf(run, sizeof run, "%s/poison", dir);
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", run);
  snprintf(final, sizeof final, "%s/final.safetensors", run);
  snprintf(run_config, sizeof run_config, "%s/config.json", run);
  write_config(config, "poison", "0.001", "0.1");
  ng_train_args a = {.config_path = config, .overrides = {.seed = -1}};
  bool trained = ng_train(&a) == 0;
  const char *tensor = "model.layers.1.mlp.down_proj.weight";
  poison(ckpt, tensor, INFINITY);
  size_t n0, n1, n2, c0, c1;
  char *before = slurp(ckpt, &n0), *final_before = slurp(final, &n1), *cfg = slurp(run_config, &c0);
  ng_train_args r = {.resume_dir = run, .extend_tokens = 640};
  int rc = ng_train(&r);
  const char *msg = ng_error();
  // exact: the refused resume must leave the files' bytes untouched
  char *after = slurp(ckpt, &n2), *final_after = slurp(final, &n1), *cfg_after = slurp(run_config, &c1);
  bool same = n0 == n2 && memcmp(before, after, n0) == 0 && final_after &&
              memcmp(final_before, final_after, n1) == 0 && c0 == c1 && memcmp(cfg, cfg_after, c0) == 0;
  CHECK(trained && rc == -1 && strstr(msg, tensor) && strstr(msg, "checkpoint.safetensors") && same,
        "a checkpoint with one Inf weight: resume refused naming the tensor, files unchanged",
        "status %d: %s (files %s)", rc, msg, same ? "unchanged" : "changed");
  printf("# %s\n", msg);
  free(before), free(after), free(final_before), free(final_after), free(cfg), free(cfg_after);
}

// A checkpoint of step 10 (stage 1) with element 3 of the tied embedding
// (token 0's row, which every position's logit of token 0 reads) set to
// `value`: the resumed run stops at step 11 with one line that `want` is in;
// the checkpoint it resumed from stays as it was, metrics.jsonl ends at step
// 10 and the "diverged" record of step 11, and no final weights are written.
static void check_bad_weight(const char *name, float value, const char *want) {
  char config[160], run[96], ckpt[160], final[160], metrics[160];
  snprintf(config, sizeof config, "%s/%s.json", dir, name);
  snprintf(run, sizeof run, "%s/%s", dir, name);
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", run);
  snprintf(final, sizeof final, "%s/final.safetensors", run);
  snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run);
  write_config(config, name, "0.001", "0.1");
  ng_train_args a = {.config_path = config, .overrides = {.seed = -1}, .stop_after = 10};
  bool trained = ng_train(&a) == 0;
  poison(ckpt, "model.embed_tokens.weight", value);
  size_t n0, n1;
  char *before = slurp(ckpt, &n0);
  ng_train_args r = {.resume_dir = run};
  int rc = ng_train(&r);
  const char *msg = ng_error();
  char *after = slurp(ckpt, &n1);
  int64_t steps[64];
  double lrs[64];
  int n = read_steps(metrics, steps, lrs, 64);
  bool kept = n0 == n1 && memcmp(before, after, n0) == 0 && access(final, F_OK) != 0 && n == 10 &&
              steps[n - 1] == 10;
  char what[200];
  snprintf(what, sizeof what, "a weight of %g: the run stops at the next step with one line, its checkpoint kept",
           (double)value);
  CHECK(trained && rc == NG_TRAIN_DIVERGED && strstr(msg, "step 11 (stage 2)") && strstr(msg, want) &&
            stop_named(msg) && !strchr(msg, '\n') && kept && diverged_record(metrics, 11, msg),
        what, "status %d: %s (checkpoint %s, %d step records, final %s)", rc, rc ? msg : "",
        n0 == n1 && memcmp(before, after, n0) == 0 ? "unchanged" : "changed", n,
        access(final, F_OK) == 0 ? "written" : "absent");
  printf("# %s\n", msg);
  free(before), free(after);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/ng_nonfinite_XXXXXX");
  NG_ASSERT(mkdtemp(dir));
  be = ng_backend_open("cpu", NG_PREC_FP32);
  ng_data_stats st = {0};
  if (!test_license_shards(dir, &st)) {
    printf("FAIL data: no license texts to build shards from\n");
    return 1;
  }
  check_divergence();
  check_poisoned();
  // Finite but absurd (the training CE ~1e29, all finite): the CE bound.
  check_bad_weight("runaway", 1e30f, "training CE");
  // Near the float range's end: the forward overflows, a non-finite loss.
  check_bad_weight("overflow", 3e38f, "non-finite training");
  ng_backend_close(be);
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
