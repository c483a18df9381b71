// normgrow plan: parameters, memory per device and FLOPs of every stage of a
// run, before it runs. Reads the run config and, for a distillation, only the
// teacher's configuration (never data, never weights):
//   normgrow plan RUN.json [--teacher-config FILE.json] [--device-tflops X]
//                [--device-memory-gib M] [--devices N] [--bus-gbps B] [--bytes-per-param B]
//                [--micro-batch N] [--loss-chunk ROWS] [--recompute on|off]
//                [--teacher-dtype bf16|f32]
// The last three replace the run config's data.micro_batch,
// train.loss_chunk_tokens and train.recompute. A stage that does not fit one
// device gets the first setting that does, trying micro-batches from the
// largest divisor of the batch down, each without and then with recompute,
// the loss chunk at its default; or a line that names what does not fit.
// The teacher's config comes from --teacher-config when given, else from the
// run's teacher path when it exists (a Hugging Face directory's config.json,
// or a normgrow checkpoint's "model" metadata); without either the student is
// planned alone. The teacher's checkpoint dtype (whether train.teacher_bf16
// can hold its blocks in bf16) is a Hugging Face directory's, f32 for a
// normgrow checkpoint, and bf16 (Qwen3's published dtype) for a
// --teacher-config; --teacher-dtype replaces it. The accounting itself is ref/plan.c (formulas in plan.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/hf.h"
#include "normgrow/plan.h"
#include "normgrow/safetensors.h"

// 400 TFLOP/s: a dense BF16 rate sustained in training, about 40% of an H100
// SXM's 989 TFLOP/s peak. 80 GiB: that device's memory.
#define DEFAULT_TFLOPS 400.0
#define DEFAULT_MEMORY_GIB 80.0
// 350 GB/s: an assumed NCCL bus bandwidth of reduce-scatter and all-gather
// between the 8 GPUs of one NVLink 4 node (900 GB/s of NVLink per GPU, both
// directions together); not measured here.
#define DEFAULT_BUS_GBPS 350.0

// ---------------------------------------------------------------- options

static int parse_device(const ng_cli *c, ng_plan_device *d) {
  *d = (ng_plan_device){.tflops = DEFAULT_TFLOPS, .memory_gib = DEFAULT_MEMORY_GIB, .devices = 1,
                        .bytes_per_param = 4, .bus_gbps = DEFAULT_BUS_GBPS};
  return ng_cli_num_opt(c, "device-tflops", 0.0, false, 1e6, &d->tflops) ||
         ng_cli_num_opt(c, "device-memory-gib", 0.0, false, 1e6, &d->memory_gib) ||
         ng_cli_int_opt(c, "devices", 1, 1000000, &d->devices) ||
         ng_cli_num_opt(c, "bus-gbps", 0.0, false, 1e6, &d->bus_gbps) ||
         ng_cli_int_opt(c, "bytes-per-param", 1, 16, &d->bytes_per_param);
}

// The settings given on the command line replace the run config's.
static int parse_settings(const ng_cli *c, ng_run_config *rc) {
  if (ng_cli_int_opt(c, "micro-batch", 1, rc->batch, &rc->micro_batch) ||
      ng_cli_int_opt(c, "loss-chunk", 1, INT64_MAX / 4, &rc->loss_chunk) ||
      ng_cli_switch_opt(c, "recompute", &rc->recompute))
    return -1;
  if (rc->batch % rc->micro_batch != 0)
    return ng_fail("--micro-batch: %lld does not divide the batch of %lld", (long long)rc->micro_batch,
                   (long long)rc->batch);
  return 0;
}

// ---------------------------------------------------------------- the teacher

typedef struct {
  bool known;
  bool bf16;          // its checkpoint stores the blocks in bf16
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

// Whether the Hugging Face config.json in dir names bf16 weights ("torch_dtype",
// or "dtype" in newer files).
static int hf_blocks_bf16(const char *dir, bool *bf16) {
  char path[1100], *text;
  snprintf(path, sizeof path, "%s/config.json", dir);
  if (ng_read_file(path, 1 << 20, &text, NULL) != 0) return -1;
  cJSON *j = cJSON_Parse(text);
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "torch_dtype");
  if (!d) d = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  *bf16 = cJSON_IsString(d) && strcmp(d->valuestring, "bfloat16") == 0;
  cJSON_Delete(j);
  free(text);
  return 0;
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
    t->bf16 = true;
  } else if (S_ISDIR(st.st_mode)) {
    r = ng_hf_read_config(path, &t->cfg) || hf_blocks_bf16(path, &t->bf16);
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

// --teacher-dtype bf16|f32 replaces the dtype found.
static int teacher_dtype(const ng_cli *c, teacher_info *t) {
  const char *s = ng_cli_opt(c, "teacher-dtype");
  if (!s) return 0;
  if (strcmp(s, "bf16") != 0 && strcmp(s, "f32") != 0)
    return ng_fail("--teacher-dtype: \"%s\" is neither bf16 nor f32", s);
  t->bf16 = strcmp(s, "bf16") == 0;
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
  printf("  student  %s, hidden %lld, FFN %lld, %lld/%lld heads of %lld, vocab %lld, %s head%s\n",
         ng_norm_placement_title(m->norm_placement), (long long)m->hidden_size,
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
    printf("  teacher  %s, %lld layers, %s parameters (config: %s); blocks held in %s\n",
           ng_norm_placement_title(t->cfg.norm_placement), (long long)t->cfg.num_hidden_layers,
           grouped(teacher_params).s, t->source,
           d->teacher_bf16 && rc->teacher_bf16 ? "bf16" : "fp32");
  } else {
    printf("  teacher  %s\n", t->source);
  }
  if (rc->use_cache)
    printf("  KD       from the top-k caches %s, %s: the teacher does not run\n", rc->cache_train,
           rc->cache_val);
  printf("  device   %lld x %g GiB at %g TFLOP/s sustained each; weights, gradients and AdamW\n"
         "           moments at %lld bytes per parameter; fp32 activations\n",
         (long long)d->devices, d->memory_gib, d->tflops, (long long)d->bytes_per_param);
  printf("  settings micro-batches of %lld x %lld tokens, loss chunks of %s tokens, %s\n",
         (long long)rc->micro_batch, (long long)rc->seq,
         rc->loss_chunk ? grouped(rc->loss_chunk).s : "the default number of", 
         rc->recompute ? "blocks recomputed in the backward" : "every block's values kept");
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

// On several devices: what the ZeRO-1 step sends per step and device, and its
// time at the assumed bus bandwidth next to the compute time.
static void print_communication(const ng_plan_stage *s, int n, const ng_plan_device *d) {
  if (d->devices < 2) return;
  printf("\ncommunication of the ZeRO-1 step on each of %lld devices: reduce-scatter of the gradients\n"
         "and all-gather of the weights, fp32 over a ring, 2 (N-1)/N x 4 bytes x trainable params per\n"
         "step, at an assumed bus bandwidth of %g GB/s (--bus-gbps), not overlapped with compute\n",
         (long long)d->devices, d->bus_gbps);
  printf("%-6s %10s %12s %15s %11s %7s\n", "stage", "GB/step", "comm s/step", "compute s/step",
         "comm hours", "share");
  double comm = 0.0, compute = 0.0;
  for (int i = 0; i < n; i++) {
    double steps = (double)s[i].steps;
    printf("%-6d %10.2f %12.4f %15.3f %11.2f %6.1f%%\n", i + 1, s[i].comm_bytes / 1e9,
           s[i].comm_seconds / steps, s[i].seconds / steps, s[i].comm_seconds / 3600.0,
           100.0 * s[i].comm_seconds / s[i].seconds);
    comm += s[i].comm_seconds;
    compute += s[i].seconds;
  }
  printf("%-6s %10s %12s %15s %11.2f %6.1f%%  (%.1f hours with compute)\n", "total", "", "", "",
         comm / 3600.0, 100.0 * comm / compute, (comm + compute) / 3600.0);
}

static void print_memory_row(const char *label, const ng_plan_stage *s, bool teacher) {
  char need[24] = "-";
  if (s->devices_needed) snprintf(need, sizeof need, "%lld", (long long)s->devices_needed);
  printf("%-6s %8s %8s %8s %8s %9s %9s %9s %9s %8s %8s %9s %10.1f %12s %7s\n", label,
         gib(s->weights, true).s, gib(s->grads, true).s, gib(s->adamw_per_device, true).s,
         gib(s->zero, s->zero > 0).s, gib(s->acts, true).s, gib(s->eval_acts, true).s, gib(s->diag, true).s,
         gib(s->checkpoint, true).s, gib(s->teacher_weights, teacher).s,
         gib(s->teacher_acts, teacher).s, gib(s->total, true).s,
         s->per_device_gib, s->fits ? "fits" : "does NOT fit", need);
}

static void print_memory(const ng_plan_stage *s, int n, bool teacher, const ng_plan_device *d) {
  printf("\nmemory in GiB on each of %lld devices: data parallel, the AdamW moments sharded (ZeRO-1);\n"
         "total: the run on one device\n",
         (long long)d->devices);
  printf("%-6s %8s %8s %8s %8s %9s %9s %9s %9s %8s %8s %9s %10s %12s %7s\n", "stage", "weights",
         "grads", "AdamW", "ZeRO", "acts", "eval acts", "diag", "ckpt", "teacher", "t. acts", "total",
         "per device", "fit", "devices");
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
         "diag: the residual diagnostics at each evaluation (host RMS and median counts of every\n"
         "point, then the ablation's forwards); ckpt: a checkpoint's host copy of weights and\n"
         "moments; the larger of the two counts in the total, with %.0f MiB for the program. Not\n"
         "counted: token and top-k batches, backend scratch, the brief overlap of old and grown\n"
         "model at a growth step. On N devices each holds 1/N of the AdamW moments and the\n"
         "step's buffers (ZeRO: one parameter's staging and the reduced gradients of its slices,\n"
         "P/N, fp32); rank 0 gathers a checkpoint's moments into its host copy. devices: the\n"
         "fewest on which the stage fits (-: none).\n",
         (double)NG_PLAN_RUNTIME_BYTES / 1048576.0);
}

// For each stage that does not fit one device: the first setting that does
// (micro-batches from the largest divisor of the batch down, each without and
// then with recompute, the loss chunk at its default), or what does not fit.
static void print_fitting(const ng_run_config *rc, const ng_model_config *teacher,
                          const ng_plan_stage *s, const ng_plan_device *d) {
  ng_plan_device one = *d;
  one.devices = 1;
  bool header = false;
  for (int i = 0; i < rc->n_stages; i++) {
    if (s[i].total <= (int64_t)(d->memory_gib * 1073741824.0)) continue;
    if (!header) printf("\nsettings that fit one %g GiB device:\n", d->memory_gib);
    header = true;
    ng_run_config try = *rc;
    try.loss_chunk = 0;
    ng_plan_stage p = {0};
    bool found = false;
    for (int64_t mb = rc->batch; mb >= 1 && !found; mb--) {
      if (rc->batch % mb != 0) continue;
      for (int r = 0; r < 2 && !found; r++) {
        try.micro_batch = mb;
        try.recompute = r == 1;
        ng_plan_stage_of(&try, i, teacher, &one, &p);
        found = p.fits;
      }
    }
    if (found) {
      printf("  stage %d: micro_batch %lld, recompute %s, loss chunk %lld tokens: %.1f GiB\n", i + 1,
             (long long)p.micro_batch, p.recompute ? "on" : "off", (long long)p.chunk,
             (double)p.total / 1073741824.0);
    } else {  // p: micro-batch 1 with recompute, the smallest setting
      printf("  stage %d: none; at micro_batch 1 with recompute %.1f GiB: weights, gradients and "
             "AdamW %.1f, teacher %.1f, activations %.1f, %s %.1f\n",
             i + 1, (double)p.total / 1073741824.0,
             (double)(p.weights + p.grads + p.adamw) / 1073741824.0,
             (double)(p.teacher_weights + p.teacher_acts) / 1073741824.0,
             (double)(p.acts + p.eval_acts) / 1073741824.0, p.diag > p.checkpoint ? "diag" : "checkpoint",
             (double)(p.diag > p.checkpoint ? p.diag : p.checkpoint) / 1073741824.0);
    }
  }
}

// ---------------------------------------------------------------- the command

int cmd_plan(const ng_cli *c) {
  ng_plan_device dev;
  ng_run_config rc;
  teacher_info t;
  if (parse_device(c, &dev))
    return ng_cli_error(ng_error());
  if (ng_run_config_load(c->pos[0], NULL, &rc)) return ng_cli_error(ng_error());
  if (parse_settings(c, &rc) || find_teacher(&rc, ng_cli_opt(c, "teacher-config"), &t) ||
      teacher_dtype(c, &t)) {
    ng_run_config_free(&rc);
    return ng_cli_error(ng_error());
  }
  dev.teacher_bf16 = t.bf16;
  ng_plan_stage stages[NG_MAX_STAGES];
  for (int i = 0; i < rc.n_stages; i++) ng_plan_stage_of(&rc, i, t.known ? &t.cfg : NULL, &dev, &stages[i]);
  print_header(c->pos[0], &rc, &t, stages[0].teacher.total, &dev);
  print_compute(stages, rc.n_stages);
  print_communication(stages, rc.n_stages, &dev);
  print_memory(stages, rc.n_stages, t.known, &dev);
  print_notes();
  print_fitting(&rc, t.known ? &t.cfg : NULL, stages, &dev);
  ng_run_config_free(&rc);
  return 0;
}
