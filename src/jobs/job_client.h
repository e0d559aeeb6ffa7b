/*
 * job_client: the request of one job attempt, which the job runner sends through vramd's
 * own front door (see docs/jobs.md for why) with net/http_client.h, streaming the answer
 * to its result sink (jobs_attempt.c). Closing that connection (http_client_cancel) is how
 * a job is cancelled: vramd then takes the request out of its queue or closes the upstream.
 * The client never half-closes its side: vramd takes a client EOF as "the client left".
 */
#ifndef VRAMD_JOBS_JOB_CLIENT_H
#define VRAMD_JOBS_JOB_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "jobstore/job_submitter.h"

/* Whose request the attempt is (limits.per_client, docs/jobs.md): the job's submitter, and
 * vramd's secret that makes the front door believe it (core_t.job_secret, checked in
 * net/conn_request.c). NULL, an empty secret or an unknown submitter: no such header. */
typedef struct job_client_origin {
    const char *secret;
    const job_submitter_t *submitter;
    const char *key_header; /* limits.per_client's header now (NULL unless keyed by one) */
} job_client_origin_t;

/* Request bytes for one attempt: "METHOD PATH HTTP/1.1", Host, Connection: close,
 * Content-Length, X-Request-Id, X-Vramd-Priority, X-Vramd-Deadline (when deadline_left_ms
 * > 0), X-Vramd-Job-Client "<secret> <submitter's peer>" (origin with both), the
 * submitter's value of origin->key_header when it was captured under that name (it takes
 * the place of a job header of that name), the job's own headers (headers_json: a JSON
 * object of strings, as validated by job_request; NULL = none), then the body. Returns 0
 * with *out filled (caller frees), -1 when headers_json is not an object or on allocation
 * failure. */
int job_client_build_request(const char *method, const char *path, const char *headers_json,
                             const void *body, size_t body_len, const char *request_id, int priority,
                             uint64_t deadline_left_ms, const job_client_origin_t *origin, char **out,
                             size_t *out_len);

#endif
