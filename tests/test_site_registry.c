/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the site's local state: the dataset registry (round trip,
 * refusals, content digests and verification, allocation failures), the
 * privacy-budget ledger, and the strict site.json reader, on small CSV
 * datasets in a scratch directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>
#include <sqlite3.h>

#include "base/alloc.h"
#include "privacy/accountant.h"
#include "site/registry.h"

typedef struct scratch {
  char dir[512];
  char db[600];
  xf_site_registry *reg;
} scratch;

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

static const char *path_in(const scratch *s, const char *name) {
  static char bufs[8][700];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof(bufs[0]), "%s/%s", s->dir, name);
  return b;
}

/* A CSV dataset directory dir (under the scratch dir) with 3 features and 3
 * classes; `salt` changes one value so that two directories differ. */
static const char *make_csv(const scratch *s, const char *dir, int salt) {
  const char *d = path_in(s, dir);
  assert_int_equal(mkdir(d, 0755), 0);
  char path[800], text[512];
  snprintf(path, sizeof(path), "%s/train.csv", d);
  snprintf(text, sizeof(text),
           "x,y,z,label\n1,0,0,0\n0,1,0,1\n0,0,1,2\n1,1,0,0\n0,1,1,1\n%d,0,1,2\n", salt);
  assert_int_equal(write_file(path, text), 0);
  snprintf(path, sizeof(path), "%s/test.csv", d);
  assert_int_equal(write_file(path, "x,y,z,label\n1,0,0,0\n0,1,0,1\n0,0,1,2\n"), 0);
  return d;
}

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s || xf_test_mkdtemp(s->dir, sizeof(s->dir), "site-registry") != 0) {
    free(s);
    return -1;
  }
  snprintf(s->db, sizeof(s->db), "%s/site.db", s->dir);
  xf_errctx err;
  if (xf_site_registry_open(s->db, &s->reg, &err) != XF_OK) {
    xf_test_remove_tree(s->dir);
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  xf_alloc_fail_reset();
  if (!s) return 0;
  xf_site_registry_close(s->reg);
  xf_test_remove_tree(s->dir);
  free(s);
  return 0;
}

static size_t count_datasets(scratch *s) {
  xf_site_dataset *list;
  size_t n;
  xf_errctx err;
  assert_int_equal(xf_site_registry_list(s->reg, &list, &n, &err), XF_OK);
  xf_site_dataset_list_free(list, n);
  return n;
}

/* ---- round trip ---------------------------------------------------------------- */

static void added_dataset_reads_back_with_shape_tags_and_budget(void **state) {
  scratch *s = *state;
  const char *dir = make_csv(s, "clinic", 5);
  const char *tags[] = {"oncology", "eu-only", "oncology"};
  xf_site_dataset_spec spec = {.name = "clinic_a",
                               .path = dir,
                               .classification = XF_SITE_CLASS_CONFIDENTIAL,
                               .tags = tags,
                               .n_tags = 3,
                               .has_budget = true,
                               .budget_epsilon = 4.5};
  xf_site_dataset d;
  xf_errctx err;
  assert_int_equal(xf_site_registry_add(s->reg, &spec, &d, &err), XF_OK);
  xf_site_dataset g;
  assert_int_equal(xf_site_registry_get(s->reg, "clinic_a", &g, &err), XF_OK);
  char abs_dir[PATH_MAX];
  assert_non_null(realpath(dir, abs_dir)); /* the registry keeps absolute paths */
  const xf_site_dataset *both[] = {&d, &g};
  for (int i = 0; i < 2; i++) {
    const xf_site_dataset *r = both[i];
    assert_string_equal(r->name, "clinic_a");
    assert_string_equal(r->path, abs_dir);
    assert_int_equal(r->layout, XF_LAYOUT_CSV);
    assert_int_equal(r->classification, XF_SITE_CLASS_CONFIDENTIAL);
    assert_int_equal(r->train_records, 6);
    assert_int_equal(r->test_records, 3);
    assert_int_equal(r->classes, 3);
    assert_int_equal(r->features, 3);
    assert_int_equal(r->h, 1);
    assert_int_equal(r->w, 1);
    assert_int_equal(r->c, 3);
    assert_int_equal(r->n_tags, 2); /* repeats recorded once, sorted */
    assert_string_equal(r->tags[0], "eu-only");
    assert_string_equal(r->tags[1], "oncology");
    assert_true(r->has_budget);
    assert_true(r->budget_epsilon == 4.5);
    assert_int_equal(strlen(r->digest), 64);
    assert_true(r->registered_at > 1600000000);
  }
  assert_string_equal(d.digest, g.digest);
  assert_int_equal(d.registered_at, g.registered_at);
  xf_site_dataset_free(&d);
  xf_site_dataset_free(&g);
}

static void list_tag_budget_and_remove_round_trip(void **state) {
  scratch *s = *state;
  xf_errctx err;
  xf_site_dataset_spec a = {.name = "zeta", .path = make_csv(s, "z", 1)};
  xf_site_dataset_spec b = {.name = "alpha", .path = make_csv(s, "a", 2),
                            .classification = XF_SITE_CLASS_PUBLIC};
  assert_int_equal(xf_site_registry_add(s->reg, &a, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_add(s->reg, &b, NULL, &err), XF_OK);

  xf_site_dataset *list;
  size_t n;
  assert_int_equal(xf_site_registry_list(s->reg, &list, &n, &err), XF_OK);
  assert_int_equal(n, 2);
  assert_string_equal(list[0].name, "alpha"); /* name order */
  assert_string_equal(list[1].name, "zeta");
  assert_int_equal(list[1].classification, XF_SITE_CLASS_INTERNAL); /* the default */
  assert_false(list[1].has_budget);
  assert_int_equal(list[1].n_tags, 0);
  xf_site_dataset_list_free(list, n);

  assert_int_equal(xf_site_registry_tag_add(s->reg, "zeta", "imaging", &err), XF_OK);
  assert_int_equal(xf_site_registry_tag_add(s->reg, "zeta", "imaging", &err), XF_OK);
  assert_int_equal(xf_site_registry_tag_add(s->reg, "alpha", "imaging", &err), XF_OK);
  assert_int_equal(xf_site_registry_tag_add(s->reg, "zeta", "research_ok", &err), XF_OK);
  assert_int_equal(xf_site_registry_tag_remove(s->reg, "zeta", "nope", &err), XF_ENOENT);
  assert_int_equal(xf_site_registry_tag_add(s->reg, "zeta", "Bad Tag", &err), XF_EINVAL);
  assert_int_equal(xf_site_registry_tag_add(s->reg, "nobody", "imaging", &err), XF_ENOENT);
  assert_int_equal(xf_site_registry_tag_remove(s->reg, "zeta", "imaging", &err), XF_OK);
  double eps = 2.0, bad = -1.0;
  assert_int_equal(xf_site_registry_set_budget(s->reg, "zeta", &eps, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_set_budget(s->reg, "zeta", &bad, NULL, &err), XF_ERANGE);
  assert_string_equal(err.field, "budget_epsilon");

  xf_site_dataset d;
  assert_int_equal(xf_site_registry_get(s->reg, "zeta", &d, &err), XF_OK);
  assert_int_equal(d.n_tags, 1);
  assert_string_equal(d.tags[0], "research_ok");
  assert_true(d.has_budget && d.budget_epsilon == 2.0);
  xf_site_dataset_free(&d);
  assert_int_equal(xf_site_registry_set_budget(s->reg, "zeta", NULL, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_get(s->reg, "zeta", &d, &err), XF_OK);
  assert_false(d.has_budget);
  xf_site_dataset_free(&d);

  /* The registry is the database: a fresh connection sees the same. */
  xf_site_registry_close(s->reg);
  assert_int_equal(xf_site_registry_open(s->db, &s->reg, &err), XF_OK);
  assert_int_equal(xf_site_registry_remove(s->reg, "zeta", &err), XF_OK);
  assert_int_equal(xf_site_registry_remove(s->reg, "zeta", &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "zeta"));
  assert_int_equal(xf_site_registry_get(s->reg, "zeta", &d, &err), XF_ENOENT);
  assert_int_equal(count_datasets(s), 1);
  /* The data itself is left alone. */
  assert_int_equal(access(path_in(s, "z/train.csv"), R_OK), 0);
}

/* ---- refusals ------------------------------------------------------------------------ */

static void invalid_data_is_refused_with_the_loaders_message_and_nothing_recorded(void **state) {
  scratch *s = *state;
  const char *dir = make_csv(s, "broken", 1);
  char path[800];
  snprintf(path, sizeof(path), "%s/test.csv", dir);
  assert_int_equal(write_file(path, "x,y,z,label\n1,0,0,0\n0,abc,0,1\n"), 0);
  xf_site_dataset_spec spec = {.name = "broken", .path = dir};
  xf_site_dataset d;
  xf_errctx err;
  assert_int_equal(xf_site_registry_add(s->reg, &spec, &d, &err), XF_EFORMAT);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.field, "line 3"));
  assert_non_null(strstr(err.msg, "'abc' is not a number"));
  assert_null(d.path);
  assert_int_equal(count_datasets(s), 0);

  /* A directory with neither layout, and one that does not exist. */
  assert_int_equal(mkdir(path_in(s, "empty"), 0755), 0);
  spec.path = path_in(s, "empty");
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "train.csv"));
  spec.path = path_in(s, "absent");
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_ENOENT);
  assert_string_equal(err.file, spec.path);
  assert_int_equal(count_datasets(s), 0);
}

static void duplicate_name_is_refused_and_the_first_stays(void **state) {
  scratch *s = *state;
  xf_errctx err;
  xf_site_dataset_spec a = {.name = "shared", .path = make_csv(s, "one", 1)};
  xf_site_dataset_spec b = {.name = "shared", .path = make_csv(s, "two", 2)};
  assert_int_equal(xf_site_registry_add(s->reg, &a, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_add(s->reg, &b, NULL, &err), XF_EEXISTS);
  assert_non_null(strstr(err.msg, "already registered"));
  xf_site_dataset d;
  assert_int_equal(xf_site_registry_get(s->reg, "shared", &d, &err), XF_OK);
  char abs_dir[PATH_MAX];
  assert_non_null(realpath(a.path, abs_dir));
  assert_string_equal(d.path, abs_dir);
  xf_site_dataset_free(&d);
  assert_int_equal(count_datasets(s), 1);
}

static void invalid_names_tags_and_budgets_are_refused_before_reading_data(void **state) {
  scratch *s = *state;
  xf_errctx err;
  const char *dir = make_csv(s, "ok", 1);
  static const char *const bad_names[] = {"", "Upper", "has space", "dot.ted", "slash/x",
                                          "0123456789012345678901234567890123456789012345678901234567890123"};
  for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
    xf_site_dataset_spec spec = {.name = bad_names[i], .path = dir};
    assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_EINVAL);
    assert_string_equal(err.field, "dataset name");
  }
  const char *tags[] = {"fine", "NotFine"};
  xf_site_dataset_spec spec = {.name = "ok", .path = dir, .tags = tags, .n_tags = 2};
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_EINVAL);
  assert_string_equal(err.field, "tag");
  assert_non_null(strstr(err.msg, "NotFine"));
  spec.n_tags = 0;
  spec.has_budget = true;
  spec.budget_epsilon = 0.0;
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_ERANGE);
  assert_int_equal(count_datasets(s), 0);
  assert_true(xf_name_valid("a-b_9"));
  assert_false(xf_name_valid("_x"));
  assert_true(xf_label_valid("eu-berlin"));
  assert_false(xf_label_valid("-eu"));
  assert_false(xf_label_valid("eu_west"));
  xf_site_class c;
  assert_int_equal(xf_site_class_parse("restricted", &c, &err), XF_OK);
  assert_int_equal(c, XF_SITE_CLASS_RESTRICTED);
  assert_int_equal(xf_site_class_parse("secret", &c, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "confidential"));
}

/* ---- digests and verification ------------------------------------------------------ */

static void digest_depends_on_content_not_on_where_the_data_is(void **state) {
  scratch *s = *state;
  xf_errctx err;
  xf_digest a, b, c;
  const char *one = make_csv(s, "one", 1), *two = make_csv(s, "two", 1);
  const char *other = make_csv(s, "three", 7);
  assert_int_equal(xf_site_data_digest(one, XF_LAYOUT_CSV, &a, &err), XF_OK);
  assert_int_equal(xf_site_data_digest(two, XF_LAYOUT_CSV, &b, &err), XF_OK);
  assert_int_equal(xf_site_data_digest(other, XF_LAYOUT_CSV, &c, &err), XF_OK);
  assert_memory_equal(a.bytes, b.bytes, sizeof(a.bytes));
  assert_memory_not_equal(a.bytes, c.bytes, sizeof(a.bytes));
  /* dataset.json is part of what the loader reads, so part of the digest. */
  char path[800];
  snprintf(path, sizeof(path), "%s/dataset.json", two);
  assert_int_equal(write_file(path, "{\"classes\": 3}\n"), 0);
  assert_int_equal(xf_site_data_digest(two, XF_LAYOUT_CSV, &b, &err), XF_OK);
  assert_memory_not_equal(a.bytes, b.bytes, sizeof(a.bytes));
  /* A missing file is named. */
  snprintf(path, sizeof(path), "%s/test.csv", one);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(xf_site_data_digest(one, XF_LAYOUT_CSV, &a, &err), XF_ENOENT);
  assert_string_equal(err.file, path);
}

static void verify_reports_ok_then_changed_and_missing(void **state) {
  scratch *s = *state;
  xf_errctx err;
  const char *d1 = make_csv(s, "d1", 1), *d2 = make_csv(s, "d2", 2), *d3 = make_csv(s, "d3", 3);
  xf_site_dataset_spec a = {.name = "a", .path = d1}, b = {.name = "b", .path = d2},
                       c = {.name = "c", .path = d3};
  assert_int_equal(xf_site_registry_add(s->reg, &a, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_add(s->reg, &b, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_add(s->reg, &c, NULL, &err), XF_OK);
  xf_site_verify_result *res;
  size_t n;
  assert_int_equal(xf_site_registry_verify(s->reg, NULL, &res, &n, &err), XF_OK);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(res[i].state, XF_SITE_DATA_OK);
    assert_string_equal(res[i].current, res[i].registered);
  }
  xf_free(res);

  char path[800];
  snprintf(path, sizeof(path), "%s/train.csv", d1); /* one value changed, same size */
  assert_int_equal(
      write_file(path, "x,y,z,label\n1,0,0,0\n0,1,0,1\n0,0,1,2\n1,1,0,0\n0,1,1,1\n9,0,1,2\n"), 0);
  snprintf(path, sizeof(path), "%s/test.csv", d2);
  assert_int_equal(unlink(path), 0);
  xf_test_remove_tree(d3);

  assert_int_equal(xf_site_registry_verify(s->reg, NULL, &res, &n, &err), XF_OK);
  assert_int_equal(n, 3);
  assert_string_equal(res[0].name, "a");
  assert_int_equal(res[0].state, XF_SITE_DATA_CHANGED);
  assert_string_not_equal(res[0].current, res[0].registered);
  assert_int_equal(res[1].state, XF_SITE_DATA_MISSING);
  assert_non_null(strstr(res[1].detail, "test.csv"));
  assert_string_equal(res[1].current, "");
  assert_int_equal(res[2].state, XF_SITE_DATA_MISSING);
  assert_non_null(strstr(res[2].detail, d3));
  xf_free(res);

  assert_int_equal(xf_site_registry_verify(s->reg, "b", &res, &n, &err), XF_OK);
  assert_int_equal(n, 1);
  assert_int_equal(res[0].state, XF_SITE_DATA_MISSING);
  xf_free(res);
  assert_int_equal(xf_site_registry_verify(s->reg, "nobody", &res, &n, &err), XF_ENOENT);
  assert_null(res);
}

/* ---- site.json ------------------------------------------------------------------------ */

static const char *FULL_CONFIG =
    "{\"site\": \"eu-berlin\", \"region\": \"eu\", \"coordinator\": \"agg-eu.example.org:7443\",\n"
    " \"cert\": \"eu-berlin.crt\", \"key\": \"eu-berlin.key\", \"ca\": \"/etc/xfed/ca.crt\",\n"
    " \"crl\": \"crl.pem\", \"data_root\": \"/srv/data\", \"threads\": 8, \"backend\": \"cpu\"}\n";

static void full_config_parses_and_formats_back_to_the_same(void **state) {
  (void)state;
  xf_site_config c, back;
  xf_errctx err;
  assert_int_equal(xf_site_config_parse(FULL_CONFIG, strlen(FULL_CONFIG), "site.json", &c, &err),
                   XF_OK);
  assert_string_equal(c.site, "eu-berlin");
  assert_string_equal(c.region, "eu");
  assert_string_equal(c.coordinator_host, "agg-eu.example.org");
  assert_int_equal(c.coordinator_port, 7443);
  assert_string_equal(c.cert, "eu-berlin.crt");
  assert_string_equal(c.ca, "/etc/xfed/ca.crt");
  assert_string_equal(c.data_root, "/srv/data");
  assert_int_equal(c.threads, 8);
  assert_string_equal(c.backend, "cpu");
  char *text;
  assert_int_equal(xf_site_config_format(&c, &text, &err), XF_OK);
  assert_int_equal(xf_site_config_parse(text, strlen(text), "again", &back, &err), XF_OK);
  xf_free(text);
  assert_memory_equal(&c, &back, sizeof(c));

  const char *minimal = "{\"site\":\"s1\",\"region\":\"us\",\"coordinator\":\"[::1]:9000\"}";
  assert_int_equal(xf_site_config_parse(minimal, strlen(minimal), "m", &c, &err), XF_OK);
  assert_string_equal(c.coordinator_host, "::1");
  assert_int_equal(c.coordinator_port, 9000);
  assert_string_equal(c.backend, "auto");
  assert_int_equal(c.threads, 0);
  assert_string_equal(c.cert, "");
}

typedef struct bad_config {
  const char *text;
  const char *field; /* what err.field must be */
  const char *says;  /* what err.msg must contain */
} bad_config;

static void config_errors_name_the_field(void **state) {
  (void)state;
#define BASE "\"site\":\"s1\",\"region\":\"eu\",\"coordinator\":\"h:1\""
  static const bad_config cases[] = {
      {"{" BASE ",\"sight\":1}", "sight", "unknown field"},
      {"{" BASE ",\"threads\":\"4\"}", "threads", "expected an integer, got a string"},
      {"{" BASE ",\"threads\":2000}", "threads", "between 0"},
      {"{" BASE ",\"cert\":7}", "cert", "expected a string"},
      {"{" BASE ",\"backend\":\"tpu\"}", "backend", "auto, cpu or cuda"},
      {"{\"site\":\"s1\",\"region\":\"eu\",\"coordinator\":\"nohost\"}", "coordinator",
       "HOST:PORT"},
      {"{\"site\":\"s1\",\"region\":\"eu\",\"coordinator\":\"h:70000\"}", "coordinator", "port"},
      {"{\"site\":\"s1\",\"region\":\"eu\",\"coordinator\":\"h:\"}", "coordinator", "port"},
      {"{\"site\":\"s1\",\"region\":\"eu\",\"coordinator\":\"b@d:80\"}", "coordinator", "host"},
      {"{\"site\":\"s1\",\"region\":\"eu\",\"coordinator\":\"::1:80\"}", "coordinator",
       "brackets"},
      {"{\"site\":\"s1\",\"region\":\"eu\"}", "coordinator", "required"},
      {"{\"site\":\"S 1\",\"region\":\"eu\",\"coordinator\":\"h:1\"}", "site", "not a site name"},
      {"{\"site\":\"s1\",\"region\":7,\"coordinator\":\"h:1\"}", "region", "expected a string"},
      {"{" BASE ",\"site\":\"s2\"}", "line 1, column", "duplicate"},
      {"[1, 2]", "", "expected a JSON object"},
      {"{\"site\": ", "line 1, column", "not valid JSON"},
  };
#undef BASE
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    xf_site_config c;
    xf_errctx err;
    xf_err rc = xf_site_config_parse(cases[i].text, strlen(cases[i].text), "cfg.json", &c, &err);
    if (rc == XF_OK) fail_msg("case %zu (%s) parsed", i, cases[i].text);
    assert_int_equal(err.code, rc);
    assert_string_equal(err.file, "cfg.json");
    if (strncmp(err.field, cases[i].field, strlen(cases[i].field)) != 0 ||
        (!cases[i].field[0] && err.field[0]))
      fail_msg("case %zu (%s): field '%s', expected '%s'", i, cases[i].text, err.field,
               cases[i].field);
    if (!strstr(err.msg, cases[i].says))
      fail_msg("case %zu (%s): message '%s' lacks '%s'", i, cases[i].text, err.msg,
               cases[i].says);
    assert_string_equal(c.site, ""); /* zeroed on failure */
  }
}

static void config_file_that_is_missing_says_how_to_make_it(void **state) {
  scratch *s = *state;
  xf_site_config c;
  xf_errctx err;
  assert_int_equal(xf_site_config_load(path_in(s, "site.json"), &c, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "xfed-site init"));
  assert_int_equal(write_file(path_in(s, "site.json"), FULL_CONFIG), 0);
  assert_int_equal(xf_site_config_load(path_in(s, "site.json"), &c, &err), XF_OK);
  assert_string_equal(c.site, "eu-berlin");
}

/* ---- allocation failures ------------------------------------------------------------------ */

/* One pass of the whole API on a fresh database; returns the first failure. */
static xf_err api_pass(scratch *s, const char *db, const char *data, xf_errctx *err) {
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_registry_open(db, &reg, err);
  if (rc != XF_OK) {
    assert_null(reg);
    return rc;
  }
  const char *tags[] = {"t1", "t2"};
  xf_site_dataset_spec spec = {.name = "d", .path = data, .tags = tags, .n_tags = 2};
  xf_site_dataset d = {0};
  xf_site_dataset *list = NULL;
  xf_site_verify_result *res = NULL;
  size_t n = 0;
  double eps = 1.5;
  if ((rc = xf_site_registry_add(reg, &spec, &d, err)) != XF_OK) {
    assert_null(d.path);
    goto out;
  }
  xf_site_dataset_free(&d);
  if ((rc = xf_site_registry_list(reg, &list, &n, err)) != XF_OK) goto out;
  assert_int_equal(n, 1);
  xf_site_dataset_list_free(list, n);
  if ((rc = xf_site_registry_get(reg, "d", &d, err)) != XF_OK) goto out;
  assert_int_equal(d.n_tags, 2);
  xf_site_dataset_free(&d);
  if ((rc = xf_site_registry_tag_add(reg, "d", "t3", err)) != XF_OK) goto out;
  if ((rc = xf_site_registry_tag_remove(reg, "d", "t1", err)) != XF_OK) goto out;
  if ((rc = xf_site_registry_set_budget(reg, "d", &eps, NULL, err)) != XF_OK) goto out;
  if ((rc = xf_site_registry_verify(reg, NULL, &res, &n, err)) != XF_OK) goto out;
  assert_int_equal(res[0].state, XF_SITE_DATA_OK);
  xf_free(res);
  char *text = NULL;
  xf_site_config c;
  const char *cfg = "{\"site\":\"s1\",\"region\":\"eu\",\"coordinator\":\"h:1\"}";
  if ((rc = xf_site_config_parse(cfg, strlen(cfg), "c", &c, err)) != XF_OK) goto out;
  if ((rc = xf_site_config_format(&c, &text, err)) != XF_OK) goto out;
  xf_free(text);
  rc = xf_site_registry_remove(reg, "d", err);
out:
  xf_site_registry_close(reg);
  (void)s;
  return rc;
}

static void every_registry_call_survives_allocation_failures(void **state) {
  scratch *s = *state;
  const char *data = make_csv(s, "data", 1);
  xf_err rc = XF_ENOMEM;
  long n = 0;
  for (; rc == XF_ENOMEM && n < 5000; n++) {
    char db[700];
    snprintf(db, sizeof(db), "%s/alloc-%ld.db", s->dir, n);
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_alloc_fail_after(n);
    rc = api_pass(s, db, data, &err);
    xf_alloc_fail_reset();
    if (rc == XF_ENOMEM) {
      assert_int_equal(err.code, XF_ENOMEM);
      /* Whatever failed left the database consistent: it opens, and the
       * dataset is either fully there (with its tags) or absent. */
      xf_site_registry *reg;
      assert_int_equal(xf_site_registry_open(db, &reg, &err), XF_OK);
      xf_site_dataset d;
      xf_err g = xf_site_registry_get(reg, "d", &d, &err);
      assert_true(g == XF_OK || g == XF_ENOENT);
      if (g == XF_OK) {
        assert_true(d.n_tags >= 1);
        assert_int_equal(d.train_records, 6);
      }
      xf_site_dataset_free(&d);
      xf_site_registry_close(reg);
    } else if (rc != XF_OK) {
      fail_msg("allocation %ld: %s (%s)", n, xf_err_name(rc), err.msg);
    }
  }
  assert_int_equal(rc, XF_OK);
  print_message("registry API: %ld allocation failure points walked\n", n - 1);
}


/* The privacy ledger: charges compose in RDP exactly as one accountant call
 * over all their steps, a repeated release is not charged twice, other jobs
 * count towards the dataset but not towards the job, rows survive the
 * dataset's removal, and the table refuses edits. */
static void ledger_composes_charges_and_is_append_only(void **state) {
  scratch *s = *state;
  xf_errctx err;
  xf_errctx_clear(&err);
  double e = 0;
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "alpha", NULL, NULL, 1e-5, &e, &err), XF_OK);
  assert_true(e == 0);

  xf_privacy_charge c = {.sampling_rate = 0.01, .noise_multiplier = 1.1, .steps = 100};
  assert_int_equal(xf_ledger_charge(xf_site_registry_db(s->reg), "alpha", "7", 1, 1, &c, 1000, &err), XF_OK);
  assert_int_equal(xf_ledger_charge(xf_site_registry_db(s->reg), "alpha", "7", 1, 1, &c, 1001, &err), XF_OK);
  assert_int_equal(xf_ledger_charge(xf_site_registry_db(s->reg), "alpha", "7", 2, 1, &c, 1002, &err), XF_OK);
  double want, order;
  assert_int_equal(xf_dp_epsilon_sgm(0.01, 1.1, 200, 1e-5, NULL, 0, XF_DP_CONVERSION_IMPROVED,
                                     &want, &order, &err),
                   XF_OK);
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "alpha", "7", NULL, 1e-5, &e, &err), XF_OK);
  assert_float_equal(e, want, 1e-9 * want);
  /* with a prospective third round */
  assert_int_equal(xf_dp_epsilon_sgm(0.01, 1.1, 300, 1e-5, NULL, 0, XF_DP_CONVERSION_IMPROVED,
                                     &want, &order, &err),
                   XF_OK);
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "alpha", "7", &c, 1e-5, &e, &err), XF_OK);
  assert_float_equal(e, want, 1e-9 * want);

  /* another job on the same dataset: the dataset's total grows, job 7's not */
  assert_int_equal(xf_ledger_charge(xf_site_registry_db(s->reg), "alpha", "8", 1, 1, &c, 1003, &err), XF_OK);
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "alpha", NULL, NULL, 1e-5, &e, &err), XF_OK);
  assert_float_equal(e, want, 1e-9 * want);
  double job7;
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "alpha", "7", NULL, 1e-5, &job7, &err), XF_OK);
  assert_true(job7 < e);
  /* another dataset is untouched */
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "beta", NULL, NULL, 1e-5, &e, &err), XF_OK);
  assert_true(e == 0);
  /* a release without noise has no bound */
  xf_privacy_charge bare = {.sampling_rate = 1, .noise_multiplier = 0, .steps = 1};
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "alpha", NULL, &bare, 1e-5, &e, &err), XF_OK);
  assert_true(isinf(e));
  xf_privacy_charge bad = {.sampling_rate = 1.5, .noise_multiplier = 1, .steps = 1};
  assert_int_equal(xf_ledger_charge(xf_site_registry_db(s->reg), "alpha", "7", 3, 1, &bad, 1, &err), XF_EINVAL);

  xf_ledger_job *jobs = NULL;
  size_t n = 0;
  assert_int_equal(xf_site_ledger_jobs(s->reg, "alpha", &jobs, &n, &err), XF_OK);
  assert_int_equal(n, 2);
  assert_string_equal(jobs[0].job, "7");
  assert_int_equal(jobs[0].rounds, 2);
  assert_int_equal(jobs[0].steps, 200);
  assert_float_equal(jobs[0].epsilon, job7, 1e-9 * job7);
  assert_string_equal(jobs[1].job, "8");
  xf_free(jobs);

  /* append-only, whatever connection tries */
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(s->db, &db), SQLITE_OK);
  assert_int_not_equal(sqlite3_exec(db, "UPDATE privacy_ledger SET steps = 1", NULL, NULL, NULL),
                       SQLITE_OK);
  assert_int_not_equal(sqlite3_exec(db, "DELETE FROM privacy_ledger", NULL, NULL, NULL),
                       SQLITE_OK);
  sqlite3_close(db);
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "alpha", "7", NULL, 1e-5, &e, &err), XF_OK);
  assert_float_equal(e, job7, 1e-9 * job7);
}

/* Budgets carry their delta; the ledger outlives a dataset's registration. */
static void budget_delta_and_ledger_outlive_the_registration(void **state) {
  scratch *s = *state;
  xf_errctx err;
  xf_errctx_clear(&err);
  const char *dir = make_csv(s, "d1", 7);
  xf_site_dataset_spec spec = {.name = "d", .path = dir};
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_OK);
  xf_site_dataset d;
  assert_int_equal(xf_site_registry_get(s->reg, "d", &d, &err), XF_OK);
  assert_true(d.budget_delta == XF_SITE_BUDGET_DELTA_DEFAULT);
  xf_site_dataset_free(&d);
  double eps = 3, delta = 1e-6, bad_delta = 1;
  assert_int_equal(xf_site_registry_set_budget(s->reg, "d", &eps, &bad_delta, &err), XF_ERANGE);
  assert_string_equal(err.field, "budget_delta");
  assert_int_equal(xf_site_registry_set_budget(s->reg, "d", &eps, &delta, &err), XF_OK);
  assert_int_equal(xf_site_registry_get(s->reg, "d", &d, &err), XF_OK);
  assert_true(d.has_budget && d.budget_epsilon == 3 && d.budget_delta == 1e-6);
  xf_site_dataset_free(&d);
  /* a new cap without --delta keeps the delta */
  eps = 4;
  assert_int_equal(xf_site_registry_set_budget(s->reg, "d", &eps, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_get(s->reg, "d", &d, &err), XF_OK);
  assert_true(d.budget_epsilon == 4 && d.budget_delta == 1e-6);
  xf_site_dataset_free(&d);

  xf_privacy_charge c = {.sampling_rate = 0.02, .noise_multiplier = 1.0, .steps = 50};
  assert_int_equal(xf_ledger_charge(xf_site_registry_db(s->reg), "d", "1", 1, 1, &c, 5, &err), XF_OK);
  double before, after;
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "d", NULL, NULL, 1e-6, &before, &err), XF_OK);
  assert_int_equal(xf_site_registry_remove(s->reg, "d", &err), XF_OK);
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_OK);
  assert_int_equal(xf_ledger_epsilon(xf_site_registry_db(s->reg), "d", NULL, NULL, 1e-6, &after, &err), XF_OK);
  assert_true(before > 0 && after == before);
}

/* Names a job spec's data.dataset or data.tags (and a policy) cannot write
 * would register a dataset no job can use: the same rule holds here. */
static void trainer_reads_back_and_bad_declarations_are_refused(void **state) {
  scratch *s = *state;
  xf_errctx err;
  xf_errctx_clear(&err);
  const char *dir = make_csv(s, "t1", 7);
  xf_site_dataset_spec spec = {.name = "native", .path = dir};
  xf_site_dataset d;
  assert_int_equal(xf_site_registry_add(s->reg, &spec, &d, &err), XF_OK);
  assert_null(d.trainer);
  xf_site_dataset_free(&d);
  spec = (xf_site_dataset_spec){.name = "ext", .path = dir, .trainer = "/opt/t/train.py",
                                .trainer_timeout = 90, .trainer_dp_declared = true};
  assert_int_equal(xf_site_registry_add(s->reg, &spec, &d, &err), XF_OK);
  assert_string_equal(d.trainer, "/opt/t/train.py");
  xf_site_dataset_free(&d);
  assert_int_equal(xf_site_registry_get(s->reg, "ext", &d, &err), XF_OK);
  assert_string_equal(d.trainer, "/opt/t/train.py");
  assert_int_equal(d.trainer_timeout, 90);
  assert_true(d.trainer_dp_declared);
  xf_site_dataset_free(&d);
  assert_int_equal(xf_site_registry_get(s->reg, "native", &d, &err), XF_OK);
  assert_null(d.trainer);
  assert_false(d.trainer_dp_declared);
  xf_site_dataset_free(&d);

  spec = (xf_site_dataset_spec){.name = "rel", .path = dir, .trainer = "train.py"};
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "not an absolute path"));
  spec = (xf_site_dataset_spec){.name = "rel", .path = dir, .trainer_dp_declared = true};
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "needs a trainer"));
  spec = (xf_site_dataset_spec){.name = "rel", .path = dir, .trainer = "/t", .trainer_timeout = 604801};
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_ERANGE);
  assert_int_equal(xf_site_registry_get(s->reg, "rel", &d, &err), XF_ENOENT);
}

static void dataset_names_and_tags_follow_the_rule_of_job_specs_and_policies(void **state) {
  scratch *s = *state;
  xf_errctx err;
  const char *dir = make_csv(s, "ok", 1);
  static const char *const bad[] = {"-", "-x", "_x", "_"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_false(xf_name_valid(bad[i]));
    xf_site_dataset_spec spec = {.name = bad[i], .path = dir};
    assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_EINVAL);
    assert_string_equal(err.field, "dataset name");
    assert_non_null(strstr(err.msg, bad[i]));
    assert_non_null(strstr(err.msg, "starting with a letter or digit"));
    const char *tags[] = {bad[i]};
    xf_site_dataset_spec tagged = {.name = "ok", .path = dir, .tags = tags, .n_tags = 1};
    assert_int_equal(xf_site_registry_add(s->reg, &tagged, NULL, &err), XF_EINVAL);
    assert_string_equal(err.field, "tag");
  }
  assert_int_equal(count_datasets(s), 0);
  const char *tags[] = {"x_1-b"};
  xf_site_dataset_spec spec = {.name = "0a-b_c", .path = dir, .tags = tags, .n_tags = 1};
  assert_int_equal(xf_site_registry_add(s->reg, &spec, NULL, &err), XF_OK);
  assert_int_equal(xf_site_registry_tag_add(s->reg, "0a-b_c", "-t", &err), XF_EINVAL);
  assert_int_equal(count_datasets(s), 1);
}

/* ---- tabular layouts --------------------------------------------------------------- */

/* NumPy datasets register with their layout; a schema CSV dataset's digest
 * covers schema.json, so editing the schema is a change the daemon notices. */
static void registry_keeps_numpy_layouts_and_digests_the_schema(void **state) {
  scratch *s = *state;
  const char *np = path_in(s, "np");
  assert_int_equal(mkdir(np, 0755), 0);
  xf_dataset ds;
  assert_int_equal(xf_dataset_alloc(&ds, 12, 1, 1, 3, 2, NULL), XF_OK);
  for (uint32_t i = 0; i < ds.n; i++) ds.y[i] = (int32_t)(i % 2);
  char a[800], b[800];
  snprintf(a, sizeof(a), "%s/train-x.npy", np);
  snprintf(b, sizeof(b), "%s/train-y.npy", np);
  assert_int_equal(xf_npy_write(a, b, &ds, NULL), XF_OK);
  snprintf(a, sizeof(a), "%s/test-x.npy", np);
  snprintf(b, sizeof(b), "%s/test-y.npy", np);
  assert_int_equal(xf_npy_write(a, b, &ds, NULL), XF_OK);
  xf_dataset_free(&ds);
  xf_errctx err;
  xf_site_dataset d;
  xf_site_dataset_spec spec = {.name = "arrays", .path = np};
  if (xf_site_registry_add(s->reg, &spec, &d, &err) != XF_OK) fail_msg("%s", err.msg);
  assert_int_equal(d.layout, XF_LAYOUT_NPY);
  xf_site_dataset_free(&d);
  assert_int_equal(xf_site_registry_get(s->reg, "arrays", &d, &err), XF_OK);
  assert_int_equal(d.layout, XF_LAYOUT_NPY);
  assert_int_equal(d.features, 3);
  xf_site_dataset_free(&d);

  const char *dir = make_csv(s, "tab", 1);
  snprintf(a, sizeof(a), "%s/schema.json", dir);
  assert_int_equal(write_file(a, "{\"label\": {\"column\": \"label\", \"type\": \"integer\"},"
                                 " \"columns\": [{\"name\": \"x\", \"type\": \"numeric\"},"
                                 " {\"name\": \"y\", \"type\": \"numeric\"},"
                                 " {\"name\": \"z\", \"type\": \"ignore\"}]}"),
                   0);
  xf_site_dataset_spec tab = {.name = "tab", .path = dir};
  if (xf_site_registry_add(s->reg, &tab, &d, &err) != XF_OK) fail_msg("%s", err.msg);
  assert_int_equal(d.layout, XF_LAYOUT_CSV);
  assert_int_equal(d.features, 2); /* z is ignored */
  xf_digest before, after;
  assert_int_equal(xf_site_data_digest(d.path, d.layout, &before, &err), XF_OK);
  assert_int_equal(write_file(a, "{\"label\": {\"column\": \"label\", \"type\": \"integer\"},"
                                 " \"columns\": [{\"name\": \"x\", \"type\": \"numeric\"},"
                                 " {\"name\": \"y\", \"type\": \"ignore\"},"
                                 " {\"name\": \"z\", \"type\": \"numeric\"}]}"),
                   0);
  assert_int_equal(xf_site_data_digest(d.path, d.layout, &after, &err), XF_OK);
  assert_true(memcmp(&before, &after, sizeof(before)) != 0);
  xf_site_dataset_free(&d);
}

/* A site database from before the NumPy layouts (schema version 5) is
 * brought up to date with its datasets and their tags intact. */
static void registry_migration_keeps_datasets_and_tags(void **state) {
  scratch *s = *state;
  char old[700];
  snprintf(old, sizeof(old), "%s/old.db", s->dir);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(old, &db), SQLITE_OK);
  const char *v5 =
      "CREATE TABLE datasets (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
      " path TEXT NOT NULL, layout TEXT NOT NULL CHECK (layout IN ('idx', 'csv')),"
      " classification TEXT NOT NULL, train_records INTEGER NOT NULL,"
      " test_records INTEGER NOT NULL, classes INTEGER NOT NULL, features INTEGER NOT NULL,"
      " shape_h INTEGER NOT NULL, shape_w INTEGER NOT NULL, shape_c INTEGER NOT NULL,"
      " registered_at INTEGER NOT NULL, digest TEXT NOT NULL, budget_epsilon REAL,"
      " budget_delta REAL NOT NULL DEFAULT 1e-5);"
      "CREATE TABLE tags (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
      "CREATE TABLE dataset_tags (dataset_id INTEGER NOT NULL REFERENCES datasets (id)"
      " ON DELETE CASCADE, tag_id INTEGER NOT NULL REFERENCES tags (id),"
      " PRIMARY KEY (dataset_id, tag_id));"
      "INSERT INTO datasets VALUES (7, 'clinic', '/data/clinic', 'csv', 'internal', 6, 3, 3, 3,"
      " 1, 1, 3, 1700000000, '0000000000000000000000000000000000000000000000000000000000000000',"
      " 2.5, 1e-6);"
      "INSERT INTO tags VALUES (4, 'research_ok');"
      "INSERT INTO dataset_tags VALUES (7, 4);"
      "PRAGMA user_version = 5;";
  assert_int_equal(sqlite3_exec(db, v5, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  xf_site_registry *reg = NULL;
  xf_errctx err;
  if (xf_site_registry_open(old, &reg, &err) != XF_OK) fail_msg("%s", err.msg);
  xf_site_dataset d;
  assert_int_equal(xf_site_registry_get(reg, "clinic", &d, &err), XF_OK);
  assert_int_equal(d.layout, XF_LAYOUT_CSV);
  assert_int_equal(d.n_tags, 1);
  assert_string_equal(d.tags[0], "research_ok");
  assert_true(d.has_budget && d.budget_epsilon == 2.5 && d.budget_delta == 1e-6);
  xf_site_dataset_free(&d);
  xf_site_registry_close(reg);
  assert_int_equal(sqlite3_open(old, &db), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_DONE); /* no dangling references */
  sqlite3_finalize(st);
  /* The new layouts pass the table's CHECK. */
  assert_int_equal(sqlite3_exec(db, "UPDATE datasets SET layout = 'npz'", NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, scratch_setup, scratch_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(registry_keeps_numpy_layouts_and_digests_the_schema),
      T(registry_migration_keeps_datasets_and_tags),
      T(added_dataset_reads_back_with_shape_tags_and_budget),
      T(list_tag_budget_and_remove_round_trip),
      T(invalid_data_is_refused_with_the_loaders_message_and_nothing_recorded),
      T(duplicate_name_is_refused_and_the_first_stays),
      T(invalid_names_tags_and_budgets_are_refused_before_reading_data),
      T(dataset_names_and_tags_follow_the_rule_of_job_specs_and_policies),
      T(trainer_reads_back_and_bad_declarations_are_refused),
      T(digest_depends_on_content_not_on_where_the_data_is),
      T(verify_reports_ok_then_changed_and_missing),
      T(full_config_parses_and_formats_back_to_the_same),
      T(config_errors_name_the_field),
      T(config_file_that_is_missing_says_how_to_make_it),
      T(every_registry_call_survives_allocation_failures),
      T(ledger_composes_charges_and_is_append_only),
      T(budget_delta_and_ledger_outlive_the_registration),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
