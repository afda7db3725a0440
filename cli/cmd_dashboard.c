/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed dashboard`: a one-use token to the coordinator's web dashboard,
 * asked for over the CLI's mutual-TLS session, printed as the URL to open
 * (docs/dashboard.md). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "net/frame.h"

#define OPT_TTL 0x3000

int xf_cmd_dashboard(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      XF_CLIENT_OPTIONS, {"ttl", required_argument, 0, OPT_TTL}, {0, 0, 0, 0}};
  xf_client_flags conn;
  memset(&conn, 0, sizeof(conn));
  long ttl = 0;
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    int st = xf_client_flag(cli, &conn, ch, optarg);
    if (st >= 0) {
      if (st != XF_EXIT_OK) return st;
      continue;
    }
    if (ch != OPT_TTL) return xf_cli_option_error(cli, ch, argv, opts);
    if (xf_cli_parse_int(cli, "--ttl", optarg, 60, 3600, &ttl) != XF_OK)
      return xf_cli_usage(cli, "%s", cli->err.msg);
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);

  xf_client *c = NULL;
  int st = xf_client_connect(cli, &conn, &c);
  if (st != XF_EXIT_OK) return st;
  Xfed__DashboardRequest q = XFED__DASHBOARD_REQUEST__INIT;
  q.ttl_s = (uint32_t)ttl;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_DASHBOARD_REQUEST;
  env.dashboard_request = &q;
  Xfed__Envelope *answer = NULL;
  xf_err rc = xf_client_query(c, &env, XFED__ENVELOPE__BODY_DASHBOARD_GRANT, &answer, &cli->err);
  xf_client_close(c);
  if (rc == XF_EDENIED) return xf_cli_fail_unauthorized(cli);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  const Xfed__DashboardGrant *g = answer->dashboard_grant;
  const char *host = g->host && *g->host ? g->host : "127.0.0.1";
  bool v6 = strchr(host, ':') != NULL;
  char url[512];
  snprintf(url, sizeof(url), "https://%s%s%s:%u/login?token=%s", v6 ? "[" : "", host,
           v6 ? "]" : "", (unsigned)g->port, g->token ? g->token : "");
  char until[32] = "";
  time_t t = (time_t)g->expires;
  struct tm tm;
  if (gmtime_r(&t, &tm)) strftime(until, sizeof(until), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (cli->json) {
    json_t *o = json_pack("{s:s,s:f,s:s}", "url", url, "expires", g->expires, "expires_utc", until);
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    if (text) printf("%s\n", text);
    free(text); /* jansson's */
  } else {
    printf("%s\n", url);
    fprintf(stderr, "%s %s: open this URL once, before %s, in a browser that trusts the "
            "coordinator's certificate; it signs the browser in until then\n", cli->prog,
            cli->name, until);
  }
  /* The token is good once: no copy is kept beyond what was printed. */
  xf_envelope_free(answer);
  return XF_EXIT_OK;
}
