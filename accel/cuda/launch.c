// normgrow CUDA backend: launch geometry (see launch.h).
#include "launch.h"

bool ngc_att_wmma_ok(int64_t hd) { return hd > 0 && hd <= ATT_HD_MAX && hd % 16 == 0; }

// Regions of one attention block, per kernel (forward, dQ, dK/dV):
//   fp32: data tiles [ATT_TILE, hd + 1] (forward: Q and one K-or-V buffer; dQ:
//         Q, dO, K, V; dK/dV: K, V, Q, dO) and score tiles [ATT_TILE, ATT_TILE + 1]
//         (forward: P; dQ: dS; dK/dV: P and dS).
//   bf16: the same data tiles in bf16 [ATT_TILE, hd + 8], fp32 score tiles
//         [ATT_TILE, ATT_TILE + 4] (S; and dP in the backward), bf16 score tiles
//         [ATT_TILE, ATT_TILE + 8] (P or dS), and fp32 accumulators [ATT_TILE, hd + 4]
//         (O; dQ; dK and dV).
typedef struct {
  int data;                  // data tiles, both modes
  int scores;                // fp32 mode: score tiles
  int s_f32, s_bf16, accum;  // bf16 mode: fp32 and bf16 score tiles, accumulators
} att_regions;
static const att_regions regions[3] = {{2, 1, 1, 1, 1}, {4, 1, 2, 1, 1}, {4, 2, 2, 2, 2}};

size_t ngc_att_smem(ngc_att_kernel k, int64_t hd, bool bf16) {
  att_regions n = regions[k];
  if (!bf16) return (size_t)ATT_TILE * 4 * ((size_t)n.data * ngc_att_ld(hd) + (size_t)n.scores * (ATT_TILE + 1));
  return (size_t)ATT_TILE * ((size_t)n.data * (hd + 8) * 2 + (size_t)n.s_f32 * (ATT_TILE + 4) * 4 +
                             (size_t)n.s_bf16 * (ATT_TILE + 8) * 2 + (size_t)n.accum * (hd + 4) * 4);
}

size_t ngc_topk_smem(int64_t V) { return (size_t)ngc_tiles(V, 32) * 4; }
