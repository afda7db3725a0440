/* SPDX-License-Identifier: Apache-2.0 */
/* A site's dataset in memory: validating IDX and CSV readers, the IDX and CSV
 * writers, the directory layouts a site accepts, and the splits that cut one
 * dataset into per-site shards (IID, Dirichlet label skew, k classes per site).
 * docs/data.md is the operator's and researcher's page for all of it. */
#ifndef XF_DATA_DATASET_H
#define XF_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

/* Largest dataset a reader accepts, counted in feature values (records times
 * features). Features are held as 32-bit floats, so this is 4 GiB in memory;
 * for IDX it is also the largest pixel payload (1 GiB of bytes on disk). */
#define XF_DATASET_MAX_VALUES (UINT64_C(1) << 30)
/* Largest dataset file a reader opens, and the most a gzip file may inflate
 * to: 4 GiB. */
#define XF_DATASET_MAX_FILE_BYTES (UINT64_C(4) << 30)
/* Labels: IDX label files hold one unsigned byte per label; CSV labels are
 * whole numbers below 65536. */
#define XF_IDX_MAX_CLASSES 256u
#define XF_CSV_MAX_CLASSES 65536u

/* A labelled dataset. Every record has the shape h x w x c:
 *  - IDX images: h rows, w columns, c channels (1 for a 3-dimensional image
 *    file such as Fashion-MNIST, the 4th dimension otherwise); pixels are
 *    stored NHWC (row-major, channels last) and scaled from 0..255 to [0, 1]
 *    as byte / 255.0f.
 *  - CSV: h = 1, w = 1, c = the number of feature columns, so that the record
 *    is a 1 x 1 "image" with one channel per feature; values are used as-is.
 * A dataset owns x and y (allocated with xf_malloc and friends); release it
 * with xf_dataset_free. A zeroed struct is a valid empty dataset. */
typedef struct xf_dataset {
  uint32_t n;        /* records */
  uint32_t h, w, c;  /* shape of one record */
  uint32_t features; /* h * w * c */
  uint32_t classes;  /* every label is in [0, classes) */
  float *x;          /* n * features values, record after record */
  int32_t *y;        /* n labels */
} xf_dataset;

/* A train part and a test part with the same record shape and classes: what a
 * dataset directory holds and what each site's shard is. */
typedef struct xf_dataset_pair {
  xf_dataset train;
  xf_dataset test;
} xf_dataset_pair;

/* Frees x and y and zeroes *ds. NULL-safe; safe on a zeroed struct. */
void xf_dataset_free(xf_dataset *ds);
void xf_dataset_pair_free(xf_dataset_pair *pair);

/* Allocates an n-record dataset of the given shape with x and y zero-filled.
 * XF_ERANGE when a dimension is 0 or n * features exceeds
 * XF_DATASET_MAX_VALUES; XF_ENOMEM. On failure *out is zeroed. The caller
 * owns *out. */
xf_err xf_dataset_alloc(xf_dataset *out, uint32_t n, uint32_t h, uint32_t w, uint32_t c,
                        uint32_t classes, xf_errctx *err) XF_WARN_UNUSED;

/* Per-class label counts: counts must hold ds->classes entries. */
void xf_dataset_label_counts(const xf_dataset *ds, uint64_t *counts);

/* ---- IDX (the MNIST format) --------------------------------------------- */

/* Parses an IDX image file and its IDX label file from memory. Each buffer is
 * either a plain IDX file or gzip-compressed (told apart by the gzip magic
 * bytes 1f 8b, never by a name); concatenated gzip members are read as one.
 *  - images: magic 00 00 08 03 (n x h x w) or 00 00 08 04 (n x h x w x c),
 *    unsigned bytes; labels: magic 00 00 08 01 (n), unsigned bytes.
 *  - Fails on a wrong magic (XF_EFORMAT), another IDX element type
 *    (XF_EUNSUPPORTED), a zero dimension, a payload above
 *    XF_DATASET_MAX_VALUES (XF_ERANGE), a payload shorter than the header says
 *    (XF_ETRUNCATED) or longer (XF_EFORMAT), corrupt gzip data
 *    (XF_EINTEGRITY), a gzip stream cut short (XF_ETRUNCATED) or followed by
 *    junk (XF_EFORMAT), and label and image counts that differ (XF_EFORMAT).
 * out->classes is the largest label + 1 (at most 256). images_name and
 * labels_name name the buffers in errors (NULL: "images", "labels"); err gets
 * the file at fault and what is wrong. The inputs are borrowed. On success the
 * caller owns *out; on failure *out is zeroed and nothing stays allocated. */
xf_err xf_idx_parse(const void *images, size_t images_len, const char *images_name,
                    const void *labels, size_t labels_len, const char *labels_name,
                    xf_dataset *out, xf_errctx *err) XF_WARN_UNUSED;

/* Reads and parses an image file and a label file (plain or gzip), as
 * xf_idx_parse. Files above XF_DATASET_MAX_FILE_BYTES are refused. */
xf_err xf_idx_read(const char *images_path, const char *labels_path, xf_dataset *out,
                   xf_errctx *err) XF_WARN_UNUSED;

/* Writes ds as a gzip-compressed IDX image file (3 dimensions when c = 1,
 * else 4) and label file. Pixels are stored as round(255 * x), so a dataset
 * read from IDX is written back byte for byte; values outside [0, 1] and
 * classes above 256 are refused with XF_ERANGE. Existing files are replaced;
 * not atomic (write into a fresh directory and rename it). */
xf_err xf_idx_write(const char *images_path, const char *labels_path, const xf_dataset *ds,
                    xf_errctx *err) XF_WARN_UNUSED;

/* ---- CSV ------------------------------------------------------------------ */

/* Which column holds the label. With label_name set the file must have a
 * header line with that name; otherwise label_column counts columns from 1,
 * and 0 (the default of a zeroed struct) means the last column. */
typedef struct xf_csv_options {
  const char *label_name; /* borrowed; NULL: use label_column */
  uint32_t label_column;  /* 1-based; 0 = last */
} xf_csv_options;

/* Parses comma-separated numbers, one record a line: every column but the
 * label column is a feature (used as-is, any finite float), the label is a
 * whole number in [0, 65536). The first non-empty line is a header when any of
 * its fields is not a number. Lines end in LF or CRLF; empty lines are
 * skipped; spaces around a field are ignored; a field may be double-quoted
 * ("" inside quotes is a quote) but a record never spans lines. Every line has
 * as many fields as the first. Errors name the line and column:
 * "line 17, column 4: 'abc' is not a number". out->classes is the largest
 * label + 1. opt may be NULL (label in the last column). Ownership as
 * xf_idx_parse. */
xf_err xf_csv_parse(const void *text, size_t len, const char *name, const xf_csv_options *opt,
                    xf_dataset *out, xf_errctx *err) XF_WARN_UNUSED;

/* Reads a CSV file (plain, or gzip by its magic bytes) and parses it. */
xf_err xf_csv_read(const char *path, const xf_csv_options *opt, xf_dataset *out,
                   xf_errctx *err) XF_WARN_UNUSED;

/* Writes ds as CSV: a header "f1,...,fN,label", then one line per record with
 * every value printed so that it reads back to the same float. Replaces an
 * existing file; not atomic. */
xf_err xf_csv_write(const char *path, const xf_dataset *ds, xf_errctx *err) XF_WARN_UNUSED;

/* ---- CSV with a column schema (tabular data) -------------------------------- */

/* Limits on a schema and on the files read with one. */
#define XF_SCHEMA_MAX_BYTES (1u << 20)   /* schema.json */
#define XF_SCHEMA_MAX_COLUMNS 4096u      /* declared columns besides the label */
#define XF_SCHEMA_MAX_VOCAB 4096u        /* words of one categorical column, or classes */
#define XF_SCHEMA_MAX_FEATURES 65536u    /* features the columns expand to */
#define XF_SCHEMA_MAX_NAME 256           /* characters of a column name or word */
#define XF_TABULAR_MAX_LINE (1u << 20)   /* bytes of one CSV line */

/* A parsed schema (format in docs/data.md): the label column and its classes
 * (label words in class order, or whole-number labels), every other column of
 * the file as numeric (one feature; normalization none, from the training
 * split, or given mean/std; an optional fill for missing values), categorical
 * (one-hot over its vocabulary, with an optional extra slot for unknown words
 * and an optional fill) or ignored; and the texts that mean "missing"
 * (default: the empty field). Features are laid out in column order. */
typedef struct xf_schema xf_schema;

/* Parses schema text. Errors name the member at fault ("columns[2].type").
 * name names the text in errors (NULL: "schema.json"). The caller owns *out
 * (xf_schema_free); NULL on failure. */
xf_err xf_schema_parse(const char *text, size_t len, const char *name, xf_schema **out,
                       xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_schema_read(const char *path, xf_schema **out, xf_errctx *err) XF_WARN_UNUSED;
void xf_schema_free(xf_schema *s);
/* Features a record has; the label's classes (0 when labels are whole numbers). */
uint32_t xf_schema_features(const xf_schema *s);
uint32_t xf_schema_classes(const xf_schema *s);

/* Parses a CSV file with the schema: the first non-empty line is a header
 * naming exactly the schema's columns and its label column, in any order;
 * every field is checked against its column (errors name the file, line,
 * column and the column's name). Values come out raw (not yet normalized):
 * records are 1 x 1 x features, classes is the schema's class count or the
 * largest label + 1. Lines are at most XF_TABULAR_MAX_LINE bytes; other rules
 * (quotes, CRLF, blank lines, byte order mark) as xf_csv_parse. */
xf_err xf_schema_csv_parse(const xf_schema *s, const void *text, size_t len, const char *name,
                           xf_dataset *out, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_schema_csv_read(const xf_schema *s, const char *path, xf_dataset *out,
                          xf_errctx *err) XF_WARN_UNUSED;

/* Normalizes the numeric columns that ask for it, in train and test (test may
 * be NULL): "train" columns with the mean and population standard deviation
 * of train (a constant column's deviation is taken as 1), given ones with
 * theirs. The statistics used are kept in s. */
xf_err xf_schema_normalize(xf_schema *s, xf_dataset *train, xf_dataset *test,
                           xf_errctx *err) XF_WARN_UNUSED;

/* ---- NumPy .npy and .npz ------------------------------------------------------- */

/* Parses a features array and a labels array, each a .npy file (format
 * versions 1.0 to 3.0): dtype float32/float64, 8 to 64-bit integers or bool,
 * little-endian, fortran_order False; features of shape (n, F) (records of
 * 1 x 1 x F), (n, h, w) or (n, h, w, c); labels of shape (n,) and an integer
 * or bool dtype, each in [0, 65536). The header's dict literal is parsed
 * strictly and the payload must be exactly as long as the shape says, both
 * checked before anything is allocated. Features must be finite and within
 * float range. Ownership as xf_idx_parse. */
xf_err xf_npy_parse(const void *x, size_t x_len, const char *x_name, const void *y, size_t y_len,
                    const char *y_name, xf_dataset *out, xf_errctx *err) XF_WARN_UNUSED;
/* Parses one .npy file that must hold exactly a float32 ('<f4') C-order
 * vector of n finite values, into *out (xf_malloc; the caller frees). Any
 * file that is not that vector is XF_EFORMAT (field "shape" when the header
 * is valid but names another array), a NaN or infinity XF_ERANGE with field
 * "[i]"; err's file is name. */
xf_err xf_npy_parse_vector(const void *p, size_t len, const char *name, size_t n, float **out,
                           xf_errctx *err) XF_WARN_UNUSED;
/* Parses an .npz file (a zip, as numpy.savez and savez_compressed write)
 * holding members x.npy and y.npy (others are ignored); members stored or
 * deflated, CRC-32 checked; zip64 archives are refused. */
xf_err xf_npz_parse(const void *zip, size_t len, const char *name, xf_dataset *out,
                    xf_errctx *err) XF_WARN_UNUSED;
/* Read a file pair (plain or gzip) or an .npz file and parse them. */
xf_err xf_npy_read(const char *x_path, const char *y_path, xf_dataset *out,
                   xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_npz_read(const char *path, xf_dataset *out, xf_errctx *err) XF_WARN_UNUSED;
/* Writes ds as two .npy files: features '<f4' of shape (n, F) when h = w = 1,
 * else (n, h, w[, c]); labels '<i4' of shape (n,). Not atomic. */
xf_err xf_npy_write(const char *x_path, const char *y_path, const xf_dataset *ds,
                    xf_errctx *err) XF_WARN_UNUSED;

/* ---- dataset directories ---------------------------------------------------- */

/* The two layouts of a dataset directory:
 *  IDX: train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
 *       t10k-labels-idx1-ubyte, each plain or with ".gz" (the plain file wins
 *       when both exist); the layout of Debian's dataset-fashion-mnist.
 *  CSV: train.csv and test.csv (or train.csv.gz, test.csv.gz); with
 *       schema.json beside them the files are read with that column schema
 *       (xf_schema_csv_parse), and numeric columns are normalized with the
 *       training split's statistics where the schema asks for it.
 *  NPY: train-x.npy, train-y.npy, test-x.npy, test-y.npy (each plain or .gz).
 *  NPZ: train.npz and test.npz, each holding x.npy and y.npy.
 * Either may carry dataset.json, {"classes": N}, which fixes the number of
 * classes (shards of a split do, so that every site agrees with the global
 * model's output size); every label must then be below N. */
typedef enum xf_dataset_layout {
  XF_LAYOUT_IDX = 1,
  XF_LAYOUT_CSV = 2,
  XF_LAYOUT_NPY = 3,
  XF_LAYOUT_NPZ = 4
} xf_dataset_layout;

/* "idx", "csv", "npy" or "npz". */
const char *xf_dataset_layout_name(xf_dataset_layout layout);

/* Finds which layout dir holds. XF_ENOENT when dir is missing, holds neither
 * layout (the message lists the files looked for) or only part of one (the
 * message names the missing files); XF_EFORMAT when it holds both. */
xf_err xf_dataset_find_layout(const char *dir, xf_dataset_layout *out,
                              xf_errctx *err) XF_WARN_UNUSED;

/* Loads the train and test parts of dir in either layout. Both parts have the
 * same record shape (else XF_EFORMAT naming both files) and the same classes:
 * dataset.json's when present, else the largest label of either part + 1. On
 * success the caller owns *train and *test; on failure both are zeroed. */
xf_err xf_dataset_load_dir(const char *dir, xf_dataset *train, xf_dataset *test,
                           xf_errctx *err) XF_WARN_UNUSED;
/* Same, with CSV options (NULL: label in the last column) and the layout found
 * reported in *layout (may be NULL). */
xf_err xf_dataset_load_dir_with(const char *dir, const xf_csv_options *csv,
                                xf_dataset_layout *layout, xf_dataset *train, xf_dataset *test,
                                xf_errctx *err) XF_WARN_UNUSED;

/* Writes train and test into the existing directory dir in the given layout
 * (IDX as four .gz files) plus dataset.json with their classes, so that
 * xf_dataset_load_dir reads them back. extra_json, when not NULL, is a JSON
 * object whose members are added to dataset.json. Not atomic. */
xf_err xf_dataset_write_dir(const char *dir, xf_dataset_layout layout, const xf_dataset *train,
                            const xf_dataset *test, const char *extra_json,
                            xf_errctx *err) XF_WARN_UNUSED;

/* ---- splits into per-site shards ---------------------------------------------- */

typedef enum xf_split_kind {
  XF_SPLIT_IID = 0,   /* "iid" */
  XF_SPLIT_DIRICHLET, /* "dirichlet:ALPHA", ALPHA > 0 */
  XF_SPLIT_CLASSES    /* "classes:K", K >= 1 */
} xf_split_kind;

typedef struct xf_split_scheme {
  xf_split_kind kind;
  double alpha; /* dirichlet concentration */
  uint32_t k;   /* classes per site */
} xf_split_scheme;

/* Parses "iid", "dirichlet:ALPHA" (0 < ALPHA <= 1e6) or "classes:K"
 * (1 <= K <= 65536); XF_EINVAL with a message otherwise. */
xf_err xf_split_scheme_parse(const char *s, xf_split_scheme *out, xf_errctx *err) XF_WARN_UNUSED;
/* The canonical text of a scheme ("dirichlet:0.5"), which parses back to it. */
void xf_split_scheme_format(const xf_split_scheme *s, char *buf, size_t n);

typedef struct xf_split_options {
  uint32_t min_records; /* fewest train records a site may get; 0 = 10 */
  uint32_t max_draws;   /* dirichlet: draws before giving up; 0 = 1000 */
} xf_split_options;

/* Which source records go to which site: site s's train records are
 * train_idx[train_off[s] .. train_off[s + 1]), indices into the source train
 * set in ascending order; the same for test. Every source record is in
 * exactly one site. Owned by the caller; release with xf_split_plan_free. */
typedef struct xf_split_plan {
  int sites;
  uint32_t *train_off; /* sites + 1 entries */
  uint32_t *train_idx; /* train->n entries */
  uint32_t *test_off;
  uint32_t *test_idx;
} xf_split_plan;

/* Decides a split of train and test over `sites` sites (1 <= sites <= 10000)
 * with the scheme (docs/data.md has the algorithms):
 *  - iid: the shuffled train set dealt into equal parts (sizes differ by 1);
 *  - dirichlet:A: per class, proportions over sites drawn from Dirichlet(A)
 *    (NIID-Bench's label skew), drawn again until every site has
 *    min_records train records and a test record, at most max_draws times;
 *  - classes:K: each site holds K distinct classes, every class present in
 *    train is held by at least one site, and a class's records are divided
 *    evenly among the sites that hold it (NIID-Bench "#C=k").
 * Each site's test part follows its train part's label distribution: the
 * records of each class of the test set are divided among the sites in
 * proportion to the sites' train counts of that class (largest remainders,
 * exact integer arithmetic). The same inputs and seed give the same plan.
 * XF_EINVAL (with what to change) when the scheme cannot be met. opt may be
 * NULL. On failure *out is zeroed. */
xf_err xf_split_plan_make(const xf_dataset *train, const xf_dataset *test, int sites,
                          const xf_split_scheme *scheme, uint64_t seed,
                          const xf_split_options *opt, xf_split_plan *out,
                          xf_errctx *err) XF_WARN_UNUSED;
void xf_split_plan_free(xf_split_plan *plan);

/* A split with each site's shard copied out of the source. */
typedef struct xf_split {
  int sites;
  xf_split_scheme scheme;
  uint64_t seed;
  uint32_t classes;        /* of the source; every shard has the same */
  uint32_t min_records;    /* the minimum the split was made with */
  xf_dataset_pair *shards; /* sites entries; shard s is site "site-(s+1)" */
} xf_split;

/* xf_split_plan_make, then copies every site's records into its shard. Shards
 * keep the source's shape and classes. The caller owns *out (xf_split_free);
 * on failure *out is zeroed. */
xf_err xf_dataset_split(const xf_dataset *train, const xf_dataset *test, int sites,
                        const xf_split_scheme *scheme, uint64_t seed,
                        const xf_split_options *opt, xf_split *out,
                        xf_errctx *err) XF_WARN_UNUSED;
void xf_split_free(xf_split *split);

/* The manifest of a split as a JSON document (format in docs/data.md): scheme,
 * seed, source, layout, classes, shape, and per site its name, train and test
 * record counts and label counts per class. *json is owned by the caller and
 * released with xf_free. */
xf_err xf_split_manifest(const xf_split *split, const char *source, xf_dataset_layout layout,
                         char **json, xf_errctx *err) XF_WARN_UNUSED;

/* XF_OK when outdir is an empty directory, or absent with an existing
 * parent directory; XF_EEXISTS when it exists and is not an empty directory,
 * XF_ENOENT when its parent is missing, each with what to do about it. */
xf_err xf_split_check_out(const char *outdir, xf_errctx *err) XF_WARN_UNUSED;

/* Writes outdir/site-1 ... site-N (each a dataset directory of the source's
 * layout, with dataset.json) and outdir/manifest.json. Everything is built in
 * a fresh sibling directory "OUTDIR.tmp-XXXXXX" that is renamed to outdir only
 * once complete, and removed on failure, so outdir either does not appear or
 * is complete. Refuses what xf_split_check_out refuses. source is recorded in
 * the manifest and in every shard's dataset.json. */
xf_err xf_split_write(const xf_split *split, const char *source, xf_dataset_layout layout,
                      const char *outdir, xf_errctx *err) XF_WARN_UNUSED;

#endif
