/* SPDX-License-Identifier: Apache-2.0 */
/* A site's side of SecAgg+ against a malicious aggregator (Bonawitz et al.
 * 2017, section 6, on SecAgg+'s graph): the client of crypto/secagg.h
 * wrapped so that every key advert and every share is signed with the
 * site's certificate key and checked by its receiver, and nothing is
 * revealed before t cohort members have signed the same survivor set.
 * Signing and certificate checks come through an interface the caller
 * supplies (crypto/secagg_x509.h gives the federation's). No sockets, no
 * clock. See docs/secure-aggregation.md, "Against a malicious aggregator". */
#ifndef XF_CRYPTO_SECAGG_GUARD_H
#define XF_CRYPTO_SECAGG_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/secagg.h"

/* A signature: ECDSA P-256 as r || s, 32 bytes each, big-endian (the
 * federation's keys; crypto/secagg_x509.h). */
#define XF_SECAGG_SIG_BYTES 64
/* The largest certificate (DER) a member's keys may come with. Ours are
 * about 650 bytes. */
#define XF_SECAGG_CERT_MAX 4096
/* The longest site name: a label (crypto/pki.h). */
#define XF_SECAGG_NAME_MAX 63

/* What the guard needs of the site's identity and of the federation's
 * trust. Every function is called on the caller's thread. */
typedef struct xf_secagg_identity {
  void *user;
  /* Signs the len bytes of msg with this site's certificate key into sig. */
  xf_err (*sign)(void *user, const uint8_t *msg, size_t len, uint8_t sig[XF_SECAGG_SIG_BYTES],
                 xf_errctx *err);
  /* Checks that cert (DER, cert_len bytes, untrusted) is a site certificate
   * of this federation, current and not revoked, issued to the site `name`.
   * XF_OK with a handle in *peer for verify, given back through release;
   * otherwise an error whose message says why (revoked, expired, issued to
   * another site, not ours...). */
  xf_err (*open)(void *user, const uint8_t *cert, size_t cert_len, const char *name,
                 void **peer, xf_errctx *err);
  /* Whether sig is the peer's signature over the len bytes of msg. */
  bool (*verify)(void *user, void *peer, const uint8_t *msg, size_t len,
                 const uint8_t sig[XF_SECAGG_SIG_BYTES]);
  void (*release)(void *user, void *peer);
} xf_secagg_identity;

/* Everything that names one round: every statement a site signs starts
 * with a digest of all of it (the session id), so a signature made for
 * another job, round, attempt, parameter set or cohort list verifies
 * nowhere else. */
typedef struct xf_secagg_session {
  const char *job;            /* the job id */
  uint32_t round, attempt;
  xf_secagg_params params;
  const char *const *cohort;  /* params.n site names, site i is cohort[i - 1]:
                                 labels of 1..XF_SECAGG_NAME_MAX characters, distinct */
} xf_secagg_session;

/* One cohort member's keys as the aggregator relays them. advert NULL or
 * all zero: the member did not advertise. */
typedef struct xf_secagg_member_keys {
  const uint8_t *advert;      /* XF_SECAGG_ADVERT_BYTES */
  const uint8_t *sig;         /* XF_SECAGG_SIG_BYTES, or NULL */
  const uint8_t *cert;        /* DER, or NULL */
  size_t cert_len;
} xf_secagg_member_keys;

/* One encrypted pair of shares, the site it is for, and the sender's
 * signature over it. */
typedef struct xf_secagg_signed_share {
  uint32_t to;
  uint8_t ciphertext[XF_SECAGG_SHARE_BYTES];
  uint8_t sig[XF_SECAGG_SIG_BYTES];
} xf_secagg_signed_share;

typedef struct xf_secagg_guard xf_secagg_guard;

/* A guarded client for site `me` (1..n) of the session: the session is
 * checked (parameters, n distinct names, and t > n / 2: with t at most
 * half the cohort two halves could each be shown their own survivor set
 * and each sign it, XF_EINVAL), the client's keys drawn. The identity is
 * copied; its user must outlive the guard. The caller owns *out
 * (xf_secagg_guard_free, which wipes every secret). XF_ENOMEM. */
xf_err xf_secagg_guard_new(const xf_secagg_session *s, uint32_t me, const xf_secagg_identity *id,
                           xf_secagg_guard **out, xf_errctx *err) XF_WARN_UNUSED;
void xf_secagg_guard_free(xf_secagg_guard *g);

/* The session id: BLAKE2b-256 of "xf-secagg session v1", the job, round,
 * attempt, the parameters' digest (xf_secagg_params_digest) and the names,
 * each length-prefixed. XF_EINVAL for a malformed session. */
xf_err xf_secagg_session_id(const xf_secagg_session *s, uint8_t out[32],
                            xf_errctx *err) XF_WARN_UNUSED;

/* Phase 1: this site's advert and its signature of
 * ("xf-secagg advert v1" || session id || me || advert). Errors of sign. */
xf_err xf_secagg_guard_advertise(xf_secagg_guard *g, uint8_t advert[XF_SECAGG_ADVERT_BYTES],
                                 uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) XF_WARN_UNUSED;

/* Phase 2: keys holds the n members' keys, index order (our own among
 * them, unchanged). Every neighbour that advertised must come with a
 * certificate that open accepts for its name in the cohort and a signature
 * of its advert that verifies under it; otherwise XF_EINTEGRITY, err->peer
 * names the member and err->msg why, and nothing is shared. The other
 * members' certificates are kept for the consistency check. Then shares
 * as xf_secagg_client_share and signs each message
 * ("xf-secagg signed share v1" || session id || me || to || ciphertext);
 * its errors otherwise. */
xf_err xf_secagg_guard_share(xf_secagg_guard *g, const xf_secagg_member_keys *keys,
                             xf_secagg_signed_share *out, size_t cap, size_t *count,
                             xf_errctx *err) XF_WARN_UNUSED;

/* Phase 2, receiving: neighbour `from`'s shares and its signature of them.
 * XF_EINTEGRITY naming it when the signature does not verify under the
 * certificate its keys came with; then xf_secagg_client_receive. */
xf_err xf_secagg_guard_receive(xf_secagg_guard *g, uint32_t from,
                               const uint8_t ciphertext[XF_SECAGG_SHARE_BYTES],
                               const uint8_t sig[XF_SECAGG_SIG_BYTES],
                               xf_errctx *err) XF_WARN_UNUSED;

/* End of phase 2: xf_secagg_client_routed. */
xf_err xf_secagg_guard_routed(xf_secagg_guard *g, const uint32_t *u2, size_t n_u2,
                              xf_errctx *err) XF_WARN_UNUSED;

/* The client, for phase 3 (xf_secagg_client_mask, xf_update_mask) only:
 * reveal through xf_secagg_guard_unmask. Owned by g. */
xf_secagg_client *xf_secagg_guard_client(xf_secagg_guard *g);

/* The consistency round: the aggregator's survivor set U3 (any order). If
 * the client could reveal for it (xf_secagg_client_check_survivors: in it,
 * |U3| >= t, within U2, no second secret of anyone), signs
 * ("xf-secagg survivors v1" || session id || |U3| || U3 ascending). A site
 * signs one set per round: the same set again is signed again, another is
 * XF_EDENIED (the aggregator shows different sites different survivors). */
xf_err xf_secagg_guard_sign_survivors(xf_secagg_guard *g, const uint32_t *u3, size_t n_u3,
                                      uint8_t sig[XF_SECAGG_SIG_BYTES],
                                      xf_errctx *err) XF_WARN_UNUSED;

/* Phase 4: reveals for U3 only when U3 is the set this site signed and at
 * least t of the n_signers signatures (signers[k] made sigs + k *
 * XF_SECAGG_SIG_BYTES) are valid signatures of it by distinct members of
 * it, under certificates open accepts for their names. Otherwise
 * XF_EDENIED, nothing written, err->msg says why (err->peer names the
 * first signer whose signature failed, if any). Then
 * xf_secagg_client_unmask into out. Stops verifying at t valid; this
 * site's own place among the signers counts without a check (it signed
 * this very set). */
xf_err xf_secagg_guard_unmask(xf_secagg_guard *g, const uint32_t *u3, size_t n_u3,
                              const uint32_t *signers, const uint8_t *sigs, size_t n_signers,
                              uint8_t *out, size_t cap, size_t *len,
                              xf_errctx *err) XF_WARN_UNUSED;

/* The name of cohort member i (1..n), or NULL. Owned by g. */
const char *xf_secagg_guard_member(const xf_secagg_guard *g, uint32_t i);

#endif
