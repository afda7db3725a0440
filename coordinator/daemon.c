/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator daemon's loop: listening, sessions, who may say what,
 * the sites it knows, outgoing tensor streams, signals and the tick that
 * drives rounds (coordinator/daemon.h, docs/coordinator.md). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "storage/file.h"

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

#define TICK_MS 200

double xf__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t xf_coord_site_id(const char *name) { return xf_admit_site_id(name); }

uint64_t xf__stream_id(xf__coord *co, bool update) {
  /* Even ids are models, odd ones updates; 0 is never used. */
  co->next_stream += 2;
  return co->next_stream | (update ? 1u : 0u);
}

xf__site *xf__site_find(xf__coord *co, uint64_t id) {
  for (xf__site *s = co->sites; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

xf__site *xf__site_by_name(xf__coord *co, const char *name) {
  for (xf__site *s = co->sites; s; s = s->next)
    if (strcmp(s->name, name) == 0) return s;
  return NULL;
}

const char *xf__site_name(xf__coord *co, uint64_t id) {
  for (xf__site *s = co->sites; s; s = s->next) {
    if (s->id == id) return s->name;
    for (size_t i = 0; i < s->n_behind; i++)
      if (s->behind[i].id == id) return s->behind[i].name;
  }
  return NULL;
}

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

xf_err xf__model_file_adopt(uint8_t **bytes, size_t len, xf__model_file **out,
                           xf_errctx *err) {
  xf__model_file *mf = xf_calloc(1, sizeof(*mf));
  if (!mf) return xf_fail(err, XF_ENOMEM, "out of memory");
  mf->bytes = *bytes;
  mf->len = len;
  *bytes = NULL;
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

/* Ciphertext queued on every connection of the process. */
static size_t queued_total(const xf__coord *co) {
  size_t n = 0;
  for (const xf__peer *q = co->peers; q; q = q->next)
    if (q->conn) n += xf_conn_write_queued(q->conn);
  return n;
}

static void set_stalled(xf__peer *p, bool stalled) {
  if (p->tx_stalled == stalled) return;
  p->tx_stalled = stalled;
  if (stalled)
    p->co->stalled++;
  else
    p->co->stalled--;
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

/* Runs after each turn of the loop (completed writes are such turns):
 * resumes stalled streams, oldest peer first, while the budget allows. */
static void on_pump_check(uv_check_t *h) {
  xf__coord *co = h->data;
  if (!co->stalled) return;
  for (xf__peer *p = co->peers; p && co->stalled; p = p->next) {
    if (!p->tx_stalled) continue;
    if (queued_total(co) >= XF_COORD_SEND_BUDGET) return;
    xf__stream_pump(p);
  }
}

/* ---- who may say what --------------------------------------------------------------- */

static xf__peer_kind kind_for(const xf__coord *co, const xf_spiffe_id *id) {
  switch (id->kind) {
  case XF_PKI_KIND_SITE: return XF__PEER_SITE;
  case XF_PKI_KIND_USER: return co->cfg.regional ? XF__PEER_UNKNOWN : XF__PEER_CLI;
  case XF_PKI_KIND_COORDINATOR:
    return !co->cfg.regional && id->region[0] ? XF__PEER_REGIONAL : XF__PEER_UNKNOWN;
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
      const char *why = co->cfg.regional
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
    if (p->kind == XF__PEER_SITE && co->cfg.regional &&
        strcmp(peer_id->region, co->cfg.region) != 0) {
      XF_WARN("peer_refused", "peer=%s id=%s reason=\"site of region %s at the aggregator of %s\"",
              xf_conn_peer_addr(c), spiffe, peer_id->region, co->cfg.region);
      char why[200];
      snprintf(why, sizeof(why), "a site of region %s at the aggregator of region %s",
               peer_id->region, co->cfg.region);
      audit_refused(co, spiffe, xf_conn_peer_addr(c), why);
      xf_session_refuse(c, XFED__REFUSAL__REASON__NOT_AUTHORIZED,
                        "%s is in region %s; this aggregator serves region %s", spiffe,
                        peer_id->region, co->cfg.region);
      return XF_EDENIED;
    }
  }
  xf_errctx err = {0};
  const char *role = co->cfg.regional ? (p->kind == XF__PEER_UPSTREAM ? "regional" : "coordinator")
                                      : "coordinator";
  if (xf_session_start(&p->session, c, role, co->cfg.max_frame, &err) != XF_OK) {
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

static void copy_label(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src ? src : "");
}

/* The datasets of an announcement into *out (xf_calloc'ed; NULL when none). */
static size_t read_datasets(const Xfed__SiteAnnounce *a, xf__dataset **out) {
  *out = NULL;
  if (!a->n_datasets) return 0;
  xf__dataset *v = xf_calloc(a->n_datasets, sizeof(*v));
  if (!v) return 0;
  for (size_t i = 0; i < a->n_datasets; i++) {
    const Xfed__SiteAnnounce__Dataset *d = a->datasets[i];
    xf__dataset *o = &v[i];
    copy_label(o->name, sizeof(o->name), d->name);
    copy_label(o->classification, sizeof(o->classification), d->classification);
    for (size_t t = 0; t < d->n_tags && t < XF_JOB_TAGS_MAX; t++)
      copy_label(o->tags[o->n_tags++], XF_JOB_IDENT_MAX, d->tags[t]);
    o->train_records = d->train_records;
    o->test_records = d->test_records;
    o->classes = d->classes;
    o->h = d->height;
    o->w = d->width;
    o->c = d->channels;
  }
  *out = v;
  return a->n_datasets;
}

static void free_behind(xf__site *s) {
  for (size_t i = 0; i < s->n_behind; i++) xf_free(s->behind[i].datasets);
  xf_free(s->behind);
  s->behind = NULL;
  s->n_behind = 0;
}

/* The datasets a site announced (a site: its own; a regional aggregator:
 * those of each site behind it), recorded in the journal in one
 * transaction: those the current policy does not hold become (or stay)
 * pending. Only the global coordinator keeps a policy. */
static void record_datasets(xf__coord *co, const xf__site *s) {
  size_t n_sites = s->regional ? s->n_behind : 1, n_sets = 0;
  for (size_t i = 0; i < n_sites; i++)
    n_sets += s->regional ? s->behind[i].n_datasets : s->n_datasets;
  xf_errctx err = {0};
  const xf_policy *policy = NULL;
  xf_journal_site_datasets *sites = n_sites ? xf_calloc(n_sites, sizeof(*sites)) : NULL;
  xf_journal_announced *list = n_sets ? xf_calloc(n_sets, sizeof(*list)) : NULL;
  const char **tags = n_sets ? xf_calloc(n_sets * XF_JOB_TAGS_MAX, sizeof(*tags)) : NULL;
  if ((n_sites && !sites) || (n_sets && (!list || !tags))) {
    XF_ERROR("journal_failed", "doing=datasets_seen site=%s reason=\"out of memory\"", s->name);
    goto out;
  }
  size_t k = 0;
  for (size_t i = 0; i < n_sites; i++) {
    const xf__behind *b = s->regional ? &s->behind[i] : NULL;
    const xf__dataset *ds = b ? b->datasets : s->datasets;
    size_t n = b ? b->n_datasets : s->n_datasets;
    sites[i] = (xf_journal_site_datasets){.site = b ? b->name : s->name,
                                          .region = b ? b->region : s->region,
                                          .ds = list ? &list[k] : NULL,
                                          .n = n};
    for (size_t j = 0; j < n; j++, k++) {
      const char **t = &tags[k * XF_JOB_TAGS_MAX];
      for (uint32_t m = 0; m < ds[j].n_tags; m++) t[m] = ds[j].tags[m];
      list[k] = (xf_journal_announced){.name = ds[j].name,
                                       .classification = ds[j].classification,
                                       .tags = t,
                                       .n_tags = ds[j].n_tags,
                                       .train_records = ds[j].train_records,
                                       .test_records = ds[j].test_records,
                                       .classes = ds[j].classes,
                                       .height = ds[j].h,
                                       .width = ds[j].w,
                                       .channels = ds[j].c};
    }
  }
  if (xf__policy_current(co, &policy, &err) != XF_OK ||
      xf_journal_datasets_seen(co->db, sites, n_sites, policy, xf__now(), &err) != XF_OK)
    XF_ERROR("journal_failed", "doing=datasets_seen site=%s reason=\"%s\"", s->name, err.msg);
out:
  xf_free(tags);
  xf_free(list);
  xf_free(sites);
}

/* A site's or regional's SiteAnnounce: who it is must match its
 * certificate; what it holds replaces what it said before. */
static void on_announce(xf__coord *co, xf__peer *p, const Xfed__SiteAnnounce *a) {
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
    return;
  }
  uint64_t id = xf_coord_site_id(name);
  xf__site *s = xf__site_find(co, id);
  if (!s) {
    s = xf_calloc(1, sizeof(*s));
    if (!s) {
      xf_conn_close(p->conn);
      return;
    }
    s->id = id;
    copy_label(s->name, sizeof(s->name), name);
    s->next = co->sites;
    co->sites = s;
  }
  copy_label(s->region, sizeof(s->region), region);
  s->regional = p->kind == XF__PEER_REGIONAL;
  if (s->peer && s->peer != p) {
    XF_INFO("session_replaced", "site=%s old=%s new=%s", s->name, xf_conn_peer_addr(s->peer->conn),
            xf_conn_peer_addr(p->conn));
    xf__peer *old = s->peer;
    old->site = NULL;
    xf__stream_drop(old, NULL);
    xf_conn_close(old->conn);
  }
  s->peer = p;
  p->site = s;
  xf_free(s->datasets);
  s->n_datasets = read_datasets(a, &s->datasets);
  free_behind(s);
  /* A regional aggregator names the sites behind it with their own
   * announcements; only sites of its region count (its certificate's). */
  if (s->regional && a->n_behind && (s->behind = xf_calloc(a->n_behind, sizeof(*s->behind)))) {
    for (size_t i = 0; i < a->n_behind; i++) {
      const Xfed__SiteAnnounce *b = a->behind[i];
      if (!b || !b->site || !*b->site || strcmp(b->region ? b->region : "", s->region) != 0)
        continue;
      xf__behind *o = &s->behind[s->n_behind++];
      copy_label(o->name, sizeof(o->name), b->site);
      copy_label(o->region, sizeof(o->region), b->region);
      o->id = xf_coord_site_id(o->name);
      o->n_datasets = read_datasets(b, &o->datasets);
    }
  }
  if (co->db) {
    xf_errctx err = {0};
    if (xf_journal_site_seen(co->db, s->id, s->name, s->region, s->regional, xf__now(), &err) !=
        XF_OK)
      XF_ERROR("journal_failed", "doing=site_seen reason=\"%s\"", err.msg);
    for (size_t i = 0; i < s->n_behind; i++)
      if (xf_journal_site_seen(co->db, s->behind[i].id, s->behind[i].name, s->behind[i].region,
                               false, xf__now(), &err) != XF_OK)
        XF_ERROR("journal_failed", "doing=site_seen reason=\"%s\"", err.msg);
    if (!co->cfg.regional) record_datasets(co, s);
  }
  XF_INFO("site_announced", "site=%s region=%s kind=%s datasets=%zu sites_behind=%zu", s->name,
          s->region, s->regional ? "regional" : "site", s->n_datasets, s->n_behind);
  if (co->cfg.regional) xf__upstream_announce(co);
  xf__runs_link(co, s, true);
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
      on_announce(co, p, env->site_announce);
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
    if (co->cfg.regional) xf__upstream_announce(co);
    xf__runs_link(co, s, false);
  }
  for (xf__peer **pp = &co->peers; *pp; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  }
  xf_free(p);
}

/* Every connection, accepted or dialed, gets a peer. */
xf_err xf__peer_new(xf__coord *co, xf__peer **out) {
  xf__peer *p = xf_calloc(1, sizeof(*p));
  if (!p) return XF_ENOMEM;
  p->co = co;
  p->next = co->peers;
  co->peers = p;
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
  if (!co || co->stopping) {
    xf_session_refuse(c, XFED__REFUSAL__REASON__SHUTTING_DOWN,
                      "the coordinator is stopping; retry with backoff");
    return XF_EDENIED;
  }
  if (xf__peer_new(co, &p) != XF_OK) return XF_ENOMEM;
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
  o->max_frame = co->cfg.max_frame;
  o->handshake_timeout_ms = (uint32_t)(co->cfg.handshake_timeout_s * 1000.0);
  o->progress.min_rate = co->cfg.min_frame_rate;
  o->progress.window_ms = (uint32_t)(co->cfg.frame_rate_window_s * 1000.0);
  o->progress.grace_ms = (uint32_t)(co->cfg.frame_grace_s * 1000.0);
  o->guard = &co->guard;
  o->on_connect = accepted ? on_accept_connect : on_connect;
  o->on_frame = on_frame;
  o->on_drain = on_drain;
  o->on_close = accepted ? on_accept_close : on_close;
  o->user = NULL;
  return o;
}

/* ---- signals and the tick ------------------------------------------------------------ */

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void stop(xf__coord *co, const char *why) {
  if (co->stopping) return;
  co->stopping = true;
  XF_INFO("coordinator_stopping", "reason=%s", why);
  xf_notify_stopping(&co->notify);
  xf__metrics_stop(co);
  xf__dashboard_stop(co);
  if (co->listener) xf_listener_close(co->listener, NULL);
  co->listener = NULL;
  if (co->cfg.regional) xf__upstream_stop(co);
  for (xf__peer *p = co->peers; p; p = p->next)
    if (p->conn) xf_conn_close(p->conn);
  uv_timer_stop(&co->tick);
  uv_close((uv_handle_t *)&co->tick, NULL);
  uv_check_stop(&co->pump);
  uv_close((uv_handle_t *)&co->pump, NULL);
  uv_close((uv_handle_t *)&co->sig_term, NULL);
  uv_close((uv_handle_t *)&co->sig_int, NULL);
  uv_close((uv_handle_t *)&co->sig_hup, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  xf__coord *co = h->data;
  if (signum == SIGHUP) {
    /* Sessions already open stay; handshakes from now on meet the new CRL.
     * A CRL that does not load leaves the old one in force. */
    xf_errctx err = {0};
    xf_notify_reloading();
    if (xf_tls_reload_crl(co->tls, &err) != XF_OK) {
      XF_ERROR("crl_reload_failed", "reason=\"%s\" file=\"%s\" kept=\"the CRL loaded before\"",
               err.msg, err.file);
      xf_notify_ready("serving on port %d; the CRL reload failed (%s), the previous CRL is in "
                      "force", xf_listener_port(co->listener), err.msg);
    } else {
      xf_notify_ready("serving on port %d; CRL reloaded", xf_listener_port(co->listener));
    }
    return;
  }
  stop(co, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_tick(uv_timer_t *t) {
  xf__coord *co = t->data;
  if (!co->stopping) xf__runs_tick(co);
}

/* ---- start and stop ----------------------------------------------------------------------- */

static xf_err write_port_file(const xf__coord *co, xf_errctx *err) {
  if (!co->cfg.port_file[0]) return XF_OK;
  char buf[32];
  int n = snprintf(buf, sizeof(buf), "%d\n", xf_listener_port(co->listener));
  return xf_file_write_atomic(co->cfg.port_file, buf, (size_t)n, 0644, err);
}

static xf_err our_name(xf__coord *co, xf_errctx *err) {
  X509 *cert = NULL;
  XF_GUARD(xf_pki_cert_load(co->cfg.cert, &cert, err));
  xf_spiffe_id id;
  xf_err rc = xf_pki_peer_identity(cert, &id, err);
  X509_free(cert);
  XF_GUARD(rc);
  if (id.kind != XF_PKI_KIND_COORDINATOR)
    return xf_fail(err, XF_EINVAL, "%s is a %s certificate; xfed-coord needs one issued with "
                                   "'xfed pki issue --kind coordinator'",
                   co->cfg.cert, xf_pki_kind_name(id.kind));
  if (co->cfg.regional && strcmp(id.region, co->cfg.region) != 0)
    return xf_fail(err, XF_EINVAL,
                   "--region is %s but the certificate %s is for region '%s'; issue one with "
                   "'xfed pki issue --kind coordinator --region %s'",
                   co->cfg.region, co->cfg.cert, id.region, co->cfg.region);
  if (!co->cfg.regional && id.region[0])
    return xf_fail(err, XF_EINVAL,
                   "the certificate %s is a regional aggregator's (region %s); run with --role "
                   "regional --region %s, or issue a global one without --region",
                   co->cfg.cert, id.region, id.region);
  snprintf(co->name, sizeof(co->name), "%s", id.name);
  return XF_OK;
}

/* A journal that fails its integrity check, or that SQLite cannot read as
 * a database: refused at start, logged, with the way back. */
static xf_err journal_damaged(const xf__coord *co, const char *path, xf_errctx *err) {
  char damage[sizeof(err->msg)];
  snprintf(damage, sizeof(damage), "%s", err->msg);
  XF_ERROR("journal_damaged", "file=%s damage=\"%s\"", path, damage);
  xf_errctx_file(err, path);
  /* The file is err's; the message has room for the damage and the way
   * back (the log line above has the damage whole). */
  return xf_fail(err, XF_EINTEGRITY,
                 "the journal is damaged (%.160s); the coordinator does not start on it. "
                 "Restore the last backup: move coord.db, coord.db-wal and coord.db-shm out "
                 "of %.60s, copy the FILE that 'xfed-coord backup --state %.60s --out FILE' "
                 "made there as coord.db, and start again",
                 damage, co->cfg.state_dir, co->cfg.state_dir);
}

static xf_err open_state(xf__coord *co, xf_errctx *err) {
  if (mkdir(co->cfg.state_dir, 0700) != 0 && errno != EEXIST)
    return xf_fail(err, XF_EIO, "cannot create the state directory %s: %s", co->cfg.state_dir,
                   strerror(errno));
  struct stat st;
  if (stat(co->cfg.state_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
    xf_errctx_file(err, co->cfg.state_dir);
    return xf_fail(err, XF_EEXISTS, "is %s, not a directory: give the coordinator's state "
                   "directory with --state", xf_file_kind(st.st_mode));
  }
  char path[XF_COORD_PATH_MAX + 32];
  if (co->cfg.regional) {
    /* A regional aggregator keeps no journal, only its audit trail. */
    snprintf(path, sizeof(path), "%s/audit.db", co->cfg.state_dir);
    return xf_audit_open(path, &co->audit, err);
  }
  snprintf(path, sizeof(path), "%s/coord.db", co->cfg.state_dir);
  xf_err rc = xf_journal_open(path, &co->db, err);
  /* SQLite's words for a file it cannot read as a database at all. */
  bool unreadable = rc == XF_EDB && (strstr(err->msg, "malformed") || strstr(err->msg, "not a "
                                                                                      "database"));
  if (rc == XF_OK) rc = xf_db_quick_check(co->db, err);
  else if (!unreadable) return rc;
  /* Only damage is answered with the way back: a check that fails for
   * another reason (I/O, locks) is reported as it is. */
  if (rc == XF_EINTEGRITY || (rc != XF_OK && unreadable)) return journal_damaged(co, path, err);
  if (rc != XF_OK) return rc;
  co->audit = co->db;
  char blobs[XF_COORD_PATH_MAX + 32];
  snprintf(blobs, sizeof(blobs), "%s/blobs", co->cfg.state_dir);
  XF_GUARD(xf_blob_store_open(blobs, &co->blobs, err));
  if ((rc = xf_journal_check_blobs(co->db, co->blobs, err)) == XF_ENOENT) {
    XF_ERROR("journal_damaged", "file=%s damage=\"%s\"", blobs, err->msg);
    char damage[sizeof(err->msg)]; /* xf_fail writes err->msg: not from itself */
    snprintf(damage, sizeof(damage), "%s", err->msg);
    xf_errctx_file(err, blobs);
    return xf_fail(err, XF_EINTEGRITY,
                   "%.600s; the coordinator does not start without the models it resumes "
                   "from. Restore %s from the copy taken together with the journal's backup "
                   "('xfed-coord backup' copies only the journal), then start again",
                   damage, blobs);
  }
  return rc;
}

/* The caps and the budget every connection runs under: the cap on
 * connections fits the descriptor limit (raised toward the hard limit when
 * it is lower), so the listener, the journal and the blob store always have
 * descriptors left. The cap per address, unless configured, is at most a
 * quarter of that: one source that fills its share leaves three quarters of
 * the descriptors to everybody else, the researchers' CLI included. */
static void guard_connections(xf__coord *co) {
  size_t wanted = co->cfg.max_connections ? co->cfg.max_connections : XF_CONN_MAX_CONNS;
  size_t budget = co->cfg.buffer_budget ? co->cfg.buffer_budget : XF_CONN_BUFFER_BUDGET;
  size_t descriptors = 0;
  size_t cap = xf_conn_fit_descriptors(wanted, &descriptors);
  size_t per_address = co->cfg.max_connections_per_address;
  if (!per_address) {
    per_address = cap / 4 < XF_CONN_MAX_CONNS_PER_ADDR ? cap / 4 : XF_CONN_MAX_CONNS_PER_ADDR;
    if (!per_address) per_address = 1;
  }
  if (cap < wanted)
    XF_WARN("connection_cap_lowered",
            "max_connections=%zu configured=%zu descriptors=%zu reserve=%u reason=\"the descriptor "
            "limit leaves room for %zu connections; raise it (ulimit -n, systemd LimitNOFILE=) "
            "to at least %zu\"",
            cap, wanted, descriptors, XF_CONN_FD_RESERVE, cap, wanted + XF_CONN_FD_RESERVE);
  xf_conn_guard_init(&co->guard, cap, per_address, budget);
  const xf_conn_opts *o = xf__conn_opts(co, true);
  XF_INFO("connection_limits",
          "max_connections=%zu max_connections_per_address=%zu descriptors=%zu "
          "buffer_budget=%zu handshake_timeout_ms=%u min_frame_rate=%u "
          "frame_rate_window_ms=%u frame_grace_ms=%u",
          cap, per_address, descriptors, budget,
          o->handshake_timeout_ms ? o->handshake_timeout_ms : XF_CONN_HANDSHAKE_TIMEOUT_MS,
          o->progress.min_rate ? o->progress.min_rate : XF_PROGRESS_MIN_RATE,
          o->progress.window_ms ? o->progress.window_ms : XF_PROGRESS_WINDOW_MS,
          o->progress.grace_ms ? o->progress.grace_ms : XF_PROGRESS_GRACE_MS);
}

static void free_site(xf__site *s) {
  xf_free(s->datasets);
  free_behind(s);
  xf_free(s);
}

xf_err xf_coord_run(const xf_coord_config *cfg, xf_errctx *err) {
  xf__coord *co = xf_calloc(1, sizeof(*co));
  if (!co) return xf_fail(err, XF_ENOMEM, "out of memory");
  co->cfg = *cfg;
  g_co = co;
  xf__stats_init(co);
  if (!co->cfg.max_staged) co->cfg.max_staged = 4;
  if (!(co->cfg.resume_grace_s > 0)) co->cfg.resume_grace_s = 30;
  if (!(co->cfg.eval_timeout_s > 0)) co->cfg.eval_timeout_s = 120;
  xf_err rc = XF_OK;
  bool loop_up = false;
  /* A --port-file that may not be replaced is refused before anything starts. */
  if (co->cfg.port_file[0] && (rc = xf_file_check_target(co->cfg.port_file, err)) != XF_OK)
    goto out;
  if ((rc = our_name(co, err)) != XF_OK) goto out;
  xf_tls_config tc = {co->cfg.cert, co->cfg.key, co->cfg.ca, co->cfg.crl};
  if ((rc = xf_tls_new(&tc, &co->tls, err)) != XF_OK) goto out;
  if ((rc = open_state(co, err)) != XF_OK) goto out;
  /* From here a copy of the trail's main file alone says that it was taken
   * from a running daemon (policy/audit.h). */
  if ((rc = xf_audit_keeper_start(co->audit, xf__now(), err)) != XF_OK) goto out;
  if (!co->cfg.regional && xf_noise_new_random(&co->noise) != XF_OK) {
    rc = xf_fail(err, XF_ENOMEM, "cannot set up the noise generator (secure memory)");
    goto out;
  }
  if (uv_loop_init(&co->loop) != 0) {
    rc = xf_fail(err, XF_EIO, "cannot start the event loop");
    goto out;
  }
  loop_up = true;
  guard_connections(co);
  if ((rc = xf_listen(&co->loop, co->tls, co->cfg.listen_host, co->cfg.listen_port,
                      xf__conn_opts(co, true), &co->listener, err)) != XF_OK)
    goto out;
  xf_listener_set_user(co->listener, co);
  if ((rc = write_port_file(co, err)) != XF_OK) goto out;
  if ((rc = xf__metrics_start(co, err)) != XF_OK) goto out;
  if ((rc = xf__dashboard_start(co, err)) != XF_OK) goto out;
  uv_timer_init(&co->loop, &co->tick);
  co->tick.data = co;
  uv_check_init(&co->loop, &co->pump);
  co->pump.data = co;
  uv_check_start(&co->pump, on_pump_check);
  uv_timer_start(&co->tick, on_tick, TICK_MS, TICK_MS);
  uv_signal_t *sigs[] = {&co->sig_term, &co->sig_int, &co->sig_hup};
  int nums[] = {SIGTERM, SIGINT, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(&co->loop, sigs[i]);
    sigs[i]->data = co;
    uv_signal_start(sigs[i], on_signal, nums[i]);
  }
  XF_INFO("coordinator_started",
          "name=%s role=%s region=%s residency_policy=%s listen=%s port=%d federation=%s",
          co->name, co->cfg.regional ? "regional" : "global",
          co->cfg.region[0] ? co->cfg.region : "-",
          co->cfg.regional ? "from-tasks" : co->cfg.residency_off ? "off" : "enforce",
          co->cfg.listen_host, xf_listener_port(co->listener), xf_tls_federation(co->tls));
  if (!co->cfg.regional && co->cfg.residency_off)
    XF_WARN("residency_policy_off", "reason=\"started with --residency-policy off: every site of "
            "a job's dataset is eligible, wherever it is\"");
  if (co->cfg.regional)
    xf__upstream_start(co);
  else
    xf__runs_schedule(co);
  /* Listening, with the journal recovered and its runs resumed: ready. */
  xf_notify_start(&co->notify, &co->loop);
  xf_notify_ready("%s %s serving on %s:%d", co->cfg.regional ? "regional aggregator" : "coordinator",
                  co->name, co->cfg.listen_host, xf_listener_port(co->listener));
  uv_run(&co->loop, UV_RUN_DEFAULT);
  /* What the bounds on connections did over the whole run. */
  const xf_conn_guard *g = &co->guard;
  XF_INFO("connection_totals",
          "accepted=%llu refused_max_connections=%llu refused_max_connections_per_address=%llu "
          "ended_handshake=%llu ended_slow=%llu ended_frame=%llu ended_idle=%llu "
          "budget_peak=%zu budget_waits=%llu",
          (unsigned long long)g->accepted, (unsigned long long)g->refused[XF_CONN_CAP_TOTAL],
          (unsigned long long)g->refused[XF_CONN_CAP_PER_ADDRESS],
          (unsigned long long)g->ended[XF_CONN_END_HANDSHAKE],
          (unsigned long long)g->ended[XF_CONN_END_SLOW],
          (unsigned long long)g->ended[XF_CONN_END_FRAME],
          (unsigned long long)g->ended[XF_CONN_END_IDLE], g->budget.peak,
          (unsigned long long)g->budget.waits);
  XF_INFO("coordinator_stopped", "name=%s", co->name);

out:
  if (loop_up) {
    if (!co->stopping) {
      if (co->listener) xf_listener_close(co->listener, NULL);
      co->listener = NULL;
    }
    xf__metrics_stop(co);
    xf__dashboard_stop(co);
    uv_walk(&co->loop, close_walk, NULL);
    uv_run(&co->loop, UV_RUN_DEFAULT);
    uv_loop_close(&co->loop);
  }
  while (co->runs) {
    xf__run *run = co->runs;
    co->runs = run->next;
    xf__run_free(run);
  }
  while (co->sites) {
    xf__site *s = co->sites;
    co->sites = s->next;
    free_site(s);
  }
  while (co->peers) {
    xf__peer *p = co->peers;
    co->peers = p->next;
    xf__stream_drop(p, NULL);
    xf__document_drop(p);
    xf_free(p);
  }
  while (co->residuals) {
    struct xf__residual *r = co->residuals;
    co->residuals = r->next;
    xf_free(r->values);
    xf_free(r);
  }
  xf_noise_free(co->noise);
  xf_blob_store_close(co->blobs);
  if (co->audit) {
    xf_errctx kerr = {0};
    if (xf_audit_keeper_stop(co->audit, xf__now(), &kerr) != XF_OK)
      XF_WARN("audit_checkpoint_failed", "when=stop reason=\"%s\"", kerr.msg);
  }
  if (co->audit != co->db) xf_db_close(co->audit);
  xf_db_close(co->db);
  xf_policy_free(co->policy);
  xf_tls_free(co->tls);
  xf_free(co);
  g_co = NULL;
  return rc;
}

xf_err xf_coord_backup(const char *state_dir, const char *dest, xf_errctx *err) {
  /* A global coordinator keeps its journal (with the trail) in coord.db; a
   * regional aggregator keeps only its trail, in audit.db. */
  char journal[XF_COORD_PATH_MAX + 32], trail[XF_COORD_PATH_MAX + 32];
  snprintf(journal, sizeof(journal), "%s/coord.db", state_dir);
  snprintf(trail, sizeof(trail), "%s/audit.db", state_dir);
  struct stat st;
  bool global = stat(journal, &st) == 0;
  if (!global && stat(trail, &st) != 0)
    return xf_fail(err, XF_ENOENT, "no journal at %s and no audit trail at %s: is --state the "
                                   "state directory of a coordinator or a regional aggregator?",
                   journal, trail);
  xf_db *db = NULL;
  XF_GUARD(global ? xf_journal_open(journal, &db, err) : xf_audit_open(trail, &db, err));
  xf_err rc = xf_db_backup(db, dest, err);
  xf_db_close(db);
  return rc;
}
