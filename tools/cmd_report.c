// normgrow report RUN_DIR... [--out DIR] [--force]: tables and plots that
// compare runs of `normgrow train`. Runs whose config.json has the same "name"
// are one arm (its seeds); their configs must agree except in "seed" and
// "run_dir" (else the report is refused, naming the difference). A directory
// without a run's config.json (rundir.h) is not a run: it is left out, with a note. Runs that
// have not reached their last step are marked unfinished; arms evaluated on
// different validation data or settings (data.val, data.seq, data.batch,
// eval.batches, teacher_cache.val) are flagged at the top of the report. An
// existing DIR/report.md is replaced only with --force.
// Writes DIR/report.md, DIR/report-data.json
// (the series the plots need) and, by running tools/plot_report.py (found in
// $NG_TOOLS, else in the first directory above the executable that holds
// tools/plot_report.py), DIR/{val_ce,rms_std,rms_by_class,rms_readings,ablation}.png.
// DIR defaults to dirname(RUN_DIR[0])/report.
//
// Final values come from the last "eval" record of metrics.jsonl; residual
// statistics from diag.jsonl (one record per evaluation) and diag_final.json
// (with the ablation), either of which may be missing. Over the seeds of an
// arm: the mean, and the sample standard deviation (n - 1). A value that is
// null in a file (not finite when it was written) is NaN here and prints as
// "nan"; "n/a" means no run of the arm has the value.
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/config.h"
#include "normgrow/diag.h"
#include "normgrow/fileio.h"
#include "normgrow/model.h"
#include "rundir.h"

extern char **environ;

#define N_CLASSES NG_TOK_CLASSES  // ng_token_class_name gives their keys
#define PLOT_SKIPPED 3  // plot_report.py's status when matplotlib is missing

// ---------------------------------------------------------------- data

typedef struct {
  double *x, *y;
  size_t n, cap;
} series;

typedef struct {
  double ce, kd, teacher_ce, tokens, layer_tokens, flops;
  bool has_kd;  // val_kd and teacher_ce (distill)
} final_eval;

// The std over tokens of the per-token RMS of the stream a new block receives
// at a growth (diag.jsonl's growth records): hidden.<block-1> and, Post-Norm,
// res2.<block-1> (NaN for block 1, whose input is the embedding); and the
// mean of hidden.<block-1>'s per-token RMS (the scale the std is relative to).
typedef struct {
  long long step, depth, block;
  double tokens, hidden, res2, hidden_mean;
} growth_input;

// Per token class at one point of one diag record: count, mean, std (population)
// of the per-token RMS; count 0 for a class without tokens.
typedef struct {
  bool has;
  double count[N_CLASSES], mean[N_CLASSES], std[N_CLASSES];
} class_spread;

typedef struct {
  char *dir, *name, *mode, *schedule;
  ng_norm_placement placement;
  ng_model_config model;    // at its final depth
  long long seed;
  ng_rundir state;          // how far it got (finished, steps)
  ng_flat_config settings;  // config.json as key=value
  final_eval final;  // the last eval record of metrics.jsonl
  series val_ce;     // over tokens
  series ce_at_step; // the same over steps
  // Where the stage changes between two eval records: the step of the last
  // evaluation of a stage (x) and of the first of the next (y).
  series stage_ends;
  long long eval_stage;  // the last eval record's stage
  series growth;     // tokens of each growth record -> depth after it
  // diag.jsonl: std over tokens of the per-token RMS at hidden.L and (when the
  // last block has an output norm) res2.L, L the depth at that evaluation, over tokens.
  bool has_diag;
  series rms_hidden, rms_res2;
  long long depth_first, depth_last;
  // diag_final.json: mean RMS per layer and token class at hidden.<l> and
  // res2.<l>, [n_layers * N_CLASSES] layer-major, NaN where absent.
  bool has_final;
  size_t n_layers;
  double *class_hidden, *class_res2;
  // The other readings of the spread (rms_readings below).
  size_t n_growth_in;
  growth_input *growth_in;  // diag.jsonl's growth records: each new block's input
  class_spread classes[2][2];  // [hidden.L, res2.L][first, last evaluation]
  double *layer_hidden, *layer_res2;  // diag_final.json: std at hidden.<l>, res2.<l> [n_layers]
  bool has_ablation;
  double intact_ce;
  size_t n_blocks;
  long long *block;
  double *skip_dce, *norms_dce;  // norms_dce: blocks with an output norm only
} run;

typedef struct {
  const run **runs;  // its seeds, in the order given
  size_t n;
} arm;

typedef struct {
  run *runs;
  size_t n_runs;
  arm *arms;
  size_t n_arms;
  const char **skipped;  // arguments that are not run directories
  size_t n_skipped;
  char *eval_differs;    // the validation settings in which runs differ ("" none)
  char *out_dir;
  char *plots_skipped;  // why the plots were not drawn; NULL when they were
} report;

static void series_push(series *s, double x, double y) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->x = ng_xrealloc(s->x, s->cap * sizeof(double));
    s->y = ng_xrealloc(s->y, s->cap * sizeof(double));
  }
  s->x[s->n] = x;
  s->y[s->n++] = y;
}

static void series_free(series *s) {
  free(s->x);
  free(s->y);
}

// ---------------------------------------------------------------- files

// Everything left in f as a string; false on a read error (*out is set either way).
static bool slurp(FILE *f, char **out) {
  size_t len = 0;
  FILE *mem = open_memstream(out, &len);
  NG_ASSERT(mem);
  char chunk[16384];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, n, mem);
  fclose(mem);
  return !ferror(f);
}

static int parse_json_file(const char *path, cJSON **out) {
  char *text;
  if (ng_read_file(path, SIZE_MAX, &text, NULL) != 0) return -1;
  *out = cJSON_ParseWithOpts(text, NULL, true);
  free(text);
  if (cJSON_IsObject(*out)) return 0;
  cJSON_Delete(*out);
  return ng_fail("%s: not a valid JSON object", path);
}

typedef int (*record_fn)(const cJSON *rec, const char *where, run *r);

// Calls fn with each line of a JSON-lines file (blank lines skipped) and
// "path:LINE" for its messages.
static int parse_jsonl_file(const char *path, record_fn fn, run *r) {
  FILE *f = fopen(path, "r");
  if (!f) return ng_fail("%s: %s", path, strerror(errno));
  char *line = NULL, where[PATH_MAX + 32];
  size_t cap = 0;
  int rc = 0;
  for (long no = 1; rc == 0 && getline(&line, &cap, f) >= 0; no++) {
    if (line[strspn(line, " \t\r\n")] == 0) continue;
    snprintf(where, sizeof where, "%s:%ld", path, no);
    cJSON *rec = cJSON_ParseWithOpts(line, NULL, false);
    rc = cJSON_IsObject(rec) ? fn(rec, where, r) : ng_fail("%s: not a valid JSON object", where);
    cJSON_Delete(rec);
  }
  if (rc == 0 && ferror(f)) rc = ng_fail("%s: read error", path);
  free(line);
  fclose(f);
  return rc;
}

// ---------------------------------------------------------------- JSON fields

// o[k1][k2]...: the keys end with NULL; NULL when a level is missing.
static const cJSON *dig(const cJSON *o, ...) {
  va_list ap;
  va_start(ap, o);
  for (const char *k; o && (k = va_arg(ap, const char *)) != NULL;)
    o = cJSON_GetObjectItemCaseSensitive(o, k);
  va_end(ap);
  return o;
}

// A number, or null (a value that was not finite) as NaN; NULL, or what is wrong.
static const char *as_num(const cJSON *v, double *out) {
  if (!cJSON_IsNumber(v) && !cJSON_IsNull(v)) return "expected a number";
  *out = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  return NULL;
}

// A whole number in [0, 2^53] (counts, depths, seeds: exact in a double).
static const char *as_int(const cJSON *v, long long *out) {
  double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
  if (!(d >= 0.0 && d <= 9007199254740992.0 && d == floor(d))) return "expected a whole number >= 0";
  *out = (long long)d;
  return NULL;
}

static const char *as_str(const cJSON *v, const char **out) {
  if (!cJSON_IsString(v)) return "expected a string";
  *out = v->valuestring;
  return NULL;
}

// Fails with "<where>: <problem>" (where: a printf format) unless problem is NULL.
static int check(const char *problem, const char *fmt, ...) NG_PRINTF(2, 3);
static int check(const char *problem, const char *fmt, ...) {
  if (!problem) return 0;
  char where[PATH_MAX + 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(where, sizeof where, fmt, ap);
  va_end(ap);
  return ng_fail("%s: %s", where, problem);
}

// ---------------------------------------------------------------- config.json

// "grow 2→4→6" from the stage depths (repeats folded), or "fixed 6"; the
// stages after the first that restart the LR schedule are named (from 1).
static int schedule_of(const cJSON *stages, const char *file, char **out) {
  int n = cJSON_GetArraySize(stages), restarts = 0, rc = 0;
  if (!cJSON_IsArray(stages) || n == 0) return ng_fail("%s: stages: expected a non-empty array", file);
  struct {
    long long depth;
    bool restart;
  } *st = ng_xcalloc((size_t)n, sizeof *st);
  for (int i = 0; i < n && rc == 0; i++) {
    const cJSON *s = cJSON_GetArrayItem(stages, i);
    rc = check(as_int(dig(s, "depth", NULL), &st[i].depth), "%s: stages[%d].depth", file, i);
    st[i].restart = i > 0 && cJSON_IsTrue(dig(s, "restart_lr", NULL));
    restarts += st[i].restart;
  }
  if (rc == 0) {
    size_t len;
    FILE *m = open_memstream(out, &len);
    NG_ASSERT(m);
    fputs(st[0].depth == st[n - 1].depth ? "fixed" : "grow", m);
    for (int i = 0; i < n; i++)
      if (i == 0 || st[i].depth != st[i - 1].depth) fprintf(m, "%s%lld", i ? "→" : " ", st[i].depth);
    for (int i = 1, k = 0; i < n; i++)
      if (st[i].restart)
        fprintf(m, "%s%d",
                k++            ? ", "
                : restarts > 1 ? " (LR restarts at stages "
                               : " (LR restart at stage ",
                i + 1);
    if (restarts) fputc(')', m);
    fclose(m);
  }
  free(st);
  return rc;
}

// Whether some block of r ends in a norm (post, deepnorm, mixln's post blocks):
// the residual points res1/res2 and the norms-only ablation exist for those.
static bool output_norm(const run *r) { return ng_model_has_output_norms(&r->model); }
// Whether block `block` (1-based) of r ends in a norm.
static bool block_output_norm(const run *r, long long block) {
  return block >= 1 && ng_block_layout_of(&r->model, block - 1).output_norm;
}

static int load_config(const char *path, run *r) {
  cJSON *c;
  if (parse_json_file(path, &c)) return -1;
  const char *name = NULL, *mode = NULL;
  char where[4200];
  snprintf(where, sizeof where, "%s: model", path);
  int rc = check(as_str(dig(c, "name", NULL), &name), "%s: name", path) ||
                   check(as_int(dig(c, "seed", NULL), &r->seed), "%s: seed", path) ||
                   check(as_str(dig(c, "mode", NULL), &mode), "%s: mode", path) ||
                   ng_model_config_parse(dig(c, "model", NULL), where, &r->model) ||
                   schedule_of(dig(c, "stages", NULL), path, &r->schedule)
               ? -1
               : 0;
  if (rc == 0) {
    r->placement = r->model.norm_placement;
    r->name = ng_xstrdup(name);
    r->mode = ng_xstrdup(mode);
  }
  cJSON_Delete(c);
  return rc;
}

// ---------------------------------------------------------------- metrics.jsonl

// An eval record; its "stage" may be missing (stage 0: one stage).
static int eval_record(const cJSON *rec, const char *where, double tokens, run *r) {
  final_eval *f = &r->final;
  const cJSON *kd = dig(rec, "val_kd", NULL), *stage = dig(rec, "stage", NULL);
  long long step = 0, st = 0;
  f->tokens = tokens;
  f->has_kd = kd != NULL;
  if (check(as_int(dig(rec, "step", NULL), &step), "%s: step", where) ||
      (stage && check(as_int(stage, &st), "%s: stage", where)) ||
      check(as_num(dig(rec, "val_ce", NULL), &f->ce), "%s: val_ce", where) ||
      check(as_num(dig(rec, "layer_tokens", NULL), &f->layer_tokens), "%s: layer_tokens", where) ||
      check(as_num(dig(rec, "flops", NULL), &f->flops), "%s: flops", where) ||
      (kd && (check(as_num(kd, &f->kd), "%s: val_kd", where) ||
              check(as_num(dig(rec, "teacher_ce", NULL), &f->teacher_ce), "%s: teacher_ce", where))))
    return -1;
  const series *at = &r->ce_at_step;
  if (at->n && st > r->eval_stage) series_push(&r->stage_ends, at->x[at->n - 1], (double)step);
  series_push(&r->val_ce, tokens, f->ce);
  series_push(&r->ce_at_step, (double)step, f->ce);
  r->eval_stage = st;
  return 0;
}

static int metrics_record(const cJSON *rec, const char *where, run *r) {
  const char *event = NULL;
  long long tokens = 0, depth = 0;
  if (check(as_str(dig(rec, "event", NULL), &event), "%s: event", where) ||
      check(as_int(dig(rec, "tokens", NULL), &tokens), "%s: tokens", where))
    return -1;
  if (strcmp(event, "eval") == 0) return eval_record(rec, where, (double)tokens, r);
  if (strcmp(event, "growth") != 0) return 0;
  if (check(as_int(dig(rec, "depth", NULL), &depth), "%s: depth", where)) return -1;
  series_push(&r->growth, (double)tokens, (double)depth);
  return 0;
}

// ---------------------------------------------------------------- diag.jsonl

static const cJSON *find_point(const cJSON *diag, const char *kind, long long layer) {
  char name[64];
  snprintf(name, sizeof name, "%s.%lld", kind, layer);
  const cJSON *p;
  cJSON_ArrayForEach(p, dig(diag, "points", NULL)) {
    const cJSON *n = dig(p, "name", NULL);
    if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return p;
  }
  return NULL;
}

// Std over tokens of the per-token RMS of all tokens at point <kind>.<layer>.
static int point_std(const cJSON *diag, const char *kind, long long layer, const char *where, double *out) {
  const cJSON *p = find_point(diag, kind, layer);
  if (!p) return ng_fail("%s: no point \"%s.%lld\"", where, kind, layer);
  return check(as_num(dig(p, "rms", "all", "std", NULL), out), "%s: %s.%lld: rms.all.std", where, kind,
               layer);
}

static int growth_diag_record(const cJSON *rec, const char *where, run *r);
static int class_spread_record(const cJSON *rec, const char *where, long long depth, run *r);

static int diag_record(const cJSON *rec, const char *where, run *r) {
  long long depth = 0, tokens = 0;
  double hidden, res2;
  if (dig(rec, "event", NULL)) return growth_diag_record(rec, where, r);
  if (check(as_int(dig(rec, "depth", NULL), &depth), "%s: depth", where) ||
      check(as_int(dig(rec, "tokens", NULL), &tokens), "%s: tokens", where) ||
      point_std(rec, "hidden", depth, where, &hidden) ||
      (block_output_norm(r, depth) && point_std(rec, "res2", depth, where, &res2)) ||
      class_spread_record(rec, where, depth, r))
    return -1;
  if (r->rms_hidden.n == 0) r->depth_first = depth;
  r->depth_last = depth;
  series_push(&r->rms_hidden, (double)tokens, hidden);
  if (block_output_norm(r, depth)) series_push(&r->rms_res2, (double)tokens, res2);
  return 0;
}

// ---------------------------------------------------------------- more readings of the spread

// A growth record of diag.jsonl (diag.h): the spread at the input of each new block.
static int growth_diag_record(const cJSON *rec, const char *where, run *r) {
  const char *event = NULL;
  long long depth = 0, step = 0, tokens = 0;
  const cJSON *fresh = dig(rec, "new_blocks", NULL), *b;
  if (check(as_str(dig(rec, "event", NULL), &event), "%s: event", where) ||
      check(strcmp(event, "growth") != 0 ? "expected \"growth\"" : NULL, "%s: event", where) ||
      check(as_int(dig(rec, "depth", NULL), &depth), "%s: depth", where) ||
      check(as_int(dig(rec, "step", NULL), &step), "%s: step", where) ||
      check(as_int(dig(rec, "tokens", NULL), &tokens), "%s: tokens", where) ||
      check(cJSON_IsArray(fresh) ? NULL : "expected an array", "%s: new_blocks", where))
    return -1;
  cJSON_ArrayForEach(b, fresh) {
    growth_input g = {step, depth, 0, (double)tokens, NAN, NAN, NAN};
    if (check(as_int(b, &g.block), "%s: new_blocks", where)) return -1;
    if (g.block < 1 || g.block > depth)
      return ng_fail("%s: new_blocks: block %lld is not in 1..%lld", where, g.block, depth);
    if (point_std(rec, "hidden", g.block - 1, where, &g.hidden) ||
        check(as_num(dig(find_point(rec, "hidden", g.block - 1), "rms", "all", "mean", NULL), &g.hidden_mean),
              "%s: hidden.%lld: rms.all.mean", where, g.block - 1) ||
        (block_output_norm(r, g.block - 1) && point_std(rec, "res2", g.block - 1, where, &g.res2)))
      return -1;
    r->growth_in = ng_xrealloc(r->growth_in, (r->n_growth_in + 1) * sizeof *r->growth_in);
    r->growth_in[r->n_growth_in++] = g;
  }
  return 0;
}

// count, mean and std of every token class at point <kind>.<layer> of a diag
// record; a class the file does not have (written before it existed) has no
// tokens.
static int class_spread_of(const cJSON *rec, const char *kind, long long layer, const char *where,
                           class_spread *c) {
  const cJSON *p = find_point(rec, kind, layer);
  if (!p) return ng_fail("%s: no point \"%s.%lld\"", where, kind, layer);
  static const char *const stat[3] = {"count", "mean", "std"};
  for (int k = 0; k < N_CLASSES; k++) {
    const char *name = ng_token_class_name((ng_token_class)k);
    double *to[3] = {&c->count[k], &c->mean[k], &c->std[k]};
    if (!dig(p, "rms", name, NULL)) {
      *to[0] = 0.0, *to[1] = *to[2] = NAN;
      continue;
    }
    for (int q = 0; q < 3; q++)
      if (check(as_num(dig(p, "rms", name, stat[q], NULL), to[q]), "%s: %s.%lld: rms.%s.%s", where, kind,
                layer, name, stat[q]))
        return -1;
  }
  c->has = true;
  return 0;
}

// The classes at hidden.L (and res2.L where block L has an output norm) of an
// evaluation record: kept for the first evaluation and the latest.
static int class_spread_record(const cJSON *rec, const char *where, long long depth, run *r) {
  for (int pt = 0; pt <= (int)block_output_norm(r, depth); pt++) {
    class_spread *c = r->classes[pt];
    if (class_spread_of(rec, pt ? "res2" : "hidden", depth, where, &c[1])) return -1;
    if (r->rms_hidden.n == 0) c[0] = c[1];
  }
  return 0;
}

// The std over tokens at each layer of diag_final.json (after class_means).
static int layer_spreads(const cJSON *d, const char *path, run *r) {
  r->layer_hidden = ng_xmalloc(r->n_layers * sizeof(double));
  r->layer_res2 = ng_xmalloc(r->n_layers * sizeof(double));
  for (size_t l = 0; l < r->n_layers; l++) {
    r->layer_res2[l] = NAN;
    if (point_std(d, "hidden", (long long)l, path, &r->layer_hidden[l]) ||
        (block_output_norm(r, (long long)l) && point_std(d, "res2", (long long)l, path, &r->layer_res2[l])))
      return -1;
  }
  return 0;
}

// Over the token classes with tokens, but `without` (-1: none): the mean and
// the population variance of the per-token RMS of their tokens, from each
// class's count, mean and std (sum over classes of n_k (std_k^2 + (mean_k -
// mean)^2), over n); *n: their tokens.
static void pooled(const class_spread *c, int without, double *n, double *mean, double *var) {
  double count = 0.0, sum = 0.0, sq = 0.0;
  for (int k = 0; k < N_CLASSES; k++)
    if (k != without && c->count[k] > 0) {
      count += c->count[k];
      sum += c->count[k] * c->mean[k];
    }
  *n = count;
  *mean = count > 0 ? sum / count : NAN;
  for (int k = 0; k < N_CLASSES; k++)
    if (k != without && c->count[k] > 0) {
      double d = c->mean[k] - *mean;
      sq += c->count[k] * (c->std[k] * c->std[k] + d * d);
    }
  *var = count > 0 ? sq / count : NAN;
}

// What the class table shows of class k (N_CLASSES: all tokens) at one record.
typedef enum { CLASS_STD, CLASS_SHARE, CLASS_WITHOUT, CLASS_QUANTITIES } class_quantity;

// k's std; its share of the variance over all tokens (the variance of the
// classes pooled, its term n_k (std_k^2 + (mean_k - mean)^2) over n var); the
// std over the tokens of the other classes. NaN when there is none.
static double class_value(const class_spread *c, int k, class_quantity q) {
  double n, mean, var;
  bool all = k == N_CLASSES;
  if (!all && !(c->count[k] > 0)) return NAN;
  switch (q) {
    case CLASS_STD:
      if (!all) return c->std[k];
      pooled(c, -1, &n, &mean, &var);
      return sqrt(var);
    case CLASS_SHARE:
      pooled(c, -1, &n, &mean, &var);
      if (all) return 1.0;
      return c->count[k] * (c->std[k] * c->std[k] + (c->mean[k] - mean) * (c->mean[k] - mean)) / (n * var);
    case CLASS_WITHOUT:
      if (all) return NAN;
      pooled(c, k, &n, &mean, &var);
      return sqrt(var);
    case CLASS_QUANTITIES:
      break;
  }
  return NAN;
}

// ---------------------------------------------------------------- diag_final.json

// rms.<class>.mean of point p into *v: NaN when the class is absent (a file
// written before the class existed); -1 when it is not a number.
static int class_mean(const cJSON *p, ng_token_class k, double *v) {
  const cJSON *c = dig(p, "rms", ng_token_class_name(k), NULL);
  return c && as_num(dig(c, "mean", NULL), v) ? -1 : 0;
}

// Mean RMS per token class of the hidden and res2 points, by layer.
static int class_means(const cJSON *d, const char *path, run *r) {
  long long depth = 0;
  if (check(as_int(dig(d, "depth", NULL), &depth), "%s: depth", path)) return -1;
  if (depth > 1 << 16) return ng_fail("%s: depth %lld is not plausible", path, depth);
  r->n_layers = (size_t)depth + 1;
  size_t n = r->n_layers * N_CLASSES;
  r->class_hidden = ng_xmalloc(n * sizeof(double));
  r->class_res2 = ng_xmalloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) r->class_hidden[i] = r->class_res2[i] = NAN;
  for (long long l = 0; l <= depth; l++)
    for (int kind = 0; kind < 2; kind++) {
      const cJSON *p = find_point(d, kind ? "res2" : "hidden", l);
      double *to = (kind ? r->class_res2 : r->class_hidden) + (size_t)l * N_CLASSES;
      for (int k = 0; p && k < N_CLASSES; k++)
        if (class_mean(p, (ng_token_class)k, &to[k]))
          return check("expected a number", "%s: %s.%lld: rms.%s.mean", path, kind ? "res2" : "hidden", l,
                       ng_token_class_name((ng_token_class)k));
    }
  return 0;
}

static int load_ablation(const cJSON *a, const char *path, run *r) {
  const cJSON *blocks = dig(a, "blocks", NULL), *b;
  if (check(as_num(dig(a, "intact", "ce", NULL), &r->intact_ce), "%s: ablation.intact.ce", path)) return -1;
  if (!cJSON_IsArray(blocks)) return ng_fail("%s: ablation.blocks: expected an array", path);
  size_t n = (size_t)cJSON_GetArraySize(blocks), i = 0;
  r->block = ng_xcalloc(n, sizeof *r->block);
  r->skip_dce = ng_xcalloc(n, sizeof(double));
  r->norms_dce = ng_xcalloc(n, sizeof(double));
  r->has_ablation = true;
  cJSON_ArrayForEach(b, blocks) {
    const char *at = "%s: ablation.blocks[%zu].%s";
    if (check(as_int(dig(b, "block", NULL), &r->block[i]), at, path, i, "block") ||
        check(as_num(dig(b, "skip", "dce", NULL), &r->skip_dce[i]), at, path, i, "skip.dce") ||
        (block_output_norm(r, r->block[i]) &&
         check(as_num(dig(b, "norms_only", "dce", NULL), &r->norms_dce[i]), at, path, i, "norms_only.dce")))
      return -1;
    r->n_blocks = ++i;
  }
  return 0;
}

static int load_diag_final(const char *path, run *r) {
  cJSON *d;
  if (parse_json_file(path, &d)) return -1;
  const cJSON *ablation = dig(d, "ablation", NULL);
  int rc = class_means(d, path, r) || layer_spreads(d, path, r) ||
                   (ablation && load_ablation(ablation, path, r))
               ? -1
               : 0;
  r->has_final = true;
  cJSON_Delete(d);
  return rc;
}

// ---------------------------------------------------------------- runs

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static int load_run(const char *dir, run *r) {
  r->dir = ng_xstrdup(dir);
  char *config = ng_path_join(dir, "config.json"), *metrics = ng_path_join(dir, "metrics.jsonl");
  char *diag = ng_path_join(dir, "diag.jsonl"), *final = ng_path_join(dir, "diag_final.json");
  int rc = load_config(config, r) || parse_jsonl_file(metrics, metrics_record, r) ||
                   ng_rundir_read(dir, &r->state)
               ? -1
               : 0;
  ng_flatten_config(r->state.config, &r->settings);
  if (rc == 0 && r->val_ce.n == 0) rc = ng_fail("%s: no eval record", metrics);
  r->has_diag = rc == 0 && exists(diag);
  if (r->has_diag) rc = parse_jsonl_file(diag, diag_record, r);
  if (rc == 0 && exists(final)) rc = load_diag_final(final, r);
  free(config);
  free(metrics);
  free(diag);
  free(final);
  return rc;
}

static void run_free(run *r) {
  free(r->dir);
  free(r->name);
  free(r->mode);
  free(r->schedule);
  series_free(&r->val_ce);
  series_free(&r->ce_at_step);
  series_free(&r->stage_ends);
  series_free(&r->growth);
  series_free(&r->rms_hidden);
  series_free(&r->rms_res2);
  free(r->class_hidden);
  free(r->class_res2);
  free(r->growth_in);
  free(r->layer_hidden);
  free(r->layer_res2);
  free(r->block);
  free(r->skip_dce);
  free(r->norms_dce);
  ng_rundir_free(&r->state);
  ng_flat_config_free(&r->settings);
}

// The keys (run_dir and seed aside) in which two runs' configs differ, as
// "key (a / b), ..." in *out (malloc'd; "" when none).
static void config_difference(const run *a, const run *b, char **out) {
  size_t len;
  FILE *m = open_memstream(out, &len);
  NG_ASSERT(m);
  const ng_flat_config pair[2] = {a->settings, b->settings};
  int n = 0;
  for (int side = 0; side < 2; side++)
    for (size_t k = 0; k < pair[side].n; k++) {
      const char *key = pair[side].key[k];
      if (strcmp(key, "run_dir") == 0 || strcmp(key, "seed") == 0 || ng_flat_agree(pair, 2, key) ||
          (side == 1 && ng_flat_value(&pair[0], key)))  // named from the first side already
        continue;
      const char *va = ng_flat_value(&pair[0], key), *vb = ng_flat_value(&pair[1], key);
      if (n++ < 3) fprintf(m, "%s%s (%.40s / %.40s)", n > 1 ? ", " : "", key, va ? va : "absent", vb ? vb : "absent");
    }
  if (n > 3) fprintf(m, " and %d more", n - 3);
  fclose(m);
}

// Runs grouped by name, in the order their names first appear. The seeds of an
// arm agree in everything but seed and run_dir, and each seed is given once.
static int group_arms(report *rep) {
  rep->arms = ng_xcalloc(rep->n_runs, sizeof(arm));
  for (size_t i = 0; i < rep->n_runs; i++) {
    const run *r = &rep->runs[i];
    size_t a = 0;
    while (a < rep->n_arms && strcmp(rep->arms[a].runs[0]->name, r->name) != 0) a++;
    arm *g = &rep->arms[a];
    if (a == rep->n_arms) {
      g->runs = ng_xcalloc(rep->n_runs, sizeof(run *));
      rep->n_arms++;
    }
    for (size_t k = 0; k < g->n; k++) {
      if (g->runs[k]->placement != r->placement)
        return ng_fail("%s: arm \"%s\" is %s-norm here but %s-norm in %s", r->dir, r->name,
                       ng_norm_placement_name(r->placement),
                       ng_norm_placement_name(g->runs[k]->placement), g->runs[k]->dir);
      if (g->runs[k]->seed == r->seed)
        return ng_fail("%s: arm \"%s\" seed %lld is also in %s", r->dir, r->name, r->seed, g->runs[k]->dir);
    }
    char *diff = NULL;
    if (g->n) config_difference(g->runs[0], r, &diff);
    if (diff && *diff) {
      ng_fail("%s and %s are both arm \"%s\" but not seeds of one config: they differ in %s "
              "(give one another \"name\", or report them apart)",
              g->runs[0]->dir, r->dir, r->name, diff);
      free(diff);
      return -1;
    }
    free(diff);
    g->runs[g->n++] = r;
  }
  return 0;
}

// The validation settings in which the runs differ, for the flag atop the report.
static void check_eval_settings(report *rep) {
  static const char *const keys[] = {"data.val", "data.seq", "data.batch", "eval.batches",
                                     "teacher_cache.val", NULL};
  ng_flat_config *flat = ng_xcalloc(rep->n_runs, sizeof *flat);
  for (size_t i = 0; i < rep->n_runs; i++) flat[i] = rep->runs[i].settings;
  size_t len;
  FILE *m = open_memstream(&rep->eval_differs, &len);
  NG_ASSERT(m);
  for (int k = 0, n = 0; keys[k]; k++)
    if (!ng_flat_agree(flat, rep->n_runs, keys[k])) fprintf(m, "%s%s", n++ ? ", " : "", keys[k]);
  fclose(m);
  free(flat);
}

// ---------------------------------------------------------------- over seeds

// One value of a run (i: a block, or a layer * N_CLASSES + class); false when
// the run does not have it.
typedef bool (*run_value)(const run *r, size_t i, double *v);

typedef struct {
  double mean, std;  // std: sample (n - 1), NaN below 2 values
  size_t n;          // runs that have the value
} summary;

static summary over_seeds(const arm *a, run_value get, size_t i) {
  double v, sum = 0.0, sq = 0.0;
  size_t n = 0;
  for (size_t k = 0; k < a->n; k++)
    if (get(a->runs[k], i, &v)) {
      sum += v;
      n++;
    }
  double mean = n ? sum / (double)n : NAN;
  for (size_t k = 0; k < a->n; k++)
    if (get(a->runs[k], i, &v)) sq += (v - mean) * (v - mean);
  return (summary){mean, n > 1 ? sqrt(sq / (double)(n - 1)) : NAN, n};
}

static bool final_ce(const run *r, size_t i, double *v) {
  (void)i;
  *v = r->final.ce;
  return true;
}

static bool final_kd(const run *r, size_t i, double *v) {
  (void)i;
  *v = r->final.kd;
  return r->final.has_kd;
}

static bool teacher_ce(const run *r, size_t i, double *v) {
  (void)i;
  *v = r->final.teacher_ce;
  return r->final.has_kd;
}

// i: 0 hidden.L at the first evaluation, 1 at the last, 2 and 3 the same for res2.L.
static bool rms_spread(const run *r, size_t i, double *v) {
  const series *s = i < 2 ? &r->rms_hidden : &r->rms_res2;
  if (s->n == 0) return false;
  *v = s->y[i % 2 ? s->n - 1 : 0];
  return true;
}

static bool intact_ce(const run *r, size_t i, double *v) {
  (void)i;
  *v = r->intact_ce;
  return r->has_ablation;
}

static bool block_dce(const run *r, long long block, const double *dce, double *v) {
  for (size_t j = 0; j < r->n_blocks; j++)
    if (r->block[j] == block) {
      *v = dce[j];
      return true;
    }
  return false;
}

static bool skip_dce(const run *r, size_t block, double *v) {
  return block_dce(r, (long long)block, r->skip_dce, v);
}

static bool norms_dce(const run *r, size_t block, double *v) {
  return block_output_norm(r, (long long)block) && block_dce(r, (long long)block, r->norms_dce, v);
}

static bool class_hidden(const run *r, size_t i, double *v) {
  if (i >= r->n_layers * N_CLASSES) return false;
  *v = r->class_hidden[i];
  return true;
}

static bool class_res2(const run *r, size_t i, double *v) {
  if (!output_norm(r) || i >= r->n_layers * N_CLASSES) return false;
  *v = r->class_res2[i];
  return true;
}

// i: 3 g the spread at hidden.<b-1>, 3 g + 1 at res2.<b-1>, 3 g + 2 the mean
// RMS at hidden.<b-1>, b the new block of the g-th entry of growth_in.
static bool growth_input_std(const run *r, size_t i, double *v) {
  if (i / 3 >= r->n_growth_in) return false;
  const growth_input *g = &r->growth_in[i / 3];
  const double at[3] = {g->hidden, g->res2, g->hidden_mean};
  *v = at[i % 3];
  return i % 3 != 1 || block_output_norm(r, g->block - 1);
}

// i: 2 l the spread at hidden.l of diag_final.json, 2 l + 1 at res2.l.
static bool layer_std(const run *r, size_t i, double *v) {
  size_t l = i / 2;
  if (!r->layer_hidden || l >= r->n_layers || (i % 2 && !block_output_norm(r, (long long)l))) return false;
  *v = i % 2 ? r->layer_res2[l] : r->layer_hidden[l];
  return true;
}

// The index of class_cell: point pt (0 hidden.L, 1 res2.L), evaluation when (0
// first, 1 last), class k (N_CLASSES: all tokens), quantity q.
static size_t class_index(int pt, int when, int k, class_quantity q) {
  return ((size_t)(pt * 2 + when) * (N_CLASSES + 1) + (size_t)k) * CLASS_QUANTITIES + q;
}

static bool class_cell(const run *r, size_t i, double *v) {
  size_t rest = i / CLASS_QUANTITIES, k = rest % (N_CLASSES + 1);
  rest /= N_CLASSES + 1;
  if (rest >= 4) return false;
  const class_spread *c = &r->classes[rest / 2][rest % 2];
  if (!c->has) return false;
  *v = class_value(c, (int)k, (class_quantity)(i % CLASS_QUANTITIES));
  return isfinite(*v);
}

// Mean over the arm's runs that have the series (n > 0), at the x values of
// the first of them that all of them have (seeds evaluate at the same tokens).
static series mean_series(const arm *a, const series *(*get)(const run *)) {
  series out = {0};
  const series *ref = NULL;
  for (size_t k = 0; k < a->n && !ref; k++)
    if (get(a->runs[k])->n) ref = get(a->runs[k]);
  for (size_t i = 0; ref && i < ref->n; i++) {
    double sum = 0.0;
    size_t n = 0, runs = 0;
    for (size_t k = 0; k < a->n; k++) {
      const series *s = get(a->runs[k]);
      runs += s->n > 0;
      for (size_t j = 0; j < s->n; j++)
        if (s->x[j] == ref->x[i]) {
          sum += s->y[j];
          n++;
          break;
        }
    }
    if (n == runs) series_push(&out, ref->x[i], sum / (double)n);
  }
  return out;
}

static const series *val_ce_of(const run *r) { return &r->val_ce; }
static const series *rms_hidden_of(const run *r) { return &r->rms_hidden; }
static const series *rms_res2_of(const run *r) { return &r->rms_res2; }

// Union of the block numbers of every arm's ablation, ascending.
static size_t ablation_blocks(const report *rep, long long **out) {
  size_t n = 0, cap = 0;
  for (size_t i = 0; i < rep->n_runs; i++) cap += rep->runs[i].n_blocks;
  long long *b = ng_xcalloc(cap, sizeof *b);
  for (size_t i = 0; i < rep->n_runs; i++)
    for (size_t j = 0; j < rep->runs[i].n_blocks; j++) {
      long long v = rep->runs[i].block[j];
      size_t at = 0;
      while (at < n && b[at] < v) at++;
      if (at < n && b[at] == v) continue;
      memmove(b + at + 1, b + at, (n - at) * sizeof *b);
      b[at] = v;
      n++;
    }
  *out = b;
  return n;
}

// ---------------------------------------------------------------- report.md

static const char *arm_name(const arm *a) { return a->runs[0]->name; }
static const char *placement(const arm *a) { return ng_norm_placement_title(a->runs[0]->placement); }

static void put_seeds(FILE *f, const arm *a) {
  for (size_t k = 0; k < a->n; k++)
    fprintf(f, "%s%lld%s", k ? ", " : "", a->runs[k]->seed,
            a->runs[k]->state.finished ? "" : " (unfinished)");
}

// The mean (fmt), "n/a" when no run has the value.
static void put_mean(FILE *f, const char *fmt, summary s) {
  if (s.n == 0)
    fputs("n/a", f);
  else
    fprintf(f, fmt, s.mean);
}

// The mean, then "± std" when there are several seeds.
static void put_summary(FILE *f, const char *fmt, summary s) {
  put_mean(f, fmt, s);
  if (s.n > 1) {
    fputs(" ± ", f);
    fprintf(f, fmt, s.std);
  }
}

// 1.23e12: printf's %.2e without the exponent's sign and leading zeros.
static void put_sci(FILE *f, double v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.2e", v);
  char *e = strchr(buf, 'e');
  if (e) {
    *e = 0;
    fprintf(f, "%se%d", buf, atoi(e + 1));
  } else {
    fputs(buf, f);
  }
}

static bool any_run(const report *rep, bool (*has)(const run *)) {
  for (size_t i = 0; i < rep->n_runs; i++)
    if (has(&rep->runs[i])) return true;
  return false;
}

static bool distilled(const run *r) { return r->final.has_kd; }
static bool unfinished(const run *r) { return !r->state.finished; }
static bool lacks_diag(const run *r) { return !r->has_diag; }
static bool lacks_final(const run *r) { return !r->has_final; }
static bool lacks_ablation(const run *r) { return r->has_final && !r->has_ablation; }

// "<what>: `dir`, `dir`." for the runs that lack a file.
static void put_missing(FILE *f, const report *rep, bool (*lacks)(const run *), const char *what) {
  if (!any_run(rep, lacks)) return;
  fprintf(f, "\n%s:", what);
  for (size_t i = 0, k = 0; i < rep->n_runs; i++)
    if (lacks(&rep->runs[i])) fprintf(f, "%s `%s`", k++ ? "," : "", rep->runs[i].dir);
  fputs(".\n", f);
}

static void write_intro(FILE *f, const report *rep) {
  fprintf(f, "# normgrow report\n\nThis report compares %zu arm%s from %zu run director%s: ", rep->n_arms,
          rep->n_arms == 1 ? "" : "s", rep->n_runs, rep->n_runs == 1 ? "y" : "ies");
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    fprintf(f, "%s`%s` (%s, %s, %s, seed%s ",
            i == 0                 ? ""
            : i + 1 == rep->n_arms ? " and "
                                   : ", ",
            arm_name(a), placement(a), a->runs[0]->schedule, a->runs[0]->mode, a->n > 1 ? "s" : "");
    put_seeds(f, a);
    fputc(')', f);
  }
  fputs(
      ". Final values are those of the last evaluation record of each run's metrics.jsonl. "
      "Where an arm has several seeds, a value is their mean, shown ± their sample standard "
      "deviation (n − 1) in the arms table. CE is in nats per token; stages are numbered from 1.\n\n"
      "Run directories:",
      f);
  for (size_t i = 0; i < rep->n_runs; i++) fprintf(f, "%s `%s`", i ? "," : "", rep->runs[i].dir);
  fputs(".\n", f);
  if (*rep->eval_differs)
    fprintf(f,
            "\n**Warning: the runs were not evaluated alike.** They differ in %s, so their "
            "validation CE (and KD, and the teacher's CE) are measured on different data or "
            "windows and are not comparable as they stand.\n",
            rep->eval_differs);
  for (size_t i = 0; i < rep->n_runs; i++) {
    const run *r = &rep->runs[i];
    if (unfinished(r))
      fprintf(f,
              "\n**Unfinished:** `%s` stopped at step %lld of %lld; its values are those of its "
              "last evaluation (at %.0f tokens), not final ones.\n",
              r->dir, (long long)r->state.last_step, (long long)r->state.steps_total, r->final.tokens);
  }
  if (rep->n_skipped) {
    fputs("\nNot run directories (no run config.json), left out:", f);
    for (size_t i = 0; i < rep->n_skipped; i++) fprintf(f, "%s `%s`", i ? "," : "", rep->skipped[i]);
    fputs(".\n", f);
  }
}

static void write_arms(FILE *f, const report *rep) {
  bool kd = any_run(rep, distilled);
  fprintf(f,
          "\n## Arms\n\n| arm | placement | schedule | seeds | final val CE |%s tokens | layer-tokens | "
          "FLOPs |\n|---|---|---|---|---:|%s---:|---:|---:|\n",
          kd ? " final val KD | teacher CE |" : "", kd ? "---:|---:|" : "");
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    const final_eval *fe = &a->runs[0]->final;
    fprintf(f, "| %s | %s | %s | ", arm_name(a), placement(a), a->runs[0]->schedule);
    put_seeds(f, a);
    fputs(" | ", f);
    put_summary(f, "%.4f", over_seeds(a, final_ce, 0));
    if (kd) {
      fputs(" | ", f);
      put_summary(f, "%.4f", over_seeds(a, final_kd, 0));
      fputs(" | ", f);
      put_summary(f, "%.4f", over_seeds(a, teacher_ce, 0));
    }
    fprintf(f, " | %.0f | %.0f | ", fe->tokens, fe->layer_tokens);
    put_sci(f, fe->flops);
    fputs(" |\n", f);
  }
  fputs(
      "\nTokens, layer-tokens (tokens times active blocks, summed over steps) and FLOPs are the "
      "training totals of one run of the arm (its first seed) at its final evaluation. "
      "LR restarts name the stages that start the learning-rate schedule anew.\n",
      f);
}

static bool final_tokens(const run *r, size_t i, double *v) {
  (void)i;
  *v = r->final.tokens;
  return true;
}

static bool final_layer_tokens(const run *r, size_t i, double *v) {
  (void)i;
  *v = r->final.layer_tokens;
  return true;
}

static bool final_flops(const run *r, size_t i, double *v) {
  (void)i;
  *v = r->final.flops;
  return true;
}

// The arm the accounting is measured against: of the fixed-depth arms
// (schedule_of's "fixed D"), the first with the fewest tokens (the joint arm
// among the study's, in either reading); without one, the first arm.
static const arm *accounting_reference(const report *rep) {
  const arm *ref = NULL;
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    if (strncmp(a->runs[0]->schedule, "fixed", 5) == 0 &&
        (!ref || over_seeds(a, final_tokens, 0).mean < over_seeds(ref, final_tokens, 0).mean))
      ref = a;
  }
  return ref ? ref : &rep->arms[0];
}

// One accounting cell: the mean over seeds, then its ratio to the reference's.
static void put_count_ratio(FILE *f, const arm *a, const arm *ref, run_value get, bool sci) {
  summary s = over_seeds(a, get, 0), r = over_seeds(ref, get, 0);
  if (sci)
    put_sci(f, s.mean);
  else
    fprintf(f, "%.0f", s.mean);
  fprintf(f, " | %.2f | ", s.mean / r.mean);
}

// Tokens, layer-tokens and FLOPs per arm against a fixed-depth arm: which
// token accounting the runs follow (docs/assumptions.md, "tokens per arm").
static void write_accounting(FILE *f, const report *rep) {
  const arm *ref = accounting_reference(rep);
  fprintf(f,
          "\n## Token accounting\n\nTraining totals at each arm's final evaluation (mean over seeds), "
          "and each as a multiple of the reference arm's, `%s` (%s): the first fixed-depth arm with the fewest tokens. Layer-tokens: tokens times the blocks they pass "
          "through, summed over steps. FLOPs: forward and backward of the student plus the teacher's "
          "forward where the teacher runs (not from a top-k cache), by the rule of `normgrow plan` "
          "(plan.h); evaluation and diagnostics are not counted. Reading A: every arm has the same "
          "tokens, so growth has fewer layer-tokens and FLOPs than joint training; reading B: each "
          "growth stage has the joint arm's tokens, so growth has more, and the controls are sized "
          "to it.\n\n| arm | schedule | tokens | tokens / ref | layer-tokens | layer-tokens / ref | FLOPs | "
          "FLOPs / ref | FLOPs per token |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
          arm_name(ref), ref->runs[0]->schedule);
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    fprintf(f, "| %s | %s | ", arm_name(a), a->runs[0]->schedule);
    put_count_ratio(f, a, ref, final_tokens, false);
    put_count_ratio(f, a, ref, final_layer_tokens, false);
    put_count_ratio(f, a, ref, final_flops, true);
    put_sci(f, over_seeds(a, final_flops, 0).mean / over_seeds(a, final_tokens, 0).mean);
    fputs(" |\n", f);
  }
}

static void write_pairwise(FILE *f, const report *rep) {
  fputs(
      "\n## Differences in final validation CE\n\nRow arm minus column arm, of the mean final "
      "validation CE over seeds (negative: the row arm ends lower).",
      f);
  bool seeds = false;
  for (size_t i = 0; i < rep->n_arms; i++) seeds |= rep->arms[i].n > 1;
  if (seeds)
    fputs(" Where an arm has several seeds: the larger of the two arms' standard deviations over seeds.", f);
  fputs("\n\n| row − column |", f);
  for (size_t j = 0; j < rep->n_arms; j++) fprintf(f, " %s |", arm_name(&rep->arms[j]));
  fputs("\n|---|", f);
  for (size_t j = 0; j < rep->n_arms; j++) fputs("---:|", f);
  for (size_t i = 0; i < rep->n_arms; i++) {
    summary r = over_seeds(&rep->arms[i], final_ce, 0);
    fprintf(f, "\n| %s |", arm_name(&rep->arms[i]));
    for (size_t j = 0; j < rep->n_arms; j++) {
      summary c = over_seeds(&rep->arms[j], final_ce, 0);
      if (i == j) {
        fputs(" — |", f);
        continue;
      }
      fprintf(f, " %+.4f", r.mean - c.mean);
      if (r.n > 1 || c.n > 1) fprintf(f, " (max std %.4f)", fmax(r.std, c.std));  // fmax skips a NaN
      fputs(" |", f);
    }
  }
  fputs("\n", f);
}

// ---------------------------------------------------------------- where stages change

// A column of the stage table: a step that is the last evaluation of some
// run's stage (end) and/or the first evaluation of its next stage (after).
typedef struct {
  long long step;
  bool end, after;
} stage_column;

static int cmp_column(const void *a, const void *b) {
  long long x = ((const stage_column *)a)->step, y = ((const stage_column *)b)->step;
  return (x > y) - (x < y);
}

// Every run's stage ends and first evaluations after them, sorted by step,
// each step once; *n their count (0: no run changes stage).
static stage_column *stage_columns(const report *rep, size_t *n) {
  size_t m = 0, u = 0;
  for (size_t i = 0; i < rep->n_runs; i++) m += 2 * rep->runs[i].stage_ends.n;
  stage_column *c = ng_xcalloc(m ? m : 1, sizeof *c);
  m = 0;
  for (size_t i = 0; i < rep->n_runs; i++) {
    const series *e = &rep->runs[i].stage_ends;
    for (size_t k = 0; k < e->n; k++) {
      c[m++] = (stage_column){(long long)e->x[k], true, false};
      c[m++] = (stage_column){(long long)e->y[k], false, true};
    }
  }
  qsort(c, m, sizeof *c, cmp_column);
  for (size_t k = 0; k < m; k++) {
    if (u && c[u - 1].step == c[k].step) {
      c[u - 1].end |= c[k].end;
      c[u - 1].after |= c[k].after;
    } else {
      c[u++] = c[k];
    }
  }
  *n = u;
  return c;
}

// The run's validation CE at the evaluation of step `step`.
static bool ce_at(const run *r, size_t step, double *v) {
  for (size_t k = 0; k < r->ce_at_step.n; k++)
    if (r->ce_at_step.x[k] == (double)step) {
      *v = r->ce_at_step.y[k];
      return true;
    }
  return false;
}

// Every arm at the steps where a staged arm (growth, LR restarts) changes
// stage; nothing when no run does.
static void write_stage_ce(FILE *f, const report *rep) {
  size_t n;
  stage_column *c = stage_columns(rep, &n);
  if (n) {
    fputs("\n## Validation CE where stages change\n\nValidation CE of every arm (mean over seeds, "
          "± std where it has several) at the steps where a staged arm's stage ends (end: the "
          "stage's last evaluation, before its growth or LR restart) and at the first evaluation "
          "of the next stage (after). n/a: the arm has no evaluation at that step.\n\n| arm |",
          f);
    for (size_t k = 0; k < n; k++)
      fprintf(f, " step %lld (%s) |", c[k].step,
              c[k].end && c[k].after ? "after, end" : c[k].end ? "end" : "after");
    fputs("\n|---|", f);
    for (size_t k = 0; k < n; k++) fputs("---:|", f);
    for (size_t i = 0; i < rep->n_arms; i++) {
      fprintf(f, "\n| %s |", arm_name(&rep->arms[i]));
      for (size_t k = 0; k < n; k++) {
        fputs(" ", f);
        put_summary(f, "%.4f", over_seeds(&rep->arms[i], ce_at, (size_t)c[k].step));
        fputs(" |", f);
      }
    }
    fputs("\n", f);
  }
  free(c);
}

static void write_rms_spread(FILE *f, const report *rep) {
  fputs(
      "\n## Residual RMS spread\n\nStandard deviation over tokens of the per-token RMS (all tokens) "
      "at hidden.L, the output of the last block (L: the depth at that evaluation), at the first "
      "and the last evaluation of diag.jsonl; for arms whose last block ends in a norm (post, deepnorm, "
      "mixln while L <= P) also at res2.L, the sum before that norm (hidden.L is pinned by the norm, "
      "res2.L is not). Mean over "
      "seeds.\n\n| arm | placement | L first → last | hidden.L first | hidden.L last | res2.L first | "
      "res2.L last |\n|---|---|---|---:|---:|---:|---:|\n",
      f);
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    const run *d = NULL;
    for (size_t k = 0; k < a->n && !d; k++)
      if (a->runs[k]->has_diag && a->runs[k]->rms_hidden.n) d = a->runs[k];
    fprintf(f, "| %s | %s | ", arm_name(a), placement(a));
    if (d)
      fprintf(f, "%lld → %lld", d->depth_first, d->depth_last);
    else
      fputs("n/a", f);
    for (size_t k = 0; k < 4; k++) {
      fputs(" | ", f);
      put_mean(f, "%.4g", over_seeds(a, rms_spread, k));
    }
    fputs(" |\n", f);
  }
  put_missing(f, rep, lacks_diag, "No diag.jsonl (left out of the means above) in");
}

// The first run of the arm that has growth inputs, or NULL.
static const run *with_growth_inputs(const arm *a) {
  for (size_t k = 0; k < a->n; k++)
    if (a->runs[k]->n_growth_in) return a->runs[k];
  return NULL;
}

static void write_growth_inputs(FILE *f, const report *rep) {
  fputs(
      "\n## RMS spread of the stream each new block receives\n\nAt each growth, the standard "
      "deviation over tokens of the per-token RMS of the stream a new block b starts from: "
      "hidden.(b−1) of the grown model before any step at its new depth (the growth records of "
      "diag.jsonl); for Post-Norm arms also res2.(b−1), the same stream before the norm that ends "
      "block b−1 (none for b = 1, whose input is the embedding); and the mean per-token RMS of "
      "hidden.(b−1), the scale the spread is relative to. Where new blocks are stacked, the higher "
      "one's input is the lower one's output (the same stream while the lower one's growth gate is "
      "0; its res2 is then that block's own sum, which the gate leaves out). Mean over seeds. The "
      "same spread at the "
      "last block's output over training is the table above and rms_std.png.\n\n"
      "| arm | placement | step | tokens | depth | new block | hidden std | res2 std | hidden mean |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
      f);
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    const run *r = with_growth_inputs(a);
    for (size_t g = 0; r && g < r->n_growth_in; g++) {
      const growth_input *in = &r->growth_in[g];
      fprintf(f, "| %s | %s | %lld | %.0f | %lld | %lld | ", arm_name(a), placement(a), in->step, in->tokens,
              in->depth, in->block);
      for (size_t k = 0; k < 3; k++) {
        put_mean(f, "%.4g", over_seeds(a, growth_input_std, 3 * g + k));
        fputs(k < 2 ? " | " : " |\n", f);
      }
    }
  }
  fputs("\nArms that do not grow, or whose diag.jsonl has no growth record, have no row.\n", f);
}

static void write_layer_spreads(FILE *f, const report *rep) {
  size_t n_layers = 0;
  for (size_t i = 0; i < rep->n_runs; i++)
    if (rep->runs[i].layer_hidden && rep->runs[i].n_layers > n_layers) n_layers = rep->runs[i].n_layers;
  fputs(
      "\n## RMS spread per layer at the end\n\nStandard deviation over tokens of the per-token "
      "RMS at each layer's output (hidden.l; l = 0: the embeddings) of the final model "
      "(diag_final.json), and for Post-Norm arms at res2.l, the sum before the norm that ends "
      "block l. Mean over seeds.\n\n| arm | point |",
      f);
  for (size_t l = 0; l < n_layers; l++) fprintf(f, " layer %zu |", l);
  fputs("\n|---|---|", f);
  for (size_t l = 0; l < n_layers; l++) fputs("---:|", f);
  fputc('\n', f);
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    for (int res2 = 0; res2 <= (int)output_norm(a->runs[0]); res2++) {
      fprintf(f, "| %s | %s |", arm_name(a), res2 ? "res2.l" : "hidden.l");
      for (size_t l = 0; l < n_layers; l++) {
        fputc(' ', f);
        put_mean(f, "%.4g", over_seeds(a, layer_std, 2 * l + (size_t)res2));
        fputs(" |", f);
      }
      fputc('\n', f);
    }
  }
  put_missing(f, rep, lacks_final, "No diag_final.json in");
}

static void write_class_spreads(FILE *f, const report *rep) {
  fputs(
      "\n## RMS spread by token class\n\nWhere the spread at the last block's output sits, at the "
      "first and the last evaluation of diag.jsonl (hidden.L; Post-Norm also res2.L). Per token "
      "class: the std over its tokens of the per-token RMS; its share of the variance over all "
      "tokens (n_k (std_k² + (mean_k − mean)²) / (n var), the shares sum to 1); and the std over "
      "the tokens of the other classes, the spread without it. The all-tokens row is pooled from "
      "the classes' counts, means and stds. The last column, the spread without the class over "
      "the spread with it at the last evaluation, is one number for how much of the spread the "
      "class carries (near 0: nearly all of it; 1: none). Mean over seeds.\n\n"
      "| arm | point | class | std first | std last | share first | share last | std without first | "
      "std without last | without / all, last |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
      f);
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    for (int pt = 0; pt <= (int)output_norm(a->runs[0]); pt++)
      for (int j = 0; j <= N_CLASSES; j++) {
        int k = j == 0 ? N_CLASSES : j - 1;  // all tokens first
        fprintf(f, "| %s | %s | %s |", arm_name(a), pt ? "res2.L" : "hidden.L",
                k == N_CLASSES ? "all tokens" : ng_token_class_name((ng_token_class)k));
        static const struct {
          class_quantity q;
          const char *fmt;
        } cols[3] = {{CLASS_STD, "%.4g"}, {CLASS_SHARE, "%.3f"}, {CLASS_WITHOUT, "%.4g"}};
        for (int c = 0; c < 3; c++)
          for (int when = 0; when < 2; when++) {
            fputc(' ', f);
            put_mean(f, cols[c].fmt, over_seeds(a, class_cell, class_index(pt, when, k, cols[c].q)));
            fputs(" |", f);
          }
        summary without = over_seeds(a, class_cell, class_index(pt, 1, k, CLASS_WITHOUT));
        summary all = over_seeds(a, class_cell, class_index(pt, 1, N_CLASSES, CLASS_STD));
        fputc(' ', f);
        put_mean(f, "%.3f", (summary){without.mean / all.mean, NAN, without.n && all.n});
        fputs(" |\n", f);
      }
  }
  put_missing(f, rep, lacks_diag, "No diag.jsonl in");
}

// Every reading of the spread besides the last block's output over training.
static void write_rms_readings(FILE *f, const report *rep) {
  write_growth_inputs(f, rep);
  write_layer_spreads(f, rep);
  write_class_spreads(f, rep);
}

// The smallest finite mean ΔCE over the blocks and its block, "n/a" when none.
static void put_min_over_blocks(FILE *f, const arm *a, run_value dce, const long long *blocks, size_t nb) {
  double best = NAN;
  long long at = 0;
  for (size_t j = 0; j < nb; j++) {
    summary s = over_seeds(a, dce, (size_t)blocks[j]);
    if (s.n && isfinite(s.mean) && (at == 0 || s.mean < best)) {  // the first minimum, NaN left out
      best = s.mean;
      at = blocks[j];
    }
  }
  if (at == 0) {
    fputs("n/a", f);
  } else {
    fprintf(f, "%+.4f (block %lld)", best, at);
  }
}

// The deepest layer any run of the arm has in diag_final.json (0: none).
static size_t final_depth(const arm *a) {
  size_t n = 0;
  for (size_t k = 0; k < a->n; k++)
    if (a->runs[k]->n_layers > n) n = a->runs[k]->n_layers;
  return n ? n - 1 : 0;
}

// Mean per-token RMS by token class at the last block's output (and, Post-Norm,
// before its last norm), from diag_final.json: where the largest states sit.
static void write_class_means(FILE *f, const report *rep) {
  fputs("\n## Residual RMS by token class\n\nMean per-token RMS at hidden.L, the last block's output "
        "(diag_final.json, L the final depth), by token class, mean over seeds; Post-Norm arms also at "
        "res2.L, before the last norm. Classes: window_start, the first position of each window (where "
        "attention sinks sit); the document separator; the first token after one; structural (the "
        "config's structural_tokens); ordinary. n/a: no token of the class, or a file without it.\n\n"
        "| arm | point |",
        f);
  for (int k = 0; k < N_CLASSES; k++) fprintf(f, " %s |", ng_token_class_name((ng_token_class)k));
  fputs("\n|---|---|", f);
  for (int k = 0; k < N_CLASSES; k++) fputs("---:|", f);
  fputc('\n', f);
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    size_t L = final_depth(a);
    if (L == 0) continue;
    for (int res2 = 0; res2 <= (int)output_norm(a->runs[0]); res2++) {
      fprintf(f, "| %s | %s.%zu |", arm_name(a), res2 ? "res2" : "hidden", L);
      for (int k = 0; k < N_CLASSES; k++) {
        summary s = over_seeds(a, res2 ? class_res2 : class_hidden, L * N_CLASSES + (size_t)k);
        fputc(' ', f);
        if (s.n && isfinite(s.mean))
          fprintf(f, "%.4g", s.mean);
        else
          fputs("n/a", f);
        fputs(" |", f);
      }
      fputc('\n', f);
    }
  }
  put_missing(f, rep, lacks_final, "No diag_final.json in");
}

static void write_ablation(FILE *f, const report *rep) {
  fputs(
      "\n## Block-removal ablation\n\nΔCE: validation CE with one block removed minus the intact "
      "model's (diag_final.json), mean over seeds. The two removals differ for blocks with an output "
      "norm (post, deepnorm, mixln's post blocks), whose norms act on the residual stream itself:\n\n"
      "- **skip**: the block is skipped together with its norms (the block becomes the identity).\n"
      "- **norms_only** (blocks with an output norm only): the block's attention and MLP are zeroed "
      "and its norms kept, so the block still returns Norm(alpha Norm(alpha x)) (alpha 1 but for "
      "deepnorm).\n\nmin over blocks: the smallest ΔCE of the row (mean over seeds) and its block: the "
      "least any one block's removal costs.\n\n| arm | removal | intact CE |",
      f);
  long long *blocks;
  size_t nb = ablation_blocks(rep, &blocks);
  for (size_t j = 0; j < nb; j++) fprintf(f, " block %lld |", blocks[j]);
  fputs(" min over blocks |\n|---|---|---:|", f);
  for (size_t j = 0; j <= nb; j++) fputs("---:|", f);
  fputc('\n', f);
  for (size_t i = 0; i < rep->n_arms; i++) {
    const arm *a = &rep->arms[i];
    for (int norms = 0; norms <= (int)output_norm(a->runs[0]); norms++) {
      fprintf(f, "| %s | %s | ", arm_name(a),
              norms ? "norms_only (F zeroed, norms kept)" : "skip (block and norms removed)");
      put_mean(f, "%.4f", over_seeds(a, intact_ce, 0));
      for (size_t j = 0; j < nb; j++) {
        fputs(" | ", f);
        put_mean(f, "%+.4f", over_seeds(a, norms ? norms_dce : skip_dce, (size_t)blocks[j]));
      }
      fputs(" | ", f);
      put_min_over_blocks(f, a, norms ? norms_dce : skip_dce, blocks, nb);
      fputs(" |\n", f);
    }
  }
  free(blocks);
  put_missing(f, rep, lacks_final, "No diag_final.json in");
  put_missing(f, rep, lacks_ablation, "No ablation in the diag_final.json of");
}

typedef struct {
  const char *file, *alt, *caption;
} figure;

static const figure figures[] = {
    {"val_ce.png", "Validation CE over training tokens",
     "Validation CE (nats per token) over training tokens, one line per arm (mean over seeds at each "
     "evaluation). Dotted vertical lines in an arm's colour: its growth steps (the tokens of its "
     "growth records), labelled with the depth grown to."},
    {"rms_std.png", "Std of per-token RMS at hidden.L over training",
     "Standard deviation over tokens of the per-token residual RMS at hidden.L (solid; the last "
     "block's output, L the depth at that evaluation) over training tokens, per arm (mean over "
     "seeds); arms whose last block ends in a norm also at res2.L (dashed), the sum before that "
     "norm. Log scale."},
    {"rms_by_class.png", "Mean RMS per layer by token class",
     "Mean per-token RMS at hidden.l for each layer l (0: the embeddings) by token class "
     "(first position of a window, separator, first token after a separator, structural, ordinary), "
     "from diag_final.json, one panel per arm (mean over seeds); blocks with an output norm also "
     "show res2.l (dashed). Log scale."},
    {"rms_readings.png", "Std of per-token RMS at each new block's input and per layer",
     "Left: the standard deviation over tokens of the per-token RMS of the stream each new block "
     "starts from, at each growth (the growth records of diag.jsonl), per arm (mean over seeds). "
     "Right: the same at each layer of the final model (diag_final.json). Solid: hidden; dashed "
     "(blocks with an output norm): res2, before the norm. Log scale."},
    {"ablation.png", "ΔCE per removed block",
     "ΔCE when one block is removed, per block and arm (mean over seeds): skip (plain bars) and, for "
     "blocks with an output norm, norms_only (hatched bars)."},
};
#define N_FIGURES (sizeof figures / sizeof figures[0])

static void write_plots(FILE *f, const report *rep) {
  fputs("\n## Plots\n", f);
  if (rep->plots_skipped) {
    fprintf(f,
            "\nThe plots were skipped: %s. Their series are in report-data.json; to draw them: "
            "`python3 tools/plot_report.py %s/report-data.json %s`.\n",
            rep->plots_skipped, rep->out_dir, rep->out_dir);
    return;
  }
  for (size_t i = 0; i < N_FIGURES; i++)
    fprintf(f, "\n![%s](%s)\n\n*%s: %s*\n", figures[i].alt, figures[i].file, figures[i].file,
            figures[i].caption);
}

// ng_write_fn: report.md, section by section (ctx is the report).
static bool write_report_md(FILE *f, void *ctx) {
  const report *rep = ctx;
  write_intro(f, rep);
  write_arms(f, rep);
  write_accounting(f, rep);
  write_pairwise(f, rep);
  write_stage_ce(f, rep);
  write_rms_spread(f, rep);
  write_class_means(f, rep);
  write_rms_readings(f, rep);
  write_ablation(f, rep);
  write_plots(f, rep);
  return !ferror(f);
}

static int write_report(const report *rep) {
  char *path = ng_path_join(rep->out_dir, "report.md");
  int rc = ng_write_atomic(path, write_report_md, (void *)rep);  // only read
  free(path);
  return rc;
}

// ---------------------------------------------------------------- report-data.json

static cJSON *numbers(const double *v, size_t n) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++)
    cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
  return a;
}

// {"tokens": [...], "mean": [...]}: the mean over seeds of one series.
static cJSON *series_json(const arm *a, const series *(*get)(const run *)) {
  series s = mean_series(a, get);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "tokens", numbers(s.x, s.n));
  cJSON_AddItemToObject(o, "mean", numbers(s.y, s.n));
  series_free(&s);
  return o;
}

// {class: [mean RMS per layer]} over seeds.
static cJSON *classes_json(const arm *a, run_value get, size_t n_layers) {
  cJSON *o = cJSON_CreateObject();
  double *v = ng_xcalloc(n_layers, sizeof(double));
  for (size_t k = 0; k < N_CLASSES; k++) {
    for (size_t l = 0; l < n_layers; l++) {
      summary s = over_seeds(a, get, l * N_CLASSES + k);
      v[l] = s.n ? s.mean : NAN;
    }
    cJSON_AddItemToObject(o, ng_token_class_name((ng_token_class)k), numbers(v, n_layers));
  }
  free(v);
  return o;
}

// {"layers": [0..L], "hidden": classes, "res2": classes (with output norms)}, or null.
static cJSON *by_class_json(const arm *a) {
  size_t n_layers = 0;
  for (size_t k = 0; k < a->n; k++)
    if (a->runs[k]->n_layers > n_layers) n_layers = a->runs[k]->n_layers;
  if (n_layers == 0) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject(), *layers = cJSON_AddArrayToObject(o, "layers");
  for (size_t l = 0; l < n_layers; l++) cJSON_AddItemToArray(layers, cJSON_CreateNumber((double)l));
  cJSON_AddItemToObject(o, "hidden", classes_json(a, class_hidden, n_layers));
  if (output_norm(a->runs[0])) cJSON_AddItemToObject(o, "res2", classes_json(a, class_res2, n_layers));
  return o;
}

// {"blocks": [...], "skip": [ΔCE], "norms_only": [ΔCE] (with output norms)}, or null.
static cJSON *ablation_json(const arm *a) {
  const run *r = NULL;
  for (size_t k = 0; k < a->n && !r; k++)
    if (a->runs[k]->has_ablation) r = a->runs[k];
  if (!r) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject(), *blocks = cJSON_AddArrayToObject(o, "blocks");
  double *v = ng_xcalloc(r->n_blocks, sizeof(double));
  for (size_t j = 0; j < r->n_blocks; j++)
    cJSON_AddItemToArray(blocks, cJSON_CreateNumber((double)r->block[j]));
  for (int norms = 0; norms <= (int)output_norm(r); norms++) {
    for (size_t j = 0; j < r->n_blocks; j++)
      v[j] = over_seeds(a, norms ? norms_dce : skip_dce, (size_t)r->block[j]).mean;
    cJSON_AddItemToObject(o, norms ? "norms_only" : "skip", numbers(v, r->n_blocks));
  }
  free(v);
  return o;
}

// {"step": [...], "block": [...], "hidden": [std], "res2": [std] (Post-Norm)}:
// the spread at each new block's input (mean over seeds), or null.
static cJSON *growth_inputs_json(const arm *a) {
  const run *r = with_growth_inputs(a);
  if (!r) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject(), *step = cJSON_AddArrayToObject(o, "step"),
        *block = cJSON_AddArrayToObject(o, "block");
  double *v = ng_xcalloc(r->n_growth_in, sizeof(double));
  for (size_t g = 0; g < r->n_growth_in; g++) {
    cJSON_AddItemToArray(step, cJSON_CreateNumber((double)r->growth_in[g].step));
    cJSON_AddItemToArray(block, cJSON_CreateNumber((double)r->growth_in[g].block));
  }
  for (int res2 = 0; res2 <= (int)output_norm(r); res2++) {
    for (size_t g = 0; g < r->n_growth_in; g++) {
      summary s = over_seeds(a, growth_input_std, 3 * g + (size_t)res2);
      v[g] = s.n ? s.mean : NAN;
    }
    cJSON_AddItemToObject(o, res2 ? "res2" : "hidden", numbers(v, r->n_growth_in));
  }
  free(v);
  return o;
}

// {"layers": [0..L], "hidden": [std], "res2": [std] (Post-Norm)}: the spread at
// each layer of diag_final.json (mean over seeds), or null.
static cJSON *layer_spreads_json(const arm *a) {
  size_t n_layers = 0;
  for (size_t k = 0; k < a->n; k++)
    if (a->runs[k]->layer_hidden && a->runs[k]->n_layers > n_layers) n_layers = a->runs[k]->n_layers;
  if (n_layers == 0) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject(), *layers = cJSON_AddArrayToObject(o, "layers");
  double *v = ng_xcalloc(n_layers, sizeof(double));
  for (size_t l = 0; l < n_layers; l++) cJSON_AddItemToArray(layers, cJSON_CreateNumber((double)l));
  for (int res2 = 0; res2 <= (int)output_norm(a->runs[0]); res2++) {
    for (size_t l = 0; l < n_layers; l++) {
      summary s = over_seeds(a, layer_std, 2 * l + (size_t)res2);
      v[l] = s.n ? s.mean : NAN;
    }
    cJSON_AddItemToObject(o, res2 ? "res2" : "hidden", numbers(v, n_layers));
  }
  free(v);
  return o;
}

static cJSON *arm_json(const arm *a) {
  const run *r = a->runs[0];
  cJSON *o = cJSON_CreateObject(), *seeds = cJSON_AddArrayToObject(o, "seeds");
  cJSON_AddStringToObject(o, "name", r->name);
  cJSON_AddStringToObject(o, "placement", ng_norm_placement_name(r->placement));
  cJSON_AddStringToObject(o, "schedule", r->schedule);
  for (size_t k = 0; k < a->n; k++) cJSON_AddItemToArray(seeds, cJSON_CreateNumber((double)a->runs[k]->seed));
  cJSON_AddItemToObject(o, "val_ce", series_json(a, val_ce_of));
  cJSON *growth = cJSON_AddObjectToObject(o, "growth");  // of its first run
  cJSON_AddItemToObject(growth, "tokens", numbers(r->growth.x, r->growth.n));
  cJSON_AddItemToObject(growth, "depth", numbers(r->growth.y, r->growth.n));
  cJSON *rms = cJSON_AddObjectToObject(o, "rms_std");
  cJSON_AddItemToObject(rms, "hidden", series_json(a, rms_hidden_of));
  if (output_norm(r)) cJSON_AddItemToObject(rms, "res2", series_json(a, rms_res2_of));
  cJSON_AddItemToObject(o, "rms_by_class", by_class_json(a));
  cJSON_AddItemToObject(o, "ablation", ablation_json(a));
  cJSON_AddItemToObject(o, "rms_growth_inputs", growth_inputs_json(a));
  cJSON_AddItemToObject(o, "rms_layers", layer_spreads_json(a));
  return o;
}

// The series of the plots, one object per arm (mean over seeds); see plot_report.py.
static int write_plot_data(const report *rep) {
  cJSON *root = cJSON_CreateObject(), *arms = cJSON_AddArrayToObject(root, "arms");
  for (size_t i = 0; i < rep->n_arms; i++) cJSON_AddItemToArray(arms, arm_json(&rep->arms[i]));
  char *text = ng_json_print(root, true), *path = ng_path_join(rep->out_dir, "report-data.json");
  int rc = ng_write_text_atomic(path, text);
  free(path);
  free(text);
  cJSON_Delete(root);
  return rc;
}

// ---------------------------------------------------------------- plots

// tools/plot_report.py: in $NG_TOOLS, else in the nearest directory above the
// executable that has it (build/normgrow -> tools/plot_report.py).
static char *find_plot_script(void) {
  const char *env = getenv("NG_TOOLS");
  if (env && *env) return ng_path_join(env, "plot_report.py");
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  for (char *slash; (slash = strrchr(exe, '/')) != NULL;) {
    *slash = 0;
    char *path = ng_path_join(exe, "tools/plot_report.py");
    if (exists(path)) return path;
    free(path);
  }
  return NULL;
}

// Runs argv (argv[0] looked up on PATH) with its stdout and stderr in *output;
// *status: its exit status, 128 + the signal that ended it. Returns 0, or the
// errno of what failed (ENOENT: no such program) after ng_fail.
static int run_captured(char *const argv[], char **output, int *status) {
  int fd[2];
  if (pipe(fd) != 0) {
    int err = errno;
    ng_fail("pipe: %s", strerror(err));
    return err;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&fa, fd[0]);
  posix_spawn_file_actions_addclose(&fa, fd[1]);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (err != 0) {
    close(fd[0]);
    ng_fail("%s: %s", argv[0], strerror(err));
    return err;
  }
  FILE *f = fdopen(fd[0], "r");
  NG_ASSERT(f);
  slurp(f, output);
  fclose(f);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      err = errno;
      ng_fail("%s: waitpid: %s", argv[0], strerror(err));
      return err;
    }
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return 0;
}

// The last non-empty line of text (cut in place).
static const char *last_line(char *text) {
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) text[--n] = 0;
  char *nl = strrchr(text, '\n');
  return nl ? nl + 1 : text;
}

// Draws the PNGs from report-data.json. Without python3 or matplotlib the
// report says why the plots were skipped; any other failure is an error
// (the script's output is kept in DIR/plot_report.log).
static int draw_plots(report *rep) {
  char *script = find_plot_script();
  if (!script)
    return ng_fail(
        "cannot find tools/plot_report.py above the executable (set NG_TOOLS to the tools directory)");
  char *data = ng_path_join(rep->out_dir, "report-data.json"), *output = NULL;
  char *argv[] = {access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3", script, data,
                  rep->out_dir, NULL};
  int status = 0, err = run_captured(argv, &output, &status), rc = err ? -1 : 0;
  if (err == ENOENT) {
    rep->plots_skipped = ng_xstrdup("python3 was not found");
    rc = 0;
  } else if (rc == 0 && status == PLOT_SKIPPED) {
    rep->plots_skipped = ng_xstrdup(last_line(output));
  } else if (rc == 0 && status != 0) {
    char *log = ng_path_join(rep->out_dir, "plot_report.log");
    ng_write_text_atomic(log, output);
    rc = ng_fail("%s failed with status %d: %s (full output: %s)", script, status, last_line(output), log);
    free(log);
  }
  free(output);
  free(data);
  free(script);
  return rc;
}

// ---------------------------------------------------------------- command

// --out DIR, or dirname(RUN_DIR[0])/report; created when missing. An existing
// report in it is replaced only with --force.
static int make_out_dir(const ng_cli *c, report *rep) {
  const char *out = ng_cli_opt(c, "out");
  if (out) {
    rep->out_dir = ng_xstrdup(out);
  } else {
    char *first = ng_xstrdup(c->pos[0]);
    size_t n = strlen(first);
    while (n > 1 && first[n - 1] == '/') first[--n] = 0;
    rep->out_dir = ng_path_join(dirname(first), "report");
    free(first);
  }
  char *md = ng_path_join(rep->out_dir, "report.md");
  int rc = ng_cli_may_replace(c, md, "a report");
  free(md);
  return rc || ng_make_dir(rep->out_dir);
}

// The runs among the arguments; the others are noted (and left out).
static int load_runs(const ng_cli *c, report *rep) {
  rep->runs = ng_xcalloc((size_t)c->npos, sizeof(run));
  rep->skipped = ng_xcalloc((size_t)c->npos, sizeof(char *));
  for (int i = 0; i < c->npos; i++) {
    if (!ng_rundir_is_run(c->pos[i])) {
      rep->skipped[rep->n_skipped++] = c->pos[i];
      printf("report: %s is not a run directory (no run config.json): left out\n", c->pos[i]);
    } else if (load_run(c->pos[i], &rep->runs[rep->n_runs++])) {
      return -1;  // freed with the others
    }
  }
  if (rep->n_runs == 0) return ng_fail("report: no run directory (one with a run's config.json) among the arguments");
  check_eval_settings(rep);
  return 0;
}

static void report_free(report *rep) {
  for (size_t i = 0; i < rep->n_runs; i++) run_free(&rep->runs[i]);
  for (size_t i = 0; i < rep->n_arms; i++) free(rep->arms[i].runs);
  free(rep->runs);
  free(rep->arms);
  free(rep->out_dir);
  free(rep->plots_skipped);
  free(rep->skipped);
  free(rep->eval_differs);
}

int cmd_report(const ng_cli *c) {
  report rep = {0};
  int rc = load_runs(c, &rep) || group_arms(&rep) || make_out_dir(c, &rep) || write_plot_data(&rep) ||
                   draw_plots(&rep) || write_report(&rep)
               ? ng_cli_error(ng_error())
               : 0;
  if (rc == 0)
    printf("report: %zu arms from %zu runs -> %s/report.md%s%s%s%s%s\n", rep.n_arms, rep.n_runs,
           rep.out_dir, rep.plots_skipped ? "; plots skipped: " : " and plots",
           rep.plots_skipped ? rep.plots_skipped : "",
           *rep.eval_differs ? "; WARNING: evaluated differently in " : "", rep.eval_differs,
           any_run(&rep, unfinished) ? "; some runs are unfinished (marked)" : "");
  report_free(&rep);
  return rc;
}
