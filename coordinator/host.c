/* SPDX-License-Identifier: Apache-2.0 */
/* Job runs: the daemon's side of the job machine, for the global
 * coordinator and a regional aggregator alike. Its actions become frames,
 * journal writes and audit rows; the model, the aggregator and the commit
 * live here (frames from sites and regional aggregators become the
 * machine's events in host_frames.c). Nothing here decides a job's phase:
 * the machine does (coordinator/jobmachine.h, docs/coordinator.md). A run's
 * fields are these two files' alone (coordinator/host_internal.h); the
 * other daemon files ask through daemon_internal.h's host.c section. */
#include <inttypes.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/commit.h"
#include "coordinator/daemon_internal.h"
#include "coordinator/host_internal.h"
#include "coordinator/schedule.h"
#include "coordinator/sawire.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"

/* Whether the last journal write failed: /healthz answers 503 until one
 * succeeds again. One daemon per process, so one flag. */
static bool xf__journal_failing;

bool xf__journal_broken(void) { return xf__journal_failing; }

void xf__journal_check(xf_err rc, const char *doing, const xf_errctx *err) {
  xf__journal_failing = rc != XF_OK;
  if (rc != XF_OK) XF_ERROR("journal_failed", "doing=%s reason=\"%s\"", doing, err->msg);
}


/* ---- what a run is, for the other files ------------------------------------------------------ */

xf__coord *xf__run_coord(const xf__run *run) { return run->co; }
const char *xf__run_id(const xf__run *run) { return run->id_text; }
xf_jobm *xf__run_machine(const xf__run *run) { return run->m; }
const xf_jobspec *xf__run_spec(const xf__run *run) { return &run->spec; }
size_t xf__run_n_params(const xf__run *run) { return run->n_params; }
uint32_t xf__run_model_round(const xf__run *run) { return run->model_round; }
xf__relay *xf__run_relay(const xf__run *run) { return run->relay; }
bool xf__run_over(const xf__run *run) { return run->over; }
xf_aggregator *xf__run_aggregator(const xf__run *run) { return run->agg; }
const uint8_t *xf__run_seal_key(const xf__run *run) { return run->seal_sk; }
const xf_admission *xf__run_plan(const xf__run *run) { return run->has_plan ? &run->plan : NULL; }
xf__takes *xf__run_takes(xf__run *run) { return &run->takes; }
const xf__takes *xf__run_takes_const(const xf__run *run) { return &run->takes; }
xf__run_clock *xf__run_clock_of(xf__run *run) { return &run->clock; }
xf__run *xf__runs_first(xf__coord *co) { return *xf__coord_runs(co); }
xf__run *xf__run_next(const xf__run *run) { return run->next; }

const char *xf__run_refused(const xf__run *run, uint32_t *round) {
  *round = run->refused_round;
  return run->refused;
}

xf__run *xf__run_of_job(xf__coord *co, int64_t id) {
  for (xf__run *r = *xf__coord_runs(co); r; r = r->next)
    if (!r->relay && !r->over && r->id == id) return r;
  return NULL;
}

xf__run *xf__run_relay_of(xf__coord *co, const char *job) {
  for (xf__run *r = *xf__coord_runs(co); r; r = r->next)
    if (r->relay && strcmp(r->id_text, job) == 0) return r;
  return NULL;
}

size_t xf__runs_active(xf__coord *co) {
  size_t n = 0;
  for (const xf__run *r = *xf__coord_runs(co); r; r = r->next)
    if (!r->over) n++;
  return n;
}

void xf__runs_free(xf__coord *co) {
  xf__run **runs = xf__coord_runs(co);
  while (*runs) {
    xf__run *run = *runs;
    *runs = run->next;
    xf__run_free(run);
  }
}

void xf__run_end(xf__run *run, const char *why) {
  xf_errctx err = {0};
  if (xf_jobm_cancel(run->m, why, xf__now(), &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
  xf__run_actions(run);
  run->over = true;
}

/* ---- model files -------------------------------------------------------------------------------- */

/* The model file sites are offered and its parameter digest: the job's
 * model as the downlink compression stores it (the float32 file itself
 * when there is none). Called whenever run->mf changes. */
static xf_err refresh_offer(xf__run *run, xf_errctx *err) {
  xf__model_file_unref(run->offer_mf);
  run->offer_mf = NULL;
  xf_job_downlink dl = run->spec.compression.downlink;
  if (dl == XF_JOB_DOWNLINK_NONE) {
    run->offer_mf = xf__model_file_ref(run->mf);
    run->offer_digest = run->params_digest;
    return XF_OK;
  }
  return xf__model_file_make_as(run->model, run->params,
                                dl == XF_JOB_DOWNLINK_BF16 ? XF_CHECKPOINT_BF16
                                                           : XF_CHECKPOINT_F16,
                                &run->offer_mf, &run->offer_digest, err);
}

static xf_err set_model(xf__run *run, xf_errctx *err) {
  xf__model_file *mf = NULL;
  xf_digest params_digest; /* hashed once, for the file's header */
  XF_GUARD(xf__model_file_make_as(run->model, run->params, XF_CHECKPOINT_F32, &mf,
                                  &params_digest, err));
  xf__model_file_unref(run->mf);
  run->mf = mf;
  run->params_digest = params_digest;
  return refresh_offer(run, err);
}

/* ---- runs ---------------------------------------------------------------------------------------- */

static void free_seal(xf__run *run) {
  if (run->seal_sk) sodium_free(run->seal_sk);
  run->seal_sk = NULL;
}

void xf__run_free(xf__run *run) {
  if (!run) return;
  /* A job's end is where the trail is made whole in the main file: a copy
   * of it alone then holds every row up to here (policy/audit.h). */
  xf_errctx err = {0};
  if (run->co && xf__coord_audit(run->co) &&
      xf_audit_keeper_mark(xf__coord_audit(run->co), xf__now(), &err) != XF_OK)
    XF_WARN("audit_checkpoint_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
  xf__takes_free(run);
  free_seal(run);
  xf_jobm_free(run->m);
  xf_aggregator_free(run->agg);
  xf_server_opt_free(run->opt);
  xf_model_free(run->model);
  xf_free(run->params);
  xf_free(run->spec_json);
  xf__model_file_unref(run->mf);
  xf__model_file_unref(run->offer_mf);
  xf_admission_free(&run->plan);
  xf__relay_free(run->relay);
  xf_free(run);
}

xf__run *xf__run_by_id(xf__coord *co, const char *job_id) {
  if (!job_id) return NULL;
  for (xf__run *r = *xf__coord_runs(co); r; r = r->next)
    if (!r->over && strcmp(r->id_text, job_id) == 0) return r;
  return NULL;
}

/* The peer that carries `carrier`'s traffic, or NULL when it is away. */
static xf__peer *peer_of(xf__coord *co, uint64_t carrier) {
  xf__site *s = xf__site_find(co, carrier);
  return s && s->peer && xf__peer_conn(s->peer) ? s->peer : NULL;
}

static const char *name_of(xf__coord *co, uint64_t id) {
  const char *n = xf__site_name(co, id);
  return n ? n : "?";
}

/* Names of sites[] (pointers into the site table; owned array). */
static char **names_of(xf__coord *co, const uint64_t *sites, size_t n) {
  char **v = xf_calloc(n ? n : 1, sizeof(char *));
  if (!v) return NULL;
  for (size_t i = 0; i < n; i++) v[i] = (char *)name_of(co, sites[i]);
  return v;
}

/* ---- the rounds a run's frames name ----------------------------------------------------------------- */

/* A relay's machine counts attempts of its own; its sites and upstream know
 * the task's round and attempt. */
static uint32_t task_round(const xf__run *run, uint32_t round) {
  return run->relay ? xf__relay_task(run->relay)->round : round;
}

static uint32_t task_attempt(const xf__run *run, uint32_t attempt) {
  return run->relay ? xf__relay_task(run->relay)->attempt : attempt;
}

uint32_t xf__run_round(const xf__run *run) { return task_round(run, xf_jobm_round(run->m)); }

uint32_t xf__run_attempt(const xf__run *run) { return task_attempt(run, xf_jobm_attempt(run->m)); }

/* ---- plans ----------------------------------------------------------------------------------------- */

/* Admits the run's job now and gives the machine the plan. */
static void run_plan(xf__run *run) {
  xf__coord *co = run->co;
  xf_errctx err = {0};
  xf_admission plan;
  xf_err rc;
  if (run->relay) {
    /* A regional aggregator plans over its own sites: the residency plan
     * came with the task and the sites check it again. */
    xf__federation f;
    rc = xf__federation_make(co, &f);
    if (rc == XF_OK) {
      f.fed.residency_on = false;
      rc = xf_admission_decide(&run->spec, NULL, &f.fed, &plan, &err);
      xf__federation_free(&f);
    }
  } else {
    rc = xf__admit(co, &run->spec, &plan, NULL, &err);
  }
  if (rc != XF_OK) {
    XF_ERROR("admission_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
    return;
  }
  xf_admission_free(&run->plan);
  run->plan = plan;
  run->has_plan = true;
  run->dirty = false;
  run->planned_at = xf__now();
  run->planned_round = xf_jobm_round(run->m);
  run->planned_attempt = xf_jobm_attempt(run->m);
  run->planned_phase = xf_jobm_get_phase(run->m);
  if (xf_jobm_plan(run->m, &run->plan, xf__now(), &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
}

/* Whether the machine's wish for a plan is new enough to make one: it moved
 * on since the last, the federation or policy changed, or time passed. */
static bool plan_due(const xf__run *run) {
  if (!xf_jobm_wants_plan(run->m)) return false;
  if (!run->has_plan || run->dirty) return true;
  if (xf_jobm_round(run->m) != run->planned_round ||
      xf_jobm_attempt(run->m) != run->planned_attempt ||
      xf_jobm_get_phase(run->m) != run->planned_phase)
    return true;
  return xf__now() - run->planned_at >= XF_COORD_REPLAN_S;
}

/* ---- sending --------------------------------------------------------------------------------------- */

static void send_env(xf__coord *co, uint64_t carrier, Xfed__Envelope *env) {
  xf__peer *p = peer_of(co, carrier);
  if (p) (void)xf__send(p, env);
}

/* The attempt's sealing key: without secure aggregation updates come sealed
 * to it, so that nothing between the sender and this aggregator reads them. */
static xf_err ensure_seal(xf__run *run, uint32_t round, uint32_t attempt) {
  if (run->seal_sk && run->seal_round == round && run->seal_attempt == attempt) return XF_OK;
  free_seal(run);
  run->seal_sk = sodium_malloc(XF_SEAL_SECRETKEYBYTES);
  if (!run->seal_sk) return XF_ENOMEM;
  xf_err rc = xf_seal_keypair(run->seal_pk, run->seal_sk);
  if (rc != XF_OK) {
    free_seal(run);
    return rc;
  }
  run->seal_round = round;
  run->seal_attempt = attempt;
  return XF_OK;
}

/* The residency plan a task carries: the global coordinator's decision for
 * the carrier's group, or a regional's task passed on. */
static bool fill_residency(xf__run *run, uint64_t carrier, Xfed__Residency *res, char ***names) {
  xf__coord *co = run->co;
  *names = NULL;
  xfed__residency__init(res);
  if (run->relay) {
    const xf__upstream_task *up = xf__relay_task(run->relay);
    if (!up->has_residency) return false;
    res->policy_version = up->policy_version;
    res->coordinator_region = (char *)up->coordinator_region;
    res->aggregator_region = (char *)xf__coord_cfg(co)->region;
    res->path = (char *)up->path;
    res->rule = (char *)up->rule;
    res->min_cohort = up->min_cohort;
    res->require_secagg = up->require_secagg;
    res->has_max_epsilon = up->has_max_epsilon;
    res->max_epsilon = up->max_epsilon;
    res->epsilon = up->epsilon;
    return true;
  }
  if (!xf__residency_on(co) || !run->has_plan) return false;
  const xf_admission *a = &run->plan;
  const xf_admit_group *g = NULL;
  const xf_admit_site *self = xf_admission_site(a, carrier);
  for (size_t i = 0; i < a->n_groups && !g; i++)
    if (self ? a->groups[i].via_id == 0 : a->groups[i].via_id == carrier) g = &a->groups[i];
  res->policy_version = a->policy_version;
  res->coordinator_region = (char *)xf__coord_cfg(co)->region;
  res->aggregator_region = (char *)xf__coord_cfg(co)->region;
  bool regional = g && strcmp(g->path, "regional") == 0 && g->via_id == carrier;
  res->path = regional ? "regional" : "direct";
  res->rule = g ? (char *)g->rule : "default";
  if (self && !g) res->rule = (char *)self->rule;
  res->min_cohort = regional && g->min_cohort ? g->min_cohort : 1;
  res->require_secagg = regional && g->require_secagg;
  res->has_max_epsilon = regional && g->has_max_epsilon;
  res->max_epsilon = res->has_max_epsilon ? g->max_epsilon : 0;
  if (self && self->has_max_epsilon) { /* a site straight to us: its rule's cap */
    res->has_max_epsilon = true;
    res->max_epsilon = self->max_epsilon;
    res->rule = (char *)self->rule;
  }
  const xf_privacy_spec *pv = &run->spec.privacy;
  res->epsilon = pv->mode != XF_PRIVACY_NONE && pv->has_target_epsilon ? pv->target_epsilon : 0;
  if (!self) { /* a regional: the sites behind it that may take part */
    size_t n = 0;
    for (size_t i = 0; i < a->n_sites; i++) n += a->sites[i].eligible && a->sites[i].via_id == carrier;
    char **v = xf_calloc(n ? n : 1, sizeof(char *));
    if (v) {
      for (size_t i = 0; i < a->n_sites; i++)
        if (a->sites[i].eligible && a->sites[i].via_id == carrier)
          v[res->n_sites++] = (char *)a->sites[i].name;
      res->sites = v;
      *names = v;
    }
  }
  return true;
}

/* TaskOffer and the model stream to carrier. */
static void send_offer(xf__run *run, const xf_jobm_action *a, bool evaluate) {
  xf__coord *co = run->co;
  xf__peer *p = peer_of(co, a->carrier);
  if (!p) return; /* away: it is offered again when it comes back */
  Xfed__TaskOffer o = XFED__TASK_OFFER__INIT;
  o.job_id = run->id_text;
  o.round = evaluate ? run->model_round : task_round(run, a->round);
  o.attempt = evaluate ? 0 : task_attempt(run, a->attempt);
  o.deadline_unix_ms = (uint64_t)(a->deadline * 1000.0);
  o.answer_by_unix_ms = (uint64_t)(a->answer_by * 1000.0);
  o.model_digest.data = run->offer_digest.bytes;
  o.model_digest.len = XF_DIGEST_BYTES;
  o.params_json = run->spec_json;
  o.evaluate_only = evaluate;
  o.model_round = run->model_round;
  o.hold = !evaluate;
  if (!a->resend || !run->model_stream) run->model_stream = xf__stream_id(co, false);
  o.model_stream_id = run->model_stream;
  o.update_stream_id = evaluate ? 0 : run->model_stream | 1u;
  if (!evaluate && ensure_seal(run, a->round, a->attempt) == XF_OK) {
    o.seal_key.data = run->seal_pk;
    o.seal_key.len = XF_SEAL_PUBLICKEYBYTES;
  }
  char **cohort = a->n_sites ? names_of(co, a->sites, a->n_sites) : NULL;
  if (cohort) {
    o.cohort = cohort;
    o.n_cohort = a->n_sites;
  }
  Xfed__Residency res;
  char **names = NULL;
  if (fill_residency(run, a->carrier, &res, &names)) o.residency = &res;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_OFFER;
  env.task_offer = &o;
  xf_err sent = xf__send(p, &env);
  xf_free(cohort);
  xf_free(names);
  if (sent != XF_OK) return;
  size_t model_len = 0;
  (void)xf__model_file_bytes(run->offer_mf, &model_len);
  xf_tensor_desc d = {.stream_id = o.model_stream_id,
                      .kind = XFED__TENSOR_BEGIN__KIND__MODEL,
                      .dtype = XFED__TENSOR_BEGIN__DTYPE__U8,
                      .element_count = model_len,
                      .job_id = run->id_text,
                      .round = o.round};
  xf__stream_opts so = {.attempt = o.attempt, .job = run->id_text};
  (void)xf__stream_queue(p, &d, run->offer_mf, NULL, model_len, 0, &so);
  XF_INFO("task_sent", "job=%s round=%u attempt=%u to=%s sites=%zu eval=%d resend=%d "
          "model_bytes=%zu",
          run->id_text, (unsigned)o.round, (unsigned)o.attempt, name_of(co, a->carrier),
          a->n_sites ? a->n_sites : 1, evaluate ? 1 : 0, a->resend ? 1 : 0, model_len);
}

static void send_go(xf__run *run, const xf_jobm_action *a) {
  Xfed__TaskGo g = XFED__TASK_GO__INIT;
  g.job_id = run->id_text;
  g.round = task_round(run, a->round);
  g.attempt = task_attempt(run, a->attempt);
  Xfed__SecAggSetup su = XFED__SEC_AGG_SETUP__INIT;
  if (a->has_secagg) {
    const xf_update_secagg *s = &a->secagg;
    su.n = s->params.n;
    su.index = s->index;
    su.threshold = s->params.threshold;
    su.bits = s->params.bits;
    su.degree = s->params.degree;
    su.graph_seed.data = (uint8_t *)s->params.graph_seed;
    su.graph_seed.len = sizeof(s->params.graph_seed);
    su.step = s->fixed.step;
    su.bound = s->fixed.bound;
    su.scale = s->scale;
    su.subset = s->subset;
    su.subset_seed = s->subset_seed;
    /* The cohort's names, which each site checks its peers' certificates
     * against. */
    su.cohort = names_of(run->co, a->sites, a->n_sites);
    su.n_cohort = su.cohort ? a->n_sites : 0;
    g.secagg = &su;
  }
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_GO;
  env.task_go = &g;
  send_env(run->co, a->carrier, &env);
  xf_free(su.cohort);
}

static void send_cancel(xf__run *run, uint64_t carrier, uint32_t round, uint32_t attempt,
                        const char *why) {
  xf__take_drop(run, carrier);
  xf__peer *p = peer_of(run->co, carrier);
  if (!p) return;
  xf__stream_drop(p, run->id_text);
  Xfed__TaskCancel tc = XFED__TASK_CANCEL__INIT;
  tc.job_id = run->id_text;
  tc.round = round;
  tc.attempt = attempt;
  tc.reason = (char *)why;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_CANCEL;
  env.task_cancel = &tc;
  (void)xf__send(p, &env);
}

/* n byte strings of XF_SECAGG_SIG_BYTES each, back to back in sigs, as
 * protobuf bytes fields pointing into them (xf_free the array). */
static ProtobufCBinaryData *sig_fields(const uint8_t *sigs, size_t n) {
  ProtobufCBinaryData *v = xf_calloc(n ? n : 1, sizeof(*v));
  for (size_t i = 0; v && i < n; i++) {
    v[i].data = (uint8_t *)sigs + i * XF_SECAGG_SIG_BYTES;
    v[i].len = XF_SECAGG_SIG_BYTES;
  }
  return v;
}

static void send_sa(xf__run *run, const xf_jobm_action *a) {
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  Xfed__SecAggKeys k = XFED__SEC_AGG_KEYS__INIT;
  Xfed__SecAggRouted r = XFED__SEC_AGG_ROUTED__INIT;
  Xfed__SecAggCheck c = XFED__SEC_AGG_CHECK__INIT;
  Xfed__SecAggUnmask u = XFED__SEC_AGG_UNMASK__INIT;
  ProtobufCBinaryData *cts = NULL, *certs = NULL;
  ProtobufCBinaryData *sigs = sig_fields(a->sigs, a->n_sigs);
  if (!sigs) return;
  /* A relay's machine makes one attempt of its own; its sites hold the
   * upstream task's round and attempt. */
  uint32_t round = task_round(run, a->round);
  uint32_t attempt = task_attempt(run, a->attempt);
  if (a->kind == XF_JOBM_SA_KEYS) {
    k.job_id = run->id_text;
    k.round = round;
    k.attempt = attempt;
    k.adverts.data = (uint8_t *)a->blob;
    k.adverts.len = a->blob_len;
    /* Each index's signature and certificate; a site that sent no keys has
     * empty ones. */
    certs = xf_calloc(a->n_sigs ? a->n_sigs : 1, sizeof(*certs));
    if (!certs) {
      xf_free(sigs);
      return;
    }
    for (size_t i = 0, at = 0; i < a->n_sigs; at += a->cert_lens[i], i++) {
      certs[i].data = (uint8_t *)a->certs + at;
      certs[i].len = a->cert_lens[i];
      if (!a->cert_lens[i]) sigs[i].len = 0;
    }
    k.n_signatures = a->n_sigs;
    k.signatures = sigs;
    k.n_certificates = a->n_sigs;
    k.certificates = certs;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_KEYS;
    env.secagg_keys = &k;
  } else if (a->kind == XF_JOBM_SA_ROUTED) {
    cts = xf_calloc(a->n_from ? a->n_from : 1, sizeof(*cts));
    if (!cts) {
      xf_free(sigs);
      return;
    }
    for (size_t i = 0; i < a->n_from; i++) {
      cts[i].data = (uint8_t *)a->blob + i * XF_SECAGG_SHARE_BYTES;
      cts[i].len = XF_SECAGG_SHARE_BYTES;
    }
    r.n_signatures = a->n_sigs;
    r.signatures = sigs;
    r.job_id = run->id_text;
    r.round = round;
    r.attempt = attempt;
    r.n_u2 = a->n_u;
    r.u2 = (uint32_t *)a->u;
    r.n_from = a->n_from;
    r.from = (uint32_t *)a->from;
    r.n_ciphertexts = a->n_from;
    r.ciphertexts = cts;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_ROUTED;
    env.secagg_routed = &r;
  } else if (a->kind == XF_JOBM_SA_CHECK) {
    c.job_id = run->id_text;
    c.round = round;
    c.attempt = attempt;
    c.n_u3 = a->n_u;
    c.u3 = (uint32_t *)a->u;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_CHECK;
    env.secagg_check = &c;
  } else {
    u.job_id = run->id_text;
    u.round = round;
    u.attempt = attempt;
    u.n_u3 = a->n_u;
    u.u3 = (uint32_t *)a->u;
    u.n_signers = a->n_from;
    u.signers = (uint32_t *)a->from;
    u.n_signatures = a->n_sigs;
    u.signatures = sigs;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_UNMASK;
    env.secagg_unmask = &u;
  }
  send_env(run->co, a->carrier, &env);
  xf_free(cts);
  xf_free(certs);
  xf_free(sigs);
}

/* ---- the commit ------------------------------------------------------------------------------------ */

/* The secure sum of the attempt's direct sites, taken from the machine
 * (NULL when it has none). */
static float *take_secure_sum(xf__run *run, uint64_t *weight) {
  float *mean = NULL;
  uint32_t sites = 0;
  *weight = 0;
  if (xf_jobm_take_secure_mean(run->m, &mean, weight, &sites))
    XF_INFO("secagg_unmasked", "job=%s round=%u attempt=%u sites=%u weight=%" PRIu64,
            run->id_text, (unsigned)xf__run_round(run),
            (unsigned)xf_jobm_attempt(run->m), (unsigned)sites, *weight);
  return mean;
}

/* A region's aggregate (coordinator/commit.h). *out is n_params floats
 * (xf_free). */
static xf_err form_mean(xf__run *run, float **out, uint64_t *weight, xf_errctx *err) {
  uint64_t sa_weight = 0;
  float *sa_mean = take_secure_sum(run, &sa_weight);
  return xf_commit_aggregate(run->agg, sa_mean, sa_weight, run->n_params, out, weight, err);
}

/* Stores a commit's model file and optimizer state as blobs, takes the
 * model file over as *mf (the bytes are hashed once, by the blob store: a
 * blob's name is the BLAKE2b of its bytes, which is also the file's stream
 * digest) and journals the round's commit. */
static xf_err journal_commit(xf__run *run, xf_commit_result *c, xf_digest *model_blob,
                             xf__model_file **mf, xf_errctx *err) {
  xf__coord *co = run->co;
  xf_digest opt_blob;
  XF_GUARD(xf_blob_put(xf__coord_blobs(co), c->model, c->model_len, model_blob, err));
  XF_GUARD(xf_blob_put(xf__coord_blobs(co), c->opt_state, c->opt_len, &opt_blob, err));
  XF_GUARD(xf__model_file_adopt(&c->model, c->model_len, model_blob, mf, err));
  xf_err rc = xf_journal_round_commit(xf__coord_db(co), run->id, xf_jobm_round(run->m),
                                      xf_jobm_attempt(run->m), model_blob, &opt_blob, xf__now(),
                                      err);
  if (rc != XF_OK) {
    xf__model_file_unref(*mf);
    *mf = NULL;
  }
  return rc;
}

/* After a commit: the job's checkpoints beyond checkpoint_retention go. A
 * failure keeps them on disk (the next commit tries again) and is logged. */
static void prune_checkpoints(xf__run *run) {
  xf__coord *co = run->co;
  uint32_t keep = xf__coord_cfg(co)->checkpoint_retention;
  if (keep == 0) return;
  xf_retention_result r = {0};
  xf_errctx err = {0};
  if (xf_retention_prune(xf__coord_db(co), xf__coord_blobs(co), run->id, keep, xf__now(), &r,
                         &err) != XF_OK)
    XF_WARN("checkpoints_not_pruned", "job=%s reason=\"%s\"", run->id_text, err.msg);
  else if (r.rounds || r.blobs)
    XF_INFO("checkpoints_pruned", "job=%s rounds=%u blobs=%u bytes=%" PRIu64, run->id_text,
             r.rounds, r.blobs, r.bytes);
}

/* The global role's commit (coordinator/commit.h), stored and journaled;
 * the run then offers the new model. */
static xf_err commit_global(xf__run *run, uint32_t sites, xf_errctx *err) {
  xf__coord *co = run->co;
  xf_commit_round in = {.privacy = &run->spec.privacy,
                        .model = run->model,
                        .noise = xf__coord_noise(co),
                        .sites = sites,
                        .agg = run->agg};
  in.secure_mean = take_secure_sum(run, &in.secure_weight);
  xf_commit_result c;
  XF_GUARD(xf_commit_global(&in, run->opt, run->params, run->n_params, &c, err));
  xf_digest model_blob;
  xf__model_file *mf = NULL;
  xf_err rc = journal_commit(run, &c, &model_blob, &mf, err);
  uint64_t weight = c.weight;
  xf_digest params_digest = c.params_digest;
  xf_commit_result_free(&c);
  if (rc != XF_OK) {
    xf__model_file_unref(mf);
    return rc;
  }
  xf__model_file_unref(run->mf);
  run->mf = mf;
  run->model_round = xf_jobm_round(run->m);
  run->params_digest = params_digest;
  xf_errctx note_err = {0};
  xf__journal_check(
      xf_journal_model_digest_note(xf__coord_db(co), &model_blob, &run->params_digest, &note_err),
      "model_digest", &note_err);
  prune_checkpoints(run);
  XF_GUARD(refresh_offer(run, err));
  char hex[XF_DIGEST_HEX];
  xf_digest_hex(&run->params_digest, hex);
  XF_INFO("round_committed", "job=%s round=%u reports=%u weight=%" PRIu64 " model=%s",
          run->id_text, (unsigned)run->model_round, (unsigned)sites, weight, hex);
  return XF_OK;
}

static void do_commit(xf__run *run, const xf_jobm_action *a) {
  xf_errctx err = {0};
  xf_err rc;
  if (run->relay) {
    float *mean = NULL;
    uint64_t weight = 0;
    xf__relay_set_aggregate(run->relay, NULL, 0);
    rc = form_mean(run, &mean, &weight, &err);
    xf__relay_set_aggregate(run->relay, mean, weight);
    if (rc == XF_OK)
      XF_INFO("aggregate_made", "job=%s round=%u attempt=%u weight=%" PRIu64, run->id_text,
              (unsigned)xf__run_round(run), (unsigned)xf__run_attempt(run), weight);
  } else {
    rc = commit_global(run, (uint32_t)a->samples, &err);
  }
  xf_aggregator_free(run->agg);
  run->agg = NULL;
  xf__takes_clear(run);
  double now = xf__now();
  if (rc != XF_OK) {
    XF_WARN("round_not_committed", "job=%s round=%u reason=\"%s\"", run->id_text,
            (unsigned)a->round, err.msg);
    char why[600];
    snprintf(why, sizeof(why), "%s", err.msg);
    if (xf_jobm_commit_failed(run->m, why, now, &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
    return;
  }
  xf__stats_round(run, true);
  if (xf_jobm_committed(run->m, now, &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
}

/* ---- audit and journal ------------------------------------------------------------------------------ */

static void audit_opened(xf__run *run, const xf_jobm_action *a) {
  xf__coord *co = run->co;
  json_t *o = json_pack("{s:s,s:s,s:I,s:I,s:s,s:I}", "job", run->id_text, "when", "round",
                        "round", (json_int_t)a->round, "attempt", (json_int_t)a->attempt,
                        "coordinator_region", xf__coord_cfg(co)->region, "cohort",
                        (json_int_t)a->n_sites);
  if (run->has_plan) {
    char *text = NULL;
    xf_errctx err = {0};
    if (xf_admission_json(&run->plan, &run->spec, &text, &err) == XF_OK) {
      json_object_set_new(o, "admission", json_loads(text, 0, NULL));
      xf_free(text);
    }
  }
  if (!xf__residency_on(co)) json_object_set_new(o, "policy", json_string("off"));
  xf__audit(co, "decision", run->id_text, o);
}

static void journal_fail(xf__run *run, const xf_jobm_action *a) {
  xf_errctx err = {0};
  if (xf_journal_job_fail(xf__coord_db(run->co), run->id, a->round, a->attempt, a->note, xf__now(),
                          &err) != XF_OK)
    xf__journal_state(run->co, run->id, XF_JOB_FAILED, a->note);
}

/* ---- the machine's actions --------------------------------------------------------------------------- */

/* An attempt opened: a fresh aggregator for its cohort, its row and its
 * audit (global role). */
static void on_opened(xf__run *run, const xf_jobm_action *a) {
  xf__coord *co = run->co;
  xf_errctx err = {0};
  xf_aggregator_free(run->agg);
  run->agg = NULL;
  xf__takes_clear(run);
  if (xf_aggregator_create(&run->spec.strategy, run->n_params, a->n_sites ? a->n_sites : 1,
                           &run->agg, &err) != XF_OK)
    XF_ERROR("aggregator_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
  run->agg_round = a->round;
  run->agg_attempt = a->attempt;
  XF_INFO("round_opened", "job=%s round=%u attempt=%u sites=%zu", run->id_text,
          (unsigned)task_round(run, a->round), (unsigned)a->attempt, a->n_sites);
  if (!run->relay) {
    xf__journal_check(xf_journal_round_open(xf__coord_db(co), run->id, a->round, a->attempt, a->sites,
                                        a->n_sites, a->deadline, xf__now(), &err),
                  "round_open", &err);
    audit_opened(run, a);
  }
}

/* A carrier's update is not taken: its stream aborted, the refusal
 * audited, logged, counted and answered, and its task cancelled. */
static void on_discard(xf__run *run, const xf_jobm_action *a) {
  xf__coord *co = run->co;
  xf__take_drop(run, a->carrier);
  xf__peer *p = peer_of(co, a->carrier);
  if (a->refusal == XF_JOBM_REFUSED_POLICY)
    xf__audit(co, "refused_task", run->id_text,
              json_pack("{s:s,s:I,s:I,s:s,s:s,s:s}", "job", run->id_text, "round",
                        (json_int_t)a->round, "attempt", (json_int_t)a->attempt, "from",
                        name_of(co, a->carrier), "kind", "regional_aggregate", "why", a->note));
  XF_WARN("update_refused", "job=%s from=%s reason=\"%s\"", run->id_text,
          name_of(co, a->carrier), a->note);
  xf__stats *st = xf__coord_stats(co);
  st->updates_refused[(unsigned)a->refusal <= XF_JOBM_REFUSED_BUSY ? a->refusal : 0]++;
  if (p)
    xf_session_send_error(xf__peer_conn(p),
                          a->refusal == XF_JOBM_REFUSED_POLICY ? XF_EDENIED : XF_EINVAL,
                          "job %s: %s", run->id_text, a->note);
  send_cancel(run, a->carrier, task_round(run, a->round), task_attempt(run, a->attempt),
              a->note);
}

static void on_participant(xf__run *run, const xf_jobm_action *a) {
  xf__coord *co = run->co;
  if (a->state == XF_PARTICIPANT_DROPPED)
    XF_WARN("site_dropped", "job=%s round=%u attempt=%u site=%s", run->id_text,
            (unsigned)a->round, (unsigned)a->attempt, name_of(co, a->site));
  if (!run->relay) {
    xf_errctx err = {0};
    xf_journal_participant jp = {.site = a->site, .state = a->state, .samples = a->samples};
    xf__journal_check(xf_journal_participant_set(xf__coord_db(co), run->id, a->round, a->attempt, &jp,
                                             xf__now(), &err),
                  "participant", &err);
  }
}

static void on_retry(xf__run *run, const xf_jobm_action *a) {
  XF_WARN("round_retried", "job=%s round=%u attempt=%u reason=\"%s\"", run->id_text,
          (unsigned)a->round, (unsigned)a->attempt, a->note);
  xf__stats_round(run, false);
  xf_aggregator_free(run->agg);
  run->agg = NULL;
  xf__takes_clear(run);
  run->refused[0] = '\0'; /* the retry's note holds them; the next attempt is another */
  if (!run->relay) {
    xf_errctx err = {0};
    xf__journal_check(xf_journal_round_retry(xf__coord_db(run->co), run->id, a->round, a->attempt,
                                         a->note, xf__now(), &err),
                  "round_retry", &err);
  }
}

static void on_pause(xf__run *run, const xf_jobm_action *a) {
  XF_WARN("job_paused", "job=%s reason=\"%s\"", run->id_text, a->note);
  xf__audit(run->co, "job", run->id_text,
            json_pack("{s:s,s:I,s:s}", "event", "paused", "round", (json_int_t)a->round, "why",
                      a->note));
  xf__journal_state(run->co, run->id, XF_JOB_PAUSED, a->note);
}

static void on_resume(xf__run *run) {
  XF_INFO("job_resumed", "job=%s policy_version=%" PRIu64, run->id_text,
          run->plan.policy_version);
  xf__audit(run->co, "job", run->id_text,
            json_pack("{s:s,s:I}", "event", "resumed", "policy_version",
                      (json_int_t)run->plan.policy_version));
  xf__journal_state(run->co, run->id, XF_JOB_RUNNING, NULL);
}

static void on_stop(xf__run *run, const xf_jobm_action *a) {
  XF_WARN("job_stopped", "job=%s reason=\"%s\"", run->id_text, a->note);
  if (!run->relay) xf__journal_state(run->co, run->id, XF_JOB_DONE, a->note);
  run->refused[0] = '\0'; /* why it stopped is what its message says */
}

static void on_fail(xf__run *run, const xf_jobm_action *a) {
  XF_ERROR("job_failed", "job=%s reason=\"%s\"", run->id_text, a->note);
  xf__stats_round(run, false);
  if (!run->relay) journal_fail(run, a);
  run->over = true;
}

static void on_finish(xf__run *run) {
  XF_INFO("job_finished", "job=%s rounds=%u", run->id_text, (unsigned)run->model_round);
  if (!run->relay && run->refused[0]) {
    /* Done without the sites that refused: its message says who and why. */
    char msg[XF_JOBM_MSG_MAX + 64];
    snprintf(msg, sizeof(msg), "round %u went on without %s", (unsigned)run->refused_round,
             run->refused);
    xf__journal_state(run->co, run->id, XF_JOB_DONE, msg);
  }
  if (run->relay && xf__relay_task(run->relay)->evaluate_only) xf__upstream_eval_done(run->co, run);
  if (!run->relay) run->over = true;
}

/* A relay refuses upstream: one site's part, or the whole task (its
 * aggregate held back, or no cohort), which is audited. */
static void on_refuse_up(xf__run *run, const xf_jobm_action *a) {
  xf__coord *co = run->co;
  int reason = a->refusal == XF_JOBM_REFUSED_POLICY   ? XFED__TASK_REFUSAL__REASON__POLICY_DENIED
               : a->refusal == XF_JOBM_REFUSED_BUDGET ? XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED
               : a->refusal == XF_JOBM_REFUSED_TARGET ? XFED__TASK_REFUSAL__REASON__TARGET_REACHED
               : a->refusal == XF_JOBM_REFUSED_BUSY   ? XFED__TASK_REFUSAL__REASON__BUSY
                                                      : XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
  if (!a->site) {
    const xf__upstream_task *up = xf__relay_task(run->relay);
    xf__audit(co, "refused_task", run->id_text,
              json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:s}", "job", run->id_text, "round",
                        (json_int_t)up->round, "attempt", (json_int_t)up->attempt, "kind",
                        "regional_aggregate", "from", xf__coord_cfg(co)->region, "to",
                        up->coordinator_region, "why", a->note));
    XF_WARN("aggregate_held", "job=%s round=%u reason=\"%s\"", run->id_text,
            (unsigned)up->round, a->note);
  }
  xf__upstream_refuse(co, run, a->site, reason, a->note);
}

static void take_action(xf__run *run, const xf_jobm_action *a) {
  xf__coord *co = run->co;
  switch (a->kind) {
  case XF_JOBM_OPENED: on_opened(run, a); return;
  case XF_JOBM_OFFER: send_offer(run, a, false); return;
  case XF_JOBM_EVALUATE: send_offer(run, a, true); return;
  case XF_JOBM_GO: send_go(run, a); return;
  case XF_JOBM_CANCEL:
    send_cancel(run, a->carrier, task_round(run, a->round), task_attempt(run, a->attempt),
                a->note);
    return;
  case XF_JOBM_DISCARD: on_discard(run, a); return;
  case XF_JOBM_SA_KEYS:
  case XF_JOBM_SA_ROUTED:
  case XF_JOBM_SA_CHECK:
  case XF_JOBM_SA_UNMASK: send_sa(run, a); return;
  case XF_JOBM_PARTICIPANT: on_participant(run, a); return;
  case XF_JOBM_COMMIT: do_commit(run, a); return;
  case XF_JOBM_RETRY: on_retry(run, a); return;
  case XF_JOBM_PAUSE: on_pause(run, a); return;
  case XF_JOBM_RESUME: on_resume(run); return;
  case XF_JOBM_STOP: on_stop(run, a); return;
  case XF_JOBM_FAIL: on_fail(run, a); return;
  case XF_JOBM_FINISH: on_finish(run); return;
  case XF_JOBM_ACCEPT_UP: xf__upstream_accept(co, run, a->sites, a->n_sites); return;
  case XF_JOBM_REFUSE_UP: on_refuse_up(run, a); return;
  case XF_JOBM_FORWARD:
    xf__upstream_forward(co, run, a->sites, a->n_sites, a->weight, a->resend);
    return;
  }
}

void xf__run_actions(xf__run *run) {
  xf__stats_phase(run);
  for (int guard = 0; guard < 64 && !run->over; guard++) {
    size_t n;
    const xf_jobm_action *acts = xf_jobm_actions(run->m, &n);
    /* The list stays valid while no event reaches the machine; the commit
     * is an event (committed, commit_failed), so it goes last. */
    size_t commit = n;
    for (size_t i = 0; i < n && !run->over; i++) {
      if (acts[i].kind == XF_JOBM_COMMIT) {
        commit = i;
        continue;
      }
      take_action(run, &acts[i]);
    }
    bool again = false;
    if (commit < n && !run->over) {
      xf_jobm_action a = acts[commit];
      a.sites = NULL;
      a.n_sites = 0;
      take_action(run, &a); /* feeds committed / commit_failed: a new list */
      again = true;
    } else if (plan_due(run)) {
      run_plan(run);
      again = true;
    }
    xf__stats_phase(run);
    if (!again) break;
  }
  xf__intake_admit(run);
}

/* ---- sites coming and going, the tick ----------------------------------------------------------------- */

void xf__runs_link(xf__coord *co, xf__site *s, bool up) {
  double now = xf__now();
  for (xf__run *run = *xf__coord_runs(co); run; run = run->next) {
    if (run->over) continue;
    run->dirty = true;
    xf_errctx err = {0};
    /* A dropped link loses what the receiver held of the stream only until
     * the carrier resumes it: its take is kept. */
    if (xf_jobm_link(run->m, s->id, up, now, &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
    xf__run_actions(run);
  }
}

void xf__runs_dirty(xf__coord *co) {
  for (xf__run *run = *xf__coord_runs(co); run; run = run->next) {
    run->dirty = true;
    if (!run->over) xf__run_actions(run);
  }
}

static void activate_queued(xf__coord *co);

/* A run of job that is not over; NULL when none. */
static const xf__run *live_run_of(xf__coord *co, const char *job) {
  for (const xf__run *r = *xf__coord_runs(co); r; r = r->next)
    if (!r->over && strcmp(r->id_text, job) == 0) return r;
  return NULL;
}

void xf__runs_tick(xf__coord *co) {
  double now = xf__now();
  for (xf__run *run = *xf__coord_runs(co); run; run = run->next) {
    if (run->over) continue;
    xf_errctx err = {0};
    if (xf_jobm_tick(run->m, now, &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
    xf__run_actions(run);
    xf_jobm_phase ph = xf_jobm_get_phase(run->m);
    if (run->relay && (ph == XF_JOBM_DONE || ph == XF_JOBM_FAILED || ph == XF_JOBM_CANCELLED) &&
        now > xf__relay_task(run->relay)->deadline + 60)
      run->over = true; /* nothing more will be asked of it */
  }
  bool freed = false;
  for (xf__run **pp = xf__coord_runs(co); *pp;) {
    xf__run *run = *pp;
    if (!run->over) {
      pp = &run->next;
      continue;
    }
    *pp = run->next;
    /* A regional aggregator's relay superseded by its job's next task
     * (the next round, the evaluation) shares the job's id with the run
     * that took over: the job's streams are then the new run's (its model
     * going out to the sites, still queued behind the send budget) and
     * stay. */
    if (!live_run_of(co, run->id_text)) xf__peers_drop_job(co, run->id_text);
    xf__run_free(run);
    freed = true;
  }
  if (freed && !xf__coord_cfg(co)->regional) activate_queued(co);
}

/* ---- the global role: jobs from the journal ------------------------------------------------------------ */

/* The runs the coordinator hosts, as the scheduler sees them (*out: xf_free,
 * NULL when there are none). False when out of memory. */
static bool schedule_runs(xf__coord *co, xf_schedule_run **out, size_t *n) {
  size_t count = 0;
  for (const xf__run *r = *xf__coord_runs(co); r; r = r->next) count++;
  *n = 0;
  *out = count ? xf_mallocarray(count, sizeof(**out)) : NULL;
  if (count && !*out) return false;
  for (const xf__run *r = *xf__coord_runs(co); r; r = r->next)
    (*out)[(*n)++] = (xf_schedule_run){.id = r->relay ? -1 : r->id, .over = r->over};
  return true;
}

/* Makes the journal's job `id` a run: its spec, its last committed model
 * and optimizer state, at its current round. */
static xf_err activate(xf__coord *co, int64_t id, xf_errctx *err) {
  xf_journal_job jj;
  XF_GUARD(xf_journal_job_load(xf__coord_db(co), id, &jj, err));
  xf__run *run = xf_calloc(1, sizeof(*run));
  if (!run) return xf_fail(err, XF_ENOMEM, "out of memory");
  run->co = co;
  run->id = id;
  snprintf(run->id_text, sizeof(run->id_text), "%" PRId64, id);
  run->spec = jj.spec;
  xf_err rc = xf_jobspec_to_json(&run->spec, &run->spec_json);
  void *bytes = NULL;
  size_t len = 0;
  if (rc == XF_OK) rc = xf_blob_get(xf__coord_blobs(co), &jj.model, &bytes, &len, err);
  if (rc == XF_OK) rc = xf_checkpoint_decode(bytes, len, &run->model, &run->params, err);
  xf_free(bytes);
  bytes = NULL;
  if (rc == XF_OK) {
    run->n_params = xf_model_num_params(run->model);
    rc = xf_server_opt_create(&run->spec.strategy, run->n_params, &run->opt, err);
  }
  if (rc == XF_OK && jj.has_opt_state) {
    rc = xf_blob_get(xf__coord_blobs(co), &jj.opt_state, &bytes, &len, err);
    if (rc == XF_OK) rc = xf_server_opt_load(run->opt, bytes, len, err);
    xf_free(bytes);
  }
  if (rc == XF_OK) rc = set_model(run, err);
  run->model_round = jj.rounds_committed;
  uint32_t round = jj.round > run->spec.rounds ? run->spec.rounds : jj.round;
  xf_jobm_config cfg = {.role = XF_JOBM_GLOBAL,
                        .spec = &run->spec,
                        .round = round,
                        .attempt = jj.attempt,
                        .rounds_committed = jj.rounds_committed,
                        .n_params = run->n_params,
                        .paused = jj.state == XF_JOB_PAUSED,
                        .eval_timeout_s = xf__coord_cfg(co)->eval_timeout_s};
  if (jj.round_open || jj.rounds_committed > 0) {
    /* Resuming: give the sites that were there time to come back, so the
     * cohort is drawn over the same set as before the stop. */
    uint32_t invited = 0;
    xf__journal_check(xf_journal_last_invited(xf__coord_db(co), id, &invited, err), "last_invited",
                  err);
    cfg.resume_until = xf__now() + xf__coord_cfg(co)->resume_grace_s;
    cfg.resume_wait_for = invited ? invited : UINT32_MAX;
  }
  if (rc == XF_OK) rc = xf_jobm_create(&cfg, &run->m, err);
  if (rc != XF_OK) {
    xf__run_free(run);
    return rc;
  }
  xf__run **pp = xf__coord_runs(co);
  while (*pp) pp = &(*pp)->next;
  *pp = run;
  if (jj.state == XF_JOB_QUEUED)
    xf__journal_check(
        xf_journal_job_set_state(xf__coord_db(co), id, XF_JOB_RUNNING, NULL, xf__now(), err),
        "job_state", err);
  XF_INFO("job_active", "job=%s name=%s round=%u attempt=%u resumed=%d", run->id_text,
          run->spec.name, (unsigned)round, (unsigned)jj.attempt, jj.round_open ? 1 : 0);
  run->dirty = true;
  xf__run_actions(run);
  return XF_OK;
}

static void activate_failed(xf__coord *co, int64_t id, const xf_errctx *err) {
  char why[600];
  snprintf(why, sizeof(why), "cannot resume: %s", err->msg);
  XF_ERROR("job_failed", "job=%" PRId64 " reason=\"%s\"", id, why);
  xf_errctx e2 = {0};
  xf__journal_check(xf_journal_job_set_state(xf__coord_db(co), id, XF_JOB_FAILED, why, xf__now(), &e2),
                "job_state", &e2);
}

/* Activates what the scheduler picks of ids[0..n) (coordinator/schedule.h),
 * asking again after the last pick while a pick failed or ended at once. */
static void activate_ids(xf__coord *co, const int64_t *ids, size_t n) {
  size_t *picks = n ? xf_mallocarray(n, sizeof(*picks)) : NULL;
  if (!picks) return;
  for (size_t from = 0; from < n;) {
    xf_schedule_run *runs = NULL;
    size_t n_runs = 0;
    if (!schedule_runs(co, &runs, &n_runs)) break;
    size_t k = xf_schedule_pick(XF_COORD_JOBS_MAX, runs, n_runs, ids + from, n - from, picks);
    xf_free(runs);
    for (size_t i = 0; i < k; i++) {
      xf_errctx err = {0};
      if (activate(co, ids[from + picks[i]], &err) != XF_OK)
        activate_failed(co, ids[from + picks[i]], &err);
    }
    if (k == 0) break;
    from += picks[k - 1] + 1;
  }
  xf_free(picks);
}

static void activate_queued(xf__coord *co) {
  if (xf__coord_stopping(co) || xf__coord_cfg(co)->regional) return;
  xf_errctx err = {0};
  int64_t *ids = NULL;
  size_t n = 0;
  if (xf_journal_queued_jobs(xf__coord_db(co), &ids, &n, &err) != XF_OK) {
    XF_ERROR("journal_failed", "doing=queued_jobs reason=\"%s\"", err.msg);
    return;
  }
  activate_ids(co, ids, n);
  xf_free(ids);
}

void xf__runs_schedule(xf__coord *co) {
  if (xf__coord_cfg(co)->regional || xf__coord_stopping(co)) return;
  xf_errctx err = {0};
  int64_t *ids = NULL;
  size_t n = 0;
  if (xf_journal_running_jobs(xf__coord_db(co), &ids, &n, &err) != XF_OK) {
    XF_ERROR("journal_failed", "doing=running_jobs reason=\"%s\"", err.msg);
    return;
  }
  activate_ids(co, ids, n);
  xf_free(ids);
  activate_queued(co);
}

void xf__run_cancel(xf__coord *co, int64_t id, const char *why) {
  for (xf__run *run = *xf__coord_runs(co); run; run = run->next) {
    if (run->relay || run->id != id || run->over) continue;
    xf_errctx err = {0};
    if (xf_jobm_cancel(run->m, why, xf__now(), &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", run->id_text, err.msg);
    xf__run_actions(run);
    run->over = true;
  }
}

/* ---- the regional role: a relayed task ------------------------------------------------------------------- */

xf_err xf__run_start_relay(xf__coord *co, const char *job_id, const char *params_json,
                           const xf__upstream_task *up, const uint8_t *model, size_t model_len,
                           const xf_digest *model_digest, const uint64_t *cohort,
                           size_t n_cohort, xf_errctx *err) {
  xf__run *run = xf_calloc(1, sizeof(*run));
  if (!run) return xf_fail(err, XF_ENOMEM, "out of memory");
  run->co = co;
  run->relay = xf__relay_new(up);
  if (!run->relay) {
    xf_free(run);
    return xf_fail(err, XF_ENOMEM, "out of memory");
  }
  snprintf(run->id_text, sizeof(run->id_text), "%s", job_id);
  run->model_round = up->model_round;
  xf_err rc = xf_jobspec_parse_string(params_json, strlen(params_json), "task offer", &run->spec,
                                      err);
  if (rc == XF_OK)
    rc = xf_checkpoint_decode_digest(model, model_len, &run->model, &run->params,
                                     &run->params_digest, err);
  if (rc == XF_OK) {
    run->n_params = xf_model_num_params(run->model);
    if (memcmp(&run->params_digest, model_digest, sizeof(xf_digest)) != 0)
      rc = xf_fail(err, XF_EINTEGRITY, "the model's parameters do not match the offer's digest");
  }
  if (rc == XF_OK) rc = xf_jobspec_to_json(&run->spec, &run->spec_json);
  if (rc == XF_OK) rc = set_model(run, err);
  xf_release_rule release = {.rule = up->rule,
                             .from = xf__coord_cfg(co)->region,
                             .to = up->coordinator_region,
                             .min_cohort = up->min_cohort,
                             .require_secagg = up->require_secagg,
                             .has_max_epsilon = up->has_max_epsilon,
                             .max_epsilon = up->max_epsilon};
  bool conditions = up->has_residency && strcmp(up->path, "regional") == 0;
  xf_jobm_config cfg = {.role = XF_JOBM_RELAY,
                        .spec = &run->spec,
                        .round = up->evaluate_only ? (up->round ? up->round : 1) : up->round,
                        .attempt = 1,
                        .n_params = run->n_params,
                        .evaluate_only = up->evaluate_only,
                        .deadline = up->deadline,
                        .answer_by = up->answer_by,
                        .release = conditions ? &release : NULL,
                        .cohort = cohort,
                        .n_cohort = n_cohort,
                        .eval_timeout_s = xf__coord_cfg(co)->eval_timeout_s};
  if (rc == XF_OK && cfg.round > run->spec.rounds) run->spec.rounds = cfg.round;
  if (rc == XF_OK) rc = xf_jobm_create(&cfg, &run->m, err);
  if (rc != XF_OK) {
    xf__run_free(run);
    return rc;
  }
  xf__run **pp = xf__coord_runs(co);
  while (*pp) pp = &(*pp)->next;
  *pp = run;
  XF_INFO("relay_started", "job=%s round=%u attempt=%u eval=%d sites_named=%zu", run->id_text,
          (unsigned)up->round, (unsigned)up->attempt, up->evaluate_only ? 1 : 0, n_cohort);
  run->dirty = true;
  xf__run_actions(run);
  return XF_OK;
}
