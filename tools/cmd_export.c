// normgrow export CHECKPOINT DIR [--dtype bf16|f32] [--shard-mib N] [--force]
// A student (any normgrow checkpoint) as a Hugging Face directory: plain Qwen3,
// or the custom architecture of hf.h that transformers loads with
// trust_remote_code=True. Tokenizer files are copied in when the run's data
// directory holds a Hugging Face tokenizer (see copy_tokenizer).
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/fileio.h"
#include "normgrow/hf.h"

#define MAX_TOKENIZER_BYTES ((size_t)256 << 20)

const char *const ng_cli_tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json",
                                              "special_tokens_map.json", "vocab.json",
                                              "merges.txt", NULL};

typedef struct {
  const char *bytes;
  size_t len;
} blob;

static bool write_blob(FILE *f, void *ctx) {
  const blob *b = ctx;
  return fwrite(b->bytes, 1, b->len, f) == b->len;
}

static int copy_file(const char *from, const char *to) {
  char *text;
  size_t len;
  if (ng_read_file(from, MAX_TOKENIZER_BYTES, &text, &len)) return -1;
  blob b = {text, len};
  int rc = ng_write_atomic(to, write_blob, &b);
  free(text);
  return rc;
}

// Every file of ng_cli_tokenizer_files that `from` holds, into `to`.
static int copy_tokenizer_files(const char *from, const char *to) {
  int rc = 0;
  for (int i = 0; ng_cli_tokenizer_files[i] && rc == 0; i++) {
    char *src = ng_path_join(from, ng_cli_tokenizer_files[i]);
    char *dst = ng_path_join(to, ng_cli_tokenizer_files[i]);
    if (access(src, F_OK) == 0) rc = copy_file(src, dst);
    free(src);
    free(dst);
  }
  return rc;
}

int ng_cli_copy_tokenizer(const char *tokenizer, const char *out) {
  struct stat st;
  char *copy = ng_xstrdup(tokenizer);
  const char *dir = stat(tokenizer, &st) == 0 && S_ISDIR(st.st_mode) ? tokenizer : dirname(copy);
  int rc = copy_tokenizer_files(dir, out);
  free(copy);
  return rc;
}

// The directory of the run's data (dirname of config.json's data.train), when
// the checkpoint sits in a run directory; NULL otherwise. malloc'd.
static char *run_data_dir(const char *checkpoint) {
  char *copy = ng_xstrdup(checkpoint), *config = ng_path_join(dirname(copy), "config.json");
  char *text = NULL, *dir = NULL;
  if (access(config, F_OK) == 0 && ng_read_file(config, 1 << 20, &text, NULL) == 0) {
    cJSON *j = cJSON_Parse(text);
    const cJSON *train = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "data"), "train");
    if (cJSON_IsString(train)) {
      char *t = ng_xstrdup(train->valuestring);
      dir = ng_xstrdup(dirname(t));
      free(t);
    }
    cJSON_Delete(j);
  }
  free(text);
  free(config);
  free(copy);
  return dir;
}

// The tokenizer hook: a run whose shards were made with a Hugging Face
// tokenizer keeps its files (tokenizer.json, ...) beside the shards; they are
// copied into the export. Byte-level shards (`normgrow data`) have none.
// Sets *copied to the data directory they came from, or NULL.
static int copy_tokenizer(const char *checkpoint, const char *out, char **copied) {
  *copied = NULL;
  char *data = run_data_dir(checkpoint);
  char *probe = data ? ng_path_join(data, ng_cli_tokenizer_files[0]) : NULL;
  int rc = 0;
  if (probe && access(probe, F_OK) == 0) {
    rc = copy_tokenizer_files(data, out);
    if (rc == 0) *copied = ng_xstrdup(data);
  }
  free(probe);
  free(data);
  return rc;
}

// A checkpoint inside a growth ramp (a gate below 1 at its step) is refused:
// a Hugging Face model has no gate. Names the first such block and the step
// after which every ramp is done.
static int check_gates_open(const char *path, const ng_model *m, const ng_train_state *st) {
  int64_t first = -1, done = 0;
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
    if (m->growth_gate[l] == 1.0f) continue;
    if (first < 0) first = l;
    int64_t end = st->gate_origin[l] + st->gate_steps;
    done = end > done ? end : done;
  }
  if (first < 0) return 0;
  return ng_fail("%s: checkpoint at step %lld is inside a growth ramp (gate %g of block %lld), and "
                 "a Hugging Face model has no gate: export a checkpoint of step %lld or later (or "
                 "the run's final.safetensors)",
                 path, (long long)st->step, (double)m->growth_gate[first], (long long)first + 1,
                 (long long)done);
}

int cmd_export(const ng_cli *c) {
  const char *dtype = ng_cli_opt(c, "dtype"), *out = c->pos[1];
  int64_t shard_mib = 4096;  // transformers' default max_shard_size is 5 GB; 4 GiB shards
  if (ng_cli_int_opt(c, "shard-mib", 1, 1 << 20, &shard_mib))
    return ng_cli_error(ng_error());
  if (dtype && strcmp(dtype, "bf16") != 0 && strcmp(dtype, "f32") != 0)
    return ng_cli_error("export: --dtype: expected bf16 or f32");
  char *config = ng_path_join(out, "config.json"), *tokenizer = NULL;
  int taken = ng_cli_may_replace(c, config, "an exported model");
  free(config);
  if (taken) return ng_cli_error(ng_error());
  ng_backend *be = ng_backend_cpu();
  ng_model *m = NULL;
  ng_train_state st = {0};
  int rc = ng_checkpoint_load(c->pos[0], be, false, &m, NULL, &st) ||
           check_gates_open(c->pos[0], m, &st) ||
           ng_hf_export(m, out, dtype && strcmp(dtype, "f32") == 0 ? NG_F32 : NG_BF16,
                        (size_t)shard_mib << 20) ||
           copy_tokenizer(c->pos[0], out, &tokenizer);
  if (rc == 0) {
    bool plain = ng_hf_plain_qwen3(&m->cfg);
    printf("export: %s -> %s (%d tensors, %s; %s; %s%s)\n", c->pos[0], out, m->n_params,
           dtype ? dtype : "bf16",
           plain ? "plain Qwen3"
                 : "architecture NormgrowForCausalLM: load with trust_remote_code=True",
           tokenizer ? "tokenizer files from " : "no tokenizer files: byte-level data",
           tokenizer ? tokenizer : "");
  }
  free(tokenizer);
  free(st.gate_origin);
  ng_model_free(m);
  return rc ? ng_cli_error(ng_error()) : 0;
}
