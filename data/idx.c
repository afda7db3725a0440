/* SPDX-License-Identifier: Apache-2.0 */
/* The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
 * a strict reader over xf_cursor and a gzip writer for shards. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "data/dataset_internal.h"
#include "base/file.h"

#define XF__IDX_UBYTE 0x08
#define XF__IDX_MAX_DIMS 4

typedef struct idx_array {
  uint32_t ndims;
  uint32_t dims[XF__IDX_MAX_DIMS];
  uint64_t count; /* product of dims: payload bytes */
  const uint8_t *payload;
} idx_array;

static const char *idx_type_name(uint8_t type) {
  switch (type) {
  case 0x08: return "unsigned byte";
  case 0x09: return "signed byte";
  case 0x0B: return "16-bit integer";
  case 0x0C: return "32-bit integer";
  case 0x0D: return "32-bit float";
  case 0x0E: return "64-bit float";
  default: return NULL;
  }
}

/* "60000 images of 28x28" or "60000 labels". */
static void idx_describe(const idx_array *a, bool labels, char *buf, size_t n) {
  if (labels) {
    snprintf(buf, n, "%u labels", a->dims[0]);
  } else if (a->ndims == 3) {
    snprintf(buf, n, "%u images of %ux%u", a->dims[0], a->dims[1], a->dims[2]);
  } else {
    snprintf(buf, n, "%u images of %ux%ux%u", a->dims[0], a->dims[1], a->dims[2], a->dims[3]);
  }
}

/* Reads and checks the header and the payload size of one IDX file. */
static xf_err idx_read_array(const uint8_t *data, size_t len, const char *name, bool labels,
                             idx_array *a, xf_errctx *err) {
  memset(a, 0, sizeof(*a));
  const char *kind = labels ? "label" : "image";
  xf_cursor c = xf_cursor_make(data, len);
  uint8_t magic[4];
  if (xf_cursor_bytes(&c, magic, 4) != XF_OK)
    return xf__data_fail(err, name, XF_ETRUNCATED,
                         "%zu bytes: too short to be an IDX %s file; download it again", len,
                         kind);
  if (magic[0] != 0 || magic[1] != 0)
    return xf__data_fail(err, name, XF_EFORMAT,
                         "not an IDX %s file: it starts with %02x %02x %02x %02x, not 00 00 08 %s",
                         kind, magic[0], magic[1], magic[2], magic[3], labels ? "01" : "03");
  if (magic[2] != XF__IDX_UBYTE) {
    const char *tn = idx_type_name(magic[2]);
    if (tn)
      return xf__data_fail(err, name, XF_EUNSUPPORTED,
                           "IDX element type 0x%02X (%s) is not supported: xfed reads IDX files "
                           "of unsigned bytes (type 0x08)",
                           magic[2], tn);
    return xf__data_fail(err, name, XF_EFORMAT,
                         "0x%02X is not an IDX element type (magic %02x %02x %02x %02x): not an "
                         "IDX file, or a damaged one",
                         magic[2], magic[0], magic[1], magic[2], magic[3]);
  }
  a->ndims = magic[3];
  if (labels && a->ndims != 1)
    return xf__data_fail(err, name, XF_EFORMAT,
                         "has %u dimensions but an IDX label file has 1 (magic 00 00 08 01)%s",
                         a->ndims, a->ndims == 3 ? ": is this an image file?" : "");
  if (!labels && a->ndims != 3 && a->ndims != 4)
    return xf__data_fail(err, name, XF_EFORMAT,
                         "has %u dimension%s but an IDX image file has 3 (images x rows x "
                         "columns, magic 00 00 08 03) or 4 (with channels, 00 00 08 04)%s",
                         a->ndims, a->ndims == 1 ? "" : "s",
                         a->ndims == 1 ? ": is this a label file?" : "");
  static const char *const dim_names[] = {"count", "rows", "columns", "channels"};
  uint64_t count = 1;
  for (uint32_t i = 0; i < a->ndims; i++) {
    if (xf_cursor_u32be(&c, &a->dims[i]) != XF_OK)
      return xf__data_fail(err, name, XF_ETRUNCATED,
                           "the header is cut short after %zu bytes: the file is truncated; "
                           "download it again",
                           len);
    if (a->dims[i] == 0)
      return xf__data_fail(err, name, XF_ERANGE,
                           "dimension %u (%s) is 0: the file holds no %ss", i + 1,
                           labels ? "count" : dim_names[i], kind);
    /* Stop multiplying once over the cap, so the product cannot overflow. */
    if (count <= XF_DATASET_MAX_VALUES) count *= a->dims[i];
  }
  char what[96];
  if (count > XF_DATASET_MAX_VALUES) {
    idx_describe(a, labels, what, sizeof(what));
    return xf__data_fail(err, name, XF_ERANGE,
                         "header says %s, more than the %llu values (1 GiB of bytes, 4 GiB as "
                         "floats in memory) xfed accepts in one file",
                         what, (unsigned long long)XF_DATASET_MAX_VALUES);
  }
  a->count = count;
  size_t rest = xf_cursor_remaining(&c);
  if (rest != count) {
    idx_describe(a, labels, what, sizeof(what));
    if (rest < count)
      return xf__data_fail(err, name, XF_ETRUNCATED,
                           "header says %s (%llu bytes) but %zu bytes follow: the file is "
                           "truncated; download it again",
                           what, (unsigned long long)count, rest);
    return xf__data_fail(err, name, XF_EFORMAT,
                         "header says %s (%llu bytes) but %zu bytes follow: %llu bytes of "
                         "trailing data; the file is damaged or not what its header says",
                         what, (unsigned long long)count, rest,
                         (unsigned long long)(rest - count));
  }
  return xf_cursor_view(&c, &a->payload, (size_t)count) == XF_OK
             ? XF_OK
             : xf__data_fail(err, name, XF_EINTERNAL, "IDX cursor out of step");
}

/* Parses plain (inflated) image and label files into out. */
static xf_err idx_parse_plain(const uint8_t *img, size_t img_len, const char *img_name,
                              const uint8_t *lbl, size_t lbl_len, const char *lbl_name,
                              xf_dataset *out, xf_errctx *err) {
  idx_array ia, la;
  XF_GUARD(idx_read_array(img, img_len, img_name, false, &ia, err));
  XF_GUARD(idx_read_array(lbl, lbl_len, lbl_name, true, &la, err));
  if (la.dims[0] != ia.dims[0])
    return xf__data_fail(err, lbl_name, XF_EFORMAT,
                         "has %u labels but %s has %u images: the two files do not belong "
                         "together",
                         la.dims[0], img_name, ia.dims[0]);
  uint32_t c = ia.ndims == 4 ? ia.dims[3] : 1;
  xf_err rc = xf_dataset_alloc(out, ia.dims[0], ia.dims[1], ia.dims[2], c, 1, err);
  if (rc != XF_OK) {
    if (err) xf_errctx_file(err, img_name);
    return rc;
  }
  float scale[256];
  for (int i = 0; i < 256; i++) scale[i] = (float)i / 255.0f;
  xf_cursor px = xf_cursor_make(ia.payload, (size_t)ia.count);
  const uint8_t *p;
  if (xf_cursor_view(&px, &p, (size_t)ia.count) != XF_OK) {
    xf_dataset_free(out);
    return xf__data_fail(err, img_name, XF_EINTERNAL, "IDX cursor out of step");
  }
  for (uint64_t i = 0; i < ia.count; i++) out->x[i] = scale[p[i]];
  xf_cursor lc = xf_cursor_make(la.payload, (size_t)la.count);
  if (xf_cursor_view(&lc, &p, (size_t)la.count) != XF_OK) {
    xf_dataset_free(out);
    return xf__data_fail(err, lbl_name, XF_EINTERNAL, "IDX cursor out of step");
  }
  uint32_t max = 0;
  for (uint32_t i = 0; i < out->n; i++) {
    out->y[i] = p[i];
    if (p[i] > max) max = p[i];
  }
  out->classes = max + 1;
  return XF_OK;
}

/* The size an IDX header declares for its whole file (header and payload),
 * from the first bytes of the file; false when they are not a complete
 * header the reader could accept (idx_read_array then says why). */
static bool idx_declared_size(const uint8_t *head, size_t len, uint64_t *out) {
  xf_cursor c = xf_cursor_make(head, len);
  uint8_t magic[4];
  if (xf_cursor_bytes(&c, magic, 4) != XF_OK || magic[0] != 0 || magic[1] != 0 ||
      magic[2] != XF__IDX_UBYTE || magic[3] < 1 || magic[3] > XF__IDX_MAX_DIMS)
    return false;
  uint64_t count = 1;
  for (uint32_t i = 0; i < magic[3]; i++) {
    uint32_t d;
    if (xf_cursor_u32be(&c, &d) != XF_OK || d == 0) return false;
    count *= d;
    if (count > XF_DATASET_MAX_VALUES) return false;
  }
  *out = 4 + 4 * (uint64_t)magic[3] + count;
  return true;
}

/* How far compressed data whose first bytes are no IDX header is inflated
 * (to find damage in the stream, which explains a garbled header better
 * than the header itself) before the header's own error is reported. */
#define XF__IDX_PROBE_BYTES ((uint64_t)1 << 20)

/* Points *plain at the inflated form of data (a new buffer in *owned) or at
 * data itself when it is not gzip. Compressed data is inflated only as far
 * as its IDX header declares: a file whose gzip stream holds more (a
 * "bomb" of zeros behind a small header) is refused as soon as the stream
 * passes that size, so memory stays within the declared size. A header
 * the reader refuses anyway is inflated no further than
 * XF__IDX_PROBE_BYTES. */
static xf_err idx_inflate(const uint8_t *data, size_t len, const char *name,
                          const uint8_t **plain, size_t *plain_len, uint8_t **owned,
                          xf_errctx *err) {
  *owned = NULL;
  if (!xf__is_gzip(data, len)) {
    *plain = data;
    *plain_len = len;
    return XF_OK;
  }
  uint8_t head[4 + 4 * XF__IDX_MAX_DIMS];
  size_t got = 0;
  XF_GUARD(xf__gunzip_head(data, len, name, head, sizeof(head), &got, err));
  uint64_t declared;
  if (!idx_declared_size(head, got, &declared)) {
    xf_err rc = xf__gunzip(data, len, name, XF__IDX_PROBE_BYTES, owned, plain_len, err);
    if (rc != XF_ERANGE) {
      *plain = *owned;
      return rc;
    }
    uint8_t *copy = xf_malloc(got ? got : 1);
    if (!copy) return xf__data_fail(err, name, XF_ENOMEM, "out of memory reading the header");
    memcpy(copy, head, got);
    *owned = copy;
    *plain = copy;
    *plain_len = got;
    return XF_OK;
  }
  xf_err rc = xf__gunzip(data, len, name, declared, owned, plain_len, err);
  if (rc == XF_ERANGE)
    return xf__data_fail(err, name, XF_ERANGE,
                         "the gzip data inflates to more than the %llu bytes its IDX header "
                         "declares (%llu header bytes and the payload): the file is damaged or "
                         "not what its header says; nothing past that size was inflated",
                         (unsigned long long)declared,
                         (unsigned long long)(4 + 4 * (uint64_t)head[3]));
  XF_GUARD(rc);
  *plain = *owned;
  return XF_OK;
}

xf_err xf_idx_parse(const void *images, size_t images_len, const char *images_name,
                    const void *labels, size_t labels_len, const char *labels_name,
                    xf_dataset *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (!images_name) images_name = "images";
  if (!labels_name) labels_name = "labels";
  const uint8_t *img = NULL, *lbl = NULL;
  size_t img_len = 0, lbl_len = 0;
  uint8_t *img_owned = NULL, *lbl_owned = NULL;
  xf_err rc = idx_inflate(images, images_len, images_name, &img, &img_len, &img_owned, err);
  if (rc == XF_OK)
    rc = idx_inflate(labels, labels_len, labels_name, &lbl, &lbl_len, &lbl_owned, err);
  if (rc == XF_OK)
    rc = idx_parse_plain(img, img_len, images_name, lbl, lbl_len, labels_name, out, err);
  xf_free(lbl_owned);
  xf_free(img_owned);
  return rc;
}

xf_err xf_idx_read(const char *images_path, const char *labels_path, xf_dataset *out,
                   xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  /* Read as they are, then inflated only as far as their headers declare. */
  uint8_t *img = NULL, *lbl = NULL;
  size_t img_len = 0, lbl_len = 0;
  xf_err rc = xf__read_file_bytes(images_path, &img, &img_len, err);
  if (rc == XF_OK) rc = xf__read_file_bytes(labels_path, &lbl, &lbl_len, err);
  if (rc == XF_OK)
    rc = xf_idx_parse(img, img_len, images_path, lbl, lbl_len, labels_path, out, err);
  xf_free(lbl);
  xf_free(img);
  return rc;
}

/* ---- writer ---------------------------------------------------------------- */

static void put_u32be(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* Compresses n bytes at buf (NULL when finishing) into w; flush is Z_NO_FLUSH
 * or Z_FINISH. */
static xf_err gz_put(z_stream *z, xf_file_writer *w, const char *path, const void *buf,
                     size_t n, int flush, xf_errctx *err) {
  uint8_t out[16384];
  z->next_in = (Bytef *)(uintptr_t)buf;
  z->avail_in = (uInt)n;
  int zr;
  do {
    z->next_out = out;
    z->avail_out = sizeof(out);
    zr = deflate(z, flush);
    if (zr == Z_STREAM_ERROR)
      return xf__data_fail(err, path, XF_EINTERNAL, "gzip compression failed");
    XF_GUARD(xf_file_writer_write(w, out, sizeof(out) - z->avail_out, err));
  } while (z->avail_out == 0 || (flush == Z_FINISH && zr != Z_STREAM_END));
  return XF_OK;
}

/* Writes header then payload bytes produced by `fill` in chunks. */
typedef void (*idx_fill_fn)(const xf_dataset *ds, uint64_t from, uint8_t *dst, size_t n);

static void fill_pixels(const xf_dataset *ds, uint64_t from, uint8_t *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)(ds->x[from + i] * 255.0f + 0.5f);
}

static void fill_labels(const xf_dataset *ds, uint64_t from, uint8_t *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)ds->y[from + i];
}

/* A gzip file (what gzopen's "wb6" writes) through base/file.h. */
static xf_err idx_write_file(const char *path, const uint8_t *header, size_t header_len,
                             const xf_dataset *ds, uint64_t count, idx_fill_fn fill,
                             xf_errctx *err) {
  xf_file_writer *w = NULL;
  XF_GUARD(xf_file_writer_begin(path, 0644, &w, err));
  z_stream z;
  memset(&z, 0, sizeof(z));
  if (deflateInit2(&z, 6, Z_DEFLATED, MAX_WBITS + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    xf_file_writer_abort(w);
    return xf__data_fail(err, path, XF_ENOMEM, "cannot start gzip compression");
  }
  xf_err rc = gz_put(&z, w, path, header, header_len, Z_NO_FLUSH, err);
  uint8_t chunk[16384];
  for (uint64_t at = 0; rc == XF_OK && at < count; at += sizeof(chunk)) {
    size_t n = count - at < sizeof(chunk) ? (size_t)(count - at) : sizeof(chunk);
    fill(ds, at, chunk, n);
    rc = gz_put(&z, w, path, chunk, n, Z_NO_FLUSH, err);
  }
  if (rc == XF_OK) rc = gz_put(&z, w, path, NULL, 0, Z_FINISH, err);
  deflateEnd(&z);
  if (rc != XF_OK) {
    xf_file_writer_abort(w);
    return rc;
  }
  return xf_file_writer_commit(w, err);
}

xf_err xf_idx_write(const char *images_path, const char *labels_path, const xf_dataset *ds,
                    xf_errctx *err) {
  if (ds->n == 0 || ds->h == 0 || ds->w == 0 || ds->c == 0 ||
      ds->features != ds->h * ds->w * ds->c)
    return xf__data_fail(err, images_path, XF_EINVAL,
                         "cannot write an empty dataset or one of shape %ux%ux%u as IDX", ds->h,
                         ds->w, ds->c);
  if (ds->classes > XF_IDX_MAX_CLASSES)
    return xf__data_fail(err, labels_path, XF_ERANGE,
                         "%u classes: IDX label files hold at most 256; write CSV instead",
                         ds->classes);
  uint64_t count = (uint64_t)ds->n * ds->features;
  for (uint64_t i = 0; i < count; i++) {
    float v = ds->x[i];
    if (!(v >= 0.0f && v <= 1.0f))
      return xf__data_fail(err, images_path, XF_ERANGE,
                           "record %llu has value %g outside [0, 1]: IDX stores bytes as "
                           "value * 255; write CSV instead",
                           (unsigned long long)(i / ds->features + 1), (double)v);
  }
  for (uint32_t i = 0; i < ds->n; i++)
    if (ds->y[i] < 0 || (uint32_t)ds->y[i] >= ds->classes)
      return xf__data_fail(err, labels_path, XF_ERANGE,
                           "record %u has label %d outside [0, %u)", i + 1, ds->y[i],
                           ds->classes);
  uint8_t hdr[4 + 4 * XF__IDX_MAX_DIMS] = {0, 0, XF__IDX_UBYTE, 0};
  uint32_t ndims = ds->c == 1 ? 3 : 4;
  hdr[3] = (uint8_t)ndims;
  put_u32be(hdr + 4, ds->n);
  put_u32be(hdr + 8, ds->h);
  put_u32be(hdr + 12, ds->w);
  if (ndims == 4) put_u32be(hdr + 16, ds->c);
  XF_GUARD(idx_write_file(images_path, hdr, 4 + 4 * (size_t)ndims, ds, count, fill_pixels, err));
  uint8_t lhdr[8] = {0, 0, XF__IDX_UBYTE, 1};
  put_u32be(lhdr + 4, ds->n);
  xf_err rc = idx_write_file(labels_path, lhdr, sizeof(lhdr), ds, ds->n, fill_labels, err);
  if (rc != XF_OK) unlink(images_path);
  return rc;
}
