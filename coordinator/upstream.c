/* SPDX-License-Identifier: Apache-2.0 */
/* The regional aggregator's link to the global coordinator: it dials out
 * with backoff, announces the sites behind it (each with its own datasets),
 * takes task offers and their models, runs each task as a relay run of the
 * job machine among its sites (coordinator/host.c), and sends upstream what
 * the machine says: who accepted, who refused and why, the region's
 * aggregate once it may leave (docs/protocol.md, "Regional aggregator"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"

struct xf__relay {
  xf__upstream_task up;
  float *mean;              /* the region's aggregate, between COMMIT and the first FORWARD */
  uint64_t weight;
  uint8_t *agg_bytes;       /* what went upstream, kept to send again (FORWARD with resend) */
  size_t agg_len;
  uint8_t *agg_plain;       /* ... and before sealing, to seal again for a restarted upstream */
  size_t agg_plain_len;
  xf_update_form agg_form;
  uint64_t agg_count;
  bool agg_sealed;
  uint8_t agg_epk[XF_SEAL_PUBLICKEYBYTES];
};

xf__relay *xf__relay_new(const xf__upstream_task *up) {
  xf__relay *r = xf_calloc(1, sizeof(*r));
  if (r) r->up = *up;
  return r;
}

void xf__relay_free(xf__relay *r) {
  if (!r) return;
  xf_free(r->mean);
  xf_free(r->agg_bytes);
  xf_free(r->agg_plain);
  xf_free(r);
}

const xf__upstream_task *xf__relay_task(const xf__relay *r) { return &r->up; }

void xf__relay_set_aggregate(xf__relay *r, float *mean, uint64_t weight) {
  xf_free(r->mean);
  r->mean = mean;
  r->weight = weight;
}

#define BACKOFF_MIN_S 0.5
#define BACKOFF_MAX_S 30.0

/* Top-k error feedback of this region's aggregates for one job (in memory:
 * a restarted aggregator starts again from zero). */
typedef struct job_residual {
  char job[32];
  float *values;
  size_t n;
  struct job_residual *next;
} job_residual;

/* The link upstream, one per process (daemon.c holds it, this file alone
 * looks into it). The redial timer is a handle of the coordinator's loop:
 * closed with it (xf__upstream_stop, or the loop's last walk) before the
 * link is freed. */
struct xf__uplink {
  xf__peer *peer;   /* the session upstream, once open */
  bool dialing;
  uv_timer_t redial;
  double backoff_s;
  job_residual *residuals;
  bool announce_due;   /* the sites changed since the last announcement */
  double announced_at; /* xf__now() of the last announcement */
};

/* An offer whose model is still coming in. */
typedef struct pending_offer {
  char job_id[32];
  char *params_json;
  xf__upstream_task task;
  xf_digest model_digest;
  uint64_t model_stream;
  uint64_t *cohort;
  size_t n_cohort;
  xf_tensor_receiver *rx;
  uint8_t *model;
  size_t model_len;
  struct pending_offer *next;
} pending_offer;

static pending_offer *g_pending; /* the process runs one coordinator */

static void pending_free(pending_offer *o) {
  xf_free(o->params_json);
  xf_free(o->cohort);
  xf_tensor_receiver_free(o->rx);
  xf_free(o->model);
  xf_free(o);
}

static void pending_drop_all(void) {
  while (g_pending) {
    pending_offer *o = g_pending;
    g_pending = o->next;
    pending_free(o);
  }
}

static void pending_drop_job(const char *job) {
  for (pending_offer **pp = &g_pending; *pp;) {
    pending_offer *o = *pp;
    if (strcmp(o->job_id, job) == 0) {
      *pp = o->next;
      pending_free(o);
    } else {
      pp = &o->next;
    }
  }
}

/* ---- dialing ----------------------------------------------------------------------------------------- */

static void dial(xf__coord *co);

static void on_redial(uv_timer_t *t) { dial(t->data); }

static void schedule_redial(xf__coord *co) {
  if (xf__coord_stopping(co)) return;
  xf__uplink *u = xf__coord_uplink(co);
  double b = u->backoff_s < BACKOFF_MIN_S ? BACKOFF_MIN_S : u->backoff_s;
  /* +-25 % jitter, so aggregators that lost the same coordinator do not
   * all come back in the same instant. */
  double jitter = 0.75 + 0.5 * ((double)(rand() % 1000) / 1000.0);
  uint64_t ms = (uint64_t)(b * jitter * 1000.0);
  u->backoff_s = b * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : b * 2;
  uv_timer_start(&u->redial, on_redial, ms, 0);
  XF_INFO("upstream_redial", "in_ms=%" PRIu64, ms);
}

static void dial(xf__coord *co) {
  xf__uplink *u = xf__coord_uplink(co);
  if (xf__coord_stopping(co) || u->peer || u->dialing) return;
  xf__peer *p;
  xf_errctx err = {0};
  if (xf__peer_dial_upstream(co, &p, &err) != XF_OK) {
    schedule_redial(co);
    return;
  }
  u->dialing = true;
  XF_INFO("upstream_dialing", "upstream=%s:%d", xf__coord_cfg(co)->upstream_host,
          xf__coord_cfg(co)->upstream_port);
}

xf__uplink *xf__uplink_new(void) { return xf_calloc(1, sizeof(xf__uplink)); }

void xf__uplink_free(xf__uplink *u) {
  if (!u) return;
  while (u->residuals) {
    job_residual *r = u->residuals;
    u->residuals = r->next;
    xf_free(r->values);
    xf_free(r);
  }
  xf_free(u);
}

void xf__upstream_start(xf__coord *co) {
  xf__uplink *u = xf__coord_uplink(co);
  uv_timer_init(xf__coord_loop(co), &u->redial);
  u->redial.data = co;
  u->backoff_s = BACKOFF_MIN_S;
  dial(co);
}

void xf__upstream_stop(xf__coord *co) {
  xf__uplink *u = xf__coord_uplink(co);
  uv_timer_stop(&u->redial);
  if (!uv_is_closing((uv_handle_t *)&u->redial)) uv_close((uv_handle_t *)&u->redial, NULL);
  pending_drop_all();
}

void xf__upstream_closed(xf__coord *co) {
  xf__uplink *u = xf__coord_uplink(co);
  u->peer = NULL;
  u->dialing = false;
  pending_drop_all(); /* offered again when the link is back */
  /* Upstream may come back restarted, without our tasks: what the relays
   * make from now on waits for their tasks to be offered again. */
  for (xf__run *run = xf__runs_first(co); run; run = xf__run_next(run)) {
    if (!xf__run_relay(run) || xf__run_over(run)) continue;
    xf_errctx err = {0};
    if (xf_jobm_upstream_lost(xf__run_machine(run), xf__now(), &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
    xf__run_actions(run);
  }
  schedule_redial(co);
}

/* ---- the announcement -------------------------------------------------------------------------------- */

/* One site's datasets as announce entries (pointing into d). */
static Xfed__SiteAnnounce__Dataset **announce_sets(const xf__dataset *d, size_t n,
                                                  Xfed__SiteAnnounce__Dataset *store,
                                                  char ***tags_store) {
  Xfed__SiteAnnounce__Dataset **ptrs = xf_calloc(n + 1, sizeof(*ptrs));
  if (!ptrs) return NULL;
  for (size_t i = 0; i < n; i++) {
    Xfed__SiteAnnounce__Dataset *o = &store[i];
    xfed__site_announce__dataset__init(o);
    o->name = (char *)d[i].name;
    tags_store[i] = xf_calloc(d[i].n_tags + 1, sizeof(char *));
    if (tags_store[i]) {
      for (uint32_t t = 0; t < d[i].n_tags; t++) tags_store[i][t] = (char *)d[i].tags[t];
      o->tags = tags_store[i];
      o->n_tags = d[i].n_tags;
    }
    /* The site's own words travel on: the global coordinator lists a
     * dataset it has not got in its policy as the site registered it. */
    o->classification = (char *)d[i].classification;
    o->train_records = d[i].train_records;
    o->test_records = d[i].test_records;
    o->classes = d[i].classes;
    o->height = d[i].h;
    o->width = d[i].w;
    o->channels = d[i].c;
    ptrs[i] = o;
  }
  return ptrs;
}

/* A region's sites come and go in bursts (a thousand site daemons starting
 * behind one aggregator), and each announcement names every site, so the
 * global coordinator's work for a burst of n would be O(n^2) if each
 * change went up at once: changes closer together than this go up in one
 * announcement, from the tick. */
#define ANNOUNCE_GAP_S 0.2

/* The last announcement is far enough back (or the clock was set back). */
static bool announce_may(const xf__uplink *u) {
  double since = xf__now() - u->announced_at;
  return u->peer && (since >= ANNOUNCE_GAP_S || since < 0);
}

void xf__upstream_announce_soon(xf__coord *co) {
  xf__uplink *u = xf__coord_uplink(co);
  if (announce_may(u)) xf__upstream_announce(co);
  else u->announce_due = true;
}

void xf__upstream_tick(xf__coord *co) {
  xf__uplink *u = xf__coord_uplink(co);
  if (u->announce_due && announce_may(u)) xf__upstream_announce(co);
}

void xf__upstream_announce(xf__coord *co) {
  xf__uplink *u = xf__coord_uplink(co);
  if (!u->peer) return;
  u->announce_due = false;
  u->announced_at = xf__now();
  size_t n = 0;
  for (xf__site *s = xf__coord_sites(co); s; s = s->next) n += s->peer != NULL;
  Xfed__SiteAnnounce *behind = xf_calloc(n + 1, sizeof(*behind));
  Xfed__SiteAnnounce **bptrs = xf_calloc(n + 1, sizeof(*bptrs));
  char **names = xf_calloc(n + 1, sizeof(char *));
  Xfed__SiteAnnounce__Dataset **store = xf_calloc(n + 1, sizeof(*store));
  char ****tags = xf_calloc(n + 1, sizeof(char ***));
  size_t k = 0;
  if (!behind || !bptrs || !names || !store || !tags) goto out;
  for (xf__site *s = xf__coord_sites(co); s; s = s->next) {
    if (!s->peer) continue;
    Xfed__SiteAnnounce *b = &behind[k];
    xfed__site_announce__init(b);
    b->site = s->name;
    b->region = s->region;
    store[k] = xf_calloc(s->n_datasets + 1, sizeof(Xfed__SiteAnnounce__Dataset));
    tags[k] = xf_calloc(s->n_datasets + 1, sizeof(char **));
    if (store[k] && tags[k]) {
      b->datasets = announce_sets(s->datasets, s->n_datasets, store[k], tags[k]);
      b->n_datasets = b->datasets ? s->n_datasets : 0;
    }
    names[k] = s->name;
    bptrs[k] = b;
    k++;
  }
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = (char *)xf__coord_name(co);
  a.region = (char *)xf__coord_cfg(co)->region;
  a.n_sites = k;
  a.sites = names;
  a.n_behind = k;
  a.behind = bptrs;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
  env.site_announce = &a;
  (void)xf__send(xf__coord_uplink(co)->peer, &env);
out:
  for (size_t i = 0; i < k; i++) {
    if (tags && tags[i]) {
      for (size_t d = 0; d < behind[i].n_datasets; d++) xf_free(tags[i][d]);
      xf_free(tags[i]);
    }
    if (behind) xf_free(behind[i].datasets);
    if (store) xf_free(store[i]);
  }
  xf_free(tags);
  xf_free(store);
  xf_free(names);
  xf_free(bptrs);
  xf_free(behind);
}

/* ---- replies upstream ---------------------------------------------------------------------------------- */

static char **names_of(xf__coord *co, const uint64_t *sites, size_t n) {
  char **v = xf_calloc(n ? n : 1, sizeof(char *));
  if (!v) return NULL;
  for (size_t i = 0; i < n; i++) {
    const char *name = xf__site_name(co, sites[i]);
    v[i] = (char *)(name ? name : "?");
  }
  return v;
}

void xf__upstream_accept(xf__coord *co, const xf__run *run, const uint64_t *sites, size_t n) {
  xf__relay *rl = xf__run_relay(run);
  if (!xf__coord_uplink(co)->peer) return;
  char **names = names_of(co, sites, n);
  Xfed__TaskAccept a = XFED__TASK_ACCEPT__INIT;
  a.job_id = (char *)xf__run_id(run);
  a.round = rl->up.round;
  a.attempt = rl->up.attempt;
  a.n_sites = names ? n : 0;
  a.sites = names;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_ACCEPT;
  env.task_accept = &a;
  (void)xf__send(xf__coord_uplink(co)->peer, &env);
  xf_free(names);
  XF_INFO("task_accepted_up", "job=%s round=%u attempt=%u sites=%zu", xf__run_id(run),
          (unsigned)rl->up.round, (unsigned)rl->up.attempt, n);
}

static void send_refusal(xf__coord *co, const char *job, uint32_t round, uint32_t attempt,
                         const char *site, int reason, const char *details) {
  if (!xf__coord_uplink(co)->peer) return;
  Xfed__TaskRefusal r = XFED__TASK_REFUSAL__INIT;
  r.job_id = (char *)job;
  r.round = round;
  r.attempt = attempt;
  r.reason = (Xfed__TaskRefusal__Reason)reason;
  r.details = (char *)details;
  r.site = (char *)(site ? site : "");
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_REFUSAL;
  env.task_refusal = &r;
  (void)xf__send(xf__coord_uplink(co)->peer, &env);
}

void xf__upstream_refuse(xf__coord *co, const xf__run *run, uint64_t site, int reason,
                         const char *details) {
  xf__relay *rl = xf__run_relay(run);
  const char *name = site ? xf__site_name(co, site) : NULL;
  const xf__upstream_task *up = &rl->up;
  XF_WARN("task_refused_up", "job=%s round=%u site=%s reason=%s details=\"%s\"", xf__run_id(run),
          (unsigned)up->round, name ? name : "-", xf_task_refusal_reason_name(reason), details);
  send_refusal(co, xf__run_id(run), up->round, up->attempt, site ? (name ? name : "?") : "", reason,
               details);
}

void xf__upstream_eval_done(xf__coord *co, const xf__run *run) {
  xf__relay *rl = xf__run_relay(run);
  if (!xf__coord_uplink(co)->peer) return;
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.job_id = (char *)xf__run_id(run);
  m.round = rl->up.round;
  m.attempt = rl->up.attempt;
  m.site = (char *)xf__coord_name(co);
  m.region = (char *)xf__coord_cfg(co)->region;
  m.model_round = rl->up.model_round;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS;
  env.metrics = &m;
  (void)xf__send(xf__coord_uplink(co)->peer, &env);
}

void xf__upstream_metrics(xf__coord *co, const Xfed__Envelope *env) {
  if (xf__coord_uplink(co)->peer) (void)xf__send(xf__coord_uplink(co)->peer, env);
}

/* ---- the region's aggregate ------------------------------------------------------------------------------ */

static float *residual_of(xf__coord *co, const char *job, size_t n) {
  for (job_residual *r = xf__coord_uplink(co)->residuals; r; r = r->next)
    if (strcmp(r->job, job) == 0) {
      if (r->n == n) return r->values;
      xf_free(r->values);
      r->values = xf_calloc(n, sizeof(float));
      r->n = r->values ? n : 0;
      return r->values;
    }
  job_residual *r = xf_calloc(1, sizeof(*r));
  if (!r) return NULL;
  r->values = xf_calloc(n, sizeof(float));
  if (!r->values) {
    xf_free(r);
    return NULL;
  }
  snprintf(r->job, sizeof(r->job), "%s", job);
  r->n = n;
  r->next = xf__coord_uplink(co)->residuals;
  xf__coord_uplink(co)->residuals = r;
  return r->values;
}

/* The stream run's aggregate travels under: the one the offer named. */
static uint64_t aggregate_stream(const xf__run *run) {
  xf__relay *rl = xf__run_relay(run);
  return rl->up.update_stream_id
             ? rl->up.update_stream_id
             : ((uint64_t)rl->up.round << 16 | (uint64_t)rl->up.attempt << 1 | 1);
}

/* Queues run's kept aggregate bytes upstream (again after a reconnect). */
static void queue_aggregate(xf__coord *co, xf__run *run, const xf_update_payload *pl,
                            const uint64_t *sites, size_t n, uint64_t weight) {
  xf__relay *rl = xf__run_relay(run);
  if (!xf__coord_uplink(co)->peer || !rl->agg_bytes) return;
  uint8_t *copy = xf_malloc(rl->agg_len ? rl->agg_len : 1);
  if (!copy) return;
  memcpy(copy, rl->agg_bytes, rl->agg_len);
  xf_tensor_desc d = {.stream_id = aggregate_stream(run),
                      .kind = XFED__TENSOR_BEGIN__KIND__AGGREGATE,
                      .dtype = pl->form == XF_UPDATE_FLOAT32 ? XFED__TENSOR_BEGIN__DTYPE__F32
                                                             : XFED__TENSOR_BEGIN__DTYPE__U8,
                      .element_count = pl->element_count,
                      .job_id = xf__run_id(run),
                      .round = rl->up.round,
                      .attempt = rl->up.attempt};
  if (pl->sealed) {
    d.sealed_by = pl->sealed_by;
    d.sealed_chunk = XF_SEAL_STREAM_CHUNK;
  }
  char **names = xf_calloc(n ? n : 1, sizeof(char *));
  for (size_t i = 0; names && i < n; i++) {
    const char *nm = xf__site_name(co, sites[i]);
    names[i] = xf_strdup(nm ? nm : "?");
  }
  xf__stream_opts so = {.weight = weight,
                        .attempt = rl->up.attempt,
                        .contributors = (uint32_t)n,
                        .sites = names,
                        .n_sites = names ? n : 0,
                        .await_ack = true,
                        .job = xf__run_id(run)};
  XF_INFO("aggregate_sending", "job=%s round=%u weight=%" PRIu64 " sites=%zu bytes=%zu",
          xf__run_id(run), (unsigned)rl->up.round, weight, n, rl->agg_len);
  (void)xf__stream_queue(xf__coord_uplink(co)->peer, &d, NULL, copy, rl->agg_len,
                         pl->sealed ? XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES : 0, &so);
}

static void resend_aggregate(xf__coord *co, xf__run *run, const uint64_t *sites, size_t n,
                             uint64_t weight);

void xf__upstream_forward(xf__coord *co, xf__run *run, const uint64_t *sites, size_t n,
                          uint64_t weight, bool resend) {
  xf__relay *rl = xf__run_relay(run);
  if (resend && rl->agg_bytes) {
    resend_aggregate(co, run, sites, n, weight);
    return;
  }
  if (!rl->mean) return;
  xf_errctx err = {0};
  xf_update_offer offer = {.sealed = rl->up.seal,
                           .rounding_seed =
                               xf__run_spec(run)->seed ^
                               ((uint64_t)rl->up.round * 0x9e3779b97f4a7c15ull) ^
                               xf_coord_site_id(xf__coord_cfg(co)->region)};
  memcpy(offer.seal_pk, rl->up.seal_pk, sizeof(offer.seal_pk));
  xf_update_plan plan;
  xf_update_payload pl;
  memset(&pl, 0, sizeof(pl));
  xf_err rc = xf_update_plan_aggregate(xf__run_spec(run), xf__run_n_params(run), &offer, &plan, &err);
  float *residual = NULL;
  if (rc == XF_OK && plan.residual) {
    residual = residual_of(co, xf__run_id(run), xf__run_n_params(run));
    if (!residual) rc = xf_fail(&err, XF_ENOMEM, "out of memory for the region's residual");
  }
  char ctx[256];
  size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), xf__run_id(run), rl->up.round,
                                          rl->up.attempt, xf__coord_name(co));
  if (rc == XF_OK)
    rc = xf_update_prepare(&plan, rl->mean, residual, NULL, ctx, ctx_len, &pl, &err);
  xf_free(rl->mean);
  rl->mean = NULL;
  if (rc != XF_OK) {
    XF_ERROR("aggregate_not_encoded", "job=%s round=%u reason=\"%s\"", xf__run_id(run),
             (unsigned)rl->up.round, err.msg);
    xf__upstream_refuse(co, run, 0, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                        "the region's aggregate could not be encoded or sealed");
    return;
  }
  xf_free(rl->agg_bytes);
  rl->agg_bytes = xf_malloc(pl.wire_len ? pl.wire_len : 1);
  rl->agg_len = rl->agg_bytes ? pl.wire_len : 0;
  if (rl->agg_bytes) memcpy(rl->agg_bytes, pl.wire, pl.wire_len);
  xf_free(rl->agg_plain);
  rl->agg_plain = NULL;
  rl->agg_plain_len = 0;
  if (pl.sealed && (rl->agg_plain = xf_malloc(pl.plain_len ? pl.plain_len : 1))) {
    memcpy(rl->agg_plain, pl.plain, pl.plain_len);
    rl->agg_plain_len = pl.plain_len;
  }
  rl->weight = weight;
  const xf__upstream_task *up = &rl->up;
  if (up->has_residency && strcmp(up->coordinator_region, xf__coord_cfg(co)->region) != 0)
    xf__audit(co, "crossing", xf__run_id(run),
              json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:I,s:I,s:s,s:I}", "job", xf__run_id(run), "round",
                        (json_int_t)up->round, "attempt", (json_int_t)up->attempt, "kind",
                        "regional_aggregate", "from", xf__coord_cfg(co)->region, "to",
                        up->coordinator_region, "contributors", (json_int_t)n, "weight",
                        (json_int_t)weight, "rule", up->rule, "policy_version",
                        (json_int_t)up->policy_version));
  /* Remember the stream's shape in the run (its payload buffers go now). */
  rl->agg_form = pl.form;
  rl->agg_count = pl.element_count;
  rl->agg_sealed = pl.sealed;
  memcpy(rl->agg_epk, pl.sealed_by, sizeof(rl->agg_epk));
  queue_aggregate(co, run, &pl, sites, n, weight);
  xf_update_payload_free(&pl);
}

/* A restarted coordinator holds a new sealing key and cannot open what was
 * sealed to the old one: an aggregate not made yet is sealed to the new key
 * when it is, and one made before is sealed again, from the same plaintext. */
static void take_seal_key(xf__coord *co, xf__run *run, const Xfed__TaskOffer *o) {
  xf__relay *rl = xf__run_relay(run);
  if (o->seal_key.len != XF_SEAL_PUBLICKEYBYTES ||
      (rl->up.seal &&
       memcmp(o->seal_key.data, rl->up.seal_pk, XF_SEAL_PUBLICKEYBYTES) == 0))
    return;
  if (!rl->agg_bytes) {
    memcpy(rl->up.seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
    rl->up.seal = true;
    return;
  }
  if (!rl->agg_sealed || !rl->agg_plain) return;
  xf_update_payload pl;
  memset(&pl, 0, sizeof(pl));
  pl.form = rl->agg_form;
  pl.plain = rl->agg_plain;
  pl.plain_len = rl->agg_plain_len;
  char ctx[256];
  size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), xf__run_id(run), rl->up.round,
                                          rl->up.attempt, xf__coord_name(co));
  xf_errctx err = {0};
  if (xf_update_seal(&pl, o->seal_key.data, ctx, ctx_len, &err) != XF_OK) {
    XF_ERROR("aggregate_not_resealed", "job=%s round=%u reason=\"%s\"", xf__run_id(run),
             (unsigned)rl->up.round, err.msg);
    return;
  }
  xf_free(rl->agg_bytes);
  rl->agg_bytes = pl.wire; /* taken over: plain stays the run's */
  rl->agg_len = pl.wire_len;
  memcpy(rl->agg_epk, pl.sealed_by, sizeof(rl->agg_epk));
  memcpy(rl->up.seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  XF_INFO("aggregate_resealed", "job=%s round=%u attempt=%u why=\"the coordinator's key changed\"",
          xf__run_id(run), (unsigned)rl->up.round, (unsigned)rl->up.attempt);
}

/* The aggregate once more (the global coordinator offered the task again
 * and holds it). */
static void resend_aggregate(xf__coord *co, xf__run *run, const uint64_t *sites, size_t n,
                             uint64_t weight) {
  xf__relay *rl = xf__run_relay(run);
  xf_update_payload shape;
  memset(&shape, 0, sizeof(shape));
  shape.form = rl->agg_form;
  shape.element_count = rl->agg_count;
  shape.sealed = rl->agg_sealed;
  memcpy(shape.sealed_by, rl->agg_epk, sizeof(shape.sealed_by));
  queue_aggregate(co, run, &shape, sites, n, weight);
}

/* ---- offers and their models ------------------------------------------------------------------------------ */

static void take_residency(xf__upstream_task *t, const Xfed__Residency *res) {
  t->has_residency = res != NULL;
  if (!res) return;
  t->policy_version = res->policy_version;
  snprintf(t->coordinator_region, sizeof(t->coordinator_region), "%s",
           res->coordinator_region ? res->coordinator_region : "");
  snprintf(t->path, sizeof(t->path), "%s", res->path ? res->path : "");
  snprintf(t->rule, sizeof(t->rule), "%s", res->rule ? res->rule : "");
  t->min_cohort = res->min_cohort;
  t->require_secagg = res->require_secagg;
  t->has_max_epsilon = res->has_max_epsilon;
  t->max_epsilon = res->max_epsilon;
  t->epsilon = res->epsilon;
}

static void refuse_offer(xf__coord *co, const Xfed__TaskOffer *o, int reason, const char *why) {
  XF_WARN("task_refused", "job=%s round=%u reason=\"%s\"", o->job_id ? o->job_id : "",
          (unsigned)o->round, why);
  send_refusal(co, o->job_id ? o->job_id : "", o->round, o->attempt, "", reason, why);
}

static xf_err model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  pending_offer *o = user;
  XF_ENSURE(offset + len <= o->model_len, err, XF_ERANGE, "model bytes past the announced size");
  memcpy(o->model + offset, data, len);
  return XF_OK;
}

static void on_offer(xf__coord *co, const Xfed__TaskOffer *o) {
  const char *job = o->job_id ? o->job_id : "";
  if (!*job || strlen(job) >= 32) {
    refuse_offer(co, o, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the offer names no job");
    return;
  }
  xf__run *run = xf__run_by_id(co, job);
  if (!run) run = xf__run_relay_of(co, job); /* a finished one, kept */
  xf__relay *rl = run ? xf__run_relay(run) : NULL;
  if (rl && rl->up.round == o->round && rl->up.attempt == o->attempt &&
      rl->up.evaluate_only == o->evaluate_only) {
    /* Offered again (the link came back, or the coordinator restarted):
     * the machine says again what it said, and sends what it made once
     * upstream holds the task (at once, or on the go of a held offer). A
     * restarted coordinator names its own key and stream for the aggregate
     * (its ids start again and another stream may hold the old one). */
    rl->up.deadline = (double)o->deadline_unix_ms / 1000.0;
    if (o->update_stream_id) rl->up.update_stream_id = o->update_stream_id;
    take_seal_key(co, run, o);
    xf_errctx err = {0};
    if (xf_jobm_reoffered(xf__run_machine(run), o->hold, xf__now(), &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
    xf__run_actions(run);
    return;
  }
  if (run && !xf__run_over(run)) xf__run_end(run, "superseded by another task of its job");
  pending_drop_job(job);
  /* Under a residency policy the global coordinator's plan routes the job
   * through us; without one the spec asks for it. */
  const Xfed__Residency *res = o->residency;
  if (res && (!res->path || (strcmp(res->path, "direct") != 0 &&
                             strcmp(res->path, "regional") != 0) ||
              !res->coordinator_region || !*res->coordinator_region)) {
    refuse_offer(co, o, XFED__TASK_REFUSAL__REASON__POLICY_DENIED,
                 "the task's residency plan names no path out of this region");
    return;
  }
  if (o->model_digest.len != XF_DIGEST_BYTES) {
    refuse_offer(co, o, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                 "the offer's model digest is not 32 bytes");
    return;
  }
  pending_offer *p = xf_calloc(1, sizeof(*p));
  if (!p) return;
  snprintf(p->job_id, sizeof(p->job_id), "%s", job);
  p->params_json = xf_strdup(o->params_json ? o->params_json : "");
  xf__upstream_task *t = &p->task;
  t->round = o->round;
  t->attempt = o->attempt;
  t->model_round = o->model_round;
  t->evaluate_only = o->evaluate_only;
  t->deadline = (double)o->deadline_unix_ms / 1000.0;
  t->answer_by = (double)o->answer_by_unix_ms / 1000.0;
  t->update_stream_id = o->update_stream_id;
  t->seal = o->seal_key.len == XF_SEAL_PUBLICKEYBYTES;
  if (t->seal) memcpy(t->seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  take_residency(t, res);
  memcpy(p->model_digest.bytes, o->model_digest.data, XF_DIGEST_BYTES);
  p->model_stream = o->model_stream_id;
  /* The sites upstream drew: named by the offer, else by the plan. */
  size_t n = o->n_cohort ? o->n_cohort : (res ? res->n_sites : 0);
  char **names = o->n_cohort ? o->cohort : (res ? res->sites : NULL);
  if (n && (p->cohort = xf_mallocarray(n, sizeof(uint64_t))))
    for (size_t i = 0; i < n; i++) p->cohort[p->n_cohort++] = xf_coord_site_id(names[i] ? names[i] : "");
  if (!p->params_json || (n && !p->cohort)) {
    pending_free(p);
    refuse_offer(co, o, XFED__TASK_REFUSAL__REASON__BUSY, "out of memory");
    return;
  }
  p->next = g_pending;
  g_pending = p;
  XF_INFO("task_offered", "job=%s round=%u attempt=%u eval=%d cohort=%zu", job,
          (unsigned)o->round, (unsigned)o->attempt, o->evaluate_only ? 1 : 0, p->n_cohort);
}

static pending_offer *pending_by_stream(uint64_t stream) {
  for (pending_offer *o = g_pending; o; o = o->next)
    if (o->model_stream == stream) return o;
  return NULL;
}

static void pending_remove(pending_offer *p) {
  for (pending_offer **pp = &g_pending; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      return;
    }
}

static void on_model_frame(xf__coord *co, const Xfed__Envelope *env) {
  xf_errctx err = {0};
  uint64_t stream = env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN ? env->tensor_begin->stream_id
                    : env->body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK
                        ? env->tensor_chunk->stream_id
                        : env->tensor_end->stream_id;
  pending_offer *p = pending_by_stream(stream);
  if (!p) return; /* a model we already have, or no offer */
  if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN && !p->rx) {
    const Xfed__TensorBegin *b = env->tensor_begin;
    if (b->kind != XFED__TENSOR_BEGIN__KIND__MODEL || b->total_bytes == 0 ||
        b->total_bytes > XF_COORD_MODEL_MAX) {
      xf_session_send_error(xf__peer_conn(xf__coord_uplink(co)->peer), XF_EFORMAT,
                            "expected a model stream of at most 1 GiB");
      pending_remove(p);
      pending_free(p);
      return;
    }
    p->model_len = b->total_bytes;
    p->model = xf_malloc(p->model_len);
    if (!p->model ||
        xf_tensor_receiver_new(p->model_len, model_sink, p, &p->rx, &err) != XF_OK) {
      pending_remove(p);
      pending_free(p);
      return;
    }
  }
  if (!p->rx) return;
  if (xf_tensor_receiver_handle(p->rx, env, &err) != XF_OK) {
    XF_WARN("model_stream_failed", "job=%s reason=\"%s\"", p->job_id, err.msg);
    xf_session_send_error(xf__peer_conn(xf__coord_uplink(co)->peer), err.code, "%s", err.msg);
    pending_remove(p);
    pending_free(p);
    return;
  }
  if (!xf_tensor_receiver_complete(p->rx)) return;
  pending_remove(p);
  if (xf__run_start_relay(co, p->job_id, p->params_json, &p->task, p->model, p->model_len,
                          &p->model_digest, p->cohort, p->n_cohort, &err) != XF_OK) {
    XF_ERROR("relay_failed", "job=%s reason=\"%s\"", p->job_id, err.msg);
    send_refusal(co, p->job_id, p->task.round, p->task.attempt, "",
                 XFED__TASK_REFUSAL__REASON__UNSUPPORTED, err.msg);
  }
  pending_free(p);
}

/* Upstream refused an aggregate's stream (it does not hold that task now,
 * say a restarted coordinator that has not offered it again yet): no
 * TensorAck will come for it. The stream leaves the queue, so the uploads
 * behind it go on; the aggregate stays with its run and goes again once
 * upstream offers the task again and holds it. */
static void aggregate_refused(xf__coord *co, xf__peer *p, uint64_t stream) {
  char job[32];
  if (!xf__stream_refused(p, stream, job, sizeof(job))) return;
  xf__run *run = xf__run_by_id(co, job);
  if (!run || !xf__run_relay(run) || aggregate_stream(run) != stream) return;
  const xf__upstream_task *up = &xf__run_relay(run)->up;
  XF_WARN("aggregate_kept", "job=%s round=%u attempt=%u why=\"upstream does not hold the task "
          "now; it goes again once upstream offers the task again\"",
          xf__run_id(run), (unsigned)up->round, (unsigned)up->attempt);
  xf_errctx err = {0};
  if (xf_jobm_upstream_lost(xf__run_machine(run), xf__now(), &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
  xf__run_actions(run);
}

void xf__upstream_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env) {
  if (!env) { /* the session opened */
    xf__uplink *u = xf__coord_uplink(co);
    u->peer = p;
    u->dialing = false;
    u->backoff_s = BACKOFF_MIN_S;
    XF_INFO("upstream_connected", "upstream=%s:%d", xf__coord_cfg(co)->upstream_host,
            xf__coord_cfg(co)->upstream_port);
    xf__upstream_announce(co);
    return;
  }
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(co, env->task_offer); return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
  case XFED__ENVELOPE__BODY_TENSOR_END: on_model_frame(co, env); return;
  case XFED__ENVELOPE__BODY_TENSOR_ACK: xf__stream_acked(p, env->tensor_ack); return;
  case XFED__ENVELOPE__BODY_TASK_GO: {
    const Xfed__TaskGo *g = env->task_go;
    xf__run *run = xf__run_by_id(co, g->job_id);
    const xf__upstream_task *up = run ? &xf__run_relay(run)->up : NULL;
    if (!up || up->round != g->round || up->attempt != g->attempt) return;
    xf_errctx err = {0};
    if (xf_jobm_go(xf__run_machine(run), xf__now(), &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
    xf__run_actions(run);
    return;
  }
  case XFED__ENVELOPE__BODY_TASK_CANCEL: {
    const Xfed__TaskCancel *c = env->task_cancel;
    const char *job = c->job_id ? c->job_id : "";
    XF_INFO("task_cancelled", "job=%s round=%u reason=\"%s\"", job, (unsigned)c->round,
            c->reason ? c->reason : "");
    pending_drop_job(job);
    xf__stream_drop(p, job);
    for (xf__run *run = xf__runs_first(co); run; run = xf__run_next(run))
      if (xf__run_relay(run) && strcmp(xf__run_id(run), job) == 0)
        xf__run_end(run, c->reason ? c->reason : "cancelled upstream");
    return;
  }
  case XFED__ENVELOPE__BODY_ERROR:
    XF_WARN("upstream_error", "code=%s message=\"%s\"", xf_err_name((xf_err)env->error->code),
            env->error->message ? env->error->message : "");
    if (env->error->stream_id) aggregate_refused(co, p, env->error->stream_id);
    return;
  default:
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED, "%s is not for a regional aggregator",
                          xf_envelope_body_name(env));
    return;
  }
}
