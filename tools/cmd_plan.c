// normgrow plan: parameters, memory per device and on the host, FLOPs and time
// of every stage of a run, before it runs. Reads the run configs and, for a
// distillation, only the teacher's configuration (never data, never weights):
//   normgrow plan RUN.json... [--teacher-config FILE.json] [--device-memory GIB]
//                [--devices N] [--peak-tflops X] [--mfu F] [--bus-gbps B]
//                [--bytes-per-param B] [--micro-batch N] [--loss-chunk ROWS]
//                [--recompute on|off] [--teacher-dtype bf16|f32]
// One run config: its stages in full. Several (a study's arms): one line per
// arm and the study's total. --micro-batch, --loss-chunk and --recompute replace
// the run configs' data.micro_batch, train.loss_chunk_tokens and
// train.recompute. A stage that does not fit the devices gets the first
// setting that does, trying micro-batches from the largest divisor of the
// batch down, each without and then with recompute, the loss chunk at its
// default; or a line that names what does not fit.
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

// 989 TFLOP/s: the dense BF16 peak of an H100 or H200 SXM; 40% of it is a
// utilization that large-model training sustains (MFU). 80 GiB: an H100's
// memory (an H200 has 141 GB, 139 GiB as the driver reports it: --device-memory 139).
#define DEFAULT_PEAK_TFLOPS 989.0
#define DEFAULT_MFU 0.40
#define DEFAULT_MEMORY_GIB 80.0
#define GIB 1073741824.0
// 350 GB/s: an assumed NCCL bus bandwidth of reduce-scatter and all-gather
// between the 8 GPUs of one NVLink 4 node (900 GB/s of NVLink per GPU, both
// directions together); not measured here.
#define DEFAULT_BUS_GBPS 350.0

// ---------------------------------------------------------------- options

// The devices, and the peak and utilization their sustained rate comes from.
typedef struct {
  ng_plan_device dev;
  double peak_tflops, mfu;
} hardware;

static int parse_device(const ng_cli *c, hardware *h) {
  ng_plan_device *d = &h->dev;
  *d = (ng_plan_device){.memory_gib = DEFAULT_MEMORY_GIB, .devices = 1, .bytes_per_param = 4,
                        .bus_gbps = DEFAULT_BUS_GBPS};
  h->peak_tflops = DEFAULT_PEAK_TFLOPS;
  h->mfu = DEFAULT_MFU;
  int rc = ng_cli_num_opt(c, "peak-tflops", 0.0, false, 1e6, &h->peak_tflops) ||
           ng_cli_num_opt(c, "mfu", 0.0, false, 1.0, &h->mfu) ||
           ng_cli_num_opt(c, "device-memory", 0.0, false, 1e6, &d->memory_gib) ||
           ng_cli_int_opt(c, "devices", 1, 1000000, &d->devices) ||
           ng_cli_num_opt(c, "bus-gbps", 0.0, false, 1e6, &d->bus_gbps) ||
           ng_cli_int_opt(c, "bytes-per-param", 1, 16, &d->bytes_per_param);
  d->tflops = h->peak_tflops * h->mfu;
  return rc;
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
                         int64_t teacher_params, const hardware *h) {
  const ng_model_config *m = &rc->model;
  const ng_plan_device *d = &h->dev;
  printf("normgrow plan: %s (%s), %s\n", rc->name, path, rc->distill ? "distillation" : "pretraining");
  printf("  student  %s%s%s, hidden %lld, FFN %lld, %lld/%lld heads of %lld, vocab %lld, %s head%s\n",
         ng_norm_placement_title(m->norm_placement), rc->hybrid_growth ? ", new blocks " : "",
         rc->hybrid_growth ? ng_norm_placement_title(rc->new_block_placement) : "", (long long)m->hidden_size,
         (long long)m->intermediate_size, (long long)m->num_attention_heads,
         (long long)m->num_key_value_heads, (long long)m->head_dim, (long long)m->vocab_size,
         m->tie_word_embeddings ? "tied" : "untied", m->final_norm ? ", final norm" : "");
  printf("  frozen   embeddings, final norm and head: %s; blocks of the stage before:",
         rc->freeze_embeddings ? "yes" : "no");
  int n_freezing = 0;
  for (int i = 0; i < rc->n_stages; i++)
    if (rc->stages[i].freeze_existing) printf(" %sstage %d", n_freezing++ ? "and " : "in ", i + 1);
  printf("%s\n", n_freezing ? "" : " never");
  printf("  batch    %lld x %lld = %s tokens per step; evaluation every %lld steps on %lld batches\n",
         (long long)rc->batch, (long long)rc->seq, grouped(rc->batch * rc->seq).s,
         (long long)rc->eval_every, (long long)rc->eval_batches);
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
  bool device = ng_plan_device_backend(rc->backend);
  printf("  device   %lld x %g GiB; backend %s, precision %s (%s)\n"
         "           weights, gradients and AdamW moments at %lld bytes per parameter; fp32 activations\n",
         (long long)d->devices, d->memory_gib, rc->backend, ng_precision_name(rc->precision),
         device ? "device memory, the host's apart" : "host memory: device and host are one",
         (long long)d->bytes_per_param);
  printf("  speed    %g TFLOP/s peak at %.0f%% MFU: %g TFLOP/s sustained per device over every FLOP\n"
         "           counted (training, recompute, evaluation, diagnostics, ablation)\n",
         h->peak_tflops, 100.0 * h->mfu, d->tflops);
  printf("  settings micro-batches of %lld x %lld tokens, loss chunks of %s tokens, %s\n",
         (long long)rc->micro_batch, (long long)rc->seq,
         rc->loss_chunk ? grouped(rc->loss_chunk).s : "the default number of",
         rc->recompute ? "blocks recomputed in the backward" : "every block's values kept");
}

// Every FLOP of the stage: training and what runs besides it.
static double all_flops(const ng_plan_stage *s) {
  return s->flops + s->recompute_flops + s->eval_flops + s->diag_flops + s->ablation_flops;
}

// The FLOPs of evaluation, its diagnostics and the ablation.
static double eval_part(const ng_plan_stage *s) { return s->eval_flops + s->diag_flops + s->ablation_flops; }

static void print_compute(const ng_plan_stage *s, int n) {
  printf("\n%-6s %5s %15s %7s %15s %15s %11s %9s\n", "stage", "depth", "tokens", "steps",
         "params", "trainable", "FLOPs", "hours");
  int64_t tokens = 0, steps = 0;
  double flops = 0.0, seconds = 0.0;
  for (int i = 0; i < n; i++) {
    printf("%-6d %5lld %15s %7lld %15s %15s %11.3e %9.1f\n", i + 1, (long long)s[i].depth,
           grouped(s[i].tokens).s, (long long)s[i].steps, grouped(s[i].student.total).s,
           grouped(s[i].student.trainable).s, all_flops(&s[i]), s[i].seconds / 3600.0);
    tokens += s[i].tokens;
    steps += s[i].steps;
    flops += all_flops(&s[i]);
    seconds += s[i].seconds;
  }
  printf("%-6s %5s %15s %7lld %15s %15s %11.3e %9.1f  (%.1f days)\n", "total", "",
         grouped(tokens).s, (long long)steps, "", "", flops, seconds / 3600.0, seconds / 86400.0);
  printf("\nFLOPs by what runs: training (the trainer's rule), blocks recomputed in the backward,\n"
         "evaluations (with the teacher's own CE), their diagnostics, the final ablation\n");
  printf("%-6s %11s %11s %6s %11s %11s %11s %7s\n", "stage", "training", "recompute", "evals",
         "evaluation", "diagnostics", "ablation", "eval %");
  double sum[5] = {0};
  for (int i = 0; i < n; i++) {
    double part[5] = {s[i].flops, s[i].recompute_flops, s[i].eval_flops, s[i].diag_flops, s[i].ablation_flops};
    printf("%-6d %11.3e %11.3e %6lld %11.3e %11.3e %11.3e %6.1f%%\n", i + 1, part[0], part[1],
           (long long)s[i].evals, part[2], part[3], part[4], 100.0 * eval_part(&s[i]) / all_flops(&s[i]));
    for (int k = 0; k < 5; k++) sum[k] += part[k];
  }
  double total = sum[0] + sum[1] + sum[2] + sum[3] + sum[4];
  printf("%-6s %11.3e %11.3e %6s %11.3e %11.3e %11.3e %6.1f%%\n", "total", sum[0], sum[1], "", sum[2],
         sum[3], sum[4], 100.0 * (sum[2] + sum[3] + sum[4]) / total);
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
  bool dev = s->device_backend;  // diag and ckpt: where they are
  printf("%-6s %8s %8s %8s %8s %9s %9s %8s %8s %9s %9s %10.1f %9s %12s %7s\n", label,
         gib(s->weights, true).s, gib(s->grads, true).s, gib(s->adamw_per_device, true).s,
         gib(s->zero, s->zero > 0).s, gib(s->acts, true).s, gib(s->eval_acts, true).s,
         gib(s->teacher_weights, teacher).s, gib(s->teacher_acts, teacher).s,
         gib(dev ? s->diag_device : s->diag, true).s, gib(dev ? s->diag_host : s->checkpoint, true).s,
         s->per_device_gib, gib(s->host, dev).s, s->fits ? "fits" : "does NOT fit", need);
}

static void print_memory(const ng_plan_stage *s, int n, bool teacher, const ng_plan_device *d) {
  bool dev = s[0].device_backend;
  printf("\nmemory in GiB on each of %lld devices of %g GiB: data parallel, the AdamW moments sharded\n"
         "(ZeRO-1)%s\n",
         (long long)d->devices, d->memory_gib,
         dev ? "; host: rank 0's host memory besides (the larger of a checkpoint's copy, ckpt,\n"
               "and the diagnostics' host arrays, diag host, and the program)"
             : "; one memory: the larger of diag and a checkpoint's copy (ckpt) and the program\n"
               "count in each device's total");
  printf("%-6s %8s %8s %8s %8s %9s %9s %8s %8s %9s %9s %10s %9s %12s %7s\n", "stage", "weights",
         "grads", "AdamW", "ZeRO", "acts", "eval acts", "teacher", "t. acts", dev ? "diag dev" : "diag",
         dev ? "diag host" : "ckpt", "device", "host", "fit", "devices");
  int peak = 0;
  for (int i = 0; i < n; i++) {
    char label[16];
    snprintf(label, sizeof label, "%d", i + 1);
    print_memory_row(label, &s[i], teacher);
    if (s[i].per_device > s[peak].per_device) peak = i;
  }
  print_memory_row("peak", &s[peak], teacher);
  if (dev) {
    int64_t ckpt = 0;
    for (int i = 0; i < n; i++) ckpt = s[i].checkpoint > ckpt ? s[i].checkpoint : ckpt;
    printf("(ckpt, host: %.1f GiB at the widest stage, on rank 0 only)\n", (double)ckpt / GIB);
  }
}

static void print_notes(void) {
  printf("\nFLOPs: the trainer's rule, student (4 P + 2 P_trainable) x tokens + 3 x attention, teacher\n"
         "2 P x tokens + attention (P: matmul parameters); besides it the recompute, evaluations,\n"
         "diagnostics and ablation (plan.h), all shared by the ranks; hours: all of them at the\n"
         "sustained rate. Memory: what the reference allocates; gradients and moments of frozen\n"
         "tensors included; diag: the residual diagnostics at each evaluation (a forward set and\n"
         "RMS scratch on the device; the RMS of every point and token, median counts and scratch on\n"
         "the host), then the ablation's forward sets; ckpt: a checkpoint's host copy of weights and\n"
         "moments; %.0f MiB for the program. Not counted: token and top-k batches, backend scratch\n"
         "(the CUDA context, cuBLAS workspace: the margin is for them), the brief overlap of old\n"
         "and grown model at a growth step. On N devices each holds 1/N of the AdamW moments and\n"
         "the step's buffers (ZeRO: one parameter's staging and the reduced gradients of its\n"
         "slices, P/N, fp32). devices: the fewest on which the stage fits (-: none).\n",
         (double)NG_PLAN_RUNTIME_BYTES / 1048576.0);
}

// For each stage that does not fit the devices: the first setting that does
// (micro-batches from the largest divisor of the batch down, each without and
// then with recompute, the loss chunk at its default), or what does not fit.
static void print_fitting(const ng_run_config *rc, const ng_model_config *teacher,
                          const ng_plan_stage *s, const ng_plan_device *d) {
  bool header = false;
  for (int i = 0; i < rc->n_stages; i++) {
    if (s[i].fits) continue;
    if (!header) printf("\nsettings that fit %lld device(s) of %g GiB:\n", (long long)d->devices, d->memory_gib);
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
        ng_plan_stage_of(&try, i, teacher, d, &p);
        found = p.fits;
      }
    }
    if (found) {
      printf("  stage %d: micro_batch %lld, recompute %s, loss chunk %lld tokens: %.1f GiB\n", i + 1,
             (long long)p.micro_batch, p.recompute ? "on" : "off", (long long)p.chunk, p.per_device_gib);
    } else {  // p: micro-batch 1 with recompute, the smallest setting
      printf("  stage %d: none; at micro_batch 1 with recompute %.1f GiB: weights, gradients and "
             "AdamW %.1f, teacher %.1f, activations %.1f, diag %.1f\n",
             i + 1, p.per_device_gib, (double)(p.weights + p.grads + p.adamw_per_device) / GIB,
             (double)(p.teacher_weights + p.teacher_acts) / GIB, (double)(p.acts + p.eval_acts) / GIB,
             (double)(p.device_backend ? p.diag_device : p.diag) / GIB);
    }
  }
}

// ---------------------------------------------------------------- the command

// One arm: its config (with the command line's settings), its teacher, its stages.
typedef struct {
  ng_run_config rc;
  teacher_info t;
  ng_plan_stage stages[NG_MAX_STAGES];
} arm;

static int plan_arm(const ng_cli *c, const char *path, hardware *h, arm *a) {
  if (ng_run_config_load(path, NULL, &a->rc)) return -1;
  if (parse_settings(c, &a->rc) || find_teacher(&a->rc, ng_cli_opt(c, "teacher-config"), &a->t) ||
      teacher_dtype(c, &a->t)) {
    ng_run_config_free(&a->rc);
    return -1;
  }
  h->dev.teacher_bf16 = a->t.bf16;
  for (int i = 0; i < a->rc.n_stages; i++)
    ng_plan_stage_of(&a->rc, i, a->t.known ? &a->t.cfg : NULL, &h->dev, &a->stages[i]);
  return 0;
}

// The hours of an arm: every stage's compute and communication.
static double arm_hours(const arm *a) {
  double s = 0.0;
  for (int i = 0; i < a->rc.n_stages; i++) s += a->stages[i].seconds + a->stages[i].comm_seconds;
  return s / 3600.0;
}

static void print_arm(const char *path, const arm *a, const hardware *h) {
  const ng_plan_stage *s = a->stages;
  int n = a->rc.n_stages;
  print_header(path, &a->rc, &a->t, s[0].teacher.total, h);
  print_compute(s, n);
  print_communication(s, n, &h->dev);
  print_memory(s, n, a->t.known, &h->dev);
  printf("\ntime of the arm on %lld device(s): %.1f hours\n", (long long)h->dev.devices, arm_hours(a));
  print_notes();
  print_fitting(&a->rc, a->t.known ? &a->t.cfg : NULL, s, &h->dev);
}

// A study: one line per arm, then the whole.
static void print_study(const arm *arms, int n, const hardware *h) {
  const ng_plan_device *d = &h->dev;
  printf("normgrow plan: %d arms on %lld device(s) of %g GiB, %g TFLOP/s peak at %.0f%% MFU "
         "(%g sustained)\n\n", n, (long long)d->devices, d->memory_gib, h->peak_tflops, 100.0 * h->mfu,
         d->tflops);
  printf("%-30s %6s %6s %15s %11s %11s %7s %8s %9s %8s %12s\n", "arm", "stages", "steps", "tokens",
         "train FLOPs", "all FLOPs", "eval %", "hours", "device", "host", "fit");
  double train = 0.0, all = 0.0, evals = 0.0, hours = 0.0;
  bool every_fits = true;
  for (int i = 0; i < n; i++) {
    const arm *a = &arms[i];
    double t = 0.0, f = 0.0, e = 0.0;
    int64_t tokens = 0, steps = 0, device = 0, host = 0;
    bool fits = true;
    for (int k = 0; k < a->rc.n_stages; k++) {
      const ng_plan_stage *s = &a->stages[k];
      t += s->flops, f += all_flops(s), e += eval_part(s);
      tokens += s->tokens, steps += s->steps;
      device = s->per_device > device ? s->per_device : device;
      host = s->host > host ? s->host : host;
      fits = fits && s->fits;
    }
    printf("%-30s %6d %6lld %15s %11.3e %11.3e %6.1f%% %8.1f %9.1f %8s %12s\n", a->rc.name, a->rc.n_stages,
           (long long)steps, grouped(tokens).s, t, f, 100.0 * e / f, arm_hours(a), (double)device / GIB,
           gib(host, a->stages[0].device_backend).s, fits ? "fits" : "does NOT fit");
    train += t, all += f, evals += e, hours += arm_hours(a);
    every_fits = every_fits && fits;
  }
  printf("%-30s %6s %6s %15s %11.3e %11.3e %6.1f%% %8.1f  (%.1f days on %lld device(s), %.0f device-hours)\n",
         "study", "", "", "", train, all, 100.0 * evals / all, hours, hours / 24.0, (long long)d->devices,
         hours * (double)d->devices);
  printf("\ndevice, host: GiB at each arm's peak stage on each device and on rank 0's host; eval %%: the\n"
         "share of evaluation, diagnostics and ablation in the arm's FLOPs; hours: compute at the\n"
         "sustained rate and the ZeRO-1 communication at %g GB/s, the ranks sharing everything.\n"
         "One arm's stages in full: `normgrow plan RUN.json` with the same options.%s\n",
         d->bus_gbps, every_fits ? "" : " Some arm does NOT fit: plan it alone for settings that do.");
}

int cmd_plan(const ng_cli *c) {
  hardware h;
  if (parse_device(c, &h)) return ng_cli_error(ng_error());
  arm *arms = ng_xcalloc((size_t)c->npos, sizeof *arms);
  int n = 0;
  for (; n < c->npos; n++)
    if (plan_arm(c, c->pos[n], &h, &arms[n])) break;
  int rc = n == c->npos ? 0 : ng_cli_error(ng_error());
  if (rc == 0 && n == 1) print_arm(c->pos[0], &arms[0], &h);
  if (rc == 0 && n > 1) print_study(arms, n, &h);
  for (int i = 0; i < n; i++) ng_run_config_free(&arms[i].rc);
  free(arms);
  return rc;
}
