/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed policy ...`: the compliance team's commands on the residency policy,
 * either the coordinator's (the default, over the CLI session) or a local
 * policy database (--db FILE): changes, log, diff, export/import, and push
 * and pull between the two (policy/policy.h); checking a job and running
 * test cases against the current version are cli/cmd_policy_check.c. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/text.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/policy_internal.h"
#include "cmd/print.h"
#include "net/document.h"
#include "net/frame.h"
#include "policy/policy.h"
#include "base/file.h"

enum {
  OPT_DB = 256, OPT_AUTHOR, OPT_REASON, OPT_NAME, OPT_JURISDICTION, OPT_REGION, OPT_SITE,
  OPT_CLASS, OPT_TAG, OPT_FILE, OPT_JSON_RULE, OPT_ID, OPT_OUT, OPT_VERSION, OPT_COORD_REGION,
  OPT_EPSILON, OPT_FORCE, OPT_ALL
};

static const struct option all_opts[] = {
    {"db", required_argument, 0, OPT_DB},
    {"author", required_argument, 0, OPT_AUTHOR},
    {"reason", required_argument, 0, OPT_REASON},
    {"name", required_argument, 0, OPT_NAME},
    {"jurisdiction", required_argument, 0, OPT_JURISDICTION},
    {"region", required_argument, 0, OPT_REGION},
    {"site", required_argument, 0, OPT_SITE},
    {"class", required_argument, 0, OPT_CLASS},
    {"tag", required_argument, 0, OPT_TAG},
    {"file", required_argument, 0, OPT_FILE},
    {"json-rule", required_argument, 0, OPT_JSON_RULE},
    {"id", required_argument, 0, OPT_ID},
    {"out", required_argument, 0, OPT_OUT},
    {"version", required_argument, 0, OPT_VERSION},
    {"coordinator-region", required_argument, 0, OPT_COORD_REGION},
    {"epsilon", required_argument, 0, OPT_EPSILON},
    {"force", no_argument, 0, OPT_FORCE},
    {"all", no_argument, 0, OPT_ALL},
};
#define N_ALL_OPTS (sizeof(all_opts) / sizeof(all_opts[0]))

static const struct option conn_opts[] = {XF_CLIENT_OPTIONS};
#define N_CONN_OPTS (sizeof(conn_opts) / sizeof(conn_opts[0]))

/* What a change always takes. */
#define CHANGE_FLAGS "db,author,reason,"

/* Whether the comma-separated list names `name`. */
static bool listed(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) return true;
  return false;
}

/* Parses argv with the flags named in `allowed` (comma-separated long
 * names) and the connection flags, and expects between min_pos and max_pos
 * positional arguments. The connection flags go with --db only where
 * `allowed` lists "coordinator" (push and pull use both). Returns an exit
 * status (XF_EXIT_OK to go on). */
int xf__policy_parse_args(xf_cli *cli, int argc, char **argv, const char *allowed, int min_pos,
                          int max_pos, const char *pos_usage, xf__policy_args *a) {
  struct option opts[N_ALL_OPTS + N_CONN_OPTS + 1];
  size_t n = 0;
  for (size_t i = 0; i < N_ALL_OPTS; i++)
    if (listed(allowed, all_opts[i].name)) opts[n++] = all_opts[i];
  for (size_t i = 0; i < N_CONN_OPTS; i++) opts[n++] = conn_opts[i];
  memset(&opts[n], 0, sizeof(opts[n]));
  memset(a, 0, sizeof(*a));
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    int st = xf_client_flag(cli, &a->conn, ch, optarg);
    if (st >= 0) {
      if (st != XF_EXIT_OK) return st;
      continue;
    }
    xf_err rc = XF_OK;
    switch (ch) {
    case OPT_DB: a->db = optarg; break;
    case OPT_AUTHOR: a->author = optarg; break;
    case OPT_REASON: a->reason = optarg; break;
    case OPT_NAME: a->name = optarg; break;
    case OPT_JURISDICTION: a->jurisdiction = optarg; break;
    case OPT_REGION: a->region = optarg; break;
    case OPT_SITE: a->site = optarg; break;
    case OPT_CLASS: a->classification = optarg; break;
    case OPT_TAG: a->tag = optarg; break;
    case OPT_FILE: a->file = optarg; break;
    case OPT_JSON_RULE: a->json_rule = optarg; break;
    case OPT_ID: a->id = optarg; break;
    case OPT_OUT: a->out = optarg; break;
    case OPT_COORD_REGION: a->coordinator_region = optarg; break;
    case OPT_FORCE: a->force = true; break;
    case OPT_ALL: a->all = true; break;
    case OPT_VERSION:
      rc = xf_cli_parse_int(cli, "--version", optarg, 0, LONG_MAX,
                            &a->version);
      a->has_version = true;
      break;
    case OPT_EPSILON:
      rc = xf_cli_parse_double(cli, "--epsilon", optarg, 0, 1e300, &a->epsilon);
      if (rc == XF_OK && a->epsilon <= 0)
        rc = xf_fail(&cli->err, XF_EUSAGE, "--epsilon '%s' must be above 0", optarg);
      a->has_epsilon = true;
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
    if (rc != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  }
  a->pos = argv + optind;
  a->n_pos = argc - optind;
  if (a->n_pos < min_pos) return xf_cli_usage(cli, "%s is required", pos_usage);
  if (a->n_pos > max_pos) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind + max_pos]);
  if (a->db && xf_client_flags_given(&a->conn) && !listed(allowed, "coordinator"))
    return xf_cli_usage(cli, "--coordinator, --cert, --key, --ca, --crl and --timeout reach the "
                             "coordinator; with --db FILE the command works on that file alone");
  return XF_EXIT_OK;
}

/* A flag that must be present and non-empty. */
int xf__policy_require(xf_cli *cli, const char *value, const char *flag) {
  if (!value || !*value) return xf_cli_usage(cli, "%s is required", flag);
  return XF_EXIT_OK;
}

/* Opens the database. `create` for changes; reading commands refuse a file
 * that does not exist rather than leave an empty database behind. */
int xf__policy_open_db(xf_cli *cli, const xf__policy_args *a, bool create, xf_db **db) {
  *db = NULL;
  if (!create && access(a->db, F_OK) != 0) {
    xf_fail(&cli->err, XF_ENOENT, "no policy database (%s); make one with a change such as "
                                  "'xfed policy region add --db FILE ...'",
            strerror(errno));
    snprintf(cli->err.file, sizeof(cli->err.file), "%s", a->db);
    return xf_cli_fail(cli, XF_ENOENT);
  }
  xf_err rc = xf_policy_open(a->db, db, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  return XF_EXIT_OK;
}

/* Who and why, for a change: --reason is mandatory and --author falls back
 * to $USER. */
static int change_of(xf_cli *cli, const xf__policy_args *a, xf_policy_change *chg) {
  if (!a->reason || !*a->reason)
    return xf_cli_usage(cli, "--reason TEXT is required: every policy change records why it "
                             "was made");
  const char *author = a->author ? a->author : getenv("USER");
  if (!author || !*author)
    return xf_cli_usage(cli, "--author NAME is required when $USER is not set");
  chg->author = author;
  chg->reason = a->reason;
  chg->now = (double)time(NULL);
  return XF_EXIT_OK;
}

/* Prints the new version of a change, or fails with what the library said. */
static int report_change(xf_cli *cli, xf_err rc, uint64_t version, const char *what) {
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json)
    xf_cli_print_json(json_pack("{s:I,s:s}", "version", (json_int_t)version, "change", what));
  else
    printf("policy version %llu: %s\n", (unsigned long long)version, what);
  return XF_EXIT_OK;
}

/* A policy document, rule or case file, whole (base/file.h). */
xf_err xf__policy_read_text(const char *path, char **text, xf_errctx *err) {
  return xf_file_read_text(path, POLICY_FILE_MAX, text, NULL, err);
}

/* Writes text to path atomically (base/file.h). */
static xf_err write_text(const char *path, const char *text, xf_errctx *err) {
  return xf_file_write_atomic(path, text, strlen(text), 0644, err);
}

/* argv[1] is the verb of a three-word command ("policy rule add"): checks it
 * is one of `verbs` (comma-separated), names the command after it and
 * returns its index in verbs, or -1 after printing a usage error into
 * *status. */
static int sub_verb(xf_cli *cli, int argc, char **argv, const char *verbs, int *status) {
  static char name[96];
  if (argc < 2 || argv[1][0] == '-') {
    *status = xf_cli_usage(cli, "'%s' needs a verb: %s", cli->name, verbs);
    return -1;
  }
  int index = 0;
  for (const char *p = verbs; *p; index++) {
    size_t len = strcspn(p, ",");
    if (strlen(argv[1]) == len && strncmp(p, argv[1], len) == 0) {
      snprintf(name, sizeof(name), "%s %s", cli->name, argv[1]);
      cli->name = name;
      return index;
    }
    p += len;
    if (*p == ',') p++;
  }
  /* The nearest verb, copied out of the comma-separated list. */
  xf_text_nearest near;
  xf_text_nearest_start(&near, argv[1]);
  char words[256];
  snprintf(words, sizeof(words), "%s", verbs);
  for (char *save = NULL, *w = strtok_r(words, ",", &save); w; w = strtok_r(NULL, ",", &save))
    xf_text_nearest_offer(&near, w);
  const char *hint = xf_text_nearest_best(&near);
  *status = xf_cli_usage(cli, "'%s' is not a verb of '%s' (%s)%s%s%s", argv[1], cli->name, verbs,
                         hint ? "; did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
  return -1;
}

/* ---- the coordinator ----------------------------------------------------------------- */

/* One PolicyRequest; on success the caller owns *answer (xf_envelope_free),
 * whose body is a PolicyReply. XF_EDENIED is the coordinator refusing this
 * certificate (exit 1, "not authorized") unless `denial_decides`: for a
 * check it is the policy's answer (no policy, no region: exit 3). */
int xf__policy_request(xf_cli *cli, xf_client *c, Xfed__PolicyRequest *req, bool denial_decides,
                       Xfed__Envelope **answer) {
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_POLICY_REQUEST;
  env.policy_request = req;
  /* Reads are asked again after a dropped link; changes are not. */
  bool change = strcmp(req->verb, "push") == 0 || strcmp(req->verb, "edit") == 0 ||
                strcmp(req->verb, "dataset_adopt") == 0;
  xf_err rc = change ? xf_client_request(c, &env, XFED__ENVELOPE__BODY_POLICY_REPLY, answer,
                                         &cli->err)
                     : xf_client_query(c, &env, XFED__ENVELOPE__BODY_POLICY_REPLY, answer,
                                       &cli->err);
  if (rc == XF_OK) return XF_EXIT_OK;
  if (rc == XF_EDENIED && !denial_decides) return xf_cli_fail_unauthorized(cli);
  return xf_cli_fail(cli, rc);
}

/* The coordinator's document of `version` (0: the current one) and its
 * number. The caller frees *doc with xf_free. */
static int fetch_document(xf_cli *cli, xf_client *c, uint64_t version, char **doc,
                          uint64_t *number) {
  *doc = NULL;
  Xfed__PolicyRequest req = XFED__POLICY_REQUEST__INIT;
  req.verb = "export";
  req.version = version;
  Xfed__Envelope *answer = NULL;
  int st = xf__policy_request(cli, c, &req, false, &answer);
  if (st != XF_EXIT_OK) return st;
  const Xfed__PolicyReply *r = answer->policy_reply;
  *number = r->version;
  *doc = xf_strdup(r->text ? r->text : "");
  xf_envelope_free(answer);
  return *doc ? XF_EXIT_OK : xf_cli_fail(cli, XF_ENOMEM);
}

/* Sends document_json as the coordinator's next version (with a base: only
 * while base is still its current version) and gives the new number. */
static int push_document(xf_cli *cli, xf_client *c, const char *document_json,
                         const char *reason, bool has_base, uint64_t base, uint64_t *version) {
  Xfed__PolicyRequest req = XFED__POLICY_REQUEST__INIT;
  req.verb = "push";
  req.document_json = (char *)document_json;
  req.reason = (char *)reason;
  req.has_base = has_base;
  req.base_version = base;
  Xfed__Envelope *answer = NULL;
  int st = xf__policy_request(cli, c, &req, false, &answer);
  if (st != XF_EXIT_OK) return st;
  *version = answer->policy_reply->version;
  xf_envelope_free(answer);
  return XF_EXIT_OK;
}

/* The current version, loaded; *p is NULL when the status is not OK. */
int xf__policy_load_current(xf_cli *cli, xf_db *db, xf_policy **p) {
  uint64_t v = 0;
  xf_err rc = xf_policy_version_current(db, &v, &cli->err);
  if (rc == XF_OK) rc = xf_policy_load(db, v, p, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  return XF_EXIT_OK;
}

/* The current version of the local database (--db) or of the coordinator. */
int xf__policy_load(xf_cli *cli, const xf__policy_args *a, xf_policy **p) {
  *p = NULL;
  int st;
  if (a->db) {
    xf_db *db;
    if ((st = xf__policy_open_db(cli, a, false, &db)) != XF_EXIT_OK) return st;
    st = xf__policy_load_current(cli, db, p);
    xf_db_close(db);
    return st;
  }
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a->conn, &c)) != XF_EXIT_OK) return st;
  char *doc = NULL;
  uint64_t v = 0;
  st = fetch_document(cli, c, 0, &doc, &v);
  xf_client_close(c);
  if (st != XF_EXIT_OK) return st;
  xf_err rc = xf_policy_parse(doc, p, &cli->err);
  xf_free(doc);
  if (rc != XF_OK) {
    snprintf(cli->err.file, sizeof(cli->err.file), "the coordinator's version %llu",
             (unsigned long long)v);
    return xf_cli_fail(cli, rc);
  }
  (*p)->version = v;
  return XF_EXIT_OK;
}

/* ---- changes ---------------------------------------------------------------------- */

/* Prints what a change on the coordinator did: its version and, for a few
 * changes, the diff's lines; for many, how many of each (the diff itself is
 * 'xfed policy diff'). */
static void report_remote(xf_cli *cli, const Xfed__PolicyReply *r, const char *what) {
  const char *diff = r->text ? r->text : "";
  uint64_t n = r->added + r->removed + r->changed;
  if (cli->json) {
    json_t *lines = json_array();
    for (const char *l = diff; lines && *l;) {
      size_t len = strcspn(l, "\n");
      json_array_append_new(lines, json_stringn(l, len));
      l += len;
      if (*l) l++;
    }
    xf_cli_print_json(json_pack("{s:I,s:s,s:I,s:I,s:I,s:I,s:o,s:b}", "version",
                                (json_int_t)r->version, "change", what, "previous",
                                (json_int_t)r->previous_version, "added", (json_int_t)r->added,
                                "removed", (json_int_t)r->removed, "changed",
                                (json_int_t)r->changed, "diff", lines ? lines : json_array(),
                                "diff_cut", json_array_size(lines) < n));
    return;
  }
  printf("policy version %llu: %s\n", (unsigned long long)r->version, what);
  if (n <= 20) {
    for (const char *l = diff; *l;) {
      size_t len = strcspn(l, "\n");
      printf("  %.*s\n", (int)len, l);
      l += len;
      if (*l) l++;
    }
  } else {
    printf("  %llu added, %llu removed, %llu changed ('xfed policy diff %llu %llu' lists "
           "them)\n",
           (unsigned long long)r->added, (unsigned long long)r->removed,
           (unsigned long long)r->changed, (unsigned long long)r->previous_version,
           (unsigned long long)r->version);
  }
}

/* The coordinator's side of a change: the edit itself goes to the
 * coordinator, which makes it on its current version with the library's
 * own checks, in one transaction, and answers with the new version and
 * what changed; neither way does the whole document travel, except the
 * one an import brings. The author is the certificate's identity, recorded
 * by the coordinator. */
static int change_remote(xf_cli *cli, const xf__policy_args *a, const xf_policy_edit *e,
                         const char *origin, const char *what) {
  if (a->author)
    return xf_cli_usage(cli, "--author is for --db: the coordinator records your certificate's "
                             "identity as the author");
  if (!a->reason || !*a->reason)
    return xf_cli_usage(cli, "--reason TEXT is required: every policy change records why it "
                             "was made");
  xf_client *c = NULL;
  int st = xf_client_connect(cli, &a->conn, &c);
  if (st != XF_EXIT_OK) return st;
  Xfed__PolicyRequest req = XFED__POLICY_REQUEST__INIT;
  req.verb = "edit";
  req.edit = (char *)xf_policy_edit_name(e->kind);
  req.edit_a = (char *)(e->a ? e->a : "");
  req.edit_b = (char *)(e->b ? e->b : "");
  req.edit_c = (char *)(e->c ? e->c : "");
  req.reason = (char *)a->reason;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_POLICY_REQUEST;
  env.policy_request = &req;
  Xfed__Envelope *answer = NULL;
  xf_err rc = xf_client_request(c, &env, XFED__ENVELOPE__BODY_POLICY_REPLY, &answer, &cli->err);
  xf_client_close(c);
  if (rc == XF_EDENIED) return xf_cli_fail_unauthorized(cli);
  if (rc != XF_OK) {
    /* The coordinator's refusal names the field; for a rule or a document
     * it is about the file given. */
    if (origin && !cli->err.file[0])
      snprintf(cli->err.file, sizeof(cli->err.file), "%s", origin);
    return xf_cli_fail(cli, rc);
  }
  report_remote(cli, answer->policy_reply, what);
  xf_envelope_free(answer);
  return XF_EXIT_OK;
}

/* Makes one change on the local database (--db) or the coordinator's
 * policy. origin names the file a failure is about, or NULL. */
static int change(xf_cli *cli, const xf__policy_args *a, const xf_policy_edit *e,
                  const char *origin, const char *what) {
  if (!a->db) return change_remote(cli, a, e, origin, what);
  xf_policy_change chg;
  xf_db *db;
  int st;
  if ((st = change_of(cli, a, &chg)) != XF_EXIT_OK ||
      (st = xf__policy_open_db(cli, a, true, &db)) != XF_EXIT_OK)
    return st;
  uint64_t v = 0;
  xf_err rc = xf_policy_commit(db, e, &chg, &v, &cli->err);
  xf_db_close(db);
  if (rc != XF_OK && origin && !cli->err.file[0])
    snprintf(cli->err.file, sizeof(cli->err.file), "%s", origin);
  return report_change(cli, rc, v, what);
}

int xf_cmd_policy_region(xf_cli *cli, int argc, char **argv) {
  int status;
  if (sub_verb(cli, argc, argv, "add", &status) < 0) return status;
  xf__policy_args a;
  if ((status = xf__policy_parse_args(cli, argc - 1, argv + 1, CHANGE_FLAGS "name,jurisdiction",
                                      0, 0, "", &a)) != XF_EXIT_OK ||
      (status = xf__policy_require(cli, a.name, "--name R")) != XF_EXIT_OK)
    return status;
  const xf_policy_edit e = {XF_POLICY_EDIT_REGION_ADD, a.name, a.jurisdiction, NULL};
  return change(cli, &a, &e, NULL, "region added");
}

int xf_cmd_policy_site(xf_cli *cli, int argc, char **argv) {
  int status;
  if (sub_verb(cli, argc, argv, "add", &status) < 0) return status;
  xf__policy_args a;
  if ((status = xf__policy_parse_args(cli, argc - 1, argv + 1, CHANGE_FLAGS "name,region", 0, 0,
                                      "", &a)) != XF_EXIT_OK ||
      (status = xf__policy_require(cli, a.name, "--name S")) != XF_EXIT_OK ||
      (status = xf__policy_require(cli, a.region, "--region R")) != XF_EXIT_OK)
    return status;
  const xf_policy_edit e = {XF_POLICY_EDIT_SITE_ADD, a.name, a.region, NULL};
  return change(cli, &a, &e, NULL, "site added");
}

/* Pending datasets live at the coordinator (what its sites announced):
 * there is nothing to list or adopt in a local database. */
static int coordinator_only(xf_cli *cli, const xf__policy_args *a) {
  if (!a->db) return XF_EXIT_OK;
  return xf_cli_usage(cli, "--db: pending datasets are what the sites announced to the "
                           "coordinator; ask it (leave out --db)");
}

static int ask_text(xf_cli *cli, const xf__policy_args *a, const char *verb, uint64_t from,
                    uint64_t to, char **text);

/* `xfed policy dataset pending`: the datasets sites announced that the
 * coordinator's policy does not hold. */
static int dataset_pending(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db", 0, 0, "", &a)) != XF_EXIT_OK ||
      (status = coordinator_only(cli, &a)) != XF_EXIT_OK)
    return status;
  char *text = NULL;
  if ((status = ask_text(cli, &a, "dataset_pending", 0, 0, &text)) != XF_EXIT_OK) return status;
  json_t *rows = json_loads(text, 0, NULL);
  xf_free(text);
  if (!json_is_array(rows)) {
    json_decref(rows);
    xf_fail(&cli->err, XF_EFORMAT, "the coordinator's list of pending datasets is not a JSON "
                                   "array");
    return xf_cli_fail(cli, XF_EFORMAT);
  }
  if (cli->json) {
    xf_cli_print_json(json_pack("{s:o}", "pending", rows));
    return XF_EXIT_OK;
  }
  char when[32];
  size_t i;
  json_t *r;
  if (json_array_size(rows) == 0) printf("no dataset is pending\n");
  else
    printf("%-20s %-12s %-20s %10s %-14s %s\n", "SITE", "REGION", "DATASET", "RECORDS",
           "REGISTERED AS", "FIRST SEEN (UTC)");
  json_array_foreach(rows, i, r) {
    printf("%-20s %-12s %-20s %10lld %-14s %s%s\n", jstr(r, "site"), jstr(r, "region"),
           jstr(r, "name"), jint(r, "train_records") + jint(r, "test_records"),
           jstr(r, "classification"),
           xf_cli_utc_text(json_number_value(json_object_get(r, "first_seen")), when),
           json_is_true(json_object_get(r, "site_in_policy")) ? ""
                                                               : "  (site not in the policy)");
  }
  json_decref(rows);
  return XF_EXIT_OK;
}

/* `xfed policy dataset adopt NAME... | --all`: the coordinator adds the
 * pending datasets to its policy in one version. */
static int dataset_adopt(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, CHANGE_FLAGS "all,site,class", 0, INT_MAX,
                                      "NAME... or --all", &a)) != XF_EXIT_OK ||
      (status = coordinator_only(cli, &a)) != XF_EXIT_OK)
    return status;
  if (!a.all && a.n_pos == 0)
    return xf_cli_usage(cli, "name the datasets to adopt ('xfed policy dataset pending' lists "
                             "them), or adopt every pending one with --all");
  if (a.all && a.n_pos)
    return xf_cli_usage(cli, "give dataset names or --all, not both");
  if (a.author)
    return xf_cli_usage(cli, "--author is for --db: the coordinator records your certificate's "
                             "identity as the author");
  if (!a.reason || !*a.reason)
    return xf_cli_usage(cli, "--reason TEXT is required: every policy change records why it "
                             "was made");
  xf_client *c = NULL;
  if ((status = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return status;
  Xfed__PolicyRequest req = XFED__POLICY_REQUEST__INIT;
  req.verb = "dataset_adopt";
  req.names = a.pos;
  req.n_names = (size_t)a.n_pos;
  req.all = a.all;
  req.site = (char *)(a.site ? a.site : "");
  req.classification = (char *)(a.classification ? a.classification : "");
  req.reason = (char *)a.reason;
  Xfed__Envelope *answer = NULL;
  status = xf__policy_request(cli, c, &req, false, &answer);
  xf_client_close(c);
  if (status != XF_EXIT_OK) return status;
  char what[64];
  uint64_t n = answer->policy_reply->added;
  snprintf(what, sizeof(what), "%llu dataset%s adopted", (unsigned long long)n, n == 1 ? "" : "s");
  report_remote(cli, answer->policy_reply, what);
  xf_envelope_free(answer);
  return XF_EXIT_OK;
}

int xf_cmd_policy_dataset(xf_cli *cli, int argc, char **argv) {
  int status;
  int verb = sub_verb(cli, argc, argv, "add,tag,pending,adopt", &status);
  if (verb < 0) return status;
  if (verb == 2) return dataset_pending(cli, argc - 1, argv + 1);
  if (verb == 3) return dataset_adopt(cli, argc - 1, argv + 1);
  xf__policy_args a;
  if ((status = xf__policy_parse_args(
           cli, argc - 1, argv + 1,
           verb == 0 ? CHANGE_FLAGS "site,name,class" : CHANGE_FLAGS "site,name,tag", 0, 0, "",
           &a)) != XF_EXIT_OK ||
      (status = xf__policy_require(cli, a.site, "--site S")) != XF_EXIT_OK ||
      (status = xf__policy_require(cli, a.name, "--name D")) != XF_EXIT_OK ||
      (status = xf__policy_require(cli, verb == 0 ? a.classification : a.tag,
                                   verb == 0 ? "--class C" : "--tag T")) != XF_EXIT_OK)
    return status;
  const xf_policy_edit e = {verb == 0 ? XF_POLICY_EDIT_DATASET_ADD : XF_POLICY_EDIT_DATASET_TAG,
                            a.name, a.site, verb == 0 ? a.classification : a.tag};
  return change(cli, &a, &e, NULL, verb == 0 ? "dataset added" : "dataset tagged");
}

static void print_selector(const xf_policy_selector *s, FILE *out) {
  int n = 0;
  if (s->region[0]) fprintf(out, "%sregion=%s", n++ ? "," : "", s->region);
  if (s->site[0]) fprintf(out, "%ssite=%s", n++ ? "," : "", s->site);
  if (s->dataset[0]) fprintf(out, "%sdataset=%s", n++ ? "," : "", s->dataset);
  if (s->classification != XF_POLICY_CLASS_NONE)
    fprintf(out, "%sclass=%s", n++ ? "," : "", xf_policy_class_name(s->classification));
  if (s->tag[0]) fprintf(out, "%stag=%s", n++ ? "," : "", s->tag);
  if (!n) fputs("*", out);
}

static void print_conditions(const xf_policy_rule *r, FILE *out) {
  int n = 0;
  if (r->has_max_epsilon) fprintf(out, "%smax_epsilon=%g", n++ ? "," : "", r->max_epsilon);
  if (r->min_cohort) fprintf(out, "%smin_cohort=%u", n++ ? "," : "", r->min_cohort);
  if (r->require_secagg) fprintf(out, "%srequire_secagg", n++ ? "," : "");
  if (r->has_valid_from) fprintf(out, "%svalid_from=%.0f", n++ ? "," : "", r->valid_from);
  if (r->has_valid_until) fprintf(out, "%svalid_until=%.0f", n++ ? "," : "", r->valid_until);
  if (!n) fputs("-", out);
}

/* A version's rules, in order (--json: {version, rules}). Returns the exit
 * status. */
static int rules_print(xf_cli *cli, const xf_policy *p) {
  if (cli->json) {
    char *doc = NULL;
    xf_err rc = xf_policy_format(p, &doc, &cli->err);
    json_t *j = rc == XF_OK ? json_loads(doc, 0, NULL) : NULL;
    xf_free(doc);
    if (!j) return xf_cli_fail(cli, rc == XF_OK ? XF_ENOMEM : rc);
    xf_cli_print_json(json_pack("{s:I,s:O}", "version", (json_int_t)p->version, "rules",
                                json_object_get(j, "rules")));
    json_decref(j);
    return XF_EXIT_OK;
  }
  printf("policy version %llu: %zu rule%s\n", (unsigned long long)p->version, p->n_rules,
         p->n_rules == 1 ? "" : "s");
  for (size_t i = 0; i < p->n_rules; i++) {
    const xf_policy_rule *r = &p->rules[i];
    printf("%-20s %-5s %-18s select ", r->id, xf_policy_effect_name(r->effect),
           xf_policy_kind_name(r->kind));
    print_selector(&r->select, stdout);
    fputs(" to ", stdout);
    for (size_t k = 0; k < r->n_dests; k++) printf("%s%s", k ? "," : "", r->dests[k]);
    fputs(" if ", stdout);
    print_conditions(r, stdout);
    fputc('\n', stdout);
  }
  return XF_EXIT_OK;
}

/* `policy rule list`: the current version's rules, in order. */
static int rule_list(xf_cli *cli, const xf__policy_args *a) {
  xf_policy *p = NULL;
  int status = xf__policy_load(cli, a, &p);
  if (status != XF_EXIT_OK) return status;
  status = rules_print(cli, p);
  xf_policy_free(p);
  return status;
}

int xf_cmd_policy_rule(xf_cli *cli, int argc, char **argv) {
  int status;
  int verb = sub_verb(cli, argc, argv, "add,rm,list", &status);
  if (verb < 0) return status;
  static const char *const flags[] = {CHANGE_FLAGS "file,json-rule", CHANGE_FLAGS "id", "db"};
  xf__policy_args a;
  if ((status = xf__policy_parse_args(cli, argc - 1, argv + 1, flags[verb], 0, 0, "", &a)) !=
      XF_EXIT_OK)
    return status;
  if (verb == 2) return rule_list(cli, &a);
  if (verb == 0 && !a.file == !a.json_rule)
    return xf_cli_usage(cli, "give the rule with exactly one of --file RULE.json and "
                             "--json-rule TEXT");
  if (verb == 1) {
    if ((status = xf__policy_require(cli, a.id, "--id ID")) != XF_EXIT_OK) return status;
    const xf_policy_edit e = {XF_POLICY_EDIT_RULE_RM, a.id, NULL, NULL};
    return change(cli, &a, &e, NULL, "rule removed");
  }
  if (!a.reason || !*a.reason) /* before reading the file */
    return xf_cli_usage(cli, "--reason TEXT is required: every policy change records why it "
                             "was made");
  char *text = NULL;
  if (a.file) {
    xf_err rc = xf__policy_read_text(a.file, &text, &cli->err);
    if (rc != XF_OK) return xf_cli_fail(cli, rc);
  }
  const xf_policy_edit e = {XF_POLICY_EDIT_RULE_ADD, text ? text : a.json_rule, NULL, NULL};
  status = change(cli, &a, &e, a.file, "rule added");
  xf_free(text);
  return status;
}

int xf_cmd_policy_import(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, CHANGE_FLAGS, 1, 1, "FILE", &a)) !=
      XF_EXIT_OK)
    return status;
  if (!a.reason || !*a.reason)
    return xf_cli_usage(cli, "--reason TEXT is required: every policy change records why it "
                             "was made");
  char *text = NULL;
  xf_err rc = xf__policy_read_text(a.pos[0], &text, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  const xf_policy_edit e = {XF_POLICY_EDIT_IMPORT, text, NULL, NULL};
  status = change(cli, &a, &e, a.pos[0], "policy imported");
  xf_free(text);
  return status;
}

/* ---- between a local database and the coordinator ------------------------------------- */

int xf_cmd_policy_push(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db,reason,version,force,coordinator", 0,
                                      0, "", &a)) != XF_EXIT_OK)
    return status;
  if (!a.db)
    return xf_cli_usage(cli, "--db FILE is required: push sends a version of a local policy "
                             "database to the coordinator");
  if (!a.reason || !*a.reason)
    return xf_cli_usage(cli, "--reason TEXT is required: every policy change records why it "
                             "was made");
  if (a.has_version && a.version == 0)
    return xf_cli_usage(cli, "--version 0 is the empty policy; push a version from 1 on");
  xf_db *db;
  if ((status = xf__policy_open_db(cli, &a, false, &db)) != XF_EXIT_OK) return status;
  uint64_t v = (uint64_t)a.version;
  char *doc = NULL;
  /* The base: the coordinator's version this draft was pulled as (0 when it
   * never was), so a coordinator that moved on since refuses it. */
  uint64_t origin_local = 0, base = 0;
  bool has_origin = false;
  xf_err rc = a.has_version ? XF_OK : xf_policy_version_current(db, &v, &cli->err);
  if (rc == XF_OK && v == 0) {
    rc = xf_fail(&cli->err, XF_ENOENT, "no policy version to push yet; make one with a change");
    snprintf(cli->err.file, sizeof(cli->err.file), "%s", a.db);
  }
  if (rc == XF_OK) rc = xf_policy_export(db, v, &doc, &cli->err);
  if (rc == XF_OK)
    rc = xf_policy_origin_get(db, &origin_local, &base, &has_origin, &cli->err);
  if (rc != XF_OK) {
    xf_db_close(db);
    xf_free(doc);
    return xf_cli_fail(cli, rc);
  }
  xf_client *c = NULL;
  uint64_t pushed = 0;
  if ((status = xf_client_connect(cli, &a.conn, &c)) == XF_EXIT_OK)
    status = push_document(cli, c, doc, a.reason, !a.force, base, &pushed);
  xf_client_close(c);
  xf_free(doc);
  /* The draft is now that version of the coordinator's: the next push from
   * it is based there. */
  if (status == XF_EXIT_OK && xf_policy_origin_set(db, v, pushed, &cli->err) != XF_OK)
    fprintf(stderr, "%s: pushed, but cannot record it in %s: %s\n", cli->name, a.db,
            cli->err.msg);
  xf_db_close(db);
  if (status != XF_EXIT_OK) return status;
  if (cli->json)
    xf_cli_print_json(json_pack("{s:I,s:I,s:s,s:o}", "version", (json_int_t)pushed,
                                "local_version", (json_int_t)v, "reason", a.reason, "base",
                                a.force ? json_null() : json_integer((json_int_t)base)));
  else
    printf("policy version %llu on the coordinator: %s\n", (unsigned long long)pushed, a.reason);
  return XF_EXIT_OK;
}

int xf_cmd_policy_pull(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  xf_policy_change chg = {0};
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db,reason,author,coordinator", 0, 0, "",
                                      &a)) != XF_EXIT_OK)
    return status;
  if (!a.db)
    return xf_cli_usage(cli, "--db FILE is required: pull copies the coordinator's policy into "
                             "a local policy database");
  if ((status = change_of(cli, &a, &chg)) != XF_EXIT_OK) return status;
  xf_client *c = NULL;
  char *doc = NULL;
  uint64_t remote = 0;
  if ((status = xf_client_connect(cli, &a.conn, &c)) == XF_EXIT_OK)
    status = fetch_document(cli, c, 0, &doc, &remote);
  xf_client_close(c);
  if (status != XF_EXIT_OK) return status;
  if (remote == 0) {
    xf_free(doc);
    xf_fail(&cli->err, XF_ENOENT, "the coordinator has no policy yet: nothing to pull");
    return xf_cli_fail(cli, XF_ENOENT);
  }
  xf_db *db;
  if ((status = xf__policy_open_db(cli, &a, true, &db)) != XF_EXIT_OK) {
    xf_free(doc);
    return status;
  }
  uint64_t v = 0;
  xf_err rc = xf_policy_import(db, doc, chg.author, chg.reason, chg.now, &v, &cli->err);
  if (rc == XF_OK) rc = xf_policy_origin_set(db, v, remote, &cli->err);
  xf_db_close(db);
  xf_free(doc);
  char what[96];
  snprintf(what, sizeof(what), "the coordinator's version %llu pulled",
           (unsigned long long)remote);
  return report_change(cli, rc, v, what);
}

/* ---- reading ---------------------------------------------------------------------- */

/* The document of a version: --version V (0: the empty policy) or the
 * current one, from the local database or the coordinator. */
static int read_document(xf_cli *cli, const xf__policy_args *a, char **doc, uint64_t *v) {
  *doc = NULL;
  *v = (uint64_t)a->version;
  if (a->has_version && a->version == 0) {
    /* The coordinator reads version 0 as its current one. */
    xf_policy empty;
    memset(&empty, 0, sizeof(empty));
    xf_err rc = xf_policy_format(&empty, doc, &cli->err);
    return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
  }
  int st;
  if (a->db) {
    xf_db *db;
    if ((st = xf__policy_open_db(cli, a, false, &db)) != XF_EXIT_OK) return st;
    xf_err rc = a->has_version ? XF_OK : xf_policy_version_current(db, v, &cli->err);
    if (rc == XF_OK) rc = xf_policy_export(db, *v, doc, &cli->err);
    xf_db_close(db);
    return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
  }
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a->conn, &c)) != XF_EXIT_OK) return st;
  st = fetch_document(cli, c, *v, doc, v);
  xf_client_close(c);
  return st;
}

int xf_cmd_policy_export(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db,version,out", 0, 0, "", &a)) !=
      XF_EXIT_OK)
    return status;
  if (a.out && xf_file_check_target(a.out, &cli->err) != XF_OK)
    return xf_cli_fail(cli, cli->err.code);
  char *doc = NULL;
  uint64_t v = 0;
  if ((status = read_document(cli, &a, &doc, &v)) != XF_EXIT_OK) return status;
  xf_err rc = a.out ? write_text(a.out, doc, &cli->err) : XF_OK;
  if (rc != XF_OK) {
    xf_free(doc);
    return xf_cli_fail(cli, rc);
  }
  if (!a.out) {
    /* The document is JSON already: --json prints it as it is. */
    fputs(doc, stdout);
    if (!*doc || doc[strlen(doc) - 1] != '\n') fputc('\n', stdout);
  } else if (cli->json) {
    xf_cli_print_json(json_pack("{s:I,s:s}", "version", (json_int_t)v, "out", a.out));
  } else {
    printf("policy version %llu written to %s\n", (unsigned long long)v, a.out);
  }
  xf_free(doc);
  return XF_EXIT_OK;
}

/* PolicyRequest{verb} (with versions for a diff) to the coordinator; the
 * answer's text into *text (xf_free). */
static int ask_text(xf_cli *cli, const xf__policy_args *a, const char *verb, uint64_t from,
                    uint64_t to, char **text) {
  *text = NULL;
  xf_client *c = NULL;
  int st = xf_client_connect(cli, &a->conn, &c);
  if (st != XF_EXIT_OK) return st;
  Xfed__PolicyRequest req = XFED__POLICY_REQUEST__INIT;
  req.verb = (char *)verb;
  req.version = from;
  req.version_to = to;
  Xfed__Envelope *answer = NULL;
  st = xf__policy_request(cli, c, &req, false, &answer);
  xf_client_close(c);
  if (st != XF_EXIT_OK) return st;
  const char *t = answer->policy_reply->text;
  *text = xf_strdup(t ? t : "");
  xf_envelope_free(answer);
  return *text ? XF_EXIT_OK : xf_cli_fail(cli, XF_ENOMEM);
}

int xf_cmd_policy_log(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db", 0, 0, "", &a)) != XF_EXIT_OK)
    return status;
  json_t *versions = NULL;
  if (a.db) {
    xf_db *db;
    if ((status = xf__policy_open_db(cli, &a, false, &db)) != XF_EXIT_OK) return status;
    xf_policy_version_info *log = NULL;
    size_t n = 0;
    xf_err rc = xf_policy_log(db, &log, &n, &cli->err);
    xf_db_close(db);
    if (rc != XF_OK) return xf_cli_fail(cli, rc);
    xf_cli_policy_log_print(cli, log, n);
    xf_policy_log_free(log, n);
    return XF_EXIT_OK;
  } else {
    char *text = NULL;
    if ((status = ask_text(cli, &a, "log", 0, 0, &text)) != XF_EXIT_OK) return status;
    versions = json_loads(text, 0, NULL);
    xf_free(text);
    if (!json_is_array(versions)) {
      json_decref(versions);
      xf_fail(&cli->err, XF_EFORMAT, "the coordinator's log is not a JSON array");
      return xf_cli_fail(cli, XF_EFORMAT);
    }
  }
  if (!versions) return xf_cli_fail(cli, XF_ENOMEM);
  xf_cli_policy_versions_print(cli, versions);
  return XF_EXIT_OK;
}

int xf_cmd_policy_diff(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db", 2, 2, "V1 V2", &a)) != XF_EXIT_OK)
    return status;
  long v1, v2;
  if (xf_cli_parse_int(cli, "V1", a.pos[0], 0, LONG_MAX, &v1) != XF_OK ||
      xf_cli_parse_int(cli, "V2", a.pos[1], 0, LONG_MAX, &v2) != XF_OK)
    return xf_cli_usage(cli, "%s", cli->err.msg);
  char *text = NULL;
  if (a.db) {
    xf_db *db;
    if ((status = xf__policy_open_db(cli, &a, false, &db)) != XF_EXIT_OK) return status;
    xf_err rc = xf_policy_diff(db, (uint64_t)v1, (uint64_t)v2, &text, &cli->err);
    xf_db_close(db);
    if (rc != XF_OK) return xf_cli_fail(cli, rc);
  } else if ((status = ask_text(cli, &a, "diff", (uint64_t)v1, (uint64_t)v2, &text)) !=
             XF_EXIT_OK) {
    return status;
  }
  if (cli->json) {
    json_t *lines = json_array();
    for (char *p = text; *p;) {
      size_t len = strcspn(p, "\n");
      json_array_append_new(lines, json_stringn(p, len));
      p += len;
      if (*p) p++;
    }
    xf_cli_print_json(json_pack("{s:i,s:i,s:o}", "from", (int)v1, "to", (int)v2, "changes", lines));
  } else if (!*text) {
    printf("no changes from version %ld to version %ld\n", v1, v2);
  } else {
    fputs(text, stdout);
  }
  xf_free(text);
  return XF_EXIT_OK;
}
