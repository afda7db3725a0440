/* SPDX-License-Identifier: Apache-2.0 */
/* Connections over libuv TCP: OpenSSL runs on memory BIOs, fed from the read
 * callback and drained into uv_write, so no call ever blocks the loop. */
#include "net/conn.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include "base/alloc.h"
#include "base/log.h"
#include "net/frame.h"

typedef enum conn_state {
  CONN_CONNECTING, /* dialing: waiting for the TCP connect */
  CONN_HANDSHAKE,  /* TCP up, TLS handshake running */
  CONN_OPEN,       /* peer verified and accepted by on_connect */
  CONN_CLOSING     /* on the way to on_close */
} conn_state;

/* The five handles of a connection; it is freed when all have closed. */
#define CONN_HANDLES 5

struct xf_conn {
  uv_tcp_t tcp;
  uv_timer_t heartbeat; /* fires after heartbeat_ms without sending */
  uv_timer_t idle;      /* fires after idle_timeout_ms without receiving; close deadline */
  uv_timer_t kick;      /* delivers buffered frames after a resume, from the loop */
  uv_timer_t watch;     /* the handshake deadline; once authenticated, the progress checks */
  uv_connect_t connect;
  uv_shutdown_t shutdown;
  uv_loop_t *loop;
  xf_tls *tls;
  SSL *ssl;
  /* The TLS byte path (conn_bio): ciphertext read from the socket is read
   * by OpenSSL straight from libuv's buffer (`in`); what it did not take
   * before the connection stopped reading is kept (`keep`) until it does.
   * Ciphertext OpenSSL writes goes straight into the write request `out`,
   * handed to the socket whole. Nothing of either is held between reads
   * and writes, so an idle connection holds no buffer. */
  const uint8_t *in;
  size_t in_len;
  uint8_t *keep;
  size_t keep_off, keep_len;
  struct conn_write *out;
  size_t out_hint; /* the ciphertext the running SSL_write makes, to size `out` */
  xf_frame_decoder *decoder;
  xf_conn_opts opts;
  size_t peer_max_frame;
  conn_state state;
  bool tcp_connected;
  bool tls_failed; /* a fatal TLS error: no close_notify can follow */
  bool paused;
  bool starved; /* a frame waits for room in the guard's budget: not reading */
  bool authenticated; /* xf_conn_authenticated was called */
  bool busy;   /* xf_conn_send refused for the high-water mark: on_drain owed */
  bool silent; /* discarded before the caller saw it: no on_close */
  bool dialled; /* this side connected (xf_conn_dial) */
  bool cert_requested; /* dialled: the server asked for our certificate */
  int handles_open;
  size_t queued; /* ciphertext bytes in uv_write requests not yet completed */
  uint64_t heartbeat_seq;
  uint64_t heartbeats_received;
  uint64_t bytes_in, bytes_out; /* TLS bytes read from and handed to the socket */
  bool have_peer;
  xf_spiffe_id peer;
  char addr[80];
  xf_conn_reason why;
  void *user;
  xf_conn_guard *guard;
  xf_progress progress;
  /* On the guard's list of accepted connections (oldest first), and of
   * those waiting for its budget. */
  bool accepted, waiting;
  uint64_t accepted_ms; /* the loop's clock at the accept */
  struct xf_conn *acc_prev, *acc_next, *wait_prev, *wait_next;
  uint8_t ip[16]; /* the peer's IPv4 address or IPv6 /64, for the cap per address */
  size_t ip_len;  /* 4 or 8; 0 when unknown */
  /* Decrypted bytes not yet fed to the decoder: in the loop thread's
   * buffer while conn_deliver runs, copied to the heap (plain_kept) only
   * when it stops with some left (paused, starved, or a frame delivered
   * last). */
  uint8_t *plain;
  size_t plain_off, plain_len;
  bool plain_kept;
};

/* libuv reads into this and OpenSSL decrypts from it before on_read
 * returns (what it leaves is copied to the connection's `keep`), so one
 * buffer serves every connection of a loop's thread. */
static _Thread_local uint8_t read_buf[65536];
/* What SSL_read decrypts into, one per thread for the same reason. */
static _Thread_local uint8_t plain_buf[16384];

typedef struct conn_write {
  uv_write_t req;
  xf_conn *conn;
  size_t len, cap;
  uint8_t data[];
} conn_write;

struct xf_listener {
  uv_tcp_t tcp;
  uv_loop_t *loop;
  xf_tls *tls;
  xf_conn_opts opts;
  int port;
  xf_listener_close_cb on_closed;
  void *user;
};

static const char *const end_messages[] = {
#define XF__CONN_END_MSG(name, msg) msg,
    XF_CONN_END_MAP(XF__CONN_END_MSG)
#undef XF__CONN_END_MSG
};

const char *xf_conn_end_message(xf_conn_end end) {
  if ((unsigned)end >= XF_CONN_END_COUNT) return "unknown reason";
  return end_messages[end];
}

static const char *const end_words[] = {
#define XF__CONN_END_WORD(name, msg) #name,
    XF_CONN_END_MAP(XF__CONN_END_WORD)
#undef XF__CONN_END_WORD
};

static const char *const cap_names[] = {
#define XF__CONN_CAP_NAME(name, key) key,
    XF_CONN_CAP_MAP(XF__CONN_CAP_NAME)
#undef XF__CONN_CAP_NAME
};

const char *xf_conn_cap_name(xf_conn_cap cap) {
  if ((unsigned)cap >= XF_CONN_CAP_COUNT) return "unknown cap";
  return cap_names[cap];
}

xf_conn_cap xf_conn_cap_by_name(const char *key) {
  for (int i = 0; i < XF_CONN_CAP_COUNT; i++)
    if (strcmp(cap_names[i], key) == 0) return (xf_conn_cap)i;
  return XF_CONN_CAP_COUNT;
}

static size_t at_least_1(size_t n) { return n ? n : 1; }

void xf_conn_caps_default(size_t caps[XF_CONN_CAP_COUNT]) {
  size_t *c = caps;
  if (!c[XF_CONN_CAP_TOTAL]) c[XF_CONN_CAP_TOTAL] = XF_CONN_MAX_CONNS;
  size_t total = c[XF_CONN_CAP_TOTAL];
  if (!c[XF_CONN_CAP_PER_ADDRESS]) c[XF_CONN_CAP_PER_ADDRESS] = total;
  if (!c[XF_CONN_CAP_UNAUTHENTICATED])
    c[XF_CONN_CAP_UNAUTHENTICATED] =
        at_least_1(total / 2 < XF_CONN_MAX_UNAUTH ? total / 2 : XF_CONN_MAX_UNAUTH);
  size_t unauth = c[XF_CONN_CAP_UNAUTHENTICATED];
  if (!c[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS])
    c[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS] = at_least_1(
        unauth / 4 < XF_CONN_MAX_UNAUTH_PER_ADDR ? unauth / 4 : XF_CONN_MAX_UNAUTH_PER_ADDR);
  if (!c[XF_CONN_CAP_AUTHENTICATED]) c[XF_CONN_CAP_AUTHENTICATED] = total;
  if (!c[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS])
    c[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS] = c[XF_CONN_CAP_AUTHENTICATED];
}

/* ---- the guard --------------------------------------------------------------- */

static void on_kick(uv_timer_t *t);

/* Bytes went back to the budget: every waiting connection tries again, from
 * the loop, in the order they began to wait; each takes what fits. */
static void guard_released(xf_frame_budget *b) {
  xf_conn_guard *g = b->user;
  for (xf_conn *c = g->waiting_head; c; c = c->wait_next)
    if (!c->paused) uv_timer_start(&c->kick, on_kick, 0, 0);
}

void xf_conn_guard_init(xf_conn_guard *g, const size_t *caps, size_t budget) {
  memset(g, 0, sizeof(*g));
  if (caps) memcpy(g->cap, caps, sizeof(g->cap));
  g->early_drop_start = XF_CONN_EARLY_DROP_START_PERCENT;
  g->early_drop_rate = XF_CONN_EARLY_DROP_RATE_PERCENT;
  /* Which connections are dropped early is not for a peer to predict; the
   * time is a fallback that only a broken OpenSSL leaves. */
  uint64_t seed = 0;
  if (RAND_bytes((unsigned char *)&seed, sizeof(seed)) != 1) {
    ERR_clear_error();
    seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)g;
  }
  xf_rng_seed(&g->rng, seed, 0);
  g->budget.limit = budget;
  g->budget.on_release = guard_released;
  g->budget.user = g;
}

size_t xf_conn_fit_descriptors(size_t wanted, size_t *limit) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    *limit = 0;
    return wanted;
  }
  rlim_t need = (rlim_t)wanted + XF_CONN_FD_RESERVE;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    struct rlimit up = rl;
    up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
  }
  *limit = rl.rlim_cur == RLIM_INFINITY ? SIZE_MAX : (size_t)rl.rlim_cur;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return wanted;
  return rl.rlim_cur > XF_CONN_FD_RESERVE + 1 ? (size_t)rl.rlim_cur - XF_CONN_FD_RESERVE : 1;
}

static void guard_wait(xf_conn *c) {
  xf_conn_guard *g = c->guard;
  if (c->waiting) return;
  c->waiting = true;
  c->wait_prev = g->waiting_tail;
  c->wait_next = NULL;
  if (g->waiting_tail) g->waiting_tail->wait_next = c;
  else g->waiting_head = c;
  g->waiting_tail = c;
}

static void guard_unwait(xf_conn *c) {
  xf_conn_guard *g = c->guard;
  if (!c->waiting) return;
  c->waiting = false;
  if (c->wait_prev) c->wait_prev->wait_next = c->wait_next;
  else g->waiting_head = c->wait_next;
  if (c->wait_next) c->wait_next->wait_prev = c->wait_prev;
  else g->waiting_tail = c->wait_prev;
  c->wait_prev = c->wait_next = NULL;
}

/* Early drop for one cap (MaxStartups start:rate:full with full = cap):
 * with n unauthenticated connections open, whether a newcomer drops one. */
static bool guard_early_drop(xf_conn_guard *g, size_t n, size_t cap) {
  if (!cap || n == 0) return false;
  if (n >= cap) return true;
  size_t start = cap * g->early_drop_start / 100;
  if (n < start || start >= cap) return false;
  double rate = (double)(g->early_drop_rate > 100 ? 100 : g->early_drop_rate) / 100.0;
  double p = rate + (1.0 - rate) * (double)(n - start) / (double)(cap - start);
  return xf_rng_uniform(&g->rng) < p;
}

/* What a drop leaves: one fewer of every count the dropped one is in. */
static void load_less_one(xf_conn_load *l, bool of_address) {
  l->open--;
  l->unauthenticated--;
  if (of_address) {
    l->from_address--;
    l->unauthenticated_from_address--;
  }
}

static xf_conn_admission admission_refused(xf_conn_cap cap) {
  return (xf_conn_admission){.refused = cap,
                             .drop_from_address_cap = XF_CONN_CAP_COUNT,
                             .drop_any_cap = XF_CONN_CAP_COUNT};
}

xf_conn_admission xf_conn_guard_admit(xf_conn_guard *g, const xf_conn_load *load) {
  xf_conn_admission a = admission_refused(XF_CONN_CAP_COUNT);
  a.admit = true;
  xf_conn_load l = *load;
  const size_t *cap = g->cap;
  /* The newcomer's address first: its own handshakes make room for it. */
  if (guard_early_drop(g, l.unauthenticated_from_address,
                       cap[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS])) {
    a.drop_from_address = true;
    a.drop_from_address_cap = XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS;
    load_less_one(&l, true);
  }
  if (cap[XF_CONN_CAP_PER_ADDRESS] && l.from_address >= cap[XF_CONN_CAP_PER_ADDRESS]) {
    if (!a.drop_from_address && l.unauthenticated_from_address > 0) {
      a.drop_from_address = true;
      a.drop_from_address_cap = XF_CONN_CAP_PER_ADDRESS;
      load_less_one(&l, true);
    }
    if (l.from_address >= cap[XF_CONN_CAP_PER_ADDRESS])
      return admission_refused(XF_CONN_CAP_PER_ADDRESS);
  }
  if (guard_early_drop(g, l.unauthenticated, cap[XF_CONN_CAP_UNAUTHENTICATED])) {
    a.drop_any = true;
    a.drop_any_cap = XF_CONN_CAP_UNAUTHENTICATED;
    load_less_one(&l, false);
  }
  if (cap[XF_CONN_CAP_TOTAL] && l.open >= cap[XF_CONN_CAP_TOTAL]) {
    if (!a.drop_any && l.unauthenticated > 0) {
      a.drop_any = true;
      a.drop_any_cap = XF_CONN_CAP_TOTAL;
      load_less_one(&l, false);
    }
    if (l.open >= cap[XF_CONN_CAP_TOTAL]) return admission_refused(XF_CONN_CAP_TOTAL);
  }
  return a;
}

xf_conn_cap xf_conn_guard_authenticate(const xf_conn_guard *g, size_t authenticated,
                                       size_t from_address) {
  if (g->cap[XF_CONN_CAP_AUTHENTICATED] && authenticated >= g->cap[XF_CONN_CAP_AUTHENTICATED])
    return XF_CONN_CAP_AUTHENTICATED;
  if (g->cap[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS] &&
      from_address >= g->cap[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS])
    return XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS;
  return XF_CONN_CAP_COUNT;
}

static bool same_address(const xf_conn *a, const xf_conn *b) {
  return a->ip_len && a->ip_len == b->ip_len && memcmp(a->ip, b->ip, a->ip_len) == 0;
}

/* A connection that is closing is on its way out: no cap counts it as
 * unauthenticated, and none drops it again. */
static bool guard_droppable(const xf_conn *o) {
  return !o->authenticated && o->state != CONN_CLOSING;
}

/* What is open as c arrives, c excluded: the connections holding a
 * descriptor (libuv closes a socket's descriptor in uv_close, so one
 * dropped earlier in this loop turn holds none). A scan of at most the
 * total cap's entries costs microseconds, once per accept. */
static xf_conn_load guard_load(const xf_conn_guard *g, const xf_conn *c) {
  xf_conn_load l = {0};
  for (const xf_conn *o = g->accepted_head; o; o = o->acc_next) {
    if (o == c || uv_is_closing((const uv_handle_t *)&o->tcp)) continue;
    bool here = same_address(o, c);
    l.open++;
    l.from_address += here;
    if (guard_droppable(o)) {
      l.unauthenticated++;
      l.unauthenticated_from_address += here;
    }
  }
  return l;
}

/* Authenticated connections open from c's address, and in all; c excluded. */
static size_t guard_authenticated(const xf_conn_guard *g, const xf_conn *c, size_t *from) {
  size_t n = 0;
  *from = 0;
  for (const xf_conn *o = g->accepted_head; o; o = o->acc_next) {
    if (o == c || !o->authenticated || o->state == CONN_CLOSING) continue;
    n++;
    *from += same_address(o, c);
  }
  return n;
}

/* The unauthenticated connection a newcomer c drops (of c's address when
 * from_address): the oldest still in its TLS handshake, else the oldest
 * whose certificate was verified and whose hello is pending, which an
 * honest peer completes within a round trip. NULL when there is none. */
static xf_conn *guard_victim(const xf_conn_guard *g, const xf_conn *c, bool from_address) {
  xf_conn *verified = NULL;
  for (xf_conn *o = g->accepted_head; o; o = o->acc_next) {
    if (o == c || !guard_droppable(o) || (from_address && !same_address(o, c))) continue;
    if (o->state != CONN_OPEN) return o;
    if (!verified) verified = o;
  }
  return verified;
}

/* ---- closing --------------------------------------------------------------- */

static void conn_finish(xf_conn *c) {
  if (!c->silent && c->opts.on_close) c->opts.on_close(c, &c->why);
  SSL_free(c->ssl);
  if (c->guard) {
    guard_unwait(c);
    if (c->accepted) {
      xf_conn_guard *g = c->guard;
      if (c->acc_prev) c->acc_prev->acc_next = c->acc_next;
      else g->accepted_head = c->acc_next;
      if (c->acc_next) c->acc_next->acc_prev = c->acc_prev;
      else g->accepted_tail = c->acc_prev;
      g->open--;
      if (!c->authenticated) g->unauthenticated--;
    }
  }
  xf_frame_decoder_free(c->decoder); /* gives its reservation back */
  xf_free(c->out);
  xf_free(c->keep);
  if (c->plain_kept) xf_free(c->plain);
  xf_free(c);
}

static void on_handle_closed(uv_handle_t *h) {
  xf_conn *c = h->data;
  if (--c->handles_open == 0) conn_finish(c);
}

static void conn_close_handles(xf_conn *c) {
  uv_handle_t *hs[CONN_HANDLES] = {(uv_handle_t *)&c->tcp, (uv_handle_t *)&c->heartbeat,
                                   (uv_handle_t *)&c->idle, (uv_handle_t *)&c->kick,
                                   (uv_handle_t *)&c->watch};
  for (int i = 0; i < CONN_HANDLES; i++)
    if (!uv_is_closing(hs[i])) uv_close(hs[i], on_handle_closed);
}

static void conn_flush(xf_conn *c);

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status; /* closed either way; the reason was recorded before */
  conn_close_handles(req->data);
}

static void on_idle(uv_timer_t *t);

/* Ends the connection once: records why, sends close_notify after an intact
 * session (an alert after a failed one is already in c->out), lets queued bytes
 * go out, and closes the handles after the socket's shutdown or the close
 * timeout, whichever comes first. */
XF_PRINTF(5, 6)
static void conn_end(xf_conn *c, xf_conn_end end, xf_err code, xf_pki_verdict verdict,
                     const char *fmt, ...) {
  if (c->state == CONN_CLOSING) return;
  conn_state was = c->state;
  c->state = CONN_CLOSING;
  c->why.end = end;
  c->why.code = code;
  c->why.verdict = verdict;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why.msg, sizeof(c->why.msg), fmt, ap);
  va_end(ap);
  uv_timer_stop(&c->heartbeat);
  uv_timer_stop(&c->idle);
  uv_timer_stop(&c->kick);
  uv_timer_stop(&c->watch);
  if (c->guard) c->guard->ended[end]++;
  if (!c->silent) {
    /* With a guard, the running total of ends for this reason follows. */
    char total[32] = "";
    if (c->guard)
      snprintf(total, sizeof(total), " total=%llu", (unsigned long long)c->guard->ended[end]);
    xf_log(end == XF_CONN_END_CLOSED || end == XF_CONN_END_PEER_CLOSED ? XF_LOG_INFO : XF_LOG_WARN,
           "conn_closed", "addr=%s reason=%s code=%s msg=\"%s\"%s", c->addr, end_words[end],
           xf_err_name(code), c->why.msg, total);
  }
  if (!c->tcp_connected) {
    conn_close_handles(c); /* cancels a pending connect */
    return;
  }
  uv_read_stop((uv_stream_t *)&c->tcp);
  if (was == CONN_OPEN && !c->tls_failed) {
    ERR_clear_error();
    (void)SSL_shutdown(c->ssl); /* queues close_notify; the peer's is not awaited */
    ERR_clear_error();
  }
  conn_flush(c);
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  uint32_t deadline = c->opts.close_timeout_ms;
  uv_timer_start(&c->idle, on_idle, deadline, 0);
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0) conn_close_handles(c);
}

void xf_conn_close(xf_conn *c) {
  conn_end(c, XF_CONN_END_CLOSED, XF_OK, XF_PKI_OK, "closed by this side");
}

/* A fatal TLS error: the verdict when our check of the peer's certificate
 * failed, OpenSSL's reason (an alert from the peer, say) otherwise. */
static void conn_tls_failed(xf_conn *c, const char *what) {
  long vr = SSL_get_verify_result(c->ssl);
  unsigned long e = ERR_peek_last_error();
  char reason[256];
  ERR_error_string_n(e, reason, sizeof(reason));
  ERR_clear_error();
  c->tls_failed = true;
  if (vr != X509_V_OK) {
    xf_pki_verdict v = xf_pki_verdict_from_x509(vr);
    conn_end(c, XF_CONN_END_TLS, XF_EINTEGRITY, v, "%s: peer certificate refused: %s (%s)", what,
             xf_pki_verdict_message(v), X509_verify_cert_error_string(vr));
  } else {
    conn_end(c, XF_CONN_END_TLS, XF_EIO, XF_PKI_OK, "%s: %s", what,
             e ? reason : "the peer broke the TLS session");
  }
}

/* ---- the TLS byte path ------------------------------------------------------ */

/* A frame goes through TLS in slices of this many bytes, each handed to the
 * socket before the next, so that the ciphertext of a megabyte chunk is
 * never held whole: four TLS records' worth. */
#define XF__WRITE_SLICE (64u * 1024u)
/* The ciphertext of n plaintext bytes in TLS 1.3 records of at most 16 KiB,
 * each with a 5-byte header, its content type and a 16-byte tag. */
#define XF__SEALED_LEN(n) ((n) + ((n) / 16384u + 1u) * 22u)

/* The one BIO that stands for the socket on both sides of a connection's
 * TLS session (SSL_set_bio with it twice): OpenSSL reads ciphertext from
 * what on_read was handed (c->keep first, then c->in) and writes it into
 * the next write request (c->out), so no ciphertext is copied between
 * buffers of our own and none outlives its read or its write. */
static int bio_read(BIO *b, char *buf, int size) {
  xf_conn *c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  if (size <= 0) return 0;
  size_t want = (size_t)size, n = 0;
  if (c->keep_off < c->keep_len) {
    n = c->keep_len - c->keep_off < want ? c->keep_len - c->keep_off : want;
    memcpy(buf, c->keep + c->keep_off, n);
    c->keep_off += n;
    if (c->keep_off == c->keep_len) {
      xf_free(c->keep);
      c->keep = NULL;
      c->keep_off = c->keep_len = 0;
    }
  } else if (c->in_len > 0) {
    n = c->in_len < want ? c->in_len : want;
    memcpy(buf, c->in, n);
    c->in += n;
    c->in_len -= n;
  } else {
    BIO_set_retry_read(b); /* more comes with the next read */
    return -1;
  }
  return (int)n;
}

static int bio_write(BIO *b, const char *data, int len) {
  xf_conn *c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  if (len <= 0) return 0;
  size_t n = (size_t)len;
  conn_write *w = c->out;
  if (!w || w->cap - w->len < n) {
    /* Room for what is being written now (c->out_hint: the slice's
     * ciphertext), so that a slice is one write request. */
    size_t have = w ? w->len : 0;
    size_t cap = have + n > c->out_hint ? have + n : c->out_hint;
    if (cap < 4096) cap = 4096;
    w = xf_realloc(w, sizeof(*w) + cap);
    if (!w) return -1; /* OpenSSL fails the write; the connection ends */
    if (!c->out) w->len = 0;
    w->cap = cap;
    w->conn = c;
    c->out = w;
  }
  memcpy(w->data + w->len, data, n);
  w->len += n;
  return len;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)num;
  (void)ptr;
  const xf_conn *c = BIO_get_data(b);
  switch (cmd) {
  case BIO_CTRL_FLUSH: return 1; /* conn_flush hands c->out to the socket */
  case BIO_CTRL_PENDING: return c ? (long)(c->keep_len - c->keep_off + c->in_len) : 0;
  case BIO_CTRL_WPENDING: return c && c->out ? (long)c->out->len : 0;
  default: return 0;
  }
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static int bio_destroy(BIO *b) {
  BIO_set_data(b, NULL); /* the connection is not the BIO's */
  return 1;
}

static BIO_METHOD *conn_bio_method;
static pthread_once_t conn_bio_once = PTHREAD_ONCE_INIT;

static void conn_bio_method_make(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "xfed connection");
  if (!m || !BIO_meth_set_read(m, bio_read) || !BIO_meth_set_write(m, bio_write) ||
      !BIO_meth_set_ctrl(m, bio_ctrl) || !BIO_meth_set_create(m, bio_create) ||
      !BIO_meth_set_destroy(m, bio_destroy)) {
    BIO_meth_free(m);
    return;
  }
  conn_bio_method = m; /* for the process's life */
}

/* The ciphertext on_read was handed that OpenSSL has not read yet (the
 * connection stopped reading: paused, starved, or a frame stays
 * undelivered) is copied to c->keep, after what is kept already. */
static bool conn_keep_input(xf_conn *c) {
  size_t n = c->in_len;
  const uint8_t *in = c->in;
  c->in = NULL;
  c->in_len = 0;
  if (n == 0 || c->state == CONN_CLOSING) return true;
  size_t kept = c->keep_len - c->keep_off;
  uint8_t *k = xf_malloc(kept + n);
  if (!k) return false;
  if (kept) memcpy(k, c->keep + c->keep_off, kept);
  memcpy(k + kept, in, n);
  xf_free(c->keep);
  c->keep = k;
  c->keep_off = 0;
  c->keep_len = kept + n;
  return true;
}

/* Decrypted bytes conn_deliver left in the thread's buffer move to the
 * heap, where they wait for the connection to read again; a heap copy that
 * has been fed whole is freed. */
static bool conn_keep_plain(xf_conn *c) {
  size_t left = c->plain_len - c->plain_off;
  if (c->plain_kept && left == 0) {
    xf_free(c->plain);
    c->plain = NULL;
    c->plain_kept = false;
    c->plain_off = c->plain_len = 0;
    return true;
  }
  if (c->plain_kept || left == 0) return true;
  if (c->state == CONN_CLOSING) {
    c->plain_off = c->plain_len = 0;
    return true;
  }
  uint8_t *k = xf_malloc(left);
  if (!k) return false;
  memcpy(k, c->plain + c->plain_off, left);
  c->plain = k;
  c->plain_kept = true;
  c->plain_off = 0;
  c->plain_len = left;
  return true;
}

/* ---- writing --------------------------------------------------------------- */

static void on_write(uv_write_t *req, int status) {
  conn_write *w = req->data;
  xf_conn *c = w->conn;
  c->queued -= w->len;
  if (c->guard) c->guard->queued -= w->len;
  xf_free(w);
  if (status < 0 && status != UV_ECANCELED) {
    conn_end(c, XF_CONN_END_IO, XF_EIO, XF_PKI_OK, "write failed: %s", uv_strerror(status));
    return;
  }
  if (c->busy && c->state == CONN_OPEN && c->queued <= c->opts.write_high_water / 2) {
    c->busy = false;
    if (c->opts.on_drain) c->opts.on_drain(c);
  }
}


/* Hands whatever ciphertext OpenSSL produced to the socket: the write
 * request it was written into goes as it is. */
static void conn_flush(xf_conn *c) {
  if (!c->tcp_connected || uv_is_closing((uv_handle_t *)&c->tcp)) return;
  conn_write *w = c->out;
  if (!w || w->len == 0) return;
  c->out = NULL;
  size_t n = w->len;
  w->req.data = w;
  uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)n);
  int e = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
  if (e == 0) c->bytes_out += n;
  if (e != 0) {
    xf_free(w);
    conn_end(c, XF_CONN_END_IO, XF_EIO, XF_PKI_OK, "write failed: %s", uv_strerror(e));
    return;
  }
  c->queued += n;
  if (c->guard) c->guard->queued += n;
}

static void on_heartbeat(uv_timer_t *t);

/* Encodes, encrypts and queues env. `force` skips the high-water check, for
 * the small frames of the connection itself (Heartbeat, Error). */
static xf_err conn_write_env(xf_conn *c, const Xfed__Envelope *env, bool force, xf_errctx *err) {
  if (c->state != CONN_OPEN)
    return xf_fail(err, XF_EINVAL, "connection %s is not open", c->addr);
  /* A small frame (a task, an acknowledgement, metrics: the protocol's
   * control) goes out even above the high-water mark, which a stream's
   * chunks reach in the normal course: a sender that dropped it there, or
   * had to queue it behind the stream, would lose a step of the protocol
   * (a TaskGo refused behind a 22 MB model stream stalled a round until its
   * deadline). Only twice the mark stops them, so that a peer that does not
   * read still holds a bounded queue. */
  const bool control = xf_frame_size(env) <= XF_CONN_CONTROL_FRAME_MAX &&
                       c->queued < 2 * c->opts.write_high_water;
  if (!force && !control && c->queued >= c->opts.write_high_water) {
    c->busy = true;
    return xf_fail(err, XF_ERANGE,
                   "busy: %zu bytes wait to be written to %s (high-water mark %zu); send again "
                   "after on_drain",
                   c->queued, c->addr, c->opts.write_high_water);
  }
  uint8_t *frame = NULL;
  size_t len = 0;
  xf_err rc = xf_frame_encode(env, c->peer_max_frame, &frame, &len, err);
  if (rc == XF_ERANGE) {
    return xf_fail(err, XF_EINVAL,
                   "frame of %zu bytes exceeds the peer's maximum of %zu bytes; cut it into "
                   "a tensor stream",
                   xf_frame_size(env) - XF_FRAME_HEADER, c->peer_max_frame);
  }
  if (rc != XF_OK) return rc;
  for (size_t off = 0; off < len;) {
    size_t n = len - off < XF__WRITE_SLICE ? len - off : XF__WRITE_SLICE;
    ERR_clear_error();
    c->out_hint = XF__SEALED_LEN(n);
    int w = SSL_write(c->ssl, frame + off, (int)n);
    c->out_hint = 0;
    if (w != (int)n) {
      xf_free(frame);
      conn_tls_failed(c, "TLS write failed");
      return xf_fail(err, XF_EIO, "%s", c->why.msg);
    }
    off += n;
    conn_flush(c);
    if (c->state != CONN_OPEN) break; /* the flush failed and ended c */
  }
  xf_free(frame);
  uv_timer_start(&c->heartbeat, on_heartbeat, c->opts.heartbeat_ms, 0);
  if (c->state != CONN_OPEN) return xf_fail(err, XF_EIO, "%s", c->why.msg);
  return XF_OK;
}

xf_err xf_conn_send(xf_conn *c, const Xfed__Envelope *env, xf_errctx *err) {
  return conn_write_env(c, env, false, err);
}

static void on_heartbeat(uv_timer_t *t) {
  xf_conn *c = t->data;
  if (c->state != CONN_OPEN) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  Xfed__Heartbeat hb = XFED__HEARTBEAT__INIT;
  hb.seq = ++c->heartbeat_seq;
  hb.unix_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HEARTBEAT;
  env.heartbeat = &hb;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (conn_write_env(c, &env, true, &err) != XF_OK)
    XF_WARN("conn_heartbeat_failed", "addr=%s msg=\"%s\"", c->addr, err.msg);
}

/* Whether the kernel holds bytes from the peer that this loop has not read
 * yet. After this process itself stalled (a loaded machine, a long
 * synchronous step), libuv runs the timers that fell due before it polls
 * the sockets: the idle timer would then blame a peer whose bytes are
 * waiting to be read. */
static bool conn_reading(const xf_conn *c);

static bool conn_unread(xf_conn *c) {
  uv_os_fd_t fd;
  int n = 0;
  if (!c->tcp_connected || uv_fileno((const uv_handle_t *)&c->tcp, &fd) != 0) return false;
  return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

static void on_idle(uv_timer_t *t) {
  xf_conn *c = t->data;
  if (c->state == CONN_CLOSING) {
    conn_close_handles(c); /* the close deadline: cut what is still queued */
    return;
  }
  if (conn_reading(c) && conn_unread(c)) {
    /* Not idle: this loop was late. The read that follows re-arms it. */
    uv_timer_start(&c->idle, on_idle, c->opts.idle_timeout_ms, 0);
    return;
  }
  conn_end(c, XF_CONN_END_IDLE, XF_EIO, XF_PKI_OK, "nothing received from %s for %u ms", c->addr,
           (unsigned)c->opts.idle_timeout_ms);
}

/* Before authentication, the handshake deadline; after, the progress rule's
 * periodic verdict. */
static void on_watch(uv_timer_t *t) {
  xf_conn *c = t->data;
  if (c->state == CONN_CLOSING) return;
  if (!c->authenticated) {
    conn_end(c, XF_CONN_END_HANDSHAKE, XF_EIO, XF_PKI_OK,
             "%s did not complete the %s within the handshake deadline of %u ms", c->addr,
             c->state == CONN_OPEN ? "hello exchange" : "TLS handshake",
             (unsigned)c->opts.handshake_timeout_ms);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_progress_check(&c->progress, uv_now(c->loop), &err) != XF_OK)
    conn_end(c, XF_CONN_END_SLOW, XF_EIO, XF_PKI_OK, "%s: %s", c->addr, err.msg);
}

/* Reading runs while neither the application (paused) nor the budget
 * (starved) holds it. These two start and stop what goes with it: the
 * socket's reads, the idle timeout and the progress rule's clock. */
static bool conn_reading(const xf_conn *c) { return !c->paused && !c->starved; }

static void conn_reading_stopped(xf_conn *c) {
  uv_timer_stop(&c->idle);
  xf_progress_pause(&c->progress, uv_now(c->loop));
  if (c->tcp_connected) uv_read_stop((uv_stream_t *)&c->tcp);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static bool conn_reading_started(xf_conn *c) {
  if (c->tcp_connected) {
    int e = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (e != 0) {
      conn_end(c, XF_CONN_END_IO, XF_EIO, XF_PKI_OK, "cannot read: %s", uv_strerror(e));
      return false;
    }
  }
  uv_timer_start(&c->idle, on_idle, c->opts.idle_timeout_ms, 0);
  xf_progress_resume(&c->progress, uv_now(c->loop));
  return true;
}

/* ---- reading --------------------------------------------------------------- */

/* The handshake finished: the peer must name our federation, and on_connect
 * may still refuse it. True when the connection is open. */
static bool conn_established(xf_conn *c) {
  if (c->dialled && !c->cert_requested) {
    c->why.http = c->why.https = true;
    conn_end(c, XF_CONN_END_TLS, XF_EIO, XF_PKI_OK,
             "the server asked for no client certificate, as every xfed daemon does (mutual "
             "TLS): it is not an xfed port");
    return false;
  }
  X509 *cert = SSL_get0_peer_certificate(c->ssl);
  xf_errctx e;
  xf_errctx_clear(&e);
  if (!cert || xf_pki_peer_identity(cert, &c->peer, &e) != XF_OK) {
    conn_end(c, XF_CONN_END_IDENTITY, XF_EINTEGRITY, XF_PKI_BAD_IDENTITY, "%s",
             cert ? e.msg : "the peer sent no certificate");
    return false;
  }
  if (strcmp(c->peer.federation, xf_tls_federation(c->tls)) != 0) {
    conn_end(c, XF_CONN_END_IDENTITY, XF_EINTEGRITY, XF_PKI_WRONG_FEDERATION,
             "the peer belongs to federation '%s', not '%s'", c->peer.federation,
             xf_tls_federation(c->tls));
    return false;
  }
  c->have_peer = true;
  c->state = CONN_OPEN;
  uv_timer_start(&c->heartbeat, on_heartbeat, c->opts.heartbeat_ms, 0);
  char spiffe[XF_SPIFFE_MAX];
  if (xf_spiffe_format(&c->peer, spiffe, NULL) != XF_OK) snprintf(spiffe, sizeof(spiffe), "?");
  XF_INFO("conn_open", "addr=%s peer=%s", c->addr, spiffe);
  if (c->opts.on_connect) {
    xf_err rc = c->opts.on_connect(c, &c->peer);
    if (c->state != CONN_OPEN) return false;
    if (rc != XF_OK) {
      conn_end(c, XF_CONN_END_REFUSED, rc, XF_PKI_OK, "on_connect refused %s: %s", spiffe,
               xf_strerror(rc));
      return false;
    }
  }
  return true;
}

static void conn_send_error(xf_conn *c, xf_err code, const char *msg) {
  Xfed__Error e = XFED__ERROR__INIT;
  e.code = (uint32_t)code;
  e.message = (char *)msg;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_ERROR;
  env.error = &e;
  (void)conn_write_env(c, &env, true, NULL); /* best effort: we close next anyway */
}

static void conn_deliver_frames(xf_conn *c);

/* Decrypts and delivers frames, one at a time, until data runs out, the
 * application pauses, or the connection ends; keeps what is left. */
static void conn_deliver(xf_conn *c) {
  conn_deliver_frames(c);
  if (!conn_keep_plain(c))
    conn_end(c, XF_CONN_END_IO, XF_ENOMEM, XF_PKI_OK, "out of memory for received bytes");
}

static void conn_deliver_frames(xf_conn *c) {
  while (c->state == CONN_OPEN && !c->paused) {
    if (c->starved) {
      /* Room in the budget now? The decoder tries when fed, even nothing. */
      size_t none = 0;
      Xfed__Envelope *env = NULL;
      xf_errctx err;
      xf_errctx_clear(&err);
      xf_err rc = xf_frame_decoder_feed(c->decoder, NULL, 0, &none, &env, &err);
      if (rc != XF_OK) {
        conn_end(c, XF_CONN_END_FRAME, rc, XF_PKI_OK, "%s", err.msg);
        return;
      }
      if (xf_frame_decoder_waiting(c->decoder)) return;
      c->starved = false;
      guard_unwait(c);
      XF_DEBUG("conn_budget_resumed", "addr=%s budget_used=%zu", c->addr, c->guard->budget.used);
      if (!conn_reading_started(c)) return;
    }
    if (c->plain_off == c->plain_len) {
      if (!conn_keep_plain(c)) { /* a fed heap copy is freed */
        conn_end(c, XF_CONN_END_IO, XF_ENOMEM, XF_PKI_OK, "out of memory for received bytes");
        return;
      }
      ERR_clear_error();
      int n = SSL_read(c->ssl, plain_buf, (int)sizeof(plain_buf));
      if (n <= 0) {
        int e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
        if (e == SSL_ERROR_ZERO_RETURN) {
          conn_end(c, XF_CONN_END_PEER_CLOSED, XF_OK, XF_PKI_OK, "the peer closed the session");
          return;
        }
        conn_tls_failed(c, "TLS read failed");
        return;
      }
      c->plain = plain_buf;
      c->plain_off = 0;
      c->plain_len = (size_t)n;
    }
    size_t used = 0;
    Xfed__Envelope *env = NULL;
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_frame_decoder_feed(c->decoder, c->plain + c->plain_off,
                                      c->plain_len - c->plain_off, &used, &env, &err);
    c->plain_off += used;
    if (c->authenticated)
      xf_progress_read(&c->progress, uv_now(c->loop), used,
                       xf_frame_decoder_buffered(c->decoder) > 0);
    if (rc != XF_OK) {
      if (rc == XF_ERANGE && !c->authenticated) {
        size_t n = strlen(err.msg);
        snprintf(err.msg + n, sizeof(err.msg) - n, " before the hello exchange completes");
      }
      conn_send_error(c, rc, err.msg);
      conn_end(c, XF_CONN_END_FRAME, rc, XF_PKI_OK, "%s", err.msg);
      return;
    }
    if (xf_frame_decoder_waiting(c->decoder)) {
      /* A frame the budget has no room for: read nothing more (the peer's
       * bytes wait in its socket) until the budget gives room back. */
      c->starved = true;
      guard_wait(c);
      conn_reading_stopped(c);
      XF_DEBUG("conn_budget_wait", "addr=%s budget_used=%zu budget=%zu waits=%llu", c->addr,
               c->guard->budget.used, c->guard->budget.limit,
               (unsigned long long)c->guard->budget.waits);
      return;
    }
    if (!env) continue;
    if (env->body_case == XFED__ENVELOPE__BODY_HEARTBEAT) {
      c->heartbeats_received++;
      XF_DEBUG("conn_heartbeat", "addr=%s seq=%llu", c->addr,
               (unsigned long long)(env->heartbeat ? env->heartbeat->seq : 0));
    } else {
      c->opts.on_frame(c, env);
    }
    xf_envelope_free(env);
  }
}

/* Runs the handshake while it lasts, then delivers frames; sends what
 * either produced. */
static void conn_drive(xf_conn *c) {
  if (c->state == CONN_HANDSHAKE) {
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r != 1) {
      int e = SSL_get_error(c->ssl, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        conn_flush(c);
        return;
      }
      conn_tls_failed(c, "TLS handshake failed");
      return;
    }
    conn_flush(c);
    if (!conn_established(c)) return;
  }
  conn_deliver(c);
  if (c->state != CONN_CLOSING) conn_flush(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  (void)h;
  *buf = uv_buf_init((char *)read_buf, sizeof(read_buf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  xf_conn *c = s->data;
  if (c->state == CONN_CLOSING || nread == 0) return;
  if (nread < 0) {
    if (nread == UV_EOF && c->state == CONN_OPEN)
      conn_end(c, XF_CONN_END_PEER_CLOSED, XF_OK, XF_PKI_OK, "the peer closed the connection");
    else if (nread == UV_EOF)
      conn_end(c, XF_CONN_END_TLS, XF_EIO, XF_PKI_OK,
               "the peer closed the connection during the TLS handshake");
    else
      conn_end(c, XF_CONN_END_IO, XF_EIO, XF_PKI_OK, "read failed: %s",
               uv_strerror((int)nread));
    return;
  }
  if (conn_reading(c)) uv_timer_start(&c->idle, on_idle, c->opts.idle_timeout_ms, 0);
  /* A web server answers a ClientHello in plain HTTP ("HTTP/1.1 400"). */
  if (c->dialled && c->state == CONN_HANDSHAKE && c->bytes_in == 0 && nread >= 5 &&
      memcmp(buf->base, "HTTP/", 5) == 0)
    c->why.http = true;
  c->bytes_in += (uint64_t)nread;
  c->in = (const uint8_t *)buf->base;
  c->in_len = (size_t)nread;
  conn_drive(c);
  if (!conn_keep_input(c))
    conn_end(c, XF_CONN_END_IO, XF_ENOMEM, XF_PKI_OK, "out of memory for received bytes");
}

static void on_kick(uv_timer_t *t) {
  xf_conn *c = t->data;
  if (c->state == CONN_HANDSHAKE || c->state == CONN_OPEN) conn_drive(c);
}

void xf_conn_pause_reading(xf_conn *c) {
  if (c->paused || c->state == CONN_CLOSING) return;
  bool was = conn_reading(c);
  c->paused = true;
  uv_timer_stop(&c->kick);
  if (was) conn_reading_stopped(c);
}

void xf_conn_resume_reading(xf_conn *c) {
  if (!c->paused || c->state == CONN_CLOSING) return;
  c->paused = false;
  if (!c->starved && !conn_reading_started(c)) return;
  uv_timer_start(&c->kick, on_kick, 0, 0); /* a starved one tries the budget again */
}

/* ---- making connections ---------------------------------------------------- */

/* A peer that vanishes makes write(2) raise SIGPIPE, whose default action
 * ends the process: ignore it, unless the process chose a handler itself.
 * The write then fails with EPIPE and ends only that connection. */
static void ignore_sigpipe(void) {
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
      !(old.sa_flags & SA_SIGINFO)) {
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    (void)sigaction(SIGPIPE, &ign, NULL);
  }
}

static xf_err opts_check(const xf_conn_opts *in, xf_conn_opts *out, xf_errctx *err) {
  if (!in || !in->on_frame) return xf_fail(err, XF_EINVAL, "a connection needs an on_frame callback");
  *out = *in;
  if (!out->max_frame) out->max_frame = XF_FRAME_MAX_DEFAULT;
  if (!out->peer_max_frame) out->peer_max_frame = XF_FRAME_MAX_DEFAULT;
  if (!out->heartbeat_ms) out->heartbeat_ms = XF_CONN_HEARTBEAT_MS;
  if (!out->idle_timeout_ms) out->idle_timeout_ms = XF_CONN_IDLE_TIMEOUT_MS;
  if (!out->handshake_timeout_ms) out->handshake_timeout_ms = XF_CONN_HANDSHAKE_TIMEOUT_MS;
  if (!out->progress.min_rate) out->progress.min_rate = XF_PROGRESS_MIN_RATE;
  if (!out->progress.window_ms) out->progress.window_ms = XF_PROGRESS_WINDOW_MS;
  if (!out->progress.grace_ms) out->progress.grace_ms = XF_PROGRESS_GRACE_MS;
  if (!out->close_timeout_ms) out->close_timeout_ms = XF_CONN_CLOSE_TIMEOUT_MS;
  if (!out->write_high_water) out->write_high_water = XF_CONN_WRITE_HIGH_WATER;
  if (out->max_frame > XF_FRAME_MAX_LIMIT || out->peer_max_frame > XF_FRAME_MAX_LIMIT)
    return xf_fail(err, XF_EINVAL, "frame maximum above %u bytes", XF_FRAME_MAX_LIMIT);
  if (!out->preauth_max_frame) out->preauth_max_frame = XF_CONN_PREAUTH_MAX_FRAME;
  if (out->preauth_max_frame > out->max_frame) out->preauth_max_frame = out->max_frame;
  ignore_sigpipe();
  return XF_OK;
}

/* Makes a connection with its handles initialized and its TLS session ready
 * for either role. Until the caller hands it out, failures discard it
 * silently (conn_discard). */
static xf_err conn_new(uv_loop_t *loop, xf_tls *tls, const xf_conn_opts *opts, xf_conn **out,
                       xf_errctx *err) {
  *out = NULL;
  xf_conn *c = xf_calloc(1, sizeof(*c));
  if (!c) return xf_fail(err, XF_ENOMEM, "out of memory for a connection");
  c->opts = *opts;
  c->peer_max_frame = opts->peer_max_frame;
  c->user = opts->user;
  c->loop = loop;
  c->tls = tls;
  snprintf(c->addr, sizeof(c->addr), "?");
  c->guard = opts->guard;
  xf_err rc = xf_frame_decoder_new(opts->preauth_max_frame, &c->decoder, err);
  if (rc != XF_OK) goto fail;
  if (c->guard) xf_frame_decoder_set_budget(c->decoder, &c->guard->budget);
  xf_progress_init(&c->progress, &opts->progress, uv_now(loop));
  ERR_clear_error();
  pthread_once(&conn_bio_once, conn_bio_method_make);
  c->ssl = SSL_new(xf_tls_ctx(tls));
  BIO *bio = conn_bio_method ? BIO_new(conn_bio_method) : NULL;
  if (!c->ssl || !bio) {
    ERR_clear_error();
    BIO_free(bio);
    rc = xf_fail(err, XF_ENOMEM, "out of memory for a TLS session");
    goto fail;
  }
  BIO_set_data(bio, c);
  SSL_set_bio(c->ssl, bio, bio); /* one reference, taken by ssl */
  int e = uv_tcp_init(loop, &c->tcp);
  if (e != 0) {
    rc = xf_fail(err, XF_EIO, "cannot create a socket: %s", uv_strerror(e));
    goto fail;
  }
  uv_timer_init(loop, &c->heartbeat);
  uv_timer_init(loop, &c->idle);
  uv_timer_init(loop, &c->kick);
  uv_timer_init(loop, &c->watch);
  c->tcp.data = c->heartbeat.data = c->idle.data = c->kick.data = c->watch.data = c;
  c->handles_open = CONN_HANDLES;
  *out = c;
  return XF_OK;

fail:
  SSL_free(c->ssl);
  xf_frame_decoder_free(c->decoder);
  xf_free(c);
  return rc;
}

/* Ends a connection nobody has seen yet: its handles close, no on_close. */
static void conn_discard(xf_conn *c) {
  c->silent = true;
  c->state = CONN_CLOSING;
  conn_close_handles(c);
}

/* OpenSSL calls it on a dialled connection when, and only when, the server
 * asks for a client certificate (TLS 1.3 CertificateRequest). */
static int on_cert_request(SSL *ssl, void *arg) {
  (void)ssl;
  ((xf_conn *)arg)->cert_requested = true;
  return 1;
}

static xf_err parse_addr(const char *host, int port, struct sockaddr_storage *sa,
                         xf_errctx *err) {
  if (!host || port < 0 || port > 65535)
    return xf_fail(err, XF_EINVAL, "bad address %s:%d", host ? host : "(null)", port);
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)sa) == 0) return XF_OK;
  if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)sa) == 0) return XF_OK;
  return xf_fail(err, XF_EINVAL, "'%s' is not a numeric IPv4 or IPv6 address", host);
}

static void on_connect(uv_connect_t *req, int status) {
  xf_conn *c = req->data;
  if (c->state == CONN_CLOSING) return;
  if (status < 0) {
    conn_end(c, XF_CONN_END_CONNECT, XF_EIO, XF_PKI_OK, "cannot connect to %s: %s", c->addr,
             uv_strerror(status));
    return;
  }
  c->tcp_connected = true;
  c->state = CONN_HANDSHAKE;
  /* The handshake deadline counts from here; the idle timer bounded the
   * TCP connect. */
  if (!c->authenticated) uv_timer_start(&c->watch, on_watch, c->opts.handshake_timeout_ms, 0);
  int e = c->paused ? 0 : uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (e != 0) {
    conn_end(c, XF_CONN_END_IO, XF_EIO, XF_PKI_OK, "cannot read: %s", uv_strerror(e));
    return;
  }
  conn_drive(c); /* sends the ClientHello */
}

xf_err xf_dial(uv_loop_t *loop, xf_tls *tls, const char *host, int port,
               const xf_conn_opts *opts, xf_conn **out, xf_errctx *err) {
  *out = NULL;
  xf_conn_opts o;
  XF_GUARD(opts_check(opts, &o, err));
  struct sockaddr_storage sa;
  XF_GUARD(parse_addr(host, port, &sa, err));
  xf_conn *c = NULL;
  XF_GUARD(conn_new(loop, tls, &o, &c, err));
  snprintf(c->addr, sizeof(c->addr), "%s%s%s:%d", strchr(host, ':') ? "[" : "", host,
           strchr(host, ':') ? "]" : "", port);
  SSL_set_connect_state(c->ssl);
  c->dialled = true;
  SSL_set_cert_cb(c->ssl, on_cert_request, c);
  c->state = CONN_CONNECTING;
  c->connect.data = c;
  (void)uv_tcp_nodelay(&c->tcp, 1);
  int e = uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&sa, on_connect);
  if (e != 0) {
    xf_err rc = xf_fail(err, XF_EIO, "cannot connect to %s: %s", c->addr, uv_strerror(e));
    conn_discard(c);
    return rc;
  }
  /* The idle timer bounds connect plus handshake. */
  uv_timer_start(&c->idle, on_idle, c->opts.idle_timeout_ms, 0);
  *out = c;
  return XF_OK;
}

static void on_stray_closed(uv_handle_t *h) { xf_free(h); }

/* Takes a pending connection we cannot serve off the backlog and closes it,
 * so that the listener keeps accepting. */
static void listener_drop(xf_listener *l) {
  uv_tcp_t *t = xf_malloc(sizeof(*t));
  if (!t) return;
  if (uv_tcp_init(l->loop, t) != 0) {
    xf_free(t);
    return;
  }
  (void)uv_accept((uv_stream_t *)&l->tcp, (uv_stream_t *)t);
  uv_close((uv_handle_t *)t, on_stray_closed);
}

/* Closes an unauthenticated connection at once for a newcomer, counted
 * by the cap that made room and logged with the running totals: nothing
 * is owed to a peer that has not opened its session, so the socket is cut
 * rather than shut down. */
static void guard_drop(xf_conn_guard *g, xf_conn *victim, xf_conn_cap cap, const xf_conn *c,
                       const char *ip) {
  g->dropped[cap]++;
  XF_WARN("connection_dropped",
          "addr=%s for=%s source=%s cap=%s limit=%zu open=%zu unauthenticated=%zu "
          "dropped_%s=%llu",
          victim->addr, c->addr, ip, xf_conn_cap_name(cap), g->cap[cap], g->open,
          g->unauthenticated, xf_conn_cap_name(cap), (unsigned long long)g->dropped[cap]);
  conn_end(victim, XF_CONN_END_DROPPED, XF_ERANGE, XF_PKI_OK,
           "unauthenticated after %llu ms; dropped for a newer connection at %s=%zu",
           (unsigned long long)(uv_now(victim->loop) - victim->accepted_ms), xf_conn_cap_name(cap),
           g->cap[cap]);
  conn_close_handles(victim);
}

/* The guard's caps on an accepted connection: true when c may stay, and
 * then it is on the guard's list, older unauthenticated connections
 * dropped as the guard decided; false after the refusal is counted and
 * logged with the running totals. */
static bool listener_admits(xf_listener *l, xf_conn *c, const char *ip) {
  xf_conn_guard *g = c->guard;
  xf_conn_load load = guard_load(g, c);
  xf_conn_admission a = xf_conn_guard_admit(g, &load);
  if (!a.admit) {
    xf_conn_cap cap = a.refused;
    g->refused[cap]++;
    XF_WARN("connection_refused",
            "addr=%s source=%s port=%d cap=%s limit=%zu open=%zu open_from_source=%zu "
            "unauthenticated=%zu refused_max_connections=%llu "
            "refused_max_connections_per_address=%llu",
            c->addr, ip, l->port, xf_conn_cap_name(cap), g->cap[cap], g->open,
            load.from_address, load.unauthenticated,
            (unsigned long long)g->refused[XF_CONN_CAP_TOTAL],
            (unsigned long long)g->refused[XF_CONN_CAP_PER_ADDRESS]);
    return false;
  }
  xf_conn *victim;
  if (a.drop_from_address && (victim = guard_victim(g, c, true)))
    guard_drop(g, victim, a.drop_from_address_cap, c, ip);
  if (a.drop_any && (victim = guard_victim(g, c, false))) guard_drop(g, victim, a.drop_any_cap, c, ip);
  c->accepted = true;
  c->accepted_ms = uv_now(c->loop);
  c->acc_next = NULL;
  c->acc_prev = g->accepted_tail;
  if (g->accepted_tail) g->accepted_tail->acc_next = c;
  else g->accepted_head = c;
  g->accepted_tail = c;
  g->open++;
  g->unauthenticated++;
  g->accepted++;
  return true;
}

static void on_connection(uv_stream_t *server, int status) {
  xf_listener *l = server->data;
  if (status < 0) {
    XF_WARN("listener_accept_failed", "port=%d msg=\"%s\"", l->port, uv_strerror(status));
    return;
  }
  xf_conn *c = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (conn_new(l->loop, l->tls, &l->opts, &c, &err) != XF_OK) {
    XF_WARN("listener_accept_failed", "port=%d msg=\"%s\"", l->port, err.msg);
    listener_drop(l);
    return;
  }
  int e = uv_accept(server, (uv_stream_t *)&c->tcp);
  if (e != 0) {
    XF_WARN("listener_accept_failed", "port=%d msg=\"%s\"", l->port, uv_strerror(e));
    conn_discard(c);
    return;
  }
  c->tcp_connected = true;
  c->state = CONN_HANDSHAKE;
  struct sockaddr_storage sa;
  int len = (int)sizeof(sa);
  char ip[64] = "?";
  int port = 0;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) == 0) {
    if (sa.ss_family == AF_INET6) {
      struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&sa;
      uv_ip6_name(a6, ip, sizeof(ip));
      port = ntohs(a6->sin6_port);
      /* One IPv6 host usually holds a whole /64: the cap counts the
       * prefix. An IPv4 peer of a dual-stack listener counts as IPv4. */
      const uint8_t *b = a6->sin6_addr.s6_addr;
      static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      bool v4 = memcmp(b, v4_mapped, sizeof(v4_mapped)) == 0;
      c->ip_len = v4 ? 4 : 8;
      memcpy(c->ip, v4 ? b + 12 : b, c->ip_len);
    } else {
      struct sockaddr_in *a4 = (struct sockaddr_in *)&sa;
      uv_ip4_name(a4, ip, sizeof(ip));
      port = ntohs(a4->sin_port);
      memcpy(c->ip, &a4->sin_addr, 4);
      c->ip_len = 4;
    }
  }
  snprintf(c->addr, sizeof(c->addr), "%s:%d", ip, port);
  if (c->guard && !listener_admits(l, c, ip)) {
    conn_discard(c); /* nobody has seen it: no on_close */
    return;
  }
  (void)uv_tcp_nodelay(&c->tcp, 1);
  SSL_set_accept_state(c->ssl);
  uv_timer_start(&c->idle, on_idle, c->opts.idle_timeout_ms, 0);
  uv_timer_start(&c->watch, on_watch, c->opts.handshake_timeout_ms, 0);
  e = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (e != 0)
    conn_end(c, XF_CONN_END_IO, XF_EIO, XF_PKI_OK, "cannot read: %s", uv_strerror(e));
}

xf_err xf_listen(uv_loop_t *loop, xf_tls *tls, const char *host, int port,
                 const xf_conn_opts *opts, xf_listener **out, xf_errctx *err) {
  *out = NULL;
  xf_conn_opts o;
  XF_GUARD(opts_check(opts, &o, err));
  struct sockaddr_storage sa;
  XF_GUARD(parse_addr(host, port, &sa, err));
  xf_listener *l = xf_calloc(1, sizeof(*l));
  if (!l) return xf_fail(err, XF_ENOMEM, "out of memory for a listener");
  l->loop = loop;
  l->tls = tls;
  l->opts = o;
  int e = uv_tcp_init(loop, &l->tcp);
  if (e != 0) {
    xf_free(l);
    return xf_fail(err, XF_EIO, "cannot create a socket: %s", uv_strerror(e));
  }
  l->tcp.data = l;
  e = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&sa, 0);
  /* A backlog for many sites coming back at once after a restart. */
  if (e == 0) e = uv_listen((uv_stream_t *)&l->tcp, 511, on_connection);
  struct sockaddr_storage bound;
  int len = (int)sizeof(bound);
  if (e == 0) e = uv_tcp_getsockname(&l->tcp, (struct sockaddr *)&bound, &len);
  if (e != 0) {
    xf_err rc = xf_fail(err, XF_EIO, "cannot listen on %s:%d: %s", host, port, uv_strerror(e));
    xf_listener_close(l, NULL); /* frees l once the handle has closed */
    return rc;
  }
  l->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
  XF_INFO("listener_open", "addr=%s port=%d", host, l->port);
  *out = l;
  return XF_OK;
}

int xf_listener_port(const xf_listener *l) { return l->port; }

static void on_listener_closed(uv_handle_t *h) {
  xf_listener *l = h->data;
  if (l->on_closed) l->on_closed(l);
  xf_free(l);
}

void xf_listener_close(xf_listener *l, xf_listener_close_cb on_closed) {
  if (uv_is_closing((uv_handle_t *)&l->tcp)) return;
  l->on_closed = on_closed;
  uv_close((uv_handle_t *)&l->tcp, on_listener_closed);
}

void xf_listener_set_user(xf_listener *l, void *user) { l->user = user; }
void *xf_listener_user(const xf_listener *l) { return l->user; }

/* ---- accessors ------------------------------------------------------------- */

/* The authenticated caps on an accepted connection completing its hello:
 * XF_OK when it fits; else the peer is told which key bounds it, the
 * refusal is counted and logged, and c closes. */
static xf_err guard_authenticates(xf_conn *c, xf_errctx *err) {
  xf_conn_guard *g = c->guard;
  size_t from = 0;
  size_t all = guard_authenticated(g, c, &from);
  xf_conn_cap cap = xf_conn_guard_authenticate(g, all, from);
  if (cap == XF_CONN_CAP_COUNT) return XF_OK;
  g->refused[cap]++;
  char msg[256];
  snprintf(msg, sizeof(msg),
           "the peer holds %zu authenticated connections%s already, the most %s=%zu allows",
           cap == XF_CONN_CAP_AUTHENTICATED ? all : from,
           cap == XF_CONN_CAP_AUTHENTICATED ? "" : " from this address", xf_conn_cap_name(cap),
           g->cap[cap]);
  XF_WARN("connection_refused", "addr=%s cap=%s limit=%zu authenticated=%zu "
          "authenticated_from_source=%zu refused_%s=%llu",
          c->addr, xf_conn_cap_name(cap), g->cap[cap], all, from, xf_conn_cap_name(cap),
          (unsigned long long)g->refused[cap]);
  conn_send_error(c, XF_ERANGE, msg);
  conn_end(c, XF_CONN_END_REFUSED, XF_ERANGE, XF_PKI_OK, "%s", msg);
  return xf_fail(err, XF_ERANGE, "%s", msg);
}

xf_err xf_conn_authenticated(xf_conn *c, size_t max_frame, xf_errctx *err) {
  XF_GUARD(xf_frame_decoder_set_max(c->decoder, max_frame ? max_frame : c->opts.max_frame, err));
  if (c->authenticated || c->state == CONN_CLOSING) return XF_OK;
  if (c->accepted) {
    XF_GUARD(guard_authenticates(c, err));
    c->guard->unauthenticated--;
  }
  c->authenticated = true;
  uint64_t now = uv_now(c->loop);
  bool paused = c->progress.paused;
  xf_progress_init(&c->progress, &c->opts.progress, now);
  if (paused) xf_progress_pause(&c->progress, now);
  /* Four verdicts per window: a trickling frame is judged at most a
   * quarter window late. */
  uint64_t every = c->opts.progress.window_ms / 4 ? c->opts.progress.window_ms / 4 : 1;
  uv_timer_start(&c->watch, on_watch, every, every);
  return XF_OK;
}

xf_err xf_conn_set_max_frame(xf_conn *c, size_t max_frame, xf_errctx *err) {
  return xf_frame_decoder_set_max(c->decoder, max_frame, err);
}

xf_err xf_conn_set_peer_max_frame(xf_conn *c, size_t max_frame, xf_errctx *err) {
  if (max_frame > XF_FRAME_MAX_LIMIT)
    return xf_fail(err, XF_EINVAL, "frame maximum of %zu bytes is above %u", max_frame,
                   XF_FRAME_MAX_LIMIT);
  c->peer_max_frame = max_frame ? max_frame : XF_FRAME_MAX_DEFAULT;
  return XF_OK;
}

size_t xf_conn_peer_max_frame(const xf_conn *c) { return c->peer_max_frame; }

const xf_spiffe_id *xf_conn_peer(const xf_conn *c) { return c->have_peer ? &c->peer : NULL; }
const char *xf_conn_peer_addr(const xf_conn *c) { return c->addr; }
bool xf_conn_is_open(const xf_conn *c) { return c->state == CONN_OPEN; }
size_t xf_conn_write_queued(const xf_conn *c) { return c->queued; }
uint64_t xf_conn_heartbeats_received(const xf_conn *c) { return c->heartbeats_received; }
uint64_t xf_conn_bytes_in(const xf_conn *c) { return c->bytes_in; }
uint64_t xf_conn_bytes_out(const xf_conn *c) { return c->bytes_out; }
void xf_conn_set_user(xf_conn *c, void *user) { c->user = user; }
void *xf_conn_user(const xf_conn *c) { return c->user; }
