// normgrow plan: parameters, memory per device and FLOPs of every stage of a
// run, before it runs. Reads the run config and, for a distillation, only the
// teacher's configuration (never data, never weights):
//   normgrow plan RUN.json [--teacher-config FILE.json] [--device-tflops X]
//                [--device-memory-gib M] [--devices N] [--bytes-per-param B]
//                [--recompute on|off]
// The teacher's config comes from --teacher-config when given, else from the
// run's teacher path when it exists (a Hugging Face directory's config.json,
// or a normgrow checkpoint's "model" metadata); without either the student is
// planned alone. The accounting itself is ref/plan.c (formulas in plan.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/hf.h"
#include "normgrow/plan.h"
#include "normgrow/safetensors.h"

// 400 TFLOP/s: a dense BF16 rate sustained in training, about 40% of an H100
// SXM's 989 TFLOP/s peak. 80 GiB: that device's memory.
#define DEFAULT_TFLOPS 400.0
#define DEFAULT_MEMORY_GIB 80.0

// ---------------------------------------------------------------- options

// Finite number in (0, max]; an absent option keeps *out.
// --recompute on|off (the command line has only "--key value" options).
static int parse_switch(const ng_cli *c, const char *opt, bool *out) {
  const char *s = ng_cli_opt(c, opt);
  if (!s) return 0;
  if (strcmp(s, "on") != 0 && strcmp(s, "off") != 0)
    return ng_fail("--%s: \"%s\" is neither on nor off", opt, s);
  *out = strcmp(s, "on") == 0;
  return 0;
}

static int parse_device(const ng_cli *c, ng_plan_device *d) {
  *d = (ng_plan_device){.tflops = DEFAULT_TFLOPS, .memory_gib = DEFAULT_MEMORY_GIB, .devices = 1,
                        .bytes_per_param = 4, .recompute = false};
  return ng_cli_num_opt(c, "device-tflops", 0.0, false, 1e6, &d->tflops) ||
         ng_cli_num_opt(c, "device-memory-gib", 0.0, false, 1e6, &d->memory_gib) ||
         ng_cli_int_opt(c, "devices", 1, 1000000, &d->devices) ||
         ng_cli_int_opt(c, "bytes-per-param", 1, 16, &d->bytes_per_param) ||
         parse_switch(c, "recompute", &d->recompute);
}

// ---------------------------------------------------------------- the teacher

typedef struct {
  bool known;
  ng_model_config cfg;
  char source[1100];  // where cfg came from, or why there is none
} teacher_info;

static int checkpoint_config(const char *path, ng_model_config *cfg) {
  ng_st_file f;
  if (ng_st_open(&f, path)) return ng_fail_prefix(path);
  const char *text = ng_st_meta(&f, "model");
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  int rc = j ? ng_model_config_parse(j, "__metadata__.model", cfg)
             : ng_fail("not a normgrow checkpoint (no valid __metadata__.model)");
  cJSON_Delete(j);
  ng_st_close(&f);
  return rc ? ng_fail_prefix(path) : 0;
}

// The teacher's config from `file` (--teacher-config), else from the run's
// teacher path if it exists; t->known is false when neither gives one.
static int find_teacher(const ng_run_config *rc, const char *file, teacher_info *t) {
  const char *path = rc->teacher_path;
  struct stat st;
  *t = (teacher_info){0};
  if (!rc->distill || !path[0]) {  // pretraining, or KD from top-k caches alone
    snprintf(t->source, sizeof t->source, "none (%s)", rc->distill ? "KD from top-k caches" : "a pretrain run");
    return 0;
  }
  if (!file && stat(path, &st) != 0) {
    snprintf(t->source, sizeof t->source,
             "unknown: %s does not exist and no --teacher-config was given;\n"
             "           the student is planned alone, without the teacher's memory and FLOPs", path);
    return 0;
  }
  int r;
  if (file) {
    r = ng_plan_read_model_config(file, &t->cfg);
    snprintf(t->source, sizeof t->source, "%s", file);
  } else if (S_ISDIR(st.st_mode)) {
    r = ng_hf_read_config(path, &t->cfg);
    snprintf(t->source, sizeof t->source, "%s/config.json", path);
  } else {
    r = checkpoint_config(path, &t->cfg);
    snprintf(t->source, sizeof t->source, "%s (checkpoint metadata)", path);
  }
  if (r) return -1;
  if (t->cfg.vocab_size != rc->model.vocab_size)  // the trainer refuses such a teacher
    return ng_fail("teacher %s: vocabulary of %lld tokens, the student's is %lld", t->source,
                   (long long)t->cfg.vocab_size, (long long)rc->model.vocab_size);
  t->known = true;
  return 0;
}

// ---------------------------------------------------------------- printing

typedef struct {
  char s[32];
} cell;  // one table cell, returned by value so that a printf can hold several

// n >= 0 with thousands separators: 3109552128 -> "3,109,552,128".
static cell grouped(int64_t n) {
  char digits[24];
  int len = snprintf(digits, sizeof digits, "%lld", (long long)n);
  cell t = {{0}};
  int j = 0;
  for (int i = 0; i < len; i++) {
    if (i > 0 && (len - i) % 3 == 0) t.s[j++] = ',';
    t.s[j++] = digits[i];
  }
  return t;
}

// Bytes as GiB, or "-" for a part the plan does not know.
static cell gib(int64_t bytes, bool known) {
  cell t;
  if (known) {
    snprintf(t.s, sizeof t.s, "%.1f", (double)bytes / 1073741824.0);
  } else {
    snprintf(t.s, sizeof t.s, "-");
  }
  return t;
}

static void print_header(const char *path, const ng_run_config *rc, const teacher_info *t,
                         int64_t teacher_params, const ng_plan_device *d) {
  const ng_model_config *m = &rc->model;
  printf("normgrow plan: %s (%s), %s\n", rc->name, path, rc->distill ? "distillation" : "pretraining");
  printf("  student  %s-Norm, hidden %lld, FFN %lld, %lld/%lld heads of %lld, vocab %lld, %s head%s\n",
         m->norm_placement == NG_NORM_PRE ? "Pre" : "Post", (long long)m->hidden_size,
         (long long)m->intermediate_size, (long long)m->num_attention_heads,
         (long long)m->num_key_value_heads, (long long)m->head_dim, (long long)m->vocab_size,
         m->tie_word_embeddings ? "tied" : "untied", m->final_norm ? ", final norm" : "");
  printf("  frozen   embeddings, final norm and head: %s; blocks of the stage before:",
         rc->freeze_embeddings ? "yes" : "no");
  int n_freezing = 0;
  for (int i = 0; i < rc->n_stages; i++)
    if (rc->stages[i].freeze_existing) printf(" %sstage %d", n_freezing++ ? "and " : "in ", i + 1);
  printf("%s\n", n_freezing ? "" : " never");
  printf("  batch    %lld x %lld = %s tokens per step\n", (long long)rc->batch, (long long)rc->seq,
         grouped(rc->batch * rc->seq).s);
  if (t->known) {
    printf("  teacher  %s-Norm, %lld layers, %s parameters (config: %s)\n",
           t->cfg.norm_placement == NG_NORM_PRE ? "Pre" : "Post", (long long)t->cfg.num_hidden_layers,
           grouped(teacher_params).s, t->source);
  } else {
    printf("  teacher  %s\n", t->source);
  }
  if (rc->use_cache)
    printf("  KD       from the top-k caches %s, %s: the teacher does not run\n", rc->cache_train,
           rc->cache_val);
  printf("  device   %lld x %g GiB at %g TFLOP/s sustained each; weights, gradients and AdamW\n"
         "           moments at %lld bytes per parameter; fp32 activations, %s\n",
         (long long)d->devices, d->memory_gib, d->tflops, (long long)d->bytes_per_param,
         d->recompute ? "recomputed block by block (--recompute on)" : "every block's kept");
}

static void print_compute(const ng_plan_stage *s, int n) {
  printf("\n%-6s %5s %15s %7s %15s %15s %11s %9s\n", "stage", "depth", "tokens", "steps",
         "params", "trainable", "FLOPs", "hours");
  int64_t tokens = 0, steps = 0;
  double flops = 0.0, seconds = 0.0;
  for (int i = 0; i < n; i++) {
    printf("%-6d %5lld %15s %7lld %15s %15s %11.3e %9.1f\n", i + 1, (long long)s[i].depth,
           grouped(s[i].tokens).s, (long long)s[i].steps, grouped(s[i].student.total).s,
           grouped(s[i].student.trainable).s, s[i].flops, s[i].seconds / 3600.0);
    tokens += s[i].tokens;
    steps += s[i].steps;
    flops += s[i].flops;
    seconds += s[i].seconds;
  }
  printf("%-6s %5s %15s %7lld %15s %15s %11.3e %9.1f  (%.1f days)\n", "total", "",
         grouped(tokens).s, (long long)steps, "", "", flops, seconds / 3600.0, seconds / 86400.0);
}

static void print_memory_row(const char *label, const ng_plan_stage *s, bool teacher) {
  printf("%-6s %8s %8s %8s %9s %9s %9s %8s %8s %9s %10.1f %12s %7lld\n", label,
         gib(s->weights, true).s, gib(s->grads, true).s, gib(s->adamw, true).s,
         gib(s->acts, true).s, gib(s->eval_acts, true).s, gib(s->diag_acts, true).s,
         gib(s->teacher_weights, teacher).s, gib(s->teacher_acts, teacher).s, gib(s->total, true).s,
         s->per_device_gib, s->fits ? "fits" : "does NOT fit", (long long)s->devices_needed);
}

static void print_memory(const ng_plan_stage *s, int n, bool teacher, const ng_plan_device *d) {
  printf("\nmemory in GiB, all devices together; per device = total / %lld (sharded evenly)\n",
         (long long)d->devices);
  printf("%-6s %8s %8s %8s %9s %9s %9s %8s %8s %9s %10s %12s %7s\n", "stage", "weights", "grads",
         "AdamW", "acts", "eval acts", "diag acts", "teacher", "t. acts", "total", "per device",
         "fit", "devices");
  int peak = 0;
  for (int i = 0; i < n; i++) {
    char label[16];
    snprintf(label, sizeof label, "%d", i + 1);
    print_memory_row(label, &s[i], teacher);
    if (s[i].total > s[peak].total) peak = i;
  }
  print_memory_row("peak", &s[peak], teacher);
}

static void print_notes(void) {
  printf("\nFLOPs: the trainer's rule, student (4 P + 2 P_trainable) x tokens + 3 x attention, teacher\n"
         "2 P x tokens + attention (P: matmul parameters); evaluations not counted.\n"
         "Memory: what the reference allocates; gradients and moments of frozen tensors included;\n"
         "diag acts: the residual diagnostics at each evaluation (a train-mode set, while the rest\n"
         "stays); not counted: token and top-k batches, backend scratch, the brief overlap of old\n"
         "and grown model at a growth step. devices = ceil(total / one device's memory).\n");
}

// ---------------------------------------------------------------- the command

int cmd_plan(const ng_cli *c) {
  ng_plan_device dev;
  ng_run_config rc;
  teacher_info t;
  if (parse_device(c, &dev))
    return ng_cli_error(ng_error());
  if (ng_run_config_load(c->pos[0], NULL, &rc)) return ng_cli_error(ng_error());
  if (find_teacher(&rc, ng_cli_opt(c, "teacher-config"), &t)) {
    ng_run_config_free(&rc);
    return ng_cli_error(ng_error());
  }
  ng_plan_stage stages[NG_MAX_STAGES];
  for (int i = 0; i < rc.n_stages; i++) ng_plan_stage_of(&rc, i, t.known ? &t.cfg : NULL, &dev, &stages[i]);
  print_header(c->pos[0], &rc, &t, stages[0].teacher.total, &dev);
  print_compute(stages, rc.n_stages);
  print_memory(stages, rc.n_stages, t.known, &dev);
  print_notes();
  ng_run_config_free(&rc);
  return 0;
}
