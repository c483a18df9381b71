// normgrow: xoshiro256** seeded by splitmix64.
#include <math.h>
#include <stddef.h>

#include "normgrow/rng.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void ng_rng_seed(ng_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ng_rng_next(ng_rng *r) {
  uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double ng_rng_uniform(ng_rng *r) { return (double)(ng_rng_next(r) >> 11) * 0x1.0p-53; }

uint64_t ng_rng_below(ng_rng *r, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
  do x = ng_rng_next(r);
  while (x >= limit);
  return x % n;
}

double ng_rng_normal(ng_rng *r) {
  double u1 = 1.0 - ng_rng_uniform(r), u2 = ng_rng_uniform(r);  // u1 in (0, 1]
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void ng_rng_fill_normal(ng_rng *r, float *dst, size_t n, double mean, double std) {
  for (size_t i = 0; i < n; i++) dst[i] = (float)(mean + std * ng_rng_normal(r));
}
