// normgrow: model, loss and optimizer configuration, parsed strictly from JSON.
//
// Field names are Hugging Face Qwen3 config.json names, plus norm_placement
// ("pre" | "post" | "lns" | "sandwich" | "deepnorm" | "mixln" | "hybrid"),
// final_norm, and the placements' own keys deepnorm_alpha, mixln_post_layers
// and layer_placements. Parsing
// rejects unknown keys, missing keys, values of the wrong JSON type and
// impossible sizes, with one message that names the field ("<where>.num_key_value_heads: ...").
#ifndef NORMGROW_CONFIG_H
#define NORMGROW_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include <cJSON.h>

#include "normgrow/enums.h"

// Where a block's norms sit (docs/golden-contract.md section 2). A closed type:
// every use of it is a switch without default, so that the compiler names each
// place a new placement must be handled.
// lns is LayerNorm-Scaling: pre with each norm's output divided by sqrt(l), l
// the block's 1-based position in the current stack. sandwich (Peri-LN) norms
// each sublayer's input and output; deepnorm is post with the residual scaled
// by deepnorm_alpha; mixln makes its first mixln_post_layers blocks post and
// the others pre; hybrid gives each block its own placement, pre or post, in
// layer_placements (the model a growth with growth.new_block_placement makes:
// new blocks of another placement than the blocks below them). model.h has the
// formulas; ng_block_placement says what each block computes.
typedef enum {
  NG_NORM_PRE = 0,
  NG_NORM_POST = 1,
  NG_NORM_LNS = 2,
  NG_NORM_SANDWICH = 3,
  NG_NORM_DEEPNORM = 4,
  NG_NORM_MIXLN = 5,
  NG_NORM_HYBRID = 6,
} ng_norm_placement;
#define NG_NORM_LAST NG_NORM_HYBRID  // the last one

// Every name, for messages.
#define NG_NORM_PLACEMENT_NAMES \
  "\"pre\", \"post\", \"lns\", \"sandwich\", \"deepnorm\", \"mixln\", \"hybrid\""
// The config name of p: "pre", "post", "lns", "sandwich", "deepnorm", "mixln", "hybrid".
const char *ng_norm_placement_name(ng_norm_placement p);
// Its title in reports: "Pre-Norm", "Post-Norm", "LNS", "Sandwich", "DeepNorm", "Mix-LN",
// "Hybrid".
const char *ng_norm_placement_title(ng_norm_placement p);
// The placement named `name` into *out; -1 (no message) when none is.
int ng_norm_placement_from_name(const char *name, ng_norm_placement *out);

// The most blocks of a model with per-block placements (hybrid), and of a run's
// per-block lists (run.h).
#define NG_MAX_LAYERS 1024

typedef struct {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers;
  int64_t num_attention_heads, num_key_value_heads, head_dim;
  double rope_theta, rms_norm_eps;
  bool tie_word_embeddings, final_norm;
  ng_norm_placement norm_placement;
  double deepnorm_alpha;      // deepnorm only (required there, > 0), else 0
  int64_t mixln_post_layers;  // mixln only (required there, 0..num_hidden_layers), else 0
  // hybrid only (required there): block l's placement, pre or post, for l <
  // num_hidden_layers <= NG_MAX_LAYERS; unused (and not read) with any other
  ng_norm_placement layer_placements[NG_MAX_LAYERS];
  // The optional "layer_scale_init" (LayerScale): when present, every block has
  // two learnable per-channel scales [D] on its sublayers' branch terms as they
  // enter the residual sums (model.h), and a freshly initialised block starts
  // them at this value (0 keeps a new block the identity in pre, lns, sandwich).
  bool layer_scale;
  double layer_scale_init;
} ng_model_config;

// "loss": kd_weight, temperature, and the optional divergence (default
// forward_kl) with beta in (0, 1) (jsd only, required there).
typedef struct {
  double kd_weight, temperature;
  ng_divergence divergence;
  double beta;  // jsd only, else 0
} ng_loss_config;

typedef struct {
  double lr, beta1, beta2, eps, weight_decay, grad_clip;
} ng_optim_config;

// Each parser fills *out from the JSON object `obj`; `where` prefixes messages.
int ng_model_config_parse(const cJSON *obj, const char *where, ng_model_config *out);
int ng_loss_config_parse(const cJSON *obj, const char *where, ng_loss_config *out);
int ng_optim_config_parse(const cJSON *obj, const char *where, ng_optim_config *out);
// At most 2^40 parameters: every count and byte size of them stays far inside int64.
#define NG_MAX_PARAMS ((int64_t)1 << 40)

// Checks the sizes of a model config (also used after programmatic changes).
int ng_model_config_validate(const ng_model_config *c, const char *where);

// Serialize (for golden metadata, run directories and checkpoints).
cJSON *ng_model_config_to_json(const ng_model_config *c);
cJSON *ng_loss_config_to_json(const ng_loss_config *c);
cJSON *ng_optim_config_to_json(const ng_optim_config *c);

// JSON field helpers shared by every strict parser in normgrow. Each fails
// with "<where>.<key>: ..." when the key is missing or of the wrong type.
// Integers are exact up to 2^53 - 1 (NG_JSON_MAX_INT): larger ones are refused.
int ng_json_int(const cJSON *obj, const char *where, const char *key, int64_t min,
                int64_t max, int64_t *out);
// The same for a value v (an array entry); `what` names it ("state.rng[2]").
int ng_json_int_value(const cJSON *v, const char *what, int64_t min, int64_t max, int64_t *out);
int ng_json_num(const cJSON *obj, const char *where, const char *key, double min,
                double max, double *out);
int ng_json_bool(const cJSON *obj, const char *where, const char *key, bool *out);
int ng_json_str(const cJSON *obj, const char *where, const char *key, const char **out);
// Fails naming the first key of obj that is not in the NULL-terminated list.
int ng_json_only_keys(const cJSON *obj, const char *where, const char *const *keys);
// "<where>: expected a JSON object" unless obj is an object.
int ng_json_expect_object(const cJSON *obj, const char *where);

// The largest integer a JSON number (an IEEE double) holds exactly, with
// every smaller one: 2^53 - 1.
#define NG_JSON_MAX_INT 9007199254740991LL

// The shortest decimal (%.15g to %.17g) that reads back to the finite v, as
// messages and JSON show a number.
#define NG_SHORTEST_CHARS 32
void ng_shortest(double v, char out[NG_SHORTEST_CHARS]);

// JSON text of j (caller frees) in which every number reads back to the same
// double: cJSON alone prints 15 significant digits whenever those come back
// within DBL_EPSILON, which loses the last bits (0.1 * 3 -> 0.3). Everything
// normgrow writes as JSON goes through this.
char *ng_json_print(const cJSON *j, bool formatted);

#endif
