/* SPDX-License-Identifier: Apache-2.0 */
/* The job spec's validator: each field's range and the rules across fields,
 * for a spec read from JSON or built in code. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "job/jobspec_internal.h"

/* ---- validation ----------------------------------------------------------- */

/* v must lie between lo and hi, each bound open or closed; hi = INFINITY for
 * no upper bound. NaN and infinities always fail. Numbers in the message are
 * shortest round-trip text, so the value shown is the value read. */
static xf_err xf__check_range(const char *field, double v, double lo, bool lo_open, double hi,
                              bool hi_open, xf_errctx *err) {
  bool ok = isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (ok) return XF_OK;
  char got[32], low[32], high[32];
  xf__format_real(v, false, got, sizeof(got));
  xf__format_real(lo, false, low, sizeof(low));
  if (isinf(hi))
    return xf__fail_at(err, XF_ERANGE, field, "must be %s %s, got %s", lo_open ? ">" : ">=", low,
                       got);
  xf__format_real(hi, false, high, sizeof(high));
  return xf__fail_at(err, XF_ERANGE, field, "must be in %c%s, %s%c, got %s", lo_open ? '(' : '[',
                     low, high, hi_open ? ')' : ']', got);
}

#define XF__POSITIVE(field, v) XF_GUARD(xf__check_range(field, v, 0, true, INFINITY, false, err))
#define XF__NONNEG(field, v) XF_GUARD(xf__check_range(field, v, 0, false, INFINITY, false, err))
#define XF__UNIT_OPEN(field, v) XF_GUARD(xf__check_range(field, v, 0, false, 1, true, err))

/* What can be checked of a declared model without the data: each field's
 * range, an embedding only first, an add only from an earlier layer, and a
 * last layer that can give the loss's outputs. Shapes are checked where the
 * data is known (xf_model_create at submission and at each site). A field
 * the kind does not use must be 0, so that two specs that say the same
 * thing compare and print the same. */
static xf_err xf__validate_layers(const xf_job_model *m, xf_errctx *err) {
  if (m->n_layers == 0)
    return xf__missing("model.layers", "a declared model lists its layers, e.g. "
                                       "[{\"kind\": \"dense\", \"units\": 10}]",
                       err);
  XF_GUARD(xf__range_int("model.layers", m->n_layers, 1, XF_JOB_LAYERS_MAX, err));
  for (uint32_t i = 0; i < m->n_layers; i++) {
    const xf_layer_decl *d = &m->layers[i];
    const char *kind = xf_layer_decl_name(d->kind);
    char f[64];
    if (!kind) {
      snprintf(f, sizeof(f), "model.layers[%u].kind", (unsigned)i);
      return xf__fail_at(err, XF_EFORMAT, f, "unknown value %d", (int)d->kind);
    }
    const char *const *used = xf__layer_fields(d->kind);
    const struct {
      const char *name;
      int v, lo, hi;
    } ints[] = {
        {"units", d->units, 1, XF_DECL_UNITS_MAX},
        {"filters", d->filters, 1, XF_DECL_FILTERS_MAX},
        {"kernel", d->kernel, 1, XF_DECL_KERNEL_MAX},
        {"stride", d->stride, 1, XF_DECL_KERNEL_MAX},
        {"padding", d->padding, 0, d->kernel - 1},
        {"groups", d->groups, 1, XF_DECL_GROUPS_MAX},
        {"vocab", d->vocab, 1, XF_DECL_VOCAB_MAX},
        {"dim", d->dim, 1, XF_DECL_DIM_MAX},
        {"from", d->from, -1, (int)i - 1},
    };
    for (size_t k = 0; k < XF__COUNT(ints); k++) {
      snprintf(f, sizeof(f), "model.layers[%u].%s", (unsigned)i, ints[k].name);
      if (!xf__has_key(used, ints[k].name)) {
        if (ints[k].v != 0)
          return xf__fail_at(err, XF_EFORMAT, f, "%d, but %s %s layer has no %s; leave it 0",
                             ints[k].v, xf__article(kind), kind, ints[k].name);
      } else if (strcmp(ints[k].name, "from") == 0) {
        XF_GUARD(xf__check_from(f, ints[k].v, i, err));
      } else {
        XF_GUARD(xf__range_int(f, ints[k].v, ints[k].lo, ints[k].hi, err));
      }
    }
    snprintf(f, sizeof(f), "model.layers[%u].rate", (unsigned)i);
    if (d->kind == XF_DECL_DROPOUT) XF_GUARD(xf__check_rate(f, d->rate, err));
    else if (d->rate != 0)
      return xf__fail_at(err, XF_EFORMAT, f, "%g, but %s %s layer has no rate; leave it 0",
                         (double)d->rate, xf__article(kind), kind);
    if (d->kind == XF_DECL_EMBEDDING && i != 0) {
      snprintf(f, sizeof(f), "model.layers[%u]", (unsigned)i);
      return xf__fail_at(err, XF_EFORMAT, f,
                         "an embedding layer reads ids from the data, so it must be the first "
                         "layer (model.layers[0])");
    }
  }
  const xf_layer_decl *last = &m->layers[m->n_layers - 1];
  if (last->kind != XF_DECL_DENSE) {
    char f[48];
    snprintf(f, sizeof(f), "model.layers[%u]", (unsigned)(m->n_layers - 1));
    return xf__fail_at(err, XF_EFORMAT, f,
                       "the last layer is %s; a model ends in a dense layer giving the loss's "
                       "outputs (the classes for cross_entropy, 1 for binary_cross_entropy and "
                       "mse)",
                       xf__layer_kind_name(last->kind));
  }
  if (m->loss != XF_LOSS_CROSS_ENTROPY && last->units != 1) {
    char f[48];
    snprintf(f, sizeof(f), "model.layers[%u].units", (unsigned)(m->n_layers - 1));
    return xf__fail_at(err, XF_EFORMAT, f, "%d, but %s needs exactly 1 output from the last layer",
                       last->units, xf__loss_names[m->loss]);
  }
  return XF_OK;
}

static xf_err xf__validate_model(const xf_job_model *m, xf_errctx *err) {
  if ((unsigned)m->arch >= XF__COUNT(xf__arch_names))
    return xf__fail_at(err, XF_EFORMAT, "model.arch", "unknown value %d", (int)m->arch);
  if ((unsigned)m->loss >= XF__COUNT(xf__loss_names))
    return xf__fail_at(err, XF_EFORMAT, "model.loss", "unknown value %d", (int)m->loss);
  if ((unsigned)m->preset >= XF__COUNT(xf__preset_names))
    return xf__fail_at(err, XF_EFORMAT, "model.preset", "unknown value %d", (int)m->preset);
  if (m->arch == XF_JOB_ARCH_MLP) {
    if (m->n_hidden == 0)
      return xf__missing("model.hidden", "arch \"mlp\" needs its hidden layer widths, e.g. "
                                         "[200, 200]",
                         err);
    XF_GUARD(xf__range_int("model.hidden", m->n_hidden, 1, XF_JOB_HIDDEN_MAX, err));
    for (uint32_t i = 0; i < m->n_hidden; i++) {
      char field[64];
      snprintf(field, sizeof(field), "model.hidden[%u]", (unsigned)i);
      XF_GUARD(xf__range_int(field, m->hidden[i], 1, XF_JOB_WIDTH_MAX, err));
    }
  } else if (m->n_hidden != 0) {
    return xf__fail_at(err, XF_EFORMAT, "model.hidden",
                       "has no effect with arch \"%s\"; it is used only by \"mlp\"",
                       xf__arch_names[m->arch]);
  }
  if (m->arch == XF_JOB_ARCH_LAYERS) {
    XF_GUARD(xf__validate_layers(m, err));
  } else if (m->n_layers != 0) {
    return xf__fail_at(err, XF_EFORMAT, "model.layers",
                       "declares the model itself, so it cannot go with arch \"%s\"; leave "
                       "model.arch out",
                       xf__arch_names[m->arch]);
  }
  if (m->arch == XF_JOB_ARCH_LAYERS && m->preset != XF_JOB_PRESET_NONE)
    return xf__fail_at(err, XF_EFORMAT, "model.preset",
                       "has no effect with model.layers; a preset is a layer list of its own, "
                       "use one or the other");
  if (m->arch == XF_JOB_ARCH_CNN && m->preset == XF_JOB_PRESET_NONE)
    return xf__missing("model.preset", "arch \"cnn\" needs one of: lenet5, fedavg-cnn", err);
  if (m->arch != XF_JOB_ARCH_CNN && m->preset != XF_JOB_PRESET_NONE)
    return xf__fail_at(err, XF_EFORMAT, "model.preset",
                       "has no effect with arch \"%s\"; it is used only by \"cnn\"",
                       xf__arch_names[m->arch]);
  if (m->arch == XF_JOB_ARCH_MLP) {
    /* The hidden layers alone can exceed the limit, whatever the data: with
     * one feature and two classes the model is the smallest it can be. The
     * count on the real data is checked where the data is known
     * (xf_jobspec_model_spec). */
    xf_jobspec one = {.model = *m};
    uint64_t n = 0;
    if (xf_jobspec_model_params(&one, 1, 1, 1, 2, &n, NULL) == XF_OK && n > XF_JOB_PARAMS_MAX)
      return xf__fail_at(err, XF_ERANGE, "model.hidden",
                         "these layers have %llu parameters before any input feature is "
                         "counted, more than the %u a job's model may have (its float32 model "
                         "file must fit the 1 GiB a model stream carries); use fewer or "
                         "narrower hidden layers",
                         (unsigned long long)n, XF_JOB_PARAMS_MAX);
  }
  return XF_OK;
}

static xf_err xf__validate_data(const xf_job_data *d, xf_errctx *err) {
  if (d->dataset[0] == '\0')
    return xf__missing("data.dataset", "the name sites registered the dataset under", err);
  XF_GUARD(xf__check_ident("data.dataset", d->dataset, sizeof(d->dataset), err));
  XF_GUARD(xf__range_int("data.tags", d->n_tags, 0, XF_JOB_TAGS_MAX, err));
  for (uint32_t i = 0; i < d->n_tags; i++) {
    char field[64];
    snprintf(field, sizeof(field), "data.tags[%u]", (unsigned)i);
    XF_GUARD(xf__check_ident(field, d->tags[i], sizeof(d->tags[i]), err));
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(d->tags[i], d->tags[j]) == 0)
        return xf__fail_at(err, XF_EFORMAT, field, "repeats tag \"%s\" (data.tags[%u])",
                           d->tags[i], (unsigned)j);
  }
  return XF_OK;
}

static xf_err xf__validate_local(const xf_job_local *l, xf_errctx *err) {
  XF_GUARD(xf__range_int("local.epochs", l->epochs, 1, XF_JOB_EPOCHS_MAX, err));
  XF_GUARD(xf__range_int("local.batch_size", l->batch_size, 1, XF_JOB_BATCH_MAX, err));
  if ((unsigned)l->optimizer >= XF__COUNT(xf__optimizer_names))
    return xf__fail_at(err, XF_EUNSUPPORTED, "local.optimizer",
                       "unknown optimizer %d: use sgd, adam or adamw", (int)l->optimizer);
  XF__POSITIVE("local.lr", l->lr);
  XF__UNIT_OPEN("local.momentum", l->momentum);
  if (l->nesterov && !(l->momentum > 0))
    return xf__fail_at(err, XF_ERANGE, "local.nesterov",
                       "Nesterov momentum needs local.momentum > 0 (0.9 is usual)");
  XF__UNIT_OPEN("local.beta1", l->beta1);
  XF__UNIT_OPEN("local.beta2", l->beta2);
  XF_GUARD(xf__check_range("local.eps", l->eps, 0, true, 1, false, err));
  XF__NONNEG("local.weight_decay", l->weight_decay);
  XF__NONNEG("local.prox_mu", l->prox_mu);
  XF__NONNEG("local.clip_norm", l->clip_norm);
  if ((unsigned)l->lr_schedule.kind >= XF__COUNT(xf__lr_schedule_names))
    return xf__fail_at(err, XF_EFORMAT, "local.lr_schedule.kind", "unknown value %d",
                       (int)l->lr_schedule.kind);
  XF_GUARD(xf__range_int("local.lr_schedule.every", l->lr_schedule.every, 1, XF_JOB_ROUNDS_MAX,
                         err));
  XF_GUARD(xf__check_range("local.lr_schedule.gamma", l->lr_schedule.gamma, 0, true, 1, false,
                           err));
  XF_GUARD(xf__check_range("local.lr_schedule.min_lr", l->lr_schedule.min_lr, 0, false, l->lr,
                           false, err));
  return XF_OK;
}

static xf_err xf__validate_strategy(const xf_job_strategy *s, xf_errctx *err) {
  if ((unsigned)s->kind >= XF__COUNT(xf__strategy_names))
    return xf__fail_at(err, XF_EFORMAT, "strategy.name", "unknown value %d", (int)s->kind);
  XF__POSITIVE("strategy.server_lr", s->server_lr);
  XF__UNIT_OPEN("strategy.server_momentum", s->server_momentum);
  XF__UNIT_OPEN("strategy.beta1", s->beta1);
  XF__UNIT_OPEN("strategy.beta2", s->beta2);
  XF__POSITIVE("strategy.tau", s->tau);
  XF_GUARD(xf__check_range("strategy.trim_fraction", s->trim_fraction, 0, false, 0.5, true, err));
  return XF_OK;
}

static xf_err xf__validate_privacy(const xf_privacy_spec *p, xf_errctx *err) {
  if ((unsigned)p->unit >= XF__COUNT(xf__unit_names))
    return xf__fail_at(err, XF_EFORMAT, "privacy.unit", "unknown value %d", (int)p->unit);
  if ((unsigned)p->mode >= XF__COUNT(xf__mode_names))
    return xf__fail_at(err, XF_EFORMAT, "privacy.mode", "unknown value %d", (int)p->mode);
  const char *mode = xf__mode_names[p->mode];
  if (p->mode == XF_PRIVACY_NONE) {
    if (p->clip != 0) XF__POSITIVE("privacy.clip", p->clip);
    if (p->has_target_epsilon)
      return xf__fail_at(err, XF_EFORMAT, "privacy.target_epsilon",
                         "mode \"none\" adds no noise, so no epsilon is guaranteed; set mode to "
                         "central, distributed or local, or remove target_epsilon");
    if (p->has_noise_multiplier)
      return xf__fail_at(err, XF_EFORMAT, "privacy.noise_multiplier",
                         "mode \"none\" adds no noise; set mode to central, distributed or "
                         "local, or remove noise_multiplier");
  } else {
    if (p->clip == 0)
      return xf__missing("privacy.clip",
                         "differential privacy bounds each contribution's L2 norm by clip (the "
                         "noise is scaled to it), e.g. 1.0",
                         err);
    XF__POSITIVE("privacy.clip", p->clip);
    if (!p->has_target_epsilon && !p->has_noise_multiplier)
      return xf__fail_at(err, XF_EFORMAT, "privacy.target_epsilon",
                         "mode \"%s\" needs target_epsilon (the noise is calibrated to reach it "
                         "over the job) or noise_multiplier (or both)",
                         mode);
  }
  if (p->has_target_epsilon) XF__POSITIVE("privacy.target_epsilon", p->target_epsilon);
  if (p->has_noise_multiplier) XF__NONNEG("privacy.noise_multiplier", p->noise_multiplier);
  XF_GUARD(xf__check_range("privacy.delta", p->delta, 0, true, 1, true, err));
  if (p->unit == XF_PRIVACY_UNIT_RECORD &&
      (p->mode == XF_PRIVACY_CENTRAL || p->mode == XF_PRIVACY_DISTRIBUTED))
    return xf__fail_at(err, XF_EFORMAT, "privacy.mode",
                       "unit \"record\" is protected by DP-SGD noise added at each site during "
                       "training; use mode \"local\" (or unit \"site\" for mode \"%s\")",
                       mode);
  return XF_OK;
}

static xf_err xf__validate_sites(const xf_jobspec *s, xf_errctx *err) {
  XF_GUARD(xf__range_int("rounds", s->rounds, 1, XF_JOB_ROUNDS_MAX, err));
  double spr = s->sites_per_round;
  char num[32];
  if (!(isfinite(spr) && spr > 0 && spr <= XF_JOB_SITES_MAX))
    return xf__fail_at(err, XF_ERANGE, "sites_per_round",
                       "must be a fraction in (0, 1] of the eligible sites or a count from 2 to "
                       "%u, got %s",
                       XF_JOB_SITES_MAX, xf__num(spr, num));
  if (spr > 1 && spr != floor(spr))
    return xf__fail_at(err, XF_ERANGE, "sites_per_round",
                       "%s is above 1, so it is a number of sites and must be whole; use a "
                       "fraction in (0, 1] or a count such as %.0f",
                       xf__num(spr, num), floor(spr));
  XF_GUARD(xf__check_range("over_selection", s->over_selection, 1, false,
                           XF_JOB_OVER_SELECTION_MAX, false, err));
  XF_GUARD(xf__range_int("min_sites", s->min_sites, 1, XF_JOB_SITES_MAX, err));
  XF_GUARD(xf__check_range("round_deadline_s", s->round_deadline_s, 0, true,
                           XF_JOB_DEADLINE_MAX_S, false, err));
  if (spr > 1 && s->min_sites > spr)
    return xf__fail_at(err, XF_ERANGE, "min_sites",
                       "is %u but sites_per_round selects only %g sites, so no round could "
                       "count; lower min_sites or raise sites_per_round",
                       (unsigned)s->min_sites, spr);
  return XF_OK;
}

xf_err xf_jobspec_validate(const xf_jobspec *s, xf_errctx *err) {
  if (s->name[0] == '\0') return xf__missing("name", "a job name such as \"fmnist-mlp\"", err);
  XF_GUARD(xf__check_ident("name", s->name, sizeof(s->name), err));
  XF_GUARD(xf__validate_model(&s->model, err));
  XF_GUARD(xf__validate_data(&s->data, err));
  XF_GUARD(xf__validate_sites(s, err));
  XF_GUARD(xf__validate_local(&s->local, err));
  XF_GUARD(xf__validate_strategy(&s->strategy, err));
  XF_GUARD(xf__validate_privacy(&s->privacy, err));

  const xf_job_secagg *sa = &s->secure_aggregation;
  XF_GUARD(xf__range_int("secure_aggregation.bits", sa->bits, 8, 32, err));
  XF_GUARD(xf__check_range("secure_aggregation.threshold", sa->threshold, 0, true, 1, false, err));
  /* The sites refuse a round where half of them could unmask a site's
   * input against an aggregator that lies about who dropped
   * (docs/secure-aggregation.md): t = ceil(threshold * n) must be above
   * n / 2 whatever n the round has. */
  if (sa->enabled && !(sa->threshold > 0.5)) {
    char num[32];
    return xf__fail_at(err, XF_ERANGE, "secure_aggregation.threshold",
                       "must be above 0.5 with secure aggregation (got %s): no site reveals "
                       "before more than half of the round's sites have signed the same "
                       "survivor set, so that an aggregator that lies about who dropped cannot "
                       "unmask a site; the default is 0.66",
                       xf__num(sa->threshold, num));
  }

  const xf_job_uplink *up = &s->compression.uplink;
  char num[32];
  if (up->topk_fraction != 0 && !(up->topk_fraction > 0 && up->topk_fraction <= 1))
    return xf__fail_at(err, XF_ERANGE, "compression.uplink",
                       "the top-k fraction must be in (0, 1], got %s",
                       xf__num(up->topk_fraction, num));
  if (up->quant_bits != 0 && up->quant_bits != 4 && up->quant_bits != 8 && up->quant_bits != 16)
    return xf__fail_at(err, XF_EFORMAT, "compression.uplink",
                       "quantization is available at 16, 8 or 4 bits, got %u",
                       (unsigned)up->quant_bits);
  if ((unsigned)s->compression.downlink >= XF__COUNT(xf__downlink_names))
    return xf__fail_at(err, XF_EFORMAT, "compression.downlink", "unknown value %d",
                       (int)s->compression.downlink);

  /* Cross-field rules. */
  const char *strategy = xf__strategy_names[s->strategy.kind];
  if (s->local.clip_norm > 0 && s->privacy.unit == XF_PRIVACY_UNIT_RECORD &&
      s->privacy.mode != XF_PRIVACY_NONE)
    return xf__fail_at(err, XF_EFORMAT, "local.clip_norm",
                       "cannot be used with record-level privacy: DP-SGD already clips every "
                       "record's gradient to privacy.clip; leave local.clip_norm out");
  if (s->strategy.kind == XF_JOB_STRATEGY_FEDPROX && !(s->local.prox_mu > 0))
    return xf__fail_at(err, XF_ERANGE, "local.prox_mu",
                       "strategy \"fedprox\" needs a proximal term: set prox_mu > 0 (Li et al. "
                       "2020 use 0.001 to 1), or leave it out for %g",
                       XF__FEDPROX_DEFAULT_MU);
  if ((unsigned)s->topology >= XF__COUNT(xf__topology_names))
    return xf__fail_at(err, XF_EFORMAT, "topology", "unknown value %d", (int)s->topology);
  if (xf_job_strategy_is_robust(s->strategy.kind) && s->privacy.unit == XF_PRIVACY_UNIT_SITE &&
      s->privacy.mode == XF_PRIVACY_CENTRAL)
    return xf__fail_at(err, XF_EFORMAT, "privacy.mode",
                       "central noise is calibrated to the sensitivity of a mean (clip / n), but "
                       "a coordinate-wise \"%s\" can move further when one site changes; use "
                       "mode \"local\", unit \"record\", or a mean-based strategy",
                       strategy);
  if (sa->enabled && xf_job_strategy_is_robust(s->strategy.kind))
    return xf__fail_at(err, XF_EFORMAT, "strategy.name",
                       "\"%s\" needs to see each site's update, which secure aggregation hides "
                       "(only the sum is revealed); choose a mean-based strategy such as fedavg "
                       "or set secure_aggregation.enabled to false",
                       strategy);
  if (sa->enabled && up->quant_bits > sa->bits)
    return xf__fail_at(err, XF_ERANGE, "secure_aggregation.bits",
                       "is %u but the uplink is quantized to %u bits, and masked values are "
                       "summed mod 2^bits; set bits to at least %u (20 leaves room for 4096 sites "
                       "at q8)",
                       (unsigned)sa->bits, (unsigned)up->quant_bits, (unsigned)up->quant_bits);
  if (sa->enabled && s->min_sites < 2)
    return xf__fail_at(err, XF_ERANGE, "min_sites",
                       "is 1, but a securely aggregated sum over one site is that site's "
                       "update; set min_sites to 2 or more");
  if (s->privacy.mode == XF_PRIVACY_DISTRIBUTED && !sa->enabled)
    return xf__fail_at(err, XF_EFORMAT, "privacy.mode",
                       "\"distributed\" adds only a share of the noise at each site and relies "
                       "on secure aggregation to hide single updates; set "
                       "secure_aggregation.enabled to true, or use mode \"central\"");
  return XF_OK;
}
