/* SPDX-License-Identifier: Apache-2.0 */
/* The shared TLS 1.3 context: certificate, key, federation trust and the
 * CRL reload. */
#include "net/tls.h"

#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "base/alloc.h"
#include "base/log.h"

struct xf_tls {
  SSL_CTX *ctx;
  xf_pki_trust *trust; /* the store in ctx belongs to it (plus ctx's reference) */
  char *ca_path;
  char *crl_path;
  char federation[XF_PKI_LABEL_MAX + 1];
};

/* Fails with OpenSSL's newest reason and clears its error queue, so that the
 * next SSL_get_error on this thread is not misled by a stale entry. */
static xf_err tls_fail(xf_errctx *err, const char *what) {
  unsigned long e = ERR_peek_last_error();
  char reason[256];
  ERR_error_string_n(e, reason, sizeof(reason));
  ERR_clear_error();
  return xf_fail(err, XF_EINTERNAL, "%s: %s", what, e ? reason : "unknown OpenSSL error");
}

static xf_err tls_use_trust(xf_tls *tls, xf_pki_trust *trust, xf_errctx *err) {
  if (SSL_CTX_set1_verify_cert_store(tls->ctx, xf_pki_trust_store(trust)) != 1)
    return tls_fail(err, "cannot install the federation trust store");
  xf_pki_trust_free(tls->trust);
  tls->trust = trust;
  snprintf(tls->federation, sizeof(tls->federation), "%s", xf_pki_trust_federation(trust));
  return XF_OK;
}

xf_err xf_tls_new(const xf_tls_config *cfg, xf_tls **out, xf_errctx *err) {
  *out = NULL;
  if (!cfg || !cfg->cert_path || !cfg->key_path || !cfg->ca_path || !cfg->crl_path)
    return xf_fail(err, XF_EINVAL, "a TLS context needs a certificate, key, CA and CRL");
  X509 *cert = NULL;
  EVP_PKEY *key = NULL;
  xf_pki_trust *trust = NULL;
  xf_err rc;
  xf_tls *tls = xf_calloc(1, sizeof(*tls));
  if (!tls) return xf_fail(err, XF_ENOMEM, "out of memory for a TLS context");
  tls->ca_path = xf_strdup(cfg->ca_path);
  tls->crl_path = xf_strdup(cfg->crl_path);
  if (!tls->ca_path || !tls->crl_path) {
    rc = xf_fail(err, XF_ENOMEM, "out of memory for a TLS context");
    goto fail;
  }
  if ((rc = xf_pki_cert_load(cfg->cert_path, &cert, err)) != XF_OK) goto fail;
  if ((rc = xf_pki_key_load(cfg->key_path, &key, err)) != XF_OK) goto fail;
  if ((rc = xf_pki_trust_load(cfg->ca_path, cfg->crl_path, &trust, err)) != XF_OK) goto fail;

  tls->ctx = SSL_CTX_new(TLS_method());
  if (!tls->ctx) {
    rc = tls_fail(err, "cannot create a TLS context");
    goto fail;
  }
  /* TLS 1.3 only (PRODUCT.md): nothing older is offered or accepted. */
  if (SSL_CTX_set_min_proto_version(tls->ctx, TLS1_3_VERSION) != 1) {
    rc = tls_fail(err, "cannot require TLS 1.3");
    goto fail;
  }
  if (X509_check_private_key(cert, key) != 1) {
    ERR_clear_error();
    xf_errctx_file(err, cfg->key_path);
    rc = xf_fail(err, XF_EINVAL, "the key %s does not belong to the certificate %s",
                 cfg->key_path, cfg->cert_path);
    goto fail;
  }
  if (SSL_CTX_use_certificate(tls->ctx, cert) != 1 ||
      SSL_CTX_use_PrivateKey(tls->ctx, key) != 1) {
    rc = tls_fail(err, "cannot use the certificate and key");
    goto fail;
  }
  if ((rc = tls_use_trust(tls, trust, err)) != XF_OK) goto fail;
  trust = NULL;
  /* Both directions authenticate; a peer without a certificate fails the
   * handshake. The CRL check comes with the store (X509_V_FLAG_CRL_CHECK). */
  SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  /* No resumption: a resumed session would skip the certificate check, so a
   * revoked peer could come back until its ticket expired. */
  SSL_CTX_set_session_cache_mode(tls->ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(tls->ctx, 0);
  SSL_CTX_set_options(tls->ctx, SSL_OP_NO_TICKET);
  /* Idle connections give their 16 KiB record buffers back: a coordinator
   * holds one connection per site, most of them idle most of the time. */
  SSL_CTX_set_mode(tls->ctx, SSL_MODE_RELEASE_BUFFERS);
  X509_free(cert);
  EVP_PKEY_free(key);
  *out = tls;
  return XF_OK;

fail:
  xf_pki_trust_free(trust);
  EVP_PKEY_free(key);
  X509_free(cert);
  xf_tls_free(tls);
  return rc;
}

void xf_tls_free(xf_tls *tls) {
  if (!tls) return;
  SSL_CTX_free(tls->ctx);
  xf_pki_trust_free(tls->trust);
  xf_free(tls->ca_path);
  xf_free(tls->crl_path);
  xf_free(tls);
}

/* What the store's CRL says, for the reload's log line: how many
 * certificates it revokes, its number and when it must be re-signed. */
static void crl_summary(const xf_pki_trust *trust, char *out, size_t n) {
  snprintf(out, n, "revoked=? crl_number=? next_update=?");
  STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(xf_pki_trust_store(trust));
  for (int i = 0; i < sk_X509_OBJECT_num(objs); i++) {
    X509_CRL *crl = X509_OBJECT_get0_X509_CRL(sk_X509_OBJECT_value(objs, i));
    if (!crl) continue;
    STACK_OF(X509_REVOKED) *revoked = X509_CRL_get_REVOKED(crl);
    ASN1_INTEGER *number = X509_CRL_get_ext_d2i(crl, NID_crl_number, NULL, NULL);
    long num = number ? ASN1_INTEGER_get(number) : -1;
    ASN1_INTEGER_free(number);
    char next[64] = "?";
    const ASN1_TIME *nu = X509_CRL_get0_nextUpdate(crl);
    struct tm tm;
    if (nu && ASN1_TIME_to_tm(nu, &tm) == 1) strftime(next, sizeof(next), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(out, n, "revoked=%d crl_number=%ld next_update=%s",
             revoked ? sk_X509_REVOKED_num(revoked) : 0, num, next);
    return;
  }
}

xf_err xf_tls_reload_crl(xf_tls *tls, xf_errctx *err) {
  xf_pki_trust *trust = NULL;
  XF_GUARD(xf_pki_trust_load(tls->ca_path, tls->crl_path, &trust, err));
  xf_err rc = tls_use_trust(tls, trust, err);
  if (rc != XF_OK) {
    xf_pki_trust_free(trust);
    return rc;
  }
  char summary[160];
  crl_summary(tls->trust, summary, sizeof(summary));
  XF_INFO("tls_crl_reloaded", "crl=%s federation=%s %s", tls->crl_path, tls->federation, summary);
  return XF_OK;
}

const char *xf_tls_federation(const xf_tls *tls) { return tls->federation; }

SSL_CTX *xf_tls_ctx(xf_tls *tls) { return tls->ctx; }
