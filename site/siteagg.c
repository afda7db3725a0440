/* SPDX-License-Identifier: Apache-2.0 */
/* This site's rounds of secure aggregation and what each message makes of
 * them (site/siteagg.h). */
#include "site/siteagg.h"

#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "base/alloc.h"
#include "site/offer.h"

/* One round of one job. */
typedef struct round_slot {
  bool active;
  uint64_t seq; /* when it began: the oldest is given up first */
  char job_id[XF_SITE_JOB_ID_MAX];
  uint32_t round, attempt;
  xf_secagg_params p;
  xf_secagg_guard *guard; /* the client, checking what the aggregator relays */
  bool routed;            /* U2 known: inputs can be masked */
} round_slot;

struct xf_site_sa {
  size_t n;
  uint64_t count; /* the last seq handed out */
  round_slot slots[];
};

xf_err xf_site_sa_new(size_t slots, xf_site_sa **out, xf_errctx *err) {
  xf_site_sa *sa = xf_calloc(1, sizeof(*sa) + slots * sizeof(round_slot));
  XF_ENSURE(sa, err, XF_ENOMEM, "no memory for the rounds of secure aggregation");
  sa->n = slots;
  *out = sa;
  return XF_OK;
}

static void slot_free(round_slot *s) {
  xf_secagg_guard_free(s->guard);
  memset(s, 0, sizeof(*s));
}

void xf_site_sa_free(xf_site_sa *sa) {
  if (!sa) return;
  for (size_t i = 0; i < sa->n; i++) slot_free(&sa->slots[i]);
  xf_free(sa);
}

static round_slot *find(const xf_site_sa *sa, const char *job, uint32_t round,
                        uint32_t attempt) {
  for (size_t i = 0; job && i < sa->n; i++) {
    const round_slot *s = &sa->slots[i];
    if (s->active && strcmp(s->job_id, job) == 0 && s->round == round && s->attempt == attempt)
      return (round_slot *)s;
  }
  return NULL;
}

bool xf_site_sa_has(const xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt) {
  return find(sa, job, round, attempt) != NULL;
}

void xf_site_sa_forget(xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt) {
  round_slot *s = find(sa, job, round, attempt);
  if (s) slot_free(s);
}

bool xf_site_sa_routed(const xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt) {
  const round_slot *s = find(sa, job, round, attempt);
  return s && s->routed;
}

xf_secagg_client *xf_site_sa_client(xf_site_sa *sa, const char *job, uint32_t round,
                                    uint32_t attempt, uint32_t *bits) {
  round_slot *s = find(sa, job, round, attempt);
  if (!s) return NULL;
  *bits = s->p.bits;
  return xf_secagg_guard_client(s->guard);
}

uint32_t xf_site_sa_peer(const xf_site_sa *sa, const char *job, uint32_t round,
                         uint32_t attempt, const char *peer) {
  const round_slot *s = find(sa, job, round, attempt);
  for (uint32_t i = 1; s && peer && peer[0] && i <= s->p.n; i++) {
    const char *name = xf_secagg_guard_member(s->guard, i);
    if (name && strcmp(name, peer) == 0) return i;
  }
  return 0;
}

/* The slot for a new round of job: its older round given up, else a free
 * slot, else the oldest round of a job the site holds no task of. */
static round_slot *slot_for(xf_site_sa *sa, const char *job, xf_site_sa_holds holds,
                            void *user) {
  round_slot *slot = NULL;
  for (size_t i = 0; i < sa->n; i++) {
    round_slot *s = &sa->slots[i];
    if (s->active && strcmp(s->job_id, job) == 0) slot_free(s);
  }
  for (size_t i = 0; i < sa->n && !slot; i++)
    if (!sa->slots[i].active) slot = &sa->slots[i];
  for (size_t i = 0; i < sa->n && !slot; i++) {
    round_slot *s = &sa->slots[i];
    if (holds && holds(user, s->job_id)) continue;
    if (!slot || s->seq < slot->seq) slot = s;
  }
  return slot;
}

xf_err xf_site_sa_begin(xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt,
                        const xf_update_secagg *setup, const char *const *cohort,
                        const xf_secagg_identity *id, xf_site_sa_holds holds, void *user,
                        xf_errctx *err) {
  round_slot *slot = slot_for(sa, job, holds, user);
  XF_ENSURE(slot, err, XF_EINTERNAL, "no room for another round of secure aggregation");
  slot_free(slot);
  xf_secagg_session session = {.job = job,
                               .round = round,
                               .attempt = attempt,
                               .params = setup->params,
                               .cohort = cohort};
  xf_secagg_guard *guard = NULL;
  XF_GUARD(xf_secagg_guard_new(&session, setup->index, id, &guard, err));
  slot->active = true;
  slot->seq = ++sa->count;
  snprintf(slot->job_id, sizeof(slot->job_id), "%s", job);
  slot->round = round;
  slot->attempt = attempt;
  slot->p = setup->params;
  slot->guard = guard;
  return XF_OK;
}

#define FIND_OR_FAIL(s, sa, job, round, attempt, err)                                        \
  round_slot *s = find((sa), (job), (round), (attempt));                                     \
  XF_ENSURE(s, (err), XF_ENOENT, "no round of secure aggregation of job %s round %u attempt %u", \
            (job) ? (job) : "", (unsigned)(round), (unsigned)(attempt))

xf_err xf_site_sa_advertise(xf_site_sa *sa, const char *job, uint32_t round, uint32_t attempt,
                            uint8_t advert[XF_SECAGG_ADVERT_BYTES],
                            uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  FIND_OR_FAIL(s, sa, job, round, attempt, err);
  return xf_secagg_guard_advertise(s->guard, advert, sig, err);
}

/* The cohort's keys as the aggregator relayed them: n adverts, and one
 * signature and certificate per index (both empty for a site that sent no
 * keys). *out (xf_free) points into k. */
static xf_err member_keys(const round_slot *s, const Xfed__SecAggKeys *k,
                          xf_secagg_member_keys **out, xf_errctx *err) {
  uint32_t n = s->p.n;
  XF_ENSURE(k->adverts.len == (size_t)n * XF_SECAGG_ADVERT_BYTES && k->n_signatures == n &&
                k->n_certificates == n,
            err, XF_EFORMAT,
            "the cohort's keys came as %zu bytes of adverts, %zu signatures and %zu "
            "certificates for %u sites",
            k->adverts.len, k->n_signatures, k->n_certificates, n);
  xf_secagg_member_keys *keys = xf_calloc(n, sizeof(*keys));
  XF_ENSURE(keys, err, XF_ENOMEM, "no memory for the cohort's keys");
  for (uint32_t i = 0; i < n; i++) {
    keys[i].advert = k->adverts.data + (size_t)i * XF_SECAGG_ADVERT_BYTES;
    keys[i].sig = k->signatures[i].len == XF_SECAGG_SIG_BYTES ? k->signatures[i].data : NULL;
    keys[i].cert = k->certificates[i].data;
    keys[i].cert_len = k->certificates[i].len;
  }
  *out = keys;
  return XF_OK;
}

xf_err xf_site_sa_keys(xf_site_sa *sa, const Xfed__SecAggKeys *k,
                       xf_secagg_signed_share **shares, size_t *count, xf_errctx *err) {
  FIND_OR_FAIL(s, sa, k->job_id, k->round, k->attempt, err);
  size_t cap = s->p.degree;
  *shares = NULL;
  *count = 0;
  xf_secagg_member_keys *keys = NULL;
  xf_secagg_signed_share *msgs = xf_mallocarray(cap ? cap : 1, sizeof(*msgs));
  xf_err rc = msgs ? member_keys(s, k, &keys, err)
                   : xf_fail(err, XF_ENOMEM, "no memory for %zu shares", cap);
  if (rc == XF_OK) rc = xf_secagg_guard_share(s->guard, keys, msgs, cap, count, err);
  xf_free(keys);
  if (rc != XF_OK) {
    xf_free(msgs);
    *count = 0;
    return rc;
  }
  *shares = msgs;
  return XF_OK;
}

void xf_site_sa_shares_free(xf_secagg_signed_share *shares, size_t count) {
  if (!shares) return;
  sodium_memzero(shares, (count ? count : 1) * sizeof(*shares));
  xf_free(shares);
}

xf_err xf_site_sa_routed_in(xf_site_sa *sa, const Xfed__SecAggRouted *r, xf_errctx *err) {
  FIND_OR_FAIL(s, sa, r->job_id, r->round, r->attempt, err);
  XF_ENSURE(r->n_from == r->n_ciphertexts && r->n_from == r->n_signatures, err, XF_EFORMAT,
            "the routed shares came as %zu senders, %zu ciphertexts and %zu signatures",
            r->n_from, r->n_ciphertexts, r->n_signatures);
  for (size_t i = 0; i < r->n_from; i++) {
    XF_ENSURE(r->ciphertexts[i].len == XF_SECAGG_SHARE_BYTES &&
                  r->signatures[i].len == XF_SECAGG_SIG_BYTES,
              err, XF_EFORMAT,
              "the share routed from site %u has %zu bytes and a signature of %zu",
              (unsigned)r->from[i], r->ciphertexts[i].len, r->signatures[i].len);
    XF_GUARD(xf_secagg_guard_receive(s->guard, r->from[i], r->ciphertexts[i].data,
                                     r->signatures[i].data, err));
  }
  XF_GUARD(xf_secagg_guard_routed(s->guard, r->u2, r->n_u2, err));
  s->routed = true;
  return XF_OK;
}

xf_err xf_site_sa_check(xf_site_sa *sa, const Xfed__SecAggCheck *c,
                        uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  FIND_OR_FAIL(s, sa, c->job_id, c->round, c->attempt, err);
  return xf_secagg_guard_sign_survivors(s->guard, c->u3, c->n_u3, sig, err);
}

xf_err xf_site_sa_unmask(xf_site_sa *sa, const Xfed__SecAggUnmask *u, uint8_t **reveal,
                         size_t *len, size_t *cap, xf_errctx *err) {
  FIND_OR_FAIL(s, sa, u->job_id, u->round, u->attempt, err);
  *reveal = NULL;
  *len = 0;
  *cap = xf_secagg_reveal_max_bytes(&s->p);
  uint8_t *out = xf_malloc(*cap);
  size_t n = u->n_signers;
  uint8_t *sigs = xf_mallocarray(n ? n : 1, XF_SECAGG_SIG_BYTES);
  xf_err rc = out && sigs ? XF_OK : xf_fail(err, XF_ENOMEM, "no memory for the reveal");
  if (rc == XF_OK && u->n_signatures != n)
    rc = xf_fail(err, XF_EFORMAT, "the unmask request names %zu signers and %zu signatures", n,
                 u->n_signatures);
  for (size_t i = 0; rc == XF_OK && i < n; i++) {
    /* A signature of another length counts as a wrong one. */
    if (u->signatures[i].len == XF_SECAGG_SIG_BYTES)
      memcpy(sigs + i * XF_SECAGG_SIG_BYTES, u->signatures[i].data, XF_SECAGG_SIG_BYTES);
    else
      memset(sigs + i * XF_SECAGG_SIG_BYTES, 0, XF_SECAGG_SIG_BYTES);
  }
  if (rc == XF_OK)
    rc = xf_secagg_guard_unmask(s->guard, u->u3, u->n_u3, u->signers, sigs, n, out, *cap, len,
                                err);
  xf_free(sigs);
  if (rc != XF_OK) {
    xf_free(out);
    *len = 0;
    return rc;
  }
  *reveal = out;
  return XF_OK;
}

void xf_site_sa_reveal_free(uint8_t *reveal, size_t cap) {
  if (!reveal) return;
  sodium_memzero(reveal, cap);
  xf_free(reveal);
}
