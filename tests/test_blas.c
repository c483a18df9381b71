// OpenBLAS kernel choice: normgrow replaces a generic fallback by the family
// the CPU's features allow, and never second-guesses a right or unranked one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "normgrow/backend.h"
#include "normgrow/backend_cpu.h"

static void expect(const char *running, int level, const char *want) {
  const char *got = ng_blas_better_family(running, level);
  char name[128];
  snprintf(name, sizeof name, "BLAS family for %s at SIMD level %d: %s", running ? running : "(none)",
           level, want ? want : "kept");
  CHECK(want ? got && strcmp(got, want) == 0 : got == NULL, name, "got %s", got ? got : "kept");
}

// `env ENV normgrow --version`: its kernel family and who chose it, against
// want_family and want_origin (NULL family: the best this CPU allows, chosen
// by OpenBLAS or by normgrow).
static void version_family(const char *env, const char *want_family, const char *want_origin) {
  const char *bin = getenv("NG_BIN");
  char cmd[1200], line[512], family[128] = "", origin[128] = "";
  snprintf(cmd, sizeof cmd, "env %s %s --version", env, bin ? bin : "build/normgrow");
  FILE *p = popen(cmd, "r");
  while (p && fgets(line, sizeof line, p))
    if (strncmp(line, "BLAS:", 5) == 0 && strstr(line, "kernels "))
      sscanf(strstr(line, "kernels ") + 8, "%127s (%127[^)]", family, origin);
  if (p) pclose(p);
  char name[256];
  snprintf(name, sizeof name, "normgrow --version with %s: kernels %s (%s)", env, family, origin);
  bool ok = want_family ? strcasecmp(family, want_family) == 0 && strcmp(origin, want_origin) == 0
                        : family[0] && !ng_blas_better_family(family, ng_cpu_simd_level()) &&
                              (strcmp(origin, "chosen by OpenBLAS") == 0 || strcmp(origin, "chosen by normgrow") == 0);
  CHECK(ok, name, "want %s (%s)", want_family ? want_family : "the best family this CPU allows",
        want_origin ? want_origin : "chosen by OpenBLAS or normgrow");
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
  // normgrow itself, by its `--version`: a preset family is run and named as
  // preset; without one, a family not a ranked one below what this CPU allows.
  version_family("OPENBLAS_CORETYPE=Sandybridge", "Sandybridge", "preset by OPENBLAS_CORETYPE");
  version_family("-u OPENBLAS_CORETYPE", NULL, NULL);
  return TEST_RESULT();
}
