// normgrow: strict JSON configuration parsing with cJSON.
#include "normgrow/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgrow/common.h"

int ng_json_expect_object(const cJSON *obj, const char *where) {
  if (!cJSON_IsObject(obj)) return ng_fail("%s: expected a JSON object", where);
  return 0;
}

int ng_json_only_keys(const cJSON *obj, const char *where, const char *const *keys) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    bool known = false;
    for (const char *const *k = keys; *k && !known; k++) known = strcmp(*k, it->string) == 0;
    if (!known) return ng_fail("%s: unknown key \"%s\"", where, it->string);
    for (const cJSON *dup = it->next; dup; dup = dup->next)
      if (strcmp(dup->string, it->string) == 0)
        return ng_fail("%s: duplicate key \"%s\"", where, it->string);
  }
  return 0;
}

static const cJSON *field(const cJSON *obj, const char *where, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) ng_fail("%s.%s: missing", where, key);
  return v;
}

void ng_shortest(double v, char out[NG_SHORTEST_CHARS]) {
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(out, NG_SHORTEST_CHARS, "%.*g", digits, v);
    if (strtod(out, NULL) == v) return;
  }
}

// An integer bound as a person writes it: past 2^53 - 1 it is 2^53 - 1 (no
// larger integer is read), and from 2^20 on a power of two or one less by name.
static void int_limit(int64_t v, char out[32]) {
  int64_t a = v < 0 ? -v : v;  // bounds are far from INT64_MIN
  const char *sign = v < 0 ? "-" : "";
  int k = 0;
  while (k < 62 && ((int64_t)1 << (k + 1)) <= a) k++;
  if (a >= NG_JSON_MAX_INT)
    snprintf(out, 32, "%s2^53 - 1", sign);
  else if (a >= ((int64_t)1 << 20) && a == (int64_t)1 << k)
    snprintf(out, 32, "%s2^%d", sign, k);
  else if (a >= ((int64_t)1 << 20) && a == ((int64_t)1 << (k + 1)) - 1)
    snprintf(out, 32, "%s2^%d - 1", sign, k + 1);
  else
    snprintf(out, 32, "%lld", (long long)v);
}

int ng_json_int_value(const cJSON *v, const char *what, int64_t min, int64_t max, int64_t *out) {
  double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (!cJSON_IsNumber(v) || d != floor(d)) return ng_fail("%s: expected an integer", what);
  // Beyond 2^53 - 1 a JSON number no longer names one integer (the next ones
  // round to it), and an int64 cast of it could be undefined.
  if (fabs(d) > NG_JSON_MAX_INT) {
    char got[NG_SHORTEST_CHARS];
    ng_shortest(d, got);
    return ng_fail("%s: %s is beyond 2^53 - 1, the largest integer JSON holds exactly", what, got);
  }
  int64_t i = (int64_t)d;
  if (i < min || i > max) {
    char lo[32], hi[32];
    int_limit(min, lo);
    int_limit(max, hi);
    return ng_fail("%s: %lld is outside [%s, %s]", what, (long long)i, lo, hi);
  }
  *out = i;
  return 0;
}

int ng_json_int(const cJSON *obj, const char *where, const char *key, int64_t min,
                int64_t max, int64_t *out) {
  const cJSON *v = field(obj, where, key);
  if (!v) return -1;
  char what[160];
  snprintf(what, sizeof what, "%s.%s", where, key);
  return ng_json_int_value(v, what, min, max, out);
}

int ng_json_num(const cJSON *obj, const char *where, const char *key, double min,
                double max, double *out) {
  const cJSON *v = field(obj, where, key);
  if (!v) return -1;
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
    return ng_fail("%s.%s: expected a number", where, key);
  if (v->valuedouble < min || v->valuedouble > max) {
    char got[NG_SHORTEST_CHARS], lo[NG_SHORTEST_CHARS], hi[NG_SHORTEST_CHARS];
    ng_shortest(v->valuedouble, got);
    ng_shortest(min, lo);
    ng_shortest(max, hi);
    return ng_fail("%s.%s: %s is outside [%s, %s]", where, key, got, lo, hi);
  }
  *out = v->valuedouble;
  return 0;
}

int ng_json_bool(const cJSON *obj, const char *where, const char *key, bool *out) {
  const cJSON *v = field(obj, where, key);
  if (!v) return -1;
  if (!cJSON_IsBool(v)) return ng_fail("%s.%s: expected true or false", where, key);
  *out = cJSON_IsTrue(v);
  return 0;
}

int ng_json_str(const cJSON *obj, const char *where, const char *key, const char **out) {
  const cJSON *v = field(obj, where, key);
  if (!v) return -1;
  if (!cJSON_IsString(v)) return ng_fail("%s.%s: expected a string", where, key);
  *out = v->valuestring;
  return 0;
}

// Every finite number of a copy of j as a raw item of the shortest decimal
// that reads back to the same double (non-finite ones stay numbers: null).
static void exact_numbers(cJSON *j) {
  for (cJSON *it = j; it; it = it->next) {
    if (cJSON_IsNumber(it) && isfinite(it->valuedouble)) {
      char text[NG_SHORTEST_CHARS];
      ng_shortest(it->valuedouble, text);
      it->type = cJSON_Raw;
      it->valuestring = ng_xstrdup(text);
    }
    exact_numbers(it->child);
  }
}

char *ng_json_print(const cJSON *j, bool formatted) {
  cJSON *copy = cJSON_Duplicate(j, true);
  NG_ASSERT(copy != NULL);
  exact_numbers(copy);
  char *text = formatted ? cJSON_Print(copy) : cJSON_PrintUnformatted(copy);
  NG_ASSERT(text != NULL);
  cJSON_Delete(copy);
  return text;
}

// Sizes up to 2^31 - 1 keep every BLAS dimension an int; products of sizes are
// computed in size_t / int64 everywhere else.
#define NG_MAX_DIM 2147483647LL

// hybrid's layer_placements: L <= NG_MAX_LAYERS entries, each pre or post.
static int layer_placements_validate(const ng_model_config *c, const char *where) {
  if (c->num_hidden_layers > NG_MAX_LAYERS)
    return ng_fail("%s.num_hidden_layers: %lld, but a hybrid model has at most %d blocks", where,
                   (long long)c->num_hidden_layers, NG_MAX_LAYERS);
  for (int64_t l = 0; l < c->num_hidden_layers; l++) {
    ng_norm_placement p = c->layer_placements[l];
    if (p != NG_NORM_PRE && p != NG_NORM_POST)
      return ng_fail("%s.layer_placements[%lld]: %s; a hybrid model's blocks are \"pre\" or \"post\"",
                     where, (long long)l,
                     (int)p >= 0 && p <= NG_NORM_LAST ? ng_norm_placement_name(p) : "out of range");
  }
  return 0;
}

// The keys of one placement: deepnorm's alpha > 0, mixln's 0 <= P <= L,
// hybrid's layer_placements, and zero where the placement has no such key.
static int placement_keys_validate(const ng_model_config *c, const char *where) {
  bool deepnorm = false, mixln = false;
  switch (c->norm_placement) {
    case NG_NORM_PRE:
    case NG_NORM_POST:
    case NG_NORM_LNS:
    case NG_NORM_SANDWICH: break;
    case NG_NORM_DEEPNORM: deepnorm = true; break;
    case NG_NORM_MIXLN: mixln = true; break;
    case NG_NORM_HYBRID:
      if (layer_placements_validate(c, where)) return -1;
      break;
  }
  if (deepnorm && !(c->deepnorm_alpha > 0.0 && isfinite(c->deepnorm_alpha)))
    return ng_fail("%s.deepnorm_alpha: %g is not a finite number > 0", where, c->deepnorm_alpha);
  if (!deepnorm && c->deepnorm_alpha != 0.0)
    return ng_fail("%s.deepnorm_alpha: only the deepnorm placement has an alpha", where);
  if (mixln && (c->mixln_post_layers < 0 || c->mixln_post_layers > c->num_hidden_layers))
    return ng_fail("%s.mixln_post_layers: %lld is outside 0..num_hidden_layers (%lld)", where,
                   (long long)c->mixln_post_layers, (long long)c->num_hidden_layers);
  if (!mixln && c->mixln_post_layers != 0)
    return ng_fail("%s.mixln_post_layers: only the mixln placement has post layers", where);
  return 0;
}

int ng_model_config_validate(const ng_model_config *c, const char *where) {
  if (c->num_attention_heads % c->num_key_value_heads != 0)
    return ng_fail("%s.num_attention_heads: %lld is not divisible by num_key_value_heads %lld",
                   where, (long long)c->num_attention_heads,
                   (long long)c->num_key_value_heads);
  if (c->head_dim % 2 != 0)
    return ng_fail("%s.head_dim: %lld is odd; rotary embedding pairs dimensions", where,
                   (long long)c->head_dim);
  if (c->num_attention_heads * c->head_dim > NG_MAX_DIM ||
      c->vocab_size * c->hidden_size > (int64_t)1 << 40)
    return ng_fail("%s: sizes too large", where);
  // The parameter count in double (an upper bound within rounding: norms
  // counted for both placements), so that no product of sizes can wrap.
  double D = (double)c->hidden_size, F = (double)c->intermediate_size, hd = (double)c->head_dim;
  double attn = D * hd * 2.0 * (double)(c->num_attention_heads + c->num_key_value_heads);
  double block = attn + 3.0 * D * F + 2.0 * hd + 3.0 * D;
  double total = (double)c->num_hidden_layers * block +
                 (c->tie_word_embeddings ? 1.0 : 2.0) * (double)c->vocab_size * D + D;
  if (total > (double)NG_MAX_PARAMS)
    return ng_fail("%s: %.4g parameters, more than the %lld (2^40) allowed", where,
                   total, (long long)NG_MAX_PARAMS);
  return placement_keys_validate(c, where);
}

const char *ng_norm_placement_name(ng_norm_placement p) {
  switch (p) {
    case NG_NORM_PRE: return "pre";
    case NG_NORM_POST: return "post";
    case NG_NORM_LNS: return "lns";
    case NG_NORM_SANDWICH: return "sandwich";
    case NG_NORM_DEEPNORM: return "deepnorm";
    case NG_NORM_MIXLN: return "mixln";
    case NG_NORM_HYBRID: return "hybrid";
  }
  NG_ASSERT(!"ng_norm_placement out of range");
  return NULL;
}

const char *ng_norm_placement_title(ng_norm_placement p) {
  switch (p) {
    case NG_NORM_PRE: return "Pre-Norm";
    case NG_NORM_POST: return "Post-Norm";
    case NG_NORM_LNS: return "LNS";
    case NG_NORM_SANDWICH: return "Sandwich";
    case NG_NORM_DEEPNORM: return "DeepNorm";
    case NG_NORM_MIXLN: return "Mix-LN";
    case NG_NORM_HYBRID: return "Hybrid";
  }
  NG_ASSERT(!"ng_norm_placement out of range");
  return NULL;
}

int ng_norm_placement_from_name(const char *name, ng_norm_placement *out) {
  static const ng_norm_placement all[] = {NG_NORM_PRE,      NG_NORM_POST,     NG_NORM_LNS,
                                          NG_NORM_SANDWICH, NG_NORM_DEEPNORM, NG_NORM_MIXLN,
                                          NG_NORM_HYBRID};
  _Static_assert(sizeof all / sizeof all[0] == NG_NORM_LAST + 1, "every placement listed");
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strcmp(name, ng_norm_placement_name(all[i])) == 0) {
      *out = all[i];
      return 0;
    }
  return -1;
}

// hybrid's "layer_placements": one placement name per block.
static int layer_placements_parse(const cJSON *obj, const char *where, ng_model_config *c) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "layer_placements");
  if (!cJSON_IsArray(list)) return ng_fail("%s.layer_placements: expected an array of placement names", where);
  int64_t n = cJSON_GetArraySize(list);
  if (n != c->num_hidden_layers)
    return ng_fail("%s.layer_placements: %lld entries for num_hidden_layers %lld", where, (long long)n,
                   (long long)c->num_hidden_layers);
  if (n > NG_MAX_LAYERS) return layer_placements_validate(c, where);  // names the limit
  int64_t l = 0;
  for (const cJSON *it = list->child; it; it = it->next, l++)
    if (!cJSON_IsString(it) || ng_norm_placement_from_name(it->valuestring, &c->layer_placements[l]))
      return ng_fail("%s.layer_placements[%lld]: expected \"pre\" or \"post\"", where, (long long)l);
  return 0;
}

int ng_model_config_parse(const cJSON *obj, const char *where, ng_model_config *c) {
  static const char *const keys[] = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim", "rope_theta",
      "rms_norm_eps", "tie_word_embeddings", "norm_placement", "final_norm",
      "deepnorm_alpha", "mixln_post_layers", "layer_placements", "layer_scale_init", NULL};
  const char *placement;
  memset(c, 0, sizeof *c);
  if (ng_json_expect_object(obj, where) || ng_json_only_keys(obj, where, keys) ||
      ng_json_int(obj, where, "vocab_size", 1, NG_MAX_DIM, &c->vocab_size) ||
      ng_json_int(obj, where, "hidden_size", 1, NG_MAX_DIM, &c->hidden_size) ||
      ng_json_int(obj, where, "intermediate_size", 1, NG_MAX_DIM, &c->intermediate_size) ||
      ng_json_int(obj, where, "num_hidden_layers", 1, 100000, &c->num_hidden_layers) ||
      ng_json_int(obj, where, "num_attention_heads", 1, 65536, &c->num_attention_heads) ||
      ng_json_int(obj, where, "num_key_value_heads", 1, 65536, &c->num_key_value_heads) ||
      ng_json_int(obj, where, "head_dim", 2, 65536, &c->head_dim) ||
      ng_json_num(obj, where, "rope_theta", 1.0, 1e30, &c->rope_theta) ||
      ng_json_num(obj, where, "rms_norm_eps", 0.0, 1.0, &c->rms_norm_eps) ||
      ng_json_bool(obj, where, "tie_word_embeddings", &c->tie_word_embeddings) ||
      ng_json_bool(obj, where, "final_norm", &c->final_norm) ||
      ng_json_str(obj, where, "norm_placement", &placement))
    return -1;
  if (ng_norm_placement_from_name(placement, &c->norm_placement) != 0)
    return ng_fail("%s.norm_placement: \"%s\" is none of %s", where, placement,
                   NG_NORM_PLACEMENT_NAMES);
  if ((cJSON_HasObjectItem(obj, "deepnorm_alpha") &&
       ng_json_num(obj, where, "deepnorm_alpha", 0.0, 1e6, &c->deepnorm_alpha)) ||
      (cJSON_HasObjectItem(obj, "mixln_post_layers") &&
       ng_json_int(obj, where, "mixln_post_layers", 0, 100000, &c->mixln_post_layers)))
    return -1;
  if (c->norm_placement == NG_NORM_DEEPNORM && !cJSON_HasObjectItem(obj, "deepnorm_alpha"))
    return ng_fail("%s.deepnorm_alpha: missing (the deepnorm placement needs it)", where);
  if (c->norm_placement == NG_NORM_MIXLN && !cJSON_HasObjectItem(obj, "mixln_post_layers"))
    return ng_fail("%s.mixln_post_layers: missing (the mixln placement needs it)", where);
  bool hybrid = c->norm_placement == NG_NORM_HYBRID;
  if (hybrid != cJSON_HasObjectItem(obj, "layer_placements"))
    return ng_fail(hybrid ? "%s.layer_placements: missing (the hybrid placement needs it)"
                          : "%s.layer_placements: only the hybrid placement has per-block placements",
                   where);
  if (hybrid && layer_placements_parse(obj, where, c)) return -1;
  c->layer_scale = cJSON_HasObjectItem(obj, "layer_scale_init");
  if (c->layer_scale &&
      ng_json_num(obj, where, "layer_scale_init", -1e3, 1e3, &c->layer_scale_init))
    return -1;
  return ng_model_config_validate(c, where);
}

const char *ng_divergence_name(ng_divergence d) {
  switch (d) {
    case NG_DIV_FORWARD_KL: return "forward_kl";
    case NG_DIV_REVERSE_KL: return "reverse_kl";
    case NG_DIV_JSD: return "jsd";
  }
  NG_ASSERT(!"ng_divergence out of range");
  return NULL;
}

// The optional "divergence" (and with jsd the required "beta") of obj.
static int divergence_parse(const cJSON *obj, const char *where, ng_loss_config *c) {
  static const ng_divergence all[] = {NG_DIV_FORWARD_KL, NG_DIV_REVERSE_KL, NG_DIV_JSD};
  _Static_assert(sizeof all / sizeof all[0] == NG_DIV_LAST + 1, "every divergence listed");
  const char *name = "forward_kl";
  if (cJSON_HasObjectItem(obj, "divergence") && ng_json_str(obj, where, "divergence", &name))
    return -1;
  size_t i = 0;
  while (i < sizeof all / sizeof all[0] && strcmp(name, ng_divergence_name(all[i])) != 0) i++;
  if (i == sizeof all / sizeof all[0])
    return ng_fail("%s.divergence: \"%s\" is none of \"forward_kl\", \"reverse_kl\", \"jsd\"",
                   where, name);
  c->divergence = all[i];
  c->beta = 0.0;
  switch (c->divergence) {
    case NG_DIV_FORWARD_KL:
    case NG_DIV_REVERSE_KL:
      if (cJSON_HasObjectItem(obj, "beta"))
        return ng_fail("%s.beta: only the jsd divergence has a beta", where);
      return 0;
    case NG_DIV_JSD:
      if (ng_json_num(obj, where, "beta", 0.0, 1.0, &c->beta)) return -1;
      if (c->beta <= 0.0 || c->beta >= 1.0)
        return ng_fail("%s.beta: %g is not inside (0, 1)", where, c->beta);
      return 0;
  }
  return ng_fail("%s.divergence: out of range", where);
}

int ng_loss_config_parse(const cJSON *obj, const char *where, ng_loss_config *c) {
  static const char *const keys[] = {"kd_weight", "temperature", "divergence", "beta", NULL};
  if (ng_json_expect_object(obj, where) || ng_json_only_keys(obj, where, keys) ||
      ng_json_num(obj, where, "kd_weight", 0.0, 1.0, &c->kd_weight) ||
      ng_json_num(obj, where, "temperature", 1e-3, 1e3, &c->temperature) ||
      divergence_parse(obj, where, c))
    return -1;
  return 0;
}

int ng_optim_config_parse(const cJSON *obj, const char *where, ng_optim_config *c) {
  static const char *const keys[] = {"lr", "beta1", "beta2", "eps", "weight_decay",
                                     "grad_clip", NULL};
  if (ng_json_expect_object(obj, where) || ng_json_only_keys(obj, where, keys) ||
      ng_json_num(obj, where, "lr", 0.0, 1e3, &c->lr) ||
      ng_json_num(obj, where, "beta1", 0.0, 0.999999, &c->beta1) ||
      ng_json_num(obj, where, "beta2", 0.0, 0.999999999, &c->beta2) ||
      ng_json_num(obj, where, "eps", 0.0, 1.0, &c->eps) ||
      ng_json_num(obj, where, "weight_decay", 0.0, 1e3, &c->weight_decay) ||
      ng_json_num(obj, where, "grad_clip", 0.0, 1e30, &c->grad_clip))
    return -1;
  return 0;
}

cJSON *ng_model_config_to_json(const ng_model_config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab_size);
  cJSON_AddNumberToObject(o, "hidden_size", (double)c->hidden_size);
  cJSON_AddNumberToObject(o, "intermediate_size", (double)c->intermediate_size);
  cJSON_AddNumberToObject(o, "num_hidden_layers", (double)c->num_hidden_layers);
  cJSON_AddNumberToObject(o, "num_attention_heads", (double)c->num_attention_heads);
  cJSON_AddNumberToObject(o, "num_key_value_heads", (double)c->num_key_value_heads);
  cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
  cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
  cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
  cJSON_AddStringToObject(o, "norm_placement", ng_norm_placement_name(c->norm_placement));
  cJSON_AddBoolToObject(o, "final_norm", c->final_norm);
  switch (c->norm_placement) {  // a placement's own keys only: other files read the same
    case NG_NORM_PRE:
    case NG_NORM_POST:
    case NG_NORM_LNS:
    case NG_NORM_SANDWICH: break;
    case NG_NORM_DEEPNORM: cJSON_AddNumberToObject(o, "deepnorm_alpha", c->deepnorm_alpha); break;
    case NG_NORM_MIXLN:
      cJSON_AddNumberToObject(o, "mixln_post_layers", (double)c->mixln_post_layers);
      break;
    case NG_NORM_HYBRID: {
      cJSON *list = cJSON_AddArrayToObject(o, "layer_placements");
      for (int64_t l = 0; l < c->num_hidden_layers; l++)
        cJSON_AddItemToArray(list, cJSON_CreateString(ng_norm_placement_name(c->layer_placements[l])));
      break;
    }
  }
  if (c->layer_scale) cJSON_AddNumberToObject(o, "layer_scale_init", c->layer_scale_init);
  return o;
}

cJSON *ng_loss_config_to_json(const ng_loss_config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "kd_weight", c->kd_weight);
  cJSON_AddNumberToObject(o, "temperature", c->temperature);
  switch (c->divergence) {  // the default is left out: files without the keys read the same
    case NG_DIV_FORWARD_KL: break;
    case NG_DIV_REVERSE_KL:
      cJSON_AddStringToObject(o, "divergence", ng_divergence_name(c->divergence));
      break;
    case NG_DIV_JSD:
      cJSON_AddStringToObject(o, "divergence", ng_divergence_name(c->divergence));
      cJSON_AddNumberToObject(o, "beta", c->beta);
      break;
  }
  return o;
}

cJSON *ng_optim_config_to_json(const ng_optim_config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "lr", c->lr);
  cJSON_AddNumberToObject(o, "beta1", c->beta1);
  cJSON_AddNumberToObject(o, "beta2", c->beta2);
  cJSON_AddNumberToObject(o, "eps", c->eps);
  cJSON_AddNumberToObject(o, "weight_decay", c->weight_decay);
  cJSON_AddNumberToObject(o, "grad_clip", c->grad_clip);
  return o;
}
