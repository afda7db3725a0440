/* SPDX-License-Identifier: Apache-2.0 */
/* The CLI's client of the coordinator (cli/client.h): settings from flags,
 * environment and profile; one session as role "cli" on a loop of its own;
 * blocking requests and model downloads on top of it. */
#include "cli/client.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/name.h"
#include "net/conn.h"
#include "net/document.h"
#include "net/frame.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"

/* Reconnects a model download makes after its connection drops. */
#define FETCH_RECONNECTS 3

/* ---- flags ------------------------------------------------------------------ */

int xf_client_flag(xf_cli *cli, xf_client_flags *f, int ch, const char *arg) {
  switch (ch) {
  case XF_CLIENT_OPT_COORDINATOR: f->coordinator = arg; return XF_EXIT_OK;
  case XF_CLIENT_OPT_CERT: f->cert = arg; return XF_EXIT_OK;
  case XF_CLIENT_OPT_KEY: f->key = arg; return XF_EXIT_OK;
  case XF_CLIENT_OPT_CA: f->ca = arg; return XF_EXIT_OK;
  case XF_CLIENT_OPT_CRL: f->crl = arg; return XF_EXIT_OK;
  case XF_CLIENT_OPT_TIMEOUT:
    if (xf_cli_parse_double(cli, "--timeout", arg, 0.001, 86400, &f->timeout_s) != XF_OK)
      return xf_cli_usage(cli, "%s", cli->err.msg);
    return XF_EXIT_OK;
  default: return -1;
  }
}

/* ---- settings: flags, environment, profile ------------------------------------ */

enum { SET_COORDINATOR = 0, SET_CERT, SET_KEY, SET_CA, SET_CRL, SET_COUNT };

static const struct {
  const char *key, *flag, *env, *what;
} settings[SET_COUNT] = {
    {"coordinator", "--coordinator HOST:PORT", "XFED_COORDINATOR", "no coordinator"},
    {"cert", "--cert FILE", "XFED_CERT", "no certificate"},
    {"key", "--key FILE", "XFED_KEY", "no key"},
    {"ca", "--ca FILE", "XFED_CA", "no CA certificate"},
    {"crl", "--crl FILE", "XFED_CRL", "no CRL"},
};

static char *setting_slot(xf_client_config *c, int i) {
  switch (i) {
  case SET_COORDINATOR: return c->coordinator;
  case SET_CERT: return c->cert;
  case SET_KEY: return c->key;
  case SET_CA: return c->ca;
  default: return c->crl;
  }
}

static size_t setting_size(int i) {
  return i == SET_COORDINATOR ? XF_CLIENT_ADDR_MAX : XF_CLIENT_PATH_MAX;
}

/* Copies value into setting i; XF_EUSAGE when it does not fit. */
static xf_err set_value(xf_client_config *c, int i, const char *value, const char *source,
                        xf_errctx *err) {
  char *slot = setting_slot(c, i);
  int w = snprintf(slot, setting_size(i), "%s", value);
  if (w < 0 || (size_t)w >= setting_size(i))
    return xf_fail(err, XF_EUSAGE, "%s: the value of %s is longer than %zu bytes", source,
                   settings[i].key, setting_size(i) - 1);
  snprintf(c->source[i], sizeof(c->source[i]), "%s", source);
  return XF_OK;
}

/* Where the profile is: XFED_PROFILE (explicit: must exist), else
 * $HOME/.config/xfed/profile.json (may be missing). False when there is none
 * to look at. */
static bool profile_path(char *buf, size_t n, bool *explicit_path) {
  const char *p = getenv("XFED_PROFILE");
  *explicit_path = p && *p;
  if (*explicit_path) {
    snprintf(buf, n, "%s", p);
    return true;
  }
  const char *home = getenv("HOME");
  if (!home || !*home) return false;
  int w = snprintf(buf, n, "%s/.config/xfed/profile.json", home);
  return w > 0 && (size_t)w < n;
}

/* A profile path value: absolute as written, relative ones against the
 * profile's directory. */
static xf_err profile_join(const char *profile, const char *value, char *out, size_t n) {
  int w;
  const char *slash = strrchr(profile, '/');
  if (value[0] == '/' || !slash) w = snprintf(out, n, "%s", value);
  else w = snprintf(out, n, "%.*s/%s", (int)(slash - profile), profile, value);
  return w < 0 || (size_t)w >= n ? XF_ERANGE : XF_OK;
}

/* Fills the settings still empty from the profile. */
static xf_err profile_apply(xf_client_config *c, const char *path, bool explicit_path,
                            xf_errctx *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT && !explicit_path) return XF_OK;
    return xf_fail_in_file(err, errno == ENOENT ? XF_ENOENT : XF_EIO, path, NULL,
                           "cannot read the profile: %s%s", strerror(errno),
                           explicit_path ? " (named by XFED_PROFILE)" : "");
  }
  json_error_t je;
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
  fclose(f);
  if (!root) {
    char where[64];
    snprintf(where, sizeof(where), "line %d, column %d", je.line, je.column);
    return xf_fail_in_file(err, XF_EFORMAT, path, where, "%s", je.text);
  }
  xf_err rc = XF_OK;
  if (!json_is_object(root)) {
    rc = xf_fail_in_file(err, XF_EFORMAT, path, NULL,
                         "a profile is one JSON object with the keys coordinator, cert, key, ca "
                         "and crl");
    goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    int i = 0;
    while (i < SET_COUNT && strcmp(settings[i].key, key) != 0) i++;
    if (i == SET_COUNT) {
      rc = xf_fail_in_file(err, XF_EFORMAT, path, key,
                           "unknown key; a profile holds coordinator, cert, key, ca and crl");
      goto out;
    }
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        strlen(json_string_value(v)) != json_string_length(v)) {
      rc = xf_fail_in_file(err, XF_EFORMAT, path, key, "must be a non-empty string");
      goto out;
    }
    if (setting_slot(c, i)[0]) continue; /* a flag or a variable said it already */
    char value[XF_CLIENT_PATH_MAX];
    if (i == SET_COORDINATOR ? strlen(json_string_value(v)) >= XF_CLIENT_ADDR_MAX
                             : profile_join(path, json_string_value(v), value,
                                            sizeof(value)) != XF_OK) {
      rc = xf_fail_in_file(err, XF_EFORMAT, path, key, "the value is too long");
      goto out;
    }
    char source[XF_CLIENT_PATH_MAX + 32];
    snprintf(source, sizeof(source), "%.4000s key %s", path, key);
    rc = set_value(c, i, i == SET_COORDINATOR ? json_string_value(v) : value, source, err);
    if (rc != XF_OK) goto out;
  }
out:
  json_decref(root);
  return rc;
}

xf_err xf_client_config_resolve(const xf_client_flags *flags, xf_client_config *out,
                                xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  const char *given[SET_COUNT] = {flags->coordinator, flags->cert, flags->key, flags->ca,
                                  flags->crl};
  static const char *const flag_names[SET_COUNT] = {"--coordinator", "--cert", "--key", "--ca",
                                                    "--crl"};
  bool missing = false;
  for (int i = 0; i < SET_COUNT; i++) {
    const char *env = getenv(settings[i].env);
    if (given[i] && !*given[i])
      return xf_fail(err, XF_EUSAGE, "%s needs a value", flag_names[i]);
    if (given[i]) XF_GUARD(set_value(out, i, given[i], flag_names[i], err));
    else if (env && *env) XF_GUARD(set_value(out, i, env, settings[i].env, err));
    else missing = true;
  }
  char profile[XF_CLIENT_PATH_MAX];
  bool explicit_path = false;
  bool have_profile = profile_path(profile, sizeof(profile), &explicit_path);
  if (missing && have_profile) XF_GUARD(profile_apply(out, profile, explicit_path, err));
  for (int i = 0; i < SET_COUNT; i++) {
    if (setting_slot(out, i)[0]) continue;
    return xf_fail(err, XF_EUSAGE,
                   "%s: pass %s, set %s, or set \"%s\" in the profile (%s%s)", settings[i].what,
                   settings[i].flag, settings[i].env, settings[i].key,
                   have_profile ? profile : "XFED_PROFILE or $HOME/.config/xfed/profile.json",
                   have_profile && !explicit_path ? ", which does not exist or lacks it" : "");
  }
  xf_errctx why;
  xf_errctx_clear(&why);
  if (xf_address_parse(out->coordinator, out->host, sizeof(out->host), &out->port, &why) !=
      XF_OK)
    return xf_fail(err, XF_EUSAGE, "%s (from %s)", why.msg, out->source[SET_COORDINATOR]);
  double t = flags->timeout_s > 0 ? flags->timeout_s : XF_CLIENT_TIMEOUT_S;
  out->timeout_ms = (uint32_t)fmax(1.0, round(t * 1000.0));
  return XF_OK;
}

/* ---- the session -------------------------------------------------------------- */

/* What the loop is being run for. */
typedef enum waiting {
  WAIT_NONE = 0,
  WAIT_RESOLVE, /* uv_getaddrinfo */
  WAIT_OPEN,    /* the hello exchange */
  WAIT_ANSWER,  /* one answer of c->want */
  WAIT_MODEL,   /* a MODEL stream to its end */
  WAIT_CLOSE,   /* on_close */
  WAIT_SLEEP    /* the timer */
} waiting;

/* A request too large for one frame, going out as a DOCUMENT stream
 * (docs/protocol.md, "Messages larger than a frame"). */
typedef struct upload {
  xf_tensor_sender *tx;
  uint8_t *bytes; /* the packed request, which tx borrows */
  size_t len;
  xf_tensor_msg msg;
  bool pending;   /* msg was refused as busy: send it again on drain */
  bool await_ack; /* TensorBegin went out: wait for where to start */
  bool end_sent;
} upload;

/* A model stream coming in. */
typedef struct model_rx {
  xf_tensor_receiver *rx;
  uint8_t *buf;
  uint64_t total;
  uint64_t max;
  const char *job_id; /* borrowed from the caller */
  bool complete;
} model_rx;

struct xf_client {
  xf_client_config cfg;
  uv_loop_t loop;
  bool loop_ready;
  uv_timer_t timer;
  bool timer_ready, timer_fired;
  uint32_t wait_ms;   /* the current wait's timeout, restarted by frames */
  bool timed_out;     /* the last exchange ended for want of an answer */
  xf_tls *tls;
  xf_spiffe_id self;
  char self_uri[XF_SPIFFE_MAX];

  /* the connection: conn is NULL when there is none */
  xf_conn *conn;
  xf_session session;
  bool open;
  xf_conn_reason why; /* of the last close */
  Xfed__Refusal__Reason refusal; /* of the last Refusal the coordinator sent */

  /* the loop's current purpose and its outcome */
  waiting wait;
  bool done;
  xf_err failure; /* XF_OK, or what ended the wait */
  xf_errctx failure_ctx;

  /* name resolution */
  uv_getaddrinfo_t resolve;
  struct addrinfo *addrs;
  int resolve_status;

  /* a request */
  Xfed__Envelope__BodyCase want;
  Xfed__Envelope *answer;
  model_rx *model;
  upload *up;              /* the request's DOCUMENT stream, while one goes out */
  xf_document_rx *doc_in;  /* an answer coming as a DOCUMENT stream */
  uint64_t next_stream;    /* ids of our DOCUMENT streams */
};

static void on_timer(uv_timer_t *t) {
  xf_client *c = t->data;
  c->timer_fired = true;
}

/* Ends the current wait with code and a message (the first one sticks). */
static void wait_fail(xf_client *c, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);
static void wait_fail(xf_client *c, xf_err code, const char *fmt, ...) {
  if (!c->done) {
    xf_errctx_clear(&c->failure_ctx);
    va_list ap;
    va_start(ap, fmt);
    xf_vfail(&c->failure_ctx, code, fmt, ap);
    va_end(ap);
    xf_errctx_peer(&c->failure_ctx, c->cfg.coordinator);
    c->failure = code;
  }
  c->done = true;
}

static void wait_done(xf_client *c) {
  if (c->done) return; /* a failure came first */
  c->failure = XF_OK;
  c->done = true;
}

/* Runs the loop until the wait is done, ms have passed, or nothing is left
 * to run. While an answer or a model is awaited, every frame restarts the
 * timer (on_frame). Returns true when the wait is done. */
static bool run_wait(xf_client *c, waiting w, uint32_t ms) {
  c->wait = w;
  c->done = false;
  c->failure = XF_OK;
  xf_errctx_clear(&c->failure_ctx);
  c->timer_fired = false;
  c->wait_ms = ms;
  uv_timer_start(&c->timer, on_timer, ms, 0);
  while (!c->done && !c->timer_fired)
    if (uv_run(&c->loop, UV_RUN_ONCE) == 0 && !c->done && !c->timer_fired) break;
  uv_timer_stop(&c->timer);
  c->wait = WAIT_NONE;
  return c->done;
}

/* The failure of the last wait into err. */
static xf_err take_failure(xf_client *c, xf_errctx *err) {
  if (err) *err = c->failure_ctx;
  return c->failure;
}

static void send_env(xf_client *c, const Xfed__Envelope *env) {
  xf_errctx e;
  xf_errctx_clear(&e);
  if (!c->conn || xf_conn_send(c->conn, env, &e) != XF_OK)
    wait_fail(c, XF_EIO, "cannot send to the coordinator: %s",
              e.msg[0] ? e.msg : "not connected");
}

static void send_ack(xf_client *c, const xf_tensor_receiver *rx) {
  Xfed__TensorAck ack;
  xf_tensor_receiver_ack(rx, &ack);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &ack;
  send_env(c, &env);
}

/* A deep copy of a borrowed Envelope, by packing and parsing it again. */
static xf_err copy_envelope(const Xfed__Envelope *env, Xfed__Envelope **out, xf_errctx *err) {
  size_t n = protobuf_c_message_get_packed_size(&env->base);
  uint8_t *buf = xf_malloc(n ? n : 1);
  if (!buf) return xf_fail(err, XF_ENOMEM, "cannot copy an answer of %zu bytes", n);
  protobuf_c_message_pack(&env->base, buf);
  xf_err rc = xf_envelope_unpack(buf, n, out, err);
  xf_free(buf);
  return rc;
}

/* The coordinator's Error, as our error. Codes this build does not know
 * become XF_EINTERNAL with the number in the message. */
static void take_error_answer(xf_client *c, const Xfed__Error *e) {
  const char *msg = e->message && *e->message ? e->message : "no message";
  if (e->code == 0 || e->code >= XF_ERR_COUNT)
    wait_fail(c, XF_EINTERNAL, "the coordinator answered with error %u: %s", (unsigned)e->code,
              msg);
  else
    wait_fail(c, (xf_err)e->code, "%s", msg);
}

static bool model_frame(xf_client *c, const Xfed__Envelope *env);

/* ---- messages larger than a frame ----------------------------------------------------- */

/* Sends the upload's messages until the connection is busy (on_drain goes
 * on), TensorBegin waits for its TensorAck, or TensorEnd is out. Each
 * message sent restarts the answer's timer: a long upload is progress. */
static void upload_pump(xf_client *c) {
  upload *u = c->up;
  while (u && !u->await_ack && c->conn) {
    if (!u->pending) {
      if (xf_tensor_sender_next(u->tx, &u->msg) != XF_OK) return; /* all out: await the ack */
      u->pending = true;
    }
    xf_errctx e;
    xf_errctx_clear(&e);
    xf_err rc = xf_conn_send(c->conn, &u->msg.env, &e);
    if (rc == XF_ERANGE) return;
    if (rc != XF_OK) {
      wait_fail(c, rc, "cannot send the request: %s", e.msg);
      return;
    }
    u->pending = false;
    if (c->wait == WAIT_ANSWER) uv_timer_start(&c->timer, on_timer, c->wait_ms, 0);
    if (u->msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) u->await_ack = true;
    if (u->msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_END) u->end_sent = true;
  }
}

static void upload_acked(xf_client *c, const Xfed__TensorAck *a) {
  upload *u = c->up;
  xf_errctx e;
  xf_errctx_clear(&e);
  if (xf_tensor_sender_resume(u->tx, a->next_offset, &e) != XF_OK) {
    wait_fail(c, XF_EFORMAT, "the coordinator acknowledged the request badly: %s", e.msg);
    return;
  }
  u->await_ack = false;
  if (a->next_offset == u->len && u->end_sent) return; /* delivered: the answer follows */
  u->end_sent = false; /* bytes went missing: resume where the ack says */
  upload_pump(c);
}

static void upload_free(upload *u) {
  if (!u) return;
  xf_tensor_sender_free(u->tx);
  xf_free(u->bytes);
  xf_free(u);
}

/* Sends TensorBegin of req's DOCUMENT stream; its TensorAck, while the
 * answer is awaited, lets the chunks go. */
static xf_err upload_start(xf_client *c, const Xfed__Envelope *req, xf_errctx *err) {
  upload *u = xf_calloc(1, sizeof(*u));
  if (!u) return xf_fail(err, XF_ENOMEM, "cannot hold the request");
  xf_err rc = xf_document_pack(req, &u->bytes, &u->len, err);
  if (rc == XF_OK) {
    const xf_tensor_desc d = xf_document_desc(++c->next_stream, u->len);
    rc = xf_tensor_sender_new(&d, u->bytes, u->len,
                              xf_document_chunk(xf_conn_peer_max_frame(c->conn)), &u->tx, err);
  }
  if (rc == XF_OK && xf_tensor_sender_next(u->tx, &u->msg) != XF_OK)
    rc = xf_fail(err, XF_EINTERNAL, "the request's stream has no TensorBegin");
  if (rc == XF_OK) rc = xf_conn_send(c->conn, &u->msg.env, err);
  if (rc != XF_OK) {
    upload_free(u);
    return rc;
  }
  u->await_ack = true;
  c->up = u;
  return XF_OK;
}

/* A frame of an answer that comes as a DOCUMENT stream. */
static void document_frame(xf_client *c, const Xfed__Envelope *env) {
  xf_errctx e;
  xf_errctx_clear(&e);
  xf_err rc = c->doc_in ? XF_OK : xf_document_rx_new(XF_DOCUMENT_MAX, &c->doc_in, &e);
  xf_document_step step;
  memset(&step, 0, sizeof(step));
  if (rc == XF_OK) rc = xf_document_rx_take(c->doc_in, env, &step, &e);
  if (rc != XF_OK) {
    if (rc == XF_EINTEGRITY) xf_session_send_error(c->conn, rc, "%s", e.msg);
    wait_fail(c, rc, "the answer: %s", e.msg);
    xf_conn_close(c->conn); /* what else the coordinator sends answers nothing */
    return;
  }
  if (step.ack) {
    Xfed__Envelope ack = XFED__ENVELOPE__INIT;
    ack.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
    ack.tensor_ack = &step.tensor_ack;
    send_env(c, &ack);
  }
  Xfed__Envelope *m = step.message;
  if (!m) return;
  if (m->body_case == c->want) {
    c->answer = m;
    wait_done(c);
    return;
  }
  if (m->body_case == XFED__ENVELOPE__BODY_ERROR) take_error_answer(c, m->error);
  else
    wait_fail(c, XF_EFORMAT, "the coordinator sent %s where the answer was expected",
              xf_envelope_body_name(m));
  xf_envelope_free(m);
}

static void on_drain(xf_conn *conn) {
  xf_client *c = xf_conn_user(conn);
  upload_pump(c);
}

static void on_frame(xf_conn *conn, const Xfed__Envelope *env) {
  xf_client *c = xf_conn_user(conn);
  if (env->body_case == XFED__ENVELOPE__BODY_REFUSAL) c->refusal = env->refusal->reason;
  xf_session_event ev = XF_SESSION_HANDLED;
  xf_errctx e;
  xf_errctx_clear(&e);
  xf_err rc = xf_session_on_frame(&c->session, conn, env, &ev, &e);
  if (rc != XF_OK) {
    wait_fail(c, rc, "%s", e.msg);
    xf_conn_close(conn);
    return;
  }
  if (ev == XF_SESSION_OPENED) {
    c->open = true;
    if (c->wait == WAIT_OPEN) wait_done(c);
    return;
  }
  if (ev != XF_SESSION_FRAME) return;
  /* A frame is a sign of life: a long model download never times out while
   * chunks keep coming. */
  if (c->wait == WAIT_ANSWER || c->wait == WAIT_MODEL)
    uv_timer_start(&c->timer, on_timer, c->wait_ms, 0);
  if (c->wait == WAIT_MODEL && c->model) {
    if (model_frame(c, env)) return;
  } else if (c->wait == WAIT_ANSWER) {
    if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
      take_error_answer(c, env->error);
      return;
    }
    if (xf_document_frame(env)) {
      document_frame(c, env);
      return;
    }
    if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_ACK && c->up) {
      upload_acked(c, env->tensor_ack);
      return;
    }
    if (env->body_case == c->want) {
      xf_errctx ce;
      xf_errctx_clear(&ce);
      if (copy_envelope(env, &c->answer, &ce) != XF_OK)
        wait_fail(c, ce.code, "%s", ce.msg);
      else wait_done(c);
      return;
    }
  }
  if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
    /* An error that answers nothing we asked (a late one, say): log it. */
    XF_WARN("coordinator_error", "code=%u message=\"%s\"", (unsigned)env->error->code,
            env->error->message ? env->error->message : "");
    return;
  }
  if (c->wait == WAIT_ANSWER || c->wait == WAIT_MODEL) {
    wait_fail(c, XF_EFORMAT, "the coordinator sent %s where the answer was expected",
              xf_envelope_body_name(env));
    return;
  }
  XF_DEBUG("unexpected_frame", "body=%s", xf_envelope_body_name(env));
}

static xf_err on_connect(xf_conn *conn, const xf_spiffe_id *peer) {
  xf_client *c = xf_conn_user(conn);
  if (peer->kind != XF_PKI_KIND_COORDINATOR) {
    char uri[XF_SPIFFE_MAX];
    if (xf_spiffe_format(peer, uri, NULL) != XF_OK) snprintf(uri, sizeof(uri), "?");
    wait_fail(c, XF_EINTEGRITY, "the peer at %s is %s, not a coordinator", c->cfg.coordinator,
              uri);
    return XF_EINTEGRITY;
  }
  xf_errctx e;
  xf_errctx_clear(&e);
  xf_err rc = xf_session_start(&c->session, conn, "cli", 0, &e);
  if (rc != XF_OK) wait_fail(c, rc, "cannot start the session: %s", e.msg);
  return rc;
}

/* Ends the wait saying that the address is one of the coordinator's web
 * ports (https: the dashboard's; else the metrics'), not its federation port. */
static void web_port_fail(xf_client *c, bool https) {
  wait_fail(c, XF_EUSAGE,
            "this address answers as a web server (%s), not as the coordinator's federation "
            "port: it looks like the coordinator's %s port. Give --coordinator (or "
            "XFED_COORDINATOR) the address of its --listen flag (port 7443 unless changed)",
            https ? "HTTPS that asks for no client certificate" : "plain HTTP",
            https ? "HTTPS --dashboard" : "HTTP --metrics");
}

/* Whether ip:port answers a plain HTTP request as a web server does
 * ("HTTP/..."), within PROBE_MS for the connect and as much for the answer.
 * Asked only after a TLS handshake the peer cut short or reset: a web
 * server answers a ClientHello with "400 Bad Request" and closes, but when it
 * closes before reading all of it the kernel resets the connection, and the
 * reset may discard that answer before this side reads it. A whole request
 * is read whole, so its answer arrives. */
#define PROBE_MS 5000
static bool answers_plain_http(const char *ip, uint16_t port) {
  char service[8];
  snprintf(service, sizeof(service), "%u", (unsigned)port);
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                           .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(ip, service, &hints, &ai) != 0 || !ai) return false;
  bool http = false;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) goto out;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) goto out;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int soerr = 0;
  socklen_t len = sizeof(soerr);
  if (poll(&p, 1, PROBE_MS) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 ||
      soerr != 0)
    goto out;
  static const char request[] = "HEAD / HTTP/1.0\r\n\r\n";
  if (send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(request) - 1))
    goto out;
  char answer[5];
  size_t got = 0;
  while (got < sizeof(answer)) {
    p = (struct pollfd){.fd = fd, .events = POLLIN};
    if (poll(&p, 1, PROBE_MS) != 1) break;
    ssize_t n = recv(fd, answer + got, sizeof(answer) - got, 0);
    if (n <= 0) break;
    got += (size_t)n;
  }
  http = got == sizeof(answer) && memcmp(answer, "HTTP/", sizeof(answer)) == 0;
out:
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  return http;
}

static void on_close(xf_conn *conn, const xf_conn_reason *why) {
  xf_client *c = xf_conn_user(conn);
  c->conn = NULL;
  c->open = false;
  c->why = *why;
  if (c->wait == WAIT_CLOSE) {
    wait_done(c);
    return;
  }
  if (c->wait == WAIT_NONE || c->wait == WAIT_SLEEP || c->wait == WAIT_RESOLVE) return;
  if (why->http) web_port_fail(c, why->https);
  else if (why->end == XF_CONN_END_TLS && why->verdict != XF_PKI_OK)
    wait_fail(c, XF_EINTEGRITY, "the TLS handshake failed: %s", why->msg);
  else if (why->end == XF_CONN_END_CLOSED || why->end == XF_CONN_END_PEER_CLOSED)
    wait_fail(c, XF_EIO, "the coordinator closed the connection");
  else wait_fail(c, XF_EIO, "%s: %s", xf_conn_end_message(why->end), why->msg);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  xf_client *c = req->data;
  c->addrs = res;
  c->resolve_status = status;
  if (c->wait == WAIT_RESOLVE) wait_done(c);
}

/* Resolves the coordinator's name into c->addrs. */
static xf_err resolve(xf_client *c, uint32_t ms, xf_errctx *err) {
  char port[8];
  snprintf(port, sizeof(port), "%u", (unsigned)c->cfg.port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  c->resolve.data = c;
  c->addrs = NULL;
  c->resolve_status = 0;
  int e = uv_getaddrinfo(&c->loop, &c->resolve, on_resolved, c->cfg.host, port, &hints);
  if (e != 0) {
    xf_fail(err, XF_EIO, "cannot resolve '%s': %s", c->cfg.host, uv_strerror(e));
    xf_errctx_peer(err, c->cfg.coordinator);
    return XF_EIO;
  }
  if (!run_wait(c, WAIT_RESOLVE, ms)) {
    /* Give the request back before failing: its callback still comes. */
    (void)uv_cancel((uv_req_t *)&c->resolve);
    run_wait(c, WAIT_RESOLVE, 60000);
    if (c->addrs) uv_freeaddrinfo(c->addrs);
    c->addrs = NULL;
    xf_fail(err, XF_EIO, "resolving '%s' took longer than %u ms", c->cfg.host, (unsigned)ms);
    xf_errctx_peer(err, c->cfg.coordinator);
    return XF_EIO;
  }
  if (c->resolve_status != 0 || !c->addrs) {
    xf_fail(err, XF_EIO, "cannot resolve '%s': %s", c->cfg.host,
            uv_strerror(c->resolve_status ? c->resolve_status : UV_EAI_NONAME));
    xf_errctx_peer(err, c->cfg.coordinator);
    return XF_EIO;
  }
  return XF_OK;
}

/* Dials one numeric address and runs the hello. */
static xf_err dial_one(xf_client *c, const char *ip, uint32_t ms, xf_errctx *err) {
  xf_conn_opts o = {.on_connect = on_connect, .on_frame = on_frame, .on_drain = on_drain,
                    .on_close = on_close, .user = c};
  memset(&c->session, 0, sizeof(c->session));
  memset(&c->why, 0, sizeof(c->why));
  c->refusal = XFED__REFUSAL__REASON__UNSPECIFIED;
  c->open = false;
  xf_err rc = xf_dial(&c->loop, c->tls, ip, c->cfg.port, &o, &c->conn, err);
  if (rc != XF_OK) {
    xf_errctx_peer(err, c->cfg.coordinator);
    return rc;
  }
  if (run_wait(c, WAIT_OPEN, ms) && c->failure == XF_OK) return XF_OK;
  /* A handshake cut short or reset: ask whether a web server is there. */
  if (c->done && c->failure == XF_EIO && !c->open &&
      (c->why.end == XF_CONN_END_TLS || c->why.end == XF_CONN_END_IO ||
       c->why.end == XF_CONN_END_PEER_CLOSED) &&
      !c->why.http && c->why.verdict == XF_PKI_OK && answers_plain_http(ip, c->cfg.port)) {
    c->done = false;
    web_port_fail(c, false);
  }
  if (!c->done)
    wait_fail(c, XF_EIO, "no session with the coordinator within %u ms", (unsigned)ms);
  rc = take_failure(c, err);
  if (c->conn) {
    xf_conn_close(c->conn);
    run_wait(c, WAIT_CLOSE, XF_CONN_CLOSE_TIMEOUT_MS + 1000);
  }
  return rc;
}

/* One pass over the addresses the name resolves to, within ms. */
static xf_err connect_once(xf_client *c, uint32_t ms, xf_errctx *err) {
  uint64_t start = uv_now(&c->loop);
  XF_GUARD(resolve(c, ms, err));
  xf_err rc = XF_EIO;
  int tried = 0;
  for (struct addrinfo *a = c->addrs; a; a = a->ai_next) {
    char ip[64];
    if (a->ai_family == AF_INET)
      uv_ip4_name((const struct sockaddr_in *)a->ai_addr, ip, sizeof(ip));
    else if (a->ai_family == AF_INET6)
      uv_ip6_name((const struct sockaddr_in6 *)a->ai_addr, ip, sizeof(ip));
    else continue;
    uint64_t spent = uv_now(&c->loop) - start;
    if (tried > 0 && spent >= ms) break;
    tried++;
    rc = dial_one(c, ip, spent < ms ? (uint32_t)(ms - spent) : 1, err);
    /* Another address may answer when this one cannot be reached; any other
     * failure (TLS, refusal) would repeat there. */
    if (rc == XF_OK || c->why.end != XF_CONN_END_CONNECT || c->open) break;
  }
  uv_freeaddrinfo(c->addrs);
  c->addrs = NULL;
  if (tried == 0) {
    xf_fail(err, XF_EIO, "'%s' resolves to no IPv4 or IPv6 address", c->cfg.host);
    xf_errctx_peer(err, c->cfg.coordinator);
  }
  return rc;
}

/* Dials until a session opens. A coordinator that refuses with BUSY or
 * SHUTTING_DOWN is dialed again with backoff (docs/protocol.md, "Versioning
 * and the hello"), for as long as the timeout allows. */
static xf_err connect_session(xf_client *c, xf_errctx *err) {
  uint64_t start = uv_now(&c->loop);
  uint32_t budget = c->cfg.timeout_ms, backoff = 500;
  for (;;) {
    uint64_t spent = uv_now(&c->loop) - start;
    xf_err rc = connect_once(c, spent < budget ? (uint32_t)(budget - spent) : 1, err);
    bool retry = rc == XF_EDENIED && (c->refusal == XFED__REFUSAL__REASON__BUSY ||
                                      c->refusal == XFED__REFUSAL__REASON__SHUTTING_DOWN);
    spent = uv_now(&c->loop) - start;
    if (!retry || spent + backoff >= budget) return rc;
    run_wait(c, WAIT_SLEEP, backoff);
    backoff = backoff < 8000 ? backoff * 2 : backoff;
  }
}

static xf_err load_identity(xf_client *c, xf_errctx *err) {
  X509 *cert = NULL;
  XF_GUARD(xf_pki_cert_load(c->cfg.cert, &cert, err));
  xf_err rc = xf_pki_peer_identity(cert, &c->self, err);
  X509_free(cert);
  if (rc != XF_OK) {
    xf_errctx_file(err, c->cfg.cert);
    return rc;
  }
  if (xf_spiffe_format(&c->self, c->self_uri, NULL) != XF_OK)
    snprintf(c->self_uri, sizeof(c->self_uri), "?");
  if (c->self.kind != XF_PKI_KIND_USER) {
    xf_fail(err, XF_EINVAL,
            "%s is a %s certificate; the CLI speaks for a user: issue one with 'xfed pki issue "
            "--kind user --name N --role researcher' (from %s)",
            c->self_uri, xf_pki_kind_name(c->self.kind), c->cfg.source[SET_CERT]);
    xf_errctx_file(err, c->cfg.cert);
    return XF_EINVAL;
  }
  return XF_OK;
}

xf_err xf_client_open(const xf_client_config *cfg, xf_client **out, xf_errctx *err) {
  *out = NULL;
  /* The CLI prints its own errors; the connection layer's log lines would
   * repeat them, so they show only when XF_LOG_LEVEL asks for them. */
  const char *level = getenv("XF_LOG_LEVEL");
  if (!level || !*level) xf_log_set_level(XF_LOG_ERROR);
  xf_client *c = xf_calloc(1, sizeof(*c));
  if (!c) return xf_fail(err, XF_ENOMEM, "cannot allocate the client");
  c->cfg = *cfg;
  xf_err rc = load_identity(c, err);
  if (rc != XF_OK) goto fail;
  xf_tls_config t = {.cert_path = cfg->cert, .key_path = cfg->key, .ca_path = cfg->ca,
                     .crl_path = cfg->crl};
  if ((rc = xf_tls_new(&t, &c->tls, err)) != XF_OK) goto fail;
  if (uv_loop_init(&c->loop) != 0) {
    rc = xf_fail(err, XF_EIO, "cannot start an event loop");
    goto fail;
  }
  c->loop_ready = true;
  uv_timer_init(&c->loop, &c->timer);
  c->timer.data = c;
  c->timer_ready = true;
  if ((rc = connect_session(c, err)) != XF_OK) goto fail;
  *out = c;
  return XF_OK;
fail:
  xf_client_close(c);
  return rc;
}

int xf_client_connect(xf_cli *cli, const xf_client_flags *flags, xf_client **out) {
  *out = NULL;
  xf_client_config cfg;
  xf_err rc = xf_client_config_resolve(flags, &cfg, &cli->err);
  if (rc == XF_EUSAGE) return xf_cli_usage(cli, "%s", cli->err.msg);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  rc = xf_client_open(&cfg, out, &cli->err);
  if (rc == XF_EDENIED) return xf_cli_fail_unauthorized(cli); /* the session was refused */
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  return XF_EXIT_OK;
}

bool xf_client_flags_given(const xf_client_flags *f) {
  return f->coordinator || f->cert || f->key || f->ca || f->crl || f->timeout_s > 0;
}

void xf_client_close(xf_client *c) {
  if (!c) return;
  if (c->conn) {
    xf_conn_close(c->conn);
    run_wait(c, WAIT_CLOSE, XF_CONN_CLOSE_TIMEOUT_MS + 1000);
  }
  if (c->timer_ready) uv_close((uv_handle_t *)&c->timer, NULL);
  if (c->loop_ready) {
    uv_run(&c->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&c->loop) != 0) XF_WARN("client_loop_busy", "handles=left");
  }
  xf_tls_free(c->tls);
  upload_free(c->up);
  xf_document_rx_free(c->doc_in);
  xf_free(c);
}

const xf_spiffe_id *xf_client_identity(const xf_client *c) { return &c->self; }
const char *xf_client_identity_uri(const xf_client *c) { return c->self_uri; }
const char *xf_client_coordinator(const xf_client *c) { return c->cfg.coordinator; }
bool xf_client_is_open(const xf_client *c) { return c->conn && c->open; }
uint32_t xf_client_timeout_ms(const xf_client *c) { return c->cfg.timeout_ms; }

xf_err xf_client_reconnect(xf_client *c, xf_errctx *err) {
  if (c->conn) {
    xf_conn_close(c->conn);
    run_wait(c, WAIT_CLOSE, XF_CONN_CLOSE_TIMEOUT_MS + 1000);
  }
  return connect_session(c, err);
}

bool xf_client_sleep(xf_client *c, uint32_t ms) {
  run_wait(c, WAIT_SLEEP, ms);
  return xf_client_is_open(c);
}

/* Sends req and waits for what `w` wants; the session is closed after a
 * timeout, since a late answer would be taken for the next request's. */
static xf_err exchange(xf_client *c, const Xfed__Envelope *req, waiting w, xf_errctx *err) {
  if (!xf_client_is_open(c)) {
    xf_fail(err, XF_EIO, "not connected to the coordinator");
    xf_errctx_peer(err, c->cfg.coordinator);
    return XF_EIO;
  }
  xf_errctx e;
  xf_errctx_clear(&e);
  /* A request too large for the coordinator's frames goes as a DOCUMENT
   * stream, paced by its acknowledgements while the answer is awaited. */
  bool large = !xf_document_fits(req, xf_conn_peer_max_frame(c->conn));
  xf_err rc = large ? upload_start(c, req, &e) : xf_conn_send(c->conn, req, &e);
  if (rc != XF_OK) {
    xf_fail(err, rc == XF_ERANGE && !large ? XF_EIO : rc, "cannot send %s: %s",
            xf_envelope_body_name(req), e.msg);
    xf_errctx_peer(err, c->cfg.coordinator);
    return rc == XF_ERANGE && !large ? XF_EIO : rc;
  }
  c->timed_out = false;
  bool answered = run_wait(c, w, c->cfg.timeout_ms);
  upload_free(c->up);
  c->up = NULL;
  xf_document_rx_free(c->doc_in); /* what is left of an answer that failed */
  c->doc_in = NULL;
  if (answered) return take_failure(c, err);
  c->timed_out = true;
  xf_fail(err, XF_EIO, "no answer to %s within %.3g s (--timeout)", xf_envelope_body_name(req),
          c->cfg.timeout_ms / 1000.0);
  xf_errctx_peer(err, c->cfg.coordinator);
  if (c->conn) {
    xf_conn_close(c->conn);
    run_wait(c, WAIT_CLOSE, XF_CONN_CLOSE_TIMEOUT_MS + 1000);
  }
  return XF_EIO;
}

xf_err xf_client_request(xf_client *c, const Xfed__Envelope *req,
                         Xfed__Envelope__BodyCase want, Xfed__Envelope **answer,
                         xf_errctx *err) {
  *answer = NULL;
  c->want = want;
  c->answer = NULL;
  xf_err rc = exchange(c, req, WAIT_ANSWER, err);
  if (rc != XF_OK) {
    xf_envelope_free(c->answer);
    c->answer = NULL;
    return rc;
  }
  *answer = c->answer;
  c->answer = NULL;
  return XF_OK;
}

xf_err xf_client_query(xf_client *c, const Xfed__Envelope *req, Xfed__Envelope__BodyCase want,
                       Xfed__Envelope **answer, xf_errctx *err) {
  xf_err rc = xf_client_request(c, req, want, answer, err);
  if (rc != XF_EIO || c->timed_out || c->conn) return rc;
  XF_WARN("request_again", "request=%s reason=\"%s\"", xf_envelope_body_name(req),
          err ? err->msg : "");
  if (xf_client_reconnect(c, NULL) != XF_OK) return rc;
  if (err) xf_errctx_clear(err);
  return xf_client_request(c, req, want, answer, err);
}

/* ---- the model stream ------------------------------------------------------------ */

static xf_err model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *ctx) {
  model_rx *m = user;
  XF_ENSURE(m->buf && offset + len <= m->total, ctx, XF_EFORMAT,
            "chunk at %llu beyond the announced %llu bytes", (unsigned long long)offset,
            (unsigned long long)m->total);
  memcpy(m->buf + offset, data, len);
  return XF_OK;
}

static xf_err model_rx_reset(model_rx *m, xf_errctx *err) {
  xf_tensor_receiver_free(m->rx);
  m->rx = NULL;
  xf_free(m->buf);
  m->buf = NULL;
  m->total = 0;
  return xf_tensor_receiver_new(m->max, model_sink, m, &m->rx, err);
}

static void model_begin(xf_client *c, const Xfed__TensorBegin *b) {
  model_rx *m = c->model;
  if (b->kind != XFED__TENSOR_BEGIN__KIND__MODEL || b->dtype != XFED__TENSOR_BEGIN__DTYPE__U8) {
    wait_fail(c, XF_EFORMAT, "the coordinator sent a tensor of kind %d and dtype %d, not a "
              "MODEL of U8", (int)b->kind, (int)b->dtype);
    return;
  }
  if (strcmp(b->job_id ? b->job_id : "", m->job_id) != 0) {
    wait_fail(c, XF_EFORMAT, "the coordinator sent the model of job '%s', not '%s'",
              b->job_id ? b->job_id : "", m->job_id);
    return;
  }
  xf_errctx e;
  xf_errctx_clear(&e);
  const xf_tensor_info *had = xf_tensor_receiver_info(m->rx);
  xf_err rc = xf_tensor_receiver_begin(m->rx, b, &e);
  if (rc == XF_EFORMAT && had) {
    /* A resumed stream that announces another tensor: start over with it. */
    rc = model_rx_reset(m, &e);
    if (rc == XF_OK) rc = xf_tensor_receiver_begin(m->rx, b, &e);
  }
  if (rc == XF_ERANGE) {
    wait_fail(c, XF_ERANGE, "the model is %llu bytes, more than the %llu this client takes",
              (unsigned long long)b->total_bytes, (unsigned long long)m->max);
    return;
  }
  if (rc != XF_OK) {
    wait_fail(c, rc, "%s", e.msg);
    return;
  }
  if (!m->buf) {
    if (b->total_bytes > SIZE_MAX) {
      wait_fail(c, XF_ERANGE, "a model of %llu bytes does not fit in memory here",
                (unsigned long long)b->total_bytes);
      return;
    }
    m->total = b->total_bytes;
    m->buf = xf_malloc(m->total ? (size_t)m->total : 1);
    if (!m->buf) {
      wait_fail(c, XF_ENOMEM, "cannot hold a model of %llu bytes",
                (unsigned long long)m->total);
      return;
    }
  }
  send_ack(c, m->rx);
}

/* Handles a frame of the model stream; false for one that is not part of it. */
static bool model_frame(xf_client *c, const Xfed__Envelope *env) {
  model_rx *m = c->model;
  xf_errctx e;
  xf_errctx_clear(&e);
  xf_err rc;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_ERROR: take_error_answer(c, env->error); return true;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: model_begin(c, env->tensor_begin); return true;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
    rc = xf_tensor_receiver_chunk(m->rx, env->tensor_chunk, &e);
    if (rc != XF_OK) wait_fail(c, rc, "model stream: %s", e.msg);
    return true;
  case XFED__ENVELOPE__BODY_TENSOR_END:
    rc = xf_tensor_receiver_end(m->rx, env->tensor_end, &e);
    if (rc == XF_ETRUNCATED) {
      send_ack(c, m->rx); /* the sender resumes from our offset */
      return true;
    }
    if (rc == XF_EINTEGRITY) xf_session_send_error(c->conn, XF_EINTEGRITY, "%s", e.msg);
    if (rc != XF_OK) {
      wait_fail(c, rc, "model stream: %s", e.msg);
      return true;
    }
    send_ack(c, m->rx);
    m->complete = true;
    if (!c->done) wait_done(c);
    return true;
  default: return false;
  }
}

xf_err xf_client_fetch_model(xf_client *c, const char *job_id, uint32_t round,
                             uint64_t max_bytes, uint8_t **data, size_t *len,
                             uint32_t *model_round, xf_errctx *err) {
  *data = NULL;
  *len = 0;
  model_rx m = {.max = max_bytes, .job_id = job_id};
  XF_GUARD(model_rx_reset(&m, err));
  Xfed__ModelQuery q = XFED__MODEL_QUERY__INIT;
  q.job_id = (char *)job_id;
  q.round = round;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_MODEL_QUERY;
  env.model_query = &q;
  c->model = &m;
  xf_err rc;
  for (int attempt = 0;; attempt++) {
    rc = exchange(c, &env, WAIT_MODEL, err);
    if (rc == XF_OK || c->conn || c->timed_out || attempt >= FETCH_RECONNECTS) break;
    /* The link dropped: ask again for the round the stream named, so a
     * model committed meanwhile does not replace the one half received. */
    const xf_tensor_info *info = xf_tensor_receiver_info(m.rx);
    if (info) q.round = info->round;
    XF_WARN("model_resume", "job=%s round=%u offset=%llu", job_id, (unsigned)q.round,
            (unsigned long long)xf_tensor_receiver_next_offset(m.rx));
    if (xf_client_reconnect(c, NULL) != XF_OK) break;
  }
  c->model = NULL;
  if (rc == XF_OK && !m.complete)
    rc = xf_fail(err, XF_EINTERNAL, "the model stream ended without its TensorEnd");
  if (rc == XF_OK) {
    *data = m.buf;
    *len = (size_t)m.total;
    *model_round = xf_tensor_receiver_info(m.rx)->round;
    m.buf = NULL;
  }
  xf_free(m.buf);
  xf_tensor_receiver_free(m.rx);
  return rc;
}
