/* SPDX-License-Identifier: Apache-2.0 */
/* What the job spec's parser (jobspec.c) shares with its validator
 * (jobspec_validate.c) and its canonical writer (jobspec_json.c): the name
 * tables and the helpers that word errors and numbers. Not for other
 * modules: they use job/jobspec.h. */
#ifndef XF_JOB_JOBSPEC_INTERNAL_H
#define XF_JOB_JOBSPEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "base/result.h"
#include "job/jobspec.h"

#define XF__COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define XF__KIND(k) (1u << (k))

/* prox_mu when the strategy is fedprox and the spec leaves it out, from the
 * grid {0.001, 0.01, 0.1, 1} that Li et al. 2020 searched. */
#define XF__FEDPROX_DEFAULT_MU 0.01

/* ---- jobspec.c: the names, one per enum value (index = value) ------------- */

enum {
  XF__ARCH_NAMES = XF_JOB_ARCH_LAYERS + 1,
  XF__PRESET_NAMES = XF_JOB_PRESET_FEDAVG_CNN + 1,
  XF__OPTIMIZER_NAMES = XF_JOB_OPTIMIZER_ADAMW + 1,
  XF__LR_SCHEDULE_NAMES = XF_JOB_LR_COSINE + 1,
  XF__LOSS_NAMES = XF_LOSS_MSE + 1,
  XF__STRATEGY_NAMES = XF_JOB_STRATEGY_TRIMMED_MEAN + 1,
  XF__UNIT_NAMES = XF_PRIVACY_UNIT_RECORD + 1,
  XF__MODE_NAMES = XF_PRIVACY_LOCAL + 1,
  XF__DOWNLINK_NAMES = XF_JOB_DOWNLINK_BF16 + 1,
  XF__TOPOLOGY_NAMES = XF_JOB_TOPOLOGY_REGIONAL + 1,
};
extern const char *const xf__arch_names[XF__ARCH_NAMES];
extern const char *const xf__preset_names[XF__PRESET_NAMES];
extern const char *const xf__optimizer_names[XF__OPTIMIZER_NAMES];
extern const char *const xf__lr_schedule_names[XF__LR_SCHEDULE_NAMES];
extern const char *const xf__loss_names[XF__LOSS_NAMES];
extern const char *const xf__strategy_names[XF__STRATEGY_NAMES];
extern const char *const xf__unit_names[XF__UNIT_NAMES];
extern const char *const xf__mode_names[XF__MODE_NAMES];
extern const char *const xf__downlink_names[XF__DOWNLINK_NAMES];
extern const char *const xf__topology_names[XF__TOPOLOGY_NAMES];

/* Which strategies (a mask of XF__KIND(kind)) use each hyperparameter
 * beyond server_lr, and where it lives in xf_job_strategy. */
typedef struct xf__strategy_param {
  const char *key;
  size_t offset;
  unsigned kinds;
} xf__strategy_param;
enum { XF__STRATEGY_PARAMS = 5 };
extern const xf__strategy_param xf__strategy_params[XF__STRATEGY_PARAMS];

/* ---- jobspec.c: errors and numbers ---------------------------------------- */

/* Records field and message in err (may be NULL); returns code. */
xf_err xf__fail_at(xf_errctx *err, xf_err code, const char *field, const char *fmt, ...)
    XF_PRINTF(4, 5);
/* A required field left out: XF_EFORMAT, "required; WHAT". */
xf_err xf__missing(const char *field, const char *what, xf_errctx *err);
/* v must lie in [lo, hi]; XF_ERANGE naming field otherwise. */
xf_err xf__range_int(const char *field, long long v, long long lo, long long hi, xf_errctx *err);
/* s, NUL-terminated within cap bytes, must be an identifier (XF_JOB_IDENT_MAX). */
xf_err xf__check_ident(const char *field, const char *s, size_t cap, xf_errctx *err);
/* Shortest "%.*g" text that reads back as v; with as_real a whole value gets ".0". */
void xf__format_real(double v, bool as_real, char *buf, size_t n);
/* Shortest text a reader rounding to float turns back into v, always with a "." or exponent. */
void xf__format_float(float v, char *buf, size_t n);
/* xf__format_real for messages: buf holds at least 32 bytes; returns buf. */
const char *xf__num(double v, char *buf);
/* Whether the NULL-terminated keys hold key. */
bool xf__has_key(const char *const *keys, const char *key);

/* ---- jobspec.c: declared layers ------------------------------------------- */

/* The fields a declared layer kind takes, "kind" first, NULL-terminated. */
const char *const *xf__layer_fields(xf_layer_decl_kind k);
/* "a" or "an" before a kind's name. */
const char *xf__article(const char *name);
/* The kind's name, "unknown" for a value that is not one. */
const char *xf__layer_kind_name(xf_layer_decl_kind k);
/* An add layer's "from" (field) at layer i must name an earlier layer. */
xf_err xf__check_from(const char *field, long long from, size_t i, xf_errctx *err);
/* A dropout rate must lie in [0, 1), and below 1 as a float32. */
xf_err xf__check_rate(const char *field, double rate, xf_errctx *err);

#endif
