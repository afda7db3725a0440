/* SPDX-License-Identifier: Apache-2.0 */
#include "base/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void xf_text_append(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strnlen(buf, len);
  if (used + 3 >= len) return;
  if (used) {
    memcpy(buf + used, "; ", 3);
    used += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}
