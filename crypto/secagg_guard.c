/* SPDX-License-Identifier: Apache-2.0 */
/* SecAgg+ against a malicious aggregator at a site: signed adverts and
 * shares, the peers' certificates and signatures checked, and a reveal
 * only for a survivor set that t members signed (crypto/secagg_guard.h). */
#include "crypto/secagg_guard.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#define ID_BYTES 32

static const char LABEL_SESSION[] = "xf-secagg session v1";
static const char LABEL_ADVERT[] = "xf-secagg advert v1";
static const char LABEL_SHARE[] = "xf-secagg signed share v1";
static const char LABEL_SURVIVORS[] = "xf-secagg survivors v1";

/* Longest fixed statement: the share's. */
#define STATEMENT_MAX (sizeof(LABEL_SHARE) - 1 + ID_BYTES + 8 + XF_SECAGG_SHARE_BYTES)

/* What is known of a member's certificate. */
enum { PEER_UNKNOWN = 0, PEER_OPEN, PEER_REFUSED };

struct xf_secagg_guard {
  xf_secagg_params p;
  uint32_t me;
  uint8_t sid[ID_BYTES];
  xf_secagg_identity id;
  xf_secagg_client *client;
  char (*names)[XF_SECAGG_NAME_MAX + 1]; /* index - 1 */
  uint8_t **certs;                       /* index - 1: DER from the keys, or NULL */
  size_t *cert_lens;
  void **peers;         /* index - 1: open's handle when PEER_OPEN */
  uint8_t *peer_state;  /* index - 1: PEER_* */
  bool shared;
  uint32_t *signed_u3; /* the survivor set signed, ascending; NULL: none yet */
  size_t n_signed;
};

/* ---- statements --------------------------------------------------------------------- */

static void put_u32(uint8_t *q, uint32_t v) {
  for (size_t b = 0; b < 4; b++) q[b] = (uint8_t)(v >> (24 - 8 * b));
}

static void hash_u32(crypto_generichash_state *h, uint32_t v) {
  uint8_t b[4];
  put_u32(b, v);
  crypto_generichash_update(h, b, sizeof(b));
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static xf_err check_session(const xf_secagg_session *s, xf_errctx *err) {
  XF_ENSURE(s && s->job && s->cohort, err, XF_EINVAL,
            "secure aggregation: the session needs its job id and the cohort's names");
  XF_GUARD(xf_secagg_params_check(&s->params, err));
  XF_ENSURE(strlen(s->job) <= 255, err, XF_EINVAL,
            "secure aggregation: the job id is longer than 255 characters");
  for (uint32_t i = 0; i < s->params.n; i++) {
    const char *name = s->cohort[i];
    size_t len = name ? strlen(name) : 0;
    XF_ENSURE(len >= 1 && len <= XF_SECAGG_NAME_MAX, err, XF_EINVAL,
              "secure aggregation: cohort member %u has %s name; a site name has 1 to %d "
              "characters",
              i + 1, len ? "an overlong" : "no", XF_SECAGG_NAME_MAX);
  }
  const char **sorted = xf_mallocarray(s->params.n, sizeof(*sorted));
  if (!sorted) return xf_fail(err, XF_ENOMEM, "secure aggregation: no memory for the cohort");
  memcpy(sorted, s->cohort, s->params.n * sizeof(*sorted));
  qsort(sorted, s->params.n, sizeof(*sorted), cmp_name);
  xf_err rc = XF_OK;
  for (uint32_t i = 1; i < s->params.n && rc == XF_OK; i++)
    if (strcmp(sorted[i - 1], sorted[i]) == 0)
      rc = xf_fail(err, XF_EINVAL, "secure aggregation: site '%s' is in the cohort twice",
                   sorted[i]);
  xf_free(sorted);
  return rc;
}

xf_err xf_secagg_session_id(const xf_secagg_session *s, uint8_t out[32], xf_errctx *err) {
  XF_GUARD(check_session(s, err));
  uint8_t params[ID_BYTES];
  xf_secagg_params_digest(&s->params, params);
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, ID_BYTES);
  crypto_generichash_update(&h, (const uint8_t *)LABEL_SESSION, sizeof(LABEL_SESSION) - 1);
  size_t job_len = strlen(s->job);
  hash_u32(&h, (uint32_t)job_len);
  crypto_generichash_update(&h, (const uint8_t *)s->job, job_len);
  hash_u32(&h, s->round);
  hash_u32(&h, s->attempt);
  crypto_generichash_update(&h, params, sizeof(params));
  hash_u32(&h, s->params.n);
  for (uint32_t i = 0; i < s->params.n; i++) {
    size_t len = strlen(s->cohort[i]);
    hash_u32(&h, (uint32_t)len);
    crypto_generichash_update(&h, (const uint8_t *)s->cohort[i], len);
  }
  crypto_generichash_final(&h, out, ID_BYTES);
  return XF_OK;
}

/* label || session id || the u32s || tail; returns the length. */
static size_t statement(uint8_t *out, const char *label, const uint8_t sid[ID_BYTES],
                        const uint32_t *nums, size_t n_nums, const uint8_t *tail,
                        size_t tail_len) {
  size_t at = strlen(label);
  memcpy(out, label, at);
  memcpy(out + at, sid, ID_BYTES);
  at += ID_BYTES;
  for (size_t k = 0; k < n_nums; k++, at += 4) put_u32(out + at, nums[k]);
  if (tail_len) memcpy(out + at, tail, tail_len);
  return at + tail_len;
}

/* ---- life cycle --------------------------------------------------------------------- */

void xf_secagg_guard_free(xf_secagg_guard *g) {
  if (!g) return;
  for (uint32_t i = 0; i < g->p.n; i++) {
    if (g->peer_state && g->peer_state[i] == PEER_OPEN) g->id.release(g->id.user, g->peers[i]);
    if (g->certs) xf_free(g->certs[i]);
  }
  xf_secagg_client_free(g->client);
  xf_free(g->names);
  xf_free(g->certs);
  xf_free(g->cert_lens);
  xf_free(g->peers);
  xf_free(g->peer_state);
  xf_free(g->signed_u3);
  xf_free(g);
}

xf_err xf_secagg_guard_new(const xf_secagg_session *s, uint32_t me, const xf_secagg_identity *id,
                           xf_secagg_guard **out, xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "secure aggregation: no output handle");
  *out = NULL;
  XF_ENSURE(id && id->sign && id->open && id->verify && id->release, err, XF_EINVAL,
            "secure aggregation: the site's identity (sign, open, verify, release) is missing");
  uint8_t sid[ID_BYTES];
  XF_GUARD(xf_secagg_session_id(s, sid, err));
  uint32_t n = s->params.n, t = s->params.threshold;
  XF_ENSURE(2 * (uint64_t)t > n, err, XF_EINVAL,
            "secure aggregation: the threshold t = %u is not more than half of the %u sites; "
            "against an aggregator that may lie, two halves could each be shown their own "
            "survivor set and each sign it: raise secure_aggregation.threshold above 0.5",
            t, n);
  XF_ENSURE(me >= 1 && me <= n, err, XF_EINVAL, "site index %u is outside 1..%u", me, n);
  xf_secagg_guard *g = xf_calloc(1, sizeof(*g));
  if (!g) return xf_fail(err, XF_ENOMEM, "no memory for a secure-aggregation guard");
  g->p = s->params;
  g->me = me;
  g->id = *id;
  memcpy(g->sid, sid, sizeof(sid));
  g->names = xf_calloc(n, sizeof(*g->names));
  g->certs = xf_calloc(n, sizeof(*g->certs));
  g->cert_lens = xf_calloc(n, sizeof(*g->cert_lens));
  g->peers = xf_calloc(n, sizeof(*g->peers));
  g->peer_state = xf_calloc(n, 1);
  if (!g->names || !g->certs || !g->cert_lens || !g->peers || !g->peer_state) {
    xf_secagg_guard_free(g);
    return xf_fail(err, XF_ENOMEM, "no memory for a secure-aggregation guard of %u sites", n);
  }
  for (uint32_t i = 0; i < n; i++) memcpy(g->names[i], s->cohort[i], strlen(s->cohort[i]) + 1);
  xf_err rc = xf_secagg_client_new(&s->params, me, &g->client, err);
  if (rc != XF_OK) {
    xf_secagg_guard_free(g);
    return rc;
  }
  *out = g;
  return XF_OK;
}

const char *xf_secagg_guard_member(const xf_secagg_guard *g, uint32_t i) {
  return g && i >= 1 && i <= g->p.n ? g->names[i - 1] : NULL;
}

xf_secagg_client *xf_secagg_guard_client(xf_secagg_guard *g) { return g ? g->client : NULL; }

/* ---- members' certificates ------------------------------------------------------------ */

/* Fails naming member i (err->peer is its name). */
static xf_err blame(const xf_secagg_guard *g, uint32_t i, xf_errctx *err, xf_err code,
                    const char *fmt, ...) XF_PRINTF(5, 6);
static xf_err blame(const xf_secagg_guard *g, uint32_t i, xf_errctx *err, xf_err code,
                    const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  xf_vfail(err, code, fmt, ap);
  va_end(ap);
  xf_errctx_peer(err, g->names[i - 1]);
  return code;
}

/* Opens member i's certificate (once) for its name. */
static xf_err member_open(xf_secagg_guard *g, uint32_t i, xf_errctx *err) {
  if (g->peer_state[i - 1] == PEER_OPEN) return XF_OK;
  if (!g->certs[i - 1])
    return blame(g, i, err, XF_EINTEGRITY,
                 "site %u (%s) came without a certificate to check its signatures against", i,
                 g->names[i - 1]);
  xf_errctx why = {0};
  void *peer = NULL;
  xf_err rc = g->id.open(g->id.user, g->certs[i - 1], g->cert_lens[i - 1], g->names[i - 1],
                         &peer, &why);
  if (rc != XF_OK) {
    g->peer_state[i - 1] = PEER_REFUSED;
    return blame(g, i, err, XF_EINTEGRITY, "site %u (%s): its certificate is refused: %s", i,
                 g->names[i - 1], why.msg);
  }
  g->peers[i - 1] = peer;
  g->peer_state[i - 1] = PEER_OPEN;
  return XF_OK;
}

/* ---- phases ----------------------------------------------------------------------------- */

xf_err xf_secagg_guard_advertise(xf_secagg_guard *g, uint8_t advert[XF_SECAGG_ADVERT_BYTES],
                                 uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  XF_ENSURE(g && advert && sig, err, XF_EINVAL, "secagg advertise: NULL argument");
  xf_secagg_client_advertise(g->client, advert);
  uint8_t msg[STATEMENT_MAX];
  size_t len = statement(msg, LABEL_ADVERT, g->sid, &g->me, 1, advert, XF_SECAGG_ADVERT_BYTES);
  return g->id.sign(g->id.user, msg, len, sig, err);
}

/* Keeps member i's certificate from the keys (replacing none kept). */
static xf_err keep_cert(xf_secagg_guard *g, uint32_t i, const xf_secagg_member_keys *k,
                        xf_errctx *err) {
  if (!k->cert || !k->cert_len) return XF_OK;
  if (k->cert_len > XF_SECAGG_CERT_MAX)
    return blame(g, i, err, XF_EINTEGRITY,
                 "site %u (%s) came with a certificate of %zu bytes, above the %d allowed", i,
                 g->names[i - 1], k->cert_len, XF_SECAGG_CERT_MAX);
  uint8_t *c = xf_malloc(k->cert_len);
  if (!c) return xf_fail(err, XF_ENOMEM, "secagg share: no memory for a certificate");
  memcpy(c, k->cert, k->cert_len);
  g->certs[i - 1] = c;
  g->cert_lens[i - 1] = k->cert_len;
  return XF_OK;
}

/* Drops what a failed share kept of the members, so that the keys are
 * checked afresh if they come again. */
static void forget_members(xf_secagg_guard *g) {
  for (uint32_t i = 0; i < g->p.n; i++) {
    if (g->peer_state[i] == PEER_OPEN) g->id.release(g->id.user, g->peers[i]);
    g->peers[i] = NULL;
    g->peer_state[i] = PEER_UNKNOWN;
    xf_free(g->certs[i]);
    g->certs[i] = NULL;
    g->cert_lens[i] = 0;
  }
}

static bool advertised(const xf_secagg_member_keys *k) {
  return k->advert && !sodium_is_zero(k->advert, XF_SECAGG_ADVERT_BYTES);
}

/* Member i's advert is signed by the site its certificate names. */
static xf_err check_advert(xf_secagg_guard *g, uint32_t i, const xf_secagg_member_keys *k,
                           xf_errctx *err) {
  XF_GUARD(member_open(g, i, err));
  if (!k->sig)
    return blame(g, i, err, XF_EINTEGRITY, "site %u (%s)'s keys came without a signature", i,
                 g->names[i - 1]);
  uint8_t msg[STATEMENT_MAX];
  size_t len = statement(msg, LABEL_ADVERT, g->sid, &i, 1, k->advert, XF_SECAGG_ADVERT_BYTES);
  if (!g->id.verify(g->id.user, g->peers[i - 1], msg, len, k->sig))
    return blame(g, i, err, XF_EINTEGRITY,
                 "site %u (%s)'s keys do not carry its signature for this round: the keys, or "
                 "the job, round, attempt, parameters or cohort they were signed for, differ "
                 "from what this site was told",
                 i, g->names[i - 1]);
  return XF_OK;
}

xf_err xf_secagg_guard_share(xf_secagg_guard *g, const xf_secagg_member_keys *keys,
                             xf_secagg_signed_share *out, size_t cap, size_t *count,
                             xf_errctx *err) {
  XF_ENSURE(g && keys && count && (out || cap == 0), err, XF_EINVAL,
            "secagg share: NULL argument");
  XF_ENSURE(!g->shared, err, XF_EINVAL, "secagg share: site %u has already shared", g->me);
  *count = 0;
  uint32_t n = g->p.n;
  forget_members(g);
  xf_err rc = XF_OK;
  for (uint32_t i = 1; i <= n && rc == XF_OK; i++) rc = keep_cert(g, i, &keys[i - 1], err);
  if (rc != XF_OK) {
    forget_members(g);
    return rc;
  }
  uint32_t *nbr = xf_mallocarray(g->p.degree ? g->p.degree : 1, sizeof(*nbr));
  uint8_t *adverts = xf_calloc(n, XF_SECAGG_ADVERT_BYTES);
  xf_secagg_share_msg *msgs = xf_mallocarray(cap ? cap : 1, sizeof(*msgs));
  size_t n_nbr = 0;
  if (!nbr || !adverts || !msgs) {
    rc = xf_fail(err, XF_ENOMEM, "secagg share: no memory for %u adverts", n);
    goto out;
  }
  rc = xf_secagg_client_neighbours(g->client, nbr, g->p.degree, &n_nbr);
  for (size_t k = 0; k < n_nbr && rc == XF_OK; k++)
    if (advertised(&keys[nbr[k] - 1])) rc = check_advert(g, nbr[k], &keys[nbr[k] - 1], err);
  if (rc != XF_OK) goto out;
  for (uint32_t i = 1; i <= n; i++)
    if (advertised(&keys[i - 1]))
      memcpy(adverts + (size_t)(i - 1) * XF_SECAGG_ADVERT_BYTES, keys[i - 1].advert,
             XF_SECAGG_ADVERT_BYTES);
  rc = xf_secagg_client_share(g->client, adverts, msgs, cap, count, err);
  for (size_t k = 0; k < *count && rc == XF_OK; k++) {
    xf_secagg_signed_share *o = &out[k];
    o->to = msgs[k].to;
    memcpy(o->ciphertext, msgs[k].ciphertext, XF_SECAGG_SHARE_BYTES);
    uint8_t msg[STATEMENT_MAX];
    uint32_t nums[2] = {g->me, o->to};
    size_t len = statement(msg, LABEL_SHARE, g->sid, nums, 2, o->ciphertext, XF_SECAGG_SHARE_BYTES);
    rc = g->id.sign(g->id.user, msg, len, o->sig, err);
  }
  if (rc == XF_OK) g->shared = true;
out:
  if (msgs) sodium_memzero(msgs, (cap ? cap : 1) * sizeof(*msgs));
  if (rc != XF_OK) {
    forget_members(g);
    if (out && cap) sodium_memzero(out, cap * sizeof(*out));
    *count = 0;
  }
  xf_free(msgs);
  xf_free(adverts);
  xf_free(nbr);
  return rc;
}

xf_err xf_secagg_guard_receive(xf_secagg_guard *g, uint32_t from,
                               const uint8_t ciphertext[XF_SECAGG_SHARE_BYTES],
                               const uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  XF_ENSURE(g && ciphertext, err, XF_EINVAL, "secagg receive: NULL argument");
  XF_ENSURE(from >= 1 && from <= g->p.n && from != g->me, err, XF_EINVAL,
            "secagg receive: site %u is not another member of the cohort of %u", from, g->p.n);
  /* Only a neighbour whose keys were checked has an open certificate. */
  XF_ENSURE(g->shared && g->peer_state[from - 1] == PEER_OPEN, err, XF_EINVAL,
            "secagg receive: site %u's shares came before its keys were checked here", from);
  if (!sig)
    return blame(g, from, err, XF_EINTEGRITY, "site %u (%s)'s shares came without a signature",
                 from, g->names[from - 1]);
  uint8_t msg[STATEMENT_MAX];
  uint32_t nums[2] = {from, g->me};
  size_t len = statement(msg, LABEL_SHARE, g->sid, nums, 2, ciphertext, XF_SECAGG_SHARE_BYTES);
  if (!g->id.verify(g->id.user, g->peers[from - 1], msg, len, sig))
    return blame(g, from, err, XF_EINTEGRITY,
                 "the shares relayed from site %u (%s) do not carry its signature: they were "
                 "changed on the way, or are not for this site and round",
                 from, g->names[from - 1]);
  xf_err rc = xf_secagg_client_receive(g->client, from, ciphertext, err);
  if (rc != XF_OK) xf_errctx_peer(err, g->names[from - 1]);
  return rc;
}

xf_err xf_secagg_guard_routed(xf_secagg_guard *g, const uint32_t *u2, size_t n_u2,
                              xf_errctx *err) {
  XF_ENSURE(g, err, XF_EINVAL, "secagg routed: NULL guard");
  return xf_secagg_client_routed(g->client, u2, n_u2, err);
}

/* ---- the consistency round ------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* U3 ascending in a fresh array (*out, xf_free). */
static xf_err sorted_set(const uint32_t *u3, size_t n, uint32_t **out, xf_errctx *err) {
  XF_ENSURE(u3 || n == 0, err, XF_EINVAL, "secagg survivors: NULL list");
  uint32_t *s = xf_mallocarray(n ? n : 1, sizeof(*s));
  if (!s) return xf_fail(err, XF_ENOMEM, "secagg survivors: no memory");
  if (n) memcpy(s, u3, n * sizeof(*s));
  qsort(s, n, sizeof(*s), cmp_u32);
  *out = s;
  return XF_OK;
}

/* The survivors statement of the sorted set. *out is xf_malloc'ed. */
static xf_err survivors_statement(const xf_secagg_guard *g, const uint32_t *sorted, size_t n,
                                  uint8_t **out, size_t *len, xf_errctx *err) {
  size_t head = sizeof(LABEL_SURVIVORS) - 1 + ID_BYTES + 4;
  uint8_t *msg = xf_malloc(head + 4 * n);
  if (!msg) return xf_fail(err, XF_ENOMEM, "secagg survivors: no memory");
  uint32_t count = (uint32_t)n;
  size_t at = statement(msg, LABEL_SURVIVORS, g->sid, &count, 1, NULL, 0);
  for (size_t k = 0; k < n; k++, at += 4) put_u32(msg + at, sorted[k]);
  *out = msg;
  *len = at;
  return XF_OK;
}

static bool same_set(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, na * sizeof(*a)) == 0);
}

xf_err xf_secagg_guard_sign_survivors(xf_secagg_guard *g, const uint32_t *u3, size_t n_u3,
                                      uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  XF_ENSURE(g && sig, err, XF_EINVAL, "secagg survivors: NULL argument");
  uint32_t *sorted = NULL;
  XF_GUARD(sorted_set(u3, n_u3, &sorted, err));
  if (g->signed_u3 && !same_set(g->signed_u3, g->n_signed, sorted, n_u3)) {
    xf_free(sorted);
    return xf_fail(err, XF_EDENIED,
                   "secagg survivors: site %u signed a survivor set of %zu sites for this round "
                   "and is now asked to sign another of %zu: an aggregator that shows sites "
                   "different survivor sets could unmask one site's input, so a site signs one",
                   g->me, g->n_signed, n_u3);
  }
  uint8_t *msg = NULL;
  size_t len = 0;
  xf_err rc = xf_secagg_client_check_survivors(g->client, u3, n_u3, err);
  if (rc == XF_OK) rc = survivors_statement(g, sorted, n_u3, &msg, &len, err);
  if (rc == XF_OK) rc = g->id.sign(g->id.user, msg, len, sig, err);
  if (rc == XF_OK && !g->signed_u3) {
    g->signed_u3 = sorted;
    g->n_signed = n_u3;
    sorted = NULL;
  }
  xf_free(msg);
  xf_free(sorted);
  return rc;
}

xf_err xf_secagg_guard_unmask(xf_secagg_guard *g, const uint32_t *u3, size_t n_u3,
                              const uint32_t *signers, const uint8_t *sigs, size_t n_signers,
                              uint8_t *out, size_t cap, size_t *len, xf_errctx *err) {
  XF_ENSURE(g && len && (signers || n_signers == 0) && (sigs || n_signers == 0), err, XF_EINVAL,
            "secagg unmask: NULL argument");
  *len = 0;
  XF_ENSURE(g->signed_u3, err, XF_EDENIED,
            "secagg unmask: refusing to reveal: site %u was asked to reveal before it signed a "
            "survivor set",
            g->me);
  uint32_t *sorted = NULL;
  XF_GUARD(sorted_set(u3, n_u3, &sorted, err));
  bool same = same_set(g->signed_u3, g->n_signed, sorted, n_u3);
  xf_free(sorted);
  XF_ENSURE(same, err, XF_EDENIED,
            "secagg unmask: refusing to reveal: the survivor set of %zu sites it is asked to "
            "reveal for is not the one of %zu sites it signed",
            n_u3, g->n_signed);
  uint8_t *msg = NULL, *counted = xf_calloc(g->p.n + 1, 1);
  size_t msg_len = 0;
  if (!counted) return xf_fail(err, XF_ENOMEM, "secagg unmask: no memory");
  xf_err rc = survivors_statement(g, g->signed_u3, g->n_signed, &msg, &msg_len, err);
  uint32_t valid = 0, bad = 0;
  char why[400] = "";
  for (size_t k = 0; k < n_signers && rc == XF_OK && valid < g->p.threshold; k++) {
    uint32_t s = signers[k];
    const char *wrong = NULL;
    bool in_range = s >= 1 && s <= g->p.n;
    xf_errctx opened = {0};
    if (s < 1 || s > g->p.n || !bsearch(&s, g->signed_u3, g->n_signed, sizeof(s), cmp_u32))
      wrong = "is not a member of the survivor set";
    else if (counted[s])
      wrong = "is counted already";
    else if (s == g->me)
      ; /* this site signed exactly this set (checked above): it counts */
    else if (member_open(g, s, &opened) != XF_OK)
      wrong = "";
    else if (!g->id.verify(g->id.user, g->peers[s - 1], msg, msg_len,
                           sigs + k * XF_SECAGG_SIG_BYTES))
      wrong = "signed another survivor set, or another round's";
    if (!wrong) {
      counted[s] = 1;
      valid++;
    } else if (bad++ == 0) {
      if (!*wrong)
        snprintf(why, sizeof(why), "; %.300s", opened.msg);
      else
        snprintf(why, sizeof(why), "; signer %u%s%s%s %s", s, in_range ? " (" : "",
                 in_range ? g->names[s - 1] : "", in_range ? ")" : "", wrong);
      if (in_range) xf_errctx_peer(err, g->names[s - 1]);
    }
  }
  if (rc == XF_OK && valid < g->p.threshold)
    rc = xf_fail(err, XF_EDENIED,
                 "secagg unmask: refusing to reveal: %u of the %zu signatures relayed are valid "
                 "signatures of this survivor set by its members, and %u are needed%s",
                 valid, n_signers, g->p.threshold, why);
  xf_free(msg);
  xf_free(counted);
  if (rc != XF_OK) return rc;
  return xf_secagg_client_unmask(g->client, g->signed_u3, g->n_signed, out, cap, len, err);
}
