/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the transport's wire format: framing of every message type under
 * any slicing, the frame limits, malformed payloads, version negotiation,
 * tensor streams with resumption, ordering and digest checks, the buffer
 * budget frames are reserved from, and the progress rule on a clock of
 * numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/result.h"
#include "base/rng.h"
#include "net/frame.h"
#include "net/hello.h"
#include "net/progress.h"
#include "net/tensor.h"

/* ---- sample messages ------------------------------------------------------ */

#define SAMPLE_COUNT 12

/* One Envelope of each body, with every field set to something nonzero. The
 * strings and bytes are static; the structs live in *s. */
typedef struct samples {
  Xfed__Envelope env[SAMPLE_COUNT];
  Xfed__Hello hello;
  Xfed__HelloAck hello_ack;
  Xfed__Refusal refusal;
  Xfed__Heartbeat heartbeat;
  Xfed__Error error;
  Xfed__TaskOffer task_offer;
  Xfed__TaskRefusal task_refusal;
  Xfed__TensorBegin tensor_begin;
  Xfed__TensorChunk tensor_chunk;
  Xfed__TensorAck tensor_ack;
  Xfed__TensorEnd tensor_end;
  Xfed__Metrics metrics;
} samples;

static char *caps[] = {"tensor-resume", "q8", "fp16"};
static char *caps_ack[] = {"tensor-resume"};
static uint8_t digest32[32] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                               13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28};
static uint8_t chunk_bytes[] = "seven bytes and then some more";

static void make_samples(samples *s) {
  Xfed__Envelope init = XFED__ENVELOPE__INIT;
  for (int i = 0; i < SAMPLE_COUNT; i++) s->env[i] = init;

  xfed__hello__init(&s->hello);
  s->hello.protocol_version = 3;
  s->hello.min_protocol_version = 1;
  s->hello.n_capabilities = 3;
  s->hello.capabilities = caps;
  s->hello.role = "site";
  s->hello.agent = "xfed/0.1.0";
  s->hello.max_frame = 4u << 20;
  s->env[0].body_case = XFED__ENVELOPE__BODY_HELLO;
  s->env[0].hello = &s->hello;

  xfed__hello_ack__init(&s->hello_ack);
  s->hello_ack.protocol_version = 1;
  s->hello_ack.n_capabilities = 1;
  s->hello_ack.capabilities = caps_ack;
  s->env[1].body_case = XFED__ENVELOPE__BODY_HELLO_ACK;
  s->env[1].hello_ack = &s->hello_ack;

  xfed__refusal__init(&s->refusal);
  s->refusal.reason = XFED__REFUSAL__REASON__NO_COMMON_VERSION;
  s->refusal.text = "we speak 1..1, the peer 2..3";
  s->env[2].body_case = XFED__ENVELOPE__BODY_REFUSAL;
  s->env[2].refusal = &s->refusal;

  xfed__heartbeat__init(&s->heartbeat);
  s->heartbeat.seq = 42;
  s->heartbeat.unix_ms = 1700000000123ull;
  s->env[3].body_case = XFED__ENVELOPE__BODY_HEARTBEAT;
  s->env[3].heartbeat = &s->heartbeat;

  xfed__error__init(&s->error);
  s->error.code = XF_EDENIED;
  s->error.message = "residency rule 7 forbids update to us-east";
  s->env[4].body_case = XFED__ENVELOPE__BODY_ERROR;
  s->env[4].error = &s->error;

  xfed__task_offer__init(&s->task_offer);
  s->task_offer.job_id = "fmnist-cnn-eu-us";
  s->task_offer.round = 7;
  s->task_offer.deadline_unix_ms = 1700000600000ull;
  s->task_offer.model_digest.len = sizeof(digest32);
  s->task_offer.model_digest.data = digest32;
  s->task_offer.params_json = "{\"epochs\":10,\"batch_size\":64,\"lr\":0.01}";
  s->env[5].body_case = XFED__ENVELOPE__BODY_TASK_OFFER;
  s->env[5].task_offer = &s->task_offer;

  xfed__task_refusal__init(&s->task_refusal);
  s->task_refusal.job_id = "fmnist-cnn-eu-us";
  s->task_refusal.round = 7;
  s->task_refusal.reason = XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED;
  s->task_refusal.details = "epsilon 7.9 of 8.0 spent";
  s->env[6].body_case = XFED__ENVELOPE__BODY_TASK_REFUSAL;
  s->env[6].task_refusal = &s->task_refusal;

  xfed__tensor_begin__init(&s->tensor_begin);
  s->tensor_begin.stream_id = 9;
  s->tensor_begin.kind = XFED__TENSOR_BEGIN__KIND__UPDATE;
  s->tensor_begin.total_bytes = 6653480;
  s->tensor_begin.chunk_bytes = 1u << 20;
  s->tensor_begin.dtype = XFED__TENSOR_BEGIN__DTYPE__F32;
  s->tensor_begin.element_count = 1663370;
  s->tensor_begin.digest.len = sizeof(digest32);
  s->tensor_begin.digest.data = digest32;
  s->tensor_begin.job_id = "fmnist-cnn-eu-us";
  s->tensor_begin.round = 7;
  s->env[7].body_case = XFED__ENVELOPE__BODY_TENSOR_BEGIN;
  s->env[7].tensor_begin = &s->tensor_begin;

  xfed__tensor_chunk__init(&s->tensor_chunk);
  s->tensor_chunk.stream_id = 9;
  s->tensor_chunk.index = 3;
  s->tensor_chunk.offset = 3u << 20;
  s->tensor_chunk.data.len = sizeof(chunk_bytes);
  s->tensor_chunk.data.data = chunk_bytes;
  s->env[8].body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
  s->env[8].tensor_chunk = &s->tensor_chunk;

  xfed__tensor_ack__init(&s->tensor_ack);
  s->tensor_ack.stream_id = 9;
  s->tensor_ack.next_offset = 2u << 20;
  s->env[9].body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  s->env[9].tensor_ack = &s->tensor_ack;

  xfed__tensor_end__init(&s->tensor_end);
  s->tensor_end.stream_id = 9;
  s->env[10].body_case = XFED__ENVELOPE__BODY_TENSOR_END;
  s->env[10].tensor_end = &s->tensor_end;

  xfed__metrics__init(&s->metrics);
  s->metrics.job_id = "fmnist-cnn-eu-us";
  s->metrics.round = 7;
  s->metrics.site = "eu-berlin";
  s->metrics.train_loss = 0.3125;
  s->metrics.test_loss = 0.375;
  s->metrics.test_accuracy = 0.8875;
  s->metrics.samples = 60000;
  s->metrics.bytes_up = 1663370;
  s->metrics.bytes_down = 6653480;
  s->env[11].body_case = XFED__ENVELOPE__BODY_METRICS;
  s->env[11].metrics = &s->metrics;
}

/* The frames of all samples back to back; *lens gets each frame's size. */
static uint8_t *sample_stream(const samples *s, size_t lens[SAMPLE_COUNT], size_t *total) {
  *total = 0;
  for (int i = 0; i < SAMPLE_COUNT; i++) *total += xf_frame_size(&s->env[i]);
  uint8_t *buf = malloc(*total);
  assert_non_null(buf);
  size_t at = 0;
  for (int i = 0; i < SAMPLE_COUNT; i++) {
    assert_int_equal(xf_frame_encode_into(&s->env[i], 0, buf + at, *total - at, &lens[i], NULL),
                     XF_OK);
    at += lens[i];
  }
  assert_int_equal(at, *total);
  return buf;
}

/* Two messages are equal when they pack to the same bytes (proto3 packing is
 * deterministic for the fields used here). */
static void assert_same_message(const Xfed__Envelope *a, const Xfed__Envelope *b) {
  size_t na = xfed__envelope__get_packed_size(a), nb = xfed__envelope__get_packed_size(b);
  assert_int_equal(na, nb);
  uint8_t *pa = malloc(na + 1), *pb = malloc(nb + 1);
  assert_non_null(pa);
  assert_non_null(pb);
  xfed__envelope__pack(a, pa);
  xfed__envelope__pack(b, pb);
  assert_memory_equal(pa, pb, na);
  free(pa);
  free(pb);
}

/* Feeds stream to a fresh decoder in slices of at most `slice` bytes (0:
 * random slices from rng), checks each decoded frame against the samples and
 * that the decoder never holds more than max + 4 bytes. */
static void decode_samples(const samples *s, const uint8_t *stream, size_t total, size_t slice,
                           xf_rng *rng) {
  xf_frame_decoder *d;
  size_t max = 1024;
  assert_int_equal(xf_frame_decoder_new(max, &d, NULL), XF_OK);
  int got = 0;
  size_t at = 0;
  while (at < total) {
    size_t n = slice ? slice : 1 + (size_t)xf_rng_below(rng, 300);
    if (n > total - at) n = total - at;
    size_t off = 0;
    while (off < n) {
      size_t used;
      Xfed__Envelope *env;
      xf_errctx err;
      xf_errctx_clear(&err);
      xf_err rc = xf_frame_decoder_feed(d, stream + at + off, n - off, &used, &env, &err);
      if (rc != XF_OK) fail_msg("decode: %s: %s", xf_err_name(rc), err.msg);
      assert_true(used > 0 || n - off == 0);
      assert_true(xf_frame_decoder_buffered(d) <= max + XF_FRAME_HEADER);
      off += used;
      if (env) {
        assert_true(got < SAMPLE_COUNT);
        assert_int_equal(env->body_case, s->env[got].body_case);
        assert_same_message(env, &s->env[got]);
        xf_envelope_free(env);
        got++;
      }
    }
    at += n;
  }
  assert_int_equal(got, SAMPLE_COUNT);
  assert_int_equal(xf_frame_decoder_buffered(d), 0);
  xf_frame_decoder_free(d);
}

/* ---- framing -------------------------------------------------------------- */

static void every_message_type_round_trips_in_any_slicing(void **state) {
  (void)state;
  samples s;
  make_samples(&s);
  size_t lens[SAMPLE_COUNT], total;
  uint8_t *stream = sample_stream(&s, lens, &total);
  xf_rng rng;
  xf_rng_seed(&rng, 7, 0);
  decode_samples(&s, stream, total, 1, NULL);     /* one byte at a time */
  decode_samples(&s, stream, total, total, NULL); /* everything at once */
  for (int round = 0; round < 20; round++) decode_samples(&s, stream, total, 0, &rng);
  free(stream);
}

static void decoded_fields_match_what_was_sent(void **state) {
  (void)state;
  samples s;
  make_samples(&s);
  size_t lens[SAMPLE_COUNT], total;
  uint8_t *stream = sample_stream(&s, lens, &total);
  Xfed__Envelope *env;
  size_t at = 0;
  for (int i = 0; i < SAMPLE_COUNT; i++) {
    assert_int_equal(xf_envelope_unpack(stream + at + 4, lens[i] - 4, &env, NULL), XF_OK);
    at += lens[i];
    if (env->body_case == XFED__ENVELOPE__BODY_HELLO) {
      assert_int_equal(env->hello->protocol_version, 3);
      assert_int_equal(env->hello->n_capabilities, 3);
      assert_string_equal(env->hello->capabilities[1], "q8");
      assert_string_equal(env->hello->role, "site");
      assert_int_equal(env->hello->max_frame, 4u << 20);
    } else if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) {
      assert_int_equal(env->tensor_begin->total_bytes, 6653480);
      assert_int_equal(env->tensor_begin->digest.len, 32);
      assert_memory_equal(env->tensor_begin->digest.data, digest32, 32);
    } else if (env->body_case == XFED__ENVELOPE__BODY_METRICS) {
      assert_true(env->metrics->test_accuracy == 0.8875);
      assert_string_equal(env->metrics->site, "eu-berlin");
    } else if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK) {
      assert_int_equal(env->tensor_chunk->data.len, sizeof(chunk_bytes));
      assert_memory_equal(env->tensor_chunk->data.data, chunk_bytes, sizeof(chunk_bytes));
    }
    xf_envelope_free(env);
  }
  free(stream);
}

static void oversized_length_is_rejected_before_its_payload(void **state) {
  (void)state;
  xf_frame_decoder *d;
  assert_int_equal(xf_frame_decoder_new(1000, &d, NULL), XF_OK);
  /* A prefix of 1001 bytes and then nothing: the error must not wait for the
   * payload, and nothing of it is buffered. */
  const uint8_t head[] = {0, 0, 0x03, 0xe9, 0xaa, 0xbb};
  size_t used;
  Xfed__Envelope *env;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_frame_decoder_feed(d, head, 4, &used, &env, &err), XF_ERANGE);
  assert_null(env);
  assert_int_equal(used, 4);
  assert_non_null(strstr(err.msg, "1001"));
  assert_non_null(strstr(err.msg, "1000"));
  assert_true(xf_frame_decoder_buffered(d) <= XF_FRAME_HEADER);
  /* The decoder is spent: the connection must close. */
  assert_int_equal(xf_frame_decoder_feed(d, head + 4, 2, &used, &env, &err), XF_ERANGE);
  assert_int_equal(used, 0);
  xf_frame_decoder_free(d);

  /* The default limit: 4 MiB is accepted, one byte more is not, seen after
   * the length bytes arrive one at a time. */
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  const uint8_t ok[] = {0x00, 0x40, 0x00, 0x00};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(xf_frame_decoder_feed(d, ok + i, 1, &used, &env, NULL), XF_OK);
    assert_int_equal(used, 1);
  }
  xf_frame_decoder_free(d);
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  const uint8_t big[] = {0x00, 0x40, 0x00, 0x01};
  for (int i = 0; i < 3; i++)
    assert_int_equal(xf_frame_decoder_feed(d, big + i, 1, &used, &env, NULL), XF_OK);
  xf_errctx_clear(&err);
  assert_int_equal(xf_frame_decoder_feed(d, big + 3, 1, &used, &env, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "4194305"));
  assert_non_null(strstr(err.msg, "4194304"));
  xf_frame_decoder_free(d);
  /* A length whose top bit is set is simply too large, not negative. */
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff};
  assert_int_equal(xf_frame_decoder_feed(d, huge, 4, &used, &env, NULL), XF_ERANGE);
  xf_frame_decoder_free(d);
}

static void maximum_frame_is_configurable(void **state) {
  (void)state;
  samples s;
  make_samples(&s);
  const Xfed__Envelope *hello = &s.env[0];
  size_t payload = xfed__envelope__get_packed_size(hello);
  uint8_t buf[512];
  size_t len;
  /* The encoder refuses a frame the receiver would refuse. */
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_frame_encode_into(hello, payload - 1, buf, sizeof(buf), &len, &err),
                   XF_ERANGE);
  assert_int_equal(xf_frame_encode_into(hello, payload, buf, 10, &len, NULL), XF_ERANGE);
  assert_int_equal(xf_frame_encode_into(hello, payload, buf, sizeof(buf), &len, NULL), XF_OK);
  assert_int_equal(len, payload + 4);

  /* A decoder at exactly the payload's size takes it; one byte less refuses it. */
  xf_frame_decoder *d;
  size_t used;
  Xfed__Envelope *env;
  assert_int_equal(xf_frame_decoder_new(payload, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, buf, len, &used, &env, NULL), XF_OK);
  assert_non_null(env);
  xf_envelope_free(env);
  xf_frame_decoder_free(d);
  assert_int_equal(xf_frame_decoder_new(payload - 1, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, buf, len, &used, &env, NULL), XF_ERANGE);
  xf_frame_decoder_free(d);

  /* The limit can change between frames, as after the Hello exchange. */
  assert_int_equal(xf_frame_decoder_new(16, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_set_max(d, payload, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, buf, len, &used, &env, NULL), XF_OK);
  assert_non_null(env);
  xf_envelope_free(env);
  assert_int_equal(xf_frame_decoder_set_max(d, (size_t)XF_FRAME_MAX_LIMIT + 1, NULL), XF_EINVAL);
  xf_frame_decoder_free(d);
  assert_int_equal(xf_frame_decoder_new((size_t)XF_FRAME_MAX_LIMIT + 1, &d, NULL), XF_EINVAL);
  assert_null(d);
}

static void truncated_or_garbage_payload_is_a_format_error(void **state) {
  (void)state;
  samples s;
  make_samples(&s);
  uint8_t buf[512];
  size_t len, used;
  Xfed__Envelope *env;
  xf_frame_decoder *d;
  xf_errctx err;
  assert_int_equal(xf_frame_encode_into(&s.env[5], 0, buf, sizeof(buf), &len, NULL), XF_OK);

  /* The task offer cut short by 5 bytes, with a prefix saying so. */
  size_t cut = len - 4 - 5;
  buf[0] = (uint8_t)(cut >> 24);
  buf[1] = (uint8_t)(cut >> 16);
  buf[2] = (uint8_t)(cut >> 8);
  buf[3] = (uint8_t)cut;
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  xf_errctx_clear(&err);
  assert_int_equal(xf_frame_decoder_feed(d, buf, 4 + cut, &used, &env, &err), XF_EFORMAT);
  assert_null(env);
  assert_true(err.msg[0] != '\0');
  assert_non_null(strstr(err.field, "frame 1"));
  xf_frame_decoder_free(d);

  /* Garbage: a field tag whose varint never ends. */
  const uint8_t junk[] = {0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, junk, sizeof(junk), &used, &env, NULL), XF_EFORMAT);
  xf_frame_decoder_free(d);

  /* A Hello whose body claims more bytes than the frame holds. */
  const uint8_t over[] = {0, 0, 0, 3, 0x0a, 0x7f, 0x08};
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, over, sizeof(over), &used, &env, NULL), XF_EFORMAT);
  xf_frame_decoder_free(d);

  /* Field number 0 written as an overlong varint: invalid protobuf, although
   * protobuf-c alone would keep it as an unknown field. */
  const uint8_t zero_tag[] = {0, 0, 0, 5, 0x80, 0x80, 0x80, 0x00, 0x09};
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, zero_tag, sizeof(zero_tag), &used, &env, NULL),
                   XF_EFORMAT);
  assert_null(env);
  xf_frame_decoder_free(d);
  /* The same inside a body. */
  const uint8_t zero_tag_body[] = {0, 0, 0, 6, 0x22, 0x04, 0x80, 0x80, 0x00, 0x01};
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_int_equal(
      xf_frame_decoder_feed(d, zero_tag_body, sizeof(zero_tag_body), &used, &env, NULL),
      XF_EFORMAT);
  xf_frame_decoder_free(d);

  /* The second of two frames is garbage: the first still comes out, and
   * the error names the second frame. */
  uint8_t two[600];
  size_t first;
  assert_int_equal(xf_frame_encode_into(&s.env[3], 0, two, sizeof(two), &first, NULL), XF_OK);
  memcpy(two + first, junk, sizeof(junk));
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, two, first + sizeof(junk), &used, &env, NULL), XF_OK);
  assert_int_equal(used, first);
  assert_non_null(env);
  xf_envelope_free(env);
  xf_errctx_clear(&err);
  assert_int_equal(xf_frame_decoder_feed(d, two + used, sizeof(junk), &used, &env, &err),
                   XF_EFORMAT);
  assert_non_null(strstr(err.field, "frame 2"));
  xf_frame_decoder_free(d);

  /* A stream that stops inside a frame is no error yet: the decoder waits. */
  assert_int_equal(xf_frame_encode_into(&s.env[5], 0, buf, sizeof(buf), &len, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, buf, len - 1, &used, &env, NULL), XF_OK);
  assert_null(env);
  assert_int_equal(xf_frame_decoder_buffered(d), len - 1);
  xf_frame_decoder_free(d);
}

static void empty_and_unknown_bodies_decode_with_no_body(void **state) {
  (void)state;
  /* An empty Envelope, and one carrying field 100 (a newer peer's message):
   * both parse, with no body this build knows. */
  const uint8_t frames[] = {0, 0, 0, 0, 0, 0, 0, 4, 0xa2, 0x06, 0x01, 0x00};
  xf_frame_decoder *d;
  size_t used, at = 0;
  Xfed__Envelope *env;
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(xf_frame_decoder_feed(d, frames + at, sizeof(frames) - at, &used, &env, NULL),
                     XF_OK);
    at += used;
    assert_non_null(env);
    assert_int_equal(env->body_case, XFED__ENVELOPE__BODY__NOT_SET);
    xf_envelope_free(env);
  }
  assert_int_equal(at, sizeof(frames));
  xf_frame_decoder_free(d);
}

static void allocation_failures_in_decode_are_reported_not_leaked(void **state) {
  (void)state;
  samples s;
  make_samples(&s);
  size_t lens[SAMPLE_COUNT], total;
  uint8_t *stream = sample_stream(&s, lens, &total);
  long pass = 0;
  for (;; pass++) {
    assert_true(pass < 1000);
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_alloc_fail_after(pass);
    xf_frame_decoder *d = NULL;
    xf_err rc = xf_frame_decoder_new(0, &d, &err);
    int got = 0;
    /* Slices of 7 bytes: some frames are parsed in place, others buffered. */
    for (size_t at = 0; rc == XF_OK && at < total;) {
      size_t n = total - at < 7 ? total - at : 7, used;
      Xfed__Envelope *env;
      rc = xf_frame_decoder_feed(d, stream + at, n, &used, &env, &err);
      at += used;
      if (env) {
        got++;
        xf_envelope_free(env);
      }
    }
    uint8_t *frame = NULL;
    size_t flen;
    if (rc == XF_OK) rc = xf_frame_encode(&s.env[0], 0, &frame, &flen, &err);
    xf_alloc_fail_reset();
    xf_free(frame);
    xf_frame_decoder_free(d);
    if (rc != XF_OK && rc != XF_ENOMEM) fail_msg("pass %ld: %s: %s", pass, xf_err_name(rc), err.msg);
    if (rc == XF_ENOMEM) {
      assert_true(err.msg[0] != '\0');
      continue;
    }
    assert_int_equal(got, SAMPLE_COUNT);
    break;
  }
  assert_true(pass > SAMPLE_COUNT); /* every frame allocated at least once */
  free(stream);
}

/* ---- version negotiation ---------------------------------------------------- */

static void hello_negotiation_picks_the_lower_common_version(void **state) {
  (void)state;
  Xfed__Hello peer = XFED__HELLO__INIT;
  uint32_t v;
  peer.protocol_version = 3;
  peer.min_protocol_version = 1;
  assert_int_equal(xf_hello_negotiate(1, 2, &peer, &v, NULL), XF_OK);
  assert_int_equal(v, 2);
  assert_int_equal(xf_hello_negotiate(2, 5, &peer, &v, NULL), XF_OK);
  assert_int_equal(v, 3);
  /* min 0: the peer speaks its one version only. */
  peer.min_protocol_version = 0;
  assert_int_equal(xf_hello_negotiate(1, 5, &peer, &v, NULL), XF_OK);
  assert_int_equal(v, 3);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_hello_negotiate(4, 5, &peer, &v, &err), XF_EUNSUPPORTED);
  assert_int_equal(v, 0);
  assert_non_null(strstr(err.msg, "4..5"));
  assert_non_null(strstr(err.msg, "3..3"));
  peer.protocol_version = 0;
  assert_int_equal(xf_hello_negotiate(1, 1, &peer, &v, NULL), XF_EFORMAT);
  peer.protocol_version = 2;
  peer.min_protocol_version = 3;
  assert_int_equal(xf_hello_negotiate(1, 5, &peer, &v, NULL), XF_EFORMAT);
  peer.min_protocol_version = 1;
  assert_int_equal(xf_hello_negotiate(XF_PROTOCOL_MIN_VERSION, XF_PROTOCOL_VERSION, &peer, &v,
                                      NULL), XF_OK);
  assert_int_equal(v, XF_PROTOCOL_VERSION);
  assert_int_equal(xf_hello_peer_max_frame(&peer), XF_FRAME_MAX_DEFAULT);
  peer.max_frame = 65536;
  assert_int_equal(xf_hello_peer_max_frame(&peer), 65536);
  /* More than any side sends is no error: the largest frame there is. */
  peer.max_frame = UINT32_MAX;
  assert_int_equal(xf_hello_peer_max_frame(&peer), XF_FRAME_MAX_LIMIT);
}

/* ---- tensor streams ---------------------------------------------------------- */

#define MIB (1u << 20)
#define TENSOR_BYTES (5u * 1000u * 1000u) /* 5 MB: four full 1 MiB chunks and a part */

/* A sink that writes into a buffer and records every call. */
typedef struct sink_buf {
  uint8_t *bytes;
  size_t cap;
  int calls;
  uint64_t seen; /* bytes taken */
  xf_err fail_with; /* when not XF_OK, refuse every chunk */
} sink_buf;

static xf_err sink_write(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *ctx) {
  sink_buf *s = user;
  if (s->fail_with != XF_OK) return xf_fail(ctx, s->fail_with, "sink refuses");
  if (offset > s->cap || len > s->cap - offset) return xf_fail(ctx, XF_ERANGE, "sink overflow");
  memcpy(s->bytes + offset, data, len);
  s->calls++;
  s->seen += len;
  return XF_OK;
}

static uint8_t *make_tensor(size_t n, uint64_t seed) {
  uint8_t *t = malloc(n);
  assert_non_null(t);
  xf_rng rng;
  xf_rng_seed(&rng, seed, 1);
  for (size_t i = 0; i < n; i++) t[i] = (uint8_t)xf_rng_next(&rng);
  return t;
}

static xf_tensor_desc update_desc(void) {
  xf_tensor_desc d = {.stream_id = 77, .kind = XFED__TENSOR_BEGIN__KIND__UPDATE,
                      .dtype = XFED__TENSOR_BEGIN__DTYPE__U8, .element_count = TENSOR_BYTES,
                      .job_id = "fmnist-cnn-eu-us", .round = 3};
  return d;
}

/* Sends msg through a real frame and the decoder, and hands the decoded
 * message to the receiver. *largest tracks the largest frame. */
static xf_err deliver(xf_frame_decoder *d, xf_tensor_receiver *r, const xf_tensor_msg *msg,
                      size_t *largest, xf_errctx *ctx) {
  uint8_t *frame;
  size_t len, used;
  assert_int_equal(xf_frame_encode(&msg->env, 0, &frame, &len, NULL), XF_OK);
  if (largest && len > *largest) *largest = len;
  Xfed__Envelope *env;
  assert_int_equal(xf_frame_decoder_feed(d, frame, len, &used, &env, NULL), XF_OK);
  assert_int_equal(used, len);
  assert_non_null(env);
  xf_free(frame);
  xf_err rc = xf_tensor_receiver_handle(r, env, ctx);
  xf_envelope_free(env);
  return rc;
}

static void five_megabyte_tensor_is_reassembled_and_verified(void **state) {
  (void)state;
  uint8_t *tensor = make_tensor(TENSOR_BYTES, 1);
  sink_buf out = {.bytes = calloc(1, TENSOR_BYTES), .cap = TENSOR_BYTES};
  xf_tensor_desc desc = update_desc();
  xf_tensor_sender *s;
  xf_tensor_receiver *r;
  xf_frame_decoder *d;
  assert_int_equal(xf_tensor_sender_new(&desc, tensor, TENSOR_BYTES, MIB, &s, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_new(TENSOR_BYTES, sink_write, &out, &r, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_null(xf_tensor_receiver_info(r));
  xf_tensor_msg msg;
  size_t largest = 0;
  int messages = 0;
  xf_err rc;
  while ((rc = xf_tensor_sender_next(s, &msg)) == XF_OK) {
    xf_errctx err;
    xf_errctx_clear(&err);
    if (deliver(d, r, &msg, &largest, &err) != XF_OK) fail_msg("deliver: %s", err.msg);
    messages++;
  }
  assert_int_equal(rc, XF_ENOENT);
  assert_int_equal(messages, 1 + 5 + 1);
  assert_true(xf_tensor_receiver_complete(r));
  assert_int_equal(out.calls, 5);
  assert_memory_equal(out.bytes, tensor, TENSOR_BYTES);
  /* No frame is much larger than one chunk. */
  assert_true(largest > MIB && largest < MIB + 64);
  const xf_tensor_info *info = xf_tensor_receiver_info(r);
  assert_non_null(info);
  assert_int_equal(info->total_bytes, TENSOR_BYTES);
  assert_int_equal(info->kind, XFED__TENSOR_BEGIN__KIND__UPDATE);
  assert_string_equal(info->job_id, "fmnist-cnn-eu-us");
  assert_int_equal(info->round, 3);
  xf_digest want;
  xf_digest_buf(tensor, TENSOR_BYTES, &want);
  assert_memory_equal(info->digest.bytes, want.bytes, XF_DIGEST_BYTES);
  /* The final acknowledgement covers the whole tensor. */
  Xfed__TensorAck ack;
  xf_tensor_receiver_ack(r, &ack);
  assert_int_equal(ack.stream_id, 77);
  assert_int_equal(ack.next_offset, TENSOR_BYTES);
  assert_int_equal(xf_tensor_sender_resume(s, ack.next_offset, NULL), XF_OK);
  assert_int_equal(xf_tensor_sender_acked(s), TENSOR_BYTES);
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_ENOENT);
  xf_frame_decoder_free(d);
  xf_tensor_receiver_free(r);
  xf_tensor_sender_free(s);
  free(out.bytes);
  free(tensor);
}

static void dropped_connection_resumes_from_the_receivers_ack(void **state) {
  (void)state;
  uint8_t *tensor = make_tensor(TENSOR_BYTES, 2);
  sink_buf out = {.bytes = calloc(1, TENSOR_BYTES), .cap = TENSOR_BYTES};
  xf_tensor_desc desc = update_desc();
  xf_tensor_sender *s;
  xf_tensor_receiver *r;
  xf_frame_decoder *d;
  assert_int_equal(xf_tensor_sender_new(&desc, tensor, TENSOR_BYTES, MIB, &s, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_new(TENSOR_BYTES, sink_write, &out, &r, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  xf_tensor_msg msg;
  /* Begin and two chunks arrive; the third is cut off half way when the
   * link drops, and the fourth was in the sender's socket buffer. */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(xf_tensor_sender_next(s, &msg), XF_OK);
    assert_int_equal(deliver(d, r, &msg, NULL, NULL), XF_OK);
  }
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_OK);
  uint8_t *frame;
  size_t len, used;
  Xfed__Envelope *env;
  assert_int_equal(xf_frame_encode(&msg.env, 0, &frame, &len, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, frame, len / 2, &used, &env, NULL), XF_OK);
  assert_null(env);
  xf_free(frame);
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_OK);
  xf_frame_decoder_free(d); /* the connection and what it held are gone */
  assert_int_equal(xf_tensor_receiver_next_offset(r), 2 * MIB);

  /* Reconnect: Begin again, the receiver answers with its resume point, and
   * the sender continues from there. */
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  xf_tensor_sender_rewind(s);
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_OK);
  assert_int_equal(msg.env.body_case, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(deliver(d, r, &msg, NULL, NULL), XF_OK);
  Xfed__TensorAck ack;
  xf_tensor_receiver_ack(r, &ack);
  Xfed__Envelope ack_env = XFED__ENVELOPE__INIT;
  ack_env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  ack_env.tensor_ack = &ack;
  /* The ack itself travels as a frame, the other way. */
  xf_frame_decoder *back;
  assert_int_equal(xf_frame_decoder_new(0, &back, NULL), XF_OK);
  assert_int_equal(xf_frame_encode(&ack_env, 0, &frame, &len, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(back, frame, len, &used, &env, NULL), XF_OK);
  xf_free(frame);
  assert_non_null(env);
  assert_int_equal(env->tensor_ack->next_offset, 2 * MIB);
  assert_int_equal(xf_tensor_sender_resume(s, env->tensor_ack->next_offset, NULL), XF_OK);
  xf_envelope_free(env);
  xf_frame_decoder_free(back);
  assert_int_equal(xf_tensor_sender_offset(s), 2 * MIB);
  int chunks = 0;
  while (xf_tensor_sender_next(s, &msg) == XF_OK) {
    if (msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK) chunks++;
    assert_int_equal(deliver(d, r, &msg, NULL, NULL), XF_OK);
  }
  assert_int_equal(chunks, 3);
  assert_true(xf_tensor_receiver_complete(r));
  assert_int_equal(out.calls, 5); /* every chunk reached the sink exactly once */
  assert_int_equal(out.seen, TENSOR_BYTES);
  assert_memory_equal(out.bytes, tensor, TENSOR_BYTES);

  /* The link drops again before the final ack arrives: a second Begin and
   * End on the verified stream are harmless, and the sender stays done. */
  xf_tensor_sender_rewind(s);
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_OK);
  assert_int_equal(deliver(d, r, &msg, NULL, NULL), XF_OK);
  assert_int_equal(xf_tensor_sender_resume(s, xf_tensor_receiver_next_offset(r), NULL), XF_OK);
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_OK);
  assert_int_equal(msg.env.body_case, XFED__ENVELOPE__BODY_TENSOR_END);
  assert_int_equal(deliver(d, r, &msg, NULL, NULL), XF_OK);
  assert_int_equal(xf_tensor_sender_resume(s, TENSOR_BYTES, NULL), XF_OK);
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_ENOENT);

  xf_frame_decoder_free(d);
  xf_tensor_receiver_free(r);
  xf_tensor_sender_free(s);
  free(out.bytes);
  free(tensor);
}

/* Collects a small stream's messages: Begin, the chunks, End. */
#define SMALL_BYTES 10000u
#define SMALL_CHUNK 3000u /* chunks at 0, 3000, 6000 and 9000 (1000 bytes) */

typedef struct small_stream {
  uint8_t *tensor;
  xf_tensor_sender *s;
  xf_tensor_msg msgs[8];
  int n;
} small_stream;

static void small_stream_make(small_stream *ss, uint64_t seed) {
  ss->tensor = make_tensor(SMALL_BYTES, seed);
  xf_tensor_desc desc = update_desc();
  desc.element_count = SMALL_BYTES;
  assert_int_equal(xf_tensor_sender_new(&desc, ss->tensor, SMALL_BYTES, SMALL_CHUNK, &ss->s, NULL),
                   XF_OK);
  ss->n = 0;
  /* Each message is filled in place: its env points into its own body. */
  while (xf_tensor_sender_next(ss->s, &ss->msgs[ss->n]) == XF_OK) {
    ss->n++;
    assert_true(ss->n < 8);
  }
  assert_int_equal(ss->n, 6);
}

static void small_stream_free(small_stream *ss) {
  xf_tensor_sender_free(ss->s);
  free(ss->tensor);
}

static void reordered_or_gapped_chunks_are_rejected(void **state) {
  (void)state;
  small_stream ss;
  small_stream_make(&ss, 3);
  sink_buf out = {.bytes = calloc(1, SMALL_BYTES), .cap = SMALL_BYTES};
  xf_tensor_receiver *r;
  assert_int_equal(xf_tensor_receiver_new(SMALL_BYTES, sink_write, &out, &r, NULL), XF_OK);
  Xfed__TensorChunk *c1 = &ss.msgs[1].body.chunk, *c2 = &ss.msgs[2].body.chunk;
  xf_errctx err;
  /* A chunk before Begin. */
  assert_int_equal(xf_tensor_receiver_chunk(r, c1, NULL), XF_EFORMAT);
  assert_int_equal(xf_tensor_receiver_begin(r, &ss.msgs[0].body.begin, NULL), XF_OK);
  /* Chunk 1 before chunk 0: a gap. */
  xf_errctx_clear(&err);
  assert_int_equal(xf_tensor_receiver_chunk(r, c2, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "gap"));
  assert_int_equal(xf_tensor_receiver_next_offset(r), 0);
  assert_int_equal(out.calls, 0);
  /* In order it goes through; skipping chunk 2 is again a gap. */
  assert_int_equal(xf_tensor_receiver_chunk(r, c1, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_chunk(r, &ss.msgs[3].body.chunk, NULL), XF_EFORMAT);
  assert_int_equal(xf_tensor_receiver_next_offset(r), SMALL_CHUNK);

  /* Chunks that lie about themselves. */
  Xfed__TensorChunk bad = *c2;
  bad.index = 5;
  assert_int_equal(xf_tensor_receiver_chunk(r, &bad, NULL), XF_EFORMAT);
  bad = *c2;
  bad.offset += 1;
  assert_int_equal(xf_tensor_receiver_chunk(r, &bad, NULL), XF_EFORMAT);
  bad = *c2;
  bad.data.len -= 1;
  assert_int_equal(xf_tensor_receiver_chunk(r, &bad, NULL), XF_EFORMAT);
  bad = *c2;
  bad.offset = SMALL_BYTES;
  bad.index = SMALL_BYTES / SMALL_CHUNK;
  assert_int_equal(xf_tensor_receiver_chunk(r, &bad, NULL), XF_EFORMAT);
  bad = *c2;
  bad.stream_id = 78;
  assert_int_equal(xf_tensor_receiver_chunk(r, &bad, NULL), XF_EFORMAT);
  assert_int_equal(xf_tensor_receiver_next_offset(r), SMALL_CHUNK);
  assert_int_equal(out.calls, 1);

  /* End before the last bytes: truncated, and the stream can still finish. */
  xf_errctx_clear(&err);
  assert_int_equal(xf_tensor_receiver_end(r, &ss.msgs[5].body.end, &err), XF_ETRUNCATED);
  assert_non_null(strstr(err.msg, "3000 of its 10000"));
  for (int i = 2; i < 6; i++)
    assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[i].env, NULL), XF_OK);
  assert_true(xf_tensor_receiver_complete(r));
  assert_memory_equal(out.bytes, ss.tensor, SMALL_BYTES);
  xf_tensor_receiver_free(r);
  free(out.bytes);
  small_stream_free(&ss);
}

static void corrupted_chunk_is_caught_by_the_digest(void **state) {
  (void)state;
  small_stream ss;
  small_stream_make(&ss, 4);
  sink_buf out = {.bytes = calloc(1, SMALL_BYTES), .cap = SMALL_BYTES};
  xf_tensor_receiver *r;
  assert_int_equal(xf_tensor_receiver_new(SMALL_BYTES, sink_write, &out, &r, NULL), XF_OK);
  uint8_t flipped[SMALL_CHUNK];
  Xfed__TensorChunk *c = &ss.msgs[3].body.chunk;
  memcpy(flipped, c->data.data, c->data.len);
  flipped[1234] ^= 0x10;
  c->data.data = flipped;
  for (int i = 0; i < 5; i++)
    assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[i].env, NULL), XF_OK);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[5].env, &err), XF_EINTEGRITY);
  assert_non_null(strstr(err.msg, "digest"));
  assert_false(xf_tensor_receiver_complete(r));
  /* The receiver is spent. */
  assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[5].env, NULL), XF_EINTEGRITY);
  assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[0].env, NULL), XF_EINTEGRITY);
  xf_tensor_receiver_free(r);
  free(out.bytes);
  small_stream_free(&ss);
}

static void duplicate_chunk_is_ignored(void **state) {
  (void)state;
  small_stream ss;
  small_stream_make(&ss, 5);
  sink_buf out = {.bytes = calloc(1, SMALL_BYTES), .cap = SMALL_BYTES};
  xf_tensor_receiver *r;
  assert_int_equal(xf_tensor_receiver_new(SMALL_BYTES, sink_write, &out, &r, NULL), XF_OK);
  int order[] = {0, 1, 1, 2, 1, 2, 3, 4, 4, 5, 5, 3};
  for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
    assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[order[i]].env, NULL), XF_OK);
  assert_true(xf_tensor_receiver_complete(r));
  assert_int_equal(out.calls, 4);
  assert_int_equal(out.seen, SMALL_BYTES);
  assert_memory_equal(out.bytes, ss.tensor, SMALL_BYTES);
  xf_tensor_receiver_free(r);
  free(out.bytes);
  small_stream_free(&ss);
}

static void begin_is_checked_and_a_changed_repeat_refused(void **state) {
  (void)state;
  small_stream ss;
  small_stream_make(&ss, 6);
  sink_buf out = {.bytes = calloc(1, SMALL_BYTES), .cap = SMALL_BYTES};
  xf_tensor_receiver *r;
  assert_int_equal(xf_tensor_receiver_new(SMALL_BYTES - 1, sink_write, &out, &r, NULL), XF_OK);
  Xfed__TensorBegin b = ss.msgs[0].body.begin;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_tensor_receiver_begin(r, &b, &err), XF_ERANGE); /* above max_total */
  assert_non_null(strstr(err.msg, "10000"));
  xf_tensor_receiver_free(r);
  assert_int_equal(xf_tensor_receiver_new(SMALL_BYTES, sink_write, &out, &r, NULL), XF_OK);
  b.digest.len = 31;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  b = ss.msgs[0].body.begin;
  b.chunk_bytes = XF_TENSOR_CHUNK_MAX + 1;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  b.chunk_bytes = 0;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  b = ss.msgs[0].body.begin;
  b.kind = XFED__TENSOR_BEGIN__KIND__KIND_UNSPECIFIED;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  b = ss.msgs[0].body.begin;
  b.stream_id = 0;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  assert_null(xf_tensor_receiver_info(r));
  b = ss.msgs[0].body.begin;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_OK);
  b.total_bytes -= 1;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  b = ss.msgs[0].body.begin;
  b.job_id = "another-job";
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  xf_tensor_receiver_free(r);

  /* The sender's own checks. */
  xf_tensor_sender *s;
  xf_tensor_desc desc = update_desc();
  assert_int_equal(xf_tensor_sender_new(&desc, ss.tensor, SMALL_BYTES, XF_TENSOR_CHUNK_MAX + 1,
                                        &s, NULL), XF_EINVAL);
  desc.stream_id = 0;
  assert_int_equal(xf_tensor_sender_new(&desc, ss.tensor, SMALL_BYTES, 0, &s, NULL), XF_EINVAL);
  assert_int_equal(xf_tensor_sender_resume(ss.s, SMALL_BYTES + 1, NULL), XF_ERANGE);
  assert_int_equal(xf_tensor_sender_resume(ss.s, SMALL_CHUNK + 1, NULL), XF_ERANGE);
  assert_int_equal(xf_tensor_sender_resume(ss.s, SMALL_BYTES, NULL), XF_OK);
  free(out.bytes);
  small_stream_free(&ss);
}

static void begin_carries_weight_attempt_and_contributors(void **state) {
  (void)state;
  uint8_t *tensor = make_tensor(SMALL_BYTES, 8);
  xf_tensor_desc desc = update_desc();
  desc.kind = XFED__TENSOR_BEGIN__KIND__AGGREGATE;
  desc.attempt = 2;
  desc.weight = 60000;
  desc.contributors = 3;
  xf_tensor_sender *s;
  assert_int_equal(xf_tensor_sender_new(&desc, tensor, SMALL_BYTES, SMALL_CHUNK, &s, NULL), XF_OK);
  xf_tensor_msg msg;
  assert_int_equal(xf_tensor_sender_next(s, &msg), XF_OK);
  assert_int_equal(msg.env.body_case, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  /* Through a real frame, so the fields are on the wire and not only in
   * the struct. */
  uint8_t *frame;
  size_t len, used;
  Xfed__Envelope *env;
  xf_frame_decoder *d;
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  assert_int_equal(xf_frame_encode(&msg.env, 0, &frame, &len, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_feed(d, frame, len, &used, &env, NULL), XF_OK);
  xf_free(frame);
  assert_non_null(env);
  assert_int_equal(env->tensor_begin->attempt, 2);
  assert_int_equal(env->tensor_begin->weight, 60000);
  assert_int_equal(env->tensor_begin->contributors, 3);
  assert_int_equal(env->tensor_begin->round, 3);
  sink_buf out = {.bytes = calloc(1, SMALL_BYTES), .cap = SMALL_BYTES};
  xf_tensor_receiver *r;
  assert_int_equal(xf_tensor_receiver_new(SMALL_BYTES, sink_write, &out, &r, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_begin(r, env->tensor_begin, NULL), XF_OK);
  const xf_tensor_info *info = xf_tensor_receiver_info(r);
  assert_non_null(info);
  assert_int_equal(info->attempt, 2);
  assert_int_equal(info->weight, 60000);
  assert_int_equal(info->contributors, 3);
  /* A repeat after a reconnect must announce the same weight, attempt and
   * contributors: a stream whose weight changed is another tensor. */
  Xfed__TensorBegin b = *env->tensor_begin;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_OK);
  b.weight = 59999;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  b = *env->tensor_begin;
  b.attempt = 3;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  b = *env->tensor_begin;
  b.contributors = 4;
  assert_int_equal(xf_tensor_receiver_begin(r, &b, NULL), XF_EFORMAT);
  assert_int_equal(info->weight, 60000);
  xf_envelope_free(env);
  xf_frame_decoder_free(d);
  xf_tensor_receiver_free(r);
  xf_tensor_sender_free(s);
  free(out.bytes);
  free(tensor);
}

static void sink_error_leaves_the_receiver_unchanged(void **state) {
  (void)state;
  small_stream ss;
  small_stream_make(&ss, 7);
  sink_buf out = {.bytes = calloc(1, SMALL_BYTES), .cap = SMALL_BYTES, .fail_with = XF_EIO};
  xf_tensor_receiver *r;
  assert_int_equal(xf_tensor_receiver_new(SMALL_BYTES, sink_write, &out, &r, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[0].env, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[1].env, NULL), XF_EIO);
  assert_int_equal(xf_tensor_receiver_next_offset(r), 0);
  out.fail_with = XF_OK;
  for (int i = 1; i < 6; i++)
    assert_int_equal(xf_tensor_receiver_handle(r, &ss.msgs[i].env, NULL), XF_OK);
  assert_true(xf_tensor_receiver_complete(r));
  assert_memory_equal(out.bytes, ss.tensor, SMALL_BYTES);
  /* Anything but a tensor message is not the receiver's. */
  Xfed__Envelope other = XFED__ENVELOPE__INIT;
  assert_int_equal(xf_tensor_receiver_handle(r, &other, NULL), XF_EINVAL);
  xf_tensor_receiver_free(r);
  free(out.bytes);
  small_stream_free(&ss);
}

static void empty_tensor_is_begin_and_end(void **state) {
  (void)state;
  xf_tensor_desc desc = update_desc();
  xf_tensor_sender *s;
  xf_tensor_receiver *r;
  sink_buf out = {0};
  assert_int_equal(xf_tensor_sender_new(&desc, NULL, 0, 0, &s, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_new(0, sink_write, &out, &r, NULL), XF_OK);
  xf_tensor_msg msg;
  int n = 0;
  while (xf_tensor_sender_next(s, &msg) == XF_OK) {
    assert_int_equal(xf_tensor_receiver_handle(r, &msg.env, NULL), XF_OK);
    n++;
  }
  assert_int_equal(n, 2);
  assert_true(xf_tensor_receiver_complete(r));
  assert_int_equal(out.calls, 0);
  xf_tensor_receiver_free(r);
  xf_tensor_sender_free(s);
}

/* ---- the buffer budget ------------------------------------------------------------ */

/* A frame of one TensorChunk carrying n bytes, encoded into *out (xf_free). */
static size_t chunk_frame(size_t n, uint8_t **out) {
  uint8_t *data = xf_calloc(1, n ? n : 1);
  assert_non_null(data);
  Xfed__TensorChunk c = XFED__TENSOR_CHUNK__INIT;
  c.stream_id = 9;
  c.data.data = data;
  c.data.len = n;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
  env.tensor_chunk = &c;
  size_t len = 0;
  assert_int_equal(xf_frame_encode(&env, XF_FRAME_MAX_LIMIT, out, &len, NULL), XF_OK);
  xf_free(data);
  return len;
}

static void count_release(xf_frame_budget *b) { (*(int *)b->user)++; }

static void budget_holds_a_large_frame_until_room_is_given_back(void **state) {
  (void)state;
  int released = 0;
  xf_frame_budget b = {.limit = 1024u * 1024u, .on_release = count_release, .user = &released};
  uint8_t *f = NULL;
  size_t len = chunk_frame(600u * 1024u, &f);
  size_t payload = len - XF_FRAME_HEADER;
  xf_frame_decoder *a, *z;
  assert_int_equal(xf_frame_decoder_new(0, &a, NULL), XF_OK);
  assert_int_equal(xf_frame_decoder_new(0, &z, NULL), XF_OK);
  xf_frame_decoder_set_budget(a, &b);
  xf_frame_decoder_set_budget(z, &b);
  size_t used;
  Xfed__Envelope *env;

  /* a takes its whole payload from the budget once its prefix is read. */
  assert_int_equal(xf_frame_decoder_feed(a, f, 100, &used, &env, NULL), XF_OK);
  assert_int_equal(used, 100);
  assert_null(env);
  assert_false(xf_frame_decoder_waiting(a));
  assert_int_equal(b.used, payload);

  /* z's frame does not fit beside it: z reads its prefix and stops. */
  assert_int_equal(xf_frame_decoder_feed(z, f, 100, &used, &env, NULL), XF_OK);
  assert_int_equal(used, XF_FRAME_HEADER);
  assert_null(env);
  assert_true(xf_frame_decoder_waiting(z));
  assert_int_equal(b.used, payload);
  assert_int_equal(b.waits, 1);
  assert_int_equal(xf_frame_decoder_feed(z, NULL, 0, &used, &env, NULL), XF_OK);
  assert_true(xf_frame_decoder_waiting(z));
  assert_int_equal(b.waits, 1); /* one frame waited, however often it asked */

  /* a completes and gives its bytes back; z then gets them. */
  assert_int_equal(xf_frame_decoder_feed(a, f + 100, len - 100, &used, &env, NULL), XF_OK);
  assert_non_null(env);
  xf_envelope_free(env);
  assert_int_equal(b.used, 0);
  assert_int_equal(released, 1);
  assert_int_equal(xf_frame_decoder_feed(z, NULL, 0, &used, &env, NULL), XF_OK);
  assert_false(xf_frame_decoder_waiting(z));
  assert_int_equal(b.used, payload);
  size_t off = XF_FRAME_HEADER;
  while (off < len) {
    size_t n = len - off < 16384 ? len - off : 16384;
    assert_int_equal(xf_frame_decoder_feed(z, f + off, n, &used, &env, NULL), XF_OK);
    off += used;
    if (env) break;
  }
  assert_non_null(env);
  assert_int_equal(env->tensor_chunk->data.len, 600u * 1024u);
  xf_envelope_free(env);
  assert_int_equal(b.used, 0);
  assert_int_equal(b.peak, payload);
  xf_frame_decoder_free(a);
  xf_frame_decoder_free(z);
  xf_free(f);
}

static void small_frames_pass_a_spent_budget(void **state) {
  (void)state;
  xf_frame_budget b = {.limit = 1024u * 1024u};
  assert_true(xf_frame_budget_take(&b, 1024u * 1024u)); /* someone holds it all */
  assert_false(xf_frame_budget_take(&b, XF_FRAME_BUDGET_SMALL + 1));
  uint8_t *f = NULL;
  size_t len = chunk_frame(8000, &f);
  xf_frame_decoder *d;
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  xf_frame_decoder_set_budget(d, &b);
  size_t used;
  Xfed__Envelope *env;
  /* In two slices, so that the payload must be buffered: granted, counted. */
  assert_int_equal(xf_frame_decoder_feed(d, f, 10, &used, &env, NULL), XF_OK);
  assert_false(xf_frame_decoder_waiting(d));
  assert_int_equal(b.used, 1024u * 1024u + (len - XF_FRAME_HEADER));
  assert_int_equal(xf_frame_decoder_feed(d, f + 10, len - 10, &used, &env, NULL), XF_OK);
  assert_non_null(env);
  xf_envelope_free(env);
  assert_int_equal(b.used, 1024u * 1024u);
  assert_int_equal(b.waits, 0);
  xf_frame_budget_give(&b, 1024u * 1024u);
  assert_int_equal(b.used, 0);
  xf_frame_decoder_free(d);
  xf_free(f);
}

static void frame_larger_than_the_budget_passes_alone(void **state) {
  (void)state;
  xf_frame_budget b = {.limit = 1024u * 1024u};
  uint8_t *f = NULL;
  size_t len = chunk_frame(2u * 1024u * 1024u, &f);
  xf_frame_decoder *d;
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  xf_frame_decoder_set_budget(d, &b);
  size_t used;
  Xfed__Envelope *env;
  /* With nothing else reserved it is granted: a frame the decoder accepts
   * never waits forever. */
  assert_int_equal(xf_frame_decoder_feed(d, f, 64, &used, &env, NULL), XF_OK);
  assert_false(xf_frame_decoder_waiting(d));
  assert_int_equal(b.used, len - XF_FRAME_HEADER);
  /* A whole payload in one slice needs no buffer and no reservation. */
  xf_frame_decoder *w;
  assert_int_equal(xf_frame_decoder_new(0, &w, NULL), XF_OK);
  xf_frame_decoder_set_budget(w, &b);
  assert_int_equal(xf_frame_decoder_feed(w, f, len, &used, &env, NULL), XF_OK);
  assert_non_null(env);
  xf_envelope_free(env);
  assert_int_equal(b.waits, 0);
  xf_frame_decoder_free(w);
  xf_frame_decoder_free(d);
  assert_int_equal(b.used, 0); /* freed mid-frame: given back */
  xf_free(f);
}

static void spent_decoder_gives_its_reservation_back(void **state) {
  (void)state;
  xf_frame_budget b = {.limit = 1024u * 1024u};
  /* A 100 000-byte payload that is not an Envelope. */
  size_t payload = 100000;
  uint8_t *f = xf_calloc(1, XF_FRAME_HEADER + payload);
  assert_non_null(f);
  f[1] = (uint8_t)(payload >> 16);
  f[2] = (uint8_t)(payload >> 8);
  f[3] = (uint8_t)payload;
  f[4] = 0x0a; /* field 1, length-delimited, claiming more than follows */
  f[5] = 0xff;
  f[6] = 0xff;
  f[7] = 0x7f;
  xf_frame_decoder *d;
  assert_int_equal(xf_frame_decoder_new(0, &d, NULL), XF_OK);
  xf_frame_decoder_set_budget(d, &b);
  size_t used;
  Xfed__Envelope *env;
  assert_int_equal(xf_frame_decoder_feed(d, f, 1000, &used, &env, NULL), XF_OK);
  assert_int_equal(b.used, payload);
  assert_int_equal(xf_frame_decoder_feed(d, f + 1000, XF_FRAME_HEADER + payload - 1000, &used,
                                         &env, NULL),
                   XF_EFORMAT);
  assert_int_equal(b.used, 0);
  xf_frame_decoder_free(d);
  xf_free(f);
}

/* ---- the progress rule ---------------------------------------------------------- */

static const xf_progress_rule default_rule = {XF_PROGRESS_MIN_RATE, XF_PROGRESS_WINDOW_MS,
                                              XF_PROGRESS_GRACE_MS};

static void trickling_frame_is_judged_slow_after_the_grace_period(void **state) {
  (void)state;
  xf_progress p;
  xf_progress_init(&p, &default_rule, 0);
  /* A length prefix and 1000 bytes, then a byte every 15 s: each byte
   * would restart an idle timer, and the frame never ends. */
  xf_progress_read(&p, 0, 1004, true);
  uint64_t failed_at = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  for (uint64_t t = 1000; t <= 120000 && !failed_at; t += 1000) {
    if (t % 15000 == 0) xf_progress_read(&p, t, 1, true);
    if (xf_progress_check(&p, t, &err) != XF_OK) failed_at = t;
  }
  assert_int_equal(failed_at, 30000);
  assert_non_null(strstr(err.msg, "below the minimum of 4096 bytes/s"));
  assert_non_null(strstr(err.msg, "in the last 30.0 s"));
}

static void slow_but_steady_chunks_are_never_judged(void **state) {
  (void)state;
  xf_progress p;
  xf_progress_init(&p, &default_rule, 0);
  /* Three 1 MiB tensor chunks back to back at 8 KiB/s, twice the minimum:
   * 128 s each. */
  size_t frame = (1u << 20) + 48, in_frame = 0;
  for (uint64_t t = 1000; t <= 3 * 130000; t += 1000) {
    size_t n = 8192;
    while (n) {
      size_t take = frame - in_frame < n ? frame - in_frame : n;
      in_frame += take;
      n -= take;
      bool open = in_frame < frame;
      xf_progress_read(&p, t, take, open);
      if (!open) in_frame = 0;
    }
    assert_int_equal(xf_progress_check(&p, t, NULL), XF_OK);
  }
}

static void silence_between_frames_is_not_judged(void **state) {
  (void)state;
  xf_progress p;
  xf_progress_init(&p, &default_rule, 0);
  xf_progress_read(&p, 0, 500, false); /* a whole frame, then nothing */
  for (uint64_t t = 1000; t <= 600000; t += 1000)
    assert_int_equal(xf_progress_check(&p, t, NULL), XF_OK);
}

static void time_while_this_side_does_not_read_does_not_count(void **state) {
  (void)state;
  xf_progress p;
  xf_progress_init(&p, &default_rule, 0);
  xf_progress_read(&p, 0, 20000, true);
  xf_progress_pause(&p, 1000); /* the budget has no room, say, for ten minutes */
  for (uint64_t t = 2000; t <= 600000; t += 1000)
    assert_int_equal(xf_progress_check(&p, t, NULL), XF_OK);
  xf_progress_resume(&p, 600000);
  /* 1 s of the frame was read before the pause: the window has 29 s to go,
   * and the 20 000 bytes still count toward it. */
  uint64_t failed_at = 0;
  for (uint64_t t = 601000; t <= 700000 && !failed_at; t += 1000)
    if (xf_progress_check(&p, t, NULL) != XF_OK) failed_at = t;
  assert_int_equal(failed_at, 629000);
}

static void young_frame_is_judged_only_after_its_grace(void **state) {
  (void)state;
  xf_progress_rule rule = {.min_rate = 1000, .window_ms = 10000, .grace_ms = 60000};
  xf_progress p;
  xf_progress_init(&p, &rule, 0);
  xf_progress_read(&p, 0, 4, true); /* a length prefix, then nothing at all */
  uint64_t failed_at = 0;
  for (uint64_t t = 1000; t <= 120000 && !failed_at; t += 1000)
    if (xf_progress_check(&p, t, NULL) != XF_OK) failed_at = t;
  assert_int_equal(failed_at, 60000);

  /* Off: never. */
  rule.min_rate = 0;
  xf_progress_init(&p, &rule, 0);
  xf_progress_read(&p, 0, 4, true);
  for (uint64_t t = 1000; t <= 600000; t += 1000)
    assert_int_equal(xf_progress_check(&p, t, NULL), XF_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_message_type_round_trips_in_any_slicing),
      cmocka_unit_test(decoded_fields_match_what_was_sent),
      cmocka_unit_test(oversized_length_is_rejected_before_its_payload),
      cmocka_unit_test(maximum_frame_is_configurable),
      cmocka_unit_test(truncated_or_garbage_payload_is_a_format_error),
      cmocka_unit_test(empty_and_unknown_bodies_decode_with_no_body),
      cmocka_unit_test(allocation_failures_in_decode_are_reported_not_leaked),
      cmocka_unit_test(hello_negotiation_picks_the_lower_common_version),
      cmocka_unit_test(five_megabyte_tensor_is_reassembled_and_verified),
      cmocka_unit_test(dropped_connection_resumes_from_the_receivers_ack),
      cmocka_unit_test(reordered_or_gapped_chunks_are_rejected),
      cmocka_unit_test(corrupted_chunk_is_caught_by_the_digest),
      cmocka_unit_test(duplicate_chunk_is_ignored),
      cmocka_unit_test(begin_is_checked_and_a_changed_repeat_refused),
      cmocka_unit_test(begin_carries_weight_attempt_and_contributors),
      cmocka_unit_test(sink_error_leaves_the_receiver_unchanged),
      cmocka_unit_test(empty_tensor_is_begin_and_end),
      cmocka_unit_test(budget_holds_a_large_frame_until_room_is_given_back),
      cmocka_unit_test(small_frames_pass_a_spent_budget),
      cmocka_unit_test(frame_larger_than_the_budget_passes_alone),
      cmocka_unit_test(spent_decoder_gives_its_reservation_back),
      cmocka_unit_test(trickling_frame_is_judged_slow_after_the_grace_period),
      cmocka_unit_test(slow_but_steady_chunks_are_never_judged),
      cmocka_unit_test(silence_between_frames_is_not_judged),
      cmocka_unit_test(time_while_this_side_does_not_read_does_not_count),
      cmocka_unit_test(young_frame_is_judged_only_after_its_grace),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
