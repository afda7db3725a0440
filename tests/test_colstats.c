/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of pooled normalization statistics (data/colstats.h): a site's
 * per-column count, mean and M2, the statistics file, pooling several sites'
 * files, and the schema written from the pooled figures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "data/colstats.h"

/* ---- scratch dataset directories --------------------------------------------------- */

typedef struct scratch {
  char dir[256];
} scratch;

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s || xf_test_mkdtemp(s->dir, sizeof(s->dir), "colstats") != 0) {
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  if (s) xf_test_remove_tree(s->dir);
  free(s);
  return 0;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

/* A schema with every kind of numeric column: "train" with a fill and a
 * large offset (x), "none" (y), given (z), a constant "train" column (k),
 * and columns that are not numeric. */
static const char schema_text[] =
    "{\n"
    "  \"label\": {\"column\": \"label\", \"classes\": [\"no\", \"yes\"]},\n"
    "  \"missing\": [\"\", \"NA\"],\n"
    "  \"columns\": [\n"
    "    {\"name\": \"id\", \"type\": \"ignore\"},\n"
    "    {\"name\": \"x\", \"type\": \"numeric\", \"normalize\": \"train\", \"fill\": 1000000},\n"
    "    {\"name\": \"y\", \"type\": \"numeric\"},\n"
    "    {\"name\": \"z\", \"type\": \"numeric\", \"normalize\": {\"mean\": 1, \"std\": 2}},\n"
    "    {\"name\": \"k\", \"type\": \"numeric\", \"normalize\": \"train\"},\n"
    "    {\"name\": \"colour\", \"type\": \"categorical\", \"vocabulary\": [\"red\", \"blue\"]}\n"
    "  ]\n"
    "}\n";

enum { COL_X, COL_Y, COL_Z, COL_K, NUMERIC };
static const char *const numeric_names[NUMERIC] = {"x", "y", "z", "k"};

/* Record r's numeric values, each exactly a 32-bit float, so that the
 * loader's values and these are the same numbers. x is missing (and so its
 * fill, 1000000) in every 7th record. */
static void record_values(uint32_t r, bool *x_missing, double v[NUMERIC]) {
  uint32_t h = r * 2654435761u;
  *x_missing = r % 7 == 3;
  v[COL_X] = *x_missing ? 1000000.0 : 1000000.0 + (double)(h % 4096) * 0.25;
  v[COL_Y] = (double)((int32_t)(h >> 8) % 1000) / 8.0;
  v[COL_Z] = (double)(h % 97) - 40.0;
  v[COL_K] = 5.0;
}

/* Writes a dataset directory with records [first, first + n) in train.csv. */
static void write_site_dir(const char *dir, uint32_t first, uint32_t n) {
  assert_int_equal(mkdir(dir, 0755), 0);
  char path[512];
  snprintf(path, sizeof(path), "%s/schema.json", dir);
  write_text(path, schema_text);
  size_t cap = 64 + (size_t)n * 96, used = 0;
  char *csv = malloc(cap);
  assert_non_null(csv);
  used += (size_t)snprintf(csv, cap, "id,x,y,z,k,colour,label\n");
  for (uint32_t r = first; r < first + n; r++) {
    bool missing;
    double v[NUMERIC];
    record_values(r, &missing, v);
    char xt[32];
    if (missing) snprintf(xt, sizeof(xt), "%s", r % 2 ? "NA" : "");
    else snprintf(xt, sizeof(xt), "%.17g", v[COL_X]);
    used += (size_t)snprintf(csv + used, cap - used, "%u,%s,%.17g,%.17g,%.17g,%s,%s\n", r, xt,
                             v[COL_Y], v[COL_Z], v[COL_K], r % 3 ? "red" : "blue",
                             r % 4 ? "no" : "yes");
    assert_true(used < cap);
  }
  snprintf(path, sizeof(path), "%s/train.csv", dir);
  write_text(path, csv);
  free(csv);
  snprintf(path, sizeof(path), "%s/test.csv", dir);
  write_text(path, "id,x,y,z,k,colour,label\n0,1,2,3,5,red,no\n");
}

/* One direct pass over records [0, n): the mean and population standard
 * deviation of every numeric column, two passes in long double. */
static void direct_stats(uint32_t n, double mean[NUMERIC], double sd[NUMERIC]) {
  for (int c = 0; c < NUMERIC; c++) {
    long double sum = 0, sq = 0;
    for (uint32_t r = 0; r < n; r++) {
      bool missing;
      double v[NUMERIC];
      record_values(r, &missing, v);
      sum += v[c];
    }
    long double m = sum / n;
    for (uint32_t r = 0; r < n; r++) {
      bool missing;
      double v[NUMERIC];
      record_values(r, &missing, v);
      sq += (v[c] - m) * (v[c] - m);
    }
    mean[c] = (double)m;
    sd[c] = (double)sqrtl(sq / n);
  }
}

static void assert_close(double got, double want, const char *what) {
  double scale = fabs(want) > 1e-300 ? fabs(want) : 1.0;
  if (fabs(got - want) > 1e-9 * scale) fail_msg("%s: %.17g, want %.17g", what, got, want);
}

/* The three sites of most tests: unequal shares of records 0..149. */
static const uint32_t site_first[3] = {0, 37, 138};
static const uint32_t site_n[3] = {37, 101, 12};
static const char *const site_names[3] = {"berlin", "paris", "lyon"};

static void compute_sites(const scratch *s, xf_colstats st[3]) {
  for (int i = 0; i < 3; i++) {
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", s->dir, site_names[i]);
    write_site_dir(dir, site_first[i], site_n[i]);
    xf_errctx err;
    xf_err rc = xf_colstats_compute(dir, &st[i], &err);
    if (rc != XF_OK) fail_msg("%s: %s: %s", err.file, err.field, err.msg);
    snprintf(st[i].dataset, sizeof(st[i].dataset), "credit");
    snprintf(st[i].site, sizeof(st[i].site), "%s", site_names[i]);
  }
}

static void free_sites(xf_colstats st[3]) {
  for (int i = 0; i < 3; i++) xf_colstats_free(&st[i]);
}

/* ---- tests ------------------------------------------------------------------------ */

static void pooled_statistics_equal_one_pass_over_the_union(void **state) {
  scratch *s = *state;
  xf_colstats st[3];
  compute_sites(s, st);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(st[i].n_cols, NUMERIC);
    for (int c = 0; c < NUMERIC; c++) {
      assert_string_equal(st[i].cols[c].name, numeric_names[c]);
      assert_int_equal(st[i].cols[c].count, site_n[i]);
    }
  }
  const char *names[3] = {"berlin.json", "paris.json", "lyon.json"};
  xf_colstats pooled;
  xf_errctx err;
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_OK);
  assert_string_equal(pooled.dataset, "credit");
  assert_string_equal(pooled.site, "");
  assert_string_equal(pooled.schema_digest, st[0].schema_digest);
  double mean[NUMERIC], sd[NUMERIC];
  direct_stats(150, mean, sd);
  for (int c = 0; c < NUMERIC; c++) {
    assert_int_equal(pooled.cols[c].count, 150);
    assert_close(pooled.cols[c].mean, mean[c], numeric_names[c]);
    assert_close(xf_colstat_std(&pooled.cols[c]), sd[c], numeric_names[c]);
  }
  /* The constant column pools to a deviation of 0, normalized with 1. */
  assert_true(xf_colstat_std(&pooled.cols[COL_K]) == 0.0);
  assert_true(xf_colstat_norm_std(&pooled.cols[COL_K]) == 1.0);

  /* The union computed at one site gives the same figures. */
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/union", s->dir);
  write_site_dir(dir, 0, 150);
  xf_colstats all;
  assert_int_equal(xf_colstats_compute(dir, &all, &err), XF_OK);
  for (int c = 0; c < NUMERIC; c++) {
    assert_int_equal(all.cols[c].count, 150);
    assert_close(all.cols[c].mean, pooled.cols[c].mean, numeric_names[c]);
    assert_close(all.cols[c].m2, pooled.cols[c].m2, numeric_names[c]);
  }
  xf_colstats_free(&all);
  xf_colstats_free(&pooled);
  free_sites(st);
}

static void statistics_file_reads_back_to_the_same_numbers(void **state) {
  scratch *s = *state;
  xf_colstats st[3];
  compute_sites(s, st);
  char *json = NULL;
  xf_errctx err;
  assert_int_equal(xf_colstats_format(&st[1], &json, &err), XF_OK);
  assert_non_null(strstr(json, "\"format\": \"xfed-column-stats\""));
  assert_non_null(strstr(json, "\"site\": \"paris\""));
  xf_colstats back;
  assert_int_equal(xf_colstats_parse(json, strlen(json), "paris.json", &back, &err), XF_OK);
  assert_string_equal(back.dataset, "credit");
  assert_string_equal(back.site, "paris");
  assert_string_equal(back.schema_digest, st[1].schema_digest);
  assert_int_equal(back.n_cols, NUMERIC);
  for (int c = 0; c < NUMERIC; c++) {
    assert_string_equal(back.cols[c].name, st[1].cols[c].name);
    assert_int_equal(back.cols[c].count, st[1].cols[c].count);
    assert_true(back.cols[c].mean == st[1].cols[c].mean);
    assert_true(back.cols[c].m2 == st[1].cols[c].m2);
  }
  xf_colstats_free(&back);
  xf_free(json);
  free_sites(st);
}

/* A valid file with one substitution applied, parsed; the error's field. */
static void expect_refused(const char *from, const char *to, const char *field,
                           const char *words) {
  char text[2048];
  const char *base =
      "{\"format\": \"xfed-column-stats\", \"version\": 1, \"dataset\": \"credit\", "
      "\"site\": \"berlin\", \"schema_digest\": "
      "\"57ce4d9408954b6dda8d5e9ea82bfa9be155860ae8bda5d2a69ba6f1c6682ef6\", \"split\": "
      "\"train\", \"columns\": [{\"name\": \"x\", \"count\": 4, \"mean\": 1.5, \"m2\": 2}, "
      "{\"name\": \"y\", \"count\": 4, \"mean\": -3, \"m2\": 0}]}";
  const char *at = strstr(base, from);
  assert_non_null(at);
  snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
  xf_colstats st;
  xf_errctx err;
  xf_err rc = xf_colstats_parse(text, strlen(text), "berlin.json", &st, &err);
  if (rc == XF_OK) fail_msg("accepted: %s", text);
  assert_null(st.cols);
  assert_string_equal(err.file, "berlin.json");
  bool field_ok = strncmp(field, "line ", 5) == 0 ? strncmp(err.field, field, strlen(field)) == 0
                                                : strcmp(err.field, field) == 0;
  if (!field_ok) fail_msg("field '%s', want '%s' for %s", err.field, field, text);
  if (!strstr(err.msg, words)) fail_msg("message '%s' lacks '%s'", err.msg, words);
}

static void statistics_file_reader_refuses_malformed_files(void **state) {
  (void)state;
  expect_refused("\"site\": \"berlin\"", "\"site\": \"Berlin\"", "site", "name of 1 to 63");
  expect_refused("xfed-column-stats", "xfed-stats", "format", "not a statistics file");
  expect_refused("\"version\": 1", "\"version\": 2", "version", "must be 1");
  expect_refused("\"dataset\": \"credit\"", "\"dataset\": 7", "dataset", "name of 1 to 63");
  expect_refused("57ce4d94", "57ce4d9", "schema_digest", "64 hexadecimal digits");
  expect_refused("\"split\": \"train\"", "\"split\": \"test\"", "split", "training split");
  expect_refused("\"count\": 4, \"mean\": 1.5", "\"count\": 4.5, \"mean\": 1.5", "columns[0].count",
                 "whole number");
  expect_refused("\"count\": 4, \"mean\": 1.5", "\"count\": -4, \"mean\": 1.5", "columns[0].count",
                 "whole number");
  expect_refused("\"m2\": 2", "\"m2\": -2", "columns[0].m2", "at least 0");
  expect_refused("\"mean\": -3", "\"mean\": \"-3\"", "columns[1].mean", "finite number");
  expect_refused("\"name\": \"y\"", "\"name\": \"x\"", "columns[1].name", "listed twice");
  expect_refused("\"name\": \"y\"", "\"name\": \"\"", "columns[1].name", "column's name");
  expect_refused("\"count\": 4, \"mean\": 1.5", "\"count\": 0, \"mean\": 1.5", "columns[0]",
                 "count of 0");
  expect_refused("\"m2\": 0}", "\"m2\": 0, \"sum\": 3}", "columns[1]", "unknown member 'sum'");
  expect_refused("\"split\"", "\"records\": [], \"split\"", "", "unknown member 'records'");
  expect_refused("\"columns\": [", "\"columns\": 1, \"x\": [", "", "unknown member 'x'");
  expect_refused("\"train\", ", "\"train\" ", "line 1", "");

  /* The parser accepts what it was given when nothing is altered. */
  const char *good =
      "{\"format\": \"xfed-column-stats\", \"version\": 1, \"dataset\": \"d\", \"site\": \"s\", "
      "\"schema_digest\": \"" "0000000000000000000000000000000000000000000000000000000000000000"
      "\", \"split\": \"train\", \"columns\": [{\"name\": \"a b\", \"count\": 0, \"mean\": 0, "
      "\"m2\": 0}]}";
  xf_colstats st;
  xf_errctx err;
  assert_int_equal(xf_colstats_parse("[1]", 3, "list.json", &st, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "must be a JSON object"));
  assert_int_equal(xf_colstats_parse(good, strlen(good), NULL, &st, &err), XF_OK);
  assert_int_equal(st.n_cols, 1);
  assert_string_equal(st.cols[0].name, "a b");
  xf_colstats_free(&st);
}

static void merge_refuses_what_cannot_be_pooled(void **state) {
  scratch *s = *state;
  xf_colstats st[3], pooled;
  compute_sites(s, st);
  const char *names[3] = {"berlin.json", "paris.json", "lyon.json"};
  xf_errctx err;

  assert_int_equal(xf_colstats_merge(st, names, 1, &pooled, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "2 or more sites, 1 given"));
  assert_null(pooled.cols);

  snprintf(st[1].dataset, sizeof(st[1].dataset), "loans");
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_EINVAL);
  assert_string_equal(err.file, "paris.json");
  assert_string_equal(err.field, "dataset");
  snprintf(st[1].dataset, sizeof(st[1].dataset), "credit");

  st[2].schema_digest[0] = st[2].schema_digest[0] == 'a' ? 'b' : 'a';
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_EINVAL);
  assert_string_equal(err.file, "lyon.json");
  assert_string_equal(err.field, "schema_digest");
  assert_non_null(strstr(err.msg, "different schemas"));
  snprintf(st[2].schema_digest, sizeof(st[2].schema_digest), "%s", st[0].schema_digest);

  snprintf(st[2].site, sizeof(st[2].site), "berlin");
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_EINVAL);
  assert_string_equal(err.file, "lyon.json");
  assert_string_equal(err.field, "site");
  assert_non_null(strstr(err.msg, "also the site of berlin.json"));
  snprintf(st[2].site, sizeof(st[2].site), "lyon");

  /* A column missing from a later file, and one the first file lacks. */
  st[1].n_cols--;
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_EINVAL);
  assert_string_equal(err.file, "paris.json");
  assert_string_equal(err.field, "columns");
  assert_non_null(strstr(err.msg, "no column 'k'"));
  st[1].n_cols++;
  snprintf(st[2].cols[COL_Y].name, sizeof(st[2].cols[COL_Y].name), "why");
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_EINVAL);
  assert_string_equal(err.file, "lyon.json");
  assert_non_null(strstr(err.msg, "no column 'y'"));
  snprintf(st[2].cols[COL_Y].name, sizeof(st[2].cols[COL_Y].name), "y");

  /* Columns in another order pool by name. */
  xf_colstat swap = st[2].cols[COL_X];
  st[2].cols[COL_X] = st[2].cols[COL_K];
  st[2].cols[COL_K] = swap;
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_OK);
  assert_string_equal(pooled.cols[COL_X].name, "x");
  assert_int_equal(pooled.cols[COL_X].count, 150);
  xf_colstats_free(&pooled);

  /* A column with no values anywhere. */
  for (int i = 0; i < 3; i++) st[i].cols[COL_Z] = (xf_colstat){.name = "z"};
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "column 'z' has no values"));
  free_sites(st);
}

static void pooled_schema_gives_train_columns_the_pooled_statistics(void **state) {
  scratch *s = *state;
  xf_colstats st[3], pooled;
  compute_sites(s, st);
  const char *names[3] = {"a", "b", "c"};
  xf_errctx err;
  assert_int_equal(xf_colstats_merge(st, names, 3, &pooled, &err), XF_OK);
  char *json = NULL;
  uint32_t replaced = 0;
  assert_int_equal(xf_colstats_apply(schema_text, strlen(schema_text), "schema.json", &pooled,
                                     &json, &replaced, &err),
                   XF_OK);
  assert_int_equal(replaced, 2);

  /* The new schema is valid and loads a site's data with the pooled
   * figures: site lyon's x column is normalized with the pooled mean and
   * deviation, not its own, and the constant column with a deviation of 1. */
  char dir[512], path[600];
  snprintf(dir, sizeof(dir), "%s/lyon", s->dir);
  snprintf(path, sizeof(path), "%s/schema.json", dir);
  write_text(path, json);
  xf_dataset train, test;
  assert_int_equal(xf_dataset_load_dir(dir, &train, &test, &err), XF_OK);
  bool missing;
  double v[NUMERIC];
  record_values(site_first[2], &missing, v);
  double sd_x = xf_colstat_std(&pooled.cols[COL_X]);
  assert_true(fabs(train.x[0] - (float)((v[COL_X] - pooled.cols[COL_X].mean) / sd_x)) < 1e-5);
  assert_true(train.x[3] == 0.0f); /* k: (5 - 5) / 1 */
  assert_true(train.x[1] == (float)v[COL_Y]);              /* y: "none" */
  assert_true(train.x[2] == (float)((v[COL_Z] - 1) / 2)); /* z: given */
  xf_dataset_free(&train);
  xf_dataset_free(&test);

  /* The schema's meaning, not its layout, is what is digested. */
  char digest[XF_DIGEST_HEX], again[XF_DIGEST_HEX];
  assert_int_equal(xf_schema_digest(schema_text, strlen(schema_text), NULL, digest, &err), XF_OK);
  const char *reordered =
      "{\"columns\": [{\"type\": \"ignore\", \"name\": \"id\"}, {\"name\": \"x\", \"type\": "
      "\"numeric\", \"normalize\": \"train\", \"fill\": 1000000}, {\"name\": \"y\", \"type\": "
      "\"numeric\"}, {\"name\": \"z\", \"type\": \"numeric\", \"normalize\": {\"std\": 2, "
      "\"mean\": 1}}, {\"name\": \"k\", \"type\": \"numeric\", \"normalize\": \"train\"}, "
      "{\"name\": \"colour\", \"type\": \"categorical\", \"vocabulary\": [\"red\", \"blue\"]}], "
      "\"missing\": [\"\", \"NA\"], \"label\": {\"classes\": [\"no\", \"yes\"], \"column\": "
      "\"label\"}}";
  assert_int_equal(xf_schema_digest(reordered, strlen(reordered), NULL, again, &err), XF_OK);
  assert_string_equal(digest, again);
  assert_string_equal(digest, pooled.schema_digest);

  /* Another schema (the pooled one itself, or one with another fill) is
   * refused: the statistics were not computed with it. */
  char *twice = NULL;
  assert_int_equal(xf_colstats_apply(json, strlen(json), "pooled.json", &pooled, &twice,
                                     &replaced, &err),
                   XF_EINVAL);
  assert_string_equal(err.file, "pooled.json");
  assert_non_null(strstr(err.msg, "not the schema the statistics were computed with"));
  assert_null(twice);
  assert_int_equal(xf_colstats_apply("{\"label\": 1}", 12, "bad.json", &pooled, &twice, &replaced,
                                     &err),
                   XF_EINVAL);
  assert_string_equal(err.field, "label");
  xf_free(json);
  xf_colstats_free(&pooled);
  free_sites(st);
}

static void compute_refuses_datasets_without_a_schema(void **state) {
  scratch *s = *state;
  char dir[512], path[600];
  snprintf(dir, sizeof(dir), "%s/plain", s->dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof(path), "%s/train.csv", dir);
  write_text(path, "a,b,label\n1,2,0\n");
  xf_colstats st;
  xf_errctx err;
  assert_int_equal(xf_colstats_compute(dir, &st, &err), XF_EINVAL);
  assert_string_equal(err.file, dir);
  assert_non_null(strstr(err.msg, "has no schema.json"));
  assert_null(st.cols);

  /* A schema without numeric columns has nothing to pool. */
  snprintf(path, sizeof(path), "%s/schema.json", dir);
  write_text(path, "{\"label\": {\"column\": \"label\", \"type\": \"integer\"}, \"columns\": "
                   "[{\"name\": \"a\", \"type\": \"categorical\", \"vocabulary\": [\"1\"]}, "
                   "{\"name\": \"b\", \"type\": \"ignore\"}]}");
  assert_int_equal(xf_colstats_compute(dir, &st, &err), XF_EINVAL);
  assert_string_equal(err.field, "columns");
  assert_non_null(strstr(err.msg, "no numeric column"));

  /* The loader's errors come through, naming the file. */
  write_text(path, schema_text);
  assert_int_not_equal(xf_colstats_compute(dir, &st, &err), XF_OK);
  assert_non_null(strstr(err.file, "train.csv"));
  assert_null(st.cols);
}

/* Welford's update keeps a tiny spread on a large offset, where the sum of
 * squares in double loses every digit. */
static void statistics_are_stable_on_large_offsets(void **state) {
  scratch *s = *state;
  char dir[512], path[600];
  snprintf(dir, sizeof(dir), "%s/offset", s->dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof(path), "%s/schema.json", dir);
  write_text(path, "{\"label\": {\"column\": \"label\", \"type\": \"integer\"}, \"columns\": "
                   "[{\"name\": \"v\", \"type\": \"numeric\", \"normalize\": \"train\"}]}");
  /* 16777216 + {0, 2, 4, 6}: exact floats, mean 16777219, M2 20. */
  snprintf(path, sizeof(path), "%s/train.csv", dir);
  write_text(path, "v,label\n16777216,0\n16777218,1\n16777220,0\n16777222,1\n");
  xf_colstats st;
  xf_errctx err;
  assert_int_equal(xf_colstats_compute(dir, &st, &err), XF_OK);
  assert_true(st.cols[0].mean == 16777219.0);
  assert_true(st.cols[0].m2 == 20.0);
  xf_colstats_free(&st);
}

/* Every allocation that fails is reported as XF_ENOMEM and leaves nothing
 * behind (the sanitizer run finds leaks); with enough allowed, each call
 * succeeds. */
static void statistics_free_everything_when_allocations_fail(void **state) {
  scratch *s = *state;
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/site", s->dir);
  write_site_dir(dir, 0, 20);
  xf_colstats st[2], pooled;
  xf_errctx err;
  xf_err rc = XF_ENOMEM;
  long failures = 0;
  for (long n = 0; n < 200 && rc != XF_OK; n++) {
    xf_alloc_fail_after(n);
    rc = xf_colstats_compute(dir, &st[0], &err);
    xf_alloc_fail_reset();
    if (rc != XF_OK) {
      assert_int_equal(rc, XF_ENOMEM);
      assert_null(st[0].cols);
      failures++;
    }
  }
  assert_int_equal(rc, XF_OK);
  snprintf(st[0].dataset, sizeof(st[0].dataset), "d");
  snprintf(st[0].site, sizeof(st[0].site), "a");
  char *json = NULL;
  assert_int_equal(xf_colstats_format(&st[0], &json, &err), XF_OK);
  rc = XF_ENOMEM;
  for (long n = 0; n < 200 && rc != XF_OK; n++) {
    xf_alloc_fail_after(n);
    rc = xf_colstats_parse(json, strlen(json), "b.json", &st[1], &err);
    xf_alloc_fail_reset();
    if (rc != XF_OK) {
      assert_int_equal(rc, XF_ENOMEM);
      assert_null(st[1].cols);
      failures++;
    }
  }
  assert_int_equal(rc, XF_OK);
  xf_free(json);
  snprintf(st[1].site, sizeof(st[1].site), "b");
  const char *names[2] = {"a.json", "b.json"};
  rc = XF_ENOMEM;
  for (long n = 0; n < 200 && rc != XF_OK; n++) {
    xf_alloc_fail_after(n);
    rc = xf_colstats_merge(st, names, 2, &pooled, &err);
    xf_alloc_fail_reset();
    if (rc != XF_OK) {
      assert_int_equal(rc, XF_ENOMEM);
      assert_null(pooled.cols);
      failures++;
    }
  }
  assert_int_equal(rc, XF_OK);
  assert_int_equal(pooled.cols[0].count, 40);
  /* Each of the three failed at least once before it succeeded. */
  assert_true(failures >= 3);
  xf_colstats_free(&pooled);
  xf_colstats_free(&st[0]);
  xf_colstats_free(&st[1]);
}

#define T(f) cmocka_unit_test_setup_teardown(f, scratch_setup, scratch_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(pooled_statistics_equal_one_pass_over_the_union),
      T(statistics_file_reads_back_to_the_same_numbers),
      T(statistics_file_reader_refuses_malformed_files),
      T(merge_refuses_what_cannot_be_pooled),
      T(pooled_schema_gives_train_columns_the_pooled_statistics),
      T(compute_refuses_datasets_without_a_schema),
      T(statistics_are_stable_on_large_offsets),
      T(statistics_free_everything_when_allocations_fail),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
