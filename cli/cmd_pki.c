/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed pki init|issue|revoke|show|crl`: the federation admin's commands over
 * the federation directory of crypto/pki.h. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "cli/cli.h"
#include "crypto/pki.h"

#define DEFAULT_DIR "./federation"
/* `pki show` warns when the CRL's next update is closer than this. */
#define CRL_WARN_S (7 * 86400)

typedef struct pki_args {
  const char *dir, *federation, *name, *region, *kind, *role, *reason;
  long days;
  bool force;
} pki_args;

enum { OPT_DIR = 1, OPT_FEDERATION, OPT_DAYS, OPT_KIND, OPT_NAME, OPT_REGION, OPT_ROLE,
       OPT_FORCE, OPT_REASON };

static const struct option init_opts[] = {{"dir", required_argument, 0, OPT_DIR},
                                          {"federation", required_argument, 0, OPT_FEDERATION},
                                          {"days", required_argument, 0, OPT_DAYS},
                                          {0, 0, 0, 0}};
static const struct option issue_opts[] = {
    {"dir", required_argument, 0, OPT_DIR},       {"kind", required_argument, 0, OPT_KIND},
    {"name", required_argument, 0, OPT_NAME},     {"region", required_argument, 0, OPT_REGION},
    {"role", required_argument, 0, OPT_ROLE},     {"days", required_argument, 0, OPT_DAYS},
    {"force", no_argument, 0, OPT_FORCE},         {0, 0, 0, 0}};
static const struct option revoke_opts[] = {{"dir", required_argument, 0, OPT_DIR},
                                            {"name", required_argument, 0, OPT_NAME},
                                            {"reason", required_argument, 0, OPT_REASON},
                                            {0, 0, 0, 0}};
static const struct option show_opts[] = {{"dir", required_argument, 0, OPT_DIR},
                                          {"name", required_argument, 0, OPT_NAME},
                                          {0, 0, 0, 0}};
static const struct option crl_opts[] = {{"dir", required_argument, 0, OPT_DIR},
                                         {"days", required_argument, 0, OPT_DAYS},
                                         {0, 0, 0, 0}};

static int parse_args(xf_cli *cli, int argc, char **argv, const struct option *opts,
                      pki_args *a) {
  memset(a, 0, sizeof(*a));
  a->dir = DEFAULT_DIR;
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case OPT_DIR: a->dir = optarg; break;
    case OPT_FEDERATION: a->federation = optarg; break;
    case OPT_KIND: a->kind = optarg; break;
    case OPT_NAME: a->name = optarg; break;
    case OPT_REGION: a->region = optarg; break;
    case OPT_ROLE: a->role = optarg; break;
    case OPT_REASON: a->reason = optarg; break;
    case OPT_FORCE: a->force = true; break;
    case OPT_DAYS:
      if (xf_cli_parse_int(cli, "--days", optarg, 1, XF_PKI_MAX_DAYS, &a->days) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!*a->dir) return xf_cli_usage(cli, "--dir needs a directory");
  return XF_EXIT_OK;
}

/* A flag value that must be a label: a usage error naming the flag. */
static int check_label(xf_cli *cli, const char *flag, const char *value) {
  xf_errctx why;
  xf_errctx_clear(&why);
  if (xf_pki_label_check(flag, value, &why) == XF_OK) return XF_EXIT_OK;
  return xf_cli_usage(cli, "%s (1 to 63 of a-z, 0-9 and '-', not first or last)", why.msg);
}

static void fmt_time(int64_t t, char out[32]) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(out, 32, "%" PRId64, t);
}

static json_t *json_time(int64_t t) {
  char s[32];
  fmt_time(t, s);
  return json_string(s);
}

static const char *entry_status(const xf_pki_entry *e, int64_t now) {
  if (e->revoked) return "revoked";
  if (now > e->not_after) return "expired";
  if (now < e->not_before) return "not-yet-valid";
  return "valid";
}

/* An entry as --json shows it; paths only for the name's current entry. */
static json_t *entry_json(const xf_federation *fed, const xf_pki_entry *e, int64_t now) {
  json_t *o = json_pack("{s:s,s:s,s:s?,s:s?,s:s,s:s,s:o,s:o,s:o,s:s,s:b,s:b}", "name",
                        e->id.name, "kind", xf_pki_kind_name(e->id.kind), "region",
                        e->id.region[0] ? e->id.region : NULL, "role",
                        e->id.role ? xf_pki_role_name(e->id.role) : NULL, "spiffe_id", e->spiffe,
                        "serial", e->serial, "issued_at", json_time(e->issued_at), "not_before",
                        json_time(e->not_before), "not_after", json_time(e->not_after), "status",
                        entry_status(e, now), "revoked", e->revoked, "current", e->current);
  if (!o) return NULL;
  if (e->revoked) {
    json_object_set_new(o, "revoked_at", json_time(e->revoked_at));
    json_object_set_new(o, "reason", json_string(xf_pki_reason_name(e->reason)));
  }
  char path[4096];
  if (e->current &&
      xf_federation_cert_path(fed, e->id.name, path, sizeof(path), NULL) == XF_OK)
    json_object_set_new(o, "cert", json_string(path));
  if (e->current && xf_federation_key_path(fed, e->id.name, path, sizeof(path), NULL) == XF_OK)
    json_object_set_new(o, "key", json_string(path));
  return o;
}

static int open_fed(xf_cli *cli, const char *dir, xf_federation **fed) {
  xf_err rc = xf_federation_open(dir, fed, &cli->err);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}

/* ---- init ------------------------------------------------------------------ */

int xf_cmd_pki_init(xf_cli *cli, int argc, char **argv) {
  pki_args a;
  int status = parse_args(cli, argc, argv, init_opts, &a);
  if (status != XF_EXIT_OK) return status;
  if (!a.federation) return xf_cli_usage(cli, "--federation FED is required");
  if ((status = check_label(cli, "--federation", a.federation)) != XF_EXIT_OK) return status;
  xf_federation *fed;
  xf_err rc = xf_federation_init(a.dir, a.federation, a.days, &fed, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  int64_t nb, na = 0;
  if (xf_pki_cert_times(xf_federation_ca(fed), &nb, &na, NULL) != XF_OK) na = 0;
  char ca_end[32], crl_next[32];
  fmt_time(na, ca_end);
  fmt_time(xf_federation_crl_next_update(fed), crl_next);
  if (cli->json) {
    char spiffe[XF_SPIFFE_MAX];
    snprintf(spiffe, sizeof(spiffe), "spiffe://%s", a.federation);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s+,s:s+,s:s+,s:s+,s:s,s:s}", "federation",
                          a.federation, "spiffe_id", spiffe, "dir", a.dir, "ca_cert", a.dir,
                          "/ca.crt", "ca_key", a.dir, "/ca.key", "crl", a.dir, "/crl.pem",
                          "index", a.dir, "/index.json", "ca_not_after", ca_end,
                          "crl_next_update", crl_next);
    xf_cli_print_json(o);
  } else {
    printf("federation  %s (spiffe://%s)\n", a.federation, a.federation);
    printf("CA          %s/ca.crt, valid until %s\n", a.dir, ca_end);
    printf("CA key      %s/ca.key (mode 0600: keep it on this machine, backed up offline)\n",
           a.dir);
    printf("CRL         %s/crl.pem, empty, next update %s\n", a.dir, crl_next);
    printf("next        xfed pki issue --kind site --region R --name N --dir %s\n", a.dir);
  }
  xf_federation_close(fed);
  return XF_EXIT_OK;
}

/* ---- issue ----------------------------------------------------------------- */

int xf_cmd_pki_issue(xf_cli *cli, int argc, char **argv) {
  pki_args a;
  int status = parse_args(cli, argc, argv, issue_opts, &a);
  if (status != XF_EXIT_OK) return status;
  xf_pki_issue_opts o = {.days = a.days, .force = a.force};
  if (!a.kind) return xf_cli_usage(cli, "--kind site|coordinator|user is required");
  if (xf_pki_kind_parse(a.kind, &o.kind, &cli->err) != XF_OK)
    return xf_cli_usage(cli, "--%s", cli->err.msg);
  if (!a.name) return xf_cli_usage(cli, "--name N is required");
  if ((status = check_label(cli, "--name", a.name)) != XF_EXIT_OK) return status;
  if (a.region && (status = check_label(cli, "--region", a.region)) != XF_EXIT_OK) return status;
  if (a.role && xf_pki_role_parse(a.role, &o.role, &cli->err) != XF_OK)
    return xf_cli_usage(cli, "--%s", cli->err.msg);
  switch (o.kind) {
  case XF_PKI_KIND_SITE:
    if (!a.region) return xf_cli_usage(cli, "a site needs --region R");
    if (a.role) return xf_cli_usage(cli, "--role is for users only");
    break;
  case XF_PKI_KIND_COORDINATOR:
    if (a.role) return xf_cli_usage(cli, "--role is for users only");
    break;
  default:
    if (!a.role) return xf_cli_usage(cli, "a user needs --role researcher|compliance|admin");
    if (a.region) return xf_cli_usage(cli, "a user belongs to no region; drop --region");
    break;
  }
  o.name = a.name;
  o.region = a.region;

  xf_federation *fed;
  if ((status = open_fed(cli, a.dir, &fed)) != XF_EXIT_OK) return status;
  xf_pki_issued issued;
  xf_err rc = xf_federation_issue(fed, &o, &issued, &cli->err);
  if (rc != XF_OK) {
    xf_federation_close(fed);
    return xf_cli_fail(cli, rc);
  }
  if (issued.revoked_old)
    fprintf(stderr, "%s %s: revoked the previous certificate of '%s' (serial %s, reason "
            "superseded) and re-signed the CRL; distribute the new crl.pem\n",
            cli->prog, cli->name, a.name, issued.old_serial);
  else if (issued.replaced)
    fprintf(stderr, "%s %s: replaced the already revoked certificate of '%s' (serial %s)\n",
            cli->prog, cli->name, a.name, issued.old_serial);
  const xf_pki_entry *e = &issued.entry;
  int64_t now = (int64_t)time(NULL);
  if (cli->json) {
    json_t *j = entry_json(fed, e, now);
    if (j && issued.replaced) {
      json_object_set_new(j, "replaced_serial", json_string(issued.old_serial));
      json_object_set_new(j, "revoked_replaced", json_boolean(issued.revoked_old));
    }
    xf_cli_print_json(j);
  } else {
    char cert[4096], key[4096], until[32];
    fmt_time(e->not_after, until);
    if (xf_federation_cert_path(fed, e->id.name, cert, sizeof(cert), NULL) != XF_OK) cert[0] = 0;
    if (xf_federation_key_path(fed, e->id.name, key, sizeof(key), NULL) != XF_OK) key[0] = 0;
    printf("identity    %s\n", e->spiffe);
    printf("kind        %s\n", xf_pki_kind_name(e->id.kind));
    printf("serial      %s\n", e->serial);
    printf("valid until %s\n", until);
    printf("certificate %s\n", cert);
    printf("key         %s (mode 0600; move it only to the machine it identifies)\n", key);
  }
  xf_federation_close(fed);
  return XF_EXIT_OK;
}

/* ---- revoke ---------------------------------------------------------------- */

int xf_cmd_pki_revoke(xf_cli *cli, int argc, char **argv) {
  pki_args a;
  int status = parse_args(cli, argc, argv, revoke_opts, &a);
  if (status != XF_EXIT_OK) return status;
  if (!a.name) return xf_cli_usage(cli, "--name N is required");
  if ((status = check_label(cli, "--name", a.name)) != XF_EXIT_OK) return status;
  xf_pki_reason reason = XF_PKI_REASON_UNSPECIFIED;
  if (a.reason && xf_pki_reason_parse(a.reason, &reason, &cli->err) != XF_OK)
    return xf_cli_usage(cli, "--%s", cli->err.msg);
  xf_federation *fed;
  if ((status = open_fed(cli, a.dir, &fed)) != XF_EXIT_OK) return status;
  xf_pki_entry e;
  xf_err rc = xf_federation_revoke(fed, a.name, reason, &e, &cli->err);
  if (rc != XF_OK) {
    xf_federation_close(fed);
    return xf_cli_fail(cli, rc);
  }
  char next[32];
  fmt_time(xf_federation_crl_next_update(fed), next);
  if (cli->json) {
    json_t *j = entry_json(fed, &e, (int64_t)time(NULL));
    if (j) {
      json_object_set_new(j, "crl", json_sprintf("%s/crl.pem", a.dir));
      json_object_set_new(j, "crl_number", json_integer((json_int_t)xf_federation_crl_number(fed)));
      json_object_set_new(j, "crl_next_update", json_string(next));
    }
    xf_cli_print_json(j);
  } else {
    printf("revoked     %s (serial %s, reason %s)\n", e.spiffe, e.serial,
           xf_pki_reason_name(e.reason));
    printf("CRL         %s/crl.pem, number %" PRIu64 ", next update %s\n", a.dir,
           xf_federation_crl_number(fed), next);
    printf("Copy crl.pem to every coordinator and send them SIGHUP to reload it.\n");
  }
  xf_federation_close(fed);
  return XF_EXIT_OK;
}

/* ---- show ------------------------------------------------------------------ */

/* "AB:CD:..." SHA-256 of the certificate file of name, or "" if unreadable. */
static void fingerprint(const xf_federation *fed, const char *name, char out[100]) {
  out[0] = '\0';
  char path[4096];
  X509 *cert = NULL;
  if (xf_federation_cert_path(fed, name, path, sizeof(path), NULL) != XF_OK ||
      xf_pki_cert_load(path, &cert, NULL) != XF_OK)
    return;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (X509_digest(cert, EVP_sha256(), md, &n) == 1)
    for (unsigned i = 0; i < n && i * 3 + 3 <= 99; i++)
      snprintf(out + i * 3, 4, "%02X%s", md[i], i + 1 < n ? ":" : "");
  X509_free(cert);
}

static int show_one(xf_cli *cli, const xf_federation *fed, const char *name, int64_t now) {
  const xf_pki_entry *e = xf_federation_find(fed, name);
  if (!e) {
    xf_fail(&cli->err, XF_ENOENT, "no identity '%s' in federation '%s'; 'xfed pki show' lists "
            "them", name, xf_federation_name(fed));
    return xf_cli_fail(cli, XF_ENOENT);
  }
  char fp[100];
  fingerprint(fed, name, fp);
  if (cli->json) {
    json_t *j = entry_json(fed, e, now);
    if (j) {
      json_object_set_new(j, "federation", json_string(xf_federation_name(fed)));
      if (fp[0]) json_object_set_new(j, "sha256_fingerprint", json_string(fp));
    }
    xf_cli_print_json(j);
    return XF_EXIT_OK;
  }
  char nb[32], na[32], at[32], cert[4096], key[4096];
  fmt_time(e->not_before, nb);
  fmt_time(e->not_after, na);
  fmt_time(e->issued_at, at);
  if (xf_federation_cert_path(fed, name, cert, sizeof(cert), NULL) != XF_OK) cert[0] = 0;
  if (xf_federation_key_path(fed, name, key, sizeof(key), NULL) != XF_OK) key[0] = 0;
  printf("name        %s\n", e->id.name);
  printf("kind        %s\n", xf_pki_kind_name(e->id.kind));
  if (e->id.region[0]) printf("region      %s\n", e->id.region);
  if (e->id.role) printf("role        %s\n", xf_pki_role_name(e->id.role));
  printf("spiffe id   %s\n", e->spiffe);
  printf("serial      %s\n", e->serial);
  printf("issued      %s\n", at);
  printf("valid       %s to %s\n", nb, na);
  if (e->revoked) {
    fmt_time(e->revoked_at, at);
    printf("status      revoked %s (%s)\n", at, xf_pki_reason_name(e->reason));
  } else {
    printf("status      %s\n", entry_status(e, now));
  }
  printf("certificate %s\n", cert);
  printf("key         %s\n", key);
  if (fp[0]) printf("sha256      %s\n", fp);
  return XF_EXIT_OK;
}

int xf_cmd_pki_show(xf_cli *cli, int argc, char **argv) {
  pki_args a;
  int status = parse_args(cli, argc, argv, show_opts, &a);
  if (status != XF_EXIT_OK) return status;
  if (a.name && (status = check_label(cli, "--name", a.name)) != XF_EXIT_OK) return status;
  xf_federation *fed;
  if ((status = open_fed(cli, a.dir, &fed)) != XF_EXIT_OK) return status;
  int64_t now = (int64_t)time(NULL);
  int64_t crl_next = xf_federation_crl_next_update(fed);
  char next[32];
  fmt_time(crl_next, next);
  if (crl_next < now)
    fprintf(stderr, "%s %s: warning: the CRL expired at %s and peers will refuse every "
            "certificate; run 'xfed pki crl --dir %s'\n", cli->prog, cli->name, next, a.dir);
  else if (crl_next - now < CRL_WARN_S)
    fprintf(stderr, "%s %s: warning: the CRL's next update is %s; re-sign it soon with "
            "'xfed pki crl --dir %s'\n", cli->prog, cli->name, next, a.dir);
  if (a.name) {
    status = show_one(cli, fed, a.name, now);
    xf_federation_close(fed);
    return status;
  }
  size_t n = xf_federation_count(fed);
  if (cli->json) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++)
      json_array_append_new(list, entry_json(fed, xf_federation_entry(fed, i), now));
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "federation", xf_federation_name(fed), "dir",
                          a.dir, "crl_number", (json_int_t)xf_federation_crl_number(fed),
                          "crl_next_update", next, "identities", list);
    xf_cli_print_json(o);
  } else {
    printf("federation %s (%s), CRL number %" PRIu64 ", next update %s\n",
           xf_federation_name(fed), a.dir, xf_federation_crl_number(fed), next);
    if (n == 0) printf("no identities issued yet\n");
    else
      printf("%-20s %-11s %-56s %-32s %-20s %s\n", "NAME", "KIND", "SPIFFE ID", "SERIAL",
             "NOT AFTER", "STATUS");
    for (size_t i = 0; i < n; i++) {
      const xf_pki_entry *e = xf_federation_entry(fed, i);
      char na[32];
      fmt_time(e->not_after, na);
      printf("%-20s %-11s %-56s %-32s %-20s %s%s%s\n", e->id.name, xf_pki_kind_name(e->id.kind),
             e->spiffe, e->serial, na, entry_status(e, now), e->revoked ? " " : "",
             e->revoked ? xf_pki_reason_name(e->reason) : "");
    }
  }
  xf_federation_close(fed);
  return XF_EXIT_OK;
}

/* ---- crl ------------------------------------------------------------------- */

int xf_cmd_pki_crl(xf_cli *cli, int argc, char **argv) {
  pki_args a;
  int status = parse_args(cli, argc, argv, crl_opts, &a);
  if (status != XF_EXIT_OK) return status;
  xf_federation *fed;
  if ((status = open_fed(cli, a.dir, &fed)) != XF_EXIT_OK) return status;
  xf_err rc = xf_federation_refresh_crl(fed, a.days, &cli->err);
  if (rc != XF_OK) {
    xf_federation_close(fed);
    return xf_cli_fail(cli, rc);
  }
  size_t revoked = 0;
  for (size_t i = 0; i < xf_federation_count(fed); i++)
    revoked += xf_federation_entry(fed, i)->revoked;
  char next[32];
  fmt_time(xf_federation_crl_next_update(fed), next);
  if (cli->json) {
    json_t *o = json_pack("{s:s+,s:I,s:I,s:s}", "crl", a.dir, "/crl.pem", "crl_number",
                          (json_int_t)xf_federation_crl_number(fed), "revoked",
                          (json_int_t)revoked, "next_update", next);
    xf_cli_print_json(o);
  } else {
    printf("CRL         %s/crl.pem, number %" PRIu64 ", %zu revoked, next update %s\n", a.dir,
           xf_federation_crl_number(fed), revoked, next);
  }
  xf_federation_close(fed);
  return XF_EXIT_OK;
}
