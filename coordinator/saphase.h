/* SPDX-License-Identifier: Apache-2.0 */
/* Secure aggregation of one round attempt at its aggregator (the global
 * coordinator over its direct sites, or a regional aggregator over its
 * region's): the server side of SecAgg+ (crypto/secagg.h) with the
 * consistency round of the malicious-server variant — signed keys, signed
 * shares, masked inputs, the survivor set signed, unmasking — as a machine
 * with no sockets and no clock of its own. Events in (a site's keys,
 * shares, masked input, signature of the survivors, reveal, a site gone,
 * the round closed, the clock), actions out (send the keys, route the
 * shares, ask for signatures, ask for the reveals, drop a site that missed
 * a phase, done with the mean, failed). It relays signatures and
 * certificates and checks their sizes only: the sites check them
 * (crypto/secagg_guard.h), so an aggregator that does not relay them
 * faithfully gains nothing but refusals. docs/secure-aggregation.md
 * describes the protocol. */
#ifndef XF_COORDINATOR_SAPHASE_H
#define XF_COORDINATOR_SAPHASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "update/update.h"

/* The longest a key phase or the unmasking may take; a site that has not
 * answered by then is left out of the round. */
#define XF_SAPHASE_PHASE_MAX_S 30.0

/* Room for a reason (DROP, FAILED, xf_saphase_failure), terminator included. */
#define XF_SAPHASE_WHY_MAX 256

/* Times are seconds on the caller's clock; the machine only compares and
 * adds them. */

typedef struct xf_saphase_config {
  uint32_t n;               /* the cohort: 2..XF_SECAGG_MAX_SITES sites */
  const uint64_t *sites;    /* n distinct site ids; site i + 1 of the protocol is sites[i] */
  const uint64_t *weights;  /* n weights (training records, >= 1) or NULL: equal weights
                               (site-level privacy: one site moves the mean by at most
                               clip / n) */
  double threshold;         /* the job's secure_aggregation.threshold, (0, 1]: t =
                               ceil(threshold * n), at least 2, at most n */
  uint32_t bits;            /* secure_aggregation.bits, 8..32: arithmetic mod 2^bits */
  size_t n_params;          /* the model's parameters, 1..XF_SECAGG_MAX_LENGTH */
  double clip;              /* privacy.clip (> 0): fixes the shared integer scale */
  double noise_multiplier;  /* mode distributed: the job's z (the sites' shares of the
                               noise widen the scale to hold it); else 0 */
  uint32_t quant_bits;      /* uplink qN (2..32), or 0 */
  double topk_fraction;     /* uplink top-k, [0, 1]: every site sends the same shared
                               random subset of this fraction; 0: all values */
  double phase_s;           /* each phase's deadline after it starts (> 0; at most
                               XF_SAPHASE_PHASE_MAX_S is used): the daemon passes a
                               quarter of the round's deadline */
  const uint8_t *graph_seed;/* 32 bytes, fresh for the attempt (CSPRNG; tests fix it) */
  uint64_t subset_seed;     /* fresh for the attempt when top-k is on */
} xf_saphase_config;

typedef enum xf_saphase_state {
  XF_SAPHASE_ADVERT = 0, /* collecting the sites' keys */
  XF_SAPHASE_SHARE,      /* collecting their encrypted shares */
  XF_SAPHASE_MASKED,     /* shares routed: masked inputs arrive until the round closes */
  XF_SAPHASE_CHECK,      /* the round closed: collecting the survivors' signatures of U3 */
  XF_SAPHASE_UNMASK,     /* collecting the signers' reveals */
  XF_SAPHASE_DONE,       /* the mean is unmasked: xf_saphase_take_mean */
  XF_SAPHASE_FAILED      /* the sum cannot be unmasked: xf_saphase_failure says why */
} xf_saphase_state;

/* "advert", "share", "masked", "check", "unmask", "done", "failed";
 * "unknown" outside the enum. */
const char *xf_saphase_state_name(xf_saphase_state s);

typedef enum xf_saphase_action_kind {
  XF_SAPHASE_ACT_SEND_KEYS = 0, /* send `site` the adverts of the cohort (n * 64 bytes),
                                   each site's signature and certificate */
  XF_SAPHASE_ACT_SEND_ROUTED,   /* send `site` U2 and the shares addressed to it, each
                                   with its sender's signature */
  XF_SAPHASE_ACT_SEND_CHECK,    /* ask `site` to sign survivors U3 */
  XF_SAPHASE_ACT_SEND_UNMASK,   /* ask `site` to reveal for survivors U3, with the
                                   signatures of U3 collected */
  XF_SAPHASE_ACT_DROP,          /* leave `site` out of the round: it missed a phase or
                                   sent something malformed or out of turn (`why`).
                                   The machine counts it gone already. */
  XF_SAPHASE_ACT_DONE,          /* the mean is unmasked: xf_saphase_take_mean */
  XF_SAPHASE_ACT_FAILED         /* it cannot be (`why`: too few sites at a phase, too
                                   few reveals). Before xf_saphase_close the caller
                                   abandons the attempt (drops its sites, so the round
                                   retries); after it, the commit fails
                                   (xf_round_commit_failed). */
} xf_saphase_action_kind;

/* Pointers in an action point into the machine and stay valid until the
 * next event call on it (advert ... tick) or xf_saphase_free. */
typedef struct xf_saphase_action {
  xf_saphase_action_kind kind;
  uint64_t site;             /* SEND_*, DROP; else 0 */
  const uint8_t *adverts;    /* SEND_KEYS */
  size_t adverts_len;
  const uint32_t *u2;        /* SEND_ROUTED: the sites that shared, ascending */
  size_t n_u2;
  const uint32_t *from;      /* SEND_ROUTED: the sender of each share */
  const uint8_t *const *cts; /* SEND_ROUTED: each XF_SECAGG_SHARE_BYTES long */
  size_t n_cts;
  const uint32_t *u3;        /* SEND_CHECK, SEND_UNMASK, ascending */
  size_t n_u3;
  /* XF_SECAGG_SIG_BYTES each, back to back: SEND_KEYS, the n sites'
   * signatures of their keys in index order (zero: no keys); SEND_ROUTED,
   * one per share; SEND_UNMASK, one per signer. */
  const uint8_t *sigs;
  /* SEND_KEYS: the n sites' certificates (DER) back to back in index order,
   * cert_lens[i] bytes for site i + 1 (0: no keys). */
  const uint8_t *certs;
  size_t certs_len;
  const uint32_t *cert_lens;
  const uint32_t *signers;   /* SEND_UNMASK: the sites whose signatures sigs holds */
  size_t n_signers;
  char why[XF_SAPHASE_WHY_MAX]; /* DROP, FAILED; else "" */
} xf_saphase_action;

typedef struct xf_saphase xf_saphase;

/* Sets up the attempt's secure aggregation: params (t, degree, length: the
 * shared subset or n_params), the shared integer scale (each site's scaled
 * update has coordinates within clip; n of them, each rounded by less than
 * a unit, stay below 2^(bits-1) units: bound = 2^(bits-1) - 1 - n units of
 * step = clip / bound; with uplink qN each site's value is an N-bit integer
 * on the scale, bound = 2^(N-1) - 1), each site's share of the weight
 * (weight / total, or 1 / n), the subset. Phase ADVERT, due at now +
 * phase_s. XF_EINVAL naming the field for a cohort out of range, a repeated
 * site, a weight of 0, clip <= 0 or any other field out of its range;
 * XF_ERANGE when bits cannot hold the sum of n sites' values (qN, or the n
 * roundings) (the message names the bits needed); XF_ENOMEM. The caller
 * owns *out (xf_saphase_free); NULL on failure. */
xf_err xf_saphase_create(const xf_saphase_config *cfg, double now, xf_saphase **out,
                         xf_errctx *err) XF_WARN_UNUSED;

/* Frees sa and wipes the shares and inputs it held; NULL is allowed. */
void xf_saphase_free(xf_saphase *sa);

/* The site's place (1..n), 0 when it is not in the cohort. O(log n). */
uint32_t xf_saphase_index(const xf_saphase *sa, uint64_t site);
/* The cohort's site ids in index order (xf_saphase_params(sa)->n of them;
 * owned by sa): what names go into every site's setup. */
const uint64_t *xf_saphase_cohort(const xf_saphase *sa);

/* The setup a cohort site is told (TaskGo.secagg): params, its index, the
 * scale, its share of the weight, the subset (its size and seed; 0 and 0
 * without top-k). XF_ENOENT for a site outside the cohort. */
xf_err xf_saphase_setup(const xf_saphase *sa, uint64_t site, xf_update_secagg *out) XF_WARN_UNUSED;

const xf_secagg_params *xf_saphase_params(const xf_saphase *sa);
xf_saphase_state xf_saphase_get_state(const xf_saphase *sa);
/* Of the current phase; INFINITY when none runs (MASKED: the round's own
 * deadline closes it; DONE, FAILED). CHECK and UNMASK each have their own
 * phase span. */
double xf_saphase_deadline(const xf_saphase *sa);

/* ---- events ---------------------------------------------------------------------------------
 * Each call starts a new action list. Deliver xf_saphase_tick first
 * whenever the clock moved; `now` in an event only dates the phase it may
 * start. A message returns:
 *   XF_OK      taken;
 *   XF_ENOENT  its site is not in the cohort (err names it; nothing is
 *              queued or changed);
 *   XF_EINVAL, XF_EFORMAT, XF_EEXISTS, ...  refused: out of turn (a phase
 *              that is over or not begun, a site already gone: XF_EINVAL),
 *              malformed (XF_EFORMAT), repeated (XF_EEXISTS), or whatever
 *              crypto/secagg.h refused it with; err names the site and
 *              what was wrong, and DROP is queued for the site with the
 *              same words (the phase may then move on, as with
 *              xf_saphase_gone). Once DONE or FAILED a message is XF_EINVAL
 *              with nothing queued: the attempt's result stands.
 * A phase moves on as soon as every site it waits for has answered (or
 * left), or at its deadline (xf_saphase_tick): KEYS to every site still in
 * the round that advertised once t of them did, ROUTED once the shares are
 * in, UNMASK to the survivors that signed U3 once t of them did, DROP for
 * those that missed the key phases, FAILED when fewer than t are left. */

/* A site's keys as it sent them (SecAggAdvert). */
typedef struct xf_saphase_keys {
  const uint8_t *advert; /* XF_SECAGG_ADVERT_BYTES */
  size_t advert_len;
  const uint8_t *sig;    /* XF_SECAGG_SIG_BYTES: its signature of them */
  size_t sig_len;
  const uint8_t *cert;   /* its certificate (DER), 1..XF_SECAGG_CERT_MAX bytes */
  size_t cert_len;
} xf_saphase_keys;

xf_err xf_saphase_advert(xf_saphase *sa, uint64_t site, const xf_saphase_keys *keys, double now,
                         xf_errctx *err) XF_WARN_UNUSED;
/* A site's shares as it sent them (SecAggShares): three lists, equally
 * long when well formed. Each list carries its own length, so lists of
 * different lengths are refused without reading past any of them. */
typedef struct xf_saphase_shares_msg {
  const uint32_t *to; /* the receivers' indices */
  size_t n_to;
  const uint8_t *const *cts; /* ciphertexts, ct_lens[k] bytes each */
  const size_t *ct_lens;
  size_t n_cts;
  const uint8_t *const *sigs; /* each ciphertext's signature, sig_lens[k] bytes */
  const size_t *sig_lens;
  size_t n_sigs;
} xf_saphase_shares_msg;

/* Shares of `site` for the sites msg->to (distinct, at most the degree,
 * each ciphertext XF_SECAGG_SHARE_BYTES long with its signature of
 * XF_SECAGG_SIG_BYTES; only its neighbours in the graph). Off the complete
 * graph each receiver costs O(n) to check (xf_secagg_neighbours rebuilds
 * the graph), so a cohort's shares cost O(n^2 degree) in all: fine to a
 * few thousand sites. */
xf_err xf_saphase_shares(xf_saphase *sa, uint64_t site, const xf_saphase_shares_msg *msg,
                         double now, xf_errctx *err) XF_WARN_UNUSED;
/* The site's whole masked input: `length` words (xf_secagg_params.length),
 * each below 2^bits, from a site whose shares were routed. Taken over on
 * XF_OK (*words set to NULL; held until unmasking); otherwise *words stays
 * the caller's. */
xf_err xf_saphase_masked(xf_saphase *sa, uint64_t site, uint32_t **words, size_t n_words,
                         double now, xf_errctx *err) XF_WARN_UNUSED;
/* A survivor's signature of U3 (XF_SECAGG_SIG_BYTES), in phase CHECK. */
xf_err xf_saphase_check_sig(xf_saphase *sa, uint64_t site, const uint8_t *sig, size_t len,
                            double now, xf_errctx *err) XF_WARN_UNUSED;
/* A signer's reveal (xf_secagg_client_unmask's message), in phase UNMASK. */
xf_err xf_saphase_reveal(xf_saphase *sa, uint64_t site, const uint8_t *msg, size_t len,
                         double now, xf_errctx *err) XF_WARN_UNUSED;
/* The site left the round (dropped, refused, its link lost for good): the
 * phases stop waiting for it (which may move one on: actions for the
 * others); its masked input, if any, is not counted (it is wiped now).
 * Nothing is queued for the site itself; calling it again, or for a site
 * outside the cohort, does nothing. */
void xf_saphase_gone(xf_saphase *sa, uint64_t site, double now);
/* The site refused to go on: a check it makes of what the aggregator
 * relays failed (a key or share without its sender's signature, a survivor
 * set without t signatures, ...; crypto/secagg_guard.h). As
 * xf_saphase_gone, and counted: a failure then says how many sites refused
 * and names the first. */
void xf_saphase_refused(xf_saphase *sa, uint64_t site, double now);
/* The round closed with quorum: the masked inputs of the sites still in it
 * are added to the sum, the survivors are fixed (U3) and asked to sign it
 * (SEND_CHECK), due at now + phase_s; once they all signed or left (or at
 * that deadline) the signers are asked to reveal (SEND_UNMASK, with every
 * signature), due a phase span later. FAILED when fewer than t survive,
 * fewer than t signed, or the shares were not routed yet. Does nothing
 * once the check began. */
void xf_saphase_close(xf_saphase *sa, double now);
/* The clock: a phase whose deadline has come moves on without the sites
 * that did not answer. */
void xf_saphase_tick(xf_saphase *sa, double now);

/* The actions queued by the last event call; owned by sa. *n gets the count. */
const xf_saphase_action *xf_saphase_actions(const xf_saphase *sa, size_t *n);

/* ---- the result ----------------------------------------------------------------------------- */

/* DONE: the survivors' weighted mean of their updates over n_params values
 * (zero outside the subset), its weight (the survivors' weights) and the
 * survivors (U3: the sites whose masked input is in the sum, a survivor
 * dropped for a bad reveal included; site ids, *n of them, ascending by
 * index; owned by sa). *mean is handed over (xf_free); a second call, or
 * a call before DONE, gets XF_EINVAL. */
xf_err xf_saphase_take_mean(xf_saphase *sa, float **mean, uint64_t *weight,
                            const uint64_t **survivors, size_t *n, xf_errctx *err) XF_WARN_UNUSED;
/* FAILED: why; else "". Owned by sa. */
const char *xf_saphase_failure(const xf_saphase *sa);
/* PRG expansions the unmasking needed (for the log and benchmarks). */
uint64_t xf_saphase_prg_expansions(const xf_saphase *sa);

#endif
