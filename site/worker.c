/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon's worker: the dataset cache, the model's checks,
 * training (native or by an external trainer) and the update's
 * preparation on the worker thread; what the loop does with the result
 * (site/daemon_internal.h). */
#include "site/daemon_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "crypto/digest.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/jobspec.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "kernels/net.h"
#include "kernels/train.h"
#include "privacy/ledger.h"
#include "privacy/noise.h"
#include "site/trainer.h"
#include "update/update.h"

/* ---- the dataset, on the worker ----------------------------------------------------- */

void xf__site_cache_free(data_cache *c) {
  xf_dataset_free(&c->train);
  xf_dataset_free(&c->test);
  xf_free(c->path);
  memset(c, 0, sizeof(*c));
}

/* The registered dataset in memory: loaded once, after its files are checked
 * against the digest taken at registration, and kept while the registry
 * record stays the same. */
static xf_err cache_get(data_cache *c, const xf_site_dataset *ds, xf_errctx *err) {
  if (c->loaded && strcmp(c->name, ds->name) == 0 && strcmp(c->digest, ds->digest) == 0 &&
      strcmp(c->path, ds->path) == 0)
    return XF_OK;
  xf__site_cache_free(c);
  xf_digest now;
  xf_err rc = xf_site_data_digest(ds->path, ds->layout, &now, err);
  if (rc != XF_OK) return rc;
  char hex[XF_DIGEST_HEX];
  xf_digest_hex(&now, hex);
  if (strcmp(hex, ds->digest) != 0)
    return xf_fail(err, XF_EINTEGRITY,
                   "the files of dataset %s in %s changed since it was registered (digest %.16s..., "
                   "registered %.16s...); check them with 'xfed-site dataset verify', then rm and "
                   "add the dataset again if the change is intended",
                   ds->name, ds->path, hex, ds->digest);
  XF_GUARD(xf_dataset_load_dir(ds->path, &c->train, &c->test, err));
  c->path = xf_strdup(ds->path);
  if (!c->path) {
    xf__site_cache_free(c);
    return xf_fail(err, XF_ENOMEM, "cannot keep the dataset's path");
  }
  snprintf(c->name, sizeof(c->name), "%s", ds->name);
  snprintf(c->digest, sizeof(c->digest), "%s", ds->digest);
  c->loaded = true;
  XF_INFO("dataset_loaded", "dataset=%s train_records=%u test_records=%u", ds->name, c->train.n,
          c->test.n);
  return XF_OK;
}

/* ---- models ------------------------------------------------------------------------- */

/* Whether the received model is the job's model and takes this data: the
 * architecture the spec names, the records' shape (exactly, for a cnn; the
 * number of features, for dense models) and every label below its classes. */
static xf_err model_fits(const xf_model *m, const xf_jobspec *job, const xf_dataset *train,
                         const xf_dataset *test, xf_errctx *err) {
  const xf_model_spec *ms = xf_model_spec_of(m);
  xf_model_spec want;
  XF_GUARD(xf_jobspec_model_spec(job, train->h, train->w, train->c, train->classes, &want, err));
  bool same_arch = ms->arch == want.arch;
  if (same_arch && ms->arch == XF_ARCH_MLP) {
    same_arch = ms->n_hidden == want.n_hidden;
    for (int i = 0; same_arch && i < ms->n_hidden; i++) same_arch = ms->hidden[i] == want.hidden[i];
  }
  if (same_arch && ms->arch == XF_ARCH_CNN) same_arch = ms->preset == want.preset;
  if (same_arch && ms->arch == XF_ARCH_LAYERS) {
    same_arch = ms->n_layers == want.n_layers;
    for (int i = 0; same_arch && i < ms->n_layers; i++)
      same_arch = xf_layer_decl_equal(&ms->layers[i], &want.layers[i]);
  }
  XF_ENSURE(ms->loss == want.loss, err, XF_EINVAL,
            "the model is trained on %s, but the job spec's model.loss is %s",
            xf_loss_name(ms->loss), xf_loss_name(want.loss));
  XF_ENSURE(same_arch, err, XF_EINVAL, "the model is %s, but the job spec's model section says "
            "otherwise", xf_model_describe(m));
  if (ms->arch == XF_ARCH_CNN || ms->arch == XF_ARCH_LAYERS)
    XF_ENSURE(ms->in_h == (int)train->h && ms->in_w == (int)train->w &&
                  ms->in_c == (int)train->c,
              err, XF_EINVAL, "the model takes %dx%dx%d images, the dataset holds %ux%ux%u",
              ms->in_h, ms->in_w, ms->in_c, train->h, train->w, train->c);
  XF_ENSURE(xf_model_input_size(m) == train->features, err, XF_EINVAL,
            "the model takes %zu features per record, the dataset has %u",
            xf_model_input_size(m), train->features);
  uint32_t classes = train->classes > test->classes ? train->classes : test->classes;
  XF_ENSURE((uint32_t)ms->classes >= classes, err, XF_EINVAL,
            "the model has %d classes, the dataset's labels need %u", ms->classes, classes);
  return XF_OK;
}

/* ---- training, on the worker ------------------------------------------------------------ */

typedef struct train_watch {
  task *t;
  double last_loss;
} train_watch;

static bool train_should_stop(void *user) {
  return atomic_load(&((train_watch *)user)->t->abandoned);
}

static void train_epoch(const xf_epoch_report *r, void *user) {
  train_watch *w = user;
  w->last_loss = r->train_loss;
  XF_DEBUG("task_epoch", "job=%s round=%u epoch=%d epochs=%d seconds=%.3f", w->t->job_id,
           (unsigned)w->t->round, r->epoch, r->epochs, r->seconds);
}

static void task_fail(task *t, Xfed__TaskRefusal__Reason reason, const char *what,
                      const xf_errctx *err) {
  char msg[520];
  xf_errctx_format(err, msg, sizeof(msg));
  t->failed = true;
  t->fail_code = err->code != XF_OK ? err->code : XF_EINTERNAL;
  t->fail_reason = reason;
  snprintf(t->fail_detail, sizeof(t->fail_detail), "%s: %s", what, msg);
}

/* Runs the dataset's external trainer for t on the worker thread: the work
 * directory <site>/trainers/<job>-r<round>-a<attempt>/ with task.json and
 * global.npy, the program under its time limit (stopped when the task is
 * abandoned), its outputs validated and, under record-level privacy, its
 * DP declaration checked against the job's plan; the charge the ledger
 * records becomes what the trainer declared (at most the plan's). On
 * success *local holds the trained weights (the caller frees them). */
static xf_err run_trainer(daemon_t *d, task *t, const xf_model *model, const float *global,
                          float **local, double *loss, xf_errctx *err) {
  const xf_site_dataset *ds = &t->dataset;
  const xf_privacy_spec *pv = &t->spec.privacy;
  bool record = t->plan.site_noise && pv->unit == XF_PRIVACY_UNIT_RECORD;
  XF_ENSURE(!record || ds->trainer_dp_declared, err, XF_EDENIED,
            "dataset '%s' is trained by %s, declared --trainer-dp none, and the job asks for "
            "record-level privacy", ds->name, ds->trainer);
  char base[PATH_MAX], job[JOB_ID_MAX], work[PATH_MAX + 2 * JOB_ID_MAX], log[sizeof(work) + 8];
  if (!realpath(d->dir, base))
    return xf_fail(err, XF_EIO, "cannot resolve the site directory %s: %s", d->dir,
                   strerror(errno));
  size_t k = 0;
  for (const char *c = t->job_id; *c && k + 1 < sizeof(job); c++)
    job[k++] = (isalnum((unsigned char)*c) || *c == '-' || *c == '_') ? *c : '_';
  job[k] = '\0';
  snprintf(work, sizeof(work), "%s/trainers", base);
  if (mkdir(work, 0700) != 0 && errno != EEXIST)
    return xf_fail(err, XF_EIO, "cannot create %s: %s", work, strerror(errno));
  snprintf(work, sizeof(work), "%s/trainers/%s-r%u-a%u", base, job, (unsigned)t->round,
           (unsigned)t->attempt);
  snprintf(log, sizeof(log), "%s.log", work);
  xf_trainer_dir_remove(work);
  if (mkdir(work, 0700) != 0)
    return xf_fail(err, XF_EIO, "cannot create the trainer's work directory %s: %s", work,
                   strerror(errno));
  xf_trainer_dp_need need = {.record = record,
                             .clip = pv->clip,
                             .noise_multiplier = t->plan.accounted_multiplier,
                             .sampling_rate = t->plan.sampling_rate,
                             .steps = t->plan.steps_per_round};
  xf_trainer_task tt = {.job_id = t->job_id,
                        .round = t->round,
                        .seed = t->shuffle_seed,
                        .spec = &t->spec,
                        .lr = xf_jobspec_local_lr(&t->spec, t->round),
                        .dataset_name = ds->name,
                        .dataset_dir = ds->path,
                        .dataset_layout = xf_dataset_layout_name(ds->layout),
                        .train_records = ds->train_records,
                        .test_records = ds->test_records,
                        .features = ds->features,
                        .classes = ds->classes,
                        .h = ds->h,
                        .w = ds->w,
                        .c = ds->c,
                        .model = model,
                        .global = global,
                        .dp = need};
  xf_trainer_result res = {0};
  double t0 = xf__site_mono_s();
  XF_INFO("trainer_started", "job=%s round=%u attempt=%u dataset=%s program=%s log=%s",
          t->job_id, (unsigned)t->round, (unsigned)t->attempt, ds->name, ds->trainer, log);
  xf_err rc = xf_trainer_write_task(work, &tt, err);
  if (rc == XF_OK)
    rc = xf_trainer_run(ds->trainer, work, log, (double)ds->trainer_timeout, &t->abandoned, err);
  if (rc == XF_OK)
    rc = xf_trainer_read_result(work, xf_model_num_params(model), ds->train_records, &res, err);
  if (rc == XF_OK) rc = xf_trainer_check_dp(&res, &need, err);
  xf_trainer_dir_remove(work);
  if (rc != XF_OK) {
    xf_trainer_result_free(&res);
    return rc;
  }
  if (record)
    t->charge = (xf_privacy_charge){.sampling_rate = res.dp_sampling_rate,
                                    .noise_multiplier = res.dp_noise_multiplier,
                                    .steps = res.dp_steps};
  t->samples = res.samples;
  *loss = res.has_train_loss ? res.train_loss : NAN;
  *local = res.trained;
  res.trained = NULL;
  XF_INFO("trainer_done", "job=%s round=%u attempt=%u dataset=%s samples=%llu seconds=%.3f",
          t->job_id, (unsigned)t->round, (unsigned)t->attempt, ds->name,
          (unsigned long long)res.samples, xf__site_mono_s() - t0);
  xf_trainer_result_free(&res);
  return XF_OK;
}

/* The task's whole computation: decode and check the model, the dataset,
 * the evaluation of the received model, local training and the delta. The
 * outcome goes into the task's worker fields. */
/* Trains t's model natively (xf_train) from the global parameters in net:
 * *local (xf_free) gets the trained ones. False when it failed (t says
 * why); true, with *local NULL, when it stopped part way (abandoned). */
static bool train_native(task *t, xf_net *net, const xf_samples *train, size_t n, xf_noise *noise,
                         bool record, float **local) {
  xf_errctx err;
  xf_errctx_clear(&err);
  const xf_job_local *lc = &t->spec.local;
  train_watch watch = {.t = t, .last_loss = NAN};
  xf_dp_sgd dp = {.clip = t->spec.privacy.clip,
                  .noise_multiplier = t->plan.noise_multiplier,
                  .expected_batch = (int)lc->batch_size,
                  .noise = noise};
  xf_train_options opt = {
      .epochs = (int)lc->epochs,
      .batch_size = (int)lc->batch_size,
      .seed = t->shuffle_seed,
      .on_epoch = train_epoch,
      .should_stop = train_should_stop,
      .user = &watch,
      .dp = record ? &dp : NULL};
  /* The round's learning rate comes from the task's round number, so every
   * site of a round trains at the same rate; the optimizer's state starts
   * fresh in every round (xf_train). */
  xf_jobspec_train_options(&t->spec, t->round, &opt);
  if (xf_train(net, train, &opt, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "training failed", &err);
    return false;
  }
  if (atomic_load(&t->abandoned)) return true;
  *local = xf_mallocarray(n, sizeof(float));
  if (!*local || xf_net_get_params(net, *local) != XF_OK) {
    xf_fail(&err, XF_ENOMEM, "cannot read back %zu parameters", n);
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "training failed", &err);
    return false;
  }
  /* Under record-level privacy the loss measured on the sampled training
   * batches is not noised, so it does not leave the site. */
  t->train_loss = record ? NAN : watch.last_loss;
  return true;
}

/* The rest is the update pipeline (update/update.h) on the delta in local:
 * clip and noise for the site unit, then masked under secure aggregation
 * (once the shares are routed, on the loop: xf__site_sa_mask_and_stream), else
 * encoded for the uplink, else float32; sealed to the aggregator that
 * folds it. *noise is started when the plan needs one. False when it
 * failed (t says why). */
static bool update_prepare(daemon_t *d, task *t, size_t n, float *local, xf_noise **noise) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_update_plan up;
  if (xf_update_plan_site(&t->spec, &t->plan, n, &t->uo,
                          (unsigned)xf_backend_threads(d->backend), &up, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the update does not fit the task",
              &err);
    return false;
  }
  if ((up.noise_sd > 0 || up.share_sd > 0) && !*noise && xf_noise_new_random(noise) != XF_OK) {
    xf_fail(&err, XF_ENOMEM, "cannot start the noise generator (secure memory)");
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "privacy noise", &err);
    return false;
  }
  xf_noise_use_table(*noise, t->plan.table_sampler); /* what the plan charged for */
  char ctx[256];
  size_t ctx_len = xf__site_seal_context(d, t, ctx, sizeof(ctx));
  if (xf_update_prepare(&up, local, t->residual, *noise, ctx, ctx_len, &t->payload, &err) !=
      XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "cannot prepare the update", &err);
    return false;
  }
  if (t->payload.clipped)
    XF_WARN("secagg_clipped", "job=%s round=%u values=%zu why=\"beyond the shared scale\"",
            t->job_id, (unsigned)t->round, t->payload.clipped);
  if (up.form != XF_UPDATE_MASKED && xf__site_stream_update(t, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "cannot stream the update", &err);
    return false;
  }
  return true;
}

static void task_compute(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_model *model = NULL;
  float *global = NULL, *local = NULL;
  xf_net *net = NULL;
  xf_noise *noise = NULL;

  xf_digest got; /* the parameters' digest, verified by the decoder */
  if (xf_checkpoint_decode_digest(t->model_bytes, (size_t)t->model_len, &model, &global, &got,
                                  &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the model file does not decode", &err);
    goto out;
  }
  size_t n = xf_model_num_params(model);
  if (memcmp(got.bytes, t->model_digest.bytes, XF_DIGEST_BYTES) != 0) {
    char got_hex[XF_DIGEST_HEX], want_hex[XF_DIGEST_HEX];
    xf_digest_hex(&got, got_hex);
    xf_digest_hex(&t->model_digest, want_hex);
    xf_fail(&err, XF_EINTEGRITY, "the model's parameter digest is %s, the offer's model_digest %s",
            got_hex, want_hex);
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "model digest mismatch", &err);
    goto out;
  }
  if (cache_get(&d->cache, &t->dataset, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__NO_DATASET, "dataset unusable", &err);
    char q[600];
    XF_ERROR("dataset_unusable", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
             (unsigned)t->round, t->dataset.name, xf__site_logq(q, sizeof(q), err.msg));
    goto out;
  }
  const xf_dataset *tr = &d->cache.train, *te = &d->cache.test;
  if (model_fits(model, &t->spec, tr, te, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the model does not fit the data", &err);
    goto out;
  }

  double t0 = xf__site_mono_s();
  if (xf_net_create(d->backend, model, (int)t->spec.local.batch_size, &net, &err) != XF_OK ||
      xf_net_set_params(net, global) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "cannot set up the model", &err);
    goto out;
  }
  xf_samples train = {tr->x, tr->y, tr->n, tr->features};
  xf_samples test = {te->x, te->y, te->n, te->features};
  if (xf_evaluate(net, &test, &t->test_loss, &t->test_accuracy, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "evaluation failed", &err);
    goto out;
  }
  t->samples = tr->n;
  if (!t->evaluate_only) {
    const xf_privacy_spec *pv = &t->spec.privacy;
    bool record = t->plan.site_noise && pv->unit == XF_PRIVACY_UNIT_RECORD;
    if (t->plan.site_noise && xf_noise_new_random(&noise) != XF_OK) {
      xf_fail(&err, XF_ENOMEM, "cannot start the noise generator (secure memory)");
      task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "privacy noise", &err);
      goto out;
    }
    xf_noise_use_table(noise, t->plan.table_sampler); /* what the plan charged for */
    if (t->dataset.trainer) {
      /* An external trainer (docs/trainers.md): the program trains, the
       * site keeps everything from the delta on. */
      double loss = NAN;
      if (run_trainer(d, t, model, global, &local, &loss, &err) != XF_OK) {
        task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the external trainer failed",
                  &err);
        goto out;
      }
      if (atomic_load(&t->abandoned)) goto out;
      t->train_loss = record ? NAN : loss;
    } else {
      if (!train_native(t, net, &train, n, noise, record, &local)) goto out;
      if (atomic_load(&t->abandoned)) goto out; /* stopped part way: nobody wants the result */
    }
    xf_update_delta(local, global, n);
    t->has_train = true;
    if (!update_prepare(d, t, n, local, &noise)) goto out;
  }
  t->seconds = xf__site_mono_s() - t0;
out:
  xf_noise_free(noise);
  xf_free(local);
  xf_net_free(net);
  xf_free(global);
  xf_model_free(model);
}

static void work_run(daemon_t *d) {
  task *t = d->worker_task;
  if (atomic_load(&t->abandoned)) return;
  char qj[JOB_ID_MAX];
  XF_INFO("task_training", "job=%s round=%u attempt=%u dataset=%s evaluate_only=%s",
          xf__site_logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt,
          t->dataset.name, t->evaluate_only ? "true" : "false");
  task_compute(d, t);
}

/* Keeps what t's top-k update left out for the job's next round. False when
 * it cannot be saved (t's fail_reason and fail_detail say so): the update
 * is then withheld (sending it would lose the residual for good) and the
 * task refused. */
static bool save_residual(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_residual_save(d->reg, t->job_id, t->dataset.name, t->round, t->residual,
                            t->n_params, (int64_t)time(NULL), &err) == XF_OK) {
    XF_INFO("residual_saved", "job=%s round=%u dataset=%s values=%zu", t->job_id,
             (unsigned)t->round, t->dataset.name, t->n_params);
    return true;
  }
  char q[600];
  XF_ERROR("residual_not_saved", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
           (unsigned)t->round, t->dataset.name, xf__site_logq(q, sizeof(q), err.msg));
  t->fail_reason = XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
  snprintf(t->fail_detail, sizeof(t->fail_detail),
           "the site cannot keep the compression residual: %s", err.msg);
  return false;
}

/* Records the release of t's update in the privacy ledger, right before it
 * first goes out (its Metrics carry the spend), and reads back what the job
 * and the dataset have spent. The budget is checked again first: another
 * job's task on the same dataset may have spent since this one was
 * accepted. False when the release must not happen: the update is then
 * withheld and the task refused, since a release the ledger does not know
 * of would escape the budget. */
bool xf__site_charge_ledger(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  const xf_privacy_spec *pv = &t->spec.privacy;
  const char *ds = t->dataset.name;
  char why[1024];
  xf_privacy_plan plan;
  xf_privacy_charge charge;
  Xfed__TaskRefusal__Reason reason =
      xf_site_privacy_check(&d->offer_env, t->job_id, t->round, &t->spec, &t->dataset,
                            t->residency.present ? &t->residency.res : NULL, t->n_params, &plan,
                            &charge, why, sizeof(why));
  if (reason != XFED__TASK_REFUSAL__REASON__UNSPECIFIED) {
    char q[1024];
    XF_WARN("privacy_release_refused", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
            (unsigned)t->round, ds, xf__site_logq(q, sizeof(q), why));
    xf__site_send_refusal(d, t->job_id, t->round, t->attempt, reason, "%s", why);
    return false;
  }
  double budget_delta = t->dataset.budget_delta > 0 ? t->dataset.budget_delta
                                                    : XF_SITE_BUDGET_DELTA_DEFAULT;
  if (xf_ledger_charge(xf_site_registry_db(d->reg), ds, t->job_id, t->round, t->attempt, &t->charge,
                            (int64_t)time(NULL), &err) != XF_OK ||
      xf_ledger_epsilon(xf_site_registry_db(d->reg), ds, t->job_id, NULL, pv->delta, &t->epsilon, &err) !=
          XF_OK ||
      xf_ledger_epsilon(xf_site_registry_db(d->reg), ds, NULL, NULL, budget_delta, &t->ledger_epsilon, &err) !=
          XF_OK) {
    char q[600];
    XF_ERROR("ledger_failed", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
             (unsigned)t->round, ds, xf__site_logq(q, sizeof(q), err.msg));
    xf__site_send_refusal(d, t->job_id, t->round, t->attempt,
                          XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                          "the site's privacy ledger cannot record the release: %s", err.msg);
    return false;
  }
  t->charged = true;
  t->has_epsilon = true;
  XF_INFO("privacy_charged", "job=%s round=%u attempt=%u dataset=%s sampling_rate=%.6g "
          "noise_multiplier=%.6g steps=%llu job_epsilon=%.6g dataset_epsilon=%.6g budget=%g",
          t->job_id, (unsigned)t->round, (unsigned)t->attempt, ds, t->charge.sampling_rate,
          t->charge.noise_multiplier, (unsigned long long)t->charge.steps, t->epsilon,
          t->ledger_epsilon, t->dataset.has_budget ? t->dataset.budget_epsilon : 0.0);
  return true;
}

/* A task the worker could not finish, or whose result cannot go out
 * (tell: the coordinator is told from its fail_reason and fail_detail, and
 * when t->failed an Error too): its model stream is let go and the task
 * ended. */
void xf__site_task_failed(daemon_t *d, task *t, bool tell) {
  xf_site_tasks_failed(d->set, t->entry, tell);
  xf__site_perform(d);
}

/* What the loop does with a task the worker finished: its failure, its
 * residual, the key or stream id offered while it trained, then its
 * result reported. */
static void work_result(daemon_t *d, task *t) {
  char qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  if (t->failed) {
    char q[600];
    XF_ERROR("task_failed", "job=%s round=%u attempt=%u reason=%s details=\"%s\"", qj,
             (unsigned)t->round, (unsigned)t->attempt, xf_task_refusal_reason_name(t->fail_reason),
             xf__site_logq(q, sizeof(q), t->fail_detail));
    xf__site_task_failed(d, t, true);
    return;
  }
  if (t->has_train && t->residual && !save_residual(d, t)) {
    xf__site_task_failed(d, t, true);
    return;
  }
  if (t->seal_next_set) {
    t->seal_next_set = false;
    if (!xf__site_seal_key_changed(d, t, t->seal_next)) return; /* t is gone */
  }
  if (t->update_stream_next) {
    uint64_t id = t->update_stream_next;
    t->update_stream_next = 0;
    xf__site_update_stream_changed(d, t, id);
  }
  xf_site_tasks_trained(d->set, t->entry); /* reported by work_done, once the result is logged */
  if (t->has_train)
    XF_INFO("task_trained", "job=%s round=%u attempt=%u samples=%llu train_loss=%.6g "
            "test_loss=%.6g test_accuracy=%.4f seconds=%.3f update_bytes=%llu", qj,
            (unsigned)t->round, (unsigned)t->attempt, (unsigned long long)t->samples,
            t->train_loss, t->test_loss, t->test_accuracy, t->seconds,
            (unsigned long long)xf__site_update_bytes(t));
  else
    XF_INFO("task_evaluated", "job=%s round=%u attempt=%u test_loss=%.6g test_accuracy=%.4f "
            "seconds=%.3f", qj, (unsigned)t->round, (unsigned)t->attempt, t->test_loss,
            t->test_accuracy, t->seconds);
  if (!xf_site_task_offered_now(t->entry))
    XF_INFO("task_result_held", "job=%s round=%u attempt=%u why=\"not connected; sent when the "
            "coordinator offers the task again\"", qj, (unsigned)t->round, (unsigned)t->attempt);
  if (t->has_train && t->payload.form == XF_UPDATE_MASKED) {
    t->sa_waiting = true;
    if (xf_site_sa_routed(d->sa, t->job_id, t->round, t->attempt))
      xf__site_sa_mask_and_stream(d, t); /* pumps, or drops t */
  }
}

static void work_done(daemon_t *d) {
  task *t = d->worker_task;
  d->worker_task = NULL;
  xf_free(t->model_bytes); /* decoded by now; a repeat of the stream never reaches the sink */
  t->model_bytes = NULL;
  bool finished = !atomic_load(&t->abandoned);
  bool back = xf_site_tasks_worker_back(d->set, finished) != NULL;
  if (back) work_result(d, t);
  xf__site_perform(d);
  if (back) xf__site_pump(d);
}

/* ---- the worker thread ------------------------------------------------------------------ */

static void worker_main(void *arg) {
  daemon_t *d = arg;
  uv_mutex_lock(&d->worker_mu);
  for (;;) {
    while (!d->worker_go && !d->worker_quit) uv_cond_wait(&d->worker_cv, &d->worker_mu);
    if (!d->worker_go) break; /* quit, with no task */
    d->worker_go = false;
    uv_mutex_unlock(&d->worker_mu);
    work_run(d);
#ifdef __GLIBC__
    /* What training freed goes back to the system between rounds rather
     * than staying in the arena (8-14 MiB less at the quickstart's peak). */
    malloc_trim(0);
#endif
    uv_mutex_lock(&d->worker_mu);
    d->worker_done = true;
    uv_async_send(&d->worker_back);
  }
  uv_mutex_unlock(&d->worker_mu);
}

static void close_worker_handle(daemon_t *d) {
  if (!d->worker_closing) return;
  d->worker_closing = false;
  uv_close((uv_handle_t *)&d->worker_back, NULL);
}

/* The loop's side of a task done: taken under the lock, so that the
 * worker's writes to the task are seen here. */
static void on_worker_back(uv_async_t *h) {
  daemon_t *d = h->data;
  uv_mutex_lock(&d->worker_mu);
  bool done = d->worker_done;
  d->worker_done = false;
  uv_mutex_unlock(&d->worker_mu);
  if (done && d->worker_task) work_done(d);
  if (!d->worker_task && d->stopping) close_worker_handle(d);
}

xf_err xf__site_worker_init(daemon_t *d, xf_errctx *err) {
  if (uv_mutex_init(&d->worker_mu) != 0)
    return xf_fail(err, XF_ENOMEM, "cannot make the worker's lock");
  if (uv_cond_init(&d->worker_cv) != 0) {
    uv_mutex_destroy(&d->worker_mu);
    return xf_fail(err, XF_ENOMEM, "cannot make the worker's condition variable");
  }
  if (uv_async_init(&d->loop, &d->worker_back, on_worker_back) != 0) {
    uv_cond_destroy(&d->worker_cv);
    uv_mutex_destroy(&d->worker_mu);
    return xf_fail(err, XF_EIO, "cannot make the worker's handle on the event loop");
  }
  d->worker_back.data = d;
  d->worker_closing = true; /* the handle is open until xf__site_worker_stop */
  int rc = uv_thread_create(&d->worker_thread, worker_main, d);
  if (rc != 0) {
    close_worker_handle(d);
    uv_cond_destroy(&d->worker_cv);
    uv_mutex_destroy(&d->worker_mu);
    return xf_fail(err, XF_EIO, "cannot start the training thread: %s", uv_strerror(rc));
  }
  d->worker_running = true;
  return XF_OK;
}

void xf__site_worker_stop(daemon_t *d) {
  if (d->worker_running) {
    uv_mutex_lock(&d->worker_mu);
    d->worker_quit = true; /* taken once the task on it, if any, is done */
    uv_cond_signal(&d->worker_cv);
    uv_mutex_unlock(&d->worker_mu);
  }
  if (!d->worker_task) close_worker_handle(d);
}

void xf__site_worker_join(daemon_t *d) {
  if (!d->worker_running) return;
  xf__site_worker_stop(d);
  uv_thread_join(&d->worker_thread);
  d->worker_running = false;
  uv_cond_destroy(&d->worker_cv);
  uv_mutex_destroy(&d->worker_mu);
}

/* Starts the worker on t (the set's START). */
void xf__site_worker_start(daemon_t *d, task *t) {
  d->worker_task = t;
  uv_mutex_lock(&d->worker_mu);
  d->worker_go = true;
  uv_cond_signal(&d->worker_cv);
  uv_mutex_unlock(&d->worker_mu);
}
