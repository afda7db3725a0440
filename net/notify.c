/* SPDX-License-Identifier: Apache-2.0 */
/* The service manager's notifications (net/notify.h) over libsystemd's
 * sd_notify; a build without libsystemd (XF_SYSTEMD=OFF) sends none. */
#include "net/notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "base/log.h"

#ifdef XF_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

/* A status line with no newline in it: sd_notify's fields are lines. */
__attribute__((format(printf, 2, 0))) static void send_with_status(const char *head,
                                                                   const char *fmt, va_list ap) {
  char status[512];
  vsnprintf(status, sizeof(status), fmt, ap);
  for (char *c = status; *c; c++)
    if (*c == '\n') *c = ' ';
  sd_notifyf(0, "%sSTATUS=%s", head, status);
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  sd_notify(0, "WATCHDOG=1");
}

void xf_notify_start(xf_notify *n, uv_loop_t *loop) {
  n->watchdog_on = false;
  n->watchdog_usec = 0;
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  /* Half the interval, as sd_watchdog_enabled(3) advises: one late tick
   * still lands inside the interval. */
  uint64_t every_ms = usec / 2000;
  if (every_ms == 0) every_ms = 1;
  uv_timer_init(loop, &n->watchdog);
  uv_timer_start(&n->watchdog, on_watchdog, every_ms, every_ms);
  uv_unref((uv_handle_t *)&n->watchdog);
  n->watchdog_on = true;
  n->watchdog_usec = usec;
  sd_notify(0, "WATCHDOG=1");
  XF_INFO("watchdog_started", "interval_ms=%llu keepalive_ms=%llu",
          (unsigned long long)(usec / 1000), (unsigned long long)every_ms);
}

void xf_notify_ready(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_with_status("READY=1\n", fmt, ap);
  va_end(ap);
}

void xf_notify_status(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_with_status("", fmt, ap);
  va_end(ap);
}

void xf_notify_reloading(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
}

void xf_notify_stopping(xf_notify *n) {
  sd_notify(0, "STOPPING=1");
  if (n->watchdog_on) {
    uv_timer_stop(&n->watchdog);
    uv_close((uv_handle_t *)&n->watchdog, NULL);
    n->watchdog_on = false;
  }
}

bool xf_notify_supported(void) { return true; }

#else /* no libsystemd: nothing to tell */

void xf_notify_start(xf_notify *n, uv_loop_t *loop) {
  (void)loop;
  n->watchdog_on = false;
  n->watchdog_usec = 0;
}
void xf_notify_ready(const char *fmt, ...) { (void)fmt; }
void xf_notify_status(const char *fmt, ...) { (void)fmt; }
void xf_notify_reloading(void) {}
void xf_notify_stopping(xf_notify *n) { (void)n; }
bool xf_notify_supported(void) { return false; }

#endif
