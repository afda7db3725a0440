/* SPDX-License-Identifier: Apache-2.0 */
/* What the `xfed job` verbs share: their flags, connecting, failing with the
 * right exit status, and showing a job (cli/cmd_job.c). */
#ifndef XF_CLI_JOB_INTERNAL_H
#define XF_CLI_JOB_INTERNAL_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "net/xfed.pb-c.h"

/* getopt_long codes of the job verbs' own flags (the connection flags are
 * XF_CLIENT_OPT_*). */
enum {
  XF__JOB_OPT_WAIT = 0x2000,
  XF__JOB_OPT_INTERVAL,
  XF__JOB_OPT_CSV,
  XF__JOB_OPT_ROUND,
  XF__JOB_OPT_OUT,
  XF__JOB_OPT_FORMAT,
  XF__JOB_OPT_SIZE
};

/* The flags of every job verb; each verb's option table lists those it takes. */
typedef struct xf__job_args {
  xf_client_flags conn;
  const char *arg; /* the one positional argument: FILE or ID (NULL for list) */
  bool wait, csv;
  double interval_s; /* default 1 */
  bool interval_given;
  long round;        /* 0: latest */
  const char *out, *format;
  const char *size; /* WxH, for job report */
} xf__job_args;

/* Parses argv with opts (which must end with a zero entry) and expects
 * `positional` positional arguments (0 or 1) named `what` in messages; one
 * named "ID" must be a job number. Returns XF_EXIT_OK or the exit status of
 * the usage error it printed. */
int xf__job_parse(xf_cli *cli, int argc, char **argv, const struct option *opts,
                  int positional, const char *what, xf__job_args *a);

/* Who may make a request (docs/protocol.md, "CLI <-> coordinator"). */
typedef enum xf__job_who {
  XF__JOB_ANY_USER = 0,  /* JobQuery, MetricsQuery, ModelQuery */
  XF__JOB_RESEARCHER,    /* JobCancel: researcher or admin */
  XF__JOB_SUBMIT         /* JobSubmit: researcher or admin, and policy may refuse it */
} xf__job_who;

/* Prints the failure rc of a request (cli->err) and returns the exit status.
 * XF_EDENIED is a policy refusal (exit 3) only for a submission by a
 * certificate that may submit; every other XF_EDENIED is the coordinator
 * refusing this certificate (exit 1), and the message says which role the
 * request needs and what the certificate is. */
int xf__job_fail(xf_cli *cli, const xf_client *c, xf_err rc, xf__job_who who);

/* One request and its answer's body, failing as above; the caller frees
 * *answer (xf_envelope_free). */
int xf__job_request(xf_cli *cli, xf_client *c, const Xfed__Envelope *req,
                    Xfed__Envelope__BodyCase want, xf__job_who who, Xfed__Envelope **answer);

/* The job a JobList answer names: the one with job_id id (the first job for
 * id NULL). NULL, after printing an error, when there is none. */
const Xfed__JobInfo *xf__job_pick(xf_cli *cli, const Xfed__JobList *list, const char *id);

/* True for the states a job never leaves: done, failed, cancelled. */
bool xf__job_terminal(const char *state);

/* A job as --json prints it; NULL on allocation failure. */
json_t *xf__job_json(const Xfed__JobInfo *j);

/* Prints v and a newline to stdout, indented; takes the reference. */
void xf__job_print_json(json_t *v);

/* A figure for JSON: null for NaN or infinity, which JSON cannot hold. */
json_t *xf__job_number(double v);

/* A job's metrics, every page of them: the answers (the rows point into
 * them) and every row, in the order they came. */
typedef struct xf__job_metrics {
  Xfed__Envelope **answers;
  size_t n_answers;
  Xfed__MetricsReport__Row **rows;
  size_t n_rows;
} xf__job_metrics;

/* Asks for job's metrics page by page until the coordinator says none
 * remain (cli/cmd_job_metrics.c). Returns XF_EXIT_OK or the exit status it
 * printed; either way the caller frees *out with xf__job_metrics_free. */
int xf__job_metrics_fetch(xf_cli *cli, xf_client *c, const char *job, xf__job_metrics *out);

void xf__job_metrics_free(xf__job_metrics *p);

/* Follows job id, querying every interval_s seconds, until it is done,
 * failed or cancelled: on a terminal one line redrawn in place, else one
 * line per change, on stderr; then the summary on stdout (with --json, the
 * final job). Reconnects after a dropped connection for as long as the
 * timeout allows. Returns XF_EXIT_OK only for done. */
int xf__job_follow(xf_cli *cli, xf_client *c, const char *id, double interval_s);

#endif
