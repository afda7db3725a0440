/* SPDX-License-Identifier: Apache-2.0 */
/* This site's part in rounds of secure aggregation, with no sockets: the
 * rounds it holds (one per job; a round outlives its task, since the
 * unmasking comes after the update is delivered), each a guarded client
 * (crypto/secagg_guard.h), and what each message of the aggregator makes
 * of it — the shares to send for the cohort's keys, the routed shares
 * taken, the survivor set signed, the reveal. The daemon sends what these
 * return and, on an error, refuses the round (xf_site_sa_peer names the
 * member at fault) and forgets it; tests/fuzz/fuzz_site_task.c calls the
 * same functions. */
#ifndef XF_SITE_SITEAGG_H
#define XF_SITE_SITEAGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/secagg_guard.h"
#include "net/xfed.pb-c.h"
#include "update/update.h"

typedef struct xf_site_sa xf_site_sa;

/* The site's rounds, room for `slots` of them. XF_ENOMEM. */
xf_err xf_site_sa_new(size_t slots, xf_site_sa **out, xf_errctx *err) XF_WARN_UNUSED;
/* Frees every round and sa; NULL-safe. */
void xf_site_sa_free(xf_site_sa *sa);

/* Whether the site holds a task of job, for the choice of a round to give
 * up when every slot is taken. */
typedef bool (*xf_site_sa_holds)(void *user, const char *job);

/* Begins (job, round, attempt)'s round with this site's setup and the
 * cohort's names: a guarded client signing as id, its keys drawn. A newer
 * round of the job replaces an older one; a full table gives up the
 * oldest round of a job `holds` says the site holds no task of. Errors as
 * xf_secagg_guard_new; XF_EINTERNAL when no slot can be given up. */
xf_err xf_site_sa_begin(xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt,
                        const xf_update_secagg *setup, const char *const *cohort,
                        const xf_secagg_identity *id, xf_site_sa_holds holds, void *user,
                        xf_errctx *err) XF_WARN_UNUSED;

/* Whether the site holds (job, round, attempt)'s round (job may be NULL:
 * false). */
bool xf_site_sa_has(const xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt);
/* Lets go of the round, if the site has it. */
void xf_site_sa_forget(xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt);
/* Whether the round's shares are routed (U2 known): its input can be
 * masked with xf_site_sa_client. */
bool xf_site_sa_routed(const xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt);
/* The round's client and its field bits, for xf_update_mask; NULL when the
 * site has no such round. */
xf_secagg_client *xf_site_sa_client(xf_site_sa *sa, const char *job, uint32_t round,
                                    uint32_t attempt, uint32_t *bits);
/* The cohort member (1-based index) named `peer` in the round, or 0. */
uint32_t xf_site_sa_peer(const xf_site_sa *sa, const char *job, uint32_t round,
                         uint32_t attempt, const char *peer);

/* Each message's errors name the member at fault in err->peer where one is
 * (xf_site_sa_peer turns it into an index); the caller then refuses the
 * round and forgets it. XF_ENOENT: the site has no such round. */

/* This site's keys for the round, signed. */
xf_err xf_site_sa_advertise(xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt,
                            uint8_t advert[XF_SECAGG_ADVERT_BYTES],
                            uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) XF_WARN_UNUSED;

/* The cohort's keys as the aggregator relayed them: one advert, signature
 * and certificate per index. *shares (free with xf_site_sa_shares_free)
 * gets the *count encrypted, signed shares to send, each to a member other
 * than this site. XF_EFORMAT when the lists do not fit the cohort. */
xf_err xf_site_sa_keys(xf_site_sa *sa, const Xfed__SecAggKeys *k,
                       xf_secagg_signed_share **shares, size_t *count,
                       xf_errctx *err) XF_WARN_UNUSED;
/* Wipes and frees what xf_site_sa_keys returned; NULL-safe. */
void xf_site_sa_shares_free(xf_secagg_signed_share *shares, size_t count);

/* The shares routed to this site and the set U2 they came from. XF_EFORMAT
 * when the lists differ in length or a share or signature has the wrong
 * size. */
xf_err xf_site_sa_routed_in(xf_site_sa *sa, const Xfed__SecAggRouted *r,
                            xf_errctx *err) XF_WARN_UNUSED;

/* The consistency round: this site's signature of the survivor set the
 * aggregator claims (once per round: another set is refused). */
xf_err xf_site_sa_check(xf_site_sa *sa, const Xfed__SecAggCheck *c,
                        uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) XF_WARN_UNUSED;

/* The request to reveal: *reveal (free with xf_site_sa_reveal_free, *cap
 * bytes) gets *len bytes, only for the survivor set this site signed and
 * with every survivor's signature of it. XF_EFORMAT when signers and
 * signatures differ in number. */
xf_err xf_site_sa_unmask(xf_site_sa *sa, const Xfed__SecAggUnmask *u, uint8_t **reveal,
                         size_t *len, size_t *cap, xf_errctx *err) XF_WARN_UNUSED;
/* Wipes and frees a reveal; NULL-safe. */
void xf_site_sa_reveal_free(uint8_t *reveal, size_t cap);

#endif
