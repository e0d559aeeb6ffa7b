/*
 * dispatch_clients: limits.per_client on the request path (the dispatcher's helper).
 *
 * Counts every admitted request against its client (policy/client_limit.h): queued from its
 * admission until it is dispatched or ends; in flight from its dispatch until it ends or goes
 * back to the queue (a retry). A client already at max_queued gets 429 client_limit with
 * Retry-After; one at max_in_flight keeps its requests queued while the pump serves the other
 * clients (dispatch_clients_may_run is the pump's filter), and its models are pumped again
 * when one of its requests leaves a worker. Each request joins its client's queue flow, so
 * clients of one priority take turns (policy/queue.h). Every count is released however the
 * request ends (dispatch_clients_ended, from the dispatcher's CORE_EV_REQUEST_ENDED listener).
 *
 * Off (no limits.per_client): every function does nothing and the queues are plain FIFO per
 * priority. The table is made on first use with the max_clients then in force (start-only:
 * a reload changes the caps and the key, not the table's size).
 */
#ifndef VRAMD_PATH_DISPATCH_CLIENTS_H
#define VRAMD_PATH_DISPATCH_CLIENTS_H

#include <stdbool.h>

#include "core/core.h"
#include "core/types.h"
#include "policy/queue.h"

/* Before the queue push: false when answered (429 client_limit). Sets r->client and the
 * request's queue flow. */
bool dispatch_clients_admit(conn_t *c, request_t *r, model_t *m);
/* The same refusals on a head whose body is not read yet, changing nothing (no record made):
 * false when answered 429 client_limit. */
bool dispatch_clients_head_ok(conn_t *c, request_t *r, model_t *m);
/* The request was pushed into its queue. */
void dispatch_clients_queued(request_t *r);
/* Queued -> in flight. */
void dispatch_clients_dispatched(request_t *r);
/* In flight -> queued (a retry). */
void dispatch_clients_requeued(request_t *r);
/* The request ended: release what it counts. */
void dispatch_clients_ended(request_t *r);
/* The pump's filter (queue_peek_if): may this queued request go to a worker now? */
bool dispatch_clients_may_run(const queue_entry_t *e, void *ctx);

typedef struct dispatch_clients_stats {
    bool on;
    unsigned tracked, busy, max_clients;
    uint64_t refused, evicted;
} dispatch_clients_stats_t;
void dispatch_clients_stats(const config_t *cfg, dispatch_clients_stats_t *out);

#endif
