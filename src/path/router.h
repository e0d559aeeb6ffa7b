/*
 * router: which model a complete request is for.
 *
 * Order: the model whose `route` is the longest prefix of the path; then, for
 * POST /v1/..., the model named by the JSON body's "model" field (names and aliases).
 * Nothing matched: 404 unknown_model. A matched request goes to the dispatcher
 * (path/dispatch.h), which admits it into the model's queue or refuses it.
 * vramd's own routes are looked at before (serve/api.c hands the rest to router_route).
 * A path with a dot segment (http/http_path.h) is refused 400 bad_request before any match.
 */
#ifndef VRAMD_PATH_ROUTER_H
#define VRAMD_PATH_ROUTER_H

#include <stddef.h>

#include "core/types.h"

void router_route(conn_t *c, request_t *r);
/* The model whose route is the longest prefix of path: NULL when none. */
model_t *router_find_model_by_path(core_t *d, const char *path, size_t len, size_t *prefix_len);

#endif
