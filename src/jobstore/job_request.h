/*
 * job_request: the body of POST /v1/jobs, parsed and validated into a job_request_t.
 *
 * Pure: bytes in, a validated struct or an error message out; no I/O, no global state, no
 * knowledge of the daemon (whether the model exists, and how the path reaches it, is
 * decided by the caller, jobs_api.c). It is fuzzed (tests/fuzz/fuzz_job_request.c) and
 * unit-tested (tests/unit/test_job_request.c).
 *
 * Accepted document (a JSON object; any other member is an error that names it):
 *   model        string, 1..127 bytes, required (a model name or alias)
 *   path         string, required: starts with '/', visible ASCII, no '#', at most
 *                JOB_REQUEST_MAX_PATH bytes
 *   method       string, default "POST": an HTTP token of at most 16 bytes, upper case
 *   headers      object of string values, at most JOB_REQUEST_MAX_HEADERS members; names are
 *                HTTP tokens, values have no CR, LF, NUL or other control byte (HTAB ok);
 *                names and values together at most limits.max_header_bytes. Refused (400,
 *                named): hop-by-hop headers (Connection, Keep-Alive, Proxy-Connection, TE,
 *                Trailer, Transfer-Encoding, Upgrade, Proxy-Authenticate,
 *                Proxy-Authorization), framing and routing headers vramd sets itself
 *                (Content-Length, Host, Expect, X-Request-Id, X-Vramd-Priority,
 *                X-Vramd-Deadline). Names are compared case-insensitively; a name given
 *                twice (in any case) is an error.
 *   body         any JSON value except null: sent as its compact JSON text, with
 *                Content-Type application/json unless headers set one
 *   body_base64  string, standard base64 with padding: sent as the decoded bytes, with
 *                Content-Type application/octet-stream unless headers set one
 *                (body and body_base64 together are an error; neither: an empty body)
 *   priority     integer 0..9 (default: the model's priority)
 *   deadline     duration string ("10m", "30s", "500ms"), > 0 and at most 30 days; the job
 *                must start running within this time after it was submitted, the meaning
 *                X-Vramd-Deadline has for a synchronous request (default: none)
 * The decoded body is at most limits.max_body bytes.
 * No string anywhere in the document may hold an escaped NUL (\u0000): cJSON would cut it
 * short silently (a JSON body that needs one can be sent as body_base64).
 *
 * Return convention: job_request_parse gives 0 (out filled; free with job_request_free)
 * or -1 (err holds a message naming the field; out is left empty and needs no free).
 */
#ifndef VRAMD_JOBSTORE_JOB_REQUEST_H
#define VRAMD_JOBSTORE_JOB_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOB_REQUEST_MAX_HEADERS 64
#define JOB_REQUEST_MAX_PATH 2048
#define JOB_REQUEST_MAX_MODEL 127
#define JOB_REQUEST_MAX_METHOD 16
#define JOB_REQUEST_MAX_DEADLINE_MS (30ULL * 24 * 3600 * 1000)

typedef struct job_request_limits {
    uint64_t max_body;       /* decoded body bytes */
    size_t max_header_bytes; /* sum of header name + value lengths */
} job_request_limits_t;

typedef struct job_header {
    char *name;
    char *value;
} job_header_t;

typedef struct job_request {
    char *model;
    char *method;
    char *path;
    job_header_t *headers;
    size_t n_headers;
    char *body; /* NUL-terminated for convenience; body_len bytes */
    size_t body_len;
    bool body_is_json;        /* "body" (not "body_base64") was given */
    const char *content_type; /* points into headers, or a static default; NULL without body */
    int priority;             /* 0..9, or -1: the model's */
    uint64_t deadline_ms;     /* start deadline, relative to submission; 0: none */
} job_request_t;

int job_request_parse(const char *json, size_t len, const job_request_limits_t *limits,
                      job_request_t *out, char *err, size_t errlen);
void job_request_free(job_request_t *r);

/* The value of a header given in the job (case-insensitive name), or NULL. */
const char *job_request_header(const job_request_t *r, const char *name);

/* Standard base64 (RFC 4648, '=' padding required, no whitespace). Returns the decoded
 * length, or -1 when the text is not valid base64 or would decode to more than max bytes.
 * out must hold at least (len / 4) * 3 bytes. */
long job_base64_decode(const char *in, size_t len, unsigned char *out, size_t max);

#endif
