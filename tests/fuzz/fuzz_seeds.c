/* SPDX-License-Identifier: Apache-2.0 */
/* Writes the seed corpora of the message fuzz targets (tests/fuzz/README.md):
 * real encoded messages in the records of tests/fuzz/fuzz_msgs.h, made with
 * the same code the daemons send them with (tensor senders, secure-
 * aggregation clients and guards, the codec, sealing), and a few malformed
 * ones. Built with the tests, never run by them:
 *
 *   build/tests/fuzz_seeds tests/fuzz/corpus
 *
 * writes DIR/<target>/<seed> for every message target, replacing seeds of
 * the same name and leaving others (regressions kept by hand) alone. The
 * randomness is fuzz_msgs.h's, so the same build writes the same bytes. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "codec/codec.h"
#include "coordinator/sawire.h"
#include "crypto/seal.h"
#include "fuzz_msgs.h"
#include "fuzz_secagg.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "kernels/model.h"
#include "net/document.h"
#include "net/tensor.h"

static const char *out_dir;

static void fail(const char *what, const xf_errctx *err) {
  fprintf(stderr, "fuzz_seeds: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

static FILE *seed(const char *target, const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", out_dir, target);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) fail(path, NULL);
  snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
  FILE *f = fopen(path, "wb");
  if (!f) fail(path, NULL);
  return f;
}

static void done(FILE *f) {
  if (fclose(f) != 0) fail("write", NULL);
}

static void byte(FILE *f, uint8_t b) {
  if (fputc(b, f) == EOF) fail("write", NULL);
}

#define W(f, kind, peer, msg) fz_write((f), (kind), (peer), &(msg).base)

/* Every message of a tensor stream, as a sender makes them, as records of
 * kinds begin, chunk, end (the first chunk_records of them only). */
static void stream(FILE *f, const xf_tensor_desc *d, const void *bytes, size_t len, size_t chunk,
                   unsigned k_begin, unsigned k_chunk, unsigned k_end, size_t max_chunks) {
  xf_tensor_sender *tx = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tensor_sender_new(d, bytes, len, chunk, &tx, &err) != XF_OK) fail("tensor sender", &err);
  xf_tensor_msg m;
  size_t chunks = 0;
  while (xf_tensor_sender_next(tx, &m) == XF_OK) {
    switch (m.env.body_case) {
    case XFED__ENVELOPE__BODY_TENSOR_BEGIN: W(f, k_begin, 0, m.body.begin); break;
    case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
      if (chunks++ < max_chunks) W(f, k_chunk, 0, m.body.chunk);
      break;
    case XFED__ENVELOPE__BODY_TENSOR_END: W(f, k_end, 0, m.body.end); break;
    default: fail("tensor sender", NULL);
    }
  }
  xf_tensor_sender_free(tx);
}

/* ---- fuzz_hello ------------------------------------------------------------------------------ */

enum { H_HELLO, H_ACK, H_REFUSAL, H_ERROR, H_HEARTBEAT, H_APP };

static Xfed__Hello hello(uint32_t version, uint32_t min, uint32_t max_frame) {
  static char *caps[] = {"tensor-resume"};
  Xfed__Hello h = XFED__HELLO__INIT;
  h.protocol_version = version;
  h.min_protocol_version = min;
  h.role = "site";
  h.agent = "xfed/0.1.0";
  h.max_frame = max_frame;
  h.n_capabilities = 1;
  h.capabilities = caps;
  return h;
}

static void seeds_hello(void) {
  const char *t = "fuzz_hello";
  Xfed__HelloAck ack = XFED__HELLO_ACK__INIT;
  ack.protocol_version = 1;
  Xfed__Heartbeat hb = XFED__HEARTBEAT__INIT;
  hb.seq = 1;
  hb.unix_ms = 1700000000000ull;
  Xfed__JobQuery q = XFED__JOB_QUERY__INIT;
  q.job_id = "1";
  Xfed__Refusal ref = XFED__REFUSAL__INIT;
  ref.reason = XFED__REFUSAL__REASON__BUSY;
  ref.text = "too many sessions; retry later";
  Xfed__Error e = XFED__ERROR__INIT;
  e.code = XF_EDENIED;
  e.message = "not allowed";

  FILE *f = seed(t, "open-then-frames");
  byte(f, 0);
  Xfed__Hello h = hello(1, 1, 4u << 20);
  W(f, H_HELLO, 0, h);
  W(f, H_ACK, 0, ack);
  W(f, H_HEARTBEAT, 0, hb);
  W(f, H_APP, 0, q);
  W(f, H_ERROR, 0, e);
  done(f);

  f = seed(t, "ack-then-hello-small-frames");
  byte(f, 1);
  h = hello(1, 0, 0);
  W(f, H_ACK, 0, ack);
  W(f, H_HELLO, 0, h);
  done(f);

  f = seed(t, "hello-version-0");
  byte(f, 0);
  h = hello(0, 0, 0);
  W(f, H_HELLO, 0, h);
  done(f);

  f = seed(t, "hello-min-above-max");
  byte(f, 0);
  h = hello(2, 5, 0);
  W(f, H_HELLO, 0, h);
  done(f);

  f = seed(t, "hello-no-common-version");
  byte(f, 0);
  h = hello(9, 7, 0);
  W(f, H_HELLO, 0, h);
  done(f);

  /* A maximum above the largest frame anyone sends: taken as that. */
  f = seed(t, "hello-max-frame-above-limit");
  byte(f, 0);
  h = hello(1, 1, 0x20000000u);
  W(f, H_HELLO, 0, h);
  W(f, H_ACK, 0, ack);
  done(f);

  f = seed(t, "second-hello");
  byte(f, 0);
  h = hello(1, 1, 0);
  W(f, H_HELLO, 0, h);
  W(f, H_HELLO, 0, h);
  done(f);

  f = seed(t, "ack-wrong-version");
  byte(f, 0);
  h = hello(1, 1, 0);
  Xfed__HelloAck bad = XFED__HELLO_ACK__INIT;
  bad.protocol_version = 3;
  W(f, H_HELLO, 0, h);
  W(f, H_ACK, 0, bad);
  done(f);

  f = seed(t, "frame-before-hello");
  byte(f, 0);
  W(f, H_APP, 0, q);
  done(f);

  f = seed(t, "error-before-hello");
  byte(f, 0);
  W(f, H_ERROR, 0, e);
  done(f);

  f = seed(t, "refusal");
  byte(f, 0);
  W(f, H_REFUSAL, 0, ref);
  done(f);

  f = seed(t, "not-protobuf");
  byte(f, 0);
  fz_write_raw(f, H_HELLO, 0, "\x08\x80\x80", 3); /* a varint cut short */
  fz_write_raw(f, H_HELLO, 0, "\x00\x01", 2);     /* field number 0 */
  done(f);
}

/* ---- fuzz_tensor ------------------------------------------------------------------------------- */

enum { T_BEGIN, T_CHUNK, T_END, T_ACK };
enum { M_PLAIN, M_SEALED, M_ENCODED, M_ENCODED_SEALED, M_MASKED };
#define T_PARAMS 64

static xf_tensor_desc update_desc(uint64_t stream_id, bool bytes, uint64_t count) {
  return (xf_tensor_desc){.stream_id = stream_id,
                          .kind = XFED__TENSOR_BEGIN__KIND__UPDATE,
                          .dtype = bytes ? XFED__TENSOR_BEGIN__DTYPE__U8
                                         : XFED__TENSOR_BEGIN__DTYPE__F32,
                          .element_count = count,
                          .job_id = "7",
                          .round = 1,
                          .attempt = 1,
                          .weight = 100};
}

/* Seals len bytes to the round key fuzz_tensor draws first: *out sealed,
 * epk the ephemeral key. */
static void seal_for_round(const uint8_t *in, size_t len, uint8_t **out, size_t *out_len,
                           uint8_t epk[XF_SEAL_PUBLICKEYBYTES]) {
  fz_begin(1);
  uint8_t pk[XF_SEAL_PUBLICKEYBYTES], sk[XF_SEAL_SECRETKEYBYTES];
  if (xf_seal_keypair(pk, sk) != XF_OK) fail("seal keypair", NULL);
  char ctx[256];
  size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), "7", 1, 1, "s1");
  xf_seal_sender *s = NULL;
  if (xf_seal_sender_new(pk, (const uint8_t *)ctx, ctx_len, &s, epk) != XF_OK ||
      xf_seal_stream(s, in, len, XF_SEAL_STREAM_CHUNK, out, out_len) != XF_OK)
    fail("seal", NULL);
  xf_seal_sender_free(s);
}

static void tensor_update(const char *name, uint8_t mode, const uint8_t *bytes, size_t len,
                          bool as_bytes, uint64_t count, bool sealed) {
  FILE *f = seed("fuzz_tensor", name);
  byte(f, mode);
  xf_tensor_desc d = update_desc(11, as_bytes, count);
  uint8_t *sealed_bytes = NULL;
  size_t sealed_len = 0;
  uint8_t epk[XF_SEAL_PUBLICKEYBYTES];
  if (sealed) {
    seal_for_round(bytes, len, &sealed_bytes, &sealed_len, epk);
    d.sealed_by = epk;
    d.sealed_chunk = XF_SEAL_STREAM_CHUNK;
    stream(f, &d, sealed_bytes, sealed_len, XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES, T_BEGIN,
           T_CHUNK, T_END, SIZE_MAX);
  } else {
    stream(f, &d, bytes, len, 128, T_BEGIN, T_CHUNK, T_END, SIZE_MAX);
  }
  xf_free(sealed_bytes);
  done(f);
}

static void seeds_tensor(void) {
  float x[T_PARAMS];
  for (int i = 0; i < T_PARAMS; i++) x[i] = (float)(i % 7) * 0.01f - 0.03f;
  tensor_update("float32", M_PLAIN, (const uint8_t *)x, sizeof(x), false, T_PARAMS, false);
  tensor_update("float32-sealed", M_SEALED, (const uint8_t *)x, sizeof(x), false, T_PARAMS, true);
  uint8_t *enc = NULL;
  size_t enc_len = 0;
  xf_codec_uplink q8 = {.quant_bits = 8};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_codec_encode(&q8, x, T_PARAMS, NULL, 5, &enc, &enc_len, &err) != XF_OK)
    fail("encode", &err);
  tensor_update("q8", M_ENCODED, enc, enc_len, true, enc_len, false);
  tensor_update("q8-sealed", M_ENCODED_SEALED, enc, enc_len, true, enc_len, true);
  xf_free(enc);
  uint32_t words[T_PARAMS];
  for (int i = 0; i < T_PARAMS; i++) words[i] = (uint32_t)(i * 997) & 0xffffu;
  uint8_t packed[T_PARAMS * 4];
  size_t packed_len = xf_codec_packed_bytes(T_PARAMS, 16);
  xf_codec_pack_bits(words, T_PARAMS, 16, packed);
  tensor_update("masked", M_MASKED, packed, packed_len, true, packed_len, false);

  /* A site's model, then the receiver's resume points for our own stream. */
  FILE *f = seed("fuzz_tensor", "model-and-acks");
  byte(f, M_PLAIN);
  uint8_t model[300];
  for (size_t i = 0; i < sizeof(model); i++) model[i] = (uint8_t)(i * 31);
  xf_tensor_desc md = {.stream_id = 8,
                       .kind = XFED__TENSOR_BEGIN__KIND__MODEL,
                       .dtype = XFED__TENSOR_BEGIN__DTYPE__U8,
                       .element_count = sizeof(model),
                       .job_id = "7",
                       .round = 1};
  stream(f, &md, model, sizeof(model), 100, T_BEGIN, T_CHUNK, T_END, SIZE_MAX);
  Xfed__TensorAck ack = XFED__TENSOR_ACK__INIT;
  ack.stream_id = 2;
  ack.next_offset = 192;
  W(f, T_ACK, 0, ack);
  ack.next_offset = 100; /* off a chunk boundary */
  W(f, T_ACK, 0, ack);
  ack.next_offset = 1000;
  W(f, T_ACK, 0, ack);
  done(f);

  /* Cut short: the end finds bytes missing, the sender resumes. */
  f = seed("fuzz_tensor", "float32-resumed");
  byte(f, M_PLAIN);
  xf_tensor_desc d = update_desc(11, false, T_PARAMS);
  stream(f, &d, (const uint8_t *)x, sizeof(x), 64, T_BEGIN, T_CHUNK, T_END, 2);
  stream(f, &d, (const uint8_t *)x, sizeof(x), 64, T_BEGIN, T_CHUNK, T_END, SIZE_MAX);
  done(f);

  /* Malformed: a weight of 0, a weight above the records, a wrong digest. */
  f = seed("fuzz_tensor", "bad-weights-and-digest");
  byte(f, M_PLAIN);
  d.weight = 0;
  stream(f, &d, (const uint8_t *)x, sizeof(x), 128, T_BEGIN, T_CHUNK, T_END, SIZE_MAX);
  d.weight = 1001;
  d.stream_id = 13;
  stream(f, &d, (const uint8_t *)x, sizeof(x), 128, T_BEGIN, T_CHUNK, T_END, SIZE_MAX);
  d.weight = 5;
  d.stream_id = 15;
  xf_tensor_sender *tx = NULL;
  xf_digest wrong;
  xf_digest_buf("wrong", 5, &wrong);
  if (xf_tensor_sender_new_hashed(&d, x, sizeof(x), 256, &wrong, &tx, NULL) != XF_OK)
    fail("sender", NULL);
  xf_tensor_msg m;
  while (xf_tensor_sender_next(tx, &m) == XF_OK) {
    if (m.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) W(f, T_BEGIN, 0, m.body.begin);
    if (m.env.body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK) W(f, T_CHUNK, 0, m.body.chunk);
    if (m.env.body_case == XFED__ENVELOPE__BODY_TENSOR_END) W(f, T_END, 0, m.body.end);
  }
  xf_tensor_sender_free(tx);
  done(f);
}

/* ---- fuzz_document ----------------------------------------------------------------------------- */

static void document(const char *name, uint8_t first, const Xfed__Envelope *env, size_t cut) {
  FILE *f = seed("fuzz_document", name);
  byte(f, first);
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_document_pack(env, &bytes, &len, &err) != XF_OK) fail("pack", &err);
  xf_tensor_desc d = xf_document_desc(21, len);
  size_t chunk = xf_document_chunk(4096 + (size_t)first * 256);
  stream(f, &d, bytes, len, chunk, T_BEGIN, T_CHUNK, T_END, cut);
  if (cut != SIZE_MAX) stream(f, &d, bytes, len, chunk, T_BEGIN, T_CHUNK, T_END, SIZE_MAX);
  xf_free(bytes);
  Xfed__TensorAck ack = XFED__TENSOR_ACK__INIT;
  ack.stream_id = 4;
  ack.next_offset = xf_document_chunk(4096 + (size_t)first * 256);
  W(f, T_ACK, 0, ack);
  done(f);
}

static void seeds_document(void) {
  static char doc[20000];
  size_t used = (size_t)snprintf(doc, sizeof(doc), "{\"regions\": [{\"name\": \"eu\"}], "
                                                   "\"sites\": [");
  for (int i = 0; i < 300 && used < sizeof(doc) - 64; i++)
    used += (size_t)snprintf(doc + used, sizeof(doc) - used, "%s{\"name\": \"s%d\", \"region\": "
                             "\"eu\"}", i ? ", " : "", i);
  snprintf(doc + used, sizeof(doc) - used, "]}");
  Xfed__PolicyRequest pr = XFED__POLICY_REQUEST__INIT;
  pr.verb = "push";
  pr.document_json = doc;
  pr.reason = "more sites";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_POLICY_REQUEST;
  env.policy_request = &pr;
  document("policy-push", 0, &env, SIZE_MAX);
  document("policy-push-resumed", 0, &env, 2);
  document("policy-push-over-limit", 4, &env, SIZE_MAX); /* a 4 KiB receiver */

  Xfed__AuditReply ar = XFED__AUDIT_REPLY__INIT;
  ar.rows_jsonl = doc;
  ar.more = true;
  env.body_case = XFED__ENVELOPE__BODY_AUDIT_REPLY;
  env.audit_reply = &ar;
  document("audit-reply", 20, &env, SIZE_MAX);

  Xfed__JobSubmit js = XFED__JOB_SUBMIT__INIT;
  js.spec_json = doc;
  js.origin = "job.json";
  env.body_case = XFED__ENVELOPE__BODY_JOB_SUBMIT;
  env.job_submit = &js;
  document("job-submit", 1, &env, SIZE_MAX);

  /* Not a request: refused at the end. */
  Xfed__Hello h = hello(1, 1, 0);
  env.body_case = XFED__ENVELOPE__BODY_HELLO;
  env.hello = &h;
  document("hello-inside", 0, &env, SIZE_MAX);
}

/* ---- fuzz_secagg_server -------------------------------------------------------------------------- */

enum { S_ADVERT, S_SHARES, S_CHECK_SIG, S_REFUSAL, S_REVEAL, S_MASKED, S_CLOSE, S_TICK };

typedef struct sa_run {
  xf_saphase *sa;
  xf_secagg_client *c[FZ_SA_N];
  xf_update_secagg setup[FZ_SA_N];
  uint64_t sites[FZ_SA_N], weights[FZ_SA_N];
  FILE *f;
  double now;
  bool masked_sent[FZ_SA_N];
} sa_run;

static unsigned index_of(const sa_run *r, uint64_t site) {
  for (unsigned i = 0; i < FZ_SA_N; i++)
    if (r->sites[i] == site) return i;
  fail("secure aggregation: unknown site", NULL);
  return 0;
}

static void sa_check(xf_err rc, const xf_errctx *err, const char *what) {
  if (rc != XF_OK) fail(what, err);
}

/* Answers the machine's last actions as honest sites do, except that the
 * sites in silent_mask send no masked input and site `refuser` (1..n; 0:
 * none) refuses the keys it is sent, writing each answer as a record and
 * feeding it back. Returns when nothing is left to answer. */
static void sa_answer(sa_run *r, unsigned silent_mask, unsigned refuser) {
  size_t n;
  const xf_saphase_action *acts = xf_saphase_actions(r->sa, &n);
  /* Copy: the next event replaces the list. */
  xf_saphase_action *pending = malloc((n ? n : 1) * sizeof(*pending));
  if (!pending) fail("memory", NULL);
  memcpy(pending, acts, n * sizeof(*pending));
  /* The pointers stay valid only until the next event: take what is needed
   * of each action before feeding anything. */
  typedef struct answer {
    unsigned kind, who;
    uint8_t *body;
    size_t len;
  } answer;
  answer *ans = calloc(n ? n : 1, sizeof(*ans));
  size_t n_ans = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  for (size_t i = 0; i < n; i++) {
    const xf_saphase_action *a = &pending[i];
    unsigned who = a->kind <= XF_SAPHASE_ACT_SEND_UNMASK ? index_of(r, a->site) : 0;
    xf_secagg_client *c = r->c[who];
    if (a->kind == XF_SAPHASE_ACT_SEND_KEYS && who + 1 == refuser) {
      /* It refuses the keys it was sent and leaves the round. */
      Xfed__SecAggRefusal m = XFED__SEC_AGG_REFUSAL__INIT;
      m.job_id = FZ_SA_JOB;
      m.round = m.attempt = 1;
      m.phase = "keys";
      m.peer = 1;
      m.peer_name = "s1";
      m.reason = "the key advert of site s1 does not verify";
      ans[n_ans].len = protobuf_c_message_get_packed_size(&m.base);
      ans[n_ans].body = malloc(ans[n_ans].len + 1);
      protobuf_c_message_pack(&m.base, ans[n_ans].body);
      ans[n_ans].kind = S_REFUSAL;
      ans[n_ans++].who = who;
    } else if (a->kind == XF_SAPHASE_ACT_SEND_KEYS) {
      xf_secagg_share_msg msgs[FZ_SA_N];
      size_t count = 0;
      sa_check(xf_secagg_client_share(c, a->adverts, msgs, FZ_SA_N, &count, &err), &err, "share");
      Xfed__SecAggShares m = XFED__SEC_AGG_SHARES__INIT;
      uint32_t to[FZ_SA_N];
      ProtobufCBinaryData cts[FZ_SA_N], sigs[FZ_SA_N];
      uint8_t sig[XF_SECAGG_SIG_BYTES];
      memset(sig, 0x5a, sizeof(sig));
      for (size_t k = 0; k < count; k++) {
        to[k] = msgs[k].to;
        cts[k] = (ProtobufCBinaryData){XF_SECAGG_SHARE_BYTES, msgs[k].ciphertext};
        sigs[k] = (ProtobufCBinaryData){sizeof(sig), sig};
      }
      m.job_id = FZ_SA_JOB;
      m.round = m.attempt = 1;
      m.n_to = m.n_ciphertexts = m.n_signatures = count;
      m.to = to;
      m.ciphertexts = cts;
      m.signatures = sigs;
      ans[n_ans].len = protobuf_c_message_get_packed_size(&m.base);
      ans[n_ans].body = malloc(ans[n_ans].len + 1);
      protobuf_c_message_pack(&m.base, ans[n_ans].body);
      ans[n_ans].kind = S_SHARES;
      ans[n_ans++].who = who;
    } else if (a->kind == XF_SAPHASE_ACT_SEND_ROUTED) {
      for (size_t k = 0; k < a->n_cts; k++)
        sa_check(xf_secagg_client_receive(c, a->from[k], a->cts[k], &err), &err, "receive");
      sa_check(xf_secagg_client_routed(c, a->u2, a->n_u2, &err), &err, "routed");
      if (silent_mask & (1u << who)) continue;
      uint32_t x[FZ_SA_PARAMS], y[FZ_SA_PARAMS];
      for (unsigned k = 0; k < FZ_SA_PARAMS; k++) x[k] = (who + 1) * 100 + k;
      sa_check(xf_secagg_client_mask(c, x, 0, FZ_SA_PARAMS, y, &err), &err, "mask");
      uint8_t packed[FZ_SA_PARAMS * 4];
      size_t plen = xf_codec_packed_bytes(FZ_SA_PARAMS, FZ_SA_BITS);
      xf_codec_pack_bits(y, FZ_SA_PARAMS, FZ_SA_BITS, packed);
      Xfed__TensorChunk m = XFED__TENSOR_CHUNK__INIT;
      m.stream_id = 1;
      m.data = (ProtobufCBinaryData){plen, packed};
      ans[n_ans].len = protobuf_c_message_get_packed_size(&m.base);
      ans[n_ans].body = malloc(ans[n_ans].len + 1);
      protobuf_c_message_pack(&m.base, ans[n_ans].body);
      ans[n_ans].kind = S_MASKED;
      ans[n_ans++].who = who;
    } else if (a->kind == XF_SAPHASE_ACT_SEND_CHECK) {
      Xfed__SecAggCheckSig m = XFED__SEC_AGG_CHECK_SIG__INIT;
      uint8_t sig[XF_SECAGG_SIG_BYTES];
      memset(sig, 0x33 + who, sizeof(sig));
      m.job_id = FZ_SA_JOB;
      m.round = m.attempt = 1;
      m.signature = (ProtobufCBinaryData){sizeof(sig), sig};
      ans[n_ans].len = protobuf_c_message_get_packed_size(&m.base);
      ans[n_ans].body = malloc(ans[n_ans].len + 1);
      protobuf_c_message_pack(&m.base, ans[n_ans].body);
      ans[n_ans].kind = S_CHECK_SIG;
      ans[n_ans++].who = who;
    } else if (a->kind == XF_SAPHASE_ACT_SEND_UNMASK) {
      size_t cap = xf_secagg_reveal_max_bytes(xf_saphase_params(r->sa)), len = 0;
      uint8_t *out = malloc(cap);
      sa_check(xf_secagg_client_unmask(c, a->u3, a->n_u3, out, cap, &len, &err), &err, "unmask");
      Xfed__SecAggReveal m = XFED__SEC_AGG_REVEAL__INIT;
      m.job_id = FZ_SA_JOB;
      m.round = m.attempt = 1;
      m.reveal = (ProtobufCBinaryData){len, out};
      ans[n_ans].len = protobuf_c_message_get_packed_size(&m.base);
      ans[n_ans].body = malloc(ans[n_ans].len + 1);
      protobuf_c_message_pack(&m.base, ans[n_ans].body);
      ans[n_ans].kind = S_REVEAL;
      ans[n_ans++].who = who;
      free(out);
    }
  }
  free(pending);
  for (size_t i = 0; i < n_ans; i++) {
    answer *a = &ans[i];
    fz_write_raw(r->f, a->kind, a->who, a->body, a->len);
    Xfed__Envelope *env = fz_decode(a->kind == S_SHARES      ? XFED__ENVELOPE__BODY_SECAGG_SHARES
                                    : a->kind == S_MASKED    ? XFED__ENVELOPE__BODY_TENSOR_CHUNK
                                    : a->kind == S_CHECK_SIG ? XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG
                                    : a->kind == S_REFUSAL   ? XFED__ENVELOPE__BODY_SECAGG_REFUSAL
                                                             : XFED__ENVELOPE__BODY_SECAGG_REVEAL,
                                    a->body, a->len);
    uint64_t site = r->sites[a->who];
    r->now += 0.01;
    xf_err rc = XF_OK;
    if (a->kind == S_REFUSAL) {
      xf_saphase_gone(r->sa, site, r->now);
    } else if (a->kind == S_SHARES) {
      xf_saphase_shares_msg msg;
      if (xf_sawire_shares(env->secagg_shares, &msg, &err) != XF_OK) fail("shares", &err);
      rc = xf_saphase_shares(r->sa, site, &msg, r->now, &err);
      xf_sawire_shares_free(&msg);
    } else if (a->kind == S_MASKED) {
      uint32_t *words = xf_mallocarray(FZ_SA_PARAMS, sizeof(uint32_t));
      const ProtobufCBinaryData *b = &env->tensor_chunk->data;
      if (xf_codec_unpack_bits(b->data, b->len, FZ_SA_PARAMS, FZ_SA_BITS, words, &err) != XF_OK)
        fail("unpack", &err);
      rc = xf_saphase_masked(r->sa, site, &words, FZ_SA_PARAMS, r->now, &err);
      xf_free(words);
    } else if (a->kind == S_CHECK_SIG) {
      rc = xf_saphase_check_sig(r->sa, site, env->secagg_check_sig->signature.data,
                                env->secagg_check_sig->signature.len, r->now, &err);
    } else {
      rc = xf_saphase_reveal(r->sa, site, env->secagg_reveal->reveal.data,
                             env->secagg_reveal->reveal.len, r->now, &err);
    }
    xf_envelope_free(env);
    free(a->body);
    sa_check(rc, &err, "secure aggregation event");
    sa_answer(r, silent_mask, refuser);
  }
  free(ans);
}

/* One round; the sites in silent_mask send no masked input (the round
 * closes after the others did), and with refuse_after_keys the last site
 * refuses the keys and leaves. */
static void sa_round(const char *name, unsigned silent_mask, bool refuse_after_keys) {
  sa_run r;
  memset(&r, 0, sizeof(r));
  xf_saphase_config cfg = fz_sa_config(r.sites, r.weights);
  r.now = 100.0;
  xf_errctx err;
  xf_errctx_clear(&err);
  fz_begin(3);
  sa_check(xf_saphase_create(&cfg, r.now, &r.sa, &err), &err, "saphase");
  r.f = seed("fuzz_secagg_server", name);
  for (unsigned i = 0; i < FZ_SA_N; i++) {
    sa_check(xf_saphase_setup(r.sa, r.sites[i], &r.setup[i]) == XF_OK ? XF_OK : XF_EINVAL, &err,
             "setup");
    sa_check(xf_secagg_client_new(&r.setup[i].params, r.setup[i].index, &r.c[i], &err), &err,
             "client");
  }
  for (unsigned i = 0; i < FZ_SA_N; i++) {
    uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES], cert[FZ_SA_CERT_MAX];
    xf_secagg_client_advertise(r.c[i], advert);
    memset(sig, 0x11 * (i + 1), sizeof(sig));
    size_t cert_len = fz_sa_cert(fz_sa_names[i], cert);
    Xfed__SecAggAdvert m = XFED__SEC_AGG_ADVERT__INIT;
    m.job_id = FZ_SA_JOB;
    m.round = m.attempt = 1;
    m.advert = (ProtobufCBinaryData){sizeof(advert), advert};
    m.signature = (ProtobufCBinaryData){sizeof(sig), sig};
    m.certificate = (ProtobufCBinaryData){cert_len, cert};
    W(r.f, S_ADVERT, i, m);
    xf_saphase_keys keys = {advert, sizeof(advert), sig, sizeof(sig), cert, cert_len};
    r.now += 0.01;
    sa_check(xf_saphase_advert(r.sa, r.sites[i], &keys, r.now, &err), &err, "advert");
    if (i + 1 < FZ_SA_N) continue;
    sa_answer(&r, silent_mask, refuse_after_keys ? FZ_SA_N : 0);
  }
  Xfed__Heartbeat hb = XFED__HEARTBEAT__INIT;
  W(r.f, S_CLOSE, 0, hb);
  xf_saphase_close(r.sa, r.now);
  sa_answer(&r, silent_mask, 0);
  hb.seq = 40; /* past every phase's deadline */
  W(r.f, S_TICK, 0, hb);
  done(r.f);
  for (unsigned i = 0; i < FZ_SA_N; i++) xf_secagg_client_free(r.c[i]);
  xf_saphase_free(r.sa);
}

static void seeds_secagg_server(void) {
  sa_round("honest-round", 0, false);
  sa_round("one-site-drops", 1u << 2, false);
  sa_round("one-site-refuses-keys", 0, true);
  FILE *f = seed("fuzz_secagg_server", "malformed");
  Xfed__SecAggAdvert m = XFED__SEC_AGG_ADVERT__INIT;
  uint8_t shortbuf[10] = {0};
  m.advert = (ProtobufCBinaryData){sizeof(shortbuf), shortbuf};
  W(f, S_ADVERT, 0, m);
  W(f, S_ADVERT, 15, m); /* from outside the cohort */
  Xfed__SecAggShares sh = XFED__SEC_AGG_SHARES__INIT;
  uint32_t to[2] = {2, 2};
  sh.n_to = 2;
  sh.to = to;
  W(f, S_SHARES, 0, sh);
  Xfed__SecAggReveal rv = XFED__SEC_AGG_REVEAL__INIT;
  rv.reveal = (ProtobufCBinaryData){sizeof(shortbuf), shortbuf};
  W(f, S_REVEAL, 1, rv);
  done(f);
}

/* ---- fuzz_site_task ------------------------------------------------------------------------------ */

enum { P_OFFER, P_GO, P_CANCEL, P_KEYS, P_ROUTED, P_CHECK, P_UNMASK };

static size_t site_n_params(void) {
  xf_jobspec spec;
  xf_model_spec ms;
  xf_model *m = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_string(FZ_SITE_SPEC, strlen(FZ_SITE_SPEC), "spec", &spec, &err) != XF_OK ||
      xf_jobspec_model_spec(&spec, FZ_SITE_H, FZ_SITE_W, FZ_SITE_C, FZ_SITE_CLASSES, &ms, &err) !=
          XF_OK ||
      xf_model_create(&ms, &m, &err) != XF_OK)
    fail("site model", &err);
  size_t n = xf_model_num_params(m);
  xf_model_free(m);
  return n;
}

typedef enum { SITE_HONEST, SITE_SETUP_IN_OFFER, SITE_OTHER_U3, SITE_FEW_SIGNATURES,
               SITE_BAD_CERT, SITE_CANCEL } site_case;

static void site_flow(const char *name, site_case how) {
  FILE *f = seed("fuzz_site_task", name);
  size_t n_params = site_n_params();
  /* The aggregator's setups for the cohort. */
  uint64_t sites[FZ_SA_N], weights[FZ_SA_N];
  xf_saphase_config cfg = fz_sa_config(sites, weights);
  cfg.n_params = n_params;
  xf_saphase *sa = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  sa_check(xf_saphase_create(&cfg, 0, &sa, &err), &err, "saphase");
  xf_update_secagg setup[FZ_SA_N];
  for (unsigned i = 0; i < FZ_SA_N; i++)
    if (xf_saphase_setup(sa, sites[i], &setup[i]) != XF_OK) fail("setup", NULL);
  xf_saphase_free(sa);
  Xfed__SecAggSetup su = XFED__SEC_AGG_SETUP__INIT;
  su.n = setup[0].params.n;
  su.index = setup[0].index;
  su.threshold = setup[0].params.threshold;
  su.bits = setup[0].params.bits;
  su.degree = setup[0].params.degree;
  su.graph_seed = (ProtobufCBinaryData){32, setup[0].params.graph_seed};
  su.step = setup[0].fixed.step;
  su.bound = setup[0].fixed.bound;
  su.scale = setup[0].scale;
  su.n_cohort = FZ_SA_N;
  su.cohort = (char **)fz_sa_names;

  uint8_t digest[32] = {1};
  Xfed__TaskOffer o = XFED__TASK_OFFER__INIT;
  o.job_id = FZ_SA_JOB;
  o.round = 1;
  o.attempt = 1;
  o.deadline_unix_ms = 4000000000000ull;
  o.model_digest = (ProtobufCBinaryData){32, digest};
  o.params_json = FZ_SITE_SPEC;
  o.model_stream_id = 8;
  o.hold = how != SITE_SETUP_IN_OFFER;
  if (how == SITE_SETUP_IN_OFFER) o.secagg = &su;
  Xfed__Residency res = XFED__RESIDENCY__INIT;
  res.policy_version = 3;
  res.coordinator_region = "us";
  res.aggregator_region = "eu";
  res.path = "regional";
  res.rule = "eu-regional";
  res.min_cohort = 2;
  res.require_secagg = true;
  o.residency = &res;
  W(f, P_OFFER, 0, o);
  if (how != SITE_SETUP_IN_OFFER) {
    Xfed__TaskGo g = XFED__TASK_GO__INIT;
    g.job_id = FZ_SA_JOB;
    g.round = 1;
    g.attempt = 1;
    g.secagg = &su;
    W(f, P_GO, 0, g);
  }
  if (how == SITE_CANCEL) {
    Xfed__TaskCancel c = XFED__TASK_CANCEL__INIT;
    c.job_id = FZ_SA_JOB;
    c.round = 1;
    c.attempt = 1;
    c.reason = "the round closed";
    W(f, P_CANCEL, 0, c);
    done(f);
    return;
  }

  /* The cohort's guards: s1's draws the keys fuzz_site_task's guard draws
   * (the first randomness after its input starts). */
  fz_begin(4);
  xf_secagg_guard *g[FZ_SA_N];
  xf_secagg_identity ids[FZ_SA_N];
  for (unsigned i = 0; i < FZ_SA_N; i++) {
    xf_secagg_session s = {.job = FZ_SA_JOB, .round = 1, .attempt = 1,
                           .params = setup[i].params, .cohort = fz_sa_names};
    ids[i] = fz_sa_identity(fz_sa_names[i]);
    sa_check(xf_secagg_guard_new(&s, setup[i].index, &ids[i], &g[i], &err), &err, "guard");
  }
  uint8_t adverts[FZ_SA_N * XF_SECAGG_ADVERT_BYTES], sigs[FZ_SA_N][XF_SECAGG_SIG_BYTES];
  uint8_t certs[FZ_SA_N][FZ_SA_CERT_MAX];
  size_t cert_lens[FZ_SA_N];
  for (unsigned i = 0; i < FZ_SA_N; i++) {
    sa_check(xf_secagg_guard_advertise(g[i], adverts + i * XF_SECAGG_ADVERT_BYTES, sigs[i], &err),
             &err, "advertise");
    cert_lens[i] = fz_sa_cert(fz_sa_names[i], certs[i]);
  }
  if (how == SITE_BAD_CERT) cert_lens[1] = fz_sa_cert("s3", certs[1]); /* s3's for s2 */
  Xfed__SecAggKeys k = XFED__SEC_AGG_KEYS__INIT;
  ProtobufCBinaryData ksigs[FZ_SA_N], kcerts[FZ_SA_N];
  for (unsigned i = 0; i < FZ_SA_N; i++) {
    ksigs[i] = (ProtobufCBinaryData){XF_SECAGG_SIG_BYTES, sigs[i]};
    kcerts[i] = (ProtobufCBinaryData){cert_lens[i], certs[i]};
  }
  k.job_id = FZ_SA_JOB;
  k.round = k.attempt = 1;
  k.adverts = (ProtobufCBinaryData){sizeof(adverts), adverts};
  k.n_signatures = k.n_certificates = FZ_SA_N;
  k.signatures = ksigs;
  k.certificates = kcerts;
  W(f, P_KEYS, 0, k);
  if (how == SITE_BAD_CERT) {
    done(f);
    for (unsigned i = 0; i < FZ_SA_N; i++) xf_secagg_guard_free(g[i]);
    return;
  }
  /* Everyone shares; the shares for s1 are routed to it. */
  xf_secagg_member_keys mk[FZ_SA_N];
  for (unsigned i = 0; i < FZ_SA_N; i++)
    mk[i] = (xf_secagg_member_keys){adverts + i * XF_SECAGG_ADVERT_BYTES, sigs[i], certs[i],
                                    cert_lens[i]};
  xf_secagg_signed_share out[FZ_SA_N][FZ_SA_N];
  size_t count[FZ_SA_N];
  for (unsigned i = 0; i < FZ_SA_N; i++)
    sa_check(xf_secagg_guard_share(g[i], mk, out[i], FZ_SA_N, &count[i], &err), &err, "share");
  uint32_t u2[FZ_SA_N];
  for (unsigned i = 0; i < FZ_SA_N; i++) u2[i] = i + 1;
  for (unsigned to = 1; to <= FZ_SA_N; to++) {
    uint32_t from[FZ_SA_N];
    ProtobufCBinaryData cts[FZ_SA_N], ssigs[FZ_SA_N];
    size_t n = 0;
    for (unsigned i = 0; i < FZ_SA_N; i++)
      for (size_t j = 0; j < count[i]; j++)
        if (out[i][j].to == to) {
          if (to != 1)
            sa_check(xf_secagg_guard_receive(g[to - 1], i + 1, out[i][j].ciphertext,
                                             out[i][j].sig, &err),
                     &err, "receive");
          from[n] = i + 1;
          cts[n] = (ProtobufCBinaryData){XF_SECAGG_SHARE_BYTES, out[i][j].ciphertext};
          ssigs[n++] = (ProtobufCBinaryData){XF_SECAGG_SIG_BYTES, out[i][j].sig};
        }
    if (to == 1) {
      Xfed__SecAggRouted rt = XFED__SEC_AGG_ROUTED__INIT;
      rt.job_id = FZ_SA_JOB;
      rt.round = rt.attempt = 1;
      rt.n_u2 = FZ_SA_N;
      rt.u2 = u2;
      rt.n_from = rt.n_ciphertexts = rt.n_signatures = n;
      rt.from = from;
      rt.ciphertexts = cts;
      rt.signatures = ssigs;
      W(f, P_ROUTED, 0, rt);
    } else {
      sa_check(xf_secagg_guard_routed(g[to - 1], u2, FZ_SA_N, &err), &err, "routed");
    }
  }
  /* The consistency round over every site, then the reveal. */
  uint32_t u3[FZ_SA_N] = {1, 2, 3};
  size_t n_u3 = FZ_SA_N;
  Xfed__SecAggCheck ck = XFED__SEC_AGG_CHECK__INIT;
  ck.job_id = FZ_SA_JOB;
  ck.round = ck.attempt = 1;
  ck.n_u3 = n_u3;
  ck.u3 = u3;
  W(f, P_CHECK, 0, ck);
  if (how == SITE_OTHER_U3) {
    uint32_t other[2] = {1, 2};
    ck.n_u3 = 2;
    ck.u3 = other;
    W(f, P_CHECK, 0, ck); /* another survivor set: refused */
  }
  uint8_t usigs[FZ_SA_N][XF_SECAGG_SIG_BYTES];
  uint32_t signers[FZ_SA_N];
  ProtobufCBinaryData bsigs[FZ_SA_N];
  /* s2 and s3 sign the set: t = 2 signatures by members of it. */
  for (unsigned i = 1; i < FZ_SA_N; i++)
    sa_check(xf_secagg_guard_sign_survivors(g[i], u3, n_u3, usigs[i], &err), &err, "sign");
  size_t n_signers = 0;
  for (unsigned i = 1; i < FZ_SA_N; i++) {
    if (how == SITE_FEW_SIGNATURES && i == 2) usigs[i][0] ^= 1; /* a signature that fails */
    signers[n_signers] = i + 1;
    bsigs[n_signers++] = (ProtobufCBinaryData){XF_SECAGG_SIG_BYTES, usigs[i]};
  }
  Xfed__SecAggUnmask um = XFED__SEC_AGG_UNMASK__INIT;
  um.job_id = FZ_SA_JOB;
  um.round = um.attempt = 1;
  um.n_u3 = n_u3;
  um.u3 = u3;
  um.n_signers = um.n_signatures = n_signers;
  um.signers = signers;
  um.signatures = bsigs;
  W(f, P_UNMASK, 0, um);
  done(f);
  for (unsigned i = 0; i < FZ_SA_N; i++) xf_secagg_guard_free(g[i]);
}

static void seeds_site_task(void) {
  site_flow("honest-round", SITE_HONEST);
  site_flow("setup-in-offer", SITE_SETUP_IN_OFFER);
  site_flow("another-survivor-set", SITE_OTHER_U3);
  site_flow("a-signature-fails", SITE_FEW_SIGNATURES);
  site_flow("certificate-of-another-site", SITE_BAD_CERT);
  site_flow("cancelled", SITE_CANCEL);
  FILE *f = seed("fuzz_site_task", "offer-malformed");
  Xfed__TaskOffer o = XFED__TASK_OFFER__INIT;
  o.job_id = "";
  W(f, P_OFFER, 0, o);
  uint8_t digest[32] = {0};
  o.job_id = "8";
  o.model_digest = (ProtobufCBinaryData){32, digest};
  o.params_json = "{\"name\": 1}";
  W(f, P_OFFER, 0, o);
  o.params_json = FZ_SITE_SPEC; /* secure aggregation without a setup or a hold */
  W(f, P_OFFER, 0, o);
  done(f);
}

/* ---- fuzz_round ---------------------------------------------------------------------------------- */

enum { R_ANNOUNCE, R_ACCEPT, R_REFUSAL, R_METRICS, R_BEGIN, R_END, R_TICK };

static void announce(FILE *f, unsigned who, const char *name, bool regional) {
  static char *tags[] = {"x"};
  Xfed__SiteAnnounce__Dataset d = XFED__SITE_ANNOUNCE__DATASET__INIT;
  d.name = "d";
  d.n_tags = 1;
  d.tags = tags;
  d.classification = "internal";
  d.train_records = 500;
  d.test_records = 100;
  d.classes = 2;
  d.height = d.width = 2;
  d.channels = 1;
  Xfed__SiteAnnounce__Dataset *ds[1] = {&d};
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = (char *)name;
  a.region = "eu";
  a.backend = "cpu";
  a.threads = 2;
  a.n_datasets = 1;
  a.datasets = ds;
  Xfed__SiteAnnounce b1 = a, b2 = a;
  b1.site = "r1-a";
  b2.site = "r1-b";
  Xfed__SiteAnnounce *behind[2] = {&b1, &b2};
  static char *names[] = {"r1-a", "r1-b"};
  if (regional) {
    a.n_behind = 2;
    a.behind = behind;
    a.n_sites = 2;
    a.sites = names;
  }
  W(f, R_ANNOUNCE, who, a);
}

static void round_messages(FILE *f, uint32_t round, bool bad_metrics) {
  static char *behind[] = {"r1-a", "r1-b"};
  for (unsigned who = 0; who < 5; who++) {
    Xfed__TaskAccept ac = XFED__TASK_ACCEPT__INIT;
    ac.job_id = "1";
    ac.round = round;
    ac.attempt = 1;
    if (who == 4) {
      ac.n_sites = 2;
      ac.sites = behind;
    }
    W(f, R_ACCEPT, who, ac);
  }
  for (unsigned who = 0; who < 5; who++) {
    uint8_t digest[32] = {9};
    Xfed__TensorBegin b = XFED__TENSOR_BEGIN__INIT;
    b.stream_id = (uint64_t)round << 16 | 1u << 1 | 1u;
    b.kind = who == 4 ? XFED__TENSOR_BEGIN__KIND__AGGREGATE : XFED__TENSOR_BEGIN__KIND__UPDATE;
    b.total_bytes = 40;
    b.chunk_bytes = 40;
    b.dtype = XFED__TENSOR_BEGIN__DTYPE__F32;
    b.element_count = 10;
    b.digest = (ProtobufCBinaryData){32, digest};
    b.job_id = "1";
    b.round = round;
    b.attempt = 1;
    b.weight = who == 4 ? 1000 : 500;
    if (who == 4) {
      b.n_sites = 2;
      b.sites = behind;
      b.contributors = 2;
    }
    W(f, R_BEGIN, who, b);
    Xfed__TensorEnd e = XFED__TENSOR_END__INIT;
    e.stream_id = b.stream_id;
    W(f, R_END, who, e);
    Xfed__Metrics m = XFED__METRICS__INIT;
    char name[8];
    snprintf(name, sizeof(name), "s%u", who + 1);
    m.job_id = "1";
    m.round = round;
    m.attempt = 1;
    m.site = who == 4 ? "r1-a" : name;
    m.has_train = true;
    m.has_test = round > 1;
    m.train_loss = 0.6;
    m.test_loss = 0.5;
    m.test_accuracy = bad_metrics && who == 1 ? 7.5 : 0.75;
    m.samples = bad_metrics && who == 2 ? 60001 : 400;
    m.model_round = round - 1;
    m.region = "eu";
    if (bad_metrics && who == 0) m.train_loss = NAN;
    W(f, R_METRICS, who, m);
  }
}

static void seeds_round(void) {
  FILE *f = seed("fuzz_round", "two-rounds-and-evaluation");
  for (unsigned who = 0; who < 4; who++) {
    char name[8];
    snprintf(name, sizeof(name), "s%u", who + 1);
    announce(f, who, name, false);
  }
  announce(f, 4, "r1", true);
  round_messages(f, 1, false);
  round_messages(f, 2, false);
  for (unsigned who = 0; who < 5; who++) {
    Xfed__Metrics m = XFED__METRICS__INIT;
    char name[8];
    snprintf(name, sizeof(name), "s%u", who + 1);
    m.job_id = "1";
    m.round = 3;
    m.site = who == 4 ? "r1" : name;
    m.has_test = who != 4;
    m.test_loss = 0.4;
    m.test_accuracy = 0.8;
    m.samples = 100;
    m.model_round = 2;
    W(f, R_METRICS, who, m);
  }
  done(f);

  f = seed("fuzz_round", "refusals-and-bad-reports");
  for (unsigned who = 0; who < 4; who++) {
    char name[8];
    snprintf(name, sizeof(name), "s%u", who + 1);
    announce(f, who, name, false);
  }
  announce(f, 4, "r1", true);
  announce(f, 1, "s9", false); /* not who its certificate says */
  Xfed__TaskRefusal r = XFED__TASK_REFUSAL__INIT;
  r.job_id = "1";
  r.round = 1;
  r.attempt = 1;
  r.reason = XFED__TASK_REFUSAL__REASON__BUSY;
  r.details = "training job 9";
  W(f, R_REFUSAL, 3, r);
  r.reason = XFED__TASK_REFUSAL__REASON__POLICY_DENIED;
  r.site = "r1-b";
  r.details = "local rules";
  W(f, R_REFUSAL, 4, r);
  round_messages(f, 1, true);
  Xfed__Heartbeat hb = XFED__HEARTBEAT__INIT;
  hb.seq = 63;
  for (int i = 0; i < 4; i++) W(f, R_TICK, 0, hb); /* deadlines pass */
  done(f);
}

/* ---- fuzz_cli_request ---------------------------------------------------------------------------- */

enum { C_SUBMIT, C_QUERY, C_CANCEL, C_METRICS, C_MODEL, C_POLICY, C_AUDIT, C_JOB_LIST };
enum { U_RESEARCHER, U_COMPLIANCE, U_ADMIN };

static void seeds_cli(void) {
  FILE *f = seed("fuzz_cli_request", "jobs");
  Xfed__JobSubmit js = XFED__JOB_SUBMIT__INIT;
  js.spec_json = "{\"name\": \"b\", \"model\": {\"arch\": \"mlp\", \"hidden\": [16]}, \"data\": "
                 "{\"dataset\": \"mnist\"}, \"rounds\": 3, \"min_sites\": 2, "
                 "\"secure_aggregation\": {\"enabled\": true}, \"privacy\": {\"unit\": \"site\", "
                 "\"mode\": \"distributed\", \"target_epsilon\": 3, \"clip\": 1}}";
  js.origin = "job.json";
  W(f, C_SUBMIT, U_RESEARCHER, js);
  js.spec_json = "{\"name\": \"c\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": "
                 "\"mnist\"}, \"rounds\": 1}";
  W(f, C_SUBMIT, U_ADMIN, js);
  W(f, C_SUBMIT, U_COMPLIANCE, js); /* may not submit */
  js.spec_json = "{\"name\": \"d\", \"rounds\": 0}";
  W(f, C_SUBMIT, U_RESEARCHER, js);
  Xfed__JobQuery q = XFED__JOB_QUERY__INIT;
  W(f, C_QUERY, U_RESEARCHER, q);
  q.limit = 1;
  q.after_id = 1;
  W(f, C_QUERY, U_RESEARCHER, q);
  Xfed__JobQuery q1 = XFED__JOB_QUERY__INIT;
  q1.job_id = "2";
  W(f, C_QUERY, U_RESEARCHER, q1);
  q1.job_id = "18446744073709551617"; /* beyond 2^63: refused, never clamped */
  W(f, C_QUERY, U_RESEARCHER, q1);
  Xfed__JobCancel jc = XFED__JOB_CANCEL__INIT;
  jc.job_id = "3";
  W(f, C_CANCEL, U_RESEARCHER, jc);
  jc.job_id = "1"; /* done already */
  W(f, C_CANCEL, U_ADMIN, jc);
  Xfed__MetricsQuery mq = XFED__METRICS_QUERY__INIT;
  mq.job_id = "1";
  W(f, C_METRICS, U_RESEARCHER, mq);
  mq.limit = 1;
  mq.after_round = 1;
  mq.after_site = "eu-1";
  W(f, C_METRICS, U_RESEARCHER, mq);
  Xfed__ModelQuery mo = XFED__MODEL_QUERY__INIT;
  mo.job_id = "1";
  mo.round = 1;
  W(f, C_MODEL, U_RESEARCHER, mo);
  mo.round = 5;
  W(f, C_MODEL, U_RESEARCHER, mo);
  Xfed__JobInfo ji = XFED__JOB_INFO__INIT;
  ji.job_id = "1";
  ji.name = "a";
  ji.state = "done";
  ji.test_accuracy = 0.8;
  ji.test_loss = NAN;
  ji.spec_json = "{\"name\": \"a\"}";
  ji.partial_round = 2;
  Xfed__JobInfo *jis[1] = {&ji};
  Xfed__JobList jl = XFED__JOB_LIST__INIT;
  jl.n_jobs = 1;
  jl.jobs = jis;
  W(f, C_JOB_LIST, U_RESEARCHER, jl);
  done(f);

  f = seed("fuzz_cli_request", "policy-and-audit");
  Xfed__PolicyRequest p = XFED__POLICY_REQUEST__INIT;
  p.verb = "export";
  W(f, C_POLICY, U_RESEARCHER, p);
  p.verb = "log";
  W(f, C_POLICY, U_RESEARCHER, p);
  p.verb = "check";
  p.job_json = "{\"name\": \"e\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": "
               "\"mnist\", \"tags\": [\"health\"]}, \"rounds\": 2, \"secure_aggregation\": "
               "{\"enabled\": true}}";
  W(f, C_POLICY, U_RESEARCHER, p);
  Xfed__PolicyRequest e = XFED__POLICY_REQUEST__INIT;
  e.verb = "edit";
  e.edit = "region_add";
  e.edit_a = "ap";
  e.edit_b = "APPI";
  e.reason = "a new region";
  W(f, C_POLICY, U_COMPLIANCE, e);
  e.edit = "site_add";
  e.edit_a = "ap-1";
  e.edit_b = "ap";
  W(f, C_POLICY, U_ADMIN, e);
  e.edit = "dataset_add";
  e.edit_a = "mnist";
  e.edit_b = "ap-1";
  e.edit_c = "internal";
  W(f, C_POLICY, U_COMPLIANCE, e);
  e.edit = "rule_rm";
  e.edit_a = "eu-regional";
  e.edit_b = NULL;
  e.edit_c = NULL;
  W(f, C_POLICY, U_RESEARCHER, e); /* may not change */
  W(f, C_POLICY, U_COMPLIANCE, e);
  Xfed__PolicyRequest d = XFED__POLICY_REQUEST__INIT;
  d.verb = "diff";
  d.version = 1;
  d.version_to = 3;
  W(f, C_POLICY, U_COMPLIANCE, d);
  Xfed__PolicyRequest push = XFED__POLICY_REQUEST__INIT;
  push.verb = "push";
  push.document_json = "{\"regions\": [{\"name\": \"us\"}], \"sites\": [{\"name\": \"us-1\", "
                       "\"region\": \"us\"}]}";
  push.reason = "start over";
  push.has_base = true;
  push.base_version = 1; /* stale by now */
  W(f, C_POLICY, U_COMPLIANCE, push);
  push.has_base = false;
  W(f, C_POLICY, U_COMPLIANCE, push);
  Xfed__AuditQuery a = XFED__AUDIT_QUERY__INIT;
  a.verb = "list";
  a.limit = 2;
  a.after_seq = 1;
  W(f, C_AUDIT, U_COMPLIANCE, a);
  a.verb = "export";
  a.limit = 0;
  a.after_seq = 0;
  a.since = 1700000001.5;
  W(f, C_AUDIT, U_ADMIN, a);
  a.verb = "verify";
  W(f, C_AUDIT, U_COMPLIANCE, a);
  a.verb = "list";
  W(f, C_AUDIT, U_RESEARCHER, a); /* may not read it */
  done(f);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seeds DIR (the corpus directory: tests/fuzz/corpus)\n");
    return 2;
  }
  out_dir = argv[1];
  fz_begin(0);
  seeds_hello();
  seeds_tensor();
  seeds_document();
  seeds_secagg_server();
  seeds_site_task();
  seeds_round();
  seeds_cli();
  return 0;
}
