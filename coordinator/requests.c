/* SPDX-License-Identifier: Apache-2.0 */
/* The researchers' requests to the global coordinator: submit, query and
 * cancel jobs, read their metrics, download their models
 * (docs/protocol.md, "CLI ↔ coordinator"). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/jobprogress.h"
#include "privacy/accountant.h"
#include "kernels/checkpoint.h"
#include "policy/audit.h"

/* Metrics rows a page may hold at most, whatever the CLI asks (and less
 * when they would outgrow one frame). */
#define XF__METRICS_PAGE_MAX 20000
/* Jobs a page of JobList may hold at most. */
#define XF__JOBS_PAGE_MAX 1000

static bool may_submit(const xf__peer *p) {
  xf_pki_role role = xf__peer_id(p)->role;
  return role == XF_PKI_ROLE_RESEARCHER || role == XF_PKI_ROLE_ADMIN;
}

static void reply_error(xf__peer *p, xf_err code, const xf_errctx *err) {
  char msg[900];
  if (err->file[0] && err->field[0])
    snprintf(msg, sizeof(msg), "%s: %s: %s", err->file, err->field, err->msg);
  else if (err->field[0])
    snprintf(msg, sizeof(msg), "%s: %s", err->field, err->msg);
  else
    snprintf(msg, sizeof(msg), "%s", err->msg);
  xf_session_send_error(xf__peer_conn(p), code, "%s", msg);
}

/* A job id from a request; false, with the reason sent to the user, when it
 * is not one (never clamped into range). */
static bool parse_job_id(xf__peer *p, const char *s, int64_t *out) {
  xf_errctx err = {0};
  xf_err rc = xf_job_id_parse(s, out, &err);
  if (rc != XF_OK) xf_session_send_error(xf__peer_conn(p), rc, "%s", err.msg);
  return rc == XF_OK;
}

/* ---- JobInfo ------------------------------------------------------------------------------ */

xf_err xf__model_digest(xf__coord *co, const xf_digest *blob, xf_digest *params,
                        xf_errctx *err) {
  xf_errctx none = {0};
  if (xf_journal_model_digest(xf__coord_db(co), blob, params, &none) == XF_OK) return XF_OK;
  xf_model *m = NULL;
  float *v = NULL;
  XF_GUARD(xf_checkpoint_load_blob(xf__coord_blobs(co), blob, &m, &v, err));
  xf_params_digest(v, xf_model_num_params(m), params);
  xf_model_free(m);
  xf_free(v);
  /* Unnoted, it is decoded again next time: nothing is wrong with the answer. */
  if (xf_journal_model_digest_note(xf__coord_db(co), blob, params, &none) != XF_OK)
    XF_WARN("model_digest_not_noted", "reason=\"%s\"", none.msg);
  return XF_OK;
}

/* Room for what a JobInfo points to. */
typedef struct info_store {
  char id[32], name[XF_JOB_IDENT_MAX], state[16], message[1200], digest[XF_DIGEST_HEX],
      file_digest[XF_DIGEST_HEX];
  char submitter[XF_SPIFFE_MAX], accuracy_note[600];
  char *spec_json;
} info_store;

/* Why a job that is over has no test accuracy: no round committed, every
 * evaluation report was refused (the audit trail's refused_report rows about
 * the job say which), or none came in. */
static void explain_no_accuracy(xf__coord *co, const char *job, uint32_t committed, char *out,
                                size_t n) {
  if (committed == 0) {
    snprintf(out, n, "no round committed");
    return;
  }
  uint64_t refused = 0;
  char *detail = NULL;
  xf_errctx err = {0};
  xf_db *audit = xf__coord_audit(co);
  if (!audit || xf_audit_about(audit, "refused_report", job, &refused, &detail, &err) != XF_OK ||
      refused == 0) {
    snprintf(out, n, "no site's evaluation of the model came in");
    xf_free(detail);
    return;
  }
  json_t *d = json_loads(detail, 0, NULL);
  xf_free(detail);
  const char *site = json_string_value(json_object_get(d, "site"));
  const char *report = json_string_value(json_object_get(d, "report"));
  const char *field = json_string_value(json_object_get(d, "field"));
  const char *value = json_string_value(json_object_get(d, "value"));
  const char *rule = json_string_value(json_object_get(d, "rule"));
  snprintf(out, n,
           "no site's evaluation was accepted: %" PRIu64 " report%s refused (the newest: site "
           "%.64s's %.32s, %.32s %.32s %.200s; each is a refused_report row of the audit trail)",
           refused, refused == 1 ? "" : "s", site ? site : "?", report ? report : "report",
           field ? field : "?", value ? value : "?", rule ? rule : "");
  json_decref(d);
}

/* The figures of complete evaluations, and of the newest one still coming
 * in, labelled so. Model round r is evaluated by every site of round r + 1
 * with its report (a round commits only once its reports are in, so round
 * r's evaluation is complete once round r + 1 committed), and the final
 * model by the final evaluation, complete once the job is over. */
/* Weighted by the sites' samples (1 for a row without), the mean of the
 * figure `which` (0 test accuracy and loss, 1 train loss) over round r's
 * rows that carry it; *sites counts them. False when none does. */
static bool round_mean(xf_db *db, int64_t job, uint32_t r, int which, double *a, double *l,
                       uint32_t *sites) {
  xf_journal_metrics *m = NULL;
  size_t n = 0;
  xf_errctx err = {0};
  *a = *l = NAN;
  *sites = 0;
  if (r == 0 || xf_journal_metrics_round(db, job, r, &m, &n, &err) != XF_OK) return false;
  double wa = 0, wl = 0, w = 0;
  for (size_t i = 0; i < n; i++) {
    double weight = m[i].samples ? (double)m[i].samples : 1.0;
    double v = which == 0 ? m[i].test_accuracy : m[i].train_loss;
    if (isnan(v)) continue;
    wa += weight * v;
    wl += weight * (which == 0 ? m[i].test_loss : 0);
    w += weight;
    (*sites)++;
  }
  xf_free(m);
  if (w <= 0) return false;
  *a = wa / w;
  *l = wl / w;
  return true;
}

/* The figures of complete evaluations, and of the newest one still coming
 * in, labelled so. Model round r is evaluated by every site of round r + 1
 * with its report (a round commits only once its reports are in, so round
 * r's evaluation is complete once round r + 1 committed), and the final
 * model by the final evaluation, complete once the job is over. Only the
 * rounds named are read, so a status costs the same at round 1,000 as at
 * round 1. */
static void summarize_metrics(xf__coord *co, int64_t job, uint32_t committed, bool over,
                              Xfed__JobInfo *ji) {
  xf_db *db = xf__coord_db(co);
  xf_errctx err = {0};
  ji->test_accuracy = NAN;
  ji->test_loss = NAN;
  ji->train_loss = NAN;
  ji->partial_accuracy = NAN;
  uint32_t complete = 0, newest = 0, sites = 0;
  if (over || committed > 0) {
    uint32_t done_to = over ? committed : committed - 1;
    if (done_to > 0 &&
        xf_journal_metrics_newest_round(db, job, done_to, true, &complete, &err) != XF_OK)
      return;
  }
  if (xf_journal_metrics_newest_round(db, job, UINT32_MAX, true, &newest, &err) != XF_OK) return;
  double a, l;
  ji->eval_round = complete;
  if (round_mean(db, job, complete, 0, &a, &l, &sites)) {
    ji->test_accuracy = a;
    ji->test_loss = l;
  }
  ji->eval_sites = sites;
  if (newest > complete && round_mean(db, job, newest, 0, &a, &l, &sites)) {
    ji->partial_round = newest;
    ji->partial_sites = sites;
    ji->partial_accuracy = a;
  }
  if (round_mean(db, job, committed, 1, &a, &l, &sites)) ji->train_loss = a;
}

static xf_err fill_info(xf__coord *co, int64_t id, Xfed__JobInfo *ji, info_store *st,
                        xf_errctx *err) {
  xf_journal_job jj;
  XF_GUARD(xf_journal_job_load(xf__coord_db(co), id, &jj, err));
  xfed__job_info__init(ji);
  snprintf(st->id, sizeof(st->id), "%" PRId64, id);
  snprintf(st->name, sizeof(st->name), "%s", jj.spec.name);
  snprintf(st->state, sizeof(st->state), "%s", xf_job_state_name(jj.state));
  snprintf(st->message, sizeof(st->message), "%s", jj.message);
  uint64_t up = 0, down = 0;
  XF_GUARD(xf_journal_job_submitter_get(xf__coord_db(co), id, st->submitter, sizeof(st->submitter),
                                        err));
  XF_GUARD(xf_journal_job_bytes(xf__coord_db(co), id, &up, &down, err));
  st->spec_json = NULL;
  if (xf_jobspec_to_json(&jj.spec, &st->spec_json) != XF_OK)
    return xf_fail(err, XF_ENOMEM, "out of memory");
  ji->job_id = st->id;
  ji->name = st->name;
  ji->state = st->state;
  ji->message = st->message;
  ji->submitter = st->submitter;
  ji->spec_json = st->spec_json;
  ji->round = jj.round;
  ji->rounds = jj.spec.rounds;
  ji->attempt = jj.attempt;
  ji->rounds_committed = jj.rounds_committed;
  ji->created = jj.created;
  ji->updated = jj.updated;
  ji->bytes_up = up;
  ji->bytes_down = down;
  const xf__run *run = xf__run_of_job(co, id);
  bool over = jj.state == XF_JOB_FAILED || jj.state == XF_JOB_CANCELLED ||
              (jj.state == XF_JOB_DONE && !run);
  summarize_metrics(co, id, jj.rounds_committed, over, ji);
  ji->train_loss_kept = xf_job_train_loss_kept(&jj.spec);
  /* Counts to show, not to decide on: a journal that cannot say leaves them 0. */
  xf_errctx sites_err = {0};
  if (jj.rounds_committed &&
      xf_journal_round_sites(xf__coord_db(co), id, jj.rounds_committed, &ji->last_invited,
                             &ji->last_reported, &sites_err) != XF_OK)
    ji->last_invited = ji->last_reported = 0;
  if (over && !isfinite(ji->test_accuracy)) {
    explain_no_accuracy(co, st->id, jj.rounds_committed, st->accuracy_note,
                        sizeof(st->accuracy_note));
    ji->accuracy_note = st->accuracy_note;
  }
  double eps;
  bool site_eps;
  xf_errctx eps_err = {0};
  if (xf_job_epsilon(&jj.spec, jj.rounds_committed, &eps)) {
    ji->has_epsilon = true;
    ji->epsilon = eps;
  } else if (xf_journal_site_epsilon(xf__coord_db(co), id, UINT32_MAX, &site_eps, &eps,
                                     &eps_err) == XF_OK &&
             site_eps) {
    /* Sites that account for themselves: the largest any dataset spent. */
    ji->has_epsilon = true;
    ji->epsilon = eps;
  }
  /* Two names for two facts: the model (its parameters) and the file that
   * holds it (the blob, the bytes `xfed job export --out FILE.xfm` writes). */
  xf_digest params;
  xf_errctx model_err = {0};
  if (xf__model_digest(co, &jj.model, &params, &model_err) == XF_OK)
    xf_digest_hex(&params, st->digest);
  else /* the rest of the job's status still answers; the log says why */
    XF_WARN("model_digest_unknown", "job=%s reason=\"%s\"", st->id, model_err.msg);
  xf_digest_hex(&jj.model, st->file_digest);
  if (run) {
    const xf_jobm *m = xf__run_machine(run);
    uint32_t invited, accepted, reported, target;
    xf_jobm_counts(m, &invited, &accepted, &reported, &target);
    ji->invited = invited;
    ji->accepted = accepted;
    ji->reported = reported;
    ji->target = target;
    xf_jobm_phase ph = xf_jobm_get_phase(m);
    static const char *const shown[] = {
        [XF_JOBM_WAITING] = "waiting",       [XF_JOBM_PAUSED] = "paused",
        [XF_JOBM_CONFIRMING] = "confirming", [XF_JOBM_AWAIT_GO] = "confirming",
        [XF_JOBM_TRAINING] = "training",     [XF_JOBM_UNMASKING] = "unmasking",
        [XF_JOBM_COMMITTING] = "training",   [XF_JOBM_EVALUATING] = "evaluating",
        [XF_JOBM_DONE] = "",                 [XF_JOBM_FAILED] = "",
        [XF_JOBM_CANCELLED] = ""};
    ji->phase = (char *)((unsigned)ph < sizeof(shown) / sizeof(shown[0]) ? shown[ph] : "");
    if (ph == XF_JOBM_EVALUATING) {
      /* The journal says done once the last round committed (or the job
       * stopped on its target); the final evaluation is still out. */
      snprintf(st->state, sizeof(st->state), "running");
      snprintf(st->message, sizeof(st->message), "evaluating the final model%s%s",
               jj.message[0] ? ": " : "", jj.message);
    } else if (ph == XF_JOBM_WAITING && jj.state == XF_JOB_RUNNING) {
      const char *why = xf_jobm_message(m);
      snprintf(st->message, sizeof(st->message), "%s",
               why[0] ? why : "waiting for the next attempt");
    } else if ((ph == XF_JOBM_CONFIRMING || ph == XF_JOBM_TRAINING) && jj.state == XF_JOB_RUNNING) {
      const char *why = xf_jobm_message(m);
      if (why[0]) snprintf(st->message, sizeof(st->message), "%s", why);
    }
    /* Nothing else to say: the sites it goes on without, and why. */
    uint32_t refused_round;
    const char *refused = xf__run_refused(run, &refused_round);
    if (!st->message[0] && refused[0] && jj.state == XF_JOB_RUNNING)
      snprintf(st->message, sizeof(st->message), "round %u went on without %s",
               (unsigned)refused_round, refused);
  }
  ji->model_digest = st->digest;
  ji->model_file_digest = st->file_digest;
  return XF_OK;
}

static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *xf__job_info_json(xf__coord *co, int64_t id, xf_errctx *err) {
  Xfed__JobInfo ji;
  info_store st;
  memset(&st, 0, sizeof(st));
  if (fill_info(co, id, &ji, &st, err) != XF_OK) {
    xf_free(st.spec_json);
    return NULL;
  }
  json_t *o = json_pack(
      "{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:o,s:o,s:o,s:o,s:I,s:I,s:s,s:s,s:f,s:f}",
      "job_id", ji.job_id, "name", ji.name, "state", ji.state, "phase",
      ji.phase ? ji.phase : "", "round", (int)ji.round, "rounds", (int)ji.rounds,
      "rounds_committed", (int)ji.rounds_committed, "invited", (int)ji.invited, "reported",
      (int)ji.reported, "target", (int)ji.target, "eval_round", (int)ji.eval_round,
      "test_accuracy", number(ji.test_accuracy), "test_loss", number(ji.test_loss), "train_loss",
      number(ji.train_loss), "epsilon", ji.has_epsilon ? number(ji.epsilon) : json_null(),
      "bytes_up", (json_int_t)ji.bytes_up, "bytes_down", (json_int_t)ji.bytes_down, "message",
      ji.message, "submitter", ji.submitter, "created", ji.created, "updated", ji.updated);
  if (o) {
    json_object_set_new(o, "model_digest", json_string(ji.model_digest));
    json_object_set_new(o, "model_file_digest", json_string(ji.model_file_digest));
    json_object_set_new(o, "accuracy_note", json_string(ji.accuracy_note ? ji.accuracy_note : ""));
  }
  xf_free(st.spec_json);
  if (o) {
    /* The sites and the train loss in the words `xfed job status` uses. */
    xf_job_sites sites = {.invited = ji.invited, .accepted = ji.accepted,
                          .reported = ji.reported, .last_round = ji.rounds_committed,
                          .last_invited = ji.last_invited, .last_reported = ji.last_reported};
    char text[128];
    xf_job_sites_text(&sites, text, sizeof(text));
    json_object_set_new(o, "accepted", json_integer((json_int_t)ji.accepted));
    json_object_set_new(o, "last_invited", json_integer((json_int_t)ji.last_invited));
    json_object_set_new(o, "last_reported", json_integer((json_int_t)ji.last_reported));
    json_object_set_new(o, "sites", json_string(text));
    json_object_set_new(o, "train_loss_kept", json_boolean(ji.train_loss_kept));
  }
  if (!o) xf_fail(err, XF_ENOMEM, "out of memory");
  return o;
}

/* Answers with the jobs of ids. A page (`paged`) stops before it outgrows
 * one frame and says whether jobs remain: after its last, or beyond ids
 * (`more`). */
static void reply_jobs(xf__coord *co, xf__peer *p, const int64_t *ids, size_t n, bool paged,
                       bool more) {
  Xfed__JobInfo *infos = xf_calloc(n ? n : 1, sizeof(*infos));
  Xfed__JobInfo **ptrs = xf_calloc(n ? n : 1, sizeof(*ptrs));
  info_store *st = xf_calloc(n ? n : 1, sizeof(*st));
  xf_errctx err = {0};
  size_t k = 0, budget = xf__frame_limit(p) / 2, used = 0;
  if (infos && ptrs && st) {
    for (size_t i = 0; i < n; i++) {
      if (fill_info(co, ids[i], &infos[k], &st[k], &err) != XF_OK) {
        reply_error(p, err.code, &err);
        goto out;
      }
      size_t size = protobuf_c_message_get_packed_size(&infos[k].base) + 8;
      if (paged && k > 0 && used + size > budget) {
        xf_free(st[k].spec_json);
        more = true;
        break;
      }
      used += size;
      ptrs[k] = &infos[k];
      k++;
    }
    Xfed__JobList list = XFED__JOB_LIST__INIT;
    list.n_jobs = k;
    list.jobs = ptrs;
    list.more = paged && more;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_JOB_LIST;
    env.job_list = &list;
    (void)xf__send(p, &env);
  } else {
    xf_session_send_error(xf__peer_conn(p), XF_ENOMEM, "out of memory");
  }
out:
  for (size_t i = 0; st && i < k; i++) xf_free(st[i].spec_json);
  xf_free(infos);
  xf_free(ptrs);
  xf_free(st);
}

/* ---- submit ------------------------------------------------------------------------------- */

/* Noise in the sum: its multiplier comes from the target and the sampling
 * rate the spec fixes (admission refuses a count of sites). False with err
 * naming the field when it cannot be calibrated. */
static bool calibrate_noise(xf_jobspec *spec, const char *origin, xf_errctx *err) {
  if (!xf_job_noise_in_sum(spec) || spec->privacy.has_noise_multiplier ||
      spec->sites_per_round > 1)
    return true;
  double sigma, eps, order;
  if (xf_dp_calibrate(spec->privacy.target_epsilon, xf_job_sampling_rate(spec), spec->rounds,
                      spec->privacy.delta, &sigma, &eps, &order, err) != XF_OK) {
    snprintf(err->file, sizeof(err->file), "%s", origin);
    snprintf(err->field, sizeof(err->field), "privacy.target_epsilon");
    return false;
  }
  spec->privacy.has_noise_multiplier = true;
  spec->privacy.noise_multiplier = sigma;
  XF_INFO("privacy_calibrated", "target_epsilon=%g delta=%g q=%g rounds=%u "
                                "noise_multiplier=%.6g epsilon=%.6g order=%g",
          spec->privacy.target_epsilon, spec->privacy.delta, xf_job_sampling_rate(spec),
          (unsigned)spec->rounds, sigma, eps, order);
  return true;
}

/* A submission admission does not let run: audited, logged and answered
 * with admission's words. */
static void refuse_submission(xf__coord *co, xf__peer *p, const xf_jobspec *spec,
                              const xf_admission *a, const char *origin, const char *submitter,
                              const char *admission_text, const char *decision_text) {
  char why[2048];
  xf_admission_refusal(a, why, sizeof(why));
  json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s}", "when", "submission", "submitter", submitter,
                        "job_name", spec->name, "coordinator_region", xf__coord_cfg(co)->region,
                        "verdict", xf_admit_verdict_name(a->verdict));
  if (admission_text) json_object_set_new(o, "admission", json_loads(admission_text, 0, NULL));
  if (decision_text) json_object_set_new(o, "decision", json_loads(decision_text, 0, NULL));
  xf__audit(co, "refused_task", spec->name, o);
  XF_WARN("job_refused", "user=%s name=%s verdict=%s", submitter, spec->name,
          xf_admit_verdict_name(a->verdict));
  xf_session_send_error(xf__peer_conn(p), XF_EDENIED, "%s: %s", origin, why);
}

/* The admitted job made: its model (shaped by what admission found of the
 * data) initialised from the spec's seed, stored as a blob and noted, and
 * the job's rows. *model is the caller's (xf_model_free) even on failure;
 * *of_spec says whether a failure is the spec's (a model the data cannot
 * feed: the researcher's to fix) rather than the coordinator's. */
static xf_err create_job(xf__coord *co, const xf_jobspec *spec, const xf_admission *a,
                         const char *submitter, xf_model **model, int64_t *id, bool *of_spec,
                         xf_errctx *err) {
  xf_model_spec ms;
  float *params = NULL;
  xf__model_file *mf = NULL;
  xf_digest blob;
  xf_err rc = xf_jobspec_model_spec(spec, a->h, a->w, a->c, a->classes, &ms, err);
  if (rc == XF_OK) rc = xf_model_create(&ms, model, err);
  *of_spec = rc != XF_OK && rc != XF_ENOMEM;
  if (rc == XF_OK) {
    params = xf_mallocarray(xf_model_num_params(*model), sizeof(float));
    if (!params) rc = xf_fail(err, XF_ENOMEM, "out of memory");
  }
  if (rc == XF_OK) {
    xf_model_init_params(*model, spec->seed, params);
    rc = xf__model_file_make_as(*model, params, XF_CHECKPOINT_F32, &mf, NULL, err);
  }
  xf_digest model_digest;
  if (rc == XF_OK) {
    size_t len = 0;
    const uint8_t *bytes = xf__model_file_bytes(mf, &len);
    rc = xf_blob_put(xf__coord_blobs(co), bytes, len, &blob, err);
  }
  if (rc == XF_OK) {
    xf_params_digest(params, xf_model_num_params(*model), &model_digest);
    rc = xf_journal_model_digest_note(xf__coord_db(co), &blob, &model_digest, err);
  }
  if (rc == XF_OK) rc = xf_journal_job_create(xf__coord_db(co), spec, &blob, xf__now(), id, err);
  if (rc == XF_OK) rc = xf_journal_job_submitter(xf__coord_db(co), *id, submitter, err);
  xf__model_file_unref(mf);
  xf_free(params);
  return rc;
}

static void on_submit(xf__coord *co, xf__peer *p, const Xfed__JobSubmit *m) {
  char submitter[XF_SPIFFE_MAX];
  if (xf_spiffe_format(xf__peer_id(p), submitter, NULL) != XF_OK) snprintf(submitter, 2, "?");
  if (!may_submit(p)) {
    XF_WARN("request_denied", "user=%s request=job_submit", submitter);
    xf_session_send_error(xf__peer_conn(p), XF_EDENIED,
                          "only researchers (and admins) submit jobs; %s has role %s", submitter,
                          xf_pki_role_name(xf__peer_id(p)->role));
    return;
  }
  const char *text = m->spec_json ? m->spec_json : "";
  const char *origin = m->origin && *m->origin ? m->origin : "job spec";
  xf_jobspec spec;
  xf_errctx err = {0};
  if (xf_jobspec_parse_string(text, strlen(text), origin, &spec, &err) != XF_OK ||
      !calibrate_noise(&spec, origin, &err)) {
    reply_error(p, err.code, &err);
    return;
  }
  /* Admission decides before anything is made: the same one `xfed policy
   * check` runs, refusing with the same words, audited either way. */
  xf_admission a;
  char *decision_text = NULL;
  if (xf__admit_check_dataset(co, &spec, &err) != XF_OK ||
      xf__admit(co, &spec, &a, &decision_text, &err) != XF_OK) {
    if (!err.file[0]) snprintf(err.file, sizeof(err.file), "%s", origin);
    reply_error(p, err.code, &err);
    return;
  }
  char *admission_text = NULL;
  xf_errctx jerr = {0};
  if (xf_admission_json(&a, &spec, &admission_text, &jerr) != XF_OK) admission_text = NULL;
  if (a.verdict != XF_ADMIT_RUNS) {
    refuse_submission(co, p, &spec, &a, origin, submitter, admission_text, decision_text);
    xf_free(decision_text);
    xf_free(admission_text);
    xf_admission_free(&a);
    return;
  }
  xf_model *model = NULL;
  int64_t id = 0;
  bool of_spec = false;
  xf_err rc = create_job(co, &spec, &a, submitter, &model, &id, &of_spec, &err);
  xf_admission_free(&a);
  if (rc != XF_OK) {
    if (of_spec)
      XF_WARN("job_refused", "user=%s name=%s reason=\"%s\"", submitter, spec.name, err.msg);
    else
      XF_ERROR("submit_failed", "user=%s reason=\"%s\"", submitter, err.msg);
    reply_error(p, rc, &err);
    xf_model_free(model);
    xf_free(decision_text);
    xf_free(admission_text);
    return;
  }
  char job_id[32];
  snprintf(job_id, sizeof(job_id), "%" PRId64, id);
  json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "job", job_id, "when", "submission", "submitter",
                        submitter, "coordinator_region", xf__coord_cfg(co)->region);
  if (admission_text) json_object_set_new(o, "admission", json_loads(admission_text, 0, NULL));
  if (decision_text) json_object_set_new(o, "decision", json_loads(decision_text, 0, NULL));
  if (!xf__residency_on(co)) json_object_set_new(o, "policy", json_string("off"));
  xf__audit(co, "decision", job_id, o);
  xf_free(decision_text);
  xf_free(admission_text);
  XF_INFO("job_submitted", "job=%" PRId64 " name=%s user=%s model=\"%s\" params=%zu", id,
          spec.name, submitter, xf_model_describe(model), xf_model_num_params(model));
  xf_model_free(model);
  reply_jobs(co, p, &id, 1, false, false);
  xf__runs_schedule(co);
}

/* ---- cancel ------------------------------------------------------------------------------- */

static void on_cancel(xf__coord *co, xf__peer *p, const Xfed__JobCancel *m) {
  if (!may_submit(p)) {
    char user[XF_SPIFFE_MAX];
    if (xf_spiffe_format(xf__peer_id(p), user, NULL) != XF_OK) snprintf(user, 2, "?");
    XF_WARN("request_denied", "user=%s request=job_cancel", user);
    xf_session_send_error(xf__peer_conn(p), XF_EDENIED,
                          "only researchers (and admins) cancel jobs; %s has role %s", user,
                          xf_pki_role_name(xf__peer_id(p)->role));
    return;
  }
  int64_t id;
  if (!parse_job_id(p, m->job_id, &id)) return;
  xf_journal_job jj;
  xf_errctx err = {0};
  if (xf_journal_job_load(xf__coord_db(co), id, &jj, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  if (jj.state == XF_JOB_DONE || jj.state == XF_JOB_FAILED || jj.state == XF_JOB_CANCELLED) {
    xf_session_send_error(xf__peer_conn(p), XF_EINVAL, "job %" PRId64 " is already %s", id,
                          xf_job_state_name(jj.state));
    return;
  }
  char who[XF_SPIFFE_MAX], why[XF_SPIFFE_MAX + 32];
  if (xf_spiffe_format(xf__peer_id(p), who, NULL) != XF_OK) snprintf(who, 2, "?");
  snprintf(why, sizeof(why), "cancelled by %s", who);
  xf__run_cancel(co, id, why);
  if (xf_journal_job_set_state(xf__coord_db(co), id, XF_JOB_CANCELLED, why, xf__now(), &err) !=
      XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  XF_INFO("job_cancelled", "job=%" PRId64 " user=%s", id, who);
  reply_jobs(co, p, &id, 1, false, false);
}

/* ---- metrics ------------------------------------------------------------------------------ */

static void on_metrics_query(xf__coord *co, xf__peer *p, const Xfed__MetricsQuery *m) {
  int64_t id;
  if (!parse_job_id(p, m->job_id, &id)) return;
  xf_journal_job jj;
  xf_errctx err = {0};
  xf_journal_metrics *v = NULL;
  size_t n = 0;
  /* A page (limit > 0): one row more than asked says whether more remain.
   * Without a limit (an older CLI) every row goes in one answer. */
  size_t limit = m->limit > XF__METRICS_PAGE_MAX ? XF__METRICS_PAGE_MAX : m->limit;
  uint64_t after_site = m->after_site && *m->after_site ? xf_coord_site_id(m->after_site) : 0;
  if (xf_journal_job_load(xf__coord_db(co), id, &jj, &err) != XF_OK ||
      (limit ? xf_journal_metrics_page(xf__coord_db(co), id, m->after_round, after_site, limit + 1,
                                       &v, &n, &err)
             : xf_journal_metrics_job(xf__coord_db(co), id, &v, &n, &err)) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  bool more = limit && n > limit;
  if (more) n = limit;
  Xfed__MetricsReport__Row *rows = xf_calloc(n ? n : 1, sizeof(*rows));
  Xfed__MetricsReport__Row **ptrs = xf_calloc(n ? n : 1, sizeof(*ptrs));
  char (*names)[2][XF_COORD_NAME_MAX] = xf_calloc(n ? n : 1, sizeof(*names));
  if (!rows || !ptrs || !names) {
    xf_session_send_error(xf__peer_conn(p), XF_ENOMEM, "out of memory");
    goto out;
  }
  uint32_t eps_round = 0;
  bool has_eps = false;
  double eps = 0;
  /* A page also stops before it outgrows one frame. */
  size_t budget = xf__frame_limit(p) / 2, used = 0;
  for (size_t i = 0; i < n; i++) {
    Xfed__MetricsReport__Row *r = &rows[i];
    xfed__metrics_report__row__init(r);
    if (xf_journal_site_name(xf__coord_db(co), v[i].site, names[i][0], XF_COORD_NAME_MAX,
                             names[i][1], XF_COORD_NAME_MAX, &err) != XF_OK)
      snprintf(names[i][0], XF_COORD_NAME_MAX, "%" PRIu64, v[i].site);
    r->round = v[i].round;
    r->site = names[i][0];
    r->region = names[i][1];
    r->has_train = !isnan(v[i].train_loss);
    r->train_loss = v[i].train_loss;
    r->has_test = !isnan(v[i].test_accuracy);
    r->test_loss = v[i].test_loss;
    r->test_accuracy = v[i].test_accuracy;
    r->samples = v[i].samples;
    xf_journal_metrics_bytes(&v[i], &r->bytes_up, &r->bytes_down);
    /* Rows come by round: one accountant call per round, not per row. */
    if (v[i].round != eps_round) {
      eps_round = v[i].round;
      has_eps = xf_job_epsilon(&jj.spec, eps_round, &eps);
    }
    if (has_eps) {
      r->has_epsilon = true;
      r->epsilon = eps;
    } else {
      /* unit record, mode local: each site's own account of its dataset */
      r->has_epsilon = v[i].has_epsilon;
      r->epsilon = v[i].has_epsilon ? v[i].epsilon : 0;
    }
    size_t size = protobuf_c_message_get_packed_size(&r->base) + 8; /* with tag and length */
    if (limit && i > 0 && used + size > budget) {
      n = i;
      more = true;
      break;
    }
    used += size;
    ptrs[i] = r;
  }
  Xfed__MetricsReport rep = XFED__METRICS_REPORT__INIT;
  char idt[32];
  snprintf(idt, sizeof(idt), "%" PRId64, id);
  rep.job_id = idt;
  rep.n_rows = n;
  rep.rows = ptrs;
  rep.more = more;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS_REPORT;
  env.metrics_report = &rep;
  (void)xf__send(p, &env); /* larger than a frame: a DOCUMENT stream */
out:
  xf_free(rows);
  xf_free(ptrs);
  xf_free(names);
  xf_free(v);
}

/* ---- model export --------------------------------------------------------------------------- */

static void on_model_query(xf__coord *co, xf__peer *p, const Xfed__ModelQuery *m) {
  int64_t id;
  if (!parse_job_id(p, m->job_id, &id)) return;
  xf_journal_job jj;
  xf_errctx err = {0};
  xf_digest model;
  uint32_t round = m->round;
  if (xf_journal_job_load(xf__coord_db(co), id, &jj, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  if (round == 0) {
    model = jj.model;
    round = jj.rounds_committed;
  } else if (xf_journal_round_model(xf__coord_db(co), id, round, &model, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  void *bytes = NULL;
  size_t len = 0;
  if (xf_blob_get(xf__coord_blobs(co), &model, &bytes, &len, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  char idt[32];
  snprintf(idt, sizeof(idt), "%" PRId64, id);
  xf_tensor_desc d = {.stream_id = xf__stream_id(co, false),
                      .kind = XFED__TENSOR_BEGIN__KIND__MODEL,
                      .dtype = XFED__TENSOR_BEGIN__DTYPE__U8,
                      .element_count = len,
                      .job_id = idt,
                      .round = round};
  XF_INFO("model_export", "job=%" PRId64 " round=%u bytes=%zu", id, (unsigned)round, len);
  (void)xf__stream_queue(p, &d, NULL, bytes, len, 0, NULL);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

void xf__cli_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env) {
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_JOB_SUBMIT: on_submit(co, p, env->job_submit); return;
  case XFED__ENVELOPE__BODY_JOB_CANCEL: on_cancel(co, p, env->job_cancel); return;
  case XFED__ENVELOPE__BODY_METRICS_QUERY: on_metrics_query(co, p, env->metrics_query); return;
  case XFED__ENVELOPE__BODY_MODEL_QUERY: on_model_query(co, p, env->model_query); return;
  case XFED__ENVELOPE__BODY_JOB_QUERY: {
    const char *q = env->job_query->job_id;
    xf_errctx err = {0};
    if (q && *q) {
      int64_t id;
      if (!parse_job_id(p, q, &id)) return;
      reply_jobs(co, p, &id, 1, false, false);
      return;
    }
    int64_t *ids = NULL;
    size_t n = 0;
    if (xf_journal_all_jobs(xf__coord_db(co), &ids, &n, &err) != XF_OK) {
      reply_error(p, err.code, &err);
      return;
    }
    /* A page (limit > 0): the jobs after after_id, by id; without a limit
     * (an older CLI) every job in one answer. */
    const Xfed__JobQuery *jq = env->job_query;
    size_t from = 0, limit = jq->limit > XF__JOBS_PAGE_MAX ? XF__JOBS_PAGE_MAX : jq->limit;
    while (limit && from < n && (uint64_t)ids[from] <= jq->after_id) from++;
    size_t count = limit && n - from > limit ? limit : n - from;
    reply_jobs(co, p, ids + from, count, limit > 0, from + count < n);
    xf_free(ids);
    return;
  }
  case XFED__ENVELOPE__BODY_POLICY_REQUEST:
  case XFED__ENVELOPE__BODY_AUDIT_QUERY: xf__policy_on_frame(co, p, env); return;
  case XFED__ENVELOPE__BODY_DASHBOARD_REQUEST:
    xf__dashboard_grant(co, p, env->dashboard_request);
    return;
  /* The CLI acknowledging a model (unanswered) or a DOCUMENT answer. */
  case XFED__ENVELOPE__BODY_TENSOR_ACK: xf__stream_acked(p, env->tensor_ack); return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
  case XFED__ENVELOPE__BODY_TENSOR_END: xf__document_on_frame(co, p, env); return;
  default:
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED, "%s is not a request a user can make",
                          xf_envelope_body_name(env));
    return;
  }
}
