// normgrow: a small seeded generator (splitmix64 seeding, xoshiro256**), the
// only source of randomness, so that a seed fixes every bit of a run.
#ifndef NORMGROW_RNG_H
#define NORMGROW_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t s[4];
} ng_rng;

void ng_rng_seed(ng_rng *r, uint64_t seed);
uint64_t ng_rng_next(ng_rng *r);
double ng_rng_uniform(ng_rng *r);            // [0, 1)
uint64_t ng_rng_below(ng_rng *r, uint64_t n);  // [0, n), unbiased
double ng_rng_normal(ng_rng *r);             // standard normal (Box-Muller)
// dst [n] = mean + std * normal
void ng_rng_fill_normal(ng_rng *r, float *dst, size_t n, double mean, double std);

#endif
