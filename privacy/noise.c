/* SPDX-License-Identifier: Apache-2.0 */
/* Exact discrete Laplace (CKS 2020) and Gaussian (Karney 2016) samplers over a ChaCha20
 * generator with fast key erasure, and the Gaussian on a grid with its table
 * sampler (a cumulative table and one convolution, within 2^-90 per value). */
#include "privacy/noise.h"

#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

typedef unsigned __int128 xf__u128;

/* Keystream is made XF__BLOCK bytes at a time: the first 32 become the next
 * key (fast key erasure, so a captured state does not reveal noise already
 * drawn), the rest is handed out as 64-bit words. The block is ChaCha20
 * under the key with a zero nonce and counter, made by OpenSSL's ChaCha20
 * (which has AVX-512 and AVX2 code for the CPU it runs on; 2-3x libsodium's
 * here) and equal byte for byte to libsodium's crypto_stream_chacha20, which
 * stands in when OpenSSL cannot (tests check the two agree). Consumed words are not
 * wiped one by one (that cost more than the sampling itself): a refill
 * overwrites the whole block, and every public function wipes the words it
 * consumed before it returns (xf__erase), so between calls the state holds
 * only the next key and keystream not yet used. */
#define XF__BLOCK 4096
#define XF__KEY crypto_stream_chacha20_KEYBYTES
#define XF__WORDS (XF__BLOCK / 8)
#define XF__KEY_WORDS (XF__KEY / 8)

_Static_assert(XF_NOISE_SEED_BYTES == crypto_stream_chacha20_KEYBYTES, "seed is a ChaCha20 key");
_Static_assert(XF__KEY % 8 == 0, "the key is a whole number of words");

struct xf_noise {
  uint8_t key[XF__KEY];
  uint64_t block[XF__WORDS]; /* keystream bytes; read as little-endian words */
  size_t pos;                /* next unread word of block; XF__WORDS when empty */
  size_t clean;              /* words in [clean, pos) were read but not yet wiped */
  uint64_t pool;             /* unused bits of the last word split into small draws */
  unsigned pool_bits;
  struct xf__grid_table *table; /* the grid sampler's table for the last s used, or NULL;
                                   xf_malloc'ed, public data, owned by this generator */
  bool use_table; /* the Gaussian on a grid draws from the table (xf_noise_use_table);
                     false: Karney's exact sampler */
  bool no_simd;   /* the table sampler's portable loop even where AVX-512 is there
                     (xf_noise_use_simd); the output is the same either way */
};

static EVP_CIPHER *xf__chacha; /* fetched once; NULL: libsodium makes the stream */
static pthread_once_t xf__chacha_once = PTHREAD_ONCE_INIT;
static void xf__chacha_fetch(void) { xf__chacha = EVP_CIPHER_fetch(NULL, "ChaCha20", NULL); }

/* ChaCha20 keystream under key, zero nonce and counter, into out[0..n).
 * OpenSSL's IV is a 32-bit block counter and a 96-bit nonce, libsodium's
 * original ChaCha20 a 64-bit counter and a 64-bit nonce: with both zero and
 * under 2^32 blocks the two states are the same words. OpenSSL's context
 * holds the key while it works and is cleansed (reset) before returning, so
 * nothing but g->key can make the stream again. */
static void xf__keystream(const uint8_t key[XF__KEY], uint8_t *out, size_t n) {
  static const uint8_t iv[16];
  pthread_once(&xf__chacha_once, xf__chacha_fetch);
  EVP_CIPHER_CTX *ctx = xf__chacha ? EVP_CIPHER_CTX_new() : NULL;
  int len = 0;
  bool ok = false;
  if (ctx) {
    memset(out, 0, n);
    ok = EVP_EncryptInit_ex2(ctx, xf__chacha, key, iv, NULL) == 1 &&
         EVP_EncryptUpdate(ctx, out, &len, out, (int)n) == 1 && (size_t)len == n;
    EVP_CIPHER_CTX_free(ctx); /* cleanses the key and state */
  }
  if (!ok) {
    static const uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];
    crypto_stream_chacha20(out, n, nonce, key);
  }
}

static void xf__refill(xf_noise *g) {
  /* A fresh key each block. */
  xf__keystream(g->key, (uint8_t *)g->block, XF__BLOCK);
  memcpy(g->key, g->block, XF__KEY);
  sodium_memzero(g->block, XF__KEY);
  g->pos = g->clean = XF__KEY_WORDS;
}

/* Wipes the keystream read since the last wipe (see XF__BLOCK). */
static void xf__erase(xf_noise *g) {
  if (g->pos > g->clean) sodium_memzero(&g->block[g->clean], (g->pos - g->clean) * 8);
  g->clean = g->pos;
}

/* 64 keystream bits, little-endian, so the stream is the same on any host. */
static inline uint64_t xf__u64(xf_noise *g) {
  if (g->pos == XF__WORDS) xf__refill(g);
  uint64_t v;
  memcpy(&v, &g->block[g->pos++], 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

/* w fresh bits, 1 <= w <= 32, from the low end of a word; the bits of a word
 * left over when fewer than w remain are dropped. */
static inline uint64_t xf__bits(xf_noise *g, unsigned w) {
  if (g->pool_bits < w) {
    g->pool = xf__u64(g);
    g->pool_bits = 64;
  }
  uint64_t r = g->pool & (((uint64_t)1 << w) - 1);
  g->pool >>= w;
  g->pool_bits -= w;
  return r;
}

static xf_err xf__new(const uint8_t *seed, xf_noise **out) {
  *out = NULL;
  if (sodium_init() < 0) return XF_EINTERNAL;
  xf_noise *g = sodium_malloc(sizeof(*g));
  if (!g) return XF_ENOMEM;
  if (seed)
    memcpy(g->key, seed, XF__KEY);
  else
    randombytes_buf(g->key, XF__KEY);
  sodium_memzero(g->block, XF__BLOCK);
  g->pos = g->clean = XF__WORDS;
  g->pool = 0;
  g->pool_bits = 0;
  g->table = NULL;
  g->use_table = false; /* exact until the caller turns the table on */
  g->no_simd = false;
  *out = g;
  return XF_OK;
}

xf_err xf_noise_new_seeded(const uint8_t seed[XF_NOISE_SEED_BYTES], xf_noise **out) {
  return xf__new(seed, out);
}

xf_err xf_noise_new_random(xf_noise **out) { return xf__new(NULL, out); }

static void xf__grid_table_free(struct xf__grid_table *t);

void xf_noise_free(xf_noise *g) {
  if (!g) return;
  xf__grid_table_free(g->table);
  sodium_free(g); /* sodium_free zeroes the region before unmapping it */
}

/* Uniform in [0, m), m >= 1, by Lemire's multiply-shift rejection: r m / 2^64
 * for a 64-bit draw r, rejecting the draws whose low product half is below
 * 2^64 mod m, so that every value has exactly floor(2^64 / m) accepted
 * preimages. The division that computes 2^64 mod m runs only when the low
 * half is below m (odds m / 2^64). */
static uint64_t xf__uniform64(xf_noise *g, uint64_t m) {
  xf__u128 p = (xf__u128)xf__u64(g) * m;
  if ((uint64_t)p < m) {
    uint64_t threshold = (0 - m) % m;
    while ((uint64_t)p < threshold) p = (xf__u128)xf__u64(g) * m;
  }
  return (uint64_t)(p >> 64);
}

/* The same with 32-bit draws, for 1 <= m < 2^32: half the keystream. */
static uint64_t xf__uniform32(xf_noise *g, uint64_t m) {
  uint64_t p = xf__bits(g, 32) * m;
  if ((uint32_t)p < m) {
    uint64_t threshold = ((uint64_t)1 << 32) % m;
    while ((uint32_t)p < threshold) p = xf__bits(g, 32) * m;
  }
  return p >> 32;
}

static uint64_t xf__uniform(xf_noise *g, uint64_t m) {
  return m < ((uint64_t)1 << 32) ? xf__uniform32(g, m) : xf__uniform64(g, m);
}

xf_err xf_noise_uniform(xf_noise *g, uint64_t m, uint64_t *out) {
  if (!g || !out || m == 0) return XF_EINVAL;
  *out = xf__uniform64(g, m);
  xf__erase(g);
  return XF_OK;
}

/* Bernoulli(num/den) for num <= den, den >= 1, den < 2^120: whether U <
 * num/den for U uniform in [0, 1), comparing one 8-bit digit of U at a time
 * with the base-256 expansion of num/den (long division). The first digit
 * that differs decides; a tie (odds 1/256) moves to the next digit, and once
 * the expansion has ended U can only be larger. About 8 bits and one
 * division a draw, whatever the size of den. */
static bool xf__bern_digits(xf_noise *g, xf__u128 num, xf__u128 den) {
  if (num >= den) return true;
  if (den <= UINT64_MAX >> 8) {
    uint64_t rem = (uint64_t)num, d = (uint64_t)den;
    for (;;) {
      uint64_t x = rem << 8, digit = x / d;
      rem = x - digit * d;
      uint64_t r = xf__bits(g, 8);
      if (r != digit) return r < digit;
      if (rem == 0) return false;
    }
  }
  xf__u128 rem = num;
  for (;;) {
    xf__u128 x = rem << 8, digit = x / den;
    rem = x - digit * den;
    uint64_t r = xf__bits(g, 8);
    if (r != digit) return r < digit;
    if (rem == 0) return false;
  }
}

/* Bernoulli(num/den), same ranges: U = (R + V) / 2^w with R the first w
 * bits and V the rest, so U < num/den exactly when V < (num 2^w - R den) /
 * den. That is decided by one multiplication unless the bound falls in
 * (0, 1) (odds den / 2^w), where the digits of V decide (xf__bern_digits).
 * w = 32 when den < 2^24, else 64. */
static bool xf__bern_frac(xf_noise *g, xf__u128 num, xf__u128 den) {
  if (num >= den) return true;
  if (den < ((uint64_t)1 << 24)) {
    uint64_t lhs = xf__bits(g, 32) * (uint64_t)den, rhs = (uint64_t)num << 32;
    if (lhs >= rhs) return false;
    if (rhs - lhs >= den) return true;
    return xf__bern_digits(g, rhs - lhs, den);
  }
  if ((den >> 64) == 0) {
    xf__u128 lhs = (xf__u128)xf__u64(g) * (uint64_t)den, rhs = num << 64;
    if (lhs >= rhs) return false;
    if (rhs - lhs >= den) return true;
    return xf__bern_digits(g, rhs - lhs, den);
  }
  return xf__bern_digits(g, num, den);
}

xf_err xf_noise_poisson_sample(xf_noise *g, uint64_t l, uint64_t n, uint32_t *picked,
                               size_t *m) {
  if (!g || !picked || !m || n == 0 || n > UINT32_MAX || l > n) return XF_EINVAL;
  /* l/n = (d + r/n) / 2^16 with d = floor(l 2^16 / n), r = l 2^16 mod n.
   * With R the first 16 bits of U: R < d takes the index, R > d leaves it,
   * and R == d leaves the rest of U to decide against r/n. */
  const uint64_t scaled = l << 16, d = scaled / n, r = scaled % n;
  size_t k = 0;
  for (uint64_t i = 0; i < n; i += 4) {
    uint64_t word = xf__u64(g); /* four indices' first 16 bits */
    uint64_t stop = n - i < 4 ? n - i : 4;
    for (uint64_t q = 0; q < stop; q++, word >>= 16) {
      uint64_t u = word & 0xffff;
      bool take = u < d || (u == d && xf__bern_digits(g, r, n));
      picked[k] = (uint32_t)(i + q); /* written always, kept when taken: no branch */
      k += take;
    }
  }
  *m = k;
  xf__erase(g);
  return XF_OK;
}

/* Internal ranges. Numerators stay below 2^80 and denominators below 2^33
 * (see xf__discrete_gaussian), so den * K in xf__bern_exp_le1 stays below
 * 2^120 for K <= XF__K_MAX; K exceeds k with probability 1/k!, so the loop
 * cap is never met in practice. */
#define XF__K_MAX ((uint64_t)1 << 40)

/* Bernoulli(exp(-num/den)) for 0 <= num <= den (CKS Algorithm 1, first
 * branch): K counts successes of Bernoulli(gamma/K), K = 1, 2, ...; the
 * probability that the count stops at an odd K is exp(-gamma). */
static xf_err xf__bern_exp_le1(xf_noise *g, xf__u128 num, xf__u128 den, bool *out) {
  uint64_t k = 1;
  for (;;) {
    if (k > XF__K_MAX) return XF_EINTERNAL;
    if (!xf__bern_frac(g, num, den * k)) break;
    k++;
  }
  *out = (k & 1) == 1;
  return XF_OK;
}

/* Bernoulli(exp(-1)): the same chain with gamma = 1, whose first step always
 * succeeds. */
static xf_err xf__bern_exp1(xf_noise *g, bool *out) {
  uint64_t k = 2;
  for (;;) {
    if (k > XF__K_MAX) return XF_EINTERNAL;
    if (!xf__bern_frac(g, 1, k)) break;
    k++;
  }
  *out = (k & 1) == 1;
  return XF_OK;
}

/* Thresholds of xf__bern_exp_half: 1/d_n with d_n = 2^n n!, as
 * 2^16 / d_n = floor + rem / d_n, for the n with d_n < 2^16. */
static const struct {
  uint64_t floor, rem, den;
} xf__half_tail[] = {
    {32768, 0, 2}, {8192, 0, 8}, {1365, 16, 48}, {170, 256, 384}, {17, 256, 3840}, {1, 19456, 46080},
};
#define XF__HALF_TAIL (sizeof(xf__half_tail) / sizeof(xf__half_tail[0]))

/* Bernoulli(exp(-1/2)), the step of the discrete Gaussian on a grid. In
 * Algorithm 1 with gamma = 1/2 the count N of successes has P(N >= n) =
 * 1/(2^n n!), and exp(-1/2) = P(N even); so N is read off one uniform U as
 * the number of thresholds 1/d_n above it. U's first 16 bits R decide every
 * comparison but a tie R = floor(2^16 / d_n), which the rest of U decides;
 * the thresholds' floors are distinct, so U meets at most one tie. Past the
 * table (odds 2^-16) the chain goes on with fresh Bernoulli(1/(2n)) steps,
 * which have the same law given N >= XF__HALF_TAIL. */
static xf_err xf__bern_exp_half(xf_noise *g, bool *out) {
  uint64_t r = xf__bits(g, 16), n = 0;
  while (n < XF__HALF_TAIL) {
    if (r < xf__half_tail[n].floor) {
      n++;
      continue;
    }
    if (r == xf__half_tail[n].floor && xf__half_tail[n].rem &&
        xf__bern_digits(g, xf__half_tail[n].rem, xf__half_tail[n].den))
      n++; /* U < 1/d_n; the next floor is below r, so U is above 1/d_(n+1) */
    *out = (n & 1) == 0;
    return XF_OK;
  }
  for (;;) {
    if (n >= XF__K_MAX) return XF_EINTERNAL;
    if (!xf__bern_frac(g, 1, 2 * (n + 1))) break;
    n++;
  }
  *out = (n & 1) == 0;
  return XF_OK;
}

/* Bernoulli(exp(-num/den)) for any num >= 0, den >= 1 (CKS Algorithm 1):
 * exp(-gamma) = exp(-1)^floor(gamma) * exp(-frac(gamma)). The loop over
 * floor(gamma) ends at the first failure, after 1.6 draws on average. */
static xf_err xf__bern_exp(xf_noise *g, xf__u128 num, xf__u128 den, bool *out) {
  if (num <= den) return xf__bern_exp_le1(g, num, den, out);
  xf__u128 whole, frac;
  if ((num >> 64) == 0 && (den >> 64) == 0) {
    whole = (uint64_t)num / (uint64_t)den; /* 64-bit division where it fits */
    frac = (uint64_t)num % (uint64_t)den;
  } else {
    whole = num / den;
    frac = num % den;
  }
  for (xf__u128 i = 0; i < whole; i++) {
    bool b;
    XF_GUARD(xf__bern_exp1(g, &b));
    if (!b) {
      *out = false;
      return XF_OK;
    }
  }
  return xf__bern_exp_le1(g, frac, den, out);
}

xf_err xf_noise_bernoulli_exp(xf_noise *g, uint32_t num, uint32_t den, bool *out) {
  if (!g || !out) return XF_EINVAL;
  if (num > XF_NOISE_RATIONAL_MAX || den == 0 || den > XF_NOISE_RATIONAL_MAX) return XF_ERANGE;
  xf_err rc = xf__bern_exp(g, num, den, out);
  xf__erase(g);
  return rc;
}

/* Cap on V, the count of Bernoulli(exp(-1)) successes in the Laplace
 * sampler; it keeps U + t V below 2^63. A longer run has odds exp(-2^31); it
 * is discarded and redrawn, which moves the distribution by less than that in
 * total variation. */
#define XF__RUN_MAX ((uint64_t)1 << 31)

/* Discrete Laplace with scale t/s (CKS Algorithm 2), t, s >= 1 and below
 * 2^32: X = U + t V with U uniform on [0, t) accepted with probability
 * exp(-U/t) and V geometric with ratio exp(-1), so X is geometric with ratio
 * exp(-1/t); Y = floor(X / s) is geometric with ratio exp(-s/t), and a
 * random sign with the double-counted zero rejected gives the Laplace.
 * t < 2^31 and V < 2^31 keep |Y| < 2^62. */
static xf_err xf__discrete_laplace(xf_noise *g, uint64_t t, uint64_t s, int64_t *out) {
  for (;;) {
    uint64_t u = xf__uniform(g, t);
    bool d;
    XF_GUARD(xf__bern_exp_le1(g, u, t, &d));
    if (!d) continue;
    uint64_t v = 0;
    for (;;) {
      bool a;
      XF_GUARD(xf__bern_exp1(g, &a));
      if (!a) break;
      v++;
      if (v >= XF__RUN_MAX) break;
    }
    if (v >= XF__RUN_MAX) continue;
    uint64_t y = (u + t * v) / s; /* t * v < 2^62 */
    bool negative = xf__bits(g, 1) == 1;
    if (negative && y == 0) continue;
    *out = negative ? -(int64_t)y : (int64_t)y;
    return XF_OK;
  }
}

xf_err xf_noise_discrete_laplace(xf_noise *g, uint32_t t_num, uint32_t t_den, int64_t *out) {
  if (!g || !out) return XF_EINVAL;
  if (t_num == 0 || t_num > XF_NOISE_RATIONAL_MAX || t_den == 0 || t_den > XF_NOISE_RATIONAL_MAX)
    return XF_ERANGE;
  xf_err rc = xf__discrete_laplace(g, t_num, t_den, out);
  xf__erase(g);
  return rc;
}

static uint64_t xf__isqrt(uint64_t x) {
  uint64_t r = (uint64_t)sqrt((double)x); /* a first guess only; fixed below */
  while (r * r > x) r--;
  while ((r + 1) * (r + 1) <= x) r++;
  return r;
}

static uint64_t xf__gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Cap on k, the block index of the discrete Gaussian below: it keeps
 * |k m + j| < 2^31. A proposal with k >= 2^15 has odds below exp(-2^14)
 * (k is geometric with ratio at most exp(-1/2)) and target mass below
 * exp(-2^29); it is redrawn, which moves the law by less than that. */
#define XF__BLOCK_MAX ((uint64_t)1 << 15)

/* The discrete Gaussian with sigma^2 = a/b, 1 <= a, b < 2^31, prepared once
 * for many draws. Every integer i >= 0 is written once as i = k m + j with
 * block width m = ceil(sigma) and j in [0, m); then
 *   exp(-i^2 / (2 sigma^2)) = exp(-r k^2) exp(-j (2 k m + j) b / (2 a)),
 * with r = m^2 b / (2 a) >= 1/2. This is Karney's Algorithm D (2016) for the
 * discrete normal, with a rational sigma^2 in place of a rational sigma. */
typedef struct xf__dgauss {
  uint64_t m;      /* block width ceil(sigma), at most 46341 */
  uint64_t r_num;  /* r = r_num / r_den in lowest terms; r_num < 2^33 */
  uint64_t r_den;  /* r_den <= 2a < 2^32 */
  uint64_t acc_b;  /* the acceptance exponent's b / (2a), in lowest terms */
  uint64_t acc_2a;
} xf__dgauss;

static xf__dgauss xf__dgauss_prepare(uint64_t a, uint64_t b) {
  xf__dgauss d;
  uint64_t m = xf__isqrt(a / b); /* floor(sigma) or one below ceil(sigma) */
  while (m * m * b < a) m++;     /* m^2 b <= a + 2 sqrt(ab) + b < 2^33 */
  d.m = m;
  uint64_t rn = m * m * b, rd = 2 * a, c = xf__gcd(rn, rd);
  d.r_num = rn / c;
  d.r_den = rd / c;
  c = xf__gcd(b, 2 * a);
  d.acc_b = b / c;
  d.acc_2a = 2 * a / c;
  return d;
}

/* One draw (Karney 2016, Algorithm D, steps as there):
 *  1. k >= 0 with probability proportional to exp(-r k^2): k geometric with
 *     ratio exp(-r) (successes of Bernoulli(exp(-r))), kept with probability
 *     exp(-r k (k - 1));
 *  2. a sign, and j uniform in [0, m); the negative zero is rejected;
 *  3. kept with probability exp(-j (2 k m + j) b / (2 a)).
 * A rejection at any step starts over. The kept values have probability
 * proportional to exp(-r k^2 - j (2 k m + j) b / (2a)) = exp(-i^2 / (2
 * sigma^2)), exactly. Sizes: j (2 k m + j) < 2^49 for k < 2^15 and
 * m < 2^16, times b < 2^31 is below 2^80; r k (k - 1) below 2^63. About two
 * rounds a draw for sigma >= 1 (Karney's acceptance is 0.49). */
static xf_err xf__discrete_gaussian(xf_noise *g, const xf__dgauss *d, int64_t *out) {
  for (;;) {
    uint64_t k = 0;
    bool half = d->r_num == 1 && d->r_den == 2; /* sigma an integer: the grid */
    for (;;) {
      bool c;
      XF_GUARD(half ? xf__bern_exp_half(g, &c) : xf__bern_exp(g, d->r_num, d->r_den, &c));
      if (!c) break;
      if (++k == XF__BLOCK_MAX) break;
    }
    if (k == XF__BLOCK_MAX) continue;
    if (k >= 2) {
      bool c = true;
      if (half)
        for (uint64_t i = 0; c && i < k * (k - 1); i++) XF_GUARD(xf__bern_exp_half(g, &c));
      else
        XF_GUARD(xf__bern_exp(g, (xf__u128)d->r_num * (k * (k - 1)), d->r_den, &c));
      if (!c) continue;
    }
    bool negative = xf__bits(g, 1) == 1;
    uint64_t j = xf__uniform32(g, d->m);
    if (negative && k == 0 && j == 0) continue;
    if (j > 0) {
      bool c;
      xf__u128 num = (xf__u128)(j * (2 * k * d->m + j)) * d->acc_b;
      XF_GUARD(xf__bern_exp(g, num, d->acc_2a, &c));
      if (!c) continue;
    }
    int64_t i = (int64_t)(k * d->m + j);
    *out = negative ? -i : i;
    return XF_OK;
  }
}

static xf_err xf__check_sigma2(uint32_t num, uint32_t den) {
  if (num == 0 || num > XF_NOISE_RATIONAL_MAX || den == 0 || den > XF_NOISE_RATIONAL_MAX)
    return XF_ERANGE;
  return XF_OK;
}

xf_err xf_noise_discrete_gaussian(xf_noise *g, uint32_t sigma2_num, uint32_t sigma2_den,
                                  int64_t *out) {
  if (!g || !out) return XF_EINVAL;
  XF_GUARD(xf__check_sigma2(sigma2_num, sigma2_den));
  xf__dgauss d = xf__dgauss_prepare(sigma2_num, sigma2_den);
  xf_err rc = xf__discrete_gaussian(g, &d, out);
  xf__erase(g);
  return rc;
}

xf_err xf_noise_discrete_gaussian_vec(xf_noise *g, uint32_t sigma2_num, uint32_t sigma2_den,
                                      int64_t *out, size_t n) {
  if (!g || (!out && n > 0)) return XF_EINVAL;
  XF_GUARD(xf__check_sigma2(sigma2_num, sigma2_den));
  xf__dgauss d = xf__dgauss_prepare(sigma2_num, sigma2_den);
  xf_err rc = XF_OK;
  for (size_t i = 0; i < n && rc == XF_OK; i++) rc = xf__discrete_gaussian(g, &d, &out[i]);
  xf__erase(g);
  return rc;
}

/* Grid: sigma = m 2^e with m in [1/2, 1), so sigma 2^(15 - e) lies in
 * [2^14, 2^15) and its ceiling s in [2^14, 2^15]; s^2 <= 2^30 is a valid
 * sigma^2 numerator. Rounding sigma up never weakens the guarantee. */
static xf_err xf__grid(double sigma, int *k, uint64_t *s) {
  if (!isfinite(sigma) || sigma < XF_NOISE_SIGMA_MIN || sigma > XF_NOISE_SIGMA_MAX)
    return XF_ERANGE;
  int e;
  (void)frexp(sigma, &e);
  *k = 15 - e;
  *s = (uint64_t)ceil(ldexp(sigma, *k));
  return XF_OK;
}

xf_err xf_noise_gaussian_grid(double sigma, int *grid_exp, double *sigma_eff) {
  int k;
  uint64_t s;
  XF_GUARD(xf__grid(sigma, &k, &s));
  if (grid_exp) *grid_exp = k;
  if (sigma_eff) *sigma_eff = ldexp((double)s, -k);
  return XF_OK;
}

xf_err xf_noise_grid_tv(size_t n, double *tv) {
  if (!tv) return XF_EINVAL;
  double d = (double)n; /* exact below 2^53; rounded up past it */
  if (d < 0x1p64 && (size_t)d < n) d = nextafter(d, INFINITY);
  *tv = d * XF_NOISE_GRID_TV; /* a power-of-two scaling: exact */
  return XF_OK;
}

xf_err xf_noise_grid_multiplier(double sigma, double sensitivity, size_t n, double *z_eff) {
  if (!z_eff) return XF_EINVAL;
  int k;
  double eff;
  XF_GUARD(xf_noise_gaussian_grid(sigma, &k, &eff));
  if (!isfinite(sensitivity) || sensitivity < 0 || (sensitivity == 0 && n == 0)) return XF_ERANGE;
  /* Each rounding below moves away from zero, so *z_eff is never above the
   * exact sigma_eff / (sensitivity + sqrt(n) step). */
  double grown = nextafter(sqrt((double)n), INFINITY) * ldexp(1.0, -k); /* exact scaling */
  double denom = nextafter(sensitivity + grown, INFINITY);
  if (!(denom > 0) || !isfinite(denom)) return XF_ERANGE;
  double z = nextafter(eff / denom, 0);
  if (!isfinite(z)) return XF_ERANGE;
  *z_eff = z;
  return XF_OK;
}

/* The checks shared by the Gaussian on a grid, sequential and parallel: the
 * grid of sigma, and every input within range, before anything is written. */
static xf_err xf__range_check(const float *out, size_t n, int k) {
  /* |out[i]| 2^k <= 2^RANGE exactly when |out[i]| <= 2^(RANGE - k), a
   * normal float for every k of the sigma range (|RANGE - k| <= 86); a NaN or
   * an infinity fails the comparison. One branch-free pass the compiler
   * vectorizes, before anything is drawn or written. */
  const float limit = ldexpf(1.0f, XF_NOISE_GRID_RANGE_LOG2 - k);
  /* On the bits: |x| <= limit for a positive normal limit is (bits of x
   * without the sign) <= (bits of limit), and NaNs and infinities sort
   * above every finite float. In blocks of 16, a loop of known length that
   * the compiler vectorizes at -O2. */
  uint32_t lim;
  memcpy(&lim, &limit, 4);
  uint32_t bad = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t u[16];
    memcpy(u, out + i, sizeof(u));
    for (int j = 0; j < 16; j++) bad |= (u[j] & 0x7fffffffu) > lim;
  }
  for (; i < n; i++) bad |= !(fabsf(out[i]) <= limit);
  return bad ? XF_ERANGE : XF_OK;
}

static xf_err xf__gaussian_vec_check(xf_noise *g, double sigma, const float *out, size_t n,
                                     int *k, uint64_t *s) {
  if (!g || (!out && n > 0)) return XF_EINVAL;
  XF_GUARD(xf__grid(sigma, k, s));
  return xf__range_check(out, n, *k);
}

/* The sampler of the Gaussian on a grid: N_Z(0, s^2) for an integer s in
 * [2^14, 2^15], within XF_NOISE_GRID_TV of it in total variation per draw
 * (docs/privacy-noise.md, "The grid sampler", has the argument in full).
 *
 * One draw is y = x1 + k x2 with x1, x2 independent draws of a base law
 * N_Z(0, s0^2), s0^2 = s^2 / (1 + k^2), and k the largest integer with
 * 2 (1 + k^2) <= s. Then y has variance s^2, and by Poisson summation its
 * law is within 2.0001 exp(-2 pi^2 tau^2) of N_Z(0, s^2) with tau = s / (1 +
 * k^2) >= 2: below 2^-113 (the convolution bound of Micciancio and Walter
 * 2017 and Peikert 2010, worked out for this case in the docs).
 *
 * The base law is read off a cumulative table (CDT) of 128-bit fixed-point
 * probabilities on [-t, t], s0 in [181, 259] and t about 13.4 s0, so the
 * mass cut off is below 2^-124. The table is computed once per s in binary128
 * (__float128, correctly rounded by libgcc) with an error bound that is
 * computed with it and checked (xf__grid_table_build). A draw takes 16 bits
 * U_hi of a uniform U in [0, 1) and looks them up in a guide of 2^16 cells:
 * a cell that no table entry cuts gives the value at once; otherwise (about
 * 3% of draws) the next 48 bits, and on a tie the 64 after, are compared
 * with the entries from the cell's first one. Bits are drawn only as needed,
 * each once, so U is uniform. Not constant-time: the guide lookup's address
 * and the slow path depend on the value drawn (see "Limitations"). */
#define XF__GUIDE_BITS 16
#define XF__GUIDE ((size_t)1 << XF__GUIDE_BITS)
#define XF__IMPURE 0x8000u /* the guide cell contains a table boundary */

typedef __float128 xf__f128;

typedef struct xf__grid_table {
  uint64_t s;  /* the law drawn: N_Z(0, s^2) */
  int64_t k;   /* y = x1 + k x2 */
  int64_t t;   /* base support [-t, t]; 2t < XF__IMPURE */
  double tv;   /* bound on the total variation of one y from N_Z(0, s^2) */
  /* First entry above the cell's low end, | XF__IMPURE; two cells of zero
   * padding after the last so that a 32-bit gather of the last stays inside. */
  uint16_t guide[XF__GUIDE + 2];
  uint64_t *hi, *lo; /* 2t cumulative probabilities C_i = P(x <= i - t) 2^128, words */
} xf__grid_table;

static void xf__grid_table_free(xf__grid_table *t) { xf_free(t); }

/* 2^e as a binary128, for |e| < 16384. */
static xf__f128 xf__pow2q(int e) {
  xf__f128 r = 1, b = e < 0 ? (xf__f128)0.5 : 2;
  for (int i = e < 0 ? -e : e; i; i--) r *= b;
  return r;
}

/* The table for s, with its bound. Error analysis (u = 2^-113, the unit
 * roundoff of binary128; first-order terms, the second-order ones are below
 * 2^-80 relative of them):
 *  - h = (1 + k^2) / (2 s^2) has one rounding; E = exp(-h) by Horner's rule
 *    on its Taylor series to degree 12 (truncation below h^13 / 13! <
 *    2^-230, h <= 2^-16), so E is within 2u relative (every rounding inside
 *    is scaled by h), and E^2 within 5u;
 *  - f_j = E^(2j - 1) by f_(j+1) = f_j E^2: within 6j u; w_j = exp(-j^2 h)
 *    by w_j = w_(j-1) f_j, w_0 = 1: within a_j = (3 j^2 + 4 j) u;
 *  - Z = w_0 + 2 sum w_j, summed smallest first: within sum p_j a_j + (t +
 *    2) u, and p_j = w_j / Z within a_j + that + u;
 *  - P_j = floor(2^128 p_j) for j != 0 loses under 2^-128 each, and P_0 =
 *    2^128 - sum of the others takes every error of the others and the tail.
 * So TV(table, N_Z(0, s0^2)) <= sum_(j != 0) |q_j - p_j| + tail <= 2 sum p_j
 * a_j + (t + 3) u + 2 t 2^-128 + 2 tail, computed below in double with a
 * margin, and the draw's bound is twice that plus the convolution's. */
static xf_err xf__grid_table_build(uint64_t s, xf__grid_table **out) {
  uint64_t k = xf__isqrt(s / 2 - 1); /* 1 + k^2 <= s / 2 */
  uint64_t c = 1 + k * k;
  double s0 = (double)s / sqrt((double)c);
  int64_t t = (int64_t)ceil(s0 * sqrt(260 * log(2.0))) + 1; /* exp(-t^2 / (2 s0^2)) < 2^-130 */
  if (2 * t >= (int64_t)XF__IMPURE) return XF_EINTERNAL;
  xf__grid_table *tb = xf_malloc(sizeof(*tb) + (size_t)(4 * t) * sizeof(uint64_t));
  if (!tb) return XF_ENOMEM;
  tb->s = s;
  tb->k = (int64_t)k;
  tb->hi = (uint64_t *)(tb + 1);
  tb->lo = tb->hi + 2 * t;
  xf__u128 *p = xf_mallocarray((size_t)t + 1, sizeof(*p));
  xf__f128 *w = xf_mallocarray((size_t)t + 1, sizeof(*w));
  if (!p || !w) {
    xf_free(p);
    xf_free(w);
    xf_free(tb);
    return XF_ENOMEM;
  }
  const xf__f128 h = (xf__f128)c / (xf__f128)(2 * s * s);
  xf__f128 e = 1;
  for (int i = 12; i >= 1; i--) e = 1 - h / i * e;
  const xf__f128 e2 = e * e;
  xf__f128 f = e, z = 0;
  w[0] = 1;
  for (int64_t j = 1; j <= t; j++) {
    w[j] = w[j - 1] * f;
    f *= e2;
  }
  for (int64_t j = t; j >= 1; j--) z += w[j];
  z = 2 * z + 1;
  const xf__f128 scale = xf__pow2q(128);
  xf__u128 rest = 0; /* sum of P_j over j != 0, below 2^128 */
  double moment = 0; /* sum p_j a_j / u over j >= 1, one side */
  for (int64_t j = 1; j <= t; j++) {
    p[j] = (xf__u128)(w[j] / z * scale);
    rest += 2 * p[j];
    moment += (double)(w[j] / z) * (3.0 * (double)j * (double)j + 4.0 * (double)j);
  }
  p[0] = 0 - rest;
  int64_t cut = t; /* the table ends at the last value of positive mass */
  while (cut > 0 && p[cut] == 0) cut--;
  xf__u128 cum = 0;
  for (int64_t i = -cut; i < cut; i++) {
    cum += p[i < 0 ? -i : i];
    tb->hi[i + cut] = (uint64_t)(cum >> 64);
    tb->lo[i + cut] = (uint64_t)cum;
  }
  tb->t = cut;
  /* The guide: for cell g, [g 2^112, (g + 1) 2^112), the number of entries
   * at or below its low end, and whether an entry falls inside it. */
  size_t idx = 0, n = (size_t)(2 * cut);
  for (size_t g = 0; g < XF__GUIDE; g++) {
    xf__u128 low = (xf__u128)g << (128 - XF__GUIDE_BITS);
    while (idx < n && (((xf__u128)tb->hi[idx] << 64) | tb->lo[idx]) <= low) idx++;
    bool pure = idx == n || (tb->hi[idx] >> (64 - XF__GUIDE_BITS)) > g;
    tb->guide[g] = (uint16_t)(idx | (pure ? 0 : XF__IMPURE));
  }
  xf_free(p);
  xf_free(w);
  const double u = 0x1p-113;
  double tail = 2 * exp(-(double)((t + 1) * (t + 1)) * (double)c / (double)(2 * s * s)) /
                (1 - exp(-2.0 * (double)(t + 1) * (double)c / (double)(2 * s * s)));
  double base = 1.01 * (2 * (2 * moment) * u + (double)(t + 3) * u + 2.0 * (double)t * 0x1p-128 +
                        2 * tail);
  double tau = (double)s / (double)c;
  double conv = 2.0001 * exp(-2 * 9.8696044010893586 * tau * tau) /* pi^2 */;
  tb->tv = 2 * base + 1.01 * conv;
  if (!(tb->tv <= XF_NOISE_GRID_TV)) { /* never for s in [2^14, 2^15]; tested */
    xf_free(tb);
    return XF_EINTERNAL;
  }
  *out = tb;
  return XF_OK;
}

/* g's table for s, made when g has none for it. XF_ENOMEM leaves g's old
 * table in place. */
static xf_err xf__grid_table_for(xf_noise *g, uint64_t s, const xf__grid_table **out) {
  if (!g->table || g->table->s != s) {
    xf__grid_table *t;
    XF_GUARD(xf__grid_table_build(s, &t));
    xf__grid_table_free(g->table);
    g->table = t;
  }
  *out = g->table;
  return XF_OK;
}

/* The entry search of a draw whose 16-bit prefix fell in a cut cell,
 * starting at the cell's first candidate: U = prefix . 48 bits . 64 bits,
 * the last word drawn only on a tie of the first 64 bits. */
static int64_t xf__grid_base_slow(xf_noise *g, const xf__grid_table *tb, uint64_t prefix,
                                  size_t idx) {
  const uint64_t hi = (prefix << (64 - XF__GUIDE_BITS)) | (xf__u64(g) >> XF__GUIDE_BITS);
  uint64_t lo = 0;
  bool have_lo = false;
  const size_t n = (size_t)(2 * tb->t);
  for (; idx < n; idx++) {
    if (tb->hi[idx] > hi) break;
    if (tb->hi[idx] == hi) {
      if (!have_lo) {
        lo = xf__u64(g);
        have_lo = true;
      }
      if (tb->lo[idx] > lo) break;
    }
  }
  return (int64_t)idx - tb->t;
}

void xf_noise_use_table(xf_noise *g, bool on) {
  if (g) g->use_table = on;
}

void xf_noise_use_simd(xf_noise *g, bool on) {
  if (g) g->no_simd = !on;
}

/* The exact noising loop of the Gaussian on a grid over out[0..n), once
 * checked: each value's discrete Gaussian by Karney's Algorithm D. */
/* With y_out, each value's integer noise goes there (as a double, exact:
 * |y| < 2^31) and out is not read; so in the other fills. */
static xf_err xf__exact_fill(xf_noise *g, const xf__dgauss *d, int k, float *out, double *y_out,
                             size_t n) {
  const double scale = ldexp(1.0, k);
  const float unscale = ldexpf(1.0f, -k); /* a normal float: |k| <= 75 */
  for (size_t i = 0; i < n; i++) {
    int64_t y;
    XF_GUARD(xf__discrete_gaussian(g, d, &y));
    if (y_out) {
      y_out[i] = (double)y;
      continue;
    }
    /* The input in grid steps, rounded to nearest (ties to even). */
    int64_t x = (int64_t)nearbyint((double)out[i] * scale);
    /* |x + y| < 2^40 + 2^31: exact; the one rounding is int64 -> float. */
    out[i] = (float)(x + y) * unscale;
  }
  return XF_OK;
}

/* The table's noising loop of the Gaussian on a grid over out[0..n), once
 * checked, in groups of XF__GROUP values. A group of m values first reads
 * ceil(m / 2) words; value j of the group takes the 32 bits at 32 (j mod 2)
 * of word j / 2, x1's cell from their low 16 bits and x2's from the high 16.
 * Draws whose guide cell is cut then finish in value order (x1 before x2),
 * each drawing its further words from the stream as it needs them. The
 * AVX-512 loop and the portable one follow this order exactly, so the
 * output is the same bits on every CPU. */
#define XF__GROUP 16

typedef struct xf__fill {
  const xf__grid_table *tb;
  double scale;  /* 2^k */
  float unscale; /* 2^-k, a normal float: |k| <= 75 */
} xf__fill;

static const double xf__round_magic = 0x1.8p52; /* v + 1.5 2^52 - 1.5 2^52 rounds |v| < 2^51 */

/* One base draw of a cell read from the guide: its entry, or the search
 * the cut cell needs. */
static inline int64_t xf__grid_finish(xf_noise *g, const xf__grid_table *tb, uint64_t prefix,
                                      unsigned v) {
  if (__builtin_expect((v & XF__IMPURE) != 0, 0))
    return xf__grid_base_slow(g, tb, prefix, v & (XF__IMPURE - 1));
  return (int64_t)v - tb->t;
}

/* The value x in grid steps (rounded to nearest, ties to even, as nearbyint
 * in the default rounding mode: exact, |v| <= 2^40) plus the noise y, as
 * float: |x + y| < 2^40 + 2^31 is exact in the sum, and the one rounding is
 * the correctly rounded conversion to float; scaling by 2^-k is exact for
 * sigma within range, so the result is a fixed function of the exact
 * integer x + y. */
static inline float xf__grid_add(const xf__fill *f, float in, int64_t y) {
  double v = (double)in * f->scale;
  int64_t x = (int64_t)((v + xf__round_magic) - xf__round_magic);
  return (float)(x + y) * f->unscale;
}

/* A group of m <= XF__GROUP values, the portable way. */
static void xf__fill_group(xf_noise *g, const xf__fill *f, float *out, double *y_out, size_t m) {
  const xf__grid_table *tb = f->tb;
  uint32_t lane[XF__GROUP];
  for (size_t w = 0; w < (m + 1) / 2; w++) {
    uint64_t word = xf__u64(g);
    lane[2 * w] = (uint32_t)word;
    lane[2 * w + 1] = (uint32_t)(word >> 32);
  }
  for (size_t j = 0; j < m; j++) {
    uint64_t p1 = lane[j] & 0xffff, p2 = lane[j] >> 16;
    int64_t x1 = xf__grid_finish(g, tb, p1, tb->guide[p1]);
    int64_t x2 = xf__grid_finish(g, tb, p2, tb->guide[p2]);
    if (y_out) y_out[j] = (double)(x1 + tb->k * x2);
    else out[j] = xf__grid_add(f, out[j], x1 + tb->k * x2);
  }
  sodium_memzero(lane, sizeof(lane));
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define XF__HAVE_AVX512 1

/* xf__grid_add on 16 values: in rounded to the grid in double lanes, plus
 * the noise (y_lo for the first 8, y_hi for the rest), converted to float
 * once and scaled back. */
__attribute__((target("avx512f"), optimize("fp-contract=off"))) static inline __m512
xf__grid_add16(__m512 in, __m512d y_lo, __m512d y_hi, __m512d scale, __m512d magic,
               __m512 unscale) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(in));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(in), 1)));
  lo = _mm512_add_pd(_mm512_sub_pd(_mm512_add_pd(_mm512_mul_pd(lo, scale), magic), magic), y_lo);
  hi = _mm512_add_pd(_mm512_sub_pd(_mm512_add_pd(_mm512_mul_pd(hi, scale), magic), magic), y_hi);
  __m512 r = _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(lo))),
      _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
  return _mm512_mul_ps(r, unscale);
}

/* Whole groups of 16 values with AVX-512: both cells of every value
 * gathered from the guide at once, the cut ones finished in order as
 * above, the rounding and the sum in double lanes (the same operations as
 * xf__grid_add: 2^k scaling is exact, so contracting it into an FMA could
 * not change a bit, and contraction is off anyway). Returns the values
 * done, a multiple of 16. */
__attribute__((target("avx512f"), optimize("fp-contract=off"))) static size_t
xf__fill_avx512(xf_noise *g, const xf__fill *f, float *out, double *y_out, size_t n) {
  const xf__grid_table *tb = f->tb;
  const __m512i low16 = _mm512_set1_epi32(0xffff), impure = _mm512_set1_epi32(XF__IMPURE);
  const __m512i t = _mm512_set1_epi32((int)tb->t), k = _mm512_set1_epi32((int)tb->k);
  const __m512d scale = _mm512_set1_pd(f->scale), magic = _mm512_set1_pd(xf__round_magic);
  const __m512 unscale = _mm512_set1_ps(f->unscale);
  uint64_t words[XF__GROUP / 2];
  int32_t y[XF__GROUP];
  uint32_t c1[XF__GROUP], c2[XF__GROUP], q1[XF__GROUP], q2[XF__GROUP];
  size_t i = 0;
  for (; i + XF__GROUP <= n; i += XF__GROUP) {
    __m512i lane;
    if (g->pos + XF__GROUP / 2 <= XF__WORDS) {
      lane = _mm512_loadu_si512((const void *)&g->block[g->pos]);
      g->pos += XF__GROUP / 2;
    } else {
      for (size_t w = 0; w < XF__GROUP / 2; w++) words[w] = xf__u64(g);
      lane = _mm512_loadu_si512((const void *)words);
    }
    __m512i p1 = _mm512_and_si512(lane, low16), p2 = _mm512_srli_epi32(lane, 16);
    __m512i g1 = _mm512_and_si512(_mm512_i32gather_epi32(p1, (const void *)tb->guide, 2), low16);
    __m512i g2 = _mm512_and_si512(_mm512_i32gather_epi32(p2, (const void *)tb->guide, 2), low16);
    __m512i yv = _mm512_add_epi32(_mm512_sub_epi32(g1, t),
                                  _mm512_mullo_epi32(k, _mm512_sub_epi32(g2, t)));
    __mmask16 cut = _mm512_test_epi32_mask(_mm512_or_si512(g1, g2), impure);
    if (__builtin_expect(cut != 0, 0)) {
      _mm512_storeu_si512((void *)y, yv);
      _mm512_storeu_si512((void *)c1, g1);
      _mm512_storeu_si512((void *)c2, g2);
      _mm512_storeu_si512((void *)q1, p1);
      _mm512_storeu_si512((void *)q2, p2);
      for (unsigned m = cut; m; m &= m - 1) {
        unsigned j = (unsigned)__builtin_ctz(m);
        int64_t x1 = xf__grid_finish(g, tb, q1[j], c1[j]);
        int64_t x2 = xf__grid_finish(g, tb, q2[j], c2[j]);
        y[j] = (int32_t)(x1 + tb->k * x2);
      }
      yv = _mm512_loadu_si512((const void *)y);
    }
    if (y_out) {
      _mm512_storeu_pd(y_out + i, _mm512_cvtepi32_pd(_mm512_castsi512_si256(yv)));
      _mm512_storeu_pd(y_out + i + 8, _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(yv, 1)));
      continue;
    }
    _mm512_storeu_ps(out + i, xf__grid_add16(_mm512_loadu_ps(out + i),
                                             _mm512_cvtepi32_pd(_mm512_castsi512_si256(yv)),
                                             _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(yv, 1)),
                                             scale, magic, unscale));
  }
  sodium_memzero(words, sizeof(words));
  sodium_memzero(y, sizeof(y));
  sodium_memzero(c1, sizeof(c1));
  sodium_memzero(c2, sizeof(c2));
  sodium_memzero(q1, sizeof(q1));
  sodium_memzero(q2, sizeof(q2));
  return i;
}

static bool xf__avx512(void) {
  static int have = -1;
  if (have < 0) have = __builtin_cpu_supports("avx512f") ? 1 : 0;
  return have == 1;
}

/* The add of noise drawn ahead, 16 values a step, each y wiped as it is
 * used: the operations of the portable loop in xf_noise_pending_apply.
 * Returns the values done, a multiple of 16. */
__attribute__((target("avx512f"), optimize("fp-contract=off"))) static size_t
xf__apply_avx512(float *out, double *y, size_t n, double scale_d, float unscale_f) {
  const __m512d scale = _mm512_set1_pd(scale_d), magic = _mm512_set1_pd(xf__round_magic);
  const __m512 unscale = _mm512_set1_ps(unscale_f);
  const __m512d zero = _mm512_setzero_pd();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512d y_lo = _mm512_loadu_pd(y + i), y_hi = _mm512_loadu_pd(y + i + 8);
    _mm512_storeu_pd(y + i, zero);
    _mm512_storeu_pd(y + i + 8, zero);
    _mm512_storeu_ps(out + i,
                     xf__grid_add16(_mm512_loadu_ps(out + i), y_lo, y_hi, scale, magic, unscale));
  }
  return i;
}
#endif

static void xf__gaussian_fill(xf_noise *g, const xf__grid_table *tb, int k, float *out,
                              double *y_out, size_t n) {
  const xf__fill f = {.tb = tb, .scale = ldexp(1.0, k), .unscale = ldexpf(1.0f, -k)};
  size_t i = 0;
#ifdef XF__HAVE_AVX512
  if (!g->no_simd && xf__avx512()) i = xf__fill_avx512(g, &f, out, y_out, n);
#endif
  for (; i < n; i += XF__GROUP)
    xf__fill_group(g, &f, out ? out + i : NULL, y_out ? y_out + i : NULL,
                   n - i < XF__GROUP ? n - i : XF__GROUP);
}

xf_err xf_noise_gaussian_vec(xf_noise *g, double sigma, float *out, size_t n) {
  int k;
  uint64_t s;
  XF_GUARD(xf__gaussian_vec_check(g, sigma, out, n, &k, &s));
  if (!g->use_table) {
    xf__dgauss d = xf__dgauss_prepare(s * s, 1);
    xf_err rc = xf__exact_fill(g, &d, k, out, NULL, n);
    xf__erase(g);
    return rc;
  }
  const xf__grid_table *tb;
  XF_GUARD(xf__grid_table_for(g, s, &tb));
  xf__gaussian_fill(g, tb, k, out, NULL, n);
  xf__erase(g);
  return XF_OK;
}

/* The parallel Gaussian: out is cut into chunks of XF__CHUNK values, chunk c
 * noised by a child generator keyed with the c-th 32 bytes drawn from g.
 * Chunks, not threads, own keys, so the output does not depend on how many
 * threads run or in which order they take chunks. */
#define XF__CHUNK ((size_t)1 << 12)
#define XF__THREADS_MAX 256

typedef struct xf__par_job {
  float *out;      /* noised in place, or */
  double *y;       /* when not NULL: each value's integer noise, out untouched */
  size_t n, chunks;
  int k;
  const xf__grid_table *table; /* the parent's, read-only while the job runs; NULL: exact */
  bool no_simd;                /* the parent's xf_noise_use_simd */
  xf__dgauss d;                /* the exact sampler's, when table is NULL */
  _Atomic int rc;              /* the exact sampler's first failure, XF_OK when none */
  uint8_t *keys; /* chunks * XF__KEY bytes, sodium_malloc'ed; each wiped once used */
  _Atomic size_t next; /* next chunk to take */
} xf__par_job;

typedef struct xf__par_worker {
  xf__par_job *job;
  xf_noise *child; /* sodium_malloc'ed; rekeyed for each chunk */
} xf__par_worker;

/* The child keys of a parallel vector: the next chunks * 32 bytes of g's
 * stream, the words read wiped from g. */
static void xf__chunk_keys(xf_noise *g, uint8_t *keys, size_t chunks) {
  for (size_t i = 0; i < chunks * XF__KEY_WORDS; i++) {
    uint64_t v = xf__u64(g);
    for (int b = 0; b < 8; b++) keys[i * 8 + (size_t)b] = (uint8_t)(v >> (8 * b));
  }
  xf__erase(g);
}

static void *xf__par_run(void *arg) {
  xf__par_worker *w = arg;
  xf__par_job *job = w->job;
  xf_noise *c = w->child;
  for (;;) {
    size_t i = atomic_fetch_add(&job->next, 1);
    if (i >= job->chunks) break;
    memcpy(c->key, job->keys + i * XF__KEY, XF__KEY);
    sodium_memzero(job->keys + i * XF__KEY, XF__KEY);
    sodium_memzero(c->block, XF__BLOCK);
    c->pos = c->clean = XF__WORDS;
    c->pool = 0;
    c->pool_bits = 0;
    c->table = NULL;
    c->no_simd = job->no_simd;
    size_t lo = i * XF__CHUNK, len = job->n - lo < XF__CHUNK ? job->n - lo : XF__CHUNK;
    if (job->table) {
      xf__gaussian_fill(c, job->table, job->k, job->out ? job->out + lo : NULL,
                        job->y ? job->y + lo : NULL, len);
      continue;
    }
    xf_err rc = xf__exact_fill(c, &job->d, job->k, job->out ? job->out + lo : NULL,
                               job->y ? job->y + lo : NULL, len);
    if (rc != XF_OK) {
      int ok = XF_OK;
      atomic_compare_exchange_strong(&job->rc, &ok, (int)rc);
    }
  }
  return NULL;
}

xf_err xf_noise_gaussian_vec_par(xf_noise *g, double sigma, float *out, size_t n, int threads) {
  int k;
  uint64_t s;
  XF_GUARD(xf__gaussian_vec_check(g, sigma, out, n, &k, &s));
  const xf__grid_table *table = NULL;
  if (g->use_table) XF_GUARD(xf__grid_table_for(g, s, &table));
  size_t chunks = (n + XF__CHUNK - 1) / XF__CHUNK;
  size_t helpers = threads <= 1 ? 0 : (size_t)(threads > XF__THREADS_MAX ? XF__THREADS_MAX : threads) - 1;
  if (helpers > (chunks > 0 ? chunks - 1 : 0)) helpers = chunks > 0 ? chunks - 1 : 0;
  xf__par_job *job = sodium_malloc(sizeof(*job));
  uint8_t *keys = chunks ? sodium_malloc(chunks * XF__KEY) : NULL;
  xf_noise *children = sodium_malloc((helpers + 1) * sizeof(xf_noise));
  xf__par_worker *workers = xf_mallocarray(helpers + 1, sizeof(*workers));
  pthread_t *tids = helpers ? xf_mallocarray(helpers, sizeof(*tids)) : NULL;
  xf_err rc = XF_OK;
  if (!job || (chunks && !keys) || !children || !workers || (helpers && !tids)) {
    rc = XF_ENOMEM;
    goto out;
  }
  xf__chunk_keys(g, keys, chunks);
  job->out = out;
  job->y = NULL;
  job->n = n;
  job->chunks = chunks;
  job->k = k;
  job->table = table;
  job->no_simd = g->no_simd;
  if (!table) job->d = xf__dgauss_prepare(s * s, 1);
  job->keys = keys;
  atomic_init(&job->next, 0);
  atomic_init(&job->rc, XF_OK);
  for (size_t t = 0; t <= helpers; t++) workers[t] = (xf__par_worker){job, &children[t]};
  /* The calling thread works too; a helper that cannot start leaves its
   * chunks to the others. */
  size_t started = 0;
  for (; started < helpers; started++)
    if (pthread_create(&tids[started], NULL, xf__par_run, &workers[started + 1]) != 0) break;
  (void)xf__par_run(&workers[0]);
  for (size_t t = 0; t < started; t++) pthread_join(tids[t], NULL);
  rc = (xf_err)atomic_load(&job->rc);
out:
  xf_free(tids);
  xf_free(workers);
  if (children) sodium_free(children); /* wipes the children's keys and keystream */
  if (keys) sodium_free(keys);
  if (job) sodium_free(job);
  return rc;
}

/* ---- noise drawn ahead -------------------------------------------------------------------- */

#define XF__DRAWERS 2 /* threads that may draw one pending vector at once */

struct xf_noise_pending {
  xf__grid_table *table; /* its own (NULL: the exact sampler) */
  xf__par_job job;       /* the vector's chunks, taken by the drawers in turn; its
                            y (job.n values of integer noise) and keys are
                            sodium_malloc'ed */
  _Atomic int drawers;   /* draw calls since the last key */
  bool keyed;
  xf_noise *child;       /* XF__DRAWERS generators, sodium_malloc'ed */
};

void xf_noise_pending_free(xf_noise_pending *p) {
  if (!p) return;
  xf__grid_table_free(p->table);
  if (p->job.keys) sodium_free(p->job.keys);
  if (p->job.y) sodium_free(p->job.y);
  if (p->child) sodium_free(p->child);
  xf_free(p);
}

xf_err xf_noise_pending_new(const xf_noise *g, double sigma, size_t n, xf_noise_pending **out) {
  *out = NULL;
  if (!g) return XF_EINVAL;
  int k;
  uint64_t s;
  XF_GUARD(xf__grid(sigma, &k, &s));
  xf_noise_pending *p = xf_calloc(1, sizeof(*p));
  if (!p) return XF_ENOMEM;
  xf__par_job *j = &p->job;
  j->n = n;
  j->chunks = (n + XF__CHUNK - 1) / XF__CHUNK;
  j->k = k;
  j->no_simd = g->no_simd;
  xf_err rc = XF_OK;
  if (g->use_table) rc = xf__grid_table_build(s, &p->table);
  else j->d = xf__dgauss_prepare(s * s, 1);
  j->table = p->table;
  atomic_init(&j->next, j->chunks); /* nothing to draw until keyed */
  atomic_init(&j->rc, XF_OK);
  atomic_init(&p->drawers, 0);
  if (rc == XF_OK) {
    j->keys = j->chunks ? sodium_malloc(j->chunks * XF__KEY) : NULL;
    j->y = n ? sodium_malloc(n * sizeof(double)) : NULL;
    p->child = sodium_malloc(XF__DRAWERS * sizeof(xf_noise));
    if ((j->chunks && !j->keys) || (n && !j->y) || !p->child) rc = XF_ENOMEM;
  }
  if (rc != XF_OK) {
    xf_noise_pending_free(p);
    return rc;
  }
  *out = p;
  return XF_OK;
}

xf_err xf_noise_pending_key(xf_noise_pending *p, xf_noise *g) {
  if (!p || !g) return XF_EINVAL;
  xf__par_job *j = &p->job;
  xf__chunk_keys(g, j->keys, j->chunks); /* as xf_noise_gaussian_vec_par takes them */
  atomic_store(&j->rc, XF_OK);
  atomic_store(&p->drawers, 0);
  atomic_store(&j->next, 0);
  p->keyed = true;
  return XF_OK;
}

void xf_noise_pending_draw(xf_noise_pending *p) {
  if (!p || !p->keyed) return;
  int who = atomic_fetch_add(&p->drawers, 1);
  if (who >= XF__DRAWERS) return;
  xf__par_worker w = {&p->job, &p->child[who]};
  (void)xf__par_run(&w); /* takes chunks until none is left; wipes each key it uses */
  sodium_memzero(&p->child[who], sizeof(xf_noise));
}

xf_err xf_noise_pending_apply(xf_noise_pending *p, float *out) {
  if (!p) return XF_EINVAL;
  xf__par_job *j = &p->job;
  xf_err rc = (!out && j->n > 0) || !p->keyed || atomic_load(&j->next) < j->chunks
                  ? XF_EINVAL
                  : (xf_err)atomic_load(&j->rc);
  if (rc == XF_OK) rc = xf__range_check(out, j->n, j->k); /* as xf_noise_gaussian_vec's */
  size_t done = 0;
  if (rc == XF_OK) {
    const double scale = ldexp(1.0, j->k);
    const float unscale = ldexpf(1.0f, -j->k);
#ifdef XF__HAVE_AVX512
    if (!j->no_simd && xf__avx512()) done = xf__apply_avx512(out, j->y, j->n, scale, unscale);
#endif
    for (size_t i = done; i < j->n; i++) {
      double v = (double)out[i] * scale;
      double x = (v + xf__round_magic) - xf__round_magic;
      /* x and y are integers below 2^41 in magnitude: the sum is exact, and
       * the one rounding is to float, as in xf__grid_add. */
      out[i] = (float)(x + j->y[i]) * unscale;
      j->y[i] = 0; /* wiped as it is used */
    }
    done = j->n;
  }
  if (j->y && done < j->n) sodium_memzero(j->y, j->n * sizeof(double));
  if (j->keys && p->keyed) sodium_memzero(j->keys, j->chunks * XF__KEY); /* any not drawn */
  p->keyed = false;
  return rc;
}
