// Fuzz target: a safetensors file whose size fields are rewritten to agree
// with the bytes, so that a mutated header gets past the size checks to the
// JSON and tensor checks behind them. The input is the header text, a NUL, the
// data: the file written is u64 header length, header, data; and each
// tensor's data_offsets that fall outside the data are pulled inside it.
#include <cJSON.h>

#include "normgrow/config.h"
#include "readers.h"

// Offsets [a, b] of every tensor clamped into [0, data_len] with a <= b.
static void clamp_offsets(cJSON *header, size_t data_len) {
  for (cJSON *t = header ? header->child : NULL; t; t = t->next) {
    cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (cJSON_GetArraySize(off) != 2) continue;
    double a = cJSON_GetArrayItem(off, 0)->valuedouble, b = cJSON_GetArrayItem(off, 1)->valuedouble;
    if (!(a >= 0 && a <= (double)data_len)) a = 0;
    if (!(b >= a && b <= (double)data_len)) b = (double)data_len;
    cJSON_ReplaceItemInArray(off, 0, cJSON_CreateNumber(a));
    cJSON_ReplaceItemInArray(off, 1, cJSON_CreateNumber(b));
  }
}

static int fuzz_safetensors_sized(const uint8_t *data, size_t n) {
  const uint8_t *nul = memchr(data, 0, n);
  size_t hlen = nul ? (size_t)(nul - data) : n, dlen = nul ? n - hlen - 1 : 0;
  char *text = ng_xmalloc(hlen + 1);
  memcpy(text, data, hlen);
  text[hlen] = 0;
  cJSON *header = cJSON_Parse(text);
  if (header) {
    clamp_offsets(header, dlen);
    free(text);
    text = ng_json_print(header, false);
    hlen = strlen(text);
    cJSON_Delete(header);
  }
  uint8_t *file = ng_xmalloc(8 + hlen + dlen);
  uint64_t len = hlen;
  memcpy(file, &len, 8);
  memcpy(file + 8, text, hlen);
  if (dlen) memcpy(file + 8 + hlen, nul + 1, dlen);
  char path[512];
  ng_fuzz_write(ng_fuzz_path(path, sizeof path, "sized.safetensors"), file, 8 + hlen + dlen);
  free(file);
  free(text);
  ng_fuzz_safetensors_file(path);
  ng_fuzz_golden_file(path);
  ng_fuzz_checkpoint_file(path);
  return 0;
}
NG_FUZZ_TARGET(fuzz_safetensors_sized)
