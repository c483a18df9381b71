// Fuzz target: a run directory as `runs` and `report` read it (ref/rundir.c),
// and its config's settings as `runs` shows them (tools/settings.c).
// The input's parts (fuzz.h) are its config.json, then its metrics.jsonl.
// Read or refused in one line; a run read has steps (the config is a run
// config), a last step that is an exact JSON integer, is finished only at its
// last step after an evaluation, and has a state of a few words.
#include "../../tools/settings.c"
#include "normgrow/rundir.h"
#include "readers.h"

static int fuzz_rundir(const uint8_t *data, size_t n) {
  static const char *const names[] = {"config.json", "metrics.jsonl"};
  char dir[512];
  ng_fuzz_write_files(data, n, "rundir", names, 2, dir, sizeof dir);
  ng_rundir_status r;
  if (ng_rundir_read(dir, &r) != 0) return ng_fuzz_refused();
  NG_FUZZ_REQUIRE(ng_rundir_is_run(dir) && cJSON_IsObject(r.config));
  NG_FUZZ_REQUIRE(r.steps_total >= 1 && r.last_step >= 0 && r.last_step <= NG_JSON_MAX_INT);
  NG_FUZZ_REQUIRE(!r.finished || (r.has_eval && r.last_step == r.steps_total));
  NG_FUZZ_REQUIRE(r.ckpt_step == -1 && r.trainer == 0);  // no checkpoint, no lock here
  char state[64];
  ng_rundir_state(&r, state, sizeof state);
  NG_FUZZ_REQUIRE(strlen(state) < 40);
  ng_flat_config flat;
  ng_flatten_config(r.config, &flat);
  for (size_t i = 0; i < flat.n; i++) NG_FUZZ_REQUIRE(flat.key[i][0] != 0 && ng_flat_value(&flat, flat.key[i]));
  ng_flat_config_free(&flat);
  ng_rundir_status_free(&r);
  return 0;
}
NG_FUZZ_TARGET(fuzz_rundir)
