/*
 * core: what every part of the daemon shares, and the only way to change it.
 *
 *   - the loop and its clock (core_now: the loop's cached monotonic milliseconds, read once
 *     per turn);
 *   - the current config (immutable; the composition root swaps it on a reload);
 *   - the model registry (model_t.link, config order) and the client connections;
 *   - counters behind functions: the queued and in-flight totals are derived from the
 *     models (never kept by hand), the retry count and request count change only through
 *     core_* calls;
 *   - a small list of events (one-to-many notifications set up at start: each listener
 *     subscribes in its own module's init function, which the composition root calls once;
 *     docs/design.md lists who listens to what);
 *   - a deferred-work queue run in the loop's check phase, right after the turn's I/O, and
 *     a free list run after it: the safe point where objects that a caller up the stack may
 *     still hold (requests) are freed (as Redis's freeClientAsync).
 *
 * Invariants: fields are read directly but written only by core.c (through the functions
 * below) or, for cfg/draining/ready/listening, by the composition root (daemon/), never
 * by another module. A core_defer_t is on at most one list; scheduling one that is
 * already pending does nothing; an item scheduled while the queue runs runs in the next
 * turn (with the idle handle keeping that turn's poll from blocking).
 * Return convention: int functions give 0 on success, -1 on failure.
 */
#ifndef VRAMD_CORE_CORE_H
#define VRAMD_CORE_CORE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/list.h"
#include "config/config.h"
#include "core/types.h"

#define VRAMD_VERSION "0.1.0"
#define CORE_EVENTS_KEPT 64 /* recent notable events kept for /v1/status */
#define CORE_LISTENERS_MAX 16
#define CORE_JOB_SECRET_SIZE 33

/* One-to-many notifications. The subject's type is given per event. */
enum core_event {
    CORE_EV_MODEL_CHANGED = 0, /* model_t *: its state or an instance's state changed */
    CORE_EV_REQUEST_DISPATCHED, /* request_t *: handed to an instance (a slot is held) */
    CORE_EV_REQUEST_ENDED,      /* request_t *: answered or cancelled, about to be freed;
                                   NULL: some other work ended (a job attempt) */
    CORE_EV_INSTANCE_DOWN,      /* instance_t *: it takes no more requests (stopping, exited):
                                   connections pooled to it must go */
    CORE_EV_INSTANCE_GONE,      /* instance_t *: its last handle closed, about to be freed */
    CORE_EV_RELOADED,           /* config_t *: the new config is in place */
    CORE_EV_DRAINING,           /* const char *: why */
    CORE_EV_COUNT
};

/* Things counted daemon-wide (core_count), shown in /v1/status and /metrics. */
enum core_counter {
    CORE_CNT_HEADER_TIMEOUT = 0, /* 408: a request head not complete within limits.header_timeout */
    CORE_CNT_BODY_TIMEOUT,       /* 408: a request body idle past limits.body_timeout */
    CORE_CNT_SEND_TIMEOUT,       /* client closed: it read nothing for limits.send_timeout */
    CORE_CNT_RESERVE_ACCEPTED,   /* connections accepted onto the reserve (past max_connections) */
    CORE_CNT_RESERVE_REFUSED,    /* requests on a reserve connection refused 503 overloaded */
    CORE_CNT_CONN_REFUSED,       /* connections closed at accept: reserve full too */
    CORE_CNT_LOCAL_PROXY,        /* vramd's own shortage (EMFILE ...): proxied requests refused */
    CORE_CNT_LOCAL_HEALTH,       /* ... health checks not made */
    CORE_CNT_LOCAL_HOOK,         /* ... unload/reload hooks not made */
    CORE_CNT_GATE_FAIL_OPEN,     /* ... a request sent past its worker's driver-limit gate */
    CORE_COUNTERS
};

typedef void (*core_listener_fn)(void *ctx, enum core_event ev, void *subject);

typedef struct core_note {
    uint64_t wall_ms;
    char text[200];
} core_note_t;

typedef struct core_defer {
    list_t link;
    void (*fn)(struct core_defer *);
} core_defer_t;

struct core {
    uv_loop_t *loop;
    config_t *cfg;           /* current, fully validated; swapped by core_set_config */
    const struct cgroup_tree *cgroups; /* the workers' cgroup subtree (composition root); NULL = none */
    list_t models;           /* model_t.link, config order */
    list_t conns;            /* conn_t.link */
    unsigned n_conns;
    unsigned n_lingering;    /* of n_conns: answered, FIN sent, waiting for the client's (net/conn.c) */
    unsigned n_reserve_conns; /* of n_conns, those accepted onto the reserve */
    bool draining;           /* stop admitting (composition root) */
    bool stopping;           /* workers being stopped, loop about to end (composition root) */
    bool ready;              /* config loaded, listener bound (composition root) */
    bool listening;          /* the front door accepts connections (composition root) */
    uint64_t started_ms;     /* monotonic */
    uint64_t started_wall_ms;
    uint64_t requests_total; /* request heads parsed */
    unsigned retries_in_flight; /* requests queued or running again after an OOM or invalid output */
    unsigned retries_peak;      /* most retries_in_flight ever at once (/v1/status) */
    uint64_t retries_total;     /* retries begun */
    uint64_t retries_refused;   /* retries the retry budget refused (503 retry_budget_exhausted) */
    uint64_t counts[CORE_COUNTERS]; /* core_count */
    /* random at core_init (32 hex; "" when no randomness): the job runner's attempts name
     * their submitter with it (X-Vramd-Job-Client, net/conn_request.c); never shown */
    char job_secret[CORE_JOB_SECRET_SIZE];
    /* recent notable events for /v1/status */
    core_note_t notes[CORE_EVENTS_KEPT];
    unsigned notes_next, notes_count;
    /* listeners */
    struct {
        enum core_event ev;
        core_listener_fn fn;
        void *ctx;
    } listeners[CORE_LISTENERS_MAX];
    unsigned n_listeners;
    /* deferred work */
    list_t deferred;         /* core_defer_t.link, run in the check phase */
    list_t graveyard;        /* core_defer_t.link, run after `deferred`: frees */
    uv_check_t check;
    uv_idle_t idle;
    uv_prepare_t prepare;
    bool in_io;              /* inside this turn's I/O callbacks: the check phase follows */
    /* put a request that ran back in its queue (set by the composition root: the
     * dispatcher's, which the proxy and the verdict may not call by name) */
    void (*requeue)(request_t *r, const char *why);
    /* the CUDA driver's checkpoint calls (gpu/cuda.h) for the `checkpoint` eviction tier:
     * opened by the composition root when a model has checkpoint: true, closed at exit;
     * NULL otherwise (the tier is then skipped) */
    struct cuda *cuda;
};

/* Set up the loop handles on a zeroed core (the composition root owns it); cfg gets a reference. */
void core_init(core_t *c, uv_loop_t *loop, config_t *cfg);
/* Run what is pending (frees included) and close the core's handles. */
void core_close(core_t *c);
/* Swap in a new config (takes a reference, drops the old one); emits CORE_EV_RELOADED. */
void core_set_config(core_t *c, config_t *cfg);

/* Monotonic milliseconds: the loop's cached time (uv_hrtime before core_init). */
uint64_t core_now(void);

/* Requests queued in all models' queues / running on workers: derived from the models. */
unsigned core_queued_total(const core_t *c);
unsigned core_in_flight_total(const core_t *c);
void core_count_request(core_t *c);
void core_retry_begin(core_t *c);
void core_retry_end(core_t *c);
void core_retry_refused(core_t *c);
void core_conn_added(core_t *c, list_t *link);
void core_conn_removed(core_t *c, list_t *link);
/* A connection went onto the reserve (on) or, having been on it, closed (off). */
void core_conn_reserve(core_t *c, bool on);
/* Count one event of kind k; core_counter_name: its label in /metrics and /v1/status. */
void core_count(core_t *c, enum core_counter k);
const char *core_counter_name(enum core_counter k);

/* Retry a request from its queue (core->requeue). */
void core_requeue(core_t *c, request_t *r, const char *why);

/* Remember a line for /v1/status "events" (the caller logs it too). */
void core_note_event(core_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Listen to one event (at start only; at most CORE_LISTENERS_MAX in all). */
int core_listen(core_t *c, enum core_event ev, core_listener_fn fn, void *ctx);
void core_emit(core_t *c, enum core_event ev, void *subject);

void core_defer_init(core_defer_t *d, void (*fn)(core_defer_t *));
/* Run d->fn at this turn's check phase (or the next turn's, when called from there). */
void core_defer(core_t *c, core_defer_t *d);
/* Run d->fn after the deferred work of the turn: the safe point for frees. */
void core_defer_free(core_t *c, core_defer_t *d);
void core_defer_cancel(core_defer_t *d);
bool core_defer_pending(const core_defer_t *d);

#endif
