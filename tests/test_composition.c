/* SPDX-License-Identifier: Apache-2.0 */
/* The composition matrix: every combination of topology (flat; regional by
 * spec; mixed by policy), privacy (none; record-level DP-SGD; site central;
 * site local; site distributed), secure aggregation (off; on), uplink
 * compression (none; q8; topk:0.05+q8) and strategy (fedavg; fedadam;
 * median), run against the job machine with simulated sites (tests/sim.c).
 * For each: check's verdict is the outcome — a job it allows reaches done
 * with a finite accuracy, one it refuses is refused at submission with the
 * same words (both are one admission) — nothing hangs, and every site's
 * ledger equals the accountant's charge for the updates that were used. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support.h"
#include "sim.h"

#include "crypto/digest.h"

static char dir[64];

static int group_setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/xf-composition-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  return xf_crypto_init() == XF_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(dir);
  return 0;
}

typedef enum topology { FLAT = 0, REGIONAL, MIXED } topology;
static const char *const topology_names[] = {"flat", "regional", "mixed"};
typedef enum privacy { P_NONE = 0, P_RECORD, P_CENTRAL, P_LOCAL, P_DISTRIBUTED } privacy;
static const char *const privacy_names[] = {"none", "record", "central", "local", "distributed"};
static const char *const compression_names[] = {"none", "q8", "topk:0.05+q8"};
static const xf_job_strategy_kind strategies[] = {XF_JOB_STRATEGY_FEDAVG, XF_JOB_STRATEGY_FEDADAM,
                                                  XF_JOB_STRATEGY_MEDIAN};

static const char mixed_policy[] =
    "{\"regions\": [{\"name\": \"ap\"}, {\"name\": \"eu\"}, {\"name\": \"us\"}],"
    " \"sites\": [{\"name\": \"u1\", \"region\": \"us\"}, {\"name\": \"u2\", \"region\": \"us\"},"
    "  {\"name\": \"e1\", \"region\": \"eu\"}, {\"name\": \"e2\", \"region\": \"eu\"},"
    "  {\"name\": \"p1\", \"region\": \"ap\"}, {\"name\": \"p2\", \"region\": \"ap\"}],"
    " \"datasets\": ["
    "  {\"name\": \"synth\", \"site\": \"u1\", \"classification\": \"internal\"},"
    "  {\"name\": \"synth\", \"site\": \"u2\", \"classification\": \"internal\"},"
    "  {\"name\": \"synth\", \"site\": \"e1\", \"classification\": \"confidential\"},"
    "  {\"name\": \"synth\", \"site\": \"e2\", \"classification\": \"confidential\"},"
    "  {\"name\": \"synth\", \"site\": \"p1\", \"classification\": \"internal\"},"
    "  {\"name\": \"synth\", \"site\": \"p2\", \"classification\": \"internal\"}],"
    " \"rules\": ["
    "  {\"id\": \"eu-no-updates\", \"effect\": \"deny\", \"kind\": \"update\","
    "   \"select\": {\"region\": \"eu\"}, \"destinations\": [\"*\"]},"
    "  {\"id\": \"eu-regional\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
    "   \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"],"
    "   \"conditions\": {\"min_cohort\": 2}},"
    "  {\"id\": \"ap-updates\", \"effect\": \"allow\", \"kind\": \"update\","
    "   \"select\": {\"region\": \"ap\"}, \"destinations\": [\"us\"]}]}";

static void build(sim_config *c, topology t, privacy p, bool secagg, int compression,
                  xf_job_strategy_kind strategy) {
  memset(c, 0, sizeof(*c));
  c->dir = dir;
  c->data_seed = 5;
  c->spec = sim_spec(2);
  xf_jobspec *s = &c->spec;
  xf_job_strategy_defaults(&s->strategy, strategy);
  xf_privacy_spec *pv = &s->privacy;
  switch (p) {
  case P_NONE: pv->clip = secagg ? 1.0 : 0; break;
  case P_RECORD:
    *pv = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_RECORD, .mode = XF_PRIVACY_LOCAL, .clip = 1.0,
                            .has_target_epsilon = true, .target_epsilon = 8, .delta = 1e-5};
    break;
  case P_CENTRAL:
    *pv = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_SITE, .mode = XF_PRIVACY_CENTRAL, .clip = 1.0,
                            .has_target_epsilon = true, .target_epsilon = 8, .delta = 1e-5};
    break;
  case P_LOCAL:
    *pv = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_SITE, .mode = XF_PRIVACY_LOCAL, .clip = 1.0,
                            .has_target_epsilon = true, .target_epsilon = 50, .delta = 1e-5};
    break;
  case P_DISTRIBUTED:
    *pv = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_SITE, .mode = XF_PRIVACY_DISTRIBUTED,
                            .clip = 1.0, .has_target_epsilon = true, .target_epsilon = 8,
                            .delta = 1e-5};
    break;
  }
  s->secure_aggregation.enabled = secagg;
  if (compression == 1) s->compression.uplink = (xf_job_uplink){.quant_bits = 8};
  if (compression == 2) s->compression.uplink = (xf_job_uplink){.topk_fraction = 0.05, .quant_bits = 8};
  switch (t) {
  case FLAT:
    for (int i = 0; i < 4; i++) {
      static const char *const names[] = {"a1", "a2", "a3", "a4"};
      c->sites[c->n_sites++] = (sim_site_cfg){.name = names[i], .region = "us"};
    }
    break;
  case REGIONAL:
    s->topology = XF_JOB_TOPOLOGY_REGIONAL;
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "e1", .region = "eu", .via = "agg-eu"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "e2", .region = "eu", .via = "agg-eu"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "p1", .region = "ap", .via = "agg-ap"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "p2", .region = "ap", .via = "agg-ap"};
    break;
  case MIXED:
    c->policy_json = mixed_policy;
    c->coordinator_region = "us";
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "u1", .region = "us"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "u2", .region = "us"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "e1", .region = "eu", .via = "agg-eu"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "e2", .region = "eu", .via = "agg-eu"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "p1", .region = "ap"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = "p2", .region = "ap"};
    break;
  }
}

/* One combination: empty string when it held, else what did not. */
static void check_one(const sim_config *c, const sim_result *r, char *fault, size_t len) {
  fault[0] = '\0';
  if (r->verdict != XF_ADMIT_RUNS) {
    if (!r->refusal[0]) snprintf(fault, len, "refused without a reason");
    else if (r->attempts) snprintf(fault, len, "refused, yet an attempt opened");
    return;
  }
  if (r->phase != XF_JOBM_DONE) {
    snprintf(fault, len, "check allowed it, but it ended %s: %.400s",
             xf_jobm_phase_name(r->phase), r->message);
    return;
  }
  bool stopped = strstr(r->message, "stopped") != NULL;
  if (!stopped && r->rounds_committed != c->spec.rounds) {
    snprintf(fault, len, "done after %u of %u rounds without a stop: %.400s",
             r->rounds_committed, c->spec.rounds, r->message);
    return;
  }
  if (!isfinite(r->accuracy)) {
    snprintf(fault, len, "done with accuracy %g", r->accuracy);
    return;
  }
  for (size_t i = 0; i < r->n_sites; i++) {
    const sim_site_result *s = &r->sites[i];
    if (!s->site_noise) continue;
    if (s->charged != s->used) {
      snprintf(fault, len, "site %s charged %u releases but %u of its updates were used", s->name,
               s->charged, s->used);
      return;
    }
    double want = s->expected_epsilon, got = s->ledger_epsilon;
    if (!(fabs(got - want) <= 1e-6 * (fabs(want) > 1 ? fabs(want) : 1))) {
      snprintf(fault, len, "site %s's ledger says epsilon %.9g, the accountant %.9g for %u updates",
               s->name, got, want, s->used);
      return;
    }
  }
  const xf_privacy_spec *pv = &c->spec.privacy;
  if (isfinite(r->job_epsilon) && pv->has_target_epsilon &&
      r->job_epsilon > pv->target_epsilon * (1 + 1e-9)) {
    snprintf(fault, len, "the job spent epsilon %g, above its target %g", r->job_epsilon,
             pv->target_epsilon);
    return;
  }
}

static void run_topology(topology t) {
  unsigned runs = 0, refused = 0, faults = 0;
  double t0 = (double)clock() / CLOCKS_PER_SEC;
  for (int p = 0; p < 5; p++)
    for (int sa = 0; sa < 2; sa++)
      for (int cmp = 0; cmp < 3; cmp++)
        for (int st = 0; st < 3; st++) {
          sim_config c;
          build(&c, t, (privacy)p, sa, cmp, strategies[st]);
          sim_result r;
          int rc = sim_run(&c, &r);
          char fault[600] = "";
          if (rc != 0) snprintf(fault, sizeof(fault), "the harness failed: %.500s", r.message);
          else check_one(&c, &r, fault, sizeof(fault));
          char name[160];
          snprintf(name, sizeof(name), "%s/%s/secagg-%s/%s/%s", topology_names[t],
                   privacy_names[p], sa ? "on" : "off", compression_names[cmp],
                   xf_job_strategy_kind_name(strategies[st]));
          if (r.verdict == XF_ADMIT_RUNS) runs++;
          else refused++;
          if (fault[0]) {
            faults++;
            print_error("%-48s FAULT %s\n", name, fault);
          } else if (getenv("XF_MATRIX_VERBOSE")) {
            print_message("%-48s %s%s%s (accuracy %.3f, %u rounds)\n", name,
                          r.verdict == XF_ADMIT_RUNS ? "done" : "refused: ",
                          r.verdict == XF_ADMIT_RUNS ? "" : r.refusal,
                          r.verdict == XF_ADMIT_RUNS ? "" : "", r.accuracy, r.rounds_committed);
          }
        }
  double t1 = (double)clock() / CLOCKS_PER_SEC;
  print_message("%s: %u combinations ran to done, %u were refused by check and submission "
                "alike, %u faults (%.1f s of CPU)\n",
                topology_names[t], runs, refused, faults, t1 - t0);
  assert_int_equal(faults, 0);
}

static void flat_combinations_do_what_check_says(void **state) {
  (void)state;
  run_topology(FLAT);
}

static void regional_combinations_do_what_check_says(void **state) {
  (void)state;
  run_topology(REGIONAL);
}

static void policy_mixed_combinations_do_what_check_says(void **state) {
  (void)state;
  run_topology(MIXED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(flat_combinations_do_what_check_says),
      cmocka_unit_test(regional_combinations_do_what_check_says),
      cmocka_unit_test(policy_mixed_combinations_do_what_check_says),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
