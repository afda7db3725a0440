/* SPDX-License-Identifier: Apache-2.0 */
/* DOCUMENT streams without sockets (net/document.h): a message larger than
 * a frame cut into chunks that each fit one, gathered back whole, resumed
 * after lost chunks, and refused when it is not a DOCUMENT, too large,
 * corrupted, or carries a stream inside a stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "net/document.h"
#include "net/frame.h"
#include "net/tensor.h"

/* A PolicyReply whose text is n bytes of a repeating pattern. */
static Xfed__Envelope *reply_of(size_t n, char **text) {
  *text = xf_malloc(n + 1);
  assert_non_null(*text);
  for (size_t i = 0; i < n; i++) (*text)[i] = (char)('a' + i % 26);
  (*text)[n] = '\0';
  static Xfed__PolicyReply r;
  static Xfed__Envelope env;
  Xfed__PolicyReply ri = XFED__POLICY_REPLY__INIT;
  Xfed__Envelope ei = XFED__ENVELOPE__INIT;
  r = ri;
  env = ei;
  r.version = 7;
  r.text = *text;
  env.body_case = XFED__ENVELOPE__BODY_POLICY_REPLY;
  env.policy_reply = &r;
  return &env;
}

/* Runs the sender's messages through the receiver, dropping the chunk
 * numbered `drop` (SIZE_MAX: none) the first time it comes; answers every
 * ack the receiver asks for by resuming the sender. Returns the message. */
static Xfed__Envelope *carry(xf_tensor_sender *tx, xf_document_rx *rx, size_t max_frame,
                             size_t drop, size_t *acks) {
  xf_tensor_msg msg;
  xf_errctx err;
  xf_errctx_clear(&err);
  size_t chunk = 0;
  bool dropped = false;
  *acks = 0;
  for (int guard = 0; guard < 100000; guard++) {
    if (xf_tensor_sender_next(tx, &msg) != XF_OK) fail_msg("the sender ran out before the end");
    assert_true(xf_frame_size(&msg.env) <= max_frame + XF_FRAME_HEADER);
    if (msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK && chunk++ == drop && !dropped) {
      dropped = true;
      continue;
    }
    xf_document_step step;
    xf_err rc = xf_document_rx_take(rx, &msg.env, &step, &err);
    if (rc != XF_OK) fail_msg("the receiver refused: %s", err.msg);
    if (step.ack) {
      (*acks)++;
      assert_int_equal(xf_tensor_sender_resume(tx, step.tensor_ack.next_offset, &err), XF_OK);
    }
    if (step.message) return step.message;
  }
  fail_msg("no message came out");
  return NULL;
}

static void a_message_larger_than_a_frame_arrives_whole_in_frames_that_fit(void **state) {
  (void)state;
  char *text = NULL;
  Xfed__Envelope *env = reply_of(300000, &text);
  size_t max_frame = 65536;
  assert_false(xf_document_fits(env, max_frame));
  assert_true(xf_document_fits(env, 1u << 20));
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_document_pack(env, &bytes, &len, &err), XF_OK);
  xf_tensor_desc d = xf_document_desc(9, len);
  xf_tensor_sender *tx = NULL;
  assert_int_equal(xf_tensor_sender_new(&d, bytes, len, xf_document_chunk(max_frame), &tx, &err),
                   XF_OK);
  xf_document_rx *rx = NULL;
  assert_int_equal(xf_document_rx_new(0, &rx, &err), XF_OK);
  size_t acks = 0;
  Xfed__Envelope *got = carry(tx, rx, max_frame, SIZE_MAX, &acks);
  assert_int_equal(acks, 2); /* where to start, and everything */
  assert_int_equal(got->body_case, XFED__ENVELOPE__BODY_POLICY_REPLY);
  assert_int_equal(got->policy_reply->version, 7);
  assert_string_equal(got->policy_reply->text, text);
  xf_envelope_free(got);
  xf_document_rx_free(rx);
  xf_tensor_sender_free(tx);
  xf_free(bytes);
  xf_free(text);
}

static void a_lost_chunk_is_sent_again_from_where_the_receiver_stands(void **state) {
  (void)state;
  char *text = NULL;
  Xfed__Envelope *env = reply_of(200000, &text);
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_document_pack(env, &bytes, &len, &err), XF_OK);
  xf_tensor_desc d = xf_document_desc(3, len);
  xf_tensor_sender *tx = NULL;
  assert_int_equal(xf_tensor_sender_new(&d, bytes, len, 65536 - 64, &tx, &err), XF_OK);
  xf_document_rx *rx = NULL;
  assert_int_equal(xf_document_rx_new(0, &rx, &err), XF_OK);
  /* The last chunk goes missing: TensorEnd finds bytes short, the ack says
   * where to go on, and the rest comes again. */
  size_t chunks = (len + 65536 - 64 - 1) / (65536 - 64), acks = 0;
  Xfed__Envelope *got = carry(tx, rx, 65536, chunks - 1, &acks);
  assert_int_equal(acks, 3);
  assert_string_equal(got->policy_reply->text, text);
  xf_envelope_free(got);
  xf_document_rx_free(rx);
  xf_tensor_sender_free(tx);
  xf_free(bytes);
  xf_free(text);
}

/* The messages of a stream over bytes, handed to the receiver in order;
 * returns the first refusal's code (XF_OK when none). */
static xf_err feed(const uint8_t *bytes, size_t len, uint64_t max_total,
                   Xfed__TensorBegin__Kind kind, xf_errctx *err) {
  xf_tensor_desc d = xf_document_desc(5, len);
  d.kind = kind;
  xf_tensor_sender *tx = NULL;
  assert_int_equal(xf_tensor_sender_new(&d, bytes, len, 1000, &tx, err), XF_OK);
  xf_document_rx *rx = NULL;
  assert_int_equal(xf_document_rx_new(max_total, &rx, err), XF_OK);
  xf_tensor_msg msg;
  xf_err rc = XF_OK;
  while (rc == XF_OK && xf_tensor_sender_next(tx, &msg) == XF_OK) {
    xf_document_step step;
    rc = xf_document_rx_take(rx, &msg.env, &step, err);
    if (rc == XF_OK && step.ack)
      assert_int_equal(xf_tensor_sender_resume(tx, step.tensor_ack.next_offset, err), XF_OK);
    if (step.message) {
      xf_envelope_free(step.message);
      break;
    }
  }
  xf_document_rx_free(rx);
  xf_tensor_sender_free(tx);
  return rc;
}

static void streams_that_are_not_a_message_of_the_right_size_are_refused(void **state) {
  (void)state;
  char *text = NULL;
  Xfed__Envelope *env = reply_of(5000, &text);
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_document_pack(env, &bytes, &len, &err), XF_OK);
  assert_int_equal(feed(bytes, len, 0, XFED__TENSOR_BEGIN__KIND__DOCUMENT, &err), XF_OK);
  /* A model is not a message. */
  assert_int_equal(feed(bytes, len, 0, XFED__TENSOR_BEGIN__KIND__MODEL, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "only DOCUMENT streams"));
  /* Above what the receiver takes. */
  assert_int_equal(feed(bytes, len, len - 1, XFED__TENSOR_BEGIN__KIND__DOCUMENT, &err),
                   XF_ERANGE);
  /* Bytes that are not an Envelope. */
  uint8_t junk[64];
  memset(junk, 0xff, sizeof(junk));
  assert_int_equal(feed(junk, sizeof(junk), 0, XFED__TENSOR_BEGIN__KIND__DOCUMENT, &err),
                   XF_EFORMAT);
  /* A stream inside a stream. */
  Xfed__TensorEnd end = XFED__TENSOR_END__INIT;
  end.stream_id = 4;
  Xfed__Envelope inner = XFED__ENVELOPE__INIT;
  inner.body_case = XFED__ENVELOPE__BODY_TENSOR_END;
  inner.tensor_end = &end;
  uint8_t *ib = NULL;
  size_t il = 0;
  assert_int_equal(xf_document_pack(&inner, &ib, &il, &err), XF_OK);
  assert_int_equal(feed(ib, il, 0, XFED__TENSOR_BEGIN__KIND__DOCUMENT, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "not tensor_end"));
  xf_free(ib);
  xf_free(bytes);
  xf_free(text);
}

static void a_corrupted_stream_fails_its_digest_and_is_dropped(void **state) {
  (void)state;
  char *text = NULL;
  Xfed__Envelope *env = reply_of(5000, &text);
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_document_pack(env, &bytes, &len, &err), XF_OK);
  xf_tensor_desc d = xf_document_desc(6, len);
  xf_tensor_sender *tx = NULL;
  assert_int_equal(xf_tensor_sender_new(&d, bytes, len, 1000, &tx, &err), XF_OK);
  xf_document_rx *rx = NULL;
  assert_int_equal(xf_document_rx_new(0, &rx, &err), XF_OK);
  xf_tensor_msg msg;
  xf_document_step step;
  bool flipped = false;
  xf_err rc = XF_OK;
  while (rc == XF_OK && xf_tensor_sender_next(tx, &msg) == XF_OK) {
    if (!flipped && msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK) {
      bytes[msg.body.chunk.offset] ^= 1; /* the sender's buffer, after it was hashed */
      flipped = true;
    }
    rc = xf_document_rx_take(rx, &msg.env, &step, &err);
  }
  assert_int_equal(rc, XF_EINTEGRITY);
  assert_null(step.message);
  /* Dropped: what comes next of that stream belongs to none. */
  Xfed__TensorEnd e = XFED__TENSOR_END__INIT;
  e.stream_id = 6;
  Xfed__Envelope env_end = XFED__ENVELOPE__INIT;
  env_end.body_case = XFED__ENVELOPE__BODY_TENSOR_END;
  env_end.tensor_end = &e;
  assert_int_equal(xf_document_rx_take(rx, &env_end, &step, &err), XF_EFORMAT);
  xf_document_rx_free(rx);
  xf_tensor_sender_free(tx);
  xf_free(bytes);
  xf_free(text);
}

static void a_new_stream_id_starts_over(void **state) {
  (void)state;
  char *text = NULL;
  Xfed__Envelope *env = reply_of(50000, &text);
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_document_pack(env, &bytes, &len, &err), XF_OK);
  xf_document_rx *rx = NULL;
  assert_int_equal(xf_document_rx_new(0, &rx, &err), XF_OK);
  /* The first sender gets a chunk in and goes away. */
  xf_tensor_desc d1 = xf_document_desc(1, len);
  xf_tensor_sender *tx = NULL;
  assert_int_equal(xf_tensor_sender_new(&d1, bytes, len, 4096, &tx, &err), XF_OK);
  xf_tensor_msg msg;
  xf_document_step step;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(xf_tensor_sender_next(tx, &msg), XF_OK);
    assert_int_equal(xf_document_rx_take(rx, &msg.env, &step, &err), XF_OK);
  }
  xf_tensor_sender_free(tx);
  /* A second one, under another id, goes through from the start. */
  xf_tensor_desc d2 = xf_document_desc(2, len);
  assert_int_equal(xf_tensor_sender_new(&d2, bytes, len, 4096, &tx, &err), XF_OK);
  size_t acks = 0;
  Xfed__Envelope *got = carry(tx, rx, 8192, SIZE_MAX, &acks);
  assert_int_equal(xf_tensor_sender_acked(tx), len);
  assert_string_equal(got->policy_reply->text, text);
  xf_envelope_free(got);
  xf_tensor_sender_free(tx);
  xf_document_rx_free(rx);
  xf_free(bytes);
  xf_free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_message_larger_than_a_frame_arrives_whole_in_frames_that_fit),
      cmocka_unit_test(a_lost_chunk_is_sent_again_from_where_the_receiver_stands),
      cmocka_unit_test(streams_that_are_not_a_message_of_the_right_size_are_refused),
      cmocka_unit_test(a_corrupted_stream_fails_its_digest_and_is_dropped),
      cmocka_unit_test(a_new_stream_id_starts_over),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
