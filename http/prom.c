/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text exposition writer of http/prom.h. */
#include "http/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

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
