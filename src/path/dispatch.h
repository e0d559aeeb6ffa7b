/*
 * dispatch: a request's way from admission to a worker slot, and back when it is retried.
 *
 *   dispatch_admit    checks a routed request (draining, failed model, priority and
 *                     deadline headers, GPU fit, predicted start, the client's cap, queue
 *                     room) and queues it, or answers it with the error (503/429/400/422);
 *   dispatch_head_refused  the same checks, in the same order and with the same answers,
 *                     on a head whose body is not read yet (Expect: 100-continue), changing
 *                     nothing: what only the body can tell (a degradation level that would
 *                     fit, a model named in the body) lets the request go on;
 *   dispatch_pump     (a model's deferred pump, run at the check phase) hands queued
 *                     requests to free instances, in queue order, while the scheduler
 *                     admits their memory; then lets the supervisor start or stop instances;
 *   dispatch_requeue  puts a request that ran back in its queue (the core's requeue hook:
 *                     the proxy and the verdict call it through core_requeue).
 *
 * It owns the queues: model->queue.depth is the number of that model's requests in QUEUED
 * state. A dispatch takes a slot (instance->path.in_flight and model->in_flight + 1) that the
 * proxy gives back exactly once (instance_request_done). The totals are derived
 * (core_queued_total, core_in_flight_total).
 * A queued request's answer is the dispatcher's (its ops: cancel = out of the queue); its
 * deadline (the earlier of the queue deadline and the total deadline) runs on its conn's
 * timer (504 deadline_exceeded, stage queued). From its dispatch on, the same timer holds
 * its total deadline, if any: passing it ends the request whoever owns it then (504 stage
 * running, or a cut stream). Expiries are counted per model and stage.
 * It listens to CORE_EV_REQUEST_ENDED: the request's outcome and durations go to its
 * model's metrics, a reservation left behind is released (the ledger's safety net), and a
 * retry leaves the retry budget.
 */
#ifndef VRAMD_PATH_DISPATCH_H
#define VRAMD_PATH_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core.h"
#include "core/types.h"

/* Listen to the core's events (once, at start). */
void dispatch_init(core_t *core);
/* The deferred pump of a model (model_t.pump's function). */
void dispatch_pump(core_defer_t *pump);
void dispatch_admit(conn_t *c, request_t *r, model_t *m, size_t strip_len);
/* True when the head of r for m already refuses it (answered, with dispatch_admit's error);
 * m NULL: the body will name the model (only draining refuses then). */
bool dispatch_head_refused(conn_t *c, request_t *r, model_t *m);
void dispatch_requeue(request_t *r, const char *why);

#endif
