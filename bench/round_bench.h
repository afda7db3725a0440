/* SPDX-License-Identifier: Apache-2.0 */
/* xfed-bench-round: the round overhead and peak memory of the real
 * coordinator (xfed-coord) on loopback, against TLS alone carrying the same
 * bytes in the same run (round_bench.c says what a run does). Its files:
 *  - round_bench.c: main, the options and the flat mode (one coordinator,
 *    every fake site in this process);
 *  - round_tiered.c: the tiered mode (--regions: a top coordinator, the
 *    regional aggregators, a driver process per region, its baseline and
 *    its report);
 *  - round_sites.c: the fake sites and the user on one libuv loop, as both
 *    modes run them;
 *  - round_baseline.c: TLS alone carrying the same bytes;
 *  - round_common.c: the clock, pipes, the scratch directory and the
 *    children, the federation's names and PKI, the coordinator processes,
 *    and what /proc and the machine say.
 * This header is what they share. */
#ifndef XF_BENCH_ROUND_BENCH_H
#define XF_BENCH_ROUND_BENCH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "base/result.h"
#include "bench/bench_util.h"
#include "crypto/digest.h"
#include "crypto/seal.h"
#include "net/conn.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"

#define REGION "bench"
#define CHUNK XF_TENSOR_CHUNK_MAX
/* The bench's own bound on a handshake (the library's default is 10 s):
 * the baseline starts a thousand handshakes per server at once, ten
 * servers in the tiered mode, all on the same two cores, and a handshake
 * that waits its turn there is slow, not stuck. The baseline's connections
 * take it as their idle bound too, which also bounds a dial's TCP connect
 * (the library's 30 s was too short for 5,000 connects at once). */
#define BENCH_HANDSHAKE_MS 120000u
#define SITES_MAX 10000 /* per process: one coordinator, or one region's driver */
#define REGIONS_MAX 64
/* The scratch directory's path, terminator included, is at most this long. */
#define TMP_MAX_LEN 1024

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
extern char xf_rb_tmp[TMP_MAX_LEN]; /* the scratch directory; "" when none */
extern volatile pid_t xf_rb_children[CHILD_SLOTS];

/* ---- settings ------------------------------------------------------------------------------- */

typedef struct bench_opts {
  int sites;   /* in the tiered mode: per region */
  int regions; /* 0: flat (every site dials the coordinator); K: tiered */
  uint32_t rounds;
  const char *model;
  int mlp_width; /* mlp: two hidden layers of this many units (200 by default) */
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

/* Where one baseline runs: which region's sites, the server's address, and
 * the tiered mode's barrier (tls_run.sync_fd, go_fd). */
typedef struct tls_plan {
  int region;
  const char *host;
  int sync_fd, go_fd;
} tls_plan;

/* ---- round_common.c ------------------------------------------------------------------------- */

/* Median of n values (n >= 1); v is sorted in place. */
double xf_rb_median(double *v, size_t n);
void xf_rb_sleep_ms(int ms);
/* Writes all of buf to fd; false on an error. */
bool xf_rb_write_all(int fd, const char *buf, size_t len);
/* Reads one line from fd within timeout_s; false on end of file or timeout. */
bool xf_rb_read_line(int fd, char *buf, size_t n, double timeout_s);

/* Every child killed and the scratch directory removed: xf_rb_cleanup at
 * exit, xf_rb_on_fatal_signal on SIGINT, SIGTERM and SIGHUP. */
void xf_rb_cleanup(void);
void xf_rb_on_fatal_signal(int sig);
/* In a forked child of the bench: its parent's children and directory are
 * its parent's to clean up. */
void xf_rb_forget_parent_state(pid_t parent);
void xf_rb_print_log_tail(const char *path);

/* Names of the sites, regions, aggregators and their loopback addresses;
 * region -1: the flat mode's. */
void xf_rb_site_name(int region, int i, char *buf, size_t n);
void xf_rb_region_name(int region, char *buf, size_t n);
void xf_rb_agg_name(int region, char *buf, size_t n);
void xf_rb_region_host(int region, char *buf, size_t n);
void xf_rb_cert_paths(const bench_paths *p, const char *name, char *cert, char *key);
xf_err xf_rb_make_tls(const bench_paths *p, const char *name, xf_tls **out, xf_errctx *err);
xf_err xf_rb_make_federation(const bench_paths *p, const bench_opts *o, xf_errctx *err);
bool xf_rb_find_coord(char *out, size_t n);

/* The coordinator processes, and what /proc says of a process. */
bool xf_rb_write_coord_config(const char *path, unsigned conns, bool tiered);
pid_t xf_rb_spawn_daemon(const char *bin, char *const argv[], const char *log_path);
pid_t xf_rb_spawn_coord(const bench_opts *o, const bench_paths *p);
int xf_rb_wait_port(pid_t pid, int slot, const char *port_file, double timeout_s);
long xf_rb_proc_status_kib(pid_t pid, const char *key);
double xf_rb_proc_cpu_s(pid_t pid);
double xf_rb_self_cpu_s(void);

/* The machine, for the reports. */
double xf_rb_digest_gbps(const uint8_t *buf, size_t len);
double xf_rb_load_1min(void);
void xf_rb_print_json_list(const double *v, size_t n);

/* ---- round_sites.c -------------------------------------------------------------------------- */

/* The run of this process, which the connections' callbacks serve. */
extern bench *xf_rb_bench;

void xf_rb_bench_fail(bench *b, const char *fmt, ...) XF_PRINTF(2, 3);
xf_err xf_rb_job_model_size(const bench_opts *o, size_t *n, size_t *file_len, xf_errctx *err);
bool xf_rb_make_delta(bench *b, size_t n);
/* Once stopping and every connection closed, the loop's timer closes. */
void xf_rb_maybe_end_loop(bench *b);
bool xf_rb_run_rounds(bench *b);
bool xf_rb_check_run(bench *b);

/* ---- round_baseline.c ----------------------------------------------------------------------- */

bool xf_rb_run_tls_baseline(const bench_opts *o, const bench_paths *p, const tls_plan *plan,
                            size_t down_len, size_t up_len, int reps, double *times, double *cpu,
                            char *why, size_t why_n);

/* ---- round_tiered.c ------------------------------------------------------------------------- */

/* The tiered mode's parts of the loop (xf_rb_run_rounds calls them). */
void xf_rb_driver_ready(bench *b);
void xf_rb_driver_tick(bench *b);
void xf_rb_tier_tick(bench *b);
bool xf_rb_tier_all_ready(bench *b);
void xf_rb_tier_accepted(bench *b);
void xf_rb_tier_done(bench *b);
int xf_rb_run_tiered(const bench_opts *o, const bench_paths *p, bench *b, double t_pki,
                     double load_start);

#endif
