/* SPDX-License-Identifier: Apache-2.0 */
/* Frame encoder and incremental decoder; protobuf-c allocates through the
 * xfed allocation wrapper so tests can fail its allocations too. */
#include "net/frame.h"

#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cursor.h"

/* protobuf-c's unpack returns NULL both for malformed input and for a failed
 * allocation; the allocator records the latter so the two are told apart. */
typedef struct xf__pb_alloc {
  ProtobufCAllocator base;
  bool failed;
} xf__pb_alloc;

static void *xf__pb_malloc(void *data, size_t size) {
  void *p = xf_malloc(size);
  if (!p && data) ((xf__pb_alloc *)data)->failed = true;
  return p;
}

static void xf__pb_free(void *data, void *ptr) {
  (void)data;
  xf_free(ptr);
}

/* Used to free unpacked messages; never written. */
static ProtobufCAllocator xf__pb_release = {xf__pb_malloc, xf__pb_free, NULL};

struct xf_frame_decoder {
  size_t max;            /* largest payload accepted at the next prefix */
  uint8_t head[XF_FRAME_HEADER];
  size_t head_len;       /* prefix bytes seen of the current frame */
  bool in_payload;       /* the prefix is complete and accepted */
  size_t want;           /* payload length of the current frame */
  size_t have;           /* payload bytes buffered */
  uint8_t *payload;      /* want bytes once the payload spans two feeds */
  unsigned long long consumed; /* stream bytes consumed, for messages */
  unsigned long long start;    /* stream byte where the current frame began */
  unsigned long frames;  /* frames completed, for messages */
  xf_err spent;          /* XF_OK, or the error that ended the decoder */
  xf_frame_budget *budget; /* borrowed, or NULL */
  size_t charged;        /* bytes of the budget this frame holds */
  bool waiting;          /* the payload waits for room in the budget */
};

bool xf_frame_budget_take(xf_frame_budget *b, size_t n) {
  if (n > XF_FRAME_BUDGET_SMALL && b->limit && b->used &&
      (b->used > b->limit || n > b->limit - b->used))
    return false;
  b->used += n;
  if (b->used > b->peak) b->peak = b->used;
  return true;
}

void xf_frame_budget_give(xf_frame_budget *b, size_t n) {
  b->used -= n < b->used ? n : b->used;
  if (b->on_release) b->on_release(b);
}

static xf_err xf__check_max(size_t *max, xf_errctx *ctx) {
  if (*max == 0) *max = XF_FRAME_MAX_DEFAULT;
  XF_ENSURE(*max <= XF_FRAME_MAX_LIMIT, ctx, XF_EINVAL,
            "maximum frame of %zu bytes is above the limit of %u bytes", *max,
            XF_FRAME_MAX_LIMIT);
  return XF_OK;
}

xf_err xf_frame_decoder_new(size_t max_frame, xf_frame_decoder **out, xf_errctx *ctx) {
  *out = NULL;
  XF_GUARD(xf__check_max(&max_frame, ctx));
  xf_frame_decoder *d = xf_calloc(1, sizeof(*d));
  XF_ENSURE(d, ctx, XF_ENOMEM, "cannot allocate a frame decoder");
  d->max = max_frame;
  *out = d;
  return XF_OK;
}

/* Frees the payload buffer and gives its reservation back. */
static void xf__release(xf_frame_decoder *d) {
  xf_free(d->payload);
  d->payload = NULL;
  d->waiting = false;
  if (d->charged) {
    size_t n = d->charged;
    d->charged = 0;
    xf_frame_budget_give(d->budget, n);
  }
}

void xf_frame_decoder_free(xf_frame_decoder *d) {
  if (!d) return;
  xf__release(d);
  xf_free(d);
}

void xf_frame_decoder_set_budget(xf_frame_decoder *d, xf_frame_budget *b) { d->budget = b; }

bool xf_frame_decoder_waiting(const xf_frame_decoder *d) { return d->waiting; }

xf_err xf_frame_decoder_set_max(xf_frame_decoder *d, size_t max_frame, xf_errctx *ctx) {
  XF_GUARD(xf__check_max(&max_frame, ctx));
  d->max = max_frame;
  return XF_OK;
}

size_t xf_frame_decoder_buffered(const xf_frame_decoder *d) {
  return d->head_len + d->have;
}

void xf_envelope_free(Xfed__Envelope *env) {
  if (env) xfed__envelope__free_unpacked(env, &xf__pb_release);
}

/* protobuf-c refuses a field tag of 0 written in one byte but keeps one
 * written as an overlong varint as an unknown field, which it would then pack
 * as the one-byte form it refuses. Field number 0 is invalid protobuf in any
 * encoding, so a message holding one is malformed. The walk follows the
 * descriptors through every sub-message (the depth is bounded by the schema,
 * which has no recursive messages). */
static bool xf__field_numbers_valid(const ProtobufCMessage *m) {
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == 0) return false;
  const ProtobufCMessageDescriptor *desc = m->descriptor;
  const char *base = (const char *)m;
  for (unsigned i = 0; i < desc->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &desc->fields[i];
    if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + f->quantifier_offset);
      ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
      for (size_t j = 0; j < n; j++)
        if (!xf__field_numbers_valid(v[j])) return false;
      continue;
    }
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(const uint32_t *)(base + f->quantifier_offset) != f->id)
      continue;
    const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + f->offset);
    if (sub && !xf__field_numbers_valid(sub)) return false;
  }
  return true;
}

xf_err xf_envelope_unpack(const void *payload, size_t len, Xfed__Envelope **env,
                          xf_errctx *ctx) {
  xf__pb_alloc a = {{xf__pb_malloc, xf__pb_free, NULL}, false};
  a.base.allocator_data = &a;
  *env = xfed__envelope__unpack(&a.base, len, payload);
  if (!*env && a.failed) return xf_fail(ctx, XF_ENOMEM, "cannot allocate a decoded message");
  if (*env && xf__field_numbers_valid(&(*env)->base)) return XF_OK;
  xf_envelope_free(*env);
  *env = NULL;
  return xf_fail(ctx, XF_EFORMAT, "frame payload of %zu bytes is not a valid Envelope", len);
}

/* Ends the decoder with rc: it keeps failing with the same code. */
static xf_err xf__spend(xf_frame_decoder *d, xf_err rc, xf_errctx *ctx) {
  d->spent = rc;
  xf__release(d);
  xf_errctx_field(ctx, "frame %lu at stream byte %llu", d->frames + 1, d->start);
  return rc;
}

/* The frame is complete: parse it and reset for the next one. */
static xf_err xf__finish(xf_frame_decoder *d, const uint8_t *payload,
                         Xfed__Envelope **env, xf_errctx *ctx) {
  xf_err rc = xf_envelope_unpack(payload, d->want, env, ctx);
  if (rc != XF_OK) return xf__spend(d, rc, ctx);
  xf__release(d);
  d->head_len = 0;
  d->in_payload = false;
  d->want = d->have = 0;
  d->frames++;
  return XF_OK;
}

/* Reserves the current payload from the budget and allocates its buffer.
 * XF_OK with d->waiting set when the budget has no room yet. */
static xf_err xf__buffer(xf_frame_decoder *d, xf_errctx *ctx) {
  if (d->budget && !d->charged) {
    if (!xf_frame_budget_take(d->budget, d->want)) {
      if (!d->waiting) d->budget->waits++;
      d->waiting = true;
      return XF_OK;
    }
    d->charged = d->want;
  }
  d->waiting = false;
  d->payload = xf_malloc(d->want);
  if (!d->payload) {
    xf_fail(ctx, XF_ENOMEM, "cannot buffer a frame of %zu bytes", d->want);
    return xf__spend(d, XF_ENOMEM, ctx);
  }
  return XF_OK;
}

xf_err xf_frame_decoder_feed(xf_frame_decoder *d, const void *data, size_t len,
                             size_t *used, Xfed__Envelope **env, xf_errctx *ctx) {
  *used = 0;
  *env = NULL;
  if (d->spent != XF_OK)
    return xf_fail(ctx, d->spent, "the frame decoder failed earlier (%s); the connection "
                   "must be closed", xf_err_name(d->spent));
  xf_cursor in = xf_cursor_make(data, len);
  const uint8_t *p;
  for (;;) {
    if (!d->in_payload) {
      if (xf_cursor_remaining(&in) == 0) break;
      if (d->head_len == 0) d->start = d->consumed;
      size_t n = XF_FRAME_HEADER - d->head_len;
      if (n > xf_cursor_remaining(&in)) n = xf_cursor_remaining(&in);
      XF_GUARD(xf_cursor_bytes(&in, d->head + d->head_len, n));
      d->head_len += n;
      d->consumed += n;
      if (d->head_len < XF_FRAME_HEADER) break;
      xf_cursor head = xf_cursor_make(d->head, sizeof(d->head));
      uint32_t length;
      XF_GUARD(xf_cursor_u32be(&head, &length));
      if (length > d->max) {
        *used = in.off;
        xf_fail(ctx, XF_ERANGE, "frame of %lu bytes exceeds the maximum of %zu bytes",
                (unsigned long)length, d->max);
        return xf__spend(d, XF_ERANGE, ctx);
      }
      d->in_payload = true;
      d->want = length;
      d->have = 0;
    }
    if (!d->payload) {
      /* Nothing of the payload is buffered: when the slice holds all of
       * it, parse it where it lies (no buffer, no reservation). */
      if (xf_cursor_remaining(&in) >= d->want) {
        d->waiting = false;
        XF_GUARD(xf_cursor_view(&in, &p, d->want));
        d->consumed += d->want;
        *used = in.off;
        return xf__finish(d, p, env, ctx);
      }
      xf_err rc = xf__buffer(d, ctx);
      if (rc != XF_OK || d->waiting) {
        *used = in.off;
        return rc;
      }
    }
    if (xf_cursor_remaining(&in) == 0) break;
    size_t n = d->want - d->have;
    if (n > xf_cursor_remaining(&in)) n = xf_cursor_remaining(&in);
    XF_GUARD(xf_cursor_bytes(&in, d->payload + d->have, n));
    d->have += n;
    d->consumed += n;
    if (d->have == d->want) {
      *used = in.off;
      return xf__finish(d, d->payload, env, ctx);
    }
  }
  *used = in.off;
  return XF_OK;
}

size_t xf_frame_size(const Xfed__Envelope *env) {
  return XF_FRAME_HEADER + xfed__envelope__get_packed_size(env);
}

xf_err xf_frame_encode_into(const Xfed__Envelope *env, size_t max_frame, uint8_t *buf,
                            size_t cap, size_t *len, xf_errctx *ctx) {
  *len = 0;
  if (max_frame == 0) max_frame = XF_FRAME_MAX_DEFAULT;
  size_t payload = xfed__envelope__get_packed_size(env);
  XF_ENSURE(payload <= max_frame && payload <= UINT32_MAX, ctx, XF_ERANGE,
            "message of %zu bytes exceeds the maximum frame of %zu bytes", payload,
            max_frame);
  XF_ENSURE(cap >= XF_FRAME_HEADER && payload <= cap - XF_FRAME_HEADER, ctx, XF_ERANGE,
            "frame of %zu bytes does not fit a buffer of %zu bytes",
            payload + XF_FRAME_HEADER, cap);
  buf[0] = (uint8_t)(payload >> 24);
  buf[1] = (uint8_t)(payload >> 16);
  buf[2] = (uint8_t)(payload >> 8);
  buf[3] = (uint8_t)payload;
  size_t wrote = xfed__envelope__pack(env, buf + XF_FRAME_HEADER);
  XF_ENSURE(wrote == payload, ctx, XF_EINTERNAL,
            "protobuf-c packed %zu bytes of a %zu-byte message", wrote, payload);
  *len = XF_FRAME_HEADER + payload;
  return XF_OK;
}

xf_err xf_frame_encode(const Xfed__Envelope *env, size_t max_frame, uint8_t **out,
                       size_t *len, xf_errctx *ctx) {
  *out = NULL;
  *len = 0;
  if (max_frame == 0) max_frame = XF_FRAME_MAX_DEFAULT;
  size_t payload = xfed__envelope__get_packed_size(env);
  XF_ENSURE(payload <= max_frame && payload <= UINT32_MAX, ctx, XF_ERANGE,
            "message of %zu bytes exceeds the maximum frame of %zu bytes", payload,
            max_frame);
  uint8_t *buf = xf_malloc(XF_FRAME_HEADER + payload);
  XF_ENSURE(buf, ctx, XF_ENOMEM, "cannot allocate a frame of %zu bytes",
            XF_FRAME_HEADER + payload);
  xf_err rc = xf_frame_encode_into(env, max_frame, buf, XF_FRAME_HEADER + payload, len, ctx);
  if (rc != XF_OK) {
    xf_free(buf);
    return rc;
  }
  *out = buf;
  return XF_OK;
}
