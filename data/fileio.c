/* SPDX-License-Identifier: Apache-2.0 */
/* Whole-file reading and in-memory gunzip for the dataset readers, with every
 * allocation (zlib's included) going through xf_malloc. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "data/dataset_internal.h"

xf_err xf__data_fail(xf_errctx *err, const char *file, xf_err code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  xf_vfail_in_file(err, code, file, NULL, fmt, ap);
  va_end(ap);
  return code;
}

int xf__is_gzip(const uint8_t *data, size_t len) {
  return len >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

void xf__printable(char *dst, size_t dst_len, const char *src, size_t src_len) {
  if (dst_len == 0) return;
  const size_t keep = 40; /* enough to recognise a field, short enough for a line */
  size_t n = src_len < keep ? src_len : keep;
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < dst_len; i++) {
    unsigned char ch = (unsigned char)src[i];
    dst[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
  }
  if (src_len > keep)
    for (int i = 0; i < 3 && o + 1 < dst_len; i++) dst[o++] = '.';
  dst[o] = '\0';
}

static voidpf xf__zalloc(voidpf opaque, uInt items, uInt size) {
  (void)opaque;
  return xf_mallocarray(items, size);
}

static void xf__zfree(voidpf opaque, voidpf p) {
  (void)opaque;
  xf_free(p);
}

/* zlib counts in uInt; hand it at most this much at a time. */
#define XF__Z_CHUNK ((size_t)1 << 30)

xf_err xf__gunzip(const uint8_t *in, size_t in_len, const char *name, uint64_t max_out,
                  uint8_t **out, size_t *out_len, xf_errctx *err) {
  *out = NULL;
  *out_len = 0;
  /* Start from the size the last member's trailer states (ISIZE, mod 2^32),
   * bounded by deflate's best ratio (1032:1) so that a lying trailer cannot
   * make us reserve more than the data could ever hold. */
  uint64_t cap = 4096;
  if (in_len >= 18) {
    xf_cursor c = xf_cursor_make(in, in_len);
    uint8_t t[4];
    if (xf_cursor_skip(&c, in_len - 4) == XF_OK && xf_cursor_bytes(&c, t, 4) == XF_OK) {
      uint64_t isize = (uint64_t)t[0] | (uint64_t)t[1] << 8 | (uint64_t)t[2] << 16 |
                       (uint64_t)t[3] << 24;
      uint64_t bound = (uint64_t)in_len * 1032 + 64;
      if (isize > bound) isize = bound;
      if (isize + 1 > cap) cap = isize + 1; /* +1: reaching the end needs no regrowth */
    }
  }
  if (cap > max_out + 1) cap = max_out + 1;

  z_stream zs;
  memset(&zs, 0, sizeof(zs));
  zs.zalloc = xf__zalloc;
  zs.zfree = xf__zfree;
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    return xf__data_fail(err, name, XF_ENOMEM, "out of memory starting to inflate the gzip data");
  uint8_t *buf = xf_malloc((size_t)cap);
  if (!buf) {
    inflateEnd(&zs);
    return xf__data_fail(err, name, XF_ENOMEM, "out of memory inflating the gzip data");
  }

  size_t in_off = 0, len = 0;
  xf_err rc = XF_OK;
  for (;;) {
    if (zs.avail_in == 0 && in_off < in_len) {
      size_t take = in_len - in_off < XF__Z_CHUNK ? in_len - in_off : XF__Z_CHUNK;
      xf_cursor c = xf_cursor_make(in, in_len);
      const uint8_t *p;
      if (xf_cursor_skip(&c, in_off) != XF_OK || xf_cursor_view(&c, &p, take) != XF_OK) {
        rc = xf__data_fail(err, name, XF_EINTERNAL, "gzip input cursor out of step");
        break;
      }
      zs.next_in = (Bytef *)p;
      zs.avail_in = (uInt)take;
      in_off += take;
    }
    if (len == cap) {
      if (len > max_out) {
        rc = xf__data_fail(err, name, XF_ERANGE,
                           "the gzip data inflates to more than %llu bytes, more than xfed "
                           "reads from one dataset file",
                           (unsigned long long)max_out);
        break;
      }
      uint64_t ncap = cap * 2;
      if (ncap > max_out + 1) ncap = max_out + 1;
      uint8_t *nb = xf_realloc(buf, (size_t)ncap);
      if (!nb) {
        rc = xf__data_fail(err, name, XF_ENOMEM, "out of memory inflating the gzip data");
        break;
      }
      buf = nb;
      cap = ncap;
    }
    size_t room = (size_t)cap - len < XF__Z_CHUNK ? (size_t)cap - len : XF__Z_CHUNK;
    zs.next_out = buf + len;
    zs.avail_out = (uInt)room;
    int zr = inflate(&zs, Z_NO_FLUSH);
    len += room - zs.avail_out;
    if (zr == Z_STREAM_END) {
      size_t left = zs.avail_in + (in_len - in_off);
      if (left == 0) break;
      /* Another gzip member follows (what `cat a.gz b.gz` makes), or junk. */
      xf_cursor c = xf_cursor_make(in, in_len);
      const uint8_t *p;
      if (xf_cursor_skip(&c, in_len - left) != XF_OK || xf_cursor_view(&c, &p, left) != XF_OK ||
          !xf__is_gzip(p, left)) {
        rc = xf__data_fail(err, name, XF_EFORMAT,
                           "%zu bytes of trailing data after the gzip stream: the file is "
                           "damaged; download it again",
                           left);
        break;
      }
      if (inflateReset(&zs) != Z_OK) {
        rc = xf__data_fail(err, name, XF_EINTERNAL, "inflateReset failed");
        break;
      }
      continue;
    }
    if (zr == Z_MEM_ERROR) {
      rc = xf__data_fail(err, name, XF_ENOMEM, "out of memory inflating the gzip data");
      break;
    }
    if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT || zr == Z_STREAM_ERROR) {
      rc = xf__data_fail(err, name, XF_EINTEGRITY,
                         "the gzip data is corrupt (%s) after %zu bytes: download the file again",
                         zs.msg ? zs.msg : "bad data", len);
      break;
    }
    /* Z_OK or Z_BUF_ERROR: more output room or more input is needed. */
    if (zs.avail_out != 0 && zs.avail_in == 0 && in_off == in_len) {
      rc = xf__data_fail(err, name, XF_ETRUNCATED,
                         "the gzip stream ends early (after %zu inflated bytes): the file is "
                         "truncated; download it again",
                         len);
      break;
    }
  }
  inflateEnd(&zs);
  if (rc != XF_OK) {
    xf_free(buf);
    return rc;
  }
  *out = buf;
  *out_len = len;
  return XF_OK;
}

xf_err xf__gunzip_head(const uint8_t *in, size_t in_len, const char *name, uint8_t *out,
                       size_t want, size_t *got, xf_errctx *err) {
  *got = 0;
  z_stream zs;
  memset(&zs, 0, sizeof(zs));
  zs.zalloc = xf__zalloc;
  zs.zfree = xf__zfree;
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    return xf__data_fail(err, name, XF_ENOMEM, "out of memory starting to inflate the gzip data");
  xf_cursor c = xf_cursor_make(in, in_len);
  const uint8_t *p;
  size_t take = in_len < XF__Z_CHUNK ? in_len : XF__Z_CHUNK;
  xf_err rc = XF_OK;
  if (xf_cursor_view(&c, &p, take) != XF_OK) {
    rc = xf__data_fail(err, name, XF_EINTERNAL, "gzip input cursor out of step");
  } else {
    zs.next_in = (Bytef *)p;
    zs.avail_in = (uInt)take;
    zs.next_out = out;
    zs.avail_out = (uInt)want;
    /* Stops once `want` bytes are out (or the member ends): the rest of the
     * stream is never inflated here. */
    int zr = Z_OK;
    while (zr == Z_OK && zs.avail_out > 0) zr = inflate(&zs, Z_NO_FLUSH);
    if (zr == Z_MEM_ERROR)
      rc = xf__data_fail(err, name, XF_ENOMEM, "out of memory inflating the gzip data");
    else if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT || zr == Z_STREAM_ERROR)
      rc = xf__data_fail(err, name, XF_EINTEGRITY,
                         "the gzip data is corrupt (%s) at its start: download the file again",
                         zs.msg ? zs.msg : "bad data");
    *got = want - zs.avail_out;
  }
  inflateEnd(&zs);
  return rc;
}

xf_err xf__read_file_bytes(const char *path, uint8_t **out, size_t *out_len, xf_errctx *err) {
  *out = NULL;
  *out_len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    return xf__data_fail(err, path, e == ENOENT ? XF_ENOENT : XF_EIO, "cannot open: %s",
                         strerror(e));
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return xf__data_fail(err, path, XF_EIO, "not a regular file");
  }
  if ((uint64_t)st.st_size > XF_DATASET_MAX_FILE_BYTES) {
    fclose(f);
    return xf__data_fail(err, path, XF_ERANGE,
                         "%lld bytes, more than the 4 GiB xfed reads from one dataset file",
                         (long long)st.st_size);
  }
  size_t size = (size_t)st.st_size;
  uint8_t *raw = xf_malloc(size);
  if (!raw) {
    fclose(f);
    return xf__data_fail(err, path, XF_ENOMEM, "out of memory reading %zu bytes", size);
  }
  size_t got = size ? fread(raw, 1, size, f) : 0;
  int read_error = ferror(f);
  fclose(f);
  if (read_error || got != size) {
    xf_free(raw);
    return xf__data_fail(err, path, XF_EIO, "read %zu of %zu bytes: the file is unreadable or "
                         "changed while being read", got, size);
  }
  *out = raw;
  *out_len = size;
  return XF_OK;
}

xf_err xf__read_data_file(const char *path, uint64_t max_out, uint8_t **out, size_t *out_len,
                          xf_errctx *err) {
  uint8_t *raw = NULL;
  size_t size = 0;
  XF_GUARD(xf__read_file_bytes(path, &raw, &size, err));
  if (!xf__is_gzip(raw, size)) {
    *out = raw;
    *out_len = size;
    return XF_OK;
  }
  xf_err rc = xf__gunzip(raw, size, path, max_out, out, out_len, err);
  xf_free(raw);
  return rc;
}
