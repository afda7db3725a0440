/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the job spec: PRODUCT.md's example, defaults, every kind of
 * refusal naming its field, the uplink grammar, canonical JSON round trips,
 * allocation failures, and the example specs shipped in deploy/jobs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/result.h"
#include "job/jobmodel.h"
#include "job/jobprogress.h"
#include "job/jobspec.h"

/* The example of PRODUCT.md "Jobs", verbatim. */
static const char product_example[] =
    "{\n"
    "  \"name\": \"fmnist-cnn-eu-us\",\n"
    "  \"model\": {\"arch\": \"cnn\", \"preset\": \"lenet5\"},\n"
    "  \"data\": {\"dataset\": \"fmnist\", \"tags\": [\"fmnist\"]},\n"
    "  \"rounds\": 50,\n"
    "  \"sites_per_round\": 1.0,\n"
    "  \"min_sites\": 3,\n"
    "  \"round_deadline_s\": 600,\n"
    "  \"local\": {\"epochs\": 10, \"batch_size\": 64, \"optimizer\": \"sgd\", \"lr\": 0.01,\n"
    "            \"momentum\": 0.9, \"weight_decay\": 1e-5, \"prox_mu\": 0.0},\n"
    "  \"strategy\": {\"name\": \"fedavg\", \"server_lr\": 1.0},\n"
    "  \"privacy\": {\"unit\": \"site\", \"mode\": \"distributed\", \"clip\": 1.0,\n"
    "              \"target_epsilon\": 8.0, \"delta\": 1e-5},\n"
    "  \"secure_aggregation\": {\"enabled\": true, \"bits\": 20, \"threshold\": 0.66},\n"
    "  \"compression\": {\"uplink\": \"q8\", \"downlink\": \"fp16\"},\n"
    "  \"seed\": 42\n"
    "}\n";

/* A valid logreg spec with `extra` members (each starting with ", "). */
#define SPEC(extra)                                                            \
  "{\"name\": \"t\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\"}, " \
  "\"rounds\": 5" extra "}"
/* The same without data, for data cases. */
#define DATA(data)                                                             \
  "{\"name\": \"t\", \"model\": {\"arch\": \"logreg\"}, \"rounds\": 5, \"data\": " data "}"
/* The same without a model, for model cases. */
#define MODEL(model)                                                           \
  "{\"name\": \"t\", \"data\": {\"dataset\": \"d\"}, \"rounds\": 5, \"model\": " model "}"

static xf_err parse(const char *json, xf_jobspec *out, xf_errctx *err) {
  xf_errctx_clear(err);
  return xf_jobspec_parse_string(json, strlen(json), "job.json", out, err);
}

static void assert_parses(const char *json, xf_jobspec *out) {
  xf_errctx err;
  xf_err rc = parse(json, out, &err);
  if (rc != XF_OK) {
    char line[1024];
    fail_msg("expected to parse, got %s: %s\n%s", xf_err_name(rc),
             xf_errctx_format(&err, line, sizeof(line)), json);
  }
}

/* Parsing fails with code, names field, and says something containing
 * `says`. */
static void assert_refused(const char *json, xf_err code, const char *field, const char *says) {
  xf_jobspec spec;
  xf_errctx err;
  xf_err rc = parse(json, &spec, &err);
  char line[1024];
  xf_errctx_format(&err, line, sizeof(line));
  if (rc != code)
    fail_msg("%s: expected %s, got %s (%s)", json, xf_err_name(code), xf_err_name(rc), line);
  if (strcmp(err.field, field) != 0)
    fail_msg("%s: expected field \"%s\", got: %s", json, field, line);
  if (!strstr(err.msg, says))
    fail_msg("%s: expected the message to say \"%s\", got: %s", json, says, line);
  assert_int_equal(err.code, code);
  assert_string_equal(err.file, "job.json");
}

/* Field by field, so that padding never matters. */
static void assert_specs_equal(const xf_jobspec *a, const xf_jobspec *b) {
  assert_string_equal(a->name, b->name);
  assert_int_equal(a->model.arch, b->model.arch);
  assert_int_equal(a->model.n_hidden, b->model.n_hidden);
  for (uint32_t i = 0; i < a->model.n_hidden; i++)
    assert_int_equal(a->model.hidden[i], b->model.hidden[i]);
  assert_int_equal(a->model.preset, b->model.preset);
  assert_int_equal(a->model.n_layers, b->model.n_layers);
  for (uint32_t i = 0; i < a->model.n_layers; i++)
    assert_true(xf_layer_decl_equal(&a->model.layers[i], &b->model.layers[i]));
  assert_string_equal(a->data.dataset, b->data.dataset);
  assert_int_equal(a->data.n_tags, b->data.n_tags);
  for (uint32_t i = 0; i < a->data.n_tags; i++)
    assert_string_equal(a->data.tags[i], b->data.tags[i]);
  assert_int_equal(a->rounds, b->rounds);
  assert_true(a->sites_per_round == b->sites_per_round);
  assert_true(a->over_selection == b->over_selection);
  assert_int_equal(a->min_sites, b->min_sites);
  assert_true(a->round_deadline_s == b->round_deadline_s);
  assert_int_equal(a->local.epochs, b->local.epochs);
  assert_int_equal(a->local.batch_size, b->local.batch_size);
  assert_int_equal(a->local.optimizer, b->local.optimizer);
  assert_true(a->local.lr == b->local.lr);
  assert_true(a->local.momentum == b->local.momentum);
  assert_true(a->local.weight_decay == b->local.weight_decay);
  assert_true(a->local.prox_mu == b->local.prox_mu);
  assert_int_equal(a->strategy.kind, b->strategy.kind);
  assert_true(a->strategy.server_lr == b->strategy.server_lr);
  assert_true(a->strategy.server_momentum == b->strategy.server_momentum);
  assert_true(a->strategy.beta1 == b->strategy.beta1);
  assert_true(a->strategy.beta2 == b->strategy.beta2);
  assert_true(a->strategy.tau == b->strategy.tau);
  assert_true(a->strategy.trim_fraction == b->strategy.trim_fraction);
  assert_int_equal(a->privacy.unit, b->privacy.unit);
  assert_int_equal(a->privacy.mode, b->privacy.mode);
  assert_true(a->privacy.clip == b->privacy.clip);
  assert_int_equal(a->privacy.has_target_epsilon, b->privacy.has_target_epsilon);
  if (a->privacy.has_target_epsilon)
    assert_true(a->privacy.target_epsilon == b->privacy.target_epsilon);
  assert_int_equal(a->privacy.has_noise_multiplier, b->privacy.has_noise_multiplier);
  if (a->privacy.has_noise_multiplier)
    assert_true(a->privacy.noise_multiplier == b->privacy.noise_multiplier);
  assert_true(a->privacy.delta == b->privacy.delta);
  assert_int_equal(a->secure_aggregation.enabled, b->secure_aggregation.enabled);
  assert_int_equal(a->secure_aggregation.bits, b->secure_aggregation.bits);
  assert_true(a->secure_aggregation.threshold == b->secure_aggregation.threshold);
  assert_true(a->compression.uplink.topk_fraction == b->compression.uplink.topk_fraction);
  assert_int_equal(a->compression.uplink.quant_bits, b->compression.uplink.quant_bits);
  assert_int_equal(a->compression.downlink, b->compression.downlink);
  assert_true(a->seed == b->seed);
}

/* ---- accepted specs ------------------------------------------------------ */

static void product_example_parses_with_every_field_as_written(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses(product_example, &s);
  assert_string_equal(s.name, "fmnist-cnn-eu-us");
  assert_int_equal(s.model.arch, XF_JOB_ARCH_CNN);
  assert_int_equal(s.model.preset, XF_JOB_PRESET_LENET5);
  assert_int_equal(s.model.n_hidden, 0);
  assert_string_equal(s.data.dataset, "fmnist");
  assert_int_equal(s.data.n_tags, 1);
  assert_string_equal(s.data.tags[0], "fmnist");
  assert_int_equal(s.rounds, 50);
  assert_true(s.sites_per_round == 1.0);
  assert_int_equal(s.min_sites, 3);
  assert_true(s.round_deadline_s == 600.0);
  assert_int_equal(s.local.epochs, 10);
  assert_int_equal(s.local.batch_size, 64);
  assert_int_equal(s.local.optimizer, XF_JOB_OPTIMIZER_SGD);
  assert_true(s.local.lr == 0.01);
  assert_true(s.local.momentum == 0.9);
  assert_true(s.local.weight_decay == 1e-5);
  assert_true(s.local.prox_mu == 0.0);
  assert_int_equal(s.strategy.kind, XF_JOB_STRATEGY_FEDAVG);
  assert_true(s.strategy.server_lr == 1.0);
  assert_int_equal(s.privacy.unit, XF_PRIVACY_UNIT_SITE);
  assert_int_equal(s.privacy.mode, XF_PRIVACY_DISTRIBUTED);
  assert_true(s.privacy.clip == 1.0);
  assert_true(s.privacy.has_target_epsilon);
  assert_true(s.privacy.target_epsilon == 8.0);
  assert_false(s.privacy.has_noise_multiplier);
  assert_true(s.privacy.delta == 1e-5);
  assert_true(s.secure_aggregation.enabled);
  assert_int_equal(s.secure_aggregation.bits, 20);
  assert_true(s.secure_aggregation.threshold == 0.66);
  assert_true(s.compression.uplink.topk_fraction == 0);
  assert_int_equal(s.compression.uplink.quant_bits, 8);
  assert_int_equal(s.compression.downlink, XF_JOB_DOWNLINK_FP16);
  assert_true(s.seed == 42);
  /* Fields the example leaves out get their defaults. */
  assert_true(s.over_selection == 1.0);
}

static void minimal_spec_gets_documented_defaults(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses("{\"name\": \"m\", \"model\": {\"arch\": \"logreg\"}, "
                "\"data\": {\"dataset\": \"fmnist\"}, \"rounds\": 1}",
                &s);
  assert_string_equal(s.name, "m");
  assert_int_equal(s.model.arch, XF_JOB_ARCH_LOGREG);
  assert_int_equal(s.model.preset, XF_JOB_PRESET_NONE);
  assert_int_equal(s.data.n_tags, 0);
  assert_int_equal(s.rounds, 1);
  assert_true(s.sites_per_round == 1.0);
  assert_true(s.over_selection == 1.0);
  assert_int_equal(s.min_sites, 2);
  assert_true(s.round_deadline_s == 600.0);
  assert_int_equal(s.local.epochs, 1);
  assert_int_equal(s.local.batch_size, 32);
  assert_int_equal(s.local.optimizer, XF_JOB_OPTIMIZER_SGD);
  assert_true(s.local.lr == 0.01);
  assert_true(s.local.momentum == 0);
  assert_true(s.local.weight_decay == 0);
  assert_true(s.local.prox_mu == 0);
  assert_int_equal(s.strategy.kind, XF_JOB_STRATEGY_FEDAVG);
  assert_true(s.strategy.server_lr == 1.0);
  assert_int_equal(s.privacy.unit, XF_PRIVACY_UNIT_SITE);
  assert_int_equal(s.privacy.mode, XF_PRIVACY_NONE);
  assert_true(s.privacy.clip == 0);
  assert_false(s.privacy.has_target_epsilon);
  assert_false(s.privacy.has_noise_multiplier);
  assert_true(s.privacy.delta == 1e-5);
  assert_false(s.secure_aggregation.enabled);
  assert_int_equal(s.secure_aggregation.bits, 20);
  assert_true(s.secure_aggregation.threshold == 0.66);
  assert_true(s.compression.uplink.topk_fraction == 0);
  assert_int_equal(s.compression.uplink.quant_bits, 0);
  assert_int_equal(s.compression.downlink, XF_JOB_DOWNLINK_NONE);
  assert_true(s.seed == 0);
}

static void strategy_defaults_follow_the_chosen_strategy(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses(SPEC(", \"strategy\": {\"name\": \"fedprox\"}"), &s);
  assert_true(s.local.prox_mu == 0.01);
  assert_true(s.strategy.server_lr == 1.0);
  assert_parses(SPEC(", \"strategy\": {\"name\": \"fedprox\"}, \"local\": {\"prox_mu\": 0.1}"),
                &s);
  assert_true(s.local.prox_mu == 0.1);
  assert_parses(SPEC(", \"strategy\": {\"name\": \"fedadam\"}"), &s);
  assert_true(s.strategy.server_lr == 0.01);
  assert_true(s.strategy.beta1 == 0.9);
  assert_true(s.strategy.beta2 == 0.99);
  assert_true(s.strategy.tau == 1e-3);
  assert_parses(SPEC(", \"strategy\": {\"name\": \"fedyogi\", \"beta2\": 0.999, \"tau\": 0.01}"),
                &s);
  assert_true(s.strategy.beta2 == 0.999);
  assert_true(s.strategy.tau == 0.01);
  assert_parses(SPEC(", \"strategy\": {\"name\": \"fedavgm\"}"), &s);
  assert_true(s.strategy.server_momentum == 0.9);
  assert_parses(SPEC(", \"strategy\": {\"name\": \"trimmed_mean\", \"trim_fraction\": 0.2}"), &s);
  assert_true(s.strategy.trim_fraction == 0.2);
  /* A prox term with another strategy is applied as written. */
  assert_parses(SPEC(", \"local\": {\"prox_mu\": 0.5}"), &s);
  assert_true(s.local.prox_mu == 0.5);
}

static void models_parse_with_their_own_fields(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses(MODEL("{\"arch\": \"mlp\", \"hidden\": [200, 100, 1, 65536]}"), &s);
  assert_int_equal(s.model.arch, XF_JOB_ARCH_MLP);
  assert_int_equal(s.model.n_hidden, 4);
  assert_int_equal(s.model.hidden[0], 200);
  assert_int_equal(s.model.hidden[3], 65536);
  assert_parses(MODEL("{\"arch\": \"cnn\", \"preset\": \"fedavg-cnn\"}"), &s);
  assert_int_equal(s.model.preset, XF_JOB_PRESET_FEDAVG_CNN);
  /* Whole numbers written as reals are accepted where integers are due. */
  assert_parses(SPEC(", \"min_sites\": 3.0, \"local\": {\"epochs\": 2.0}"), &s);
  assert_int_equal(s.min_sites, 3);
  assert_int_equal(s.local.epochs, 2);
}

static void sites_per_round_is_a_fraction_or_a_count(void **state) {
  (void)state;
  xf_jobspec s;
  uint32_t target, invite;
  assert_parses(SPEC(", \"sites_per_round\": 0.1"), &s);
  xf_jobspec_cohort(&s, 30, &target, &invite);
  assert_int_equal(target, 3); /* 0.1 * 30 is 3.0000000000000004 in doubles */
  assert_int_equal(invite, 3);
  xf_jobspec_cohort(&s, 5, &target, &invite);
  assert_int_equal(target, 1);
  xf_jobspec_cohort(&s, 0, &target, &invite);
  assert_int_equal(target, 0);
  assert_int_equal(invite, 0);
  assert_parses(SPEC(", \"sites_per_round\": 10, \"min_sites\": 10, \"over_selection\": 1.3"), &s);
  assert_true(s.sites_per_round == 10);
  xf_jobspec_cohort(&s, 100, &target, &invite);
  assert_int_equal(target, 10);
  assert_int_equal(invite, 13);
  xf_jobspec_cohort(&s, 11, &target, &invite);
  assert_int_equal(target, 10);
  assert_int_equal(invite, 11);
  xf_jobspec_cohort(&s, 4, &target, &invite);
  assert_int_equal(target, 4);
  assert_int_equal(invite, 4);
  /* 1 and 1.0 both mean every eligible site. */
  assert_parses(SPEC(", \"sites_per_round\": 1"), &s);
  xf_jobspec_cohort(&s, 7, &target, &invite);
  assert_int_equal(target, 7);
}

static void seed_takes_the_whole_uint64_range(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses(SPEC(", \"seed\": 9223372036854775807"), &s);
  assert_true(s.seed == INT64_MAX);
  assert_parses(SPEC(", \"seed\": \"18446744073709551615\""), &s);
  assert_true(s.seed == UINT64_MAX);
  char *json;
  assert_int_equal(xf_jobspec_to_json(&s, &json), XF_OK);
  assert_non_null(strstr(json, "\"seed\": \"18446744073709551615\""));
  xf_free(json);
  assert_refused(SPEC(", \"seed\": \"18446744073709551616\""), XF_ERANGE, "seed", "between 0 and");
  assert_refused(SPEC(", \"seed\": -1"), XF_ERANGE, "seed", "between 0 and");
  assert_refused(SPEC(", \"seed\": \"12x\""), XF_EFORMAT, "seed", "expected an integer");
  assert_refused(SPEC(", \"seed\": \"\""), XF_EFORMAT, "seed", "expected an integer");
}

/* ---- refusals ------------------------------------------------------------ */

typedef struct refusal {
  const char *json;
  xf_err code;
  const char *field;
  const char *says;
} refusal;

static void run_refusals(const refusal *cases, size_t n) {
  for (size_t i = 0; i < n; i++)
    assert_refused(cases[i].json, cases[i].code, cases[i].field, cases[i].says);
}

static void unknown_keys_name_the_path_and_suggest_a_fix(void **state) {
  (void)state;
  static const refusal cases[] = {
      {SPEC(", \"local\": {\"lerning_rate\": 0.1}"), XF_EFORMAT, "local.lerning_rate",
       "unknown field; did you mean \"lr\"?"},
      {SPEC(", \"local\": {\"learning_rate\": 0.1}"), XF_EFORMAT, "local.learning_rate",
       "did you mean \"lr\"?"},
      {SPEC(", \"local\": {\"epoch\": 2}"), XF_EFORMAT, "local.epoch", "did you mean \"epochs\"?"},
      {SPEC(", \"strategy\": {\"nmae\": \"fedavg\"}"), XF_EFORMAT, "strategy.nmae",
       "did you mean \"name\"?"},
      {SPEC(", \"strategy\": {\"name\": \"fedavgm\", \"momentum\": 0.9}"), XF_EFORMAT,
       "strategy.momentum", "did you mean \"server_momentum\"?"},
      {SPEC(", \"secagg\": {\"enabled\": true}"), XF_EFORMAT, "secagg",
       "did you mean \"secure_aggregation\"?"},
      {SPEC(", \"epochs\": 3"), XF_EFORMAT, "epochs", "did you mean \"local.epochs\"?"},
      {SPEC(", \"local\": {\"rounds\": 3}"), XF_EFORMAT, "local.rounds",
       "did you mean \"rounds\" at the top level?"},
      {SPEC(", \"local\": {\"zzzzzzzz\": 1}"), XF_EFORMAT, "local.zzzzzzzz",
       "the fields here are: epochs, batch_size, optimizer, lr"},
      {SPEC(", \"bad\\nkey\": 1"), XF_EFORMAT, "bad?key", "unknown field"},
  };
  run_refusals(cases, sizeof(cases) / sizeof(cases[0]));
}

static void wrong_types_name_the_path_and_expected_type(void **state) {
  (void)state;
  static const refusal cases[] = {
      {SPEC(", \"min_sites\": \"3\""), XF_EFORMAT, "min_sites",
       "expected an integer, got a string"},
      {SPEC(", \"secure_aggregation\": {\"enabled\": \"yes\"}"), XF_EFORMAT,
       "secure_aggregation.enabled", "expected true or false"},
      {SPEC(", \"local\": {\"lr\": \"0.1\"}"), XF_EFORMAT, "local.lr",
       "expected a number, got a string"},
      {SPEC(", \"local\": {\"lr\": null}"), XF_EFORMAT, "local.lr",
       "got null; leave the field out"},
      {SPEC(", \"local\": 3"), XF_EFORMAT, "local", "expected an object"},
      {SPEC(", \"local\": {\"epochs\": 2.5}"), XF_EFORMAT, "local.epochs",
       "expected a whole number"},
      {DATA("{\"dataset\": \"d\", \"tags\": \"a\"}"), XF_EFORMAT, "data.tags",
       "expected an array"},
      {SPEC(", \"compression\": {\"uplink\": 8}"), XF_EFORMAT, "compression.uplink",
       "expected a string"},
      {MODEL("{\"arch\": \"mlp\", \"hidden\": [200, \"x\"]}"), XF_EFORMAT, "model.hidden[1]",
       "expected an integer, got a string"},
      {MODEL("{\"arch\": 1}"), XF_EFORMAT, "model.arch", "expected a string"},
      {"[1, 2]", XF_EFORMAT, "", "a job spec is a JSON object"},
      {"{\"name\": 7}", XF_EFORMAT, "name", "expected a string"},
  };
  run_refusals(cases, sizeof(cases) / sizeof(cases[0]));
}

static void missing_required_fields_are_named(void **state) {
  (void)state;
  static const refusal cases[] = {
      {"{}", XF_EFORMAT, "name", "required"},
      {"{\"name\": \"t\", \"data\": {\"dataset\": \"d\"}, \"rounds\": 5}", XF_EFORMAT, "model",
       "required"},
      {"{\"name\": \"t\", \"model\": {\"arch\": \"logreg\"}, \"rounds\": 5}", XF_EFORMAT, "data",
       "required"},
      {"{\"name\": \"t\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\"}}",
       XF_EFORMAT, "rounds", "required"},
      {"{\"name\": \"t\", \"model\": {\"arch\": \"logreg\"}, \"data\": {}, \"rounds\": 5}",
       XF_EFORMAT, "data.dataset", "required"},
      {MODEL("{}"), XF_EFORMAT, "model.arch", "required"},
      {MODEL("{\"arch\": \"mlp\"}"), XF_EFORMAT, "model.hidden", "required"},
      {MODEL("{\"arch\": \"cnn\"}"), XF_EFORMAT, "model.preset", "lenet5, fedavg-cnn"},
  };
  run_refusals(cases, sizeof(cases) / sizeof(cases[0]));
}

static void out_of_range_values_give_the_range(void **state) {
  (void)state;
  static const refusal cases[] = {
      {SPEC(", \"local\": {\"momentum\": 1.0}"), XF_ERANGE, "local.momentum",
       "must be in [0, 1), got 1"},
      {SPEC(", \"local\": {\"batch_size\": 0}"), XF_ERANGE, "local.batch_size",
       "between 1 and 65536, got 0"},
      {SPEC(", \"local\": {\"batch_size\": 65537}"), XF_ERANGE, "local.batch_size",
       "between 1 and 65536"},
      {SPEC(", \"local\": {\"epochs\": 0}"), XF_ERANGE, "local.epochs", "between 1 and 10000"},
      {SPEC(", \"local\": {\"lr\": 0}"), XF_ERANGE, "local.lr", "must be > 0, got 0"},
      {SPEC(", \"local\": {\"weight_decay\": -1}"), XF_ERANGE, "local.weight_decay",
       "must be >= 0"},
      {SPEC(", \"local\": {\"prox_mu\": -0.1}"), XF_ERANGE, "local.prox_mu", "must be >= 0"},
      {SPEC(", \"strategy\": {\"server_lr\": 0}"), XF_ERANGE, "strategy.server_lr", "> 0"},
      {SPEC(", \"strategy\": {\"name\": \"fedadam\", \"beta2\": 1}"), XF_ERANGE, "strategy.beta2",
       "[0, 1)"},
      {SPEC(", \"strategy\": {\"name\": \"trimmed_mean\", \"trim_fraction\": 0.5}"), XF_ERANGE,
       "strategy.trim_fraction", "[0, 0.5)"},
      {SPEC(", \"secure_aggregation\": {\"bits\": 40}"), XF_ERANGE, "secure_aggregation.bits",
       "between 8 and 32, got 40"},
      {SPEC(", \"secure_aggregation\": {\"threshold\": 0}"), XF_ERANGE,
       "secure_aggregation.threshold", "(0, 1]"},
      {SPEC(", \"secure_aggregation\": {\"enabled\": true, \"threshold\": 0.5}"), XF_ERANGE,
       "secure_aggregation.threshold", "must be above 0.5 with secure aggregation (got 0.5)"},
      {SPEC(", \"privacy\": {\"mode\": \"none\", \"delta\": 1}"), XF_ERANGE, "privacy.delta",
       "(0, 1)"},
      {SPEC(", \"privacy\": {\"mode\": \"central\", \"clip\": 1, \"target_epsilon\": 0}"),
       XF_ERANGE, "privacy.target_epsilon", "> 0"},
      {SPEC(", \"privacy\": {\"mode\": \"central\", \"clip\": 1, \"noise_multiplier\": -1}"),
       XF_ERANGE, "privacy.noise_multiplier", ">= 0"},
      {SPEC(", \"privacy\": {\"mode\": \"none\", \"clip\": 0}"), XF_ERANGE, "privacy.clip",
       "must be > 0"},
      {SPEC(", \"sites_per_round\": 2.5"), XF_ERANGE, "sites_per_round", "must be whole"},
      {SPEC(", \"sites_per_round\": 0"), XF_ERANGE, "sites_per_round", "fraction in (0, 1]"},
      {SPEC(", \"sites_per_round\": 3, \"min_sites\": 5"), XF_ERANGE, "min_sites",
       "selects only 3 sites"},
      {SPEC(", \"min_sites\": 0"), XF_ERANGE, "min_sites", "between 1 and 100000"},
      {SPEC(", \"round_deadline_s\": 0"), XF_ERANGE, "round_deadline_s", "(0, 604800]"},
      {SPEC(", \"over_selection\": 0.5"), XF_ERANGE, "over_selection", "[1, 3]"},
      {"{\"name\": \"t\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\"}, "
       "\"rounds\": 0}",
       XF_ERANGE, "rounds", "between 1 and 1000000"},
      {MODEL("{\"arch\": \"mlp\", \"hidden\": []}"), XF_ERANGE, "model.hidden", "1 to 8"},
      {MODEL("{\"arch\": \"mlp\", \"hidden\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}"), XF_ERANGE,
       "model.hidden", "1 to 8 layer widths, got 9"},
      {MODEL("{\"arch\": \"mlp\", \"hidden\": [10, 0]}"), XF_ERANGE, "model.hidden[1]",
       "between 1 and 65536"},
      {"{\"name\": \"a123456789012345678901234567890123456789012345678901234567890123\"}",
       XF_ERANGE, "name", "at most 63"},
      {DATA("{\"dataset\": \"d\", \"tags\": [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", "
            "\"h\", \"i\", \"j\", \"k\", \"l\", \"m\", \"n\", \"o\", \"p\", \"q\"]}"),
       XF_ERANGE, "data.tags", "at most 16 tags"},
  };
  run_refusals(cases, sizeof(cases) / sizeof(cases[0]));
}

static void optimizer_ranges_name_the_field(void **state) {
  (void)state;
  static const refusal cases[] = {
      {SPEC(", \"local\": {\"optimizer\": \"adam\", \"beta1\": 1}"), XF_ERANGE,
       "local.beta1", "[0, 1)"},
      {SPEC(", \"local\": {\"optimizer\": \"adamw\", \"beta2\": -0.1}"), XF_ERANGE,
       "local.beta2", "[0, 1)"},
      {SPEC(", \"local\": {\"optimizer\": \"adam\", \"eps\": 0}"), XF_ERANGE, "local.eps",
       "(0, 1]"},
      {SPEC(", \"local\": {\"weight_decay\": -1}"), XF_ERANGE, "local.weight_decay", ">= 0"},
      {SPEC(", \"local\": {\"clip_norm\": -1}"), XF_ERANGE, "local.clip_norm", ">= 0"},
      {SPEC(", \"local\": {\"nesterov\": true}"), XF_ERANGE, "local.nesterov",
       "momentum > 0"},
      {SPEC(", \"local\": {\"nesterov\": 1}"), XF_EFORMAT, "local.nesterov", "true or false"},
      {SPEC(", \"local\": {\"lr_schedule\": {\"kind\": \"step\", \"gamma\": 1.5}}"),
       XF_ERANGE, "local.lr_schedule.gamma", "(0, 1]"},
      {SPEC(", \"local\": {\"lr_schedule\": {\"kind\": \"step\", \"every\": 0}}"),
       XF_ERANGE, "local.lr_schedule.every", ""},
      {SPEC(", \"local\": {\"lr\": 0.1, \"lr_schedule\": {\"kind\": \"cosine\", "
            "\"min_lr\": 0.2}}"),
       XF_ERANGE, "local.lr_schedule.min_lr", "[0, 0.1]"},
      {SPEC(", \"local\": {\"clip_norm\": 1}, \"privacy\": {\"unit\": \"record\", "
            "\"mode\": \"local\", \"clip\": 1, \"noise_multiplier\": 1}"),
       XF_EFORMAT, "local.clip_norm", "DP-SGD already clips every record's gradient"},
  };
  run_refusals(cases, sizeof(cases) / sizeof(cases[0]));
}

static void lr_schedule_gives_each_round_its_rate(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses(SPEC(", \"local\": {\"lr\": 0.1}"), &s);
  for (uint32_t r = 1; r <= 6; r++) assert_true(xf_jobspec_local_lr(&s, r) == 0.1);
  assert_parses(SPEC(", \"local\": {\"lr\": 0.1, \"lr_schedule\": {\"kind\": \"step\", "
                     "\"every\": 2, \"gamma\": 0.5}}"),
                &s);
  const double step[] = {0.1, 0.1, 0.05, 0.05, 0.025};
  for (uint32_t r = 1; r <= 5; r++)
    assert_float_equal(xf_jobspec_local_lr(&s, r), step[r - 1], 1e-15);
  /* rounds is 5: cosine from lr in round 1 to min_lr in round 5. */
  assert_parses(SPEC(", \"local\": {\"lr\": 0.1, \"lr_schedule\": {\"kind\": \"cosine\", "
                     "\"min_lr\": 0.01}}"),
                &s);
  assert_float_equal(xf_jobspec_local_lr(&s, 1), 0.1, 1e-15);
  assert_float_equal(xf_jobspec_local_lr(&s, 3), 0.055, 1e-15);
  const double pi = 3.14159265358979323846;
  assert_float_equal(xf_jobspec_local_lr(&s, 2), 0.01 + 0.09 * (1 + cos(pi / 4)) / 2, 1e-15);
  assert_float_equal(xf_jobspec_local_lr(&s, 5), 0.01, 1e-15);
  assert_float_equal(xf_jobspec_local_lr(&s, 9), 0.01, 1e-15); /* past the last: the last */
  s.rounds = 1;
  assert_float_equal(xf_jobspec_local_lr(&s, 1), 0.1, 1e-15);
}

/* What a site and `xfed train` hand the training loop: the optimizer and
 * its settings, and the learning rate of the task's round. */
static void train_options_carry_the_optimizer_and_the_rounds_rate(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses(SPEC(", \"local\": {\"optimizer\": \"adamw\", \"lr\": 0.1, \"beta1\": 0.8, "
                     "\"beta2\": 0.99, \"eps\": 1e-6, \"weight_decay\": 0.01, \"prox_mu\": 0.5, "
                     "\"clip_norm\": 2, \"lr_schedule\": {\"kind\": \"step\", \"every\": 2, "
                     "\"gamma\": 0.5}}"),
                &s);
  xf_train_options o = {.epochs = 7};
  xf_jobspec_train_options(&s, 3, &o);
  assert_int_equal(o.epochs, 7); /* left alone */
  assert_int_equal(o.optimizer, XF_OPTIMIZER_ADAMW);
  assert_true(o.sgd.lr == 0.05f && o.sgd.weight_decay == 0.01f && o.sgd.prox_mu == 0.5f);
  assert_true(o.beta1 == 0.8f && o.beta2 == 0.99f && o.eps == 1e-6f && o.clip_norm == 2);
  xf_jobspec_train_options(&s, 1, &o);
  assert_true(o.sgd.lr == 0.1f);
  /* The default spec: plain sgd at lr, exactly what was used before. */
  assert_parses(SPEC(", \"local\": {\"momentum\": 0.9}"), &s);
  xf_jobspec_train_options(&s, 4, &o);
  assert_int_equal(o.optimizer, XF_OPTIMIZER_SGD);
  assert_true(o.sgd.lr == (float)0.01 && o.sgd.momentum == (float)0.9 && !o.sgd.nesterov);
  assert_true(o.clip_norm == 0);
}

static void new_local_fields_round_trip_and_defaults_stay_unwritten(void **state) {
  (void)state;
  xf_jobspec a, b;
  char *ja;
  assert_parses(MODEL("{\"arch\": \"logreg\", \"loss\": \"mse\"}, "
                      "\"local\": {\"optimizer\": \"adamw\", \"beta1\": 0.8, \"beta2\": 0.99, "
                     "\"eps\": 1e-6, \"weight_decay\": 0.01, \"clip_norm\": 5, "
                     "\"lr_schedule\": {\"kind\": \"cosine\", \"min_lr\": 0.001}}"),
                &a);
  assert_int_equal(xf_jobspec_to_json(&a, &ja), XF_OK);
  assert_parses(ja, &b);
  assert_int_equal(b.model.loss, XF_LOSS_MSE);
  assert_int_equal(b.local.optimizer, XF_JOB_OPTIMIZER_ADAMW);
  assert_true(b.local.beta1 == 0.8 && b.local.beta2 == 0.99 && b.local.eps == 1e-6);
  assert_true(b.local.clip_norm == 5 && b.local.weight_decay == 0.01);
  assert_int_equal(b.local.lr_schedule.kind, XF_JOB_LR_COSINE);
  assert_true(b.local.lr_schedule.min_lr == 0.001);
  xf_free(ja);
  assert_parses(SPEC(", \"local\": {\"momentum\": 0.9, \"nesterov\": true, "
                     "\"lr_schedule\": {\"kind\": \"step\", \"every\": 3, \"gamma\": 0.5}}"),
                &a);
  assert_int_equal(xf_jobspec_to_json(&a, &ja), XF_OK);
  assert_parses(ja, &b);
  assert_true(b.local.nesterov);
  assert_int_equal(b.local.lr_schedule.every, 3);
  assert_true(b.local.lr_schedule.gamma == 0.5);
  xf_free(ja);
  /* A spec that uses none of them is written as before. */
  assert_parses(SPEC(""), &a);
  assert_int_equal(xf_jobspec_to_json(&a, &ja), XF_OK);
  static const char *const absent[] = {"loss", "nesterov", "beta1", "eps", "clip_norm",
                                       "lr_schedule"};
  for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
    assert_null(strstr(ja, absent[i]));
  xf_free(ja);
}

static void bad_values_name_the_choices(void **state) {
  (void)state;
  static const refusal cases[] = {
      {MODEL("{\"arch\": \"resnet\"}"), XF_EFORMAT, "model.arch",
       "unknown value \"resnet\"; expected one of: logreg, mlp, cnn"},
      {MODEL("{\"arch\": \"MLP\"}"), XF_EFORMAT, "model.arch", "did you mean \"mlp\"?"},
      {MODEL("{\"arch\": \"cnn\", \"preset\": \"lenet\"}"), XF_EFORMAT, "model.preset",
       "did you mean \"lenet5\"?"},
      {MODEL("{\"arch\": \"logreg\", \"hidden\": [10]}"), XF_EFORMAT, "model.hidden",
       "used only by \"mlp\""},
      {MODEL("{\"arch\": \"mlp\", \"hidden\": [10], \"preset\": \"lenet5\"}"), XF_EFORMAT,
       "model.preset", "used only by \"cnn\""},
      {SPEC(", \"strategy\": {\"name\": \"fedavgg\"}"), XF_EFORMAT, "strategy.name",
       "did you mean \"fedavg\"?"},
      {SPEC(", \"strategy\": {\"name\": \"fedavg\", \"beta1\": 0.9}"), XF_EFORMAT,
       "strategy.beta1", "used only by fedadam, fedyogi, fedadagrad"},
      {SPEC(", \"strategy\": {\"name\": \"fedadagrad\", \"beta2\": 0.9}"), XF_EFORMAT,
       "strategy.beta2", "used only by fedadam, fedyogi"},
      {SPEC(", \"local\": {\"optimizer\": \"adamx\"}"), XF_EUNSUPPORTED, "local.optimizer",
       "'adamx' is not an optimizer: use sgd, adam or adamw"},
      {SPEC(", \"local\": {\"optimizer\": \"adam\", \"momentum\": 0.9}"), XF_EFORMAT,
       "local.momentum", "belong to sgd"},
      {SPEC(", \"local\": {\"beta1\": 0.9}"), XF_EFORMAT, "local.beta1",
       "belong to adam and adamw"},
      {SPEC(", \"local\": {\"lr_schedule\": {\"kind\": \"linear\"}}"), XF_EFORMAT,
       "local.lr_schedule.kind", "constant, step, cosine"},
      {SPEC(", \"local\": {\"lr_schedule\": {\"every\": 2}}"), XF_EFORMAT,
       "local.lr_schedule.kind", "required"},
      {SPEC(", \"local\": {\"lr_schedule\": {\"kind\": \"cosine\", \"gamma\": 0.5}}"),
       XF_EFORMAT, "local.lr_schedule.gamma", "not a setting of schedule \"cosine\""},
      {SPEC(", \"local\": {\"lr_schedule\": {\"kind\": \"step\", \"evry\": 2}}"),
       XF_EFORMAT, "local.lr_schedule.evry", "did you mean \"every\"?"},
      {SPEC(", \"local\": {\"lr_schedule\": \"cosine\"}"), XF_EFORMAT,
       "local.lr_schedule", "an object"},
      {MODEL("{\"arch\": \"logreg\", \"loss\": \"bce\"}"), XF_EFORMAT, "model.loss",
       "cross_entropy, binary_cross_entropy, mse"},
      {SPEC(", \"privacy\": {\"unit\": \"user\", \"mode\": \"none\"}"), XF_EFORMAT,
       "privacy.unit", "site, record"},
      {SPEC(", \"compression\": {\"downlink\": \"fp8\"}"), XF_EFORMAT, "compression.downlink",
       "none, fp16, bf16"},
      {"{\"name\": \"bad name!\"}", XF_EFORMAT, "name", "letters, digits"},
      {"{\"name\": \"-lead\"}", XF_EFORMAT, "name", "starting with a letter or digit"},
      {DATA("{\"dataset\": \"d\", \"tags\": [\"a\", \"a\"]}"), XF_EFORMAT,
       "data.tags[1]", "repeats tag \"a\""},
      {"{\"name\": \"a\", \"name\": \"b\"}", XF_EFORMAT, "line 1, column 20", "duplicate"},
  };
  run_refusals(cases, sizeof(cases) / sizeof(cases[0]));
}

static void settings_that_contradict_each_other_are_refused(void **state) {
  (void)state;
  static const refusal cases[] = {
      {SPEC(", \"strategy\": {\"name\": \"median\"}, \"secure_aggregation\": {\"enabled\": true}"),
       XF_EFORMAT, "strategy.name", "secure aggregation hides"},
      {SPEC(", \"strategy\": {\"name\": \"trimmed_mean\"}, "
            "\"secure_aggregation\": {\"enabled\": true}"),
       XF_EFORMAT, "strategy.name", "secure aggregation hides"},
      {SPEC(", \"secure_aggregation\": {\"enabled\": true, \"bits\": 8}, "
            "\"compression\": {\"uplink\": \"q16\"}"),
       XF_ERANGE, "secure_aggregation.bits", "at least 16"},
      {SPEC(", \"secure_aggregation\": {\"enabled\": true}, \"min_sites\": 1"), XF_ERANGE,
       "min_sites", "2 or more"},
      {SPEC(", \"privacy\": {\"mode\": \"distributed\", \"clip\": 1, \"target_epsilon\": 8}"),
       XF_EFORMAT, "privacy.mode", "set secure_aggregation.enabled to true"},
      {SPEC(", \"privacy\": {\"unit\": \"record\", \"mode\": \"central\", \"clip\": 1, "
            "\"noise_multiplier\": 1}"),
       XF_EFORMAT, "privacy.mode", "use mode \"local\""},
      {SPEC(", \"privacy\": {\"clip\": 1}"), XF_EFORMAT, "privacy.mode", "required"},
      {SPEC(", \"strategy\": {\"name\": \"median\"}, \"privacy\": {\"mode\": \"central\", "
            "\"clip\": 1, \"noise_multiplier\": 1}"),
       XF_EFORMAT, "privacy.mode", "sensitivity of a mean"},
      {SPEC(", \"privacy\": {\"mode\": \"central\", \"target_epsilon\": 8}"), XF_EFORMAT,
       "privacy.clip", "required"},
      {SPEC(", \"privacy\": {\"mode\": \"local\", \"clip\": 1}"), XF_EFORMAT,
       "privacy.target_epsilon", "or noise_multiplier"},
      {SPEC(", \"privacy\": {\"mode\": \"none\", \"target_epsilon\": 8}"), XF_EFORMAT,
       "privacy.target_epsilon", "no epsilon is guaranteed"},
      {SPEC(", \"privacy\": {\"mode\": \"none\", \"noise_multiplier\": 1}"), XF_EFORMAT,
       "privacy.noise_multiplier", "adds no noise"},
      {SPEC(", \"strategy\": {\"name\": \"fedprox\"}, \"local\": {\"prox_mu\": 0}"), XF_ERANGE,
       "local.prox_mu", "needs a proximal term"},
  };
  run_refusals(cases, sizeof(cases) / sizeof(cases[0]));
}

static void uplink_grammar_accepts_and_refuses(void **state) {
  (void)state;
  static const struct {
    const char *text;
    double fraction;
    uint32_t bits;
    const char *canonical;
  } good[] = {
      {"none", 0, 0, "none"},           {"q16", 0, 16, "q16"},
      {"q8", 0, 8, "q8"},               {"q4", 0, 4, "q4"},
      {"topk:0.01", 0.01, 0, "topk:0.01"}, {"topk:1", 1, 0, "topk:1"},
      {"topk:1.0", 1, 0, "topk:1"},     {"topk:0.01+q8", 0.01, 8, "topk:0.01+q8"},
      {"topk:1e-3+q4", 1e-3, 4, "topk:0.001+q4"}, {"topk:.5+q16", 0.5, 16, "topk:0.5+q16"},
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    xf_job_uplink u;
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_job_uplink_parse(good[i].text, &u, &err) != XF_OK)
      fail_msg("\"%s\" refused: %s", good[i].text, err.msg);
    assert_true(u.topk_fraction == good[i].fraction);
    assert_int_equal(u.quant_bits, good[i].bits);
    char buf[XF_JOB_UPLINK_TEXT_MAX];
    assert_string_equal(xf_job_uplink_format(&u, buf, sizeof(buf)), good[i].canonical);
  }
  static const refusal bad[] = {
      {SPEC(", \"compression\": {\"uplink\": \"q7\"}"), XF_EFORMAT, "compression.uplink",
       "16, 8 or 4 bits"},
      {SPEC(", \"compression\": {\"uplink\": \"topk:0\"}"), XF_ERANGE, "compression.uplink",
       "must be in (0, 1], got 0"},
      {SPEC(", \"compression\": {\"uplink\": \"topk:1.5+q8\"}"), XF_ERANGE, "compression.uplink",
       "must be in (0, 1], got 1.5"},
      {SPEC(", \"compression\": {\"uplink\": \"topk:\"}"), XF_EFORMAT, "compression.uplink",
       "expected a fraction"},
      {SPEC(", \"compression\": {\"uplink\": \"topk:0.1+q9\"}"), XF_EFORMAT,
       "compression.uplink", "only \"+q16\", \"+q8\" or \"+q4\""},
      {SPEC(", \"compression\": {\"uplink\": \"topk:0.1+\"}"), XF_EFORMAT, "compression.uplink",
       "only \"+q16\""},
      {SPEC(", \"compression\": {\"uplink\": \"topk:abc\"}"), XF_EFORMAT, "compression.uplink",
       "expected a fraction"},
      {SPEC(", \"compression\": {\"uplink\": \"topk:-0.1\"}"), XF_EFORMAT, "compression.uplink",
       "expected a fraction"},
      {SPEC(", \"compression\": {\"uplink\": \"topk:nan\"}"), XF_EFORMAT, "compression.uplink",
       "expected a fraction"},
      {SPEC(", \"compression\": {\"uplink\": \"topk:0x1p-3\"}"), XF_EFORMAT,
       "compression.uplink", "only \"+q16\""},
      {SPEC(", \"compression\": {\"uplink\": \"topk:1e400\"}"), XF_ERANGE, "compression.uplink",
       "(0, 1]"},
      {SPEC(", \"compression\": {\"uplink\": \"q8+topk:0.1\"}"), XF_EFORMAT,
       "compression.uplink", "unknown uplink compression"},
      {SPEC(", \"compression\": {\"uplink\": \"TOPK:0.1\"}"), XF_EFORMAT, "compression.uplink",
       "unknown uplink compression"},
      {SPEC(", \"compression\": {\"uplink\": \"\"}"), XF_EFORMAT, "compression.uplink",
       "unknown uplink compression"},
  };
  run_refusals(bad, sizeof(bad) / sizeof(bad[0]));
}

static void syntax_errors_give_line_and_column(void **state) {
  (void)state;
  const char *json = "{\n"
                     "  \"name\": \"t\",\n"
                     "  \"rounds\": 5\n"
                     "  \"model\": {}\n"
                     "}\n";
  xf_jobspec s;
  xf_errctx err;
  assert_int_equal(parse(json, &s, &err), XF_EFORMAT);
  assert_true(strncmp(err.field, "line 4, column ", 15) == 0);
  assert_non_null(strstr(err.msg, "invalid JSON"));
  assert_string_equal(err.file, "job.json");
  assert_int_equal(parse("", &s, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "invalid JSON"));
  assert_int_equal(parse("{\"name\": \"t\"", &s, &err), XF_EFORMAT);
  assert_int_equal(parse("{\"name\": \"t\"} x", &s, &err), XF_EFORMAT);
  assert_int_equal(xf_jobspec_parse_string("{\"a\x00\": 1}", 9, "j", &s, &err), XF_EFORMAT);
  assert_int_equal(parse(SPEC(", \"seed\": 99999999999999999999"), &s, &err), XF_EFORMAT);
  assert_int_equal(parse(SPEC(", \"round_deadline_s\": 1e400"), &s, &err), XF_EFORMAT);
}

static void failed_parse_leaves_the_output_untouched(void **state) {
  (void)state;
  xf_jobspec s, before;
  memset(&s, 0xA5, sizeof(s));
  memcpy(&before, &s, sizeof(s));
  xf_errctx err;
  assert_int_equal(parse(SPEC(", \"local\": {\"lr\": -1}"), &s, &err), XF_ERANGE);
  assert_memory_equal(&s, &before, sizeof(s));
  /* A NULL error context is allowed. */
  assert_int_equal(xf_jobspec_parse_string("[", 1, NULL, &s, NULL), XF_EFORMAT);
}

static void oversized_input_is_refused(void **state) {
  (void)state;
  size_t n = XF_JOBSPEC_MAX_BYTES + 1;
  char *big = malloc(n);
  assert_non_null(big);
  memset(big, ' ', n);
  xf_jobspec s;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_parse_string(big, n, "big.json", &s, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "1048576"));

  char path[] = "/tmp/xf-jobspec-big-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, big, n), (ssize_t)n);
  close(fd);
  free(big);
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_parse_file(path, &s, &err), XF_ERANGE);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "larger than 1048576 bytes"));
  unlink(path);
}

static void file_errors_name_the_file(void **state) {
  (void)state;
  xf_jobspec s;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_parse_file("/nonexistent/job.json", &s, &err), XF_ENOENT);
  assert_string_equal(err.file, "/nonexistent/job.json");
  assert_non_null(strstr(err.msg, "cannot open"));
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_parse_file("/tmp", &s, &err), XF_EIO);
  assert_non_null(strstr(err.msg, "directory"));
}

/* ---- canonical JSON ------------------------------------------------------- */

static const char *const round_trip_specs[] = {
    product_example,
    SPEC(""),
    MODEL("{\"arch\": \"mlp\", \"hidden\": [200, 200]}"),
    SPEC(", \"strategy\": {\"name\": \"fedadam\", \"server_lr\": 0.1, \"beta1\": 0.5, "
         "\"beta2\": 0.999, \"tau\": 1e-9}"),
    SPEC(", \"strategy\": {\"name\": \"fedyogi\"}, \"local\": {\"lr\": 0.1, \"momentum\": 0.5, "
         "\"weight_decay\": 0.0005, \"batch_size\": 1, \"epochs\": 10000}"),
    SPEC(", \"strategy\": {\"name\": \"fedadagrad\", \"tau\": 0.01}"),
    SPEC(", \"strategy\": {\"name\": \"fedavgm\", \"server_momentum\": 0.99}"),
    SPEC(", \"strategy\": {\"name\": \"fedprox\"}"),
    SPEC(", \"strategy\": {\"name\": \"median\"}, \"compression\": {\"uplink\": "
         "\"topk:0.3333333333333333+q4\", \"downlink\": \"bf16\"}"),
    SPEC(", \"strategy\": {\"name\": \"trimmed_mean\", \"trim_fraction\": 0}"),
    SPEC(", \"privacy\": {\"unit\": \"record\", \"mode\": \"local\", \"clip\": 0.7, "
         "\"noise_multiplier\": 1.1, \"delta\": 1e-6}"),
    SPEC(", \"privacy\": {\"mode\": \"central\", \"clip\": 2, \"noise_multiplier\": 0, "
         "\"target_epsilon\": 3.5}"),
    SPEC(", \"privacy\": {\"mode\": \"none\", \"clip\": 5}"),
    SPEC(", \"secure_aggregation\": {\"enabled\": false, \"bits\": 32, \"threshold\": 1}, "
         "\"sites_per_round\": 100000, \"min_sites\": 100000, \"over_selection\": 3, "
         "\"round_deadline_s\": 0.25, \"seed\": \"18446744073709551615\""),
    DATA("{\"dataset\": \"d\", \"tags\": [\"eu\", \"x.y_z-1\"]}, \"round_deadline_s\": 123456.75, "
         "\"local\": {\"lr\": 1e-7, \"weight_decay\": 123456789012345678}"),
};

static void canonical_json_round_trips(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(round_trip_specs) / sizeof(round_trip_specs[0]); i++) {
    xf_jobspec a, b;
    char *ja, *jb;
    assert_parses(round_trip_specs[i], &a);
    assert_int_equal(xf_jobspec_to_json(&a, &ja), XF_OK);
    assert_parses(ja, &b);
    assert_specs_equal(&a, &b);
    assert_int_equal(xf_jobspec_to_json(&b, &jb), XF_OK);
    assert_string_equal(ja, jb);
    xf_free(ja);
    xf_free(jb);
  }
}

static void canonical_json_lists_every_field_that_applies(void **state) {
  (void)state;
  xf_jobspec s;
  char *json;
  assert_parses(product_example, &s);
  assert_int_equal(xf_jobspec_to_json(&s, &json), XF_OK);
  static const char *const expected[] = {
      "\"name\": \"fmnist-cnn-eu-us\"", "\"arch\": \"cnn\"", "\"preset\": \"lenet5\"",
      "\"dataset\": \"fmnist\"", "\"tags\": [\"fmnist\"]", "\"rounds\": 50",
      "\"sites_per_round\": 1.0", "\"over_selection\": 1.0", "\"min_sites\": 3",
      "\"round_deadline_s\": 600.0", "\"epochs\": 10", "\"batch_size\": 64",
      "\"optimizer\": \"sgd\"", "\"lr\": 0.01", "\"momentum\": 0.9", "\"weight_decay\": 1e-05",
      "\"prox_mu\": 0.0", "\"name\": \"fedavg\"", "\"server_lr\": 1.0", "\"unit\": \"site\"",
      "\"mode\": \"distributed\"", "\"clip\": 1.0", "\"target_epsilon\": 8.0",
      "\"delta\": 1e-05", "\"enabled\": true", "\"bits\": 20", "\"threshold\": 0.66",
      "\"uplink\": \"q8\"", "\"downlink\": \"fp16\"", "\"seed\": 42"};
  for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
    if (!strstr(json, expected[i])) fail_msg("canonical JSON lacks %s:\n%s", expected[i], json);
  /* Nothing that does not apply: hyperparameters of other strategies, hidden. */
  assert_null(strstr(json, "beta1"));
  assert_null(strstr(json, "hidden"));
  assert_null(strstr(json, "noise_multiplier"));
  xf_free(json);
}

/* ---- validation of specs built in code ------------------------------------ */

static void validate_checks_specs_built_in_code(void **state) {
  (void)state;
  xf_jobspec s;
  xf_errctx err;
  xf_jobspec_defaults(&s);
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_EFORMAT);
  assert_string_equal(err.field, "name");
  snprintf(s.name, sizeof(s.name), "built");
  snprintf(s.data.dataset, sizeof(s.data.dataset), "fmnist");
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_ERANGE);
  assert_string_equal(err.field, "rounds");
  s.rounds = 3;
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_OK);
  s.model.arch = XF_JOB_ARCH_CNN;
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_EFORMAT);
  assert_string_equal(err.field, "model.preset");
  s.model.preset = XF_JOB_PRESET_LENET5;
  s.local.lr = NAN;
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_ERANGE);
  assert_string_equal(err.field, "local.lr");
  s.local.lr = 0.05;
  memset(s.name, 'a', sizeof(s.name)); /* no terminator */
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_ERANGE);
  assert_string_equal(err.field, "name");
  snprintf(s.name, sizeof(s.name), "built");
  s.compression.uplink.quant_bits = 7;
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_EFORMAT);
  assert_string_equal(err.field, "compression.uplink");
  s.compression.uplink.quant_bits = 8;
  xf_job_strategy_defaults(&s.strategy, XF_JOB_STRATEGY_FEDYOGI);
  assert_true(s.strategy.server_lr == 0.01);
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_OK);
}

static void names_and_lookups_agree(void **state) {
  (void)state;
#define CHECK_ENUM(prefix, type, count)                                        \
  for (int v = 0; v < (count); v++) {                                          \
    type back;                                                                 \
    assert_int_equal(prefix##_from_name(prefix##_name((type)v), &back), XF_OK); \
    assert_int_equal(back, v);                                                 \
  }                                                                            \
  assert_string_equal(prefix##_name((type)(count)), "unknown");                \
  {                                                                            \
    type back;                                                                 \
    assert_int_equal(prefix##_from_name("bogus", &back), XF_EFORMAT);          \
  }
  CHECK_ENUM(xf_job_arch, xf_job_arch, 4)
  CHECK_ENUM(xf_job_preset, xf_job_preset, 3)
  CHECK_ENUM(xf_job_optimizer, xf_job_optimizer, 3)
  CHECK_ENUM(xf_job_lr_schedule_kind, xf_job_lr_schedule_kind, 3)
  CHECK_ENUM(xf_job_strategy_kind, xf_job_strategy_kind, 8)
  CHECK_ENUM(xf_job_privacy_unit, xf_privacy_unit, 2)
  CHECK_ENUM(xf_job_privacy_mode, xf_privacy_mode, 4)
  CHECK_ENUM(xf_job_downlink, xf_job_downlink, 3)
#undef CHECK_ENUM
  assert_string_equal(xf_job_preset_name(XF_JOB_PRESET_FEDAVG_CNN), "fedavg-cnn");
  assert_string_equal(xf_job_strategy_kind_name(XF_JOB_STRATEGY_TRIMMED_MEAN), "trimmed_mean");
  assert_true(xf_job_strategy_is_robust(XF_JOB_STRATEGY_MEDIAN));
  assert_false(xf_job_strategy_is_robust(XF_JOB_STRATEGY_FEDADAM));
}

/* ---- allocation failures -------------------------------------------------- */

static void allocation_failures_are_reported_and_nothing_leaks(void **state) {
  (void)state;
  char path[] = "/tmp/xf-jobspec-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t n = strlen(product_example);
  assert_int_equal(write(fd, product_example, n), (ssize_t)n);
  close(fd);
  int succeeded = 0;
  for (long budget = 0; budget < 100000 && !succeeded; budget++) {
    xf_jobspec s;
    xf_errctx err;
    char *json = NULL;
    xf_errctx_clear(&err);
    xf_alloc_fail_after(budget);
    xf_err rc = xf_jobspec_parse_file(path, &s, &err);
    xf_err rc_json = rc == XF_OK ? xf_jobspec_to_json(&s, &json) : rc;
    xf_alloc_fail_reset();
    if (rc != XF_OK && rc != XF_ENOMEM)
      fail_msg("budget %ld: parse returned %s: %s", budget, xf_err_name(rc), err.msg);
    if (rc == XF_ENOMEM) assert_int_equal(err.code, XF_ENOMEM);
    if (rc_json != XF_OK && rc_json != XF_ENOMEM)
      fail_msg("budget %ld: to_json returned %s", budget, xf_err_name(rc_json));
    if (rc_json == XF_OK) {
      assert_non_null(json);
      succeeded = 1;
    } else {
      assert_null(json);
    }
    xf_free(json);
  }
  assert_true(succeeded);
  unlink(path);
}

/* ---- the shipped examples ------------------------------------------------- */

static void deploy_job_specs_parse(void **state) {
  (void)state;
  const char *root = getenv("XF_SOURCE_DIR");
  if (!root) skip();
  static const struct {
    const char *file;
    xf_job_arch arch;
    uint32_t rounds;
  } specs[] = {{"deploy/jobs/fmnist-mlp.json", XF_JOB_ARCH_MLP, 20},
               {"deploy/jobs/fmnist-lenet5.json", XF_JOB_ARCH_CNN, 50}};
  for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", root, specs[i].file);
    xf_jobspec s;
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_jobspec_parse_file(path, &s, &err);
    if (rc != XF_OK) {
      char line[1024];
      fail_msg("%s", xf_errctx_format(&err, line, sizeof(line)));
    }
    assert_int_equal(s.model.arch, specs[i].arch);
    assert_int_equal(s.rounds, specs[i].rounds);
    assert_int_equal(s.local.epochs, 10);
    assert_int_equal(s.local.batch_size, 64);
    assert_true(s.local.lr == 0.01);
    assert_true(s.local.momentum == 0.9);
    assert_true(s.local.weight_decay == 0);
    assert_int_equal(s.min_sites, 3);
    assert_true(s.seed == 42);
    assert_int_equal(s.privacy.mode, XF_PRIVACY_NONE);
    assert_false(s.secure_aggregation.enabled);
    assert_int_equal(s.compression.uplink.quant_bits, 0);
    assert_true(s.compression.uplink.topk_fraction == 0);
    assert_int_equal(s.compression.downlink, XF_JOB_DOWNLINK_NONE);
  }
  xf_jobspec s;
  char path[4096];
  snprintf(path, sizeof(path), "%s/deploy/jobs/fmnist-mlp.json", root);
  assert_int_equal(xf_jobspec_parse_file(path, &s, NULL), XF_OK);
  assert_int_equal(s.model.n_hidden, 2);
  assert_int_equal(s.model.hidden[0], 200);
  assert_int_equal(s.model.hidden[1], 200);
  snprintf(path, sizeof(path), "%s/deploy/jobs/fmnist-lenet5.json", root);
  assert_int_equal(xf_jobspec_parse_file(path, &s, NULL), XF_OK);
  assert_int_equal(s.model.preset, XF_JOB_PRESET_LENET5);
}

/* The tabular example's job (deploy/jobs/credit-mlp.json): a declared MLP
 * trained with AdamW under a cosine schedule, which builds for the credit
 * data set's 1x1x25 records and 2 classes and for no other class count. */
static void credit_job_spec_declares_an_adamw_mlp_for_the_credit_records(void **state) {
  (void)state;
  const char *root = getenv("XF_SOURCE_DIR");
  if (!root) skip();
  char path[4096];
  snprintf(path, sizeof(path), "%s/deploy/jobs/credit-mlp.json", root);
  xf_jobspec s;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_file(path, &s, &err) != XF_OK) {
    char line[1024];
    fail_msg("%s", xf_errctx_format(&err, line, sizeof(line)));
  }
  assert_int_equal(s.model.arch, XF_JOB_ARCH_LAYERS);
  assert_int_equal(s.model.n_layers, 5);
  assert_int_equal(s.model.layers[0].kind, XF_DECL_DENSE);
  assert_int_equal(s.model.layers[4].kind, XF_DECL_DENSE);
  assert_int_equal(s.model.layers[4].units, 2);
  assert_string_equal(s.data.dataset, "credit");
  assert_int_equal(s.local.optimizer, XF_JOB_OPTIMIZER_ADAMW);
  assert_true(s.local.weight_decay > 0);
  assert_int_equal(s.local.lr_schedule.kind, XF_JOB_LR_COSINE);
  assert_true(s.local.lr_schedule.min_lr < s.local.lr);
  assert_int_equal(s.privacy.mode, XF_PRIVACY_NONE);
  xf_model_spec ms;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_spec(&s, 1, 1, 25, 2, &ms, &err), XF_OK);
  assert_int_equal(ms.n_layers, 5);
  uint64_t params = 0;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_params(&s, 1, 1, 25, 2, &params, &err), XF_OK);
  assert_int_equal(params, 25 * 64 + 64 + 64 * 32 + 32 + 32 * 2 + 2);
  xf_errctx_clear(&err);
  assert_int_not_equal(xf_jobspec_model_params(&s, 1, 1, 25, 3, &params, &err), XF_OK);
  char line[1024];
  assert_non_null(strstr(xf_errctx_format(&err, line, sizeof(line)), "model.layers[4].units"));
}

/* A spec within every field's range could ask for 4.35e9 parameters and die
 * of "out of memory" at the coordinator: the count is limited where the
 * spec is validated (hidden layers alone) and where the data's shape is
 * known (xf_jobspec_model_spec), naming the field, the count and the limit. */
static void model_above_the_parameter_limit_is_refused_naming_the_field(void **state) {
  (void)state;
  assert_refused(MODEL("{\"arch\": \"mlp\", \"hidden\": [65536, 65536]}"), XF_ERANGE,
                 "model.hidden", "than the 250000000 a job's model may have");
  assert_refused(MODEL("{\"arch\": \"mlp\", \"hidden\": [65536, 65536]}"), XF_ERANGE,
                 "model.hidden", "4295294978 parameters");
  xf_jobspec spec;
  assert_parses(MODEL("{\"arch\": \"mlp\", \"hidden\": [65536]}"), &spec);
  xf_model_spec ms;
  xf_errctx err;
  xf_errctx_clear(&err);
  /* On Fashion-MNIST: 784 * 65536 + 65536 + 65536 * 10 + 10 parameters. */
  assert_int_equal(xf_jobspec_model_spec(&spec, 28, 28, 1, 10, &ms, &err), XF_OK);
  uint64_t n = 0;
  assert_int_equal(xf_jobspec_model_params(&spec, 28, 28, 1, 10, &n, &err), XF_OK);
  assert_true(n == 784ull * 65536 + 65536 + 65536ull * 10 + 10);
  /* On 64x64 colour images the first layer alone is 12288 * 65536 weights. */
  assert_int_equal(xf_jobspec_model_spec(&spec, 64, 64, 3, 10, &ms, &err), XF_ERANGE);
  assert_string_equal(err.field, "model.hidden");
  assert_non_null(strstr(err.msg, "806027274 parameters"));
  assert_non_null(strstr(err.msg, "64x64x3"));
  assert_non_null(strstr(err.msg, "250000000"));
  /* A cnn preset on huge images: the field is the model. */
  assert_parses(MODEL("{\"arch\": \"cnn\", \"preset\": \"lenet5\"}"), &spec);
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_spec(&spec, 28, 28, 1, 10, &ms, &err), XF_OK);
  assert_int_equal(xf_jobspec_model_spec(&spec, 4096, 4096, 1, 10, &ms, &err), XF_ERANGE);
  assert_string_equal(err.field, "model");
}

/* ---- model.layers ---------------------------------------------------------- */

#define LENET5_LAYERS                                                                        \
  "[{\"kind\": \"conv2d\", \"filters\": 6, \"kernel\": 5}, {\"kind\": \"relu\"}, "          \
  "{\"kind\": \"maxpool2d\", \"kernel\": 2}, {\"kind\": \"conv2d\", \"filters\": 16, "      \
  "\"kernel\": 5}, {\"kind\": \"relu\"}, {\"kind\": \"maxpool2d\", \"kernel\": 2}, "        \
  "{\"kind\": \"flatten\"}, {\"kind\": \"dense\", \"units\": 120}, {\"kind\": \"relu\"}, " \
  "{\"kind\": \"dense\", \"units\": 84}, {\"kind\": \"relu\"}, {\"kind\": \"dense\", "      \
  "\"units\": 10}]"

/* A declared model parses with its defaults filled in (stride 1 and padding
 * 0 for conv2d, stride = kernel for maxpool2d), writes them out canonically,
 * and maps to the kernels' list: lenet5 declared has the preset's count. */
static void declared_layers_parse_fill_defaults_and_round_trip(void **state) {
  (void)state;
  xf_jobspec spec, back;
  assert_parses(MODEL("{\"layers\": " LENET5_LAYERS "}"), &spec);
  assert_int_equal(spec.model.arch, XF_JOB_ARCH_LAYERS);
  assert_int_equal(spec.model.n_layers, 12);
  assert_int_equal(spec.model.preset, XF_JOB_PRESET_NONE);
  assert_int_equal(spec.model.layers[0].kind, XF_DECL_CONV2D);
  assert_int_equal(spec.model.layers[0].stride, 1);
  assert_int_equal(spec.model.layers[0].padding, 0);
  assert_int_equal(spec.model.layers[2].kind, XF_DECL_MAXPOOL2D);
  assert_int_equal(spec.model.layers[2].stride, 2);
  assert_int_equal(spec.model.layers[11].units, 10);
  char *json = NULL;
  assert_int_equal(xf_jobspec_to_json(&spec, &json), XF_OK);
  assert_non_null(strstr(json, "\"arch\": \"layers\""));
  assert_non_null(strstr(json, "{\"kind\": \"conv2d\", \"filters\": 6, \"kernel\": 5, "
                               "\"stride\": 1, \"padding\": 0}"));
  assert_non_null(strstr(json, "{\"kind\": \"maxpool2d\", \"kernel\": 2, \"stride\": 2}"));
  assert_parses(json, &back);
  assert_specs_equal(&spec, &back);
  /* "arch": "layers" spelled out is the same spec. */
  assert_parses(MODEL("{\"arch\": \"layers\", \"layers\": " LENET5_LAYERS "}"), &back);
  assert_specs_equal(&spec, &back);
  xf_free(json);
  uint64_t declared = 0, preset = 0;
  assert_int_equal(xf_jobspec_model_params(&spec, 28, 28, 1, 10, &declared, NULL), XF_OK);
  assert_parses(MODEL("{\"arch\": \"cnn\", \"preset\": \"lenet5\"}"), &back);
  assert_int_equal(xf_jobspec_model_params(&back, 28, 28, 1, 10, &preset, NULL), XF_OK);
  assert_int_equal(declared, preset);
  assert_int_equal(declared, 44426);
}

/* Each malformed list is refused naming the layer and the field. */
static void declared_layers_are_refused_naming_the_layer_and_field(void **state) {
  (void)state;
  static const struct {
    const char *model;
    xf_err code;
    const char *field, *says;
  } cases[] = {
      {"{\"layers\": []}", XF_ERANGE, "model.layers", "1 to 32 layers, got 0"},
      {"{\"layers\": {\"kind\": \"dense\"}}", XF_EFORMAT, "model.layers", "an array of layer"},
      {"{\"layers\": [3]}", XF_EFORMAT, "model.layers[0]", "a layer object"},
      {"{\"layers\": [{\"units\": 10}]}", XF_EFORMAT, "model.layers[0].kind", "required"},
      {"{\"layers\": [{\"kind\": \"conv\", \"filters\": 2, \"kernel\": 3}]}", XF_EFORMAT,
       "model.layers[0].kind", "did you mean \"conv2d\""},
      {"{\"layers\": [{\"kind\": \"dense\"}]}", XF_EFORMAT, "model.layers[0].units", "required"},
      {"{\"layers\": [{\"kind\": \"dense\", \"units\": 0}]}", XF_ERANGE,
       "model.layers[0].units", "between 1 and 65536"},
      {"{\"layers\": [{\"kind\": \"dense\", \"units\": 2.5}]}", XF_EFORMAT,
       "model.layers[0].units", "whole number"},
      {"{\"layers\": [{\"kind\": \"conv2d\", \"kernel\": 3}, {\"kind\": \"dense\", \"units\": "
       "2}]}",
       XF_EFORMAT, "model.layers[0].filters", "required"},
      {"{\"layers\": [{\"kind\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": 3}, "
       "{\"kind\": \"dense\", \"units\": 2}]}",
       XF_ERANGE, "model.layers[0].padding", "between 0 and 2"},
      {"{\"layers\": [{\"kind\": \"conv2d\", \"filters\": 4, \"kernel\": 65}]}", XF_ERANGE,
       "model.layers[0].kernel", "between 1 and 64"},
      {"{\"layers\": [{\"kind\": \"maxpool2d\", \"kernel\": 2, \"stride\": 0}]}", XF_ERANGE,
       "model.layers[0].stride", "between 1 and 64"},
      {"{\"layers\": [{\"kind\": \"maxpool2d\", \"kernel\": 2, \"filters\": 4}]}", XF_EFORMAT,
       "model.layers[0].filters", "its fields are: kind, kernel, stride"},
      {"{\"layers\": [{\"kind\": \"relu\", \"units\": 4}]}", XF_EFORMAT, "model.layers[0].units",
       "a relu layer has no such field"},
      {"{\"layers\": [{\"kind\": \"dense\", \"units\": 10}, {\"kind\": \"relu\"}]}", XF_EFORMAT,
       "model.layers[1]", "the last layer is relu"},
      {"{\"layers\": [{\"kind\": \"dense\", \"units\": 2}], \"loss\": \"mse\"}", XF_EFORMAT,
       "model.layers[0].units", "mse needs exactly 1 output"},
      {"{\"arch\": \"cnn\", \"layers\": [{\"kind\": \"dense\", \"units\": 2}]}", XF_EFORMAT,
       "model.layers", "cannot go with arch \"cnn\""},
      {"{\"arch\": \"layers\"}", XF_EFORMAT, "model.layers", "required"},
      {"{\"layers\": [{\"kind\": \"dense\", \"units\": 2}], \"preset\": \"lenet5\"}", XF_EFORMAT,
       "model.preset", "use one or the other"},
      {"{\"layers\": [{\"kind\": \"dense\", \"units\": 2}], \"hidden\": [3]}", XF_EFORMAT,
       "model.hidden", "used only by \"mlp\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char json[1024];
    snprintf(json, sizeof(json), MODEL("%s"), cases[i].model);
    assert_refused(json, cases[i].code, cases[i].field, cases[i].says);
  }
  /* 33 layers. */
  char json[4096];
  int used = snprintf(json, sizeof(json), "{\"layers\": [");
  for (int i = 0; i < 33; i++)
    used += snprintf(json + used, sizeof(json) - (size_t)used, "%s{\"kind\": \"relu\"}",
                     i ? ", " : "");
  snprintf(json + used, sizeof(json) - (size_t)used, "]}");
  char full[4200];
  snprintf(full, sizeof(full), MODEL("%s"), json);
  assert_refused(full, XF_ERANGE, "model.layers", "1 to 32 layers, got 33");
}

/* Shapes are checked where the data is known: a list that parses can still
 * not fit the records, and the refusal names the layer; the parameter cap
 * names model.layers. */
static void declared_layers_are_checked_against_the_data(void **state) {
  (void)state;
  xf_jobspec spec;
  assert_parses(MODEL("{\"layers\": [{\"kind\": \"conv2d\", \"filters\": 4, \"kernel\": 7}, "
                      "{\"kind\": \"dense\", \"units\": 10}]}"),
                &spec);
  xf_model_spec ms;
  xf_model *m = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_spec(&spec, 5, 5, 1, 10, &ms, &err), XF_OK);
  assert_int_equal(xf_model_create(&ms, &m, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "model.layers[0].kernel: 7 is larger than its input 5x5"));
  assert_int_equal(xf_jobspec_model_spec(&spec, 28, 28, 1, 10, &ms, &err), XF_OK);
  assert_int_equal(xf_model_create(&ms, &m, &err), XF_OK);
  xf_model_free(m);
  /* 10 classes in the data, 3 outputs declared. */
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_spec(&spec, 28, 28, 1, 3, &ms, &err), XF_OK);
  assert_int_equal(xf_model_create(&ms, &m, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "model.layers[1].units: the last layer gives 10 outputs"));
  /* 200x200 inputs into 65536 units: over the 250M parameter cap. */
  assert_parses(MODEL("{\"layers\": [{\"kind\": \"flatten\"}, {\"kind\": \"dense\", \"units\": "
                      "65536}, {\"kind\": \"dense\", \"units\": 10}]}"),
                &spec);
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_spec(&spec, 200, 200, 1, 10, &ms, &err), XF_ERANGE);
  assert_string_equal(err.field, "model.layers");
  assert_non_null(strstr(err.msg, "250000000"));
}

/* Every kind added after the first five, with each default: avgpool2d's
 * stride is its kernel; the other fields are required. */
#define NEW_KINDS_LAYERS                                                                     \
  "[{\"kind\": \"embedding\", \"vocab\": 1000, \"dim\": 8}, {\"kind\": \"layernorm\"}, "    \
  "{\"kind\": \"dropout\", \"rate\": 0.1}, {\"kind\": \"add\", \"from\": 0}, "             \
  "{\"kind\": \"gelu\"}, {\"kind\": \"tanh\"}, {\"kind\": \"sigmoid\"}, "                 \
  "{\"kind\": \"softmax\"}, {\"kind\": \"groupnorm\", \"groups\": 4}, "                   \
  "{\"kind\": \"avgpool2d\", \"kernel\": 2}, {\"kind\": \"flatten\"}, "                   \
  "{\"kind\": \"dense\", \"units\": 10}]"

/* The kinds after relu parse with their fields, print only those fields in
 * the canonical text, read back to the same list, and build for data of the
 * right shape: 1x4x1 ids of a 1000-word vocabulary, embedded 8 wide. */
static void declared_new_kinds_parse_round_trip_and_build(void **state) {
  (void)state;
  xf_jobspec spec, back;
  assert_parses(MODEL("{\"layers\": " NEW_KINDS_LAYERS "}"), &spec);
  assert_int_equal(spec.model.n_layers, 12);
  const xf_layer_decl *l = spec.model.layers;
  assert_int_equal(l[0].kind, XF_DECL_EMBEDDING);
  assert_int_equal(l[0].vocab, 1000);
  assert_int_equal(l[0].dim, 8);
  assert_int_equal(l[1].kind, XF_DECL_LAYERNORM);
  assert_int_equal(l[2].kind, XF_DECL_DROPOUT);
  assert_true(l[2].rate == 0.1f);
  assert_int_equal(l[3].kind, XF_DECL_ADD);
  assert_int_equal(l[3].from, 0);
  assert_int_equal(l[4].kind, XF_DECL_GELU);
  assert_int_equal(l[5].kind, XF_DECL_TANH);
  assert_int_equal(l[6].kind, XF_DECL_SIGMOID);
  assert_int_equal(l[7].kind, XF_DECL_SOFTMAX);
  assert_int_equal(l[8].kind, XF_DECL_GROUPNORM);
  assert_int_equal(l[8].groups, 4);
  assert_int_equal(l[9].kind, XF_DECL_AVGPOOL2D);
  assert_int_equal(l[9].kernel, 2);
  assert_int_equal(l[9].stride, 2);
  char *json = NULL, *again = NULL;
  assert_int_equal(xf_jobspec_to_json(&spec, &json), XF_OK);
  assert_non_null(strstr(
      json, "\"layers\": [{\"kind\": \"embedding\", \"vocab\": 1000, \"dim\": 8}, {\"kind\": "
            "\"layernorm\"}, {\"kind\": \"dropout\", \"rate\": 0.1}, {\"kind\": \"add\", "
            "\"from\": 0}, {\"kind\": \"gelu\"}, {\"kind\": \"tanh\"}, {\"kind\": \"sigmoid\"}, "
            "{\"kind\": \"softmax\"}, {\"kind\": \"groupnorm\", \"groups\": 4}, {\"kind\": "
            "\"avgpool2d\", \"kernel\": 2, \"stride\": 2}, {\"kind\": \"flatten\"}, {\"kind\": "
            "\"dense\", \"units\": 10}]"));
  assert_parses(json, &back);
  assert_specs_equal(&spec, &back);
  assert_int_equal(xf_jobspec_to_json(&back, &again), XF_OK);
  assert_string_equal(json, again);
  xf_free(json);
  xf_free(again);
  /* The embedding turns a record's ids into a 1 x ids x 8 image: layernorm
   * and softmax work on each position's 8 channels, 4 groups divide 8, and
   * the add's source has the shape of its input. A 2x2 avgpool does not fit
   * a 1-high image; a 1x1 one does. */
  xf_model_spec ms;
  xf_model *m = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_spec(&spec, 1, 4, 1, 10, &ms, &err), XF_OK);
  assert_int_equal(xf_model_create(&ms, &m, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "model.layers[9].kernel"));
  spec.model.layers[9].kernel = 1;
  spec.model.layers[9].stride = 1;
  uint64_t params = 0;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_model_params(&spec, 1, 8, 1, 10, &params, &err), XF_OK);
  /* embedding 1000*8, layernorm 8+8, groupnorm 8+8, dense (8 ids * 8)*10+10. */
  assert_int_equal(params, 1000 * 8 + 16 + 16 + 64 * 10 + 10);
}

/* A fraction of a dropout rate that a float32 cannot hold still prints as
 * text that reads back to the same float. */
static void dropout_rate_prints_as_text_that_reads_back_exactly(void **state) {
  (void)state;
  static const char *const rates[] = {"0", "0.5", "0.1", "0.3333333333333333", "1e-7",
                                      "0.99999994", "0.123456789"};
  for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
    char model[256], json[512];
    snprintf(model, sizeof(model),
             "{\"layers\": [{\"kind\": \"dropout\", \"rate\": %s}, {\"kind\": \"dense\", "
             "\"units\": 2}]}",
             rates[i]);
    snprintf(json, sizeof(json), MODEL("%s"), model);
    xf_jobspec a, b;
    assert_parses(json, &a);
    assert_true(a.model.layers[0].rate == (float)strtod(rates[i], NULL));
    char *ja = NULL, *jb = NULL;
    assert_int_equal(xf_jobspec_to_json(&a, &ja), XF_OK);
    assert_parses(ja, &b);
    assert_true(a.model.layers[0].rate == b.model.layers[0].rate);
    assert_int_equal(xf_jobspec_to_json(&b, &jb), XF_OK);
    assert_string_equal(ja, jb);
    xf_free(ja);
    xf_free(jb);
  }
  xf_jobspec s;
  assert_parses(MODEL("{\"layers\": [{\"kind\": \"dropout\", \"rate\": 0}, {\"kind\": "
                      "\"dense\", \"units\": 2}]}"),
                &s);
  char *j = NULL;
  assert_int_equal(xf_jobspec_to_json(&s, &j), XF_OK);
  assert_non_null(strstr(j, "{\"kind\": \"dropout\", \"rate\": 0.0}"));
  xf_free(j);
}

/* The canonical text of a list of the first five kinds is what it was before
 * the other kinds existed, byte for byte: the digests of stored specs and
 * the jobs derived from them stay valid. */
static void declared_first_kinds_keep_their_canonical_text(void **state) {
  (void)state;
  xf_jobspec spec;
  assert_parses(MODEL("{\"layers\": [{\"kind\": \"conv2d\", \"filters\": 4, \"kernel\": 3, "
                      "\"stride\": 2, \"padding\": 1}, {\"kind\": \"relu\"}, {\"kind\": "
                      "\"maxpool2d\", \"kernel\": 2}, {\"kind\": \"flatten\"}, {\"kind\": "
                      "\"dense\", \"units\": 10}]}"),
                &spec);
  char *json = NULL;
  assert_int_equal(xf_jobspec_to_json(&spec, &json), XF_OK);
  assert_non_null(strstr(json, "\"model\": {\n    \"arch\": \"layers\",\n    \"layers\": [{\"kind\": "
                               "\"conv2d\", \"filters\": 4, \"kernel\": 3, \"stride\": 2, "
                               "\"padding\": 1}, {\"kind\": \"relu\"}, {\"kind\": \"maxpool2d\", "
                               "\"kernel\": 2, \"stride\": 2}, {\"kind\": \"flatten\"}, "
                               "{\"kind\": \"dense\", \"units\": 10}]\n  },\n"));
  static const char *const later[] = {"rate", "groups", "vocab", "dim", "from"};
  for (size_t i = 0; i < sizeof(later) / sizeof(later[0]); i++) {
    char key[16];
    snprintf(key, sizeof(key), "\"%s\"", later[i]);
    assert_null(strstr(json, key));
  }
  xf_free(json);
}

/* Each bad field of the new kinds is refused naming the layer, the field and
 * what is allowed. */
static void declared_new_kinds_are_refused_naming_the_field(void **state) {
  (void)state;
  static const struct {
    const char *layers; /* before a final dense layer */
    xf_err code;
    const char *field, *says;
  } cases[] = {
      {"{\"kind\": \"avgpool2d\"}", XF_EFORMAT, "model.layers[0].kernel", "required"},
      {"{\"kind\": \"avgpool2d\", \"kernel\": 65}", XF_ERANGE, "model.layers[0].kernel",
       "between 1 and 64"},
      {"{\"kind\": \"avgpool2d\", \"kernel\": 2, \"stride\": 0}", XF_ERANGE,
       "model.layers[0].stride", "between 1 and 64"},
      {"{\"kind\": \"avgpool2d\", \"kernel\": 2, \"padding\": 1}", XF_EFORMAT,
       "model.layers[0].padding", "an avgpool2d layer has no such field; its fields are: kind, "
       "kernel, stride"},
      {"{\"kind\": \"dropout\"}", XF_EFORMAT, "model.layers[0].rate", "required"},
      {"{\"kind\": \"dropout\", \"rate\": 1}", XF_ERANGE, "model.layers[0].rate",
       "at least 0 and below 1"},
      {"{\"kind\": \"dropout\", \"rate\": -0.1}", XF_ERANGE, "model.layers[0].rate",
       "got -0.1"},
      {"{\"kind\": \"dropout\", \"rate\": 0.99999999}", XF_ERANGE, "model.layers[0].rate",
       "rounds to 1 as a 32-bit float"},
      {"{\"kind\": \"dropout\", \"rate\": \"0.5\"}", XF_EFORMAT, "model.layers[0].rate",
       "expected a number, got a string"},
      {"{\"kind\": \"dropout\", \"rate\": 1e999}", XF_EFORMAT, "", ""},
      {"{\"kind\": \"layernorm\", \"groups\": 2}", XF_EFORMAT, "model.layers[0].groups",
       "a layernorm layer has no such field"},
      {"{\"kind\": \"groupnorm\"}", XF_EFORMAT, "model.layers[0].groups", "required"},
      {"{\"kind\": \"groupnorm\", \"groups\": 0}", XF_ERANGE, "model.layers[0].groups",
       "between 1 and 4096"},
      {"{\"kind\": \"groupnorm\", \"groups\": 1.5}", XF_EFORMAT, "model.layers[0].groups",
       "whole number"},
      {"{\"kind\": \"embedding\", \"dim\": 4}", XF_EFORMAT, "model.layers[0].vocab", "required"},
      {"{\"kind\": \"embedding\", \"vocab\": 4}", XF_EFORMAT, "model.layers[0].dim", "required"},
      {"{\"kind\": \"embedding\", \"vocab\": 1048577, \"dim\": 4}", XF_ERANGE,
       "model.layers[0].vocab", "between 1 and 1048576"},
      {"{\"kind\": \"embedding\", \"vocab\": 4, \"dim\": 4097}", XF_ERANGE,
       "model.layers[0].dim", "between 1 and 4096"},
      {"{\"kind\": \"relu\"}, {\"kind\": \"embedding\", \"vocab\": 4, \"dim\": 4}", XF_EFORMAT,
       "model.layers[1]", "must be the first layer"},
      {"{\"kind\": \"add\"}", XF_EFORMAT, "model.layers[0].from", "required"},
      {"{\"kind\": \"add\", \"from\": 0}", XF_ERANGE, "model.layers[0].from",
       "only add the model's input (-1)"},
      {"{\"kind\": \"relu\"}, {\"kind\": \"relu\"}, {\"kind\": \"add\", \"from\": 2}", XF_ERANGE,
       "model.layers[2].from", "earlier layer (0 to 1) or the model's input (-1)"},
      {"{\"kind\": \"relu\"}, {\"kind\": \"add\", \"from\": 1}", XF_ERANGE,
       "model.layers[1].from", "an earlier layer (here only 0) or the model's input (-1)"},
      {"{\"kind\": \"add\", \"from\": -2}", XF_ERANGE, "model.layers[0].from", "-2"},
      {"{\"kind\": \"add\", \"from\": \"input\"}", XF_EFORMAT, "model.layers[0].from",
       "expected an integer"},
      {"{\"kind\": \"gelu\", \"rate\": 0.5}", XF_EFORMAT, "model.layers[0].rate",
       "a gelu layer has no such field"},
      {"{\"kind\": \"softmx\"}", XF_EFORMAT, "model.layers[0].kind",
       "did you mean \"softmax\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char model[512], json[1024];
    snprintf(model, sizeof(model), "{\"layers\": [%s, {\"kind\": \"dense\", \"units\": 2}]}",
             cases[i].layers);
    snprintf(json, sizeof(json), MODEL("%s"), model);
    if (cases[i].field[0]) {
      assert_refused(json, cases[i].code, cases[i].field, cases[i].says);
      continue;
    }
    /* 1e999 is not JSON a parser can hold; it is refused before the layer. */
    xf_jobspec s;
    xf_errctx err;
    assert_int_not_equal(parse(json, &s, &err), XF_OK);
  }
  /* A missing kind lists every kind. */
  assert_refused(MODEL("{\"layers\": [{\"units\": 2}]}"), XF_EFORMAT, "model.layers[0].kind",
                 "one of: dense, conv2d, maxpool2d, flatten, relu, avgpool2d, dropout, "
                 "layernorm, groupnorm, embedding, gelu, tanh, sigmoid, softmax, add");
}

/* A spec built in code is checked as the JSON would be: the new kinds'
 * ranges, no field a kind does not use, add only from an earlier layer. */
static void validate_checks_new_layer_kinds_built_in_code(void **state) {
  (void)state;
  xf_jobspec s;
  assert_parses(MODEL("{\"layers\": " NEW_KINDS_LAYERS "}"), &s);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_OK);
  static const struct {
    int layer;
    xf_layer_decl decl;
    xf_err code;
    const char *field, *says;
  } cases[] = {
      {2, {.kind = XF_DECL_DROPOUT, .rate = 1.0f}, XF_ERANGE, "model.layers[2].rate", "below 1"},
      {2, {.kind = XF_DECL_DROPOUT, .rate = -0.5f}, XF_ERANGE, "model.layers[2].rate", "got -0.5"},
      {2, {.kind = XF_DECL_DROPOUT, .rate = NAN}, XF_ERANGE, "model.layers[2].rate", "got nan"},
      {2, {.kind = XF_DECL_DROPOUT, .rate = 0.5f, .units = 3}, XF_EFORMAT,
       "model.layers[2].units", "a dropout layer has no units"},
      {1, {.kind = XF_DECL_LAYERNORM, .rate = 0.5f}, XF_EFORMAT, "model.layers[1].rate",
       "a layernorm layer has no rate"},
      {8, {.kind = XF_DECL_GROUPNORM}, XF_ERANGE, "model.layers[8].groups", "between 1 and 4096"},
      {8, {.kind = XF_DECL_GROUPNORM, .groups = 2, .dim = 2}, XF_EFORMAT, "model.layers[8].dim",
       "a groupnorm layer has no dim"},
      {0, {.kind = XF_DECL_EMBEDDING, .vocab = 0, .dim = 2}, XF_ERANGE, "model.layers[0].vocab",
       "between 1 and 1048576"},
      {0, {.kind = XF_DECL_EMBEDDING, .vocab = 2, .dim = 5000}, XF_ERANGE, "model.layers[0].dim",
       "between 1 and 4096"},
      {4, {.kind = XF_DECL_EMBEDDING, .vocab = 2, .dim = 2}, XF_EFORMAT, "model.layers[4]",
       "must be the first layer"},
      {3, {.kind = XF_DECL_ADD, .from = 3}, XF_ERANGE, "model.layers[3].from",
       "earlier layer (0 to 2)"},
      {3, {.kind = XF_DECL_ADD, .from = -2}, XF_ERANGE, "model.layers[3].from", "-2"},
      {9, {.kind = XF_DECL_AVGPOOL2D, .kernel = 2}, XF_ERANGE, "model.layers[9].stride",
       "between 1 and 64"},
      {6, {.kind = XF_DECL_SIGMOID, .from = -1}, XF_EFORMAT, "model.layers[6].from",
       "a sigmoid layer has no from"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    xf_jobspec bad = s;
    bad.model.layers[cases[i].layer] = cases[i].decl;
    xf_errctx_clear(&err);
    xf_err rc = xf_jobspec_validate(&bad, &err);
    if (rc != cases[i].code || strcmp(err.field, cases[i].field) != 0 ||
        !strstr(err.msg, cases[i].says))
      fail_msg("case %zu: expected %s %s \"%s\", got %s %s: %s", i, xf_err_name(cases[i].code),
               cases[i].field, cases[i].says, xf_err_name(rc), err.field, err.msg);
  }
}

/* Job ids are 1 to 2^63 - 1 in decimal; beyond that they are refused, not
 * clamped to the largest. */
static void job_ids_beyond_the_range_are_refused_not_clamped(void **state) {
  (void)state;
  int64_t id = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_job_id_parse("7", &id, &err), XF_OK);
  assert_true(id == 7);
  assert_int_equal(xf_job_id_parse("9223372036854775807", &id, &err), XF_OK);
  assert_true(id == INT64_MAX);
  static const char *const above[] = {"9223372036854775808", "18446744073709551615",
                                      "18446744073709551616", "99999999999999999999999999"};
  for (size_t i = 0; i < sizeof(above) / sizeof(above[0]); i++) {
    id = 0;
    xf_errctx_clear(&err);
    assert_int_equal(xf_job_id_parse(above[i], &id, &err), XF_ERANGE);
    assert_true(id == 0);
    assert_non_null(strstr(err.msg, above[i]));
    assert_non_null(strstr(err.msg, "from 1 to 9223372036854775807"));
  }
  static const char *const bad[] = {"", "0", "07", "-1", "+1", "1e3", "12 ", "x"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    xf_errctx_clear(&err);
    assert_int_equal(xf_job_id_parse(bad[i], &id, &err), XF_EINVAL);
    assert_non_null(strstr(err.msg, "is not a job id"));
  }
  assert_int_equal(xf_job_id_parse(NULL, &id, NULL), XF_EINVAL);
}

/* The sites of the open attempt while one is open; of the last committed
 * round between attempts and once the job is over; never a bare 0 of n. */
static void sites_text_gives_the_open_attempt_then_the_last_committed_round(void **state) {
  (void)state;
  char out[96];
  xf_job_sites s = {.invited = 6, .accepted = 6, .reported = 0, .last_round = 16,
                    .last_invited = 6, .last_reported = 5};
  xf_job_sites_text(&s, out, sizeof(out));
  assert_string_equal(out, "6 invited, 6 accepted, 0 reported");
  s.invited = s.accepted = s.reported = 0;
  xf_job_sites_text(&s, out, sizeof(out));
  assert_string_equal(out, "6 invited, 5 reported in round 16");
  s.last_round = 0;
  xf_job_sites_text(&s, out, sizeof(out));
  assert_string_equal(out, "none yet");
  /* Cut to the room given, terminated. */
  s = (xf_job_sites){.invited = 100000, .accepted = 99999, .reported = 99998};
  xf_job_sites_text(&s, out, 8);
  assert_string_equal(out, "100000 ");
}

/* Record-level privacy with noise keeps the train loss at the sites; site
 * level, or no noise, does not. */
static void train_loss_is_kept_at_the_sites_under_record_level_privacy(void **state) {
  (void)state;
  xf_jobspec spec;
  memset(&spec, 0, sizeof(spec));
  spec.privacy.unit = XF_PRIVACY_UNIT_RECORD;
  spec.privacy.mode = XF_PRIVACY_LOCAL;
  assert_true(xf_job_train_loss_kept(&spec));
  spec.privacy.mode = XF_PRIVACY_NONE;
  assert_false(xf_job_train_loss_kept(&spec));
  spec.privacy.unit = XF_PRIVACY_UNIT_SITE;
  spec.privacy.mode = XF_PRIVACY_CENTRAL;
  assert_false(xf_job_train_loss_kept(&spec));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(product_example_parses_with_every_field_as_written),
      cmocka_unit_test(minimal_spec_gets_documented_defaults),
      cmocka_unit_test(strategy_defaults_follow_the_chosen_strategy),
      cmocka_unit_test(models_parse_with_their_own_fields),
      cmocka_unit_test(sites_per_round_is_a_fraction_or_a_count),
      cmocka_unit_test(seed_takes_the_whole_uint64_range),
      cmocka_unit_test(unknown_keys_name_the_path_and_suggest_a_fix),
      cmocka_unit_test(wrong_types_name_the_path_and_expected_type),
      cmocka_unit_test(missing_required_fields_are_named),
      cmocka_unit_test(out_of_range_values_give_the_range),
      cmocka_unit_test(bad_values_name_the_choices),
      cmocka_unit_test(settings_that_contradict_each_other_are_refused),
      cmocka_unit_test(uplink_grammar_accepts_and_refuses),
      cmocka_unit_test(syntax_errors_give_line_and_column),
      cmocka_unit_test(failed_parse_leaves_the_output_untouched),
      cmocka_unit_test(oversized_input_is_refused),
      cmocka_unit_test(file_errors_name_the_file),
      cmocka_unit_test(canonical_json_round_trips),
      cmocka_unit_test(optimizer_ranges_name_the_field),
      cmocka_unit_test(lr_schedule_gives_each_round_its_rate),
      cmocka_unit_test(train_options_carry_the_optimizer_and_the_rounds_rate),
      cmocka_unit_test(new_local_fields_round_trip_and_defaults_stay_unwritten),
      cmocka_unit_test(canonical_json_lists_every_field_that_applies),
      cmocka_unit_test(validate_checks_specs_built_in_code),
      cmocka_unit_test(names_and_lookups_agree),
      cmocka_unit_test(allocation_failures_are_reported_and_nothing_leaks),
      cmocka_unit_test(deploy_job_specs_parse),
      cmocka_unit_test(credit_job_spec_declares_an_adamw_mlp_for_the_credit_records),
      cmocka_unit_test(model_above_the_parameter_limit_is_refused_naming_the_field),
      cmocka_unit_test(declared_layers_parse_fill_defaults_and_round_trip),
      cmocka_unit_test(declared_layers_are_refused_naming_the_layer_and_field),
      cmocka_unit_test(declared_layers_are_checked_against_the_data),
      cmocka_unit_test(declared_new_kinds_parse_round_trip_and_build),
      cmocka_unit_test(dropout_rate_prints_as_text_that_reads_back_exactly),
      cmocka_unit_test(declared_first_kinds_keep_their_canonical_text),
      cmocka_unit_test(declared_new_kinds_are_refused_naming_the_field),
      cmocka_unit_test(validate_checks_new_layer_kinds_built_in_code),
      cmocka_unit_test(job_ids_beyond_the_range_are_refused_not_clamped),
      cmocka_unit_test(sites_text_gives_the_open_attempt_then_the_last_committed_round),
      cmocka_unit_test(train_loss_is_kept_at_the_sites_under_record_level_privacy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
