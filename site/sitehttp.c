/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon's /metrics and /healthz (site/daemon_internal.h); built
 * without the HTTP server, a refusal of --metrics. On the loop thread. */
#include "site/daemon_internal.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/log.h"
#include "http/http.h"
#include "http/prom.h"
#include "privacy/ledger.h"

/* ---- /metrics and /healthz ------------------------------------------------------------------ */

#ifdef XF_HAVE_HTTP

static void on_metrics(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  (void)req;
  daemon_t *d = ctx;
  xf_prom p = {0};
  xf_prom_process(&p, "xfed-site");
  bool up = xf__site_session_open(d);
  xf_prom_family(&p, "xfed_peers_connected", "gauge",
                 "Open sessions with the coordinator (or regional aggregator): 0 or 1.");
  const char *lk[] = {"kind", "coordinator", NULL};
  xf_prom_sample(&p, "xfed_peers_connected", lk, up ? 1 : 0);
  uint64_t in = d->bytes_in_closed, out = d->bytes_out_closed;
  if (d->conn) {
    in += xf_conn_bytes_in(d->conn);
    out += xf_conn_bytes_out(d->conn);
  }
  xf_prom_family(&p, "xfed_network_bytes_total", "counter",
                 "TLS bytes on the connections to the coordinator, by direction.");
  const char *ls[] = {"direction", "sent", "kind", "coordinator", NULL};
  const char *lr[] = {"direction", "received", "kind", "coordinator", NULL};
  xf_prom_sample(&p, "xfed_network_bytes_total", ls, (double)out);
  xf_prom_sample(&p, "xfed_network_bytes_total", lr, (double)in);
  xf_prom_family(&p, "xfed_sessions_opened_total", "counter",
                 "Sessions opened with the coordinator since the start (reconnects count).");
  xf_prom_sample(&p, "xfed_sessions_opened_total", NULL, (double)d->sessions_opened);
  size_t by_phase[XF_SITEM_REPORTING + 1] = {0};
  for (int i = 0; i < xf_site_tasks_count(d->set); i++)
    by_phase[xf_site_task_phase(xf_site_tasks_at(d->set, i))]++;
  xf_prom_family(&p, "xfed_tasks", "gauge",
                 "Tasks the site holds, by phase (reporting: results waiting to be sent, the "
                 "upload queue).");
  for (int ph = 0; ph <= XF_SITEM_REPORTING; ph++) {
    const char *l[] = {"phase", xf_sitem_phase_name((xf_sitem_phase)ph), NULL};
    xf_prom_sample(&p, "xfed_tasks", l, (double)by_phase[ph]);
  }
  /* Privacy each job spent on each dataset, from the ledger (sites that
   * account for themselves: unit record, or unit site with mode local);
   * the newest 32 jobs per dataset keep the series bounded. */
  typedef struct {
    char dataset[XF_JOB_IDENT_MAX], job[64];
    double eps, releases;
  } spend;
  spend *rows = NULL;
  size_t n_rows = 0, cap = 0;
  xf_site_dataset *ds = NULL;
  size_t nds = 0;
  xf_errctx err = {0};
  if (xf_site_registry_list(d->reg, &ds, &nds, &err) == XF_OK) {
    for (size_t i = 0; i < nds; i++) {
      xf_ledger_job *jobs = NULL;
      size_t nj = 0;
      double delta = ds[i].budget_delta > 0 ? ds[i].budget_delta : XF_SITE_BUDGET_DELTA_DEFAULT;
      if (xf_ledger_jobs(xf_site_registry_db(d->reg), ds[i].name, delta, &jobs, &nj, &err) !=
          XF_OK)
        continue;
      for (size_t j = nj > 32 ? nj - 32 : 0; j < nj; j++) {
        if (n_rows == cap) {
          size_t nc = cap ? cap * 2 : 16;
          spend *r = xf_realloc(rows, nc * sizeof(*rows));
          if (!r) break;
          rows = r;
          cap = nc;
        }
        spend *r = &rows[n_rows++];
        snprintf(r->dataset, sizeof(r->dataset), "%s", ds[i].name);
        snprintf(r->job, sizeof(r->job), "%s", jobs[j].job);
        r->eps = jobs[j].epsilon;
        r->releases = jobs[j].rounds;
      }
      xf_free(jobs);
    }
    xf_site_dataset_list_free(ds, nds);
  }
  xf_prom_family(&p, "xfed_dataset_epsilon", "gauge",
                 "Epsilon a job has spent on a dataset (the site's privacy ledger, at the "
                 "dataset's budget delta).");
  for (size_t i = 0; i < n_rows; i++) {
    const char *l[] = {"dataset", rows[i].dataset, "job_id", rows[i].job, NULL};
    xf_prom_sample(&p, "xfed_dataset_epsilon", l, rows[i].eps);
  }
  xf_prom_family(&p, "xfed_dataset_releases_total", "counter",
                 "Updates a job released from a dataset under the site's privacy ledger.");
  for (size_t i = 0; i < n_rows; i++) {
    const char *l[] = {"dataset", rows[i].dataset, "job_id", rows[i].job, NULL};
    xf_prom_sample(&p, "xfed_dataset_releases_total", l, rows[i].releases);
  }
  xf_free(rows);
  resp->body = xf_prom_take(&p, &resp->body_len);
  if (!resp->body) {
    xf_http_reply_text(resp, 500, "out of memory while writing the metrics");
    return;
  }
  resp->content_type = XF_PROM_CONTENT_TYPE;
}

/* 200 while the loop runs and the site's database answers; 503 otherwise. */
static void on_health(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  (void)req;
  daemon_t *d = ctx;
  xf_site_dataset *ds = NULL;
  size_t nds = 0;
  xf_errctx err = {0};
  bool db_ok = xf_site_registry_list(d->reg, &ds, &nds, &err) == XF_OK;
  if (db_ok) xf_site_dataset_list_free(ds, nds);
  bool ok = db_ok && !d->stopping;
  char body[256];
  int n =
      snprintf(body, sizeof(body),
               "{\"status\": \"%s\", \"loop\": %s, \"database\": \"%s\", "
               "\"coordinator\": \"%s\"}\n",
               ok ? "ok" : "unavailable", d->stopping ? "false" : "true", db_ok ? "ok" : "failing",
               xf__site_session_open(d) ? "connected" : "not connected");
  resp->status = ok ? 200 : 503;
  resp->content_type = "application/json";
  resp->body = xf_malloc((size_t)n);
  if (resp->body) {
    memcpy(resp->body, body, (size_t)n);
    resp->body_len = (size_t)n;
  }
}

xf_err xf__site_metrics_start(daemon_t *d, const xf_site_daemon_opts *opts, xf_errctx *err) {
  if (!opts->metrics_host || !opts->metrics_host[0]) return XF_OK;
  xf_http_opts o = {.host = opts->metrics_host, .port = opts->metrics_port};
  XF_GUARD(xf_http_start(&d->loop, &o, &d->http, err));
  if (xf_http_route(d->http, "GET", "/metrics", on_metrics, d) != XF_OK ||
      xf_http_route(d->http, "GET", "/healthz", on_health, d) != XF_OK)
    return xf_fail(err, XF_EINTERNAL, "cannot route the metrics endpoints");
  int port = xf_http_port(d->http);
  if (opts->metrics_port_file && opts->metrics_port_file[0]) {
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d\n", port);
    XF_GUARD(xf_file_write_atomic(opts->metrics_port_file, buf, (size_t)n, 0644, err));
  }
  XF_INFO("metrics_listening", "address=%s port=%d paths=\"/metrics /healthz\"",
          opts->metrics_host, port);
  return XF_OK;
}

void xf__site_metrics_stop(daemon_t *d) {
  xf_http_stop(d->http);
  d->http = NULL;
}
#else
/* Built without the HTTP server (-DXF_HTTP=OFF): `xfed-site run` refuses
 * --metrics before it starts, and a caller that sets it anyway is refused
 * here. */
xf_err xf__site_metrics_start(daemon_t *d, const xf_site_daemon_opts *opts, xf_errctx *err) {
  (void)d;
  XF_ENSURE(!opts->metrics_host || !opts->metrics_host[0], err, XF_EUNSUPPORTED,
            "--metrics: this xfed-site was " XF_HTTP_ABSENT);
  return XF_OK;
}

void xf__site_metrics_stop(daemon_t *d) { (void)d; }
#endif
