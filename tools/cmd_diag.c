// normgrow diag: residual statistics and block-removal ablation of a checkpoint.
//   normgrow diag CHECKPOINT --data SHARD [--teacher CKPT] [--batches N] [--batch B]
//                [--seq T] [--structural ID,ID...] [--top K] [--kd-weight A]
//                [--temperature TAU] [--out FILE]
// Prints the JSON of diag.h (with the ablation) or writes it atomically to FILE.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/diag.h"
#include "normgrow/fileio.h"

#define MAX_COUNT (1 << 20)           // --batches, --batch, --seq, --top
#define MAX_TOKENS ((int64_t)1 << 30)  // batches x batch x seq


typedef struct {
  const char *data, *teacher, *out;
  int64_t batches, B, T, top_k;
  double kd_weight, temperature;
  const char *structural;  // the --structural text, parsed once the vocabulary is known
} diag_args;

// Everything loaded; zeroed fields are safe to release.
typedef struct {
  ng_backend *be;
  ng_model *student, *teacher;
  ng_shard shard;
  int32_t *structural;
  int n_structural;
} diag_inputs;

// Optional integer option with a default.
static int int_opt(const ng_cli *c, const char *key, int64_t def, int64_t min, int64_t *out) {
  *out = def;
  return ng_cli_int_opt(c, key, min, MAX_COUNT, out);
}

static int parse_args(const ng_cli *c, diag_args *a) {
  a->kd_weight = 0.5;
  a->temperature = 2.0;
  a->data = ng_cli_opt(c, "data");
  a->teacher = ng_cli_opt(c, "teacher");
  a->out = ng_cli_opt(c, "out");
  a->structural = ng_cli_opt(c, "structural");
  if (int_opt(c, "batches", 4, 1, &a->batches) || int_opt(c, "batch", 8, 1, &a->B) ||
      int_opt(c, "seq", 128, 1, &a->T) || int_opt(c, "top", 5, 0, &a->top_k) ||
      ng_cli_num_opt(c, "kd-weight", 0.0, true, 1.0, &a->kd_weight) ||
      ng_cli_num_opt(c, "temperature", 0.0, false, 1e6, &a->temperature))
    return -1;
  if (!a->data) return ng_fail("diag: --data SHARD is required");
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

static int load_inputs(const ng_cli *c, const diag_args *a, diag_inputs *in) {
  ng_backend *be = in->be = ng_cli_backend(c);
  if (!be || ng_checkpoint_load(c->pos[0], be, false, &in->student, NULL, NULL)) return -1;
  int64_t V = in->student->cfg.vocab_size;
  if (a->teacher) {
    if (ng_checkpoint_load(a->teacher, be, false, &in->teacher, NULL, NULL)) return -1;
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

static int run_diag(const diag_args *a, diag_inputs *in) {
  ng_diag_input di = {&in->shard, a->batches, a->B, a->T, in->teacher,
                      {a->kd_weight, a->temperature, in->shard.vocab_size}};
  ng_diag_options o = {(int32_t)in->shard.separator, in->n_structural, in->structural,
                       (int)a->top_k};
  cJSON *j = ng_diag_json(in->student, &di, &o, true, 0, 0);
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  int rc = 0;
  if (a->out) {
    rc = ng_write_text_atomic(a->out, text);
  } else {
    printf("%s\n", text);
  }
  cJSON_free(text);
  return rc;
}

int cmd_diag(const ng_cli *c) {
  diag_args a;
  diag_inputs in = {0};
  int rc = parse_args(c, &a) || load_inputs(c, &a, &in) || run_diag(&a, &in);
  free_inputs(&in);
  return rc ? ng_cli_error(ng_error()) : 0;
}
