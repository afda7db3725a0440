/* SPDX-License-Identifier: Apache-2.0 */
/* Speed of the update codecs against memcpy of the same float buffer (the
 * physical limit of anything that reads an update once), measured in the
 * same process. Prints one JSON object for bench/codec.sh.
 *
 * For each size (the quickstart mlp's 199,210 parameters and fedavg-cnn's
 * 1,663,370) and each codec (q8, q4, topk:0.01+q8), each figure the best of
 * --passes timed passes after a warm-up:
 *  - encode: xf_codec_encode with error feedback (a zero residual, reset
 *    before each pass, outside the timing), as a site runs it;
 *  - decode: xf_codec_decode of that encoding, as the aggregator runs it;
 *  - memcpy of the n floats.
 * Rates are in values/s and in MB/s of float32 input (4 n bytes / time).
 *
 * usage: xfed-bench-codec [--passes P] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "bench/bench_util.h"
#include "codec/codec.h"

static void die(const char *what, xf_err rc) {
  fprintf(stderr, "xfed-bench-codec: %s: %s\n", what, xf_strerror(rc));
  exit(1);
}

/* Seconds of the best memcpy of n floats. */
static double memcpy_time(const float *x, float *y, size_t n, int passes) {
  double best = 1e30;
  for (int p = 0; p <= passes; p++) {
    double t = xf_bench_now();
    memcpy(y, x, n * sizeof(float));
    double dt = xf_bench_now() - t;
    __asm__ volatile("" : : "r"(y) : "memory"); /* keep the copy */
    if (p > 0 && dt < best) best = dt;
  }
  return best;
}

typedef struct timing {
  double encode_s, decode_s;
  size_t bytes;
} timing;

static timing codec_time(const xf_codec_uplink *c, const float *x, float *res, float *out,
                         size_t n, int passes) {
  timing tm = {1e30, 1e30, 0};
  for (int p = 0; p <= passes; p++) {
    memset(res, 0, n * sizeof(float));
    uint8_t *enc;
    size_t len;
    double t = xf_bench_now();
    xf_err rc = xf_codec_encode(c, x, n, res, (uint64_t)p, &enc, &len, NULL);
    double enc_s = xf_bench_now() - t;
    if (rc != XF_OK) die("encode", rc);
    t = xf_bench_now();
    rc = xf_codec_decode(enc, len, n, out, NULL);
    double dec_s = xf_bench_now() - t;
    if (rc != XF_OK) die("decode", rc);
    xf_free(enc);
    if (p == 0) continue; /* warm-up */
    if (enc_s < tm.encode_s) tm.encode_s = enc_s;
    if (dec_s < tm.decode_s) tm.decode_s = dec_s;
    tm.bytes = len;
  }
  return tm;
}

int main(int argc, char **argv) {
  int passes = 5;
  static const struct option opts[] = {{"passes", required_argument, NULL, 'p'}, {0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (ch == 'p') {
      passes = atoi(optarg);
    } else {
      fprintf(stderr, "usage: xfed-bench-codec [--passes P]\n");
      return 2;
    }
  }
  if (passes < 1) {
    fprintf(stderr, "xfed-bench-codec: --passes must be positive\n");
    return 2;
  }
  static const size_t sizes[] = {199210, 1663370};
  static const struct {
    const char *name;
    xf_codec_uplink c;
  } codecs[] = {{"q8", {0, 8}}, {"q4", {0, 4}}, {"topk:0.01+q8", {0.01, 8}}};
  char model[256];
  xf_bench_cpu_model(model, sizeof(model));
  printf("{\"device\": \"%s\", \"passes\": %d, \"results\": [", model, passes);
  for (size_t s = 0; s < 2; s++) {
    size_t n = sizes[s];
    float *x = malloc(n * sizeof(float)), *res = malloc(n * sizeof(float)),
          *out = malloc(n * sizeof(float));
    if (!x || !res || !out) die("buffers", XF_ENOMEM);
    /* An update: small deltas of a few scales, as training leaves them. */
    xf_rng rng;
    xf_rng_seed(&rng, 42, 0);
    for (size_t i = 0; i < n; i++)
      x[i] = (float)(xf_rng_normal(&rng) * (i % 1000 < 50 ? 1e-2 : 1e-3));
    double mc = memcpy_time(x, out, n, passes);
    printf("%s{\"n\": %zu, \"memcpy_vps\": %.0f, \"codecs\": [", s ? ", " : "", n, n / mc);
    for (size_t c = 0; c < sizeof(codecs) / sizeof(codecs[0]); c++) {
      timing tm = codec_time(&codecs[c].c, x, res, out, n, passes);
      printf("%s{\"codec\": \"%s\", \"bytes\": %zu, \"encode_vps\": %.0f, "
             "\"decode_vps\": %.0f}",
             c ? ", " : "", codecs[c].name, tm.bytes, n / tm.encode_s, n / tm.decode_s);
    }
    printf("]}");
    free(x);
    free(res);
    free(out);
  }
  printf("]}\n");
  return 0;
}
