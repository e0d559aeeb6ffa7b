/*
 * queue_api: the visible queue's HTTP surfaces (docs/api.md "The queue"):
 *   GET /v1/queue[?model=NAME][&limit=N]  every waiting request, per GPU then model, each
 *       with its position, wait so far, expected start and end and what it waits for
 *       (sched/sched_queue.c computes them); a model's total depth, its max_wait and
 *       eta_new_ms, what a new request would wait now. At most `limit` requests listed per
 *       model (QUEUE_LIST_DEFAULT, at most QUEUE_LIST_MAX). model=NAME: that model alone
 *       (also when nothing waits), 404 unknown_model for a name no model or alias has.
 *   queue_job_fields: a queued job's position and expected times for GET /v1/jobs/ID (its
 *       attempt's place in its model's queue, or its place in the job queue).
 * A row of own_routes (serve/api.c); no token, like /v1/status, but the ids of job attempts
 * ("job-<id>-<nonce>": a job id is its only capability) are shown only to a caller with the
 * admin token when admin_token_file is set (null, with "job": true, otherwise).
 * Invariants: reads only; every list is bounded (models x limit); loop thread only.
 */
#ifndef VRAMD_SERVE_QUEUE_API_H
#define VRAMD_SERVE_QUEUE_API_H

#include <cjson/cJSON.h>

#include "core/types.h"
#include "jobstore/journal.h"
#include "serve/route_table.h"

#define QUEUE_LIST_DEFAULT 100
#define QUEUE_LIST_MAX 1000

void queue_route(conn_t *c, request_t *r, const route_args_t *a);

/* Add to o (a queued job's JSON) "queued_in" ("model": its attempt waits in its model's
 * queue; "jobs": it waits in the job queue for a hand-off; null: its attempt is on its way,
 * neither), "position", "eta_start_ms", "eta_done_ms" and "waiting_for" (null when not
 * known); a job in another state gets them all null. */
void queue_job_fields(cJSON *o, core_t *d, const job_record_t *rec);

#endif
