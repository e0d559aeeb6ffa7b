/*
 * notify: vramd's side of systemd's service notification protocol, through libsystemd's
 * sd_notify(3), for units with Type=notify (or Type=notify-reload) and WatchdogSec=.
 *
 * What systemd is told, and when:
 *   READY=1, MAINPID, STATUS=     once vramd_init succeeded (config loaded, listener bound
 *                                 and listening), so a client that connects after READY=1
 *                                 is accepted; again when a reload ends (applied or refused)
 *   RELOADING=1, MONOTONIC_USEC=  when a reload starts (SIGHUP or POST /v1/admin/reload);
 *                                 MONOTONIC_USEC is what systemd >= 253 wants for
 *                                 Type=notify-reload and is ignored by older ones
 *   STOPPING=1                    when a drain starts (SIGTERM, SIGINT, POST /v1/admin/drain)
 *   WATCHDOG=1                    from a timer on the main loop, every half of the interval
 *                                 sd_watchdog_enabled() reports: a stuck event loop stops
 *                                 the pings and systemd restarts vramd
 *   STATUS=                       a one-line summary ("3/4 models ready, 2 queued, 1 in
 *                                 flight", "draining: ..."), sent only when it changed and
 *                                 at most once per NOTIFY_STATUS_PERIOD_MS
 *   STATUS=                       when vramd cannot start (the reason; it then exits 1)
 *
 * Invariants: without NOTIFY_SOCKET in the environment every function here is a no-op and
 * no handle is created. The timers never keep the loop alive (uv_unref) and are closed by
 * notify_close() (vramd_run calls it when the loop has ended). notify_init() runs in main
 * before any thread exists: it consumes WATCHDOG_USEC/WATCHDOG_PID (unsetenv), so workers
 * vramd starts do not inherit them. One daemon per process: the state is module-static.
 */
#ifndef VRAMD_DAEMON_NOTIFY_H
#define VRAMD_DAEMON_NOTIFY_H

#include <stdbool.h>

#include "core/types.h"

#define NOTIFY_STATUS_PERIOD_MS 1000
#define NOTIFY_STATUS_MAX 200

/* Read the environment (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID); call first in main. */
void notify_init(void);
/* vramd_init succeeded: READY=1 with MAINPID and STATUS; start the watchdog and status timers. */
void notify_ready(core_t *d);
/* vramd could not start: STATUS=cannot start: <why>. */
void notify_start_failed(const char *why);
/* A reload starts: RELOADING=1 + MONOTONIC_USEC. */
void notify_reloading(void);
/* A reload ended (applied: ok true; refused: ok false, the old config keeps running): READY=1. */
void notify_reload_done(core_t *d, bool ok);
/* A drain or stop starts: STOPPING=1 + STATUS. */
void notify_stopping(core_t *d, const char *why);
/* Stop and close the timers (the loop has ended; closing completes in the next uv_run). */
void notify_close(void);

#endif
