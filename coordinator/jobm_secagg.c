/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine's secure aggregation among the sites that report straight
 * to this aggregator (coordinator/jobm_internal.h): starting
 * coordinator/saphase.h's phases at GO, its messages as the machine's
 * actions, and the direct sites' secure-aggregation events. */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "base/alloc.h"
#include "base/text.h"
#include "coordinator/jobm_internal.h"
#include "job/jobprivacy.h"

bool xf__jm_sa_start(xf_jobm *m, const uint64_t *sites, size_t n, double now) {
  uint64_t *w = xf_mallocarray(n ? n : 1, sizeof(uint64_t));
  if (!w) {
    m->oom = true;
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    const jm_site *s = xf__jm_plan_site(m, sites[i]);
    w[i] = s ? s->records : 1;
  }
  uint8_t graph_seed[32];
  randombytes_buf(graph_seed, sizeof(graph_seed));
  uint64_t subset_seed;
  randombytes_buf(&subset_seed, sizeof(subset_seed));
  double phase = m->round_spec.round_deadline_s / 4;
  xf_saphase_config cfg = {
      .n = (uint32_t)n,
      .sites = sites,
      .weights = xf_job_noise_in_sum(&m->spec) ? NULL : w,
      .threshold = m->spec.secure_aggregation.threshold,
      .bits = m->spec.secure_aggregation.bits,
      .n_params = m->n_params,
      .clip = m->spec.privacy.clip,
      .noise_multiplier = m->spec.privacy.mode == XF_PRIVACY_DISTRIBUTED
                              ? m->spec.privacy.noise_multiplier
                              : 0,
      .quant_bits = m->spec.compression.uplink.quant_bits,
      .topk_fraction = m->spec.compression.uplink.topk_fraction,
      .phase_s = phase < XF_SAPHASE_PHASE_MAX_S ? phase : XF_SAPHASE_PHASE_MAX_S,
      .graph_seed = graph_seed,
      .subset_seed = subset_seed};
  xf_errctx err = {0};
  xf_err rc = xf_saphase_create(&cfg, now, &m->sa, &err);
  xf_free(w);
  sodium_memzero(graph_seed, sizeof(graph_seed));
  if (rc != XF_OK) {
    char why[600];
    snprintf(why, sizeof(why), "secure aggregation cannot run: %s", err.msg);
    xf__jm_step(m, XF_JOBM_EV_FAIL, &(xf__jm_args){.now = now, .text = why});
    return false;
  }
  return true;
}

/* ---- the phases' messages as actions ------------------------------------------------------------ */

/* Where one call's SEND_KEYS copied the keys they all carry. */
typedef struct sa_keys_at {
  size_t keys, sigs, certs, lens;
} sa_keys_at;

static void send_keys(xf_jobm *m, const xf_saphase_action *a, sa_keys_at *at) {
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_SA_KEYS, a->site);
  size_t members = a->adverts_len / XF_SECAGG_ADVERT_BYTES;
  if (at->keys == SIZE_MAX) {
    at->keys = xf__jm_put_bytes(m, a->adverts, a->adverts_len);
    at->sigs = xf__jm_put_bytes(m, a->sigs, members * XF_SECAGG_SIG_BYTES);
    at->certs = xf__jm_put_bytes(m, a->certs, a->certs_len);
    at->lens = xf__jm_put_bytes(m, a->cert_lens, members * sizeof(uint32_t));
  }
  jm_off *off = xf__jm_off_of(m, o);
  if (at->keys == SIZE_MAX || at->sigs == SIZE_MAX || at->certs == SIZE_MAX ||
      at->lens == SIZE_MAX || !off)
    return;
  off->blob = at->keys;
  o->blob_len = a->adverts_len;
  off->sigs = at->sigs;
  o->n_sigs = members;
  off->certs = at->certs;
  o->certs_len = a->certs_len;
  off->cert_lens = at->lens;
}

static void send_routed(xf_jobm *m, const xf_saphase_action *a) {
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_SA_ROUTED, a->site);
  jm_off *off = xf__jm_off_of(m, o);
  size_t u = xf__jm_put_bytes(m, a->u2, a->n_u2 * sizeof(uint32_t));
  size_t from = xf__jm_put_bytes(m, a->from, a->n_cts * sizeof(uint32_t));
  size_t sigs = xf__jm_put_bytes(m, a->sigs, a->n_cts * XF_SECAGG_SIG_BYTES);
  size_t blob = xf__jm_put_bytes(m, NULL, 0);
  for (size_t k = 0; k < a->n_cts && blob != SIZE_MAX; k++) {
    size_t at = xf__jm_put_bytes(m, a->cts[k], XF_SECAGG_SHARE_BYTES);
    if (at == SIZE_MAX) blob = SIZE_MAX;
    else if (k == 0) blob = at;
  }
  if (!off || u == SIZE_MAX || from == SIZE_MAX || sigs == SIZE_MAX || blob == SIZE_MAX) return;
  off->u = u;
  off->from = from;
  off->sigs = sigs;
  off->blob = blob;
  o->n_u = a->n_u2;
  o->n_from = a->n_cts;
  o->n_sigs = a->n_cts;
  o->blob_len = a->n_cts * XF_SECAGG_SHARE_BYTES;
}

static void send_check(xf_jobm *m, const xf_saphase_action *a) {
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_SA_CHECK, a->site);
  size_t u = xf__jm_put_bytes(m, a->u3, a->n_u3 * sizeof(uint32_t));
  jm_off *off = xf__jm_off_of(m, o);
  if (!off || u == SIZE_MAX) return;
  off->u = u;
  o->n_u = a->n_u3;
}

static void send_unmask(xf_jobm *m, const xf_saphase_action *a) {
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_SA_UNMASK, a->site);
  size_t u = xf__jm_put_bytes(m, a->u3, a->n_u3 * sizeof(uint32_t));
  size_t from = xf__jm_put_bytes(m, a->signers, a->n_signers * sizeof(uint32_t));
  size_t sigs = xf__jm_put_bytes(m, a->sigs, a->n_signers * XF_SECAGG_SIG_BYTES);
  jm_off *off = xf__jm_off_of(m, o);
  if (!off || u == SIZE_MAX || from == SIZE_MAX || sigs == SIZE_MAX) return;
  off->u = u;
  o->n_u = a->n_u3;
  off->from = from;
  o->n_from = a->n_signers;
  off->sigs = sigs;
  o->n_sigs = a->n_signers;
}

/* ---- what changes the round ------------------------------------------------------------------- */

/* The direct sites whose update is in: their masked inputs are in the sum. */
static uint32_t reported_direct(const xf_jobm *m) {
  uint32_t n = 0;
  for (size_t k = 0; k < m->n_carriers; k++)
    if (!m->carriers[k].regional && m->carriers[k].state == C_REPORTED) n++;
  return n;
}

/* A member is out: its carrier is told, and before the unmasking its site
 * leaves the round (once it began, the sum goes on without it). */
static void sa_dropped(xf_jobm *m, const xf_saphase_action *a, double now) {
  jm_carrier *c = xf__jm_carrier_holding(m, a->site);
  char why[300];
  snprintf(why, sizeof(why), "secure aggregation: %s", a->why);
  if (c && c->state != C_GONE && c->state != C_REPORTED) {
    xf_jobm_action *o = xf__jm_push(m, XF_JOBM_CANCEL, c->id);
    xf__jm_note(o, "%s", why);
    c->state = C_GONE;
  }
  if (m->phase == XF_JOBM_UNMASKING) return;
  xf__jm_drop_site(m, a->site, why, now);
}

/* The commit once the sum is out (lost: the reported sites not in it), or
 * another attempt when too few are left. */
static void commit_unmasked(xf_jobm *m, uint32_t lost, const char *why, double now) {
  m->lost_sites = lost;
  xf_saphase_free(m->sa);
  m->sa = NULL;
  if (xf_round_reported(m->r) - m->lost_sites < m->round_spec.min_sites)
    xf__jm_commit_failed(m, why, now);
  else
    xf__jm_step(m, XF_JOBM_EV_COMMIT, &(xf__jm_args){.now = now});
}

/* The unmasking is done: the direct sites that reported but are not among
 * the survivors are not in the sum. */
static void sa_unmasked(xf_jobm *m, double now) {
  const uint64_t *surv;
  size_t ns;
  xf_errctx e = {0};
  xf_free(m->sa_mean);
  m->sa_mean = NULL;
  if (xf_saphase_take_mean(m->sa, &m->sa_mean, &m->sa_weight, &surv, &ns, &e) != XF_OK) {
    xf__jm_commit_failed(m, e.msg, now);
    return;
  }
  uint32_t direct = reported_direct(m);
  m->sa_sites = (uint32_t)ns;
  commit_unmasked(m, direct > ns ? direct - (uint32_t)ns : 0,
                  "too few sites survived secure aggregation", now);
}

/* Copies the phases' actions (a drop below calls the phases again), sends
 * what they send, then applies what changes the round. */
void xf__jm_run_sa(xf_jobm *m, double now) {
  size_t n;
  const xf_saphase_action *sa = xf_saphase_actions(m->sa, &n);
  if (!n) return;
  xf_saphase_action *list = xf_mallocarray(n, sizeof(*list));
  if (!list) {
    m->oom = true;
    return;
  }
  memcpy(list, sa, n * sizeof(*list));
  sa_keys_at keys = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
  for (size_t i = 0; i < n; i++) {
    const xf_saphase_action *a = &list[i];
    switch (a->kind) {
    case XF_SAPHASE_ACT_SEND_KEYS: send_keys(m, a, &keys); break;
    case XF_SAPHASE_ACT_SEND_ROUTED: send_routed(m, a); break;
    case XF_SAPHASE_ACT_SEND_CHECK: send_check(m, a); break;
    case XF_SAPHASE_ACT_SEND_UNMASK: send_unmask(m, a); break;
    default: break;
    }
  }
  for (size_t i = 0; i < n; i++) {
    const xf_saphase_action *a = &list[i];
    bool unmasking = m->phase == XF_JOBM_UNMASKING;
    if (a->kind == XF_SAPHASE_ACT_DROP) {
      sa_dropped(m, a, now);
    } else if (a->kind == XF_SAPHASE_ACT_DONE && unmasking) {
      sa_unmasked(m, now);
      break;
    } else if (a->kind == XF_SAPHASE_ACT_FAILED && unmasking) {
      /* The direct sites' updates are lost; the regional ones may do. */
      char why[300];
      snprintf(why, sizeof(why), "%s", a->why);
      commit_unmasked(m, reported_direct(m), why, now);
      break;
    } else if (a->kind == XF_SAPHASE_ACT_FAILED) {
      char why[400];
      snprintf(why, sizeof(why), "secure aggregation failed: %s", a->why);
      xf_text_append(m->refusals, sizeof(m->refusals), "%s", why);
    }
  }
  xf_free(list);
}

/* ---- the direct sites' secure-aggregation events (TRAINING, UNMASKING) ----------------------- */

xf_err xf__jm_on_sa_advert(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  (void)err;
  xf_errctx e = {0};
  if (m->sa && xf_saphase_advert(m->sa, a->site, a->keys, a->now, &e) != XF_ENOENT)
    xf__jm_run_sa(m, a->now);
  return XF_OK;
}

xf_err xf__jm_on_sa_shares(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  (void)err;
  xf_errctx e = {0};
  if (m->sa && xf_saphase_shares(m->sa, a->site, a->shares, a->now, &e) != XF_ENOENT)
    xf__jm_run_sa(m, a->now);
  return XF_OK;
}

xf_err xf__jm_on_sa_check_sig(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err) {
  (void)next;
  (void)err;
  xf_errctx e = {0};
  if (m->sa &&
      xf_saphase_check_sig(m->sa, a->site, a->bytes, a->len, a->now, &e) != XF_ENOENT)
    xf__jm_run_sa(m, a->now);
  return XF_OK;
}

xf_err xf__jm_on_sa_reveal(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  (void)err;
  xf_errctx e = {0};
  if (m->sa && xf_saphase_reveal(m->sa, a->site, a->bytes, a->len, a->now, &e) != XF_ENOENT)
    xf__jm_run_sa(m, a->now);
  return XF_OK;
}

xf_err xf__jm_on_sa_refused(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                            xf_errctx *err) {
  (void)next;
  (void)err;
  uint64_t site = a->site;
  jm_carrier *c = xf__jm_carrier_of(m, site);
  if (!m->sa || !c || c->regional || !xf_saphase_index(m->sa, site)) return XF_OK;
  char text[XF_JOBM_MSG_MAX / 2];
  snprintf(text, sizeof(text), "secure aggregation: refused by the site: %s",
           a->text && *a->text ? a->text : "no reason given");
  bool unmasking = m->phase == XF_JOBM_UNMASKING;
  if (unmasking) xf_text_append(m->refusals, sizeof(m->refusals), "%s", text);
  /* What its leaving moves on (keys, routing, the reveals) goes out first. */
  xf_saphase_refused(m->sa, site, a->now);
  xf__jm_run_sa(m, a->now);
  if (unmasking) return XF_OK;
  if (c->state != C_GONE && c->state != C_REPORTED) {
    xf_jobm_action *o = xf__jm_push(m, XF_JOBM_CANCEL, c->id);
    xf__jm_note(o, "%s", text);
    c->state = C_GONE;
  }
  xf__jm_drop_site(m, site, text, a->now);
  return XF_OK;
}

/* A masked input nobody asked for (the answer outside TRAINING too). */
xf_err xf__jm_masked_unexpected(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                xf_errctx *err) {
  (void)next;
  (void)err;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_DISCARD, a->site);
  xf__jm_note(o, "no masked input of this job is expected from it now");
  return XF_OK;
}

xf_err xf__jm_on_sa_masked(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  uint64_t site = a->site;
  jm_carrier *c = xf__jm_carrier_of(m, site);
  if (!m->sa || !c || c->regional || c->state != C_GO)
    return xf__jm_masked_unexpected(m, a, next, err);
  xf_errctx e = {0};
  xf_err rc = xf_saphase_masked(m->sa, site, a->words, a->n_words, a->now, &e);
  if (rc != XF_OK) {
    xf__jm_run_sa(m, a->now);
    if (rc == XF_ENOENT) {
      xf_jobm_action *o = xf__jm_push(m, XF_JOBM_DISCARD, site);
      xf__jm_note(o, "%s", e.msg);
    }
    return XF_OK;
  }
  xf__jm_report_sites(m, c, &site, 1, a->weight, a->now);
  return XF_OK;
}
