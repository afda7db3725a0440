/* SPDX-License-Identifier: Apache-2.0 */
/* Round overhead and peak memory of the real coordinator (xfed-coord) on
 * loopback, against TLS alone carrying the same bytes in the same run.
 * Prints a table and one JSON line per run for bench/round.sh.
 *
 * What one run does, all in a temporary directory that is removed at the end
 * (also on failure and on SIGINT/SIGTERM, with every child killed):
 *  1. A federation made with the PKI library: a CA, one global coordinator
 *     certificate, --sites site certificates in one region and a user
 *     certificate with role researcher.
 *  2. xfed-coord started as a child (XF_LOG_LEVEL=warn, its output in
 *     coord.log, whose tail is printed on failure), listening on
 *     127.0.0.1:0 and telling its port through --port-file.
 *  3. In this process, on one libuv loop, --sites fake sites with no local
 *     work, each with its own TLS context and certificate, speaking the
 *     site's side of docs/protocol.md ("Site <-> coordinator"): hello as
 *     "site", SiteAnnounce, and for each TaskOffer a TaskAccept, the MODEL
 *     stream received (xf_tensor_receiver) and decoded (xf_checkpoint_decode),
 *     then at once Metrics and an UPDATE stream of a fixed small delta
 *     (TensorBegin, wait for the coordinator's TensorAck, chunks from its
 *     offset while xf_conn_send takes them, TensorEnd, the final TensorAck);
 *     evaluate_only offers get TaskAccept and test-only Metrics. A user
 *     connection ("cli") submits the job and polls JobQuery until it is done.
 *     A round lasts from the first TaskOffer of round r to the last final
 *     TensorAck of round r (every update delivered): the median round is
 *     reported, beside the cycle (TaskOffer of r to TaskOffer of r + 1, which
 *     adds the coordinator's commit) and the download part (TaskOffer to the
 *     last model received).
 *  4. The coordinator's VmHWM (/proc/PID/status) read just before SIGTERM;
 *     it must exit 0.
 *  5. The TLS baseline (in the same run): a forked child listens with xf_listen and the
 *     coordinator's certificate, the same number of sites connect with their
 *     own certificates, and in each repetition the server sends every client
 *     as many bytes as the model file, in TensorChunk frames of 1 MiB, and
 *     each client, once it has them all, sends back as many bytes as an
 *     update the same way. A repetition ends when the server has every
 *     update; the median of --tls-reps repetitions is reported, half of
 *     them run before the coordinator starts and half after it stopped.
 *
 * Also reported: the CPU seconds per round of the coordinator (one thread)
 * and of the fake sites (this process), and per repetition of the baseline,
 * BLAKE2b's rate on one core, and the machine's load average, which on a
 * shared machine says how far to trust the run.
 *
 * The fake sites hash and decode every model they receive, as a site does.
 * On the way up they send the same delta: sealed to the round's key and the
 * sealed stream hashed each round, as a site does, or, unsealed, with its
 * BLAKE2b digest computed once.
 *
 * The floor (in the same run): TLS alone carries the bytes, but a round also
 * hashes and seals them (measure_mandated says which passes), work no
 * implementation of the protocol avoids. Those primitives are timed on one
 * core over the round's sizes, and the floor is TLS alone plus that CPU time
 * spread over every core: `floor_ratio` is the best `ratio` this machine
 * allows, `ratio_to_floor` how far the round is from it.
 *
 * The tiered mode (--regions K, --sites N per region): one top coordinator
 * (global, no residency policy), K regional aggregators (xfed-coord --role
 * regional --upstream, region rKK, each listening on its own loopback
 * address 127.0.1.K so that the 4-tuples spread), and K forked copies of
 * this process, the drivers, each running its region's N fake sites against
 * its aggregator as above; this process, the orchestrator, makes the PKI
 * (every aggregator's certificate too), runs the user (a job of the
 * "regional" topology, min_sites K * N) and reads each driver's report
 * through a pipe. A round is measured over all drivers: from the first
 * TaskOffer anywhere to the last update acknowledged by its aggregator; the
 * cycle runs to the next round's first TaskOffer (the last round's: to the
 * evaluation's), and so adds the aggregates' way up and the top's commit.
 * CPU and VmHWM are reported per tier: the top, each aggregator (between
 * the job's acceptance and its end) and each driver. The baseline is the
 * site tier's bytes: in each region a client process with its sites'
 * certificates and a server with the coordinator's, all K pairs at once,
 * each repetition started on one barrier and lasting from the first start
 * to the last server having every update. The aggregates' hop (K models
 * down, K aggregates up) is not in it: 1/N of the bytes.
 *
 * usage: xfed-bench-round [--sites N] [--regions K] [--rounds R]
 *                         [--model fedavg-cnn|lenet5|mlp] [--coord PATH]
 *                         [--tls-reps K] [--timeout S] */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "crypto/seal.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "net/conn.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"

#define REGION "bench"
#define DATASET "bench"
#define TRAIN_RECORDS 1000u
#define TEST_RECORDS 100u
#define CHUNK XF_TENSOR_CHUNK_MAX
#define DIAL_WINDOW 64 /* handshakes in flight at once; see dial_sites */
/* The bench's own bound on a handshake (the library's default is 10 s):
 * the baseline starts a thousand handshakes per server at once, ten
 * servers in the tiered mode, all on the same two cores, and a handshake
 * that waits its turn there is slow, not stuck. The baseline's connections
 * take it as their idle bound too, which also bounds a dial's TCP connect
 * (the library's 30 s was too short for 5,000 connects at once). */
#define BENCH_HANDSHAKE_MS 120000u
/* The largest model a fake site takes: far above fedavg-cnn's 6.6 MB. */
#define MODEL_MAX (1ull << 30)
#define SITES_MAX 10000 /* per process: one coordinator, or one region's driver */
#define REGIONS_MAX 64
/* The scratch directory's path, terminator included, is at most this long. */
#define TMP_MAX_LEN 1024

/* ---- small helpers -------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n values (n >= 1); v is sorted in place. */
static double median(double *v, size_t n) {
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- children and the scratch directory, cleaned up whatever happens ------------------------ */

/* Children to kill whatever happens: slot CHILD_COORD is the (top)
 * coordinator, CHILD_TLS the TLS baseline's server of this process, and in
 * the tiered mode the regional aggregators, the drivers and the baseline's
 * client processes follow; 0 when none. */
#define CHILD_COORD 0
#define CHILD_TLS 1
#define CHILD_REGIONAL(k) (2 + (k))
#define CHILD_DRIVER(k) (2 + REGIONS_MAX + (k))
#define CHILD_TLS_CLIENT(k) (2 + 2 * REGIONS_MAX + (k))
#define CHILD_SLOTS (2 + 3 * REGIONS_MAX)
static char g_tmp[TMP_MAX_LEN]; /* the scratch directory; "" when none */
static volatile pid_t g_children[CHILD_SLOTS];

/* Removes path and everything below it, never following symbolic links. */
static void remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    unlink(path);
    return;
  }
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char child[PATH_MAX];
      if (snprintf(child, sizeof(child), "%s/%s", path, e->d_name) < (int)sizeof(child))
        remove_tree(child);
    }
    closedir(d);
  }
  rmdir(path);
}

static void kill_children(void) {
  for (size_t i = 0; i < CHILD_SLOTS; i++) {
    pid_t pid = g_children[i];
    if (pid <= 0) continue;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    g_children[i] = 0;
  }
}

static void cleanup(void) {
  kill_children();
  if (g_tmp[0]) remove_tree(g_tmp);
  g_tmp[0] = '\0';
}

/* SIGINT, SIGTERM, SIGHUP: only async-signal-safe calls here, so the tree is
 * removed by rm in a child rather than with opendir (which allocates). */
static void on_fatal_signal(int sig) {
  for (size_t i = 0; i < CHILD_SLOTS; i++)
    if (g_children[i] > 0) kill(g_children[i], SIGKILL);
  if (g_tmp[0]) {
    pid_t pid = fork();
    if (pid == 0) {
      char *const argv[] = {"rm", "-rf", "--", g_tmp, NULL};
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
static void forget_parent_state(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  g_tmp[0] = '\0';
  for (size_t i = 0; i < CHILD_SLOTS; i++) g_children[i] = 0;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
}

static void print_log_tail(const char *path) {
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

/* ---- settings ------------------------------------------------------------------------------- */

typedef struct bench_opts {
  int sites;   /* in the tiered mode: per region */
  int regions; /* 0: flat (every site dials the coordinator); K: tiered */
  uint32_t rounds;
  const char *model;
  char coord[PATH_MAX];
  int tls_reps;
  double timeout_s;
} bench_opts;

/* Paths inside the scratch directory. */
/* Room for a path below the scratch directory. */
#define SUB_PATH_MAX 2048
typedef struct bench_paths {
  char fed[SUB_PATH_MAX], ca[SUB_PATH_MAX], crl[SUB_PATH_MAX], state[SUB_PATH_MAX],
      port[SUB_PATH_MAX], log[SUB_PATH_MAX], config[SUB_PATH_MAX];
} bench_paths;

/* Names: the flat mode's sites are site-001... in region "bench"; the tiered
 * mode's are r01-s0001... in regions r01..., each behind aggregator agg-r01... */
static void site_name(int region, int i, char *buf, size_t n) {
  if (region < 0) snprintf(buf, n, "site-%03d", i + 1);
  else snprintf(buf, n, "r%02d-s%04d", region + 1, i + 1);
}
static void region_name(int region, char *buf, size_t n) {
  if (region < 0) snprintf(buf, n, "%s", REGION);
  else snprintf(buf, n, "r%02d", region + 1);
}
static void agg_name(int region, char *buf, size_t n) { snprintf(buf, n, "agg-r%02d", region + 1); }
/* The loopback address a region's aggregator (and its baseline server)
 * listens on: one per region spreads the connections' 4-tuples. */
static void region_host(int region, char *buf, size_t n) {
  if (region < 0) snprintf(buf, n, "127.0.0.1");
  else snprintf(buf, n, "127.0.1.%d", region + 1);
}

static void cert_paths(const bench_paths *p, const char *name, char *cert, char *key) {
  snprintf(cert, PATH_MAX, "%s/issued/%s.crt", p->fed, name);
  snprintf(key, PATH_MAX, "%s/issued/%s.key", p->fed, name);
}

static xf_err make_tls(const bench_paths *p, const char *name, xf_tls **out, xf_errctx *err) {
  char cert[PATH_MAX], key[PATH_MAX];
  cert_paths(p, name, cert, key);
  xf_tls_config cfg = {.cert_path = cert, .key_path = key, .ca_path = p->ca, .crl_path = p->crl};
  return xf_tls_new(&cfg, out, err);
}

/* A CA, the (top) coordinator, the researcher, and --sites sites in each
 * region (one region "bench" in the flat mode; --regions regions, each with
 * its aggregator's certificate, in the tiered mode). */
static xf_err make_federation(const bench_paths *p, const bench_opts *o, xf_errctx *err) {
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
    region_name(r, region, sizeof(regs[0]));
    if (r >= 0) {
      agg_name(r, names[k], sizeof(names[0]));
      v[k] = (xf_pki_issue_opts){.kind = XF_PKI_KIND_COORDINATOR, .name = names[k],
                                 .region = region};
      k++;
    }
    for (int i = 0; i < o->sites; i++, k++) {
      site_name(r, i, names[k], sizeof(names[0]));
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
static bool find_coord(char *out, size_t n) {
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
static bool write_coord_config(const char *path, unsigned conns, bool tiered) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  int n = fprintf(f, "{\"max_connections\": %u, \"max_connections_per_address\": %u%s}\n",
                  conns > XF_CONN_MAX_CONNS ? conns : XF_CONN_MAX_CONNS, conns,
                  tiered ? ", \"handshake_timeout_s\": 120" : "");
  return fclose(f) == 0 && n > 0;
}

/* Forks and runs the coordinator binary with argv, its output in log; the
 * child dies with the bench. */
static pid_t spawn_daemon(const char *bin, char *const argv[], const char *log_path) {
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
static pid_t spawn_coord(const bench_opts *o, const bench_paths *p) {
  char cert[PATH_MAX], key[PATH_MAX];
  cert_paths(p, "coord", cert, key);
  char *argv[] = {(char *)o->coord, "--cert", cert,        "--key",       key,
                  "--ca",           (char *)p->ca,         "--crl",       (char *)p->crl,
                  "--state",        (char *)p->state,      "--listen",    "127.0.0.1:0",
                  "--port-file",    (char *)p->port,       "--residency-policy", "off",
                  "--config",       (char *)p->config,     NULL};
  return spawn_daemon(o->coord, argv, p->log);
}

/* Waits for the port file of the child in slot; 0 when it exited or took
 * too long. */
static int wait_port(pid_t pid, int slot, const char *port_file, double timeout_s) {
  double until = now_s() + timeout_s;
  while (now_s() < until) {
    FILE *f = fopen(port_file, "r");
    if (f) {
      int port = 0;
      int got = fscanf(f, "%d", &port);
      fclose(f);
      if (got == 1 && port > 0 && port < 65536) return port;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      g_children[slot] = 0;
      fprintf(stderr, "xfed-bench-round: a coordinator exited (status %d) before listening\n",
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      return 0;
    }
    sleep_ms(10);
  }
  fprintf(stderr, "xfed-bench-round: no port file %s after %.0f s\n", port_file, timeout_s);
  return 0;
}

/* A "VmHWM:" or other kB line of /proc/PID/status; -1 when absent. */
static long proc_status_kib(pid_t pid, const char *key) {
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
static double proc_cpu_s(pid_t pid) {
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
static double self_cpu_s(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* ---- the run -------------------------------------------------------------------------------- */

typedef struct bench bench;

/* Where a fake site's update upload stands. */
typedef enum upload_state {
  UP_NONE = 0,   /* nothing to send */
  UP_HELD,       /* the model is in; the offer said hold and no TaskGo came yet */
  UP_METRICS,    /* Metrics next */
  UP_BEGIN,      /* TensorBegin next */
  UP_AWAIT_ACK,  /* TensorBegin sent: the coordinator's TensorAck says where to go on */
  UP_CHUNKS,     /* chunks from up_offset */
  UP_END,        /* TensorEnd next */
  UP_AWAIT_FINAL /* TensorEnd sent: waiting for TensorAck{total} */
} upload_state;

typedef struct site {
  bench *b;
  char name[32];
  xf_tls *tls;
  xf_conn *conn;
  xf_session session;
  bool announced, closed;
  /* the task */
  char job_id[32];
  uint32_t round, attempt, model_round;
  uint64_t model_stream, offered_update_stream;
  bool eval;
  bool hold, go; /* the offer said wait for TaskGo; it came */
  xf_tensor_receiver *model_rx;
  uint8_t *model_buf;
  size_t model_len;
  /* the update */
  upload_state up;
  uint64_t up_stream, up_offset;
  /* sealed to the coordinator's key of the offer, as real sites send it */
  bool seal;
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES], epk[XF_SEAL_PUBLICKEYBYTES];
  uint8_t *sealed;
  size_t sealed_len;
  xf_digest sealed_digest;
} site;

typedef enum cli_state {
  CLI_CONNECTING = 0,
  CLI_READY,     /* session open, job not yet submitted */
  CLI_SUBMITTED, /* JobSubmit out, answer pending */
  CLI_RUNNING,   /* job accepted: polling */
  CLI_QUERYING,  /* JobQuery out, answer pending */
  CLI_DONE
} cli_state;

typedef struct cli {
  bench *b;
  xf_tls *tls;
  xf_conn *conn;
  xf_session session;
  cli_state st;
  bool closed;
  char job_id[32];
  double next_action; /* poll or resubmit after this time */
  int submit_tries;
  char last_state[16];
} cli;

/* What the sites saw of one round (index: the round number). */
typedef struct round_times {
  double first_offer, last_model, last_final_ack;
  int offers, final_acks;
  uint32_t max_attempt;
} round_times;

typedef struct tier tier;

/* One process's run: the flat mode's (its sites and the user, against the
 * coordinator), a tiered driver's (one region's sites, against their
 * aggregator; no user), or the tiered orchestrator's (the user alone). */
struct bench {
  uv_loop_t loop;
  uv_timer_t tick;
  const bench_opts *o;
  const bench_paths *p;
  pid_t coord; /* the flat mode's coordinator; 0 in the tiered mode */
  int port;    /* where the sites (or the user) dial */
  char host[32];
  int region; /* the sites' region: -1 in the flat mode */
  char region_label[16];
  int nsites; /* fake sites in this process */
  bool driver;
  int ctl_fd;          /* a driver: the orchestrator writes here when the job is done */
  int report_fd;       /* a driver: "ready", then its report, to the orchestrator */
  bool ready_sent;
  double t_dial, t_ready; /* a driver: dialing began; every site announced */
  double t_first_eval;    /* the first evaluate_only offer */
  tier *tier;             /* the orchestrator's */
  site *sites;
  int dialed, handshaking; /* sites dialed so far; of them, not yet announced */
  int n_announced;
  cli user;
  bool failed, stopping;
  char why[1024];
  double started, deadline, stop_deadline;
  /* the job, as learned from the stream */
  size_t model_len, n_params;
  uint8_t *delta; /* n_params float32 little-endian: every site's update */
  xf_digest delta_digest;
  round_times *rt; /* rounds + 2 entries */
  int evals;
  double coord_cpu_first_offer, coord_cpu_done, t_first_offer, t_done;
  double self_cpu_first_offer, self_cpu_done; /* this process: the fake sites */
  long vmhwm_kib, vmrss_kib;
  int coord_exit;
  bool term_sent;
};

static void bench_fail(bench *b, const char *fmt, ...) XF_PRINTF(2, 3);

static void close_all(bench *b) {
  for (int i = 0; i < b->nsites; i++)
    if (b->sites[i].conn) xf_conn_close(b->sites[i].conn);
  if (b->user.conn) xf_conn_close(b->user.conn);
}

static void bench_fail(bench *b, const char *fmt, ...) {
  if (!b->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->why, sizeof(b->why), fmt, ap);
    va_end(ap);
    b->failed = true;
  }
  b->stopping = true;
  close_all(b);
}

static bool send_env(bench *b, xf_conn *c, const Xfed__Envelope *env, const char *who) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_conn_send(c, env, &err);
  if (rc == XF_OK) return true;
  bench_fail(b, "%s: cannot send %s: %s", who, xf_envelope_body_name(env), err.msg);
  return false;
}

static const char *model_json(const char *model) {
  if (strcmp(model, "mlp") == 0) return "{\"arch\": \"mlp\", \"hidden\": [200, 200]}";
  if (strcmp(model, "lenet5") == 0) return "{\"arch\": \"cnn\", \"preset\": \"lenet5\"}";
  return "{\"arch\": \"cnn\", \"preset\": \"fedavg-cnn\"}";
}

/* The job the user submits: every site in every round, one job at a time. */
static void job_spec_text(const bench_opts *o, char *buf, size_t n) {
  snprintf(buf, n,
           "{\"name\": \"round-bench\", \"model\": %s, \"data\": {\"dataset\": \"" DATASET
           "\"}, \"rounds\": %u, \"min_sites\": %d, \"sites_per_round\": 1.0, "
           "\"round_deadline_s\": 600, \"seed\": 1%s}",
           model_json(o->model), (unsigned)o->rounds, o->sites * (o->regions ? o->regions : 1),
           o->regions ? ", \"topology\": \"regional\"" : "");
}

/* The parameters of the job's model on the sites' 28x28x1 data with 10
 * classes, as the coordinator will build it, and the length of its model
 * file (which does not depend on the parameters' values). */
static xf_err job_model_size(const bench_opts *o, size_t *n, size_t *file_len, xf_errctx *err) {
  char text[1024];
  job_spec_text(o, text, sizeof(text));
  xf_jobspec spec;
  xf_model_spec ms;
  xf_model *m = NULL;
  XF_GUARD(xf_jobspec_parse_string(text, strlen(text), "xfed-bench-round", &spec, err));
  XF_GUARD(xf_jobspec_model_spec(&spec, 28, 28, 1, 10, &ms, err));
  XF_GUARD(xf_model_create(&ms, &m, err));
  *n = xf_model_num_params(m);
  float *params = xf_calloc(*n ? *n : 1, sizeof(float));
  uint8_t *bytes = NULL;
  xf_err rc = params ? xf_checkpoint_encode(m, params, &bytes, file_len, err)
                     : xf_fail(err, XF_ENOMEM, "out of memory");
  xf_free(bytes);
  xf_free(params);
  xf_model_free(m);
  return rc;
}

/* The shared update: n small pseudo-random float32 values, little-endian,
 * and their digest, made before the job starts. */
static bool make_delta(bench *b, size_t n) {
  b->delta = xf_malloc(n ? n * 4 : 4);
  if (!b->delta) return false;
  xf_rng rng;
  xf_rng_seed(&rng, 1, 7);
  for (size_t i = 0; i < n; i++) {
    float v = (float)(xf_rng_normal(&rng) * 1e-3);
    uint32_t u;
    memcpy(&u, &v, 4);
    for (int k = 0; k < 4; k++) b->delta[4 * i + (size_t)k] = (uint8_t)(u >> (8 * k));
  }
  xf_digest_buf(b->delta, n * 4, &b->delta_digest);
  b->n_params = n;
  return true;
}

/* ---- a fake site ---------------------------------------------------------------------------- */

static void site_drop_task(site *s) {
  xf_free(s->sealed);
  s->sealed = NULL;
  s->sealed_len = 0;
  xf_tensor_receiver_free(s->model_rx);
  s->model_rx = NULL;
  xf_free(s->model_buf);
  s->model_buf = NULL;
  s->model_len = 0;
  s->up = UP_NONE;
}

/* The site's report: test figures of the model it received and, after a
 * training task, a train loss; the figures are fixed, since a bench site trains nothing. */
static void fill_metrics(site *s, bool train, Xfed__Metrics *out, Xfed__Envelope *env) {
  bench *b = s->b;
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.job_id = s->job_id;
  m.round = s->round;
  m.attempt = s->attempt;
  m.site = s->name;
  m.region = b->region_label;
  m.model_round = s->model_round;
  m.has_test = true;
  m.test_loss = 2.30;
  m.test_accuracy = 0.10;
  m.samples = TRAIN_RECORDS;
  m.bytes_down = b->model_len;
  if (train) {
    m.has_train = true;
    m.train_loss = 2.25;
    m.bytes_up = b->n_params * 4;
  }
  *out = m;
  env->body_case = XFED__ENVELOPE__BODY_METRICS;
  env->metrics = out;
}

/* Sends what the upload allows now: Metrics, TensorBegin, the chunks while
 * the connection takes them, TensorEnd. */
static void site_pump(site *s) {
  bench *b = s->b;
  while (s->conn && xf_conn_is_open(s->conn) && !b->stopping) {
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    Xfed__TensorBegin begin = XFED__TENSOR_BEGIN__INIT;
    Xfed__TensorChunk chunk = XFED__TENSOR_CHUNK__INIT;
    Xfed__TensorEnd end = XFED__TENSOR_END__INIT;
    Xfed__Metrics metrics;
    const uint8_t *data = s->sealed ? s->sealed : b->delta;
    uint64_t total = s->sealed ? s->sealed_len : (uint64_t)b->n_params * 4;
    size_t chunk_bytes = s->sealed ? XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES : CHUNK;
    size_t len = 0;
    switch (s->up) {
    case UP_NONE:
    case UP_HELD:
    case UP_AWAIT_ACK:
    case UP_AWAIT_FINAL: return;
    case UP_METRICS:
      fill_metrics(s, true, &metrics, &env);
      break;
    case UP_BEGIN:
      begin.stream_id = s->up_stream;
      begin.kind = XFED__TENSOR_BEGIN__KIND__UPDATE;
      begin.total_bytes = total;
      begin.chunk_bytes = (uint32_t)chunk_bytes;
      begin.dtype = XFED__TENSOR_BEGIN__DTYPE__F32;
      begin.element_count = b->n_params;
      begin.digest.data = s->sealed ? s->sealed_digest.bytes : b->delta_digest.bytes;
      if (s->sealed) {
        begin.sealed_by.data = s->epk;
        begin.sealed_by.len = sizeof(s->epk);
        begin.sealed_chunk = XF_SEAL_STREAM_CHUNK;
      }
      begin.digest.len = XF_DIGEST_BYTES;
      begin.job_id = s->job_id;
      begin.round = s->round;
      begin.weight = TRAIN_RECORDS;
      begin.attempt = s->attempt;
      env.body_case = XFED__ENVELOPE__BODY_TENSOR_BEGIN;
      env.tensor_begin = &begin;
      break;
    case UP_CHUNKS:
      if (s->up_offset >= total) {
        s->up = UP_END;
        continue;
      }
      len = total - s->up_offset < chunk_bytes ? (size_t)(total - s->up_offset) : chunk_bytes;
      chunk.stream_id = s->up_stream;
      chunk.index = s->up_offset / chunk_bytes;
      chunk.offset = s->up_offset;
      chunk.data.data = (uint8_t *)data + s->up_offset;
      chunk.data.len = len;
      env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
      env.tensor_chunk = &chunk;
      break;
    case UP_END:
      end.stream_id = s->up_stream;
      env.body_case = XFED__ENVELOPE__BODY_TENSOR_END;
      env.tensor_end = &end;
      break;
    }
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_conn_send(s->conn, &env, &err);
    if (rc == XF_ERANGE) return; /* busy: on_drain pumps again */
    if (rc != XF_OK) {
      bench_fail(b, "%s: cannot send the update: %s", s->name, err.msg);
      return;
    }
    switch (s->up) {
    case UP_METRICS: s->up = UP_BEGIN; break;
    case UP_BEGIN: s->up = UP_AWAIT_ACK; return;
    case UP_CHUNKS: s->up_offset += len; break;
    case UP_END: s->up = UP_AWAIT_FINAL; return;
    default: break;
    }
  }
}

static round_times *round_of(bench *b, uint32_t round) {
  return round >= 1 && round <= b->o->rounds ? &b->rt[round] : NULL;
}

static void on_offer(site *s, const Xfed__TaskOffer *o) {
  bench *b = s->b;
  double t = now_s();
  site_drop_task(s);
  snprintf(s->job_id, sizeof(s->job_id), "%s", o->job_id ? o->job_id : "");
  s->round = o->round;
  s->attempt = o->attempt;
  s->model_round = o->model_round;
  s->model_stream = o->model_stream_id;
  s->offered_update_stream = o->update_stream_id;
  s->eval = o->evaluate_only;
  s->hold = o->hold && !o->evaluate_only;
  s->go = false;
  s->seal = o->seal_key.len == XF_SEAL_PUBLICKEYBYTES;
  if (s->seal) memcpy(s->seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  Xfed__TaskAccept a = XFED__TASK_ACCEPT__INIT;
  a.job_id = s->job_id;
  a.round = s->round;
  a.attempt = s->attempt;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_ACCEPT;
  env.task_accept = &a;
  if (!send_env(b, s->conn, &env, s->name)) return;
  if (s->eval) {
    /* Evaluation only: the model stream that follows is ignored. */
    Xfed__Metrics m;
    Xfed__Envelope menv = XFED__ENVELOPE__INIT;
    fill_metrics(s, false, &m, &menv);
    if (!send_env(b, s->conn, &menv, s->name)) return;
    if (!b->evals++) b->t_first_eval = t;
    return;
  }
  round_times *r = round_of(b, o->round);
  if (!r) {
    bench_fail(b, "%s: offered round %u of a %u-round job", s->name, (unsigned)o->round,
               (unsigned)b->o->rounds);
    return;
  }
  if (!r->offers) {
    r->first_offer = t;
    if (o->round == 1) {
      b->t_first_offer = t;
      b->coord_cpu_first_offer = proc_cpu_s(b->coord);
      b->self_cpu_first_offer = self_cpu_s();
    }
  }
  r->offers++;
  if (o->attempt > r->max_attempt) r->max_attempt = o->attempt;
}

static xf_err model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  site *s = user;
  XF_ENSURE(s->model_buf && offset <= s->model_len && len <= s->model_len - offset, err,
            XF_ERANGE, "model chunk at %" PRIu64 " is outside the model", offset);
  memcpy(s->model_buf + offset, data, len);
  return XF_OK;
}

static void send_ack(site *s, uint64_t stream, uint64_t next) {
  Xfed__TensorAck a = XFED__TENSOR_ACK__INIT;
  a.stream_id = stream;
  a.next_offset = next;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &a;
  (void)send_env(s->b, s->conn, &env, s->name);
}

static bool is_model_stream(const site *s, uint64_t stream) {
  return !s->eval && s->model_stream && stream == s->model_stream;
}

static void on_model_begin(site *s, const Xfed__TensorBegin *m) {
  bench *b = s->b;
  if (s->eval && m->stream_id == s->model_stream) return;
  if (!is_model_stream(s, m->stream_id) || m->kind != XFED__TENSOR_BEGIN__KIND__MODEL) {
    bench_fail(b, "%s: TensorBegin of stream %" PRIu64 " (kind %d) matches no task", s->name,
               m->stream_id, (int)m->kind);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_tensor_receiver_free(s->model_rx);
  s->model_rx = NULL;
  xf_free(s->model_buf);
  s->model_len = (size_t)m->total_bytes;
  s->model_buf = xf_malloc(s->model_len ? s->model_len : 1);
  if (!s->model_buf ||
      xf_tensor_receiver_new(MODEL_MAX, model_sink, s, &s->model_rx, &err) != XF_OK ||
      xf_tensor_receiver_begin(s->model_rx, m, &err) != XF_OK) {
    bench_fail(b, "%s: model stream: %s", s->name, err.msg[0] ? err.msg : "out of memory");
    return;
  }
  Xfed__TensorAck a;
  xf_tensor_receiver_ack(s->model_rx, &a);
  send_ack(s, a.stream_id, a.next_offset);
}

static void on_model_chunk(site *s, const Xfed__TensorChunk *m) {
  if (s->eval && m->stream_id == s->model_stream) return;
  if (!s->model_rx || !is_model_stream(s, m->stream_id)) {
    bench_fail(s->b, "%s: TensorChunk of stream %" PRIu64 " matches no task", s->name,
               m->stream_id);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tensor_receiver_chunk(s->model_rx, m, &err) != XF_OK)
    bench_fail(s->b, "%s: model chunk: %s", s->name, err.msg);
}

static void on_model_end(site *s, const Xfed__TensorEnd *m) {
  bench *b = s->b;
  if (s->eval && m->stream_id == s->model_stream) return;
  if (!s->model_rx || !is_model_stream(s, m->stream_id)) {
    bench_fail(b, "%s: TensorEnd of stream %" PRIu64 " matches no task", s->name, m->stream_id);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tensor_receiver_end(s->model_rx, m, &err) != XF_OK) {
    bench_fail(b, "%s: model stream: %s", s->name, err.msg);
    return;
  }
  send_ack(s, m->stream_id, s->model_len);
  xf_model *model = NULL;
  float *params = NULL;
  if (xf_checkpoint_decode(s->model_buf, s->model_len, &model, &params, &err) != XF_OK) {
    bench_fail(b, "%s: the model does not decode: %s", s->name, err.msg);
    return;
  }
  size_t n = xf_model_num_params(model);
  xf_model_free(model);
  xf_free(params);
  size_t model_len = s->model_len;
  site_drop_task(s);
  if (n != b->n_params || model_len != b->model_len) {
    bench_fail(b, "%s: a model of %zu parameters in %zu bytes, not %zu in %zu", s->name, n,
               model_len, b->n_params, b->model_len);
    return;
  }
  round_times *r = round_of(b, s->round);
  if (r) r->last_model = now_s();
  s->up_stream = s->offered_update_stream
                     ? s->offered_update_stream
                     : (uint64_t)s->round << 16 | (uint64_t)s->attempt << 1 | 1;
  s->up_offset = 0;
  if (s->seal) {
    /* What a real site does after training: seal the update (and hash it). */
    char ctx[256];
    size_t ctx_len =
        xf_seal_stream_context(ctx, sizeof(ctx), s->job_id, s->round, s->attempt, s->name);
    xf_seal_sender *ss = NULL;
    xf_err rc = xf_seal_sender_new(s->seal_pk, (const uint8_t *)ctx, ctx_len, &ss, s->epk);
    if (rc == XF_OK)
      rc = xf_seal_stream(ss, b->delta, b->n_params * 4, XF_SEAL_STREAM_CHUNK, &s->sealed,
                          &s->sealed_len);
    xf_seal_sender_free(ss);
    if (rc != XF_OK) {
      bench_fail(b, "%s: cannot seal the update", s->name);
      return;
    }
    xf_digest_buf(s->sealed, s->sealed_len, &s->sealed_digest);
  }
  /* A held task trains, here at once, only on its TaskGo. */
  s->up = s->hold && !s->go ? UP_HELD : UP_METRICS;
  site_pump(s);
}

/* The aggregator confirms a held task: enough sites accepted. */
static void on_go(site *s, const Xfed__TaskGo *g) {
  if (!s->hold || strcmp(g->job_id ? g->job_id : "", s->job_id) != 0 || g->round != s->round ||
      g->attempt != s->attempt)
    return; /* a go for a task this site no longer holds: the real site ignores it too */
  s->go = true;
  if (s->up == UP_HELD) {
    s->up = UP_METRICS;
    site_pump(s);
  }
}

static void on_site_ack(site *s, const Xfed__TensorAck *a) {
  bench *b = s->b;
  if (a->stream_id != s->up_stream) return;
  uint64_t total = s->sealed ? s->sealed_len : (uint64_t)b->n_params * 4;
  uint64_t chunk_bytes = s->sealed ? XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES : CHUNK;
  if (s->up == UP_AWAIT_ACK) {
    if (a->next_offset > total || a->next_offset % chunk_bytes != 0) {
      bench_fail(b, "%s: TensorAck at %" PRIu64 " of a %" PRIu64 "-byte update", s->name,
                 a->next_offset, total);
      return;
    }
    s->up_offset = a->next_offset;
    s->up = UP_CHUNKS;
    site_pump(s);
  } else if (s->up == UP_AWAIT_FINAL && a->next_offset == total) {
    s->up = UP_NONE;
    round_times *r = round_of(b, s->round);
    if (r) {
      r->last_final_ack = now_s();
      r->final_acks++;
    }
  }
}

static void site_frame(site *s, const Xfed__Envelope *env) {
  bench *b = s->b;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(s, env->task_offer); return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: on_model_begin(s, env->tensor_begin); return;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK: on_model_chunk(s, env->tensor_chunk); return;
  case XFED__ENVELOPE__BODY_TENSOR_END: on_model_end(s, env->tensor_end); return;
  case XFED__ENVELOPE__BODY_TENSOR_ACK: on_site_ack(s, env->tensor_ack); return;
  case XFED__ENVELOPE__BODY_TASK_GO: on_go(s, env->task_go); return;
  case XFED__ENVELOPE__BODY_TASK_CANCEL:
    bench_fail(b, "%s: task cancelled (job %s round %u): %s", s->name,
               env->task_cancel->job_id ? env->task_cancel->job_id : "",
               (unsigned)env->task_cancel->round,
               env->task_cancel->reason ? env->task_cancel->reason : "");
    return;
  case XFED__ENVELOPE__BODY_ERROR:
    bench_fail(b, "%s: the coordinator sent Error %u: %s", s->name, (unsigned)env->error->code,
               env->error->message ? env->error->message : "");
    return;
  default: return;
  }
}

/* ---- the user ------------------------------------------------------------------------------- */

static void cli_submit(cli *u) {
  bench *b = u->b;
  char spec[1024];
  job_spec_text(b->o, spec, sizeof(spec));
  Xfed__JobSubmit m = XFED__JOB_SUBMIT__INIT;
  m.spec_json = spec;
  m.origin = "xfed-bench-round";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_SUBMIT;
  env.job_submit = &m;
  if (send_env(b, u->conn, &env, "user")) {
    u->st = CLI_SUBMITTED;
    u->submit_tries++;
  }
}

static void cli_query(cli *u) {
  Xfed__JobQuery m = XFED__JOB_QUERY__INIT;
  m.job_id = u->job_id;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
  env.job_query = &m;
  if (send_env(u->b, u->conn, &env, "user")) u->st = CLI_QUERYING;
}

static void bench_done(bench *b);
/* The tiered mode's parts of the loop (below). */
static void driver_ready(bench *b);
static void driver_tick(bench *b);
static void tier_tick(bench *b);
static bool tier_all_ready(bench *b);
static void tier_accepted(bench *b);
static void tier_done(bench *b);

static void cli_frame(cli *u, const Xfed__Envelope *env) {
  bench *b = u->b;
  double t = now_s();
  if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
    /* A submit can come before the coordinator has taken every announce:
     * "no such dataset" before the first, "too few sites" (denied) before
     * the last. The announces are on their way, so try again for a while. */
    if (u->st == CLI_SUBMITTED &&
        (env->error->code == XF_ENOENT || env->error->code == XF_EDENIED) &&
        (u->submit_tries < 600 || b->tier)) { /* the tiered mode: until --timeout */
      u->st = CLI_READY;
      u->next_action = t + 0.1;
      return;
    }
    bench_fail(b, "user: the coordinator sent Error %u: %s", (unsigned)env->error->code,
               env->error->message ? env->error->message : "");
    return;
  }
  if (env->body_case != XFED__ENVELOPE__BODY_JOB_LIST) return;
  const Xfed__JobList *l = env->job_list;
  if (l->n_jobs != 1 || !l->jobs[0]->job_id || !l->jobs[0]->state) {
    bench_fail(b, "user: a JobList of %zu jobs", l->n_jobs);
    return;
  }
  const Xfed__JobInfo *j = l->jobs[0];
  if (u->st == CLI_SUBMITTED && b->tier) tier_accepted(b);
  snprintf(u->job_id, sizeof(u->job_id), "%s", j->job_id);
  snprintf(u->last_state, sizeof(u->last_state), "%s", j->state);
  if (strcmp(j->state, "failed") == 0 || strcmp(j->state, "cancelled") == 0) {
    bench_fail(b, "job %s is %s: %s", j->job_id, j->state, j->message ? j->message : "");
    return;
  }
  if (strcmp(j->state, "done") == 0) {
    u->st = CLI_DONE;
    bench_done(b);
    return;
  }
  u->st = CLI_RUNNING;
  u->next_action = t + 0.2;
}

/* ---- connections ---------------------------------------------------------------------------- */

/* The run of this process; each connection's user pointer is one of its
 * sites or its user. */
static bench *g_bench;

static xf_conn_opts conn_opts(void *user);

/* Sites dial in a window of DIAL_WINDOW handshakes at a time, the next one
 * as soon as one has its session, as a thousand site daemons starting behind
 * one address would reach the coordinator over a few seconds: all at once
 * they would be more unauthenticated connections from one address than the
 * coordinator keeps (max_unauthenticated_connections_per_address), and it
 * would drop the oldest handshakes for the newest. */
static void dial_sites(bench *b) {
  xf_errctx err;
  xf_errctx_clear(&err);
  while (!b->failed && b->dialed < b->nsites && b->handshaking < DIAL_WINDOW) {
    site *s = &b->sites[b->dialed++];
    xf_conn_opts so = conn_opts(s);
    if (make_tls(b->p, s->name, &s->tls, &err) != XF_OK ||
        xf_dial(&b->loop, s->tls, b->host, b->port, &so, &s->conn, &err) != XF_OK) {
      bench_fail(b, "%s: cannot connect: %s", s->name, err.msg);
      return;
    }
    s->closed = false;
    b->handshaking++;
  }
}

static site *as_site(xf_conn *c) {
  void *u = xf_conn_user(c);
  return u == &g_bench->user ? NULL : u;
}

static xf_err on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  bench *b = g_bench;
  site *s = as_site(c);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (peer->kind != XF_PKI_KIND_COORDINATOR) {
    bench_fail(b, "the peer is not a coordinator");
    return XF_EDENIED;
  }
  xf_err rc = xf_session_start(s ? &s->session : &b->user.session, c, s ? "site" : "cli", 0, &err);
  if (rc != XF_OK) bench_fail(b, "%s: hello: %s", s ? s->name : "user", err.msg);
  return rc;
}

static void on_frame(xf_conn *c, const Xfed__Envelope *env) {
  bench *b = g_bench;
  site *s = as_site(c);
  xf_session_event ev;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_on_frame(s ? &s->session : &b->user.session, c, env, &ev, &err) != XF_OK) {
    bench_fail(b, "%s: session: %s", s ? s->name : "user", err.msg);
    return;
  }
  if (ev == XF_SESSION_OPENED) {
    if (!s) {
      b->user.st = CLI_READY;
      return;
    }
    b->handshaking--;
    dial_sites(b);
    Xfed__SiteAnnounce__Dataset d = XFED__SITE_ANNOUNCE__DATASET__INIT;
    d.name = DATASET;
    d.classification = "internal";
    d.train_records = TRAIN_RECORDS;
    d.test_records = TEST_RECORDS;
    d.classes = 10;
    d.height = 28;
    d.width = 28;
    d.channels = 1;
    Xfed__SiteAnnounce__Dataset *ds[] = {&d};
    Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
    a.site = s->name;
    a.region = b->region_label;
    a.n_datasets = 1;
    a.datasets = ds;
    a.backend = "cpu";
    a.threads = 1;
    Xfed__Envelope out = XFED__ENVELOPE__INIT;
    out.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
    out.site_announce = &a;
    if (send_env(b, c, &out, s->name)) {
      s->announced = true;
      if (++b->n_announced == b->nsites && b->driver) driver_ready(b);
    }
    return;
  }
  if (ev != XF_SESSION_FRAME || b->stopping) return;
  if (s) site_frame(s, env);
  else cli_frame(&b->user, env);
}

static void on_drain(xf_conn *c) {
  site *s = as_site(c);
  if (s) site_pump(s);
}

static void maybe_end_loop(bench *b);

static void on_close(xf_conn *c, const xf_conn_reason *why) {
  bench *b = g_bench;
  site *s = as_site(c);
  if (s) {
    s->conn = NULL;
    s->closed = true;
  } else {
    b->user.conn = NULL;
    b->user.closed = true;
  }
  if (!b->stopping)
    bench_fail(b, "%s: the connection closed: %s (%s)", s ? s->name : "user",
               xf_conn_end_message(why->end), why->msg);
  maybe_end_loop(b);
}

static void maybe_end_loop(bench *b) {
  if (!b->stopping) return;
  for (int i = 0; i < b->nsites; i++)
    if (!b->sites[i].closed) return;
  if (!b->user.closed) return;
  if (!uv_is_closing((uv_handle_t *)&b->tick)) uv_close((uv_handle_t *)&b->tick, NULL);
}

static void bench_done(bench *b) {
  if (b->tier) {
    tier_done(b);
    return;
  }
  b->t_done = now_s();
  b->coord_cpu_done = proc_cpu_s(b->coord);
  b->self_cpu_done = self_cpu_s();
  /* Peak memory just before the stop; the stop itself allocates nothing big. */
  b->vmhwm_kib = proc_status_kib(b->coord, "VmHWM");
  b->vmrss_kib = proc_status_kib(b->coord, "VmRSS");
  b->stopping = true;
  b->stop_deadline = now_s() + 15;
  /* SIGTERM: the coordinator closes every connection and exits. */
  if (kill(b->coord, SIGTERM) != 0) bench_fail(b, "cannot signal the coordinator");
  b->term_sent = true;
  maybe_end_loop(b);
}

static void on_tick(uv_timer_t *t) {
  bench *b = t->data;
  double now = now_s();
  if (b->stopping) {
    if (now > b->stop_deadline) close_all(b);
    maybe_end_loop(b);
    return;
  }
  if (b->driver) driver_tick(b);
  else if (b->tier) tier_tick(b);
  int status;
  if (b->failed || b->stopping) return;
  if (b->coord > 0 && waitpid(b->coord, &status, WNOHANG) == b->coord) {
    g_children[CHILD_COORD] = 0;
    b->coord = 0;
    bench_fail(b, "the coordinator exited during the run (status %d)",
               WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return;
  }
  if (now > b->deadline) {
    bench_fail(b, "the run took longer than --timeout %.0f s (job state: %s)", b->o->timeout_s,
               b->user.last_state[0] ? b->user.last_state : "not submitted");
    return;
  }
  cli *u = &b->user;
  if (b->driver) return;
  if (u->st == CLI_READY && now >= u->next_action) {
    if (b->tier ? tier_all_ready(b) : b->n_announced == b->nsites) cli_submit(u);
  } else if (u->st == CLI_RUNNING && now >= u->next_action) {
    cli_query(u);
  }
}

static xf_conn_opts conn_opts(void *user) {
  xf_conn_opts o = {.on_connect = on_connect, .on_frame = on_frame, .on_drain = on_drain,
                    .on_close = on_close, .user = user,
                    .handshake_timeout_ms = BENCH_HANDSHAKE_MS};
  return o;
}

/* Runs the federated job; false with b->why on failure. */
static bool run_rounds(bench *b) {
  xf_errctx err;
  xf_errctx_clear(&err);
  int n = b->nsites;
  if (uv_loop_init(&b->loop) != 0) {
    snprintf(b->why, sizeof(b->why), "cannot start the loop");
    b->failed = true;
    return false;
  }
  uv_timer_init(&b->loop, &b->tick);
  b->tick.data = b;
  uv_timer_start(&b->tick, on_tick, 20, 20);
  b->started = now_s();
  b->deadline = b->started + b->o->timeout_s;
  b->user.b = b;
  b->user.closed = true; /* until dialed */
  for (int i = 0; i < n; i++) b->sites[i].closed = true;
  bool ok = true;
  if (!b->driver) { /* the user, who submits the job and polls it */
    ok = make_tls(b->p, "researcher", &b->user.tls, &err) == XF_OK;
    xf_conn_opts uo = conn_opts(&b->user);
    if (ok && xf_dial(&b->loop, b->user.tls, b->host, b->port, &uo, &b->user.conn, &err) == XF_OK)
      b->user.closed = false;
    else
      ok = false;
  }
  for (int i = 0; i < n; i++) {
    b->sites[i].b = b;
    site_name(b->region, i, b->sites[i].name, sizeof(b->sites[i].name));
  }
  b->t_dial = now_s();
  if (!ok) bench_fail(b, "cannot connect: %s", err.msg);
  else dial_sites(b);
  uv_run(&b->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&b->loop) != 0) fprintf(stderr, "xfed-bench-round: handles left on the loop\n");
  for (int i = 0; i < n; i++) {
    site_drop_task(&b->sites[i]);
    xf_tls_free(b->sites[i].tls);
  }
  xf_tls_free(b->user.tls);
  return !b->failed;
}

/* ---- the TLS baseline ----------------------------------------------------------------------- */

/* One side of a baseline connection. */
typedef struct tls_peer {
  xf_conn *conn;
  uint64_t sent, received;
  bool sending, closed;
} tls_peer;

typedef struct tls_run {
  uv_loop_t loop;
  uv_timer_t watchdog;
  xf_tls *tls;
  xf_listener *listener;
  bool server, failed;
  char why[512];
  int n, connected, closed, rep, reps, done;
  size_t down_len, up_len; /* server to client, client to server */
  tls_peer *peers;
  double t0;
  double *times;
  double cpu0, cpu; /* this process's CPU seconds: at the first repetition, over all of them */
  int port_fd, result_fd;
  int region;       /* whose sites' certificates: -1 in the flat mode */
  const char *host; /* the server's address */
  /* The tiered mode: the server says "ready" once every client is in and
   * "T0 T1" (monotonic seconds) after each repetition on sync_fd, and starts
   * each repetition only on a "go" line on go_fd; -1 in the flat mode. */
  int sync_fd, go_fd;
} tls_run;

/* Where one baseline runs: which region's sites, the server's address, and
 * the tiered mode's barrier (tls_run.sync_fd, go_fd). */
typedef struct tls_plan {
  int region;
  const char *host;
  int sync_fd, go_fd;
} tls_plan;

static tls_run *g_tls;
static uint8_t g_payload[CHUNK];

static void tls_fail(tls_run *r, const char *what, const char *msg) {
  if (!r->failed) snprintf(r->why, sizeof(r->why), "%.100s: %.400s", what, msg);
  r->failed = true;
  for (int i = 0; i < r->n; i++)
    if (r->peers[i].conn) xf_conn_close(r->peers[i].conn);
  if (r->listener) {
    xf_listener_close(r->listener, NULL);
    r->listener = NULL;
  }
}

/* Sends the rest of this peer's share of a repetition while the
 * connection takes it. */
static void tls_pump(tls_run *r, tls_peer *p) {
  size_t total = r->server ? r->down_len : r->up_len;
  while (p->sending && p->conn && p->sent < total) {
    size_t len = total - p->sent < CHUNK ? (size_t)(total - p->sent) : CHUNK;
    Xfed__TensorChunk chunk = XFED__TENSOR_CHUNK__INIT;
    chunk.stream_id = 1;
    chunk.index = p->sent / CHUNK;
    chunk.offset = p->sent;
    chunk.data.data = g_payload;
    chunk.data.len = len;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
    env.tensor_chunk = &chunk;
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_conn_send(p->conn, &env, &err);
    if (rc == XF_ERANGE) return;
    if (rc != XF_OK) {
      tls_fail(r, "send", err.msg);
      return;
    }
    p->sent += len;
  }
  if (p->sent >= total) p->sending = false;
}

static void tls_start_rep(tls_run *r) {
  r->done = 0;
  r->t0 = now_s();
  if (r->rep == 0) r->cpu0 = self_cpu_s();
  for (int i = 0; i < r->n; i++) {
    r->peers[i].sent = r->peers[i].received = 0;
    r->peers[i].sending = true;
  }
  for (int i = 0; i < r->n; i++) tls_pump(r, &r->peers[i]);
}

static bool read_line(int fd, char *buf, size_t n, double timeout_s);

/* The server: the next repetition, in the tiered mode once the orchestrator
 * says go (the loop waits here; the clients are idle until then). */
static void tls_next_rep(tls_run *r) {
  char line[16];
  if (r->go_fd >= 0 && !read_line(r->go_fd, line, sizeof(line), 600)) {
    tls_fail(r, "baseline", "no go from the orchestrator");
    return;
  }
  tls_start_rep(r);
}

static xf_err tls_on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  tls_run *r = g_tls;
  (void)peer;
  /* No hello in the baseline: the peer is trusted as soon as TLS is up. */
  XF_GUARD(xf_conn_authenticated(c, 0, NULL));
  if (!r->server) return XF_OK;
  if (r->connected >= r->n) return XF_EDENIED;
  tls_peer *p = &r->peers[r->connected++];
  p->conn = c;
  xf_conn_set_user(c, p);
  if (r->connected == r->n) {
    xf_listener_close(r->listener, NULL);
    r->listener = NULL;
    if (r->sync_fd >= 0 && dprintf(r->sync_fd, "ready\n") < 0) {
      tls_fail(r, "baseline", "cannot tell the orchestrator");
      return XF_OK;
    }
    tls_next_rep(r);
  }
  return XF_OK;
}

static void tls_on_frame(xf_conn *c, const Xfed__Envelope *env) {
  tls_run *r = g_tls;
  tls_peer *p = xf_conn_user(c);
  if (env->body_case != XFED__ENVELOPE__BODY_TENSOR_CHUNK || !p) return;
  p->received += env->tensor_chunk->data.len;
  if (!r->server) {
    if (p->received == r->down_len) { /* all of it: answer with the update */
      p->received = 0;
      p->sent = 0;
      p->sending = true;
      tls_pump(r, p);
    }
    return;
  }
  if (p->received != r->up_len) return;
  if (++r->done < r->n) return;
  double t1 = now_s();
  r->times[r->rep++] = t1 - r->t0;
  if (r->rep == r->reps) r->cpu = self_cpu_s() - r->cpu0;
  if (r->sync_fd >= 0 && dprintf(r->sync_fd, "%.9f %.9f\n", r->t0, t1) < 0) {
    tls_fail(r, "baseline", "cannot tell the orchestrator");
    return;
  }
  if (r->rep < r->reps) {
    tls_next_rep(r);
    return;
  }
  for (int i = 0; i < r->n; i++) xf_conn_close(r->peers[i].conn);
}

static void tls_on_drain(xf_conn *c) {
  tls_peer *p = xf_conn_user(c);
  if (p) tls_pump(g_tls, p);
}

/* Once every connection has closed, nothing but the watchdog is left. */
static void tls_maybe_finish(tls_run *r) {
  if (r->closed < r->n) return;
  if (!uv_is_closing((uv_handle_t *)&r->watchdog)) uv_close((uv_handle_t *)&r->watchdog, NULL);
  if (r->listener) {
    xf_listener_close(r->listener, NULL);
    r->listener = NULL;
  }
}

static void tls_on_close(xf_conn *c, const xf_conn_reason *why) {
  tls_run *r = g_tls;
  tls_peer *p = xf_conn_user(c);
  if (p && p != (void *)r) {
    p->conn = NULL;
    p->closed = true;
  }
  bool clean = why->end == XF_CONN_END_CLOSED || why->end == XF_CONN_END_PEER_CLOSED;
  if (!clean) tls_fail(r, "connection", why->msg);
  r->closed++;
  tls_maybe_finish(r);
}

static void tls_on_watchdog(uv_timer_t *t) {
  tls_run *r = t->data;
  tls_fail(r, "baseline", "took longer than its time limit");
  if (!uv_is_closing((uv_handle_t *)&r->watchdog)) uv_close((uv_handle_t *)&r->watchdog, NULL);
}

static xf_conn_opts tls_opts(void *user) {
  xf_conn_opts o = {.on_connect = tls_on_connect, .on_frame = tls_on_frame,
                    .on_drain = tls_on_drain, .on_close = tls_on_close, .user = user,
                    .handshake_timeout_ms = BENCH_HANDSHAKE_MS,
                    .idle_timeout_ms = BENCH_HANDSHAKE_MS};
  return o;
}

static bool write_all(int fd, const char *buf, size_t len) {
  while (len) {
    ssize_t w = write(fd, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    buf += w;
    len -= (size_t)w;
  }
  return true;
}

/* The baseline's server, in the forked child: returns the exit status. */
static int tls_server_main(tls_run *r, const bench_paths *p, double timeout_s) {
  xf_errctx err;
  xf_errctx_clear(&err);
  g_tls = r;
  r->server = true;
  if (uv_loop_init(&r->loop) != 0) return 1;
  if (make_tls(p, "coord", &r->tls, &err) != XF_OK) {
    fprintf(stderr, "baseline server: %s\n", err.msg);
    return 1;
  }
  xf_conn_opts o = tls_opts(r);
  if (xf_listen(&r->loop, r->tls, r->host, 0, &o, &r->listener, &err) != XF_OK) {
    fprintf(stderr, "baseline server: %s\n", err.msg);
    return 1;
  }
  char line[64];
  int len = snprintf(line, sizeof(line), "%d\n", xf_listener_port(r->listener));
  if (!write_all(r->port_fd, line, (size_t)len)) return 1;
  close(r->port_fd);
  uv_timer_init(&r->loop, &r->watchdog);
  r->watchdog.data = r;
  uv_timer_start(&r->watchdog, tls_on_watchdog, (uint64_t)(timeout_s * 1000), 0);
  uv_run(&r->loop, UV_RUN_DEFAULT);
  uv_loop_close(&r->loop);
  xf_tls_free(r->tls);
  if (r->failed || r->rep < r->reps) {
    fprintf(stderr, "baseline server: %s\n", r->failed ? r->why : "ended early");
    return 1;
  }
  /* The times, in text, one line. */
  char *out = xf_malloc((size_t)r->reps * 32 + 64);
  if (!out) return 1;
  size_t at = 0;
  for (int i = 0; i < r->reps; i++) at += (size_t)sprintf(out + at, "%.9f ", r->times[i]);
  at += (size_t)sprintf(out + at, "cpu=%.6f\n", r->cpu);
  bool ok = write_all(r->result_fd, out, at);
  xf_free(out);
  return ok ? 0 : 1;
}

/* Reads one line from fd within timeout_s; false on end of file or timeout. */
static bool read_line(int fd, char *buf, size_t n, double timeout_s) {
  size_t at = 0;
  double until = now_s() + timeout_s;
  while (at + 1 < n) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int left = (int)((until - now_s()) * 1000);
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

/* Runs `reps` repetitions of the baseline: times[reps] in seconds and *cpu, the CPU seconds of
 * the server over its repetitions plus those of the clients over the whole
 * run (their handshakes included); false with why on failure. */
static bool run_tls_baseline(const bench_opts *o, const bench_paths *p, const tls_plan *plan,
                             size_t down_len, size_t up_len, int reps, double *times,
                             double *cpu, char *why, size_t why_n) {
  for (size_t i = 0; i < sizeof(g_payload); i++) g_payload[i] = (uint8_t)(i * 2654435761u >> 13);
  int port_pipe[2], result_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(result_pipe) != 0) {
    snprintf(why, why_n, "pipe: %s", strerror(errno));
    return false;
  }
  tls_run r;
  memset(&r, 0, sizeof(r));
  r.n = o->sites;
  r.region = plan->region;
  r.host = plan->host;
  r.sync_fd = plan->sync_fd;
  r.go_fd = plan->go_fd;
  r.reps = reps;
  r.down_len = down_len;
  r.up_len = up_len;
  r.peers = xf_calloc((size_t)r.n, sizeof(*r.peers));
  r.times = times;
  if (!r.peers) {
    snprintf(why, why_n, "out of memory");
    return false;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, why_n, "fork: %s", strerror(errno));
    xf_free(r.peers);
    return false;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    close(port_pipe[0]);
    close(result_pipe[0]);
    r.port_fd = port_pipe[1];
    r.result_fd = result_pipe[1];
    _exit(tls_server_main(&r, p, o->timeout_s));
  }
  g_children[CHILD_TLS] = pid;
  close(port_pipe[1]);
  close(result_pipe[1]);
  bool ok = false;
  char line[8192];
  xf_tls **tls = xf_calloc((size_t)r.n, sizeof(*tls));
  xf_errctx err;
  xf_errctx_clear(&err);
  if (!tls || !read_line(port_pipe[0], line, sizeof(line), 30)) {
    snprintf(why, why_n, "the baseline server did not start");
    goto out;
  }
  int port = atoi(line);
  g_tls = &r;
  r.server = false;
  r.rep = 0;
  if (uv_loop_init(&r.loop) != 0) {
    snprintf(why, why_n, "cannot start the loop");
    goto out;
  }
  uv_timer_init(&r.loop, &r.watchdog);
  r.watchdog.data = &r;
  uv_timer_start(&r.watchdog, tls_on_watchdog, (uint64_t)(o->timeout_s * 1000), 0);
  for (int i = 0; i < r.n; i++) {
    char name[32];
    site_name(r.region, i, name, sizeof(name));
    xf_conn_opts co = tls_opts(&r.peers[i]);
    if (make_tls(p, name, &tls[i], &err) != XF_OK ||
        xf_dial(&r.loop, tls[i], r.host, port, &co, &r.peers[i].conn, &err) != XF_OK) {
      tls_fail(&r, "dial", err.msg);
      r.closed += r.n - i; /* never made; the dialed ones close and end the loop */
      tls_maybe_finish(&r);
      break;
    }
  }
  double cpu0 = self_cpu_s();
  uv_run(&r.loop, UV_RUN_DEFAULT);
  uv_loop_close(&r.loop);
  *cpu = self_cpu_s() - cpu0;
  if (r.failed) {
    snprintf(why, why_n, "baseline client: %s", r.why);
    goto out;
  }
  if (!read_line(result_pipe[0], line, sizeof(line), 30)) {
    snprintf(why, why_n, "the baseline server reported nothing");
    goto out;
  }
  {
    char *at = line;
    for (int i = 0; i < r.reps; i++) {
      char *end;
      times[i] = strtod(at, &end);
      if (end == at) break;
      at = end;
      if (i == r.reps - 1) ok = true;
    }
    char *c = strstr(at, "cpu=");
    if (ok && c) *cpu += strtod(c + 4, NULL);
    if (!ok) snprintf(why, why_n, "the baseline server's report is short: %.400s", line);
  }
out:
  close(port_pipe[0]);
  close(result_pipe[0]);
  {
    int status = 0;
    if (ok) {
      double until = now_s() + 10;
      while (waitpid(pid, &status, WNOHANG) == 0 && now_s() < until) sleep_ms(5);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    g_children[CHILD_TLS] = 0;
  }
  for (int i = 0; tls && i < r.n; i++) xf_tls_free(tls[i]);
  xf_free(tls);
  xf_free(r.peers);
  return ok;
}

/* ---- main ----------------------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: xfed-bench-round [--sites N] [--regions K] [--rounds R]\n"
          "                        [--model fedavg-cnn|lenet5|mlp] [--coord PATH]\n"
          "                        [--tls-reps K] [--timeout S]\n"
          "\n"
          "Runs a federated job of R rounds with N fake sites (no local work) against the\n"
          "real xfed-coord on loopback, then TLS alone carrying the same bytes, and prints\n"
          "the median round, the median TLS repetition, their ratio and the coordinator's\n"
          "peak memory (VmHWM), as a table and one JSON line.\n"
          "With --regions K (tiered): a top coordinator, K regional aggregators\n"
          "(xfed-coord --role regional) and K driver processes of N sites each, a job of\n"
          "the regional topology; the round, CPU and VmHWM of every tier, against TLS\n"
          "alone carrying the site tier's bytes with K servers and K client processes.\n"
          "\n"
          "  --sites N      fake sites (default 8); with --regions, per region\n"
          "  --regions K    regional aggregators, each with its own N sites (default 0:\n"
          "                 every site dials the coordinator)\n"
          "  --rounds R     rounds of the job (default 5)\n"
          "  --model M      fedavg-cnn (default), lenet5, or mlp (200, 200)\n"
          "  --coord PATH   the xfed-coord binary (default: ../coordinator/xfed-coord from\n"
          "                 this program's directory, then beside it, then PATH)\n"
          "  --tls-reps K   repetitions of the TLS baseline (default 7)\n"
          "  --timeout S    give up after S seconds (default 600)\n");
}

static void cpu_name(char *buf, size_t n) {
  snprintf(buf, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    char *colon = strchr(line, ':');
    if (!colon) break;
    colon += 2;
    colon[strcspn(colon, "\n")] = '\0';
    snprintf(buf, n, "%s", colon);
    break;
  }
  fclose(f);
}

/* BLAKE2b (the stream digest) in GB/s over buf, best of 5 passes. */
static double digest_gbps(const uint8_t *buf, size_t len) {
  double best = 0;
  for (int i = 0; i < 5; i++) {
    xf_digest d;
    double t = now_s();
    xf_digest_buf(buf, len, &d);
    t = now_s() - t;
    if (t > 0 && (double)len / t / 1e9 > best) best = (double)len / t / 1e9;
  }
  return best;
}

/* The per-byte work of a round that TLS alone does not do, on one core of
 * this machine, over the round's own sizes: what any implementation of the
 * protocol spends before its first copy or system call. A site verifies the
 * model stream's BLAKE2b and the parameters' digest in the file's header,
 * seals its update (XChaCha20-Poly1305) and hashes the sealed stream for
 * its TensorBegin; the aggregator opens each sealed chunk and verifies each
 * stream's BLAKE2b, and hashes the new model's parameters (the header) and
 * its file (the blob's name) once a round. Unsealed (secure aggregation)
 * streams skip the seal and its opening. Each primitive is timed best of 3
 * on buffers of the round's sizes. */
typedef struct mandated {
  double site_s;  /* one site, one round */
  double coord_s; /* the aggregator, one round of all the sites */
} mandated;

static double best_of_3(void (*f)(void *), void *arg) {
  double best = INFINITY;
  for (int i = 0; i < 3; i++) {
    double t = now_s();
    f(arg);
    t = now_s() - t;
    if (t < best) best = t;
  }
  return best;
}

typedef struct crypto_job {
  const uint8_t *in;
  size_t len;
  xf_seal_sender *ss;
  xf_seal_receiver *sr;
  uint8_t *out;
  bool ok;
} crypto_job;

static void job_hash(void *arg) {
  crypto_job *j = arg;
  xf_digest d;
  xf_digest_buf(j->in, j->len, &d);
}

static void job_seal(void *arg) {
  crypto_job *j = arg;
  for (size_t off = 0; off < j->len; off += XF_SEAL_STREAM_CHUNK) {
    size_t n = j->len - off < XF_SEAL_STREAM_CHUNK ? j->len - off : XF_SEAL_STREAM_CHUNK;
    j->ok &= xf_seal_chunk(j->ss, off, j->in + off, n, j->out + off / XF_SEAL_STREAM_CHUNK *
                                                                (XF_SEAL_STREAM_CHUNK +
                                                                 XF_SEAL_ABYTES)) == XF_OK;
  }
}

static void job_open(void *arg) {
  crypto_job *j = arg;
  uint8_t *plain = j->out;
  const size_t sealed_chunk = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
  for (size_t off = 0, at = 0; off < j->len; off += XF_SEAL_STREAM_CHUNK, at += sealed_chunk) {
    size_t n = j->len - off < XF_SEAL_STREAM_CHUNK ? j->len - off : XF_SEAL_STREAM_CHUNK;
    j->ok &= xf_seal_open_chunk(j->sr, off, j->in + at, n + XF_SEAL_ABYTES, plain + off) == XF_OK;
  }
}

static bool measure_mandated(const bench *b, bool sealed, mandated *m) {
  size_t up = b->n_params * 4;
  size_t chunks = (up + XF_SEAL_STREAM_CHUNK - 1) / XF_SEAL_STREAM_CHUNK;
  size_t sealed_len = up + chunks * XF_SEAL_ABYTES;
  size_t big = b->model_len > sealed_len ? b->model_len : sealed_len;
  uint8_t *buf = xf_calloc(1, big), *sealed_buf = xf_malloc(sealed_len), *plain = xf_malloc(up);
  uint8_t pk[XF_SEAL_PUBLICKEYBYTES], epk[XF_SEAL_PUBLICKEYBYTES];
  uint8_t *sk = xf_malloc(XF_SEAL_SECRETKEYBYTES);
  crypto_job j = {.ok = buf && sealed_buf && plain && sk};
  if (j.ok) j.ok = xf_seal_keypair(pk, sk) == XF_OK;
  if (j.ok) j.ok = xf_seal_sender_new(pk, (const uint8_t *)"bench", 5, &j.ss, epk) == XF_OK;
  if (j.ok) j.ok = xf_seal_receiver_new(sk, epk, (const uint8_t *)"bench", 5, &j.sr) == XF_OK;
  if (j.ok) {
    j.in = buf;
    j.len = b->model_len;
    double model_hash = best_of_3(job_hash, &j);
    j.len = up;
    double params_hash = best_of_3(job_hash, &j);
    j.len = sealed_len;
    double sealed_hash = best_of_3(job_hash, &j);
    double seal = 0, open = 0;
    if (sealed) {
      j.in = buf;
      j.len = up;
      j.out = sealed_buf;
      seal = best_of_3(job_seal, &j);
      j.in = sealed_buf;
      j.out = plain;
      open = best_of_3(job_open, &j);
    }
    double stream_hash = sealed ? sealed_hash : params_hash;
    m->site_s = model_hash + params_hash + seal + stream_hash;
    m->coord_s = (double)b->o->sites * (open + stream_hash) + params_hash + model_hash;
  }
  xf_seal_sender_free(j.ss);
  xf_seal_receiver_free(j.sr);
  if (sk) sodium_memzero(sk, XF_SEAL_SECRETKEYBYTES);
  xf_free(sk);
  xf_free(buf);
  xf_free(sealed_buf);
  xf_free(plain);
  return j.ok;
}

/* The 1-minute load average: how busy the shared machine was. */
static double load_1min(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

static void print_json_list(const double *v, size_t n) {
  printf("[");
  for (size_t i = 0; i < n; i++) printf("%s%.6f", i ? ", " : "", v[i]);
  printf("]");
}

/* Waits for the coordinator, which was sent SIGTERM when the job finished
 * (now, after a failure), to exit: false with b->why unless it exits 0
 * within 15 s. */
static bool stop_coordinator(bench *b) {
  if (b->coord <= 0) return false;
  if (!b->term_sent) kill(b->coord, SIGTERM);
  int status = 0;
  double until = now_s() + 15;
  pid_t w = 0;
  while ((w = waitpid(b->coord, &status, WNOHANG)) == 0 && now_s() < until) sleep_ms(5);
  if (w != b->coord) {
    if (!b->failed)
      snprintf(b->why, sizeof(b->why), "the coordinator did not exit within 15 s of SIGTERM");
    return false;
  }
  g_children[0] = 0;
  b->coord_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (b->coord_exit == 0) return true;
  if (!b->failed)
    snprintf(b->why, sizeof(b->why), "the coordinator exited with status %d after SIGTERM",
             b->coord_exit);
  return false;
}

/* Every round had every site, in its first attempt, and every site was asked
 * for the final evaluation; false with b->why otherwise. */
static bool check_run(bench *b) {
  int n = b->o->sites;
  for (uint32_t r = 1; r <= b->o->rounds; r++) {
    const round_times *t = &b->rt[r];
    if (t->offers != n || t->final_acks != n || t->max_attempt != 1) {
      snprintf(b->why, sizeof(b->why),
               "round %u: %d offers, %d updates delivered, attempt %u (want %d, %d, 1)",
               (unsigned)r, t->offers, t->final_acks, (unsigned)t->max_attempt, n, n);
      return false;
    }
  }
  if (b->evals != n) {
    snprintf(b->why, sizeof(b->why), "%d of %d sites were asked for the final evaluation",
             b->evals, n);
    return false;
  }
  return true;
}

/* What the run measured: the table, then the JSON line. False when out of
 * memory. */
static bool print_report(const bench *b, const double *tls_times, double tls_cpu,
                         double hash_gbps, const mandated *need, double t_pki,
                         double load_start) {
  const bench_opts *o = b->o;
  uint32_t R = o->rounds;
  size_t reps = (size_t)o->tls_reps;
  size_t up_len = b->n_params * 4;
  double *round_s = xf_calloc(R, sizeof(double)), *down_s = xf_calloc(R, sizeof(double));
  double *cycle_s = xf_calloc(R, sizeof(double));
  double *sorted = xf_calloc(R + reps, sizeof(double));
  if (!round_s || !down_s || !cycle_s || !sorted) {
    xf_free(round_s);
    xf_free(down_s);
    xf_free(cycle_s);
    xf_free(sorted);
    return false;
  }
  for (uint32_t r = 1; r <= R; r++) {
    round_s[r - 1] = b->rt[r].last_final_ack - b->rt[r].first_offer;
    down_s[r - 1] = b->rt[r].last_model - b->rt[r].first_offer;
    if (r < R) cycle_s[r - 1] = b->rt[r + 1].first_offer - b->rt[r].first_offer;
  }
  memcpy(sorted, round_s, R * sizeof(double));
  double round_med = median(sorted, R), round_min = sorted[0], round_max = sorted[R - 1];
  memcpy(sorted, down_s, R * sizeof(double));
  double down_med = median(sorted, R);
  double cycle_med = NAN;
  if (R > 1) {
    memcpy(sorted, cycle_s, (R - 1) * sizeof(double));
    cycle_med = median(sorted, R - 1);
  }
  memcpy(sorted, tls_times, reps * sizeof(double));
  double tls_med = median(sorted, reps), tls_min = sorted[0], tls_max = sorted[reps - 1];
  double ratio = round_med / tls_med;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  /* The floor: TLS alone plus the round's per-byte hashing and sealing
   * spread over every core (the baseline already keeps them all busy). */
  double crypto_cpu = (double)o->sites * need->site_s + need->coord_s;
  double floor_s = tls_med + crypto_cpu / (double)(ncpu > 0 ? ncpu : 1);
  double job_s = b->t_done - b->t_first_offer;
  double coord_cpu = b->coord_cpu_done >= 0 && b->coord_cpu_first_offer >= 0
                         ? b->coord_cpu_done - b->coord_cpu_first_offer
                         : NAN;
  double sites_cpu = b->self_cpu_done - b->self_cpu_first_offer;
  double load_end = load_1min();
  char cpu[256];
  cpu_name(cpu, sizeof(cpu));

  printf("round overhead: %s, %d sites, %u rounds, %zu parameters: model file %zu B down, "
         "update %zu B up per site\n",
         o->model, o->sites, (unsigned)R, b->n_params, b->model_len, up_len);
  printf("| round | TaskOffer to last model received | TaskOffer to last update acked (round) "
         "| TaskOffer to next TaskOffer |\n|---|---|---|---|\n");
  for (uint32_t r = 1; r <= R; r++) {
    printf("| %u | %.3f s | %.3f s | ", (unsigned)r, down_s[r - 1], round_s[r - 1]);
    if (r < R) printf("%.3f s |\n", cycle_s[r - 1]);
    else printf("- |\n");
  }
  printf("TLS alone, same bytes and connections: median %.3f s (%.3f-%.3f) over %zu repetitions; "
         "%.3f CPU s per repetition (server and clients)\n",
         tls_med, tls_min, tls_max, reps, tls_cpu / (double)reps);
  printf("median round %.3f s (%.3f-%.3f); ratio to TLS alone %.2f (target <= 1.5)\n", round_med,
         round_min, round_max, ratio);
  printf("hashing and sealing a round needs %.3f CPU s (sites %.3f, aggregator %.3f) on one "
         "core: with TLS alone, a floor of %.3f s on %ld CPUs, ratio %.2f; the round is %.2f "
         "times that floor\n",
         crypto_cpu, (double)o->sites * need->site_s, need->coord_s, floor_s, ncpu,
         floor_s / tls_med, round_med / floor_s);
  printf("coordinator: VmHWM %.1f MiB, VmRSS %.1f MiB at the end; %.2f CPU s over %.2f s of job "
         "(%.0f%% of one core); exit %d\n",
         (double)b->vmhwm_kib / 1024, (double)b->vmrss_kib / 1024, coord_cpu, job_s,
         100 * coord_cpu / job_s, b->coord_exit);
  printf("fake sites (this process): %.2f CPU s over the same %.2f s (%.0f%% of one core); "
         "per round: coordinator %.3f, sites %.3f CPU s\n",
         sites_cpu, job_s, 100 * sites_cpu / job_s, coord_cpu / R, sites_cpu / R);
  printf("BLAKE2b on this machine: %.2f GB/s; PKI for %d sites: %.1f s; %s, %ld CPUs; "
         "load average %.2f at the start, %.2f at the end\n",
         hash_gbps, o->sites, t_pki, cpu, ncpu, load_start, load_end);

  printf("{\"bench\": \"round\", \"model\": \"%s\", \"sites\": %d, \"rounds\": %u, "
         "\"params\": %zu, \"model_bytes\": %zu, \"update_bytes\": %zu, \"round_s\": ",
         o->model, o->sites, (unsigned)R, b->n_params, b->model_len, up_len);
  print_json_list(round_s, R);
  printf(", \"round_median_s\": %.6f, \"download_median_s\": %.6f, ", round_med, down_med);
  if (R > 1) printf("\"cycle_median_s\": %.6f, ", cycle_med);
  printf("\"tls_s\": ");
  print_json_list(tls_times, reps);
  printf(", \"tls_median_s\": %.6f, \"tls_cpu_per_rep_s\": %.4f, \"ratio\": %.4f, ", tls_med,
         tls_cpu / (double)reps, ratio);
  printf("\"coord_vmhwm_kib\": %ld, \"coord_vmrss_kib\": %ld, \"coord_cpu_s\": %.3f, "
         "\"sites_cpu_s\": %.3f, \"job_s\": %.3f, \"coord_exit\": %d, ",
         b->vmhwm_kib, b->vmrss_kib, coord_cpu, sites_cpu, job_s, b->coord_exit);
  printf("\"crypto_sites_cpu_s\": %.4f, \"crypto_coord_cpu_s\": %.4f, \"floor_s\": %.6f, "
         "\"floor_ratio\": %.4f, \"ratio_to_floor\": %.4f, ",
         (double)o->sites * need->site_s, need->coord_s, floor_s, floor_s / tls_med,
         round_med / floor_s);
  printf("\"blake2b_gbps\": %.3f, \"cpu\": \"%s\", \"ncpu\": %ld, \"load_start\": %.2f, "
         "\"load_end\": %.2f}\n",
         hash_gbps, cpu, ncpu, load_start, load_end);
  fflush(stdout);
  xf_free(round_s);
  xf_free(down_s);
  xf_free(cycle_s);
  xf_free(sorted);
  return true;
}

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
static void driver_ready(bench *b) {
  if (b->ready_sent) return;
  b->ready_sent = true;
  b->t_ready = now_s();
  if (dprintf(b->report_fd, "ready %.9f %.9f\n", b->t_dial, b->t_ready) < 0)
    bench_fail(b, "cannot tell the orchestrator");
}

/* A driver's report, one line: "ok CPU0 CPU1 VMHWM VMRSS EVALS T_EVAL R" and
 * per round "FIRST_OFFER LAST_MODEL LAST_FINAL_ACK OFFERS ACKS MAX_ATTEMPT",
 * or "fail WHY". */
static void driver_report_send(bench *b) {
  const bench_opts *o = b->o;
  if (!check_run(b)) b->failed = true;
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
  if (!write_all(b->report_fd, line, strlen(line))) b->failed = true;
  xf_free(line);
}

/* A driver: the orchestrator writes to ctl_fd once the job is done. The
 * driver reports and keeps its connections until its aggregator closes
 * them (it is stopped next), so that no site leaves a running aggregator. */
static void driver_tick(bench *b) {
  if (b->stopping) return;
  struct pollfd pfd = {.fd = b->ctl_fd, .events = POLLIN};
  if (poll(&pfd, 1, 0) <= 0) return;
  char c;
  ssize_t got = read(b->ctl_fd, &c, 1);
  b->t_done = now_s();
  b->self_cpu_done = self_cpu_s();
  b->vmhwm_kib = proc_status_kib(getpid(), "VmHWM");
  b->vmrss_kib = proc_status_kib(getpid(), "VmRSS");
  if (got != 1) {
    bench_fail(b, "the orchestrator went away");
    return;
  }
  driver_report_send(b);
  b->stopping = true;
  b->stop_deadline = now_s() + 60;
  maybe_end_loop(b);
}

/* One region's fake sites, in a forked child: returns its exit status. */
static int driver_main(const bench *parent, int k, int port, int ctl_fd, int report_fd) {
  bench d;
  memset(&d, 0, sizeof(d));
  d.o = parent->o;
  d.p = parent->p;
  d.region = k;
  region_name(k, d.region_label, sizeof(d.region_label));
  region_host(k, d.host, sizeof(d.host));
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
  g_bench = &d;
  bool ok = run_rounds(&d);
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
  region_name(k, region, sizeof(region));
  agg_name(k, agg, sizeof(agg));
  region_host(k, host, sizeof(host));
  cert_paths(p, agg, cert, key);
  snprintf(state, sizeof(state), "%s/%s", g_tmp, agg);
  snprintf(cfg, sizeof(cfg), "%s/%s.json", g_tmp, agg);
  snprintf(port_file, port_file_n, "%s/%s.port", g_tmp, agg);
  snprintf(t->regional_log[k], sizeof(t->regional_log[k]), "%s/%s.log", g_tmp, agg);
  snprintf(listen, sizeof(listen), "%s:0", host);
  snprintf(upstream, sizeof(upstream), "127.0.0.1:%d", top_port);
  if (!write_coord_config(cfg, (unsigned)o->sites + 64u, true)) return -1;
  char *argv[] = {(char *)o->coord, "--role", "regional", "--region", region, "--upstream",
                  upstream, "--cert", cert, "--key", key, "--ca", (char *)p->ca, "--crl",
                  (char *)p->crl, "--state", state, "--listen", listen, "--port-file",
                  port_file, "--config", cfg, NULL};
  return spawn_daemon(o->coord, argv, t->regional_log[k]);
}

/* Exit status of pid as a number (128 + signal when killed). */
static int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The orchestrator's tick: drivers' "ready" lines, and every child still
 * running. */
static void tier_tick(bench *b) {
  tier *t = b->tier;
  char line[256];
  for (int k = 0; k < t->k; k++) {
    if (t->ready[k]) continue;
    struct pollfd pfd = {.fd = t->report[k], .events = POLLIN};
    if (poll(&pfd, 1, 0) <= 0) continue;
    if (!read_line(t->report[k], line, sizeof(line), 5)) {
      bench_fail(b, "driver %d said nothing it could read", k + 1);
      return;
    }
    if (sscanf(line, "ready %lf %lf", &t->dr[k].t_dial, &t->dr[k].t_ready) == 2) {
      t->ready[k] = true;
      continue;
    }
    line[strcspn(line, "\n")] = '\0';
    bench_fail(b, "driver %d: %s", k + 1, strncmp(line, "fail ", 5) == 0 ? line + 5 : line);
    return;
  }
  int status;
  if (waitpid(t->top, &status, WNOHANG) == t->top) {
    g_children[CHILD_COORD] = 0;
    t->top = 0;
    bench_fail(b, "the top coordinator exited during the run (status %d)", exit_code(status));
    return;
  }
  for (int k = 0; k < t->k; k++) {
    if (t->regional[k] > 0 && waitpid(t->regional[k], &status, WNOHANG) == t->regional[k]) {
      g_children[CHILD_REGIONAL(k)] = 0;
      t->regional[k] = 0;
      bench_fail(b, "the regional aggregator agg-r%02d exited during the run (status %d)", k + 1,
                 exit_code(status));
      print_log_tail(t->regional_log[k]);
      return;
    }
    if (t->driver[k] > 0 && waitpid(t->driver[k], &status, WNOHANG) == t->driver[k]) {
      g_children[CHILD_DRIVER(k)] = 0;
      t->driver[k] = 0;
      char why[512] = "";
      if (read_line(t->report[k], why, sizeof(why), 1)) why[strcspn(why, "\n")] = '\0';
      bench_fail(b, "driver %d exited during the run (status %d): %s", k + 1, exit_code(status),
                 strncmp(why, "fail ", 5) == 0 ? why + 5 : why);
      return;
    }
  }
}

static bool tier_all_ready(bench *b) {
  for (int k = 0; k < b->tier->k; k++)
    if (!b->tier->ready[k]) return false;
  return true;
}

/* The top coordinator took the job: the CPU of the job starts here. */
static void tier_accepted(bench *b) {
  tier *t = b->tier;
  t->t_accepted = now_s();
  t->top_cpu0 = proc_cpu_s(t->top);
  for (int k = 0; k < t->k; k++) t->regional_cpu0[k] = proc_cpu_s(t->regional[k]);
}

/* The job is done: every daemon's CPU and peak memory, then the drivers
 * are told to report. */
static void tier_done(bench *b) {
  tier *t = b->tier;
  t->t_done = now_s();
  t->top_cpu1 = proc_cpu_s(t->top);
  t->top_vmhwm = proc_status_kib(t->top, "VmHWM");
  t->top_vmrss = proc_status_kib(t->top, "VmRSS");
  for (int k = 0; k < t->k; k++) {
    t->regional_cpu1[k] = proc_cpu_s(t->regional[k]);
    t->regional_vmhwm[k] = proc_status_kib(t->regional[k], "VmHWM");
    t->regional_vmrss[k] = proc_status_kib(t->regional[k], "VmRSS");
  }
  for (int k = 0; k < t->k; k++)
    if (!write_all(t->ctl[k], "s", 1)) bench_fail(b, "cannot tell driver %d the job is done", k + 1);
  b->stopping = true;
  b->stop_deadline = now_s() + 15;
  if (b->user.conn) xf_conn_close(b->user.conn);
  maybe_end_loop(b);
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
  if (!read_line(t->report[k], line, cap, o->timeout_s)) {
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
  double until = now_s() + 15;
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < until) sleep_ms(5);
  if (w != pid) return -1;
  g_children[slot] = 0;
  return exit_code(status);
}

/* Waits up to timeout_s for a driver to exit; its status, or -1. */
static int wait_child(pid_t pid, int slot, double timeout_s) {
  if (pid <= 0) return -1;
  int status = 0;
  double until = now_s() + timeout_s;
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < until) sleep_ms(5);
  if (w != pid) return -1;
  g_children[slot] = 0;
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
      forget_parent_state(parent);
      for (int j = 0; j < K; j++) {
        if (j == k) continue;
        close(sync[j][0]), close(sync[j][1]), close(go[j][0]), close(go[j][1]);
        close(res[j][0]), close(res[j][1]);
      }
      close(sync[k][0]), close(go[k][1]), close(res[k][0]);
      char host[32], w[600] = "";
      region_host(k, host, sizeof(host));
      tls_plan plan = {.region = k, .host = host, .sync_fd = sync[k][1], .go_fd = go[k][0]};
      double *local = xf_calloc((size_t)reps, sizeof(double)), c = 0;
      bool fine = local && run_tls_baseline(o, p, &plan, down_len, up_len, reps, local, &c, w,
                                            sizeof(w));
      if (fine) dprintf(res[k][1], "ok cpu=%.6f\n", c);
      else dprintf(res[k][1], "fail %s\n", w[0] ? w : "out of memory");
      _exit(fine ? 0 : 1);
    }
    g_children[CHILD_TLS_CLIENT(k)] = pid[k];
    close(sync[k][1]), close(go[k][0]), close(res[k][1]);
    sync[k][1] = go[k][0] = res[k][1] = -1;
  }
  for (int k = 0; k < K; k++)
    if (!read_line(sync[k][0], line, sizeof(line), o->timeout_s) || strncmp(line, "ready", 5)) {
      snprintf(why, why_n, "region %d's baseline did not start", k + 1);
      goto out;
    }
  for (int rep = 0; rep < reps; rep++) {
    for (int k = 0; k < K; k++)
      if (!write_all(go[k][1], "go\n", 3)) {
        snprintf(why, why_n, "region %d's baseline server is gone", k + 1);
        goto out;
      }
    double t0 = INFINITY, t1 = 0;
    for (int k = 0; k < K; k++) {
      double a, b;
      if (!read_line(sync[k][0], line, sizeof(line), o->timeout_s) ||
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
    if (!read_line(res[k][0], line, sizeof(line), o->timeout_s)) {
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
    if (!ok && res[k][0] >= 0 && !why[0] && read_line(res[k][0], line, sizeof(line), 1))
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
    g_children[CHILD_TLS_CLIENT(k)] = 0;
  }
  if (!ok && !why[0]) snprintf(why, why_n, "a region's baseline client did not exit cleanly");
  return ok;
}

/* Max and median of n values (v is left as it was). */
static void max_median(const double *v, int n, double *max, double *med) {
  double s[REGIONS_MAX];
  memcpy(s, v, (size_t)n * sizeof(double));
  *med = median(s, (size_t)n);
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
  double round_med = median(sorted, R), round_min = sorted[0], round_max = sorted[R - 1];
  memcpy(sorted, down_s, R * sizeof(double));
  double down_med = median(sorted, R);
  memcpy(sorted, cycle_s, R * sizeof(double));
  double cycle_med = median(sorted, R);
  memcpy(sorted, tls_times, reps * sizeof(double));
  double tls_med = median(sorted, reps), tls_min = sorted[0], tls_max = sorted[reps - 1];
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
  double load_end = load_1min();
  char cpu[256];
  cpu_name(cpu, sizeof(cpu));
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
  print_json_list(round_s, R);
  printf(", \"round_median_s\": %.6f, \"download_median_s\": %.6f, \"cycle_s\": ", round_med,
         down_med);
  print_json_list(cycle_s, R);
  printf(", \"cycle_median_s\": %.6f, \"tls_s\": ", cycle_med);
  print_json_list(tls_times, reps);
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
  print_json_list(reg_cpu, (size_t)K);
  printf(", \"regional_cpu_s_max\": %.3f, \"regional_cpu_s_median\": %.3f, \"driver_vmhwm_kib\": ",
         reg_cpu_max, reg_cpu_med);
  print_json_long_list(drv_hwm_l, K);
  printf(", \"driver_vmhwm_kib_max\": %.0f, \"driver_vmhwm_kib_median\": %.0f, "
         "\"driver_cpu_s\": ",
         drv_hwm_max, drv_hwm_med);
  print_json_list(drv_cpu, (size_t)K);
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
static int run_tiered(const bench_opts *o, const bench_paths *p, bench *b, double t_pki,
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
  if (!write_coord_config(p->config, (unsigned)K + 64u, true)) {
    fprintf(stderr, "xfed-bench-round: cannot write %s: %s\n", p->config, strerror(errno));
    goto out;
  }
  t->top = spawn_coord(o, p);
  if (t->top < 0) {
    fprintf(stderr, "xfed-bench-round: fork: %s\n", strerror(errno));
    goto out;
  }
  g_children[CHILD_COORD] = t->top;
  int top_port = wait_port(t->top, CHILD_COORD, p->port, 30);
  if (!top_port) {
    print_log_tail(p->log);
    goto out;
  }
  char port_file[REGIONS_MAX][SUB_PATH_MAX];
  for (int k = 0; k < K; k++) {
    t->regional[k] = spawn_regional(o, p, t, k, top_port, port_file[k], sizeof(port_file[k]));
    if (t->regional[k] < 0) {
      fprintf(stderr, "xfed-bench-round: cannot start agg-r%02d: %s\n", k + 1, strerror(errno));
      goto out;
    }
    g_children[CHILD_REGIONAL(k)] = t->regional[k];
  }
  for (int k = 0; k < K; k++)
    if (!(t->regional_port[k] = wait_port(t->regional[k], CHILD_REGIONAL(k), port_file[k], 30))) {
      print_log_tail(t->regional_log[k]);
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
      forget_parent_state(self);
      for (int j = 0; j < k; j++) close(t->ctl[j]), close(t->report[j]);
      close(ctl[1]), close(rep[0]);
      _exit(driver_main(b, k, t->regional_port[k], ctl[0], rep[1]));
    }
    close(ctl[0]), close(rep[1]);
    t->ctl[k] = ctl[1];
    t->report[k] = rep[0];
    t->driver[k] = pid;
    g_children[CHILD_DRIVER(k)] = pid;
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
  g_bench = b;
  bool ok = run_rounds(b);
  if (!ok) snprintf(why, sizeof(why), "%s", b->why);
  for (int k = 0; ok && k < K; k++) ok = tier_read_report(t, k, o, why, sizeof(why));
  long orch_vmhwm = proc_status_kib(getpid(), "VmHWM");

  /* Stop the aggregators (their sites' drivers then end), then the top. */
  for (int k = 0; k < K; k++)
    if (t->regional[k] > 0) kill(t->regional[k], SIGTERM);
  for (int k = 0; k < K; k++) {
    t->regional_exit[k] = wait_child(t->regional[k], CHILD_REGIONAL(k), 15);
    if (ok && t->regional_exit[k] != 0) {
      ok = false;
      snprintf(why, sizeof(why), "agg-r%02d exited with status %d after SIGTERM", k + 1,
               t->regional_exit[k]);
      print_log_tail(t->regional_log[k]);
    }
  }
  for (int k = 0; k < K; k++) {
    int st = wait_child(t->driver[k], CHILD_DRIVER(k), 75);
    if (ok && st != 0) {
      ok = false;
      snprintf(why, sizeof(why), "driver %d exited with status %d", k + 1, st);
    }
  }
  t->top_cpu_total = proc_cpu_s(t->top);
  t->top_exit = stop_child(t->top, CHILD_COORD);
  if (ok && t->top_exit != 0) {
    ok = false;
    snprintf(why, sizeof(why), "the top coordinator exited with status %d after SIGTERM",
             t->top_exit);
    print_log_tail(p->log);
  }
  ok = ok && tier_merge(b, t, why, sizeof(why));
  if (!ok) {
    fprintf(stderr, "xfed-bench-round: %s\n", why);
    print_log_tail(p->log);
    for (int k = 0; k < K; k++) print_log_tail(t->regional_log[k]);
    goto out;
  }

  if (!run_tier_baseline(o, p, b->model_len, up_len, tls_after, tls_times + tls_before,
                         &tls_cpu_after, why, sizeof(why))) {
    fprintf(stderr, "xfed-bench-round: TLS baseline: %s\n", why);
    goto out;
  }
  tls_cpu += tls_cpu_after;
  print_tier_report(b, t, tls_times, tls_cpu, digest_gbps(b->delta, up_len), t_pki, load_start,
                    orch_vmhwm);
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

/* Each process of the bench holds one descriptor per site it drives (or,
 * for a baseline server, serves) and a few of its own: the soft limit is
 * raised to the hard one, which the children inherit (the coordinators
 * raise their own as docs/coordinator.md says). False, with the fix, when
 * the hard limit is too low. */
static bool raise_nofile(const bench_opts *o) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return true;
  rlim_t need = (rlim_t)o->sites + 256;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    (void)getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur >= need) return true;
  fprintf(stderr, "xfed-bench-round: %d sites need %llu file descriptors in one process, but the "
                  "limit is %llu; raise it (ulimit -n %llu) or use fewer sites%s\n",
          o->sites, (unsigned long long)need, (unsigned long long)rl.rlim_cur,
          (unsigned long long)need, o->regions ? " per region" : "");
  return false;
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

int main(int argc, char **argv) {
  bench_opts o = {.sites = 8, .rounds = 5, .model = "fedavg-cnn", .tls_reps = 7,
                  .timeout_s = 600};
  static const struct option longopts[] = {
      {"sites", required_argument, 0, 's'},    {"rounds", required_argument, 0, 'r'},
      {"model", required_argument, 0, 'm'},    {"coord", required_argument, 0, 'c'},
      {"tls-reps", required_argument, 0, 'k'}, {"timeout", required_argument, 0, 't'},
      {"regions", required_argument, 0, 'g'},  {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int ch;
  long v;
  while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    bool ok = true;
    switch (ch) {
    case 's': ok = parse_int(optarg, 1, SITES_MAX, &v), o.sites = (int)v; break;
    case 'g': ok = parse_int(optarg, 0, REGIONS_MAX, &v), o.regions = (int)v; break;
    case 'r': ok = parse_int(optarg, 1, 1000, &v), o.rounds = (uint32_t)v; break;
    case 'k': ok = parse_int(optarg, 1, 100, &v), o.tls_reps = (int)v; break;
    case 't': ok = parse_int(optarg, 1, 86400, &v), o.timeout_s = (double)v; break;
    case 'm':
      o.model = optarg;
      ok = strcmp(optarg, "fedavg-cnn") == 0 || strcmp(optarg, "lenet5") == 0 ||
           strcmp(optarg, "mlp") == 0;
      break;
    case 'c': snprintf(o.coord, sizeof(o.coord), "%s", optarg); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
    if (!ok) {
      fprintf(stderr, "xfed-bench-round: bad value '%s' for %s\n", optarg, argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return 2;
  }
  if (o.regions && (long)o.regions * o.sites > (long)XF_JOB_SITES_MAX) {
    fprintf(stderr, "xfed-bench-round: --regions %d x --sites %d is more sites than a job may "
                    "ask for (%u); use fewer\n", o.regions, o.sites, XF_JOB_SITES_MAX);
    return 2;
  }
  if (!raise_nofile(&o)) return 1;
  if (!getenv("XF_LOG_LEVEL")) xf_log_set_level(XF_LOG_WARN);
  if (!find_coord(o.coord, sizeof(o.coord))) {
    fprintf(stderr, "xfed-bench-round: no xfed-coord found (tried --coord, "
                    "../coordinator/xfed-coord and ./xfed-coord beside this program, and "
                    "PATH); build it or pass --coord PATH\n");
    return 1;
  }
  if (xf_crypto_init() != XF_OK) {
    fprintf(stderr, "xfed-bench-round: libsodium does not start\n");
    return 1;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  atexit(cleanup);

  const char *tmpdir = getenv("TMPDIR");
  char tmpl[TMP_MAX_LEN];
  int tl = snprintf(tmpl, sizeof(tmpl), "%s/xf-round-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (tl < 0 || (size_t)tl >= sizeof(tmpl)) {
    fprintf(stderr, "xfed-bench-round: TMPDIR is too long\n");
    return 1;
  }
  if (!mkdtemp(tmpl)) {
    fprintf(stderr, "xfed-bench-round: cannot make a directory in %s: %s\n",
            tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
    return 1;
  }
  memcpy(g_tmp, tmpl, sizeof(g_tmp));
  bench_paths p;
  snprintf(p.fed, sizeof(p.fed), "%s/fed", g_tmp);
  snprintf(p.ca, sizeof(p.ca), "%s/fed/ca.crt", g_tmp);
  snprintf(p.crl, sizeof(p.crl), "%s/fed/crl.pem", g_tmp);
  snprintf(p.state, sizeof(p.state), "%s/state", g_tmp);
  snprintf(p.port, sizeof(p.port), "%s/port", g_tmp);
  snprintf(p.log, sizeof(p.log), "%s/coord.log", g_tmp);
  snprintf(p.config, sizeof(p.config), "%s/coord.json", g_tmp);

  int rc = 1;
  bench b;
  memset(&b, 0, sizeof(b));
  double *tls_times = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  double load_start = load_1min();
  double t_pki = now_s();
  if (make_federation(&p, &o, &err) != XF_OK) {
    fprintf(stderr, "xfed-bench-round: PKI: %s\n", err.msg);
    goto out;
  }
  t_pki = now_s() - t_pki;

  b.o = &o;
  b.p = &p;
  b.coord_exit = -1;
  b.region = -1;
  snprintf(b.region_label, sizeof(b.region_label), "%s", REGION);
  snprintf(b.host, sizeof(b.host), "127.0.0.1");
  b.nsites = o.regions ? 0 : o.sites;
  b.sites = xf_calloc((size_t)o.sites, sizeof(*b.sites));
  b.rt = xf_calloc(o.rounds + 2, sizeof(*b.rt));
  size_t n_params = 0;
  if (!b.sites || !b.rt || job_model_size(&o, &n_params, &b.model_len, &err) != XF_OK ||
      !make_delta(&b, n_params)) {
    fprintf(stderr, "xfed-bench-round: the model: %s\n", err.msg[0] ? err.msg : "out of memory");
    goto out;
  }
  if (o.regions) {
    rc = run_tiered(&o, &p, &b, t_pki, load_start);
    goto out;
  }
  const tls_plan flat = {.region = -1, .host = "127.0.0.1", .sync_fd = -1, .go_fd = -1};

  /* The baseline: the same bytes over TLS alone with the same number of
   * connections, half of its repetitions before the job and half after, so
   * that a change in the shared machine's load shows in both. */
  size_t up_len = b.n_params * 4;
  int tls_before = o.tls_reps / 2, tls_after = o.tls_reps - tls_before;
  tls_times = xf_calloc((size_t)o.tls_reps, sizeof(double));
  char why[600] = "";
  double tls_cpu = 0, tls_cpu_after = 0;
  if (!tls_times || (tls_before > 0 && !run_tls_baseline(&o, &p, &flat, b.model_len, up_len, tls_before,
                                                        tls_times, &tls_cpu, why, sizeof(why)))) {
    fprintf(stderr, "xfed-bench-round: TLS baseline: %s\n", why[0] ? why : "out of memory");
    goto out;
  }

  if (!write_coord_config(p.config, (unsigned)o.sites + 64u, false)) {
    fprintf(stderr, "xfed-bench-round: cannot write %s: %s\n", p.config, strerror(errno));
    goto out;
  }
  pid_t coord = spawn_coord(&o, &p);
  if (coord < 0) {
    fprintf(stderr, "xfed-bench-round: fork: %s\n", strerror(errno));
    goto out;
  }
  g_children[CHILD_COORD] = coord;
  b.coord = coord;
  b.port = wait_port(coord, CHILD_COORD, p.port, 30);
  if (!b.port) {
    print_log_tail(p.log);
    goto out;
  }
  g_bench = &b;
  bool ok = run_rounds(&b);
  ok = stop_coordinator(&b) && ok;
  ok = ok && check_run(&b);
  if (!ok) {
    fprintf(stderr, "xfed-bench-round: %s\n", b.why);
    print_log_tail(p.log);
    goto out;
  }

  /* The second half of the baseline. */
  if (!run_tls_baseline(&o, &p, &flat, b.model_len, up_len, tls_after, tls_times + tls_before,
                        &tls_cpu_after, why, sizeof(why))) {
    fprintf(stderr, "xfed-bench-round: TLS baseline: %s\n", why);
    goto out;
  }
  tls_cpu += tls_cpu_after;
  double hash_gbps = digest_gbps(b.delta, up_len);
  mandated need = {0};
  if (!measure_mandated(&b, b.sites[0].seal, &need)) {
    fprintf(stderr, "xfed-bench-round: cannot time the round's hashing and sealing\n");
    goto out;
  }

  if (!print_report(&b, tls_times, tls_cpu, hash_gbps, &need, t_pki, load_start)) {
    fprintf(stderr, "xfed-bench-round: out of memory\n");
    goto out;
  }
  rc = 0;

out:
  cleanup();
  xf_free(tls_times);
  xf_free(b.sites);
  xf_free(b.rt);
  xf_free(b.delta);
  return rc;
}
