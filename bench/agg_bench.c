/* SPDX-License-Identifier: Apache-2.0 */
/* Streaming-aggregation throughput of the coordinator's aggregator, as a
 * ratio of this machine's memory bandwidth measured in the same process.
 * Prints one JSON object per run for bench/aggregate.sh.
 *
 * Two measurements, one thread (the coordinator's loop drives the aggregator
 * from one thread):
 *  - memory bandwidth, STREAM-style, over two arrays far larger than the last
 *    level cache (--stream-mib each): memcpy and a copy loop (bytes read +
 *    bytes written) and a read-modify-write "add" kernel a[i] += b[i] (two
 *    reads and one write per element), each the best of --passes passes;
 *  - a round of the aggregator through its public API, as the coordinator
 *    drives it: create, then for each of --updates updates begin_update, fold
 *    in chunks of --chunk floats as they arrive from the network, end_update;
 *    then finish and free. The chunks of an update are handed over from a
 *    receive buffer of one chunk that is refilled before each fold (as the
 *    transport decodes a frame into it; untimed), or with --source updates
 *    straight from the K updates held in memory. The round is repeated
 *    --rounds times with a fresh aggregator each time; the first is a warm-up
 *    and the median of the others is reported.
 *
 * Memory traffic the mean-based aggregator needs per parameter of an update,
 * counted from the algorithm (coordinator/aggregate.h, "Memory"): the chunk
 * read and the staging write in fold (4 + 4 bytes), the staging read in
 * end_update (4) and the read and write of the 16-byte exact sum (32):
 * 44 bytes per 4-byte parameter, 11 bytes per update byte. The staging write
 * also costs a read for ownership in hardware; that is not counted, as the
 * STREAM byte counts do not count it either.
 *
 * usage: xfed-bench-aggregate [--updates K] [--params N] [--chunk FLOATS]
 *                             [--rounds R] [--stream-mib M] [--passes P]
 *                             [--source recvbuf|updates] */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "base/rng.h"
#include "coordinator/aggregate.h"
#include "job/jobspec.h"

/* Bytes per parameter of the mean-based aggregator's running sum, and the
 * traffic per update parameter that follows from it (see the top comment). */
#define SUM_BYTES 16.0
#define TRAFFIC_PER_PARAM (4.0 + 4.0 + 4.0 + 2.0 * SUM_BYTES)

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Keeps the bandwidth kernels' results observable. */
static volatile double sink;

/* The bandwidth kernels work in blocks of a fixed length so that GCC
 * vectorizes them at -O2 as well (its cheap cost model vectorizes only loops
 * whose trip count is a multiple of the vector length); scalar loops here
 * are bound by instructions, not by memory, and would understate it. */
#define BLOCK 16

/* GB/s of memcpy over n doubles, counting the bytes read and written, best of
 * `passes`. glibc's memcpy streams stores past the cache at these sizes. */
static double bw_memcpy(double *dst, const double *src, size_t n, int passes) {
  double best = 0;
  for (int p = 0; p < passes; p++) {
    double t = xf_bench_now();
    memcpy(dst, src, n * sizeof(double));
    t = xf_bench_now() - t;
    sink += dst[n / 2];
    double rate = 2.0 * (double)n * sizeof(double) / t / 1e9;
    if (rate > best) best = rate;
  }
  return best;
}

/* GB/s of a plain copy loop dst[i] = src[i] (ordinary stores, as the
 * aggregator's staging copy makes), counted like memcpy; n a multiple of
 * BLOCK. */
static double bw_copy(double *restrict dst, const double *restrict src, size_t n, int passes) {
  double best = 0;
  for (int p = 0; p < passes; p++) {
    double t = xf_bench_now();
    for (size_t i = 0; i < n; i += BLOCK)
      for (size_t j = 0; j < BLOCK; j++) dst[i + j] = src[i + j];
    t = xf_bench_now() - t;
    sink += dst[n / 2];
    double rate = 2.0 * (double)n * sizeof(double) / t / 1e9;
    if (rate > best) best = rate;
  }
  return best;
}

/* GB/s of a[i] += b[i] over n doubles, counting two reads and one write per
 * element, best of `passes`: the accumulator's own pattern (read, modify,
 * write back in place, with a second stream read beside it). n a multiple of
 * BLOCK. */
static double bw_add(double *restrict a, const double *restrict b, size_t n, int passes) {
  double best = 0;
  for (int p = 0; p < passes; p++) {
    double t = xf_bench_now();
    for (size_t i = 0; i < n; i += BLOCK)
      for (size_t j = 0; j < BLOCK; j++) a[i + j] += b[i + j];
    t = xf_bench_now() - t;
    sink += a[n / 3];
    double rate = 3.0 * (double)n * sizeof(double) / t / 1e9;
    if (rate > best) best = rate;
  }
  return best;
}

static void cpu_name(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof(line), f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      colon += 2;
      colon[strcspn(colon, "\n")] = 0;
      snprintf(out, n, "%s", colon);
      break;
    }
  }
  fclose(f);
}

/* Bytes of the last level cache as the kernel reports it for CPU 0, or -1.
 * (glibc's sysconf figure on this kind of guest is the host's total.) */
static long llc_bytes(void) {
  long best = -1;
  for (int idx = 0; idx < 8; idx++) {
    char path[96], text[32];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
    FILE *f = fopen(path, "r");
    if (!f) break;
    if (fgets(text, sizeof(text), f)) {
      char *unit = NULL;
      long v = strtol(text, &unit, 10);
      if (unit && *unit == 'K') v *= 1024;
      else if (unit && *unit == 'M') v *= 1024 * 1024;
      if (v > best) best = v;
    }
    fclose(f);
  }
  return best;
}

typedef struct round_times {
  double create, begin, fold, end, finish;
} round_times;

static int fail(const char *what, const xf_errctx *err) {
  fprintf(stderr, "xfed-bench-aggregate: %s: %s\n", what, err->msg[0] ? err->msg : "failed");
  return 1;
}

/* One round: K updates of n values from upd (K rows), each folded in chunks. */
static int one_round(const xf_job_strategy *s, const float *upd, const uint64_t *weights,
                     size_t k, size_t n, size_t chunk, float *recvbuf, float *out,
                     round_times *rt) {
  xf_errctx err;
  xf_errctx_clear(&err);
  memset(rt, 0, sizeof(*rt));
  xf_aggregator *agg = NULL;
  double t = xf_bench_now();
  if (xf_aggregator_create(s, n, 0, &agg, &err) != XF_OK) return fail("create", &err);
  rt->create = xf_bench_now() - t;
  for (size_t u = 0; u < k; u++) {
    xf_agg_update *h = NULL;
    t = xf_bench_now();
    if (xf_aggregator_begin_update(agg, u + 1, weights[u], &h, &err) != XF_OK)
      return fail("begin_update", &err);
    rt->begin += xf_bench_now() - t;
    const float *row = upd + u * n;
    for (size_t off = 0; off < n; off += chunk) {
      size_t len = n - off < chunk ? n - off : chunk;
      const float *src = row + off;
      if (recvbuf) {
        memcpy(recvbuf, src, len * sizeof(float));
        src = recvbuf;
      }
      t = xf_bench_now();
      if (xf_aggregator_fold(h, off, src, len, &err) != XF_OK) return fail("fold", &err);
      rt->fold += xf_bench_now() - t;
    }
    t = xf_bench_now();
    if (xf_aggregator_end_update(h, &err) != XF_OK) return fail("end_update", &err);
    rt->end += xf_bench_now() - t;
  }
  t = xf_bench_now();
  if (xf_aggregator_finish(agg, out, &err) != XF_OK) return fail("finish", &err);
  rt->finish = xf_bench_now() - t;
  xf_aggregator_free(agg);
  return 0;
}

int main(int argc, char **argv) {
  long k = 8, n = 1663370, chunk = 262144, rounds = 5, stream_mib = 256, passes = 5;
  const char *source = "recvbuf";
  static const struct option opts[] = {{"updates", required_argument, 0, 'k'},
                                       {"params", required_argument, 0, 'n'},
                                       {"chunk", required_argument, 0, 'c'},
                                       {"rounds", required_argument, 0, 'r'},
                                       {"stream-mib", required_argument, 0, 'm'},
                                       {"passes", required_argument, 0, 'p'},
                                       {"source", required_argument, 0, 's'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'k': k = atol(optarg); break;
    case 'n': n = atol(optarg); break;
    case 'c': chunk = atol(optarg); break;
    case 'r': rounds = atol(optarg); break;
    case 'm': stream_mib = atol(optarg); break;
    case 'p': passes = atol(optarg); break;
    case 's': source = optarg; break;
    default:
      fprintf(stderr, "usage: xfed-bench-aggregate [--updates K] [--params N] [--chunk FLOATS] "
                      "[--rounds R] [--stream-mib M] [--passes P] "
                      "[--source recvbuf|updates]\n");
      return 2;
    }
  }
  bool from_recvbuf = strcmp(source, "recvbuf") == 0;
  if (k < 1 || k > 1000 || n < 1 || chunk < 1 || rounds < 2 || stream_mib < 1 || passes < 1 ||
      (!from_recvbuf && strcmp(source, "updates") != 0)) {
    fprintf(stderr, "xfed-bench-aggregate: --updates 1..1000, --params, --chunk, --stream-mib "
                    "and --passes positive, --rounds at least 2, --source recvbuf|updates\n");
    return 2;
  }

  /* (a) memory bandwidth. */
  size_t sn = (size_t)stream_mib * 1024 * 1024 / sizeof(double);
  double *a = malloc(sn * sizeof(double)), *b = malloc(sn * sizeof(double));
  if (!a || !b) {
    fprintf(stderr, "xfed-bench-aggregate: out of memory for the bandwidth arrays\n");
    return 1;
  }
  for (size_t i = 0; i < sn; i++) a[i] = 1.0, b[i] = 0.5; /* first touch, outside timing */
  double memcpy_gbs = bw_memcpy(a, b, sn, (int)passes);
  double copy_gbs = bw_copy(a, b, sn, (int)passes);
  double add_gbs = bw_add(a, b, sn, (int)passes);
  double best_copy_gbs = copy_gbs > memcpy_gbs ? copy_gbs : memcpy_gbs;
  free(a);
  free(b);

  /* (b) the aggregator. Deltas of a trained model: small, normal, nonzero. */
  size_t nk = (size_t)k, nn = (size_t)n, nc = (size_t)chunk;
  float *upd = malloc(nk * nn * sizeof(float)), *out = malloc(nn * sizeof(float));
  float *recvbuf = from_recvbuf ? malloc(nc * sizeof(float)) : NULL;
  uint64_t *weights = malloc(nk * sizeof(uint64_t));
  if (!upd || !out || !weights || (from_recvbuf && !recvbuf)) {
    fprintf(stderr, "xfed-bench-aggregate: out of memory for %ld updates\n", k);
    return 1;
  }
  xf_rng rng;
  xf_rng_seed(&rng, 20261121, 0);
  for (size_t i = 0; i < nk * nn; i++) upd[i] = (float)(xf_rng_normal(&rng) * 1e-2);
  for (size_t u = 0; u < nk; u++) weights[u] = 100 + xf_rng_below(&rng, 10000);

  xf_job_strategy s;
  xf_job_strategy_defaults(&s, XF_JOB_STRATEGY_FEDAVG);
  size_t timed = (size_t)rounds - 1;
  double *work = malloc(timed * sizeof(double)), *fold = malloc(timed * sizeof(double));
  double *end = malloc(timed * sizeof(double)), *create = malloc(timed * sizeof(double));
  double *fin = malloc(timed * sizeof(double));
  if (!work || !fold || !end || !create || !fin) return 1;
  for (long r = 0; r < rounds; r++) {
    round_times rt;
    if (one_round(&s, upd, weights, nk, nn, nc, recvbuf, out, &rt) != 0) return 1;
    if (r == 0) continue; /* warm-up: the allocator's first mappings */
    work[r - 1] = rt.begin + rt.fold + rt.end;
    fold[r - 1] = rt.fold;
    end[r - 1] = rt.end;
    create[r - 1] = rt.create;
    fin[r - 1] = rt.finish;
  }
  double t_work = median(work, timed), t_fold = median(fold, timed), t_end = median(end, timed);
  double t_create = median(create, timed), t_finish = median(fin, timed);

  double update_bytes = (double)nk * (double)nn * sizeof(float);
  double update_gbs = update_bytes / t_work / 1e9;
  double traffic_per_byte = TRAFFIC_PER_PARAM / sizeof(float);
  double traffic_gbs = update_gbs * traffic_per_byte;
  char cpu[128];
  cpu_name(cpu, sizeof(cpu));
  long l3 = llc_bytes();
  printf("{\"device\": \"%s\", \"cpus\": %ld, \"llc_bytes\": %ld, \"stream_mib\": %ld, "
         "\"memcpy_gbs\": %.3f, \"copy_gbs\": %.3f, \"add_gbs\": %.3f, \"updates\": %ld, \"params\": %ld, "
         "\"chunk\": %ld, \"source\": \"%s\", \"create_ms\": %.3f, \"fold_ms\": %.3f, "
         "\"end_ms\": %.3f, \"work_ms\": %.3f, \"finish_ms\": %.3f, \"update_gbs\": %.4f, "
         "\"traffic_per_update_byte\": %.2f, \"traffic_gbs\": %.3f, "
         "\"update_vs_copy\": %.4f, \"traffic_vs_add\": %.4f, \"check\": %.9g}\n",
         cpu, sysconf(_SC_NPROCESSORS_ONLN), l3, stream_mib, memcpy_gbs, copy_gbs, add_gbs, k, n, chunk,
         source, t_create * 1e3, t_fold * 1e3, t_end * 1e3, t_work * 1e3, t_finish * 1e3,
         update_gbs, traffic_per_byte, traffic_gbs, update_gbs / best_copy_gbs,
         traffic_gbs / add_gbs, (double)out[nn / 2]);
  free(work), free(fold), free(end), free(create), free(fin);
  free(upd), free(out), free(recvbuf), free(weights);
  return 0;
}
