/* SPDX-License-Identifier: Apache-2.0 */
/* Speed of the noise samplers against the randomness they are built on,
 * measured in the same process. Prints one JSON object for bench/noise.sh.
 *
 * Measured, each the best of --passes timed passes after a warm-up:
 *  - randombytes_buf (the system CSPRNG that keys production generators),
 *    OpenSSL's ChaCha20 as the generator makes its keystream (a cipher
 *    context keyed, used and freed for each 4 KiB block) and libsodium's
 *    crypto_stream_chacha20 (the same bytes), in bytes/s, over 4 KiB calls;
 *  - xf_noise_gaussian_vec on --n floats (sigma 1: 2^14 grid steps, the
 *    grid sampler), one thread, and xf_noise_gaussian_vec_par on all online
 *    CPUs; the sampler's table is made in the warm-up pass;
 *  - xf_noise_discrete_gaussian_vec on --n integers (sigma^2 = 2^28, the
 *    same integer law as the Gaussian on a grid at sigma = 2^14 steps, drawn
 *    exactly by Karney's rejection sampler).
 * The ratios divide samples/s by the 64-bit words/s (bytes/s / 8) each
 * source can deliver: how many exact samples cost as much time as one
 * 64-bit word of the system CSPRNG or of the generator's ChaCha20.
 *
 * usage: xfed-bench-noise [--n N] [--passes P] */
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "bench/bench_util.h"
#include "privacy/noise.h"

#define STREAM_BYTES ((size_t)64 << 20)
#define CALL_BYTES 4096

enum { SRC_CHACHA_SODIUM, SRC_CSPRNG, SRC_CHACHA_OPENSSL };

/* One 4 KiB block of OpenSSL's ChaCha20 keystream, as privacy/noise.c makes it. */
static void openssl_block(EVP_CIPHER *c, unsigned char *buf, const unsigned char *key) {
  static const unsigned char iv[16];
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  memset(buf, 0, CALL_BYTES);
  if (!ctx || EVP_EncryptInit_ex2(ctx, c, key, iv, NULL) != 1 ||
      EVP_EncryptUpdate(ctx, buf, &len, buf, CALL_BYTES) != 1) {
    fprintf(stderr, "xfed-bench-noise: OpenSSL's ChaCha20 failed\n");
    exit(1);
  }
  EVP_CIPHER_CTX_free(ctx);
}

/* Bytes/s of the source, best pass. */
static double stream_rate(int src, int passes) {
  const int csprng = src == SRC_CSPRNG;
  EVP_CIPHER *cipher = src == SRC_CHACHA_OPENSSL ? EVP_CIPHER_fetch(NULL, "ChaCha20", NULL) : NULL;
  if (src == SRC_CHACHA_OPENSSL && !cipher) return 0;
  static unsigned char buf[CALL_BYTES];
  unsigned char key[crypto_stream_chacha20_KEYBYTES] = {1};
  unsigned char nonce[crypto_stream_chacha20_NONCEBYTES] = {0};
  size_t bytes = csprng ? STREAM_BYTES / 8 : STREAM_BYTES; /* the CSPRNG is slower */
  double best = 0;
  for (int p = 0; p <= passes; p++) {
    double t = xf_bench_now();
    for (size_t done = 0; done < bytes; done += CALL_BYTES) {
      if (csprng)
        randombytes_buf(buf, CALL_BYTES);
      else if (cipher)
        openssl_block(cipher, buf, key);
      else
        crypto_stream_chacha20(buf, CALL_BYTES, nonce, key);
    }
    double rate = (double)bytes / (xf_bench_now() - t);
    if (p > 0 && rate > best) best = rate; /* pass 0 warms up */
  }
  sodium_memzero(buf, sizeof(buf));
  EVP_CIPHER_free(cipher);
  return best;
}

typedef enum { VEC, VEC_PAR, DISCRETE } which;

static double sample_rate(which w, xf_noise *g, float *v, int64_t *x, size_t n, int threads,
                          int passes) {
  double best = 0;
  for (int p = 0; p <= passes; p++) {
    memset(v, 0, n * sizeof(float));
    double t = xf_bench_now();
    xf_err rc = w == VEC       ? xf_noise_gaussian_vec(g, 1.0, v, n)
                : w == VEC_PAR ? xf_noise_gaussian_vec_par(g, 1.0, v, n, threads)
                               : xf_noise_discrete_gaussian_vec(g, 1u << 28, 1, x, n);
    double dt = xf_bench_now() - t;
    if (rc != XF_OK) {
      fprintf(stderr, "xfed-bench-noise: %s\n", xf_strerror(rc));
      exit(1);
    }
    if (p > 0 && n / dt > best) best = (double)n / dt;
  }
  return best;
}

int main(int argc, char **argv) {
  size_t n = 1u << 20;
  int passes = 5;
  static const struct option opts[] = {
      {"n", required_argument, NULL, 'n'}, {"passes", required_argument, NULL, 'p'}, {0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'n')
      n = strtoull(optarg, NULL, 10);
    else if (c == 'p')
      passes = atoi(optarg);
    else {
      fprintf(stderr, "usage: xfed-bench-noise [--n N] [--passes P]\n");
      return 2;
    }
  }
  if (n == 0 || passes < 1) {
    fprintf(stderr, "xfed-bench-noise: --n and --passes must be positive\n");
    return 2;
  }
  if (sodium_init() < 0) return 1;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cpus > 0 ? (int)cpus : 1;
  float *v = malloc(n * sizeof(float));
  int64_t *x = malloc(n * sizeof(int64_t));
  xf_noise *g = NULL;
  if (!v || !x || xf_noise_new_random(&g) != XF_OK) {
    fprintf(stderr, "xfed-bench-noise: out of memory\n");
    return 1;
  }
  /* The Gaussian on a grid as a job calibrated to a target epsilon draws it
   * (the table sampler); discrete_gaussian_vec is the exact sampler. */
  xf_noise_use_table(g, true);
  double csprng = stream_rate(SRC_CSPRNG, passes), chacha = stream_rate(SRC_CHACHA_OPENSSL, passes),
         sodium_chacha = stream_rate(SRC_CHACHA_SODIUM, passes);
  double vec1 = sample_rate(VEC, g, v, x, n, 1, passes);
  double vecp = sample_rate(VEC_PAR, g, v, x, n, threads, passes);
  double disc = sample_rate(DISCRETE, g, v, x, n, 1, passes);
  char model[256];
  xf_bench_cpu_model(model, sizeof(model));
  printf("{\"device\": \"%s\", \"cpus\": %d, \"n\": %zu, \"passes\": %d, "
         "\"randombytes_bps\": %.0f, \"chacha20_bps\": %.0f, \"chacha20_libsodium_bps\": %.0f, "
         "\"gaussian_vec_sps\": %.0f, \"gaussian_vec_par_sps\": %.0f, "
         "\"discrete_gaussian_vec_sps\": %.0f, "
         "\"vec_per_csprng_word\": %.4f, \"vec_per_chacha_word\": %.4f, "
         "\"par_per_csprng_word\": %.4f, \"par_per_chacha_word\": %.4f}\n",
         model, threads, n, passes, csprng, chacha, sodium_chacha, vec1, vecp, disc,
         vec1 / (csprng / 8), vec1 / (chacha / 8), vecp / (csprng / 8), vecp / (chacha / 8));
  xf_noise_free(g);
  free(v);
  free(x);
  return 0;
}
