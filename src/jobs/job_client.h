/*
 * job_client: the loopback HTTP/1.1 client that runs one job attempt through vramd's own
 * front door (see docs/jobs.md for why), streaming the response to a sink.
 *
 * One attempt = one fresh TCP connection to vramd's listen address, the request bytes the
 * caller built (job_client_build_request), then the response: its head (bounded by
 * JOB_CLIENT_MAX_HEAD, 1xx interim heads skipped) goes to ops->on_head, its body, decoded
 * from Content-Length, chunked or until-close framing, goes to ops->on_body in pieces as
 * it arrives (nothing is buffered beyond one read), and ops->on_end says how it ended.
 * The client never half-closes its side: vramd takes a client EOF as "the client left"
 * and cancels the request. Closing the connection (job_client_cancel) is how a job is
 * cancelled: vramd then takes the request out of its queue or closes the upstream.
 *
 * Callbacks: on_head at most once, then on_body zero or more times, then on_end exactly
 * once, unless job_client_cancel was called first (then nothing more). on_head / on_body
 * returning -1 stops the attempt: on_end(JOB_CLIENT_SINK_FAILED). on_end runs with the
 * handles already closing, so it may free the caller's context and start new attempts.
 * The job_client_t is freed by the module after on_end returns (or after cancel).
 * Return convention: 0 ok (on_end will follow), -1 error (err filled, no callback).
 */
#ifndef VRAMD_JOBS_JOB_CLIENT_H
#define VRAMD_JOBS_JOB_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/buf.h"
#include "net/http1.h"

#define JOB_CLIENT_MAX_HEAD (64 * 1024)
#define JOB_CLIENT_MAX_HEADERS 100

typedef struct job_client job_client_t;

enum job_client_end {
    JOB_CLIENT_COMPLETE = 0,   /* the whole response arrived */
    JOB_CLIENT_CONNECT_FAILED, /* no connection was made: nothing reached vramd */
    JOB_CLIENT_DROPPED,        /* closed, reset or malformed before the response ended */
    JOB_CLIENT_SINK_FAILED,    /* on_head or on_body returned -1 */
};

typedef struct job_client_ops {
    /* head: the head bytes; msg spans index into it (valid during the call only) */
    int (*on_head)(void *ctx, const char *head, const http1_msg_t *msg);
    int (*on_body)(void *ctx, const char *data, size_t len);
    void (*on_end)(void *ctx, enum job_client_end how, const char *error);
} job_client_ops_t;

/* Request bytes for one attempt: "METHOD PATH HTTP/1.1", Host, Connection: close,
 * Content-Length, X-Request-Id, X-Vramd-Priority, X-Vramd-Deadline (when deadline_left_ms
 * > 0), the job's own headers (headers_json: a JSON object of strings, as validated by
 * job_request; NULL = none), then the body. Returns 0 with *out filled (caller frees), -1
 * when headers_json is not an object or on allocation failure. */
int job_client_build_request(const char *method, const char *path, const char *headers_json,
                             const void *body, size_t body_len, const char *request_id, int priority,
                             uint64_t deadline_left_ms, char **out, size_t *out_len);

/* Takes ownership of request (malloc'd) in every case. */
int job_client_start(uv_loop_t *loop, const struct sockaddr *addr, char *request, size_t request_len,
                     const job_client_ops_t *ops, void *ctx, job_client_t **out, char *err, size_t errlen);
void job_client_cancel(job_client_t *c);

#endif
