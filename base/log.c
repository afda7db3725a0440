/* SPDX-License-Identifier: Apache-2.0 */
/* Structured logging to stderr. */
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int xf__level = -1; /* -1: not yet read from the environment */
static atomic_int xf__format = -1; /* -1: not yet read from the environment */

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

void xf_log_set_format(xf_log_format format) { atomic_store(&xf__format, (int)format); }

xf_err xf_log_format_from_env(xf_errctx *err) {
  const char *env = getenv("XF_LOG_FORMAT");
  if (!env || !env[0] || strcmp(env, "kv") == 0) {
    xf_log_set_format(XF_LOG_FORMAT_KV);
    return XF_OK;
  }
  if (strcmp(env, "json") == 0) {
    xf_log_set_format(XF_LOG_FORMAT_JSON);
    return XF_OK;
  }
  return xf_fail(err, XF_EINVAL,
                 "XF_LOG_FORMAT is '%.64s'; the accepted values are kv (key=value lines, the "
                 "default) and json (one JSON object per line)",
                 env);
}

static xf_log_format xf__get_format(void) {
  int f = atomic_load(&xf__format);
  if (f < 0) {
    const char *env = getenv("XF_LOG_FORMAT");
    f = env && strcmp(env, "json") == 0 ? XF_LOG_FORMAT_JSON : XF_LOG_FORMAT_KV;
    atomic_store(&xf__format, f);
  }
  return (xf_log_format)f;
}

/* A bounded output for the JSON line: writes stop where it is full. */
typedef struct xf__jout {
  char *p;
  size_t n, len;
  bool full;
} xf__jout;

static void jput(xf__jout *o, const char *s, size_t k) {
  if (o->full) return;
  if (o->len + k + 3 > o->n) { /* room kept for the closing "} and NUL */
    o->full = true;
    return;
  }
  memcpy(o->p + o->len, s, k);
  o->len += k;
}

/* Length of the UTF-8 sequence at s (at most `left` bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t left) {
  size_t k;
  unsigned cp;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) k = 2, cp = s[0] & 0x1Fu;
  else if (s[0] >= 0xE0 && s[0] <= 0xEF) k = 3, cp = s[0] & 0x0Fu;
  else if (s[0] >= 0xF0 && s[0] <= 0xF4) k = 4, cp = s[0] & 0x07u;
  else return 0;
  if (k > left) return 0;
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (s[i] & 0x3Fu);
  }
  if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return k;
}

/* A JSON string of s[0..k). */
static void jstring(xf__jout *o, const char *s, size_t k) {
  size_t mark = o->len;
  jput(o, "\"", 1);
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < k;) {
    unsigned char c = u[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      jput(o, esc, 2);
      i++;
    } else if (c < 0x20 || c == 0x7F) {
      const char *short_ = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
      if (short_) {
        jput(o, short_, 2);
      } else {
        snprintf(esc, sizeof(esc), "\\u%04x", c);
        jput(o, esc, 6);
      }
      i++;
    } else if (c < 0x80) {
      jput(o, (const char *)&u[i], 1);
      i++;
    } else {
      size_t l = utf8_len(u + i, k - i);
      if (l) {
        jput(o, (const char *)&u[i], l);
        i += l;
      } else {
        jput(o, "\\ufffd", 6);
        i++;
      }
    }
  }
  jput(o, "\"", 1);
  if (o->full) o->len = mark; /* never half a string */
}

/* Whether s[0..k) is a JSON number (RFC 8259's grammar). */
static bool json_number(const char *s, size_t k) {
  size_t i = 0;
  if (i < k && s[i] == '-') i++;
  if (i >= k) return false;
  if (s[i] == '0') i++;
  else if (s[i] >= '1' && s[i] <= '9') while (i < k && s[i] >= '0' && s[i] <= '9') i++;
  else return false;
  if (i < k && s[i] == '.') {
    i++;
    size_t d = i;
    while (i < k && s[i] >= '0' && s[i] <= '9') i++;
    if (i == d) return false;
  }
  if (i < k && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < k && (s[i] == '+' || s[i] == '-')) i++;
    size_t d = i;
    while (i < k && s[i] >= '0' && s[i] <= '9') i++;
    if (i == d) return false;
  }
  return i == k;
}

size_t xf_log_json_line(char *out, size_t n, const char *ts, const char *level,
                        const char *event, const char *fields) {
  if (n < 3) {
    if (n) out[0] = '\0';
    return 0;
  }
  xf__jout o = {.p = out, .n = n};
  jput(&o, "{\"ts\":", 6);
  jstring(&o, ts, strlen(ts));
  jput(&o, ",\"level\":", 9);
  jstring(&o, level, strlen(level));
  jput(&o, ",\"event\":", 9);
  jstring(&o, event, strlen(event));
  /* Words without '=' are gathered into "text", written last. */
  char text[512];
  size_t text_len = 0;
  const char *s = fields;
  while (*s) {
    while (*s == ' ') s++;
    if (!*s) break;
    const char *w = s;
    const char *eq = NULL;
    while (*s && *s != ' ' && *s != '=' && *s != '"') s++;
    if (*s == '=' && s > w) {
      eq = s;
      s++;
    }
    const char *v = eq ? s : w;
    size_t vk;
    bool quoted = *s == '"' && eq;
    if (quoted) {
      v = ++s;
      while (*s && *s != '"') {
        if (*s == '\\' && s[1]) s++;
        s++;
      }
      vk = (size_t)(s - v);
      if (*s == '"') s++;
    } else {
      while (*s && *s != ' ') {
        if (*s == '"') { /* a quoted stretch inside a word */
          s++;
          while (*s && *s != '"') s++;
          if (*s) s++;
        } else {
          s++;
        }
      }
      vk = (size_t)(s - v);
    }
    if (!eq) {
      size_t wk = (size_t)(s - w);
      if (text_len && text_len + 1 < sizeof(text)) text[text_len++] = ' ';
      if (wk > sizeof(text) - 1 - text_len) wk = sizeof(text) - 1 - text_len;
      memcpy(text + text_len, w, wk);
      text_len += wk;
      continue;
    }
    size_t mark = o.len;
    jput(&o, ",", 1);
    jstring(&o, w, (size_t)(eq - w));
    jput(&o, ":", 1);
    if (!quoted && json_number(v, vk)) jput(&o, v, vk);
    else jstring(&o, v, vk);
    if (o.full) {
      o.len = mark;
      break;
    }
  }
  if (text_len && !o.full) {
    size_t mark = o.len;
    jput(&o, ",\"text\":", 8);
    jstring(&o, text, text_len);
    if (o.full) o.len = mark;
  }
  out[o.len++] = '}';
  out[o.len] = '\0';
  return o.len;
}

void xf_log(xf_log_level level, const char *event, const char *fields, ...) {
  if (level < xf_log_get_level() || level >= XF_LOG_OFF) return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char ts_text[64];
  snprintf(ts_text, sizeof(ts_text), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
  int n = snprintf(line, sizeof(line), "ts=%s level=%s event=%s ", ts_text,
                   xf__level_names[level], event);
  if (n < 0) return;
  if (xf__get_format() == XF_LOG_FORMAT_JSON) {
    char kv[2048];
    va_list ap;
    va_start(ap, fields);
    int m = vsnprintf(kv, sizeof(kv), fields, ap);
    va_end(ap);
    if (m < 0) kv[0] = '\0';
    size_t used = xf_log_json_line(line, sizeof(line) - 1, ts_text, xf__level_names[level],
                                   event, kv);
    line[used++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, used);
    (void)w;
    return;
  }
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
