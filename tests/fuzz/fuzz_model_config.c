// Fuzz target: a model config file (a teacher's config for `normgrow plan`),
// parsed strictly, its size bounds kept, and written back: the JSON normgrow
// writes reads back to the same config.
#include "../run_compare.h"
#include "normgrow/config.h"
#include "normgrow/model.h"
#include "normgrow/plan.h"
#include "readers.h"

static int fuzz_model_config(const uint8_t *data, size_t n) {
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "model.json"), data, n);
  ng_model_config c, back;
  if (ng_plan_read_model_config(path, &c) != 0) return ng_fuzz_refused();
  NG_FUZZ_REQUIRE(ng_model_n_weights(&c) > 0 && c.hidden_size * c.vocab_size <= NG_MAX_PARAMS);
  cJSON *j = ng_model_config_to_json(&c);
  char *text = ng_json_print(j, false);
  cJSON_Delete(j);
  cJSON *again = cJSON_Parse(text);
  NG_FUZZ_REQUIRE(again && ng_model_config_parse(again, "written", &back) == 0 && ng_same_model(&c, &back));
  cJSON_Delete(again);
  free(text);
  return 0;
}
NG_FUZZ_TARGET(fuzz_model_config)
