/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the dataset readers and writers of data/: whole-file
 * reading, in-memory gunzip, and error reporting that names the file. */
#ifndef XF_DATA_DATASET_INTERNAL_H
#define XF_DATA_DATASET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "data/dataset.h"

/* Clears err, names `file` as the file at fault and records the message:
 * the way every reader reports a failure. Returns code. */
xf_err xf__data_fail(xf_errctx *err, const char *file, xf_err code, const char *fmt, ...)
    XF_PRINTF(4, 5);

/* True when the buffer starts with the gzip magic bytes 1f 8b. */
int xf__is_gzip(const uint8_t *data, size_t len);

/* Inflates one or more concatenated gzip members in `in` into a new buffer
 * of at most max_out bytes. zlib's own allocations also go through
 * xf_malloc. *out is owned by the caller (xf_free); on failure it is NULL.
 * Errors: XF_EINTEGRITY for corrupt data, XF_ETRUNCATED for a stream that
 * ends early, XF_EFORMAT for trailing bytes, XF_ERANGE above max_out. */
xf_err xf__gunzip(const uint8_t *in, size_t in_len, const char *name, uint64_t max_out,
                  uint8_t **out, size_t *out_len, xf_errctx *err) XF_WARN_UNUSED;

/* Inflates only the first `want` bytes (or fewer, when the data holds fewer)
 * of the gzip data `in` into out[want], *got of them, so that a reader can
 * learn from a header how much the whole may hold before inflating it.
 * XF_EINTEGRITY for corrupt data at the start, XF_ENOMEM. */
xf_err xf__gunzip_head(const uint8_t *in, size_t in_len, const char *name, uint8_t *out,
                       size_t want, size_t *got, xf_errctx *err) XF_WARN_UNUSED;

/* Reads the whole regular file at path (at most XF_DATASET_MAX_FILE_BYTES)
 * as it is, compressed or not. *out is owned by the caller (xf_free).
 * XF_ENOENT when the file is missing, XF_EIO, XF_ERANGE, XF_ENOMEM. */
xf_err xf__read_file_bytes(const char *path, uint8_t **out, size_t *out_len,
                           xf_errctx *err) XF_WARN_UNUSED;

/* Reads the whole regular file at path (at most XF_DATASET_MAX_FILE_BYTES)
 * and, when it is gzip, inflates it (to at most max_out bytes). *out is owned
 * by the caller (xf_free). XF_ENOENT when the file is missing. */
xf_err xf__read_data_file(const char *path, uint64_t max_out, uint8_t **out, size_t *out_len,
                          xf_errctx *err) XF_WARN_UNUSED;

/* Writes a short, printable rendering of untrusted bytes (control and
 * non-ASCII bytes as '?', long text cut with "...") into dst. */
void xf__printable(char *dst, size_t dst_len, const char *src, size_t src_len);

/* Every file name xf_dataset_write_dir may create in a directory (*count of
 * them), so that a failed split can remove exactly what it wrote. */
const char *const *xf__dataset_dir_files(size_t *count);

/* ---- the column schema of a tabular CSV dataset (data/schema.c) ---------------- */

typedef enum xf__col_type { XF__COL_NUMERIC = 1, XF__COL_CATEGORICAL, XF__COL_IGNORE } xf__col_type;
typedef enum xf__norm { XF__NORM_NONE = 0, XF__NORM_TRAIN, XF__NORM_GIVEN } xf__norm;

typedef struct xf__schema_col {
  char *name;
  xf__col_type type;
  xf__norm norm;
  double mean, std; /* XF__NORM_GIVEN, or filled in by xf_schema_normalize */
  bool has_fill;
  double fill_num;    /* numeric fill, before normalization */
  uint32_t fill_cat;  /* categorical fill: the feature (vocabulary index or the unknown slot) */
  char **vocab;       /* categorical: n_vocab words in declared order */
  uint32_t *sorted;   /* vocabulary indices in strcmp order, for lookups */
  uint32_t n_vocab;
  bool unknown_slot;  /* an unknown word maps to feature n_vocab instead of failing */
  uint32_t offset;    /* first feature it produces */
  uint32_t width;     /* features it produces: 1, n_vocab (+1), or 0 */
} xf__schema_col;

struct xf_schema {
  char *name; /* the schema file, for errors */
  xf__schema_col *cols;
  uint32_t n_cols;
  char *label;
  char **classes; /* n_classes label words; 0: labels are whole numbers */
  uint32_t *classes_sorted;
  uint32_t n_classes;
  char **missing; /* the texts that mean "no value" */
  uint32_t n_missing;
  uint32_t features;
};

/* Index of word in a sorted vocabulary, or -1. */
int64_t xf__vocab_find(char *const *words, const uint32_t *sorted, uint32_t n, const char *word);

#endif
