/*
 * model_logs: GET /v1/models/NAME/logs, a model's recent worker output from its ring
 * (core/model.h m->logs, filled through the composition root's line hook). A row of
 * own_routes (serve/api.c); admin token when admin_token_file is set (output may hold
 * prompts or paths). What it answers: docs/api.md.
 */
#ifndef VRAMD_SERVE_MODEL_LOGS_H
#define VRAMD_SERVE_MODEL_LOGS_H

#include "serve/route_table.h"

#define MODEL_LOGS_DEFAULT_LINES 100

void model_logs_route(conn_t *c, request_t *r, const route_args_t *a);

#endif
