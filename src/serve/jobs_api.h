/*
 * jobs_api: the HTTP routes of durable jobs (SPEC 3.2; docs/jobs.md has the full contract).
 *
 *   POST   /v1/jobs               submit -> 202 {"id","state":"queued","url"} + Location
 *   GET    /v1/jobs               list (admin bearer token when one is configured):
 *                                 ?state=&model=&limit=1..1000&cursor= -> {jobs, next_cursor}
 *   GET    /v1/jobs/{id}          the job (state, timestamps, attempts, error, result)
 *   DELETE /v1/jobs/{id}          cancel -> 200; 409 already_finished
 *   GET    /v1/jobs/{id}/result   the stored body with its content type (HEAD too);
 *                                 409 not_done | job_failed | job_cancelled, 410 result_expired
 *
 * An {id} that is not exactly 32 lower-case hex characters is 404 not_found before anything
 * else happens: no journal lookup, no file name is ever built from it.
 * jobs_api_handle returns true when the path is one of these routes (the request is then
 * answered, or streaming its result), false otherwise.
 */
#ifndef VRAMD_SERVE_JOBS_API_H
#define VRAMD_SERVE_JOBS_API_H

#include <stdbool.h>
#include <stddef.h>

#include "core/types.h"

bool jobs_api_handle(conn_t *c, request_t *r, const char *path, size_t path_len);

#endif
