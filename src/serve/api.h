/*
 * api: vramd's own HTTP routes: health and readiness (vramd's and one model's), status,
 * the model list, the status page, metrics, and the admin routes (load, unload, pin, unpin,
 * restart, drain, reload); the visible queue is serve/queue_api.h's, the durable jobs'
 * routes are serve/jobs_api.h's. What each answers: docs/api.md.
 *
 * The routes are the rows of one table (serve/route_table.h): own_routes in api.c, then the
 * rows jobs_api.c exports; docs/api.md lists the same rows. api_on_request matches a request
 * once: a connection on the reserve reaches only rows marked reserve (else 503 overloaded
 * naming them); a path no row has goes to the router (path/router.h), as does another
 * method on a path whose rows do not own it (the jobs rows do: 405 method_not_allowed);
 * an API_ADMIN row needs "Authorization: Bearer TOKEN" when admin_token_file is set (401
 * unauthorized otherwise; the comparison is constant-time), then its handler answers.
 * Load/unload/pin/restart calls that wait are parked on the model's waiters list (their
 * ops: cancel unlinks them); on every CORE_EV_MODEL_CHANGED the waiters whose condition now
 * holds are answered (a restart's: an instance newer than the restart is READY). The composition root gives api_on_request to conn_accept.
 * api_on_head is their head handler (Expect: 100-continue, body not read yet): a reserve
 * connection's 503 overloaded, vramd's own routes go on to their body, the rest is the
 * router's (path/router.h router_head_refused).
 * Drain and reload are the composition root's: it hands them over in api_init.
 */
#ifndef VRAMD_SERVE_API_H
#define VRAMD_SERVE_API_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core.h"
#include "core/types.h"
#include "serve/route_table.h"

/* What the admin routes ask of the daemon itself. */
typedef struct api_admin_ops {
    void (*drain)(void *ctx, const char *why);
    int (*reload)(void *ctx, char *err, size_t errlen);
    void *ctx;
} api_admin_ops_t;

void api_init(core_t *core, const api_admin_ops_t *admin);
void api_on_request(conn_t *c, request_t *r);
/* conn_head_fn: true when r's head alone refuses it (answered). */
bool api_on_head(conn_t *c, request_t *r);

/* The route tables api_on_request matches, in order (NULL-terminated; for tests). */
const api_route_t *const *api_route_tables(void);

#endif
