/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed job submit|status|list|watch|cancel`: a researcher's jobs at the
 * coordinator, and what every job verb shares (cli/job_internal.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cli/job_internal.h"
#include "job/jobprogress.h"
#include "job/jobspec.h"
#include "net/frame.h"

/* ---- shared: flags, connecting, failing ------------------------------------------ */

int xf__job_parse(xf_cli *cli, int argc, char **argv, const struct option *opts,
                  int positional, const char *what, xf__job_args *a) {
  memset(a, 0, sizeof(*a));
  a->interval_s = 1.0;
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    int st = xf_client_flag(cli, &a->conn, ch, optarg);
    if (st >= 0) {
      if (st != XF_EXIT_OK) return st;
      continue;
    }
    switch (ch) {
    case XF__JOB_OPT_WAIT: a->wait = true; break;
    case XF__JOB_OPT_CSV: a->csv = true; break;
    case XF__JOB_OPT_OUT: a->out = optarg; break;
    case XF__JOB_OPT_FORMAT: a->format = optarg; break;
    case XF__JOB_OPT_SIZE: a->size = optarg; break;
    case XF__JOB_OPT_INTERVAL:
      if (xf_cli_parse_double(cli, "--interval", optarg, 0.01, 86400, &a->interval_s) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      a->interval_given = true;
      break;
    case XF__JOB_OPT_ROUND:
      if (xf_cli_parse_int(cli, "--round", optarg, 1, XF_JOB_ROUNDS_MAX, &a->round) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  int left = argc - optind;
  if (left < positional) return xf_cli_usage(cli, "%s is required", what);
  if (left > positional) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind + positional]);
  if (positional) {
    a->arg = argv[optind];
    /* A job id is the coordinator's job number in decimal (docs/protocol.md). */
    int64_t id;
    xf_errctx idc = {0};
    if (strcmp(what, "ID") == 0 && xf_job_id_parse(a->arg, &id, &idc) != XF_OK)
      return xf_cli_usage(cli, "%s", idc.msg);
  }
  return XF_EXIT_OK;
}

int xf__job_fail(xf_cli *cli, const xf_client *c, xf_err rc, xf__job_who who) {
  if (rc != XF_EDENIED) return xf_cli_fail(cli, rc);
  xf_pki_role role = xf_client_identity(c)->role;
  bool may_submit = role == XF_PKI_ROLE_RESEARCHER || role == XF_PKI_ROLE_ADMIN;
  if (who == XF__JOB_SUBMIT && may_submit) return xf_cli_fail(cli, rc);
  char msg[sizeof(cli->err.msg)];
  if (who == XF__JOB_ANY_USER)
    snprintf(msg, sizeof(msg), "%.250s; the coordinator refuses this request to %s", cli->err.msg,
             xf_client_identity_uri(c));
  else
    snprintf(msg, sizeof(msg), "%.250s; 'xfed %s' needs a researcher or admin certificate, and "
             "yours is %s", cli->err.msg, cli->name, xf_client_identity_uri(c));
  memcpy(cli->err.msg, msg, sizeof(msg));
  return xf_cli_fail_unauthorized(cli);
}

int xf__job_request(xf_cli *cli, xf_client *c, const Xfed__Envelope *req,
                    Xfed__Envelope__BodyCase want, xf__job_who who, Xfed__Envelope **answer) {
  xf_err rc = xf_client_request(c, req, want, answer, &cli->err);
  return rc == XF_OK ? XF_EXIT_OK : xf__job_fail(cli, c, rc, who);
}

const Xfed__JobInfo *xf__job_pick(xf_cli *cli, const Xfed__JobList *list, const char *id) {
  for (size_t i = 0; i < list->n_jobs; i++)
    if (!id || strcmp(list->jobs[i]->job_id ? list->jobs[i]->job_id : "", id) == 0)
      return list->jobs[i];
  if (id) xf_fail(&cli->err, XF_ENOENT, "the coordinator has no job %s ('xfed job list' "
                  "shows the jobs)", id);
  else xf_fail(&cli->err, XF_EFORMAT, "the coordinator answered with no job");
  xf_cli_fail(cli, cli->err.code);
  return NULL;
}

bool xf__job_terminal(const char *state) {
  return state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
                   strcmp(state, "cancelled") == 0);
}

/* ---- showing a job ------------------------------------------------------------------ */

json_t *xf__job_number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

void xf__job_print_json(json_t *v) {
  if (v) {
    json_dumpf(v, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
  }
  json_decref(v);
}

static const char *str_or_empty(const char *s) { return s ? s : ""; }

json_t *xf__job_json(const Xfed__JobInfo *j) {
  json_t *o = json_pack(
      "{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:I,s:I,s:o,s:s,s:o,s:o,s:s,"
      "s:s}",
      "job_id", str_or_empty(j->job_id), "name", str_or_empty(j->name), "state",
      str_or_empty(j->state), "round", (json_int_t)j->round, "rounds", (json_int_t)j->rounds,
      "rounds_committed", (json_int_t)j->rounds_committed, "attempt", (json_int_t)j->attempt,
      "invited", (json_int_t)j->invited, "reported", (json_int_t)j->reported, "target",
      (json_int_t)j->target, "eval_round", (json_int_t)j->eval_round, "test_accuracy",
      xf__job_number(j->test_accuracy), "test_loss", xf__job_number(j->test_loss), "train_loss",
      xf__job_number(j->train_loss), "bytes_up", (json_int_t)j->bytes_up, "bytes_down",
      (json_int_t)j->bytes_down, "epsilon",
      j->has_epsilon ? xf__job_number(j->epsilon) : json_null(), "message",
      str_or_empty(j->message), "created", xf__job_number(j->created), "updated",
      xf__job_number(j->updated), "submitter", str_or_empty(j->submitter), "model_digest",
      str_or_empty(j->model_digest));
  if (!o) return NULL;
  json_object_set_new(o, "last_invited", json_integer((json_int_t)j->last_invited));
  json_object_set_new(o, "last_reported", json_integer((json_int_t)j->last_reported));
  json_object_set_new(o, "train_loss_kept", json_boolean(j->train_loss_kept));
  json_object_set_new(o, "model_file_digest", json_string(str_or_empty(j->model_file_digest)));
  json_object_set_new(o, "accuracy_note", json_string(str_or_empty(j->accuracy_note)));
  /* Counted in sites; the newest evaluation still coming in, labelled. */
  json_object_set_new(o, "accepted", json_integer((json_int_t)j->accepted));
  json_object_set_new(o, "eval_sites", json_integer((json_int_t)j->eval_sites));
  json_object_set_new(o, "phase", json_string(str_or_empty(j->phase)));
  if (j->partial_round)
    json_object_set_new(o, "partial",
                        json_pack("{s:I,s:I,s:o}", "round", (json_int_t)j->partial_round,
                                  "sites", (json_int_t)j->partial_sites, "test_accuracy",
                                  xf__job_number(j->partial_accuracy)));
  /* The canonical spec as JSON, not as a string inside JSON. */
  json_t *spec = j->spec_json && *j->spec_json ? json_loads(j->spec_json, 0, NULL) : NULL;
  if (spec) json_object_set_new(o, "spec", spec);
  else if (j->spec_json && *j->spec_json) json_object_set_new(o, "spec_json", json_string(j->spec_json));
  return o;
}

/* The round a person counts: the one in progress (or where a failed or
 * cancelled job stopped), and the rounds committed once the job is done
 * (JobInfo.round is then rounds + 1). */
static uint32_t shown_round(const Xfed__JobInfo *j) {
  if (j->state && strcmp(j->state, "done") == 0) return j->rounds_committed;
  /* Past the last round (the final evaluation): the last round. */
  return j->rounds && j->round > j->rounds ? j->rounds : j->round;
}

static void fmt_time(double t, char out[32]) {
  if (!(t > 0) || !isfinite(t)) {
    snprintf(out, 32, "-");
    return;
  }
  time_t tt = (time_t)t;
  struct tm tm;
  if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(out, 32, "%.0f", t);
}

/* 1234567 -> "1.2 MB" (decimal units, as network traffic is counted). */
static void fmt_bytes(uint64_t b, char out[16]) {
  static const char *const unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1000 && u < 5) v /= 1000, u++;
  if (u == 0) snprintf(out, 16, "%" PRIu64 " B", b);
  else snprintf(out, 16, "%.1f %s", v, unit[u]);
}

/* "0.8765", or "-" when there is no figure yet. */
static void fmt_figure(double v, bool have, char out[24]) {
  if (have && isfinite(v)) snprintf(out, 24, "%.4f", v);
  else snprintf(out, 24, "-");
}

/* The last committed round's train loss, or why there is none. */
static void fmt_train_loss(const Xfed__JobInfo *j, char out[24]) {
  if (j->train_loss_kept) snprintf(out, 24, "%s", XF_JOB_NOTE_TRAIN_LOSS_KEPT);
  else fmt_figure(j->train_loss, j->rounds_committed > 0, out);
}

/* The sites of the open attempt, else of the last committed round
 * (job/jobprogress.h); false when there are none to show yet. */
static bool fmt_sites(const Xfed__JobInfo *j, char *out, size_t n) {
  xf_job_sites s = {.invited = j->invited, .accepted = j->accepted, .reported = j->reported,
                    .last_round = j->rounds_committed, .last_invited = j->last_invited,
                    .last_reported = j->last_reported};
  xf_job_sites_text(&s, out, n);
  return j->invited > 0 || j->rounds_committed > 0;
}

static void fmt_epsilon(const Xfed__JobInfo *j, char out[24]) {
  if (j->has_epsilon && isfinite(j->epsilon)) snprintf(out, 24, "%.4g", j->epsilon);
  else snprintf(out, 24, "none");
}

static void print_status(const Xfed__JobInfo *j) {
  char acc[24], tl[24], trl[24], eps[24], up[16], down[16], created[32], updated[32], sites[96];
  fmt_figure(j->test_accuracy, true, acc);
  fmt_figure(j->test_loss, true, tl);
  fmt_train_loss(j, trl);
  fmt_epsilon(j, eps);
  fmt_bytes(j->bytes_up, up);
  fmt_bytes(j->bytes_down, down);
  fmt_time(j->created, created);
  fmt_time(j->updated, updated);
  printf("job         %s (%s)\n", str_or_empty(j->job_id), str_or_empty(j->name));
  printf("state       %s\n", str_or_empty(j->state));
  if (j->message && *j->message) printf("message     %s\n", j->message);
  printf("round       %u/%u, %u committed\n", (unsigned)shown_round(j), (unsigned)j->rounds,
         (unsigned)j->rounds_committed);
  if (j->phase && *j->phase) printf("phase       %s\n", j->phase);
  bool have_sites = fmt_sites(j, sites, sizeof(sites));
  if (j->invited > 0)
    printf("sites       %s (attempt %u; %u close the round early; counted in sites)\n", sites,
           (unsigned)j->attempt, (unsigned)j->target);
  else if (have_sites) printf("sites       %s (counted in sites)\n", sites);
  if (isfinite(j->test_accuracy))
    printf("accuracy    %s of the model of round %u, over its %u evaluating sites (test loss "
           "%s)\n",
           acc, (unsigned)j->eval_round, (unsigned)j->eval_sites, tl);
  else if (j->accuracy_note && *j->accuracy_note)
    printf("accuracy    none: %s\n", j->accuracy_note);
  else printf("accuracy    - (no complete evaluation yet)\n");
  if (j->partial_round && isfinite(j->partial_accuracy))
    printf("partial     %.4f of the model of round %u, %u sites in so far (not complete)\n",
           j->partial_accuracy, (unsigned)j->partial_round, (unsigned)j->partial_sites);
  printf("train loss  %s\n", trl);
  printf("epsilon     %s\n", eps);
  printf("traffic     %s up, %s down\n", up, down);
  if (j->model_digest && *j->model_digest) printf("model       %s\n", j->model_digest);
  if (j->model_file_digest && *j->model_file_digest)
    printf("model file  %s\n", j->model_file_digest);
  if (j->submitter && *j->submitter) printf("submitter   %s\n", j->submitter);
  printf("submitted   %s\n", created);
  printf("updated     %s\n", updated);
}

/* ---- following a job ------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The live line: round, sites, train loss, accuracy, traffic, epsilon, state. */
static void progress_line(const Xfed__JobInfo *j, char *out, size_t n) {
  char acc[24], trl[24], eps[24], up[16], down[16];
  fmt_figure(j->test_accuracy, true, acc);
  fmt_train_loss(j, trl);
  fmt_epsilon(j, eps);
  fmt_bytes(j->bytes_up, up);
  fmt_bytes(j->bytes_down, down);
  char state[48];
  snprintf(state, sizeof(state), "%s%s%s%s", str_or_empty(j->state),
           j->phase && *j->phase ? " (" : "", str_or_empty(j->phase),
           j->phase && *j->phase ? ")" : "");
  /* Sites once an attempt has invited some (counted in sites). */
  char sites[112] = "", counts[96];
  if (fmt_sites(j, counts, sizeof(counts))) snprintf(sites, sizeof(sites), "  sites %s", counts);
  snprintf(out, n,
           "round %u/%u%s  train loss %s  accuracy %s  up %s  down %s  epsilon %s  "
           "%s%s%.200s",
           (unsigned)shown_round(j), (unsigned)j->rounds, sites, trl, acc, up, down, eps, state,
           j->message && *j->message ? ": " : "", str_or_empty(j->message));
}

/* One JobQuery for id: XF_EXIT_OK with *answer, or the exit status. A lost
 * connection is retried until the timeout has passed since it was lost. */
static int follow_query(xf_cli *cli, xf_client *c, const char *id, double interval_s,
                        double timeout_s, Xfed__Envelope **answer) {
  Xfed__JobQuery q = XFED__JOB_QUERY__INIT;
  q.job_id = (char *)id;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
  env.job_query = &q;
  double lost_at = 0;
  for (;;) {
    xf_err rc;
    if (xf_client_is_open(c)) {
      rc = xf_client_request(c, &env, XFED__ENVELOPE__BODY_JOB_LIST, answer, &cli->err);
    } else {
      rc = xf_fail(&cli->err, XF_EIO, "the coordinator closed the connection");
      xf_errctx_peer(&cli->err, xf_client_coordinator(c));
    }
    if (rc == XF_OK) {
      if (lost_at > 0) fprintf(stderr, "%s %s: reconnected\n", cli->prog, cli->name);
      return XF_EXIT_OK;
    }
    /* An answer that is an error, or an error of ours, ends the watch; a
     * connection that is gone is dialed again. */
    if (rc != XF_EIO || xf_client_is_open(c)) return xf__job_fail(cli, c, rc, XF__JOB_ANY_USER);
    if (lost_at == 0) {
      lost_at = now_s();
      if (xf_cli_interactive()) fputc('\n', stderr);
      char line[1200];
      xf_errctx_format(&cli->err, line, sizeof(line));
      fprintf(stderr, "%s %s: %s; reconnecting\n", cli->prog, cli->name, line);
    }
    xf_errctx e;
    xf_errctx_clear(&e);
    if (xf_client_reconnect(c, &e) == XF_OK) continue;
    if (e.code == XF_EDENIED) {
      cli->err = e;
      return xf_cli_fail_unauthorized(cli);
    }
    if (now_s() - lost_at >= timeout_s) {
      cli->err = e;
      return xf_cli_fail(cli, e.code ? e.code : XF_EIO);
    }
    (void)xf_client_sleep(c, (uint32_t)(fmax(interval_s, 1.0) * 1000));
  }
}

int xf__job_follow(xf_cli *cli, xf_client *c, const char *id, double interval_s) {
  bool tty = xf_cli_interactive();
  char last[1024] = "";
  /* A lost coordinator is dialed again for as long as --timeout allows: a
   * restart after a crash is expected to take less. */
  double timeout_s = xf_client_timeout_ms(c) / 1000.0;
  for (;;) {
    Xfed__Envelope *answer = NULL;
    int st = follow_query(cli, c, id, interval_s, timeout_s, &answer);
    if (st != XF_EXIT_OK) {
      if (tty && last[0]) fputc('\n', stderr);
      return st;
    }
    const Xfed__JobInfo *j = xf__job_pick(cli, answer->job_list, id);
    if (!j) {
      xf_envelope_free(answer);
      return XF_EXIT_ERROR;
    }
    char line[1024];
    progress_line(j, line, sizeof(line));
    if (tty) {
      fprintf(stderr, "\r%s\033[K", line);
      fflush(stderr);
    } else if (strcmp(line, last) != 0) {
      fprintf(stderr, "%s\n", line);
    }
    snprintf(last, sizeof(last), "%s", line);
    if (xf__job_terminal(j->state)) {
      if (tty) fputc('\n', stderr);
      bool done = strcmp(j->state, "done") == 0;
      if (cli->json) {
        xf__job_print_json(xf__job_json(j));
      } else if (done) {
        /* "none" where no evaluation counted, as epsilon=none: never "nan",
         * which would read as a NaN taken. */
        char eps[24], acc[24];
        fmt_epsilon(j, eps);
        if (isfinite(j->test_accuracy)) snprintf(acc, sizeof(acc), "%.4f", j->test_accuracy);
        else snprintf(acc, sizeof(acc), "none");
        printf("final accuracy=%s rounds=%u epsilon=%s uplink_bytes=%" PRIu64 "\n", acc,
               (unsigned)j->rounds_committed, eps, j->bytes_up);
      }
      if (!done)
        fprintf(stderr, "%s %s: job %s %s after %u of %u rounds%s%s\n", cli->prog, cli->name,
                id, j->state, (unsigned)j->rounds_committed, (unsigned)j->rounds,
                j->message && *j->message ? ": " : "", str_or_empty(j->message));
      xf_envelope_free(answer);
      return done ? XF_EXIT_OK : XF_EXIT_ERROR;
    }
    xf_envelope_free(answer);
    /* A connection that closes meanwhile is dialed again by the next query. */
    (void)xf_client_sleep(c, (uint32_t)(interval_s * 1000));
  }
}

/* ---- submit ------------------------------------------------------------------------ */

/* Reads the spec as written, at most XF_JOBSPEC_MAX_BYTES. */
static xf_err read_spec(const char *path, char **text, size_t *len, xf_errctx *err) {
  *text = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    xf_fail(err, errno == ENOENT ? XF_ENOENT : XF_EIO, "cannot open the job spec: %s",
            strerror(errno));
    xf_errctx_file(err, path);
    return err ? err->code : XF_EIO;
  }
  char *buf = xf_malloc(XF_JOBSPEC_MAX_BYTES + 1);
  if (!buf) {
    fclose(f);
    return xf_fail(err, XF_ENOMEM, "cannot allocate room for the job spec");
  }
  size_t n = fread(buf, 1, XF_JOBSPEC_MAX_BYTES + 1, f);
  bool bad = ferror(f);
  fclose(f);
  xf_err rc = XF_OK;
  if (bad) rc = xf_fail(err, XF_EIO, "cannot read the job spec (a directory?)");
  else if (n > XF_JOBSPEC_MAX_BYTES)
    rc = xf_fail(err, XF_ERANGE, "a job spec is at most %u bytes", XF_JOBSPEC_MAX_BYTES);
  else if (memchr(buf, '\0', n))
    rc = xf_fail(err, XF_EFORMAT, "the job spec holds a NUL byte; it must be JSON text");
  if (rc != XF_OK) {
    xf_errctx_file(err, path);
    xf_free(buf);
    return rc;
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return XF_OK;
}

static const struct option submit_opts[] = {
    XF_CLIENT_OPTIONS,
    {"wait", no_argument, 0, XF__JOB_OPT_WAIT},
    {"interval", required_argument, 0, XF__JOB_OPT_INTERVAL},
    {0, 0, 0, 0}};

int xf_cmd_job_submit(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, submit_opts, 1, "FILE", &a);
  if (st != XF_EXIT_OK) return st;
  if (a.interval_given && !a.wait) return xf_cli_usage(cli, "--interval goes with --wait");
  /* The spec is checked here, before any connection, and the text sent is
   * the text checked: parsing the file once and sending what was read. */
  char *text = NULL;
  size_t len = 0;
  xf_err rc = read_spec(a.arg, &text, &len, &cli->err);
  xf_jobspec spec;
  if (rc == XF_OK) rc = xf_jobspec_parse_string(text, len, a.arg, &spec, &cli->err);
  if (rc != XF_OK) {
    xf_free(text);
    return xf_cli_fail(cli, rc);
  }
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) {
    xf_free(text);
    return st;
  }
  Xfed__JobSubmit m = XFED__JOB_SUBMIT__INIT;
  m.spec_json = text;
  m.origin = (char *)a.arg;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_SUBMIT;
  env.job_submit = &m;
  Xfed__Envelope *answer = NULL;
  st = xf__job_request(cli, c, &env, XFED__ENVELOPE__BODY_JOB_LIST, XF__JOB_SUBMIT, &answer);
  xf_free(text);
  const Xfed__JobInfo *j = st == XF_EXIT_OK ? xf__job_pick(cli, answer->job_list, NULL) : NULL;
  if (st == XF_EXIT_OK && !j) st = XF_EXIT_ERROR;
  if (j) {
    char id[32];
    snprintf(id, sizeof(id), "%s", str_or_empty(j->job_id));
    if (!cli->json) printf("%s\n", id);
    else if (!a.wait) xf__job_print_json(xf__job_json(j));
    fprintf(stderr, "%s %s: job %s '%s' is %s; follow it with 'xfed job watch %s'\n", cli->prog,
            cli->name, id, str_or_empty(j->name), str_or_empty(j->state), id);
    fflush(stdout);
    if (a.wait) {
      xf_envelope_free(answer);
      answer = NULL;
      st = xf__job_follow(cli, c, id, a.interval_s);
    }
  }
  xf_envelope_free(answer);
  xf_client_close(c);
  return st;
}

/* ---- status, list, watch, cancel ------------------------------------------------------- */

static const struct option query_opts[] = {XF_CLIENT_OPTIONS, {0, 0, 0, 0}};

/* JobQuery{id} into *answer (a list of every job pages: list_pages). */
static int query(xf_cli *cli, xf_client *c, const char *id, Xfed__Envelope **answer) {
  Xfed__JobQuery q = XFED__JOB_QUERY__INIT;
  q.job_id = (char *)(id ? id : "");
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
  env.job_query = &q;
  return xf__job_request(cli, c, &env, XFED__ENVELOPE__BODY_JOB_LIST, XF__JOB_ANY_USER, answer);
}

int xf_cmd_job_status(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, query_opts, 1, "ID", &a);
  if (st != XF_EXIT_OK) return st;
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return st;
  Xfed__Envelope *answer = NULL;
  st = query(cli, c, a.arg, &answer);
  if (st == XF_EXIT_OK) {
    const Xfed__JobInfo *j = xf__job_pick(cli, answer->job_list, a.arg);
    if (!j) st = XF_EXIT_ERROR;
    else if (cli->json) xf__job_print_json(xf__job_json(j));
    else print_status(j);
  }
  xf_envelope_free(answer);
  xf_client_close(c);
  return st;
}

static int cmp_job_number(const void *pa, const void *pb) {
  const Xfed__JobInfo *a = *(const Xfed__JobInfo *const *)pa;
  const Xfed__JobInfo *b = *(const Xfed__JobInfo *const *)pb;
  unsigned long long x = strtoull(str_or_empty(a->job_id), NULL, 10);
  unsigned long long y = strtoull(str_or_empty(b->job_id), NULL, 10);
  return x < y ? -1 : x > y;
}

static void print_list(const Xfed__JobList *list) {
  if (list->n_jobs == 0) {
    printf("no jobs\n");
    return;
  }
  Xfed__JobInfo **jobs = xf_mallocarray(list->n_jobs, sizeof(*jobs));
  if (jobs) {
    memcpy(jobs, list->jobs, list->n_jobs * sizeof(*jobs));
    qsort(jobs, list->n_jobs, sizeof(*jobs), cmp_job_number);
  }
  int wname = 4;
  for (size_t i = 0; i < list->n_jobs; i++) {
    int n = (int)strlen(str_or_empty(list->jobs[i]->name));
    if (n > wname) wname = n;
  }
  printf("%-6s %-*s %-10s %-13s %-9s %-9s %s\n", "ID", wname, "NAME", "STATE", "ROUND",
         "REPORTED", "ACCURACY", "SUBMITTED");
  for (size_t i = 0; i < list->n_jobs; i++) {
    const Xfed__JobInfo *j = jobs ? jobs[i] : list->jobs[i];
    char round[32], sites[32], acc[24], created[32];
    snprintf(round, sizeof(round), "%u/%u", (unsigned)shown_round(j), (unsigned)j->rounds);
    /* The open attempt's, else the last committed round's. */
    if (j->invited > 0)
      snprintf(sites, sizeof(sites), "%u/%u", (unsigned)j->reported, (unsigned)j->invited);
    else if (j->rounds_committed > 0)
      snprintf(sites, sizeof(sites), "%u/%u", (unsigned)j->last_reported,
               (unsigned)j->last_invited);
    else snprintf(sites, sizeof(sites), "-");
    fmt_figure(j->test_accuracy, true, acc);
    fmt_time(j->created, created);
    printf("%-6s %-*s %-10s %-13s %-9s %-9s %s\n", str_or_empty(j->job_id), wname,
           str_or_empty(j->name), str_or_empty(j->state), round, sites, acc, created);
  }
  xf_free(jobs);
}

/* Jobs asked for per page of the list (the coordinator also stops a page
 * before it outgrows one frame). */
#define JOBS_PAGE 200

/* Every job, page after page by id; *answers keep what the list points
 * into (xf_envelope_free each, then xf_free both arrays). */
static int list_pages(xf_cli *cli, xf_client *c, Xfed__JobList *list,
                      Xfed__Envelope ***answers, size_t *n_answers) {
  Xfed__JobList init = XFED__JOB_LIST__INIT;
  *list = init;
  *answers = NULL;
  *n_answers = 0;
  Xfed__JobQuery q = XFED__JOB_QUERY__INIT;
  q.job_id = "";
  q.limit = JOBS_PAGE;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
  env.job_query = &q;
  for (;;) {
    Xfed__Envelope *answer = NULL;
    int st = xf__job_request(cli, c, &env, XFED__ENVELOPE__BODY_JOB_LIST, XF__JOB_ANY_USER,
                             &answer);
    if (st != XF_EXIT_OK) return st;
    const Xfed__JobList *page = answer->job_list;
    Xfed__Envelope **kept = xf_realloc(*answers, (*n_answers + 1) * sizeof(*kept));
    Xfed__JobInfo **jobs =
        kept ? xf_realloc(list->jobs, (list->n_jobs + page->n_jobs + 1) * sizeof(*jobs)) : NULL;
    if (kept) *answers = kept;
    if (jobs) list->jobs = jobs;
    if (!kept || !jobs) {
      xf_envelope_free(answer);
      return xf_cli_fail(cli, XF_ENOMEM);
    }
    (*answers)[(*n_answers)++] = answer;
    if (page->n_jobs) memcpy(list->jobs + list->n_jobs, page->jobs, page->n_jobs * sizeof(*jobs));
    list->n_jobs += page->n_jobs;
    if (!page->more) return XF_EXIT_OK;
    uint64_t last = page->n_jobs ? strtoull(str_or_empty(page->jobs[page->n_jobs - 1]->job_id),
                                            NULL, 10)
                                 : 0;
    if (last <= q.after_id) {
      xf_fail(&cli->err, XF_EFORMAT, "the coordinator's page of jobs did not move past job %llu",
              (unsigned long long)q.after_id);
      return xf_cli_fail(cli, XF_EFORMAT);
    }
    q.after_id = last;
  }
}

int xf_cmd_job_list(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, query_opts, 0, NULL, &a);
  if (st != XF_EXIT_OK) return st;
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return st;
  Xfed__JobList all;
  Xfed__Envelope **answers = NULL;
  size_t n_answers = 0;
  st = list_pages(cli, c, &all, &answers, &n_answers);
  if (st == XF_EXIT_OK) {
    const Xfed__JobList *list = &all;
    if (cli->json) {
      json_t *arr = json_array();
      for (size_t i = 0; arr && i < list->n_jobs; i++)
        json_array_append_new(arr, xf__job_json(list->jobs[i]));
      xf__job_print_json(json_pack("{s:o}", "jobs", arr ? arr : json_array()));
    } else {
      print_list(list);
    }
  }
  for (size_t i = 0; i < n_answers; i++) xf_envelope_free(answers[i]);
  xf_free(answers);
  xf_free(all.jobs);
  xf_client_close(c);
  return st;
}

static const struct option watch_opts[] = {
    XF_CLIENT_OPTIONS, {"interval", required_argument, 0, XF__JOB_OPT_INTERVAL}, {0, 0, 0, 0}};

int xf_cmd_job_watch(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, watch_opts, 1, "ID", &a);
  if (st != XF_EXIT_OK) return st;
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return st;
  st = xf__job_follow(cli, c, a.arg, a.interval_s);
  xf_client_close(c);
  return st;
}

int xf_cmd_job_cancel(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, query_opts, 1, "ID", &a);
  if (st != XF_EXIT_OK) return st;
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return st;
  Xfed__JobCancel m = XFED__JOB_CANCEL__INIT;
  m.job_id = (char *)a.arg;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_CANCEL;
  env.job_cancel = &m;
  Xfed__Envelope *answer = NULL;
  st = xf__job_request(cli, c, &env, XFED__ENVELOPE__BODY_JOB_LIST, XF__JOB_RESEARCHER, &answer);
  if (st == XF_EXIT_OK) {
    const Xfed__JobInfo *j = xf__job_pick(cli, answer->job_list, a.arg);
    if (!j) st = XF_EXIT_ERROR;
    else if (cli->json) xf__job_print_json(xf__job_json(j));
    else
      printf("job %s (%s) is %s after %u of %u rounds\n", a.arg, str_or_empty(j->name),
             str_or_empty(j->state), (unsigned)j->rounds_committed, (unsigned)j->rounds);
  }
  xf_envelope_free(answer);
  xf_client_close(c);
  return st;
}
