/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed-site NOUN VERB`: the site operator's command — site set-up, the
 * dataset registry, the configuration and the daemon — dispatched from one
 * table. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "base/alloc.h"
#include "cmd/cmd.h"
#include "crypto/pki.h"
#include "http/http.h"
#include "site/cmd.h"
#include "site/daemon.h"
#include "site/registry.h"
#include "site/trainer.h"
#include "base/file.h"

#define PROG "xfed-site"

/* ---- shared pieces ---------------------------------------------------------------- */

/* The site directory and the two files in it. */
typedef struct site_paths {
  char dir[PATH_MAX];
  char config[PATH_MAX];
  char db[PATH_MAX];
} site_paths;

/* --dir, else XFED_SITE_DIR, else the current directory. */
static xf_err site_paths_make(xf_cli *cli, const char *dir, site_paths *p) {
  if (!dir) dir = getenv("XFED_SITE_DIR");
  if (!dir || !*dir) dir = ".";
  if (strlen(dir) + sizeof("/site.json") >= sizeof(p->dir))
    return xf_fail(&cli->err, XF_EUSAGE, "--dir '%.64s...' is too long", dir);
  snprintf(p->dir, sizeof(p->dir), "%s", dir);
  snprintf(p->config, sizeof(p->config), "%s/site.json", dir);
  snprintf(p->db, sizeof(p->db), "%s/site.db", dir);
  return XF_OK;
}

static void reset_getopt(void) {
  opterr = 0;
  optind = 1;
}

static void format_time(int64_t t, char *buf, size_t n) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (!gmtime_r(&tt, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(buf, n, "%lld", (long long)t);
}

static json_t *trainer_json(const xf_site_dataset *d);
static json_t *dataset_json_base(const xf_site_dataset *d);

static json_t *dataset_json(const xf_site_dataset *d) {
  json_t *o = dataset_json_base(d);
  if (o) json_object_set_new(o, "trainer", trainer_json(d));
  return o;
}

static json_t *dataset_json_base(const xf_site_dataset *d) {
  char when[32];
  format_time(d->registered_at, when, sizeof(when));
  json_t *tags = json_array();
  for (size_t i = 0; tags && i < d->n_tags; i++) json_array_append_new(tags, json_string(d->tags[i]));
  return json_pack("{s:s,s:s,s:s,s:s,s:o,s:I,s:I,s:I,s:I,s:[I,I,I],s:s,s:s,s:o,s:o}", "name",
                   d->name, "path", d->path, "layout", xf_dataset_layout_name(d->layout),
                   "classification", xf_site_class_name(d->classification), "tags",
                   tags ? tags : json_array(), "train_records", (json_int_t)d->train_records,
                   "test_records", (json_int_t)d->test_records, "classes",
                   (json_int_t)d->classes, "features", (json_int_t)d->features, "shape",
                   (json_int_t)d->h, (json_int_t)d->w, (json_int_t)d->c, "registered_at", when,
                   "digest", d->digest, "budget_epsilon",
                   d->has_budget ? json_real(d->budget_epsilon) : json_null(),
                   "budget_delta", json_real(d->budget_delta));
}

/* The "trainer" object of a dataset's JSON: null for native training. */
static json_t *trainer_json(const xf_site_dataset *d) {
  if (!d->trainer) return json_null();
  return json_pack("{s:s,s:I,s:s}", "program", d->trainer, "timeout_s",
                   (json_int_t)d->trainer_timeout, "dp",
                   d->trainer_dp_declared ? "declared" : "none");
}

static void tags_text(const xf_site_dataset *d, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < d->n_tags && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "," : "", d->tags[i]);
  if (!d->n_tags) snprintf(buf, n, "-");
}

static void budget_text(const xf_site_dataset *d, char *buf, size_t n) {
  if (d->has_budget) snprintf(buf, n, "%g (delta %g)", d->budget_epsilon, d->budget_delta);
  else snprintf(buf, n, "none");
}

/* Loads DIR/site.json, then opens DIR/site.db: what every dataset command
 * starts with. A directory without site.json is not a site directory. */
static xf_err open_site(xf_cli *cli, const site_paths *p, xf_site_config *cfg,
                        xf_site_registry **reg) {
  *reg = NULL;
  XF_GUARD(xf_site_config_load(p->config, cfg, &cli->err));
  return xf_site_registry_open(p->db, reg, &cli->err);
}

const char *xf_site_operator_name(void) {
  const char *user = getenv("USER");
  if (user && *user) return user;
  struct passwd *pw = getpwuid(geteuid());
  return pw && pw->pw_name && *pw->pw_name ? pw->pw_name : NULL;
}

xf_err xf_site_cli_open(xf_cli *cli, const char *dir, xf_site_config *cfg,
                        xf_site_registry **reg) {
  *reg = NULL;
  site_paths p;
  XF_GUARD(site_paths_make(cli, dir, &p));
  return open_site(cli, &p, cfg, reg);
}

/* ---- init ---------------------------------------------------------------------------- */

/* A path given on init's command line as the absolute path it names now:
 * site.json keeps relative paths relative to the site directory, which is
 * not where the operator stood. flag names it in errors. */
static xf_err absolute_path(xf_cli *cli, const char *flag, const char *path, char *out, size_t n) {
  if (path[0] == '/') {
    if ((size_t)snprintf(out, n, "%s", path) >= n) goto too_long;
    return XF_OK;
  }
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof(cwd)))
    return xf_fail(&cli->err, XF_EIO, "%s %s: cannot tell the current directory (%s); give an "
                   "absolute path", flag, path, strerror(errno));
  const char *rest = strncmp(path, "./", 2) == 0 ? path + 2 : path;
  if ((size_t)snprintf(out, n, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, rest) >= n)
    goto too_long;
  return XF_OK;
too_long:
  return xf_fail(&cli->err, XF_ERANGE, "%s %s: the path is longer than %zu bytes", flag, path,
                 n - 1);
}

/* The identity files init is given are what `run` will load: each must be
 * there and be what its flag says, checked now rather than at the first
 * start. The CRL is checked against the CA when both are given. */
static xf_err check_identity_files(xf_cli *cli, const char *cert, const char *key, const char *ca,
                                   const char *crl) {
  xf_err rc = XF_OK;
  const char *flag = NULL;
  if (cert) {
    X509 *x = NULL;
    flag = "--cert";
    rc = xf_pki_cert_load(cert, &x, &cli->err);
    X509_free(x);
  }
  if (rc == XF_OK && key) {
    EVP_PKEY *k = NULL;
    flag = "--key";
    rc = xf_pki_key_load(key, &k, &cli->err);
    EVP_PKEY_free(k);
  }
  if (rc == XF_OK && ca && crl) {
    xf_pki_trust *t = NULL;
    flag = "--ca and --crl";
    rc = xf_pki_trust_load(ca, crl, &t, &cli->err);
    xf_pki_trust_free(t);
  } else if (rc == XF_OK && ca) {
    X509 *x = NULL;
    flag = "--ca";
    rc = xf_pki_cert_load(ca, &x, &cli->err);
    if (rc == XF_OK && X509_check_ca(x) != 1) {
      xf_errctx_file(&cli->err, ca);
      rc = xf_fail(&cli->err, XF_EFORMAT, "not a CA certificate (basicConstraints CA:TRUE)");
    }
    X509_free(x);
  } else if (rc == XF_OK && crl) {
    flag = "--crl";
    rc = xf_pki_crl_check(crl, &cli->err);
  }
  if (rc != XF_OK) {
    char msg[sizeof(cli->err.msg)];
    snprintf(msg, sizeof(msg), "%s", cli->err.msg);
    xf_fail(&cli->err, rc, "%s: %s%s", flag, msg,
            rc == XF_ENOENT ? "; a relative path is taken from the directory init runs in" : "");
  }
  return rc;
}

/* init's flags, in the order its steps read them. */
enum { INIT_NAME, INIT_REGION, INIT_COORD, INIT_CERT, INIT_KEY, INIT_CA, INIT_CRL, INIT_ROOT,
       INIT_THREADS, INIT_BACKEND, INIT_FLAGS };

/* What init was asked for: the site directory, each flag's value (NULL when
 * not given; a path flag's, once made absolute, points into absolute) and
 * --threads as a number. */
typedef struct init_request {
  const char *dir;
  const char *vals[INIT_FLAGS];
  long threads;
  char absolute[INIT_ROOT + 1][PATH_MAX];
} init_request;

/* Reads init's command line into r: every required flag given, the names
 * labels, --threads a number and --coordinator an address. Returns the exit
 * status to stop with, or XF_EXIT_OK to go on. */
static int init_parse_flags(xf_cli *cli, int argc, char **argv, init_request *r) {
  static const struct option opts[] = {
      {"dir", required_argument, 0, 'd'},       {"name", required_argument, 0, 'n'},
      {"region", required_argument, 0, 'r'},    {"coordinator", required_argument, 0, 'c'},
      {"cert", required_argument, 0, 'C'},      {"key", required_argument, 0, 'K'},
      {"ca", required_argument, 0, 'A'},        {"crl", required_argument, 0, 'L'},
      {"data-root", required_argument, 0, 'D'}, {"threads", required_argument, 0, 't'},
      {"backend", required_argument, 0, 'b'},   {0, 0, 0, 0}};
  const char **vals = r->vals;
  reset_getopt();
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': r->dir = optarg; break;
    case 'n': vals[INIT_NAME] = optarg; break;
    case 'r': vals[INIT_REGION] = optarg; break;
    case 'c': vals[INIT_COORD] = optarg; break;
    case 'C': vals[INIT_CERT] = optarg; break;
    case 'K': vals[INIT_KEY] = optarg; break;
    case 'A': vals[INIT_CA] = optarg; break;
    case 'L': vals[INIT_CRL] = optarg; break;
    case 'D': vals[INIT_ROOT] = optarg; break;
    case 't': vals[INIT_THREADS] = optarg; break;
    case 'b': vals[INIT_BACKEND] = optarg; break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!r->dir) return xf_cli_usage(cli, "--dir DIR is required");
  if (!vals[INIT_NAME]) return xf_cli_usage(cli, "--name N is required");
  if (!vals[INIT_REGION]) return xf_cli_usage(cli, "--region R is required");
  if (!vals[INIT_COORD]) return xf_cli_usage(cli, "--coordinator HOST:PORT is required");
  r->threads = 0;
  if (vals[INIT_THREADS] &&
      xf_cli_parse_int(cli, "--threads", vals[INIT_THREADS], 0, 1024, &r->threads) != XF_OK)
    return xf_cli_usage(cli, "%s", cli->err.msg);
  if (!xf_label_valid(vals[INIT_NAME]))
    return xf_cli_usage(cli, "--name '%s' is not a site name: 1 to 63 of a-z, 0-9 and '-', not "
                             "first or last", vals[INIT_NAME]);
  if (!xf_label_valid(vals[INIT_REGION]))
    return xf_cli_usage(cli, "--region '%s' is not a region name: 1 to 63 of a-z, 0-9 and '-', "
                             "not first or last", vals[INIT_REGION]);
  char host[XF_SITE_HOST_MAX + 1];
  uint16_t port;
  if (xf_address_parse(vals[INIT_COORD], host, sizeof(host), &port, &cli->err) != XF_OK)
    return xf_cli_usage(cli, "--coordinator %s", cli->err.msg);
  return XF_EXIT_OK;
}

/* The path flags as given, made absolute (what site.json holds names the
 * same files wherever the daemon starts), then the identity files checked.
 * Returns the exit status to stop with, or XF_EXIT_OK to go on. */
static int init_resolve_paths(xf_cli *cli, init_request *r) {
  static const char *const path_flags[] = {[INIT_CERT] = "--cert", [INIT_KEY] = "--key",
                                           [INIT_CA] = "--ca", [INIT_CRL] = "--crl",
                                           [INIT_ROOT] = "--data-root"};
  for (int i = INIT_CERT; i <= INIT_ROOT; i++) {
    if (!r->vals[i]) continue;
    xf_errctx_clear(&cli->err);
    if (absolute_path(cli, path_flags[i], r->vals[i], r->absolute[i], sizeof(r->absolute[i])) !=
        XF_OK)
      return xf_cli_fail(cli, cli->err.code);
    r->vals[i] = r->absolute[i];
  }
  xf_errctx_clear(&cli->err);
  if (check_identity_files(cli, r->vals[INIT_CERT], r->vals[INIT_KEY], r->vals[INIT_CA],
                           r->vals[INIT_CRL]) != XF_OK)
    return xf_cli_fail(cli, cli->err.code);
  return XF_EXIT_OK;
}

/* site.json built from the flags, then read back into cfg with the same
 * strict parser that every later command uses: what init writes always
 * loads. A value the parser refuses is a usage error naming its flag.
 * Returns the exit status to stop with, or XF_EXIT_OK to go on. */
static int init_draft_config(xf_cli *cli, const init_request *r, const site_paths *p,
                             xf_site_config *cfg) {
  const char *const *vals = r->vals;
  json_t *o = json_pack("{s:s,s:s,s:s}", "site", vals[INIT_NAME], "region", vals[INIT_REGION],
                        "coordinator", vals[INIT_COORD]);
  static const char *const keys[] = {[INIT_CERT] = "cert", [INIT_KEY] = "key",
                                     [INIT_CA] = "ca", [INIT_CRL] = "crl",
                                     [INIT_ROOT] = "data_root"};
  for (int i = INIT_CERT; o && i <= INIT_ROOT; i++)
    if (vals[i]) json_object_set_new(o, keys[i], json_string(vals[i]));
  if (o) json_object_set_new(o, "threads", json_integer(r->threads));
  if (o)
    json_object_set_new(o, "backend",
                        json_string(vals[INIT_BACKEND] ? vals[INIT_BACKEND] : "auto"));
  char *draft = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!draft) return xf_cli_fail(cli, xf_fail(&cli->err, XF_ENOMEM, "cannot build site.json"));
  xf_err rc = xf_site_config_parse(draft, strlen(draft), p->config, cfg, &cli->err);
  free(draft);
  if (rc != XF_OK) {
    char field[128];
    snprintf(field, sizeof(field), "%s", cli->err.field);
    for (char *c = field; *c; c++)
      if (*c == '_') *c = '-';
    return xf_cli_usage(cli, "--%s: %s", field, cli->err.msg);
  }
  return XF_EXIT_OK;
}

/* The site directory, made with its missing parents (0700, as `mkdir -p`
 * would), unless it is something else or already holds a site. Returns the
 * exit status to stop with, or XF_EXIT_OK to go on. */
static int init_make_site_dir(xf_cli *cli, site_paths *p) {
  struct stat sb;
  xf_errctx_clear(&cli->err);
  if (stat(p->dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
    xf_errctx_file(&cli->err, p->dir);
    return xf_cli_fail(cli, xf_fail(&cli->err, XF_EEXISTS, "is %s, not a directory: give the "
                                    "site directory with --dir", xf_file_kind(sb.st_mode)));
  }
  if (xf_file_check_target(p->config, &cli->err) != XF_OK) return xf_cli_fail(cli, cli->err.code);
  if (lstat(p->config, &sb) == 0) {
    xf_errctx_clear(&cli->err);
    xf_errctx_file(&cli->err, p->config);
    return xf_cli_fail(cli, xf_fail(&cli->err, XF_EEXISTS,
                                    "this directory already holds a site; edit site.json, or "
                                    "init another directory"));
  }
  for (char *slash = strchr(p->dir + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    int made = mkdir(p->dir, 0700);
    int e = errno;
    *slash = '/';
    if (made != 0 && e != EEXIST) break; /* the final mkdir below reports it */
  }
  if (mkdir(p->dir, 0700) != 0 && errno != EEXIST) {
    int e = errno;
    xf_errctx_clear(&cli->err);
    xf_errctx_file(&cli->err, p->dir);
    return xf_cli_fail(cli, xf_fail(&cli->err, XF_EIO, "cannot create the site directory: %s",
                                    strerror(e)));
  }
  return XF_EXIT_OK;
}

/* The site's two files: an empty dataset registry, then site.json. Returns
 * the exit status to stop with, or XF_EXIT_OK to go on. */
static int init_write_site(xf_cli *cli, const site_paths *p, const xf_site_config *cfg) {
  xf_err rc;
  xf_site_registry *reg = NULL;
  if ((rc = xf_site_registry_open(p->db, &reg, &cli->err)) != XF_OK) return xf_cli_fail(cli, rc);
  xf_site_registry_close(reg);
  char *text = NULL;
  if ((rc = xf_site_config_format(cfg, &text, &cli->err)) != XF_OK ||
      (rc = xf_file_write_atomic(p->config, text, strlen(text), 0600, &cli->err)) != XF_OK) {
    xf_free(text);
    return xf_cli_fail(cli, rc);
  }
  xf_free(text);
  return XF_EXIT_OK;
}

static int cmd_init(xf_cli *cli, int argc, char **argv) {
  init_request r = {0};
  int status;
  if ((status = init_parse_flags(cli, argc, argv, &r)) != XF_EXIT_OK) return status;
  if ((status = init_resolve_paths(cli, &r)) != XF_EXIT_OK) return status;
  site_paths p;
  if (site_paths_make(cli, r.dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  if ((status = init_draft_config(cli, &r, &p, &cfg)) != XF_EXIT_OK) return status;
  if ((status = init_make_site_dir(cli, &p)) != XF_EXIT_OK) return status;
  if ((status = init_write_site(cli, &p, &cfg)) != XF_EXIT_OK) return status;
  if (cli->json)
    xf_cli_print_json(json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "dir", p.dir, "config", p.config,
                         "database", p.db, "site", cfg.site, "region", cfg.region, "coordinator",
                         cfg.coordinator));
  else
    printf("site %s (region %s, coordinator %s) initialized in %s\n  config:   %s\n  "
           "database: %s\n",
           cfg.site, cfg.region, cfg.coordinator, p.dir, p.config, p.db);
  return XF_EXIT_OK;
}

/* ---- dataset add ------------------------------------------------------------------------- */

#define MAX_TAG_FLAGS 64

static int cmd_dataset_add(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                       {"name", required_argument, 0, 'n'},
                                       {"path", required_argument, 0, 'p'},
                                       {"classification", required_argument, 0, 'c'},
                                       {"tag", required_argument, 0, 't'},
                                       {"budget", required_argument, 0, 'b'},
                                       {"trainer", required_argument, 0, 'T'},
                                       {"trainer-timeout", required_argument, 0, 'O'},
                                       {"trainer-dp", required_argument, 0, 'D'},
                                       {0, 0, 0, 0}};
  const char *dir = NULL, *tags[MAX_TAG_FLAGS];
  double timeout = 0;
  xf_trainer_dp tdp = XF_TRAINER_DP_NONE;
  xf_site_dataset_spec spec = {.classification = XF_SITE_CLASS_INTERNAL, .tags = tags};
  reset_getopt();
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': dir = optarg; break;
    case 'n': spec.name = optarg; break;
    case 'p': spec.path = optarg; break;
    case 'c':
      if (xf_site_class_parse(optarg, &spec.classification, &cli->err) != XF_OK)
        return xf_cli_usage(cli, "--classification: %s", cli->err.msg);
      break;
    case 't':
      if (spec.n_tags == MAX_TAG_FLAGS)
        return xf_cli_usage(cli, "at most %d --tag flags", MAX_TAG_FLAGS);
      if (!xf_name_valid(optarg))
        return xf_cli_usage(cli, "--tag '%s' is not a valid tag: use 1 to 63 lowercase letters, "
                                 "digits, '-' and '_', starting with a letter or digit (the "
                                 "rule of job specs and policies)", optarg);
      tags[spec.n_tags++] = optarg;
      break;
    case 'b':
      if (xf_cli_parse_double(cli, "--budget", optarg, 1e-9, 1e6, &spec.budget_epsilon) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      spec.has_budget = true;
      break;
    case 'T': spec.trainer = optarg; break;
    case 'O':
      if (xf_cli_parse_double(cli, "--trainer-timeout", optarg, 1, XF_SITE_TRAINER_TIMEOUT_MAX,
                              &timeout) != XF_OK || timeout != (double)(uint32_t)timeout)
        return xf_cli_usage(cli, "--trainer-timeout takes whole seconds from 1 to %u",
                            XF_SITE_TRAINER_TIMEOUT_MAX);
      spec.trainer_timeout = (uint32_t)timeout;
      break;
    case 'D':
      if (xf_trainer_dp_parse(optarg, &tdp, &cli->err) != XF_OK)
        return xf_cli_usage(cli, "--trainer-dp: %s", cli->err.msg);
      spec.trainer_dp_declared = tdp == XF_TRAINER_DP_DECLARED;
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!spec.trainer && (spec.trainer_timeout || spec.trainer_dp_declared))
    return xf_cli_usage(cli, "--trainer-timeout and --trainer-dp need --trainer PROGRAM");
  if (spec.trainer && xf_trainer_program_check(spec.trainer, &cli->err) != XF_OK)
    return xf_cli_usage(cli, "--trainer: %s", cli->err.msg);
  if (!spec.name) return xf_cli_usage(cli, "--name N is required");
  if (!xf_name_valid(spec.name))
    return xf_cli_usage(cli, "--name '%s' is not a valid dataset name: use 1 to 63 lowercase "
                             "letters, digits, '-' and '_', starting with a letter or digit "
                             "(the rule of job specs and policies)", spec.name);
  if (!spec.path) return xf_cli_usage(cli, "--path DIR is required");

  site_paths p;
  if (site_paths_make(cli, dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = open_site(cli, &p, &cfg, &reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  /* A relative --path is under data_root when the site has one (itself
   * relative to the site directory when relative). */
  char joined[2 * PATH_MAX + 2];
  if (spec.path[0] != '/' && cfg.data_root[0]) {
    if (cfg.data_root[0] == '/')
      snprintf(joined, sizeof(joined), "%s/%s", cfg.data_root, spec.path);
    else
      snprintf(joined, sizeof(joined), "%s/%s/%s", p.dir, cfg.data_root, spec.path);
    spec.path = joined;
  }
  xf_site_dataset d;
  rc = xf_site_registry_add(reg, &spec, &d, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json) {
    xf_cli_print_json(dataset_json(&d));
  } else {
    char tagbuf[1024], budget[64];
    tags_text(&d, tagbuf, sizeof(tagbuf));
    budget_text(&d, budget, sizeof(budget));
    printf("registered %s: %s layout, %u train and %u test records of %ux%ux%u, %u classes\n"
           "  path %s\n  classification %s, tags %s, budget epsilon %s\n  digest %s\n",
           d.name, xf_dataset_layout_name(d.layout), d.train_records, d.test_records, d.h, d.w,
           d.c, d.classes, d.path, xf_site_class_name(d.classification), tagbuf, budget,
           d.digest);
    if (d.trainer)
      printf("  trainer %s (time limit %u s, dp %s)\n", d.trainer, d.trainer_timeout,
             d.trainer_dp_declared ? "declared" : "none");
  }
  xf_site_dataset_free(&d);
  return XF_EXIT_OK;
}

/* ---- commands that take --dir and an optional --name ------------------------------------ */

typedef struct named_args {
  const char *dir, *name;
} named_args;

static int parse_named(xf_cli *cli, int argc, char **argv, named_args *a, bool name_required) {
  static const struct option opts[] = {
      {"dir", required_argument, 0, 'd'}, {"name", required_argument, 0, 'n'}, {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  reset_getopt();
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': a->dir = optarg; break;
    case 'n': a->name = optarg; break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (name_required && !a->name) return xf_cli_usage(cli, "--name N is required");
  return XF_EXIT_OK;
}

/* The dataset called name, or every dataset when name is NULL, as one array
 * the caller releases with xf_site_dataset_list_free. */
static xf_err select_datasets(xf_cli *cli, xf_site_registry *reg, const char *name,
                              xf_site_dataset **list, size_t *n) {
  *list = NULL;
  *n = 0;
  if (!name) return xf_site_registry_list(reg, list, n, &cli->err);
  xf_site_dataset *one = xf_calloc(1, sizeof(*one));
  if (!one) return xf_fail(&cli->err, XF_ENOMEM, "out of memory");
  xf_err rc = xf_site_registry_get(reg, name, one, &cli->err);
  if (rc != XF_OK) {
    xf_free(one);
    return rc;
  }
  *list = one;
  *n = 1;
  return XF_OK;
}

static int cmd_dataset_list(xf_cli *cli, int argc, char **argv) {
  named_args a;
  int status = parse_named(cli, argc, argv, &a, false);
  if (status != XF_EXIT_OK) return status;
  site_paths p;
  if (site_paths_make(cli, a.dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = open_site(cli, &p, &cfg, &reg);
  xf_site_dataset *list = NULL;
  size_t n = 0;
  if (rc == XF_OK) rc = select_datasets(cli, reg, a.name, &list, &n);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) json_array_append_new(arr, dataset_json(&list[i]));
    xf_cli_print_json(json_pack("{s:s,s:o}", "site", cfg.site, "datasets", arr ? arr : json_array()));
  } else if (n == 0) {
    printf("no datasets registered at site %s; add one with 'xfed-site dataset add'\n", cfg.site);
  } else {
    printf("%-20s %-12s %-6s %8s %8s %7s %-12s %-8s %s\n", "NAME", "CLASS", "LAYOUT", "TRAIN",
           "TEST", "CLASSES", "SHAPE", "BUDGET", "TAGS");
    for (size_t i = 0; i < n; i++) {
      const xf_site_dataset *d = &list[i];
      char shape[48], tagbuf[1024], budget[64];
      snprintf(shape, sizeof(shape), "%ux%ux%u", d->h, d->w, d->c);
      tags_text(d, tagbuf, sizeof(tagbuf));
      budget_text(d, budget, sizeof(budget));
      printf("%-20s %-12s %-6s %8u %8u %7u %-12s %-8s %s\n", d->name,
             xf_site_class_name(d->classification), xf_dataset_layout_name(d->layout),
             d->train_records, d->test_records, d->classes, shape, budget, tagbuf);
    }
  }
  xf_site_dataset_list_free(list, n);
  return XF_EXIT_OK;
}

static int cmd_dataset_rm(xf_cli *cli, int argc, char **argv) {
  named_args a;
  int status = parse_named(cli, argc, argv, &a, true);
  if (status != XF_EXIT_OK) return status;
  site_paths p;
  if (site_paths_make(cli, a.dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = open_site(cli, &p, &cfg, &reg);
  if (rc == XF_OK) rc = xf_site_registry_remove(reg, a.name, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json) xf_cli_print_json(json_pack("{s:s}", "removed", a.name));
  else printf("removed dataset %s from the registry (its files are left as they are)\n", a.name);
  return XF_EXIT_OK;
}

static int cmd_dataset_verify(xf_cli *cli, int argc, char **argv) {
  named_args a;
  int status = parse_named(cli, argc, argv, &a, false);
  if (status != XF_EXIT_OK) return status;
  site_paths p;
  if (site_paths_make(cli, a.dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_site_verify_result *res = NULL;
  size_t n = 0;
  xf_err rc = open_site(cli, &p, &cfg, &reg);
  if (rc == XF_OK) rc = xf_site_registry_verify(reg, a.name, &res, &n, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  size_t bad = 0;
  json_t *arr = cli->json ? json_array() : NULL;
  for (size_t i = 0; i < n; i++) {
    const xf_site_verify_result *r = &res[i];
    if (r->state != XF_SITE_DATA_OK) bad++;
    if (arr) {
      json_array_append_new(
          arr, json_pack("{s:s,s:s,s:s,s:o,s:s}", "name", r->name, "state",
                         xf_site_data_state_name(r->state), "registered_digest", r->registered,
                         "current_digest", r->current[0] ? json_string(r->current) : json_null(),
                         "detail", r->detail));
    } else {
      printf("%-20s %-10s %s\n", r->name, xf_site_data_state_name(r->state),
             r->state == XF_SITE_DATA_CHANGED
                 ? "the files differ from those registered; inspect them, then remove and add "
                   "the dataset again"
                 : r->detail);
    }
  }
  if (arr) xf_cli_print_json(json_pack("{s:b,s:o}", "ok", bad == 0, "datasets", arr));
  else if (n == 0) printf("no datasets registered\n");
  xf_free(res);
  if (bad) {
    fprintf(stderr, "%s %s: %zu of %zu datasets changed, missing or unreadable\n", cli->prog,
            cli->name, bad, n);
    return XF_EXIT_ERROR;
  }
  return XF_EXIT_OK;
}

/* ---- dataset tag / budget ------------------------------------------------------------------ */

static int cmd_dataset_tag(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                       {"name", required_argument, 0, 'n'},
                                       {"add", required_argument, 0, 'a'},
                                       {"remove", required_argument, 0, 'r'},
                                       {0, 0, 0, 0}};
  const char *dir = NULL, *name = NULL, *tags[MAX_TAG_FLAGS];
  bool adding[MAX_TAG_FLAGS];
  int n = 0;
  reset_getopt();
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': dir = optarg; break;
    case 'n': name = optarg; break;
    case 'a':
    case 'r':
      if (n == MAX_TAG_FLAGS) return xf_cli_usage(cli, "at most %d tag changes", MAX_TAG_FLAGS);
      /* A tag registered under an older, looser rule can still be removed. */
      if (ch == 'a' && !xf_name_valid(optarg))
        return xf_cli_usage(cli, "--add '%s' is not a valid tag: use 1 to 63 lowercase letters, "
                                 "digits, '-' and '_', starting with a letter or digit (the "
                                 "rule of job specs and policies)", optarg);
      adding[n] = ch == 'a';
      tags[n++] = optarg;
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!name) return xf_cli_usage(cli, "--name N is required");
  if (n == 0) return xf_cli_usage(cli, "give at least one --add TAG or --remove TAG");
  site_paths p;
  if (site_paths_make(cli, dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_site_dataset d = {0};
  xf_err rc = open_site(cli, &p, &cfg, &reg);
  for (int i = 0; rc == XF_OK && i < n; i++)
    rc = adding[i] ? xf_site_registry_tag_add(reg, name, tags[i], &cli->err)
                   : xf_site_registry_tag_remove(reg, name, tags[i], &cli->err);
  if (rc == XF_OK) rc = xf_site_registry_get(reg, name, &d, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  char tagbuf[1024];
  tags_text(&d, tagbuf, sizeof(tagbuf));
  if (cli->json) xf_cli_print_json(dataset_json(&d));
  else printf("%s: tags %s\n", d.name, tagbuf);
  xf_site_dataset_free(&d);
  return XF_EXIT_OK;
}

static int cmd_dataset_budget(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                       {"name", required_argument, 0, 'n'},
                                       {"epsilon", required_argument, 0, 'e'},
                                       {"delta", required_argument, 0, 'D'},
                                       {"clear", no_argument, 0, 'c'},
                                       {0, 0, 0, 0}};
  const char *dir = NULL, *name = NULL;
  double eps = 0, delta = 0;
  bool set = false, clear = false, has_delta = false;
  reset_getopt();
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': dir = optarg; break;
    case 'n': name = optarg; break;
    case 'e':
      if (xf_cli_parse_double(cli, "--epsilon", optarg, 1e-9, 1e6, &eps) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      set = true;
      break;
    case 'D':
      if (xf_cli_parse_double(cli, "--delta", optarg, 1e-300, 0.999999, &delta) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      has_delta = true;
      break;
    case 'c': clear = true; break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!name) return xf_cli_usage(cli, "--name N is required");
  if (set == clear) return xf_cli_usage(cli, "give exactly one of --epsilon E and --clear");
  if (has_delta && clear) return xf_cli_usage(cli, "--delta goes with --epsilon, not --clear");
  site_paths p;
  if (site_paths_make(cli, dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_site_dataset d = {0};
  xf_err rc = open_site(cli, &p, &cfg, &reg);
  if (rc == XF_OK) rc = xf_site_registry_set_budget(reg, name, set ? &eps : NULL, has_delta ? &delta : NULL,
                                     &cli->err);
  if (rc == XF_OK) rc = xf_site_registry_get(reg, name, &d, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  char budget[64];
  budget_text(&d, budget, sizeof(budget));
  if (cli->json) xf_cli_print_json(dataset_json(&d));
  else printf("%s: budget epsilon %s\n", d.name, budget);
  xf_site_dataset_free(&d);
  return XF_EXIT_OK;
}

/* ---- ledger ---------------------------------------------------------------------------------- */

/* The privacy ledger of one dataset or of all: per job, what it spent. */
static int cmd_ledger(xf_cli *cli, int argc, char **argv) {
  named_args a;
  int status = parse_named(cli, argc, argv, &a, false);
  if (status != XF_EXIT_OK) return status;
  site_paths p;
  if (site_paths_make(cli, a.dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = open_site(cli, &p, &cfg, &reg);
  xf_site_dataset *list = NULL;
  size_t n = 0;
  if (rc == XF_OK) rc = select_datasets(cli, reg, a.name, &list, &n);
  json_t *out = cli->json ? json_array() : NULL;
  for (size_t i = 0; rc == XF_OK && i < n; i++) {
    const xf_site_dataset *d = &list[i];
    double spent = 0;
    xf_ledger_job *jobs = NULL;
    size_t nj = 0;
    rc = xf_ledger_epsilon(xf_site_registry_db(reg), d->name, NULL, NULL, d->budget_delta, &spent, &cli->err);
    if (rc == XF_OK) rc = xf_site_ledger_jobs(reg, d->name, &jobs, &nj, &cli->err);
    if (rc != XF_OK) break;
    if (out) {
      json_t *js = json_array();
      for (size_t j = 0; js && j < nj; j++)
        json_array_append_new(js, json_pack("{s:s,s:I,s:I,s:f}", "job", jobs[j].job, "rounds",
                                            (json_int_t)jobs[j].rounds, "steps",
                                            (json_int_t)jobs[j].steps, "epsilon",
                                            jobs[j].epsilon));
      json_array_append_new(out, json_pack("{s:s,s:f,s:o,s:f,s:o}", "dataset", d->name,
                                           "epsilon", spent, "budget_epsilon",
                                           d->has_budget ? json_real(d->budget_epsilon)
                                                         : json_null(),
                                           "delta", d->budget_delta,
                                           "jobs", js ? js : json_array()));
    } else {
      char budget[48];
      budget_text(d, budget, sizeof(budget));
      printf("%s: spent epsilon %.4g at delta %g, budget %s\n", d->name, spent, d->budget_delta,
             budget);
      for (size_t j = 0; j < nj; j++)
        printf("  job %-12s rounds %-4u steps %-8llu epsilon %.4g\n", jobs[j].job,
               jobs[j].rounds, (unsigned long long)jobs[j].steps, jobs[j].epsilon);
    }
    xf_free(jobs);
  }
  xf_site_dataset_list_free(list, n);
  xf_site_registry_close(reg);
  if (rc != XF_OK) {
    json_decref(out);
    return xf_cli_fail(cli, rc);
  }
  if (out) xf_cli_print_json(out);
  return XF_EXIT_OK;
}

/* ---- config show ------------------------------------------------------------------------------ */

static int cmd_config_show(xf_cli *cli, int argc, char **argv) {
  named_args a;
  static const struct option opts[] = {{"dir", required_argument, 0, 'd'}, {0, 0, 0, 0}};
  memset(&a, 0, sizeof(a));
  reset_getopt();
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (ch == 'd') a.dir = optarg;
    else return xf_cli_option_error(cli, ch, argv, opts);
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  site_paths p;
  if (site_paths_make(cli, a.dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_config cfg;
  xf_err rc = xf_site_config_load(p.config, &cfg, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json) {
    char *text = NULL;
    if ((rc = xf_site_config_format(&cfg, &text, &cli->err)) != XF_OK) return xf_cli_fail(cli, rc);
    json_t *o = json_loads(text, 0, NULL);
    xf_free(text);
    if (o) {
      json_object_set_new(o, "dir", json_string(p.dir));
      json_object_set_new(o, "config", json_string(p.config));
      json_object_set_new(o, "database", json_string(p.db));
    }
    xf_cli_print_json(o);
    return XF_EXIT_OK;
  }
  printf("config       %s\n", p.config);
  printf("database     %s\n", p.db);
  printf("site         %s\n", cfg.site);
  printf("region       %s\n", cfg.region);
  printf("coordinator  %s (host %s, port %u)\n", cfg.coordinator, cfg.coordinator_host,
         (unsigned)cfg.coordinator_port);
  printf("cert         %s\n", cfg.cert[0] ? cfg.cert : "(not set)");
  printf("key          %s\n", cfg.key[0] ? cfg.key : "(not set)");
  printf("ca           %s\n", cfg.ca[0] ? cfg.ca : "(not set)");
  printf("crl          %s\n", cfg.crl[0] ? cfg.crl : "(not set)");
  printf("data_root    %s\n", cfg.data_root[0] ? cfg.data_root : "(not set)");
  printf("threads      %u%s\n", cfg.threads, cfg.threads ? "" : " (all cores)");
  printf("backend      %s\n", cfg.backend);
  return XF_EXIT_OK;
}

/* ---- run ------------------------------------------------------------------------------------ */

static int cmd_run(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                       {"metrics", required_argument, 0, 'M'},
                                       {"metrics-port-file", required_argument, 0, 'm'},
                                       {0, 0, 0, 0}};
  const char *dir = NULL, *metrics = NULL, *metrics_port_file = NULL;
  reset_getopt();
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (ch == 'd') dir = optarg;
    else if (ch == 'M') metrics = optarg;
    else if (ch == 'm') metrics_port_file = optarg;
    else return xf_cli_option_error(cli, ch, argv, opts);
  }
#ifndef XF_HAVE_HTTP
  /* A build configured with -DXF_HTTP=OFF has no HTTP server to serve it. */
  if (metrics) return xf_cli_usage(cli, "--metrics: this xfed-site was " XF_HTTP_ABSENT);
#endif
  /* --metrics [HOST:]PORT: a port alone listens on 127.0.0.1. */
  char metrics_host[256] = "";
  int metrics_port = 0;
  if (metrics) {
    const char *colon = strrchr(metrics, ':');
    const char *port_text = colon ? colon + 1 : metrics;
    char *end = NULL;
    long port = strtol(port_text, &end, 10);
    size_t hl = colon ? (size_t)(colon - metrics) : 0;
    if (!*port_text || !end || *end || port < 0 || port > 65535 || (colon && hl == 0) ||
        hl >= sizeof(metrics_host))
      return xf_cli_usage(cli, "--metrics '%s' is not [HOST:]PORT with a numeric host and a "
                               "port from 0 to 65535", metrics);
    const char *h = metrics;
    if (colon && h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
      h++;
      hl -= 2;
    }
    if (colon) {
      memcpy(metrics_host, h, hl);
      metrics_host[hl] = '\0';
      if (strcmp(metrics_host, "localhost") == 0) snprintf(metrics_host, 10, "127.0.0.1");
    } else {
      snprintf(metrics_host, sizeof(metrics_host), "127.0.0.1");
    }
    metrics_port = (int)port;
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (cli->json) return xf_cli_usage(cli, "run logs key=value lines to stderr; it has no --json");
  site_paths p;
  if (site_paths_make(cli, dir, &p) != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  xf_site_daemon_opts o = {.dir = p.dir,
                           .metrics_host = metrics ? metrics_host : NULL,
                           .metrics_port = metrics_port,
                           .metrics_port_file = metrics_port_file};
  xf_err rc = xf_site_daemon_run(&o, &cli->err);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}

/* ---- the table and the dispatcher ------------------------------------------------------------- */

#define DIR_HELP                                                                       \
  "  --dir DIR   the site directory (default: XFED_SITE_DIR, else the current one)\n"

static const xf_cmd commands[] = {
    {"init", NULL, "create a site directory: site.json and the site database",
     "usage: xfed-site init --dir DIR --name N --region R --coordinator HOST:PORT\n"
     "                      [--cert FILE] [--key FILE] [--ca FILE] [--crl FILE]\n"
     "                      [--data-root DIR] [--threads N] [--backend B] [--json]\n"
     "\n"
     "Creates DIR (mode 0700, and any missing parents), the site database\n"
     "DIR/site.db and the configuration DIR/site.json (mode 0600). A DIR that\n"
     "already holds site.json is refused. Relative paths in site.json are\n"
     "relative to DIR.\n"
     "\n"
     "options:\n"
     "  --dir DIR              the site directory\n"
     "  --name N               the site's name, as in its certificate (1 to 63 of\n"
     "                         a-z, 0-9 and '-', not first or last)\n"
     "  --region R             the site's region (same rule)\n"
     "  --coordinator H:P      its coordinator or regional aggregator: a host name,\n"
     "                         an IPv4 address or [IPv6], and a port\n"
     "  --cert, --key FILE     the site's certificate and private key\n"
     "  --ca, --crl FILE       the federation's CA certificate and CRL\n"
     "  --data-root DIR        where relative 'dataset add --path' values are found\n"
     "  --threads N            CPU threads for training, 0 = all cores (default 0)\n"
     "  --backend B            auto (default), cpu or cuda\n"
     "  --json                 print the paths as one JSON object\n"
     "\n"
     "example: xfed-site init --dir /var/lib/xfed-site --name eu-berlin --region eu \\\n"
     "           --coordinator agg-eu.example.org:7443 --cert eu-berlin.crt \\\n"
     "           --key eu-berlin.key --ca ca.crt --crl crl.pem\n"
     "See docs/operator-guide.md.\n",
     cmd_init},
    {"dataset", "add", "register a dataset directory after validating it",
     "usage: xfed-site dataset add --name N --path DIR [--classification C] [--tag T]...\n"
     "                             [--budget EPS] [--trainer PROGRAM [--trainer-timeout S]\n"
     "                             [--trainer-dp declared|none]] [--dir SITEDIR] [--json]\n"
     "\n"
     "Loads the dataset in DIR as training will (the Fashion-MNIST IDX files;\n"
     "train.csv and test.csv, read with the column schema schema.json when it is\n"
     "there; train-x.npy, train-y.npy, test-x.npy, test-y.npy; or train.npz and\n"
     "test.npz; see docs/data.md) and registers it with its record\n"
     "counts, shape, classes and a BLAKE2b digest of its files. Data the loader\n"
     "refuses is refused with the loader's message, and nothing is recorded.\n"
     "\n"
     "options:\n"
     "  --name N              the dataset's name (1 to 63 of a-z, 0-9, '-' and '_',\n"
     "                        starting with a letter or digit)\n"
     "  --path DIR            the dataset directory; a relative one is under the\n"
     "                        site's data_root when site.json sets it\n"
     "  --classification C    public, internal (default), confidential or restricted\n"
     "  --tag T               a tag (same rule as names); repeat for more\n"
     "  --budget EPS          the dataset's privacy budget cap (epsilon, > 0)\n"
     "  --trainer PROGRAM     train this dataset's tasks with an external program\n"
     "                        (an absolute path, run without a shell; the contract is\n"
     "                        docs/trainers.md) instead of the site's own kernels\n"
     "  --trainer-timeout S   its time limit per task in seconds (default 3600)\n"
     "  --trainer-dp D        declared: it does DP-SGD and reports it in result.json;\n"
     "                        none (default): only jobs without record-level privacy\n"
     "  --dir SITEDIR         the site directory (default: XFED_SITE_DIR, else .)\n"
     "  --json                print the registered dataset as one JSON object\n",
     cmd_dataset_add},
    {"dataset", "list", "list the registered datasets",
     "usage: xfed-site dataset list [--name N] [--dir DIR] [--json]\n"
     "\n"
     "Lists every registered dataset (or only N): classification, layout, train\n"
     "and test records, classes, shape, budget and tags.\n"
     "\n"
     "options:\n"
     "  --name N    show one dataset\n" DIR_HELP
     "  --json      {site, datasets: [{name, path, layout, classification, tags,\n"
     "              train_records, test_records, classes, features, shape,\n"
     "              registered_at, digest, budget_epsilon}]}\n",
     cmd_dataset_list},
    {"dataset", "rm", "forget a dataset (its files are left alone)",
     "usage: xfed-site dataset rm --name N [--dir DIR] [--json]\n"
     "\n"
     "Removes N and its tags from the registry. The files are not touched.\n"
     "\n"
     "options:\n"
     "  --name N    the dataset\n" DIR_HELP "  --json      print {\"removed\": N}\n",
     cmd_dataset_rm},
    {"dataset", "verify", "check that datasets' files are as registered",
     "usage: xfed-site dataset verify [--name N] [--dir DIR] [--json]\n"
     "\n"
     "Recomputes the digest of every registered dataset (or only N) and compares\n"
     "it with the one taken at registration: ok, changed, missing (directory or a\n"
     "file gone) or unreadable. Exits 1 when any is not ok.\n"
     "\n"
     "options:\n"
     "  --name N    verify one dataset\n" DIR_HELP
     "  --json      {ok, datasets: [{name, state, registered_digest, current_digest,\n"
     "              detail}]}\n",
     cmd_dataset_verify},
    {"dataset", "tag", "add or remove a dataset's tags",
     "usage: xfed-site dataset tag --name N [--add T]... [--remove T]... [--dir DIR] [--json]\n"
     "\n"
     "Adds and removes tags, in the order given. Adding a tag the dataset has is a\n"
     "no-op; removing one it lacks is an error.\n"
     "\n"
     "options:\n"
     "  --name N     the dataset\n"
     "  --add T      add tag T\n"
     "  --remove T   remove tag T\n" DIR_HELP "  --json       print the dataset as JSON\n",
     cmd_dataset_tag},
    {"dataset", "budget", "set or clear a dataset's privacy budget cap",
     "usage: xfed-site dataset budget --name N (--epsilon E [--delta D] | --clear) [--dir DIR]\n"
     "       [--json]\n"
     "\n"
     "Sets the most privacy budget (epsilon at delta) jobs may spend on N, all jobs\n"
     "together, or clears the cap. A task whose release would take N past it is\n"
     "refused (BUDGET_EXHAUSTED) with the numbers; 'xfed-site ledger' shows the spend.\n"
     "\n"
     "options:\n"
     "  --name N       the dataset\n"
     "  --epsilon E    the cap, a number above 0\n"
     "  --delta D      the delta the cap is stated at (default 1e-5, kept when omitted)\n"
     "  --clear        no cap\n" DIR_HELP "  --json         print the dataset as JSON\n",
     cmd_dataset_budget},
    {"dataset", "stats", "write a tabular dataset's column statistics for pooling",
     "usage: xfed-site dataset stats --name N --reason TEXT [--author NAME]\n"
     "                               [--out FILE] [--dir DIR] [--json]\n"
     "\n"
     "For the registered CSV dataset N with a column schema (schema.json), computes\n"
     "for every numeric column of the schema the count, mean and M2 (sum of squared\n"
     "deviations) of the training split's values after the schema's fills, and\n"
     "writes them as one JSON file with the dataset, the site, the schema's digest\n"
     "and the format version. Only these aggregates are written, never records.\n"
     "An operator pools the sites' files with 'xfed data stats merge' into one\n"
     "schema that normalizes alike everywhere (docs/data.md, \"Pooled statistics\").\n"
     "The files travel outside the federation, by whatever the operators agree;\n"
     "each reveals the site's per-column count, mean and variance. Data changed\n"
     "since registration is refused. Every release is a stats_release row of the\n"
     "site's audit trail ('xfed-site audit list'): who, why, where to, and the\n"
     "file's digest.\n"
     "\n"
     "options:\n"
     "  --name N       the dataset\n"
     "  --reason TEXT  why the statistics leave the site (recorded; required)\n"
     "  --author NAME  who releases them (recorded; default $USER or the account)\n"
     "  --out FILE     write the file there (mode 0644) instead of to stdout\n" DIR_HELP
     "  --json         with --out: print {out, dataset, site, columns, train_records}\n",
     xf_site_cmd_dataset_stats},
    {"ledger", NULL, "show what jobs have spent of each dataset's privacy budget",
     "usage: xfed-site ledger [--name N] [--dir DIR] [--json]\n"
     "\n"
     "Prints, for every dataset (or N), the epsilon spent by all jobs together at the\n"
     "budget's delta, the budget, and per job the rounds released, the noised steps\n"
     "and that job's epsilon. The ledger is append-only and keyed by dataset name:\n"
     "removing and registering a dataset again does not reset it.\n"
     "\n"
     "options:\n"
     "  --name N    one dataset\n" DIR_HELP "  --json      the ledger as JSON\n",
     cmd_ledger},
    {"config", "show", "print the site's configuration",
     "usage: xfed-site config show [--dir DIR] [--json]\n"
     "\n"
     "Reads DIR/site.json with the same strict checks as every command and prints\n"
     "it, with unset fields and defaults shown.\n"
     "\n"
     "options:\n" DIR_HELP "  --json      the configuration as one JSON object\n",
     cmd_config_show},
    {"run", NULL, "run the site daemon: dial the coordinator, train, send updates",
     "usage: xfed-site run [--dir DIR] [--metrics [HOST:]PORT] [--metrics-port-file FILE]\n"
     "\n"
     "Runs the site in the foreground until SIGTERM or SIGINT. It dials the\n"
     "coordinator named in site.json over mutual TLS (cert, key, ca and crl from\n"
     "site.json, relative to DIR), announces the registered datasets, and takes\n"
     "tasks: it receives the round's model, evaluates it on the dataset's test\n"
     "split, trains local.epochs epochs on the train split on a worker thread,\n"
     "and streams the update (local - global) back. A dropped link is redialed\n"
     "with exponential backoff from 0.5 s to 30 s (+-25 % jitter); an update not\n"
     "yet acknowledged is kept and resumed when the coordinator offers the task\n"
     "again. Tasks are refused when no registered dataset has the job's name and\n"
     "tags (NO_DATASET), when the model or privacy settings are not supported\n"
     "here (UNSUPPORTED), while another job's task is in hand (BUSY), and when\n"
     "the deadline has passed (DEADLINE_TOO_SHORT).\n"
     "\n"
     "Logs are key=value lines on stderr (XF_LOG_LEVEL=debug|info|warn|error,\n"
     "default info; XF_LOG_FORMAT=json for one JSON object a line). The compute\n"
     "backend is site.json's backend and threads;\n"
     "XF_BACKEND=cpu|cuda|auto overrides the backend. SIGHUP reloads the CRL and\n"
     "announces the registry again. SIGTERM and SIGINT stop it cleanly: no more\n"
     "dialing, the connection closed, a running training stopped at its next\n"
     "batch, exit status 0.\n"
     "\n"
     "options:\n" DIR_HELP
     "  --metrics [H:]P  serve Prometheus /metrics and /healthz over HTTP there (a\n"
     "              port alone: 127.0.0.1; 0 picks a free one); see docs/metrics.md\n"
     "  --metrics-port-file FILE\n"
     "              write the metrics port there once listening\n"
     "\n"
     "example: xfed-site run --dir /var/lib/xfed-site\n"
     "See docs/operator-guide.md, \"Running the daemon\".\n",
     cmd_run},
    {"policy", "import", "replace the site's own residency rules with a policy document",
     "usage: xfed-site policy import FILE --reason TEXT [--author A] [--dir DIR] [--json]\n"
     "\n"
     "Checks FILE, a policy document (docs/policy.md, \"The document\"), and keeps it\n"
     "as the next version of this site's local policy, with who and why; the change\n"
     "is also a \"policy_change\" row of the site's audit trail. A document that does\n"
     "not check is refused with the member named, and the version stays as it was.\n"
     "The daemon checks every offer that carries a residency plan against the\n"
     "current version: the local rules can only restrict what the coordinator's\n"
     "policy allows (docs/policy.md, \"Site-local rules\").\n"
     "\n"
     "options:\n"
     "  --reason TEXT   why (required)\n"
     "  --author A      who (default: $USER, else the account's name)\n" DIR_HELP
     "  --json          print {version, previous}\n",
     xf_site_cmd_policy_import},
    {"policy", "export", "print a version of the site's own residency rules",
     "usage: xfed-site policy export [--version V] [--dir DIR]\n"
     "\n"
     "Prints the document of version V (default: the current one; 0 is the empty\n"
     "policy), as import reads it.\n"
     "\n"
     "options:\n"
     "  --version V   the version\n" DIR_HELP,
     xf_site_cmd_policy_export},
    {"policy", "log", "list the versions of the site's own residency rules",
     "usage: xfed-site policy log [--dir DIR] [--json]\n"
     "\n"
     "Lists every version of the local policy, oldest first: number, time, author\n"
     "and reason.\n"
     "\n"
     "options:\n" DIR_HELP "  --json      {versions: [{version, at, author, reason}]}\n",
     xf_site_cmd_policy_log},
    {"policy", "rules", "list the rules of the site's own residency policy",
     "usage: xfed-site policy rules [--version V] [--dir DIR] [--json]\n"
     "\n"
     "Lists the rules of version V (default: the current one) in their order, one\n"
     "a line: id, effect, kind, selector, destinations and conditions.\n"
     "\n"
     "options:\n"
     "  --version V   the version\n" DIR_HELP
     "  --json        {version, rules: [...]} as the document writes them\n",
     xf_site_cmd_policy_rules},
    {"audit", "list", "list the site's audit trail",
     "usage: xfed-site audit list [--since T] [--dir DIR] [--json]\n"
     "\n"
     "Lists the rows of the site's audit trail in order: its local residency\n"
     "decisions (decision, refused_task), the updates it sent to an aggregator in\n"
     "another region (crossing), and changes of its local policy (policy_change).\n"
     "\n"
     "options:\n"
     "  --since T   rows at or after T (Unix seconds or 2024-05-01T12:00:00Z)\n" DIR_HELP
     "  --json      {rows: [{seq, at, actor, kind, subject, detail, prev, digest}]}\n",
     xf_site_cmd_audit_list},
    {"audit", "verify", "check the site's audit trail's hash chain",
     "usage: xfed-site audit verify [--dir DIR] [--json]\n"
     "\n"
     "Recomputes every row's digest and checks the chain. Prints \"intact\" and the\n"
     "head (keep it elsewhere to detect rows cut off the end later), or names the\n"
     "first bad row and exits 1.\n"
     "\n"
     "options:\n" DIR_HELP "  --json      {intact, fault, rows, seq, what, head}\n",
     xf_site_cmd_audit_verify},
    {"audit", "export", "write the site's audit trail as JSON lines",
     "usage: xfed-site audit export [--since T] [--dir DIR]\n"
     "\n"
     "Writes the rows (at or after T) to stdout, one JSON object a line, with their\n"
     "digests, for an external verifier (docs/audit.md).\n"
     "\n"
     "options:\n"
     "  --since T   rows at or after T\n" DIR_HELP,
     xf_site_cmd_audit_export},
    {0},
};

int main(int argc, char **argv) {
  static const xf_cli_program site = {
      .prog = PROG,
      .about = PROG " sets up an xfed site, keeps its dataset registry and runs its daemon.",
      .exit_statuses = "0 ok, 1 error, 2 usage",
      .commands = commands,
  };
  return xf_cli_main(&site, argc, argv);
}
