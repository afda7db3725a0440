/* SPDX-License-Identifier: Apache-2.0 */
/* The update pipeline (update/update.h): the plan builders, the stages, the
 * payload a sender streams and the receiver's checks of what it announces. */
#include "update/update.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "updates travel as float32 little-endian; add byte swapping for this host");

const char *xf_update_form_name(xf_update_form f) {
  switch (f) {
  case XF_UPDATE_FLOAT32: return "float32";
  case XF_UPDATE_ENCODED: return "encoded";
  case XF_UPDATE_MASKED: return "masked";
  }
  return "unknown";
}

/* ---- plans ---------------------------------------------------------------------------------- */

/* Whether the job compresses its uplink, and the codec it asks for. */
static bool job_uplink(const xf_jobspec *spec, xf_codec_uplink *codec) {
  const xf_job_uplink *u = &spec->compression.uplink;
  *codec = (xf_codec_uplink){.topk_fraction = u->topk_fraction, .quant_bits = u->quant_bits};
  return u->quant_bits != 0 || u->topk_fraction > 0;
}

/* The checks of a secure-aggregation setup against the job and the model:
 * the protocol carries them from the aggregator, so each is named. */
static xf_err check_secagg(const xf_jobspec *spec, size_t n_params, const xf_update_secagg *sa,
                           xf_errctx *err) {
  double topk = spec->compression.uplink.topk_fraction;
  if (!(isfinite(sa->scale) && sa->scale > 0 && sa->scale <= 1)) {
    xf_errctx_field(err, "secagg.scale");
    return xf_fail(err, XF_EINVAL, "the secure-aggregation setup gives this sender a share of "
                   "the weight of %g; it must be in (0, 1]", sa->scale);
  }
  if (sa->subset > 0 && topk <= 0) {
    xf_errctx_field(err, "secagg.subset");
    return xf_fail(err, XF_EINVAL, "the secure-aggregation setup sends a subset of %llu values, "
                   "but the job's uplink asks for no top-k", (unsigned long long)sa->subset);
  }
  if (sa->subset == 0 && topk > 0) {
    xf_errctx_field(err, "secagg.subset");
    return xf_fail(err, XF_EINVAL, "the job's uplink asks for top-k, but the secure-aggregation "
                   "setup has no shared subset");
  }
  if (sa->subset > n_params) {
    xf_errctx_field(err, "secagg.subset");
    return xf_fail(err, XF_EINVAL, "the secure-aggregation setup's subset of %llu values is "
                   "larger than the model's %zu", (unsigned long long)sa->subset, n_params);
  }
  uint64_t want = sa->subset ? sa->subset : (uint64_t)n_params;
  if (sa->params.length != want) {
    xf_errctx_field(err, "secagg.length");
    return xf_fail(err, XF_EINVAL, "the secure-aggregation setup masks %llu values, but this "
                   "update sends %llu (%s)", (unsigned long long)sa->params.length,
                   (unsigned long long)want, sa->subset ? "the shared subset" : "every parameter");
  }
  if (sa->params.bits != spec->secure_aggregation.bits || sa->fixed.bits != sa->params.bits) {
    xf_errctx_field(err, "secagg.bits");
    return xf_fail(err, XF_EINVAL, "the secure-aggregation setup works mod 2^%u, the job's "
                   "secure_aggregation.bits is %u", (unsigned)sa->params.bits,
                   (unsigned)spec->secure_aggregation.bits);
  }
  if (!(isfinite(sa->fixed.step) && sa->fixed.step > 0) || sa->fixed.bound < 1) {
    xf_errctx_field(err, "secagg.step");
    return xf_fail(err, XF_EINVAL, "the secure-aggregation setup's integer scale (step %g, "
                   "bound %u) is not usable: the step must be positive and the bound at least 1",
                   sa->fixed.step, (unsigned)sa->fixed.bound);
  }
  XF_GUARD(xf_secagg_params_check(&sa->params, err));
  if (sa->index < 1 || sa->index > sa->params.n) {
    xf_errctx_field(err, "secagg.index");
    return xf_fail(err, XF_EINVAL, "the secure-aggregation setup places this sender at %u of "
                   "%u", (unsigned)sa->index, (unsigned)sa->params.n);
  }
  return XF_OK;
}

/* The fields every plan shares. */
static void plan_common(size_t n_params, const xf_update_offer *offer, xf_update_plan *out) {
  memset(out, 0, sizeof(*out));
  out->n_params = n_params;
  out->rounding_seed = offer->rounding_seed;
  out->sealed = offer->sealed;
  if (offer->sealed) memcpy(out->seal_pk, offer->seal_pk, XF_SEAL_PUBLICKEYBYTES);
}

xf_err xf_update_plan_site(const xf_jobspec *spec, const xf_privacy_plan *pp, size_t n_params,
                           const xf_update_offer *offer, unsigned threads, xf_update_plan *out,
                           xf_errctx *err) {
  XF_ENSURE(n_params > 0 && n_params <= XF_CODEC_N_MAX, err, XF_EINVAL,
            "an update of %zu values cannot travel (1..%llu)", n_params,
            (unsigned long long)XF_CODEC_N_MAX);
  if (offer->secagg && offer->sealed) {
    xf_errctx_field(err, "seal_key");
    return xf_fail(err, XF_EINVAL, "an update under secure aggregation travels masked, not "
                   "sealed: the offer must not name a sealing key");
  }
  if (spec->secure_aggregation.enabled && !offer->secagg) {
    xf_errctx_field(err, "secagg");
    return xf_fail(err, XF_EINVAL, "the job asks for secure aggregation but the task has no "
                   "setup for it");
  }
  if (!spec->secure_aggregation.enabled && offer->secagg) {
    xf_errctx_field(err, "secagg");
    return xf_fail(err, XF_EINVAL, "the task sets up secure aggregation, but the job's "
                   "secure_aggregation is not enabled");
  }
  const xf_privacy_spec *pv = &spec->privacy;
  xf_update_plan p;
  plan_common(n_params, offer, &p);
  p.threads = threads;
  /* The site unit bounds the whole update's L2 norm (the record unit
   * clips per example, in training). Mode local adds the whole noise to
   * the clipped update; mode central leaves it to the aggregator. */
  if (pv->unit == XF_PRIVACY_UNIT_SITE && pv->clip > 0) {
    p.clip = pv->clip;
    if (pp && pp->site_noise && pp->noise_multiplier > 0)
      p.noise_sd = pp->noise_multiplier * pv->clip;
  }
  if (offer->secagg) {
    XF_GUARD(check_secagg(spec, n_params, &offer->sa, err));
    p.form = XF_UPDATE_MASKED;
    p.sa = offer->sa;
    /* Uplink top-k becomes the round's shared random subset: what is not
     * sent waits in the residual, as top-k's would. */
    p.residual = offer->sa.subset > 0;
    /* Mode distributed: this sender's share of the noise. At least
     * `threshold` senders are in any sum the aggregator unmasks, so their
     * shares add up to the whole N(0, (z C scale)^2) on it; the grid slack
     * is paid per sender (privacy/plan.h). */
    if (pv->mode == XF_PRIVACY_DISTRIBUTED && pv->noise_multiplier > 0)
      XF_GUARD(xf_privacy_grid_sigma(pv->noise_multiplier / sqrt((double)p.sa.params.threshold),
                                     pv->clip * p.sa.scale, (size_t)p.sa.params.length,
                                     &p.share_sd, err));
  } else if (job_uplink(spec, &p.codec)) {
    /* Compression comes last (after clipping and noise): the encoding is
     * post-processing and costs no privacy. */
    p.form = XF_UPDATE_ENCODED;
    p.residual = p.codec.topk_fraction > 0;
  } else {
    p.form = XF_UPDATE_FLOAT32;
  }
  *out = p;
  return XF_OK;
}

xf_err xf_update_plan_aggregate(const xf_jobspec *spec, size_t n_params,
                                const xf_update_offer *offer, xf_update_plan *out,
                                xf_errctx *err) {
  XF_ENSURE(n_params > 0 && n_params <= XF_CODEC_N_MAX, err, XF_EINVAL,
            "an aggregate of %zu values cannot travel (1..%llu)", n_params,
            (unsigned long long)XF_CODEC_N_MAX);
  if (offer->secagg) {
    xf_errctx_field(err, "secagg");
    return xf_fail(err, XF_EINVAL, "a regional aggregate is not masked: its region's secure "
                   "aggregation ends at its aggregator");
  }
  xf_update_plan p;
  plan_common(n_params, offer, &p);
  if (job_uplink(spec, &p.codec)) {
    p.form = XF_UPDATE_ENCODED;
    p.residual = p.codec.topk_fraction > 0;
    /* The sum of the sites' sparse updates has up to their k's worth of
     * nonzeros: a second top-k at the job's fraction would drop half of a
     * two-site region's values again. */
    p.keep_nonzeros = p.codec.topk_fraction > 0;
  } else {
    p.form = XF_UPDATE_FLOAT32;
  }
  *out = p;
  return XF_OK;
}

/* ---- the stages ------------------------------------------------------------------------------ */

void xf_update_delta(float *local, const float *global, size_t n) {
  for (size_t i = 0; i < n; i++) local[i] -= global[i];
}

double xf_update_clip(float *v, size_t n, double clip) {
  double sq = 0;
  for (size_t i = 0; i < n; i++) sq += (double)v[i] * (double)v[i];
  double norm = sqrt(sq);
  if (clip > 0 && norm > clip) {
    float scale = (float)(clip / norm);
    for (size_t i = 0; i < n; i++) v[i] *= scale;
  }
  return norm;
}

xf_err xf_update_noise(float *v, size_t n, double sd, xf_noise *noise, unsigned threads,
                       xf_errctx *err) {
  if (sd == 0 || n == 0) return XF_OK;
  XF_ENSURE(noise, err, XF_EINVAL, "the plan adds noise of sd %g but no generator was given", sd);
  xf_err rc = xf_noise_gaussian_vec_par(noise, sd, v, n, threads ? (int)threads : 1);
  if (rc == XF_ENOMEM)
    return xf_fail(err, rc, "cannot add the noise: out of secure memory for the samplers");
  if (rc != XF_OK)
    return xf_fail(err, rc, "the update is outside the noise sampler's range (sd %g)", sd);
  return XF_OK;
}

xf_err xf_update_select(const xf_update_plan *p, const float *v, float *residual, float *out,
                        xf_errctx *err) {
  size_t n = p->n_params, m = p->sa.subset ? (size_t)p->sa.subset : n;
  XF_ENSURE(p->sa.params.length == m, err, XF_EINVAL,
            "the plan masks %llu values but selects %zu", (unsigned long long)p->sa.params.length,
            m);
  XF_ENSURE(!p->residual || residual, err, XF_EINVAL,
            "the plan keeps a residual: pass %zu floats for it", n);
  uint32_t *idx = NULL;
  if (p->sa.subset) {
    idx = xf_mallocarray(m, sizeof(uint32_t));
    if (!idx) return xf_fail(err, XF_ENOMEM, "out of memory choosing the shared subset");
    xf_err rc = xf_codec_random_subset(p->sa.subset_seed, n, m, idx);
    if (rc != XF_OK) {
      xf_free(idx);
      return xf_fail(err, rc, "cannot draw the shared subset of %zu out of %zu values", m, n);
    }
  }
  double scale = p->sa.scale;
  if (idx && p->residual) {
    for (size_t i = 0; i < n; i++) residual[i] += v[i];
    for (size_t k = 0; k < m; k++) {
      out[k] = (float)((double)residual[idx[k]] * scale);
      residual[idx[k]] = 0;
    }
  } else {
    for (size_t i = 0; i < m; i++) out[i] = (float)((double)v[idx ? idx[i] : i] * scale);
  }
  xf_free(idx);
  return XF_OK;
}

xf_err xf_update_quantize(const xf_update_plan *p, float *selected, xf_noise *noise,
                          uint32_t *out, size_t *clipped, xf_errctx *err) {
  size_t m = (size_t)p->sa.params.length;
  if (p->share_sd > 0) {
    xf_err rc = xf_update_noise(selected, m, p->share_sd, noise, p->threads, err);
    if (rc != XF_OK) {
      if (rc != XF_EINVAL)
        xf_fail(err, rc, "cannot add this sender's share of the noise: %s", xf_strerror(rc));
      return rc;
    }
  }
  size_t c = 0;
  XF_GUARD(xf_codec_quantize_fixed(&p->sa.fixed, selected, m, p->rounding_seed, out, &c, err));
  if (clipped) *clipped = c;
  return XF_OK;
}

xf_err xf_update_encode(const xf_update_plan *p, const float *v, float *residual, uint8_t **out,
                        size_t *len, xf_errctx *err) {
  size_t n = p->n_params;
  xf_codec_uplink codec = p->codec;
  XF_ENSURE(!p->residual || residual, err, XF_EINVAL,
            "the plan keeps a residual: pass %zu floats for it", n);
  if (p->keep_nonzeros && codec.topk_fraction > 0) {
    size_t nnz = 0;
    for (size_t i = 0; i < n; i++) nnz += v[i] != 0.0f;
    double f = (double)nnz / (double)n;
    if (f > codec.topk_fraction) codec.topk_fraction = f > 1 ? 1 : f;
  }
  return xf_codec_encode(&codec, v, n, p->residual ? residual : NULL, p->rounding_seed, out, len,
                         err);
}

/* ---- running the pipeline -------------------------------------------------------------------- */

void xf_update_payload_free(xf_update_payload *payload) {
  if (!payload) return;
  if (payload->wire != payload->plain) xf_free(payload->wire);
  xf_free(payload->plain);
  xf_free(payload->words);
  memset(payload, 0, sizeof(*payload));
}

xf_err xf_update_seal(xf_update_payload *payload, const uint8_t pk[XF_SEAL_PUBLICKEYBYTES],
                      const char *ctx, size_t ctx_len, xf_errctx *err) {
  XF_ENSURE(payload->form != XF_UPDATE_MASKED && payload->plain, err, XF_EINVAL,
            "only a float32 or encoded update is sealed; this one is %s",
            xf_update_form_name(payload->form));
  uint8_t epk[XF_SEAL_PUBLICKEYBYTES];
  xf_seal_sender *ss = NULL;
  uint8_t *sealed = NULL;
  size_t sealed_len = 0;
  xf_err rc = xf_seal_sender_new(pk, (const uint8_t *)ctx, ctx_len, &ss, epk);
  if (rc == XF_OK)
    rc = xf_seal_stream(ss, payload->plain, payload->plain_len, XF_SEAL_STREAM_CHUNK, &sealed,
                        &sealed_len);
  xf_seal_sender_free(ss);
  if (rc != XF_OK) return xf_fail(err, rc, "cannot seal the update to the aggregator's key");
  if (payload->wire != payload->plain) xf_free(payload->wire);
  payload->wire = sealed;
  payload->wire_len = sealed_len;
  memcpy(payload->sealed_by, epk, sizeof(epk));
  payload->sealed = true;
  return XF_OK;
}

/* MASKED: select, then noise share and quantization, into out->words. */
static xf_err prepare_masked(const xf_update_plan *p, const float *v, float *residual,
                             xf_noise *noise, xf_update_payload *out, xf_errctx *err) {
  size_t m = (size_t)p->sa.params.length;
  float *selected = xf_mallocarray(m, sizeof(float));
  out->words = xf_mallocarray(m, sizeof(uint32_t));
  if (!selected || !out->words) {
    xf_free(selected);
    return xf_fail(err, XF_ENOMEM, "out of memory quantizing the update (%zu values)", m);
  }
  xf_err rc = xf_update_select(p, v, residual, selected, err);
  if (rc == XF_OK) rc = xf_update_quantize(p, selected, noise, out->words, &out->clipped, err);
  xf_free(selected);
  if (rc != XF_OK) return rc;
  out->n_words = m;
  /* Masked values are uniform mod 2^bits: packed, that is all they cost. */
  out->element_count = xf_codec_packed_bytes(m, p->sa.params.bits);
  return XF_OK;
}

xf_err xf_update_prepare(const xf_update_plan *p, float *v, float *residual, xf_noise *noise,
                         const char *seal_ctx, size_t seal_ctx_len, xf_update_payload *out,
                         xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  out->form = p->form;
  out->norm = xf_update_clip(v, p->n_params, p->clip);
  xf_err rc = xf_update_noise(v, p->n_params, p->noise_sd, noise, p->threads, err);
  if (rc == XF_OK) {
    switch (p->form) {
    case XF_UPDATE_MASKED: rc = prepare_masked(p, v, residual, noise, out, err); break;
    case XF_UPDATE_ENCODED:
      rc = xf_update_encode(p, v, residual, &out->plain, &out->plain_len, err);
      out->element_count = out->plain_len;
      break;
    case XF_UPDATE_FLOAT32:
      out->plain_len = p->n_params * sizeof(float);
      out->plain = xf_malloc(out->plain_len);
      if (!out->plain)
        rc = xf_fail(err, XF_ENOMEM, "out of memory keeping the update (%zu bytes)",
                     out->plain_len);
      else
        memcpy(out->plain, v, out->plain_len);
      out->element_count = p->n_params;
      break;
    default: rc = xf_fail(err, XF_EINVAL, "unknown update form %d", (int)p->form); break;
    }
  }
  if (rc == XF_OK && p->form != XF_UPDATE_MASKED) {
    /* Sealed to the aggregator that folds it: nothing in between reads it. */
    if (p->sealed) rc = xf_update_seal(out, p->seal_pk, seal_ctx, seal_ctx_len, err);
    else {
      out->wire = out->plain;
      out->wire_len = out->plain_len;
    }
  }
  if (rc != XF_OK) {
    xf_update_payload_free(out);
    return rc;
  }
  return XF_OK;
}

xf_err xf_update_mask(xf_update_payload *payload, xf_secagg_client *client, uint32_t bits,
                      xf_errctx *err) {
  XF_ENSURE(payload->form == XF_UPDATE_MASKED && payload->words, err, XF_EINVAL,
            "only a masked update takes masks; this one is %s",
            xf_update_form_name(payload->form));
  XF_ENSURE(!payload->wire, err, XF_EINVAL, "the update is masked already");
  XF_ENSURE(bits >= 1 && bits <= 32, err, XF_EINVAL, "cannot pack to %u bits", (unsigned)bits);
  size_t packed = xf_codec_packed_bytes(payload->n_words, bits);
  uint8_t *wire = xf_malloc(packed ? packed : 1);
  if (!wire) return xf_fail(err, XF_ENOMEM, "out of memory packing the update");
  xf_err rc = xf_secagg_client_mask(client, payload->words, 0, payload->n_words, payload->words,
                                    err);
  if (rc != XF_OK) {
    xf_free(wire);
    return rc;
  }
  xf_codec_pack_bits(payload->words, payload->n_words, bits, wire);
  payload->wire = wire;
  payload->wire_len = packed;
  payload->element_count = packed;
  return XF_OK;
}

/* ---- the receiver ------------------------------------------------------------------------------ */

void xf_update_expect_for(const xf_jobspec *spec, size_t n_params, bool masked,
                          uint64_t sa_length, uint32_t sa_bits, bool sealed,
                          uint32_t contributors, xf_update_expect *out) {
  memset(out, 0, sizeof(*out));
  out->n_params = n_params;
  xf_codec_uplink codec;
  if (masked) {
    out->form = XF_UPDATE_MASKED;
    out->masked_bytes = xf_codec_packed_bytes((size_t)sa_length, sa_bits);
    return; /* masked integers are not sealed: only the sum is ever read */
  }
  out->sealed = sealed;
  if (job_uplink(spec, &codec)) {
    /* A region's aggregate keeps all of its sites' top-k values. */
    if (codec.topk_fraction > 0) {
      double f = codec.topk_fraction * (contributors ? contributors : 1);
      codec.topk_fraction = f > 1 ? 1 : f;
    }
    out->form = XF_UPDATE_ENCODED;
    out->max_encoded = xf_codec_encoded_max(&codec, n_params);
    out->float_ok = true;
  } else {
    out->form = XF_UPDATE_FLOAT32;
  }
}

/* The sentence that says what an update of this job must be. */
static void expect_sentence(const xf_update_expect *e, char *why, size_t why_len) {
  switch (e->form) {
  case XF_UPDATE_MASKED:
    snprintf(why, why_len, "an update of this job is its masked integers packed to %llu bytes "
             "(U8) with a weight > 0", (unsigned long long)e->masked_bytes);
    break;
  case XF_UPDATE_ENCODED:
    snprintf(why, why_len, "an update of this job is its %zu values encoded for the uplink (U8, "
             "at most %llu bytes) with a weight > 0", e->n_params,
             (unsigned long long)e->max_encoded);
    break;
  default:
    snprintf(why, why_len, "an update of this job is %zu float32 values with a weight > 0",
             e->n_params);
    break;
  }
}

xf_err xf_update_expect_check(const xf_update_expect *e, const xf_update_announce *a,
                              xf_update_form *form, uint64_t *plain_bytes, char *why,
                              size_t why_len) {
  char scratch[1];
  if (!why || why_len == 0) {
    why = scratch;
    why_len = sizeof(scratch);
  }
  why[0] = '\0';
  uint64_t plain = a->total_bytes;
  if (e->sealed) {
    if (a->sealed_by_len != XF_SEAL_PUBLICKEYBYTES || a->sealed_chunk != XF_SEAL_STREAM_CHUNK ||
        a->chunk_bytes != XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES ||
        !xf_seal_stream_plain_length(a->total_bytes, XF_SEAL_STREAM_CHUNK, &plain)) {
      snprintf(why, why_len, "updates of this job come sealed to the key of its task offer "
               "(TensorBegin.sealed_by, chunks of %zu bytes)", (size_t)XF_SEAL_STREAM_CHUNK);
      return XF_EFORMAT;
    }
  } else if (a->sealed_by_len != 0) {
    snprintf(why, why_len, "this round has no sealing key for updates of this job: send it "
             "without sealed_by");
    return XF_EFORMAT;
  }
  bool as_float = e->form != XF_UPDATE_MASKED && (e->form == XF_UPDATE_FLOAT32 || e->float_ok) &&
                  !a->bytes && a->element_count == e->n_params &&
                  plain == (uint64_t)e->n_params * 4;
  bool encoded = e->form == XF_UPDATE_ENCODED && a->bytes && a->element_count == plain &&
                 plain > 0 && plain <= e->max_encoded;
  bool masked = e->form == XF_UPDATE_MASKED && a->bytes && a->element_count == plain &&
                plain == e->masked_bytes;
  if (!(as_float || encoded || masked) || a->weight == 0) {
    expect_sentence(e, why, why_len);
    return XF_EFORMAT;
  }
  if (form) *form = as_float ? XF_UPDATE_FLOAT32 : encoded ? XF_UPDATE_ENCODED : XF_UPDATE_MASKED;
  if (plain_bytes) *plain_bytes = plain;
  return XF_OK;
}

xf_err xf_update_decode(const xf_update_expect *e, const uint8_t *bytes, size_t len, float *out,
                        xf_errctx *err) {
  XF_ENSURE(e->form == XF_UPDATE_ENCODED, err, XF_EINVAL,
            "updates of this job are %s, not encoded", xf_update_form_name(e->form));
  return xf_codec_decode(bytes, len, e->n_params, out, err);
}
