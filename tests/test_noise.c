/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the differential-privacy noise samplers: the generator's stream
 * and reproducibility, argument bounds, and at fixed seeds the frequencies,
 * moments and goodness of fit of every sampler against exact values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "privacy/accountant.h"
#include "privacy/noise.h"
#include "privacy/plan.h"

typedef unsigned __int128 xf__u128_t;

#define N_BERN 200000
#define N_DIST 200000

/* A seeded generator: seed bytes are tag, tag + 1, ...; its Gaussian on a
 * grid draws from the table sampler (seeded), or from Karney's exact one
 * (seeded_as(tag, false): what a new generator does). */
static xf_noise *seeded_as(uint8_t tag, bool table) {
  uint8_t seed[XF_NOISE_SEED_BYTES];
  for (size_t i = 0; i < sizeof(seed); i++) seed[i] = (uint8_t)(tag + i);
  xf_noise *g = NULL;
  assert_int_equal(xf_noise_new_seeded(seed, &g), XF_OK);
  assert_non_null(g);
  xf_noise_use_table(g, table);
  return g;
}

static xf_noise *seeded(uint8_t tag) { return seeded_as(tag, true); }

/* Q(a, x), the regularized upper incomplete gamma function (series for
 * x < a + 1, Lentz's continued fraction otherwise). */
static double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  double lead = exp(-x + a * log(x) - lgamma(a));
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && fabs(term) > fabs(sum) * 1e-15; n++) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * lead;
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 10000; i++) {
    double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    double del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-15) break;
  }
  return h * lead;
}

/* P(chi^2 with df degrees of freedom >= stat). */
static double chi2_pvalue(double stat, int df) { return gamma_q(df / 2.0, stat / 2.0); }

/* An exact symmetric law on the integers, from its unnormalized weight. */
typedef double (*weight_fn)(int64_t x, double param);

static double gauss_weight(int64_t x, double sigma2) {
  return exp(-(double)x * (double)x / (2 * sigma2));
}

static double laplace_weight(int64_t x, double t) { return exp(-fabs((double)x) / t); }

typedef struct law {
  weight_fn w;
  double param;
  int64_t span; /* the weight is negligible beyond +-span */
  double z;     /* normalizer */
  double var;   /* E[X^2] (the mean is 0) */
  double mu4;   /* E[X^4] */
} law;

static law law_make(weight_fn w, double param, int64_t span) {
  law l = {.w = w, .param = param, .span = span};
  double z = 0, m2 = 0, m4 = 0;
  for (int64_t x = -span; x <= span; x++) {
    double p = w(x, param), x2 = (double)x * (double)x;
    z += p;
    m2 += p * x2;
    m4 += p * x2 * x2;
  }
  l.z = z;
  l.var = m2 / z;
  l.mu4 = m4 / z;
  return l;
}

static double law_pmf(const law *l, int64_t x) { return l->w(x, l->param) / l->z; }

/* Sample mean within 4 standard errors of 0 and E[X^2] within 4 standard
 * errors of the exact variance. */
static void check_moments(const char *what, const law *l, const int64_t *xs, size_t n) {
  double s1 = 0, s2 = 0;
  for (size_t i = 0; i < n; i++) {
    s1 += (double)xs[i];
    s2 += (double)xs[i] * (double)xs[i];
  }
  double mean = s1 / (double)n, m2 = s2 / (double)n;
  double se_mean = sqrt(l->var / (double)n);
  double se_var = sqrt((l->mu4 - l->var * l->var) / (double)n);
  print_message("%s: n=%zu mean=%+.5f (se %.5f, %+.2f se) var=%.5f exact=%.5f (se %.5f, %+.2f se)\n",
                what, n, mean, se_mean, mean / se_mean, m2, l->var, se_var,
                (m2 - l->var) / se_var);
  assert_true(fabs(mean) <= 4 * se_mean);
  assert_true(fabs(m2 - l->var) <= 4 * se_var);
}

/* Pearson's chi-square against the exact pmf. Bins: every x in (-L, L) on its
 * own, and the two tails x <= -L and x >= L, with L the largest value whose
 * own expected count is at least 5, so every bin expects at least 5. */
static void check_fit(const char *what, const law *l, const int64_t *xs, size_t n) {
  int64_t big = 0;
  while (big + 1 <= l->span && (double)n * law_pmf(l, big + 1) >= 5) big++;
  assert_true(big >= 1);
  size_t bins = (size_t)(2 * big + 1); /* index x + big, tails at 0 and 2 big */
  double *obs = xf_calloc(bins, sizeof(double));
  double *exp_count = xf_calloc(bins, sizeof(double));
  assert_non_null(obs);
  assert_non_null(exp_count);
  for (size_t i = 0; i < n; i++) {
    int64_t x = xs[i] < -big ? -big : xs[i] > big ? big : xs[i];
    obs[x + big] += 1;
  }
  double inner = 0;
  for (int64_t x = -big + 1; x <= big - 1; x++) {
    exp_count[x + big] = (double)n * law_pmf(l, x);
    inner += law_pmf(l, x);
  }
  exp_count[0] = exp_count[2 * big] = (double)n * (1 - inner) / 2; /* symmetric tails */
  double stat = 0;
  for (size_t i = 0; i < bins; i++) {
    assert_true(exp_count[i] >= 5);
    double d = obs[i] - exp_count[i];
    stat += d * d / exp_count[i];
  }
  int df = (int)bins - 1;
  double p = chi2_pvalue(stat, df);
  print_message("%s: chi2=%.2f df=%d p=%.4f\n", what, stat, df, p);
  assert_true(p > 1e-3);
  xf_free(obs);
  xf_free(exp_count);
}

static void chi2_pvalue_matches_known_values(void **state) {
  (void)state;
  /* Reference values from the chi-square tables. */
  assert_true(fabs(chi2_pvalue(3.841459, 1) - 0.05) < 1e-5);
  assert_true(fabs(chi2_pvalue(23.20925, 10) - 0.01) < 1e-5);
  assert_true(fabs(chi2_pvalue(149.4493, 100) - 0.001) < 1e-5);
  assert_true(fabs(chi2_pvalue(2.0, 2) - exp(-1.0)) < 1e-12);
}

static void same_seed_repeats_and_other_seeds_differ(void **state) {
  (void)state;
  enum { N = 256 };
  int64_t a[N], b[N], c[N], d[N];
  xf_noise *g1 = seeded(1), *g2 = seeded(1), *g3 = seeded(2);
  xf_noise *r1 = NULL, *r2 = NULL;
  assert_int_equal(xf_noise_new_random(&r1), XF_OK);
  assert_int_equal(xf_noise_new_random(&r2), XF_OK);
  assert_int_equal(xf_noise_discrete_gaussian_vec(g1, 1000, 1, a, N), XF_OK);
  assert_int_equal(xf_noise_discrete_gaussian_vec(g2, 1000, 1, b, N), XF_OK);
  assert_int_equal(xf_noise_discrete_gaussian_vec(g3, 1000, 1, c, N), XF_OK);
  assert_memory_equal(a, b, sizeof(a));
  assert_memory_not_equal(a, c, sizeof(a));
  assert_int_equal(xf_noise_discrete_gaussian_vec(r1, 1000, 1, c, N), XF_OK);
  assert_int_equal(xf_noise_discrete_gaussian_vec(r2, 1000, 1, d, N), XF_OK);
  assert_memory_not_equal(c, d, sizeof(c));
  /* The vector form is the scalar form drawn n times. */
  xf_noise *g4 = seeded(1);
  for (size_t i = 0; i < N; i++) {
    int64_t x;
    assert_int_equal(xf_noise_discrete_gaussian(g4, 1000, 1, &x), XF_OK);
    assert_int_equal(x, a[i]);
  }
  xf_noise_free(g1);
  xf_noise_free(g2);
  xf_noise_free(g3);
  xf_noise_free(g4);
  xf_noise_free(r1);
  xf_noise_free(r2);
  xf_noise_free(NULL);
}

static uint64_t load_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* The stream is ChaCha20 (zero nonce) under the seed, as libsodium makes
 * it (the generator's own comes from OpenSSL); the first 32 bytes of each
 * 4096-byte block key the next block and are never handed out. With
 * m = 2^63 nothing is rejected and the draw (r m / 2^64, Lemire) is the top
 * 63 bits of a 64-bit little-endian word. */
static void stream_is_chacha20_with_fast_key_erasure(void **state) {
  (void)state;
  uint8_t seed[XF_NOISE_SEED_BYTES], nonce[crypto_stream_chacha20_NONCEBYTES] = {0};
  for (size_t i = 0; i < sizeof(seed); i++) seed[i] = (uint8_t)(7 + i);
  static uint8_t block1[4096], block2[4096];
  const size_t per_block = (sizeof(block1) - 32) / 8;
  crypto_stream_chacha20(block1, sizeof(block1), nonce, seed);
  crypto_stream_chacha20(block2, sizeof(block2), nonce, block1);
  xf_noise *g = seeded(7);
  for (size_t i = 0; i < per_block + 2; i++) {
    uint64_t v;
    assert_int_equal(xf_noise_uniform(g, (uint64_t)1 << 63, &v), XF_OK);
    const uint8_t *want =
        i < per_block ? block1 + 32 + 8 * i : block2 + 32 + 8 * (i - per_block);
    assert_int_equal(v, load_le64(want) >> 1);
  }
  xf_noise_free(g);
}

static void arguments_out_of_range_are_refused(void **state) {
  (void)state;
  xf_noise *g = seeded(3);
  bool b;
  int64_t x;
  uint64_t u;
  const uint32_t over = XF_NOISE_RATIONAL_MAX + 1u;
  assert_int_equal(xf_noise_uniform(g, 0, &u), XF_EINVAL);
  assert_int_equal(xf_noise_bernoulli_exp(g, 1, 0, &b), XF_ERANGE);
  assert_int_equal(xf_noise_bernoulli_exp(g, over, 1, &b), XF_ERANGE);
  assert_int_equal(xf_noise_bernoulli_exp(g, 1, over, &b), XF_ERANGE);
  assert_int_equal(xf_noise_bernoulli_exp(NULL, 1, 1, &b), XF_EINVAL);
  assert_int_equal(xf_noise_discrete_laplace(g, 0, 1, &x), XF_ERANGE);
  assert_int_equal(xf_noise_discrete_laplace(g, 1, 0, &x), XF_ERANGE);
  assert_int_equal(xf_noise_discrete_laplace(g, over, 1, &x), XF_ERANGE);
  assert_int_equal(xf_noise_discrete_gaussian(g, 0, 1, &x), XF_ERANGE);
  assert_int_equal(xf_noise_discrete_gaussian(g, 1, 0, &x), XF_ERANGE);
  assert_int_equal(xf_noise_discrete_gaussian(g, 1, over, &x), XF_ERANGE);
  assert_int_equal(xf_noise_discrete_gaussian_vec(g, over, 1, &x, 1), XF_ERANGE);
  assert_int_equal(xf_noise_discrete_gaussian_vec(g, 1, 1, NULL, 1), XF_EINVAL);
  assert_int_equal(xf_noise_discrete_gaussian_vec(g, 1, 1, NULL, 0), XF_OK);
  /* The extremes of the supported range work. */
  assert_int_equal(xf_noise_bernoulli_exp(g, XF_NOISE_RATIONAL_MAX, 1, &b), XF_OK);
  assert_false(b);
  assert_int_equal(xf_noise_discrete_laplace(g, XF_NOISE_RATIONAL_MAX, 1, &x), XF_OK);
  assert_int_equal(xf_noise_discrete_laplace(g, 1, XF_NOISE_RATIONAL_MAX, &x), XF_OK);
  assert_int_equal(xf_noise_discrete_gaussian(g, XF_NOISE_RATIONAL_MAX, 1, &x), XF_OK);
  assert_int_equal(xf_noise_discrete_gaussian(g, 1, XF_NOISE_RATIONAL_MAX, &x), XF_OK);
  assert_int_equal(x, 0); /* sigma^2 = 2^-31: P(x != 0) about 2 exp(-2^30) */
  assert_int_equal(xf_noise_discrete_gaussian(g, XF_NOISE_RATIONAL_MAX, XF_NOISE_RATIONAL_MAX, &x),
                   XF_OK);
  float v[2] = {0, 1};
  assert_int_equal(xf_noise_gaussian_vec(g, 0.0, v, 2), XF_ERANGE);
  assert_int_equal(xf_noise_gaussian_vec(g, NAN, v, 2), XF_ERANGE);
  assert_int_equal(xf_noise_gaussian_vec(g, 1e30, v, 2), XF_ERANGE);
  v[1] = INFINITY;
  assert_int_equal(xf_noise_gaussian_vec(g, 1.0, v, 2), XF_ERANGE);
  v[1] = 1e20f; /* 2^66 grid steps at sigma = 1 */
  assert_int_equal(xf_noise_gaussian_vec(g, 1.0, v, 2), XF_ERANGE);
  assert_true(v[0] == 0.0f && v[1] == 1e20f); /* refused vectors are unchanged */
  xf_noise_free(g);
}

static void uniform_has_no_modulo_bias(void **state) {
  (void)state;
  xf_noise *g = seeded(4);
  /* m = 3 * 2^62: without rejection, [0, 2^62) would be twice as likely. */
  const uint64_t m = (uint64_t)3 << 62;
  enum { N = 60000 };
  double thirds[3] = {0};
  for (size_t i = 0; i < N; i++) {
    uint64_t u;
    assert_int_equal(xf_noise_uniform(g, m, &u), XF_OK);
    assert_true(u < m);
    thirds[u >> 62] += 1;
  }
  double stat = 0;
  for (int i = 0; i < 3; i++) stat += (thirds[i] - N / 3.0) * (thirds[i] - N / 3.0) / (N / 3.0);
  double p = chi2_pvalue(stat, 2);
  print_message("uniform m=3*2^62: thirds %.0f %.0f %.0f chi2=%.2f p=%.4f\n", thirds[0],
                thirds[1], thirds[2], stat, p);
  assert_true(p > 1e-3);
  xf_noise_free(g);
}

/* Every index is taken with probability l/n, independently of the others:
 * the counts per index fit l/n (chi-squared over the indices), the batch
 * sizes fit Binomial(n, l/n) in mean and variance, and the indices come out
 * in increasing order. */
static void poisson_sample_takes_each_index_with_probability_l_over_n(void **state) {
  (void)state;
  enum { N = 1000, L = 64, TRIALS = 2000 };
  static uint32_t picked[N];
  static double count[N];
  xf_noise *g = seeded(31);
  double sum = 0, sum2 = 0;
  for (int t = 0; t < TRIALS; t++) {
    size_t m = 0;
    assert_int_equal(xf_noise_poisson_sample(g, L, N, picked, &m), XF_OK);
    assert_true(m <= N);
    for (size_t i = 0; i < m; i++) {
      if (i > 0) assert_true(picked[i] > picked[i - 1]);
      count[picked[i]] += 1;
    }
    sum += (double)m;
    sum2 += (double)m * (double)m;
  }
  const double p = (double)L / N, want = TRIALS * p;
  double stat = 0;
  for (int i = 0; i < N; i++) stat += (count[i] - want) * (count[i] - want) / (want * (1 - p));
  double pv = chi2_pvalue(stat, N - 1);
  double mean = sum / TRIALS, var = sum2 / TRIALS - mean * mean;
  print_message("poisson l=%d n=%d: mean batch %.3f (want %d), variance %.2f (want %.2f), "
                "chi2=%.1f p=%.4f\n", L, N, mean, L, var, N * p * (1 - p), stat, pv);
  assert_true(pv > 1e-3);
  /* The mean of 2000 batches is within 5 standard errors of l. */
  assert_true(fabs(mean - L) < 5 * sqrt(N * p * (1 - p) / TRIALS));
  assert_true(var > 0.8 * N * p * (1 - p) && var < 1.2 * N * p * (1 - p));
  xf_noise_free(g);
}

/* l = 0 takes nothing and l = n everything; what is out of range is refused. */
static void poisson_sample_edges_and_bad_arguments(void **state) {
  (void)state;
  enum { N = 37 };
  uint32_t picked[N];
  size_t m = 99;
  xf_noise *g = seeded(32);
  assert_int_equal(xf_noise_poisson_sample(g, 0, N, picked, &m), XF_OK);
  assert_int_equal(m, 0);
  assert_int_equal(xf_noise_poisson_sample(g, N, N, picked, &m), XF_OK);
  assert_int_equal(m, N);
  for (uint32_t i = 0; i < N; i++) assert_int_equal(picked[i], i);
  assert_int_equal(xf_noise_poisson_sample(g, N + 1, N, picked, &m), XF_EINVAL);
  assert_int_equal(xf_noise_poisson_sample(g, 0, 0, picked, &m), XF_EINVAL);
  assert_int_equal(xf_noise_poisson_sample(g, 1, (uint64_t)UINT32_MAX + 1, picked, &m),
                   XF_EINVAL);
  assert_int_equal(xf_noise_poisson_sample(g, 1, N, NULL, &m), XF_EINVAL);
  assert_int_equal(xf_noise_poisson_sample(g, 1, N, picked, NULL), XF_EINVAL);
  assert_int_equal(xf_noise_poisson_sample(NULL, 1, N, picked, &m), XF_EINVAL);
  xf_noise_free(g);
}

static void bernoulli_exp_frequency_matches_exp_minus_gamma(void **state) {
  (void)state;
  static const uint32_t cases[][2] = {
      {0, 1}, {1, 4}, {1, 1}, {7, 3}, {11, 2}, {2147483646u, 2147483647u}, {1000, 1},
  };
  xf_noise *g = seeded(5);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    double p = exp(-(double)cases[c][0] / cases[c][1]);
    size_t hits = 0;
    for (size_t i = 0; i < N_BERN; i++) {
      bool b;
      assert_int_equal(xf_noise_bernoulli_exp(g, cases[c][0], cases[c][1], &b), XF_OK);
      hits += b;
    }
    double freq = (double)hits / N_BERN, se = sqrt(p * (1 - p) / N_BERN);
    print_message("bernoulli exp(-%u/%u): freq=%.5f exact=%.5f (se %.5f, %+.2f se)\n",
                  cases[c][0], cases[c][1], freq, p, se, se > 0 ? (freq - p) / se : 0.0);
    if (se == 0 || p < 1e-300)
      assert_int_equal(hits, p == 1 ? N_BERN : 0);
    else
      assert_true(fabs(freq - p) <= 4 * se);
  }
  xf_noise_free(g);
}

static void discrete_laplace_matches_exact_moments_and_pmf(void **state) {
  (void)state;
  static const uint32_t cases[][2] = {{1, 1}, {7, 2}, {10, 1}, {1, 3}};
  int64_t *xs = xf_mallocarray(N_DIST, sizeof(int64_t));
  assert_non_null(xs);
  xf_noise *g = seeded(6);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    double t = (double)cases[c][0] / cases[c][1];
    for (size_t i = 0; i < N_DIST; i++)
      assert_int_equal(xf_noise_discrete_laplace(g, cases[c][0], cases[c][1], &xs[i]), XF_OK);
    law l = law_make(laplace_weight, t, (int64_t)(60 * t) + 10);
    /* Cross-check of the summation with the closed form 2q / (1 - q)^2. */
    double q = exp(-1 / t);
    assert_true(fabs(l.var - 2 * q / ((1 - q) * (1 - q))) <= 1e-9 * l.var);
    char what[64];
    snprintf(what, sizeof(what), "laplace t=%u/%u", cases[c][0], cases[c][1]);
    check_moments(what, &l, xs, N_DIST);
    check_fit(what, &l, xs, N_DIST);
  }
  xf_noise_free(g);
  xf_free(xs);
}

static void discrete_gaussian_matches_exact_variance_and_pmf(void **state) {
  (void)state;
  static const uint32_t cases[][2] = {
      {1, 2}, {2, 1}, {10, 1}, {100, 1}, {2147483647u, 1073741824u} /* ~2, a large den */,
  };
  int64_t *xs = xf_mallocarray(N_DIST, sizeof(int64_t));
  assert_non_null(xs);
  xf_noise *g = seeded(8);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    double s2 = (double)cases[c][0] / cases[c][1];
    assert_int_equal(xf_noise_discrete_gaussian_vec(g, cases[c][0], cases[c][1], xs, N_DIST), XF_OK);
    law l = law_make(gauss_weight, s2, (int64_t)(40 * sqrt(s2)) + 10);
    char what[64];
    snprintf(what, sizeof(what), "gaussian sigma2=%u/%u", cases[c][0], cases[c][1]);
    check_moments(what, &l, xs, N_DIST);
    check_fit(what, &l, xs, N_DIST);
  }
  xf_noise_free(g);
  xf_free(xs);
}

static void gaussian_grid_rounds_sigma_up_by_less_than_2_pow_minus_14(void **state) {
  (void)state;
  static const double sigmas[] = {1.0, 1.5, 3e-3, 0.1, 12345.678, 0x1p-60, 0x1p60};
  for (size_t i = 0; i < sizeof(sigmas) / sizeof(sigmas[0]); i++) {
    int k;
    double eff;
    assert_int_equal(xf_noise_gaussian_grid(sigmas[i], &k, &eff), XF_OK);
    assert_true(eff >= sigmas[i]);
    assert_true(eff < sigmas[i] * (1 + 0x1p-14));
    double steps = ldexp(eff, k);
    assert_true(steps >= 0x1p14 && steps <= 0x1p15 && steps == floor(steps));
  }
  assert_int_equal(xf_noise_gaussian_grid(0x1p-61, NULL, NULL), XF_ERANGE);
  assert_int_equal(xf_noise_gaussian_grid(-1.0, NULL, NULL), XF_ERANGE);
  assert_int_equal(xf_noise_gaussian_grid(INFINITY, NULL, NULL), XF_ERANGE);
}

static void gaussian_vec_moments(bool table) {
  static const struct {
    double sigma;
    float base;
  } cases[] = {{1.5, 0.0f}, {3e-3, 0.25f}, {40.0, -1000.0f}};
  float *v = xf_mallocarray(N_DIST, sizeof(float));
  assert_non_null(v);
  xf_noise *g = seeded_as(9, table);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    int k;
    double eff;
    assert_int_equal(xf_noise_gaussian_grid(cases[c].sigma, &k, &eff), XF_OK);
    for (size_t i = 0; i < N_DIST; i++) v[i] = cases[c].base;
    assert_int_equal(xf_noise_gaussian_vec(g, cases[c].sigma, v, N_DIST), XF_OK);
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < N_DIST; i++) {
      double d = (double)v[i] - cases[c].base;
      s1 += d;
      s2 += d * d;
      /* Every output is a multiple of the grid step (it is exactly
       * representable here, being well inside float's precision). */
      double steps = ldexp((double)v[i], k);
      assert_true(steps == floor(steps));
    }
    double mean = s1 / N_DIST, m2 = s2 / N_DIST, var = eff * eff;
    double se_mean = sqrt(var / N_DIST), se_var = var * sqrt(2.0 / N_DIST);
    print_message("gaussian_vec sigma=%g base=%g: mean=%+.6g (%+.2f se) var=%.6g "
                  "sigma_eff^2=%.6g (%+.2f se)\n",
                  cases[c].sigma, (double)cases[c].base, mean, mean / se_mean, m2, var,
                  (m2 - var) / se_var);
    assert_true(fabs(mean) <= 4 * se_mean);
    assert_true(fabs(m2 - var) <= 4 * se_var);
  }
  xf_noise_free(g);
  xf_free(v);
}

static void gaussian_vec_adds_noise_of_mean_zero_and_variance_sigma2(void **state) {
  (void)state;
  gaussian_vec_moments(true);
}

static void exact_gaussian_vec_adds_noise_of_mean_zero_and_variance_sigma2(void **state) {
  (void)state;
  gaussian_vec_moments(false);
}

/* Lemire's multiply-shift with rejection at moduli far from a power of two.
 * For m = 3 * 2^61 + 1, a 64-bit draw scaled without rejection would give
 * the values below 2^62 - 2 (two thirds of [0, m)) three preimages and the
 * rest two: 3/4 of the draws instead of 2/3 would land in the first two
 * thirds. Small odd moduli and m = 1 are checked beside it. */
static void uniform_is_unbiased_for_awkward_moduli(void **state) {
  (void)state;
  static const uint64_t moduli[] = {((uint64_t)3 << 61) + 1, 0xffffffffu, 3, 1};
  xf_noise *g = seeded(10);
  enum { N = 60000, BINS = 3 };
  for (size_t c = 0; c < sizeof(moduli) / sizeof(moduli[0]); c++) {
    uint64_t m = moduli[c];
    double count[BINS] = {0};
    for (size_t i = 0; i < N; i++) {
      uint64_t u;
      assert_int_equal(xf_noise_uniform(g, m, &u), XF_OK);
      assert_true(u < m);
      count[(size_t)((xf__u128_t)u * BINS / m)] += 1; /* thirds of [0, m) */
    }
    if (m == 1) {
      assert_true(count[0] == N);
      continue;
    }
    double stat = 0;
    for (int b = 0; b < BINS; b++) stat += (count[b] - N / 3.0) * (count[b] - N / 3.0) / (N / 3.0);
    double p = chi2_pvalue(stat, BINS - 1);
    print_message("uniform m=%llu: chi2=%.2f p=%.4f\n", (unsigned long long)m, stat, p);
    assert_true(p > 1e-3);
  }
  xf_noise_free(g);
}

/* The parallel Gaussian cuts the vector into chunks keyed from g's stream:
 * the output for a given seed does not depend on the thread count, and a
 * refused vector is left unchanged. */
static void gaussian_vec_par_thread_counts(bool table) {
  const size_t n = 100000; /* 7 chunks, the last one short */
  float *a = xf_mallocarray(n, sizeof(float)), *b = xf_mallocarray(n, sizeof(float));
  assert_non_null(a);
  assert_non_null(b);
  static const int threads[] = {1, 2, 3, 8, 0};
  for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
    xf_noise *g = seeded_as(11, table);
    for (size_t i = 0; i < n; i++) b[i] = (float)i * 0.5f;
    assert_int_equal(xf_noise_gaussian_vec_par(g, 2.0, b, n, threads[t]), XF_OK);
    if (t == 0)
      memcpy(a, b, n * sizeof(float));
    else
      assert_memory_equal(a, b, n * sizeof(float));
    /* g moved on by the chunk keys: the next call draws fresh noise. */
    for (size_t i = 0; i < n; i++) b[i] = (float)i * 0.5f;
    assert_int_equal(xf_noise_gaussian_vec_par(g, 2.0, b, n, threads[t]), XF_OK);
    assert_memory_not_equal(a, b, n * sizeof(float));
    xf_noise_free(g);
  }
  xf_noise *g = seeded(12);
  b[0] = 0;
  b[1] = NAN;
  assert_int_equal(xf_noise_gaussian_vec_par(g, 1.0, b, 2, 4), XF_ERANGE);
  assert_true(b[0] == 0.0f && isnan(b[1]));
  assert_int_equal(xf_noise_gaussian_vec_par(g, 0.0, b, 2, 4), XF_ERANGE);
  assert_int_equal(xf_noise_gaussian_vec_par(NULL, 1.0, b, 2, 4), XF_EINVAL);
  assert_int_equal(xf_noise_gaussian_vec_par(g, 1.0, NULL, 0, 4), XF_OK);
  xf_noise_free(g);
  xf_free(a);
  xf_free(b);
}

static void gaussian_vec_par_is_the_same_for_any_thread_count(void **state) {
  (void)state;
  gaussian_vec_par_thread_counts(true);
}

static void exact_gaussian_vec_par_is_the_same_for_any_thread_count(void **state) {
  (void)state;
  gaussian_vec_par_thread_counts(false);
}

static void gaussian_vec_par_adds_noise_of_variance_sigma_eff2(void **state) {
  (void)state;
  float *v = xf_mallocarray(N_DIST, sizeof(float));
  assert_non_null(v);
  xf_noise *g = seeded(13);
  const double sigma = 3.0, base = 100.0;
  double eff;
  assert_int_equal(xf_noise_gaussian_grid(sigma, NULL, &eff), XF_OK);
  for (size_t i = 0; i < N_DIST; i++) v[i] = (float)base;
  assert_int_equal(xf_noise_gaussian_vec_par(g, sigma, v, N_DIST, 2), XF_OK);
  double s1 = 0, s2 = 0;
  for (size_t i = 0; i < N_DIST; i++) {
    double d = (double)v[i] - base;
    s1 += d;
    s2 += d * d;
  }
  double mean = s1 / N_DIST, m2 = s2 / N_DIST, var = eff * eff;
  double se_mean = sqrt(var / N_DIST), se_var = var * sqrt(2.0 / N_DIST);
  print_message("gaussian_vec_par sigma=%g: mean=%+.5f (%+.2f se) var=%.5f sigma_eff^2=%.5f "
                "(%+.2f se)\n",
                sigma, mean, mean / se_mean, m2, var, (m2 - var) / se_var);
  assert_true(fabs(mean) <= 4 * se_mean);
  assert_true(fabs(m2 - var) <= 4 * se_var);
  xf_noise_free(g);
  xf_free(v);
}

/* z_eff = sigma_eff / (sensitivity + sqrt(n) step), never above it. */
static void grid_multiplier_accounts_for_rounding_of_every_coordinate(void **state) {
  (void)state;
  static const struct {
    double sigma, sens;
    size_t n;
  } cases[] = {{1.0, 1.0, 1}, {1.1, 1.0, 200000}, {0.37, 0.5, 60000}, {5.0, 0.0, 4}, {1.0, 2.0, 0}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    int k;
    double eff, z;
    assert_int_equal(xf_noise_gaussian_grid(cases[c].sigma, &k, &eff), XF_OK);
    assert_int_equal(xf_noise_grid_multiplier(cases[c].sigma, cases[c].sens, cases[c].n, &z),
                     XF_OK);
    double want = eff / (cases[c].sens + sqrt((double)cases[c].n) * ldexp(1.0, -k));
    assert_true(z <= want);
    assert_true(z >= want * (1 - 1e-12));
  }
  /* 2^14 grid steps per sigma: at n = 2^28 the rounding term alone is sigma. */
  double z;
  assert_int_equal(xf_noise_grid_multiplier(1.0, 0.0, (size_t)1 << 28, &z), XF_OK);
  assert_true(fabs(z - 1.0) < 1e-9);
  assert_int_equal(xf_noise_grid_multiplier(1.0, 0.0, 0, &z), XF_ERANGE);
  assert_int_equal(xf_noise_grid_multiplier(1.0, -1.0, 10, &z), XF_ERANGE);
  assert_int_equal(xf_noise_grid_multiplier(1.0, NAN, 10, &z), XF_ERANGE);
  assert_int_equal(xf_noise_grid_multiplier(1.0, INFINITY, 10, &z), XF_ERANGE);
  assert_int_equal(xf_noise_grid_multiplier(0.0, 1.0, 10, &z), XF_ERANGE);
  assert_int_equal(xf_noise_grid_multiplier(1.0, 1.0, 10, NULL), XF_EINVAL);
}

/* The grid sampler's integer noise, read through the public interface: at
 * sigma = s with s in [2^14, 2^15) the grid step is 1 (grid_exp 0), so
 * xf_noise_gaussian_vec on zeros returns draws of N_Z(0, s^2) itself
 * (exact in float below 2^24). sigma = 2^15 - 1/2 gives s = 2^15. */
#define N_GRID 1000000

static void grid_draws(xf_noise *g, double sigma, int64_t *xs, float *v, size_t n) {
  int k;
  assert_int_equal(xf_noise_gaussian_grid(sigma, &k, NULL), XF_OK);
  assert_int_equal(k, 0);
  memset(v, 0, n * sizeof(float));
  assert_int_equal(xf_noise_gaussian_vec(g, sigma, v, n), XF_OK);
  for (size_t i = 0; i < n; i++) {
    xs[i] = (int64_t)v[i];
    assert_true((float)xs[i] == v[i]);
  }
}

/* Pearson's chi-square against the exact pmf on bins of width s/8 over
 * [-6s, 6s] and the two tails: the shape at the scale of sigma, where the
 * per-value fit of check_fit has little power. */
static void check_binned_fit(const char *what, const law *l, double s, const int64_t *xs,
                             size_t n) {
  enum { BINS = 96 + 2 };
  const int64_t w = (int64_t)(s / 8), lo = -48 * w;
  double obs[BINS] = {0}, expect[BINS] = {0};
  for (size_t i = 0; i < n; i++) {
    int64_t b = xs[i] < lo ? 0 : xs[i] >= -lo ? BINS - 1 : 1 + (xs[i] - lo) / w;
    obs[b] += 1;
  }
  double inner = 0;
  for (int b = 1; b < BINS - 1; b++) {
    double p = 0;
    for (int64_t x = lo + (b - 1) * w; x < lo + b * w; x++) p += law_pmf(l, x);
    expect[b] = (double)n * p;
    inner += p;
  }
  expect[0] = expect[BINS - 1] = (double)n * (1 - inner) / 2;
  double stat = 0;
  int bins = 0;
  for (int b = 0; b < BINS; b++) {
    if (expect[b] < 5) continue; /* pooled tails of width s/8 at 6 sigma: 1e-3 each */
    bins++;
    stat += (obs[b] - expect[b]) * (obs[b] - expect[b]) / expect[b];
  }
  double p = chi2_pvalue(stat, bins - 1);
  print_message("%s binned: chi2=%.2f df=%d p=%.4f\n", what, stat, bins - 1, p);
  assert_true(p > 1e-3);
}

/* Counts beyond c sigma on each side against the exact tail mass, within 4
 * standard errors (and 2 counts, for the rare ones), and the two signs
 * equally often: a shifted or lopsided sampler shows here first. */
static void check_tails_and_symmetry(const char *what, const law *l, double s, const int64_t *xs,
                                     size_t n) {
  static const double cuts[] = {2.0, 3.0, 4.0, 4.5};
  for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
    int64_t at = (int64_t)ceil(cuts[c] * s);
    double mass = 0;
    for (int64_t x = at; x <= l->span; x++) mass += law_pmf(l, x);
    size_t above = 0, below = 0;
    for (size_t i = 0; i < n; i++) {
      above += xs[i] >= at;
      below += xs[i] <= -at;
    }
    double e = (double)n * mass, se = sqrt(e);
    print_message("%s: beyond %.1f sigma %zu and %zu, exact %.1f\n", what, cuts[c], above, below,
                  e);
    assert_true(fabs((double)above - e) <= 4 * se + 2);
    assert_true(fabs((double)below - e) <= 4 * se + 2);
  }
  size_t pos = 0, neg = 0;
  for (size_t i = 0; i < n; i++) {
    pos += xs[i] > 0;
    neg += xs[i] < 0;
  }
  double half = (double)(pos + neg) / 2;
  assert_true(fabs((double)pos - half) <= 4 * sqrt(half / 2));
}

static void grid_sampler_fits_the_exact_discrete_gaussian_across_the_s_range(void **state) {
  (void)state;
  static const double sigmas[] = {16384, 16385, 23170, 32767, 32767.5};
  int64_t *xs = xf_mallocarray(N_GRID, sizeof(int64_t));
  float *v = xf_mallocarray(N_GRID, sizeof(float));
  assert_non_null(xs);
  assert_non_null(v);
  xf_noise *g = seeded(21);
  for (size_t c = 0; c < sizeof(sigmas) / sizeof(sigmas[0]); c++) {
    double s = ceil(sigmas[c]);
    char what[64];
    snprintf(what, sizeof(what), "grid s=%.0f", s);
    law l = law_make(gauss_weight, s * s, (int64_t)(9 * s));
    grid_draws(g, sigmas[c], xs, v, N_GRID);
    check_moments(what, &l, xs, N_GRID);
    check_fit(what, &l, xs, N_GRID);
    check_binned_fit(what, &l, s, xs, N_GRID);
    check_tails_and_symmetry(what, &l, s, xs, N_GRID);
  }
  xf_noise_free(g);
  xf_free(xs);
  xf_free(v);
}

/* Every s of the grid gets a table whose computed bound is within
 * XF_NOISE_GRID_TV (the table is refused with XF_EINTERNAL otherwise), here
 * at both ends and a spread of s between; and the vector bound is n times
 * the draw's. */
static void grid_sampler_is_within_its_total_variation_bound_for_every_s(void **state) {
  (void)state;
  xf_noise *g = seeded(22);
  float v[3] = {0};
  for (double s = 16384; s <= 32768; s += s < 32700 ? 997 : 1)
    assert_int_equal(xf_noise_gaussian_vec(g, s == 32768 ? 32767.5 : s, v, 3), XF_OK);
  double tv;
  assert_int_equal(xf_noise_grid_tv(1000, &tv), XF_OK);
  assert_true(tv == 1000 * XF_NOISE_GRID_TV);
  assert_int_equal(xf_noise_grid_tv(0, &tv), XF_OK);
  assert_true(tv == 0);
  assert_int_equal(xf_noise_grid_tv(1, NULL), XF_EINVAL);
  xf_noise_free(g);
}

/* Same seed, same noise, for the sequential and the parallel form, and the
 * noise moves with the seed; the output does not depend on the table
 * having been made by an earlier call. */
static void grid_sampler_is_reproducible_from_the_seed(void **state) {
  (void)state;
  enum { N = 3 * 4096 + 7 };
  static float a[N], b[N], c[N];
  xf_noise *g1 = seeded(23), *g2 = seeded(23), *g3 = seeded(24);
  assert_int_equal(xf_noise_gaussian_vec(g1, 0.5, a, N), XF_OK);
  assert_int_equal(xf_noise_gaussian_vec(g2, 2.0, c, 1), XF_OK); /* another table first */
  xf_noise_free(g2);
  g2 = seeded(23);
  assert_int_equal(xf_noise_gaussian_vec(g2, 0.5, b, N), XF_OK);
  assert_memory_equal(a, b, sizeof(a));
  assert_int_equal(xf_noise_gaussian_vec(g3, 0.5, c, N), XF_OK);
  assert_memory_not_equal(a, c, sizeof(a));
  memset(a, 0, sizeof(a));
  memset(b, 0, sizeof(b));
  assert_int_equal(xf_noise_gaussian_vec_par(g1, 0.5, a, N, 3), XF_OK);
  assert_int_equal(xf_noise_gaussian_vec_par(g2, 0.5, b, N, 1), XF_OK);
  assert_memory_equal(a, b, sizeof(a));
  xf_noise_free(g1);
  xf_noise_free(g2);
  xf_noise_free(g3);
}

/* The vector loop (AVX-512, where the CPU has it) and the portable one
 * read the stream in the same order and round the same way: the same bits
 * for every length (whole groups of 16, a short tail, a tail alone, a
 * group across a keystream block), for inputs on and between grid points
 * and of either sign, alone and in parallel. On a CPU without AVX-512 both
 * runs take the portable loop. */
static void grid_sampler_gives_the_same_bits_with_and_without_simd(void **state) {
  (void)state;
  static const size_t lengths[] = {1, 2, 15, 16, 17, 33, 509, 4096 + 3, 3 * 4096 + 7, 40000};
  static const double sigmas[] = {0.5, 3.0, 1e-3};
  enum { MAX = 40000 };
  static float a[MAX], b[MAX];
  for (size_t si = 0; si < sizeof(sigmas) / sizeof(sigmas[0]); si++) {
    int k;
    assert_int_equal(xf_noise_gaussian_grid(sigmas[si], &k, NULL), XF_OK);
    const float step = ldexpf(1.0f, -k);
    for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++) {
      const size_t n = lengths[li];
      for (int par = 0; par < 2; par++) {
        xf_noise *gv = seeded_as(31, true), *gp = seeded_as(31, true);
        xf_noise_use_simd(gp, false);
        for (size_t i = 0; i < n; i++) {
          /* On a grid point, half-way between two (a tie), or anywhere. */
          float x = (float)((int)(i % 7) - 3) * step * (i % 3 == 0 ? 1.0f : 0.5f) +
                    (i % 5 == 0 ? (float)i * 1e-3f : 0.0f);
          a[i] = b[i] = (i & 1) ? -x : x;
        }
        for (int rep = 0; rep < 3; rep++) { /* later calls start mid-block */
          if (par) {
            assert_int_equal(xf_noise_gaussian_vec_par(gv, sigmas[si], a, n, 2), XF_OK);
            assert_int_equal(xf_noise_gaussian_vec_par(gp, sigmas[si], b, n, 2), XF_OK);
          } else {
            assert_int_equal(xf_noise_gaussian_vec(gv, sigmas[si], a, n), XF_OK);
            assert_int_equal(xf_noise_gaussian_vec(gp, sigmas[si], b, n), XF_OK);
          }
          if (memcmp(a, b, n * sizeof(float)) != 0)
            fail_msg("sigma %g, n %zu, %s, call %d: the vector loop differs from the portable "
                     "one", sigmas[si], n, par ? "parallel" : "serial", rep + 1);
        }
        xf_noise_free(gv);
        xf_noise_free(gp);
      }
    }
  }
}

static void *draw_pending(void *arg) {
  xf_noise_pending_draw(arg);
  return NULL;
}

/* Two threads drawing one vector at once take its chunks between them, and
 * the bits are still the parallel form's. */
static void noise_drawn_ahead_by_two_threads_is_the_same(void **state) {
  (void)state;
  enum { N = 40 * 4096 + 9 };
  static float a[N], b[N];
  xf_noise *g1 = seeded_as(43, true), *g2 = seeded_as(43, true);
  xf_noise_pending *p = NULL;
  assert_int_equal(xf_noise_pending_new(g2, 1.3, N, &p), XF_OK);
  for (int rep = 0; rep < 4; rep++) {
    for (size_t i = 0; i < N; i++) a[i] = b[i] = (float)i * 1e-4f;
    assert_int_equal(xf_noise_gaussian_vec_par(g1, 1.3, a, N, 1), XF_OK);
    assert_int_equal(xf_noise_pending_key(p, g2), XF_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, draw_pending, p), 0);
    xf_noise_pending_draw(p);
    xf_noise_pending_draw(p); /* a third call beyond the two drawers does nothing */
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(xf_noise_pending_apply(p, b), XF_OK);
    assert_memory_equal(a, b, sizeof(a));
  }
  xf_noise_pending_free(p);
  xf_noise_free(g1);
  xf_noise_free(g2);
}

/* Noise drawn ahead (key, draw, apply) is the bits the parallel form adds
 * from the same generator state, for the table sampler and the exact one,
 * call after call; a vector out of range is refused and left as it was. */
static void noise_drawn_ahead_is_the_parallel_forms_bits(void **state) {
  (void)state;
  enum { N = 3 * 4096 + 5 };
  static float a[N], b[N];
  for (int mode = 0; mode < 3; mode++) { /* exact; table; table with the portable loops */
    const bool table = mode > 0;
    xf_noise *g1 = seeded_as(41, table), *g2 = seeded_as(41, table);
    xf_noise_use_simd(g2, mode < 2);
    xf_noise_pending *p = NULL;
    assert_int_equal(xf_noise_pending_new(g2, 0.7, N, &p), XF_OK);
    assert_int_equal(xf_noise_pending_apply(p, b), XF_EINVAL); /* nothing drawn yet */
    for (int rep = 0; rep < 3; rep++) {
      for (size_t i = 0; i < N; i++) a[i] = b[i] = (float)((int)(i % 11) - 5) * 0.37f;
      assert_int_equal(xf_noise_gaussian_vec_par(g1, 0.7, a, N, 2), XF_OK);
      assert_int_equal(xf_noise_pending_key(p, g2), XF_OK);
      xf_noise_pending_draw(p);
      assert_int_equal(xf_noise_pending_apply(p, b), XF_OK);
      if (memcmp(a, b, sizeof(a)) != 0)
        fail_msg("%s sampler%s, call %d: drawn ahead differs from xf_noise_gaussian_vec_par",
                 table ? "table" : "exact", mode == 2 ? " (portable loops)" : "", rep + 1);
    }
    b[7] = NAN;
    memcpy(a, b, sizeof(a));
    assert_int_equal(xf_noise_pending_key(p, g2), XF_OK);
    xf_noise_pending_draw(p);
    assert_int_equal(xf_noise_pending_apply(p, b), XF_ERANGE);
    assert_memory_equal(a, b, 7 * sizeof(float));
    assert_true(isnan(b[7]));
    assert_memory_equal(a + 8, b + 8, (N - 8) * sizeof(float));
    xf_noise_pending_free(p);
    xf_noise_free(g1);
    xf_noise_free(g2);
  }
  xf_noise *g = seeded(42);
  xf_noise_pending *p = NULL;
  assert_int_equal(xf_noise_pending_new(g, 0.0, 4, &p), XF_ERANGE);
  assert_null(p);
  xf_noise_free(g);
}

/* Without memory for the table the Gaussian on a grid returns XF_ENOMEM
 * and leaves the vector as it was; the generator keeps working once memory
 * is back, and keeps the table it had. */
static void grid_sampler_without_memory_fails_cleanly(void **state) {
  (void)state;
  enum { N = 2 * 4096 };
  static float v[N], w[N];
  for (size_t i = 0; i < N; i++) v[i] = w[i] = (float)i;
  xf_noise *g = seeded(25);
  xf_alloc_fail_after(0);
  assert_int_equal(xf_noise_gaussian_vec(g, 1.0, v, N), XF_ENOMEM);
  assert_int_equal(xf_noise_gaussian_vec_par(g, 1.0, v, N, 2), XF_ENOMEM);
  xf_alloc_fail_reset();
  assert_memory_equal(v, w, sizeof(v));
  assert_int_equal(xf_noise_gaussian_vec(g, 1.0, v, N), XF_OK);
  assert_memory_not_equal(v, w, sizeof(v));
  memcpy(v, w, sizeof(v));
  xf_alloc_fail_after(0);
  assert_int_equal(xf_noise_gaussian_vec(g, 3.0, v, N), XF_ENOMEM); /* a new s: a new table */
  assert_memory_equal(v, w, sizeof(v));
  assert_int_equal(xf_noise_gaussian_vec(g, 1.0, v, N), XF_OK); /* the old one is kept */
  xf_alloc_fail_reset();
  xf_noise_free(g);
}

/* The plan chooses the sampler and charges it: with a target epsilon whose
 * share (1 + e^eps) steps n XF_NOISE_GRID_TV is a negligible part of delta
 * the table draws the noise and the multiplier is calibrated at delta less
 * that share; a large target (local DP at epsilon 50: e^50 magnifies the
 * distance past delta) and a given multiplier take the exact sampler,
 * charged nothing, calibrated at the job's delta. */
static void plan_charges_the_table_sampler_or_takes_the_exact_one(void **state) {
  (void)state;
  xf_privacy_spec pv = {.unit = XF_PRIVACY_UNIT_RECORD, .mode = XF_PRIVACY_LOCAL, .clip = 1.0,
                        .has_target_epsilon = true, .target_epsilon = 3.0, .delta = 1e-5};
  xf_privacy_schedule sched = {.rounds = 10, .epochs = 2, .batch_size = 64};
  const size_t n = 199210;
  xf_privacy_plan plan;
  xf_errctx err = {0};
  assert_int_equal(xf_privacy_plan_for(&pv, &sched, 60000, n, &plan, &err), XF_OK);
  double share = (double)plan.planned_steps * (double)n * XF_NOISE_GRID_TV;
  assert_true(plan.table_sampler);
  assert_true(fabs(plan.sampler_delta - (1 + exp(3.0)) * share) <= 1e-12 * plan.sampler_delta);
  assert_true(plan.sampler_delta <= 1e-5 * XF_PRIVACY_TABLE_SHARE);
  double z, eps, order;
  assert_int_equal(xf_dp_calibrate(3.0, plan.sampling_rate, plan.planned_steps,
                                   1e-5 - plan.sampler_delta, &z, &eps, &order, NULL),
                   XF_OK);
  assert_true(plan.accounted_multiplier == z);

  /* Site-level local DP at epsilon 50 on a tiny model: e^50 share > delta. */
  xf_privacy_spec local = {.unit = XF_PRIVACY_UNIT_SITE, .mode = XF_PRIVACY_LOCAL, .clip = 1.0,
                           .has_target_epsilon = true, .target_epsilon = 50, .delta = 1e-5};
  xf_privacy_schedule two = {.rounds = 2, .epochs = 1, .batch_size = 8};
  assert_int_equal(xf_privacy_plan_for(&local, &two, 100, 18, &plan, &err), XF_OK);
  assert_false(plan.table_sampler);
  assert_true(plan.sampler_delta == 0);
  assert_int_equal(xf_dp_calibrate(50, 1.0, 2, 1e-5, &z, &eps, &order, NULL), XF_OK);
  assert_true(plan.accounted_multiplier == z);

  pv.has_target_epsilon = false;
  pv.has_noise_multiplier = true;
  pv.noise_multiplier = 1.1;
  assert_int_equal(xf_privacy_plan_for(&pv, &sched, 60000, n, &plan, &err), XF_OK);
  assert_false(plan.table_sampler);
  assert_true(plan.sampler_delta == 0);
  assert_true(plan.accounted_multiplier == 1.1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chi2_pvalue_matches_known_values),
      cmocka_unit_test(same_seed_repeats_and_other_seeds_differ),
      cmocka_unit_test(stream_is_chacha20_with_fast_key_erasure),
      cmocka_unit_test(poisson_sample_takes_each_index_with_probability_l_over_n),
      cmocka_unit_test(poisson_sample_edges_and_bad_arguments),
      cmocka_unit_test(arguments_out_of_range_are_refused),
      cmocka_unit_test(uniform_has_no_modulo_bias),
      cmocka_unit_test(bernoulli_exp_frequency_matches_exp_minus_gamma),
      cmocka_unit_test(discrete_laplace_matches_exact_moments_and_pmf),
      cmocka_unit_test(discrete_gaussian_matches_exact_variance_and_pmf),
      cmocka_unit_test(gaussian_grid_rounds_sigma_up_by_less_than_2_pow_minus_14),
      cmocka_unit_test(gaussian_vec_adds_noise_of_mean_zero_and_variance_sigma2),
      cmocka_unit_test(exact_gaussian_vec_adds_noise_of_mean_zero_and_variance_sigma2),
      cmocka_unit_test(uniform_is_unbiased_for_awkward_moduli),
      cmocka_unit_test(gaussian_vec_par_is_the_same_for_any_thread_count),
      cmocka_unit_test(exact_gaussian_vec_par_is_the_same_for_any_thread_count),
      cmocka_unit_test(gaussian_vec_par_adds_noise_of_variance_sigma_eff2),
      cmocka_unit_test(grid_multiplier_accounts_for_rounding_of_every_coordinate),
      cmocka_unit_test(grid_sampler_fits_the_exact_discrete_gaussian_across_the_s_range),
      cmocka_unit_test(grid_sampler_is_within_its_total_variation_bound_for_every_s),
      cmocka_unit_test(grid_sampler_is_reproducible_from_the_seed),
      cmocka_unit_test(grid_sampler_gives_the_same_bits_with_and_without_simd),
      cmocka_unit_test(noise_drawn_ahead_is_the_parallel_forms_bits),
      cmocka_unit_test(noise_drawn_ahead_by_two_threads_is_the_same),
      cmocka_unit_test(grid_sampler_without_memory_fails_cleanly),
      cmocka_unit_test(plan_charges_the_table_sampler_or_takes_the_exact_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
