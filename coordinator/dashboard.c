/* SPDX-License-Identifier: Apache-2.0 */
/* The global coordinator's read-only web dashboard (docs/dashboard.md):
 * HTTPS with the coordinator's own certificate, entered with a one-use
 * token `xfed dashboard` gets over the CLI session and exchanged for a
 * session cookie; the page (compiled in from coordinator/dashboard/), the
 * Chart.js Debian installs, and a JSON API over the journal, the policy and
 * the audit trail. Every other request is 401. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "coordinator/dashboard_assets.h"
#include "coordinator/dashtoken.h"
#include "job/jobprivacy.h"
#include "job/jobprogress.h"
#include "job/jobspec.h"
#include "base/file.h"

/* Where Debian's libjs-chart.js puts Chart.js (3.x: chart.min.js; 4.x:
 * chart.umd.js), tried in order; XF_CHARTJS names another file. */
static const char *const CHARTJS_PATHS[] = {"/usr/share/javascript/chart.js/chart.min.js",
                                            "/usr/share/javascript/chart.js/chart.umd.min.js",
                                            "/usr/share/javascript/chart.js/chart.umd.js",
                                            "/usr/share/javascript/chart.js/chart.js"};
#define CHARTJS_MAX_BYTES (8u << 20)
#define COOKIE "xf_dash"
/* Jobs the jobs API lists at most, the newest. */
#define JOBS_SHOWN 200

struct xf__dashboard {
  xf_http *http;
  xf_dash_tokens *tokens;
  char *chartjs;
  size_t chartjs_len;
};

/* ---- responses ---------------------------------------------------------------------- */

static void secure_headers(xf_http_response *resp) {
  xf_http_add_header(resp, "Cache-Control", "no-store");
  xf_http_add_header(resp, "X-Content-Type-Options", "nosniff");
  xf_http_add_header(resp, "Referrer-Policy", "no-referrer");
  xf_http_add_header(resp, "X-Frame-Options", "DENY");
  xf_http_add_header(resp, "Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; "
                     "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                     "base-uri 'none'; form-action 'none'");
}

static void reply_bytes(xf_http_response *resp, const char *type, const void *data, size_t len) {
  resp->body = xf_malloc(len ? len : 1);
  if (!resp->body) {
    xf_http_reply_text(resp, 500, "out of memory");
    return;
  }
  memcpy(resp->body, data, len);
  resp->body_len = len;
  resp->content_type = type;
}

/* Takes the reference to v. */
static void reply_json(xf_http_response *resp, json_t *v) {
  char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
  json_decref(v);
  if (!text) {
    xf_http_reply_text(resp, 500, "out of memory while writing the answer");
    return;
  }
  reply_bytes(resp, "application/json", text, strlen(text));
  free(text); /* jansson's */
}

static void reply_fault(xf_http_response *resp, const xf_errctx *err) {
  xf_http_reply_text(resp, 500, "%s", err->msg);
}

static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* ---- access ------------------------------------------------------------------------- */

/* The session cookie's value, copied into out; false when there is none. */
static bool cookie_of(const xf_http_request *req, char out[XF_DASH_SECRET_HEX]) {
  const char *h = xf_http_header(req, "Cookie");
  for (const char *p = h; p && *p;) {
    while (*p == ' ' || *p == ';') p++;
    size_t k = strlen(COOKIE);
    if (strncmp(p, COOKIE "=", k + 1) == 0) {
      p += k + 1;
      size_t n = strcspn(p, "; ");
      if (n != XF_DASH_SECRET_HEX - 1) return false;
      memcpy(out, p, n);
      out[n] = '\0';
      return true;
    }
    p = strchr(p, ';');
  }
  return false;
}

/* True with the session's role; else resp is a 401 that says how in. */
static bool admitted(xf__coord *co, const xf_http_request *req, xf_http_response *resp,
                     int *role) {
  char s[XF_DASH_SECRET_HEX];
  secure_headers(resp);
  if (cookie_of(req, s) && xf_dash_session(xf__coord_dashboard(co)->tokens, s, xf__now(), role))
    return true;
  xf_http_reply_text(resp, 401,
                     "no dashboard session: open the URL 'xfed dashboard' prints (its token "
                     "works once and for at most an hour)\n");
  return false;
}

/* GET /login?token=T: the token, spent, becomes the session cookie. */
static void on_login(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  xf__coord *co = ctx;
  secure_headers(resp);
  const char *token = xf_http_query_arg(req, "token");
  char session[XF_DASH_SECRET_HEX];
  int role = 0;
  double expires = 0, now = xf__now();
  if (!token ||
      !xf_dash_exchange(xf__coord_dashboard(co)->tokens, token, now, session, &role, &expires)) {
    XF_WARN("dashboard_login_refused", "why=\"no such token, spent or expired\"");
    xf_http_reply_text(resp, 401,
                       "this dashboard token is unknown, spent or expired: run 'xfed "
                       "dashboard' for a new URL\n");
    return;
  }
  char cookie[256];
  snprintf(cookie, sizeof(cookie), COOKIE "=%s; Max-Age=%.0f; Path=/; HttpOnly; Secure; "
           "SameSite=Strict", session, ceil(expires - now));
  sodium_memzero(session, sizeof(session));
  xf_http_add_header(resp, "Set-Cookie", cookie);
  sodium_memzero(cookie, sizeof(cookie));
  xf_http_add_header(resp, "Location", "/");
  resp->status = 303;
  XF_INFO("dashboard_session", "role=%s expires_in_s=%.0f", xf_pki_role_name((xf_pki_role)role),
          expires - now);
}

/* ---- the page ----------------------------------------------------------------------- */

static const char *type_of(const char *name) {
  const char *dot = strrchr(name, '.');
  if (dot && strcmp(dot, ".html") == 0) return "text/html; charset=utf-8";
  if (dot && strcmp(dot, ".js") == 0) return "text/javascript; charset=utf-8";
  if (dot && strcmp(dot, ".css") == 0) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

/* GET / and GET /static/NAME: the compiled-in files and Chart.js. */
static void on_page(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  xf__coord *co = ctx;
  int role;
  if (!admitted(co, req, resp, &role)) return;
  const char *name = strcmp(req->path, "/") == 0 ? "index.html" : NULL;
  if (!name && strncmp(req->path, "/static/", 8) == 0) name = req->path + 8;
  if (name && strcmp(name, "chart.js") == 0) {
    reply_bytes(resp, "text/javascript; charset=utf-8", xf__coord_dashboard(co)->chartjs,
                xf__coord_dashboard(co)->chartjs_len);
    return;
  }
  for (size_t i = 0; name && i < xf__dash_n_assets; i++)
    if (strcmp(xf__dash_assets[i].name, name) == 0) {
      reply_bytes(resp, type_of(name), xf__dash_assets[i].data, xf__dash_assets[i].len);
      return;
    }
  xf_http_reply_text(resp, 404, "no such page: %s\n", req->path);
}

/* ---- the API ------------------------------------------------------------------------ */

/* What the page says where a figure is missing, in the words of `xfed job
 * report` and `xfed job status` (job/jobprogress.h). */
static json_t *notes_json(void) {
  return json_pack("{s:s,s:s,s:s,s:s,s:s}", "accuracy", XF_JOB_NOTE_NO_ACCURACY, "loss",
                   XF_JOB_NOTE_NO_LOSS, "epsilon", XF_JOB_NOTE_NO_EPSILON, "bytes",
                   XF_JOB_NOTE_NO_BYTES, "train_loss_kept", XF_JOB_NOTE_TRAIN_LOSS_KEPT);
}

static void api_jobs(xf__coord *co, xf_http_response *resp) {
  int64_t *ids = NULL;
  size_t n = 0;
  xf_errctx err = {0};
  if (xf_journal_all_jobs(xf__coord_db(co), &ids, &n, &err) != XF_OK) {
    reply_fault(resp, &err);
    return;
  }
  json_t *arr = json_array();
  size_t from = n > JOBS_SHOWN ? n - JOBS_SHOWN : 0;
  for (size_t i = n; arr && i-- > from;) {
    json_t *j = xf__job_info_json(co, ids[i], &err);
    if (!j) {
      json_decref(arr);
      xf_free(ids);
      reply_fault(resp, &err);
      return;
    }
    json_array_append_new(arr, j);
  }
  xf_free(ids);
  reply_json(resp, json_pack("{s:o,s:f,s:o}", "jobs", arr ? arr : json_array(), "now", xf__now(),
                             "notes", notes_json()));
}

/* One row per round and site, as `xfed job metrics` shows them. */
static void api_metrics(xf__coord *co, const char *id_text, xf_http_response *resp) {
  int64_t id;
  xf_errctx err = {0};
  if (xf_job_id_parse(id_text, &id, &err) != XF_OK) {
    xf_http_reply_text(resp, 404, "%s\n", err.msg);
    return;
  }
  xf_journal_job jj;
  xf_journal_metrics *v = NULL;
  size_t n = 0;
  if (xf_journal_job_load(xf__coord_db(co), id, &jj, &err) != XF_OK ||
      xf_journal_metrics_job(xf__coord_db(co), id, &v, &n, &err) != XF_OK) {
    xf_http_reply_text(resp, err.code == XF_ENOENT ? 404 : 500, "%s\n", err.msg);
    return;
  }
  json_t *rows = json_array();
  uint32_t eps_round = 0;
  bool has_eps = false;
  double eps = NAN;
  for (size_t i = 0; rows && i < n; i++) {
    char site[XF_COORD_NAME_MAX], region[XF_COORD_NAME_MAX];
    xf_errctx name_err = {0};
    if (xf_journal_site_name(xf__coord_db(co), v[i].site, site, sizeof(site), region,
                             sizeof(region), &name_err) != XF_OK) {
      snprintf(site, sizeof(site), "%" PRIu64, v[i].site);
      region[0] = '\0';
    }
    if (v[i].round != eps_round) {
      eps_round = v[i].round;
      has_eps = xf_job_epsilon(&jj.spec, eps_round, &eps);
    }
    double e = has_eps ? eps : v[i].has_epsilon ? v[i].epsilon : NAN;
    uint64_t up, down;
    xf_journal_metrics_bytes(&v[i], &up, &down);
    json_array_append_new(
        rows, json_pack("{s:I,s:s,s:s,s:o,s:o,s:o,s:I,s:I,s:I,s:o}", "round",
                        (json_int_t)v[i].round, "site", site, "region", region, "train_loss",
                        number(v[i].train_loss), "test_loss", number(v[i].test_loss),
                        "test_accuracy", number(v[i].test_accuracy), "samples",
                        (json_int_t)v[i].samples, "bytes_up", (json_int_t)up,
                        "bytes_down", (json_int_t)down, "epsilon", number(e)));
  }
  xf_free(v);
  reply_json(resp, json_pack("{s:I,s:o}", "job_id", (json_int_t)id, "rows",
                             rows ? rows : json_array()));
}

/* The sites the coordinator knows and the datasets they announced, as
 * admission sees them (xf__federation_make): the sites that train, with the
 * residency policy off as with it on. */
static void api_sites(xf__coord *co, xf_http_response *resp) {
  xf__federation f;
  if (xf__federation_make(co, &f) != XF_OK) {
    xf_http_reply_text(resp, 500, "out of memory while listing the sites");
    return;
  }
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < f.fed.n_sites; i++) {
    const xf_fed_site *fs = &f.fed.sites[i];
    json_t *sets = json_array();
    for (size_t d = 0; sets && d < fs->n_datasets; d++) {
      const xf_fed_dataset *ds = &fs->datasets[d];
      json_t *tags = json_array();
      for (size_t t = 0; tags && t < ds->n_tags; t++)
        json_array_append_new(tags, json_string(ds->tags[t]));
      json_array_append_new(sets, json_pack("{s:s,s:I,s:I,s:o}", "name", ds->name,
                                            "train_records", (json_int_t)ds->train_records,
                                            "test_records", (json_int_t)ds->test_records,
                                            "tags", tags ? tags : json_array()));
    }
    json_array_append_new(arr, json_pack("{s:s,s:s,s:o,s:b,s:o}", "name", fs->name, "region",
                                         fs->region, "via",
                                         fs->via ? json_string(fs->via) : json_null(),
                                         "connected", fs->connected, "datasets",
                                         sets ? sets : json_array()));
  }
  bool residency_on = f.fed.residency_on;
  xf__federation_free(&f);
  reply_json(resp, json_pack("{s:o,s:b}", "sites", arr ? arr : json_array(), "residency_policy",
                             residency_on));
}

/* The current policy (its regions, sites, datasets and rules) and every
 * version. */
static void api_policy(xf__coord *co, xf_http_response *resp) {
  xf_errctx err = {0};
  uint64_t current = 0;
  xf_policy_version_info *log = NULL;
  size_t n = 0;
  char *doc = NULL;
  if (xf_policy_version_current(xf__coord_db(co), &current, &err) != XF_OK ||
      xf_policy_log(xf__coord_db(co), &log, &n, &err) != XF_OK ||
      (current && xf_policy_export(xf__coord_db(co), current, &doc, &err) != XF_OK)) {
    xf_policy_log_free(log, n);
    reply_fault(resp, &err);
    return;
  }
  json_t *versions = json_array();
  for (size_t i = 0; versions && i < n; i++)
    json_array_append_new(versions, json_pack("{s:I,s:f,s:s,s:s}", "version",
                                              (json_int_t)log[i].version, "at", log[i].at,
                                              "author", log[i].author, "reason", log[i].reason));
  xf_policy_log_free(log, n);
  json_t *document = doc ? json_loads(doc, 0, NULL) : json_null();
  xf_free(doc);
  reply_json(resp, json_pack("{s:I,s:o,s:o}", "current", (json_int_t)current, "versions",
                             versions ? versions : json_array(), "document",
                             document ? document : json_null()));
}

static void api_policy_diff(xf__coord *co, const xf_http_request *req, xf_http_response *resp) {
  const char *f = xf_http_query_arg(req, "from"), *t = xf_http_query_arg(req, "to");
  char *end1 = NULL, *end2 = NULL;
  unsigned long long from = f ? strtoull(f, &end1, 10) : 0, to = t ? strtoull(t, &end2, 10) : 0;
  if (!f || !t || !*f || !*t || *end1 || *end2) {
    xf_http_reply_text(resp, 400, "a diff needs ?from=VERSION&to=VERSION\n");
    return;
  }
  xf_errctx err = {0};
  char *text = NULL;
  if (xf_policy_diff(xf__coord_db(co), from, to, &text, &err) != XF_OK) {
    xf_http_reply_text(resp, err.code == XF_ENOENT ? 404 : 500, "%s\n", err.msg);
    return;
  }
  reply_json(resp, json_pack("{s:I,s:I,s:s}", "from", (json_int_t)from, "to", (json_int_t)to,
                             "diff", text));
  xf_free(text);
}

/* The audit trail's state, for the roles that may read it (as `xfed audit
 * verify`); for others an answer that says who may. */
static void api_audit(xf__coord *co, int role, xf_http_response *resp) {
  if (role != XF_PKI_ROLE_COMPLIANCE && role != XF_PKI_ROLE_ADMIN) {
    reply_json(resp, json_pack("{s:b,s:s}", "allowed", 0, "why",
                               "only a compliance or admin identity may read the audit trail"));
    return;
  }
  if (!xf__coord_audit(co)) {
    reply_json(resp, json_pack("{s:b,s:s}", "allowed", 0, "why",
                               "this coordinator keeps no audit trail"));
    return;
  }
  xf_audit_verdict v;
  memset(&v, 0, sizeof(v));
  xf_errctx err = {0};
  if (xf_audit_verify(xf__coord_audit(co), &v, &err) != XF_OK) {
    reply_fault(resp, &err);
    return;
  }
  reply_json(resp, json_pack("{s:b,s:b,s:I,s:s,s:s,s:I,s:s}", "allowed", 1, "intact",
                             v.fault == XF_AUDIT_INTACT, "rows", (json_int_t)v.rows, "fault",
                             xf_audit_fault_name(v.fault), "what", v.what, "head_seq",
                             (json_int_t)v.head.seq, "head_digest", v.head.digest));
}

/* GET /api/...: the JSON the page polls. */
static void on_api(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  xf__coord *co = ctx;
  int role;
  if (!admitted(co, req, resp, &role)) return;
  const char *p = req->path;
  char id[32];
  int used = 0;
  if (strcmp(p, "/api/jobs") == 0) api_jobs(co, resp);
  else if (sscanf(p, "/api/jobs/%31[0-9]/metrics%n", id, &used) == 1 && p[used] == '\0')
    api_metrics(co, id, resp);
  else if (strcmp(p, "/api/sites") == 0) api_sites(co, resp);
  else if (strcmp(p, "/api/policy") == 0) api_policy(co, resp);
  else if (strcmp(p, "/api/policy/diff") == 0) api_policy_diff(co, req, resp);
  else if (strcmp(p, "/api/audit") == 0) api_audit(co, role, resp);
  else if (strcmp(p, "/api/whoami") == 0)
    reply_json(resp, json_pack("{s:s,s:s}", "role", xf_pki_role_name((xf_pki_role)role),
                               "coordinator", xf__coord_name(co)));
  else xf_http_reply_text(resp, 404, "no such API: %s\n", p);
}

/* ---- the grant over the CLI session ----------------------------------------------------- */

void xf__dashboard_grant(xf__coord *co, xf__peer *p, const Xfed__DashboardRequest *m) {
  char user[XF_SPIFFE_MAX];
  if (xf_spiffe_format(xf__peer_id(p), user, NULL) != XF_OK) snprintf(user, 2, "?");
  if (xf__peer_id(p)->role == XF_PKI_ROLE_NONE) {
    XF_WARN("request_denied", "user=%s request=dashboard", user);
    xf_session_send_error(xf__peer_conn(p), XF_EDENIED,
                          "only user certificates may open the dashboard; %s is not one", user);
    return;
  }
  if (!xf__coord_dashboard(co)) {
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED,
                          "this coordinator serves no dashboard: its operator starts it with "
                          "--dashboard [HOST:]PORT (docs/dashboard.md)");
    return;
  }
  char token[XF_DASH_SECRET_HEX];
  double expires = 0;
  xf_errctx err = {0};
  if (xf_dash_issue(xf__coord_dashboard(co)->tokens, xf__now(), m->ttl_s, (int)xf__peer_id(p)->role,
                    token, &expires, &err) != XF_OK) {
    xf_session_send_error(xf__peer_conn(p), err.code, "%s", err.msg);
    return;
  }
  Xfed__DashboardGrant g = XFED__DASHBOARD_GRANT__INIT;
  g.token = token;
  g.expires = expires;
  g.host = (char *)xf__coord_cfg(co)->dashboard_host;
  g.port = (uint32_t)xf_http_port(xf__coord_dashboard(co)->http);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_DASHBOARD_GRANT;
  env.dashboard_grant = &g;
  XF_INFO("dashboard_token", "user=%s ttl_s=%.0f", user, expires - xf__now());
  (void)xf__send(p, &env);
  sodium_memzero(token, sizeof(token));
}

/* ---- start and stop ---------------------------------------------------------------------- */

/* What both refusals below end with: the Debian package, which the
 * xfed-coordinator package recommends, and where it puts Chart.js. */
#define CHARTJS_HOW_TO_INSTALL                                                                 \
  "install Debian's package libjs-chart.js (apt-get install libjs-chart.js), which puts it in " \
  "/usr/share/javascript/chart.js/, or point XF_CHARTJS at a readable chart.min.js"

static xf_err load_chartjs(xf__dashboard *d, xf_errctx *err) {
  const char *env = getenv("XF_CHARTJS");
  if (env && *env) {
    xf_errctx why = {0};
    xf_err rc = xf_file_read_text(env, CHARTJS_MAX_BYTES, &d->chartjs, &d->chartjs_len, &why);
    if (rc != XF_OK)
      return xf_fail(err, rc,
                     "XF_CHARTJS names '%s', which cannot be read as Chart.js%s%s; "
                     CHARTJS_HOW_TO_INSTALL,
                     env, why.msg[0] ? ": " : "", why.msg);
    return XF_OK;
  }
  for (size_t i = 0; i < sizeof(CHARTJS_PATHS) / sizeof(CHARTJS_PATHS[0]); i++) {
    xf_errctx quiet = {0};
    if (xf_file_read_text(CHARTJS_PATHS[i], CHARTJS_MAX_BYTES, &d->chartjs, &d->chartjs_len,
                          &quiet) == XF_OK)
      return XF_OK;
  }
  return xf_fail(err, XF_ENOENT,
                 "the dashboard draws its curves with Chart.js, and none of %s, %s, %s or %s "
                 "exists: " CHARTJS_HOW_TO_INSTALL,
                 CHARTJS_PATHS[0], CHARTJS_PATHS[1], CHARTJS_PATHS[2], CHARTJS_PATHS[3]);
}

xf_err xf__dashboard_start(xf__coord *co, xf__dashboard **out, xf_errctx *err) {
  if (!xf__coord_cfg(co)->dashboard_host[0]) return XF_OK;
  XF_ENSURE(!xf__coord_cfg(co)->regional && xf__coord_db(co), err, XF_EUSAGE,
            "--dashboard is for the global coordinator; a regional aggregator has no jobs to "
            "show");
  xf__dashboard *d = xf_calloc(1, sizeof(*d));
  if (!d || !(d->tokens = xf_dash_tokens_new())) {
    xf_free(d);
    return xf_fail(err, XF_ENOMEM, "out of memory");
  }
  *out = d;
  XF_GUARD(load_chartjs(d, err));
  xf_http_opts o = {.host = xf__coord_cfg(co)->dashboard_host,
                    .port = xf__coord_cfg(co)->dashboard_port,
                    .cert_file = xf__coord_cfg(co)->cert,
                    .key_file = xf__coord_cfg(co)->key};
  XF_GUARD(xf_http_start(xf__coord_loop(co), &o, &d->http, err));
  xf_err rc;
  if ((rc = xf_http_route(d->http, "GET", "/", on_page, co)) != XF_OK ||
      (rc = xf_http_route(d->http, "GET", "/login", on_login, co)) != XF_OK ||
      (rc = xf_http_route(d->http, "GET", "/api", on_api, co)) != XF_OK)
    return xf_fail(err, rc, "cannot route the dashboard's pages");
  int port = xf_http_port(d->http);
  if (xf__coord_cfg(co)->dashboard_port_file[0]) {
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d\n", port);
    XF_GUARD(
        xf_file_write_atomic(xf__coord_cfg(co)->dashboard_port_file, buf, (size_t)n, 0644, err));
  }
  XF_INFO("dashboard_listening", "address=%s port=%d tls=true", xf__coord_cfg(co)->dashboard_host,
          port);
  return XF_OK;
}

void xf__dashboard_stop(xf__dashboard **dash) {
  xf__dashboard *d = *dash;
  if (!d) return;
  xf_http_stop(d->http);
  xf_dash_tokens_free(d->tokens);
  xf_free(d->chartjs);
  xf_free(d);
  *dash = NULL;
}
