// normgrow: Hugging Face Qwen3 checkpoint directories: config.json, weights in
// one safetensors file or in shards with an index; reading, loading, export.
#include "normgrow/hf.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/plan.h"

#define HF_CONFIG "config.json"
#define HF_SINGLE "model.safetensors"
#define HF_INDEX "model.safetensors.index.json"
#define HF_MAX_JSON (64u << 20)   // bytes; real config and index files are under 1 MB
#define QWEN_ENDOFTEXT 151643     // <|endoftext|>: Qwen3 base models' bos and eos
#define OWN_MODEL_TYPE "normgrow"  // a model that is not plain Qwen3 (see hf.h)

// The transformers code of such a model (ref/hf_remote/*.py), built into the
// program so that an export can write it beside the weights (NUL-terminated).
#define EMBED_FILE(symbol, file)                                                       \
  __asm__(".pushsection .rodata\n.local " #symbol "\n" #symbol ":\n.incbin \"" file \
          "\"\n.byte 0\n.popsection\n");                                              \
  extern const char symbol[]
EMBED_FILE(configuration_py, "ref/hf_remote/configuration_normgrow.py");
EMBED_FILE(modeling_py, "ref/hf_remote/modeling_normgrow.py");

// ---------------------------------------------------------------- files

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

// Parses the file at `path` as one JSON value followed only by whitespace.
static cJSON *read_json(const char *path) {
  char *text;
  size_t len;
  if (ng_read_file(path, HF_MAX_JSON, &text, &len) != 0) return NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, true);
  if (!root) {
    ng_fail("%s: invalid JSON at byte %zu", path, end ? (size_t)(end - text) : (size_t)0);
  } else if (strlen(text) != len) {
    ng_fail("%s: NUL byte at %zu", path, strlen(text));
    cJSON_Delete(root);
    root = NULL;
  }
  free(text);
  return root;
}

// Writes `json` (indented) to `path`, atomically.
static int write_json(const char *path, const cJSON *json) {
  char *text = ng_json_print(json, true);
  int rc = ng_write_text_atomic(path, text);
  free(text);
  return rc;
}

// ---------------------------------------------------------------- config.json

static const cJSON *item(const cJSON *obj, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

// Keys whose value normgrow reads or checks. Python's json keeps the last of
// duplicate keys and cJSON the first, so a duplicate of one of them is refused.
static const char *const read_keys[] = {
    "model_type", "attention_bias", "hidden_act", "rope_scaling", "rope_parameters",
    "use_sliding_window", "layer_types", "vocab_size", "hidden_size", "intermediate_size",
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "rope_theta", "rms_norm_eps", "tie_word_embeddings", "norm_placement", "final_norm",
    "deepnorm_alpha", "mixln_post_layers", "layer_placements", NULL};

static int check_no_duplicates(const cJSON *cfg, const char *where) {
  for (const char *const *k = read_keys; *k; k++) {
    int count = 0;
    for (const cJSON *it = cfg->child; it; it = it->next) count += strcmp(it->string, *k) == 0;
    if (count > 1) return ng_fail("%s: duplicate key \"%s\"", where, *k);
  }
  return 0;
}

// "<where>: <key> <value as JSON> is not supported (normgrow implements <supported>)".
static int unsupported(const char *where, const char *key, const cJSON *v,
                       const char *supported) {
  char *text = ng_json_print(v, false);
  ng_fail("%s: %s %.80s is not supported (normgrow implements %s)", where, key,
          text, supported);
  free(text);
  return -1;
}

// `key` must hold the string `want` (or be absent, unless `required`).
static int expect_string(const cJSON *obj, const char *where, const char *key,
                         const char *want, bool required) {
  const char *s;
  if (!required && !item(obj, key)) return 0;
  if (ng_json_str(obj, where, key, &s)) return -1;
  return strcmp(s, want) == 0 ? 0 : unsupported(where, key, item(obj, key), want);
}

// `key` must be false or absent.
static int expect_false(const cJSON *obj, const char *where, const char *key) {
  bool b;
  if (!item(obj, key)) return 0;
  if (ng_json_bool(obj, where, key, &b)) return -1;
  return b ? unsupported(where, key, item(obj, key), "false") : 0;
}

// `key` must be null or absent.
static int expect_null(const cJSON *obj, const char *where, const char *key) {
  const cJSON *v = item(obj, key);
  return v && !cJSON_IsNull(v) ? unsupported(where, key, v, "null") : 0;
}

// layer_types, unless absent or null: num_hidden_layers entries, all "full_attention".
static int check_layer_types(const cJSON *cfg, const char *where) {
  const cJSON *types = item(cfg, "layer_types");
  if (!types || cJSON_IsNull(types)) return 0;
  if (!cJSON_IsArray(types)) return ng_fail("%s.layer_types: expected an array", where);
  int i = 0;
  for (const cJSON *t = types->child; t; t = t->next, i++) {
    char key[32];
    snprintf(key, sizeof key, "layer_types[%d]", i);
    if (!cJSON_IsString(t)) return ng_fail("%s.%s: expected a string", where, key);
    if (strcmp(t->valuestring, "full_attention") != 0)
      return unsupported(where, key, t, "full_attention");
  }
  const cJSON *layers = item(cfg, "num_hidden_layers");
  if (cJSON_IsNumber(layers) && layers->valuedouble != (double)i)
    return ng_fail("%s.layer_types: %d entries, but num_hidden_layers is %.17g", where, i,
                   layers->valuedouble);
  return 0;
}

// Refuses every setting of the Qwen3 family that normgrow does not implement.
static int check_supported(const cJSON *cfg, const char *where) {
  const cJSON *type = item(cfg, "model_type");
  bool own = cJSON_IsString(type) && strcmp(type->valuestring, OWN_MODEL_TYPE) == 0;
  if ((!own && expect_string(cfg, where, "model_type", "qwen3", true)) ||
      expect_string(cfg, where, "hidden_act", "silu", false) ||
      expect_false(cfg, where, "attention_bias") ||
      expect_false(cfg, where, "use_sliding_window") ||
      expect_null(cfg, where, "rope_scaling") || check_layer_types(cfg, where))
    return -1;
  // Newer transformers write RoPE settings as rope_parameters {rope_type, rope_theta}.
  const cJSON *rp = item(cfg, "rope_parameters");
  if (!rp || cJSON_IsNull(rp)) return 0;
  char rp_where[600];
  snprintf(rp_where, sizeof rp_where, "%s.rope_parameters", where);
  if (ng_json_expect_object(rp, rp_where) ||
      expect_string(rp, rp_where, "rope_type", "default", true))
    return -1;
  const cJSON *a = item(cfg, "rope_theta"), *b = item(rp, "rope_theta");
  if (a && b && !cJSON_Compare(a, b, true))
    return ng_fail("%s: rope_theta and rope_parameters.rope_theta differ", where);
  return 0;
}

// Copies `key` from src into dst if present, else adds `fallback` (which may be NULL).
static void copy_or(cJSON *dst, const cJSON *src, const char *key, cJSON *fallback) {
  const cJSON *v = item(src, key);
  cJSON *add = v ? cJSON_Duplicate(v, true) : fallback;
  if (v) cJSON_Delete(fallback);
  if (add) NG_ASSERT(cJSON_AddItemToObject(dst, key, add));
}

// The normgrow model object (config.h's keys) of a Qwen3 config.json, with
// transformers' defaults for absent optional keys. Absent required keys stay
// absent, so ng_model_config_parse names them.
static cJSON *to_normgrow(const cJSON *cfg) {
  static const char *const required[] = {"vocab_size", "hidden_size", "intermediate_size",
                                         "num_hidden_layers", "num_attention_heads",
                                         "num_key_value_heads", NULL};
  cJSON *ng = cJSON_CreateObject();
  NG_ASSERT(ng != NULL);
  for (const char *const *k = required; *k; k++) copy_or(ng, cfg, *k, NULL);
  copy_or(ng, cfg, "head_dim", cJSON_CreateNumber(128));  // transformers' Qwen3Config default
  const cJSON *rp = item(cfg, "rope_parameters");
  const cJSON *rp_theta = cJSON_IsObject(rp) ? item(rp, "rope_theta") : NULL;
  copy_or(ng, cfg, "rope_theta",
          rp_theta ? cJSON_Duplicate(rp_theta, true) : cJSON_CreateNumber(10000.0));
  copy_or(ng, cfg, "rms_norm_eps", cJSON_CreateNumber(1e-6));
  copy_or(ng, cfg, "tie_word_embeddings", cJSON_CreateFalse());
  copy_or(ng, cfg, "norm_placement", cJSON_CreateString("pre"));
  copy_or(ng, cfg, "final_norm", cJSON_CreateTrue());
  copy_or(ng, cfg, "deepnorm_alpha", NULL);  // a placement's own keys: where it has them
  copy_or(ng, cfg, "mixln_post_layers", NULL);
  copy_or(ng, cfg, "layer_placements", NULL);
  return ng;
}

int ng_hf_read_config(const char *dir, ng_model_config *out) {
  char *path = ng_path_join(dir, HF_CONFIG);
  cJSON *cfg = read_json(path), *ng = NULL;
  int rc = !cfg || ng_json_expect_object(cfg, path) || check_no_duplicates(cfg, path) ||
                   check_supported(cfg, path) || !(ng = to_normgrow(cfg)) ||
                   ng_model_config_parse(ng, path, out)
               ? -1
               : 0;
  cJSON_Delete(ng);
  cJSON_Delete(cfg);
  free(path);
  return rc;
}

// ---------------------------------------------------------------- checkpoint

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const ng_hf_entry *)a)->name, ((const ng_hf_entry *)b)->name);
}

static const ng_hf_entry *find_entry(const ng_hf_checkpoint *ck, const char *name) {
  if (ck->n_entries == 0) return NULL;
  ng_hf_entry key = {.name = name};
  return bsearch(&key, ck->entries, ck->n_entries, sizeof key, cmp_entry);
}

const ng_st_tensor *ng_hf_find(const ng_hf_checkpoint *ck, const char *name,
                               const ng_st_file **file) {
  const ng_hf_entry *e = find_entry(ck, name);
  if (e && file) *file = &ck->files[e->file];
  return e ? e->tensor : NULL;
}

void ng_hf_close(ng_hf_checkpoint *ck) {
  for (int i = 0; i < ck->n_files; i++) ng_st_close(&ck->files[i]);
  free(ck->files);
  free(ck->entries);
  free(ck->path);
  memset(ck, 0, sizeof *ck);
}

// Single file: every tensor of it.
static int open_single(ng_hf_checkpoint *ck) {
  ck->files = ng_xcalloc(1, sizeof *ck->files);
  if (ng_st_open(&ck->files[0], ck->path)) return -1;
  ck->n_files = 1;
  const ng_st_file *f = &ck->files[0];
  ck->n_entries = (size_t)f->n;
  ck->entries = ng_xcalloc(ck->n_entries, sizeof *ck->entries);
  for (int i = 0; i < f->n; i++)
    ck->entries[i] = (ng_hf_entry){f->tensors[i].name, 0, &f->tensors[i]};
  qsort(ck->entries, ck->n_entries, sizeof *ck->entries, cmp_entry);
  return 0;
}

// The file index of shard `name` (of tensor `tensor`), opened on first use.
static int shard_file(ng_hf_checkpoint *ck, const char *dir, const char *name,
                      const char *tensor) {
  if (!*name || strchr(name, '/') || strstr(name, ".."))
    return ng_fail("%s: tensor \"%s\" is mapped to \"%s\", which is not a plain file name",
                   ck->path, tensor, name);
  char *path = ng_path_join(dir, name);
  int found = -1;
  for (int i = 0; i < ck->n_files && found < 0; i++)
    if (strcmp(ck->files[i].path, path) == 0) found = i;
  if (found < 0) {
    if (ng_st_open(&ck->files[ck->n_files], path) == 0) {
      found = ck->n_files++;
    } else {
      ng_fail_prefix(ck->path);  // "<index>: <shard>: cannot open: ..."
    }
  }
  free(path);
  return found;
}

// Each shard must hold only the tensors the weight_map maps to it.
static int check_shards_listed(const ng_hf_checkpoint *ck) {
  for (int i = 0; i < ck->n_files; i++) {
    const ng_st_file *f = &ck->files[i];
    for (int j = 0; j < f->n; j++) {
      const ng_hf_entry *e = find_entry(ck, f->tensors[j].name);
      if (!e || e->file != i)
        return ng_fail("%s: %s holds tensor \"%s\", which the weight_map does not map to it",
                       ck->path, f->path, f->tensors[j].name);
    }
  }
  return 0;
}

// Opens every shard the index's weight_map names and builds the entries.
static int open_index(ng_hf_checkpoint *ck, const char *dir, const cJSON *index) {
  char where[600];
  snprintf(where, sizeof where, "%s.weight_map", ck->path);
  if (ng_json_expect_object(index, ck->path)) return -1;
  const cJSON *map = item(index, "weight_map");
  if (!map) return ng_fail("%s: missing", where);
  if (ng_json_expect_object(map, where)) return -1;
  size_t n = 0;
  for (const cJSON *it = map->child; it; it = it->next) n++;
  if (n == 0) return ng_fail("%s: empty", where);
  ck->files = ng_xcalloc(n, sizeof *ck->files);  // at most one shard per tensor
  ck->entries = ng_xcalloc(n, sizeof *ck->entries);
  for (const cJSON *it = map->child; it; it = it->next) {
    if (!cJSON_IsString(it))
      return ng_fail("%s.\"%s\": expected a shard file name", where, it->string);
    int s = shard_file(ck, dir, it->valuestring, it->string);
    if (s < 0) return -1;
    const ng_st_tensor *t = ng_st_find(&ck->files[s], it->string);
    if (!t)
      return ng_fail("%s: tensor \"%s\" is mapped to %s, which does not hold it", ck->path,
                     it->string, ck->files[s].path);
    ck->entries[ck->n_entries++] = (ng_hf_entry){t->name, s, t};
  }
  qsort(ck->entries, ck->n_entries, sizeof *ck->entries, cmp_entry);
  for (size_t i = 1; i < ck->n_entries; i++)
    if (strcmp(ck->entries[i - 1].name, ck->entries[i].name) == 0)
      return ng_fail("%s: tensor \"%s\" is listed twice", where, ck->entries[i].name);
  return check_shards_listed(ck);
}

int ng_hf_open(ng_hf_checkpoint *ck, const char *dir) {
  memset(ck, 0, sizeof *ck);
  ck->path = ng_path_join(dir, HF_SINGLE);  // preferred when both exist, as in transformers
  int rc;
  if (file_exists(ck->path)) {
    rc = open_single(ck);
  } else {
    free(ck->path);
    ck->path = ng_path_join(dir, HF_INDEX);
    cJSON *index = NULL;
    if (!file_exists(ck->path))
      rc = ng_fail("%s: neither %s nor %s exists", dir, HF_SINGLE, HF_INDEX);
    else
      rc = (index = read_json(ck->path)) ? open_index(ck, dir, index) : -1;
    cJSON_Delete(index);
  }
  if (rc) ng_hf_close(ck);
  return rc;
}

// ---------------------------------------------------------------- loading

// `ck` must hold every weight of `skel` with its exact shape and a float dtype.
static int check_weights(const ng_hf_checkpoint *ck, const ng_model *skel) {
  for (int i = 0; i < skel->n_params; i++) {
    const ng_param *p = &skel->params[i];
    const ng_st_file *f = NULL;
    if (!ng_hf_find(ck, p->name, &f))
      return ng_fail("%s: tensor \"%s\" is missing", ck->path, p->name);
    if (ng_st_check(f, p->name, p->ndim, p->shape, true)) return -1;
  }
  return 0;
}

// N of a name "model.layers.N.<rest>"; false for any other name.
static bool layer_of(const char *name, long long *n) {
  static const char prefix[] = "model.layers.";
  if (strncmp(name, prefix, sizeof prefix - 1) != 0) return false;
  const char *digits = name + sizeof prefix - 1;
  char *end;
  if (!isdigit((unsigned char)*digits)) return false;
  errno = 0;
  *n = strtoll(digits, &end, 10);
  return errno == 0 && *end == '.';
}

// Every tensor of `ck` must be a weight of `skel`: anything else means that
// config.json describes another model than the weights (more layers, biases,
// another norm placement), which transformers would only warn about.
static int check_no_extra(const ng_hf_checkpoint *ck, const ng_model *skel) {
  const ng_model_config *c = &skel->cfg;
  for (size_t i = 0; i < ck->n_entries; i++) {
    const char *name = ck->entries[i].name;
    long long layer;
    if (ng_model_find(skel, name)) continue;
    // Tied: transformers points lm_head at the embeddings and drops this copy.
    if (c->tie_word_embeddings && strcmp(name, "lm_head.weight") == 0) continue;
    if (layer_of(name, &layer) && layer >= c->num_hidden_layers)
      return ng_fail("%s: checkpoint has layer %lld but config.json says num_hidden_layers = %lld",
                     ck->path, layer, (long long)c->num_hidden_layers);
    return ng_fail("%s: tensor \"%s\" is not a weight of the model config.json describes",
                   ck->path, name);
  }
  return 0;
}

// Converts every weight (already checked) to fp32 and uploads it.
static int fill_weights(ng_model *m, const ng_hf_checkpoint *ck) {
  size_t max = 0;
  for (int i = 0; i < m->n_params; i++)
    if (m->params[i].numel > max) max = m->params[i].numel;
  float *host = ng_xmalloc(max * sizeof *host);
  int rc = 0;
  for (int i = 0; i < m->n_params && rc == 0; i++) {
    const ng_param *p = &m->params[i];
    const ng_st_file *f = NULL;
    const ng_st_tensor *t = ng_hf_find(ck, p->name, &f);
    NG_ASSERT(t != NULL);  // check_weights found it
    rc = ng_st_to_f32(f, t, host);
    if (rc == 0) m->be->upload(m->be, p->data, host, p->numel * sizeof *host);
  }
  free(host);
  return rc;
}

int ng_hf_load(const char *dir, ng_backend *be, bool trainable, ng_model **out) {
  *out = NULL;
  ng_model_config cfg;
  ng_hf_checkpoint ck;
  if (ng_hf_read_config(dir, &cfg) || ng_hf_open(&ck, dir)) return -1;
  if ((int64_t)ck.n_entries < ng_model_n_weights(&cfg)) {  // before the names of L blocks are made
    ng_fail("%s: %zu tensors, but config.json's model of %lld blocks has %lld weights", ck.path,
            ck.n_entries, (long long)cfg.num_hidden_layers, (long long)ng_model_n_weights(&cfg));
    ng_hf_close(&ck);
    return -1;
  }
  ng_model *skel = ng_model_create(NULL, &cfg, false);
  int rc = check_weights(&ck, skel) || check_no_extra(&ck, skel) ||
                   ng_plan_check_model_memory(&cfg, trainable, false, dir)
               ? -1
               : 0;
  ng_model_free(skel);
  ng_model *m = NULL;
  if (rc == 0) {
    m = ng_model_create(be, &cfg, trainable);
    rc = fill_weights(m, &ck);
  }
  ng_hf_close(&ck);
  if (rc) {
    ng_model_free(m);
    return -1;
  }
  *out = m;
  return 0;
}

// ---------------------------------------------------------------- export

bool ng_hf_plain_qwen3(const ng_model_config *c) {
  switch (c->norm_placement) {
    case NG_NORM_PRE: return c->final_norm;
    case NG_NORM_POST:
    case NG_NORM_LNS:
    case NG_NORM_SANDWICH:
    case NG_NORM_DEEPNORM:
    case NG_NORM_MIXLN:
    case NG_NORM_HYBRID: return false;
  }
  NG_ASSERT(!"ng_norm_placement out of range");
  return false;
}

// A Qwen3ForCausalLM config.json (keys sorted, as transformers writes them);
// unless the model is Qwen3's own Pre-Norm with a final norm, the custom
// architecture NormgrowForCausalLM (model_type "normgrow", auto_map naming
// the code beside the weights) with norm_placement and final_norm.
static cJSON *export_config(const ng_model_config *c, ng_dtype dtype) {
  bool plain = ng_hf_plain_qwen3(c);
  cJSON *o = cJSON_CreateObject();
  NG_ASSERT(o != NULL);
  cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString(plain ? "Qwen3ForCausalLM" : "NormgrowForCausalLM"));
  cJSON_AddFalseToObject(o, "attention_bias");
  cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
  if (!plain) {
    cJSON *map = cJSON_AddObjectToObject(o, "auto_map");
    cJSON_AddStringToObject(map, "AutoConfig", "configuration_normgrow.NormgrowConfig");
    cJSON_AddStringToObject(map, "AutoModelForCausalLM", "modeling_normgrow.NormgrowForCausalLM");
  }
  if (c->vocab_size > QWEN_ENDOFTEXT) {  // only where the id exists
    cJSON_AddNumberToObject(o, "bos_token_id", QWEN_ENDOFTEXT);
    cJSON_AddNumberToObject(o, "eos_token_id", QWEN_ENDOFTEXT);
  }
  if (c->norm_placement == NG_NORM_DEEPNORM)
    cJSON_AddNumberToObject(o, "deepnorm_alpha", c->deepnorm_alpha);
  if (!plain) cJSON_AddBoolToObject(o, "final_norm", c->final_norm);
  cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
  cJSON_AddStringToObject(o, "hidden_act", "silu");
  cJSON_AddNumberToObject(o, "hidden_size", (double)c->hidden_size);
  cJSON_AddNumberToObject(o, "initializer_range", 0.02);
  cJSON_AddNumberToObject(o, "intermediate_size", (double)c->intermediate_size);
  if (c->norm_placement == NG_NORM_HYBRID) {
    cJSON *list = cJSON_AddArrayToObject(o, "layer_placements");
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
      cJSON_AddItemToArray(list, cJSON_CreateString(ng_norm_placement_name(c->layer_placements[l])));
  }
  cJSON_AddNumberToObject(o, "max_position_embeddings", 32768);
  cJSON_AddNumberToObject(o, "max_window_layers", (double)c->num_hidden_layers);
  if (c->norm_placement == NG_NORM_MIXLN)
    cJSON_AddNumberToObject(o, "mixln_post_layers", (double)c->mixln_post_layers);
  cJSON_AddStringToObject(o, "model_type", plain ? "qwen3" : OWN_MODEL_TYPE);
  if (!plain)
    cJSON_AddStringToObject(o, "norm_placement", ng_norm_placement_name(c->norm_placement));
  cJSON_AddNumberToObject(o, "num_attention_heads", (double)c->num_attention_heads);
  cJSON_AddNumberToObject(o, "num_hidden_layers", (double)c->num_hidden_layers);
  cJSON_AddNumberToObject(o, "num_key_value_heads", (double)c->num_key_value_heads);
  cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
  cJSON_AddNullToObject(o, "rope_scaling");
  cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
  cJSON_AddNullToObject(o, "sliding_window");
  cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
  cJSON_AddStringToObject(o, "torch_dtype", dtype == NG_BF16 ? "bfloat16" : "float32");
  cJSON_AddTrueToObject(o, "use_cache");
  cJSON_AddFalseToObject(o, "use_sliding_window");
  cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab_size);
  return o;
}

// LayerScale is folded into the export: gamma [D] scales the rows of the tensor
// whose output is the branch term it multiplies (gamma (W x) = (diag(gamma) W) x):
// o_proj [D, H hd] and down_proj [D, F], or in a block with sublayer norms
// (sandwich) the gains [D] of post_attention_layernorm and
// post_feedforward_layernorm. So the layer scales themselves are not written
// and the export is the same function as plain Qwen3 (or NormgrowForCausalLM)
// tensors.

// The layer scale folded into p's rows (see above), else NULL.
static const float *folded_scale(const ng_model *m, const ng_param *p) {
  if (!m->cfg.layer_scale || p->layer < 0) return NULL;
  const ng_layer *w = &m->w.layers[p->layer];
  bool sublayer_norms = ng_block_layout_of(&m->cfg, p->layer).sublayer_norms;
  ng_block_role att = sublayer_norms ? NG_ROLE_ATT_OUT_NORM : NG_ROLE_O;
  ng_block_role mlp = sublayer_norms ? NG_ROLE_MLP_OUT_NORM : NG_ROLE_DOWN;
  if (p->role == att) return w->attn_layer_scale;
  if (p->role == mlp) return w->mlp_layer_scale;
  return NULL;
}

// Host copy of p's weights in `dtype` (F32 or BF16), malloc'd; a layer scale folded in.
static void *param_host(const ng_model *m, const ng_param *p, ng_dtype dtype) {
  float *f = ng_xmalloc(p->numel * sizeof *f);
  m->be->download(m->be, f, p->data, p->numel * sizeof *f);
  const float *gamma = folded_scale(m, p);
  if (gamma) {
    size_t rows = (size_t)p->shape[0], cols = p->ndim == 2 ? (size_t)p->shape[1] : 1;
    float *g = ng_xmalloc(rows * sizeof *g);
    m->be->download(m->be, g, gamma, rows * sizeof *g);
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) f[r * cols + c] *= g[r];
    free(g);
  }
  if (dtype == NG_F32) return f;
  uint16_t *h = ng_xmalloc(p->numel * sizeof *h);
  for (size_t i = 0; i < p->numel; i++) h[i] = ng_f32_to_bf16(f[i]);
  free(f);
  return h;
}

// Assigns each exported parameter, in order, to a shard of at most `limit`
// bytes (one larger than the limit gets a shard of its own; a layer scale -1:
// none); returns the number of shards.
static int plan_shards(const ng_model *m, size_t elem, size_t limit, int *shard_of) {
  int n = 0;
  size_t used = 0;
  for (int i = 0; i < m->n_params; i++) {
    shard_of[i] = -1;
    if (ng_param_is_layer_scale(&m->params[i])) continue;
    size_t bytes = m->params[i].numel * elem;
    if (n == 0 || (used > 0 && used + bytes > limit)) {
      n++;
      used = 0;
    }
    shard_of[i] = n - 1;
    used += bytes;
  }
  return n;
}

// The file name of shard s (0-based) of n: "model-00001-of-00003.safetensors".
static void shard_name(char *buf, size_t cap, int s, int n) {
  snprintf(buf, cap, "model-%05d-of-%05d.safetensors", s + 1, n);
}

// Writes the parameters of shard `s` into `path` in `dtype`.
static int write_shard(const ng_model *m, const int *shard_of, int s, ng_dtype dtype,
                       const char *path) {
  ng_st_writer *w = ng_st_writer_new();
  // transformers refuses safetensors metadata without a known "format".
  ng_st_writer_meta(w, "format", "pt");
  void **host = ng_xcalloc((size_t)m->n_params, sizeof *host);
  for (int i = 0; i < m->n_params; i++) {
    const ng_param *p = &m->params[i];
    if (shard_of[i] != s) continue;
    host[i] = param_host(m, p, dtype);
    ng_st_writer_add(w, p->name, dtype, p->ndim, p->shape, host[i]);
  }
  int rc = ng_st_writer_save(w, path);
  for (int i = 0; i < m->n_params; i++) free(host[i]);
  free(host);
  ng_st_writer_free(w);
  return rc;
}

// Removes `<dir>/<name>` if it exists.
static int remove_stale(const char *dir, const char *name) {
  char *path = ng_path_join(dir, name);
  int rc = 0;
  if (unlink(path) != 0 && errno != ENOENT)
    rc = ng_fail("%s: cannot remove: %s", path, strerror(errno));
  free(path);
  return rc;
}

// {"metadata": {"total_size": bytes}, "weight_map": {"name": "shard", ...}}.
static cJSON *index_json(const ng_model *m, const int *shard_of, int n_shards, size_t elem) {
  cJSON *o = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(o, "metadata");
  cJSON *map = cJSON_AddObjectToObject(o, "weight_map");
  size_t total = 0;
  for (int i = 0; i < m->n_params; i++) {
    if (shard_of[i] < 0) continue;
    char name[64];
    shard_name(name, sizeof name, shard_of[i], n_shards);
    cJSON_AddStringToObject(map, m->params[i].name, name);
    total += m->params[i].numel * elem;
  }
  cJSON_AddNumberToObject(meta, "total_size", (double)total);
  return o;
}

// The weights: one model.safetensors, or shards and their index.
static int write_weights(const ng_model *m, const char *dir, ng_dtype dtype, size_t limit) {
  size_t elem = ng_dtype_size(dtype);
  int *shard_of = ng_xmalloc((size_t)m->n_params * sizeof *shard_of);
  int n = plan_shards(m, elem, limit, shard_of), rc = 0;
  for (int s = 0; s < n && rc == 0; s++) {
    char name[64];
    shard_name(name, sizeof name, s, n);
    char *path = ng_path_join(dir, n == 1 ? HF_SINGLE : name);
    rc = write_shard(m, shard_of, s, dtype, path);
    free(path);
  }
  if (rc == 0 && n > 1) {
    cJSON *index = index_json(m, shard_of, n, elem);
    char *path = ng_path_join(dir, HF_INDEX);
    rc = write_json(path, index);
    free(path);
    cJSON_Delete(index);
  }
  // The other layout's top file would shadow (or confuse) the new weights.
  if (rc == 0) rc = remove_stale(dir, n == 1 ? HF_INDEX : HF_SINGLE);
  free(shard_of);
  return rc;
}

int ng_hf_export(const ng_model *m, const char *dir, ng_dtype dtype, size_t shard_bytes) {
  if (dtype != NG_F32 && dtype != NG_BF16)
    return ng_fail("%s: cannot export weights as %s (F32 or BF16)", dir, ng_dtype_name(dtype));
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
    if (m->growth_gate[l] != 1.0f)
      return ng_fail("%s: block %lld has growth gate %g; Qwen3 has no gates", dir,
                     (long long)l, (double)m->growth_gate[l]);
  if (ng_make_dir(dir) || write_weights(m, dir, dtype, shard_bytes)) return -1;
  cJSON *cfg = export_config(&m->cfg, dtype);
  char *path = ng_path_join(dir, HF_CONFIG);
  int rc = write_json(path, cfg);
  free(path);
  cJSON_Delete(cfg);
  bool plain = ng_hf_plain_qwen3(&m->cfg);
  static const struct {
    const char *name, *text;
  } code[] = {{"configuration_normgrow.py", configuration_py}, {"modeling_normgrow.py", modeling_py}};
  for (size_t i = 0; i < sizeof code / sizeof code[0] && rc == 0; i++) {
    path = ng_path_join(dir, code[i].name);
    rc = plain ? remove_stale(dir, code[i].name) : ng_write_text_atomic(path, code[i].text);
    free(path);
  }
  return rc;
}
