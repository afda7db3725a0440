/* SPDX-License-Identifier: Apache-2.0 */
/* Job spec model section → kernels model spec (job/jobmodel.h). */
#include "job/jobmodel.h"

#include <string.h>

/* The kernels' mapping, without the limit on its size. */
static xf_err model_spec_of(const xf_jobspec *job, uint32_t h, uint32_t w, uint32_t c,
                            uint32_t classes, xf_model_spec *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  out->in_h = (int)h;
  out->in_w = (int)w;
  out->in_c = (int)c;
  out->classes = classes < 2 ? 2 : (int)classes;
  out->loss = job->model.loss;
  switch (job->model.arch) {
  case XF_JOB_ARCH_LOGREG: out->arch = XF_ARCH_LOGREG; break;
  case XF_JOB_ARCH_MLP:
    out->arch = XF_ARCH_MLP;
    out->n_hidden = (int)job->model.n_hidden;
    for (uint32_t i = 0; i < job->model.n_hidden && i < XF_MODEL_MAX_HIDDEN; i++)
      out->hidden[i] = (int)job->model.hidden[i];
    break;
  case XF_JOB_ARCH_CNN:
    out->arch = XF_ARCH_CNN;
    out->preset = job->model.preset == XF_JOB_PRESET_FEDAVG_CNN ? XF_CNN_FEDAVG : XF_CNN_LENET5;
    break;
  case XF_JOB_ARCH_LAYERS:
    out->arch = XF_ARCH_LAYERS;
    out->n_layers = (int)job->model.n_layers;
    for (uint32_t i = 0; i < job->model.n_layers && i < XF_MODEL_MAX_LAYERS; i++)
      out->layers[i] = job->model.layers[i];
    break;
  default:
    return xf_fail(err, XF_EINVAL, "model.arch: unknown architecture %d", (int)job->model.arch);
  }
  return XF_OK;
}

/* The count from the kernels' own layer table: a model handle holds no
 * parameters, so building one costs a small allocation whatever its size. */
static xf_err params_of(const xf_model_spec *ms, uint64_t *out, xf_errctx *err) {
  xf_model *m = NULL;
  XF_GUARD(xf_model_create(ms, &m, err));
  *out = (uint64_t)xf_model_num_params(m);
  xf_model_free(m);
  return XF_OK;
}

xf_err xf_jobspec_model_params(const xf_jobspec *job, uint32_t h, uint32_t w, uint32_t c,
                               uint32_t classes, uint64_t *out, xf_errctx *err) {
  xf_model_spec ms;
  XF_GUARD(model_spec_of(job, h, w, c, classes, &ms, err));
  return params_of(&ms, out, err);
}

xf_err xf_jobspec_model_spec(const xf_jobspec *job, uint32_t h, uint32_t w, uint32_t c,
                             uint32_t classes, xf_model_spec *out, xf_errctx *err) {
  XF_GUARD(model_spec_of(job, h, w, c, classes, out, err));
  uint64_t n = 0;
  /* A shape the kernels refuse is the caller's to report when it builds
   * the model; only a count can be checked here. */
  xf_errctx ignored = {0};
  if (params_of(out, &n, &ignored) != XF_OK || n <= XF_JOB_PARAMS_MAX) return XF_OK;
  xf_errctx_field(err, "%s", job->model.arch == XF_JOB_ARCH_MLP      ? "model.hidden"
                             : job->model.arch == XF_JOB_ARCH_LAYERS ? "model.layers"
                                                                     : "model");
  return xf_fail(err, XF_ERANGE,
                 "the model has %llu parameters on records of %ux%ux%u with %u classes, more "
                 "than the %u a job's model may have (its float32 model file must fit the 1 GiB "
                 "a model stream carries)%s",
                 (unsigned long long)n, (unsigned)h, (unsigned)w, (unsigned)c,
                 (unsigned)out->classes, XF_JOB_PARAMS_MAX,
                 job->model.arch == XF_JOB_ARCH_MLP ? "; use fewer or narrower hidden layers"
                 : job->model.arch == XF_JOB_ARCH_LAYERS
                     ? "; use fewer units or filters, or pool or stride before the dense layers"
                     : "");
}

void xf_jobspec_train_options(const xf_jobspec *job, uint32_t round, xf_train_options *opt) {
  const xf_job_local *l = &job->local;
  opt->sgd = (xf_sgd_params){.lr = (float)xf_jobspec_local_lr(job, round),
                             .momentum = (float)l->momentum,
                             .weight_decay = (float)l->weight_decay,
                             .prox_mu = (float)l->prox_mu,
                             .nesterov = l->nesterov};
  opt->optimizer = l->optimizer == XF_JOB_OPTIMIZER_ADAM    ? XF_OPTIMIZER_ADAM
                   : l->optimizer == XF_JOB_OPTIMIZER_ADAMW ? XF_OPTIMIZER_ADAMW
                                                            : XF_OPTIMIZER_SGD;
  opt->beta1 = (float)l->beta1;
  opt->beta2 = (float)l->beta2;
  opt->eps = (float)l->eps;
  opt->clip_norm = l->clip_norm;
}
