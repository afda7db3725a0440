/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed job report`: a job's training curves (test accuracy, loss, ε spent,
 * bytes up and down per round) drawn as PNG, SVG or PDF from the metrics
 * `xfed job metrics` shows (cli/report_chart.h draws them). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/job_internal.h"
#include "cli/report_chart.h"
#include "net/frame.h"
#include "base/file.h"

typedef Xfed__MetricsReport__Row row;

static int cmp_round(const void *pa, const void *pb) {
  const row *a = *(const row *const *)pa;
  const row *b = *(const row *const *)pb;
  return a->round < b->round ? -1 : a->round > b->round;
}

/* A mean weighted by the sites' training records; unweighted when every
 * row of the round has none (an evaluation-only report). */
typedef struct mean {
  double sum_w, w, sum, n;
} mean;

static void mean_add(mean *m, double v, uint64_t weight) {
  if (!isfinite(v)) return;
  m->sum_w += v * (double)weight;
  m->w += (double)weight;
  m->sum += v;
  m->n += 1;
}

static double mean_of(const mean *m) {
  if (m->w > 0) return m->sum_w / m->w;
  return m->n > 0 ? m->sum / m->n : NAN;
}

/* The rows (sorted by round) as one point per round: test accuracy and
 * losses as weighted means over the round's sites, ε the most any row of the
 * round carries, bytes summed. *n gets the number of rounds. */
static xf_chart_round *per_round(row **rows, size_t n_rows, size_t *n) {
  xf_chart_round *out = xf_calloc(n_rows ? n_rows : 1, sizeof(*out));
  if (!out) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n_rows;) {
    uint32_t round = rows[i]->round;
    mean acc = {0}, trl = {0}, tl = {0};
    double eps = NAN, up = 0, down = 0;
    for (; i < n_rows && rows[i]->round == round; i++) {
      const row *r = rows[i];
      if (r->has_test) {
        mean_add(&acc, r->test_accuracy, r->samples);
        mean_add(&tl, r->test_loss, r->samples);
      }
      if (r->has_train) mean_add(&trl, r->train_loss, r->samples);
      if (r->has_epsilon && isfinite(r->epsilon) && !(eps >= r->epsilon)) eps = r->epsilon;
      up += (double)r->bytes_up;
      down += (double)r->bytes_down;
    }
    out[k++] = (xf_chart_round){.round = round,
                                .test_accuracy = mean_of(&acc),
                                .train_loss = mean_of(&trl),
                                .test_loss = mean_of(&tl),
                                .epsilon = eps,
                                .bytes_up = up,
                                .bytes_down = down};
  }
  *n = k;
  return out;
}

/* WxH within the chart's bounds. */
static int parse_size(xf_cli *cli, const char *s, int *w, int *h) {
  char *end = NULL;
  long a = strtol(s, &end, 10), b = 0;
  bool ok = end != s && (*end == 'x' || *end == 'X');
  if (ok) {
    const char *rest = end + 1;
    b = strtol(rest, &end, 10);
    ok = end != rest && *end == '\0';
  }
  if (!ok || a < XF_CHART_MIN_WIDTH || a > XF_CHART_MAX_SIDE || b < XF_CHART_MIN_HEIGHT ||
      b > XF_CHART_MAX_SIDE)
    return xf_cli_usage(cli, "--size '%s' is not WIDTHxHEIGHT with a width of %d to %d and a "
                        "height of %d to %d (e.g. 1600x1000)", s, XF_CHART_MIN_WIDTH,
                        XF_CHART_MAX_SIDE, XF_CHART_MIN_HEIGHT, XF_CHART_MAX_SIDE);
  *w = (int)a;
  *h = (int)b;
  return XF_EXIT_OK;
}

/* The format --format names and FILE's extension shows; refused when
 * neither names one or they disagree. */
static int pick_format(xf_cli *cli, const xf__job_args *a, xf_chart_format *f) {
  xf_chart_format by_ext = XF_CHART_PNG, by_flag = XF_CHART_PNG;
  bool ext = xf_chart_format_of_path(a->out, &by_ext);
  if (a->format && !xf_chart_format_parse(a->format, &by_flag))
    return xf_cli_usage(cli, "--format '%s' is not png, svg or pdf", a->format);
  if (a->format && ext && by_flag != by_ext)
    return xf_cli_usage(cli, "--format %s disagrees with the extension of '%s' (%s); drop "
                        "--format or name the file .%s", a->format, a->out,
                        xf_chart_format_name(by_ext), a->format);
  if (!a->format && !ext)
    return xf_cli_usage(cli, "cannot tell the format of '%s': name it .png, .svg or .pdf, or "
                        "pass --format", a->out);
  *f = a->format ? by_flag : by_ext;
  return XF_EXIT_OK;
}

/* JobQuery{id}: the job's name and state for the title. */
static int query_job(xf_cli *cli, xf_client *c, const char *id, Xfed__Envelope **answer) {
  Xfed__JobQuery q = XFED__JOB_QUERY__INIT;
  q.job_id = (char *)id;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
  env.job_query = &q;
  return xf__job_request(cli, c, &env, XFED__ENVELOPE__BODY_JOB_LIST, XF__JOB_ANY_USER, answer);
}

static const struct option report_opts[] = {XF_CLIENT_OPTIONS,
                                            {"out", required_argument, 0, XF__JOB_OPT_OUT},
                                            {"format", required_argument, 0, XF__JOB_OPT_FORMAT},
                                            {"size", required_argument, 0, XF__JOB_OPT_SIZE},
                                            {0, 0, 0, 0}};

int xf_cmd_job_report(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, report_opts, 1, "ID", &a);
  if (st != XF_EXIT_OK) return st;
  if (!a.out || !*a.out) return xf_cli_usage(cli, "--out FILE is required");
  xf_chart_format fmt = XF_CHART_PNG;
  if ((st = pick_format(cli, &a, &fmt)) != XF_EXIT_OK) return st;
  int width = XF_CHART_DEFAULT_WIDTH, height = XF_CHART_DEFAULT_HEIGHT;
  if (a.size && (st = parse_size(cli, a.size, &width, &height)) != XF_EXIT_OK) return st;
  /* A target that may not be replaced is refused before the coordinator is asked. */
  if (xf_file_check_target(a.out, &cli->err) != XF_OK) return xf_cli_fail(cli, cli->err.code);

  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return st;
  Xfed__Envelope *job_answer = NULL;
  xf__job_metrics pg = {0};
  st = query_job(cli, c, a.arg, &job_answer);
  const Xfed__JobInfo *job = NULL;
  if (st == XF_EXIT_OK && !(job = xf__job_pick(cli, job_answer->job_list, a.arg)))
    st = XF_EXIT_ERROR;
  if (st == XF_EXIT_OK) st = xf__job_metrics_fetch(cli, c, a.arg, &pg);
  xf_client_close(c);
  if (st != XF_EXIT_OK) goto out;
  if (pg.n_rows == 0) {
    xf_fail(&cli->err, XF_ENOENT, "job %s has no metrics yet: no round has been reported; "
            "draw it once its first round commits", a.arg);
    st = xf_cli_fail(cli, XF_ENOENT);
    goto out;
  }

  qsort(pg.rows, pg.n_rows, sizeof(*pg.rows), cmp_round);
  size_t n = 0;
  xf_chart_round *rounds = per_round(pg.rows, pg.n_rows, &n);
  if (!rounds) {
    st = xf_cli_fail(cli, XF_ENOMEM);
    goto out;
  }
  const char *name = job->name && *job->name ? job->name : "(unnamed)";
  char title[256], subtitle[256], acc[48] = "", eps[48] = "";
  snprintf(title, sizeof(title), "job %s: %s", a.arg, name);
  if (isfinite(job->test_accuracy))
    snprintf(acc, sizeof(acc), " \xc2\xb7 test accuracy %.4f", job->test_accuracy);
  double spent = NAN, up = 0, down = 0;
  for (size_t i = n; i-- > 0;)
    if (isfinite(rounds[i].epsilon)) {
      spent = rounds[i].epsilon;
      snprintf(eps, sizeof(eps), " \xc2\xb7 \xce\xb5 %.3g spent", spent);
      break;
    }
  for (size_t i = 0; i < n; i++) {
    up += rounds[i].bytes_up;
    down += rounds[i].bytes_down;
  }
  snprintf(subtitle, sizeof(subtitle), "%s \xc2\xb7 %zu of %u rounds reported%s%s",
           job->state ? job->state : "", n, (unsigned)job->rounds, acc, eps);
  xf_chart chart = {.title = title, .subtitle = subtitle, .rounds = rounds, .n_rounds = n,
                    .width = width, .height = height};
  xf_err rc = xf_chart_write(&chart, fmt, a.out, &cli->err);
  xf_free(rounds);
  if (rc != XF_OK) {
    st = xf_cli_fail(cli, rc);
    goto out;
  }
  /* The figures drawn, for a reader that checks them against the other views. */
  if (cli->json)
    xf__job_print_json(json_pack("{s:s,s:s,s:s,s:I,s:i,s:i,s:o,s:o,s:I,s:I}", "path", a.out,
                                 "format", xf_chart_format_name(fmt), "job_id", a.arg, "rounds",
                                 (json_int_t)n, "width", width, "height", height,
                                 "test_accuracy", xf__job_number(job->test_accuracy), "epsilon",
                                 xf__job_number(spent), "bytes_up", (json_int_t)up, "bytes_down",
                                 (json_int_t)down));
  else
    printf("wrote %s (%s, %dx%d): job %s, %zu rounds\n", a.out, xf_chart_format_name(fmt),
           width, height, a.arg, n);
out:
  xf__job_metrics_free(&pg);
  xf_envelope_free(job_answer);
  return st;
}
