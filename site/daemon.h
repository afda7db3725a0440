/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon (`xfed-site run`): the site side of "Site ↔ coordinator"
 * in docs/protocol.md. It dials the site's coordinator over mutual TLS,
 * announces the registered datasets, answers task offers (holding a task
 * the offer says to hold until TaskGo confirms it), trains its tasks one at
 * a time on a worker thread and streams each update back through the update
 * pipeline (update/update.h), keeping it across a dropped link until the
 * coordinator has acknowledged all of it. docs/operator-guide.md
 * ("Running the daemon") is the operator's page. */
#ifndef XF_SITE_DAEMON_H
#define XF_SITE_DAEMON_H

#include <stdint.h>

#include "base/result.h"

/* The largest model stream a site accepts: a model file above it is refused
 * before a byte of it is buffered. The largest preset (fedavg-cnn) is 6.6 MB. */
#define XF_SITE_MODEL_MAX (UINT64_C(1) << 30)

/* The tasks a site holds at once: accepted offers of different jobs (one
 * per job: a newer round or attempt replaces the older), each with its own
 * model stream, update stream and secure-aggregation state, trained one at
 * a time in the order they become ready. An offer beyond them is refused
 * BUSY, naming them. Eight covers the jobs a site's coordinator runs at
 * once in practice while bounding what a held model costs in memory (a
 * model is at most XF_SITE_MODEL_MAX). */
#define XF_SITE_TASKS_MAX 8

/* Redial delays: exponential from the first to the last, each drawn within
 * ±25 % (docs/protocol.md, "Site ↔ coordinator", step 1). */
#define XF_SITE_BACKOFF_MIN_MS 500u
#define XF_SITE_BACKOFF_MAX_MS 30000u

typedef struct xf_site_daemon_opts {
  const char *dir; /* the site directory (site.json, site.db); borrowed */
  /* Prometheus /metrics and /healthz over HTTP (docs/metrics.md): a
   * numeric address, or NULL for none; port 0 picks a free one, written to
   * metrics_port_file when that is set. */
  const char *metrics_host;
  int metrics_port;
  const char *metrics_port_file;
} xf_site_daemon_opts;

/* Runs the daemon on its own libuv loop until SIGTERM or SIGINT, then stops
 * cleanly: no more dialing, the connection closed, a running training told
 * to stop and waited for, everything freed. SIGHUP reloads the CRL and
 * announces the registry again. Returns XF_OK after a clean stop, or the
 * error that kept it from starting, naming the file or field at fault:
 * site.json missing or invalid, cert/key/ca/crl unset or unreadable, a
 * certificate issued to another site or region, the registry, the compute
 * backend. Everything after the start (an unreachable coordinator, refused
 * sessions, failed tasks) is logged and retried, never returned. */
xf_err xf_site_daemon_run(const xf_site_daemon_opts *opts, xf_errctx *err) XF_WARN_UNUSED;

/* The shuffle seed and the default update stream id are site/offer.h's. */

#endif
