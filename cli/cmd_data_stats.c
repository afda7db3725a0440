/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed data stats merge`: pools the column statistics files of several
 * sites (`xfed-site dataset stats`) into one count, mean and standard
 * deviation per numeric column, and optionally into a schema that gives
 * every site the same normalization (data/colstats.h). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "data/colstats.h"
#include "base/file.h"

/* More sites than any federation has; keeps the arrays bounded. */
#define MAX_FILES 10000

typedef struct merge_args {
  const char *schema, *out;
  char **files;
  int n_files;
} merge_args;

static int parse_args(xf_cli *cli, int argc, char **argv, merge_args *a) {
  static const struct option opts[] = {{"schema", required_argument, 0, 's'},
                                       {"out", required_argument, 0, 'o'},
                                       {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  if (argc < 2 || strcmp(argv[1], "merge") != 0)
    return xf_cli_usage(cli, "expected 'merge FILE...'%s%s%s", argc >= 2 ? ", not '" : "",
                        argc >= 2 ? argv[1] : "", argc >= 2 ? "'" : "");
  argc--;
  argv++;
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 's': a->schema = optarg; break;
    case 'o': a->out = optarg; break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  a->files = argv + optind;
  a->n_files = argc - optind;
  if (a->n_files < 2)
    return xf_cli_usage(cli, "give the statistics files of 2 or more sites (%d given)",
                        a->n_files);
  if (a->n_files > MAX_FILES) return xf_cli_usage(cli, "at most %d files", MAX_FILES);
  if (!a->schema != !a->out)
    return xf_cli_usage(cli, "--schema SCHEMA and --out NEW_SCHEMA go together");
  return XF_EXIT_OK;
}

static void print_table(const xf_colstats *pooled, int sites, const char *out,
                        uint32_t replaced) {
  printf("pooled statistics of dataset %s over %d sites (schema digest %.16s...)\n",
         pooled->dataset, sites, pooled->schema_digest);
  /* Ten digits for reading; --json and the schema carry every digit. */
  printf("%-24s %12s %18s %18s\n", "column", "count", "mean", "std");
  for (uint32_t i = 0; i < pooled->n_cols; i++) {
    const xf_colstat *c = &pooled->cols[i];
    printf("%-24s %12llu %18.10g %18.10g\n", c->name, (unsigned long long)c->count, c->mean,
           xf_colstat_std(c));
  }
  if (out)
    printf("wrote %s: %u \"train\" column%s now normalized with the pooled statistics\n", out,
           replaced, replaced == 1 ? "" : "s");
}

static json_t *pooled_json(const xf_colstats *pooled, const xf_colstats *files, int n,
                           const char *out, uint32_t replaced) {
  json_t *sites = json_array(), *cols = json_array();
  for (int f = 0; sites && f < n; f++) json_array_append_new(sites, json_string(files[f].site));
  for (uint32_t i = 0; cols && i < pooled->n_cols; i++) {
    const xf_colstat *c = &pooled->cols[i];
    json_array_append_new(cols, json_pack("{s:s,s:I,s:f,s:f,s:f}", "name", c->name, "count",
                                          (json_int_t)c->count, "mean", c->mean, "std",
                                          xf_colstat_std(c), "m2", c->m2));
  }
  return json_pack("{s:s,s:s,s:o,s:o,s:o,s:i}", "dataset", pooled->dataset, "schema_digest",
                   pooled->schema_digest, "sites", sites ? sites : json_array(), "columns",
                   cols ? cols : json_array(), "schema_out", out ? json_string(out) : json_null(),
                   "replaced", (int)replaced);
}

int xf_cmd_data_stats(xf_cli *cli, int argc, char **argv) {
  merge_args a;
  int status = parse_args(cli, argc, argv, &a);
  if (status != XF_EXIT_OK) return status;
  xf_err rc = a.out ? xf_file_check_target(a.out, &cli->err) : XF_OK;
  xf_colstats *files = rc == XF_OK ? xf_calloc((size_t)a.n_files, sizeof(*files)) : NULL;
  if (rc == XF_OK && !files) rc = xf_fail(&cli->err, XF_ENOMEM, "out of memory");
  for (int f = 0; rc == XF_OK && f < a.n_files; f++)
    rc = xf_colstats_read(a.files[f], &files[f], &cli->err);
  xf_colstats pooled;
  memset(&pooled, 0, sizeof(pooled));
  if (rc == XF_OK)
    rc = xf_colstats_merge(files, (const char *const *)a.files, (size_t)a.n_files, &pooled,
                           &cli->err);
  char *schema = NULL, *written = NULL;
  size_t schema_len = 0;
  uint32_t replaced = 0;
  if (rc == XF_OK && a.schema)
    rc = xf_file_read_text(a.schema, XF_SCHEMA_MAX_BYTES, &schema, &schema_len, &cli->err);
  if (rc == XF_OK && a.schema)
    rc = xf_colstats_apply(schema, schema_len, a.schema, &pooled, &written, &replaced, &cli->err);
  if (rc == XF_OK && a.out)
    rc = xf_file_write_atomic(a.out, written, strlen(written), 0644, &cli->err);
  if (rc == XF_OK) {
    if (cli->json) xf_cli_print_json(pooled_json(&pooled, files, a.n_files, a.out, replaced));
    else print_table(&pooled, a.n_files, a.out, replaced);
  }
  xf_free(written);
  xf_free(schema);
  xf_colstats_free(&pooled);
  for (int f = 0; files && f < a.n_files; f++) xf_colstats_free(&files[f]);
  xf_free(files);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}
