/* SPDX-License-Identifier: Apache-2.0 */
/* Datasets in memory and on disk: allocation, the IDX and CSV directory
 * layouts, dataset.json, and loading and writing a train/test pair. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "data/dataset_internal.h"
#include "base/file.h"

void xf_dataset_free(xf_dataset *ds) {
  if (!ds) return;
  xf_free(ds->x);
  xf_free(ds->y);
  memset(ds, 0, sizeof(*ds));
}

void xf_dataset_pair_free(xf_dataset_pair *pair) {
  if (!pair) return;
  xf_dataset_free(&pair->train);
  xf_dataset_free(&pair->test);
}

xf_err xf_dataset_alloc(xf_dataset *out, uint32_t n, uint32_t h, uint32_t w, uint32_t c,
                        uint32_t classes, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (n == 0 || h == 0 || w == 0 || c == 0 || classes == 0)
    return xf_fail(err, XF_ERANGE, "a dataset of %u records of %ux%ux%u in %u classes is empty",
                   n, h, w, c, classes);
  uint64_t features = (uint64_t)h * w * c;
  if (features > XF_DATASET_MAX_VALUES || (uint64_t)n * features > XF_DATASET_MAX_VALUES)
    return xf_fail(err, XF_ERANGE,
                   "%u records of %ux%ux%u are more than the %llu values xfed holds in one "
                   "dataset",
                   n, h, w, c, (unsigned long long)XF_DATASET_MAX_VALUES);
  out->x = xf_calloc((size_t)(n * features), sizeof(float));
  out->y = xf_calloc(n, sizeof(int32_t));
  if (!out->x || !out->y) {
    xf_dataset_free(out);
    return xf_fail(err, XF_ENOMEM, "out of memory for %u records of %llu features", n,
                   (unsigned long long)features);
  }
  out->n = n;
  out->h = h;
  out->w = w;
  out->c = c;
  out->features = (uint32_t)features;
  out->classes = classes;
  return XF_OK;
}

void xf_dataset_label_counts(const xf_dataset *ds, uint64_t *counts) {
  memset(counts, 0, ds->classes * sizeof(*counts));
  for (uint32_t i = 0; i < ds->n; i++)
    if (ds->y[i] >= 0 && (uint32_t)ds->y[i] < ds->classes) counts[ds->y[i]]++;
}

/* ---- layouts ------------------------------------------------------------------ */

enum { IDX_TRAIN_IMAGES, IDX_TRAIN_LABELS, IDX_TEST_IMAGES, IDX_TEST_LABELS, IDX_FILES };
static const char *const idx_names[IDX_FILES] = {
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte"};
enum { CSV_TRAIN, CSV_TEST, CSV_FILES };
static const char *const csv_names[CSV_FILES] = {"train.csv", "test.csv"};
enum { NPY_TRAIN_X, NPY_TRAIN_Y, NPY_TEST_X, NPY_TEST_Y, NPY_FILES };
static const char *const npy_names[NPY_FILES] = {"train-x.npy", "train-y.npy", "test-x.npy",
                                                 "test-y.npy"};
enum { NPZ_TRAIN, NPZ_TEST, NPZ_FILES };
static const char *const npz_names[NPZ_FILES] = {"train.npz", "test.npz"};
static const char dataset_json[] = "dataset.json";
static const char schema_json[] = "schema.json";

/* The layouts in the order they are looked for and named in messages. */
typedef struct layout_desc {
  xf_dataset_layout layout;
  const char *label;
  const char *const *names;
  int count;
  bool gz; /* each file may also be NAME.gz */
} layout_desc;
static const layout_desc layouts[] = {
    {XF_LAYOUT_IDX, "IDX", idx_names, IDX_FILES, true},
    {XF_LAYOUT_CSV, "CSV", csv_names, CSV_FILES, true},
    {XF_LAYOUT_NPY, "NPY", npy_names, NPY_FILES, true},
    {XF_LAYOUT_NPZ, "NPZ", npz_names, NPZ_FILES, false},
};
#define N_LAYOUTS (sizeof(layouts) / sizeof(layouts[0]))

const char *xf_dataset_layout_name(xf_dataset_layout layout) {
  switch (layout) {
  case XF_LAYOUT_CSV: return "csv";
  case XF_LAYOUT_NPY: return "npy";
  case XF_LAYOUT_NPZ: return "npz";
  default: return "idx";
  }
}

static xf_err join_path(const char *dir, const char *name, const char *suffix, char *buf,
                        size_t n, xf_errctx *err) {
  int w = snprintf(buf, n, "%s/%s%s", dir, name, suffix);
  if (w < 0 || (size_t)w >= n)
    return xf__data_fail(err, dir, XF_ERANGE, "path too long for %s%s", name, suffix);
  return XF_OK;
}

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Finds dir/name or, failing that and when allowed, dir/name.gz. */
static xf_err find_file(const char *dir, const char *name, bool gz, char *path, size_t n,
                        bool *found, xf_errctx *err) {
  XF_GUARD(join_path(dir, name, "", path, n, err));
  *found = is_file(path);
  if (*found || !gz) return XF_OK;
  XF_GUARD(join_path(dir, name, ".gz", path, n, err));
  *found = is_file(path);
  return XF_OK;
}

/* Paths of the layout's files (at most IDX_FILES of them). */
typedef struct layout_paths {
  char path[IDX_FILES][PATH_MAX];
} layout_paths;

static xf_err find_layout(const char *dir, xf_dataset_layout *out, layout_paths *paths,
                          xf_errctx *err) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return xf__data_fail(err, dir, errno == ENOENT ? XF_ENOENT : XF_EIO,
                         "cannot open the dataset directory: %s", strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return xf__data_fail(err, dir, XF_EINVAL, "not a directory: give the directory that holds "
                                              "the dataset files");
  bool found[N_LAYOUTS][IDX_FILES];
  int count[N_LAYOUTS];
  layout_paths *p = xf_calloc(N_LAYOUTS, sizeof(layout_paths));
  if (!p) return xf__data_fail(err, dir, XF_ENOMEM, "out of memory");
  xf_err rc = XF_OK;
  int first = -1, second = -1;
  for (size_t l = 0; l < N_LAYOUTS && rc == XF_OK; l++) {
    count[l] = 0;
    for (int i = 0; i < layouts[l].count && rc == XF_OK; i++) {
      rc = find_file(dir, layouts[l].names[i], layouts[l].gz, p[l].path[i],
                     sizeof(p[l].path[i]), &found[l][i], err);
      count[l] += found[l][i];
    }
    if (count[l] && first < 0) first = (int)l;
    else if (count[l] && second < 0) second = (int)l;
  }
  if (rc != XF_OK) goto done;
  if (second >= 0) {
    rc = xf__data_fail(err, dir, XF_EFORMAT,
                       "holds both %s files (%s...) and %s files (%s...): keep one layout in a "
                       "dataset directory",
                       layouts[first].label, layouts[first].names[0], layouts[second].label,
                       layouts[second].names[0]);
    goto done;
  }
  if (first >= 0 && count[first] == layouts[first].count) {
    *out = layouts[first].layout;
    if (paths) *paths = p[first];
    goto done;
  }
  if (first >= 0) {
    const layout_desc *d = &layouts[first];
    char missing[512] = "";
    size_t used = 0;
    for (int i = 0; i < d->count; i++)
      if (!found[first][i] && used < sizeof(missing))
        used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%s%s",
                                 used ? ", " : "", d->names[i], d->gz ? "[.gz]" : "");
    rc = xf__data_fail(err, dir, XF_ENOENT, "holds part of the %s layout: %s %s missing",
                       d->label, missing, d->count - count[first] == 1 ? "is" : "are");
    goto done;
  }
  rc = xf__data_fail(err, dir, XF_ENOENT,
                     "holds no dataset: looked for the IDX layout (%s, %s, %s, %s, each plain "
                     "or .gz), the CSV layout (%s, %s), the NPY layout (%s, %s, %s, %s) and the "
                     "NPZ layout (%s, %s)",
                     idx_names[0], idx_names[1], idx_names[2], idx_names[3], csv_names[0],
                     csv_names[1], npy_names[0], npy_names[1], npy_names[2], npy_names[3],
                     npz_names[0], npz_names[1]);
done:
  xf_free(p);
  return rc;
}

xf_err xf_dataset_find_layout(const char *dir, xf_dataset_layout *out, xf_errctx *err) {
  return find_layout(dir, out, NULL, err);
}

/* dataset.json's "classes", or 0 when the file is absent. */
static xf_err read_dataset_json(const char *dir, xf_dataset_layout layout, uint32_t *classes,
                                xf_errctx *err) {
  *classes = 0;
  char path[PATH_MAX];
  XF_GUARD(join_path(dir, dataset_json, "", path, sizeof(path), err));
  if (!is_file(path)) return XF_OK;
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return xf__data_fail(err, path, XF_EFORMAT, "line %d: %s", jerr.line, jerr.text);
  xf_err rc = XF_OK;
  json_t *c = json_is_object(root) ? json_object_get(root, "classes") : NULL;
  uint32_t limit = layout == XF_LAYOUT_IDX ? XF_IDX_MAX_CLASSES : XF_CSV_MAX_CLASSES;
  if (!json_is_object(root)) {
    rc = xf__data_fail(err, path, XF_EFORMAT, "must be a JSON object such as {\"classes\": 10}");
  } else if (c && (!json_is_integer(c) || json_integer_value(c) < 1 ||
                   json_integer_value(c) > (json_int_t)limit)) {
    rc = xf__data_fail(err, path, XF_ERANGE, "\"classes\" must be a whole number in [1, %u]",
                       limit);
    if (err) xf_errctx_field(err, "classes");
  } else if (c) {
    *classes = (uint32_t)json_integer_value(c);
  }
  json_decref(root);
  return rc;
}

/* Fails naming the first record whose label is not below classes. */
static xf_err check_labels(const xf_dataset *ds, const char *file, uint32_t classes,
                           xf_errctx *err) {
  for (uint32_t i = 0; i < ds->n; i++)
    if ((uint32_t)ds->y[i] >= classes)
      return xf__data_fail(err, file, XF_ERANGE,
                           "record %u has label %d but %s declares %u classes (labels 0 to %u)",
                           i + 1, ds->y[i], dataset_json, classes, classes - 1);
  return XF_OK;
}

/* Reads train and test of a CSV directory with schema.json: the schema's
 * column rules, then normalization with the training split's statistics. */
static xf_err load_schema_csv(const char *dir, const xf_csv_options *csv, const layout_paths *paths,
                              xf_dataset *train, xf_dataset *test, xf_errctx *err) {
  char path[PATH_MAX];
  XF_GUARD(join_path(dir, schema_json, "", path, sizeof(path), err));
  if (csv && (csv->label_name || csv->label_column))
    return xf__data_fail(err, path, XF_EINVAL,
                         "declares the label column: drop the label option (--label) for this "
                         "dataset");
  xf_schema *schema = NULL;
  XF_GUARD(xf_schema_read(path, &schema, err));
  xf_err rc = xf_schema_csv_read(schema, paths->path[CSV_TRAIN], train, err);
  if (rc == XF_OK) rc = xf_schema_csv_read(schema, paths->path[CSV_TEST], test, err);
  if (rc == XF_OK) rc = xf_schema_normalize(schema, train, test, err);
  xf_schema_free(schema);
  return rc;
}

static xf_err load_pair(const char *dir, const xf_csv_options *csv, xf_dataset_layout *layout,
                        xf_dataset *train, xf_dataset *test, xf_errctx *err) {
  layout_paths paths;
  XF_GUARD(find_layout(dir, layout, &paths, err));
  uint32_t declared;
  XF_GUARD(read_dataset_json(dir, *layout, &declared, err));
  const char *train_labels, *test_labels, *train_file, *test_file;
  char schema_path[PATH_MAX];
  XF_GUARD(join_path(dir, schema_json, "", schema_path, sizeof(schema_path), err));
  if (*layout != XF_LAYOUT_CSV && is_file(schema_path))
    return xf__data_fail(err, schema_path, XF_EINVAL,
                         "a column schema applies to CSV files, but the directory holds the %s "
                         "layout: remove schema.json",
                         xf_dataset_layout_name(*layout));
  if (*layout == XF_LAYOUT_IDX) {
    XF_GUARD(xf_idx_read(paths.path[IDX_TRAIN_IMAGES], paths.path[IDX_TRAIN_LABELS], train, err));
    XF_GUARD(xf_idx_read(paths.path[IDX_TEST_IMAGES], paths.path[IDX_TEST_LABELS], test, err));
    train_file = paths.path[IDX_TRAIN_IMAGES];
    test_file = paths.path[IDX_TEST_IMAGES];
    train_labels = paths.path[IDX_TRAIN_LABELS];
    test_labels = paths.path[IDX_TEST_LABELS];
  } else if (*layout == XF_LAYOUT_NPY) {
    XF_GUARD(xf_npy_read(paths.path[NPY_TRAIN_X], paths.path[NPY_TRAIN_Y], train, err));
    XF_GUARD(xf_npy_read(paths.path[NPY_TEST_X], paths.path[NPY_TEST_Y], test, err));
    train_file = paths.path[NPY_TRAIN_X];
    test_file = paths.path[NPY_TEST_X];
    train_labels = paths.path[NPY_TRAIN_Y];
    test_labels = paths.path[NPY_TEST_Y];
  } else if (*layout == XF_LAYOUT_NPZ) {
    XF_GUARD(xf_npz_read(paths.path[NPZ_TRAIN], train, err));
    XF_GUARD(xf_npz_read(paths.path[NPZ_TEST], test, err));
    train_file = train_labels = paths.path[NPZ_TRAIN];
    test_file = test_labels = paths.path[NPZ_TEST];
  } else {
    if (is_file(schema_path)) {
      XF_GUARD(load_schema_csv(dir, csv, &paths, train, test, err));
    } else {
      XF_GUARD(xf_csv_read(paths.path[CSV_TRAIN], csv, train, err));
      XF_GUARD(xf_csv_read(paths.path[CSV_TEST], csv, test, err));
    }
    train_file = train_labels = paths.path[CSV_TRAIN];
    test_file = test_labels = paths.path[CSV_TEST];
  }
  if (train->h != test->h || train->w != test->w || train->c != test->c) {
    if (train->h == 1 && train->w == 1 && test->h == 1 && test->w == 1)
      return xf__data_fail(err, test_file,
                           XF_EFORMAT, "has %u features but %s has %u: train and test must have "
                           "the same columns",
                           test->features, train_file, train->features);
    return xf__data_fail(err, test_file, XF_EFORMAT,
                         "holds images of %ux%ux%u but %s holds %ux%ux%u: train and test must "
                         "have the same shape",
                         test->h, test->w, test->c, train_file, train->h, train->w, train->c);
  }
  uint32_t classes = train->classes > test->classes ? train->classes : test->classes;
  if (declared) {
    XF_GUARD(check_labels(train, train_labels, declared, err));
    XF_GUARD(check_labels(test, test_labels, declared, err));
    classes = declared;
  }
  train->classes = test->classes = classes;
  return XF_OK;
}

xf_err xf_dataset_load_dir_with(const char *dir, const xf_csv_options *csv,
                                xf_dataset_layout *layout, xf_dataset *train, xf_dataset *test,
                                xf_errctx *err) {
  memset(train, 0, sizeof(*train));
  memset(test, 0, sizeof(*test));
  xf_dataset_layout found = XF_LAYOUT_IDX;
  xf_err rc = load_pair(dir, csv, &found, train, test, err);
  if (rc != XF_OK) {
    xf_dataset_free(train);
    xf_dataset_free(test);
    return rc;
  }
  if (layout) *layout = found;
  return XF_OK;
}

xf_err xf_dataset_load_dir(const char *dir, xf_dataset *train, xf_dataset *test,
                           xf_errctx *err) {
  return xf_dataset_load_dir_with(dir, NULL, NULL, train, test, err);
}

static xf_err write_dataset_json(const char *dir, uint32_t classes, const char *extra_json,
                                 xf_errctx *err) {
  char path[PATH_MAX];
  XF_GUARD(join_path(dir, dataset_json, "", path, sizeof(path), err));
  json_t *root = NULL;
  if (extra_json) {
    json_error_t jerr;
    root = json_loads(extra_json, 0, &jerr);
    if (!json_is_object(root)) {
      json_decref(root);
      return xf__data_fail(err, path, XF_EINVAL, "extra members are not a JSON object");
    }
  } else {
    root = json_object();
  }
  if (!root || json_object_set_new(root, "classes", json_integer(classes)) != 0) {
    json_decref(root);
    return xf__data_fail(err, path, XF_ENOMEM, "out of memory");
  }
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(root);
  if (!text) return xf__data_fail(err, path, XF_ENOMEM, "out of memory");
  xf_err rc = xf_file_write_atomic(path, text, strlen(text), 0644, err);
  free(text); /* jansson's allocator */
  return rc;
}

xf_err xf_dataset_write_dir(const char *dir, xf_dataset_layout layout, const xf_dataset *train,
                            const xf_dataset *test, const char *extra_json, xf_errctx *err) {
  if (train->h != test->h || train->w != test->w || train->c != test->c ||
      train->classes != test->classes)
    return xf__data_fail(err, dir, XF_EINVAL,
                         "train and test differ in shape or classes and cannot form one "
                         "dataset directory");
  char a[PATH_MAX], b[PATH_MAX];
  if (layout == XF_LAYOUT_IDX) {
    XF_GUARD(join_path(dir, idx_names[IDX_TRAIN_IMAGES], ".gz", a, sizeof(a), err));
    XF_GUARD(join_path(dir, idx_names[IDX_TRAIN_LABELS], ".gz", b, sizeof(b), err));
    XF_GUARD(xf_idx_write(a, b, train, err));
    XF_GUARD(join_path(dir, idx_names[IDX_TEST_IMAGES], ".gz", a, sizeof(a), err));
    XF_GUARD(join_path(dir, idx_names[IDX_TEST_LABELS], ".gz", b, sizeof(b), err));
    XF_GUARD(xf_idx_write(a, b, test, err));
  } else if (layout == XF_LAYOUT_NPY || layout == XF_LAYOUT_NPZ) {
    /* Shards of either NumPy layout are written as .npy files. */
    XF_GUARD(join_path(dir, npy_names[NPY_TRAIN_X], "", a, sizeof(a), err));
    XF_GUARD(join_path(dir, npy_names[NPY_TRAIN_Y], "", b, sizeof(b), err));
    XF_GUARD(xf_npy_write(a, b, train, err));
    XF_GUARD(join_path(dir, npy_names[NPY_TEST_X], "", a, sizeof(a), err));
    XF_GUARD(join_path(dir, npy_names[NPY_TEST_Y], "", b, sizeof(b), err));
    XF_GUARD(xf_npy_write(a, b, test, err));
  } else {
    XF_GUARD(join_path(dir, csv_names[CSV_TRAIN], "", a, sizeof(a), err));
    XF_GUARD(xf_csv_write(a, train, err));
    XF_GUARD(join_path(dir, csv_names[CSV_TEST], "", a, sizeof(a), err));
    XF_GUARD(xf_csv_write(a, test, err));
  }
  return write_dataset_json(dir, train->classes, extra_json, err);
}

const char *const *xf__dataset_dir_files(size_t *count) {
  static const char *const files[] = {
      "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
      "t10k-labels-idx1-ubyte.gz", "train.csv", "test.csv", "train-x.npy", "train-y.npy",
      "test-x.npy", "test-y.npy", "dataset.json"};
  *count = sizeof(files) / sizeof(files[0]);
  return files;
}
