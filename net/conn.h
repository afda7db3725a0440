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
#include "crypto/pki.h"
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
  X(IO, "socket or memory error")

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
} xf_conn_reason;

typedef struct xf_conn xf_conn;
typedef struct xf_listener xf_listener;

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
  size_t max_frame;          /* largest payload accepted: XF_FRAME_MAX_DEFAULT */
  size_t peer_max_frame;     /* largest payload sent: XF_FRAME_MAX_DEFAULT */
  uint32_t heartbeat_ms;     /* XF_CONN_HEARTBEAT_MS */
  uint32_t idle_timeout_ms;  /* XF_CONN_IDLE_TIMEOUT_MS; also bounds the handshake */
  uint32_t close_timeout_ms; /* XF_CONN_CLOSE_TIMEOUT_MS */
  size_t write_high_water;   /* XF_CONN_WRITE_HIGH_WATER */
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

/* Encodes env (read only during the call; see xf_frame_encode) and queues it
 * for the peer. XF_OK when queued; XF_ERANGE ("busy") when the write queue is
 * at or above its high-water mark: nothing was queued, wait for on_drain and
 * send again; XF_EINVAL when the frame exceeds the peer's maximum (cut it, as
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

/* Raises or lowers the largest payload accepted (from the next frame) or
 * sent, for instance to the values announced in the Hello exchange. XF_EINVAL
 * above XF_FRAME_MAX_LIMIT. */
xf_err xf_conn_set_max_frame(xf_conn *c, size_t max_frame, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_conn_set_peer_max_frame(xf_conn *c, size_t max_frame, xf_errctx *err) XF_WARN_UNUSED;

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

void xf_conn_set_user(xf_conn *c, void *user);
void *xf_conn_user(const xf_conn *c);

#endif
