/* SPDX-License-Identifier: Apache-2.0 */
/* Error helpers shared by the database and the blob store. */
#include "storage/storage_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>


xf_err xf__storage_fail(xf_errctx *err, const char *path, xf_err code, const char *fmt, ...) {
  if (!err) return code;
  xf_errctx_file(err, path);
  err->field[0] = '\0';
  va_list ap;
  va_start(ap, fmt);
  xf_vfail(err, code, fmt, ap);
  va_end(ap);
  return code;
}

const char *xf__storage_errno(int e, char *buf, size_t n) {
  if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "errno %d", e);
  return buf;
}
