// Tests for ref/plan.c and `normgrow plan`: parameter counts of Qwen3-8B-Base
// and of the 9-layer student against hand computation; the memory formulas
// against what the reference really allocates (a backend that only counts);
// one stage's FLOPs and fit by hand; the paper configs (every arm parses, the
// study's token budgets); the command on every arm, with the teacher's config
// from a file, a Hugging Face directory and a checkpoint, and with bad options.
#include <cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"
#include "run_counts.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/optim.h"
#include "normgrow/plan.h"

static const char *root, *bin;
static char dir[64];

// ---------------------------------------------------------------- hand counts

// Qwen3-8B-Base, by hand:
//   embed_tokens  151936 x 4096                                 =   622,329,856
//   lm_head       151936 x 4096 (untied)                        =   622,329,856
//   one block     q_proj 4096 x 4096                            =    16,777,216
//                 k_proj, v_proj 1024 x 4096 (8 kv heads x 128) =  2 x 4,194,304
//                 o_proj 4096 x 4096                            =    16,777,216
//                 q_norm, k_norm 128 each                       =           256
//                 input_ and post_attention_layernorm 4096 each =         8,192
//                 gate_, up_, down_proj 4096 x 12288 each       = 3 x 50,331,648
//                                                               =   192,946,432
//   36 blocks                                                   = 6,946,071,552
//   final norm                                                  =         4,096
//   total                                                       = 8,190,735,360
#define EMBED (151936LL * 4096)
#define BLOCK_MATMUL (4096LL * 4096 + 2 * 1024LL * 4096 + 4096LL * 4096 + 3 * 4096LL * 12288)
#define BLOCK (BLOCK_MATMUL + 2 * 128 + 2 * 4096)
#define IO (2 * EMBED + 4096)  // embeddings, head, final norm

static ng_model_config qwen3_8b(void) {
  return (ng_model_config){.vocab_size = 151936, .hidden_size = 4096, .intermediate_size = 12288,
                           .num_hidden_layers = 36, .num_attention_heads = 32,
                           .num_key_value_heads = 8, .head_dim = 128, .rope_theta = 1e6,
                           .rms_norm_eps = 1e-6, .tie_word_embeddings = false, .final_norm = true,
                           .norm_placement = NG_NORM_PRE};
}

static bool same_config(const ng_model_config *a, const ng_model_config *b) {
  return a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
         a->intermediate_size == b->intermediate_size && a->num_hidden_layers == b->num_hidden_layers &&
         a->num_attention_heads == b->num_attention_heads &&
         a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim &&
         // exact: the same decimal numbers, read by strtod and by the compiler
         a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps &&
         a->tie_word_embeddings == b->tie_word_embeddings && a->final_norm == b->final_norm &&
         a->norm_placement == b->norm_placement;
}

static ng_model_config student(ng_norm_placement placement) {
  ng_model_config c = qwen3_8b();
  c.num_hidden_layers = 9;
  c.norm_placement = placement;
  return c;
}

static void test_hand_counts(void) {
  CHECK(BLOCK == 192946432LL && IO == 1244663808LL, "hand count: one block, embeddings + head + norm",
        "%lld, %lld", BLOCK, IO);
  ng_model_config t = qwen3_8b();
  ng_plan_params p = ng_plan_count_params(&t, 0, false);
  CHECK(p.total == 8190735360LL && p.total == 36 * BLOCK + IO && p.trainable == p.total,
        "Qwen3-8B-Base: 8,190,735,360 parameters", "%lld", (long long)p.total);
  // Matmul parameters: every block's projections and the untied head (the
  // embedding is a gather): 36 x 192,937,984 + 622,329,856 = 7,568,097,280.
  // exact: whole numbers below 2^53
  CHECK(p.matmul == 7568097280.0 && p.matmul == 36.0 * BLOCK_MATMUL + EMBED,
        "Qwen3-8B-Base: 7,568,097,280 matmul parameters", "%.0f", p.matmul);
  ng_model_config file_cfg;
  char path[600];
  snprintf(path, sizeof path, "%s/configs/paper/qwen3-8b-base.json", root);
  int rc = ng_plan_read_model_config(path, &file_cfg);
  CHECK(rc == 0 && same_config(&file_cfg, &t), "configs/paper/qwen3-8b-base.json is Qwen3-8B-Base",
        "%s", rc ? ng_error() : "fields differ");

  // The student: 9 blocks of the teacher's shape, untied head.
  //   9 x 192,946,432 + 1,244,663,808 = 1,736,517,888 + 1,244,663,808 = 2,981,181,696.
  // Post-Norm trades input_layernorm for post_feedforward_layernorm: the same count.
  for (int post = 0; post <= 1; post++) {
    ng_model_config s = student(post ? NG_NORM_POST : NG_NORM_PRE);
    ng_plan_params q = ng_plan_count_params(&s, 0, false);
    CHECK(q.total == 2981181696LL && q.total == 9 * BLOCK + IO,
          post ? "Post-Norm student: 2,981,181,696 parameters" : "Pre-Norm student: 2,981,181,696 parameters",
          "%lld", (long long)q.total);
  }
  ng_model_config s = student(NG_NORM_POST);
  ng_plan_params io = ng_plan_count_params(&s, 0, true), blocks = ng_plan_count_params(&s, 6, false);
  // exact, here and in the next check: whole numbers below 2^53
  CHECK(io.trainable == 9 * BLOCK && io.total == 9 * BLOCK + IO && io.matmul_trainable == 9.0 * BLOCK_MATMUL,
        "frozen embeddings, final norm and head", "%lld trainable", (long long)io.trainable);
  CHECK(blocks.trainable == 3 * BLOCK + IO && blocks.matmul_trainable == 3.0 * BLOCK_MATMUL + EMBED,
        "6 of 9 blocks frozen", "%lld trainable", (long long)blocks.trainable);
}

// ---------------------------------------------------------------- memory vs the reference

// A backend that only adds up what it is asked to allocate; the pointers it
// hands out are never dereferenced by the calls below.
static size_t g_counted;
static void *count_alloc(ng_backend *be, size_t bytes) {
  (void)be;
  g_counted += bytes;
  return &g_counted;
}
static void count_free(ng_backend *be, void *p) {
  (void)be;
  (void)p;
}
static ng_backend g_counting = {.name = "count", .alloc = count_alloc, .free = count_free};

static ng_model_config toy(ng_norm_placement placement, bool tied, bool final_norm, int64_t kv) {
  return (ng_model_config){.vocab_size = 37, .hidden_size = 24, .intermediate_size = 40,
                           .num_hidden_layers = 3, .num_attention_heads = 4,
                           .num_key_value_heads = kv, .head_dim = 8, .rope_theta = 1e4,
                           .rms_norm_eps = 1e-6, .tie_word_embeddings = tied,
                           .final_norm = final_norm, .norm_placement = placement};
}

static void check_allocations(const char *name, const ng_model_config *c) {
  const int64_t B = 2, T = 5, f32 = 4;
  ng_plan_params p = ng_plan_count_params(c, 0, false);
  g_counted = 0;
  ng_model *m = ng_model_create(&g_counting, c, true);
  size_t model_bytes = g_counted;
  g_counted = 0;
  ng_adamw *opt = ng_adamw_create(m);
  size_t adamw_bytes = g_counted;
  g_counted = 0;
  ng_acts_options o_train = {.for_backward = true}, o_fwd = {0}, o_rec = {.for_backward = true, .recompute = true, .chunk = 3},
                  o_fchunk = {.chunk = 1};
  ng_acts *train = ng_acts_create_with(m, B, T, &o_train);
  size_t train_bytes = g_counted;
  g_counted = 0;
  ng_acts *fwd = ng_acts_create_with(m, B, T, &o_fwd);
  size_t fwd_bytes = g_counted;
  g_counted = 0;
  ng_acts *rec = ng_acts_create_with(m, B, T, &o_rec);
  size_t rec_bytes = g_counted;
  g_counted = 0;
  ng_acts *fchunk = ng_acts_create_with(m, B, T, &o_fchunk);
  size_t fchunk_bytes = g_counted;
  ng_acts_free(m, fchunk);
  ng_acts_free(m, rec);
  ng_acts_free(m, fwd);
  ng_acts_free(m, train);
  ng_adamw_free(m, opt);
  ng_model_free(m);
  int64_t kept = ng_plan_acts_floats(c, B, T, &o_train), recompute = ng_plan_acts_floats(c, B, T, &o_rec);
  char label[160];
  snprintf(label, sizeof label, "%s: weights + gradients, AdamW moments, activations as allocated", name);
  CHECK(model_bytes == (size_t)(2 * p.total * f32) && adamw_bytes == (size_t)(2 * p.total * f32) &&
            train_bytes == (size_t)(f32 * kept) &&
            fwd_bytes == (size_t)(f32 * ng_plan_acts_floats(c, B, T, &o_fwd)),
        label, "model %zu vs %lld, adamw %zu, train %zu vs %lld, forward %zu", model_bytes,
        (long long)(2 * p.total * f32), adamw_bytes, train_bytes, (long long)(f32 * kept), fwd_bytes);
  snprintf(label, sizeof label, "%s: recompute and loss chunks as allocated", name);
  CHECK(rec_bytes == (size_t)(f32 * recompute) &&
            fchunk_bytes == (size_t)(f32 * ng_plan_acts_floats(c, B, T, &o_fchunk)),
        label, "recompute %zu vs %lld, forward chunk 1 %zu", rec_bytes, (long long)(f32 * recompute),
        fchunk_bytes);
  snprintf(label, sizeof label, "%s: recompute keeps one set of block values, chunks 3 of %lld rows of logits", name,
           (long long)(B * T));
  int64_t own = 0;  // every block's own values, kept without recompute
  for (int64_t l = 0; l < c->num_hidden_layers; l++) own += ng_plan_block_floats(c, l, l, B * T);
  CHECK(kept - recompute == own - ng_plan_block_floats(c, 0, c->num_hidden_layers - 1, B * T) +
                                2 * (B * T - 3) * c->vocab_size,
        label, "%lld vs %lld", (long long)kept, (long long)recompute);
  // A backend that reads bf16 weights: the training sets also hold the linear
  // inputs' bf16 copies (per token 2 D + H hd + F a block set, D the head)
  ng_backend bf16 = g_counting;
  bf16.bf16_weights = true;
  m = ng_model_create(&bf16, c, true);
  int64_t per_set = 2 * c->hidden_size + c->num_attention_heads * c->head_dim + c->intermediate_size;
  size_t got[3];
  const ng_acts_options *opts[3] = {&o_train, &o_rec, &o_fwd};
  for (int i = 0; i < 3; i++) {
    g_counted = 0;
    ng_acts *a = ng_acts_create_with(m, B, T, opts[i]);
    got[i] = g_counted;
    ng_acts_free(m, a);
  }
  ng_model_free(m);
  int64_t L = c->num_hidden_layers, D = c->hidden_size;
  snprintf(label, sizeof label, "%s: the linear inputs' bf16 copies as allocated", name);
  CHECK(ng_plan_acts_bf16(c, B, T, &o_train) == B * T * (L * per_set + D) &&
            ng_plan_acts_bf16(c, B, T, &o_rec) == B * T * (per_set + D) &&
            ng_plan_acts_bf16(c, B, T, &o_fwd) == 0 &&
            got[0] == (size_t)(f32 * kept + 2 * B * T * (L * per_set + D)) &&
            got[1] == (size_t)(f32 * recompute + 2 * B * T * (per_set + D)) &&
            got[2] == fwd_bytes,
        label, "train %zu, recompute %zu, forward %zu", got[0], got[1], got[2]);
}

static void test_allocations(void) {
  ng_model_config a = toy(NG_NORM_PRE, false, true, 2), b = toy(NG_NORM_POST, true, false, 1),
                  c = toy(NG_NORM_POST, false, true, 4);
  check_allocations("pre, untied, final norm, GQA", &a);
  check_allocations("post, tied, no final norm, MQA", &b);
  check_allocations("post, untied, final norm, MHA", &c);
  ng_model_config sandwich = toy(NG_NORM_SANDWICH, true, true, 2), deepnorm = toy(NG_NORM_DEEPNORM, false, true, 1),
                  mixln = toy(NG_NORM_MIXLN, false, false, 2), lns = toy(NG_NORM_LNS, true, false, 4);
  deepnorm.deepnorm_alpha = 1.5;
  mixln.mixln_post_layers = 2;  // post and pre blocks: one set of saved values serves both
  check_allocations("sandwich, tied, final norm, GQA", &sandwich);
  check_allocations("deepnorm, untied, final norm, MQA", &deepnorm);
  check_allocations("mixln, untied, no final norm, GQA", &mixln);
  check_allocations("lns, tied, no final norm, MHA", &lns);
  ng_model_config d = toy(NG_NORM_PRE, true, true, 2);
  d.layer_scale = true;
  check_allocations("pre, layer scale, tied, final norm, GQA", &d);
  sandwich.layer_scale = mixln.layer_scale = true;
  check_allocations("sandwich, layer scale, tied, final norm, GQA", &sandwich);
  check_allocations("mixln, layer scale, untied, no final norm, GQA", &mixln);
}

// ---------------------------------------------------------------- one stage by hand

static int load_arm(const char *name, ng_run_config *rc) {
  char rel[256];
  snprintf(rel, sizeof rel, "paper/%s", name);
  return load_config(root, rel, rc);
}

// The JSON of the file "<root>/<name>".
static cJSON *read_json(const char *name) {
  char path[600], text[16384];
  snprintf(path, sizeof path, "%s/%s", root, name);
  FILE *f = fopen(path, "rb");
  NG_ASSERT(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  cJSON *j = cJSON_Parse(text);
  NG_ASSERT(j);
  return j;
}

// Parse an edited run config; prints why not.
static int parse_run(const cJSON *j, ng_run_config *rc) {
  char *text = cJSON_Print(j);
  int r = ng_run_config_parse(text, "edited run", rc);
  if (r) printf("# %s\n", ng_error());
  free(text);
  return r;
}

// What runs besides training in grow-post's last stage (9 blocks, grown from 6),
// by hand: eval E = 8 x 256 x 2048 tokens, P the student's matmul parameters
// (VD of them the head), Pt the teacher's; evaluations at steps 4000, 4250, ...,
// 5750 (8), at the end (5931 is not a multiple of 250) and before and after the
// growth (the one before at depth 6, without diagnostics).
static void check_besides(const ng_plan_stage *s, bool recompute) {
  double E = 8.0 * 524288.0, N = 524288.0, VD = 151936.0 * 4096.0, Pt = 7568097280.0;
  double P9 = 9.0 * BLOCK_MATMUL + EMBED, P6 = 6.0 * BLOCK_MATMUL + EMBED;
  double Ae = 4.0 * 128 * 32 * (2048.0 * 2049.0 / 2.0) * 8 * 256;  // one layer over E
  double A1 = Ae / 8.0;                                            // over one step's N
  double teacher = 2.0 * Pt * E + 36 * Ae, head = 2.0 * VD * E;
  double eval = 10 * (2.0 * P9 * E + 9 * Ae + teacher + head) + (2.0 * P6 * E + 6 * Ae + teacher + head);
  double points = 2.0 * (2.0 * (P9 - VD) * E + 9 * Ae);
  double block = 2.0 * BLOCK_MATMUL * E + Ae;  // the student's blocks alike
  double ablation = 19 * (2.0 * P9 * E + 9 * Ae + head) - 18 * block + 2.0 * (Pt - VD) * E + 36 * Ae;
  double rec = recompute ? 1977.0 * (2.0 * (P9 - VD) * N + 9 * A1) : 0.0;
  CHECK(s->evals == 11 && fabs(s->eval_flops - eval) <= 1e-12 * eval &&
            fabs(s->diag_flops - 10 * points) <= 1e-12 * points &&
            fabs(s->ablation_flops - ablation) <= 1e-12 * ablation &&
            fabs(s->recompute_flops - rec) <= 1e-12 * (rec + 1.0),
        recompute ? "grow-post stage 3 with recompute: evaluations, diagnostics, ablation and recompute FLOPs by hand"
                  : "grow-post stage 3: evaluations, diagnostics and ablation FLOPs by hand, no recompute",
        "%lld evals, %.6e vs %.6e, %.6e vs %.6e, %.6e vs %.6e, %.6e vs %.6e", (long long)s->evals,
        s->eval_flops, eval, s->diag_flops, 10 * points, s->ablation_flops, ablation, s->recompute_flops, rec);
}

static void test_stage(void) {
  ng_run_config rc;
  if (load_arm("grow-post", &rc)) {
    CHECK(false, "stage plan of grow-post", "config does not load");
    return;
  }
  // The whole batch in one micro-batch, the default loss chunk, in host memory.
  rc.micro_batch = 256;
  rc.loss_chunk = 0;
  snprintf(rc.backend, sizeof rc.backend, "cpu");
  ng_model_config t = qwen3_8b();
  ng_plan_device dev = {400.0, 80.0, 1, 4, false, 0.0};
  ng_plan_stage s;
  ng_plan_stage_of(&rc, 2, &t, &dev, &s);
  // One step at 256 x 2048 = 524,288 tokens: student 6 P N + 3 A_s, teacher 2 P_t N + A_t,
  // A = 4 hd H T(T+1)/2 B L; P = 9 x 192,937,984 + 622,329,856 (head) = 2,358,771,712.
  double N = 524288.0, P = 2358771712.0, Pt = 7568097280.0;
  double A1 = 4.0 * 128 * 32 * (2048.0 * 2049.0 / 2.0) * 256;  // one layer's forward attention
  double step = 6.0 * P * N + 3.0 * 9 * A1 + 2.0 * Pt * N + 36 * A1;
  double all = s.flops + s.eval_flops + s.diag_flops + s.ablation_flops + s.recompute_flops;
  CHECK(s.steps == 1977 && fabs(s.flops - 1977 * step) <= 1e-12 * s.flops &&
            fabs(s.seconds - all / 400e12) <= 1e-12 * s.seconds,
        "grow-post stage 3: FLOPs by hand, time of all of them", "%lld steps, %.6e vs %.6e FLOPs",
        (long long)s.steps, s.flops, 1977 * step);
  check_besides(&s, false);
  int64_t total = s.weights + s.grads + s.adamw + s.acts + s.eval_acts + s.teacher_weights +
                  s.teacher_acts + (s.diag > s.checkpoint ? s.diag : s.checkpoint) + NG_PLAN_RUNTIME_BYTES;
  CHECK(s.weights == 4 * (9 * BLOCK + IO) && s.adamw == 2 * s.weights &&
            s.checkpoint == 3 * s.weights && s.chunk == ng_loss_chunk_default(&rc.model, 524288) &&
            s.teacher_weights == 4 * 8190735360LL && s.total == total && s.per_device == total &&
            s.zero == 0 && !s.fits && s.devices_needed == 0,
        "grow-post stage 2: memory sums, does not fit on one 80 GiB device, nor on many (what every "
        "device holds exceeds one)", "total %lld, %lld devices",
        (long long)s.total, (long long)s.devices_needed);
  // Qwen3-8B-Base held in bf16: 36 blocks of 192,946,432 at 2 bytes, one more
  // fp32 block to widen into, embeddings, head and final norm (1,244,663,808) at 4.
  ng_plan_device bf16 = dev;
  bf16.teacher_bf16 = true;
  ng_plan_stage h;
  ng_plan_stage_of(&rc, 2, &t, &bf16, &h);
  CHECK(h.teacher_weights == 19642584064LL && h.total == s.total - (s.teacher_weights - h.teacher_weights),
        "Qwen3-8B-Base teacher held in bf16: weights by hand", "%lld bytes", (long long)h.teacher_weights);
  // On onednn bf16 the linear weights' bf16 copies besides, 2 bytes each: the
  // student's P, the teacher's Pt, a held teacher's head alone (151936 x 4096);
  // and the training activations' copies of the linear inputs: per token, each
  // of the 9 blocks 2 x 4096 + 32 x 128 + 12288 and the head 4096.
  ng_run_config rb = rc;
  snprintf(rb.backend, sizeof rb.backend, "onednn");
  rb.precision = NG_PREC_BF16;
  ng_plan_stage o, oh;
  ng_plan_stage_of(&rb, 2, &t, &dev, &o);
  ng_plan_stage_of(&rb, 2, &t, &bf16, &oh);
  int64_t inputs = 2 * s.micro_batch * 2048 * (9 * 24576 + 4096);
  CHECK(o.weights == s.weights + 2 * (int64_t)P && o.teacher_weights == s.teacher_weights + 2 * (int64_t)Pt &&
            oh.teacher_weights == h.teacher_weights + 2 * 622329856LL && o.grads == s.grads &&
            o.acts == s.acts + inputs && o.eval_acts == s.eval_acts &&
            o.total == s.total + 2 * (int64_t)(P + Pt) + inputs,
        "onednn bf16: the bf16 copies of the student's and teacher's linear weights (a held teacher: "
        "its head) and of the student's linear inputs by hand",
        "weights +%lld, teacher +%lld, held teacher +%lld, acts +%lld",
        (long long)(o.weights - s.weights), (long long)(o.teacher_weights - s.teacher_weights),
        (long long)(oh.teacher_weights - h.teacher_weights), (long long)(o.acts - s.acts));
  // Data parallel on 64 devices, micro-batches of 8 rows, recompute: the moments
  // sharded, the ZeRO buffers (one parameter's staging: the largest is the
  // embedding, and the reduced gradients of the device's slices).
  ng_plan_device many = {400.0, 80.0, 64, 2, false, 0.0};
  ng_plan_stage r;
  rc.recompute = true;
  rc.micro_batch = 8;
  ng_plan_stage_of(&rc, 2, &t, &many, &r);
  check_besides(&r, true);
  int64_t slice = (EMBED + 63) / 64, P9 = 9 * BLOCK + IO;
  int64_t zero = 4 * (64 * slice + slice + (P9 + 63) / 64), adamw = (4 * P9 + 63) / 64;
  int64_t ckpt = r.checkpoint > r.diag ? r.checkpoint : r.diag;
  int64_t each = r.weights + r.grads + adamw + zero + r.acts + r.eval_acts + r.teacher_weights +
                r.teacher_acts + ckpt + NG_PLAN_RUNTIME_BYTES;
  double r_all = r.flops + r.eval_flops + r.diag_flops + r.ablation_flops + r.recompute_flops;
  CHECK(r.weights == 2 * P9 && r.acts < s.acts && r.student.largest == EMBED && r.zero == zero &&
            r.adamw_per_device == adamw && r.per_device == each && r.host == 0 &&
            fabs(r.per_device_gib * 1073741824.0 - (double)each) < 1.0 &&
            fabs(r.seconds * 64 * 400e12 - r_all) <= 1e-9 * r_all && r.recompute_flops > 0.0,
        "64 devices, 2 bytes per parameter, recompute: per device by hand (ZeRO-1)",
        "%.1f GiB per device", r.per_device_gib);
  // The ZeRO-1 step's communication: every parameter trains here, so each device
  // sends 2 x 63/64 x 4 bytes of each per step; its time at a bus bandwidth of 100
  // GB/s; nothing on one device, no time without a bandwidth.
  ng_plan_device bus = many;
  bus.bus_gbps = 100.0;
  ng_plan_stage q;
  ng_plan_stage_of(&rc, 2, &t, &bus, &q);
  double sent = 2.0 * 63.0 / 64.0 * 4.0 * (double)P9;
  // the zeros exactly: nothing is sent on one device, no time is given without a bandwidth
  CHECK(r.student.trainable == P9 && fabs(r.comm_bytes - sent) <= 1e-9 * sent && r.comm_seconds == 0.0 &&
            fabs(q.comm_seconds - 1977.0 * sent / 100e9) <= 1e-9 * q.comm_seconds && s.comm_bytes == 0.0 &&
            s.comm_seconds == 0.0,
        "64 devices: the ZeRO-1 step's bytes per device and step by hand, their time at 100 GB/s",
        "%.6e bytes (want %.6e), %.3f s", r.comm_bytes, sent, q.comm_seconds);
  // The fewest devices of 90 GiB: the stage fits on devices_needed and not on one fewer.
  ng_plan_device big = {400.0, 90.0, 1, 2, false, 0.0};
  ng_plan_stage one_big;
  ng_plan_stage_of(&rc, 2, &t, &big, &one_big);
  ng_plan_device need = big, fewer = big;
  need.devices = one_big.devices_needed > 0 ? one_big.devices_needed : 1;
  fewer.devices = need.devices > 1 ? need.devices - 1 : 1;
  ng_plan_stage a, b;
  ng_plan_stage_of(&rc, 2, &t, &need, &a);
  ng_plan_stage_of(&rc, 2, &t, &fewer, &b);
  CHECK(one_big.devices_needed > 1 && a.fits && !b.fits,
        "the fewest devices of 90 GiB the stage fits on", "%lld devices (%.1f GiB on one)",
        (long long)one_big.devices_needed, one_big.per_device_gib);
  // On a device backend (cuda) the host's parts are apart: each device holds the
  // weights, gradients, its moments and buffers, activations, teacher and the
  // diagnostics' device sets; rank 0's host the larger of a checkpoint's copy
  // and the diagnostics' host arrays, and the program.
  snprintf(rc.backend, sizeof rc.backend, "cuda");
  ng_plan_stage g;
  ng_plan_stage_of(&rc, 2, &t, &many, &g);
  int64_t held = g.weights + g.grads + adamw + zero + g.acts + g.eval_acts + g.teacher_weights + g.teacher_acts;
  int64_t host = (g.checkpoint > g.diag_host ? g.checkpoint : g.diag_host) + NG_PLAN_RUNTIME_BYTES;
  ng_plan_diag d = ng_plan_diag_parts(&rc.model, &t, 8 * 524288, 8, 2048, g.chunk);
  CHECK(g.device_backend && g.per_device == held + g.diag_device && g.host == host &&
            g.diag_device == (d.points_device > d.ablation_device ? d.points_device : d.ablation_device) &&
            g.diag_host == d.points_host && g.diag == ng_plan_diag_bytes(&rc.model, &t, 8 * 524288, 8, 2048, g.chunk) &&
            g.total == r.total && g.per_device < r.per_device,
        "cuda: device and host memory apart (the checkpoint's copy and the diagnostics' arrays on the host)",
        "device %lld vs %lld, host %lld vs %lld", (long long)g.per_device, (long long)(held + g.diag_device),
        (long long)g.host, (long long)host);
  ng_run_config_free(&rc);

  // The same stage distilled from top-k caches: the teacher is loaded (for its
  // "teacher" path) but never runs.
  cJSON *j = read_json("configs/paper/grow-post.json");
  cJSON *cache = cJSON_AddObjectToObject(j, "teacher_cache");
  cJSON_AddStringToObject(cache, "train", "train.topk");
  cJSON_AddStringToObject(cache, "val", "val.topk");
  ng_plan_stage c = {0};
  int parsed = parse_run(j, &rc);
  if (parsed == 0) {
    ng_plan_stage_of(&rc, 2, &t, &dev, &c);
    ng_run_config_free(&rc);
  }
  double teacher_step = 2.0 * Pt * N + 36 * A1;
  CHECK(parsed == 0 && c.teacher_acts == 0 && c.teacher_weights == s.teacher_weights &&
            fabs(c.flops - (s.flops - 1977 * teacher_step)) <= 1e-12 * s.flops,
        "top-k caches: no teacher forward, no teacher activations", "%.6e FLOPs", c.flops);
  cJSON_Delete(j);
}

// Toy grow-post with stage 1 freezing the blocks of stage 0 and frozen embeddings.
static void test_freezing(void) {
  cJSON *j = read_json("configs/toy/grow-post.json");
  cJSON_AddTrueToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stages"), 1), "freeze_existing");
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "init"), "freeze_embeddings", cJSON_CreateTrue());
  ng_run_config rc;
  ng_plan_device dev = {400.0, 80.0, 1, 4, false, 0.0};
  ng_plan_stage s[3] = {{0}};
  int r = parse_run(j, &rc);
  if (r == 0) {
    for (int i = 0; i < 3; i++) ng_plan_stage_of(&rc, i, NULL, &dev, &s[i]);
    ng_run_config_free(&rc);
  }
  // Blocks all have one size: stage 0 (2 blocks) trains both, stage 1 (4) only
  // the 2 new ones, stage 2 (6) all 6 again; embeddings and head never.
  int64_t block = (s[1].student.total - s[0].student.total) / 2;
  int64_t io = s[0].student.total - 2 * block;
  CHECK(r == 0 && s[0].student.trainable == 2 * block && s[1].student.trainable == 2 * block &&
            s[2].student.trainable == 6 * block && s[2].student.total == 6 * block + io,
        "trainable: freeze_existing lasts one growing stage, frozen embeddings always", "counts differ");
  cJSON_Delete(j);
}

// ---------------------------------------------------------------- the paper configs

static const char *const arms[] = {"joint-pre", "joint-post", "grow-pre", "grow-post",
                                   "control-extra-tokens", "control-layer-tokens",
                                   "control-lr-restarts"};
#define N_ARMS (int)(sizeof arms / sizeof arms[0])

static void test_every_config_parses(void) {
  char pattern[600];
  snprintf(pattern, sizeof pattern, "%s/configs/paper/*.json", root);
  glob_t g;
  NG_ASSERT(glob(pattern, 0, NULL, &g) == 0);
  int n_arms = 0;
  for (size_t i = 0; i < g.gl_pathc; i++) {
    const char *path = g.gl_pathv[i], *base = strrchr(path, '/') + 1;
    if (strcmp(base, "qwen3-8b-base.json") == 0) continue;  // the teacher's model config
    ng_run_config rc;
    int r = ng_run_config_load(path, NULL, &rc);
    char label[200];
    snprintf(label, sizeof label, "configs/paper/%s parses", base);
    CHECK(r == 0, label, "%s", ng_error());
    if (r == 0) ng_run_config_free(&rc);
    n_arms++;
  }
  globfree(&g);
  CHECK(n_arms == N_ARMS, "configs/paper holds the seven arms", "%d run configs", n_arms);
}

// The study's design: 3.11e9 tokens in batches of 524,288; growth 3 -> 6 -> 9
// in equal thirds; the controls at depth 9 with 4/3 of the tokens, the growing
// run's layer-tokens, and three restarted schedules.
static void test_study_design(void) {
  ng_run_config rc[N_ARMS];
  bool ok = true;
  for (int i = 0; i < N_ARMS; i++) ok = load_arm(arms[i], &rc[i]) == 0 && ok;
  if (!ok) {
    CHECK(false, "study design", "an arm does not load");
    return;
  }
  ng_model_config width = qwen3_8b();
  bool same = true;
  for (int i = 0; i < N_ARMS; i++) {
    ng_model_config m = rc[i].model;
    m.num_hidden_layers = width.num_hidden_layers;
    m.norm_placement = width.norm_placement;
    same = same && same_config(&m, &width) && rc[i].model.num_hidden_layers == 9 &&
           rc[i].distill && strcmp(rc[i].teacher_path, "runs/paper/qwen3-8b-base") == 0 &&
           rc[i].batch * rc[i].seq == 524288;
  }
  CHECK(same, "every arm: a 9-block student of the teacher's shape, batch 524,288 tokens", "an arm differs");
  const ng_run_config *jpre = &rc[0], *jpost = &rc[1], *gpre = &rc[2], *gpost = &rc[3];
  const ng_run_config *extra = &rc[4], *layer = &rc[5], *restarts = &rc[6];
  int64_t total = run_tokens(jpost);
  CHECK(llabs(total - 3110000000LL) < 3 * 524288 && run_tokens(jpre) == total &&
            run_tokens(gpre) == total && run_tokens(gpost) == total && run_tokens(restarts) == total,
        "joint, growing and restart arms: 3.11e9 tokens", "%lld", (long long)total);
  bool thirds = gpost->n_stages == 3 && gpre->n_stages == 3 && restarts->n_stages == 3;
  for (int i = 0; thirds && i < 3; i++)
    thirds = gpost->stages[i].depth == 3 * (i + 1) && gpre->stages[i].depth == 3 * (i + 1) &&
             gpost->stages[i].tokens == total / 3 && restarts->stages[i].depth == 9 &&
             restarts->stages[i].restart_lr;
  CHECK(thirds, "growth 3 -> 6 -> 9 in thirds; restarts at depth 9", "stages differ");
  CHECK(run_tokens(extra) * 3 == 4 * total && layer_tokens(layer) == layer_tokens(gpost) &&
            layer->n_stages == 1 && extra->n_stages == 1,
        "controls: 4/3 of the tokens; the growing run's layer-tokens at depth 9",
        "%lld tokens, %lld layer-tokens", (long long)run_tokens(extra), (long long)layer_tokens(layer));
  CHECK(gpre->model.norm_placement == NG_NORM_PRE && jpre->model.norm_placement == NG_NORM_PRE &&
            gpost->model.norm_placement == NG_NORM_POST && extra->model.norm_placement == NG_NORM_POST,
        "placements: pre arms Pre-Norm, post arms and controls Post-Norm", "placement differs");
  for (int i = 0; i < N_ARMS; i++) ng_run_config_free(&rc[i]);
}

// ---------------------------------------------------------------- the command

typedef struct {
  int status;          // exit status, -1 if it did not exit
  int err_lines;
  char err[1024];      // first stderr line
  char out[16384];     // stdout (cut)
} run_result;

static void read_into(const char *path, char *buf, size_t n, int *lines) {
  FILE *f = fopen(path, "r");
  size_t got = f ? fread(buf, 1, n - 1, f) : 0;
  buf[got] = 0;
  if (f) fclose(f);
  if (lines) {
    *lines = 0;
    for (size_t i = 0; i < got; i++) *lines += buf[i] == '\n';
  }
}

// `normgrow plan ARGS` from the repository root.
static run_result run_plan(const char *args) {
  char cmd[2048], out[128], err[128];
  snprintf(out, sizeof out, "%s/stdout", dir);
  snprintf(err, sizeof err, "%s/stderr", dir);
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s' plan %s >'%s' 2>'%s'", root, bin, args, out, err);
  int status = system(cmd);
  run_result r = {.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1};
  read_into(out, r.out, sizeof r.out, NULL);
  read_into(err, r.err, sizeof r.err, &r.err_lines);
  r.err[strcspn(r.err, "\n")] = 0;
  return r;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  NG_ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

// A copy of run config `src` (under the root) with another teacher path, written to `dst`.
static void with_teacher(const char *src, const char *teacher, const char *dst) {
  cJSON *j = read_json(src);
  cJSON_ReplaceItemInObject(j, "teacher", cJSON_CreateString(teacher));
  char *out = cJSON_Print(j);
  write_text(dst, out);
  free(out);
  cJSON_Delete(j);
}

// Stages listed under "settings that fit" in a plan's output, and those of
// them with a setting; *in_order: the k-th listed is "stage k" (numbered from 1).
static void count_fitting(const char *out, int *listed, int *found, bool *in_order) {
  const char *at = strstr(out, "settings that fit");
  *listed = *found = 0;
  *in_order = true;
  for (const char *line = at; line && (line = strstr(line, "\n  stage ")); line++) {
    (*listed)++;
    *in_order = *in_order && strtol(line + 9, NULL, 10) == *listed;
    const char *end = strchr(line + 1, '\n');
    const char *mb = strstr(line, "micro_batch");
    *found += mb && (!end || mb < end) && !strstr(line, ": none;");
  }
}

static void test_every_arm_plans(void) {
  for (int i = 0; i < N_ARMS; i++) {
    char args[1024], label[200];
    snprintf(args, sizeof args, "configs/paper/%s.json --teacher-config configs/paper/qwen3-8b-base.json", arms[i]);
    run_result r = run_plan(args);
    snprintf(label, sizeof label, "plan %s with the teacher's config", arms[i]);
    CHECK(r.status == 0 && r.err_lines == 0 && strstr(r.out, "8,190,735,360") && strstr(r.out, "total") &&
              strstr(r.out, "does NOT fit"),
          label, "status %d, stderr: %s", r.status, r.err);
    // The whole batch in one micro-batch on one 139 GiB H200, the teacher in bf16: for
    // every stage a setting that fits.
    snprintf(args, sizeof args, "configs/paper/%s.json --teacher-config configs/paper/qwen3-8b-base.json "
             "--device-memory 139 --micro-batch 256", arms[i]);
    r = run_plan(args);
    ng_run_config rc;
    NG_ASSERT(load_arm(arms[i], &rc) == 0);
    int listed, found;
    bool in_order;
    count_fitting(r.out, &listed, &found, &in_order);
    snprintf(label, sizeof label,
             "plan %s, micro-batch 256, on one 139 GiB device: a fitting setting for each of its %d stages, numbered from 1",
             arms[i], rc.n_stages);
    CHECK(r.status == 0 && strstr(r.out, "blocks held in bf16") && listed == rc.n_stages && found == listed &&
              in_order,
          label, "%d stages listed, %d with a setting, %s", listed, found, in_order ? "1, 2, ..." : "misnumbered");
    bool one_device_comm = strstr(r.out, "communication of the ZeRO-1 step") != NULL;
    snprintf(args, sizeof args, "configs/paper/%s.json --teacher-config configs/paper/qwen3-8b-base.json "
             "--devices 8 --bus-gbps 200", arms[i]);
    r = run_plan(args);
    snprintf(label, sizeof label, "plan %s on 8 devices: the ZeRO-1 communication at 200 GB/s (none on one)", arms[i]);
    CHECK(r.status == 0 && !one_device_comm && strstr(r.out, "communication of the ZeRO-1 step on each of 8 devices") &&
              strstr(r.out, "bus bandwidth of 200 GB/s") && strstr(r.out, "hours with compute"),
          label, "status %d, stderr: %s", r.status, r.err);
    ng_run_config_free(&rc);
  }
}

// Every paper arm as shipped (reading A and B, continued-lr, the 3.09 B student)
// runs on cuda in bf16 and fits 8 H200 of 139 GiB at every stage with a fifth of
// each device to spare (backend scratch, the CUDA context), the Qwen3-8B-Base
// teacher held in bf16.
static void test_paper_configs_fit(void) {
  const char *patterns[] = {"configs/paper/*.json", "configs/paper/*/*.json"};
  ng_model_config t = qwen3_8b();
  ng_plan_device h200 = {395.6, 139.0, 8, 4, true, 350.0};
  int n = 0, bad = 0;
  double worst = 0.0;
  for (int p = 0; p < 2; p++) {
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/%s", root, patterns[p]);
    glob_t g;
    NG_ASSERT(glob(pattern, 0, NULL, &g) == 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
      if (strstr(g.gl_pathv[i], "qwen3-8b-base.json")) continue;
      ng_run_config rc;
      NG_ASSERT(ng_run_config_load(g.gl_pathv[i], NULL, &rc) == 0);
      bool ok = strcmp(rc.backend, "cuda") == 0 && rc.precision == NG_PREC_BF16 && rc.teacher_bf16 &&
                rc.micro_batch < rc.batch && rc.loss_chunk > 0;
      for (int k = 0; k < rc.n_stages; k++) {
        ng_plan_stage s;
        ng_plan_stage_of(&rc, k, &t, &h200, &s);
        ok = ok && s.fits && s.per_device_gib <= 0.8 * 139.0;
        worst = s.per_device_gib > worst ? s.per_device_gib : worst;
      }
      if (!ok) printf("# %s: not cuda bf16 with its settings, or over 80%% of 139 GiB\n", g.gl_pathv[i]);
      bad += !ok;
      n++;
      ng_run_config_free(&rc);
    }
    globfree(&g);
  }
  CHECK(n == 21 && bad == 0, "every paper arm (21): cuda, bf16, its micro-batch and loss chunk fit 8 x 139 GiB with 20% to spare",
        "%d of %d do not", bad, n);
  printf("# paper arms on 8 x 139 GiB: at most %.1f GiB per device\n", worst);
}

// The study: the seven arms in one table, all fitting, with the study's total;
// the sustained rate from the peak and the MFU.
static void test_study_plan(void) {
  run_result r = run_plan("configs/paper/joint-pre.json configs/paper/joint-post.json configs/paper/grow-pre.json "
                          "configs/paper/grow-post.json configs/paper/control-extra-tokens.json "
                          "configs/paper/control-layer-tokens.json configs/paper/control-lr-restarts.json "
                          "--teacher-config configs/paper/qwen3-8b-base.json --devices 8 --device-memory 139");
  int fits = 0;
  for (const char *at = r.out; (at = strstr(at, " fits\n")); at++) fits++;
  CHECK(r.status == 0 && r.err_lines == 0 && strstr(r.out, "7 arms on 8 device(s) of 139 GiB") && fits == 7 &&
            strstr(r.out, "\nstudy ") && strstr(r.out, "device-hours") && !strstr(r.out, "does NOT fit"),
        "plan of the seven paper arms on 8 x 139 GiB: one line each, all fit, the study's total",
        "status %d, %d fit, stderr: %s", r.status, fits, r.err);
  r = run_plan("configs/paper/grow-post.json --teacher-config configs/paper/qwen3-8b-base.json");
  run_result q = run_plan("configs/paper/grow-post.json --teacher-config configs/paper/qwen3-8b-base.json "
                          "--peak-tflops 1000 --mfu 0.5");
  CHECK(strstr(r.out, "989 TFLOP/s peak at 40% MFU: 395.6 TFLOP/s sustained") &&
            strstr(q.out, "1000 TFLOP/s peak at 50% MFU: 500 TFLOP/s sustained") &&
            strstr(r.out, "eval %") && strstr(r.out, "time of the arm on 1 device(s)"),
        "plan: the sustained rate is the peak times the MFU; the FLOPs besides training and the arm's time",
        "%s", r.err);
}

// Qwen3-8B-Base's config.json, as Hugging Face ships it.
static const char *const hf_config =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151643, \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 12288,"
    " \"max_position_embeddings\": 32768, \"max_window_layers\": 36, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 36, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000,"
    " \"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false,"
    " \"vocab_size\": 151936}\n";

static void test_teacher_sources(void) {
  const char *src = "configs/paper/grow-pre.json";
  char run[600], path[600], args[1400];
  snprintf(run, sizeof run, "%s/run.json", dir);

  snprintf(path, sizeof path, "%s/absent", dir);
  with_teacher(src, path, run);
  snprintf(args, sizeof args, "'%s'", run);
  run_result r = run_plan(args);
  CHECK(r.status == 0 && strstr(r.out, "planned alone") && !strstr(r.out, "8,190,735,360"),
        "no teacher config: the student alone", "status %d, stderr: %s", r.status, r.err);

  snprintf(path, sizeof path, "%s/qwen3-8b-base", dir);
  NG_ASSERT(mkdir(path, 0777) == 0);
  char cfg[700];
  snprintf(cfg, sizeof cfg, "%s/config.json", path);
  write_text(cfg, hf_config);
  with_teacher(src, path, run);
  r = run_plan(args);
  CHECK(r.status == 0 && strstr(r.out, "8,190,735,360") && strstr(r.out, "config.json"),
        "teacher config from a Hugging Face directory", "status %d, stderr: %s", r.status, r.err);

  // A toy teacher checkpoint (zeroed weights: only its metadata is read).
  src = "configs/toy/grow-pre.json";
  snprintf(path, sizeof path, "%s/teacher.safetensors", dir);
  ng_model_config toy_teacher = toy(NG_NORM_PRE, true, true, 2);
  toy_teacher.vocab_size = 257;
  toy_teacher.num_hidden_layers = 5;
  ng_model *m = ng_model_create(ng_backend_cpu(), &toy_teacher, false);
  NG_ASSERT(ng_checkpoint_save(path, m, NULL, NULL) == 0);
  ng_model_free(m);
  with_teacher(src, path, run);
  r = run_plan(args);
  CHECK(r.status == 0 && strstr(r.out, "5 layers") && strstr(r.out, "checkpoint metadata"),
        "teacher config from a normgrow checkpoint", "status %d, stderr: %s", r.status, r.err);
}

static void expect_error(const char *name, const char *args, const char *want) {
  run_result r = run_plan(args);
  CHECK(r.status != 0 && r.status != -1 && r.err_lines == 1 && strstr(r.err, want), name,
        "status %d, %d stderr lines: %s", r.status, r.err_lines, r.err);
}

static void test_bad_input(void) {
  const char *arm = "configs/paper/grow-post.json";
  char args[1024], small[600];
  struct {
    const char *name, *opts, *want;
  } cases[] = {
      {"--devices 0", "--devices 0", "--devices"},
      {"--devices 2.5", "--devices 2.5", "--devices"},
      {"--peak-tflops not a number", "--peak-tflops fast", "--peak-tflops"},
      {"--device-memory negative", "--device-memory -1", "--device-memory"},
      {"--peak-tflops inf", "--peak-tflops inf", "--peak-tflops"},
      {"--mfu 0", "--mfu 0", "--mfu"},
      {"--mfu over 1", "--mfu 1.5", "--mfu"},
      {"--device-memory-gib (the old name)", "--device-memory-gib 139", "unknown option --device-memory-gib"},
      {"--bytes-per-param 0", "--bytes-per-param 0", "--bytes-per-param"},
      {"--bus-gbps 0", "--bus-gbps 0", "--bus-gbps"},
      {"--recompute yes", "--recompute yes", "--recompute"},
      {"--micro-batch not dividing the batch", "--micro-batch 3", "--micro-batch"},
      {"--micro-batch over the batch", "--micro-batch 512", "--micro-batch"},
      {"--loss-chunk 0", "--loss-chunk 0", "--loss-chunk"},
      {"unknown option", "--frobnicate 1", "unknown option --frobnicate"},
      {"missing teacher config file", "--teacher-config /nonexistent/teacher.json", "/nonexistent/teacher.json"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(args, sizeof args, "%s %s", arm, cases[i].opts);
    expect_error(cases[i].name, args, cases[i].want);
  }
  snprintf(small, sizeof small, "%s/small.json", dir);
  write_text(small, "{\"vocab_size\": 257, \"hidden_size\": 64, \"intermediate_size\": 128,"
                    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                    " \"head_dim\": 16, \"rope_theta\": 10000, \"rms_norm_eps\": 1e-6,"
                    " \"tie_word_embeddings\": true, \"norm_placement\": \"pre\", \"final_norm\": true}");
  snprintf(args, sizeof args, "%s --teacher-config '%s'", arm, small);
  expect_error("teacher of another vocabulary", args, "vocabulary");
  write_text(small, "{\"vocab_size\": 151936}");
  expect_error("teacher config missing a key", args, "small.json");
  expect_error("missing run config", "configs/paper/absent.json", "absent.json");
  // A model's config given as the run config: what it is, and what takes it.
  expect_error("the teacher's model config as the run config", "configs/paper/qwen3-8b-base.json",
               "qwen3-8b-base.json: a model config, not a run config");
  expect_error("  ... naming the option that takes it", "configs/paper/qwen3-8b-base.json", "--teacher-config");
  snprintf(small, sizeof small, "%s/hf-config.json", dir);
  write_text(small, hf_config);
  snprintf(args, sizeof args, "'%s'", small);
  expect_error("a Hugging Face config.json as the run config", args,
               "hf-config.json: a Hugging Face model's config, not a run config");
}

int main(void) {
  root = getenv("NG_ROOT");
  bin = getenv("NG_BIN");
  if (!root || !bin) {
    fprintf(stderr, "set NG_ROOT and NG_BIN (tests/run.sh does)\n");
    return 1;
  }
  snprintf(dir, sizeof dir, "/tmp/ng_test_plan_XXXXXX");
  NG_ASSERT(mkdtemp(dir) != NULL);
  test_hand_counts();
  test_allocations();
  test_stage();
  test_freezing();
  test_every_config_parses();
  test_study_design();
  test_every_arm_plans();
  test_paper_configs_fit();
  test_study_plan();
  test_teacher_sources();
  test_bad_input();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
