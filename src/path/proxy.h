/*
 * proxy: forwarding one request to a worker instance and streaming the answer back.
 *
 * proxy_start(req, inst) takes an idle pooled connection to the instance (or opens one),
 * writes the request (method and target, with the route prefix stripped; headers less the
 * hop-by-hop ones and Expect; X-Request-Id and X-Forwarded-For added; the buffered body
 * with a Content-Length), reads the response head with http1, sends the client a head with
 * vramd's headers added, and streams the body as it arrives: Content-Length bodies as they
 * are, chunked and close-delimited ones re-chunked for HTTP/1.1 clients (or close-delimited
 * for HTTP/1.0 clients). Backpressure: while the client's write backlog is over
 * PROXY_BACKLOG_MAX, the upstream is not read.
 *
 * Upstream states: CONNECTING -> SENDING -> HEAD -> BODY -> IDLE (back in the instance's
 * pool) or closed. A pooled connection that fails before any response byte is retried once
 * on a fresh connection (the worker may have closed it while idle).
 *
 * Silence: while vramd reads the worker (never while paused for backpressure), one timer
 * bounds the wait for the answer head (response_timeout, from the send) and the worker's
 * silence (recycle.hang_timeout, from its last bytes): 504 worker_hang or a cut stream, and
 * instance_kill_hung. A connection that breaks without an answer makes its instance suspect
 * (instance_mark_suspect); broken exchanges (not well-formed answers, except 502/504) count
 * toward the instance's ejection. TCP_QUICKACK is re-armed after every upstream read.
 *
 * Outcomes: the request always ends through exactly one of: conn_request_done (response
 * complete), an error answer 502 worker_failed (nothing sent yet), a retry from the queue
 * (core_requeue), the verdict (a held answer), or conn_abort (the stream broke after the
 * head was sent). Each releases the instance slot exactly once (instance_request_done).
 * While it forwards, the request's ops are the proxy's: cancel (the client left, or the
 * request's total deadline passed: the upstream is closed, never pooled, and the slot
 * released; no callback touches the request afterwards) and drained (the client read enough: read the upstream again). A failed
 * write to the client means the request was cancelled: the proxy stops there.
 */
#ifndef VRAMD_PATH_PROXY_H
#define VRAMD_PATH_PROXY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/types.h"

#define PROXY_POOL_MAX 64
#define PROXY_CONNECT_TIMEOUT_MS 5000

/* Listen to the core's events (once, at start): an instance that goes down closes its pool. */
void proxy_init(core_t *core);
/* Take a request's answer (its ops become the proxy's: cancel, drained) and forward it. */
void proxy_start(request_t *req, instance_t *inst);
/* The driver's limit of inst changed (gate/driver_limit.h): requests held for it go on
 * (any: all of them, whatever the limit, as when the instance goes down). */
void proxy_limit_applied(instance_t *inst, bool any);

#endif
