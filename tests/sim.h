/* SPDX-License-Identifier: Apache-2.0 */
/* A federation without sockets for tests: the global job machine, a relay
 * job machine per regional aggregator, and sites that do what xfed-site
 * does with a task — checks, the privacy ledger, real training on a small
 * synthetic dataset, the update pipeline, secure aggregation with the
 * guarded clients a site runs (signed keys, shares and survivor sets; the
 * signatures name-keyed, tests/sa_identity.h) — all driven through one
 * message queue on an injected clock.
 * Admission (job/admission.h) and the residency decision are the real
 * ones. Used by test_composition (the composition matrix) and the job
 * machine's regression tests. */
#ifndef XF_TESTS_SIM_H
#define XF_TESTS_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/jobmachine.h"
#include "job/admission.h"
#include "job/jobspec.h"

#define SIM_SITES_MAX 12
#define SIM_NAME_MAX 32

typedef struct sim_site_cfg {
  const char *name;
  const char *region;
  const char *via;        /* its regional aggregator's name, NULL: straight to the coordinator */
  bool refuse_policy;     /* refuses every task (POLICY_DENIED, as a local rule would) */
  bool silent;            /* never answers an offer */
  bool drop_after_accept; /* accepts, then leaves before it reports */
  bool refuse_survivors;  /* under secure aggregation, refuses to sign the survivor set (as
                             a site whose check of it failed: SecAggRefusal) */
  double budget_epsilon;  /* its dataset's budget (0: none) */
} sim_site_cfg;

typedef struct sim_config {
  xf_jobspec spec;        /* validated by the caller, or refused by validation */
  sim_site_cfg sites[SIM_SITES_MAX];
  size_t n_sites;
  const char *coordinator_region;
  const char *policy_json; /* NULL: no residency policy */
  uint32_t data_seed;
  const char *dir;         /* scratch directory for the sites' ledgers */
} sim_config;

typedef struct sim_site_result {
  char name[SIM_NAME_MAX];
  uint32_t trained;        /* tasks it trained */
  uint32_t charged;        /* releases its ledger recorded */
  uint32_t used;           /* its updates in a committed aggregate */
  double ledger_epsilon;   /* its dataset's spend on the job, at the job's delta */
  double expected_epsilon; /* the accountant's charge for `used` updates */
  bool site_noise;         /* the site adds noise (unit record, or mode local) */
} sim_site_result;

typedef struct sim_result {
  bool validated;                 /* the spec passed xf_jobspec_validate */
  char validation[512];           /* else why */
  xf_admit_verdict verdict;       /* check's (and submission's) */
  char refusal[2048];             /* xf_admission_refusal, "" when it runs */
  xf_jobm_phase phase;            /* where the job ended (it ran when verdict is RUNS) */
  char message[XF_JOBM_MSG_MAX];
  uint32_t rounds_committed;
  uint32_t attempts;              /* attempts opened in all */
  double accuracy;                /* the final model on every site's test split, weighted */
  double job_epsilon;             /* noise in the sum: the coordinator's account (NAN: none) */
  uint32_t max_invited, max_reported; /* in sites */
  uint32_t refused_rows;          /* refusals that reached the global coordinator */
  char refusals[2048];            /* their words */
  uint32_t held_aggregates;       /* regional aggregates held back at their aggregator */
  uint64_t weight_last;           /* the last committed round's total weight at the global */
  sim_site_result sites[SIM_SITES_MAX];
  size_t n_sites;
  uint32_t steps;                 /* messages delivered */
} sim_result;

/* Runs the job of cfg to its end (or until nothing moves: a hang is
 * reported as phase != DONE with message "stalled"). Returns 0, or -1 when
 * the harness itself failed (its reason in out->message). */
int sim_run(const sim_config *cfg, sim_result *out);

/* A spec for the simulations: logreg on the synthetic data, `rounds`
 * rounds, min_sites 2, one epoch of batch 16, seed 7. */
xf_jobspec sim_spec(uint32_t rounds);

#endif
