/* SPDX-License-Identifier: Apache-2.0 */
/* xoshiro256** seeded through splitmix64 (Blackman and Vigna). */
#include "base/rng.h"

#include <math.h>

static uint64_t xf__splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint64_t xf__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void xf_rng_seed(xf_rng *rng, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ xf__rotl(stream * 0xd1342543de82ef95ULL + 1, 17);
  for (int i = 0; i < 4; i++) rng->s[i] = xf__splitmix64(&x);
}

uint64_t xf_rng_next(xf_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = xf__rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = xf__rotl(s[3], 45);
  return result;
}

double xf_rng_uniform(xf_rng *rng) { return (double)(xf_rng_next(rng) >> 11) * 0x1.0p-53; }

uint64_t xf_rng_below(xf_rng *rng, uint64_t n) {
  /* Rejection on the top of the range keeps every value equally likely. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = xf_rng_next(rng);
  } while (x >= limit);
  return x % n;
}

double xf_rng_normal(xf_rng *rng) {
  double u1;
  do {
    u1 = xf_rng_uniform(rng);
  } while (u1 <= 0.0);
  double u2 = xf_rng_uniform(rng);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double xf_rng_gamma(xf_rng *rng, double shape) {
  if (shape < 1.0) {
    /* Boost: Gamma(a) = Gamma(a + 1) * U^(1/a). */
    double u;
    do {
      u = xf_rng_uniform(rng);
    } while (u <= 0.0);
    return xf_rng_gamma(rng, shape + 1.0) * pow(u, 1.0 / shape);
  }
  double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = xf_rng_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    double u = xf_rng_uniform(rng);
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0.0 && log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
  }
}

void xf_rng_shuffle_u32(xf_rng *rng, uint32_t *v, uint64_t n) {
  for (uint64_t i = n; i > 1; i--) {
    uint64_t j = xf_rng_below(rng, i);
    uint32_t t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}
