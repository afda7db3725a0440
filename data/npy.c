/* SPDX-License-Identifier: Apache-2.0 */
/* NumPy arrays as datasets: a strict .npy reader (the header's dict literal
 * parsed field by field, sizes checked against the bytes present before any
 * allocation), a small .npz (zip) reader with bounds on every offset, and a
 * .npy writer for shards. Format: numpy.lib.format, "NPY format" v1 to v3. */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "data/dataset_internal.h"
#include "base/file.h"

#define NPY_MAX_DIMS 4
/* numpy writes headers of a few dozen bytes; nothing legitimate is longer. */
#define NPY_MAX_HEADER 65536u
#define ZIP_MAX_ENTRIES 64u

typedef struct npy_array {
  char kind;         /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
  uint32_t itemsize; /* bytes per element */
  uint32_t ndims;
  uint64_t shape[NPY_MAX_DIMS];
  uint64_t count; /* product of shape */
  const uint8_t *data;
} npy_array;

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- the header's dict literal ---------------------------------------------------- */

typedef struct hdr_cursor {
  const char *s;
  size_t n, i;
} hdr_cursor;

static void hdr_space(hdr_cursor *h) {
  while (h->i < h->n && (h->s[h->i] == ' ' || h->s[h->i] == '\t')) h->i++;
}

static bool hdr_take(hdr_cursor *h, char ch) {
  hdr_space(h);
  if (h->i < h->n && h->s[h->i] == ch) {
    h->i++;
    return true;
  }
  return false;
}

/* A Python string literal in single or double quotes, no escapes. */
static bool hdr_string(hdr_cursor *h, char *out, size_t cap) {
  hdr_space(h);
  if (h->i >= h->n || (h->s[h->i] != '\'' && h->s[h->i] != '"')) return false;
  char q = h->s[h->i++];
  size_t o = 0;
  while (h->i < h->n && h->s[h->i] != q) {
    if (h->s[h->i] == '\\' || o + 1 >= cap) return false;
    out[o++] = h->s[h->i++];
  }
  if (h->i >= h->n) return false;
  h->i++;
  out[o] = '\0';
  return true;
}

static bool hdr_word(hdr_cursor *h, const char *w) {
  hdr_space(h);
  size_t k = strlen(w);
  if (h->n - h->i < k || memcmp(h->s + h->i, w, k) != 0) return false;
  h->i += k;
  return true;
}

/* A shape tuple: "()", "(5,)", "(5, 3)", "(5, 3,)". */
static bool hdr_shape(hdr_cursor *h, npy_array *a) {
  if (!hdr_take(h, '(')) return false;
  a->ndims = 0;
  for (;;) {
    hdr_space(h);
    if (hdr_take(h, ')')) return true;
    if (a->ndims == NPY_MAX_DIMS) return false;
    if (h->i >= h->n || !isdigit((unsigned char)h->s[h->i])) return false;
    uint64_t v = 0;
    int digits = 0;
    while (h->i < h->n && isdigit((unsigned char)h->s[h->i])) {
      if (++digits > 12) return false; /* beyond any size xfed accepts */
      v = v * 10 + (uint64_t)(h->s[h->i++] - '0');
    }
    a->shape[a->ndims++] = v;
    if (hdr_take(h, ',')) continue;
    /* "(5)" is the number 5 in Python, not a tuple: one element needs a comma. */
    return a->ndims > 1 && hdr_take(h, ')');
  }
}

static xf_err npy_descr(const char *d, const char *name, npy_array *a, xf_errctx *err) {
  /* '<f4', '|u1', '=i8' (native is little-endian on every platform xfed runs on
   * only when numpy says so: '=' and big-endian '>' are refused). */
  size_t len = strlen(d);
  char order = len ? d[0] : 0;
  char kind = len > 1 ? d[1] : 0;
  char *end = NULL;
  long size = len > 2 ? strtol(d + 2, &end, 10) : 0;
  if (len < 3 || !end || *end != '\0' || (order != '<' && order != '|' && order != '>') ||
      !strchr("fiub", kind) || kind == 0)
    return xf__data_fail(err, name, XF_EUNSUPPORTED,
                         "dtype '%s' is not supported: xfed reads float32/float64 ('<f4', "
                         "'<f8'), integer ('<i1'..'<i8', '|u1'..'<u8') and bool arrays",
                         d);
  if (order == '>' && size > 1)
    return xf__data_fail(err, name, XF_EUNSUPPORTED,
                         "dtype '%s' is big-endian: save the array little-endian "
                         "(arr.astype('<%c%ld'))",
                         d, kind, size);
  bool ok = (kind == 'f' && (size == 4 || size == 8)) ||
            ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
            (kind == 'b' && size == 1);
  if (!ok)
    return xf__data_fail(err, name, XF_EUNSUPPORTED,
                         "dtype '%s' is not supported: xfed reads float32/float64, 8 to 64-bit "
                         "integers and bool",
                         d);
  a->kind = kind;
  a->itemsize = (uint32_t)size;
  return XF_OK;
}

static xf_err npy_header(const char *s, size_t n, const char *name, npy_array *a,
                         xf_errctx *err) {
  hdr_cursor h = {s, n, 0};
  bool seen_descr = false, seen_order = false, seen_shape = false;
  char key[32], descr[16];
  if (!hdr_take(&h, '{'))
    return xf__data_fail(err, name, XF_EFORMAT, "the header is not a dict literal ('{...}')");
  for (;;) {
    if (hdr_take(&h, '}')) break;
    if (!hdr_string(&h, key, sizeof(key)) || !hdr_take(&h, ':'))
      return xf__data_fail(err, name, XF_EFORMAT,
                           "header byte %zu: expected a quoted key and ':' in the dict literal",
                           h.i);
    if (strcmp(key, "descr") == 0 && !seen_descr) {
      seen_descr = true;
      if (!hdr_string(&h, descr, sizeof(descr)))
        return xf__data_fail(err, name, XF_EUNSUPPORTED,
                             "'descr' is not a simple dtype string such as '<f4' (structured "
                             "arrays are not supported)");
      XF_GUARD(npy_descr(descr, name, a, err));
    } else if (strcmp(key, "fortran_order") == 0 && !seen_order) {
      seen_order = true;
      if (hdr_word(&h, "True"))
        return xf__data_fail(err, name, XF_EUNSUPPORTED,
                             "the array is in Fortran order: save it in C order "
                             "(numpy.ascontiguousarray)");
      if (!hdr_word(&h, "False"))
        return xf__data_fail(err, name, XF_EFORMAT, "'fortran_order' must be True or False");
    } else if (strcmp(key, "shape") == 0 && !seen_shape) {
      seen_shape = true;
      if (!hdr_shape(&h, a))
        return xf__data_fail(err, name, XF_EFORMAT,
                             "'shape' is not a tuple of at most %d whole numbers",
                             NPY_MAX_DIMS);
    } else {
      return xf__data_fail(err, name, XF_EFORMAT,
                           "the header has %s key '%s': an .npy header holds 'descr', "
                           "'fortran_order' and 'shape' once each",
                           (strcmp(key, "descr") == 0 || strcmp(key, "shape") == 0 ||
                            strcmp(key, "fortran_order") == 0)
                               ? "a repeated"
                               : "an unknown",
                           key);
    }
    if (hdr_take(&h, ',')) continue;
    if (hdr_take(&h, '}')) break;
    return xf__data_fail(err, name, XF_EFORMAT,
                         "header byte %zu: expected ',' or '}' in the dict literal", h.i);
  }
  hdr_space(&h);
  if (h.i + 1 != n || s[h.i] != '\n')
    return xf__data_fail(err, name, XF_EFORMAT,
                         "the header does not end in spaces and a newline after its dict");
  if (!seen_descr || !seen_order || !seen_shape)
    return xf__data_fail(err, name, XF_EFORMAT, "the header lacks '%s'",
                         !seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape");
  return XF_OK;
}

/* Parses one .npy file: header checked, payload size equal to the shape's. */
static xf_err npy_array_parse(const uint8_t *p, size_t len, const char *name, npy_array *a,
                              xf_errctx *err) {
  memset(a, 0, sizeof(*a));
  static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (len < 10 || memcmp(p, magic, 6) != 0)
    return xf__data_fail(err, name, XF_EFORMAT,
                         "not a NumPy .npy file (it does not start with \\x93NUMPY)");
  uint8_t major = p[6], minor = p[7];
  if (major < 1 || major > 3 || minor != 0)
    return xf__data_fail(err, name, XF_EUNSUPPORTED,
                         ".npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)",
                         major, minor);
  size_t pre = major == 1 ? 10 : 12;
  if (len < pre) return xf__data_fail(err, name, XF_ETRUNCATED, "the header is cut short");
  uint64_t hlen = major == 1 ? le16(p + 8) : le32(p + 8);
  if (hlen > NPY_MAX_HEADER || hlen == 0)
    return xf__data_fail(err, name, XF_EFORMAT, "a header of %llu bytes (at most %u)",
                         (unsigned long long)hlen, NPY_MAX_HEADER);
  if (hlen > len - pre)
    return xf__data_fail(err, name, XF_ETRUNCATED,
                         "the header says %llu bytes but the file has %zu after the preamble",
                         (unsigned long long)hlen, len - pre);
  const char *hs = (const char *)p + pre;
  for (size_t i = 0; i < hlen; i++)
    if ((unsigned char)hs[i] >= 0x80 || (hs[i] < 0x20 && hs[i] != '\n' && hs[i] != '\t'))
      return xf__data_fail(err, name, XF_EFORMAT, "header byte %zu is not printable ASCII", i);
  XF_GUARD(npy_header(hs, (size_t)hlen, name, a, err));
  uint64_t count = 1;
  for (uint32_t d = 0; d < a->ndims; d++) {
    if (a->shape[d] == 0)
      return xf__data_fail(err, name, XF_ERANGE, "dimension %u of the shape is 0: no data", d);
    if (a->shape[d] > XF_DATASET_MAX_VALUES || count * a->shape[d] > XF_DATASET_MAX_VALUES)
      return xf__data_fail(err, name, XF_ERANGE,
                           "the shape holds more than the %llu values xfed accepts in one "
                           "dataset",
                           (unsigned long long)XF_DATASET_MAX_VALUES);
    count *= a->shape[d];
  }
  a->count = count;
  uint64_t need = count * a->itemsize; /* <= 2^30 * 8: no overflow */
  size_t have = len - pre - (size_t)hlen;
  if (have < need)
    return xf__data_fail(err, name, XF_ETRUNCATED,
                         "the shape needs %llu bytes of data but the file holds %zu",
                         (unsigned long long)need, have);
  if (have > need)
    return xf__data_fail(err, name, XF_EFORMAT,
                         "%zu bytes follow the %llu bytes of data the shape needs", have - need,
                         (unsigned long long)need);
  a->data = p + pre + hlen;
  return XF_OK;
}

/* Element i as a double (little-endian). */
static double npy_get(const npy_array *a, uint64_t i) {
  const uint8_t *p = a->data + i * a->itemsize;
  uint64_t u = 0;
  for (uint32_t b = 0; b < a->itemsize; b++) u |= (uint64_t)p[b] << (8 * b);
  switch (a->kind) {
  case 'f':
    if (a->itemsize == 4) {
      uint32_t v32 = (uint32_t)u;
      float f;
      memcpy(&f, &v32, 4);
      return f;
    } else {
      double d;
      memcpy(&d, &u, 8);
      return d;
    }
  case 'i': {
    unsigned bits = 8 * a->itemsize;
    if (bits < 64 && (u >> (bits - 1)) & 1) u |= ~UINT64_C(0) << bits;
    return (double)(int64_t)u;
  }
  default: return (double)u; /* 'u', 'b' */
  }
}

xf_err xf_npy_parse_vector(const void *p, size_t len, const char *name, size_t n, float **out,
                           xf_errctx *err) {
  *out = NULL;
  npy_array a;
  xf_err rc = npy_array_parse(p, len, name, &a, err);
  if (rc != XF_OK) {
    if (rc == XF_ENOMEM || !err) return rc == XF_ENOMEM ? rc : XF_EFORMAT;
    /* Whatever is wrong, the file is not the vector asked for: say which. */
    char why[sizeof(err->msg)];
    snprintf(why, sizeof(why), "%s", err->msg);
    xf_fail(err, XF_EFORMAT, "%s; it must be a float32 ('<f4') C-order vector of shape (%zu,)",
            why, n);
    return XF_EFORMAT;
  }
  if (a.kind != 'f' || a.itemsize != 4 || a.ndims != 1 || a.shape[0] != n) {
    xf__data_fail(err, name, XF_EFORMAT,
                  "the array is not a float32 ('<f4') C-order vector of shape (%zu,)", n);
    if (err) xf_errctx_field(err, "shape");
    return XF_EFORMAT;
  }
  float *v = xf_mallocarray(n ? n : 1, sizeof(float));
  if (!v) return xf__data_fail(err, name, XF_ENOMEM, "cannot allocate %zu floats", n);
  for (size_t i = 0; i < n; i++) {
    v[i] = (float)npy_get(&a, i);
    if (!isfinite(v[i])) {
      xf__data_fail(err, name, XF_ERANGE, "value %zu is %s; every value must be finite", i,
                    isnan(v[i]) ? "NaN" : "infinite");
      if (err) xf_errctx_field(err, "[%zu]", i);
      xf_free(v);
      return XF_ERANGE;
    }
  }
  *out = v;
  return XF_OK;
}

static xf_err npy_to_dataset(const npy_array *x, const char *x_name, const npy_array *y,
                             const char *y_name, xf_dataset *out, xf_errctx *err) {
  if (x->ndims < 2 || x->ndims > 4)
    return xf__data_fail(err, x_name, XF_EFORMAT,
                         "features of %u dimensions: give (records, features), (records, h, "
                         "w) or (records, h, w, channels)",
                         x->ndims);
  if (y->ndims != 1)
    return xf__data_fail(err, y_name, XF_EFORMAT,
                         "labels of %u dimensions: give one label per record, shape (records,)",
                         y->ndims);
  if (y->kind == 'f')
    return xf__data_fail(err, y_name, XF_EUNSUPPORTED,
                         "labels are floats: save class indices as integers "
                         "(y.astype('<i4'))");
  if (x->shape[0] != y->shape[0])
    return xf__data_fail(err, y_name, XF_EFORMAT, "%llu labels but %s holds %llu records",
                         (unsigned long long)y->shape[0], x_name,
                         (unsigned long long)x->shape[0]);
  if (x->shape[0] > UINT32_MAX)
    return xf__data_fail(err, x_name, XF_ERANGE, "too many records");
  uint32_t h = 1, w = 1, c;
  if (x->ndims == 2) {
    c = (uint32_t)x->shape[1];
  } else {
    h = (uint32_t)x->shape[1];
    w = (uint32_t)x->shape[2];
    c = x->ndims == 4 ? (uint32_t)x->shape[3] : 1;
  }
  /* Labels first: they decide classes, and a bad one fails before the big copy. */
  uint32_t n = (uint32_t)x->shape[0];
  uint32_t max_label = 0;
  for (uint32_t i = 0; i < n; i++) {
    double v = npy_get(y, i);
    if (v < 0 || v >= XF_CSV_MAX_CLASSES)
      return xf__data_fail(err, y_name, XF_ERANGE,
                           "record %u has label %.0f: labels are class indices in [0, %u]", i + 1,
                           v, XF_CSV_MAX_CLASSES - 1);
    if ((uint32_t)v > max_label) max_label = (uint32_t)v;
  }
  XF_GUARD(xf_dataset_alloc(out, n, h, w, c, max_label + 1, err));
  for (uint32_t i = 0; i < n; i++) out->y[i] = (int32_t)npy_get(y, i);
  for (uint64_t i = 0; i < x->count; i++) {
    double v = npy_get(x, i);
    if (!isfinite(v) || fabs(v) > FLT_MAX) {
      uint64_t rec = i / out->features, f = i % out->features;
      xf_dataset_free(out);
      return xf__data_fail(err, x_name, XF_ERANGE,
                           "record %llu, feature %llu is %g: features must be finite 32-bit "
                           "floats",
                           (unsigned long long)rec + 1, (unsigned long long)f + 1, v);
    }
    out->x[i] = (float)v;
  }
  return XF_OK;
}

xf_err xf_npy_parse(const void *x, size_t x_len, const char *x_name, const void *y, size_t y_len,
                    const char *y_name, xf_dataset *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (!x_name) x_name = "features";
  if (!y_name) y_name = "labels";
  npy_array xa, ya;
  XF_GUARD(npy_array_parse(x, x_len, x_name, &xa, err));
  XF_GUARD(npy_array_parse(y, y_len, y_name, &ya, err));
  return npy_to_dataset(&xa, x_name, &ya, y_name, out, err);
}

/* ---- .npz: a zip of .npy members --------------------------------------------------- */

typedef struct zip_member {
  uint8_t *data; /* xf_malloc'd when inflated, else NULL and view is into the zip */
  const uint8_t *view;
  size_t len;
} zip_member;

static voidpf z_alloc(voidpf opaque, uInt items, uInt size) {
  (void)opaque;
  return xf_mallocarray(items, size);
}
static void z_free(voidpf opaque, voidpf p) {
  (void)opaque;
  xf_free(p);
}

static xf_err zip_inflate(const uint8_t *in, size_t in_len, size_t out_len, const char *name,
                          const char *member, uint8_t **out, xf_errctx *err) {
  *out = xf_malloc(out_len ? out_len : 1);
  if (!*out) return xf__data_fail(err, name, XF_ENOMEM, "out of memory inflating %s", member);
  z_stream zs;
  memset(&zs, 0, sizeof(zs));
  zs.zalloc = z_alloc;
  zs.zfree = z_free;
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
    xf_free(*out);
    *out = NULL;
    return xf__data_fail(err, name, XF_ENOMEM, "out of memory inflating %s", member);
  }
  /* Sizes are below 4 GiB (no zip64), so they fit zlib's uInt. */
  zs.next_in = (Bytef *)(uintptr_t)in;
  zs.avail_in = (uInt)in_len;
  zs.next_out = *out;
  zs.avail_out = (uInt)out_len;
  int z = inflate(&zs, Z_FINISH);
  bool ok = z == Z_STREAM_END && zs.total_out == out_len && zs.avail_in == 0;
  inflateEnd(&zs);
  if (!ok) {
    xf_free(*out);
    *out = NULL;
    if (z == Z_DATA_ERROR)
      return xf__data_fail(err, name, XF_EINTEGRITY, "member %s: corrupt deflate data", member);
    return xf__data_fail(err, name, XF_EFORMAT,
                         "member %s does not inflate to the %zu bytes the directory states",
                         member, out_len);
  }
  return XF_OK;
}

/* Finds member `want` in the zip and returns its bytes (checked by CRC-32). */
static xf_err zip_find(const uint8_t *z, size_t len, const char *name, const char *want,
                       zip_member *m, bool *found, xf_errctx *err) {
  memset(m, 0, sizeof(*m));
  *found = false;
  if (len < 22) return xf__data_fail(err, name, XF_EFORMAT, "too short to be a zip (.npz) file");
  /* The end-of-central-directory record is in the last 22 + 65535 bytes. */
  size_t lo = len - 22 > 65535 ? len - 22 - 65535 : 0;
  size_t eocd = SIZE_MAX;
  for (size_t i = len - 22 + 1; i-- > lo;)
    if (le32(z + i) == 0x06054b50 && i + 22 + le16(z + i + 20) == len) {
      eocd = i;
      break;
    }
  if (eocd == SIZE_MAX)
    return xf__data_fail(err, name, XF_EFORMAT,
                         "no zip end-of-central-directory record: not an .npz file, or one cut "
                         "short");
  const uint8_t *e = z + eocd;
  uint16_t entries = le16(e + 10);
  uint32_t cd_size = le32(e + 12), cd_off = le32(e + 16);
  if (le16(e + 4) != 0 || le16(e + 6) != 0 || le16(e + 8) != entries)
    return xf__data_fail(err, name, XF_EUNSUPPORTED, "a multi-part zip archive");
  if (entries == 0xFFFF || cd_off == 0xFFFFFFFFu || cd_size == 0xFFFFFFFFu)
    return xf__data_fail(err, name, XF_EUNSUPPORTED,
                         "a zip64 archive (members of 4 GiB or more): save smaller arrays or "
                         "use the .npy layout");
  if (entries > ZIP_MAX_ENTRIES)
    return xf__data_fail(err, name, XF_ERANGE, "%u members (at most %u)", entries,
                         ZIP_MAX_ENTRIES);
  if ((uint64_t)cd_off + cd_size > eocd)
    return xf__data_fail(err, name, XF_EFORMAT, "the central directory lies outside the file");
  size_t p = cd_off, end = (size_t)cd_off + cd_size;
  for (uint32_t k = 0; k < entries; k++) {
    if (end - p < 46 || le32(z + p) != 0x02014b50)
      return xf__data_fail(err, name, XF_EFORMAT, "central directory entry %u is damaged", k + 1);
    const uint8_t *c = z + p;
    uint16_t flags = le16(c + 8), method = le16(c + 10);
    uint32_t crc = le32(c + 16), csize = le32(c + 20), usize = le32(c + 24);
    uint16_t nlen = le16(c + 28), xlen = le16(c + 30), clen = le16(c + 32);
    uint32_t loff = le32(c + 42);
    if ((uint64_t)46 + nlen + xlen + clen > end - p)
      return xf__data_fail(err, name, XF_EFORMAT, "central directory entry %u is damaged", k + 1);
    const char *mname = (const char *)c + 46;
    p += (size_t)46 + nlen + xlen + clen;
    if (nlen != strlen(want) || memcmp(mname, want, nlen) != 0) continue;
    if (flags & 1)
      return xf__data_fail(err, name, XF_EUNSUPPORTED, "member %s is encrypted", want);
    if (csize == 0xFFFFFFFFu || usize == 0xFFFFFFFFu || loff == 0xFFFFFFFFu)
      return xf__data_fail(err, name, XF_EUNSUPPORTED,
                           "member %s is stored as zip64 (4 GiB or more)", want);
    if (method != 0 && method != 8)
      return xf__data_fail(err, name, XF_EUNSUPPORTED,
                           "member %s uses zip compression method %u: xfed reads stored (0) and "
                           "deflate (8) members (numpy.savez and savez_compressed)",
                           want, method);
    if (method == 8 && usize > (uint64_t)csize * 1032 + 64)
      return xf__data_fail(err, name, XF_ERANGE,
                           "member %s claims %u bytes, more than its %u compressed bytes can hold",
                           want, usize, csize);
    if ((uint64_t)loff + 30 > cd_off || le32(z + loff) != 0x04034b50)
      return xf__data_fail(err, name, XF_EFORMAT, "the local header of member %s is damaged",
                           want);
    uint64_t data = (uint64_t)loff + 30 + le16(z + loff + 26) + le16(z + loff + 28);
    if (data + csize > cd_off)
      return xf__data_fail(err, name, XF_ETRUNCATED,
                           "member %s runs past the start of the central directory", want);
    const uint8_t *raw = z + data;
    if (method == 0) {
      if (csize != usize)
        return xf__data_fail(err, name, XF_EFORMAT,
                             "stored member %s has %u compressed but %u plain bytes", want,
                             csize, usize);
      m->view = raw;
    } else {
      XF_GUARD(zip_inflate(raw, csize, usize, name, want, &m->data, err));
      m->view = m->data;
    }
    m->len = usize;
    uLong got = crc32_z(0L, Z_NULL, 0);
    got = crc32_z(got, m->view, m->len);
    if (got != crc) {
      xf_free(m->data);
      memset(m, 0, sizeof(*m));
      return xf__data_fail(err, name, XF_EINTEGRITY,
                           "member %s fails its CRC-32 check: the file is damaged", want);
    }
    *found = true;
    return XF_OK;
  }
  return XF_OK;
}

xf_err xf_npz_parse(const void *zip, size_t len, const char *name, xf_dataset *out,
                    xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (!name) name = "npz";
  zip_member mx, my;
  bool fx, fy;
  XF_GUARD(zip_find(zip, len, name, "x.npy", &mx, &fx, err));
  xf_err rc = zip_find(zip, len, name, "y.npy", &my, &fy, err);
  if (rc != XF_OK) {
    xf_free(mx.data);
    return rc;
  }
  if (!fx || !fy) {
    rc = xf__data_fail(err, name, XF_EFORMAT,
                       "holds no array named '%s': save features as x and labels as y "
                       "(numpy.savez(path, x=features, y=labels))",
                       fx ? "y" : "x");
  } else {
    char xn[300], yn[300];
    snprintf(xn, sizeof(xn), "%s:x.npy", name);
    snprintf(yn, sizeof(yn), "%s:y.npy", name);
    rc = xf_npy_parse(mx.view, mx.len, xn, my.view, my.len, yn, out, err);
  }
  xf_free(mx.data);
  xf_free(my.data);
  return rc;
}

xf_err xf_npy_read(const char *x_path, const char *y_path, xf_dataset *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  uint8_t *x = NULL, *y = NULL;
  size_t xl = 0, yl = 0;
  XF_GUARD(xf__read_data_file(x_path, XF_DATASET_MAX_FILE_BYTES, &x, &xl, err));
  xf_err rc = xf__read_data_file(y_path, XF_DATASET_MAX_FILE_BYTES, &y, &yl, err);
  if (rc == XF_OK) rc = xf_npy_parse(x, xl, x_path, y, yl, y_path, out, err);
  xf_free(x);
  xf_free(y);
  return rc;
}

xf_err xf_npz_read(const char *path, xf_dataset *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  uint8_t *z = NULL;
  size_t len = 0;
  XF_GUARD(xf__read_file_bytes(path, &z, &len, err));
  xf_err rc = xf_npz_parse(z, len, path, out, err);
  xf_free(z);
  return rc;
}

/* ---- writer ------------------------------------------------------------------------- */

static xf_err npy_write_one(const char *path, const char *descr, const char *shape,
                            const void *data, size_t bytes, xf_errctx *err) {
  char hdr[256];
  int n = snprintf(hdr, sizeof(hdr), "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                   descr, shape);
  if (n < 0 || (size_t)n + 12 > sizeof(hdr))
    return xf__data_fail(err, path, XF_ERANGE, "shape too long for an .npy header");
  /* Pad so that the data starts at a multiple of 64 bytes, as numpy does. */
  size_t total = 10 + (size_t)n + 1;
  size_t pad = (64 - total % 64) % 64;
  memset(hdr + n, ' ', pad);
  hdr[(size_t)n + pad] = '\n';
  size_t hlen = (size_t)n + pad + 1;
  uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(hlen & 0xff),
                     (uint8_t)(hlen >> 8)};
  xf_file_writer *w = NULL;
  XF_GUARD(xf_file_writer_begin(path, 0644, &w, err));
  xf_err rc = xf_file_writer_write(w, pre, sizeof(pre), err);
  if (rc == XF_OK) rc = xf_file_writer_write(w, hdr, hlen, err);
  /* Little-endian hosts only (every platform xfed builds for). */
  if (rc == XF_OK) rc = xf_file_writer_write(w, data, bytes, err);
  if (rc != XF_OK) {
    xf_file_writer_abort(w);
    return rc;
  }
  return xf_file_writer_commit(w, err);
}

xf_err xf_npy_write(const char *x_path, const char *y_path, const xf_dataset *ds,
                    xf_errctx *err) {
  if (ds->n == 0 || ds->features == 0)
    return xf__data_fail(err, x_path, XF_EINVAL, "cannot write an empty dataset");
  char shape[96];
  if (ds->h == 1 && ds->w == 1)
    snprintf(shape, sizeof(shape), "(%u, %u)", ds->n, ds->c);
  else if (ds->c == 1)
    snprintf(shape, sizeof(shape), "(%u, %u, %u)", ds->n, ds->h, ds->w);
  else
    snprintf(shape, sizeof(shape), "(%u, %u, %u, %u)", ds->n, ds->h, ds->w, ds->c);
  XF_GUARD(npy_write_one(x_path, "<f4", shape, ds->x,
                         (size_t)ds->n * ds->features * sizeof(float), err));
  snprintf(shape, sizeof(shape), "(%u,)", ds->n);
  return npy_write_one(y_path, "<i4", shape, ds->y, (size_t)ds->n * sizeof(int32_t), err);
}
