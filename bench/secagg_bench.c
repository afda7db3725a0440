/* SPDX-License-Identifier: Apache-2.0 */
/* Speed of secure aggregation against the ChaCha20 keystream it is built
 * on, measured in the same process. Prints one JSON object for
 * bench/secagg.sh.
 *
 * Measured:
 *  - keystream: crypto_stream_chacha20_ietf in 8 KiB calls (the size the
 *    masking loop asks for), bytes/s, best of --passes;
 *  - the site pipeline on --n floats: clip (L2 norm, scale to norm <= 1),
 *    quantize to `bits` with stochastic rounding against a fixed scale
 *    (rounding bits from ChaCha20), and mask with xf_secagg_client_mask, for
 *    the complete graph of 10 sites (10 streams a value: b and 9 pairs) and
 *    for 100 sites at the default degree (35 streams), values/s, best of
 *    --passes; and the mask alone;
 *  - the aggregator: a whole round of 100 sites on --n values, 10 dropping
 *    after their shares were routed; the time of xf_secagg_server_finish
 *    (share reconstruction, mask regeneration and removal), the PRG
 *    expansions it needed, and a check that the sum is exact.
 * The ratio "of keystream" is values/s x 4 bytes x streams per value over
 * the keystream's bytes/s: the share of raw ChaCha20 speed the pipeline
 * keeps, counting only the keystream bytes it cannot avoid.
 *
 * With -s SITES it measures instead what one round of SITES sites costs
 * against a malicious aggregator over the semi-honest protocol, on vectors
 * of -n values (bench/secagg_protocol.c).
 *
 * usage: xfed-bench-secagg [-n N] [-p PASSES] [-b BITS] [-s SITES] */
#include <getopt.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "bench/secagg_protocol.h"
#include "crypto/secagg.h"

static void die(const char *what, xf_err rc, const xf_errctx *ctx) {
  fprintf(stderr, "xfed-bench-secagg: %s: %s (%s)\n", what, ctx ? ctx->msg : "", xf_strerror(rc));
  exit(1);
}
#define CHECK(expr, what)                       \
  do {                                          \
    xf_errctx ctx__;                            \
    xf_errctx_clear(&ctx__);                    \
    (void)ctx__;                                \
    xf_err rc__ = (expr);                       \
    if (rc__ != XF_OK) die(what, rc__, &ctx__); \
  } while (0)

#define CALL_BYTES 8192

static double keystream_rate(size_t n, int passes) {
  static unsigned char buf[CALL_BYTES];
  unsigned char key[32] = {1}, nonce[12] = {0};
  size_t bytes = n * 4 * 10;
  double best = 0;
  for (int p = -1; p < passes; p++) {
    double t0 = xf_bench_now();
    uint32_t ic = 0;
    for (size_t done = 0; done < bytes; done += CALL_BYTES, ic += CALL_BYTES / 64) {
      memset(buf, 0, sizeof(buf));
      crypto_stream_chacha20_ietf_xor_ic(buf, buf, CALL_BYTES, nonce, ic, key);
    }
    double rate = (double)bytes / (xf_bench_now() - t0);
    if (p >= 0 && rate > best) best = rate;
  }
  return best;
}

/* A round's clients brought to the masking phase, with `drop` sites (the
 * last ones) gone after sharing. */
typedef struct round_state {
  xf_secagg_params p;
  xf_secagg_client **c;
  xf_secagg_server *s;
} round_state;

static void round_setup(round_state *r, uint32_t n, uint32_t bits, uint64_t length, uint32_t drop) {
  r->p = (xf_secagg_params){.n = n,
                            .threshold = n / 2 + 1,
                            .bits = bits,
                            .length = length,
                            .degree = xf_secagg_default_degree(n)};
  randombytes_buf(r->p.graph_seed, sizeof(r->p.graph_seed));
  r->c = calloc(n + 1, sizeof(*r->c));
  CHECK(xf_secagg_server_new(&r->p, &r->s, &ctx__), "server");
  for (uint32_t i = 1; i <= n; i++) {
    CHECK(xf_secagg_client_new(&r->p, i, &r->c[i], &ctx__), "client");
    uint8_t a[XF_SECAGG_ADVERT_BYTES];
    xf_secagg_client_advertise(r->c[i], a);
    CHECK(xf_secagg_server_advert(r->s, i, a, &ctx__), "advert");
  }
  uint8_t *adverts = malloc((size_t)n * XF_SECAGG_ADVERT_BYTES);
  xf_secagg_server_adverts(r->s, adverts);
  size_t k = r->p.degree, *counts = calloc(n + 1, sizeof(*counts));
  xf_secagg_share_msg *msgs = malloc((size_t)n * k * sizeof(*msgs));
  for (uint32_t i = 1; i <= n; i++)
    CHECK(xf_secagg_client_share(r->c[i], adverts, msgs + (i - 1) * k, k, &counts[i], &ctx__),
          "share");
  for (uint32_t i = 1; i <= n; i++) {
    for (size_t m = 0; m < counts[i]; m++) {
      const xf_secagg_share_msg *msg = &msgs[(i - 1) * k + m];
      CHECK(xf_secagg_client_receive(r->c[msg->to], i, msg->ciphertext, &ctx__), "receive");
    }
    CHECK(xf_secagg_server_shared(r->s, i, &ctx__), "shared");
  }
  uint32_t *u2 = malloc(n * sizeof(*u2));
  size_t n_u2;
  CHECK(xf_secagg_server_routed(r->s, u2, &n_u2, &ctx__), "routed");
  for (uint32_t i = 1; i <= n - drop; i++)
    CHECK(xf_secagg_client_routed(r->c[i], u2, n_u2, &ctx__), "routed");
  free(u2);
  free(msgs);
  free(counts);
  free(adverts);
}

static void round_free(round_state *r) {
  for (uint32_t i = 1; i <= r->p.n; i++) xf_secagg_client_free(r->c[i]);
  free(r->c);
  xf_secagg_server_free(r->s);
}

/* Clip to L2 norm 1, quantize with stochastic rounding at `scale` steps
 * per unit, wrap mod 2^bits. rnd holds one 32-bit uniform per value. */
static void clip_quantize(const float *v, size_t n, uint32_t bits, double scale, uint32_t *rnd,
                          uint32_t *q) {
  double ss = 0;
  for (size_t k = 0; k < n; k++) ss += (double)v[k] * v[k];
  double norm = sqrt(ss), c = norm > 1 ? 1 / norm : 1;
  unsigned char key[32] = {7}, nonce[12] = {0};
  memset(rnd, 0, n * 4);
  crypto_stream_chacha20_ietf_xor_ic((unsigned char *)rnd, (unsigned char *)rnd, n * 4, nonce, 0,
                                     key);
  uint32_t m = bits == 32 ? UINT32_MAX : (1u << bits) - 1;
  float f = (float)(c * scale);
  for (size_t k = 0; k < n; k++) {
    float x = v[k] * f;
    float lo = floorf(x);
    int32_t i = (int32_t)lo + ((float)rnd[k] * 0x1p-32f < x - lo);
    q[k] = (uint32_t)i & m;
  }
}

int main(int argc, char **argv) {
  size_t n = 1000000;
  int passes = 3;
  uint32_t bits = 20, protocol_sites = 0;
  int opt;
  while ((opt = getopt(argc, argv, "n:p:b:s:")) != -1) {
    if (opt == 'n')
      n = strtoull(optarg, NULL, 10);
    else if (opt == 'p')
      passes = atoi(optarg);
    else if (opt == 'b')
      bits = (uint32_t)atoi(optarg);
    else if (opt == 's')
      protocol_sites = (uint32_t)atoi(optarg);
    else {
      fprintf(stderr, "usage: xfed-bench-secagg [-n N] [-p PASSES] [-b BITS] [-s SITES]\n");
      return 2;
    }
  }
  if (sodium_init() < 0) return 1;
  if (protocol_sites) return xf_bench_secagg_protocol(protocol_sites, bits, n);
  char cpu[256];
  xf_bench_cpu_model(cpu, sizeof(cpu));
  double ks = keystream_rate(n, passes);

  float *v = malloc(n * sizeof(*v));
  uint32_t *rnd = malloc(n * 4), *q = malloc(n * 4), *y = malloc(n * 4), *sum = malloc(n * 4),
           *want = calloc(n, 4);
  for (size_t k = 0; k < n; k++) v[k] = (float)((double)randombytes_uniform(2000001) / 1e6 - 1.0);
  /* Fixed scale: with norm <= 1 a value is at most 1; 2^(bits-8) steps per
   * unit leave 7 bits of headroom for sums over up to 128 sites. */
  double scale = ldexp(1, (int)bits - 8);

  double pipe[2], mask_only[2], streams[2];
  uint32_t sizes[2] = {10, 100};
  for (int g = 0; g < 2; g++) {
    round_state r;
    round_setup(&r, sizes[g], bits, n, 0);
    streams[g] = r.p.degree + 1.0;
    double best = 1e30, best_mask = 1e30;
    for (int p = -1; p < passes; p++) {
      double t0 = xf_bench_now();
      clip_quantize(v, n, bits, scale, rnd, q);
      double t1 = xf_bench_now();
      CHECK(xf_secagg_client_mask(r.c[1], q, 0, n, y, &ctx__), "mask");
      double t2 = xf_bench_now();
      if (p >= 0 && t2 - t0 < best) best = t2 - t0;
      if (p >= 0 && t2 - t1 < best_mask) best_mask = t2 - t1;
    }
    pipe[g] = (double)n / best;
    mask_only[g] = (double)n / best_mask;
    round_free(&r);
  }

  /* The aggregator: 100 sites, 10 dropping after sharing. */
  round_state r;
  uint32_t sites = 100, drop = 10;
  round_setup(&r, sites, bits, n, drop);
  clip_quantize(v, n, bits, scale, rnd, q);
  uint32_t m = bits == 32 ? UINT32_MAX : (1u << bits) - 1;
  double t_fold = 0;
  for (uint32_t i = 1; i <= sites - drop; i++) {
    for (size_t k = 0; k < n; k++) q[k] = (q[k] + i) & m; /* a different input per site */
    CHECK(xf_secagg_client_mask(r.c[i], q, 0, n, y, &ctx__), "mask");
    double t0 = xf_bench_now();
    CHECK(xf_secagg_server_add_masked(r.s, i, 0, n, y, &ctx__), "add_masked");
    t_fold += xf_bench_now() - t0;
    for (size_t k = 0; k < n; k++) want[k] += q[k];
  }
  uint32_t *u3 = malloc(sites * sizeof(*u3));
  size_t n_u3, cap = xf_secagg_reveal_max_bytes(&r.p), len;
  uint8_t *msg = malloc(cap);
  CHECK(xf_secagg_server_survivors(r.s, u3, &n_u3, &ctx__), "survivors");
  for (size_t k = 0; k < n_u3; k++) {
    CHECK(xf_secagg_client_unmask(r.c[u3[k]], u3, n_u3, msg, cap, &len, &ctx__), "unmask");
    CHECK(xf_secagg_server_add_reveal(r.s, u3[k], msg, len, &ctx__), "reveal");
  }
  double t0 = xf_bench_now();
  CHECK(xf_secagg_server_finish(r.s, sum, &ctx__), "finish");
  double t_finish = xf_bench_now() - t0;
  int exact = 1;
  for (size_t k = 0; k < n; k++) exact &= sum[k] == (want[k] & m);
  uint64_t expansions = xf_secagg_server_prg_expansions(r.s);

  printf(
      "{\"device\": \"%s\", \"cpus\": %ld, \"n\": %zu, \"bits\": %u, \"passes\": %d, "
      "\"keystream_bps\": %.6g, "
      "\"pipeline10_vps\": %.6g, \"mask10_vps\": %.6g, \"streams10\": %.0f, "
      "\"pipeline100_vps\": %.6g, \"mask100_vps\": %.6g, \"streams100\": %.0f, "
      "\"ratio10\": %.4f, \"ratio100\": %.4f, \"mask_ratio10\": %.4f, \"mask_ratio100\": %.4f, "
      "\"agg_sites\": %u, \"agg_dropped\": %u, \"agg_degree\": %u, \"finish_s\": %.4f, "
      "\"fold_s\": %.4f, \"expansions\": %llu, \"finish_ratio\": %.4f, \"exact\": %s}\n",
      cpu, sysconf(_SC_NPROCESSORS_ONLN), n, bits, passes, ks, pipe[0], mask_only[0], streams[0],
      pipe[1], mask_only[1], streams[1], pipe[0] * 4 * streams[0] / ks,
      pipe[1] * 4 * streams[1] / ks, mask_only[0] * 4 * streams[0] / ks,
      mask_only[1] * 4 * streams[1] / ks, sites, drop, r.p.degree, t_finish, t_fold,
      (unsigned long long)expansions, (double)expansions * n * 4 / ks / t_finish,
      exact ? "true" : "false");
  round_free(&r);
  free(u3);
  free(msg);
  free(v);
  free(rnd);
  free(q);
  free(y);
  free(sum);
  free(want);
  return exact ? 0 : 1;
}
