// normgrow fuzz harnesses: what every harness shares. A harness is a function
// `static int fuzz_<name>(const uint8_t *data, size_t n)` that hands the bytes
// to a reader through a file, as the product reads them, and checks the
// reader's invariants (an invariant broken is an abort: a finding). Built with
// clang and -fsanitize=fuzzer (tests/fuzz/run.sh, `make fuzz`), NG_FUZZ_TARGET
// makes it the binary's LLVMFuzzerTestOneInput; tests/test_fuzz_replay.c
// includes every harness and replays the kept inputs with gcc.
#ifndef NORMGROW_TESTS_FUZZ_H
#define NORMGROW_TESTS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normgrow/common.h"

#ifdef NG_FUZZ_LIBFUZZER
#define NG_FUZZ_TARGET(fn) \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) { return fn(data, n); }
#else
#define NG_FUZZ_TARGET(fn)
#endif

// Breaks a broken invariant loudly (libFuzzer keeps the input).
#define NG_FUZZ_REQUIRE(cond) \
  do { if (!(cond)) ng_abort_at(__FILE__, __LINE__, "fuzz invariant: " #cond); } while (0)

// A directory for the files handed to readers: $NG_FUZZ_DIR, or one of this
// process in /tmp.
static inline const char *ng_fuzz_dir(void) {
  static char dir[256];
  if (!dir[0]) {
    const char *env = getenv("NG_FUZZ_DIR");
    if (env && *env)
      snprintf(dir, sizeof dir, "%s", env);
    else
      snprintf(dir, sizeof dir, "/tmp/ng_fuzz_%d", (int)getpid());
    mkdir(dir, 0700);
  }
  return dir;
}

// <fuzz dir>/<name> (or <fuzz dir>/<sub>/<name>) into out [n].
static inline const char *ng_fuzz_path(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", ng_fuzz_dir(), name);
  return out;
}

static inline void ng_fuzz_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  NG_ASSERT(f != NULL);
  NG_ASSERT(n == 0 || fwrite(data, 1, n, f) == n);
  NG_ASSERT(fclose(f) == 0);
}

// An input of several files: the parts between separator lines. Returns the
// number of parts (at most max); part i is [ptr[i], ptr[i] + len[i]).
#define NG_FUZZ_SEPARATOR "\n--normgrow-fuzz-part--\n"
static inline int ng_fuzz_parts(const uint8_t *data, size_t n, const uint8_t **ptr, size_t *len,
                                int max) {
  const size_t sl = sizeof NG_FUZZ_SEPARATOR - 1;
  int k = 0;
  const uint8_t *p = data, *end = data + n;
  while (k < max) {
    const uint8_t *q = k + 1 < max ? memmem(p, (size_t)(end - p), NG_FUZZ_SEPARATOR, sl) : NULL;
    ptr[k] = p;
    len[k] = (size_t)((q ? q : end) - p);
    k++;
    if (!q) break;
    p = q + sl;
  }
  return k;
}

// An input of several files written as the files `names[0..count)` of the
// directory <fuzz dir>/<sub> (its path into dir [dir_len]), none left from an input before;
// the parts the input has not got are missing.
static inline const char *ng_fuzz_write_files(const uint8_t *data, size_t n, const char *sub,
                                              const char *const *names, int count, char *dir,
                                              size_t dir_len) {
  const uint8_t *ptr[8];
  size_t len[8];
  NG_ASSERT(count <= 8);
  int k = ng_fuzz_parts(data, n, ptr, len, count);
  ng_fuzz_path(dir, dir_len, sub);
  mkdir(dir, 0700);
  char path[1200];
  for (int i = 0; i < count; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
    if (i < k) ng_fuzz_write(path, ptr[i], len[i]);
  }
  return dir;
}

#endif
