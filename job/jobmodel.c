/* SPDX-License-Identifier: Apache-2.0 */
/* Job spec model section → kernels model spec (job/jobmodel.h). */
#include "job/jobmodel.h"

#include <string.h>

xf_err xf_jobspec_model_spec(const xf_jobspec *job, uint32_t h, uint32_t w, uint32_t c,
                             uint32_t classes, xf_model_spec *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  out->in_h = (int)h;
  out->in_w = (int)w;
  out->in_c = (int)c;
  out->classes = classes < 2 ? 2 : (int)classes;
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
  default:
    return xf_fail(err, XF_EINVAL, "model.arch: unknown architecture %d", (int)job->model.arch);
  }
  return XF_OK;
}
