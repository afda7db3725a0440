/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's side of checked reports (coordinator/report.h), for the
 * global coordinator and a regional aggregator alike: the bounds a run
 * holds a site's report and update weight to, and what a refusal does —
 * an Error to the sender, a report_refused line, a refused_report row in
 * this process's audit trail, and the site's part in the attempt dropped
 * (docs/coordinator.md, "Checked reports"). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "coordinator/report.h"

/* ---- what a site announced --------------------------------------------------------------------- */

/* A dataset the job's data names: its name and every tag. */
static bool dataset_fits(const xf__dataset *d, const xf_job_data *data) {
  if (strcmp(d->name, data->dataset) != 0) return false;
  for (uint32_t i = 0; i < data->n_tags; i++) {
    bool has = false;
    for (uint32_t j = 0; j < d->n_tags && !has; j++) has = strcmp(d->tags[j], data->tags[i]) == 0;
    if (!has) return false;
  }
  return true;
}

static uint64_t records_in(const xf__dataset *ds, size_t n, const xf_job_data *data) {
  for (size_t i = 0; i < n; i++)
    if (dataset_fits(&ds[i], data)) return ds[i].train_records;
  return 0;
}

uint64_t xf__announced_records(const xf__run *run, const xf__site *s, uint64_t site) {
  if (!s->regional || site == s->id) return records_in(s->datasets, s->n_datasets, &xf__run_spec(run)->data);
  for (size_t i = 0; i < s->n_behind; i++)
    if (s->behind[i].id == site)
      return records_in(s->behind[i].datasets, s->behind[i].n_datasets, &xf__run_spec(run)->data);
  return 0;
}

/* ---- refusals ---------------------------------------------------------------------------------- */

/* The newest round this run has opened (a relay: the one it relays). */
static uint32_t round_now(const xf__run *run) {
  uint32_t r = xf__run_round(run);
  uint32_t m = xf__run_model_round(run);
  return r > m ? r : m;
}

static bool current_attempt(const xf__run *run, uint32_t round, uint32_t attempt) {
  uint32_t r = xf__run_round(run);
  uint32_t at = xf__run_attempt(run);
  return round == r && attempt == at;
}

/* Logs, audits and answers a refusal of what s sent about `about`. */
static void refuse(xf__run *run, xf__site *s, const char *about, const char *what, uint32_t round,
                   uint32_t attempt, const xf_report_fault *f, const char *consequence) {
  XF_WARN("report_refused",
          "job=%s round=%u attempt=%u site=%s via=%s report=%s field=%s value=%s "
          "reason=\"%s %s\" consequence=\"%s\"",
          xf__run_id(run), (unsigned)round, (unsigned)attempt, about,
          strcmp(about, s->name) != 0 ? s->name : "-", what, f->field, f->value, f->field,
          f->rule, consequence);
  xf__audit(xf__run_coord(run), "refused_report", xf__run_id(run),
            json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "job", xf__run_id(run), "round",
                      (json_int_t)round, "attempt", (json_int_t)attempt, "site", about, "via",
                      strcmp(about, s->name) != 0 ? s->name : "", "report", what, "field",
                      f->field, "value", f->value, "rule", f->rule, "consequence", consequence));
  if (s->peer && xf__peer_conn(s->peer))
    xf_session_send_error(xf__peer_conn(s->peer), XF_ERANGE,
                          "job %s round %u: the %s of site %s is refused: %s is %s but %s; %s",
                          xf__run_id(run), (unsigned)round, what, about, f->field, f->value, f->rule,
                          consequence);
}

bool xf__check_metrics(xf__run *run, xf__site *s, const Xfed__Metrics *m, uint64_t site) {
  const char *about = m->site ? m->site : "";
  const xf_privacy_spec *pv = &xf__run_spec(run)->privacy;
  xf_report r = {.round = m->round,
                 .model_round = m->model_round,
                 .has_train = m->has_train,
                 .has_test = m->has_test,
                 .has_epsilon = m->has_epsilon,
                 .train_loss = m->train_loss,
                 .test_loss = m->test_loss,
                 .test_accuracy = m->test_accuracy,
                 .samples = m->samples,
                 .bytes_up = m->bytes_up,
                 .bytes_down = m->bytes_down,
                 .epsilon = m->epsilon,
                 .noise_multiplier = m->noise_multiplier,
                 .ledger_epsilon = m->ledger_epsilon,
                 .budget_epsilon = m->budget_epsilon};
  xf_report_bounds b = {.train_records = xf__announced_records(run, s, site),
                        .round = round_now(run),
                        .model_round = xf__run_model_round(run),
                        .train_loss_hidden = pv->unit == XF_PRIVACY_UNIT_RECORD,
                        .max_bytes = xf_report_max_bytes(xf__run_n_params(run))};
  xf_report_fault f;
  if (xf_report_check(&r, &b, &f)) return true;
  double now = xf__now();
  xf_errctx err = {0};
  if (m->has_train) {
    /* Its update for this attempt is not taken either: the figures and the
     * update are one report. A site behind a regional aggregator is left
     * out by its aggregator, which checks first; here its share of the
     * region's mean cannot be taken out again. */
    bool drops = !s->regional && current_attempt(run, m->round, m->attempt);
    refuse(run, s, about, "training report", m->round, m->attempt, &f,
           drops ? "its figures do not count and its update for this attempt is not taken"
                 : "its figures do not count");
    if (drops) {
      xf__take_drop(run, s->id);
      char why[300];
      snprintf(why, sizeof(why), "its report was refused: %s %s %s", f.field, f.value, f.rule);
      if (xf_jobm_dropped(xf__run_machine(run), s->id, why, now, &err) != XF_OK)
        XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
      xf__run_actions(run);
    }
    return false;
  }
  /* An evaluation's report: it has answered, without figures, so that the
   * evaluation does not wait for it. */
  refuse(run, s, about, "evaluation report", m->round, m->attempt, &f,
         "its figures do not count");
  if (!s->regional && xf_jobm_evaluated(xf__run_machine(run), s->id, now, &err) == XF_OK) xf__run_actions(run);
  return false;
}

bool xf__check_weight(xf__run *run, xf__site *s, const Xfed__TensorBegin *m,
                      const uint64_t *sites, size_t n) {
  uint64_t records = 0;
  if (!s->regional) {
    records = xf__announced_records(run, s, s->id);
  } else {
    for (size_t i = 0; i < n; i++) records += xf__announced_records(run, s, sites[i]);
  }
  xf_report_fault f;
  if (xf_report_check_weight(m->weight, records, &f)) return true;
  refuse(run, s, s->name, s->regional ? "aggregate" : "update", m->round, m->attempt, &f,
         "the stream is not taken");
  return false;
}
