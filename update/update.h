/* SPDX-License-Identifier: Apache-2.0 */
/* The update pipeline: what happens to a model delta between training and
 * the wire, as named stages run under one plan — delta, clip, noise,
 * select, quantize/encode, then seal or mask — and what the receiver
 * expects of the stream, from the same plan. The site runs it on its
 * delta; a regional aggregator runs it on its region's aggregate.
 * docs/update.md is the reference; docs/privacy.md and docs/compression.md
 * say why each stage is where it is. Nothing here knows the protocol:
 * the daemons map plans and payloads onto TaskOffer, TaskGo and
 * TensorBegin. */
#ifndef XF_UPDATE_UPDATE_H
#define XF_UPDATE_UPDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "codec/codec.h"
#include "crypto/seal.h"
#include "crypto/secagg.h"
#include "job/jobspec.h"
#include "privacy/noise.h"
#include "privacy/plan.h"

/* What travels. */
typedef enum xf_update_form {
  XF_UPDATE_FLOAT32 = 0, /* n_params float32 values, little-endian */
  XF_UPDATE_ENCODED,     /* the uplink codec's bytes (codec/codec.h) */
  XF_UPDATE_MASKED       /* secure aggregation: the selected values on the round's
                            shared integer scale, masked, packed to `bits` bits */
} xf_update_form;

/* "float32", "encoded", "masked"; "unknown" outside the enum. */
const char *xf_update_form_name(xf_update_form f);

/* One round of secure aggregation as its aggregator set it up for this
 * sender (the protocol's SecAggSetup). */
typedef struct xf_update_secagg {
  xf_secagg_params params; /* n, threshold, bits, length (values masked), degree, graph seed */
  uint32_t index;          /* this sender's place, 1..n */
  xf_codec_fixed fixed;    /* the shared integer scale */
  double scale;            /* this sender's share of the cohort's weight, (0, 1] */
  uint64_t subset;         /* values sent: a shared random subset of this many, 0: all */
  uint64_t subset_seed;
} xf_update_secagg;

/* What the task said about the update, besides the job spec. */
typedef struct xf_update_offer {
  bool secagg;                              /* the update is masked: sa is set */
  xf_update_secagg sa;
  bool sealed;                              /* sealed to seal_pk (never with secagg) */
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  uint64_t rounding_seed;                   /* stochastic rounding of qN and of the
                                               shared scale: repeats with the job's seed */
} xf_update_offer;

/* The pipeline for one update. Every field is set by the plan builders
 * below; tests may build one by hand. */
typedef struct xf_update_plan {
  size_t n_params;
  xf_update_form form;
  double clip;          /* clip: L2 bound on the delta; 0: no clipping */
  double noise_sd;      /* noise: sd of the Gaussian added to the clipped delta
                           (site unit, mode local); 0: none */
  xf_codec_uplink codec;/* ENCODED: the uplink codec */
  bool residual;        /* top-k (ENCODED) or the shared subset (MASKED) keeps
                           what it leaves out in the caller's residual */
  bool keep_nonzeros;   /* ENCODED, an aggregate: top-k keeps at least as many
                           values as the aggregate has nonzeros (the sum of its
                           sites' top-k selections) */
  xf_update_secagg sa;  /* MASKED */
  double share_sd;      /* MASKED, mode distributed: sd of this sender's share of
                           the noise on its scaled values; 0: none */
  uint64_t rounding_seed;
  bool sealed;          /* FLOAT32 and ENCODED: sealed to seal_pk */
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  unsigned threads;     /* for the noise samplers; 0 means 1 */
} xf_update_plan;

/* The plan of a site's update: clip and noise from the job's privacy
 * section (unit site clips to privacy.clip; mode local adds the whole
 * N(0, (pp->noise_multiplier * clip)^2); mode distributed adds this site's
 * share under secure aggregation, calibrated with xf_privacy_grid_sigma at
 * noise_multiplier / sqrt(threshold) on the scaled clip), then masked when
 * the offer has secure aggregation, else encoded when the job compresses
 * its uplink, else float32; sealed when the offer names a key. pp is the
 * site's privacy plan for the job on its dataset (xf_job_privacy_plan; NULL
 * reads as no noise at the site).
 * XF_EINVAL naming what does not fit: a secure-aggregation setup whose
 * length is not the subset (or n_params), a subset the job's uplink does
 * not ask for (or top-k without one), a scale outside (0, 1], bits other
 * than the job's, an index outside the cohort, parameters
 * xf_secagg_params_check refuses, a key with secure aggregation, a job with
 * secure aggregation and no setup or a setup for a job without it. */
xf_err xf_update_plan_site(const xf_jobspec *spec, const xf_privacy_plan *pp, size_t n_params,
                           const xf_update_offer *offer, unsigned threads, xf_update_plan *out,
                           xf_errctx *err) XF_WARN_UNUSED;

/* The plan of a regional aggregator's aggregate: no clip and no noise (its
 * sites applied them), encoded with the job's uplink codec (top-k keeping
 * the aggregate's nonzeros, with the region's own residual), sealed when
 * the offer names a key. Errors as xf_update_plan_site's. */
xf_err xf_update_plan_aggregate(const xf_jobspec *spec, size_t n_params,
                                const xf_update_offer *offer, xf_update_plan *out,
                                xf_errctx *err) XF_WARN_UNUSED;

/* ---- the stages ---------------------------------------------------------------------------
 * Each one is a function of its own with known answers in tests/test_update.c. */

/* delta: local -= global, element by element (n values). */
void xf_update_delta(float *local, const float *global, size_t n);

/* clip: scales v so that its L2 norm (summed in double) is at most clip;
 * leaves it as it is when it already is, or when clip is 0. Returns the
 * norm before clipping. */
double xf_update_clip(float *v, size_t n, double clip);

/* noise: adds N(0, sd^2) to each value from noise (xf_noise_gaussian_vec_par
 * with `threads`). sd 0 adds nothing. XF_ERANGE when a value leaves the
 * sampler's range. */
xf_err xf_update_noise(float *v, size_t n, double sd, xf_noise *noise, unsigned threads,
                       xf_errctx *err) XF_WARN_UNUSED;

/* select (MASKED): the values that travel, scaled by the sender's share of
 * the weight: all n_params of v, or the round's shared random subset
 * (xf_codec_random_subset of sa.subset out of n_params with
 * sa.subset_seed, ascending). With a subset and a residual (the plan's
 * `residual`), v is first added into it, the subset is taken from it and
 * its selected entries are zeroed (what is not sent waits there for a later
 * round). out receives sa.params.length values. XF_EINVAL when the plan
 * keeps a residual and none is given, or sa.params.length is not what is
 * selected; XF_ENOMEM. */
xf_err xf_update_select(const xf_update_plan *p, const float *v, float *residual, float *out,
                        xf_errctx *err) XF_WARN_UNUSED;

/* quantize (MASKED): adds this sender's share of the noise (share_sd, from
 * noise) to the selected values, then rounds them stochastically onto the
 * shared integer scale (xf_codec_quantize_fixed with rounding_seed).
 * *clipped counts values beyond the scale's bound. */
xf_err xf_update_quantize(const xf_update_plan *p, float *selected, xf_noise *noise,
                          uint32_t *out, size_t *clipped, xf_errctx *err) XF_WARN_UNUSED;

/* encode (ENCODED): the uplink codec over v with the residual (top-k), the
 * fraction widened to v's nonzeros when keep_nonzeros. *out (xf_malloc'ed,
 * the caller frees) and *len. */
xf_err xf_update_encode(const xf_update_plan *p, const float *v, float *residual, uint8_t **out,
                        size_t *len, xf_errctx *err) XF_WARN_UNUSED;

/* ---- running the pipeline ------------------------------------------------------------------ */

/* An update ready to go, or (MASKED) waiting for its masks. */
typedef struct xf_update_payload {
  xf_update_form form;
  uint64_t element_count; /* FLOAT32: n_params; ENCODED: bytes; MASKED: packed bytes */
  uint8_t *plain;         /* FLOAT32 and ENCODED: what travels before sealing (owned) */
  size_t plain_len;
  uint32_t *words;        /* MASKED: sa.params.length integers on the shared scale,
                             masked in place by xf_update_mask (owned) */
  size_t n_words;
  uint8_t *wire;          /* what the stream carries: sealed bytes, packed masked
                             integers, or plain itself (owned unless == plain) */
  size_t wire_len;
  uint8_t sealed_by[XF_SEAL_PUBLICKEYBYTES]; /* sealed: the ephemeral key */
  bool sealed;
  double norm;            /* L2 norm of the delta before clipping */
  size_t clipped;         /* MASKED: values beyond the shared scale */
} xf_update_payload;

/* Runs clip, noise, then select + quantize (MASKED) or encode (ENCODED) on
 * the delta v (n_params values; changed in place), with residual
 * (n_params floats, or NULL when the plan keeps none) and noise (may be NULL
 * when the plan adds none). FLOAT32 and ENCODED payloads are then sealed
 * when the plan says so, under context `seal_ctx` (xf_seal_stream_context);
 * a MASKED one waits for xf_update_mask. A FLOAT32 payload's plain is a copy
 * of v. On failure *out is empty (nothing to free); the residual may have
 * taken v already (MASKED) and must not be saved. */
xf_err xf_update_prepare(const xf_update_plan *p, float *v, float *residual, xf_noise *noise,
                         const char *seal_ctx, size_t seal_ctx_len, xf_update_payload *out,
                         xf_errctx *err) XF_WARN_UNUSED;

/* seal: seals payload->plain to pk under ctx, replacing payload->wire (a
 * key offered anew after the receiver restarted seals the same plaintext
 * again). */
xf_err xf_update_seal(xf_update_payload *payload, const uint8_t pk[XF_SEAL_PUBLICKEYBYTES],
                      const char *ctx, size_t ctx_len, xf_errctx *err) XF_WARN_UNUSED;

/* mask (MASKED): adds the round's masks to the words (the shares were
 * routed: xf_secagg_client_routed) and packs them to `bits` bits as the
 * wire. Once only: XF_EINVAL for a payload masked already (masks added
 * twice would not cancel) or one that is not MASKED; the payload is
 * unchanged on any error. */
xf_err xf_update_mask(xf_update_payload *payload, xf_secagg_client *client, uint32_t bits,
                      xf_errctx *err) XF_WARN_UNUSED;

void xf_update_payload_free(xf_update_payload *payload);

/* ---- the receiver ----------------------------------------------------------------------------- */

/* What an aggregator accepts as one sender's update in a round. */
typedef struct xf_update_expect {
  xf_update_form form;
  size_t n_params;
  uint64_t max_encoded;  /* ENCODED: the codec's largest output */
  uint64_t masked_bytes; /* MASKED: packed length of sa_length values */
  bool float_ok;         /* ENCODED: float32 is taken too (an aggregate that could not
                            be encoded; from any sender, as before this module) */
  bool sealed;           /* FLOAT32 and ENCODED must come sealed in stream chunks of
                            XF_SEAL_STREAM_CHUNK */
} xf_update_expect;

/* The expectations for one sender under job spec: masked (sa_length values
 * of sa_bits bits) when the round runs secure aggregation over it, else
 * encoded when the job compresses its uplink (a regional aggregate's top-k
 * widened to its `contributors` sites' worth, capped at 1; 0 counts as 1),
 * else float32; sealed when the round has a sealing key (never masked
 * updates: only their sum is ever read). */
void xf_update_expect_for(const xf_jobspec *spec, size_t n_params, bool masked,
                          uint64_t sa_length, uint32_t sa_bits, bool sealed,
                          uint32_t contributors, xf_update_expect *out);

/* What a stream announces (TensorBegin, mapped by the daemon). */
typedef struct xf_update_announce {
  bool bytes;             /* dtype U8 (encoded or masked), else float32 */
  uint64_t element_count;
  uint64_t total_bytes;   /* on the wire (sealed: with every chunk's tag) */
  uint64_t weight;
  size_t sealed_by_len;   /* 0 when not sealed */
  uint64_t sealed_chunk;
  uint64_t chunk_bytes;
} xf_update_announce;

/* Checks an announcement against the expectations. XF_OK with *form (what
 * it carries) and *plain_bytes (its length before sealing); either may be
 * NULL. XF_EFORMAT with why (why_len bytes, may be 0: a sentence for the
 * sender, what an update of this job must be) for a wrong dtype, count or
 * length, a weight of 0, an unsealed stream where the round has a key, or a
 * sealed one where it has none. */
xf_err xf_update_expect_check(const xf_update_expect *e, const xf_update_announce *a,
                              xf_update_form *form, uint64_t *plain_bytes, char *why,
                              size_t why_len) XF_WARN_UNUSED;

/* Decodes a whole ENCODED update (len bytes) into n_params floats (the
 * codec's decoder). XF_EFORMAT naming what is malformed. */
xf_err xf_update_decode(const xf_update_expect *e, const uint8_t *bytes, size_t len, float *out,
                        xf_errctx *err) XF_WARN_UNUSED;

#endif
