/* SPDX-License-Identifier: Apache-2.0 */
/* Durable whole-file writes by temporary file, fsync and rename, which
 * replace only regular files; whole reads of small text files. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stdint.h>
#include <sys/random.h>

#include "base/alloc.h"

/* Small writes gather here before they reach the file; 64 KiB keeps the
 * number of write(2) calls for a CSV shard low without holding much. */
#define XF_FILE_BUFFER (64 * 1024)

struct xf_file_writer {
  char *path;         /* the target (an owned copy) */
  char *tmp;          /* the temporary sibling, PATH.tmp-<hex> */
  int fd;             /* tmp, open for writing; -1 once closed */
  mode_t mode;        /* what the target gets on commit */
  xf_err failed;      /* the first failed write, or XF_OK */
  unsigned char *buf; /* XF_FILE_BUFFER bytes, allocated on the first small write */
  size_t used;
};

/* A failure at path: records it as the file at fault and clears a field left
 * over from an earlier failure. Returns code; err may be NULL. */
static xf_err file_fail(xf_errctx *err, const char *path, xf_err code, const char *fmt, ...)
    XF_PRINTF(4, 5);
static xf_err file_fail(xf_errctx *err, const char *path, xf_err code, const char *fmt, ...) {
  if (!err) return code;
  xf_errctx_file(err, path);
  err->field[0] = '\0';
  va_list ap;
  va_start(ap, fmt);
  xf_vfail(err, code, fmt, ap);
  va_end(ap);
  return code;
}

/* The message of errno value e in buf (strerror's buffer is not safe
 * across threads). Returns buf. */
static const char *file_errno(int e, char *buf, size_t n) {
  if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "errno %d", e);
  return buf;
}

int xf_file_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int rc = 0;
  /* Some filesystems refuse fsync on directories (EINVAL) because their
   * metadata is already synchronous; that is not a failure to persist. */
  if (fsync(fd) != 0 && errno != EINVAL) rc = errno;
  close(fd);
  return rc;
}

int xf_file_fsync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return xf_file_fsync_dir(".");
  if (slash == path) return xf_file_fsync_dir("/");
  size_t n = (size_t)(slash - path);
  char dir[PATH_MAX];
  if (n >= sizeof(dir)) return ENAMETOOLONG;
  memcpy(dir, path, n);
  dir[n] = '\0';
  return xf_file_fsync_dir(dir);
}

xf_err xf_file_random_name(char out[XF_FILE_NAME_HEX], xf_errctx *err) {
  uint8_t raw[(XF_FILE_NAME_HEX - 1) / 2];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return xf_fail(err, XF_EINTERNAL,
                     "the kernel's random source cannot be read (getrandom: %s), so no random "
                     "file name can be drawn", strerror(n < 0 ? errno : EIO));
    got += (size_t)n;
  }
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof(raw); i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[XF_FILE_NAME_HEX - 1] = '\0';
  explicit_bzero(raw, sizeof(raw));
  return XF_OK;
}

const char *xf_file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

/* The refusal of a target that is not a regular file, saying what it is. */
static xf_err refuse_kind(const char *path, mode_t mode, xf_errctx *err) {
  if (S_ISLNK(mode)) {
    char to[256];
    ssize_t n = readlink(path, to, sizeof(to) - 1);
    to[n > 0 ? n : 0] = '\0';
    return file_fail(err, path, XF_EEXISTS,
                            "is a symbolic link%s%.200s; xfed never writes through a link and "
                            "replaces only regular files: give the real path, or remove the "
                            "link", n > 0 ? " to " : "", to);
  }
  if (S_ISDIR(mode))
    return file_fail(err, path, XF_EEXISTS,
                            "is a directory; give the path of a file (xfed replaces only "
                            "regular files)");
  return file_fail(err, path, XF_EEXISTS,
                          "is %s, not a regular file; xfed replaces only regular files: "
                          "remove it or choose another path", xf_file_kind(mode));
}

xf_err xf_file_check_target(const char *path, xf_errctx *err) {
  struct stat st;
  char why[128];
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return XF_OK;
    return file_fail(err, path, XF_EIO, "cannot inspect it: %s",
                            file_errno(errno, why, sizeof(why)));
  }
  return S_ISREG(st.st_mode) ? XF_OK : refuse_kind(path, st.st_mode, err);
}

/* write(2) until all of len is written; 0 or an errno value. */
static int write_all(int fd, const void *data, size_t len) {
  const unsigned char *p = data;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

static void writer_free(xf_file_writer *w) {
  if (w->buf) {
    /* Keys pass through here too. */
    explicit_bzero(w->buf, XF_FILE_BUFFER);
    xf_free(w->buf);
  }
  xf_free(w->tmp);
  xf_free(w->path);
  xf_free(w);
}

/* Writes straight to the temporary file; a failure sticks to the writer. */
static xf_err put(xf_file_writer *w, const void *data, size_t len, xf_errctx *err) {
  int e = write_all(w->fd, data, len);
  if (e == 0) return XF_OK;
  char why[128];
  w->failed = XF_EIO;
  return file_fail(err, w->path, XF_EIO, "write failed: %s",
                          file_errno(e, why, sizeof(why)));
}

static xf_err flush(xf_file_writer *w, xf_errctx *err) {
  if (w->used == 0) return XF_OK;
  size_t n = w->used;
  w->used = 0;
  return put(w, w->buf, n, err);
}

xf_err xf_file_writer_begin(const char *path, mode_t mode, xf_file_writer **out,
                            xf_errctx *err) {
  *out = NULL;
  XF_GUARD(xf_file_check_target(path, err));
  char name[XF_FILE_NAME_HEX], why[128];
  XF_GUARD(xf_file_random_name(name, err));
  size_t n = strlen(path) + sizeof(".tmp-") + sizeof(name);
  if (n > PATH_MAX) return file_fail(err, path, XF_ERANGE, "path is too long");
  xf_file_writer *w = xf_calloc(1, sizeof(*w));
  if (w) w->path = xf_strdup(path);
  if (w && w->path) w->tmp = xf_malloc(n);
  if (!w || !w->tmp) {
    if (w) writer_free(w);
    return file_fail(err, path, XF_ENOMEM, "out of memory");
  }
  snprintf(w->tmp, n, "%s.tmp-%s", path, name);
  w->mode = mode;
  /* 0600 until commit: a key is never readable by others, not even half. */
  w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (w->fd < 0) {
    int e = errno;
    xf_err rc = file_fail(err, path, XF_EIO, "cannot create %s: %s", w->tmp,
                                 file_errno(e, why, sizeof(why)));
    writer_free(w);
    return rc;
  }
  *out = w;
  return XF_OK;
}

xf_err xf_file_writer_write(xf_file_writer *w, const void *data, size_t len, xf_errctx *err) {
  if (w->failed != XF_OK)
    return file_fail(err, w->path, w->failed, "an earlier write to it failed");
  if (len == 0) return XF_OK;
  if (w->used + len > XF_FILE_BUFFER) XF_GUARD(flush(w, err));
  if (len >= XF_FILE_BUFFER) return put(w, data, len, err);
  if (!w->buf && !(w->buf = xf_malloc(XF_FILE_BUFFER))) {
    w->failed = XF_ENOMEM;
    return file_fail(err, w->path, XF_ENOMEM, "out of memory");
  }
  memcpy(w->buf + w->used, data, len);
  w->used += len;
  return XF_OK;
}

xf_err xf_file_writer_commit(xf_file_writer *w, xf_errctx *err) {
  char why[128];
  xf_err rc = w->failed != XF_OK
                  ? file_fail(err, w->path, w->failed, "an earlier write to it failed")
                  : flush(w, err);
  const char *step = NULL;
  int e = 0;
  /* open() applied the umask; the caller's mode is what the file must have. */
  if (rc == XF_OK && fchmod(w->fd, w->mode) != 0) e = errno, step = "chmod";
  if (rc == XF_OK && !step && fsync(w->fd) != 0) e = errno, step = "fsync";
  if (close(w->fd) != 0 && rc == XF_OK && !step) e = errno, step = "close";
  w->fd = -1;
  if (rc == XF_OK && step)
    rc = file_fail(err, w->path, XF_EIO, "%s failed: %s", step,
                          file_errno(e, why, sizeof(why)));
  /* Whatever took the target's place while this was written is not
   * replaced either. */
  if (rc == XF_OK) rc = xf_file_check_target(w->path, err);
  if (rc == XF_OK && rename(w->tmp, w->path) != 0)
    rc = file_fail(err, w->path, XF_EIO, "rename failed: %s",
                          file_errno(errno, why, sizeof(why)));
  if (rc != XF_OK) {
    unlink(w->tmp);
    writer_free(w);
    return rc;
  }
  if ((e = xf_file_fsync_parent(w->path)) != 0)
    rc = file_fail(err, w->path, XF_EIO, "the file is written but its directory could "
                          "not be flushed: %s", file_errno(e, why, sizeof(why)));
  writer_free(w);
  return rc;
}

void xf_file_writer_abort(xf_file_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  unlink(w->tmp);
  writer_free(w);
}

xf_err xf_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                            xf_errctx *err) {
  xf_file_writer *w = NULL;
  XF_GUARD(xf_file_writer_begin(path, mode, &w, err));
  /* Unbuffered: the bytes (a key, perhaps) are not copied. */
  xf_err rc = put(w, data, len, err);
  if (rc != XF_OK) {
    xf_file_writer_abort(w);
    return rc;
  }
  return xf_file_writer_commit(w, err);
}

xf_err xf_file_read_text(const char *path, size_t max_bytes, char **text, size_t *len,
                         xf_errctx *err) {
  *text = NULL;
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return file_fail(err, path, XF_EIO, "cannot open: %s", strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = xf_malloc(cap);
  xf_err rc = buf ? XF_OK : file_fail(err, path, XF_ENOMEM, "out of memory");
  while (rc == XF_OK) {
    if (cap - n < 2) {
      if (cap > max_bytes) {
        rc = file_fail(err, path, XF_ERANGE, "larger than %zu bytes", max_bytes);
        break;
      }
      char *bigger = xf_malloc(cap * 2);
      if (!bigger) {
        rc = file_fail(err, path, XF_ENOMEM, "out of memory");
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
      if (ferror(f)) rc = file_fail(err, path, XF_EIO, "read failed");
      break;
    }
  }
  fclose(f);
  if (rc == XF_OK && n > max_bytes)
    rc = file_fail(err, path, XF_ERANGE, "larger than %zu bytes", max_bytes);
  if (rc != XF_OK) {
    xf_free(buf);
    return rc;
  }
  buf[n] = '\0';
  *text = buf;
  if (len) *len = n;
  return XF_OK;
}
