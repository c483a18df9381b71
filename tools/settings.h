// normgrow: the settings of a run config, for `runs` to show where runs
// differ.
#ifndef NORMGROW_TOOLS_SETTINGS_H
#define NORMGROW_TOOLS_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

// The settings of a config as "key=value" leaves: objects are walked
// ("loss.kd_weight"), arrays and scalars are values (compact JSON).
typedef struct {
  size_t n;
  char **key, **value;
} ng_flat_config;

void ng_flatten_config(const cJSON *config, ng_flat_config *out);
void ng_flat_config_free(ng_flat_config *f);
// The value of `key`, or NULL when the config has none.
const char *ng_flat_value(const ng_flat_config *f, const char *key);
// Whether `key` has the same value (or is absent) in every one of n configs.
bool ng_flat_agree(const ng_flat_config *f, size_t n, const char *key);

#endif
