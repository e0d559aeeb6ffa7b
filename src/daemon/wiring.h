/*
 * wiring: the composition root, written once: every upward connection (function pointers,
 * hooks, scheduler actions, admin ops, the modules' inits that subscribe to core events)
 * is set here and nowhere else. The daemon (vramd.c) calls wiring_connect once at start;
 * the request-path unit tests and the fuzz harness call it to build the same daemon
 * without a listener of their own.
 *
 *   process_set_line_hook(on_worker_line)  a worker's output lines into its model's ring
 *   core->requeue = dispatch_requeue       retries from the proxy and the verdict
 *   dispatch_init, proxy_init,             listeners of REQUEST_ENDED, RELOADED,
 *   proxy_upgrade_init, prompt_hold_init   INSTANCE_DOWN, INSTANCE_GONE, DRAINING
 *   sched_init(.., actions)                the scheduler acts through the supervisor's
 *                                          instance_evict / instance_recycle / instance_reclaimed,
 *                                          and has it refresh identities (instance_refresh_identity)
 *   api_init(.., admin)                    drain and reload of the caller; MODEL_CHANGED waiters
 *   shim_grants_init                       the CUDA shims' grant socket; REQUEST_DISPATCHED
 *   driver_limit_init(.., on_limit_applied) a raised limit lets the proxy's held requests and
 *                                          the shims' held grants go on
 *   jobs_listen                            REQUEST_DISPATCHED for the job runner (jobs_init,
 *                                          which opens the store, comes later, once the models exist)
 *   root->on_progress                      the caller's drain check on REQUEST_ENDED and
 *                                          INSTANCE_GONE (NULL: none)
 * New connections get wiring_conn_handlers(): api_on_request for a complete request,
 * api_on_head for the head of an Expect: 100-continue request (refused before its body is
 * read); a model's pump is dispatch_pump (the caller owns the listener and the models and
 * hands them over). Teardown is the caller's: shim_grants_shutdown, sched_shutdown,
 * driver_limit_shutdown, in that order (vramd.c vramd_run).
 */
#ifndef VRAMD_DAEMON_WIRING_H
#define VRAMD_DAEMON_WIRING_H

#include "core/core.h"
#include "net/conn.h"
#include "serve/api.h"

/* What the caller of wiring_connect brings: its admin ops and its own listener. */
typedef struct {
    api_admin_ops_t admin;        /* drain and reload (copied by api_init) */
    core_listener_fn on_progress; /* told on REQUEST_ENDED and INSTANCE_GONE; NULL: none */
    void *progress_ctx;
} wiring_root_t;

void wiring_connect(core_t *core, const wiring_root_t *root);
/* The handlers for conn_accept. */
const conn_handlers_t *wiring_conn_handlers(void);

#endif
