/* SPDX-License-Identifier: Apache-2.0 */
/* A seeded, reproducible pseudo-random generator (xoshiro256**) for what must
 * repeat bit for bit across runs: weight initialization, shuffling, data
 * splits. It is NOT for privacy noise or keys; those come from libsodium. */
#ifndef XF_BASE_RNG_H
#define XF_BASE_RNG_H

#include <stdint.h>

typedef struct xf_rng {
  uint64_t s[4];
} xf_rng;

/* Seeds from a 64-bit seed and a stream number, so independent consumers of
 * one job seed (init, shuffle, split) draw from unrelated sequences. */
void xf_rng_seed(xf_rng *rng, uint64_t seed, uint64_t stream);
uint64_t xf_rng_next(xf_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double xf_rng_uniform(xf_rng *rng);
/* Uniform integer in [0, n), without modulo bias; n > 0. */
uint64_t xf_rng_below(xf_rng *rng, uint64_t n);
/* Standard normal (Box-Muller; reproducible, not for privacy). */
double xf_rng_normal(xf_rng *rng);
/* Gamma(shape, 1) for shape > 0 (Marsaglia-Tsang), used by Dirichlet splits. */
double xf_rng_gamma(xf_rng *rng, double shape);
/* Fisher-Yates shuffle of n 32-bit indices. */
void xf_rng_shuffle_u32(xf_rng *rng, uint32_t *v, uint64_t n);

#endif
