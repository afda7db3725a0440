/* SPDX-License-Identifier: Apache-2.0 */
/* Secure aggregation in a round: the aggregator's side of SecAgg+ (keys,
 * share routing, masked inputs, unmasking) around the round machine, for the
 * global coordinator and for a regional aggregator's sub-round alike.
 * docs/secure-aggregation.md describes the protocol. */
#include <inttypes.h>
#include <math.h>
#include <sodium.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"

/* Per-index progress. */
enum { SA_ADVERTISED = 1, SA_SHARED = 2, SA_MASKED = 4, SA_REVEALED = 8 };

/* How long each key phase and the unmasking may take: a site that has not
 * answered by then goes on without (it is dropped from the round). */
#define XF__SA_PHASE_MAX_S 30.0

void xf__sa_free(xf__sa *sa) {
  if (!sa) return;
  xf_secagg_server_free(sa->server);
  xf_free(sa->ids);
  xf_free(sa->scale);
  xf_free(sa->weight);
  xf_free(sa->state);
  for (uint32_t i = 0; sa->inputs && i < sa->p.n; i++) xf_free(sa->inputs[i]);
  xf_free(sa->inputs);
  xf_free(sa->shares);
  xf_free(sa->u3);
  xf_free(sa->subset);
  xf_free(sa->mean);
  xf_free(sa);
}

uint32_t xf__sa_index(const xf__sa *sa, uint64_t site) {
  for (uint32_t i = 0; sa && i < sa->p.n; i++)
    if (sa->ids[i] == site) return i + 1;
  return 0;
}

static xf__site *site_of(xf__coord *co, uint64_t id) {
  for (xf__site *s = co->sites; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

/* Whether the round still counts on the cohort site. */
static bool alive(const xf__job *job, uint64_t id) {
  xf_participant_state st;
  uint64_t smp;
  const char *why;
  return xf_round_site(job->round, id, &st, &smp, &why) == XF_OK &&
         (st == XF_PARTICIPANT_INVITED || st == XF_PARTICIPANT_REPORTING ||
          st == XF_PARTICIPANT_REPORTED);
}

static double phase_span(const xf__job *job) {
  double s = job->spec.round_deadline_s / 4;
  return s < XF__SA_PHASE_MAX_S ? s : XF__SA_PHASE_MAX_S;
}

xf_err xf__sa_start(xf__coord *co, xf__job *job, xf_errctx *err) {
  xf__sa_free(job->sa);
  job->sa = NULL;
  size_t n;
  const uint64_t *cohort = xf_round_cohort(job->round, &n);
  const xf_job_secagg *cfg = &job->spec.secure_aggregation;
  XF_ENSURE(n >= 2 && n <= XF_SECAGG_MAX_SITES, err, XF_EINVAL,
            "secure aggregation needs 2 to %u sites in a round, the cohort has %zu",
            XF_SECAGG_MAX_SITES, n);
  XF_ENSURE(job->spec.privacy.clip > 0, err, XF_EINVAL,
            "secure aggregation needs privacy.clip: it fixes the shared integer scale");
  xf__sa *sa = xf_calloc(1, sizeof(*sa));
  if (!sa) return xf_fail(err, XF_ENOMEM, "out of memory for secure aggregation");
  sa->p.n = (uint32_t)n;
  uint32_t t = (uint32_t)ceil(cfg->threshold * (double)n - 1e-9);
  sa->p.threshold = t < 2 ? 2 : t > n ? (uint32_t)n : t;
  sa->p.bits = cfg->bits;
  sa->p.length = job->n_params;
  /* Uplink top-k: every site sends the same random subset of coordinates
   * (what they leave out stays in their residuals). */
  double f = job->spec.compression.uplink.topk_fraction;
  if (f > 0) {
    sa->p.length = xf_codec_topk_count(f, job->n_params);
    randombytes_buf(&sa->subset_seed, sizeof(sa->subset_seed));
    sa->subset = xf_mallocarray(sa->p.length, sizeof(uint32_t));
    if (!sa->subset ||
        xf_codec_random_subset(sa->subset_seed, job->n_params, sa->p.length, sa->subset) !=
            XF_OK) {
      xf__sa_free(sa);
      return xf_fail(err, XF_ENOMEM, "out of memory for the shared subset");
    }
  }
  sa->p.degree = xf_secagg_default_degree((uint32_t)n);
  randombytes_buf(sa->p.graph_seed, sizeof(sa->p.graph_seed));
  sa->attempt = xf_round_attempt(job->round);
  sa->ids = xf_mallocarray(n, sizeof(uint64_t));
  sa->scale = xf_mallocarray(n, sizeof(double));
  sa->weight = xf_mallocarray(n, sizeof(uint64_t));
  sa->state = xf_calloc(n, 1);
  sa->inputs = xf_calloc(n, sizeof(uint32_t *));
  xf_err rc = sa->ids && sa->scale && sa->weight && sa->state && sa->inputs
                  ? xf_secagg_server_new(&sa->p, &sa->server, err)
                  : xf_fail(err, XF_ENOMEM, "out of memory for secure aggregation");
  if (rc != XF_OK) {
    xf__sa_free(sa);
    return rc;
  }
  /* Weights: the records each site announced for the job's data (a site's
   * share of the cohort's), or equal under central or distributed privacy
   * (one site then moves the mean by at most clip / n). Sites scale
   * their updates by them, so the masked sum is already the weighted sum. */
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    sa->ids[i] = cohort[i];
    const xf__site *s = site_of(co, cohort[i]);
    const xf__dataset *d = s ? xf__job_dataset(&job->spec, s) : NULL;
    sa->weight[i] = d && d->train_records ? d->train_records : 1;
    total += sa->weight[i];
  }
  bool equal = job->spec.privacy.unit == XF_PRIVACY_UNIT_SITE &&
               (job->spec.privacy.mode == XF_PRIVACY_CENTRAL ||
                job->spec.privacy.mode == XF_PRIVACY_DISTRIBUTED);
  for (size_t i = 0; i < n; i++) {
    if (equal) sa->weight[i] = 1;
    sa->scale[i] = equal ? 1.0 / (double)n : (double)sa->weight[i] / (double)total;
  }
  /* Each site's scaled update has coordinates within clip (its L2 norm is
   * at most clip, its scale at most 1); the sum of n of them, each rounded
   * by less than a unit, stays below 2^(bits-1) units. */
  sa->fixed.bits = cfg->bits;
  sa->fixed.bound = (uint32_t)((1ull << (cfg->bits - 1)) - 1 - n);
  /* Uplink qN: each site's values are integers of N bits on the scale; n of
   * them must still add up below 2^(bits-1). */
  uint32_t q = job->spec.compression.uplink.quant_bits;
  if (q) {
    uint64_t per_site = (1ull << (q - 1)) - 1;
    if ((per_site + 1) * n >= (1ull << (cfg->bits - 1))) {
      xf__sa_free(sa);
      return xf_fail(err, XF_ERANGE,
                     "secure_aggregation.bits %u cannot hold the sum of %zu sites' q%u values; "
                     "raise bits to at least %u",
                     (unsigned)cfg->bits, n, (unsigned)q,
                     (unsigned)(q + (unsigned)ceil(log2((double)n + 1))) + 1);
    }
    sa->fixed.bound = (uint32_t)per_site;
  }
  sa->fixed.step = job->spec.privacy.clip / (double)sa->fixed.bound;
  sa->phase = XF__SA_ADVERT;
  sa->deadline = xf__now() + phase_span(job);
  job->sa = sa;
  XF_INFO("secagg_started", "job=%s round=%u attempt=%u n=%zu threshold=%u degree=%u bits=%u "
          "step=%.4g", job->id_text, (unsigned)xf_round_number(job->round),
          (unsigned)sa->attempt, n, (unsigned)sa->p.threshold, (unsigned)sa->p.degree,
          (unsigned)sa->p.bits, sa->fixed.step);
  return XF_OK;
}

void xf__sa_setup(const xf__sa *sa, uint32_t index, Xfed__SecAggSetup *out) {
  xfed__sec_agg_setup__init(out);
  out->n = sa->p.n;
  out->index = index;
  out->threshold = sa->p.threshold;
  out->bits = sa->p.bits;
  out->degree = sa->p.degree;
  out->graph_seed.data = (uint8_t *)sa->p.graph_seed;
  out->graph_seed.len = sizeof(sa->p.graph_seed);
  out->step = sa->fixed.step;
  out->bound = sa->fixed.bound;
  out->scale = index >= 1 && index <= sa->p.n ? sa->scale[index - 1] : 0;
  if (sa->subset) {
    out->subset = sa->p.length;
    out->subset_seed = sa->subset_seed;
  }
}

/* Leaves the cohort site i out of the round (it did not answer a phase). */
static void sa_drop(xf__coord *co, xf__job *job, uint32_t i, const char *why) {
  xf__site *s = site_of(co, job->sa->ids[i - 1]);
  if (s && alive(job, s->id)) xf__job_drop_site(co, job, s, why);
}

/* Leaves everyone out: the round cannot reach the threshold. */
static void sa_abandon(xf__coord *co, xf__job *job, const char *why) {
  XF_WARN("secagg_failed", "job=%s round=%u attempt=%u reason=\"%s\"", job->id_text,
          (unsigned)xf_round_number(job->round), (unsigned)job->sa->attempt, why);
  uint32_t n = job->sa->p.n;
  for (uint32_t i = 1; i <= n && job->sa && job->phase == XF__PHASE_ROUND; i++)
    sa_drop(co, job, i, why);
}

static void sa_send_keys(xf__coord *co, xf__job *job) {
  xf__sa *sa = job->sa;
  uint32_t count = 0;
  for (uint32_t i = 1; i <= sa->p.n; i++)
    if ((sa->state[i - 1] & SA_ADVERTISED) && alive(job, sa->ids[i - 1])) count++;
  if (count < sa->p.threshold) {
    sa_abandon(co, job, "fewer sites than the threshold sent their keys");
    return;
  }
  size_t len = (size_t)sa->p.n * XF_SECAGG_ADVERT_BYTES;
  uint8_t *adverts = xf_malloc(len);
  if (!adverts) {
    sa_abandon(co, job, "out of memory routing the keys");
    return;
  }
  xf_secagg_server_adverts(sa->server, adverts);
  sa->phase = XF__SA_SHARE;
  sa->deadline = xf__now() + phase_span(job);
  for (uint32_t i = 1; i <= sa->p.n && job->sa == sa && job->phase == XF__PHASE_ROUND; i++) {
    if (!(sa->state[i - 1] & SA_ADVERTISED)) {
      sa_drop(co, job, i, "sent no keys for secure aggregation in time");
      continue;
    }
    xf__site *s = site_of(co, sa->ids[i - 1]);
    if (!s || !s->peer) continue;
    Xfed__SecAggKeys k = XFED__SEC_AGG_KEYS__INIT;
    k.job_id = job->id_text;
    k.round = xf_round_number(job->round);
    k.attempt = sa->attempt;
    k.adverts.data = adverts;
    k.adverts.len = len;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_KEYS;
    env.secagg_keys = &k;
    (void)xf__send(s->peer, &env);
  }
  xf_free(adverts);
}

static void sa_route(xf__coord *co, xf__job *job) {
  xf__sa *sa = job->sa;
  xf_errctx err = {0};
  uint32_t *u2 = xf_mallocarray(sa->p.n, sizeof(uint32_t));
  size_t n_u2 = 0;
  if (!u2 || xf_secagg_server_routed(sa->server, u2, &n_u2, &err) != XF_OK) {
    xf_free(u2);
    sa_abandon(co, job, u2 ? err.msg : "out of memory routing the shares");
    return;
  }
  sa->phase = XF__SA_MASKED;
  uint32_t *from = xf_mallocarray(sa->p.n, sizeof(uint32_t));
  ProtobufCBinaryData *cts = xf_mallocarray(sa->p.n, sizeof(ProtobufCBinaryData));
  if (!from || !cts) {
    xf_free(u2);
    xf_free(from);
    xf_free(cts);
    sa_abandon(co, job, "out of memory routing the shares");
    return;
  }
  for (uint32_t i = 1; i <= sa->p.n && job->sa == sa && job->phase == XF__PHASE_ROUND; i++) {
    if (!(sa->state[i - 1] & SA_SHARED)) {
      if (sa->state[i - 1] & SA_ADVERTISED)
        sa_drop(co, job, i, "sent no shares for secure aggregation in time");
      continue;
    }
    size_t k = 0;
    for (size_t m = 0; m < sa->n_shares; m++) {
      const xf__sa_share *sh = &sa->shares[m];
      if (sh->to != i || !(sa->state[sh->from - 1] & SA_SHARED) || k >= sa->p.n) continue;
      from[k] = sh->from;
      cts[k].data = (uint8_t *)sh->ct;
      cts[k].len = sizeof(sh->ct);
      k++;
    }
    xf__site *s = site_of(co, sa->ids[i - 1]);
    if (!s || !s->peer) continue;
    Xfed__SecAggRouted r = XFED__SEC_AGG_ROUTED__INIT;
    r.job_id = job->id_text;
    r.round = xf_round_number(job->round);
    r.attempt = sa->attempt;
    r.n_u2 = n_u2;
    r.u2 = u2;
    r.n_from = k;
    r.from = from;
    r.n_ciphertexts = k;
    r.ciphertexts = cts;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_ROUTED;
    env.secagg_routed = &r;
    (void)xf__send(s->peer, &env);
  }
  XF_INFO("secagg_routed", "job=%s round=%u attempt=%u u2=%zu", job->id_text,
          (unsigned)xf_round_number(job->round), (unsigned)sa->attempt, n_u2);
  /* The shares have done their work. */
  sodium_memzero(sa->shares, sa->n_shares * sizeof(*sa->shares));
  sa->n_shares = 0;
  xf_free(u2);
  xf_free(from);
  xf_free(cts);
}

xf_err xf__sa_masked(xf__job *job, xf__site *s, uint8_t **bytes, size_t len, xf_errctx *err) {
  xf__sa *sa = job->sa;
  uint32_t i = xf__sa_index(sa, s->id);
  XF_ENSURE(i && sa->phase == XF__SA_MASKED && (sa->state[i - 1] & SA_SHARED) &&
                !sa->inputs[i - 1],
            err, XF_EINVAL,
            "a masked input from %s, which is not in this round's secure aggregation", s->name);
  XF_ENSURE(len == (size_t)sa->p.length * 4 && (uintptr_t)*bytes % _Alignof(uint32_t) == 0, err,
            XF_EFORMAT, "a masked input of %zu bytes, not %" PRIu64, len, sa->p.length * 4);
  sa->inputs[i - 1] = (uint32_t *)(void *)*bytes;
  *bytes = NULL;
  sa->state[i - 1] |= SA_MASKED;
  return XF_OK;
}

bool xf__sa_unmask_start(xf__coord *co, xf__job *job) {
  xf__sa *sa = job->sa;
  xf_errctx err = {0};
  if (sa->phase == XF__SA_UNMASK) return false;
  /* A masked input counts when its site is still connected as the round
   * closes: one that vanished after sending it is treated as dropped, its
   * pairwise masks cancelled from the others' shares of its key. */
  for (uint32_t i = 1; i <= sa->p.n; i++) {
    uint32_t *in = sa->inputs[i - 1];
    if (!in) continue;
    const xf__site *s = site_of(co, sa->ids[i - 1]);
    if (s && s->peer &&
        xf_secagg_server_add_masked(sa->server, i, 0, sa->p.length, in, &err) != XF_OK)
      XF_WARN("secagg_input_refused", "job=%s site=%s reason=\"%s\"", job->id_text, s->name,
              err.msg);
    else if (!s || !s->peer)
      XF_WARN("secagg_input_left_out", "job=%s index=%u why=\"its site is gone\"",
              job->id_text, (unsigned)i);
    xf_free(in);
    sa->inputs[i - 1] = NULL;
  }
  sa->u3 = xf_mallocarray(sa->p.n, sizeof(uint32_t));
  if (!sa->u3 || xf_secagg_server_survivors(sa->server, sa->u3, &sa->n_u3, &err) != XF_OK) {
    xf__job_commit_failed(co, job, sa->u3 ? err.msg : "out of memory");
    return false;
  }
  sa->phase = XF__SA_UNMASK;
  sa->deadline = xf__now() + phase_span(job);
  for (size_t m = 0; m < sa->n_u3; m++) {
    xf__site *s = site_of(co, sa->ids[sa->u3[m] - 1]);
    if (!s || !s->peer) continue;
    Xfed__SecAggUnmask u = XFED__SEC_AGG_UNMASK__INIT;
    u.job_id = job->id_text;
    u.round = xf_round_number(job->round);
    u.attempt = sa->attempt;
    u.n_u3 = sa->n_u3;
    u.u3 = sa->u3;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_UNMASK;
    env.secagg_unmask = &u;
    (void)xf__send(s->peer, &env);
  }
  XF_INFO("secagg_unmasking", "job=%s round=%u attempt=%u u3=%zu", job->id_text,
          (unsigned)xf_round_number(job->round), (unsigned)sa->attempt, sa->n_u3);
  return true;
}

/* Unmasks the sum with the shares at hand and hands the mean to the commit. */
static void sa_finish(xf__coord *co, xf__job *job) {
  xf__sa *sa = job->sa;
  xf_errctx err = {0};
  uint32_t *sum = xf_mallocarray(sa->p.length, sizeof(uint32_t));
  float *part = xf_mallocarray(sa->p.length, sizeof(float));
  float *mean = sa->subset ? xf_calloc(job->n_params, sizeof(float)) : part;
  if (!sum || !part || !mean || xf_secagg_server_finish(sa->server, sum, &err) != XF_OK) {
    xf_free(sum);
    if (mean != part) xf_free(mean);
    xf_free(part);
    xf__job_commit_failed(co, job, sum && part && mean ? err.msg : "out of memory unmasking");
    return;
  }
  xf_codec_dequantize_fixed(&sa->fixed, sum, sa->p.length, part);
  xf_free(sum);
  if (sa->subset) { /* the subset's values at their places, zero elsewhere */
    for (uint64_t k = 0; k < sa->p.length; k++) mean[sa->subset[k]] = part[k];
    xf_free(part);
  }
  /* The sum is of the survivors' scaled updates: rescale to their mean. */
  double have = 0, total = 0;
  for (uint32_t i = 0; i < sa->p.n; i++) total += sa->scale[i];
  uint64_t w = 0;
  for (size_t m = 0; m < sa->n_u3; m++) {
    have += sa->scale[sa->u3[m] - 1];
    w += sa->weight[sa->u3[m] - 1];
  }
  float f = (float)(total / have);
  for (uint64_t k = 0; k < job->n_params; k++) mean[k] *= f;
  sa->mean = mean;
  sa->mean_weight = w;
  sa->phase = XF__SA_DONE;
  XF_INFO("secagg_unmasked", "job=%s round=%u attempt=%u sites=%zu prg_streams=%" PRIu64,
          job->id_text, (unsigned)xf_round_number(job->round), (unsigned)sa->attempt, sa->n_u3,
          xf_secagg_server_prg_expansions(sa->server));
  xf__job_commit(co, job);
}

/* Moves a phase on once every site it waits for has answered. */
static void sa_check(xf__coord *co, xf__job *job, bool timed_out) {
  xf__sa *sa = job->sa;
  if (!sa) return;
  uint8_t want = sa->phase == XF__SA_ADVERT ? SA_ADVERTISED
                 : sa->phase == XF__SA_SHARE ? SA_SHARED
                 : sa->phase == XF__SA_UNMASK ? SA_REVEALED
                                              : 0;
  if (!want) return;
  bool waiting = false;
  if (sa->phase == XF__SA_UNMASK) {
    for (size_t m = 0; m < sa->n_u3 && !waiting; m++) {
      uint32_t i = sa->u3[m];
      const xf__site *s = site_of(co, sa->ids[i - 1]);
      waiting = !(sa->state[i - 1] & SA_REVEALED) && s && s->peer;
    }
  } else {
    uint8_t before = sa->phase == XF__SA_SHARE ? SA_ADVERTISED : 0;
    for (uint32_t i = 1; i <= sa->p.n && !waiting; i++)
      waiting = (sa->state[i - 1] & before) == before && !(sa->state[i - 1] & want) &&
                alive(job, sa->ids[i - 1]);
  }
  if (waiting && !timed_out) return;
  if (sa->phase == XF__SA_ADVERT) sa_send_keys(co, job);
  else if (sa->phase == XF__SA_SHARE) sa_route(co, job);
  else sa_finish(co, job);
}

void xf__sa_tick(xf__coord *co, xf__job *job, double now) {
  if (job->sa && now >= job->sa->deadline) sa_check(co, job, true);
}

void xf__sa_site_changed(xf__coord *co, xf__job *job) { sa_check(co, job, false); }

/* Whether a secure-aggregation message belongs to the job's current attempt. */
static bool current(const xf__job *job, const char *job_id, uint32_t round, uint32_t attempt) {
  return job->sa && job_id && strcmp(job_id, job->id_text) == 0 &&
         round == xf_round_number(job->round) && attempt == job->sa->attempt;
}

void xf__sa_on_frame(xf__coord *co, xf__job *job, xf__site *s, const Xfed__Envelope *env) {
  xf__sa *sa = job->sa;
  uint32_t i = xf__sa_index(sa, s->id);
  xf_errctx err = {0};
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_SECAGG_ADVERT: {
    const Xfed__SecAggAdvert *a = env->secagg_advert;
    if (!current(job, a->job_id, a->round, a->attempt) || !i) return;
    if (sa->phase != XF__SA_ADVERT || a->advert.len != XF_SECAGG_ADVERT_BYTES ||
        xf_secagg_server_advert(sa->server, i, a->advert.data, &err) != XF_OK) {
      xf__job_drop_site(co, job, s, err.msg[0] ? err.msg : "keys out of turn");
      return;
    }
    sa->state[i - 1] |= SA_ADVERTISED;
    break;
  }
  case XFED__ENVELOPE__BODY_SECAGG_SHARES: {
    const Xfed__SecAggShares *m = env->secagg_shares;
    if (!current(job, m->job_id, m->round, m->attempt) || !i) return;
    bool ok = sa->phase == XF__SA_SHARE && (sa->state[i - 1] & SA_ADVERTISED) &&
              !(sa->state[i - 1] & SA_SHARED) && m->n_to == m->n_ciphertexts &&
              m->n_to <= sa->p.degree;
    for (size_t k = 0; ok && k < m->n_to; k++)
      ok = m->to[k] >= 1 && m->to[k] <= sa->p.n && m->to[k] != i &&
           m->ciphertexts[k].len == XF_SECAGG_SHARE_BYTES &&
           xf_secagg_neighbours(&sa->p, i, m->to[k]);
    if (ok && sa->n_shares + m->n_to > sa->cap_shares) {
      size_t cap = sa->cap_shares ? sa->cap_shares : 16;
      while (cap < sa->n_shares + m->n_to) cap *= 2;
      xf__sa_share *g = xf_realloc(sa->shares, cap * sizeof(*g));
      ok = g != NULL;
      if (g) {
        sa->shares = g;
        sa->cap_shares = cap;
      }
    }
    if (!ok || xf_secagg_server_shared(sa->server, i, &err) != XF_OK) {
      xf__job_drop_site(co, job, s, err.msg[0] ? err.msg : "malformed or untimely shares");
      return;
    }
    for (size_t k = 0; k < m->n_to; k++) {
      xf__sa_share *sh = &sa->shares[sa->n_shares++];
      sh->from = i;
      sh->to = m->to[k];
      memcpy(sh->ct, m->ciphertexts[k].data, XF_SECAGG_SHARE_BYTES);
    }
    sa->state[i - 1] |= SA_SHARED;
    break;
  }
  case XFED__ENVELOPE__BODY_SECAGG_REVEAL: {
    const Xfed__SecAggReveal *r = env->secagg_reveal;
    if (!current(job, r->job_id, r->round, r->attempt) || !i || sa->phase != XF__SA_UNMASK)
      return;
    if (xf_secagg_server_add_reveal(sa->server, i, r->reveal.data, r->reveal.len, &err) !=
        XF_OK) {
      XF_WARN("secagg_reveal_refused", "job=%s site=%s reason=\"%s\"", job->id_text, s->name,
              err.msg);
      return;
    }
    sa->state[i - 1] |= SA_REVEALED;
    break;
  }
  default: return;
  }
  sa_check(co, job, false);
}
