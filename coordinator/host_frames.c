/* SPDX-License-Identifier: Apache-2.0 */
/* Job runs, the other way: frames from sites and regional aggregators about
 * a job (acceptances, refusals, metrics, secure aggregation's messages,
 * update streams) become the run's job machine events, and its actions are
 * carried out (host.c). Nothing here decides a job's phase: the machine
 * does. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "coordinator/host_internal.h"
#include "coordinator/sawire.h"

/* ---- frames from participants ------------------------------------------------------------------------ */

static xf_jobm_refusal refusal_of(int reason) {
  switch (reason) {
  case XFED__TASK_REFUSAL__REASON__POLICY_DENIED: return XF_JOBM_REFUSED_POLICY;
  case XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED: return XF_JOBM_REFUSED_BUDGET;
  case XFED__TASK_REFUSAL__REASON__TARGET_REACHED: return XF_JOBM_REFUSED_TARGET;
  case XFED__TASK_REFUSAL__REASON__BUSY: return XF_JOBM_REFUSED_BUSY;
  default: return XF_JOBM_REFUSED_OTHER;
  }
}

/* The round and attempt a frame must name to be about the run's open attempt. */
static bool current(const xf__run *run, uint32_t round, uint32_t attempt) {
  uint32_t r = xf__run_round(run);
  uint32_t at = xf__run_attempt(run);
  return round == r && (attempt == 0 || attempt == at);
}

/* Site ids of names a regional sent (only sites it carries count). */
static size_t ids_of(const xf__site *s, char **names, size_t n, uint64_t *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t id = xf_admit_site_id(names[i] ? names[i] : "");
    bool behind = false;
    for (size_t j = 0; j < s->n_behind && !behind; j++) behind = s->behind[j].id == id;
    if (behind) out[k++] = id;
  }
  return k;
}

static void on_accept(xf__run *run, xf__site *s, const Xfed__TaskAccept *a) {
  if (!current(run, a->round, a->attempt)) return;
  xf_errctx err = {0};
  uint64_t *ids = NULL;
  size_t n = 0;
  if (s->regional) {
    ids = xf_mallocarray(a->n_sites ? a->n_sites : 1, sizeof(uint64_t));
    if (!ids) return;
    n = ids_of(s, a->sites, a->n_sites, ids);
  }
  if (xf_jobm_accepted(run->m, s->id, ids, n, xf__now(), &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
  xf_free(ids);
  xf__run_actions(run);
}

/* Keeps a refusal of a training attempt on the global run, by the site's
 * name: the newest attempt with refusals, all of them. */
static void note_refused(xf__run *run, const Xfed__TaskRefusal *r, const char *named) {
  if (run->refused_round != r->round || run->refused_attempt != r->attempt) {
    run->refused[0] = '\0';
    run->refused_round = r->round;
    run->refused_attempt = r->attempt;
  }
  size_t used = strlen(run->refused), room = sizeof(run->refused) - used;
  if (room > 3) /* what does not fit is cut */
    snprintf(run->refused + used, room, "%s%.*s", used ? "; " : "", (int)(room - 3), named);
}

static void on_refusal(xf__run *run, xf__site *s, const Xfed__TaskRefusal *r) {
  xf__coord *co = run->co;
  const char *details = r->details ? r->details : "";
  const char *who = r->site && *r->site ? r->site : s->name;
  XF_WARN("task_refused", "job=%s round=%u attempt=%u site=%s via=%s reason=%s details=\"%s\"",
          run->id_text, (unsigned)r->round, (unsigned)r->attempt, who,
          s->regional ? s->name : "-", xf_task_refusal_reason_name((int)r->reason), details);
  if (xf_jobm_get_phase(run->m) != XF_JOBM_EVALUATING && !current(run, r->round, r->attempt))
    return;
  uint64_t site = 0;
  if (s->regional && r->site && *r->site) {
    char *name = r->site;
    if (!ids_of(s, &name, 1, &site)) return; /* not one of its sites */
  }
  /* A refusal on residency grounds is in this trail too, with the site's
   * words, wherever it came from. */
  if (r->reason == XFED__TASK_REFUSAL__REASON__POLICY_DENIED)
    xf__audit(co, "refused_task", run->id_text,
              json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:s}", "job", run->id_text, "round",
                        (json_int_t)r->round, "attempt", (json_int_t)r->attempt, "site", who,
                        "via", s->regional ? s->name : "", "by", site || !s->regional ? "site"
                                                                                     : "regional",
                        "why", details));
  /* The machine knows sites by id: at the global coordinator it keeps the
   * words under the site's name, so that a round retried or failed for
   * want of sites names who refused. A relay passes the words up as they
   * are (the global coordinator names the site). */
  char named[XF_JOBM_MSG_MAX];
  snprintf(named, sizeof(named), "%s: %s", who, details);
  if (!run->relay && xf_jobm_get_phase(run->m) != XF_JOBM_EVALUATING) note_refused(run, r, named);
  xf_errctx err = {0};
  if (xf_jobm_refused(run->m, s->id, site, refusal_of((int)r->reason),
                      run->relay ? details : named, xf__now(), &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
  xf__run_actions(run);
}

/* Metrics: journaled (global) or passed on (regional); a final evaluation
 * that is in counts. */
static void on_metrics(xf__run *run, xf__site *s, const Xfed__Envelope *env) {
  xf__coord *co = run->co;
  const Xfed__Metrics *m = env->metrics;
  const char *site = m->site ? m->site : "";
  uint64_t id = xf_admit_site_id(site);
  bool own = strcmp(site, s->name) == 0;
  bool behind = false;
  for (size_t i = 0; i < s->n_behind && !behind; i++) behind = s->behind[i].id == id;
  if (s->regional ? !(own || behind) : !own) {
    XF_WARN("metrics_refused", "from=%s about=%s reason=\"a site reports only for itself, a "
                               "regional aggregator only for the sites behind it\"",
            s->name, site);
    return;
  }
  if (s->regional && own && !m->has_train && !m->has_test) {
    /* A regional's word that its sites' evaluation is complete. */
    xf_errctx err = {0};
    if (xf_jobm_evaluated(run->m, s->id, xf__now(), &err) == XF_OK) xf__run_actions(run);
    return;
  }
  /* Every figure is range-checked before it counts anywhere, here and at
   * a regional aggregator before it goes upstream (coordinator/checks.c). */
  if (!xf__check_metrics(run, s, m, id)) return;
  if (run->relay) {
    xf__upstream_metrics(co, env);
  } else {
    xf_errctx err = {0};
    if (m->has_train && m->round >= 1) {
      xf_journal_metrics r = {.round = m->round, .site = id, .train_loss = m->train_loss,
                              .test_loss = NAN, .test_accuracy = NAN, .samples = m->samples,
                              .has_epsilon = m->has_epsilon && isfinite(m->epsilon),
                              .epsilon = m->epsilon, .has_bytes = true,
                              .bytes_up = m->bytes_up, .bytes_down = m->bytes_down};
      xf__journal_check(xf_journal_metrics_add(xf__coord_db(co), run->id, &r, &err), "metrics", &err);
    }
    if (m->has_test && m->model_round >= 1) {
      /* An evaluation-only task downloaded the model for this alone. */
      xf_journal_metrics r = {.round = m->model_round, .site = id, .train_loss = NAN,
                              .test_loss = m->test_loss, .test_accuracy = m->test_accuracy,
                              .samples = m->samples, .has_eval_bytes = !m->has_train,
                              .eval_bytes_down = m->has_train ? 0 : m->bytes_down};
      xf__journal_check(xf_journal_metrics_add(xf__coord_db(co), run->id, &r, &err), "metrics", &err);
    }
  }
  XF_INFO("metrics", "job=%s round=%u site=%s train_loss=%.4f test_accuracy=%.4f model_round=%u",
          run->id_text, (unsigned)m->round, site, m->has_train ? m->train_loss : NAN,
          m->has_test ? m->test_accuracy : NAN, (unsigned)m->model_round);
  if (m->has_epsilon)
    XF_INFO("privacy_spent", "job=%s round=%u site=%s dataset=%s epsilon=%.6g "
            "noise_multiplier=%.6g dataset_epsilon=%.6g budget=%g",
            run->id_text, (unsigned)m->round, site, m->dataset ? m->dataset : "", m->epsilon,
            m->noise_multiplier, m->ledger_epsilon, m->budget_epsilon);
  if (!s->regional && m->has_test && !m->has_train && m->model_round == run->model_round) {
    xf_errctx err = {0};
    if (xf_jobm_evaluated(run->m, s->id, xf__now(), &err) == XF_OK) xf__run_actions(run);
  }
}

static void on_sa(xf__run *run, xf__site *s, const Xfed__Envelope *env) {
  xf_errctx err = {0};
  double now = xf__now();
  xf_err rc = XF_OK;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_SECAGG_ADVERT: {
    const Xfed__SecAggAdvert *a = env->secagg_advert;
    if (!current(run, a->round, a->attempt)) return;
    xf_saphase_keys keys = xf_sawire_keys(a);
    rc = xf_jobm_sa_advert(run->m, s->id, &keys, now, &err);
    break;
  }
  case XFED__ENVELOPE__BODY_SECAGG_SHARES: {
    const Xfed__SecAggShares *m = env->secagg_shares;
    if (!current(run, m->round, m->attempt)) return;
    xf_saphase_shares_msg msg;
    rc = xf_sawire_shares(m, &msg, &err);
    if (rc == XF_OK) rc = xf_jobm_sa_shares(run->m, s->id, &msg, now, &err);
    xf_sawire_shares_free(&msg);
    break;
  }
  case XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG: {
    const Xfed__SecAggCheckSig *c = env->secagg_check_sig;
    if (!current(run, c->round, c->attempt)) return;
    rc = xf_jobm_sa_check_sig(run->m, s->id, c->signature.data, c->signature.len, now, &err);
    break;
  }
  case XFED__ENVELOPE__BODY_SECAGG_REFUSAL: {
    const Xfed__SecAggRefusal *f = env->secagg_refusal;
    if (!current(run, f->round, f->attempt)) return;
    /* The site's words, kept to one log line and one refusal. */
    char why[600];
    snprintf(why, sizeof(why), "%s: %.400s (in phase %.16s%s%.63s)", s->name,
             f->reason ? f->reason : "", f->phase && *f->phase ? f->phase : "?",
             f->peer_name && *f->peer_name ? ", at fault: " : "",
             f->peer_name ? f->peer_name : "");
    for (char *q = why; *q; q++)
      if (*q == '"' || (unsigned char)*q < 0x20) *q = *q == '"' ? '\'' : ' ';
    XF_WARN("secagg_refused", "job=%s round=%u attempt=%u site=%s reason=\"%s\"", run->id_text,
            (unsigned)f->round, (unsigned)f->attempt, s->name, why);
    rc = xf_jobm_sa_refused(run->m, s->id, why, now, &err);
    break;
  }
  case XFED__ENVELOPE__BODY_SECAGG_REVEAL: {
    const Xfed__SecAggReveal *r = env->secagg_reveal;
    if (!current(run, r->round, r->attempt)) return;
    rc = xf_jobm_sa_reveal(run->m, s->id, r->reveal.data, r->reveal.len, now, &err);
    break;
  }
  default: return;
  }
  if (rc != XF_OK) XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
  xf__run_actions(run);
}

/* The run and take a stream chunk belongs to, by the carrier's stream id. */
static xf__take *take_by_stream(xf__coord *co, uint64_t carrier, uint64_t stream, xf__run **out) {
  for (xf__run *r = *xf__coord_runs(co); r; r = r->next) {
    if (r->over) continue;
    xf__take *t = xf__take_by_stream(r, carrier, stream);
    if (t) {
      *out = r;
      return t;
    }
  }
  return NULL;
}

static const char *job_of(const Xfed__Envelope *env) {
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_ACCEPT: return env->task_accept->job_id;
  case XFED__ENVELOPE__BODY_TASK_REFUSAL: return env->task_refusal->job_id;
  case XFED__ENVELOPE__BODY_METRICS: return env->metrics->job_id;
  case XFED__ENVELOPE__BODY_SECAGG_ADVERT: return env->secagg_advert->job_id;
  case XFED__ENVELOPE__BODY_SECAGG_SHARES: return env->secagg_shares->job_id;
  case XFED__ENVELOPE__BODY_SECAGG_REVEAL: return env->secagg_reveal->job_id;
  case XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG: return env->secagg_check_sig->job_id;
  case XFED__ENVELOPE__BODY_SECAGG_REFUSAL: return env->secagg_refusal->job_id;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: return env->tensor_begin->job_id;
  default: return NULL;
  }
}

void xf__run_on_frame(xf__coord *co, xf__site *s, const Xfed__Envelope *env) {
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK: {
    xf__run *run = NULL;
    xf__take *t = take_by_stream(co, s->id, env->tensor_chunk->stream_id, &run);
    if (!t || !xf__take_acked(t)) {
      if (s->peer)
        xf_session_send_error(xf__peer_conn(s->peer), XF_EINVAL,
                              "a tensor chunk without an acknowledged TensorBegin");
      return;
    }
    xf__intake_chunk(run, s, t, env->tensor_chunk);
    return;
  }
  case XFED__ENVELOPE__BODY_TENSOR_END: {
    xf__run *run = NULL;
    xf__take *t = take_by_stream(co, s->id, env->tensor_end->stream_id, &run);
    if (t && xf__take_acked(t)) xf__intake_end(run, s, t, env->tensor_end);
    return;
  }
  case XFED__ENVELOPE__BODY_TENSOR_ACK: return; /* a site acknowledging a model */
  case XFED__ENVELOPE__BODY_ERROR: return;     /* logged by the daemon */
  default: break;
  }
  const char *job = job_of(env);
  xf__run *run = xf__run_by_id(co, job);
  if (!run) {
    if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN && s->peer)
      xf_session_refuse_stream(xf__peer_conn(s->peer), env->tensor_begin->stream_id, XF_EINVAL,
                               "job %s is not running here; its task will not be offered again",
                               job ? job : "");
    else if (env->body_case == XFED__ENVELOPE__BODY_TASK_ACCEPT && s->peer) {
      /* It holds a task we no longer run (a restart, a cancel): let it go. */
      Xfed__TaskCancel tc = XFED__TASK_CANCEL__INIT;
      tc.job_id = env->task_accept->job_id;
      tc.round = env->task_accept->round;
      tc.attempt = env->task_accept->attempt;
      tc.reason = "no such job is running here";
      Xfed__Envelope out = XFED__ENVELOPE__INIT;
      out.body_case = XFED__ENVELOPE__BODY_TASK_CANCEL;
      out.task_cancel = &tc;
      (void)xf__send(s->peer, &out);
    }
    return;
  }
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_ACCEPT: on_accept(run, s, env->task_accept); return;
  case XFED__ENVELOPE__BODY_TASK_REFUSAL: on_refusal(run, s, env->task_refusal); return;
  case XFED__ENVELOPE__BODY_METRICS: on_metrics(run, s, env); return;
  case XFED__ENVELOPE__BODY_SECAGG_ADVERT:
  case XFED__ENVELOPE__BODY_SECAGG_SHARES:
  case XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG:
  case XFED__ENVELOPE__BODY_SECAGG_REFUSAL:
  case XFED__ENVELOPE__BODY_SECAGG_REVEAL: on_sa(run, s, env); return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: {
    const Xfed__TensorBegin *b = env->tensor_begin;
    if (!current(run, b->round, b->attempt)) {
      if (s->peer)
        xf_session_refuse_stream(xf__peer_conn(s->peer), b->stream_id, XF_EINVAL,
                                 "job %s round %u attempt %u is not a task you hold here now; "
                                 "keep it until the task is offered to you again",
                                 run->id_text, (unsigned)b->round, (unsigned)b->attempt);
      return;
    }
    xf__intake_begin(run, s, b);
    return;
  }
  default:
    if (s->peer)
      xf_session_send_error(xf__peer_conn(s->peer), XF_EUNSUPPORTED, "%s is not a site's message",
                            xf_envelope_body_name(env));
    return;
  }
}

