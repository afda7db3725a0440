/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed data split`: cuts a dataset directory into per-site shards (IID,
 * Dirichlet label skew, or k classes per site) with a manifest. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "data/dataset.h"

typedef struct split_args {
  const char *data, *out, *scheme, *label;
  long sites, seed, min_records;
} split_args;

static int parse_args(xf_cli *cli, int argc, char **argv, split_args *a) {
  static const struct option opts[] = {
      {"data", required_argument, 0, 'd'},   {"sites", required_argument, 0, 'n'},
      {"scheme", required_argument, 0, 's'}, {"seed", required_argument, 0, 'r'},
      {"out", required_argument, 0, 'o'},    {"min-records", required_argument, 0, 'm'},
      {"label", required_argument, 0, 'l'},  {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': a->data = optarg; break;
    case 's': a->scheme = optarg; break;
    case 'o': a->out = optarg; break;
    case 'l': a->label = optarg; break;
    case 'n':
      if (xf_cli_parse_int(cli, "--sites", optarg, 1, 10000, &a->sites) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    case 'r':
      if (xf_cli_parse_int(cli, "--seed", optarg, 0, 2147483647L, &a->seed) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    case 'm':
      if (xf_cli_parse_int(cli, "--min-records", optarg, 1, 1000000000L, &a->min_records) !=
          XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!a->data) return xf_cli_usage(cli, "--data DIR is required");
  if (!a->sites) return xf_cli_usage(cli, "--sites N is required");
  if (!a->scheme) return xf_cli_usage(cli, "--scheme iid|dirichlet:ALPHA|classes:K is required");
  if (!a->out) return xf_cli_usage(cli, "--out OUTDIR is required");
  return XF_EXIT_OK;
}

/* --label: a column number (from 1) or a header name. */
static void label_option(const char *label, xf_csv_options *csv) {
  memset(csv, 0, sizeof(*csv));
  if (!label) return;
  char *end = NULL;
  long col = strtol(label, &end, 10);
  if (*label >= '0' && *label <= '9' && *end == '\0' && col >= 1 && col <= 0x7fffffffL)
    csv->label_column = (uint32_t)col;
  else
    csv->label_name = label;
}

static void print_summary(const xf_split *split, const split_args *a, uint64_t *counts) {
  char scheme[64];
  xf_split_scheme_format(&split->scheme, scheme, sizeof(scheme));
  printf("split %s into %d site%s (%s, seed %ld) in %s\n", a->data, split->sites,
         split->sites == 1 ? "" : "s", scheme, a->seed, a->out);
  /* Per-class counts fit a terminal line for up to 16 classes. */
  int per_class = split->classes <= 16;
  printf("%-10s %9s %8s %8s", "site", "train", "test", "classes");
  if (per_class) printf("  train records per class 0..%u", split->classes - 1);
  putchar('\n');
  uint64_t train_total = 0, test_total = 0;
  for (int s = 0; s < split->sites; s++) {
    const xf_dataset_pair *p = &split->shards[s];
    xf_dataset_label_counts(&p->train, counts);
    uint32_t held = 0;
    for (uint32_t k = 0; k < split->classes; k++) held += counts[k] > 0;
    char name[32];
    snprintf(name, sizeof(name), "site-%d", s + 1);
    printf("%-10s %9u %8u %8u ", name, p->train.n, p->test.n, held);
    for (uint32_t k = 0; per_class && k < split->classes; k++)
      printf(" %llu", (unsigned long long)counts[k]);
    putchar('\n');
    train_total += p->train.n;
    test_total += p->test.n;
  }
  printf("%-10s %9llu %8llu\n", "total", (unsigned long long)train_total,
         (unsigned long long)test_total);
  printf("manifest: %s/manifest.json\n", a->out);
}

int xf_cmd_data_split(xf_cli *cli, int argc, char **argv) {
  split_args a;
  int status = parse_args(cli, argc, argv, &a);
  if (status != XF_EXIT_OK) return status;
  xf_split_scheme scheme;
  if (xf_split_scheme_parse(a.scheme, &scheme, &cli->err) != XF_OK)
    return xf_cli_usage(cli, "--scheme: %s", cli->err.msg);
  xf_csv_options csv;
  label_option(a.label, &csv);
  xf_split_options opt = {.min_records = (uint32_t)a.min_records};

  /* Refuse a used OUTDIR before spending time on loading and splitting. */
  xf_err rc = xf_split_check_out(a.out, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  xf_dataset train, test;
  xf_dataset_layout layout;
  rc = xf_dataset_load_dir_with(a.data, &csv, &layout, &train, &test, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  /* Shards of an .npz dataset are written as .npy files (xf_dataset_write_dir),
   * and the manifest names the layout the shards have. */
  if (layout == XF_LAYOUT_NPZ) layout = XF_LAYOUT_NPY;
  xf_split split;
  rc = xf_dataset_split(&train, &test, (int)a.sites, &scheme, (uint64_t)a.seed, &opt, &split,
                        &cli->err);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  rc = xf_split_write(&split, a.data, layout, a.out, &cli->err);
  char *manifest = NULL;
  if (rc == XF_OK) rc = xf_split_manifest(&split, a.data, layout, &manifest, &cli->err);
  uint64_t *counts = rc == XF_OK ? xf_calloc(split.classes, sizeof(uint64_t)) : NULL;
  if (rc == XF_OK && !counts) rc = xf_fail(&cli->err, XF_ENOMEM, "out of memory");
  if (rc == XF_OK) {
    if (cli->json)
      printf("%s\n", manifest);
    else
      print_summary(&split, &a, counts);
  }
  xf_free(counts);
  xf_free(manifest);
  xf_split_free(&split);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}
