/* SPDX-License-Identifier: Apache-2.0 */
/* The site's checks of an offer and of a go (site/offer.h): pure but for
 * what the caller's env reads. */
#include "site/offer.h"

#include <stdio.h>
#include <string.h>

#include "crypto/digest.h"
#include "job/jobmodel.h"
#include "kernels/model.h"
#include "policy/release.h"

/* Mixed into the shuffle seed for the uplink codec's stochastic rounding,
 * so the two draws are independent yet repeat with the job's seed. */
#define XF__CODEC_SEED 0x9e3779b97f4a7c15ull

uint64_t xf_site_shuffle_seed(uint64_t job_seed, uint32_t round, const char *site) {
  uint8_t head[12];
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)(job_seed >> (8 * i));
  for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(round >> (8 * i));
  xf_digest_ctx ctx;
  xf_digest_init(&ctx);
  xf_digest_update(&ctx, head, sizeof(head));
  xf_digest_update(&ctx, site, strlen(site));
  xf_digest d;
  xf_digest_final(&ctx, &d);
  uint64_t seed = 0;
  for (int i = 0; i < 8; i++) seed |= (uint64_t)d.bytes[i] << (8 * i);
  return seed;
}

uint64_t xf_site_update_stream_id(uint32_t round, uint32_t attempt) {
  return (uint64_t)round << 16 | (uint64_t)attempt << 1 | 1u;
}

const char *xf_site_offer_step_name(xf_site_offer_step s) {
  static const char *const names[] = {"taken", "spec",  "dataset", "release",
                                      "local-error", "local", "model", "privacy",
                                      "busy", "deadline", "setup"};
  return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* ---- residency plans ---------------------------------------------------------- */

void xf_site_residency_of(const Xfed__Residency *r, xf_site_residency *out) {
  memset(out, 0, sizeof(*out));
  if (!r) return;
  *out = (xf_site_residency){.policy_version = r->policy_version,
                             .coordinator_region = r->coordinator_region,
                             .aggregator_region = r->aggregator_region,
                             .path = r->path,
                             .rule = r->rule,
                             .min_cohort = r->min_cohort,
                             .require_secagg = r->require_secagg,
                             .has_max_epsilon = r->has_max_epsilon,
                             .max_epsilon = r->max_epsilon,
                             .epsilon = r->epsilon};
}

void xf_site_plan_keep(xf_site_plan *k, const Xfed__Residency *r) {
  memset(k, 0, sizeof(*k));
  if (!r) return;
  k->present = true;
  snprintf(k->coordinator_region, sizeof(k->coordinator_region), "%s",
           r->coordinator_region ? r->coordinator_region : "");
  snprintf(k->aggregator_region, sizeof(k->aggregator_region), "%s",
           r->aggregator_region ? r->aggregator_region : "");
  snprintf(k->path, sizeof(k->path), "%s", r->path ? r->path : "");
  snprintf(k->rule, sizeof(k->rule), "%s", r->rule ? r->rule : "");
  xf_site_residency_of(r, &k->res);
  k->res.coordinator_region = k->coordinator_region;
  k->res.aggregator_region = k->aggregator_region;
  k->res.path = k->path;
  k->res.rule = k->rule;
}

bool xf_site_plan_has_conditions(const xf_site_residency *res) {
  return (res->path && strcmp(res->path, "regional") == 0) || res->min_cohort > 1 ||
         res->require_secagg || res->has_max_epsilon;
}

bool xf_site_release_allows(const char *region, const xf_site_residency *res,
                            const xf_jobspec *spec, unsigned contributors, char *why,
                            size_t why_len) {
  const xf_privacy_spec *pv = &spec->privacy;
  xf_release_rule rule = {.rule = res->rule,
                          .from = region,
                          .to = res->coordinator_region,
                          .min_cohort = res->min_cohort,
                          .require_secagg = res->require_secagg,
                          .has_max_epsilon = res->has_max_epsilon,
                          .max_epsilon = res->max_epsilon};
  xf_release_artifact a = {.contributors = contributors,
                           .secagg = spec->secure_aggregation.enabled,
                           .privacy = pv->mode != XF_PRIVACY_NONE,
                           .has_epsilon = pv->has_target_epsilon,
                           .epsilon = pv->target_epsilon};
  return xf_release_allows(&rule, &a, why, why_len);
}

/* ---- secure aggregation's setup ------------------------------------------------ */

xf_err xf_site_secagg_setup_of(const char *site, const Xfed__SecAggSetup *su, size_t n_params,
                               xf_update_secagg *out, xf_errctx *err) {
  XF_ENSURE(su->graph_seed.len == 32, err, XF_EINVAL,
            "the secure-aggregation setup is malformed: its graph_seed has %zu bytes, not 32",
            su->graph_seed.len);
  XF_ENSURE(su->n_cohort == su->n && su->index >= 1 && su->index <= su->n_cohort, err,
            XF_EINVAL,
            "the secure-aggregation setup names %zu sites for a cohort of %u (this site at %u): "
            "each site must be named, in index order",
            su->n_cohort, (unsigned)su->n, (unsigned)su->index);
  XF_ENSURE(su->cohort[su->index - 1] && strcmp(su->cohort[su->index - 1], site) == 0, err,
            XF_EINVAL,
            "the secure-aggregation setup puts site '%.63s' at this site's index %u; this is %s",
            su->cohort[su->index - 1] ? su->cohort[su->index - 1] : "", (unsigned)su->index,
            site);
  memset(out, 0, sizeof(*out));
  out->params = (xf_secagg_params){.n = su->n, .threshold = su->threshold, .bits = su->bits,
                                   .length = su->subset ? su->subset : n_params,
                                   .degree = su->degree};
  memcpy(out->params.graph_seed, su->graph_seed.data, 32);
  out->index = su->index;
  out->fixed = (xf_codec_fixed){.step = su->step, .bits = su->bits, .bound = su->bound};
  out->scale = su->scale;
  out->subset = su->subset;
  out->subset_seed = su->subset_seed;
  return XF_OK;
}

/* The update's plan for what the task knows so far (the secure-aggregation
 * setup may come with TaskGo). */
static xf_err plan_check(const xf_site_offer_env *env, const xf_jobspec *spec,
                         const xf_privacy_plan *pp, size_t n_params, bool evaluate_only,
                         bool secagg, const xf_update_offer *uo, xf_errctx *err) {
  if (evaluate_only || (secagg && !uo->secagg)) return XF_OK;
  xf_update_plan up;
  return xf_update_plan_site(spec, pp, n_params, uo, env->threads, &up, err);
}

/* A setup taken for the task: checked on the wire, then the update's plan
 * with it. */
static xf_err setup_take(const xf_site_offer_env *env, const Xfed__SecAggSetup *su,
                         const xf_jobspec *spec, const xf_privacy_plan *pp, size_t n_params,
                         bool evaluate_only, xf_update_offer *uo, xf_errctx *err) {
  XF_GUARD(xf_site_secagg_setup_of(env->site, su, n_params, &uo->sa, err));
  uo->secagg = true;
  return plan_check(env, spec, pp, n_params, evaluate_only, true, uo, err);
}

/* ---- the offer ------------------------------------------------------------------ */

bool xf_site_offer_malformed(const Xfed__TaskOffer *o, char *msg, size_t msg_len) {
  const char *job = o->job_id ? o->job_id : "";
  if (!*job || strlen(job) >= XF_SITE_JOB_ID_MAX) {
    snprintf(msg, msg_len, "TaskOffer with %s job_id", *job ? "an overlong" : "no");
    return true;
  }
  if (o->model_digest.len != XF_DIGEST_BYTES) {
    snprintf(msg, msg_len, "TaskOffer for job %s round %u: model_digest has %zu bytes, not %d",
             job, (unsigned)o->round, o->model_digest.len, XF_DIGEST_BYTES);
    return true;
  }
  return false;
}

static void refuse(xf_site_offer_verdict *v, xf_site_offer_step step,
                   Xfed__TaskRefusal__Reason reason) {
  v->step = step;
  v->reason = reason;
}

/* The registered dataset the job asks for: its name, carrying every tag the
 * job lists. XF_ENOENT with details naming what is missing. */
static xf_err find_dataset(const xf_site_offer_env *env, const xf_jobspec *spec,
                           xf_site_dataset *out, xf_errctx *err) {
  xf_errctx inner;
  xf_errctx_clear(&inner);
  xf_err rc = env->dataset(env->user, spec->data.dataset, out, &inner);
  if (rc == XF_ENOENT)
    return xf_fail(err, XF_ENOENT, "no dataset named '%s' is registered at site %s",
                   spec->data.dataset, env->site);
  if (rc != XF_OK) return xf_fail(err, rc, "the registry: %s", inner.msg);
  char missing[512] = "";
  size_t used = 0;
  for (uint32_t i = 0; i < spec->data.n_tags; i++) {
    bool found = false;
    for (size_t j = 0; j < out->n_tags && !found; j++)
      found = strcmp(out->tags[j], spec->data.tags[i]) == 0;
    if (!found && used < sizeof(missing))
      used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%s", used ? ", " : "",
                               spec->data.tags[i]);
  }
  if (used) {
    rc = xf_fail(err, XF_ENOENT, "dataset '%s' at site %s lacks the tags %s", out->name,
                 env->site, missing);
    xf_site_dataset_free(out);
    return rc;
  }
  return XF_OK;
}

/* The model on the dataset: its size, or XF_EUNSUPPORTED naming the misfit
 * (and distributed noise needs secure aggregation to hide the update). */
static xf_err job_supported(const xf_jobspec *spec, const xf_site_dataset *ds, size_t *n_params,
                            xf_errctx *err) {
  const xf_privacy_spec *pv = &spec->privacy;
  XF_ENSURE(pv->mode != XF_PRIVACY_DISTRIBUTED || spec->secure_aggregation.enabled, err,
            XF_EUNSUPPORTED,
            "privacy: mode distributed adds only a share of the noise here and needs secure "
            "aggregation to hide this site's update");
  xf_model_spec ms;
  XF_GUARD(xf_jobspec_model_spec(spec, ds->h, ds->w, ds->c, ds->classes, &ms, err));
  xf_model *m = NULL;
  xf_errctx inner;
  xf_errctx_clear(&inner);
  if (xf_model_create(&ms, &m, &inner) != XF_OK)
    return xf_fail(err, XF_EUNSUPPORTED, "model: dataset '%s' (%ux%ux%u, %u classes) does not "
                   "fit it: %s", ds->name, ds->h, ds->w, ds->c, ds->classes, inner.msg);
  *n_params = xf_model_num_params(m);
  xf_model_free(m);
  return XF_OK;
}

/* The text of a refusal by a cap across jobs: which cap binds. */
static void cap_whose(const xf_site_cap *cap, const xf_site_dataset *ds,
                      const xf_site_residency *res, char *whose, size_t whose_len) {
  if (cap->source == XF_SITE_CAP_POLICY && ds->has_budget)
    snprintf(whose, whose_len, "the cap %.4g that residency policy rule '%s' (coordinator "
             "policy version %llu) sets, lower than this site's budget %.4g (delta %g)",
             cap->epsilon, res->rule && *res->rule ? res->rule : "?",
             (unsigned long long)res->policy_version, ds->budget_epsilon, ds->budget_delta);
  else if (cap->source == XF_SITE_CAP_POLICY)
    snprintf(whose, whose_len, "the cap %.4g that residency policy rule '%s' (coordinator "
             "policy version %llu) sets (the dataset has no budget of its own)",
             cap->epsilon, res->rule && *res->rule ? res->rule : "?",
             (unsigned long long)res->policy_version);
  else
    snprintf(whose, whose_len, "its budget %.4g", cap->epsilon);
}

/* The caps across jobs on the dataset's spend, the lower first so that a
 * refusal names the cap that binds: the operator's budget (at its delta)
 * and a residency rule's max_epsilon (at the job's delta). */
static int caps_of(const xf_site_dataset *ds, const xf_site_residency *res, double delta,
                   xf_site_cap caps[2]) {
  int n = 0;
  caps[0] = xf_site_budget_cap(ds, res, delta);
  if (caps[0].source != XF_SITE_CAP_NONE) n++;
  if (caps[0].source == XF_SITE_CAP_POLICY && ds->has_budget)
    caps[n++] = xf_site_budget_cap(ds, NULL, delta);
  else if (caps[0].source == XF_SITE_CAP_BUDGET && res && res->has_max_epsilon)
    caps[n++] = (xf_site_cap){XF_SITE_CAP_POLICY, res->max_epsilon, delta};
  return n;
}

/* The spend before and after `charge`, of `job` (NULL: every job). */
static xf_err spend(const xf_site_offer_env *env, const char *dataset, const char *job,
                    const xf_privacy_charge *charge, double delta, double *before,
                    double *after, xf_errctx *err) {
  XF_GUARD(env->ledger_epsilon(env->user, dataset, job, NULL, delta, before, err));
  return env->ledger_epsilon(env->user, dataset, job, charge, delta, after, err);
}

Xfed__TaskRefusal__Reason xf_site_privacy_check(const xf_site_offer_env *env, const char *job,
                                                uint32_t round, const xf_jobspec *spec,
                                                const xf_site_dataset *ds,
                                                const xf_site_residency *res, size_t n_params,
                                                xf_privacy_plan *plan, xf_privacy_charge *charge,
                                                char *why, size_t why_len) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_job_privacy_plan(spec, ds->train_records, n_params, plan, &err) != XF_OK) {
    char msg[520];
    snprintf(why, why_len, "dataset '%s': %s", ds->name, xf_errctx_format(&err, msg, sizeof(msg)));
    return XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
  }
  if (plan->site_noise && spec->privacy.unit == XF_PRIVACY_UNIT_RECORD && ds->trainer &&
      !ds->trainer_dp_declared) {
    snprintf(why, why_len,
             "dataset '%s': its external trainer declares no DP (--trainer-dp none) and this "
             "job asks for record-level privacy; to take part, have the trainer do DP-SGD (e.g. "
             "with Opacus), report it in result.json and register the dataset with --trainer-dp "
             "declared (docs/trainers.md)",
             ds->name);
    return XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
  }
  if (!plan->site_noise) return XFED__TASK_REFUSAL__REASON__UNSPECIFIED;
  *charge = (xf_privacy_charge){.sampling_rate = plan->sampling_rate,
                                .noise_multiplier = plan->accounted_multiplier,
                                .steps = plan->steps_per_round};
  const xf_privacy_spec *pv = &spec->privacy;
  double before = 0, after = 0;
  if (spend(env, ds->name, job, charge, pv->delta, &before, &after, &err) != XF_OK) {
    snprintf(why, why_len, "the privacy ledger cannot be read: %s", err.msg);
    return XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
  }
  /* A hair of slack for the calibration's own rounding. */
  if (pv->has_target_epsilon && after > pv->target_epsilon * (1 + 1e-9)) {
    snprintf(why, why_len,
             "dataset '%s': this job has spent epsilon %.4g (delta %g) here; round %u would "
             "take it to %.4g, above its target_epsilon %.4g",
             ds->name, before, pv->delta, (unsigned)round, after, pv->target_epsilon);
    return XFED__TASK_REFUSAL__REASON__TARGET_REACHED;
  }
  xf_site_cap caps[2];
  int n_caps = caps_of(ds, res, pv->delta, caps);
  for (int i = 0; i < n_caps; i++) {
    const xf_site_cap *cap = &caps[i];
    double spent = 0, total = 0;
    if (spend(env, ds->name, NULL, charge, cap->delta, &spent, &total, &err) != XF_OK) {
      snprintf(why, why_len, "the privacy ledger cannot be read: %s", err.msg);
      return XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
    }
    if (total <= cap->epsilon) continue;
    char whose[300];
    cap_whose(cap, ds, res, whose, sizeof(whose));
    snprintf(why, why_len,
             "dataset '%s' at site %s has spent epsilon %.4g (delta %g) across jobs; round %u of "
             "this job (sampling rate %.4g, noise multiplier %.4g, %llu steps) would take it to "
             "%.4g, above %s",
             ds->name, env->site, spent, cap->delta, (unsigned)round, charge->sampling_rate,
             charge->noise_multiplier, (unsigned long long)charge->steps, total, whose);
    return XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED;
  }
  return XFED__TASK_REFUSAL__REASON__UNSPECIFIED;
}

/* The site's own rules on the offer. False when it is refused (v says
 * why). */
static bool local_rules_allow(const xf_site_offer_env *env, const Xfed__TaskOffer *o,
                              const xf_site_residency *res, xf_site_offer_verdict *v) {
  if (!env->local_rules) return true;
  xf_site_task_ref ref = {.site = env->site, .region = env->region, .job = o->job_id,
                          .round = o->round, .attempt = o->attempt};
  v->local_ran = true;
  xf_errctx_clear(&v->local_err);
  if (env->local_rules(env->user, &ref, res, &v->spec, &v->dataset, &v->local, &v->local_err) !=
      XF_OK) {
    refuse(v, XF_SITE_OFFER_LOCAL_ERROR, XFED__TASK_REFUSAL__REASON__UNSUPPORTED);
    snprintf(v->why, sizeof(v->why),
             "the site cannot check or record its local residency rules: %s", v->local_err.msg);
    return false;
  }
  if (v->local.allowed) return true;
  refuse(v, XF_SITE_OFFER_LOCAL, XFED__TASK_REFUSAL__REASON__POLICY_DENIED);
  snprintf(v->why, sizeof(v->why), "%s", v->local.details);
  return false;
}

/* The checks up to the local rules: the spec, the dataset, the plan's
 * release conditions and the site's own rules. False when refused. */
static bool offer_admits(const xf_site_offer_env *env, const Xfed__TaskOffer *o,
                         const xf_site_residency *res, xf_site_offer_verdict *v) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_string(o->params_json, o->params_json ? strlen(o->params_json) : 0,
                              "params_json", &v->spec, &err) != XF_OK) {
    char msg[600];
    refuse(v, XF_SITE_OFFER_SPEC, XFED__TASK_REFUSAL__REASON__UNSUPPORTED);
    snprintf(v->why, sizeof(v->why), "the job spec does not parse here: %s",
             xf_errctx_format(&err, msg, sizeof(msg)));
    return false;
  }
  if (find_dataset(env, &v->spec, &v->dataset, &err) != XF_OK) {
    refuse(v, XF_SITE_OFFER_DATASET, XFED__TASK_REFUSAL__REASON__NO_DATASET);
    snprintf(v->why, sizeof(v->why), "%s", err.msg);
    return false;
  }
  /* The plan's conditions on what leaves the region, against the job: the
   * cohort is the plan's own min_cohort here (TaskGo checks the real one). */
  if (o->residency && !o->evaluate_only && xf_site_plan_has_conditions(res) &&
      !xf_site_release_allows(env->region, res, &v->spec, res->min_cohort > 1 ? res->min_cohort : 1,
                              v->why, sizeof(v->why))) {
    refuse(v, XF_SITE_OFFER_RELEASE, XFED__TASK_REFUSAL__REASON__POLICY_DENIED);
    return false;
  }
  return local_rules_allow(env, o, res, v);
}

/* The model, the privacy plan, room and the deadline. False when refused. */
static bool offer_fits(const xf_site_offer_env *env, const Xfed__TaskOffer *o,
                       const xf_site_offer_room *room, const xf_site_residency *res,
                       xf_site_offer_verdict *v) {
  xf_errctx err;
  xf_errctx_clear(&err);
  Xfed__TaskRefusal__Reason reason;
  if (job_supported(&v->spec, &v->dataset, &v->n_params, &err) != XF_OK) {
    refuse(v, XF_SITE_OFFER_MODEL, XFED__TASK_REFUSAL__REASON__UNSUPPORTED);
    snprintf(v->why, sizeof(v->why), "%s", err.msg);
  } else if (!o->evaluate_only &&
             (reason = xf_site_privacy_check(env, o->job_id, o->round, &v->spec, &v->dataset,
                                            o->residency ? res : NULL, v->n_params, &v->plan,
                                            &v->charge, v->why, sizeof(v->why))) !=
                 XFED__TASK_REFUSAL__REASON__UNSPECIFIED) {
    refuse(v, XF_SITE_OFFER_PRIVACY, reason);
  } else if (room->busy) {
    refuse(v, XF_SITE_OFFER_BUSY, XFED__TASK_REFUSAL__REASON__BUSY);
    snprintf(v->why, sizeof(v->why), "%s", room->busy);
  } else if (o->deadline_unix_ms && o->deadline_unix_ms <= room->now_ms) {
    refuse(v, XF_SITE_OFFER_DEADLINE, XFED__TASK_REFUSAL__REASON__DEADLINE_TOO_SHORT);
    snprintf(v->why, sizeof(v->why), "the deadline passed %.1f s ago by this site's clock",
             (double)(room->now_ms - o->deadline_unix_ms) / 1000.0);
  }
  return v->step == XF_SITE_OFFER_TAKEN;
}

/* The update's setup: the uplink codec's rounding repeats with the job's
 * seed; sealed to the aggregator's key unless it goes masked; the
 * secure-aggregation setup when the offer has one. False when refused. */
static bool offer_setup(const xf_site_offer_env *env, const Xfed__TaskOffer *o,
                        xf_site_offer_verdict *v) {
  v->shuffle_seed = xf_site_shuffle_seed(v->spec.seed, o->round, env->site);
  v->secagg = !o->evaluate_only && v->spec.secure_aggregation.enabled;
  xf_update_offer *uo = &v->uo;
  uo->rounding_seed = v->shuffle_seed ^ XF__CODEC_SEED;
  uo->sealed = !v->secagg && o->seal_key.len == XF_SEAL_PUBLICKEYBYTES;
  if (uo->sealed) memcpy(uo->seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  xf_errctx err;
  xf_errctx_clear(&err);
  const char *fail = NULL;
  if (v->secagg && o->secagg) {
    if (setup_take(env, o->secagg, &v->spec, &v->plan, v->n_params, o->evaluate_only, uo, &err) !=
        XF_OK)
      fail = "secure aggregation";
  } else if (v->secagg && !o->hold) {
    xf_fail(&err, XF_EINVAL, "the job asks for secure aggregation but the offer has no setup");
    fail = "secure aggregation";
  } else if (plan_check(env, &v->spec, &v->plan, v->n_params, o->evaluate_only, v->secagg, uo,
                        &err) != XF_OK) {
    fail = "the update";
  }
  if (!fail) return true;
  char msg[600];
  snprintf(msg, sizeof(msg), "%s", err.msg);
  refuse(v, XF_SITE_OFFER_SETUP, XFED__TASK_REFUSAL__REASON__UNSUPPORTED);
  snprintf(v->why, sizeof(v->why), "%s: %s", fail, msg);
  return false;
}

void xf_site_offer_check(const xf_site_offer_env *env, const Xfed__TaskOffer *o,
                         const xf_site_offer_room *room, xf_site_offer_verdict *v) {
  memset(v, 0, sizeof(*v));
  xf_site_residency res;
  xf_site_residency_of(o->residency, &res);
  if (offer_admits(env, o, &res, v) && offer_fits(env, o, room, &res, v) && offer_setup(env, o, v))
    return;
  xf_site_dataset_free(&v->dataset);
}

/* ---- the go ------------------------------------------------------------------------ */

void xf_site_go_check(const xf_site_offer_env *env, const xf_site_go_task *t,
                      const Xfed__TaskGo *g, xf_update_offer *uo, xf_site_go_verdict *v) {
  memset(v, 0, sizeof(*v));
  /* The cohort is known now: a smaller one than the plan allows would let
   * too few sites' updates leave the region together. */
  if (g->secagg && !t->evaluate_only && t->plan_kept->present &&
      xf_site_plan_has_conditions(&t->plan_kept->res) &&
      !xf_site_release_allows(env->region, &t->plan_kept->res, t->spec, g->secagg->n, v->why,
                              sizeof(v->why))) {
    v->step = XF_SITE_GO_RELEASE;
    v->reason = XFED__TASK_REFUSAL__REASON__POLICY_DENIED;
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  const char *fail = NULL;
  if (!t->evaluate_only && g->secagg && !t->secagg) {
    xf_fail(&err, XF_EINVAL, "the go sets up secure aggregation, but the job's "
            "secure_aggregation is not enabled");
    fail = "secure aggregation";
  } else if (t->secagg && g->secagg) {
    if (setup_take(env, g->secagg, t->spec, t->privacy, t->n_params, t->evaluate_only, uo, &err) !=
        XF_OK)
      fail = "secure aggregation";
    else
      v->begin = true;
  } else if (t->secagg && !uo->secagg) {
    xf_fail(&err, XF_EINVAL, "the job asks for secure aggregation but neither the offer nor the "
            "go has a setup");
    fail = "secure aggregation";
  }
  if (!fail) return;
  char msg[600];
  snprintf(msg, sizeof(msg), "%s", err.msg);
  v->step = XF_SITE_GO_SETUP;
  v->reason = XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
  snprintf(v->why, sizeof(v->why), "%s: %s", fail, msg);
}
