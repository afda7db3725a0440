/* SPDX-License-Identifier: Apache-2.0 */
/* The kernels' model for a job spec's "model" section on data of a given
 * shape: the one mapping the coordinator (which builds the initial model),
 * the sites (which check it fits their data) and `xfed train` share. */
#ifndef XF_JOB_JOBMODEL_H
#define XF_JOB_JOBMODEL_H

#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"
#include "kernels/model.h"

/* Fills *out for job's model on records of h x w x c with `classes` labels
 * (at least 2 are used). XF_EINVAL, naming model.arch, for an architecture
 * the kernels do not know. */
xf_err xf_jobspec_model_spec(const xf_jobspec *job, uint32_t h, uint32_t w, uint32_t c,
                             uint32_t classes, xf_model_spec *out, xf_errctx *err) XF_WARN_UNUSED;

#endif
