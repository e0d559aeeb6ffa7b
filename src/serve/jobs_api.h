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
 * They are rows of vramd's route table (serve/route_table.h): jobs_api_routes, which
 * serve/api.c matches after its own rows; it checks the token of the list (API_ADMIN) and
 * answers 405 for another method. Each handler answers once, or streams the result.
 */
#ifndef VRAMD_SERVE_JOBS_API_H
#define VRAMD_SERVE_JOBS_API_H

#include "serve/route_table.h"

extern const api_route_t jobs_api_routes[]; /* ends with a {0} row */

#endif
