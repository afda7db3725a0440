/* SPDX-License-Identifier: Apache-2.0 */
/* The range checks of what sites report (coordinator/report.h): each
 * figure out of its range is refused naming the field, the value and the
 * rule; honest reports pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/report.h"

/* A site with 6000 training records, in round 3 of a job whose newest model
 * is round 2's, for a model of 100000 parameters. */
static const xf_report_bounds bounds = {.train_records = 6000,
                                        .round = 3,
                                        .model_round = 2,
                                        .max_bytes = 8 * 100000 + (1u << 20)};

static xf_report honest_training(void) {
  return (xf_report){.round = 3,
                     .model_round = 2,
                     .has_train = true,
                     .has_test = true,
                     .train_loss = 0.41,
                     .test_loss = 0.52,
                     .test_accuracy = 0.83,
                     .samples = 6000,
                     .bytes_up = 400000,
                     .bytes_down = 400300};
}

static void refused(const xf_report *r, const xf_report_bounds *b, const char *field,
                    const char *value, const char *rule) {
  xf_report_fault f;
  memset(&f, 0, sizeof(f));
  if (xf_report_check(r, b, &f)) fail_msg("a report with %s = %s passed", field, value);
  if (strcmp(f.field, field) != 0 || strcmp(f.value, value) != 0 || !strstr(f.rule, rule))
    fail_msg("expected %s = %s (%s), got %s = %s (%s)", field, value, rule, f.field, f.value,
             f.rule);
}

static void honest_reports_pass(void **state) {
  (void)state;
  xf_report_fault f;
  xf_report r = honest_training();
  assert_true(xf_report_check(&r, &bounds, &f));
  /* An evaluation's report: test figures only, accuracy at the bounds. */
  xf_report e = {.round = 2, .model_round = 2, .has_test = true, .test_loss = 0,
                 .test_accuracy = 1, .samples = 1};
  assert_true(xf_report_check(&e, &bounds, &f));
  e.test_accuracy = 0;
  assert_true(xf_report_check(&e, &bounds, &f));
  /* Figures a report does not carry are not looked at. */
  r.has_train = false;
  r.train_loss = NAN;
  r.epsilon = -1;
  assert_true(xf_report_check(&r, &bounds, &f));
  /* Under record-level privacy the training loss stays at the site. */
  xf_report_bounds hidden = bounds;
  hidden.train_loss_hidden = true;
  r = honest_training();
  r.train_loss = NAN;
  assert_true(xf_report_check(&r, &hidden, &f));
  r.has_epsilon = true;
  r.epsilon = 1.5;
  r.noise_multiplier = 1.1;
  r.ledger_epsilon = 2.5;
  r.budget_epsilon = 0; /* no cap */
  assert_true(xf_report_check(&r, &hidden, &f));
}

static void accuracy_outside_zero_to_one_is_refused(void **state) {
  (void)state;
  xf_report r = honest_training();
  r.test_accuracy = 7.5;
  refused(&r, &bounds, "test_accuracy", "7.5", "must be in [0, 1]");
  r.test_accuracy = NAN;
  refused(&r, &bounds, "test_accuracy", "nan", "[0, 1]");
  r.test_accuracy = -0.01;
  refused(&r, &bounds, "test_accuracy", "-0.01", "[0, 1]");
  r.test_accuracy = INFINITY;
  refused(&r, &bounds, "test_accuracy", "inf", "[0, 1]");
}

static void losses_must_be_finite_and_not_negative(void **state) {
  (void)state;
  xf_report r = honest_training();
  r.test_loss = NAN;
  refused(&r, &bounds, "test_loss", "nan", "finite and >= 0");
  r = honest_training();
  r.test_loss = -1;
  refused(&r, &bounds, "test_loss", "-1", "finite and >= 0");
  r = honest_training();
  r.train_loss = INFINITY;
  refused(&r, &bounds, "train_loss", "inf", "finite and >= 0");
  /* NaN is a training loss only where the job keeps it at the site. */
  r.train_loss = NAN;
  refused(&r, &bounds, "train_loss", "nan", "finite and >= 0");
  xf_report_bounds hidden = bounds;
  hidden.train_loss_hidden = true;
  r.train_loss = -INFINITY;
  refused(&r, &hidden, "train_loss", "-inf", "or NaN");
}

static void samples_beyond_the_announced_dataset_are_refused(void **state) {
  (void)state;
  xf_report r = honest_training();
  r.samples = 6001;
  refused(&r, &bounds, "samples", "6001", "1 to 6000, the training records the site announced");
  r.samples = 0;
  refused(&r, &bounds, "samples", "0", "1 to 6000");
  r.samples = UINT64_MAX;
  refused(&r, &bounds, "samples", "18446744073709551615", "1 to 6000");
  /* A site that announced no dataset of the job backs no figure. */
  xf_report_bounds none = bounds;
  none.train_records = 0;
  r.samples = 1;
  refused(&r, &none, "samples", "1", "announced none");
}

static void epsilon_bytes_and_rounds_are_checked(void **state) {
  (void)state;
  xf_report r = honest_training();
  r.has_epsilon = true;
  r.epsilon = NAN;
  refused(&r, &bounds, "epsilon", "nan", "finite and >= 0");
  r.epsilon = -0.5;
  refused(&r, &bounds, "epsilon", "-0.5", ">= 0");
  r.epsilon = 1;
  r.noise_multiplier = INFINITY;
  refused(&r, &bounds, "noise_multiplier", "inf", ">= 0");
  r.noise_multiplier = 1;
  r.ledger_epsilon = -2;
  refused(&r, &bounds, "ledger_epsilon", "-2", ">= 0");
  r.ledger_epsilon = 2;
  r.budget_epsilon = NAN;
  refused(&r, &bounds, "budget_epsilon", "nan", "finite and >= 0");
  r = honest_training();
  r.bytes_up = bounds.max_bytes + 1;
  refused(&r, &bounds, "bytes_up", "1848577", "at most 1848576 bytes");
  r = honest_training();
  r.bytes_down = UINT64_MAX;
  refused(&r, &bounds, "bytes_down", "18446744073709551615", "at most");
  r = honest_training();
  r.round = 4;
  refused(&r, &bounds, "round", "4", "at most 3");
  r = honest_training();
  r.model_round = 3;
  refused(&r, &bounds, "model_round", "3", "at most 2: no later model");
  assert_true(xf_report_max_bytes(100000) == 1848576);
  assert_true(xf_report_max_bytes(UINT64_MAX / 4) == UINT64_MAX);
}

static void update_weight_is_bounded_by_the_announced_records(void **state) {
  (void)state;
  xf_report_fault f;
  assert_true(xf_report_check_weight(1, 6000, &f));
  assert_true(xf_report_check_weight(6000, 6000, &f));
  assert_false(xf_report_check_weight(6001, 6000, &f));
  assert_string_equal(f.field, "weight");
  assert_string_equal(f.value, "6001");
  assert_non_null(strstr(f.rule, "1 to 6000"));
  assert_false(xf_report_check_weight(0, 6000, &f));
  assert_false(xf_report_check_weight(5, 0, &f));
  assert_non_null(strstr(f.rule, "announced none"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(honest_reports_pass),
      cmocka_unit_test(accuracy_outside_zero_to_one_is_refused),
      cmocka_unit_test(losses_must_be_finite_and_not_negative),
      cmocka_unit_test(samples_beyond_the_announced_dataset_are_refused),
      cmocka_unit_test(epsilon_bytes_and_rounds_are_checked),
      cmocka_unit_test(update_weight_is_bounded_by_the_announced_records),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
