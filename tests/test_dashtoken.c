/* SPDX-License-Identifier: Apache-2.0 */
/* The dashboard's tokens and sessions (coordinator/dashtoken.h), on an
 * injected clock: a token is good once and until it ends, the session it
 * buys ends with it, and nothing else gets in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "coordinator/dashtoken.h"

#define T0 1700000000.0

static void token_is_exchanged_once_for_a_session_that_ends_with_it(void **state) {
  (void)state;
  xf_dash_tokens *t = xf_dash_tokens_new();
  assert_non_null(t);
  char token[XF_DASH_SECRET_HEX], session[XF_DASH_SECRET_HEX];
  double expires = 0, sexp = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_dash_issue(t, T0, 600, 2, token, &expires, &err), XF_OK);
  assert_int_equal(strlen(token), 64);
  assert_true(expires == T0 + 600);
  int role = -1;
  /* A token is not a session. */
  assert_false(xf_dash_session(t, token, T0 + 1, &role));
  assert_true(xf_dash_exchange(t, token, T0 + 10, session, &role, &sexp));
  assert_int_equal(role, 2);
  assert_true(sexp == expires);
  assert_string_not_equal(session, token);
  /* Spent: a second exchange fails. */
  char again[XF_DASH_SECRET_HEX];
  assert_false(xf_dash_exchange(t, token, T0 + 11, again, &role, &sexp));
  role = -1;
  assert_true(xf_dash_session(t, session, T0 + 599, &role));
  assert_int_equal(role, 2);
  assert_false(xf_dash_session(t, session, T0 + 600, &role));
  xf_dash_tokens_free(t);
}

static void expired_or_made_up_tokens_buy_nothing(void **state) {
  (void)state;
  xf_dash_tokens *t = xf_dash_tokens_new();
  char token[XF_DASH_SECRET_HEX], session[XF_DASH_SECRET_HEX];
  double expires = 0, sexp = 0;
  int role = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_dash_issue(t, T0, 0, 1, token, &expires, &err), XF_OK);
  assert_true(expires == T0 + XF_DASH_TTL_DEFAULT_S);
  assert_false(xf_dash_exchange(t, token, expires, session, &role, &sexp));
  char fake[XF_DASH_SECRET_HEX];
  memset(fake, '0', 64);
  fake[64] = '\0';
  assert_false(xf_dash_exchange(t, fake, T0, session, &role, &sexp));
  assert_false(xf_dash_exchange(t, "", T0, session, &role, &sexp));
  assert_false(xf_dash_exchange(t, "zz", T0, session, &role, &sexp));
  assert_false(xf_dash_exchange(t, NULL, T0, session, &role, &sexp));
  assert_false(xf_dash_session(t, fake, T0, &role));
  /* One character off is another token. */
  assert_int_equal(xf_dash_issue(t, T0, 60, 1, token, &expires, &err), XF_OK);
  token[0] = token[0] == 'a' ? 'b' : 'a';
  assert_false(xf_dash_exchange(t, token, T0, session, &role, &sexp));
  xf_dash_tokens_free(t);
}

static void ttl_above_an_hour_is_refused_naming_the_bound(void **state) {
  (void)state;
  xf_dash_tokens *t = xf_dash_tokens_new();
  char token[XF_DASH_SECRET_HEX];
  double expires = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_dash_issue(t, T0, 3601, 1, token, &expires, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "3600"));
  assert_int_equal(xf_dash_issue(t, T0, 3600, 1, token, &expires, &err), XF_OK);
  xf_dash_tokens_free(t);
}

static void a_flood_of_tokens_keeps_the_store_bounded_and_the_newest_good(void **state) {
  (void)state;
  xf_dash_tokens *t = xf_dash_tokens_new();
  char token[XF_DASH_SECRET_HEX], session[XF_DASH_SECRET_HEX];
  double expires = 0, sexp = 0;
  int role = 0;
  xf_errctx err = {0};
  for (int i = 0; i < 3 * XF_DASH_HELD_MAX; i++)
    assert_int_equal(xf_dash_issue(t, T0 + i, 3600, 1, token, &expires, &err), XF_OK);
  assert_true(xf_dash_exchange(t, token, T0 + 1000, session, &role, &sexp));
  assert_true(xf_dash_session(t, session, T0 + 1001, &role));
  xf_dash_tokens_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(token_is_exchanged_once_for_a_session_that_ends_with_it),
      cmocka_unit_test(expired_or_made_up_tokens_buy_nothing),
      cmocka_unit_test(ttl_above_an_hour_is_refused_naming_the_bound),
      cmocka_unit_test(a_flood_of_tokens_keeps_the_store_bounded_and_the_newest_good),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
