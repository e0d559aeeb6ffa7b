/*
 * wiring: how the layers are connected, written once. The composition root (vramd.c)
 * calls it at start; the request-path unit tests call it to build the same daemon without
 * a listener of their own.
 *
 *   core->requeue = dispatch_requeue       retries from the proxy and the verdict
 *   dispatch_init, proxy_init              listeners of REQUEST_ENDED and INSTANCE_DOWN
 *   sched_init(.., actions)                the scheduler acts through the supervisor's
 *                                          instance_evict / instance_recycle / instance_reclaimed,
 *                                          and has it refresh identities (instance_refresh_identity)
 *   api_init(.., admin)                    drain and reload of the caller; MODEL_CHANGED waiters
 * New connections get wiring_conn_handlers(): api_on_request for a complete request,
 * api_on_head for the head of an Expect: 100-continue request (refused before its body is
 * read); a model's pump is dispatch_pump (the caller owns the listener and the models and
 * hands them over).
 */
#ifndef VRAMD_DAEMON_WIRING_H
#define VRAMD_DAEMON_WIRING_H

#include "core/core.h"
#include "net/conn.h"
#include "serve/api.h"

void wiring_connect(core_t *core, const api_admin_ops_t *admin);
/* The handlers for conn_accept. */
const conn_handlers_t *wiring_conn_handlers(void);

#endif
