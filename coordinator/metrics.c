/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's /metrics (Prometheus text exposition) and /healthz,
 * served on the daemon's loop (http/http.h), from what the daemon already
 * keeps: the journal (per job: rounds, bytes and epsilon as `xfed job
 * metrics` shows them), the connection guard's totals, the peers, and the
 * counts of stats.c (docs/metrics.md lists every series). Built with the
 * HTTP server (XF_HTTP); nohttp.c stands in for it without. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "job/jobprivacy.h"
#include "base/file.h"

static const char *const xf__peer_kind_names[] = {"unknown", "site", "regional", "cli",
                                                  "upstream"};
static const char *const xf__refusal_names[] = {"other", "policy", "budget", "target", "busy"};

/* ---- /metrics ----------------------------------------------------------------------------- */

static void connections(xf__coord *co, xf_prom *p) {
  size_t live[5] = {0};
  uint64_t in[5], out[5];
  memcpy(in, xf__coord_stats(co)->bytes_in, sizeof(in));
  memcpy(out, xf__coord_stats(co)->bytes_out, sizeof(out));
  for (const xf__peer *q = xf__peer_next(co, NULL); q; q = xf__peer_next(co, q)) {
    xf_conn *c = xf__peer_conn(q);
    unsigned kind = (unsigned)xf__peer_kind_of(q);
    if (!c || kind > XF__PEER_UPSTREAM) continue;
    if (xf_conn_is_open(c)) live[kind]++;
    in[kind] += xf_conn_bytes_in(c);
    out[kind] += xf_conn_bytes_out(c);
  }
  xf_prom_family(p, "xfed_peers_connected", "gauge",
                 "Open connections by peer kind (unknown: before the peer's first request).");
  for (size_t k = 0; k < 5; k++) {
    if (k == XF__PEER_UPSTREAM && !xf__coord_cfg(co)->regional) continue;
    const char *l[] = {"kind", xf__peer_kind_names[k], NULL};
    xf_prom_sample(p, "xfed_peers_connected", l, (double)live[k]);
  }
  xf_prom_family(p, "xfed_network_bytes_total", "counter",
                 "TLS bytes on the federation's connections, by direction and peer kind.");
  for (size_t k = 0; k < 5; k++) {
    if (k == XF__PEER_UPSTREAM && !xf__coord_cfg(co)->regional) continue;
    const char *ls[] = {"direction", "sent", "kind", xf__peer_kind_names[k], NULL};
    const char *lr[] = {"direction", "received", "kind", xf__peer_kind_names[k], NULL};
    xf_prom_sample(p, "xfed_network_bytes_total", ls, (double)out[k]);
    xf_prom_sample(p, "xfed_network_bytes_total", lr, (double)in[k]);
  }
  const xf_conn_guard *g = xf__coord_guard(co);
  xf_prom_family(p, "xfed_connections_accepted_total", "counter",
                 "Connections accepted since the start.");
  xf_prom_sample(p, "xfed_connections_accepted_total", NULL, (double)g->accepted);
  xf_prom_family(p, "xfed_connections_open", "gauge",
                 "Accepted connections open now: unauthenticated (TLS handshake or hello "
                 "running) and authenticated.");
  const char *lu[] = {"state", "unauthenticated", NULL}, *la[] = {"state", "authenticated", NULL};
  xf_prom_sample(p, "xfed_connections_open", lu, (double)g->unauthenticated);
  xf_prom_sample(p, "xfed_connections_open", la, (double)(g->open - g->unauthenticated));
  xf_prom_family(p, "xfed_connections_dropped_total", "counter",
                 "Unauthenticated connections dropped to admit a newer one, by the cap "
                 "(configuration key) that made room.");
  for (int c = 0; c < XF_CONN_CAP_COUNT; c++) {
    const char *l[] = {"cap", xf_conn_cap_name((xf_conn_cap)c), NULL};
    xf_prom_sample(p, "xfed_connections_dropped_total", l, (double)g->dropped[c]);
  }
  xf_prom_family(p, "xfed_connections_refused_total", "counter",
                 "Connections refused at accept or at the hello, by the cap (configuration "
                 "key) that refused them.");
  for (int c = 0; c < XF_CONN_CAP_COUNT; c++) {
    const char *l[] = {"cap", xf_conn_cap_name((xf_conn_cap)c), NULL};
    xf_prom_sample(p, "xfed_connections_refused_total", l, (double)g->refused[c]);
  }
  static const char *const end_names[] = {
#define XF__END_NAME(name, msg) #name,
      XF_CONN_END_MAP(XF__END_NAME)
#undef XF__END_NAME
  };
  xf_prom_family(p, "xfed_connections_ended_total", "counter",
                 "Accepted connections ended, by reason (lower case of net/conn.h's ends).");
  for (int e = 0; e < XF_CONN_END_COUNT; e++) {
    char name[32];
    size_t i = 0;
    for (; end_names[e][i] && i < sizeof(name) - 1; i++)
      name[i] = (char)(end_names[e][i] >= 'A' && end_names[e][i] <= 'Z' ? end_names[e][i] + 32
                                                                        : end_names[e][i]);
    name[i] = '\0';
    const char *l[] = {"reason", name, NULL};
    xf_prom_sample(p, "xfed_connections_ended_total", l, (double)g->ended[e]);
  }
}

/* Global role: per job, from the journal, as `xfed job metrics` shows it:
 * the newest XF__STATS_JOBS jobs. */
static void journal_jobs(xf__coord *co, xf_prom *p) {
  int64_t *ids = NULL;
  size_t n = 0;
  xf_errctx err = {0};
  if (xf_journal_all_jobs(xf__coord_db(co), &ids, &n, &err) != XF_OK) {
    XF_WARN("metrics_failed", "reason=\"%s\"", err.msg);
    return;
  }
  size_t first = n > XF__STATS_JOBS ? n - XF__STATS_JOBS : 0;
  xf_prom_family(p, "xfed_job_rounds_completed_total", "counter",
                 "Rounds of a job with a committed result (the journal's count).");
  typedef struct {
    char id[32];
    double rounds, up, down, eps;
    bool has_eps;
    const char *state;
  } row;
  row *rows = xf_calloc(n - first + 1, sizeof(*rows));
  if (!rows) goto out;
  size_t k = 0;
  for (size_t i = first; i < n; i++) {
    xf_journal_job jj;
    if (xf_journal_job_load(xf__coord_db(co), ids[i], &jj, &err) != XF_OK) continue;
    row *r = &rows[k++];
    snprintf(r->id, sizeof(r->id), "%" PRId64, ids[i]);
    r->rounds = jj.rounds_committed;
    r->state = xf_job_state_name(jj.state);
    xf_journal_metrics *v = NULL;
    size_t nv = 0;
    uint32_t last = 0;
    /* The newest round's rows only: a scrape costs the same whatever the
     * job's length. */
    if (xf_journal_metrics_newest_round(xf__coord_db(co), ids[i], UINT32_MAX, false, &last,
                                        &err) == XF_OK &&
        xf_journal_metrics_round(xf__coord_db(co), ids[i], last, &v, &nv, &err) == XF_OK) {
      /* epsilon as `xfed job metrics` shows the newest round: the job's own
       * account, or (sites that account for themselves) the largest a site
       * reported. */
      double eps = 0;
      if (last && xf_job_epsilon(&jj.spec, last, &eps)) {
        r->has_eps = true;
        r->eps = eps;
      } else {
        for (size_t j = 0; j < nv; j++)
          if (v[j].round == last && v[j].has_epsilon && (!r->has_eps || v[j].epsilon > r->eps)) {
            r->has_eps = true;
            r->eps = v[j].epsilon;
          }
      }
      xf_free(v);
    }
    uint64_t up = 0, down = 0;
    if (xf_journal_job_bytes(xf__coord_db(co), ids[i], &up, &down, &err) == XF_OK) {
      r->up = (double)up;
      r->down = (double)down;
    }
    const char *l[] = {"job_id", r->id, NULL};
    xf_prom_sample(p, "xfed_job_rounds_completed_total", l, r->rounds);
  }
  xf_prom_family(p, "xfed_job_info", "gauge", "Always 1; the job's state as a label.");
  for (size_t i = 0; i < k; i++) {
    const char *l[] = {"job_id", rows[i].id, "state", rows[i].state, NULL};
    xf_prom_sample(p, "xfed_job_info", l, 1);
  }
  xf_prom_family(p, "xfed_job_bytes_total", "counter",
                 "A job's model and update bytes by direction (up: sites to coordinator), the "
                 "sum of `xfed job metrics` rows.");
  for (size_t i = 0; i < k; i++) {
    const char *lu[] = {"direction", "up", "job_id", rows[i].id, NULL};
    const char *ld[] = {"direction", "down", "job_id", rows[i].id, NULL};
    xf_prom_sample(p, "xfed_job_bytes_total", lu, rows[i].up);
    xf_prom_sample(p, "xfed_job_bytes_total", ld, rows[i].down);
  }
  xf_prom_family(p, "xfed_job_epsilon", "gauge",
                 "Privacy spent by a job so far (epsilon of its newest round in `xfed job "
                 "metrics`); absent for jobs without differential privacy.");
  for (size_t i = 0; i < k; i++) {
    if (!rows[i].has_eps) continue;
    const char *l[] = {"job_id", rows[i].id, NULL};
    xf_prom_sample(p, "xfed_job_epsilon", l, rows[i].eps);
  }
  int64_t *queued = NULL;
  size_t nq = 0;
  if (xf_journal_queued_jobs(xf__coord_db(co), &queued, &nq, &err) == XF_OK) {
    xf_prom_family(p, "xfed_jobs_queued", "gauge", "Jobs waiting for their turn to start.");
    xf_prom_sample(p, "xfed_jobs_queued", NULL, (double)nq);
    xf_free(queued);
  }
out:
  xf_free(rows);
  xf_free(ids);
}

static void rounds(xf__coord *co, xf_prom *p) {
  const xf__stats *st = xf__coord_stats(co);
  if (xf__coord_cfg(co)->regional) {
    xf_prom_family(p, "xfed_job_rounds_completed_total", "counter",
                   "Rounds of a relayed task whose regional aggregate was made, since the start.");
    for (size_t i = 0; i < XF__STATS_JOBS; i++) {
      if (!st->jobs[i].job[0]) continue;
      const char *l[] = {"job_id", st->jobs[i].job, NULL};
      xf_prom_sample(p, "xfed_job_rounds_completed_total", l, (double)st->jobs[i].completed);
    }
  }
  xf_prom_family(p, "xfed_job_rounds_failed_total", "counter",
                 "Round attempts of a job that were retried or failed, since the start.");
  for (size_t i = 0; i < XF__STATS_JOBS; i++) {
    if (!st->jobs[i].job[0]) continue;
    const char *l[] = {"job_id", st->jobs[i].job, NULL};
    xf_prom_sample(p, "xfed_job_rounds_failed_total", l, (double)st->jobs[i].failed);
  }
  xf_prom_family(p, "xfed_round_duration_seconds", "histogram",
                 "From a round's offer to its committed result (regional: its aggregate).");
  xf_prom_histogram(p, "xfed_round_duration_seconds", NULL, &st->round_duration);
  xf_prom_family(p, "xfed_round_phase_duration_seconds", "histogram",
                 "Time a job spent in each phase of its rounds (coordinator/jobmachine.h).");
  for (int ph = XF_JOBM_CONFIRMING; ph <= XF_JOBM_EVALUATING; ph++) {
    const char *l[] = {"phase", xf_jobm_phase_name((xf_jobm_phase)ph), NULL};
    xf_prom_histogram(p, "xfed_round_phase_duration_seconds", l, &st->phase_duration[ph]);
  }
  xf_prom_family(p, "xfed_updates_received_total", "counter",
                 "Updates (and regional aggregates) received whole.");
  xf_prom_sample(p, "xfed_updates_received_total", NULL, (double)st->updates_received);
  xf_prom_family(p, "xfed_updates_refused_total", "counter",
                 "Updates refused or dropped, by reason (stream: the stream broke or did not "
                 "check out).");
  for (size_t r = 0; r < 5; r++) {
    const char *l[] = {"reason", xf__refusal_names[r], NULL};
    xf_prom_sample(p, "xfed_updates_refused_total", l, (double)st->updates_refused[r]);
  }
  const char *ls[] = {"reason", "stream", NULL};
  xf_prom_sample(p, "xfed_updates_refused_total", ls, (double)st->updates_dropped);
  if (!xf__coord_cfg(co)->regional) {
    xf_prom_family(p, "xfed_policy_decisions_total", "counter",
                   "Residency decisions per site, by outcome and the path (rule kind) that "
                   "decided: update (direct), regional_aggregate, or none.");
    static const char *const path_kinds[] = {"none", "update", "regional_aggregate"};
    for (int a = 1; a >= 0; a--)
      for (int k = 0; k < 3; k++) {
        if (a && k == 0) continue; /* an allowed site has a path */
        const char *l[] = {"decision", a ? "allow" : "deny", "kind", path_kinds[k], NULL};
        xf_prom_sample(p, "xfed_policy_decisions_total", l, (double)st->decisions[a][k]);
      }
  }
  size_t waiting = 0, staged = 0;
  for (const xf__run *run = xf__runs_first(co); run; run = xf__run_next(run))
    xf__takes_count(run, &waiting, &staged);
  xf_prom_family(p, "xfed_uploads_waiting", "gauge",
                 "Uploads announced and held back until fewer than max_staged are in flight.");
  xf_prom_sample(p, "xfed_uploads_waiting", NULL, (double)waiting);
  xf_prom_family(p, "xfed_uploads_in_flight", "gauge", "Uploads being received now.");
  xf_prom_sample(p, "xfed_uploads_in_flight", NULL, (double)staged);
  size_t active = xf__runs_active(co);
  xf_prom_family(p, "xfed_jobs_active", "gauge",
                 "Jobs (regional: relayed tasks) this process runs now.");
  xf_prom_sample(p, "xfed_jobs_active", NULL, (double)active);
}

static void on_metrics(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  (void)req;
  xf__coord *co = ctx;
  xf_prom p = {0};
  xf_prom_process(&p, xf__coord_cfg(co)->regional ? "xfed-coord-regional" : "xfed-coord");
  connections(co, &p);
  if (!xf__coord_cfg(co)->regional && xf__coord_db(co)) journal_jobs(co, &p);
  rounds(co, &p);
  resp->body = xf_prom_take(&p, &resp->body_len);
  if (!resp->body) {
    xf_http_reply_text(resp, 500, "out of memory while writing the metrics");
    return;
  }
  resp->content_type = XF_PROM_CONTENT_TYPE;
}

/* 200 while the loop runs (this handler runs on it) and the journal takes
 * writes; 503 while stopping or after a journal write failed. */
static void on_health(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  (void)req;
  xf__coord *co = ctx;
  bool journal_ok = xf__coord_cfg(co)->regional ? xf__coord_audit(co) != NULL
                                                : xf__coord_db(co) != NULL && !xf__journal_broken();
  bool ok = !xf__coord_stopping(co) && journal_ok;
  char body[256];
  int n = snprintf(body, sizeof(body),
                   "{\"status\": \"%s\", \"role\": \"%s\", \"loop\": %s, \"journal\": \"%s\"}\n",
                   ok ? "ok" : "unavailable", xf__coord_cfg(co)->regional ? "regional" : "global",
                   xf__coord_stopping(co) ? "false" : "true", journal_ok ? "ok" : "failing");
  resp->status = ok ? 200 : 503;
  resp->content_type = "application/json";
  resp->body = xf_malloc((size_t)n);
  if (resp->body) {
    memcpy(resp->body, body, (size_t)n);
    resp->body_len = (size_t)n;
  }
}

xf_err xf__metrics_start(xf__coord *co, xf_http **out, xf_errctx *err) {
  if (!xf__coord_cfg(co)->metrics_host[0]) return XF_OK;
  xf_http_opts o = {.host = xf__coord_cfg(co)->metrics_host,
                    .port = xf__coord_cfg(co)->metrics_port};
  xf_err rc = xf_http_start(xf__coord_loop(co), &o, out, err);
  if (rc != XF_OK) return rc;
  if ((rc = xf_http_route(*out, "GET", "/metrics", on_metrics, co)) != XF_OK ||
      (rc = xf_http_route(*out, "GET", "/healthz", on_health, co)) != XF_OK)
    return xf_fail(err, rc, "cannot route the metrics endpoints");
  int port = xf_http_port(*out);
  if (xf__coord_cfg(co)->metrics_port_file[0]) {
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d\n", port);
    if ((rc = xf_file_write_atomic(xf__coord_cfg(co)->metrics_port_file, buf, (size_t)n, 0644,
                                   err)) != XF_OK)
      return rc;
  }
  XF_INFO("metrics_listening", "address=%s port=%d paths=\"/metrics /healthz\"",
          xf__coord_cfg(co)->metrics_host, port);
  return XF_OK;
}

void xf__metrics_stop(xf_http **http) {
  xf_http_stop(*http);
  *http = NULL;
}
