/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator built without the HTTP server (-DXF_HTTP=OFF), in place of
 * metrics.c and dashboard.c: there is no /metrics, /healthz or dashboard to
 * serve. xfed-coord refuses --metrics and --dashboard (and their config
 * keys) before it starts; a caller that sets them in xf_coord_config anyway
 * gets the same refusal at start, and a user's `xfed dashboard` is told why
 * there is no dashboard. */
#include "coordinator/daemon_internal.h"

xf_err xf__metrics_start(xf__coord *co, xf_http **out, xf_errctx *err) {
  (void)out;
  XF_ENSURE(!xf__coord_cfg(co)->metrics_host[0], err, XF_EUNSUPPORTED,
            "--metrics: this xfed-coord was " XF_HTTP_ABSENT);
  return XF_OK;
}

void xf__metrics_stop(xf_http **http) { (void)http; }

xf_err xf__dashboard_start(xf__coord *co, xf__dashboard **out, xf_errctx *err) {
  (void)out;
  XF_ENSURE(!xf__coord_cfg(co)->dashboard_host[0], err, XF_EUNSUPPORTED,
            "--dashboard: this xfed-coord was " XF_HTTP_ABSENT);
  return XF_OK;
}

void xf__dashboard_stop(xf__dashboard **dash) { (void)dash; }

void xf__dashboard_grant(xf__coord *co, xf__peer *p, const Xfed__DashboardRequest *m) {
  (void)co;
  (void)m;
  xf_session_send_error(xf__peer_conn(p), XF_EUNSUPPORTED,
                        "this coordinator serves no dashboard: its xfed-coord was "
                        XF_HTTP_ABSENT " (docs/dashboard.md)");
}
