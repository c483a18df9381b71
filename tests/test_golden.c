// The golden comparison rule itself (docs/golden-contract.md, "Scale floor
// for gradients"): a gradient that is zero by symmetry holds only rounding
// noise and passes whatever noise a machine gives, while a real error of
// 1e-3 of the case's gradient scale G fails anywhere, and an error of 2e-3 of a
// small but real tensor's own scale still fails. The bf16 rule ("Reduced
// precision"): forward values within 3e-2 by the plain rule, every out.grad.*
// together within a relative L2 of 0.1, the AdamW step not compared.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/golden.h"

static char path[1024];

static ng_named_tensor *find(ng_tensor_list *l, const char *name) {
  return (ng_named_tensor *)ng_tensor_list_find(l, name);
}

static double max_abs(const ng_named_tensor *t) {
  double m = 0.0;
  for (size_t i = 0; i < t->numel; i++) m = fmax(m, fabs((double)t->data[i]));
  return m;
}

// The case's G and the gradient tensor that has it.
static double grad_scale(const ng_tensor_list *l, const ng_named_tensor **argmax) {
  double g = 0.0;
  for (int i = 0; i < l->n; i++)
    if (strncmp(l->t[i].name, "out.grad.", 9) == 0 && max_abs(&l->t[i]) > g) {
      g = max_abs(&l->t[i]);
      *argmax = &l->t[i];
    }
  return g;
}

// Evaluates CASE twice: the expected and the got outputs, equal to start with.
static int open_case(const char *name, ng_golden_case *gc, ng_tensor_list *exp,
                     ng_tensor_list *got) {
  snprintf(path, sizeof path, "%s/golden/%s.safetensors", getenv("NG_ROOT"), name);
  ng_acts_options whole = {0};  // the loss over all rows at once, no recompute
  if (ng_golden_open(gc, path) || ng_golden_eval(gc, ng_backend_cpu(), &whole, exp) ||
      ng_golden_eval(gc, ng_backend_cpu(), &whole, got)) {
    printf("FAIL %s: %s\n", name, ng_error());
    return -1;
  }
  return 0;
}

static void close_case(ng_golden_case *gc, ng_tensor_list *exp, ng_tensor_list *got) {
  ng_tensor_list_free(exp);
  ng_tensor_list_free(got);
  ng_golden_close(gc);
}

static int bad_in(ng_precision p, const ng_golden_case *gc, const ng_tensor_list *exp,
                  const ng_tensor_list *got) {
  ng_golden_report r;
  if (ng_golden_compare_with(gc, exp, got, p, &r)) return -1;
  return r.n_bad;
}

static int bad(const ng_golden_case *gc, const ng_tensor_list *exp, const ng_tensor_list *got) {
  return bad_in(NG_PREC_FP32, gc, exp, got);
}

// T = 1: q/k gradients are zero by symmetry; other noise of the same size passes.
static void noise_against_noise(void) {
  ng_golden_case gc;
  ng_tensor_list exp = {0}, got = {0};
  if (open_case("post_single_token", &gc, &exp, &got)) return;
  const ng_named_tensor *gmax = NULL;
  double G = grad_scale(&exp, &gmax);
  const char *name = "out.grad.model.layers.0.self_attn.k_proj.weight";
  ng_named_tensor *e = find(&exp, name), *g = find(&got, name);
  double noise = e ? max_abs(e) : 0.0;
  CHECK(e && noise < 1e-6 * G, "k_proj gradient at T = 1 is rounding noise",
        "max|expected| %.3g against G %.3g", noise, G);
  if (e) {
    uint64_t s = 12345;
    for (size_t i = 0; i < g->numel; i++) {  // other noise of the same size
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      g->data[i] = (float)(noise * ((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0));
    }
    g->data[0] = (float)(-2.0 * noise);
    CHECK(bad(&gc, &exp, &got) == 0, "other noise in a zero-by-symmetry gradient passes",
          "%d tensors out of tolerance", bad(&gc, &exp, &got));
  }
  close_case(&gc, &exp, &got);
}

static void real_errors_fail(void) {
  ng_golden_case gc;
  ng_tensor_list exp = {0}, got = {0};
  if (open_case("post_untied_final_gqa2_teacher", &gc, &exp, &got)) return;
  const ng_named_tensor *gmax = NULL;
  double G = grad_scale(&exp, &gmax);
  CHECK(bad(&gc, &exp, &got) == 0, "a case compared with itself passes", "n_bad %d",
        bad(&gc, &exp, &got));

  // An error of 2e-3 G in the tensor whose own scale is G.
  ng_named_tensor *g = find(&got, gmax->name);
  g->data[0] += (float)(2e-3 * G);
  CHECK(bad(&gc, &exp, &got) > 0, "an error of 2e-3 G in the largest gradient fails",
        "passed (%s)", gmax->name);
  g->data[0] -= (float)(2e-3 * G);

  // A small but real tensor: scaled to 1e-2 G in both, then an error of
  // 2e-3 of its own scale (far below 1e-3 G, above the floor's share of it).
  const char *small = NULL;
  for (int i = 0; i < exp.n && !small; i++)
    if (strncmp(exp.t[i].name, "out.grad.", 9) == 0 && &exp.t[i] != gmax) small = exp.t[i].name;
  ng_named_tensor *es = small ? find(&exp, small) : NULL, *gs = small ? find(&got, small) : NULL;
  CHECK(es && gs, "case has a second gradient tensor", "none");
  if (es && gs) {
    double f = 1e-2 * G / max_abs(es);
    for (size_t i = 0; i < es->numel; i++) es->data[i] = gs->data[i] = (float)(es->data[i] * f);
    double own = max_abs(es);
    gs->data[1] += (float)(2e-3 * own);
    CHECK(bad(&gc, &exp, &got) > 0, "an error of 2e-3 x its own scale in a 1e-2 G tensor fails",
          "passed");
    gs->data[1] -= (float)(2e-3 * own);
    // The same relative error in a tensor of scale 1e-4 G is under the floor.
    for (size_t i = 0; i < es->numel; i++) es->data[i] = gs->data[i] = (float)(es->data[i] * 1e-2);
    own = max_abs(es);
    gs->data[1] += (float)(2e-3 * own);
    CHECK(bad(&gc, &exp, &got) == 0, "the same error in a 1e-4 G tensor is under the floor",
          "%d out of tolerance", bad(&gc, &exp, &got));
  }
  close_case(&gc, &exp, &got);
}

// Every out.grad.* entry times (1 + f) (a relative L2 error of f over all of them).
static void scale_grads(ng_tensor_list *got, const ng_tensor_list *exp, double f) {
  for (int i = 0; i < got->n; i++)
    if (strncmp(got->t[i].name, "out.grad.", 9) == 0) {
      const ng_named_tensor *e = ng_tensor_list_find(exp, got->t[i].name);
      for (size_t j = 0; j < e->numel; j++) got->t[i].data[j] = (float)(e->data[j] * (1.0 + f));
    }
}

static void bf16_rule(void) {
  ng_golden_case gc;
  ng_tensor_list exp = {0}, got = {0};
  if (open_case("pre_untied_final_gqa2_teacher", &gc, &exp, &got)) return;
  ng_named_tensor *lg = find(&got, "out.logits"), *el = find(&exp, "out.logits");
  double m = max_abs(el);
  lg->data[0] = (float)(el->data[0] + 2.5e-2 * m);
  CHECK(bad_in(NG_PREC_BF16, &gc, &exp, &got) == 0 && bad(&gc, &exp, &got) > 0,
        "bf16: a logit off by 2.5e-2 of the scale passes (fails in fp32)", "wrong verdict");
  lg->data[0] = (float)(el->data[0] + 3.5e-2 * m);
  CHECK(bad_in(NG_PREC_BF16, &gc, &exp, &got) > 0, "bf16: a logit off by 3.5e-2 fails", "passed");
  lg->data[0] = el->data[0];
  scale_grads(&got, &exp, 0.08);
  CHECK(bad_in(NG_PREC_BF16, &gc, &exp, &got) == 0,
        "bf16: every gradient 8% off (relative L2 0.08) passes", "failed");
  scale_grads(&got, &exp, 0.12);
  CHECK(bad_in(NG_PREC_BF16, &gc, &exp, &got) > 0,
        "bf16: every gradient 12% off (relative L2 0.12) fails", "passed");
  scale_grads(&got, &exp, 0.0);
  for (int i = 0; i < got.n; i++)  // a step far off entry by entry is not compared
    if (strncmp(got.t[i].name, "out.step.", 9) == 0) got.t[i].data[0] += 1.0f;
  CHECK(bad_in(NG_PREC_BF16, &gc, &exp, &got) == 0 && bad(&gc, &exp, &got) > 0,
        "bf16: the AdamW step is not compared entry by entry (fp32 compares it)", "wrong verdict");
  close_case(&gc, &exp, &got);
}

// A backend whose loss ops lack a divergence refuses a case that uses it, in one
// line, before computing anything (the CUDA backend computes forward_kl only).
static void divergence_support(void) {
  ng_backend partial = *ng_backend_cpu();
  partial.divergences = 1u << NG_DIV_FORWARD_KL;
  CHECK(ng_backend_check_divergence(ng_backend_cpu(), NG_DIV_JSD) == 0 &&
            ng_backend_check_divergence(ng_backend_cpu(), NG_DIV_REVERSE_KL) == 0,
        "the CPU backend computes every divergence", "%s", ng_error());
  ng_golden_case gc;
  ng_tensor_list out = {0};
  ng_acts_options whole = {0};
  snprintf(path, sizeof path, "%s/golden/pre_topk5_jsd.safetensors", getenv("NG_ROOT"));
  int rc = ng_golden_open(&gc, path);
  if (rc == 0) rc = ng_golden_eval(&gc, &partial, &whole, &out) == 0 ? 1 : 0;
  CHECK(rc == 0 && strstr(ng_error(), "jsd") && out.n == 0,
        "a backend without jsd refuses a jsd case, naming it", "rc %d: %s", rc, ng_error());
  ng_tensor_list_free(&out);
  ng_golden_close(&gc);
}

int main(void) {
  if (!getenv("NG_ROOT")) {
    fprintf(stderr, "set NG_ROOT (tests/run.sh does)\n");
    return 1;
  }
  noise_against_noise();
  real_errors_fail();
  divergence_support();
  bf16_rule();
  return TEST_RESULT();
}
