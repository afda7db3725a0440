/* SPDX-License-Identifier: Apache-2.0 */
/* The tiered mode (--regions K, --sites N per region): one top coordinator
 * (global, no residency policy), K regional aggregators (xfed-coord --role
 * regional --upstream, region rKK, each listening on its own loopback
 * address 127.0.1.K so that the 4-tuples spread), and K forked copies of
 * this process, the drivers, each running its region's N fake sites against
 * its aggregator as the flat mode runs them (round_sites.c); this process,
 * the orchestrator, makes the PKI (every aggregator's certificate too), runs
 * the user (a job of the "regional" topology, min_sites K * N) and reads
 * each driver's report through a pipe. A round is measured over all drivers:
 * from the first TaskOffer anywhere to the last update acknowledged by its
 * aggregator; the cycle runs to the next round's first TaskOffer (the last
 * round's: to the evaluation's), and so adds the aggregates' way up and the
 * top's commit. CPU and VmHWM are reported per tier: the top, each
 * aggregator (between the job's acceptance and its end) and each driver. The
 * baseline is the site tier's bytes: in each region a client process with
 * its sites' certificates and a server with the coordinator's, all K pairs
 * at once, each repetition started on one barrier and lasting from the first
 * start to the last server having every update. The aggregates' hop (K
 * models down, K aggregates up) is not in it: 1/N of the bytes. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "bench/round_bench.h"
#include "net/conn.h"

/* ---- the tiered mode ------------------------------------------------------------------------ */

/* What a driver saw, as it reports it to the orchestrator. */
typedef struct driver_report {
  bool got;
  double cpu0, cpu1; /* its CPU seconds at its first offer and at the stop */
  long vmhwm_kib, vmrss_kib;
  int evals;
  double t_first_eval;
  double t_dial, t_ready; /* dialing began; every site had announced itself */
  round_times *rt;        /* rounds + 2 entries */
} driver_report;

struct tier {
  int k; /* regions */
  pid_t regional[REGIONS_MAX], driver[REGIONS_MAX];
  int regional_port[REGIONS_MAX];
  char regional_log[REGIONS_MAX][SUB_PATH_MAX];
  int ctl[REGIONS_MAX], report[REGIONS_MAX]; /* to each driver, from it */
  bool ready[REGIONS_MAX];
  driver_report dr[REGIONS_MAX];
  pid_t top;
  double t_accepted, t_done;
  double top_cpu0, top_cpu1, regional_cpu0[REGIONS_MAX], regional_cpu1[REGIONS_MAX];
  double top_cpu_total;
  long top_vmhwm, top_vmrss, regional_vmhwm[REGIONS_MAX], regional_vmrss[REGIONS_MAX];
  int top_exit, regional_exit[REGIONS_MAX];
};

/* A driver: every site of its region has sent its SiteAnnounce. */
void xf_rb_driver_ready(bench *b) {
  if (b->ready_sent) return;
  b->ready_sent = true;
  b->t_ready = xf_bench_now();
  if (dprintf(b->report_fd, "ready %.9f %.9f\n", b->t_dial, b->t_ready) < 0)
    xf_rb_bench_fail(b, "cannot tell the orchestrator");
}

/* A driver's report, one line: "ok CPU0 CPU1 VMHWM VMRSS EVALS T_EVAL R" and
 * per round "FIRST_OFFER LAST_MODEL LAST_FINAL_ACK OFFERS ACKS MAX_ATTEMPT",
 * or "fail WHY". */
static void driver_report_send(bench *b) {
  const bench_opts *o = b->o;
  if (!xf_rb_check_run(b)) b->failed = true;
  if (b->failed) {
    dprintf(b->report_fd, "fail %s\n", b->why);
    return;
  }
  size_t cap = (size_t)o->rounds * 128 + 256, at = 0;
  char *line = xf_malloc(cap);
  if (!line) {
    dprintf(b->report_fd, "fail out of memory\n");
    return;
  }
  at += (size_t)snprintf(line + at, cap - at, "ok %.6f %.6f %ld %ld %d %.9f %u",
                         b->self_cpu_first_offer, b->self_cpu_done, b->vmhwm_kib, b->vmrss_kib,
                         b->evals, b->t_first_eval, (unsigned)o->rounds);
  for (uint32_t r = 1; r <= o->rounds; r++) {
    const round_times *t = &b->rt[r];
    at += (size_t)snprintf(line + at, cap - at, " %.9f %.9f %.9f %d %d %u", t->first_offer,
                           t->last_model, t->last_final_ack, t->offers, t->final_acks,
                           (unsigned)t->max_attempt);
  }
  snprintf(line + at, cap - at, "\n");
  if (!xf_rb_write_all(b->report_fd, line, strlen(line))) b->failed = true;
  xf_free(line);
}

/* A driver: the orchestrator writes to ctl_fd once the job is done. The
 * driver reports and keeps its connections until its aggregator closes
 * them (it is stopped next), so that no site leaves a running aggregator. */
void xf_rb_driver_tick(bench *b) {
  if (b->stopping) return;
  struct pollfd pfd = {.fd = b->ctl_fd, .events = POLLIN};
  if (poll(&pfd, 1, 0) <= 0) return;
  char c;
  ssize_t got = read(b->ctl_fd, &c, 1);
  b->t_done = xf_bench_now();
  b->self_cpu_done = xf_rb_self_cpu_s();
  b->vmhwm_kib = xf_rb_proc_status_kib(getpid(), "VmHWM");
  b->vmrss_kib = xf_rb_proc_status_kib(getpid(), "VmRSS");
  if (got != 1) {
    xf_rb_bench_fail(b, "the orchestrator went away");
    return;
  }
  driver_report_send(b);
  b->stopping = true;
  b->stop_deadline = xf_bench_now() + 60;
  xf_rb_maybe_end_loop(b);
}

/* One region's fake sites, in a forked child: returns its exit status. */
static int driver_main(const bench *parent, int k, int port, int ctl_fd, int report_fd) {
  bench d;
  memset(&d, 0, sizeof(d));
  d.o = parent->o;
  d.p = parent->p;
  d.region = k;
  xf_rb_region_name(k, d.region_label, sizeof(d.region_label));
  xf_rb_region_host(k, d.host, sizeof(d.host));
  d.port = port;
  d.nsites = parent->o->sites;
  d.driver = true;
  d.ctl_fd = ctl_fd;
  d.report_fd = report_fd;
  d.model_len = parent->model_len;
  d.n_params = parent->n_params;
  d.delta = parent->delta;
  d.delta_digest = parent->delta_digest;
  d.coord_exit = -1;
  d.sites = xf_calloc((size_t)d.nsites, sizeof(*d.sites));
  d.rt = xf_calloc(d.o->rounds + 2, sizeof(*d.rt));
  if (!d.sites || !d.rt) {
    dprintf(report_fd, "fail out of memory\n");
    return 1;
  }
  xf_rb_bench = &d;
  bool ok = xf_rb_run_rounds(&d);
  /* A failure before the stop is said here; one after it, in the report. */
  if (!ok && d.t_done == 0) dprintf(report_fd, "fail %s\n", d.why);
  return ok ? 0 : 1;
}

/* The regional aggregator of region k, listening on its own loopback
 * address, dialing the top coordinator at top_port. */
static pid_t spawn_regional(const bench_opts *o, const bench_paths *p, tier *t, int k,
                            int top_port, char *port_file, size_t port_file_n) {
  char region[16], agg[32], host[32], cert[PATH_MAX], key[PATH_MAX];
  char state[SUB_PATH_MAX], cfg[SUB_PATH_MAX], listen[64], upstream[64];
  xf_rb_region_name(k, region, sizeof(region));
  xf_rb_agg_name(k, agg, sizeof(agg));
  xf_rb_region_host(k, host, sizeof(host));
  xf_rb_cert_paths(p, agg, cert, key);
  snprintf(state, sizeof(state), "%s/%s", xf_rb_tmp, agg);
  snprintf(cfg, sizeof(cfg), "%s/%s.json", xf_rb_tmp, agg);
  snprintf(port_file, port_file_n, "%s/%s.port", xf_rb_tmp, agg);
  snprintf(t->regional_log[k], sizeof(t->regional_log[k]), "%s/%s.log", xf_rb_tmp, agg);
  snprintf(listen, sizeof(listen), "%s:0", host);
  snprintf(upstream, sizeof(upstream), "127.0.0.1:%d", top_port);
  if (!xf_rb_write_coord_config(cfg, (unsigned)o->sites + 64u, true)) return -1;
  char *argv[] = {(char *)o->coord, "--role", "regional", "--region", region, "--upstream",
                  upstream, "--cert", cert, "--key", key, "--ca", (char *)p->ca, "--crl",
                  (char *)p->crl, "--state", state, "--listen", listen, "--port-file",
                  port_file, "--config", cfg, NULL};
  return xf_rb_spawn_daemon(o->coord, argv, t->regional_log[k]);
}

/* Exit status of pid as a number (128 + signal when killed). */
static int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The orchestrator's tick: drivers' "ready" lines, and every child still
 * running. */
void xf_rb_tier_tick(bench *b) {
  tier *t = b->tier;
  char line[256];
  for (int k = 0; k < t->k; k++) {
    if (t->ready[k]) continue;
    struct pollfd pfd = {.fd = t->report[k], .events = POLLIN};
    if (poll(&pfd, 1, 0) <= 0) continue;
    if (!xf_rb_read_line(t->report[k], line, sizeof(line), 5)) {
      xf_rb_bench_fail(b, "driver %d said nothing it could read", k + 1);
      return;
    }
    if (sscanf(line, "ready %lf %lf", &t->dr[k].t_dial, &t->dr[k].t_ready) == 2) {
      t->ready[k] = true;
      continue;
    }
    line[strcspn(line, "\n")] = '\0';
    xf_rb_bench_fail(b, "driver %d: %s", k + 1, strncmp(line, "fail ", 5) == 0 ? line + 5 : line);
    return;
  }
  int status;
  if (waitpid(t->top, &status, WNOHANG) == t->top) {
    xf_rb_children[CHILD_COORD] = 0;
    t->top = 0;
    xf_rb_bench_fail(b, "the top coordinator exited during the run (status %d)", exit_code(status));
    return;
  }
  for (int k = 0; k < t->k; k++) {
    if (t->regional[k] > 0 && waitpid(t->regional[k], &status, WNOHANG) == t->regional[k]) {
      xf_rb_children[CHILD_REGIONAL(k)] = 0;
      t->regional[k] = 0;
      xf_rb_bench_fail(b, "the regional aggregator agg-r%02d exited during the run (status %d)",
                       k + 1, exit_code(status));
      xf_rb_print_log_tail(t->regional_log[k]);
      return;
    }
    if (t->driver[k] > 0 && waitpid(t->driver[k], &status, WNOHANG) == t->driver[k]) {
      xf_rb_children[CHILD_DRIVER(k)] = 0;
      t->driver[k] = 0;
      char why[512] = "";
      if (xf_rb_read_line(t->report[k], why, sizeof(why), 1)) why[strcspn(why, "\n")] = '\0';
      xf_rb_bench_fail(b, "driver %d exited during the run (status %d): %s", k + 1,
                       exit_code(status), strncmp(why, "fail ", 5) == 0 ? why + 5 : why);
      return;
    }
  }
}

bool xf_rb_tier_all_ready(bench *b) {
  for (int k = 0; k < b->tier->k; k++)
    if (!b->tier->ready[k]) return false;
  return true;
}

/* The top coordinator took the job: the CPU of the job starts here. */
void xf_rb_tier_accepted(bench *b) {
  tier *t = b->tier;
  t->t_accepted = xf_bench_now();
  t->top_cpu0 = xf_rb_proc_cpu_s(t->top);
  for (int k = 0; k < t->k; k++) t->regional_cpu0[k] = xf_rb_proc_cpu_s(t->regional[k]);
}

/* The job is done: every daemon's CPU and peak memory, then the drivers
 * are told to report. */
void xf_rb_tier_done(bench *b) {
  tier *t = b->tier;
  t->t_done = xf_bench_now();
  t->top_cpu1 = xf_rb_proc_cpu_s(t->top);
  t->top_vmhwm = xf_rb_proc_status_kib(t->top, "VmHWM");
  t->top_vmrss = xf_rb_proc_status_kib(t->top, "VmRSS");
  for (int k = 0; k < t->k; k++) {
    t->regional_cpu1[k] = xf_rb_proc_cpu_s(t->regional[k]);
    t->regional_vmhwm[k] = xf_rb_proc_status_kib(t->regional[k], "VmHWM");
    t->regional_vmrss[k] = xf_rb_proc_status_kib(t->regional[k], "VmRSS");
  }
  for (int k = 0; k < t->k; k++)
    if (!xf_rb_write_all(t->ctl[k], "s", 1))
      xf_rb_bench_fail(b, "cannot tell driver %d the job is done", k + 1);
  b->stopping = true;
  b->stop_deadline = xf_bench_now() + 15;
  if (b->user.conn) xf_conn_close(b->user.conn);
  xf_rb_maybe_end_loop(b);
}

/* Reads driver k's report line; false with why. */
static bool tier_read_report(tier *t, int k, const bench_opts *o, char *why, size_t why_n) {
  size_t cap = (size_t)o->rounds * 128 + 256;
  char *line = xf_malloc(cap);
  driver_report *d = &t->dr[k];
  d->rt = xf_calloc(o->rounds + 2, sizeof(*d->rt));
  bool ok = false;
  if (!line || !d->rt) {
    snprintf(why, why_n, "out of memory");
    goto out;
  }
  if (!xf_rb_read_line(t->report[k], line, cap, o->timeout_s)) {
    snprintf(why, why_n, "driver %d sent no report", k + 1);
    goto out;
  }
  line[strcspn(line, "\n")] = '\0';
  if (strncmp(line, "ok ", 3) != 0) {
    snprintf(why, why_n, "driver %d: %.400s", k + 1, strncmp(line, "fail ", 5) ? line : line + 5);
    goto out;
  }
  char *at = line + 3;
  unsigned rounds = 0;
  int used = 0;
  if (sscanf(at, "%lf %lf %ld %ld %d %lf %u%n", &d->cpu0, &d->cpu1, &d->vmhwm_kib, &d->vmrss_kib,
             &d->evals, &d->t_first_eval, &rounds, &used) != 7 ||
      rounds != o->rounds) {
    snprintf(why, why_n, "driver %d: a report that does not read: %.300s", k + 1, line);
    goto out;
  }
  at += used;
  for (uint32_t r = 1; r <= o->rounds; r++) {
    round_times *rt = &d->rt[r];
    if (sscanf(at, "%lf %lf %lf %d %d %u%n", &rt->first_offer, &rt->last_model,
               &rt->last_final_ack, &rt->offers, &rt->final_acks, &rt->max_attempt, &used) != 6) {
      snprintf(why, why_n, "driver %d: round %u of its report does not read", k + 1, (unsigned)r);
      goto out;
    }
    at += used;
  }
  d->got = ok = true;
out:
  xf_free(line);
  return ok;
}

/* SIGTERM to pid, then its exit status within 15 s; -1 when it did not exit. */
static int stop_child(pid_t pid, int slot) {
  if (pid <= 0) return -1;
  kill(pid, SIGTERM);
  int status = 0;
  double until = xf_bench_now() + 15;
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && xf_bench_now() < until) xf_rb_sleep_ms(5);
  if (w != pid) return -1;
  xf_rb_children[slot] = 0;
  return exit_code(status);
}

/* Waits up to timeout_s for a driver to exit; its status, or -1. */
static int wait_child(pid_t pid, int slot, double timeout_s) {
  if (pid <= 0) return -1;
  int status = 0;
  double until = xf_bench_now() + timeout_s;
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && xf_bench_now() < until) xf_rb_sleep_ms(5);
  if (w != pid) return -1;
  xf_rb_children[slot] = 0;
  return exit_code(status);
}

/* The tiered baseline: in each region a client process with that region's
 * sites' certificates and a server with the coordinator's, on the region's
 * loopback address, all regions at once. Every repetition starts in every
 * region on one go from here and lasts from the first start to the last
 * server having every update: the site tier's bytes, over as many TLS
 * connections, with as many processes on each side as the tiered job has. */
static bool run_tier_baseline(const bench_opts *o, const bench_paths *p, size_t down_len,
                              size_t up_len, int reps, double *times, double *cpu, char *why,
                              size_t why_n) {
  int K = o->regions;
  int sync[REGIONS_MAX][2], go[REGIONS_MAX][2], res[REGIONS_MAX][2];
  pid_t pid[REGIONS_MAX];
  bool ok = false;
  char line[1024];
  for (int k = 0; k < K; k++) {
    sync[k][0] = sync[k][1] = go[k][0] = go[k][1] = res[k][0] = res[k][1] = -1;
    pid[k] = 0;
  }
  for (int k = 0; k < K; k++)
    if (pipe(sync[k]) != 0 || pipe(go[k]) != 0 || pipe(res[k]) != 0) {
      snprintf(why, why_n, "pipe: %s", strerror(errno));
      goto out;
    }
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  for (int k = 0; k < K; k++) {
    pid[k] = fork();
    if (pid[k] < 0) {
      snprintf(why, why_n, "fork: %s", strerror(errno));
      goto out;
    }
    if (pid[k] == 0) {
      xf_rb_forget_parent_state(parent);
      for (int j = 0; j < K; j++) {
        if (j == k) continue;
        close(sync[j][0]), close(sync[j][1]), close(go[j][0]), close(go[j][1]);
        close(res[j][0]), close(res[j][1]);
      }
      close(sync[k][0]), close(go[k][1]), close(res[k][0]);
      char host[32], w[600] = "";
      xf_rb_region_host(k, host, sizeof(host));
      tls_plan plan = {.region = k, .host = host, .sync_fd = sync[k][1], .go_fd = go[k][0]};
      double *local = xf_calloc((size_t)reps, sizeof(double)), c = 0;
      bool fine = local && xf_rb_run_tls_baseline(o, p, &plan, down_len, up_len, reps, local, &c, w,
                                                  sizeof(w));
      if (fine) dprintf(res[k][1], "ok cpu=%.6f\n", c);
      else dprintf(res[k][1], "fail %s\n", w[0] ? w : "out of memory");
      _exit(fine ? 0 : 1);
    }
    xf_rb_children[CHILD_TLS_CLIENT(k)] = pid[k];
    close(sync[k][1]), close(go[k][0]), close(res[k][1]);
    sync[k][1] = go[k][0] = res[k][1] = -1;
  }
  for (int k = 0; k < K; k++)
    if (!xf_rb_read_line(sync[k][0], line, sizeof(line), o->timeout_s) ||
        strncmp(line, "ready", 5)) {
      snprintf(why, why_n, "region %d's baseline did not start", k + 1);
      goto out;
    }
  for (int rep = 0; rep < reps; rep++) {
    for (int k = 0; k < K; k++)
      if (!xf_rb_write_all(go[k][1], "go\n", 3)) {
        snprintf(why, why_n, "region %d's baseline server is gone", k + 1);
        goto out;
      }
    double t0 = INFINITY, t1 = 0;
    for (int k = 0; k < K; k++) {
      double a, b;
      if (!xf_rb_read_line(sync[k][0], line, sizeof(line), o->timeout_s) ||
          sscanf(line, "%lf %lf", &a, &b) != 2) {
        snprintf(why, why_n, "region %d's baseline repetition %d did not end", k + 1, rep + 1);
        goto out;
      }
      t0 = a < t0 ? a : t0;
      t1 = b > t1 ? b : t1;
    }
    times[rep] = t1 - t0;
  }
  *cpu = 0;
  for (int k = 0; k < K; k++) {
    if (!xf_rb_read_line(res[k][0], line, sizeof(line), o->timeout_s)) {
      snprintf(why, why_n, "region %d's baseline reported nothing", k + 1);
      goto out;
    }
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "ok cpu=", 7) != 0) {
      snprintf(why, why_n, "region %d: %.400s", k + 1, line);
      goto out;
    }
    *cpu += strtod(line + 7, NULL);
  }
  ok = true;
out:
  for (int k = 0; k < K; k++) {
    if (!ok && res[k][0] >= 0 && !why[0] && xf_rb_read_line(res[k][0], line, sizeof(line), 1))
      snprintf(why, why_n, "region %d: %.400s", k + 1, line);
    for (int e = 0; e < 2; e++) {
      if (sync[k][e] >= 0) close(sync[k][e]);
      if (go[k][e] >= 0) close(go[k][e]);
      if (res[k][e] >= 0) close(res[k][e]);
    }
    if (pid[k] > 0 && (!ok || wait_child(pid[k], CHILD_TLS_CLIENT(k), 15) != 0)) {
      ok = false;
      kill(pid[k], SIGKILL);
      waitpid(pid[k], NULL, 0);
    }
    xf_rb_children[CHILD_TLS_CLIENT(k)] = 0;
  }
  if (!ok && !why[0]) snprintf(why, why_n, "a region's baseline client did not exit cleanly");
  return ok;
}

/* Max and median of n values (v is left as it was). */
static void max_median(const double *v, int n, double *max, double *med) {
  double s[REGIONS_MAX];
  memcpy(s, v, (size_t)n * sizeof(double));
  *med = xf_rb_median(s, (size_t)n);
  *max = s[n - 1];
}

/* The rounds as every driver saw them together: first offer of any site,
 * last model and last acknowledged update of any, counts summed; false
 * with why unless every round had every site in its first attempt and
 * every site evaluated the final model. */
static bool tier_merge(bench *b, tier *t, char *why, size_t why_n) {
  const bench_opts *o = b->o;
  int all = o->sites * t->k;
  b->evals = 0;
  b->t_first_eval = INFINITY;
  for (uint32_t r = 1; r <= o->rounds; r++) {
    round_times *m = &b->rt[r];
    memset(m, 0, sizeof(*m));
    m->first_offer = INFINITY;
    for (int k = 0; k < t->k; k++) {
      const round_times *d = &t->dr[k].rt[r];
      m->first_offer = d->first_offer < m->first_offer ? d->first_offer : m->first_offer;
      m->last_model = d->last_model > m->last_model ? d->last_model : m->last_model;
      m->last_final_ack = d->last_final_ack > m->last_final_ack ? d->last_final_ack
                                                                 : m->last_final_ack;
      m->offers += d->offers;
      m->final_acks += d->final_acks;
      m->max_attempt = d->max_attempt > m->max_attempt ? d->max_attempt : m->max_attempt;
    }
    if (m->offers != all || m->final_acks != all || m->max_attempt != 1) {
      snprintf(why, why_n, "round %u: %d offers, %d updates delivered, attempt %u (want %d, %d, 1)",
               (unsigned)r, m->offers, m->final_acks, (unsigned)m->max_attempt, all, all);
      return false;
    }
  }
  for (int k = 0; k < t->k; k++) {
    b->evals += t->dr[k].evals;
    if (t->dr[k].t_first_eval < b->t_first_eval) b->t_first_eval = t->dr[k].t_first_eval;
  }
  if (b->evals != all) {
    snprintf(why, why_n, "%d of %d sites were asked for the final evaluation", b->evals, all);
    return false;
  }
  return true;
}

static void print_json_long_list(const long *v, int n) {
  printf("[");
  for (int i = 0; i < n; i++) printf("%s%ld", i ? ", " : "", v[i]);
  printf("]");
}

/* The tiered run's table and JSON line. */
static void print_tier_report(const bench *b, const tier *t, const double *tls_times,
                              double tls_cpu, double hash_gbps, double t_pki, double load_start,
                              long orch_vmhwm) {
  const bench_opts *o = b->o;
  uint32_t R = o->rounds;
  int K = t->k;
  size_t reps = (size_t)o->tls_reps, up_len = b->n_params * 4;
  double round_s[1000], down_s[1000], cycle_s[1000], sorted[1100];
  for (uint32_t r = 1; r <= R; r++) {
    round_s[r - 1] = b->rt[r].last_final_ack - b->rt[r].first_offer;
    down_s[r - 1] = b->rt[r].last_model - b->rt[r].first_offer;
    double next = r < R ? b->rt[r + 1].first_offer : b->t_first_eval;
    cycle_s[r - 1] = next - b->rt[r].first_offer;
  }
  memcpy(sorted, round_s, R * sizeof(double));
  double round_med = xf_rb_median(sorted, R), round_min = sorted[0], round_max = sorted[R - 1];
  memcpy(sorted, down_s, R * sizeof(double));
  double down_med = xf_rb_median(sorted, R);
  memcpy(sorted, cycle_s, R * sizeof(double));
  double cycle_med = xf_rb_median(sorted, R);
  memcpy(sorted, tls_times, reps * sizeof(double));
  double tls_med = xf_rb_median(sorted, reps), tls_min = sorted[0], tls_max = sorted[reps - 1];
  double job_s = t->t_done - t->t_accepted;
  double reg_cpu[REGIONS_MAX], reg_hwm[REGIONS_MAX], drv_cpu[REGIONS_MAX], drv_hwm[REGIONS_MAX];
  long reg_hwm_l[REGIONS_MAX], drv_hwm_l[REGIONS_MAX];
  double connect_s = 0;
  for (int k = 0; k < K; k++) {
    reg_cpu[k] = t->regional_cpu1[k] - t->regional_cpu0[k];
    reg_hwm[k] = (double)(reg_hwm_l[k] = t->regional_vmhwm[k]);
    drv_cpu[k] = t->dr[k].cpu1 - t->dr[k].cpu0;
    drv_hwm[k] = (double)(drv_hwm_l[k] = t->dr[k].vmhwm_kib);
    double c = t->dr[k].t_ready - t->dr[k].t_dial;
    connect_s = c > connect_s ? c : connect_s;
  }
  double first_dial = INFINITY;
  for (int k = 0; k < K; k++) first_dial = t->dr[k].t_dial < first_dial ? t->dr[k].t_dial : first_dial;
  double accept_s = t->t_accepted - first_dial;
  double reg_cpu_max, reg_cpu_med, reg_hwm_max, reg_hwm_med, drv_cpu_max, drv_cpu_med,
      drv_hwm_max, drv_hwm_med;
  max_median(reg_cpu, K, &reg_cpu_max, &reg_cpu_med);
  max_median(reg_hwm, K, &reg_hwm_max, &reg_hwm_med);
  max_median(drv_cpu, K, &drv_cpu_max, &drv_cpu_med);
  max_median(drv_hwm, K, &drv_hwm_max, &drv_hwm_med);
  double top_cpu = t->top_cpu1 - t->top_cpu0;
  long max_hwm = t->top_vmhwm;
  if ((long)reg_hwm_max > max_hwm) max_hwm = (long)reg_hwm_max;
  if ((long)drv_hwm_max > max_hwm) max_hwm = (long)drv_hwm_max;
  if (orch_vmhwm > max_hwm) max_hwm = orch_vmhwm;
  double load_end = xf_rb_load_1min();
  char cpu[256];
  xf_bench_cpu_model(cpu, sizeof(cpu));
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

  printf("round overhead, tiered: %s, %d regions x %d sites = %d sites, %u rounds, %zu parameters: "
         "model file %zu B down, update %zu B up per site\n",
         o->model, K, o->sites, K * o->sites, (unsigned)R, b->n_params, b->model_len, up_len);
  printf("| round | TaskOffer to last model received | TaskOffer to last update acked by its "
         "aggregator (round) | TaskOffer to next TaskOffer (the last: to the evaluation's) |\n"
         "|---|---|---|---|\n");
  for (uint32_t r = 1; r <= R; r++)
    printf("| %u | %.3f s | %.3f s | %.3f s |\n", (unsigned)r, down_s[r - 1], round_s[r - 1],
           cycle_s[r - 1]);
  printf("TLS alone, the site tier's bytes over as many connections, %d servers and %d client "
         "processes at once: median %.3f s (%.3f-%.3f) over %zu repetitions; %.3f CPU s per "
         "repetition\n",
         K, K, tls_med, tls_min, tls_max, reps, tls_cpu / (double)reps);
  printf("median round %.3f s (%.3f-%.3f), ratio to TLS alone %.2f; median cycle %.3f s, "
         "ratio %.2f\n",
         round_med, round_min, round_max, round_med / tls_med, cycle_med, cycle_med / tls_med);
  printf("connect: every site of a driver announced %.1f s after it began dialing (slowest "
         "driver); the job accepted %.1f s after the first dial\n",
         connect_s, accept_s);
  printf("| tier | processes | VmHWM, MiB (max / median) | CPU s over the %.1f s job (max / "
         "median) | CPU s per round (max) |\n|---|---|---|---|---|\n",
         job_s);
  printf("| top coordinator | 1 | %.1f | %.2f | %.3f |\n", (double)t->top_vmhwm / 1024, top_cpu,
         top_cpu / R);
  printf("| regional aggregators | %d | %.1f / %.1f | %.2f / %.2f | %.3f |\n", K,
         reg_hwm_max / 1024, reg_hwm_med / 1024, reg_cpu_max, reg_cpu_med, reg_cpu_max / R);
  printf("| site drivers (%d sites each) | %d | %.1f / %.1f | %.2f / %.2f | %.3f |\n", o->sites,
         K, drv_hwm_max / 1024, drv_hwm_med / 1024, drv_cpu_max, drv_cpu_med, drv_cpu_max / R);
  printf("orchestrator (PKI, the user): VmHWM %.1f MiB; largest VmHWM of any process %.1f MiB\n",
         (double)orch_vmhwm / 1024, (double)max_hwm / 1024);
  printf("BLAKE2b on this machine: %.2f GB/s; PKI for %d sites: %.1f s; %s, %ld CPUs; "
         "load average %.2f at the start, %.2f at the end\n",
         hash_gbps, K * o->sites, t_pki, cpu, ncpu, load_start, load_end);

  printf("{\"bench\": \"round\", \"mode\": \"tiered\", \"model\": \"%s\", \"regions\": %d, "
         "\"sites_per_region\": %d, \"sites\": %d, \"rounds\": %u, \"params\": %zu, "
         "\"model_bytes\": %zu, \"update_bytes\": %zu, \"round_s\": ",
         o->model, K, o->sites, K * o->sites, (unsigned)R, b->n_params, b->model_len, up_len);
  xf_rb_print_json_list(round_s, R);
  printf(", \"round_median_s\": %.6f, \"download_median_s\": %.6f, \"cycle_s\": ", round_med,
         down_med);
  xf_rb_print_json_list(cycle_s, R);
  printf(", \"cycle_median_s\": %.6f, \"tls_s\": ", cycle_med);
  xf_rb_print_json_list(tls_times, reps);
  printf(", \"tls_median_s\": %.6f, \"tls_cpu_per_rep_s\": %.4f, \"ratio\": %.4f, "
         "\"cycle_ratio\": %.4f, \"connect_s\": %.3f, \"accept_s\": %.3f, \"job_s\": %.3f, ",
         tls_med, tls_cpu / (double)reps, round_med / tls_med, cycle_med / tls_med, connect_s,
         accept_s, job_s);
  printf("\"top_vmhwm_kib\": %ld, \"top_vmrss_kib\": %ld, \"top_cpu_s\": %.3f, "
         "\"top_cpu_total_s\": %.3f, \"top_exit\": %d, ",
         t->top_vmhwm, t->top_vmrss, top_cpu, t->top_cpu_total, t->top_exit);
  printf("\"regional_vmhwm_kib\": ");
  print_json_long_list(reg_hwm_l, K);
  printf(", \"regional_vmhwm_kib_max\": %.0f, \"regional_vmhwm_kib_median\": %.0f, "
         "\"regional_cpu_s\": ",
         reg_hwm_max, reg_hwm_med);
  xf_rb_print_json_list(reg_cpu, (size_t)K);
  printf(", \"regional_cpu_s_max\": %.3f, \"regional_cpu_s_median\": %.3f, \"driver_vmhwm_kib\": ",
         reg_cpu_max, reg_cpu_med);
  print_json_long_list(drv_hwm_l, K);
  printf(", \"driver_vmhwm_kib_max\": %.0f, \"driver_vmhwm_kib_median\": %.0f, "
         "\"driver_cpu_s\": ",
         drv_hwm_max, drv_hwm_med);
  xf_rb_print_json_list(drv_cpu, (size_t)K);
  printf(", \"driver_cpu_s_max\": %.3f, \"driver_cpu_s_median\": %.3f, "
         "\"orchestrator_vmhwm_kib\": %ld, \"max_vmhwm_kib\": %ld, \"pki_s\": %.3f, ",
         drv_cpu_max, drv_cpu_med, orch_vmhwm, max_hwm, t_pki);
  printf("\"blake2b_gbps\": %.3f, \"cpu\": \"%s\", \"ncpu\": %ld, \"load_start\": %.2f, "
         "\"load_end\": %.2f}\n",
         hash_gbps, cpu, ncpu, load_start, load_end);
  fflush(stdout);
}

/* The tiered mode, from the federation made and the model known: returns
 * the exit status. */
int xf_rb_run_tiered(const bench_opts *o, const bench_paths *p, bench *b, double t_pki,
                     double load_start) {
  int K = o->regions, rc = 1;
  tier *t = xf_calloc(1, sizeof(*t));
  size_t up_len = b->n_params * 4;
  int tls_before = o->tls_reps / 2, tls_after = o->tls_reps - tls_before;
  double *tls_times = xf_calloc((size_t)o->tls_reps, sizeof(double));
  double tls_cpu = 0, tls_cpu_after = 0;
  char why[1200] = "";
  if (!t || !tls_times) {
    fprintf(stderr, "xfed-bench-round: out of memory\n");
    goto out;
  }
  t->k = K;
  for (int k = 0; k < K; k++) t->ctl[k] = t->report[k] = -1;
  if (tls_before > 0 && !run_tier_baseline(o, p, b->model_len, up_len, tls_before, tls_times,
                                           &tls_cpu, why, sizeof(why))) {
    fprintf(stderr, "xfed-bench-round: TLS baseline: %s\n", why);
    goto out;
  }

  /* The top coordinator, then each region's aggregator dialing it. */
  if (!xf_rb_write_coord_config(p->config, (unsigned)K + 64u, true)) {
    fprintf(stderr, "xfed-bench-round: cannot write %s: %s\n", p->config, strerror(errno));
    goto out;
  }
  t->top = xf_rb_spawn_coord(o, p);
  if (t->top < 0) {
    fprintf(stderr, "xfed-bench-round: fork: %s\n", strerror(errno));
    goto out;
  }
  xf_rb_children[CHILD_COORD] = t->top;
  int top_port = xf_rb_wait_port(t->top, CHILD_COORD, p->port, 30);
  if (!top_port) {
    xf_rb_print_log_tail(p->log);
    goto out;
  }
  char port_file[REGIONS_MAX][SUB_PATH_MAX];
  for (int k = 0; k < K; k++) {
    t->regional[k] = spawn_regional(o, p, t, k, top_port, port_file[k], sizeof(port_file[k]));
    if (t->regional[k] < 0) {
      fprintf(stderr, "xfed-bench-round: cannot start agg-r%02d: %s\n", k + 1, strerror(errno));
      goto out;
    }
    xf_rb_children[CHILD_REGIONAL(k)] = t->regional[k];
  }
  for (int k = 0; k < K; k++)
    if (!(t->regional_port[k] =
              xf_rb_wait_port(t->regional[k], CHILD_REGIONAL(k), port_file[k], 30))) {
      xf_rb_print_log_tail(t->regional_log[k]);
      goto out;
    }

  /* One driver per region: its sites, in a process of their own. */
  pid_t self = getpid();
  fflush(stdout);
  fflush(stderr);
  for (int k = 0; k < K; k++) {
    int ctl[2], rep[2];
    if (pipe(ctl) != 0) goto pipe_failed;
    if (pipe(rep) != 0) {
      close(ctl[0]), close(ctl[1]);
      goto pipe_failed;
    }
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "xfed-bench-round: fork: %s\n", strerror(errno));
      close(ctl[0]), close(ctl[1]), close(rep[0]), close(rep[1]);
      goto out;
    }
    if (pid == 0) {
      xf_rb_forget_parent_state(self);
      for (int j = 0; j < k; j++) close(t->ctl[j]), close(t->report[j]);
      close(ctl[1]), close(rep[0]);
      _exit(driver_main(b, k, t->regional_port[k], ctl[0], rep[1]));
    }
    close(ctl[0]), close(rep[1]);
    t->ctl[k] = ctl[1];
    t->report[k] = rep[0];
    t->driver[k] = pid;
    xf_rb_children[CHILD_DRIVER(k)] = pid;
    continue;
  pipe_failed:
    fprintf(stderr, "xfed-bench-round: pipe: %s\n", strerror(errno));
    goto out;
  }

  /* This process: the user, who submits the job once every driver is
   * ready and polls it until it is done. */
  b->tier = t;
  b->region = -1;
  snprintf(b->region_label, sizeof(b->region_label), "%s", REGION);
  snprintf(b->host, sizeof(b->host), "127.0.0.1");
  b->port = top_port;
  b->nsites = 0;
  b->coord = 0;
  xf_rb_bench = b;
  bool ok = xf_rb_run_rounds(b);
  if (!ok) snprintf(why, sizeof(why), "%s", b->why);
  for (int k = 0; ok && k < K; k++) ok = tier_read_report(t, k, o, why, sizeof(why));
  long orch_vmhwm = xf_rb_proc_status_kib(getpid(), "VmHWM");

  /* Stop the aggregators (their sites' drivers then end), then the top. */
  for (int k = 0; k < K; k++)
    if (t->regional[k] > 0) kill(t->regional[k], SIGTERM);
  for (int k = 0; k < K; k++) {
    t->regional_exit[k] = wait_child(t->regional[k], CHILD_REGIONAL(k), 15);
    if (ok && t->regional_exit[k] != 0) {
      ok = false;
      snprintf(why, sizeof(why), "agg-r%02d exited with status %d after SIGTERM", k + 1,
               t->regional_exit[k]);
      xf_rb_print_log_tail(t->regional_log[k]);
    }
  }
  for (int k = 0; k < K; k++) {
    int st = wait_child(t->driver[k], CHILD_DRIVER(k), 75);
    if (ok && st != 0) {
      ok = false;
      snprintf(why, sizeof(why), "driver %d exited with status %d", k + 1, st);
    }
  }
  t->top_cpu_total = xf_rb_proc_cpu_s(t->top);
  t->top_exit = stop_child(t->top, CHILD_COORD);
  if (ok && t->top_exit != 0) {
    ok = false;
    snprintf(why, sizeof(why), "the top coordinator exited with status %d after SIGTERM",
             t->top_exit);
    xf_rb_print_log_tail(p->log);
  }
  ok = ok && tier_merge(b, t, why, sizeof(why));
  if (!ok) {
    fprintf(stderr, "xfed-bench-round: %s\n", why);
    xf_rb_print_log_tail(p->log);
    for (int k = 0; k < K; k++) xf_rb_print_log_tail(t->regional_log[k]);
    goto out;
  }

  if (!run_tier_baseline(o, p, b->model_len, up_len, tls_after, tls_times + tls_before,
                         &tls_cpu_after, why, sizeof(why))) {
    fprintf(stderr, "xfed-bench-round: TLS baseline: %s\n", why);
    goto out;
  }
  tls_cpu += tls_cpu_after;
  print_tier_report(b, t, tls_times, tls_cpu, xf_rb_digest_gbps(b->delta, up_len), t_pki,
                    load_start, orch_vmhwm);
  rc = 0;
out:
  if (t) {
    for (int k = 0; k < K; k++) {
      if (t->ctl[k] >= 0) close(t->ctl[k]);
      if (t->report[k] >= 0) close(t->report[k]);
      xf_free(t->dr[k].rt);
    }
  }
  xf_free(t);
  xf_free(tls_times);
  return rc;
}
