/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for tensor-stream messages: TensorBegin, TensorChunk and
 * TensorEnd as an aggregator takes one site's update (UPDATE) and as a
 * site takes its task's model (MODEL), and TensorAck as a sender takes the
 * receiver's resume point. The input's first byte picks
 * the form the round expects of the update (float32, float32 sealed,
 * encoded by the uplink codec, encoded and sealed, or masked for secure
 * aggregation); records of tests/fuzz/fuzz_msgs.h follow.
 *
 * The update goes the way coordinator/intake.c takes it, through the same
 * socket-free pieces: its weight checked (coordinator/report.h), the
 * announcement against the expectations (xf_update_expect_check), the
 * stream through a tensor receiver (net/tensor.h) into a sink that opens
 * sealed chunks (crypto/seal.h) and folds float32 values into the round's
 * aggregator (coordinator/aggregate.h) or keeps encoded and masked bytes
 * whole, and at its end the encoded update decoded (xf_update_decode) or
 * the masked words unpacked (xf_codec_unpack_bits). A MODEL stream goes
 * into a buffer of the size its TensorBegin announced, as site/daemon.c
 * takes it (its bytes are a model file: fuzz_checkpoint reads those). A
 * TensorAck goes to a
 * sender of a stream of our own (xf_tensor_sender_resume), whose next
 * messages are then checked.
 *
 * Checked: a refusal always names its reason; the receiver's resume point
 * only grows, stays on the bytes the sink took, and a stream completes only
 * with every byte delivered; the sender resumes only at a chunk boundary
 * within its stream and then sends from exactly there. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "codec/codec.h"
#include "coordinator/aggregate.h"
#include "coordinator/report.h"
#include "crypto/seal.h"
#include "fuzz_msgs.h"
#include "job/jobspec.h"
#include "net/tensor.h"
#include "update/update.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The round: a model of FZ_TENSOR_PARAMS values, masked at 16 bits under
 * secure aggregation, and the records the site announced. The seeds
 * (fuzz_seeds.c) are made for the same. */
#define FZ_TENSOR_PARAMS 64
#define FZ_TENSOR_BITS 16
#define FZ_TENSOR_RECORDS 1000
#define FZ_TENSOR_OWN_STREAM 2
#define FZ_TENSOR_OWN_BYTES 1000
#define FZ_TENSOR_OWN_CHUNK 96
/* The largest model the site here takes (xfed-site's XF_SITE_MODEL_MAX is
 * larger; the checks are the same). */
#define FZ_TENSOR_MODEL_MAX (1u << 20)

static const unsigned kinds[] = {XFED__ENVELOPE__BODY_TENSOR_BEGIN,
                                 XFED__ENVELOPE__BODY_TENSOR_CHUNK,
                                 XFED__ENVELOPE__BODY_TENSOR_END, XFED__ENVELOPE__BODY_TENSOR_ACK};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

enum { PLAIN, SEALED, ENCODED, ENCODED_SEALED, MASKED, N_MODES };

/* One site's update in flight (coordinator/intake.c's take). */
typedef struct take {
  bool open;
  uint64_t stream_id;
  xf_tensor_receiver *rx;
  xf_update_form form;
  uint8_t *stash;
  size_t stash_len;
  xf_seal_receiver *opener;
  xf_agg_update *upd;
  uint64_t sunk; /* bytes the sink took */
} take;

/* A site's task receiving its model (site/daemon.c). */
typedef struct site_model {
  xf_tensor_receiver *rx;
  uint8_t *bytes;
  uint64_t len;
  uint64_t stream_id;
} site_model;

typedef struct agg_round {
  xf_update_expect expect;
  site_model model;
  uint64_t next_site;
  xf_aggregator *agg;
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  uint8_t seal_sk[XF_SEAL_SECRETKEYBYTES];
  take t;
  unsigned taken;
} agg_round;

static float scratch[XF_TENSOR_CHUNK_MAX / sizeof(float)];
static uint8_t opened[XF_SEAL_STREAM_CHUNK];

static void take_release(take *t) {
  if (t->upd) xf_aggregator_abort_update(t->upd);
  xf_tensor_receiver_free(t->rx);
  xf_free(t->stash);
  xf_seal_receiver_free(t->opener);
  memset(t, 0, sizeof(*t));
}

static xf_err fold_plain(take *t, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  if (t->form != XF_UPDATE_FLOAT32) {
    XF_ENSURE(t->stash && offset <= t->stash_len && len <= t->stash_len - offset, err, XF_EFORMAT,
              "update chunk at byte %llu is beyond the update", (unsigned long long)offset);
    memcpy(t->stash + offset, data, len);
    return XF_OK;
  }
  XF_ENSURE(t->upd, err, XF_EINVAL, "no update in flight");
  XF_ENSURE(offset % 4 == 0 && len % 4 == 0, err, XF_EFORMAT,
            "update chunk at byte %llu is not whole float32 values", (unsigned long long)offset);
  XF_ENSURE(len <= sizeof(scratch), err, XF_EFORMAT, "update chunk of %zu bytes", len);
  memcpy(scratch, data, len);
  return xf_aggregator_fold(t->upd, (size_t)(offset / 4), scratch, len / 4, err);
}

static xf_err sink(void *user, uint64_t offset, const uint8_t *data, size_t len, xf_errctx *err) {
  take *t = user;
  if (offset != t->sunk || len == 0) abort(); /* in order, each byte once */
  xf_err rc;
  if (!t->opener) {
    rc = fold_plain(t, offset, data, len, err);
  } else {
    const uint64_t span = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
    XF_ENSURE(offset % span == 0 && len > XF_SEAL_ABYTES && len <= span, err, XF_EFORMAT,
              "sealed update chunk at byte %llu is not one sealed chunk",
              (unsigned long long)offset);
    uint64_t plain = offset / span * XF_SEAL_STREAM_CHUNK;
    if (xf_seal_open_chunk(t->opener, plain, data, len, opened) != XF_OK)
      return xf_fail(err, XF_EINTEGRITY, "sealed update chunk at byte %llu does not open",
                     (unsigned long long)offset);
    rc = fold_plain(t, plain, opened, len - XF_SEAL_ABYTES, err);
  }
  if (rc == XF_OK) t->sunk += len;
  return rc;
}

/* A failure must say what it is. */
static void said(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK && (err->code != rc || !err->msg[0])) abort();
}

static bool made_again(const xf_tensor_receiver *rx, const Xfed__TensorBegin *m) {
  const xf_tensor_info *was = xf_tensor_receiver_info(rx);
  if (!was) return false;
  bool sealed = m->sealed_by.len == sizeof(was->sealed_by);
  if (sealed != was->sealed ||
      (sealed && memcmp(m->sealed_by.data, was->sealed_by, sizeof(was->sealed_by)) != 0))
    return true;
  return m->total_bytes != was->total_bytes || m->element_count != was->element_count ||
         m->digest.len != XF_DIGEST_BYTES ||
         memcmp(m->digest.data, was->digest.bytes, XF_DIGEST_BYTES) != 0;
}

static xf_err model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  site_model *t = user;
  XF_ENSURE(t->bytes && offset <= t->len && len <= t->len - offset, err, XF_ERANGE,
            "model chunk at %llu is outside the %llu-byte model", (unsigned long long)offset,
            (unsigned long long)t->len);
  memcpy(t->bytes + offset, data, len);
  return XF_OK;
}

static void model_release(site_model *t) {
  xf_tensor_receiver_free(t->rx);
  xf_free(t->bytes);
  memset(t, 0, sizeof(*t));
}

static void model_begin(site_model *t, const Xfed__TensorBegin *b) {
  if (b->dtype != XFED__TENSOR_BEGIN__DTYPE__U8) return; /* the task fails */
  xf_errctx err;
  xf_errctx_clear(&err);
  const xf_tensor_info *info = t->rx ? xf_tensor_receiver_info(t->rx) : NULL;
  if (!t->rx || (info && info->stream_id != b->stream_id)) {
    model_release(t);
    if (xf_tensor_receiver_new(FZ_TENSOR_MODEL_MAX, model_sink, t, &t->rx, &err) != XF_OK)
      abort();
  }
  xf_err rc = xf_tensor_receiver_begin(t->rx, b, &err);
  said(rc, &err);
  if (rc != XF_OK) {
    if (rc == XF_ERANGE && b->total_bytes <= FZ_TENSOR_MODEL_MAX) abort();
    return;
  }
  t->stream_id = b->stream_id;
  if (!t->bytes) {
    if (b->total_bytes > FZ_TENSOR_MODEL_MAX) abort(); /* the receiver bounds it */
    t->len = b->total_bytes;
    t->bytes = xf_malloc(t->len ? (size_t)t->len : 1);
    if (!t->bytes) abort();
  }
}

static void model_frame(site_model *t, const Xfed__Envelope *env) {
  xf_errctx err;
  xf_errctx_clear(&err);
  uint64_t before = xf_tensor_receiver_next_offset(t->rx);
  xf_err rc = xf_tensor_receiver_handle(t->rx, env, &err);
  said(rc, &err);
  if (xf_tensor_receiver_next_offset(t->rx) < before) abort();
  if (rc == XF_OK && env->body_case == XFED__ENVELOPE__BODY_TENSOR_END &&
      (!xf_tensor_receiver_complete(t->rx) || xf_tensor_receiver_next_offset(t->rx) != t->len))
    abort();
  if (rc != XF_OK && rc != XF_ETRUNCATED && env->body_case == XFED__ENVELOPE__BODY_TENSOR_END)
    model_release(t); /* the task fails */
}

static void on_begin(agg_round *r, const Xfed__TensorBegin *m) {
  take *t = &r->t;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (m->kind == XFED__TENSOR_BEGIN__KIND__MODEL) {
    model_begin(&r->model, m);
    return;
  }
  if (m->kind != XFED__TENSOR_BEGIN__KIND__UPDATE) return; /* not a task it holds */
  if (t->open && t->stream_id == m->stream_id && made_again(t->rx, m)) take_release(t);
  if (t->open && t->stream_id == m->stream_id) { /* a resume after a reconnect */
    uint64_t before = xf_tensor_receiver_next_offset(t->rx);
    xf_err rc = xf_tensor_receiver_begin(t->rx, m, &err);
    said(rc, &err);
    if (rc != XF_OK) take_release(t);
    else if (xf_tensor_receiver_next_offset(t->rx) != before) abort();
    return;
  }
  take_release(t);
  xf_report_fault f;
  if (!xf_report_check_weight(m->weight, FZ_TENSOR_RECORDS, &f)) {
    if (strcmp(f.field, "weight") != 0 || !f.rule[0]) abort();
    return;
  }
  if (m->dtype != XFED__TENSOR_BEGIN__DTYPE__U8 && m->dtype != XFED__TENSOR_BEGIN__DTYPE__F32)
    return;
  xf_update_announce a = {.bytes = m->dtype == XFED__TENSOR_BEGIN__DTYPE__U8,
                          .element_count = m->element_count,
                          .total_bytes = m->total_bytes,
                          .weight = m->weight,
                          .sealed_by_len = m->sealed_by.len,
                          .sealed_chunk = m->sealed_chunk,
                          .chunk_bytes = m->chunk_bytes};
  xf_update_form form;
  uint64_t plain = 0;
  char why[400];
  if (xf_update_expect_check(&r->expect, &a, &form, &plain, why, sizeof(why)) != XF_OK) {
    if (!why[0]) abort();
    return;
  }
  if (plain > (uint64_t)FZ_TENSOR_PARAMS * 4 + (1u << 16)) abort(); /* bounded by the job */
  t->open = true;
  t->stream_id = m->stream_id;
  t->form = form;
  if (form != XF_UPDATE_FLOAT32) {
    t->stash = xf_malloc(plain ? (size_t)plain : 1);
    t->stash_len = (size_t)plain;
    if (!t->stash) abort();
  }
  if (r->expect.sealed) {
    char ctx[256];
    size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), "7", 1, 1, "s1");
    if (xf_seal_receiver_new(r->seal_sk, m->sealed_by.data, (const uint8_t *)ctx, ctx_len,
                             &t->opener) != XF_OK) {
      take_release(t);
      return;
    }
  }
  if (form == XF_UPDATE_FLOAT32 &&
      xf_aggregator_begin_update(r->agg, ++r->next_site, m->weight, &t->upd, &err) != XF_OK) {
    said(err.code, &err);
    take_release(t);
    return;
  }
  xf_err rc = xf_tensor_receiver_new(m->total_bytes, sink, t, &t->rx, &err);
  if (rc == XF_OK) rc = xf_tensor_receiver_begin(t->rx, m, &err);
  said(rc, &err);
  if (rc != XF_OK) take_release(t);
}

static void on_chunk(agg_round *r, const Xfed__TensorChunk *c) {
  take *t = &r->t;
  if (!t->open || t->stream_id != c->stream_id) return; /* without an acknowledged begin */
  uint64_t before = xf_tensor_receiver_next_offset(t->rx);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_tensor_receiver_chunk(t->rx, c, &err);
  said(rc, &err);
  uint64_t after = xf_tensor_receiver_next_offset(t->rx);
  if (after < before || after != t->sunk) abort();
  if (rc != XF_OK && after != before) abort(); /* refused: unchanged */
  if (rc != XF_OK) take_release(t);
}

static void on_end(agg_round *r, const Xfed__TensorEnd *e) {
  take *t = &r->t;
  if (!t->open || t->stream_id != e->stream_id) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_tensor_receiver_end(t->rx, e, &err);
  said(rc, &err);
  if (rc == XF_ETRUNCATED) {
    if (xf_tensor_receiver_complete(t->rx)) abort();
    return; /* answered with TensorAck: the sender resumes */
  }
  if (rc != XF_OK) {
    take_release(t);
    return;
  }
  const xf_tensor_info *info = xf_tensor_receiver_info(t->rx);
  if (!xf_tensor_receiver_complete(t->rx) || t->sunk != info->total_bytes) abort();
  if (t->form == XF_UPDATE_MASKED) {
    uint32_t words[FZ_TENSOR_PARAMS];
    rc = xf_codec_unpack_bits(t->stash, t->stash_len, FZ_TENSOR_PARAMS, FZ_TENSOR_BITS, words,
                              &err);
    said(rc, &err);
    for (size_t i = 0; rc == XF_OK && i < FZ_TENSOR_PARAMS; i++)
      if (words[i] >> FZ_TENSOR_BITS) abort(); /* each word within its bits */
  } else {
    if (t->form == XF_UPDATE_ENCODED) {
      float values[FZ_TENSOR_PARAMS];
      rc = xf_update_decode(&r->expect, t->stash, t->stash_len, values, &err);
      said(rc, &err);
      if (rc == XF_OK) {
        for (size_t i = 0; i < FZ_TENSOR_PARAMS; i++)
          if (!isfinite(values[i])) abort(); /* the decoder lets no NaN through */
        if (xf_aggregator_begin_update(r->agg, ++r->next_site, 1, &t->upd, &err) != XF_OK)
          abort();
        rc = xf_aggregator_fold(t->upd, 0, values, FZ_TENSOR_PARAMS, &err);
        said(rc, &err);
      }
    }
    if (rc == XF_OK) {
      rc = xf_aggregator_end_update(t->upd, &err);
      t->upd = NULL;
      said(rc, &err);
    }
  }
  if (rc == XF_OK) r->taken++;
  take_release(t);
}

/* Our own stream, and a TensorAck for it. */
static void on_ack(xf_tensor_sender *tx, const uint8_t *own, const Xfed__TensorAck *a) {
  if (a->stream_id != FZ_TENSOR_OWN_STREAM) return;
  uint64_t was = xf_tensor_sender_offset(tx);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_tensor_sender_resume(tx, a->next_offset, &err);
  said(rc, &err);
  bool fits = a->next_offset <= FZ_TENSOR_OWN_BYTES &&
              (a->next_offset % FZ_TENSOR_OWN_CHUNK == 0 || a->next_offset == FZ_TENSOR_OWN_BYTES);
  if ((rc == XF_OK) != fits) abort();
  if (rc != XF_OK) {
    if (xf_tensor_sender_offset(tx) != was) abort();
    return;
  }
  /* What follows starts at the acknowledged offset. */
  xf_tensor_msg msg;
  for (int i = 0; i < 3; i++) {
    if (xf_tensor_sender_next(tx, &msg) != XF_OK) break;
    if (msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK) {
      const Xfed__TensorChunk *c = &msg.body.chunk;
      if (c->offset % FZ_TENSOR_OWN_CHUNK || c->offset + c->data.len > FZ_TENSOR_OWN_BYTES ||
          memcmp(c->data.data, own + c->offset, c->data.len) != 0)
        abort();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  fz_begin(1);
  unsigned mode = data[0] % N_MODES;
  static const char plain_spec[] =
      "{\"name\": \"f\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\"}, "
      "\"rounds\": 1}";
  static const char q8_spec[] =
      "{\"name\": \"f\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\"}, "
      "\"rounds\": 1, \"compression\": {\"uplink\": \"q8\"}}";
  bool encoded = mode == ENCODED || mode == ENCODED_SEALED;
  xf_jobspec spec;
  if (xf_jobspec_parse_string(encoded ? q8_spec : plain_spec,
                              strlen(encoded ? q8_spec : plain_spec), "fuzz", &spec,
                              NULL) != XF_OK)
    abort();
  agg_round r;
  memset(&r, 0, sizeof(r));
  bool sealed = mode == SEALED || mode == ENCODED_SEALED;
  xf_update_expect_for(&spec, FZ_TENSOR_PARAMS, mode == MASKED, FZ_TENSOR_PARAMS, FZ_TENSOR_BITS,
                       sealed, 1, &r.expect);
  if (xf_aggregator_create(&spec.strategy, FZ_TENSOR_PARAMS, 0, &r.agg, NULL) != XF_OK) abort();
  if (xf_seal_keypair(r.seal_pk, r.seal_sk) != XF_OK) abort();
  uint8_t own[FZ_TENSOR_OWN_BYTES];
  for (size_t i = 0; i < sizeof(own); i++) own[i] = (uint8_t)(i * 7);
  xf_tensor_desc desc = {.stream_id = FZ_TENSOR_OWN_STREAM,
                         .kind = XFED__TENSOR_BEGIN__KIND__MODEL,
                         .dtype = XFED__TENSOR_BEGIN__DTYPE__U8,
                         .element_count = sizeof(own),
                         .job_id = "7",
                         .round = 1};
  xf_tensor_sender *tx = NULL;
  if (xf_tensor_sender_new(&desc, own, sizeof(own), FZ_TENSOR_OWN_CHUNK, &tx, NULL) != XF_OK)
    abort();

  fz_input in = {data + 1, size - 1};
  fz_record rec;
  while (fz_next(&in, N_KINDS, &rec)) {
    Xfed__Envelope *env = fz_decode(kinds[rec.kind], rec.body, rec.len);
    if (!env) continue;
    uint64_t stream = env->body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK ? env->tensor_chunk->stream_id
                      : env->body_case == XFED__ENVELOPE__BODY_TENSOR_END ? env->tensor_end->stream_id
                                                                          : 0;
    if (stream && r.model.rx && stream == r.model.stream_id) {
      model_frame(&r.model, env);
      xf_envelope_free(env);
      continue;
    }
    switch (env->body_case) {
    case XFED__ENVELOPE__BODY_TENSOR_BEGIN: on_begin(&r, env->tensor_begin); break;
    case XFED__ENVELOPE__BODY_TENSOR_CHUNK: on_chunk(&r, env->tensor_chunk); break;
    case XFED__ENVELOPE__BODY_TENSOR_END: on_end(&r, env->tensor_end); break;
    case XFED__ENVELOPE__BODY_TENSOR_ACK: on_ack(tx, own, env->tensor_ack); break;
    default: abort();
    }
    xf_envelope_free(env);
  }
  if (r.taken) {
    float mean[FZ_TENSOR_PARAMS];
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_aggregator_finish(r.agg, mean, &err);
    said(rc, &err);
  }
  take_release(&r.t);
  model_release(&r.model);
  xf_tensor_sender_free(tx);
  xf_aggregator_free(r.agg);
  return 0;
}
