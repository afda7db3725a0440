/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS context every connection of a process shares: TLS 1.3 only, our
 * certificate and key, and the peer's certificate required and verified
 * against the federation's CA and CRL, which SIGHUP reloads. */
#ifndef XF_NET_TLS_H
#define XF_NET_TLS_H

#include <openssl/ssl.h>

#include "base/result.h"
#include "crypto/pki.h"

/* Where the context's files are (all borrowed during xf_tls_new only; the
 * CA and CRL paths are copied for xf_tls_reload_crl). */
typedef struct xf_tls_config {
  const char *cert_path; /* our certificate (PEM), issued by xfed pki issue */
  const char *key_path;  /* its key: mode 0600 or stricter */
  const char *ca_path;   /* the federation's CA certificate */
  const char *crl_path;  /* the federation's CRL */
} xf_tls_config;

/* One SSL_CTX for both directions: a connection takes the server role when
 * accepted and the client role when dialed. Not thread-safe: use it from the
 * loop thread only. */
typedef struct xf_tls xf_tls;

/* Loads the four files and builds the context: minimum and only version TLS
 * 1.3, our certificate and key (which must match: XF_EINVAL), peer
 * certificate required in both directions and verified against the CA with
 * the CRL checked for every leaf, no session tickets or session cache (every
 * connection is a full handshake, so revocation applies at once). Errors of
 * xf_pki_cert_load, xf_pki_key_load and xf_pki_trust_load pass through with
 * the file named; XF_ENOMEM; XF_EINTERNAL with OpenSSL's reason. The caller
 * owns *out and frees it with xf_tls_free after every listener and
 * connection made with it has closed. */
xf_err xf_tls_new(const xf_tls_config *cfg, xf_tls **out, xf_errctx *err) XF_WARN_UNUSED;

/* Frees tls; NULL is ignored. */
void xf_tls_free(xf_tls *tls);

/* Reads the CA and CRL again from the paths given to xf_tls_new and swaps
 * them into the live context (the SIGHUP path). Handshakes that start after
 * the call use the new CRL; established connections are not re-checked and
 * keep running. On failure the context keeps its old trust, and the error
 * names the file. Call it on the loop thread. */
xf_err xf_tls_reload_crl(xf_tls *tls, xf_errctx *err) XF_WARN_UNUSED;

/* The federation named by the CA's SPIFFE ID; owned by tls. A peer whose
 * identity names another federation is refused. */
const char *xf_tls_federation(const xf_tls *tls);

/* The OpenSSL context, owned by tls, for settings this module does not make
 * (tests use it to offer an older protocol version and see it refused).
 * Changes apply to connections made afterwards. */
SSL_CTX *xf_tls_ctx(xf_tls *tls);

#endif
