/* SPDX-License-Identifier: Apache-2.0 */
/* The site's decisions on offers and goes (site/offer.h), with no sockets:
 * a registry of one dataset, a ledger and local rules that the tests set,
 * and the offers as the wire carries them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "secagg_setup.h"
#include "base/alloc.h"
#include "site/offer.h"

#define SITE "eu-berlin"
#define REGION "eu"

/* tiny: 6 train records of 1x1x2, 3 classes, tag t1 (as the daemon's
 * integration tests register it). */
#define SPEC_LOGREG                                                                   \
  "{\"name\": \"tiny-logreg\", \"model\": {\"arch\": \"logreg\"},"                    \
  " \"data\": {\"dataset\": \"tiny\", \"tags\": [\"t1\"]}, \"rounds\": 3,"            \
  " \"min_sites\": 1, \"local\": {\"epochs\": 3, \"batch_size\": 4, \"lr\": 0.1}, \"seed\": 42}"
#define SPEC_LOCAL_DP                                                                    \
  "{\"name\": \"ldp\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"tiny\"," \
  " \"tags\": [\"t1\"]}, \"rounds\": 3, \"min_sites\": 1, \"local\": {\"epochs\": 1,"        \
  " \"batch_size\": 2, \"lr\": 0.1}, \"privacy\": {\"unit\": \"site\", \"mode\": \"local\"," \
  " \"clip\": 1.0, \"noise_multiplier\": 1.0%s}, \"seed\": 4}"
#define SPEC_SECAGG                                                                      \
  "{\"name\": \"sa\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"tiny\"," \
  " \"tags\": [\"t1\"]}, \"rounds\": 3, \"min_sites\": 2, \"local\": {\"epochs\": 1,"        \
  " \"batch_size\": 4, \"lr\": 0.1}, \"secure_aggregation\": {\"enabled\": true}, \"seed\": 5}"

/* What the site reads, as the tests set it. */
typedef struct world {
  bool registered;        /* tiny is registered */
  bool has_budget;
  double budget;          /* the dataset's budget, at 1e-5 */
  const char *trainer;    /* an external trainer, or NULL */
  bool ledger_fails;
  double job_spent, all_spent, charge_adds; /* the ledger's answers */
  int ledger_reads;
  bool local;             /* the site has local rules */
  bool local_fails, local_refuses;
  int local_calls;
} world;

static xf_err w_dataset(void *user, const char *name, xf_site_dataset *out, xf_errctx *err) {
  world *w = user;
  if (!w->registered || strcmp(name, "tiny") != 0)
    return xf_fail(err, XF_ENOENT, "no dataset '%s'", name);
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "tiny");
  out->tags = xf_calloc(1, sizeof(char *));
  if (!out->tags) return xf_fail(err, XF_ENOMEM, "out of memory");
  out->tags[0] = xf_strdup("t1");
  if (!out->tags[0]) {
    xf_site_dataset_free(out);
    return xf_fail(err, XF_ENOMEM, "out of memory");
  }
  out->n_tags = 1;
  out->train_records = 6;
  out->test_records = 3;
  out->h = out->w = 1;
  out->c = 2;
  out->classes = 3;
  out->features = 2;
  out->has_budget = w->has_budget;
  out->budget_epsilon = w->budget;
  out->budget_delta = 1e-5;
  if (w->trainer && !(out->trainer = xf_strdup(w->trainer))) {
    xf_site_dataset_free(out);
    return xf_fail(err, XF_ENOMEM, "out of memory");
  }
  return XF_OK;
}

static xf_err w_ledger(void *user, const char *dataset, const char *job,
                       const xf_privacy_charge *charge, double delta, double *out,
                       xf_errctx *err) {
  world *w = user;
  (void)dataset;
  (void)delta;
  w->ledger_reads++;
  if (w->ledger_fails) return xf_fail(err, XF_EDB, "database is locked");
  *out = (job ? w->job_spent : w->all_spent) + (charge ? w->charge_adds : 0);
  return XF_OK;
}

static xf_err w_local(void *user, const xf_site_task_ref *task, const xf_site_residency *res,
                      const xf_jobspec *spec, const xf_site_dataset *ds,
                      xf_site_residency_verdict *v, xf_errctx *err) {
  world *w = user;
  (void)res;
  (void)spec;
  (void)ds;
  w->local_calls++;
  assert_string_equal(task->site, SITE);
  assert_string_equal(task->region, REGION);
  if (w->local_fails) return xf_fail(err, XF_EDB, "the audit trail is read-only");
  memset(v, 0, sizeof(*v));
  v->allowed = !w->local_refuses;
  v->policy_version = 3;
  snprintf(v->rule, sizeof(v->rule), "%s", w->local_refuses ? "no-us" : "none");
  snprintf(v->path, sizeof(v->path), "direct");
  snprintf(v->why, sizeof(v->why), "%s", w->local_refuses ? "the update would leave" : "ok");
  if (w->local_refuses)
    snprintf(v->details, sizeof(v->details), "local rule no-us keeps updates in eu");
  return XF_OK;
}

typedef struct fixture {
  world w;
  xf_site_offer_env env;
  Xfed__TaskOffer o;
  uint8_t digest[XF_DIGEST_BYTES];
  uint8_t seal_key[XF_SEAL_PUBLICKEYBYTES];
  char spec[2048];
  xf_site_offer_room room;
  xf_site_offer_verdict v;
} fixture;

static int setup(void **state) {
  fixture *f = xf_calloc(1, sizeof(*f));
  if (!f) return -1;
  f->w = (world){.registered = true};
  f->env = (xf_site_offer_env){.site = SITE, .region = REGION, .threads = 1, .user = &f->w,
                               .dataset = w_dataset, .ledger_epsilon = w_ledger};
  Xfed__TaskOffer init = XFED__TASK_OFFER__INIT;
  f->o = init;
  f->o.job_id = "7";
  f->o.round = 1;
  f->o.attempt = 1;
  f->o.model_digest.data = f->digest;
  f->o.model_digest.len = sizeof(f->digest);
  snprintf(f->spec, sizeof(f->spec), "%s", SPEC_LOGREG);
  f->o.params_json = f->spec;
  f->o.deadline_unix_ms = 2000000;
  f->room = (xf_site_offer_room){.now_ms = 1000000};
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  xf_site_dataset_free(&f->v.dataset);
  xf_free(f);
  return 0;
}

static void with_local_rules(fixture *f) {
  f->w.local = true;
  f->env.local_rules = w_local;
}

static void decide(fixture *f) {
  xf_site_dataset_free(&f->v.dataset);
  xf_site_offer_check(&f->env, &f->o, &f->room, &f->v);
}

/* The verdict is a refusal at `step` for `reason` whose text holds `part`. */
static void refused(const fixture *f, xf_site_offer_step step, Xfed__TaskRefusal__Reason reason,
                    const char *part) {
  if (f->v.step != step || f->v.reason != reason || !strstr(f->v.why, part))
    fail_msg("verdict %s (reason %d) \"%s\"; wanted %s (reason %d) with \"%s\"",
             xf_site_offer_step_name(f->v.step), (int)f->v.reason, f->v.why,
             xf_site_offer_step_name(step), (int)reason, part);
  assert_null(f->v.dataset.tags); /* a refusal owns nothing */
}

static void taken(const fixture *f) {
  if (f->v.step != XF_SITE_OFFER_TAKEN)
    fail_msg("refused at %s (reason %d): %s", xf_site_offer_step_name(f->v.step),
             (int)f->v.reason, f->v.why);
  assert_int_equal(f->v.reason, XFED__TASK_REFUSAL__REASON__UNSPECIFIED);
}

static void set_spec(fixture *f, const char *spec) {
  snprintf(f->spec, sizeof(f->spec), "%s", spec);
}

/* ---- the wire ---------------------------------------------------------------------- */

static void offer_without_a_job_id_is_an_error_not_a_refusal(void **state) {
  fixture *f = *state;
  char msg[600];
  f->o.job_id = NULL;
  assert_true(xf_site_offer_malformed(&f->o, msg, sizeof(msg)));
  assert_string_equal(msg, "TaskOffer with no job_id");
  f->o.job_id = "";
  assert_true(xf_site_offer_malformed(&f->o, msg, sizeof(msg)));
}

static void offer_with_an_overlong_job_id_is_an_error(void **state) {
  fixture *f = *state;
  char id[XF_SITE_JOB_ID_MAX + 1], msg[600];
  memset(id, '9', sizeof(id) - 1);
  id[sizeof(id) - 1] = 0;
  f->o.job_id = id;
  assert_true(xf_site_offer_malformed(&f->o, msg, sizeof(msg)));
  assert_string_equal(msg, "TaskOffer with an overlong job_id");
  id[XF_SITE_JOB_ID_MAX - 1] = 0; /* 63 characters: taken */
  assert_false(xf_site_offer_malformed(&f->o, msg, sizeof(msg)));
}

static void offer_with_a_short_model_digest_is_an_error_naming_the_sizes(void **state) {
  fixture *f = *state;
  char msg[600];
  f->o.model_digest.len = 31;
  assert_true(xf_site_offer_malformed(&f->o, msg, sizeof(msg)));
  assert_string_equal(msg, "TaskOffer for job 7 round 1: model_digest has 31 bytes, not 32");
}

/* ---- the job and the dataset --------------------------------------------------------- */

static void offer_whose_spec_does_not_parse_is_refused_naming_params_json(void **state) {
  fixture *f = *state;
  set_spec(f, "{\"name\": \"x\", \"no such field\": 1}");
  decide(f);
  refused(f, XF_SITE_OFFER_SPEC, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "the job spec does not parse here: ");
  assert_non_null(strstr(f->v.why, "params_json"));
}

static void offer_for_an_unregistered_dataset_is_refused_naming_it(void **state) {
  fixture *f = *state;
  char *at = strstr(f->spec, "\"tiny\"");
  memcpy(at, "\"huge\"", 6);
  decide(f);
  refused(f, XF_SITE_OFFER_DATASET, XFED__TASK_REFUSAL__REASON__NO_DATASET,
          "no dataset named 'huge' is registered at site eu-berlin");
}

static void offer_needing_a_tag_the_dataset_lacks_is_refused_naming_the_tag(void **state) {
  fixture *f = *state;
  char *at = strstr(f->spec, "\"t1\"");
  memcpy(at, "\"t9\"", 4);
  decide(f);
  refused(f, XF_SITE_OFFER_DATASET, XFED__TASK_REFUSAL__REASON__NO_DATASET,
          "dataset 'tiny' at site eu-berlin lacks the tags t9");
}

static void unreadable_registry_is_named_in_the_refusal(void **state) {
  fixture *f = *state;
  f->w.registered = false;
  decide(f);
  refused(f, XF_SITE_OFFER_DATASET, XFED__TASK_REFUSAL__REASON__NO_DATASET, "no dataset named");
}

static void offer_of_a_model_that_does_not_fit_the_dataset_is_refused(void **state) {
  fixture *f = *state;
  set_spec(f, "{\"name\": \"c\", \"model\": {\"arch\": \"cnn\", \"preset\": \"lenet5\"},"
              " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 1, \"min_sites\": 1}");
  decide(f);
  refused(f, XF_SITE_OFFER_MODEL, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "model");
}

static void declared_model_that_does_not_fit_names_the_layer_and_field(void **state) {
  fixture *f = *state;
  set_spec(f, "{\"name\": \"d\", \"model\": {\"layers\": [{\"kind\": \"maxpool2d\", "
              "\"kernel\": 3}, {\"kind\": \"dense\", \"units\": 3}]}, \"data\": {\"dataset\": "
              "\"tiny\"}, \"rounds\": 1, \"min_sites\": 1}");
  decide(f);
  refused(f, XF_SITE_OFFER_MODEL, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "model.layers[0].kernel: 3");
}

static void distributed_noise_without_secure_aggregation_is_refused_as_the_spec(void **state) {
  fixture *f = *state;
  set_spec(f, "{\"name\": \"p\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": "
              "\"tiny\"}, \"rounds\": 1, \"min_sites\": 1, \"privacy\": {\"unit\": \"site\", "
              "\"mode\": \"distributed\", \"clip\": 1.0, \"noise_multiplier\": 1.0}}");
  decide(f);
  refused(f, XF_SITE_OFFER_SPEC, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "privacy.mode: \"distributed\" adds only a share of the noise");
}

/* ---- room and time --------------------------------------------------------------------- */

static void offer_past_its_deadline_is_refused_by_the_site_clock(void **state) {
  fixture *f = *state;
  f->o.deadline_unix_ms = f->room.now_ms - 5000;
  decide(f);
  refused(f, XF_SITE_OFFER_DEADLINE, XFED__TASK_REFUSAL__REASON__DEADLINE_TOO_SHORT,
          "the deadline passed 5.0 s ago by this site's clock");
}

static void offer_due_this_very_millisecond_is_refused(void **state) {
  fixture *f = *state;
  f->o.deadline_unix_ms = f->room.now_ms;
  decide(f);
  refused(f, XF_SITE_OFFER_DEADLINE, XFED__TASK_REFUSAL__REASON__DEADLINE_TOO_SHORT,
          "passed 0.0 s ago");
  f->o.deadline_unix_ms = 0; /* no deadline at all */
  decide(f);
  taken(f);
}

static void offer_when_every_place_is_taken_is_refused_busy_naming_the_tasks(void **state) {
  fixture *f = *state;
  f->room.busy = "this site holds 8 tasks: job 1 round 1 attempt 1 (training)";
  decide(f);
  refused(f, XF_SITE_OFFER_BUSY, XFED__TASK_REFUSAL__REASON__BUSY, "job 1 round 1 attempt 1");
}

static void a_full_site_still_refuses_what_it_could_never_take_for_that_reason(void **state) {
  fixture *f = *state;
  f->room.busy = "this site holds 8 tasks";
  char *at = strstr(f->spec, "\"tiny\"");
  memcpy(at, "\"huge\"", 6);
  decide(f);
  refused(f, XF_SITE_OFFER_DATASET, XFED__TASK_REFUSAL__REASON__NO_DATASET, "huge");
}

/* ---- privacy and the ledger ----------------------------------------------------------------- */

static void local_dp(fixture *f, const char *extra) {
  snprintf(f->spec, sizeof(f->spec), SPEC_LOCAL_DP, extra);
}

static void offer_refused_by_the_ledger_names_the_budget_and_the_spend(void **state) {
  fixture *f = *state;
  local_dp(f, "");
  f->w.has_budget = true;
  f->w.budget = 1.0;
  f->w.all_spent = 0.9;
  f->w.charge_adds = 0.4;
  decide(f);
  refused(f, XF_SITE_OFFER_PRIVACY, XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED,
          "dataset 'tiny' at site eu-berlin has spent epsilon 0.9 (delta 1e-05) across jobs; "
          "round 1 of this job (sampling rate ");
  assert_non_null(strstr(f->v.why, "would take it to 1.3, above its budget 1"));
}

static void offer_within_the_budget_is_taken_with_its_charge(void **state) {
  fixture *f = *state;
  local_dp(f, "");
  f->w.has_budget = true;
  f->w.budget = 1.0;
  f->w.all_spent = 0.5;
  f->w.charge_adds = 0.4;
  decide(f);
  taken(f);
  assert_true(f->v.plan.site_noise);
  assert_true(f->v.charge.steps >= 1);
  assert_true(f->v.charge.noise_multiplier > 0);
  assert_int_equal(f->w.ledger_reads, 4); /* the job's spend, then the dataset's */
}

static void offer_past_the_jobs_target_epsilon_is_refused_target_reached(void **state) {
  fixture *f = *state;
  local_dp(f, ", \"target_epsilon\": 2.0");
  f->w.job_spent = 1.8;
  f->w.charge_adds = 0.5;
  decide(f);
  refused(f, XF_SITE_OFFER_PRIVACY, XFED__TASK_REFUSAL__REASON__TARGET_REACHED,
          "dataset 'tiny': this job has spent epsilon 1.8 (delta ");
  assert_non_null(strstr(f->v.why, "round 1 would take it to 2.3, above its target_epsilon 2"));
}

static void residency_cap_below_the_budget_is_named_as_the_binding_cap(void **state) {
  fixture *f = *state;
  local_dp(f, ", \"target_epsilon\": 1.0");
  f->w.has_budget = true;
  f->w.budget = 5.0;
  f->w.all_spent = 0.9;
  f->w.charge_adds = 0.4;
  Xfed__Residency res = XFED__RESIDENCY__INIT;
  res.policy_version = 4;
  res.coordinator_region = "eu";
  res.aggregator_region = "eu";
  res.path = "direct";
  res.rule = "cap-eu";
  res.has_max_epsilon = true;
  res.max_epsilon = 1.0;
  f->o.residency = &res;
  decide(f);
  refused(f, XF_SITE_OFFER_PRIVACY, XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED,
          "above the cap 1 that residency policy rule 'cap-eu' (coordinator policy version 4) "
          "sets, lower than this site's budget 5 (delta 1e-05)");
}

static void unreadable_ledger_refuses_the_offer_unsupported(void **state) {
  fixture *f = *state;
  local_dp(f, "");
  f->w.ledger_fails = true;
  decide(f);
  refused(f, XF_SITE_OFFER_PRIVACY, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "the privacy ledger cannot be read: database is locked");
}

static void record_privacy_with_a_trainer_that_declares_no_dp_is_refused(void **state) {
  fixture *f = *state;
  set_spec(f, "{\"name\": \"r\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": "
              "\"tiny\"}, \"rounds\": 1, \"min_sites\": 1, \"local\": {\"batch_size\": 2}, "
              "\"privacy\": {\"unit\": \"record\", \"mode\": \"local\", \"clip\": 1.0, "
              "\"noise_multiplier\": 1.0}}");
  f->w.trainer = "/opt/train.py";
  decide(f);
  refused(f, XF_SITE_OFFER_PRIVACY, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "its external trainer declares no DP (--trainer-dp none)");
}

static void evaluate_only_offer_reads_no_ledger(void **state) {
  fixture *f = *state;
  local_dp(f, "");
  f->w.ledger_fails = true;
  f->o.evaluate_only = true;
  decide(f);
  taken(f);
  assert_int_equal(f->w.ledger_reads, 0);
  assert_false(f->v.plan.site_noise);
}

static void release_check_refuses_when_another_job_spent_since_the_offer(void **state) {
  fixture *f = *state;
  local_dp(f, "");
  f->w.has_budget = true;
  f->w.budget = 1.0;
  f->w.all_spent = 0.2;
  f->w.charge_adds = 0.4;
  decide(f);
  taken(f);
  f->w.all_spent = 0.7; /* another job's round, charged meanwhile */
  xf_privacy_plan plan;
  xf_privacy_charge charge;
  char why[XF_SITE_WHY_MAX];
  Xfed__TaskRefusal__Reason r =
      xf_site_privacy_check(&f->env, "7", 1, &f->v.spec, &f->v.dataset, NULL, f->v.n_params,
                            &plan, &charge, why, sizeof(why));
  assert_int_equal(r, XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED);
  assert_non_null(strstr(why, "has spent epsilon 0.7"));
  assert_memory_equal(&charge, &f->v.charge, sizeof(charge));
}

/* ---- residency ------------------------------------------------------------------------------ */

static void regional_plan(Xfed__Residency *res) {
  Xfed__Residency init = XFED__RESIDENCY__INIT;
  *res = init;
  res->policy_version = 2;
  res->coordinator_region = "us";
  res->aggregator_region = "eu";
  res->path = "regional";
  res->rule = "eu-agg";
  res->min_cohort = 3;
  res->require_secagg = true;
}

static void regional_plan_requiring_secagg_refuses_a_job_without_it(void **state) {
  fixture *f = *state;
  Xfed__Residency res;
  regional_plan(&res);
  f->o.residency = &res;
  f->o.hold = true;
  with_local_rules(f);
  decide(f);
  refused(f, XF_SITE_OFFER_RELEASE, XFED__TASK_REFUSAL__REASON__POLICY_DENIED, "rule eu-agg");
  assert_non_null(strstr(f->v.why, "enable secure_aggregation"));
  assert_false(f->v.local_ran); /* the release conditions come first */
  assert_int_equal(f->w.local_calls, 0);
}

static void evaluate_only_offer_skips_the_release_conditions(void **state) {
  fixture *f = *state;
  Xfed__Residency res;
  regional_plan(&res);
  f->o.residency = &res;
  f->o.evaluate_only = true;
  decide(f);
  taken(f);
}

static void plan_conditions_are_the_regional_path_or_a_rules_limits(void **state) {
  (void)state;
  xf_site_residency res = {.path = "direct", .min_cohort = 1};
  assert_false(xf_site_plan_has_conditions(&res));
  res.path = "regional";
  assert_true(xf_site_plan_has_conditions(&res));
  res = (xf_site_residency){.path = "direct", .min_cohort = 2};
  assert_true(xf_site_plan_has_conditions(&res));
  res = (xf_site_residency){.require_secagg = true};
  assert_true(xf_site_plan_has_conditions(&res));
  res = (xf_site_residency){.has_max_epsilon = true};
  assert_true(xf_site_plan_has_conditions(&res));
}

static void kept_plan_owns_its_strings(void **state) {
  (void)state;
  Xfed__Residency res;
  regional_plan(&res);
  char rule[] = "eu-agg";
  res.rule = rule;
  xf_site_plan kept;
  xf_site_plan_keep(&kept, &res);
  rule[0] = 'X';
  assert_true(kept.present);
  assert_string_equal(kept.res.rule, "eu-agg");
  assert_string_equal(kept.res.aggregator_region, "eu");
  assert_int_equal(kept.res.min_cohort, 3);
  xf_site_plan_keep(&kept, NULL);
  assert_false(kept.present);
}

static void local_rules_refusal_is_policy_denied_with_their_details(void **state) {
  fixture *f = *state;
  with_local_rules(f);
  f->w.local_refuses = true;
  decide(f);
  refused(f, XF_SITE_OFFER_LOCAL, XFED__TASK_REFUSAL__REASON__POLICY_DENIED,
          "local rule no-us keeps updates in eu");
  assert_true(f->v.local_ran);
  assert_false(f->v.local.allowed);
  assert_string_equal(f->v.local.rule, "no-us");
}

static void local_rules_that_cannot_be_recorded_refuse_unsupported(void **state) {
  fixture *f = *state;
  with_local_rules(f);
  f->w.local_fails = true;
  decide(f);
  refused(f, XF_SITE_OFFER_LOCAL_ERROR, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "the site cannot check or record its local residency rules: the audit trail is "
          "read-only");
  assert_true(f->v.local_ran);
  assert_string_equal(f->v.local_err.msg, "the audit trail is read-only");
}

static void local_rules_only_restrict(void **state) {
  fixture *f = *state;
  decide(f);
  taken(f);
  xf_site_offer_verdict without = f->v;
  memset(&f->v.dataset, 0, sizeof(f->v.dataset)); /* `without` holds it now */
  with_local_rules(f);
  decide(f);
  taken(f);
  assert_int_equal(f->w.local_calls, 1);
  assert_true(f->v.local_ran && f->v.local.allowed);
  assert_int_equal(f->v.n_params, without.n_params);
  assert_memory_equal(&f->v.uo, &without.uo, sizeof(without.uo));
  assert_int_equal(f->v.shuffle_seed, without.shuffle_seed);
  xf_site_dataset_free(&without.dataset);
}

static void local_rules_see_no_offer_the_dataset_check_refused(void **state) {
  fixture *f = *state;
  with_local_rules(f);
  char *at = strstr(f->spec, "\"t1\"");
  memcpy(at, "\"t9\"", 4);
  decide(f);
  refused(f, XF_SITE_OFFER_DATASET, XFED__TASK_REFUSAL__REASON__NO_DATASET, "t9");
  assert_int_equal(f->w.local_calls, 0);
}

/* ---- what an accepted offer settles ----------------------------------------------------------- */

static void accepted_offer_carries_the_model_size_and_the_seeds(void **state) {
  fixture *f = *state;
  f->o.round = 3;
  decide(f);
  taken(f);
  assert_string_equal(f->v.dataset.name, "tiny");
  assert_int_equal(f->v.n_params, 2 * 3 + 3); /* logreg: 2 features, 3 classes */
  assert_int_equal(f->v.shuffle_seed, xf_site_shuffle_seed(42, 3, SITE));
  assert_int_not_equal(f->v.uo.rounding_seed, f->v.shuffle_seed);
  assert_false(f->v.secagg);
  assert_false(f->v.uo.sealed);
}

static void offer_with_a_seal_key_seals_the_update_to_it(void **state) {
  fixture *f = *state;
  memset(f->seal_key, 0x5a, sizeof(f->seal_key));
  f->o.seal_key.data = f->seal_key;
  f->o.seal_key.len = sizeof(f->seal_key);
  decide(f);
  taken(f);
  assert_true(f->v.uo.sealed);
  assert_memory_equal(f->v.uo.seal_pk, f->seal_key, sizeof(f->seal_key));
  f->o.seal_key.len = 31; /* not a key: the update goes unsealed */
  decide(f);
  taken(f);
  assert_false(f->v.uo.sealed);
}

static void shuffle_seed_differs_by_site_and_round(void **state) {
  (void)state;
  uint64_t a = xf_site_shuffle_seed(42, 1, "eu-berlin");
  assert_int_equal(a, xf_site_shuffle_seed(42, 1, "eu-berlin"));
  assert_int_not_equal(a, xf_site_shuffle_seed(42, 2, "eu-berlin"));
  assert_int_not_equal(a, xf_site_shuffle_seed(42, 1, "eu-paris"));
  assert_int_not_equal(a, xf_site_shuffle_seed(43, 1, "eu-berlin"));
}

static void default_update_stream_id_encodes_round_and_attempt(void **state) {
  (void)state;
  assert_int_equal(xf_site_update_stream_id(3, 2), (3u << 16) | (2u << 1) | 1u);
  assert_int_equal(xf_site_update_stream_id(0, 0) & 1u, 1u); /* odd: the site's streams */
}

/* ---- secure aggregation ------------------------------------------------------------------------ */

static void secagg_offer_with_its_setup_is_taken_masked_and_unsealed(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  Xfed__SecAggSetup su;
  uint8_t seed[32];
  xf_test_secagg_setup(&su, seed, 3);
  f->o.secagg = &su;
  memset(f->seal_key, 1, sizeof(f->seal_key));
  f->o.seal_key.data = f->seal_key;
  f->o.seal_key.len = sizeof(f->seal_key);
  decide(f);
  taken(f);
  assert_true(f->v.secagg && f->v.uo.secagg);
  assert_false(f->v.uo.sealed); /* masked updates are never sealed */
  assert_int_equal(f->v.uo.sa.index, 1);
  assert_int_equal(f->v.uo.sa.params.n, 3);
  assert_int_equal(f->v.uo.sa.params.length, f->v.n_params);
}

static void secagg_job_offered_without_setup_or_hold_is_refused(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  decide(f);
  refused(f, XF_SITE_OFFER_SETUP, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "secure aggregation: the job asks for secure aggregation but the offer has no setup");
}

static void held_secagg_offer_without_setup_waits_for_the_go(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  f->o.hold = true;
  decide(f);
  taken(f);
  assert_true(f->v.secagg);
  assert_false(f->v.uo.secagg);
}

static void secagg_setup_naming_another_site_at_this_index_is_refused(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  Xfed__SecAggSetup su;
  uint8_t seed[32];
  xf_test_secagg_setup(&su, seed, 3);
  su.index = 2;
  f->o.secagg = &su;
  decide(f);
  refused(f, XF_SITE_OFFER_SETUP, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "secure aggregation: the secure-aggregation setup puts site 'eu-paris' at this site's "
          "index 2; this is eu-berlin");
  assert_false(f->v.uo.secagg); /* no round to forget */
}

static void secagg_setup_with_a_short_graph_seed_is_refused(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  Xfed__SecAggSetup su;
  uint8_t seed[32];
  xf_test_secagg_setup(&su, seed, 3);
  su.graph_seed.len = 16;
  f->o.secagg = &su;
  decide(f);
  refused(f, XF_SITE_OFFER_SETUP, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "its graph_seed has 16 bytes, not 32");
}

static void secagg_setup_naming_too_few_sites_is_refused(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  Xfed__SecAggSetup su;
  uint8_t seed[32];
  xf_test_secagg_setup(&su, seed, 3);
  su.n_cohort = 2;
  f->o.secagg = &su;
  decide(f);
  refused(f, XF_SITE_OFFER_SETUP, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
          "names 2 sites for a cohort of 3 (this site at 1)");
}

static void secagg_setup_the_update_plan_refuses_leaves_a_round_to_forget(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  Xfed__SecAggSetup su;
  uint8_t seed[32];
  xf_test_secagg_setup(&su, seed, 3);
  su.scale = 2.0; /* outside (0, 1] */
  f->o.secagg = &su;
  decide(f);
  refused(f, XF_SITE_OFFER_SETUP, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "secure aggregation: ");
  assert_true(f->v.uo.secagg); /* taken before the plan refused it: the daemon forgets it */
}

/* ---- the go ------------------------------------------------------------------------------------- */

/* A held task from an accepted offer, for its go. */
static xf_site_go_task held_task(fixture *f, xf_site_plan *kept) {
  taken(f);
  xf_site_plan_keep(kept, f->o.residency);
  return (xf_site_go_task){.spec = &f->v.spec, .plan_kept = kept, .privacy = &f->v.plan,
                           .n_params = f->v.n_params, .evaluate_only = f->o.evaluate_only,
                           .secagg = f->v.secagg};
}

static Xfed__TaskGo go_of(const fixture *f, Xfed__SecAggSetup *su) {
  Xfed__TaskGo g = XFED__TASK_GO__INIT;
  g.job_id = f->o.job_id;
  g.round = f->o.round;
  g.attempt = f->o.attempt;
  g.secagg = su;
  return g;
}

/* Holds the offer f describes, then checks a Go for it whose setup names a
 * cohort of `cohort` sites (none when 0); the verdict into *v. */
static void held_go(fixture *f, uint32_t cohort, xf_site_go_verdict *v) {
  f->o.hold = true;
  decide(f);
  xf_site_plan kept;
  xf_site_go_task t = held_task(f, &kept);
  Xfed__SecAggSetup su;
  uint8_t seed[32];
  if (cohort) xf_test_secagg_setup(&su, seed, cohort);
  Xfed__TaskGo g = go_of(f, cohort ? &su : NULL);
  xf_site_go_check(&f->env, &t, &g, &f->v.uo, v);
}

static void go_for_a_cohort_smaller_than_the_plan_allows_is_refused(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  Xfed__Residency res;
  regional_plan(&res);
  f->o.residency = &res;
  xf_site_go_verdict v;
  held_go(f, 2, &v);
  assert_int_equal(v.step, XF_SITE_GO_RELEASE);
  assert_int_equal(v.reason, XFED__TASK_REFUSAL__REASON__POLICY_DENIED);
  assert_non_null(strstr(v.why, "it sums 2 sites"));
  assert_non_null(strstr(v.why, "at least 3 sites"));
  assert_false(v.begin); /* no keys are advertised */
}

static void go_with_a_setup_begins_the_round_of_a_held_secagg_task(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  Xfed__Residency res;
  regional_plan(&res);
  f->o.residency = &res;
  xf_site_go_verdict v;
  held_go(f, 3, &v);
  assert_int_equal(v.step, XF_SITE_GO_FOLLOWED);
  assert_true(v.begin);
  assert_true(f->v.uo.secagg);
  assert_int_equal(f->v.uo.sa.params.n, 3);
}

static void go_with_a_setup_for_a_job_without_secure_aggregation_is_refused(void **state) {
  fixture *f = *state;
  xf_site_go_verdict v;
  held_go(f, 3, &v);
  assert_int_equal(v.step, XF_SITE_GO_SETUP);
  assert_int_equal(v.reason, XFED__TASK_REFUSAL__REASON__UNSUPPORTED);
  assert_string_equal(v.why, "secure aggregation: the go sets up secure aggregation, but the "
                             "job's secure_aggregation is not enabled");
}

static void go_without_a_setup_anywhere_is_refused_for_a_secagg_job(void **state) {
  fixture *f = *state;
  set_spec(f, SPEC_SECAGG);
  xf_site_go_verdict v;
  held_go(f, 0, &v);
  assert_int_equal(v.step, XF_SITE_GO_SETUP);
  assert_non_null(strstr(v.why, "neither the offer nor the go has a setup"));
}

static void go_of_a_plain_held_task_is_followed_unchanged(void **state) {
  fixture *f = *state;
  f->o.hold = true;
  decide(f);
  xf_site_plan kept;
  xf_site_go_task t = held_task(f, &kept);
  xf_update_offer before = f->v.uo;
  Xfed__TaskGo g = go_of(f, NULL);
  xf_site_go_verdict v;
  xf_site_go_check(&f->env, &t, &g, &f->v.uo, &v);
  assert_int_equal(v.step, XF_SITE_GO_FOLLOWED);
  assert_false(v.begin);
  assert_memory_equal(&before, &f->v.uo, sizeof(before));
}

/* However early the allocations start failing, the check ends in a
 * verdict: a refusal that names its reason and owns nothing, or (once
 * there is memory enough) the offer taken. */
static void every_allocation_failure_ends_in_a_refusal_that_owns_nothing(void **state) {
  fixture *f = *state;
  local_dp(f, "");
  f->w.has_budget = true;
  f->w.budget = 10;
  f->w.charge_adds = 0.1;
  with_local_rules(f);
  bool took = false;
  for (long n = 0; n < 100000 && !took; n++) {
    xf_alloc_fail_after(n);
    decide(f);
    xf_alloc_fail_reset();
    took = f->v.step == XF_SITE_OFFER_TAKEN;
    if (!took && (f->v.reason == XFED__TASK_REFUSAL__REASON__UNSPECIFIED || !f->v.why[0] ||
                  f->v.dataset.tags))
      fail_msg("after %ld allocations: step %s reason %d \"%s\"", n,
               xf_site_offer_step_name(f->v.step), (int)f->v.reason, f->v.why);
  }
  assert_true(took);
}

static void step_names_are_the_documented_ones(void **state) {
  (void)state;
  assert_string_equal(xf_site_offer_step_name(XF_SITE_OFFER_TAKEN), "taken");
  assert_string_equal(xf_site_offer_step_name(XF_SITE_OFFER_LOCAL_ERROR), "local-error");
  assert_string_equal(xf_site_offer_step_name(XF_SITE_OFFER_SETUP), "setup");
  assert_string_equal(xf_site_offer_step_name((xf_site_offer_step)99), "?");
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(offer_without_a_job_id_is_an_error_not_a_refusal),
      T(offer_with_an_overlong_job_id_is_an_error),
      T(offer_with_a_short_model_digest_is_an_error_naming_the_sizes),
      T(offer_whose_spec_does_not_parse_is_refused_naming_params_json),
      T(offer_for_an_unregistered_dataset_is_refused_naming_it),
      T(offer_needing_a_tag_the_dataset_lacks_is_refused_naming_the_tag),
      T(unreadable_registry_is_named_in_the_refusal),
      T(offer_of_a_model_that_does_not_fit_the_dataset_is_refused),
      T(declared_model_that_does_not_fit_names_the_layer_and_field),
      T(distributed_noise_without_secure_aggregation_is_refused_as_the_spec),
      T(offer_past_its_deadline_is_refused_by_the_site_clock),
      T(offer_due_this_very_millisecond_is_refused),
      T(offer_when_every_place_is_taken_is_refused_busy_naming_the_tasks),
      T(a_full_site_still_refuses_what_it_could_never_take_for_that_reason),
      T(offer_refused_by_the_ledger_names_the_budget_and_the_spend),
      T(offer_within_the_budget_is_taken_with_its_charge),
      T(offer_past_the_jobs_target_epsilon_is_refused_target_reached),
      T(residency_cap_below_the_budget_is_named_as_the_binding_cap),
      T(unreadable_ledger_refuses_the_offer_unsupported),
      T(record_privacy_with_a_trainer_that_declares_no_dp_is_refused),
      T(evaluate_only_offer_reads_no_ledger),
      T(release_check_refuses_when_another_job_spent_since_the_offer),
      T(regional_plan_requiring_secagg_refuses_a_job_without_it),
      T(evaluate_only_offer_skips_the_release_conditions),
      T(plan_conditions_are_the_regional_path_or_a_rules_limits),
      T(kept_plan_owns_its_strings),
      T(local_rules_refusal_is_policy_denied_with_their_details),
      T(local_rules_that_cannot_be_recorded_refuse_unsupported),
      T(local_rules_only_restrict),
      T(local_rules_see_no_offer_the_dataset_check_refused),
      T(accepted_offer_carries_the_model_size_and_the_seeds),
      T(offer_with_a_seal_key_seals_the_update_to_it),
      T(shuffle_seed_differs_by_site_and_round),
      T(default_update_stream_id_encodes_round_and_attempt),
      T(secagg_offer_with_its_setup_is_taken_masked_and_unsealed),
      T(secagg_job_offered_without_setup_or_hold_is_refused),
      T(held_secagg_offer_without_setup_waits_for_the_go),
      T(secagg_setup_naming_another_site_at_this_index_is_refused),
      T(secagg_setup_with_a_short_graph_seed_is_refused),
      T(secagg_setup_naming_too_few_sites_is_refused),
      T(secagg_setup_the_update_plan_refuses_leaves_a_round_to_forget),
      T(go_for_a_cohort_smaller_than_the_plan_allows_is_refused),
      T(go_with_a_setup_begins_the_round_of_a_held_secagg_task),
      T(go_with_a_setup_for_a_job_without_secure_aggregation_is_refused),
      T(go_without_a_setup_anywhere_is_refused_for_a_secagg_job),
      T(go_of_a_plain_held_task_is_followed_unchanged),
      T(every_allocation_failure_ends_in_a_refusal_that_owns_nothing),
      T(step_names_are_the_documented_ones),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
