/* SPDX-License-Identifier: Apache-2.0 */
/* The site's decisions on what an aggregator asks of it, with no sockets,
 * no clock and no database of its own: whether a TaskOffer is taken (its
 * format, job spec, dataset, residency plan's release conditions, local
 * rules, model, privacy plan against the ledger, room, deadline and the
 * update's plan with its secure-aggregation setup) and whether a TaskGo
 * can be followed. The registry, the ledger and the local rules are the
 * caller's, behind xf_site_offer_env; the daemon (site/daemon.c) fills it,
 * tests and tests/fuzz/fuzz_site_task.c fill it with plain values.
 * docs/site-machine.md lists the checks in order. */
#ifndef XF_SITE_OFFER_H
#define XF_SITE_OFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobprivacy.h"
#include "job/jobspec.h"
#include "net/xfed.pb-c.h"
#include "site/registry.h"
#include "site/residency.h"
#include "update/update.h"

/* Job ids are the coordinator's job numbers in decimal; 63 characters is
 * far more than any will need and keeps a hostile id out of the logs. */
#define XF_SITE_JOB_ID_MAX 64
/* Room for a refusal's text, terminator included (TaskRefusal.details). */
#define XF_SITE_WHY_MAX 1024

/* The shuffle seed of a site's local training in one round: the first 8
 * bytes, little-endian, of BLAKE2b-256(job_seed as 8 bytes LE || round as 4
 * bytes LE || site name). */
uint64_t xf_site_shuffle_seed(uint64_t job_seed, uint32_t round, const char *site);

/* The stream id of a site's update when the offer names none
 * (TaskOffer.update_stream_id 0): round << 16 | attempt << 1 | 1. */
uint64_t xf_site_update_stream_id(uint32_t round, uint32_t attempt);

/* What the site reads while it decides. Every callback returns XF_OK or an
 * error with err filled; `user` is passed back unchanged. */
typedef struct xf_site_offer_env {
  const char *site;   /* this site's name (site.json) */
  const char *region; /* this site's region (site.json) */
  unsigned threads;   /* the backend's threads, for the update's plan */
  void *user;
  /* The registry's record of the dataset `name` into *out (the caller
   * frees it with xf_site_dataset_free); XF_ENOENT when none is
   * registered. */
  xf_err (*dataset)(void *user, const char *name, xf_site_dataset *out, xf_errctx *err);
  /* The privacy ledger (privacy/ledger.h, xf_ledger_epsilon): the
   * dataset's epsilon at delta, spent by `job` (NULL: by every job), with
   * `charge` added when it is not NULL. */
  xf_err (*ledger_epsilon)(void *user, const char *dataset, const char *job,
                           const xf_privacy_charge *charge, double delta, double *out,
                           xf_errctx *err);
  /* The site's own residency rules on a task that carries a plan
   * (xf_site_residency_check), the verdict recorded in its audit trail
   * (xf_site_residency_audit). An error means the verdict cannot be acted
   * on. NULL: the site has no local rules (every task is allowed). */
  xf_err (*local_rules)(void *user, const xf_site_task_ref *task, const xf_site_residency *res,
                        const xf_jobspec *spec, const xf_site_dataset *ds,
                        xf_site_residency_verdict *out, xf_errctx *err);
} xf_site_offer_env;

/* The offer's residency plan kept with its task: res's strings point into
 * the buffers beside it, so the copy may be moved only with
 * xf_site_plan_keep. */
typedef struct xf_site_plan {
  bool present;
  xf_site_residency res;
  char coordinator_region[XF_POLICY_NAME_MAX];
  char aggregator_region[XF_POLICY_NAME_MAX];
  char path[16];
  char rule[XF_POLICY_NAME_MAX];
} xf_site_plan;

/* The wire's Residency as plain values (zeroes when r is NULL); strings are
 * borrowed from r. */
void xf_site_residency_of(const Xfed__Residency *r, xf_site_residency *out);
/* r copied into *out (present false when r is NULL). */
void xf_site_plan_keep(xf_site_plan *out, const Xfed__Residency *r);
/* Whether the plan puts conditions on what leaves this region: the regional
 * path, or a rule's min_cohort, require_secagg or max_epsilon. */
bool xf_site_plan_has_conditions(const xf_site_residency *res);
/* The release check (policy/release.h) of the plan's conditions on what
 * this site's update becomes part of when it leaves `region`: the job's
 * secure aggregation and privacy, summed from `contributors` sites. why
 * gets the check's sentence when it is refused. */
bool xf_site_release_allows(const char *region, const xf_site_residency *res,
                            const xf_jobspec *spec, unsigned contributors, char *why,
                            size_t why_len);

/* The protocol's SecAggSetup as update/update.h's setup for site `site`.
 * XF_EINVAL when it is malformed on the wire or names the cohort wrongly;
 * xf_update_plan_site checks the rest against the job. */
xf_err xf_site_secagg_setup_of(const char *site, const Xfed__SecAggSetup *su, size_t n_params,
                               xf_update_secagg *out, xf_errctx *err) XF_WARN_UNUSED;

/* The privacy check of a task (at its offer, and again right before its
 * update first goes out, since another job may have spent since): the plan
 * for this dataset into *plan, and whether this round's release (*charge)
 * keeps the job within its target_epsilon and the dataset within its
 * budget and the residency rule's max_epsilon (res may be NULL), the lower
 * cap checked first. Returns the refusal reason (UNSPECIFIED: go ahead)
 * with the numbers in why. */
Xfed__TaskRefusal__Reason xf_site_privacy_check(const xf_site_offer_env *env, const char *job,
                                                uint32_t round, const xf_jobspec *spec,
                                                const xf_site_dataset *ds,
                                                const xf_site_residency *res, size_t n_params,
                                                xf_privacy_plan *plan, xf_privacy_charge *charge,
                                                char *why, size_t why_len);

/* Whether an offer is malformed on the wire (no job id, an overlong one,
 * a model digest of the wrong size); msg gets the Error's text. Such an
 * offer is answered with an Error, not a refusal. */
bool xf_site_offer_malformed(const Xfed__TaskOffer *o, char *msg, size_t msg_len);

/* Which check decided an offer. */
typedef enum xf_site_offer_step {
  XF_SITE_OFFER_TAKEN = 0,   /* every check passed */
  XF_SITE_OFFER_SPEC,        /* the job spec does not parse here */
  XF_SITE_OFFER_DATASET,     /* no such dataset, or it lacks a tag */
  XF_SITE_OFFER_RELEASE,     /* the plan's release conditions refuse the job */
  XF_SITE_OFFER_LOCAL_ERROR, /* the local rules cannot be checked or recorded */
  XF_SITE_OFFER_LOCAL,       /* the local rules refuse it */
  XF_SITE_OFFER_MODEL,       /* the model does not fit the dataset, or distributed noise
                                without secure aggregation */
  XF_SITE_OFFER_PRIVACY,     /* the privacy plan, the job's target or a budget */
  XF_SITE_OFFER_BUSY,        /* every place is taken */
  XF_SITE_OFFER_DEADLINE,    /* the deadline has passed */
  XF_SITE_OFFER_SETUP,       /* the update's plan or its secure-aggregation setup */
} xf_site_offer_step;

/* "taken", "spec", "dataset", "release", "local-error", "local", "model",
 * "privacy", "busy", "deadline", "setup". */
const char *xf_site_offer_step_name(xf_site_offer_step s);

/* What the site knows of the place it is asked to take besides the offer. */
typedef struct xf_site_offer_room {
  uint64_t now_ms;  /* Unix ms, by this site's clock */
  const char *busy; /* NULL while there is room; else the refusal's text (the tasks held) */
} xf_site_offer_room;

/* An offer's outcome. When taken, the task's terms: the caller owns
 * `dataset` (xf_site_dataset_free) and reads the rest. */
typedef struct xf_site_offer_verdict {
  xf_site_offer_step step;
  Xfed__TaskRefusal__Reason reason; /* UNSPECIFIED when taken */
  char why[XF_SITE_WHY_MAX];        /* the refusal's text */
  /* The local rules, when they ran (step LOCAL_ERROR or later): the verdict,
   * or the error that kept one from being recorded. */
  bool local_ran;
  xf_site_residency_verdict local;
  xf_errctx local_err;

  xf_jobspec spec;
  xf_site_dataset dataset;
  size_t n_params;
  xf_privacy_plan plan;
  xf_privacy_charge charge;  /* what releasing this round's update costs the dataset */
  uint64_t shuffle_seed;
  bool secagg;               /* the job's update goes out masked */
  xf_update_offer uo;        /* uo.secagg: the offer's setup is in uo.sa */
} xf_site_offer_verdict;

/* Decides a well-formed offer (xf_site_offer_malformed false) for a site
 * that holds no task of it: the checks in the order docs/site-machine.md
 * lists, the first that fails naming the refusal. It reads env's
 * registry, ledger and local rules, which may write the audit row; nothing
 * else. A callback's error (out of memory included) is a refusal whose
 * text names it; on a refusal *out owns nothing. */
void xf_site_offer_check(const xf_site_offer_env *env, const Xfed__TaskOffer *o,
                         const xf_site_offer_room *room, xf_site_offer_verdict *out);

/* What a held task settled at its offer, for the check of its TaskGo. */
typedef struct xf_site_go_task {
  const xf_jobspec *spec;
  const xf_site_plan *plan_kept;     /* the offer's residency plan */
  const xf_privacy_plan *privacy;
  size_t n_params;
  bool evaluate_only, secagg;
} xf_site_go_task;

typedef enum xf_site_go_step {
  XF_SITE_GO_FOLLOWED = 0, /* the go can be followed */
  XF_SITE_GO_RELEASE,      /* the cohort is smaller than the plan allows: POLICY_DENIED */
  XF_SITE_GO_SETUP,        /* its secure-aggregation setup: UNSUPPORTED */
} xf_site_go_step;

typedef struct xf_site_go_verdict {
  xf_site_go_step step;
  Xfed__TaskRefusal__Reason reason;
  char why[XF_SITE_WHY_MAX];
  bool begin; /* the go's setup is in uo->sa: the round of secure aggregation begins */
} xf_site_go_verdict;

/* Decides a TaskGo for a held task: the release conditions with the real
 * cohort, then its secure-aggregation setup, taken into *uo (left as the
 * offer set it otherwise). */
void xf_site_go_check(const xf_site_offer_env *env, const xf_site_go_task *t,
                      const Xfed__TaskGo *g, xf_update_offer *uo, xf_site_go_verdict *out);

#endif
