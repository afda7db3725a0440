/* SPDX-License-Identifier: Apache-2.0 */
/* A bounds-checked reader over untrusted bytes (dataset files, frames, specs).
 * Parsers read through it instead of doing pointer arithmetic: every read
 * checks the remaining length first and fails with XF_ETRUNCATED. */
#ifndef XF_BASE_CURSOR_H
#define XF_BASE_CURSOR_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

typedef struct xf_cursor {
  const uint8_t *data; /* borrowed; must outlive the cursor */
  size_t len;
  size_t off;
} xf_cursor;

static inline xf_cursor xf_cursor_make(const void *data, size_t len) {
  xf_cursor c = {(const uint8_t *)data, len, 0};
  return c;
}

static inline size_t xf_cursor_remaining(const xf_cursor *c) { return c->len - c->off; }

/* Each read advances the cursor only on success. */
xf_err xf_cursor_u8(xf_cursor *c, uint8_t *out) XF_WARN_UNUSED;
xf_err xf_cursor_u32be(xf_cursor *c, uint32_t *out) XF_WARN_UNUSED;
/* Copies n bytes to out. */
xf_err xf_cursor_bytes(xf_cursor *c, void *out, size_t n) XF_WARN_UNUSED;
/* Points *out at the next n bytes inside the cursor's buffer (no copy). */
xf_err xf_cursor_view(xf_cursor *c, const uint8_t **out, size_t n) XF_WARN_UNUSED;
xf_err xf_cursor_skip(xf_cursor *c, size_t n) XF_WARN_UNUSED;
/* Points *line at the next line (without its '\n' or "\r\n") and its length at
 * *n; the last line need not end in '\n'. XF_ENOENT at the end of input. */
xf_err xf_cursor_line(xf_cursor *c, const char **line, size_t *n) XF_WARN_UNUSED;

#endif
