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
 * The request handler for new connections is api_on_request; a model's pump is
 * dispatch_pump (both given by the caller, which owns the listener and the models).
 */
#ifndef VRAMD_DAEMON_WIRING_H
#define VRAMD_DAEMON_WIRING_H

#include "core/core.h"
#include "serve/api.h"

void wiring_connect(core_t *core, const api_admin_ops_t *admin);

#endif
