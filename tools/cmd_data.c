// normgrow data: a corpus -> token shards DIR/train and DIR/val (byte-level, or
// with a Hugging Face tokenizer.json, whose files are copied into DIR).
//   normgrow data INPUT... --out DIR [--tokenizer PATH] [--records-split LINE | --jsonl-field F]
//                 [--val-fraction F] [--seed S] [--max-tokens N] [--file-tokens N] [--force]
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

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

// Shards already in DIR (either form, either split) are kept unless --force.
static int outputs_taken(const ng_cli *c, const char *out) {
  static const char *const names[] = {"train.bin", "train.manifest.json", "val.bin",
                                      "val.manifest.json"};
  int taken = 0;
  for (int i = 0; i < 4 && !taken; i++) {
    char *path = ng_path_join(out, names[i]);
    taken = ng_cli_may_replace(c, path, "token shards that runs may be trained or evaluated on");
    free(path);
  }
  return taken;
}

int cmd_data(const ng_cli *c) {
  const char *out = ng_cli_opt(c, "out"), *tok_path = ng_cli_opt(c, "tokenizer");
  ng_data_options o;
  if (parse_options(c, &o) != 0) return ng_cli_error(ng_error());
  if (!out) return ng_cli_error("data: --out DIR is required");
  if (outputs_taken(c, out)) return ng_cli_error(ng_error());

  ng_tokenizer *tok = NULL;
  if (tok_path && ng_tokenizer_load(tok_path, &tok) != 0) return ng_cli_error(ng_error());
  o.tokenizer = tok;
  ng_data_stats st;
  int rc = ng_data_prepare(c->pos, c->npos, &o, out, &st) ||
           (tok && ng_cli_copy_tokenizer(tok_path, out));
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
