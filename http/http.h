/* SPDX-License-Identifier: Apache-2.0 */
/* A small HTTP/1.1 server for operators' endpoints (/metrics, /healthz, the
 * dashboard) over libmicrohttpd, run on the daemon's own libuv loop thread:
 * no thread of its own, so route handlers read daemon state without locks.
 *
 * libmicrohttpd (Debian libmicrohttpd-dev) rather than h2o: it embeds in a
 * few calls, lets the caller drive it from an existing event loop (its
 * epoll descriptor polled by uv_poll, its timeout kept by a uv_timer), and
 * brings no event loop of its own; TLS comes from GnuTLS underneath. */
#ifndef XF_HTTP_HTTP_H
#define XF_HTTP_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "base/result.h"

typedef struct xf_http xf_http;

/* What a program says of a flag that needs this server when the build has
 * none (configured with -DXF_HTTP=OFF, which leaves server.c out):
 * "this xfed-coord was " XF_HTTP_ABSENT. */
#define XF_HTTP_ABSENT                                                                 \
  "built without the HTTP server (XF_HTTP=OFF): rebuild with libmicrohttpd-dev "       \
  "installed and -DXF_HTTP=ON"

/* Defaults of xf_http_opts (docs/metrics.md, "The HTTP server"). Operator
 * endpoints answer small GETs: a handful of clients (Prometheus, a load
 * balancer's probe, a browser) at once, and nothing that needs a large
 * request body. */
#define XF_HTTP_MAX_CONNECTIONS 64u
#define XF_HTTP_MAX_CONNECTIONS_PER_ADDR 16u
#define XF_HTTP_MAX_REQUEST_BODY 65536u
#define XF_HTTP_TIMEOUT_S 30u
/* Extra response headers a handler may set. */
#define XF_HTTP_HEADERS_MAX 8

typedef struct xf_http_opts {
  const char *host;          /* numeric IPv4 or IPv6 address; NULL: 127.0.0.1 */
  int port;                  /* 0 picks a free one (xf_http_port) */
  /* TLS: both PEM files, or neither for plain HTTP. */
  const char *cert_file;
  const char *key_file;
  /* With TLS: a PEM CA bundle; clients are then asked for a certificate,
   * and a request carries it (xf_http_request.client_cert_der) only when
   * it verifies against these CAs. NULL: no client certificates. */
  const char *client_ca_file;
  size_t max_connections;          /* 0: XF_HTTP_MAX_CONNECTIONS */
  size_t max_connections_per_addr; /* 0: XF_HTTP_MAX_CONNECTIONS_PER_ADDR */
  size_t max_request_body;         /* 0: XF_HTTP_MAX_REQUEST_BODY */
  unsigned timeout_s;              /* idle connections close after; 0: XF_HTTP_TIMEOUT_S */
} xf_http_opts;

/* A request, borrowed: valid during the handler's call only. */
typedef struct xf_http_request {
  const char *method;        /* "GET", "HEAD", "POST", ... */
  const char *path;          /* the URL's path, decoded, without the query */
  const void *body;          /* the request body (NUL-terminated), at most max_request_body */
  size_t body_len;
  /* The client's certificate (DER) when client_ca_file is set and it
   * verified against it; NULL otherwise. */
  const uint8_t *client_cert_der;
  size_t client_cert_len;
  void *conn;                /* for xf_http_query_arg and xf_http_header */
} xf_http_request;

/* What a handler answers. The server fills status 200, no body, no content
 * type before the call. */
typedef struct xf_http_response {
  int status;
  const char *content_type;  /* static or borrowed until the handler returns */
  char *body;                /* xf_malloc'd; the server frees it (may be NULL) */
  size_t body_len;
  struct {
    char name[64];
    char value[256];
  } headers[XF_HTTP_HEADERS_MAX];
  size_t n_headers;
} xf_http_response;

/* Handles one request on the loop thread. ctx is the route's. */
typedef void (*xf_http_handler)(void *ctx, const xf_http_request *req, xf_http_response *resp);

/* Starts listening on loop (borrowed; the server runs on its thread and
 * must be stopped before the loop closes). *out is the server, owned by
 * the caller until xf_http_stop. XF_EINVAL for a bad address or options,
 * XF_EIO when the port cannot be bound or the TLS files are unreadable or
 * not PEM, XF_EUNSUPPORTED when the library lacks TLS or epoll. */
xf_err xf_http_start(uv_loop_t *loop, const xf_http_opts *opts, xf_http **out,
                     xf_errctx *err) XF_WARN_UNUSED;

/* The port bound (the one picked when opts.port was 0). */
int xf_http_port(const xf_http *h);

/* Routes requests with `method` (NULL: any) whose path is `prefix` or
 * starts with `prefix` followed by '/' (prefix "/" matches every path) to
 * fn. The longest matching prefix wins; a path no route matches gets 404,
 * a matching path with another method 405. Prefix and method are copied.
 * XF_ERANGE past 32 routes. */
xf_err xf_http_route(xf_http *h, const char *method, const char *prefix, xf_http_handler fn,
                     void *ctx) XF_WARN_UNUSED;

/* A query argument of the request (decoded), or NULL. */
const char *xf_http_query_arg(const xf_http_request *req, const char *name);
/* A request header, or NULL. */
const char *xf_http_header(const xf_http_request *req, const char *name);

/* Sets resp to status with a text/plain body (formatted), for errors. */
void xf_http_reply_text(xf_http_response *resp, int status, const char *fmt, ...) XF_PRINTF(3, 4);
/* Adds a response header (both copied, cut to fit); false when full. */
bool xf_http_add_header(xf_http_response *resp, const char *name, const char *value);

/* Closes every connection and the listening socket, and frees h once its
 * libuv handles have closed (the loop must run on for that). NULL is a
 * no-op. */
void xf_http_stop(xf_http *h);

#endif
