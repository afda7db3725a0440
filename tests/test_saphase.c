/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the secure-aggregation phase machine (coordinator/saphase.h): the
 * test plays every cohort site with the client a site runs
 * (crypto/secagg_guard.h, with the name-keyed identity of
 * tests/sa_identity.h) in-process — advertise signed keys, check the
 * relayed keys and share, check the routed shares, quantize and mask a
 * known update, sign the survivor set, reveal once t signatures of it are
 * relayed — and drives the machine with an injected clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "codec/codec.h"
#include "coordinator/saphase.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "sa_identity.h"
#include "support.h"

/* ---- the simulated sites -------------------------------------------------------------------- */

typedef struct sim_site {
  uint64_t id;
  char name[24];
  xf_test_signer signer;
  xf_update_secagg setup;
  xf_secagg_guard *guard;
  float *x; /* its update (n_params values, L2 norm below the clip) */
  /* What the machine told it. */
  bool keys, routed, check, unmask, dropped;
  uint8_t *adverts, *advert_sigs, *certs; /* SEND_KEYS */
  uint32_t *cert_lens;
  uint32_t *u2, *from, *u3, *check_u3, *signers;
  uint8_t (*cts)[XF_SECAGG_SHARE_BYTES];
  uint8_t *share_sigs, *sigs; /* SEND_ROUTED's, SEND_UNMASK's */
  size_t n_u2, n_cts, n_u3, n_check_u3, n_signers;
  char why[XF_SAPHASE_WHY_MAX];
} sim_site;

typedef struct world {
  xf_saphase *sa;
  xf_saphase_config cfg;
  sim_site *s;
  size_t n;
  double now;
  bool done, failed;
  size_t drops;
  char why[XF_SAPHASE_WHY_MAX];
  uint8_t graph_seed[32];
  uint64_t ids[128];
  uint64_t weights[128];
  char names[128][24];
  const char *cohort[128];
} world;

/* A cohort of n sites with ids 1000 + 7 i, weights 100 (i + 1) unless
 * equal, secure_aggregation.bits 16, clip 1, a 60 s phase (30 s are used),
 * clock at 1000. Other fields can be changed before world_start. */
static void world_init(world *w, size_t n, double threshold, size_t n_params, bool equal) {
  memset(w, 0, sizeof(*w));
  assert_true(n <= 128);
  w->n = n;
  w->now = 1000.0;
  for (size_t i = 0; i < 32; i++) w->graph_seed[i] = (uint8_t)(31 * i + 7);
  for (size_t i = 0; i < n; i++) {
    w->ids[i] = 1000 + 7 * i;
    w->weights[i] = 100 * (i + 1);
  }
  w->cfg = (xf_saphase_config){.n = (uint32_t)n,
                               .sites = w->ids,
                               .weights = equal ? NULL : w->weights,
                               .threshold = threshold,
                               .bits = 16,
                               .n_params = n_params,
                               .clip = 1.0,
                               .phase_s = 60.0,
                               .graph_seed = w->graph_seed,
                               .subset_seed = 0x5eed};
}

/* Creates the machine and a guarded client for every site, from the setup
 * the machine tells it and the cohort's names (site id 1007 is "s1007"). */
static void world_start(world *w) {
  assert_int_equal(xf_saphase_create(&w->cfg, w->now, &w->sa, NULL), XF_OK);
  w->s = calloc(w->n, sizeof(*w->s));
  assert_non_null(w->s);
  const uint64_t *cohort = xf_saphase_cohort(w->sa);
  for (size_t i = 0; i < w->n; i++) {
    snprintf(w->names[i], sizeof(w->names[i]), "s%llu", (unsigned long long)cohort[i]);
    w->cohort[i] = w->names[i];
  }
  for (size_t i = 0; i < w->n; i++) {
    sim_site *s = &w->s[i];
    s->id = w->ids[i];
    snprintf(s->name, sizeof(s->name), "s%llu", (unsigned long long)s->id);
    assert_int_equal(xf_saphase_setup(w->sa, s->id, &s->setup), XF_OK);
    assert_int_equal(s->setup.index, i + 1);
    xf_secagg_session session = {
        .job = "12", .round = 4, .attempt = 1, .params = s->setup.params, .cohort = w->cohort};
    xf_secagg_identity id = xf_test_signer_identity(&s->signer, s->name);
    xf_errctx err = {0};
    if (xf_secagg_guard_new(&session, s->setup.index, &id, &s->guard, &err) != XF_OK)
      fail_msg("site %s: %s", s->name, err.msg);
    s->x = malloc(w->cfg.n_params * sizeof(float));
    assert_non_null(s->x);
    /* Coordinates of about 0.1: the norm stays below clip 1 for the sizes
     * these tests use. */
    for (size_t k = 0; k < w->cfg.n_params; k++)
      s->x[k] = (float)(0.1 * sin(0.37 * (double)k + 1.3 * (double)i) + 0.01 * (double)i);
  }
}

static void sim_clear(sim_site *s) {
  free(s->adverts);
  free(s->advert_sigs);
  free(s->certs);
  free(s->cert_lens);
  free(s->u2);
  free(s->from);
  free(s->cts);
  free(s->share_sigs);
  free(s->u3);
  free(s->check_u3);
  free(s->signers);
  free(s->sigs);
  s->adverts = s->advert_sigs = s->certs = s->share_sigs = s->sigs = NULL;
  s->cert_lens = NULL;
  s->u2 = s->from = s->u3 = s->check_u3 = s->signers = NULL;
  s->cts = NULL;
}

static void world_free(world *w) {
  for (size_t i = 0; w->s && i < w->n; i++) {
    sim_clear(&w->s[i]);
    xf_secagg_guard_free(w->s[i].guard);
    free(w->s[i].x);
  }
  free(w->s);
  xf_saphase_free(w->sa);
}

static sim_site *sim_of(world *w, uint64_t id) {
  for (size_t i = 0; i < w->n; i++)
    if (w->s[i].id == id) return &w->s[i];
  return NULL;
}

static void *copy_of(const void *p, size_t len) {
  void *c = malloc(len ? len : 1);
  assert_non_null(c);
  if (len) memcpy(c, p, len);
  return c;
}

/* Carries out the machine's last actions: what it sends lands with the
 * simulated sites (copied: the pointers live until the next call). */
static void collect(world *w) {
  size_t n;
  const xf_saphase_action *a = xf_saphase_actions(w->sa, &n);
  for (size_t k = 0; k < n; k++) {
    sim_site *s = a[k].site ? sim_of(w, a[k].site) : NULL;
    switch (a[k].kind) {
    case XF_SAPHASE_ACT_SEND_KEYS:
      assert_non_null(s);
      assert_int_equal(a[k].adverts_len, w->n * XF_SECAGG_ADVERT_BYTES);
      s->adverts = copy_of(a[k].adverts, a[k].adverts_len);
      s->advert_sigs = copy_of(a[k].sigs, w->n * XF_SECAGG_SIG_BYTES);
      s->certs = copy_of(a[k].certs, a[k].certs_len);
      s->cert_lens = copy_of(a[k].cert_lens, w->n * sizeof(uint32_t));
      s->keys = true;
      break;
    case XF_SAPHASE_ACT_SEND_ROUTED:
      assert_non_null(s);
      s->u2 = copy_of(a[k].u2, a[k].n_u2 * sizeof(uint32_t));
      s->n_u2 = a[k].n_u2;
      s->from = copy_of(a[k].from, a[k].n_cts * sizeof(uint32_t));
      s->cts = malloc((a[k].n_cts ? a[k].n_cts : 1) * XF_SECAGG_SHARE_BYTES);
      assert_non_null(s->cts);
      for (size_t m = 0; m < a[k].n_cts; m++)
        memcpy(s->cts[m], a[k].cts[m], XF_SECAGG_SHARE_BYTES);
      s->share_sigs = copy_of(a[k].sigs, a[k].n_cts * XF_SECAGG_SIG_BYTES);
      s->n_cts = a[k].n_cts;
      s->routed = true;
      break;
    case XF_SAPHASE_ACT_SEND_CHECK:
      assert_non_null(s);
      s->check_u3 = copy_of(a[k].u3, a[k].n_u3 * sizeof(uint32_t));
      s->n_check_u3 = a[k].n_u3;
      s->check = true;
      break;
    case XF_SAPHASE_ACT_SEND_UNMASK:
      assert_non_null(s);
      s->u3 = copy_of(a[k].u3, a[k].n_u3 * sizeof(uint32_t));
      s->n_u3 = a[k].n_u3;
      s->signers = copy_of(a[k].signers, a[k].n_signers * sizeof(uint32_t));
      s->sigs = copy_of(a[k].sigs, a[k].n_signers * XF_SECAGG_SIG_BYTES);
      s->n_signers = a[k].n_signers;
      s->unmask = true;
      break;
    case XF_SAPHASE_ACT_DROP:
      assert_non_null(s);
      assert_true(a[k].why[0] != '\0');
      s->dropped = true;
      snprintf(s->why, sizeof(s->why), "%s", a[k].why);
      w->drops++;
      break;
    case XF_SAPHASE_ACT_DONE: w->done = true; break;
    case XF_SAPHASE_ACT_FAILED:
      w->failed = true;
      snprintf(w->why, sizeof(w->why), "%s", a[k].why);
      break;
    }
  }
}

static size_t n_actions(const world *w) {
  size_t n;
  (void)xf_saphase_actions(w->sa, &n);
  return n;
}

static size_t count_actions(const world *w, xf_saphase_action_kind kind) {
  size_t n, c = 0;
  const xf_saphase_action *a = xf_saphase_actions(w->sa, &n);
  for (size_t k = 0; k < n; k++) c += a[k].kind == kind;
  return c;
}

/* ---- the sites' moves ----------------------------------------------------------------------- */

/* The keys site i would send: its advert, its signature of it and its
 * "certificate" (its name). */
typedef struct signed_keys {
  uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
  xf_saphase_keys keys;
} signed_keys;

static void keys_of(world *w, size_t i, signed_keys *k) {
  xf_errctx err = {0};
  sim_site *s = &w->s[i];
  assert_int_equal(xf_secagg_guard_advertise(s->guard, k->advert, k->sig, &err), XF_OK);
  k->keys = (xf_saphase_keys){.advert = k->advert,
                              .advert_len = sizeof(k->advert),
                              .sig = k->sig,
                              .sig_len = sizeof(k->sig),
                              .cert = (const uint8_t *)s->name,
                              .cert_len = strlen(s->name)};
}

/* The site sends its keys; the machine's answer. */
static xf_err advertise_rc(world *w, size_t i) {
  signed_keys k;
  keys_of(w, i, &k);
  xf_err rc = xf_saphase_advert(w->sa, w->s[i].id, &k.keys, w->now, NULL);
  collect(w);
  return rc;
}

static void advertise(world *w, size_t i) { assert_int_equal(advertise_rc(w, i), XF_OK); }

/* The cohort's keys as SEND_KEYS relayed them to site i (xf_free). */
static xf_secagg_member_keys *relayed_keys(world *w, size_t i) {
  sim_site *s = &w->s[i];
  xf_secagg_member_keys *keys = xf_calloc(w->n, sizeof(*keys));
  assert_non_null(keys);
  for (size_t m = 0, at = 0; m < w->n; at += s->cert_lens[m], m++)
    keys[m] = (xf_secagg_member_keys){.advert = s->adverts + m * XF_SECAGG_ADVERT_BYTES,
                                      .sig = s->advert_sigs + m * XF_SECAGG_SIG_BYTES,
                                      .cert = s->cert_lens[m] ? s->certs + at : NULL,
                                      .cert_len = s->cert_lens[m]};
  return keys;
}

/* Site i checks the relayed keys and makes its signed shares: *count of
 * them in out (room for the degree). */
static void make_shares(world *w, size_t i, xf_secagg_signed_share *out, size_t *count) {
  sim_site *s = &w->s[i];
  assert_true(s->keys);
  xf_secagg_member_keys *keys = relayed_keys(w, i);
  xf_errctx err = {0};
  if (xf_secagg_guard_share(s->guard, keys, out, s->setup.params.degree, count, &err) != XF_OK)
    fail_msg("site %s sharing: %s", s->name, err.msg);
  xf_free(keys);
}

/* Sends count signed shares of site i; the machine's answer. */
static xf_err send_shares_rc(world *w, size_t i, const uint32_t *to,
                             const xf_secagg_signed_share *sh, size_t count, xf_errctx *err) {
  const uint8_t **cts = calloc(count ? count : 1, sizeof(*cts));
  const uint8_t **sigs = calloc(count ? count : 1, sizeof(*sigs));
  size_t *lens = calloc(count ? count : 1, sizeof(*lens));
  size_t *sig_lens = calloc(count ? count : 1, sizeof(*sig_lens));
  assert_true(cts && sigs && lens && sig_lens);
  for (size_t k = 0; k < count; k++) {
    cts[k] = sh[k].ciphertext;
    lens[k] = XF_SECAGG_SHARE_BYTES;
    sigs[k] = sh[k].sig;
    sig_lens[k] = XF_SECAGG_SIG_BYTES;
  }
  xf_saphase_shares_msg msg = {to, count, cts, lens, count, sigs, sig_lens, count};
  xf_err rc = xf_saphase_shares(w->sa, w->s[i].id, &msg, w->now, err);
  free(cts);
  free(sigs);
  free(lens);
  free(sig_lens);
  collect(w);
  return rc;
}

static void share(world *w, size_t i) {
  size_t cap = w->s[i].setup.params.degree, count = 0;
  xf_secagg_signed_share *msgs = calloc(cap, sizeof(*msgs));
  uint32_t *to = calloc(cap, sizeof(*to));
  assert_true(msgs && to);
  make_shares(w, i, msgs, &count);
  for (size_t k = 0; k < count; k++) to[k] = msgs[k].to;
  xf_errctx err = {0};
  if (send_shares_rc(w, i, to, msgs, count, &err) != XF_OK) fail_msg("%s", err.msg);
  free(msgs);
  free(to);
}

/* The site checks its routed shares' signatures, takes them and learns U2. */
static void take_routed(world *w, size_t i) {
  sim_site *s = &w->s[i];
  assert_true(s->routed);
  xf_errctx err = {0};
  for (size_t k = 0; k < s->n_cts; k++)
    if (xf_secagg_guard_receive(s->guard, s->from[k], s->cts[k],
                                s->share_sigs + k * XF_SECAGG_SIG_BYTES, &err) != XF_OK)
      fail_msg("site %s taking the share of %u: %s", s->name, s->from[k], err.msg);
  if (xf_secagg_guard_routed(s->guard, s->u2, s->n_u2, &err) != XF_OK) fail_msg("%s", err.msg);
}

/* The site's masked input: its update scaled by its share of the weight,
 * the shared subset taken, quantized on the shared scale and masked. The
 * words are xf_malloc'ed, as the machine frees them. */
static uint32_t *masked_words(world *w, size_t i) {
  sim_site *s = &w->s[i];
  const xf_update_secagg *su = &s->setup;
  size_t len = (size_t)su->params.length;
  float *v = malloc(len * sizeof(float));
  uint32_t *idx = su->subset ? malloc(len * sizeof(uint32_t)) : NULL;
  uint32_t *words = xf_malloc(len * sizeof(uint32_t));
  assert_true(v && words && (idx || !su->subset));
  if (su->subset)
    assert_int_equal(xf_codec_random_subset(su->subset_seed, w->cfg.n_params, len, idx), XF_OK);
  for (size_t k = 0; k < len; k++) v[k] = (float)(su->scale * s->x[idx ? idx[k] : k]);
  xf_errctx err = {0};
  size_t clipped = 0;
  assert_int_equal(xf_codec_quantize_fixed(&su->fixed, v, len, 77 + i, words, &clipped, &err),
                   XF_OK);
  assert_int_equal(clipped, 0);
  assert_int_equal(
      xf_secagg_client_mask(xf_secagg_guard_client(s->guard), words, 0, len, words, &err), XF_OK);
  free(v);
  free(idx);
  return words;
}

static void send_masked(world *w, size_t i) {
  take_routed(w, i);
  uint32_t *words = masked_words(w, i);
  assert_int_equal(xf_saphase_masked(w->sa, w->s[i].id, &words,
                                     (size_t)w->s[i].setup.params.length, w->now, NULL),
                   XF_OK);
  assert_null(words); /* taken over */
  collect(w);
}

/* The site signs the survivor set it was asked to sign; the machine's
 * answer. */
static xf_err sign_check_rc(world *w, size_t i) {
  sim_site *s = &w->s[i];
  assert_true(s->check);
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  xf_errctx err = {0};
  if (xf_secagg_guard_sign_survivors(s->guard, s->check_u3, s->n_check_u3, sig, &err) != XF_OK)
    fail_msg("site %s signing U3: %s", s->name, err.msg);
  xf_err rc = xf_saphase_check_sig(w->sa, s->id, sig, sizeof(sig), w->now, NULL);
  collect(w);
  return rc;
}

static void sign_check(world *w, size_t i) { assert_int_equal(sign_check_rc(w, i), XF_OK); }

/* The site's reveal for the U3 it was told, which it makes only with t
 * valid signatures of it relayed; *len its length. */
static uint8_t *reveal_msg(world *w, size_t i, size_t *len) {
  sim_site *s = &w->s[i];
  assert_true(s->unmask);
  size_t cap = xf_secagg_reveal_max_bytes(&s->setup.params);
  uint8_t *msg = malloc(cap);
  assert_non_null(msg);
  xf_errctx err = {0};
  if (xf_secagg_guard_unmask(s->guard, s->u3, s->n_u3, s->signers, s->sigs, s->n_signers, msg,
                             cap, len, &err) != XF_OK)
    fail_msg("site %s revealing: %s", s->name, err.msg);
  return msg;
}

static void reveal(world *w, size_t i) {
  size_t len;
  uint8_t *msg = reveal_msg(w, i, &len);
  assert_int_equal(xf_saphase_reveal(w->sa, w->s[i].id, msg, len, w->now, NULL), XF_OK);
  free(msg);
  collect(w);
}

static void close_round(world *w) {
  xf_saphase_close(w->sa, w->now);
  collect(w);
}

static void tick(world *w, double now) {
  w->now = now;
  xf_saphase_tick(w->sa, now);
  collect(w);
}

static void gone(world *w, size_t i) {
  xf_saphase_gone(w->sa, w->s[i].id, w->now);
  collect(w);
}

/* Every site through every phase, in order. */
static void run_all(world *w) {
  for (size_t i = 0; i < w->n; i++) advertise(w, i);
  for (size_t i = 0; i < w->n; i++) share(w, i);
  for (size_t i = 0; i < w->n; i++) send_masked(w, i);
  close_round(w);
  for (size_t i = 0; i < w->n; i++) sign_check(w, i);
  for (size_t i = 0; i < w->n; i++) reveal(w, i);
}

/* The weighted mean of the sites in `in` (NULL: all) over the plain
 * updates, in double. */
static void plain_mean(const world *w, const bool *in, double *out) {
  size_t d = w->cfg.n_params;
  double total = 0;
  for (size_t k = 0; k < d; k++) out[k] = 0;
  for (size_t i = 0; i < w->n; i++) {
    if (in && !in[i]) continue;
    double wt = w->cfg.weights ? (double)w->cfg.weights[i] : 1.0;
    total += wt;
    for (size_t k = 0; k < d; k++) out[k] += wt * (double)w->s[i].x[k];
  }
  for (size_t k = 0; k < d; k++) out[k] /= total;
}

/* Takes the mean and checks it against the plain weighted mean of `in`
 * (NULL: all): each survivor's value was rounded by less than one step of
 * the shared scale, and the sum is then scaled by total / have (below
 * `factor`), with float32 rounding on top. `mask` (NULL: all) says which
 * coordinates were sent; the others must be exactly zero. */
static void expect_mean(world *w, const bool *in, const bool *sent, double factor) {
  float *mean = NULL;
  uint64_t weight = 0;
  const uint64_t *surv = NULL;
  size_t n_surv = 0;
  assert_int_equal(xf_saphase_get_state(w->sa), XF_SAPHASE_DONE);
  assert_int_equal(xf_saphase_take_mean(w->sa, &mean, &weight, &surv, &n_surv, NULL), XF_OK);
  size_t d = w->cfg.n_params;
  double *want = malloc(d * sizeof(double));
  assert_non_null(want);
  plain_mean(w, in, want);
  uint64_t want_weight = 0;
  size_t want_surv = 0;
  for (size_t i = 0; i < w->n; i++) {
    if (in && !in[i]) continue;
    want_weight += w->cfg.weights ? w->cfg.weights[i] : 1;
    assert_int_equal(surv[want_surv], w->ids[i]);
    want_surv++;
  }
  assert_int_equal(n_surv, want_surv);
  assert_int_equal(weight, want_weight);
  double step = w->s[0].setup.fixed.step;
  for (size_t k = 0; k < d; k++) {
    if (sent && !sent[k]) {
      assert_true(mean[k] == 0.0f);
      continue;
    }
    double tol = (double)n_surv * step * factor + 4 * FLT_EPSILON * fabs(want[k]);
    if (fabs((double)mean[k] - want[k]) > tol)
      fail_msg("coordinate %zu: %.9g, the plain weighted mean is %.9g (tolerance %.3g)", k,
               (double)mean[k], want[k], tol);
  }
  /* Handed over once. */
  float *again = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_saphase_take_mean(w->sa, &again, &weight, &surv, &n_surv, &err), XF_EINVAL);
  assert_null(again);
  xf_free(mean);
  free(want);
}

/* ---- the happy path ------------------------------------------------------------------------- */

static void three_sites_unmask_the_weighted_mean(void **state) {
  (void)state;
  world w;
  world_init(&w, 3, 0.6, 50, false);
  world_start(&w);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_ADVERT);
  assert_true(xf_saphase_deadline(w.sa) == 1030.0);
  for (size_t i = 0; i < 3; i++) advertise(&w, i);
  /* The last advert moves the phase on at once. */
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_SHARE);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_KEYS), 3);
  for (size_t i = 0; i < 3; i++) share(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_MASKED);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_ROUTED), 3);
  assert_true(isinf(xf_saphase_deadline(w.sa)));
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(w.s[i].n_u2, 3);
    assert_int_equal(w.s[i].n_cts, 2); /* one from each other site */
  }
  for (size_t i = 0; i < 3; i++) send_masked(&w, i);
  w.now = 1050;
  close_round(&w);
  /* The consistency round: every survivor is asked to sign U3. */
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_CHECK);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_CHECK), 3);
  assert_true(xf_saphase_deadline(w.sa) == 1080.0);
  assert_int_equal(w.s[0].n_check_u3, 3);
  sign_check(&w, 0);
  sign_check(&w, 1);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_CHECK);
  assert_int_equal(n_actions(&w), 0);
  w.now = 1060;
  sign_check(&w, 2);
  /* The last signature moves it on: each signer gets every signature. */
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_UNMASK);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_UNMASK), 3);
  assert_true(xf_saphase_deadline(w.sa) == 1090.0);
  for (size_t i = 0; i < 3; i++) assert_int_equal(w.s[i].n_signers, 3);
  for (size_t i = 0; i < 3; i++) reveal(&w, i);
  assert_true(w.done);
  assert_false(w.failed);
  assert_int_equal(w.drops, 0);
  assert_int_equal(xf_saphase_prg_expansions(w.sa), 3); /* the three self masks */
  assert_string_equal(xf_saphase_failure(w.sa), "");
  expect_mean(&w, NULL, NULL, 1.0);
  world_free(&w);
}

static void equal_weights_give_the_plain_mean(void **state) {
  (void)state;
  world w;
  world_init(&w, 3, 0.6, 40, true);
  world_start(&w);
  for (size_t i = 0; i < 3; i++) assert_true(w.s[i].setup.scale == 1.0 / 3.0);
  run_all(&w);
  assert_true(w.done);
  expect_mean(&w, NULL, NULL, 1.0);
  world_free(&w);
}

/* ---- dropouts ------------------------------------------------------------------------------- */

static void a_site_silent_in_the_advert_phase_is_dropped_at_the_deadline_and_the_rest_go_on(
    void **state) {
  (void)state;
  world w;
  world_init(&w, 4, 0.75, 30, false);
  world_start(&w);
  for (size_t i = 0; i < 3; i++) advertise(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_ADVERT);
  assert_int_equal(n_actions(&w), 0);
  tick(&w, 1029.9);
  assert_int_equal(n_actions(&w), 0);
  tick(&w, 1030.0);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_SHARE);
  assert_true(xf_saphase_deadline(w.sa) == 1060.0);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_KEYS), 3);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_DROP), 1);
  assert_true(w.s[3].dropped);
  assert_non_null(strstr(w.s[3].why, "no keys"));
  assert_false(w.s[3].keys);
  /* The silent site's keys come too late. */
  assert_int_equal(advertise_rc(&w, 3), XF_EINVAL);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_DROP), 1);
  for (size_t i = 0; i < 3; i++) share(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_MASKED);
  for (size_t i = 0; i < 3; i++) send_masked(&w, i);
  close_round(&w);
  for (size_t i = 0; i < 3; i++) sign_check(&w, i);
  for (size_t i = 0; i < 3; i++) reveal(&w, i);
  assert_true(w.done);
  bool in[4] = {true, true, true, false};
  /* The sum of three sites' scaled updates is scaled up by 1000 / 600. */
  expect_mean(&w, in, NULL, 1000.0 / 600.0);
  world_free(&w);
}

static void a_site_gone_after_its_masked_input_is_recovered_from_the_others_shares(void **state) {
  (void)state;
  world w;
  world_init(&w, 3, 0.6, 50, false);
  world_start(&w);
  for (size_t i = 0; i < 3; i++) advertise(&w, i);
  for (size_t i = 0; i < 3; i++) share(&w, i);
  for (size_t i = 0; i < 3; i++) send_masked(&w, i);
  gone(&w, 2);
  assert_int_equal(n_actions(&w), 0);
  close_round(&w);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_CHECK);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_CHECK), 2);
  assert_false(w.s[2].check);
  sign_check(&w, 0);
  sign_check(&w, 1);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_UNMASK);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_UNMASK), 2);
  assert_false(w.s[2].unmask);
  assert_int_equal(w.s[0].n_u3, 2);
  assert_int_equal(w.s[0].u3[0], 1);
  assert_int_equal(w.s[0].u3[1], 2);
  reveal(&w, 0);
  assert_false(w.done);
  reveal(&w, 1);
  assert_true(w.done);
  /* Two self masks, and site 3's pairwise masks with its two neighbours,
   * from its masking key rebuilt out of the others' shares. */
  assert_int_equal(xf_saphase_prg_expansions(w.sa), 4);
  bool in[3] = {true, true, false};
  expect_mean(&w, in, NULL, 600.0 / 300.0);
  world_free(&w);
}

static void fewer_survivors_than_the_threshold_fails_naming_both_counts(void **state) {
  (void)state;
  /* At the close: 2 of 4 sites left with their input, threshold 3. */
  world w;
  world_init(&w, 4, 0.75, 20, false);
  world_start(&w);
  assert_int_equal(xf_saphase_params(w.sa)->threshold, 3);
  for (size_t i = 0; i < 4; i++) advertise(&w, i);
  for (size_t i = 0; i < 4; i++) share(&w, i);
  for (size_t i = 0; i < 4; i++) send_masked(&w, i);
  gone(&w, 1);
  gone(&w, 3);
  close_round(&w);
  assert_true(w.failed);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_FAILED);
  assert_non_null(strstr(w.why, "only 2 of the cohort's 4 sites"));
  assert_non_null(strstr(w.why, "threshold 3"));
  assert_string_equal(xf_saphase_failure(w.sa), w.why);
  assert_true(isinf(xf_saphase_deadline(w.sa)));
  float *mean = NULL;
  uint64_t weight;
  const uint64_t *surv;
  size_t n;
  xf_errctx err = {0};
  assert_int_equal(xf_saphase_take_mean(w.sa, &mean, &weight, &surv, &n, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "failed"));
  /* Messages after the failure change nothing. */
  uint8_t junk[XF_SECAGG_REVEAL_HEADER_BYTES] = {1};
  assert_int_equal(xf_saphase_reveal(w.sa, w.ids[0], junk, sizeof(junk), w.now, NULL),
                   XF_EINVAL);
  assert_int_equal(n_actions(&w), 0);
  world_free(&w);

  /* At the keys' deadline: 2 of 4 advertised. */
  world_init(&w, 4, 0.75, 20, false);
  world_start(&w);
  advertise(&w, 0);
  advertise(&w, 2);
  tick(&w, 1030);
  assert_true(w.failed);
  assert_non_null(strstr(w.why, "only 2 of the cohort's 4 sites sent their keys"));
  assert_non_null(strstr(w.why, "threshold 3"));
  world_free(&w);

  /* At routing: sites that advertise but then leave leave 2 sharers. */
  world_init(&w, 4, 0.75, 20, false);
  world_start(&w);
  for (size_t i = 0; i < 4; i++) advertise(&w, i);
  share(&w, 0);
  share(&w, 1);
  gone(&w, 2);
  gone(&w, 3);
  assert_true(w.failed);
  assert_non_null(strstr(w.why, "only 2 of the cohort's 4 sites sent their shares"));
  assert_non_null(strstr(w.why, "threshold 3"));
  world_free(&w);
}

static void unrevealed_secrets_fail_the_unmasking_naming_the_site(void **state) {
  (void)state;
  /* 4 sites, t = 3: three survive, but only two reveal before the deadline. */
  world w;
  world_init(&w, 4, 0.75, 20, false);
  world_start(&w);
  for (size_t i = 0; i < 4; i++) advertise(&w, i);
  for (size_t i = 0; i < 4; i++) share(&w, i);
  for (size_t i = 0; i < 3; i++) send_masked(&w, i);
  close_round(&w);
  for (size_t i = 0; i < 3; i++) sign_check(&w, i);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_UNMASK), 3);
  reveal(&w, 0);
  reveal(&w, 1);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_UNMASK);
  tick(&w, w.now + 30);
  assert_true(w.failed);
  assert_non_null(strstr(w.why, "cannot recover site"));
  assert_non_null(strstr(w.why, "2 of the 3 shares"));
  world_free(&w);
}

/* ---- the scale and the subset --------------------------------------------------------------- */

static void shared_subset_places_values_and_zeroes_the_rest(void **state) {
  (void)state;
  world w;
  world_init(&w, 3, 0.6, 40, false);
  w.cfg.topk_fraction = 0.25;
  world_start(&w);
  assert_int_equal(xf_saphase_params(w.sa)->length, 10);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(w.s[i].setup.subset, 10);
    assert_int_equal(w.s[i].setup.subset_seed, 0x5eed);
    assert_int_equal(w.s[i].setup.params.length, 10);
  }
  run_all(&w);
  assert_true(w.done);
  uint32_t idx[10];
  assert_int_equal(xf_codec_random_subset(0x5eed, 40, 10, idx), XF_OK);
  bool sent[40] = {false};
  for (size_t k = 0; k < 10; k++) sent[idx[k]] = true;
  expect_mean(&w, NULL, sent, 1.0);
  world_free(&w);
}

static void qN_that_the_bits_cannot_hold_is_refused_naming_the_bits_needed(void **state) {
  (void)state;
  world w;
  xf_saphase *sa = NULL;
  xf_errctx err = {0};
  /* Three q16 values need 2^15 * 3 < 2^(bits-1): 18 bits. */
  world_init(&w, 3, 0.6, 10, false);
  w.cfg.quant_bits = 16;
  w.cfg.bits = 17;
  assert_int_equal(xf_saphase_create(&w.cfg, w.now, &sa, &err), XF_ERANGE);
  assert_null(sa);
  assert_non_null(strstr(err.msg, "q16"));
  assert_non_null(strstr(err.msg, "at least 18"));
  w.cfg.bits = 18;
  assert_int_equal(xf_saphase_create(&w.cfg, w.now, &sa, &err), XF_OK);
  xf_update_secagg su;
  assert_int_equal(xf_saphase_setup(sa, w.ids[0], &su), XF_OK);
  assert_int_equal(su.fixed.bound, 32767);
  assert_true(su.fixed.step == 1.0 / 32767.0);
  assert_int_equal(su.fixed.bits, 18);
  xf_saphase_free(sa);
  /* Without qN the n roundings must fit: 200 sites in 8 bits do not. */
  uint64_t many[200];
  for (size_t i = 0; i < 200; i++) many[i] = i + 1;
  w.cfg.n = 200;
  w.cfg.sites = many;
  w.cfg.weights = NULL;
  w.cfg.quant_bits = 0;
  w.cfg.bits = 8;
  assert_int_equal(xf_saphase_create(&w.cfg, w.now, &sa, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "at least 9"));
  /* A whole round under q8 in 10 bits: each value is an 8-bit integer. */
  world_init(&w, 3, 0.6, 30, false);
  w.cfg.quant_bits = 8;
  w.cfg.bits = 10;
  world_start(&w);
  assert_int_equal(w.s[0].setup.fixed.bound, 127);
  run_all(&w);
  assert_true(w.done);
  expect_mean(&w, NULL, NULL, 1.0);
  world_free(&w);
}

static void distributed_noise_widens_the_scale_to_hold_it(void **state) {
  (void)state;
  uint64_t ids[2] = {5, 9};
  uint8_t seed[32] = {0};
  xf_saphase_config cfg = {.n = 2, .sites = ids, .threshold = 1.0, .bits = 24, .n_params = 8,
                           .clip = 1.0, .phase_s = 10.0, .graph_seed = seed};
  xf_saphase *sa = NULL;
  xf_update_secagg su;
  uint32_t bound = (1u << 23) - 1 - 2;
  assert_int_equal(xf_saphase_create(&cfg, 0.0, &sa, NULL), XF_OK);
  assert_int_equal(xf_saphase_setup(sa, 5, &su), XF_OK);
  assert_true(su.fixed.step == 1.0 / (double)bound);
  xf_saphase_free(sa);
  /* z = 2.6 over two equal sites: the sum's noise is about 2.6 * 1 * 0.5,
   * above the clip itself; the scale holds clip + 8 of it (with the grid's
   * slack), so the noise is not cut off at the clip. */
  cfg.noise_multiplier = 2.6;
  assert_int_equal(xf_saphase_create(&cfg, 0.0, &sa, NULL), XF_OK);
  assert_int_equal(xf_saphase_setup(sa, 9, &su), XF_OK);
  double range = 1.0 + 8.0 * 1.05 * 2.6 * 0.5;
  assert_true(fabs(su.fixed.step * bound - range) < 1e-9);
  xf_saphase_free(sa);
  cfg.noise_multiplier = -1;
  xf_errctx err = {0};
  assert_int_equal(xf_saphase_create(&cfg, 0.0, &sa, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "noise multiplier"));
}

static void setup_tells_each_site_its_index_scale_and_subset(void **state) {
  (void)state;
  uint64_t ids[5] = {901, 17, 4242, 3, 77};
  uint64_t weights[5] = {1, 2, 3, 4, 10};
  uint8_t seed[32];
  for (size_t i = 0; i < 32; i++) seed[i] = (uint8_t)i;
  xf_saphase_config cfg = {.n = 5,
                           .sites = ids,
                           .weights = weights,
                           .threshold = 0.6,
                           .bits = 20,
                           .n_params = 30,
                           .clip = 2.0,
                           .phase_s = 10.0,
                           .graph_seed = seed};
  xf_saphase *sa = NULL;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, NULL), XF_OK);
  assert_true(xf_saphase_deadline(sa) == 15.0);
  uint32_t bound = (1u << 19) - 1 - 5;
  for (uint32_t i = 0; i < 5; i++) {
    xf_update_secagg su;
    assert_int_equal(xf_saphase_index(sa, ids[i]), i + 1);
    assert_int_equal(xf_saphase_setup(sa, ids[i], &su), XF_OK);
    assert_int_equal(su.index, i + 1);
    assert_int_equal(su.params.n, 5);
    assert_int_equal(su.params.threshold, 3);
    assert_int_equal(su.params.bits, 20);
    assert_int_equal(su.params.degree, 4);
    assert_int_equal(su.params.length, 30);
    assert_memory_equal(su.params.graph_seed, seed, 32);
    assert_int_equal(su.fixed.bits, 20);
    assert_int_equal(su.fixed.bound, bound);
    assert_true(su.fixed.step == 2.0 / (double)bound);
    assert_true(su.scale == (double)weights[i] / 20.0);
    assert_int_equal(su.subset, 0);
    assert_int_equal(su.subset_seed, 0);
  }
  assert_int_equal(xf_secagg_params_check(xf_saphase_params(sa), NULL), XF_OK);
  xf_saphase_free(sa);

  /* With top-k: the subset's size and seed; a long phase is cut to 30 s. */
  cfg.topk_fraction = 0.5;
  cfg.subset_seed = 99;
  cfg.phase_s = 100;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, NULL), XF_OK);
  assert_true(xf_saphase_deadline(sa) == 35.0);
  xf_update_secagg su;
  assert_int_equal(xf_saphase_setup(sa, 3, &su), XF_OK);
  assert_int_equal(su.index, 4);
  assert_int_equal(su.subset, 15);
  assert_int_equal(su.subset_seed, 99);
  assert_int_equal(su.params.length, 15);
  assert_int_equal(xf_saphase_setup(sa, 5, &su), XF_ENOENT);
  xf_saphase_free(sa);

  /* What the setup cannot be made of, named. */
  xf_errctx err = {0};
  cfg.topk_fraction = 0;
  ids[3] = 17;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "site 17 is listed twice"));
  ids[3] = 3;
  weights[2] = 0;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "site 4242 has weight 0"));
  weights[2] = 3;
  cfg.clip = 0;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "privacy.clip"));
  cfg.clip = 2.0;
  cfg.n = 1;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "the cohort has 1"));
  cfg.n = 5;
  cfg.bits = 40;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "secure_aggregation.bits 40"));
  cfg.bits = 20;
  cfg.threshold = 0;
  assert_int_equal(xf_saphase_create(&cfg, 5.0, &sa, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "threshold"));
  assert_null(sa);
}

static void create_fails_cleanly_at_every_allocation(void **state) {
  (void)state;
  world w;
  world_init(&w, 5, 0.6, 64, false);
  w.cfg.topk_fraction = 0.5;
  bool made = false;
  for (long k = 0; k < 1000 && !made; k++) {
    xf_saphase *sa = NULL;
    xf_errctx err = {0};
    xf_alloc_fail_after(k);
    xf_err rc = xf_saphase_create(&w.cfg, w.now, &sa, &err);
    xf_alloc_fail_reset();
    if (rc == XF_OK) {
      made = true;
      assert_non_null(sa);
    } else {
      assert_int_equal(rc, XF_ENOMEM);
      assert_null(sa);
      if (!strstr(err.msg, "memory")) fail_msg("allocation %ld: %s", k, err.msg);
    }
    xf_saphase_free(sa);
  }
  assert_true(made);
}

/* ---- what does not fit ---------------------------------------------------------------------- */

static void malformed_or_out_of_turn_messages_drop_the_sender(void **state) {
  (void)state;
  /* 25 sites, t = 14: sites 0-4 misbehave in the advert phase, 5-6 in the
   * share phase, 7-9 with their masked input, 10 with its reveal; 11 to
   * 24 behave, and are just enough to unmask. */
  world w;
  world_init(&w, 25, 0.55, 20, false);
  world_start(&w);
  assert_int_equal(xf_saphase_params(w.sa)->threshold, 14);
  signed_keys k;
  xf_errctx err = {0};

  keys_of(&w, 0, &k);
  k.keys.advert_len = 63;
  assert_int_equal(xf_saphase_advert(w.sa, w.ids[0], &k.keys, w.now, &err), XF_EFORMAT);
  assert_string_equal(err.msg, "site 1000: sent keys of 63 bytes, not 64");
  collect(&w);
  assert_true(w.s[0].dropped);
  assert_string_equal(w.s[0].why, "sent keys of 63 bytes, not 64");

  uint32_t to[1] = {3};
  xf_secagg_signed_share junk_share = {.to = 3};
  assert_int_equal(send_shares_rc(&w, 1, to, &junk_share, 1, &err), XF_EINVAL);
  assert_true(w.s[1].dropped);
  assert_non_null(strstr(w.s[1].why, "out of turn"));

  advertise(&w, 2);
  assert_false(w.s[2].dropped);
  assert_int_equal(advertise_rc(&w, 2), XF_EEXISTS);
  assert_true(w.s[2].dropped);
  assert_non_null(strstr(w.s[2].why, "twice"));

  assert_int_equal(xf_saphase_reveal(w.sa, w.ids[3], k.advert, sizeof(k.advert), w.now, &err),
                   XF_EINVAL);
  collect(&w);
  assert_true(w.s[3].dropped);
  assert_non_null(strstr(w.s[3].why, "reveal out of turn"));

  keys_of(&w, 4, &k);
  memset(k.advert, 0, sizeof(k.advert));
  assert_int_equal(xf_saphase_advert(w.sa, w.ids[4], &k.keys, w.now, &err), XF_EFORMAT);
  collect(&w);
  assert_true(w.s[4].dropped);
  assert_non_null(strstr(w.s[4].why, "zero key"));

  /* A dropped site's message is out of turn too. */
  assert_int_equal(advertise_rc(&w, 0), XF_EINVAL);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_DROP), 1);
  assert_non_null(strstr(w.s[0].why, "after it had left"));

  for (size_t i = 5; i < 25; i++) advertise(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_SHARE);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_KEYS), 20);

  /* A masked input in the share phase. */
  uint32_t *words = xf_malloc(20 * sizeof(uint32_t));
  assert_non_null(words);
  memset(words, 0, 20 * sizeof(uint32_t));
  assert_int_equal(xf_saphase_masked(w.sa, w.ids[5], &words, 20, w.now, &err), XF_EINVAL);
  collect(&w);
  assert_true(w.s[5].dropped);
  assert_non_null(strstr(w.s[5].why, "masked input out of turn"));
  assert_non_null(words); /* still ours */
  xf_free(words);

  /* Shares naming a receiver twice. */
  {
    size_t count = 0;
    xf_secagg_signed_share msgs[24];
    uint32_t t2[24];
    make_shares(&w, 6, msgs, &count);
    for (size_t m = 0; m < count; m++) t2[m] = msgs[m].to;
    t2[1] = t2[0];
    assert_int_equal(send_shares_rc(&w, 6, t2, msgs, count, &err), XF_EFORMAT);
    assert_true(w.s[6].dropped);
    assert_non_null(strstr(w.s[6].why, "named twice"));
  }
  for (size_t i = 7; i < 25; i++) share(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_MASKED);
  assert_true(w.s[5].dropped && !w.s[5].routed);
  /* Sites 5 and 6 advertised but their shares were not routed. */
  assert_int_equal(w.s[7].n_u2, 18);
  assert_int_equal(w.s[7].n_cts, 17);

  /* A masked input of the wrong length, one with values above 2^bits,
   * and one sent twice. */
  for (size_t i = 7; i < 25; i++) take_routed(&w, i);
  words = masked_words(&w, 7);
  assert_int_equal(xf_saphase_masked(w.sa, w.ids[7], &words, 19, w.now, &err), XF_EFORMAT);
  collect(&w);
  assert_true(w.s[7].dropped);
  assert_non_null(strstr(w.s[7].why, "19 values"));
  assert_non_null(words);
  xf_free(words);
  words = masked_words(&w, 8);
  words[3] = 1u << 16;
  assert_int_equal(xf_saphase_masked(w.sa, w.ids[8], &words, 20, w.now, &err), XF_EFORMAT);
  collect(&w);
  assert_true(w.s[8].dropped);
  assert_non_null(strstr(w.s[8].why, "more than 16 bits"));
  xf_free(words);
  for (size_t i = 9; i < 25; i++) {
    words = masked_words(&w, i);
    assert_int_equal(xf_saphase_masked(w.sa, w.ids[i], &words, 20, w.now, &err), XF_OK);
    assert_null(words);
    collect(&w);
  }
  words = masked_words(&w, 9);
  assert_int_equal(xf_saphase_masked(w.sa, w.ids[9], &words, 20, w.now, &err), XF_EEXISTS);
  collect(&w);
  assert_true(w.s[9].dropped);
  assert_non_null(strstr(w.s[9].why, "twice"));
  xf_free(words);

  close_round(&w);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_CHECK), 15);
  for (size_t i = 10; i < 25; i++) sign_check(&w, i);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_UNMASK), 15);

  /* A truncated reveal: site 10 is dropped, but its input is in the sum
   * and its secret comes from the others. */
  size_t len;
  uint8_t *msg = reveal_msg(&w, 10, &len);
  assert_int_equal(xf_saphase_reveal(w.sa, w.ids[10], msg, len - 1, w.now, &err), XF_EFORMAT);
  free(msg);
  collect(&w);
  assert_true(w.s[10].dropped);
  assert_non_null(strstr(w.s[10].why, "secagg reveal"));
  for (size_t i = 11; i < 24; i++) reveal(&w, i);
  assert_false(w.done);
  reveal(&w, 24);
  assert_true(w.done);
  /* After the end, messages are refused with nothing queued. */
  assert_int_equal(advertise_rc(&w, 24), XF_EINVAL);
  assert_int_equal(n_actions(&w), 0);
  bool in[25] = {false};
  double total = 0, have = 0;
  for (size_t i = 0; i < 25; i++) {
    in[i] = i >= 10;
    total += (double)w.weights[i];
    have += in[i] ? (double)w.weights[i] : 0;
  }
  expect_mean(&w, in, NULL, total / have);
  world_free(&w);
}

static void messages_from_outside_the_cohort_are_enoent(void **state) {
  (void)state;
  world w;
  world_init(&w, 3, 0.6, 10, false);
  world_start(&w);
  signed_keys k;
  keys_of(&w, 0, &k);
  uint8_t *adv = k.advert;
  xf_errctx err = {0};
  assert_int_equal(xf_saphase_index(w.sa, 5), 0);
  assert_int_equal(xf_saphase_advert(w.sa, 5, &k.keys, w.now, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "site 5 "));
  assert_non_null(strstr(err.msg, "not in this secure aggregation's cohort"));
  assert_int_equal(n_actions(&w), 0);
  uint32_t to[1] = {2};
  const uint8_t *cts[1] = {adv}, *sigs[1] = {k.sig};
  size_t lens[1] = {XF_SECAGG_SHARE_BYTES}, sig_lens[1] = {XF_SECAGG_SIG_BYTES};
  xf_saphase_shares_msg msg = {to, 1, cts, lens, 1, sigs, sig_lens, 1};
  assert_int_equal(xf_saphase_shares(w.sa, 5, &msg, w.now, &err), XF_ENOENT);
  assert_int_equal(n_actions(&w), 0);
  assert_int_equal(xf_saphase_check_sig(w.sa, 5, k.sig, sizeof(k.sig), w.now, &err), XF_ENOENT);
  assert_int_equal(n_actions(&w), 0);
  uint32_t *words = xf_calloc(10, sizeof(uint32_t));
  assert_int_equal(xf_saphase_masked(w.sa, 5, &words, 10, w.now, &err), XF_ENOENT);
  assert_non_null(words);
  xf_free(words);
  assert_int_equal(xf_saphase_reveal(w.sa, 5, adv, XF_SECAGG_ADVERT_BYTES, w.now, &err),
                   XF_ENOENT);
  assert_int_equal(n_actions(&w), 0);
  xf_saphase_gone(w.sa, 5, w.now);
  assert_int_equal(n_actions(&w), 0);
  xf_update_secagg su;
  assert_int_equal(xf_saphase_setup(w.sa, 5, &su), XF_ENOENT);
  /* The cohort goes on as if nothing happened. */
  run_all(&w);
  assert_true(w.done);
  assert_int_equal(w.drops, 0);
  expect_mean(&w, NULL, NULL, 1.0);
  world_free(&w);
}

/* ---- signatures and the consistency round --------------------------------------------------- */

/* The machine checks no signature (the sites do) but refuses what cannot be
 * one: keys without a signature or certificate of the allowed size, a share
 * without its signature. */
static void keys_or_shares_without_their_signature_drop_the_sender(void **state) {
  (void)state;
  world w;
  world_init(&w, 5, 0.6, 10, false);
  world_start(&w);
  signed_keys k;
  xf_errctx err = {0};
  keys_of(&w, 0, &k);
  k.keys.sig_len = 63;
  assert_int_equal(xf_saphase_advert(w.sa, w.ids[0], &k.keys, w.now, &err), XF_EFORMAT);
  collect(&w);
  assert_true(w.s[0].dropped);
  assert_non_null(strstr(w.s[0].why, "signature of 63 bytes, not 64"));
  keys_of(&w, 1, &k);
  k.keys.cert = NULL;
  k.keys.cert_len = 0;
  assert_int_equal(xf_saphase_advert(w.sa, w.ids[1], &k.keys, w.now, &err), XF_EFORMAT);
  collect(&w);
  assert_true(w.s[1].dropped);
  assert_non_null(strstr(w.s[1].why, "certificate of 0 bytes"));
  for (size_t i = 2; i < 5; i++) advertise(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_SHARE);
  /* What SEND_KEYS relays: each index's signature and certificate, empty
   * for the sites that sent no keys. */
  assert_int_equal(w.s[2].cert_lens[0], 0);
  assert_int_equal(w.s[2].cert_lens[2], strlen(w.s[2].name));
  uint8_t zero[XF_SECAGG_SIG_BYTES] = {0};
  assert_memory_equal(w.s[2].advert_sigs, zero, sizeof(zero));
  size_t count = 0;
  xf_secagg_signed_share msgs[4];
  uint32_t to[4];
  make_shares(&w, 2, msgs, &count);
  assert_int_equal(count, 2); /* its neighbours that sent keys */
  for (size_t m = 0; m < count; m++) to[m] = msgs[m].to;
  const uint8_t *cts[2] = {msgs[0].ciphertext, msgs[1].ciphertext};
  const uint8_t *sigs[2] = {msgs[0].sig, NULL};
  size_t lens[2] = {XF_SECAGG_SHARE_BYTES, XF_SECAGG_SHARE_BYTES};
  size_t sig_lens[2] = {XF_SECAGG_SIG_BYTES, 0};
  xf_saphase_shares_msg msg = {to, 2, cts, lens, 2, sigs, sig_lens, 2};
  assert_int_equal(xf_saphase_shares(w.sa, w.ids[2], &msg, w.now, &err), XF_EFORMAT);
  collect(&w);
  assert_true(w.s[2].dropped);
  assert_non_null(strstr(w.s[2].why, "has no signature"));
  /* Two sharers are left, below t = 3: the attempt fails. */
  share(&w, 3);
  share(&w, 4);
  assert_true(w.failed);
  assert_non_null(strstr(w.why, "sent their shares"));
  world_free(&w);
}

/* A shares message whose three lists differ in length drops the sender,
 * naming the lengths, and no list is read past its end (each is allocated
 * to its length, so a sanitizer build sees any read beyond it). */
static void shares_lists_of_different_lengths_drop_the_sender_reading_none_past_its_end(
    void **state) {
  (void)state;
  static const size_t shapes[][3] = {{1, 2, 2}, {2, 1, 2}, {2, 2, 1}, {0, 2, 2}};
  for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++) {
    world w;
    world_init(&w, 5, 0.6, 10, false);
    world_start(&w);
    for (size_t i = 0; i < 5; i++) advertise(&w, i);
    assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_SHARE);
    size_t count = 0;
    xf_secagg_signed_share msgs[4];
    make_shares(&w, 2, msgs, &count);
    assert_true(count >= 2);
    size_t n_to = shapes[c][0], n_cts = shapes[c][1], n_sigs = shapes[c][2];
    uint32_t *to = xf_calloc(n_to ? n_to : 1, sizeof(*to));
    const uint8_t **cts = xf_calloc(n_cts, sizeof(*cts));
    size_t *lens = xf_calloc(n_cts, sizeof(*lens));
    const uint8_t **sigs = xf_calloc(n_sigs, sizeof(*sigs));
    size_t *sig_lens = xf_calloc(n_sigs, sizeof(*sig_lens));
    assert_true(to && cts && lens && sigs && sig_lens);
    for (size_t k = 0; k < n_to; k++) to[k] = msgs[k].to;
    for (size_t k = 0; k < n_cts; k++) {
      cts[k] = msgs[k].ciphertext;
      lens[k] = XF_SECAGG_SHARE_BYTES;
    }
    for (size_t k = 0; k < n_sigs; k++) {
      sigs[k] = msgs[k].sig;
      sig_lens[k] = XF_SECAGG_SIG_BYTES;
    }
    xf_saphase_shares_msg msg = {to, n_to, cts, lens, n_cts, sigs, sig_lens, n_sigs};
    xf_errctx err = {0};
    assert_int_equal(xf_saphase_shares(w.sa, w.ids[2], &msg, w.now, &err), XF_EFORMAT);
    collect(&w);
    assert_true(w.s[2].dropped);
    char want[128];
    snprintf(want, sizeof(want), "sent %zu receivers, %zu ciphertexts and %zu signatures", n_to,
             n_cts, n_sigs);
    assert_non_null(strstr(w.s[2].why, want));
    assert_non_null(strstr(w.s[2].why, "must be equally long"));
    xf_free(to);
    xf_free(cts);
    xf_free(lens);
    xf_free(sigs);
    xf_free(sig_lens);
    world_free(&w);
  }
}

/* After the close the survivors sign U3; only signers are asked to reveal,
 * with every signature, and fewer than t signers fail the attempt. */
static void survivors_sign_the_survivor_set_before_anyone_is_asked_to_reveal(void **state) {
  (void)state;
  world w;
  world_init(&w, 5, 0.6, 30, false);
  world_start(&w);
  for (size_t i = 0; i < 5; i++) advertise(&w, i);
  for (size_t i = 0; i < 5; i++) share(&w, i);
  for (size_t i = 0; i < 5; i++) send_masked(&w, i);
  close_round(&w);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_CHECK), 5);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_UNMASK), 0);
  assert_true(xf_saphase_deadline(w.sa) == 1030.0);
  /* A reveal before the signatures, and a signature of the wrong size. */
  uint8_t junk[XF_SECAGG_SIG_BYTES] = {1};
  xf_errctx err = {0};
  assert_int_equal(xf_saphase_reveal(w.sa, w.ids[4], junk, sizeof(junk), w.now, &err), XF_EINVAL);
  collect(&w);
  assert_true(w.s[4].dropped);
  assert_non_null(strstr(w.s[4].why, "reveal out of turn"));
  assert_int_equal(xf_saphase_check_sig(w.sa, w.ids[3], junk, 63, w.now, &err), XF_EFORMAT);
  collect(&w);
  assert_true(w.s[3].dropped);
  assert_non_null(strstr(w.s[3].why, "of 63 bytes, not 64"));
  sign_check(&w, 0);
  assert_int_equal(sign_check_rc(&w, 0), XF_EEXISTS);
  assert_true(w.s[0].dropped);
  sign_check(&w, 1);
  /* Site 2 stays silent: at the deadline two signatures are there (site
   * 0's still counts though it was dropped since), fewer than t = 3. */
  tick(&w, 1029.0);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_CHECK);
  tick(&w, 1030.0);
  assert_true(w.failed);
  assert_non_null(strstr(w.why, "only 2 of the 5 survivors signed the survivor set"));
  assert_non_null(strstr(w.why, "threshold 3"));
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_UNMASK), 0);
  world_free(&w);

  /* Four of five sign: the four are asked, the fifth is not, and its
   * input, in the sum, is unmasked from the others' shares of its b. */
  world_init(&w, 5, 0.6, 30, false);
  world_start(&w);
  for (size_t i = 0; i < 5; i++) advertise(&w, i);
  for (size_t i = 0; i < 5; i++) share(&w, i);
  for (size_t i = 0; i < 5; i++) send_masked(&w, i);
  close_round(&w);
  for (size_t i = 0; i < 4; i++) sign_check(&w, i);
  tick(&w, 1030.0);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_UNMASK);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_UNMASK), 4);
  assert_false(w.s[4].unmask);
  assert_int_equal(w.s[0].n_signers, 4);
  assert_int_equal(w.s[0].n_u3, 5);
  assert_int_equal(xf_saphase_reveal(w.sa, w.ids[4], junk, sizeof(junk), w.now, &err), XF_EINVAL);
  collect(&w);
  assert_non_null(strstr(w.s[4].why, "without having signed"));
  for (size_t i = 0; i < 4; i++) reveal(&w, i);
  assert_true(w.done);
  expect_mean(&w, NULL, NULL, 1.0);
  world_free(&w);
}

/* Sites that refuse to reveal leave the unmasking; when too few shares are
 * left the failure says how many refused. */
static void refusals_leave_the_unmasking_and_the_failure_counts_them(void **state) {
  (void)state;
  world w;
  world_init(&w, 4, 0.75, 20, false);
  world_start(&w);
  for (size_t i = 0; i < 4; i++) advertise(&w, i);
  for (size_t i = 0; i < 4; i++) share(&w, i);
  for (size_t i = 0; i < 4; i++) send_masked(&w, i);
  close_round(&w);
  for (size_t i = 0; i < 4; i++) sign_check(&w, i);
  xf_saphase_refused(w.sa, w.ids[1], w.now);
  collect(&w);
  xf_saphase_refused(w.sa, w.ids[3], w.now);
  collect(&w);
  /* Refusing twice, or from outside the cohort, counts nothing more. */
  xf_saphase_refused(w.sa, w.ids[3], w.now);
  xf_saphase_refused(w.sa, 5, w.now);
  collect(&w);
  assert_int_equal(w.drops, 0);
  reveal(&w, 0);
  assert_false(w.failed);
  reveal(&w, 2);
  assert_true(w.failed);
  assert_non_null(strstr(w.why, "2 of the 3 shares"));
  assert_non_null(strstr(w.why, "2 sites refused to go on (site 1007 first)"));
  world_free(&w);
}

/* ---- the sparse graph ----------------------------------------------------------------------- */

static void the_harary_graph_routes_only_to_neighbours(void **state) {
  (void)state;
  /* n = 70 > XF_SECAGG_COMPLETE_MAX: degree 32, not the complete graph. */
  world w;
  world_init(&w, 70, 0.55, 16, false);
  world_start(&w);
  const xf_secagg_params *p = xf_saphase_params(w.sa);
  assert_int_equal(p->degree, 32);
  assert_int_equal(p->threshold, 39);
  for (size_t i = 0; i < 70; i++) advertise(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_SHARE);

  /* The last site addresses a share to a site that is not its neighbour. */
  uint32_t stranger = 0;
  for (uint32_t j = 1; j <= 69 && !stranger; j++)
    if (!xf_secagg_neighbours(p, 70, j)) stranger = j;
  assert_true(stranger != 0);
  {
    sim_site *s = &w.s[69];
    size_t count = 0;
    xf_secagg_signed_share msgs[32];
    xf_errctx err = {0};
    make_shares(&w, 69, msgs, &count);
    assert_int_equal(count, 32);
    uint32_t to[32];
    for (size_t k = 0; k < count; k++) to[k] = msgs[k].to;
    to[5] = stranger;
    assert_int_equal(send_shares_rc(&w, 69, to, msgs, count, &err), XF_EFORMAT);
    assert_true(s->dropped);
    assert_non_null(strstr(s->why, "is not its neighbour"));
  }
  for (size_t i = 0; i < 69; i++) share(&w, i);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_MASKED);
  assert_int_equal(count_actions(&w, XF_SAPHASE_ACT_SEND_ROUTED), 69);
  for (size_t i = 0; i < 69; i++) {
    sim_site *s = &w.s[i];
    uint32_t nb[32];
    size_t n_nb = 0;
    assert_int_equal(
        xf_secagg_client_neighbours(xf_secagg_guard_client(s->guard), nb, 32, &n_nb), XF_OK);
    assert_int_equal(n_nb, 32);
    /* Exactly its neighbours that shared (all but site 70), once each. */
    size_t want = 32 - (xf_secagg_neighbours(p, (uint32_t)i + 1, 70) ? 1 : 0);
    assert_int_equal(s->n_cts, want);
    for (size_t k = 0; k < s->n_cts; k++) {
      assert_true(xf_secagg_neighbours(p, (uint32_t)i + 1, s->from[k]));
      assert_true(s->from[k] != 70);
      for (size_t m = 0; m < k; m++) assert_true(s->from[m] != s->from[k]);
    }
    assert_int_equal(s->n_u2, 69);
  }
  for (size_t i = 0; i < 69; i++) send_masked(&w, i);
  close_round(&w);
  for (size_t i = 0; i < 69; i++) sign_check(&w, i);
  for (size_t i = 0; i < 69; i++) reveal(&w, i);
  assert_true(w.done);
  assert_int_equal(xf_saphase_prg_expansions(w.sa), 69);
  bool in[70];
  double total = 0, have = 0;
  for (size_t i = 0; i < 70; i++) {
    in[i] = i < 69;
    total += (double)w.weights[i];
    have += in[i] ? (double)w.weights[i] : 0;
  }
  expect_mean(&w, in, NULL, total / have);
  world_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(three_sites_unmask_the_weighted_mean),
      cmocka_unit_test(equal_weights_give_the_plain_mean),
      cmocka_unit_test(
          a_site_silent_in_the_advert_phase_is_dropped_at_the_deadline_and_the_rest_go_on),
      cmocka_unit_test(a_site_gone_after_its_masked_input_is_recovered_from_the_others_shares),
      cmocka_unit_test(fewer_survivors_than_the_threshold_fails_naming_both_counts),
      cmocka_unit_test(unrevealed_secrets_fail_the_unmasking_naming_the_site),
      cmocka_unit_test(shared_subset_places_values_and_zeroes_the_rest),
      cmocka_unit_test(qN_that_the_bits_cannot_hold_is_refused_naming_the_bits_needed),
      cmocka_unit_test(setup_tells_each_site_its_index_scale_and_subset),
      cmocka_unit_test(distributed_noise_widens_the_scale_to_hold_it),
      cmocka_unit_test(create_fails_cleanly_at_every_allocation),
      cmocka_unit_test(malformed_or_out_of_turn_messages_drop_the_sender),
      cmocka_unit_test(messages_from_outside_the_cohort_are_enoent),
      cmocka_unit_test(keys_or_shares_without_their_signature_drop_the_sender),
      cmocka_unit_test(shares_lists_of_different_lengths_drop_the_sender_reading_none_past_its_end),
      cmocka_unit_test(survivors_sign_the_survivor_set_before_anyone_is_asked_to_reveal),
      cmocka_unit_test(refusals_leave_the_unmasking_and_the_failure_counts_them),
      cmocka_unit_test(the_harary_graph_routes_only_to_neighbours),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
