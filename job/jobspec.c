/* SPDX-License-Identifier: Apache-2.0 */
/* Job spec parsing (jansson): the names, the defaults, the reading of each
 * section and the uplink grammar; the validator is jobspec_validate.c and the
 * canonical writer jobspec_json.c. */
#include "job/jobspec.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "job/jobmodel.h"
#include "job/jobspec_internal.h"

/* ---- names ---------------------------------------------------------------- */

const char *const xf__arch_names[XF__ARCH_NAMES] = {
    [XF_JOB_ARCH_LOGREG] = "logreg", [XF_JOB_ARCH_MLP] = "mlp", [XF_JOB_ARCH_CNN] = "cnn",
    [XF_JOB_ARCH_LAYERS] = "layers"};
const char *const xf__preset_names[XF__PRESET_NAMES] = {[XF_JOB_PRESET_NONE] = "none",
                                               [XF_JOB_PRESET_LENET5] = "lenet5",
                                               [XF_JOB_PRESET_FEDAVG_CNN] = "fedavg-cnn"};
const char *const xf__optimizer_names[XF__OPTIMIZER_NAMES] = {[XF_JOB_OPTIMIZER_SGD] = "sgd",
                                                  [XF_JOB_OPTIMIZER_ADAM] = "adam",
                                                  [XF_JOB_OPTIMIZER_ADAMW] = "adamw"};
const char *const xf__lr_schedule_names[XF__LR_SCHEDULE_NAMES] = {[XF_JOB_LR_CONSTANT] = "constant",
                                                    [XF_JOB_LR_STEP] = "step",
                                                    [XF_JOB_LR_COSINE] = "cosine"};
const char *const xf__loss_names[XF__LOSS_NAMES] = {[XF_LOSS_CROSS_ENTROPY] = "cross_entropy",
                                             [XF_LOSS_BCE] = "binary_cross_entropy",
                                             [XF_LOSS_MSE] = "mse"};
const char *const xf__strategy_names[XF__STRATEGY_NAMES] = {
    [XF_JOB_STRATEGY_FEDAVG] = "fedavg",
    [XF_JOB_STRATEGY_FEDAVGM] = "fedavgm",
    [XF_JOB_STRATEGY_FEDPROX] = "fedprox",
    [XF_JOB_STRATEGY_FEDADAM] = "fedadam",
    [XF_JOB_STRATEGY_FEDYOGI] = "fedyogi",
    [XF_JOB_STRATEGY_FEDADAGRAD] = "fedadagrad",
    [XF_JOB_STRATEGY_MEDIAN] = "median",
    [XF_JOB_STRATEGY_TRIMMED_MEAN] = "trimmed_mean"};
const char *const xf__unit_names[XF__UNIT_NAMES] = {[XF_PRIVACY_UNIT_SITE] = "site",
                                             [XF_PRIVACY_UNIT_RECORD] = "record"};
const char *const xf__mode_names[XF__MODE_NAMES] = {
    [XF_PRIVACY_NONE] = "none", [XF_PRIVACY_CENTRAL] = "central",
    [XF_PRIVACY_DISTRIBUTED] = "distributed", [XF_PRIVACY_LOCAL] = "local"};
const char *const xf__downlink_names[XF__DOWNLINK_NAMES] = {[XF_JOB_DOWNLINK_NONE] = "none",
                                                 [XF_JOB_DOWNLINK_FP16] = "fp16",
                                                 [XF_JOB_DOWNLINK_BF16] = "bf16"};

const char *const xf__topology_names[XF__TOPOLOGY_NAMES] = {[XF_JOB_TOPOLOGY_FLAT] = "flat",
                                                 [XF_JOB_TOPOLOGY_REGIONAL] = "regional"};

static const char *xf__name_of(const char *const *names, size_t n, int v) {
  if (v < 0 || (size_t)v >= n) return "unknown";
  return names[v];
}

/* Index of s in names[first..n), or -1. */
static int xf__index_of(const char *const *names, size_t first, size_t n, const char *s) {
  if (!s) return -1;
  for (size_t i = first; i < n; i++)
    if (strcmp(names[i], s) == 0) return (int)i;
  return -1;
}

#define XF__NAME_FUNCS(type, prefix, table)                                    \
  const char *prefix##_name(type v) { return xf__name_of(table, XF__COUNT(table), (int)v); } \
  xf_err prefix##_from_name(const char *s, type *out) {                        \
    int i = xf__index_of(table, 0, XF__COUNT(table), s);                       \
    if (i < 0) return XF_EFORMAT;                                              \
    *out = (type)i;                                                            \
    return XF_OK;                                                              \
  }

XF__NAME_FUNCS(xf_job_arch, xf_job_arch, xf__arch_names)
XF__NAME_FUNCS(xf_job_preset, xf_job_preset, xf__preset_names)
XF__NAME_FUNCS(xf_job_optimizer, xf_job_optimizer, xf__optimizer_names)
XF__NAME_FUNCS(xf_job_lr_schedule_kind, xf_job_lr_schedule_kind, xf__lr_schedule_names)
XF__NAME_FUNCS(xf_job_strategy_kind, xf_job_strategy_kind, xf__strategy_names)
XF__NAME_FUNCS(xf_privacy_unit, xf_job_privacy_unit, xf__unit_names)
XF__NAME_FUNCS(xf_privacy_mode, xf_job_privacy_mode, xf__mode_names)
XF__NAME_FUNCS(xf_job_downlink, xf_job_downlink, xf__downlink_names)
XF__NAME_FUNCS(xf_job_topology, xf_job_topology, xf__topology_names)

bool xf_job_strategy_is_robust(xf_job_strategy_kind v) {
  return v == XF_JOB_STRATEGY_MEDIAN || v == XF_JOB_STRATEGY_TRIMMED_MEAN;
}

/* ---- defaults ------------------------------------------------------------- */

void xf_job_strategy_defaults(xf_job_strategy *strategy, xf_job_strategy_kind kind) {
  bool adaptive = kind == XF_JOB_STRATEGY_FEDADAM || kind == XF_JOB_STRATEGY_FEDYOGI ||
                  kind == XF_JOB_STRATEGY_FEDADAGRAD;
  strategy->kind = kind;
  /* Adaptive server optimizers take steps of about server_lr per coordinate
   * whatever the update's scale, so they need a far smaller rate than the
   * averaging strategies, whose rate 1.0 applies the mean update as is. */
  strategy->server_lr = adaptive ? 0.01 : 1.0;
  strategy->server_momentum = 0.9;
  strategy->beta1 = 0.9;
  strategy->beta2 = 0.99;
  strategy->tau = 1e-3;
  strategy->trim_fraction = 0.1;
}

void xf_jobspec_defaults(xf_jobspec *spec) {
  memset(spec, 0, sizeof(*spec));
  spec->model.arch = XF_JOB_ARCH_LOGREG;
  spec->model.preset = XF_JOB_PRESET_NONE;
  spec->sites_per_round = 1.0;
  spec->over_selection = 1.0;
  spec->min_sites = 2;
  spec->round_deadline_s = 600.0;
  spec->local.epochs = 1;
  spec->local.batch_size = 32;
  spec->local.optimizer = XF_JOB_OPTIMIZER_SGD;
  spec->local.lr = 0.01;
  spec->local.beta1 = 0.9;
  spec->local.beta2 = 0.999;
  spec->local.eps = 1e-8;
  spec->local.lr_schedule.kind = XF_JOB_LR_CONSTANT;
  spec->local.lr_schedule.every = 1;
  spec->local.lr_schedule.gamma = 0.1;
  xf_job_strategy_defaults(&spec->strategy, XF_JOB_STRATEGY_FEDAVG);
  spec->privacy.unit = XF_PRIVACY_UNIT_SITE;
  spec->privacy.mode = XF_PRIVACY_NONE;
  spec->privacy.delta = 1e-5;
  spec->secure_aggregation.bits = 20;
  spec->secure_aggregation.threshold = 0.66;
  spec->compression.downlink = XF_JOB_DOWNLINK_NONE;
}

/* ---- errors --------------------------------------------------------------- */

/* Records field and message; returns code. */
xf_err xf__fail_at(xf_errctx *err, xf_err code, const char *field, const char *fmt, ...) {
  xf_errctx_field(err, "%s", field);
  va_list ap;
  va_start(ap, fmt);
  xf_vfail(err, code, fmt, ap);
  va_end(ap);
  return code;
}

/* Copies untrusted text (a key, a value, jansson's message) into buf for an
 * error message: at most n - 4 bytes, anything but printable ASCII shown as
 * '?', "..." when cut. */
static const char *xf__printable(const char *s, char *buf, size_t n) {
  size_t len = strlen(s), keep = len < n - 4 ? len : n - 4, i;
  for (i = 0; i < keep; i++) {
    unsigned char c = (unsigned char)s[i];
    buf[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  if (keep < len) {
    memcpy(buf + i, "...", 3);
    i += 3;
  }
  buf[i] = '\0';
  return buf;
}

/* "section.key", or "key" at the top level. */
static void xf__path(char *dst, size_t n, const char *section, const char *key) {
  if (section[0])
    snprintf(dst, n, "%s.%s", section, key);
  else
    snprintf(dst, n, "%s", key);
}

/* Shortest "%.*g" text that reads back as v (at most 17 digits suffice for
 * any double), in fixed notation for whole parts of up to 17 digits (600, not
 * 6e+02). With as_real, a result that would read as an integer gets ".0", so
 * that the JSON says "a number" where the field is one. */
void xf__format_real(double v, bool as_real, char *buf, size_t n) {
  if (!isfinite(v)) { /* only a spec built in code gets here */
    snprintf(buf, n, "%s", as_real ? "null" : isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    return;
  }
  int p = 1;
  for (; p < 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) break;
  }
  int whole_digits = 1;
  for (double x = fabs(v); x >= 10 && whole_digits < 18; x /= 10) whole_digits++;
  if (whole_digits > p && whole_digits <= 17) p = whole_digits;
  snprintf(buf, n, "%.*g", p, v);
  if (as_real && !strpbrk(buf, ".eE")) {
    size_t len = strlen(buf);
    if (len + 2 < n) memcpy(buf + len, ".0", 3);
  }
}

/* Shortest "%.*g" text that a reader taking it as a double and rounding to
 * float (as the parser does) turns back into v; at most 9 digits suffice for
 * any float. A whole value gets ".0", so the JSON says "a number". */
void xf__format_float(float v, char *buf, size_t n) {
  if (!isfinite(v)) { /* only a spec built in code gets here */
    snprintf(buf, n, "null");
    return;
  }
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, n, "%.*g", p, (double)v);
    if ((float)strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".eE")) {
    size_t len = strlen(buf);
    if (len + 2 < n) memcpy(buf + len, ".0", 3);
  }
}

/* xf__format_real for messages: buf holds at least 32 bytes. */
const char *xf__num(double v, char *buf) {
  xf__format_real(v, false, buf, 32);
  return buf;
}

/* ---- suggestions ---------------------------------------------------------- */

#define XF__SUGGEST_MAX_LEN 48

/* Optimal string alignment distance (edits, with adjacent transpositions),
 * case-insensitive; a large number when either string is too long to
 * compare. */
static size_t xf__distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > XF__SUGGEST_MAX_LEN || lb > XF__SUGGEST_MAX_LEN) return (size_t)-1;
  size_t d[XF__SUGGEST_MAX_LEN + 1][XF__SUGGEST_MAX_LEN + 1];
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++) {
    for (size_t j = 1; j <= lb; j++) {
      int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
      size_t best = d[i - 1][j - 1] + (ca != cb);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[la][lb];
}

/* How far a typo may be from a candidate and still be suggested: one edit
 * for short names, up to three for long ones. */
static size_t xf__distance_limit(const char *candidate) {
  size_t limit = 1 + strlen(candidate) / 4;
  return limit > 3 ? 3 : limit;
}

/* Other spellings researchers bring from other frameworks, mapped to ours.
 * A typo of an alias is suggested as the field it stands for. */
static const struct {
  const char *alias, *key;
} xf__aliases[] = {
    {"learning_rate", "lr"}, {"local_lr", "lr"}, {"client_lr", "lr"}, {"optimiser", "optimizer"},
    {"batch", "batch_size"}, {"local_epochs", "epochs"}, {"mu", "prox_mu"},
    {"proximal_mu", "prox_mu"}, {"num_rounds", "rounds"}, {"fraction_fit", "sites_per_round"},
    {"clients_per_round", "sites_per_round"}, {"min_clients", "min_sites"},
    {"min_fit_clients", "min_sites"}, {"deadline", "round_deadline_s"},
    {"round_timeout", "round_deadline_s"}, {"architecture", "arch"}, {"hidden_sizes", "hidden"},
    {"hidden_layers", "hidden"}, {"server_learning_rate", "server_lr"},
    {"eta", "server_lr"}, {"momentum", "server_momentum"}, {"beta_1", "beta1"}, {"beta_2", "beta2"},
    {"epsilon", "target_epsilon"}, {"eps", "target_epsilon"}, {"sigma", "noise_multiplier"},
    {"noise", "noise_multiplier"}, {"clip_norm", "clip"}, {"max_grad_norm", "clip"},
    {"l2_norm_clip", "clip"}, {"secagg", "secure_aggregation"},
    {"secure_agg", "secure_aggregation"}, {"random_seed", "seed"}, {"job_name", "name"},
    {"over_select", "over_selection"},
};

static const char *const xf__top_keys[] = {
    "name", "model", "data", "rounds", "sites_per_round", "over_selection", "min_sites",
    "round_deadline_s", "topology", "local", "strategy", "privacy", "secure_aggregation", "compression",
    "seed", NULL};
static const char *const xf__model_keys[] = {"arch", "hidden", "preset", "loss", "layers", NULL};
static const char *const xf__data_keys[] = {"dataset", "tags", NULL};
static const char *const xf__local_keys[] = {
    "epochs", "batch_size", "optimizer", "lr",   "momentum",  "nesterov",    "beta1",
    "beta2",  "eps",        "weight_decay", "prox_mu", "clip_norm", "lr_schedule", NULL};
static const char *const xf__lr_schedule_keys[] = {"kind", "every", "gamma", "min_lr", NULL};
static const char *const xf__strategy_keys[] = {"name", "server_lr", "server_momentum", "beta1",
                                                "beta2", "tau", "trim_fraction", NULL};
static const char *const xf__privacy_keys[] = {"unit", "mode", "clip", "target_epsilon",
                                               "noise_multiplier", "delta", NULL};
static const char *const xf__secagg_keys[] = {"enabled", "bits", "threshold", NULL};
static const char *const xf__compression_keys[] = {"uplink", "downlink", NULL};

static const struct {
  const char *name; /* "" for the top level */
  const char *const *keys;
} xf__sections[] = {
    {"", xf__top_keys},
    {"model", xf__model_keys},
    {"data", xf__data_keys},
    {"local", xf__local_keys},
    {"local.lr_schedule", xf__lr_schedule_keys},
    {"strategy", xf__strategy_keys},
    {"privacy", xf__privacy_keys},
    {"secure_aggregation", xf__secagg_keys},
    {"compression", xf__compression_keys},
};

static const char *const *xf__keys_of(const char *section) {
  for (size_t i = 0; i < XF__COUNT(xf__sections); i++)
    if (strcmp(xf__sections[i].name, section) == 0) return xf__sections[i].keys;
  return NULL;
}

bool xf__has_key(const char *const *keys, const char *key) {
  for (size_t i = 0; keys[i]; i++)
    if (strcmp(keys[i], key) == 0) return true;
  return false;
}

/* The key of `keys` closest to `typo`, directly or through an alias, within
 * the typo limit; NULL when none is close. */
static const char *xf__closest_key(const char *const *keys, const char *typo) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (size_t i = 0; keys[i]; i++) {
    size_t d = xf__distance(typo, keys[i]);
    if (d <= xf__distance_limit(keys[i]) && d < best_d) {
      best = keys[i];
      best_d = d;
    }
  }
  for (size_t i = 0; i < XF__COUNT(xf__aliases); i++) {
    if (!xf__has_key(keys, xf__aliases[i].key)) continue;
    size_t d = xf__distance(typo, xf__aliases[i].alias);
    if (d <= xf__distance_limit(xf__aliases[i].alias) && d < best_d) {
      best = xf__aliases[i].key;
      best_d = d;
    }
  }
  return best;
}

/* Writes "a, b, c" from a NULL-terminated list (or names[first..n)). */
static void xf__join(char *dst, size_t cap, const char *const *names, size_t first, size_t n) {
  size_t used = 0;
  dst[0] = '\0';
  for (size_t i = first; i < n && names[i]; i++) {
    int w = snprintf(dst + used, cap - used, "%s%s", i > first ? ", " : "", names[i]);
    if (w < 0 || (size_t)w >= cap - used) break;
    used += (size_t)w;
  }
}

/* key itself, or the field an alias of it stands for, when that is one of
 * keys; NULL otherwise. */
static const char *xf__exact_key(const char *const *keys, const char *key) {
  for (size_t i = 0; keys[i]; i++)
    if (strcmp(keys[i], key) == 0) return keys[i];
  for (size_t i = 0; i < XF__COUNT(xf__aliases); i++)
    if (strcmp(xf__aliases[i].alias, key) == 0 && xf__has_key(keys, xf__aliases[i].key))
      return xf__aliases[i].key;
  return NULL;
}

/* The error for an unknown key: a close key in the same section, else the
 * same key (or alias) in another section, else the list of known keys.
 * Across sections only exact names are offered: a typo that happens to be
 * near some other section's key is no evidence the field was misplaced. */
static xf_err xf__unknown_key(const char *section, const char *key, xf_errctx *err) {
  char shown[64], field[128];
  const char *name = key[0] ? xf__printable(key, shown, sizeof(shown)) : "\"\"";
  xf__path(field, sizeof(field), section, name);
  const char *const *keys = xf__keys_of(section);
  const char *near = xf__closest_key(keys, key);
  if (near) return xf__fail_at(err, XF_EFORMAT, field, "unknown field; did you mean \"%s\"?", near);
  for (size_t s = 0; s < XF__COUNT(xf__sections); s++) {
    const char *other = xf__exact_key(xf__sections[s].keys, key);
    if (!other || strcmp(xf__sections[s].name, section) == 0) continue;
    char where[128];
    xf__path(where, sizeof(where), xf__sections[s].name, other);
    if (xf__sections[s].name[0])
      return xf__fail_at(err, XF_EFORMAT, field,
                         "unknown field here; did you mean \"%s\"? (it belongs in the \"%s\" "
                         "section)",
                         where, xf__sections[s].name);
    return xf__fail_at(err, XF_EFORMAT, field,
                       "unknown field here; did you mean \"%s\" at the top level?", where);
  }
  char known[400];
  xf__join(known, sizeof(known), keys, 0, (size_t)-1);
  return xf__fail_at(err, XF_EFORMAT, field, "unknown field; the fields here are: %s", known);
}

/* ---- reading values ------------------------------------------------------- */

static const char *xf__type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "true/false";
  case JSON_NULL: return "null";
  }
  return "an unknown type";
}

static xf_err xf__wrong_type(const char *field, const char *expected, const json_t *v,
                             xf_errctx *err) {
  if (json_is_null(v))
    return xf__fail_at(err, XF_EFORMAT, field,
                       "expected %s, got null; leave the field out to get its default", expected);
  return xf__fail_at(err, XF_EFORMAT, field, "expected %s, got %s", expected, xf__type_name(v));
}

/* Every key of obj must be one of the section's. */
static xf_err xf__check_keys(json_t *obj, const char *section, xf_errctx *err) {
  const char *const *keys = xf__keys_of(section);
  const char *key;
  json_t *value;
  json_object_foreach(obj, key, value) {
    (void)value;
    if (!xf__has_key(keys, key)) return xf__unknown_key(section, key, err);
  }
  return XF_OK;
}

/* *out = the section object, or NULL when absent. */
static xf_err xf__get_section(json_t *root, const char *key, json_t **out, xf_errctx *err) {
  json_t *v = json_object_get(root, key);
  *out = NULL;
  if (!v) return XF_OK;
  if (!json_is_object(v)) return xf__wrong_type(key, "an object {...}", v, err);
  XF_GUARD(xf__check_keys(v, key, err));
  *out = v;
  return XF_OK;
}

xf_err xf__missing(const char *field, const char *what, xf_errctx *err) {
  return xf__fail_at(err, XF_EFORMAT, field, "required; %s", what);
}

/* A number (integer or real). present may be NULL. */
static xf_err xf__get_real(json_t *obj, const char *section, const char *key, double *out,
                           bool *present, xf_errctx *err) {
  json_t *v = json_object_get(obj, key);
  if (present) *present = v != NULL;
  if (!v) return XF_OK;
  char field[128];
  xf__path(field, sizeof(field), section, key);
  if (!json_is_number(v)) return xf__wrong_type(field, "a number", v, err);
  *out = json_number_value(v);
  return XF_OK;
}

xf_err xf__range_int(const char *field, long long v, long long lo, long long hi,
                     xf_errctx *err) {
  if (v >= lo && v <= hi) return XF_OK;
  return xf__fail_at(err, XF_ERANGE, field, "must be between %lld and %lld, got %lld", lo, hi, v);
}

/* A whole number in [lo, hi] from a JSON value: an integer, or a number with
 * no fraction (50.0, as some JSON writers put it). */
static xf_err xf__whole(json_t *v, const char *field, long long lo, long long hi, long long *out,
                        xf_errctx *err) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
  } else if (json_is_real(v)) {
    double d = json_real_value(v);
    char num[32];
    if (d != floor(d))
      return xf__fail_at(err, XF_EFORMAT, field, "expected a whole number, got %s",
                         xf__num(d, num));
    /* hi + 1.0 keeps the test exact where hi itself rounds up (INT64_MAX). */
    if (!(d >= (double)lo && d < (double)hi + 1.0))
      return xf__fail_at(err, XF_ERANGE, field, "must be between %lld and %lld, got %s", lo, hi,
                         xf__num(d, num));
    *out = (long long)d;
  } else {
    return xf__wrong_type(field, "an integer", v, err);
  }
  return xf__range_int(field, *out, lo, hi, err);
}

static xf_err xf__get_u32(json_t *obj, const char *section, const char *key, uint32_t lo,
                          uint32_t hi, uint32_t *out, bool *present, xf_errctx *err) {
  json_t *v = json_object_get(obj, key);
  if (present) *present = v != NULL;
  if (!v) return XF_OK;
  char field[128];
  xf__path(field, sizeof(field), section, key);
  long long w = 0;
  XF_GUARD(xf__whole(v, field, lo, hi, &w, err));
  *out = (uint32_t)w;
  return XF_OK;
}

static xf_err xf__get_bool(json_t *obj, const char *section, const char *key, bool *out,
                           xf_errctx *err) {
  json_t *v = json_object_get(obj, key);
  if (!v) return XF_OK;
  char field[128];
  xf__path(field, sizeof(field), section, key);
  if (!json_is_boolean(v)) return xf__wrong_type(field, "true or false", v, err);
  *out = json_is_true(v);
  return XF_OK;
}

/* A string; *out points into the JSON tree (borrowed) or is NULL when absent. */
static xf_err xf__get_string(json_t *obj, const char *section, const char *key,
                             const char **out, xf_errctx *err) {
  json_t *v = json_object_get(obj, key);
  *out = NULL;
  if (!v) return XF_OK;
  char field[128];
  xf__path(field, sizeof(field), section, key);
  if (!json_is_string(v)) return xf__wrong_type(field, "a string", v, err);
  *out = json_string_value(v);
  return XF_OK;
}

/* One of names[first..n) into *out (left alone when absent). */
static xf_err xf__get_choice(json_t *obj, const char *section, const char *key,
                             const char *const *names, size_t first, size_t n, int *out,
                             bool *present, xf_errctx *err) {
  const char *s;
  XF_GUARD(xf__get_string(obj, section, key, &s, err));
  if (present) *present = s != NULL;
  if (!s) return XF_OK;
  int i = xf__index_of(names, first, n, s);
  if (i >= 0) {
    *out = i;
    return XF_OK;
  }
  char field[128], shown[64], list[256];
  xf__path(field, sizeof(field), section, key);
  xf__printable(s, shown, sizeof(shown));
  xf__join(list, sizeof(list), names, first, n);
  const char *near = NULL;
  size_t best = (size_t)-1;
  for (size_t j = first; j < n; j++) {
    size_t d = xf__distance(s, names[j]);
    if (d <= xf__distance_limit(names[j]) && d < best) {
      near = names[j];
      best = d;
    }
  }
  if (near)
    return xf__fail_at(err, XF_EFORMAT, field,
                       "unknown value \"%s\"; did you mean \"%s\"? (one of: %s)", shown, near,
                       list);
  return xf__fail_at(err, XF_EFORMAT, field, "unknown value \"%s\"; expected one of: %s", shown,
                     list);
}

/* Identifier rules (see XF_JOB_IDENT_MAX); s must be NUL-terminated within
 * cap bytes. */
xf_err xf__check_ident(const char *field, const char *s, size_t cap, xf_errctx *err) {
  const char *end = memchr(s, '\0', cap);
  if (!end)
    return xf__fail_at(err, XF_ERANGE, field, "must be at most %zu characters", cap - 1);
  size_t len = (size_t)(end - s);
  bool ok = len > 0 && isalnum((unsigned char)s[0]);
  for (size_t i = 0; ok && i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    ok = (c < 0x80 && isalnum(c)) || c == '.' || c == '_' || c == '-';
  }
  if (ok) return XF_OK;
  char shown[80];
  return xf__fail_at(err, XF_EFORMAT, field,
                     "must be 1 to %zu letters, digits, '.', '_' or '-', starting with a letter "
                     "or digit; got \"%s\"",
                     cap - 1, xf__printable(s, shown, sizeof(shown)));
}

/* Copies a JSON string identifier into dst[XF_JOB_IDENT_MAX]. */
static xf_err xf__ident_from(json_t *v, const char *field, char *dst, xf_errctx *err) {
  if (!json_is_string(v)) return xf__wrong_type(field, "a string", v, err);
  size_t len = json_string_length(v);
  if (len >= XF_JOB_IDENT_MAX)
    return xf__fail_at(err, XF_ERANGE, field, "is %zu characters long; at most %d are allowed",
                       len, XF_JOB_IDENT_MAX - 1);
  memcpy(dst, json_string_value(v), len + 1);
  return xf__check_ident(field, dst, XF_JOB_IDENT_MAX, err);
}

/* ---- sections ------------------------------------------------------------- */

/* The fields each declared layer kind takes, "kind" first. */
const char *const *xf__layer_fields(xf_layer_decl_kind k) {
  static const char *const dense[] = {"kind", "units", NULL};
  static const char *const conv[] = {"kind", "filters", "kernel", "stride", "padding", NULL};
  static const char *const pool[] = {"kind", "kernel", "stride", NULL};
  static const char *const dropout[] = {"kind", "rate", NULL};
  static const char *const groupnorm[] = {"kind", "groups", NULL};
  static const char *const embedding[] = {"kind", "vocab", "dim", NULL};
  static const char *const add[] = {"kind", "from", NULL};
  static const char *const bare[] = {"kind", NULL};
  switch (k) {
  case XF_DECL_DENSE: return dense;
  case XF_DECL_CONV2D: return conv;
  case XF_DECL_MAXPOOL2D:
  case XF_DECL_AVGPOOL2D: return pool;
  case XF_DECL_DROPOUT: return dropout;
  case XF_DECL_GROUPNORM: return groupnorm;
  case XF_DECL_EMBEDDING: return embedding;
  case XF_DECL_ADD: return add;
  default: return bare;
  }
}

/* The layer kinds' names, from the kernels' own table (xf_layer_decl_name),
 * in the order of xf_layer_decl_kind. */
static void xf__layer_kind_names(const char *names[XF_DECL_KINDS]) {
  for (int k = 0; k < XF_DECL_KINDS; k++) names[k] = xf_layer_decl_name((xf_layer_decl_kind)k);
}

/* "a" or "an" before a kind's name. */
const char *xf__article(const char *name) {
  return name[0] && strchr("aeiou", name[0]) ? "an" : "a";
}

/* The kind's name, "unknown" for a value that is not one. */
const char *xf__layer_kind_name(xf_layer_decl_kind k) {
  const char *s = xf_layer_decl_name(k);
  return s ? s : "unknown";
}

/* One integer field of a declared layer; *out keeps its value when absent
 * unless the field is required. */
static xf_err xf__layer_int(json_t *o, const char *at, const char *key, bool required, int lo,
                            int hi, int *out, xf_errctx *err) {
  char field[96];
  snprintf(field, sizeof(field), "%s.%s", at, key);
  json_t *v = json_object_get(o, key);
  if (!v) {
    if (!required) return XF_OK;
    return xf__missing(field, "this layer kind needs it", err);
  }
  long long w = 0;
  XF_GUARD(xf__whole(v, field, lo, hi, &w, err));
  *out = (int)w;
  return XF_OK;
}

/* An add layer's "from": -1 (the model's input) or the index of a layer
 * before layer i. */
xf_err xf__check_from(const char *field, long long from, size_t i, xf_errctx *err) {
  if (from >= -1 && from < (long long)i) return XF_OK;
  if (i == 0)
    return xf__fail_at(err, XF_ERANGE, field,
                       "%lld, but model.layers[0] has no earlier layer: an add layer there can "
                       "only add the model's input (-1)",
                       from);
  if (i == 1)
    return xf__fail_at(err, XF_ERANGE, field,
                       "%lld, an add layer adds the output of an earlier layer (here only 0) or "
                       "the model's input (-1)",
                       from);
  return xf__fail_at(err, XF_ERANGE, field,
                     "%lld, an add layer adds the output of an earlier layer (0 to %zu) or the "
                     "model's input (-1)",
                     from, i - 1);
}

/* A dropout rate: finite, in [0, 1), and still below 1 as the float32 the
 * kernels use (0.99999999 rounds up to 1). */
xf_err xf__check_rate(const char *field, double rate, xf_errctx *err) {
  char num[32];
  if (!isfinite(rate) || rate < 0 || rate >= 1)
    return xf__fail_at(err, XF_ERANGE, field,
                       "must be at least 0 and below 1 (the probability of zeroing a value), "
                       "got %s",
                       xf__num(rate, num));
  if ((float)rate >= 1.0f)
    return xf__fail_at(err, XF_ERANGE, field,
                       "%s rounds to 1 as a 32-bit float; use at most 0.99999994",
                       xf__num(rate, num));
  return XF_OK;
}

static xf_err xf__parse_layer(json_t *o, size_t i, xf_layer_decl *d, xf_errctx *err) {
  char at[48];
  snprintf(at, sizeof(at), "model.layers[%zu]", i);
  if (!json_is_object(o))
    return xf__wrong_type(at, "a layer object such as {\"kind\": \"dense\", \"units\": 10}", o,
                          err);
  const char *names[XF_DECL_KINDS];
  xf__layer_kind_names(names);
  int kind = 0;
  bool present = false;
  XF_GUARD(xf__get_choice(o, at, "kind", names, 0, XF_DECL_KINDS, &kind, &present, err));
  if (!present) {
    char field[64], list[256], what[272];
    snprintf(field, sizeof(field), "%s.kind", at);
    xf__join(list, sizeof(list), names, 0, XF_DECL_KINDS);
    snprintf(what, sizeof(what), "one of: %s", list);
    return xf__missing(field, what, err);
  }
  memset(d, 0, sizeof(*d));
  d->kind = (xf_layer_decl_kind)kind;
  const char *const *fields = xf__layer_fields(d->kind);
  const char *key;
  json_t *value;
  json_object_foreach(o, key, value) {
    (void)value;
    if (xf__has_key(fields, key)) continue;
    char field[128], shown[40], list[96];
    snprintf(field, sizeof(field), "%s.%s", at, xf__printable(key, shown, sizeof(shown)));
    size_t n = 0;
    while (fields[n]) n++;
    xf__join(list, sizeof(list), fields, 0, n);
    return xf__fail_at(err, XF_EFORMAT, field, "%s %s layer has no such field; its fields are: %s",
                       xf__article(names[kind]), names[kind], list);
  }
  switch (d->kind) {
  case XF_DECL_DENSE:
    XF_GUARD(xf__layer_int(o, at, "units", true, 1, XF_DECL_UNITS_MAX, &d->units, err));
    break;
  case XF_DECL_CONV2D:
    XF_GUARD(xf__layer_int(o, at, "filters", true, 1, XF_DECL_FILTERS_MAX, &d->filters, err));
    XF_GUARD(xf__layer_int(o, at, "kernel", true, 1, XF_DECL_KERNEL_MAX, &d->kernel, err));
    d->stride = 1;
    XF_GUARD(xf__layer_int(o, at, "stride", false, 1, XF_DECL_KERNEL_MAX, &d->stride, err));
    XF_GUARD(xf__layer_int(o, at, "padding", false, 0, d->kernel - 1, &d->padding, err));
    break;
  case XF_DECL_MAXPOOL2D:
  case XF_DECL_AVGPOOL2D:
    XF_GUARD(xf__layer_int(o, at, "kernel", true, 1, XF_DECL_KERNEL_MAX, &d->kernel, err));
    d->stride = d->kernel;
    XF_GUARD(xf__layer_int(o, at, "stride", false, 1, XF_DECL_KERNEL_MAX, &d->stride, err));
    break;
  case XF_DECL_DROPOUT: {
    double rate = 0;
    bool has = false;
    XF_GUARD(xf__get_real(o, at, "rate", &rate, &has, err));
    char field[64];
    snprintf(field, sizeof(field), "%s.rate", at);
    if (!has)
      return xf__missing(field, "the probability of zeroing a value while training, at least 0 "
                                "and below 1, e.g. 0.5",
                         err);
    XF_GUARD(xf__check_rate(field, rate, err));
    d->rate = (float)rate;
    break;
  }
  case XF_DECL_GROUPNORM:
    XF_GUARD(xf__layer_int(o, at, "groups", true, 1, XF_DECL_GROUPS_MAX, &d->groups, err));
    break;
  case XF_DECL_EMBEDDING:
    XF_GUARD(xf__layer_int(o, at, "vocab", true, 1, XF_DECL_VOCAB_MAX, &d->vocab, err));
    XF_GUARD(xf__layer_int(o, at, "dim", true, 1, XF_DECL_DIM_MAX, &d->dim, err));
    break;
  case XF_DECL_ADD: {
    /* Any int is read; xf__check_from says what this position allows. */
    XF_GUARD(xf__layer_int(o, at, "from", true, INT_MIN, INT_MAX, &d->from, err));
    char field[64];
    snprintf(field, sizeof(field), "%s.from", at);
    XF_GUARD(xf__check_from(field, d->from, i, err));
    break;
  }
  default: break;
  }
  return XF_OK;
}

static xf_err xf__parse_layers(json_t *layers, xf_job_model *m, xf_errctx *err) {
  if (!json_is_array(layers))
    return xf__wrong_type("model.layers",
                          "an array of layer objects such as [{\"kind\": \"dense\", \"units\": "
                          "10}]",
                          layers, err);
  size_t n = json_array_size(layers);
  if (n < 1 || n > XF_JOB_LAYERS_MAX)
    return xf__fail_at(err, XF_ERANGE, "model.layers", "must list 1 to %d layers, got %zu",
                       XF_JOB_LAYERS_MAX, n);
  for (size_t i = 0; i < n; i++)
    XF_GUARD(xf__parse_layer(json_array_get(layers, i), i, &m->layers[i], err));
  m->n_layers = (uint32_t)n;
  return XF_OK;
}

static xf_err xf__parse_model(json_t *obj, xf_job_model *m, xf_errctx *err) {
  int arch = (int)m->arch, preset = (int)m->preset;
  bool present;
  XF_GUARD(xf__get_choice(obj, "model", "arch", xf__arch_names, 0, XF__COUNT(xf__arch_names),
                          &arch, &present, err));
  json_t *layers = json_object_get(obj, "layers");
  if (layers) {
    if (present && arch != XF_JOB_ARCH_LAYERS)
      return xf__fail_at(err, XF_EFORMAT, "model.layers",
                         "declares the model itself, so it cannot go with arch \"%s\"; leave "
                         "model.arch out",
                         xf__arch_names[arch]);
    arch = XF_JOB_ARCH_LAYERS;
    XF_GUARD(xf__parse_layers(layers, m, err));
  } else if (!present) {
    return xf__missing("model.arch", "one of: logreg, mlp, cnn; or declare the model in "
                                     "model.layers",
                       err);
  }
  m->arch = (xf_job_arch)arch;
  /* "none" is how the struct says "not a cnn"; JSON leaves preset out. */
  XF_GUARD(xf__get_choice(obj, "model", "preset", xf__preset_names, 1,
                          XF__COUNT(xf__preset_names), &preset, NULL, err));
  m->preset = (xf_job_preset)preset;
  int loss = (int)m->loss;
  XF_GUARD(xf__get_choice(obj, "model", "loss", xf__loss_names, 0, XF__COUNT(xf__loss_names),
                          &loss, NULL, err));
  m->loss = (xf_loss)loss;
  json_t *hidden = json_object_get(obj, "hidden");
  if (!hidden) return XF_OK;
  if (!json_is_array(hidden))
    return xf__wrong_type("model.hidden", "an array of layer widths such as [200, 200]", hidden,
                          err);
  size_t n = json_array_size(hidden);
  if (n < 1 || n > XF_JOB_HIDDEN_MAX)
    return xf__fail_at(err, XF_ERANGE, "model.hidden", "must list 1 to %d layer widths, got %zu",
                       XF_JOB_HIDDEN_MAX, n);
  for (size_t i = 0; i < n; i++) {
    char field[64];
    snprintf(field, sizeof(field), "model.hidden[%zu]", i);
    long long w;
    XF_GUARD(xf__whole(json_array_get(hidden, i), field, 1, XF_JOB_WIDTH_MAX, &w, err));
    m->hidden[i] = (uint32_t)w;
  }
  m->n_hidden = (uint32_t)n;
  return XF_OK;
}

static xf_err xf__parse_data(json_t *obj, xf_job_data *d, xf_errctx *err) {
  json_t *dataset = json_object_get(obj, "dataset");
  if (!dataset)
    return xf__missing("data.dataset", "the name sites registered the dataset under, e.g. "
                                       "\"fmnist\"",
                       err);
  XF_GUARD(xf__ident_from(dataset, "data.dataset", d->dataset, err));
  json_t *tags = json_object_get(obj, "tags");
  if (!tags) return XF_OK;
  if (!json_is_array(tags))
    return xf__wrong_type("data.tags", "an array of strings such as [\"fmnist\"]", tags, err);
  size_t n = json_array_size(tags);
  if (n > XF_JOB_TAGS_MAX)
    return xf__fail_at(err, XF_ERANGE, "data.tags", "at most %d tags, got %zu", XF_JOB_TAGS_MAX,
                       n);
  for (size_t i = 0; i < n; i++) {
    char field[64];
    snprintf(field, sizeof(field), "data.tags[%zu]", i);
    XF_GUARD(xf__ident_from(json_array_get(tags, i), field, d->tags[i], err));
  }
  d->n_tags = (uint32_t)n;
  return XF_OK;
}

static xf_err xf__parse_local(json_t *obj, xf_job_local *l, bool *prox_mu_present,
                              xf_errctx *err) {
  XF_GUARD(xf__get_u32(obj, "local", "epochs", 1, XF_JOB_EPOCHS_MAX, &l->epochs, NULL, err));
  XF_GUARD(xf__get_u32(obj, "local", "batch_size", 1, XF_JOB_BATCH_MAX, &l->batch_size, NULL,
                       err));
  const char *opt;
  XF_GUARD(xf__get_string(obj, "local", "optimizer", &opt, err));
  if (opt && xf_job_optimizer_from_name(opt, &l->optimizer) != XF_OK) {
    char shown[64];
    return xf__fail_at(err, XF_EUNSUPPORTED, "local.optimizer",
                       "'%s' is not an optimizer: use sgd, adam or adamw",
                       xf__printable(opt, shown, sizeof(shown)));
  }
  XF_GUARD(xf__get_real(obj, "local", "lr", &l->lr, NULL, err));
  bool momentum = false, nesterov = false, beta1 = false, beta2 = false, eps = false;
  XF_GUARD(xf__get_real(obj, "local", "momentum", &l->momentum, &momentum, err));
  nesterov = json_object_get(obj, "nesterov") != NULL;
  XF_GUARD(xf__get_bool(obj, "local", "nesterov", &l->nesterov, err));
  XF_GUARD(xf__get_real(obj, "local", "beta1", &l->beta1, &beta1, err));
  XF_GUARD(xf__get_real(obj, "local", "beta2", &l->beta2, &beta2, err));
  XF_GUARD(xf__get_real(obj, "local", "eps", &l->eps, &eps, err));
  /* A hyperparameter of another optimizer than the chosen one is an error,
   * so that none is silently ignored. */
  bool sgd = l->optimizer == XF_JOB_OPTIMIZER_SGD;
  const char *stray = sgd ? (beta1 ? "beta1" : beta2 ? "beta2" : eps ? "eps" : NULL)
                          : (momentum ? "momentum" : nesterov ? "nesterov" : NULL);
  if (stray) {
    char field[64];
    snprintf(field, sizeof(field), "local.%s", stray);
    return xf__fail_at(err, XF_EFORMAT, field,
                       "is not a setting of optimizer \"%s\"; %s",
                       xf__optimizer_names[l->optimizer],
                       sgd ? "beta1, beta2 and eps belong to adam and adamw"
                           : "momentum and nesterov belong to sgd");
  }
  XF_GUARD(xf__get_real(obj, "local", "weight_decay", &l->weight_decay, NULL, err));
  XF_GUARD(xf__get_real(obj, "local", "clip_norm", &l->clip_norm, NULL, err));
  json_t *sched = json_object_get(obj, "lr_schedule");
  if (sched) {
    if (!json_is_object(sched))
      return xf__wrong_type("local.lr_schedule",
                            "an object such as {\"kind\": \"cosine\", \"min_lr\": 0.001}", sched,
                            err);
    XF_GUARD(xf__check_keys(sched, "local.lr_schedule", err));
    int kind = (int)l->lr_schedule.kind;
    bool present, every, gamma, min_lr;
    XF_GUARD(xf__get_choice(sched, "local.lr_schedule", "kind", xf__lr_schedule_names, 0,
                            XF__COUNT(xf__lr_schedule_names), &kind, &present, err));
    if (!present)
      return xf__missing("local.lr_schedule.kind", "one of: constant, step, cosine", err);
    l->lr_schedule.kind = (xf_job_lr_schedule_kind)kind;
    every = json_object_get(sched, "every") != NULL;
    XF_GUARD(xf__get_u32(sched, "local.lr_schedule", "every", 1, XF_JOB_ROUNDS_MAX,
                         &l->lr_schedule.every, NULL, err));
    XF_GUARD(xf__get_real(sched, "local.lr_schedule", "gamma", &l->lr_schedule.gamma, &gamma,
                          err));
    XF_GUARD(xf__get_real(sched, "local.lr_schedule", "min_lr", &l->lr_schedule.min_lr, &min_lr,
                          err));
    const char *wrong = kind == XF_JOB_LR_STEP     ? (min_lr ? "min_lr" : NULL)
                        : kind == XF_JOB_LR_COSINE ? (every ? "every" : gamma ? "gamma" : NULL)
                        : (every ? "every" : gamma ? "gamma" : min_lr ? "min_lr" : NULL);
    if (wrong) {
      char field[64];
      snprintf(field, sizeof(field), "local.lr_schedule.%s", wrong);
      return xf__fail_at(err, XF_EFORMAT, field,
                         "is not a setting of schedule \"%s\" (step takes every and gamma, "
                         "cosine takes min_lr)",
                         xf__lr_schedule_names[kind]);
    }
  }
  return xf__get_real(obj, "local", "prox_mu", &l->prox_mu, prox_mu_present, err);
}

double xf_jobspec_local_lr(const xf_jobspec *spec, uint32_t round) {
  const xf_job_local *l = &spec->local;
  uint32_t r = round < 1 ? 1 : round, rounds = spec->rounds < 1 ? 1 : spec->rounds;
  if (r > rounds) r = rounds;
  switch (l->lr_schedule.kind) {
  case XF_JOB_LR_STEP:
    return l->lr * pow(l->lr_schedule.gamma,
                       (double)((r - 1) / (l->lr_schedule.every ? l->lr_schedule.every : 1)));
  case XF_JOB_LR_COSINE: {
    if (rounds == 1) return l->lr;
    double frac = (double)(r - 1) / (double)(rounds - 1);
    return l->lr_schedule.min_lr +
           (l->lr - l->lr_schedule.min_lr) * (1.0 + cos(3.14159265358979323846 * frac)) / 2.0;
  }
  case XF_JOB_LR_CONSTANT:
  default: return l->lr;
  }
}

#define XF__ADAPTIVE                                                           \
  (XF__KIND(XF_JOB_STRATEGY_FEDADAM) | XF__KIND(XF_JOB_STRATEGY_FEDYOGI) |     \
   XF__KIND(XF_JOB_STRATEGY_FEDADAGRAD))

const xf__strategy_param xf__strategy_params[XF__STRATEGY_PARAMS] = {
    {"server_momentum", offsetof(xf_job_strategy, server_momentum),
     XF__KIND(XF_JOB_STRATEGY_FEDAVGM)},
    {"beta1", offsetof(xf_job_strategy, beta1), XF__ADAPTIVE},
    {"beta2", offsetof(xf_job_strategy, beta2),
     XF__KIND(XF_JOB_STRATEGY_FEDADAM) | XF__KIND(XF_JOB_STRATEGY_FEDYOGI)},
    {"tau", offsetof(xf_job_strategy, tau), XF__ADAPTIVE},
    {"trim_fraction", offsetof(xf_job_strategy, trim_fraction),
     XF__KIND(XF_JOB_STRATEGY_TRIMMED_MEAN)},
};

static xf_err xf__parse_strategy(json_t *obj, xf_job_strategy *s, xf_errctx *err) {
  int kind = (int)XF_JOB_STRATEGY_FEDAVG;
  XF_GUARD(xf__get_choice(obj, "strategy", "name", xf__strategy_names, 0,
                          XF__COUNT(xf__strategy_names), &kind, NULL, err));
  xf_job_strategy_defaults(s, (xf_job_strategy_kind)kind);
  XF_GUARD(xf__get_real(obj, "strategy", "server_lr", &s->server_lr, NULL, err));
  for (size_t i = 0; i < XF__COUNT(xf__strategy_params); i++) {
    double *slot = (double *)(void *)((char *)s + xf__strategy_params[i].offset);
    bool present;
    XF_GUARD(xf__get_real(obj, "strategy", xf__strategy_params[i].key, slot, &present, err));
    if (!present || (xf__strategy_params[i].kinds & XF__KIND(kind))) continue;
    char field[64], users[160];
    const char *names[XF__COUNT(xf__strategy_names) + 1];
    size_t n = 0;
    for (size_t k = 0; k < XF__COUNT(xf__strategy_names); k++)
      if (xf__strategy_params[i].kinds & XF__KIND(k)) names[n++] = xf__strategy_names[k];
    names[n] = NULL;
    xf__join(users, sizeof(users), names, 0, n);
    snprintf(field, sizeof(field), "strategy.%s", xf__strategy_params[i].key);
    return xf__fail_at(err, XF_EFORMAT, field,
                       "has no effect with strategy \"%s\"; it is used only by %s. Remove it or "
                       "change strategy.name",
                       xf__strategy_names[kind], users);
  }
  return XF_OK;
}

static xf_err xf__parse_privacy(json_t *obj, xf_privacy_spec *p, xf_errctx *err) {
  int unit = (int)p->unit, mode = (int)p->mode;
  bool present;
  XF_GUARD(xf__get_choice(obj, "privacy", "unit", xf__unit_names, 0, XF__COUNT(xf__unit_names),
                          &unit, NULL, err));
  XF_GUARD(xf__get_choice(obj, "privacy", "mode", xf__mode_names, 0, XF__COUNT(xf__mode_names),
                          &mode, &present, err));
  if (!present)
    return xf__missing("privacy.mode",
                       "one of: central, distributed, local, none (leave the whole privacy "
                       "section out for none)",
                       err);
  p->unit = (xf_privacy_unit)unit;
  p->mode = (xf_privacy_mode)mode;
  XF_GUARD(xf__get_real(obj, "privacy", "clip", &p->clip, &present, err));
  char num[32];
  if (present && p->clip <= 0)
    return xf__fail_at(err, XF_ERANGE, "privacy.clip",
                       "must be > 0, got %s; leave it out (with mode none) for no clipping",
                       xf__num(p->clip, num));
  XF_GUARD(xf__get_real(obj, "privacy", "target_epsilon", &p->target_epsilon,
                        &p->has_target_epsilon, err));
  XF_GUARD(xf__get_real(obj, "privacy", "noise_multiplier", &p->noise_multiplier,
                        &p->has_noise_multiplier, err));
  return xf__get_real(obj, "privacy", "delta", &p->delta, NULL, err);
}

static xf_err xf__parse_compression(json_t *obj, xf_job_compression *c, xf_errctx *err) {
  const char *uplink;
  XF_GUARD(xf__get_string(obj, "compression", "uplink", &uplink, err));
  if (uplink) {
    xf_err rc = xf_job_uplink_parse(uplink, &c->uplink, err);
    if (rc != XF_OK) {
      xf_errctx_field(err, "compression.uplink");
      return rc;
    }
  }
  int downlink = (int)c->downlink;
  XF_GUARD(xf__get_choice(obj, "compression", "downlink", xf__downlink_names, 0,
                          XF__COUNT(xf__downlink_names), &downlink, NULL, err));
  c->downlink = (xf_job_downlink)downlink;
  return XF_OK;
}

/* seed: a non-negative integer, or a decimal string for the whole uint64
 * range (jansson's integers stop at 2^63 - 1). */
static xf_err xf__parse_seed(json_t *root, uint64_t *out, xf_errctx *err) {
  json_t *v = json_object_get(root, "seed");
  if (!v) return XF_OK;
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    uint64_t x = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
      unsigned d = (unsigned)(s[i] - '0');
      if (x > (UINT64_MAX - d) / 10)
        return xf__fail_at(err, XF_ERANGE, "seed", "must be between 0 and %llu",
                           (unsigned long long)UINT64_MAX);
      x = x * 10 + d;
    }
    if (i == 0 || s[i] != '\0') {
      char shown[64];
      return xf__fail_at(err, XF_EFORMAT, "seed",
                         "expected an integer (or its decimal digits as a string), got \"%s\"",
                         xf__printable(s, shown, sizeof(shown)));
    }
    *out = x;
    return XF_OK;
  }
  if (json_is_number(v) && json_number_value(v) < 0)
    return xf__fail_at(err, XF_ERANGE, "seed", "must be between 0 and %llu",
                       (unsigned long long)UINT64_MAX);
  long long w;
  XF_GUARD(xf__whole(v, "seed", 0, INT64_MAX, &w, err));
  *out = (uint64_t)w;
  return XF_OK;
}

/* centralized: the baseline's reading (xf_jobspec_parse_centralized), where
 * name, data and rounds may be left out and keep what *s holds. */
static xf_err xf__parse_root(json_t *root, bool centralized, xf_jobspec *s, xf_errctx *err) {
  if (!json_is_object(root))
    return xf__fail_at(err, XF_EFORMAT, "", "a job spec is a JSON object {...}, got %s",
                       xf__type_name(root));
  XF_GUARD(xf__check_keys(root, "", err));
  json_t *name = json_object_get(root, "name");
  if (!name && !centralized) return xf__missing("name", "a job name such as \"fmnist-mlp\"", err);
  if (name) XF_GUARD(xf__ident_from(name, "name", s->name, err));

  json_t *sec;
  XF_GUARD(xf__get_section(root, "model", &sec, err));
  if (!sec) return xf__missing("model", "e.g. {\"arch\": \"mlp\", \"hidden\": [200, 200]}", err);
  XF_GUARD(xf__parse_model(sec, &s->model, err));
  XF_GUARD(xf__get_section(root, "data", &sec, err));
  if (!sec && !centralized) return xf__missing("data", "e.g. {\"dataset\": \"fmnist\"}", err);
  if (sec) XF_GUARD(xf__parse_data(sec, &s->data, err));

  bool present;
  XF_GUARD(xf__get_u32(root, "", "rounds", 1, XF_JOB_ROUNDS_MAX, &s->rounds, &present, err));
  if (!present && !centralized)
    return xf__missing("rounds", "the number of federated rounds, e.g. 50", err);
  XF_GUARD(xf__get_real(root, "", "sites_per_round", &s->sites_per_round, NULL, err));
  XF_GUARD(xf__get_real(root, "", "over_selection", &s->over_selection, NULL, err));
  XF_GUARD(xf__get_u32(root, "", "min_sites", 1, XF_JOB_SITES_MAX, &s->min_sites, NULL, err));
  XF_GUARD(xf__get_real(root, "", "round_deadline_s", &s->round_deadline_s, NULL, err));
  int topology = (int)s->topology;
  XF_GUARD(xf__get_choice(root, "", "topology", xf__topology_names, 0,
                          XF__COUNT(xf__topology_names), &topology, NULL, err));
  s->topology = (xf_job_topology)topology;

  bool prox_mu_present = false;
  XF_GUARD(xf__get_section(root, "local", &sec, err));
  if (sec) XF_GUARD(xf__parse_local(sec, &s->local, &prox_mu_present, err));
  XF_GUARD(xf__get_section(root, "strategy", &sec, err));
  if (sec) XF_GUARD(xf__parse_strategy(sec, &s->strategy, err));
  if (s->strategy.kind == XF_JOB_STRATEGY_FEDPROX && !prox_mu_present)
    s->local.prox_mu = XF__FEDPROX_DEFAULT_MU;
  XF_GUARD(xf__get_section(root, "privacy", &sec, err));
  if (sec) XF_GUARD(xf__parse_privacy(sec, &s->privacy, err));
  XF_GUARD(xf__get_section(root, "secure_aggregation", &sec, err));
  if (sec) {
    XF_GUARD(xf__get_bool(sec, "secure_aggregation", "enabled", &s->secure_aggregation.enabled,
                          err));
    XF_GUARD(xf__get_u32(sec, "secure_aggregation", "bits", 8, 32, &s->secure_aggregation.bits,
                         NULL, err));
    XF_GUARD(xf__get_real(sec, "secure_aggregation", "threshold",
                          &s->secure_aggregation.threshold, NULL, err));
  }
  XF_GUARD(xf__get_section(root, "compression", &sec, err));
  if (sec) XF_GUARD(xf__parse_compression(sec, &s->compression, err));
  XF_GUARD(xf__parse_seed(root, &s->seed, err));
  return xf_jobspec_validate(s, err);
}

/* ---- parsing entry points ------------------------------------------------- */

static xf_err xf__parse_text(const char *json, size_t len, const char *origin, bool centralized,
                             xf_jobspec *out, xf_errctx *err) {
  xf_errctx_file(err, origin);
  if (!json) { /* no text: the empty spec, which jansson reports */
    json = "";
    len = 0;
  }
  if (len > XF_JOBSPEC_MAX_BYTES)
    return xf__fail_at(err, XF_ERANGE, "",
                       "the job spec is %zu bytes; at most %u are accepted (is this the right "
                       "file?)",
                       len, XF_JOBSPEC_MAX_BYTES);
  json_error_t jerr;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    /* jansson names every syntax error; it leaves the text empty when it
     * could not allocate its lexer. */
    if (json_error_code(&jerr) == json_error_out_of_memory || jerr.text[0] == '\0')
      return xf__fail_at(err, XF_ENOMEM, "", "out of memory while reading the job spec");
    char where[64], text[JSON_ERROR_TEXT_LENGTH];
    snprintf(where, sizeof(where), "line %d, column %d", jerr.line, jerr.column);
    return xf__fail_at(err, XF_EFORMAT, where, "invalid JSON: %s",
                       xf__printable(jerr.text, text, sizeof(text)));
  }
  xf_jobspec spec;
  xf_jobspec_defaults(&spec);
  if (centralized) {
    /* What the baseline stands for where the spec leaves the federated
     * fields out: one run, named and fed by the command line. */
    snprintf(spec.name, sizeof(spec.name), "%s", XF_JOBSPEC_CENTRALIZED_NAME);
    snprintf(spec.data.dataset, sizeof(spec.data.dataset), "%s", XF_JOBSPEC_CENTRALIZED_NAME);
    spec.rounds = 1;
  }
  xf_err rc = xf__parse_root(root, centralized, &spec, err);
  json_decref(root);
  if (rc == XF_OK) *out = spec;
  return rc;
}

xf_err xf_jobspec_parse_string(const char *json, size_t len, const char *origin,
                               xf_jobspec *out, xf_errctx *err) {
  return xf__parse_text(json, len, origin, false, out, err);
}

/* Reads at most XF_JOBSPEC_MAX_BYTES + 1 bytes, enough to tell an oversized
 * file from one at the limit without trusting st_size (pipes, /proc). */
static xf_err xf__read_file(const char *path, char **out, size_t *out_len, xf_errctx *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    return xf__fail_at(err, e == ENOENT ? XF_ENOENT : XF_EIO, "", "cannot open: %s",
                       strerror(e));
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0) memset(&st, 0, sizeof(st));
  if (S_ISDIR(st.st_mode)) {
    fclose(f);
    return xf__fail_at(err, XF_EIO, "", "is a directory; give the path of a job spec file");
  }
  size_t cap = XF_JOBSPEC_MAX_BYTES + 1, len = 0;
  if (S_ISREG(st.st_mode) && st.st_size >= 0 && (uint64_t)st.st_size < cap)
    cap = (size_t)st.st_size + 1; /* the +1 byte detects growth since fstat */
  char *buf = xf_malloc(cap);
  if (!buf) {
    fclose(f);
    return xf__fail_at(err, XF_ENOMEM, "", "out of memory while reading the job spec");
  }
  for (;;) {
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (len > XF_JOBSPEC_MAX_BYTES || got == 0) break;
    if (len == cap) {
      size_t ncap = cap * 2 > XF_JOBSPEC_MAX_BYTES + 1 ? XF_JOBSPEC_MAX_BYTES + 1 : cap * 2;
      char *nb = xf_realloc(buf, ncap);
      if (!nb) {
        xf_free(buf);
        fclose(f);
        return xf__fail_at(err, XF_ENOMEM, "", "out of memory while reading the job spec");
      }
      buf = nb;
      cap = ncap;
    }
  }
  bool failed = ferror(f) != 0;
  int e = errno;
  fclose(f);
  if (failed) {
    xf_free(buf);
    return xf__fail_at(err, XF_EIO, "", "cannot read: %s", strerror(e));
  }
  if (len > XF_JOBSPEC_MAX_BYTES) {
    xf_free(buf);
    return xf__fail_at(err, XF_ERANGE, "",
                       "the file is larger than %u bytes, the most a job spec may be (is this "
                       "the right file?)",
                       XF_JOBSPEC_MAX_BYTES);
  }
  *out = buf;
  *out_len = len;
  return XF_OK;
}

static xf_err xf__parse_file(const char *path, bool centralized, xf_jobspec *out,
                             xf_errctx *err) {
  xf_errctx_file(err, path);
  char *buf = NULL;
  size_t len = 0;
  XF_GUARD(xf__read_file(path, &buf, &len, err));
  xf_err rc = xf__parse_text(buf, len, path, centralized, out, err);
  xf_free(buf);
  return rc;
}

xf_err xf_jobspec_parse_file(const char *path, xf_jobspec *out, xf_errctx *err) {
  return xf__parse_file(path, false, out, err);
}

xf_err xf_jobspec_parse_centralized(const char *path, xf_jobspec *out, xf_errctx *err) {
  return xf__parse_file(path, true, out, err);
}

/* ---- uplink grammar ------------------------------------------------------- */

/* A decimal number: digits, optionally '.' and digits, optionally an
 * exponent. No sign, no hex, no inf/nan: strtod alone accepts all of those.
 * Returns the length matched (0 when s does not start with one). */
static size_t xf__scan_decimal(const char *s) {
  size_t i = 0, digits = 0;
  while (isdigit((unsigned char)s[i])) i++, digits++;
  if (s[i] == '.') {
    i++;
    while (isdigit((unsigned char)s[i])) i++, digits++;
  }
  if (digits == 0) return 0;
  if (s[i] == 'e' || s[i] == 'E') {
    size_t j = i + 1;
    if (s[j] == '+' || s[j] == '-') j++;
    if (!isdigit((unsigned char)s[j])) return i;
    while (isdigit((unsigned char)s[j])) j++;
    i = j;
  }
  return i;
}

/* "qN" with N one of 16, 8, 4. */
static bool xf__scan_quant(const char *s, uint32_t *bits) {
  if (strcmp(s, "q16") == 0) *bits = 16;
  else if (strcmp(s, "q8") == 0) *bits = 8;
  else if (strcmp(s, "q4") == 0) *bits = 4;
  else return false;
  return true;
}

xf_err xf_job_uplink_parse(const char *text, xf_job_uplink *out, xf_errctx *err) {
  static const char grammar[] =
      "use \"none\", \"q16\", \"q8\", \"q4\", \"topk:F\" or \"topk:F+qN\" (F in (0, 1], N one "
      "of 16, 8, 4), e.g. \"topk:0.01+q8\"";
  char shown[64];
  xf__printable(text, shown, sizeof(shown));
  xf_job_uplink u = {0, 0};
  if (strcmp(text, "none") == 0) {
    *out = u;
    return XF_OK;
  }
  if (xf__scan_quant(text, &u.quant_bits)) {
    *out = u;
    return XF_OK;
  }
  if (text[0] == 'q' && xf__scan_decimal(text + 1) == strlen(text + 1) && text[1])
    return xf_fail(err, XF_EFORMAT, "\"%s\": quantization is available at 16, 8 or 4 bits; %s",
                   shown, grammar);
  if (strncmp(text, "topk:", 5) != 0)
    return xf_fail(err, XF_EFORMAT, "unknown uplink compression \"%s\"; %s", shown, grammar);
  const char *f = text + 5;
  size_t n = xf__scan_decimal(f);
  if (n == 0)
    return xf_fail(err, XF_EFORMAT, "\"%s\": expected a fraction after \"topk:\"; %s", shown,
                   grammar);
  if (f[n] != '\0') {
    if (f[n] != '+' || !xf__scan_quant(f + n + 1, &u.quant_bits))
      return xf_fail(err, XF_EFORMAT,
                     "\"%s\": after \"topk:F\" only \"+q16\", \"+q8\" or \"+q4\" may follow; %s",
                     shown, grammar);
  }
  char num[64];
  if (n >= sizeof(num))
    return xf_fail(err, XF_EFORMAT,
                   "\"%s\": the fraction has more than %zu characters; 17 significant digits "
                   "are enough for any double",
                   shown, sizeof(num) - 1);
  memcpy(num, f, n);
  num[n] = '\0';
  double frac = strtod(num, NULL);
  if (!(frac > 0 && frac <= 1))
    return xf_fail(err, XF_ERANGE,
                   "\"%s\": the top-k fraction must be in (0, 1], got %s (0.01 keeps the largest "
                   "1%% of coordinates)",
                   shown, xf__num(frac, num));
  u.topk_fraction = frac;
  *out = u;
  return XF_OK;
}

char *xf_job_uplink_format(const xf_job_uplink *uplink, char *buf, size_t n) {
  if (n == 0) return buf;
  char frac[32];
  if (uplink->topk_fraction > 0) {
    xf__format_real(uplink->topk_fraction, false, frac, sizeof(frac));
    if (uplink->quant_bits)
      snprintf(buf, n, "topk:%s+q%u", frac, (unsigned)uplink->quant_bits);
    else
      snprintf(buf, n, "topk:%s", frac);
  } else if (uplink->quant_bits) {
    snprintf(buf, n, "q%u", (unsigned)uplink->quant_bits);
  } else {
    snprintf(buf, n, "none");
  }
  return buf;
}

/* ---- cohort --------------------------------------------------------------- */

void xf_jobspec_cohort(const xf_jobspec *spec, uint32_t eligible, uint32_t *target,
                       uint32_t *invite) {
  double spr = spec->sites_per_round;
  /* The relative slack keeps 0.1 * 30 (3.0000000000000004) at 3 sites. */
  double share = spr * (double)eligible;
  double t = spr > 1 ? floor(spr) : ceil(share - share * 1e-12);
  if (!(t >= 1)) t = 1;
  if (t > eligible) t = eligible;
  double inv = ceil(t * (spec->over_selection >= 1 ? spec->over_selection : 1));
  if (inv > eligible) inv = eligible;
  *target = (uint32_t)t;
  *invite = (uint32_t)inv;
}

/* ---- job ids ---------------------------------------------------------------- */

xf_err xf_job_id_parse(const char *s, int64_t *out, xf_errctx *err) {
  const char *text = s ? s : "";
  char shown[48];
  xf__printable(text, shown, sizeof(shown));
  size_t n = strlen(text);
  bool digits = n > 0 && text[0] != '0';
  for (size_t i = 0; digits && i < n; i++) digits = text[i] >= '0' && text[i] <= '9';
  if (!digits)
    return xf_fail(err, XF_EINVAL,
                   "'%s' is not a job id: job ids are whole numbers from 1 to %" PRId64
                   " ('xfed job list' shows them)",
                   shown, (int64_t)XF_JOB_ID_MAX);
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned d = (unsigned)(text[i] - '0');
    if (v > ((uint64_t)XF_JOB_ID_MAX - d) / 10)
      return xf_fail(err, XF_ERANGE,
                     "job id %s is out of range: job ids are whole numbers from 1 to %" PRId64,
                     shown, (int64_t)XF_JOB_ID_MAX);
    v = v * 10 + d;
  }
  *out = (int64_t)v;
  return XF_OK;
}
