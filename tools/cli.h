// normgrow command-line program: subcommands share these helpers.
#ifndef NORMGROW_TOOLS_CLI_H
#define NORMGROW_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "normgrow/backend.h"

// A parsed command line. Every option was checked against the command's table
// (tools/normgrow.c): a misspelt one never reaches a command. Positional
// arguments are collected in order.
typedef struct {
  const char *backend;    // --backend NAME (NULL: not given)
  const char *precision;  // --precision fp32|bf16 (NULL: not given)
  int64_t threads;      // --threads N (0 = OpenMP default)
  int npos;
  const char **pos;
  int nextra;           // the command's own "--key value" pairs ("1" for a flag)
  const char **extra_key, **extra_val;
} ng_cli;

// Returns the value of a command option, or NULL when it was not given.
const char *ng_cli_opt(const ng_cli *c, const char *key);
// A decimal integer in [min, max], digits only (strtoll alone would accept
// " 7" and "+7"); `what` names it in the message.
int ng_cli_parse_int(const char *s, const char *what, int64_t min, int64_t max, int64_t *out);
// The option --key as such an integer; an absent option keeps *out.
int ng_cli_int_opt(const ng_cli *c, const char *key, int64_t min, int64_t max, int64_t *out);
// The option --key as a finite number in [min, max] ((min, max] without
// min_ok); an absent option keeps *out.
int ng_cli_num_opt(const ng_cli *c, const char *key, double min, bool min_ok, double max,
                   double *out);
// 0 when nothing is at `path` or the command was given --force; else fails
// with one line naming the file, `what` it holds and how to proceed.
int ng_cli_may_replace(const ng_cli *c, const char *path, const char *what);
// The option --key as "on" or "off"; an absent option keeps *out.
int ng_cli_switch_opt(const ng_cli *c, const char *key, bool *out);
// The backend of --backend (default cpu) in the precision of --precision
// (default fp32), opened; NULL with an error message. Close with ng_backend_close.
ng_backend *ng_cli_backend(const ng_cli *c);
// Prints "normgrow: <message>" on stderr; returns 1 (the exit status).
int ng_cli_error(const char *msg);

// The files of a Hugging Face tokenizer that transformers' AutoTokenizer reads
// (NULL-terminated).
extern const char *const ng_cli_tokenizer_files[];
// Copies the files of a Hugging Face tokenizer (tokenizer.json, its config,
// ...) from the directory of `tokenizer` (a tokenizer.json or a model
// directory) into `out`, so that shards carry the tokenizer that made them and
// an export of a model trained on them carries it too.
int ng_cli_copy_tokenizer(const char *tokenizer, const char *out);

int cmd_golden_eval(const ng_cli *c);
int cmd_golden_check(const ng_cli *c);
int cmd_golden_make(const ng_cli *c);
int cmd_golden_update(const ng_cli *c);
int cmd_bench(const ng_cli *c);
int cmd_plan(const ng_cli *c);
int cmd_report(const ng_cli *c);
int cmd_sweep(const ng_cli *c);
int cmd_data(const ng_cli *c);
int cmd_tokenize(const ng_cli *c);
int cmd_train(const ng_cli *c);
int cmd_export(const ng_cli *c);
int cmd_teacher_cache(const ng_cli *c);
int cmd_diag(const ng_cli *c);
int cmd_runs(const ng_cli *c);

#endif
