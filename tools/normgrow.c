// normgrow: the command-line program. `normgrow help` lists the subcommands.
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "normgrow/common.h"

typedef struct {
  const char *name;
  int (*run)(const ng_cli *c);
  int min_pos, max_pos;
  const char *usage;
} command;

static const command commands[] = {
    {"golden-eval", cmd_golden_eval, 2, 2,
     "golden-eval CASE OUT [--backend NAME]   write every out.* tensor of CASE to OUT"},
    {"golden-check", cmd_golden_check, 1, 1 << 20,
     "golden-check CASE... [--backend NAME]   recompute and compare with the stored out.*\n"
     "   golden-eval and golden-check also take [--loss-chunk ROWS] [--recompute on|off]"},
    {"golden-make", cmd_golden_make, 2, 2,
     "golden-make SPEC.json CASE              new case: random inputs from the spec, reference outputs"},
    {"golden-update", cmd_golden_update, 1, 1 << 20,
     "golden-update CASE...                   recompute the stored out.* from the case's inputs"},
    {"data", cmd_data, 1, 1 << 20,
     "data FILE... --out DIR [--records-split LINE] [--val-fraction F] [--seed S]\n"
     "                                          byte-level token shards DIR/train.bin, DIR/val.bin"},
    {"train", cmd_train, 0, 1,
     "train RUN.json [--seed S] [--run-dir DIR] | train --resume RUN_DIR\n"
     "                                          run one arm, or continue it from its last checkpoint"},
    {"export", cmd_export, 2, 2,
     "export CHECKPOINT DIR [--dtype bf16|f32] [--shard-mib N]\n"
     "                                          a student as a Hugging Face Qwen3 directory"},
    {"teacher-cache", cmd_teacher_cache, 3, 3,
     "teacher-cache TEACHER SHARD OUT [--k K] [--temperature TAU] [--seq T] [--batch B]\n"
     "                                          the teacher's top-k logits over a shard, for every arm"},
    {"bench", cmd_bench, 0, 0,
     "bench [--steps N]                       training steps at two shapes, loss whole or chunked: time, memory"},
    {"plan", cmd_plan, 1, 1,
     "plan RUN.json [--teacher-config FILE.json] [--device-tflops X] [--device-memory-gib M]\n"
     "                [--devices N] [--bytes-per-param B] [--micro-batch N] [--loss-chunk ROWS]\n"
     "                [--recompute on|off] [--teacher-dtype bf16|f32]\n"
     "                                          parameters, memory per device and FLOPs of each stage"},
    {"report", cmd_report, 1, 1 << 20,
     "report RUN_DIR... [--out DIR]           tables and plots comparing finished runs -> DIR/report.md"},
    {"diag", cmd_diag, 1, 1,
     "diag CKPT --data SHARD [--teacher CKPT] [--batches N] [--batch B] [--seq T] [--structural ID,...]\n"
     "                [--top K] [--kd-weight A] [--temperature TAU] [--out FILE]\n"
     "                                          residual RMS statistics and block-removal ablation (JSON)"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *to) {
  fprintf(to, "usage: normgrow [--threads N] COMMAND ARGS...\n");
  for (int i = 0; i < N_COMMANDS; i++) fprintf(to, "  normgrow %s\n", commands[i].usage);
}

const char *ng_cli_opt(const ng_cli *c, const char *key) {
  for (int i = 0; i < c->nextra; i++)
    if (strcmp(c->extra_key[i], key) == 0) return c->extra_val[i];
  return NULL;
}

int ng_cli_check_options(const ng_cli *c, const char *command, const char *const *known) {
  for (int i = 0; i < c->nextra; i++) {
    const char *const *k = known;
    while (*k && strcmp(c->extra_key[i], *k) != 0) k++;
    if (!*k) return ng_fail("%s: unknown option --%s", command, c->extra_key[i]);
  }
  return 0;
}

int ng_cli_parse_int(const char *s, const char *what, int64_t min, int64_t max, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*s < '0' || *s > '9' || *end != 0 || errno != 0 || v < min || v > max)
    return ng_fail("%s: \"%s\" is not an integer in %lld..%lld", what, s, (long long)min,
                   (long long)max);
  *out = v;
  return 0;
}

int ng_cli_int_opt(const ng_cli *c, const char *key, int64_t min, int64_t max, int64_t *out) {
  const char *s = ng_cli_opt(c, key);
  if (!s) return 0;
  char what[64];
  snprintf(what, sizeof what, "--%s", key);
  return ng_cli_parse_int(s, what, min, max, out);
}

int ng_cli_num_opt(const ng_cli *c, const char *key, double min, bool min_ok, double max,
                   double *out) {
  const char *s = ng_cli_opt(c, key);
  if (!s) return 0;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == 0 || *end != 0 || errno != 0 || !isfinite(v) || v < min || (v == min && !min_ok) ||
      v > max)
    return ng_fail("--%s: \"%s\" is not a number in %s%g, %g]", key, s, min_ok ? "[" : "(", min, max);
  *out = v;
  return 0;
}

int ng_cli_switch_opt(const ng_cli *c, const char *key, bool *out) {
  const char *s = ng_cli_opt(c, key);
  if (!s) return 0;
  if (strcmp(s, "on") != 0 && strcmp(s, "off") != 0)
    return ng_fail("--%s: \"%s\" is neither on nor off", key, s);
  *out = strcmp(s, "on") == 0;
  return 0;
}

int ng_cli_error(const char *msg) {
  fprintf(stderr, "normgrow: %s\n", msg);
  return 1;
}

// argv after the command name: --backend, --threads and --key value pairs; the rest positional.
static int parse_args(int argc, char **argv, ng_cli *c) {
  c->backend = "cpu";
  c->pos = ng_xcalloc((size_t)argc + 1, sizeof(char *));
  c->extra_key = ng_xcalloc((size_t)argc + 1, sizeof(char *));
  c->extra_val = ng_xcalloc((size_t)argc + 1, sizeof(char *));
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0 || strcmp(a, "--") == 0) {
      c->pos[c->npos++] = a;
      continue;
    }
    if (i + 1 >= argc) return ng_fail("option %s needs a value", a);
    const char *v = argv[++i];
    if (strcmp(a, "--backend") == 0) {
      c->backend = v;
    } else if (strcmp(a, "--threads") == 0) {
      if (ng_cli_parse_int(v, "--threads", 1, 4096, &c->threads)) return -1;
    } else {
      c->extra_key[c->nextra] = a + 2;
      c->extra_val[c->nextra++] = v;
    }
  }
  return 0;
}

static void free_args(ng_cli *c) {
  free(c->pos);
  free(c->extra_key);
  free(c->extra_val);
}

static const command *find_command(const char *name) {
  for (int i = 0; i < N_COMMANDS; i++)
    if (strcmp(name, commands[i].name) == 0) return &commands[i];
  return NULL;
}

// OpenMP threads that spin between parallel regions (libgomp's default) slow
// a training step on 2-core machines by a third to a half (measured with
// `normgrow bench`: 47% vs 80% of the sgemm ceiling), so unless the user set a
// policy, normgrow runs itself again with OMP_WAIT_POLICY=passive. libgomp
// reads the variable when it loads, before main, hence the exec.
static void prefer_passive_wait(char **argv) {
  if (getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then go on as we are
}

// Options may stand before or after the command: normgrow [--threads N] CMD ARGS.
int main(int argc, char **argv) {
  prefer_passive_wait(argv);
  ng_cli c = {0};
  int rc = 2;
  const command *cmd = NULL;
  if (parse_args(argc - 1, argv + 1, &c)) {
    rc = ng_cli_error(ng_error());
  } else if (c.npos == 0 || strcmp(c.pos[0], "help") == 0) {
    usage(c.npos == 0 ? stderr : stdout);
    rc = c.npos == 0 ? 2 : 0;
  } else if (!(cmd = find_command(c.pos[0]))) {
    fprintf(stderr, "normgrow: unknown command \"%s\" (normgrow help lists them)\n", c.pos[0]);
  } else if (c.npos - 1 < cmd->min_pos || c.npos - 1 > cmd->max_pos) {
    fprintf(stderr, "usage: normgrow %s\n", cmd->usage);
  } else {
    if (c.threads > 0) omp_set_num_threads((int)c.threads);
    c.pos++;  // the command's own positional arguments
    c.npos--;
    rc = cmd->run(&c);
    c.pos--;
  }
  free_args(&c);
  return rc;
}
