/* SPDX-License-Identifier: Apache-2.0 */
/* The column schema of a tabular CSV dataset (schema.json, docs/data.md):
 * parsing and checking it, the feature layout it implies (numeric columns one
 * feature each, categorical ones one-hot), and normalization with statistics
 * given in the schema or computed from the training split. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "data/dataset_internal.h"

/* Fails naming the member at fault: "columns[2].vocabulary: ...". */
#define AT(...) (err ? (xf_errctx_field(err, __VA_ARGS__), 0) : 0)

static void free_words(char **w, uint32_t n) {
  if (!w) return;
  for (uint32_t i = 0; i < n; i++) xf_free(w[i]);
  xf_free(w);
}

void xf_schema_free(xf_schema *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->n_cols; i++) {
    xf_free(s->cols[i].name);
    free_words(s->cols[i].vocab, s->cols[i].n_vocab);
    xf_free(s->cols[i].sorted);
  }
  xf_free(s->cols);
  xf_free(s->name);
  xf_free(s->label);
  free_words(s->classes, s->n_classes);
  xf_free(s->classes_sorted);
  free_words(s->missing, s->n_missing);
  xf_free(s);
}

uint32_t xf_schema_features(const xf_schema *s) { return s->features; }
uint32_t xf_schema_classes(const xf_schema *s) { return s->n_classes; }

/* qsort has no context argument; sorting happens only while parsing, on one
 * thread per schema, so the words travel through this thread-local. */
static _Thread_local char *const *sort_words;
static int cmp_index(const void *a, const void *b) {
  return strcmp(sort_words[*(const uint32_t *)a], sort_words[*(const uint32_t *)b]);
}

int64_t xf__vocab_find(char *const *words, const uint32_t *sorted, uint32_t n, const char *word) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int c = strcmp(word, words[sorted[mid]]);
    if (c == 0) return sorted[mid];
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return -1;
}

static bool text_ok(const char *t, size_t n) {
  if (n > XF_SCHEMA_MAX_NAME) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f) return false;
  return true;
}

/* A list of distinct strings (vocabulary, classes, missing markers). */
static xf_err parse_words(const json_t *arr, const char *file, const char *what, uint32_t max,
                          bool allow_empty, char ***out, uint32_t **sorted, uint32_t *n,
                          xf_errctx *err) {
  if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > max) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL, "must be a list of 1 to %u strings", max);
    AT("%s", what);
    return rc;
  }
  uint32_t count = (uint32_t)json_array_size(arr);
  char **w = xf_calloc(count, sizeof(char *));
  uint32_t *idx = xf_calloc(count, sizeof(uint32_t));
  if (!w || !idx) {
    xf_free(w);
    xf_free(idx);
    return xf__data_fail(err, file, XF_ENOMEM, "out of memory");
  }
  xf_err rc = XF_OK;
  for (uint32_t i = 0; i < count && rc == XF_OK; i++) {
    const json_t *v = json_array_get(arr, i);
    const char *t = json_string_value(v);
    size_t tl = t ? json_string_length(v) : 0;
    if (!t || strlen(t) != tl || !text_ok(t, tl) || (!allow_empty && tl == 0)) {
      rc = xf__data_fail(err, file, XF_EINVAL,
                       "must be %sa string of at most %d printable characters",
                       allow_empty ? "" : "a non-empty ", XF_SCHEMA_MAX_NAME);
      AT("%s[%u]", what, i);
    } else if (!(w[i] = xf_strdup(t))) {
      rc = xf__data_fail(err, file, XF_ENOMEM, "out of memory");
    }
    idx[i] = i;
  }
  if (rc == XF_OK) {
    sort_words = w;
    qsort(idx, count, sizeof(uint32_t), cmp_index);
    sort_words = NULL;
    for (uint32_t i = 1; i < count && rc == XF_OK; i++)
      if (strcmp(w[idx[i - 1]], w[idx[i]]) == 0) {
        rc = xf__data_fail(err, file, XF_EINVAL, "'%s' is listed twice", w[idx[i]]);
        AT("%s", what);
      }
  }
  if (rc != XF_OK) {
    free_words(w, count);
    xf_free(idx);
    return rc;
  }
  *out = w;
  *n = count;
  if (sorted) *sorted = idx;
  else xf_free(idx);
  return XF_OK;
}

static xf_err check_keys(const json_t *obj, const char *const *allowed, const char *file,
                         const char *where, xf_errctx *err) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    bool ok = false;
    for (size_t i = 0; allowed[i]; i++) ok = ok || strcmp(key, allowed[i]) == 0;
    if (!ok) {
      char list[256] = "";
      size_t used = 0;
      for (size_t i = 0; allowed[i] && used < sizeof(list); i++)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                 allowed[i]);
      xf_err rc = xf__data_fail(err, file, XF_EINVAL, "unknown member '%.64s' (known: %s)", key,
                              list);
      AT("%s", where);
      return rc;
    }
  }
  return XF_OK;
}

/* A numeric column's "normalize" and "fill" (either may be NULL), for the
 * column c at where: one feature, scaled by given or training statistics or
 * not at all. */
static xf_err parse_numeric_column(const json_t *norm, const json_t *fill, xf__schema_col *c,
                                   const char *file, const char *where, xf_errctx *err) {
  const char *nm = c->name;
  c->width = 1;
  const char *ns = json_string_value(norm);
  if (!norm || (ns && strcmp(ns, "none") == 0)) {
    c->norm = XF__NORM_NONE;
  } else if (ns && strcmp(ns, "train") == 0) {
    c->norm = XF__NORM_TRAIN;
  } else if (json_is_object(norm) && json_object_size(norm) == 2 &&
             json_is_number(json_object_get(norm, "mean")) &&
             json_is_number(json_object_get(norm, "std"))) {
    c->norm = XF__NORM_GIVEN;
    c->mean = json_number_value(json_object_get(norm, "mean"));
    c->std = json_number_value(json_object_get(norm, "std"));
    if (!isfinite(c->mean) || !isfinite(c->std) || !(c->std > 0)) {
      xf_err rc = xf__data_fail(err, file, XF_ERANGE,
                              "column '%s': mean must be finite and std above 0", nm);
      AT("%s.normalize", where);
      return rc;
    }
  } else {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "column '%s': \"normalize\" must be \"none\", \"train\" (statistics "
                            "of the training split) or {\"mean\": M, \"std\": S}",
                            nm);
    AT("%s.normalize", where);
    return rc;
  }
  if (fill) {
    if (!json_is_number(fill) || !isfinite(json_number_value(fill))) {
      xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                              "column '%s' is numeric: its fill must be a number", nm);
      AT("%s.fill", where);
      return rc;
    }
    c->has_fill = true;
    c->fill_num = json_number_value(fill);
  }
  return XF_OK;
}

/* A categorical column's "vocabulary", "unknown" and "fill" (the last two
 * may be NULL), for the column c at where: one-hot over the vocabulary, with
 * an extra feature for other words when "unknown" is "slot". */
static xf_err parse_categorical_column(const json_t *vocab, const json_t *unknown,
                                       const json_t *fill, xf__schema_col *c, const char *file,
                                       const char *where, xf_errctx *err) {
  const char *nm = c->name;
  char vwhere[64];
  snprintf(vwhere, sizeof(vwhere), "%s.vocabulary", where);
  XF_GUARD(parse_words(vocab, file, vwhere, XF_SCHEMA_MAX_VOCAB, false, &c->vocab, &c->sorted,
                       &c->n_vocab, err));
  const char *us = json_string_value(unknown);
  if (!unknown || (us && strcmp(us, "error") == 0)) {
    c->unknown_slot = false;
  } else if (us && strcmp(us, "slot") == 0) {
    c->unknown_slot = true;
  } else {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "column '%s': \"unknown\" must be \"error\" (the default) or \"slot\" "
                            "(an extra one-hot feature for words outside the vocabulary)",
                            nm);
    AT("%s.unknown", where);
    return rc;
  }
  c->width = c->n_vocab + (c->unknown_slot ? 1 : 0);
  if (fill) {
    const char *fs = json_string_value(fill);
    int64_t k = fs ? xf__vocab_find(c->vocab, c->sorted, c->n_vocab, fs) : -1;
    if (k < 0 && !(fs && c->unknown_slot)) {
      xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                              "column '%s': the fill must be a word of its vocabulary", nm);
      AT("%s.fill", where);
      return rc;
    }
    c->has_fill = true;
    c->fill_cat = k < 0 ? c->n_vocab : (uint32_t)k;
  }
  return XF_OK;
}

/* The column object o's "name" and "type" into c, at where. */
static xf_err parse_column_name_and_type(const json_t *o, xf__schema_col *c, const char *file,
                                         const char *where, xf_errctx *err) {
  const json_t *name = json_object_get(o, "name");
  const char *nm = json_string_value(name);
  if (!nm || json_string_length(name) == 0 || strlen(nm) != json_string_length(name) ||
      !text_ok(nm, strlen(nm))) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "needs a \"name\": the column's header text (at most %d printable "
                            "characters)",
                            XF_SCHEMA_MAX_NAME);
    AT("%s.name", where);
    return rc;
  }
  if (!(c->name = xf_strdup(nm))) return xf__data_fail(err, file, XF_ENOMEM, "out of memory");
  const char *type = json_string_value(json_object_get(o, "type"));
  if (type && strcmp(type, "numeric") == 0) c->type = XF__COL_NUMERIC;
  else if (type && strcmp(type, "categorical") == 0) c->type = XF__COL_CATEGORICAL;
  else if (type && strcmp(type, "ignore") == 0) c->type = XF__COL_IGNORE;
  else {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "column '%s': \"type\" must be \"numeric\", \"categorical\" or "
                            "\"ignore\"",
                            nm);
    AT("%s.type", where);
    return rc;
  }
  return XF_OK;
}

/* Column i of the schema's "columns": its name and type, the members its
 * type allows, then what that type reads from them. */
static xf_err parse_column(const json_t *o, uint32_t i, xf_schema *s, xf_errctx *err) {
  const char *file = s->name;
  xf__schema_col *c = &s->cols[i];
  char where[48];
  snprintf(where, sizeof(where), "columns[%u]", i);
  if (!json_is_object(o)) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "must be an object such as {\"name\": \"age\", \"type\": \"numeric\"}");
    AT("%s", where);
    return rc;
  }
  static const char *const keys[] = {"name", "type", "normalize", "fill", "vocabulary",
                                     "unknown", NULL};
  XF_GUARD(check_keys(o, keys, file, where, err));
  XF_GUARD(parse_column_name_and_type(o, c, file, where, err));
  const char *nm = c->name;
  const json_t *norm = json_object_get(o, "normalize");
  const json_t *fill = json_object_get(o, "fill");
  const json_t *vocab = json_object_get(o, "vocabulary");
  const json_t *unknown = json_object_get(o, "unknown");
  if (c->type != XF__COL_NUMERIC && norm) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "column '%s': only numeric columns are normalized", nm);
    AT("%s.normalize", where);
    return rc;
  }
  if (c->type != XF__COL_CATEGORICAL && (vocab || unknown)) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "column '%s': \"vocabulary\" and \"unknown\" belong to categorical "
                            "columns",
                            nm);
    AT("%s.%s", where, vocab ? "vocabulary" : "unknown");
    return rc;
  }
  if (c->type == XF__COL_IGNORE) {
    if (fill) {
      xf_err rc = xf__data_fail(err, file, XF_EINVAL, "column '%s' is ignored: it takes no fill",
                              nm);
      AT("%s.fill", where);
      return rc;
    }
    return XF_OK;
  }
  if (c->type == XF__COL_NUMERIC) return parse_numeric_column(norm, fill, c, file, where, err);
  return parse_categorical_column(vocab, unknown, fill, c, file, where, err);
}

static xf_err parse_root(const json_t *root, xf_schema *s, xf_errctx *err) {
  const char *file = s->name;
  if (!json_is_object(root))
    return xf__data_fail(err, file, XF_EINVAL,
                       "must be a JSON object with \"label\" and \"columns\" (docs/data.md)");
  static const char *const keys[] = {"label", "columns", "missing", NULL};
  XF_GUARD(check_keys(root, keys, file, "schema", err));
  const json_t *label = json_object_get(root, "label");
  if (!json_is_object(label)) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "needs \"label\": {\"column\": NAME, \"classes\": [WORDS]} or "
                            "{\"column\": NAME, \"type\": \"integer\"}");
    AT("label");
    return rc;
  }
  static const char *const lkeys[] = {"column", "classes", "type", NULL};
  XF_GUARD(check_keys(label, lkeys, file, "label", err));
  const json_t *lc = json_object_get(label, "column");
  const char *ln = json_string_value(lc);
  if (!ln || json_string_length(lc) == 0 || strlen(ln) != json_string_length(lc) ||
      !text_ok(ln, strlen(ln))) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL, "must name the label column's header text");
    AT("label.column");
    return rc;
  }
  if (!(s->label = xf_strdup(ln))) return xf__data_fail(err, file, XF_ENOMEM, "out of memory");
  const json_t *classes = json_object_get(label, "classes");
  const char *lt = json_string_value(json_object_get(label, "type"));
  if (classes && !json_object_get(label, "type")) {
    XF_GUARD(parse_words(classes, file, "label.classes", XF_SCHEMA_MAX_VOCAB, false, &s->classes,
                         &s->classes_sorted, &s->n_classes, err));
  } else if (!classes && lt && strcmp(lt, "integer") == 0) {
    s->n_classes = 0;
  } else {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "give either \"classes\" (the label words, in class order) or "
                            "\"type\": \"integer\" (labels are class indices 0, 1, ...)");
    AT("label");
    return rc;
  }
  const json_t *missing = json_object_get(root, "missing");
  if (missing) {
    XF_GUARD(parse_words(missing, file, "missing", 16, true, &s->missing, NULL, &s->n_missing,
                         err));
  } else {
    s->missing = xf_calloc(1, sizeof(char *));
    if (!s->missing || !(s->missing[0] = xf_strdup("")))
      return xf__data_fail(err, file, XF_ENOMEM, "out of memory");
    s->n_missing = 1;
  }
  const json_t *cols = json_object_get(root, "columns");
  if (!json_is_array(cols) || json_array_size(cols) == 0 ||
      json_array_size(cols) > XF_SCHEMA_MAX_COLUMNS) {
    xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                            "must be a list of 1 to %u column objects (every column of the file "
                            "but the label)",
                            XF_SCHEMA_MAX_COLUMNS);
    AT("columns");
    return rc;
  }
  uint32_t n = (uint32_t)json_array_size(cols);
  s->cols = xf_calloc(n, sizeof(*s->cols));
  if (!s->cols) return xf__data_fail(err, file, XF_ENOMEM, "out of memory");
  uint64_t features = 0;
  for (uint32_t i = 0; i < n; i++) {
    s->n_cols = i + 1;
    XF_GUARD(parse_column(json_array_get(cols, i), i, s, err));
    xf__schema_col *c = &s->cols[i];
    if (strcmp(c->name, s->label) == 0) {
      xf_err rc = xf__data_fail(err, file, XF_EINVAL,
                              "'%s' is the label column: list only the other columns here",
                              c->name);
      AT("columns[%u].name", i);
      return rc;
    }
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(s->cols[j].name, c->name) == 0) {
        xf_err rc = xf__data_fail(err, file, XF_EINVAL, "column '%s' is declared twice (also "
                                "columns[%u])", c->name, j);
        AT("columns[%u].name", i);
        return rc;
      }
    c->offset = (uint32_t)features;
    features += c->width;
    if (features > XF_SCHEMA_MAX_FEATURES) {
      xf_err rc = xf__data_fail(err, file, XF_ERANGE,
                              "the columns expand to more than %u features", XF_SCHEMA_MAX_FEATURES);
      AT("columns[%u]", i);
      return rc;
    }
  }
  if (features == 0)
    return xf__data_fail(err, file, XF_EINVAL,
                       "every column is ignored: declare at least one numeric or categorical "
                       "column");
  s->features = (uint32_t)features;
  return XF_OK;
}

xf_err xf_schema_parse(const char *text, size_t len, const char *name, xf_schema **out,
                       xf_errctx *err) {
  *out = NULL;
  if (!name) name = "schema.json";
  if (len > XF_SCHEMA_MAX_BYTES)
    return xf__data_fail(err, name, XF_ERANGE, "%zu bytes: a schema is at most %u", len,
                       XF_SCHEMA_MAX_BYTES);
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    xf_err rc = xf__data_fail(err, name, XF_EFORMAT, "%s", jerr.text);
    AT("line %d, column %d", jerr.line, jerr.column);
    return rc;
  }
  xf_schema *s = xf_calloc(1, sizeof(*s));
  xf_err rc = s && (s->name = xf_strdup(name)) ? XF_OK
                                               : xf__data_fail(err, name, XF_ENOMEM, "out of memory");
  if (rc == XF_OK) rc = parse_root(root, s, err);
  json_decref(root);
  if (rc != XF_OK) {
    xf_schema_free(s);
    return rc;
  }
  *out = s;
  return XF_OK;
}

xf_err xf_schema_read(const char *path, xf_schema **out, xf_errctx *err) {
  *out = NULL;
  uint8_t *text = NULL;
  size_t len = 0;
  XF_GUARD(xf__read_file_bytes(path, &text, &len, err));
  xf_err rc = xf_schema_parse((const char *)text, len, path, out, err);
  xf_free(text);
  return rc;
}

xf_err xf_schema_normalize(xf_schema *s, xf_dataset *train, xf_dataset *test, xf_errctx *err) {
  if (train->features != s->features || (test && test->features != s->features))
    return xf__data_fail(err, s->name, XF_EINVAL,
                       "the data holds %u features but the schema declares %u", train->features,
                       s->features);
  for (uint32_t k = 0; k < s->n_cols; k++) {
    xf__schema_col *c = &s->cols[k];
    if (c->type != XF__COL_NUMERIC || c->norm == XF__NORM_NONE) continue;
    if (c->norm == XF__NORM_TRAIN) {
      /* Two passes in double: mean, then the population standard deviation. */
      double sum = 0, sq = 0;
      for (uint32_t i = 0; i < train->n; i++) sum += train->x[(size_t)i * s->features + c->offset];
      double mean = train->n ? sum / train->n : 0;
      for (uint32_t i = 0; i < train->n; i++) {
        double d = train->x[(size_t)i * s->features + c->offset] - mean;
        sq += d * d;
      }
      double sd = train->n ? sqrt(sq / train->n) : 0;
      c->mean = mean;
      /* A constant column carries no information; centred, it is all zeros. */
      c->std = sd > 1e-12 ? sd : 1.0;
    }
    xf_dataset *parts[2] = {train, test};
    for (int p = 0; p < 2; p++) {
      if (!parts[p]) continue;
      for (uint32_t i = 0; i < parts[p]->n; i++) {
        float *v = &parts[p]->x[(size_t)i * s->features + c->offset];
        double z = ((double)*v - c->mean) / c->std;
        if (!isfinite(z) || fabs(z) > 3.0e38) {
          xf_err rc = xf__data_fail(err, s->name, XF_ERANGE,
                                  "column '%s': record %u normalizes to %g, beyond a 32-bit float",
                                  c->name, i + 1, z);
          return rc;
        }
        *v = (float)z;
      }
    }
  }
  return XF_OK;
}
