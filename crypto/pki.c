/* SPDX-License-Identifier: Apache-2.0 */
/* The federation PKI: SPIFFE IDs, the CA directory, issuing, revoking and
 * verifying certificates with OpenSSL 3's X.509 API. */
#include "crypto/pki.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "base/log.h"
#include "base/name.h"
#include "base/file.h"

/* Certificates and CRLs are small; a larger file is not one of ours. */
#define PKI_FILE_MAX (1 << 20)
/* Validity starts this long before "now" so that peers whose clocks run a
 * little behind accept a certificate issued a moment ago. */
#define PKI_BACKDATE_S 300
#define DAY_S 86400
#define INDEX_FORMAT "xfed-pki-index"
#define INDEX_VERSION 1

/* ---- errors -------------------------------------------------------------- */

/* xf_fail with OpenSSL's most recent reason appended; empties OpenSSL's
 * error queue so that a later, unrelated call does not report it. */
static xf_err ossl_fail(xf_errctx *err, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);
static xf_err ossl_fail(xf_errctx *err, xf_err code, const char *fmt, ...) {
  char what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  unsigned long e = ERR_peek_last_error();
  const char *reason = e ? ERR_reason_error_string(e) : NULL;
  ERR_clear_error();
  if (reason) return xf_fail(err, code, "%s (OpenSSL: %s)", what, reason);
  if (e) return xf_fail(err, code, "%s (OpenSSL error 0x%lx)", what, e);
  return xf_fail(err, code, "%s", what);
}

static xf_err path_fmt(char *buf, size_t n, xf_errctx *err, const char *fmt, ...) XF_PRINTF(4, 5);
static xf_err path_fmt(char *buf, size_t n, xf_errctx *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= n) return xf_fail(err, XF_ERANGE, "path is too long: %.200s", buf);
  return XF_OK;
}

/* ---- names --------------------------------------------------------------- */

static const char *const kind_names[] = {"none", "site", "coordinator", "user"};
static const char *const role_names[] = {"none", "researcher", "compliance", "admin"};

const char *xf_pki_kind_name(xf_pki_kind kind) {
  return (unsigned)kind < 4 ? kind_names[kind] : "none";
}

const char *xf_pki_role_name(xf_pki_role role) {
  return (unsigned)role < 4 ? role_names[role] : "none";
}

xf_err xf_pki_kind_parse(const char *s, xf_pki_kind *out, xf_errctx *err) {
  for (int k = XF_PKI_KIND_SITE; k <= XF_PKI_KIND_USER; k++)
    if (s && strcmp(s, kind_names[k]) == 0) {
      *out = (xf_pki_kind)k;
      return XF_OK;
    }
  return xf_fail(err, XF_EINVAL, "kind '%.64s' is not one of site, coordinator, user",
                 s ? s : "");
}

xf_err xf_pki_role_parse(const char *s, xf_pki_role *out, xf_errctx *err) {
  for (int r = XF_PKI_ROLE_RESEARCHER; r <= XF_PKI_ROLE_ADMIN; r++)
    if (s && strcmp(s, role_names[r]) == 0) {
      *out = (xf_pki_role)r;
      return XF_OK;
    }
  return xf_fail(err, XF_EINVAL, "role '%.64s' is not one of researcher, compliance, admin",
                 s ? s : "");
}

xf_err xf_pki_label_check(const char *what, const char *s, xf_errctx *err) {
  if (!s) return xf_fail(err, XF_EINVAL, "%s is missing", what);
  const char *problem = xf_label_problem(s, strnlen(s, XF_PKI_LABEL_MAX + 1));
  if (problem) return xf_fail(err, XF_EINVAL, "%s '%.64s' %s", what, s, problem);
  return XF_OK;
}

static const struct {
  xf_pki_reason code;
  const char *name;
} reasons[] = {
    {XF_PKI_REASON_UNSPECIFIED, "unspecified"},
    {XF_PKI_REASON_KEY_COMPROMISE, "key-compromise"},
    {XF_PKI_REASON_AFFILIATION_CHANGED, "affiliation-changed"},
    {XF_PKI_REASON_SUPERSEDED, "superseded"},
    {XF_PKI_REASON_CESSATION_OF_OPERATION, "cessation-of-operation"},
    {XF_PKI_REASON_PRIVILEGE_WITHDRAWN, "privilege-withdrawn"},
};

const char *xf_pki_reason_name(xf_pki_reason reason) {
  for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
    if (reasons[i].code == reason) return reasons[i].name;
  return "unspecified";
}

xf_err xf_pki_reason_parse(const char *s, xf_pki_reason *out, xf_errctx *err) {
  for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
    if (s && strcmp(s, reasons[i].name) == 0) {
      *out = reasons[i].code;
      return XF_OK;
    }
  return xf_fail(err, XF_EINVAL,
                 "reason '%.64s' is not one of unspecified, key-compromise, affiliation-changed, "
                 "superseded, cessation-of-operation, privilege-withdrawn",
                 s ? s : "");
}

/* ---- SPIFFE IDs ---------------------------------------------------------- */

#define SPIFFE_PREFIX "spiffe://"
#define SPIFFE_MAX_SEGMENTS 5

xf_err xf_spiffe_parse(const char *uri, xf_spiffe_id *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  XF_ENSURE(uri, err, XF_EFORMAT, "no SPIFFE ID");
  size_t len = strnlen(uri, XF_SPIFFE_MAX);
  XF_ENSURE(len < XF_SPIFFE_MAX, err, XF_EFORMAT, "SPIFFE ID is longer than %d characters",
            XF_SPIFFE_MAX - 1);
  xf_cursor c = xf_cursor_make(uri, len);
  const uint8_t *scheme;
  if (xf_cursor_view(&c, &scheme, strlen(SPIFFE_PREFIX)) != XF_OK ||
      memcmp(scheme, SPIFFE_PREFIX, strlen(SPIFFE_PREFIX)) != 0)
    return xf_fail(err, XF_EFORMAT, "'%.80s' does not start with " SPIFFE_PREFIX, uri);

  /* Split the rest at '/' into at most SPIFFE_MAX_SEGMENTS labels. */
  char seg[SPIFFE_MAX_SEGMENTS][XF_PKI_LABEL_MAX + 1];
  size_t nseg = 0;
  for (;;) {
    XF_ENSURE(nseg < SPIFFE_MAX_SEGMENTS, err, XF_EFORMAT,
              "'%.80s' has more path segments than any xfed identity", uri);
    size_t n = 0;
    uint8_t ch = 0;
    bool more = false;
    while (xf_cursor_remaining(&c) > 0) {
      if (xf_cursor_u8(&c, &ch) != XF_OK) break;
      if (ch == '/') {
        more = true;
        break;
      }
      XF_ENSURE(n < XF_PKI_LABEL_MAX, err, XF_EFORMAT,
                "'%.80s': segment %zu is longer than 63 characters", uri, nseg + 1);
      seg[nseg][n++] = (char)ch;
    }
    seg[nseg][n] = '\0';
    const char *problem = xf_label_problem(seg[nseg], n);
    if (problem) {
      if (nseg == 0)
        return xf_fail(err, XF_EFORMAT, "'%.80s': trust domain '%s' %s", uri, seg[0], problem);
      return xf_fail(err, XF_EFORMAT, "'%.80s': path segment %zu '%s' %s", uri, nseg, seg[nseg],
                     problem);
    }
    nseg++;
    if (!more) break;
  }

  xf_spiffe_id id;
  memset(&id, 0, sizeof(id));
  memcpy(id.federation, seg[0], sizeof(id.federation));
  XF_ENSURE(nseg > 1, err, XF_EFORMAT,
            "'%.80s' names the federation only (the CA's form), not an identity", uri);
  const char *head = seg[1];
  if (strcmp(head, "region") == 0) {
    XF_ENSURE(nseg == 5, err, XF_EFORMAT,
              "'%.80s': expected spiffe://FED/region/R/site/N or .../region/R/coordinator/N",
              uri);
    if (strcmp(seg[3], "site") == 0) id.kind = XF_PKI_KIND_SITE;
    else if (strcmp(seg[3], "coordinator") == 0) id.kind = XF_PKI_KIND_COORDINATOR;
    else
      return xf_fail(err, XF_EFORMAT, "'%.80s': '%s' after the region is neither 'site' nor "
                     "'coordinator'", uri, seg[3]);
    memcpy(id.region, seg[2], sizeof(id.region));
    memcpy(id.name, seg[4], sizeof(id.name));
  } else if (strcmp(head, "coordinator") == 0) {
    XF_ENSURE(nseg == 3, err, XF_EFORMAT, "'%.80s': expected spiffe://FED/coordinator/N", uri);
    id.kind = XF_PKI_KIND_COORDINATOR;
    memcpy(id.name, seg[2], sizeof(id.name));
  } else if (strcmp(head, "user") == 0) {
    XF_ENSURE(nseg == 5 && strcmp(seg[3], "role") == 0, err, XF_EFORMAT,
              "'%.80s': expected spiffe://FED/user/N/role/ROLE", uri);
    id.kind = XF_PKI_KIND_USER;
    memcpy(id.name, seg[2], sizeof(id.name));
    if (xf_pki_role_parse(seg[4], &id.role, NULL) != XF_OK)
      return xf_fail(err, XF_EFORMAT, "'%.80s': role '%s' is not one of researcher, compliance, "
                     "admin", uri, seg[4]);
  } else {
    return xf_fail(err, XF_EFORMAT, "'%.80s': path starts with '%s', expected region/, "
                   "coordinator/ or user/", uri, head);
  }
  *out = id;
  return XF_OK;
}

xf_err xf_spiffe_format(const xf_spiffe_id *id, char out[XF_SPIFFE_MAX], xf_errctx *err) {
  out[0] = '\0';
  XF_GUARD(xf_pki_label_check("federation", id->federation, err));
  XF_GUARD(xf_pki_label_check("name", id->name, err));
  bool has_region = id->region[0] != '\0';
  if (has_region) XF_GUARD(xf_pki_label_check("region", id->region, err));
  int w;
  switch (id->kind) {
  case XF_PKI_KIND_SITE:
    XF_ENSURE(has_region, err, XF_EINVAL, "a site needs a region (--region R)");
    XF_ENSURE(id->role == XF_PKI_ROLE_NONE, err, XF_EINVAL, "only users have a role");
    w = snprintf(out, XF_SPIFFE_MAX, SPIFFE_PREFIX "%s/region/%s/site/%s", id->federation,
                 id->region, id->name);
    break;
  case XF_PKI_KIND_COORDINATOR:
    XF_ENSURE(id->role == XF_PKI_ROLE_NONE, err, XF_EINVAL, "only users have a role");
    if (has_region)
      w = snprintf(out, XF_SPIFFE_MAX, SPIFFE_PREFIX "%s/region/%s/coordinator/%s",
                   id->federation, id->region, id->name);
    else
      w = snprintf(out, XF_SPIFFE_MAX, SPIFFE_PREFIX "%s/coordinator/%s", id->federation,
                   id->name);
    break;
  case XF_PKI_KIND_USER:
    XF_ENSURE(!has_region, err, XF_EINVAL, "a user belongs to no region (drop --region)");
    XF_ENSURE(id->role != XF_PKI_ROLE_NONE, err, XF_EINVAL,
              "a user needs a role (--role researcher|compliance|admin)");
    XF_ENSURE((unsigned)id->role <= XF_PKI_ROLE_ADMIN, err, XF_EINVAL, "unknown role");
    w = snprintf(out, XF_SPIFFE_MAX, SPIFFE_PREFIX "%s/user/%s/role/%s", id->federation, id->name,
                 xf_pki_role_name(id->role));
    break;
  default: return xf_fail(err, XF_EINVAL, "kind must be site, coordinator or user");
  }
  if (w < 0 || w >= XF_SPIFFE_MAX) return xf_fail(err, XF_EINTERNAL, "SPIFFE ID does not fit");
  return XF_OK;
}

/* The one URI SAN of cert, copied into uri; XF_EFORMAT unless there is
 * exactly one subjectAltName extension holding exactly one URI. */
static xf_err single_uri_san(X509 *cert, char uri[XF_SPIFFE_MAX], xf_errctx *err) {
  int crit = 0;
  GENERAL_NAMES *gens = X509_get_ext_d2i(cert, NID_subject_alt_name, &crit, NULL);
  if (!gens) {
    ERR_clear_error();
    xf_errctx_field(err, "subjectAltName");
    if (crit == -2) return xf_fail(err, XF_EFORMAT, "the certificate has more than one "
                                   "subjectAltName extension");
    return xf_fail(err, XF_EFORMAT, "the certificate has no subjectAltName with a SPIFFE ID");
  }
  int uris = 0;
  xf_err rc = XF_OK;
  for (int i = 0; i < sk_GENERAL_NAME_num(gens); i++) {
    const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
    if (g->type != GEN_URI) continue;
    if (++uris > 1) continue;
    const ASN1_IA5STRING *s = g->d.uniformResourceIdentifier;
    int n = ASN1_STRING_length(s);
    const unsigned char *p = ASN1_STRING_get0_data(s);
    if (n <= 0 || n >= XF_SPIFFE_MAX || memchr(p, '\0', (size_t)n)) {
      rc = xf_fail(err, XF_EFORMAT, "the URI SAN is empty, too long or holds a NUL byte");
      continue;
    }
    memcpy(uri, p, (size_t)n);
    uri[n] = '\0';
  }
  GENERAL_NAMES_free(gens);
  if (rc == XF_OK && uris != 1)
    rc = xf_fail(err, XF_EFORMAT, "the certificate has %d URI SANs; an xfed identity has "
                 "exactly one (its SPIFFE ID)", uris);
  if (rc != XF_OK) xf_errctx_field(err, "subjectAltName");
  return rc;
}

xf_err xf_pki_peer_identity(X509 *cert, xf_spiffe_id *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  XF_ENSURE(cert, err, XF_EINVAL, "no certificate");
  char uri[XF_SPIFFE_MAX];
  XF_GUARD(single_uri_san(cert, uri, err));
  xf_err rc = xf_spiffe_parse(uri, out, err);
  if (rc != XF_OK) xf_errctx_field(err, "subjectAltName");
  return rc;
}

/* The federation of a CA certificate: its one URI SAN is spiffe://FED. */
static xf_err ca_federation(X509 *ca, char fed[XF_PKI_LABEL_MAX + 1], xf_errctx *err) {
  char uri[XF_SPIFFE_MAX];
  XF_GUARD(single_uri_san(ca, uri, err));
  size_t plen = strlen(SPIFFE_PREFIX);
  if (strncmp(uri, SPIFFE_PREFIX, plen) != 0 || xf_label_problem(uri + plen, strlen(uri + plen)))
    return xf_fail(err, XF_EFORMAT, "the CA's URI SAN '%.80s' is not spiffe://FED", uri);
  memcpy(fed, uri + plen, strlen(uri + plen) + 1);
  return XF_OK;
}

/* ---- files --------------------------------------------------------------- */

/* Reads a whole small file opened as fd into xf_malloc'd memory (NUL-added).
 * Closes fd. */
static xf_err read_fd(int fd, const char *path, size_t max, char **out, size_t *len,
                      xf_errctx *err) {
  *out = NULL;
  *len = 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 || (size_t)st.st_size > max) {
    close(fd);
    xf_errctx_file(err, path);
    return xf_fail(err, XF_EFORMAT, "not a regular file of at most %zu bytes", max);
  }
  size_t cap = (size_t)st.st_size;
  char *buf = xf_malloc(cap + 1);
  if (!buf) {
    close(fd);
    return xf_fail(err, XF_ENOMEM, "cannot allocate %zu bytes for %s", cap + 1, path);
  }
  size_t got = 0;
  while (got < cap) {
    ssize_t r = read(fd, buf + got, cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  *out = buf;
  *len = got;
  return XF_OK;
}

static xf_err open_read(const char *path, int *fd, xf_errctx *err) {
  *fd = open(path, O_RDONLY | O_CLOEXEC);
  if (*fd >= 0) return XF_OK;
  int e = errno;
  xf_errctx_file(err, path);
  return xf_fail(err, e == ENOENT ? XF_ENOENT : XF_EIO, "cannot open: %s", strerror(e));
}

xf_err xf_pki_cert_load(const char *path, X509 **out, xf_errctx *err) {
  *out = NULL;
  int fd;
  char *text;
  size_t len;
  XF_GUARD(open_read(path, &fd, err));
  XF_GUARD(read_fd(fd, path, PKI_FILE_MAX, &text, &len, err));
  BIO *bio = BIO_new_mem_buf(text, (int)len);
  X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
  BIO_free(bio);
  xf_free(text);
  if (!cert) {
    xf_errctx_file(err, path);
    return ossl_fail(err, XF_EFORMAT, "not a PEM certificate");
  }
  *out = cert;
  return XF_OK;
}

xf_err xf_pki_key_load(const char *path, EVP_PKEY **out, xf_errctx *err) {
  *out = NULL;
  int fd;
  XF_GUARD(open_read(path, &fd, err));
  struct stat st;
  if (fstat(fd, &st) == 0 && (st.st_mode & 077)) {
    close(fd);
    xf_errctx_file(err, path);
    return xf_fail(err, XF_EINVAL, "private key is accessible to group or others (mode %04o); "
                   "run 'chmod 600 %.200s' and check who may have read it",
                   (unsigned)(st.st_mode & 07777), path);
  }
  char *text;
  size_t len;
  XF_GUARD(read_fd(fd, path, PKI_FILE_MAX, &text, &len, err));
  BIO *bio = BIO_new_mem_buf(text, (int)len);
  EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
  BIO_free(bio);
  OPENSSL_cleanse(text, len);
  xf_free(text);
  if (!key) {
    xf_errctx_file(err, path);
    return ossl_fail(err, XF_EFORMAT, "not an unencrypted PEM private key");
  }
  *out = key;
  return XF_OK;
}

static xf_err asn1_time_seconds(const ASN1_TIME *t, int64_t *out, xf_errctx *err) {
  struct tm tm;
  memset(&tm, 0, sizeof(tm));
  if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return ossl_fail(err, XF_EFORMAT, "bad certificate time");
  *out = (int64_t)timegm(&tm);
  return XF_OK;
}

xf_err xf_pki_cert_times(const X509 *cert, int64_t *not_before, int64_t *not_after,
                         xf_errctx *err) {
  XF_GUARD(asn1_time_seconds(X509_get0_notBefore(cert), not_before, err));
  return asn1_time_seconds(X509_get0_notAfter(cert), not_after, err);
}

/* Writes a PEM document produced into a memory BIO by `write` to path with
 * mode, atomically. For keys the BIO is secure memory and is wiped. */
typedef int (*pem_writer)(BIO *bio, void *obj);

static int write_key_pem(BIO *bio, void *obj) {
  return PEM_write_bio_PrivateKey(bio, obj, NULL, NULL, 0, NULL, NULL);
}
static int write_cert_pem(BIO *bio, void *obj) { return PEM_write_bio_X509(bio, obj); }
static int write_crl_pem(BIO *bio, void *obj) { return PEM_write_bio_X509_CRL(bio, obj); }

static xf_err write_pem(const char *path, pem_writer write, void *obj, mode_t mode, bool secret,
                        xf_errctx *err) {
  BIO *bio = BIO_new(secret ? BIO_s_secmem() : BIO_s_mem());
  BUF_MEM *mem = NULL;
  if (!bio || write(bio, obj) != 1 || BIO_get_mem_ptr(bio, &mem) != 1 || !mem) {
    BIO_free(bio);
    xf_errctx_file(err, path);
    return ossl_fail(err, XF_EINTERNAL, "cannot encode PEM");
  }
  xf_err rc = xf_file_write_atomic(path, mem->data, mem->length, mode, err);
  if (secret) OPENSSL_cleanse(mem->data, mem->length);
  BIO_free(bio);
  return rc;
}

/* ---- verification -------------------------------------------------------- */

static const char *const verdict_messages[] = {
#define XF__PKI_VERDICT_MSG(name, word, msg) msg,
    XF_PKI_VERDICT_MAP(XF__PKI_VERDICT_MSG)
#undef XF__PKI_VERDICT_MSG
};

static const char *const verdict_names[] = {
#define XF__PKI_VERDICT_WORD(name, word, msg) word,
    XF_PKI_VERDICT_MAP(XF__PKI_VERDICT_WORD)
#undef XF__PKI_VERDICT_WORD
};

const char *xf_pki_verdict_name(xf_pki_verdict v) {
  return (unsigned)v < XF_PKI_VERDICT_COUNT ? verdict_names[v] : "invalid";
}

const char *xf_pki_verdict_message(xf_pki_verdict v) {
  return (unsigned)v < XF_PKI_VERDICT_COUNT ? verdict_messages[v] : "invalid";
}

xf_pki_verdict xf_pki_verdict_from_x509(long e) {
  switch (e) {
  case X509_V_OK: return XF_PKI_OK;
  case X509_V_ERR_CERT_HAS_EXPIRED: return XF_PKI_EXPIRED;
  case X509_V_ERR_CERT_NOT_YET_VALID: return XF_PKI_NOT_YET_VALID;
  case X509_V_ERR_CERT_REVOKED: return XF_PKI_REVOKED;
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
  case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
  case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
  case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
  case X509_V_ERR_AKID_SKID_MISMATCH:
  case X509_V_ERR_AKID_ISSUER_SERIAL_MISMATCH: return XF_PKI_UNTRUSTED;
  case X509_V_ERR_CERT_SIGNATURE_FAILURE:
  case X509_V_ERR_UNABLE_TO_DECRYPT_CERT_SIGNATURE:
  case X509_V_ERR_UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY: return XF_PKI_BAD_SIGNATURE;
  case X509_V_ERR_UNABLE_TO_GET_CRL:
  case X509_V_ERR_UNABLE_TO_GET_CRL_ISSUER: return XF_PKI_CRL_MISSING;
  case X509_V_ERR_CRL_HAS_EXPIRED: return XF_PKI_CRL_EXPIRED;
  case X509_V_ERR_CRL_SIGNATURE_FAILURE:
  case X509_V_ERR_CRL_NOT_YET_VALID:
  case X509_V_ERR_UNABLE_TO_DECRYPT_CRL_SIGNATURE:
  case X509_V_ERR_ERROR_IN_CRL_LAST_UPDATE_FIELD:
  case X509_V_ERR_ERROR_IN_CRL_NEXT_UPDATE_FIELD: return XF_PKI_CRL_INVALID;
  default: return XF_PKI_INVALID;
  }
}

struct xf_pki_trust {
  X509_STORE *store;
  char federation[XF_PKI_LABEL_MAX + 1];
};

static xf_err crl_load(const char *path, X509_CRL **out, xf_errctx *err) {
  *out = NULL;
  int fd;
  char *text;
  size_t len;
  XF_GUARD(open_read(path, &fd, err));
  XF_GUARD(read_fd(fd, path, PKI_FILE_MAX, &text, &len, err));
  BIO *bio = BIO_new_mem_buf(text, (int)len);
  X509_CRL *crl = bio ? PEM_read_bio_X509_CRL(bio, NULL, NULL, NULL) : NULL;
  BIO_free(bio);
  xf_free(text);
  if (!crl) {
    xf_errctx_file(err, path);
    return ossl_fail(err, XF_EFORMAT, "not a PEM CRL");
  }
  *out = crl;
  return XF_OK;
}

xf_err xf_pki_crl_check(const char *path, xf_errctx *err) {
  X509_CRL *crl = NULL;
  XF_GUARD(crl_load(path, &crl, err));
  X509_CRL_free(crl);
  return XF_OK;
}

xf_err xf_pki_trust_load(const char *ca_path, const char *crl_path, xf_pki_trust **out,
                         xf_errctx *err) {
  *out = NULL;
  X509 *ca = NULL;
  X509_CRL *crl = NULL;
  xf_pki_trust *t = NULL;
  xf_err rc;
  if ((rc = xf_pki_cert_load(ca_path, &ca, err)) != XF_OK) goto out;
  if (X509_check_ca(ca) != 1) {
    xf_errctx_file(err, ca_path);
    rc = xf_fail(err, XF_EFORMAT, "not a CA certificate (basicConstraints CA:TRUE)");
    goto out;
  }
  t = xf_calloc(1, sizeof(*t));
  if (!t) {
    rc = xf_fail(err, XF_ENOMEM, "cannot allocate the trust store");
    goto out;
  }
  if ((rc = ca_federation(ca, t->federation, err)) != XF_OK) {
    xf_errctx_file(err, ca_path);
    goto out;
  }
  if ((rc = crl_load(crl_path, &crl, err)) != XF_OK) goto out;
  EVP_PKEY *ca_pub = X509_get0_pubkey(ca);
  if (!ca_pub || X509_CRL_verify(crl, ca_pub) != 1 ||
      X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca)) != 0) {
    xf_errctx_file(err, crl_path);
    rc = ossl_fail(err, XF_EINTEGRITY, "the CRL is not signed by the CA in %.200s", ca_path);
    goto out;
  }
  t->store = X509_STORE_new();
  if (!t->store || X509_STORE_add_cert(t->store, ca) != 1 ||
      X509_STORE_add_crl(t->store, crl) != 1 ||
      X509_STORE_set_flags(t->store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_X509_STRICT) != 1) {
    rc = ossl_fail(err, XF_EINTERNAL, "cannot build the X509 store");
    goto out;
  }
  *out = t;
  t = NULL;
out:
  xf_pki_trust_free(t);
  X509_CRL_free(crl);
  X509_free(ca);
  return rc;
}

void xf_pki_trust_free(xf_pki_trust *trust) {
  if (!trust) return;
  X509_STORE_free(trust->store);
  xf_free(trust);
}

const char *xf_pki_trust_federation(const xf_pki_trust *trust) { return trust->federation; }
X509_STORE *xf_pki_trust_store(const xf_pki_trust *trust) { return trust->store; }

static xf_err reject(xf_pki_verdict v, xf_pki_verdict *verdict, xf_errctx *err, const char *detail) {
  if (verdict) *verdict = v;
  if (detail && *detail)
    return xf_fail(err, XF_EINTEGRITY, "%s (%s)", xf_pki_verdict_message(v), detail);
  return xf_fail(err, XF_EINTEGRITY, "%s", xf_pki_verdict_message(v));
}

xf_err xf_pki_verify(const xf_pki_trust *trust, X509 *cert, time_t at, xf_spiffe_id *id,
                     xf_pki_verdict *verdict, xf_errctx *err) {
  if (verdict) *verdict = XF_PKI_INVALID;
  if (id) memset(id, 0, sizeof(*id));
  XF_ENSURE(trust && cert, err, XF_EINVAL, "no trust store or certificate");
  X509_STORE_CTX *ctx = X509_STORE_CTX_new();
  if (!ctx || X509_STORE_CTX_init(ctx, trust->store, cert, NULL) != 1) {
    X509_STORE_CTX_free(ctx);
    return ossl_fail(err, XF_EINTERNAL, "cannot start certificate verification");
  }
  if (at) X509_STORE_CTX_set_time(ctx, 0, at);
  int ok = X509_verify_cert(ctx);
  int e = X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  ERR_clear_error();
  if (ok != 1) {
    xf_pki_verdict v = xf_pki_verdict_from_x509(e);
    return reject(v, verdict, err, X509_verify_cert_error_string(e));
  }
  if (X509_check_ca(cert) != 0) return reject(XF_PKI_NOT_LEAF, verdict, err, NULL);
  xf_spiffe_id peer;
  xf_errctx why;
  xf_errctx_clear(&why);
  if (xf_pki_peer_identity(cert, &peer, &why) != XF_OK)
    return reject(XF_PKI_BAD_IDENTITY, verdict, err, why.msg);
  if (strcmp(peer.federation, trust->federation) != 0) {
    char detail[200];
    snprintf(detail, sizeof(detail), "'%s', this federation is '%s'", peer.federation,
             trust->federation);
    return reject(XF_PKI_WRONG_FEDERATION, verdict, err, detail);
  }
  if (id) *id = peer;
  if (verdict) *verdict = XF_PKI_OK;
  return XF_OK;
}

/* ---- making certificates ------------------------------------------------- */

typedef struct ext_spec {
  int nid;
  const char *value; /* OpenSSL's v3 configuration syntax; built only from labels */
} ext_spec;

static xf_err make_key(EVP_PKEY **out, xf_errctx *err) {
  *out = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  if (!*out) return ossl_fail(err, XF_EINTERNAL, "cannot generate a P-256 key");
  return XF_OK;
}

static void serial_hex(const ASN1_INTEGER *serial, char out[XF_PKI_SERIAL_HEX]) {
  out[0] = '\0';
  BIGNUM *bn = ASN1_INTEGER_to_BN(serial, NULL);
  char *hex = bn ? BN_bn2hex(bn) : NULL;
  if (hex && strlen(hex) < XF_PKI_SERIAL_HEX) {
    size_t i = 0;
    for (; hex[i]; i++) out[i] = (char)(hex[i] >= 'A' && hex[i] <= 'F' ? hex[i] + 32 : hex[i]);
    out[i] = '\0';
  }
  OPENSSL_free(hex);
  BN_free(bn);
}

/* A certificate for subject_key with subject CN cn, signed by issuer_key;
 * issuer NULL makes it self-signed. *serial_out receives the hex serial. */
static xf_err make_cert(EVP_PKEY *subject_key, X509 *issuer, EVP_PKEY *issuer_key, const char *cn,
                        int64_t not_before, int64_t not_after, const ext_spec *exts, size_t n_exts,
                        X509 **out, char serial_out[XF_PKI_SERIAL_HEX], xf_errctx *err) {
  *out = NULL;
  xf_err rc = XF_OK;
  X509 *x = X509_new();
  BIGNUM *bn = BN_new();
  X509_NAME *name = X509_NAME_new();
  if (!x || !bn || !name) {
    rc = ossl_fail(err, XF_EINTERNAL, "cannot allocate a certificate");
    goto out;
  }
  /* 128 random bits from OpenSSL's CSPRNG; zero is not a valid serial. */
  do {
    if (BN_rand(bn, 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) {
      rc = ossl_fail(err, XF_EINTERNAL, "cannot draw a random serial");
      goto out;
    }
  } while (BN_is_zero(bn));
  if (X509_set_version(x, X509_VERSION_3) != 1 ||
      !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ||
      !ASN1_TIME_set(X509_getm_notBefore(x), (time_t)not_before) ||
      !ASN1_TIME_set(X509_getm_notAfter(x), (time_t)not_after) ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                 0) != 1 ||
      X509_set_subject_name(x, name) != 1 ||
      X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name) != 1 ||
      X509_set_pubkey(x, subject_key) != 1) {
    rc = ossl_fail(err, XF_EINTERNAL, "cannot fill in the certificate");
    goto out;
  }
  X509V3_CTX v3;
  X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
  for (size_t i = 0; i < n_exts; i++) {
    X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &v3, exts[i].nid, exts[i].value);
    int added = ext ? X509_add_ext(x, ext, -1) : 0;
    X509_EXTENSION_free(ext);
    if (added != 1) {
      rc = ossl_fail(err, XF_EINTERNAL, "cannot add the %s extension '%s'",
                     OBJ_nid2sn(exts[i].nid), exts[i].value);
      goto out;
    }
  }
  if (X509_sign(x, issuer_key, EVP_sha256()) <= 0) {
    rc = ossl_fail(err, XF_EINTERNAL, "cannot sign the certificate");
    goto out;
  }
  serial_hex(X509_get0_serialNumber(x), serial_out);
  *out = x;
  x = NULL;
out:
  X509_NAME_free(name);
  BN_free(bn);
  X509_free(x);
  return rc;
}

/* ---- the federation directory ------------------------------------------- */

struct xf_federation {
  char *dir;
  int lock_fd;
  char name[XF_PKI_LABEL_MAX + 1];
  X509 *ca;
  int64_t ca_not_before, ca_not_after;
  uint64_t crl_number;
  int64_t crl_next_update;
  xf_pki_entry *entries;
  size_t n, cap;
};

const char *xf_federation_name(const xf_federation *fed) { return fed->name; }
const char *xf_federation_dir(const xf_federation *fed) { return fed->dir; }
X509 *xf_federation_ca(const xf_federation *fed) { return fed->ca; }
int64_t xf_federation_crl_next_update(const xf_federation *fed) { return fed->crl_next_update; }
uint64_t xf_federation_crl_number(const xf_federation *fed) { return fed->crl_number; }
size_t xf_federation_count(const xf_federation *fed) { return fed->n; }

const xf_pki_entry *xf_federation_entry(const xf_federation *fed, size_t i) {
  return i < fed->n ? &fed->entries[i] : NULL;
}

static xf_pki_entry *find_current(const xf_federation *fed, const char *name) {
  for (size_t i = fed->n; i-- > 0;)
    if (fed->entries[i].current && strcmp(fed->entries[i].id.name, name) == 0)
      return &fed->entries[i];
  return NULL;
}

const xf_pki_entry *xf_federation_find(const xf_federation *fed, const char *name) {
  return find_current(fed, name);
}

xf_err xf_federation_cert_path(const xf_federation *fed, const char *name, char *buf, size_t n,
                               xf_errctx *err) {
  XF_GUARD(xf_pki_label_check("name", name, err));
  return path_fmt(buf, n, err, "%s/issued/%s.crt", fed->dir, name);
}

xf_err xf_federation_key_path(const xf_federation *fed, const char *name, char *buf, size_t n,
                              xf_errctx *err) {
  XF_GUARD(xf_pki_label_check("name", name, err));
  return path_fmt(buf, n, err, "%s/issued/%s.key", fed->dir, name);
}

static xf_federation *fed_new(const char *dir, xf_errctx *err) {
  xf_federation *f = xf_calloc(1, sizeof(*f));
  if (f) f->dir = xf_strdup(dir);
  if (!f || !f->dir) {
    xf_free(f);
    xf_fail(err, XF_ENOMEM, "cannot allocate the federation");
    return NULL;
  }
  f->lock_fd = -1;
  return f;
}

void xf_federation_close(xf_federation *fed) {
  if (!fed) return;
  if (fed->lock_fd >= 0) close(fed->lock_fd); /* releases the flock */
  X509_free(fed->ca);
  xf_free(fed->entries);
  xf_free(fed->dir);
  xf_free(fed);
}

/* An exclusive lock on the directory itself, held until close. */
static xf_err lock_dir(xf_federation *f, xf_errctx *err) {
  f->lock_fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (f->lock_fd < 0) {
    int e = errno;
    xf_errctx_file(err, f->dir);
    if (e == ENOENT)
      return xf_fail(err, XF_ENOENT, "no federation directory here; create one with "
                     "'xfed pki init --federation FED --dir %.200s'", f->dir);
    struct stat st;
    if (e == ENOTDIR && stat(f->dir, &st) == 0 && !S_ISDIR(st.st_mode))
      return xf_fail(err, XF_EEXISTS, "is %s, not a directory: give the federation directory "
                     "with --dir", xf_file_kind(st.st_mode));
    return xf_fail(err, XF_EIO, "cannot open the federation directory: %s", strerror(e));
  }
  while (flock(f->lock_fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int e = errno;
    xf_errctx_file(err, f->dir);
    return xf_fail(err, XF_EIO, "cannot lock the federation directory: %s", strerror(e));
  }
  return XF_OK;
}

static xf_err entries_reserve(xf_federation *f, size_t want, xf_errctx *err) {
  if (want <= f->cap) return XF_OK;
  size_t cap = f->cap ? f->cap * 2 : 16;
  if (cap < want) cap = want;
  XF_ENSURE(cap < SIZE_MAX / sizeof(xf_pki_entry), err, XF_ENOMEM, "the index is too large");
  xf_pki_entry *e = xf_realloc(f->entries, cap * sizeof(*e));
  XF_ENSURE(e, err, XF_ENOMEM, "cannot grow the index");
  f->entries = e;
  f->cap = cap;
  return XF_OK;
}

/* -- the index (index.json) -- */

static json_t *entry_json(const xf_pki_entry *e) {
  json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:b,s:b}", "name", e->id.name, "kind",
                        xf_pki_kind_name(e->id.kind), "spiffe_id", e->spiffe, "serial", e->serial,
                        "issued_at", (json_int_t)e->issued_at, "not_before",
                        (json_int_t)e->not_before, "not_after", (json_int_t)e->not_after,
                        "revoked", e->revoked, "current", e->current);
  if (!o) return NULL;
  int bad = 0;
  if (e->id.region[0]) bad |= json_object_set_new(o, "region", json_string(e->id.region));
  if (e->id.role) bad |= json_object_set_new(o, "role", json_string(xf_pki_role_name(e->id.role)));
  if (e->revoked) {
    bad |= json_object_set_new(o, "revoked_at", json_integer((json_int_t)e->revoked_at));
    bad |= json_object_set_new(o, "reason", json_string(xf_pki_reason_name(e->reason)));
  }
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static xf_err index_write(const xf_federation *f, xf_errctx *err) {
  char path[4096];
  XF_GUARD(path_fmt(path, sizeof(path), err, "%s/index.json", f->dir));
  json_t *list = json_array();
  json_t *root = list ? json_pack("{s:s,s:i,s:s,s:I,s:I,s:o}", "format", INDEX_FORMAT, "version",
                                  INDEX_VERSION, "federation", f->name, "crl_number",
                                  (json_int_t)f->crl_number, "crl_next_update",
                                  (json_int_t)f->crl_next_update, "identities", list)
                      : NULL;
  if (!root) {
    json_decref(list);
    return xf_fail(err, XF_ENOMEM, "cannot build the index");
  }
  for (size_t i = 0; i < f->n; i++) {
    if (json_array_append_new(list, entry_json(&f->entries[i])) != 0) {
      json_decref(root);
      return xf_fail(err, XF_ENOMEM, "cannot build the index");
    }
  }
  size_t len = json_dumpb(root, NULL, 0, JSON_INDENT(2));
  char *text = len ? xf_malloc(len + 1) : NULL;
  if (!text) {
    json_decref(root);
    return xf_fail(err, XF_ENOMEM, "cannot encode the index");
  }
  json_dumpb(root, text, len, JSON_INDENT(2));
  text[len++] = '\n';
  json_decref(root);
  xf_err rc = xf_file_write_atomic(path, text, len, 0644, err);
  xf_free(text);
  return rc;
}

/* Reads member key of o as described; fails naming "FIELD.key". */
static xf_err get_string(json_t *o, const char *key, bool required, const char **out,
                         const char *field, xf_errctx *err) {
  json_t *v = json_object_get(o, key);
  *out = NULL;
  if (!v && !required) return XF_OK;
  if (!json_is_string(v)) {
    xf_errctx_field(err, "%s%s%s", field, *field ? "." : "", key);
    return xf_fail(err, XF_EFORMAT, "%s a string", v ? "is not" : "is missing; expected");
  }
  *out = json_string_value(v);
  return XF_OK;
}

static xf_err get_int(json_t *o, const char *key, int64_t *out, const char *field,
                      xf_errctx *err) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v) || json_integer_value(v) < 0) {
    xf_errctx_field(err, "%s%s%s", field, *field ? "." : "", key);
    return xf_fail(err, XF_EFORMAT, "must be a non-negative integer");
  }
  *out = (int64_t)json_integer_value(v);
  return XF_OK;
}

static xf_err get_bool(json_t *o, const char *key, bool *out, const char *field, xf_errctx *err) {
  json_t *v = json_object_get(o, key);
  if (!json_is_boolean(v)) {
    xf_errctx_field(err, "%s.%s", field, key);
    return xf_fail(err, XF_EFORMAT, "must be true or false");
  }
  *out = json_is_true(v);
  return XF_OK;
}

static bool serial_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= XF_PKI_SERIAL_HEX) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

static xf_err entry_parse(const xf_federation *f, json_t *o, const char *field, xf_pki_entry *e,
                          xf_errctx *err) {
  memset(e, 0, sizeof(*e));
  if (!json_is_object(o)) {
    xf_errctx_field(err, "%s", field);
    return xf_fail(err, XF_EFORMAT, "must be an object");
  }
  const char *name, *kind, *spiffe, *serial, *region, *role, *reason;
  XF_GUARD(get_string(o, "name", true, &name, field, err));
  XF_GUARD(get_string(o, "kind", true, &kind, field, err));
  XF_GUARD(get_string(o, "spiffe_id", true, &spiffe, field, err));
  XF_GUARD(get_string(o, "serial", true, &serial, field, err));
  XF_GUARD(get_string(o, "region", false, &region, field, err));
  XF_GUARD(get_string(o, "role", false, &role, field, err));
  XF_GUARD(get_int(o, "issued_at", &e->issued_at, field, err));
  XF_GUARD(get_int(o, "not_before", &e->not_before, field, err));
  XF_GUARD(get_int(o, "not_after", &e->not_after, field, err));
  XF_GUARD(get_bool(o, "revoked", &e->revoked, field, err));
  XF_GUARD(get_bool(o, "current", &e->current, field, err));
  if (e->revoked) {
    XF_GUARD(get_int(o, "revoked_at", &e->revoked_at, field, err));
    XF_GUARD(get_string(o, "reason", true, &reason, field, err));
    if (xf_pki_reason_parse(reason, &e->reason, err) != XF_OK) {
      xf_errctx_field(err, "%s.reason", field);
      return XF_EFORMAT;
    }
  }
  if (!serial_ok(serial)) {
    xf_errctx_field(err, "%s.serial", field);
    return xf_fail(err, XF_EFORMAT, "'%.64s' is not 1 to 40 lowercase hex digits", serial);
  }
  memcpy(e->serial, serial, strlen(serial) + 1);
  xf_errctx why;
  xf_errctx_clear(&why);
  if (xf_spiffe_parse(spiffe, &e->id, &why) != XF_OK) {
    xf_errctx_field(err, "%s.spiffe_id", field);
    return xf_fail(err, XF_EFORMAT, "%s", why.msg);
  }
  memcpy(e->spiffe, spiffe, strlen(spiffe) + 1);
  bool region_matches = region ? strcmp(region, e->id.region) == 0 : e->id.region[0] == '\0';
  bool role_matches = role ? strcmp(role, xf_pki_role_name(e->id.role)) == 0
                           : e->id.role == XF_PKI_ROLE_NONE;
  if (strcmp(e->id.federation, f->name) != 0 || strcmp(name, e->id.name) != 0 ||
      strcmp(kind, xf_pki_kind_name(e->id.kind)) != 0 || !region_matches || !role_matches) {
    xf_errctx_field(err, "%s", field);
    return xf_fail(err, XF_EFORMAT, "name, kind, region or role disagree with spiffe_id '%s'",
                   e->spiffe);
  }
  return XF_OK;
}

static xf_err index_read(xf_federation *f, const char *path, xf_errctx *err) {
  int fd;
  char *text;
  size_t len;
  XF_GUARD(open_read(path, &fd, err));
  XF_GUARD(read_fd(fd, path, 64u << 20, &text, &len, err));
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  xf_free(text);
  if (!root) {
    xf_errctx_file(err, path);
    return xf_fail(err, XF_EFORMAT, "not JSON: %s (line %d)", je.text, je.line);
  }
  xf_err rc = XF_OK;
  const char *format, *name;
  int64_t version = 0, crl_number = 0, next_update = 0;
  json_t *list = json_object_get(root, "identities");
  if ((rc = get_string(root, "format", true, &format, "", err)) != XF_OK ||
      (rc = get_int(root, "version", &version, "", err)) != XF_OK ||
      (rc = get_string(root, "federation", true, &name, "", err)) != XF_OK ||
      (rc = get_int(root, "crl_number", &crl_number, "", err)) != XF_OK ||
      (rc = get_int(root, "crl_next_update", &next_update, "", err)) != XF_OK)
    goto out;
  if (strcmp(format, INDEX_FORMAT) != 0 || version != INDEX_VERSION) {
    xf_errctx_field(err, "format");
    rc = xf_fail(err, XF_EUNSUPPORTED, "not an xfed PKI index of version %d", INDEX_VERSION);
    goto out;
  }
  if ((rc = xf_pki_label_check("federation", name, err)) != XF_OK) {
    xf_errctx_field(err, "federation");
    rc = XF_EFORMAT;
    goto out;
  }
  memcpy(f->name, name, strlen(name) + 1);
  f->crl_number = (uint64_t)crl_number;
  f->crl_next_update = next_update;
  if (!json_is_array(list)) {
    xf_errctx_field(err, "identities");
    rc = xf_fail(err, XF_EFORMAT, "must be an array");
    goto out;
  }
  if ((rc = entries_reserve(f, json_array_size(list), err)) != XF_OK) goto out;
  for (size_t i = 0; i < json_array_size(list); i++) {
    char field[48];
    snprintf(field, sizeof(field), "identities[%zu]", i);
    if ((rc = entry_parse(f, json_array_get(list, i), field, &f->entries[i], err)) != XF_OK)
      goto out;
    f->n = i + 1;
  }
out:
  if (rc != XF_OK) xf_errctx_file(err, path);
  json_decref(root);
  return rc;
}

/* -- the CRL -- */

static ASN1_INTEGER *serial_from_hex(const char *hex) {
  BIGNUM *bn = NULL;
  ASN1_INTEGER *ai = NULL;
  if (BN_hex2bn(&bn, hex) > 0) ai = BN_to_ASN1_INTEGER(bn, NULL);
  BN_free(bn);
  return ai;
}

static int crl_add_revoked(X509_CRL *crl, const xf_pki_entry *e) {
  X509_REVOKED *r = X509_REVOKED_new();
  ASN1_INTEGER *serial = serial_from_hex(e->serial);
  ASN1_TIME *when = ASN1_TIME_set(NULL, (time_t)e->revoked_at);
  ASN1_ENUMERATED *reason = ASN1_ENUMERATED_new();
  int ok = r && serial && when && reason && X509_REVOKED_set_serialNumber(r, serial) == 1 &&
           X509_REVOKED_set_revocationDate(r, when) == 1 &&
           ASN1_ENUMERATED_set(reason, (long)e->reason) == 1 &&
           X509_REVOKED_add1_ext_i2d(r, NID_crl_reason, reason, 0, 0) == 1 &&
           X509_CRL_add0_revoked(crl, r) == 1;
  if (!ok) X509_REVOKED_free(r);
  ASN1_ENUMERATED_free(reason);
  ASN1_TIME_free(when);
  ASN1_INTEGER_free(serial);
  return ok;
}

/* Signs a CRL of every revoked entry with number crl_number + 1 and writes
 * crl.pem. fed->crl_number and crl_next_update change only on success. */
static xf_err crl_write(xf_federation *f, EVP_PKEY *ca_key, long days, xf_errctx *err) {
  char path[4096];
  XF_GUARD(path_fmt(path, sizeof(path), err, "%s/crl.pem", f->dir));
  int64_t now = (int64_t)time(NULL);
  int64_t next = now + (int64_t)days * DAY_S;
  X509_CRL *crl = X509_CRL_new();
  ASN1_TIME *last_t = ASN1_TIME_set(NULL, (time_t)now);
  ASN1_TIME *next_t = ASN1_TIME_set(NULL, (time_t)next);
  ASN1_INTEGER *number = ASN1_INTEGER_new();
  xf_err rc = XF_OK;
  if (!crl || !last_t || !next_t || !number || X509_CRL_set_version(crl, X509_CRL_VERSION_2) != 1 ||
      X509_CRL_set_issuer_name(crl, X509_get_subject_name(f->ca)) != 1 ||
      X509_CRL_set1_lastUpdate(crl, last_t) != 1 || X509_CRL_set1_nextUpdate(crl, next_t) != 1 ||
      ASN1_INTEGER_set_uint64(number, f->crl_number + 1) != 1 ||
      X509_CRL_add1_ext_i2d(crl, NID_crl_number, number, 0, 0) != 1) {
    rc = ossl_fail(err, XF_EINTERNAL, "cannot fill in the CRL");
    goto out;
  }
  for (size_t i = 0; i < f->n; i++) {
    if (f->entries[i].revoked && !crl_add_revoked(crl, &f->entries[i])) {
      rc = ossl_fail(err, XF_EINTERNAL, "cannot add serial %s to the CRL", f->entries[i].serial);
      goto out;
    }
  }
  X509V3_CTX v3;
  X509V3_set_ctx(&v3, f->ca, NULL, NULL, crl, 0);
  X509_EXTENSION *akid = X509V3_EXT_nconf_nid(NULL, &v3, NID_authority_key_identifier,
                                              "keyid:always");
  int added = akid ? X509_CRL_add_ext(crl, akid, -1) : 0;
  X509_EXTENSION_free(akid);
  if (added != 1 || X509_CRL_sort(crl) != 1 || X509_CRL_sign(crl, ca_key, EVP_sha256()) <= 0) {
    rc = ossl_fail(err, XF_EINTERNAL, "cannot sign the CRL");
    goto out;
  }
  if ((rc = write_pem(path, write_crl_pem, crl, 0644, false, err)) != XF_OK) goto out;
  f->crl_number++;
  f->crl_next_update = next;
out:
  ASN1_INTEGER_free(number);
  ASN1_TIME_free(next_t);
  ASN1_TIME_free(last_t);
  X509_CRL_free(crl);
  return rc;
}

static xf_err days_check(const char *what, long days, xf_errctx *err) {
  XF_ENSURE(days >= 1 && days <= XF_PKI_MAX_DAYS, err, XF_ERANGE,
            "%s validity of %ld days is outside 1 to %d", what, days, XF_PKI_MAX_DAYS);
  return XF_OK;
}

/* The CA key, checked against ca.crt. The caller owns *out. */
static xf_err ca_key_load(const xf_federation *f, EVP_PKEY **out, xf_errctx *err) {
  char path[4096];
  XF_GUARD(path_fmt(path, sizeof(path), err, "%s/ca.key", f->dir));
  XF_GUARD(xf_pki_key_load(path, out, err));
  if (X509_check_private_key(f->ca, *out) != 1) {
    EVP_PKEY_free(*out);
    *out = NULL;
    xf_errctx_file(err, path);
    return ossl_fail(err, XF_EINTEGRITY, "the CA key does not belong to ca.crt");
  }
  return XF_OK;
}

xf_err xf_federation_init(const char *dir, const char *name, long days, xf_federation **out,
                          xf_errctx *err) {
  *out = NULL;
  if (!days) days = XF_PKI_CA_DAYS;
  XF_GUARD(xf_pki_label_check("federation", name, err));
  XF_GUARD(days_check("CA", days, err));
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int e = errno;
    xf_errctx_file(err, dir);
    return xf_fail(err, XF_EIO, "cannot create the federation directory: %s", strerror(e));
  }
  xf_federation *f = fed_new(dir, err);
  if (!f) return XF_ENOMEM;
  EVP_PKEY *key = NULL;
  xf_err rc;
  char path[4096], cn[XF_PKI_LABEL_MAX + 16], san[XF_SPIFFE_MAX + 8], serial[XF_PKI_SERIAL_HEX];
  if ((rc = lock_dir(f, err)) != XF_OK) goto out;
  static const char *const existing[] = {"ca.key", "ca.crt", "crl.pem", "index.json"};
  for (size_t i = 0; i < sizeof(existing) / sizeof(existing[0]); i++) {
    struct stat st;
    if ((rc = path_fmt(path, sizeof(path), err, "%s/%s", dir, existing[i])) != XF_OK ||
        (rc = xf_file_check_target(path, err)) != XF_OK)
      goto out;
    if (lstat(path, &st) == 0) {
      xf_errctx_file(err, path);
      rc = xf_fail(err, XF_EEXISTS, "this directory already holds a federation CA; choose "
                   "another --dir (never overwrite a CA: every identity it issued depends on it)");
      goto out;
    }
  }
  memcpy(f->name, name, strlen(name) + 1);
  int64_t now = (int64_t)time(NULL);
  f->ca_not_before = now - PKI_BACKDATE_S;
  f->ca_not_after = now + (int64_t)days * DAY_S;
  snprintf(cn, sizeof(cn), "xfed %s CA", name);
  snprintf(san, sizeof(san), "URI:" SPIFFE_PREFIX "%s", name);
  const ext_spec exts[] = {
      {NID_basic_constraints, "critical,CA:TRUE"},
      {NID_key_usage, "critical,keyCertSign,cRLSign"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"},
      {NID_subject_alt_name, san},
  };
  if ((rc = make_key(&key, err)) != XF_OK ||
      (rc = make_cert(key, NULL, key, cn, f->ca_not_before, f->ca_not_after, exts,
                      sizeof(exts) / sizeof(exts[0]), &f->ca, serial, err)) != XF_OK)
    goto out;
  if ((rc = path_fmt(path, sizeof(path), err, "%s/issued", dir)) != XF_OK) goto out;
  if (mkdir(path, 0700) != 0 && errno != EEXIST) {
    int e = errno;
    xf_errctx_file(err, path);
    rc = xf_fail(err, XF_EIO, "cannot create the issued/ folder: %s", strerror(e));
    goto out;
  }
  if ((rc = path_fmt(path, sizeof(path), err, "%s/ca.key", dir)) != XF_OK ||
      (rc = write_pem(path, write_key_pem, key, 0600, true, err)) != XF_OK ||
      (rc = path_fmt(path, sizeof(path), err, "%s/ca.crt", dir)) != XF_OK ||
      (rc = write_pem(path, write_cert_pem, f->ca, 0644, false, err)) != XF_OK ||
      (rc = crl_write(f, key, XF_PKI_CRL_DAYS, err)) != XF_OK ||
      (rc = index_write(f, err)) != XF_OK)
    goto out;
  XF_DEBUG("pki_init", "federation=%s dir=\"%s\" ca_serial=%s", name, dir, serial);
  *out = f;
  f = NULL;
out:
  EVP_PKEY_free(key);
  xf_federation_close(f);
  return rc;
}

xf_err xf_federation_open(const char *dir, xf_federation **out, xf_errctx *err) {
  *out = NULL;
  xf_federation *f = fed_new(dir, err);
  if (!f) return XF_ENOMEM;
  char path[4096], ca_fed[XF_PKI_LABEL_MAX + 1];
  xf_err rc;
  if ((rc = lock_dir(f, err)) != XF_OK) goto out;
  if ((rc = path_fmt(path, sizeof(path), err, "%s/index.json", dir)) != XF_OK) goto out;
  if ((rc = index_read(f, path, err)) != XF_OK) {
    if (rc == XF_ENOENT)
      xf_fail(err, XF_ENOENT, "no federation in %.200s (index.json is missing); create one with "
              "'xfed pki init --federation FED --dir %.200s'", dir, dir);
    goto out;
  }
  if ((rc = path_fmt(path, sizeof(path), err, "%s/ca.crt", dir)) != XF_OK ||
      (rc = xf_pki_cert_load(path, &f->ca, err)) != XF_OK)
    goto out;
  if ((rc = ca_federation(f->ca, ca_fed, err)) != XF_OK ||
      (rc = xf_pki_cert_times(f->ca, &f->ca_not_before, &f->ca_not_after, err)) != XF_OK) {
    xf_errctx_file(err, path);
    goto out;
  }
  if (strcmp(ca_fed, f->name) != 0) {
    xf_errctx_file(err, path);
    rc = xf_fail(err, XF_EINTEGRITY, "the CA belongs to federation '%s' but index.json to '%s'",
                 ca_fed, f->name);
    goto out;
  }
  *out = f;
  f = NULL;
out:
  xf_federation_close(f);
  return rc;
}

static bool serial_taken(const xf_federation *f, const char *serial) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->entries[i].serial, serial) == 0) return true;
  return false;
}

static void fmt_time(int64_t t, char out[32]) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(out, 32, "%" PRId64, t);
}

/* Marks e revoked, writes the CRL, then the index. Restores e on failure. */
static xf_err revoke_entry(xf_federation *f, xf_pki_entry *e, xf_pki_reason reason,
                           EVP_PKEY *ca_key, xf_errctx *err) {
  xf_pki_entry saved = *e;
  e->revoked = true;
  e->revoked_at = (int64_t)time(NULL);
  e->reason = reason;
  xf_err rc = crl_write(f, ca_key, XF_PKI_CRL_DAYS, err);
  if (rc != XF_OK) {
    *e = saved;
    return rc;
  }
  XF_GUARD(index_write(f, err));
  XF_DEBUG("pki_revoke", "federation=%s name=%s serial=%s reason=%s", f->name, e->id.name,
          e->serial, xf_pki_reason_name(reason));
  return XF_OK;
}

/* One issuance. *ca_key is the CA's key, loaded here (after the checks
 * that need no key) when NULL and left for the caller to free. With
 * write_index false the entry is only added to the handle: the caller
 * writes the index. */
static xf_err issue_one(xf_federation *fed, const xf_pki_issue_opts *opts, EVP_PKEY **ca_key_io,
                        bool write_index, xf_pki_issued *out, xf_errctx *err) {
  xf_pki_issued result;
  memset(&result, 0, sizeof(result));
  xf_pki_entry *e = &result.entry;
  XF_GUARD(xf_pki_label_check("name", opts->name, err));
  memcpy(e->id.federation, fed->name, sizeof(e->id.federation));
  e->id.kind = opts->kind;
  e->id.role = opts->role;
  memcpy(e->id.name, opts->name, strlen(opts->name) + 1);
  if (opts->region && opts->region[0]) {
    XF_GUARD(xf_pki_label_check("region", opts->region, err));
    memcpy(e->id.region, opts->region, strlen(opts->region) + 1);
  }
  XF_GUARD(xf_spiffe_format(&e->id, e->spiffe, err));

  int64_t now = (int64_t)time(NULL);
  if (opts->not_after) {
    e->not_before = opts->not_before;
    e->not_after = opts->not_after;
    XF_ENSURE(e->not_before < e->not_after, err, XF_ERANGE, "validity ends before it starts");
  } else {
    long days = opts->days ? opts->days : XF_PKI_CERT_DAYS;
    XF_GUARD(days_check("certificate", days, err));
    e->not_before = now - PKI_BACKDATE_S;
    e->not_after = now + (int64_t)days * DAY_S;
  }
  if (e->not_after > fed->ca_not_after) {
    char ca_end[32];
    fmt_time(fed->ca_not_after, ca_end);
    return xf_fail(err, XF_ERANGE, "the certificate would outlive the CA, which expires %s; "
                   "use at most --days %" PRId64, ca_end, (fed->ca_not_after - now) / DAY_S);
  }

  xf_pki_entry *old = find_current(fed, opts->name);
  if (old && !opts->force) {
    char until[32];
    fmt_time(old->not_after, until);
    return xf_fail(err, XF_EEXISTS, "identity '%s' already exists (%s, serial %s, expires %s%s); "
                   "pass --force to revoke it (reason superseded) and issue a new one",
                   opts->name, old->spiffe, old->serial, until, old->revoked ? ", revoked" : "");
  }
  char cert_path[4096], key_path[4096];
  XF_GUARD(xf_federation_cert_path(fed, opts->name, cert_path, sizeof(cert_path), err));
  XF_GUARD(xf_federation_key_path(fed, opts->name, key_path, sizeof(key_path), err));
  /* Both files may be written (base/file.h) before anything is: no key
   * is left without its certificate. */
  XF_GUARD(xf_file_check_target(key_path, err));
  XF_GUARD(xf_file_check_target(cert_path, err));
  XF_GUARD(entries_reserve(fed, fed->n + 1, err));

  EVP_PKEY *ca_key = NULL, *key = NULL;
  X509 *cert = NULL;
  xf_err rc;
  if (!*ca_key_io && (rc = ca_key_load(fed, ca_key_io, err)) != XF_OK) goto out;
  ca_key = *ca_key_io;
  if (old) {
    old = find_current(fed, opts->name); /* entries_reserve may have moved it */
    result.replaced = true;
    memcpy(result.old_serial, old->serial, sizeof(result.old_serial));
    if (!old->revoked) {
      if ((rc = revoke_entry(fed, old, XF_PKI_REASON_SUPERSEDED, ca_key, err)) != XF_OK) goto out;
      result.revoked_old = true;
    }
  }

  char san[XF_SPIFFE_MAX + 48];
  bool network = opts->kind != XF_PKI_KIND_USER;
  snprintf(san, sizeof(san), "URI:%s%s", e->spiffe, network ? ",DNS:localhost,IP:127.0.0.1" : "");
  const ext_spec exts[] = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature"},
      {NID_ext_key_usage,
       opts->kind == XF_PKI_KIND_COORDINATOR ? "serverAuth,clientAuth" : "clientAuth"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"},
      {NID_subject_alt_name, san},
  };
  if ((rc = make_key(&key, err)) != XF_OK) goto out;
  do {
    X509_free(cert);
    cert = NULL;
    if ((rc = make_cert(key, fed->ca, ca_key, opts->name, e->not_before, e->not_after, exts,
                        sizeof(exts) / sizeof(exts[0]), &cert, e->serial, err)) != XF_OK)
      goto out;
  } while (serial_taken(fed, e->serial));
  if (!serial_ok(e->serial)) {
    rc = xf_fail(err, XF_EINTERNAL, "the new certificate's serial cannot be recorded");
    goto out;
  }
  if ((rc = write_pem(key_path, write_key_pem, key, 0600, true, err)) != XF_OK ||
      (rc = write_pem(cert_path, write_cert_pem, cert, 0644, false, err)) != XF_OK)
    goto out;
  e->issued_at = now;
  e->current = true;
  for (size_t i = 0; i < fed->n; i++)
    if (strcmp(fed->entries[i].id.name, opts->name) == 0) fed->entries[i].current = false;
  fed->entries[fed->n++] = *e;
  if (write_index && (rc = index_write(fed, err)) != XF_OK) {
    /* The files are written but not recorded: forget the entry so that the
     * handle agrees with the index on disk; issuing again overwrites them. */
    fed->n--;
    for (size_t i = fed->n; i-- > 0;)
      if (strcmp(fed->entries[i].id.name, opts->name) == 0) {
        fed->entries[i].current = true;
        break;
      }
    goto out;
  }
  XF_DEBUG("pki_issue", "federation=%s name=%s kind=%s spiffe_id=%s serial=%s", fed->name,
          e->id.name, xf_pki_kind_name(e->id.kind), e->spiffe, e->serial);
  if (out) *out = result;
out:
  X509_free(cert);
  EVP_PKEY_free(key);
  return rc;
}

xf_err xf_federation_issue(xf_federation *fed, const xf_pki_issue_opts *opts, xf_pki_issued *out,
                           xf_errctx *err) {
  EVP_PKEY *ca_key = NULL;
  xf_err rc = issue_one(fed, opts, &ca_key, true, out, err);
  EVP_PKEY_free(ca_key);
  return rc;
}

xf_err xf_federation_issue_many(xf_federation *fed, const xf_pki_issue_opts *opts, size_t n,
                                size_t *done, xf_errctx *err) {
  *done = 0;
  for (size_t i = 0; i < n; i++)
    if (opts[i].force) {
      xf_errctx_field(err, "[%zu]", i);
      return xf_fail(err, XF_EINVAL, "a batch issues new names only; re-issue '%s' on its own "
                     "with --force", opts[i].name ? opts[i].name : "");
    }
  size_t before = fed->n;
  EVP_PKEY *ca_key = NULL;
  xf_err rc = XF_OK;
  for (size_t i = 0; i < n && rc == XF_OK; i++) {
    rc = issue_one(fed, &opts[i], &ca_key, false, NULL, err);
    if (rc == XF_OK) (*done)++;
  }
  EVP_PKEY_free(ca_key);
  if (*done == 0) return rc;
  /* Those issued are recorded even when a later one failed: the index
   * agrees with the files. */
  xf_errctx werr = {0};
  if (index_write(fed, &werr) != XF_OK) {
    fed->n = before; /* new names only: no entry of the handle changed */
    *done = 0;
    if (rc == XF_OK && err) *err = werr;
    return rc == XF_OK ? werr.code : rc;
  }
  return rc;
}

xf_err xf_federation_revoke(xf_federation *fed, const char *name, xf_pki_reason reason,
                            xf_pki_entry *out, xf_errctx *err) {
  XF_GUARD(xf_pki_label_check("name", name, err));
  xf_pki_entry *e = find_current(fed, name);
  XF_ENSURE(e, err, XF_ENOENT, "no identity '%s' in federation '%s'; 'xfed pki show' lists them",
            name, fed->name);
  XF_ENSURE(!e->revoked, err, XF_EEXISTS, "identity '%s' (serial %s) is already revoked", name,
            e->serial);
  EVP_PKEY *ca_key = NULL;
  XF_GUARD(ca_key_load(fed, &ca_key, err));
  xf_err rc = revoke_entry(fed, e, reason, ca_key, err);
  EVP_PKEY_free(ca_key);
  if (rc == XF_OK && out) *out = *e;
  return rc;
}

xf_err xf_federation_refresh_crl(xf_federation *fed, long days, xf_errctx *err) {
  if (!days) days = XF_PKI_CRL_DAYS;
  XF_GUARD(days_check("CRL", days, err));
  EVP_PKEY *ca_key = NULL;
  XF_GUARD(ca_key_load(fed, &ca_key, err));
  xf_err rc = crl_write(fed, ca_key, days, err);
  EVP_PKEY_free(ca_key);
  if (rc == XF_OK) rc = index_write(fed, err);
  return rc;
}
