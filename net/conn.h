/* SPDX-License-Identifier: Apache-2.0 */
/* Connections: mutually authenticated TLS 1.3 over libuv TCP carrying
 * frames (net/frame.h), with heartbeats, an idle timeout and backpressure in
 * both directions; listeners that accept them and a dialer that makes them.
 * Everything runs on the one loop thread of the process and never blocks. */
#ifndef XF_NET_CONN_H
#define XF_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "base/result.h"
#include "base/rng.h"
#include "crypto/pki.h"
#include "net/frame.h"
#include "net/progress.h"
#include "net/tls.h"
#include "net/xfed.pb-c.h"

/* Defaults (docs/protocol.md, "Heartbeats" and "Connections"). */
#define XF_CONN_HEARTBEAT_MS 10000u     /* send a Heartbeat after this much silence */
#define XF_CONN_IDLE_TIMEOUT_MS 30000u  /* close after receiving nothing this long */
#define XF_CONN_CLOSE_TIMEOUT_MS 5000u  /* give a clean close this long, then cut */
/* Encrypted bytes handed to the socket and not yet written, above which
 * xf_conn_send refuses (XF_ERANGE) until on_drain. Four 1 MiB chunks in
 * flight keep a long fat link busy without buffering a model. */
#define XF_CONN_WRITE_HIGH_WATER (4u * 1024u * 1024u)
/* The TLS handshake and the hello exchange must both be done within this
 * long of the accept (of the TCP connect, for a dial): measured from the
 * start, not reset by each byte, so a peer that drips its ClientHello
 * cannot hold a descriptor. A TLS 1.3 handshake and the hello take two
 * round trips; 10 s leaves room for several lost packets on a bad link. */
#define XF_CONN_HANDSHAKE_TIMEOUT_MS 10000u
/* The largest payload accepted until xf_conn_authenticated: a Hello is a
 * few hundred bytes, and a Refusal or an Error at most 512 bytes of text,
 * so a peer that has not opened its session can make the decoder buffer no
 * more than this (nor protobuf-c allocate for more). */
#define XF_CONN_PREAUTH_MAX_FRAME (4u * 1024u)
/* Defaults of a guard's caps (xf_conn_caps_default; docs/coordinator.md,
 * "Connections"): connections accepted at once, and of those the ones not
 * yet authenticated (TLS handshake or hello still running) in all and from
 * one address. A handshake takes milliseconds, so 1,024 at once is far
 * more than honest peers ever hold; 256 from one address lets a NAT of
 * many sites reconnect together while a single source cannot take more
 * than a quarter of the places for handshakes. */
#define XF_CONN_MAX_CONNS 4096u
#define XF_CONN_MAX_UNAUTH 1024u
#define XF_CONN_MAX_UNAUTH_PER_ADDR 256u
/* Early drop of unauthenticated connections, after OpenSSH's MaxStartups
 * start:rate:full, where full is the cap: from start (this percentage of
 * the cap) a newcomer drops an older unauthenticated connection with
 * probability rate, rising linearly to certainty at the cap. */
#define XF_CONN_EARLY_DROP_START_PERCENT 50u
#define XF_CONN_EARLY_DROP_RATE_PERCENT 30u
#define XF_CONN_BUFFER_BUDGET (256u * 1024u * 1024u)
/* Descriptors a process keeps beyond its accepted connections: the
 * listener, the loop's own, the journal and blob store files, the logs, a
 * dial upstream, and one to accept a connection with and refuse it. */
#define XF_CONN_FD_RESERVE 64u

/* X(NAME, message): why a connection ended. */
#define XF_CONN_END_MAP(X)                                                   \
  X(CLOSED, "closed by this side")                                           \
  X(PEER_CLOSED, "closed by the peer")                                       \
  X(CONNECT, "could not connect")                                            \
  X(TLS, "TLS handshake or record failure")                                  \
  X(IDENTITY, "the peer's certificate carries no identity of this federation") \
  X(REFUSED, "refused by the application")                                   \
  X(IDLE, "nothing received within the idle timeout")                        \
  X(FRAME, "the peer sent a frame that is too large or malformed")           \
  X(IO, "socket or memory error")                                            \
  X(HANDSHAKE, "the TLS handshake and the hello did not complete in time")   \
  X(SLOW, "a frame in progress arrived slower than the minimum rate")       \
  X(DROPPED, "dropped unauthenticated to admit a newer connection")

typedef enum xf_conn_end {
#define XF__CONN_END_ENUM(name, msg) XF_CONN_END_##name,
  XF_CONN_END_MAP(XF__CONN_END_ENUM)
#undef XF__CONN_END_ENUM
  XF_CONN_END_COUNT
} xf_conn_end;

/* "closed by this side", ...; never NULL. */
const char *xf_conn_end_message(xf_conn_end end);

/* Why a connection ended, passed to on_close. */
typedef struct xf_conn_reason {
  xf_conn_end end;
  xf_err code;            /* XF_OK for CLOSED and PEER_CLOSED */
  xf_pki_verdict verdict; /* why the peer's certificate was refused; XF_PKI_OK otherwise */
  char msg[512];          /* details in words (OpenSSL's reason, the frame error, ...) */
  /* A dialled peer that answered as a web server, not as an xfed daemon:
   * plain HTTP where TLS was due, or a TLS server that asked for no client
   * certificate (every xfed daemon's port does: mutual TLS). What a
   * coordinator's --metrics or --dashboard port looks like. */
  bool http;
  bool https; /* of those, the TLS one (a dashboard); false: plain HTTP */
} xf_conn_reason;

typedef struct xf_conn xf_conn;
typedef struct xf_listener xf_listener;

/* X(NAME, key): the caps of a guard, named by the configuration key that
 * sets them (docs/coordinator.md lists each; tests/test_conn.c checks it).
 * A connection is unauthenticated from its accept until
 * xf_conn_authenticated (its certificate verified, its hello accepted),
 * authenticated after. The first two count both kinds, the next two the
 * unauthenticated, the last two the authenticated. No cap ever closes an
 * authenticated connection to make room: at the first four a newcomer
 * closes (drops) an older unauthenticated connection instead, and is
 * refused at accept only where none is left to drop; at the last two a
 * connection completing its hello is refused. */
#define XF_CONN_CAP_MAP(X)                                                  \
  X(TOTAL, "max_connections")                                               \
  X(PER_ADDRESS, "max_connections_per_address")                             \
  X(UNAUTHENTICATED, "max_unauthenticated_connections")                     \
  X(UNAUTHENTICATED_PER_ADDRESS, "max_unauthenticated_connections_per_address") \
  X(AUTHENTICATED, "max_authenticated_connections")                         \
  X(AUTHENTICATED_PER_ADDRESS, "max_authenticated_connections_per_address")

typedef enum xf_conn_cap {
#define XF__CONN_CAP_ENUM(name, key) XF_CONN_CAP_##name,
  XF_CONN_CAP_MAP(XF__CONN_CAP_ENUM)
#undef XF__CONN_CAP_ENUM
  XF_CONN_CAP_COUNT
} xf_conn_cap;

/* "max_connections", ...; never NULL. */
const char *xf_conn_cap_name(xf_conn_cap cap);
/* The cap named key, or XF_CONN_CAP_COUNT when no cap has that name. */
xf_conn_cap xf_conn_cap_by_name(const char *key);

/* Fills the caps left 0 in caps[XF_CONN_CAP_COUNT] with the defaults for a
 * total of caps[XF_CONN_CAP_TOTAL] (XF_CONN_MAX_CONNS when 0): per address,
 * the total; unauthenticated, XF_CONN_MAX_UNAUTH or half the total when
 * less; unauthenticated per address, XF_CONN_MAX_UNAUTH_PER_ADDR or a
 * quarter of the unauthenticated when less; authenticated, the total; and
 * authenticated per address, the authenticated. Every one at least 1. */
void xf_conn_caps_default(size_t caps[XF_CONN_CAP_COUNT]);

/* What a process bounds its connections with, and the running totals of
 * what the bounds did (docs/protocol.md, "Limits"). The owner (a daemon)
 * keeps one, sets it up with xf_conn_guard_init, names it in the opts of
 * its listener and of its dials, and keeps it until every connection that
 * names it has closed. The caps apply to accepted connections; the budget
 * and the counts of ends to all. The totals are for logs and an exporter:
 * read them, never write them. */
typedef struct xf_conn_guard {
  size_t cap[XF_CONN_CAP_COUNT]; /* by XF_CONN_CAP_MAP; 0: no cap. Per address:
                                    a source address, an IPv6 one by its /64 */
  unsigned early_drop_start;     /* XF_CONN_EARLY_DROP_START_PERCENT */
  unsigned early_drop_rate;      /* XF_CONN_EARLY_DROP_RATE_PERCENT */
  xf_rng rng;                    /* draws the early drops: seeded by
                                    xf_conn_guard_init, a test may seed it */
  xf_frame_budget budget;        /* frames buffered by every connection (net/frame.h) */
  size_t open;                   /* accepted connections open now */
  size_t unauthenticated;        /* ... of them not yet authenticated */
  uint64_t accepted;             /* accepted since the start */
  uint64_t refused[XF_CONN_CAP_COUNT]; /* refused (at accept or at the hello), by cap */
  uint64_t dropped[XF_CONN_CAP_COUNT]; /* unauthenticated ones dropped for a newcomer, by cap */
  uint64_t ended[XF_CONN_END_COUNT];   /* connections ended, by reason */
  size_t queued;                 /* ciphertext its connections have in uv_write now:
                                    the sum of their xf_conn_write_queued, kept as
                                    it changes so that reading it costs nothing */
  /* Internal: the accepted connections, oldest first, and those waiting
   * for the budget in the order they began to wait. */
  xf_conn *accepted_head, *accepted_tail;
  xf_conn *waiting_head, *waiting_tail;
} xf_conn_guard;

/* What is open when a connection arrives, the newcomer not counted. */
typedef struct xf_conn_load {
  size_t open, from_address;                       /* accepted, of both kinds */
  size_t unauthenticated, unauthenticated_from_address;
} xf_conn_load;

/* What admitting a newcomer takes: when admit, first close the oldest
 * unauthenticated connection of its address (drop_from_address, for the
 * cap drop_from_address_cap) and then the oldest unauthenticated one of
 * all (drop_any, for drop_any_cap); when not admit, refuse it by `refused`
 * and close nothing. */
typedef struct xf_conn_admission {
  bool admit;
  bool drop_from_address, drop_any;
  xf_conn_cap drop_from_address_cap, drop_any_cap, refused;
} xf_conn_admission;

/* The guard's decision on a newcomer (no I/O; the early drops draw from
 * g->rng). Below a cap's start nothing is dropped for it; from its start a
 * drop with rising probability; at the cap always one, where one is
 * unauthenticated; at the first two caps with nothing to drop, a refusal. */
xf_conn_admission xf_conn_guard_admit(xf_conn_guard *g, const xf_conn_load *load);

/* The guard's decision on a connection completing its hello, with
 * `authenticated` and `from_address` authenticated connections open
 * already: XF_CONN_CAP_COUNT when it fits, else the cap it would exceed. */
xf_conn_cap xf_conn_guard_authenticate(const xf_conn_guard *g, size_t authenticated,
                                       size_t from_address);

/* Sets g up: caps[XF_CONN_CAP_COUNT] copied (NULL or an entry 0: no cap;
 * see xf_conn_caps_default), the budget's limit in bytes (0: none), the
 * early drop at its defaults with rng seeded from OpenSSL's generator,
 * every count zero. */
void xf_conn_guard_init(xf_conn_guard *g, const size_t *caps, size_t budget);

/* How many accepted connections fit the process's descriptor limit: raises
 * the soft RLIMIT_NOFILE toward the hard one as far as wanted +
 * XF_CONN_FD_RESERVE needs, then returns wanted, or what the limit leaves
 * after the reserve when that is less (at least 1). *limit gets the soft
 * limit in force. */
size_t xf_conn_fit_descriptors(size_t wanted, size_t *limit);

/* Called once the handshake has verified the peer, with its identity
 * (borrowed, also at xf_conn_peer). Return XF_OK to accept; any other code
 * refuses, and the connection closes with XF_CONN_END_REFUSED and that code.
 * The callback may xf_conn_send (a Refusal, say) before refusing: queued
 * frames go out before the close. */
typedef xf_err (*xf_conn_connect_cb)(xf_conn *c, const xf_spiffe_id *peer);
/* One received Envelope, borrowed: valid during the call only. Heartbeats
 * are answered by the connection itself and never delivered. The callback
 * may send, pause, or close c. */
typedef void (*xf_conn_frame_cb)(xf_conn *c, const Xfed__Envelope *env);
/* The write queue fell to half its high-water mark after xf_conn_send
 * refused with XF_ERANGE: sending may go on. */
typedef void (*xf_conn_drain_cb)(xf_conn *c);
/* The last call for c, made once every handle of it has closed: for every
 * connection, including those that never reached on_connect. c is freed when
 * it returns; drop every pointer to it here. */
typedef void (*xf_conn_close_cb)(xf_conn *c, const xf_conn_reason *why);

/* Settings of a connection (copied). Zero means the default. */
typedef struct xf_conn_opts {
  size_t max_frame;          /* largest payload accepted once authenticated (see
                                xf_conn_authenticated): XF_FRAME_MAX_DEFAULT */
  size_t preauth_max_frame;  /* ... before: XF_CONN_PREAUTH_MAX_FRAME (at most max_frame) */
  size_t peer_max_frame;     /* largest payload sent: XF_FRAME_MAX_DEFAULT */
  uint32_t heartbeat_ms;     /* XF_CONN_HEARTBEAT_MS */
  uint32_t idle_timeout_ms;  /* XF_CONN_IDLE_TIMEOUT_MS; also bounds a dial's TCP connect */
  uint32_t handshake_timeout_ms; /* XF_CONN_HANDSHAKE_TIMEOUT_MS */
  xf_progress_rule progress; /* a field at 0: XF_PROGRESS_MIN_RATE, _WINDOW_MS, _GRACE_MS */
  uint32_t close_timeout_ms; /* XF_CONN_CLOSE_TIMEOUT_MS */
  size_t write_high_water;   /* XF_CONN_WRITE_HIGH_WATER */
  xf_conn_guard *guard;      /* borrowed; NULL: no caps, no budget, no counts */
  xf_conn_connect_cb on_connect; /* NULL accepts every verified peer */
  xf_conn_frame_cb on_frame;     /* required */
  xf_conn_drain_cb on_drain;     /* may be NULL */
  xf_conn_close_cb on_close;     /* may be NULL */
  void *user;                    /* initial xf_conn_user */
} xf_conn_opts;

/* xf_dial and xf_listen set SIGPIPE to be ignored when it is at its default
 * action, so that a peer that vanishes fails one write (EPIPE) instead of
 * ending the process. */

/* ---- dialing -------------------------------------------------------------- */

/* Connects to host:port (a numeric IPv4 or IPv6 address: names are resolved
 * beforehand, with uv_getaddrinfo, so nothing blocks) and runs the client
 * side of the handshake with tls (borrowed; it must outlive the connection).
 * Returns at once: the outcome comes as on_connect or on_close (a refused or
 * unreachable port is XF_CONN_END_CONNECT). *out is the connection, owned by
 * the library until on_close returns. XF_EINVAL for a bad address or opts;
 * XF_ENOMEM; XF_EIO when libuv refuses to start; on these nothing was
 * created and no callback follows. */
xf_err xf_dial(uv_loop_t *loop, xf_tls *tls, const char *host, int port,
               const xf_conn_opts *opts, xf_conn **out, xf_errctx *err) XF_WARN_UNUSED;

/* ---- listening ------------------------------------------------------------ */

/* Called when the listener's handle has closed; l is freed when it returns. */
typedef void (*xf_listener_close_cb)(xf_listener *l);

/* Listens on host:port (numeric; port 0 picks a free port, see
 * xf_listener_port). Each accepted connection runs the server side of the
 * handshake with tls (borrowed; it must outlive the listener and its
 * connections) and the callbacks and settings of opts (copied). The caller
 * owns *out until it calls xf_listener_close. XF_EINVAL for a bad address or
 * opts; XF_EIO (with libuv's reason) when the address cannot be bound;
 * XF_ENOMEM. */
xf_err xf_listen(uv_loop_t *loop, xf_tls *tls, const char *host, int port,
                 const xf_conn_opts *opts, xf_listener **out, xf_errctx *err) XF_WARN_UNUSED;

/* The port the listener is bound to. */
int xf_listener_port(const xf_listener *l);

/* Stops accepting. Connections already accepted live on. on_closed (may be
 * NULL) runs when the handle has closed; the listener is freed then. */
void xf_listener_close(xf_listener *l, xf_listener_close_cb on_closed);

/* The listener's user pointer (NULL until set). */
void xf_listener_set_user(xf_listener *l, void *user);
void *xf_listener_user(const xf_listener *l);

/* ---- a connection --------------------------------------------------------- */

/* Frames up to this size (encoded) are control: xf_conn_send queues them
 * above the high-water mark too, up to twice it. */
#define XF_CONN_CONTROL_FRAME_MAX (64u * 1024u)

/* Encodes env (read only during the call; see xf_frame_encode) and queues it
 * for the peer. XF_OK when queued; XF_ERANGE ("busy") when the write queue is
 * at or above its high-water mark (for a frame of at most
 * XF_CONN_CONTROL_FRAME_MAX bytes: at or above twice the mark): nothing was
 * queued, wait for on_drain and send again; XF_EINVAL when the frame exceeds the peer's maximum (cut it, as
 * tensor streams do) or the connection is not open (before on_connect or
 * after close); XF_ENOMEM. */
xf_err xf_conn_send(xf_conn *c, const Xfed__Envelope *env, xf_errctx *err) XF_WARN_UNUSED;

/* Stops delivering frames, and reading from the socket, until
 * xf_conn_resume_reading: the peer's writes then back up into its own queue.
 * A frame already decrypted stays buffered; the idle timeout is suspended
 * meanwhile, since a peer cannot be heard while nobody listens. Safe inside
 * on_frame: no further frame is delivered after it returns. */
void xf_conn_pause_reading(xf_conn *c);
/* Reads again; buffered frames are delivered from the loop, never from
 * within this call. */
void xf_conn_resume_reading(xf_conn *c);

/* Closes c cleanly: stops reading, lets queued frames go out, sends TLS
 * close_notify and closes the socket, cutting it after the close timeout if
 * the peer does not take the bytes. on_close follows with
 * XF_CONN_END_CLOSED. Calling it again, or on a closing connection, does
 * nothing. */
void xf_conn_close(xf_conn *c);

/* The application trusts the peer: its session is open (net/session.h calls
 * this once both Hellos and HelloAcks have crossed). The handshake deadline
 * ends, the progress rule starts, and the largest payload accepted rises
 * from the pre-authentication limit to max_frame (0: opts.max_frame) from
 * the next frame. An accepted connection becomes authenticated for its
 * guard's caps: when it would exceed max_authenticated_connections or
 * max_authenticated_connections_per_address, the peer gets an Error naming
 * the key, the connection closes with XF_CONN_END_REFUSED, and the call
 * returns XF_ERANGE saying so. XF_EINVAL above XF_FRAME_MAX_LIMIT. A second
 * call only sets the limit again. */
xf_err xf_conn_authenticated(xf_conn *c, size_t max_frame, xf_errctx *err) XF_WARN_UNUSED;

/* Raises or lowers the largest payload accepted (from the next frame) or
 * sent, for instance to the values announced in the Hello exchange. XF_EINVAL
 * above XF_FRAME_MAX_LIMIT. */
xf_err xf_conn_set_max_frame(xf_conn *c, size_t max_frame, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_conn_set_peer_max_frame(xf_conn *c, size_t max_frame, xf_errctx *err) XF_WARN_UNUSED;

/* The largest payload xf_conn_send lets out: the peer's maximum, from its
 * Hello once the session has applied it. A message larger than this goes as
 * a stream (net/document.h). */
size_t xf_conn_peer_max_frame(const xf_conn *c);

/* The peer's identity once on_connect has been called; NULL before. Owned by c. */
const xf_spiffe_id *xf_conn_peer(const xf_conn *c);
/* The peer's address as "IP:PORT" for logs; owned by c. */
const char *xf_conn_peer_addr(const xf_conn *c);
/* True between on_connect and the start of closing. */
bool xf_conn_is_open(const xf_conn *c);
/* Encrypted bytes queued on the socket and not yet written. */
size_t xf_conn_write_queued(const xf_conn *c);
/* Heartbeats received so far. */
uint64_t xf_conn_heartbeats_received(const xf_conn *c);
/* Bytes (TLS records, handshake included) read from the socket and handed
 * to it for writing since the connection began: for an exporter. */
uint64_t xf_conn_bytes_in(const xf_conn *c);
uint64_t xf_conn_bytes_out(const xf_conn *c);

void xf_conn_set_user(xf_conn *c, void *user);
void *xf_conn_user(const xf_conn *c);

#endif
