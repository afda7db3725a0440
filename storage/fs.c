/* SPDX-License-Identifier: Apache-2.0 */
/* Filesystem and error helpers shared by the database and the blob store. */
#include "storage/storage_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "crypto/digest.h"

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

int xf__storage_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int rc = 0;
  /* Some filesystems refuse fsync on directories (EINVAL) because their
   * metadata is already synchronous; that is not a failure to persist. */
  if (fsync(fd) != 0 && errno != EINVAL) rc = errno;
  close(fd);
  return rc;
}

int xf__storage_fsync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return xf__storage_fsync_dir(".");
  if (slash == path) return xf__storage_fsync_dir("/");
  size_t n = (size_t)(slash - path);
  char dir[PATH_MAX];
  if (n >= sizeof(dir)) return ENAMETOOLONG;
  memcpy(dir, path, n);
  dir[n] = '\0';
  return xf__storage_fsync_dir(dir);
}

xf_err xf__storage_random_name(char out[XF_STORAGE_NAME_HEX], xf_errctx *err) {
  if (xf_crypto_init() != XF_OK)
    return xf_fail(err, XF_EINTERNAL,
                   "libsodium cannot start, so no random file name can be drawn; check "
                   "that /dev/urandom is readable");
  uint8_t raw[(XF_STORAGE_NAME_HEX - 1) / 2];
  randombytes_buf(raw, sizeof(raw));
  sodium_bin2hex(out, XF_STORAGE_NAME_HEX, raw, sizeof(raw));
  return XF_OK;
}
