/* SPDX-License-Identifier: Apache-2.0 */
/* The CLI's side of "CLI <-> coordinator" (docs/protocol.md): where the
 * coordinator and our identity are (flags, then XFED_* variables, then a
 * profile file), one mutually authenticated session as role "cli", and a
 * blocking request/answer API over the client's own libuv loop for commands
 * that run one request after another. */
#ifndef XF_CLI_CLIENT_H
#define XF_CLI_CLIENT_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "cli/cli.h"
#include "crypto/pki.h"
#include "net/xfed.pb-c.h"

/* Seconds the client waits for an answer (or, while a model streams in, for
 * its next frame) unless --timeout says otherwise. */
#define XF_CLIENT_TIMEOUT_S 30.0
/* The largest model file `xfed job export` takes into memory. fedavg-cnn is
 * 6.7 MB; the largest spec the job limits allow is far beyond any model a
 * federation trains, so the bound is about memory, not about specs. */
#define XF_CLIENT_MODEL_MAX ((uint64_t)1 << 30)
/* Room for a path from a flag, a variable or the profile (resolved against
 * the profile's directory). */
#define XF_CLIENT_PATH_MAX 4096
/* Room for HOST:PORT (a DNS name of at most 253 characters, brackets, port). */
#define XF_CLIENT_ADDR_MAX 272

/* getopt_long codes of the connection flags; commands list
 * XF_CLIENT_OPTIONS in their option table and pass every code they do not
 * handle themselves to xf_client_flag. */
enum {
  XF_CLIENT_OPT_COORDINATOR = 0x1000,
  XF_CLIENT_OPT_CERT,
  XF_CLIENT_OPT_KEY,
  XF_CLIENT_OPT_CA,
  XF_CLIENT_OPT_CRL,
  XF_CLIENT_OPT_TIMEOUT
};

#define XF_CLIENT_OPTIONS                                                        \
  {"coordinator", required_argument, 0, XF_CLIENT_OPT_COORDINATOR},              \
      {"cert", required_argument, 0, XF_CLIENT_OPT_CERT},                        \
      {"key", required_argument, 0, XF_CLIENT_OPT_KEY},                          \
      {"ca", required_argument, 0, XF_CLIENT_OPT_CA},                            \
      {"crl", required_argument, 0, XF_CLIENT_OPT_CRL},                          \
      {"timeout", required_argument, 0, XF_CLIENT_OPT_TIMEOUT}

/* The --help lines of the flags above, for the usage texts. */
#define XF_CLIENT_OPTIONS_HELP                                                        \
  "connection (a flag wins over XFED_COORDINATOR, XFED_CERT, XFED_KEY, XFED_CA and\n"  \
  "XFED_CRL, which win over the profile: XFED_PROFILE, else\n"                         \
  "~/.config/xfed/profile.json; see docs/researcher-guide.md):\n"                      \
  "  --coordinator HOST:PORT  the coordinator (a DNS name, IPv4 or [IPv6])\n"          \
  "  --cert FILE              your user certificate (xfed pki issue --kind user)\n"    \
  "  --key FILE               its key (mode 0600)\n"                                   \
  "  --ca FILE                the federation's CA certificate\n"                       \
  "  --crl FILE               the federation's CRL\n"                                  \
  "  --timeout S              seconds to wait for an answer (default 30)\n"

/* What the flags said; NULL (or 0) where a flag was not given. */
typedef struct xf_client_flags {
  const char *coordinator, *cert, *key, *ca, *crl;
  double timeout_s;
} xf_client_flags;

/* Takes one getopt_long result. Returns -1 when ch is not a connection flag
 * (the caller handles it), XF_EXIT_OK when it was taken, and XF_EXIT_USAGE
 * (after printing the usage error) for a bad --timeout. */
int xf_client_flag(xf_cli *cli, xf_client_flags *f, int ch, const char *arg);

/* The settings a session needs, and where each came from ("--coordinator",
 * "XFED_COORDINATOR", "profile.json key coordinator") for messages. */
typedef struct xf_client_config {
  char coordinator[XF_CLIENT_ADDR_MAX]; /* as written, for messages */
  char host[XF_CLIENT_ADDR_MAX];        /* without IPv6 brackets */
  uint16_t port;
  char cert[XF_CLIENT_PATH_MAX], key[XF_CLIENT_PATH_MAX];
  char ca[XF_CLIENT_PATH_MAX], crl[XF_CLIENT_PATH_MAX];
  char source[5][XF_CLIENT_PATH_MAX + 32]; /* coordinator, cert, key, ca, crl */
  uint32_t timeout_ms;
} xf_client_config;

/* Resolves each setting from the flags, else the environment (XFED_COORDINATOR,
 * XFED_CERT, XFED_KEY, XFED_CA, XFED_CRL; empty counts as unset), else the
 * profile file: XFED_PROFILE, else $HOME/.config/xfed/profile.json. The
 * profile is read only when flags and environment leave something unset; a
 * missing default profile is no error, a missing XFED_PROFILE is. The
 * profile is one JSON object with string members coordinator, cert, key, ca,
 * crl and nothing else; its relative paths are relative to its directory.
 * Errors: XF_EUSAGE when a setting is still missing (the message names the
 * flag, the variable and the profile key that would supply it) or the
 * address is not HOST:PORT (naming where it came from); XF_EFORMAT with
 * err->file = the profile and err->field = the key for a bad profile;
 * XF_ENOENT / XF_EIO when XFED_PROFILE cannot be read. */
xf_err xf_client_config_resolve(const xf_client_flags *flags, xf_client_config *out,
                                xf_errctx *err) XF_WARN_UNUSED;

/* One session with the coordinator, on a loop of its own. */
typedef struct xf_client xf_client;

/* Loads the TLS context, resolves the coordinator's name with
 * uv_getaddrinfo, dials each address it resolves to until one connects,
 * checks that the peer is a coordinator of our federation, and runs the
 * hello as role "cli". Blocks until the session is open, for at most
 * cfg->timeout_ms. cfg is copied. Errors name the coordinator (err->peer)
 * or the file: those of xf_tls_new; XF_EIO when it cannot be reached or
 * the connection closes (with the reason); XF_EDENIED when the coordinator
 * refused the session (its text in err->msg); XF_EINTEGRITY when the peer is
 * no coordinator. The caller owns *out (xf_client_close). */
xf_err xf_client_open(const xf_client_config *cfg, xf_client **out,
                      xf_errctx *err) XF_WARN_UNUSED;

/* For commands: resolves the settings and opens the session, printing what
 * went wrong (a missing or bad setting as a usage error, a session the
 * coordinator refused as "not authorized"). XF_EXIT_OK with *out set, or the
 * exit status after printing. */
int xf_client_connect(xf_cli *cli, const xf_client_flags *flags, xf_client **out);

/* Whether any connection flag was given (a command acting on a local file
 * refuses them). */
bool xf_client_flags_given(const xf_client_flags *flags);

/* Ends the session cleanly (close_notify, bounded by the connection's close
 * timeout), closes the loop and frees everything. NULL is ignored. */
void xf_client_close(xf_client *c);

/* Our identity, from our own certificate. Owned by c. */
const xf_spiffe_id *xf_client_identity(const xf_client *c);
/* Our identity as a SPIFFE URI. Owned by c. */
const char *xf_client_identity_uri(const xf_client *c);
/* The coordinator as configured ("HOST:PORT"). Owned by c. */
const char *xf_client_coordinator(const xf_client *c);

/* Sends req and runs the loop until the answer arrives. Its body must be
 * `want`; an Error answer becomes the error it carries, with the
 * coordinator's message and err->peer set (XF_EDENIED for a request this
 * certificate may not make, XF_EFORMAT for a bad spec, ...). A request or
 * an answer too large for one frame travels as a DOCUMENT stream
 * (net/document.h), up to XF_DOCUMENT_MAX. Requests go
 * one at a time, as the protocol says. XF_EIO when no answer came within the
 * timeout or the connection closed (the session is then gone: reconnect
 * with xf_client_reconnect); XF_EFORMAT for an answer of another kind. On
 * success the caller owns *answer (xf_envelope_free). */
xf_err xf_client_request(xf_client *c, const Xfed__Envelope *req,
                         Xfed__Envelope__BodyCase want, Xfed__Envelope **answer,
                         xf_errctx *err) XF_WARN_UNUSED;

/* The same for a request that only reads (an export, a page of rows): if
 * the connection drops before the whole answer came, the client dials
 * again and asks once more, so that a large answer is restarted rather
 * than lost. Not for changes: one that reached the coordinator before the
 * drop would be made twice. */
xf_err xf_client_query(xf_client *c, const Xfed__Envelope *req, Xfed__Envelope__BodyCase want,
                       Xfed__Envelope **answer, xf_errctx *err) XF_WARN_UNUSED;

/* A model from ModelQuery{job_id, round}: the xfed model file's bytes as
 * the MODEL tensor stream carried them (length and BLAKE2b digest checked
 * by the stream; the file itself is not decoded here), and the round the
 * stream's TensorBegin named. If the connection drops mid-stream the client
 * reconnects and asks again for that same round, and the stream resumes
 * where it stopped (docs/protocol.md, "Resumption"). The caller owns *data
 * (xf_free). XF_ERANGE for a stream above max_bytes; XF_EFORMAT for a stream
 * that is not a MODEL of U8 for this job; XF_EINTEGRITY for a digest that
 * does not match; errors of xf_client_request. */
xf_err xf_client_fetch_model(xf_client *c, const char *job_id, uint32_t round,
                             uint64_t max_bytes, uint8_t **data, size_t *len,
                             uint32_t *model_round, xf_errctx *err) XF_WARN_UNUSED;

/* Runs the loop for ms milliseconds (heartbeats keep the session alive
 * meanwhile). Returns false when the connection has closed. */
bool xf_client_sleep(xf_client *c, uint32_t ms);

/* The timeout in force (cfg->timeout_ms). */
uint32_t xf_client_timeout_ms(const xf_client *c);

/* True while the session is open. */
bool xf_client_is_open(const xf_client *c);

/* Dials again after the connection closed (the same settings and loop) and
 * opens a new session. Errors as for xf_client_open. */
xf_err xf_client_reconnect(xf_client *c, xf_errctx *err) XF_WARN_UNUSED;

#endif
