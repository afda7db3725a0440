/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed policy` and `xfed audit` against the running global coordinator:
 * the real xfed-coord (--region us) on loopback with certificates made by
 * `xfed pki`, driven by the real xfed binary as a compliance officer (carol)
 * and a researcher (alice) use it: push, remote edits, log, diff, check and
 * the audit trail; and, through the CLI's own client library, a push drafted
 * on a version the policy has since moved on from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "support.h"

#include "base/alloc.h"
#include "cli/client.h"
#include "net/frame.h"

/* The daemon's start and stop each take milliseconds on loopback. */
#define STEP_TIMEOUT_S 10.0

#define CAROL "spiffe://acme/user/carol/role/compliance"

static struct {
  char xfed[1024], coord[1024];
  char root[512], fed[600], state[600], log[600], port_path[600];
  char ca[700], crl[700], carol_crt[700], carol_key[700], alice_crt[700], alice_key[700];
  char addr[32];
  pid_t daemon;
  xf_test_run runs[64];
  int n_runs;
} fx;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static xf_test_run *next_run(void) {
  assert_true(fx.n_runs < (int)(sizeof(fx.runs) / sizeof(fx.runs[0])));
  return &fx.runs[fx.n_runs++];
}

/* Runs xfed with the arguments after `arg` (ending with NULL). */
static xf_test_run *xfed(const char *arg, ...) {
  xf_test_run *r = next_run();
  xf_test_exec_opts o = {.path = fx.xfed, .deadline_s = 30};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, r, "xfed", arg, ap);
  va_end(ap);
  return r;
}

static void expect_status(const xf_test_run *r, int want) {
  if (r->status != want) {
    xf_test_run_show(r);
    fail_msg("%s: exit status %d, expected %d", r->line, r->status, want);
  }
}

static void expect_in(const char *text, const char *needle, const xf_test_run *r) {
  if (!strstr(text, needle)) {
    xf_test_run_show(r);
    fail_msg("%s: output does not mention \"%s\"", r->line, needle);
  }
}

static size_t count_of(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static const char *path_in(const char *name) {
  static char bufs[8][800];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof(bufs[0]), "%s/%s", fx.root, name);
  return b;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

/* ---- the federation and the daemon ------------------------------------------------ */

static bool daemon_alive(void) {
  int ws;
  return fx.daemon && waitpid(fx.daemon, &ws, WNOHANG) == 0;
}

static int daemon_start(void) {
  int logfd = open(fx.log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (logfd < 0 || devnull < 0) return -1;
  char cert[700], key[700];
  snprintf(cert, sizeof(cert), "%s/issued/coord.crt", fx.fed);
  snprintf(key, sizeof(key), "%s/issued/coord.key", fx.fed);
  char *const argv[] = {"xfed-coord", "run",    "--region", "us",      "--listen",
                        "127.0.0.1:0", "--port-file", fx.port_path, "--cert", cert,
                        "--key",      key,      "--ca",     fx.ca,     "--crl",
                        fx.crl,       "--state", fx.state,  NULL};
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    (void)setpgid(0, 0);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL); /* ctest's timeout runs no teardown */
    if (getppid() == 1) _exit(126);
    if (dup2(devnull, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0) _exit(126);
    setenv("XF_LOG_LEVEL", "info", 1);
    execv(fx.coord, argv);
    _exit(127);
  }
  (void)setpgid(pid, pid);
  close(logfd);
  close(devnull);
  fx.daemon = pid;
  double deadline = now_s() + STEP_TIMEOUT_S;
  while (now_s() < deadline) {
    FILE *f = fopen(fx.port_path, "r"); /* written atomically */
    if (f) {
      int port = 0;
      bool ok = fscanf(f, "%d", &port) == 1 && port > 0 && port < 65536;
      fclose(f);
      if (ok) {
        snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", port);
        return 0;
      }
    }
    if (!daemon_alive()) break;
    usleep(20000);
  }
  fprintf(stderr, "test_policy_remote: xfed-coord did not start; its log is %s\n", fx.log);
  return -1;
}

static void daemon_stop(void) {
  if (!fx.daemon) return;
  pid_t pid = fx.daemon;
  fx.daemon = 0;
  (void)kill(-pid, SIGTERM);
  double deadline = now_s() + STEP_TIMEOUT_S;
  int ws;
  while (waitpid(pid, &ws, WNOHANG) == 0 && now_s() < deadline) usleep(20000);
  (void)kill(-pid, SIGKILL);
  (void)waitpid(pid, &ws, WNOHANG);
}

static void show_log(void) {
  FILE *f = fopen(fx.log, "r");
  if (!f) return;
  char buf[4096];
  size_t n;
  fprintf(stderr, "--- xfed-coord's log:\n");
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, stderr);
  fprintf(stderr, "---\n");
  fclose(f);
}

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_policy_remote: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(fx.xfed, sizeof(fx.xfed), "%s/cli/xfed", build);
  snprintf(fx.coord, sizeof(fx.coord), "%s/coordinator/xfed-coord", build);
  if (access(fx.xfed, X_OK) != 0 || access(fx.coord, X_OK) != 0) {
    fprintf(stderr, "test_policy_remote: build xfed and xfed-coord first\n");
    return -1;
  }
  if (xf_test_mkdtemp(fx.root, sizeof(fx.root), "policy-remote") != 0) return -1;
  snprintf(fx.fed, sizeof(fx.fed), "%s/fed", fx.root);
  snprintf(fx.state, sizeof(fx.state), "%s/state", fx.root);
  snprintf(fx.log, sizeof(fx.log), "%s/coord.log", fx.root);
  snprintf(fx.port_path, sizeof(fx.port_path), "%s/coord.port", fx.root);
  snprintf(fx.ca, sizeof(fx.ca), "%s/ca.crt", fx.fed);
  snprintf(fx.crl, sizeof(fx.crl), "%s/crl.pem", fx.fed);
  snprintf(fx.carol_crt, sizeof(fx.carol_crt), "%s/issued/carol.crt", fx.fed);
  snprintf(fx.carol_key, sizeof(fx.carol_key), "%s/issued/carol.key", fx.fed);
  snprintf(fx.alice_crt, sizeof(fx.alice_crt), "%s/issued/alice.crt", fx.fed);
  snprintf(fx.alice_key, sizeof(fx.alice_key), "%s/issued/alice.key", fx.fed);

  /* The certificates, as an operator makes them. */
  xf_test_run r = {0};
  xf_test_exec_opts o = {.path = fx.xfed, .deadline_s = 30};
  bool ok = true;
  xf_test_exec(&o, &r, "xfed", "pki", "init", "--federation", "acme", "--dir", fx.fed, NULL);
  ok = ok && r.status == 0;
  xf_test_exec(&o, &r, "xfed", "pki", "issue", "--dir", fx.fed, "--kind", "coordinator", "--name",
               "coord", NULL);
  ok = ok && r.status == 0;
  xf_test_exec(&o, &r, "xfed", "pki", "issue", "--dir", fx.fed, "--kind", "user", "--name",
               "carol", "--role", "compliance", NULL);
  ok = ok && r.status == 0;
  xf_test_exec(&o, &r, "xfed", "pki", "issue", "--dir", fx.fed, "--kind", "user", "--name",
               "alice", "--role", "researcher", NULL);
  ok = ok && r.status == 0;
  if (!ok) xf_test_run_show(&r);
  xf_test_run_free(&r);
  if (!ok || daemon_start() != 0) return -1;
  /* Every xfed run below reaches this coordinator; each names its identity. */
  setenv("XFED_COORDINATOR", fx.addr, 1);
  setenv("XFED_CA", fx.ca, 1);
  setenv("XFED_CRL", fx.crl, 1);
  unsetenv("XFED_PROFILE");
  setenv("USER", "carol", 1);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  daemon_stop();
  for (int i = 0; i < fx.n_runs; i++) xf_test_run_free(&fx.runs[i]);
  if (fx.root[0]) xf_test_remove_tree(fx.root);
  return 0;
}

/* ---- the policy ----------------------------------------------------------------------- */

/* Three sites with fmnist: us-1 in the coordinator's region, eu-1 and eu-2. */
static const char *DOC =
    "{\"regions\": [{\"name\": \"us\"}, {\"name\": \"eu\", \"jurisdiction\": \"EU GDPR\"}],\n"
    " \"sites\": [{\"name\": \"us-1\", \"region\": \"us\"}, {\"name\": \"eu-1\", \"region\": "
    "\"eu\"},\n"
    "           {\"name\": \"eu-2\", \"region\": \"eu\"}],\n"
    " \"datasets\": [\n"
    "  {\"name\": \"fmnist\", \"site\": \"us-1\", \"classification\": \"internal\", \"tags\": "
    "[\"fmnist\"]},\n"
    "  {\"name\": \"fmnist\", \"site\": \"eu-1\", \"classification\": \"confidential\", "
    "\"tags\": [\"fmnist\"]},\n"
    "  {\"name\": \"fmnist\", \"site\": \"eu-2\", \"classification\": \"confidential\", "
    "\"tags\": [\"fmnist\"]}],\n"
    " \"rules\": []}\n";

static const char *EU_RULE =
    "{\"id\": \"eu-regional\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
    " \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"],"
    " \"conditions\": {\"min_cohort\": 2, \"require_secagg\": true}}";

#define JOB_HEAD                                                                              \
  "{\"name\": \"qs\", \"model\": {\"arch\": \"mlp\", \"hidden\": [16]},\n"                     \
  " \"data\": {\"dataset\": \"fmnist\", \"tags\": [\"fmnist\"]}, \"rounds\": 2,\n"             \
  " \"min_sites\": 3, \"local\": {\"epochs\": 1, \"batch_size\": 16, \"lr\": 0.1},\n"

#define AS_CAROL "--cert", fx.carol_crt, "--key", fx.carol_key
#define AS_ALICE "--cert", fx.alice_crt, "--key", fx.alice_key

static void check_without_a_policy_is_a_denial(void **state) {
  (void)state;
  const char *job = path_in("plain.json");
  write_file(job, JOB_HEAD " \"seed\": 1}\n");
  xf_test_run *r = xfed("policy", "check", job, AS_ALICE, NULL);
  expect_status(r, 3);
  expect_in(r->out, "NOT runnable as written: the residency policy does not allow this job", r);
  expect_in(r->out, "no residency policy", r);
}

static void compliance_pushes_and_a_researcher_is_refused(void **state) {
  (void)state;
  const char *doc = path_in("doc.json"), *local = path_in("local.db");
  write_file(doc, DOC);
  expect_status(xfed("policy", "import", doc, "--db", local, "--author", "carol", "--reason",
                     "draft", NULL),
                0);
  xf_test_run *r = xfed("policy", "push", "--db", local, "--reason", "first policy", AS_CAROL,
                        NULL);
  expect_status(r, 0);
  expect_in(r->out, "policy version 1 on the coordinator: first policy", r);

  r = xfed("policy", "push", "--db", local, "--reason", "mine now", AS_ALICE, NULL);
  expect_status(r, 1);
  expect_in(r->err, "researcher", r);
  expect_in(r->err, "only a compliance or admin identity", r);
  /* Reading is for every user; the audit trail is not. */
  r = xfed("policy", "log", AS_ALICE, NULL);
  expect_status(r, 0);
  expect_in(r->out, "first policy", r);
  r = xfed("audit", "list", AS_ALICE, NULL);
  expect_status(r, 1);
  expect_in(r->err, "not authorized", r);
}

/* A dataset no site has and the policy lists nowhere is the spec's mistake
 * (exit 1, naming data.dataset and the policy's datasets), not a denial:
 * at the coordinator and with the policy alone (--db). */
static void unknown_dataset_under_a_policy_is_a_usage_error_with_a_suggestion(void **state) {
  (void)state;
  const char *job = path_in("typo.json");
  write_file(job, "{\"name\": \"qs\", \"model\": {\"arch\": \"mlp\", \"hidden\": [16]},\n"
                  " \"data\": {\"dataset\": \"fmnst\"}, \"rounds\": 2, \"min_sites\": 3,\n"
                  " \"local\": {\"epochs\": 1, \"batch_size\": 16, \"lr\": 0.1}, \"seed\": 1}\n");
  xf_test_run *runs[] = {
      xfed("policy", "check", job, AS_ALICE, NULL),
      xfed("job", "submit", job, AS_ALICE, NULL),
      xfed("policy", "check", job, "--db", path_in("local.db"), "--coordinator-region", "us",
           NULL)};
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    expect_status(runs[i], 1);
    expect_in(runs[i]->err, "data.dataset: no site holds a dataset 'fmnst'", runs[i]);
    expect_in(runs[i]->err, "the datasets the residency policy lists is fmnist; did you mean "
                            "'fmnist'?", runs[i]);
  }
}

static void remote_edit_makes_the_next_version_authored_by_the_certificate(void **state) {
  (void)state;
  xf_test_run *r = xfed("policy", "rule", "add", "--json-rule", EU_RULE, "--reason",
                        "eu as a secure aggregate", AS_CAROL, NULL);
  expect_status(r, 0);
  expect_in(r->out, "policy version 2: rule added", r);
  /* --author belongs to --db. */
  r = xfed("policy", "rule", "rm", "--id", "eu-regional", "--reason", "x", "--author", "mallory",
           AS_CAROL, NULL);
  expect_status(r, 2);
  r = xfed("policy", "region", "add", "--name", "ap", AS_CAROL, NULL);
  expect_status(r, 2);
  expect_in(r->err, "--reason", r);

  r = xfed("policy", "log", "--json", AS_CAROL, NULL);
  expect_status(r, 0);
  assert_int_equal(count_of(r->out, "\"author\": \"" CAROL "\""), 2);
  expect_in(r->out, "\"version\": 2", r);
  expect_in(r->out, "eu as a secure aggregate", r);

  r = xfed("policy", "diff", "1", "2", AS_CAROL, NULL);
  expect_status(r, 0);
  expect_in(r->out, "+ rule eu-regional", r);
  r = xfed("policy", "rule", "list", AS_ALICE, NULL);
  expect_status(r, 0);
  expect_in(r->out, "policy version 2: 1 rule", r);
  r = xfed("policy", "export", "--version", "1", AS_ALICE, NULL);
  expect_status(r, 0);
  expect_in(r->out, "EU GDPR", r);
}

static void check_asks_the_coordinator_in_its_region(void **state) {
  (void)state;
  const char *plain = path_in("plain.json"), *safe = path_in("safe.json");
  write_file(plain, JOB_HEAD " \"seed\": 1}\n");
  write_file(safe, JOB_HEAD " \"secure_aggregation\": {\"enabled\": true},"
                          " \"privacy\": {\"mode\": \"none\", \"clip\": 1}, \"seed\": 1}\n");
  xf_test_run *r = xfed("policy", "check", plain, AS_ALICE, NULL);
  expect_status(r, 3);
  expect_in(r->out, "coordinator in us: NOT allowed as written (the rules allow 1 of 3 sites)", r);
  expect_in(r->out, "eu-regional", r);
  /* The policy allows it, but check predicts the run: no site is connected
   * to this coordinator, so it would not run, and check says so. */
  r = xfed("policy", "check", safe, AS_ALICE, NULL);
  expect_status(r, 3);
  expect_in(r->out, "the rules allow 3 of 3 sites", r);
  expect_in(r->out, "regional", r);
  expect_in(r->out, "this job cannot run on the federation as it is now", r);
  expect_in(r->out, "min_sites is 3", r);
  r = xfed("policy", "check", safe, "--json", AS_ALICE, NULL);
  expect_status(r, 3);
  expect_in(r->out, "\"allowed\": true", r);
  expect_in(r->out, "\"verdict\": \"short\"", r);
  r = xfed("policy", "check", safe, "--coordinator-region", "eu", AS_ALICE, NULL);
  expect_status(r, 2);
  /* Test cases run here against the coordinator's current document. */
  const char *cases = path_in("cases.json");
  write_file(cases,
             "[{\"name\": \"eu only with secagg\", \"job\": {\"dataset\": \"fmnist\","
             " \"secagg\": false, \"min_sites\": 3, \"coordinator_region\": \"us\"},"
             " \"expect\": {\"allowed\": false, \"eligible\": [\"us-1\"]}}]");
  r = xfed("policy", "test", cases, AS_ALICE, NULL);
  expect_status(r, 0);
  expect_in(r->out, "policy version 2: 1 case", r);
  expect_in(r->out, "pass  eu only with secagg", r);
}

static void audit_trail_holds_the_changes_and_verifies(void **state) {
  (void)state;
  xf_test_run *r = xfed("audit", "verify", AS_CAROL, NULL);
  expect_status(r, 0);
  expect_in(r->out, "chain intact", r);
  r = xfed("audit", "list", AS_CAROL, NULL);
  expect_status(r, 0);
  assert_true(count_of(r->out, "policy_change") >= 2);
  expect_in(r->out, CAROL, r);
  r = xfed("audit", "list", "--json", "--limit", "1", AS_CAROL, NULL);
  expect_status(r, 0);
  assert_int_equal(count_of(r->out, "\"seq\":"), 1);
  r = xfed("audit", "export", AS_CAROL, NULL);
  expect_status(r, 0);
  expect_in(r->out, "\"kind\":\"policy_change\"", r);
  assert_true(count_of(r->out, "\n") >= 2);
}

/* A push drafted on version 1 after version 2 exists: refused whole. */
static void stale_base_push_is_refused(void **state) {
  (void)state;
  xf_client_flags flags = {.coordinator = fx.addr, .cert = fx.carol_crt, .key = fx.carol_key,
                           .ca = fx.ca, .crl = fx.crl};
  xf_client_config cfg;
  xf_errctx err = {0};
  assert_int_equal(xf_client_config_resolve(&flags, &cfg, &err), XF_OK);
  xf_client *c = NULL;
  if (xf_client_open(&cfg, &c, &err) != XF_OK) {
    show_log();
    fail_msg("cannot open a session: %s", err.msg);
  }
  Xfed__PolicyRequest req = XFED__POLICY_REQUEST__INIT;
  req.verb = "push";
  req.document_json = (char *)DOC;
  req.reason = "drafted long ago";
  req.has_base = true;
  req.base_version = 1;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_POLICY_REQUEST;
  env.policy_request = &req;
  Xfed__Envelope *answer = NULL;
  xf_err rc = xf_client_request(c, &env, XFED__ENVELOPE__BODY_POLICY_REPLY, &answer, &err);
  assert_int_equal(rc, XF_EINVAL);
  if (!strstr(err.msg, "moved on to version 2 since version 1"))
    fail_msg("unexpected refusal: %s", err.msg);
  /* Without a reason. */
  req.has_base = false;
  req.reason = "";
  xf_errctx_clear(&err);
  rc = xf_client_request(c, &env, XFED__ENVELOPE__BODY_POLICY_REPLY, &answer, &err);
  assert_int_equal(rc, XF_EINVAL);
  assert_non_null(strstr(err.msg, "reason"));
  xf_client_close(c);

  xf_test_run *r = xfed("policy", "log", AS_CAROL, NULL);
  expect_status(r, 0);
  if (strstr(r->out, "drafted long ago")) fail_msg("a refused push made a version");
}

/* The trail in pages: each answer says whether rows remain after it. */
static void audit_pages_with_after_seq(void **state) {
  (void)state;
  xf_client_flags flags = {.coordinator = fx.addr, .cert = fx.carol_crt, .key = fx.carol_key,
                           .ca = fx.ca, .crl = fx.crl};
  xf_client_config cfg;
  xf_errctx err = {0};
  assert_int_equal(xf_client_config_resolve(&flags, &cfg, &err), XF_OK);
  xf_client *c = NULL;
  assert_int_equal(xf_client_open(&cfg, &c, &err), XF_OK);
  Xfed__AuditQuery q = XFED__AUDIT_QUERY__INIT;
  q.verb = "list";
  q.limit = 1;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_AUDIT_QUERY;
  env.audit_query = &q;
  for (uint64_t seq = 1; seq <= 2; seq++) {
    Xfed__Envelope *answer = NULL;
    q.after_seq = seq - 1;
    assert_int_equal(xf_client_request(c, &env, XFED__ENVELOPE__BODY_AUDIT_REPLY, &answer, &err),
                     XF_OK);
    const Xfed__AuditReply *r = answer->audit_reply;
    assert_int_equal(r->rows, 1);
    if (seq == 1) assert_true(r->more); /* the push and the edit, at least */
    char want[32];
    snprintf(want, sizeof(want), "{\"seq\":%llu,", (unsigned long long)seq);
    if (strncmp(r->rows_jsonl, want, strlen(want)) != 0)
      fail_msg("page after row %llu starts with %.40s", (unsigned long long)(seq - 1),
               r->rows_jsonl);
    xf_envelope_free(answer);
  }
  xf_client_close(c);
}

static void pull_copies_the_coordinators_version_into_a_local_database(void **state) {
  (void)state;
  const char *pulled = path_in("pulled.db");
  xf_test_run *r = xfed("policy", "pull", "--db", pulled, "--reason", "draft from prod",
                        AS_CAROL, NULL);
  expect_status(r, 0);
  expect_in(r->out, "the coordinator's version 2 pulled", r);
  r = xfed("policy", "rule", "list", "--db", pulled, NULL);
  expect_status(r, 0);
  expect_in(r->out, "eu-regional", r);
}

/* A draft pulled as version N, while someone else adds a region (N + 1):
 * pushing the draft would take the region away again, so it is refused
 * with the region named; --force replaces the policy anyway. */
static void pushing_an_old_draft_is_refused_with_what_it_would_undo(void **state) {
  (void)state;
  const char *draft = path_in("draft.db");
  xf_test_run *r = xfed("policy", "pull", "--db", draft, "--reason", "draft", AS_CAROL, NULL);
  expect_status(r, 0);
  r = xfed("policy", "log", "--json", AS_CAROL, NULL);
  expect_status(r, 0);
  int base = count_of(r->out, "\"version\":");
  assert_true(base >= 2);
  r = xfed("policy", "region", "add", "--name", "ap", "--jurisdiction", "APPI", "--reason",
           "ap opens", AS_CAROL, NULL);
  expect_status(r, 0);
  r = xfed("policy", "site", "add", "--db", draft, "--name", "us-2", "--region", "us", "--author",
           "carol", "--reason", "a second us site", NULL);
  expect_status(r, 0);
  r = xfed("policy", "push", "--db", draft, "--reason", "old draft", AS_CAROL, NULL);
  expect_status(r, 1);
  char want[96];
  snprintf(want, sizeof(want), "moved on to version %d since version %d", base + 1, base);
  expect_in(r->err, want, r);
  expect_in(r->err, "+ region ap", r);
  expect_in(r->err, "--force", r);
  r = xfed("policy", "rule", "list", AS_CAROL, NULL); /* nothing changed */
  expect_status(r, 0);
  r = xfed("policy", "push", "--db", draft, "--reason", "old draft, knowingly", "--force",
           AS_CAROL, NULL);
  expect_status(r, 0);
  snprintf(want, sizeof(want), "policy version %d on the coordinator", base + 2);
  expect_in(r->out, want, r);
  /* The draft is now based on what it pushed: its next push goes through. */
  r = xfed("policy", "region", "add", "--db", draft, "--name", "ap", "--author", "carol",
           "--reason", "ap again", NULL);
  expect_status(r, 0);
  r = xfed("policy", "push", "--db", draft, "--reason", "ap back", AS_CAROL, NULL);
  expect_status(r, 0);
}

/* No site has announced anything to this coordinator: nothing is pending,
 * every user may see that, only compliance may adopt, and a name that no
 * site announced is refused by name, leaving the version as it was. */
static void pending_datasets_are_listed_to_users_and_adopted_by_compliance(void **state) {
  (void)state;
  xf_test_run *r = xfed("policy", "dataset", "pending", AS_ALICE, NULL);
  expect_status(r, 0);
  expect_in(r->out, "no dataset is pending", r);
  r = xfed("policy", "dataset", "pending", "--json", AS_CAROL, NULL);
  expect_status(r, 0);
  expect_in(r->out, "\"pending\": []", r);
  r = xfed("policy", "log", "--json", AS_CAROL, NULL);
  expect_status(r, 0);
  size_t versions = count_of(r->out, "\"version\"");

  r = xfed("policy", "dataset", "adopt", "scans", "--reason", "mine", AS_ALICE, NULL);
  expect_status(r, 1);
  expect_in(r->err, "only a compliance or admin identity", r);
  r = xfed("policy", "dataset", "adopt", "scans", "--site", "eu-1", "--reason", "CT scans",
           AS_CAROL, NULL);
  expect_status(r, 1);
  expect_in(r->err, "dataset 'scans' is not pending at site 'eu-1'", r);
  r = xfed("policy", "dataset", "adopt", "fmnist", "--site", "eu-1", "--reason", "again",
           AS_CAROL, NULL);
  expect_status(r, 1);
  expect_in(r->err, "the policy holds it already", r);
  r = xfed("policy", "dataset", "adopt", "--all", "--reason", "everything", AS_CAROL, NULL);
  expect_status(r, 1);
  expect_in(r->err, "no dataset is pending", r);
  /* Usage: names or --all, a reason, and no local database. */
  r = xfed("policy", "dataset", "adopt", "--reason", "x", AS_CAROL, NULL);
  expect_status(r, 2);
  r = xfed("policy", "dataset", "adopt", "scans", "--all", "--reason", "x", AS_CAROL, NULL);
  expect_status(r, 2);
  r = xfed("policy", "dataset", "adopt", "scans", AS_CAROL, NULL);
  expect_status(r, 2);
  expect_in(r->err, "--reason", r);
  r = xfed("policy", "dataset", "pending", "--db", path_in("local.db"), NULL);
  expect_status(r, 2);
  expect_in(r->err, "ask it (leave out --db)", r);

  r = xfed("policy", "log", "--json", AS_CAROL, NULL);
  expect_status(r, 0);
  assert_int_equal(count_of(r->out, "\"version\""), versions);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(check_without_a_policy_is_a_denial),
      cmocka_unit_test(compliance_pushes_and_a_researcher_is_refused),
      cmocka_unit_test(unknown_dataset_under_a_policy_is_a_usage_error_with_a_suggestion),
      cmocka_unit_test(remote_edit_makes_the_next_version_authored_by_the_certificate),
      cmocka_unit_test(check_asks_the_coordinator_in_its_region),
      cmocka_unit_test(audit_trail_holds_the_changes_and_verifies),
      cmocka_unit_test(stale_base_push_is_refused),
      cmocka_unit_test(audit_pages_with_after_seq),
      cmocka_unit_test(pull_copies_the_coordinators_version_into_a_local_database),
      cmocka_unit_test(pushing_an_old_draft_is_refused_with_what_it_would_undo),
      cmocka_unit_test(pending_datasets_are_listed_to_users_and_adopted_by_compliance),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
