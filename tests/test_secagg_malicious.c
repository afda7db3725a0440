/* SPDX-License-Identifier: Apache-2.0 */
/* Secure aggregation against an aggregator that lies about dropouts. Five
 * sites with certificates of a federation made in a scratch directory run
 * the client a site daemon runs (crypto/secagg_guard.h on the federation
 * PKI, crypto/secagg_x509.h) against the aggregator's real phase machine
 * (coordinator/saphase.h); between them the test relays each message, and
 * the lying aggregator rewrites the survivor set it shows some sites.
 * No sockets: the daemons only carry these same calls' bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "codec/codec.h"
#include "coordinator/saphase.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "crypto/secagg_x509.h"
#include "support.h"

#define N 5
#define LEN 24
#define TARGET 3 /* the site whose update the lying aggregator is after */

static char root[256];
static char fed_dir[512];
static const char *const NAMES[N] = {"eu-a", "eu-b", "eu-c", "eu-d", "eu-e"};

static int group_setup(void **state) {
  (void)state;
  if (xf_test_mkdtemp(root, sizeof(root), "secagg-malicious") != 0) return -1;
  if (xf_crypto_init() != XF_OK) return -1;
  snprintf(fed_dir, sizeof(fed_dir), "%s/fed", root);
  xf_federation *fed = NULL;
  xf_errctx err = {0};
  if (xf_federation_init(fed_dir, "acme", 0, &fed, &err) != XF_OK) return -1;
  for (size_t i = 0; i < N; i++) {
    xf_pki_issue_opts o = {.kind = XF_PKI_KIND_SITE, .name = NAMES[i], .region = "eu"};
    if (xf_federation_issue(fed, &o, NULL, &err) != XF_OK) return -1;
  }
  xf_federation_close(fed);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(root);
  return 0;
}

/* ---- the sites -------------------------------------------------------------------------------- */

typedef struct site {
  uint64_t id;
  EVP_PKEY *key;
  xf_secagg_x509 *identity;
  xf_secagg_guard *guard;
  uint8_t *cert;
  size_t cert_len;
  xf_update_secagg setup;
  float x[LEN];
  /* What the aggregator sent it, copied (pointers in actions die at the
   * next event). */
  bool keys, routed, check, unmask;
  uint8_t adverts[N * XF_SECAGG_ADVERT_BYTES], advert_sigs[N * XF_SECAGG_SIG_BYTES];
  uint8_t *certs;
  uint32_t cert_lens[N];
  uint32_t u2[N], from[N], check_u3[N], u3[N], signers[N];
  uint8_t cts[N][XF_SECAGG_SHARE_BYTES], share_sigs[N][XF_SECAGG_SIG_BYTES];
  uint8_t sigs[N][XF_SECAGG_SIG_BYTES];
  size_t n_u2, n_cts, n_check_u3, n_u3, n_signers;
  /* What it did. */
  bool gone, refused;
  char refusal[512];
} site;

typedef struct world {
  xf_pki_trust *trust;
  xf_saphase *sa;
  xf_saphase_config cfg;
  uint64_t ids[N];
  uint8_t graph_seed[32];
  double now;
  site s[N + 1]; /* 1-based: site i is cohort index i */
  /* The lie: the survivor set shown to the sites marked in lied_to (NULL:
   * none), in the check and in the unmask request alike. */
  const uint32_t *lie;
  size_t n_lie;
  bool lied_to[N + 1];
  /* Every reveal the aggregator received, as sent. */
  uint8_t *reveal[N + 1];
  size_t reveal_len[N + 1];
  bool done, failed;
  char why[XF_SAPHASE_WHY_MAX];
} world;

static void load_site(site *s, const char *name, const xf_pki_trust *trust) {
  char path[700];
  xf_errctx err = {0};
  snprintf(path, sizeof(path), "%s/issued/%s.key", fed_dir, name);
  if (xf_pki_key_load(path, &s->key, &err) != XF_OK) fail_msg("key %s: %s", name, err.msg);
  snprintf(path, sizeof(path), "%s/issued/%s.crt", fed_dir, name);
  X509 *cert = NULL;
  if (xf_pki_cert_load(path, &cert, &err) != XF_OK) fail_msg("cert %s: %s", name, err.msg);
  if (xf_secagg_x509_cert_der(cert, &s->cert, &s->cert_len, &err) != XF_OK)
    fail_msg("der: %s", err.msg);
  X509_free(cert);
  if (xf_secagg_x509_new(trust, s->key, &s->identity, &err) != XF_OK) fail_msg("%s", err.msg);
}

/* The aggregator's machine for five sites of equal weight at `threshold`,
 * and each site's guarded client, made from the setup the machine tells it
 * and the cohort's names, as the Go carries them. */
static void world_init(world *w, double threshold) {
  memset(w, 0, sizeof(*w));
  w->now = 100.0;
  char ca[600], crl[600];
  snprintf(ca, sizeof(ca), "%s/ca.crt", fed_dir);
  snprintf(crl, sizeof(crl), "%s/crl.pem", fed_dir);
  xf_errctx err = {0};
  if (xf_pki_trust_load(ca, crl, &w->trust, &err) != XF_OK) fail_msg("trust: %s", err.msg);
  for (size_t b = 0; b < 32; b++) w->graph_seed[b] = (uint8_t)(11 * b + 3);
  for (size_t i = 0; i < N; i++) w->ids[i] = 500 + i;
  w->cfg = (xf_saphase_config){.n = N,
                               .sites = w->ids,
                               .threshold = threshold,
                               .bits = 16,
                               .n_params = LEN,
                               .clip = 1.0,
                               .phase_s = 30.0,
                               .graph_seed = w->graph_seed};
  if (xf_saphase_create(&w->cfg, w->now, &w->sa, &err) != XF_OK) fail_msg("%s", err.msg);
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &w->s[i];
    s->id = w->ids[i - 1];
    load_site(s, NAMES[i - 1], w->trust);
    assert_int_equal(xf_saphase_setup(w->sa, s->id, &s->setup), XF_OK);
    assert_int_equal(s->setup.index, i);
    xf_secagg_session session = {
        .job = "7", .round = 3, .attempt = 1, .params = s->setup.params, .cohort = NAMES};
    xf_secagg_identity id = xf_secagg_x509_identity(s->identity);
    if (xf_secagg_guard_new(&session, i, &id, &s->guard, &err) != XF_OK)
      fail_msg("site %u: %s", i, err.msg);
    /* Coordinates of about 0.1: each update's norm stays below clip 1. */
    for (size_t k = 0; k < LEN; k++)
      s->x[k] = (float)(0.1 * sin(0.7 * (double)k + 1.9 * (double)i) + 0.02 * (double)i);
  }
}

static void world_free(world *w) {
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &w->s[i];
    xf_secagg_guard_free(s->guard);
    xf_secagg_x509_free(s->identity);
    EVP_PKEY_free(s->key);
    xf_free(s->cert);
    free(s->certs);
    free(w->reveal[i]);
  }
  xf_saphase_free(w->sa);
  xf_pki_trust_free(w->trust);
}

static site *site_of(world *w, uint64_t id) {
  for (uint32_t i = 1; i <= N; i++)
    if (w->s[i].id == id) return &w->s[i];
  return NULL;
}

static uint32_t index_of(const world *w, const site *s) { return (uint32_t)(s - w->s); }

/* ---- the relay: the machine's actions to the sites, lies included ----------------------------- */

static void copy_u32(uint32_t *to, size_t *n_to, const uint32_t *from, size_t n) {
  assert_true(n <= N);
  memcpy(to, from, n * sizeof(*to));
  *n_to = n;
}

/* What the aggregator shows site s as the survivors: the machine's U3, or
 * the lie. */
static void shown_u3(world *w, site *s, const uint32_t *u3, size_t n, uint32_t *to,
                     size_t *n_to) {
  if (w->lie && w->lied_to[index_of(w, s)]) copy_u32(to, n_to, w->lie, w->n_lie);
  else copy_u32(to, n_to, u3, n);
}

static void relay(world *w) {
  size_t n;
  const xf_saphase_action *a = xf_saphase_actions(w->sa, &n);
  for (size_t k = 0; k < n; k++) {
    site *s = a[k].site ? site_of(w, a[k].site) : NULL;
    switch (a[k].kind) {
    case XF_SAPHASE_ACT_SEND_KEYS:
      assert_int_equal(a[k].adverts_len, sizeof(s->adverts));
      memcpy(s->adverts, a[k].adverts, sizeof(s->adverts));
      memcpy(s->advert_sigs, a[k].sigs, sizeof(s->advert_sigs));
      memcpy(s->cert_lens, a[k].cert_lens, sizeof(s->cert_lens));
      s->certs = malloc(a[k].certs_len);
      assert_non_null(s->certs);
      memcpy(s->certs, a[k].certs, a[k].certs_len);
      s->keys = true;
      break;
    case XF_SAPHASE_ACT_SEND_ROUTED:
      copy_u32(s->u2, &s->n_u2, a[k].u2, a[k].n_u2);
      copy_u32(s->from, &s->n_cts, a[k].from, a[k].n_cts);
      for (size_t m = 0; m < a[k].n_cts; m++) {
        memcpy(s->cts[m], a[k].cts[m], XF_SECAGG_SHARE_BYTES);
        memcpy(s->share_sigs[m], a[k].sigs + m * XF_SECAGG_SIG_BYTES, XF_SECAGG_SIG_BYTES);
      }
      s->routed = true;
      break;
    case XF_SAPHASE_ACT_SEND_CHECK:
      shown_u3(w, s, a[k].u3, a[k].n_u3, s->check_u3, &s->n_check_u3);
      s->check = true;
      break;
    case XF_SAPHASE_ACT_SEND_UNMASK:
      /* Every signature the aggregator holds goes to every site: a liar
       * gains nothing by holding some back. */
      shown_u3(w, s, a[k].u3, a[k].n_u3, s->u3, &s->n_u3);
      copy_u32(s->signers, &s->n_signers, a[k].signers, a[k].n_signers);
      memcpy(s->sigs, a[k].sigs, a[k].n_signers * XF_SECAGG_SIG_BYTES);
      s->unmask = true;
      break;
    case XF_SAPHASE_ACT_DROP:
      fail_msg("site %llu dropped: %s", (unsigned long long)a[k].site, a[k].why);
      break;
    case XF_SAPHASE_ACT_DONE: w->done = true; break;
    case XF_SAPHASE_ACT_FAILED:
      w->failed = true;
      snprintf(w->why, sizeof(w->why), "%s", a[k].why);
      break;
    }
  }
}

/* Site s leaves the round: it refused (why), or it is gone. */
static void refuse(world *w, site *s, const char *why) {
  s->refused = true;
  snprintf(s->refusal, sizeof(s->refusal), "%s", why);
  xf_saphase_refused(w->sa, s->id, w->now);
  relay(w);
}

static void gone(world *w, uint32_t i) {
  w->s[i].gone = true;
  xf_saphase_gone(w->sa, w->s[i].id, w->now);
  relay(w);
}

/* ---- the sites' side, as the daemon runs it --------------------------------------------------- */

static void advertise_all(world *w) {
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &w->s[i];
    uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
    xf_errctx err = {0};
    assert_int_equal(xf_secagg_guard_advertise(s->guard, advert, sig, &err), XF_OK);
    xf_saphase_keys keys = {.advert = advert, .advert_len = sizeof(advert), .sig = sig,
                            .sig_len = sizeof(sig), .cert = s->cert, .cert_len = s->cert_len};
    assert_int_equal(xf_saphase_advert(w->sa, s->id, &keys, w->now, NULL), XF_OK);
    relay(w);
  }
}

static void share_all(world *w) {
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &w->s[i];
    if (s->gone || !s->keys) continue;
    xf_secagg_member_keys keys[N];
    for (size_t m = 0, at = 0; m < N; at += s->cert_lens[m], m++)
      keys[m] = (xf_secagg_member_keys){.advert = s->adverts + m * XF_SECAGG_ADVERT_BYTES,
                                        .sig = s->advert_sigs + m * XF_SECAGG_SIG_BYTES,
                                        .cert = s->certs + at,
                                        .cert_len = s->cert_lens[m]};
    xf_secagg_signed_share out[N];
    size_t count = 0;
    xf_errctx err = {0};
    if (xf_secagg_guard_share(s->guard, keys, out, N, &count, &err) != XF_OK)
      fail_msg("site %u sharing: %s", i, err.msg);
    uint32_t to[N];
    const uint8_t *cts[N], *sigs[N];
    size_t lens[N], sig_lens[N];
    for (size_t m = 0; m < count; m++) {
      to[m] = out[m].to;
      cts[m] = out[m].ciphertext;
      sigs[m] = out[m].sig;
      lens[m] = XF_SECAGG_SHARE_BYTES;
      sig_lens[m] = XF_SECAGG_SIG_BYTES;
    }
    xf_saphase_shares_msg msg = {to, count, cts, lens, count, sigs, sig_lens, count};
    assert_int_equal(xf_saphase_shares(w->sa, s->id, &msg, w->now, NULL), XF_OK);
    relay(w);
  }
}

/* Site i takes its routed shares, masks its quantized, scaled update and
 * sends it. */
static void send_masked(world *w, uint32_t i) {
  site *s = &w->s[i];
  assert_true(s->routed);
  xf_errctx err = {0};
  for (size_t m = 0; m < s->n_cts; m++)
    if (xf_secagg_guard_receive(s->guard, s->from[m], s->cts[m], s->share_sigs[m], &err) != XF_OK)
      fail_msg("site %u taking %u's shares: %s", i, s->from[m], err.msg);
  if (xf_secagg_guard_routed(s->guard, s->u2, s->n_u2, &err) != XF_OK) fail_msg("%s", err.msg);
  float v[LEN];
  for (size_t k = 0; k < LEN; k++) v[k] = (float)(s->setup.scale * s->x[k]);
  uint32_t *words = xf_mallocarray(LEN, sizeof(uint32_t));
  assert_non_null(words);
  size_t clipped = 0;
  assert_int_equal(xf_codec_quantize_fixed(&s->setup.fixed, v, LEN, 31 + i, words, &clipped, &err),
                   XF_OK);
  assert_int_equal(clipped, 0);
  assert_int_equal(
      xf_secagg_client_mask(xf_secagg_guard_client(s->guard), words, 0, LEN, words, &err), XF_OK);
  assert_int_equal(xf_saphase_masked(w->sa, s->id, &words, LEN, w->now, NULL), XF_OK);
  relay(w);
}

/* Every site asked to sign the survivor set it was shown signs it, or
 * refuses. */
static void sign_all(world *w) {
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &w->s[i];
    if (!s->check || s->gone || s->refused) continue;
    uint8_t sig[XF_SECAGG_SIG_BYTES];
    xf_errctx err = {0};
    if (xf_secagg_guard_sign_survivors(s->guard, s->check_u3, s->n_check_u3, sig, &err) != XF_OK) {
      refuse(w, s, err.msg);
      continue;
    }
    assert_int_equal(xf_saphase_check_sig(w->sa, s->id, sig, sizeof(sig), w->now, NULL), XF_OK);
    relay(w);
  }
}

/* Every site asked to reveal reveals, or refuses (XF_EDENIED only). */
static void reveal_all(world *w) {
  for (uint32_t i = 1; i <= N; i++) {
    site *s = &w->s[i];
    if (!s->unmask || s->gone || s->refused) continue;
    size_t cap = xf_secagg_reveal_max_bytes(&s->setup.params), len = 0;
    uint8_t *msg = malloc(cap);
    assert_non_null(msg);
    xf_errctx err = {0};
    xf_err rc = xf_secagg_guard_unmask(s->guard, s->u3, s->n_u3, s->signers, &s->sigs[0][0],
                                       s->n_signers, msg, cap, &len, &err);
    if (rc != XF_OK) {
      if (rc != XF_EDENIED) fail_msg("site %u: %s (%d)", i, err.msg, (int)rc);
      assert_int_equal(len, 0);
      free(msg);
      refuse(w, s, err.msg);
      continue;
    }
    w->reveal[i] = msg;
    w->reveal_len[i] = len;
    assert_int_equal(xf_saphase_reveal(w->sa, s->id, msg, len, w->now, NULL), XF_OK);
    relay(w);
  }
}

/* How many shares of site `owner`'s secret of `kind` (0: self-mask seed b,
 * 1: masking key) the aggregator received, over every reveal (the layout
 * of crypto/secagg.h: a header, then owner u32, kind u8, share). */
static uint32_t shares_received(const world *w, uint32_t owner, uint8_t kind) {
  uint32_t c = 0;
  for (uint32_t i = 1; i <= N; i++)
    for (size_t at = XF_SECAGG_REVEAL_HEADER_BYTES; w->reveal[i] && at < w->reveal_len[i];
         at += XF_SECAGG_REVEAL_ENTRY_BYTES) {
      const uint8_t *e = w->reveal[i] + at;
      uint32_t o = (uint32_t)e[0] << 24 | (uint32_t)e[1] << 16 | (uint32_t)e[2] << 8 | e[3];
      c += o == owner && e[4] == kind;
    }
  return c;
}

/* The mean the machine unmasked is the plain mean of the sites in `in`
 * (equal weights): each value was rounded by less than one step of the
 * shared scale, and the sum rescaled by n / |in|. */
static void expect_mean(world *w, const bool *in) {
  float *mean = NULL;
  uint64_t weight = 0;
  const uint64_t *surv = NULL;
  size_t n_surv = 0;
  assert_int_equal(xf_saphase_take_mean(w->sa, &mean, &weight, &surv, &n_surv, NULL), XF_OK);
  size_t have = 0;
  for (uint32_t i = 1; i <= N; i++) have += in[i];
  assert_int_equal(n_surv, have);
  double step = w->s[1].setup.fixed.step;
  for (size_t k = 0; k < LEN; k++) {
    double want = 0;
    for (uint32_t i = 1; i <= N; i++) want += in[i] ? (double)w->s[i].x[k] : 0;
    want /= (double)have;
    double tol = (double)have * step * ((double)N / (double)have) + 1e-6;
    if (fabs((double)mean[k] - want) > tol)
      fail_msg("coordinate %zu: %.9g, the plain mean is %.9g", k, (double)mean[k], want);
  }
  xf_free(mean);
}

/* ---- an honest aggregator ------------------------------------------------------------------- */

/* Site 5 vanishes after its shares were routed, site 4 after sending its
 * masked input and before signing U3: the other three sign and reveal, and
 * the mean of sites 1 to 4 comes out (site 4's self-mask from their shares,
 * site 5's pairwise masks from their shares of its key). */
static void honest_aggregator_unmasks_the_mean_despite_dropouts(void **state) {
  (void)state;
  world w;
  world_init(&w, 0.6);
  advertise_all(&w);
  share_all(&w);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_MASKED);
  gone(&w, 5);
  for (uint32_t i = 1; i <= 4; i++) send_masked(&w, i);
  xf_saphase_close(w.sa, w.now);
  relay(&w);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_CHECK);
  gone(&w, 4);
  sign_all(&w);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_UNMASK);
  reveal_all(&w);
  assert_true(w.done);
  assert_false(w.failed);
  for (uint32_t i = 1; i <= 3; i++) assert_false(w.s[i].refused);
  /* The masking key of the site that left before masking, never its b. */
  assert_int_equal(shares_received(&w, 5, 1), 3);
  assert_int_equal(shares_received(&w, 5, 0), 0);
  assert_int_equal(shares_received(&w, 4, 1), 0);
  bool in[N + 1] = {false, true, true, true, true, false};
  expect_mean(&w, in);
  world_free(&w);
}

/* ---- an aggregator that lies about a dropout --------------------------------------------------- */

/* The attack the consistency round exists for, on the semi-honest clients
 * (crypto/secagg.h alone) with t = 2 of 5: the aggregator tells sites 1
 * and 2 that site 3 dropped (they reveal its masking key and everyone
 * else's self-mask seed) and sites 3 and 4 that nobody did (they reveal
 * site 3's self-mask seed). Each site reveals one secret of site 3, as the
 * client allows; together they give both, and the difference of the two
 * sums it can now unmask is site 3's input, exactly. */
static void semi_honest_clients_let_a_lying_aggregator_unmask_one_site(void **state) {
  (void)state;
  xf_secagg_params p = {.n = N, .threshold = 2, .bits = 16, .length = LEN, .degree = N - 1};
  for (size_t b = 0; b < 32; b++) p.graph_seed[b] = (uint8_t)(7 * b + 1);
  xf_secagg_client *c[N + 1] = {NULL};
  xf_secagg_server *all = NULL, *without = NULL;
  assert_int_equal(xf_secagg_server_new(&p, &all, NULL), XF_OK);
  assert_int_equal(xf_secagg_server_new(&p, &without, NULL), XF_OK);
  uint8_t adverts[N * XF_SECAGG_ADVERT_BYTES];
  for (uint32_t i = 1; i <= N; i++) {
    assert_int_equal(xf_secagg_client_new(&p, i, &c[i], NULL), XF_OK);
    xf_secagg_client_advertise(c[i], adverts + (i - 1) * XF_SECAGG_ADVERT_BYTES);
    const uint8_t *adv = adverts + (i - 1) * XF_SECAGG_ADVERT_BYTES;
    assert_int_equal(xf_secagg_server_advert(all, i, adv, NULL), XF_OK);
    assert_int_equal(xf_secagg_server_advert(without, i, adv, NULL), XF_OK);
  }
  xf_secagg_share_msg msgs[N + 1][N];
  size_t counts[N + 1];
  for (uint32_t i = 1; i <= N; i++)
    assert_int_equal(xf_secagg_client_share(c[i], adverts, msgs[i], N, &counts[i], NULL), XF_OK);
  for (uint32_t i = 1; i <= N; i++) {
    for (size_t m = 0; m < counts[i]; m++)
      assert_int_equal(
          xf_secagg_client_receive(c[msgs[i][m].to], i, msgs[i][m].ciphertext, NULL), XF_OK);
    assert_int_equal(xf_secagg_server_shared(all, i, NULL), XF_OK);
    assert_int_equal(xf_secagg_server_shared(without, i, NULL), XF_OK);
  }
  uint32_t u2[N];
  size_t n_u2;
  assert_int_equal(xf_secagg_server_routed(all, u2, &n_u2, NULL), XF_OK);
  assert_int_equal(xf_secagg_server_routed(without, u2, &n_u2, NULL), XF_OK);
  uint32_t x[N + 1][LEN], y[LEN];
  for (uint32_t i = 1; i <= N; i++) {
    assert_int_equal(xf_secagg_client_routed(c[i], u2, n_u2, NULL), XF_OK);
    for (size_t k = 0; k < LEN; k++) x[i][k] = (uint32_t)(977 * i + 31 * k) & 0xffff;
    assert_int_equal(xf_secagg_client_mask(c[i], x[i], 0, LEN, y, NULL), XF_OK);
    assert_int_equal(xf_secagg_server_add_masked(all, i, 0, LEN, y, NULL), XF_OK);
    if (i != TARGET)
      assert_int_equal(xf_secagg_server_add_masked(without, i, 0, LEN, y, NULL), XF_OK);
  }
  uint32_t u3[N], u3a[N];
  size_t n_u3, n_u3a;
  assert_int_equal(xf_secagg_server_survivors(all, u3, &n_u3, NULL), XF_OK);
  assert_int_equal(xf_secagg_server_survivors(without, u3a, &n_u3a, NULL), XF_OK);
  assert_int_equal(n_u3a, N - 1);
  uint8_t msg[4096];
  size_t len;
  for (uint32_t i = 1; i <= 2; i++) {
    assert_int_equal(xf_secagg_client_unmask(c[i], u3a, n_u3a, msg, sizeof(msg), &len, NULL),
                     XF_OK);
    assert_int_equal(xf_secagg_server_add_reveal(without, i, msg, len, NULL), XF_OK);
  }
  for (uint32_t i = 3; i <= 4; i++) {
    assert_int_equal(xf_secagg_client_unmask(c[i], u3, n_u3, msg, sizeof(msg), &len, NULL),
                     XF_OK);
    assert_int_equal(xf_secagg_server_add_reveal(all, i, msg, len, NULL), XF_OK);
  }
  uint32_t sum_all[LEN], sum_without[LEN];
  assert_int_equal(xf_secagg_server_finish(all, sum_all, NULL), XF_OK);
  assert_int_equal(xf_secagg_server_finish(without, sum_without, NULL), XF_OK);
  for (size_t k = 0; k < LEN; k++)
    assert_int_equal((sum_all[k] - sum_without[k]) & 0xffff, x[TARGET][k]);
  for (uint32_t i = 1; i <= N; i++) xf_secagg_client_free(c[i]);
  xf_secagg_server_free(all);
  xf_secagg_server_free(without);
}

/* The same lie against the sites as they run (t = 3 of 5, the least a
 * cohort of 5 may have): sites 1 and 2 are shown a survivor set without
 * site 3, sites 3, 4 and 5 the true one, and each signs what it was shown.
 * Every signature is relayed to everyone. Sites 1 and 2 find two valid
 * signatures of their set, not three: they refuse to reveal, so not one
 * share of site 3's masking key leaves a site. Sites 3, 4 and 5 hold three
 * of theirs and reveal self-mask seeds: the aggregator learns the sum of
 * all five and nothing else. */
static void lie_that_a_site_dropped_is_refused_and_gives_no_share_of_its_key(void **state) {
  (void)state;
  world w;
  world_init(&w, 0.6);
  assert_int_equal(xf_saphase_params(w.sa)->threshold, 3);
  static const uint32_t without_target[4] = {1, 2, 4, 5};
  w.lie = without_target;
  w.n_lie = 4;
  w.lied_to[1] = w.lied_to[2] = true;
  advertise_all(&w);
  share_all(&w);
  for (uint32_t i = 1; i <= N; i++) send_masked(&w, i);
  xf_saphase_close(w.sa, w.now);
  relay(&w);
  sign_all(&w);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_UNMASK);
  reveal_all(&w);
  for (uint32_t i = 1; i <= 2; i++) {
    assert_true(w.s[i].refused);
    assert_null(w.reveal[i]);
    if (!strstr(w.s[i].refusal, "refusing to reveal: 2 of the 5 signatures relayed are valid "
                                "signatures of this survivor set by its members, and 3 are "
                                "needed; signer 3 (eu-c) is not a member of the survivor set"))
      fail_msg("site %u: %s", i, w.s[i].refusal);
  }
  for (uint32_t i = 3; i <= N; i++) assert_false(w.s[i].refused);
  assert_int_equal(shares_received(&w, TARGET, 1), 0);
  assert_int_equal(shares_received(&w, TARGET, 0), 3);
  /* Asked again, for the set without site 3, the sites that revealed its
   * self-mask share refuse: they signed one survivor set this round. */
  for (uint32_t i = 4; i <= N; i++) {
    uint8_t sig[XF_SECAGG_SIG_BYTES], out[2048];
    size_t len = 7;
    xf_errctx err = {0};
    assert_int_equal(xf_secagg_guard_sign_survivors(w.s[i].guard, without_target, 4, sig, &err),
                     XF_EDENIED);
    assert_int_equal(xf_secagg_guard_unmask(w.s[i].guard, without_target, 4, w.s[i].signers,
                                            &w.s[i].sigs[0][0], w.s[i].n_signers, out,
                                            sizeof(out), &len, &err),
                     XF_EDENIED);
    assert_int_equal(len, 0);
  }
  /* The machine unmasks what an honest aggregator would: the sum of all. */
  assert_true(w.done);
  bool in[N + 1] = {false, true, true, true, true, true};
  expect_mean(&w, in);
  world_free(&w);
}

/* With t = 4 of 5 the same lie leaves no set with t signatures: every site
 * refuses, nothing is revealed, and the attempt fails naming the refusals.
 * So does showing every site a survivor set of its own. */
static void lies_that_leave_no_set_with_t_signatures_fail_the_round_cleanly(void **state) {
  (void)state;
  static const uint32_t without_target[4] = {1, 2, 4, 5};
  world w;
  world_init(&w, 0.8);
  assert_int_equal(xf_saphase_params(w.sa)->threshold, 4);
  w.lie = without_target;
  w.n_lie = 4;
  w.lied_to[1] = w.lied_to[2] = true;
  advertise_all(&w);
  share_all(&w);
  for (uint32_t i = 1; i <= N; i++) send_masked(&w, i);
  xf_saphase_close(w.sa, w.now);
  relay(&w);
  sign_all(&w);
  reveal_all(&w);
  for (uint32_t i = 1; i <= N; i++) {
    assert_true(w.s[i].refused);
    assert_null(w.reveal[i]);
    assert_non_null(strstr(w.s[i].refusal, i <= 2 ? "2 of the 5 signatures" : "3 of the 5"));
  }
  assert_true(w.failed);
  assert_false(w.done);
  assert_int_equal(xf_saphase_get_state(w.sa), XF_SAPHASE_FAILED);
  if (!strstr(w.why, "cannot recover site 1's self-mask seed: 0 of the 4 shares needed were "
                     "revealed; the round fails; 5 sites refused to go on (site 500 first)"))
    fail_msg("failure: %s", w.why);
  world_free(&w);

  /* Every site is shown a different set (all but one other site): no set
   * has more than its one signature. */
  world_init(&w, 0.6);
  advertise_all(&w);
  share_all(&w);
  for (uint32_t i = 1; i <= N; i++) send_masked(&w, i);
  xf_saphase_close(w.sa, w.now);
  relay(&w);
  uint32_t own[N + 1][N - 1];
  for (uint32_t i = 1; i <= N; i++) {
    uint32_t left_out = i % N + 1;
    size_t m = 0;
    for (uint32_t j = 1; j <= N; j++)
      if (j != left_out) own[i][m++] = j;
    w.s[i].n_check_u3 = N - 1;
    memcpy(w.s[i].check_u3, own[i], sizeof(own[i]));
  }
  sign_all(&w);
  for (uint32_t i = 1; i <= N; i++) {
    /* The unmask request carries the set each was shown. */
    w.s[i].n_u3 = N - 1;
    memcpy(w.s[i].u3, own[i], sizeof(own[i]));
  }
  reveal_all(&w);
  for (uint32_t i = 1; i <= N; i++) {
    assert_true(w.s[i].refused);
    assert_non_null(strstr(w.s[i].refusal, "refusing to reveal: 1 of the 5 signatures"));
  }
  assert_true(w.failed);
  assert_non_null(strstr(w.why, "5 sites refused to go on"));
  world_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(honest_aggregator_unmasks_the_mean_despite_dropouts),
      cmocka_unit_test(semi_honest_clients_let_a_lying_aggregator_unmask_one_site),
      cmocka_unit_test(lie_that_a_site_dropped_is_refused_and_gives_no_share_of_its_key),
      cmocka_unit_test(lies_that_leave_no_set_with_t_signatures_fail_the_round_cleanly),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
