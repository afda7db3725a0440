/* SPDX-License-Identifier: Apache-2.0 */
/* Structured logging to stderr. */
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int xf__level = -1; /* -1: not yet read from the environment */

static const char *const xf__level_names[] = {"debug", "info", "warn", "error", "off"};

xf_err xf_log_parse_level(const char *s, xf_log_level *out) {
  for (int i = 0; i <= XF_LOG_OFF; i++) {
    if (strcmp(s, xf__level_names[i]) == 0) {
      *out = (xf_log_level)i;
      return XF_OK;
    }
  }
  return XF_EINVAL;
}

xf_log_level xf_log_get_level(void) {
  int level = atomic_load(&xf__level);
  if (level < 0) {
    xf_log_level parsed = XF_LOG_INFO;
    const char *env = getenv("XF_LOG_LEVEL");
    if (env && xf_log_parse_level(env, &parsed) != XF_OK) parsed = XF_LOG_INFO;
    level = (int)parsed;
    atomic_store(&xf__level, level);
  }
  return (xf_log_level)level;
}

void xf_log_set_level(xf_log_level level) { atomic_store(&xf__level, (int)level); }

void xf_log(xf_log_level level, const char *event, const char *fields, ...) {
  if (level < xf_log_get_level() || level >= XF_LOG_OFF) return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof(line),
                   "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=%s ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000L, xf__level_names[level], event);
  if (n < 0) return;
  size_t used = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
  va_list ap;
  va_start(ap, fields);
  int m = vsnprintf(line + used, sizeof(line) - used, fields, ap);
  va_end(ap);
  if (m > 0) used += (size_t)m;
  if (used > sizeof(line) - 2) used = sizeof(line) - 2;
  line[used++] = '\n';
  /* One write(2) per line keeps lines whole across threads and processes. */
  ssize_t w = write(STDERR_FILENO, line, used);
  (void)w;
}
