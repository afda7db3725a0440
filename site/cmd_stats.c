/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed-site dataset stats`: the sufficient statistics of a registered
 * tabular dataset's numeric columns, written for pooling with other sites'
 * (data/colstats.h; docs/data.md, "Pooled statistics"). Each release is a
 * row of the site's audit trail (stats_release): who, why, what and the
 * digest of what left. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/alloc.h"
#include "crypto/digest.h"
#include "policy/audit.h"
#include "site/cmd.h"
#include "data/colstats.h"
#include "base/file.h"

typedef struct stats_args {
  const char *dir, *name, *out, *author, *reason;
} stats_args;

enum { OPT_AUTHOR = 256, OPT_REASON };

static int parse_args(xf_cli *cli, int argc, char **argv, stats_args *a) {
  static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                       {"name", required_argument, 0, 'n'},
                                       {"out", required_argument, 0, 'o'},
                                       {"author", required_argument, 0, OPT_AUTHOR},
                                       {"reason", required_argument, 0, OPT_REASON},
                                       {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': a->dir = optarg; break;
    case 'n': a->name = optarg; break;
    case 'o': a->out = optarg; break;
    case OPT_AUTHOR: a->author = optarg; break;
    case OPT_REASON: a->reason = optarg; break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!a->name) return xf_cli_usage(cli, "--name N is required");
  if (!a->reason || !*a->reason)
    return xf_cli_usage(cli, "--reason TEXT is required: the release of a dataset's statistics "
                             "goes into the site's audit trail with who and why");
  if (!a->author) a->author = xf_site_operator_name();
  if (!a->author || !*a->author)
    return xf_cli_usage(cli, "--author NAME is required: neither $USER nor the account running "
                             "this command has a name");
  return XF_EXIT_OK;
}

/* Statistics describe the data as registered: files changed since
 * registration are refused, as training would refuse them. */
static xf_err check_registered(xf_cli *cli, xf_site_registry *reg, const char *name) {
  xf_site_verify_result *res = NULL;
  size_t n = 0;
  XF_GUARD(xf_site_registry_verify(reg, name, &res, &n, &cli->err));
  xf_err rc = XF_OK;
  if (n == 1 && res[0].state != XF_SITE_DATA_OK)
    rc = xf_fail(&cli->err, XF_EINTEGRITY,
                 "dataset '%s' is %s since it was registered (%s): check it with "
                 "'xfed-site dataset verify', then remove and add it again",
                 name, xf_site_data_state_name(res[0].state),
                 res[0].detail[0] ? res[0].detail : "its digest differs");
  xf_free(res);
  return rc;
}

/* The trail's row for a release: the file's digest lets an auditor match a
 * file that turns up elsewhere to the release that made it. */
static xf_err audit_release(xf_cli *cli, xf_site_registry *reg, const stats_args *a,
                            const xf_colstats *st, const char *json) {
  xf_digest dg;
  char hex[XF_DIGEST_HEX];
  xf_digest_buf(json, strlen(json), &dg);
  xf_digest_hex(&dg, hex);
  json_t *cols = json_array();
  for (uint32_t i = 0; cols && i < st->n_cols; i++)
    if (json_array_append_new(cols, json_string(st->cols[i].name))) {
      json_decref(cols);
      cols = NULL;
    }
  json_t *o = cols ? json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:I}", "author", a->author,
                               "reason", a->reason, "site", st->site, "to",
                               a->out ? a->out : "standard output", "digest", hex,
                               "schema_digest", st->schema_digest, "columns", cols,
                               "train_records", (json_int_t)st->cols[0].count)
                   : NULL;
  char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(o);
  if (!text) return xf_fail(&cli->err, XF_ENOMEM, "cannot build the audit row of the release");
  xf_err rc = xf_audit_append(xf_site_registry_db(reg), (double)time(NULL), a->author,
                              "stats_release", st->dataset, text, NULL, &cli->err);
  free(text);
  return rc;
}

int xf_site_cmd_dataset_stats(xf_cli *cli, int argc, char **argv) {
  stats_args a;
  int status = parse_args(cli, argc, argv, &a);
  if (status != XF_EXIT_OK) return status;
  if (a.out && xf_file_check_target(a.out, &cli->err) != XF_OK)
    return xf_cli_fail(cli, cli->err.code);
  xf_site_config cfg;
  xf_site_registry *reg = NULL;
  xf_err rc = xf_site_cli_open(cli, a.dir, &cfg, &reg);
  if (rc == XF_EUSAGE) return xf_cli_usage(cli, "%s", cli->err.msg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_site_dataset d;
  memset(&d, 0, sizeof(d));
  rc = xf_site_registry_get(reg, a.name, &d, &cli->err);
  if (rc == XF_OK) rc = check_registered(cli, reg, a.name);
  if (rc == XF_OK && d.layout != XF_LAYOUT_CSV)
    rc = xf_fail(&cli->err, XF_EINVAL,
                 "dataset '%s' has the %s layout: statistics are computed for tabular CSV "
                 "datasets with a column schema (schema.json)",
                 a.name, xf_dataset_layout_name(d.layout));
  xf_colstats st;
  memset(&st, 0, sizeof(st));
  if (rc == XF_OK) rc = xf_colstats_compute(d.path, &st, &cli->err);
  xf_site_dataset_free(&d);
  char *json = NULL;
  if (rc == XF_OK) {
    snprintf(st.dataset, sizeof(st.dataset), "%s", a.name);
    snprintf(st.site, sizeof(st.site), "%s", cfg.site);
    rc = xf_colstats_format(&st, &json, &cli->err);
  }
  /* The trail first: nothing leaves without its row. */
  if (rc == XF_OK) rc = audit_release(cli, reg, &a, &st, json);
  if (rc == XF_OK) {
    if (a.out) {
      rc = xf_file_write_atomic(a.out, json, strlen(json), 0644, &cli->err);
      if (rc == XF_OK && cli->json)
        xf_cli_print_json(json_pack("{s:s,s:s,s:s,s:i,s:I}", "out", a.out, "dataset", st.dataset,
                                    "site", st.site, "columns", (int)st.n_cols, "train_records",
                                    (json_int_t)st.cols[0].count));
      else if (rc == XF_OK)
        printf("wrote the statistics of %u numeric column%s of dataset %s (%llu train records) "
               "to %s\n",
               st.n_cols, st.n_cols == 1 ? "" : "s", st.dataset,
               (unsigned long long)st.cols[0].count, a.out);
    } else {
      fputs(json, stdout);
    }
  }
  xf_site_registry_close(reg);
  xf_free(json);
  xf_colstats_free(&st);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}
