// Replays the inputs kept from fuzzing (tests/fuzz/regress/<target>/*: the
// findings, each minimized, and the hostile files of the reader defects) through
// the same harnesses libFuzzer runs (tests/fuzz/fuzz_*.c), built here with gcc:
// each input must pass the harness's invariants without a crash.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fuzz/fuzz_checkpoint.c"
#include "fuzz/fuzz_hf.c"
#include "fuzz/fuzz_manifest.c"
#include "fuzz/fuzz_model_config.c"
#include "fuzz/fuzz_run_config.c"
#include "fuzz/fuzz_rundir.c"
#include "fuzz/fuzz_safetensors.c"
#include "fuzz/fuzz_safetensors_sized.c"
#include "fuzz/fuzz_shard.c"
#include "fuzz/fuzz_tokenizer.c"
#include "fuzz/fuzz_tokenizer_hf.c"
#include "fuzz/fuzz_topk.c"
#include "normgrow/fileio.h"

static const struct {
  const char *name;
  int (*run)(const uint8_t *, size_t);
} targets[] = {
    {"checkpoint", fuzz_checkpoint}, {"hf", fuzz_hf}, {"model_config", fuzz_model_config},
    {"run_config", fuzz_run_config}, {"safetensors", fuzz_safetensors},
    {"safetensors_sized", fuzz_safetensors_sized}, {"shard", fuzz_shard}, {"manifest", fuzz_manifest},
    {"tokenizer", fuzz_tokenizer}, {"tokenizer_hf", fuzz_tokenizer_hf}, {"topk", fuzz_topk},
    {"rundir", fuzz_rundir},
};

static int replay_dir(const char *dir, int (*run)(const uint8_t *, size_t)) {
  DIR *d = opendir(dir);
  int count = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[1400], *data;
    size_t n;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    NG_ASSERT(ng_read_file(path, 64 << 20, &data, &n) == 0);
    run((const uint8_t *)data, n);  // a broken invariant aborts, naming it
    free(data);
    count++;
  }
  if (d) closedir(d);
  return count;
}

int main(void) {
  const char *root = getenv("NG_ROOT");
  char dir[1024];
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regress/%s", root ? root : ".", targets[i].name);
    int n = replay_dir(dir, targets[i].run);
    char name[128];
    snprintf(name, sizeof name, "fuzz target %s: %d kept inputs replayed", targets[i].name, n);
    CHECK(n > 0, name, "none in %s", dir);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ng_fuzz_dir());
  NG_ASSERT(system(cmd) == 0);
  return TEST_RESULT();
}
