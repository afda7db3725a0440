/* SPDX-License-Identifier: Apache-2.0 */
/* What a site reports, checked before it counts: the range of every figure
 * of its Metrics and the weight of its update, against what the site
 * announced and where the job stands. Pure functions, no sockets: the
 * global coordinator and a regional aggregator (coordinator/host.c,
 * coordinator/intake.c) both call them, and refuse, log and audit what they
 * find (docs/coordinator.md, "Checked reports"). */
#ifndef XF_COORDINATOR_REPORT_H
#define XF_COORDINATOR_REPORT_H

#include <stdbool.h>
#include <stdint.h>

/* A site's figures as its Metrics carry them (net/xfed.proto). */
typedef struct xf_report {
  uint32_t round, model_round;
  bool has_train, has_test, has_epsilon;
  double train_loss, test_loss, test_accuracy;
  uint64_t samples, bytes_up, bytes_down;
  double epsilon, noise_multiplier, ledger_epsilon, budget_epsilon;
} xf_report;

/* What a report may hold. */
typedef struct xf_report_bounds {
  /* The training records the site announced for the job's dataset
   * (SiteAnnounce.datasets, or SiteAnnounce.behind behind an aggregator):
   * the most samples a report and the largest weight an update may claim.
   * 0 when it announced no such dataset: then nothing it reports counts. */
  uint64_t train_records;
  /* The newest round this aggregator has opened and the round of the
   * newest model it has offered: a report about a later one is from the
   * future. */
  uint32_t round, model_round;
  /* The job may keep the training loss at the site (record-level privacy
   * measures it on batches that are not noised, so the site sends NaN):
   * NaN is then a training loss a report may carry. */
  bool train_loss_hidden;
  /* The most bytes the site can have sent or received for one task: see
   * xf_report_max_bytes. */
  uint64_t max_bytes;
} xf_report_bounds;

/* The first figure out of range: the Metrics field's name, the value as
 * reported, and the rule it breaks. */
typedef struct xf_report_fault {
  const char *field; /* "test_accuracy", "samples", ... (static) */
  char value[40];    /* "7.5", "nan", "60001" */
  char rule[160];    /* "must be in [0, 1]" */
} xf_report_fault;

/* The most bytes one task may move either way for a model of n_params
 * parameters: 8 bytes a parameter (a float32 model file or update is 4,
 * and no uplink encoding, masking or sealing doubles it) and 1 MiB for
 * headers and sealing tags. */
uint64_t xf_report_max_bytes(uint64_t n_params);

/* True when every figure r holds is in range for b; false with *fault
 * naming the first that is not. Checked: test_accuracy in [0, 1];
 * test_loss finite and >= 0; train_loss finite and >= 0 (or NaN where
 * b->train_loss_hidden); samples 1 .. b->train_records; epsilon,
 * noise_multiplier, ledger_epsilon and budget_epsilon finite and >= 0;
 * bytes_up and bytes_down at most b->max_bytes; round at most b->round and
 * model_round at most b->model_round. Figures the report does not carry
 * (has_train, has_test, has_epsilon false) are not looked at. */
bool xf_report_check(const xf_report *r, const xf_report_bounds *b, xf_report_fault *fault);

/* True when an update's weight (TensorBegin.weight: the training records
 * behind it) is 1 .. records, the training records its sender announced
 * for the job's dataset (for a regional aggregate, the sum over the sites
 * it names); false with *fault ("weight") otherwise. */
bool xf_report_check_weight(uint64_t weight, uint64_t records, xf_report_fault *fault);

#endif
