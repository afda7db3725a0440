/* SPDX-License-Identifier: Apache-2.0 */
/* The local training loop and evaluation. */
#include "kernels/train.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/rng.h"

/* Stream of xf_rng reserved for shuffling (model.c uses 1 for init). */
#define XF__RNG_STREAM_SHUFFLE 2

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static xf_err check_samples(const xf_net *net, const xf_samples *s, const char *what,
                            xf_errctx *err) {
  const xf_model *m = xf_net_model(net);
  if (s->features != xf_model_input_size(m))
    return xf_fail(err, XF_EINVAL, "%s data has %zu features per record but %s expects %zu",
                   what, s->features, xf_model_describe(m), xf_model_input_size(m));
  if (s->n == 0) return xf_fail(err, XF_EINVAL, "%s data has no records", what);
  int classes = xf_model_spec_of(m)->classes;
  for (size_t i = 0; i < s->n; i++)
    if (s->y[i] < 0 || s->y[i] >= classes)
      return xf_fail(err, XF_EINVAL, "%s record %zu has label %d, outside 0..%d", what, i,
                     (int)s->y[i], classes - 1);
  size_t r = 0, f = 0;
  if (xf_model_check_ids(m, s->x, s->n, &r, &f) != XF_OK)
    return xf_fail(err, XF_ERANGE,
                   "%s record %zu, feature %zu: %g is not an id of model.layers[0] (an embedding "
                   "of %d ids takes whole numbers 0 to %d); encode the column as ids or raise "
                   "its vocab",
                   what, r, f, (double)s->x[r * s->features + f], xf_model_layer(m, 0)->vocab,
                   xf_model_layer(m, 0)->vocab - 1);
  return XF_OK;
}

/* The accuracy field for the mse loss: R^2 of `sse` (summed over n
 * records) against the variance of the labels in s, floored at 0. */
static double r_squared(const xf_samples *s, double sse, size_t n) {
  double mean = 0.0, sst = 0.0;
  for (size_t i = 0; i < s->n; i++) mean += (double)s->y[i];
  mean /= (double)s->n;
  for (size_t i = 0; i < s->n; i++) sst += ((double)s->y[i] - mean) * ((double)s->y[i] - mean);
  double mse = sse / (double)n, var = sst / (double)s->n;
  if (!(var > 0.0)) return mse == 0.0 ? 1.0 : 0.0;
  double r2 = 1.0 - mse / var;
  return r2 > 0.0 ? r2 : 0.0;
}

static bool is_mse(const xf_net *net) {
  return xf_model_spec_of(xf_net_model(net))->loss == XF_LOSS_MSE;
}

xf_err xf_evaluate(xf_net *net, const xf_samples *data, double *loss, double *accuracy,
                   xf_errctx *err) {
  XF_GUARD(check_samples(net, data, "test", err));
  const int bs = xf_net_max_batch(net);
  double total_loss = 0.0;
  size_t total_correct = 0;
  for (size_t start = 0; start < data->n; start += (size_t)bs) {
    int n = (int)(data->n - start < (size_t)bs ? data->n - start : (size_t)bs);
    double l;
    int c;
    xf_err rc = xf_net_run(net, data->x + start * data->features, data->y + start, n, false, &l, &c);
    if (rc != XF_OK) return xf_fail(err, rc, "evaluation failed on the %s backend",
                                    xf_backend_name(xf_net_backend(net)));
    total_loss += l;
    total_correct += (size_t)c;
  }
  *loss = total_loss / (double)data->n;
  *accuracy = is_mse(net) ? r_squared(data, total_loss, data->n)
                          : (double)total_correct / (double)data->n;
  return XF_OK;
}

static xf_err check_optimizer(const xf_train_options *o, xf_errctx *err) {
  if (o->optimizer != XF_OPTIMIZER_SGD && o->optimizer != XF_OPTIMIZER_ADAM &&
      o->optimizer != XF_OPTIMIZER_ADAMW)
    return xf_fail(err, XF_EINVAL, "local.optimizer: unknown optimizer %d", (int)o->optimizer);
  if (o->optimizer != XF_OPTIMIZER_SGD) {
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
      return xf_fail(err, XF_EINVAL, "local.beta1 %g: must be in [0, 1)", (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
      return xf_fail(err, XF_EINVAL, "local.beta2 %g: must be in [0, 1)", (double)o->beta2);
    if (!(o->eps > 0.0f) || !isfinite(o->eps))
      return xf_fail(err, XF_EINVAL, "local.eps %g: must be positive and finite", (double)o->eps);
  }
  if (!(o->clip_norm >= 0.0) || !isfinite(o->clip_norm))
    return xf_fail(err, XF_EINVAL, "local.clip_norm %g: must be positive, or 0 for no clipping",
                   o->clip_norm);
  if (o->clip_norm > 0.0 && o->dp)
    return xf_fail(err, XF_EINVAL,
                   "local.clip_norm cannot be used with DP-SGD, which already clips every "
                   "record's gradient to privacy.clip: leave local.clip_norm out");
  return XF_OK;
}

/* One optimizer step from the net's gradient. */
static xf_err optimizer_step(xf_net *net, const xf_train_options *o) {
  if (o->optimizer == XF_OPTIMIZER_SGD) {
    xf_net_sgd_step(net, &o->sgd);
    return XF_OK;
  }
  xf_adam_params p = {.lr = o->sgd.lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                      .weight_decay = o->sgd.weight_decay, .prox_mu = o->sgd.prox_mu,
                      .decoupled = o->optimizer == XF_OPTIMIZER_ADAMW};
  return xf_net_adam_step(net, &p);
}

static xf_err check_dp(const xf_dp_sgd *dp, size_t n, xf_errctx *err) {
  if (!(dp->clip > 0.0) || !isfinite(dp->clip))
    return xf_fail(err, XF_EINVAL,
                   "DP-SGD clip %g: the per-example gradient bound must be positive and finite",
                   dp->clip);
  if (!(dp->noise_multiplier >= 0.0) || !isfinite(dp->noise_multiplier))
    return xf_fail(err, XF_EINVAL, "DP-SGD noise multiplier %g: must be 0 or more and finite",
                   dp->noise_multiplier);
  if (dp->expected_batch < 1 || (size_t)dp->expected_batch > n)
    return xf_fail(err, XF_EINVAL,
                   "DP-SGD expected batch %d: must be 1 to the %zu training records (the "
                   "sampling rate L/n is a probability)",
                   dp->expected_batch, n);
  if (!dp->noise)
    return xf_fail(err, XF_EINVAL, "DP-SGD needs a noise generator: none was given");
  double sigma = dp->noise_multiplier * dp->clip;
  if (sigma > 0.0 && xf_noise_gaussian_grid(sigma, NULL, NULL) != XF_OK)
    return xf_fail(err, XF_ERANGE,
                   "DP-SGD noise standard deviation z*C = %g is outside the sampler's range "
                   "%g to %g",
                   sigma, XF_NOISE_SIGMA_MIN, XF_NOISE_SIGMA_MAX);
  return XF_OK;
}

/* ---- a step's noise, drawn during the step ---------------------------------------------- */

struct xf_dp_noiser {
  xf_net *net;
  xf_noise *noise;
  double sigma;
  float *host; /* n_params floats, for backends whose tensors are not host memory */
  xf_noise_pending *pending;
  bool threaded; /* a drawing thread runs; false: the noise is drawn in finish */
  pthread_t tid;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  enum { DRAW_IDLE, DRAW_ASKED, DRAW_DONE, DRAW_QUIT } phase;
};

/* The gradient as host memory: the tensor itself on the cpu backend, else
 * a copy downloaded into d->host; NULL (and *rc) when the download fails. */
static float *grads_on_host(xf_dp_noiser *d, xf_err *rc) {
  float *grads = xf_net_grads_device(d->net);
  *rc = XF_OK;
  if (xf_backend_kind_of(xf_net_backend(d->net)) == XF_BACKEND_CPU) return grads;
  return (*rc = xf_net_get_grads(d->net, d->host)) == XF_OK ? d->host : NULL;
}

/* The host copy back into the gradient (nothing to do on the cpu backend). */
static xf_err grads_from_host(xf_dp_noiser *d, const float *g) {
  float *grads = xf_net_grads_device(d->net);
  if (g == grads) return XF_OK;
  const size_t n = xf_model_num_params(xf_net_model(d->net));
  return xf_backend_upload(xf_net_backend(d->net), grads, g, n * sizeof(float));
}

static void *noiser_run(void *arg) {
  xf_dp_noiser *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (d->phase != DRAW_ASKED && d->phase != DRAW_QUIT) pthread_cond_wait(&d->cv, &d->mu);
    if (d->phase == DRAW_QUIT) break;
    pthread_mutex_unlock(&d->mu);
    xf_noise_pending_draw(d->pending);
    pthread_mutex_lock(&d->mu);
    d->phase = DRAW_DONE;
    pthread_cond_broadcast(&d->cv);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

xf_err xf_dp_noiser_new(xf_net *net, xf_noise *noise, double sigma, xf_dp_noiser **out) {
  *out = NULL;
  xf_dp_noiser *d = xf_calloc(1, sizeof(*d));
  if (!d) return XF_ENOMEM;
  d->net = net;
  d->noise = noise;
  d->sigma = sigma;
  const size_t n = xf_model_num_params(xf_net_model(net));
  xf_backend *b = xf_net_backend(net);
  xf_err rc = XF_OK;
  if (xf_backend_kind_of(b) != XF_BACKEND_CPU && !(d->host = xf_mallocarray(n, sizeof(float))))
    rc = XF_ENOMEM;
  /* With one thread there is no core to draw on beside the step. */
  if (rc == XF_OK && xf_backend_threads(b) >= 2 &&
      (rc = xf_noise_pending_new(noise, sigma, n, &d->pending)) == XF_OK) {
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->phase = DRAW_IDLE;
    d->threaded = pthread_create(&d->tid, NULL, noiser_run, d) == 0;
    if (!d->threaded) {
      pthread_cond_destroy(&d->cv);
      pthread_mutex_destroy(&d->mu);
    }
  }
  if (rc != XF_OK) {
    xf_dp_noiser_free(d);
    return rc;
  }
  *out = d;
  return XF_OK;
}

void xf_dp_noiser_free(xf_dp_noiser *d) {
  if (!d) return;
  if (d->threaded) {
    pthread_mutex_lock(&d->mu);
    while (d->phase == DRAW_ASKED) pthread_cond_wait(&d->cv, &d->mu);
    d->phase = DRAW_QUIT;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->tid, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    xf_backend_lend_threads(xf_net_backend(d->net), 0);
  }
  xf_noise_pending_free(d->pending);
  xf_free(d->host);
  xf_free(d);
}

xf_err xf_dp_noiser_start(xf_dp_noiser *d) {
  if (!d->threaded) return XF_OK;
  XF_GUARD(xf_noise_pending_key(d->pending, d->noise));
  pthread_mutex_lock(&d->mu);
  d->phase = DRAW_ASKED;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  xf_backend_lend_threads(xf_net_backend(d->net), 1);
  return XF_OK;
}

xf_err xf_dp_noiser_finish(xf_dp_noiser *d) {
  xf_err rc;
  if (!d->threaded) { /* drawn now, after the backward */
    float *g = grads_on_host(d, &rc);
    if (!g) return rc;
    const size_t n = xf_model_num_params(xf_net_model(d->net));
    XF_GUARD(xf_noise_gaussian_vec_par(d->noise, d->sigma, g, n,
                                       xf_backend_threads(xf_net_backend(d->net))));
    return grads_from_host(d, g);
  }
  xf_noise_pending_draw(d->pending); /* the chunks the drawing thread has not taken yet */
  pthread_mutex_lock(&d->mu);
  while (d->phase == DRAW_ASKED) pthread_cond_wait(&d->cv, &d->mu);
  bool drawn = d->phase == DRAW_DONE;
  d->phase = DRAW_IDLE;
  pthread_mutex_unlock(&d->mu);
  xf_backend_lend_threads(xf_net_backend(d->net), 0);
  if (!drawn) return XF_EINVAL; /* finish without start */
  float *g = grads_on_host(d, &rc);
  /* Applied or not (g NULL: EINVAL), the drawn noise is wiped here. */
  xf_err applied = xf_noise_pending_apply(d->pending, g);
  if (!g) return rc;
  return applied != XF_OK ? applied : grads_from_host(d, g);
}

/* The DP-SGD loop (xf_train with opt->dp). Poisson sampling is exact: record
 * i joins a step when a uniform draw from [0, n) of the noise generator is
 * below L, which has probability exactly L/n; the draws are secret (the
 * generator is keyed from the CSPRNG in production), unlike base/rng's. It
 * costs one draw per record per step. */
static xf_err train_dp(xf_net *net, const xf_samples *train, const xf_train_options *opt,
                       xf_errctx *err) {
  const xf_dp_sgd *dp = opt->dp;
  XF_GUARD(check_dp(dp, train->n, err));
  if (train->n > UINT32_MAX)
    return xf_fail(err, XF_EINVAL, "%zu training records: at most 2^32-1", train->n);
  xf_backend *b = xf_net_backend(net);
  const size_t feat = train->features, mb = (size_t)xf_net_max_batch(net);
  const size_t n_params = xf_model_num_params(xf_net_model(net));
  const uint64_t steps = xf_dp_steps_per_epoch(train->n, dp->expected_batch);
  const uint64_t L = (uint64_t)dp->expected_batch;
  const double sigma = dp->noise_multiplier * dp->clip;
  uint32_t *picked = xf_mallocarray(train->n, sizeof(uint32_t));
  float *bx = xf_mallocarray(mb * feat, sizeof(float));
  int32_t *by = xf_mallocarray(mb, sizeof(int32_t));
  xf_dp_noiser *noiser = NULL;
  xf_err rc = XF_OK;
  if (sigma > 0.0 && xf_dp_noiser_new(net, dp->noise, sigma, &noiser) != XF_OK) noiser = NULL;
  if (!picked || !bx || !by || (sigma > 0.0 && !noiser)) {
    rc = xf_fail(err, XF_ENOMEM, "cannot allocate DP-SGD batch buffers");
    goto out;
  }
  xf_net_reset_optimizer(net);
  xf_net_seed_dropout(net, opt->seed);
  if (opt->sgd.prox_mu != 0.0f && (rc = xf_net_anchor(net)) != XF_OK) {
    rc = xf_fail(err, rc, "cannot allocate the FedProx anchor");
    goto out;
  }

  for (int epoch = 1; epoch <= opt->epochs; epoch++) {
    double t0 = now_seconds(), loss_sum = 0.0;
    size_t correct = 0, samples = 0;
    for (uint64_t step = 0; step < steps; step++) {
      if (opt->should_stop && opt->should_stop(opt->user)) goto out;
      size_t m = 0;
      if ((rc = xf_noise_poisson_sample(dp->noise, L, (uint64_t)train->n, picked, &m)) != XF_OK) {
        rc = xf_fail(err, rc, "cannot draw the DP-SGD sample (epoch %d)", epoch);
        goto out;
      }
      /* The step's noise is drawn beside its clipped backward. */
      if (noiser && (rc = xf_dp_noiser_start(noiser)) != XF_OK) {
        rc = xf_fail(err, rc, "cannot start the DP-SGD noise (epoch %d)", epoch);
        goto out;
      }
      for (size_t start = 0; start < m; start += mb) {
        size_t k = m - start < mb ? m - start : mb;
        for (size_t j = 0; j < k; j++) {
          uint32_t idx = picked[start + j];
          memcpy(bx + j * feat, train->x + (size_t)idx * feat, feat * sizeof(float));
          by[j] = train->y[idx];
        }
        double l;
        int c;
        rc = xf_net_run_clipped(net, bx, by, (int)k, dp->clip, start > 0, &l, &c);
        if (rc != XF_OK) {
          rc = xf_fail(err, rc, "DP-SGD step failed on the %s backend (epoch %d)",
                       xf_backend_name(b), epoch);
          goto out;
        }
        loss_sum += l;
        correct += (size_t)c;
      }
      float *grads = xf_net_grads_device(net);
      if (m == 0) xf_k_fill(b, grads, 0.0f, n_params); /* an empty sample: the step is noise */
      if (noiser) {
        if ((rc = xf_dp_noiser_finish(noiser)) != XF_OK) {
          rc = xf_fail(err, rc,
                       "cannot add the DP-SGD noise in epoch %d (a clipped gradient sum that is "
                       "not finite means training diverged)",
                       epoch);
          goto out;
        }
      }
      xf_k_scale(b, grads, (float)(1.0 / (double)L), n_params);
      if ((rc = optimizer_step(net, opt)) != XF_OK) {
        rc = xf_fail(err, rc, "cannot allocate the optimizer's state");
        goto out;
      }
      samples += m;
    }
    if ((rc = xf_backend_sync(b)) != XF_OK) {
      rc = xf_fail(err, rc, "the %s backend failed during epoch %d", xf_backend_name(b), epoch);
      goto out;
    }
    xf_epoch_report r = {.epoch = epoch, .epochs = opt->epochs, .samples = samples,
                         .steps = (size_t)steps,
                         .train_loss = samples ? loss_sum / (double)samples : NAN,
                         .train_accuracy = !samples ? NAN
                                           : is_mse(net) ? r_squared(train, loss_sum, samples)
                                                         : (double)correct / (double)samples,
                         .test_loss = -1, .test_accuracy = -1,
                         .seconds = now_seconds() - t0};
    if (opt->test && (rc = xf_evaluate(net, opt->test, &r.test_loss, &r.test_accuracy, err)))
      goto out;
    if (opt->on_epoch) opt->on_epoch(&r, opt->user);
  }
out:
  xf_free(picked);
  xf_free(bx);
  xf_free(by);
  xf_dp_noiser_free(noiser);
  return rc;
}

xf_err xf_train(xf_net *net, const xf_samples *train, const xf_train_options *opt,
                xf_errctx *err) {
  if (opt->epochs < 1) return xf_fail(err, XF_EINVAL, "local.epochs must be at least 1");
  if (!opt->dp && (opt->batch_size < 1 || opt->batch_size > xf_net_max_batch(net)))
    return xf_fail(err, XF_EINVAL, "local.batch_size %d: must be 1 to %d", opt->batch_size,
                   xf_net_max_batch(net));
  XF_GUARD(check_samples(net, train, "training", err));
  if (opt->test) XF_GUARD(check_samples(net, opt->test, "test", err));
  XF_GUARD(check_optimizer(opt, err));
  if (opt->dp) return train_dp(net, train, opt, err);

  const size_t feat = train->features, bs = (size_t)opt->batch_size;
  uint32_t *order = xf_mallocarray(train->n, sizeof(uint32_t));
  float *bx = xf_mallocarray(bs * feat, sizeof(float));
  int32_t *by = xf_mallocarray(bs, sizeof(int32_t));
  xf_err rc = XF_OK;
  if (!order || !bx || !by) {
    rc = xf_fail(err, XF_ENOMEM, "cannot allocate batch buffers");
    goto out;
  }
  if (train->n > UINT32_MAX) {
    rc = xf_fail(err, XF_EINVAL, "%zu training records: at most 2^32-1", train->n);
    goto out;
  }
  for (size_t i = 0; i < train->n; i++) order[i] = (uint32_t)i;
  xf_rng rng;
  xf_rng_seed(&rng, opt->seed, XF__RNG_STREAM_SHUFFLE);
  xf_net_reset_optimizer(net);
  xf_net_seed_dropout(net, opt->seed);
  if (opt->sgd.prox_mu != 0.0f && (rc = xf_net_anchor(net)) != XF_OK) {
    rc = xf_fail(err, rc, "cannot allocate the FedProx anchor");
    goto out;
  }

  for (int epoch = 1; epoch <= opt->epochs; epoch++) {
    double t0 = now_seconds(), loss_sum = 0.0;
    size_t correct = 0, steps = 0;
    xf_rng_shuffle_u32(&rng, order, train->n);
    for (size_t start = 0; start < train->n; start += bs) {
      if (opt->should_stop && opt->should_stop(opt->user)) goto out;
      size_t n = train->n - start < bs ? train->n - start : bs;
      for (size_t j = 0; j < n; j++) {
        uint32_t idx = order[start + j];
        memcpy(bx + j * feat, train->x + (size_t)idx * feat, feat * sizeof(float));
        by[j] = train->y[idx];
      }
      double l;
      int c;
      rc = xf_net_run(net, bx, by, (int)n, true, &l, &c);
      if (rc != XF_OK) {
        rc = xf_fail(err, rc, "training step failed on the %s backend (epoch %d)",
                     xf_backend_name(xf_net_backend(net)), epoch);
        goto out;
      }
      if (opt->clip_norm > 0.0) xf_net_clip_grad_norm(net, opt->clip_norm, NULL);
      if ((rc = optimizer_step(net, opt)) != XF_OK) {
        rc = xf_fail(err, rc, "cannot allocate the optimizer's state");
        goto out;
      }
      loss_sum += l;
      correct += (size_t)c;
      steps++;
    }
    if ((rc = xf_backend_sync(xf_net_backend(net))) != XF_OK) {
      rc = xf_fail(err, rc, "the %s backend failed during epoch %d",
                   xf_backend_name(xf_net_backend(net)), epoch);
      goto out;
    }
    xf_epoch_report r = {.epoch = epoch, .epochs = opt->epochs, .samples = train->n,
                         .steps = steps, .train_loss = loss_sum / (double)train->n,
                         .train_accuracy = is_mse(net) ? r_squared(train, loss_sum, train->n)
                                                       : (double)correct / (double)train->n,
                         .test_loss = -1, .test_accuracy = -1,
                         .seconds = now_seconds() - t0};
    if (opt->test && (rc = xf_evaluate(net, opt->test, &r.test_loss, &r.test_accuracy, err)))
      goto out;
    if (opt->on_epoch) opt->on_epoch(&r, opt->user);
  }
out:
  xf_free(order);
  xf_free(bx);
  xf_free(by);
  return rc;
}
