/*
 * vramd: the daemon object. One per process; it owns the event loop, the current config,
 * every model runtime, the listener and the client connections.
 *
 * Lifecycle: vramd_init (config loaded, stale workers killed, listener bound) -> vramd_run
 * (loop) -> drain (SIGTERM, SIGINT or POST /v1/admin/drain: stop admitting, finish queued
 * and in-flight requests within limits.drain_timeout, stop workers) -> loop ends -> exit 0.
 * Reload (SIGHUP or POST /v1/admin/reload) parses a new config and swaps it in only when it
 * is valid; models keep their runtime (queue, instances) across a reload by name.
 * Invariant: vramd->cfg is always a fully validated config; queued_total is the sum of all
 * model queue depths and never exceeds cfg->limits.queue_max.
 */
#ifndef VRAMD_DAEMON_VRAMD_H
#define VRAMD_DAEMON_VRAMD_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/list.h"
#include "config/config.h"
#include "daemon/types.h"

#define VRAMD_VERSION "0.1.0"
#define VRAMD_EVENTS_KEPT 64

typedef struct vramd_event {
    uint64_t wall_ms;
    char text[200];
} vramd_event_t;

struct vramd {
    uv_loop_t *loop;
    config_t *cfg;
    char *config_path;
    uv_tcp_t listener;
    bool listening;
    uv_signal_t sig_hup, sig_term, sig_int;
    uv_check_t pump_check;   /* runs deferred model pumps after each turn's I/O */
    uv_idle_t pump_idle;     /* keeps the loop from blocking when pumps were scheduled outside I/O */
    uv_prepare_t io_mark;    /* sets in_io just before the poll; pump_check clears it */
    bool in_io;              /* inside this turn's I/O callbacks: pump_check follows */
    list_t pump_pending;     /* models whose queue must be looked at this turn */
    uv_timer_t drain_timer;
    list_t models;           /* model_t.link, in config order */
    list_t conns;            /* conn_t.link */
    unsigned n_conns;
    unsigned queued_total;
    unsigned in_flight_total;
    unsigned retries_in_flight; /* requests queued or running again after an OOM/invalid output */
    bool draining;
    bool stopping;           /* workers being stopped, loop about to end */
    bool stopped;            /* every worker gone, uv_stop called (once) */
    bool ready;
    uint64_t started_ms;     /* monotonic */
    uint64_t started_wall_ms;
    int exit_code;
    /* recent events for /v1/status */
    vramd_event_t events[VRAMD_EVENTS_KEPT];
    unsigned events_next;
    unsigned events_count;
    uint64_t requests_total;
    struct jobs *jobs;       /* durable job runner (jobs/jobs.h); NULL when jobs are unavailable */
};

extern vramd_t *g_vramd; /* the one daemon; set by vramd_init */

int vramd_init(vramd_t *d, uv_loop_t *loop, const char *config_path, char *err, size_t errlen);
int vramd_run(vramd_t *d);
/* Parse the config file again and swap it in; err gets the message on failure. */
int vramd_reload(vramd_t *d, char *err, size_t errlen);
void vramd_drain(vramd_t *d, const char *why);
/* Monotonic milliseconds (the loop's cached time). */
uint64_t vramd_now(void);
/* Remember a line for /v1/status "events" (also logged by the caller). */
void vramd_note_event(vramd_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Make sure the models on pump_pending are pumped in this loop turn. */
void vramd_wake_pumps(vramd_t *d);
/* Called when a piece of drain progress happens (a request ended, a worker stopped). */
void vramd_check_drained(vramd_t *d);

#endif
