/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed audit list|verify|export`: reading and verifying a hash-chained
 * audit trail: the coordinator's (the default, over the CLI session, page by
 * page) or one kept in a local database (--db FILE; policy/audit.h). */
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
#include "cli/cli.h"
#include "cli/client.h"
#include "cmd/print.h"
#include "net/frame.h"
#include "policy/audit.h"
#include "base/file.h"

/* Rows asked for per page of the coordinator's trail (the coordinator's own
 * bound is higher; a page also stays under its reply size). */
#define AUDIT_PAGE 1000

typedef struct audit_args {
  const char *db, *out;
  double since;
  long limit;
  xf_client_flags conn;
} audit_args;

enum { OPT_DB = 256, OPT_SINCE, OPT_LIMIT, OPT_OUT };

/* Parses the flags of one verb: --db and the connection flags always;
 * --since, --limit and --out when the matching argument is true. Returns an
 * exit status (XF_EXIT_OK to go on). */
static int parse_args(xf_cli *cli, int argc, char **argv, bool since, bool limit, bool out,
                      audit_args *a) {
  static const struct option conn[] = {XF_CLIENT_OPTIONS};
  struct option opts[5 + sizeof(conn) / sizeof(conn[0])];
  size_t n = 0;
  opts[n++] = (struct option){"db", required_argument, 0, OPT_DB};
  for (size_t i = 0; i < sizeof(conn) / sizeof(conn[0]); i++) opts[n++] = conn[i];
  if (since) opts[n++] = (struct option){"since", required_argument, 0, OPT_SINCE};
  if (limit) opts[n++] = (struct option){"limit", required_argument, 0, OPT_LIMIT};
  if (out) opts[n++] = (struct option){"out", required_argument, 0, OPT_OUT};
  opts[n] = (struct option){0, 0, 0, 0};
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
    case OPT_OUT: a->out = optarg; break;
    case OPT_SINCE: rc = xf_cli_parse_time(cli, "--since", optarg, &a->since); break;
    case OPT_LIMIT: rc = xf_cli_parse_int(cli, "--limit", optarg, 1, LONG_MAX, &a->limit); break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
    if (rc != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (a->db && xf_client_flags_given(&a->conn))
    return xf_cli_usage(cli, "--coordinator, --cert, --key, --ca, --crl and --timeout reach the "
                             "coordinator; with --db FILE the command reads that file alone");
  return XF_EXIT_OK;
}

/* Opens an existing trail read-only (policy/audit.h): the file is any xfed
 * database that keeps one, or a backup of it, and stays as it was. */
static int open_trail(xf_cli *cli, const audit_args *a, xf_db **db, xf_audit_trail_info *info) {
  *db = NULL;
  if (access(a->db, F_OK) != 0) {
    xf_fail(&cli->err, XF_ENOENT, "no audit database (%s)", strerror(errno));
    snprintf(cli->err.file, sizeof(cli->err.file), "%s", a->db);
    return xf_cli_fail(cli, XF_ENOENT);
  }
  xf_err rc = xf_audit_open_readonly(a->db, db, info, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  return XF_EXIT_OK;
}

/* ---- the coordinator's trail ----------------------------------------------------------- */

/* One AuditQuery; on success the caller owns *answer (xf_envelope_free).
 * XF_EDENIED is the coordinator refusing this certificate (only compliance
 * and admin identities read the trail): "not authorized", exit 1. */
static int audit_query(xf_cli *cli, xf_client *c, const char *verb, double since,
                       uint64_t after_seq, uint32_t limit, Xfed__Envelope **answer) {
  Xfed__AuditQuery q = XFED__AUDIT_QUERY__INIT;
  q.verb = (char *)verb;
  q.since = since;
  q.after_seq = after_seq;
  q.limit = limit;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_AUDIT_QUERY;
  env.audit_query = &q;
  xf_err rc = xf_client_query(c, &env, XFED__ENVELOPE__BODY_AUDIT_REPLY, answer, &cli->err);
  if (rc == XF_OK) return XF_EXIT_OK;
  if (rc == XF_EDENIED) return xf_cli_fail_unauthorized(cli);
  return xf_cli_fail(cli, rc);
}

/* Called with each page's JSON lines; false stops the paging (with
 * cli->err set). */
typedef bool (*page_fn)(xf_cli *cli, const char *jsonl, void *ctx);

/* Pages through the coordinator's rows with at >= since, asking again after
 * each page's last row until none remain or `limit` rows (0: all) came. */
static int page_trail(xf_cli *cli, const audit_args *a, size_t limit, page_fn fn, void *ctx) {
  xf_client *c = NULL;
  int st = xf_client_connect(cli, &a->conn, &c);
  if (st != XF_EXIT_OK) return st;
  uint64_t after = 0;
  size_t got = 0;
  for (;;) {
    size_t want = limit ? limit - got : AUDIT_PAGE;
    if (want > AUDIT_PAGE) want = AUDIT_PAGE;
    Xfed__Envelope *answer = NULL;
    if ((st = audit_query(cli, c, "list", a->since, after, (uint32_t)want, &answer)) !=
        XF_EXIT_OK)
      break;
    const Xfed__AuditReply *r = answer->audit_reply;
    const char *jsonl = r->rows_jsonl ? r->rows_jsonl : "";
    /* The last line's seq is where the next page starts. */
    uint64_t last = after;
    size_t len = strlen(jsonl);
    if (len > 1) {
      const char *p = jsonl + len - 1;
      while (p > jsonl && p[-1] != '\n') p--;
      json_t *row = json_loads(p, JSON_DECODE_ANY, NULL);
      last = (uint64_t)json_integer_value(json_object_get(row, "seq"));
      json_decref(row);
    }
    bool more = r->more, ok = fn(cli, jsonl, ctx);
    got += r->rows;
    xf_envelope_free(answer);
    if (!ok) {
      st = xf_cli_fail(cli, cli->err.code ? cli->err.code : XF_EIO);
      break;
    }
    if (!more || (limit && got >= limit)) break;
    if (last <= after) {
      xf_fail(&cli->err, XF_EFORMAT, "the coordinator's page did not move past row %llu",
              (unsigned long long)after);
      st = xf_cli_fail(cli, XF_EFORMAT);
      break;
    }
    after = last;
  }
  xf_client_close(c);
  return st;
}

/* Collects the rows of each page into a JSON array. */
static bool collect_rows(xf_cli *cli, const char *jsonl, void *ctx) {
  json_t *rows = ctx;
  for (const char *p = jsonl; *p;) {
    size_t len = strcspn(p, "\n");
    json_t *row = json_loadb(p, len, JSON_DECODE_ANY, NULL);
    if (!json_is_object(row)) {
      json_decref(row);
      xf_fail(&cli->err, XF_EFORMAT, "the coordinator sent an audit row that is not JSON");
      return false;
    }
    json_array_append_new(rows, row);
    p += len;
    if (*p) p++;
  }
  return true;
}

/* Writes each page as it came. */
static bool write_page(xf_cli *cli, const char *jsonl, void *ctx) {
  if (fputs(jsonl, (FILE *)ctx) < 0) {
    xf_fail(&cli->err, XF_EIO, "cannot write the audit export");
    return false;
  }
  return true;
}

/* ---- list, verify, export --------------------------------------------------------------- */

int xf_cmd_audit_list(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  int status;
  if ((status = parse_args(cli, argc, argv, true, true, false, &a)) != XF_EXIT_OK) return status;
  if (!a.db) {
    json_t *rows = json_array();
    if (!rows) return xf_cli_fail(cli, XF_ENOMEM);
    status = page_trail(cli, &a, (size_t)a.limit, collect_rows, rows);
    if (status != XF_EXIT_OK) {
      json_decref(rows);
      return status;
    }
    xf_cli_audit_rows_print_json(cli, rows);
    return XF_EXIT_OK;
  }
  xf_db *db;
  if ((status = open_trail(cli, &a, &db, NULL)) != XF_EXIT_OK) return status;
  xf_audit_row *list = NULL;
  size_t n = 0;
  xf_err rc = xf_audit_list(db, a.since, (size_t)a.limit, &list, &n, &cli->err);
  xf_db_close(db);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_cli_audit_rows_print(cli, list, n);
  xf_audit_rows_free(list, n);
  return XF_EXIT_OK;
}

/* `audit verify` without --db: the coordinator walks its own trail. It
 * sends no head digest: the head to keep is the last row of 'xfed audit
 * export'. */
static int verify_remote(xf_cli *cli, const audit_args *a) {
  xf_client *c = NULL;
  int st = xf_client_connect(cli, &a->conn, &c);
  if (st != XF_EXIT_OK) return st;
  Xfed__Envelope *answer = NULL;
  st = audit_query(cli, c, "verify", 0, 0, 0, &answer);
  xf_client_close(c);
  if (st != XF_EXIT_OK) return st;
  const Xfed__AuditReply *r = answer->audit_reply;
  bool intact = r->intact;
  const char *what = r->what ? r->what : "";
  if (cli->json)
    xf_cli_print_json(json_pack("{s:b,s:s,s:I,s:I,s:s}", "intact", intact, "fault",
                         r->fault ? r->fault : "?", "rows", (json_int_t)r->rows, "seq",
                         (json_int_t)r->bad_seq, "what", what));
  else
    printf("%s%s\n", intact ? "" : "TAMPERED: ", what);
  xf_envelope_free(answer);
  return intact ? XF_EXIT_OK : XF_EXIT_ERROR;
}

int xf_cmd_audit_verify(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  xf_db *db;
  int status;
  if ((status = parse_args(cli, argc, argv, false, false, false, &a)) != XF_EXIT_OK)
    return status;
  if (!a.db) return verify_remote(cli, &a);
  xf_audit_trail_info info;
  if ((status = open_trail(cli, &a, &db, &info)) != XF_EXIT_OK) return status;
  xf_audit_verdict v;
  memset(&v, 0, sizeof(v));
  xf_err rc = xf_audit_verify(db, &v, &cli->err);
  xf_db_close(db);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  return xf_cli_audit_verdict_print(cli, &v, xf_audit_trail_kind_name(info.kind));
}

int xf_cmd_audit_export(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  xf_db *db = NULL;
  int status;
  if ((status = parse_args(cli, argc, argv, true, false, true, &a)) != XF_EXIT_OK)
    return status;
  if (a.out && xf_file_check_target(a.out, &cli->err) != XF_OK)
    return xf_cli_fail(cli, cli->err.code);
  if (a.db && (status = open_trail(cli, &a, &db, NULL)) != XF_EXIT_OK) return status;
  /* With --out the lines gather in memory and the file appears whole
   * (base/file.h), or not at all. */
  char *buf = NULL;
  size_t len = 0;
  FILE *out = a.out ? open_memstream(&buf, &len) : stdout;
  if (!out) {
    xf_db_close(db);
    return xf_cli_fail(cli, XF_ENOMEM);
  }
  xf_err rc = XF_OK;
  if (a.db) {
    rc = xf_audit_export(db, a.since, out, &cli->err);
    xf_db_close(db);
  } else {
    status = page_trail(cli, &a, 0, write_page, out);
  }
  if (a.out) {
    bool closed = fclose(out) == 0;
    if (rc == XF_OK && status == XF_EXIT_OK)
      rc = closed ? xf_file_write_atomic(a.out, buf, len, 0600, &cli->err)
                  : xf_fail(&cli->err, XF_ENOMEM, "cannot hold the rows for %s", a.out);
    free(buf); /* open_memstream's */
  }
  if (status != XF_EXIT_OK) return status;
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (a.out) {
    if (cli->json) xf_cli_print_json(json_pack("{s:s}", "out", a.out));
    else fprintf(stderr, "audit rows written to %s\n", a.out);
  }
  return XF_EXIT_OK;
}
