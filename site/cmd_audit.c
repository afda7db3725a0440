/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed-site audit list|verify|export`: the site's own hash-chained audit
 * trail in the site database (policy/audit.h; docs/policy.md, "Site-local
 * rules"). */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "policy/audit.h"
#include "site/cmd.h"

typedef struct audit_args {
  const char *dir;
  double since;
} audit_args;

enum { OPT_DIR = 256, OPT_SINCE };

/* --dir always, --since when since. Returns an exit status (XF_EXIT_OK to go on). */
static int parse_args(xf_cli *cli, int argc, char **argv, bool since, audit_args *a) {
  struct option opts[3];
  size_t n = 0;
  opts[n++] = (struct option){"dir", required_argument, 0, OPT_DIR};
  if (since) opts[n++] = (struct option){"since", required_argument, 0, OPT_SINCE};
  opts[n] = (struct option){0, 0, 0, 0};
  memset(a, 0, sizeof(*a));
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (ch == OPT_DIR) {
      a->dir = optarg;
    } else if (ch == OPT_SINCE) {
      if (xf_cli_parse_time(cli, "--since", optarg, &a->since) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
    } else {
      return xf_cli_option_error(cli, ch, argv);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  return XF_EXIT_OK;
}

static void print_json(json_t *o) {
  json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
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

int xf_site_cmd_audit_list(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  int status = parse_args(cli, argc, argv, true, &a);
  if (status != XF_EXIT_OK) return status;
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_cli_open(cli, a.dir, &cfg, &reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_audit_row *rows = NULL;
  size_t n = 0;
  rc = xf_audit_list(xf_site_registry_db(reg), a.since, 0, &rows, &n, &cli->err);
  xf_site_registry_close(reg);
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
    printf("%-6s %-20s %-14s %-16s %-14s %s\n", "SEQ", "TIME (UTC)", "KIND", "ACTOR", "SUBJECT",
           "DETAIL");
    for (size_t i = 0; i < n; i++) {
      const xf_audit_row *r = &rows[i];
      printf("%-6llu %-20s %-14s %-16s %-14s %s\n", (unsigned long long)r->seq,
             utc_text(r->at, when), r->kind, r->actor, r->subject, r->detail);
    }
  }
  xf_audit_rows_free(rows, n);
  return XF_EXIT_OK;
}

/* Exits 1 when the trail is damaged, naming the first bad row. */
int xf_site_cmd_audit_verify(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  int status = parse_args(cli, argc, argv, false, &a);
  if (status != XF_EXIT_OK) return status;
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_cli_open(cli, a.dir, &cfg, &reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_audit_verdict v;
  memset(&v, 0, sizeof(v));
  rc = xf_audit_verify(xf_site_registry_db(reg), &v, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  bool intact = v.fault == XF_AUDIT_INTACT;
  if (cli->json) {
    print_json(json_pack("{s:b,s:s,s:I,s:I,s:s,s:{s:I,s:s}}", "intact", intact, "fault",
                         xf_audit_fault_name(v.fault), "rows", (json_int_t)v.rows, "seq",
                         (json_int_t)v.seq, "what", v.what, "head", "seq",
                         (json_int_t)v.head.seq, "digest", v.head.digest));
  } else if (intact) {
    printf("%s\n", v.what);
    printf("head: row %llu, digest %s (keep it elsewhere to detect a cut end later)\n",
           (unsigned long long)v.head.seq, v.head.digest);
  } else {
    printf("TAMPERED at row %llu (%s): %s\n", (unsigned long long)v.seq, xf_audit_fault_name(v.fault),
           v.what);
  }
  return intact ? XF_EXIT_OK : XF_EXIT_ERROR;
}

int xf_site_cmd_audit_export(xf_cli *cli, int argc, char **argv) {
  audit_args a;
  int status = parse_args(cli, argc, argv, true, &a);
  if (status != XF_EXIT_OK) return status;
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_cli_open(cli, a.dir, &cfg, &reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  rc = xf_audit_export(xf_site_registry_db(reg), a.since, stdout, &cli->err);
  xf_site_registry_close(reg);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}
