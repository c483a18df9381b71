// normgrow diag: residual statistics and block-removal ablation of a model.
//   normgrow diag MODEL [--data SHARD] [--teacher CKPT] [--batches N] [--batch B]
//                [--seq T] [--structural ID,ID...] [--top K] [--kd-weight A]
//                [--temperature TAU] [--out FILE [--force]]
// MODEL is a run directory (its final.safetensors, else its checkpoint), a
// normgrow checkpoint, or a Hugging Face directory. When it belongs to a run
// (a run directory, or a checkpoint beside the run's config.json), the run's
// own evaluation is the default: its validation shard, eval.batches,
// data.batch, data.seq, structural_tokens, teacher (not for a run that
// distils from top-k caches: its diagnostics have no KD) and loss; each option
// replaces one of them. Otherwise --data is required and the rest defaults to
// 4 batches of 8 x 128, no structural ids, no teacher. The step and tokens are
// the checkpoint's (its training state; for final.safetensors the run's last
// step), null when unknown (a Hugging Face directory). Prints the JSON of
// diag.h (with the ablation, and "settings": what was used) or writes it
// atomically to FILE (an existing FILE only with --force); a one-line summary
// of the settings goes to stderr.
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/diag.h"
#include "normgrow/fileio.h"
#include "normgrow/plan.h"
#include "normgrow/registry.h"
#include "normgrow/run.h"
#include "normgrow/rundir.h"

#define MAX_COUNT (1 << 20)           // --batches, --batch, --seq, --top
#define MAX_TOKENS ((int64_t)1 << 30)  // batches x batch x seq

typedef struct {
  char *model;                   // the weights: a checkpoint file or a Hugging Face directory
  char *run_dir;                 // the run it belongs to, or NULL
  ng_run_config rc;              // that run's config (when run_dir)
  const char *data, *teacher, *out;
  int64_t batches, B, T, top_k;
  double kd_weight, temperature;
  ng_divergence divergence;  // the run's (forward_kl without a distilling run)
  double beta;
  const char *structural;        // the --structural text, parsed once the vocabulary is known
  int64_t step, tokens;          // -1: unknown
} diag_args;

// Everything loaded; zeroed fields are safe to release.
typedef struct {
  ng_backend *be;
  ng_model *student, *teacher;
  ng_shard shard;
  int32_t *structural;
  int n_structural;
} diag_inputs;

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// Which weights MODEL names, and the run they belong to.
static int locate(const char *arg, diag_args *a) {
  if (is_dir(arg) && ng_rundir_is_run(arg)) {
    a->run_dir = ng_xstrdup(arg);
    a->model = ng_rundir_path(arg, ng_rundir_has(arg, NG_RUN_FINAL) ? NG_RUN_FINAL : NG_RUN_CHECKPOINT);
  } else {
    a->model = ng_xstrdup(arg);
    char *copy = ng_xstrdup(arg), *dir = dirname(copy);
    if (!is_dir(arg) && ng_rundir_is_run(dir)) a->run_dir = ng_xstrdup(dir);
    free(copy);
  }
  if (!a->run_dir) return 0;
  return ng_rundir_load_config(a->run_dir, NULL, &a->rc);
}

// The step and tokens of the weights: the checkpoint's training state, or for
// final.safetensors of a finished run the run's last step.
static void find_step(diag_args *a) {
  a->step = a->tokens = -1;
  if (is_dir(a->model)) return;
  ng_st_file f;
  if (ng_st_open(&f, a->model) != 0) return;
  const char *state = ng_st_meta(&f, "state");
  cJSON *s = state ? cJSON_Parse(state) : NULL;
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(s, "step");
  const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(s, "tokens");
  if (cJSON_IsNumber(step) && cJSON_IsNumber(tokens)) {
    a->step = (int64_t)step->valuedouble;
    a->tokens = (int64_t)tokens->valuedouble;
  }
  cJSON_Delete(s);
  ng_st_close(&f);
  const char *base = strrchr(a->model, '/');
  ng_rundir_status rd;
  if (a->step < 0 && a->run_dir && strcmp(base ? base + 1 : a->model, ng_run_file_name(NG_RUN_FINAL)) == 0 &&
      ng_rundir_read(a->run_dir, &rd) == 0) {
    if (rd.finished) {
      a->step = rd.last_step;
      a->tokens = rd.last_step * a->rc.batch * a->rc.seq;
    }
    ng_rundir_status_free(&rd);
  }
}

// Optional integer option with a default.
static int int_opt(const ng_cli *c, const char *key, int64_t def, int64_t min, int64_t *out) {
  *out = def;
  return ng_cli_int_opt(c, key, min, MAX_COUNT, out);
}

static char *structural_text(const ng_run_config *rc) {
  char *s = ng_xcalloc(NG_MAX_STRUCTURAL * 12 + 1, 1);
  for (int i = 0; i < rc->n_structural; i++)
    sprintf(s + strlen(s), "%s%d", i ? "," : "", (int)rc->structural_tokens[i]);
  return s;
}

static int parse_args(const ng_cli *c, diag_args *a, char **structural_buf) {
  if (locate(c->pos[0], a)) return -1;
  const ng_run_config *rc = a->run_dir ? &a->rc : NULL;
  bool teacher_runs = rc && rc->distill && !rc->use_cache && rc->teacher_path[0];
  a->kd_weight = rc && rc->distill ? rc->loss.kd_weight : 0.5;
  a->temperature = rc && rc->distill ? rc->loss.temperature : 2.0;
  a->divergence = rc && rc->distill ? rc->loss.divergence : NG_DIV_FORWARD_KL;
  a->beta = rc && rc->distill ? rc->loss.beta : 0.0;
  a->data = ng_cli_opt(c, "data") ? ng_cli_opt(c, "data") : rc ? rc->val_path : NULL;
  a->teacher = ng_cli_opt(c, "teacher") ? ng_cli_opt(c, "teacher") : teacher_runs ? rc->teacher_path : NULL;
  a->out = ng_cli_opt(c, "out");
  if (a->out && ng_cli_may_replace(c, a->out, "diagnostics")) return -1;
  *structural_buf = rc && rc->n_structural ? structural_text(rc) : NULL;
  a->structural = ng_cli_opt(c, "structural") ? ng_cli_opt(c, "structural") : *structural_buf;
  if (int_opt(c, "batches", rc ? rc->eval_batches : 4, 1, &a->batches) ||
      int_opt(c, "batch", rc ? rc->batch : 8, 1, &a->B) ||
      int_opt(c, "seq", rc ? rc->seq : 128, 1, &a->T) || int_opt(c, "top", 5, 0, &a->top_k) ||
      ng_cli_num_opt(c, "kd-weight", 0.0, true, 1.0, &a->kd_weight) ||
      ng_cli_num_opt(c, "temperature", 0.0, false, 1e6, &a->temperature))
    return -1;
  if (!a->data)
    return ng_fail("diag: --data SHARD is required (%s belongs to no run directory)", c->pos[0]);
  if (a->batches * a->B * a->T > MAX_TOKENS)
    return ng_fail("diag: --batches x --batch x --seq is over %lld tokens", (long long)MAX_TOKENS);
  return 0;
}

// "ID,ID,..." of token ids below V.
static int parse_structural(const char *s, int64_t V, diag_inputs *in) {
  int n = 1;
  for (const char *p = s; *p; p++) n += *p == ',';
  in->structural = ng_xcalloc((size_t)n, sizeof(int32_t));
  char *copy = ng_xstrdup(s), *save = NULL;
  int rc = 0;
  for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
    int64_t id;
    rc = ng_cli_parse_int(tok, "--structural", 0, V - 1, &id);
    in->structural[in->n_structural++] = (int32_t)id;
  }
  free(copy);
  if (rc == 0 && in->n_structural != n) rc = ng_fail("--structural: \"%s\" has an empty id", s);
  return rc;
}

static int load_inputs(const ng_cli *c, diag_args *a, diag_inputs *in) {
  ng_backend *be = in->be = ng_cli_backend(c);
  if (!be || ng_backend_check_divergence(be, a->divergence) ||
      ng_model_open(a->model, be, false, &in->student))
    return -1;
  find_step(a);
  int64_t V = in->student->cfg.vocab_size;
  if (a->teacher) {
    if (ng_model_open(a->teacher, be, false, &in->teacher)) return ng_fail_prefix("teacher");
    if (in->teacher->cfg.vocab_size != V)
      return ng_fail("diag: the teacher's vocabulary (%lld) differs from the student's (%lld)",
                     (long long)in->teacher->cfg.vocab_size, (long long)V);
  }
  if (ng_shard_open(&in->shard, a->data)) return -1;
  if ((int64_t)in->shard.vocab_size > V)  // a padded model vocabulary is fine
    return ng_fail("%s: vocabulary %u is larger than the model's (%lld)", a->data,
                   in->shard.vocab_size, (long long)V);
  if (in->shard.n_tokens < (uint64_t)a->T + 1)
    return ng_fail("%s: %llu tokens, fewer than --seq + 1 = %lld", a->data,
                   (unsigned long long)in->shard.n_tokens, (long long)(a->T + 1));
  return a->structural ? parse_structural(a->structural, V, in) : 0;
}

static void free_inputs(diag_inputs *in) {
  ng_model_free(in->teacher);
  ng_model_free(in->student);
  ng_shard_close(&in->shard);
  free(in->structural);
  ng_backend_close(in->be);
}

// "settings": what the diagnostics were computed with, and where from.
static cJSON *settings_json(const diag_args *a, const diag_inputs *in) {
  cJSON *s = cJSON_CreateObject(), *ids = cJSON_CreateArray();
  cJSON_AddStringToObject(s, "model", a->model);
  if (a->run_dir)
    cJSON_AddStringToObject(s, "run_dir", a->run_dir);
  else
    cJSON_AddNullToObject(s, "run_dir");
  cJSON_AddStringToObject(s, "data", a->data);
  cJSON_AddNumberToObject(s, "batches", (double)a->batches);
  cJSON_AddNumberToObject(s, "batch", (double)a->B);
  cJSON_AddNumberToObject(s, "seq", (double)a->T);
  for (int i = 0; i < in->n_structural; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(in->structural[i]));
  cJSON_AddItemToObject(s, "structural_tokens", ids);
  if (a->teacher)
    cJSON_AddStringToObject(s, "teacher", a->teacher);
  else
    cJSON_AddNullToObject(s, "teacher");
  cJSON_AddNumberToObject(s, "kd_weight", a->kd_weight);
  cJSON_AddNumberToObject(s, "temperature", a->temperature);
  return s;
}

// One line on stderr: the weights, their step, and the settings used.
static void say_settings(const diag_args *a, const diag_inputs *in) {
  char at[64] = "step and tokens unknown";
  if (a->step >= 0)
    snprintf(at, sizeof at, "step %lld, %lld tokens", (long long)a->step, (long long)a->tokens);
  fprintf(stderr,
          "diag: %s (%s): %lld batches of %lld x %lld from %s, %d structural ids, teacher %s; "
          "settings from %s%s\n",
          a->model, at, (long long)a->batches, (long long)a->B, (long long)a->T, a->data,
          in->n_structural, a->teacher ? a->teacher : "none",
          a->run_dir ? a->run_dir : "the defaults",
          a->run_dir ? "/config.json (options replace them)" : " and options");
}

// The diagnostics' buffers (plan.h's rule) beside the models already held.
static int check_diag_memory(const diag_args *a, const diag_inputs *in) {
  const ng_model_config *sc = &in->student->cfg, *tc = in->teacher ? &in->teacher->cfg : NULL;
  int64_t chunk = ng_loss_chunk_default(sc, a->B * a->T);
  double bytes = (double)ng_plan_diag_bytes(sc, tc, a->batches * a->B * a->T, a->B, a->T, chunk);
  if (tc) bytes += 4.0 * (double)ng_plan_count_params(tc, 0, false).total;
  char what[160];
  snprintf(what, sizeof what, "diag: --batches %lld x --batch %lld x --seq %lld%s", (long long)a->batches,
           (long long)a->B, (long long)a->T, tc ? " and the teacher" : "");
  return ng_plan_check_more_memory(sc, bytes, what);
}

static int run_diag(const diag_args *a, diag_inputs *in) {
  ng_diag_input di = {&in->shard, a->batches, a->B, a->T, in->teacher,
                      {a->kd_weight, a->temperature, in->shard.vocab_size, 0, a->divergence, a->beta}, 0};
  ng_diag_options o = {(int32_t)in->shard.separator, in->n_structural, in->structural,
                       (int)a->top_k};
  cJSON *j = ng_diag_json(in->student, &di, &o, true, a->step, a->tokens);
  if (a->step < 0) {
    cJSON_ReplaceItemInObjectCaseSensitive(j, "step", cJSON_CreateNull());
    cJSON_ReplaceItemInObjectCaseSensitive(j, "tokens", cJSON_CreateNull());
  }
  cJSON_AddItemToObject(j, "settings", settings_json(a, in));
  char *text = ng_json_print(j, true);
  cJSON_Delete(j);
  int rc = 0;
  if (a->out) {
    rc = ng_write_text_atomic(a->out, text);
  } else {
    printf("%s\n", text);
  }
  cJSON_free(text);
  if (rc == 0) say_settings(a, in);  // after the output: a failure is the only line on stderr
  return rc;
}

int cmd_diag(const ng_cli *c) {
  diag_args a = {0};
  diag_inputs in = {0};
  char *structural = NULL;
  int rc = parse_args(c, &a, &structural) || load_inputs(c, &a, &in) || check_diag_memory(&a, &in) ||
           run_diag(&a, &in);
  free_inputs(&in);
  free(structural);
  free(a.model);
  free(a.run_dir);
  ng_run_config_free(&a.rc);
  return rc ? ng_cli_error(ng_error()) : 0;
}
