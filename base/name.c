/* SPDX-License-Identifier: Apache-2.0 */
/* The grammar of names and addresses every module and daemon reads alike
 * (base/name.h). */
#include "base/name.h"

#include <stdint.h>
#include <string.h>

bool xf_name_valid(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n < 1 || n > XF_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
    /* The first character is a letter or digit, as job specs
     * (data.dataset, data.tags) and policies require: a name they cannot
     * write would register a dataset no job can use. */
    if (!alnum && (i == 0 || (ch != '-' && ch != '_'))) return false;
  }
  return true;
}

bool xf_label_valid(const char *s) {
  return s && !xf_label_problem(s, strnlen(s, XF_NAME_MAX + 1));
}

const char *xf_label_problem(const char *s, size_t n) {
  if (n == 0) return "is empty";
  if (n > XF_NAME_MAX) return "is longer than 63 characters";
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') return "must be lowercase";
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
      return "may contain only lowercase letters, digits and '-'";
  }
  if (s[0] == '-' || s[n - 1] == '-') return "may not start or end with '-'";
  return NULL;
}

static bool host_char_ok(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '-' || ch == '.';
}

xf_err xf_address_parse_as(const char *s, unsigned flags, char *host, size_t host_len,
                           uint16_t *port, xf_errctx *err) {
  long min_port = flags & XF_ADDRESS_PORT0 ? 0 : 1;
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s)
    return xf_fail(err, XF_EINVAL, "'%.300s' is not HOST:PORT (e.g. agg-eu.example.org:7443)", s);
  const char *h = s;
  size_t hn = (size_t)(colon - s);
  if (s[0] == '[') {
    if (colon[-1] != ']' || hn < 3)
      return xf_fail(err, XF_EINVAL, "'%.300s': an IPv6 address is written [ADDR]:PORT", s);
    h = s + 1;
    hn -= 2;
    for (size_t i = 0; i < hn; i++) {
      char ch = h[i];
      if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F') ||
            ch == ':' || ch == '.'))
        return xf_fail(err, XF_EINVAL, "'%.300s': '%.*s' is not an IPv6 address", s, (int)hn, h);
    }
  } else {
    if (memchr(s, ':', hn))
      return xf_fail(err, XF_EINVAL, "'%.300s': write an IPv6 host in brackets, [ADDR]:PORT", s);
    for (size_t i = 0; i < hn; i++)
      if (!host_char_ok(h[i]))
        return xf_fail(err, XF_EINVAL,
                       "'%.300s': the host may hold only letters, digits, '-' and '.'", s);
    if (h[0] == '.' || h[0] == '-' || h[hn - 1] == '-' || strstr(s, ".."))
      return xf_fail(err, XF_EINVAL, "'%.300s': '%.*s' is not a host name", s, (int)hn, h);
  }
  if (hn > XF_HOST_MAX || hn + 1 > host_len)
    return xf_fail(err, XF_EINVAL, "'%.300s': the host is longer than %d characters", s,
                   XF_HOST_MAX);
  const char *p = colon + 1;
  long v = 0;
  size_t digits = strlen(p);
  if (digits == 0 || digits > 5)
    return xf_fail(err, XF_EINVAL, "'%.300s': the port must be a number from %ld to 65535", s,
                     min_port);
  for (size_t i = 0; i < digits; i++) {
    if (p[i] < '0' || p[i] > '9')
      return xf_fail(err, XF_EINVAL, "'%.300s': the port must be a number from %ld to 65535", s,
                     min_port);
    v = v * 10 + (p[i] - '0');
  }
  if (v < min_port || v > 65535)
    return xf_fail(err, XF_EINVAL, "'%.300s': the port must be a number from %ld to 65535", s,
                     min_port);
  memcpy(host, h, hn);
  host[hn] = '\0';
  if ((flags & XF_ADDRESS_LOOPBACK) && strcmp(host, "localhost") == 0) {
    if (host_len < sizeof("127.0.0.1"))
      return xf_fail(err, XF_EINVAL, "'%.300s': no room for the address", s);
    memcpy(host, "127.0.0.1", sizeof("127.0.0.1"));
  }
  *port = (uint16_t)v;
  return XF_OK;
}

xf_err xf_address_parse(const char *s, char *host, size_t host_len, uint16_t *port,
                        xf_errctx *err) {
  return xf_address_parse_as(s, 0, host, host_len, port, err);
}
