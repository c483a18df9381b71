// normgrow: golden cases, the numerical contract of docs/golden-contract.md.
//
// A case is one safetensors file with the configuration (metadata), the
// weights (param.*), the inputs (in.*) and, under golden/, the expected
// outputs (out.*). The reference computes the outputs; every backend must
// reproduce them within the tolerances below.
#ifndef NORMGROW_GOLDEN_H
#define NORMGROW_GOLDEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "normgrow/backend.h"
#include "normgrow/config.h"
#include "normgrow/model.h"
#include "normgrow/safetensors.h"

#define NG_GOLDEN_FORMAT "normgrow-golden-1"
#define NG_GOLDEN_TOL_FORWARD 1e-4  // logits, hidden, rms, losses, ablation
#define NG_GOLDEN_TOL_GRAD 1e-3
#define NG_GOLDEN_TOL_STEP 0.02     // |update error| / lr on non-negligible entries
// Scale floor of gradients: an out.grad.* tensor's error is max|got - exp| /
// max(max|exp|, 1e-3 G), G = the largest max|exp| over the case's out.grad.*;
// the AdamW step is compared on entries with |clipped g| > max(1e-3 G_clipped,
// 100 eps). Noise in a gradient that is zero by symmetry then passes on every
// machine, while a real error of 1e-3 G anywhere still fails.
#define NG_GOLDEN_GRAD_FLOOR 1e-3
// bf16 mode (docs/golden-contract.md "bf16 mode"): forward outputs by the
// plain rule within 3e-2; the out.grad.* tensors all together within a
// relative L2 error sqrt(sum (got - exp)^2 / sum exp^2) of 0.1 (out.topk_dlogits
// by the same L2 on its own); the AdamW step is not compared entry by entry.
#define NG_GOLDEN_BF16_TOL_FORWARD 3e-2
// With sublayer norms (sandwich) each sublayer's output, bf16 rounding error
// included, is normed to unit RMS before it joins the residual: a float64
// simulation of the rounding gave at worst 4.5e-2 over 120 random cases (pre
// 1.8e-2) and 6.5e-2 on golden/sandwich_deep_gqa2_teacher; the bound is 1e-1.
#define NG_GOLDEN_BF16_TOL_FORWARD_SANDWICH 1e-1
#define NG_GOLDEN_BF16_TOL_GRAD_L2 0.1

typedef struct {
  ng_st_file file;
  ng_model_config model;
  ng_loss_config loss;
  ng_optim_config optim;
  char *config_json;           // the metadata "config" text
  int64_t B, T;
  int32_t *tokens, *targets;   // host [B*T]
  float *teacher;              // host [B*T, V], or NULL
  int64_t topk;                // k of the optional top-k teacher inputs (0: none)
  int32_t *topk_ids;           // host [B*T, k]
  float *topk_vals, *topk_lse; // host [B*T, k], [B*T]
  float *topk_rest;            // host [B*T]: log Q_rest, the case's in.teacher_topk_rest or
                               // log max(0, 1 - sum_j Q_j) without one (contract section 4)
} ng_golden_case;

// A named host fp32 tensor (outputs of an evaluation, expected values).
typedef struct {
  char name[112];
  int ndim;
  int64_t shape[3];
  size_t numel;
  float *data;
} ng_named_tensor;

typedef struct {
  int n, cap;
  ng_named_tensor *t;
} ng_tensor_list;

void ng_tensor_list_free(ng_tensor_list *l);
const ng_named_tensor *ng_tensor_list_find(const ng_tensor_list *l, const char *name);

// Open and validate a case: metadata, config, every input and weight (names,
// shapes, dtypes, token ids inside the vocabulary). Unknown in.* or param.*
// tensors are errors; out.* tensors are ignored here.
int ng_golden_open(ng_golden_case *gc, const char *path);
void ng_golden_close(ng_golden_case *gc);

// Compute every out.* tensor of the contract on backend `be`, the loss in
// chunks of o->chunk rows (0: all) and with o->recompute (o->for_backward unused).
int ng_golden_eval(const ng_golden_case *gc, ng_backend *be, const ng_acts_options *o,
                   ng_tensor_list *out);
// Write the outputs (and, with_inputs, the case's own inputs first) atomically.
int ng_golden_write(const ng_golden_case *gc, const ng_tensor_list *out, bool with_inputs,
                    const char *path);

// Worst relative error per tensor family, filled by ng_golden_compare.
typedef enum {
  NG_FAM_LOGITS, NG_FAM_LOSSES, NG_FAM_HIDDEN, NG_FAM_RMS, NG_FAM_ABLATION, NG_FAM_GRAD,
  NG_FAM_STEP, NG_FAM_COUNT
} ng_golden_family;

typedef struct {
  double err[NG_FAM_COUNT];          // max error (step: max update error / lr)
  double tol[NG_FAM_COUNT];          // its bound in the precision compared (inf: not compared)
  char worst[NG_FAM_COUNT][112];     // tensor that gave it
  int n_bad;                         // tensors out of tolerance (or missing/extra)
} ng_golden_report;

const char *ng_golden_family_name(ng_golden_family f);
// The bound of family f for outputs computed in precision p.
double ng_golden_family_tol(ng_golden_family f, ng_precision p);
// Compare `got`, computed in precision p, with the out.* tensors stored in the
// case file, by the rules of that precision.
int ng_golden_compare(const ng_golden_case *gc, const ng_tensor_list *got, ng_precision p,
                      ng_golden_report *rep);
// The same against expected tensors `exp` given by the caller (named out.*).
int ng_golden_compare_with(const ng_golden_case *gc, const ng_tensor_list *exp,
                           const ng_tensor_list *got, ng_precision p, ng_golden_report *rep);

// Make a new case from a spec JSON ({"seed", "batch", "seq", "teacher",
// "ignore_fraction", "model", "loss", "optim"}): random inputs and weights
// from the seed, outputs from backend `be` (the reference: ng_backend_cpu()).
int ng_golden_make(const char *spec_path, const char *out_path, ng_backend *be);

#endif
