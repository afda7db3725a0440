/* SPDX-License-Identifier: Apache-2.0 */
/* Durable whole-file writes by temporary file, fsync and rename; whole reads
 * of small text files. */
#include "storage/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "storage/storage_internal.h"

xf_err xf_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                            xf_errctx *err) {
  char name[XF_STORAGE_NAME_HEX], tmp[4096], why[128];
  XF_GUARD(xf__storage_random_name(name, err));
  if (snprintf(tmp, sizeof(tmp), "%s.tmp-%s", path, name) >= (int)sizeof(tmp))
    return xf__storage_fail(err, path, XF_ERANGE, "path is too long");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return xf__storage_fail(err, path, XF_EIO, "cannot create %s: %s", tmp,
                            xf__storage_errno(errno, why, sizeof(why)));
  const unsigned char *p = data;
  size_t off = 0;
  const char *step = NULL;
  int e = 0;
  while (off < len) {
    ssize_t w = write(fd, p + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? errno : EIO;
      step = "write";
      break;
    }
    off += (size_t)w;
  }
  /* open() applied the umask; the caller's mode is what the file must have. */
  if (!step && fchmod(fd, mode) != 0) e = errno, step = "chmod";
  if (!step && fsync(fd) != 0) e = errno, step = "fsync";
  if (close(fd) != 0 && !step) e = errno, step = "close";
  if (!step && rename(tmp, path) != 0) e = errno, step = "rename";
  if (step) {
    unlink(tmp);
    return xf__storage_fail(err, path, XF_EIO, "%s failed: %s", step,
                            xf__storage_errno(e, why, sizeof(why)));
  }
  if ((e = xf__storage_fsync_parent(path)) != 0)
    return xf__storage_fail(err, path, XF_EIO, "the file is written but its directory could "
                            "not be flushed: %s", xf__storage_errno(e, why, sizeof(why)));
  return XF_OK;
}

xf_err xf_file_read_text(const char *path, size_t max_bytes, char **text, size_t *len,
                         xf_errctx *err) {
  *text = NULL;
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return xf__storage_fail(err, path, XF_EIO, "cannot open: %s", strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = xf_malloc(cap);
  xf_err rc = buf ? XF_OK : xf__storage_fail(err, path, XF_ENOMEM, "out of memory");
  while (rc == XF_OK) {
    if (cap - n < 2) {
      if (cap > max_bytes) {
        rc = xf__storage_fail(err, path, XF_ERANGE, "larger than %zu bytes", max_bytes);
        break;
      }
      char *bigger = xf_malloc(cap * 2);
      if (!bigger) {
        rc = xf__storage_fail(err, path, XF_ENOMEM, "out of memory");
        break;
      }
      memcpy(bigger, buf, n);
      xf_free(buf);
      buf = bigger;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) rc = xf__storage_fail(err, path, XF_EIO, "read failed");
      break;
    }
  }
  fclose(f);
  if (rc == XF_OK && n > max_bytes)
    rc = xf__storage_fail(err, path, XF_ERANGE, "larger than %zu bytes", max_bytes);
  if (rc != XF_OK) {
    xf_free(buf);
    return rc;
  }
  buf[n] = '\0';
  *text = buf;
  if (len) *len = n;
  return XF_OK;
}
