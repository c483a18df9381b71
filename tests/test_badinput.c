// Bad input through the command line: each malformed case must give exactly
// one line on stderr that names the problem, a non-zero exit (not a crash),
// and no output file. Under `make asan` the same runs also catch leaks.
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "normgrow/common.h"
#include "normgrow/safetensors.h"

static char dir[64], base[512];
static const char *bin;
static ng_st_file good;

// Edits applied while copying the good case: config tweak, tensor edits.
typedef struct {
  const char *section, *key, *json;  // config[section][key] = json (NULL json: delete)
  const char *drop;                  // tensor to leave out
  const char *reshape;               // tensor whose first two dimensions are swapped
  const char *retype;                // I32 tensor written as F32 (same bytes)
  const char *extra;                 // an extra tensor name
  int32_t token_value;               // if nonzero: in.tokens[3] = value - 1000
  float rest_value;                  // if nonzero: in.teacher_topk_rest[0] = value
  const char *format;                // metadata format override
} edit;

static char *edited_config(const edit *e) {
  cJSON *cfg = cJSON_Parse(ng_st_meta(&good, "config"));
  if (e->section) {
    cJSON *sec = cJSON_GetObjectItemCaseSensitive(cfg, e->section);
    if (!e->key) {
      cJSON_DeleteItemFromObjectCaseSensitive(cfg, e->section);
    } else {
      cJSON_DeleteItemFromObjectCaseSensitive(sec, e->key);
      if (e->json) cJSON_AddItemToObject(sec, e->key, cJSON_Parse(e->json));
    }
  }
  char *text = cJSON_PrintUnformatted(cfg);
  cJSON_Delete(cfg);
  return text;
}

static void write_case(const edit *e, const char *path) {
  ng_st_writer *w = ng_st_writer_new();
  char *cfg = edited_config(e);
  ng_st_writer_meta(w, "format", e->format ? e->format : ng_st_meta(&good, "format"));
  ng_st_writer_meta(w, "config", cfg);
  int32_t *copy = NULL;
  for (int i = 0; i < good.n; i++) {
    const ng_st_tensor *t = &good.tensors[i];
    int64_t shape[NG_ST_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    const void *data = t->data;
    ng_dtype dt = t->dtype;
    if (e->drop && strcmp(t->name, e->drop) == 0) continue;
    if (e->reshape && strcmp(t->name, e->reshape) == 0) shape[0] = t->shape[1], shape[1] = t->shape[0];
    if (e->retype && strcmp(t->name, e->retype) == 0) dt = NG_F32;
    bool token = e->token_value && strcmp(t->name, "in.tokens") == 0;
    bool rest = e->rest_value != 0.0f && strcmp(t->name, "in.teacher_topk_rest") == 0;
    if (token || rest) {  // a copy with one 4-byte value replaced
      copy = ng_xmalloc(t->end - t->begin);
      memcpy(copy, t->data, t->end - t->begin);
      if (token) copy[3] = e->token_value - 1000;
      if (rest) memcpy(copy, &e->rest_value, 4);
      data = copy;
    }
    ng_st_writer_add(w, t->name, dt, t->ndim, shape, data);
  }
  float zero = 0.0f;
  int64_t one = 1;
  if (e->extra) ng_st_writer_add(w, e->extra, NG_F32, 1, &one, &zero);
  NG_ASSERT(ng_st_writer_save(w, path) == 0);
  ng_st_writer_free(w);
  free(cfg);
  free(copy);
}

// Runs `normgrow golden-eval CASE OUT`; checks status, the one stderr line and its words.
static void expect_error(const char *name, const char *case_path, const char *out_path,
                         const char *want1, const char *want2) {
  char cmd[2048], err_path[600], line[2048] = "";
  snprintf(err_path, sizeof err_path, "%s/stderr", dir);
  snprintf(cmd, sizeof cmd, "'%s' golden-eval '%s' '%s' >/dev/null 2>'%s'", bin, case_path, out_path, err_path);
  int status = system(cmd);
  FILE *f = fopen(err_path, "r");
  int lines = 0;
  char buf[2048];
  while (f && fgets(buf, sizeof buf, f)) {
    if (lines++ == 0) snprintf(line, sizeof line, "%s", buf);
  }
  if (f) fclose(f);
  line[strcspn(line, "\n")] = 0;
  bool exited = WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) < 128;
  bool named = strstr(line, want1) && (!want2 || strstr(line, want2));
  struct stat st;
  bool no_out = stat(out_path, &st) != 0;
  CHECK(exited && lines == 1 && named && no_out, name,
        "status %d, %d stderr lines, output %s, line: %s", status, lines,
        no_out ? "absent" : "written", line);
}

static void bad_case(const char *name, edit e, const char *want1, const char *want2) {
  char path[600], out[600];
  snprintf(path, sizeof path, "%s/bad.safetensors", dir);
  snprintf(out, sizeof out, "%s/out.safetensors", dir);
  write_case(&e, path);
  expect_error(name, path, out, want1, want2);
}

// The good case cut to `keep` bytes, or with its header length replaced.
static void bad_bytes(const char *name, size_t keep, uint64_t header_len, const char *want) {
  char path[600], out[600];
  snprintf(path, sizeof path, "%s/bytes.safetensors", dir);
  snprintf(out, sizeof out, "%s/out.safetensors", dir);
  FILE *f = fopen(path, "wb");
  if (header_len) {
    fwrite(&header_len, 8, 1, f);  // little-endian host (checked by the reader)
    fwrite(good.map + 8, 1, keep - 8, f);
  } else {
    fwrite(good.map, 1, keep, f);
  }
  fclose(f);
  expect_error(name, path, out, want, "bytes.safetensors");
}

int main(void) {
  const char *root = getenv("NG_ROOT");
  bin = getenv("NG_BIN");
  if (!root || !bin) {
    fprintf(stderr, "set NG_ROOT and NG_BIN (tests/run.sh does)\n");
    return 1;
  }
  snprintf(base, sizeof base, "%s/golden/pre_untied_final_gqa2_teacher.safetensors", root);
  snprintf(dir, sizeof dir, "/tmp/ng_badinput_XXXXXX");
  NG_ASSERT(mkdtemp(dir));
  NG_ASSERT(ng_st_open(&good, base) == 0);

  bad_case("heads not divisible by kv heads", (edit){.section = "model", .key = "num_attention_heads", .json = "3"}, "num_attention_heads", "divisible");
  bad_case("odd head_dim", (edit){.section = "model", .key = "head_dim", .json = "7"}, "head_dim", "odd");
  bad_case("zero hidden_size", (edit){.section = "model", .key = "hidden_size", .json = "0"}, "hidden_size", "outside");
  bad_case("zero layers", (edit){.section = "model", .key = "num_hidden_layers", .json = "0"}, "num_hidden_layers", NULL);
  bad_case("string where an integer belongs", (edit){.section = "model", .key = "vocab_size", .json = "\"40\""}, "vocab_size", "integer");
  bad_case("fractional size", (edit){.section = "model", .key = "intermediate_size", .json = "40.5"}, "intermediate_size", "integer");
  bad_case("number where a bool belongs", (edit){.section = "model", .key = "tie_word_embeddings", .json = "1"}, "tie_word_embeddings", NULL);
  bad_case("unknown placement", (edit){.section = "model", .key = "norm_placement", .json = "\"middle\""}, "norm_placement", "middle");
  bad_case("unknown config key", (edit){.section = "model", .key = "rope_scaling", .json = "{}"}, "unknown key", "rope_scaling");
  bad_case("missing config field", (edit){.section = "optim", .key = "lr"}, "optim.lr", "missing");
  bad_case("missing config section", (edit){.section = "loss"}, "config.loss", NULL);
  bad_case("negative kd_weight", (edit){.section = "loss", .key = "kd_weight", .json = "-0.5"}, "kd_weight", NULL);
  bad_case("unknown divergence", (edit){.section = "loss", .key = "divergence", .json = "\"hellinger\""}, "loss.divergence", "hellinger");
  bad_case("beta without jsd", (edit){.section = "loss", .key = "beta", .json = "0.5"}, "loss.beta", "jsd");
  bad_case("wrong format", (edit){.format = "something-else"}, "format", NULL);
  bad_case("missing weight", (edit){.drop = "param.model.layers.1.mlp.up_proj.weight"}, "model.layers.1.mlp.up_proj.weight", "missing");
  bad_case("misshaped weight", (edit){.reshape = "param.model.layers.0.self_attn.k_proj.weight"}, "k_proj", "shape");
  bad_case("misshaped teacher logits", (edit){.reshape = "in.teacher_logits"}, "in.teacher_logits", "shape");
  bad_case("targets shaped unlike tokens", (edit){.reshape = "in.tokens"}, "in.targets", "shape");
  bad_case("integer tensor stored as F32", (edit){.retype = "in.targets"}, "in.targets", "dtype");
  bad_case("missing tokens", (edit){.drop = "in.tokens"}, "in.tokens", "missing");
  bad_case("weight of another config", (edit){.extra = "param.model.layers.7.mlp.up_proj.weight"}, "layers.7", NULL);
  bad_case("token id past the vocabulary", (edit){.token_value = 1000 + 40}, "in.tokens", "40");
  bad_case("negative token id", (edit){.token_value = 1000 - 1}, "in.tokens", "-1");
  bad_case("a top-k rest without the top-k teacher", (edit){.extra = "in.teacher_topk_rest"},
           "in.teacher_topk_ids", "_rest only with them");
  bad_case("a tensor named like a top-k input that is none", (edit){.extra = "in.teacher_topk_bogus"},
           "in.teacher_topk_bogus", "not part of");
  bad_bytes("truncated file", good.map_size - 100, 0, "");
  bad_bytes("header length past the end", good.map_size, (uint64_t)good.map_size, "header");
  bad_bytes("empty file", 0, 0, "");
  ng_st_close(&good);  // a case with a top-k teacher and its rest
  snprintf(base, sizeof base, "%s/golden/pre_topk5_rest_reverse_kl.safetensors", root);
  NG_ASSERT(ng_st_open(&good, base) == 0);
  bad_case("a top-k rest above 0 (not a log-probability)", (edit){.rest_value = 0.25f},
           "in.teacher_topk_rest", "0.25 at (0, 0) is not a log-probability");
  bad_case("a NaN top-k rest", (edit){.rest_value = NAN}, "in.teacher_topk_rest", "nan at (0, 0)");
  char out[600], missing[600];
  snprintf(out, sizeof out, "%s/out.safetensors", dir);
  snprintf(missing, sizeof missing, "%s/no-such-case.safetensors", dir);
  expect_error("missing case file", missing, out, "no-such-case.safetensors", NULL);
  snprintf(out, sizeof out, "%s/no-such-dir/out.safetensors", dir);
  expect_error("unwritable output", base, out, "no-such-dir/out.safetensors", NULL);

  ng_st_close(&good);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
