/*
 * job_client: the bytes of one job attempt's loopback request (see job_client.h); the
 * exchange itself is net/http_client's.
 *
 * Invariants: the head is written with http_client_head / http_out (one fail-closed
 * buffer, checked once), so a request is whole or not at all; the job's own headers are
 * copied as job_request validated them (names tokens, values without CR/LF).
 */
#include "jobs/job_client.h"

#include <stdlib.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "common/buf.h"
#include "net/http_client.h"
#include "http/http_out.h"

#define JOB_CLIENT_MAX_REQUEST_HEAD (256 * 1024)

/* The submitter's headers; the name of the job header they replace (NULL = none). */
static const char *origin_headers(buf_t *b, const job_client_origin_t *o)
{
    if (!o || !o->submitter)
        return NULL;
    const job_submitter_t *s = o->submitter;
    if (o->secret && o->secret[0] && s->peer[0])
        http_out_header(b, "X-Vramd-Job-Client", "%s %s%s%s", o->secret, s->peer, s->key[0] ? " " : "", s->key);
    if (!o->key_header || !s->header[0] || strcasecmp(o->key_header, s->header) != 0)
        return NULL;
    http_out_header(b, o->key_header, "%s", s->value);
    return o->key_header;
}

int job_client_build_request(const char *method, const char *path, const char *headers_json,
                             const void *body, size_t body_len, const char *request_id, int priority,
                             uint64_t deadline_left_ms, const job_client_origin_t *origin, char **out,
                             size_t *out_len)
{
    cJSON *hdrs = headers_json ? cJSON_Parse(headers_json) : NULL;
    if (headers_json && !cJSON_IsObject(hdrs)) {
        cJSON_Delete(hdrs);
        return -1;
    }
    buf_t b;
    buf_init(&b, JOB_CLIENT_MAX_REQUEST_HEAD + body_len);
    http_client_head(&b, method, path, "vramd-jobs", body_len);
    http_out_header(&b, "X-Request-Id", "%s", request_id);
    http_out_header(&b, "X-Vramd-Priority", "%d", priority);
    if (deadline_left_ms > 0)
        http_out_header(&b, "X-Vramd-Deadline", "%llums", (unsigned long long)deadline_left_ms);
    const char *replaced = origin_headers(&b, origin);
    const cJSON *h;
    cJSON_ArrayForEach(h, hdrs) {
        if (h->string && cJSON_IsString(h) && h->valuestring && !(replaced && strcasecmp(h->string, replaced) == 0))
            http_out_header(&b, h->string, "%s", h->valuestring);
    }
    cJSON_Delete(hdrs);
    http_out_end(&b);
    if (body_len)
        buf_append(&b, body, body_len);
    if (buf_failed(&b)) {
        buf_free(&b);
        return -1;
    }
    *out = buf_steal(&b, out_len);
    return 0;
}
