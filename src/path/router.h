/*
 * router: which model a complete request is for.
 *
 * Order: the model whose `route` is the longest prefix of the path; then, for
 * POST /v1/..., the model named by the JSON body's "model" field (names and aliases).
 * Nothing matched: 404 unknown_model. A matched request goes to the dispatcher
 * (path/dispatch.h), which admits it into the model's queue or refuses it.
 * vramd's own routes are looked at before (serve/api.c hands the rest to router_route).
 * A path with a dot segment (http/http_path.h) is refused 400 bad_request before any match.
 *
 * router_head_refused is the same choice on a head whose body is not read yet (Expect:
 * 100-continue): a path no model's route matches, and that is not a POST under /v1/ (whose
 * body may name a model), is 404 unknown_model at once; a matched model's admission checks
 * run on the head (dispatch_head_refused); a model named in the body is not known yet.
 */
#ifndef VRAMD_PATH_ROUTER_H
#define VRAMD_PATH_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "core/types.h"

void router_route(conn_t *c, request_t *r);
/* True when r's head alone refuses it (answered: 404 unknown_model or an admission error). */
bool router_head_refused(conn_t *c, request_t *r);
/* The model whose route is the longest prefix of path: NULL when none. */
model_t *router_find_model_by_path(core_t *d, const char *path, size_t len, size_t *prefix_len);

/* The model an alias_of entry (config.h) is served by now: the target whose new request
 * would start first (sched_queue_eta_ms: its queue, its turn on the card, its way in, so a
 * loaded model before a parked one before a stopped one), ties to the first listed; failed
 * targets only when every one has failed (its 503 then says why). NULL when none of its
 * targets is configured now. */
model_t *router_alias_target(core_t *d, const config_alias_of_t *a);

#endif
