/* SPDX-License-Identifier: Apache-2.0 */
/* Bounds-checked reads over untrusted bytes. */
#include "base/cursor.h"

#include <string.h>

xf_err xf_cursor_view(xf_cursor *c, const uint8_t **out, size_t n) {
  if (n > xf_cursor_remaining(c)) return XF_ETRUNCATED;
  *out = c->data + c->off;
  c->off += n;
  return XF_OK;
}

xf_err xf_cursor_skip(xf_cursor *c, size_t n) {
  const uint8_t *unused;
  return xf_cursor_view(c, &unused, n);
}

xf_err xf_cursor_bytes(xf_cursor *c, void *out, size_t n) {
  const uint8_t *p;
  XF_GUARD(xf_cursor_view(c, &p, n));
  if (n) memcpy(out, p, n);
  return XF_OK;
}

xf_err xf_cursor_u8(xf_cursor *c, uint8_t *out) { return xf_cursor_bytes(c, out, 1); }

xf_err xf_cursor_u32be(xf_cursor *c, uint32_t *out) {
  const uint8_t *p;
  XF_GUARD(xf_cursor_view(c, &p, 4));
  *out = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
  return XF_OK;
}

xf_err xf_cursor_line(xf_cursor *c, const char **line, size_t *n) {
  size_t rem = xf_cursor_remaining(c);
  if (rem == 0) return XF_ENOENT;
  const uint8_t *start = c->data + c->off;
  const uint8_t *nl = memchr(start, '\n', rem);
  size_t len = nl ? (size_t)(nl - start) : rem;
  c->off += nl ? len + 1 : len;
  if (len > 0 && start[len - 1] == '\r') len--;
  *line = (const char *)start;
  *n = len;
  return XF_OK;
}
