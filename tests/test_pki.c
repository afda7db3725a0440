/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the federation PKI: SPIFFE ID parsing and formatting, the
 * federation directory (init, issue, revoke, CRL, index), the certificates'
 * extensions, verification verdicts, key file modes, OpenSSL error paths,
 * allocation failures, and a TLS 1.3 handshake with the issued certificates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/alloc.h"
#include "crypto/digest.h"
#include "crypto/pki.h"

static char test_root[256];

static int group_setup(void **state) {
  (void)state;
  if (xf_test_mkdtemp(test_root, sizeof(test_root), "pki") != 0) return -1;
  return xf_crypto_init() == XF_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(test_root);
  return 0;
}

/* A fresh path test_root/name (not created). */
static void test_dir(const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/%s", test_root, name);
  xf_test_remove_tree(out);
}

static void path_in(char *out, size_t n, const char *dir, const char *file) {
  snprintf(out, n, "%s/%s", dir, file);
}

static mode_t file_mode(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return st.st_mode & 07777;
}

/* Creates federation `name` in dir and returns the open handle. */
static xf_federation *new_federation(const char *dir, const char *name) {
  xf_federation *fed = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_federation_init(dir, name, 0, &fed, &err);
  if (rc != XF_OK) fail_msg("init %s: %s", dir, err.msg);
  return fed;
}

static void issue(xf_federation *fed, xf_pki_kind kind, const char *name, const char *region,
                  xf_pki_role role, xf_pki_issued *out) {
  xf_pki_issue_opts o = {.kind = kind, .name = name, .region = region, .role = role};
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_federation_issue(fed, &o, out, &err);
  if (rc != XF_OK) fail_msg("issue %s: %s", name, err.msg);
}

static X509 *load_issued(const xf_federation *fed, const char *name) {
  char path[4096];
  X509 *cert = NULL;
  assert_int_equal(xf_federation_cert_path(fed, name, path, sizeof(path), NULL), XF_OK);
  assert_int_equal(xf_pki_cert_load(path, &cert, NULL), XF_OK);
  return cert;
}

static xf_pki_trust *load_trust(const char *dir) {
  char ca[4096], crl[4096];
  path_in(ca, sizeof(ca), dir, "ca.crt");
  path_in(crl, sizeof(crl), dir, "crl.pem");
  xf_pki_trust *t = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_pki_trust_load(ca, crl, &t, &err) != XF_OK) fail_msg("trust %s: %s", dir, err.msg);
  return t;
}

/* ---- SPIFFE IDs ------------------------------------------------------------ */

static void spiffe_parse_accepts_each_identity_form(void **state) {
  (void)state;
  static const struct {
    const char *uri;
    xf_pki_kind kind;
    const char *fed, *region, *name;
    xf_pki_role role;
  } good[] = {
      {"spiffe://acme/region/eu/site/eu-berlin", XF_PKI_KIND_SITE, "acme", "eu", "eu-berlin", 0},
      {"spiffe://acme/region/eu/coordinator/agg-eu", XF_PKI_KIND_COORDINATOR, "acme", "eu",
       "agg-eu", 0},
      {"spiffe://acme/coordinator/global", XF_PKI_KIND_COORDINATOR, "acme", "", "global", 0},
      {"spiffe://acme/user/alice/role/researcher", XF_PKI_KIND_USER, "acme", "", "alice",
       XF_PKI_ROLE_RESEARCHER},
      {"spiffe://fed-2/user/bob/role/compliance", XF_PKI_KIND_USER, "fed-2", "", "bob",
       XF_PKI_ROLE_COMPLIANCE},
      {"spiffe://x/user/0/role/admin", XF_PKI_KIND_USER, "x", "", "0", XF_PKI_ROLE_ADMIN},
      {"spiffe://a1/region/us-east-1/site/s", XF_PKI_KIND_SITE, "a1", "us-east-1", "s", 0},
      {"spiffe://acme/region/eu/site/"
       "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc",
       XF_PKI_KIND_SITE, "acme", "eu", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc",
       0},
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    xf_spiffe_id id;
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_spiffe_parse(good[i].uri, &id, &err) != XF_OK)
      fail_msg("%s: refused: %s", good[i].uri, err.msg);
    assert_int_equal(id.kind, good[i].kind);
    assert_string_equal(id.federation, good[i].fed);
    assert_string_equal(id.region, good[i].region);
    assert_string_equal(id.name, good[i].name);
    assert_int_equal(id.role, good[i].role);
    char back[XF_SPIFFE_MAX];
    assert_int_equal(xf_spiffe_format(&id, back, &err), XF_OK);
    assert_string_equal(back, good[i].uri);
  }
}

static void spiffe_parse_rejects_malformed_ids_saying_why(void **state) {
  (void)state;
  static const struct {
    const char *uri, *why;
  } bad[] = {
      {"", "does not start with spiffe://"},
      {"spiffe:/acme/coordinator/g", "does not start with spiffe://"},
      {"SPIFFE://acme/coordinator/g", "does not start with spiffe://"},
      {"https://acme/coordinator/g", "does not start with spiffe://"},
      {"spiffe://", "trust domain '' is empty"},
      {"spiffe://acme", "names the federation only"},
      {"spiffe://acme/", "path segment 1 '' is empty"},
      {"spiffe://Acme/coordinator/g", "trust domain 'Acme' must be lowercase"},
      {"spiffe://acme:443/coordinator/g", "may contain only lowercase letters"},
      {"spiffe://user@acme/coordinator/g", "may contain only lowercase letters"},
      {"spiffe://acme/coordinator/g/", "path segment 3 '' is empty"},
      {"spiffe://acme//coordinator/g", "path segment 1 '' is empty"},
      {"spiffe://acme/coordinator/g?x=1", "may contain only lowercase letters"},
      {"spiffe://acme/coordinator/g#frag", "may contain only lowercase letters"},
      {"spiffe://acme/coordinator/%67", "may contain only lowercase letters"},
      {"spiffe://acme/coordinator/..", "may contain only lowercase letters"},
      {"spiffe://acme/coordinator/-g", "may not start or end with '-'"},
      {"spiffe://acme/coordinator/g-", "may not start or end with '-'"},
      {"spiffe://acme/coordinator/G", "must be lowercase"},
      {"spiffe://acme/coordinator", "expected spiffe://FED/coordinator/N"},
      {"spiffe://acme/coordinator/a/b", "expected spiffe://FED/coordinator/N"},
      {"spiffe://acme/site/eu-berlin", "expected region/, coordinator/ or user/"},
      {"spiffe://acme/region/eu/site", "expected spiffe://FED/region/R/site/N"},
      {"spiffe://acme/region/eu/gateway/x", "neither 'site' nor 'coordinator'"},
      {"spiffe://acme/region/eu/site/a/b", "more path segments than any xfed identity"},
      {"spiffe://acme/user/alice", "expected spiffe://FED/user/N/role/ROLE"},
      {"spiffe://acme/user/alice/rank/admin", "expected spiffe://FED/user/N/role/ROLE"},
      {"spiffe://acme/user/alice/role/root", "role 'root' is not one of"},
      {"spiffe://acme/region/eu/site/"
       "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd",
       "longer than 63 characters"},
      {"spiffe://acme/region/eu/site/caf\xc3\xa9", "may contain only lowercase letters"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    xf_spiffe_id id;
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_spiffe_parse(bad[i].uri, &id, &err);
    if (rc != XF_EFORMAT) fail_msg("'%s' was accepted", bad[i].uri);
    if (!strstr(err.msg, bad[i].why))
      fail_msg("'%s': message \"%s\" does not say \"%s\"", bad[i].uri, err.msg, bad[i].why);
    assert_int_equal(id.kind, XF_PKI_KIND_NONE); /* zeroed on failure */
  }
  /* Longer than any SPIFFE ID of ours. */
  char long_uri[400];
  memset(long_uri, 'a', sizeof(long_uri) - 1);
  memcpy(long_uri, "spiffe://", 9);
  long_uri[sizeof(long_uri) - 1] = '\0';
  xf_spiffe_id id;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_spiffe_parse(long_uri, &id, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "longer than"));
  assert_int_equal(xf_spiffe_parse(NULL, &id, NULL), XF_EFORMAT);
}

static void spiffe_format_refuses_incomplete_identities(void **state) {
  (void)state;
  static const struct {
    xf_spiffe_id id;
    const char *why;
  } bad[] = {
      {{"acme", XF_PKI_KIND_SITE, "", "s1", 0}, "a site needs a region"},
      {{"acme", XF_PKI_KIND_USER, "", "alice", 0}, "a user needs a role"},
      {{"acme", XF_PKI_KIND_USER, "eu", "alice", XF_PKI_ROLE_ADMIN}, "a user belongs to no region"},
      {{"acme", XF_PKI_KIND_SITE, "eu", "s1", XF_PKI_ROLE_ADMIN}, "only users have a role"},
      {{"acme", XF_PKI_KIND_NONE, "", "x", 0}, "kind must be"},
      {{"Acme", XF_PKI_KIND_COORDINATOR, "", "g", 0}, "federation 'Acme' must be lowercase"},
      {{"acme", XF_PKI_KIND_COORDINATOR, "e_u", "g", 0}, "region 'e_u' may contain only"},
      {{"acme", XF_PKI_KIND_COORDINATOR, "", "", 0}, "name '' is empty"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char out[XF_SPIFFE_MAX];
    xf_errctx err;
    xf_errctx_clear(&err);
    assert_int_equal(xf_spiffe_format(&bad[i].id, out, &err), XF_EINVAL);
    if (!strstr(err.msg, bad[i].why))
      fail_msg("case %zu: message \"%s\" does not say \"%s\"", i, err.msg, bad[i].why);
  }
}

static void names_are_dns_labels(void **state) {
  (void)state;
  static const char *const ok[] = {"a", "eu", "eu-berlin", "site-01", "0", "a-b-c",
                                   "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc"};
  static const struct {
    const char *s, *why;
  } bad[] = {
      {"", "is empty"},
      {"-a", "may not start or end"},
      {"a-", "may not start or end"},
      {"Eu", "must be lowercase"},
      {"eu_berlin", "may contain only"},
      {"eu.berlin", "may contain only"},
      {"eu/berlin", "may contain only"},
      {"eu berlin", "may contain only"},
      {"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd", "longer than 63"},
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
    assert_int_equal(xf_pki_label_check("name", ok[i], NULL), XF_OK);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    xf_errctx err;
    xf_errctx_clear(&err);
    assert_int_equal(xf_pki_label_check("name", bad[i].s, &err), XF_EINVAL);
    if (!strstr(err.msg, bad[i].why)) fail_msg("'%s': \"%s\"", bad[i].s, err.msg);
  }
  assert_int_equal(xf_pki_label_check("name", NULL, NULL), XF_EINVAL);
  xf_pki_kind k;
  xf_pki_role r;
  xf_pki_reason why;
  assert_int_equal(xf_pki_kind_parse("coordinator", &k, NULL), XF_OK);
  assert_int_equal(k, XF_PKI_KIND_COORDINATOR);
  assert_int_equal(xf_pki_kind_parse("Site", &k, NULL), XF_EINVAL);
  assert_int_equal(xf_pki_role_parse("compliance", &r, NULL), XF_OK);
  assert_int_equal(r, XF_PKI_ROLE_COMPLIANCE);
  assert_int_equal(xf_pki_role_parse("root", &r, NULL), XF_EINVAL);
  assert_int_equal(xf_pki_reason_parse("key-compromise", &why, NULL), XF_OK);
  assert_int_equal(why, XF_PKI_REASON_KEY_COMPROMISE);
  assert_string_equal(xf_pki_reason_name(XF_PKI_REASON_PRIVILEGE_WITHDRAWN), "privilege-withdrawn");
  assert_int_equal(xf_pki_reason_parse("compromised", &why, NULL), XF_EINVAL);
}

/* ---- the federation directory --------------------------------------------- */

static void init_issue_revoke_show_round_trip(void **state) {
  (void)state;
  char dir[512], path[4096];
  test_dir("roundtrip", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  assert_string_equal(xf_federation_name(fed), "acme");
  assert_int_equal(xf_federation_count(fed), 0);
  assert_int_equal(xf_federation_crl_number(fed), 1);
  int64_t now = (int64_t)time(NULL);
  assert_true(xf_federation_crl_next_update(fed) > now + 29 * 86400);
  path_in(path, sizeof(path), dir, "ca.key");
  assert_int_equal(file_mode(path), 0600);
  path_in(path, sizeof(path), dir, "ca.crt");
  assert_int_equal(file_mode(path), 0644);
  assert_int_equal(file_mode(dir), 0700);

  xf_pki_issued site, coord, user;
  issue(fed, XF_PKI_KIND_SITE, "eu-berlin", "eu", 0, &site);
  issue(fed, XF_PKI_KIND_COORDINATOR, "agg-eu", "eu", 0, &coord);
  issue(fed, XF_PKI_KIND_USER, "alice", NULL, XF_PKI_ROLE_RESEARCHER, &user);
  assert_string_equal(site.entry.spiffe, "spiffe://acme/region/eu/site/eu-berlin");
  assert_string_equal(coord.entry.spiffe, "spiffe://acme/region/eu/coordinator/agg-eu");
  assert_string_equal(user.entry.spiffe, "spiffe://acme/user/alice/role/researcher");
  assert_false(site.replaced);
  assert_true(site.entry.current);
  /* 128 random bits: at most 32 hex digits, and different each time. */
  assert_true(strlen(site.entry.serial) <= 32 && strlen(site.entry.serial) >= 20);
  assert_string_not_equal(site.entry.serial, coord.entry.serial);
  assert_true(site.entry.not_after - site.entry.not_before >= 365 * 86400);
  assert_int_equal(xf_federation_key_path(fed, "alice", path, sizeof(path), NULL), XF_OK);
  assert_int_equal(file_mode(path), 0600);

  xf_pki_entry revoked;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_revoke(fed, "alice", XF_PKI_REASON_KEY_COMPROMISE, &revoked, &err),
                   XF_OK);
  assert_true(revoked.revoked);
  assert_int_equal(revoked.reason, XF_PKI_REASON_KEY_COMPROMISE);
  assert_int_equal(xf_federation_crl_number(fed), 2);
  assert_int_equal(xf_federation_revoke(fed, "alice", XF_PKI_REASON_UNSPECIFIED, NULL, &err),
                   XF_EEXISTS);
  assert_non_null(strstr(err.msg, "already revoked"));
  assert_int_equal(xf_federation_revoke(fed, "nobody", XF_PKI_REASON_UNSPECIFIED, NULL, &err),
                   XF_ENOENT);
  xf_federation_close(fed);

  /* Everything is in the index on disk. */
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_OK);
  assert_int_equal(xf_federation_count(fed), 3);
  assert_int_equal(xf_federation_crl_number(fed), 2);
  const xf_pki_entry *e = xf_federation_find(fed, "eu-berlin");
  assert_non_null(e);
  assert_string_equal(e->serial, site.entry.serial);
  assert_int_equal(e->id.kind, XF_PKI_KIND_SITE);
  assert_string_equal(e->id.region, "eu");
  assert_false(e->revoked);
  assert_int_equal(e->not_after, site.entry.not_after);
  e = xf_federation_find(fed, "alice");
  assert_non_null(e);
  assert_true(e->revoked);
  assert_int_equal(e->reason, XF_PKI_REASON_KEY_COMPROMISE);
  assert_int_equal(e->id.role, XF_PKI_ROLE_RESEARCHER);
  assert_null(xf_federation_find(fed, "nobody"));

  /* A CRL refresh keeps the revocation and bumps the number. */
  assert_int_equal(xf_federation_refresh_crl(fed, 90, &err), XF_OK);
  assert_int_equal(xf_federation_crl_number(fed), 3);
  assert_true(xf_federation_crl_next_update(fed) > now + 89 * 86400);
  xf_federation_close(fed);

  xf_pki_trust *trust = load_trust(dir);
  assert_string_equal(xf_pki_trust_federation(trust), "acme");
  X509 *cert = NULL;
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_OK);
  cert = load_issued(fed, "alice");
  xf_pki_verdict v;
  assert_int_equal(xf_pki_verify(trust, cert, 0, NULL, &v, &err), XF_EINTEGRITY);
  assert_int_equal(v, XF_PKI_REVOKED);
  X509_free(cert);
  xf_federation_close(fed);
  xf_pki_trust_free(trust);
}

static bool has_general_name(GENERAL_NAMES *gens, int type, const char *value) {
  for (int i = 0; i < sk_GENERAL_NAME_num(gens); i++) {
    GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
    if (g->type != type) continue;
    if (type == GEN_IPADD) {
      ASN1_OCTET_STRING *ip = g->d.iPAddress;
      static const unsigned char loopback[4] = {127, 0, 0, 1};
      if (ASN1_STRING_length(ip) == 4 && memcmp(ASN1_STRING_get0_data(ip), loopback, 4) == 0)
        return true;
    } else {
      ASN1_IA5STRING *s = type == GEN_DNS ? g->d.dNSName : g->d.uniformResourceIdentifier;
      if ((size_t)ASN1_STRING_length(s) == strlen(value) &&
          memcmp(ASN1_STRING_get0_data(s), value, strlen(value)) == 0)
        return true;
    }
  }
  return false;
}

static int count_uris(GENERAL_NAMES *gens) {
  int n = 0;
  for (int i = 0; i < sk_GENERAL_NAME_num(gens); i++)
    n += sk_GENERAL_NAME_value(gens, i)->type == GEN_URI;
  return n;
}

static void issued_certificates_carry_the_spiffe_forms_and_extensions(void **state) {
  (void)state;
  char dir[512];
  test_dir("forms", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  static const struct {
    xf_pki_kind kind;
    const char *name, *region;
    xf_pki_role role;
    const char *uri;
    bool network, server;
  } cases[] = {
      {XF_PKI_KIND_SITE, "eu-berlin", "eu", 0, "spiffe://acme/region/eu/site/eu-berlin", true,
       false},
      {XF_PKI_KIND_COORDINATOR, "agg-eu", "eu", 0, "spiffe://acme/region/eu/coordinator/agg-eu",
       true, true},
      {XF_PKI_KIND_COORDINATOR, "global", NULL, 0, "spiffe://acme/coordinator/global", true, true},
      {XF_PKI_KIND_USER, "alice", NULL, XF_PKI_ROLE_RESEARCHER,
       "spiffe://acme/user/alice/role/researcher", false, false},
      {XF_PKI_KIND_USER, "carol", NULL, XF_PKI_ROLE_COMPLIANCE,
       "spiffe://acme/user/carol/role/compliance", false, false},
      {XF_PKI_KIND_USER, "root", NULL, XF_PKI_ROLE_ADMIN, "spiffe://acme/user/root/role/admin",
       false, false},
  };
  X509 *ca = xf_federation_ca(fed);
  assert_int_equal(X509_check_ca(ca), 1);
  assert_true(X509_get_key_usage(ca) & KU_KEY_CERT_SIGN);
  assert_true(X509_get_key_usage(ca) & KU_CRL_SIGN);
  char cn[64];
  X509_NAME_get_text_by_NID(X509_get_subject_name(ca), NID_commonName, cn, sizeof(cn));
  assert_string_equal(cn, "xfed acme CA");
  GENERAL_NAMES *ca_gens = X509_get_ext_d2i(ca, NID_subject_alt_name, NULL, NULL);
  assert_true(has_general_name(ca_gens, GEN_URI, "spiffe://acme"));
  GENERAL_NAMES_free(ca_gens);
  int crit = 0;
  BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(ca, NID_basic_constraints, &crit, NULL);
  assert_non_null(bc);
  assert_int_equal(crit, 1);
  assert_true(bc->ca);
  BASIC_CONSTRAINTS_free(bc);

  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    issue(fed, cases[i].kind, cases[i].name, cases[i].region, cases[i].role, NULL);
    X509 *cert = load_issued(fed, cases[i].name);
    GENERAL_NAMES *gens = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    assert_non_null(gens);
    assert_int_equal(count_uris(gens), 1);
    assert_true(has_general_name(gens, GEN_URI, cases[i].uri));
    assert_int_equal(has_general_name(gens, GEN_DNS, "localhost"), cases[i].network);
    assert_int_equal(has_general_name(gens, GEN_IPADD, NULL), cases[i].network);
    GENERAL_NAMES_free(gens);
    assert_int_equal(X509_check_ca(cert), 0);
    assert_int_equal(X509_get_key_usage(cert), KU_DIGITAL_SIGNATURE);
    uint32_t xku = X509_get_extended_key_usage(cert);
    assert_true(xku & XKU_SSL_CLIENT);
    assert_int_equal((xku & XKU_SSL_SERVER) != 0, cases[i].server);
    assert_int_equal(X509_check_issued(ca, cert), X509_V_OK);
    EVP_PKEY *pub = X509_get0_pubkey(cert);
    assert_string_equal(EVP_PKEY_get0_type_name(pub), "EC");
    char group[32];
    assert_int_equal(EVP_PKEY_get_group_name(pub, group, sizeof(group), NULL), 1);
    assert_string_equal(group, "prime256v1");

    xf_spiffe_id id;
    xf_errctx err;
    xf_errctx_clear(&err);
    assert_int_equal(xf_pki_peer_identity(cert, &id, &err), XF_OK);
    assert_int_equal(id.kind, cases[i].kind);
    assert_string_equal(id.name, cases[i].name);
    assert_string_equal(id.region, cases[i].region ? cases[i].region : "");
    assert_int_equal(id.role, cases[i].role);
    X509_free(cert);

    /* The key on disk is 0600 and belongs to the certificate. */
    char key_path[4096];
    EVP_PKEY *key = NULL;
    assert_int_equal(xf_federation_key_path(fed, cases[i].name, key_path, sizeof(key_path), NULL),
                     XF_OK);
    assert_int_equal(file_mode(key_path), 0600);
    assert_int_equal(xf_pki_key_load(key_path, &key, &err), XF_OK);
    cert = load_issued(fed, cases[i].name);
    assert_int_equal(X509_check_private_key(cert, key), 1);
    EVP_PKEY_free(key);
    X509_free(cert);
  }
  xf_federation_close(fed);
}

static void issue_refuses_bad_identities_and_windows(void **state) {
  (void)state;
  char dir[512];
  test_dir("refuse", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  static const struct {
    xf_pki_issue_opts o;
    xf_err code;
    const char *why;
  } bad[] = {
      {{.kind = XF_PKI_KIND_SITE, .name = "s1"}, XF_EINVAL, "a site needs a region"},
      {{.kind = XF_PKI_KIND_USER, .name = "u1"}, XF_EINVAL, "a user needs a role"},
      {{.kind = XF_PKI_KIND_SITE, .name = "S1", .region = "eu"}, XF_EINVAL, "must be lowercase"},
      {{.kind = XF_PKI_KIND_SITE, .name = "s1", .region = "eu/x"}, XF_EINVAL, "region 'eu/x'"},
      {{.kind = XF_PKI_KIND_SITE, .name = "../ca", .region = "eu"}, XF_EINVAL, "may contain only"},
      {{.kind = XF_PKI_KIND_SITE, .name = "s1", .region = "eu", .days = 40000}, XF_ERANGE,
       "outside 1 to"},
      {{.kind = XF_PKI_KIND_SITE, .name = "s1", .region = "eu", .days = 5000}, XF_ERANGE,
       "would outlive the CA"},
      {{.kind = XF_PKI_KIND_SITE, .name = "s1", .region = "eu", .not_before = 100,
        .not_after = 50},
       XF_ERANGE, "ends before it starts"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_federation_issue(fed, &bad[i].o, NULL, &err);
    if (rc != bad[i].code || !strstr(err.msg, bad[i].why))
      fail_msg("case %zu: %s \"%s\", expected %s \"%s\"", i, xf_err_name(rc), err.msg,
               xf_err_name(bad[i].code), bad[i].why);
  }
  assert_int_equal(xf_federation_count(fed), 0);
  xf_federation_close(fed);
}

/* A batch is recorded once, as if each had been issued alone; a name
 * already there stops it after those before it, which stay recorded; a
 * forced re-issue is refused before anything is made. */
static void a_batch_is_recorded_like_single_issues_and_stops_at_an_existing_name(void **state) {
  (void)state;
  char dir[512];
  test_dir("batch", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  issue(fed, XF_PKI_KIND_SITE, "taken", "eu", 0, NULL);
  xf_pki_issue_opts v[] = {
      {.kind = XF_PKI_KIND_SITE, .name = "b1", .region = "eu"},
      {.kind = XF_PKI_KIND_COORDINATOR, .name = "agg-eu", .region = "eu"},
      {.kind = XF_PKI_KIND_USER, .name = "ana", .role = XF_PKI_ROLE_RESEARCHER},
  };
  size_t done = 99;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_issue_many(fed, v, 3, &done, &err), XF_OK);
  assert_int_equal(done, 3);
  xf_federation_close(fed);

  /* Reopened: the index on disk has them all, each with its files. */
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_OK);
  assert_int_equal(xf_federation_count(fed), 4);
  assert_int_equal(xf_federation_find(fed, "agg-eu")->id.kind, XF_PKI_KIND_COORDINATOR);
  assert_int_equal(xf_federation_find(fed, "ana")->id.role, XF_PKI_ROLE_RESEARCHER);
  X509 *c = load_issued(fed, "b1");
  X509_free(c);

  xf_pki_issue_opts w[] = {
      {.kind = XF_PKI_KIND_SITE, .name = "b2", .region = "eu"},
      {.kind = XF_PKI_KIND_SITE, .name = "taken", .region = "eu"},
      {.kind = XF_PKI_KIND_SITE, .name = "b3", .region = "eu"},
  };
  assert_int_equal(xf_federation_issue_many(fed, w, 3, &done, &err), XF_EEXISTS);
  assert_non_null(strstr(err.msg, "'taken' already exists"));
  assert_int_equal(done, 1);
  assert_non_null(xf_federation_find(fed, "b2"));
  assert_null(xf_federation_find(fed, "b3"));

  w[2].force = true;
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_issue_many(fed, &w[2], 1, &done, &err), XF_EINVAL);
  assert_int_equal(done, 0);
  assert_non_null(strstr(err.msg, "new names only"));
  assert_null(xf_federation_find(fed, "b3"));
  xf_federation_close(fed);

  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_OK);
  assert_int_equal(xf_federation_count(fed), 5);
  assert_non_null(xf_federation_find(fed, "b2"));
  xf_federation_close(fed);
}

static void reissue_needs_force_and_revokes_the_old_certificate(void **state) {
  (void)state;
  char dir[512];
  test_dir("reissue", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  xf_pki_issued first, second;
  issue(fed, XF_PKI_KIND_SITE, "s1", "eu", 0, &first);
  X509 *old_cert = load_issued(fed, "s1");

  xf_pki_issue_opts o = {.kind = XF_PKI_KIND_SITE, .name = "s1", .region = "eu"};
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_issue(fed, &o, NULL, &err), XF_EEXISTS);
  assert_non_null(strstr(err.msg, "--force"));
  assert_non_null(strstr(err.msg, first.entry.serial));
  /* Names are unique across kinds. */
  o.kind = XF_PKI_KIND_COORDINATOR;
  assert_int_equal(xf_federation_issue(fed, &o, NULL, &err), XF_EEXISTS);
  o.kind = XF_PKI_KIND_SITE;

  o.force = true;
  assert_int_equal(xf_federation_issue(fed, &o, &second, &err), XF_OK);
  assert_true(second.replaced);
  assert_true(second.revoked_old);
  assert_string_equal(second.old_serial, first.entry.serial);
  assert_string_not_equal(second.entry.serial, first.entry.serial);
  assert_int_equal(xf_federation_count(fed), 2);
  const xf_pki_entry *old = xf_federation_entry(fed, 0);
  assert_true(old->revoked);
  assert_false(old->current);
  assert_int_equal(old->reason, XF_PKI_REASON_SUPERSEDED);
  assert_string_equal(xf_federation_find(fed, "s1")->serial, second.entry.serial);

  /* A revoked name re-issued with force is not revoked twice. */
  assert_int_equal(xf_federation_revoke(fed, "s1", XF_PKI_REASON_UNSPECIFIED, NULL, &err), XF_OK);
  xf_pki_issued third;
  assert_int_equal(xf_federation_issue(fed, &o, &third, &err), XF_OK);
  assert_true(third.replaced);
  assert_false(third.revoked_old);
  xf_federation_close(fed);

  xf_pki_trust *trust = load_trust(dir);
  xf_pki_verdict v;
  assert_int_equal(xf_pki_verify(trust, old_cert, 0, NULL, &v, NULL), XF_EINTEGRITY);
  assert_int_equal(v, XF_PKI_REVOKED);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_OK);
  X509 *cur = load_issued(fed, "s1");
  xf_spiffe_id id;
  assert_int_equal(xf_pki_verify(trust, cur, 0, &id, &v, &err), XF_OK);
  assert_string_equal(id.name, "s1");
  X509_free(cur);
  X509_free(old_cert);
  xf_federation_close(fed);
  xf_pki_trust_free(trust);
}

static void second_init_is_refused(void **state) {
  (void)state;
  char dir[512], path[4096];
  test_dir("twice", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  xf_federation_close(fed);
  path_in(path, sizeof(path), dir, "ca.crt");
  X509 *before = NULL;
  assert_int_equal(xf_pki_cert_load(path, &before, NULL), XF_OK);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_init(dir, "acme", 0, &fed, &err), XF_EEXISTS);
  assert_null(fed);
  assert_non_null(strstr(err.msg, "already holds a federation CA"));
  /* The CA is untouched. */
  X509 *after = NULL;
  assert_int_equal(xf_pki_cert_load(path, &after, NULL), XF_OK);
  assert_int_equal(X509_cmp(before, after), 0);
  X509_free(before);
  X509_free(after);
  /* A bad federation name never creates anything. */
  test_dir("badname", dir, sizeof(dir));
  assert_int_equal(xf_federation_init(dir, "Acme Corp", 0, &fed, &err), XF_EINVAL);
  assert_int_not_equal(access(dir, F_OK), 0);
  /* Opening a folder without a federation says how to make one. */
  test_dir("empty", dir, sizeof(dir));
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "xfed pki init"));
}

/* ---- verification ---------------------------------------------------------- */

/* A leaf signed by the CA of dir (or self-signed when ca is NULL) with the
 * given subjectAltName value ("" for none). */
static X509 *craft_cert(X509 *ca, EVP_PKEY *ca_key, const char *san, bool is_ca) {
  EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  X509 *x = X509_new();
  assert_non_null(key);
  assert_non_null(x);
  X509_set_version(x, X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 4242);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_NAME *name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)"crafted", -1, -1,
                             0);
  X509_set_issuer_name(x, ca ? X509_get_subject_name(ca) : name);
  X509_set_pubkey(x, key);
  X509V3_CTX v3;
  X509V3_set_ctx(&v3, ca ? ca : x, x, NULL, NULL, 0);
  const char *values[][2] = {{"basicConstraints", is_ca ? "critical,CA:TRUE" : "CA:FALSE"},
                             {"subjectKeyIdentifier", "hash"},
                             {"authorityKeyIdentifier", "keyid:always"},
                             {"subjectAltName", san}};
  for (size_t i = 0; i < 4; i++) {
    if (!values[i][1][0]) continue;
    X509_EXTENSION *ext = X509V3_EXT_nconf(NULL, &v3, values[i][0], values[i][1]);
    assert_non_null(ext);
    assert_int_equal(X509_add_ext(x, ext, -1), 1);
    X509_EXTENSION_free(ext);
  }
  assert_true(X509_sign(x, ca_key ? ca_key : key, EVP_sha256()) > 0);
  EVP_PKEY_free(key);
  return x;
}

static void peer_identity_needs_exactly_one_spiffe_uri(void **state) {
  (void)state;
  static const struct {
    const char *san, *why;
  } bad[] = {
      {"", "no subjectAltName"},
      {"DNS:localhost", "has 0 URI SANs"},
      {"URI:spiffe://acme/coordinator/a,URI:spiffe://acme/coordinator/b", "has 2 URI SANs"},
      {"URI:https://acme.example/coordinator/a", "does not start with spiffe://"},
      {"URI:spiffe://acme", "names the federation only"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    X509 *cert = craft_cert(NULL, NULL, bad[i].san, false);
    xf_spiffe_id id;
    xf_errctx err;
    xf_errctx_clear(&err);
    assert_int_equal(xf_pki_peer_identity(cert, &id, &err), XF_EFORMAT);
    if (!strstr(err.msg, bad[i].why)) fail_msg("'%s': \"%s\"", bad[i].san, err.msg);
    assert_string_equal(err.field, "subjectAltName");
    X509_free(cert);
  }
  X509 *cert = craft_cert(NULL, NULL, "URI:spiffe://acme/coordinator/a,DNS:x,IP:10.0.0.1", false);
  xf_spiffe_id id;
  assert_int_equal(xf_pki_peer_identity(cert, &id, NULL), XF_OK);
  assert_string_equal(id.name, "a");
  X509_free(cert);
  assert_int_equal(ERR_peek_error(), 0);
}

static void verify_reports_revoked_foreign_expired_and_early_certificates(void **state) {
  (void)state;
  char dir[512], other_dir[512], key_path[4096];
  test_dir("verify", dir, sizeof(dir));
  test_dir("verify-other", other_dir, sizeof(other_dir));
  xf_federation *fed = new_federation(dir, "acme");
  /* Another CA with the very same name: only its key tells it apart. */
  xf_federation *other = new_federation(other_dir, "acme");
  int64_t now = (int64_t)time(NULL);
  issue(fed, XF_PKI_KIND_SITE, "good", "eu", 0, NULL);
  issue(fed, XF_PKI_KIND_SITE, "gone", "eu", 0, NULL);
  issue(other, XF_PKI_KIND_SITE, "good", "eu", 0, NULL);
  xf_pki_issue_opts past = {.kind = XF_PKI_KIND_SITE, .name = "old", .region = "eu",
                            .not_before = now - 10 * 86400, .not_after = now - 86400};
  xf_pki_issue_opts future = {.kind = XF_PKI_KIND_USER, .name = "later",
                              .role = XF_PKI_ROLE_ADMIN, .not_before = now + 86400,
                              .not_after = now + 10 * 86400};
  assert_int_equal(xf_federation_issue(fed, &past, NULL, NULL), XF_OK);
  assert_int_equal(xf_federation_issue(fed, &future, NULL, NULL), XF_OK);
  assert_int_equal(xf_federation_revoke(fed, "gone", XF_PKI_REASON_CESSATION_OF_OPERATION, NULL,
                                        NULL),
                   XF_OK);
  xf_pki_trust *trust = load_trust(dir);

  static const struct {
    const char *name;
    bool other_ca;
    time_t at_offset;
    xf_pki_verdict want;
    const char *why;
  } cases[] = {
      {"good", false, 0, XF_PKI_OK, ""},
      {"gone", false, 0, XF_PKI_REVOKED, "revoked"},
      {"good", true, 0, XF_PKI_UNTRUSTED, "not signed by this federation's CA"},
      {"old", false, 0, XF_PKI_EXPIRED, "expired"},
      {"later", false, 0, XF_PKI_NOT_YET_VALID, "not valid yet"},
      {"later", false, 2 * 86400, XF_PKI_OK, ""},
      {"good", false, 40 * 86400, XF_PKI_CRL_EXPIRED, "re-sign it"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    X509 *cert = load_issued(cases[i].other_ca ? other : fed, cases[i].name);
    xf_spiffe_id id;
    xf_pki_verdict v = XF_PKI_INVALID;
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_pki_verify(trust, cert, cases[i].at_offset ? now + cases[i].at_offset : 0, &id,
                              &v, &err);
    if (v != cases[i].want)
      fail_msg("case %zu (%s): verdict %s (%s), expected %s", i, cases[i].name,
               xf_pki_verdict_name(v), err.msg, xf_pki_verdict_name(cases[i].want));
    assert_int_equal(rc, cases[i].want == XF_PKI_OK ? XF_OK : XF_EINTEGRITY);
    if (rc == XF_OK) assert_string_equal(id.name, cases[i].name);
    else if (!strstr(err.msg, cases[i].why))
      fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.msg, cases[i].why);
    X509_free(cert);
  }
  assert_int_equal(ERR_peek_error(), 0);

  /* The CA itself is no identity; a CA-signed certificate needs a SPIFFE ID
   * of this federation. */
  xf_pki_verdict v;
  assert_int_equal(xf_pki_verify(trust, xf_federation_ca(fed), 0, NULL, &v, NULL), XF_EINTEGRITY);
  assert_int_equal(v, XF_PKI_NOT_LEAF);
  EVP_PKEY *ca_key = NULL;
  path_in(key_path, sizeof(key_path), dir, "ca.key");
  assert_int_equal(xf_pki_key_load(key_path, &ca_key, NULL), XF_OK);
  static const struct {
    const char *san;
    xf_pki_verdict want;
  } crafted[] = {
      {"URI:spiffe://other/coordinator/g", XF_PKI_WRONG_FEDERATION},
      {"URI:spiffe://acme/admin/root", XF_PKI_BAD_IDENTITY},
      {"DNS:localhost", XF_PKI_BAD_IDENTITY},
  };
  for (size_t i = 0; i < sizeof(crafted) / sizeof(crafted[0]); i++) {
    X509 *cert = craft_cert(xf_federation_ca(fed), ca_key, crafted[i].san, false);
    assert_int_equal(xf_pki_verify(trust, cert, 0, NULL, &v, NULL), XF_EINTEGRITY);
    if (v != crafted[i].want)
      fail_msg("'%s': verdict %s", crafted[i].san, xf_pki_verdict_name(v));
    X509_free(cert);
  }
  /* A self-signed impostor with a valid-looking SPIFFE ID. */
  X509 *fake = craft_cert(NULL, NULL, "URI:spiffe://acme/coordinator/global", true);
  assert_int_equal(xf_pki_verify(trust, fake, 0, NULL, &v, NULL), XF_EINTEGRITY);
  assert_int_equal(v, XF_PKI_UNTRUSTED);
  X509_free(fake);
  EVP_PKEY_free(ca_key);
  assert_int_equal(xf_pki_verdict_from_x509(X509_V_ERR_CERT_REVOKED), XF_PKI_REVOKED);
  assert_string_equal(xf_pki_verdict_name(XF_PKI_WRONG_FEDERATION), "wrong-federation");

  xf_pki_trust_free(trust);
  xf_federation_close(fed);
  xf_federation_close(other);
}

/* ---- key files, errors, allocation failures -------------------------------- */

static void loose_key_files_are_refused_with_chmod_advice(void **state) {
  (void)state;
  char dir[512], path[4096];
  test_dir("modes", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  issue(fed, XF_PKI_KIND_SITE, "s1", "eu", 0, NULL);
  assert_int_equal(xf_federation_key_path(fed, "s1", path, sizeof(path), NULL), XF_OK);
  static const mode_t loose[] = {0640, 0604, 0644, 0660};
  for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
    assert_int_equal(chmod(path, loose[i]), 0);
    EVP_PKEY *key = NULL;
    xf_errctx err;
    xf_errctx_clear(&err);
    assert_int_equal(xf_pki_key_load(path, &key, &err), XF_EINVAL);
    assert_null(key);
    assert_non_null(strstr(err.msg, "chmod 600"));
    assert_string_equal(err.file, path);
  }
  assert_int_equal(chmod(path, 0400), 0);
  EVP_PKEY *key = NULL;
  assert_int_equal(xf_pki_key_load(path, &key, NULL), XF_OK);
  EVP_PKEY_free(key);

  /* A CA key that others may read stops issuing until it is fixed. */
  path_in(path, sizeof(path), dir, "ca.key");
  assert_int_equal(chmod(path, 0644), 0);
  xf_pki_issue_opts o = {.kind = XF_PKI_KIND_SITE, .name = "s2", .region = "eu"};
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_issue(fed, &o, NULL, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "chmod 600"));
  assert_int_equal(xf_federation_revoke(fed, "s1", XF_PKI_REASON_UNSPECIFIED, NULL, &err),
                   XF_EINVAL);
  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(xf_federation_issue(fed, &o, NULL, &err), XF_OK);
  xf_federation_close(fed);
}

static void write_text(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(path, mode), 0);
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  FILE *out = fopen(to, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
}

static void openssl_errors_are_reported_and_cleared(void **state) {
  (void)state;
  char dir[512], other_dir[512], path[4096], other[4096], saved[4096];
  test_dir("errors", dir, sizeof(dir));
  test_dir("errors-other", other_dir, sizeof(other_dir));
  xf_federation *fed = new_federation(dir, "acme");
  issue(fed, XF_PKI_KIND_SITE, "s1", "eu", 0, NULL);
  xf_federation_close(fed);
  fed = new_federation(other_dir, "acme");
  xf_federation_close(fed);
  xf_errctx err;

  /* Garbage where a key, a certificate or a CRL should be. */
  path_in(path, sizeof(path), dir, "junk.key");
  write_text(path, "-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n",
             0600);
  EVP_PKEY *key = NULL;
  xf_errctx_clear(&err);
  assert_int_equal(xf_pki_key_load(path, &key, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "OpenSSL"));
  assert_int_equal(ERR_peek_error(), 0);
  X509 *cert = NULL;
  xf_errctx_clear(&err);
  assert_int_equal(xf_pki_cert_load(path, &cert, &err), XF_EFORMAT);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "not a PEM certificate"));
  assert_int_equal(ERR_peek_error(), 0);
  path_in(path, sizeof(path), dir, "missing.crt");
  assert_int_equal(xf_pki_cert_load(path, &cert, &err), XF_ENOENT);

  /* A CRL signed by another CA of the same name is refused at load. */
  char ca[4096];
  path_in(ca, sizeof(ca), dir, "ca.crt");
  path_in(other, sizeof(other), other_dir, "crl.pem");
  xf_pki_trust *trust = NULL;
  xf_errctx_clear(&err);
  assert_int_equal(xf_pki_trust_load(ca, other, &trust, &err), XF_EINTEGRITY);
  assert_null(trust);
  assert_non_null(strstr(err.msg, "not signed by the CA"));
  assert_int_equal(ERR_peek_error(), 0);
  /* A leaf is not a CA. */
  char leaf[4096];
  path_in(leaf, sizeof(leaf), dir, "issued/s1.crt");
  path_in(path, sizeof(path), dir, "crl.pem");
  assert_int_equal(xf_pki_trust_load(leaf, path, &trust, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "not a CA certificate"));

  /* A CA key swapped for another CA's: signing refuses it. */
  path_in(path, sizeof(path), dir, "ca.key");
  path_in(saved, sizeof(saved), dir, "ca.key.saved");
  path_in(other, sizeof(other), other_dir, "ca.key");
  assert_int_equal(rename(path, saved), 0);
  copy_file(other, path);
  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_OK);
  xf_pki_issue_opts o = {.kind = XF_PKI_KIND_SITE, .name = "s2", .region = "eu"};
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_issue(fed, &o, NULL, &err), XF_EINTEGRITY);
  assert_non_null(strstr(err.msg, "does not belong to ca.crt"));
  assert_int_equal(ERR_peek_error(), 0);
  assert_int_equal(xf_federation_count(fed), 1);
  xf_federation_close(fed);
  assert_int_equal(rename(saved, path), 0);

  /* A broken ca.crt or index.json is named with the field at fault. */
  path_in(path, sizeof(path), dir, "ca.crt");
  path_in(saved, sizeof(saved), dir, "ca.crt.saved");
  assert_int_equal(rename(path, saved), 0);
  write_text(path, "hello\n", 0644);
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_EFORMAT);
  assert_string_equal(err.file, path);
  assert_int_equal(rename(saved, path), 0);
  path_in(path, sizeof(path), dir, "index.json");
  path_in(saved, sizeof(saved), dir, "index.json.saved");
  assert_int_equal(rename(path, saved), 0);
  write_text(path,
             "{\"format\": \"xfed-pki-index\", \"version\": 1, \"federation\": \"acme\",\n"
             " \"crl_number\": 1, \"crl_next_update\": 0, \"identities\": [\n"
             " {\"name\": \"s1\", \"kind\": \"site\", \"region\": \"eu\",\n"
             "  \"spiffe_id\": \"spiffe://acme/region/eu/site/s1\", \"serial\": \"XYZ\",\n"
             "  \"issued_at\": 1, \"not_before\": 1, \"not_after\": 2, \"revoked\": false,\n"
             "  \"current\": true}]}\n",
             0644);
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_EFORMAT);
  assert_string_equal(err.field, "identities[0].serial");
  write_text(path,
             "{\"format\": \"xfed-pki-index\", \"version\": 1, \"federation\": \"acme\",\n"
             " \"crl_number\": 1, \"crl_next_update\": 0, \"identities\": [\n"
             " {\"name\": \"s2\", \"kind\": \"site\", \"region\": \"eu\",\n"
             "  \"spiffe_id\": \"spiffe://acme/region/eu/site/s1\", \"serial\": \"ab\",\n"
             "  \"issued_at\": 1, \"not_before\": 1, \"not_after\": 2, \"revoked\": false,\n"
             "  \"current\": true}]}\n",
             0644);
  xf_errctx_clear(&err);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_EFORMAT);
  assert_string_equal(err.field, "identities[0]");
  assert_non_null(strstr(err.msg, "disagree with spiffe_id"));
  write_text(path, "{\"format\": \"xfed-pki-index\", \"version\": 9}", 0644);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_EFORMAT);
  assert_int_equal(rename(saved, path), 0);
  assert_int_equal(xf_federation_open(dir, &fed, &err), XF_OK);
  xf_federation_close(fed);
}

static void allocation_failures_are_reported_not_crashed(void **state) {
  (void)state;
  char dir[512];
  test_dir("alloc", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  issue(fed, XF_PKI_KIND_SITE, "s1", "eu", 0, NULL);
  issue(fed, XF_PKI_KIND_USER, "u1", NULL, XF_PKI_ROLE_ADMIN, NULL);
  xf_federation_close(fed);

  /* Opening: every allocation of ours fails in turn. */
  for (long n = 0;; n++) {
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_alloc_fail_after(n);
    xf_err rc = xf_federation_open(dir, &fed, &err);
    xf_alloc_fail_reset();
    if (rc == XF_OK) {
      assert_int_equal(xf_federation_count(fed), 2);
      xf_federation_close(fed);
      break;
    }
    assert_int_equal(rc, XF_ENOMEM);
    assert_null(fed);
    assert_true(n < 100);
  }
  /* Issuing: a failure leaves the index consistent with the handle, and a
   * later attempt succeeds exactly once. */
  assert_int_equal(xf_federation_open(dir, &fed, NULL), XF_OK);
  xf_pki_issue_opts o = {.kind = XF_PKI_KIND_SITE, .name = "walk", .region = "eu"};
  for (long n = 0;; n++) {
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_alloc_fail_after(n);
    xf_err rc = xf_federation_issue(fed, &o, NULL, &err);
    xf_alloc_fail_reset();
    if (rc == XF_OK) break;
    assert_int_equal(rc, XF_ENOMEM);
    assert_null(xf_federation_find(fed, "walk"));
    assert_true(n < 100);
  }
  xf_federation_close(fed);
  assert_int_equal(xf_federation_open(dir, &fed, NULL), XF_OK);
  assert_int_equal(xf_federation_count(fed), 3);
  assert_non_null(xf_federation_find(fed, "walk"));
  xf_federation_close(fed);
  /* Trust loading. */
  xf_pki_trust *trust = NULL;
  char ca[4096], crl[4096];
  path_in(ca, sizeof(ca), dir, "ca.crt");
  path_in(crl, sizeof(crl), dir, "crl.pem");
  for (long n = 0;; n++) {
    xf_alloc_fail_after(n);
    xf_err rc = xf_pki_trust_load(ca, crl, &trust, NULL);
    xf_alloc_fail_reset();
    if (rc == XF_OK) break;
    assert_int_equal(rc, XF_ENOMEM);
    assert_true(n < 100);
  }
  xf_pki_trust_free(trust);
}

/* ---- TLS 1.3 with the issued certificates ---------------------------------- */

static SSL_CTX *tls_context(const xf_federation *fed, const xf_pki_trust *trust, const char *name,
                            bool server) {
  char cert_path[4096], key_path[4096];
  assert_int_equal(xf_federation_cert_path(fed, name, cert_path, sizeof(cert_path), NULL), XF_OK);
  assert_int_equal(xf_federation_key_path(fed, name, key_path, sizeof(key_path), NULL), XF_OK);
  X509 *cert = NULL;
  EVP_PKEY *key = NULL;
  assert_int_equal(xf_pki_cert_load(cert_path, &cert, NULL), XF_OK);
  assert_int_equal(xf_pki_key_load(key_path, &key, NULL), XF_OK);
  SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  assert_non_null(ctx);
  assert_int_equal(SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION), 1);
  assert_int_equal(SSL_CTX_use_certificate(ctx, cert), 1);
  assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
  assert_int_equal(SSL_CTX_set1_verify_cert_store(ctx, xf_pki_trust_store(trust)), 1);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  X509_free(cert);
  EVP_PKEY_free(key);
  return ctx;
}

/* Runs a handshake over an in-memory BIO pair; 0 when both sides finish. */
static int handshake(SSL *client, SSL *server) {
  bool c_done = false, s_done = false;
  for (int i = 0; i < 64 && !(c_done && s_done); i++) {
    if (!c_done) {
      int r = SSL_do_handshake(client);
      int e = SSL_get_error(client, r);
      if (r == 1) c_done = true;
      else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return -1;
    }
    if (!s_done) {
      int r = SSL_do_handshake(server);
      int e = SSL_get_error(server, r);
      if (r == 1) s_done = true;
      else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return -2;
    }
  }
  return c_done && s_done ? 0 : -3;
}

static int connect_pair(const xf_federation *fed, const xf_pki_trust *trust, const char *server_name,
                        const char *client_name, SSL **client_out, SSL **server_out) {
  SSL_CTX *sctx = tls_context(fed, trust, server_name, true);
  SSL_CTX *cctx = tls_context(fed, trust, client_name, false);
  SSL *server = SSL_new(sctx);
  SSL *client = SSL_new(cctx);
  SSL_CTX_free(sctx); /* the SSL objects keep their own references */
  SSL_CTX_free(cctx);
  BIO *a = NULL, *b = NULL;
  assert_int_equal(BIO_new_bio_pair(&a, 0, &b, 0), 1);
  SSL_set_bio(client, a, a);
  SSL_set_bio(server, b, b);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  assert_int_equal(SSL_set1_host(client, "localhost"), 1);
  *client_out = client;
  *server_out = server;
  return handshake(client, server);
}

static void issued_certificates_authenticate_a_tls13_loopback_handshake(void **state) {
  (void)state;
  char dir[512];
  test_dir("tls", dir, sizeof(dir));
  xf_federation *fed = new_federation(dir, "acme");
  issue(fed, XF_PKI_KIND_COORDINATOR, "agg-eu", "eu", 0, NULL);
  issue(fed, XF_PKI_KIND_SITE, "eu-berlin", "eu", 0, NULL);
  xf_pki_trust *trust = load_trust(dir);

  SSL *client, *server;
  assert_int_equal(connect_pair(fed, trust, "agg-eu", "eu-berlin", &client, &server), 0);
  assert_int_equal(SSL_version(server), TLS1_3_VERSION);
  assert_int_equal(SSL_get_verify_result(server), X509_V_OK);
  xf_spiffe_id peer;
  assert_int_equal(xf_pki_peer_identity(SSL_get0_peer_certificate(server), &peer, NULL), XF_OK);
  assert_int_equal(peer.kind, XF_PKI_KIND_SITE);
  assert_string_equal(peer.name, "eu-berlin");
  assert_int_equal(xf_pki_peer_identity(SSL_get0_peer_certificate(client), &peer, NULL), XF_OK);
  assert_int_equal(peer.kind, XF_PKI_KIND_COORDINATOR);
  assert_string_equal(peer.region, "eu");
  SSL_free(client);
  SSL_free(server);

  /* Revoke the site and reload the CRL: the coordinator refuses it. */
  assert_int_equal(xf_federation_revoke(fed, "eu-berlin", XF_PKI_REASON_KEY_COMPROMISE, NULL, NULL),
                   XF_OK);
  xf_pki_trust_free(trust);
  trust = load_trust(dir);
  assert_int_not_equal(connect_pair(fed, trust, "agg-eu", "eu-berlin", &client, &server), 0);
  assert_int_equal(xf_pki_verdict_from_x509(SSL_get_verify_result(server)), XF_PKI_REVOKED);
  SSL_free(client);
  SSL_free(server);
  ERR_clear_error();
  xf_pki_trust_free(trust);
  xf_federation_close(fed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(spiffe_parse_accepts_each_identity_form),
      cmocka_unit_test(spiffe_parse_rejects_malformed_ids_saying_why),
      cmocka_unit_test(spiffe_format_refuses_incomplete_identities),
      cmocka_unit_test(names_are_dns_labels),
      cmocka_unit_test(init_issue_revoke_show_round_trip),
      cmocka_unit_test(issued_certificates_carry_the_spiffe_forms_and_extensions),
      cmocka_unit_test(issue_refuses_bad_identities_and_windows),
      cmocka_unit_test(reissue_needs_force_and_revokes_the_old_certificate),
      cmocka_unit_test(a_batch_is_recorded_like_single_issues_and_stops_at_an_existing_name),
      cmocka_unit_test(second_init_is_refused),
      cmocka_unit_test(peer_identity_needs_exactly_one_spiffe_uri),
      cmocka_unit_test(verify_reports_revoked_foreign_expired_and_early_certificates),
      cmocka_unit_test(loose_key_files_are_refused_with_chmod_advice),
      cmocka_unit_test(openssl_errors_are_reported_and_cleared),
      cmocka_unit_test(allocation_failures_are_reported_not_crashed),
      cmocka_unit_test(issued_certificates_authenticate_a_tls13_loopback_handshake),
  };
  int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
  OPENSSL_cleanup();
  return failed;
}
