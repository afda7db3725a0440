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
#include "site/dataset_internal.h"
#include "storage/file.h"

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
static const char dataset_json[] = "dataset.json";

const char *xf_dataset_layout_name(xf_dataset_layout layout) {
  return layout == XF_LAYOUT_CSV ? "csv" : "idx";
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

/* Finds dir/name or, failing that, dir/name.gz. */
static xf_err find_file(const char *dir, const char *name, char *path, size_t n, bool *found,
                        xf_errctx *err) {
  XF_GUARD(join_path(dir, name, "", path, n, err));
  *found = is_file(path);
  if (*found) return XF_OK;
  XF_GUARD(join_path(dir, name, ".gz", path, n, err));
  *found = is_file(path);
  return XF_OK;
}

/* Paths of the layout's files (IDX_FILES or CSV_FILES of them). */
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
  bool idx_found[IDX_FILES], csv_found[CSV_FILES];
  int idx_count = 0, csv_count = 0;
  layout_paths idx, csv;
  for (int i = 0; i < IDX_FILES; i++) {
    XF_GUARD(find_file(dir, idx_names[i], idx.path[i], sizeof(idx.path[i]), &idx_found[i], err));
    idx_count += idx_found[i];
  }
  for (int i = 0; i < CSV_FILES; i++) {
    XF_GUARD(find_file(dir, csv_names[i], csv.path[i], sizeof(csv.path[i]), &csv_found[i], err));
    csv_count += csv_found[i];
  }
  if (idx_count && csv_count)
    return xf__data_fail(err, dir, XF_EFORMAT,
                         "holds both IDX files (%s...) and CSV files (%s...): keep one layout "
                         "in a dataset directory",
                         idx_names[0], csv_names[0]);
  if (idx_count == IDX_FILES) {
    *out = XF_LAYOUT_IDX;
    if (paths) *paths = idx;
    return XF_OK;
  }
  if (csv_count == CSV_FILES) {
    *out = XF_LAYOUT_CSV;
    if (paths) *paths = csv;
    return XF_OK;
  }
  char missing[512] = "";
  size_t used = 0;
  for (int i = 0; i < IDX_FILES && idx_count; i++)
    if (!idx_found[i] && used < sizeof(missing))
      used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%s[.gz]",
                               used ? ", " : "", idx_names[i]);
  for (int i = 0; i < CSV_FILES && csv_count; i++)
    if (!csv_found[i] && used < sizeof(missing))
      used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%s[.gz]",
                               used ? ", " : "", csv_names[i]);
  if (idx_count || csv_count)
    return xf__data_fail(err, dir, XF_ENOENT, "holds part of the %s layout: %s %s missing",
                         idx_count ? "IDX" : "CSV", missing,
                         (idx_count ? IDX_FILES - idx_count : CSV_FILES - csv_count) == 1
                             ? "is"
                             : "are");
  return xf__data_fail(err, dir, XF_ENOENT,
                       "holds no dataset: looked for the IDX layout (%s, %s, %s, %s, each plain "
                       "or .gz) and the CSV layout (%s, %s)",
                       idx_names[0], idx_names[1], idx_names[2], idx_names[3], csv_names[0],
                       csv_names[1]);
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

static xf_err load_pair(const char *dir, const xf_csv_options *csv, xf_dataset_layout *layout,
                        xf_dataset *train, xf_dataset *test, xf_errctx *err) {
  layout_paths paths;
  XF_GUARD(find_layout(dir, layout, &paths, err));
  uint32_t declared;
  XF_GUARD(read_dataset_json(dir, *layout, &declared, err));
  const char *train_labels, *test_labels, *train_file, *test_file;
  if (*layout == XF_LAYOUT_IDX) {
    XF_GUARD(xf_idx_read(paths.path[IDX_TRAIN_IMAGES], paths.path[IDX_TRAIN_LABELS], train, err));
    XF_GUARD(xf_idx_read(paths.path[IDX_TEST_IMAGES], paths.path[IDX_TEST_LABELS], test, err));
    train_file = paths.path[IDX_TRAIN_IMAGES];
    test_file = paths.path[IDX_TEST_IMAGES];
    train_labels = paths.path[IDX_TRAIN_LABELS];
    test_labels = paths.path[IDX_TEST_LABELS];
  } else {
    XF_GUARD(xf_csv_read(paths.path[CSV_TRAIN], csv, train, err));
    XF_GUARD(xf_csv_read(paths.path[CSV_TEST], csv, test, err));
    train_file = train_labels = paths.path[CSV_TRAIN];
    test_file = test_labels = paths.path[CSV_TEST];
  }
  if (train->h != test->h || train->w != test->w || train->c != test->c) {
    if (*layout == XF_LAYOUT_CSV)
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
      "t10k-labels-idx1-ubyte.gz", "train.csv", "test.csv", "dataset.json"};
  *count = sizeof(files) / sizeof(files[0]);
  return files;
}
