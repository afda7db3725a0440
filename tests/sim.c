/* SPDX-License-Identifier: Apache-2.0 */
/* A federation without sockets (tests/sim.h): the real job machines,
 * admission, residency decision, update pipeline, secure aggregation,
 * aggregator, accountant and ledger, wired by a message queue instead of
 * the daemons. */
#include "sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "coordinator/aggregate.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/residency.h"
#include "kernels/backend.h"
#include "kernels/model.h"
#include "kernels/net.h"
#include "kernels/train.h"
#include "policy/policy.h"
#include "privacy/accountant.h"
#include "privacy/ledger.h"
#include "privacy/noise.h"
#include "storage/db.h"
#include "update/update.h"
#include "sa_identity.h"

#define FEATURES 8
#define CLASSES 2
#define TRAIN_N 96
#define TEST_N 48
#define JOB_ID "1"
#define DATASET "synth"

/* ---- the world ------------------------------------------------------------------------------------ */

typedef struct host host;

typedef struct site {
  sim_site_cfg cfg;
  char name[SIM_NAME_MAX], region[SIM_NAME_MAX], via[SIM_NAME_MAX];
  uint64_t id, via_id;
  xf_db *ledger;
  float x[TRAIN_N * FEATURES], xt[TEST_N * FEATURES];
  int32_t y[TRAIN_N], yt[TEST_N];
  float *residual;
  /* the task */
  host *host;
  bool has_task;
  uint32_t round, attempt;
  xf_release_rule cond;
  bool has_cond;
  char cond_rule[64];
  xf_privacy_plan plan;
  xf_privacy_charge charge;
  xf_test_signer signer;
  xf_secagg_guard *sa; /* the client a site runs, checking what its aggregator relays */
  uint32_t sa_bits;
  xf_update_payload payload;
  bool has_payload;
  sim_site_result *res;
} site;

struct host {
  uint64_t id; /* 0: the global coordinator, else its regional aggregator's */
  char name[SIM_NAME_MAX];
  bool relay;
  xf_jobm *m;
  xf_aggregator *agg;
  float *mean;  /* relay: the region's aggregate between COMMIT and FORWARD */
  uint64_t mean_weight;
  uint32_t relay_round, relay_attempt;
  xf_release_rule release;
  bool has_release;
  char rel_rule[64], rel_from[64], rel_to[64];
  /* global: the sites whose updates are in the open attempt's aggregate */
  uint64_t used[SIM_SITES_MAX];
  size_t n_used;
  /* when it was last planned (host.c's rule: again when it moved on) */
  bool planned;
  uint32_t planned_round, planned_attempt;
  xf_jobm_phase planned_phase;
  double planned_at;
};

typedef enum ev_kind {
  E_PLAN = 0, E_ACCEPT, E_REFUSE, E_REPORT, E_DROP, E_SA_ADVERT, E_SA_SHARES, E_SA_MASKED,
  E_SA_CHECK_SIG, E_SA_REFUSED, E_SA_REVEAL, E_EVALUATED, E_GO, E_CANCEL
} ev_kind;

typedef struct event {
  ev_kind kind;
  host *to;
  uint64_t carrier;
  uint64_t site;
  xf_jobm_refusal why;
  char details[1200];
  uint64_t *sites;
  size_t n_sites;
  uint8_t *bytes; /* payload; keys: advert, signature, certificate; shares: (ciphertext,
                     signature) each; the signature of U3; reveal */
  size_t len;
  uint32_t *words;
  size_t n_words;
  uint32_t *to_idx; /* shares: receivers */
  size_t n_to;
  bool encoded;
  uint64_t weight;
  struct event *next;
} event;

typedef struct world {
  const sim_config *cfg;
  sim_result *res;
  xf_jobspec spec;
  double now;
  xf_backend *backend;
  xf_model *model;
  size_t n_params;
  float *params;
  xf_server_opt *opt;
  xf_noise *noise;
  xf_policy *policy;
  site sites[SIM_SITES_MAX];
  size_t n_sites;
  host global;
  host regionals[SIM_SITES_MAX];
  size_t n_regionals;
  event *head, *tail;
  bool failed;
} world;

static void fail_harness(world *w, const char *fmt, ...) XF_PRINTF(2, 3);
static void fail_harness(world *w, const char *fmt, ...) {
  if (w->failed) return;
  w->failed = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->res->message, sizeof(w->res->message), fmt, ap);
  va_end(ap);
}

static event *ev_new(world *w, ev_kind kind, host *to, uint64_t carrier) {
  event *e = xf_calloc(1, sizeof(*e));
  if (!e) {
    fail_harness(w, "out of memory");
    return NULL;
  }
  e->kind = kind;
  e->to = to;
  e->carrier = carrier;
  if (w->tail) w->tail->next = e;
  else w->head = e;
  w->tail = e;
  return e;
}

static void ev_free(event *e) {
  xf_free(e->sites);
  xf_free(e->bytes);
  xf_free(e->words);
  xf_free(e->to_idx);
  xf_free(e);
}

static site *site_by_id(world *w, uint64_t id) {
  for (size_t i = 0; i < w->n_sites; i++)
    if (w->sites[i].id == id) return &w->sites[i];
  return NULL;
}

static host *regional_by_id(world *w, uint64_t id) {
  for (size_t i = 0; i < w->n_regionals; i++)
    if (w->regionals[i].id == id) return &w->regionals[i];
  return NULL;
}

/* ---- data ------------------------------------------------------------------------------------------ */

/* Two Gaussian classes in 8 dimensions, each site shifted a little. */
static void make_data(world *w, site *s, uint32_t index) {
  xf_rng rng;
  xf_rng_seed(&rng, w->cfg->data_seed, 1000 + index);
  for (int set = 0; set < 2; set++) {
    size_t n = set ? TEST_N : TRAIN_N;
    float *x = set ? s->xt : s->x;
    int32_t *y = set ? s->yt : s->y;
    for (size_t i = 0; i < n; i++) {
      int32_t c = (int32_t)xf_rng_below(&rng, 2);
      y[i] = c;
      for (size_t f = 0; f < FEATURES; f++) {
        double u1 = (xf_rng_below(&rng, 1u << 30) + 1.0) / (double)(1u << 30);
        double u2 = xf_rng_below(&rng, 1u << 30) / (double)(1u << 30);
        double g = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
        double mu = (f % 2 == 0 ? (c ? 1.0 : -1.0) : 0.0) + 0.1 * (double)(index % 3);
        x[i * FEATURES + f] = (float)(mu + g);
      }
    }
  }
}

/* ---- the global coordinator's plan ----------------------------------------------------------------- */

static void plan_for(world *w, host *h) {
  h->planned = true;
  h->planned_round = xf_jobm_round(h->m);
  h->planned_attempt = xf_jobm_attempt(h->m);
  h->planned_phase = xf_jobm_get_phase(h->m);
  h->planned_at = w->now;
  xf_fed_dataset d = {.name = DATASET, .tags = NULL, .n_tags = 0, .train_records = TRAIN_N,
                      .test_records = TEST_N, .classes = CLASSES, .h = 1, .w = FEATURES, .c = 1};
  xf_fed_site fs[SIM_SITES_MAX];
  size_t n = 0;
  for (size_t i = 0; i < w->n_sites; i++) {
    site *s = &w->sites[i];
    if (h->relay && s->via_id != h->id) continue;
    fs[n++] = (xf_fed_site){.name = s->name,
                            .region = s->region,
                            .via = h->relay || !s->via[0] ? NULL : s->via,
                            .via_region = h->relay || !s->via[0] ? NULL : s->region,
                            .connected = true,
                            .datasets = &d,
                            .n_datasets = 1};
  }
  xf_federation fed = {.sites = fs,
                       .n_sites = n,
                       .coordinator_region = w->cfg->coordinator_region
                                                 ? w->cfg->coordinator_region
                                                 : "",
                       .residency_on = !h->relay && w->policy != NULL};
  xf_admission a;
  xf_errctx err = {0};
  xf_policy_decision dec;
  memset(&dec, 0, sizeof(dec));
  bool has_dec = false;
  if (fed.residency_on) {
    xf_policy_job job;
    const char *tags[XF_JOB_TAGS_MAX];
    xf_err rc = xf_residency_job_of(&w->spec, fed.coordinator_region, tags, &job, &err);
    if (rc == XF_OK) rc = xf_policy_decide(w->policy, &job, w->now, &dec, &err);
    if (rc != XF_OK) {
      memset(&a, 0, sizeof(a));
      a.verdict = XF_ADMIT_DENIED;
      a.has_policy = true;
      snprintf(a.reason, sizeof(a.reason), "%s", err.msg);
      if (xf_jobm_plan(h->m, &a, w->now, &err) != XF_OK) fail_harness(w, "plan: %s", err.msg);
      return;
    }
    has_dec = true;
  }
  if (xf_admission_decide(&w->spec, has_dec ? &dec : NULL, &fed, &a, &err) != XF_OK) {
    fail_harness(w, "admission: %s", err.msg);
    xf_policy_decision_free(&dec);
    return;
  }
  xf_policy_decision_free(&dec);
  if (xf_jobm_plan(h->m, &a, w->now, &err) != XF_OK) fail_harness(w, "plan: %s", err.msg);
  xf_admission_free(&a);
}

/* The release conditions the global plan puts on a regional's group. */
static bool group_release(world *w, uint64_t via, xf_release_rule *out, char *rule, char *from,
                          char *to) {
  if (!w->policy) return false;
  xf_fed_dataset d = {.name = DATASET, .train_records = TRAIN_N, .test_records = TEST_N,
                      .classes = CLASSES, .h = 1, .w = FEATURES, .c = 1};
  xf_fed_site fs[SIM_SITES_MAX];
  for (size_t i = 0; i < w->n_sites; i++) {
    site *s = &w->sites[i];
    fs[i] = (xf_fed_site){.name = s->name, .region = s->region,
                          .via = s->via[0] ? s->via : NULL, .via_region = s->region,
                          .connected = true, .datasets = &d, .n_datasets = 1};
  }
  xf_federation fed = {.sites = fs, .n_sites = w->n_sites,
                       .coordinator_region = w->cfg->coordinator_region, .residency_on = true};
  xf_policy_job job;
  const char *tags[XF_JOB_TAGS_MAX];
  xf_errctx err = {0};
  xf_policy_decision dec;
  if (xf_residency_job_of(&w->spec, fed.coordinator_region, tags, &job, &err) != XF_OK ||
      xf_policy_decide(w->policy, &job, w->now, &dec, &err) != XF_OK)
    return false;
  xf_admission a;
  bool found = false;
  if (xf_admission_decide(&w->spec, &dec, &fed, &a, &err) == XF_OK) {
    for (size_t g = 0; g < a.n_groups; g++)
      if (a.groups[g].via_id == via && strcmp(a.groups[g].path, "regional") == 0) {
        xf_admit_group_release(&a.groups[g], out);
        snprintf(rule, 64, "%s", out->rule);
        snprintf(from, 64, "%s", out->from);
        snprintf(to, 64, "%s", out->to);
        out->rule = rule;
        out->from = from;
        out->to = to;
        found = true;
      }
    xf_admission_free(&a);
  }
  xf_policy_decision_free(&dec);
  return found;
}

/* ---- sites ----------------------------------------------------------------------------------------- */

static void site_clear(site *s) {
  xf_secagg_guard_free(s->sa);
  s->sa = NULL;
  if (s->has_payload) xf_update_payload_free(&s->payload);
  s->has_payload = false;
  s->has_task = false;
}

/* What the site answers to: its regional aggregator or the coordinator. */
static uint64_t carrier_for(const site *s) { return s->id; }

static void site_refuse(world *w, site *s, xf_jobm_refusal why, const char *fmt, ...)
    XF_PRINTF(4, 5);
static void site_refuse(world *w, site *s, xf_jobm_refusal why, const char *fmt, ...) {
  event *e = ev_new(w, E_REFUSE, s->host, carrier_for(s));
  if (!e) return;
  e->site = 0;
  e->why = why;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->details, sizeof(e->details), fmt, ap);
  va_end(ap);
  site_clear(s);
}

static void site_offer(world *w, site *s, host *h, const xf_jobm_action *a,
                       const xf_release_rule *cond) {
  if (s->cfg.silent) return;
  site_clear(s);
  s->host = h;
  s->has_task = true;
  s->round = a->round;
  s->attempt = a->attempt;
  if (s->cfg.refuse_policy) {
    site_refuse(w, s, XF_JOBM_REFUSED_POLICY,
                "rule %s-stays (site-local policy) denies its updates leaving region %s", s->name,
                s->region);
    return;
  }
  xf_errctx err = {0};
  if (xf_job_privacy_plan(&w->spec, TRAIN_N, w->n_params, &s->plan, &err) != XF_OK) {
    site_refuse(w, s, XF_JOBM_REFUSED_OTHER, "%s", err.msg);
    return;
  }
  const xf_privacy_spec *pv = &w->spec.privacy;
  if (s->plan.site_noise) {
    s->charge = (xf_privacy_charge){.sampling_rate = s->plan.sampling_rate,
                                    .noise_multiplier = s->plan.accounted_multiplier,
                                    .steps = s->plan.steps_per_round};
    double total = 0, job = 0;
    if (xf_ledger_epsilon(s->ledger, DATASET, NULL, &s->charge, pv->delta, &total, &err) != XF_OK ||
        xf_ledger_epsilon(s->ledger, DATASET, JOB_ID, &s->charge, pv->delta, &job, &err) != XF_OK) {
      site_refuse(w, s, XF_JOBM_REFUSED_OTHER, "ledger: %s", err.msg);
      return;
    }
    if (s->cfg.budget_epsilon > 0 && total > s->cfg.budget_epsilon) {
      site_refuse(w, s, XF_JOBM_REFUSED_BUDGET,
                  "dataset '%s' at site %s: round %u would take its epsilon to %.4g, above its "
                  "budget %.4g",
                  DATASET, s->name, (unsigned)a->round, total, s->cfg.budget_epsilon);
      return;
    }
    if (pv->has_target_epsilon && job > pv->target_epsilon * (1 + 1e-9)) {
      site_refuse(w, s, XF_JOBM_REFUSED_TARGET,
                  "round %u would take this job's epsilon on '%s' at %s to %.4g, above its "
                  "target %.4g",
                  (unsigned)a->round, DATASET, s->name, job, pv->target_epsilon);
      return;
    }
  }
  if (cond) {
    xf_release_artifact art = {.contributors = cond->min_cohort ? cond->min_cohort : 1,
                               .secagg = w->spec.secure_aggregation.enabled,
                               .privacy = pv->mode != XF_PRIVACY_NONE,
                               .has_epsilon = pv->has_target_epsilon,
                               .epsilon = pv->target_epsilon};
    char why[400];
    if (!xf_release_allows(cond, &art, why, sizeof(why))) {
      site_refuse(w, s, XF_JOBM_REFUSED_POLICY, "%s", why);
      return;
    }
  }
  (void)ev_new(w, E_ACCEPT, h, carrier_for(s));
  if (s->cfg.drop_after_accept) (void)ev_new(w, E_DROP, h, carrier_for(s));
}

static void site_release(world *w, site *s) {
  if (!s->plan.site_noise) return;
  xf_errctx err = {0};
  if (xf_ledger_charge(s->ledger, DATASET, JOB_ID, s->round, s->attempt, &s->charge, 0, &err) !=
      XF_OK)
    fail_harness(w, "ledger charge at %s: %s", s->name, err.msg);
  s->res->charged++;
}

static void site_go(world *w, site *s, const xf_jobm_action *a) {
  if (!s->has_task || s->cfg.drop_after_accept) return;
  xf_errctx err = {0};
  xf_net *net = NULL;
  xf_noise *noise = NULL;
  float *local = xf_mallocarray(w->n_params, sizeof(float));
  uint8_t seed[XF_NOISE_SEED_BYTES] = {0};
  memcpy(seed, &s->id, sizeof(s->id));
  seed[8] = (uint8_t)s->round;
  seed[9] = (uint8_t)s->attempt;
  if (!local || xf_noise_new_seeded(seed, &noise) != XF_OK ||
      xf_net_create(w->backend, w->model, (int)w->spec.local.batch_size, &net, &err) != XF_OK ||
      xf_net_set_params(net, w->params) != XF_OK) {
    fail_harness(w, "training set-up at %s: %s", s->name, err.msg);
    goto out;
  }
  xf_noise_use_table(noise, s->plan.table_sampler); /* as the site does */
  const xf_privacy_spec *pv = &w->spec.privacy;
  bool record = s->plan.site_noise && pv->unit == XF_PRIVACY_UNIT_RECORD;
  xf_dp_sgd dp = {.clip = pv->clip, .noise_multiplier = s->plan.noise_multiplier,
                  .expected_batch = (int)w->spec.local.batch_size, .noise = noise};
  xf_train_options opt = {.epochs = (int)w->spec.local.epochs,
                          .batch_size = (int)w->spec.local.batch_size,
                          .sgd = {.lr = (float)w->spec.local.lr},
                          .seed = s->id ^ s->round,
                          .dp = record ? &dp : NULL};
  xf_samples train = {s->x, s->y, TRAIN_N, FEATURES};
  if (xf_train(net, &train, &opt, &err) != XF_OK || xf_net_get_params(net, local) != XF_OK) {
    fail_harness(w, "training at %s: %s", s->name, err.msg);
    goto out;
  }
  s->res->trained++;
  xf_update_delta(local, w->params, w->n_params);
  xf_update_offer offer = {.secagg = a->has_secagg, .sa = a->secagg,
                           .rounding_seed = s->id ^ ((uint64_t)s->round << 32)};
  xf_update_plan plan;
  if (xf_update_plan_site(&w->spec, &s->plan, w->n_params, &offer, 1, &plan, &err) != XF_OK) {
    fail_harness(w, "update plan at %s: %s", s->name, err.msg);
    goto out;
  }
  if (plan.residual && !s->residual) s->residual = xf_calloc(w->n_params, sizeof(float));
  if (xf_update_prepare(&plan, local, plan.residual ? s->residual : NULL, noise, NULL, 0,
                        &s->payload, &err) != XF_OK) {
    fail_harness(w, "update at %s: %s", s->name, err.msg);
    goto out;
  }
  s->has_payload = true;
  if (a->has_secagg) {
    s->sa_bits = a->secagg.params.bits;
    /* The cohort's names, as the Go's setup carries them. */
    const char *cohort[SIM_SITES_MAX];
    for (size_t i = 0; i < a->n_sites && i < SIM_SITES_MAX; i++) {
      const site *m = site_by_id(w, a->sites[i]);
      cohort[i] = m ? m->name : "?";
    }
    xf_secagg_session session = {.job = JOB_ID, .round = s->round, .attempt = s->attempt,
                                 .params = a->secagg.params, .cohort = cohort};
    xf_secagg_identity id = xf_test_signer_identity(&s->signer, s->name);
    if (a->n_sites != a->secagg.params.n ||
        xf_secagg_guard_new(&session, a->secagg.index, &id, &s->sa, &err) != XF_OK) {
      fail_harness(w, "secagg client at %s (cohort of %zu): %s", s->name, a->n_sites, err.msg);
      goto out;
    }
    size_t name_len = strlen(s->name);
    event *e = ev_new(w, E_SA_ADVERT, s->host, s->id);
    if (e && (e->bytes = xf_malloc(XF_SECAGG_ADVERT_BYTES + XF_SECAGG_SIG_BYTES + name_len))) {
      if (xf_secagg_guard_advertise(s->sa, e->bytes, e->bytes + XF_SECAGG_ADVERT_BYTES, &err) !=
          XF_OK)
        fail_harness(w, "keys at %s: %s", s->name, err.msg);
      memcpy(e->bytes + XF_SECAGG_ADVERT_BYTES + XF_SECAGG_SIG_BYTES, s->name, name_len);
      e->len = XF_SECAGG_ADVERT_BYTES + XF_SECAGG_SIG_BYTES + name_len;
    }
    goto out;
  }
  site_release(w, s);
  event *e = ev_new(w, E_REPORT, s->host, s->id);
  if (e && (e->bytes = xf_malloc(s->payload.plain_len ? s->payload.plain_len : 1))) {
    memcpy(e->bytes, s->payload.plain, s->payload.plain_len);
    e->len = s->payload.plain_len;
    e->encoded = s->payload.form == XF_UPDATE_ENCODED;
    e->weight = TRAIN_N;
  }
  site_clear(s);
out:
  xf_net_free(net);
  xf_noise_free(noise);
  xf_free(local);
}

/* A share travels as its ciphertext and its sender's signature. */
#define SIM_SHARE_BYTES (XF_SECAGG_SHARE_BYTES + XF_SECAGG_SIG_BYTES)

static void site_keys(world *w, site *s, const xf_jobm_action *a) {
  if (!s->sa) return;
  xf_secagg_signed_share msgs[SIM_SITES_MAX];
  xf_secagg_member_keys keys[SIM_SITES_MAX];
  size_t n = 0, members = a->blob_len / XF_SECAGG_ADVERT_BYTES;
  xf_errctx err = {0};
  if (members > SIM_SITES_MAX || a->n_sigs != members) {
    fail_harness(w, "keys at %s: %zu adverts and %zu signatures", s->name, members, a->n_sigs);
    return;
  }
  for (size_t i = 0, at = 0; i < members; at += a->cert_lens[i], i++)
    keys[i] = (xf_secagg_member_keys){.advert = a->blob + i * XF_SECAGG_ADVERT_BYTES,
                                      .sig = a->sigs + i * XF_SECAGG_SIG_BYTES,
                                      .cert = a->cert_lens[i] ? a->certs + at : NULL,
                                      .cert_len = a->cert_lens[i]};
  if (xf_secagg_guard_share(s->sa, keys, msgs, SIM_SITES_MAX, &n, &err) != XF_OK) {
    fail_harness(w, "shares at %s: %s", s->name, err.msg);
    return;
  }
  event *e = ev_new(w, E_SA_SHARES, s->host, s->id);
  if (!e) return;
  e->to_idx = xf_mallocarray(n ? n : 1, sizeof(uint32_t));
  e->bytes = xf_malloc(n ? n * SIM_SHARE_BYTES : 1);
  if (!e->to_idx || !e->bytes) return;
  for (size_t i = 0; i < n; i++) {
    e->to_idx[i] = msgs[i].to;
    memcpy(e->bytes + i * SIM_SHARE_BYTES, msgs[i].ciphertext, XF_SECAGG_SHARE_BYTES);
    memcpy(e->bytes + i * SIM_SHARE_BYTES + XF_SECAGG_SHARE_BYTES, msgs[i].sig,
           XF_SECAGG_SIG_BYTES);
  }
  e->n_to = n;
}

static void site_routed(world *w, site *s, const xf_jobm_action *a) {
  if (!s->sa || !s->has_payload) return;
  xf_errctx err = {0};
  if (a->n_sigs != a->n_from) {
    fail_harness(w, "routed shares at %s: %zu shares, %zu signatures", s->name, a->n_from,
                 a->n_sigs);
    return;
  }
  for (size_t i = 0; i < a->n_from; i++)
    if (xf_secagg_guard_receive(s->sa, a->from[i], a->blob + i * XF_SECAGG_SHARE_BYTES,
                                a->sigs + i * XF_SECAGG_SIG_BYTES, &err) != XF_OK) {
      fail_harness(w, "routed shares at %s: %s", s->name, err.msg);
      return;
    }
  if (xf_secagg_guard_routed(s->sa, a->u, a->n_u, &err) != XF_OK ||
      xf_update_mask(&s->payload, xf_secagg_guard_client(s->sa), s->sa_bits, &err) != XF_OK) {
    fail_harness(w, "masking at %s: %s", s->name, err.msg);
    return;
  }
  site_release(w, s);
  event *e = ev_new(w, E_SA_MASKED, s->host, s->id);
  if (e && (e->words = xf_mallocarray(s->payload.n_words ? s->payload.n_words : 1,
                                      sizeof(uint32_t)))) {
    memcpy(e->words, s->payload.words, s->payload.n_words * sizeof(uint32_t));
    e->n_words = s->payload.n_words;
    e->weight = TRAIN_N;
  }
}

/* The consistency round: the site signs the survivor set it is told. */
static void site_check(world *w, site *s, const xf_jobm_action *a) {
  if (!s->sa) return;
  xf_errctx err = {0};
  if (s->cfg.refuse_survivors) {
    /* As the daemon does: it says why, forgets the round and its task. */
    event *e = ev_new(w, E_SA_REFUSED, s->host, s->id);
    if (e)
      snprintf(e->details, sizeof(e->details),
               "%s: secagg survivors: refusing to sign the survivor set of %zu sites (in phase "
               "check)",
               s->name, a->n_u);
    site_clear(s);
    return;
  }
  event *e = ev_new(w, E_SA_CHECK_SIG, s->host, s->id);
  if (!e || !(e->bytes = xf_malloc(XF_SECAGG_SIG_BYTES))) return;
  e->len = XF_SECAGG_SIG_BYTES;
  if (xf_secagg_guard_sign_survivors(s->sa, a->u, a->n_u, e->bytes, &err) != XF_OK)
    fail_harness(w, "signing the survivors at %s: %s", s->name, err.msg);
}

static void site_unmask(world *w, site *s, const xf_jobm_action *a) {
  if (!s->sa) return;
  uint8_t *buf = xf_malloc(1 << 16);
  size_t len = 0;
  xf_errctx err = {0};
  if (!buf || a->n_sigs != a->n_from ||
      xf_secagg_guard_unmask(s->sa, a->u, a->n_u, a->from, a->sigs, a->n_from, buf, 1 << 16,
                             &len, &err) != XF_OK) {
    xf_free(buf);
    fail_harness(w, "reveal at %s: %s", s->name, err.msg);
    return;
  }
  event *e = ev_new(w, E_SA_REVEAL, s->host, s->id);
  if (e) {
    e->bytes = buf;
    e->len = len;
  } else {
    xf_free(buf);
  }
}

/* ---- hosts: the machines' actions ---------------------------------------------------------------- */

static void run_actions(world *w, host *h);

static host *relay_open(world *w, host *g, const xf_jobm_action *a) {
  host *r = regional_by_id(w, a->carrier);
  if (!r) {
    fail_harness(w, "offer to unknown carrier %llu", (unsigned long long)a->carrier);
    return NULL;
  }
  xf_jobm_free(r->m);
  r->m = NULL;
  xf_aggregator_free(r->agg);
  r->agg = NULL;
  r->has_release = group_release(w, r->id, &r->release, r->rel_rule, r->rel_from, r->rel_to);
  xf_jobm_config cfg = {.role = XF_JOBM_RELAY,
                        .spec = &w->spec,
                        .round = a->round,
                        .attempt = 1,
                        .n_params = w->n_params,
                        .deadline = a->deadline,
                        .answer_by = a->answer_by,
                        .release = r->has_release ? &r->release : NULL,
                        .cohort = a->sites,
                        .n_cohort = a->n_sites};
  r->relay_round = a->round;
  r->relay_attempt = a->attempt;
  r->planned = false;
  xf_errctx err = {0};
  if (xf_jobm_create(&cfg, &r->m, &err) != XF_OK) {
    fail_harness(w, "relay machine: %s", err.msg);
    return NULL;
  }
  (void)g;
  (void)ev_new(w, E_PLAN, r, 0);
  return r;
}

/* The mean the attempt's updates make (the aggregator and the secure sum). */
static bool form_mean(world *w, host *h, float **out, uint64_t *weight) {
  xf_errctx err = {0};
  float *sa = NULL;
  uint64_t sa_w = 0;
  bool has_sa = xf_jobm_take_secure_mean(h->m, &sa, &sa_w, NULL);
  if (has_sa && (!h->agg || xf_aggregator_committed(h->agg) == 0)) {
    *out = sa;
    *weight = sa_w;
    return true;
  }
  if (has_sa) {
    xf_agg_update *u = NULL;
    if (xf_aggregator_begin_update(h->agg, UINT64_MAX >> 1, sa_w ? sa_w : 1, &u, &err) != XF_OK ||
        xf_aggregator_fold(u, 0, sa, w->n_params, &err) != XF_OK ||
        xf_aggregator_end_update(u, &err) != XF_OK) {
      xf_free(sa);
      fail_harness(w, "folding the secure sum: %s", err.msg);
      return false;
    }
    xf_free(sa);
  }
  float *mean = xf_mallocarray(w->n_params, sizeof(float));
  if (!mean || !h->agg || xf_aggregator_finish(h->agg, mean, &err) != XF_OK) {
    xf_free(mean);
    fail_harness(w, "finishing the aggregate: %s", err.msg);
    return false;
  }
  *out = mean;
  *weight = xf_aggregator_total_weight(h->agg);
  return true;
}

static void commit(world *w, host *h, const xf_jobm_action *a) {
  xf_errctx err = {0};
  float *mean = NULL;
  uint64_t weight = 0;
  if (!form_mean(w, h, &mean, &weight)) return;
  if (h->relay) {
    xf_free(h->mean);
    h->mean = mean;
    h->mean_weight = weight;
  } else {
    const xf_privacy_spec *pv = &w->spec.privacy;
    if (pv->unit == XF_PRIVACY_UNIT_SITE && pv->mode == XF_PRIVACY_CENTRAL &&
        pv->has_noise_multiplier) {
      double sd, n = a->samples ? (double)a->samples : 1;
      if (xf_privacy_grid_sigma(pv->noise_multiplier, pv->clip / n, w->n_params, &sd, &err) !=
              XF_OK ||
          xf_noise_gaussian_vec(w->noise, sd, mean, w->n_params) != XF_OK) {
        xf_free(mean);
        fail_harness(w, "central noise: %s", err.msg);
        return;
      }
    }
    xf_server_opt_step(w->opt, w->params, mean);
    xf_free(mean);
    for (size_t i = 0; i < h->n_used; i++) {
      site *s = site_by_id(w, h->used[i]);
      if (s) s->res->used++;
    }
    w->res->weight_last = weight;
  }
  xf_aggregator_free(h->agg);
  h->agg = NULL;
  h->n_used = 0;
  if (xf_jobm_committed(h->m, w->now, &err) != XF_OK) fail_harness(w, "committed: %s", err.msg);
}

static void note_used(host *h, const uint64_t *sites, size_t n) {
  for (size_t i = 0; i < n && h->n_used < SIM_SITES_MAX; i++) h->used[h->n_used++] = sites[i];
}

static void take_action(world *w, host *h, const xf_jobm_action *a) {
  xf_errctx err = {0};
  site *s = a->carrier ? site_by_id(w, a->carrier) : NULL;
  host *r = a->carrier && !s ? regional_by_id(w, a->carrier) : NULL;
  switch (a->kind) {
  case XF_JOBM_OPENED:
    xf_aggregator_free(h->agg);
    h->agg = NULL;
    h->n_used = 0;
    if (xf_aggregator_create(&w->spec.strategy, w->n_params, SIM_SITES_MAX, &h->agg, &err) !=
        XF_OK)
      fail_harness(w, "aggregator: %s", err.msg);
    if (!h->relay) {
      w->res->attempts++;
      if (a->n_sites > w->res->max_invited) w->res->max_invited = (uint32_t)a->n_sites;
    }
    return;
  case XF_JOBM_OFFER:
    if (s) site_offer(w, s, h, a, h->relay && h->has_release ? &h->release : NULL);
    else if (r && !h->relay) (void)relay_open(w, h, a);
    return;
  case XF_JOBM_GO:
    if (s) site_go(w, s, a);
    else if (r) (void)ev_new(w, E_GO, r, 0);
    return;
  case XF_JOBM_CANCEL:
  case XF_JOBM_DISCARD:
    if (a->kind == XF_JOBM_DISCARD && a->refusal == XF_JOBM_REFUSED_POLICY) w->res->held_aggregates++;
    if (s) site_clear(s);
    else if (r) (void)ev_new(w, E_CANCEL, r, 0);
    return;
  case XF_JOBM_SA_KEYS: if (s) site_keys(w, s, a); return;
  case XF_JOBM_SA_ROUTED: if (s) site_routed(w, s, a); return;
  case XF_JOBM_SA_CHECK: if (s) site_check(w, s, a); return;
  case XF_JOBM_SA_UNMASK: if (s) site_unmask(w, s, a); return;
  case XF_JOBM_COMMIT: commit(w, h, a); return;
  case XF_JOBM_EVALUATE:
    if (s || r) (void)ev_new(w, E_EVALUATED, h, a->carrier);
    return;
  case XF_JOBM_ACCEPT_UP: {
    event *e = ev_new(w, E_ACCEPT, &w->global, h->id);
    if (e && a->n_sites && (e->sites = xf_mallocarray(a->n_sites, sizeof(uint64_t)))) {
      memcpy(e->sites, a->sites, a->n_sites * sizeof(uint64_t));
      e->n_sites = a->n_sites;
    } else if (e && a->n_sites) {
      fail_harness(w, "out of memory copying an acceptance's sites");
    }
    return;
  }
  case XF_JOBM_REFUSE_UP: {
    if (!a->site && a->refusal == XF_JOBM_REFUSED_POLICY) w->res->held_aggregates++;
    event *e = ev_new(w, E_REFUSE, &w->global, h->id);
    if (e) {
      e->site = a->site;
      e->why = a->refusal;
      snprintf(e->details, sizeof(e->details), "%.1100s", a->note);
    }
    return;
  }
  case XF_JOBM_FORWARD: {
    /* The region's aggregate through the update pipeline, as upstream.c does. */
    xf_update_offer offer = {.rounding_seed = h->id ^ h->relay_round};
    xf_update_plan plan;
    xf_update_payload pl;
    float *residual = NULL;
    if (xf_update_plan_aggregate(&w->spec, w->n_params, &offer, &plan, &err) != XF_OK) {
      fail_harness(w, "aggregate plan: %s", err.msg);
      return;
    }
    if (plan.residual) residual = xf_calloc(w->n_params, sizeof(float));
    if (xf_update_prepare(&plan, h->mean, residual, NULL, NULL, 0, &pl, &err) != XF_OK) {
      xf_free(residual);
      fail_harness(w, "aggregate: %s", err.msg);
      return;
    }
    xf_free(residual);
    event *e = ev_new(w, E_REPORT, &w->global, h->id);
    if (e) {
      e->bytes = xf_malloc(pl.plain_len ? pl.plain_len : 1);
      if (e->bytes) memcpy(e->bytes, pl.plain, pl.plain_len);
      e->len = pl.plain_len;
      e->encoded = pl.form == XF_UPDATE_ENCODED;
      e->weight = a->weight;
      e->sites = xf_mallocarray(a->n_sites ? a->n_sites : 1, sizeof(uint64_t));
      if (e->sites) memcpy(e->sites, a->sites, a->n_sites * sizeof(uint64_t));
      e->n_sites = a->n_sites;
      /* An event half copied must not be delivered: the run ends here. */
      if (!e->bytes || !e->sites) fail_harness(w, "out of memory copying an aggregate");
    }
    xf_update_payload_free(&pl);
    return;
  }
  default: return;
  }
}

static void run_actions(world *w, host *h) {
  for (int guard = 0; guard < 64 && !w->failed; guard++) {
    size_t n;
    const xf_jobm_action *acts = xf_jobm_actions(h->m, &n);
    size_t commit_at = n;
    for (size_t i = 0; i < n && !w->failed; i++) {
      if (acts[i].kind == XF_JOBM_COMMIT) {
        commit_at = i;
        continue;
      }
      take_action(w, h, &acts[i]);
    }
    if (commit_at < n) {
      xf_jobm_action a = acts[commit_at];
      take_action(w, h, &a);
      continue;
    }
    if (xf_jobm_wants_plan(h->m) &&
        (!h->planned || xf_jobm_round(h->m) != h->planned_round ||
         xf_jobm_attempt(h->m) != h->planned_attempt ||
         xf_jobm_get_phase(h->m) != h->planned_phase || w->now - h->planned_at >= 10)) {
      h->planned = true; /* asked for once per move */
      h->planned_round = xf_jobm_round(h->m);
      h->planned_attempt = xf_jobm_attempt(h->m);
      h->planned_phase = xf_jobm_get_phase(h->m);
      h->planned_at = w->now;
      (void)ev_new(w, E_PLAN, h, 0);
    }
    break;
  }
}

/* An update arrives whole at host h from carrier. */
static void deliver_report(world *w, host *h, event *e) {
  xf_errctx err = {0};
  uint64_t self = e->carrier;
  const uint64_t *sites = e->n_sites ? e->sites : &self;
  size_t n = e->n_sites ? e->n_sites : 1;
  if (xf_jobm_announced(h->m, e->carrier, e->n_sites ? e->sites : NULL, e->n_sites, w->now, &err) !=
      XF_OK) {
    fail_harness(w, "announced: %s", err.msg);
    return;
  }
  size_t na;
  const xf_jobm_action *acts = xf_jobm_actions(h->m, &na);
  bool refused = false;
  for (size_t i = 0; i < na; i++) refused |= acts[i].kind == XF_JOBM_DISCARD && acts[i].carrier == e->carrier;
  run_actions(w, h);
  if (refused) return;
  bool masked;
  uint64_t sa_len;
  uint32_t sa_bits;
  if (!xf_jobm_expects_update(h->m, e->carrier, &masked, &sa_len, &sa_bits)) return;
  xf_update_expect ex;
  xf_update_expect_for(&w->spec, w->n_params, false, 0, 0, false, (uint32_t)n, &ex);
  xf_update_announce an = {.bytes = e->encoded, .element_count = e->encoded ? e->len : w->n_params,
                           .total_bytes = e->len, .weight = e->weight};
  xf_update_form form;
  uint64_t plain;
  char why[300];
  if (xf_update_expect_check(&ex, &an, &form, &plain, why, sizeof(why)) != XF_OK) {
    fail_harness(w, "expectations refuse a well-formed update: %s", why);
    return;
  }
  float *values = xf_mallocarray(w->n_params, sizeof(float));
  if (!values) return;
  if (form == XF_UPDATE_ENCODED) {
    if (xf_update_decode(&ex, e->bytes, e->len, values, &err) != XF_OK) {
      xf_free(values);
      fail_harness(w, "decode: %s", err.msg);
      return;
    }
  } else {
    memcpy(values, e->bytes, w->n_params * sizeof(float));
  }
  uint64_t weight = xf_jobm_fold_weight(h->m, e->weight, n);
  xf_agg_update *u = NULL;
  if (xf_aggregator_begin_update(h->agg, e->carrier, weight, &u, &err) != XF_OK ||
      xf_aggregator_fold(u, 0, values, w->n_params, &err) != XF_OK ||
      xf_aggregator_end_update(u, &err) != XF_OK) {
    xf_free(values);
    fail_harness(w, "fold: %s", err.msg);
    return;
  }
  xf_free(values);
  if (!h->relay) note_used(h, sites, n);
  if (xf_jobm_reported(h->m, e->carrier, e->n_sites ? e->sites : NULL, e->n_sites, weight, w->now,
                       &err) != XF_OK)
    fail_harness(w, "reported: %s", err.msg);
}

static void deliver(world *w, event *e) {
  host *h = e->to;
  xf_errctx err = {0};
  xf_err rc = XF_OK;
  if (!h->m) return;
  switch (e->kind) {
  case E_PLAN:
    if (xf_jobm_wants_plan(h->m)) plan_for(w, h);
    break;
  case E_ACCEPT:
    rc = xf_jobm_accepted(h->m, e->carrier, e->sites, e->n_sites, w->now, &err);
    break;
  case E_REFUSE:
    if (!h->relay) {
      w->res->refused_rows++;
      size_t used = strlen(w->res->refusals);
      if (used + 3 < sizeof(w->res->refusals))
        snprintf(w->res->refusals + used, sizeof(w->res->refusals) - used, "%s%.300s",
                 used ? "; " : "", e->details);
    }
    rc = xf_jobm_refused(h->m, e->carrier, e->site, e->why, e->details, w->now, &err);
    break;
  case E_REPORT: deliver_report(w, h, e); break;
  case E_DROP: rc = xf_jobm_dropped(h->m, e->carrier, "left", w->now, &err); break;
  case E_SA_ADVERT: {
    const size_t head = XF_SECAGG_ADVERT_BYTES + XF_SECAGG_SIG_BYTES;
    xf_saphase_keys keys = {.advert = e->bytes,
                            .advert_len = XF_SECAGG_ADVERT_BYTES,
                            .sig = e->bytes + XF_SECAGG_ADVERT_BYTES,
                            .sig_len = XF_SECAGG_SIG_BYTES,
                            .cert = e->bytes + head,
                            .cert_len = e->len - head};
    rc = xf_jobm_sa_advert(h->m, e->carrier, &keys, w->now, &err);
    break;
  }
  case E_SA_SHARES: {
    const uint8_t *cts[SIM_SITES_MAX], *sigs[SIM_SITES_MAX];
    size_t lens[SIM_SITES_MAX], sig_lens[SIM_SITES_MAX];
    size_t n = e->n_to < SIM_SITES_MAX ? e->n_to : SIM_SITES_MAX;
    for (size_t i = 0; i < n; i++) {
      cts[i] = e->bytes + i * SIM_SHARE_BYTES;
      lens[i] = XF_SECAGG_SHARE_BYTES;
      sigs[i] = e->bytes + i * SIM_SHARE_BYTES + XF_SECAGG_SHARE_BYTES;
      sig_lens[i] = XF_SECAGG_SIG_BYTES;
    }
    xf_saphase_shares_msg msg = {e->to_idx, e->n_to, cts, lens, n, sigs, sig_lens, n};
    rc = xf_jobm_sa_shares(h->m, e->carrier, &msg, w->now, &err);
    break;
  }
  case E_SA_CHECK_SIG:
    rc = xf_jobm_sa_check_sig(h->m, e->carrier, e->bytes, e->len, w->now, &err);
    break;
  case E_SA_REFUSED:
    rc = xf_jobm_sa_refused(h->m, e->carrier, e->details, w->now, &err);
    break;
  case E_SA_MASKED: {
    uint32_t *words = e->words;
    e->words = NULL;
    uint64_t self = e->carrier;
    size_t before = h->n_used;
    if (!h->relay) note_used(h, &self, 1);
    rc = xf_jobm_sa_masked(h->m, e->carrier, &words, e->n_words, e->weight, w->now, &err);
    if (words) { /* refused: not in the sum */
      h->n_used = before;
      xf_free(words);
    }
    break;
  }
  case E_SA_REVEAL:
    rc = xf_jobm_sa_reveal(h->m, e->carrier, e->bytes, e->len, w->now, &err);
    break;
  case E_EVALUATED: rc = xf_jobm_evaluated(h->m, e->carrier, w->now, &err); break;
  case E_GO: rc = xf_jobm_go(h->m, w->now, &err); break;
  case E_CANCEL: rc = xf_jobm_cancel(h->m, "cancelled upstream", w->now, &err); break;
  }
  if (rc != XF_OK) fail_harness(w, "event %d: %s", (int)e->kind, err.msg);
  run_actions(w, h);
}

/* ---- the run --------------------------------------------------------------------------------------- */

xf_jobspec sim_spec(uint32_t rounds) {
  xf_jobspec s;
  xf_jobspec_defaults(&s);
  snprintf(s.name, sizeof(s.name), "sim");
  snprintf(s.data.dataset, sizeof(s.data.dataset), DATASET);
  s.model.arch = XF_JOB_ARCH_LOGREG;
  s.rounds = rounds;
  s.min_sites = 2;
  s.round_deadline_s = 600;
  s.local.epochs = 1;
  s.local.batch_size = 16;
  s.local.lr = 0.1;
  s.seed = 7;
  return s;
}

static bool over(const world *w) {
  xf_jobm_phase p = xf_jobm_get_phase(w->global.m);
  return p == XF_JOBM_DONE || p == XF_JOBM_FAILED || p == XF_JOBM_CANCELLED;
}

static void world_free(world *w) {
  while (w->head) {
    event *e = w->head;
    w->head = e->next;
    ev_free(e);
  }
  for (size_t i = 0; i < w->n_sites; i++) {
    site_clear(&w->sites[i]);
    xf_free(w->sites[i].residual);
    xf_db_close(w->sites[i].ledger);
  }
  for (size_t i = 0; i < w->n_regionals; i++) {
    xf_jobm_free(w->regionals[i].m);
    xf_aggregator_free(w->regionals[i].agg);
    xf_free(w->regionals[i].mean);
  }
  xf_jobm_free(w->global.m);
  xf_aggregator_free(w->global.agg);
  xf_server_opt_free(w->opt);
  xf_noise_free(w->noise);
  xf_free(w->params);
  xf_model_free(w->model);
  xf_backend_close(w->backend);
  xf_policy_free(w->policy);
}

int sim_run(const sim_config *cfg, sim_result *out) {
  memset(out, 0, sizeof(*out));
  out->job_epsilon = NAN;
  out->accuracy = NAN;
  world *w = xf_calloc(1, sizeof(*w));
  if (!w) return -1;
  w->cfg = cfg;
  w->res = out;
  w->spec = cfg->spec;
  w->now = 1000.0;
  xf_errctx err = {0};
  int rc = 0;
  if (xf_jobspec_validate(&w->spec, &err) != XF_OK) {
    out->validated = false;
    snprintf(out->validation, sizeof(out->validation), "%.100s: %.380s", err.field, err.msg);
    snprintf(out->refusal, sizeof(out->refusal), "%s: %s", err.field, err.msg);
    out->verdict = XF_ADMIT_UNRUNNABLE;
    xf_free(w);
    return 0;
  }
  out->validated = true;
  /* Submission calibrates noise in the sum (coordinator/requests.c). */
  xf_privacy_spec *pv = &w->spec.privacy;
  if (xf_job_noise_in_sum(&w->spec) && !pv->has_noise_multiplier && w->spec.sites_per_round <= 1) {
    double sigma, eps, order;
    if (xf_dp_calibrate(pv->target_epsilon, xf_job_sampling_rate(&w->spec), w->spec.rounds,
                        pv->delta, &sigma, &eps, &order, &err) == XF_OK) {
      pv->has_noise_multiplier = true;
      pv->noise_multiplier = sigma;
    }
  }
  xf_backend_options bo = {.kind = XF_BACKEND_CPU, .threads = 1};
  xf_model_spec ms;
  uint8_t seed[XF_NOISE_SEED_BYTES] = {9};
  if (xf_backend_open(&bo, &w->backend, &err) != XF_OK ||
      xf_jobspec_model_spec(&w->spec, 1, FEATURES, 1, CLASSES, &ms, &err) != XF_OK ||
      xf_model_create(&ms, &w->model, &err) != XF_OK ||
      xf_noise_new_seeded(seed, &w->noise) != XF_OK) {
    snprintf(out->message, sizeof(out->message), "set-up: %s", err.msg);
    rc = -1;
    goto done;
  }
  w->n_params = xf_model_num_params(w->model);
  w->params = xf_mallocarray(w->n_params, sizeof(float));
  if (!w->params ||
      xf_server_opt_create(&w->spec.strategy, w->n_params, &w->opt, &err) != XF_OK) {
    rc = -1;
    goto done;
  }
  xf_model_init_params(w->model, w->spec.seed, w->params);
  if (cfg->policy_json && xf_policy_parse(cfg->policy_json, &w->policy, &err) != XF_OK) {
    snprintf(out->message, sizeof(out->message), "policy: %s: %s", err.field, err.msg);
    rc = -1;
    goto done;
  }
  /* The sites and the regional aggregators they are behind. */
  for (size_t i = 0; i < cfg->n_sites; i++) {
    site *s = &w->sites[w->n_sites++];
    s->cfg = cfg->sites[i];
    snprintf(s->name, sizeof(s->name), "%s", cfg->sites[i].name);
    snprintf(s->region, sizeof(s->region), "%s", cfg->sites[i].region);
    snprintf(s->via, sizeof(s->via), "%s", cfg->sites[i].via ? cfg->sites[i].via : "");
    s->id = xf_admit_site_id(s->name);
    s->via_id = s->via[0] ? xf_admit_site_id(s->via) : 0;
    s->res = &out->sites[i];
    snprintf(s->res->name, sizeof(s->res->name), "%s", s->name);
    make_data(w, s, (uint32_t)i);
    char path[512];
    snprintf(path, sizeof(path), "%s/ledger-%s.db", cfg->dir, s->name);
    remove(path);
    static const xf_migration ledger_migrations[] = {{1, XF_LEDGER_SCHEMA_SQL}};
    if (xf_db_open(path, ledger_migrations, 1, &s->ledger, &err) != XF_OK) {
      snprintf(out->message, sizeof(out->message), "ledger: %s", err.msg);
      rc = -1;
      goto done;
    }
    if (s->via[0] && !regional_by_id(w, s->via_id)) {
      host *r = &w->regionals[w->n_regionals++];
      r->id = s->via_id;
      r->relay = true;
      snprintf(r->name, sizeof(r->name), "%s", cfg->sites[i].via);
    }
  }
  out->n_sites = w->n_sites;
  xf_jobm_config gc = {.role = XF_JOBM_GLOBAL, .spec = &w->spec, .round = 1, .attempt = 1,
                       .n_params = w->n_params};
  if (xf_jobm_create(&gc, &w->global.m, &err) != XF_OK) {
    snprintf(out->message, sizeof(out->message), "machine: %s", err.msg);
    rc = -1;
    goto done;
  }
  /* Check (and submission): the same admission. */
  {
    plan_for(w, &w->global);
    /* plan_for gave the machine the plan; read the verdict back by planning
     * once more into a local copy. */
    xf_fed_dataset d = {.name = DATASET, .train_records = TRAIN_N, .test_records = TEST_N,
                        .classes = CLASSES, .h = 1, .w = FEATURES, .c = 1};
    xf_fed_site fs[SIM_SITES_MAX];
    for (size_t i = 0; i < w->n_sites; i++)
      fs[i] = (xf_fed_site){.name = w->sites[i].name, .region = w->sites[i].region,
                            .via = w->sites[i].via[0] ? w->sites[i].via : NULL,
                            .via_region = w->sites[i].region, .connected = true,
                            .datasets = &d, .n_datasets = 1};
    xf_federation fed = {.sites = fs, .n_sites = w->n_sites,
                         .coordinator_region = cfg->coordinator_region ? cfg->coordinator_region : "",
                         .residency_on = w->policy != NULL};
    xf_policy_decision dec;
    memset(&dec, 0, sizeof(dec));
    xf_policy_job job;
    const char *tags[XF_JOB_TAGS_MAX];
    xf_admission a;
    memset(&a, 0, sizeof(a));
    bool decided = true;
    if (w->policy) {
      xf_errctx e2 = {0};
      if (xf_residency_job_of(&w->spec, fed.coordinator_region, tags, &job, &e2) != XF_OK ||
          xf_policy_decide(w->policy, &job, w->now, &dec, &e2) != XF_OK) {
        a.verdict = XF_ADMIT_DENIED;
        snprintf(a.reason, sizeof(a.reason), "%s", e2.msg);
        decided = false;
      }
    }
    if (decided && xf_admission_decide(&w->spec, w->policy ? &dec : NULL, &fed, &a, &err) != XF_OK) {
      rc = -1;
      xf_policy_decision_free(&dec);
      goto done;
    }
    out->verdict = a.verdict;
    xf_admission_refusal(&a, out->refusal, sizeof(out->refusal));
    xf_admission_free(&a);
    xf_policy_decision_free(&dec);
  }
  run_actions(w, &w->global);
  if (out->verdict != XF_ADMIT_RUNS) goto done; /* refused at submission */
  /* The loop: events in order; when nothing is queued the clock moves. */
  for (int idle = 0; !w->failed && !over(w) && idle < 4000;) {
    if (!w->head) {
      w->now += 1.0;
      idle++;
      xf_jobm_tick(w->global.m, w->now, &err) == XF_OK ? (void)0 : fail_harness(w, "tick");
      run_actions(w, &w->global);
      for (size_t i = 0; i < w->n_regionals; i++) {
        host *r = &w->regionals[i];
        if (!r->m) continue;
        xf_jobm_tick(r->m, w->now, &err) == XF_OK ? (void)0 : fail_harness(w, "tick");
        run_actions(w, r);
      }
      continue;
    }
    event *e = w->head;
    w->head = e->next;
    if (!w->head) w->tail = NULL;
    w->now += 1e-4;
    out->steps++;
    deliver(w, e);
    ev_free(e);
    if (out->steps > 200000) fail_harness(w, "runaway: more than 200000 messages");
  }
done:
  if (w->global.m) {
    out->phase = xf_jobm_get_phase(w->global.m);
    if (!w->failed) {
      char msg[XF_JOBM_MSG_MAX];
      snprintf(msg, sizeof(msg), "%s",
               over(w) || out->verdict != XF_ADMIT_RUNS ? xf_jobm_message(w->global.m) : "stalled");
      memcpy(out->message, msg, sizeof(msg));
    }
    out->rounds_committed = xf_jobm_rounds_committed(w->global.m);
    uint32_t inv, acc, rep, tgt;
    xf_jobm_counts(w->global.m, &inv, &acc, &rep, &tgt);
    if (rep > out->max_reported) out->max_reported = rep;
  }
  if (w->failed) rc = -1;
  /* The final model on every site's test split, and the privacy accounts. */
  if (rc == 0 && w->model && out->verdict == XF_ADMIT_RUNS) {
    xf_net *net = NULL;
    double correct = 0, total = 0;
    if (xf_net_create(w->backend, w->model, 64, &net, &err) == XF_OK &&
        xf_net_set_params(net, w->params) == XF_OK) {
      for (size_t i = 0; i < w->n_sites; i++) {
        double loss, acc;
        xf_samples t = {w->sites[i].xt, w->sites[i].yt, TEST_N, FEATURES};
        if (xf_evaluate(net, &t, &loss, &acc, &err) == XF_OK) {
          correct += acc * TEST_N;
          total += TEST_N;
        }
      }
    }
    xf_net_free(net);
    out->accuracy = total > 0 ? correct / total : NAN;
    double eps;
    if (xf_job_epsilon(&w->spec, out->rounds_committed, &eps)) out->job_epsilon = eps;
    for (size_t i = 0; i < w->n_sites; i++) {
      site *s = &w->sites[i];
      xf_privacy_plan plan;
      sim_site_result *sr = s->res;
      if (xf_job_privacy_plan(&w->spec, TRAIN_N, w->n_params, &plan, &err) != XF_OK) continue;
      sr->site_noise = plan.site_noise;
      if (!plan.site_noise) continue;
      if (xf_ledger_epsilon(s->ledger, DATASET, JOB_ID, NULL, w->spec.privacy.delta,
                            &sr->ledger_epsilon, &err) != XF_OK)
        sr->ledger_epsilon = NAN;
      double order;
      sr->expected_epsilon = 0;
      if (sr->used)
        if (xf_dp_epsilon_sgm(plan.sampling_rate, plan.accounted_multiplier,
                              plan.steps_per_round * sr->used, w->spec.privacy.delta, NULL, 0,
                              XF_DP_CONVERSION_IMPROVED, &sr->expected_epsilon, &order,
                              &err) != XF_OK)
          sr->expected_epsilon = NAN;
    }
  }
  world_free(w);
  xf_free(w);
  return rc;
}
