// normgrow data: a corpus -> token shards DIR/train and DIR/val (byte-level, or
// with a Hugging Face tokenizer.json, whose files are copied into DIR).
//   normgrow data INPUT... --out DIR [--tokenizer PATH] [--records-split LINE | --jsonl-field F]
//                 [--val-fraction F] [--seed S] [--max-tokens N] [--file-tokens N] [--force]
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/data.h"
#include "normgrow/tokenizer.h"
#include "normgrow/fileio.h"

#define DEFAULT_VAL_FRACTION 0.05
#define DEFAULT_SEED 0

// A decimal number strictly between 0 and 1.
static int parse_fraction(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == 0 || *end != 0 || errno != 0 || !(v > 0.0 && v < 1.0))
    return ng_fail("--val-fraction: \"%s\" is not a number in (0, 1)", s);
  *out = v;
  return 0;
}

// Decimal digits only (strtoull alone would accept "-1" and " 7"), fitting in 64 bits.
static int parse_seed(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s < '0' || *s > '9' || *end != 0 || errno != 0)
    return ng_fail("--seed: \"%s\" is not an unsigned 64-bit integer", s);
  *out = (uint64_t)v;
  return 0;
}

static int parse_options(const ng_cli *c, ng_data_options *o) {
  const char *frac_opt = ng_cli_opt(c, "val-fraction"), *seed_opt = ng_cli_opt(c, "seed");
  int64_t max_tokens = 0, file_tokens = (int64_t)NG_DATA_FILE_TOKENS;
  *o = (ng_data_options){.record_sep = ng_cli_opt(c, "records-split"),
                         .jsonl_field = ng_cli_opt(c, "jsonl-field"),
                         .val_fraction = DEFAULT_VAL_FRACTION,
                         .seed = DEFAULT_SEED,
                         .progress = true};
  if ((frac_opt && parse_fraction(frac_opt, &o->val_fraction) != 0) ||
      (seed_opt && parse_seed(seed_opt, &o->seed) != 0) ||
      ng_cli_int_opt(c, "max-tokens", 1, INT64_MAX / 8, &max_tokens) != 0 ||
      ng_cli_int_opt(c, "file-tokens", 1, INT64_MAX / 8, &file_tokens) != 0)
    return -1;
  o->max_tokens = (uint64_t)max_tokens;
  o->file_tokens = (uint64_t)file_tokens;
  return 0;
}

// ---------------------------------------------------------------- outputs

static const char *const splits[] = {"train", "val"};

typedef struct {
  char **path;
  int n;
} path_list;

static void path_list_free(path_list *l) {
  for (int i = 0; i < l->n; i++) free(l->path[i]);
  free(l->path);
}

static void path_list_add(path_list *l, char *path) {
  l->path = ng_xrealloc(l->path, (size_t)(l->n + 1) * sizeof *l->path);
  l->path[l->n++] = path;
}

// Every file in `dir` that data writes there, in the order to remove them:
// each split's shard in either form (ng_shard_files), then the tokenizer's files.
static void outputs_in(const char *dir, path_list *l) {
  *l = (path_list){0};
  for (int k = 0; k < 2; k++) {
    int n;
    char **shard = ng_shard_files(dir, splits[k], &n);
    for (int i = 0; i < n; i++) path_list_add(l, shard[i]);
    free(shard);
  }
  for (int i = 0; ng_cli_tokenizer_files[i]; i++) {
    char *path = ng_path_join(dir, ng_cli_tokenizer_files[i]);
    struct stat st;
    if (lstat(path, &st) == 0) path_list_add(l, path);
    else free(path);
  }
}

// Outputs already in DIR (any layout, either split, a tokenizer) are kept unless --force.
static int outputs_taken(const ng_cli *c, const path_list *old) {
  for (int i = 0; i < old->n; i++)
    if (ng_cli_may_replace(c, old->path[i], "token shards that runs may be trained or evaluated on, "
                                            "or the tokenizer that made them"))
      return -1;
  return 0;
}

static int remove_all(const path_list *l) {
  for (int i = 0; i < l->n; i++)
    if (unlink(l->path[i]) != 0) return ng_fail("%s: cannot remove: %s", l->path[i], strerror(errno));
  return 0;
}

// The new outputs, made in `stage`, replace the old ones in `out`: every old
// one goes first, so that no old file is ever read beside a new one (a config
// naming train.bin after a rebuild into parts, an old tokenizer beside
// byte-level shards); then the new ones are renamed into place in the reverse
// order of removal, each shard's manifest or .bin after its parts.
static int replace_outputs(const char *stage, const char *out) {
  path_list old, fresh;
  outputs_in(out, &old);
  int rc = remove_all(&old);
  outputs_in(stage, &fresh);
  for (int i = fresh.n - 1; i >= 0 && rc == 0; i--) {
    char *to = ng_path_join(out, strrchr(fresh.path[i], '/') + 1);
    if (rename(fresh.path[i], to) != 0) rc = ng_fail("%s: cannot write: %s", to, strerror(errno));
    free(to);
  }
  path_list_free(&old);
  path_list_free(&fresh);
  return rc;
}

// Removes the stage directory and what is left in it.
static void discard_stage(const char *stage) {
  path_list left;
  outputs_in(stage, &left);
  remove_all(&left);
  path_list_free(&left);
  rmdir(stage);
}

// ---------------------------------------------------------------- the command

// Shards (and the tokenizer's files) are made in a directory of their own in
// DIR and replace DIR's old outputs only once all of them are complete: a run
// that fails leaves DIR as it was.
static int make_outputs(const ng_cli *c, const ng_data_options *o, const char *tok_path,
                        const char *out, ng_data_stats *st) {
  char name[64];
  snprintf(name, sizeof name, "data.tmp.%ld", (long)getpid());
  char *stage = ng_path_join(out, name);
  bool made_out = access(out, F_OK) != 0;
  int rc = ng_make_dir(out) || ng_data_prepare(c->pos, c->npos, o, stage, st) ||
                   (tok_path && ng_cli_copy_tokenizer(tok_path, stage)) ||
                   replace_outputs(stage, out)
               ? -1
               : 0;
  discard_stage(stage);
  if (rc != 0 && made_out) rmdir(out);
  for (int k = 0; k < 2 && rc == 0; k++) {  // where the shards are now
    char *moved = ng_path_join(out, strrchr(st->path[k], '/') + 1);
    free(st->path[k]);
    st->path[k] = moved;
  }
  free(stage);
  return rc;
}

int cmd_data(const ng_cli *c) {
  const char *out = ng_cli_opt(c, "out"), *tok_path = ng_cli_opt(c, "tokenizer");
  ng_data_options o;
  if (parse_options(c, &o) != 0) return ng_cli_error(ng_error());
  if (!out) return ng_cli_error("data: --out DIR is required");
  path_list old;
  outputs_in(out, &old);
  int taken = outputs_taken(c, &old);
  path_list_free(&old);
  if (taken) return ng_cli_error(ng_error());

  ng_tokenizer *tok = NULL;
  if (tok_path && ng_tokenizer_load(tok_path, &tok) != 0) return ng_cli_error(ng_error());
  o.tokenizer = tok;
  ng_data_stats st;
  int rc = make_outputs(c, &o, tok_path, out, &st);
  ng_tokenizer_free(tok);
  if (rc != 0) return ng_cli_error(ng_error());
  uint64_t tokens = st.tokens[0] + st.tokens[1];
  printf("data: %" PRIu64 " documents (train %" PRIu64 ", val %" PRIu64 "), %" PRIu64
         " tokens (train %" PRIu64 ", val %" PRIu64 ") -> %s, %s\n",
         st.docs[0] + st.docs[1], st.docs[0], st.docs[1], tokens, st.tokens[0], st.tokens[1],
         st.path[0], st.path[1]);
  double s = st.seconds > 0 ? st.seconds : 1e-9;
  printf("data: %.1f MB of text in %.2f s: %.2f MB/s, %.3fM tokens/s\n", (double)st.bytes / 1e6,
         st.seconds, (double)st.bytes / 1e6 / s, (double)tokens / 1e6 / s);
  ng_data_stats_free(&st);
  return 0;
}
