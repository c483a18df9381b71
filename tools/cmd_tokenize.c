// normgrow tokenize: a text's ids, or ids' text, with a tokenizer.json.
//   normgrow tokenize --tokenizer PATH TEXT|-          ids, space-separated, one line
//   normgrow tokenize --tokenizer PATH --decode IDS|-  the text of ids (blank-separated)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/tokenizer.h"

#define MAX_INPUT ((size_t)1 << 32)

// `arg`, or all of stdin when it is "-"; *owned is what to free.
static int input_text(const char *arg, char **owned, const char **text, size_t *len) {
  *owned = NULL;
  if (strcmp(arg, "-") != 0) {
    *text = arg;
    *len = strlen(arg);
    return 0;
  }
  if (ng_read_file("/dev/stdin", MAX_INPUT, owned, len) != 0) return -1;
  *text = *owned;
  return 0;
}

static int encode(const ng_tokenizer *t, const char *text, size_t len) {
  ng_tok_state *s = ng_tok_state_create(t);
  ng_ids ids = {0};
  int rc = ng_tokenizer_encode(s, text, len, &ids);
  for (size_t i = 0; rc == 0 && i < ids.n; i++) printf(i ? " %u" : "%u", ids.ids[i]);
  if (rc == 0) printf("\n");
  free(ids.ids);
  ng_tok_state_free(s);
  return rc;
}

// Decimal ids separated by blanks (spaces, tabs, newlines).
static int parse_ids(const char *text, ng_ids *ids) {
  const char *p = text;
  for (;;) {
    p += strspn(p, " \t\r\n");
    if (!*p) return 0;
    size_t k = strspn(p, "0123456789");
    char *end;
    unsigned long v = strtoul(p, &end, 10);
    if (k == 0 || k > 10 || (*end && !strchr(" \t\r\n", *end)) || v > UINT32_MAX)
      return ng_fail("--decode: \"%.*s\" is not a token id", (int)strcspn(p, " \t\r\n"), p);
    if (ids->n == ids->cap) {
      ids->cap = 2 * ids->cap + 64;
      ids->ids = ng_xrealloc(ids->ids, ids->cap * sizeof *ids->ids);
    }
    ids->ids[ids->n++] = (uint32_t)v;
    p = end;
  }
}

static int decode(const ng_tokenizer *t, const char *ids_text) {
  ng_ids ids = {0};
  char *text = NULL;
  size_t len;
  int rc = parse_ids(ids_text, &ids) || ng_tokenizer_decode(t, ids.ids, ids.n, &text, &len);
  if (rc == 0) fwrite(text, 1, len, stdout);
  free(text);
  free(ids.ids);
  return rc ? -1 : 0;
}

int cmd_tokenize(const ng_cli *c) {
  const char *path = ng_cli_opt(c, "tokenizer"), *dec = ng_cli_opt(c, "decode");
  if (!path) return ng_cli_error("tokenize: --tokenizer PATH is required");
  if ((dec != NULL) == (c->npos == 1))
    return ng_cli_error("tokenize: give either TEXT (or -) or --decode IDS (or -)");
  ng_tokenizer *t = NULL;
  char *owned = NULL;
  const char *text;
  size_t len;
  int rc = ng_tokenizer_load(path, &t) || input_text(dec ? dec : c->pos[0], &owned, &text, &len) ||
           (dec ? decode(t, text) : encode(t, text, len));
  free(owned);
  ng_tokenizer_free(t);
  return rc ? ng_cli_error(ng_error()) : 0;
}
