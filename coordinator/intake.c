/* SPDX-License-Identifier: Apache-2.0 */
/* The intake of update streams at an aggregator (both roles): a carrier's
 * TensorBegin checked against what the round expects of it (update/
 * update.h's expectations from the same plan the sender ran), its chunks
 * opened when sealed, folded as they come (float32) or kept whole and
 * decoded at the end (encoded, masked), and the whole update handed to the
 * job machine. Admission of uploads keeps at most max_staged in flight. */
#include <inttypes.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"

/* One carrier's update in a run's open attempt, from TensorBegin to its end. */
struct xf__take {
  uint64_t carrier;
  uint64_t stream_id;
  xf_tensor_receiver *rx;
  xf_agg_update *upd;         /* float32 folded as it comes */
  uint8_t *stash;             /* encoded or masked bytes, decoded at the end */
  size_t stash_len;
  xf_seal_receiver *opener;   /* sealed: opens each chunk */
  xf_update_form form;
  uint64_t weight;            /* as folded (xf_jobm_fold_weight) */
  uint64_t *sites;            /* the sites it sums (ids) */
  size_t n_sites;
  bool waiting_admission;     /* TensorBegin taken, TensorAck held back */
  void *sink;                 /* the receiver's sink context (owned) */
};

/* ---- takes ------------------------------------------------------------------------------------------ */

xf__take *xf__take_of(xf__run *run, uint64_t carrier) {
  xf__takes *tk = xf__run_takes(run);
  for (size_t i = 0; i < tk->n; i++)
    if (tk->v[i].carrier == carrier) return &tk->v[i];
  return NULL;
}

static void take_release(xf__take *t) {
  if (t->upd) xf_aggregator_abort_update(t->upd);
  t->upd = NULL;
  xf_tensor_receiver_free(t->rx);
  t->rx = NULL;
  xf_free(t->stash);
  t->stash = NULL;
  xf_seal_receiver_free(t->opener);
  t->opener = NULL;
  xf_free(t->sites);
  t->sites = NULL;
  xf_free(t->sink);
  t->sink = NULL;
}

void xf__take_abort(xf__run *run, xf__take *t) {
  xf__takes *tk = xf__run_takes(run);
  take_release(t);
  size_t i = (size_t)(t - tk->v);
  memmove(&tk->v[i], &tk->v[i + 1], (tk->n - i - 1) * sizeof(*t));
  tk->n--;
}

void xf__takes_clear(xf__run *run) {
  xf__takes *tk = xf__run_takes(run);
  for (size_t i = 0; i < tk->n; i++) take_release(&tk->v[i]);
  tk->n = 0;
}

void xf__takes_free(xf__run *run) {
  xf__takes *tk = xf__run_takes(run);
  xf__takes_clear(run);
  xf_free(tk->v);
  tk->v = NULL;
}

xf__take *xf__take_by_stream(xf__run *run, uint64_t carrier, uint64_t stream) {
  xf__takes *tk = xf__run_takes(run);
  for (size_t i = 0; i < tk->n; i++)
    if (tk->v[i].carrier == carrier && tk->v[i].stream_id == stream)
      return &tk->v[i];
  return NULL;
}

bool xf__take_acked(const xf__take *t) { return !t->waiting_admission; }

void xf__take_drop(xf__run *run, uint64_t carrier) {
  xf__take *t = xf__take_of(run, carrier);
  if (t) xf__take_abort(run, t);
}

void xf__takes_count(const xf__run *run, size_t *waiting, size_t *staged) {
  const xf__takes *tk = xf__run_takes_const(run);
  for (size_t i = 0; i < tk->n; i++) {
    if (tk->v[i].waiting_admission) (*waiting)++;
    else (*staged)++;
  }
}

static xf__take *take_new(xf__run *run, uint64_t carrier) {
  xf__takes *tk = xf__run_takes(run);
  xf__take *g = xf_realloc(tk->v, (tk->n + 1) * sizeof(*g));
  if (!g) return NULL;
  tk->v = g;
  xf__take *t = &g[tk->n++];
  memset(t, 0, sizeof(*t));
  t->carrier = carrier;
  return t;
}

/* ---- sinks -------------------------------------------------------------------------------------------- */

/* The sinks get the take through a small context of its own (t->sink):
 * the takes array may move while a stream is open, so they look their take
 * up by carrier. */
typedef struct sink_ctx {
  xf__run *run;
  uint64_t carrier;
} sink_ctx;

/* Aligned room for one chunk; the sinks run on the loop thread only. */
static float sink_scratch[XF_TENSOR_CHUNK_MAX / sizeof(float)];
static uint8_t open_scratch[XF_SEAL_STREAM_CHUNK];

static xf_err fold_plain(xf__take *t, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  if (t->form != XF_UPDATE_FLOAT32) {
    XF_ENSURE(t->stash && offset <= t->stash_len && len <= t->stash_len - offset, err,
              XF_EFORMAT, "update chunk at byte %" PRIu64 " is beyond the update", offset);
    memcpy(t->stash + offset, data, len);
    return XF_OK;
  }
  XF_ENSURE(t->upd, err, XF_EINVAL, "no update in flight");
  XF_ENSURE(offset % 4 == 0 && len % 4 == 0, err, XF_EFORMAT,
            "update chunk at byte %" PRIu64 " is not whole float32 values", offset);
  XF_ENSURE(len <= sizeof(sink_scratch), err, XF_EFORMAT, "update chunk of %zu bytes", len);
  const float *values = (const float *)(const void *)data;
  if ((uintptr_t)data % _Alignof(float) != 0) {
    memcpy(sink_scratch, data, len);
    values = sink_scratch;
  }
  return xf_aggregator_fold(t->upd, (size_t)(offset / 4), values, len / 4, err);
}

static xf_err take_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                        xf_errctx *err) {
  sink_ctx *c = user;
  xf__take *t = xf__take_of(c->run, c->carrier);
  XF_ENSURE(t, err, XF_EINVAL, "no update in flight");
  if (!t->opener) return fold_plain(t, offset, data, len, err);
  /* Sealed: each stream chunk is one sealed chunk. */
  const uint64_t span = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
  XF_ENSURE(offset % span == 0 && len > XF_SEAL_ABYTES && len <= span, err, XF_EFORMAT,
            "sealed update chunk at byte %" PRIu64 " is not one sealed chunk", offset);
  uint64_t plain = offset / span * XF_SEAL_STREAM_CHUNK;
  if (xf_seal_open_chunk(t->opener, plain, data, len, open_scratch) != XF_OK)
    return xf_fail(err, XF_EINTEGRITY,
                   "sealed update chunk at byte %" PRIu64 " does not open: altered, or sealed "
                   "to another key",
                   offset);
  return fold_plain(t, plain, open_scratch, len - XF_SEAL_ABYTES, err);
}

/* ---- acknowledgements and drops ---------------------------------------------------------------------- */

static void send_ack(xf__site *s, const xf_tensor_receiver *rx) {
  Xfed__TensorAck ack;
  xf_tensor_receiver_ack(rx, &ack);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &ack;
  if (s->peer) (void)xf__send(s->peer, &env);
}

static void drop(xf__run *run, xf__site *s, const char *why) {
  XF_WARN("update_dropped", "job=%s from=%s reason=\"%s\"", xf__run_id(run), s->name, why);
  xf__coord_stats(xf__run_coord(run))->updates_dropped++;
  xf__take *t = xf__take_of(run, s->id);
  if (t) xf__take_abort(run, t);
  xf_errctx err = {0};
  if (xf_jobm_dropped(xf__run_machine(run), s->id, why, xf__now(), &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
  xf__run_actions(run);
}

void xf__intake_admit(xf__run *run) {
  xf__coord *co = xf__run_coord(run);
  xf__takes *tk = xf__run_takes(run);
  xf_aggregator *agg = xf__run_aggregator(run);
  uint32_t max = xf__coord_cfg(co)->max_staged ? xf__coord_cfg(co)->max_staged : 4;
  for (size_t i = 0; i < tk->n && agg; i++) {
    xf__take *t = &tk->v[i];
    if (!t->waiting_admission) continue;
    if (xf_aggregator_in_flight(agg) >= max) return;
    xf_errctx err = {0};
    if (xf_aggregator_begin_update(agg, t->carrier, t->weight, &t->upd, &err) != XF_OK) {
      xf__site *s = xf__site_find(co, t->carrier);
      if (s && s->peer) xf_session_send_error(xf__peer_conn(s->peer), err.code, "%s", err.msg);
      if (s) drop(run, s, err.msg);
      return; /* the takes moved: the next admission starts over */
    }
    t->waiting_admission = false;
    xf__site *s = xf__site_find(co, t->carrier);
    if (s) send_ack(s, t->rx);
  }
}

/* ---- the stream --------------------------------------------------------------------------------------- */

/* Site ids of the names an aggregate names (only sites behind s count). */
static size_t sites_of(const xf__site *s, char **names, size_t n, uint64_t *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t id = xf_admit_site_id(names[i] ? names[i] : "");
    for (size_t j = 0; j < s->n_behind; j++)
      if (s->behind[j].id == id) {
        out[k++] = id;
        break;
      }
  }
  return k;
}

/* Whether a repeated TensorBegin announces other bytes than the stream's
 * first: another sealing key, size or digest. */
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

/* An update for a task the sender does not hold here now: refused. */
static void refuse_unheld(xf__run *run, xf__site *s, const Xfed__TensorBegin *m) {
  /* Not taken now, but not thrown away: the sender keeps it until the
   * task is offered to it again (a restarted coordinator offers its
   * interrupted attempt once the cohort is back). */
  XF_WARN("update_refused", "job=%s from=%s round=%u attempt=%u reason=\"not a task it holds\"",
          xf__run_id(run), s->name, (unsigned)m->round, (unsigned)m->attempt);
  if (s->peer)
    xf_session_refuse_stream(xf__peer_conn(s->peer), m->stream_id, XF_EINVAL,
                             "job %s round %u attempt %u is not a task you hold here now; "
                             "keep it until the task is offered to you again",
                             xf__run_id(run), (unsigned)m->round, (unsigned)m->attempt);
}

/* A TensorBegin for the stream the carrier's take already has: resumed
 * (true, also when it cannot be), or the old take aborted (false: a fresh
 * take follows). */
static bool resumed(xf__run *run, xf__site *s, const Xfed__TensorBegin *m) {
  xf_errctx err = {0};
  xf__take *t = xf__take_of(run, s->id);
  if (t && t->stream_id == m->stream_id && t->rx && made_again(t->rx, m)) {
    /* The sender made its update again under the same stream id (a site
     * restarted mid-upload seals what it holds to a new key): what was
     * taken of the old bytes cannot be continued. The take starts over
     * from offset 0 below (TensorAck 0), as a fresh stream would. */
    XF_INFO("update_restarted", "job=%s from=%s stream=%" PRIu64 " reason=\"a new sealing key, "
            "size or digest under the same stream id\"",
            xf__run_id(run), s->name, m->stream_id);
    xf__take_abort(run, t);
    t = NULL;
  }
  if (t && t->stream_id == m->stream_id && t->rx) { /* a resume after a reconnect */
    if (xf_tensor_receiver_begin(t->rx, m, &err) != XF_OK) {
      drop(run, s, err.msg);
      return true;
    }
    if (!t->waiting_admission) send_ack(s, t->rx);
    return true;
  }
  if (t) xf__take_abort(run, t);
  return false;
}

/* Whether the update's announced form is what the job expects of it (e):
 * its form and plain length into *form and *plain. Refused (answered and
 * dropped) when not. */
static bool form_fits(xf__run *run, xf__site *s, const Xfed__TensorBegin *m,
                      const xf_update_expect *e, xf_update_form *form, uint64_t *plain) {
  xf_update_announce a = {.bytes = m->dtype == XFED__TENSOR_BEGIN__DTYPE__U8,
                          .element_count = m->element_count,
                          .total_bytes = m->total_bytes,
                          .weight = m->weight,
                          .sealed_by_len = m->sealed_by.len,
                          .sealed_chunk = m->sealed_chunk,
                          .chunk_bytes = m->chunk_bytes};
  char why[400];
  if (m->dtype != XFED__TENSOR_BEGIN__DTYPE__U8 && m->dtype != XFED__TENSOR_BEGIN__DTYPE__F32) {
    snprintf(why, sizeof(why), "an update travels as F32 or U8, not dtype %d", (int)m->dtype);
    if (s->peer) xf_session_send_error(xf__peer_conn(s->peer), XF_EFORMAT, "%s", why);
    drop(run, s, why);
    return false;
  }
  if (xf_update_expect_check(e, &a, form, plain, why, sizeof(why)) != XF_OK) {
    if (s->peer) xf_session_send_error(xf__peer_conn(s->peer), XF_EFORMAT, "%s", why);
    drop(run, s, why);
    return false;
  }
  return true;
}

/* The new take t of an update whose form fits: its receiver, its stash
 * and seal opener where needed, then acknowledged or held for admission. */
static void start_take(xf__run *run, xf__site *s, const Xfed__TensorBegin *m, xf__take *t,
                       xf_update_form form, uint64_t plain, bool sealed, uint64_t *ids,
                       size_t n) {
  xf_errctx err = {0};
  t->stream_id = m->stream_id;
  t->form = form;
  t->sites = ids;
  t->n_sites = s->regional ? n : 0;
  t->weight = xf_jobm_fold_weight(xf__run_machine(run), m->weight, s->regional ? n : 1);
  if (form != XF_UPDATE_FLOAT32) {
    t->stash = xf_malloc((size_t)plain ? (size_t)plain : 1);
    t->stash_len = (size_t)plain;
    if (!t->stash) {
      drop(run, s, "out of memory for a compressed update");
      return;
    }
  }
  if (sealed) {
    char ctx[256];
    uint32_t round = xf__run_round(run);
    size_t ctx_len =
        xf_seal_stream_context(ctx, sizeof(ctx), xf__run_id(run), round, m->attempt, s->name);
    if (xf_seal_receiver_new(xf__run_seal_key(run), m->sealed_by.data, (const uint8_t *)ctx, ctx_len,
                             &t->opener) != XF_OK) {
      drop(run, s, "cannot open the update's seal");
      return;
    }
  }
  sink_ctx *c = xf_malloc(sizeof(*c));
  if (c) *c = (sink_ctx){run, s->id};
  t->sink = c;
  if (!c || xf_tensor_receiver_new(m->total_bytes, take_sink, c, &t->rx, &err) != XF_OK ||
      xf_tensor_receiver_begin(t->rx, m, &err) != XF_OK) {
    drop(run, s, err.msg[0] ? err.msg : "out of memory for an update");
    return;
  }
  if (form != XF_UPDATE_FLOAT32) {
    /* Kept whole and taken in at its end (a masked input cannot be taken
     * out again once added to the secure sum; an encoded one is no floats). */
    if (form == XF_UPDATE_ENCODED) {
      t->waiting_admission = true;
      xf__intake_admit(run);
      return;
    }
    send_ack(s, t->rx);
    return;
  }
  t->waiting_admission = true;
  xf__intake_admit(run);
}

void xf__intake_begin(xf__run *run, xf__site *s, const Xfed__TensorBegin *m) {
  Xfed__TensorBegin__Kind want =
      s->regional ? XFED__TENSOR_BEGIN__KIND__AGGREGATE : XFED__TENSOR_BEGIN__KIND__UPDATE;
  bool masked = false;
  uint64_t sa_length = 0;
  uint32_t sa_bits = 0;
  if (m->kind != want || !xf_jobm_expects_update(xf__run_machine(run), s->id, &masked, &sa_length, &sa_bits)) {
    refuse_unheld(run, s, m);
    return;
  }
  if (resumed(run, s, m)) return;
  xf_errctx err = {0};
  /* What it sums: itself, or the sites behind it that it names. */
  uint64_t *ids = NULL;
  size_t n = 1;
  if (s->regional) {
    ids = xf_mallocarray(m->n_sites ? m->n_sites : 1, sizeof(uint64_t));
    if (!ids) return;
    n = sites_of(s, m->sites, m->n_sites, ids);
  }
  /* The weight it claims is what its sites announced at most
   * (coordinator/checks.c: refused, logged and audited). */
  if (!xf__check_weight(run, s, m, ids, s->regional ? n : 0)) {
    xf_free(ids);
    drop(run, s, "its update's weight is beyond the records it announced");
    return;
  }
  if (xf_jobm_announced(xf__run_machine(run), s->id, ids, s->regional ? n : 0, xf__now(), &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
  xf__run_actions(run);
  if (!xf_jobm_expects_update(xf__run_machine(run), s->id, &masked, &sa_length, &sa_bits)) {
    xf_free(ids); /* refused: the machine said why (DISCARD) */
    return;
  }
  bool sealed = xf__run_seal_key(run) != NULL && !masked;
  xf_update_expect e;
  xf_update_expect_for(xf__run_spec(run), xf__run_n_params(run), masked, sa_length, sa_bits, sealed,
                       (uint32_t)n, &e);
  xf_update_form form;
  uint64_t plain = 0;
  if (!form_fits(run, s, m, &e, &form, &plain)) {
    xf_free(ids);
    return;
  }
  xf__take *t = take_new(run, s->id);
  if (!t) {
    xf_free(ids);
    drop(run, s, "out of memory for an update");
    return;
  }
  start_take(run, s, m, t, form, plain, sealed, ids, n);
}

void xf__intake_chunk(xf__run *run, xf__site *s, xf__take *t, const Xfed__TensorChunk *c) {
  xf_errctx err = {0};
  if (xf_tensor_receiver_chunk(t->rx, c, &err) != XF_OK) {
    if (s->peer) xf_session_send_error(xf__peer_conn(s->peer), err.code, "%s", err.msg);
    drop(run, s, err.msg);
  }
}

void xf__intake_end(xf__run *run, xf__site *s, xf__take *t, const Xfed__TensorEnd *e) {
  xf__coord *co = xf__run_coord(run);
  xf_errctx err = {0};
  xf_err rc = xf_tensor_receiver_end(t->rx, e, &err);
  if (rc == XF_ETRUNCATED) {
    send_ack(s, t->rx);
    return;
  }
  if (rc != XF_OK) {
    /* A digest that does not match (XF_EINTEGRITY) or a TensorEnd of
     * another stream: the sender is told which stream, then dropped. */
    if (s->peer)
      xf_session_send_error(xf__peer_conn(s->peer), err.code,
                            "job %s: %s stream %" PRIu64 " is refused: %s", xf__run_id(run),
                            s->regional ? "aggregate" : "update", t->stream_id, err.msg);
    drop(run, s, err.msg);
    return;
  }
  uint64_t bytes = xf_tensor_receiver_info(t->rx)->total_bytes;
  uint64_t weight = t->weight;
  uint64_t *sites = t->sites;
  size_t n_sites = t->n_sites;
  t->sites = NULL;
  double now = xf__now();
  bool was_masked = t->form == XF_UPDATE_MASKED;
  if (was_masked) {
    bool masked;
    uint64_t len = 0;
    uint32_t bits = 0;
    (void)xf_jobm_expects_update(xf__run_machine(run), s->id, &masked, &len, &bits);
    uint32_t *words = xf_mallocarray((size_t)len ? (size_t)len : 1, sizeof(uint32_t));
    rc = words ? xf_codec_unpack_bits(t->stash, t->stash_len, (size_t)len, bits, words, &err)
               : xf_fail(&err, XF_ENOMEM, "out of memory unpacking a masked input");
    send_ack(s, t->rx);
    xf__take_abort(run, t);
    if (rc != XF_OK) {
      xf_free(words);
      xf_free(sites);
      drop(run, s, err.msg);
      return;
    }
    if (xf_jobm_sa_masked(xf__run_machine(run), s->id, &words, (size_t)len, weight, now, &err) != XF_OK)
      XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
    xf_free(words);
  } else {
    if (t->form == XF_UPDATE_ENCODED) {
      xf_update_expect ex;
      xf_update_expect_for(xf__run_spec(run), xf__run_n_params(run), false, 0, 0, t->opener != NULL,
                           (uint32_t)(n_sites ? n_sites : 1), &ex);
      float *values = xf_mallocarray(xf__run_n_params(run), sizeof(float));
      rc = values ? xf_update_decode(&ex, t->stash, t->stash_len, values, &err)
                  : xf_fail(&err, XF_ENOMEM, "out of memory decoding an update");
      if (rc == XF_OK) rc = xf_aggregator_fold(t->upd, 0, values, xf__run_n_params(run), &err);
      xf_free(values);
    }
    if (rc == XF_OK) {
      rc = xf_aggregator_end_update(t->upd, &err);
      t->upd = NULL;
    }
    if (rc != XF_OK) {
      xf_free(sites);
      drop(run, s, err.msg);
      return;
    }
    send_ack(s, t->rx);
    xf__take_abort(run, t);
  }
  /* An artifact that came across a region boundary. */
  if (xf__coord_cfg(co)->region[0] && strcmp(s->region, xf__coord_cfg(co)->region) != 0) {
    json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:s,s:I,s:I}", "job", xf__run_id(run), "round",
                          (json_int_t)xf__run_round(run),
                          "attempt", (json_int_t)xf_jobm_attempt(xf__run_machine(run)), "kind",
                          s->regional ? "regional_aggregate" : "update", "sender", s->name,
                          "from", s->region, "to", xf__coord_cfg(co)->region,
                          "bytes", (json_int_t)bytes, "weight", (json_int_t)weight);
    if (s->regional) json_object_set_new(o, "contributors", json_integer((json_int_t)n_sites));
    const xf_admission *plan = xf__run_plan(run);
    if (plan && plan->has_policy)
      json_object_set_new(o, "policy_version", json_integer((json_int_t)plan->policy_version));
    xf__audit(co, "crossing", xf__run_id(run), o);
  }
  xf__coord_stats(co)->updates_received++;
  XF_INFO("update_received", "job=%s from=%s sites=%zu weight=%" PRIu64 " bytes=%" PRIu64,
          xf__run_id(run), s->name, s->regional ? n_sites : 1, weight, bytes);
  if (!was_masked &&
      xf_jobm_reported(xf__run_machine(run), s->id, sites, n_sites, weight, now, &err) != XF_OK)
    XF_ERROR("job_machine_failed", "job=%s reason=\"%s\"", xf__run_id(run), err.msg);
  xf_free(sites);
  xf__run_actions(run);
}
