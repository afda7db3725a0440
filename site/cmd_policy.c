/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed-site policy import|export|log|rules`: the site operator's own
 * residency rules, kept as versions in the site database and checked by the
 * daemon against every offer (docs/policy.md, "Site-local rules"). */
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
#include "cmd/print.h"
#include "policy/audit.h"
#include "policy/policy.h"
#include "site/cmd.h"
#include "base/file.h"

/* A policy document larger than this is refused before it is parsed. */
#define POLICY_FILE_MAX (4u << 20)

typedef struct policy_args {
  const char *dir, *author, *reason, *file;
  bool has_version;
  long version;
} policy_args;

enum { OPT_DIR = 256, OPT_AUTHOR, OPT_REASON, OPT_VERSION };

/* Parses --dir always, --author and --reason when change, --version when
 * version, and one FILE argument when file. Returns an exit status
 * (XF_EXIT_OK to go on). */
static int parse_args(xf_cli *cli, int argc, char **argv, bool change, bool version, bool file,
                      policy_args *a) {
  struct option opts[5];
  size_t n = 0;
  opts[n++] = (struct option){"dir", required_argument, 0, OPT_DIR};
  if (change) {
    opts[n++] = (struct option){"author", required_argument, 0, OPT_AUTHOR};
    opts[n++] = (struct option){"reason", required_argument, 0, OPT_REASON};
  }
  if (version) opts[n++] = (struct option){"version", required_argument, 0, OPT_VERSION};
  opts[n] = (struct option){0, 0, 0, 0};
  memset(a, 0, sizeof(*a));
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case OPT_DIR: a->dir = optarg; break;
    case OPT_AUTHOR: a->author = optarg; break;
    case OPT_REASON: a->reason = optarg; break;
    case OPT_VERSION:
      if (xf_cli_parse_int(cli, "--version", optarg, 0, LONG_MAX, &a->version) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      a->has_version = true;
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (file) {
    if (optind >= argc) return xf_cli_usage(cli, "FILE is required: the policy document");
    a->file = argv[optind++];
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (change && (!a->reason || !*a->reason))
    return xf_cli_usage(cli, "--reason TEXT is required: every change of the site's policy "
                             "records why it was made");
  if (change && !a->author) a->author = xf_site_operator_name();
  if (change && (!a->author || !*a->author))
    return xf_cli_usage(cli, "--author NAME is required: neither $USER nor the account "
                             "database names who is running this");
  return XF_EXIT_OK;
}

/* A policy document, whole (base/file.h); err names the file. */
static xf_err read_text(const char *path, char **text, xf_errctx *err) {
  xf_errctx_clear(err);
  return xf_file_read_text(path, POLICY_FILE_MAX, text, NULL, err);
}

int xf_site_cmd_policy_import(xf_cli *cli, int argc, char **argv) {
  policy_args a;
  int status = parse_args(cli, argc, argv, true, false, true, &a);
  if (status != XF_EXIT_OK) return status;
  char *text = NULL;
  xf_err rc = read_text(a.file, &text, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  if ((rc = xf_site_cli_open(cli, a.dir, &cfg, &reg)) != XF_OK) {
    xf_free(text);
    return xf_cli_fail(cli, rc);
  }
  xf_db *db = xf_site_registry_db(reg);
  double now = (double)time(NULL);
  uint64_t before = 0, v = 0;
  rc = xf_policy_version_current(db, &before, &cli->err);
  if (rc == XF_OK) {
    xf_errctx_clear(&cli->err);
    rc = xf_policy_import(db, text, a.author, a.reason, now, &v, &cli->err);
    if (rc != XF_OK && !cli->err.file[0]) xf_errctx_file(&cli->err, a.file);
  }
  xf_free(text);
  /* The change is in; its audit row follows in a transaction of its own,
   * and a failure to write it is reported as the command's failure. */
  if (rc == XF_OK) {
    char subject[48], *detail = NULL;
    snprintf(subject, sizeof(subject), "policy v%llu", (unsigned long long)v);
    json_t *o = json_pack("{s:I,s:I,s:s,s:s,s:s}", "version", (json_int_t)v, "previous",
                          (json_int_t)before, "change", "import", "author", a.author, "reason",
                          a.reason);
    detail = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    rc = detail ? xf_audit_append(db, now, a.author, "policy_change", subject, detail, NULL,
                                  &cli->err)
                : xf_fail(&cli->err, XF_ENOMEM, "cannot build the audit row");
    free(detail);
  }
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json)
    xf_cli_print_json(json_pack("{s:I,s:I}", "version", (json_int_t)v, "previous", (json_int_t)before));
  else
    printf("site policy version %llu (was %llu): imported from %s\n", (unsigned long long)v,
           (unsigned long long)before, a.file);
  return XF_EXIT_OK;
}

int xf_site_cmd_policy_export(xf_cli *cli, int argc, char **argv) {
  policy_args a;
  int status = parse_args(cli, argc, argv, false, true, false, &a);
  if (status != XF_EXIT_OK) return status;
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_cli_open(cli, a.dir, &cfg, &reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_db *db = xf_site_registry_db(reg);
  uint64_t v = (uint64_t)a.version;
  if (!a.has_version) rc = xf_policy_version_current(db, &v, &cli->err);
  char *doc = NULL;
  if (rc == XF_OK) rc = xf_policy_export(db, v, &doc, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  /* The document is JSON already: --json prints it as it is. */
  fputs(doc, stdout);
  if (!*doc || doc[strlen(doc) - 1] != '\n') fputc('\n', stdout);
  xf_free(doc);
  return XF_EXIT_OK;
}

int xf_site_cmd_policy_log(xf_cli *cli, int argc, char **argv) {
  policy_args a;
  int status = parse_args(cli, argc, argv, false, false, false, &a);
  if (status != XF_EXIT_OK) return status;
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_cli_open(cli, a.dir, &cfg, &reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_policy_version_info *log = NULL;
  size_t n = 0;
  rc = xf_policy_log(xf_site_registry_db(reg), &log, &n, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (n == 0 && !cli->json)
    printf("no local policy (version 0): this site restricts nothing beyond the coordinator's "
           "plan\n");
  else
    xf_cli_policy_log_print(cli, log, n);
  xf_policy_log_free(log, n);
  return XF_EXIT_OK;
}

/* One rule as a line: "id: allow regional_aggregate [select] -> us,eu (conditions)". */
static void print_rule(const xf_policy_rule *r) {
  printf("%s: %s %s", r->id, xf_policy_effect_name(r->effect), xf_policy_kind_name(r->kind));
  const xf_policy_selector *s = &r->select;
  if (s->region[0]) printf(" region=%s", s->region);
  if (s->site[0]) printf(" site=%s", s->site);
  if (s->dataset[0]) printf(" dataset=%s", s->dataset);
  if (s->classification != XF_POLICY_CLASS_NONE)
    printf(" classification=%s", xf_policy_class_name(s->classification));
  if (s->tag[0]) printf(" tag=%s", s->tag);
  printf(" ->");
  for (size_t i = 0; i < r->n_dests; i++) printf("%s%s", i ? "," : " ", r->dests[i]);
  if (r->has_max_epsilon) printf(" max_epsilon=%g", r->max_epsilon);
  if (r->min_cohort) printf(" min_cohort=%u", r->min_cohort);
  if (r->require_secagg) printf(" require_secagg");
  fputc('\n', stdout);
}

int xf_site_cmd_policy_rules(xf_cli *cli, int argc, char **argv) {
  policy_args a;
  int status = parse_args(cli, argc, argv, false, true, false, &a);
  if (status != XF_EXIT_OK) return status;
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_cli_open(cli, a.dir, &cfg, &reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_db *db = xf_site_registry_db(reg);
  uint64_t v = (uint64_t)a.version;
  if (!a.has_version) rc = xf_policy_version_current(db, &v, &cli->err);
  xf_policy *p = NULL;
  if (rc == XF_OK) rc = xf_policy_load(db, v, &p, &cli->err);
  xf_site_registry_close(reg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json) {
    /* The rules as the document writes them. */
    char *doc = NULL;
    rc = xf_policy_format(p, &doc, &cli->err);
    json_t *o = rc == XF_OK ? json_loads(doc, 0, NULL) : NULL;
    xf_free(doc);
    json_t *rules = o ? json_incref(json_object_get(o, "rules")) : NULL;
    json_decref(o);
    if (rc == XF_OK)
      xf_cli_print_json(json_pack("{s:I,s:o}", "version", (json_int_t)v,
                           "rules", rules ? rules : json_array()));
  } else {
    printf("site policy version %llu: %zu rule%s\n", (unsigned long long)v, p->n_rules,
           p->n_rules == 1 ? "" : "s");
    for (size_t i = 0; i < p->n_rules; i++) print_rule(&p->rules[i]);
  }
  xf_policy_free(p);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}
