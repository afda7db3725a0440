/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for what an aggregator (the coordinator, or a regional
 * aggregator) sends a site about its tasks: TaskOffer, TaskGo and
 * TaskCancel, and the secure-aggregation messages SecAggKeys,
 * SecAggRouted, SecAggCheck and SecAggUnmask, as records of
 * tests/fuzz/fuzz_msgs.h. The site is "s1" of the round of
 * tests/fuzz/fuzz_secagg.h, holding one dataset (FZ_SITE_*).
 *
 * Each message goes through the checks site/daemon.c runs on it, with the
 * same socket-free pieces: an offer's format, its job spec
 * (xf_jobspec_parse_string), its residency plan's release conditions
 * (policy/release.h), the model on the dataset (job/jobmodel.h,
 * kernels/model.h), the privacy plan (job/jobprivacy.h) and the update's
 * plan (xf_update_plan_site); a secure-aggregation setup (in the offer or
 * the go) made into the guard's session (crypto/secagg_guard.h), whose
 * keys are then advertised; the cohort's keys, the routed shares, the
 * survivor set to sign and the request to reveal taken by the guard as
 * the daemon takes them. A check that fails ends the site's round as the
 * daemon's does (it refuses the round and forgets it).
 *
 * Checked: every refusal names its reason; nothing is revealed unless the
 * survivor set is the one this site signed, and then at most the reveal's
 * largest size; a site signs one survivor set per round. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_msgs.h"
#include "fuzz_secagg.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/jobspec.h"
#include "kernels/model.h"
#include "policy/release.h"
#include "update/update.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const unsigned kinds[] = {
    XFED__ENVELOPE__BODY_TASK_OFFER,    XFED__ENVELOPE__BODY_TASK_GO,
    XFED__ENVELOPE__BODY_TASK_CANCEL,   XFED__ENVELOPE__BODY_SECAGG_KEYS,
    XFED__ENVELOPE__BODY_SECAGG_ROUTED, XFED__ENVELOPE__BODY_SECAGG_CHECK,
    XFED__ENVELOPE__BODY_SECAGG_UNMASK,
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

#define FZ_SITE_NAME "s1"
#define FZ_SITE_REGION "eu"
#define JOB_ID_MAX 64 /* site/daemon.c's */

/* The site's one task and its round of secure aggregation. */
typedef struct site {
  bool has_task;
  char job[JOB_ID_MAX];
  uint32_t round, attempt;
  bool hold, go, secagg;
  xf_jobspec spec;
  size_t n_params;
  xf_privacy_plan plan;
  xf_update_offer uo;
  bool has_residency;
  struct {
    uint32_t min_cohort;
    bool require_secagg, has_max_epsilon, regional;
    double max_epsilon;
    char rule[64], to[64];
  } res;
  xf_secagg_guard *guard; /* the round, NULL when none */
  bool signed_u3;
  uint32_t u3[FZ_SA_N];
  size_t n_u3;
} site;

static void said(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK && (err->code != rc || !err->msg[0])) abort();
}

/* The daemon's sa_refuse: the round is left and forgotten. */
static void sa_forget(site *s) {
  xf_secagg_guard_free(s->guard);
  s->guard = NULL;
  s->signed_u3 = false;
}

static void task_drop(site *s) {
  sa_forget(s);
  s->has_task = false;
}

/* site/daemon.c's release_allows. */
static bool release_allows(const site *s, unsigned contributors) {
  xf_release_rule rule = {.rule = s->res.rule,
                          .from = FZ_SITE_REGION,
                          .to = s->res.to,
                          .min_cohort = s->res.min_cohort,
                          .require_secagg = s->res.require_secagg,
                          .has_max_epsilon = s->res.has_max_epsilon,
                          .max_epsilon = s->res.max_epsilon};
  const xf_privacy_spec *pv = &s->spec.privacy;
  xf_release_artifact a = {.contributors = contributors,
                           .secagg = s->spec.secure_aggregation.enabled,
                           .privacy = pv->mode != XF_PRIVACY_NONE,
                           .has_epsilon = pv->has_target_epsilon,
                           .epsilon = pv->target_epsilon};
  char why[600];
  bool ok = xf_release_allows(&rule, &a, why, sizeof(why));
  if (!ok && !why[0]) abort();
  return ok;
}

static bool plan_has_conditions(const site *s) {
  return s->res.regional || s->res.min_cohort > 1 || s->res.require_secagg ||
         s->res.has_max_epsilon;
}

/* site/daemon.c's sa_setup_of and task_secagg_begin: the setup checked and
 * made into the guard's session; the keys advertised. */
static xf_err secagg_begin(site *s, const Xfed__SecAggSetup *su, xf_errctx *err) {
  XF_ENSURE(su->graph_seed.len == 32, err, XF_EINVAL, "graph_seed has %zu bytes, not 32",
            su->graph_seed.len);
  XF_ENSURE(su->n_cohort == su->n && su->index >= 1 && su->index <= su->n_cohort, err, XF_EINVAL,
            "the setup names %zu sites for a cohort of %u (this site at %u)", su->n_cohort,
            (unsigned)su->n, (unsigned)su->index);
  XF_ENSURE(su->cohort[su->index - 1] && strcmp(su->cohort[su->index - 1], FZ_SITE_NAME) == 0,
            err, XF_EINVAL, "the setup puts another site at this site's index %u",
            (unsigned)su->index);
  xf_update_secagg *sa = &s->uo.sa;
  memset(sa, 0, sizeof(*sa));
  sa->params = (xf_secagg_params){.n = su->n,
                                  .threshold = su->threshold,
                                  .bits = su->bits,
                                  .length = su->subset ? su->subset : s->n_params,
                                  .degree = su->degree};
  memcpy(sa->params.graph_seed, su->graph_seed.data, 32);
  sa->index = su->index;
  sa->fixed = (xf_codec_fixed){.step = su->step, .bits = su->bits, .bound = su->bound};
  sa->scale = su->scale;
  sa->subset = su->subset;
  sa->subset_seed = su->subset_seed;
  s->uo.secagg = true;
  xf_update_plan up;
  XF_GUARD(xf_update_plan_site(&s->spec, &s->plan, s->n_params, &s->uo, 1, &up, err));
  sa_forget(s);
  xf_secagg_session session = {.job = s->job,
                               .round = s->round,
                               .attempt = s->attempt,
                               .params = sa->params,
                               .cohort = (const char *const *)su->cohort};
  xf_secagg_identity id = fz_sa_identity(FZ_SITE_NAME);
  XF_GUARD(xf_secagg_guard_new(&session, sa->index, &id, &s->guard, err));
  uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
  xf_err rc = xf_secagg_guard_advertise(s->guard, advert, sig, err);
  if (rc != XF_OK) sa_forget(s);
  return rc;
}

static void on_offer(site *s, const Xfed__TaskOffer *o) {
  const char *job = o->job_id ? o->job_id : "";
  if (!*job || strlen(job) >= JOB_ID_MAX || o->model_digest.len != XF_DIGEST_BYTES) return;
  if (s->has_task && strcmp(s->job, job) == 0 && s->round == o->round &&
      s->attempt == o->attempt)
    return; /* offered again: taken up where it was */
  task_drop(s);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_jobspec spec;
  xf_err rc = xf_jobspec_parse_string(o->params_json, o->params_json ? strlen(o->params_json) : 0,
                                      "params_json", &spec, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  s->spec = spec;
  memset(&s->res, 0, sizeof(s->res));
  if (o->residency) {
    const Xfed__Residency *r = o->residency;
    s->res.min_cohort = r->min_cohort;
    s->res.require_secagg = r->require_secagg;
    s->res.has_max_epsilon = r->has_max_epsilon;
    s->res.max_epsilon = r->max_epsilon;
    s->res.regional = r->path && strcmp(r->path, "regional") == 0;
    snprintf(s->res.rule, sizeof(s->res.rule), "%s", r->rule ? r->rule : "");
    snprintf(s->res.to, sizeof(s->res.to), "%s",
             r->coordinator_region ? r->coordinator_region : "");
  }
  s->has_residency = o->residency != NULL;
  if (o->residency && !o->evaluate_only && plan_has_conditions(s) &&
      !release_allows(s, s->res.min_cohort > 1 ? s->res.min_cohort : 1))
    return;
  /* job_supported */
  if (spec.privacy.mode == XF_PRIVACY_DISTRIBUTED && !spec.secure_aggregation.enabled) return;
  xf_model_spec ms;
  rc = xf_jobspec_model_spec(&spec, FZ_SITE_H, FZ_SITE_W, FZ_SITE_C, FZ_SITE_CLASSES, &ms, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  xf_model *m = NULL;
  rc = xf_model_create(&ms, &m, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  s->n_params = xf_model_num_params(m);
  xf_model_free(m);
  memset(&s->plan, 0, sizeof(s->plan));
  if (!o->evaluate_only) {
    rc = xf_job_privacy_plan(&spec, FZ_SITE_RECORDS, s->n_params, &s->plan, &err);
    said(rc, &err);
    if (rc != XF_OK) return;
  }
  snprintf(s->job, sizeof(s->job), "%s", job);
  s->round = o->round;
  s->attempt = o->attempt;
  s->hold = o->hold;
  s->go = false;
  s->secagg = !o->evaluate_only && spec.secure_aggregation.enabled;
  memset(&s->uo, 0, sizeof(s->uo));
  s->uo.sealed = !s->secagg && o->seal_key.len == XF_SEAL_PUBLICKEYBYTES;
  if (s->uo.sealed) memcpy(s->uo.seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  s->has_task = true;
  if (s->secagg && o->secagg) {
    rc = secagg_begin(s, o->secagg, &err);
  } else if (s->secagg && !o->hold) {
    rc = xf_fail(&err, XF_EINVAL, "the offer has no secure-aggregation setup");
  } else if (!o->evaluate_only && !s->secagg) {
    xf_update_plan up;
    rc = xf_update_plan_site(&s->spec, &s->plan, s->n_params, &s->uo, 1, &up, &err);
  }
  said(rc, &err);
  if (rc != XF_OK) task_drop(s);
}

static bool is_task(const site *s, const char *job, uint32_t round, uint32_t attempt) {
  return s->has_task && job && strcmp(s->job, job) == 0 && s->round == round &&
         s->attempt == attempt;
}

static void on_go(site *s, const Xfed__TaskGo *g) {
  if (!is_task(s, g->job_id, g->round, g->attempt) || s->go || !s->hold) return;
  if (g->secagg && s->secagg && s->has_residency && plan_has_conditions(s) &&
      !release_allows(s, g->secagg->n)) {
    task_drop(s);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = XF_OK;
  if (g->secagg && !s->secagg) rc = xf_fail(&err, XF_EINVAL, "secure aggregation is not on");
  else if (s->secagg && g->secagg) rc = secagg_begin(s, g->secagg, &err);
  else if (s->secagg && !s->uo.secagg) rc = xf_fail(&err, XF_EINVAL, "no setup anywhere");
  said(rc, &err);
  if (rc != XF_OK) {
    task_drop(s);
    return;
  }
  s->go = true;
}

static bool is_round(const site *s, const char *job, uint32_t round, uint32_t attempt) {
  return s->guard && is_task(s, job, round, attempt);
}

static void on_keys(site *s, const Xfed__SecAggKeys *k) {
  if (!is_round(s, k->job_id, k->round, k->attempt)) return;
  const xf_secagg_params *p = &s->uo.sa.params;
  xf_errctx err;
  xf_errctx_clear(&err);
  uint32_t n = p->n;
  if (k->adverts.len != (size_t)n * XF_SECAGG_ADVERT_BYTES || k->n_signatures != n ||
      k->n_certificates != n) {
    sa_forget(s); /* malformed: refused */
    return;
  }
  xf_secagg_member_keys *keys = calloc(n, sizeof(*keys));
  size_t cap = p->degree, count = 0;
  xf_secagg_signed_share *msgs = calloc(cap ? cap : 1, sizeof(*msgs));
  if (!keys || !msgs) abort();
  for (uint32_t i = 0; i < n; i++) {
    keys[i].advert = k->adverts.data + (size_t)i * XF_SECAGG_ADVERT_BYTES;
    keys[i].sig = k->signatures[i].len == XF_SECAGG_SIG_BYTES ? k->signatures[i].data : NULL;
    keys[i].cert = k->certificates[i].data;
    keys[i].cert_len = k->certificates[i].len;
  }
  xf_err rc = xf_secagg_guard_share(s->guard, keys, msgs, cap, &count, &err);
  said(rc, &err);
  if (rc == XF_OK) {
    if (count > cap) abort();
    for (size_t i = 0; i < count; i++)
      if (msgs[i].to < 1 || msgs[i].to > n || msgs[i].to == s->uo.sa.index) abort();
  } else {
    sa_forget(s);
  }
  sodium_memzero(msgs, (cap ? cap : 1) * sizeof(*msgs));
  free(msgs);
  free(keys);
}

static void on_routed(site *s, const Xfed__SecAggRouted *r) {
  if (!is_round(s, r->job_id, r->round, r->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = r->n_from == r->n_ciphertexts && r->n_from == r->n_signatures
                  ? XF_OK
                  : xf_fail(&err, XF_EFORMAT, "lists of different lengths");
  for (size_t i = 0; rc == XF_OK && i < r->n_from; i++)
    rc = r->ciphertexts[i].len == XF_SECAGG_SHARE_BYTES &&
                 r->signatures[i].len == XF_SECAGG_SIG_BYTES
             ? xf_secagg_guard_receive(s->guard, r->from[i], r->ciphertexts[i].data,
                                       r->signatures[i].data, &err)
             : xf_fail(&err, XF_EFORMAT, "a share of the wrong size");
  if (rc == XF_OK) rc = xf_secagg_guard_routed(s->guard, r->u2, r->n_u2, &err);
  said(rc, &err);
  if (rc != XF_OK) sa_forget(s);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* U3 as a sorted set of at most FZ_SA_N; false when it cannot be one. */
static bool as_set(const uint32_t *u3, size_t n, uint32_t *out) {
  if (n > FZ_SA_N) return false;
  memcpy(out, u3, n * sizeof(*u3));
  qsort(out, n, sizeof(*out), cmp_u32);
  return true;
}

static void on_check(site *s, const Xfed__SecAggCheck *c) {
  if (!is_round(s, c->job_id, c->round, c->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  xf_err rc = xf_secagg_guard_sign_survivors(s->guard, c->u3, c->n_u3, sig, &err);
  said(rc, &err);
  uint32_t set[FZ_SA_N];
  bool fits = as_set(c->u3, c->n_u3, set);
  if (rc == XF_OK) {
    if (!fits) abort();
    /* One survivor set per round. */
    if (s->signed_u3 && (s->n_u3 != c->n_u3 || memcmp(s->u3, set, c->n_u3 * sizeof(*set))))
      abort();
    s->signed_u3 = true;
    s->n_u3 = c->n_u3;
    memcpy(s->u3, set, c->n_u3 * sizeof(*set));
    return;
  }
  sa_forget(s);
}

static void on_unmask(site *s, const Xfed__SecAggUnmask *u) {
  if (!is_round(s, u->job_id, u->round, u->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  size_t cap = xf_secagg_reveal_max_bytes(&s->uo.sa.params), len = 0;
  size_t n = u->n_signers;
  uint8_t *out = malloc(cap ? cap : 1);
  uint8_t *sigs = calloc(n ? n : 1, XF_SECAGG_SIG_BYTES);
  if (!out || !sigs) abort();
  xf_err rc = u->n_signatures == n ? XF_OK
                                   : xf_fail(&err, XF_EFORMAT, "signers and signatures differ");
  for (size_t i = 0; rc == XF_OK && i < n; i++)
    if (u->signatures[i].len == XF_SECAGG_SIG_BYTES)
      memcpy(sigs + i * XF_SECAGG_SIG_BYTES, u->signatures[i].data, XF_SECAGG_SIG_BYTES);
  if (rc == XF_OK)
    rc = xf_secagg_guard_unmask(s->guard, u->u3, u->n_u3, u->signers, sigs, n, out, cap, &len,
                                &err);
  said(rc, &err);
  if (rc == XF_OK) {
    /* Only for the set it signed, and within the largest reveal. */
    uint32_t set[FZ_SA_N];
    if (!s->signed_u3 || !as_set(u->u3, u->n_u3, set) || s->n_u3 != u->n_u3 ||
        memcmp(s->u3, set, u->n_u3 * sizeof(*set)) != 0 || len == 0 || len > cap)
      abort();
  } else {
    sa_forget(s);
  }
  sodium_memzero(out, cap ? cap : 1);
  free(out);
  free(sigs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_begin(4);
  site s;
  memset(&s, 0, sizeof(s));
  fz_input in = {data, size};
  fz_record r;
  while (fz_next(&in, N_KINDS, &r)) {
    Xfed__Envelope *env = fz_decode(kinds[r.kind], r.body, r.len);
    if (!env) continue;
    switch (env->body_case) {
    case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(&s, env->task_offer); break;
    case XFED__ENVELOPE__BODY_TASK_GO: on_go(&s, env->task_go); break;
    case XFED__ENVELOPE__BODY_TASK_CANCEL:
      if (is_task(&s, env->task_cancel->job_id, env->task_cancel->round,
                  env->task_cancel->attempt))
        task_drop(&s);
      break;
    case XFED__ENVELOPE__BODY_SECAGG_KEYS: on_keys(&s, env->secagg_keys); break;
    case XFED__ENVELOPE__BODY_SECAGG_ROUTED: on_routed(&s, env->secagg_routed); break;
    case XFED__ENVELOPE__BODY_SECAGG_CHECK: on_check(&s, env->secagg_check); break;
    case XFED__ENVELOPE__BODY_SECAGG_UNMASK: on_unmask(&s, env->secagg_unmask); break;
    default: abort();
    }
    xf_envelope_free(env);
  }
  task_drop(&s);
  return 0;
}
