/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's connections (peers) and their streams: who may connect
 * and say what, the session's frames to the file that handles them,
 * outgoing tensor streams under the process-wide send budget, the model
 * files they share, and messages larger than a frame on the CLI's
 * sessions as DOCUMENT streams (docs/protocol.md, "Messages larger than a
 * frame"). The peer is opaque to every other file. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "net/frame.h"

/* A model file shared by every stream that sends it. */
struct xf__model_file {
  uint8_t *bytes;
  size_t len;
  xf_digest digest; /* BLAKE2b-256 of bytes: the stream digest and the blob name */
  int refs;
};

/* One outgoing tensor stream, queued on its peer. */
struct xf__stream {
  xf_tensor_sender *tx;
  xf__model_file *mf; /* a reference the stream holds, or NULL */
  uint8_t *own;       /* owned bytes, or NULL */
  size_t len;         /* bytes the stream carries */
  bool end_sent;      /* its TensorEnd is out */
  uint64_t weight;    /* put into TensorBegin */
  uint32_t attempt, contributors;
  char **sites;       /* AGGREGATE: the names of the sites it sums (owned) */
  size_t n_sites;
  bool await_ack;     /* an upload: each TensorBegin waits for TensorAck */
  char job[32];       /* the job it belongs to ("" for a model export) */
  uint64_t stream_id;
  struct xf__stream *next;
};

/* The coordinator's connections, one set per process (daemon.c holds it,
 * this file alone looks into it). */
struct xf__peers {
  xf__peer *list;   /* newest first */
  size_t stalled;   /* peers with tx_stalled set */
  /* The sizes announced by every DOCUMENT stream coming in: at most
   * XF__DOCUMENTS_HELD_MAX at once. */
  uint64_t doc_held;
};

/* One connection. Owned by the coordinator's list; freed in on_close. */
struct xf__peer {
  xf_conn *conn; /* NULL once closed */
  struct xf__coord *co;
  xf_session session;
  xf_spiffe_id id;
  xf__peer_kind kind;
  struct xf__site *site; /* SITE and REGIONAL, after SiteAnnounce */
  /* Outgoing streams, the head being sent: its next message when
   * xf_conn_send refused it as busy, and whether it waits for a TensorAck. */
  xf__stream *txq;
  xf_tensor_msg tx_msg;
  bool tx_pending;
  bool tx_await_ack;
  bool tx_stalled; /* waiting for the process-wide send budget */
  uint64_t tx_bytes;
  /* CLI: a request too large for a frame, coming in as a DOCUMENT stream
   * (below); NULL when none is open. doc_held: the size it announced,
   * counted in the peers' doc_held while it is open. */
  xf_document_rx *doc_in;
  uint64_t doc_held;
  struct xf__peer *next;
};


/* ---- model files -------------------------------------------------------------------- */

xf_err xf__model_file_make_as(const xf_model *m, const float *params, xf_checkpoint_dtype dtype,
                              xf__model_file **out, xf_digest *params_digest, xf_errctx *err) {
  xf__model_file *mf = xf_calloc(1, sizeof(*mf));
  if (!mf) return xf_fail(err, XF_ENOMEM, "out of memory");
  xf_err rc = xf_checkpoint_encode_as(m, params, dtype, &mf->bytes, &mf->len, params_digest, err);
  if (rc != XF_OK) {
    xf_free(mf);
    return rc;
  }
  xf_digest_buf(mf->bytes, mf->len, &mf->digest);
  mf->refs = 1;
  *out = mf;
  return XF_OK;
}

xf_err xf__model_file_adopt(uint8_t **bytes, size_t len, const xf_digest *digest,
                           xf__model_file **out, xf_errctx *err) {
  xf__model_file *mf = xf_calloc(1, sizeof(*mf));
  if (!mf) return xf_fail(err, XF_ENOMEM, "out of memory");
  mf->bytes = *bytes;
  mf->len = len;
  *bytes = NULL;
  if (digest)
    mf->digest = *digest;
  else
    xf_digest_buf(mf->bytes, mf->len, &mf->digest);
  mf->refs = 1;
  *out = mf;
  return XF_OK;
}

/* ---- sending ----------------------------------------------------------------------- */

xf_err xf__send(xf__peer *p, const Xfed__Envelope *env) {
  if (!p->conn) return XF_EINVAL;
  if (p->kind == XF__PEER_CLI && !xf_document_fits(env, xf__frame_limit(p)))
    return xf__send_document(p, env);
  xf_errctx err = {0};
  xf_err rc = xf_conn_send(p->conn, env, &err);
  if (rc != XF_OK)
    XF_WARN("send_failed", "peer=%s body=%s reason=\"%s\"", xf_conn_peer_addr(p->conn),
            xf_envelope_body_name(env), err.msg);
  return rc;
}

static void set_stalled(xf__peer *p, bool stalled);

xf__model_file *xf__model_file_ref(xf__model_file *mf) {
  mf->refs++;
  return mf;
}

const uint8_t *xf__model_file_bytes(const xf__model_file *mf, size_t *len) {
  *len = mf->len;
  return mf->bytes;
}

void xf__model_file_unref(xf__model_file *mf) {
  if (!mf || --mf->refs > 0) return;
  xf_free(mf->bytes);
  xf_free(mf);
}

static void stream_free(xf__stream *st) {
  xf_tensor_sender_free(st->tx);
  xf__model_file_unref(st->mf);
  xf_free(st->own);
  for (size_t i = 0; i < st->n_sites; i++) xf_free(st->sites[i]);
  xf_free(st->sites);
  xf_free(st);
}

/* Takes the head stream off p's queue. */
static void stream_pop(xf__peer *p) {
  xf__stream *st = p->txq;
  if (!st) return;
  p->txq = st->next;
  stream_free(st);
  p->tx_pending = false;
  p->tx_await_ack = false;
  p->tx_bytes = 0;
}

void xf__stream_drop(xf__peer *p, const char *job) {
  xf__stream **pp = &p->txq;
  while (*pp) {
    xf__stream *st = *pp;
    if (job && strcmp(st->job, job) != 0) {
      pp = &st->next;
      continue;
    }
    if (st == p->txq) {
      /* The head may be half sent: a receiver drops what it was getting
       * once its task is cancelled, and a new stream starts with its own
       * TensorBegin. */
      stream_pop(p);
      pp = &p->txq;
      continue;
    }
    *pp = st->next;
    stream_free(st);
  }
  if (!p->txq) set_stalled(p, false);
}

xf_err xf__stream_queue(xf__peer *p, const xf_tensor_desc *desc, xf__model_file *mf, uint8_t *own,
                        size_t len, size_t chunk_bytes, const xf__stream_opts *opt) {
  xf_errctx err = {0};
  xf__stream *st = xf_calloc(1, sizeof(*st));
  const void *data = mf ? (const void *)mf->bytes : (const void *)own;
  xf_err rc = st ? xf_tensor_sender_new_hashed(desc, data, len, chunk_bytes,
                                               mf ? &mf->digest : NULL, &st->tx, &err)
                 : xf_fail(&err, XF_ENOMEM, "out of memory");
  if (rc != XF_OK) {
    xf_free(st);
    xf_free(own);
    if (opt) {
      for (size_t i = 0; i < opt->n_sites; i++) xf_free(opt->sites[i]);
      xf_free(opt->sites);
    }
    XF_ERROR("stream_failed", "reason=\"%s\"", err.msg);
    return rc;
  }
  if (mf) {
    mf->refs++;
    st->mf = mf;
  }
  st->own = own;
  st->len = len;
  st->stream_id = desc->stream_id;
  if (opt) {
    st->weight = opt->weight;
    st->attempt = opt->attempt;
    st->contributors = opt->contributors;
    st->sites = opt->sites;
    st->n_sites = opt->n_sites;
    st->await_ack = opt->await_ack;
    snprintf(st->job, sizeof(st->job), "%s", opt->job ? opt->job : "");
  }
  xf__stream **pp = &p->txq;
  while (*pp) pp = &(*pp)->next;
  *pp = st;
  xf__stream_pump(p);
  return XF_OK;
}

/* Ciphertext queued on every connection of the process: the guard keeps the
 * sum (a pump per stalled peer summing every peer's queue made each loop
 * turn O(peers^2) with a thousand sites). */
static size_t queued_total(xf__coord *co) { return xf__coord_guard(co)->queued; }

static void set_stalled(xf__peer *p, bool stalled) {
  if (p->tx_stalled == stalled) return;
  p->tx_stalled = stalled;
  if (stalled)
    xf__coord_peers(p->co)->stalled++;
  else
    xf__coord_peers(p->co)->stalled--;
}

/* Sends the queue's messages until the connection is busy, the process's
 * send budget is spent, an upload waits for a TensorAck, or the queue is
 * empty. A stream that waits for no acknowledgement leaves the queue once
 * its TensorEnd is out; an upload once the final TensorAck comes. */
void xf__stream_pump(xf__peer *p) {
  set_stalled(p, false);
  while (p->txq && p->conn && xf_conn_is_open(p->conn)) {
    xf__stream *st = p->txq;
    if (p->tx_await_ack) return;
    if (!p->tx_pending) {
      if (queued_total(p->co) >= XF_COORD_SEND_BUDGET) {
        set_stalled(p, true); /* the check handle pumps again when writes complete */
        return;
      }
      if (xf_tensor_sender_next(st->tx, &p->tx_msg) != XF_OK) {
        if (st->await_ack) return; /* all sent: the final TensorAck pops it */
        stream_pop(p);
        continue;
      }
      p->tx_pending = true;
      if (p->tx_msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) {
        Xfed__TensorBegin *b = &p->tx_msg.body.begin;
        b->weight = st->weight;
        b->attempt = st->attempt;
        b->contributors = st->contributors;
        b->n_sites = st->n_sites;
        b->sites = st->sites;
      }
    }
    xf_errctx err = {0};
    xf_err rc = xf_conn_send(p->conn, &p->tx_msg.env, &err);
    if (rc == XF_ERANGE) return; /* busy: on_drain pumps again */
    if (rc != XF_OK) {
      XF_WARN("stream_send_failed", "peer=%s reason=\"%s\"", xf_conn_peer_addr(p->conn), err.msg);
      xf_conn_close(p->conn);
      return;
    }
    p->tx_pending = false;
    if (p->tx_msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK)
      p->tx_bytes += p->tx_msg.body.chunk.data.len;
    if (p->tx_msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_END) st->end_sent = true;
    if (p->tx_msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN && st->await_ack) {
      p->tx_await_ack = true; /* the peer's TensorAck says where to go on */
      return;
    }
  }
}

void xf__stream_acked(xf__peer *p, const Xfed__TensorAck *a) {
  xf__stream *st = p->txq;
  if (!st || !st->await_ack || a->stream_id != st->stream_id) return;
  xf_errctx err = {0};
  if (xf_tensor_sender_resume(st->tx, a->next_offset, &err) != XF_OK) {
    XF_WARN("stream_ack_bad", "stream=%" PRIu64 " reason=\"%s\"", st->stream_id, err.msg);
    return;
  }
  if (a->next_offset == st->len && st->end_sent && !p->tx_pending) {
    /* Everything arrived and was verified. */
    XF_INFO("stream_delivered", "stream=%" PRIu64 " job=%s bytes=%" PRIu64, st->stream_id,
            st->job, a->next_offset);
    stream_pop(p);
  } else {
    p->tx_await_ack = false;
  }
  xf__stream_pump(p);
}

bool xf__stream_refused(xf__peer *p, uint64_t stream_id, char *job, size_t job_len) {
  for (xf__stream **pp = &p->txq; *pp; pp = &(*pp)->next) {
    xf__stream *st = *pp;
    if (!st->await_ack || st->stream_id != stream_id) continue;
    snprintf(job, job_len, "%s", st->job);
    if (st == p->txq) {
      stream_pop(p);
    } else {
      *pp = st->next;
      stream_free(st);
    }
    if (!p->txq) set_stalled(p, false);
    xf__stream_pump(p);
    return true;
  }
  return false;
}

void xf__peers_on_pump(uv_check_t *h) {
  xf__coord *co = h->data;
  const xf__peers *ps = xf__coord_peers(co);
  if (!ps->stalled) return;
  for (xf__peer *p = ps->list; p && ps->stalled; p = p->next) {
    if (!p->tx_stalled) continue;
    if (queued_total(co) >= XF_COORD_SEND_BUDGET) return;
    xf__stream_pump(p);
  }
}

/* ---- connections: who may say what --------------------------------------------------------------- */

static void peer_unlink(xf__coord *co, xf__peer *p) {
  for (xf__peer **pp = &xf__coord_peers(co)->list; *pp; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  }
}

static xf__peer_kind kind_for(const xf__coord *co, const xf_spiffe_id *id) {
  switch (id->kind) {
  case XF_PKI_KIND_SITE: return XF__PEER_SITE;
  case XF_PKI_KIND_USER: return xf__coord_cfg(co)->regional ? XF__PEER_UNKNOWN : XF__PEER_CLI;
  case XF_PKI_KIND_COORDINATOR:
    return !xf__coord_cfg(co)->regional && id->region[0] ? XF__PEER_REGIONAL : XF__PEER_UNKNOWN;
  default: return XF__PEER_UNKNOWN;
  }
}

/* A refused peer, in the audit trail. */
static void audit_refused(xf__coord *co, const char *spiffe, const char *addr, const char *why) {
  xf__audit(co, "refused_connection", spiffe,
            json_pack("{s:s,s:s,s:s}", "peer", spiffe, "address", addr ? addr : "", "why", why));
}

static xf_err on_connect(xf_conn *c, const xf_spiffe_id *peer_id) {
  xf__peer *p = xf_conn_user(c);
  xf__coord *co = p->co;
  p->id = *peer_id;
  char spiffe[XF_SPIFFE_MAX];
  if (xf_spiffe_format(peer_id, spiffe, NULL) != XF_OK) snprintf(spiffe, sizeof(spiffe), "?");
  if (p->kind == XF__PEER_UPSTREAM) {
    if (peer_id->kind != XF_PKI_KIND_COORDINATOR || peer_id->region[0]) {
      XF_ERROR("upstream_refused", "peer=%s id=%s reason=\"upstream is not a global coordinator\"",
               xf_conn_peer_addr(c), spiffe);
      return XF_EDENIED;
    }
  } else {
    p->kind = kind_for(co, peer_id);
    if (p->kind == XF__PEER_UNKNOWN) {
      const char *why = xf__coord_cfg(co)->regional
                            ? "a regional aggregator serves only the sites of its region; "
                              "users and coordinators talk to the global coordinator"
                            : "only sites, regional aggregators and users connect to a "
                              "coordinator";
      XF_WARN("peer_refused", "peer=%s id=%s reason=\"%s\"", xf_conn_peer_addr(c), spiffe, why);
      audit_refused(co, spiffe, xf_conn_peer_addr(c), why);
      xf_session_refuse(c, XFED__REFUSAL__REASON__NOT_AUTHORIZED, "%s is refused: %s", spiffe,
                        why);
      return XF_EDENIED;
    }
    if (p->kind == XF__PEER_SITE && xf__coord_cfg(co)->regional &&
        strcmp(peer_id->region, xf__coord_cfg(co)->region) != 0) {
      XF_WARN("peer_refused", "peer=%s id=%s reason=\"site of region %s at the aggregator of %s\"",
              xf_conn_peer_addr(c), spiffe, peer_id->region, xf__coord_cfg(co)->region);
      char why[200];
      snprintf(why, sizeof(why), "a site of region %s at the aggregator of region %s",
               peer_id->region, xf__coord_cfg(co)->region);
      audit_refused(co, spiffe, xf_conn_peer_addr(c), why);
      xf_session_refuse(c, XFED__REFUSAL__REASON__NOT_AUTHORIZED,
                        "%s is in region %s; this aggregator serves region %s", spiffe,
                        peer_id->region, xf__coord_cfg(co)->region);
      return XF_EDENIED;
    }
  }
  xf_errctx err = {0};
  const char *role = xf__coord_cfg(co)->regional
                         ? (p->kind == XF__PEER_UPSTREAM ? "regional" : "coordinator")
                         : "coordinator";
  if (xf_session_start(&p->session, c, role, xf__coord_cfg(co)->max_frame, &err) != XF_OK) {
    XF_ERROR("session_failed", "peer=%s reason=\"%s\"", xf_conn_peer_addr(c), err.msg);
    return XF_EIO;
  }
  XF_INFO("peer_connected", "peer=%s id=%s", xf_conn_peer_addr(c), spiffe);
  return XF_OK;
}

/* The role a peer names in its Hello must fit its certificate. */
static bool role_fits(const xf__peer *p) {
  const char *r = p->session.peer_role;
  switch (p->kind) {
  case XF__PEER_SITE: return strcmp(r, "site") == 0;
  case XF__PEER_REGIONAL: return strcmp(r, "regional") == 0;
  case XF__PEER_CLI: return strcmp(r, "cli") == 0;
  case XF__PEER_UPSTREAM: return strcmp(r, "coordinator") == 0;
  default: return false;
  }
}

/* Whether the SiteAnnounce names the peer its certificate does: a site
 * speaks only for itself. Refused (logged, audited, the session ended)
 * when not. */
static bool announce_fits(xf__coord *co, xf__peer *p, const Xfed__SiteAnnounce *a) {
  const char *name = a->site ? a->site : "";
  const char *region = a->region ? a->region : "";
  if (strcmp(name, p->id.name) != 0 || strcmp(region, p->id.region) != 0) {
    XF_WARN("peer_refused",
            "peer=%s reason=\"announces itself as %s in region %s but its certificate names %s "
            "in region %s\"",
            xf_conn_peer_addr(p->conn), name, region, p->id.name, p->id.region);
    char spiffe[XF_SPIFFE_MAX], why[300];
    if (xf_spiffe_format(&p->id, spiffe, NULL) != XF_OK) snprintf(spiffe, sizeof(spiffe), "?");
    snprintf(why, sizeof(why), "announced itself as %.63s in region %.63s", name, region);
    audit_refused(co, spiffe, xf_conn_peer_addr(p->conn), why);
    xf_session_refuse(p->conn, XFED__REFUSAL__REASON__NOT_AUTHORIZED,
                      "a site speaks only for itself: this certificate is %s in region %s, not "
                      "%s in region %s",
                      p->id.name, p->id.region, name, region);
    return false;
  }
  return true;
}
static void on_frame(xf_conn *c, const Xfed__Envelope *env) {
  xf__peer *p = xf_conn_user(c);
  xf__coord *co = p->co;
  xf_session_event ev;
  xf_errctx err = {0};
  if (xf_session_on_frame(&p->session, c, env, &ev, &err) != XF_OK) {
    XF_WARN("session_closed", "peer=%s reason=\"%s\"", xf_conn_peer_addr(c), err.msg);
    xf_conn_close(c);
    return;
  }
  if (ev == XF_SESSION_OPENED) {
    if (!role_fits(p)) {
      char spiffe[XF_SPIFFE_MAX];
      if (xf_spiffe_format(&p->id, spiffe, NULL) != XF_OK) snprintf(spiffe, sizeof(spiffe), "?");
      XF_WARN("peer_refused", "peer=%s id=%s reason=\"hello role '%s' does not fit the "
                              "certificate\"",
              xf_conn_peer_addr(c), spiffe, p->session.peer_role);
      xf_session_refuse(c, XFED__REFUSAL__REASON__NOT_AUTHORIZED,
                        "the hello names role '%s', which this certificate may not take",
                        p->session.peer_role);
      return;
    }
    if (p->kind == XF__PEER_UPSTREAM) xf__upstream_on_frame(co, p, NULL);
    return;
  }
  if (ev != XF_SESSION_FRAME) return;
  switch (p->kind) {
  case XF__PEER_CLI: xf__cli_on_frame(co, p, env); return;
  case XF__PEER_UPSTREAM: xf__upstream_on_frame(co, p, env); return;
  case XF__PEER_SITE:
  case XF__PEER_REGIONAL:
    if (env->body_case == XFED__ENVELOPE__BODY_SITE_ANNOUNCE) {
      if (announce_fits(co, p, env->site_announce)) xf__site_announce(co, p, env->site_announce);
      return;
    }
    if (!p->site) {
      xf_session_send_error(c, XF_EINVAL, "send SiteAnnounce before %s",
                            xf_envelope_body_name(env));
      return;
    }
    if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
      XF_WARN("peer_error", "site=%s code=%s message=\"%s\"", p->site->name,
              xf_err_name((xf_err)env->error->code), env->error->message ? env->error->message : "");
    }
    xf__run_on_frame(co, p->site, env);
    return;
  default: xf_conn_close(c); return;
  }
}

static void on_drain(xf_conn *c) {
  xf__peer *p = xf_conn_user(c);
  xf__stream_pump(p);
}

static void on_close(xf_conn *c, const xf_conn_reason *why) {
  xf__peer *p = xf_conn_user(c);
  if (!p) return;
  xf__coord *co = p->co;
  char spiffe[XF_SPIFFE_MAX] = "-";
  if (p->id.federation[0] && xf_spiffe_format(&p->id, spiffe, NULL) != XF_OK) spiffe[0] = '\0';
  if (why->end == XF_CONN_END_CLOSED || why->end == XF_CONN_END_PEER_CLOSED)
    XF_INFO("peer_closed", "peer=%s id=%s end=\"%s\"", xf_conn_peer_addr(c), spiffe,
            xf_conn_end_message(why->end));
  else
    XF_WARN("peer_closed", "peer=%s id=%s end=\"%s\" verdict=%s reason=\"%s\"",
            xf_conn_peer_addr(c), spiffe, xf_conn_end_message(why->end),
            xf_pki_verdict_name(why->verdict), why->msg);
  xf__stats_peer_closed(co, p);
  p->conn = NULL;
  xf__stream_drop(p, NULL);
  xf__document_drop(p);
  if (p->kind == XF__PEER_UPSTREAM) xf__upstream_closed(co);
  if (p->site && p->site->peer == p) {
    xf__site *s = p->site;
    s->peer = NULL;
    if (xf__coord_cfg(co)->regional) xf__upstream_announce_soon(co);
    xf__runs_link(co, s, false);
  }
  peer_unlink(co, p);
  xf_free(p);
}

/* Every connection, accepted or dialed, gets a peer. */
static xf_err peer_new(xf__coord *co, xf__peer **out) {
  xf__peer *p = xf_calloc(1, sizeof(*p));
  if (!p) return XF_ENOMEM;
  p->co = co;
  xf__peers *ps = xf__coord_peers(co);
  p->next = ps->list;
  ps->list = p;
  *out = p;
  return XF_OK;
}

/* The coordinator of this process, for connections the listener accepts:
 * they have no peer (and so no user pointer) until on_connect makes one. A
 * process runs one coordinator. */
static xf__coord *g_co;

static xf_err on_accept_connect(xf_conn *c, const xf_spiffe_id *peer_id) {
  xf__coord *co = g_co;
  xf__peer *p;
  if (!co || xf__coord_stopping(co)) {
    xf_session_refuse(c, XFED__REFUSAL__REASON__SHUTTING_DOWN,
                      "the coordinator is stopping; retry with backoff");
    return XF_EDENIED;
  }
  if (peer_new(co, &p) != XF_OK) return XF_ENOMEM;
  p->conn = c;
  xf_conn_set_user(c, p);
  return on_connect(c, peer_id);
}

static void on_accept_close(xf_conn *c, const xf_conn_reason *why) {
  if (xf_conn_user(c)) {
    on_close(c, why);
    return;
  }
  /* Refused before on_connect: no certificate, another CA, revoked, ... */
  XF_WARN("peer_refused", "peer=%s end=\"%s\" verdict=%s reason=\"%s\"", xf_conn_peer_addr(c),
          xf_conn_end_message(why->end), xf_pki_verdict_name(why->verdict), why->msg);
  /* A certificate that was presented and refused is audited; a connection
   * that never got as far as a certificate (a port scan) is only logged. */
  if (why->verdict != XF_PKI_OK && g_co) {
    char detail[700];
    snprintf(detail, sizeof(detail), "certificate refused in the handshake (%s): %s",
             xf_pki_verdict_name(why->verdict), why->msg);
    audit_refused(g_co, xf_conn_peer_addr(c), xf_conn_peer_addr(c), detail);
  }
}

const xf_conn_opts *xf__conn_opts(xf__coord *co, bool accepted) {
  static xf_conn_opts a, d;
  xf_conn_opts *o = accepted ? &a : &d;
  memset(o, 0, sizeof(*o));
  o->max_frame = xf__coord_cfg(co)->max_frame;
  o->handshake_timeout_ms = (uint32_t)(xf__coord_cfg(co)->handshake_timeout_s * 1000.0);
  o->progress.min_rate = xf__coord_cfg(co)->min_frame_rate;
  o->progress.window_ms = (uint32_t)(xf__coord_cfg(co)->frame_rate_window_s * 1000.0);
  o->progress.grace_ms = (uint32_t)(xf__coord_cfg(co)->frame_grace_s * 1000.0);
  o->guard = xf__coord_guard(co);
  o->on_connect = accepted ? on_accept_connect : on_connect;
  o->on_frame = on_frame;
  o->on_drain = on_drain;
  o->on_close = accepted ? on_accept_close : on_close;
  o->user = NULL;
  return o;
}

/* ---- messages larger than a frame on CLI sessions --------------------------------- */

size_t xf__frame_limit(const xf__peer *p) {
  size_t peer = xf_conn_peer_max_frame(p->conn);
  size_t own =
      xf__coord_cfg(p->co)->max_frame ? xf__coord_cfg(p->co)->max_frame : XF_FRAME_MAX_DEFAULT;
  return p->kind == XF__PEER_CLI && own < peer ? own : peer;
}

xf_err xf__send_document(xf__peer *p, const Xfed__Envelope *env) {
  xf_errctx err = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_err rc = xf_document_pack(env, &bytes, &len, &err);
  if (rc != XF_OK) {
    XF_WARN("send_failed", "peer=%s body=%s reason=\"%s\"", xf_conn_peer_addr(p->conn),
            xf_envelope_body_name(env), err.msg);
    xf_session_send_error(p->conn, rc, "%s", err.msg);
    return rc;
  }
  const xf_tensor_desc d = xf_document_desc(xf__stream_id(p->co, false), len);
  /* Acknowledged, so that the answer is paced by the CLI taking it and a
   * TensorAck short of the end makes us resume rather than start over. */
  const xf__stream_opts o = {.await_ack = true};
  XF_DEBUG("document_send", "peer=%s body=%s bytes=%zu stream=%" PRIu64,
           xf_conn_peer_addr(p->conn), xf_envelope_body_name(env), len, d.stream_id);
  return xf__stream_queue(p, &d, NULL, bytes, len, xf_document_chunk(xf__frame_limit(p)), &o);
}

/* What the DOCUMENT streams coming in on all sessions together may
 * announce: two of the largest at once. However many sessions peers open,
 * requests larger than a frame make the coordinator hold no more than this;
 * one more is refused until one of them ends. */
#define XF__DOCUMENTS_HELD_MAX (2ull * XF_DOCUMENT_MAX)

static void send_ack(xf__peer *p, Xfed__TensorAck *ack) {
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = ack;
  (void)xf__send(p, &env);
}

/* Only a policy document (an import, a push) is larger than a frame: a job
 * spec, a rule, a query all fit one. So only the identities that may change
 * the policy send DOCUMENT streams, and no one else can make the
 * coordinator gather one. */
static bool may_send_documents(const xf__peer *p) {
  return p->id.role == XF_PKI_ROLE_COMPLIANCE || p->id.role == XF_PKI_ROLE_ADMIN;
}

/* The stream p had open is gone (done, refused, replaced): its size no
 * longer counts. */
static void release(xf__peer *p) {
  xf__coord_peers(p->co)->doc_held -= p->doc_held;
  p->doc_held = 0;
}

void xf__document_drop(xf__peer *p) {
  xf_document_rx_free(p->doc_in);
  p->doc_in = NULL;
  release(p);
}

/* Whether a TensorBegin may open (or reopen) p's stream: the sender's role,
 * the size of one request, and what the streams of every session hold. */
static bool admit(xf__coord *co, xf__peer *p, const Xfed__TensorBegin *b) {
  char user[XF_SPIFFE_MAX];
  if (xf_spiffe_format(&p->id, user, NULL) != XF_OK) snprintf(user, sizeof(user), "?");
  if (!may_send_documents(p)) {
    XF_WARN("document_refused", "peer=%s user=%s bytes=%" PRIu64 " reason=role",
            xf_conn_peer_addr(p->conn), user, b->total_bytes);
    xf_session_send_error(p->conn, XF_EDENIED,
                          "a request larger than one frame is a policy document, which only "
                          "a compliance or admin identity sends; %s is a %s",
                          user, xf_pki_role_name(p->id.role));
    return false;
  }
  if (b->total_bytes > XF_DOCUMENT_MAX) {
    XF_WARN("document_refused", "peer=%s user=%s bytes=%" PRIu64 " reason=size",
            xf_conn_peer_addr(p->conn), user, b->total_bytes);
    xf_session_send_error(p->conn, XF_ERANGE,
                          "the request announced is %" PRIu64 " bytes, more than the %u bytes "
                          "one request may have",
                          b->total_bytes, XF_DOCUMENT_MAX);
    return false;
  }
  uint64_t others = xf__coord_peers(co)->doc_held - p->doc_held;
  if (others + b->total_bytes > XF__DOCUMENTS_HELD_MAX) {
    XF_WARN("document_refused", "peer=%s user=%s bytes=%" PRIu64 " held=%" PRIu64
            " reason=busy",
            xf_conn_peer_addr(p->conn), user, b->total_bytes, others);
    xf_session_send_error(p->conn, XF_ERANGE,
                          "the coordinator is taking in %" PRIu64 " bytes of other requests "
                          "larger than a frame and holds at most %llu at once; send this one "
                          "(%" PRIu64 " bytes) again when they are done",
                          others, XF__DOCUMENTS_HELD_MAX, b->total_bytes);
    return false;
  }
  return true;
}

void xf__document_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env) {
  if (!xf_document_frame(env)) {
    xf_session_send_error(p->conn, XF_EUNSUPPORTED,
                          "%s: a user sends no tensors here; a request too large for one frame "
                          "comes as a DOCUMENT stream",
                          xf_envelope_body_name(env));
    return;
  }
  const Xfed__TensorBegin *b =
      env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN ? env->tensor_begin : NULL;
  if (b && !admit(co, p, b)) {
    xf__document_drop(p); /* a stream it had open ends here too */
    return;
  }
  xf_errctx err = {0};
  if (!p->doc_in && xf_document_rx_new(XF_DOCUMENT_MAX, &p->doc_in, &err) != XF_OK) {
    xf_session_send_error(p->conn, XF_ENOMEM, "%s", err.msg);
    return;
  }
  xf_document_step step;
  xf_err rc = xf_document_rx_take(p->doc_in, env, &step, &err);
  if (rc != XF_OK) {
    release(p); /* the receiver dropped the stream */
    XF_WARN("document_refused", "peer=%s code=%s reason=\"%s\"", xf_conn_peer_addr(p->conn),
            xf_strerror(rc), err.msg);
    xf_session_send_error(p->conn, rc, "%s", err.msg);
    return;
  }
  if (b) {
    /* Counted from the announcement on: the receiver never holds more. */
    xf__coord_peers(co)->doc_held += b->total_bytes - p->doc_held;
    p->doc_held = b->total_bytes;
  }
  if (step.ack) send_ack(p, &step.tensor_ack);
  if (!step.message) return;
  release(p);
  XF_DEBUG("document_received", "peer=%s body=%s", xf_conn_peer_addr(p->conn),
           xf_envelope_body_name(step.message));
  xf__cli_on_frame(co, p, step.message);
  xf_envelope_free(step.message);
}

/* ---- the peers, for the other files ------------------------------------------------ */

xf_conn *xf__peer_conn(const xf__peer *p) { return p->conn; }

const xf_spiffe_id *xf__peer_id(const xf__peer *p) { return &p->id; }

xf__peer_kind xf__peer_kind_of(const xf__peer *p) { return p->kind; }

void xf__peer_set_site(xf__peer *p, xf__site *s) { p->site = s; }

xf__peer *xf__peer_next(xf__coord *co, const xf__peer *p) {
  return p ? p->next : xf__coord_peers(co)->list;
}

xf_err xf__peer_dial_upstream(xf__coord *co, xf__peer **out, xf_errctx *err) {
  xf__peer *p;
  if (peer_new(co, &p) != XF_OK) return xf_fail(err, XF_ENOMEM, "out of memory");
  p->kind = XF__PEER_UPSTREAM;
  xf_conn_opts o = *xf__conn_opts(co, false);
  o.user = p;
  xf_err rc = xf_dial(xf__coord_loop(co), xf__coord_tls(co), xf__coord_cfg(co)->upstream_host,
                      xf__coord_cfg(co)->upstream_port, &o, &p->conn, err);
  if (rc != XF_OK) {
    XF_ERROR("upstream_dial_failed", "upstream=%s:%d reason=\"%s\"",
             xf__coord_cfg(co)->upstream_host, xf__coord_cfg(co)->upstream_port, err->msg);
    peer_unlink(co, p);
    xf_free(p);
    return rc;
  }
  *out = p;
  return XF_OK;
}

void xf__peers_serve(xf__coord *co) { g_co = co; }

void xf__peers_drop_job(xf__coord *co, const char *job) {
  for (xf__peer *p = xf__coord_peers(co)->list; p; p = p->next)
    if (p->kind != XF__PEER_UPSTREAM) xf__stream_drop(p, job);
}

void xf__peers_close(xf__coord *co) {
  for (xf__peer *p = xf__coord_peers(co)->list; p; p = p->next)
    if (p->conn) xf_conn_close(p->conn);
}

xf__peers *xf__peers_new(void) { return xf_calloc(1, sizeof(xf__peers)); }

void xf__peers_free(xf__peers *ps) {
  if (!ps) return;
  while (ps->list) {
    xf__peer *p = ps->list;
    ps->list = p->next;
    xf__stream_drop(p, NULL);
    xf__document_drop(p);
    xf_free(p);
  }
  xf_free(ps);
}
