// OpenBLAS kernel choice: normgrow replaces a generic fallback by the family
// the CPU's features allow, and never second-guesses a right or unranked one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "normgrow/backend.h"

static void expect(const char *running, int level, const char *want) {
  const char *got = ng_blas_better_family(running, level);
  char name[128];
  snprintf(name, sizeof name, "BLAS family for %s at SIMD level %d: %s", running ? running : "(none)",
           level, want ? want : "kept");
  CHECK(want ? got && strcmp(got, want) == 0 : got == NULL, name, "got %s", got ? got : "kept");
}

int main(void) {
  expect("Prescott", 3, "SkylakeX");     // the fallback seen on unknown Xeons
  expect("Prescott", 2, "Haswell");
  expect("Nehalem", 1, "Sandybridge");
  expect("Sandybridge", 2, "Haswell");
  expect("Haswell", 3, "SkylakeX");
  expect("SkylakeX", 3, NULL);           // already right
  expect("Prescott", 0, NULL);           // nothing better on this CPU
  expect("Cooperlake", 3, NULL);         // newer Intel names are left alone
  expect("SapphireRapids", 3, NULL);
  expect("Zen", 2, NULL);                // other vendors too
  expect(NULL, 3, NULL);
  // normgrow itself: after its own choice (or the user's), `--version` reports
  // a family that is not a ranked one below what this CPU allows.
  const char *bin = getenv("NG_BIN");
  char cmd[1200], line[512], family[128] = "";
  snprintf(cmd, sizeof cmd, "%s --version", bin ? bin : "build/normgrow");
  FILE *p = popen(cmd, "r");
  while (p && fgets(line, sizeof line, p))
    if (strncmp(line, "BLAS:", 5) == 0 && strstr(line, "kernels "))
      sscanf(strstr(line, "kernels ") + 8, "%127s", family);
  if (p) pclose(p);
  if (getenv("OPENBLAS_CORETYPE"))
    printf("ok normgrow runs BLAS family %s chosen by OPENBLAS_CORETYPE\n", family);
  else
    CHECK(family[0] && !ng_blas_better_family(family, ng_cpu_simd_level()),
          "normgrow runs the best BLAS family this CPU allows", "--version reports \"%s\"", family);
  return TEST_RESULT();
}
