/* SPDX-License-Identifier: Apache-2.0 */
/* Pooled normalization statistics for tabular datasets: each site's
 * sufficient statistics of its numeric columns (count, mean and M2 of the
 * training split), the file that carries them, and their exact combination
 * into one schema that every site can use (docs/data.md, "Pooled
 * statistics"). Only aggregates are read and written here, never records. */
#ifndef XF_DATA_COLSTATS_H
#define XF_DATA_COLSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/digest.h"
#include "data/dataset.h"

/* The format name and version a statistics file declares. */
#define XF_COLSTATS_FORMAT "xfed-column-stats"
#define XF_COLSTATS_VERSION 1
/* Largest statistics file a reader accepts: a schema's numeric columns each
 * take well under 512 bytes. */
#define XF_COLSTATS_MAX_BYTES (4u << 20)

/* One numeric column's statistics: count values, their mean and M2, the sum
 * of squared deviations from the mean (variance = m2 / count). */
typedef struct xf_colstat {
  char name[XF_SCHEMA_MAX_NAME + 1];
  uint64_t count;
  double mean;
  double m2;
} xf_colstat;

/* The statistics of one dataset at one site (or pooled over sites, when site
 * is empty). cols are the schema's numeric columns in schema order; owned
 * by the struct (xf_colstats_free). A zeroed struct is empty. */
typedef struct xf_colstats {
  char dataset[64];
  char site[64];
  char schema_digest[XF_DIGEST_HEX]; /* xf_schema_digest of the schema used */
  xf_colstat *cols;
  uint32_t n_cols;
} xf_colstats;

void xf_colstats_free(xf_colstats *st);

/* The digest of a schema's meaning, not its bytes: BLAKE2b of the JSON text
 * with keys sorted and no white space, so that copies that differ only in
 * layout or member order digest alike. XF_EFORMAT (naming name) when text is
 * not JSON. hex holds XF_DIGEST_HEX bytes. */
xf_err xf_schema_digest(const char *text, size_t len, const char *name, char hex[XF_DIGEST_HEX],
                        xf_errctx *err) XF_WARN_UNUSED;

/* The statistics of the dataset directory dir, which must hold train.csv (or
 * train.csv.gz) and schema.json: for every numeric column, the count, mean
 * and M2 of the training split's values after the schema's fills and before
 * normalization, accumulated in double with Welford's update. XF_EINVAL when
 * dir has no schema.json or its schema has no numeric column; the loader's
 * errors otherwise. dataset and site are left empty for the caller. */
xf_err xf_colstats_compute(const char *dir, xf_colstats *out, xf_errctx *err) XF_WARN_UNUSED;

/* The statistics file (format in docs/data.md) as JSON text, ending in a
 * newline; numbers are written so that they read back to the same double.
 * *json is owned by the caller (xf_free). */
xf_err xf_colstats_format(const xf_colstats *st, char **json, xf_errctx *err) XF_WARN_UNUSED;

/* Reads a statistics file strictly: the format and version, the dataset and
 * site names (the rule of dataset names), a 64-digit schema digest, and
 * columns [{name, count, mean, m2}] with distinct names, a whole count, a
 * finite mean and a finite m2 of at least 0 (both 0 for a count of 0);
 * unknown members are refused. Errors name the file (name) and the field
 * ("columns[2].m2"). On failure *out is zeroed. */
xf_err xf_colstats_parse(const char *text, size_t len, const char *name, xf_colstats *out,
                         xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_colstats_read(const char *path, xf_colstats *out, xf_errctx *err) XF_WARN_UNUSED;

/* Pools n >= 2 statistics files (names[i] names files[i] in errors) with
 * Chan et al.'s pairwise update, which gives the count, mean and M2 one pass
 * over all the sites' values would. Refuses (XF_EINVAL) fewer than two files,
 * files of other datasets or schema digests than the first, a site named
 * twice, and a column missing from a file or not in the first; a pooled
 * count of 0 is XF_ERANGE. out takes the first file's dataset, digest and
 * column order, with site empty. On failure *out is zeroed. */
xf_err xf_colstats_merge(const xf_colstats *files, const char *const *names, size_t n,
                         xf_colstats *out, xf_errctx *err) XF_WARN_UNUSED;

/* The population standard deviation sqrt(m2 / count) (0 for a count of 0). */
double xf_colstat_std(const xf_colstat *c);

/* The deviation a schema uses to normalize with these statistics: the
 * population standard deviation, or 1 for a constant column (the rule of
 * "train" normalization in xf_schema_normalize). */
double xf_colstat_norm_std(const xf_colstat *c);

/* A copy of the schema text in which every numeric column whose "normalize"
 * is "train" gets {"mean": M, "std": S} from pooled, so that every site
 * normalizes alike. The schema must be valid (xf_schema_parse) and digest to
 * pooled->schema_digest (else XF_EINVAL: it is not the schema the statistics
 * were computed with). Other members keep their order. *json is owned by the
 * caller (xf_free); *replaced counts the columns changed. */
xf_err xf_colstats_apply(const char *schema_text, size_t len, const char *name,
                         const xf_colstats *pooled, char **json, uint32_t *replaced,
                         xf_errctx *err) XF_WARN_UNUSED;

#endif
