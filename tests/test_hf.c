// Tests for ref/hf.c: Hugging Face checkpoint directories written by hand
// (config.json as transformers writes it, BF16 shards with an index) against
// the same weights in one F32 file; export/load round trips; and one bad
// directory per refusal, each failing with one message that names the culprit.
#include "normgrow/backend_cpu.h"
#include "normgrow/hf.h"

#include <cJSON.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "normgrow/common.h"
#include "normgrow/golden.h"
#include "normgrow/registry.h"
#include "normgrow/rng.h"

static char g_root[] = "/tmp/ng_test_hf_XXXXXX";

// "<root>/<name>" (one of four static buffers, reused round-robin).
static const char *under_root(const char *name) {
  static char bufs[4][512];
  static int slot;
  char *buf = bufs[slot++ % 4];
  snprintf(buf, sizeof bufs[0], "%s/%s", g_root, name);
  return buf;
}

// "<dir>/<name>" in the caller's buffer of 512 bytes.
static const char *in_dir(char *buf, const char *dir, const char *name) {
  snprintf(buf, 512, "%s/%s", dir, name);
  return buf;
}

// A fresh directory under the test root.
static const char *new_dir(const char *name) {
  const char *dir = under_root(name);
  NG_ASSERT(mkdir(dir, 0777) == 0);
  return dir;
}

// The whole file, NUL-terminated, malloc'd; *len (if not NULL) its size.
static char *read_file(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  NG_ASSERT(fp);
  NG_ASSERT(fseek(fp, 0, SEEK_END) == 0);
  long n = ftell(fp);
  NG_ASSERT(n >= 0 && fseek(fp, 0, SEEK_SET) == 0);
  char *text = ng_xmalloc((size_t)n + 1);
  NG_ASSERT(fread(text, 1, (size_t)n, fp) == (size_t)n);
  text[n] = '\0';
  fclose(fp);
  if (len) *len = (size_t)n;
  return text;
}

static void write_file(const char *path, const char *text, size_t n) {
  FILE *fp = fopen(path, "wb");
  NG_ASSERT(fp);
  NG_ASSERT(n == 0 || fwrite(text, 1, n, fp) == n);
  NG_ASSERT(fclose(fp) == 0);
}

// Replaces the first occurrence of `from` in the file `<dir>/<name>` (text or
// binary) by `to`.
static void edit_file(const char *dir, const char *name, const char *from, const char *to) {
  char path[512];
  size_t len, from_len = strlen(from), to_len = strlen(to);
  char *text = read_file(in_dir(path, dir, name), &len);
  char *at = memmem(text, len, from, from_len);
  NG_ASSERT(at != NULL);
  size_t head = (size_t)(at - text), tail = len - head - from_len, n = head + to_len + tail;
  char *out = ng_xmalloc(n);
  memcpy(out, text, head);
  memcpy(out + head, to, to_len);
  memcpy(out + head + to_len, at + from_len, tail);
  write_file(path, out, n);
  free(out);
  free(text);
}

// ---------------------------------------------------------------- models

// Toy Qwen3 shapes: grouped-query heads, hidden_size != heads * head_dim.
// hybrid: blocks pre, post, post (post blocks grown on a pre prefix).
static ng_model_config toy_config(ng_norm_placement placement, bool final_norm, bool tied) {
  ng_model_config c = {.vocab_size = 61, .hidden_size = 32, .intermediate_size = 48,
                       .num_hidden_layers = 3, .num_attention_heads = 4,
                       .num_key_value_heads = 2, .head_dim = 16, .rope_theta = 1e6,
                       .rms_norm_eps = 1e-6, .tie_word_embeddings = tied,
                       .final_norm = final_norm, .norm_placement = placement};
  c.layer_placements[1] = c.layer_placements[2] = NG_NORM_POST;
  return c;
}

// Random matrices and norm gains 1 + noise (so that a swapped gain shows).
static ng_model *random_model(const ng_model_config *c, uint64_t seed) {
  ng_model *m = ng_model_create(ng_backend_cpu(), c, false);
  ng_rng r;
  ng_rng_seed(&r, seed);
  ng_model_init_random(m, &r, 0.3);
  for (int i = 0; i < m->n_params; i++) {
    ng_param *p = &m->params[i];
    if (p->ndim == 1) ng_rng_fill_normal(&r, p->data, p->numel, 1.0, 0.1);
  }
  return m;
}

// Rounds every weight to the nearest bf16 value, in place.
static void round_to_bf16(ng_model *m) {
  for (int i = 0; i < m->n_params; i++)
    for (size_t j = 0; j < m->params[i].numel; j++)
      m->params[i].data[j] = ng_bf16_to_f32(ng_f32_to_bf16(m->params[i].data[j]));
}

// NULL when a and b have the same parameters, bit for bit (with `round_a`, a's
// rounded to bf16); else the name of the first that differs.
static const char *first_difference(const ng_model *a, const ng_model *b, bool round_a) {
  if (a->n_params != b->n_params) return "(parameter count)";
  for (int i = 0; i < a->n_params; i++) {
    const ng_param *p = &a->params[i], *q = &b->params[i];
    if (strcmp(p->name, q->name) != 0 || p->numel != q->numel) return p->name;
    for (size_t j = 0; j < p->numel; j++) {
      float want = round_a ? ng_bf16_to_f32(ng_f32_to_bf16(p->data[j])) : p->data[j];
      // exact: a load stores the file's numbers; widening bf16 is exact
      if (memcmp(&want, &q->data[j], sizeof want) != 0) return p->name;
    }
  }
  return NULL;
}

// Logits [2 x 5, V] of a fixed batch, malloc'd.
static float *logits_of(ng_model *m) {
  enum { B = 2, T = 5 };
  static const int32_t host_tokens[B * T] = {1, 7, 3, 60, 0, 5, 5, 42, 9, 17};
  ng_backend *be = m->be;
  int32_t *tokens = be->alloc(be, sizeof host_tokens);
  be->upload(be, tokens, host_tokens, sizeof host_tokens);
  ng_acts *a = ng_acts_create(m, B, T, false);
  ng_model_forward(m, a, tokens, NULL);
  ng_model_logits(m, a, 0, a->N);
  size_t bytes = (size_t)B * T * (size_t)m->cfg.vocab_size * sizeof(float);
  float *out = ng_xmalloc(bytes);
  be->download(be, out, a->logits, bytes);
  ng_acts_free(m, a);
  be->free(be, tokens);
  return out;
}

// ---------------------------------------------------------------- HF layout by hand

// config.json as transformers 4.51 writes it for Qwen3ForCausalLM (every key),
// plus normgrow's two keys when the model is not Pre-Norm with a final norm.
static void write_config(const char *dir, const ng_model_config *c) {
  char layer_types[4096] = "", path[512], text[8192];
  for (int64_t l = 0; l < c->num_hidden_layers; l++)
    strcat(layer_types, l ? ", \"full_attention\"" : "\"full_attention\"");
  char extra[128] = "";
  if (c->norm_placement != NG_NORM_PRE || !c->final_norm)
    snprintf(extra, sizeof extra, "  \"norm_placement\": \"%s\",\n  \"final_norm\": %s,\n",
             ng_norm_placement_name(c->norm_placement), c->final_norm ? "true" : "false");
  int n = snprintf(
      text, sizeof text,
      "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"attention_bias\": false,\n"
      "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151643,\n"
      "  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": %lld,\n"
      "  \"initializer_range\": 0.02,\n  \"intermediate_size\": %lld,\n"
      "  \"layer_types\": [%s],\n  \"max_position_embeddings\": 32768,\n"
      "  \"max_window_layers\": %lld,\n  \"model_type\": \"qwen3\",\n%s"
      "  \"num_attention_heads\": %lld,\n  \"num_hidden_layers\": %lld,\n"
      "  \"num_key_value_heads\": %lld,\n  \"pad_token_id\": null,\n  \"rms_norm_eps\": %.17g,\n"
      "  \"rope_scaling\": null,\n  \"rope_theta\": %.17g,\n  \"sliding_window\": null,\n"
      "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"bfloat16\",\n"
      "  \"transformers_version\": \"4.51.0\",\n  \"use_cache\": true,\n"
      "  \"use_sliding_window\": false,\n  \"vocab_size\": %lld\n}\n",
      (long long)c->head_dim, (long long)c->hidden_size, (long long)c->intermediate_size,
      layer_types, (long long)c->num_hidden_layers, extra, (long long)c->num_attention_heads,
      (long long)c->num_hidden_layers, (long long)c->num_key_value_heads, c->rms_norm_eps,
      c->rope_theta, c->tie_word_embeddings ? "true" : "false", (long long)c->vocab_size);
  NG_ASSERT(n > 0 && (size_t)n < sizeof text);
  write_file(in_dir(path, dir, "config.json"), text, (size_t)n);
}

static void shard_file_name(char *buf, size_t cap, int s, int n) {
  snprintf(buf, cap, "model-%05d-of-%05d.safetensors", s + 1, n);
}

// m's weights in `dtype` (F32 or BF16): one model.safetensors (n_shards == 1),
// or parameters spread over n_shards files in order, with the index.
static void write_weights(const char *dir, const ng_model *m, ng_dtype dtype, int n_shards) {
  char path[512], name[64];
  uint16_t **bf16 = ng_xcalloc((size_t)m->n_params, sizeof *bf16);
  size_t cap = 1 << 16, len = 0, total = 0;
  char *map = ng_xmalloc(cap);
  map[0] = '\0';
  for (int s = 0; s < n_shards; s++) {
    ng_st_writer *w = ng_st_writer_new();
    shard_file_name(name, sizeof name, s, n_shards);
    for (int i = 0; i < m->n_params; i++) {
      const ng_param *p = &m->params[i];
      if (i * n_shards / m->n_params != s) continue;
      const void *data = p->data;
      if (dtype == NG_BF16) {
        bf16[i] = ng_xmalloc(p->numel * sizeof **bf16);
        for (size_t j = 0; j < p->numel; j++) bf16[i][j] = ng_f32_to_bf16(p->data[j]);
        data = bf16[i];
      }
      ng_st_writer_add(w, p->name, dtype, p->ndim, p->shape, data);
      len += (size_t)snprintf(map + len, cap - len, "%s\n    \"%s\": \"%s\"", len ? "," : "",
                              p->name, name);
      NG_ASSERT(len < cap);
      total += p->numel * ng_dtype_size(dtype);
    }
    const char *file = n_shards == 1 ? "model.safetensors" : name;
    NG_ASSERT(ng_st_writer_save(w, in_dir(path, dir, file)) == 0);
    ng_st_writer_free(w);
  }
  if (n_shards > 1) {
    char *index = ng_xmalloc(cap + 128);
    int n = snprintf(index, cap + 128,
                     "{\n  \"metadata\": {\"total_size\": %zu},\n  \"weight_map\": {%s\n  }\n}\n",
                     total, map);
    write_file(in_dir(path, dir, "model.safetensors.index.json"), index, (size_t)n);
    free(index);
  }
  for (int i = 0; i < m->n_params; i++) free(bf16[i]);
  free(bf16);
  free(map);
}

// A directory `name` with config `c` and the weights of `m` (of c's shapes or not).
static const char *write_checkpoint(const char *name, const ng_model_config *c,
                                    const ng_model *m, ng_dtype dtype, int n_shards) {
  const char *dir = new_dir(name);
  write_config(dir, c);
  write_weights(dir, m, dtype, n_shards);
  return dir;
}

// ---------------------------------------------------------------- tests

// A transformers-style BF16 checkpoint in 3 shards gives exactly the logits of
// the same (bf16-rounded) weights stored as F32 in one file.
static void test_bf16_shards_match_f32(void) {
  ng_model_config c = toy_config(NG_NORM_PRE, true, false);
  ng_model *ref = random_model(&c, 1);
  round_to_bf16(ref);
  const char *sharded = write_checkpoint("bf16_sharded", &c, ref, NG_BF16, 3);
  const char *single = write_checkpoint("f32_single", &c, ref, NG_F32, 1);
  ng_model *a = NULL, *b = NULL;
  int ra = ng_hf_load(sharded, ng_backend_cpu(), false, &a);
  int rb = ng_hf_load(single, ng_backend_cpu(), true, &b);
  CHECK(ra == 0 && rb == 0, "hf layout loads", "%d %d: %s", ra, rb, ng_error());
  if (ra || rb) return;
  const char *diff = first_difference(ref, a, false);
  CHECK(!diff, "bf16 shards load the written values", "%s differs", diff);
  CHECK(b->params[0].grad != NULL, "trainable load has gradients", "no grad");
  size_t n = 10 * (size_t)c.vocab_size;
  float *la = logits_of(a), *lb = logits_of(b);
  // exact: the same weights, bit for bit (bf16 widens exactly), through the
  // same forward calls at the same shapes and threads
  CHECK(memcmp(la, lb, n * sizeof *la) == 0, "bf16 shards and f32 file give equal logits",
        "logits differ");
  free(la);
  free(lb);
  ng_model_free(a);
  ng_model_free(b);
  ng_model_free(ref);
}

// On a backend that reads bf16 weights (onednn bf16, where this machine runs
// it), a teacher held in bf16 gives its linear ops the held bits as ready
// copies: the same logits as the same teacher not held, bit for bit.
static void test_hold_bf16_read(const char *dir) {
  ng_backend *be = ng_backend_open("onednn", NG_PREC_BF16);
  if (!be) {
    printf("skip held bf16 teacher on onednn bf16: %s\n", ng_error());
    return;
  }
  ng_model *m = NULL;
  NG_ASSERT(be->bf16_weights && ng_hf_load(dir, be, false, &m) == 0);
  float *want = logits_of(m);
  bool did = ng_model_hold_bf16(m);
  float *got = logits_of(m);
  size_t n = 10 * (size_t)m->cfg.vocab_size;
  // exact: the held bits are the rounding the linear ops made of the fp32
  // weights (exactly bf16 numbers), read by the same primitives in the same order
  CHECK(did && memcmp(want, got, n * sizeof *got) == 0,
        "onednn bf16: a teacher held in bf16 reads its held bits: logits bit-identical to fp32 weights",
        "held %d", did);
  free(want);
  free(got);
  ng_model_free(m);
  ng_backend_close(be);
}

// A teacher loaded from bf16 shards holds its blocks in bf16 (one fp32 block
// widened at a time): the same logits bit for bit, and its blocks copy out
// exactly; a model whose weights are not all bf16 numbers stays fp32.
static void test_hold_bf16(void) {
  ng_model_config c = toy_config(NG_NORM_POST, true, false);
  ng_model *ref = random_model(&c, 4);
  round_to_bf16(ref);
  const char *dir = write_checkpoint("bf16_held", &c, ref, NG_BF16, 2);
  ng_model *held = NULL, *student = NULL;
  if (ng_hf_load(dir, ng_backend_cpu(), false, &held) != 0) {
    CHECK(false, "bf16 teacher loads", "%s", ng_error());
    return;
  }
  float *want = logits_of(held);
  bool did = ng_model_hold_bf16(held);
  size_t block = 0, bf16_params = 0;
  for (int i = 0; i < held->n_params; i++) {
    const ng_param *p = &held->params[i];
    block += p->layer == 0 ? p->numel : 0;
    bf16_params += p->bf16 ? p->numel : 0;
  }
  float *got = logits_of(held);
  size_t n = 10 * (size_t)c.vocab_size;
  // exact: a held block is widened to its fp32 values (exact) before the
  // same fp32 calls run on it at the same shapes and threads
  CHECK(did && bf16_params == block * (size_t)c.num_hidden_layers && memcmp(want, got, n * sizeof *got) == 0,
        "bf16 teacher held in bf16: every block weight in bf16, logits bit-identical to fp32",
        "held %d, %zu bf16 numbers", did, bf16_params);
  student = ng_model_create(ng_backend_cpu(), &c, true);
  bool copied = true;
  for (int64_t l = 0; l < c.num_hidden_layers; l++)
    copied &= ng_model_copy_block(student, c.num_hidden_layers - 1 - l, held, l) == 0;
  ng_model_copy_io(student, held);
  ng_model *reordered = ng_model_create(ng_backend_cpu(), &c, false);  // ref's blocks in the same order
  for (int64_t l = 0; l < c.num_hidden_layers; l++)
    copied &= ng_model_copy_block(reordered, c.num_hidden_layers - 1 - l, ref, l) == 0;
  ng_model_copy_io(reordered, ref);
  const char *diff = first_difference(reordered, student, false);
  CHECK(copied && !diff, "blocks copied from a bf16-held teacher are its exact weights", "%s differs",
        diff ? diff : "copy failed");
  ng_model *f32 = random_model(&c, 5);
  CHECK(!ng_model_hold_bf16(f32) && !f32->block_scratch, "weights that are not all bf16 numbers stay fp32",
        "held");
  test_hold_bf16_read(dir);
  free(want);
  free(got);
  ng_model_free(f32);
  ng_model_free(reordered);
  ng_model_free(student);
  ng_model_free(held);
  ng_model_free(ref);
}

// Tied config next to a checkpoint that still carries lm_head.weight: ignored.
static void test_tied_ignores_lm_head(void) {
  ng_model_config untied = toy_config(NG_NORM_PRE, true, false);
  ng_model_config tied = toy_config(NG_NORM_PRE, true, true);
  ng_model *m = random_model(&untied, 2), *got = NULL;
  const char *dir = write_checkpoint("tied_extra_head", &tied, m, NG_F32, 1);
  int rc = ng_hf_load(dir, ng_backend_cpu(), false, &got);
  CHECK(rc == 0 && got->cfg.tie_word_embeddings && !ng_model_find(got, "lm_head.weight"),
        "tied embeddings ignore a stored lm_head", "%d: %s", rc, ng_error());
  if (rc == 0)  // exact: the loaded F32 values
    CHECK(memcmp(got->w.embed_tokens, m->w.embed_tokens, m->params[0].numel * sizeof(float)) == 0,
          "tied load keeps the embeddings", "differ");
  ng_model_free(got);
  ng_model_free(m);
}

// Doubles exactly: config.json holds them in digits that read back to the same double.
static bool same_config(const ng_model_config *a, const ng_model_config *b) {
  bool blocks = a->num_hidden_layers == b->num_hidden_layers;
  for (int64_t l = 0; blocks && l < a->num_hidden_layers; l++)
    blocks = ng_block_placement(a, l) == ng_block_placement(b, l);
  return blocks && a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
         a->intermediate_size == b->intermediate_size &&
         a->num_hidden_layers == b->num_hidden_layers &&
         a->num_attention_heads == b->num_attention_heads &&
         a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim &&
         a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps &&
         a->tie_word_embeddings == b->tie_word_embeddings && a->final_norm == b->final_norm &&
         a->norm_placement == b->norm_placement && a->deepnorm_alpha == b->deepnorm_alpha &&
         a->mixln_post_layers == b->mixln_post_layers;
}

// Exports m into root/name, loads it back and checks config and weights
// (bf16-rounded for a BF16 export). Returns the loaded model (NULL on failure).
static ng_model *export_and_load(const char *test, const ng_model *m, const char *name,
                                 ng_dtype dtype, size_t shard_bytes) {
  char check[160];
  const char *dir = under_root(name);
  int rc = ng_hf_export(m, dir, dtype, shard_bytes);
  snprintf(check, sizeof check, "%s: export", test);
  CHECK(rc == 0, check, "%s", ng_error());
  ng_model *got = NULL;
  rc = rc ? rc : ng_hf_load(dir, ng_backend_cpu(), false, &got);
  snprintf(check, sizeof check, "%s: load", test);
  CHECK(rc == 0, check, "%s", ng_error());
  if (rc) return NULL;
  snprintf(check, sizeof check, "%s: same config", test);
  CHECK(same_config(&got->cfg, &m->cfg), check, "config differs");
  const char *diff = first_difference(m, got, dtype == NG_BF16);
  snprintf(check, sizeof check, "%s: weights round-trip", test);
  CHECK(!diff, check, "%s differs", diff);
  return got;
}

static bool exists_in(const char *dir, const char *name) {
  char path[512];
  return access(in_dir(path, dir, name), F_OK) == 0;
}

static void test_export_pre_plain(void) {
  ng_model_config c = toy_config(NG_NORM_PRE, true, false);
  ng_model *m = random_model(&c, 3);
  ng_model_free(export_and_load("pre f32", m, "export_pre", NG_F32, (size_t)1 << 30));
  const char *dir = under_root("export_pre");
  char path[512];
  char *text = read_file(in_dir(path, dir, "config.json"), NULL);
  CHECK(!strstr(text, "norm_placement") && !strstr(text, "final_norm") &&
            strstr(text, "\"Qwen3ForCausalLM\"") && strstr(text, "\"float32\"") &&
            !strstr(text, "bos_token_id"),
        "pre export writes a plain Qwen3 config", "%s", text);
  free(text);
  CHECK(exists_in(dir, "model.safetensors") && !exists_in(dir, "model.safetensors.index.json") &&
            !exists_in(dir, "modeling_normgrow.py"),
        "pre export is one file, no modeling code", "layout");
  ng_model_free(m);
}

// Sandwich, DeepNorm, Mix-LN and hybrid models export and load back with their
// placement, their own keys (hybrid's per-block list) and every weight
// (sandwich's four norms included).
static void test_export_placements(void) {
  ng_model_config sandwich = toy_config(NG_NORM_SANDWICH, true, false);
  ng_model_config deepnorm = toy_config(NG_NORM_DEEPNORM, false, true);
  ng_model_config mixln = toy_config(NG_NORM_MIXLN, true, false);
  ng_model_config hybrid = toy_config(NG_NORM_HYBRID, true, false);
  deepnorm.deepnorm_alpha = 1.3;
  mixln.mixln_post_layers = 2;
  const ng_model_config *all[] = {&sandwich, &deepnorm, &mixln, &hybrid};
  for (int i = 0; i < 4; i++) {
    ng_model *m = random_model(all[i], 11 + (uint64_t)i);
    char name[64];
    snprintf(name, sizeof name, "export_%s", ng_norm_placement_name(all[i]->norm_placement));
    ng_model_free(export_and_load(name, m, name, NG_F32, (size_t)1 << 30));
    ng_model_free(m);
  }
}

static void test_export_post(void) {
  ng_model_config c = toy_config(NG_NORM_POST, false, true);
  ng_model *m = random_model(&c, 4);
  ng_model_free(export_and_load("post f32", m, "export_post", NG_F32, (size_t)1 << 30));
  char path[512];
  char *text = read_file(in_dir(path, under_root("export_post"), "config.json"), NULL);
  cJSON *cfg = cJSON_Parse(text);
  const cJSON *placement = cJSON_GetObjectItemCaseSensitive(cfg, "norm_placement");
  CHECK(cJSON_IsString(placement) && strcmp(placement->valuestring, "post") == 0 &&
            cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cfg, "final_norm")),
        "post export records norm_placement and final_norm", "%s", text);
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(cfg, "auto_map");
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(map, "AutoModelForCausalLM");
  CHECK(strstr(text, "\"NormgrowForCausalLM\"") && !strstr(text, "Qwen3ForCausalLM") &&
            strstr(text, "\"model_type\":\t\"normgrow\"") && cJSON_IsString(model) &&
            strcmp(model->valuestring, "modeling_normgrow.NormgrowForCausalLM") == 0,
        "post export is the custom architecture with an auto_map", "%s", text);
  const char *dir = under_root("export_post");
  CHECK(exists_in(dir, "modeling_normgrow.py") && exists_in(dir, "configuration_normgrow.py"),
        "post export writes its modeling code beside the weights", "missing .py files");
  cJSON_Delete(cfg);
  free(text);
  // A plain Qwen3 exported over it leaves no code that would claim the directory.
  ng_model_config pc = toy_config(NG_NORM_PRE, true, false);
  ng_model *pm = random_model(&pc, 8);
  ng_model_free(export_and_load("pre over post", pm, "export_post", NG_F32, (size_t)1 << 30));
  CHECK(!exists_in(dir, "modeling_normgrow.py") && !exists_in(dir, "configuration_normgrow.py"),
        "a plain export removes the modeling code of an earlier one", "stale .py files");
  ng_model_free(pm);
  ng_model_free(m);
}

// LayerScale folds into o_proj and down_proj rows (sandwich: into the gains of
// the norms on the sublayer outputs): the export has no layer scale tensors (a
// plain Qwen3 for pre with a final norm, NormgrowForCausalLM for the others),
// loads back as a model without them, and gives the same logits.
static void test_export_layer_scale(ng_norm_placement placement, const char *name) {
  ng_model_config c = toy_config(placement, true, false);
  c.deepnorm_alpha = placement == NG_NORM_DEEPNORM ? 1.3 : 0.0;
  c.mixln_post_layers = placement == NG_NORM_MIXLN ? 2 : 0;
  c.layer_scale = true;
  c.layer_scale_init = 0.01;
  ng_model *m = random_model(&c, 6);  // scales 1 + N(0, 0.1^2): every channel its own
  const char *dir = under_root(name);
  int rc = ng_hf_export(m, dir, NG_F32, (size_t)1 << 30);
  ng_model *got = NULL;
  rc = rc ? rc : ng_hf_load(dir, ng_backend_cpu(), false, &got);
  char check[160];
  snprintf(check, sizeof check, "%s layer_scale export loads back without layer scales", name);
  CHECK(rc == 0 && !got->cfg.layer_scale &&
            got->n_params == m->n_params - 2 * (int)c.num_hidden_layers &&
            !ng_model_find(got, "model.layers.0.mlp.layer_scale"),
        check, "%s", rc ? ng_error() : "layer scales present");
  if (rc == 0) {
    size_t n = 10 * (size_t)c.vocab_size;
    float *want = logits_of(m), *have = logits_of(got);
    double err = ng_test_max_rel(have, want, (int64_t)n);
    snprintf(check, sizeof check, "%s layer_scale export: the same logits (relative error %.1e)",
             name, err);
    // the contract's forward bound: folded scales round apart from applied
    // ones (seen up to 3.9e-6, under Sandybridge)
    CHECK(err <= NG_GOLDEN_TOL_FORWARD, check, "above %.0e", NG_GOLDEN_TOL_FORWARD);
    free(want);
    free(have);
  }
  ng_model_free(got);
  ng_model_free(m);
}

static void test_export_bf16(void) {
  ng_model_config c = toy_config(NG_NORM_PRE, true, false);
  ng_model *m = random_model(&c, 5);
  ng_model_free(export_and_load("bf16", m, "export_bf16", NG_BF16, (size_t)1 << 30));
  ng_model_free(m);
}

// Every shard holds at most `limit` bytes of data, or one tensor.
static bool shards_within(const ng_hf_checkpoint *ck, size_t limit) {
  for (int i = 0; i < ck->n_files; i++) {
    const ng_st_file *f = &ck->files[i];
    size_t data = f->n ? f->tensors[f->n - 1].end : 0;
    if (data > limit && f->n > 1) return false;
  }
  return true;
}

static void test_export_sharded(void) {
  ng_model_config c = toy_config(NG_NORM_POST, true, false);
  ng_model *m = random_model(&c, 6);
  const size_t limit = 8192;  // the embedding (61 x 32 x 4 = 7808 bytes) fits; lm_head too
  ng_model_free(export_and_load("sharded", m, "export_sharded", NG_F32, limit));
  const char *dir = under_root("export_sharded");
  ng_hf_checkpoint ck;
  int rc = ng_hf_open(&ck, dir);
  CHECK(rc == 0 && ck.n_files > 2 && shards_within(&ck, limit) &&
            !exists_in(dir, "model.safetensors"),
        "small shard_bytes gives several shards and an index", "rc %d, %d files", rc,
        ck.n_files);
  ng_hf_close(&ck);
  // A tensor larger than the limit gets a shard of its own.
  ng_model_free(export_and_load("tiny shards", m, "export_sharded", NG_BF16, 1));
  rc = ng_hf_open(&ck, dir);
  CHECK(rc == 0 && ck.n_files == m->n_params, "oversized tensors get their own shards",
        "%d files for %d params", ck.n_files, m->n_params);
  ng_hf_close(&ck);
  // Exporting one file over a sharded export removes the index that would confuse it.
  ng_model_free(export_and_load("re-export single", m, "export_sharded", NG_F32, (size_t)1 << 30));
  CHECK(!exists_in(dir, "model.safetensors.index.json"), "single re-export removes the index",
        "index still there");
  ng_model_free(m);
}

static void test_export_refusals(void) {
  ng_model_config c = toy_config(NG_NORM_PRE, true, false);
  ng_model *m = random_model(&c, 7);
  int rc = ng_hf_export(m, under_root("export_f16"), NG_F16, (size_t)1 << 30);
  CHECK(rc == -1 && strstr(ng_error(), "F16"), "export refuses F16", "%d: %s", rc, ng_error());
  char path[512];
  write_file(under_root("a_file"), "x", 1);
  rc = ng_hf_export(m, in_dir(path, under_root("a_file"), "sub"), NG_F32, (size_t)1 << 30);
  CHECK(rc == -1 && strstr(ng_error(), "a_file: exists and is not a directory"),
        "export names a directory it cannot create", "%d: %s", rc, ng_error());
  m->growth_gate[1] = 0.5f;
  rc = ng_hf_export(m, under_root("export_gate"), NG_F32, (size_t)1 << 30);
  CHECK(rc == -1 && strstr(ng_error(), "gate"), "export refuses a growth gate", "%d: %s", rc,
        ng_error());
  ng_model_free(m);
}

// ng_hf_load(dir) must fail with a message holding `what` and `what2` (if not NULL).
static void expect_refused(const char *test, const char *dir, const char *what,
                           const char *what2) {
  ng_model *m = NULL;
  int rc = ng_hf_load(dir, ng_backend_cpu(), false, &m);
  const char *err = ng_error();
  CHECK(rc == -1 && m == NULL && strstr(err, what) && (!what2 || strstr(err, what2)) &&
            !strchr(err, '\n'),
        test, "rc %d: \"%s\"", rc, err);
  ng_model_free(m);
}

// A good 3-shard BF16 checkpoint `name` of toy shapes, to be broken by the caller.
static const char *good_sharded(const char *name, ng_model *m) {
  return write_checkpoint(name, &m->cfg, m, NG_BF16, 3);
}

static void test_bad_weights(ng_model *m) {
  char path[512];
  const char *dir = good_sharded("truncated", m);
  NG_ASSERT(truncate(in_dir(path, dir, "model-00002-of-00003.safetensors"), 100) == 0);
  expect_refused("truncated shard", dir, "model-00002-of-00003.safetensors", NULL);

  dir = good_sharded("missing_shard", m);
  NG_ASSERT(unlink(in_dir(path, dir, "model-00003-of-00003.safetensors")) == 0);
  expect_refused("index naming a missing shard", dir, "model.safetensors.index.json",
                 "model-00003-of-00003.safetensors");

  dir = good_sharded("escaping_shard", m);
  edit_file(dir, "model.safetensors.index.json", "\"model-00001-of-00003.safetensors\"",
            "\"../model-00001-of-00003.safetensors\"");
  expect_refused("shard outside the directory", dir, "../model-00001", "plain file name");

  dir = good_sharded("wrong_shard", m);
  edit_file(dir, "model.safetensors.index.json",
            "\"model.embed_tokens.weight\": \"model-00001-of-00003.safetensors\"",
            "\"model.embed_tokens.weight\": \"model-00002-of-00003.safetensors\"");
  expect_refused("index mapping a tensor to the wrong shard", dir, "model.embed_tokens.weight",
                 "model-00002-of-00003.safetensors");

  dir = good_sharded("listed_twice", m);
  edit_file(dir, "model.safetensors.index.json",
            "\"model.embed_tokens.weight\": \"model-00001-of-00003.safetensors\",",
            "\"model.embed_tokens.weight\": \"model-00001-of-00003.safetensors\","
            "\"model.embed_tokens.weight\": \"model-00001-of-00003.safetensors\",");
  expect_refused("index listing a tensor twice", dir, "model.embed_tokens.weight",
                 "listed twice");

  dir = good_sharded("unlisted", m);
  edit_file(dir, "model.safetensors.index.json",
            "\"model.embed_tokens.weight\": \"model-00001-of-00003.safetensors\",", "");
  expect_refused("shard tensor missing from the index", dir, "model.embed_tokens.weight",
                 "weight_map");

  // Weights of a model with another intermediate_size under this config.json.
  ng_model_config wide = m->cfg;
  wide.intermediate_size = 40;
  ng_model *other = random_model(&wide, 9);
  dir = write_checkpoint("wrong_shape", &m->cfg, other, NG_BF16, 3);
  expect_refused("tensor of the wrong shape", dir, "model.layers.0.mlp.gate_proj.weight", "shape");
  ng_model_free(other);

  // An F32 file whose first tensor claims the integer dtype I32 (same size).
  dir = write_checkpoint("int_dtype", &m->cfg, m, NG_F32, 1);
  edit_file(dir, "model.safetensors", "\"dtype\":\"F32\"", "\"dtype\":\"I32\"");
  expect_refused("tensor of integer dtype", dir, "model.embed_tokens.weight", "I32");

  // Four blocks of weights under a config of three.
  ng_model_config deeper = m->cfg;
  deeper.num_hidden_layers = 4;
  other = random_model(&deeper, 10);
  dir = write_checkpoint("extra_layer", &m->cfg, other, NG_BF16, 3);
  expect_refused("checkpoint with more layers than config.json", dir,
                 "checkpoint has layer 3 but config.json says num_hidden_layers = 3", NULL);
  ng_model_free(other);

  dir = new_dir("no_weights");
  write_config(dir, &m->cfg);
  expect_refused("directory without weights", dir, "model.safetensors", NULL);
}

static void test_bad_config(ng_model *m) {
  static const struct {
    const char *test, *from, *to, *what, *what2;
  } cases[] = {
      {"model_type llama", "\"qwen3\"", "\"llama\"", "model_type \"llama\" is not supported",
       "qwen3"},
      {"field of the wrong type", "\"hidden_size\": 32", "\"hidden_size\": \"32\"",
       "config.json.hidden_size", "integer"},
      {"missing required field", "\"vocab_size\": 61", "\"vocab\": 61", "config.json.vocab_size",
       "missing"},
      {"attention_bias true", "\"attention_bias\": false", "\"attention_bias\": true",
       "attention_bias true is not supported", NULL},
      {"hidden_act gelu", "\"silu\"", "\"gelu\"", "hidden_act \"gelu\"", NULL},
      {"rope_scaling set", "\"rope_scaling\": null",
       "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", "rope_scaling", "yarn"},
      {"sliding window", "\"use_sliding_window\": false", "\"use_sliding_window\": true",
       "use_sliding_window", NULL},
      {"sliding layer type", "\"full_attention\"]", "\"sliding_attention\"]",
       "layer_types[2] \"sliding_attention\"", NULL},
      {"duplicate key", "\"rope_theta\":", "\"rope_theta\": 10000, \"rope_theta\":",
       "duplicate key \"rope_theta\"", NULL},
      {"unknown norm placement", "\"vocab_size\"",
       "\"norm_placement\": \"middle\", \"vocab_size\"", "norm_placement", "middle"},
      {"invalid JSON", "\"vocab_size\"", "\"vocab_size\" 7,", "config.json", "invalid JSON"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "bad_config_%zu", i);
    const char *dir = good_sharded(name, m);
    edit_file(dir, "config.json", cases[i].from, cases[i].to);
    expect_refused(cases[i].test, dir, cases[i].what, cases[i].what2);
  }
  char path[512];
  const char *dir = good_sharded("no_config", m);
  NG_ASSERT(unlink(in_dir(path, dir, "config.json")) == 0);
  expect_refused("missing config.json", dir, "config.json", "cannot open");
}

// A minimal config.json: absent optional keys take transformers' defaults.
static void test_config_defaults(void) {
  const char *dir = new_dir("minimal_config");
  static const char text[] =
      "{\"model_type\": \"qwen3\", \"vocab_size\": 61, \"hidden_size\": 32,"
      " \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
      " \"num_key_value_heads\": 2, \"some_future_key\": {\"x\": [1]},"
      " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5e5}}";
  char path[512];
  write_file(in_dir(path, dir, "config.json"), text, strlen(text));
  ng_model_config c;
  int rc = ng_hf_read_config(dir, &c);
  // exact: the same decimal numbers, read by strtod and by the compiler (both correctly rounded)
  CHECK(rc == 0 && c.head_dim == 128 && c.rope_theta == 5e5 && c.rms_norm_eps == 1e-6 &&
            !c.tie_word_embeddings && c.final_norm && c.norm_placement == NG_NORM_PRE,
        "minimal config takes defaults", "%d: %s", rc, ng_error());
}

// Removes everything under the test root (nftw callback).
static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

int main(void) {
  NG_ASSERT(mkdtemp(g_root) != NULL);
  test_bf16_shards_match_f32();
  test_hold_bf16();
  test_tied_ignores_lm_head();
  test_export_pre_plain();
  test_export_post();
  test_export_placements();
  test_export_bf16();
  test_export_layer_scale(NG_NORM_PRE, "export_pre_layer_scale");
  test_export_layer_scale(NG_NORM_POST, "export_post_layer_scale");
  test_export_layer_scale(NG_NORM_SANDWICH, "export_sandwich_layer_scale");
  test_export_layer_scale(NG_NORM_DEEPNORM, "export_deepnorm_layer_scale");
  test_export_layer_scale(NG_NORM_MIXLN, "export_mixln_layer_scale");
  test_export_layer_scale(NG_NORM_HYBRID, "export_hybrid_layer_scale");
  test_export_sharded();
  test_export_refusals();
  test_config_defaults();
  ng_model_config c = toy_config(NG_NORM_PRE, true, false);
  ng_model *m = random_model(&c, 8);
  test_bad_weights(m);
  test_bad_config(m);
  ng_model_free(m);
  CHECK(nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "test directory removed",
        "%s", g_root);
  return TEST_RESULT();
}
