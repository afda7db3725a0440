/* SPDX-License-Identifier: Apache-2.0 */
/* Numeric CSV datasets: a strict reader over xf_cursor that names the line and
 * column of every fault, and a writer whose floats read back exactly. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "data/dataset_internal.h"
#include "base/file.h"

/* No number needs more characters; longer header names are cut to this when
 * matched against a label name, which then simply does not match. */
#define XF__CSV_MAX_FIELD 1024

typedef struct csv_parser {
  const char *name;
  xf_errctx *err;
  char tok[XF__CSV_MAX_FIELD + 1]; /* the current field, unquoted, NUL-terminated */
  size_t tok_len;
  uint32_t line;       /* 1-based number of the current line */
  uint32_t first_line; /* the line that fixed the column count */
  uint32_t columns;
  uint32_t label_col; /* 0-based */
  float *x;
  int32_t *y;
  uint32_t n, cap;
  uint32_t max_label;
} csv_parser;

static bool cursor_peek(const xf_cursor *c, uint8_t *b) {
  if (xf_cursor_remaining(c) == 0) return false;
  *b = c->data[c->off];
  return true;
}

/* Bytes before the next `stop` (or all that remain). */
static size_t cursor_span(const xf_cursor *c, uint8_t stop) {
  size_t rem = xf_cursor_remaining(c);
  if (rem == 0) return 0;
  const uint8_t *at = memchr(c->data + c->off, stop, rem);
  return at ? (size_t)(at - (c->data + c->off)) : rem;
}

/* Consumes the byte that cursor_peek saw. */
static void cursor_take(xf_cursor *c) {
  if (xf_cursor_remaining(c) > 0) c->off++;
}

static bool is_blank(uint8_t b) { return b == ' ' || b == '\t'; }

static void skip_blanks(xf_cursor *c) {
  uint8_t b;
  while (cursor_peek(c, &b) && is_blank(b)) cursor_take(c);
}

static xf_err csv_fail_at(csv_parser *p, uint32_t col, xf_err code, const char *fmt, ...)
    XF_PRINTF(4, 5);

static xf_err csv_fail_at(csv_parser *p, uint32_t col, xf_err code, const char *fmt, ...) {
  xf_errctx *err = p->err;
  if (!err) return code;
  xf_errctx_clear(err);
  xf_errctx_file(err, p->name);
  if (col)
    xf_errctx_field(err, "line %u, column %u", p->line, col);
  else
    xf_errctx_field(err, "line %u", p->line);
  va_list ap;
  va_start(ap, fmt);
  xf_vfail(err, code, fmt, ap);
  va_end(ap);
  return code;
}

static xf_err tok_append(csv_parser *p, uint32_t col, const uint8_t *s, size_t n) {
  if (p->tok_len + n > XF__CSV_MAX_FIELD)
    return csv_fail_at(p, col, XF_EFORMAT, "field longer than %d characters",
                       XF__CSV_MAX_FIELD);
  memcpy(p->tok + p->tok_len, s, n);
  p->tok_len += n;
  p->tok[p->tok_len] = '\0';
  return XF_OK;
}

/* Reads field `col` (1-based) of the line into p->tok; *more is set when a
 * separator follows it. */
static xf_err csv_field(csv_parser *p, xf_cursor *c, uint32_t col, bool *more) {
  p->tok_len = 0;
  p->tok[0] = '\0';
  skip_blanks(c);
  uint8_t b;
  if (cursor_peek(c, &b) && b == '"') {
    cursor_take(c);
    for (;;) {
      size_t run = cursor_span(c, '"');
      const uint8_t *s;
      if (xf_cursor_view(c, &s, run) != XF_OK)
        return csv_fail_at(p, col, XF_EINTERNAL, "CSV cursor out of step");
      XF_GUARD(tok_append(p, col, s, run));
      if (xf_cursor_u8(c, &b) != XF_OK)
        return csv_fail_at(p, col, XF_EFORMAT,
                           "a quoted field is not closed on its line (quoted fields cannot "
                           "span lines)");
      if (!cursor_peek(c, &b) || b != '"') break; /* the closing quote */
      cursor_take(c);                             /* "" is a literal quote */
      XF_GUARD(tok_append(p, col, (const uint8_t *)"\"", 1));
    }
    skip_blanks(c);
    if (!cursor_peek(c, &b)) {
      *more = false;
      return XF_OK;
    }
    if (b != ',')
      return csv_fail_at(p, col, XF_EFORMAT, "text after the closing quote of a field");
    cursor_take(c);
    *more = true;
    return XF_OK;
  }
  size_t run = cursor_span(c, ',');
  const uint8_t *s;
  if (xf_cursor_view(c, &s, run) != XF_OK)
    return csv_fail_at(p, col, XF_EINTERNAL, "CSV cursor out of step");
  while (run > 0 && is_blank(s[run - 1])) run--;
  XF_GUARD(tok_append(p, col, s, run));
  *more = cursor_peek(c, &b); /* the separator */
  cursor_take(c);
  return XF_OK;
}

/* True when p->tok is a finite number; *v gets it. */
static bool tok_number(const csv_parser *p, double *v) {
  if (p->tok_len == 0) return false;
  char *end = NULL;
  double d = strtod(p->tok, &end);
  if (end != p->tok + p->tok_len || !isfinite(d)) return false;
  *v = d;
  return true;
}

static bool line_is_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!is_blank((uint8_t)s[i])) return false;
  return true;
}

/* Room for twice the records (64 at first) of `features` floats each, within
 * XF_DATASET_MAX_VALUES: both readers, plain and with a schema, grow by it. */
static xf_err rows_grow(csv_parser *p, uint32_t features) {
  uint64_t max_rows = XF_DATASET_MAX_VALUES / features;
  if (max_rows > UINT32_MAX) max_rows = UINT32_MAX;
  if ((uint64_t)p->n >= max_rows)
    return csv_fail_at(p, 0, XF_ERANGE,
                       "more than %llu records of %u features: above the %llu values xfed "
                       "accepts in one dataset",
                       (unsigned long long)max_rows, features,
                       (unsigned long long)XF_DATASET_MAX_VALUES);
  uint64_t cap = p->cap ? (uint64_t)p->cap * 2 : 64;
  if (cap > max_rows) cap = max_rows;
  float *nx = xf_realloc(p->x, (size_t)(cap * features * sizeof(float)));
  if (!nx) return csv_fail_at(p, 0, XF_ENOMEM, "out of memory after %u records", p->n);
  p->x = nx;
  int32_t *ny = xf_realloc(p->y, (size_t)(cap * sizeof(int32_t)));
  if (!ny) return csv_fail_at(p, 0, XF_ENOMEM, "out of memory after %u records", p->n);
  p->y = ny;
  p->cap = (uint32_t)cap;
  return XF_OK;
}

/* Parses one data line into record p->n. */
static xf_err csv_row(csv_parser *p, const char *text, size_t len) {
  if (p->n == p->cap) XF_GUARD(rows_grow(p, p->columns - 1));
  xf_cursor c = xf_cursor_make(text, len);
  float *row = p->x + (size_t)p->n * (p->columns - 1);
  uint32_t col = 0, f = 0;
  bool more = true;
  char shown[64];
  while (more) {
    if (col == p->columns)
      return csv_fail_at(p, 0, XF_EFORMAT,
                         "more than the %u fields of line %u: every line must have the same "
                         "number of fields",
                         p->columns, p->first_line);
    XF_GUARD(csv_field(p, &c, col + 1, &more));
    double v;
    bool num = tok_number(p, &v);
    if (col == p->label_col) {
      if (!num || v < 0 || v >= XF_CSV_MAX_CLASSES || v != floor(v)) {
        xf__printable(shown, sizeof(shown), p->tok, p->tok_len);
        return csv_fail_at(p, col + 1, XF_EFORMAT,
                           "label '%s' is not a whole number in [0, %u]", shown,
                           XF_CSV_MAX_CLASSES - 1);
      }
      p->y[p->n] = (int32_t)v;
      if ((uint32_t)v > p->max_label) p->max_label = (uint32_t)v;
    } else {
      if (!num) {
        xf__printable(shown, sizeof(shown), p->tok, p->tok_len);
        return csv_fail_at(p, col + 1, XF_EFORMAT, "'%s' is not a number", shown);
      }
      if (fabs(v) > FLT_MAX) {
        xf__printable(shown, sizeof(shown), p->tok, p->tok_len);
        return csv_fail_at(p, col + 1, XF_ERANGE, "'%s' is beyond the range of a 32-bit float",
                           shown);
      }
      row[f++] = (float)v;
    }
    col++;
  }
  if (col != p->columns)
    return csv_fail_at(p, 0, XF_EFORMAT,
                       "%u field%s but line %u has %u: every line must have the same number "
                       "of fields",
                       col, col == 1 ? "" : "s", p->first_line, p->columns);
  p->n++;
  return XF_OK;
}

/* Reads the first line: counts its columns, decides whether it is a header,
 * and finds the label column. */
static xf_err csv_first_line(csv_parser *p, const char *text, size_t len,
                             const xf_csv_options *opt, bool *header) {
  xf_cursor c = xf_cursor_make(text, len);
  bool more = true;
  uint32_t col = 0;
  uint32_t named = 0; /* 1-based column whose header is opt->label_name */
  *header = false;
  while (more) {
    if (col == UINT32_MAX - 1 || (uint64_t)col >= XF_DATASET_MAX_VALUES)
      return csv_fail_at(p, 0, XF_ERANGE, "too many columns");
    XF_GUARD(csv_field(p, &c, col + 1, &more));
    double v;
    if (!tok_number(p, &v)) *header = true;
    col++;
    if (opt->label_name && !named && strcmp(p->tok, opt->label_name) == 0) named = col;
  }
  p->columns = col;
  p->first_line = p->line;
  if (col < 2)
    return csv_fail_at(p, 0, XF_EFORMAT,
                       "%u column: a dataset needs at least one feature column and a label "
                       "column, separated by commas",
                       col);
  if (opt->label_name) {
    if (!*header)
      return csv_fail_at(p, 0, XF_EINVAL,
                         "the label column is named '%s' but the file has no header line (its "
                         "first line is all numbers); name the label column by number instead",
                         opt->label_name);
    if (!named)
      return csv_fail_at(p, 0, XF_EINVAL, "the header has no column named '%s'",
                         opt->label_name);
    p->label_col = named - 1;
  } else if (opt->label_column == 0) {
    p->label_col = col - 1;
  } else if (opt->label_column > col) {
    return csv_fail_at(p, 0, XF_EINVAL,
                       "column %u is named as the label column but the file has %u columns",
                       opt->label_column, col);
  } else {
    p->label_col = opt->label_column - 1;
  }
  return XF_OK;
}

xf_err xf_csv_parse(const void *text, size_t len, const char *name, const xf_csv_options *opt,
                    xf_dataset *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  static const xf_csv_options defaults = {NULL, 0};
  if (!opt) opt = &defaults;
  csv_parser *p = xf_calloc(1, sizeof(*p));
  if (!p) return xf__data_fail(err, name ? name : "csv", XF_ENOMEM, "out of memory");
  p->name = name ? name : "csv";
  p->err = err;
  xf_cursor c = xf_cursor_make(text, len);
  /* A UTF-8 byte order mark, as spreadsheet programs write, is not data. */
  static const uint8_t bom[3] = {0xEF, 0xBB, 0xBF};
  const uint8_t *head;
  if (len >= 3 && memcmp(text, bom, 3) == 0 && xf_cursor_view(&c, &head, 3) != XF_OK)
    c.off = 0;
  const char *line;
  size_t n;
  bool started = false;
  xf_err rc = XF_OK;
  while (rc == XF_OK && xf_cursor_line(&c, &line, &n) == XF_OK) {
    p->line++;
    if (line_is_blank(line, n)) continue;
    if (!started) {
      started = true;
      bool header;
      rc = csv_first_line(p, line, n, opt, &header);
      if (rc == XF_OK && !header) rc = csv_row(p, line, n);
      continue;
    }
    rc = csv_row(p, line, n);
  }
  if (rc == XF_OK && p->n == 0)
    rc = xf__data_fail(err, p->name, XF_EFORMAT, "%s: no data rows",
                       started ? "only a header line" : "the file is empty");
  if (rc == XF_OK) {
    out->n = p->n;
    out->h = 1;
    out->w = 1;
    out->c = p->columns - 1;
    out->features = out->c;
    out->classes = p->max_label + 1;
    out->x = p->x;
    out->y = p->y;
  } else {
    xf_free(p->x);
    xf_free(p->y);
  }
  xf_free(p);
  return rc;
}

xf_err xf_csv_read(const char *path, const xf_csv_options *opt, xf_dataset *out,
                   xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  uint8_t *text = NULL;
  size_t len = 0;
  XF_GUARD(xf__read_data_file(path, XF_DATASET_MAX_FILE_BYTES, &text, &len, err));
  xf_err rc = xf_csv_parse(text, len, path, opt, out, err);
  xf_free(text);
  return rc;
}

xf_err xf_csv_write(const char *path, const xf_dataset *ds, xf_errctx *err) {
  if (ds->n == 0 || ds->features == 0)
    return xf__data_fail(err, path, XF_EINVAL, "cannot write an empty dataset");
  xf_file_writer *w = NULL;
  XF_GUARD(xf_file_writer_begin(path, 0644, &w, err));
  char cell[48];
  xf_err rc = XF_OK;
  for (uint32_t j = 0; rc == XF_OK && j < ds->features; j++)
    rc = xf_file_writer_write(w, cell, (size_t)snprintf(cell, sizeof(cell), "f%u,", j + 1), err);
  if (rc == XF_OK) rc = xf_file_writer_write(w, "label\n", 6, err);
  for (uint32_t i = 0; rc == XF_OK && i < ds->n; i++) {
    const float *row = ds->x + (size_t)i * ds->features;
    /* %.9g prints any float so that strtod and a cast give it back. */
    for (uint32_t j = 0; rc == XF_OK && j < ds->features; j++)
      rc = xf_file_writer_write(w, cell,
                                (size_t)snprintf(cell, sizeof(cell), "%.9g,", (double)row[j]), err);
    if (rc == XF_OK)
      rc = xf_file_writer_write(w, cell, (size_t)snprintf(cell, sizeof(cell), "%d\n", ds->y[i]),
                                err);
  }
  if (rc != XF_OK) {
    xf_file_writer_abort(w);
    return rc;
  }
  return xf_file_writer_commit(w, err);
}

/* ---- CSV with a column schema ------------------------------------------------------- */

enum { MAP_LABEL = -1 };

typedef struct schema_reader {
  csv_parser p;
  const xf_schema *s;
  int32_t *map; /* header column -> schema column, or MAP_LABEL */
} schema_reader;

static bool tok_missing(const csv_parser *p, const xf_schema *s) {
  for (uint32_t i = 0; i < s->n_missing; i++)
    if (strcmp(p->tok, s->missing[i]) == 0) return true;
  return false;
}

static xf_err schema_header(schema_reader *r, const char *text, size_t len) {
  csv_parser *p = &r->p;
  const xf_schema *s = r->s;
  xf_cursor c = xf_cursor_make(text, len);
  bool more = true;
  uint32_t col = 0;
  r->map = xf_calloc(s->n_cols + 1, sizeof(int32_t));
  bool *seen = xf_calloc(s->n_cols + 1, sizeof(bool));
  xf_err rc = r->map && seen ? XF_OK : csv_fail_at(p, 0, XF_ENOMEM, "out of memory");
  char shown[64];
  while (rc == XF_OK && more) {
    if ((rc = csv_field(p, &c, col + 1, &more)) != XF_OK) break;
    xf__printable(shown, sizeof(shown), p->tok, p->tok_len);
    /* Once all n_cols + 1 columns are seen any further one is unknown or a
     * repeat, so map (n_cols + 1 entries) is never written past its end. */
    int32_t k = -2;
    if (strcmp(p->tok, s->label) == 0) k = MAP_LABEL;
    for (uint32_t j = 0; k == -2 && j < s->n_cols; j++)
      if (strcmp(p->tok, s->cols[j].name) == 0) k = (int32_t)j;
    if (k == -2) {
      rc = csv_fail_at(p, col + 1, XF_EFORMAT,
                       "header column '%s' is not in the schema: declare it in \"columns\" "
                       "(\"type\": \"ignore\" skips it)",
                       shown);
    } else if (seen[k + 1]) {
      rc = csv_fail_at(p, col + 1, XF_EFORMAT, "header column '%s' appears twice", shown);
    } else {
      seen[k + 1] = true;
      r->map[col] = k;
      col++;
    }
  }
  for (uint32_t j = 0; rc == XF_OK && j <= s->n_cols; j++)
    if (!seen[j])
      rc = csv_fail_at(p, 0, XF_EFORMAT,
                       "the header has no column '%s' that the schema declares%s",
                       j == 0 ? s->label : s->cols[j - 1].name, j == 0 ? " as the label" : "");
  xf_free(seen);
  p->columns = col;
  p->first_line = p->line;
  return rc;
}

static xf_err schema_row(schema_reader *r, const char *text, size_t len) {
  csv_parser *p = &r->p;
  const xf_schema *s = r->s;
  if (p->n == p->cap) XF_GUARD(rows_grow(p, s->features));
  float *row = p->x + (size_t)p->n * s->features;
  memset(row, 0, s->features * sizeof(float));
  xf_cursor c = xf_cursor_make(text, len);
  uint32_t col = 0;
  bool more = true;
  char shown[64];
  while (more) {
    if (col == p->columns)
      return csv_fail_at(p, 0, XF_EFORMAT,
                         "more than the %u fields of the header (line %u): every line must have "
                         "the same number of fields",
                         p->columns, p->first_line);
    XF_GUARD(csv_field(p, &c, col + 1, &more));
    int32_t k = r->map[col];
    const char *cname = k == MAP_LABEL ? s->label : s->cols[k].name;
    bool missing = tok_missing(p, s);
    xf__printable(shown, sizeof(shown), p->tok, p->tok_len);
    if (k == MAP_LABEL) {
      if (missing)
        return csv_fail_at(p, col + 1, XF_EFORMAT,
                           "the label ('%s') is missing: every record needs one", cname);
      if (s->n_classes) {
        int64_t idx = xf__vocab_find(s->classes, s->classes_sorted, s->n_classes, p->tok);
        if (idx < 0)
          return csv_fail_at(p, col + 1, XF_EFORMAT,
                             "label '%s' is not one of the %u classes the schema lists", shown,
                             s->n_classes);
        p->y[p->n] = (int32_t)idx;
      } else {
        double v;
        if (!tok_number(p, &v) || v < 0 || v >= XF_CSV_MAX_CLASSES || v != floor(v))
          return csv_fail_at(p, col + 1, XF_EFORMAT,
                             "label '%s' is not a whole number in [0, %u]", shown,
                             XF_CSV_MAX_CLASSES - 1);
        p->y[p->n] = (int32_t)v;
        if ((uint32_t)v > p->max_label) p->max_label = (uint32_t)v;
      }
      col++;
      continue;
    }
    const xf__schema_col *sc = &s->cols[k];
    col++;
    if (sc->type == XF__COL_IGNORE) continue;
    if (missing && !sc->has_fill)
      return csv_fail_at(p, col, XF_EFORMAT,
                         "column '%s' has no value ('%s'): give one, or a \"fill\" for the "
                         "column in the schema",
                         cname, shown);
    if (sc->type == XF__COL_NUMERIC) {
      double v = sc->fill_num;
      if (!missing) {
        if (!tok_number(p, &v))
          return csv_fail_at(p, col, XF_EFORMAT, "column '%s': '%s' is not a number", cname,
                             shown);
        if (fabs(v) > FLT_MAX)
          return csv_fail_at(p, col, XF_ERANGE,
                             "column '%s': '%s' is beyond the range of a 32-bit float", cname,
                             shown);
      }
      row[sc->offset] = (float)v;
    } else {
      uint32_t slot = sc->fill_cat;
      if (!missing) {
        int64_t idx = xf__vocab_find(sc->vocab, sc->sorted, sc->n_vocab, p->tok);
        if (idx < 0 && !sc->unknown_slot)
          return csv_fail_at(p, col, XF_EFORMAT,
                             "column '%s': '%s' is not in its vocabulary of %u words (add it, or "
                             "set \"unknown\": \"slot\")",
                             cname, shown, sc->n_vocab);
        slot = idx < 0 ? sc->n_vocab : (uint32_t)idx;
      }
      row[sc->offset + slot] = 1.0f;
    }
  }
  if (col != p->columns)
    return csv_fail_at(p, 0, XF_EFORMAT,
                       "%u field%s but the header (line %u) has %u: every line must have the "
                       "same number of fields",
                       col, col == 1 ? "" : "s", p->first_line, p->columns);
  p->n++;
  return XF_OK;
}

xf_err xf_schema_csv_parse(const xf_schema *s, const void *text, size_t len, const char *name,
                           xf_dataset *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  schema_reader *r = xf_calloc(1, sizeof(*r));
  if (!r) return xf__data_fail(err, name ? name : "csv", XF_ENOMEM, "out of memory");
  csv_parser *p = &r->p;
  r->s = s;
  p->name = name ? name : "csv";
  p->err = err;
  xf_cursor c = xf_cursor_make(text, len);
  static const uint8_t bom[3] = {0xEF, 0xBB, 0xBF};
  const uint8_t *head;
  if (len >= 3 && memcmp(text, bom, 3) == 0 && xf_cursor_view(&c, &head, 3) != XF_OK) c.off = 0;
  const char *line;
  size_t n;
  bool started = false;
  xf_err rc = XF_OK;
  while (rc == XF_OK && xf_cursor_line(&c, &line, &n) == XF_OK) {
    if (p->line == UINT32_MAX) {
      rc = csv_fail_at(p, 0, XF_ERANGE, "too many lines");
      break;
    }
    p->line++;
    if (n > XF_TABULAR_MAX_LINE) {
      rc = csv_fail_at(p, 0, XF_ERANGE, "a line of %zu bytes (at most %u)", n,
                       XF_TABULAR_MAX_LINE);
      break;
    }
    if (line_is_blank(line, n)) continue;
    if (!started) {
      started = true;
      rc = schema_header(r, line, n);
      continue;
    }
    rc = schema_row(r, line, n);
  }
  if (rc == XF_OK && p->n == 0)
    rc = xf__data_fail(err, p->name, XF_EFORMAT, "%s: no data rows",
                       started ? "only a header line" : "the file is empty (a header line naming "
                                                        "the schema's columns comes first)");
  if (rc == XF_OK) {
    out->n = p->n;
    out->h = 1;
    out->w = 1;
    out->c = s->features;
    out->features = s->features;
    out->classes = s->n_classes ? s->n_classes : p->max_label + 1;
    out->x = p->x;
    out->y = p->y;
  } else {
    xf_free(p->x);
    xf_free(p->y);
  }
  xf_free(r->map);
  xf_free(r);
  return rc;
}

xf_err xf_schema_csv_read(const xf_schema *s, const char *path, xf_dataset *out,
                          xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  uint8_t *text = NULL;
  size_t len = 0;
  XF_GUARD(xf__read_data_file(path, XF_DATASET_MAX_FILE_BYTES, &text, &len, err));
  xf_err rc = xf_schema_csv_parse(s, text, len, path, out, err);
  xf_free(text);
  return rc;
}
