/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for what an aggregator (the coordinator, or a regional
 * aggregator) sends a site about its tasks: TaskOffer, TaskGo and
 * TaskCancel, and the secure-aggregation messages SecAggKeys,
 * SecAggRouted, SecAggCheck and SecAggUnmask, as records of
 * tests/fuzz/fuzz_msgs.h. The site is "s1" of the round of
 * tests/fuzz/fuzz_secagg.h, holding one dataset (FZ_SITE_*).
 *
 * Each offer and go goes through the site's own checks (site/offer.h:
 * xf_site_offer_malformed, xf_site_offer_check and xf_site_go_check, with
 * a ledger that reads no spend and no local rules): the job spec, the
 * residency plan's release conditions, the model on the dataset, the
 * privacy plan and the update's plan with its secure-aggregation setup. A
 * setup they take begins the site's round (site/siteagg.h), whose keys are
 * then advertised; the cohort's keys, the routed shares, the survivor set
 * to sign and the request to reveal go to the same functions the daemon
 * calls. A check that fails ends the site's round as the daemon's does (it
 * refuses the round and forgets it).
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
#include "site/offer.h"
#include "site/siteagg.h"

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

/* The site's one task and its round of secure aggregation. */
typedef struct site {
  bool has_task;
  char job[XF_SITE_JOB_ID_MAX];
  uint32_t round, attempt;
  bool hold, go, secagg, evaluate_only;
  xf_jobspec spec;
  size_t n_params;
  xf_privacy_plan plan;
  xf_update_offer uo;
  xf_site_plan residency;
  xf_site_sa *sa;         /* the site's rounds (site/siteagg.h) */
  bool signed_u3;
  uint32_t u3[FZ_SA_N];
  size_t n_u3;
} site;

static void said(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK && (err->code != rc || !err->msg[0])) abort();
}

/* The site's one dataset, under whatever name the job asks for. */
static xf_err fz_dataset(void *user, const char *name, xf_site_dataset *out, xf_errctx *err) {
  (void)user;
  (void)err;
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%.*s", XF_SITE_NAME_MAX, name);
  out->train_records = FZ_SITE_RECORDS;
  out->h = FZ_SITE_H;
  out->w = FZ_SITE_W;
  out->c = FZ_SITE_C;
  out->classes = FZ_SITE_CLASSES;
  return XF_OK;
}

/* A ledger that reads no spend: the budget checks pass, so every offer
 * that gets that far reaches the update's plan. */
static xf_err fz_ledger(void *user, const char *dataset, const char *job,
                        const xf_privacy_charge *charge, double delta, double *out,
                        xf_errctx *err) {
  (void)user;
  (void)dataset;
  (void)job;
  (void)charge;
  (void)delta;
  (void)err;
  *out = 0;
  return XF_OK;
}

static const xf_site_offer_env fz_env = {.site = FZ_SITE_NAME,
                                         .region = FZ_SITE_REGION,
                                         .threads = 1,
                                         .dataset = fz_dataset,
                                         .ledger_epsilon = fz_ledger};

/* The round left and forgotten, as the daemon's sa_refuse does. */
static void sa_forget(site *s) {
  xf_site_sa_forget(s->sa, s->job, s->round, s->attempt);
  s->signed_u3 = false;
}

static void task_drop(site *s) {
  if (s->has_task) sa_forget(s);
  s->has_task = false;
}

/* The round begun with the setup the checks took into s->uo.sa, as the
 * daemon's sa_begin and sa_advertise do; the task's round is the only one
 * this site holds. */
static xf_err secagg_begin(site *s, const Xfed__SecAggSetup *su, xf_errctx *err) {
  s->signed_u3 = false;
  xf_secagg_identity id = fz_sa_identity(FZ_SITE_NAME);
  XF_GUARD(xf_site_sa_begin(s->sa, s->job, s->round, s->attempt, &s->uo.sa,
                            (const char *const *)su->cohort, &id, NULL, NULL, err));
  uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
  xf_err rc = xf_site_sa_advertise(s->sa, s->job, s->round, s->attempt, advert, sig, err);
  if (rc != XF_OK) sa_forget(s);
  return rc;
}

static void on_offer(site *s, const Xfed__TaskOffer *o) {
  char msg[600];
  if (xf_site_offer_malformed(o, msg, sizeof(msg))) {
    if (!msg[0]) abort();
    return;
  }
  if (s->has_task && strcmp(s->job, o->job_id) == 0 && s->round == o->round &&
      s->attempt == o->attempt)
    return; /* offered again: taken up where it was */
  task_drop(s);
  xf_site_offer_room room = {.now_ms = 0};
  xf_site_offer_verdict v;
  xf_site_offer_check(&fz_env, o, &room, &v);
  if (v.step != XF_SITE_OFFER_TAKEN) {
    if (v.reason == XFED__TASK_REFUSAL__REASON__UNSPECIFIED || !v.why[0]) abort();
    return;
  }
  if (v.reason != XFED__TASK_REFUSAL__REASON__UNSPECIFIED) abort();
  snprintf(s->job, sizeof(s->job), "%s", o->job_id);
  s->round = o->round;
  s->attempt = o->attempt;
  s->hold = o->hold;
  s->go = false;
  s->evaluate_only = o->evaluate_only;
  s->spec = v.spec;
  s->n_params = v.n_params;
  s->plan = v.plan;
  s->secagg = v.secagg;
  s->uo = v.uo;
  xf_site_plan_keep(&s->residency, o->residency);
  xf_site_dataset_free(&v.dataset);
  s->has_task = true;
  if (!s->uo.secagg) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = secagg_begin(s, o->secagg, &err);
  said(rc, &err);
  if (rc != XF_OK) task_drop(s);
}

static bool is_task(const site *s, const char *job, uint32_t round, uint32_t attempt) {
  return s->has_task && job && strcmp(s->job, job) == 0 && s->round == round &&
         s->attempt == attempt;
}

static void on_go(site *s, const Xfed__TaskGo *g) {
  if (!is_task(s, g->job_id, g->round, g->attempt) || s->go || !s->hold) return;
  xf_site_go_task held = {.spec = &s->spec, .plan_kept = &s->residency, .privacy = &s->plan,
                          .n_params = s->n_params, .evaluate_only = s->evaluate_only,
                          .secagg = s->secagg};
  xf_site_go_verdict v;
  xf_site_go_check(&fz_env, &held, g, &s->uo, &v);
  if (v.step != XF_SITE_GO_FOLLOWED) {
    if (v.reason == XFED__TASK_REFUSAL__REASON__UNSPECIFIED || !v.why[0]) abort();
    task_drop(s);
    return;
  }
  if (v.begin) {
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = secagg_begin(s, g->secagg, &err);
    said(rc, &err);
    if (rc != XF_OK) {
      task_drop(s);
      return;
    }
  }
  s->go = true;
}

static bool is_round(const site *s, const char *job, uint32_t round, uint32_t attempt) {
  return is_task(s, job, round, attempt) && xf_site_sa_has(s->sa, job, round, attempt);
}

static void on_keys(site *s, const Xfed__SecAggKeys *k) {
  if (!is_round(s, k->job_id, k->round, k->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_secagg_signed_share *msgs = NULL;
  size_t count = 0;
  xf_err rc = xf_site_sa_keys(s->sa, k, &msgs, &count, &err);
  said(rc, &err);
  if (rc == XF_OK) {
    /* Each share goes to another member of the cohort. */
    if (count > s->uo.sa.params.degree) abort();
    for (size_t i = 0; i < count; i++)
      if (msgs[i].to < 1 || msgs[i].to > s->uo.sa.params.n || msgs[i].to == s->uo.sa.index)
        abort();
  } else {
    sa_forget(s);
  }
  xf_site_sa_shares_free(msgs, count);
}

static void on_routed(site *s, const Xfed__SecAggRouted *r) {
  if (!is_round(s, r->job_id, r->round, r->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_site_sa_routed_in(s->sa, r, &err);
  said(rc, &err);
  if (rc != XF_OK) sa_forget(s);
  else if (!xf_site_sa_routed(s->sa, r->job_id, r->round, r->attempt)) abort();
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
  xf_err rc = xf_site_sa_check(s->sa, c, sig, &err);
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
  uint8_t *out = NULL;
  size_t len = 0, cap = 0;
  xf_err rc = xf_site_sa_unmask(s->sa, u, &out, &len, &cap, &err);
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
  xf_site_sa_reveal_free(out, cap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_begin(4);
  site s;
  memset(&s, 0, sizeof(s));
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_sa_new(1, &s.sa, &err) != XF_OK) abort();
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
  xf_site_sa_free(s.sa);
  return 0;
}
