/* SPDX-License-Identifier: Apache-2.0 */
/* The site's rounds of secure aggregation (site/siteagg.h), with no
 * sockets: which round a slot holds, and the malformed messages each
 * phase refuses. The identity is tests/fuzz/fuzz_secagg.h's stand-in for
 * the sites' certificates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fuzz/fuzz_secagg.h"
#include "site/siteagg.h"

static const char *const cohort[] = {"s1", "s2", "s3"};

static xf_update_secagg setup_of(void) {
  xf_update_secagg su;
  memset(&su, 0, sizeof(su));
  su.params = (xf_secagg_params){.n = 3, .threshold = 2, .bits = 16, .length = 8, .degree = 2};
  memcpy(su.params.graph_seed, fz_sa_graph_seed, 32);
  su.index = 1;
  return su;
}

/* Jobs the site holds a task of, for the choice of a slot to give up. */
static const char *held_jobs[4];

static bool holds(void *user, const char *job) {
  (void)user;
  for (size_t i = 0; i < sizeof(held_jobs) / sizeof(held_jobs[0]); i++)
    if (held_jobs[i] && strcmp(held_jobs[i], job) == 0) return true;
  return false;
}

static void begin(xf_site_sa *sa, const char *job, uint32_t round) {
  xf_update_secagg su = setup_of();
  xf_secagg_identity id = fz_sa_identity("s1");
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_sa_begin(sa, job, round, 1, &su, cohort, &id, holds, NULL, &err) != XF_OK)
    fail_msg("begin job %s round %u: %s", job, (unsigned)round, err.msg);
}

static int setup(void **state) {
  memset(held_jobs, 0, sizeof(held_jobs));
  xf_site_sa *sa = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_sa_new(2, &sa, &err) != XF_OK) return -1;
  *state = sa;
  return 0;
}

static int teardown(void **state) {
  xf_site_sa_free(*state);
  return 0;
}

static void round_begun_advertises_signed_keys(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  assert_true(xf_site_sa_has(sa, "7", 1, 1));
  assert_false(xf_site_sa_routed(sa, "7", 1, 1));
  uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
  xf_errctx err;
  xf_errctx_clear(&err);
  memset(advert, 0, sizeof(advert));
  memset(sig, 0, sizeof(sig));
  assert_int_equal(xf_site_sa_advertise(sa, "7", 1, 1, advert, sig, &err), XF_OK);
  uint8_t zero[XF_SECAGG_ADVERT_BYTES] = {0};
  assert_memory_not_equal(advert, zero, sizeof(advert));
  assert_memory_not_equal(sig, zero, sizeof(sig));
}

static void newer_round_of_a_job_replaces_the_older(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  begin(sa, "7", 2);
  assert_false(xf_site_sa_has(sa, "7", 1, 1));
  assert_true(xf_site_sa_has(sa, "7", 2, 1));
}

static void full_table_gives_up_the_oldest_round_of_a_job_without_a_task(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  begin(sa, "8", 1);
  begin(sa, "9", 1); /* neither 7 nor 8 is held: the older, 7, goes */
  assert_false(xf_site_sa_has(sa, "7", 1, 1));
  assert_true(xf_site_sa_has(sa, "8", 1, 1));
  assert_true(xf_site_sa_has(sa, "9", 1, 1));
  held_jobs[0] = "8";
  begin(sa, "10", 1); /* 8 is held: 9 goes though it is newer */
  assert_true(xf_site_sa_has(sa, "8", 1, 1));
  assert_false(xf_site_sa_has(sa, "9", 1, 1));
}

static void full_table_of_held_jobs_has_no_room(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  begin(sa, "8", 1);
  held_jobs[0] = "7";
  held_jobs[1] = "8";
  xf_update_secagg su = setup_of();
  xf_secagg_identity id = fz_sa_identity("s1");
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_sa_begin(sa, "9", 1, 1, &su, cohort, &id, holds, NULL, &err),
                   XF_EINTERNAL);
  assert_string_equal(err.msg, "no room for another round of secure aggregation");
  assert_true(xf_site_sa_has(sa, "7", 1, 1) && xf_site_sa_has(sa, "8", 1, 1));
}

static void forget_lets_the_round_go(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  xf_site_sa_forget(sa, "7", 1, 2); /* another attempt: kept */
  assert_true(xf_site_sa_has(sa, "7", 1, 1));
  xf_site_sa_forget(sa, "7", 1, 1);
  assert_false(xf_site_sa_has(sa, "7", 1, 1));
  assert_false(xf_site_sa_has(sa, NULL, 1, 1));
}

static void peer_names_the_cohort_members_index(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  assert_int_equal(xf_site_sa_peer(sa, "7", 1, 1, "s1"), 1);
  assert_int_equal(xf_site_sa_peer(sa, "7", 1, 1, "s3"), 3);
  assert_int_equal(xf_site_sa_peer(sa, "7", 1, 1, "s9"), 0);
  assert_int_equal(xf_site_sa_peer(sa, "7", 1, 1, ""), 0);
  assert_int_equal(xf_site_sa_peer(sa, "8", 1, 1, "s1"), 0);
}

static void keys_of_the_wrong_count_are_refused_naming_the_counts(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  Xfed__SecAggKeys k = XFED__SEC_AGG_KEYS__INIT;
  k.job_id = "7";
  k.round = 1;
  k.attempt = 1;
  xf_secagg_signed_share *shares = NULL;
  size_t count = 7;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_sa_keys(sa, &k, &shares, &count, &err), XF_EFORMAT);
  assert_string_equal(err.msg, "the cohort's keys came as 0 bytes of adverts, 0 signatures and 0 "
                               "certificates for 3 sites");
  assert_null(shares);
  assert_int_equal(count, 0);
}

static void routed_lists_of_different_lengths_are_refused(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  uint32_t from[1] = {2};
  Xfed__SecAggRouted r = XFED__SEC_AGG_ROUTED__INIT;
  r.job_id = "7";
  r.round = 1;
  r.attempt = 1;
  r.n_from = 1;
  r.from = from;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_sa_routed_in(sa, &r, &err), XF_EFORMAT);
  assert_string_equal(err.msg,
                      "the routed shares came as 1 senders, 0 ciphertexts and 0 signatures");
  assert_false(xf_site_sa_routed(sa, "7", 1, 1));
}

static void routed_share_of_the_wrong_size_is_refused(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  uint32_t from[1] = {2};
  uint8_t ct[10] = {0}, sig[XF_SECAGG_SIG_BYTES] = {0};
  ProtobufCBinaryData cts[1] = {{sizeof(ct), ct}}, sigs[1] = {{sizeof(sig), sig}};
  Xfed__SecAggRouted r = XFED__SEC_AGG_ROUTED__INIT;
  r.job_id = "7";
  r.round = 1;
  r.attempt = 1;
  r.n_from = r.n_ciphertexts = r.n_signatures = 1;
  r.from = from;
  r.ciphertexts = cts;
  r.signatures = sigs;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_sa_routed_in(sa, &r, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "the share routed from site 2 has 10 bytes"));
}

static void unmask_with_more_signers_than_signatures_is_refused(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  uint32_t signers[2] = {1, 2};
  Xfed__SecAggUnmask u = XFED__SEC_AGG_UNMASK__INIT;
  u.job_id = "7";
  u.round = 1;
  u.attempt = 1;
  u.n_signers = 2;
  u.signers = signers;
  uint8_t *reveal = NULL;
  size_t len = 9, cap = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_sa_unmask(sa, &u, &reveal, &len, &cap, &err), XF_EFORMAT);
  assert_string_equal(err.msg, "the unmask request names 2 signers and 0 signatures");
  assert_null(reveal);
  assert_int_equal(len, 0);
}

static void check_before_the_shares_are_routed_is_refused(void **state) {
  xf_site_sa *sa = *state;
  begin(sa, "7", 1);
  uint32_t u3[2] = {1, 2};
  Xfed__SecAggCheck c = XFED__SEC_AGG_CHECK__INIT;
  c.job_id = "7";
  c.round = 1;
  c.attempt = 1;
  c.n_u3 = 2;
  c.u3 = u3;
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_not_equal(xf_site_sa_check(sa, &c, sig, &err), XF_OK);
  assert_true(err.msg[0] != 0);
}

static void messages_of_a_round_the_site_does_not_hold_are_not_found(void **state) {
  xf_site_sa *sa = *state;
  xf_errctx err;
  xf_errctx_clear(&err);
  Xfed__SecAggCheck c = XFED__SEC_AGG_CHECK__INIT;
  c.job_id = "7";
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  assert_int_equal(xf_site_sa_check(sa, &c, sig, &err), XF_ENOENT);
  uint32_t bits = 0;
  assert_null(xf_site_sa_client(sa, "7", 0, 0, &bits));
  uint8_t advert[XF_SECAGG_ADVERT_BYTES];
  assert_int_equal(xf_site_sa_advertise(sa, "7", 1, 1, advert, sig, &err), XF_ENOENT);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(round_begun_advertises_signed_keys),
      T(newer_round_of_a_job_replaces_the_older),
      T(full_table_gives_up_the_oldest_round_of_a_job_without_a_task),
      T(full_table_of_held_jobs_has_no_room),
      T(forget_lets_the_round_go),
      T(peer_names_the_cohort_members_index),
      T(keys_of_the_wrong_count_are_refused_naming_the_counts),
      T(routed_lists_of_different_lengths_are_refused),
      T(routed_share_of_the_wrong_size_is_refused),
      T(unmask_with_more_signers_than_signatures_is_refused),
      T(check_before_the_shares_are_routed_is_refused),
      T(messages_of_a_round_the_site_does_not_hold_are_not_found),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
