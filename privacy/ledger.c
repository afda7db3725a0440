/* SPDX-License-Identifier: Apache-2.0 */
/* The per-dataset privacy-budget ledger: append-only charges in SQLite,
 * composed in Renyi DP whenever a spend is asked for (privacy/ledger.h). */
#include "privacy/ledger.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "privacy/accountant.h"

static xf_err bind_text(xf_db *db, sqlite3_stmt *st, int col, const char *s, xf_errctx *err) {
  if (sqlite3_bind_text(st, col, s, -1, SQLITE_TRANSIENT) != SQLITE_OK)
    return xf_db_fail(db, err, "binding a ledger statement");
  return XF_OK;
}

static const char *column_text(sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  return t ? (const char *)t : "";
}

static xf_err check_charge(const xf_privacy_charge *c, xf_errctx *err) {
  if (!(c->sampling_rate > 0 && c->sampling_rate <= 1) ||
      !(isfinite(c->noise_multiplier) && c->noise_multiplier >= 0) || c->steps == 0 ||
      c->steps > (uint64_t)INT64_MAX)
    return xf_fail(err, XF_EINVAL,
                   "a ledger charge needs a sampling rate in (0, 1], a noise multiplier >= 0 "
                   "and at least one step (got %g, %g, %llu)",
                   c->sampling_rate, c->noise_multiplier, (unsigned long long)c->steps);
  return XF_OK;
}

/* Adds the RDP of c at the default orders to total; false when c had no
 * noise (no RDP bound: epsilon is infinite). */
static xf_err add_rdp(double *total, const xf_privacy_charge *c, bool *bounded, xf_errctx *err) {
  if (c->noise_multiplier < XF_DP_SIGMA_MIN) {
    *bounded = false;
    return XF_OK;
  }
  double rdp[XF_DP_DEFAULT_ORDER_COUNT];
  XF_GUARD(xf_dp_rdp_steps(c->sampling_rate, c->noise_multiplier, c->steps,
                           xf_dp_default_orders, XF_DP_DEFAULT_ORDER_COUNT, rdp, err));
  return xf_dp_rdp_compose(total, rdp, XF_DP_DEFAULT_ORDER_COUNT, err);
}

xf_err xf_ledger_epsilon(xf_db *db, const char *dataset, const char *job,
                         const xf_privacy_charge *extra, double delta, double *eps,
                         xf_errctx *err) {
  double total[XF_DP_DEFAULT_ORDER_COUNT] = {0};
  bool bounded = true, any = false;
  if (extra) {
    XF_GUARD(check_charge(extra, err));
    XF_GUARD(add_rdp(total, extra, &bounded, err));
    any = true;
  }
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db,
                   "SELECT sampling_rate, noise_multiplier, steps FROM privacy_ledger "
                   "WHERE dataset = ?1 AND (?2 IS NULL OR job = ?2) ORDER BY id",
                   &st, err));
  xf_err rc = bind_text(db, st, 1, dataset, err);
  if (rc == XF_OK && job) rc = bind_text(db, st, 2, job, err);
  int s = SQLITE_DONE;
  while (rc == XF_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
    xf_privacy_charge c = {.sampling_rate = sqlite3_column_double(st, 0),
                        .noise_multiplier = sqlite3_column_double(st, 1),
                        .steps = (uint64_t)sqlite3_column_int64(st, 2)};
    rc = add_rdp(total, &c, &bounded, err);
    any = true;
  }
  if (rc == XF_OK && s != SQLITE_DONE) rc = xf_db_fail(db, err, "reading the privacy ledger");
  sqlite3_finalize(st);
  if (rc != XF_OK) return rc;
  if (!any) {
    *eps = 0;
    return XF_OK;
  }
  if (!bounded) {
    *eps = INFINITY;
    return XF_OK;
  }
  double order;
  return xf_dp_epsilon(xf_dp_default_orders, total, XF_DP_DEFAULT_ORDER_COUNT, delta,
                       XF_DP_CONVERSION_IMPROVED, eps, &order, err);
}

xf_err xf_ledger_charge(xf_db *db, const char *dataset, const char *job, uint32_t round,
                        uint32_t attempt, const xf_privacy_charge *c, int64_t now,
                        xf_errctx *err) {
  XF_GUARD(check_charge(c, err));
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db,
                   "INSERT OR IGNORE INTO privacy_ledger (dataset, job, round, attempt, "
                   "sampling_rate, noise_multiplier, steps, charged_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   &st, err));
  xf_err rc = bind_text(db, st, 1, dataset, err);
  if (rc == XF_OK) rc = bind_text(db, st, 2, job, err);
  if (rc == XF_OK) {
    sqlite3_bind_int64(st, 3, round);
    sqlite3_bind_int64(st, 4, attempt);
    sqlite3_bind_double(st, 5, c->sampling_rate);
    sqlite3_bind_double(st, 6, c->noise_multiplier);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)c->steps);
    sqlite3_bind_int64(st, 8, now);
    rc = (sqlite3_step(st) == SQLITE_DONE ? XF_OK : xf_db_fail(db, err, "recording the privacy charge"));
  }
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_ledger_jobs(xf_db *db, const char *dataset, double delta, xf_ledger_job **out,
                      size_t *n, xf_errctx *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db,
                   "SELECT job, count(*), sum(steps), min(charged_at), max(charged_at) "
                   "FROM privacy_ledger WHERE dataset = ? GROUP BY job ORDER BY min(id)",
                   &st, err));
  xf_err rc = bind_text(db, st, 1, dataset, err);
  xf_ledger_job *v = NULL;
  size_t cap = 0;
  int s = SQLITE_DONE;
  while (rc == XF_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
    if (*n == cap) {
      size_t ncap = cap ? 2 * cap : 8;
      xf_ledger_job *g = xf_realloc(v, ncap * sizeof(*v));
      if (!g) {
        rc = xf_fail(err, XF_ENOMEM, "cannot list the ledger of '%s'", dataset);
        break;
      }
      v = g;
      cap = ncap;
    }
    xf_ledger_job *j = &v[(*n)++];
    memset(j, 0, sizeof(*j));
    snprintf(j->job, sizeof(j->job), "%s", column_text(st, 0));
    j->rounds = (uint32_t)sqlite3_column_int64(st, 1);
    j->steps = (uint64_t)sqlite3_column_int64(st, 2);
    j->first = sqlite3_column_int64(st, 3);
    j->last = sqlite3_column_int64(st, 4);
  }
  if (rc == XF_OK && s != SQLITE_DONE) rc = xf_db_fail(db, err, "reading the privacy ledger");
  sqlite3_finalize(st);
  for (size_t i = 0; rc == XF_OK && i < *n; i++)
    rc = xf_ledger_epsilon(db, dataset, v[i].job, NULL, delta, &v[i].epsilon, err);
  if (rc != XF_OK) {
    xf_free(v);
    *n = 0;
    return rc;
  }
  *out = v;
  return XF_OK;
}
