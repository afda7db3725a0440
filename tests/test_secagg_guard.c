/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of secure aggregation against a malicious aggregator
 * (crypto/secagg_guard.h with the federation PKI of crypto/secagg_x509.h):
 * five sites with real certificates of a federation made in a scratch
 * directory run in process, and the test plays the aggregator — honest,
 * or lying about who dropped to unmask one site, or changing what it
 * relays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypto/digest.h"
#include "crypto/pki.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "crypto/secagg_x509.h"
#include "support.h"

#define N 5
#define LEN 64
#define BITS 16

static char root[256];
static char fed_dir[512];
/* Sites 1..5 of the cohort, another site, and a coordinator. */
static const char *const NAMES[N] = {"eu-a", "eu-b", "eu-c", "eu-d", "eu-e"};

static int group_setup(void **state) {
  (void)state;
  if (xf_test_mkdtemp(root, sizeof(root), "secagg-guard") != 0) return -1;
  if (xf_crypto_init() != XF_OK) return -1;
  snprintf(fed_dir, sizeof(fed_dir), "%s/fed", root);
  xf_federation *fed = NULL;
  xf_errctx err = {0};
  if (xf_federation_init(fed_dir, "acme", 0, &fed, &err) != XF_OK) return -1;
  const char *sites[] = {"eu-a", "eu-b", "eu-c", "eu-d", "eu-e", "eu-x"};
  for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
    xf_pki_issue_opts o = {.kind = XF_PKI_KIND_SITE, .name = sites[i], .region = "eu"};
    if (xf_federation_issue(fed, &o, NULL, &err) != XF_OK) return -1;
  }
  xf_pki_issue_opts o = {.kind = XF_PKI_KIND_COORDINATOR, .name = "agg", .region = "eu"};
  if (xf_federation_issue(fed, &o, NULL, &err) != XF_OK) return -1;
  xf_federation_close(fed);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(root);
  return 0;
}

static xf_pki_trust *load_trust(void) {
  char ca[600], crl[600];
  snprintf(ca, sizeof(ca), "%s/ca.crt", fed_dir);
  snprintf(crl, sizeof(crl), "%s/crl.pem", fed_dir);
  xf_pki_trust *t = NULL;
  xf_errctx err = {0};
  if (xf_pki_trust_load(ca, crl, &t, &err) != XF_OK) fail_msg("trust: %s", err.msg);
  return t;
}

/* A site's key and certificate (DER) as issued. */
static void load_identity(const char *name, EVP_PKEY **key, uint8_t **der, size_t *len) {
  char path[700];
  xf_errctx err = {0};
  snprintf(path, sizeof(path), "%s/issued/%s.key", fed_dir, name);
  if (xf_pki_key_load(path, key, &err) != XF_OK) fail_msg("key %s: %s", name, err.msg);
  snprintf(path, sizeof(path), "%s/issued/%s.crt", fed_dir, name);
  X509 *cert = NULL;
  if (xf_pki_cert_load(path, &cert, &err) != XF_OK) fail_msg("cert %s: %s", name, err.msg);
  if (xf_secagg_x509_cert_der(cert, der, len, &err) != XF_OK) fail_msg("der: %s", err.msg);
  X509_free(cert);
}

/* ---- a round of five sites ------------------------------------------------------------- */

typedef struct site {
  EVP_PKEY *key;
  xf_secagg_x509 *identity;
  xf_secagg_guard *g;
  uint8_t *cert;
  size_t cert_len;
  uint8_t advert[XF_SECAGG_ADVERT_BYTES], advert_sig[XF_SECAGG_SIG_BYTES];
  xf_secagg_signed_share out[N];
  size_t n_out;
  uint32_t input[LEN], y[LEN];
} site;

typedef struct round {
  xf_pki_trust *trust;
  xf_secagg_session s;
  site site[N + 1]; /* 1-based */
  xf_secagg_member_keys keys[N];
} round;

static void round_init(round *r, uint32_t attempt) {
  memset(r, 0, sizeof(*r));
  r->trust = load_trust();
  r->s = (xf_secagg_session){.job = "7", .round = 3, .attempt = attempt, .cohort = NAMES};
  r->s.params = (xf_secagg_params){.n = N, .threshold = 3, .bits = BITS, .length = LEN,
                                   .degree = N - 1};
  for (size_t b = 0; b < 32; b++) r->s.params.graph_seed[b] = (uint8_t)(b * 5 + attempt);
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &r->site[i];
    load_identity(NAMES[i - 1], &s->key, &s->cert, &s->cert_len);
    xf_errctx err = {0};
    assert_int_equal(xf_secagg_x509_new(r->trust, s->key, &s->identity, &err), XF_OK);
    xf_secagg_identity id = xf_secagg_x509_identity(s->identity);
    if (xf_secagg_guard_new(&r->s, i, &id, &s->g, &err) != XF_OK) fail_msg("%s", err.msg);
    for (size_t k = 0; k < LEN; k++) s->input[k] = (uint32_t)(1000 * i + 7 * k) & 0xffff;
  }
}

static void round_free(round *r) {
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &r->site[i];
    xf_secagg_guard_free(s->g);
    xf_secagg_x509_free(s->identity);
    EVP_PKEY_free(s->key);
    free(s->cert);
  }
  xf_pki_trust_free(r->trust);
}

/* Every site advertises; keys[] is what an honest aggregator relays. */
static void advertise_all(round *r) {
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &r->site[i];
    xf_errctx err = {0};
    assert_int_equal(xf_secagg_guard_advertise(s->g, s->advert, s->advert_sig, &err), XF_OK);
    r->keys[i - 1] = (xf_secagg_member_keys){
        .advert = s->advert, .sig = s->advert_sig, .cert = s->cert, .cert_len = s->cert_len};
  }
}

static xf_err share_rc(round *r, uint32_t i, const xf_secagg_member_keys *keys, xf_errctx *err) {
  site *s = &r->site[i];
  return xf_secagg_guard_share(s->g, keys, s->out, N, &s->n_out, err);
}

/* Every site shares, every share is delivered, U2 = everyone. */
static void share_and_route_all(round *r) {
  xf_errctx err = {0};
  for (uint32_t i = 1; i <= N; i++)
    if (share_rc(r, i, r->keys, &err) != XF_OK) fail_msg("share %u: %s", i, err.msg);
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &r->site[i];
    for (size_t m = 0; m < s->n_out; m++) {
      const xf_secagg_signed_share *sh = &s->out[m];
      if (xf_secagg_guard_receive(r->site[sh->to].g, i, sh->ciphertext, sh->sig, &err) != XF_OK)
        fail_msg("receive %u from %u: %s", sh->to, i, err.msg);
    }
  }
  uint32_t u2[N] = {1, 2, 3, 4, 5};
  for (uint32_t i = 1; i <= N; i++)
    if (xf_secagg_guard_routed(r->site[i].g, u2, N, &err) != XF_OK)
      fail_msg("routed %u: %s", i, err.msg);
}

static void mask(round *r, uint32_t i) {
  site *s = &r->site[i];
  assert_int_equal(xf_secagg_client_mask(xf_secagg_guard_client(s->g), s->input, 0, LEN, s->y, NULL),
                   XF_OK);
}

static void sign(round *r, uint32_t i, const uint32_t *u3, size_t n, uint8_t *sig) {
  xf_errctx err = {0};
  if (xf_secagg_guard_sign_survivors(r->site[i].g, u3, n, sig, &err) != XF_OK)
    fail_msg("site %u signing U3: %s", i, err.msg);
}

static xf_err unmask_rc(round *r, uint32_t i, const uint32_t *u3, size_t n_u3,
                        const uint32_t *signers, const uint8_t *sigs, size_t n_signers,
                        uint8_t *out, size_t *len, xf_errctx *err) {
  size_t cap = xf_secagg_reveal_max_bytes(&r->s.params);
  return xf_secagg_guard_unmask(r->site[i].g, u3, n_u3, signers, sigs, n_signers, out, cap, len,
                                err);
}

/* The aggregator's server, fed the adverts and U2 of an honest round. */
static xf_secagg_server *honest_server(round *r) {
  xf_secagg_server *srv = NULL;
  assert_int_equal(xf_secagg_server_new(&r->s.params, &srv, NULL), XF_OK);
  for (uint32_t i = 1; i <= N; i++)
    assert_int_equal(xf_secagg_server_advert(srv, i, r->site[i].advert, NULL), XF_OK);
  for (uint32_t i = 1; i <= N; i++) assert_int_equal(xf_secagg_server_shared(srv, i, NULL), XF_OK);
  uint32_t u2[N];
  size_t n_u2;
  assert_int_equal(xf_secagg_server_routed(srv, u2, &n_u2, NULL), XF_OK);
  return srv;
}

/* ---- an honest aggregator ------------------------------------------------------------- */

/* Sites 1..4 send their masked inputs, site 5 is gone; of U3 = {1..4}
 * site 4 vanishes before signing. Three signatures of U3 are enough (t =
 * 3): the signers reveal and the sum of 1..4 is unmasked exactly. */
static void honest_round_with_signed_messages_unmasks_the_sum_despite_dropouts(void **state) {
  (void)state;
  round r;
  round_init(&r, 1);
  advertise_all(&r);
  share_and_route_all(&r);
  xf_secagg_server *srv = honest_server(&r);
  for (uint32_t i = 1; i <= 4; i++) {
    mask(&r, i);
    assert_int_equal(xf_secagg_server_add_masked(srv, i, 0, LEN, r.site[i].y, NULL), XF_OK);
  }
  uint32_t u3[N];
  size_t n_u3;
  assert_int_equal(xf_secagg_server_survivors(srv, u3, &n_u3, NULL), XF_OK);
  assert_int_equal(n_u3, 4);
  uint32_t signers[3] = {1, 2, 3};
  uint8_t sigs[3 * XF_SECAGG_SIG_BYTES];
  for (size_t k = 0; k < 3; k++) sign(&r, signers[k], u3, n_u3, sigs + k * XF_SECAGG_SIG_BYTES);
  for (size_t k = 0; k < 3; k++) {
    uint8_t out[1024];
    size_t len = 0;
    xf_errctx err = {0};
    if (unmask_rc(&r, signers[k], u3, n_u3, signers, sigs, 3, out, &len, &err) != XF_OK)
      fail_msg("site %u: %s", signers[k], err.msg);
    assert_int_equal(xf_secagg_server_add_reveal(srv, signers[k], out, len, NULL), XF_OK);
  }
  uint32_t sum[LEN];
  xf_errctx err = {0};
  if (xf_secagg_server_finish(srv, sum, &err) != XF_OK) fail_msg("%s", err.msg);
  for (size_t k = 0; k < LEN; k++) {
    uint32_t want = 0;
    for (uint32_t i = 1; i <= 4; i++) want += r.site[i].input[k];
    assert_int_equal(sum[k], want & 0xffff);
  }
  xf_secagg_server_free(srv);
  round_free(&r);
}

/* ---- an aggregator that lies about a dropout --------------------------------------------- */

/* Every site's masked input arrived. The aggregator wants site 3's input:
 * it tells sites 1 and 2 that site 3 dropped (U3a, for 3's masking-key
 * shares) and sites 3, 4, 5 that everyone survived (U3b, for its self-mask
 * shares). Each site signs what it was shown; neither set gathers t = 3
 * signatures of its own members... except U3b, which 3, 4, 5 signed. So 4
 * and 5 reveal self-mask shares, 1 and 2 reveal nothing, and 4 and 5
 * refuse afterwards to sign or reveal for U3a. The aggregator ends with no
 * share of site 3's masking key, three short of the t' = 3 it needs. */
static void aggregator_lying_about_a_dropout_is_refused_and_learns_no_masking_key(void **state) {
  (void)state;
  round r;
  round_init(&r, 1);
  advertise_all(&r);
  share_and_route_all(&r);
  for (uint32_t i = 1; i <= N; i++) mask(&r, i);
  uint32_t u3a[4] = {1, 2, 4, 5}, u3b[5] = {1, 2, 3, 4, 5};
  uint8_t sig[N + 1][XF_SECAGG_SIG_BYTES];
  sign(&r, 1, u3a, 4, sig[1]);
  sign(&r, 2, u3a, 4, sig[2]);
  for (uint32_t i = 3; i <= 5; i++) sign(&r, i, u3b, 5, sig[i]);

  uint32_t key_shares_of_3 = 0, self_shares_of_3 = 0;
  /* To sites 1 and 2: every signature it holds, as if all were of U3a. */
  uint32_t all[N] = {1, 2, 3, 4, 5};
  uint8_t sigs[N * XF_SECAGG_SIG_BYTES];
  for (uint32_t i = 1; i <= N; i++) memcpy(sigs + (i - 1) * XF_SECAGG_SIG_BYTES, sig[i], 64);
  for (uint32_t i = 1; i <= 2; i++) {
    uint8_t out[1024];
    size_t len = 99;
    xf_errctx err = {0};
    assert_int_equal(unmask_rc(&r, i, u3a, 4, all, sigs, N, out, &len, &err), XF_EDENIED);
    assert_int_equal(len, 0);
    assert_non_null(strstr(err.msg, "refusing to reveal"));
    assert_non_null(strstr(err.msg, "2 of the 5 signatures"));
  }
  /* To sites 4 and 5: the three signatures of U3b. They reveal. */
  uint32_t b_signers[3] = {3, 4, 5};
  for (uint32_t i = 4; i <= 5; i++) {
    uint8_t out[1024];
    size_t len = 0;
    xf_errctx err = {0};
    if (unmask_rc(&r, i, u3b, 5, b_signers, sigs + 2 * XF_SECAGG_SIG_BYTES, 3, out, &len, &err) !=
        XF_OK)
      fail_msg("site %u: %s", i, err.msg);
    /* Count what the reveal gives of site 3: the entries name their owner
     * and kind (crypto/secagg.h). */
    for (size_t at = XF_SECAGG_REVEAL_HEADER_BYTES; at < len; at += XF_SECAGG_REVEAL_ENTRY_BYTES) {
      uint32_t owner = (uint32_t)out[at] << 24 | (uint32_t)out[at + 1] << 16 |
                       (uint32_t)out[at + 2] << 8 | out[at + 3];
      if (owner == 3) {
        if (out[at + 4] == 1) key_shares_of_3++;
        else self_shares_of_3++;
      }
    }
  }
  assert_int_equal(self_shares_of_3, 2);
  /* Now it asks 4 and 5 for U3a, where site 3's masking key is due. */
  for (uint32_t i = 4; i <= 5; i++) {
    uint8_t again[XF_SECAGG_SIG_BYTES], out[1024];
    size_t len = 99;
    xf_errctx err = {0};
    assert_int_equal(xf_secagg_guard_sign_survivors(r.site[i].g, u3a, 4, again, &err), XF_EDENIED);
    assert_non_null(strstr(err.msg, "signs one"));
    uint32_t a_signers[2] = {1, 2};
    assert_int_equal(unmask_rc(&r, i, u3a, 4, a_signers, sigs, 2, out, &len, &err), XF_EDENIED);
    assert_int_equal(len, 0);
    assert_non_null(strstr(err.msg, "not the one"));
  }
  /* Without the consistency round the client alone still holds one line:
   * having revealed site 3's self-mask share it refuses its key share. */
  uint8_t out[1024];
  size_t len = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_secagg_client_unmask(xf_secagg_guard_client(r.site[4].g), u3a, 4, out,
                                           sizeof(out), &len, &err),
                   XF_EDENIED);
  assert_non_null(strstr(err.msg, "both would unmask"));
  assert_int_equal(key_shares_of_3, 0);
  round_free(&r);
}

/* Signatures count once per member, and only members of the set count:
 * one valid signature relayed three times is one. */
static void repeated_or_outside_signatures_do_not_make_the_threshold(void **state) {
  (void)state;
  round r;
  round_init(&r, 1);
  advertise_all(&r);
  share_and_route_all(&r);
  uint32_t u3[3] = {1, 2, 3};
  uint8_t sig1[XF_SECAGG_SIG_BYTES], sig4[XF_SECAGG_SIG_BYTES];
  sign(&r, 1, u3, 3, sig1);
  /* Site 4 is outside U3; it would refuse to sign it (it is not in it). */
  xf_errctx err = {0};
  assert_int_equal(xf_secagg_guard_sign_survivors(r.site[4].g, u3, 3, sig4, &err), XF_EDENIED);
  uint32_t signers[3] = {1, 1, 1};
  uint8_t sigs[3 * XF_SECAGG_SIG_BYTES];
  for (size_t k = 0; k < 3; k++) memcpy(sigs + k * XF_SECAGG_SIG_BYTES, sig1, sizeof(sig1));
  uint8_t out[1024];
  size_t len = 0;
  assert_int_equal(unmask_rc(&r, 1, u3, 3, signers, sigs, 3, out, &len, &err), XF_EDENIED);
  assert_non_null(strstr(err.msg, "1 of the 3"));
  assert_non_null(strstr(err.msg, "counted already"));
  round_free(&r);
}

/* A signature of the same set made for another attempt does not verify
 * here: every statement is bound to job, round, attempt, parameters and
 * cohort. */
static void survivor_signatures_of_another_attempt_do_not_count(void **state) {
  (void)state;
  round a, b;
  round_init(&a, 1);
  round_init(&b, 2);
  advertise_all(&a);
  share_and_route_all(&a);
  advertise_all(&b);
  share_and_route_all(&b);
  uint32_t u3[N] = {1, 2, 3, 4, 5};
  uint8_t sigs[3 * XF_SECAGG_SIG_BYTES];
  uint32_t signers[3] = {2, 3, 4};
  sign(&a, 1, u3, N, sigs); /* site 1 of attempt 1 signs, to be able to unmask */
  for (size_t k = 0; k < 3; k++) sign(&b, signers[k], u3, N, sigs + k * XF_SECAGG_SIG_BYTES);
  uint8_t out[1024];
  size_t len = 0;
  xf_errctx err = {0};
  assert_int_equal(unmask_rc(&a, 1, u3, N, signers, sigs, 3, out, &len, &err), XF_EDENIED);
  assert_non_null(strstr(err.msg, "0 of the 3"));
  assert_string_equal(err.peer, "eu-b");
  round_free(&a);
  round_free(&b);
}

/* ---- relayed keys and shares that do not verify ------------------------------------------ */

/* Site 1's attempt to share with the keys relayed; the refusal must name
 * site 3 and contain `words`, and nothing is shared. */
static void expect_refused_naming_3(round *r, const xf_secagg_member_keys *keys,
                                    const char *words) {
  xf_errctx err = {0};
  assert_int_equal(share_rc(r, 1, keys, &err), XF_EINTEGRITY);
  assert_int_equal(r->site[1].n_out, 0);
  assert_string_equal(err.peer, "eu-c");
  if (!strstr(err.msg, words)) fail_msg("\"%s\" lacks \"%s\"", err.msg, words);
}

static void forged_or_mismatched_advert_signatures_are_refused_naming_the_site(void **state) {
  (void)state;
  round r;
  round_init(&r, 1);
  advertise_all(&r);
  xf_secagg_member_keys keys[N];

  /* A signature with one bit changed. */
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  memcpy(keys, r.keys, sizeof(keys));
  memcpy(sig, r.site[3].advert_sig, sizeof(sig));
  sig[10] ^= 1;
  keys[2].sig = sig;
  expect_refused_naming_3(&r, keys, "do not carry its signature");

  /* The aggregator's own keys in site 3's place, with 3's signature. */
  uint8_t mine[XF_SECAGG_ADVERT_BYTES];
  memcpy(keys, r.keys, sizeof(keys));
  memcpy(mine, r.site[3].advert, sizeof(mine));
  randombytes_buf(mine, 32);
  keys[2].advert = mine;
  expect_refused_naming_3(&r, keys, "do not carry its signature");

  /* Site 4's keys, signature and certificate passed off as site 3's. */
  memcpy(keys, r.keys, sizeof(keys));
  keys[2] = r.keys[3];
  expect_refused_naming_3(&r, keys, "not to the site 'eu-c'");

  /* Site 3's keys signed for another index: the statement names it. */
  memcpy(keys, r.keys, sizeof(keys));
  keys[2].sig = r.site[4].advert_sig;
  keys[2].advert = r.site[4].advert;
  expect_refused_naming_3(&r, keys, "do not carry its signature");

  /* No certificate, or a coordinator's. */
  memcpy(keys, r.keys, sizeof(keys));
  keys[2].cert = NULL;
  keys[2].cert_len = 0;
  expect_refused_naming_3(&r, keys, "without a certificate");
  EVP_PKEY *k = NULL;
  uint8_t *der = NULL;
  size_t der_len = 0;
  load_identity("agg", &k, &der, &der_len);
  memcpy(keys, r.keys, sizeof(keys));
  keys[2].cert = der;
  keys[2].cert_len = der_len;
  expect_refused_naming_3(&r, keys, "coordinator 'agg'");
  EVP_PKEY_free(k);
  free(der);

  /* Unchanged, it goes through. */
  xf_errctx err = {0};
  if (share_rc(&r, 1, r.keys, &err) != XF_OK) fail_msg("%s", err.msg);
  assert_int_equal(r.site[1].n_out, N - 1);
  round_free(&r);
}

/* A certificate revoked since the last CRL is refused at the next check. */
static void revoked_member_certificate_is_refused(void **state) {
  (void)state;
  round r;
  round_init(&r, 1);
  advertise_all(&r);
  xf_federation *fed = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_federation_open(fed_dir, &fed, &err), XF_OK);
  assert_int_equal(xf_federation_revoke(fed, "eu-x", XF_PKI_REASON_KEY_COMPROMISE, NULL, &err),
                   XF_OK);
  xf_federation_close(fed);
  /* eu-x's certificate in site 3's place: refused as revoked whatever its
   * name (the cohort naming eu-x would fare no better). */
  EVP_PKEY *k = NULL;
  uint8_t *der = NULL;
  size_t der_len = 0;
  load_identity("eu-x", &k, &der, &der_len);
  xf_pki_trust *fresh = load_trust();
  xf_secagg_x509_set_trust(r.site[1].identity, fresh);
  xf_secagg_member_keys keys[N];
  memcpy(keys, r.keys, sizeof(keys));
  keys[2].cert = der;
  keys[2].cert_len = der_len;
  expect_refused_naming_3(&r, keys, "revoked");
  EVP_PKEY_free(k);
  free(der);
  xf_secagg_x509_set_trust(r.site[1].identity, r.trust);
  xf_pki_trust_free(fresh);
  round_free(&r);
}

/* A share whose signature does not verify, or that is passed off as
 * another neighbour's, is refused naming the claimed sender. */
static void relayed_shares_without_their_senders_signature_are_refused(void **state) {
  (void)state;
  round r;
  round_init(&r, 1);
  advertise_all(&r);
  xf_errctx err = {0};
  for (uint32_t i = 1; i <= N; i++)
    if (share_rc(&r, i, r.keys, &err) != XF_OK) fail_msg("share %u: %s", i, err.msg);
  const xf_secagg_signed_share *from3 = NULL, *from4 = NULL;
  for (size_t m = 0; m < r.site[3].n_out; m++)
    if (r.site[3].out[m].to == 1) from3 = &r.site[3].out[m];
  for (size_t m = 0; m < r.site[4].n_out; m++)
    if (r.site[4].out[m].to == 1) from4 = &r.site[4].out[m];
  assert_true(from3 && from4);
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  memcpy(sig, from3->sig, sizeof(sig));
  sig[63] ^= 0x80;
  assert_int_equal(xf_secagg_guard_receive(r.site[1].g, 3, from3->ciphertext, sig, &err),
                   XF_EINTEGRITY);
  assert_string_equal(err.peer, "eu-c");
  assert_int_equal(
      xf_secagg_guard_receive(r.site[1].g, 3, from4->ciphertext, from4->sig, &err),
      XF_EINTEGRITY);
  assert_non_null(strstr(err.msg, "do not carry its signature"));
  /* The real one is taken, once. */
  assert_int_equal(xf_secagg_guard_receive(r.site[1].g, 3, from3->ciphertext, from3->sig, &err),
                   XF_OK);
  assert_int_equal(xf_secagg_guard_receive(r.site[1].g, 3, from3->ciphertext, from3->sig, &err),
                   XF_EEXISTS);
  round_free(&r);
}

/* A cohort where half the sites could unmask is refused before any key is
 * drawn, as is a cohort naming a site twice. */
static void threshold_of_half_the_cohort_or_a_repeated_name_is_refused(void **state) {
  (void)state;
  static const char *const four[4] = {"eu-a", "eu-b", "eu-c", "eu-d"};
  static const char *const twice[4] = {"eu-a", "eu-b", "eu-a", "eu-d"};
  xf_secagg_session s = {.job = "7", .round = 1, .attempt = 1, .cohort = four};
  s.params = (xf_secagg_params){.n = 4, .threshold = 2, .bits = 16, .length = 8, .degree = 3};
  xf_secagg_identity id = {.user = NULL};
  xf_pki_trust *trust = load_trust();
  EVP_PKEY *k = NULL;
  uint8_t *der = NULL;
  size_t der_len = 0;
  load_identity("eu-a", &k, &der, &der_len);
  xf_secagg_x509 *x = NULL;
  assert_int_equal(xf_secagg_x509_new(trust, k, &x, NULL), XF_OK);
  id = xf_secagg_x509_identity(x);
  xf_secagg_guard *g = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_secagg_guard_new(&s, 1, &id, &g, &err), XF_EINVAL);
  assert_null(g);
  assert_non_null(strstr(err.msg, "above 0.5"));
  s.params.threshold = 3;
  s.cohort = twice;
  assert_int_equal(xf_secagg_guard_new(&s, 1, &id, &g, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "'eu-a' is in the cohort twice"));
  s.cohort = four;
  assert_int_equal(xf_secagg_guard_new(&s, 1, &id, &g, &err), XF_OK);
  xf_secagg_guard_free(g);
  xf_secagg_x509_free(x);
  EVP_PKEY_free(k);
  free(der);
  xf_pki_trust_free(trust);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(honest_round_with_signed_messages_unmasks_the_sum_despite_dropouts),
      cmocka_unit_test(aggregator_lying_about_a_dropout_is_refused_and_learns_no_masking_key),
      cmocka_unit_test(repeated_or_outside_signatures_do_not_make_the_threshold),
      cmocka_unit_test(survivor_signatures_of_another_attempt_do_not_count),
      cmocka_unit_test(forged_or_mismatched_advert_signatures_are_refused_naming_the_site),
      cmocka_unit_test(revoked_member_certificate_is_refused),
      cmocka_unit_test(relayed_shares_without_their_senders_signature_are_refused),
      cmocka_unit_test(threshold_of_half_the_cohort_or_a_repeated_name_is_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
