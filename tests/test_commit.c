/* SPDX-License-Identifier: Apache-2.0 */
/* A round attempt's commit (coordinator/commit.h): the secure sum merged
 * with the folded updates, central noise calibrated from the job's sigma
 * and the cohort, the optimizer's step, and the model file and optimizer
 * state a global coordinator journals. No sockets, no journal. Every
 * object a test makes lives in its fixture, freed in the teardown even
 * when an assertion or an allocation fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/alloc.h"
#include "coordinator/commit.h"
#include "kernels/checkpoint.h"
#include "privacy/plan.h"

/* Softmax regression on 2x2x1 inputs, two classes: 10 parameters. */
#define N_PARAMS 10

typedef struct fixture {
  xf_model *model;
  xf_aggregator *agg;
  xf_server_opt *opt, *ref_opt;
  xf_noise *noise, *ref_noise;
  float *secure_mean, *mean, params[N_PARAMS], ref[N_PARAMS];
  xf_commit_result result;
  xf_model *decoded;
  float *decoded_params;
} fixture;

static int teardown(void **state);

static const uint8_t seed[XF_NOISE_SEED_BYTES] = {7, 1, 7};

static int setup(void **state) {
  fixture *f = xf_calloc(1, sizeof(*f));
  if (!f) return -1;
  *state = f;
  xf_model_spec ms = {.arch = XF_ARCH_LOGREG, .in_h = 2, .in_w = 2, .in_c = 1, .classes = 2};
  xf_job_strategy st;
  xf_job_strategy_defaults(&st, XF_JOB_STRATEGY_FEDAVG);
  if (xf_model_create(&ms, &f->model, NULL) != XF_OK ||
      xf_model_num_params(f->model) != N_PARAMS ||
      xf_aggregator_create(&st, N_PARAMS, 4, &f->agg, NULL) != XF_OK ||
      xf_server_opt_create(&st, N_PARAMS, &f->opt, NULL) != XF_OK ||
      xf_server_opt_create(&st, N_PARAMS, &f->ref_opt, NULL) != XF_OK) {
    teardown(state);
    *state = NULL;
    return -1;
  }
  for (size_t i = 0; i < N_PARAMS; i++) f->params[i] = f->ref[i] = 0.25f * (float)i;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  if (!f) return 0;
  xf_model_free(f->model);
  xf_model_free(f->decoded);
  xf_aggregator_free(f->agg);
  xf_server_opt_free(f->opt);
  xf_server_opt_free(f->ref_opt);
  xf_noise_free(f->noise);
  xf_noise_free(f->ref_noise);
  xf_free(f->secure_mean);
  xf_free(f->mean);
  xf_free(f->decoded_params);
  xf_commit_result_free(&f->result);
  xf_free(f);
  return 0;
}

/* Folds one site's update of N_PARAMS copies of v, with weight w. */
static void fold(xf_aggregator *agg, uint64_t site, uint64_t w, float v) {
  float values[N_PARAMS];
  for (size_t i = 0; i < N_PARAMS; i++) values[i] = v;
  xf_agg_update *u = NULL;
  assert_int_equal(xf_aggregator_begin_update(agg, site, w, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 0, values, N_PARAMS, NULL), XF_OK);
  assert_int_equal(xf_aggregator_end_update(u, NULL), XF_OK);
}

static float *constant(float v) {
  float *x = xf_mallocarray(N_PARAMS, sizeof(float));
  assert_non_null(x);
  for (size_t i = 0; i < N_PARAMS; i++) x[i] = v;
  return x;
}

static xf_privacy_spec central(double z, double clip) {
  return (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_SITE,
                           .mode = XF_PRIVACY_CENTRAL,
                           .clip = clip,
                           .has_noise_multiplier = true,
                           .noise_multiplier = z,
                           .delta = 1e-5};
}

static void the_secure_sum_is_merged_with_the_folded_aggregates(void **state) {
  fixture *f = *state;
  /* A regional aggregate of weight 3 (every value 1) and the direct sites'
   * secure sum of weight 1 (every value 3): the weighted mean is 1.5. */
  fold(f->agg, 1, 3, 1.0f);
  float *secure = constant(3.0f);
  uint64_t weight = 0;
  assert_int_equal(xf_commit_aggregate(f->agg, secure, 1, N_PARAMS, &f->mean, &weight, NULL),
                   XF_OK);
  assert_int_equal(weight, 4);
  for (size_t i = 0; i < N_PARAMS; i++) assert_true(f->mean[i] == 1.5f);
}

static void the_secure_sum_alone_is_the_aggregate_when_nothing_was_folded(void **state) {
  fixture *f = *state;
  float *secure = constant(0.5f);
  uint64_t weight = 0;
  assert_int_equal(xf_commit_aggregate(f->agg, secure, 12, N_PARAMS, &f->mean, &weight, NULL),
                   XF_OK);
  assert_ptr_equal(f->mean, secure);
  assert_int_equal(weight, 12);
}

static void an_attempt_that_took_no_update_has_nothing_to_commit(void **state) {
  fixture *f = *state;
  uint64_t weight = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_commit_aggregate(f->agg, NULL, 0, N_PARAMS, &f->mean, &weight, &err),
                   XF_EINVAL);
  assert_string_equal(err.msg, "no update was taken in this attempt");
  assert_null(f->mean);
  assert_int_equal(xf_commit_aggregate(NULL, NULL, 0, N_PARAMS, &f->mean, &weight, NULL),
                   XF_EINVAL);
}

static void central_noise_is_calibrated_from_the_specs_sigma_and_the_cohort(void **state) {
  (void)state;
  /* sigma C on the sum of n clipped updates is sigma C / n on their mean. */
  xf_privacy_spec p = central(1.1, 2.0);
  double sd = 0, want = 0, fewer = 0;
  assert_int_equal(xf_commit_noise_sd(&p, 4, 1000, &sd, NULL), XF_OK);
  assert_int_equal(xf_privacy_grid_sigma(1.1, 2.0 / 4, 1000, &want, NULL), XF_OK);
  assert_true(sd == want);
  assert_true(sd >= 1.1 * 2.0 / 4);
  assert_int_equal(xf_commit_noise_sd(&p, 2, 1000, &fewer, NULL), XF_OK);
  assert_true(fewer > sd);
  /* No cohort counts as one site. */
  assert_int_equal(xf_commit_noise_sd(&p, 0, 1000, &sd, NULL), XF_OK);
  assert_int_equal(xf_privacy_grid_sigma(1.1, 2.0, 1000, &want, NULL), XF_OK);
  assert_true(sd == want);
}

static void no_central_noise_unless_the_job_asks_the_aggregator_for_it(void **state) {
  (void)state;
  double sd = 1;
  xf_privacy_spec record = central(1.1, 2.0), local = central(1.1, 2.0),
                  target_only = central(1.1, 2.0), none = {0};
  record.unit = XF_PRIVACY_UNIT_RECORD;
  local.mode = XF_PRIVACY_LOCAL;
  target_only.has_noise_multiplier = false;
  const xf_privacy_spec *cases[] = {&record, &local, &target_only, &none};
  for (size_t i = 0; i < 4; i++) {
    sd = 1;
    assert_int_equal(xf_commit_noise_sd(cases[i], 4, 1000, &sd, NULL), XF_OK);
    assert_true(sd == 0);
  }
}

static void a_central_commit_adds_the_calibrated_noise_before_the_optimizer_step(void **state) {
  fixture *f = *state;
  fold(f->agg, 1, 5, 0.125f);
  fold(f->agg, 2, 3, -0.25f);
  assert_int_equal(xf_noise_new_seeded(seed, &f->noise), XF_OK);
  assert_int_equal(xf_noise_new_seeded(seed, &f->ref_noise), XF_OK);
  xf_privacy_spec p = central(0.8, 1.0);
  xf_commit_round in = {.privacy = &p, .model = f->model, .noise = f->noise, .sites = 2,
                        .agg = f->agg};
  assert_int_equal(xf_commit_global(&in, f->opt, f->params, N_PARAMS, &f->result, NULL), XF_OK);
  assert_int_equal(f->result.weight, 8);
  /* The same steps by hand, with a generator seeded alike. */
  double sd = 0;
  assert_int_equal(xf_privacy_grid_sigma(0.8, 1.0 / 2, N_PARAMS, &sd, NULL), XF_OK);
  f->mean = xf_mallocarray(N_PARAMS, sizeof(float));
  assert_non_null(f->mean);
  assert_int_equal(xf_aggregator_finish(f->agg, f->mean, NULL), XF_OK);
  assert_int_equal(xf_noise_gaussian_vec(f->ref_noise, sd, f->mean, N_PARAMS), XF_OK);
  xf_server_opt_step(f->ref_opt, f->ref, f->mean);
  assert_memory_equal(f->params, f->ref, sizeof(f->ref));
  xf_digest d;
  xf_params_digest(f->ref, N_PARAMS, &d);
  assert_memory_equal(&f->result.params_digest, &d, sizeof(d));
}

static void central_noise_without_a_generator_is_refused(void **state) {
  fixture *f = *state;
  fold(f->agg, 1, 5, 0.125f);
  xf_privacy_spec p = central(0.8, 1.0);
  xf_commit_round in = {.privacy = &p, .model = f->model, .sites = 1, .agg = f->agg};
  xf_errctx err = {0};
  assert_int_equal(xf_commit_global(&in, f->opt, f->params, N_PARAMS, &f->result, &err),
                   XF_EINTERNAL);
  assert_string_equal(err.msg, "no noise generator");
  assert_null(f->result.model);
  assert_memory_equal(f->params, f->ref, sizeof(f->ref)); /* no step was taken */
}

static void the_commit_gives_the_model_file_and_optimizer_state_to_journal(void **state) {
  fixture *f = *state;
  fold(f->agg, 1, 2, 0.5f);
  xf_privacy_spec none = {0};
  xf_commit_round in = {.privacy = &none, .model = f->model, .sites = 1, .agg = f->agg};
  assert_int_equal(xf_commit_global(&in, f->opt, f->params, N_PARAMS, &f->result, NULL), XF_OK);
  /* fedavg steps the model by the mean; the file decodes to it. */
  for (size_t i = 0; i < N_PARAMS; i++) assert_true(f->params[i] == f->ref[i] + 0.5f);
  assert_int_equal(xf_checkpoint_decode(f->result.model, f->result.model_len, &f->decoded,
                                        &f->decoded_params, NULL),
                   XF_OK);
  assert_int_equal(xf_model_num_params(f->decoded), N_PARAMS);
  assert_memory_equal(f->decoded_params, f->params, sizeof(f->params));
  xf_digest d;
  xf_params_digest(f->params, N_PARAMS, &d);
  assert_memory_equal(&f->result.params_digest, &d, sizeof(d));
  /* The saved state restores an optimizer one step on. */
  assert_non_null(f->result.opt_state);
  assert_int_equal(xf_server_opt_load(f->ref_opt, f->result.opt_state, f->result.opt_len, NULL),
                   XF_OK);
  assert_int_equal(xf_server_opt_steps(f->ref_opt), 1);
}

static void a_commit_short_of_memory_fails_whole_and_gives_nothing(void **state) {
  fixture *f = *state;
  xf_job_strategy st;
  xf_job_strategy_defaults(&st, XF_JOB_STRATEGY_FEDAVG);
  xf_privacy_spec none = {0};
  /* Every allocation of the commit fails in turn, until one commit has all
   * it needs: each short one says so and hands back nothing. */
  for (long n = 0;; n++) {
    assert_true(n < 1000);
    xf_aggregator_free(f->agg);
    f->agg = NULL;
    assert_int_equal(xf_aggregator_create(&st, N_PARAMS, 4, &f->agg, NULL), XF_OK);
    fold(f->agg, 1, 2, 0.5f);
    fold(f->agg, 2, 2, 0.25f);
    float *secure = constant(1.0f);
    xf_commit_round in = {.privacy = &none, .model = f->model, .sites = 3, .agg = f->agg,
                          .secure_mean = secure, .secure_weight = 4};
    xf_alloc_fail_after(n);
    xf_err rc = xf_commit_global(&in, f->opt, f->params, N_PARAMS, &f->result, NULL);
    xf_alloc_fail_reset();
    if (rc == XF_OK) break;
    assert_int_equal(rc, XF_ENOMEM);
    assert_null(f->result.model);
    assert_null(f->result.opt_state);
  }
  assert_non_null(f->result.model);
  assert_int_equal(f->result.weight, 8);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(the_secure_sum_is_merged_with_the_folded_aggregates),
      T(the_secure_sum_alone_is_the_aggregate_when_nothing_was_folded),
      T(an_attempt_that_took_no_update_has_nothing_to_commit),
      T(central_noise_is_calibrated_from_the_specs_sigma_and_the_cohort),
      T(no_central_noise_unless_the_job_asks_the_aggregator_for_it),
      T(a_central_commit_adds_the_calibrated_noise_before_the_optimizer_step),
      T(central_noise_without_a_generator_is_refused),
      T(the_commit_gives_the_model_file_and_optimizer_state_to_journal),
      T(a_commit_short_of_memory_fails_whole_and_gives_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
