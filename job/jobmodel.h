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
#include "kernels/train.h"

/* The most parameters a job's model may have. The binding limit is the
 * model stream: a regional aggregator takes a model file of at most 1 GiB
 * (XF_COORD_MODEL_MAX), and the float32 model file is 4 bytes a parameter
 * plus a header of at most 1 MiB (docs/model-format.md); 250 million
 * parameters leave room for that header. XF_CODEC_N_MAX (2^32 - 1 values)
 * is far above it. */
#define XF_JOB_PARAMS_MAX 250000000u

/* Fills *out for job's model on records of h x w x c with `classes` labels
 * (at least 2 are used). XF_EINVAL, naming model.arch, for an architecture
 * the kernels do not know; XF_ERANGE, naming model.hidden (mlp) or model,
 * the count and the limit, when the model would have more than
 * XF_JOB_PARAMS_MAX parameters on such records. */
xf_err xf_jobspec_model_spec(const xf_jobspec *job, uint32_t h, uint32_t w, uint32_t c,
                             uint32_t classes, xf_model_spec *out, xf_errctx *err) XF_WARN_UNUSED;

/* The parameter count of job's model on records of h x w x c with `classes`
 * labels, into *out, without allocating the parameters. Errors of
 * xf_model_create for a shape or a width the kernels refuse. */
xf_err xf_jobspec_model_params(const xf_jobspec *job, uint32_t h, uint32_t w, uint32_t c,
                               uint32_t classes, uint64_t *out, xf_errctx *err) XF_WARN_UNUSED;

/* The optimizer part of xf_train_options for a local run in round `round`
 * (1-based) of job: optimizer, its hyperparameters, weight decay, the
 * FedProx term, clip_norm and the round's learning rate
 * (xf_jobspec_local_lr). The other fields of *opt are left alone. */
void xf_jobspec_train_options(const xf_jobspec *job, uint32_t round, xf_train_options *opt);

#endif
