/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text exposition writer of http/prom.h. */
#include "http/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"

#ifndef XF_VERSION
#define XF_VERSION "unknown"
#endif

static void put(xf_prom *p, const char *s, size_t n) {
  if (p->failed) return;
  if (p->len + n + 1 > p->cap) {
    size_t cap = p->cap ? p->cap : 4096;
    while (cap < p->len + n + 1) cap *= 2;
    char *b = xf_realloc(p->buf, cap);
    if (!b) {
      p->failed = true;
      return;
    }
    p->buf = b;
    p->cap = cap;
  }
  memcpy(p->buf + p->len, s, n);
  p->len += n;
  p->buf[p->len] = '\0';
}

static void puts_(xf_prom *p, const char *s) { put(p, s, strlen(s)); }

/* Escapes backslash and line feed, and the double quote where quoted. */
static void put_escaped(xf_prom *p, const char *s, bool quoted) {
  for (; *s; s++) {
    if (*s == '\\') puts_(p, "\\\\");
    else if (*s == '\n') puts_(p, "\\n");
    else if (*s == '"' && quoted) puts_(p, "\\\"");
    else put(p, s, 1);
  }
}

/* The shortest of %.15g and %.17g that reads back as v. */
static void fmt_double(char *b, size_t n, double v) {
  snprintf(b, n, "%.15g", v);
  if (strtod(b, NULL) != v) snprintf(b, n, "%.17g", v);
}

static void put_value(xf_prom *p, double v) {
  char b[40];
  if (isnan(v)) snprintf(b, sizeof(b), "NaN");
  else if (isinf(v)) snprintf(b, sizeof(b), v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) <= 9007199254740992.0) snprintf(b, sizeof(b), "%.0f", v);
  else fmt_double(b, sizeof(b), v);
  puts_(p, b);
}

void xf_prom_hist_init(xf_prom_hist *h, const double *bounds, size_t n) {
  memset(h, 0, sizeof(*h));
  h->bounds = bounds;
  h->n_bounds = n > XF_PROM_BUCKETS_MAX ? XF_PROM_BUCKETS_MAX : n;
}

void xf_prom_hist_observe(xf_prom_hist *h, double v) {
  size_t i = 0;
  while (i < h->n_bounds && v > h->bounds[i]) i++;
  h->counts[i]++;
  h->sum += v;
  h->count++;
}

void xf_prom_family(xf_prom *p, const char *name, const char *type, const char *help) {
  puts_(p, "# HELP ");
  puts_(p, name);
  puts_(p, " ");
  put_escaped(p, help, false);
  puts_(p, "\n# TYPE ");
  puts_(p, name);
  puts_(p, " ");
  puts_(p, type);
  puts_(p, "\n");
}

/* name{labels[,le="..."]} */
static void put_series(xf_prom *p, const char *name, const char *suffix,
                       const char *const *labels, const char *le) {
  puts_(p, name);
  puts_(p, suffix);
  bool any = (labels && labels[0]) || le;
  if (!any) return;
  puts_(p, "{");
  bool first = true;
  for (size_t i = 0; labels && labels[i] && labels[i + 1]; i += 2) {
    if (!first) puts_(p, ",");
    first = false;
    puts_(p, labels[i]);
    puts_(p, "=\"");
    put_escaped(p, labels[i + 1], true);
    puts_(p, "\"");
  }
  if (le) {
    if (!first) puts_(p, ",");
    puts_(p, "le=\"");
    puts_(p, le);
    puts_(p, "\"");
  }
  puts_(p, "}");
}

void xf_prom_sample(xf_prom *p, const char *name, const char *const *labels, double v) {
  put_series(p, name, "", labels, NULL);
  puts_(p, " ");
  put_value(p, v);
  puts_(p, "\n");
}

void xf_prom_histogram(xf_prom *p, const char *name, const char *const *labels,
                       const xf_prom_hist *h) {
  uint64_t cum = 0;
  char le[40];
  for (size_t i = 0; i <= h->n_bounds; i++) {
    cum += h->counts[i];
    if (i < h->n_bounds) fmt_double(le, sizeof(le), h->bounds[i]);
    else snprintf(le, sizeof(le), "+Inf");
    put_series(p, name, "_bucket", labels, le);
    puts_(p, " ");
    put_value(p, (double)cum);
    puts_(p, "\n");
  }
  put_series(p, name, "_sum", labels, NULL);
  puts_(p, " ");
  put_value(p, h->sum);
  puts_(p, "\n");
  put_series(p, name, "_count", labels, NULL);
  puts_(p, " ");
  put_value(p, (double)h->count);
  puts_(p, "\n");
}

/* The process's start as Unix seconds, from /proc (boot time + start ticks). */
static double process_start(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return NAN;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *r = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!r) return NAN;
  unsigned long long start = 0;
  /* Fields after the name: state (3) ... starttime (22). */
  const char *q = r + 1;
  for (int field = 2; field < 22 && q; field++) q = strchr(q + 1, ' ');
  if (!q || sscanf(q, " %llu", &start) != 1) return NAN;
  FILE *st = fopen("/proc/stat", "r");
  if (!st) return NAN;
  char line[256];
  double btime = NAN;
  while (fgets(line, sizeof(line), st))
    if (strncmp(line, "btime ", 6) == 0) btime = strtod(line + 6, NULL);
  fclose(st);
  long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? btime + (double)start / (double)hz : NAN;
}

void xf_prom_process(xf_prom *p, const char *program) {
  double rss = NAN;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    unsigned long long size, resident;
    if (fscanf(f, "%llu %llu", &size, &resident) == 2)
      rss = (double)resident * (double)sysconf(_SC_PAGESIZE);
    fclose(f);
  }
  struct rusage ru;
  double cpu = NAN;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
          (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
  xf_prom_family(p, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  xf_prom_sample(p, "process_resident_memory_bytes", NULL, rss);
  xf_prom_family(p, "process_cpu_seconds_total", "counter",
                 "Total user and system CPU time spent in seconds.");
  xf_prom_sample(p, "process_cpu_seconds_total", NULL, cpu);
  xf_prom_family(p, "process_start_time_seconds", "gauge",
                 "Start time of the process since unix epoch in seconds.");
  xf_prom_sample(p, "process_start_time_seconds", NULL, process_start());
  xf_prom_family(p, "xfed_build_info", "gauge",
                 "Always 1; the labels name the program and the xfed version it was built from.");
  const char *labels[] = {"program", program, "version", XF_VERSION, NULL};
  xf_prom_sample(p, "xfed_build_info", labels, 1);
}

char *xf_prom_take(xf_prom *p, size_t *len) {
  char *b = p->failed ? NULL : p->buf;
  *len = p->failed ? 0 : p->len;
  if (p->failed) xf_free(p->buf);
  if (!b) *len = 0;
  p->buf = NULL;
  p->len = p->cap = 0;
  p->failed = false;
  return b;
}
