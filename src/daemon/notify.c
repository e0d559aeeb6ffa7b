/*
 * notify: READY / RELOADING / STOPPING / WATCHDOG / STATUS to systemd through sd_notify.
 * See notify.h for what is sent when, and the invariants.
 */
#include "daemon/notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "workers/model_state.h"

static struct {
    bool enabled;           /* NOTIFY_SOCKET was set when vramd started */
    uint64_t watchdog_usec; /* 0: no watchdog asked for */
    bool timers_started;
    bool send_failed_logged;
    uv_timer_t watchdog_timer;
    uv_timer_t status_timer;
    char last_status[NOTIFY_STATUS_MAX];
} notify_state;

/* Send one message (newline-separated assignments); a failure is logged once. */
static void send_message(const char *msg)
{
    if (!notify_state.enabled)
        return;
    int rc = sd_notify(0, msg);
    if (rc < 0 && !notify_state.send_failed_logged) {
        notify_state.send_failed_logged = true;
        log_event(LOG_WARN, "systemd_notify_failed", "error=%s", strerror(-rc));
    }
}

/* The one-line STATUS= text for the daemon's current state. */
static void status_summary(const core_t *d, char *out, size_t cap)
{
    unsigned n_models = 0, n_ready = 0, n_failed = 0;
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        if (m->removed) /* gone from the config, finishing its last requests */
            continue;
        enum model_state s = model_state(m);
        n_models++;
        if (s == MODEL_READY)
            n_ready++;
        else if (s == MODEL_FAILED)
            n_failed++;
    }
    if (d->stopping)
        snprintf(out, cap, "stopping: workers being stopped");
    else if (d->draining)
        snprintf(out, cap, "draining: %u queued, %u in flight", core_queued_total(d), core_in_flight_total(d));
    else if (n_failed > 0)
        snprintf(out, cap, "%u/%u models ready, %u failed, %u queued, %u in flight", n_ready, n_models,
                 n_failed, core_queued_total(d), core_in_flight_total(d));
    else
        snprintf(out, cap, "%u/%u models ready, %u queued, %u in flight", n_ready, n_models, core_queued_total(d),
                 core_in_flight_total(d));
}

/* Send message + STATUS=<text>, and remember the text so the status timer does not repeat it. */
static void send_with_status(const char *message, const char *status)
{
    char msg[NOTIFY_STATUS_MAX + 128];
    snprintf(msg, sizeof msg, "%s%sSTATUS=%s", message, message[0] ? "\n" : "", status);
    snprintf(notify_state.last_status, sizeof notify_state.last_status, "%s", status);
    send_message(msg);
}

static void on_watchdog_tick(uv_timer_t *t)
{
    (void)t;
    send_message("WATCHDOG=1");
}

static void on_status_tick(uv_timer_t *t)
{
    const core_t *d = t->data;
    char status[NOTIFY_STATUS_MAX];
    status_summary(d, status, sizeof status);
    if (strcmp(status, notify_state.last_status) != 0)
        send_with_status("", status);
}

void notify_init(void)
{
    const char *socket_path = getenv("NOTIFY_SOCKET");
    notify_state.enabled = socket_path && socket_path[0];
    uint64_t usec = 0;
    /* unset_environment=1: WATCHDOG_USEC/WATCHDOG_PID are ours, not the workers' */
    if (sd_watchdog_enabled(1, &usec) > 0 && notify_state.enabled)
        notify_state.watchdog_usec = usec;
}

static void start_timers(core_t *d)
{
    uv_update_time(d->loop); /* start-up took a while: count periods from now */
    uv_timer_init(d->loop, &notify_state.status_timer);
    notify_state.status_timer.data = d;
    uv_timer_start(&notify_state.status_timer, on_status_tick, NOTIFY_STATUS_PERIOD_MS, NOTIFY_STATUS_PERIOD_MS);
    uv_unref((uv_handle_t *)&notify_state.status_timer);
    uv_timer_init(d->loop, &notify_state.watchdog_timer);
    notify_state.watchdog_timer.data = d;
    if (notify_state.watchdog_usec > 0) {
        uint64_t period_ms = notify_state.watchdog_usec / 2000;
        if (period_ms == 0)
            period_ms = 1;
        uv_timer_start(&notify_state.watchdog_timer, on_watchdog_tick, period_ms, period_ms);
    }
    uv_unref((uv_handle_t *)&notify_state.watchdog_timer);
    notify_state.timers_started = true;
}

void notify_ready(core_t *d)
{
    if (!notify_state.enabled)
        return;
    start_timers(d);
    char status[NOTIFY_STATUS_MAX];
    status_summary(d, status, sizeof status);
    char message[64];
    snprintf(message, sizeof message, "READY=1\nMAINPID=%ld", (long)getpid());
    send_with_status(message, status);
    if (notify_state.watchdog_usec > 0)
        send_message("WATCHDOG=1");
    log_event(LOG_INFO, "systemd_notify", "ready=%B watchdog_ms=%llu ping_ms=%llu", 1,
              (unsigned long long)(notify_state.watchdog_usec / 1000), (unsigned long long)(notify_state.watchdog_usec / 2000));
}

void notify_start_failed(const char *why)
{
    if (!notify_state.enabled)
        return;
    /* a newline in the reason would start a new assignment: make it a space */
    char reason[NOTIFY_STATUS_MAX - 20];
    snprintf(reason, sizeof reason, "%s", why);
    for (char *p = reason; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    char msg[NOTIFY_STATUS_MAX + 64];
    snprintf(msg, sizeof msg, "STATUS=cannot start: %s", reason);
    send_message(msg);
}

void notify_reloading(void)
{
    if (!notify_state.enabled)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char msg[128];
    snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\nSTATUS=reloading the configuration",
             (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
    send_message(msg);
}

void notify_reload_done(core_t *d, bool ok)
{
    if (!notify_state.enabled)
        return;
    char summary[NOTIFY_STATUS_MAX - 40];
    status_summary(d, summary, sizeof summary);
    char status[NOTIFY_STATUS_MAX];
    snprintf(status, sizeof status, "%s%s", ok ? "" : "reload refused (old config kept); ", summary);
    send_with_status("READY=1", status);
}

void notify_stopping(core_t *d, const char *why)
{
    if (!notify_state.enabled)
        return;
    char summary[NOTIFY_STATUS_MAX - 40];
    status_summary(d, summary, sizeof summary);
    char status[NOTIFY_STATUS_MAX];
    snprintf(status, sizeof status, "%s (%s)", summary, why);
    send_with_status("STOPPING=1", status);
}

void notify_close(void)
{
    if (!notify_state.timers_started)
        return;
    notify_state.timers_started = false;
    uv_timer_stop(&notify_state.watchdog_timer);
    uv_timer_stop(&notify_state.status_timer);
    if (!uv_is_closing((uv_handle_t *)&notify_state.watchdog_timer))
        uv_close((uv_handle_t *)&notify_state.watchdog_timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&notify_state.status_timer))
        uv_close((uv_handle_t *)&notify_state.status_timer, NULL);
}
