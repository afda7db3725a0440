/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for what a user's CLI sends the global coordinator:
 * JobSubmit, JobQuery, JobCancel, MetricsQuery, ModelQuery, PolicyRequest
 * (every verb) and AuditQuery (every verb), and the JobList answer as the
 * CLI shows it, as records of tests/fuzz/fuzz_msgs.h whose high 4 bits
 * pick the sender's role (researcher, compliance, admin; more: modulo 3).
 *
 * Each input starts from the same coordinator journal (a copy of one made
 * at the first input, in a temporary directory: three jobs, metrics,
 * committed rounds, a residency policy, audit rows) and each request runs
 * the way coordinator/requests.c and coordinator/policy_requests.c run it,
 * on the same socket-free pieces: the role checks; job ids
 * (xf_job_id_parse); a submission parsed (job/jobspec.h), its noise
 * calibrated (privacy/accountant.h), decided by the residency policy
 * (policy/policy.h, job/residency.h) and admitted on a fixed federation
 * (job/admission.h), its model sized (job/jobmodel.h) and journaled;
 * queries, cancellations and pages on the journal (coordinator/journal.h);
 * policy pushes, edits, exports, logs, diffs and checks on the policy's
 * versions (policy/policy.h); audit pages and verification
 * (policy/audit.h). A JobList goes through the CLI's rendering of a job
 * (cli/job_internal.h).
 *
 * Checked: every refusal names its reason; a page holds at most what was
 * asked and only rows after the cursor; a version number only grows and a
 * change is refused on a stale base; an export parses as a policy again;
 * the audit trail stays intact whatever was asked. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/alloc.h"
#include "cli/job_internal.h"
#include "coordinator/journal.h"
#include "crypto/pki.h"
#include "fuzz_msgs.h"
#include "job/admission.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/jobspec.h"
#include "job/residency.h"
#include "policy/audit.h"
#include "policy/policy.h"
#include "privacy/accountant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const unsigned kinds[] = {
    XFED__ENVELOPE__BODY_JOB_SUBMIT,     XFED__ENVELOPE__BODY_JOB_QUERY,
    XFED__ENVELOPE__BODY_JOB_CANCEL,     XFED__ENVELOPE__BODY_METRICS_QUERY,
    XFED__ENVELOPE__BODY_MODEL_QUERY,    XFED__ENVELOPE__BODY_POLICY_REQUEST,
    XFED__ENVELOPE__BODY_AUDIT_QUERY,    XFED__ENVELOPE__BODY_JOB_LIST,
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

#define FZ_CLI_REGION "us"
#define FZ_CLI_NOW 1700000000.0
/* coordinator/requests.c's and policy_requests.c's page limits. */
#define METRICS_PAGE_MAX 20000
#define JOBS_PAGE_MAX 1000
#define AUDIT_PAGE 500
#define AUDIT_PAGE_MAX 5000

static const char policy_json[] =
    "{\"regions\": [{\"name\": \"eu\", \"jurisdiction\": \"EU GDPR\"}, {\"name\": \"us\"}],"
    " \"sites\": [{\"name\": \"eu-1\", \"region\": \"eu\"}, {\"name\": \"eu-2\", \"region\": "
    "\"eu\"}, {\"name\": \"us-1\", \"region\": \"us\"}],"
    " \"datasets\": [{\"name\": \"mnist\", \"site\": \"eu-1\", \"classification\": "
    "\"confidential\", \"tags\": [\"health\"]}, {\"name\": \"mnist\", \"site\": \"eu-2\", "
    "\"classification\": \"internal\", \"tags\": []}, {\"name\": \"mnist\", \"site\": \"us-1\", "
    "\"classification\": \"internal\", \"tags\": []}],"
    " \"rules\": [{\"id\": \"eu-regional\", \"effect\": \"allow\", \"kind\": "
    "\"regional_aggregate\", \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"], "
    "\"conditions\": {\"max_epsilon\": 3, \"min_cohort\": 2, \"require_secagg\": true}}]}";

static const char job_json[] =
    "{\"name\": \"a\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"mnist\"}, "
    "\"rounds\": 2}";

/* ---- the journal ---------------------------------------------------------------------------- */

static char dir[256], template_path[300], work_path[300];

static void check(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK) {
    fprintf(stderr, "fuzz_cli_request setup: %s\n", err->msg);
    abort();
  }
}

/* The directory holds the template and the working journal with their
 * SQLite side files, nothing else. */
static void remove_dir(void) {
  static const char *const names[] = {"template.db", "template.db-wal", "template.db-shm",
                                      "journal.db",  "journal.db-wal",  "journal.db-shm"};
  char path[320];
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    remove(path);
  }
  rmdir(dir);
}

static void make_template(void) {
  /* A directory of its own under TMPDIR (else /tmp), removed at exit. */
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  snprintf(dir, sizeof(dir), "%s/xf-fuzz-cli-XXXXXX", base);
  if (!mkdtemp(dir)) abort();
  atexit(remove_dir);
  snprintf(template_path, sizeof(template_path), "%s/template.db", dir);
  snprintf(work_path, sizeof(work_path), "%s/journal.db", dir);
  xf_db *db = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  check(xf_journal_open(template_path, &db, &err), &err);
  uint64_t v = 0;
  check(xf_policy_import(db, policy_json, "spiffe://fz/user/compliance/c", "first", FZ_CLI_NOW,
                         &v, &err),
        &err);
  xf_jobspec spec;
  check(xf_jobspec_parse_string(job_json, strlen(job_json), "job", &spec, &err), &err);
  xf_digest model;
  xf_digest_buf("model", 5, &model);
  uint64_t sites[2] = {xf_admit_site_id("eu-1"), xf_admit_site_id("eu-2")};
  check(xf_journal_site_seen(db, sites[0], "eu-1", "eu", false, FZ_CLI_NOW, &err), &err);
  check(xf_journal_site_seen(db, sites[1], "eu-2", "eu", false, FZ_CLI_NOW, &err), &err);
  for (int j = 0; j < 3; j++) {
    int64_t id = 0;
    check(xf_journal_job_create(db, &spec, &model, FZ_CLI_NOW, &id, &err), &err);
    check(xf_journal_job_submitter(db, id, "spiffe://fz/user/researcher/r", &err), &err);
    for (uint32_t round = 1; j < 2 && round <= 2 - (uint32_t)j; round++) {
      check(xf_journal_round_open(db, id, round, 1, sites, 2, FZ_CLI_NOW + 60, FZ_CLI_NOW, &err),
            &err);
      for (int s = 0; s < 2; s++) {
        xf_journal_metrics m = {.round = round, .site = sites[s], .train_loss = 0.5,
                                .test_loss = 0.4, .test_accuracy = 0.8, .samples = 100};
        check(xf_journal_metrics_add(db, id, &m, &err), &err);
      }
      xf_digest next;
      xf_digest_buf(&round, sizeof(round), &next);
      check(xf_journal_round_commit(db, id, round, 1, &next, NULL, FZ_CLI_NOW, &err), &err);
    }
  }
  for (int i = 0; i < 4; i++)
    check(xf_audit_append(db, FZ_CLI_NOW + i, "spiffe://fz/coordinator/us", "decision", "1",
                          "{\"job\": \"1\"}", NULL, &err),
          &err);
  xf_db_close(db);
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  if (!in || !out) abort();
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
    if (fwrite(buf, 1, n, out) != n) abort();
  fclose(in);
  if (fclose(out) != 0) abort();
}

static xf_db *fresh_journal(void) {
  if (!dir[0]) make_template();
  char side[320];
  snprintf(side, sizeof(side), "%s-wal", work_path);
  remove(side);
  snprintf(side, sizeof(side), "%s-shm", work_path);
  remove(side);
  copy_file(template_path, work_path);
  xf_db *db = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  check(xf_journal_open(work_path, &db, &err), &err);
  return db;
}

/* ---- what every request shares ------------------------------------------------------------------ */

typedef struct user {
  xf_pki_role role;
  const char *name;
} user;

static const user users[] = {
    {XF_PKI_ROLE_RESEARCHER, "spiffe://fz/user/researcher/r"},
    {XF_PKI_ROLE_COMPLIANCE, "spiffe://fz/user/compliance/c"},
    {XF_PKI_ROLE_ADMIN, "spiffe://fz/user/admin/a"},
};

static void said(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK && (err->code != rc || !err->msg[0])) abort();
}

static const char *str(const char *s) { return s ? s : ""; }

/* The fixed federation admission plans on: two sites of eu straight to the
 * coordinator, one of us behind the aggregator r-us. */
static xf_err admit(xf_db *db, const xf_jobspec *spec, xf_admission *out, char **decision_json,
                    xf_errctx *err) {
  *decision_json = NULL;
  memset(out, 0, sizeof(*out));
  xf_policy *p = NULL;
  uint64_t v = 0;
  XF_GUARD(xf_policy_version_current(db, &v, err));
  XF_GUARD(xf_policy_load(db, v, &p, err));
  xf_policy_decision d;
  memset(&d, 0, sizeof(d));
  xf_policy_job job;
  const char *tags[XF_JOB_TAGS_MAX];
  xf_err rc = xf_residency_job_of(spec, FZ_CLI_REGION, tags, &job, err);
  if (rc == XF_OK) rc = xf_policy_decide(p, &job, FZ_CLI_NOW, &d, err);
  xf_policy_free(p);
  if (rc != XF_OK) return rc;
  static const char *const no_tags[1] = {NULL};
  static const char *const health[1] = {"health"};
  xf_fed_dataset sets[3] = {
      {"mnist", health, 1, 1000, 200, 10, 28, 28, 1},
      {"mnist", no_tags, 0, 1000, 200, 10, 28, 28, 1},
      {"mnist", no_tags, 0, 1000, 200, 10, 28, 28, 1},
  };
  xf_fed_site sites[3] = {
      {"eu-1", "eu", "r-eu", "eu", true, &sets[0], 1},
      {"eu-2", "eu", "r-eu", "eu", true, &sets[1], 1},
      {"us-1", "us", NULL, NULL, true, &sets[2], 1},
  };
  xf_federation fed = {.sites = sites,
                       .n_sites = 3,
                       .coordinator_region = FZ_CLI_REGION,
                       .residency_on = true};
  rc = xf_admission_decide(spec, &d, &fed, out, err);
  if (rc == XF_OK && xf_policy_decision_json(&d, decision_json, err) != XF_OK)
    *decision_json = NULL;
  xf_policy_decision_free(&d);
  return rc;
}

/* ---- jobs ------------------------------------------------------------------------------------------ */

static bool may_submit(const user *u) {
  return u->role == XF_PKI_ROLE_RESEARCHER || u->role == XF_PKI_ROLE_ADMIN;
}

static void on_submit(xf_db *db, const user *u, const Xfed__JobSubmit *m) {
  if (!may_submit(u)) return;
  const char *text = str(m->spec_json);
  const char *origin = m->origin && *m->origin ? m->origin : "job spec";
  xf_jobspec spec;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_jobspec_parse_string(text, strlen(text), origin, &spec, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  if (xf_job_noise_in_sum(&spec) && !spec.privacy.has_noise_multiplier &&
      spec.sites_per_round <= 1) {
    double sigma, eps, order;
    rc = xf_dp_calibrate(spec.privacy.target_epsilon, xf_job_sampling_rate(&spec), spec.rounds,
                         spec.privacy.delta, &sigma, &eps, &order, &err);
    said(rc, &err);
    if (rc != XF_OK) return;
    if (!(isfinite(sigma) && sigma > 0)) abort();
    spec.privacy.has_noise_multiplier = true;
    spec.privacy.noise_multiplier = sigma;
  }
  xf_admission a;
  char *decision = NULL, *admission = NULL;
  rc = admit(db, &spec, &a, &decision, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  xf_errctx jerr;
  xf_errctx_clear(&jerr);
  if (xf_admission_json(&a, &spec, &admission, &jerr) == XF_OK) {
    json_t *j = json_loads(admission, 0, NULL);
    if (!j) abort(); /* the audit row embeds it as JSON */
    json_decref(j);
  }
  if (decision) {
    json_t *j = json_loads(decision, 0, NULL);
    if (!j) abort();
    json_decref(j);
  }
  xf_free(decision);
  xf_free(admission);
  if (a.verdict != XF_ADMIT_RUNS) {
    char why[2048];
    xf_admission_refusal(&a, why, sizeof(why));
    if (!why[0]) abort();
    xf_admission_free(&a);
    return;
  }
  uint64_t n_params = 0;
  rc = xf_jobspec_model_params(&spec, a.h, a.w, a.c, a.classes, &n_params, &err);
  xf_admission_free(&a);
  said(rc, &err);
  if (rc != XF_OK) return;
  if (n_params == 0 || n_params > XF_JOB_PARAMS_MAX) abort();
  xf_digest model;
  xf_digest_buf(&n_params, sizeof(n_params), &model);
  int64_t id = 0;
  rc = xf_journal_job_create(db, &spec, &model, FZ_CLI_NOW, &id, &err);
  if (rc == XF_OK) rc = xf_journal_job_submitter(db, id, u->name, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  xf_journal_job jj;
  if (xf_journal_job_load(db, id, &jj, &err) != XF_OK) abort(); /* what was written reads back */
  if (strcmp(jj.spec.name, spec.name) != 0 || jj.state != XF_JOB_QUEUED) abort();
}

/* What reply_jobs reads of one job (coordinator/requests.c fill_info). */
static void job_info(xf_db *db, int64_t id) {
  xf_journal_job jj;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_journal_job_load(db, id, &jj, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  char submitter[XF_SPIFFE_MAX];
  uint64_t up = 0, down = 0;
  rc = xf_journal_job_submitter_get(db, id, submitter, sizeof(submitter), &err);
  said(rc, &err);
  rc = xf_journal_job_bytes(db, id, &up, &down, &err);
  said(rc, &err);
  char *spec_json = NULL;
  if (xf_jobspec_to_json(&jj.spec, &spec_json) != XF_OK) abort();
  xf_free(spec_json);
  xf_journal_metrics *m = NULL;
  size_t n = 0;
  rc = xf_journal_metrics_job(db, id, &m, &n, &err);
  said(rc, &err);
  xf_free(m);
  double eps;
  (void)xf_job_epsilon(&jj.spec, jj.rounds_committed, &eps);
}

static bool job_id(const char *s, int64_t *out) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_job_id_parse(s, out, &err);
  said(rc, &err);
  if (rc == XF_OK && *out < 1) abort(); /* ids are positive, never clamped */
  return rc == XF_OK;
}

static void on_query(xf_db *db, const Xfed__JobQuery *q) {
  if (q->job_id && *q->job_id) {
    int64_t id;
    if (job_id(q->job_id, &id)) job_info(db, id);
    return;
  }
  int64_t *ids = NULL;
  size_t n = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_journal_all_jobs(db, &ids, &n, &err) != XF_OK) abort();
  size_t from = 0, limit = q->limit > JOBS_PAGE_MAX ? JOBS_PAGE_MAX : q->limit;
  while (limit && from < n && (uint64_t)ids[from] <= q->after_id) from++;
  size_t count = limit && n - from > limit ? limit : n - from;
  if (from + count > n || (limit && count > limit)) abort();
  for (size_t i = from; i < from + count; i++) {
    if (limit && (uint64_t)ids[i] <= q->after_id) abort();
    job_info(db, ids[i]);
  }
  xf_free(ids);
}

static void on_cancel(xf_db *db, const user *u, const Xfed__JobCancel *m) {
  int64_t id;
  if (!may_submit(u) || !job_id(m->job_id, &id)) return;
  xf_journal_job jj;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_journal_job_load(db, id, &jj, &err);
  said(rc, &err);
  if (rc != XF_OK || jj.state == XF_JOB_DONE || jj.state == XF_JOB_FAILED ||
      jj.state == XF_JOB_CANCELLED)
    return;
  rc = xf_journal_job_set_state(db, id, XF_JOB_CANCELLED, "cancelled", FZ_CLI_NOW, &err);
  said(rc, &err);
  if (rc == XF_OK && (xf_journal_job_load(db, id, &jj, &err) != XF_OK ||
                      jj.state != XF_JOB_CANCELLED))
    abort();
}

static void on_metrics_query(xf_db *db, const Xfed__MetricsQuery *m) {
  int64_t id;
  if (!job_id(m->job_id, &id)) return;
  xf_journal_job jj;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_journal_metrics *v = NULL;
  size_t n = 0;
  size_t limit = m->limit > METRICS_PAGE_MAX ? METRICS_PAGE_MAX : m->limit;
  uint64_t after_site = m->after_site && *m->after_site ? xf_admit_site_id(m->after_site) : 0;
  xf_err rc = xf_journal_job_load(db, id, &jj, &err);
  if (rc == XF_OK)
    rc = limit ? xf_journal_metrics_page(db, id, m->after_round, after_site, limit + 1, &v, &n,
                                         &err)
               : xf_journal_metrics_job(db, id, &v, &n, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  if (limit && n > limit + 1) abort();
  for (size_t i = 0; i < n; i++) {
    if (limit && (v[i].round < m->after_round ||
                  (v[i].round == m->after_round && v[i].site <= after_site)))
      abort(); /* only rows after the cursor */
    char name[128], region[128];
    xf_errctx nerr;
    xf_errctx_clear(&nerr);
    xf_err nrc = xf_journal_site_name(db, v[i].site, name, sizeof(name), region, sizeof(region),
                                      &nerr);
    said(nrc, &nerr);
  }
  xf_free(v);
}

static void on_model_query(xf_db *db, const Xfed__ModelQuery *m) {
  int64_t id;
  if (!job_id(m->job_id, &id)) return;
  xf_journal_job jj;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_journal_job_load(db, id, &jj, &err);
  said(rc, &err);
  if (rc != XF_OK || m->round == 0) return;
  xf_digest model;
  rc = xf_journal_round_model(db, id, m->round, &model, &err);
  said(rc, &err);
  if (rc == XF_OK && m->round > jj.rounds_committed) abort(); /* only committed rounds */
}

/* The CLI's view of a job it was sent. */
static void on_job_list(const Xfed__JobList *l) {
  for (size_t i = 0; i < l->n_jobs; i++) {
    json_t *o = xf__job_json(l->jobs[i]);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    free(text);
    json_decref(o);
  }
}

/* ---- the policy and the audit trail ------------------------------------------------------------- */

static bool may_change(const user *u) {
  return u->role == XF_PKI_ROLE_COMPLIANCE || u->role == XF_PKI_ROLE_ADMIN;
}

static uint64_t current_version(xf_db *db) {
  uint64_t v = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_policy_version_current(db, &v, &err) != XF_OK) abort();
  return v;
}

/* After a change from prev to v: the diff the answer and the audit row
 * carry (policy_requests.c's summarize). */
static void changed(xf_db *db, uint64_t prev, uint64_t v) {
  if (v <= prev) abort(); /* versions only grow */
  xf_policy *before = NULL, *after = NULL;
  char *diff = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_policy_load(db, prev, &before, &err) != XF_OK ||
      xf_policy_load(db, v, &after, &err) != XF_OK ||
      xf_policy_diff_models(before, after, &diff, &err) != XF_OK)
    abort(); /* what the journal holds reads back */
  xf_free(diff);
  xf_policy_free(before);
  xf_policy_free(after);
}

static void on_policy(xf_db *db, const user *u, const Xfed__PolicyRequest *m) {
  const char *verb = str(m->verb);
  xf_errctx err;
  xf_errctx_clear(&err);
  uint64_t prev = current_version(db), v = 0;
  xf_err rc = XF_OK;
  if (strcmp(verb, "push") == 0 || strcmp(verb, "edit") == 0) {
    if (!may_change(u) || !*str(m->reason)) return;
    if (strcmp(verb, "push") == 0) {
      if (m->has_base && prev != m->base_version) return; /* stale: refused */
      rc = xf_policy_import(db, str(m->document_json), u->name, m->reason, FZ_CLI_NOW, &v, &err);
    } else {
      xf_policy_edit e = {0};
      rc = xf_policy_edit_kind_parse(m->edit, &e.kind, &err);
      e.a = str(m->edit_a);
      e.b = m->edit_b && *m->edit_b ? m->edit_b : NULL;
      e.c = m->edit_c && *m->edit_c ? m->edit_c : NULL;
      const xf_policy_change chg = {u->name, m->reason, FZ_CLI_NOW};
      if (rc == XF_OK) rc = xf_policy_commit(db, &e, &chg, &v, &err);
    }
    said(rc, &err);
    if (rc == XF_OK) changed(db, prev, v);
    else if (current_version(db) != prev) abort(); /* a refused change leaves nothing */
    return;
  }
  char *text = NULL;
  if (strcmp(verb, "export") == 0) {
    rc = xf_policy_export(db, m->version ? m->version : prev, &text, &err);
    said(rc, &err);
    if (rc == XF_OK) {
      xf_policy *p = NULL;
      if (xf_policy_parse(text, &p, &err) != XF_OK) abort(); /* exports import again */
      xf_policy_free(p);
    }
  } else if (strcmp(verb, "log") == 0) {
    xf_policy_version_info *log = NULL;
    size_t n = 0;
    if (xf_policy_log(db, &log, &n, &err) != XF_OK) abort();
    if (n && log[n - 1].version != prev) abort();
    xf_policy_log_free(log, n);
  } else if (strcmp(verb, "diff") == 0) {
    rc = xf_policy_diff(db, m->version, m->version_to, &text, &err);
    said(rc, &err);
  } else if (strcmp(verb, "check") == 0) {
    const char *job = str(m->job_json);
    xf_jobspec *spec = xf_malloc(sizeof(*spec));
    if (!spec) abort();
    xf_admission a;
    memset(&a, 0, sizeof(a));
    char *decision = NULL, *admission = NULL;
    rc = xf_jobspec_parse_string(job, strlen(job), m->origin && *m->origin ? m->origin : "job",
                                 spec, &err);
    if (rc == XF_OK) rc = admit(db, spec, &a, &decision, &err);
    if (rc == XF_OK) rc = xf_admission_json(&a, spec, &admission, &err);
    said(rc, &err);
    if (rc == XF_OK) {
      json_t *o = json_pack("{s:o,s:o}", "decision",
                            decision ? json_loads(decision, 0, NULL) : json_null(), "admission",
                            json_loads(admission, 0, NULL));
      if (!o) abort(); /* both are JSON */
      json_decref(o);
    }
    xf_free(decision);
    xf_free(admission);
    xf_admission_free(&a);
    xf_free(spec);
  }
  xf_free(text);
}

static void on_audit(xf_db *db, const user *u, const Xfed__AuditQuery *m) {
  if (!may_change(u)) return;
  const char *verb = str(m->verb);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (strcmp(verb, "verify") == 0) {
    xf_audit_verdict v;
    memset(&v, 0, sizeof(v));
    if (xf_audit_verify(db, &v, &err) != XF_OK || v.fault != XF_AUDIT_INTACT) abort();
    return;
  }
  if (strcmp(verb, "list") != 0 && strcmp(verb, "export") != 0) return;
  size_t limit = m->limit ? m->limit : AUDIT_PAGE;
  if (limit > AUDIT_PAGE_MAX) limit = AUDIT_PAGE_MAX;
  char *text = NULL;
  size_t n = 0;
  uint64_t last = 0;
  bool more = false;
  xf_err rc = xf_audit_export_page(db, m->since, m->after_seq, limit, 64u << 10, &text, &n, &last,
                                   &more, &err);
  said(rc, &err);
  if (rc != XF_OK) return;
  if (n > limit || (n && last <= m->after_seq)) abort();
  size_t lines = 0;
  for (const char *p = text; p && *p; p++) lines += *p == '\n';
  if (lines != n) abort(); /* one JSON line a row */
  xf_free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_begin(6);
  xf_db *db = fresh_journal();
  fz_input in = {data, size};
  fz_record r;
  while (fz_next(&in, N_KINDS, &r)) {
    Xfed__Envelope *env = fz_decode(kinds[r.kind], r.body, r.len);
    if (!env) continue;
    const user *u = &users[r.peer % 3];
    switch (env->body_case) {
    case XFED__ENVELOPE__BODY_JOB_SUBMIT: on_submit(db, u, env->job_submit); break;
    case XFED__ENVELOPE__BODY_JOB_QUERY: on_query(db, env->job_query); break;
    case XFED__ENVELOPE__BODY_JOB_CANCEL: on_cancel(db, u, env->job_cancel); break;
    case XFED__ENVELOPE__BODY_METRICS_QUERY: on_metrics_query(db, env->metrics_query); break;
    case XFED__ENVELOPE__BODY_MODEL_QUERY: on_model_query(db, env->model_query); break;
    case XFED__ENVELOPE__BODY_POLICY_REQUEST: on_policy(db, u, env->policy_request); break;
    case XFED__ENVELOPE__BODY_AUDIT_QUERY: on_audit(db, u, env->audit_query); break;
    case XFED__ENVELOPE__BODY_JOB_LIST: on_job_list(env->job_list); break;
    default: abort();
    }
    xf_envelope_free(env);
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_audit_verdict v;
  memset(&v, 0, sizeof(v));
  if (xf_audit_verify(db, &v, &err) != XF_OK || v.fault != XF_AUDIT_INTACT) abort();
  xf_db_close(db);
  return 0;
}
