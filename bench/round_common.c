/* SPDX-License-Identifier: Apache-2.0 */
/* What every process of xfed-bench-round shares: the clock, lines over
 * pipes, the scratch directory and the children (cleaned up whatever
 * happens), the federation's names and PKI, the coordinator processes, and
 * what /proc and the machine say. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "bench/round_bench.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "net/conn.h"
#include "net/tls.h"

/* ---- small helpers -------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n values (n >= 1); v is sorted in place. */
double xf_rb_median(double *v, size_t n) {
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void xf_rb_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

bool xf_rb_write_all(int fd, const char *buf, size_t len) {
  while (len) {
    ssize_t w = write(fd, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    buf += w;
    len -= (size_t)w;
  }
  return true;
}

/* Reads one line from fd within timeout_s; false on end of file or timeout. */
bool xf_rb_read_line(int fd, char *buf, size_t n, double timeout_s) {
  size_t at = 0;
  double until = xf_bench_now() + timeout_s;
  while (at + 1 < n) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int left = (int)((until - xf_bench_now()) * 1000);
    if (left <= 0) return false;
    int pr = poll(&pfd, 1, left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    ssize_t got = read(fd, buf + at, n - at - 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    at += (size_t)got;
    buf[at] = '\0';
    if (memchr(buf, '\n', at)) return true;
  }
  return false;
}

/* ---- children and the scratch directory, cleaned up whatever happens ------------------------ */

char xf_rb_tmp[TMP_MAX_LEN];
volatile pid_t xf_rb_children[CHILD_SLOTS];


static void kill_children(void) {
  for (size_t i = 0; i < CHILD_SLOTS; i++) {
    pid_t pid = xf_rb_children[i];
    if (pid <= 0) continue;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    xf_rb_children[i] = 0;
  }
}

void xf_rb_cleanup(void) {
  kill_children();
  if (xf_rb_tmp[0]) xf_bench_remove_tree(xf_rb_tmp);
  xf_rb_tmp[0] = '\0';
}

/* SIGINT, SIGTERM, SIGHUP: only async-signal-safe calls here, so the tree is
 * removed by rm in a child rather than with opendir (which allocates). */
void xf_rb_on_fatal_signal(int sig) {
  for (size_t i = 0; i < CHILD_SLOTS; i++)
    if (xf_rb_children[i] > 0) kill(xf_rb_children[i], SIGKILL);
  if (xf_rb_tmp[0]) {
    pid_t pid = fork();
    if (pid == 0) {
      char *const argv[] = {"rm", "-rf", "--", xf_rb_tmp, NULL};
      char *const envp[] = {NULL};
      execve("/bin/rm", argv, envp);
      _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
  }
  _exit(128 + sig);
}

/* In a forked child of the bench (a driver, a baseline client): the
 * scratch directory and the other children are its parent's to clean up,
 * the child dies with its parent, and it ends with _exit, never exit. */
void xf_rb_forget_parent_state(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  xf_rb_tmp[0] = '\0';
  for (size_t i = 0; i < CHILD_SLOTS; i++) xf_rb_children[i] = 0;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
}

void xf_rb_print_log_tail(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  static char buf[6144];
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  long from = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
  fseek(f, from, SEEK_SET);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  fprintf(stderr, "---- last lines of %s ----\n%s%s---- end ----\n", path, buf,
          n && buf[n - 1] != '\n' ? "\n" : "");
}

/* ---- names and the PKI ---------------------------------------------------------------------- */

/* Names: the flat mode's sites are site-001... in region "bench"; the tiered
 * mode's are r01-s0001... in regions r01..., each behind aggregator agg-r01... */
void xf_rb_site_name(int region, int i, char *buf, size_t n) {
  if (region < 0) snprintf(buf, n, "site-%03d", i + 1);
  else snprintf(buf, n, "r%02d-s%04d", region + 1, i + 1);
}
void xf_rb_region_name(int region, char *buf, size_t n) {
  if (region < 0) snprintf(buf, n, "%s", REGION);
  else snprintf(buf, n, "r%02d", region + 1);
}
void xf_rb_agg_name(int region, char *buf, size_t n) { snprintf(buf, n, "agg-r%02d", region + 1); }
/* The loopback address a region's aggregator (and its baseline server)
 * listens on: one per region spreads the connections' 4-tuples. */
void xf_rb_region_host(int region, char *buf, size_t n) {
  if (region < 0) snprintf(buf, n, "127.0.0.1");
  else snprintf(buf, n, "127.0.1.%d", region + 1);
}

void xf_rb_cert_paths(const bench_paths *p, const char *name, char *cert, char *key) {
  snprintf(cert, PATH_MAX, "%s/issued/%s.crt", p->fed, name);
  snprintf(key, PATH_MAX, "%s/issued/%s.key", p->fed, name);
}

xf_err xf_rb_make_tls(const bench_paths *p, const char *name, xf_tls **out, xf_errctx *err) {
  char cert[PATH_MAX], key[PATH_MAX];
  xf_rb_cert_paths(p, name, cert, key);
  xf_tls_config cfg = {.cert_path = cert, .key_path = key, .ca_path = p->ca, .crl_path = p->crl};
  return xf_tls_new(&cfg, out, err);
}

/* A CA, the (top) coordinator, the researcher, and --sites sites in each
 * region (one region "bench" in the flat mode; --regions regions, each with
 * its aggregator's certificate, in the tiered mode). */
xf_err xf_rb_make_federation(const bench_paths *p, const bench_opts *o, xf_errctx *err) {
  size_t regions = o->regions ? (size_t)o->regions : 1;
  size_t n = 2 + (o->regions ? regions : 0) + regions * (size_t)o->sites;
  xf_pki_issue_opts *v = xf_calloc(n, sizeof(*v));
  char (*names)[32] = xf_calloc(n, sizeof(*names));
  char (*regs)[16] = xf_calloc(regions, sizeof(*regs));
  if (!v || !names || !regs) {
    xf_free(v);
    xf_free(names);
    xf_free(regs);
    return xf_fail(err, XF_ENOMEM, "out of memory listing the federation's identities");
  }
  size_t k = 0;
  v[k++] = (xf_pki_issue_opts){.kind = XF_PKI_KIND_COORDINATOR, .name = "coord"};
  v[k++] = (xf_pki_issue_opts){.kind = XF_PKI_KIND_USER, .name = "researcher",
                               .role = XF_PKI_ROLE_RESEARCHER};
  for (int r = o->regions ? 0 : -1; r < o->regions; r++) {
    char *region = regs[r < 0 ? 0 : r];
    xf_rb_region_name(r, region, sizeof(regs[0]));
    if (r >= 0) {
      xf_rb_agg_name(r, names[k], sizeof(names[0]));
      v[k] = (xf_pki_issue_opts){.kind = XF_PKI_KIND_COORDINATOR, .name = names[k],
                                 .region = region};
      k++;
    }
    for (int i = 0; i < o->sites; i++, k++) {
      xf_rb_site_name(r, i, names[k], sizeof(names[0]));
      v[k] = (xf_pki_issue_opts){.kind = XF_PKI_KIND_SITE, .name = names[k], .region = region};
    }
  }
  xf_federation *fed = NULL;
  xf_err rc = xf_federation_init(p->fed, "bench", 0, &fed, err);
  size_t done = 0;
  if (rc == XF_OK) rc = xf_federation_issue_many(fed, v, k, &done, err);
  xf_federation_close(fed);
  xf_free(regs);
  xf_free(names);
  xf_free(v);
  return rc;
}

/* The coordinator binary: --coord, else ../coordinator/xfed-coord beside this
 * program's build directory, else xfed-coord beside this program, else PATH. */
bool xf_rb_find_coord(char *out, size_t n) {
  if (out[0]) return access(out, X_OK) == 0;
  char self[2048];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len > 0) {
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(out, n, "%s/../coordinator/xfed-coord", self);
    if (access(out, X_OK) == 0) {
      char real[PATH_MAX];
      if (realpath(out, real)) snprintf(out, n, "%s", real);
      return true;
    }
    snprintf(out, n, "%s/xfed-coord", self);
    if (access(out, X_OK) == 0) return true;
  }
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *colon = strchr(path, ':');
    size_t dl = colon ? (size_t)(colon - path) : strlen(path);
    snprintf(out, n, "%.*s/xfed-coord", (int)dl, path);
    if (dl && access(out, X_OK) == 0) return true;
    path = colon ? colon + 1 : NULL;
  }
  out[0] = '\0';
  return false;
}

/* ---- the coordinator process ---------------------------------------------------------------- */

/* A coordinator's --config: every fake site connects from 127.0.0.1, so
 * the per-address cap (XF_CONN_MAX_CONNS_PER_ADDR by default) is raised to
 * hold them all (conns: the sites, or the aggregators, plus 64 for the user
 * and the TLS baseline's leftovers). In the tiered mode the handshake bound
 * is raised too: ten drivers dialing 64 sites each keep 640 handshakes in
 * flight on two cores, and a handshake that waits its turn there is slow
 * without being stuck. */
bool xf_rb_write_coord_config(const char *path, unsigned conns, bool tiered) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  int n = fprintf(f, "{\"max_connections\": %u, \"max_connections_per_address\": %u%s}\n",
                  conns > XF_CONN_MAX_CONNS ? conns : XF_CONN_MAX_CONNS, conns,
                  tiered ? ", \"handshake_timeout_s\": 120" : "");
  return fclose(f) == 0 && n > 0;
}

/* Forks and runs the coordinator binary with argv, its output in log; the
 * child dies with the bench. */
pid_t xf_rb_spawn_daemon(const char *bin, char *const argv[], const char *log_path) {
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
  int null = open("/dev/null", O_RDONLY);
  if (log < 0 || null < 0) _exit(127);
  dup2(null, 0);
  dup2(log, 1);
  dup2(log, 2);
  setenv("XF_LOG_LEVEL", "warn", 0); /* the bench's own XF_LOG_LEVEL, when set */
  execv(bin, argv);
  dprintf(2, "cannot run %s: %s\n", bin, strerror(errno));
  _exit(127);
}

/* The (top) coordinator: global, with no residency policy (the tiered
 * mode's job asks for the regional topology instead, docs/jobs.md). */
pid_t xf_rb_spawn_coord(const bench_opts *o, const bench_paths *p) {
  char cert[PATH_MAX], key[PATH_MAX];
  xf_rb_cert_paths(p, "coord", cert, key);
  char *argv[] = {(char *)o->coord, "--cert", cert,        "--key",       key,
                  "--ca",           (char *)p->ca,         "--crl",       (char *)p->crl,
                  "--state",        (char *)p->state,      "--listen",    "127.0.0.1:0",
                  "--port-file",    (char *)p->port,       "--residency-policy", "off",
                  "--config",       (char *)p->config,     NULL};
  return xf_rb_spawn_daemon(o->coord, argv, p->log);
}

/* Waits for the port file of the child in slot; 0 when it exited or took
 * too long. */
int xf_rb_wait_port(pid_t pid, int slot, const char *port_file, double timeout_s) {
  double until = xf_bench_now() + timeout_s;
  while (xf_bench_now() < until) {
    FILE *f = fopen(port_file, "r");
    if (f) {
      int port = 0;
      int got = fscanf(f, "%d", &port);
      fclose(f);
      if (got == 1 && port > 0 && port < 65536) return port;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      xf_rb_children[slot] = 0;
      fprintf(stderr, "xfed-bench-round: a coordinator exited (status %d) before listening\n",
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      return 0;
    }
    xf_rb_sleep_ms(10);
  }
  fprintf(stderr, "xfed-bench-round: no port file %s after %.0f s\n", port_file, timeout_s);
  return 0;
}

/* A "VmHWM:" or other kB line of /proc/PID/status; -1 when absent. */
long xf_rb_proc_status_kib(pid_t pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  size_t kl = strlen(key);
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
      v = strtol(line + kl + 1, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

/* User + system CPU seconds of a process so far; -1 when unreadable. */
double xf_rb_proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!p) return -1;
  unsigned long ut = 0, st = 0;
  /* After ")": state (3), then fields 4..13, utime (14), stime (15). */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* User + system CPU seconds of this process so far. */
double xf_rb_self_cpu_s(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* ---- the machine ---------------------------------------------------------------------------- */


/* BLAKE2b (the stream digest) in GB/s over buf, best of 5 passes. */
double xf_rb_digest_gbps(const uint8_t *buf, size_t len) {
  double best = 0;
  for (int i = 0; i < 5; i++) {
    xf_digest d;
    double t = xf_bench_now();
    xf_digest_buf(buf, len, &d);
    t = xf_bench_now() - t;
    if (t > 0 && (double)len / t / 1e9 > best) best = (double)len / t / 1e9;
  }
  return best;
}

/* The 1-minute load average: how busy the shared machine was. */
double xf_rb_load_1min(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

void xf_rb_print_json_list(const double *v, size_t n) {
  printf("[");
  for (size_t i = 0; i < n; i++) printf("%s%.6f", i ? ", " : "", v[i]);
  printf("]");
}
