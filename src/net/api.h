/*
 * api: vramd's own HTTP routes.
 *
 *   GET  /healthz                    200 while the loop runs
 *   GET  /readyz                     200 when the config is loaded (and, later, NVML answers)
 *   GET  /v1/status                  JSON status (obs/status.c)
 *   GET  /v1/models                  OpenAI-style model list (names and aliases)
 *   POST /v1/models/{name}/load      admin: load; answers when READY (200) or FAILED (503)
 *   POST /v1/models/{name}/unload    admin: unload; answers when no instance is left (200)
 *   POST /v1/admin/drain             admin: 202, then drain and exit 0
 *   POST /v1/admin/reload            admin: 200, or 400 bad_config with the parse error
 *
 * Admin routes need "Authorization: Bearer TOKEN" when admin_token_file is set (401
 * unauthorized otherwise; the comparison is constant-time). Load/unload calls that wait
 * are parked on the model's waiters list; api_model_changed answers those whose
 * condition now holds (called by the supervisor on every instance state change).
 * api_handle returns true when the request was one of these routes (it is then answered
 * or parked), false when the router should look for a model.
 */
#ifndef VRAMD_NET_API_H
#define VRAMD_NET_API_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/types.h"

bool api_handle(conn_t *c, request_t *r, const char *path, size_t path_len);
void api_model_changed(model_t *m);
/* The request carries the admin bearer token, or no token is configured (constant-time). */
bool api_admin_token_ok(const vramd_t *d, const request_t *r);

#endif
