/* SPDX-License-Identifier: Apache-2.0 */
/* The job spec's canonical JSON text: fixed member order, shortest
 * round-trip numbers, fields added later written only off their default. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "job/jobspec.h"
#include "job/jobspec_internal.h"

/* ---- canonical output ----------------------------------------------------- */

/* A growing text buffer; after the first failed allocation every write is
 * dropped and `failed` stays set. */
typedef struct xf__out {
  char *buf;
  size_t len, cap;
  bool failed;
  int depth;         /* open objects */
  bool first[4];     /* nothing written yet in the object at each depth */
} xf__out;

static void xf__emit(xf__out *o, const char *fmt, ...) XF_PRINTF(2, 3);

static void xf__emit(xf__out *o, const char *fmt, ...) {
  if (o->failed) return;
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) {
    o->failed = true;
    return;
  }
  if (o->len + (size_t)need + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 1024;
    while (cap < o->len + (size_t)need + 1) cap *= 2;
    char *nb = xf_realloc(o->buf, cap);
    if (!nb) {
      o->failed = true;
      return;
    }
    o->buf = nb;
    o->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
  va_end(ap);
  o->len += (size_t)need;
}

/* Starts a member: separator, newline, indentation, "key": . */
static void xf__key(xf__out *o, const char *key) {
  xf__emit(o, "%s\n%*s\"%s\": ", o->first[o->depth] ? "" : ",", 2 * o->depth, "", key);
  o->first[o->depth] = false;
}

static void xf__open(xf__out *o, const char *key) {
  if (key) xf__key(o, key);
  xf__emit(o, "{");
  o->depth++;
  o->first[o->depth] = true;
}

static void xf__close(xf__out *o) {
  o->depth--;
  xf__emit(o, "\n%*s}", 2 * o->depth, "");
}

/* A JSON string with quotes and escapes. */
static void xf__string(xf__out *o, const char *s) {
  xf__emit(o, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      xf__emit(o, "\\%c", *p);
    else if (*p < 0x20)
      xf__emit(o, "\\u%04x", *p);
    else
      xf__emit(o, "%c", *p);
  }
  xf__emit(o, "\"");
}

static void xf__member_string(xf__out *o, const char *key, const char *value) {
  xf__key(o, key);
  xf__string(o, value);
}

static void xf__member_real(xf__out *o, const char *key, double v) {
  char num[40];
  xf__format_real(v, true, num, sizeof(num));
  xf__key(o, key);
  xf__emit(o, "%s", num);
}

static void xf__member_uint(xf__out *o, const char *key, unsigned long long v) {
  xf__key(o, key);
  xf__emit(o, "%llu", v);
}

/* "model": the architecture, and what it declares. */
static void xf__write_model(xf__out *o, const xf_jobspec *s) {
  xf__open(o, "model");
  xf__member_string(o, "arch", xf_job_arch_name(s->model.arch));
  if (s->model.arch == XF_JOB_ARCH_MLP) {
    xf__key(o, "hidden");
    xf__emit(o, "[");
    for (uint32_t i = 0; i < s->model.n_hidden && i < XF_JOB_HIDDEN_MAX; i++)
      xf__emit(o, "%s%u", i ? ", " : "", (unsigned)s->model.hidden[i]);
    xf__emit(o, "]");
  }
  if (s->model.arch == XF_JOB_ARCH_CNN)
    xf__member_string(o, "preset", xf_job_preset_name(s->model.preset));
  if (s->model.arch == XF_JOB_ARCH_LAYERS) {
    xf__key(o, "layers");
    xf__emit(o, "[");
    for (uint32_t i = 0; i < s->model.n_layers && i < XF_JOB_LAYERS_MAX; i++) {
      const xf_layer_decl *d = &s->model.layers[i];
      xf__emit(o, "%s{\"kind\": \"%s\"", i ? ", " : "", xf__layer_kind_name(d->kind));
      /* Each kind writes only its own fields, so the text of a list of the
       * first kinds is what it was before the others existed. */
      switch (d->kind) {
      case XF_DECL_DENSE: xf__emit(o, ", \"units\": %d", d->units); break;
      case XF_DECL_CONV2D:
        xf__emit(o, ", \"filters\": %d, \"kernel\": %d, \"stride\": %d, \"padding\": %d",
                 d->filters, d->kernel, d->stride, d->padding);
        break;
      case XF_DECL_MAXPOOL2D:
      case XF_DECL_AVGPOOL2D:
        xf__emit(o, ", \"kernel\": %d, \"stride\": %d", d->kernel, d->stride);
        break;
      case XF_DECL_DROPOUT: {
        char rate[40];
        xf__format_float(d->rate, rate, sizeof(rate));
        xf__emit(o, ", \"rate\": %s", rate);
        break;
      }
      case XF_DECL_GROUPNORM: xf__emit(o, ", \"groups\": %d", d->groups); break;
      case XF_DECL_EMBEDDING: xf__emit(o, ", \"vocab\": %d, \"dim\": %d", d->vocab, d->dim); break;
      case XF_DECL_ADD: xf__emit(o, ", \"from\": %d", d->from); break;
      default: break;
      }
      xf__emit(o, "}");
    }
    xf__emit(o, "]");
  }
  /* Fields added after the first release are written only when they differ
   * from their default, so that an older spec's canonical text (and what is
   * derived from it) stays what it was. */
  if (s->model.loss != XF_LOSS_CROSS_ENTROPY)
    xf__member_string(o, "loss", xf__loss_names[s->model.loss]);
  xf__close(o);
}

/* "data": the dataset and its tags. */
static void xf__write_data(xf__out *o, const xf_jobspec *s) {
  xf__open(o, "data");
  xf__member_string(o, "dataset", s->data.dataset);
  xf__key(o, "tags");
  xf__emit(o, "[");
  for (uint32_t i = 0; i < s->data.n_tags && i < XF_JOB_TAGS_MAX; i++) {
    if (i) xf__emit(o, ", ");
    xf__string(o, s->data.tags[i]);
  }
  xf__emit(o, "]");
  xf__close(o);
}

/* The rounds, who takes part in each and how long a round may last. */
static void xf__write_cohort(xf__out *o, const xf_jobspec *s) {
  xf__member_uint(o, "rounds", s->rounds);
  if (s->sites_per_round > 1 && s->sites_per_round == floor(s->sites_per_round) &&
      s->sites_per_round <= XF_JOB_SITES_MAX)
    xf__member_uint(o, "sites_per_round", (unsigned long long)s->sites_per_round);
  else
    xf__member_real(o, "sites_per_round", s->sites_per_round);
  xf__member_real(o, "over_selection", s->over_selection);
  xf__member_uint(o, "min_sites", s->min_sites);
  xf__member_real(o, "round_deadline_s", s->round_deadline_s);
  xf__member_string(o, "topology", xf_job_topology_name(s->topology));
}

/* "local": the sites' training, its optimizer and schedule. */
static void xf__write_local(xf__out *o, const xf_jobspec *s) {
  xf__open(o, "local");
  xf__member_uint(o, "epochs", s->local.epochs);
  xf__member_uint(o, "batch_size", s->local.batch_size);
  xf__member_string(o, "optimizer", xf_job_optimizer_name(s->local.optimizer));
  xf__member_real(o, "lr", s->local.lr);
  if (s->local.optimizer == XF_JOB_OPTIMIZER_SGD) {
    xf__member_real(o, "momentum", s->local.momentum);
    if (s->local.nesterov) {
      xf__key(o, "nesterov");
      xf__emit(o, "true");
    }
  } else {
    xf__member_real(o, "beta1", s->local.beta1);
    xf__member_real(o, "beta2", s->local.beta2);
    xf__member_real(o, "eps", s->local.eps);
  }
  xf__member_real(o, "weight_decay", s->local.weight_decay);
  xf__member_real(o, "prox_mu", s->local.prox_mu);
  if (s->local.clip_norm > 0) xf__member_real(o, "clip_norm", s->local.clip_norm);
  if (s->local.lr_schedule.kind != XF_JOB_LR_CONSTANT) {
    xf__open(o, "lr_schedule");
    xf__member_string(o, "kind", xf__lr_schedule_names[s->local.lr_schedule.kind]);
    if (s->local.lr_schedule.kind == XF_JOB_LR_STEP) {
      xf__member_uint(o, "every", s->local.lr_schedule.every);
      xf__member_real(o, "gamma", s->local.lr_schedule.gamma);
    } else {
      xf__member_real(o, "min_lr", s->local.lr_schedule.min_lr);
    }
    xf__close(o);
  }
  xf__close(o);
}

/* "strategy": its name and the hyperparameters it uses. */
static void xf__write_strategy(xf__out *o, const xf_jobspec *s) {
  xf__open(o, "strategy");
  xf__member_string(o, "name", xf_job_strategy_kind_name(s->strategy.kind));
  xf__member_real(o, "server_lr", s->strategy.server_lr);
  for (size_t i = 0; i < XF__COUNT(xf__strategy_params); i++) {
    if (!(xf__strategy_params[i].kinds & XF__KIND(s->strategy.kind))) continue;
    const double *slot =
        (const double *)(const void *)((const char *)&s->strategy + xf__strategy_params[i].offset);
    xf__member_real(o, xf__strategy_params[i].key, *slot);
  }
  xf__close(o);
}

/* "privacy" and "secure_aggregation". */
static void xf__write_protection(xf__out *o, const xf_jobspec *s) {
  xf__open(o, "privacy");
  xf__member_string(o, "unit", xf_job_privacy_unit_name(s->privacy.unit));
  xf__member_string(o, "mode", xf_job_privacy_mode_name(s->privacy.mode));
  if (s->privacy.clip != 0) xf__member_real(o, "clip", s->privacy.clip);
  if (s->privacy.has_target_epsilon)
    xf__member_real(o, "target_epsilon", s->privacy.target_epsilon);
  if (s->privacy.has_noise_multiplier)
    xf__member_real(o, "noise_multiplier", s->privacy.noise_multiplier);
  xf__member_real(o, "delta", s->privacy.delta);
  xf__close(o);

  xf__open(o, "secure_aggregation");
  xf__key(o, "enabled");
  xf__emit(o, "%s", s->secure_aggregation.enabled ? "true" : "false");
  xf__member_uint(o, "bits", s->secure_aggregation.bits);
  xf__member_real(o, "threshold", s->secure_aggregation.threshold);
  xf__close(o);
}

/* "compression": the uplink and the downlink. */
static void xf__write_compression(xf__out *o, const xf_jobspec *s) {
  char uplink[XF_JOB_UPLINK_TEXT_MAX];
  xf__open(o, "compression");
  xf__member_string(o, "uplink",
                    xf_job_uplink_format(&s->compression.uplink, uplink, sizeof(uplink)));
  xf__member_string(o, "downlink", xf_job_downlink_name(s->compression.downlink));
  xf__close(o);
}

/* "seed". */
static void xf__write_seed(xf__out *o, const xf_jobspec *s) {
  /* jansson reads integers up to 2^63 - 1; larger seeds travel as strings. */
  if (s->seed > (uint64_t)INT64_MAX) {
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)s->seed);
    xf__member_string(o, "seed", seed);
  } else {
    xf__member_uint(o, "seed", s->seed);
  }
}

xf_err xf_jobspec_to_json(const xf_jobspec *s, char **out) {
  xf__out o = {.depth = 0, .first = {true}};
  *out = NULL;
  xf__open(&o, NULL);
  xf__member_string(&o, "name", s->name);
  xf__write_model(&o, s);
  xf__write_data(&o, s);
  xf__write_cohort(&o, s);
  xf__write_local(&o, s);
  xf__write_strategy(&o, s);
  xf__write_protection(&o, s);
  xf__write_compression(&o, s);
  xf__write_seed(&o, s);
  xf__close(&o);
  xf__emit(&o, "\n");

  if (o.failed) {
    xf_free(o.buf);
    return XF_ENOMEM;
  }
  *out = o.buf;
  return XF_OK;
}
