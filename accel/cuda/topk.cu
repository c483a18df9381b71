// normgrow CUDA backend: the teacher cache's top-k of each row of logits
// (ng_backend.topk). One block of ROW_THREADS per row; only the row's k ids and
// values, its log-sum-exp and the log of its mass off those ids leave the
// device. The selection (launch.h):
//   1. a radix select of the k-th largest value: NGC_SELECT_PASSES passes, each
//      counting the next NGC_SELECT_BITS of the keys that share the digits found
//      so far (integer counts in shared memory: the same whatever the order);
//      thread 0 picks the digit holding rank k. Then theta is the k-th largest
//      key exactly, and `need` the values equal to it to take.
//   2. each thread counts, in its contiguous part of the row, the keys above
//      theta and those equal to it; thread 0 scans the counts (thread order is
//      id order); each thread writes its values above theta at its offset, then
//      its tied ones while their rank among the tied is below `need`, after all
//      the values above. So the ids above the k-th value come in ascending order,
//      then the lowest tied ids ascending, on every run. The thread that writes
//      slot k - 1 (always a tied one: need >= 1) leaves its id, `cut`: an id is
//      kept when its key is above theta, or equal to it at an id <= cut.
//   3. the masses at 1/tau: the row's max mx over a fixed tree of the block's
//      threads; then, in one pass, z = sum_j exp((x_j - mx) / tau) over every id
//      and off the same over the ids not kept (those below theta and the tied
//      ones past cut), in double, each thread's terms in one order and both sums
//      over the same fixed tree (off a part of z's terms: off <= z). lse =
//      mx / tau + log z, rest = log off - log z (-inf when k = V: off is 0).
#include <math.h>

#include "ngcuda.h"

// Row r of logits [R, ld] (grid: R blocks), over its first V columns: ids, vals
// [R, k] its k largest (steps 1, 2); lse [R] and rest [R] (step 3).
__global__ void topk_k(const float *logits, int64_t ld, int64_t V, int64_t k, double inv_tau,
                       uint32_t *ids, float *vals, float *lse, float *rest) {
  __shared__ uint32_t hist[NGC_SELECT_BINS];
  __shared__ uint32_t above[ROW_THREADS], tied[ROW_THREADS];
  __shared__ uint32_t found[2];  // the key's digits so far, the rank left among them
  __shared__ int64_t cut;        // the id of slot k - 1, the last tied one kept
  __shared__ float fred[ROW_THREADS];
  __shared__ double dred[ROW_THREADS];
  const float *x = logits + (size_t)blockIdx.x * (size_t)ld;
  uint32_t *row_ids = ids + (size_t)blockIdx.x * (size_t)k;
  float *row_vals = vals + (size_t)blockIdx.x * (size_t)k;
  if (threadIdx.x == 0) found[0] = 0, found[1] = (uint32_t)k;
  uint32_t mask = 0;
  for (int pass = 0; pass < NGC_SELECT_PASSES; pass++) {
    int shift = 32 - NGC_SELECT_BITS * (pass + 1);
    for (int b = threadIdx.x; b < NGC_SELECT_BINS; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    uint32_t prefix = found[0];
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      uint32_t key = ngc_select_key(x[j]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (NGC_SELECT_BINS - 1)], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t left = found[1];
      found[0] = prefix | ngc_select_digit(hist, &left) << shift;
      found[1] = left;
    }
    mask |= (uint32_t)(NGC_SELECT_BINS - 1) << shift;
    __syncthreads();
  }
  uint32_t theta = found[0], need = found[1];
  int64_t lo, hi;
  ngc_select_part(V, blockDim.x, threadIdx.x, &lo, &hi);
  uint32_t n_above = 0, n_tied = 0;
  for (int64_t j = lo; j < hi; j++) {
    uint32_t key = ngc_select_key(x[j]);
    n_above += key > theta;
    n_tied += key == theta;
  }
  above[threadIdx.x] = n_above;
  tied[threadIdx.x] = n_tied;
  __syncthreads();
  if (threadIdx.x == 0) {
    ngc_select_scan(above, blockDim.x);
    ngc_select_scan(tied, blockDim.x);
  }
  __syncthreads();
  uint32_t at_above = above[threadIdx.x], at_tied = tied[threadIdx.x], first_tied = (uint32_t)k - need;
  for (int64_t j = lo; j < hi; j++) {
    uint32_t key = ngc_select_key(x[j]);
    int64_t slot = -1;
    if (key > theta) {
      slot = at_above++;
    } else if (key == theta) {
      if (at_tied < need) slot = first_tied + at_tied;
      at_tied++;
    }
    if (slot >= 0) row_ids[slot] = (uint32_t)j, row_vals[slot] = x[j];
    if (slot == k - 1) cut = j;
  }
  __syncthreads();  // cut
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = ngc_block_reduce(mx, fred, ngc_max());
  double z = 0.0, off = 0.0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    uint32_t key = ngc_select_key(x[j]);
    double e = exp(((double)x[j] - mx) * inv_tau);
    z += e;
    if (key < theta || (key == theta && j > cut)) off += e;
  }
  z = ngc_block_reduce(z, dred, ngc_sum());
  off = ngc_block_reduce(off, dred, ngc_sum());
  if (threadIdx.x == 0) {
    lse[blockIdx.x] = (float)((double)mx * inv_tau + log(z));
    rest[blockIdx.x] = (float)(log(off) - log(z));
  }
}

void ngc_topk(ng_backend *be, const float *logits, int64_t R, int64_t ld, int64_t V, int64_t k,
              double inv_tau, uint32_t *ids, float *vals, float *lse, float *rest) {
  (void)be;
  NG_ASSERT(k >= 1 && k <= V && V <= ld && V < ((int64_t)1 << 32));
  if (R == 0) return;
  topk_k<<<(unsigned)R, ROW_THREADS>>>(logits, ld, V, k, inv_tau, ids, vals, lse, rest);
  CK_LAUNCH();
}
