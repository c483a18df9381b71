// normgrow tests: a minimal harness. Each check prints "ok <name>" or
// "FAIL <name>: <why>"; tests/run.sh counts them. main() returns the failures.
#ifndef NORMGROW_TESTS_CHECK_H
#define NORMGROW_TESTS_CHECK_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

// Whether the names a command line asked for, asked [n], hold `name` (none
// asked: every name is wanted).
static inline bool ng_test_wanted(char *const asked[], int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(asked[i], name) == 0) return true;
  return n == 0;
}

// max|got - want| / max|want| (max|got - want| when want is all zero); a NaN
// anywhere in got gives infinity.
static inline double ng_test_max_rel(const float *got, const float *want, int64_t n) {
  double d = 0.0, s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)got[i] - want[i]));
    s = fmax(s, fabs((double)want[i]));
    if (isnan(got[i])) return INFINITY;
  }
  return s > 0.0 ? d / s : d;
}

// sqrt(sum (got - want)^2 / sum want^2) (the root of the first sum when want is
// all zero); a NaN gives infinity.
static inline double ng_test_rel_l2(const float *got, const float *want, int64_t n) {
  double d = 0.0, s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
    s += (double)want[i] * want[i];
  }
  if (isnan(d)) return INFINITY;
  return s > 0.0 ? sqrt(d / s) : sqrt(d);
}

#endif
