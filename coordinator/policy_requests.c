/* SPDX-License-Identifier: Apache-2.0 */
/* The compliance team's requests to the global coordinator: read, diff,
 * check and push the residency policy, and read and verify the audit trail
 * (docs/protocol.md, "CLI ↔ coordinator"; docs/policy.md; docs/audit.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "job/jobspec.h"

/* What one reply's text may hold: well below the 4 MiB frame
 * (XF_FRAME_MAX_DEFAULT), leaving room for the envelope around it. */
#define XF__REPLY_TEXT_MAX (3u << 20)
/* Audit rows per page: the default when the query says 0, and the most a
 * query may ask for. */
#define XF__AUDIT_PAGE 500
#define XF__AUDIT_PAGE_MAX 5000
/* The diff a policy_change row carries is cut here: the trail records what
 * changed for a person to read, and the versions themselves are kept whole
 * in the version table. */
#define XF__AUDIT_DIFF_MAX (64u << 10)

static void reply_error(xf__peer *p, xf_err code, const xf_errctx *err) {
  char msg[900];
  if (err->file[0] && err->field[0])
    snprintf(msg, sizeof(msg), "%s: %s: %s", err->file, err->field, err->msg);
  else if (err->field[0])
    snprintf(msg, sizeof(msg), "%s: %s", err->field, err->msg);
  else
    snprintf(msg, sizeof(msg), "%s", err->msg[0] ? err->msg : xf_strerror(code));
  xf_session_send_error(p->conn, code, "%s", msg);
}

static const char *str(const char *s) { return s ? s : ""; }

static void reply_policy(xf__peer *p, uint64_t version, const char *text, bool allowed,
                         const char *region) {
  if (text && strlen(text) > XF__REPLY_TEXT_MAX) {
    xf_session_send_error(p->conn, XF_ERANGE,
                          "the answer is %zu bytes, more than one reply carries (%u)",
                          strlen(text), XF__REPLY_TEXT_MAX);
    return;
  }
  Xfed__PolicyReply r = XFED__POLICY_REPLY__INIT;
  r.version = version;
  r.text = (char *)str(text);
  r.allowed = allowed;
  r.coordinator_region = (char *)str(region);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_POLICY_REPLY;
  env.policy_reply = &r;
  (void)xf__send(p, &env);
}

static bool may_change(const xf__peer *p) {
  return p->id.role == XF_PKI_ROLE_COMPLIANCE || p->id.role == XF_PKI_ROLE_ADMIN;
}

static bool is_user(const xf__peer *p) {
  return p->id.role == XF_PKI_ROLE_RESEARCHER || may_change(p);
}

/* ---- the policy ------------------------------------------------------------------------ */

/* The diff of a change for its audit row, cut at XF__AUDIT_DIFF_MAX. */
static json_t *change_diff(xf__coord *co, uint64_t from, uint64_t to) {
  char *text = NULL;
  xf_errctx err = {0};
  if (xf_policy_diff(co->db, from, to, &text, &err) != XF_OK)
    return json_sprintf("(no diff: %s)", err.msg);
  size_t len = strlen(text);
  json_t *j = len <= XF__AUDIT_DIFF_MAX
                  ? json_string(text)
                  : json_sprintf("%.*s... (%zu more bytes)", (int)XF__AUDIT_DIFF_MAX, text,
                                 len - XF__AUDIT_DIFF_MAX);
  xf_free(text);
  return j;
}

static void on_push(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m,
                    const char *user) {
  if (!may_change(p)) {
    XF_WARN("request_denied", "user=%s request=policy_push", user);
    xf_session_send_error(p->conn, XF_EDENIED,
                          "only a compliance or admin identity may change the residency "
                          "policy; %s is a %s",
                          user, xf_pki_role_name(p->id.role));
    return;
  }
  const char *reason = str(m->reason);
  if (!*reason) {
    xf_session_send_error(p->conn, XF_EINVAL,
                          "reason: every policy change records why it was made");
    return;
  }
  xf_errctx err = {0};
  uint64_t prev = 0, v = 0;
  /* The compare and the import run in one turn of the single-threaded loop,
   * and the journal has no other writer of the version table: nothing can
   * move the version in between. */
  if (xf_policy_version_current(co->db, &prev, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  if (m->has_base && prev != m->base_version) {
    XF_WARN("policy_push_stale", "user=%s base=%" PRIu64 " current=%" PRIu64, user,
            m->base_version, prev);
    xf_session_send_error(p->conn, XF_EINVAL,
                          "the policy moved on to version %" PRIu64 " since version %" PRIu64
                          " this change was drafted on; export it again and redo the change",
                          prev, m->base_version);
    return;
  }
  if (xf_policy_import(co->db, str(m->document_json), user, reason, xf__now(), &v, &err) !=
      XF_OK) {
    /* The field names a place in the document, never its contents. */
    XF_WARN("policy_push_refused", "user=%s current=%" PRIu64 " code=%s field=\"%s\"", user,
            prev, xf_strerror(err.code), err.field);
    reply_error(p, err.code, &err);
    return;
  }
  XF_INFO("policy_pushed", "user=%s version=%" PRIu64 " previous=%" PRIu64, user, v, prev);
  xf__audit(co, "policy_change", "policy",
            json_pack("{s:I,s:o,s:I,s:s,s:s,s:o}", "version", (json_int_t)v, "base",
                      m->has_base ? json_integer((json_int_t)m->base_version) : json_null(),
                      "previous", (json_int_t)prev, "author", user, "reason", reason, "diff",
                      change_diff(co, prev, v)));
  xf__runs_dirty(co); /* decided again: a paused job may resume, a running one pause */
  reply_policy(p, v, NULL, false, co->cfg.region);
}

static void on_export(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  xf_errctx err = {0};
  uint64_t current = 0, v = m->version;
  char *doc = NULL;
  if (xf_policy_version_current(co->db, &current, &err) != XF_OK ||
      xf_policy_export(co->db, v ? v : current, &doc, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  reply_policy(p, v ? v : current, doc, false, co->cfg.region);
  xf_free(doc);
}

static void on_log(xf__coord *co, xf__peer *p) {
  xf_errctx err = {0};
  xf_policy_version_info *log = NULL;
  size_t n = 0;
  if (xf_policy_log(co->db, &log, &n, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  json_t *arr = json_array();
  bool ok = arr != NULL;
  for (size_t i = 0; ok && i < n; i++)
    ok = json_array_append_new(arr, json_pack("{s:I,s:f,s:s,s:s}", "version",
                                              (json_int_t)log[i].version, "at", log[i].at,
                                              "author", log[i].author, "reason",
                                              log[i].reason)) == 0;
  uint64_t current = n ? log[n - 1].version : 0;
  xf_policy_log_free(log, n);
  char *text = ok ? json_dumps(arr, JSON_COMPACT) : NULL;
  json_decref(arr);
  if (!text) {
    xf_session_send_error(p->conn, XF_ENOMEM, "out of memory");
    return;
  }
  reply_policy(p, current, text, false, co->cfg.region);
  free(text); /* jansson's */
}

static void on_diff(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  xf_errctx err = {0};
  uint64_t current = 0;
  char *text = NULL;
  if (xf_policy_version_current(co->db, &current, &err) != XF_OK ||
      xf_policy_diff(co->db, m->version, m->version_to, &text, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  reply_policy(p, current, text, false, co->cfg.region);
  xf_free(text);
}

/* A dry run: admitted as a submission would be (the same admission, the
 * same words), and neither journaled nor audited. */
static void on_check(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  const char *text = str(m->job_json);
  const char *origin = m->origin && *m->origin ? m->origin : "job spec";
  xf_jobspec *spec = xf_malloc(sizeof(*spec));
  if (!spec) {
    xf_session_send_error(p->conn, XF_ENOMEM, "out of memory");
    return;
  }
  xf_errctx err = {0};
  xf_admission a;
  memset(&a, 0, sizeof(a));
  char *decision = NULL, *admission = NULL;
  xf_err rc = xf_jobspec_parse_string(text, strlen(text), origin, spec, &err);
  if (rc == XF_OK) rc = xf__admit(co, spec, &a, &decision, &err);
  if (rc == XF_OK) rc = xf_admission_json(&a, spec, &admission, &err);
  char *reply = NULL;
  if (rc == XF_OK) {
    json_t *o = json_pack("{s:o,s:o}", "decision",
                          decision ? json_loads(decision, 0, NULL) : json_null(), "admission",
                          json_loads(admission, 0, NULL));
    char *dumped = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    reply = dumped ? xf_strdup(dumped) : NULL;
    free(dumped);
    if (!reply) rc = xf_fail(&err, XF_ENOMEM, "out of memory");
  }
  if (rc != XF_OK)
    reply_error(p, rc, &err);
  else
    reply_policy(p, a.policy_version, reply, a.verdict == XF_ADMIT_RUNS, co->cfg.region);
  xf_free(reply);
  xf_free(decision);
  xf_free(admission);
  xf_admission_free(&a);
  xf_free(spec);
}

static void on_policy(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  char user[XF_SPIFFE_MAX];
  if (xf_spiffe_format(&p->id, user, NULL) != XF_OK) snprintf(user, 2, "?");
  const char *verb = str(m->verb);
  if (strcmp(verb, "push") == 0) {
    on_push(co, p, m, user);
    return;
  }
  if (!is_user(p)) {
    XF_WARN("request_denied", "user=%s request=policy_%s", user, verb);
    xf_session_send_error(p->conn, XF_EDENIED, "%s has no user role to read the policy with",
                          user);
    return;
  }
  if (strcmp(verb, "export") == 0) on_export(co, p, m);
  else if (strcmp(verb, "log") == 0) on_log(co, p);
  else if (strcmp(verb, "diff") == 0) on_diff(co, p, m);
  else if (strcmp(verb, "check") == 0) on_check(co, p, m);
  else
    xf_session_send_error(p->conn, XF_EUNSUPPORTED,
                          "verb: '%.64s' is not a policy request (export, log, diff, check, push)",
                          verb);
}

/* ---- the audit trail ------------------------------------------------------------------- */

static void send_audit(xf__peer *p, Xfed__AuditReply *r) {
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_AUDIT_REPLY;
  env.audit_reply = r;
  (void)xf__send(p, &env);
}

static void on_audit(xf__coord *co, xf__peer *p, const Xfed__AuditQuery *m) {
  char user[XF_SPIFFE_MAX];
  if (xf_spiffe_format(&p->id, user, NULL) != XF_OK) snprintf(user, 2, "?");
  const char *verb = str(m->verb);
  if (!may_change(p)) {
    XF_WARN("request_denied", "user=%s request=audit_%s", user, verb);
    xf_session_send_error(p->conn, XF_EDENIED,
                          "only a compliance or admin identity may read the audit trail; %s is "
                          "a %s",
                          user, xf_pki_role_name(p->id.role));
    return;
  }
  if (!co->audit) {
    xf_session_send_error(p->conn, XF_EUNSUPPORTED, "this coordinator keeps no audit trail");
    return;
  }
  xf_errctx err = {0};
  Xfed__AuditReply r = XFED__AUDIT_REPLY__INIT;
  if (strcmp(verb, "verify") == 0) {
    xf_audit_verdict v;
    memset(&v, 0, sizeof(v));
    if (xf_audit_verify(co->audit, &v, &err) != XF_OK) {
      reply_error(p, err.code, &err);
      return;
    }
    r.intact = v.fault == XF_AUDIT_INTACT;
    r.rows = v.rows;
    r.bad_seq = v.seq;
    r.fault = (char *)xf_audit_fault_name(v.fault);
    r.what = v.what;
    if (!r.intact)
      XF_WARN("audit_not_intact", "user=%s fault=%s seq=%" PRIu64, user, r.fault, v.seq);
    send_audit(p, &r);
    return;
  }
  if (strcmp(verb, "list") != 0 && strcmp(verb, "export") != 0) {
    xf_session_send_error(p->conn, XF_EUNSUPPORTED,
                          "verb: '%.64s' is not an audit query (list, export, verify)", verb);
    return;
  }
  size_t limit = m->limit ? m->limit : XF__AUDIT_PAGE;
  if (limit > XF__AUDIT_PAGE_MAX) limit = XF__AUDIT_PAGE_MAX;
  char *text = NULL;
  size_t n = 0;
  uint64_t last = 0;
  bool more = false;
  if (xf_audit_export_page(co->audit, m->since, m->after_seq, limit, XF__REPLY_TEXT_MAX, &text,
                           &n, &last, &more, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  if (strlen(text) > XF__REPLY_TEXT_MAX) {
    xf_session_send_error(p->conn, XF_ERANGE,
                          "audit row %" PRIu64 " alone is %zu bytes, more than one reply "
                          "carries; read the journal with 'xfed audit export --db'",
                          last, strlen(text));
    xf_free(text);
    return;
  }
  r.rows_jsonl = text;
  r.more = more;
  r.rows = n;
  send_audit(p, &r);
  xf_free(text);
}

void xf__policy_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env) {
  if (co->cfg.regional) {
    xf_session_send_error(p->conn, XF_EUNSUPPORTED,
                          "a regional aggregator keeps no residency policy; ask the global "
                          "coordinator");
    return;
  }
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_POLICY_REQUEST: on_policy(co, p, env->policy_request); return;
  case XFED__ENVELOPE__BODY_AUDIT_QUERY: on_audit(co, p, env->audit_query); return;
  default:
    xf_session_send_error(p->conn, XF_EUNSUPPORTED, "not a policy or audit request");
    return;
  }
}
