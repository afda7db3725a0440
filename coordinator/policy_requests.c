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
#include "coordinator/pending.h"
#include "job/jobspec.h"

/* Audit rows per page: the default when the query says 0, and the most a
 * query may ask for. */
#define XF__AUDIT_PAGE 500
#define XF__AUDIT_PAGE_MAX 5000
/* The text of a page of audit rows stops below the frame the answer goes in
 * (room left for the fields around it), and below this in any case: pages
 * bound what the coordinator holds for one answer. A single row larger
 * than a frame comes alone, as a DOCUMENT stream (xf__send). */
#define XF__AUDIT_PAGE_BYTES (3u << 20)
#define XF__AUDIT_PAGE_ROOM 1024u
/* The diff a policy_change row carries, and the one a change's answer
 * carries, is cut here: both are for a person to read, and the versions
 * themselves are kept whole in the version table ('xfed policy diff'). */
#define XF__AUDIT_DIFF_MAX (64u << 10)

static void reply_error(xf__peer *p, xf_err code, const xf_errctx *err) {
  char msg[900];
  if (err->file[0] && err->field[0])
    snprintf(msg, sizeof(msg), "%s: %s: %s", err->file, err->field, err->msg);
  else if (err->field[0])
    snprintf(msg, sizeof(msg), "%s: %s", err->field, err->msg);
  else
    snprintf(msg, sizeof(msg), "%s", err->msg[0] ? err->msg : xf_strerror(code));
  xf_session_send_error(xf__peer_conn(p), code, "%s", msg);
}

static const char *str(const char *s) { return s ? s : ""; }

/* Answers of any size: one that does not fit a frame goes as a DOCUMENT
 * stream (xf__send). */
static void reply_policy(xf__peer *p, uint64_t version, const char *text, bool allowed,
                         const char *region) {
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
  xf_pki_role role = xf__peer_id(p)->role;
  return role == XF_PKI_ROLE_COMPLIANCE || role == XF_PKI_ROLE_ADMIN;
}

static bool is_user(const xf__peer *p) {
  return xf__peer_id(p)->role == XF_PKI_ROLE_RESEARCHER || may_change(p);
}

/* The gate of every change: a compliance or admin identity, and a reason.
 * Answers the refusal itself; false when the change must not go on. */
static bool change_admitted(xf__peer *p, const Xfed__PolicyRequest *m, const char *user,
                            const char *request) {
  if (!may_change(p)) {
    XF_WARN("request_denied", "user=%s request=%s", user, request);
    xf_session_send_error(xf__peer_conn(p), XF_EDENIED,
                          "only a compliance or admin identity may change the residency "
                          "policy; %s is a %s",
                          user, xf_pki_role_name(xf__peer_id(p)->role));
    return false;
  }
  if (!*str(m->reason)) {
    xf_session_send_error(xf__peer_conn(p), XF_EINVAL,
                          "reason: every policy change records why it was made");
    return false;
  }
  return true;
}

/* ---- the policy ------------------------------------------------------------------------ */

/* What a change did: the diff from the version before to the one after,
 * and its lines counted by sign. */
typedef struct change_summary {
  char *diff; /* xf_free; NULL when it could not be made (why: in err) */
  xf_errctx err;
  uint64_t added, removed, changed;
} change_summary;

/* Diffs the models in memory: the cached current version is usually the
 * one the change was made on, and the new one (`made`, taken over; loaded
 * when NULL) becomes the cache (residency.c reloads it only when the
 * version moves on). */
static void summarize(xf__coord *co, uint64_t prev, uint64_t v, xf_policy *made,
                      change_summary *out) {
  memset(out, 0, sizeof(*out));
  xf_policy *before = NULL, *after = made;
  const xf_policy *cached = xf__policy_cached(co);
  const xf_policy *from = cached && cached->version == prev ? cached : NULL;
  xf_err rc = from ? XF_OK : xf_policy_load(xf__coord_db(co), prev, &before, &out->err);
  if (!from) from = before;
  if (rc == XF_OK && !after) rc = xf_policy_load(xf__coord_db(co), v, &after, &out->err);
  if (rc == XF_OK) rc = xf_policy_diff_models(from, after, &out->diff, &out->err);
  xf_policy_free(before);
  if (after) xf__policy_cache(co, after);
  for (const char *l = out->diff; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
    if (*l == '+') out->added++;
    else if (*l == '-') out->removed++;
    else if (*l == '~') out->changed++;
  }
}

/* The first bytes of a diff, cut at a line's end at most max bytes in:
 * the length to keep. */
static size_t cut_lines(const char *text, size_t max) {
  size_t len = strlen(text);
  if (len <= max) return len;
  size_t keep = max;
  while (keep > 0 && text[keep - 1] != '\n') keep--;
  return keep;
}

/* The diff of a change for its audit row, cut at XF__AUDIT_DIFF_MAX. */
static json_t *change_diff(const change_summary *s) {
  if (!s->diff) return json_sprintf("(no diff: %s)", s->err.msg);
  size_t len = strlen(s->diff);
  return len <= XF__AUDIT_DIFF_MAX
             ? json_string(s->diff)
             : json_sprintf("%.*s... (%zu more bytes)", (int)XF__AUDIT_DIFF_MAX, s->diff,
                            len - XF__AUDIT_DIFF_MAX);
}

/* After a change made version v (the model `made`, taken over) on prev:
 * its audit row (with `how`, which it takes over: the members saying how it
 * was made), new plans for the jobs, and the answer: the new version and
 * what changed, never the whole document. */
static void changed(xf__coord *co, xf__peer *p, const char *user, const char *reason,
                    uint64_t prev, uint64_t v, xf_policy *made, json_t *how) {
  change_summary s;
  summarize(co, prev, v, made, &s);
  json_t *row = json_pack("{s:I,s:I,s:s,s:s,s:o}", "version", (json_int_t)v, "previous",
                          (json_int_t)prev, "author", user, "reason", reason, "diff",
                          change_diff(&s));
  if (row && how) json_object_update(row, how);
  json_decref(how);
  xf__audit(co, "policy_change", "policy", row);
  xf__runs_dirty(co); /* decided again: a paused job may resume, a running one pause */
  size_t keep = s.diff ? cut_lines(s.diff, XF__AUDIT_DIFF_MAX) : 0;
  char *text = s.diff ? xf_malloc(keep + 1) : NULL;
  if (text) {
    memcpy(text, s.diff, keep);
    text[keep] = '\0';
  }
  Xfed__PolicyReply r = XFED__POLICY_REPLY__INIT;
  r.version = v;
  r.text = text ? text : "";
  r.coordinator_region = (char *)xf__coord_cfg(co)->region;
  r.previous_version = prev;
  r.added = s.added;
  r.removed = s.removed;
  r.changed = s.changed;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_POLICY_REPLY;
  env.policy_reply = &r;
  (void)xf__send(p, &env);
  xf_free(text);
  xf_free(s.diff);
}

/* The refusal of a push drafted on `base` while the current version is
 * `current`: what was changed since, which the push would undo, as the
 * first lines of the diff from base to current (the whole diff is one
 * 'xfed policy diff' away). */
static void stale_push(xf__coord *co, xf__peer *p, uint64_t base, uint64_t current) {
  char *diff = NULL;
  xf_errctx err = {0};
  const char *how = "pull it ('xfed policy pull --db FILE'), redo the change there and push, "
                    "or push with --force";
  if (base > current || xf_policy_diff(xf__coord_db(co), base, current, &diff, &err) != XF_OK) {
    xf_session_send_error(xf__peer_conn(p), XF_EINVAL,
                          "the policy moved on to version %" PRIu64 " since version %" PRIu64
                          " this draft was made from; %s",
                          current, base, how);
    xf_free(diff);
    return;
  }
  size_t lines = 0;
  for (const char *l = diff; *l; l++)
    if (*l == '\n') lines++;
  /* One line each, as many as fit the message; the rest counted. */
  char shown[160] = "";
  size_t used = 0, listed = 0;
  for (const char *l = diff; *l;) {
    size_t len = strcspn(l, "\n");
    if (used + len + 3 >= sizeof(shown)) break;
    used += (size_t)snprintf(shown + used, sizeof(shown) - used, "%s%.*s", used ? "; " : "",
                             (int)len, l);
    listed++;
    l += len;
    if (*l) l++;
  }
  char more[96] = "";
  if (listed < lines)
    snprintf(more, sizeof(more), " and %zu more ('xfed policy diff %" PRIu64 " %" PRIu64 "')",
             lines - listed, base, current);
  if (base == 0)
    xf_session_send_error(xf__peer_conn(p), XF_EINVAL,
                          "this draft was not made from the coordinator's policy (it has no "
                          "base version) and the coordinator has version %" PRIu64
                          ": pushing it would undo %s%s; %s",
                          current, shown, more, how);
  else
    xf_session_send_error(xf__peer_conn(p), XF_EINVAL,
                          "the policy moved on to version %" PRIu64 " since version %" PRIu64
                          " this draft was made from; pushing it would undo what changed since: %s%s; %s",
                          current, base, lines ? shown : "nothing", more, how);
  xf_free(diff);
}

static void on_push(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m,
                    const char *user) {
  if (!change_admitted(p, m, user, "policy_push")) return;
  const char *reason = str(m->reason);
  xf_errctx err = {0};
  uint64_t prev = 0, v = 0;
  /* The compare and the import run in one turn of the single-threaded loop,
   * and the journal has no other writer of the version table: nothing can
   * move the version in between. */
  if (xf_policy_version_current(xf__coord_db(co), &prev, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  if (m->has_base && prev != m->base_version) {
    XF_WARN("policy_push_stale", "user=%s base=%" PRIu64 " current=%" PRIu64, user,
            m->base_version, prev);
    stale_push(co, p, m->base_version, prev);
    return;
  }
  const xf_policy_edit import = {XF_POLICY_EDIT_IMPORT, str(m->document_json), NULL, NULL};
  const xf_policy_change chg = {user, reason, xf__now()};
  xf_policy *made = NULL;
  if (xf_policy_commit_keep(xf__coord_db(co), xf__policy_cached(co), &import, &chg, &v, &made,
                            &err) != XF_OK) {
    /* The field names a place in the document, never its contents. */
    XF_WARN("policy_push_refused", "user=%s current=%" PRIu64 " code=%s field=\"%s\"", user,
            prev, xf_strerror(err.code), err.field);
    reply_error(p, err.code, &err);
    return;
  }
  XF_INFO("policy_pushed", "user=%s version=%" PRIu64 " previous=%" PRIu64, user, v, prev);
  changed(co, p, user, reason, prev, v, made,
          json_pack("{s:o}", "base",
                    m->has_base ? json_integer((json_int_t)m->base_version) : json_null()));
}

/* One edit made here on the current version, in one transaction (no
 * version to be stale against): the CLI sends the change, not the
 * document, and gets back the new version and what changed. */
static void on_edit(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m,
                    const char *user) {
  if (!change_admitted(p, m, user, "policy_edit")) return;
  const char *reason = str(m->reason);
  xf_errctx err = {0};
  xf_policy_edit e = {0};
  uint64_t prev = 0, v = 0;
  if (xf_policy_edit_kind_parse(m->edit, &e.kind, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  e.a = str(m->edit_a);
  e.b = m->edit_b && *m->edit_b ? m->edit_b : NULL;
  e.c = m->edit_c && *m->edit_c ? m->edit_c : NULL;
  const xf_policy_change chg = {user, reason, xf__now()};
  /* The current version and the change run in one turn of the loop: the
   * journal has no other writer of the version table. */
  xf_policy *made = NULL;
  if (xf_policy_version_current(xf__coord_db(co), &prev, &err) != XF_OK ||
      xf_policy_commit_keep(xf__coord_db(co), xf__policy_cached(co), &e, &chg, &v, &made,
                            &err) != XF_OK) {
    XF_WARN("policy_edit_refused", "user=%s edit=%s current=%" PRIu64 " code=%s field=\"%s\"",
            user, xf_policy_edit_name(e.kind), prev, xf_strerror(err.code), err.field);
    reply_error(p, err.code, &err);
    return;
  }
  XF_INFO("policy_edited", "user=%s edit=%s version=%" PRIu64 " previous=%" PRIu64, user,
          xf_policy_edit_name(e.kind), v, prev);
  changed(co, p, user, reason, prev, v, made,
          json_pack("{s:s}", "edit", xf_policy_edit_name(e.kind)));
}

/* ---- datasets the sites registered ------------------------------------------------------ */

/* The datasets sites announced that the current policy does not hold. */
static void on_dataset_pending(xf__coord *co, xf__peer *p) {
  xf_errctx err = {0};
  const xf_policy *policy = NULL;
  xf_journal_pending *rows = NULL;
  size_t n = 0;
  char *text = NULL;
  if (xf__policy_current(co, &policy, &err) != XF_OK ||
      xf_journal_datasets_pending(xf__coord_db(co), policy, &rows, &n, &err) != XF_OK ||
      xf_pending_json(rows, n, policy, &text, &err) != XF_OK) {
    xf_journal_pending_free(rows, n);
    reply_error(p, err.code, &err);
    return;
  }
  xf_journal_pending_free(rows, n);
  reply_policy(p, policy->version, text, false, xf__coord_cfg(co)->region);
  xf_free(text);
}

/* Adopts pending datasets into the policy: one edit (datasets_add) on the
 * current version, the path, checks and audit row of every other edit. */
static void on_dataset_adopt(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m,
                             const char *user) {
  if (!change_admitted(p, m, user, "policy_dataset_adopt")) return;
  const char *reason = str(m->reason);
  xf_errctx err = {0};
  const xf_policy *policy = NULL;
  xf_journal_pending *rows = NULL;
  size_t n = 0, count = 0;
  char *datasets = NULL;
  const xf_pending_pick pick = {.names = (const char *const *)m->names,
                                .n_names = m->n_names,
                                .all = m->all,
                                .site = m->site,
                                .classification = m->classification};
  /* The pending rows, the pick and the change run in one turn of the
   * loop: no announcement and no other edit comes in between. */
  if (xf__policy_current(co, &policy, &err) != XF_OK ||
      xf_journal_datasets_pending(xf__coord_db(co), policy, &rows, &n, &err) != XF_OK ||
      xf_pending_adoption(rows, n, policy, &pick, &datasets, &count, &err) != XF_OK) {
    xf_journal_pending_free(rows, n);
    XF_WARN("policy_adopt_refused", "user=%s code=%s", user, xf_strerror(err.code));
    reply_error(p, err.code, &err);
    return;
  }
  xf_journal_pending_free(rows, n);
  const xf_policy_edit e = {XF_POLICY_EDIT_DATASETS_ADD, datasets, NULL, NULL};
  const xf_policy_change chg = {user, reason, xf__now()};
  uint64_t prev = policy->version, v = 0;
  xf_policy *made = NULL;
  if (xf_policy_commit_keep(xf__coord_db(co), policy, &e, &chg, &v, &made, &err) != XF_OK) {
    XF_WARN("policy_edit_refused", "user=%s edit=dataset_adopt current=%" PRIu64
            " code=%s field=\"%s\"", user, prev, xf_strerror(err.code), err.field);
    xf_free(datasets);
    reply_error(p, err.code, &err);
    return;
  }
  XF_INFO("policy_edited", "user=%s edit=dataset_adopt datasets=%zu version=%" PRIu64
          " previous=%" PRIu64, user, count, v, prev);
  changed(co, p, user, reason, prev, v, made,
          json_pack("{s:s,s:o}", "edit", "dataset_adopt", "datasets",
                    json_loads(datasets, 0, NULL)));
  xf_free(datasets);
}

static void on_export(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  xf_errctx err = {0};
  uint64_t current = 0, v = m->version;
  char *doc = NULL;
  if (xf_policy_version_current(xf__coord_db(co), &current, &err) != XF_OK ||
      xf_policy_export(xf__coord_db(co), v ? v : current, &doc, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  reply_policy(p, v ? v : current, doc, false, xf__coord_cfg(co)->region);
  xf_free(doc);
}

static void on_log(xf__coord *co, xf__peer *p) {
  xf_errctx err = {0};
  xf_policy_version_info *log = NULL;
  size_t n = 0;
  if (xf_policy_log(xf__coord_db(co), &log, &n, &err) != XF_OK) {
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
    xf_session_send_error(xf__peer_conn(p), XF_ENOMEM, "out of memory");
    return;
  }
  reply_policy(p, current, text, false, xf__coord_cfg(co)->region);
  free(text); /* jansson's */
}

static void on_diff(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  xf_errctx err = {0};
  uint64_t current = 0;
  char *text = NULL;
  if (xf_policy_version_current(xf__coord_db(co), &current, &err) != XF_OK ||
      xf_policy_diff(xf__coord_db(co), m->version, m->version_to, &text, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  reply_policy(p, current, text, false, xf__coord_cfg(co)->region);
  xf_free(text);
}

/* A dry run: admitted as a submission would be (the same admission, the
 * same words), and neither journaled nor audited. */
static void on_check(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  const char *text = str(m->job_json);
  const char *origin = m->origin && *m->origin ? m->origin : "job spec";
  xf_jobspec *spec = xf_malloc(sizeof(*spec));
  if (!spec) {
    xf_session_send_error(xf__peer_conn(p), XF_ENOMEM, "out of memory");
    return;
  }
  xf_errctx err = {0};
  xf_admission a;
  memset(&a, 0, sizeof(a));
  char *decision = NULL, *admission = NULL;
  xf_err rc = xf_jobspec_parse_string(text, strlen(text), origin, spec, &err);
  if (rc == XF_OK) rc = xf__admit_check_dataset(co, spec, &err);
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
    reply_policy(p, a.policy_version, reply, a.verdict == XF_ADMIT_RUNS, xf__coord_cfg(co)->region);
  xf_free(reply);
  xf_free(decision);
  xf_free(admission);
  xf_admission_free(&a);
  xf_free(spec);
}

static void on_policy(xf__coord *co, xf__peer *p, const Xfed__PolicyRequest *m) {
  char user[XF_SPIFFE_MAX];
  if (xf_spiffe_format(xf__peer_id(p), user, NULL) != XF_OK) snprintf(user, 2, "?");
  const char *verb = str(m->verb);
  if (strcmp(verb, "push") == 0) {
    on_push(co, p, m, user);
    return;
  }
  if (strcmp(verb, "edit") == 0) {
    on_edit(co, p, m, user);
    return;
  }
  if (strcmp(verb, "dataset_adopt") == 0) {
    on_dataset_adopt(co, p, m, user);
    return;
  }
  if (!is_user(p)) {
    XF_WARN("request_denied", "user=%s request=policy_%s", user, verb);
    xf_session_send_error(xf__peer_conn(p), XF_EDENIED,
                          "%s has no user role to read the policy with", user);
    return;
  }
  if (strcmp(verb, "export") == 0) on_export(co, p, m);
  else if (strcmp(verb, "log") == 0) on_log(co, p);
  else if (strcmp(verb, "diff") == 0) on_diff(co, p, m);
  else if (strcmp(verb, "check") == 0) on_check(co, p, m);
  else if (strcmp(verb, "dataset_pending") == 0) on_dataset_pending(co, p);
  else
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED,
                          "verb: '%.64s' is not a policy request (export, log, diff, check, "
                          "push, edit, dataset_pending, dataset_adopt)",
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
  if (xf_spiffe_format(xf__peer_id(p), user, NULL) != XF_OK) snprintf(user, 2, "?");
  const char *verb = str(m->verb);
  if (!may_change(p)) {
    XF_WARN("request_denied", "user=%s request=audit_%s", user, verb);
    xf_session_send_error(xf__peer_conn(p), XF_EDENIED,
                          "only a compliance or admin identity may read the audit trail; %s is "
                          "a %s",
                          user, xf_pki_role_name(xf__peer_id(p)->role));
    return;
  }
  if (!xf__coord_audit(co)) {
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED,
                          "this coordinator keeps no audit trail");
    return;
  }
  xf_errctx err = {0};
  Xfed__AuditReply r = XFED__AUDIT_REPLY__INIT;
  if (strcmp(verb, "verify") == 0) {
    xf_audit_verdict v;
    memset(&v, 0, sizeof(v));
    if (xf_audit_verify(xf__coord_audit(co), &v, &err) != XF_OK) {
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
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED,
                          "verb: '%.64s' is not an audit query (list, export, verify)", verb);
    return;
  }
  size_t limit = m->limit ? m->limit : XF__AUDIT_PAGE;
  if (limit > XF__AUDIT_PAGE_MAX) limit = XF__AUDIT_PAGE_MAX;
  size_t frame = xf__frame_limit(p);
  size_t bytes = frame > 2 * XF__AUDIT_PAGE_ROOM ? frame - XF__AUDIT_PAGE_ROOM : XF__AUDIT_PAGE_ROOM;
  if (bytes > XF__AUDIT_PAGE_BYTES) bytes = XF__AUDIT_PAGE_BYTES;
  char *text = NULL;
  size_t n = 0;
  uint64_t last = 0;
  bool more = false;
  if (xf_audit_export_page(xf__coord_audit(co), m->since, m->after_seq, limit, bytes, &text, &n,
                           &last, &more, &err) != XF_OK) {
    reply_error(p, err.code, &err);
    return;
  }
  r.rows_jsonl = text;
  r.more = more;
  r.rows = n;
  send_audit(p, &r);
  xf_free(text);
}

void xf__policy_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env) {
  if (xf__coord_cfg(co)->regional) {
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED,
                          "a regional aggregator keeps no residency policy; ask the global "
                          "coordinator");
    return;
  }
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_POLICY_REQUEST: on_policy(co, p, env->policy_request); return;
  case XFED__ENVELOPE__BODY_AUDIT_QUERY: on_audit(co, p, env->audit_query); return;
  default:
    xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED, "not a policy or audit request");
    return;
  }
}
