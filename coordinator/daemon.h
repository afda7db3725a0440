/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator daemon: the global coordinator (jobs, rounds, the
 * journal, the researchers' requests) or a regional aggregator (its
 * region's sites, one aggregate upstream), on one libuv loop
 * (docs/coordinator.md). coordinator/main.c only reads the configuration
 * and calls xf_coord_run. */
#ifndef XF_COORDINATOR_DAEMON_H
#define XF_COORDINATOR_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "net/conn.h"

#define XF_COORD_PATH_MAX 1024
#define XF_COORD_NAME_MAX 64
/* Jobs the global coordinator runs at once; later submissions queue. Each
 * holds its model, its aggregator and its server optimizer: O(model). Its
 * --help and man page say it from here (XF_COORD_JOBS_MAX_TEXT; the build
 * reads this line for the page). */
#define XF_COORD_JOBS_MAX 16
#define XF__COORD_TEXT(n) #n
#define XF__COORD_TEXT_OF(n) XF__COORD_TEXT(n)
#define XF_COORD_JOBS_MAX_TEXT XF__COORD_TEXT_OF(XF_COORD_JOBS_MAX)

typedef struct xf_coord_config {
  bool regional;                        /* --role regional */
  char region[XF_COORD_NAME_MAX];       /* regional: its region (must match its certificate);
                                           global: where it runs, for the residency
                                           policy (required unless residency_off) */
  char listen_host[256];                /* numeric address to listen on */
  int listen_port;                      /* 0 picks a free one (see port_file) */
  char upstream_host[256];              /* regional: the global coordinator */
  int upstream_port;
  char cert[XF_COORD_PATH_MAX], key[XF_COORD_PATH_MAX];
  char ca[XF_COORD_PATH_MAX], crl[XF_COORD_PATH_MAX];
  char state_dir[XF_COORD_PATH_MAX];    /* coord.db and blobs/ */
  char port_file[XF_COORD_PATH_MAX];    /* written with the bound port; "" for none */
  size_t max_frame;                     /* largest frame accepted; 0: 4 MiB */
  uint32_t max_staged;                  /* updates staged at once; 0: 4 */
  double resume_grace_s;                /* after a restart, wait this long for the sites of
                                           an interrupted round; 0: 30 */
  double eval_timeout_s;                /* the final evaluation's deadline; 0: 120 */
  uint32_t checkpoint_retention;        /* global: each job keeps the checkpoints of its
                                           last N committed rounds and those always kept
                                           (coordinator/retention.h); 0: every one */
  bool residency_off;                   /* global: run without a residency policy
                                           ("residency_policy": "off"); every site of a
                                           job's dataset is eligible and decisions are
                                           audited as unrestricted */
  /* Bounds on connections (docs/coordinator.md, "Connections"); 0: the
   * default of net/conn.h. */
  double handshake_timeout_s;           /* TLS handshake + hello: 10 */
  uint32_t min_frame_rate;              /* bytes/s a frame in progress must keep: 4096 */
  double frame_rate_window_s;           /* averaged over: 30 */
  double frame_grace_s;                 /* a frame younger than this is not judged: 30 */
  size_t connection_caps[XF_CONN_CAP_COUNT]; /* by net/conn.h's XF_CONN_CAP_MAP, each
                                           set by the key of its name; 0: the default
                                           (xf_conn_caps_default), the total lowered to
                                           what the descriptor limit leaves */
  size_t buffer_budget;                 /* bytes of large frames buffered at once: 256 MiB */
  /* Prometheus /metrics and /healthz over HTTP (docs/metrics.md): "" for
   * none (--metrics). */
  char metrics_host[256];
  int metrics_port;                     /* 0 picks a free one */
  char metrics_port_file[XF_COORD_PATH_MAX]; /* written with the bound port; "" for none */
  /* The read-only web dashboard over HTTPS with the coordinator's own
   * certificate (docs/dashboard.md): "" for none (--dashboard). */
  char dashboard_host[256];
  int dashboard_port;                   /* 0 picks a free one */
  char dashboard_port_file[XF_COORD_PATH_MAX]; /* written with the bound port; "" for none */
} xf_coord_config;

/* Runs the daemon until SIGTERM or SIGINT (clean shutdown: stops accepting,
 * closes every connection, closes the journal; an open round stays open in
 * the journal and resumes at the next start). SIGHUP reloads the CRL.
 * Returns XF_OK after a clean shutdown, or the error that stopped it from
 * starting (unreadable certificates, a port in use, a damaged journal). */
xf_err xf_coord_run(const xf_coord_config *cfg, xf_errctx *err) XF_WARN_UNUSED;

/* Copies the journal of state_dir (coord.db; a regional aggregator's
 * audit.db when there is no journal) to dest with SQLite's online backup
 * (storage/db.h: one self-contained file). XF_ENOENT when state_dir holds
 * neither. */
xf_err xf_coord_backup(const char *state_dir, const char *dest, xf_errctx *err) XF_WARN_UNUSED;

/* The coordinator's id of a site or regional aggregator: the first 8 bytes
 * of BLAKE2b-256("site:" NAME), little-endian, top bit cleared. */
uint64_t xf_coord_site_id(const char *name);

#endif
