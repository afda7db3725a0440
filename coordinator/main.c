/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed-coord`: reads the configuration (a JSON file and flags over it) and
 * runs the coordinator daemon (coordinator/daemon.h), or backs up its
 * journal. `xfed-coord --role ...` with no verb means `xfed-coord run`. */
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/name.h"
#include "cmd/cmd.h"
#include "coordinator/daemon.h"
#include "coordinator/retention.h"
#include "http/http.h"

#define PROG "xfed-coord"


/* HOST:PORT in base/name.h's grammar, localhost read as 127.0.0.1 (the
 * daemon's sockets take numeric addresses); port 0 only where allow_zero:
 * a listener picking a free port. A usage error naming the flag or key. */
static xf_err parse_addr(xf_cli *cli, const char *what, const char *s, char *host, size_t n,
                         int *port) {
  bool allow_zero = strcmp(what, "--listen") == 0 || strcmp(what, "listen") == 0 ||
                    strcmp(what, "--metrics") == 0 || strcmp(what, "metrics") == 0 ||
                    strcmp(what, "--dashboard") == 0 || strcmp(what, "dashboard") == 0;
  xf_errctx why = {0};
  uint16_t p = 0;
  if (xf_address_parse_as(s, XF_ADDRESS_LOOPBACK | (allow_zero ? XF_ADDRESS_PORT0 : 0), host, n,
                          &p, &why) != XF_OK)
    return xf_fail(&cli->err, XF_EUSAGE, "%s %s", what, why.msg);
  *port = p;
  return XF_OK;
}

/* --metrics and --dashboard (flags or config keys) need the HTTP server,
 * which a build configured with -DXF_HTTP=OFF leaves out. */
static xf_err need_http(xf_cli *cli, const char *what) {
#ifdef XF_HAVE_HTTP
  (void)cli;
  (void)what;
  return XF_OK;
#else
  bool flag = what[0] == '-'; /* a config key is named by the error's field */
  return xf_fail(&cli->err, XF_EUSAGE, "%s%sthis " PROG " was " XF_HTTP_ABSENT, flag ? what : "",
                 flag ? ": " : "");
#endif
}

/* --metrics and --dashboard [HOST:]PORT: a port alone listens on 127.0.0.1
 * (loopback); port 0 picks a free one. */
static xf_err parse_http_addr(xf_cli *cli, const char *what, const char *s, char *host, size_t n,
                              int *port) {
  XF_GUARD(need_http(cli, what));
  if (!strchr(s, ':')) {
    char *end = NULL;
    long p = strtol(s, &end, 10);
    if (!*s || !end || *end || p < 0 || p > 65535)
      return xf_fail(&cli->err, XF_EUSAGE,
                     "%s '%s' is not [HOST:]PORT with a port from 0 to 65535", what, s);
    snprintf(host, n, "127.0.0.1");
    *port = (int)p;
    return XF_OK;
  }
  return parse_addr(cli, what, s, host, n, port);
}

static xf_err parse_metrics(xf_cli *cli, const char *what, const char *s, xf_coord_config *c) {
  return parse_http_addr(cli, what, s, c->metrics_host, sizeof(c->metrics_host),
                         &c->metrics_port);
}

static xf_err parse_dashboard(xf_cli *cli, const char *what, const char *s, xf_coord_config *c) {
  return parse_http_addr(cli, what, s, c->dashboard_host, sizeof(c->dashboard_host),
                         &c->dashboard_port);
}

/* A path from the config file: relative ones are relative to its directory. */
static void config_path(char *dst, size_t n, const char *base_dir, const char *v) {
  if (v[0] == '/' || !base_dir)
    snprintf(dst, n, "%s", v);
  else
    snprintf(dst, n, "%s/%s", base_dir, v);
}

/* The configuration keys that bound connections (docs/coordinator.md,
 * "Connections"): all numbers. */
static const char *const connection_keys[] = {"handshake_timeout_s", "min_frame_rate",
                                              "frame_rate_window_s", "frame_grace_s",
                                              "buffer_budget", NULL};

/* The caps are net/conn.h's XF_CONN_CAP_MAP, keyed by their names. */
static bool connection_key(const char *k) {
  for (size_t i = 0; connection_keys[i]; i++)
    if (strcmp(connection_keys[i], k) == 0) return true;
  return xf_conn_cap_by_name(k) != XF_CONN_CAP_COUNT;
}

static xf_err connection_setting(xf_cli *cli, const char *k, double d, xf_coord_config *c) {
  if (strcmp(k, "handshake_timeout_s") == 0 || strcmp(k, "frame_rate_window_s") == 0 ||
      strcmp(k, "frame_grace_s") == 0) {
    if (!(d >= 0.01 && d <= 3600))
      return xf_fail(&cli->err, XF_ERANGE, "must be from 0.01 to 3600 seconds");
    if (k[0] == 'h') c->handshake_timeout_s = d;
    else if (strcmp(k, "frame_rate_window_s") == 0) c->frame_rate_window_s = d;
    else c->frame_grace_s = d;
  } else if (strcmp(k, "min_frame_rate") == 0) {
    if (!(d >= 1 && d <= 1073741824.0))
      return xf_fail(&cli->err, XF_ERANGE, "must be from 1 to 1073741824 bytes per second");
    c->min_frame_rate = (uint32_t)d;
  } else if (strcmp(k, "buffer_budget") == 0) {
    if (!(d >= 1048576.0 && d <= 68719476736.0))
      return xf_fail(&cli->err, XF_ERANGE, "must be from 1048576 to 68719476736 bytes");
    c->buffer_budget = (size_t)d;
  } else {
    if (!(d >= 1 && d <= 1000000))
      return xf_fail(&cli->err, XF_ERANGE, "must be from 1 to 1000000 connections");
    c->connection_caps[xf_conn_cap_by_name(k)] = (size_t)d;
  }
  return XF_OK;
}

/* After every field: caps that contradict each other name both keys. */
static xf_err connection_caps_check(xf_cli *cli, const xf_coord_config *c) {
  static const xf_conn_cap within[][2] = {
      {XF_CONN_CAP_PER_ADDRESS, XF_CONN_CAP_TOTAL},
      {XF_CONN_CAP_UNAUTHENTICATED, XF_CONN_CAP_TOTAL},
      {XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS, XF_CONN_CAP_UNAUTHENTICATED},
      {XF_CONN_CAP_AUTHENTICATED, XF_CONN_CAP_TOTAL},
      {XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS, XF_CONN_CAP_AUTHENTICATED}};
  for (size_t i = 0; i < sizeof(within) / sizeof(within[0]); i++) {
    size_t part = c->connection_caps[within[i][0]], whole = c->connection_caps[within[i][1]];
    if (part && whole && part > whole) {
      snprintf(cli->err.field, sizeof(cli->err.field), "%s", xf_conn_cap_name(within[i][0]));
      return xf_fail(&cli->err, XF_ERANGE, "is %zu, above %s (%zu), which bounds it", part,
                     xf_conn_cap_name(within[i][1]), whole);
    }
  }
  return XF_OK;
}

/* A string field of the configuration into c (paths relative to dir, the
 * configuration's folder). */
static xf_err string_field(xf_cli *cli, const char *dir, const char *k, const char *s,
                           xf_coord_config *c) {
  xf_err rc = XF_OK;
  if (strcmp(k, "role") == 0) {
    if (strcmp(s, "global") != 0 && strcmp(s, "regional") != 0) {
      return xf_fail(&cli->err, XF_EFORMAT, "is '%s'; use \"global\" or \"regional\"", s);
    }
    c->regional = strcmp(s, "regional") == 0;
  } else if (strcmp(k, "region") == 0) {
    snprintf(c->region, sizeof(c->region), "%s", s);
  } else if (strcmp(k, "residency_policy") == 0) {
    if (strcmp(s, "enforce") != 0 && strcmp(s, "off") != 0) {
      return xf_fail(&cli->err, XF_EFORMAT, "is '%s'; use \"enforce\" or \"off\"", s);
    }
    c->residency_off = strcmp(s, "off") == 0;
  } else if (strcmp(k, "listen") == 0) {
    if ((rc = parse_addr(cli, "listen", s, c->listen_host, sizeof(c->listen_host),
                         &c->listen_port)) != XF_OK)
      return rc;
  } else if (strcmp(k, "upstream") == 0) {
    if ((rc = parse_addr(cli, "upstream", s, c->upstream_host, sizeof(c->upstream_host),
                         &c->upstream_port)) != XF_OK)
      return rc;
  } else if (strcmp(k, "cert") == 0) {
    config_path(c->cert, sizeof(c->cert), dir, s);
  } else if (strcmp(k, "key") == 0) {
    config_path(c->key, sizeof(c->key), dir, s);
  } else if (strcmp(k, "ca") == 0) {
    config_path(c->ca, sizeof(c->ca), dir, s);
  } else if (strcmp(k, "crl") == 0) {
    config_path(c->crl, sizeof(c->crl), dir, s);
  } else if (strcmp(k, "state_dir") == 0) {
    config_path(c->state_dir, sizeof(c->state_dir), dir, s);
  } else if (strcmp(k, "port_file") == 0) {
    config_path(c->port_file, sizeof(c->port_file), dir, s);
  } else if (strcmp(k, "metrics_port_file") == 0) {
    config_path(c->metrics_port_file, sizeof(c->metrics_port_file), dir, s);
  } else if (strcmp(k, "dashboard_port_file") == 0) {
    config_path(c->dashboard_port_file, sizeof(c->dashboard_port_file), dir, s);
  } else if (strcmp(k, "dashboard") == 0) {
    if ((rc = parse_dashboard(cli, "dashboard", s, c)) != XF_OK) return rc;
  } else if (strcmp(k, "metrics") == 0) {
    if ((rc = parse_metrics(cli, "metrics", s, c)) != XF_OK) return rc;
  }
  return rc;
}

/* A number field of the configuration into c, checked against its range. */
static xf_err number_field(xf_cli *cli, const char *k, double d, xf_coord_config *c) {
  if (strcmp(k, "max_frame") == 0) {
    if (!(d >= 65536 && d <= 256.0 * 1024 * 1024))
      return xf_fail(&cli->err, XF_ERANGE, "must be from 65536 to 268435456 bytes");
    c->max_frame = (size_t)d;
  } else if (connection_key(k)) {
    return connection_setting(cli, k, d, c);
  } else if (strcmp(k, "max_staged") == 0) {
    if (!(d >= 1 && d <= 1024)) return xf_fail(&cli->err, XF_ERANGE, "must be from 1 to 1024");
    c->max_staged = (uint32_t)d;
  } else if (strcmp(k, "checkpoint_retention") == 0) {
    return xf_retention_parse(d, &c->checkpoint_retention, &cli->err);
  } else if (strcmp(k, "resume_grace_s") == 0 || strcmp(k, "eval_timeout_s") == 0) {
    if (!(d > 0 && d <= 86400))
      return xf_fail(&cli->err, XF_ERANGE, "must be above 0 and at most 86400 seconds");
    if (k[0] == 'r') c->resume_grace_s = d;
    else c->eval_timeout_s = d;
  }
  return XF_OK;
}

/* One field of the configuration: a known key of the right type, into c.
 * The error names the field. */
static xf_err config_field(xf_cli *cli, const char *dir, const char *k, json_t *v,
                           xf_coord_config *c) {
  static const char *const keys[] = {"role",      "region",      "listen",     "upstream",
                                     "cert",      "key",         "ca",         "crl",
                                     "state_dir", "port_file",   "max_frame",  "max_staged",
                                     "resume_grace_s", "eval_timeout_s", "residency_policy",
                                     "checkpoint_retention",
                                     "handshake_timeout_s", "min_frame_rate",
                                     "frame_rate_window_s", "frame_grace_s", "buffer_budget",
                                     "metrics",
                                     "metrics_port_file", "dashboard", "dashboard_port_file",
                                     NULL};
  size_t i = 0;
  while (keys[i] && strcmp(keys[i], k) != 0) i++;
  snprintf(cli->err.field, sizeof(cli->err.field), "%s", k);
  if (!keys[i] && xf_conn_cap_by_name(k) == XF_CONN_CAP_COUNT) {
    char all[1024];
    size_t n = 0;
    for (size_t j = 0; keys[j] && n < sizeof(all); j++)
      n += (size_t)snprintf(all + n, sizeof(all) - n, "%s%s", j ? ", " : "", keys[j]);
    /* The caps by pairs, "max_connections[_per_address]": the list fits
     * the error's message. */
    for (int cap = 0; cap < XF_CONN_CAP_COUNT && n < sizeof(all); cap++) {
      const char *name = xf_conn_cap_name((xf_conn_cap)cap);
      char pair[96];
      snprintf(pair, sizeof(pair), "%s_per_address", name);
      bool paired = xf_conn_cap_by_name(pair) != XF_CONN_CAP_COUNT;
      size_t len = strlen(name), tail = strlen("_per_address");
      if (len > tail && strcmp(name + len - tail, "_per_address") == 0) {
        snprintf(pair, sizeof(pair), "%.*s", (int)(len - tail), name);
        if (xf_conn_cap_by_name(pair) != XF_CONN_CAP_COUNT) continue; /* listed with it */
      }
      n += (size_t)snprintf(all + n, sizeof(all) - n, ", %s%s", name,
                            paired ? "[_per_address]" : "");
    }
    return xf_fail(&cli->err, XF_EFORMAT, "unknown field; the fields are %s", all);
  }
  bool numeric = strcmp(k, "max_frame") == 0 || strcmp(k, "max_staged") == 0 ||
                 strcmp(k, "resume_grace_s") == 0 || strcmp(k, "eval_timeout_s") == 0 ||
                 strcmp(k, "checkpoint_retention") == 0 || connection_key(k);
  if (numeric ? !json_is_number(v) : !json_is_string(v))
    return xf_fail(&cli->err, XF_EFORMAT, "must be a %s", numeric ? "number" : "string");
  return numeric ? number_field(cli, k, json_number_value(v), c)
                 : string_field(cli, dir, k, json_string_value(v), c);
}

static xf_err load_config(xf_cli *cli, const char *path, xf_coord_config *c) {
  json_error_t je;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    xf_errctx_file(&cli->err, path);
    return xf_fail(&cli->err, XF_EFORMAT, "line %d, column %d: %s", je.line, je.column, je.text);
  }
  char dir_buf[PATH_MAX];
  snprintf(dir_buf, sizeof(dir_buf), "%s", path);
  const char *dir = dirname(dir_buf);
  xf_err rc = XF_OK;
  const char *k;
  json_t *v;
  if (!json_is_object(root)) {
    rc = xf_fail(&cli->err, XF_EFORMAT, "the configuration is one JSON object {...}");
    goto out;
  }
  json_object_foreach(root, k, v) {
    if ((rc = config_field(cli, dir, k, v, c)) != XF_OK) goto out;
  }
  cli->err.field[0] = '\0';
  if ((rc = connection_caps_check(cli, c)) != XF_OK) goto out;
  size_t frame = c->max_frame ? c->max_frame : 4u * 1024u * 1024u;
  if (c->buffer_budget && c->buffer_budget < frame) {
    snprintf(cli->err.field, sizeof(cli->err.field), "buffer_budget");
    rc = xf_fail(&cli->err, XF_ERANGE,
                 "is %zu bytes, below max_frame (%zu bytes): one frame must fit the budget; "
                 "raise buffer_budget or lower max_frame",
                 c->buffer_budget, frame);
  }
out:
  if (rc != XF_OK) xf_errctx_file(&cli->err, path);
  json_decref(root);
  return rc;
}

static int cmd_run(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      {"config", required_argument, 0, 'f'}, {"role", required_argument, 0, 'r'},
      {"region", required_argument, 0, 'R'}, {"listen", required_argument, 0, 'l'},
      {"upstream", required_argument, 0, 'u'}, {"cert", required_argument, 0, 'C'},
      {"key", required_argument, 0, 'K'},    {"ca", required_argument, 0, 'A'},
      {"crl", required_argument, 0, 'L'},    {"state", required_argument, 0, 's'},
      {"port-file", required_argument, 0, 'p'}, {"residency-policy", required_argument, 0, 'P'},
      {"metrics", required_argument, 0, 'M'}, {"metrics-port-file", required_argument, 0, 'm'},
      {"dashboard", required_argument, 0, 'D'},
      {"dashboard-port-file", required_argument, 0, 'd'},
      {0, 0, 0, 0}};
  xf_coord_config c;
  memset(&c, 0, sizeof(c));
  snprintf(c.listen_host, sizeof(c.listen_host), "127.0.0.1");
  c.listen_port = 7443;
  /* The config file first, flags over it: find --config in a first pass. */
  opterr = 0;
  optind = 1;
  int ch;
  const char *config = NULL;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (ch == 'f') config = optarg;
    else if (ch == '?' || ch == ':') return xf_cli_option_error(cli, ch, argv, opts);
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (config && load_config(cli, config, &c) != XF_OK) return xf_cli_fail(cli, cli->err.code);
  optind = 1;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    xf_err rc = XF_OK;
    switch (ch) {
    case 'r':
      if (strcmp(optarg, "global") != 0 && strcmp(optarg, "regional") != 0)
        return xf_cli_usage(cli, "--role is 'global' or 'regional', not '%s'", optarg);
      c.regional = strcmp(optarg, "regional") == 0;
      break;
    case 'R': snprintf(c.region, sizeof(c.region), "%s", optarg); break;
    case 'l':
      rc = parse_addr(cli, "--listen", optarg, c.listen_host, sizeof(c.listen_host),
                      &c.listen_port);
      break;
    case 'u':
      rc = parse_addr(cli, "--upstream", optarg, c.upstream_host, sizeof(c.upstream_host),
                      &c.upstream_port);
      break;
    case 'C': snprintf(c.cert, sizeof(c.cert), "%s", optarg); break;
    case 'K': snprintf(c.key, sizeof(c.key), "%s", optarg); break;
    case 'A': snprintf(c.ca, sizeof(c.ca), "%s", optarg); break;
    case 'L': snprintf(c.crl, sizeof(c.crl), "%s", optarg); break;
    case 's': snprintf(c.state_dir, sizeof(c.state_dir), "%s", optarg); break;
    case 'p': snprintf(c.port_file, sizeof(c.port_file), "%s", optarg); break;
    case 'M': rc = parse_metrics(cli, "--metrics", optarg, &c); break;
    case 'm': snprintf(c.metrics_port_file, sizeof(c.metrics_port_file), "%s", optarg); break;
    case 'D': rc = parse_dashboard(cli, "--dashboard", optarg, &c); break;
    case 'd':
      snprintf(c.dashboard_port_file, sizeof(c.dashboard_port_file), "%s", optarg);
      break;
    case 'P':
      if (strcmp(optarg, "enforce") != 0 && strcmp(optarg, "off") != 0)
        return xf_cli_usage(cli, "--residency-policy is 'enforce' or 'off', not '%s'", optarg);
      c.residency_off = strcmp(optarg, "off") == 0;
      break;
    default: break;
    }
    if (rc != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  }
  if (c.regional && !c.region[0]) return xf_cli_usage(cli, "--role regional needs --region R");
  if (c.regional && !c.upstream_host[0])
    return xf_cli_usage(cli, "--role regional needs --upstream HOST:PORT (the global coordinator)");
  if (!c.regional && c.upstream_host[0])
    return xf_cli_usage(cli, "--upstream is for --role regional; the global coordinator has none");
  if (c.regional && c.checkpoint_retention)
    return xf_cli_usage(cli, "checkpoint_retention is the global coordinator's; a regional "
                             "aggregator keeps no checkpoints");
  if (c.regional && c.residency_off)
    return xf_cli_usage(cli, "--residency-policy is the global coordinator's; a regional "
                             "aggregator enforces what its tasks carry");
  if (!c.regional && !c.residency_off && !c.region[0])
    return xf_cli_usage(cli, "the global coordinator needs --region R (the region it runs in) to "
                             "place it in the residency policy; a federation without a policy "
                             "runs with --residency-policy off");
  if (c.region[0] && !xf_label_valid(c.region))
    return xf_cli_usage(cli, "--region '%s' is not a region name: 1 to 63 of a-z, 0-9 and '-'",
                        c.region);
  const char *missing = !c.cert[0] ? "--cert" : !c.key[0] ? "--key" : !c.ca[0] ? "--ca"
                        : !c.crl[0] ? "--crl" : !c.state_dir[0] ? "--state" : NULL;
  if (missing)
    return xf_cli_usage(cli, "%s is required (as a flag or in --config)", missing);
  if (xf_coord_run(&c, &cli->err) != XF_OK) return xf_cli_fail(cli, cli->err.code);
  return XF_EXIT_OK;
}

static int cmd_backup(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, 0, 's'},
                                       {"out", required_argument, 0, 'o'},
                                       {0, 0, 0, 0}};
  const char *state = NULL, *out = NULL;
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (ch == 's') state = optarg;
    else if (ch == 'o') out = optarg;
    else return xf_cli_option_error(cli, ch, argv, opts);
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!state || !out) return xf_cli_usage(cli, "--state DIR and --out FILE are required");
  if (xf_coord_backup(state, out, &cli->err) != XF_OK) return xf_cli_fail(cli, cli->err.code);
  if (cli->json)
    printf("{\"backup\": \"%s\"}\n", out);
  else
    fprintf(stderr, "%s backup: the journal (or a regional aggregator's audit trail) of %s is "
                    "copied to %s\n", PROG, state, out);
  return XF_EXIT_OK;
}

static const xf_cmd commands[] = {
    {"run", NULL, "run the coordinator (global) or a regional aggregator",
     "usage: xfed-coord [run] [--config FILE] [--role global|regional] [--region R]\n"
     "                  [--upstream HOST:PORT] [--listen HOST:PORT] --cert FILE --key FILE\n"
     "                  --ca FILE --crl FILE --state DIR [--port-file FILE]\n"
     "                  [--residency-policy enforce|off] [--metrics [HOST:]PORT]\n"
     "                  [--metrics-port-file FILE] [--dashboard [HOST:]PORT]\n"
     "                  [--dashboard-port-file FILE]\n"
     "\n"
     "Runs until SIGTERM or SIGINT (clean shutdown; an open round resumes at the next\n"
     "start). SIGHUP reloads the CRL. Logs are key=value lines on stderr\n"
     "(XF_LOG_LEVEL=debug|info|warn|error), or JSON lines with XF_LOG_FORMAT=json.\n"
     "\n"
     "The global coordinator keeps the journal (STATE/coord.db, SQLite) and the model\n"
     "blobs (STATE/blobs), the residency policy and the audit trail, accepts sites,\n"
     "regional aggregators and users, and runs up to " XF_COORD_JOBS_MAX_TEXT " jobs at once\n"
     "(later submissions queue, in submission order) under the residency policy's\n"
     "plan. A regional aggregator (--role regional) accepts the sites of its region\n"
     "only, dials the global coordinator, forwards one aggregate of its region only\n"
     "as the plan allows, and keeps its own audit trail (STATE/audit.db).\n"
     "\n"
     "options:\n"
     "  --config FILE       a JSON object with any of: role, region, listen, upstream,\n"
     "                      cert, key, ca, crl, state_dir, port_file, max_frame,\n"
     "                      max_staged, resume_grace_s, eval_timeout_s,\n"
     "                      residency_policy, checkpoint_retention (global: keep\n"
     "                      each job's last N rounds' checkpoints; 0 or absent: all),\n"
     "                      and the connection bounds\n"
     "                      handshake_timeout_s, min_frame_rate,\n"
     "                      frame_rate_window_s, frame_grace_s, buffer_budget,\n"
     "                      max_connections, max_connections_per_address,\n"
     "                      max_unauthenticated_connections[_per_address],\n"
     "                      max_authenticated_connections[_per_address], metrics,\n"
     "                      metrics_port_file, dashboard, dashboard_port_file (paths\n"
     "                      relative to the file); flags override it\n"
     "  --role R            global (default) or regional\n"
     "  --region R          the region it runs in: regional, the region served (must\n"
     "                      match the certificate); global, where the residency policy\n"
     "                      places it (required unless --residency-policy off)\n"
     "  --residency-policy enforce|off\n"
     "                      global: decide every job and round against the federation's\n"
     "                      residency policy (default), or run without one: every site\n"
     "                      of a job's dataset is eligible, decisions are audited as\n"
     "                      unrestricted\n"
     "  --upstream H:P      regional: the global coordinator\n"
     "  --listen H:P        numeric address to listen on (default 127.0.0.1:7443;\n"
     "                      port 0 picks a free one)\n"
     "  --cert, --key FILE  this coordinator's identity (xfed pki issue --kind coordinator)\n"
     "  --ca, --crl FILE    the federation's CA certificate and CRL\n"
     "  --state DIR         where the journal and blobs live (created 0700)\n"
     "  --port-file FILE    write the bound port there once listening\n"
     "  --metrics [H:]P     serve Prometheus /metrics and /healthz over HTTP there (a\n"
     "                      port alone: 127.0.0.1; 0 picks a free one); see\n"
     "                      docs/metrics.md\n"
     "  --metrics-port-file FILE\n"
     "                      write the metrics port there once listening\n"
     "  --dashboard [H:]P   global: serve the read-only web dashboard over HTTPS with\n"
     "                      --cert/--key there (a port alone: 127.0.0.1; 0 picks a\n"
     "                      free one); users get a URL with 'xfed dashboard'; needs\n"
     "                      Chart.js (libjs-chart.js); see docs/dashboard.md\n"
     "  --dashboard-port-file FILE\n"
     "                      write the dashboard port there once listening\n"
     "\n"
     "example: xfed-coord --state /var/lib/xfed-coord --cert coord.crt --key coord.key \\\n"
     "           --ca ca.crt --crl crl.pem --listen 0.0.0.0:7443\n"
     "See docs/coordinator.md.\n",
     cmd_run},
    {"backup", NULL, "copy the journal or an aggregator's trail with SQLite's online backup",
     "usage: xfed-coord backup --state DIR --out FILE [--json]\n"
     "\n"
     "Copies DIR/coord.db (a coordinator's journal) or DIR/audit.db (a regional\n"
     "aggregator's audit trail) to FILE while the daemon runs (SQLite online\n"
     "backup): one self-contained file, as of one moment, that 'xfed audit verify\n"
     "--db FILE' verifies offline. A plain copy of the live file may miss the rows\n"
     "its -wal file holds. The blobs under DIR/blobs are immutable files: copy them\n"
     "with any tool.\n"
     "\n"
     "options:\n"
     "  --state DIR   the daemon's --state directory\n"
     "  --out FILE    where the copy goes\n"
     "  --json        print {\"backup\": FILE}\n",
     cmd_backup},
    {0},
};

int main(int argc, char **argv) {
  static const xf_cli_program coord = {
      .prog = PROG,
      .about = PROG " runs the xfed coordinator or a regional aggregator.",
      .exit_statuses = "0 ok, 1 error, 2 usage",
      .commands = commands,
  };
  /* `xfed-coord --role ...`: options without a verb run the daemon. */
  char *args[256];
  if (argc >= 2 && argc < 250 && argv[1][0] == '-' && strcmp(argv[1], "--help") != 0 &&
      strcmp(argv[1], "-h") != 0 && strcmp(argv[1], "--json") != 0) {
    args[0] = argv[0];
    args[1] = "run";
    for (int i = 1; i < argc; i++) args[i + 1] = argv[i];
    args[argc + 1] = NULL;
    return xf_cli_main(&coord, argc + 1, args);
  }
  return xf_cli_main(&coord, argc, argv);
}
