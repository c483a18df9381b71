// normgrow tests: a minimal harness. Each check prints "ok <name>" or
// "FAIL <name>: <why>"; tests/run.sh counts them. main() returns the failures.
#ifndef NORMGROW_TESTS_CHECK_H
#define NORMGROW_TESTS_CHECK_H

#include <stdio.h>

static int ng_test_failures = 0;

#define CHECK(cond, name, ...)                                   \
  do {                                                           \
    if (cond) {                                                  \
      printf("ok %s\n", name);                                   \
    } else {                                                     \
      ng_test_failures++;                                        \
      printf("FAIL %s: ", name);                                 \
      printf(__VA_ARGS__);                                       \
      printf(" (%s:%d)\n", __FILE__, __LINE__);                  \
    }                                                            \
    fflush(stdout);                                              \
  } while (0)

#define TEST_RESULT() (ng_test_failures ? 1 : 0)

#endif
