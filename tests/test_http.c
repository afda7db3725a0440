/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP server (http/http.h) on a real loopback socket: routes, the
 * errors of bad requests, and HTTPS with and without a client certificate.
 * The server runs on the main thread's libuv loop, as in a daemon; each
 * test's client runs on a thread of its own with blocking sockets. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "base/alloc.h"
#include "crypto/pki.h"
#include "http/http.h"
#include "support.h"

#define REPLY_MAX 8192

typedef struct client {
  int port;
  /* TLS: the CA to verify the server with, and an optional client identity. */
  const char *ca, *cert, *key;
  const char *requests[8]; /* raw requests, each on its own connection */
  char replies[8][REPLY_MAX];
  uv_async_t done;
} client;

typedef struct served {
  int calls;
  bool saw_client_cert;
  char last_path[128];
  char last_body[128];
} served;

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

static void plain_exchange(int port, const char *request, char *reply) {
  reply[0] = '\0';
  int fd = tcp_connect(port);
  if (fd < 0) return;
  size_t len = strlen(request);
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, request + off, len - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  size_t got = 0;
  ssize_t r;
  while (got < REPLY_MAX - 1 && (r = read(fd, reply + got, REPLY_MAX - 1 - got)) > 0)
    got += (size_t)r;
  reply[got] = '\0';
  close(fd);
}

static void tls_exchange(const client *c, const char *request, char *reply) {
  reply[0] = '\0';
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_load_verify_locations(ctx, c->ca, NULL);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if (c->cert) {
    SSL_CTX_use_certificate_file(ctx, c->cert, SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM);
  }
  int fd = tcp_connect(c->port);
  SSL *ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  if (fd >= 0 && SSL_connect(ssl) == 1) {
    SSL_write(ssl, request, (int)strlen(request));
    size_t got = 0;
    int r;
    while (got < REPLY_MAX - 1 && (r = SSL_read(ssl, reply + got, (int)(REPLY_MAX - 1 - got))) > 0)
      got += (size_t)r;
    reply[got] = '\0';
  }
  SSL_free(ssl);
  if (fd >= 0) close(fd);
  SSL_CTX_free(ctx);
}

static void *client_main(void *arg) {
  client *c = arg;
  for (size_t i = 0; i < 8 && c->requests[i]; i++) {
    if (c->ca)
      tls_exchange(c, c->requests[i], c->replies[i]);
    else
      plain_exchange(c->port, c->requests[i], c->replies[i]);
  }
  uv_async_send(&c->done);
  return NULL;
}

static void on_done(uv_async_t *a) {
  xf_http *h = a->loop->data;
  xf_http_stop(h);
  uv_close((uv_handle_t *)a, NULL);
}

/* Runs the client against h on loop until it is done and h is stopped. */
static void run_client(uv_loop_t *loop, xf_http *h, client *c) {
  c->port = xf_http_port(h);
  loop->data = h;
  assert_int_equal(uv_async_init(loop, &c->done, on_done), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, client_main, c), 0);
  uv_run(loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
}

static void hello(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  served *s = ctx;
  s->calls++;
  s->saw_client_cert = req->client_cert_der != NULL && req->client_cert_len > 0;
  snprintf(s->last_path, sizeof(s->last_path), "%s", req->path);
  snprintf(s->last_body, sizeof(s->last_body), "%.*s", (int)req->body_len,
           (const char *)req->body);
  const char *who = xf_http_query_arg(req, "who");
  char text[256];
  int n = snprintf(text, sizeof(text), "hello %s cert=%s", who ? who : "world",
                   s->saw_client_cert ? "yes" : "no");
  resp->body = xf_malloc((size_t)n);
  memcpy(resp->body, text, (size_t)n);
  resp->body_len = (size_t)n;
  resp->content_type = "text/plain";
  assert_true(xf_http_add_header(resp, "X-Xfed-Test", "1"));
}

static void deeper(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  (void)req;
  served *s = ctx;
  s->calls++;
  xf_http_reply_text(resp, 503, "deeper route");
}

static void http_routes_by_longest_prefix_and_answers_bad_requests_with_4xx(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  xf_http *h = NULL;
  xf_http_opts o = {.port = 0, .max_request_body = 16};
  assert_int_equal(xf_http_start(&loop, &o, &h, NULL), XF_OK);
  assert_true(xf_http_port(h) > 0);
  served s = {0}, d = {0};
  assert_int_equal(xf_http_route(h, "GET", "/hello", hello, &s), XF_OK);
  assert_int_equal(xf_http_route(h, "POST", "/echo", hello, &s), XF_OK);
  assert_int_equal(xf_http_route(h, NULL, "/hello/deeper/", deeper, &d), XF_OK);
  client c = {.requests = {
                  "GET /hello?who=op HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                  "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                  "DELETE /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                  "GET /hello/deeper/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: "
                  "close\r\n\r\nabcde",
                  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\nConnection: "
                  "close\r\n\r\n01234567890123456",
                  "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n",
                  "GET /helloworld HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"}};
  run_client(&loop, h, &c);
  assert_non_null(strstr(c.replies[0], "HTTP/1.1 200"));
  assert_non_null(strstr(c.replies[0], "X-Xfed-Test: 1"));
  assert_non_null(strstr(c.replies[0], "\r\n\r\nhello op cert=no"));
  assert_non_null(strstr(c.replies[1], "HTTP/1.1 404"));
  assert_non_null(strstr(c.replies[2], "HTTP/1.1 405"));
  assert_non_null(strstr(c.replies[3], "HTTP/1.1 503"));
  assert_non_null(strstr(c.replies[3], "deeper route"));
  assert_non_null(strstr(c.replies[4], "HTTP/1.1 200"));
  assert_non_null(strstr(c.replies[5], "HTTP/1.1 413"));
  assert_non_null(strstr(c.replies[6], "HTTP/1.1 400"));
  assert_non_null(strstr(c.replies[7], "HTTP/1.1 404"));
  assert_int_equal(s.calls, 2);
  assert_string_equal(s.last_body, "abcde");
  assert_int_equal(d.calls, 1);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

static void http_refuses_a_bad_address_and_missing_tls_files(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  xf_http *h = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_http_opts o = {.host = "localhost", .port = 0};
  assert_int_equal(xf_http_start(&loop, &o, &h, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "numeric"));
  xf_http_opts t = {.port = 0, .cert_file = "/nonexistent/c.pem", .key_file = "/nonexistent/k"};
  assert_int_equal(xf_http_start(&loop, &t, &h, &err), XF_EIO);
  assert_string_equal(err.file, "/nonexistent/c.pem");
  xf_http_opts k = {.port = 0, .cert_file = "/nonexistent/c.pem"};
  assert_int_equal(xf_http_start(&loop, &k, &h, &err), XF_EINVAL);
  assert_null(h);
  assert_int_equal(uv_loop_close(&loop), 0);
}

static void https_hands_verified_client_certificates_to_the_handler(void **state) {
  (void)state;
  char dir[512];
  assert_int_equal(xf_test_mkdtemp(dir, sizeof(dir), "http"), 0);
  char pki[600];
  snprintf(pki, sizeof(pki), "%s/pki", dir);
  xf_federation *fed = NULL;
  xf_errctx ferr;
  xf_errctx_clear(&ferr);
  xf_err frc = xf_federation_init(pki, "fed", 3650, &fed, &ferr);
  if (frc != XF_OK) fprintf(stderr, "federation init: %s\n", ferr.msg);
  assert_int_equal(frc, XF_OK);
  xf_pki_issue_opts coord = {.kind = XF_PKI_KIND_COORDINATOR, .name = "coord"};
  xf_pki_issue_opts user = {.kind = XF_PKI_KIND_USER, .name = "ana",
                            .role = XF_PKI_ROLE_RESEARCHER};
  assert_int_equal(xf_federation_issue(fed, &coord, NULL, NULL), XF_OK);
  assert_int_equal(xf_federation_issue(fed, &user, NULL, NULL), XF_OK);
  char ca[700], ccrt[600], ckey[600], ucrt[600], ukey[600];
  snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
  assert_int_equal(xf_federation_cert_path(fed, "coord", ccrt, sizeof(ccrt), NULL), XF_OK);
  assert_int_equal(xf_federation_key_path(fed, "coord", ckey, sizeof(ckey), NULL), XF_OK);
  assert_int_equal(xf_federation_cert_path(fed, "ana", ucrt, sizeof(ucrt), NULL), XF_OK);
  assert_int_equal(xf_federation_key_path(fed, "ana", ukey, sizeof(ukey), NULL), XF_OK);
  xf_federation_close(fed);

  const char *get = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (int with_cert = 0; with_cert < 2; with_cert++) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    xf_http *h = NULL;
    xf_http_opts o = {.port = 0, .cert_file = ccrt, .key_file = ckey, .client_ca_file = ca};
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_http_start(&loop, &o, &h, &err);
    if (rc != XF_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, XF_OK);
    served s = {0};
    assert_int_equal(xf_http_route(h, "GET", "/hello", hello, &s), XF_OK);
    client c = {.ca = ca, .cert = with_cert ? ucrt : NULL, .key = with_cert ? ukey : NULL,
                .requests = {get}};
    run_client(&loop, h, &c);
    assert_non_null(strstr(c.replies[0], "HTTP/1.1 200"));
    assert_non_null(strstr(c.replies[0], with_cert ? "cert=yes" : "cert=no"));
    assert_int_equal(s.calls, 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
  }
  xf_test_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(http_routes_by_longest_prefix_and_answers_bad_requests_with_4xx),
      cmocka_unit_test(http_refuses_a_bad_address_and_missing_tls_files),
      cmocka_unit_test(https_hands_verified_client_certificates_to_the_handler),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
