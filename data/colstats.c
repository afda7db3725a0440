/* SPDX-License-Identifier: Apache-2.0 */
/* Pooled normalization statistics (data/colstats.h): a site's per-column
 * count, mean and M2, the statistics file, the pooling of several sites'
 * files and the schema written from the pooled figures. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "data/colstats.h"
#include "data/dataset_internal.h"
#include "base/file.h"

void xf_colstats_free(xf_colstats *st) {
  if (!st) return;
  xf_free(st->cols);
  memset(st, 0, sizeof(*st));
}

double xf_colstat_std(const xf_colstat *c) {
  return c->count ? sqrt(c->m2 / (double)c->count) : 0.0;
}

double xf_colstat_norm_std(const xf_colstat *c) {
  double sd = xf_colstat_std(c);
  /* The threshold of xf_schema_normalize's "train" columns. */
  return sd > 1e-12 ? sd : 1.0;
}

/* text as JSON (duplicate keys refused); a syntax error names the file,
 * line and column. */
static xf_err load_json(const char *text, size_t len, const char *name, json_t **root,
                        xf_errctx *err) {
  json_error_t jerr;
  *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (*root) return XF_OK;
  char at[64];
  snprintf(at, sizeof(at), "line %d, column %d", jerr.line, jerr.column);
  return xf_fail_in_file(err, XF_EFORMAT, name, at, "%s", jerr.text);
}

/* ---- the schema's digest -------------------------------------------------------------- */

xf_err xf_schema_digest(const char *text, size_t len, const char *name, char hex[XF_DIGEST_HEX],
                        xf_errctx *err) {
  json_t *root;
  XF_GUARD(load_json(text, len, name, &root, err));
  char *canon = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!canon) return xf_fail_in_file(err, XF_ENOMEM, name, NULL, "out of memory");
  xf_digest d;
  xf_digest_buf(canon, strlen(canon), &d);
  free(canon);
  xf_digest_hex(&d, hex);
  return XF_OK;
}

/* ---- one site's statistics ------------------------------------------------------------ */

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static xf_err dir_file(const char *dir, const char *name, char *path, size_t n, xf_errctx *err) {
  int w = snprintf(path, n, "%s/%s", dir, name);
  if (w < 0 || (size_t)w >= n)
    return xf_fail_in_file(err, XF_ERANGE, dir, NULL, "path too long for %s", name);
  return XF_OK;
}

/* Welford's update over one column of the training split: stable where the
 * textbook sum of squares cancels (large means, small spreads). */
static void column_stats(const xf_dataset *train, uint32_t offset, xf_colstat *c) {
  double mean = 0, m2 = 0;
  for (uint32_t i = 0; i < train->n; i++) {
    double v = train->x[(size_t)i * train->features + offset];
    double d = v - mean;
    mean += d / (double)(i + 1);
    m2 += d * (v - mean);
  }
  c->count = train->n;
  c->mean = mean;
  c->m2 = m2;
}

xf_err xf_colstats_compute(const char *dir, xf_colstats *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  char schema_path[PATH_MAX], train_path[PATH_MAX];
  XF_GUARD(dir_file(dir, "schema.json", schema_path, sizeof(schema_path), err));
  if (!is_file(schema_path))
    return xf_fail_in_file(
        err, XF_EINVAL, dir, NULL,
        "has no schema.json: statistics are computed for tabular CSV datasets with "
        "a column schema (docs/data.md)");
  XF_GUARD(dir_file(dir, "train.csv", train_path, sizeof(train_path), err));
  if (!is_file(train_path))
    XF_GUARD(dir_file(dir, "train.csv.gz", train_path, sizeof(train_path), err));
  if (!is_file(train_path))
    return xf_fail_in_file(err, XF_ENOENT, dir, NULL,
                           "has schema.json but no train.csv or train.csv.gz");

  char *text = NULL;
  size_t len = 0;
  XF_GUARD(xf_file_read_text(schema_path, XF_SCHEMA_MAX_BYTES, &text, &len, err));
  xf_schema *schema = NULL;
  xf_err rc = xf_schema_parse(text, len, schema_path, &schema, err);
  if (rc == XF_OK) rc = xf_schema_digest(text, len, schema_path, out->schema_digest, err);
  xf_free(text);
  uint32_t numeric = 0;
  for (uint32_t k = 0; rc == XF_OK && k < schema->n_cols; k++)
    numeric += schema->cols[k].type == XF__COL_NUMERIC;
  if (rc == XF_OK && numeric == 0)
    rc = xf_fail_in_file(err, XF_EINVAL, schema_path, "columns",
                         "declares no numeric column: there is nothing to compute statistics of");
  xf_dataset train = {0};
  if (rc == XF_OK) rc = xf_schema_csv_read(schema, train_path, &train, err);
  if (rc == XF_OK && !(out->cols = xf_calloc(numeric, sizeof(*out->cols))))
    rc = xf_fail_in_file(err, XF_ENOMEM, dir, NULL, "out of memory");
  for (uint32_t k = 0; rc == XF_OK && k < schema->n_cols; k++) {
    const xf__schema_col *sc = &schema->cols[k];
    if (sc->type != XF__COL_NUMERIC) continue;
    xf_colstat *c = &out->cols[out->n_cols++];
    snprintf(c->name, sizeof(c->name), "%s", sc->name);
    column_stats(&train, sc->offset, c);
  }
  xf_dataset_free(&train);
  xf_schema_free(schema);
  if (rc != XF_OK) xf_colstats_free(out);
  return rc;
}

/* ---- the statistics file ------------------------------------------------------------- */

/* root as a file's text: indented, members in order, reals with 17
 * significant digits (they read back to the same double), ending in a
 * newline. xf_malloc'd; NULL when memory runs out. */
static char *dump_file(json_t *root) {
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  size_t n = text ? strlen(text) : 0;
  char *copy = text ? xf_malloc(n + 2) : NULL;
  if (copy) {
    memcpy(copy, text, n);
    copy[n] = '\n';
    copy[n + 1] = '\0';
  }
  free(text);
  return copy;
}

xf_err xf_colstats_format(const xf_colstats *st, char **json, xf_errctx *err) {
  *json = NULL;
  json_t *cols = json_array();
  json_t *root = cols ? json_pack("{s:s,s:i,s:s,s:s,s:s,s:s,s:o}", "format", XF_COLSTATS_FORMAT,
                                  "version", XF_COLSTATS_VERSION, "dataset", st->dataset, "site",
                                  st->site, "schema_digest", st->schema_digest, "split", "train",
                                  "columns", cols)
                      : NULL;
  bool ok = root != NULL;
  for (uint32_t i = 0; ok && i < st->n_cols; i++) {
    const xf_colstat *c = &st->cols[i];
    ok = json_array_append_new(cols, json_pack("{s:s,s:I,s:f,s:f}", "name", c->name, "count",
                                               (json_int_t)c->count, "mean", c->mean, "m2",
                                               c->m2)) == 0;
  }
  char *copy = ok ? dump_file(root) : NULL;
  json_decref(root);
  if (!copy) return xf_fail_in_file(err, XF_ENOMEM, NULL, NULL, "out of memory");
  *json = copy;
  return XF_OK;
}

/* 1 to 63 of a-z, 0-9, '-' and '_', starting with a letter or digit: the rule
 * of dataset names, which site names (labels) also meet. */
static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 63) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
    if (!alnum && (i == 0 || (ch != '-' && ch != '_'))) return false;
  }
  return true;
}

static xf_err check_members(const json_t *obj, const char *const *known, const char *file,
                            const char *where, xf_errctx *err) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    bool ok = false;
    for (size_t i = 0; known[i]; i++) ok = ok || strcmp(key, known[i]) == 0;
    if (!ok) {
      char list[160] = "";
      size_t used = 0;
      for (size_t i = 0; known[i] && used < sizeof(list); i++)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                 known[i]);
      char shown[80];
      xf__printable(shown, sizeof(shown), key, strlen(key));
      return xf_fail_in_file(err, XF_EINVAL, file, where, "unknown member '%s' (known: %s)", shown,
                             list);
    }
  }
  return XF_OK;
}

/* A member that must be a string meeting name_ok, copied into out. */
static xf_err parse_name(const json_t *root, const char *key, const char *file, char *out,
                         size_t n, xf_errctx *err) {
  const json_t *v = json_object_get(root, key);
  const char *s = json_string_value(v);
  if (!s || strlen(s) != json_string_length(v) || !name_ok(s))
    return xf_fail_in_file(err, XF_EINVAL, file, key,
                           "must be a name of 1 to 63 of a-z, 0-9, '-' and '_', starting with a "
                           "letter or digit");
  snprintf(out, n, "%s", s);
  return XF_OK;
}

static xf_err parse_column(const json_t *o, uint32_t i, const char *file, xf_colstat *c,
                           xf_errctx *err) {
  char where[64];
  snprintf(where, sizeof(where), "columns[%u]", i);
  if (!json_is_object(o))
    return xf_fail_in_file(err, XF_EINVAL, file, where,
                           "must be an object {\"name\", \"count\", \"mean\", \"m2\"}");
  static const char *const keys[] = {"name", "count", "mean", "m2", NULL};
  XF_GUARD(check_members(o, keys, file, where, err));
  char at[96];
  const json_t *name = json_object_get(o, "name");
  const char *nm = json_string_value(name);
  snprintf(at, sizeof(at), "%s.name", where);
  if (!nm || json_string_length(name) == 0 || strlen(nm) != json_string_length(name) ||
      json_string_length(name) > XF_SCHEMA_MAX_NAME)
    return xf_fail_in_file(err, XF_EINVAL, file, at,
                           "must be the column's name as the schema gives it (1 to %d characters)",
                           XF_SCHEMA_MAX_NAME);
  snprintf(c->name, sizeof(c->name), "%s", nm);
  const json_t *count = json_object_get(o, "count");
  snprintf(at, sizeof(at), "%s.count", where);
  if (!json_is_integer(count) || json_integer_value(count) < 0)
    return xf_fail_in_file(err, XF_EINVAL, file, at,
                           "must be a whole number of records, 0 or more");
  c->count = (uint64_t)json_integer_value(count);
  const json_t *mean = json_object_get(o, "mean");
  snprintf(at, sizeof(at), "%s.mean", where);
  if (!json_is_number(mean) || !isfinite(json_number_value(mean)))
    return xf_fail_in_file(err, XF_EINVAL, file, at, "must be a finite number");
  c->mean = json_number_value(mean);
  const json_t *m2 = json_object_get(o, "m2");
  snprintf(at, sizeof(at), "%s.m2", where);
  if (!json_is_number(m2) || !isfinite(json_number_value(m2)) || json_number_value(m2) < 0)
    return xf_fail_in_file(err, XF_EINVAL, file, at,
                           "must be a finite number of at least 0 (the sum of squared deviations)");
  c->m2 = json_number_value(m2);
  if (c->count == 0 && (c->mean != 0 || c->m2 != 0))
    return xf_fail_in_file(err, XF_EINVAL, file, where, "a count of 0 has mean 0 and m2 0");
  return XF_OK;
}

static xf_err parse_root(const json_t *root, const char *file, xf_colstats *out, xf_errctx *err) {
  if (!json_is_object(root))
    return xf_fail_in_file(err, XF_EINVAL, file, NULL,
                           "must be a JSON object written by 'xfed-site dataset stats'");
  static const char *const keys[] = {"format", "version", "dataset", "site", "schema_digest",
                                     "split", "columns", NULL};
  XF_GUARD(check_members(root, keys, file, NULL, err));
  const char *format = json_string_value(json_object_get(root, "format"));
  if (!format || strcmp(format, XF_COLSTATS_FORMAT) != 0)
    return xf_fail_in_file(
        err, XF_EFORMAT, file, "format",
        "must be \"%s\": this is not a statistics file of 'xfed-site dataset stats'",
        XF_COLSTATS_FORMAT);
  const json_t *version = json_object_get(root, "version");
  if (!json_is_integer(version) || json_integer_value(version) != XF_COLSTATS_VERSION)
    return xf_fail_in_file(err, XF_EUNSUPPORTED, file, "version",
                           "must be %d, the version this xfed reads; compute the statistics again "
                           "with this release",
                           XF_COLSTATS_VERSION);
  XF_GUARD(parse_name(root, "dataset", file, out->dataset, sizeof(out->dataset), err));
  XF_GUARD(parse_name(root, "site", file, out->site, sizeof(out->site), err));
  const char *digest = json_string_value(json_object_get(root, "schema_digest"));
  xf_digest d;
  if (!digest || strlen(digest) != XF_DIGEST_HEX - 1 || xf_digest_parse(digest, &d) != XF_OK)
    return xf_fail_in_file(err, XF_EINVAL, file, "schema_digest",
                           "must be the schema's digest, %d hexadecimal digits", XF_DIGEST_HEX - 1);
  snprintf(out->schema_digest, sizeof(out->schema_digest), "%s", digest);
  const char *split = json_string_value(json_object_get(root, "split"));
  if (!split || strcmp(split, "train") != 0)
    return xf_fail_in_file(err, XF_EINVAL, file, "split",
                           "must be \"train\": statistics are of the training split");
  const json_t *cols = json_object_get(root, "columns");
  if (!json_is_array(cols) || json_array_size(cols) == 0 ||
      json_array_size(cols) > XF_SCHEMA_MAX_COLUMNS)
    return xf_fail_in_file(err, XF_EINVAL, file, "columns",
                           "must be a list of 1 to %u column objects", XF_SCHEMA_MAX_COLUMNS);
  uint32_t n = (uint32_t)json_array_size(cols);
  if (!(out->cols = xf_calloc(n, sizeof(*out->cols))))
    return xf_fail_in_file(err, XF_ENOMEM, file, NULL, "out of memory");
  for (uint32_t i = 0; i < n; i++) {
    XF_GUARD(parse_column(json_array_get(cols, i), i, file, &out->cols[i], err));
    out->n_cols = i + 1;
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(out->cols[j].name, out->cols[i].name) == 0) {
        char at[48];
        snprintf(at, sizeof(at), "columns[%u].name", i);
        return xf_fail_in_file(err, XF_EINVAL, file, at,
                               "column '%s' is listed twice (also columns[%u])", out->cols[i].name,
                               j);
      }
  }
  return XF_OK;
}

xf_err xf_colstats_parse(const char *text, size_t len, const char *name, xf_colstats *out,
                         xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (!name) name = "stats.json";
  if (len > XF_COLSTATS_MAX_BYTES)
    return xf_fail_in_file(err, XF_ERANGE, name, NULL, "%zu bytes: a statistics file is at most %u",
                           len, XF_COLSTATS_MAX_BYTES);
  json_t *root;
  XF_GUARD(load_json(text, len, name, &root, err));
  xf_err rc = parse_root(root, name, out, err);
  json_decref(root);
  if (rc != XF_OK) xf_colstats_free(out);
  return rc;
}

xf_err xf_colstats_read(const char *path, xf_colstats *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  char *text = NULL;
  size_t len = 0;
  XF_GUARD(xf_file_read_text(path, XF_COLSTATS_MAX_BYTES, &text, &len, err));
  xf_err rc = xf_colstats_parse(text, len, path, out, err);
  xf_free(text);
  return rc;
}

/* ---- pooling --------------------------------------------------------------------- */

static const xf_colstat *find_column(const xf_colstats *st, const char *name) {
  for (uint32_t i = 0; i < st->n_cols; i++)
    if (strcmp(st->cols[i].name, name) == 0) return &st->cols[i];
  return NULL;
}

/* Chan, Golub and LeVeque's combination of two partial results: exact in
 * real arithmetic, and stable because it adds deviations, not raw sums. */
static void chan_combine(xf_colstat *acc, const xf_colstat *b) {
  if (b->count == 0) return;
  if (acc->count == 0) {
    acc->count = b->count;
    acc->mean = b->mean;
    acc->m2 = b->m2;
    return;
  }
  double na = (double)acc->count, nb = (double)b->count, n = na + nb;
  double delta = b->mean - acc->mean;
  acc->mean += delta * (nb / n);
  acc->m2 += b->m2 + delta * delta * (na * nb / n);
  acc->count += b->count;
}

static xf_err merge_check(const xf_colstats *files, const char *const *names, size_t n,
                          xf_errctx *err) {
  if (n < 2)
    return xf_fail_in_file(err, XF_EINVAL, NULL, NULL,
                           "pooling takes the statistics files of 2 or more sites, %zu given", n);
  const xf_colstats *first = &files[0];
  for (size_t f = 1; f < n; f++) {
    const xf_colstats *st = &files[f];
    if (strcmp(st->dataset, first->dataset) != 0)
      return xf_fail_in_file(err, XF_EINVAL, names[f], "dataset",
                             "is '%s' but %s is of dataset '%s': pool the files of one dataset",
                             st->dataset, names[0], first->dataset);
    if (strcmp(st->schema_digest, first->schema_digest) != 0)
      return xf_fail_in_file(
          err, XF_EINVAL, names[f], "schema_digest",
          "differs from %s's: the sites computed their statistics with different "
          "schemas; give every site the same schema.json and compute again",
          names[0]);
    for (size_t g = 0; g < f; g++)
      if (strcmp(st->site, files[g].site) == 0)
        return xf_fail_in_file(err, XF_EINVAL, names[f], "site",
                               "'%s' is also the site of %s: each site's statistics count once",
                               st->site, names[g]);
  }
  for (size_t f = 0; f < n; f++) {
    const xf_colstats *st = &files[f];
    for (uint32_t i = 0; i < first->n_cols; i++)
      if (!find_column(st, first->cols[i].name))
        return xf_fail_in_file(err, XF_EINVAL, names[f], "columns",
                               "has no column '%s', which %s has", first->cols[i].name, names[0]);
    for (uint32_t i = 0; i < st->n_cols; i++)
      if (!find_column(first, st->cols[i].name))
        return xf_fail_in_file(err, XF_EINVAL, names[f], "columns",
                               "has column '%s', which %s lacks", st->cols[i].name, names[0]);
  }
  return XF_OK;
}

xf_err xf_colstats_merge(const xf_colstats *files, const char *const *names, size_t n,
                         xf_colstats *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  XF_GUARD(merge_check(files, names, n, err));
  const xf_colstats *first = &files[0];
  if (!(out->cols = xf_calloc(first->n_cols, sizeof(*out->cols))))
    return xf_fail_in_file(err, XF_ENOMEM, NULL, NULL, "out of memory");
  snprintf(out->dataset, sizeof(out->dataset), "%s", first->dataset);
  snprintf(out->schema_digest, sizeof(out->schema_digest), "%s", first->schema_digest);
  out->n_cols = first->n_cols;
  for (uint32_t i = 0; i < first->n_cols; i++) {
    xf_colstat *acc = &out->cols[i];
    snprintf(acc->name, sizeof(acc->name), "%s", first->cols[i].name);
    for (size_t f = 0; f < n; f++) chan_combine(acc, find_column(&files[f], acc->name));
    if (acc->count == 0) {
      xf_colstats_free(out);
      return xf_fail_in_file(err, XF_ERANGE, NULL, NULL,
                             "column '%s' has no values at any site: there is nothing to pool",
                             first->cols[i].name);
    }
  }
  return XF_OK;
}

/* ---- the pooled schema ---------------------------------------------------------------- */

xf_err xf_colstats_apply(const char *schema_text, size_t len, const char *name,
                         const xf_colstats *pooled, char **json, uint32_t *replaced,
                         xf_errctx *err) {
  *json = NULL;
  *replaced = 0;
  xf_schema *schema = NULL;
  XF_GUARD(xf_schema_parse(schema_text, len, name, &schema, err));
  xf_schema_free(schema);
  char digest[XF_DIGEST_HEX];
  XF_GUARD(xf_schema_digest(schema_text, len, name, digest, err));
  if (strcmp(digest, pooled->schema_digest) != 0)
    return xf_fail_in_file(err, XF_EINVAL, name, NULL,
                           "is not the schema the statistics were computed with (its digest is "
                           "%.12s..., theirs %.12s...): give the schema.json the sites used",
                           digest, pooled->schema_digest);
  json_t *root = json_loadb(schema_text, len, JSON_REJECT_DUPLICATES, NULL);
  if (!root) return xf_fail_in_file(err, XF_ENOMEM, name, NULL, "out of memory");
  xf_err rc = XF_OK;
  json_t *cols = json_object_get(root, "columns");
  for (size_t i = 0; rc == XF_OK && i < json_array_size(cols); i++) {
    json_t *col = json_array_get(cols, i);
    const char *type = json_string_value(json_object_get(col, "type"));
    const char *norm = json_string_value(json_object_get(col, "normalize"));
    if (!type || strcmp(type, "numeric") != 0 || !norm || strcmp(norm, "train") != 0) continue;
    const char *cname = json_string_value(json_object_get(col, "name"));
    const xf_colstat *c = find_column(pooled, cname);
    if (!c) {
      char at[48];
      snprintf(at, sizeof(at), "columns[%zu]", i);
      rc = xf_fail_in_file(err, XF_EINVAL, name, at, "numeric column '%s' has no pooled statistics",
                           cname);
      break;
    }
    json_t *given = json_pack("{s:f,s:f}", "mean", c->mean, "std", xf_colstat_norm_std(c));
    if (!given || json_object_set_new(col, "normalize", given) != 0)
      rc = xf_fail_in_file(err, XF_ENOMEM, name, NULL, "out of memory");
    else
      (*replaced)++;
  }
  char *copy = rc == XF_OK ? dump_file(root) : NULL;
  json_decref(root);
  if (rc != XF_OK) return rc;
  if (!copy) return xf_fail_in_file(err, XF_ENOMEM, name, NULL, "out of memory");
  *json = copy;
  return XF_OK;
}
