// normgrow: Hugging Face Qwen3 checkpoint directories.
//
// A directory holds `config.json` (Qwen3ForCausalLM's configuration) and the
// weights, either in one `model.safetensors` or in shards listed by
// `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {"tensor":
// "shard file"}}). As in transformers, `model.safetensors` wins when both exist.
//
// normgrow reads every field a Qwen3 config.json carries, plus two keys of its
// own: `norm_placement` ("pre" | "post" | "lns" | "sandwich" | "deepnorm" |
// "mixln" | "hybrid", default "pre"), `final_norm` (default true), and the placements'
// `deepnorm_alpha`, `mixln_post_layers` and `layer_placements` (hybrid: each
// layer's "pre" or "post") where they have them. A Pre-Norm
// model with a final norm is exported without them, so its directory is a plain Qwen3 checkpoint that transformers loads as is.
// Any other model (another placement, or no final norm) is exported as the custom
// architecture "NormgrowForCausalLM" (model_type "normgrow"): config.json has
// an `auto_map` naming configuration_normgrow.py and modeling_normgrow.py,
// written beside the weights (ref/hf_remote/), so that transformers'
// AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True) builds the
// same model; without trust_remote_code transformers refuses it rather than
// building a different one. normgrow reads both model types.
#ifndef NORMGROW_HF_H
#define NORMGROW_HF_H

#include <stdbool.h>
#include <stddef.h>

#include "normgrow/backend.h"
#include "normgrow/config.h"
#include "normgrow/model.h"
#include "normgrow/safetensors.h"

// Parse `<dir>/config.json`. Fields normgrow reads default as in transformers
// when absent (rope_theta 10000, rms_norm_eps 1e-6, tie_word_embeddings false,
// head_dim 128, as transformers' Qwen3Config); the sizes vocab_size,
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads and model_type are required. Refused, with one message
// naming the field: model_type other than "qwen3", attention_bias true,
// hidden_act other than "silu", a non-null rope_scaling, a rope_parameters
// rope_type other than "default", use_sliding_window true, a layer_types entry
// other than "full_attention", duplicate keys. Other keys are ignored.
int ng_hf_read_config(const char *dir, ng_model_config *out);

// One tensor of a checkpoint and the file that holds it.
typedef struct {
  const char *name;               // owned by the file's tensor
  int file;                       // index into ng_hf_checkpoint.files
  const ng_st_tensor *tensor;
} ng_hf_entry;

// The weights of a directory, every file memory-mapped.
typedef struct {
  char *path;                     // model.safetensors or the index (named in messages)
  int n_files;
  ng_st_file *files;              // the single file, or each shard once
  size_t n_entries;
  ng_hf_entry *entries;           // every tensor of every file, sorted by name
} ng_hf_checkpoint;

// Open and validate. With an index: shard names are plain file names, every
// shard opens, each weight_map entry is in the shard it names, and each shard
// holds only tensors the weight_map maps to it. On failure returns -1 and *ck
// is left empty (nothing to close).
int ng_hf_open(ng_hf_checkpoint *ck, const char *dir);
void ng_hf_close(ng_hf_checkpoint *ck);
// The tensor called `name` (NULL if absent); *file (if file != NULL) receives its file.
const ng_st_tensor *ng_hf_find(const ng_hf_checkpoint *ck, const char *name,
                               const ng_st_file **file);

// Load the model of directory `dir` onto `be`. Every weight is checked (present,
// exact shape, F32/BF16/F16) before anything is allocated. Every tensor of the
// checkpoint must be a weight of the model, except lm_head.weight next to tied
// embeddings (ignored, as transformers does): an extra tensor means config.json
// describes another model than the weights. With `trainable`, gradients are
// allocated too.
int ng_hf_load(const char *dir, ng_backend *be, bool trainable, ng_model **out);

// Write `m` to `dir` (created if missing, one level) as config.json and weights
// of dtype NG_F32 or NG_BF16: one model.safetensors when they total at most
// shard_bytes, else shards model-0000i-of-0000N.safetensors of at most
// shard_bytes each (a larger tensor gets a shard of its own) and
// model.safetensors.index.json. Each file is written atomically (temp file,
// fsync, rename); the other layout's top file (model.safetensors or the index)
// is removed afterwards so that the new weights are the ones loaded. A model
// whose growth gates are not all 1 is refused: Qwen3 has no gates. A model
// that is not plain Qwen3 gets configuration_normgrow.py and
// modeling_normgrow.py beside config.json (a plain one: any such files left
// from an earlier export are removed).
int ng_hf_export(const ng_model *m, const char *dir, ng_dtype dtype, size_t shard_bytes);
// Whether a model of config c exports as plain Qwen3 (Pre-Norm with a final
// norm), else as NormgrowForCausalLM.
bool ng_hf_plain_qwen3(const ng_model_config *c);

#endif
