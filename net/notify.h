/* SPDX-License-Identifier: Apache-2.0 */
/* What a daemon tells its service manager (systemd's notify protocol through
 * libsystemd): readiness, status, reloads, stopping, and the watchdog's
 * keep-alive sent from the event loop, so that a loop that stops turning
 * stops the keep-alives and the manager restarts the daemon. Without
 * NOTIFY_SOCKET in the environment (not started by systemd with
 * Type=notify) every call does nothing. */
#ifndef XF_NET_NOTIFY_H
#define XF_NET_NOTIFY_H

#include <stdbool.h>

#include <uv.h>

/* One per daemon, embedded in its state; the loop owns the timer. */
typedef struct xf_notify {
  uv_timer_t watchdog;
  bool watchdog_on; /* the timer was started and must be closed */
  unsigned long long watchdog_usec; /* WatchdogSec= as the manager set it, 0 if off */
} xf_notify;

/* Starts the watchdog's keep-alive on loop when the manager asked for one
 * (WATCHDOG_USEC for this process): WATCHDOG=1 every half interval, from a
 * timer on loop, unreferenced so it never keeps the loop alive. Logs the
 * interval. Call once, on the loop thread, before uv_run. */
void xf_notify_start(xf_notify *n, uv_loop_t *loop);

/* READY=1 with STATUS=status (printf-style): the daemon serves. Also after a
 * reload, to end RELOADING=1. */
void xf_notify_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STATUS= alone: what the daemon is doing, for `systemctl status`. */
void xf_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* RELOADING=1 with the monotonic time systemd asks for: a reload began;
 * xf_notify_ready ends it. */
void xf_notify_reloading(void);

/* STOPPING=1 and closes the watchdog's timer (if started): the daemon shuts
 * down. Call on the loop thread, once. */
void xf_notify_stopping(xf_notify *n);

/* Whether this build talks to the service manager (built with libsystemd). */
bool xf_notify_supported(void);

#endif
