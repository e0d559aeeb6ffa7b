/*
 * request: one client request, from its parsed head to its answer. It belongs to its conn
 * while the client is there; the conn hands it to the router (on_request), which hands it
 * to the dispatcher (queue), the proxy, the verdict, or answers it itself.
 *
 * States (request_set_state checks the table and logs old -> new with the source line):
 *
 *   NEW -> LOCAL (vramd answers itself) -> DONE
 *   NEW -> QUEUED -> CONNECTING -> WAITING -> STREAMING -> DONE
 *   NEW -> DONE                        (refused at admission)
 *   QUEUED -> DONE                     (deadline, cancelled, model failed)
 *   CONNECTING | WAITING -> CONNECTING (a pooled connection died: one fresh try)
 *   CONNECTING | WAITING | STREAMING -> QUEUED (retry: degrade, invalid output, retry: safe)
 *   CONNECTING | WAITING | STREAMING -> DONE
 * DONE is terminal. An illegal change is a bug: CHECK_IF reports it (abort under VRAMD_DEBUG).
 *
 * Ownership and freeing: a request that ended (answered or cancelled) is detached from its
 * conn at once and freed at the loop's safe point (core_defer_free), never inside the call
 * that ended it, so a caller up the stack may still read it (but must not act on it: its
 * conn's write calls say whether the request survived).
 */
#ifndef VRAMD_CORE_REQUEST_H
#define VRAMD_CORE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/list.h"
#include "core/core.h"
#include "core/types.h"
#include "http/http1.h"
#include "policy/ledger.h"
#include "policy/queue.h"

enum request_state {
    REQ_NEW = 0,
    REQ_QUEUED,
    REQ_CONNECTING,
    REQ_WAITING,
    REQ_STREAMING,
    REQ_LOCAL,
    REQ_DONE,
};

enum request_wait { WAIT_NONE = 0, WAIT_LOAD, WAIT_UNLOAD, WAIT_RESTART };

/* Whoever owns a request's answer for now (the queue, the proxy, a validator, an admin
 * waiter, a result being sent) sets its ops; the conn calls them and never the owner's
 * module by name. */
typedef struct request_ops {
    /* The client left: let go of the request (out of the queue, upstream closed, validator
     * stopped, waiter unlinked), releasing any slot it holds. The request is freed later, at
     * the safe point. Also called when a dispatched request's total deadline passes
     * (path/dispatch.c): the caller then answers it (504) or cuts its connection. */
    void (*cancel)(request_t *r);
    /* The client's write backlog fell below half of the mark that conn_want_drained armed. */
    void (*drained)(request_t *r);
} request_ops_t;

struct request {
    conn_t *conn;
    const request_ops_t *ops; /* the current owner of its answer; NULL: the conn alone */
    void *owner;              /* that owner's object, for owners that keep none in the request */
    core_defer_t free_later;  /* on the core's free list once it ended */
    model_t *model;
    instance_t *instance; /* set while holding a slot on it */
    upstream_t *up;
    queue_entry_t qe;     /* in model->queue while QUEUED */
    ledger_entry_t mem;   /* REQUEST reservation while it holds a slot */
    uint64_t credit;      /* part of its estimate covered by its instance's cached memory */
    list_t wait_link;     /* in model->waiters while an admin call waits */
    enum request_wait wait;
    unsigned wait_last_old; /* WAIT_RESTART: the model's last instance id before the restart */
    enum request_state state;
    char id[72];
    char *head;           /* the client's head bytes; spans in msg/hdrs point into it */
    size_t head_len;
    http1_msg_t msg;
    http1_header_t *hdrs;
    buf_t body;           /* decoded body */
    int priority;
    uint64_t deadline_ms; /* absolute monotonic; 0 = none */
    uint64_t total_deadline_ms; /* absolute monotonic end-to-end bound (total_deadline); 0 = none */
    const char *error_stage; /* "stage" in vramd's error body (a deadline's: queued, running); NULL = none */
    uint64_t t_arrival, t_queued, t_dispatched, t_first_byte;
    unsigned attempts;
    size_t strip_len;     /* bytes of route prefix to strip, minus the trailing '/' */
    int status;           /* status sent to the client, 0 until then */
    const char *outcome;  /* metrics: vramd's error code when it answered with one (conn_respond_error),
                           * or what broke a streamed answer (proxy); NULL = judged from status.
                           * Read when the request ends, inside that call: a literal or the caller's string */
    bool head_method;
    bool cancelled;       /* ended because its client left (CORE_EV_REQUEST_ENDED tells) */
    bool abandoned;       /* let go of after the worker had all of it (the client left, or its
                           * total deadline passed): the worker may still be running it */
    int gpu;              /* NVML index of the instance it last ran on, -1 = none (X-Vramd-Gpu) */
    /* resilience (path/verdict.c) */
    unsigned level;       /* degradation ladder level in use: 0 = as sent */
    unsigned size_class;  /* the body's size class (policy/estimate.h) at size_level */
    unsigned size_level;  /* 1 + the level size_class was read at; 0 = not read yet */
    buf_t orig_body;      /* the body as the client sent it, kept while a ladder may rewrite it */
    bool buffering;       /* the worker's answer is held and judged before the client sees it */
    buf_t resp_head;      /* held answer: "Name: value\r\n" header lines (hop-by-hop removed) */
    buf_t resp_body;
    int resp_status;
    char resp_reason[64];
    unsigned invalid_retries; /* retries after an invalid output (at most 1) */
    unsigned crash_retries;   /* retries after a worker crash (retry: safe, at most 1) */
    bool is_retry;            /* this attempt is a retry (counts against the retry budget) */
    struct process *validator; /* a validate.cmd run (or pool work) judging resp_body */
    bool validating_in_pool;   /* validator points at a thread-pool validation */
    /* limits.per_client (path/dispatch_clients.c) */
    struct client_rec *client; /* its client's record once admitted there, else NULL */
    bool client_queued;        /* counted in client->queued */
    bool client_in_flight;     /* counted in client->in_flight */
};

#define request_set_state(r, s) request_set_state_at((r), (s), __LINE__, __FILE__)
void request_set_state_at(request_t *r, enum request_state s, int line, const char *file);
const char *request_state_name(enum request_state s);
/* May a request go from one state to the other? */
bool request_transition_ok(enum request_state from, enum request_state to);
/* Time spent queued so far, in ms, for X-Vramd-Queue-Ms. */
uint64_t request_queue_ms(const request_t *r);
/* vramd's headers on a worker's answer: X-Request-Id, X-Vramd-Queue-Ms, -Run-Ms, -Attempts,
 * -Gpu (the GPU it ran on) and -Degrade-Level (when not 0). Streamed and held answers
 * both use this, so they carry the same set. */
void request_vramd_headers(const request_t *r, buf_t *b, uint64_t run_ms);
/* The request's id: the client's X-Request-Id when it is 1..71 printable characters
 * without quotes or backslashes, else 16 random hex digits. */
void request_make_id(request_t *r, const char *given, size_t given_len);
/* Free a request and its buffers: the function of its free_later item, run by the core at
 * the safe point (or at once for a request that never reached anyone). */
void request_free(core_defer_t *d);
/* Give the request's answer to a new owner (NULL: the conn alone). */
void request_set_ops(request_t *r, const request_ops_t *ops);

#endif
