/*
 * fuzz_job_request: libFuzzer entry for the POST /v1/jobs body parser (src/jobstore/job_request.c).
 *
 * For each input it:
 *   1. parses it as a job under two sets of limits (generous, and tiny: 16 body bytes, 32
 *      header bytes) and checks the return convention: 0 with a result that keeps every
 *      promise of job_request.h (model and path present and well formed, method an upper-case
 *      token, headers within bounds, free of control bytes and of the refused names, body
 *      within max_body, priority -1..9, deadline within bounds, a content type exactly when
 *      there is a body or a Content-Type header), or -1 with a non-empty message and an
 *      emptied result;
 *   2. checks that parsing is deterministic (the same input twice gives the same answer);
 *   3. decodes the input as base64: a success must re-encode to exactly the input (the
 *      decoder accepts canonical base64 only), and never writes past its bound.
 * Any broken promise aborts. No global state. Replayed over tests/fuzz/corpus/job_request.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jobstore/job_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool is_token(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              strchr("!#$%&'*+-.^_`|~", ch)))
            return false;
    }
    return true;
}

static void check_result(const job_request_t *r, const job_request_limits_t *lim)
{
    check(r->model && r->model[0] && strlen(r->model) <= JOB_REQUEST_MAX_MODEL);
    check(r->path && r->path[0] == '/' && strlen(r->path) <= JOB_REQUEST_MAX_PATH);
    for (const char *p = r->path; *p; p++)
        check((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f && *p != '#');
    check(is_token(r->method) && strlen(r->method) <= JOB_REQUEST_MAX_METHOD);
    for (const char *p = r->method; *p; p++)
        check(!(*p >= 'a' && *p <= 'z'));
    check(r->n_headers <= JOB_REQUEST_MAX_HEADERS);
    size_t hbytes = 0;
    for (size_t i = 0; i < r->n_headers; i++) {
        const job_header_t *h = &r->headers[i];
        check(is_token(h->name));
        for (const char *p = h->value; *p; p++)
            check(((unsigned char)*p >= 0x20 || *p == '\t') && *p != 0x7f);
        check(strcasecmp(h->name, "Content-Length") != 0 && strcasecmp(h->name, "Transfer-Encoding") != 0 &&
              strcasecmp(h->name, "Host") != 0 && strcasecmp(h->name, "Connection") != 0 &&
              strcasecmp(h->name, "X-Request-Id") != 0);
        for (size_t k = 0; k < i; k++)
            check(strcasecmp(h->name, r->headers[k].name) != 0);
        hbytes += strlen(h->name) + strlen(h->value);
    }
    check(hbytes <= lim->max_header_bytes);
    check(r->body_len <= lim->max_body);
    check(r->body != NULL || r->body_len == 0);
    check(r->priority >= -1 && r->priority <= 9);
    check(r->deadline_ms <= JOB_REQUEST_MAX_DEADLINE_MS);
    bool has_ct = job_request_header(r, "Content-Type") != NULL;
    check((r->content_type != NULL) == (r->body != NULL || has_ct));
}

static int parse_checked(const uint8_t *data, size_t size, const job_request_limits_t *lim)
{
    job_request_t r;
    char err[512];
    err[0] = '\0';
    int rc = job_request_parse((const char *)data, size, lim, &r, err, sizeof err);
    check(rc == 0 || rc == -1);
    if (rc == 0) {
        check_result(&r, lim);
        job_request_free(&r);
    } else {
        check(err[0] != '\0' && strlen(err) < sizeof err);
        check(r.model == NULL && r.path == NULL && r.method == NULL && r.headers == NULL && r.body == NULL);
    }
    return rc;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void check_base64(const uint8_t *data, size_t size)
{
    size_t cap = (size / 4) * 3;
    unsigned char *out = malloc(cap + 1);
    check(out != NULL);
    size_t max = size % 2 ? cap : cap / 2; /* also exercise the bound */
    long n = job_base64_decode((const char *)data, size, out, max);
    check(n >= -1 && (n < 0 || (size_t)n <= max));
    if (n >= 0) {
        /* re-encode: canonical input only */
        size_t enc_len = ((size_t)n + 2) / 3 * 4;
        check(enc_len == size);
        char *enc = malloc(enc_len + 1);
        check(enc != NULL);
        size_t o = 0;
        for (size_t i = 0; i < (size_t)n; i += 3) {
            unsigned v = (unsigned)out[i] << 16;
            size_t left = (size_t)n - i;
            if (left > 1)
                v |= (unsigned)out[i + 1] << 8;
            if (left > 2)
                v |= out[i + 2];
            enc[o++] = b64[(v >> 18) & 63];
            enc[o++] = b64[(v >> 12) & 63];
            enc[o++] = left > 1 ? b64[(v >> 6) & 63] : '=';
            enc[o++] = left > 2 ? b64[v & 63] : '=';
        }
        check(o == size && memcmp(enc, data, size) == 0);
        free(enc);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const job_request_limits_t big = {.max_body = 1 << 20, .max_header_bytes = 8192};
    const job_request_limits_t tiny = {.max_body = 16, .max_header_bytes = 32};
    int a = parse_checked(data, size, &big);
    int b = parse_checked(data, size, &big);
    check(a == b);
    int c = parse_checked(data, size, &tiny);
    check(!(c == 0 && a != 0)); /* tighter limits never accept what looser ones refuse */
    check_base64(data, size);
    return 0;
}
