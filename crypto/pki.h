/* SPDX-License-Identifier: Apache-2.0 */
/* The federation PKI on OpenSSL 3: SPIFFE identities in X.509 URI SANs, the
 * federation directory (CA, issued identities, CRL, index), and verification
 * of a peer's certificate against the CA and the CRL. */
#ifndef XF_CRYPTO_PKI_H
#define XF_CRYPTO_PKI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "base/name.h"
#include "base/result.h"

/* ---- names and SPIFFE IDs ------------------------------------------------ */

/* A label (federation, region, name) is 1..63 lowercase letters, digits and
 * '-', neither first nor last: a DNS label (base/name.h), so it is safe in a
 * URI, a file name and an OpenSSL configuration string without escaping. */
#define XF_PKI_LABEL_MAX XF_NAME_MAX
/* Bytes for the longest SPIFFE ID of ours (219 characters) plus the NUL. */
#define XF_SPIFFE_MAX 256
/* A serial in lowercase hex, at most 20 octets (RFC 5280), plus the NUL. */
#define XF_PKI_SERIAL_HEX 41

typedef enum xf_pki_kind {
  XF_PKI_KIND_NONE = 0,
  XF_PKI_KIND_SITE,
  XF_PKI_KIND_COORDINATOR,
  XF_PKI_KIND_USER
} xf_pki_kind;

typedef enum xf_pki_role {
  XF_PKI_ROLE_NONE = 0,
  XF_PKI_ROLE_RESEARCHER,
  XF_PKI_ROLE_COMPLIANCE,
  XF_PKI_ROLE_ADMIN
} xf_pki_role;

/* "site", "coordinator", "user"; "none" for XF_PKI_KIND_NONE. Never NULL. */
const char *xf_pki_kind_name(xf_pki_kind kind);
/* "researcher", "compliance", "admin"; "none" for XF_PKI_ROLE_NONE. */
const char *xf_pki_role_name(xf_pki_role role);
/* The inverses; XF_EINVAL naming the accepted words otherwise. */
xf_err xf_pki_kind_parse(const char *s, xf_pki_kind *out, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_pki_role_parse(const char *s, xf_pki_role *out, xf_errctx *err) XF_WARN_UNUSED;

/* XF_OK when s is a label (see XF_PKI_LABEL_MAX); else XF_EINVAL with a
 * message "WHAT 'S' <what is wrong>". */
xf_err xf_pki_label_check(const char *what, const char *s, xf_errctx *err) XF_WARN_UNUSED;

/* A parsed identity. Strings are NUL-terminated labels; region is "" for a
 * user and for the global coordinator; role is XF_PKI_ROLE_NONE unless kind
 * is XF_PKI_KIND_USER. */
typedef struct xf_spiffe_id {
  char federation[XF_PKI_LABEL_MAX + 1];
  xf_pki_kind kind;
  char region[XF_PKI_LABEL_MAX + 1];
  char name[XF_PKI_LABEL_MAX + 1];
  xf_pki_role role;
} xf_spiffe_id;

/* Parses exactly one of the forms (uri is untrusted, NUL-terminated):
 *   spiffe://FED/region/R/site/N
 *   spiffe://FED/region/R/coordinator/N
 *   spiffe://FED/coordinator/N                (the global coordinator)
 *   spiffe://FED/user/N/role/researcher|compliance|admin
 * Lowercase only; no port, user info, query, fragment, percent-encoding,
 * empty or dot segments, or trailing '/'. On failure *out is zeroed and the
 * result is XF_EFORMAT with a message naming what is wrong. */
xf_err xf_spiffe_parse(const char *uri, xf_spiffe_id *out, xf_errctx *err) XF_WARN_UNUSED;

/* Writes id's URI into out after checking it as xf_spiffe_parse would
 * (XF_EINVAL when a part is missing, not a label, or not allowed for kind). */
xf_err xf_spiffe_format(const xf_spiffe_id *id, char out[XF_SPIFFE_MAX],
                        xf_errctx *err) XF_WARN_UNUSED;

/* The identity of a peer: cert (borrowed) must carry exactly one URI SAN
 * in one subjectAltName extension, and it must parse with xf_spiffe_parse.
 * Checks nothing about trust: call xf_pki_verify for that. XF_EFORMAT
 * otherwise, with err->field "subjectAltName". */
xf_err xf_pki_peer_identity(X509 *cert, xf_spiffe_id *out, xf_errctx *err) XF_WARN_UNUSED;

/* ---- loading certificates and keys -------------------------------------- */

/* Reads one PEM certificate. The caller owns *out (X509_free). XF_ENOENT,
 * XF_EIO, or XF_EFORMAT with OpenSSL's reason; err->file is path. */
xf_err xf_pki_cert_load(const char *path, X509 **out, xf_errctx *err) XF_WARN_UNUSED;

/* Reads one PEM private key. The file must be a regular file with no
 * permission bits for group or others: a key that others may read is
 * refused (XF_EINVAL, telling the operator to chmod 600) before a byte of it
 * is read. The file's bytes are wiped from memory after parsing. The caller
 * owns *out (EVP_PKEY_free). */
xf_err xf_pki_key_load(const char *path, EVP_PKEY **out, xf_errctx *err) XF_WARN_UNUSED;

/* Not-before and not-after of cert (borrowed) in Unix seconds. */
xf_err xf_pki_cert_times(const X509 *cert, int64_t *not_before, int64_t *not_after,
                         xf_errctx *err) XF_WARN_UNUSED;

/* ---- verification -------------------------------------------------------- */

/* X(NAME, word, message): why a certificate was not accepted. */
#define XF_PKI_VERDICT_MAP(X)                                                        \
  X(OK, "ok", "valid")                                                               \
  X(EXPIRED, "expired", "the certificate has expired")                               \
  X(NOT_YET_VALID, "not-yet-valid", "the certificate is not valid yet")              \
  X(REVOKED, "revoked", "the certificate is revoked")                                \
  X(UNTRUSTED, "untrusted", "the certificate is not signed by this federation's CA") \
  X(BAD_SIGNATURE, "bad-signature", "the certificate's signature does not verify")   \
  X(CRL_MISSING, "crl-missing", "no CRL of this federation's CA is loaded")           \
  X(CRL_EXPIRED, "crl-expired", "the CRL is past its next update; re-sign it")       \
  X(CRL_INVALID, "crl-invalid", "the CRL does not verify")                           \
  X(NOT_LEAF, "not-leaf", "the certificate is a CA certificate, not an identity")    \
  X(BAD_IDENTITY, "bad-identity", "the certificate carries no valid SPIFFE ID")      \
  X(WRONG_FEDERATION, "wrong-federation", "the SPIFFE ID names another federation")  \
  X(INVALID, "invalid", "the certificate is not valid")

typedef enum xf_pki_verdict {
#define XF__PKI_VERDICT_ENUM(name, word, msg) XF_PKI_##name,
  XF_PKI_VERDICT_MAP(XF__PKI_VERDICT_ENUM)
#undef XF__PKI_VERDICT_ENUM
  XF_PKI_VERDICT_COUNT
} xf_pki_verdict;

/* "expired", "revoked", ... and the message of the table. Never NULL. */
const char *xf_pki_verdict_name(xf_pki_verdict v);
const char *xf_pki_verdict_message(xf_pki_verdict v);

/* The verdict for an X509_V_ERR_* code, for a transport that lets OpenSSL
 * verify during the handshake (SSL_get_verify_result). */
xf_pki_verdict xf_pki_verdict_from_x509(long x509_error);

/* A federation's CA certificate and CRL in an X509_STORE that checks the
 * CRL for every leaf (X509_V_FLAG_CRL_CHECK). Immutable once loaded, so
 * threads may verify with one trust concurrently; reloading (on SIGHUP) is
 * loading a new one and swapping. */
typedef struct xf_pki_trust xf_pki_trust;

/* Loads ca_path (must be a CA certificate with URI SAN spiffe://FED) and
 * crl_path (must be signed by that CA). The caller owns *out
 * (xf_pki_trust_free). XF_EFORMAT / XF_EINTEGRITY / XF_ENOENT naming the file. */
xf_err xf_pki_trust_load(const char *ca_path, const char *crl_path, xf_pki_trust **out,
                         xf_errctx *err) XF_WARN_UNUSED;
/* Checks that path holds one PEM CRL (not who signed it: that takes the CA,
 * xf_pki_trust_load). XF_ENOENT, XF_EIO, or XF_EFORMAT naming the file. */
xf_err xf_pki_crl_check(const char *path, xf_errctx *err) XF_WARN_UNUSED;
void xf_pki_trust_free(xf_pki_trust *trust);
/* The federation named by the CA's SPIFFE ID; owned by trust. */
const char *xf_pki_trust_federation(const xf_pki_trust *trust);
/* The store, owned by trust, for SSL_CTX_set1_verify_cert_store (which
 * takes its own reference). Do not change it. */
X509_STORE *xf_pki_trust_store(const xf_pki_trust *trust);

/* Verifies cert (borrowed) at time `at` (0: now): chain to the CA, validity,
 * CRL (present, current, signed, cert not on it), not a CA itself, and a
 * SPIFFE ID of the trust's federation. XF_OK with *verdict XF_PKI_OK and the
 * identity in *id (may be NULL); otherwise XF_EINTEGRITY, *verdict says why
 * and err->msg says it in words (with OpenSSL's reason). verdict may be NULL. */
xf_err xf_pki_verify(const xf_pki_trust *trust, X509 *cert, time_t at, xf_spiffe_id *id,
                     xf_pki_verdict *verdict, xf_errctx *err) XF_WARN_UNUSED;

/* ---- the federation directory ------------------------------------------- */

/* Validity defaults, in days. The CRL's next update is XF_PKI_CRL_DAYS after
 * each change; `xfed pki crl` re-signs it before then. */
#define XF_PKI_CA_DAYS 3650
#define XF_PKI_CERT_DAYS 365
#define XF_PKI_CRL_DAYS 30
/* The longest validity accepted for any certificate or CRL. */
#define XF_PKI_MAX_DAYS 36500

/* RFC 5280 CRLReason codes that an operator may give. */
typedef enum xf_pki_reason {
  XF_PKI_REASON_UNSPECIFIED = 0,
  XF_PKI_REASON_KEY_COMPROMISE = 1,
  XF_PKI_REASON_AFFILIATION_CHANGED = 3,
  XF_PKI_REASON_SUPERSEDED = 4,
  XF_PKI_REASON_CESSATION_OF_OPERATION = 5,
  XF_PKI_REASON_PRIVILEGE_WITHDRAWN = 9
} xf_pki_reason;

/* "unspecified", "key-compromise", "affiliation-changed", "superseded",
 * "cessation-of-operation", "privilege-withdrawn"; and the inverse. */
const char *xf_pki_reason_name(xf_pki_reason reason);
xf_err xf_pki_reason_parse(const char *s, xf_pki_reason *out, xf_errctx *err) XF_WARN_UNUSED;

/* One issued certificate as the index records it. Times are Unix seconds. */
typedef struct xf_pki_entry {
  xf_spiffe_id id;
  char spiffe[XF_SPIFFE_MAX];
  char serial[XF_PKI_SERIAL_HEX];
  int64_t issued_at, not_before, not_after;
  bool revoked;
  int64_t revoked_at; /* when revoked */
  xf_pki_reason reason;
  bool current; /* the name's newest certificate, the one in issued/NAME.crt */
} xf_pki_entry;

/* An open federation directory (see docs/pki.md for its files). The handle
 * holds an exclusive lock (flock) on the directory until it is closed, so two
 * commands never interleave their changes; opening a second handle on the
 * same directory waits for the first to close, even in the same process.
 * Not thread-safe. */
typedef struct xf_federation xf_federation;

/* Creates the federation `name` in dir (made with mode 0700 if missing; an
 * existing directory must not hold a CA yet: XF_EEXISTS): a P-256 CA key
 * (ca.key, 0600), a self-signed CA certificate valid for `days` (ca.crt),
 * an empty CRL (crl.pem), the issued/ folder and the index (index.json,
 * written last). On success the caller owns *out (xf_federation_close). */
xf_err xf_federation_init(const char *dir, const char *name, long days, xf_federation **out,
                          xf_errctx *err) XF_WARN_UNUSED;

/* Opens an existing federation directory: reads and checks the index and
 * ca.crt (the CA key is read only when something is signed). XF_ENOENT
 * when dir holds no federation. The caller owns *out. */
xf_err xf_federation_open(const char *dir, xf_federation **out, xf_errctx *err) XF_WARN_UNUSED;

/* Releases the handle and its lock; NULL is allowed. */
void xf_federation_close(xf_federation *fed);

/* Owned by fed. */
const char *xf_federation_name(const xf_federation *fed);
const char *xf_federation_dir(const xf_federation *fed);
X509 *xf_federation_ca(const xf_federation *fed);
int64_t xf_federation_crl_next_update(const xf_federation *fed);
uint64_t xf_federation_crl_number(const xf_federation *fed);

/* The index, oldest first. Pointers stay valid until the next change. */
size_t xf_federation_count(const xf_federation *fed);
const xf_pki_entry *xf_federation_entry(const xf_federation *fed, size_t i);
/* The current entry for name, or NULL. */
const xf_pki_entry *xf_federation_find(const xf_federation *fed, const char *name);

/* Writes "DIR/issued/NAME.crt" or ".key" into buf (n bytes); XF_ERANGE when
 * it does not fit. */
xf_err xf_federation_cert_path(const xf_federation *fed, const char *name, char *buf,
                               size_t n, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_federation_key_path(const xf_federation *fed, const char *name, char *buf, size_t n,
                              xf_errctx *err) XF_WARN_UNUSED;

typedef struct xf_pki_issue_opts {
  xf_pki_kind kind;
  const char *name;   /* borrowed */
  const char *region; /* required for a site; optional for a coordinator; NULL or "" for none */
  xf_pki_role role;   /* required for a user, XF_PKI_ROLE_NONE otherwise */
  long days;          /* 0: XF_PKI_CERT_DAYS */
  bool force;         /* replace an existing name, revoking its certificate first */
  /* An explicit validity window in Unix seconds, used instead of `days` when
   * not_after is non-zero (tests of expiry, planned renewals). */
  int64_t not_before, not_after;
} xf_pki_issue_opts;

typedef struct xf_pki_issued {
  xf_pki_entry entry; /* a copy of the new index entry */
  bool replaced;      /* an existing name was re-issued (force) */
  bool revoked_old;   /* and its certificate was revoked by this call */
  char old_serial[XF_PKI_SERIAL_HEX];
} xf_pki_issued;

/* Makes a P-256 key and a certificate signed by the CA for the identity
 * in opts: exactly one URI SAN (the SPIFFE ID), plus DNS:localhost and
 * IP:127.0.0.1 for sites and coordinators; keyUsage digitalSignature;
 * extendedKeyUsage clientAuth (and serverAuth for coordinators); CA:FALSE;
 * a random 128-bit serial. Writes issued/NAME.key (0600) and NAME.crt, then
 * the index. An existing name is XF_EEXISTS unless opts->force, in which case
 * its certificate is revoked (reason superseded, CRL re-signed) before the
 * new one is made. A window outside the CA's validity is XF_ERANGE.
 * Invalid names, regions or roles are XF_EINVAL. out may be NULL. */
xf_err xf_federation_issue(xf_federation *fed, const xf_pki_issue_opts *opts, xf_pki_issued *out,
                           xf_errctx *err) XF_WARN_UNUSED;

/* Issues n new identities as xf_federation_issue does, loading the CA's key
 * once and writing the index once at the end instead of after each (the
 * index holds every identity, so writing it after each of 10,000 sites is
 * quadratic). Names must be new: an opts[i].force is XF_EINVAL before
 * anything is issued. When one fails, those before it are still recorded
 * and its error is returned; *done is how many were issued and recorded. */
xf_err xf_federation_issue_many(xf_federation *fed, const xf_pki_issue_opts *opts, size_t n,
                                size_t *done, xf_errctx *err) XF_WARN_UNUSED;

/* Revokes the current certificate of name: the CRL is re-signed with it
 * (next update XF_PKI_CRL_DAYS from now) and written before the index, so a
 * crash never leaves a revocation that the index shows but the CRL lacks.
 * XF_ENOENT for an unknown name, XF_EEXISTS when already revoked. out (may
 * be NULL) receives a copy of the entry. */
xf_err xf_federation_revoke(xf_federation *fed, const char *name, xf_pki_reason reason,
                            xf_pki_entry *out, xf_errctx *err) XF_WARN_UNUSED;

/* Re-signs the CRL with the same revocations, next update `days` from now. */
xf_err xf_federation_refresh_crl(xf_federation *fed, long days, xf_errctx *err) XF_WARN_UNUSED;

#endif
