/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP server of http/http.h: libmicrohttpd in its external-polling
 * epoll mode, driven from the daemon's libuv loop. */
#include "http/http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <sodium.h>

#include "base/alloc.h"
#include "base/log.h"

#define XF__HTTP_ROUTES_MAX 32
/* A PEM certificate chain or key larger than this is not one. */
#define XF__HTTP_PEM_MAX (1u << 20)
/* What one connection may hold of request headers and body buffers at
 * once (libmicrohttpd answers a request whose headers exceed it with 431). */
#define XF__HTTP_CONN_MEMORY (32u * 1024u)

typedef struct xf__route {
  char method[16]; /* "" for any */
  char prefix[128];
  size_t prefix_len;
  xf_http_handler fn;
  void *ctx;
} xf__route;

struct xf_http {
  struct MHD_Daemon *daemon;
  uv_poll_t poll;
  uv_timer_t timer;
  int open_handles; /* closing: freed when it reaches 0 */
  int port;
  size_t max_body;
  bool client_ca;
  xf__route routes[XF__HTTP_ROUTES_MAX];
  size_t n_routes;
  char *cert_pem;  /* xf_malloc */
  char *key_pem;   /* sodium_malloc: the private key */
  size_t key_cap;
  char *ca_pem;    /* xf_malloc */
};

/* One request's state across the access handler's calls. */
typedef struct xf__req {
  char *body;
  size_t len, cap;
  bool too_large;
} xf__req;

/* libmicrohttpd's own messages: fmt is its printf format. */
__attribute__((format(printf, 2, 0))) static void xf__http_log(void *cls, const char *fmt,
                                                               va_list ap) {
  (void)cls;
  char msg[512];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
  for (char *p = msg; *p; p++)
    if (*p == '"' || *p == '\n' || *p == '\r') *p = '\'';
  XF_WARN("http_error", "msg=\"%s\"", msg);
}

/* Reads a PEM file whole (NUL-terminated) into memory from alloc. */
static xf_err xf__read_pem(const char *path, bool secret, char **out, size_t *cap,
                           xf_errctx *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    xf_errctx_file(err, path);
    return xf_fail(err, XF_EIO, "cannot open it (%s); give a readable PEM file", strerror(errno));
  }
  size_t n = XF__HTTP_PEM_MAX + 1;
  /* sodium_malloc aborts before sodium_init (idempotent, thread-safe): the
   * server must not rely on another module having started libsodium. */
  if (secret && sodium_init() < 0) {
    fclose(f);
    return xf_fail(err, XF_EINTERNAL, "libsodium cannot start");
  }
  char *buf = secret ? sodium_malloc(n) : xf_malloc(n);
  if (!buf) {
    fclose(f);
    return xf_fail(err, XF_ENOMEM, "no memory for %s", path);
  }
  size_t got = fread(buf, 1, XF__HTTP_PEM_MAX, f);
  bool more = got == XF__HTTP_PEM_MAX && fgetc(f) != EOF;
  bool bad = ferror(f) != 0;
  fclose(f);
  buf[got] = '\0';
  if (bad || more || !strstr(buf, "-----BEGIN ")) {
    if (secret) sodium_free(buf);
    else xf_free(buf);
    xf_errctx_file(err, path);
    return xf_fail(err, XF_EIO, "%s", bad    ? "cannot read it"
                                      : more ? "larger than 1 MiB: not a PEM file"
                                             : "not a PEM file (no -----BEGIN line)");
  }
  *out = buf;
  if (cap) *cap = n;
  return XF_OK;
}

static void xf__http_free(xf_http *h) {
  if (h->key_pem) sodium_free(h->key_pem); /* wipes */
  xf_free(h->cert_pem);
  xf_free(h->ca_pem);
  xf_free(h);
}

static void xf__on_handle_closed(uv_handle_t *handle) {
  xf_http *h = handle->data;
  if (--h->open_handles == 0) xf__http_free(h);
}

static void xf__on_timer(uv_timer_t *t);

/* Runs libmicrohttpd once and sets the timer to its next deadline. */
static void xf__http_pump(xf_http *h) {
  if (MHD_run(h->daemon) != MHD_YES) XF_WARN("http_error", "msg=\"MHD_run failed\"");
  MHD_UNSIGNED_LONG_LONG ms = 0;
  if (MHD_get_timeout(h->daemon, &ms) == MHD_YES) {
    if (ms > 3600000u) ms = 3600000u;
    uv_timer_start(&h->timer, xf__on_timer, (uint64_t)ms, 0);
  } else {
    uv_timer_stop(&h->timer);
  }
}

static void xf__on_timer(uv_timer_t *t) { xf__http_pump(t->data); }

static void xf__on_poll(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  xf__http_pump(p->data);
}

static const xf__route *xf__match(const xf_http *h, const char *method, const char *path,
                                  bool *path_known) {
  const xf__route *best = NULL;
  *path_known = false;
  /* HEAD is answered as GET without the body (libmicrohttpd drops it). */
  const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
  size_t best_len = 0;
  for (size_t i = 0; i < h->n_routes; i++) {
    const xf__route *r = &h->routes[i];
    bool hit = strcmp(r->prefix, "/") == 0 ||
               (strncmp(path, r->prefix, r->prefix_len) == 0 &&
                (path[r->prefix_len] == '\0' || path[r->prefix_len] == '/'));
    if (!hit) continue;
    *path_known = true;
    if (r->method[0] && strcmp(r->method, m) != 0) continue;
    if (!best || r->prefix_len > best_len) {
      best = r;
      best_len = r->prefix_len;
    }
  }
  return best;
}

static enum MHD_Result xf__queue(struct MHD_Connection *conn, xf_http_response *resp) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(resp->body_len, resp->body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  if (resp->content_type) MHD_add_response_header(r, "Content-Type", resp->content_type);
  for (size_t i = 0; i < resp->n_headers; i++)
    MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
  enum MHD_Result rc = MHD_queue_response(conn, (unsigned)resp->status, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result xf__reply_error(struct MHD_Connection *conn, int status,
                                       const char *text) {
  xf_http_response resp;
  memset(&resp, 0, sizeof(resp));
  xf_http_reply_text(&resp, status, "%s", text);
  enum MHD_Result rc = xf__queue(conn, &resp);
  xf_free(resp.body);
  return rc;
}

/* The client's certificate when it verified against client_ca_file. */
static void xf__client_cert(struct MHD_Connection *conn, xf_http_request *req) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (!ci || !ci->tls_session) return;
  gnutls_session_t s = (gnutls_session_t)ci->tls_session;
  unsigned status = 0;
  if (gnutls_certificate_verify_peers2(s, &status) != GNUTLS_E_SUCCESS || status != 0) return;
  unsigned n = 0;
  const gnutls_datum_t *chain = gnutls_certificate_get_peers(s, &n);
  if (!chain || n == 0) return;
  req->client_cert_der = chain[0].data;
  req->client_cert_len = chain[0].size;
}

static enum MHD_Result xf__access(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  xf_http *h = cls;
  xf__req *st = *con_cls;
  if (!st) {
    st = xf_calloc(1, sizeof(*st));
    if (!st) return MHD_NO;
    *con_cls = st;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
      char *end = NULL;
      errno = 0;
      unsigned long long v = strtoull(cl, &end, 10);
      if (errno || !end || *end || v > h->max_body) {
        st->too_large = true;
        return xf__reply_error(conn, MHD_HTTP_CONTENT_TOO_LARGE,
                               "the request body is larger than this server accepts");
      }
    }
    return MHD_YES;
  }
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (st->too_large) return MHD_YES;
    if (n > h->max_body - st->len) {
      st->too_large = true;
      return MHD_YES;
    }
    if (st->len + n + 1 > st->cap) {
      size_t cap = st->len + n + 1;
      char *b = xf_realloc(st->body, cap);
      if (!b) return MHD_NO;
      st->body = b;
      st->cap = cap;
    }
    memcpy(st->body + st->len, upload_data, n);
    st->len += n;
    st->body[st->len] = '\0';
    return MHD_YES;
  }
  if (st->too_large)
    return xf__reply_error(conn, MHD_HTTP_CONTENT_TOO_LARGE,
                           "the request body is larger than this server accepts");
  bool path_known = false;
  const xf__route *r = xf__match(h, method, url, &path_known);
  if (!r) {
    if (path_known) return xf__reply_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                                           "this path does not take that method");
    return xf__reply_error(conn, MHD_HTTP_NOT_FOUND, "no such path");
  }
  xf_http_request req = {.method = method, .path = url, .body = st->body ? st->body : "",
                         .body_len = st->len, .conn = conn};
  if (h->client_ca) xf__client_cert(conn, &req);
  xf_http_response resp;
  memset(&resp, 0, sizeof(resp));
  resp.status = MHD_HTTP_OK;
  r->fn(r->ctx, &req, &resp);
  if (resp.status < 100 || resp.status > 599) resp.status = MHD_HTTP_INTERNAL_SERVER_ERROR;
  enum MHD_Result rc = xf__queue(conn, &resp);
  xf_free(resp.body);
  return rc;
}

static void xf__completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)conn;
  (void)toe;
  xf__req *st = *con_cls;
  if (!st) return;
  xf_free(st->body);
  xf_free(st);
  *con_cls = NULL;
}

xf_err xf_http_start(uv_loop_t *loop, const xf_http_opts *opts, xf_http **out, xf_errctx *err) {
  *out = NULL;
  const char *host = opts->host && opts->host[0] ? opts->host : "127.0.0.1";
  if (opts->port < 0 || opts->port > 65535)
    return xf_fail(err, XF_EINVAL, "HTTP port %d is not from 0 to 65535", opts->port);
  if (!opts->cert_file != !opts->key_file)
    return xf_fail(err, XF_EINVAL, "HTTPS needs both a certificate and a key file");
  if (opts->client_ca_file && !opts->cert_file)
    return xf_fail(err, XF_EINVAL,
                   "client certificates need HTTPS: give a certificate and a key file too");
  struct sockaddr_storage sa;
  memset(&sa, 0, sizeof(sa));
  bool v6 = strchr(host, ':') != NULL;
  int urc = v6 ? uv_ip6_addr(host, opts->port, (struct sockaddr_in6 *)&sa)
               : uv_ip4_addr(host, opts->port, (struct sockaddr_in *)&sa);
  if (urc != 0)
    return xf_fail(err, XF_EINVAL, "'%s' is not a numeric IPv4 or IPv6 address", host);
  if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) != MHD_YES)
    return xf_fail(err, XF_EUNSUPPORTED, "this libmicrohttpd was built without epoll");
  if (opts->cert_file && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
    return xf_fail(err, XF_EUNSUPPORTED, "this libmicrohttpd was built without TLS");

  xf_http *h = xf_calloc(1, sizeof(*h));
  if (!h) return xf_fail(err, XF_ENOMEM, "no memory for the HTTP server");
  h->max_body = opts->max_request_body ? opts->max_request_body : XF_HTTP_MAX_REQUEST_BODY;
  xf_err rc = XF_OK;
  if (opts->cert_file) {
    if ((rc = xf__read_pem(opts->cert_file, false, &h->cert_pem, NULL, err)) != XF_OK ||
        (rc = xf__read_pem(opts->key_file, true, &h->key_pem, &h->key_cap, err)) != XF_OK ||
        (opts->client_ca_file &&
         (rc = xf__read_pem(opts->client_ca_file, false, &h->ca_pem, NULL, err)) != XF_OK)) {
      xf__http_free(h);
      return rc;
    }
    h->client_ca = opts->client_ca_file != NULL;
  }

  unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  if (v6) flags |= MHD_USE_IPv6;
  if (h->cert_pem) flags |= MHD_USE_TLS;
  unsigned max_conns = (unsigned)(opts->max_connections ? opts->max_connections
                                                        : XF_HTTP_MAX_CONNECTIONS);
  unsigned per_addr = (unsigned)(opts->max_connections_per_addr ? opts->max_connections_per_addr
                                                                : XF_HTTP_MAX_CONNECTIONS_PER_ADDR);
  struct MHD_OptionItem items[16];
  size_t n = 0;
  items[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &sa};
  items[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, max_conns, NULL};
  items[n++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_addr, NULL};
  items[n++] = (struct MHD_OptionItem){
      MHD_OPTION_CONNECTION_TIMEOUT, opts->timeout_s ? opts->timeout_s : XF_HTTP_TIMEOUT_S, NULL};
  /* Requests that break HTTP/1.1's rules (no Host, bad header lines) get
   * 400 rather than a guess. */
  items[n++] = (struct MHD_OptionItem){MHD_OPTION_STRICT_FOR_CLIENT, 1, NULL};
  items[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                       XF__HTTP_CONN_MEMORY, NULL};
  if (h->cert_pem) {
    items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->cert_pem};
    items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->key_pem};
    /* TLS 1.3 only, as on the federation's own connections. */
    items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                         (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3"};
    if (h->ca_pem) items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, h->ca_pem};
  }
  items[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  /* The callbacks go as varargs (function pointers do not fit an item). */
  h->daemon = MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, xf__access, h,
                               MHD_OPTION_EXTERNAL_LOGGER, xf__http_log, h,
                               MHD_OPTION_NOTIFY_COMPLETED, xf__completed, h, MHD_OPTION_ARRAY,
                               items + 0, MHD_OPTION_END);
  if (!h->daemon) {
    xf__http_free(h);
    return xf_fail(err, XF_EIO,
                   "cannot serve HTTP%s on %s:%d: the port is in use or the address is not "
                   "this host's%s",
                   opts->cert_file ? "S" : "", host, opts->port,
                   opts->cert_file ? ", or the certificate and key do not match" : "");
  }
  const union MHD_DaemonInfo *pi = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  const union MHD_DaemonInfo *ei = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_EPOLL_FD);
  if (!pi || !ei || ei->epoll_fd < 0) {
    MHD_stop_daemon(h->daemon);
    xf__http_free(h);
    return xf_fail(err, XF_EIO, "libmicrohttpd reports no port or epoll descriptor");
  }
  h->port = pi->port;
  if (uv_poll_init(loop, &h->poll, ei->epoll_fd) != 0) {
    MHD_stop_daemon(h->daemon);
    xf__http_free(h);
    return xf_fail(err, XF_EIO, "libuv cannot poll the HTTP server's epoll descriptor");
  }
  uv_timer_init(loop, &h->timer);
  h->poll.data = h;
  h->timer.data = h;
  h->open_handles = 2;
  uv_poll_start(&h->poll, UV_READABLE, xf__on_poll);
  xf__http_pump(h);
  *out = h;
  return XF_OK;
}

int xf_http_port(const xf_http *h) { return h->port; }

xf_err xf_http_route(xf_http *h, const char *method, const char *prefix, xf_http_handler fn,
                     void *ctx) {
  if (h->n_routes == XF__HTTP_ROUTES_MAX)
    return xf_fail(NULL, XF_ERANGE, "more than %d HTTP routes", XF__HTTP_ROUTES_MAX);
  if (!prefix || prefix[0] != '/' || strlen(prefix) >= sizeof(h->routes[0].prefix) ||
      (method && strlen(method) >= sizeof(h->routes[0].method)) || !fn)
    return xf_fail(NULL, XF_EINVAL, "an HTTP route needs a path starting with '/' and a handler");
  xf__route *r = &h->routes[h->n_routes++];
  snprintf(r->method, sizeof(r->method), "%s", method ? method : "");
  snprintf(r->prefix, sizeof(r->prefix), "%s", prefix);
  r->prefix_len = strlen(r->prefix);
  /* "/a/" and "/a" route the same paths. */
  while (r->prefix_len > 1 && r->prefix[r->prefix_len - 1] == '/') r->prefix[--r->prefix_len] = 0;
  r->fn = fn;
  r->ctx = ctx;
  return XF_OK;
}

const char *xf_http_query_arg(const xf_http_request *req, const char *name) {
  return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *xf_http_header(const xf_http_request *req, const char *name) {
  return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

void xf_http_reply_text(xf_http_response *resp, int status, const char *fmt, ...) {
  resp->status = status;
  resp->content_type = "text/plain; charset=utf-8";
  xf_free(resp->body);
  resp->body = NULL;
  resp->body_len = 0;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof(buf) - 1 ? (size_t)n : sizeof(buf) - 2;
  buf[len++] = '\n';
  resp->body = xf_malloc(len);
  if (!resp->body) return;
  memcpy(resp->body, buf, len);
  resp->body_len = len;
}

bool xf_http_add_header(xf_http_response *resp, const char *name, const char *value) {
  if (resp->n_headers == XF_HTTP_HEADERS_MAX) return false;
  snprintf(resp->headers[resp->n_headers].name, sizeof(resp->headers[0].name), "%s", name);
  snprintf(resp->headers[resp->n_headers].value, sizeof(resp->headers[0].value), "%s", value);
  resp->n_headers++;
  return true;
}

void xf_http_stop(xf_http *h) {
  if (!h) return;
  uv_poll_stop(&h->poll);
  uv_timer_stop(&h->timer);
  /* Closes the listening socket, every connection and the epoll
   * descriptor, after libuv has stopped watching it. */
  MHD_stop_daemon(h->daemon);
  h->daemon = NULL;
  uv_close((uv_handle_t *)&h->poll, xf__on_handle_closed);
  uv_close((uv_handle_t *)&h->timer, xf__on_handle_closed);
}
