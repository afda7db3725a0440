/* SPDX-License-Identifier: Apache-2.0 */
/* Durable whole-file writes by temporary file, fsync and rename. */
#include "storage/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

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
