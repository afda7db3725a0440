/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed audit list|verify|export`: reading and verifying a hash-chained
 * audit trail kept in a local database (--db FILE; policy/audit.h). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "policy/audit.h"

typedef struct audit_args {
  const char *db, *out;
  double since;
  long limit;
} audit_args;

enum { OPT_DB = 256, OPT_SINCE, OPT_LIMIT, OPT_OUT };

/* Parses the flags of one verb: --db always; --since, --limit and --out
 * when the matching argument is true. Returns an exit status (XF_EXIT_OK to go on). */
static int parse_args(xf_cli *cli, int argc, char **argv, bool since, bool limit, bool out,
                      audit_args *a) {
  struct option opts[5];
  size_t n = 0;
  opts[n++] = (struct option){"db", required_argument, 0, OPT_DB};
  if (since) opts[n++] = (struct option){"since", required_argument, 0, OPT_SINCE};
  if (limit) opts[n++] = (struct option){"limit", required_argument, 0, OPT_LIMIT};
  if (out) opts[n++] = (struct option){"out", required_argument, 0, OPT_OUT};
  opts[n] = (struct option){0, 0, 0, 0};
  memset(a, 0, sizeof(*a));
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    xf_err rc = XF_OK;
    switch (ch) {
    case OPT_DB: a->db = optarg; break;
    case OPT_OUT: a->out = optarg; break;
    case OPT_SINCE: rc = xf_cli_parse_time(cli, "--since", optarg, &a->since); break;
    case OPT_LIMIT: rc = xf_cli_parse_int(cli, "--limit", optarg, 1, LONG_MAX, &a->limit); break;
    default: return xf_cli_option_error(cli, ch, argv);
    }
    if (rc != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!a->db)
    return xf_cli_usage(cli, "--db FILE is required: only a local audit database is supported "
                             "for now (the coordinator's trail is not reachable from the CLI yet)");
  return XF_EXIT_OK;
}

/* Opens an existing trail: reading a path that does not exist must not
 * leave an empty database behind it. */
static int open_trail(xf_cli *cli, const audit_args *a, xf_db **db) {
  *db = NULL;
  if (access(a->db, F_OK) != 0) {
    xf_fail(&cli->err, XF_ENOENT, "no audit database (%s)", strerror(errno));
    snprintf(cli->err.file, sizeof(cli->err.file), "%s", a->db);
    return xf_cli_fail(cli, XF_ENOENT);
  }
  xf_err rc = xf_audit_open(a->db, db, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  return XF_EXIT_OK;
}

static void print_json(json_t *o) {
  json_dumpf(o, stdout, JSON_INDENT(2));
  fputc('\n', stdout);
  json_decref(o);
}

static const char *utc_text(double t, char buf[32]) {
  time_t s = (time_t)floor(t);
  struct tm tm;
  if (!isfinite(t) || !gmtime_r(&s, &tm) || !strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(buf, 32, "%g", t);
  return buf;
}

int xf_cmd_audit_list(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  xf_db *db;
  int status;
  if ((status = parse_args(cli, argc, argv, true, true, false, &a)) != XF_EXIT_OK ||
      (status = open_trail(cli, &a, &db)) != XF_EXIT_OK)
    return status;
  xf_audit_row *rows = NULL;
  size_t n = 0;
  xf_err rc = xf_audit_list(db, a.since, (size_t)a.limit, &rows, &n, &cli->err);
  xf_db_close(db);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  char when[32];
  if (cli->json) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
      const xf_audit_row *r = &rows[i];
      json_t *detail = json_loads(r->detail, JSON_DECODE_ANY, NULL);
      json_array_append_new(
          arr, json_pack("{s:I,s:f,s:s,s:s,s:s,s:o,s:s,s:s}", "seq", (json_int_t)r->seq, "at",
                         r->at, "actor", r->actor, "kind", r->kind, "subject", r->subject,
                         "detail", detail ? detail : json_string(r->detail), "prev", r->prev,
                         "digest", r->digest));
    }
    print_json(json_pack("{s:o}", "rows", arr));
  } else {
    printf("%-6s %-20s %-18s %-24s %-20s %s\n", "SEQ", "TIME (UTC)", "KIND", "ACTOR", "SUBJECT",
           "DETAIL");
    for (size_t i = 0; i < n; i++) {
      const xf_audit_row *r = &rows[i];
      printf("%-6llu %-20s %-18s %-24s %-20s %s\n", (unsigned long long)r->seq,
             utc_text(r->at, when), r->kind, r->actor, r->subject, r->detail);
    }
  }
  xf_audit_rows_free(rows, n);
  return XF_EXIT_OK;
}

static const char *fault_name(xf_audit_fault f) {
  switch (f) {
  case XF_AUDIT_INTACT: return "intact";
  case XF_AUDIT_EDITED: return "edited";
  case XF_AUDIT_INSERTED: return "inserted";
  case XF_AUDIT_DELETED: return "deleted";
  case XF_AUDIT_TRUNCATED: return "truncated";
  }
  return "?";
}

int xf_cmd_audit_verify(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  xf_db *db;
  int status;
  if ((status = parse_args(cli, argc, argv, false, false, false, &a)) != XF_EXIT_OK ||
      (status = open_trail(cli, &a, &db)) != XF_EXIT_OK)
    return status;
  xf_audit_verdict v;
  memset(&v, 0, sizeof(v));
  xf_err rc = xf_audit_verify(db, &v, &cli->err);
  xf_db_close(db);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  bool intact = v.fault == XF_AUDIT_INTACT;
  if (cli->json) {
    print_json(json_pack("{s:b,s:s,s:I,s:I,s:s,s:{s:I,s:s}}", "intact", intact, "fault",
                         fault_name(v.fault), "rows", (json_int_t)v.rows, "seq",
                         (json_int_t)v.seq, "what", v.what, "head", "seq",
                         (json_int_t)v.head.seq, "digest", v.head.digest));
  } else {
    printf("%s%s\n", intact ? "" : "TAMPERED: ", v.what);
    if (intact)
      printf("head: row %llu, digest %s (keep it elsewhere to detect a cut end later)\n",
             (unsigned long long)v.head.seq, v.head.digest);
  }
  return intact ? XF_EXIT_OK : XF_EXIT_DENIED;
}

int xf_cmd_audit_export(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  xf_db *db;
  int status;
  if ((status = parse_args(cli, argc, argv, true, false, true, &a)) != XF_EXIT_OK)
    return status;
  char tmp[4096] = "";
  FILE *out = stdout;
  if (a.out) {
    int n = snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", a.out);
    if (n < 0 || (size_t)n >= sizeof(tmp)) return xf_cli_usage(cli, "--out path too long");
  }
  if ((status = open_trail(cli, &a, &db)) != XF_EXIT_OK) return status;
  if (a.out) {
    int fd = mkstemp(tmp);
    out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!out) {
      if (fd >= 0) close(fd);
      xf_db_close(db);
      xf_fail(&cli->err, XF_EIO, "cannot create a file next to it: %s", strerror(errno));
      snprintf(cli->err.file, sizeof(cli->err.file), "%s", a.out);
      return xf_cli_fail(cli, XF_EIO);
    }
  }
  xf_err rc = xf_audit_export(db, a.since, out, &cli->err);
  xf_db_close(db);
  if (a.out) {
    bool closed = fclose(out) == 0;
    if (rc == XF_OK && (!closed || rename(tmp, a.out) != 0)) {
      rc = xf_fail(&cli->err, XF_EIO, "cannot write: %s", strerror(errno));
      snprintf(cli->err.file, sizeof(cli->err.file), "%s", a.out);
    }
    if (rc != XF_OK) unlink(tmp);
  }
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (a.out) {
    if (cli->json) print_json(json_pack("{s:s}", "out", a.out));
    else fprintf(stderr, "audit rows written to %s\n", a.out);
  }
  return XF_EXIT_OK;
}
