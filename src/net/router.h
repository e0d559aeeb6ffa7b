/*
 * router: decides who answers a complete request.
 *
 * Order: vramd's own routes (/healthz, /readyz, /v1/status, /v1/models, admin routes)
 * first; then the model whose `route` is the longest prefix of the path; then, for
 * POST /v1/..., the model named by the JSON body's "model" field (names and aliases).
 * Nothing matched: 404 unknown_model.
 *
 * A request for a model is admitted to that model's queue when the daemon is not draining,
 * the model is not failed, and both the model's queue_max and limits.queue_max have room
 * (else 503 with Retry-After). Its deadline (X-Vramd-Deadline, else the model's) arms the
 * conn's timer (504 deadline_exceeded if it is still queued then). The model's pump then
 * dispatches it (request_dispatch) to an instance with a free slot.
 */
#ifndef VRAMD_NET_ROUTER_H
#define VRAMD_NET_ROUTER_H

#include <stddef.h>

#include "daemon/types.h"

void router_handle(conn_t *c, request_t *r);
/* Put a request that already ran back in its model's queue (degradation retry, invalid
 * output, worker crash with retry: safe). Its deadline still holds (504 when passed). */
void request_requeue(request_t *r, const char *why);
/* Hand a queued request to an instance (called by the model's pump). Takes a slot. */
void request_dispatch(request_t *r, instance_t *inst);
/* The model named in the path or body (for tests): NULL when none. */
model_t *router_find_model_by_path(vramd_t *d, const char *path, size_t len, size_t *prefix_len);

#endif
