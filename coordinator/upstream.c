/* SPDX-License-Identifier: Apache-2.0 */
/* The regional aggregator's link to the global coordinator: it dials out
 * with backoff, announces the region's sites, takes task offers and their
 * models, runs each as one relayed round among its sites, and sends one
 * weighted aggregate back (docs/protocol.md, "Regional aggregator"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "coordinator/daemon_internal.h"

#define BACKOFF_MIN_S 0.5
#define BACKOFF_MAX_S 30.0

static void dial(xf__coord *co);

static void on_redial(uv_timer_t *t) {
  xf__coord *co = t->data;
  dial(co);
}

static void schedule_redial(xf__coord *co) {
  xf__upstream *up = &co->up;
  if (co->stopping) return;
  double b = up->backoff_s < BACKOFF_MIN_S ? BACKOFF_MIN_S : up->backoff_s;
  /* +-25 % jitter, so aggregators that lost the same coordinator do not
   * all come back in the same instant. */
  double jitter = 0.75 + 0.5 * ((double)(rand() % 1000) / 1000.0);
  uint64_t ms = (uint64_t)(b * jitter * 1000.0);
  up->backoff_s = b * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : b * 2;
  uv_timer_start(&up->redial, on_redial, ms, 0);
  XF_INFO("upstream_redial", "in_ms=%" PRIu64, ms);
}

static void dial(xf__coord *co) {
  xf__upstream *up = &co->up;
  if (co->stopping || up->peer || up->dialing) return;
  xf__peer *p;
  if (xf__peer_new(co, &p) != XF_OK) {
    schedule_redial(co);
    return;
  }
  p->kind = XF__PEER_UPSTREAM;
  xf_conn_opts o = *xf__conn_opts(co, false);
  o.user = p;
  xf_errctx err = {0};
  if (xf_dial(&co->loop, co->tls, co->cfg.upstream_host, co->cfg.upstream_port, &o, &p->conn,
              &err) != XF_OK) {
    XF_ERROR("upstream_dial_failed", "upstream=%s:%d reason=\"%s\"", co->cfg.upstream_host,
             co->cfg.upstream_port, err.msg);
    for (xf__peer **pp = &co->peers; *pp; pp = &(*pp)->next)
      if (*pp == p) {
        *pp = p->next;
        break;
      }
    xf_free(p);
    schedule_redial(co);
    return;
  }
  up->dialing = true;
  XF_INFO("upstream_dialing", "upstream=%s:%d", co->cfg.upstream_host, co->cfg.upstream_port);
}

void xf__upstream_start(xf__coord *co) {
  uv_timer_init(&co->loop, &co->up.redial);
  co->up.redial.data = co;
  co->up.backoff_s = BACKOFF_MIN_S;
  dial(co);
}

void xf__upstream_stop(xf__coord *co) {
  uv_timer_stop(&co->up.redial);
  if (!uv_is_closing((uv_handle_t *)&co->up.redial)) uv_close((uv_handle_t *)&co->up.redial, NULL);
}

void xf__upstream_closed(xf__coord *co) {
  xf__upstream *up = &co->up;
  up->peer = NULL;
  up->dialing = false;
  up->offer_active = false;
  xf_tensor_receiver_free(up->model_rx);
  up->model_rx = NULL;
  schedule_redial(co);
}

/* ---- announce ------------------------------------------------------------------------------- */

void xf__upstream_announce(xf__coord *co) {
  xf__upstream *up = &co->up;
  if (!up->peer) return;
  size_t n_sites = 0, n_sets = 0;
  for (xf__site *s = co->sites; s; s = s->next)
    if (s->peer) {
      n_sites++;
      n_sets += s->n_datasets;
    }
  char **names = xf_calloc(n_sites + 1, sizeof(char *));
  Xfed__SiteAnnounce__Dataset *sets = xf_calloc(n_sets + 1, sizeof(*sets));
  Xfed__SiteAnnounce__Dataset **ptrs = xf_calloc(n_sets + 1, sizeof(*ptrs));
  char ***tags = xf_calloc(n_sets + 1, sizeof(char **));
  if (!names || !sets || !ptrs || !tags) goto out;
  size_t k = 0, m = 0;
  for (xf__site *s = co->sites; s; s = s->next) {
    if (!s->peer) continue;
    names[k++] = s->name;
    for (size_t i = 0; i < s->n_datasets; i++) {
      const xf__dataset *d = &s->datasets[i];
      /* The union: datasets with one name and shape are one entry whose
       * records add up; tags are those every site's copy carries. */
      size_t j = 0;
      for (; j < m; j++)
        if (strcmp(sets[j].name, d->name) == 0 && sets[j].height == d->h &&
            sets[j].width == d->w && sets[j].channels == d->c)
          break;
      if (j < m) {
        sets[j].train_records += d->train_records;
        sets[j].test_records += d->test_records;
        if (d->classes > sets[j].classes) sets[j].classes = d->classes;
        size_t keep = 0;
        for (size_t t = 0; t < sets[j].n_tags; t++) {
          bool found = false;
          for (uint32_t u = 0; u < d->n_tags && !found; u++)
            found = strcmp(sets[j].tags[t], d->tags[u]) == 0;
          if (found) sets[j].tags[keep++] = sets[j].tags[t];
        }
        sets[j].n_tags = keep;
        continue;
      }
      Xfed__SiteAnnounce__Dataset *o = &sets[m];
      xfed__site_announce__dataset__init(o);
      o->name = (char *)d->name;
      tags[m] = xf_calloc(d->n_tags + 1, sizeof(char *));
      if (tags[m]) {
        for (uint32_t t = 0; t < d->n_tags; t++) tags[m][t] = (char *)d->tags[t];
        o->tags = tags[m];
        o->n_tags = d->n_tags;
      }
      o->train_records = d->train_records;
      o->test_records = d->test_records;
      o->classes = d->classes;
      o->height = d->h;
      o->width = d->w;
      o->channels = d->c;
      ptrs[m] = o;
      m++;
    }
  }
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = co->name;
  a.region = co->cfg.region;
  a.n_sites = k;
  a.sites = names;
  a.n_datasets = m;
  a.datasets = ptrs;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
  env.site_announce = &a;
  (void)xf__send(up->peer, &env);
out:
  for (size_t i = 0; tags && i < n_sets; i++) xf_free(tags[i]);
  xf_free(tags);
  xf_free(names);
  xf_free(sets);
  xf_free(ptrs);
}

/* ---- replies upstream ------------------------------------------------------------------------ */

/* Takes a copy of the offer's residency plan (NULL: none). */
static xf_err set_residency(xf__upstream *up, const Xfed__Residency *res) {
  xf__residency *r = &up->residency;
  xf_free(r->sites);
  memset(r, 0, sizeof(*r));
  if (!res) return XF_OK;
  if (res->n_sites) {
    r->sites = xf_calloc(res->n_sites, sizeof(*r->sites));
    if (!r->sites) return XF_ENOMEM;
  }
  for (size_t i = 0; i < res->n_sites; i++)
    snprintf(r->sites[i], sizeof(r->sites[i]), "%s", res->sites[i] ? res->sites[i] : "");
  r->n_sites = res->n_sites;
  r->present = true;
  r->version = res->policy_version;
  snprintf(r->coordinator_region, sizeof(r->coordinator_region), "%s",
           res->coordinator_region ? res->coordinator_region : "");
  snprintf(r->path, sizeof(r->path), "%s", res->path ? res->path : "");
  snprintf(r->rule, sizeof(r->rule), "%s", res->rule ? res->rule : "");
  r->min_cohort = res->min_cohort;
  r->require_secagg = res->require_secagg;
  r->has_max_epsilon = res->has_max_epsilon;
  r->max_epsilon = res->max_epsilon;
  r->epsilon = res->epsilon;
  return XF_OK;
}

/* Whether the task's plan lets site `name` take part (any site without a plan). */
static bool named(const xf__upstream *up, const char *name) {
  if (!up->residency.present) return true;
  for (size_t i = 0; i < up->residency.n_sites; i++)
    if (strcmp(up->residency.sites[i], name) == 0) return true;
  return false;
}

static void refuse(xf__coord *co, const Xfed__TaskOffer *o, Xfed__TaskRefusal__Reason reason,
                   const char *details) {
  XF_WARN("task_refused", "job=%s round=%u reason=\"%s\"", o->job_id ? o->job_id : "",
          (unsigned)o->round, details);
  Xfed__TaskRefusal r = XFED__TASK_REFUSAL__INIT;
  r.job_id = o->job_id;
  r.round = o->round;
  r.reason = reason;
  r.details = (char *)details;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_REFUSAL;
  env.task_refusal = &r;
  (void)xf__send(co->up.peer, &env);
}

static void accept_offer(xf__coord *co, const Xfed__TaskOffer *o) {
  Xfed__TaskAccept a = XFED__TASK_ACCEPT__INIT;
  a.job_id = o->job_id;
  a.round = o->round;
  a.attempt = o->attempt;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_ACCEPT;
  env.task_accept = &a;
  (void)xf__send(co->up.peer, &env);
}

static bool same_task(const xf__upstream *up, const Xfed__TaskOffer *o) {
  return o->job_id && strcmp(up->job_id, o->job_id) == 0 && up->round == o->round &&
         up->attempt == o->attempt && up->evaluate_only == o->evaluate_only;
}

static void send_aggregate(xf__coord *co) {
  xf__upstream *up = &co->up;
  if (!up->peer || !up->agg_bytes) return;
  uint8_t *copy = xf_malloc(up->agg_len);
  if (!copy) return;
  memcpy(copy, up->agg_bytes, up->agg_len);
  xf_tensor_desc d = {.stream_id = (uint64_t)up->round << 16 | (uint64_t)up->attempt << 1 | 1,
                      .kind = XFED__TENSOR_BEGIN__KIND__AGGREGATE,
                      .dtype = up->agg_encoded ? XFED__TENSOR_BEGIN__DTYPE__U8
                                               : XFED__TENSOR_BEGIN__DTYPE__F32,
                      .element_count = up->agg_plain_len / (up->agg_encoded ? 1 : 4),
                      .job_id = up->job_id,
                      .round = up->round};
  if (up->agg_sealed) {
    d.sealed_by = up->agg_epk;
    d.sealed_chunk = XF_SEAL_STREAM_CHUNK;
  }
  up->peer->tx_weight = up->agg_weight;
  up->peer->tx_attempt = up->attempt;
  up->peer->tx_contributors = up->agg_contributors;
  XF_INFO("aggregate_sending", "job=%s round=%u weight=%" PRIu64 " contributors=%u bytes=%zu",
          up->job_id, (unsigned)up->round, up->agg_weight, (unsigned)up->agg_contributors,
          up->agg_len);
  (void)xf__stream_start(up->peer, &d, NULL, copy, up->agg_len, true,
                         up->agg_sealed ? XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES : 0);
}

static void drop_aggregate(xf__upstream *up) {
  xf_free(up->agg_bytes);
  up->agg_bytes = NULL;
  up->agg_len = 0;
}

/* The region's aggregate in the job's uplink encoding, with its own top-k
 * residual; false (and the float32 aggregate goes instead) when it cannot be
 * encoded. */
static bool encode_aggregate(xf__coord *co, const xf__job *job, const float *mean, size_t n) {
  xf__upstream *up = &co->up;
  xf_codec_uplink codec;
  if (!xf__job_uplink(&job->spec, &codec)) return false;
  if (codec.topk_fraction > 0 &&
      (strcmp(up->residual_job, job->id_text) != 0 || up->residual_n != n)) {
    xf_free(up->residual);
    up->residual = xf_calloc(n, sizeof(float));
    up->residual_n = up->residual ? n : 0;
    snprintf(up->residual_job, sizeof(up->residual_job), "%s", up->residual ? job->id_text : "");
    if (!up->residual) return false;
  }
  /* The sum of the sites' sparse updates has up to their k's worth of
   * nonzeros: a second top-k at the job's fraction would drop half of a
   * two-site region's values again. Keep as many as the sum has (the
   * residual still catches the quantization error). */
  if (codec.topk_fraction > 0) {
    size_t nnz = 0;
    for (size_t i = 0; i < n; i++) nnz += mean[i] != 0.0f;
    double f = (double)nnz / (double)n;
    if (f > codec.topk_fraction) codec.topk_fraction = f > 1 ? 1 : f;
  }
  /* Stochastic rounding repeats with the job's seed, round and region. */
  uint64_t seed = job->spec.seed ^ ((uint64_t)job->offer_round * 0x9e3779b97f4a7c15ull) ^
                  xf_coord_site_id(co->cfg.region);
  xf_errctx err = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  if (xf_codec_encode(&codec, mean, n, codec.topk_fraction > 0 ? up->residual : NULL, seed,
                      &bytes, &len, &err) != XF_OK) {
    XF_ERROR("aggregate_not_encoded", "job=%s round=%u reason=\"%s\"", job->id_text,
             (unsigned)job->offer_round, err.msg);
    return false;
  }
  up->agg_bytes = bytes;
  up->agg_len = len;
  up->agg_encoded = true;
  return true;
}

/* Whether the region's aggregate may leave under the task's residency plan;
 * why says what fails. */
static bool may_leave(const xf__coord *co, const xf__job *job, uint32_t contributors, char *why,
                      size_t len) {
  const xf__residency *r = &co->up.residency;
  if (!r->present || strcmp(r->path, "regional") != 0) return true;
  const xf_privacy_spec *pv = &job->spec.privacy;
  if (contributors < (r->min_cohort ? r->min_cohort : 1)) {
    snprintf(why, len, "the aggregate holds %u sites; rule %s needs at least %u before it leaves "
             "region %s", (unsigned)contributors, r->rule, (unsigned)r->min_cohort, co->cfg.region);
    return false;
  }
  if (r->require_secagg && !job->spec.secure_aggregation.enabled) {
    snprintf(why, len, "rule %s lets the aggregate leave region %s only when it was securely "
             "aggregated", r->rule, co->cfg.region);
    return false;
  }
  if (r->has_max_epsilon && (pv->mode == XF_PRIVACY_NONE || !pv->has_target_epsilon ||
                             pv->target_epsilon > r->max_epsilon)) {
    snprintf(why, len, "rule %s lets the aggregate leave region %s only with differential "
             "privacy at epsilon <= %g", r->rule, co->cfg.region, r->max_epsilon);
    return false;
  }
  return true;
}

void xf__upstream_aggregate(xf__coord *co, const xf__job *job, float *mean, size_t n,
                            uint64_t weight, uint32_t contributors) {
  xf__upstream *up = &co->up;
  drop_aggregate(up);
  /* The last hop inside the region: hold the aggregate to the plan. */
  char why[400];
  const xf__residency *r = &up->residency;
  if (!may_leave(co, job, contributors, why, sizeof(why))) {
    XF_WARN("aggregate_held", "job=%s round=%u reason=\"%s\"", up->job_id, (unsigned)up->round,
            why);
    xf__audit(co, "refused_task", up->job_id,
              json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:I,s:s}", "job", up->job_id, "round",
                        (json_int_t)up->round, "attempt", (json_int_t)up->attempt, "kind",
                        "regional_aggregate", "from", co->cfg.region, "to",
                        r->coordinator_region, "contributors", (json_int_t)contributors, "why",
                        why));
    xf_free(mean);
    xf__upstream_failed(co, job, why);
    return;
  }
  if (r->present && strcmp(r->coordinator_region, co->cfg.region) != 0)
    xf__audit(co, "crossing", up->job_id,
              json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:I,s:I,s:s,s:I}", "job", up->job_id, "round",
                        (json_int_t)up->round, "attempt", (json_int_t)up->attempt, "kind",
                        "regional_aggregate", "from", co->cfg.region, "to",
                        r->coordinator_region, "contributors", (json_int_t)contributors,
                        "weight", (json_int_t)weight, "rule", r->rule, "policy_version",
                        (json_int_t)r->version));
  if (encode_aggregate(co, job, mean, n)) {
    xf_free(mean);
  } else {
    up->agg_bytes = (uint8_t *)mean;
    up->agg_len = n * sizeof(float);
    up->agg_encoded = false;
  }
  up->agg_plain_len = up->agg_len;
  up->agg_sealed = false;
  if (up->seal) {
    /* Sealed to the global coordinator's key for this attempt, once: a
     * resend after a reconnect carries the same bytes. */
    char ctx[256];
    size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), up->job_id, up->round,
                                            up->attempt, co->name);
    xf_seal_sender *ss = NULL;
    uint8_t *sealed = NULL;
    size_t sealed_len = 0;
    xf_err rc = xf_seal_sender_new(up->seal_pk, (const uint8_t *)ctx, ctx_len, &ss, up->agg_epk);
    if (rc == XF_OK)
      rc = xf_seal_stream(ss, up->agg_bytes, up->agg_len, XF_SEAL_STREAM_CHUNK, &sealed,
                          &sealed_len);
    xf_seal_sender_free(ss);
    if (rc != XF_OK) {
      XF_ERROR("aggregate_not_sealed", "job=%s round=%u reason=\"%s\"", up->job_id,
               (unsigned)up->round, xf_err_name(rc));
      drop_aggregate(up);
      xf__upstream_failed(co, job, "the region's aggregate could not be sealed");
      return;
    }
    xf_free(up->agg_bytes);
    up->agg_bytes = sealed;
    up->agg_len = sealed_len;
    up->agg_sealed = true;
  }
  up->agg_weight = weight;
  up->agg_contributors = contributors;
  send_aggregate(co);
}

void xf__upstream_failed(xf__coord *co, const xf__job *job, const char *why) {
  if (!co->up.peer) return;
  xf_session_send_error(co->up.peer->conn, XF_ENOENT, "job %s round %u at region %s: %s",
                        job->id_text, (unsigned)job->offer_round, co->cfg.region, why);
}

void xf__upstream_refuse(xf__coord *co, const xf__job *job, int reason, const char *details) {
  if (!co->up.peer) return;
  Xfed__TaskRefusal r = XFED__TASK_REFUSAL__INIT;
  r.job_id = (char *)job->id_text;
  r.round = job->offer_round;
  r.reason = (Xfed__TaskRefusal__Reason)reason;
  r.details = (char *)details;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_REFUSAL;
  env.task_refusal = &r;
  (void)xf__send(co->up.peer, &env);
}

void xf__upstream_eval_done(xf__coord *co, const xf__job *job) {
  if (!co->up.peer) return;
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.job_id = (char *)job->id_text;
  m.round = job->offer_round;
  m.attempt = job->offer_attempt;
  m.site = co->name;
  m.region = co->cfg.region;
  m.model_round = job->model_round;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS;
  env.metrics = &m;
  (void)xf__send(co->up.peer, &env);
}

void xf__upstream_forward(xf__coord *co, const Xfed__Envelope *env) {
  if (co->up.peer) (void)xf__send(co->up.peer, env);
}

/* ---- offers and their models ------------------------------------------------------------------ */

static xf_err model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  xf__upstream *up = user;
  XF_ENSURE(offset + len <= up->model_len, err, XF_ERANGE, "model bytes past the announced size");
  memcpy(up->model_buf + offset, data, len);
  return XF_OK;
}

static void on_offer(xf__coord *co, const Xfed__TaskOffer *o) {
  xf__upstream *up = &co->up;
  xf__job *job = co->active;
  if (job && job->phase != XF__PHASE_OVER) {
    bool same = o->job_id && strcmp(job->id_text, o->job_id) == 0 &&
                job->offer_round == o->round && job->offer_attempt == o->attempt &&
                job->evaluate_only == o->evaluate_only;
    if (same) { /* the global coordinator came back: carry on */
      accept_offer(co, o);
      up->offer_active = false;
      return;
    }
    refuse(co, o, XFED__TASK_REFUSAL__REASON__BUSY, "this region is busy with another task");
    return;
  }
  if (up->agg_bytes && same_task(up, o)) { /* the aggregate is still to be delivered */
    accept_offer(co, o);
    up->offer_active = false;
    send_aggregate(co);
    return;
  }
  drop_aggregate(up);
  xf_jobspec spec;
  xf_errctx err = {0};
  const char *pj = o->params_json ? o->params_json : "";
  if (xf_jobspec_parse_string(pj, strlen(pj), "task offer", &spec, &err) != XF_OK) {
    char why[700];
    snprintf(why, sizeof(why), "the job spec does not parse here: %s: %s", err.field, err.msg);
    refuse(co, o, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, why);
    return;
  }
  /* Under a residency policy the global coordinator's plan routes the job
   * through us; without one the spec asks for it. */
  const Xfed__Residency *res = o->residency;
  if (!res && spec.topology != XF_JOB_TOPOLOGY_REGIONAL) {
    refuse(co, o, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
           "sites behind a regional aggregator take part only in jobs with \"topology\": "
           "\"regional\"");
    return;
  }
  if (res && (!res->path || (strcmp(res->path, "direct") != 0 &&
                             strcmp(res->path, "regional") != 0) ||
              !res->coordinator_region || !*res->coordinator_region)) {
    refuse(co, o, XFED__TASK_REFUSAL__REASON__POLICY_DENIED,
           "the task's residency plan names no path out of this region");
    return;
  }
  if (set_residency(up, res) != XF_OK) {
    refuse(co, o, XFED__TASK_REFUSAL__REASON__BUSY, "out of memory");
    return;
  }
  bool any = false;
  for (xf__site *s = co->sites; s; s = s->next)
    any |= s->peer && xf__job_dataset(&spec, s) && named(up, s->name);
  if (!any) {
    refuse(co, o, XFED__TASK_REFUSAL__REASON__NO_DATASET,
           "no connected site of this region holds the job's dataset");
    return;
  }
  if (o->model_digest.len != XF_DIGEST_BYTES) {
    refuse(co, o, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the offer's model digest is not 32 bytes");
    return;
  }
  snprintf(up->job_id, sizeof(up->job_id), "%s", o->job_id ? o->job_id : "");
  up->round = o->round;
  up->attempt = o->attempt;
  up->model_round = o->model_round;
  up->evaluate_only = o->evaluate_only;
  up->deadline = (double)o->deadline_unix_ms / 1000.0;
  memcpy(up->model_digest.bytes, o->model_digest.data, XF_DIGEST_BYTES);
  up->seal = o->seal_key.len == XF_SEAL_PUBLICKEYBYTES;
  if (up->seal) memcpy(up->seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  xf_free(up->params_json);
  up->params_json = xf_strdup(pj);
  xf_tensor_receiver_free(up->model_rx);
  up->model_rx = NULL;
  xf_free(up->model_buf);
  up->model_buf = NULL;
  up->offer_active = up->params_json != NULL;
  accept_offer(co, o);
  XF_INFO("task_accepted", "job=%s round=%u attempt=%u eval=%d", up->job_id, (unsigned)up->round,
          (unsigned)up->attempt, up->evaluate_only ? 1 : 0);
}

static void on_model_frame(xf__coord *co, const Xfed__Envelope *env) {
  xf__upstream *up = &co->up;
  xf_errctx err = {0};
  if (!up->offer_active) return; /* a model we already have, or no offer */
  if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) {
    const Xfed__TensorBegin *b = env->tensor_begin;
    if (b->kind != XFED__TENSOR_BEGIN__KIND__MODEL || b->total_bytes == 0 ||
        b->total_bytes > XF_COORD_MODEL_MAX) {
      xf_session_send_error(up->peer->conn, XF_EFORMAT, "expected a model stream of at most 1 GiB");
      up->offer_active = false;
      return;
    }
    if (!up->model_rx) {
      up->model_len = b->total_bytes;
      up->model_buf = xf_malloc(up->model_len);
      if (!up->model_buf ||
          xf_tensor_receiver_new(up->model_len, model_sink, up, &up->model_rx, &err) != XF_OK) {
        up->offer_active = false;
        return;
      }
    }
  }
  if (!up->model_rx) return;
  xf_err rc = xf_tensor_receiver_handle(up->model_rx, env, &err);
  if (rc != XF_OK) {
    XF_WARN("model_stream_failed", "job=%s reason=\"%s\"", up->job_id, err.msg);
    xf_session_send_error(up->peer->conn, err.code, "%s", err.msg);
    up->offer_active = false;
    return;
  }
  if (!xf_tensor_receiver_complete(up->model_rx)) return;
  xf_tensor_receiver_free(up->model_rx);
  up->model_rx = NULL;
  up->offer_active = false;
  if (xf__job_start_relay(co, &err) != XF_OK) {
    XF_ERROR("relay_failed", "job=%s reason=\"%s\"", up->job_id, err.msg);
    xf_session_send_error(up->peer->conn, err.code, "job %s at region %s: %s", up->job_id,
                          co->cfg.region, err.msg);
  }
  xf_free(up->model_buf);
  up->model_buf = NULL;
}

static void on_ack(xf__coord *co, const Xfed__TensorAck *a) {
  xf__upstream *up = &co->up;
  xf__peer *p = up->peer;
  if (!p || !p->tx) return;
  xf_errctx err = {0};
  if (xf_tensor_sender_resume(p->tx, a->next_offset, &err) != XF_OK) {
    XF_WARN("aggregate_ack_bad", "reason=\"%s\"", err.msg);
    return;
  }
  if (a->next_offset == up->agg_len && xf_tensor_sender_offset(p->tx) == up->agg_len &&
      !p->tx_await_ack && !p->tx_pending) {
    /* Everything arrived and was verified. */
    XF_INFO("aggregate_delivered", "job=%s round=%u", up->job_id, (unsigned)up->round);
    xf__stream_stop(p);
    drop_aggregate(up);
    return;
  }
  p->tx_await_ack = false;
  xf__stream_pump(p);
}

void xf__upstream_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env) {
  xf__upstream *up = &co->up;
  if (!env) { /* the session opened */
    up->peer = p;
    up->dialing = false;
    up->backoff_s = BACKOFF_MIN_S;
    XF_INFO("upstream_connected", "upstream=%s:%d", co->cfg.upstream_host, co->cfg.upstream_port);
    xf__upstream_announce(co);
    return;
  }
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(co, env->task_offer); return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
  case XFED__ENVELOPE__BODY_TENSOR_END: on_model_frame(co, env); return;
  case XFED__ENVELOPE__BODY_TENSOR_ACK: on_ack(co, env->tensor_ack); return;
  case XFED__ENVELOPE__BODY_TASK_CANCEL: {
    const Xfed__TaskCancel *c = env->task_cancel;
    XF_INFO("task_cancelled", "job=%s round=%u reason=\"%s\"", c->job_id ? c->job_id : "",
            (unsigned)c->round, c->reason ? c->reason : "");
    if (co->active && c->job_id && strcmp(co->active->id_text, c->job_id) == 0)
      xf__job_cancel(co, c->reason ? c->reason : "cancelled upstream");
    if (up->agg_bytes && c->job_id && strcmp(up->job_id, c->job_id) == 0) {
      xf__stream_stop(p);
      drop_aggregate(up);
    }
    up->offer_active = false;
    return;
  }
  case XFED__ENVELOPE__BODY_ERROR:
    XF_WARN("upstream_error", "code=%u message=\"%s\"", (unsigned)env->error->code,
            env->error->message ? env->error->message : "");
    return;
  default:
    xf_session_send_error(p->conn, XF_EUNSUPPORTED, "%s is not for a regional aggregator",
                          xf_envelope_body_name(env));
    return;
  }
}
