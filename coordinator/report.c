/* SPDX-License-Identifier: Apache-2.0 */
/* Range checks of what sites report (coordinator/report.h). */
#include "coordinator/report.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

uint64_t xf_report_max_bytes(uint64_t n_params) {
  const uint64_t slack = 1u << 20;
  return n_params > (UINT64_MAX - slack) / 8 ? UINT64_MAX : 8 * n_params + slack;
}

static bool fail_real(xf_report_fault *f, const char *field, double v, const char *rule) {
  f->field = field;
  /* The shortest of 15 or 17 digits that reads back as v: "7.5", "nan". */
  snprintf(f->value, sizeof(f->value), "%.15g", v);
  if (isfinite(v) && strtod(f->value, NULL) != v) snprintf(f->value, sizeof(f->value), "%.17g", v);
  snprintf(f->rule, sizeof(f->rule), "%s", rule);
  return false;
}

static bool fail_count(xf_report_fault *f, const char *field, uint64_t v, const char *rule) {
  f->field = field;
  snprintf(f->value, sizeof(f->value), "%" PRIu64, v);
  snprintf(f->rule, sizeof(f->rule), "%s", rule);
  return false;
}

/* Finite and >= 0: a loss, an epsilon, a noise multiplier. NaN fails. */
static bool nonneg(double v) { return isfinite(v) && v >= 0; }

bool xf_report_check(const xf_report *r, const xf_report_bounds *b, xf_report_fault *f) {
  char rule[160];
  if (r->has_test) {
    if (!(r->test_accuracy >= 0 && r->test_accuracy <= 1))
      return fail_real(f, "test_accuracy", r->test_accuracy, "must be in [0, 1]");
    if (!nonneg(r->test_loss))
      return fail_real(f, "test_loss", r->test_loss, "must be finite and >= 0");
  }
  if (r->has_train && !nonneg(r->train_loss) && !(isnan(r->train_loss) && b->train_loss_hidden))
    return fail_real(f, "train_loss", r->train_loss,
                     b->train_loss_hidden ? "must be finite and >= 0, or NaN (kept at the site)"
                                          : "must be finite and >= 0");
  if (r->has_train || r->has_test) {
    if (b->train_records == 0)
      return fail_count(f, "samples", r->samples,
                        "must be backed by a dataset of the job the site announced, and it "
                        "announced none");
    if (r->samples == 0 || r->samples > b->train_records) {
      snprintf(rule, sizeof(rule),
               "must be 1 to %" PRIu64 ", the training records the site announced for the "
               "job's dataset",
               b->train_records);
      return fail_count(f, "samples", r->samples, rule);
    }
  }
  if (r->has_epsilon) {
    if (!nonneg(r->epsilon)) return fail_real(f, "epsilon", r->epsilon, "must be finite and >= 0");
    if (!nonneg(r->noise_multiplier))
      return fail_real(f, "noise_multiplier", r->noise_multiplier, "must be finite and >= 0");
    if (!nonneg(r->ledger_epsilon))
      return fail_real(f, "ledger_epsilon", r->ledger_epsilon, "must be finite and >= 0");
    if (!nonneg(r->budget_epsilon))
      return fail_real(f, "budget_epsilon", r->budget_epsilon, "must be finite and >= 0");
  }
  snprintf(rule, sizeof(rule), "must be at most %" PRIu64 " bytes for this job's model",
           b->max_bytes);
  if (r->bytes_up > b->max_bytes) return fail_count(f, "bytes_up", r->bytes_up, rule);
  if (r->bytes_down > b->max_bytes) return fail_count(f, "bytes_down", r->bytes_down, rule);
  if (r->round > b->round) {
    snprintf(rule, sizeof(rule), "must be at most %u: no later round has been opened",
             (unsigned)b->round);
    return fail_count(f, "round", r->round, rule);
  }
  if (r->model_round > b->model_round) {
    snprintf(rule, sizeof(rule), "must be at most %u: no later model has been offered",
             (unsigned)b->model_round);
    return fail_count(f, "model_round", r->model_round, rule);
  }
  return true;
}

bool xf_report_check_weight(uint64_t weight, uint64_t records, xf_report_fault *f) {
  if (weight >= 1 && weight <= records) return true;
  char rule[160];
  if (records == 0)
    snprintf(rule, sizeof(rule),
             "must be backed by a dataset of the job its sender announced, and it announced "
             "none");
  else
    snprintf(rule, sizeof(rule),
             "must be 1 to %" PRIu64 ", the training records announced for the job's dataset",
             records);
  return fail_count(f, "weight", weight, rule);
}
