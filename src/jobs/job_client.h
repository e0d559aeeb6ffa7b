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

/* Request bytes for one attempt: "METHOD PATH HTTP/1.1", Host, Connection: close,
 * Content-Length, X-Request-Id, X-Vramd-Priority, X-Vramd-Deadline (when deadline_left_ms
 * > 0), the job's own headers (headers_json: a JSON object of strings, as validated by
 * job_request; NULL = none), then the body. Returns 0 with *out filled (caller frees), -1
 * when headers_json is not an object or on allocation failure. */
int job_client_build_request(const char *method, const char *path, const char *headers_json,
                             const void *body, size_t body_len, const char *request_id, int priority,
                             uint64_t deadline_left_ms, char **out, size_t *out_len);

#endif
