/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator daemon's shared state: connections (peers), the sites
 * and regional aggregators it knows, the job it is running, and the
 * functions its files call on one another. Internal to coordinator/daemon*.c,
 * coordinator/requests.c and coordinator/upstream.c. */
#ifndef XF_COORDINATOR_DAEMON_INTERNAL_H
#define XF_COORDINATOR_DAEMON_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "coordinator/aggregate.h"
#include "coordinator/daemon.h"
#include "job/jobspec.h"
#include "coordinator/journal.h"
#include "coordinator/round.h"
#include "crypto/digest.h"
#include "privacy/noise.h"
#include "crypto/seal.h"
#include "crypto/secagg.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "codec/codec.h"
#include "net/conn.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"
#include "policy/audit.h"
#include "policy/policy.h"
#include "storage/blob.h"
#include "storage/db.h"

/* Bytes of a model file a peer may send us (a MODEL stream upstream→regional). */
#define XF_COORD_MODEL_MAX (1ull << 30)
/* How long a site that lost its link in a round may take to come back
 * before the round stops waiting for it. */
#define XF_COORD_RECONNECT_GRACE_S 10.0

/* A model file shared by every stream that sends it. */
typedef struct xf__model_file {
  uint8_t *bytes;
  size_t len;
  xf_digest digest; /* BLAKE2b-256 of bytes: the stream digest and the blob name */
  int refs;
} xf__model_file;

/* Ciphertext queued on all connections together above which outgoing
 * streams wait (docs/coordinator.md, "Memory"): with a model going to many
 * sites at once, each connection's own high-water mark would otherwise let
 * memory grow with the number of sites. */
#define XF_COORD_SEND_BUDGET (8u * 1024u * 1024u)

typedef enum xf__peer_kind {
  XF__PEER_UNKNOWN = 0, /* before the session's first application frame */
  XF__PEER_SITE,        /* a site (site certificate) */
  XF__PEER_REGIONAL,    /* a regional aggregator dialing us (coordinator certificate) */
  XF__PEER_CLI,         /* a user */
  XF__PEER_UPSTREAM     /* our own link to the global coordinator (regional role) */
} xf__peer_kind;

struct xf__coord;
struct xf__site;

/* One connection. Owned by the coordinator's list; freed in on_close. */
typedef struct xf__peer {
  xf_conn *conn; /* NULL once closed */
  struct xf__coord *co;
  xf_session session;
  xf_spiffe_id id;
  xf__peer_kind kind;
  struct xf__site *site; /* SITE and REGIONAL, after SiteAnnounce */
  /* The one outgoing tensor stream (a model to a site, a model to the CLI,
   * an aggregate upstream): its sender, what it borrows, and a message that
   * xf_conn_send refused as busy and that goes first on drain. */
  xf_tensor_sender *tx;
  xf__model_file *tx_model; /* borrowed reference, or NULL */
  uint8_t *tx_own;          /* owned bytes, or NULL */
  xf_tensor_msg tx_msg;
  bool tx_pending;     /* tx_msg is filled and not sent yet */
  bool tx_await_ack;   /* sent TensorBegin of an upload: wait for TensorAck */
  bool tx_stalled;     /* waiting for the process-wide send budget */
  uint64_t tx_bytes;   /* payload bytes sent on the stream */
  uint64_t tx_weight;  /* put into the stream's TensorBegin: set them before
                          every xf__stream_start */
  uint32_t tx_attempt, tx_contributors;
  struct xf__peer *next;
} xf__peer;

/* What a site announced of one dataset. */
typedef struct xf__dataset {
  char name[XF_JOB_IDENT_MAX];
  char tags[XF_JOB_TAGS_MAX][XF_JOB_IDENT_MAX];
  uint32_t n_tags;
  uint32_t train_records, test_records, classes, h, w, c;
} xf__dataset;

/* A site or a regional aggregator we know of; kept while the process runs,
 * across its reconnects. */
typedef struct xf__site {
  uint64_t id;
  char name[XF_COORD_NAME_MAX];
  char region[XF_COORD_NAME_MAX];
  bool regional;
  xf__peer *peer;      /* its live session, or NULL */
  double away_since;   /* when it lost its link during a round; 0 */
  xf__dataset *datasets;
  size_t n_datasets;
  char (*behind)[XF_COORD_NAME_MAX]; /* a regional's sites */
  size_t n_behind;
  /* Its update in the current round. */
  xf_tensor_receiver *rx;
  xf_agg_update *upd;
  uint64_t rx_weight;
  uint8_t *rx_encoded;    /* a compressed update's bytes, decoded and folded at its end */
  size_t rx_encoded_len;
  xf_seal_receiver *rx_opener; /* opens a sealed update's chunks, or NULL */
  bool rx_stash;               /* its plaintext goes to the stash, not the fold */
  bool waiting_admission; /* TensorBegin taken, TensorAck held back */
  bool eval_pending;      /* final evaluation asked, not answered */
  uint64_t bytes_down;    /* model bytes sent in the current round */
  struct xf__site *next;
} xf__site;

typedef enum xf__phase {
  XF__PHASE_WAIT = 0, /* no attempt open: waiting for enough eligible sites */
  XF__PHASE_ROUND,    /* an attempt is open */
  XF__PHASE_EVAL,     /* every round committed: the final model is being evaluated */
  XF__PHASE_OVER      /* finished, failed or cancelled: about to be dropped */
} xf__phase;

/* Secure aggregation of one round attempt (coordinator/secagg_run.c). */
typedef enum xf__sa_phase {
  XF__SA_ADVERT = 0, /* collecting the sites' keys */
  XF__SA_SHARE,      /* collecting their encrypted shares */
  XF__SA_MASKED,     /* shares routed: masked inputs arrive as updates */
  XF__SA_UNMASK,     /* the round closed: collecting the survivors' reveals */
  XF__SA_DONE        /* the mean is unmasked */
} xf__sa_phase;

typedef struct xf__sa_share {
  uint32_t from, to;
  uint8_t ct[XF_SECAGG_SHARE_BYTES];
} xf__sa_share;

typedef struct xf__sa {
  xf_secagg_params p;
  xf_secagg_server *server;
  xf_codec_fixed fixed;  /* the shared integer scale */
  uint32_t attempt;
  uint64_t *ids;         /* index - 1 -> site id (the cohort) */
  double *scale;         /* index - 1 -> the site's share of the cohort's weight */
  uint64_t *weight;      /* index - 1 -> its weight (records, or 1 under central privacy) */
  uint8_t *state;        /* index - 1 -> progress flags */
  uint32_t **inputs;     /* index - 1 -> its whole masked input, held until unmasking */
  xf__sa_share *shares;  /* received, waiting to be routed */
  size_t n_shares, cap_shares;
  xf__sa_phase phase;
  double deadline;       /* of the current phase */
  uint32_t *u3;          /* the survivors, once unmasking starts */
  size_t n_u3;
  uint64_t subset_seed;  /* with uplink top-k: the shared random subset's seed */
  uint32_t *subset;      /* ... its indices (p.length of them), or NULL: all */
  float *mean;           /* the unmasked mean (DONE), taken by the commit */
  uint64_t mean_weight;  /* the survivors' total weight */
} xf__sa;

/* The job the coordinator runs (one at a time), or a regional aggregator's
 * relay of one upstream task. */
typedef struct xf__job {
  int64_t id;
  char id_text[32];
  xf_jobspec spec;
  char *spec_json; /* canonical, sent in TaskOffer */
  bool relay;      /* a regional's sub-round of an upstream task */
  bool evaluate_only;
  uint32_t offer_round, offer_attempt; /* relay: the upstream task's */
  double offer_deadline;               /* relay: the upstream deadline */
  xf_round *round;
  xf_model *model;
  float *params;
  size_t n_params;
  xf__model_file *mf; /* the current global model as a model file */
  xf_digest params_digest;
  xf__model_file *offer_mf; /* the model as offered: mf, or its downlink-compressed form */
  xf_digest offer_digest;   /* the parameter digest of what sites decode from offer_mf */
  uint32_t model_round; /* the round that produced params (0: initial) */
  xf_aggregator *agg;
  xf_server_opt *opt;
  xf__phase phase;
  double wait_until;     /* resume: wait for the interrupted cohort until then */
  uint32_t wait_for;     /* ... or until this many sites are eligible */
  double eval_deadline;
  uint64_t bytes_up, bytes_down; /* not yet added to the journal */
  /* Privacy refusals in the open attempt (BUDGET_EXHAUSTED wins over
   * TARGET_REACHED; 0: none) and the sites' own words, for the job's
   * message: a budget spent stays spent, so the round is not retried. */
  int privacy_refusal;
  char privacy_note[1024];
  xf__sa *sa; /* secure aggregation of the open attempt, or NULL */
  /* Without secure aggregation: this attempt's X25519 key pair that updates
   * are sealed to (sodium_malloc'ed, wiped when freed), or NULL. */
  struct xf__seal_keys *seal;
  /* Residency (coordinator/residency.c). Global role with a policy: the
   * decision the open or next attempt runs under, decided again before
   * every attempt; paused while the policy does not allow the job. */
  bool has_plan;
  xf_policy_decision plan;
  bool paused;
  double paused_checked; /* when a paused job was last decided again */
} xf__job;

typedef struct xf__seal_keys {
  uint8_t pk[XF_SEAL_PUBLICKEYBYTES];
  uint8_t sk[XF_SEAL_SECRETKEYBYTES];
} xf__seal_keys;

/* The regional role's link upstream and the task it is relaying. */
/* What a regional aggregator was told of its task's residency
 * (Xfed__Residency, copied). */
typedef struct xf__residency {
  bool present;
  uint64_t version;
  char coordinator_region[XF_COORD_NAME_MAX];
  char path[16]; /* "direct" or "regional" */
  char rule[XF_POLICY_NAME_MAX];
  uint32_t min_cohort;
  bool require_secagg, has_max_epsilon;
  double max_epsilon, epsilon;
  char (*sites)[XF_COORD_NAME_MAX]; /* the sites behind us that may take part */
  size_t n_sites;
} xf__residency;

typedef struct xf__upstream {
  xf__peer *peer; /* open session, or NULL */
  bool dialing;
  uv_timer_t redial;
  double backoff_s;
  uv_getaddrinfo_t resolve;
  /* The task offer being received (model stream pending). */
  bool offer_active;
  char job_id[32];
  uint32_t round, attempt, model_round;
  bool evaluate_only;
  double deadline;
  xf_digest model_digest;
  char *params_json;
  xf__residency residency; /* the offer's, or present false */
  xf_tensor_receiver *model_rx;
  uint8_t *model_buf;
  size_t model_len;
  /* The aggregate waiting for upstream's final TensorAck. */
  uint8_t *agg_bytes;
  size_t agg_len;
  size_t agg_plain_len;   /* before sealing */
  bool agg_encoded;       /* agg_bytes hold the job's uplink encoding, not float32 */
  bool agg_sealed;        /* ... sealed to seal_pk, with agg_epk */
  uint8_t agg_epk[XF_SEAL_PUBLICKEYBYTES];
  bool seal;              /* the offer named the global coordinator's sealing key */
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  uint64_t agg_weight;
  uint32_t agg_contributors;
  /* Top-k error feedback of this region's aggregates, for one job at a time
   * (in memory: a restarted aggregator starts again from zero). */
  char residual_job[32];
  float *residual;
  size_t residual_n;
} xf__upstream;

typedef struct xf__coord {
  uv_loop_t loop;
  xf_coord_config cfg;
  char name[XF_COORD_NAME_MAX]; /* from our certificate */
  xf_tls *tls;
  xf_listener *listener;
  xf_db *db;               /* global role only */
  xf_blob_store *blobs;    /* global role only */
  xf__peer *peers;
  xf__site *sites;
  xf__job *active;
  uv_timer_t tick;
  uv_check_t pump; /* after each loop turn: resume streams stalled on the budget */
  size_t stalled;  /* peers with tx_stalled set */
  uv_signal_t sig_term, sig_int, sig_hup;
  bool stopping;
  xf__upstream up;
  xf_noise *noise; /* central privacy: the aggregator's noise (CSPRNG-keyed) */
  /* The audit trail: the journal itself on the global role, STATE/audit.db
   * on a regional aggregator. */
  xf_db *audit;
  /* Global role: the policy version decisions are taken against (cached;
   * reloaded when the version table moves on), NULL before the first. */
  xf_policy *policy;
} xf__coord;

/* ---- daemon.c ------------------------------------------------------------------------ */
double xf__now(void);
/* Sends env on p's connection; logs and returns the error (the caller
 * usually drops the peer from its round on failure). */
xf_err xf__send(xf__peer *p, const Xfed__Envelope *env);
/* Starts p's outgoing stream over a model file (a reference is taken) or
 * over owned bytes (taken over), in chunks of chunk_bytes (0: the largest);
 * then pumps it. */
xf_err xf__stream_start(xf__peer *p, const xf_tensor_desc *desc, xf__model_file *mf,
                        uint8_t *own, size_t len, bool await_ack, size_t chunk_bytes);
void xf__stream_stop(xf__peer *p);
void xf__stream_pump(xf__peer *p);
void xf__model_file_unref(xf__model_file *mf);
xf__site *xf__site_find(xf__coord *co, uint64_t id);
xf_err xf__peer_new(xf__coord *co, xf__peer **out);
/* Callbacks and limits of our connections (accepted: for the listener). */
const xf_conn_opts *xf__conn_opts(xf__coord *co, bool accepted);
xf__site *xf__site_by_name(xf__coord *co, const char *name);

/* ---- jobrun.c ----------------------------------------------------------------------- */
/* Loads the running job from the journal (after a restart) or the oldest
 * queued one and makes it active. */
void xf__job_schedule(xf__coord *co);
/* Called every tick and whenever sites come and go. */
void xf__job_tick(xf__coord *co);
void xf__job_free(xf__job *job);
/* A participant's application frame about the active job. */
void xf__job_on_frame(xf__coord *co, xf__site *s, const Xfed__Envelope *env);
/* A participant connected and announced itself; or lost its link. */
void xf__job_site_back(xf__coord *co, xf__site *s);
void xf__job_site_away(xf__coord *co, xf__site *s);
/* Cancels the active job (the CLI's JobCancel). */
void xf__job_cancel(xf__coord *co, const char *why);
/* Builds the model file for params with the parameters stored as dtype;
 * params_digest (may be NULL) gets the digest of what a reader decodes.
 * XF_ENOMEM, or XF_ERANGE for a value a half dtype cannot hold. */
xf_err xf__model_file_make_as(const xf_model *m, const float *params, xf_checkpoint_dtype dtype,
                              xf__model_file **out, xf_digest *params_digest,
                              xf_errctx *err) XF_WARN_UNUSED;
/* The same as float32. */
xf_err xf__model_file_make(const xf_model *m, const float *params, xf__model_file **out,
                           xf_errctx *err);
/* The dataset of s a job with this spec trains on (name and tags), or NULL. */
const xf__dataset *xf__job_dataset(const xf_jobspec *spec, const xf__site *s);
/* Whether s holds the job's data (dataset, tags, shape). */
bool xf__site_eligible(const xf__coord *co, const xf__job *job, const xf__site *s);
/* Starts the relay job of an upstream task (regional role). */
xf_err xf__job_start_relay(xf__coord *co, xf_errctx *err);


/* ---- secure aggregation (secagg_run.c) ---- */

/* Starts secure aggregation for the round's freshly drawn cohort (job->sa). */
xf_err xf__sa_start(xf__coord *co, xf__job *job, xf_errctx *err) XF_WARN_UNUSED;
void xf__sa_free(xf__sa *sa);
/* The cohort index (1..n) of a site, 0 when not in it. */
uint32_t xf__sa_index(const xf__sa *sa, uint64_t site);
/* Fills the TaskOffer's setup for cohort index `index` (points into sa). */
void xf__sa_setup(const xf__sa *sa, uint32_t index, Xfed__SecAggSetup *out);
/* Adverts, shares and reveals from a cohort site. */
void xf__sa_on_frame(xf__coord *co, xf__job *job, xf__site *s, const Xfed__Envelope *env);
/* A site's whole masked input (length words, aligned); takes *bytes
 * (xf_malloc'ed) and sets it to NULL on success. */
xf_err xf__sa_masked(xf__job *job, xf__site *s, uint8_t **bytes, size_t len,
                     xf_errctx *err) XF_WARN_UNUSED;
/* The round closed with quorum: asks the survivors to reveal; false when it
 * is already under way or could not start (the round's commit failed). */
bool xf__sa_unmask_start(xf__coord *co, xf__job *job);
/* Phase deadlines, and a cohort site that left or refused. */
void xf__sa_tick(xf__coord *co, xf__job *job, double now);
void xf__sa_site_changed(xf__coord *co, xf__job *job);

/* jobrun.c's side: leave a site out of the round; carry on with the commit
 * once the mean is unmasked; or give up on this attempt's result. */
void xf__job_drop_site(xf__coord *co, xf__job *job, xf__site *s, const char *why);
void xf__job_commit(xf__coord *co, xf__job *job);
void xf__job_commit_failed(xf__coord *co, xf__job *job, const char *why);

/* Whether the job compresses its uplink, and its codec. */
bool xf__job_uplink(const xf_jobspec *spec, xf_codec_uplink *codec);

/* ---- residency.c (docs/policy.md, "Enforcement") ----------------------------------- */

/* Whether the global coordinator enforces a residency policy (not with
 * "residency_policy": "off"). Regional aggregators enforce what their
 * offers carry. */
bool xf__residency_on(const xf__coord *co);
/* Appends a row to this process's audit trail; actor is our certificate
 * name. detail is taken over (may be NULL: {}). Failures are logged, never
 * fatal to the caller (the row is then missing, and the log says so). */
void xf__audit(xf__coord *co, const char *kind, const char *subject, json_t *detail);
/* Decides spec against the current policy version (loaded or reloaded as
 * needed) with this coordinator's region. XF_EDENIED with a message when
 * no policy was ever pushed or the coordinator has no region; errors of
 * xf_policy_decide otherwise. On success the caller frees *out with
 * xf_policy_decision_free. */
xf_err xf__residency_decide(xf__coord *co, const xf_jobspec *spec, xf_policy_decision *out,
                            xf_errctx *err) XF_WARN_UNUSED;
/* The decision as one paragraph for a person: what is not allowed, per
 * site, and what would make it allowed. */
void xf__residency_explain(const xf_policy_decision *d, char *buf, size_t len);
/* The global coordinator's plan of job: its region's entry (NULL when the
 * region holds none of the job's sites, or there is no plan). */
const xf_policy_region_plan *xf__residency_region(const xf__job *job, const char *region);
/* How many of the sites behind regional aggregator s the plan lets take part. */
size_t xf__residency_behind(const xf__job *job, const xf__site *s);
/* Whether s may be invited under the residency plan (always true without
 * one): a site straight to us only where its region's updates may come
 * directly; a regional aggregator where its region's aggregate may leave
 * and enough sites behind it are eligible; a regional's own sites only when
 * its task names them. */
bool xf__residency_site_ok(const xf__coord *co, const xf__job *job, const xf__site *s);
/* Fills the TaskOffer's residency for s from the job's plan; names (room for
 * s->n_behind pointers) receives the eligible sites behind a regional. */
void xf__residency_offer(const xf__coord *co, const xf__job *job, const xf__site *s,
                         Xfed__Residency *out, char **names);
/* Before an attempt opens: decides the job again (audited), pauses it when
 * the policy no longer allows it and resumes it when it does again. True
 * when the attempt may open. */
bool xf__residency_admit(xf__coord *co, xf__job *job);
/* Sets the job's state and message in the journal (logs failures). */
void xf__journal_state(xf__coord *co, const xf__job *job, xf_job_state state, const char *msg);
/* The policy changed (a push): the active job is decided again from its
 * next attempt, and a paused one resumes if it is allowed now. */
void xf__policy_changed(xf__coord *co);

/* ---- policy_requests.c ------------------------------------------------------------- */
/* PolicyRequest and AuditQuery from a user's session. */
void xf__policy_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env);

/* ---- requests.c --------------------------------------------------------------------- */
void xf__cli_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env);

/* ---- upstream.c --------------------------------------------------------------------- */
void xf__upstream_start(xf__coord *co);
void xf__upstream_stop(xf__coord *co);
void xf__upstream_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env);
void xf__upstream_closed(xf__coord *co);
void xf__upstream_announce(xf__coord *co);
/* The relay finished: send the aggregate (mean delta, owned bytes taken
 * over) or report failure upstream. */
void xf__upstream_aggregate(xf__coord *co, const xf__job *job, float *mean, size_t n,
                            uint64_t weight, uint32_t contributors);
void xf__upstream_failed(xf__coord *co, const xf__job *job, const char *why);
/* Passes a privacy refusal of the region's sites upstream (TaskRefusal with
 * reason, a TaskRefusal.Reason, and the sites' details). */
void xf__upstream_refuse(xf__coord *co, const xf__job *job, int reason, const char *details);
void xf__upstream_eval_done(xf__coord *co, const xf__job *job);
/* Forwards a site's Metrics upstream unchanged. */
void xf__upstream_forward(xf__coord *co, const Xfed__Envelope *env);

#endif
