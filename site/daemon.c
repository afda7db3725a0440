/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon: dialing and redialing, the session, task offers, goes
 * and cancels and secure aggregation's frames, start and stop
 * (site/daemon.h). What becomes of the tasks is the task set's
 * (site/taskset.h): frames become its events here, and its actions are
 * taken by tasks.c. The model and update streams are streams.c's, training
 * worker.c's, the replies tasks.c's, /metrics sitehttp.c's
 * (site/daemon_internal.h). Everything but training runs on the loop
 * thread. */
#include "site/daemon_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/jobspec.h"
#include "crypto/digest.h"
#include "crypto/seal.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "crypto/secagg_x509.h"
#include "crypto/pki.h"
#include "kernels/backend.h"
#include "kernels/model.h"
#include "codec/codec.h"
#include "policy/release.h"
#include "update/update.h"
#include "net/conn.h"
#include "net/notify.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"
#include "privacy/ledger.h"
#include "data/dataset.h"
#include "site/offer.h"
#include "site/siteagg.h"
#include "site/sitemachine.h"
#include "site/registry.h"
#include "site/residency.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "updates travel as float32 little-endian; add byte swapping for this host");

/* ---- small helpers ------------------------------------------------------------ */

uint64_t xf__site_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

double xf__site_mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A copy of s fit for a quoted log value: quotes become apostrophes and
 * control characters spaces, so one event stays one parsable line. */
const char *xf__site_logq(char *buf, size_t n, const char *s) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < n; i++) {
    char ch = s[i];
    buf[i] = ch == '"' ? '\'' : ((unsigned char)ch < 0x20 ? ' ' : ch);
  }
  buf[i] = '\0';
  return buf;
}

static const char *end_name(xf_conn_end end) {
#define XF__END_NAME(name, msg) #name,
  static const char *const names[] = {XF_CONN_END_MAP(XF__END_NAME)};
#undef XF__END_NAME
  return (unsigned)end < XF_CONN_END_COUNT ? names[end] : "UNKNOWN";
}

/* The share of the last round's top-k residual a site carries into the next
 * update. Measured on the quickstart job with topk:0.01+q8 (final accuracy
 * for 0, 0.3, 0.5, 0.7 and 1: 0.8387, 0.8425, 0.8478, 0.8482, 0.8393). */
#define XF_SITE_RESIDUAL_DISCOUNT 0.7f

static void schedule_redial(daemon_t *d);
static void on_redial_timer(uv_timer_t *timer);
static void dial_next(daemon_t *d);

bool xf__site_session_open(const daemon_t *d) {
  return d->conn && xf_conn_is_open(d->conn) && d->session.open;
}

/* ---- offers and cancellations --------------------------------------------------------------- */

/* ---- secure aggregation (the rounds are site/siteagg.c's) ---------------------------------- */

static void sa_send(daemon_t *d, Xfed__Envelope *env) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (!xf__site_session_open(d) || xf_conn_send(d->conn, env, &err) != XF_OK) {
    char q[600];
    XF_WARN("secagg_not_sent", "body=%s reason=\"%s\"", xf_envelope_body_name(env),
            xf__site_logq(q, sizeof(q), err.msg[0] ? err.msg : "not connected"));
  }
}

/* This site leaves (job, round, attempt)'s round of secure aggregation
 * because a check in `phase` failed (err says which member and why): the
 * aggregator is told (SecAggRefusal), the round forgotten, and a task still
 * training or waiting to send its masked update dropped, so nothing more of
 * it goes out. */
static void sa_refuse(daemon_t *d, const char *job, uint32_t round, uint32_t attempt,
                      const char *phase, const xf_errctx *err) {
  uint32_t peer = xf_site_sa_peer(d->sa, job, round, attempt, err->peer);
  char q[600], qj[JOB_ID_MAX];
  XF_WARN("secagg_round_refused", "job=%s round=%u attempt=%u phase=%s peer=%s reason=\"%s\"",
          xf__site_logq(qj, sizeof(qj), job), (unsigned)round, (unsigned)attempt, phase,
          peer ? err->peer : "-",
          xf__site_logq(q, sizeof(q), err->msg[0] ? err->msg : "malformed"));
  Xfed__SecAggRefusal r = XFED__SEC_AGG_REFUSAL__INIT;
  r.job_id = (char *)job;
  r.round = round;
  r.attempt = attempt;
  r.phase = (char *)phase;
  r.peer = peer;
  r.peer_name = peer ? (char *)err->peer : "";
  r.reason = (char *)(err->msg[0] ? err->msg : "a malformed secure-aggregation message");
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_REFUSAL;
  env.secagg_refusal = &r;
  sa_send(d, &env);
  task *t = xf__site_task_find(d, job, round, attempt);
  xf_site_sa_forget(d->sa, job, round, attempt);
  if (t) xf__site_task_drop(d, t, "it refused the round's secure aggregation");
}

static bool sa_holds(void *user, const char *job) {
  return xf__site_task_of_job(user, job) != NULL;
}

/* Begins t's round of secure aggregation with the setup in t->uo.sa and
 * the cohort's names, signing with the site's certificate key. */
static xf_err sa_begin(daemon_t *d, const task *t, const char *const *cohort, xf_errctx *err) {
  xf_secagg_identity id = xf_secagg_x509_identity(d->sa_identity);
  return xf_site_sa_begin(d->sa, t->job_id, t->round, t->attempt, &t->uo.sa, cohort, &id,
                          sa_holds, d, err);
}

void xf__site_sa_advertise(daemon_t *d, const task *t) {
  uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_sa_advertise(d->sa, t->job_id, t->round, t->attempt, advert, sig, &err) != XF_OK) {
    sa_refuse(d, t->job_id, t->round, t->attempt, "keys", &err);
    return;
  }
  Xfed__SecAggAdvert a = XFED__SEC_AGG_ADVERT__INIT;
  a.job_id = (char *)t->job_id;
  a.round = t->round;
  a.attempt = t->attempt;
  a.advert.data = advert;
  a.advert.len = sizeof(advert);
  a.signature.data = sig;
  a.signature.len = sizeof(sig);
  a.certificate.data = d->sa_cert;
  a.certificate.len = d->sa_cert_len;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_ADVERT;
  env.secagg_advert = &a;
  sa_send(d, &env);
}

/* Masks t's quantized update and starts its stream (the shares are
 * routed). False when that fails: the task is refused and dropped. */
bool xf__site_sa_mask_and_stream(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  t->sa_waiting = false;
  uint32_t bits = 0;
  xf_secagg_client *client = xf_site_sa_client(d->sa, t->job_id, t->round, t->attempt, &bits);
  if (xf_update_mask(&t->payload, client, bits, &err) != XF_OK ||
      xf__site_stream_update(t, &err) != XF_OK) {
    char q[600];
    XF_ERROR("secagg_mask_failed", "job=%s round=%u reason=\"%s\"", t->job_id,
             (unsigned)t->round, xf__site_logq(q, sizeof(q), err.msg));
    xf__site_send_refusal(d, t->job_id, t->round, t->attempt,
                          XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "cannot mask the update: %s",
                          err.msg);
    xf__site_task_drop(d, t, "secure aggregation failed");
    return false;
  }
  xf__site_pump(d);
  return true;
}

static void on_sa_keys(daemon_t *d, const Xfed__SecAggKeys *k) {
  if (!xf_site_sa_has(d->sa, k->job_id, k->round, k->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_secagg_signed_share *msgs = NULL;
  size_t count = 0;
  if (xf_site_sa_keys(d->sa, k, &msgs, &count, &err) != XF_OK) {
    sa_refuse(d, k->job_id, k->round, k->attempt, "keys", &err);
    return;
  }
  uint32_t *to = xf_mallocarray(count ? count : 1, sizeof(uint32_t));
  ProtobufCBinaryData *cts = xf_mallocarray(count ? count : 1, sizeof(*cts));
  ProtobufCBinaryData *sigs = xf_mallocarray(count ? count : 1, sizeof(*sigs));
  if (to && cts && sigs) {
    for (size_t i = 0; i < count; i++) {
      to[i] = msgs[i].to;
      cts[i].data = msgs[i].ciphertext;
      cts[i].len = sizeof(msgs[i].ciphertext);
      sigs[i].data = msgs[i].sig;
      sigs[i].len = sizeof(msgs[i].sig);
    }
    Xfed__SecAggShares m = XFED__SEC_AGG_SHARES__INIT;
    m.job_id = k->job_id;
    m.round = k->round;
    m.attempt = k->attempt;
    m.n_to = count;
    m.to = to;
    m.n_ciphertexts = count;
    m.ciphertexts = cts;
    m.n_signatures = count;
    m.signatures = sigs;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_SHARES;
    env.secagg_shares = &m;
    sa_send(d, &env);
  }
  xf_free(to);
  xf_free(cts);
  xf_free(sigs);
  xf_site_sa_shares_free(msgs, count);
}

static void on_sa_routed(daemon_t *d, const Xfed__SecAggRouted *r) {
  if (!xf_site_sa_has(d->sa, r->job_id, r->round, r->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_sa_routed_in(d->sa, r, &err) != XF_OK) {
    sa_refuse(d, r->job_id, r->round, r->attempt, "routed", &err);
    return;
  }
  task *t = xf__site_task_find(d, r->job_id, r->round, r->attempt);
  if (t && t->sa_waiting && xf_site_task_phase(t->entry) == XF_SITEM_REPORTING)
    xf__site_sa_mask_and_stream(d, t);
}

/* The consistency round: signs the survivor set the aggregator claims,
 * once per round. */
static void on_sa_check(daemon_t *d, const Xfed__SecAggCheck *c) {
  if (!xf_site_sa_has(d->sa, c->job_id, c->round, c->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  if (xf_site_sa_check(d->sa, c, sig, &err) != XF_OK) {
    sa_refuse(d, c->job_id, c->round, c->attempt, "check", &err);
    return;
  }
  Xfed__SecAggCheckSig m = XFED__SEC_AGG_CHECK_SIG__INIT;
  m.job_id = c->job_id;
  m.round = c->round;
  m.attempt = c->attempt;
  m.signature.data = sig;
  m.signature.len = sizeof(sig);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG;
  env.secagg_check_sig = &m;
  sa_send(d, &env);
}

static void on_sa_unmask(daemon_t *d, const Xfed__SecAggUnmask *u) {
  if (!xf_site_sa_has(d->sa, u->job_id, u->round, u->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  uint8_t *out = NULL;
  size_t len = 0, cap = 0;
  if (xf_site_sa_unmask(d->sa, u, &out, &len, &cap, &err) != XF_OK) {
    sa_refuse(d, u->job_id, u->round, u->attempt, "unmask", &err);
    return;
  }
  Xfed__SecAggReveal r = XFED__SEC_AGG_REVEAL__INIT;
  r.job_id = u->job_id;
  r.round = u->round;
  r.attempt = u->attempt;
  r.reveal.data = out;
  r.reveal.len = len;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_REVEAL;
  env.secagg_reveal = &r;
  sa_send(d, &env);
  XF_INFO("secagg_revealed", "job=%s round=%u attempt=%u survivors=%zu", u->job_id,
          (unsigned)u->round, (unsigned)u->attempt, u->n_u3);
  xf_site_sa_reveal_free(out, cap);
}

/* ---- offers --------------------------------------------------------------------------------------- */

static xf_err env_dataset(void *user, const char *name, xf_site_dataset *out, xf_errctx *err) {
  daemon_t *d = user;
  return xf_site_registry_get(d->reg, name, out, err);
}

static xf_err env_ledger_epsilon(void *user, const char *dataset, const char *job,
                                 const xf_privacy_charge *charge, double delta, double *out,
                                 xf_errctx *err) {
  daemon_t *d = user;
  return xf_ledger_epsilon(xf_site_registry_db(d->reg), dataset, job, charge, delta, out, err);
}

/* The site's own residency rules, checked and recorded in its audit trail
 * at this moment. */
static xf_err env_local_rules(void *user, const xf_site_task_ref *ref, const xf_site_residency *res,
                              const xf_jobspec *spec, const xf_site_dataset *ds,
                              xf_site_residency_verdict *v, xf_errctx *err) {
  daemon_t *d = user;
  double now = (double)xf__site_wall_ms() / 1000.0;
  xf_db *db = xf_site_registry_db(d->reg);
  XF_GUARD(xf_site_residency_check(db, ref, res, spec, now, v, err));
  return xf_site_residency_audit(db, ref, ds->name, res, v, now, err);
}

static void offer_env_init(daemon_t *d) {
  d->offer_env = (xf_site_offer_env){.site = d->cfg.site,
                                     .region = d->cfg.region,
                                     .threads = (unsigned)xf_backend_threads(d->backend),
                                     .user = d,
                                     .dataset = env_dataset,
                                     .ledger_epsilon = env_ledger_epsilon,
                                     .local_rules = env_local_rules};
}

/* The log line of the local rules' verdict on an offer. */
static void log_local_rules(const Xfed__TaskOffer *o, const xf_site_offer_verdict *v) {
  char q[600], qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), o->job_id);
  if (v->step == XF_SITE_OFFER_LOCAL_ERROR) {
    XF_ERROR("local_policy_failed", "job=%s round=%u reason=\"%s\"", qj, (unsigned)o->round,
             xf__site_logq(q, sizeof(q), v->local_err.msg));
    return;
  }
  const xf_site_residency_verdict *l = &v->local;
  XF_INFO("local_policy", "job=%s round=%u attempt=%u version=%llu allowed=%s rule=%s path=%s "
          "why=\"%s\"", qj, (unsigned)o->round, (unsigned)o->attempt,
          (unsigned long long)l->policy_version, l->allowed ? "true" : "false", l->rule, l->path,
          xf__site_logq(q, sizeof(q), l->why));
}

/* The offer's fields the task set decides on (site/taskset.h). */
static xf_site_tasks_offer offer_fields(const Xfed__TaskOffer *o) {
  return (xf_site_tasks_offer){
      .job = o->job_id,
      .round = o->round,
      .attempt = o->attempt,
      .model_digest = o->model_digest.data,
      .evaluate_only = o->evaluate_only,
      .hold = o->hold,
      .seal_key = o->seal_key.len == XF_SEAL_PUBLICKEYBYTES ? o->seal_key.data : NULL,
      .model_stream_id = o->model_stream_id,
      .update_stream_id = o->update_stream_id,
      .deadline_ms = o->deadline_unix_ms};
}

/* A new task of an offer the checks took (v's dataset moves into it);
 * NULL when out of memory (v's dataset is then freed). Its update stream
 * id and its place come with its acceptance (site/taskset.h). */
static task *task_new(daemon_t *d, const Xfed__TaskOffer *o, xf_site_offer_verdict *v) {
  xf_errctx err;
  xf_errctx_clear(&err);
  task *t = xf_calloc(1, sizeof(*t));
  if (t && xf_tensor_receiver_new(XF_SITE_MODEL_MAX, xf__site_model_sink, t, &t->model_rx,
                                  &err) != XF_OK) {
    xf_free(t);
    t = NULL;
  }
  if (!t) {
    xf_site_dataset_free(&v->dataset);
    return NULL;
  }
  snprintf(t->job_id, sizeof(t->job_id), "%s", o->job_id);
  t->round = o->round;
  t->attempt = o->attempt;
  t->model_round = o->model_round;
  t->evaluate_only = o->evaluate_only;
  memcpy(t->model_digest.bytes, o->model_digest.data, XF_DIGEST_BYTES);
  t->model_stream_id = o->model_stream_id;
  t->spec = v->spec;
  t->dataset = v->dataset;
  memset(&v->dataset, 0, sizeof(v->dataset));
  t->n_params = v->n_params;
  t->plan = v->plan;
  t->charge = v->charge;
  xf_site_plan_keep(&t->residency, o->residency);
  const char *to = o->residency ? o->residency->aggregator_region : NULL;
  if (to && *to && strcmp(to, d->cfg.region) != 0) {
    t->crossing = true;
    snprintf(t->crossing_to, sizeof(t->crossing_to), "%s", to);
  }
  t->shuffle_seed = v->shuffle_seed;
  atomic_init(&t->abandoned, false);
  t->secagg = v->secagg;
  t->uo = v->uo;
  return t;
}

/* The top-k or shared-subset residual the task starts from. NULL when it
 * is read (or there is none), else what failed, with err. */
static const char *task_residual_load(daemon_t *d, task *t, xf_errctx *err) {
  if (t->evaluate_only || t->spec.compression.uplink.topk_fraction <= 0) return NULL;
  bool found = false;
  t->residual = xf_mallocarray(t->n_params, sizeof(float));
  if (!t->residual) {
    xf_fail(err, XF_ENOMEM, "out of memory");
    return "cannot read the compression residual";
  }
  if (xf_site_residual_load(d->reg, t->job_id, t->dataset.name, t->round, t->residual,
                            t->n_params, &found, err) != XF_OK)
    return "cannot read the compression residual";
  /* Error feedback, discounted: the next local training starts from a
   * global model that lacks what this site left out, so it re-derives
   * part of it; carrying the whole residual over would count that part
   * twice (docs/compression.md). */
  for (size_t i = 0; i < t->n_params; i++) t->residual[i] *= XF_SITE_RESIDUAL_DISCOUNT;
  return NULL;
}

/* An offer the task set sent to the checks (site/offer.h): a task taken
 * is set up here (its round of secure aggregation begun, its residual
 * read), then the set decides what to answer. busy: the set is full, the
 * tasks it holds ("" when it is not). */
static void offer_take(daemon_t *d, const Xfed__TaskOffer *o, const xf_site_tasks_offer *so,
                       uint64_t now, const char *busy) {
  xf_site_offer_room room = {.now_ms = now, .busy = busy[0] ? busy : NULL};
  xf_site_offer_verdict v;
  xf_site_offer_check(&d->offer_env, o, &room, &v);
  if (v.local_ran) log_local_rules(o, &v);
  xf_site_tasks_checked c = {.verdict = &v};
  char msg[600];
  task *t = NULL;
  if (v.step == XF_SITE_OFFER_TAKEN && !(t = task_new(d, o, &v))) {
    xf__site_send_error(d, XF_ENOMEM, "the site cannot take job %s round %u: out of memory",
                        o->job_id, (unsigned)o->round);
    c.out_of_memory = true;
  }
  if (t) {
    xf_errctx err;
    xf_errctx_clear(&err);
    if (t->uo.secagg && sa_begin(d, t, (const char *const *)o->secagg->cohort, &err) != XF_OK)
      c.setup_failed = "secure aggregation";
    if (!c.setup_failed) c.setup_failed = task_residual_load(d, t, &err);
    snprintf(msg, sizeof(msg), "%s", err.msg);
    c.setup_err = msg;
    c.user = t;
  }
  xf_site_tasks_offer_checked(d->set, so, &c);
  xf__site_perform(d);
}

static void on_offer(daemon_t *d, const Xfed__TaskOffer *o) {
  char msg[600];
  if (xf_site_offer_malformed(o, msg, sizeof(msg))) {
    xf__site_send_error(d, XF_EFORMAT, "%s", msg);
    return;
  }
  char qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), o->job_id);
  uint64_t now = xf__site_wall_ms();
  /* answer_by_unix_ms is the aggregator's own deadline for the answer; a
   * site answers at once, so it is only logged. */
  XF_INFO("task_offer", "job=%s round=%u attempt=%u model_round=%u evaluate_only=%s hold=%s "
          "deadline_in_s=%.1f answer_by_in_s=%.1f", qj, (unsigned)o->round, (unsigned)o->attempt,
          (unsigned)o->model_round, o->evaluate_only ? "true" : "false",
          o->hold ? "true" : "false",
          o->deadline_unix_ms ? ((double)o->deadline_unix_ms - (double)now) / 1000.0 : -1.0,
          o->answer_by_unix_ms ? ((double)o->answer_by_unix_ms - (double)now) / 1000.0 : -1.0);
  xf_site_tasks_offer so = offer_fields(o);
  char busy[XF_SITE_WHY_MAX];
  xf_site_tasks_offer_next next = xf_site_tasks_offer_in(d->set, &so, now, busy, sizeof(busy));
  xf__site_perform(d);
  if (next == XF_SITE_TASKS_CHECK) offer_take(d, o, &so, now, busy);
}

/* The aggregator confirms a held task: enough sites accepted. With secure
 * aggregation it carries this site's setup for the round's cohort. */
static void on_go(daemon_t *d, const Xfed__TaskGo *g) {
  xf_site_task *e = xf_site_tasks_go_in(d->set, g->job_id ? g->job_id : "", g->round, g->attempt);
  if (e) {
    task *t = xf_site_task_user(e);
    xf_site_go_task held = {.spec = &t->spec, .plan_kept = &t->residency, .privacy = &t->plan,
                            .n_params = t->n_params, .evaluate_only = t->evaluate_only,
                            .secagg = t->secagg};
    xf_site_go_verdict v;
    xf_site_go_check(&d->offer_env, &held, g, &t->uo, &v);
    xf_errctx err;
    xf_errctx_clear(&err);
    if (v.begin && sa_begin(d, t, (const char *const *)g->secagg->cohort, &err) != XF_OK) {
      char msg[600];
      snprintf(msg, sizeof(msg), "%s", err.msg);
      v.step = XF_SITE_GO_SETUP;
      v.reason = XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
      snprintf(v.why, sizeof(v.why), "secure aggregation: %s", msg);
    }
    xf_site_tasks_go_checked(d->set, e, v.step, v.reason, v.why, g->secagg != NULL);
  }
  xf__site_perform(d);
}

static void on_cancel(daemon_t *d, const Xfed__TaskCancel *c) {
  xf_site_tasks_cancel(d->set, c->job_id ? c->job_id : "", c->round, c->attempt, c->reason);
  xf__site_perform(d);
}

/* ---- the session ------------------------------------------------------------------------------ */

static void send_announce(daemon_t *d) {
  xf_site_dataset *list = NULL;
  size_t listed = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_registry_list(d->reg, &list, &listed, &err) != XF_OK) {
    char q[600];
    XF_ERROR("announce_failed", "reason=\"%s\"", xf__site_logq(q, sizeof(q), err.msg));
    list = NULL;
    listed = 0;
  }
  size_t n = listed;
  Xfed__SiteAnnounce__Dataset *sets = n ? xf_calloc(n, sizeof(*sets)) : NULL;
  Xfed__SiteAnnounce__Dataset **ptrs = n ? xf_calloc(n, sizeof(*ptrs)) : NULL;
  if (n && (!sets || !ptrs)) n = 0;
  for (size_t i = 0; i < n; i++) {
    Xfed__SiteAnnounce__Dataset init = XFED__SITE_ANNOUNCE__DATASET__INIT;
    sets[i] = init;
    sets[i].name = list[i].name;
    sets[i].n_tags = list[i].n_tags;
    sets[i].tags = list[i].tags;
    sets[i].classification = (char *)xf_site_class_name(list[i].classification);
    sets[i].train_records = list[i].train_records;
    sets[i].test_records = list[i].test_records;
    sets[i].classes = list[i].classes;
    sets[i].height = list[i].h;
    sets[i].width = list[i].w;
    sets[i].channels = list[i].c;
    ptrs[i] = &sets[i];
  }
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = d->cfg.site;
  a.region = d->cfg.region;
  a.n_datasets = n;
  a.datasets = ptrs;
  a.backend = (char *)xf_backend_name(d->backend);
  a.threads = (uint32_t)xf_backend_threads(d->backend);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
  env.site_announce = &a;
  xf_err rc = xf_conn_send(d->conn, &env, &err);
  if (rc != XF_OK) {
    char q[600];
    XF_ERROR("announce_failed", "reason=\"%s\"", xf__site_logq(q, sizeof(q), err.msg));
  } else {
    XF_INFO("site_announced", "site=%s region=%s datasets=%zu backend=%s threads=%u",
            d->cfg.site, d->cfg.region, n, a.backend, (unsigned)a.threads);
  }
  xf_free(ptrs);
  xf_free(sets);
  xf_site_dataset_list_free(list, listed);
}

static xf_err on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  daemon_t *d = xf_conn_user(c);
  d->connected = true;
  /* A site talks to a coordinator: the global one, or the regional
   * aggregator of its own region. Anything else would take the update
   * somewhere the operator did not send it. */
  if (peer->kind != XF_PKI_KIND_COORDINATOR ||
      (peer->region[0] && strcmp(peer->region, d->cfg.region) != 0)) {
    snprintf(d->close_reason, sizeof(d->close_reason),
             "the peer at %s is %s %s%s%s, not a coordinator of region %s or the global one",
             xf_conn_peer_addr(c), xf_pki_kind_name(peer->kind), peer->name,
             peer->region[0] ? " of region " : "", peer->region, d->cfg.region);
    return XF_EDENIED;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_session_start(&d->session, c, "site", 0, &err);
  if (rc != XF_OK) snprintf(d->close_reason, sizeof(d->close_reason), "%s", err.msg);
  else XF_INFO("site_connected", "coordinator=%s peer=%s address=%s", d->cfg.coordinator,
               peer->name, xf_conn_peer_addr(c));
  return rc;
}

static void on_session_open(daemon_t *d) {
  d->backoff_before_open = d->backoff_ms;
  d->backoff_ms = XF_SITE_BACKOFF_MIN_MS;
  d->sessions_opened++;
  XF_INFO("session_open", "coordinator=%s version=%u peer_role=%s", d->cfg.coordinator,
          (unsigned)d->session.version, d->session.peer_role);
  xf_notify_status("site %s: session open with %s", d->cfg.site, d->cfg.coordinator);
  send_announce(d);
}

static void on_frame(xf_conn *c, const Xfed__Envelope *env) {
  daemon_t *d = xf_conn_user(c);
  if (d->stopping) return;
  xf_session_event ev;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_on_frame(&d->session, c, env, &ev, &err) != XF_OK) {
    snprintf(d->close_reason, sizeof(d->close_reason), "%s", err.msg);
    d->refused = env->body_case == XFED__ENVELOPE__BODY_REFUSAL;
    xf_conn_close(c);
    return;
  }
  if (ev == XF_SESSION_OPENED) {
    on_session_open(d);
    xf_site_tasks_link_up(d->set);
    xf__site_perform(d);
    return;
  }
  if (ev != XF_SESSION_FRAME) return;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(d, env->task_offer); break;
  case XFED__ENVELOPE__BODY_TASK_CANCEL: on_cancel(d, env->task_cancel); break;
  case XFED__ENVELOPE__BODY_TASK_GO: on_go(d, env->task_go); break;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: xf__site_on_tensor_begin(d, env->tensor_begin); break;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK: xf__site_on_tensor_chunk(d, env->tensor_chunk); break;
  case XFED__ENVELOPE__BODY_TENSOR_END: xf__site_on_tensor_end(d, env->tensor_end); break;
  case XFED__ENVELOPE__BODY_TENSOR_ACK: xf__site_on_tensor_ack(d, env->tensor_ack); break;
  case XFED__ENVELOPE__BODY_SECAGG_KEYS: on_sa_keys(d, env->secagg_keys); break;
  case XFED__ENVELOPE__BODY_SECAGG_ROUTED: on_sa_routed(d, env->secagg_routed); break;
  case XFED__ENVELOPE__BODY_SECAGG_CHECK: on_sa_check(d, env->secagg_check); break;
  case XFED__ENVELOPE__BODY_SECAGG_UNMASK: on_sa_unmask(d, env->secagg_unmask); break;
  case XFED__ENVELOPE__BODY_ERROR: {
    char q[600];
    XF_WARN("coordinator_error", "code=%s message=\"%s\"", xf_err_name((xf_err)env->error->code),
            xf__site_logq(q, sizeof(q), env->error->message));
    if (env->error->stream_id) xf__site_on_update_refused(d, env->error->stream_id);
    break;
  }
  default:
    xf__site_send_error(d, XF_EUNSUPPORTED, "a site does not take %s messages",
                        xf_envelope_body_name(env));
    break;
  }
  xf__site_pump(d);
}

static void on_drain(xf_conn *c) { xf__site_pump(xf_conn_user(c)); }

static void on_close(xf_conn *c, const xf_conn_reason *why) {
  daemon_t *d = xf_conn_user(c);
  bool was_connected = d->connected, was_open = d->session.open;
  d->bytes_in_closed += xf_conn_bytes_in(c);
  d->bytes_out_closed += xf_conn_bytes_out(c);
  d->conn = NULL;
  d->connected = false;
  d->n_replies = 0;
  memset(&d->session, 0, sizeof(d->session));
  xf_site_tasks_link_down(d->set);
  xf__site_perform(d);
  if (!was_connected && why->end == XF_CONN_END_CONNECT && !d->stopping &&
      d->next_addr + 1 < d->n_addrs) {
    d->next_addr++; /* the name has more addresses: try the next one now */
    uv_timer_start(&d->redial, on_redial_timer, 0, 0);
    return;
  }
  char q[600];
  const char *reason = d->close_reason[0] ? d->close_reason : why->msg;
  bool expected = d->stopping || (why->end == XF_CONN_END_CLOSED && !d->close_reason[0]);
  xf_log(expected ? XF_LOG_INFO : XF_LOG_WARN,
         "session_closed", "coordinator=%s end=%s was_open=%s reason=\"%s\"", d->cfg.coordinator,
         end_name(why->end), was_open ? "true" : "false",
         xf__site_logq(q, sizeof(q), reason[0] ? reason : xf_conn_end_message(why->end)));
  d->close_reason[0] = '\0';
  if (!d->stopping)
    xf_notify_status("site %s: no session with %s (%s); dialing again",
                     d->cfg.site, d->cfg.coordinator, end_name(why->end));
  /* A session the coordinator refused (after our announce, say) does not
   * count as opened: the delays keep growing, so a site it will not take
   * does not knock every half second. */
  if (d->refused && was_open && d->backoff_before_open > d->backoff_ms)
    d->backoff_ms = d->backoff_before_open;
  d->refused = false;
  if (!d->stopping) schedule_redial(d);
}

/* ---- dialing ------------------------------------------------------------------------------------ */

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  daemon_t *d = req->data;
  d->resolving = false;
  if (status == UV_ECANCELED || d->stopping) {
    uv_freeaddrinfo(res);
    return;
  }
  if (status < 0) {
    XF_WARN("resolve_failed", "coordinator=%s reason=\"%s\"", d->cfg.coordinator,
            uv_strerror(status));
    uv_freeaddrinfo(res);
    schedule_redial(d);
    return;
  }
  d->n_addrs = 0;
  for (struct addrinfo *a = res; a && d->n_addrs < ADDRS_MAX; a = a->ai_next)
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
        a->ai_addrlen <= sizeof(d->addrs[0]))
      memcpy(&d->addrs[d->n_addrs++], a->ai_addr, a->ai_addrlen);
  uv_freeaddrinfo(res);
  d->next_addr = 0;
  dial_next(d);
}

static void start_resolve(daemon_t *d) {
  d->attempts++;
  d->n_addrs = d->next_addr = 0;
  XF_INFO("dial", "coordinator=%s attempt=%lu", d->cfg.coordinator, d->attempts);
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  d->resolver.data = d;
  int rc = uv_getaddrinfo(&d->loop, &d->resolver, on_resolved, d->cfg.coordinator_host,
                          d->port_text, &hints);
  if (rc != 0) {
    XF_WARN("resolve_failed", "coordinator=%s reason=\"%s\"", d->cfg.coordinator,
            uv_strerror(rc));
    schedule_redial(d);
    return;
  }
  d->resolving = true;
}

/* Dials the addresses of the last resolution from next_addr on; backs off
 * when none can be dialed. */
static void dial_next(daemon_t *d) {
  xf_conn_opts opts = {.on_connect = on_connect, .on_frame = on_frame, .on_drain = on_drain,
                       .on_close = on_close, .user = d};
  for (; d->next_addr < d->n_addrs; d->next_addr++) {
    char ip[INET6_ADDRSTRLEN + 1];
    const struct sockaddr_storage *sa = &d->addrs[d->next_addr];
    int rc = sa->ss_family == AF_INET6
                 ? uv_ip6_name((const struct sockaddr_in6 *)sa, ip, sizeof(ip))
                 : uv_ip4_name((const struct sockaddr_in *)sa, ip, sizeof(ip));
    if (rc != 0) continue;
    xf_errctx err;
    xf_errctx_clear(&err);
    d->close_reason[0] = '\0';
    d->connected = false;
    if (xf_dial(&d->loop, d->tls, ip, d->cfg.coordinator_port, &opts, &d->conn, &err) == XF_OK)
      return;
    char q[600];
    XF_WARN("dial_failed", "coordinator=%s address=%s reason=\"%s\"", d->cfg.coordinator, ip,
            xf__site_logq(q, sizeof(q), err.msg));
  }
  schedule_redial(d);
}

static void on_redial_timer(uv_timer_t *timer) {
  daemon_t *d = timer->data;
  if (d->stopping) return;
  if (d->next_addr > 0 && d->next_addr < d->n_addrs) dial_next(d);
  else start_resolve(d);
}

static void schedule_redial(daemon_t *d) {
  if (d->stopping) return;
  d->n_addrs = d->next_addr = 0;
  double jitter = 0.75 + 0.5 * xf_rng_uniform(&d->jitter);
  uint64_t delay = (uint64_t)((double)d->backoff_ms * jitter);
  XF_INFO("redial", "coordinator=%s in_ms=%llu attempt=%lu", d->cfg.coordinator,
          (unsigned long long)delay, d->attempts + 1);
  d->backoff_ms = d->backoff_ms >= XF_SITE_BACKOFF_MAX_MS / 2 ? XF_SITE_BACKOFF_MAX_MS
                                                              : d->backoff_ms * 2;
  uv_timer_start(&d->redial, on_redial_timer, delay, 0);
}

/* ---- start and stop ----------------------------------------------------------------------------- */

static void daemon_stop(daemon_t *d, const char *signal_name) {
  if (d->stopping) return;
  d->stopping = true;
  xf__site_metrics_stop(d);
  XF_INFO("site_stopping", "signal=%s training=%s", signal_name,
          xf_site_tasks_worker(d->set) ? "true (told to stop; waiting for it)" : "false");
  xf_site_tasks_stop(d->set);
  xf__site_perform(d);
  xf_notify_stopping(&d->notify);
  uv_timer_stop(&d->redial);
  uv_close((uv_handle_t *)&d->redial, NULL);
  if (d->resolving) uv_cancel((uv_req_t *)&d->resolver);
  if (d->conn) {
    snprintf(d->close_reason, sizeof(d->close_reason), "the site is stopping (%s)", signal_name);
    xf_conn_close(d->conn);
  }
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  uv_close((uv_handle_t *)&d->sighup, NULL);
  xf__site_worker_stop(d);
}

static void on_signal(uv_signal_t *h, int signum) {
  daemon_t *d = h->data;
  if (signum == SIGHUP) {
    xf_errctx err;
    xf_errctx_clear(&err);
    char q[600];
    xf_pki_trust *trust = NULL;
    xf_notify_reloading();
    /* The trust for secure aggregation is loaded first: when it fails,
     * neither the TLS context nor secure aggregation has changed. */
    if (xf_pki_trust_load(d->ca_path, d->crl_path, &trust, &err) != XF_OK ||
        xf_tls_reload_crl(d->tls, &err) != XF_OK) {
      xf_pki_trust_free(trust);
      XF_ERROR("crl_reload_failed", "reason=\"%s\" kept=\"the CRL loaded before\"",
               xf__site_logq(q, sizeof(q), err.msg));
      xf_notify_ready("site %s: the CRL reload failed (%s), the previous CRL is in force",
                      d->cfg.site, err.msg);
    } else {
      /* Secure aggregation checks its peers against the new CRL too. */
      xf_secagg_x509_set_trust(d->sa_identity, trust);
      xf_pki_trust_free(d->sa_trust);
      d->sa_trust = trust;
      XF_INFO("crl_reloaded", "ca=%s crl=%s", d->cfg.ca, d->cfg.crl);
      xf_notify_ready("site %s: CRL reloaded", d->cfg.site);
    }
    if (xf__site_session_open(d)) send_announce(d);
    return;
  }
  daemon_stop(d, signum == SIGTERM ? "TERM" : "INT");
}

/* path, or DIR/path when path is relative. */
static xf_err site_path(const daemon_t *d, const char *field, const char *path, char *out,
                        size_t n, xf_errctx *err) {
  if (!path[0]) {
    xf_errctx_field(err, "%s", field);
    return xf_fail(err, XF_EINVAL, "the daemon needs %s: set it in site.json (xfed-site init "
                   "--%s FILE)", field, field);
  }
  int w = path[0] == '/' ? snprintf(out, n, "%s", path) : snprintf(out, n, "%s/%s", d->dir, path);
  XF_ENSURE(w > 0 && (size_t)w < n, err, XF_EINVAL, "%s: the path is too long", field);
  return XF_OK;
}

/* The site's own certificate must be the site site.json names: a mismatch
 * would only show up as the coordinator's refusal, again and again. */
static xf_err check_own_identity(const daemon_t *d, const char *cert_path, xf_errctx *err) {
  X509 *cert = NULL;
  XF_GUARD(xf_pki_cert_load(cert_path, &cert, err));
  xf_spiffe_id id;
  xf_err rc = xf_pki_peer_identity(cert, &id, err);
  X509_free(cert);
  if (rc != XF_OK) {
    xf_errctx_file(err, cert_path);
    return rc;
  }
  if (id.kind != XF_PKI_KIND_SITE || strcmp(id.name, d->cfg.site) != 0 ||
      strcmp(id.region, d->cfg.region) != 0) {
    xf_errctx_file(err, cert_path);
    return xf_fail(err, XF_EINVAL, "the certificate is for %s %s%s%s, but site.json says site %s "
                   "of region %s", xf_pki_kind_name(id.kind), id.name,
                   id.region[0] ? " of region " : "", id.region, d->cfg.site, d->cfg.region);
  }
  return XF_OK;
}

/* What secure aggregation signs and checks with: the TLS key, the
 * certificate (DER) the site sends with its keys, and its own copy of the
 * CA and CRL, reloaded with the TLS ones on SIGHUP. */
static xf_err sa_identity_load(daemon_t *d, const char *cert_path, const char *key_path,
                               xf_errctx *err) {
  X509 *cert = NULL;
  EVP_PKEY *key = NULL;
  xf_err rc = xf_pki_cert_load(cert_path, &cert, err);
  if (rc == XF_OK) rc = xf_pki_key_load(key_path, &key, err);
  if (rc == XF_OK) rc = xf_secagg_x509_cert_der(cert, &d->sa_cert, &d->sa_cert_len, err);
  if (rc == XF_OK) rc = xf_pki_trust_load(d->ca_path, d->crl_path, &d->sa_trust, err);
  if (rc == XF_OK) rc = xf_secagg_x509_new(d->sa_trust, key, &d->sa_identity, err);
  if (rc != XF_OK && !err->file[0]) xf_errctx_file(err, key_path);
  EVP_PKEY_free(key);
  X509_free(cert);
  return rc;
}

static void sa_identity_free(daemon_t *d) {
  xf_secagg_x509_free(d->sa_identity);
  xf_pki_trust_free(d->sa_trust);
  xf_free(d->sa_cert);
  d->sa_identity = NULL;
  d->sa_trust = NULL;
  d->sa_cert = NULL;
}

static xf_err open_backend(daemon_t *d, xf_errctx *err) {
  const char *env = getenv("XF_BACKEND");
  if (env && *env) return xf_backend_open_env((int)d->cfg.threads, &d->backend, err);
  xf_backend_options o = {.threads = (int)d->cfg.threads};
  if (xf_backend_parse_kind(d->cfg.backend, &o.kind) != XF_OK) {
    xf_errctx_field(err, "backend");
    return xf_fail(err, XF_EINVAL, "backend '%s': use auto, cpu or cuda", d->cfg.backend);
  }
  return xf_backend_open(&o, &d->backend, err);
}

static xf_err daemon_start(daemon_t *d, const xf_site_daemon_opts *opts, xf_errctx *err) {
  const char *dir = opts->dir && *opts->dir ? opts->dir : ".";
  XF_ENSURE(strlen(dir) + sizeof("/site.json") < sizeof(d->dir), err, XF_EINVAL,
            "the site directory's path is too long");
  snprintf(d->dir, sizeof(d->dir), "%s", dir);
  char path[PATH_MAX + 16];
  snprintf(path, sizeof(path), "%s/site.json", d->dir);
  XF_GUARD(xf_site_config_load(path, &d->cfg, err));
  snprintf(d->port_text, sizeof(d->port_text), "%u", (unsigned)d->cfg.coordinator_port);
  char cert[PATH_MAX + 16], key[PATH_MAX + 16], ca[PATH_MAX + 16], crl[PATH_MAX + 16];
  XF_GUARD(site_path(d, "cert", d->cfg.cert, cert, sizeof(cert), err));
  XF_GUARD(site_path(d, "key", d->cfg.key, key, sizeof(key), err));
  XF_GUARD(site_path(d, "ca", d->cfg.ca, ca, sizeof(ca), err));
  XF_GUARD(site_path(d, "crl", d->cfg.crl, crl, sizeof(crl), err));
  XF_GUARD(check_own_identity(d, cert, err));
  xf_tls_config tc = {.cert_path = cert, .key_path = key, .ca_path = ca, .crl_path = crl};
  XF_GUARD(xf_tls_new(&tc, &d->tls, err));
  snprintf(d->ca_path, sizeof(d->ca_path), "%s", ca);
  snprintf(d->crl_path, sizeof(d->crl_path), "%s", crl);
  XF_GUARD(sa_identity_load(d, cert, key, err));
  snprintf(path, sizeof(path), "%s/site.db", d->dir);
  XF_GUARD(xf_site_registry_open(path, &d->reg, err));
  XF_GUARD(open_backend(d, err));
  XF_GUARD(xf_site_sa_new(SA_SLOTS, &d->sa, err));
  XF_GUARD(xf_site_tasks_new(XF_SITE_TASKS_MAX, &d->set, err));
  offer_env_init(d);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  xf_rng_seed(&d->jitter, (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20),
              (uint64_t)getpid());
  d->backoff_ms = XF_SITE_BACKOFF_MIN_MS;
  return XF_OK;
}

xf_err xf_site_daemon_run(const xf_site_daemon_opts *opts, xf_errctx *err) {
  daemon_t *d = xf_calloc(1, sizeof(*d));
  XF_ENSURE(d, err, XF_ENOMEM, "cannot allocate the site daemon");
  xf_err rc = XF_OK;
  bool loop_ready = false;
  if ((rc = daemon_start(d, opts, err)) != XF_OK) goto out;
  if (uv_loop_init(&d->loop) != 0) {
    rc = xf_fail(err, XF_EIO, "cannot start the event loop");
    goto out;
  }
  loop_ready = true;
  uv_timer_init(&d->loop, &d->redial);
  d->redial.data = d;
  uv_signal_init(&d->loop, &d->sigterm);
  uv_signal_init(&d->loop, &d->sigint);
  uv_signal_init(&d->loop, &d->sighup);
  d->sigterm.data = d->sigint.data = d->sighup.data = d;
  uv_signal_start(&d->sigterm, on_signal, SIGTERM);
  uv_signal_start(&d->sigint, on_signal, SIGINT);
  uv_signal_start(&d->sighup, on_signal, SIGHUP);
  if ((rc = xf__site_worker_init(d, err)) != XF_OK) {
    daemon_stop(d, "none (the training thread could not start)");
    uv_run(&d->loop, UV_RUN_DEFAULT);
    goto out;
  }
  XF_INFO("site_starting", "site=%s region=%s coordinator=%s backend=%s threads=%d dir=%s",
          d->cfg.site, d->cfg.region, d->cfg.coordinator, xf_backend_name(d->backend),
          xf_backend_threads(d->backend), d->dir);
  if ((rc = xf__site_metrics_start(d, opts, err)) != XF_OK) {
    daemon_stop(d, "none (the metrics endpoint could not start)");
    uv_run(&d->loop, UV_RUN_DEFAULT);
    goto out;
  }
  start_resolve(d);
  /* Configured, identity and backend checked, dialing: ready. A site that
   * waits for its coordinator is up; STATUS says whether a session is open. */
  xf_notify_start(&d->notify, &d->loop);
  xf_notify_ready("site %s: dialing %s", d->cfg.site, d->cfg.coordinator);
  uv_run(&d->loop, UV_RUN_DEFAULT);
  XF_INFO("site_stopped", "site=%s", d->cfg.site);
out:
  xf__site_worker_join(d);
  if (loop_ready) {
    /* Nothing is left on the loop once uv_run returns: the handles were
     * closed by daemon_stop and the worker handed its task back. */
    int lrc = uv_loop_close(&d->loop);
    if (lrc != 0) XF_WARN("loop_not_empty", "reason=\"%s\"", uv_strerror(lrc));
  }
  for (int i = 0; d->set && i < xf_site_tasks_count(d->set); i++)
    xf__site_task_free(xf_site_task_user(xf_site_tasks_at(d->set, i)));
  xf_site_tasks_free(d->set);
  xf__site_cache_free(&d->cache);
  xf_backend_close(d->backend);
  xf_site_sa_free(d->sa);
  sa_identity_free(d);
  xf_site_registry_close(d->reg);
  xf_tls_free(d->tls);
  xf_free(d);
  return rc;
}
