// Hostile files for the readers: a checkpoint's training state with every
// field wrong in type or range (each refused with one line naming it, no
// out-of-range cast), files declaring 100,000 layers with a handful of tensors
// (refused before the names of the layers are allocated: checked under an
// address-space limit), and tensor names holding a newline or a terminal
// escape (messages stay one line, the bytes escaped), and a run config whose
// model would need more memory than the machine has, and a checkpoint and a
// Hugging Face directory whose weights (a sparse file: present as far as any
// reader can tell) would (each refused naming its fields before anything is
// allocated by them, under an address-space limit).
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/hf.h"
#include "normgrow/run.h"
#include "normgrow/train.h"
#include "normgrow/safetensors.h"

static char dir[64], good_path[128];
static ng_backend *be;

static void path_of(char *out, size_t n, const char *file) { snprintf(out, n, "%s/%s", dir, file); }

// A 2-block Pre-Norm model with optimizer and state after 9 steps, block 2
// in a gate ramp of 8 steps begun at step 4.
static void write_good_checkpoint(void) {
  ng_model_config c = {.vocab_size = 32, .hidden_size = 8, .intermediate_size = 12, .num_hidden_layers = 2,
                       .num_attention_heads = 2, .num_key_value_heads = 1, .head_dim = 4, .rope_theta = 1e4,
                       .rms_norm_eps = 1e-6, .tie_word_embeddings = true, .final_norm = true};
  ng_model *m = ng_model_create(be, &c, true);
  ng_adamw *o = ng_adamw_create(m);
  int64_t origin[2] = {-1, 4};
  ng_train_state st = {.step = 9, .stage = 1, .step_in_stage = 4, .tokens = 288, .layer_tokens = 448,
                       .flops = 1e6, .gate_origin = origin, .gate_steps = 8};
  ng_rng_seed(&st.rng, 3);
  for (int i = 0; i < o->n; i++) o->steps[i] = 9;
  path_of(good_path, sizeof good_path, "good.safetensors");
  NG_ASSERT(ng_checkpoint_save(good_path, m, o, &st) == 0);
  ng_adamw_free(m, o);
  ng_model_free(m);
}

// The good checkpoint's weights as a Hugging Face directory, its ramp taken
// as done (a Hugging Face model has no gate).
static void export_good(const char *hf) {
  ng_model *m = NULL;
  NG_ASSERT(ng_checkpoint_load(good_path, be, false, &m, NULL, NULL) == 0);
  m->growth_gate[1] = 1.0f;
  NG_ASSERT(ng_hf_export(m, hf, NG_F32, 0) == 0);
  ng_model_free(m);
}

// A copy of `src` whose metadata `key` is replaced by `value`.
static void write_with_meta(const char *src, const char *dst, const char *key, const char *value) {
  ng_st_file f;
  NG_ASSERT(ng_st_open(&f, src) == 0);
  ng_st_writer *w = ng_st_writer_new();
  for (int i = 0; i < f.n_meta; i++)
    ng_st_writer_meta(w, f.meta_keys[i], strcmp(f.meta_keys[i], key) == 0 ? value : f.meta_values[i]);
  for (int i = 0; i < f.n; i++)
    ng_st_writer_add(w, f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].ndim, f.tensors[i].shape,
                     f.tensors[i].data);
  NG_ASSERT(ng_st_writer_save(w, dst) == 0);
  ng_st_writer_free(w);
  ng_st_close(&f);
}

// ---------------------------------------------------------------- training state

// The good state with state[key] (or state[key][index] when index >= 0) set
// to the JSON `json` (NULL: a new key "extra"); loading it must fail on one
// line that names `want`.
static void bad_state(const char *name, const char *key, int index, const char *json, const char *want) {
  ng_st_file f;
  NG_ASSERT(ng_st_open(&f, good_path) == 0);
  cJSON *s = cJSON_Parse(ng_st_meta(&f, "state"));
  ng_st_close(&f);
  cJSON *v = cJSON_Parse(json);
  NG_ASSERT(s && v);
  if (index >= 0)
    NG_ASSERT(cJSON_ReplaceItemInArray(cJSON_GetObjectItem(s, key), index, v));
  else
    NG_ASSERT(cJSON_ReplaceItemInObjectCaseSensitive(s, key, v) || cJSON_AddItemToObject(s, key, v));
  char *text = ng_json_print(s, false), path[128];
  cJSON_Delete(s);
  path_of(path, sizeof path, "bad_state.safetensors");
  write_with_meta(good_path, path, "state", text);
  free(text);
  ng_model *m = NULL;
  ng_adamw *o = NULL;
  ng_train_state st = {0};
  int rc = ng_checkpoint_load(path, be, true, &m, &o, &st);
  CHECK(rc != 0 && strstr(ng_error(), want) && strstr(ng_error(), path) && !strchr(ng_error(), '\n'), name,
        "rc %d: %s", rc, ng_error());
  if (rc == 0) {
    ng_adamw_free(m, o);
    ng_model_free(m);
    free(st.gate_origin);
  }
}

static void test_state(void) {
  ng_model *m = NULL;
  ng_adamw *o = NULL;
  ng_train_state st = {0};
  int rc = ng_checkpoint_load(good_path, be, true, &m, &o, &st);
  CHECK(rc == 0 && st.step == 9 && st.gate_origin[1] == 4 && st.gate_steps == 8 && o->steps[0] == 9,
        "the good state loads", "%s", ng_error());
  if (rc == 0) ng_adamw_free(m, o), ng_model_free(m), free(st.gate_origin);
  // Any reader gets the gates of the state's step: (9 - 4) / 8 for block 2.
  rc = ng_checkpoint_load(good_path, be, false, &m, NULL, NULL);
  CHECK(rc == 0 && m->growth_gate[0] == 1.0f && m->growth_gate[1] == 0.625f,
        "a model read from a checkpoint has its state's gates (1, 0.625)", "rc %d, gates %g %g", rc,
        rc ? 0.0 : (double)m->growth_gate[0], rc ? 0.0 : (double)m->growth_gate[1]);
  if (rc == 0) ng_model_free(m);
  bad_state("gate_origin of 1e300 (an out-of-range cast before)", "gate_origin", 1, "1e300", "state.gate_origin[1]");
  bad_state("gate_origin as a string", "gate_origin", 0, "\"4\"", "state.gate_origin[0]");
  bad_state("gate_origin of 1.5", "gate_origin", 1, "1.5", "state.gate_origin[1]");
  bad_state("gate_origin below -1", "gate_origin", 0, "-2", "state.gate_origin[0]");
  bad_state("gate_origin after the step", "gate_origin", 1, "10", "state.gate_origin[1]");
  bad_state("adam_steps of 1e300", "adam_steps", 2, "1e300", "state.adam_steps[2]");
  bad_state("adam_steps as a string (loaded as 0 before)", "adam_steps", 0, "\"9\"", "state.adam_steps[0]");
  bad_state("adam_steps of -1", "adam_steps", 3, "-1", "state.adam_steps[3]");
  bad_state("adam_steps beyond the step", "adam_steps", 3, "10", "state.adam_steps[3]");
  bad_state("frozen as a number", "frozen", 0, "0", "state.frozen[0]");
  bad_state("rng word \"-1\"", "rng", 0, "\"-1\"", "state.rng[0]");
  bad_state("rng word with a leading space", "rng", 1, "\" 23456789abcdef0\"", "state.rng[1]");
  bad_state("rng word of 17 digits (saturated before)", "rng", 2, "\"1ffffffffffffffff\"", "state.rng[2]");
  bad_state("rng word \"0x...\"", "rng", 3, "\"0x3456789abcdef0\"", "state.rng[3]");
  bad_state("rng as a number", "rng", 0, "12", "state.rng[0]");
  bad_state("rng all zero (a generator stuck at 0)", "rng", -1,
            "[\"0000000000000000\", \"0000000000000000\", \"0000000000000000\", \"0000000000000000\"]", "state.rng");
  bad_state("step of 2^53", "step", -1, "9007199254740992", "state.step");
  bad_state("step of -1", "step", -1, "-1", "state.step");
  bad_state("step as a string", "step", -1, "\"9\"", "state.step");
  bad_state("step_in_stage beyond the step", "step_in_stage", -1, "10", "state.step_in_stage");
  bad_state("tokens of 1e300", "tokens", -1, "1e300", "state.tokens");
  bad_state("stage of 1e300", "stage", -1, "1e300", "state.stage");
  bad_state("flops negative", "flops", -1, "-1", "state.flops");
  bad_state("gate_origin too short", "gate_origin", -1, "[-1]", "state.gate_origin");
  bad_state("gate_steps of 0 with a ramp begun", "gate_steps", -1, "0", "state.gate_steps");
  bad_state("gate_steps as a string", "gate_steps", -1, "\"8\"", "state.gate_steps");
  bad_state("gate_steps of -1", "gate_steps", -1, "-1", "state.gate_steps");
  bad_state("an unknown key", "extra", -1, "1", "unknown key \"extra\"");
}

// A state of an earlier normgrow (no gate_steps) with a ramp begun: refused
// naming state.gate_steps alone, read with growth.gate_steps of the run's
// config.json beside it.
static void test_older_state(void) {
  ng_st_file f;
  NG_ASSERT(ng_st_open(&f, good_path) == 0);
  cJSON *s = cJSON_Parse(ng_st_meta(&f, "state"));
  ng_st_close(&f);
  NG_ASSERT(s);
  cJSON_DeleteItemFromObjectCaseSensitive(s, "gate_steps");
  char *text = ng_json_print(s, false), run[128], path[160], config[160];
  cJSON_Delete(s);
  path_of(run, sizeof run, "older");
  NG_ASSERT(mkdir(run, 0777) == 0);
  snprintf(path, sizeof path, "%s/checkpoint.safetensors", run);
  snprintf(config, sizeof config, "%s/config.json", run);
  write_with_meta(good_path, path, "state", text);
  free(text);
  ng_model *m = NULL;
  int rc = ng_checkpoint_load(path, be, false, &m, NULL, NULL);
  CHECK(rc != 0 && strstr(ng_error(), "state.gate_steps") && !strchr(ng_error(), '\n'),
        "an older state with a ramp and no config.json beside it: refused", "rc %d: %s", rc, ng_error());
  if (rc == 0) ng_model_free(m);
  FILE *c = fopen(config, "w");
  NG_ASSERT(c && fputs("{\"growth\": {\"init\": \"gate\", \"gate_steps\": 8}}", c) >= 0 && fclose(c) == 0);
  rc = ng_checkpoint_load(path, be, false, &m, NULL, NULL);
  CHECK(rc == 0 && m->growth_gate[1] == 0.625f, "an older state takes gate_steps from the run's config.json",
        "rc %d: %s", rc, rc ? ng_error() : "gate differs");
  if (rc == 0) ng_model_free(m);
}

// ---------------------------------------------------------------- 100,000 layers

static size_t address_space(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  NG_ASSERT(f && fscanf(f, "%lu", &pages) == 1);
  fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

// Runs open(path) in a child whose address space may grow by `mapped` bytes
// (a file's mapping) and 64 MB (the names of 100,000 layers take about
// 200 MB): it must fail with a message holding `want`, not die, allocating
// nothing by the sizes the file declares.
static void expect_refused_small(const char *name, int (*open)(const char *), const char *path,
                                 double mapped, const char *want) {
  fflush(stdout);
  pid_t pid = fork();
  NG_ASSERT(pid >= 0);
  if (pid == 0) {
    size_t limit = address_space() + (size_t)mapped + ((size_t)64 << 20);
    struct rlimit r = {limit, limit};
    setrlimit(RLIMIT_AS, &r);
    int rc = open(path);
    if (rc == 0 || !strstr(ng_error(), want)) printf("# %s\n", ng_error());
    fflush(stdout);
    _exit(rc != 0 && strstr(ng_error(), want) ? 0 : 1);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, name, "status %d%s", status,
        WIFSIGNALED(status) ? " (killed: it allocated by the declared sizes)" : "");
}

static int open_checkpoint(const char *path) {
  ng_model *m = NULL;
  int rc = ng_model_open(path, be, false, &m);
  ng_model_free(m);
  return rc;
}

// Replaces n numeric keys of the Hugging Face directory's config.json.
static void patch_hf_config(const char *hf, const char *const *keys, const double *values, int n) {
  char path[160], buf[8192];
  snprintf(path, sizeof path, "%s/config.json", hf);
  FILE *f = fopen(path, "rb");
  NG_ASSERT(f);
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = 0;
  cJSON *cfg = cJSON_Parse(buf);
  for (int i = 0; i < n; i++) cJSON_ReplaceItemInObjectCaseSensitive(cfg, keys[i], cJSON_CreateNumber(values[i]));
  char *text = cJSON_Print(cfg);
  cJSON_Delete(cfg);
  f = fopen(path, "wb");
  NG_ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0);
  free(text);
}

static void test_many_layers(void) {
  ng_st_file f;
  NG_ASSERT(ng_st_open(&f, good_path) == 0);
  cJSON *model = cJSON_Parse(ng_st_meta(&f, "model"));
  ng_st_close(&f);
  cJSON_ReplaceItemInObjectCaseSensitive(model, "num_hidden_layers", cJSON_CreateNumber(100000));
  char *text = cJSON_PrintUnformatted(model), path[128];
  cJSON_Delete(model);
  path_of(path, sizeof path, "deep.safetensors");
  write_with_meta(good_path, path, "model", text);
  free(text);
  expect_refused_small("a checkpoint declaring 100,000 layers is refused before allocating for them",
                       open_checkpoint, path, 0, "100000 blocks");

  // A Hugging Face directory whose config.json says 100,000 layers.
  char hf[128];
  path_of(hf, sizeof hf, "hf");
  export_good(hf);
  const char *keys[] = {"num_hidden_layers", "max_window_layers"};
  double values[] = {100000, 100000};
  patch_hf_config(hf, keys, values, 2);
  expect_refused_small("a config.json declaring 100,000 layers is refused before allocating for them",
                       open_checkpoint, hf, 0, "100000 blocks");
}

// ---------------------------------------------------------------- beyond the machine's memory

static int train_config(const char *path) {
  ng_train_args a = {.config_path = path, .overrides = {.seed = -1}};
  return ng_train(&a);
}

static void test_memory(void) {
  double have = ng_machine_memory();
  bool small_ok = ng_check_memory(1 << 20, "a megabyte") == 0;
  int rc = ng_check_memory(2.0 * have, "twice the machine");
  CHECK(have > 0 && small_ok && rc == -1 && strstr(ng_error(), "twice the machine needs") &&
            strstr(ng_error(), "of memory of this machine"),
        "ng_check_memory: a megabyte fits, twice the machine's memory is refused", "%s", ng_error());
  ng_data_stats st = {0};
  if (!test_license_shards(dir, &st)) {
    printf("FAIL memory: no license texts to build shards from\n");
    return;
  }
  // Hidden 65536, FFN 262144, 2 blocks: 1.4e11 parameters, TiB of weights and
  // moments (within config.h's 2^40 parameters).
  char path[128], text[2048];
  path_of(path, sizeof path, "huge.json");
  snprintf(text, sizeof text,
           "{\"name\": \"huge\", \"seed\": 1, \"run_dir\": \"%s/huge\", \"mode\": \"pretrain\","
           " \"data\": {\"train\": \"%s/train.bin\", \"val\": \"%s/val.bin\", \"batch\": 1, \"seq\": 16},"
           " \"model\": {\"vocab_size\": 257, \"hidden_size\": 65536, \"intermediate_size\": 262144,"
           " \"num_hidden_layers\": 2, \"num_attention_heads\": 512, \"num_key_value_heads\": 512,"
           " \"head_dim\": 128, \"rope_theta\": 10000, \"rms_norm_eps\": 1e-6,"
           " \"tie_word_embeddings\": true, \"norm_placement\": \"pre\", \"final_norm\": true},"
           " \"optim\": {\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"weight_decay\": 0.1, \"grad_clip\": 1.0},"
           " \"lr\": {\"peak\": 0.003, \"floor\": 0.0003, \"warmup_tokens\": 0, \"shape\": \"cosine\"},"
           " \"stages\": [{\"depth\": 2, \"tokens\": 1600}], \"eval\": {\"every_steps\": 10, \"batches\": 2}}",
           dir, dir, dir);
  FILE *f = fopen(path, "w");
  NG_ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0);
  expect_refused_small("a run whose model needs TiB is refused naming its fields, before allocating",
                       train_config, path, 0, "model.hidden_size 65536, model.intermediate_size 262144");
}

// A safetensors file with the tensors of model c in bf16 (the normgrow
// checkpoint's metadata when `checkpoint`), its data a hole: as large as the
// model says, no disk used. Returns its size.
static double write_sparse_model(const char *path, const ng_model_config *c, bool checkpoint) {
  ng_model *skel = ng_model_create(NULL, c, false);
  cJSON *h = cJSON_CreateObject();
  size_t at = 0;
  for (int i = 0; i < skel->n_params; i++) {
    const ng_param *p = &skel->params[i];
    cJSON *t = cJSON_AddObjectToObject(h, p->name), *shape = cJSON_AddArrayToObject(t, "shape");
    cJSON *off = cJSON_AddArrayToObject(t, "data_offsets");
    cJSON_AddStringToObject(t, "dtype", "BF16");
    for (int d = 0; d < p->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->shape[d]));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
    at += 2 * p->numel;
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
  }
  ng_model_free(skel);
  if (checkpoint) {
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__"), *model = ng_model_config_to_json(c);
    char *text = cJSON_PrintUnformatted(model);
    cJSON_AddStringToObject(meta, "format", NG_CKPT_FORMAT);
    cJSON_AddStringToObject(meta, "model", text);
    free(text);
    cJSON_Delete(model);
  }
  char *header = cJSON_PrintUnformatted(h);
  cJSON_Delete(h);
  uint64_t len = strlen(header);
  FILE *f = fopen(path, "wb");
  NG_ASSERT(f && fwrite(&len, 8, 1, f) == 1 && fwrite(header, 1, len, f) == len && fflush(f) == 0 &&
            ftruncate(fileno(f), (off_t)(8 + len + at)) == 0 && fclose(f) == 0);
  free(header);
  return (double)(8 + len + at);
}

// Weights that the files really hold (a sparse file: their bytes exist as far
// as any reader can tell), but that in fp32 would take more than twice the
// machine's memory: the loaders refuse before allocating, naming the fields.
static void test_model_memory(void) {
  ng_model_config c = {.vocab_size = 1 << 17, .hidden_size = 4096, .intermediate_size = 64, .num_hidden_layers = 1,
                       .num_attention_heads = 2, .num_key_value_heads = 1, .head_dim = 4, .rope_theta = 1e4,
                       .rms_norm_eps = 1e-6, .tie_word_embeddings = true, .final_norm = true};
  while ((double)c.vocab_size * (double)c.hidden_size * 4.0 < 2.0 * ng_machine_memory()) c.vocab_size *= 2;
  char path[128], want[200];
  path_of(path, sizeof path, "wide.safetensors");
  double bytes = write_sparse_model(path, &c, true);
  snprintf(want, sizeof want, "(hidden_size 4096, intermediate_size 64, vocab_size %lld, num_hidden_layers 1)",
           (long long)c.vocab_size);
  expect_refused_small("a checkpoint whose weights need more than the machine's memory is refused naming its fields",
                        open_checkpoint, path, bytes, want);

  // The same weights as a Hugging Face directory (the tiny model's export, widened).
  char hf[128], st[160];
  path_of(hf, sizeof hf, "hf-wide");
  export_good(hf);
  const char *keys[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "max_window_layers",
                        "num_attention_heads", "num_key_value_heads", "head_dim"};
  double values[] = {(double)c.vocab_size, 4096, 64, 1, 1, 2, 1, 4};
  patch_hf_config(hf, keys, values, 8);
  ng_model_config hc;
  NG_ASSERT(ng_hf_read_config(hf, &hc) == 0 && hc.vocab_size == c.vocab_size);
  snprintf(st, sizeof st, "%s/model.safetensors", hf);
  bytes = write_sparse_model(st, &hc, false);
  expect_refused_small("a Hugging Face directory whose weights need more than the machine's memory is refused",
                        open_checkpoint, hf, bytes, want);
}

// ---------------------------------------------------------------- names

// A safetensors file whose one tensor has a hostile name and an unknown dtype.
static void test_escaped_names(void) {
  const char header[] = "{\"evil\\nline\\u001b[2J\\u009b\": {\"dtype\": \"Q9\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
  char path[128];
  path_of(path, sizeof path, "names.safetensors");
  FILE *f = fopen(path, "wb");
  uint64_t len = sizeof header - 1;
  fwrite(&len, 8, 1, f);
  fwrite(header, 1, len, f);
  fwrite("\0\0\0\0", 1, 4, f);
  fclose(f);
  ng_st_file st;
  int rc = ng_st_open(&st, path);
  const char *e = ng_error();
  bool plain = !strchr(e, '\n') && !strchr(e, '\x1b') && !strstr(e, "\xc2\x9b");
  CHECK(rc != 0 && plain && strstr(e, "evil\\nline\\x1b[2J\\xc2\\x9b"), "a tensor name's newline and terminal escapes are escaped in the message",
        "rc %d: %s", rc, e);
  if (rc == 0) ng_st_close(&st);
  // Through the command line: one line on stderr.
  const char *bin = getenv("NG_BIN");
  if (!bin) return;
  char cmd[600], err[128], out[128];
  path_of(err, sizeof err, "stderr");
  path_of(out, sizeof out, "out.safetensors");
  snprintf(cmd, sizeof cmd, "'%s' golden-eval '%s' '%s' 2>'%s'", bin, path, out, err);
  int status = system(cmd);
  FILE *ef = fopen(err, "rb");
  char text[4096];
  size_t n = ef ? fread(text, 1, sizeof text - 1, ef) : 0;
  if (ef) fclose(ef);
  text[n] = 0;
  int lines = 0;
  for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && lines == 1 && !strchr(text, '\x1b'),
        "golden-eval on it: one line on stderr, no escape byte", "status %d, %d lines: %s", status, lines, text);
}

int main(void) {
  be = ng_backend_cpu();
  snprintf(dir, sizeof dir, "/tmp/ng_hostile_XXXXXX");
  NG_ASSERT(mkdtemp(dir));
  write_good_checkpoint();
  test_state();
  test_older_state();
  test_many_layers();
  test_memory();
  test_model_memory();
  test_escaped_names();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
