/* SPDX-License-Identifier: Apache-2.0 */
/* Secure aggregation's identity on the federation PKI: ECDSA P-256
 * signatures as r || s, and members' certificates checked against the CA,
 * the CRL and the cohort's names (crypto/secagg_x509.h). */
#include "crypto/secagg_x509.h"

#include <stdio.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>

#include "base/alloc.h"

#define HALF (XF_SECAGG_SIG_BYTES / 2)

struct xf_secagg_x509 {
  const xf_pki_trust *trust;
  EVP_PKEY *key;
};

/* OpenSSL's newest reason into err, its queue emptied. */
static xf_err ossl_fail(xf_errctx *err, xf_err code, const char *what) {
  unsigned long e = ERR_peek_last_error();
  char reason[256];
  ERR_error_string_n(e, reason, sizeof(reason));
  ERR_clear_error();
  return xf_fail(err, code, "%s: %s", what, e ? reason : "unknown OpenSSL error");
}

/* Whether key is an EC key on P-256: the only kind a raw 64-byte
 * signature fits. */
static bool is_p256(EVP_PKEY *key) {
  char group[64];
  size_t len = 0;
  if (!key || !EVP_PKEY_is_a(key, "EC")) return false;
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group),
                                     &len) != 1) {
    ERR_clear_error();
    return false;
  }
  return strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0;
}

xf_err xf_secagg_x509_new(const xf_pki_trust *trust, EVP_PKEY *key, xf_secagg_x509 **out,
                          xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "secure aggregation: no output handle");
  *out = NULL;
  XF_ENSURE(trust, err, XF_EINVAL, "secure aggregation needs the federation's CA and CRL");
  XF_ENSURE(is_p256(key), err, XF_EINVAL,
            "secure aggregation signs with the site's certificate key, which must be an ECDSA "
            "P-256 key (xfed pki issue makes one)");
  xf_secagg_x509 *x = xf_calloc(1, sizeof(*x));
  if (!x) return xf_fail(err, XF_ENOMEM, "no memory for the secure-aggregation identity");
  if (EVP_PKEY_up_ref(key) != 1) {
    xf_free(x);
    return ossl_fail(err, XF_EINTERNAL, "cannot hold the site's key");
  }
  x->trust = trust;
  x->key = key;
  *out = x;
  return XF_OK;
}

void xf_secagg_x509_free(xf_secagg_x509 *x) {
  if (!x) return;
  EVP_PKEY_free(x->key);
  xf_free(x);
}

void xf_secagg_x509_set_trust(xf_secagg_x509 *x, const xf_pki_trust *trust) {
  if (x && trust) x->trust = trust;
}

xf_err xf_secagg_x509_cert_der(X509 *cert, uint8_t **der, size_t *len, xf_errctx *err) {
  XF_ENSURE(cert && der && len, err, XF_EINVAL, "no certificate to encode");
  *der = NULL;
  *len = 0;
  int n = i2d_X509(cert, NULL);
  if (n <= 0) return ossl_fail(err, XF_EINTERNAL, "cannot encode the certificate");
  uint8_t *buf = xf_malloc((size_t)n);
  if (!buf) return xf_fail(err, XF_ENOMEM, "no memory for a certificate of %d bytes", n);
  uint8_t *p = buf;
  if (i2d_X509(cert, &p) != n) {
    xf_free(buf);
    return ossl_fail(err, XF_EINTERNAL, "cannot encode the certificate");
  }
  *der = buf;
  *len = (size_t)n;
  return XF_OK;
}

/* ---- the identity's functions ------------------------------------------------------------ */

static xf_err x509_sign(void *user, const uint8_t *msg, size_t len,
                        uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  xf_secagg_x509 *x = user;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  uint8_t der[80];
  size_t der_len = sizeof(der);
  ECDSA_SIG *es = NULL;
  xf_err rc = XF_OK;
  if (!md || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, x->key) != 1 ||
      EVP_DigestSign(md, der, &der_len, msg, len) != 1) {
    rc = ossl_fail(err, XF_EINTERNAL, "cannot sign with the site's key");
    goto out;
  }
  const uint8_t *p = der;
  es = d2i_ECDSA_SIG(NULL, &p, (long)der_len);
  const BIGNUM *r = NULL, *s = NULL;
  if (es) ECDSA_SIG_get0(es, &r, &s);
  if (!es || BN_bn2binpad(r, sig, HALF) != HALF || BN_bn2binpad(s, sig + HALF, HALF) != HALF)
    rc = ossl_fail(err, XF_EINTERNAL, "cannot read the signature the site's key made");
out:
  ECDSA_SIG_free(es);
  EVP_MD_CTX_free(md);
  return rc;
}

static xf_err x509_open(void *user, const uint8_t *cert, size_t cert_len, const char *name,
                        void **peer, xf_errctx *err) {
  xf_secagg_x509 *x = user;
  *peer = NULL;
  const uint8_t *p = cert;
  X509 *c = cert_len <= XF_SECAGG_CERT_MAX ? d2i_X509(NULL, &p, (long)cert_len) : NULL;
  if (!c || p != cert + cert_len) {
    X509_free(c);
    ERR_clear_error();
    return xf_fail(err, XF_EFORMAT, "it is not one DER certificate");
  }
  xf_spiffe_id id;
  xf_pki_verdict verdict;
  xf_errctx why = {0};
  xf_err rc = xf_pki_verify(x->trust, c, 0, &id, &verdict, &why);
  EVP_PKEY *key = NULL;
  if (rc != XF_OK) {
    rc = xf_fail(err, XF_EINTEGRITY, "%s (%s)", xf_pki_verdict_message(verdict), why.msg);
  } else if (id.kind != XF_PKI_KIND_SITE || strcmp(id.name, name) != 0) {
    rc = xf_fail(err, XF_EINTEGRITY, "it was issued to the %s '%s', not to the site '%s'",
                 xf_pki_kind_name(id.kind), id.name, name);
  } else {
    key = X509_get_pubkey(c);
    if (!is_p256(key)) {
      EVP_PKEY_free(key);
      key = NULL;
      rc = xf_fail(err, XF_EINTEGRITY, "its key is not an ECDSA P-256 key");
    }
  }
  X509_free(c);
  ERR_clear_error();
  *peer = key;
  return rc;
}

static bool x509_verify(void *user, void *peer, const uint8_t *msg, size_t len,
                        const uint8_t sig[XF_SECAGG_SIG_BYTES]) {
  (void)user;
  ECDSA_SIG *es = ECDSA_SIG_new();
  BIGNUM *r = BN_bin2bn(sig, HALF, NULL), *s = BN_bin2bn(sig + HALF, HALF, NULL);
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  uint8_t *der = NULL;
  bool ok = false;
  if (es && r && s && ECDSA_SIG_set0(es, r, s) == 1) {
    r = s = NULL; /* es owns them */
    int der_len = i2d_ECDSA_SIG(es, &der);
    ok = der_len > 0 && md && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, peer) == 1 &&
         EVP_DigestVerify(md, der, (size_t)der_len, msg, len) == 1;
  }
  OPENSSL_free(der);
  EVP_MD_CTX_free(md);
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(es);
  ERR_clear_error();
  return ok;
}

static void x509_release(void *user, void *peer) {
  (void)user;
  EVP_PKEY_free(peer);
}

xf_secagg_identity xf_secagg_x509_identity(xf_secagg_x509 *x) {
  return (xf_secagg_identity){.user = x,
                              .sign = x509_sign,
                              .open = x509_open,
                              .verify = x509_verify,
                              .release = x509_release};
}
