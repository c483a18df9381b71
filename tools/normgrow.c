// normgrow: the command-line program. `normgrow help` lists the subcommands.
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/registry.h"

// A command: its positional argument count, the --key VALUE options and the
// --flag options it takes (NULL-terminated; every other option is an error),
// and its usage text.
typedef struct {
  const char *name;
  int (*run)(const ng_cli *c);
  int min_pos, max_pos;
  bool computes;  // runs the model (and so says which BLAS kernels it uses)
  const char *const *options, *const *flags;
  const char *usage;
} command;

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE ((const char *const[]){NULL})
#define MANY (1 << 20)

// Everyday commands first, then the checking and contract commands.
static const command commands[] = {
    {"data", cmd_data, 1, MANY, false,
     LIST("out", "tokenizer", "records-split", "jsonl-field", "val-fraction", "seed", "max-tokens",
          "file-tokens"),
     LIST("force"),
     "data INPUT... --out DIR [--tokenizer PATH] [--records-split LINE | --jsonl-field F]\n"
     "         [--val-fraction F] [--seed S] [--max-tokens N] [--file-tokens N] [--force]\n"
     "    token shards DIR/train, DIR/val (.bin, or parts and a .manifest.json);\n"
     "    --force: replace existing ones"},
    {"tokenize", cmd_tokenize, 0, 1, false, LIST("tokenizer", "decode"), NONE,
     "tokenize --tokenizer PATH TEXT|- | tokenize --tokenizer PATH --decode IDS|-\n"
     "    a text's token ids, or the text of ids"},
    {"train", cmd_train, 0, 1, true,
     LIST("resume", "run-dir", "seed", "set", "stop-after", "extend-tokens", "backend", "precision"),
     LIST("force", "check"),
     "train RUN.json [--set KEY=VALUE]... [--seed S] [--run-dir DIR] [--force] [--check]\n"
     "         | train --resume RUN_DIR [--extend-tokens N]\n"
     "         either with [--backend NAME] [--precision fp32|bf16] (replace the run's own)\n"
     "    run one arm (--force: replace a run in its directory), or continue it from its last\n"
     "    checkpoint (--extend-tokens: a finished run, N tokens more); Ctrl-C stops at a checkpoint;\n"
     "    a run that diverges (a NaN, an Inf, a runaway CE) stops there and exits 3;\n"
     "    --set: a key of RUN.json replaced (lr.peak=1e-3, stages.0.tokens=8192, a string as it is);\n"
     "    --check: print the resolved config (with the overrides), train nothing"},
    {"diag", cmd_diag, 1, 1, true,
     LIST("backend", "precision", "data", "teacher", "batches", "batch", "seq", "structural",
          "top", "kd-weight", "temperature", "out"),
     LIST("force"),
     "diag MODEL [--data SHARD] [--teacher CKPT] [--batches N] [--batch B] [--seq T]\n"
     "         [--structural ID,...] [--top K] [--kd-weight A] [--temperature TAU]\n"
     "         [--out FILE [--force]] [--backend NAME] [--precision fp32|bf16]\n"
     "    residual RMS statistics and block-removal ablation (JSON) of a run directory, a\n"
     "    checkpoint or a Hugging Face directory; a run's own evaluation settings by default"},
    {"report", cmd_report, 1, MANY, false, LIST("out", "tensorboard"), LIST("force", "follow"),
     "report RUN_DIR... [--out DIR] [--force] [--tensorboard LOGDIR [--follow]]\n"
     "    tables and plots comparing runs (runs that did not train marked) -> DIR/report.md;\n"
     "    --tensorboard: also the runs' event files, --follow: only those, as the runs train"},
    {"sweep", cmd_sweep, 1, 1, false,
     LIST("out", "set", "seeds", "jobs", "stop-after", "backend", "precision"), NONE,
     "sweep RUN.json --out DIR [--set KEY=V1,V2,...]... [--seeds S1,S2,...] [--jobs J]\n"
     "         [--backend NAME] [--precision fp32|bf16] [--threads N (per run; default: the cores / J)]\n"
     "    RUN.json trained at every setting of the grid and every seed, J runs at a time, each in\n"
     "    DIR/<setting>/seed<S>; run again, finished and diverged runs are kept, stopped ones resumed;\n"
     "    DIR/sweep.md and sweep.json: final validation CE per setting, mean and spread over seeds"},
    {"runs", cmd_runs, 0, 1, false, NONE, LIST("long"),
     "runs [DIR] [--long]\n"
     "    the run directories under DIR (default runs), one a line: state (running: the pid),\n"
     "    step, final CE, differences; --long: every difference in full; DIR a run: all of it"},
    {"export", cmd_export, 2, 2, false, LIST("dtype", "shard-mib"), LIST("force"),
     "export CHECKPOINT DIR [--dtype bf16|f32] [--shard-mib N] [--force]\n"
     "    a student as a Hugging Face directory: Qwen3, or a normgrow model that transformers\n"
     "    loads with trust_remote_code=True (Post-Norm, no final norm)"},
    {"plan", cmd_plan, 1, MANY, false,
     LIST("teacher-config", "peak-tflops", "mfu", "device-memory", "devices", "bytes-per-param",
          "micro-batch", "loss-chunk", "recompute", "teacher-dtype", "bus-gbps"),
     NONE,
     "plan RUN.json... [--teacher-config FILE.json] [--device-memory GIB] [--devices N]\n"
     "         [--peak-tflops X] [--mfu F] [--bus-gbps B] [--bytes-per-param B] [--micro-batch N]\n"
     "         [--loss-chunk ROWS] [--recompute on|off] [--teacher-dtype bf16|f32]\n"
     "    parameters, device and host memory, FLOPs, communication and time of each stage\n"
     "    (80 GiB devices by default; an H200: --device-memory 139); several arms: the study"},
    {"teacher-cache", cmd_teacher_cache, 3, 3, true,
     LIST("backend", "precision", "k", "temperature", "seq", "batch"), LIST("force"),
     "teacher-cache TEACHER SHARD OUT [--k K] [--temperature TAU] [--seq T] [--batch B] [--force]\n"
     "         [--backend NAME] [--precision fp32|bf16]\n"
     "    the teacher's top-k logits over a shard, for every arm"},
    {"bench", cmd_bench, 0, 0, true, LIST("backend", "precision", "steps"), NONE,
     "bench [--steps N] [--backend NAME] [--precision fp32|bf16]\n"
     "    a training step at a toy-medium shape on the fp32 reference, onednn fp32 and onednn\n"
     "    bf16 (or the one backend named), against sgemm and bf16 matmul ceilings; then at\n"
     "    Qwen3's vocabulary, the loss whole or in chunks: time and peak memory"},
    {"golden-check", cmd_golden_check, 1, MANY, true,
     LIST("backend", "precision", "loss-chunk", "recompute"), NONE,
     "golden-check CASE... [--backend NAME] [--precision fp32|bf16] [--loss-chunk ROWS]\n"
     "         [--recompute on|off]\n"
     "    recompute each case and compare with its stored out.* (docs/golden-contract.md)"},
    {"golden-eval", cmd_golden_eval, 2, 2, true,
     LIST("backend", "precision", "loss-chunk", "recompute"), LIST("force"),
     "golden-eval CASE OUT [--backend NAME] [--precision fp32|bf16] [--loss-chunk ROWS]\n"
     "         [--recompute on|off] [--force]\n"
     "    write every out.* tensor of CASE to OUT (--force: replace an existing OUT)"},
    {"golden-make", cmd_golden_make, 2, 2, true, NONE, LIST("force"),
     "golden-make SPEC.json CASE [--force]\n"
     "    a new case: random inputs from the spec, outputs of the fp32 reference\n"
     "    (--force: replace an existing CASE)"},
    {"golden-update", cmd_golden_update, 1, MANY, true, NONE, NONE,
     "golden-update CASE...\n"
     "    recompute the stored out.* from the case's inputs on the fp32 reference"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *to) {
  fprintf(to,
          "usage: normgrow [--threads N] COMMAND ARGS...\n"
          "       normgrow help COMMAND | normgrow COMMAND --help | normgrow --version\n"
          "commands:\n");
  for (int i = 0; i < N_COMMANDS; i++) fprintf(to, "  %s\n", commands[i].usage);
}

static void command_usage(const command *cmd, FILE *to) {
  fprintf(to, "usage: normgrow %s\n", cmd->usage);
  fprintf(to, "  --threads N   OpenMP threads (default: all cores)\n");
}

const char *ng_cli_opt(const ng_cli *c, const char *key) {
  for (int i = 0; i < c->nextra; i++)
    if (strcmp(c->extra_key[i], key) == 0) return c->extra_val[i];
  return NULL;
}

static bool listed(const char *const *list, const char *key) {
  for (; *list; list++)
    if (strcmp(*list, key) == 0) return true;
  return false;
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

int ng_cli_may_replace(const ng_cli *c, const char *path, const char *what) {
  if (access(path, F_OK) != 0 || ng_cli_opt(c, "force")) return 0;
  return ng_fail("%s already exists (%s): choose another output, or replace it with --force", path,
                 what);
}

int ng_cli_switch_opt(const ng_cli *c, const char *key, bool *out) {
  const char *s = ng_cli_opt(c, key);
  if (!s) return 0;
  if (strcmp(s, "on") != 0 && strcmp(s, "off") != 0)
    return ng_fail("--%s: \"%s\" is neither on nor off", key, s);
  *out = strcmp(s, "on") == 0;
  return 0;
}

ng_backend *ng_cli_backend(const ng_cli *c) {
  ng_precision p = NG_PREC_FP32;
  if (c->precision && ng_precision_parse(c->precision, &p)) return NULL;
  return ng_backend_open(c->backend ? c->backend : "cpu", p);
}

int ng_cli_error(const char *msg) {
  fprintf(stderr, "normgrow: %s\n", msg);
  return 1;
}

static bool is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

// The command line: global options before the command (--threads N, --help,
// --version), the command, then its positional arguments and its options
// (--threads too) in any order. Every option the command does not take is an
// error. Flags read back as the value "1".
typedef struct {
  const command *cmd;  // NULL: none named
  bool help, version;
  ng_cli cli;
} args;

// Edit distance between a and b: insertions, deletions, substitutions and
// swaps of two neighbours (optimal string alignment; the usual typos).
static size_t edit_distance(const char *a, const char *b) {
  size_t m = strlen(a), n = strlen(b), w = n + 1;
  size_t *d = ng_xmalloc((m + 1) * w * sizeof(size_t));
  for (size_t i = 0; i <= m; i++) d[i * w] = i;
  for (size_t j = 0; j <= n; j++) d[j] = j;
  for (size_t i = 1; i <= m; i++)
    for (size_t j = 1; j <= n; j++) {
      size_t best = d[(i - 1) * w + j - 1] + (a[i - 1] != b[j - 1]);
      if (d[(i - 1) * w + j] + 1 < best) best = d[(i - 1) * w + j] + 1;
      if (d[i * w + j - 1] + 1 < best) best = d[i * w + j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[(i - 2) * w + j - 2] + 1 < best)
        best = d[(i - 2) * w + j - 2] + 1;
      d[i * w + j] = best;
    }
  size_t dist = d[m * w + n];
  free(d);
  return dist;
}

// An unknown command, with the closest one by edit distance when it is close
// (at most 2 edits, or a third of the name's length).
static int unknown_command(const char *name) {
  const command *best = NULL;
  size_t best_d = SIZE_MAX;
  for (int k = 0; k < N_COMMANDS; k++) {
    size_t d = edit_distance(name, commands[k].name);
    if (d < best_d) best = &commands[k], best_d = d;
  }
  size_t len = strlen(name), limit = len / 3 > 2 ? len / 3 : 2;
  if (best_d <= limit)
    return ng_fail("unknown command \"%s\": did you mean \"%s\"? (normgrow --help lists them)", name,
                   best->name);
  return ng_fail("unknown command \"%s\" (normgrow --help lists them)", name);
}

static int parse_threads(const char *v, ng_cli *c) {
  return ng_cli_parse_int(v, "--threads", 1, 4096, &c->threads);
}

static int parse_args(int argc, char **argv, args *a) {
  ng_cli *c = &a->cli;
  c->pos = ng_xcalloc((size_t)argc + 1, sizeof(char *));
  c->extra_key = ng_xcalloc((size_t)argc + 1, sizeof(char *));
  c->extra_val = ng_xcalloc((size_t)argc + 1, sizeof(char *));
  int i = 0;
  for (; i < argc && argv[i][0] == '-'; i++) {  // global options
    if (is_help(argv[i])) {
      a->help = true;
    } else if (strcmp(argv[i], "--version") == 0) {
      a->version = true;
    } else if (strcmp(argv[i], "--threads") == 0) {
      if (i + 1 >= argc) return ng_fail("option --threads needs a value");
      if (parse_threads(argv[++i], c)) return -1;
    } else {
      return ng_fail("option %s: unknown before a command (normgrow --help lists the commands)",
                     argv[i]);
    }
  }
  if (i == argc) return 0;
  const char *name = argv[i++];
  if (strcmp(name, "help") == 0) {
    a->help = true;
    if (i == argc) return 0;
    name = argv[i++];
  }
  for (int k = 0; k < N_COMMANDS && !a->cmd; k++)
    if (strcmp(name, commands[k].name) == 0) a->cmd = &commands[k];
  if (!a->cmd) return unknown_command(name);
  const command *cmd = a->cmd;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (is_help(arg)) {
      a->help = true;
    } else if (strncmp(arg, "--", 2) != 0 || strcmp(arg, "--") == 0) {
      c->pos[c->npos++] = arg;
    } else if (listed(cmd->flags, arg + 2)) {
      c->extra_key[c->nextra] = arg + 2;
      c->extra_val[c->nextra++] = "1";
    } else if (strcmp(arg, "--threads") == 0 || listed(cmd->options, arg + 2)) {
      if (i + 1 >= argc) return ng_fail("%s: option %s needs a value", cmd->name, arg);
      const char *v = argv[++i];
      if (strncmp(v, "--", 2) == 0 && v[2])
        return ng_fail("%s: option %s needs a value (%s follows it)", cmd->name, arg, v);
      if (strcmp(arg, "--threads") == 0) {
        if (parse_threads(v, c)) return -1;
      } else if (strcmp(arg, "--backend") == 0) {
        c->backend = v;
      } else if (strcmp(arg, "--precision") == 0) {
        c->precision = v;
      } else {
        c->extra_key[c->nextra] = arg + 2;
        c->extra_val[c->nextra++] = v;
      }
    } else {
      return ng_fail("%s: unknown option %s (normgrow %s --help lists its options)", cmd->name,
                     arg, cmd->name);
    }
  }
  return 0;
}

static void free_args(ng_cli *c) {
  free(c->pos);
  free(c->extra_key);
  free(c->extra_val);
}

// The process environment normgrow computes in, set before the libraries load
// (libgomp and OpenBLAS read their variables when they load, before main,
// hence one exec of normgrow itself when something changes):
// - OMP_WAIT_POLICY=passive unless the user chose a policy, with a short spin
//   before a thread sleeps (GOMP_SPINCOUNT=20000, unless set: libgomp's own
//   default is 300000). Threads that spin that long between parallel regions
//   slow a training step on 2-core machines by a third to a half (measured
//   with `normgrow bench`: 47% vs 80% of the sgemm ceiling); threads that
//   never spin pay a wake-up at every region: the short spin made the onednn
//   bf16 step 12% faster than pure passive waits on a quiet 2-core Xeon
//   (0.59 s vs 0.67 s, two rounds), the reference's within 5%, and neither
//   slower with two other busy processes on the cores.
// - OPENBLAS_CORETYPE, unless the user set it, when OpenBLAS fell back to
//   generic kernels on a CPU whose features allow better (see
//   ng_blas_better_coretype). A computing command says so in one line on a
//   terminal's stderr; a redirected stderr keeps its one-line-per-error
//   contract, and the family is in `--version`, `bench` and every run's log.
#define NG_GOMP_SPINCOUNT "20000"

static void prepare_runtime(char **argv, bool computes) {
  bool again = false;
  if (!getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    if (!getenv("GOMP_SPINCOUNT")) setenv("GOMP_SPINCOUNT", NG_GOMP_SPINCOUNT, 1);
    again = true;
  }
  const char *better = getenv("OPENBLAS_CORETYPE") ? NULL : ng_blas_better_coretype();
  if (better) {
    if (computes && isatty(STDERR_FILENO))
      fprintf(stderr,
              "normgrow: OpenBLAS chose its generic %s kernels on this CPU; using %s "
              "(set OPENBLAS_CORETYPE to choose)\n",
              ng_blas_corename(), better);
    setenv("OPENBLAS_CORETYPE", better, 1);
    setenv(NG_BLAS_CORETYPE_MARK, "1", 1);
    again = true;
  }
  if (again) execv("/proc/self/exe", argv);  // returns only on failure: go on as we are
}

static void version(void) {
  printf("normgrow %s\nbackends: %s\nBLAS: %s; kernels %s (%s)\n", NG_VERSION,
         ng_backend_names(), ng_blas_config(), ng_blas_corename(), ng_blas_family_origin());
}

int main(int argc, char **argv) {
  args a = {0};
  int rc = 2;
  if (parse_args(argc - 1, argv + 1, &a)) {
    rc = ng_cli_error(ng_error());
  } else if (a.help || a.version || !a.cmd) {
    if (a.version) prepare_runtime(argv, false), version();
    if (a.help && a.cmd) command_usage(a.cmd, stdout);
    if (a.help && !a.cmd) usage(stdout);
    if (!a.help && !a.version) usage(stderr);
    rc = a.help || a.version ? 0 : 2;
  } else if (a.cli.npos < a.cmd->min_pos || a.cli.npos > a.cmd->max_pos) {
    fprintf(stderr, "normgrow: %s: %d arguments given (normgrow %s --help shows its usage)\n",
            a.cmd->name, a.cli.npos, a.cmd->name);
  } else {
    prepare_runtime(argv, a.cmd->computes);
    if (a.cli.threads > 0) omp_set_num_threads((int)a.cli.threads);
    rc = a.cmd->run(&a.cli);
  }
  free_args(&a.cli);
  return rc;
}
