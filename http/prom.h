/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text exposition format (version 0.0.4): a writer that
 * builds a /metrics body family by family, and histograms with fixed
 * buckets that daemons observe into (docs/metrics.md). */
#ifndef XF_HTTP_PROM_H
#define XF_HTTP_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XF_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* Finite bucket bounds a histogram may have (+Inf comes on top). */
#define XF_PROM_BUCKETS_MAX 16

/* A growing text body. Zero-initialize; a failed allocation makes every
 * later write a no-op and `failed` true. */
typedef struct xf_prom {
  char *buf; /* xf_malloc'd, NUL-terminated; taken with xf_prom_take */
  size_t len, cap;
  bool failed;
} xf_prom;

/* A histogram: bounds ascending (borrowed, static), counts per bucket
 * (not cumulative: the writer sums them), their sum and count. */
typedef struct xf_prom_hist {
  const double *bounds;
  size_t n_bounds; /* at most XF_PROM_BUCKETS_MAX */
  uint64_t counts[XF_PROM_BUCKETS_MAX + 1]; /* the last: above every bound */
  double sum;
  uint64_t count;
} xf_prom_hist;

/* Sets h up over bounds (n at most XF_PROM_BUCKETS_MAX, ascending). */
void xf_prom_hist_init(xf_prom_hist *h, const double *bounds, size_t n);
void xf_prom_hist_observe(xf_prom_hist *h, double v);

/* "# HELP name help" (help escaped) and "# TYPE name type" (counter,
 * gauge, histogram). Once per family, before its samples. */
void xf_prom_family(xf_prom *p, const char *name, const char *type, const char *help);
/* One sample: name{k1="v1",...} value. labels is a NULL-terminated list of
 * name, value, name, value... (NULL itself for none); values are escaped
 * (backslash, double quote, line feed). Integral values within 2^53 print
 * without a fraction; NaN and infinities as Prometheus spells them. */
void xf_prom_sample(xf_prom *p, const char *name, const char *const *labels, double v);
/* A histogram's samples: name_bucket{...,le="B"} cumulative for each bound
 * and le="+Inf", then name_sum and name_count. */
void xf_prom_histogram(xf_prom *p, const char *name, const char *const *labels,
                       const xf_prom_hist *h);
/* The standard process series of this process: process_resident_memory_bytes
 * (from /proc/self/statm), process_cpu_seconds_total (user + system, from
 * getrusage) and process_start_time_seconds; and xfed_build_info{version,
 * program} 1. */
void xf_prom_process(xf_prom *p, const char *program);

/* Takes the body (caller frees with xf_free; NULL after a failure) and
 * resets p. *len gets its length. */
char *xf_prom_take(xf_prom *p, size_t *len);

#endif
