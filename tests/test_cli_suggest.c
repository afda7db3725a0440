/* SPDX-License-Identifier: Apache-2.0 */
/* Misspelt commands, verbs and flags of every xfed program (xfed, xfed-site,
 * xfed-coord), run as a user types them: a usage error (exit 2) that names
 * the word typed and, when a known word is near it, suggests that word; and
 * no suggestion where nothing is near. One table row per mistake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

typedef struct mistake {
  const char *program;  /* under the build directory */
  const char *args[6];  /* NULL-terminated */
  const char *named;    /* the word typed, as the error names it */
  const char *hint;     /* "did you mean '...'?" expected, or NULL for none */
} mistake;

static const mistake mistakes[] = {
    {"cli/xfed", {"jbo", "list"}, "unknown command 'jbo'", "did you mean 'job'?"},
    {"cli/xfed", {"job", "lsit"}, "'lsit' is not a verb of 'job'", "did you mean 'list'?"},
    {"cli/xfed", {"job", "stauts", "1"}, "'stauts'", "did you mean 'status'?"},
    {"cli/xfed", {"trian"}, "unknown command 'trian'", "did you mean 'train'?"},
    {"cli/xfed", {"train", "--spce", "x.json"}, "unknown option '--spce'", "did you mean '--spec'?"},
    {"cli/xfed", {"job", "submit", "--wiat", "x.json"}, "'--wiat'", "did you mean '--wait'?"},
    {"cli/xfed", {"dp", "epsilon", "--dleta=1e-5"}, "'--dleta=1e-5'", "did you mean '--delta'?"},
    {"cli/xfed", {"policy", "rule", "ad"}, "'ad' is not a verb of 'policy rule'",
     "did you mean 'add'?"},
    {"cli/xfed", {"frobnicate"}, "unknown command 'frobnicate'", NULL},
    {"cli/xfed", {"job", "--bogus-flag-xyz"}, "'--bogus-flag-xyz'", NULL},
    {"site/xfed-site", {"daatset", "list"}, "unknown command 'daatset'",
     "did you mean 'dataset'?"},
    {"site/xfed-site", {"dataset", "lst"}, "'lst' is not a verb of 'dataset'",
     "did you mean 'list'?"},
    {"site/xfed-site", {"init", "--nmae", "s1"}, "unknown option '--nmae'",
     "did you mean '--name'?"},
    {"coordinator/xfed-coord", {"bakcup"}, "unknown command 'bakcup'", "did you mean 'backup'?"},
    {"coordinator/xfed-coord", {"--regoin", "eu"}, "unknown option '--regoin'",
     "did you mean '--region'?"},
    {"coordinator/xfed-coord", {"backup", "--otu", "f"}, "unknown option '--otu'",
     "did you mean '--out'?"},
    {"coordinator/xfed-coord", {"serve"}, "unknown command 'serve'", NULL},
};

static const char *build_dir(void) {
  const char *b = getenv("XF_BUILD_DIR");
  return b && *b ? b : NULL;
}

static void every_misspelling_is_a_usage_error_with_the_nearest_word(void **state) {
  (void)state;
  const char *build = build_dir();
  assert_non_null(build);
  for (size_t i = 0; i < sizeof(mistakes) / sizeof(mistakes[0]); i++) {
    const mistake *m = &mistakes[i];
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", build, m->program);
    const char *name = strrchr(m->program, '/') + 1;
    xf_test_run r = {0};
    xf_test_exec_opts o = {.path = path, .unset = "XFED_SITE_DIR", .deadline_s = 60};
    xf_test_execv(&o, &r, name, m->args);
    bool ok = r.status == 2 && strstr(r.err, m->named) != NULL &&
              (m->hint ? strstr(r.err, m->hint) != NULL : strstr(r.err, "did you mean") == NULL);
    if (!ok) {
      xf_test_run_show(&r);
      xf_test_run_free(&r);
      fail_msg("row %zu (%s): expected exit 2 naming \"%s\" and %s%s%s", i, name, m->named,
               m->hint ? "\"" : "no suggestion", m->hint ? m->hint : "", m->hint ? "\"" : "");
    }
    xf_test_run_free(&r);
  }
}

int main(void) {
  if (!build_dir()) {
    fprintf(stderr, "test_cli_suggest: XF_BUILD_DIR is not set; run it through ctest\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_misspelling_is_a_usage_error_with_the_nearest_word),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
