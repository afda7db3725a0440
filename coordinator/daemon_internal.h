/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator daemon's files among themselves: the connections
 * (peers) and what they send, the sites and regional aggregators it knows,
 * and the job runs it hosts — each a job machine (coordinator/jobmachine.h)
 * with the model, the aggregator and the update streams around it. The
 * global coordinator hosts one run per active job; a regional aggregator
 * one per task it relays. First the types; then, under a banner naming
 * each defining file, that file's functions and nothing else
 * (tests/internal_header.sh checks it). A type only one file looks into
 * is opaque here and defined in that file. Internal to the daemon. */
#ifndef XF_COORDINATOR_DAEMON_INTERNAL_H
#define XF_COORDINATOR_DAEMON_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "codec/codec.h"
#include "coordinator/aggregate.h"
#include "coordinator/daemon.h"
#include "coordinator/jobmachine.h"
#include "coordinator/journal.h"
#include "coordinator/retention.h"
#include "crypto/digest.h"
#include "crypto/seal.h"
#include "job/admission.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "net/conn.h"
#include "net/document.h"
#include "net/notify.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"
#include "http/http.h"
#include "http/prom.h"
#include "policy/audit.h"
#include "policy/policy.h"
#include "privacy/noise.h"
#include "storage/blob.h"
#include "storage/db.h"
#include "update/update.h"

/* Bytes of a model file a peer may send us (a MODEL stream upstream→regional). */
#define XF_COORD_MODEL_MAX (1ull << 30)
/* The largest model a job spec allows travels within it, as float32 with a
 * header of at most 1 MiB and its 12-byte prefix (docs/model-format.md). */
_Static_assert((unsigned long long)XF_JOB_PARAMS_MAX * 4 + (1u << 20) + 12 <= XF_COORD_MODEL_MAX,
               "XF_JOB_PARAMS_MAX must fit a model stream");
/* Ciphertext queued on all connections together above which outgoing
 * streams wait (docs/coordinator.md, "Memory"): with a model going to many
 * sites at once, each connection's own high-water mark would otherwise let
 * memory grow with the number of sites. */
#define XF_COORD_SEND_BUDGET (8u * 1024u * 1024u)
/* A job waiting for sites or paused is decided again at least this often
 * (a rule's validity window may open without a policy change). */
#define XF_COORD_REPLAN_S 10.0

/* A model file shared by every stream that sends it (daemon.c). */
typedef struct xf__model_file xf__model_file;
/* One outgoing tensor stream, queued on its peer (daemon.c). */
typedef struct xf__stream xf__stream;

typedef enum xf__peer_kind {
  XF__PEER_UNKNOWN = 0, /* before the session's first application frame */
  XF__PEER_SITE,        /* a site (site certificate) */
  XF__PEER_REGIONAL,    /* a regional aggregator dialing us (coordinator certificate) */
  XF__PEER_CLI,         /* a user */
  XF__PEER_UPSTREAM     /* our own link to the global coordinator (regional role) */
} xf__peer_kind;

/* The coordinator: its loop, configuration, state files and lists
 * (daemon.c; the other files reach it through daemon.c's functions). */
typedef struct xf__coord xf__coord;
struct xf__site;

/* One connection (peer.c): owned by the coordinator's list, freed when it
 * closes. */
typedef struct xf__peer xf__peer;
/* The coordinator's connections, their send budget stalls and the
 * DOCUMENT streams they hold (peer.c). */
typedef struct xf__peers xf__peers;

/* What a site announced of one dataset. */
typedef struct xf__dataset {
  char name[XF_JOB_IDENT_MAX];
  char classification[16]; /* as the site registered it; may be empty */
  char tags[XF_JOB_TAGS_MAX][XF_JOB_IDENT_MAX];
  uint32_t n_tags;
  uint32_t train_records, test_records, classes, h, w, c;
} xf__dataset;

/* A site behind a regional aggregator, as the aggregator announced it. */
typedef struct xf__behind {
  char name[XF_COORD_NAME_MAX];
  char region[XF_COORD_NAME_MAX];
  uint64_t id;
  xf__dataset *datasets;
  size_t n_datasets;
  double journaled; /* when its row and datasets were last written (xf__now) */
  bool fresh;       /* new or changed in the aggregator's last announcement */
} xf__behind;

/* A site or a regional aggregator we know of; kept while the process runs,
 * across its reconnects. */
typedef struct xf__site {
  uint64_t id;
  char name[XF_COORD_NAME_MAX];
  char region[XF_COORD_NAME_MAX];
  bool regional;
  xf__peer *peer;    /* its live session, or NULL */
  xf__dataset *datasets;
  size_t n_datasets;
  xf__behind *behind; /* a regional's sites */
  size_t n_behind;
  struct xf__site *next;
} xf__site;

/* One carrier's update in a run's open attempt (intake.c). */
typedef struct xf__take xf__take;
typedef struct xf__takes xf__takes;
/* A run's clocks (stats.c). */
typedef struct xf__run_clock xf__run_clock;

/* What a regional aggregator's run was told by upstream. */
typedef struct xf__upstream_task {
  uint32_t round, attempt, model_round;
  bool evaluate_only;
  double deadline, answer_by;
  uint64_t update_stream_id;
  bool seal;
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  bool has_residency;
  uint64_t policy_version;
  char coordinator_region[XF_COORD_NAME_MAX];
  char path[16];
  char rule[XF_POLICY_NAME_MAX];
  uint32_t min_cohort;
  bool require_secagg, has_max_epsilon;
  double max_epsilon, epsilon;
} xf__upstream_task;

/* What a regional aggregator's run holds of its task upstream (upstream.c). */
typedef struct xf__relay xf__relay;
/* The regional role's link upstream: its session, dialing and backoff, and
 * the error feedback of the region's aggregates (upstream.c). */
typedef struct xf__uplink xf__uplink;

/* A job the daemon hosts: its machine and everything around it (host.c,
 * which defines it; the others ask it through the functions under host.c's
 * banner). */
typedef struct xf__run xf__run;

/* What the coordinator counts since the process started (stats.c), beyond
 * what the journal and the connection guard keep, for the exporter
 * (metrics.c). */
#define XF__STATS_JOBS 32 /* jobs whose round counts are kept (the newest) */
typedef struct xf__stats {
  uint64_t bytes_in[5], bytes_out[5];   /* closed connections', by xf__peer_kind */
  uint64_t updates_received;
  uint64_t updates_refused[5];          /* by xf_jobm_refusal */
  uint64_t updates_dropped;             /* broken streams (intake.c drop) */
  uint64_t decisions[2][3];             /* [allowed][xf_policy_path] per site decided */
  xf_prom_hist round_duration;          /* opened to committed */
  xf_prom_hist phase_duration[XF_JOBM_CANCELLED + 1];
  struct {
    char job[32];
    uint64_t completed, failed;
  } jobs[XF__STATS_JOBS];               /* a ring, the oldest replaced */
  size_t next_job;
} xf__stats;

/* Extras of an outgoing stream's TensorBegin (xf__stream_queue). */
typedef struct xf__stream_opts {
  uint64_t weight;
  uint32_t attempt, contributors;
  char **sites; /* taken over */
  size_t n_sites;
  bool await_ack;
  const char *job;
} xf__stream_opts;

/* The federation as admission sees it (job/admission.h), from the sites
 * we know; freed with xf__federation_free. */
typedef struct xf__federation {
  xf_federation fed;
  xf_fed_site *sites;
  xf_fed_dataset *datasets;
  const char **tags;
} xf__federation;

/* The dashboard (dashboard.c). */
typedef struct xf__dashboard xf__dashboard;

/* ---- daemon.c: the coordinator, its loop and the sites it knows -------------------- */
double xf__now(void);
/* What co holds, for the files that work on it; borrowed while it runs.
 * Its configuration (with the defaults daemon.c fills in) and its name
 * (from its certificate). */
const xf_coord_config *xf__coord_cfg(const xf__coord *co);
const char *xf__coord_name(const xf__coord *co);
uv_loop_t *xf__coord_loop(xf__coord *co);
xf_tls *xf__coord_tls(const xf__coord *co);
/* The journal and the model blobs: the global role's, NULL on a regional
 * aggregator. The audit trail: the journal itself on the global role,
 * STATE/audit.db on a regional aggregator. */
xf_db *xf__coord_db(const xf__coord *co);
xf_blob_store *xf__coord_blobs(const xf__coord *co);
xf_db *xf__coord_audit(const xf__coord *co);
/* Central privacy: the aggregator's noise (global role; NULL otherwise). */
xf_noise *xf__coord_noise(const xf__coord *co);
/* The caps, the buffer budget and their running totals (net/conn.h) of
 * every connection of the process. */
xf_conn_guard *xf__coord_guard(xf__coord *co);
/* Whether co is stopping (a signal came): nothing new starts. */
bool xf__coord_stopping(const xf__coord *co);
/* The counts stats.c keeps and metrics.c exports. */
xf__stats *xf__coord_stats(xf__coord *co);
/* The first site co knows (the rest by ->next); added by
 * xf__site_announce only. */
xf__site *xf__coord_sites(const xf__coord *co);
/* The head of co's list of runs, which host.c links and unlinks. */
xf__run **xf__coord_runs(xf__coord *co);
/* What one other file owns and alone looks into: the connections
 * (peer.c), the link upstream (upstream.c), the dashboard (dashboard.c,
 * NULL without --dashboard). */
xf__peers *xf__coord_peers(const xf__coord *co);
xf__uplink *xf__coord_uplink(const xf__coord *co);
xf__dashboard *xf__coord_dashboard(const xf__coord *co);
/* The cached policy version (residency.c's, through xf__policy_cached and
 * xf__policy_cache; NULL before the first), freed with co. */
xf_policy **xf__coord_policy(xf__coord *co);
/* A fresh stream id: even for a model, odd for an update. */
uint64_t xf__stream_id(xf__coord *co, bool update);
xf__site *xf__site_find(xf__coord *co, uint64_t id);
xf__site *xf__site_by_name(xf__coord *co, const char *name);
/* A site's name by id: a site, a regional, or a site behind one; NULL. */
const char *xf__site_name(xf__coord *co, uint64_t id);
/* A SiteAnnounce from p, whose certificate it names (peer.c checked it):
 * the site (or regional and the sites behind it) is recorded, replacing
 * what it said before and any older session of it, and every run told. */
void xf__site_announce(xf__coord *co, xf__peer *p, const Xfed__SiteAnnounce *a);

/* ---- peer.c: connections and their streams ---------------------------------------- */
/* The options of an accepted (or dialed) connection. */
const xf_conn_opts *xf__conn_opts(xf__coord *co, bool accepted);
/* Connections the listener accepts belong to co (NULL: to none, refused). */
void xf__peers_serve(xf__coord *co);
/* Dials upstream (regional role) as the peer *out; its session opening is
 * xf__upstream_on_frame's (env NULL). A dial that fails is logged; nothing
 * is kept. err must not be NULL. */
xf_err xf__peer_dial_upstream(xf__coord *co, xf__peer **out, xf_errctx *err) XF_WARN_UNUSED;
/* p's connection (NULL once closed), certificate and kind. */
xf_conn *xf__peer_conn(const xf__peer *p);
const xf_spiffe_id *xf__peer_id(const xf__peer *p);
xf__peer_kind xf__peer_kind_of(const xf__peer *p);
/* The site p speaks for (NULL: none, or no longer). */
void xf__peer_set_site(xf__peer *p, xf__site *s);
/* The peer after p in co's list (p NULL: the first), NULL after the last. */
xf__peer *xf__peer_next(xf__coord *co, const xf__peer *p);
/* Drops every participant's queued streams of job (a run that ended). */
void xf__peers_drop_job(xf__coord *co, const char *job);
/* Closes every connection (stopping). */
void xf__peers_close(xf__coord *co);
/* The set of a coordinator's connections, empty; NULL out of memory. */
xf__peers *xf__peers_new(void);
/* Frees every peer and ps (the loop has ended; ps may be NULL). */
void xf__peers_free(xf__peers *ps);
/* After each turn of the loop (completed writes are such turns): resumes
 * stalled streams, oldest peer first, while the send budget allows. */
void xf__peers_on_pump(uv_check_t *h);
/* Sends env on p's connection; logs and returns the error. */
xf_err xf__send(xf__peer *p, const Xfed__Envelope *env);
/* Queues an outgoing stream on p: over a model file (a reference is taken)
 * or over owned bytes (taken over), in chunks of chunk_bytes (0: the
 * largest); *opt gives the TensorBegin extras and the job (may be NULL).
 * Then pumps. */
xf_err xf__stream_queue(xf__peer *p, const xf_tensor_desc *desc, xf__model_file *mf, uint8_t *own,
                        size_t len, size_t chunk_bytes, const xf__stream_opts *opt);
/* Drops p's queued streams of a job (job NULL: all of them). */
void xf__stream_drop(xf__peer *p, const char *job);
void xf__stream_pump(xf__peer *p);
/* The head stream's TensorAck (an upload's). */
void xf__stream_acked(xf__peer *p, const Xfed__TensorAck *a);
/* The peer refused the upload `stream_id` (Error naming it): no TensorAck
 * will come, so it leaves p's queue and the streams behind it go on. True
 * when it was queued; its job into job (job_len bytes). What it carried
 * is the caller's to keep. */
bool xf__stream_refused(xf__peer *p, uint64_t stream_id, char *job, size_t job_len);
/* Takes another reference to mf (returned). */
xf__model_file *xf__model_file_ref(xf__model_file *mf);
/* mf's bytes (borrowed while a reference is held) and their count. */
const uint8_t *xf__model_file_bytes(const xf__model_file *mf, size_t *len);
void xf__model_file_unref(xf__model_file *mf);
xf_err xf__model_file_make_as(const xf_model *m, const float *params, xf_checkpoint_dtype dtype,
                              xf__model_file **out, xf_digest *params_digest,
                              xf_errctx *err) XF_WARN_UNUSED;
/* A model file over bytes[0..len) (a model file's encoding), taken over:
 * *bytes is NULL afterwards, on success only. digest, when the caller has
 * it (the blob store names a blob by the same BLAKE2b of its bytes), is the
 * bytes' digest, taken as it is; NULL hashes them here. */
xf_err xf__model_file_adopt(uint8_t **bytes, size_t len, const xf_digest *digest,
                           xf__model_file **out, xf_errctx *err) XF_WARN_UNUSED;
/* The largest frame we send p: what its Hello accepts and, on a CLI
 * session, never more than our own max_frame, so that an operator who
 * lowers max_frame bounds the frames of CLI sessions both ways. */
size_t xf__frame_limit(const xf__peer *p);
/* Sends env to a CLI peer as a DOCUMENT stream of its packed bytes (for a
 * message larger than xf__frame_limit; xf__send calls it). */
xf_err xf__send_document(xf__peer *p, const Xfed__Envelope *env);
/* A frame of a DOCUMENT stream from a CLI peer: acknowledged, and the
 * request it completes handled as if it had come in one frame. */
void xf__document_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env);
/* Drops what p has gathered of a DOCUMENT stream, if anything, and gives
 * its size back to the peers' doc_held (on close). */
void xf__document_drop(xf__peer *p);

/* ---- host.c: job runs, for both roles ------------------------------------------------- */
/* What a run is, for the files that do not own it. */
xf__coord *xf__run_coord(const xf__run *run);
/* The job's id as frames and logs name it (global: the journal's id). */
const char *xf__run_id(const xf__run *run);
xf_jobm *xf__run_machine(const xf__run *run);
const xf_jobspec *xf__run_spec(const xf__run *run);
size_t xf__run_n_params(const xf__run *run);
/* The round whose model sites train from now. */
uint32_t xf__run_model_round(const xf__run *run);
/* A regional aggregator's task (upstream.c), NULL for a global run. */
xf__relay *xf__run_relay(const xf__run *run);
/* Finished: freed once nothing of it is in flight. */
bool xf__run_over(const xf__run *run);
/* The open attempt's aggregator, NULL between attempts. */
xf_aggregator *xf__run_aggregator(const xf__run *run);
/* The open attempt's sealing key (sodium_malloc), NULL when updates are
 * not sealed. */
const uint8_t *xf__run_seal_key(const xf__run *run);
/* The run's plan, NULL before its first. */
const xf_admission *xf__run_plan(const xf__run *run);
/* The sites that refused the newest training attempt, in their words (""
 * when none), and that attempt's round. */
const char *xf__run_refused(const xf__run *run, uint32_t *round);
/* The run's update streams (intake.c) and clocks (stats.c). */
xf__takes *xf__run_takes(xf__run *run);
const xf__takes *xf__run_takes_const(const xf__run *run);
xf__run_clock *xf__run_clock_of(xf__run *run);
/* The runs, newest first: a finished one stays until nothing of it is in
 * flight. */
xf__run *xf__runs_first(xf__coord *co);
xf__run *xf__run_next(const xf__run *run);
/* The global run of journal job id, NULL when none is active. */
xf__run *xf__run_of_job(xf__coord *co, int64_t id);
/* The relay run of job, a finished one included (kept until freed). */
xf__run *xf__run_relay_of(xf__coord *co, const char *job);
/* The runs not over (xfed_jobs_active). */
size_t xf__runs_active(xf__coord *co);
/* Frees every run (the daemon's end). */
void xf__runs_free(xf__coord *co);
/* Cancels a relay run's machine with why, carries out what it says and
 * marks the run over (upstream superseded or cancelled its task). */
void xf__run_end(xf__run *run, const char *why);
/* Frees a run (its machine, model, takes, streams it queued). */
void xf__run_free(xf__run *run);
xf__run *xf__run_by_id(xf__coord *co, const char *job_id);
/* The round and attempt the run's frames name now: the machine's, or a
 * relay's task's (its machine counts attempts of its own). */
uint32_t xf__run_round(const xf__run *run);
uint32_t xf__run_attempt(const xf__run *run);
/* Carries out the run's machine actions, then gives it a plan when it wants
 * one, until nothing is left to do. */
void xf__run_actions(xf__run *run);
/* A participant came (announced) or went: every run is told, the plans of
 * waiting runs are made again. */
void xf__runs_link(xf__coord *co, xf__site *s, bool up);
/* The tick: clocks, plans, finished runs freed, queued jobs started. */
void xf__runs_tick(xf__coord *co);
/* The federation or the policy changed: plans are made again. */
void xf__runs_dirty(xf__coord *co);
/* Global: starts the journal's running, paused and queued jobs (up to
 * XF_COORD_JOBS_MAX). */
void xf__runs_schedule(xf__coord *co);
/* Global: cancels job id's run, if active. */
void xf__run_cancel(xf__coord *co, int64_t id, const char *why);
/* Regional: starts the run of an upstream task whose model has arrived. */
xf_err xf__run_start_relay(xf__coord *co, const char *job_id, const char *params_json,
                           const xf__upstream_task *up, const uint8_t *model, size_t model_len,
                           const xf_digest *model_digest, const uint64_t *cohort,
                           size_t n_cohort, xf_errctx *err) XF_WARN_UNUSED;
/* Whether the last journal write failed. */
bool xf__journal_broken(void);

/* ---- host_frames.c: participants' frames about a job ---------------------------------- */
/* A frame of a participant (site or regional) about a job. */
void xf__run_on_frame(xf__coord *co, xf__site *s, const Xfed__Envelope *env);

/* ---- intake.c: update streams coming in ----------------------------------------------- */
/* A run's update streams of the open attempt, one take per carrier
 * (xf__take is intake.c's). */
struct xf__takes {
  xf__take *v;
  size_t n;
};
void xf__take_abort(xf__run *run, xf__take *t);
xf__take *xf__take_of(xf__run *run, uint64_t carrier);
/* The take of carrier's stream `stream`, or NULL. */
xf__take *xf__take_by_stream(xf__run *run, uint64_t carrier, uint64_t stream);
/* Whether t's TensorBegin was acknowledged (not held back for admission):
 * only then may its chunks come. */
bool xf__take_acked(const xf__take *t);
/* Aborts carrier's take, if it has one. */
void xf__take_drop(xf__run *run, uint64_t carrier);
void xf__takes_clear(xf__run *run);
/* Clears the takes and frees their array (the run's end). */
void xf__takes_free(xf__run *run);
/* The run's takes held back for admission and those staged (metrics.c). */
void xf__takes_count(const xf__run *run, size_t *waiting, size_t *staged);
/* TensorBegin, TensorChunk, TensorEnd of an UPDATE or AGGREGATE stream. */
void xf__intake_begin(xf__run *run, xf__site *s, const Xfed__TensorBegin *m);
void xf__intake_chunk(xf__run *run, xf__site *s, xf__take *t, const Xfed__TensorChunk *c);
void xf__intake_end(xf__run *run, xf__site *s, xf__take *t, const Xfed__TensorEnd *e);
/* Lets waiting uploads in while fewer than max_staged are in flight. */
void xf__intake_admit(xf__run *run);

/* ---- checks.c: what sites report, checked (coordinator/report.h) ---------------------------- */
/* The training records `site` announced for run's dataset (its name and
 * every tag): s itself when site is s's id, else a site behind regional s.
 * 0 when it announced none. */
uint64_t xf__announced_records(const xf__run *run, const xf__site *s, uint64_t site);
/* Checks a Metrics s sent about `site` (its id). False when it is refused:
 * the sender gets Error(XF_ERANGE), the log a report_refused line and the
 * audit trail a refused_report row naming the site, the field and the
 * value; a training report's site is dropped from the attempt (its update
 * is not taken; not for a site behind a regional aggregator), an
 * evaluation's counts as answered. */
bool xf__check_metrics(xf__run *run, xf__site *s, const Xfed__Metrics *m, uint64_t site);
/* Checks the weight of s's update or aggregate (summing sites[0..n)). False
 * when it is refused (answered, logged and audited as above); the caller
 * drops the stream. */
bool xf__check_weight(xf__run *run, xf__site *s, const Xfed__TensorBegin *m,
                      const uint64_t *sites, size_t n);

/* ---- residency.c ------------------------------------------------------------------------ */
/* Whether the global coordinator enforces a residency policy (not with
 * "residency_policy": "off"). Regional aggregators enforce what their
 * tasks carry. */
bool xf__residency_on(const xf__coord *co);
/* Appends a row to this process's audit trail; actor is our certificate
 * name. detail is taken over (may be NULL: {}). Failures are logged, never
 * fatal to the caller (the row is then missing, and the log says so). */
void xf__audit(xf__coord *co, const char *kind, const char *subject, json_t *detail);
/* The cached policy version (NULL before the first) and its replacement
 * by p (taken over; the one before is freed). */
const xf_policy *xf__policy_cached(xf__coord *co);
void xf__policy_cache(xf__coord *co, xf_policy *p);
/* The current policy version, reloaded into the cache when the version
 * table moved on; *out is borrowed from the cache. XF_EDB. */
xf_err xf__policy_current(xf__coord *co, const xf_policy **out, xf_errctx *err) XF_WARN_UNUSED;
/* Decides spec against the current policy version (loaded or reloaded as
 * needed) with this coordinator's region. XF_EDENIED with a message when
 * no policy was ever pushed or the coordinator has no region; errors of
 * xf_policy_decide otherwise. On success the caller frees *out with
 * xf_policy_decision_free. */
xf_err xf__residency_decide(xf__coord *co, const xf_jobspec *spec, xf_policy_decision *out,
                            xf_errctx *err) XF_WARN_UNUSED;
/* The federation as admission sees it, from the sites we know. */
xf_err xf__federation_make(xf__coord *co, xf__federation *out) XF_WARN_UNUSED;
void xf__federation_free(xf__federation *f);
/* Admission of spec on this coordinator now: the policy decided (global
 * role, residency on) and the federation we know. On success the caller
 * frees *out (xf_admission_free); decision_json (may be NULL) gets the
 * policy decision as JSON (NULL without a policy; xf_free). */
xf_err xf__admit(xf__coord *co, const xf_jobspec *spec, xf_admission *out, char **decision_json,
                 xf_errctx *err) XF_WARN_UNUSED;
/* Whether spec's dataset is one a site announced or the current policy
 * lists (xf_admission_check_dataset): XF_EINVAL naming data.dataset, the
 * known datasets and the nearest, for check and submission. */
xf_err xf__admit_check_dataset(xf__coord *co, const xf_jobspec *spec,
                               xf_errctx *err) XF_WARN_UNUSED;
/* Sets the job's state and message in the journal (logs failures). */
void xf__journal_state(xf__coord *co, int64_t job, xf_job_state state, const char *msg);

/* ---- policy_requests.c ------------------------------------------------------------------ */
void xf__policy_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env);

/* ---- requests.c ---------------------------------------------------------------------------- */
void xf__cli_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env);
/* The model digest of a committed model blob: the BLAKE2b-256 of its
 * parameters (docs/model-format.md's `digest`, what a TaskOffer carries and
 * `xfed job export` prints), not the blob's name. From the journal, where
 * submissions and commits note it; a blob of an older journal is decoded
 * once and noted. */
xf_err xf__model_digest(xf__coord *co, const xf_digest *blob, xf_digest *params,
                        xf_errctx *err) XF_WARN_UNUSED;
/* Job id as `xfed job status --json` shows it (requests.c builds both from
 * the same JobInfo); NULL with err set when it cannot be read. */
json_t *xf__job_info_json(xf__coord *co, int64_t id, xf_errctx *err);

/* ---- stats.c: what the coordinator counts since it started -------------------------- */
/* A run's clocks (stats.c's): the phase its machine was in at the last
 * look, since when, and when the open attempt opened. */
struct xf__run_clock {
  xf_jobm_phase seen_phase;
  double phase_since, opened_at;
};
/* Sets up the counts (every build). */
void xf__stats_init(xf__coord *co);
/* Hooks: a run's phase may have moved (host.c after each action
 * list); a round committed or an attempt failed; a peer's connection closed. */
void xf__stats_phase(xf__run *run);
void xf__stats_round(xf__run *run, bool committed);
void xf__stats_peer_closed(xf__coord *co, const xf__peer *p);

/* ---- metrics.c: /metrics and /healthz ----------------------------------------------------- */
/* Serves the counts when cfg.metrics_host is set. A build without the HTTP
 * server (XF_HTTP=OFF: nohttp.c) refuses a set cfg.metrics_host or
 * cfg.dashboard_host with XF_EUNSUPPORTED and answers a DashboardRequest
 * with that error. */
xf_err xf__metrics_start(xf__coord *co, xf_http **out, xf_errctx *err) XF_WARN_UNUSED;
/* Stops the endpoint *http (if any; set even when the start failed) and
 * clears it. */
void xf__metrics_stop(xf_http **http);

/* ---- dashboard.c ------------------------------------------------------------------------- */
/* Serves the dashboard when cfg.dashboard_host is set (global role only)
 * as *out, which is set (for xf__dashboard_stop) even when a later step
 * of the start fails. */
xf_err xf__dashboard_start(xf__coord *co, xf__dashboard **out, xf_errctx *err) XF_WARN_UNUSED;
/* Closes *dash and forgets every token and session, and clears it; a no-op
 * without one. */
void xf__dashboard_stop(xf__dashboard **dash);
/* Answers a DashboardRequest with a token (any user certificate). */
void xf__dashboard_grant(xf__coord *co, xf__peer *p, const Xfed__DashboardRequest *m);

/* ---- upstream.c: the regional role's link upstream ------------------------------------------- */
/* The link, not yet dialing; NULL out of memory. Freed (with the error
 * feedback it kept) once the loop is closed; u may be NULL. */
xf__uplink *xf__uplink_new(void);
void xf__uplink_free(xf__uplink *u);
void xf__upstream_start(xf__coord *co);
void xf__upstream_stop(xf__coord *co);
void xf__upstream_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env);
void xf__upstream_closed(xf__coord *co);
/* Announces the sites behind this aggregator upstream now (the link
 * opened) or soon (a site came or went): changes less than 0.2 s apart go
 * up together, from xf__upstream_tick (every tick of the daemon). */
void xf__upstream_announce(xf__coord *co);
void xf__upstream_announce_soon(xf__coord *co);
void xf__upstream_tick(xf__coord *co);
/* Frames for upstream about a relayed task. */
void xf__upstream_accept(xf__coord *co, const xf__run *run, const uint64_t *sites, size_t n);
void xf__upstream_refuse(xf__coord *co, const xf__run *run, uint64_t site, int reason,
                         const char *details);
/* Sends the region's aggregate of run upstream (run->relay_mean over
 * sites[]), encoded, sealed, resumable; `resend`: the one made before
 * (kept, sealed to the key of the offer upstream holds the task by). */
void xf__upstream_forward(xf__coord *co, xf__run *run, const uint64_t *sites, size_t n,
                          uint64_t weight, bool resend);
void xf__upstream_eval_done(xf__coord *co, const xf__run *run);
/* A relay over the task upstream told us (copied); NULL out of memory. */
xf__relay *xf__relay_new(const xf__upstream_task *up);
void xf__relay_free(xf__relay *r);
/* The task as upstream told it (borrowed from r). */
const xf__upstream_task *xf__relay_task(const xf__relay *r);
/* Keeps the region's aggregate (taken over; NULL when none was made) until
 * it goes upstream. */
void xf__relay_set_aggregate(xf__relay *r, float *mean, uint64_t weight);
/* Passes a site's Metrics upstream unchanged. */
void xf__upstream_metrics(xf__coord *co, const Xfed__Envelope *env);

#endif
