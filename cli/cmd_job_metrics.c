/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed job metrics`: a job's figures per round and site, as a table, RFC
 * 4180 CSV or JSON. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/job_internal.h"
#include "net/frame.h"

typedef Xfed__MetricsReport__Row row;

static const char *str_or_empty(const char *s) { return s ? s : ""; }

static int cmp_row(const void *pa, const void *pb) {
  const row *a = *(const row *const *)pa;
  const row *b = *(const row *const *)pb;
  if (a->round != b->round) return a->round < b->round ? -1 : 1;
  return strcmp(str_or_empty(a->site), str_or_empty(b->site));
}

/* The shortest text that reads back as the same double: data for analysis
 * keeps every bit, without the noise digits of %.17g where they add nothing. */
static void fmt_exact(double v, char out[32]) {
  snprintf(out, 32, "%.15g", v);
  if (strtod(out, NULL) != v) snprintf(out, 32, "%.17g", v);
}

/* A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line
 * break, with quotes doubled. */
static void csv_field(const char *s, bool last) {
  if (strpbrk(s, ",\"\r\n")) {
    fputc('"', stdout);
    for (const char *p = s; *p; p++) {
      if (*p == '"') fputc('"', stdout);
      fputc(*p, stdout);
    }
    fputc('"', stdout);
  } else {
    fputs(s, stdout);
  }
  fputs(last ? "\r\n" : ",", stdout);
}

static void csv_number(double v, bool have, bool last) {
  char buf[32] = "";
  if (have && isfinite(v)) fmt_exact(v, buf);
  csv_field(buf, last);
}

static void csv_count(uint64_t v, bool last) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%" PRIu64, v);
  csv_field(buf, last);
}

static void print_csv(row **rows, size_t n) {
  fputs("round,site,region,train_loss,test_loss,test_accuracy,samples,bytes_up,bytes_down,"
        "epsilon\r\n",
        stdout);
  for (size_t i = 0; i < n; i++) {
    const row *r = rows[i];
    csv_count(r->round, false);
    csv_field(str_or_empty(r->site), false);
    csv_field(str_or_empty(r->region), false);
    csv_number(r->train_loss, r->has_train, false);
    csv_number(r->test_loss, r->has_test, false);
    csv_number(r->test_accuracy, r->has_test, false);
    csv_count(r->samples, false);
    csv_count(r->bytes_up, false);
    csv_count(r->bytes_down, false);
    csv_number(r->epsilon, r->has_epsilon, true);
  }
}

static void fmt_figure(double v, bool have, char out[24]) {
  if (have && isfinite(v)) snprintf(out, 24, "%.4f", v);
  else snprintf(out, 24, "-");
}

static void print_table(const char *job, row **rows, size_t n) {
  if (n == 0) {
    printf("no metrics for job %s yet\n", job);
    return;
  }
  int wsite = 4, wregion = 6;
  for (size_t i = 0; i < n; i++) {
    int s = (int)strlen(str_or_empty(rows[i]->site)), g = (int)strlen(str_or_empty(rows[i]->region));
    if (s > wsite) wsite = s;
    if (g > wregion) wregion = g;
  }
  printf("%5s  %-*s  %-*s  %10s  %9s  %13s  %9s  %12s  %12s  %8s\n", "ROUND", wsite, "SITE",
         wregion, "REGION", "TRAIN_LOSS", "TEST_LOSS", "TEST_ACCURACY", "SAMPLES", "BYTES_UP",
         "BYTES_DOWN", "EPSILON");
  for (size_t i = 0; i < n; i++) {
    const row *r = rows[i];
    char trl[24], tl[24], acc[24], eps[24];
    fmt_figure(r->train_loss, r->has_train, trl);
    fmt_figure(r->epsilon, r->has_epsilon, eps);
    fmt_figure(r->test_loss, r->has_test, tl);
    fmt_figure(r->test_accuracy, r->has_test, acc);
    printf("%5u  %-*s  %-*s  %10s  %9s  %13s  %9" PRIu64 "  %12" PRIu64 "  %12" PRIu64 "  %8s\n",
           (unsigned)r->round, wsite, str_or_empty(r->site), wregion, str_or_empty(r->region),
           trl, tl, acc, r->samples, r->bytes_up, r->bytes_down, eps);
  }
}

static json_t *row_json(const row *r) {
  return json_pack("{s:I,s:s,s:s,s:o,s:o,s:o,s:I,s:I,s:I,s:o}", "round", (json_int_t)r->round,
                   "site", str_or_empty(r->site), "region", str_or_empty(r->region),
                   "train_loss", r->has_train ? xf__job_number(r->train_loss) : json_null(),
                   "test_loss", r->has_test ? xf__job_number(r->test_loss) : json_null(),
                   "test_accuracy", r->has_test ? xf__job_number(r->test_accuracy) : json_null(),
                   "samples", (json_int_t)r->samples, "bytes_up", (json_int_t)r->bytes_up,
                   "bytes_down", (json_int_t)r->bytes_down, "epsilon",
                   r->has_epsilon ? xf__job_number(r->epsilon) : json_null());
}

/* Rows asked for per page (the coordinator also stops a page before it
 * outgrows one frame). */
#define METRICS_PAGE 5000

void xf__job_metrics_free(xf__job_metrics *p) {
  for (size_t i = 0; i < p->n_answers; i++) xf_envelope_free(p->answers[i]);
  xf_free(p->answers);
  xf_free(p->rows);
  memset(p, 0, sizeof(*p));
}

/* Asks page after page, each after the last row of the one before, until
 * the coordinator says none remain. */
int xf__job_metrics_fetch(xf_cli *cli, xf_client *c, const char *job, xf__job_metrics *out) {
  memset(out, 0, sizeof(*out));
  Xfed__MetricsQuery q = XFED__METRICS_QUERY__INIT;
  q.job_id = (char *)job;
  q.limit = METRICS_PAGE;
  char after_site[256] = "";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS_QUERY;
  env.metrics_query = &q;
  for (;;) {
    Xfed__Envelope *answer = NULL;
    q.after_site = after_site;
    int st = xf__job_request(cli, c, &env, XFED__ENVELOPE__BODY_METRICS_REPORT,
                             XF__JOB_ANY_USER, &answer);
    if (st != XF_EXIT_OK) return st;
    const Xfed__MetricsReport *m = answer->metrics_report;
    Xfed__Envelope **answers = xf_realloc(out->answers, (out->n_answers + 1) * sizeof(*answers));
    row **rows = answers ? xf_realloc(out->rows, (out->n_rows + m->n_rows + 1) * sizeof(*rows))
                         : NULL;
    if (answers) out->answers = answers;
    if (rows) out->rows = rows;
    if (!answers || !rows) {
      xf_envelope_free(answer);
      return xf_cli_fail(cli, XF_ENOMEM);
    }
    out->answers[out->n_answers++] = answer;
    if (m->n_rows) memcpy(out->rows + out->n_rows, m->rows, m->n_rows * sizeof(*rows));
    out->n_rows += m->n_rows;
    if (!m->more) return XF_EXIT_OK;
    if (m->n_rows == 0) {
      xf_fail(&cli->err, XF_EFORMAT, "the coordinator's page of metrics was empty but said "
                                     "more rows remain");
      return xf_cli_fail(cli, XF_EFORMAT);
    }
    const row *last = m->rows[m->n_rows - 1];
    q.after_round = last->round;
    snprintf(after_site, sizeof(after_site), "%s", str_or_empty(last->site));
  }
}

static const struct option metrics_opts[] = {
    XF_CLIENT_OPTIONS, {"csv", no_argument, 0, XF__JOB_OPT_CSV}, {0, 0, 0, 0}};

int xf_cmd_job_metrics(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, metrics_opts, 1, "ID", &a);
  if (st != XF_EXIT_OK) return st;
  if (a.csv && cli->json) return xf_cli_usage(cli, "--csv and --json exclude each other");
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return st;
  xf__job_metrics pg;
  st = xf__job_metrics_fetch(cli, c, a.arg, &pg);
  xf_client_close(c);
  if (st != XF_EXIT_OK) {
    xf__job_metrics_free(&pg);
    return st;
  }
  row **rows = pg.rows;
  size_t n = pg.n_rows;
  if (n) qsort(rows, n, sizeof(*rows), cmp_row);
  if (cli->json) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) json_array_append_new(arr, row_json(rows[i]));
    xf__job_print_json(json_pack("{s:s,s:o}", "job_id", a.arg, "rows", arr ? arr : json_array()));
  } else if (a.csv) {
    print_csv(rows, n);
  } else {
    print_table(a.arg, rows, n);
  }
  xf__job_metrics_free(&pg);
  return XF_EXIT_OK;
}
