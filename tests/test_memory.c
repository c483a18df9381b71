// The plan is measured: a toy-medium distillation (hidden 512, 4 layers,
// vocabulary 16384, 8 x 256 tokens; one step with its evaluation, diagnostics
// and checkpoints) runs as its own process with each memory setting off and
// on (micro-batches, recompute, loss chunks, the bf16 teacher held in bf16),
// and the process's peak resident
// memory (wait4's ru_maxrss) must be within 15% of ng_plan_stage_of's total.
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "normgrow/backend_cpu.h"
#include "normgrow/common.h"
#include "normgrow/checkpoint.h"
#include "normgrow/data.h"
#include "normgrow/hf.h"
#include "normgrow/plan.h"

extern char **environ;

static char dir[64];

static const char *model_json(int layers) {
  static char buf[512];
  snprintf(buf, sizeof buf,
           "{\"vocab_size\": 16384, \"hidden_size\": 512, \"intermediate_size\": 1536,"
           " \"num_hidden_layers\": %d, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
           " \"head_dim\": 64, \"rope_theta\": 10000, \"rms_norm_eps\": 1e-6,"
           " \"tie_word_embeddings\": false, \"norm_placement\": \"pre\", \"final_norm\": true}",
           layers);
  return buf;
}

// A one-step run `name` (distill from the 1-layer teacher, or pretrain that
// teacher) with extra data keys and a "train" section; returns its path.
static const char *write_run(const char *name, bool distill, const char *data_extra,
                             const char *train) {
  static char path[160];
  snprintf(path, sizeof path, "%s/%s.json", dir, name);
  FILE *f = fopen(path, "w");
  NG_ASSERT(f);
  fprintf(f,
          "{\"name\": \"%s\", \"seed\": 1, \"run_dir\": \"%s/%s\", \"mode\": \"%s\","
          " \"data\": {\"train\": \"%s/train.bin\", \"val\": \"%s/val.bin\", \"batch\": 8, \"seq\": 256%s},"
          " \"model\": %s, \"lr\": {\"peak\": 0.001, \"floor\": 0.0001, \"warmup_tokens\": 0, \"shape\": \"constant\"},"
          " \"optim\": {\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"weight_decay\": 0.1, \"grad_clip\": 1.0},"
          " \"eval\": {\"every_steps\": 1, \"batches\": 1}, \"stages\": [{\"depth\": %d, \"tokens\": 2048}]",
          name, dir, name, distill ? "distill" : "pretrain", dir, dir, data_extra,
          model_json(distill ? 4 : 1), distill ? 4 : 1);
  if (distill)  // the teacher as a bf16 Hugging Face directory
    fprintf(f, ", \"teacher\": \"%s/teacher-hf-bf16\", \"loss\": {\"kd_weight\": 0.5, \"temperature\": 2.0}", dir);
  fprintf(f, "%s}\n", train);
  fclose(f);
  return path;
}

// `normgrow train CONFIG` as a child process; its peak resident bytes, or -1 if it failed.
static int64_t train_peak(const char *config) {
  const char *bin = getenv("NG_BIN");
  char *argv[] = {(char *)bin, "train", (char *)config, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int status;
  struct rusage ru;
  int rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return (int64_t)ru.ru_maxrss * 1024;  // KiB on Linux
}

// One setting: the plan's total for the run against the process's peak.
static void check_setting(const char *name, const char *data_extra, const char *train,
                          const ng_model_config *teacher, bool teacher_bf16) {
  const char *path = write_run(name, true, data_extra, train);
  ng_run_config rc;
  NG_ASSERT(ng_run_config_load(path, NULL, &rc) == 0);
  ng_plan_device dev = {400.0, 1e6, 1, 4, teacher_bf16, 0.0};
  ng_plan_stage s;
  ng_plan_stage_of(&rc, 0, teacher, &dev, &s);
  ng_run_config_free(&rc);
  int64_t peak = train_peak(path);
  double err = fabs((double)s.total - (double)peak) / (double)peak;
  char what[200];
  snprintf(what, sizeof what,
           "%s (micro-batch %lld, recompute %s, loss chunk %lld, teacher in %s): planned %.0f MiB, "
           "measured peak %.0f MiB",
           name, (long long)s.micro_batch, s.recompute ? "on" : "off", (long long)s.chunk,
           teacher_bf16 ? "bf16" : "fp32",
           (double)s.total / 1048576.0, (double)peak / 1048576.0);
  CHECK(peak > 0 && err <= 0.15, what, "%s", peak > 0 ? "more than 15% apart" : "the run failed");
}

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
  printf("skip memory: AddressSanitizer's shadow memory is no part of the plan\n");
  return 0;
#endif
  if (!getenv("NG_BIN")) {
    printf("set NG_BIN (tests/run.sh does)\n");
    return 1;
  }
  snprintf(dir, sizeof dir, "/tmp/ng_memory_XXXXXX");
  NG_ASSERT(mkdtemp(dir));
  ng_data_stats st;
  CHECK(test_license_shards(dir, &st), "token shards from the Debian license texts", "%s", ng_error());
  CHECK(train_peak(write_run("teacher", false, "", "")) > 0, "a one-layer teacher, one step", "run failed");
  char path[160], hf[160];
  snprintf(path, sizeof path, "%s/teacher/final.safetensors", dir);
  snprintf(hf, sizeof hf, "%s/teacher-hf-bf16", dir);
  ng_model *t = NULL;
  CHECK(ng_checkpoint_load(path, ng_backend_cpu(), false, &t, NULL, NULL) == 0 &&
            ng_hf_export(t, hf, NG_BF16, (size_t)1 << 30) == 0,
        "the teacher exported in bf16", "%s", ng_error());
  ng_model_free(t);
  cJSON *tj = cJSON_Parse(model_json(1));
  ng_model_config teacher;
  NG_ASSERT(ng_model_config_parse(tj, "teacher", &teacher) == 0);
  cJSON_Delete(tj);
  const char *off = ", \"train\": {\"loss_chunk_tokens\": 2048, \"teacher_bf16\": false}";
  check_setting("all-off", "", off, &teacher, false);
  check_setting("micro-batches", ", \"micro_batch\": 2", off, &teacher, false);
  check_setting("recompute", "", ", \"train\": {\"loss_chunk_tokens\": 2048, \"teacher_bf16\": false, "
                "\"recompute\": true}", &teacher, false);
  check_setting("loss-chunks", "", ", \"train\": {\"loss_chunk_tokens\": 256, \"teacher_bf16\": false}",
                &teacher, false);
  check_setting("teacher-bf16", "", ", \"train\": {\"loss_chunk_tokens\": 2048}", &teacher, true);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
