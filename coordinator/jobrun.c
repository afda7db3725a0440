/* SPDX-License-Identifier: Apache-2.0 */
/* Running a job on the loop: opening rounds over the eligible sites,
 * sending tasks and models, admitting and folding update streams, and
 * carrying out the round machine's actions (commit, retry, fail, finish),
 * with every step journaled (docs/rounds.md, docs/coordinator.md). The
 * regional role runs the same code for one relayed round ("relay" jobs). */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sodium.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "privacy/accountant.h"
#include "kernels/checkpoint.h"

static void run_actions(xf__coord *co, xf__job *job);
static void fail_job(xf__coord *co, xf__job *job, const char *why);

/* ---- helpers -------------------------------------------------------------------------- */

static uint32_t offer_round(const xf__job *job) {
  return job->relay ? job->offer_round : xf_round_number(job->round);
}
static uint32_t offer_attempt(const xf__job *job) {
  return job->relay ? job->offer_attempt : xf_round_attempt(job->round);
}

xf_err xf__model_file_make(const xf_model *m, const float *params, xf__model_file **out,
                           xf_errctx *err) {
  return xf__model_file_make_as(m, params, XF_CHECKPOINT_F32, out, NULL, err);
}

xf_err xf__model_file_make_as(const xf_model *m, const float *params, xf_checkpoint_dtype dtype,
                              xf__model_file **out, xf_digest *params_digest, xf_errctx *err) {
  xf__model_file *mf = xf_calloc(1, sizeof(*mf));
  if (!mf) return xf_fail(err, XF_ENOMEM, "out of memory");
  xf_err rc = xf_checkpoint_encode_as(m, params, dtype, &mf->bytes, &mf->len, params_digest, err);
  if (rc != XF_OK) {
    xf_free(mf);
    return rc;
  }
  xf_digest_buf(mf->bytes, mf->len, &mf->digest);
  mf->refs = 1;
  *out = mf;
  return XF_OK;
}

/* The model file sites are offered and its parameter digest: the job's
 * model as the downlink compression stores it (the float32 file itself
 * when there is none). Called whenever job->mf changes. */
static xf_err refresh_offer(xf__job *job, xf_errctx *err) {
  xf__model_file_unref(job->offer_mf);
  job->offer_mf = NULL;
  xf_job_downlink dl = job->spec.compression.downlink;
  if (dl == XF_JOB_DOWNLINK_NONE) {
    job->offer_mf = job->mf;
    job->mf->refs++;
    job->offer_digest = job->params_digest;
    return XF_OK;
  }
  return xf__model_file_make_as(job->model, job->params,
                                dl == XF_JOB_DOWNLINK_BF16 ? XF_CHECKPOINT_BF16
                                                           : XF_CHECKPOINT_F16,
                                &job->offer_mf, &job->offer_digest, err);
}

void xf__job_free(xf__job *job) {
  if (!job) return;
  xf__sa_free(job->sa);
  if (job->seal) sodium_free(job->seal);
  xf__model_file_unref(job->offer_mf);
  xf_round_free(job->round);
  xf_aggregator_free(job->agg);
  xf_server_opt_free(job->opt);
  xf_model_free(job->model);
  xf_free(job->params);
  xf_free(job->spec_json);
  xf__model_file_unref(job->mf);
  xf_policy_decision_free(&job->plan);
  xf_free(job);
}

static bool has_tags(const xf__dataset *d, const xf_jobspec *spec) {
  for (uint32_t i = 0; i < spec->data.n_tags; i++) {
    bool found = false;
    for (uint32_t t = 0; t < d->n_tags && !found; t++)
      found = strcmp(d->tags[t], spec->data.tags[i]) == 0;
    if (!found) return false;
  }
  return true;
}

/* The announced dataset of s that the job trains on, or NULL. */
const xf__dataset *xf__job_dataset(const xf_jobspec *spec, const xf__site *s) {
  for (size_t i = 0; i < s->n_datasets; i++)
    if (strcmp(s->datasets[i].name, spec->data.dataset) == 0 && has_tags(&s->datasets[i], spec))
      return &s->datasets[i];
  return NULL;
}

bool xf__site_eligible(const xf__coord *co, const xf__job *job, const xf__site *s) {
  if (!s->peer) return false;
  if (!xf__residency_site_ok(co, job, s)) return false;
  /* Under a residency policy the plan, not the spec, says who aggregates
   * in a regional aggregator first. */
  if (s->regional && !xf__residency_on(co) && job->spec.topology != XF_JOB_TOPOLOGY_REGIONAL)
    return false;
  const xf__dataset *d = xf__job_dataset(&job->spec, s);
  if (!d) return false;
  if (!job->model) return true;
  const xf_model_spec *ms = xf_model_spec_of(job->model);
  return (int)d->h == ms->in_h && (int)d->w == ms->in_w && (int)d->c == ms->in_c &&
         (int)d->classes <= ms->classes;
}

static void journal_check(xf_err rc, const char *doing, const xf_errctx *err) {
  if (rc != XF_OK) XF_ERROR("journal_failed", "doing=%s reason=\"%s\"", doing, err->msg);
}

/* Drops whatever update s has in flight. */
static void site_abort_update(xf__coord *co, xf__site *s) {
  if (s->upd) xf_aggregator_abort_update(s->upd);
  s->upd = NULL;
  xf_tensor_receiver_free(s->rx);
  s->rx = NULL;
  xf_free(s->rx_encoded);
  s->rx_encoded = NULL;
  s->rx_encoded_len = 0;
  xf_seal_receiver_free(s->rx_opener);
  s->rx_opener = NULL;
  s->waiting_admission = false;
  (void)co;
}

/* Withdraws s's task of the given attempt of the job's round (0: the
 * current one). */
static void send_cancel_attempt(xf__coord *co, xf__job *job, xf__site *s, const char *reason,
                                uint32_t attempt) {
  site_abort_update(co, s);
  if (!s->peer) return;
  if (s->peer->tx_model) xf__stream_stop(s->peer);
  Xfed__TaskCancel tc = XFED__TASK_CANCEL__INIT;
  tc.job_id = job->id_text;
  tc.round = offer_round(job);
  tc.attempt = job->relay || attempt == 0 ? offer_attempt(job) : attempt;
  tc.reason = (char *)reason;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_CANCEL;
  env.task_cancel = &tc;
  (void)xf__send(s->peer, &env);
}

static void send_cancel(xf__coord *co, xf__job *job, xf__site *s, const char *reason) {
  send_cancel_attempt(co, job, s, reason, 0);
}

/* TaskOffer and the model stream to s. */
static xf_err send_task(xf__coord *co, xf__job *job, xf__site *s, double deadline, bool eval) {
  if (!s->peer) return XF_ENOENT;
  Xfed__TaskOffer o = XFED__TASK_OFFER__INIT;
  o.job_id = job->id_text;
  o.round = eval ? job->model_round : offer_round(job);
  o.attempt = eval ? 0 : offer_attempt(job);
  o.deadline_unix_ms = (uint64_t)(deadline * 1000.0);
  o.model_digest.data = job->offer_digest.bytes;
  o.model_digest.len = XF_DIGEST_BYTES;
  o.params_json = job->spec_json;
  o.evaluate_only = eval;
  o.model_round = job->model_round;
  Xfed__SecAggSetup setup;
  uint32_t sa_index = job->sa && !eval ? xf__sa_index(job->sa, s->id) : 0;
  if (sa_index) {
    xf__sa_setup(job->sa, sa_index, &setup);
    o.secagg = &setup;
  }
  if (job->seal && !eval) {
    o.seal_key.data = job->seal->pk;
    o.seal_key.len = sizeof(job->seal->pk);
  }
  /* The residency plan goes with every task: the global coordinator's
   * decision for the site's region, or a regional's task passed on. */
  Xfed__Residency res;
  char **names = NULL;
  const xf__residency *up = &co->up.residency;
  if (xf__residency_on(co) && job->has_plan && !job->relay) {
    names = s->n_behind ? xf_calloc(s->n_behind, sizeof(char *)) : NULL;
    xf__residency_offer(co, job, s, &res, names);
    o.residency = &res;
  } else if (job->relay && up->present) {
    xfed__residency__init(&res);
    res.policy_version = up->version;
    res.coordinator_region = (char *)up->coordinator_region;
    res.aggregator_region = co->cfg.region;
    res.path = (char *)up->path;
    res.rule = (char *)up->rule;
    res.min_cohort = up->min_cohort;
    res.require_secagg = up->require_secagg;
    res.has_max_epsilon = up->has_max_epsilon;
    res.max_epsilon = up->max_epsilon;
    res.epsilon = up->epsilon;
    o.residency = &res;
  }
  uint64_t stream = (uint64_t)o.round << 16 | (uint64_t)o.attempt << 1;
  stream = stream ? stream : 2; /* even ids are models, odd ones updates */
  o.model_stream_id = stream;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_OFFER;
  env.task_offer = &o;
  xf_err sent = xf__send(s->peer, &env);
  xf_free(names);
  XF_GUARD(sent);
  xf_tensor_desc d = {.stream_id = stream,
                      .kind = XFED__TENSOR_BEGIN__KIND__MODEL,
                      .dtype = XFED__TENSOR_BEGIN__DTYPE__U8,
                      .element_count = job->offer_mf->len,
                      .job_id = job->id_text,
                      .round = o.round};
  s->peer->tx_weight = 0;
  s->peer->tx_attempt = o.attempt;
  s->peer->tx_contributors = 0;
  XF_GUARD(xf__stream_start(s->peer, &d, job->offer_mf, NULL, job->offer_mf->len, false, 0));
  s->bytes_down = job->offer_mf->len;
  job->bytes_down += job->offer_mf->len;
  XF_INFO("task_sent", "job=%s round=%u attempt=%u site=%s eval=%d model_bytes=%zu",
          job->id_text, (unsigned)o.round, (unsigned)o.attempt, s->name, eval ? 1 : 0,
          job->offer_mf->len);
  return XF_OK;
}

/* ---- central differential privacy ------------------------------------------------------- */

static bool is_central(const xf_jobspec *spec) {
  return spec->privacy.unit == XF_PRIVACY_UNIT_SITE &&
         spec->privacy.mode == XF_PRIVACY_CENTRAL && spec->privacy.has_noise_multiplier;
}

/* Site-level privacy that the coordinator accounts: central noise, or the
 * distributed noise the sites add under secure aggregation (the sum the
 * aggregator unmasks carries at least the whole noise). */
static bool is_aggregate_dp(const xf_jobspec *spec) {
  return spec->privacy.unit == XF_PRIVACY_UNIT_SITE &&
         (spec->privacy.mode == XF_PRIVACY_CENTRAL ||
          spec->privacy.mode == XF_PRIVACY_DISTRIBUTED) &&
         spec->privacy.has_noise_multiplier;
}

/* ---- opening rounds ------------------------------------------------------------------- */

/* Sites that may take part now, as ids. */
static size_t eligible_ids(xf__coord *co, const xf__job *job, uint64_t *ids, size_t cap) {
  size_t n = 0;
  for (xf__site *s = co->sites; s; s = s->next)
    if (xf__site_eligible(co, job, s) && n < cap) ids[n++] = s->id;
  return n;
}

static size_t count_sites(const xf__coord *co) {
  size_t n = 0;
  for (const xf__site *s = co->sites; s; s = s->next) n++;
  return n;
}

static void eval_start(xf__coord *co, xf__job *job);

static void try_open(xf__coord *co, xf__job *job) {
  if (job->phase != XF__PHASE_WAIT) return;
  double eps;
  const xf_privacy_spec *pv = &job->spec.privacy;
  if (!job->relay && pv->has_target_epsilon &&
      xf_job_epsilon(&job->spec, xf_round_number(job->round), &eps) &&
      eps > pv->target_epsilon) {
    char why[XF_ROUND_MSG_MAX * 2];
    snprintf(why, sizeof(why),
             "stopped before round %u: it would bring epsilon to %.4g, above the target %.4g "
             "(delta %g)",
             (unsigned)xf_round_number(job->round), eps, pv->target_epsilon, pv->delta);
    XF_WARN("job_stopped", "job=%s reason=\"%s\"", job->id_text, why);
    xf_errctx err = {0};
    journal_check(xf_journal_job_set_state(co->db, job->id, XF_JOB_DONE, why, xf__now(), &err),
                  "job_state", &err);
    eval_start(co, job);
    return;
  }
  if (!xf__residency_admit(co, job)) return;
  size_t cap = count_sites(co);
  uint64_t *ids = xf_calloc(cap ? cap : 1, sizeof(uint64_t));
  if (!ids) return;
  size_t n = eligible_ids(co, job, ids, cap);
  double now = xf__now();
  bool grace = job->wait_until > now && n < job->wait_for;
  if (n < job->spec.min_sites || grace) {
    xf_free(ids);
    return;
  }
  job->wait_until = 0;
  xf_errctx err = {0};
  job->privacy_refusal = 0;
  job->privacy_note[0] = '\0';
  if (xf_round_open(job->round, ids, n, now, &err) != XF_OK) {
    XF_ERROR("round_open_failed", "job=%s reason=\"%s\"", job->id_text, err.msg);
    xf_free(ids);
    return;
  }
  xf_free(ids);
  size_t nc;
  const uint64_t *cohort = xf_round_cohort(job->round, &nc);
  if (!job->relay)
    journal_check(xf_journal_round_open(co->db, job->id, xf_round_number(job->round),
                                        xf_round_attempt(job->round), cohort, nc,
                                        xf_round_deadline(job->round), now, &err),
                  "round_open", &err);
  job->phase = XF__PHASE_ROUND;
  XF_INFO("round_opened", "job=%s round=%u attempt=%u eligible=%zu invited=%zu target=%u",
          job->id_text, (unsigned)offer_round(job), (unsigned)offer_attempt(job), n, nc,
          (unsigned)xf_round_target(job->round));
  xf_aggregator_free(job->agg);
  job->agg = NULL;
  if (xf_aggregator_create(&job->spec.strategy, job->n_params, nc ? nc : 1, &job->agg, &err) !=
      XF_OK)
    XF_ERROR("aggregator_failed", "job=%s reason=\"%s\"", job->id_text, err.msg);
  xf__sa_free(job->sa);
  job->sa = NULL;
  /* Secure aggregation runs among sites: a cohort of regional aggregators
   * (which run it among their own sites and forward the region's sum) does
   * not repeat it; a cohort that mixes both cannot run. */
  size_t regionals = 0;
  for (size_t i = 0; i < nc; i++)
    for (xf__site *o = co->sites; o; o = o->next)
      if (o->id == cohort[i] && o->regional) regionals++;
  if (job->spec.secure_aggregation.enabled && regionals > 0 && regionals < nc) {
    fail_job(co, job, "secure aggregation cannot run over a cohort that mixes sites and regional "
                      "aggregators; connect every site of this job through its region's "
                      "aggregator, or every site directly");
    return;
  }
  if (job->spec.secure_aggregation.enabled && regionals == 0 &&
      xf__sa_start(co, job, &err) != XF_OK) {
    char why[600];
    snprintf(why, sizeof(why), "secure aggregation cannot run: %s", err.msg);
    fail_job(co, job, why);
    return;
  }
  /* Without secure aggregation updates come sealed to this attempt's key,
   * so that nothing between the sender and this aggregator reads them. */
  if (job->seal) sodium_free(job->seal);
  job->seal = NULL;
  if (!job->sa) {
    job->seal = sodium_malloc(sizeof(*job->seal));
    if (!job->seal || xf_seal_keypair(job->seal->pk, job->seal->sk) != XF_OK) {
      fail_job(co, job, "cannot make the round's sealing key (secure memory)");
      return;
    }
  }
  run_actions(co, job);
}

/* ---- the final evaluation --------------------------------------------------------------- */

static void job_over(xf__coord *co, xf__job *job) {
  job->phase = XF__PHASE_OVER;
  if (!job->relay && (job->bytes_up || job->bytes_down)) {
    xf_errctx err = {0};
    journal_check(xf_journal_job_extra(co->db, job->id, NULL, job->bytes_up, job->bytes_down,
                                       &err),
                  "job_traffic", &err);
    job->bytes_up = job->bytes_down = 0;
  }
}

static void eval_start(xf__coord *co, xf__job *job) {
  job->phase = XF__PHASE_EVAL;
  double now = xf__now();
  job->eval_deadline = now + co->cfg.eval_timeout_s;
  if (job->relay && job->offer_deadline > now) job->eval_deadline = job->offer_deadline;
  size_t asked = 0;
  for (xf__site *s = co->sites; s; s = s->next) {
    s->eval_pending = false;
    if (!xf__site_eligible(co, job, s)) continue;
    if (send_task(co, job, s, job->eval_deadline, true) == XF_OK) {
      s->eval_pending = true;
      asked++;
    }
  }
  XF_INFO("evaluation_started", "job=%s model_round=%u sites=%zu", job->id_text,
          (unsigned)job->model_round, asked);
}

static void eval_check(xf__coord *co, xf__job *job) {
  bool pending = false;
  for (xf__site *s = co->sites; s; s = s->next) pending |= s->eval_pending;
  if (pending && xf__now() < job->eval_deadline) return;
  for (xf__site *s = co->sites; s; s = s->next) {
    if (s->eval_pending)
      XF_WARN("evaluation_missing", "job=%s site=%s reason=\"no report by the deadline\"",
              job->id_text, s->name);
    s->eval_pending = false;
  }
  XF_INFO("job_finished", "job=%s rounds=%u", job->id_text, (unsigned)job->spec.rounds);
  if (job->relay) xf__upstream_eval_done(co, job);
  job_over(co, job);
}

/* ---- commit ------------------------------------------------------------------------------ */

static xf_err commit_round(xf__coord *co, xf__job *job, xf_errctx *err) {
  float *mean = NULL;
  uint64_t weight;
  size_t reports;
  xf_err rc = XF_OK;
  if (job->sa) {
    /* Unmasked by secure aggregation (secagg_run.c). */
    XF_ENSURE(job->sa->mean, err, XF_EINVAL, "the secure sum is not unmasked");
    mean = job->sa->mean;
    job->sa->mean = NULL;
    weight = job->sa->mean_weight;
    reports = job->sa->n_u3;
  } else {
    mean = xf_mallocarray(job->n_params, sizeof(float));
    if (!mean) return xf_fail(err, XF_ENOMEM, "out of memory for the aggregate");
    rc = xf_aggregator_finish(job->agg, mean, err);
    if (rc != XF_OK) {
      xf_free(mean);
      return rc;
    }
    weight = xf_aggregator_total_weight(job->agg);
    reports = xf_aggregator_committed(job->agg);
  }
  if (job->relay) {
    xf__upstream_aggregate(co, job, mean, job->n_params, weight, (uint32_t)reports);
    return XF_OK;
  }
  if (is_central(&job->spec)) {
    /* N(0, (sigma C)^2) on the sum of n clipped updates is N(0, (sigma C / n)^2)
     * on their mean. */
    double n = (double)reports;
    /* The sampler rounds the mean to its grid: sigma grows by that slack
     * so that the accountant's multiplier holds (privacy/plan.h). */
    double sd;
    rc = xf_privacy_grid_sigma(job->spec.privacy.noise_multiplier,
                               job->spec.privacy.clip / n, job->n_params, &sd, err);
    if (rc == XF_OK)
      rc = co->noise ? xf_noise_gaussian_vec(co->noise, sd, mean, job->n_params)
                     : xf_fail(err, XF_EINTERNAL, "no noise generator");
    if (rc != XF_OK) {
      xf_free(mean);
      return rc;
    }
  }
  xf_server_opt_step(job->opt, job->params, mean);
  xf_free(mean);
  xf__model_file *mf = NULL;
  XF_GUARD(xf__model_file_make(job->model, job->params, &mf, err));
  xf_digest model_blob, opt_blob;
  uint8_t *opt_bytes = NULL;
  size_t opt_len = 0;
  rc = xf_blob_put(co->blobs, mf->bytes, mf->len, &model_blob, err);
  if (rc == XF_OK && xf_server_opt_save(job->opt, &opt_bytes, &opt_len) != XF_OK)
    rc = xf_fail(err, XF_ENOMEM, "out of memory saving the optimizer state");
  if (rc == XF_OK) rc = xf_blob_put(co->blobs, opt_bytes, opt_len, &opt_blob, err);
  xf_free(opt_bytes);
  uint32_t round = xf_round_number(job->round);
  if (rc == XF_OK)
    rc = xf_journal_round_commit(co->db, job->id, round, xf_round_attempt(job->round),
                                 &model_blob, &opt_blob, xf__now(), err);
  if (rc != XF_OK) {
    xf__model_file_unref(mf);
    return rc;
  }
  xf__model_file_unref(job->mf);
  job->mf = mf;
  job->model_round = round;
  xf_params_digest(job->params, job->n_params, &job->params_digest);
  XF_GUARD(refresh_offer(job, err));
  char hex[XF_DIGEST_HEX];
  xf_digest_hex(&job->params_digest, hex);
  XF_INFO("round_committed", "job=%s round=%u reports=%zu weight=%" PRIu64 " model=%s",
          job->id_text, (unsigned)round, reports, weight, hex);
  return XF_OK;
}

/* Fails the job at its current attempt or, when the round machine has
 * already moved on to the next one (a RETRY action turned into a failure),
 * at the attempt that closed. */
static void fail_job_at(xf__coord *co, xf__job *job, const char *why, bool retried);

static void fail_job(xf__coord *co, xf__job *job, const char *why) {
  fail_job_at(co, job, why, false);
}

static void fail_job_at(xf__coord *co, xf__job *job, const char *why, bool retried) {
  XF_ERROR("job_failed", "job=%s reason=\"%s\"", job->id_text, why);
  for (xf__site *s = co->sites; s; s = s->next)
    if (s->upd || s->rx) send_cancel(co, job, s, why);
  if (job->relay) {
    xf__upstream_failed(co, job, why);
  } else {
    xf_errctx err = {0};
    journal_check(xf_journal_job_fail(co->db, job->id, xf_round_number(job->round),
                                      xf_round_attempt(job->round) - (retried ? 1 : 0), why,
                                      xf__now(), &err),
                  "job_fail", &err);
  }
  job_over(co, job);
}

/* A round that missed its quorum because sites refused on privacy grounds
 * is not retried: a dataset's spent budget stays spent. A job whose own
 * target would be passed stops (done, and its last model is evaluated); one
 * that meets a spent budget fails. Either way the message carries the
 * sites' numbers. A regional aggregator passes the refusal upstream. */
static void privacy_stop(xf__coord *co, xf__job *job, const char *note, bool retried) {
  bool budget = job->privacy_refusal == XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED;
  char why[1400];
  if (job->relay) {
    snprintf(why, sizeof(why), "%s", job->privacy_note);
    xf__upstream_refuse(co, job, job->privacy_refusal, why);
    fail_job_at(co, job, why, retried);
    return;
  }
  if (budget) {
    snprintf(why, sizeof(why), "round %u cannot run: %s", (unsigned)offer_round(job),
             job->privacy_note);
    XF_INFO("round_closed", "job=%s note=\"%s\"", job->id_text, note);
    fail_job_at(co, job, why, retried);
    return;
  }
  snprintf(why, sizeof(why), "stopped before round %u: %s", (unsigned)offer_round(job),
           job->privacy_note);
  XF_WARN("job_stopped", "job=%s reason=\"%s\"", job->id_text, why);
  xf_errctx err = {0};
  for (xf__site *s = co->sites; s; s = s->next)
    if (s->upd || s->rx) send_cancel(co, job, s, why);
  /* The attempt closed without a commit: journal it so, then the job. */
  journal_check(xf_journal_round_retry(co->db, job->id, xf_round_number(job->round),
                                       xf_round_attempt(job->round) - (retried ? 1 : 0), note,
                                       xf__now(), &err),
                "round_retry", &err);
  journal_check(xf_journal_job_set_state(co->db, job->id, XF_JOB_DONE, why, xf__now(), &err),
                "job_state", &err);
  eval_start(co, job);
}

/* Notes a site's privacy refusal (its details carry the numbers). */
static void note_privacy_refusal(xf__job *job, const xf__site *s, const Xfed__TaskRefusal *r) {
  if (r->reason != XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED &&
      r->reason != XFED__TASK_REFUSAL__REASON__TARGET_REACHED)
    return;
  if (job->privacy_refusal != XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED)
    job->privacy_refusal = (int)r->reason;
  size_t used = strlen(job->privacy_note);
  const char *d = r->details && *r->details ? r->details : "privacy budget";
  /* A regional's details already name its sites. */
  if (used < sizeof(job->privacy_note) - 1)
    snprintf(job->privacy_note + used, sizeof(job->privacy_note) - used, "%s%s%s%s",
             used ? "; " : "", s->regional ? "" : s->name, s->regional ? "" : ": ", d);
}

/* ---- the machine's actions ------------------------------------------------------------- */

void xf__job_commit(xf__coord *co, xf__job *job) {
  xf_errctx err = {0};
  if (commit_round(co, job, &err) != XF_OK) {
    char why[600];
    snprintf(why, sizeof(why), "round %u could not be committed: %s", (unsigned)offer_round(job),
             err.msg);
    fail_job(co, job, why);
    return;
  }
  if (job->relay) {
    job_over(co, job);
    return;
  }
  if (xf_round_committed(job->round, &err) != XF_OK) {
    fail_job(co, job, err.msg);
    return;
  }
  job->phase = XF__PHASE_WAIT;
  run_actions(co, job);
  if (job->phase == XF__PHASE_WAIT) try_open(co, job);
}

void xf__job_commit_failed(xf__coord *co, xf__job *job, const char *why) {
  xf_errctx err = {0};
  XF_WARN("round_not_aggregated", "job=%s round=%u reason=\"%s\"", job->id_text,
          (unsigned)offer_round(job), why);
  if (xf_round_commit_failed(job->round, why, &err) != XF_OK) {
    fail_job(co, job, err.msg);
    return;
  }
  run_actions(co, job);
}

static void run_actions(xf__coord *co, xf__job *job) {
  size_t n;
  const xf_round_action *a = xf_round_actions(job->round, &n);
  if (!n) return;
  xf_round_action *acts = xf_mallocarray(n, sizeof(*acts));
  if (!acts) return;
  memcpy(acts, a, n * sizeof(*acts));
  xf_errctx err = {0};
  /* A nested call (a failed send drops a site, which can close the round
   * and open the next) starts a new list; what is left of this one belongs
   * to an attempt that is over. */
  uint32_t round = xf_round_number(job->round), attempt = xf_round_attempt(job->round);
  for (size_t i = 0; i < n && job->phase != XF__PHASE_OVER; i++) {
    if (xf_round_number(job->round) != round || xf_round_attempt(job->round) != attempt) break;
    xf_round_action *act = &acts[i];
    xf__site *s = act->site ? xf__site_find(co, act->site) : NULL;
    switch (act->kind) {
    case XF_ROUND_ACT_SEND_TASK:
      if (!s || send_task(co, job, s, act->deadline, false) != XF_OK) {
        if (xf_round_site_dropped(job->round, act->site, &err) == XF_OK) run_actions(co, job);
      }
      break;
    case XF_ROUND_ACT_CANCEL:
      if (s) send_cancel_attempt(co, job, s, "the round closed without this site", act->attempt);
      break;
    case XF_ROUND_ACT_DISCARD:
      if (s) send_cancel_attempt(co, job, s, act->note, act->attempt);
      break;
    case XF_ROUND_ACT_COMMIT:
      for (xf__site *o = co->sites; o; o = o->next)
        if (o->upd || o->rx) send_cancel(co, job, o, "the round closed without this update");
      /* Under secure aggregation the sum must be unmasked first: the
       * commit goes on from xf__job_commit when it is. */
      if (job->sa) {
        (void)xf__sa_unmask_start(co, job);
        break;
      }
      xf__job_commit(co, job);
      break;
    case XF_ROUND_ACT_RETRY:
      if (job->privacy_refusal) {
        privacy_stop(co, job, act->note, true);
        break;
      }
      XF_WARN("round_retried", "job=%s round=%u reports=%u reason=\"%s\"", job->id_text,
              (unsigned)offer_round(job), (unsigned)act->reported, act->note);
      if (job->relay) {
        fail_job(co, job, act->note);
        break;
      }
      journal_check(xf_journal_round_retry(co->db, job->id, xf_round_number(job->round),
                                           xf_round_attempt(job->round) - 1, act->note,
                                           xf__now(), &err),
                    "round_retry", &err);
      job->phase = XF__PHASE_WAIT;
      break;
    case XF_ROUND_ACT_FAIL_JOB:
      if (job->privacy_refusal) privacy_stop(co, job, act->note, false);
      else fail_job(co, job, act->note);
      break;
    case XF_ROUND_ACT_FINISH_JOB: eval_start(co, job); break;
    case XF_ROUND_ACT_GO: break; /* no confirmation is asked for here */
    }
  }
  xf_free(acts);
}

/* ---- updates ------------------------------------------------------------------------------ */

/* Aligned room for one chunk; the sink runs on the loop thread only. */
static float sink_scratch[XF_TENSOR_CHUNK_MAX / sizeof(float)];

static xf_err fold_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                        xf_errctx *err) {
  xf__site *s = user;
  XF_ENSURE(s->upd, err, XF_EINVAL, "no update in flight");
  XF_ENSURE(offset % 4 == 0 && len % 4 == 0, err, XF_EFORMAT,
            "update chunk at byte %" PRIu64 " is not whole float32 values", offset);
  XF_ENSURE(len <= sizeof(sink_scratch), err, XF_EFORMAT, "update chunk of %zu bytes", len);
  /* The chunk's bytes sit in a protobuf buffer with no alignment promise
   * (in practice malloc's, which is aligned: then no copy is needed). */
  const float *values = (const float *)(const void *)data;
  if ((uintptr_t)data % _Alignof(float) != 0) {
    memcpy(sink_scratch, data, len);
    values = sink_scratch;
  }
  return xf_aggregator_fold(s->upd, (size_t)(offset / 4), values, len / 4, err);
}

bool xf__job_uplink(const xf_jobspec *spec, xf_codec_uplink *codec) {
  const xf_job_uplink *u = &spec->compression.uplink;
  *codec = (xf_codec_uplink){.topk_fraction = u->topk_fraction, .quant_bits = u->quant_bits};
  return u->quant_bits != 0 || u->topk_fraction > 0;
}

/* A compressed update is kept whole (it is a fraction of the float32 size)
 * and decoded at its end: its chunks are not float values. */
static xf_err stash_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  xf__site *s = user;
  XF_ENSURE(s->rx_encoded && offset <= s->rx_encoded_len && len <= s->rx_encoded_len - offset,
            err, XF_EFORMAT, "update chunk at byte %" PRIu64 " is beyond the update", offset);
  memcpy(s->rx_encoded + offset, data, len);
  return XF_OK;
}

/* Decodes a compressed update into the aggregator. */
static xf_err fold_encoded(xf__job *job, xf__site *s, xf_errctx *err) {
  float *values = xf_mallocarray(job->n_params, sizeof(float));
  if (!values) return xf_fail(err, XF_ENOMEM, "out of memory decoding an update");
  xf_err rc = xf_codec_decode(s->rx_encoded, s->rx_encoded_len, job->n_params, values, err);
  if (rc == XF_OK) rc = xf_aggregator_fold(s->upd, 0, values, job->n_params, err);
  xf_free(values);
  return rc;
}

/* A sealed update: each stream chunk is one sealed chunk; opened, its
 * plaintext goes on to the stash or the fold at its plaintext offset. */
static uint8_t open_scratch[XF_SEAL_STREAM_CHUNK];

static xf_err sealed_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                          xf_errctx *err) {
  xf__site *s = user;
  const uint64_t span = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
  XF_ENSURE(s->rx_opener && offset % span == 0 && len > XF_SEAL_ABYTES && len <= span, err,
            XF_EFORMAT, "sealed update chunk at byte %" PRIu64 " is not one sealed chunk", offset);
  uint64_t plain = offset / span * XF_SEAL_STREAM_CHUNK;
  if (xf_seal_open_chunk(s->rx_opener, plain, data, len, open_scratch) != XF_OK)
    return xf_fail(err, XF_EINTEGRITY,
                   "sealed update chunk at byte %" PRIu64 " does not open: altered, or sealed "
                   "to another key",
                   offset);
  return s->rx_stash ? stash_sink(s, plain, open_scratch, len - XF_SEAL_ABYTES, err)
                     : fold_sink(s, plain, open_scratch, len - XF_SEAL_ABYTES, err);
}

static void send_ack(xf__site *s, const xf_tensor_receiver *rx) {
  Xfed__TensorAck ack;
  xf_tensor_receiver_ack(rx, &ack);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &ack;
  if (s->peer) (void)xf__send(s->peer, &env);
}

/* Lets waiting uploads in while fewer than max_staged are in flight. */
static void admit(xf__coord *co, xf__job *job) {
  for (xf__site *s = co->sites; s && job->agg; s = s->next) {
    if (!s->waiting_admission) continue;
    if (xf_aggregator_in_flight(job->agg) >= co->cfg.max_staged) return;
    xf_errctx err = {0};
    if (xf_aggregator_begin_update(job->agg, s->id, s->rx_weight, &s->upd, &err) != XF_OK) {
      XF_WARN("update_refused", "job=%s site=%s reason=\"%s\"", job->id_text, s->name, err.msg);
      if (s->peer) xf_session_send_error(s->peer->conn, err.code, "%s", err.msg);
      site_abort_update(co, s);
      if (xf_round_site_dropped(job->round, s->id, &err) == XF_OK) run_actions(co, job);
      continue;
    }
    s->waiting_admission = false;
    send_ack(s, s->rx);
  }
}

static void drop_site(xf__coord *co, xf__job *job, xf__site *s, const char *why) {
  XF_WARN("site_dropped", "job=%s round=%u site=%s reason=\"%s\"", job->id_text,
          (unsigned)offer_round(job), s->name, why);
  site_abort_update(co, s);
  xf_errctx err = {0};
  if (xf_round_site_dropped(job->round, s->id, &err) == XF_OK) run_actions(co, job);
  admit(co, job);
  if (job->sa && job->phase == XF__PHASE_ROUND) xf__sa_site_changed(co, job);
}

void xf__job_drop_site(xf__coord *co, xf__job *job, xf__site *s, const char *why) {
  drop_site(co, job, s, why);
}

static bool is_current(const xf__job *job, const char *job_id, uint32_t round, uint32_t attempt) {
  return job_id && strcmp(job_id, job->id_text) == 0 && round == offer_round(job) &&
         attempt == offer_attempt(job);
}

static void on_tensor_begin(xf__coord *co, xf__job *job, xf__site *s,
                            const Xfed__TensorBegin *m) {
  xf_errctx err = {0};
  Xfed__TensorBegin__Kind want =
      s->regional ? XFED__TENSOR_BEGIN__KIND__AGGREGATE : XFED__TENSOR_BEGIN__KIND__UPDATE;
  xf_participant_state st;
  uint64_t samples;
  const char *reason;
  if (m->kind != want || job->phase != XF__PHASE_ROUND ||
      !is_current(job, m->job_id, m->round, m->attempt) ||
      xf_round_site(job->round, s->id, &st, &samples, &reason) != XF_OK ||
      (st != XF_PARTICIPANT_INVITED && st != XF_PARTICIPANT_REPORTING)) {
    XF_WARN("update_refused", "job=%s site=%s round=%u attempt=%u reason=\"not a task it holds\"",
            m->job_id ? m->job_id : "", s->name, (unsigned)m->round, (unsigned)m->attempt);
    if (s->peer)
      xf_session_send_error(s->peer->conn, XF_EINVAL,
                            "job %s round %u attempt %u is not a task you hold; drop it",
                            m->job_id ? m->job_id : "", (unsigned)m->round, (unsigned)m->attempt);
    return;
  }
  /* The plan's conditions on a regional aggregate hold at this end too: one
   * that sums fewer sites than the policy asks is not taken in. */
  const xf_policy_region_plan *rp =
      s->regional && xf__residency_on(co) ? xf__residency_region(job, s->region) : NULL;
  if (rp && rp->path == XF_POLICY_PATH_REGIONAL && m->contributors < rp->min_cohort) {
    char why[300];
    snprintf(why, sizeof(why),
             "the aggregate of region %s holds %u sites; rule %s needs at least %u before it "
             "leaves the region", s->region, (unsigned)m->contributors, rp->rule,
             (unsigned)rp->min_cohort);
    xf__audit(co, "refused_task", job->id_text,
              json_pack("{s:s,s:I,s:I,s:s,s:s,s:s}", "job", job->id_text, "round",
                        (json_int_t)m->round, "attempt", (json_int_t)m->attempt, "from",
                        s->name, "kind", "regional_aggregate", "why", why));
    if (s->peer) xf_session_send_error(s->peer->conn, XF_EDENIED, "%s", why);
    drop_site(co, job, s, why);
    return;
  }
  xf_codec_uplink codec;
  bool encoded = xf__job_uplink(&job->spec, &codec);
  bool compressed = encoded;
  /* A region's aggregate keeps all of its sites' top-k values. */
  if (s->regional && codec.topk_fraction > 0) {
    double f = codec.topk_fraction * (m->contributors ? m->contributors : 1);
    codec.topk_fraction = f > 1 ? 1 : f;
  }
  uint64_t max_encoded = encoded ? xf_codec_encoded_max(&codec, job->n_params) : 0;
  /* With uplink compression an update comes encoded (U8); float32 is
   * always understood (a regional aggregator that could not encode). Under
   * secure aggregation it is the masked integers (U32), nothing else. */
  bool masked = job->sa != NULL;
  /* Without secure aggregation the update must come sealed to this
   * attempt's key; the checks below are on its plaintext. */
  uint64_t plain = m->total_bytes;
  bool sealed = job->seal != NULL;
  if (sealed && (m->sealed_by.len != XF_SEAL_PUBLICKEYBYTES ||
                 m->sealed_chunk != XF_SEAL_STREAM_CHUNK ||
                 m->chunk_bytes != XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES ||
                 !xf_seal_stream_plain_length(m->total_bytes, XF_SEAL_STREAM_CHUNK, &plain))) {
    if (s->peer)
      xf_session_send_error(s->peer->conn, XF_EFORMAT,
                            "updates of this job come sealed to the key of its task offer "
                            "(TensorBegin.sealed_by, chunks of %zu bytes)",
                            (size_t)XF_SEAL_STREAM_CHUNK);
    drop_site(co, job, s, "update not sealed to the round's key");
    return;
  }
  bool as_float = !masked && m->element_count == job->n_params &&
                  m->dtype == XFED__TENSOR_BEGIN__DTYPE__F32 &&
                  plain == (uint64_t)job->n_params * 4;
  encoded = !masked && encoded && m->dtype == XFED__TENSOR_BEGIN__DTYPE__U8;
  bool shape_ok = as_float || (encoded && m->element_count == plain && plain > 0 &&
                               plain <= max_encoded) ||
                  (masked && m->dtype == XFED__TENSOR_BEGIN__DTYPE__U8 &&
                   m->element_count == plain &&
                   plain == xf_codec_packed_bytes(job->sa->p.length, job->sa->p.bits));
  if (!shape_ok || m->weight == 0) {
    if (s->peer) {
      if (masked)
        xf_session_send_error(s->peer->conn, XF_EFORMAT,
                              "an update of this job is its %" PRIu64 " masked integers packed "
                              "to %u bits (U8) with a weight > 0",
                              job->sa->p.length, (unsigned)job->sa->p.bits);
      else if (compressed)
        xf_session_send_error(s->peer->conn, XF_EFORMAT,
                              "an update of this job is its %zu values encoded for the uplink "
                              "(U8, at most %" PRIu64 " bytes) with a weight > 0",
                              job->n_params, max_encoded);
      else
        xf_session_send_error(s->peer->conn, XF_EFORMAT,
                              "an update of this job is %zu float32 values with a weight > 0",
                              job->n_params);
    }
    drop_site(co, job, s, "malformed update announcement");
    return;
  }
  if (s->rx) { /* a resume after reconnect */
    if (xf_tensor_receiver_begin(s->rx, m, &err) != XF_OK) {
      drop_site(co, job, s, err.msg);
      return;
    }
    if (!s->waiting_admission) send_ack(s, s->rx);
    return;
  }
  if (encoded || masked) {
    s->rx_encoded = xf_malloc((size_t)plain);
    s->rx_encoded_len = (size_t)plain;
    if (!s->rx_encoded) {
      drop_site(co, job, s, "out of memory for a compressed update");
      return;
    }
  }
  if (sealed) {
    char ctx[256];
    size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), job->id_text, m->round,
                                            m->attempt, s->name);
    if (xf_seal_receiver_new(job->seal->sk, m->sealed_by.data, (const uint8_t *)ctx, ctx_len,
                             &s->rx_opener) != XF_OK) {
      drop_site(co, job, s, "cannot open the update's seal");
      return;
    }
    s->rx_stash = encoded || masked;
  }
  xf_tensor_sink sink = sealed ? sealed_sink : encoded || masked ? stash_sink : fold_sink;
  if (xf_tensor_receiver_new(m->total_bytes, sink, s, &s->rx, &err) != XF_OK ||
      xf_tensor_receiver_begin(s->rx, m, &err) != XF_OK) {
    drop_site(co, job, s, err.msg);
    return;
  }
  if (masked) {
    /* Kept whole and added to the secure sum at its end: a partial masked
     * input could not be taken out again (crypto/secagg.h). */
    s->rx_weight = m->weight;
    s->waiting_admission = false;
    send_ack(s, s->rx);
    return;
  }
  /* Central privacy averages clipped updates with equal weights, so that
   * one site moves the mean by at most clip / n (DP-FedAvg). */
  /* Robust kinds count votes: one per site, a region's sites for its
   * aggregate (coordinator/aggregate.h). */
  uint64_t sites = s->regional ? (m->contributors ? m->contributors : 1) : 1;
  s->rx_weight = is_aggregate_dp(&job->spec) ? 1
                 : xf_job_strategy_is_robust(job->spec.strategy.kind) ? sites
                                                                      : m->weight;
  s->waiting_admission = true;
  admit(co, job);
}

static void on_tensor_end(xf__coord *co, xf__job *job, xf__site *s, const Xfed__TensorEnd *m) {
  xf_errctx err = {0};
  xf_err rc = xf_tensor_receiver_end(s->rx, m, &err);
  if (rc == XF_ETRUNCATED) {
    send_ack(s, s->rx);
    return;
  }
  if (rc != XF_OK) {
    drop_site(co, job, s, err.msg);
    return;
  }
  uint64_t bytes = xf_tensor_receiver_info(s->rx)->total_bytes;
  if (job->sa) {
    uint64_t len = job->sa->p.length;
    uint8_t *words = xf_malloc((size_t)len * sizeof(uint32_t));
    xf_err rc2 = words ? xf_codec_unpack_bits(s->rx_encoded, s->rx_encoded_len, (size_t)len,
                                              job->sa->p.bits, (uint32_t *)(void *)words, &err)
                       : xf_fail(&err, XF_ENOMEM, "out of memory unpacking a masked input");
    if (rc2 == XF_OK) rc2 = xf__sa_masked(job, s, &words, (size_t)len * sizeof(uint32_t), &err);
    xf_free(words);
    if (rc2 != XF_OK) {
      drop_site(co, job, s, err.msg);
      return;
    }
  } else if (s->rx_encoded && fold_encoded(job, s, &err) != XF_OK) {
    drop_site(co, job, s, err.msg);
    return;
  }
  xf_free(s->rx_encoded);
  s->rx_encoded = NULL;
  s->rx_encoded_len = 0;
  xf_seal_receiver_free(s->rx_opener);
  s->rx_opener = NULL;
  if (!job->sa && xf_aggregator_end_update(s->upd, &err) != XF_OK) {
    s->upd = NULL;
    drop_site(co, job, s, err.msg);
    return;
  }
  s->upd = NULL;
  send_ack(s, s->rx);
  xf_tensor_receiver_free(s->rx);
  s->rx = NULL;
  job->bytes_up += bytes;
  /* An artifact that came across a region boundary. */
  if (co->cfg.region[0] && strcmp(s->region, co->cfg.region) != 0) {
    json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:s,s:I,s:I}", "job", job->id_text, "round",
                          (json_int_t)offer_round(job), "attempt",
                          (json_int_t)offer_attempt(job), "kind",
                          s->regional ? "regional_aggregate" : "update", "sender", s->name,
                          "from", s->region, "to", co->cfg.region, "bytes", (json_int_t)bytes,
                          "weight", (json_int_t)s->rx_weight);
    if (job->has_plan) json_object_set_new(o, "policy_version", json_integer((json_int_t)job->plan.version));
    xf__audit(co, "crossing", job->id_text, o);
  }
  if (!job->relay) {
    xf_journal_participant p = {.site = s->id, .state = XF_PARTICIPANT_REPORTED,
                                .samples = s->rx_weight, .bytes_up = bytes,
                                .bytes_down = s->bytes_down};
    journal_check(xf_journal_participant_set(co->db, job->id, xf_round_number(job->round),
                                             xf_round_attempt(job->round), &p, xf__now(), &err),
                  "participant", &err);
  }
  XF_INFO("update_received", "job=%s round=%u site=%s weight=%" PRIu64 " bytes=%" PRIu64,
          job->id_text, (unsigned)offer_round(job), s->name, s->rx_weight, bytes);
  if (xf_round_update_reported(job->round, s->id, s->rx_weight, &err) == XF_OK)
    run_actions(co, job);
  else
    XF_WARN("report_ignored", "job=%s site=%s reason=\"%s\"", job->id_text, s->name, err.msg);
  admit(co, job);
}

/* ---- metrics ------------------------------------------------------------------------------- */

static void on_metrics(xf__coord *co, xf__job *job, xf__site *s, const Xfed__Metrics *m) {
  const char *site = m->site ? m->site : "";
  if (!m->job_id || strcmp(m->job_id, job->id_text) != 0) return;
  /* A site reports for itself; a regional for the sites of its region. */
  if (s->regional ? strcmp(m->region ? m->region : "", s->region) != 0
                  : strcmp(site, s->name) != 0) {
    XF_WARN("metrics_refused", "from=%s about=%s reason=\"a site reports only for itself, a "
                               "regional aggregator only for its region\"",
            s->name, site);
    return;
  }
  if (s->regional && strcmp(site, s->name) == 0 && !m->has_train && !m->has_test) {
    s->eval_pending = false; /* the regional's evaluation is complete */
    if (job->phase == XF__PHASE_EVAL) eval_check(co, job);
    return;
  }
  if (job->relay) {
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_METRICS;
    env.metrics = (Xfed__Metrics *)m;
    xf__upstream_forward(co, &env);
  } else {
    uint64_t id = xf_coord_site_id(site);
    xf_errctx err = {0};
    if (s->regional)
      journal_check(xf_journal_site_seen(co->db, id, site, m->region, false, xf__now(), &err),
                    "site_seen", &err);
    if (m->has_train) {
      xf_journal_metrics r = {.round = m->round, .site = id, .train_loss = m->train_loss,
                              .test_loss = NAN, .test_accuracy = NAN, .samples = m->samples,
                              .has_epsilon = m->has_epsilon && !isnan(m->epsilon),
                              .epsilon = m->epsilon, .has_bytes = true,
                              .bytes_up = m->bytes_up, .bytes_down = m->bytes_down};
      if (m->round >= 1)
        journal_check(xf_journal_metrics_add(co->db, job->id, &r, &err), "metrics", &err);
    }
    if (m->has_test && m->model_round >= 1) {
      xf_journal_metrics r = {.round = m->model_round, .site = id, .train_loss = NAN,
                              .test_loss = m->test_loss, .test_accuracy = m->test_accuracy,
                              .samples = m->samples};
      journal_check(xf_journal_metrics_add(co->db, job->id, &r, &err), "metrics", &err);
    }
  }
  XF_INFO("metrics", "job=%s round=%u site=%s train_loss=%.4f test_accuracy=%.4f model_round=%u",
          job->id_text, (unsigned)m->round, site, m->has_train ? m->train_loss : NAN,
          m->has_test ? m->test_accuracy : NAN, (unsigned)m->model_round);
  if (m->has_epsilon)
    XF_INFO("privacy_spent", "job=%s round=%u site=%s dataset=%s epsilon=%.6g "
            "noise_multiplier=%.6g dataset_epsilon=%.6g budget=%g",
            job->id_text, (unsigned)m->round, site, m->dataset ? m->dataset : "", m->epsilon,
            m->noise_multiplier, m->ledger_epsilon, m->budget_epsilon);
  if (job->phase == XF__PHASE_EVAL && !s->regional && m->has_test &&
      m->model_round == job->model_round) {
    s->eval_pending = false;
    eval_check(co, job);
  }
}

/* ---- frames from participants ------------------------------------------------------------- */

void xf__job_on_frame(xf__coord *co, xf__site *s, const Xfed__Envelope *env) {
  xf__job *job = co->active;
  xf_errctx err = {0};
  if (!job || job->phase == XF__PHASE_OVER) {
    if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN && s->peer)
      xf_session_send_error(s->peer->conn, XF_EINVAL, "no job is running here");
    return;
  }
  if (job->phase == XF__PHASE_ROUND) {
    if (xf_round_tick(job->round, xf__now(), &err) == XF_OK) run_actions(co, job);
    if (job->phase != XF__PHASE_ROUND && job->phase != XF__PHASE_EVAL &&
        env->body_case != XFED__ENVELOPE__BODY_METRICS)
      return;
  }
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_ACCEPT: {
    const Xfed__TaskAccept *a = env->task_accept;
    if (job->phase != XF__PHASE_ROUND || !is_current(job, a->job_id, a->round, a->attempt))
      return;
    if (xf_round_site_accepted(job->round, s->id, &err) == XF_OK) {
      if (!job->relay) {
        xf_journal_participant p = {.site = s->id, .state = XF_PARTICIPANT_REPORTING,
                                    .bytes_down = s->bytes_down};
        journal_check(xf_journal_participant_set(co->db, job->id, xf_round_number(job->round),
                                                 xf_round_attempt(job->round), &p, xf__now(),
                                                 &err),
                      "participant", &err);
      }
      run_actions(co, job);
    }
    return;
  }
  case XFED__ENVELOPE__BODY_TASK_REFUSAL: {
    const Xfed__TaskRefusal *r = env->task_refusal;
    XF_WARN("task_refused", "job=%s round=%u site=%s reason=%d details=\"%s\"",
            r->job_id ? r->job_id : "", (unsigned)r->round, s->name, (int)r->reason,
            r->details ? r->details : "");
    if (job->phase == XF__PHASE_EVAL) {
      s->eval_pending = false;
      eval_check(co, job);
      return;
    }
    if (job->phase != XF__PHASE_ROUND || !r->job_id || strcmp(r->job_id, job->id_text) != 0 ||
        r->round != offer_round(job))
      return;
    if (r->reason == XFED__TASK_REFUSAL__REASON__POLICY_DENIED)
      xf__audit(co, "refused_task", job->id_text,
                json_pack("{s:s,s:I,s:s,s:s,s:s}", "job", job->id_text, "round",
                          (json_int_t)r->round, "site", s->name, "by", "site",
                          "why", r->details ? r->details : ""));
    note_privacy_refusal(job, s, r);
    if (xf_round_site_refused(job->round, s->id, r->details, &err) == XF_OK) run_actions(co, job);
    if (job->sa && job->phase == XF__PHASE_ROUND) xf__sa_site_changed(co, job);
    return;
  }
  case XFED__ENVELOPE__BODY_METRICS: on_metrics(co, job, s, env->metrics); return;
  case XFED__ENVELOPE__BODY_SECAGG_ADVERT:
  case XFED__ENVELOPE__BODY_SECAGG_SHARES:
  case XFED__ENVELOPE__BODY_SECAGG_REVEAL:
    if (job->sa && job->phase == XF__PHASE_ROUND) xf__sa_on_frame(co, job, s, env);
    return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: on_tensor_begin(co, job, s, env->tensor_begin); return;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
    if (!s->rx || s->waiting_admission) {
      if (s->peer)
        xf_session_send_error(s->peer->conn, XF_EINVAL,
                              "a tensor chunk without an acknowledged TensorBegin");
      return;
    }
    if (xf_tensor_receiver_chunk(s->rx, env->tensor_chunk, &err) != XF_OK) {
      if (s->peer) xf_session_send_error(s->peer->conn, err.code, "%s", err.msg);
      drop_site(co, job, s, err.msg);
    }
    return;
  case XFED__ENVELOPE__BODY_TENSOR_END:
    if (!s->rx || s->waiting_admission) return;
    on_tensor_end(co, job, s, env->tensor_end);
    return;
  case XFED__ENVELOPE__BODY_TENSOR_ACK:
    /* Sites acknowledge the model; nothing waits on it. */
    return;
  case XFED__ENVELOPE__BODY_ERROR:
    if (job->phase == XF__PHASE_ROUND) {
      xf_participant_state st;
      uint64_t smp;
      const char *rs;
      if (xf_round_site(job->round, s->id, &st, &smp, &rs) == XF_OK &&
          (st == XF_PARTICIPANT_INVITED || st == XF_PARTICIPANT_REPORTING))
        drop_site(co, job, s, env->error->message ? env->error->message : "error");
    }
    return;
  default:
    if (s->peer)
      xf_session_send_error(s->peer->conn, XF_EUNSUPPORTED, "%s is not a site's message",
                            xf_envelope_body_name(env));
    return;
  }
}

/* ---- sites coming and going ------------------------------------------------------------------ */

void xf__job_site_back(xf__coord *co, xf__site *s) {
  xf__job *job = co->active;
  if (!job) return;
  if (job->phase == XF__PHASE_WAIT) {
    try_open(co, job);
    return;
  }
  if (job->phase != XF__PHASE_ROUND) return;
  xf_participant_state st;
  uint64_t smp;
  const char *rs;
  if (xf_round_site(job->round, s->id, &st, &smp, &rs) != XF_OK) return;
  if (st == XF_PARTICIPANT_INVITED || st == XF_PARTICIPANT_REPORTING) {
    XF_INFO("site_back", "job=%s round=%u site=%s", job->id_text, (unsigned)offer_round(job),
            s->name);
    if (send_task(co, job, s, xf_round_deadline(job->round), false) != XF_OK)
      drop_site(co, job, s, "cannot resend the task");
  }
}

void xf__job_site_away(xf__coord *co, xf__site *s) {
  xf__job *job = co->active;
  s->away_since = xf__now();
  if (!job) return;
  if (job->phase == XF__PHASE_EVAL && s->eval_pending && !s->regional) {
    s->eval_pending = false;
    eval_check(co, job);
  }
}

void xf__job_cancel(xf__coord *co, const char *why) {
  xf__job *job = co->active;
  if (!job) return;
  for (xf__site *s = co->sites; s; s = s->next)
    if (s->peer) send_cancel(co, job, s, why);
  job_over(co, job);
}

/* ---- the tick ------------------------------------------------------------------------------- */

static xf_err activate(xf__coord *co, int64_t id, xf_errctx *err);

void xf__job_tick(xf__coord *co) {
  xf__job *job = co->active;
  if (job && job->phase == XF__PHASE_ROUND) {
    xf_errctx err = {0};
    double now = xf__now();
    for (xf__site *s = co->sites; s; s = s->next)
      if (!s->peer && s->away_since > 0 && now - s->away_since > XF_COORD_RECONNECT_GRACE_S) {
        xf_participant_state st;
        uint64_t smp;
        const char *rs;
        if (xf_round_site(job->round, s->id, &st, &smp, &rs) == XF_OK &&
            (st == XF_PARTICIPANT_INVITED || st == XF_PARTICIPANT_REPORTING))
          drop_site(co, job, s, "lost its link and did not come back in time");
        if (job->phase != XF__PHASE_ROUND) break;
      }
    if (job->phase == XF__PHASE_ROUND && xf_round_tick(job->round, now, &err) == XF_OK)
      run_actions(co, job);
    if (job->phase == XF__PHASE_ROUND && job->sa) xf__sa_tick(co, job, now);
  }
  if (job && job->phase == XF__PHASE_WAIT) try_open(co, job);
  if (job && job->phase == XF__PHASE_EVAL) eval_check(co, job);
  if (job && job->phase == XF__PHASE_OVER) {
    if (!job->relay && job->bytes_up + job->bytes_down) job_over(co, job);
    xf__job_free(job);
    co->active = NULL;
    if (!co->cfg.regional) xf__job_schedule(co);
  }
}

/* ---- activation ------------------------------------------------------------------------------ */

/* Makes the journal's job `id` the active one: its spec, its last
 * committed model and optimizer state, at its current round. */
static xf_err activate(xf__coord *co, int64_t id, xf_errctx *err) {
  xf_journal_job jj;
  XF_GUARD(xf_journal_job_load(co->db, id, &jj, err));
  xf__job *job = xf_calloc(1, sizeof(*job));
  if (!job) return xf_fail(err, XF_ENOMEM, "out of memory");
  job->id = id;
  snprintf(job->id_text, sizeof(job->id_text), "%" PRId64, id);
  job->spec = jj.spec;
  xf_err rc = xf_jobspec_to_json(&job->spec, &job->spec_json);
  void *bytes = NULL;
  size_t len = 0;
  if (rc == XF_OK) rc = xf_blob_get(co->blobs, &jj.model, &bytes, &len, err);
  if (rc == XF_OK) rc = xf_checkpoint_decode(bytes, len, &job->model, &job->params, err);
  xf_free(bytes);
  bytes = NULL;
  if (rc == XF_OK) {
    job->n_params = xf_model_num_params(job->model);
    rc = xf_server_opt_create(&job->spec.strategy, job->n_params, &job->opt, err);
  }
  if (rc == XF_OK && jj.has_opt_state) {
    rc = xf_blob_get(co->blobs, &jj.opt_state, &bytes, &len, err);
    if (rc == XF_OK) rc = xf_server_opt_load(job->opt, bytes, len, err);
    xf_free(bytes);
  }
  if (rc == XF_OK) rc = xf__model_file_make(job->model, job->params, &job->mf, err);
  uint32_t round = jj.round > job->spec.rounds ? job->spec.rounds : jj.round;
  if (rc == XF_OK) rc = xf_round_create(&job->spec, round, jj.attempt, 0, &job->round, err);
  if (rc != XF_OK) {
    xf__job_free(job);
    return rc;
  }
  xf_params_digest(job->params, job->n_params, &job->params_digest);
  if ((rc = refresh_offer(job, err)) != XF_OK) {
    xf__job_free(job);
    return rc;
  }
  job->model_round = jj.rounds_committed;
  job->phase = XF__PHASE_WAIT;
  if (jj.round_open || jj.rounds_committed > 0) {
    /* Resuming: give the sites that were there time to come back, so the
     * cohort is drawn over the same set as before the stop. */
    job->wait_until = xf__now() + co->cfg.resume_grace_s;
    uint32_t invited = 0;
    journal_check(xf_journal_last_invited(co->db, id, &invited, err), "last_invited", err);
    job->wait_for = invited ? invited : UINT32_MAX;
  }
  co->active = job;
  /* A job paused by the residency policy stays paused until a decision
   * allows it again (at once, if the policy changed while we were down). */
  job->paused = jj.state == XF_JOB_PAUSED;
  if (jj.state == XF_JOB_QUEUED)
    journal_check(xf_journal_job_set_state(co->db, id, XF_JOB_RUNNING, NULL, xf__now(), err),
                  "job_state", err);
  XF_INFO("job_active", "job=%s name=%s round=%u attempt=%u resumed=%d", job->id_text,
          job->spec.name, (unsigned)round, (unsigned)jj.attempt, jj.round_open ? 1 : 0);
  return XF_OK;
}

void xf__job_schedule(xf__coord *co) {
  if (co->active || co->cfg.regional || co->stopping) return;
  xf_errctx err = {0};
  int64_t *ids = NULL;
  size_t n = 0;
  if (xf_journal_running_jobs(co->db, &ids, &n, &err) != XF_OK) {
    XF_ERROR("journal_failed", "doing=running_jobs reason=\"%s\"", err.msg);
    return;
  }
  if (n == 0) {
    xf_free(ids);
    ids = NULL;
    if (xf_journal_queued_jobs(co->db, &ids, &n, &err) != XF_OK) {
      XF_ERROR("journal_failed", "doing=queued_jobs reason=\"%s\"", err.msg);
      return;
    }
  }
  for (size_t i = 0; i < n && !co->active; i++) {
    if (activate(co, ids[i], &err) != XF_OK) {
      char why[600];
      snprintf(why, sizeof(why), "cannot resume: %s", err.msg);
      XF_ERROR("job_failed", "job=%" PRId64 " reason=\"%s\"", ids[i], why);
      xf_errctx e2 = {0};
      journal_check(xf_journal_job_set_state(co->db, ids[i], XF_JOB_FAILED, why, xf__now(), &e2),
                    "job_state", &e2);
    }
  }
  xf_free(ids);
  if (co->active) try_open(co, co->active);
}

/* ---- the regional role's relay ---------------------------------------------------------------- */

xf_err xf__job_start_relay(xf__coord *co, xf_errctx *err) {
  xf__upstream *up = &co->up;
  xf__job *job = xf_calloc(1, sizeof(*job));
  if (!job) return xf_fail(err, XF_ENOMEM, "out of memory");
  job->relay = true;
  snprintf(job->id_text, sizeof(job->id_text), "%s", up->job_id);
  job->offer_round = up->round;
  job->offer_attempt = up->attempt;
  job->offer_deadline = up->deadline;
  job->evaluate_only = up->evaluate_only;
  job->model_round = up->model_round;
  xf_err rc = xf_jobspec_parse_string(up->params_json, strlen(up->params_json), "task offer",
                                      &job->spec, err);
  if (rc == XF_OK)
    rc = xf_checkpoint_decode(up->model_buf, up->model_len, &job->model, &job->params, err);
  if (rc == XF_OK) {
    job->n_params = xf_model_num_params(job->model);
    xf_params_digest(job->params, job->n_params, &job->params_digest);
    if (memcmp(&job->params_digest, &up->model_digest, sizeof(xf_digest)) != 0)
      rc = xf_fail(err, XF_EINTEGRITY, "the model's parameters do not match the offer's digest");
  }
  if (rc == XF_OK) rc = xf_jobspec_to_json(&job->spec, &job->spec_json);
  if (rc == XF_OK) rc = xf__model_file_make(job->model, job->params, &job->mf, err);
  if (rc == XF_OK) rc = refresh_offer(job, err);
  if (rc == XF_OK && !job->evaluate_only) {
    /* One round among this region's sites, closing early enough to
     * forward the aggregate before the upstream deadline. */
    xf_jobspec sub = job->spec;
    double left = up->deadline - xf__now();
    sub.round_deadline_s = left * 0.9 > 1 ? left * 0.9 : 1;
    sub.sites_per_round = 1.0;
    sub.over_selection = 1.0;
    sub.min_sites = 1;
    sub.rounds = up->round > sub.rounds ? up->round : sub.rounds;
    rc = xf_round_create(&sub, up->round, 1, 1, &job->round, err);
  }
  if (rc != XF_OK) {
    xf__job_free(job);
    return rc;
  }
  if (co->active) xf__job_free(co->active);
  co->active = job;
  if (job->evaluate_only) {
    eval_start(co, job);
    eval_check(co, job);
  } else {
    job->phase = XF__PHASE_WAIT;
    try_open(co, job);
  }
  return XF_OK;
}
