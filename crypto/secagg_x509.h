/* SPDX-License-Identifier: Apache-2.0 */
/* The federation's PKI as secure aggregation's identity
 * (crypto/secagg_guard.h): a site signs with its certificate key (ECDSA
 * P-256, SHA-256, the signature as r || s), and a cohort member's
 * certificate is accepted when it chains to the federation's CA, is
 * current, is not on the CRL and names that member as a site. */
#ifndef XF_CRYPTO_SECAGG_X509_H
#define XF_CRYPTO_SECAGG_X509_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "base/result.h"
#include "crypto/pki.h"
#include "crypto/secagg_guard.h"

typedef struct xf_secagg_x509 xf_secagg_x509;

/* An identity that signs with key (a P-256 key: XF_EINVAL otherwise; a
 * reference is taken) and checks members against trust (borrowed: it must
 * outlive the identity, or be replaced with xf_secagg_x509_set_trust
 * first). The caller owns *out (xf_secagg_x509_free). XF_ENOMEM. */
xf_err xf_secagg_x509_new(const xf_pki_trust *trust, EVP_PKEY *key, xf_secagg_x509 **out,
                          xf_errctx *err) XF_WARN_UNUSED;
void xf_secagg_x509_free(xf_secagg_x509 *x);

/* Checks made from now on use trust (a reloaded CA and CRL). Handles that
 * open gave before keep the key they were opened with. */
void xf_secagg_x509_set_trust(xf_secagg_x509 *x, const xf_pki_trust *trust);

/* The interface for xf_secagg_guard_new; its user is x, which must outlive
 * every guard made with it. */
xf_secagg_identity xf_secagg_x509_identity(xf_secagg_x509 *x);

/* The DER encoding of cert (borrowed) in *der (xf_free), *len bytes: what a
 * site sends with its keys. XF_EINTERNAL with OpenSSL's reason; XF_ENOMEM. */
xf_err xf_secagg_x509_cert_der(X509 *cert, uint8_t **der, size_t *len,
                               xf_errctx *err) XF_WARN_UNUSED;

#endif
