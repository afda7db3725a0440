/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of tabular data at a site: the column schema, CSV read with it,
 * normalization, the NumPy .npy and .npz readers and writer, the NPY and NPZ
 * directory layouts, and splits of tabular datasets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/result.h"
#include "data/dataset.h"

/* ---- scratch files ------------------------------------------------------------ */

typedef struct scratch {
  char dir[256];
} scratch;

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s || xf_test_mkdtemp(s->dir, sizeof(s->dir), "tabular") != 0) {
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  xf_alloc_fail_reset();
  if (s) xf_test_remove_tree(s->dir);
  free(s);
  return 0;
}

static const char *path_in(const scratch *s, const char *name) {
  static char bufs[4][512];
  static int next;
  char *b = bufs[next++ % 4];
  snprintf(b, sizeof(bufs[0]), "%s/%s", s->dir, name);
  return b;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

typedef struct bytes {
  uint8_t *p;
  size_t n, cap;
} bytes;

static void put(bytes *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  if (n) memcpy(b->p + b->n, d, n);
  b->n += n;
}
static void put16(bytes *b, uint16_t v) {
  uint8_t q[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put(b, q, 2);
}
static void put32(bytes *b, uint32_t v) {
  uint8_t q[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put(b, q, 4);
}
static void bytes_free(bytes *b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

/* Checks the code, the file and field the error names, and a part of the message. */
static void expect_err(xf_err got, const xf_errctx *err, xf_err code, const char *file,
                       const char *field, const char *needle) {
  if (got != code)
    fail_msg("got %s (%s), expected %s", xf_err_name(got), err->msg, xf_err_name(code));
  if (file && strcmp(err->file, file) != 0) fail_msg("file '%s', expected '%s'", err->file, file);
  if (field && strcmp(err->field, field) != 0)
    fail_msg("field '%s', expected '%s' (%s)", err->field, field, err->msg);
  if (needle && !strstr(err->msg, needle)) fail_msg("message '%s' lacks '%s'", err->msg, needle);
}

/* ---- the schema ------------------------------------------------------------------ */

static const char loan_schema[] =
    "{\"label\": {\"column\": \"default\", \"classes\": [\"no\", \"yes\"]},\n"
    " \"missing\": [\"\", \"NA\"],\n"
    " \"columns\": [\n"
    "  {\"name\": \"age\", \"type\": \"numeric\"},\n"
    "  {\"name\": \"job\", \"type\": \"categorical\", \"vocabulary\": [\"clerk\", \"nurse\", "
    "\"pilot\"], \"fill\": \"clerk\"},\n"
    "  {\"name\": \"id\", \"type\": \"ignore\"},\n"
    "  {\"name\": \"region\", \"type\": \"categorical\", \"vocabulary\": [\"north\", \"south\"], "
    "\"unknown\": \"slot\"},\n"
    "  {\"name\": \"income\", \"type\": \"numeric\", \"fill\": 1000}\n"
    " ]}\n";

static xf_schema *schema_of(const char *text) {
  xf_schema *s = NULL;
  xf_errctx err;
  if (xf_schema_parse(text, strlen(text), "schema.json", &s, &err) != XF_OK)
    fail_msg("%s: %s", err.field, err.msg);
  return s;
}

static xf_err schema_csv(const xf_schema *s, const char *text, xf_dataset *ds, xf_errctx *err) {
  xf_errctx_clear(err);
  return xf_schema_csv_parse(s, text, strlen(text), "train.csv", ds, err);
}

static void schema_csv_encodes_numeric_categorical_and_labels(void **state) {
  (void)state;
  xf_schema *s = schema_of(loan_schema);
  /* age 1 + job 3 + region 2 + unknown slot 1 + income 1 */
  assert_int_equal(xf_schema_features(s), 8);
  assert_int_equal(xf_schema_classes(s), 2);
  xf_dataset ds;
  xf_errctx err;
  /* Header in another order than the schema's; quotes, CRLF, blank lines. */
  const char *text = "id,default,income,age,region,job\r\n"
                     "7,yes,2500,41,south,nurse\r\n"
                     "\r\n"
                     "8, no ,NA,\"35\",east,\n"
                     "9,no,10,50,north,pilot\n";
  if (schema_csv(s, text, &ds, &err) != XF_OK) fail_msg("%s: %s", err.field, err.msg);
  assert_int_equal(ds.n, 3);
  assert_int_equal(ds.h, 1);
  assert_int_equal(ds.w, 1);
  assert_int_equal(ds.c, 8);
  assert_int_equal(ds.features, 8);
  assert_int_equal(ds.classes, 2);
  const float r0[8] = {41, 0, 1, 0, 0, 1, 0, 2500};
  const float r1[8] = {35, 1, 0, 0, 0, 0, 1, 1000}; /* job filled, region unknown, income filled */
  const float r2[8] = {50, 0, 0, 1, 1, 0, 0, 10};
  assert_memory_equal(ds.x, r0, sizeof(r0));
  assert_memory_equal(ds.x + 8, r1, sizeof(r1));
  assert_memory_equal(ds.x + 16, r2, sizeof(r2));
  assert_int_equal(ds.y[0], 1);
  assert_int_equal(ds.y[1], 0);
  assert_int_equal(ds.y[2], 0);
  xf_dataset_free(&ds);
  xf_schema_free(s);

  /* Whole-number labels: classes is the largest + 1. */
  s = schema_of("{\"label\": {\"column\": \"y\", \"type\": \"integer\"}, \"columns\": "
                "[{\"name\": \"a\", \"type\": \"numeric\"}]}");
  assert_int_equal(xf_schema_classes(s), 0);
  assert_int_equal(schema_csv(s, "a,y\n1.5,4\n2,0\n", &ds, &err), XF_OK);
  assert_int_equal(ds.classes, 5);
  assert_true(ds.x[0] == 1.5f && ds.y[0] == 4);
  xf_dataset_free(&ds);
  xf_schema_free(s);
}

static void schema_csv_errors_name_file_line_and_column(void **state) {
  (void)state;
  xf_schema *s = schema_of(loan_schema);
  xf_dataset ds;
  xf_errctx err;
  const char *hdr = "age,job,id,region,income,default\n";
  char text[512];
#define ROW(r) (snprintf(text, sizeof(text), "%s%s", hdr, r), text)
  expect_err(schema_csv(s, ROW("30,doctor,1,north,5,no\n"), &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 2, column 2",
             "column 'job': 'doctor' is not in its vocabulary of 3 words (add it, or set "
             "\"unknown\": \"slot\")");
  assert_null(ds.x);
  expect_err(schema_csv(s, ROW("NA,clerk,1,north,5,no\n"), &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 2, column 1",
             "column 'age' has no value ('NA'): give one, or a \"fill\" for the column");
  expect_err(schema_csv(s, ROW("30,clerk,1,north,5,no\n31,,1,north,5,no\n40,clerk,1,north,5x,no\n"),
                        &ds, &err),
             &err, XF_EFORMAT, "train.csv", "line 4, column 5",
             "column 'income': '5x' is not a number");
  expect_err(schema_csv(s, ROW("30,clerk,1,north,5,maybe\n"), &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 2, column 6", "label 'maybe' is not one of the 2 classes");
  expect_err(schema_csv(s, ROW("30,clerk,1,north,5,\n"), &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 2, column 6", "the label ('default') is missing");
  expect_err(schema_csv(s, ROW("30,clerk,1,north,5\n"), &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 2", "5 fields but the header (line 1) has 6");
  expect_err(schema_csv(s, ROW("30,clerk,1,north,5,no,7\n"), &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 2", "more than the 6 fields of the header");
  expect_err(schema_csv(s, ROW("1e39,clerk,1,north,5,no\n"), &ds, &err), &err, XF_ERANGE,
             "train.csv", "line 2, column 1", "beyond the range of a 32-bit float");
#undef ROW
  /* The header against the schema. */
  expect_err(schema_csv(s, "age,job,id,region,income,default,extra\n1,clerk,1,north,5,no,1\n",
                        &ds, &err),
             &err, XF_EFORMAT, "train.csv", "line 1, column 7",
             "header column 'extra' is not in the schema: declare it in \"columns\"");
  expect_err(schema_csv(s, "age,job,id,region,income,default,age\n", &ds, &err), &err,
             XF_EFORMAT, "train.csv", "line 1, column 7", "header column 'age' appears twice");
  expect_err(schema_csv(s, "age,jobs,id,region,income,default\n", &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 1, column 2", "header column 'jobs' is not in the schema");
  expect_err(schema_csv(s, "age,job,age,region,income,default\n", &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 1, column 3", "header column 'age' appears twice");
  expect_err(schema_csv(s, "age,job,id,region,income\n", &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 1", "the header has no column 'default' that the schema declares "
                                    "as the label");
  expect_err(schema_csv(s, "age,job,id,region,default\n", &ds, &err), &err, XF_EFORMAT,
             "train.csv", "line 1", "the header has no column 'income'");
  expect_err(schema_csv(s, "age,job,id,region,income,default\n", &ds, &err), &err, XF_EFORMAT,
             "train.csv", NULL, "only a header line: no data rows");
  expect_err(schema_csv(s, "", &ds, &err), &err, XF_EFORMAT, "train.csv", NULL,
             "the file is empty");
  /* A line longer than the limit is refused before it is split. */
  size_t big = XF_TABULAR_MAX_LINE + 10;
  char *long_text = malloc(big + 64);
  assert_non_null(long_text);
  strcpy(long_text, "age,job,id,region,income,default\n");
  size_t o = strlen(long_text);
  memset(long_text + o, ' ', big);
  strcpy(long_text + o + big, "\n");
  expect_err(schema_csv(s, long_text, &ds, &err), &err, XF_ERANGE, "train.csv", "line 2",
             "a line of");
  free(long_text);
  xf_schema_free(s);
}

static void expect_schema_error(const char *text, xf_err code, const char *field,
                                const char *needle) {
  xf_schema *s = (xf_schema *)1;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_schema_parse(text, strlen(text), "loans.schema.json", &s, &err);
  assert_null(s);
  expect_err(rc, &err, code, "loans.schema.json", field, needle);
}

#define LBL "\"label\": {\"column\": \"y\", \"classes\": [\"a\", \"b\"]}"

static void schema_parse_refuses_bad_schemas(void **state) {
  (void)state;
  expect_schema_error("{\"label\": ", XF_EFORMAT, "line 1, column 10", NULL);
  expect_schema_error("[]", XF_EINVAL, "", "must be a JSON object with \"label\"");
  expect_schema_error("{" LBL ", \"colums\": []}", XF_EINVAL, "schema",
                      "unknown member 'colums' (known: label, columns, missing)");
  expect_schema_error("{\"columns\": [{\"name\": \"a\", \"type\": \"numeric\"}]}", XF_EINVAL,
                      "label", "needs \"label\"");
  expect_schema_error("{\"label\": {\"column\": \"y\"}, \"columns\": [{\"name\": \"a\", "
                      "\"type\": \"numeric\"}]}",
                      XF_EINVAL, "label", "give either \"classes\"");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"a\", \"type\": \"text\"}]}",
                      XF_EINVAL, "columns[0].type",
                      "column 'a': \"type\" must be \"numeric\", \"categorical\" or \"ignore\"");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"a\", \"type\": \"numeric\"}, "
                      "{\"name\": \"a\", \"type\": \"numeric\"}]}",
                      XF_EINVAL, "columns[1].name", "column 'a' is declared twice");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"y\", \"type\": \"numeric\"}]}",
                      XF_EINVAL, "columns[0].name", "'y' is the label column");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"c\", \"type\": \"categorical\", "
                      "\"vocabulary\": [\"x\", \"x\"]}]}",
                      XF_EINVAL, "columns[0].vocabulary", "'x' is listed twice");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"c\", \"type\": \"categorical\", "
                      "\"vocabulary\": [\"x\"], \"fill\": \"z\"}]}",
                      XF_EINVAL, "columns[0].fill", "the fill must be a word of its vocabulary");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"c\", \"type\": \"categorical\"}]}",
                      XF_EINVAL, "columns[0].vocabulary", "must be a list of 1 to 4096 strings");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"a\", \"type\": \"numeric\", "
                      "\"normalize\": {\"mean\": 1, \"std\": 0}}]}",
                      XF_ERANGE, "columns[0].normalize", "std above 0");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"a\", \"type\": \"numeric\", "
                      "\"normalize\": \"zscore\"}]}",
                      XF_EINVAL, "columns[0].normalize", "\"normalize\" must be \"none\"");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"a\", \"type\": \"numeric\", "
                      "\"fill\": \"zero\"}]}",
                      XF_EINVAL, "columns[0].fill", "its fill must be a number");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"a\", \"type\": \"ignore\"}]}",
                      XF_EINVAL, "", "every column is ignored");
  expect_schema_error("{" LBL ", \"columns\": [{\"name\": \"a\", \"type\": \"numeric\", "
                      "\"name\": \"b\"}]}",
                      XF_EFORMAT, NULL, "duplicate object key");
}

/* ---- normalization and the CSV directory with schema.json ---------------------------- */

static void make_schema_dir(const scratch *s, const char *name) {
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/%s", s->dir, name);
  assert_int_equal(mkdir(dir, 0777), 0);
  char p[600];
  snprintf(p, sizeof(p), "%s/schema.json", dir);
  write_text(p,
             "{\"label\": {\"column\": \"y\", \"classes\": [\"neg\", \"pos\"]},\n"
             " \"columns\": [\n"
             "  {\"name\": \"a\", \"type\": \"numeric\", \"normalize\": \"train\"},\n"
             "  {\"name\": \"b\", \"type\": \"numeric\", \"normalize\": {\"mean\": 10, \"std\": 2}},\n"
             "  {\"name\": \"k\", \"type\": \"numeric\", \"normalize\": \"train\"},\n"
             "  {\"name\": \"c\", \"type\": \"categorical\", \"vocabulary\": [\"u\", \"v\"]}]}\n");
  /* train a = 1, 2, 3, 4, 5, 6 (mean 3.5, population sd sqrt(35/12)); k constant. */
  snprintf(p, sizeof(p), "%s/train.csv", dir);
  write_text(p, "a,b,k,c,y\n1,10,7,u,neg\n2,12,7,v,pos\n3,8,7,u,neg\n4,10,7,v,pos\n5,14,7,u,"
                "neg\n6,10,7,v,pos\n");
  snprintf(p, sizeof(p), "%s/test.csv", dir);
  write_text(p, "a,b,k,c,y\n3.5,12,9,v,pos\n1,10,7,u,neg\n2,10,7,u,neg\n");
}

static void schema_dir_normalizes_with_training_statistics(void **state) {
  scratch *s = *state;
  make_schema_dir(s, "loans");
  xf_dataset train, test;
  xf_dataset_layout layout;
  xf_errctx err;
  if (xf_dataset_load_dir_with(path_in(s, "loans"), NULL, &layout, &train, &test, &err) != XF_OK)
    fail_msg("%s: %s: %s", err.file, err.field, err.msg);
  assert_int_equal(layout, XF_LAYOUT_CSV);
  assert_int_equal(train.features, 5);
  assert_int_equal(train.classes, 2);
  double mean = 0, sq = 0;
  for (uint32_t i = 0; i < train.n; i++) mean += train.x[i * 5];
  mean /= train.n;
  for (uint32_t i = 0; i < train.n; i++) sq += (train.x[i * 5] - mean) * (train.x[i * 5] - mean);
  assert_true(fabs(mean) < 1e-6);
  assert_true(fabs(sq / train.n - 1.0) < 1e-5);
  assert_true(fabs(train.x[1] - 0.0f) < 1e-6);  /* b: (10 - 10) / 2 */
  assert_true(fabs(train.x[6] - 1.0f) < 1e-6);  /* b: (12 - 10) / 2 */
  assert_true(train.x[2] == 0.0f);              /* k constant: centred, sd taken as 1 */
  /* Test is normalized with the training split's statistics, not its own. */
  assert_true(fabs(test.x[0]) < 1e-6);          /* a = 3.5 = train mean */
  assert_true(fabs(test.x[2] - 2.0f) < 1e-6);   /* k: 9 - 7 */
  assert_true(test.x[3] == 0.0f && test.x[4] == 1.0f);
  xf_dataset_free(&train);
  xf_dataset_free(&test);

  /* A label option on a schema dataset is refused: the schema names the label. */
  xf_csv_options opt = {.label_column = 1};
  expect_err(xf_dataset_load_dir_with(path_in(s, "loans"), &opt, NULL, &train, &test, &err), &err,
             XF_EINVAL, path_in(s, "loans/schema.json"), NULL, "drop the label option");
  /* A fault in test.csv names test.csv. */
  write_text(path_in(s, "loans/test.csv"), "a,b,k,c,y\n3.5,12,9,w,pos\n");
  expect_err(xf_dataset_load_dir(path_in(s, "loans"), &train, &test, &err), &err, XF_EFORMAT,
             path_in(s, "loans/test.csv"), "line 2, column 4", "'w' is not in its vocabulary");
  assert_null(train.x);
}

/* ---- .npy ----------------------------------------------------------------------------- */

/* An .npy file with the given header dict (padded to 64 bytes) and payload. */
static bytes npy(int major, const char *dict, const void *data, size_t n) {
  bytes b = {0};
  put(&b, "\x93NUMPY", 6);
  uint8_t ver[2] = {(uint8_t)major, 0};
  put(&b, ver, 2);
  size_t pre = major == 1 ? 10 : 12;
  size_t len = strlen(dict) + 1;
  size_t pad = (64 - (pre + len) % 64) % 64;
  if (major == 1) put16(&b, (uint16_t)(len + pad));
  else put32(&b, (uint32_t)(len + pad));
  put(&b, dict, strlen(dict));
  for (size_t i = 0; i < pad; i++) put(&b, " ", 1);
  put(&b, "\n", 1);
  put(&b, data, n);
  return b;
}

static const int64_t labels3[3] = {2, 0, 1};

static bytes labels_npy(void) {
  return npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", labels3,
             sizeof(labels3));
}

static void npy_reads_every_supported_dtype_and_shape(void **state) {
  (void)state;
  xf_dataset ds;
  xf_errctx err;
  bytes y = labels_npy();
  /* float32, (n, F) */
  const float f4[6] = {1, 2, 3, 4, 5, -6.5f};
  bytes x = npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f4, sizeof(f4));
  assert_int_equal(xf_npy_parse(x.p, x.n, "x.npy", y.p, y.n, "y.npy", &ds, &err), XF_OK);
  assert_int_equal(ds.n, 3);
  assert_true(ds.h == 1 && ds.w == 1 && ds.c == 2 && ds.features == 2);
  assert_int_equal(ds.classes, 3);
  assert_memory_equal(ds.x, f4, sizeof(f4));
  assert_true(ds.y[0] == 2 && ds.y[1] == 0 && ds.y[2] == 1);
  xf_dataset_free(&ds);
  bytes_free(&x);
  /* float64, (n, h, w), format 2.0, keys in another order and double quotes. */
  const double f8[12] = {0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  x = npy(2, "{\"shape\": (3, 2, 2), \"fortran_order\": False, \"descr\": \"<f8\"}", f8,
          sizeof(f8));
  assert_int_equal(xf_npy_parse(x.p, x.n, "x.npy", y.p, y.n, "y.npy", &ds, &err), XF_OK);
  assert_true(ds.h == 2 && ds.w == 2 && ds.c == 1 && ds.features == 4);
  assert_true(ds.x[0] == 0.5f && ds.x[11] == 11.0f);
  xf_dataset_free(&ds);
  bytes_free(&x);
  /* uint8 images (n, h, w, c) and int16 negative values; uint8 labels. */
  const int16_t i2[6] = {-3, 7, 0, 1, 2, 3};
  x = npy(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 1, 1, 2)}", i2, sizeof(i2));
  const uint8_t u1[3] = {1, 1, 0};
  bytes yu = npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", u1, 3);
  assert_int_equal(xf_npy_parse(x.p, x.n, "x.npy", yu.p, yu.n, "y.npy", &ds, &err), XF_OK);
  assert_true(ds.c == 2 && ds.x[0] == -3.0f && ds.x[1] == 7.0f);
  assert_int_equal(ds.classes, 2);
  xf_dataset_free(&ds);
  bytes_free(&x);
  bytes_free(&yu);
  bytes_free(&y);
}

static void expect_npy_error(const char *dict, const void *data, size_t n, xf_err code,
                             const char *needle) {
  bytes y = labels_npy();
  bytes x = npy(1, dict, data, n);
  xf_dataset ds;
  xf_errctx err;
  xf_errctx_clear(&err);
  expect_err(xf_npy_parse(x.p, x.n, "x.npy", y.p, y.n, "y.npy", &ds, &err), &err, code, "x.npy",
             NULL, needle);
  assert_null(ds.x);
  bytes_free(&x);
  bytes_free(&y);
}

static void npy_refuses_bad_headers_and_sizes(void **state) {
  (void)state;
  const float f[6] = {0};
  const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
  expect_npy_error("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", f, sizeof(f),
                   XF_EUNSUPPORTED, "Fortran order: save it in C order");
  expect_npy_error("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 2), }", f, sizeof(f),
                   XF_EUNSUPPORTED, "big-endian: save the array little-endian");
  expect_npy_error("{'descr': '<c8', 'fortran_order': False, 'shape': (3, 2), }", f, sizeof(f),
                   XF_EUNSUPPORTED, "dtype '<c8' is not supported");
  expect_npy_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", f,
                   sizeof(f), XF_EUNSUPPORTED, "structured arrays are not supported");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), 'x': 1}", f,
                   sizeof(f), XF_EFORMAT, "an unknown key 'x'");
  expect_npy_error("{'descr': '<f4', 'descr': '<f4', 'shape': (3, 2), }", f, sizeof(f),
                   XF_EFORMAT, "a repeated key 'descr'");
  expect_npy_error("{'descr': '<f4', 'shape': (3, 2), }", f, sizeof(f), XF_EFORMAT,
                   "the header lacks 'fortran_order'");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2) } junk", f,
                   sizeof(f), XF_EFORMAT, "does not end in spaces and a newline");
  expect_npy_error(ok, f, sizeof(f) - 1, XF_ETRUNCATED,
                   "the shape needs 24 bytes of data but the file holds 23");
  float more[7] = {0};
  expect_npy_error(ok, more, sizeof(more), XF_EFORMAT, "4 bytes follow the 24 bytes of data");
  /* A huge shape is refused from the header alone, before any allocation. */
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 999999999999), }", f,
                   sizeof(f), XF_ERANGE, "more than the 1073741824 values");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 0), }", f, 0,
                   XF_ERANGE, "dimension 1 of the shape is 0");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", f, sizeof(f),
                   XF_EFORMAT, "'shape' is not a tuple");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", f, sizeof(f),
                   XF_EFORMAT, "features of 1 dimensions");
  const float nan6[6] = {0, 0, 0, NAN, 0, 0};
  expect_npy_error(ok, nan6, sizeof(nan6), XF_ERANGE, "record 2, feature 2 is nan");
  const double big[6] = {0, 0, 0, 0, 1e300, 0};
  expect_npy_error("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", big,
                   sizeof(big), XF_ERANGE, "record 3, feature 1");
  /* Not an .npy at all, another version, a header longer than the file. */
  xf_dataset ds;
  xf_errctx err;
  bytes y = labels_npy();
  expect_err(xf_npy_parse("PK\3\4 not npy", 12, "x.npy", y.p, y.n, "y.npy", &ds, &err), &err,
             XF_EFORMAT, "x.npy", NULL, "not a NumPy .npy file");
  bytes x = npy(1, ok, f, sizeof(f));
  x.p[6] = 4;
  expect_err(xf_npy_parse(x.p, x.n, "x.npy", y.p, y.n, "y.npy", &ds, &err), &err,
             XF_EUNSUPPORTED, "x.npy", NULL, "format version 4.0 is not supported");
  x.p[6] = 1;
  x.p[8] = 0xff;
  x.p[9] = 0x7f;
  expect_err(xf_npy_parse(x.p, x.n, "x.npy", y.p, y.n, "y.npy", &ds, &err), &err, XF_ETRUNCATED,
             "x.npy", NULL, "the header says 32767 bytes");
  bytes_free(&x);
  /* Labels: floats, a count that differs, out of range. */
  x = npy(1, ok, f, sizeof(f));
  const float fl[3] = {0, 1, 0};
  bytes yf = npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", fl, sizeof(fl));
  expect_err(xf_npy_parse(x.p, x.n, "x.npy", yf.p, yf.n, "y.npy", &ds, &err), &err,
             XF_EUNSUPPORTED, "y.npy", NULL, "labels are floats");
  bytes_free(&yf);
  const int32_t two[2] = {0, 1};
  yf = npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", two, sizeof(two));
  expect_err(xf_npy_parse(x.p, x.n, "x.npy", yf.p, yf.n, "y.npy", &ds, &err), &err, XF_EFORMAT,
             "y.npy", NULL, "2 labels but x.npy holds 3 records");
  bytes_free(&yf);
  const int32_t neg[3] = {0, -1, 0};
  yf = npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", neg, sizeof(neg));
  expect_err(xf_npy_parse(x.p, x.n, "x.npy", yf.p, yf.n, "y.npy", &ds, &err), &err, XF_ERANGE,
             "y.npy", NULL, "record 2 has label -1");
  bytes_free(&yf);
  bytes_free(&x);
  bytes_free(&y);
}

/* ---- .npz ------------------------------------------------------------------------------ */

typedef struct zipw {
  bytes b, cd;
  uint16_t entries;
} zipw;

/* Adds a member, stored (method 0) or deflated (8). With zip64_local the local
 * header carries 0xFFFFFFFF sizes and a zip64 extra field, as numpy.savez
 * writes it; the central directory has the real sizes. */
static void zip_add(zipw *z, const char *name, const bytes *data, int method, bool zip64_local) {
  bytes body = {0};
  if (method == 8) {
    uLongf cap = compressBound(data->n) + 64;
    body.p = malloc(cap);
    body.cap = cap;
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = data->p;
    zs.avail_in = (uInt)data->n;
    zs.next_out = body.p;
    zs.avail_out = (uInt)cap;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    body.n = zs.total_out;
    deflateEnd(&zs);
  } else {
    put(&body, data->p, data->n);
  }
  uint32_t crc = (uint32_t)crc32(0, data->p, (uInt)data->n);
  uint32_t off = (uint32_t)z->b.n;
  put32(&z->b, 0x04034b50);
  put16(&z->b, 45);
  put16(&z->b, 0);
  put16(&z->b, (uint16_t)method);
  put32(&z->b, 0);
  put32(&z->b, crc);
  put32(&z->b, zip64_local ? 0xFFFFFFFFu : (uint32_t)body.n);
  put32(&z->b, zip64_local ? 0xFFFFFFFFu : (uint32_t)data->n);
  put16(&z->b, (uint16_t)strlen(name));
  put16(&z->b, zip64_local ? 20 : 0);
  put(&z->b, name, strlen(name));
  if (zip64_local) {
    put16(&z->b, 1);
    put16(&z->b, 16);
    put32(&z->b, (uint32_t)data->n);
    put32(&z->b, 0);
    put32(&z->b, (uint32_t)body.n);
    put32(&z->b, 0);
  }
  put(&z->b, body.p, body.n);
  put32(&z->cd, 0x02014b50);
  put16(&z->cd, 45);
  put16(&z->cd, 45);
  put16(&z->cd, 0);
  put16(&z->cd, (uint16_t)method);
  put32(&z->cd, 0);
  put32(&z->cd, crc);
  put32(&z->cd, (uint32_t)body.n);
  put32(&z->cd, (uint32_t)data->n);
  put16(&z->cd, (uint16_t)strlen(name));
  put16(&z->cd, 0);
  put16(&z->cd, 0);
  put16(&z->cd, 0);
  put16(&z->cd, 0);
  put32(&z->cd, 0);
  put32(&z->cd, off);
  put(&z->cd, name, strlen(name));
  z->entries++;
  bytes_free(&body);
}

static bytes zip_finish(zipw *z) {
  uint32_t cd_off = (uint32_t)z->b.n;
  put(&z->b, z->cd.p, z->cd.n);
  put32(&z->b, 0x06054b50);
  put16(&z->b, 0);
  put16(&z->b, 0);
  put16(&z->b, z->entries);
  put16(&z->b, z->entries);
  put32(&z->b, (uint32_t)z->cd.n);
  put32(&z->b, cd_off);
  put16(&z->b, 0);
  bytes_free(&z->cd);
  return z->b;
}

static const float npz_x[6] = {1, 2, 3, 4, 5, 6};

static bytes make_npz(int method, bool zip64_local, bool with_y) {
  zipw z = {0};
  bytes x = npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", npz_x,
                sizeof(npz_x));
  bytes y = labels_npy();
  bytes other = {0};
  put(&other, "ignored", 7);
  zip_add(&z, "notes.txt", &other, 0, false);
  zip_add(&z, "x.npy", &x, method, zip64_local);
  if (with_y) zip_add(&z, "y.npy", &y, method, zip64_local);
  bytes_free(&x);
  bytes_free(&y);
  bytes_free(&other);
  return zip_finish(&z);
}

static void npz_reads_stored_and_deflated_members(void **state) {
  (void)state;
  for (int method = 0; method <= 8; method += 8) {
    for (int z64 = 0; z64 < 2; z64++) {
      bytes z = make_npz(method, z64, true);
      xf_dataset ds;
      xf_errctx err;
      if (xf_npz_parse(z.p, z.n, "train.npz", &ds, &err) != XF_OK)
        fail_msg("method %d zip64 %d: %s", method, z64, err.msg);
      assert_int_equal(ds.n, 3);
      assert_int_equal(ds.features, 2);
      assert_memory_equal(ds.x, npz_x, sizeof(npz_x));
      assert_int_equal(ds.y[0], 2);
      xf_dataset_free(&ds);
      bytes_free(&z);
    }
  }
}

static void npz_refuses_damaged_archives(void **state) {
  (void)state;
  xf_dataset ds;
  xf_errctx err;
  bytes z = make_npz(8, true, false);
  expect_err(xf_npz_parse(z.p, z.n, "train.npz", &ds, &err), &err, XF_EFORMAT, "train.npz", NULL,
             "holds no array named 'y': save features as x and labels as y");
  bytes_free(&z);
  z = make_npz(0, false, true);
  /* Flip a byte of x.npy's data (stored): the CRC-32 catches it. */
  size_t at = 30 + 9 + 7 + 30 + 5 + 64 + 3;
  z.p[at] ^= 0x40;
  expect_err(xf_npz_parse(z.p, z.n, "train.npz", &ds, &err), &err, XF_EINTEGRITY, "train.npz",
             NULL, "member x.npy fails its CRC-32 check");
  z.p[at] ^= 0x40;
  /* Cut short: the end record is gone. */
  expect_err(xf_npz_parse(z.p, z.n - 1, "train.npz", &ds, &err), &err, XF_EFORMAT, "train.npz",
             NULL, "no zip end-of-central-directory record");
  /* A central directory that points past the end of the file. */
  bytes c = {0};
  put(&c, z.p, z.n);
  c.p[c.n - 6] = 0xff;
  c.p[c.n - 5] = 0xff;
  expect_err(xf_npz_parse(c.p, c.n, "train.npz", &ds, &err), &err, XF_EFORMAT, "train.npz", NULL,
             "the central directory lies outside the file");
  bytes_free(&c);
  /* Another compression method (12, bzip2) in the directory entry of x.npy. */
  size_t cd = (size_t)(z.p[z.n - 6] | z.p[z.n - 5] << 8 | z.p[z.n - 4] << 16);
  size_t second = cd + 46 + 9; /* after notes.txt's entry */
  z.p[second + 10] = 12;
  expect_err(xf_npz_parse(z.p, z.n, "train.npz", &ds, &err), &err, XF_EUNSUPPORTED, "train.npz",
             NULL, "member x.npy uses zip compression method 12");
  z.p[second + 10] = 0;
  /* Encrypted. */
  z.p[second + 8] = 1;
  expect_err(xf_npz_parse(z.p, z.n, "train.npz", &ds, &err), &err, XF_EUNSUPPORTED, "train.npz",
             NULL, "member x.npy is encrypted");
  z.p[second + 8] = 0;
  /* A member claiming to start beyond the directory. */
  z.p[second + 42] = 0xf0;
  expect_err(xf_npz_parse(z.p, z.n, "train.npz", &ds, &err), &err, XF_EFORMAT, "train.npz", NULL,
             "the local header of member x.npy is damaged");
  bytes_free(&z);
  expect_err(xf_npz_parse("PK", 2, "train.npz", &ds, &err), &err, XF_EFORMAT, "train.npz", NULL,
             "too short to be a zip");
  assert_null(ds.x);
}

/* Every allocation of the schema, the schema CSV reader, normalization and the
 * .npz reader is failed in turn: each failure is reported and leaves nothing
 * allocated (the sanitizer build checks the leaks). */
static void tabular_readers_free_everything_when_allocations_fail(void **state) {
  (void)state;
  char text[8192] = "id,default,income,age,region,job\n";
  for (int i = 0; i < 150; i++) {
    char row[64];
    snprintf(row, sizeof(row), "%d,%s,%d,%d,%s,%s\n", i, i % 3 ? "no" : "yes", 1000 + i, 20 + i % 50,
             i % 7 ? "north" : "mars", i % 5 ? "nurse" : "");
    strcat(text, row);
  }
  xf_err rc = XF_ENOMEM;
  long n = 0;
  for (; rc == XF_ENOMEM && n < 2000; n++) {
    xf_schema *sc = NULL;
    xf_dataset ds = {0};
    xf_alloc_fail_after(n);
    rc = xf_schema_parse(loan_schema, strlen(loan_schema), "schema.json", &sc, NULL);
    if (rc == XF_OK) rc = xf_schema_csv_parse(sc, text, strlen(text), "train.csv", &ds, NULL);
    if (rc == XF_OK) rc = xf_schema_normalize(sc, &ds, NULL, NULL);
    xf_alloc_fail_reset();
    if (rc == XF_ENOMEM) assert_null(ds.x);
    xf_dataset_free(&ds);
    xf_schema_free(sc);
  }
  assert_int_equal(rc, XF_OK);
  assert_true(n > 5);
  bytes z = make_npz(8, true, true);
  rc = XF_ENOMEM;
  for (n = 0; rc == XF_ENOMEM && n < 1000; n++) {
    xf_dataset ds;
    xf_alloc_fail_after(n);
    rc = xf_npz_parse(z.p, z.n, "train.npz", &ds, NULL);
    xf_alloc_fail_reset();
    if (rc == XF_ENOMEM) assert_null(ds.x);
    else xf_dataset_free(&ds);
  }
  assert_int_equal(rc, XF_OK);
  assert_true(n > 3);
  bytes_free(&z);
}

/* ---- directories and splits ------------------------------------------------------------ */

static void make_npy_dir(const scratch *s, const char *name, uint32_t n_train) {
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/%s", s->dir, name);
  assert_int_equal(mkdir(dir, 0777), 0);
  xf_dataset train, test;
  assert_int_equal(xf_dataset_alloc(&train, n_train, 1, 1, 3, 4, NULL), XF_OK);
  assert_int_equal(xf_dataset_alloc(&test, n_train / 4, 1, 1, 3, 4, NULL), XF_OK);
  for (uint32_t i = 0; i < train.n * 3; i++) train.x[i] = (float)i * 0.25f;
  for (uint32_t i = 0; i < train.n; i++) train.y[i] = (int32_t)(i % 4);
  for (uint32_t i = 0; i < test.n; i++) test.y[i] = (int32_t)(i % 4);
  char a[600], b[600];
  snprintf(a, sizeof(a), "%s/train-x.npy", dir);
  snprintf(b, sizeof(b), "%s/train-y.npy", dir);
  assert_int_equal(xf_npy_write(a, b, &train, NULL), XF_OK);
  snprintf(a, sizeof(a), "%s/test-x.npy", dir);
  snprintf(b, sizeof(b), "%s/test-y.npy", dir);
  assert_int_equal(xf_npy_write(a, b, &test, NULL), XF_OK);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

static void npy_and_npz_directories_load_and_write_back(void **state) {
  scratch *s = *state;
  make_npy_dir(s, "np", 40);
  xf_dataset train, test;
  xf_dataset_layout layout;
  xf_errctx err;
  if (xf_dataset_load_dir_with(path_in(s, "np"), NULL, &layout, &train, &test, &err) != XF_OK)
    fail_msg("%s: %s", err.file, err.msg);
  assert_int_equal(layout, XF_LAYOUT_NPY);
  assert_string_equal(xf_dataset_layout_name(layout), "npy");
  assert_int_equal(train.n, 40);
  assert_int_equal(test.n, 10);
  assert_int_equal(train.features, 3);
  assert_true(train.x[5] == 1.25f);
  assert_int_equal(train.y[7], 3);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  /* An .npz pair. */
  assert_int_equal(mkdir(path_in(s, "z"), 0777), 0);
  bytes z = make_npz(8, true, true);
  write_bytes(path_in(s, "z/train.npz"), z.p, z.n);
  write_bytes(path_in(s, "z/test.npz"), z.p, z.n);
  bytes_free(&z);
  assert_int_equal(xf_dataset_load_dir_with(path_in(s, "z"), NULL, &layout, &train, &test, &err),
                   XF_OK);
  assert_int_equal(layout, XF_LAYOUT_NPZ);
  assert_int_equal(test.n, 3);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  /* Half an NPY layout names what is missing; two layouts are refused. */
  unlink(path_in(s, "np/test-y.npy"));
  expect_err(xf_dataset_load_dir(path_in(s, "np"), &train, &test, &err), &err, XF_ENOENT,
             path_in(s, "np"), NULL, "holds part of the NPY layout: test-y.npy[.gz] is missing");
  write_text(path_in(s, "z/train.csv"), "a,b\n1,0\n");
  expect_err(xf_dataset_load_dir(path_in(s, "z"), &train, &test, &err), &err, XF_EFORMAT,
             path_in(s, "z"), NULL, "holds both CSV files (train.csv...) and NPZ files");
  unlink(path_in(s, "z/train.csv"));
  write_text(path_in(s, "z/schema.json"), "{}");
  expect_err(xf_dataset_load_dir(path_in(s, "z"), &train, &test, &err), &err, XF_EINVAL,
             path_in(s, "z/schema.json"), NULL, "a column schema applies to CSV files");
}

/* Splits of a NumPy dataset are NPY shards; splits of a schema CSV dataset are
 * numeric CSV shards of the encoded features, which load without a schema. */
static void split_of_tabular_datasets_writes_shards_that_load_back(void **state) {
  scratch *s = *state;
  make_npy_dir(s, "np", 200);
  xf_dataset train, test;
  xf_dataset_layout layout;
  assert_int_equal(xf_dataset_load_dir_with(path_in(s, "np"), NULL, &layout, &train, &test, NULL),
                   XF_OK);
  const char *schemes[] = {"iid", "dirichlet:0.5", "classes:2"};
  for (int k = 0; k < 3; k++) {
    xf_split_scheme sc;
    assert_int_equal(xf_split_scheme_parse(schemes[k], &sc, NULL), XF_OK);
    xf_split sp;
    xf_errctx err;
    if (xf_dataset_split(&train, &test, 3, &sc, 11, NULL, &sp, &err) != XF_OK)
      fail_msg("%s: %s", schemes[k], err.msg);
    char out[64];
    snprintf(out, sizeof(out), "out-%d", k);
    assert_int_equal(xf_split_write(&sp, "np", layout, path_in(s, out), &err), XF_OK);
    uint32_t total = 0;
    for (int i = 0; i < 3; i++) {
      char dir[600];
      snprintf(dir, sizeof(dir), "%s/site-%d", path_in(s, out), i + 1);
      xf_dataset a, b;
      xf_dataset_layout got;
      assert_int_equal(xf_dataset_load_dir_with(dir, NULL, &got, &a, &b, NULL), XF_OK);
      assert_int_equal(got, XF_LAYOUT_NPY);
      assert_int_equal(a.n, sp.shards[i].train.n);
      assert_int_equal(a.classes, 4);
      assert_memory_equal(a.x, sp.shards[i].train.x, (size_t)a.n * 3 * sizeof(float));
      assert_memory_equal(a.y, sp.shards[i].train.y, (size_t)a.n * sizeof(int32_t));
      total += a.n;
      xf_dataset_free(&a);
      xf_dataset_free(&b);
    }
    assert_int_equal(total, 200);
    xf_split_free(&sp);
  }
  xf_dataset_free(&train);
  xf_dataset_free(&test);

  make_schema_dir(s, "loans");
  assert_int_equal(
      xf_dataset_load_dir_with(path_in(s, "loans"), NULL, &layout, &train, &test, NULL), XF_OK);
  xf_split_scheme sc;
  assert_int_equal(xf_split_scheme_parse("iid", &sc, NULL), XF_OK);
  xf_split_options opt = {.min_records = 1};
  xf_split sp;
  assert_int_equal(xf_dataset_split(&train, &test, 2, &sc, 3, &opt, &sp, NULL), XF_OK);
  assert_int_equal(xf_split_write(&sp, "loans", layout, path_in(s, "loans-out"), NULL), XF_OK);
  xf_dataset a, b;
  assert_int_equal(xf_dataset_load_dir(path_in(s, "loans-out/site-1"), &a, &b, NULL), XF_OK);
  assert_int_equal(a.features, 5);
  assert_int_equal(a.classes, 2);
  assert_memory_equal(a.x, sp.shards[0].train.x, (size_t)a.n * 5 * sizeof(float));
  xf_dataset_free(&a);
  xf_dataset_free(&b);
  xf_split_free(&sp);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

#define T(f) cmocka_unit_test_setup_teardown(f, scratch_setup, scratch_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(schema_csv_encodes_numeric_categorical_and_labels),
      T(schema_csv_errors_name_file_line_and_column),
      T(schema_parse_refuses_bad_schemas),
      T(schema_dir_normalizes_with_training_statistics),
      T(npy_reads_every_supported_dtype_and_shape),
      T(npy_refuses_bad_headers_and_sizes),
      T(npz_reads_stored_and_deflated_members),
      T(npz_refuses_damaged_archives),
      T(tabular_readers_free_everything_when_allocations_fail),
      T(npy_and_npz_directories_load_and_write_back),
      T(split_of_tabular_datasets_writes_shards_that_load_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
