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
 * The tiered mode (--regions K, --sites N per region): round_tiered.c;
 * round_bench.h says what each file of the bench holds.
 *
 * usage: xfed-bench-round [--sites N] [--regions K] [--rounds R]
 *                         [--model fedavg-cnn|lenet5|mlp] [--mlp-width W] [--coord PATH]
 *                         [--tls-reps K] [--timeout S] */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "base/alloc.h"
#include "base/log.h"
#include "bench/round_bench.h"
#include "job/jobspec.h"
#include "crypto/digest.h"
#include "crypto/seal.h"

/* ---- main ----------------------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: xfed-bench-round [--sites N] [--regions K] [--rounds R]\n"
          "                        [--model fedavg-cnn|lenet5|mlp] [--mlp-width W]\n"
          "                        [--coord PATH]\n"
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
          "  --mlp-width W  mlp's two hidden layers of W units (200): model size at\n"
          "                 will, for memory per parameter\n"
          "  --coord PATH   the xfed-coord binary (default: ../coordinator/xfed-coord from\n"
          "                 this program's directory, then beside it, then PATH)\n"
          "  --tls-reps K   repetitions of the TLS baseline (default 7)\n"
          "  --timeout S    give up after S seconds (default 600)\n");
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
    double t = xf_bench_now();
    f(arg);
    t = xf_bench_now() - t;
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

/* Waits for the coordinator, which was sent SIGTERM when the job finished
 * (now, after a failure), to exit: false with b->why unless it exits 0
 * within 15 s. */
static bool stop_coordinator(bench *b) {
  if (b->coord <= 0) return false;
  if (!b->term_sent) kill(b->coord, SIGTERM);
  int status = 0;
  double until = xf_bench_now() + 15;
  pid_t w = 0;
  while ((w = waitpid(b->coord, &status, WNOHANG)) == 0 && xf_bench_now() < until) xf_rb_sleep_ms(5);
  if (w != b->coord) {
    if (!b->failed)
      snprintf(b->why, sizeof(b->why), "the coordinator did not exit within 15 s of SIGTERM");
    return false;
  }
  xf_rb_children[0] = 0;
  b->coord_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (b->coord_exit == 0) return true;
  if (!b->failed)
    snprintf(b->why, sizeof(b->why), "the coordinator exited with status %d after SIGTERM",
             b->coord_exit);
  return false;
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
  double round_med = xf_rb_median(sorted, R), round_min = sorted[0], round_max = sorted[R - 1];
  memcpy(sorted, down_s, R * sizeof(double));
  double down_med = xf_rb_median(sorted, R);
  double cycle_med = NAN;
  if (R > 1) {
    memcpy(sorted, cycle_s, (R - 1) * sizeof(double));
    cycle_med = xf_rb_median(sorted, R - 1);
  }
  memcpy(sorted, tls_times, reps * sizeof(double));
  double tls_med = xf_rb_median(sorted, reps), tls_min = sorted[0], tls_max = sorted[reps - 1];
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
  double load_end = xf_rb_load_1min();
  char cpu[256];
  xf_bench_cpu_model(cpu, sizeof(cpu));

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
  xf_rb_print_json_list(round_s, R);
  printf(", \"round_median_s\": %.6f, \"download_median_s\": %.6f, ", round_med, down_med);
  if (R > 1) printf("\"cycle_median_s\": %.6f, ", cycle_med);
  printf("\"tls_s\": ");
  xf_rb_print_json_list(tls_times, reps);
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
      {"regions", required_argument, 0, 'g'},  {"mlp-width", required_argument, 0, 'w'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
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
    case 'w': ok = parse_int(optarg, 1, 100000, &v), o.mlp_width = (int)v; break;
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
  if (!xf_rb_find_coord(o.coord, sizeof(o.coord))) {
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
  sa.sa_handler = xf_rb_on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  atexit(xf_rb_cleanup);

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
  memcpy(xf_rb_tmp, tmpl, sizeof(xf_rb_tmp));
  bench_paths p;
  snprintf(p.fed, sizeof(p.fed), "%s/fed", xf_rb_tmp);
  snprintf(p.ca, sizeof(p.ca), "%s/fed/ca.crt", xf_rb_tmp);
  snprintf(p.crl, sizeof(p.crl), "%s/fed/crl.pem", xf_rb_tmp);
  snprintf(p.state, sizeof(p.state), "%s/state", xf_rb_tmp);
  snprintf(p.port, sizeof(p.port), "%s/port", xf_rb_tmp);
  snprintf(p.log, sizeof(p.log), "%s/coord.log", xf_rb_tmp);
  snprintf(p.config, sizeof(p.config), "%s/coord.json", xf_rb_tmp);

  int rc = 1;
  bench b;
  memset(&b, 0, sizeof(b));
  double *tls_times = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  double load_start = xf_rb_load_1min();
  double t_pki = xf_bench_now();
  if (xf_rb_make_federation(&p, &o, &err) != XF_OK) {
    fprintf(stderr, "xfed-bench-round: PKI: %s\n", err.msg);
    goto out;
  }
  t_pki = xf_bench_now() - t_pki;

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
  if (!b.sites || !b.rt || xf_rb_job_model_size(&o, &n_params, &b.model_len, &err) != XF_OK ||
      !xf_rb_make_delta(&b, n_params)) {
    fprintf(stderr, "xfed-bench-round: the model: %s\n", err.msg[0] ? err.msg : "out of memory");
    goto out;
  }
  if (o.regions) {
    rc = xf_rb_run_tiered(&o, &p, &b, t_pki, load_start);
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
  if (!tls_times ||
      (tls_before > 0 && !xf_rb_run_tls_baseline(&o, &p, &flat, b.model_len, up_len, tls_before,
                                                 tls_times, &tls_cpu, why, sizeof(why)))) {
    fprintf(stderr, "xfed-bench-round: TLS baseline: %s\n", why[0] ? why : "out of memory");
    goto out;
  }

  if (!xf_rb_write_coord_config(p.config, (unsigned)o.sites + 64u, false)) {
    fprintf(stderr, "xfed-bench-round: cannot write %s: %s\n", p.config, strerror(errno));
    goto out;
  }
  pid_t coord = xf_rb_spawn_coord(&o, &p);
  if (coord < 0) {
    fprintf(stderr, "xfed-bench-round: fork: %s\n", strerror(errno));
    goto out;
  }
  xf_rb_children[CHILD_COORD] = coord;
  b.coord = coord;
  b.port = xf_rb_wait_port(coord, CHILD_COORD, p.port, 30);
  if (!b.port) {
    xf_rb_print_log_tail(p.log);
    goto out;
  }
  xf_rb_bench = &b;
  bool ok = xf_rb_run_rounds(&b);
  ok = stop_coordinator(&b) && ok;
  ok = ok && xf_rb_check_run(&b);
  if (!ok) {
    fprintf(stderr, "xfed-bench-round: %s\n", b.why);
    xf_rb_print_log_tail(p.log);
    goto out;
  }

  /* The second half of the baseline. */
  if (!xf_rb_run_tls_baseline(&o, &p, &flat, b.model_len, up_len, tls_after, tls_times + tls_before,
                              &tls_cpu_after, why, sizeof(why))) {
    fprintf(stderr, "xfed-bench-round: TLS baseline: %s\n", why);
    goto out;
  }
  tls_cpu += tls_cpu_after;
  double hash_gbps = xf_rb_digest_gbps(b.delta, up_len);
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
  xf_rb_cleanup();
  xf_free(tls_times);
  xf_free(b.sites);
  xf_free(b.rt);
  xf_free(b.delta);
  return rc;
}
