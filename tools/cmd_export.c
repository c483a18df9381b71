// normgrow export CHECKPOINT DIR [--dtype bf16|f32] [--shard-mib N]
// A student (any normgrow checkpoint) as a Hugging Face Qwen3 directory.
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "normgrow/checkpoint.h"
#include "normgrow/common.h"
#include "normgrow/hf.h"

int cmd_export(const ng_cli *c) {
  const char *dtype = ng_cli_opt(c, "dtype");
  int64_t shard_mib = 4096;  // transformers' default max_shard_size is 5 GB; 4 GiB shards
  if (ng_cli_int_opt(c, "shard-mib", 1, 1 << 20, &shard_mib))
    return ng_cli_error(ng_error());
  if (dtype && strcmp(dtype, "bf16") != 0 && strcmp(dtype, "f32") != 0)
    return ng_cli_error("export: --dtype: expected bf16 or f32");
  ng_backend *be = ng_backend_cpu();
  ng_model *m = NULL;
  int rc = ng_checkpoint_load(c->pos[0], be, false, &m, NULL, NULL) ||
           ng_hf_export(m, c->pos[1], dtype && strcmp(dtype, "f32") == 0 ? NG_F32 : NG_BF16,
                        (size_t)shard_mib << 20);
  if (rc == 0)
    printf("export: %s -> %s (%d tensors, %s)\n", c->pos[0], c->pos[1], m->n_params,
           dtype ? dtype : "bf16");
  ng_model_free(m);
  return rc ? ng_cli_error(ng_error()) : 0;
}
