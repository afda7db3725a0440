/* SPDX-License-Identifier: Apache-2.0 */
/* The optional features (XF_HTTP: /metrics, /healthz and the dashboard;
 * XF_REPORT: `xfed job report`; XF_SYSTEMD), as the programs of this build
 * state them: `xfed version` lists the ones built in and the ones left
 * out; in a build that leaves one out, every flag, config key and command
 * that needs it is a usage error (exit 2) naming the program, the option
 * and the package to rebuild with, before anything is read or written; in
 * a build that has it, the same command lines get past that point and fail
 * later, for the reason given in the row (no certificate, no site
 * directory). The test of the refusals runs in whichever build ctest is
 * pointed at: the default build checks the flags parse, a build configured
 * with -DXF_HTTP=OFF -DXF_REPORT=OFF checks the refusals
 * (docs/development.md, "Options"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

#ifdef XF_HAVE_HTTP
#define HTTP_BUILT true
#else
#define HTTP_BUILT false
#endif
#ifdef XF_HAVE_REPORT
#define REPORT_BUILT true
#else
#define REPORT_BUILT false
#endif

static char scratch[512];

static int setup(void **state) {
  (void)state;
  return xf_test_mkdtemp(scratch, sizeof(scratch), "features");
}

static int teardown(void **state) {
  (void)state;
  xf_test_remove_tree(scratch);
  return 0;
}

static const char *build_dir(void) {
  const char *b = getenv("XF_BUILD_DIR");
  return b && *b ? b : NULL;
}

/* Runs PROGRAM (under the build directory) with args; $S in an argument is
 * replaced by the scratch directory. */
static void run_in_build(xf_test_run *r, const char *program, const char *const *args) {
  const char *build = build_dir();
  assert_non_null(build);
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", build, program);
  char expanded[16][1024];
  const char *argv[17] = {0};
  size_t n = 0;
  for (; args[n] && n < 16; n++) {
    const char *a = args[n];
    if (strncmp(a, "$S", 2) == 0)
      snprintf(expanded[n], sizeof(expanded[n]), "%s%s", scratch, a + 2);
    else
      snprintf(expanded[n], sizeof(expanded[n]), "%s", a);
    argv[n] = expanded[n];
  }
  xf_test_exec_opts o = {.path = path, .unset = "XFED_COORDINATOR", .deadline_s = 60};
  xf_test_execv(&o, r, strrchr(program, '/') + 1, argv);
}

static void version_lists_the_features_built_in_and_left_out(void **state) {
  (void)state;
  static const struct {
    const char *name;
    bool built;
  } want[] = {{"http", HTTP_BUILT}, {"report", REPORT_BUILT}};
  xf_test_run r = {0};
  const char *args[] = {"version", "--json", NULL};
  run_in_build(&r, "cli/xfed", args);
  assert_int_equal(r.status, 0);
  json_error_t je;
  json_t *o = json_loads(r.out, 0, &je);
  if (!o) {
    xf_test_run_show(&r);
    fail_msg("xfed version --json is not JSON: %s", je.text);
  }
  json_t *with = json_object_get(o, "features"), *without = json_object_get(o, "without");
  assert_true(json_is_array(with) && json_is_array(without));
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    bool in_with = false, in_without = false;
    size_t k;
    json_t *v;
    json_array_foreach(with, k, v) in_with |= strcmp(json_string_value(v), want[i].name) == 0;
    json_array_foreach(without, k, v) in_without |= strcmp(json_string_value(v), want[i].name) == 0;
    if (in_with != want[i].built || in_without == want[i].built) {
      xf_test_run_show(&r);
      fail_msg("xfed version lists '%s' %s, but this build %s it", want[i].name,
               in_with ? "as built in" : "as left out", want[i].built ? "has" : "lacks");
    }
  }
  json_decref(o);

  const char *text[] = {"version", NULL};
  run_in_build(&r, "cli/xfed", text);
  assert_int_equal(r.status, 0);
  const char *line = strstr(r.out, "\nfeatures:");
  if (!line || (!HTTP_BUILT && !strstr(line, "http (XF_HTTP=OFF)")) ||
      (!REPORT_BUILT && !strstr(line, "report (XF_REPORT=OFF)"))) {
    xf_test_run_show(&r);
    fail_msg("xfed version has no features line naming what was left out");
  }
  xf_test_run_free(&r);
}

typedef struct use {
  const char *program;  /* under the build directory */
  const char *args[16]; /* NULL-terminated; "$S" is the scratch directory */
  bool built;           /* whether this build has the feature */
  const char *refusal;  /* what a build without it says (with exit 2) */
  const char *later;    /* what a build with it fails on instead */
} use;

#define COORD_HTTP "this xfed-coord was built without the HTTP server (XF_HTTP=OFF): " \
                   "rebuild with libmicrohttpd-dev"
#define NO_CERT "--cert is required"
/* Connection flags that name files which do not exist: a build with the
 * command fails reading the first. */
#define NO_IDENTITY                                                                        \
  "--coordinator", "127.0.0.1:9", "--cert", "$S/none/u.crt", "--key", "$S/none/u.key", "--ca", \
      "$S/none/ca.crt", "--crl", "$S/none/crl.pem"

static const use uses[] = {
    {"coordinator/xfed-coord", {"run", "--metrics", "0", "--residency-policy", "off"},
     HTTP_BUILT, "--metrics: " COORD_HTTP, NO_CERT},
    {"coordinator/xfed-coord", {"--dashboard", "127.0.0.1:0", "--residency-policy", "off"},
     HTTP_BUILT, "--dashboard: " COORD_HTTP, NO_CERT},
    {"coordinator/xfed-coord", {"run", "--config", "$S/metrics.json", "--residency-policy", "off"},
     HTTP_BUILT, "metrics: " COORD_HTTP, NO_CERT},
    {"coordinator/xfed-coord", {"run", "--config", "$S/dashboard.json", "--residency-policy", "off"},
     HTTP_BUILT, "dashboard: " COORD_HTTP, NO_CERT},
    {"site/xfed-site", {"run", "--metrics", "127.0.0.1:0", "--dir", "$S/no-site"}, HTTP_BUILT,
     "--metrics: this xfed-site was built without the HTTP server (XF_HTTP=OFF): rebuild with "
     "libmicrohttpd-dev",
     "site.json"},
    {"cli/xfed", {"job", "report", "7", "--out", "$S/curves.png", NO_IDENTITY}, REPORT_BUILT,
     "this xfed was built without cairo (XF_REPORT=OFF): rebuild with libcairo2-dev", "u.crt"},
};

static void write_text(const char *name, const char *text) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", scratch, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static void a_left_out_feature_is_refused_naming_its_option_and_package(void **state) {
  (void)state;
  write_text("metrics.json", "{\"metrics\": \"0\"}\n");
  write_text("dashboard.json", "{\"dashboard\": \"0\"}\n");
  for (size_t i = 0; i < sizeof(uses) / sizeof(uses[0]); i++) {
    const use *u = &uses[i];
    xf_test_run r = {0};
    run_in_build(&r, u->program, u->args);
    bool ok = u->built ? r.status != 0 && strstr(r.err, u->later) != NULL &&
                             strstr(r.err, "=OFF") == NULL
                       : r.status == 2 && strstr(r.err, u->refusal) != NULL;
    if (!ok) {
      xf_test_run_show(&r);
      xf_test_run_free(&r);
      if (u->built)
        fail_msg("row %zu: with the feature built in, expected a failure naming \"%s\" and "
                 "no refusal of the feature", i, u->later);
      fail_msg("row %zu: without the feature, expected exit 2 naming \"%s\"", i, u->refusal);
    }
    xf_test_run_free(&r);
  }
  /* Nothing was drawn: the refusal (or the missing identity) came first. */
  char png[1024];
  snprintf(png, sizeof(png), "%s/curves.png", scratch);
  assert_int_not_equal(access(png, F_OK), 0);
}

int main(void) {
  if (!build_dir()) {
    fprintf(stderr, "test_features: XF_BUILD_DIR is not set; run it through ctest\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(version_lists_the_features_built_in_and_left_out, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_left_out_feature_is_refused_naming_its_option_and_package,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
