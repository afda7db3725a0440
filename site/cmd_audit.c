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

#include "cmd/print.h"
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
      return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  return XF_EXIT_OK;
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
  xf_cli_audit_rows_print(cli, rows, n);
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
  return xf_cli_audit_verdict_print(cli, &v, NULL);
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
