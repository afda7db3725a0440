/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the update pipeline (update/update.h): known answers for each
 * stage (delta, clip, noise from a seeded generator, select with and without
 * the shared subset and its residual, quantize, encode and decode, seal and
 * open, masks of two secure-aggregation senders that cancel in the sum), the
 * plans each job setup maps to and the setups refused, and the receiver's
 * expectations of what a sender's payload announces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "codec/codec.h"
#include "crypto/seal.h"
#include "crypto/secagg.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "kernels/model.h"
#include "privacy/noise.h"
#include "privacy/plan.h"
#include "update/update.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* A job spec from the JSON members after the required ones. */
static void spec_of(const char *extra, xf_jobspec *spec) {
  char json[2048];
  snprintf(json, sizeof(json),
           "{\"name\": \"u\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\"},"
           " \"rounds\": 3, \"min_sites\": 2%s%s}",
           extra[0] ? ", " : "", extra);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_string(json, strlen(json), "test", spec, &err) != XF_OK)
    fail_msg("spec %s: %s: %s", json, err.field, err.msg);
}

static xf_noise *seeded_noise(uint8_t first) {
  uint8_t seed[XF_NOISE_SEED_BYTES];
  for (int i = 0; i < XF_NOISE_SEED_BYTES; i++) seed[i] = (uint8_t)(first + i);
  xf_noise *g = NULL;
  assert_int_equal(xf_noise_new_seeded(seed, &g), XF_OK);
  return g;
}

/* A secure-aggregation setup of n senders over `length` values. */
static xf_update_secagg secagg_setup(uint32_t n, uint32_t index, uint64_t length, double scale) {
  xf_update_secagg sa;
  memset(&sa, 0, sizeof(sa));
  sa.params = (xf_secagg_params){.n = n, .threshold = n, .bits = 20, .length = length,
                                 .degree = n - 1};
  for (int i = 0; i < 32; i++) sa.params.graph_seed[i] = (uint8_t)(7 * i + 1);
  sa.index = index;
  sa.fixed = (xf_codec_fixed){.step = 0.25, .bits = 20, .bound = 1000};
  sa.scale = scale;
  return sa;
}

static void expect_plan_error(xf_err want, const char *needle, const xf_jobspec *spec,
                              const xf_privacy_plan *pp, size_t n, const xf_update_offer *o) {
  xf_update_plan p;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_update_plan_site(spec, pp, n, o, 1, &p, &err);
  if (rc != want || !strstr(err.msg, needle))
    fail_msg("plan: %s (%s), expected %s naming \"%s\"", xf_err_name(rc), err.msg,
             xf_err_name(want), needle);
}

/* ---- the stages ----------------------------------------------------------------------------- */

static void delta_subtracts_the_global_model(void **state) {
  (void)state;
  float local[3] = {1.0f, 2.0f, 3.0f};
  const float global[3] = {0.5f, 2.0f, -1.0f};
  xf_update_delta(local, global, 3);
  assert_true(local[0] == 0.5f && local[1] == 0.0f && local[2] == 4.0f);
}

static void clip_scales_to_the_bound_and_returns_the_norm(void **state) {
  (void)state;
  float v[2] = {3.0f, 4.0f};
  assert_true(xf_update_clip(v, 2, 2.5) == 5.0);
  assert_true(v[0] == 1.5f && v[1] == 2.0f);
  float w[2] = {3.0f, 4.0f};
  assert_true(xf_update_clip(w, 2, 10.0) == 5.0); /* within the bound: unchanged */
  assert_true(w[0] == 3.0f && w[1] == 4.0f);
  assert_true(xf_update_clip(w, 2, 0) == 5.0); /* no clipping */
  assert_true(w[0] == 3.0f && w[1] == 4.0f);
}

static void noise_from_a_seeded_generator_repeats_and_sd_zero_adds_nothing(void **state) {
  (void)state;
  enum { N = 5000 };
  float *a = calloc(N, sizeof(float)), *b = calloc(N, sizeof(float));
  assert_non_null(a);
  assert_non_null(b);
  xf_noise *g1 = seeded_noise(1), *g2 = seeded_noise(1);
  assert_int_equal(xf_update_noise(a, N, 0.5, g1, 2, NULL), XF_OK);
  /* The same draws as the sampler itself gives, whatever the threads. */
  assert_int_equal(xf_noise_gaussian_vec_par(g2, 0.5, b, N, 1), XF_OK);
  assert_memory_equal(a, b, N * sizeof(float));
  double sq = 0;
  for (int i = 0; i < N; i++) sq += (double)a[i] * a[i];
  double sd = sqrt(sq / N);
  assert_true(sd > 0.45 && sd < 0.55);
  float c[3] = {1, 2, 3};
  assert_int_equal(xf_update_noise(c, 3, 0, NULL, 1, NULL), XF_OK);
  assert_true(c[0] == 1 && c[1] == 2 && c[2] == 3);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_update_noise(c, 3, 1.0, NULL, 1, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "generator"));
  c[1] = NAN;
  assert_int_equal(xf_update_noise(c, 3, 1.0, g1, 1, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "range"));
  xf_noise_free(g1);
  xf_noise_free(g2);
  free(a);
  free(b);
}

static void select_scales_every_value_without_a_subset(void **state) {
  (void)state;
  xf_update_plan p = {.n_params = 4, .form = XF_UPDATE_MASKED, .sa = secagg_setup(2, 1, 4, 0.5)};
  const float v[4] = {1, -2, 3, 8};
  float out[4];
  assert_int_equal(xf_update_select(&p, v, NULL, out, NULL), XF_OK);
  assert_true(out[0] == 0.5f && out[1] == -1.0f && out[2] == 1.5f && out[3] == 4.0f);
}

static void select_takes_the_shared_subset_and_keeps_the_rest_in_the_residual(void **state) {
  (void)state;
  enum { N = 6, K = 3 };
  uint32_t idx[K];
  assert_int_equal(xf_codec_random_subset(99, N, K, idx), XF_OK);
  const float v[N] = {1, 2, 3, 4, 5, 6};

  /* Without a residual: the subset's values, scaled. */
  xf_update_plan p = {.n_params = N, .form = XF_UPDATE_MASKED, .sa = secagg_setup(2, 1, K, 0.5)};
  p.sa.subset = K;
  p.sa.subset_seed = 99;
  float out[K];
  assert_int_equal(xf_update_select(&p, v, NULL, out, NULL), XF_OK);
  for (int k = 0; k < K; k++) assert_true(out[k] == v[idx[k]] * 0.5f);

  /* With one: v is added into it, the subset is sent from it and zeroed
   * there; the rest waits. */
  p.residual = true;
  float residual[N] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  assert_int_equal(xf_update_select(&p, v, residual, out, NULL), XF_OK);
  bool picked[N] = {false};
  for (int k = 0; k < K; k++) {
    assert_true(out[k] == (v[idx[k]] + 0.5f) * 0.5f);
    picked[idx[k]] = true;
  }
  for (int i = 0; i < N; i++) assert_true(residual[i] == (picked[i] ? 0.0f : v[i] + 0.5f));

  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_update_select(&p, v, NULL, out, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "residual"));
}

static void quantize_rounds_onto_the_shared_scale_and_counts_what_it_clips(void **state) {
  (void)state;
  xf_update_plan p = {.n_params = 4, .form = XF_UPDATE_MASKED, .sa = secagg_setup(2, 1, 4, 1)};
  p.sa.fixed = (xf_codec_fixed){.step = 0.25, .bits = 8, .bound = 100};
  p.sa.params.bits = 8;
  float sel[4] = {0.5f, -0.25f, 1.0f, 100.0f}; /* on the grid; the last beyond 100 units */
  uint32_t words[4];
  size_t clipped = 0;
  assert_int_equal(xf_update_quantize(&p, sel, NULL, words, &clipped, NULL), XF_OK);
  assert_int_equal(words[0], 2);
  assert_int_equal(words[1], 255); /* -1 mod 2^8 */
  assert_int_equal(words[2], 4);
  assert_int_equal(words[3], 100);
  assert_int_equal(clipped, 1);
}

static void encode_and_decode_round_trip_with_the_residual(void **state) {
  (void)state;
  xf_jobspec spec;
  spec_of("\"compression\": {\"uplink\": \"topk:0.5\"}", &spec);
  xf_update_offer o = {.rounding_seed = 5};
  xf_update_plan p;
  assert_int_equal(xf_update_plan_site(&spec, NULL, 4, &o, 1, &p, NULL), XF_OK);
  const float v[4] = {0.25f, -5.0f, 0.5f, 3.0f};
  float residual[4] = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_int_equal(xf_update_encode(&p, v, residual, &bytes, &len, NULL), XF_OK);
  xf_update_expect e;
  xf_update_expect_for(&spec, 4, false, 0, 0, false, 1, &e);
  float out[4];
  assert_int_equal(xf_update_decode(&e, bytes, len, out, NULL), XF_OK);
  assert_true(out[0] == 0 && out[1] == -5.0f && out[2] == 0 && out[3] == 3.0f);
  assert_true(residual[0] == 0.25f && residual[1] == 0 && residual[2] == 0.5f &&
              residual[3] == 0);
  xf_free(bytes);

  /* An aggregate keeps as many values as it has nonzeros (3 of 4 here). */
  assert_int_equal(xf_update_plan_aggregate(&spec, 4, &o, &p, NULL), XF_OK);
  assert_true(p.keep_nonzeros);
  const float agg[4] = {0.25f, -5.0f, 0.0f, 3.0f};
  memset(residual, 0, sizeof(residual));
  assert_int_equal(xf_update_encode(&p, agg, residual, &bytes, &len, NULL), XF_OK);
  xf_update_expect_for(&spec, 4, false, 0, 0, false, 2, &e);
  assert_int_equal(xf_update_decode(&e, bytes, len, out, NULL), XF_OK);
  assert_memory_equal(out, agg, sizeof(agg));
  xf_free(bytes);

  /* Malformed bytes are named. */
  uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_update_decode(&e, junk, sizeof(junk), out, &err), XF_EFORMAT);
  assert_true(err.msg[0] != '\0');
}

static void sealed_payload_opens_to_the_plain_update_and_reseals_to_a_new_key(void **state) {
  (void)state;
  xf_jobspec spec;
  spec_of("", &spec);
  uint8_t pk[XF_SEAL_PUBLICKEYBYTES], sk[XF_SEAL_SECRETKEYBYTES];
  assert_int_equal(xf_seal_keypair(pk, sk), XF_OK);
  xf_update_offer o = {.sealed = true};
  memcpy(o.seal_pk, pk, sizeof(pk));
  xf_update_plan p;
  assert_int_equal(xf_update_plan_site(&spec, NULL, 3, &o, 1, &p, NULL), XF_OK);
  assert_int_equal(p.form, XF_UPDATE_FLOAT32);
  assert_true(p.sealed);
  float v[3] = {1.5f, -2.0f, 0.25f};
  const float want[3] = {1.5f, -2.0f, 0.25f};
  char ctx[256];
  size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), "4", 2, 1, "s1");
  xf_update_payload pl;
  assert_int_equal(xf_update_prepare(&p, v, NULL, NULL, ctx, ctx_len, &pl, NULL), XF_OK);
  assert_true(pl.sealed);
  assert_int_equal(pl.element_count, 3);
  assert_int_equal(pl.plain_len, sizeof(want));
  assert_memory_equal(pl.plain, want, sizeof(want));
  assert_int_equal(pl.wire_len, sizeof(want) + XF_SEAL_ABYTES);
  assert_true(pl.norm == sqrt(1.5 * 1.5 + 2.0 * 2.0 + 0.25 * 0.25));
  xf_seal_receiver *rx = NULL;
  assert_int_equal(xf_seal_receiver_new(sk, pl.sealed_by, (const uint8_t *)ctx, ctx_len, &rx),
                   XF_OK);
  uint8_t opened[sizeof(want)];
  assert_int_equal(xf_seal_open_chunk(rx, 0, pl.wire, pl.wire_len, opened), XF_OK);
  assert_memory_equal(opened, want, sizeof(want));
  xf_seal_receiver_free(rx);

  /* A new key: the same plaintext sealed again; the old key no longer opens it. */
  uint8_t pk2[XF_SEAL_PUBLICKEYBYTES], sk2[XF_SEAL_SECRETKEYBYTES];
  assert_int_equal(xf_seal_keypair(pk2, sk2), XF_OK);
  assert_int_equal(xf_update_seal(&pl, pk2, ctx, ctx_len, NULL), XF_OK);
  assert_int_equal(xf_seal_receiver_new(sk2, pl.sealed_by, (const uint8_t *)ctx, ctx_len, &rx),
                   XF_OK);
  assert_int_equal(xf_seal_open_chunk(rx, 0, pl.wire, pl.wire_len, opened), XF_OK);
  assert_memory_equal(opened, want, sizeof(want));
  xf_seal_receiver_free(rx);
  assert_int_equal(xf_seal_receiver_new(sk, pl.sealed_by, (const uint8_t *)ctx, ctx_len, &rx),
                   XF_OK);
  assert_int_equal(xf_seal_open_chunk(rx, 0, pl.wire, pl.wire_len, opened), XF_EINTEGRITY);
  xf_seal_receiver_free(rx);
  xf_update_payload_free(&pl);
}

/* Two senders mask their quantized updates; the aggregator's unmasked sum
 * is the sum of the updates on the shared scale. */
static void masks_of_two_senders_cancel_in_the_sum(void **state) {
  (void)state;
  enum { N = 4 };
  xf_jobspec spec;
  spec_of("\"secure_aggregation\": {\"enabled\": true, \"bits\": 20}", &spec);
  const float updates[2][N] = {{1.0f, -0.5f, 2.0f, 0.25f}, {0.5f, 0.5f, -1.0f, 4.0f}};
  xf_secagg_params params = secagg_setup(2, 1, N, 1).params;
  xf_secagg_server *srv = NULL;
  assert_int_equal(xf_secagg_server_new(&params, &srv, NULL), XF_OK);
  xf_secagg_client *c[3] = {NULL};
  xf_update_payload pl[3];
  uint8_t adverts[2 * XF_SECAGG_ADVERT_BYTES];
  for (uint32_t i = 1; i <= 2; i++) {
    xf_update_offer o = {.secagg = true, .sa = secagg_setup(2, i, N, 1.0), .rounding_seed = i};
    xf_update_plan p;
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_update_plan_site(&spec, NULL, N, &o, 1, &p, &err) != XF_OK) fail_msg("%s", err.msg);
    assert_int_equal(p.form, XF_UPDATE_MASKED);
    float v[N];
    memcpy(v, updates[i - 1], sizeof(v));
    assert_int_equal(xf_update_prepare(&p, v, NULL, NULL, NULL, 0, &pl[i], NULL), XF_OK);
    assert_int_equal(pl[i].n_words, N);
    assert_int_equal(pl[i].element_count, xf_codec_packed_bytes(N, 20));
    assert_null(pl[i].wire);
    assert_int_equal(xf_secagg_client_new(&params, i, &c[i], NULL), XF_OK);
    xf_secagg_client_advertise(c[i], adverts + (i - 1) * XF_SECAGG_ADVERT_BYTES);
    assert_int_equal(xf_secagg_server_advert(srv, i, adverts + (i - 1) * XF_SECAGG_ADVERT_BYTES,
                                             NULL),
                     XF_OK);
  }
  xf_secagg_share_msg msgs[3];
  for (uint32_t i = 1; i <= 2; i++) {
    size_t count = 0;
    assert_int_equal(xf_secagg_client_share(c[i], adverts, &msgs[i], 1, &count, NULL), XF_OK);
    assert_int_equal(count, 1);
  }
  for (uint32_t i = 1; i <= 2; i++) {
    assert_int_equal(xf_secagg_client_receive(c[msgs[i].to], i, msgs[i].ciphertext, NULL), XF_OK);
    assert_int_equal(xf_secagg_server_shared(srv, i, NULL), XF_OK);
  }
  uint32_t u2[2], u3[2];
  size_t n_u2 = 0, n_u3 = 0;
  assert_int_equal(xf_secagg_server_routed(srv, u2, &n_u2, NULL), XF_OK);
  for (uint32_t i = 1; i <= 2; i++) {
    assert_int_equal(xf_secagg_client_routed(c[i], u2, n_u2, NULL), XF_OK);
    assert_int_equal(xf_update_mask(&pl[i], c[i], 20, NULL), XF_OK);
    assert_int_equal(pl[i].wire_len, xf_codec_packed_bytes(N, 20));
    /* Masked twice would be lost: refused. */
    xf_errctx err;
    xf_errctx_clear(&err);
    assert_int_equal(xf_update_mask(&pl[i], c[i], 20, &err), XF_EINVAL);
    uint32_t y[N];
    assert_int_equal(xf_codec_unpack_bits(pl[i].wire, pl[i].wire_len, N, 20, y, NULL), XF_OK);
    assert_int_equal(xf_secagg_server_add_masked(srv, i, 0, N, y, NULL), XF_OK);
  }
  assert_int_equal(xf_secagg_server_survivors(srv, u3, &n_u3, NULL), XF_OK);
  for (uint32_t i = 1; i <= 2; i++) {
    uint8_t msg[1024];
    size_t len = 0;
    assert_true(xf_secagg_reveal_max_bytes(&params) <= sizeof(msg));
    assert_int_equal(xf_secagg_client_unmask(c[i], u3, n_u3, msg, sizeof(msg), &len, NULL),
                     XF_OK);
    assert_int_equal(xf_secagg_server_add_reveal(srv, i, msg, len, NULL), XF_OK);
  }
  uint32_t sum[N];
  assert_int_equal(xf_secagg_server_finish(srv, sum, NULL), XF_OK);
  xf_codec_fixed fixed = secagg_setup(2, 1, N, 1).fixed;
  float got[N];
  xf_codec_dequantize_fixed(&fixed, sum, N, got);
  /* Every value is on the 0.25 grid: rounding is exact. */
  const float want[N] = {1.5f, 0.0f, 1.0f, 4.25f};
  assert_memory_equal(got, want, sizeof(want));
  for (uint32_t i = 1; i <= 2; i++) {
    xf_update_payload_free(&pl[i]);
    xf_secagg_client_free(c[i]);
  }
  xf_secagg_server_free(srv);
}

/* ---- the plans ------------------------------------------------------------------------------ */

static void site_plans_map_each_setup_to_its_form(void **state) {
  (void)state;
  xf_jobspec spec;
  xf_update_plan p;
  xf_update_offer o = {.rounding_seed = 77};
  xf_privacy_plan none = {0};

  /* Nothing asked: float32, no clip, no noise. */
  spec_of("", &spec);
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &o, 3, &p, NULL), XF_OK);
  assert_int_equal(p.form, XF_UPDATE_FLOAT32);
  assert_true(p.clip == 0 && p.noise_sd == 0 && !p.sealed && !p.residual);
  assert_int_equal(p.n_params, 10);
  assert_int_equal(p.rounding_seed, 77);
  assert_int_equal(p.threads, 3);

  /* A sealing key: sealed to it. */
  xf_update_offer sealed = {.sealed = true};
  memset(sealed.seal_pk, 9, sizeof(sealed.seal_pk));
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &sealed, 1, &p, NULL), XF_OK);
  assert_true(p.sealed && p.seal_pk[0] == 9 && p.form == XF_UPDATE_FLOAT32);

  /* Uplink compression: encoded, with a residual only for top-k. */
  spec_of("\"compression\": {\"uplink\": \"q8\"}", &spec);
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &sealed, 1, &p, NULL), XF_OK);
  assert_int_equal(p.form, XF_UPDATE_ENCODED);
  assert_true(p.codec.quant_bits == 8 && p.codec.topk_fraction == 0 && !p.residual && p.sealed);
  spec_of("\"compression\": {\"uplink\": \"topk:0.1+q8\"}", &spec);
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &o, 1, &p, NULL), XF_OK);
  assert_true(p.form == XF_UPDATE_ENCODED && p.residual && !p.keep_nonzeros);

  /* Site unit, central: clipped here, noised at the aggregator. */
  spec_of("\"privacy\": {\"unit\": \"site\", \"mode\": \"central\", \"clip\": 1.5,"
          " \"noise_multiplier\": 1.0}, \"sites_per_round\": 0.5",
          &spec);
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &o, 1, &p, NULL), XF_OK);
  assert_true(p.clip == 1.5 && p.noise_sd == 0);

  /* Site unit, local: clipped and the whole noise added here. */
  spec_of("\"privacy\": {\"unit\": \"site\", \"mode\": \"local\", \"clip\": 2.0,"
          " \"noise_multiplier\": 1.5}",
          &spec);
  xf_privacy_plan local = {.site_noise = true, .noise_multiplier = 1.5};
  assert_int_equal(xf_update_plan_site(&spec, &local, 10, &o, 1, &p, NULL), XF_OK);
  assert_true(p.clip == 2.0 && p.noise_sd == 3.0);

  /* Record unit: clipping and noise happen in training, not here. */
  spec_of("\"privacy\": {\"unit\": \"record\", \"mode\": \"local\", \"clip\": 1.0,"
          " \"noise_multiplier\": 1.1}",
          &spec);
  assert_int_equal(xf_update_plan_site(&spec, &local, 10, &o, 1, &p, NULL), XF_OK);
  assert_true(p.clip == 0 && p.noise_sd == 0 && p.form == XF_UPDATE_FLOAT32);

  /* Secure aggregation: masked, the setup copied; a shared subset keeps a
   * residual. */
  spec_of("\"secure_aggregation\": {\"enabled\": true}, \"compression\": {\"uplink\": \"q8\"}",
          &spec);
  xf_update_offer sa = {.secagg = true, .sa = secagg_setup(3, 2, 10, 0.5)};
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &sa, 1, &p, NULL), XF_OK);
  assert_int_equal(p.form, XF_UPDATE_MASKED);
  assert_true(p.sa.index == 2 && p.sa.scale == 0.5 && p.sa.params.length == 10 && !p.residual);
  assert_true(p.share_sd == 0);
  spec_of("\"secure_aggregation\": {\"enabled\": true}, \"compression\": {\"uplink\": "
          "\"topk:0.5+q8\"}",
          &spec);
  sa.sa = secagg_setup(3, 2, 5, 0.5);
  sa.sa.subset = 5;
  sa.sa.subset_seed = 3;
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &sa, 1, &p, NULL), XF_OK);
  assert_true(p.form == XF_UPDATE_MASKED && p.residual && p.sa.subset == 5);

  /* Distributed: this sender's share of the noise, on its scaled clip. */
  spec_of("\"secure_aggregation\": {\"enabled\": true}, \"privacy\": {\"unit\": \"site\","
          " \"mode\": \"distributed\", \"clip\": 2.0, \"noise_multiplier\": 1.2}",
          &spec);
  sa.sa = secagg_setup(4, 1, 10, 0.25);
  sa.sa.params.threshold = 3;
  sa.sa.params.degree = 3;
  assert_int_equal(xf_update_plan_site(&spec, &none, 10, &sa, 1, &p, NULL), XF_OK);
  double sd = 0;
  assert_int_equal(xf_privacy_grid_sigma(1.2 / sqrt(3.0), 2.0 * 0.25, 10, &sd, NULL), XF_OK);
  assert_true(p.share_sd == sd && p.clip == 2.0 && p.noise_sd == 0);
}

static void site_plans_refuse_setups_that_do_not_fit_and_say_why(void **state) {
  (void)state;
  xf_jobspec spec;
  spec_of("\"secure_aggregation\": {\"enabled\": true}, \"compression\": {\"uplink\": \"q8\"}",
          &spec);
  xf_update_offer o = {.secagg = true, .sa = secagg_setup(3, 1, 10, 0.5)};
  o.sealed = true;
  expect_plan_error(XF_EINVAL, "not sealed", &spec, NULL, 10, &o);
  o.sealed = false;
  o.sa.params.length = 9;
  expect_plan_error(XF_EINVAL, "masks 9 values", &spec, NULL, 10, &o);
  o.sa = secagg_setup(3, 1, 10, 0);
  expect_plan_error(XF_EINVAL, "(0, 1]", &spec, NULL, 10, &o);
  o.sa = secagg_setup(3, 1, 10, 1.5);
  expect_plan_error(XF_EINVAL, "(0, 1]", &spec, NULL, 10, &o);
  o.sa = secagg_setup(3, 1, 4, 0.5);
  o.sa.subset = 4;
  expect_plan_error(XF_EINVAL, "asks for no top-k", &spec, NULL, 10, &o);
  o.sa = secagg_setup(3, 1, 10, 0.5);
  o.sa.params.bits = 24;
  expect_plan_error(XF_EINVAL, "secure_aggregation.bits", &spec, NULL, 10, &o);
  o.sa = secagg_setup(3, 4, 10, 0.5);
  expect_plan_error(XF_EINVAL, "places this sender at 4 of 3", &spec, NULL, 10, &o);
  xf_update_offer plain = {0};
  expect_plan_error(XF_EINVAL, "no setup", &spec, NULL, 10, &plain);

  spec_of("\"secure_aggregation\": {\"enabled\": true}, \"compression\": {\"uplink\": "
          "\"topk:0.5+q8\"}",
          &spec);
  o.sa = secagg_setup(3, 1, 10, 0.5);
  expect_plan_error(XF_EINVAL, "no shared subset", &spec, NULL, 10, &o);
  o.sa = secagg_setup(3, 1, 12, 0.5);
  o.sa.subset = 12;
  expect_plan_error(XF_EINVAL, "larger than the model", &spec, NULL, 10, &o);

  spec_of("", &spec);
  o.sa = secagg_setup(3, 1, 10, 0.5);
  expect_plan_error(XF_EINVAL, "not enabled", &spec, NULL, 10, &o);
}

static void aggregate_plans_encode_keeping_nonzeros_and_refuse_masks(void **state) {
  (void)state;
  xf_jobspec spec;
  xf_update_plan p;
  xf_update_offer o = {.sealed = true, .rounding_seed = 3};
  spec_of("\"compression\": {\"uplink\": \"topk:0.05+q8\"}", &spec);
  assert_int_equal(xf_update_plan_aggregate(&spec, 100, &o, &p, NULL), XF_OK);
  assert_true(p.form == XF_UPDATE_ENCODED && p.keep_nonzeros && p.residual && p.sealed);
  assert_true(p.clip == 0 && p.noise_sd == 0 && p.share_sd == 0);
  spec_of("", &spec);
  assert_int_equal(xf_update_plan_aggregate(&spec, 100, &o, &p, NULL), XF_OK);
  assert_true(p.form == XF_UPDATE_FLOAT32 && !p.keep_nonzeros);
  o.secagg = true;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_update_plan_aggregate(&spec, 100, &o, &p, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "not masked"));
}

/* ---- the pipeline and the receiver ------------------------------------------------------------ */

/* What a TensorBegin of this payload announces. */
static xf_update_announce announce_of(const xf_update_payload *pl, uint64_t weight) {
  xf_update_announce a = {.bytes = pl->form != XF_UPDATE_FLOAT32,
                          .element_count = pl->element_count,
                          .total_bytes = pl->wire_len,
                          .weight = weight};
  if (pl->sealed) {
    a.sealed_by_len = XF_SEAL_PUBLICKEYBYTES;
    a.sealed_chunk = XF_SEAL_STREAM_CHUNK;
    a.chunk_bytes = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
  }
  return a;
}

static void expect_refused(const xf_update_expect *e, const xf_update_announce *a,
                           const char *needle) {
  char why[400];
  xf_update_form form;
  uint64_t plain = 0;
  assert_int_equal(xf_update_expect_check(e, a, &form, &plain, why, sizeof(why)), XF_EFORMAT);
  if (!strstr(why, needle)) fail_msg("refusal \"%s\" does not name \"%s\"", why, needle);
}

static void receiver_accepts_what_the_payload_announces_and_refuses_the_rest(void **state) {
  (void)state;
  enum { N = 50 };
  float base[N];
  for (int i = 0; i < N; i++) base[i] = (float)(i % 7) - 3.0f;
  uint8_t pk[XF_SEAL_PUBLICKEYBYTES], sk[XF_SEAL_SECRETKEYBYTES];
  assert_int_equal(xf_seal_keypair(pk, sk), XF_OK);
  const char *uplinks[] = {"", "\"compression\": {\"uplink\": \"q8\"}",
                           "\"compression\": {\"uplink\": \"topk:0.1+q4\"}"};
  for (int u = 0; u < 3; u++) {
    for (int s = 0; s < 2; s++) {
      xf_jobspec spec;
      spec_of(uplinks[u], &spec);
      xf_update_offer o = {.sealed = s == 1, .rounding_seed = 11};
      memcpy(o.seal_pk, pk, sizeof(pk));
      xf_update_plan p;
      assert_int_equal(xf_update_plan_site(&spec, NULL, N, &o, 1, &p, NULL), XF_OK);
      float v[N], residual[N] = {0};
      memcpy(v, base, sizeof(v));
      xf_update_payload pl;
      assert_int_equal(xf_update_prepare(&p, v, residual, NULL, "c", 1, &pl, NULL), XF_OK);
      xf_update_expect e;
      xf_update_expect_for(&spec, N, false, 0, 0, s == 1, 1, &e);
      assert_int_equal(e.form, p.form);
      xf_update_announce a = announce_of(&pl, 6);
      xf_update_form form;
      uint64_t plain = 0;
      char why[400];
      if (xf_update_expect_check(&e, &a, &form, &plain, why, sizeof(why)) != XF_OK)
        fail_msg("uplink %d sealed %d refused: %s", u, s, why);
      assert_int_equal(form, p.form);
      assert_int_equal(plain, pl.plain_len);

      /* No weight; another dtype; another length; not sealed when it must be. */
      xf_update_announce bad = a;
      bad.weight = 0;
      expect_refused(&e, &bad, "weight > 0");
      bad = a;
      bad.bytes = !a.bytes;
      expect_refused(&e, &bad, u == 0 ? "float32" : "encoded");
      bad = a;
      bad.element_count += 1;
      expect_refused(&e, &bad, "an update of this job");
      if (s == 1) {
        bad = a;
        bad.sealed_by_len = 0;
        expect_refused(&e, &bad, "sealed");
      } else {
        bad = a;
        bad.sealed_by_len = XF_SEAL_PUBLICKEYBYTES;
        expect_refused(&e, &bad, "no sealing key");
      }
      xf_update_payload_free(&pl);
    }
  }

  /* Float32 stays understood where encoded is expected (an aggregate that
   * could not be encoded). */
  xf_jobspec spec;
  spec_of(uplinks[1], &spec);
  xf_update_expect e;
  xf_update_expect_for(&spec, N, false, 0, 0, false, 3, &e);
  xf_update_announce f32 = {.bytes = false, .element_count = N, .total_bytes = N * 4, .weight = 1};
  assert_int_equal(xf_update_expect_check(&e, &f32, NULL, NULL, NULL, 0), XF_OK);

  /* Masked: exactly the packed length, U8 only. */
  xf_update_expect_for(&spec, N, true, 20, 20, true, 1, &e);
  assert_int_equal(e.form, XF_UPDATE_MASKED);
  assert_false(e.sealed);
  xf_update_announce m = {.bytes = true, .element_count = 50, .total_bytes = 50, .weight = 1};
  xf_update_form form;
  assert_int_equal(xf_update_expect_check(&e, &m, &form, NULL, NULL, 0), XF_OK);
  assert_int_equal(form, XF_UPDATE_MASKED);
  m.element_count = m.total_bytes = 49;
  expect_refused(&e, &m, "masked integers packed to 50 bytes");
  expect_refused(&e, &f32, "masked");
}

static void regional_aggregate_may_carry_its_contributors_worth_of_top_k(void **state) {
  (void)state;
  xf_jobspec spec;
  spec_of("\"compression\": {\"uplink\": \"topk:0.1+q8\"}", &spec);
  xf_update_expect one, four, many;
  xf_update_expect_for(&spec, 1000, false, 0, 0, false, 1, &one);
  xf_update_expect_for(&spec, 1000, false, 0, 0, false, 4, &four);
  xf_update_expect_for(&spec, 1000, false, 0, 0, false, 40, &many);
  xf_codec_uplink c1 = {0.1, 8}, c4 = {0.4, 8}, c10 = {1.0, 8};
  assert_int_equal(one.max_encoded, xf_codec_encoded_max(&c1, 1000));
  assert_int_equal(four.max_encoded, xf_codec_encoded_max(&c4, 1000));
  assert_int_equal(many.max_encoded, xf_codec_encoded_max(&c10, 1000)); /* capped at 1 */
}

static void prepare_runs_clip_noise_and_encode_in_order(void **state) {
  (void)state;
  /* Site unit, local mode, q16: the clipped, noised delta is what gets
   * encoded; the same stages run by hand give the same bytes. */
  enum { N = 64 };
  xf_jobspec spec;
  spec_of("\"privacy\": {\"unit\": \"site\", \"mode\": \"local\", \"clip\": 1.0,"
          " \"noise_multiplier\": 0.5}, \"compression\": {\"uplink\": \"q16\"}",
          &spec);
  xf_privacy_plan pp = {.site_noise = true, .noise_multiplier = 0.5};
  xf_update_offer o = {.rounding_seed = 1234};
  xf_update_plan p;
  assert_int_equal(xf_update_plan_site(&spec, &pp, N, &o, 2, &p, NULL), XF_OK);
  float v[N], w[N];
  for (int i = 0; i < N; i++) v[i] = w[i] = (float)((i % 5) - 2);
  xf_noise *g1 = seeded_noise(40), *g2 = seeded_noise(40);
  xf_update_payload pl;
  assert_int_equal(xf_update_prepare(&p, v, NULL, g1, NULL, 0, &pl, NULL), XF_OK);
  assert_int_equal(pl.form, XF_UPDATE_ENCODED);
  assert_true(pl.wire == pl.plain && !pl.sealed);
  double norm = xf_update_clip(w, N, 1.0);
  assert_true(norm == pl.norm);
  assert_int_equal(xf_update_noise(w, N, 0.5, g2, 1, NULL), XF_OK);
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_int_equal(xf_update_encode(&p, w, NULL, &bytes, &len, NULL), XF_OK);
  assert_int_equal(len, pl.plain_len);
  assert_memory_equal(bytes, pl.plain, len);
  assert_int_equal(pl.element_count, len);
  xf_free(bytes);
  xf_update_payload_free(&pl);
  xf_noise_free(g1);
  xf_noise_free(g2);
  assert_string_equal(xf_update_form_name(XF_UPDATE_MASKED), "masked");
  assert_string_equal(xf_update_form_name((xf_update_form)9), "unknown");
}

/* ---- what q8 guarantees a round ---------------------------------------------------------- */

/* A delta shaped like one local epoch's on Fashion-MNIST: each layer's
 * weights and biases on their own scale, and the weights of the border
 * pixels (always 0 in the images, so never moved) exactly 0. */
static void fill_delta(const xf_model *m, float *v, uint64_t seed) {
  xf_rng rng;
  xf_rng_seed(&rng, seed, 9);
  for (int l = 0; l < xf_model_num_layers(m); l++) {
    const xf_layer *L = xf_model_layer(m, l);
    if (L->kind != XF_LAYER_DENSE) continue;
    size_t in = (size_t)L->in_h * L->in_w * L->in_c;
    for (size_t i = 0; i < L->weight_count; i++) {
      size_t px = i % in, row = px / 28, col = px % 28;
      bool border = l == 0 && (row < 2 || row > 25 || col < 2 || col > 25);
      v[L->weight_offset + i] = border ? 0.0f : (float)(0.02 / (l + 1) * xf_rng_normal(&rng));
    }
    for (size_t i = 0; i < L->bias_count; i++)
      v[L->bias_offset + i] = (float)(0.005 * xf_rng_normal(&rng));
  }
}

/* The uplink of federation.sh's compress scenario (an mlp with one hidden
 * layer of 32 on 28x28 images, 10 classes; q8; three sites of unequal
 * weight; 6 rounds), through the site's plan and the aggregator's decoder.
 * What q8 guarantees there, whatever the float path that trained the delta:
 * - the bytes: a 20-byte header, 8 bytes of scale per chunk of 4096 values,
 *   one byte per value;
 * - every decoded value is within its bound of the value sent, and the
 *   bound is one step of its chunk, (max - min) / 255, up to float32
 *   rounding of the levels;
 * - the rounding is unbiased: a chunk's mean error is far below a step
 *   (Hoeffding: each error lies in an interval one step wide, so the mean
 *   of m is within step * sqrt(ln(2 / 1e-9) / (2m)) of 0 but with odds of
 *   1e-9) and its mean squared error at most step^2 / 4 plus the same slack;
 * - the weighted mean the aggregator commits is within the weighted mean
 *   of the sites' bounds of the float32 mean, and its squared error is at
 *   most what independent errors of variance step^2 / 4 give;
 * - over the rounds (a new rounding seed each), the model's accumulated
 *   error grows like the square root of the rounds, not like the rounds.
 * The end accuracy of the job is not among these: federation.sh asserts
 * it with the margin its spread across float paths justifies. */
static void q8_updates_of_the_compress_job_stay_within_their_bound_each_round(void **state) {
  (void)state;
  static const char json[] =
      "{\"name\": \"itest\", \"model\": {\"arch\": \"mlp\", \"hidden\": [32]},"
      " \"data\": {\"dataset\": \"fmnist\"}, \"rounds\": 6, \"min_sites\": 2,"
      " \"compression\": {\"uplink\": \"q8\", \"downlink\": \"fp16\"}, \"seed\": 11}";
  enum { SITES = 3, ROUNDS = 6 };
  static const double weight[SITES] = {20493, 22739, 16768};
  xf_jobspec spec;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_string(json, strlen(json), "test", &spec, &err) != XF_OK)
    fail_msg("spec: %s: %s", err.field, err.msg);
  xf_model_spec ms;
  xf_model *model = NULL;
  assert_int_equal(xf_jobspec_model_spec(&spec, 28, 28, 1, 10, &ms, NULL), XF_OK);
  assert_int_equal(xf_model_create(&ms, &model, NULL), XF_OK);
  const size_t n = xf_model_num_params(model);
  assert_int_equal(n, 784 * 32 + 32 + 32 * 10 + 10);
  const size_t chunks = (n + XF_CODEC_CHUNK - 1) / XF_CODEC_CHUNK;
  xf_update_expect e;
  xf_update_expect_for(&spec, n, false, 0, 0, false, 1, &e);
  assert_int_equal(e.form, XF_UPDATE_ENCODED);

  float *v = calloc(n, sizeof(float)), *sent = calloc(n, sizeof(float)),
        *dec = calloc(n, sizeof(float)), *dec2 = calloc(n, sizeof(float)),
        *bound = calloc(n, sizeof(float));
  double *err_round = calloc(n, sizeof(double)), *bound_round = calloc(n, sizeof(double)),
         *mean_round = calloc(n, sizeof(double)), *err_total = calloc(n, sizeof(double));
  assert_true(v && sent && dec && dec2 && bound && err_round && bound_round && mean_round &&
              err_total);
  double w_total = 0;
  for (int s = 0; s < SITES; s++) w_total += weight[s];
  double expected_sq_total = 0, worst_rel = 0;
  for (int r = 1; r <= ROUNDS; r++) {
    memset(err_round, 0, n * sizeof(double));
    memset(bound_round, 0, n * sizeof(double));
    memset(mean_round, 0, n * sizeof(double));
    double expected_sq = 0, norm_sq = 0;
    for (int s = 0; s < SITES; s++) {
      fill_delta(model, v, 100u * (uint64_t)r + (uint64_t)s);
      memcpy(sent, v, n * sizeof(float));
      xf_update_offer o = {.rounding_seed = 0x5eed0000u + 16u * (uint64_t)r + (uint64_t)s};
      xf_update_plan p;
      assert_int_equal(xf_update_plan_site(&spec, NULL, n, &o, 1, &p, NULL), XF_OK);
      assert_int_equal(p.form, XF_UPDATE_ENCODED);
      xf_update_payload pl;
      assert_int_equal(xf_update_prepare(&p, v, NULL, NULL, NULL, 0, &pl, NULL), XF_OK);
      assert_memory_equal(v, sent, n * sizeof(float)); /* no clip, no noise */
      assert_int_equal(pl.plain_len, XF_CODEC_HEADER_BYTES + 8 * chunks + n);
      assert_true(pl.plain_len <= e.max_encoded);
      assert_int_equal(xf_update_decode(&e, pl.plain, pl.plain_len, dec, NULL), XF_OK);
      assert_int_equal(xf_codec_decode_bound(pl.plain, pl.plain_len, n, dec2, bound, NULL), XF_OK);
      assert_memory_equal(dec, dec2, n * sizeof(float));
      for (size_t j = 0; j < n; j += XF_CODEC_CHUNK) {
        size_t m = n - j < XF_CODEC_CHUNK ? n - j : XF_CODEC_CHUNK;
        double lo = sent[j], hi = sent[j], sum = 0, sq = 0;
        for (size_t i = j; i < j + m; i++) {
          lo = fmin(lo, sent[i]);
          hi = fmax(hi, sent[i]);
        }
        double step = (hi - lo) / 255, top = fmax(fabs(lo), fabs(hi));
        for (size_t i = j; i < j + m; i++) {
          double d = (double)dec[i] - sent[i];
          if (!(fabs(d) <= bound[i]))
            fail_msg("round %d site %d: value %zu sent %.9g, decoded %.9g: error %g > bound %g",
                     r, s, i, (double)sent[i], (double)dec[i], fabs(d), (double)bound[i]);
          if (bound[i] < step || bound[i] > step * (1 + 0x1p-20) + 0x1p-20 * top)
            fail_msg("round %d site %d: value %zu: bound %g is not the chunk's step %g", r, s, i,
                     (double)bound[i], step);
          sum += d;
          sq += d * d;
          err_round[i] += weight[s] / w_total * d;
          bound_round[i] += weight[s] / w_total * bound[i];
          expected_sq += (weight[s] / w_total) * (weight[s] / w_total) * bound[i] * bound[i] / 4;
        }
        double slack = sqrt(log(2 / 1e-9) / (2.0 * m));
        if (fabs(sum / m) > step * slack || sq / m > step * step * (0.25 + slack))
          fail_msg("round %d site %d, chunk at %zu: mean error %g, mean squared %g (step %g)", r,
                   s, j, sum / m, sq / m, step);
      }
      for (size_t i = 0; i < n; i++) mean_round[i] += weight[s] / w_total * sent[i];
      xf_update_payload_free(&pl);
    }
    /* The committed mean: within the weighted bounds, and no larger an
     * error than independent rounding gives. */
    double sq = 0;
    for (size_t i = 0; i < n; i++) {
      if (fabs(err_round[i]) > bound_round[i] * (1 + 1e-12))
        fail_msg("round %d: the mean's value %zu is off by %g > %g", r, i, fabs(err_round[i]),
                 bound_round[i]);
      sq += err_round[i] * err_round[i];
      norm_sq += mean_round[i] * mean_round[i];
      err_total[i] += err_round[i];
    }
    assert_true(sq <= 1.1 * expected_sq);
    expected_sq_total += expected_sq;
    double rel = sqrt(sq / norm_sq);
    if (rel > worst_rel) worst_rel = rel;
  }
  /* Independent errors: their squares add, so the accumulated error's norm
   * grows like sqrt(ROUNDS). Errors of one sign round after round would
   * give about ROUNDS times this. */
  double sq_total = 0;
  for (size_t i = 0; i < n; i++) sq_total += err_total[i] * err_total[i];
  assert_true(sq_total <= 1.1 * expected_sq_total);
  print_message("q8 on %zu values, %d sites, %d rounds: %zu bytes an update; the mean's error is "
                "at most %.2f%% of its norm a round\n",
                n, SITES, ROUNDS, XF_CODEC_HEADER_BYTES + 8 * chunks + n, 100 * worst_rel);
  xf_model_free(model);
  free(v);
  free(sent);
  free(dec);
  free(dec2);
  free(bound);
  free(err_round);
  free(bound_round);
  free(mean_round);
  free(err_total);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(delta_subtracts_the_global_model),
      cmocka_unit_test(clip_scales_to_the_bound_and_returns_the_norm),
      cmocka_unit_test(noise_from_a_seeded_generator_repeats_and_sd_zero_adds_nothing),
      cmocka_unit_test(select_scales_every_value_without_a_subset),
      cmocka_unit_test(select_takes_the_shared_subset_and_keeps_the_rest_in_the_residual),
      cmocka_unit_test(quantize_rounds_onto_the_shared_scale_and_counts_what_it_clips),
      cmocka_unit_test(encode_and_decode_round_trip_with_the_residual),
      cmocka_unit_test(sealed_payload_opens_to_the_plain_update_and_reseals_to_a_new_key),
      cmocka_unit_test(masks_of_two_senders_cancel_in_the_sum),
      cmocka_unit_test(site_plans_map_each_setup_to_its_form),
      cmocka_unit_test(site_plans_refuse_setups_that_do_not_fit_and_say_why),
      cmocka_unit_test(aggregate_plans_encode_keeping_nonzeros_and_refuse_masks),
      cmocka_unit_test(receiver_accepts_what_the_payload_announces_and_refuses_the_rest),
      cmocka_unit_test(regional_aggregate_may_carry_its_contributors_worth_of_top_k),
      cmocka_unit_test(prepare_runs_clip_noise_and_encode_in_order),
      cmocka_unit_test(q8_updates_of_the_compress_job_stay_within_their_bound_each_round),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
