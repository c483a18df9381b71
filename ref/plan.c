// normgrow: parameters, memory and FLOPs of a run's stages (see plan.h).
#include "normgrow/plan.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/model.h"

#define GIB 1073741824.0

// ---------------------------------------------------------------- parameters

ng_plan_params ng_plan_count_params(const ng_model_config *c, int64_t frozen_blocks, bool freeze_io) {
  ng_model *m = ng_model_create(NULL, c, false);
  ng_plan_params p = {0};
  for (int i = 0; i < m->n_params; i++) {
    ng_param *q = &m->params[i];
    // A skeleton has no gradients, so ng_model_freeze would leave it alone: mark
    // the flags as the trainer's freezes set them. Blocks all have the same size,
    // so which blocks are the frozen ones changes no count.
    q->frozen = q->layer < 0 ? freeze_io : q->layer < frozen_blocks;
    p.total += (int64_t)q->numel;
    if ((int64_t)q->numel > p.largest) p.largest = (int64_t)q->numel;
    if (!q->frozen) p.trainable += (int64_t)q->numel;
  }
  p.matmul = ng_model_matmul_params(m, false);
  p.matmul_trainable = ng_model_matmul_params(m, true);
  ng_model_free(m);
  return p;
}

// ---------------------------------------------------------------- activations

// Per token, the fields of ng_block_acts, for the union of the blocks' layouts:
//   3 H hd + 3 KV hd q, qr, att; k, kr, v
//   2 H + KV         rstd_q, lse; rstd_k
//   2 D + 1          res1, mlp_in, rstd_mi
//   3 F              gate, up, act
//   (D + 1)          att_in, rstd_in (input norm)
//   (D + 1)          res2, rstd_out (output norm)
//   D                att_out (sublayer norms, or alpha != 1)
//   2 + D            rstd_ao, mlp_out, rstd_mo (sublayer norms)
//   2 D              att_branch, mlp_branch (layer_scale)
int64_t ng_plan_block_floats(const ng_model_config *c, int64_t first, int64_t last, int64_t N) {
  int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
  int64_t H = c->num_attention_heads, KV = c->num_key_value_heads;
  ng_block_layout u = ng_block_layouts_union(c, first, last);
  int64_t per_token = 3 * H * hd + 3 * KV * hd + 2 * H + KV + (2 * D + 1) + 3 * F;
  per_token += (u.input_norm ? D + 1 : 0) + (u.output_norm ? D + 1 : 0);
  per_token += (u.sublayer_norms || u.alpha != 1.0f ? D : 0) + (u.sublayer_norms ? 2 + D : 0);
  if (c->layer_scale) per_token += 2 * D;
  return N * per_token;
}

// Per token, the fields of ng_grad_ws:
//   8 D    dh[0], dh[1], dres2, dres1, dmlp_in, datt_in, dfinal, dgrowth_gated
//   3 F    dgate, dup, dact
//   3 H hd datt, dq, dq_raw;   3 KV hd  dk, dv, dk_raw
//   D      dbranch (layer_scale)
// and dlogits [chunk, V].
int64_t ng_plan_grad_ws_floats(const ng_model_config *c, int64_t N, int64_t chunk) {
  int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
  int64_t H = c->num_attention_heads, KV = c->num_key_value_heads, V = c->vocab_size;
  return N * (8 * D + (c->layer_scale ? D : 0) + 3 * F + 3 * H * hd + 3 * KV * hd) + chunk * V;
}

// hidden x N D + blocks x block(N) + chunk V (logits) + N (D + 1) [final_norm] + grad_ws [train]
//   forward:            hidden 2,     blocks 1 (one set serving every block's layout)
//   train:              hidden L + 1, blocks L (each its own layout's), workspace
//   train, recompute:   hidden L + 1 (the block inputs and the output), blocks 1
//                       (each block's values recomputed from its input in the backward)
int64_t ng_plan_acts_floats(const ng_model_config *c, int64_t B, int64_t T, const ng_acts_options *o) {
  int64_t N = B * T, L = c->num_hidden_layers, D = c->hidden_size, V = c->vocab_size;
  int64_t chunk = o->chunk > 0 && o->chunk < N ? o->chunk : N;
  int64_t hidden = o->for_backward ? L + 1 : 2;
  int64_t n = hidden * N * D + chunk * V;
  if (o->for_backward && !o->recompute) {  // each block's own values
    for (int64_t l = 0; l < L; l++) n += ng_plan_block_floats(c, l, l, N);
  } else {  // one set for all blocks
    n += ng_plan_block_floats(c, 0, L - 1, N);
  }
  if (c->final_norm) n += N * (D + 1);  // final_in, rstd_final
  if (o->for_backward) n += ng_plan_grad_ws_floats(c, N, chunk);
  return n;
}

int64_t ng_plan_acts_bf16(const ng_model_config *c, int64_t B, int64_t T, const ng_acts_options *o) {
  if (!o->for_backward) return 0;
  int64_t N = B * T, D = c->hidden_size, F = c->intermediate_size;
  int64_t sets = o->recompute ? 1 : c->num_hidden_layers;
  return N * (sets * (2 * D + c->num_attention_heads * c->head_dim + F) + D);
}

// ---------------------------------------------------------------- FLOPs

double ng_plan_step_flops(const ng_model_config *student, const ng_plan_params *sp,
                          const ng_model_config *teacher, const ng_plan_params *tp, int64_t B,
                          int64_t T) {
  double N = (double)B * (double)T;
  double f = (4.0 * sp->matmul + 2.0 * sp->matmul_trainable) * N + 3.0 * ng_attention_flops(student, B, T);
  if (teacher) f += 2.0 * tp->matmul * N + ng_attention_flops(teacher, B, T);
  return f;
}

double ng_model_step_flops(const ng_model *student, const ng_model *teacher, int64_t B, int64_t T) {
  ng_plan_params sp = {.matmul = ng_model_matmul_params(student, false),
                       .matmul_trainable = ng_model_matmul_params(student, true)};
  ng_plan_params tp = {.matmul = teacher ? ng_model_matmul_params(teacher, false) : 0.0};
  return ng_plan_step_flops(&student->cfg, &sp, teacher ? &teacher->cfg : NULL, &tp, B, T);
}

// ---------------------------------------------------------------- stages

bool ng_plan_device_backend(const char *backend) { return strcmp(backend, "cuda") == 0; }

// Bytes on each of n devices: everything but the AdamW moments on every device,
// 1/n of these, and from 2 devices the ZeRO step's buffers; *adamw, *zero:
// those two parts. On a device backend the diagnostics' device sets, on a host
// backend everything (the larger of the diagnostics and a checkpoint's copy,
// the program). (Rank 0 gathers a checkpoint's moments into the host copy the
// checkpoint makes anyway.)
static int64_t device_bytes(const ng_plan_stage *s, int64_t n, int64_t *adamw, int64_t *zero) {
  int64_t f32 = (int64_t)sizeof(float), slice = (s->student.largest + n - 1) / n;
  *adamw = (s->adamw + n - 1) / n;
  *zero = n > 1 ? f32 * (n * slice + slice + (s->student.total + n - 1) / n) : 0;
  int64_t held = s->weights + s->grads + *adamw + *zero + s->acts + s->eval_acts + s->teacher_weights +
                 s->teacher_acts;
  if (s->device_backend) return held + s->diag_device;
  int64_t transient = s->diag > s->checkpoint ? s->diag : s->checkpoint;
  return held + transient + NG_PLAN_RUNTIME_BYTES;
}

// Each device's share on dev->devices, rank 0's host memory, and the fewest devices that fit.
static void fit(const ng_plan_device *dev, ng_plan_stage *s) {
  int64_t a, z, limit = (int64_t)(dev->memory_gib * GIB);
  s->per_device = device_bytes(s, dev->devices, &s->adamw_per_device, &s->zero);
  s->per_device_gib = (double)s->per_device / GIB;
  s->fits = s->per_device_gib <= dev->memory_gib;
  int64_t host_transient = s->diag_host > s->checkpoint ? s->diag_host : s->checkpoint;
  s->host = s->device_backend ? host_transient + NG_PLAN_RUNTIME_BYTES : 0;
  s->devices_needed = 0;
  for (int64_t n = 1; n <= 1 << 16 && !s->devices_needed; n++)
    if (device_bytes(s, n, &a, &z) <= limit) s->devices_needed = n;
}

// Bytes of the diagnostics (ref/diag.c): the residual points (a forward-only
// set with logits of one row and an [n] RMS scratch; on the host per point its
// RMS per eval token and 2^16 counts of 8 bytes for the median, a [n, D]
// scratch, and per token its id, class and a scratch float), then the ablation
// (forward-only sets of student and teacher).
ng_plan_diag ng_plan_diag_parts(const ng_model_config *sc, const ng_model_config *forward_teacher,
                                int64_t n_eval, int64_t B, int64_t T, int64_t chunk) {
  int64_t f32 = (int64_t)sizeof(float), L = sc->num_hidden_layers, D = sc->hidden_size;
  int64_t points = 1 + (ng_model_has_output_norms(sc) ? 3 * L : L);
  ng_acts_options one_row = {.chunk = 1}, fwd = {.chunk = chunk};
  int64_t n = B * T;
  ng_plan_diag d = {
      .points_device = f32 * (ng_plan_acts_floats(sc, B, T, &one_row) + n),
      .points_host = f32 * (points * n_eval + n * D + 3 * n_eval) + points * 65536 * (int64_t)sizeof(int64_t),
      .ablation_device = f32 * ng_plan_acts_floats(sc, B, T, &fwd)};
  if (forward_teacher) d.ablation_device += f32 * ng_plan_acts_floats(forward_teacher, B, T, &fwd);
  return d;
}

int64_t ng_plan_diag_bytes(const ng_model_config *sc, const ng_model_config *forward_teacher,
                           int64_t n_eval, int64_t B, int64_t T, int64_t chunk) {
  ng_plan_diag d = ng_plan_diag_parts(sc, forward_teacher, n_eval, B, T, chunk);
  int64_t points = d.points_device + d.points_host;
  return points > d.ablation_device ? points : d.ablation_device;
}

// "(hidden_size H, intermediate_size F, vocab_size V, num_hidden_layers L)"
static void size_fields(const ng_model_config *c, char *out, size_t n) {
  snprintf(out, n, "(hidden_size %lld, intermediate_size %lld, vocab_size %lld, num_hidden_layers %lld)",
           (long long)c->hidden_size, (long long)c->intermediate_size, (long long)c->vocab_size,
           (long long)c->num_hidden_layers);
}

// The P fp32 weights of model c and `extra` bytes against the machine's memory.
static int check_weights_and(const ng_model_config *c, double P, double extra, const char *what) {
  char fields[200], line[1400];
  size_fields(c, fields, sizeof fields);
  snprintf(line, sizeof line, "%s with a model %s", what, fields);
  return ng_check_memory(P * (double)sizeof(float) + extra + (double)NG_PLAN_RUNTIME_BYTES, line);
}

int ng_plan_check_more_memory(const ng_model_config *c, double extra, const char *what) {
  return check_weights_and(c, (double)ng_plan_count_params(c, 0, false).total, extra, what);
}

int ng_plan_check_model_memory(const ng_model_config *c, bool trainable, bool optimizer,
                               const char *source) {
  double P = (double)ng_plan_count_params(c, 0, false).total;
  double copies = (trainable ? 1.0 : 0.0) + (optimizer ? 2.0 : 0.0);  // gradients, AdamW m and v
  char what[1100];
  snprintf(what, sizeof what, "%s: %.0f parameters", source, P);
  return check_weights_and(c, P, copies * P * (double)sizeof(float), what);
}

// Bytes of the teacher's weights: bpp each, or its blocks at 2 bytes and
// one fp32 block to widen them into (ng_model_hold_bf16).
static int64_t teacher_bytes(const ng_model_config *teacher, const ng_plan_params *p, int64_t bpp,
                             bool bf16) {
  if (!bf16) return p->total * bpp;
  int64_t L = teacher->num_hidden_layers;
  int64_t io = ng_plan_count_params(teacher, L, false).trainable;  // all blocks frozen: the rest
  int64_t blocks = p->total - io;
  return io * bpp + 2 * blocks + (int64_t)sizeof(float) * (blocks / L);
}

// Whether the run's backend reads bf16 weights and keeps bf16 copies
// (ng_backend.bf16_weights: onednn bf16).
static bool bf16_copies(const ng_run_config *rc) {
  return strcmp(rc->backend, "onednn") == 0 && rc->precision == NG_PREC_BF16;
}

// Bytes of the bf16 copies of `linear` linear weights (ng_param.rounded).
static int64_t bf16_copy_bytes(const ng_run_config *rc, double linear) {
  return bf16_copies(rc) ? 2 * (int64_t)linear : 0;
}

// ---------------------------------------------------------------- FLOPs besides training

// A forward of model c (matmul parameters P) over B x T tokens: 2 P B T + A;
// without its head 2 V D B T less.
static double forward_flops(const ng_model_config *c, double P, int64_t B, int64_t T, bool head) {
  double N = (double)B * (double)T, h = head ? 0.0 : 2.0 * (double)c->vocab_size * (double)c->hidden_size * N;
  return 2.0 * P * N - h + ng_attention_flops(c, B, T);
}

// The head alone over B x T tokens.
static double head_flops(const ng_model_config *c, int64_t B, int64_t T) {
  return 2.0 * (double)c->vocab_size * (double)c->hidden_size * (double)B * (double)T;
}

// Evaluations of stage `stage`: every eval_every steps, at the end when the
// last step is not one of them, and before and after a growth.
static int64_t stage_evals(const ng_run_config *rc, int stage, bool grows) {
  int64_t first = 0;
  for (int i = 0; i < stage; i++) first += ng_stage_steps(rc, i);
  int64_t last = first + ng_stage_steps(rc, stage), e = rc->eval_every;
  int64_t n = last / e - first / e + (grows ? 2 : 0);
  if (stage == rc->n_stages - 1 && last % e != 0) n++;
  return n;
}

// out->recompute_flops, eval_flops, diag_flops, ablation_flops and evals of
// the stage (plan.h); sc: the student at the stage's depth, teacher NULL where
// it does not run.
static void flops_besides(const ng_run_config *rc, int stage, const ng_model_config *sc,
                          const ng_model_config *teacher, ng_plan_stage *out) {
  int64_t B = rc->batch, T = rc->seq, EB = rc->eval_batches * B, L = sc->num_hidden_layers;
  bool grows = stage > 0 && rc->stages[stage - 1].depth != sc->num_hidden_layers;
  double Ps = out->student.matmul, Pt = out->teacher.matmul;
  out->recompute_flops = rc->recompute ? (double)out->steps * forward_flops(sc, Ps, B, T, false) : 0.0;
  double t_eval = teacher ? forward_flops(teacher, Pt, EB, T, true) + head_flops(teacher, EB, T) : 0.0;
  out->evals = stage_evals(rc, stage, grows);
  double one = forward_flops(sc, Ps, EB, T, true) + t_eval;
  out->eval_flops = (double)out->evals * one;
  int64_t diagnosed = out->evals - (grows ? 1 : 0);  // the one before a growth has none
  out->diag_flops = (double)diagnosed * 2.0 * forward_flops(sc, Ps, EB, T, false);
  if (grows) {  // the evaluation before the growth, at the depth before
    ng_model_config before = *sc;
    before.num_hidden_layers = rc->stages[stage - 1].depth;
    double Pb = ng_plan_count_params(&before, 0, false).matmul;
    out->eval_flops += forward_flops(&before, Pb, EB, T, true) - forward_flops(sc, Ps, EB, T, true);
  }
  out->ablation_flops = 0.0;
  if (stage != rc->n_stages - 1) return;
  int64_t ablations = L;  // each block skipped, and each with an output norm reduced to its norms
  for (int64_t l = 0; l < L; l++) ablations += ng_block_layout_of(sc, l).output_norm;
  double intact = forward_flops(sc, Ps, EB, T, true) + (teacher ? head_flops(teacher, EB, T) : 0.0);
  double block = forward_flops(sc, Ps, EB, T, false) / (double)L;  // the blocks alike
  out->ablation_flops = (double)(1 + ablations) * intact - (double)ablations * block +
                        (teacher ? forward_flops(teacher, Pt, EB, T, false) : 0.0);
}

void ng_plan_stage_of(const ng_run_config *rc, int stage, const ng_model_config *teacher,
                      const ng_plan_device *dev, ng_plan_stage *out) {
  const ng_stage *st = &rc->stages[stage];
  ng_model_config sc = ng_stage_model(rc, stage);
  // The parser allows freeze_existing only on a stage that grows: the blocks
  // of the stage before are the frozen ones.
  int64_t frozen = st->freeze_existing ? rc->stages[stage - 1].depth : 0;
  int64_t B = rc->batch, T = rc->seq, mb = rc->micro_batch, bpp = dev->bytes_per_param;
  int64_t f32 = (int64_t)sizeof(float);
  int64_t chunk = rc->loss_chunk > 0 ? rc->loss_chunk : ng_loss_chunk_default(&sc, mb * T);
  chunk = chunk < mb * T ? chunk : mb * T;
  *out = (ng_plan_stage){.depth = st->depth, .tokens = st->tokens, .steps = ng_stage_steps(rc, stage),
                         .micro_batch = mb, .chunk = chunk, .recompute = rc->recompute,
                         .device_backend = ng_plan_device_backend(rc->backend)};
  out->student = ng_plan_count_params(&sc, frozen, rc->freeze_embeddings);
  out->weights = out->grads = out->student.total * bpp;
  out->weights += bf16_copy_bytes(rc, out->student.matmul);
  out->adamw = 2 * out->student.total * bpp;
  ng_acts_options train = {.for_backward = true, .recompute = rc->recompute, .chunk = chunk};
  ng_acts_options fwd = {.chunk = chunk};
  out->acts = f32 * ng_plan_acts_floats(&sc, mb, T, &train) +
              (bf16_copies(rc) ? 2 * ng_plan_acts_bf16(&sc, mb, T, &train) : 0);
  out->eval_acts = f32 * ng_plan_acts_floats(&sc, mb, T, &fwd);
  const ng_model_config *forward_teacher = rc->use_cache ? NULL : teacher;  // runs every step
  if (teacher) {
    out->teacher = ng_plan_count_params(teacher, 0, false);
    bool held = rc->teacher_bf16 && dev->teacher_bf16;  // its blocks' bits are their copies
    double linear = held ? ng_plan_count_params(teacher, teacher->num_hidden_layers, false).matmul_trainable
                         : out->teacher.matmul;
    out->teacher_weights = teacher_bytes(teacher, &out->teacher, bpp, held) + bf16_copy_bytes(rc, linear);
  }
  if (forward_teacher) out->teacher_acts = f32 * ng_plan_acts_floats(teacher, mb, T, &fwd);
  ng_plan_diag d = ng_plan_diag_parts(&sc, forward_teacher, rc->eval_batches * B * T, mb, T, chunk);
  out->diag = ng_plan_diag_bytes(&sc, forward_teacher, rc->eval_batches * B * T, mb, T, chunk);
  out->diag_device = d.points_device > d.ablation_device ? d.points_device : d.ablation_device;
  out->diag_host = d.points_host;
  out->checkpoint = 3 * out->student.total * f32;
  int64_t transient = out->diag > out->checkpoint ? out->diag : out->checkpoint;
  out->total = out->weights + out->grads + out->adamw + out->acts + out->eval_acts +
               out->teacher_weights + out->teacher_acts + transient + NG_PLAN_RUNTIME_BYTES;
  fit(dev, out);
  out->flops = ng_plan_step_flops(&sc, &out->student, forward_teacher, &out->teacher, B, T) * (double)out->steps;
  flops_besides(rc, stage, &sc, forward_teacher, out);
  double all = out->flops + out->recompute_flops + out->eval_flops + out->diag_flops + out->ablation_flops;
  out->seconds = all / ((double)dev->devices * dev->tflops * 1e12);
  double n = (double)dev->devices;
  out->comm_bytes = 2.0 * (n - 1.0) / n * (double)f32 * (double)out->student.trainable;
  out->comm_seconds = dev->bus_gbps > 0.0 ? (double)out->steps * out->comm_bytes / (dev->bus_gbps * 1e9) : 0.0;
}

// ---------------------------------------------------------------- teacher config file

int ng_plan_read_model_config(const char *path, ng_model_config *out) {
  char *text;
  if (ng_read_file(path, NG_MAX_CONFIG_BYTES, &text, NULL) != 0) return -1;
  cJSON *j = cJSON_Parse(text);
  int rc = j ? ng_model_config_parse(j, path, out) : ng_fail("%s: not valid JSON", path);
  cJSON_Delete(j);
  free(text);
  return rc;
}
