/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for messages larger than a frame (net/document.h): the
 * TensorBegin, TensorChunk and TensorEnd of DOCUMENT streams as the
 * coordinator takes a CLI request and the CLI takes an answer, and the
 * TensorAck a document's sender takes. The input's first byte sets the
 * receiver's limit (0: XF_DOCUMENT_MAX, else that many KiB) and the frame
 * maximum the sender cuts its chunks for (4 KiB and up); records of
 * tests/fuzz/fuzz_msgs.h follow.
 *
 * Checked: each step answers with an acknowledgement exactly where the
 * contract says (after TensorBegin, after a TensorEnd with bytes missing,
 * after the verified end), naming the stream; a message comes out only
 * from a verified stream, is never a stream or hello frame itself, and
 * packs again to an Envelope that decodes the same; every error is named.
 * The sender of a document (a PolicyReply larger than a frame) resumes
 * only at its chunk boundaries, sends from exactly there, and keeps every
 * frame within the frame maximum. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_msgs.h"
#include "net/document.h"
#include "net/frame.h"
#include "net/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const unsigned kinds[] = {XFED__ENVELOPE__BODY_TENSOR_BEGIN,
                                 XFED__ENVELOPE__BODY_TENSOR_CHUNK,
                                 XFED__ENVELOPE__BODY_TENSOR_END, XFED__ENVELOPE__BODY_TENSOR_ACK};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

/* The stream id of the document this side sends. */
#define FZ_DOC_OWN_STREAM 4

static void said(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK && (err->code != rc || !err->msg[0])) abort();
}

/* The message packs again into an Envelope that decodes to the same bytes. */
static void round_trip(const Xfed__Envelope *m) {
  uint8_t *once = NULL, *twice = NULL;
  size_t a = 0, b = 0;
  if (xf_document_pack(m, &once, &a, NULL) != XF_OK) abort();
  Xfed__Envelope *back = NULL;
  if (xf_envelope_unpack(once, a, &back, NULL) != XF_OK) abort();
  if (xf_document_pack(back, &twice, &b, NULL) != XF_OK) abort();
  if (a != b || memcmp(once, twice, a) != 0) abort();
  xf_envelope_free(back);
  xf_free(once);
  xf_free(twice);
}

static void take(xf_document_rx *d, const Xfed__Envelope *env) {
  xf_document_step step;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_document_rx_take(d, env, &step, &err);
  said(rc, &err);
  if (rc != XF_OK) {
    if (step.ack || step.message) abort();
    return;
  }
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
    if (!step.ack || step.message || step.tensor_ack.stream_id != env->tensor_begin->stream_id ||
        step.tensor_ack.next_offset > env->tensor_begin->total_bytes)
      abort();
    break;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
    if (step.ack || step.message) abort();
    break;
  case XFED__ENVELOPE__BODY_TENSOR_END:
    if (!step.ack || step.tensor_ack.stream_id != env->tensor_end->stream_id) abort();
    break;
  default: abort();
  }
  if (!step.message) return;
  if (!xf_document_frame(env) || xf_document_frame(step.message)) abort();
  switch (step.message->body_case) {
  case XFED__ENVELOPE__BODY_HELLO:
  case XFED__ENVELOPE__BODY_HELLO_ACK:
  case XFED__ENVELOPE__BODY_HEARTBEAT:
  case XFED__ENVELOPE__BODY_TENSOR_ACK: abort();
  default: break;
  }
  round_trip(step.message);
  xf_envelope_free(step.message);
}

/* A document of ours: a PolicyReply whose text outgrows the frame. */
typedef struct own_doc {
  const uint8_t *bytes;
  size_t len, chunk, max_frame;
  xf_tensor_sender *tx;
} own_doc;

/* The document's bytes are made once; the sender, per input. */
static void own_doc_make(own_doc *o, size_t max_frame) {
  static uint8_t *bytes;
  static size_t len;
  if (!bytes) {
    static char text[100000];
    for (size_t i = 0; i + 1 < sizeof(text); i++) text[i] = (char)('a' + i % 26);
    Xfed__PolicyReply r = XFED__POLICY_REPLY__INIT;
    r.version = 3;
    r.text = text;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_POLICY_REPLY;
    env.policy_reply = &r;
    if (xf_document_fits(&env, 4096 + 255 * 256)) abort(); /* too large for one frame */
    if (xf_document_pack(&env, &bytes, &len, NULL) != XF_OK) abort();
  }
  o->bytes = bytes;
  o->len = len;
  o->max_frame = max_frame;
  o->chunk = xf_document_chunk(max_frame);
  if (o->chunk == 0 || o->chunk > XF_TENSOR_CHUNK_MAX) abort();
  xf_tensor_desc desc = xf_document_desc(FZ_DOC_OWN_STREAM, o->len);
  if (xf_tensor_sender_new(&desc, o->bytes, o->len, o->chunk, &o->tx, NULL) != XF_OK) abort();
}

static void own_doc_ack(own_doc *o, const Xfed__TensorAck *a) {
  if (a->stream_id != FZ_DOC_OWN_STREAM) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_tensor_sender_resume(o->tx, a->next_offset, &err);
  said(rc, &err);
  bool fits =
      a->next_offset <= o->len && (a->next_offset % o->chunk == 0 || a->next_offset == o->len);
  if ((rc == XF_OK) != fits) abort();
  xf_tensor_msg msg;
  bool chunk_seen = false;
  for (int i = 0; rc == XF_OK && i < 3; i++) {
    if (xf_tensor_sender_next(o->tx, &msg) != XF_OK) break;
    if (xf_frame_size(&msg.env) > o->max_frame + XF_FRAME_HEADER) abort(); /* one frame each */
    if (msg.env.body_case != XFED__ENVELOPE__BODY_TENSOR_CHUNK || chunk_seen) continue;
    chunk_seen = true; /* the first chunk after the ack starts where it said */
    if (msg.body.chunk.offset != a->next_offset) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  fz_begin(2);
  uint64_t limit = data[0] ? (uint64_t)data[0] << 10 : 0;
  size_t max_frame = 4096 + (size_t)data[0] * 256; /* below the document's size */
  xf_document_rx *d = NULL;
  if (xf_document_rx_new(limit, &d, NULL) != XF_OK) abort();
  own_doc o = {0};
  own_doc_make(&o, max_frame);
  fz_input in = {data + 1, size - 1};
  fz_record rec;
  while (fz_next(&in, N_KINDS, &rec)) {
    Xfed__Envelope *env = fz_decode(kinds[rec.kind], rec.body, rec.len);
    if (!env) continue;
    if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_ACK) own_doc_ack(&o, env->tensor_ack);
    else take(d, env);
    xf_envelope_free(env);
  }
  xf_document_rx_free(d);
  xf_tensor_sender_free(o.tx);
  return 0;
}
