/*
 * api: vramd's own HTTP routes.
 *
 *   GET  /healthz                    200 while the loop runs
 *   GET  /readyz                     200 when vramd can serve: 503 not_ready (starting), draining,
 *                                    gpu_unavailable (NVML fails, a model needs it), or
 *                                    all_models_failed (every configured model is failed)
 *   GET  /v1/models/{name}/ready     200 when that model can admit work; 503 draining, not_ready,
 *                                    model_failed, gpu_unavailable; 404 unknown_model
 *   GET  /v1/status                  JSON status (obs/status.c)
 *   GET  /v1/models                  OpenAI-style model list (names and aliases)
 *   POST /v1/models/{name}/load      admin: load; answers when READY (200) or FAILED (503)
 *   POST /v1/models/{name}/unload    admin: unload; answers when no instance is left (200)
 *   POST /v1/admin/drain             admin: 202, then drain and exit 0
 *   POST /v1/admin/reload            admin: 200, or 400 bad_config with the parse error
 *
 * Admin routes need "Authorization: Bearer TOKEN" when admin_token_file is set (401
 * unauthorized otherwise; the comparison is constant-time). Load/unload calls that wait
 * are parked on the model's waiters list (their ops: cancel unlinks them); on every
 * CORE_EV_MODEL_CHANGED the waiters whose condition now holds are answered.
 * api_on_request is the connections' request handler (the composition root gives it to
 * conn_accept): vramd's own routes, then /v1/jobs (serve/jobs_api.h), then the router.
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

#endif
