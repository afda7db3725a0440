/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the secure-aggregation messages sites send their
 * aggregator: SecAggAdvert, SecAggShares, SecAggCheckSig, SecAggRefusal and
 * SecAggReveal, and the masked input (a TensorChunk whose data is the whole
 * masked UPDATE stream, as coordinator/intake.c holds it at the stream's
 * end), from any of the cohort's sites (the high 4 bits of a record's type;
 * tests/fuzz/fuzz_msgs.h) or from one outside it. Two more kinds are the
 * aggregator's own events, carried in a Heartbeat's body: the round closes
 * (xf_saphase_close), and the clock moves on by `seq` modulo 64 seconds
 * (xf_saphase_tick).
 *
 * The messages become the machine's events as coordinator/host.c and
 * coordinator/jobmachine.c pass them, through the same coordinator/sawire.h (coordinator/saphase.h, the round of
 * tests/fuzz/fuzz_secagg.h); the masked bytes are unpacked as the intake
 * unpacks them (xf_codec_unpack_bits).
 *
 * Checked: a site outside the cohort changes nothing; a refused message
 * queues DROP for its site with the reason, and nothing once the attempt
 * is DONE or FAILED; every action is well formed (the cohort's adverts,
 * signatures and certificates in whole, shares and signatures in pairs,
 * survivor sets ascending and within the cohort, reasons where due); the
 * phases only move forward; a DONE attempt hands over a finite mean once,
 * over at least t survivors. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "coordinator/sawire.h"
#include "fuzz_msgs.h"
#include "fuzz_secagg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const unsigned kinds[] = {
    XFED__ENVELOPE__BODY_SECAGG_ADVERT,    XFED__ENVELOPE__BODY_SECAGG_SHARES,
    XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG, XFED__ENVELOPE__BODY_SECAGG_REFUSAL,
    XFED__ENVELOPE__BODY_SECAGG_REVEAL,    XFED__ENVELOPE__BODY_TENSOR_CHUNK,
    XFED__ENVELOPE__BODY_HEARTBEAT, /* the round closes */
    XFED__ENVELOPE__BODY_HEARTBEAT, /* the clock moves on */
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))
enum { K_ADVERT, K_SHARES, K_CHECK_SIG, K_REFUSAL, K_REVEAL, K_MASKED, K_CLOSE, K_TICK };

static bool ascending_in_cohort(const uint32_t *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (v[i] < 1 || v[i] > FZ_SA_N || (i && v[i] <= v[i - 1])) return false;
  return true;
}

static bool in_cohort(uint64_t site) {
  for (unsigned i = 0; i < FZ_SA_N; i++)
    if (fz_sa_site(i) == site) return true;
  return false;
}

/* Checks the actions of the last event; true when one says DROP for site. */
static bool check_actions(xf_saphase *sa, uint64_t site) {
  size_t n;
  const xf_saphase_action *acts = xf_saphase_actions(sa, &n);
  bool dropped = false;
  for (size_t i = 0; i < n; i++) {
    const xf_saphase_action *a = &acts[i];
    switch (a->kind) {
    case XF_SAPHASE_ACT_SEND_KEYS:
      if (!in_cohort(a->site) || a->adverts_len != (size_t)FZ_SA_N * XF_SECAGG_ADVERT_BYTES ||
          !a->adverts || !a->sigs || !a->cert_lens)
        abort();
      {
        size_t total = 0;
        for (unsigned k = 0; k < FZ_SA_N; k++) total += a->cert_lens[k];
        if (total != a->certs_len || (total && !a->certs)) abort();
      }
      break;
    case XF_SAPHASE_ACT_SEND_ROUTED:
      if (!in_cohort(a->site) || !ascending_in_cohort(a->u2, a->n_u2)) abort();
      for (size_t k = 0; k < a->n_cts; k++)
        if (!a->cts[k] || a->from[k] < 1 || a->from[k] > FZ_SA_N) abort();
      if (a->n_cts && !a->sigs) abort();
      break;
    case XF_SAPHASE_ACT_SEND_CHECK:
      if (!in_cohort(a->site) || !ascending_in_cohort(a->u3, a->n_u3)) abort();
      break;
    case XF_SAPHASE_ACT_SEND_UNMASK:
      if (!in_cohort(a->site) || !ascending_in_cohort(a->u3, a->n_u3)) abort();
      if (a->n_signers < xf_saphase_params(sa)->threshold || !a->sigs) abort();
      for (size_t k = 0; k < a->n_signers; k++)
        if (a->signers[k] < 1 || a->signers[k] > FZ_SA_N) abort();
      break;
    case XF_SAPHASE_ACT_DROP:
      if (!in_cohort(a->site) || !a->why[0]) abort();
      if (a->site == site) dropped = true;
      break;
    case XF_SAPHASE_ACT_DONE:
      if (xf_saphase_get_state(sa) != XF_SAPHASE_DONE) abort();
      break;
    case XF_SAPHASE_ACT_FAILED:
      if (!a->why[0] || xf_saphase_get_state(sa) != XF_SAPHASE_FAILED) abort();
      break;
    default: abort();
    }
  }
  return dropped;
}

static void taken(xf_saphase *sa, uint64_t site, xf_saphase_state before, xf_err rc,
                  const xf_errctx *err) {
  bool dropped = check_actions(sa, site);
  if (rc == XF_OK) return;
  if (err->code != rc || !err->msg[0]) abort();
  if (rc == XF_ENOENT) {
    size_t n;
    (void)xf_saphase_actions(sa, &n);
    if (in_cohort(site) || n != 0) abort();
    return;
  }
  if (before == XF_SAPHASE_DONE || before == XF_SAPHASE_FAILED) {
    size_t n;
    (void)xf_saphase_actions(sa, &n);
    if (rc != XF_EINVAL || n != 0) abort();
    return;
  }
  if (!dropped) abort(); /* a refused message drops its site */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_begin(3);
  uint64_t sites[FZ_SA_N], weights[FZ_SA_N];
  xf_saphase_config cfg = fz_sa_config(sites, weights);
  double now = 100.0;
  xf_saphase *sa = NULL;
  if (xf_saphase_create(&cfg, now, &sa, NULL) != XF_OK) abort();
  fz_input in = {data, size};
  fz_record r;
  bool mean_taken = false;
  while (fz_next(&in, N_KINDS, &r)) {
    Xfed__Envelope *env = fz_decode(kinds[r.kind], r.body, r.len);
    if (!env) continue;
    /* Peer 15 is a site outside the cohort. */
    uint64_t site = r.peer == 15 ? xf_admit_site_id("s99") : sites[r.peer % FZ_SA_N];
    now += 0.01;
    xf_saphase_state before = xf_saphase_get_state(sa);
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = XF_OK;
    switch (r.kind) {
    case K_ADVERT: {
      xf_saphase_keys keys = xf_sawire_keys(env->secagg_advert);
      rc = xf_saphase_advert(sa, site, &keys, now, &err);
      taken(sa, site, before, rc, &err);
      break;
    }
    case K_SHARES: {
      /* As coordinator/host.c passes them. */
      xf_saphase_shares_msg msg;
      if (xf_sawire_shares(env->secagg_shares, &msg, &err) != XF_OK) abort();
      rc = xf_saphase_shares(sa, site, &msg, now, &err);
      taken(sa, site, before, rc, &err);
      xf_sawire_shares_free(&msg);
      break;
    }
    case K_CHECK_SIG: {
      const Xfed__SecAggCheckSig *c = env->secagg_check_sig;
      rc = xf_saphase_check_sig(sa, site, c->signature.data, c->signature.len, now, &err);
      taken(sa, site, before, rc, &err);
      break;
    }
    case K_REFUSAL:
      /* The site leaves the round (coordinator/jobmachine.c). */
      xf_saphase_gone(sa, site, now);
      check_actions(sa, 0);
      break;
    case K_REVEAL: {
      const Xfed__SecAggReveal *v = env->secagg_reveal;
      rc = xf_saphase_reveal(sa, site, v->reveal.data, v->reveal.len, now, &err);
      taken(sa, site, before, rc, &err);
      break;
    }
    case K_MASKED: {
      const ProtobufCBinaryData *b = &env->tensor_chunk->data;
      size_t len = (size_t)xf_saphase_params(sa)->length;
      uint32_t *words = xf_mallocarray(len, sizeof(uint32_t));
      if (!words) abort();
      if (b->len != xf_codec_packed_bytes(len, FZ_SA_BITS) ||
          xf_codec_unpack_bits(b->data, b->len, len, FZ_SA_BITS, words, &err) != XF_OK) {
        xf_free(words); /* the stream is refused before it reaches the machine */
        break;
      }
      rc = xf_saphase_masked(sa, site, &words, len, now, &err);
      if (rc == XF_OK && words) abort(); /* taken over */
      xf_free(words);
      taken(sa, site, before, rc, &err);
      break;
    }
    case K_CLOSE:
      xf_saphase_close(sa, now);
      check_actions(sa, 0);
      break;
    case K_TICK:
      now += (double)(env->heartbeat->seq % 64);
      xf_saphase_tick(sa, now);
      check_actions(sa, 0);
      break;
    default: abort();
    }
    xf_saphase_state after = xf_saphase_get_state(sa);
    if (after < before) abort(); /* phases only move on */
    if (after == XF_SAPHASE_FAILED && !xf_saphase_failure(sa)[0]) abort();
    if (after == XF_SAPHASE_DONE && !mean_taken) {
      float *mean = NULL;
      uint64_t weight = 0;
      const uint64_t *survivors = NULL;
      size_t n = 0;
      if (xf_saphase_take_mean(sa, &mean, &weight, &survivors, &n, &err) != XF_OK) abort();
      if (n < xf_saphase_params(sa)->threshold || n > FZ_SA_N || weight == 0) abort();
      for (size_t i = 0; i < n; i++)
        if (!in_cohort(survivors[i])) abort();
      for (size_t i = 0; i < FZ_SA_PARAMS; i++)
        if (!isfinite(mean[i])) abort();
      xf_free(mean);
      mean_taken = true;
      if (xf_saphase_take_mean(sa, &mean, &weight, &survivors, &n, &err) != XF_EINVAL) abort();
    }
    xf_envelope_free(env);
  }
  xf_saphase_free(sa);
  return 0;
}
