// normgrow CUDA backend: launch geometry (see launch.h).
#include "launch.h"

bool ngc_att_wmma_ok(int64_t hd) { return hd > 0 && hd <= ATT_HD_MAX && hd % 16 == 0; }

// fp32 kernels: [ATT_TILE, hd + 1] tiles (forward: Q and one K-or-V buffer;
// dQ: Q, dO, K, V; dK/dV: K, V, Q, dO) and [ATT_TILE, ATT_TILE + 1] score
// tiles (forward: P; dQ: dS; dK/dV: P and dS). The bf16 forward holds bf16
// Q and K-or-V [ATT_TILE, hd + 8], fp32 S [ATT_TILE, ATT_TILE + 4], bf16 P
// [ATT_TILE, ATT_TILE + 8] and the fp32 output accumulator [ATT_TILE, hd + 4].
size_t ngc_att_smem(ngc_att_kernel k, int64_t hd, bool bf16) {
  size_t tile = (size_t)ATT_TILE * ngc_att_ld(hd) * 4, scores = (size_t)ATT_TILE * (ATT_TILE + 1) * 4;
  if (bf16 && k == NGC_ATT_FWD)
    return (size_t)ATT_TILE * ((hd + 8) * 2 * 2 + (ATT_TILE + 4) * 4 + (ATT_TILE + 8) * 2 + (hd + 4) * 4);
  switch (k) {
    case NGC_ATT_FWD: return 2 * tile + scores;
    case NGC_ATT_BWD_DQ: return 4 * tile + scores;
    case NGC_ATT_BWD_DKV: return 4 * tile + 2 * scores;
  }
  return 0;
}

size_t ngc_topk_smem(int64_t V) { return (size_t)ngc_tiles(V, 32) * 4; }
