// normgrow golden-eval / golden-check / golden-make / golden-update. golden-eval
// and golden-make replace an existing output only with --force; golden-update
// rewrites the cases it is given, which is what it is for.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "normgrow/common.h"
#include "normgrow/golden.h"
#include "normgrow/registry.h"

// Open CASE, evaluate on backend be (the loss in chunks of --loss-chunk rows,
// default all; --recompute on|off, default off); on failure prints the one line.
static int open_and_eval(const ng_cli *c, ng_backend *be, const char *path, ng_golden_case *gc,
                         ng_tensor_list *out) {
  memset(gc, 0, sizeof *gc);
  ng_acts_options o = {0};
  if (ng_cli_int_opt(c, "loss-chunk", 1, INT64_MAX / 2, &o.chunk) ||
      ng_cli_switch_opt(c, "recompute", &o.recompute))
    return -1;
  if (ng_golden_open(gc, path)) return -1;
  if (ng_golden_eval(gc, be, &o, out)) {
    ng_fail_prefix(path);
    ng_golden_close(gc);
    ng_tensor_list_free(out);
    return -1;
  }
  return 0;
}

int cmd_golden_eval(const ng_cli *c) {
  ng_golden_case gc;
  ng_tensor_list out = {0};
  if (ng_cli_may_replace(c, c->pos[1], "a golden case's outputs")) return ng_cli_error(ng_error());
  ng_backend *be = ng_cli_backend(c);
  if (!be || open_and_eval(c, be, c->pos[0], &gc, &out)) {
    ng_backend_close(be);
    return ng_cli_error(ng_error());
  }
  int rc = ng_golden_write(&gc, &out, false, c->pos[1]);
  ng_tensor_list_free(&out);
  ng_golden_close(&gc);
  ng_backend_close(be);
  return rc ? ng_cli_error(ng_error()) : 0;
}

// "1.2e-05/1e-04" (error/bound), or "-" for a family not compared.
static void print_err(double err, double tol) {
  if (isinf(tol)) printf(" -");
  else printf(" %.1e/%.0e", err, tol);
}

static void print_report(const char *path, const ng_golden_report *r) {
  printf("%s:", path);
  for (int f = 0; f < NG_FAM_COUNT; f++)
    printf(" %s %.1e", ng_golden_family_name((ng_golden_family)f), r->err[f]);
  printf("  %s\n", r->n_bad ? "FAIL" : "PASS");
  for (int f = 0; f < NG_FAM_COUNT && r->n_bad; f++)
    if (!(r->err[f] <= r->tol[f]))
      printf("  %s: %s error %.3e > tolerance %.0e\n", path, r->worst[f], r->err[f], r->tol[f]);
}

// Per case: worst error per tensor family; at the end the worst over all cases.
int cmd_golden_check(const ng_cli *c) {
  ng_backend *be = ng_cli_backend(c);
  if (!be) return ng_cli_error(ng_error());
  ng_golden_report worst = {0};
  int failed = 0;
  for (int i = 0; i < c->npos; i++) {
    ng_golden_case gc;
    ng_tensor_list out = {0};
    ng_golden_report r;
    if (open_and_eval(c, be, c->pos[i], &gc, &out) ||
        ng_golden_compare(&gc, &out, be->precision, &r)) {
      fprintf(stderr, "normgrow: %s\n", ng_error());
      failed++;
    } else {
      print_report(c->pos[i], &r);
      failed += r.n_bad > 0;
      for (int f = 0; f < NG_FAM_COUNT; f++)
        if (!(r.err[f] <= worst.err[f])) {
          worst.err[f] = r.err[f];
          worst.tol[f] = r.tol[f];  // that case's tolerance
        }
    }
    ng_tensor_list_free(&out);
    ng_golden_close(&gc);
  }
  printf("worst over %d cases (backend %s, %s):", c->npos, be->name,
         ng_precision_name(be->precision));
  for (int f = 0; f < NG_FAM_COUNT; f++) {
    printf(" %s", ng_golden_family_name((ng_golden_family)f));
    print_err(worst.err[f], worst.err[f] > 0 ? worst.tol[f]
                                             : ng_golden_family_tol((ng_golden_family)f, be->precision));
  }
  printf("\n%d of %d cases failed\n", failed, c->npos);
  ng_backend_close(be);
  return failed ? 1 : 0;
}

int cmd_golden_make(const ng_cli *c) {
  if (ng_cli_may_replace(c, c->pos[1], "a golden case")) return ng_cli_error(ng_error());
  ng_backend *be = ng_cli_backend(c);
  int rc = !be || ng_golden_make(c->pos[0], c->pos[1], be);
  ng_backend_close(be);
  return rc ? ng_cli_error(ng_error()) : 0;
}

int cmd_golden_update(const ng_cli *c) {
  ng_backend *be = ng_cli_backend(c);
  int rc = !be;
  for (int i = 0; i < c->npos && rc == 0; i++) {
    ng_golden_case gc;
    ng_tensor_list out = {0};
    if (open_and_eval(c, be, c->pos[i], &gc, &out)) {
      rc = 1;
      break;
    }
    rc = ng_golden_write(&gc, &out, true, c->pos[i]);
    ng_tensor_list_free(&out);
    ng_golden_close(&gc);
  }
  ng_backend_close(be);
  return rc ? ng_cli_error(ng_error()) : 0;
}
