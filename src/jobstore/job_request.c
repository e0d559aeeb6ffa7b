/*
 * job_request: parse and validate a POST /v1/jobs body (see job_request.h for the rules).
 *
 * One pass over the object's members: each known member is checked and copied into the
 * result as it is met; an unknown or repeated member stops the parse. Everything the
 * result holds is malloc'd and released by job_request_free, also on the error path.
 */
#include "jobstore/job_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "common/units.h"
#include "http/http_path.h"

static int failf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

long job_base64_decode(const char *in, size_t len, unsigned char *out, size_t max)
{
    if (len % 4 != 0)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char ch = (unsigned char)in[i + (size_t)k];
            if (ch == '=' && last && k >= 2) {
                pad++;
                v[k] = 0;
                continue;
            }
            if (pad > 0) /* data after padding */
                return -1;
            v[k] = b64_value(ch);
            if (v[k] < 0)
                return -1;
        }
        unsigned triple = ((unsigned)v[0] << 18) | ((unsigned)v[1] << 12) | ((unsigned)v[2] << 6) | (unsigned)v[3];
        /* canonical form: the bits under the padding are zero */
        if ((pad == 1 && (triple & 0xff)) || (pad == 2 && (triple & 0xffff)))
            return -1;
        size_t take = 3 - (size_t)pad;
        if (n + take > max)
            return -1;
        out[n++] = (unsigned char)(triple >> 16);
        if (take > 1)
            out[n++] = (unsigned char)(triple >> 8);
        if (take > 2)
            out[n++] = (unsigned char)triple;
    }
    return (long)n;
}

static bool is_tchar(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool is_token(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

static bool is_header_value(const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return false;
    }
    return true;
}

/* Headers a job may not set: hop-by-hop, framing, and what vramd sets from the job. */
static const char *const refused_headers[] = {
    "Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding",
    "Upgrade", "Proxy-Authenticate", "Proxy-Authorization", "Content-Length", "Host",
    "Expect", "X-Request-Id", "X-Vramd-Priority", "X-Vramd-Deadline", "X-Vramd-Job-Client",
};

static bool header_refused(const char *name)
{
    for (size_t i = 0; i < sizeof refused_headers / sizeof refused_headers[0]; i++)
        if (strcasecmp(name, refused_headers[i]) == 0)
            return true;
    return false;
}

const char *job_request_header(const job_request_t *r, const char *name)
{
    for (size_t i = 0; i < r->n_headers; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

void job_request_free(job_request_t *r)
{
    if (!r)
        return;
    free(r->model);
    free(r->method);
    free(r->path);
    for (size_t i = 0; i < r->n_headers; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof *r);
    r->priority = -1;
}

static int parse_headers(const cJSON *v, const job_request_limits_t *lim, job_request_t *out, char *err,
                         size_t errlen)
{
    if (!cJSON_IsObject(v))
        return failf(err, errlen, "headers: expected an object of strings");
    size_t n = (size_t)cJSON_GetArraySize(v);
    if (n > JOB_REQUEST_MAX_HEADERS)
        return failf(err, errlen, "headers: %zu headers, at most %d are allowed", n, JOB_REQUEST_MAX_HEADERS);
    if (n == 0)
        return 0;
    out->headers = calloc(n, sizeof *out->headers);
    if (!out->headers)
        return failf(err, errlen, "headers: out of memory");
    size_t bytes = 0;
    const cJSON *h;
    cJSON_ArrayForEach(h, v) {
        const char *name = h->string;
        if (!name || !is_token(name, 256))
            return failf(err, errlen, "headers: \"%.64s\" is not a valid header name", name ? name : "");
        if (!cJSON_IsString(h) || !h->valuestring)
            return failf(err, errlen, "headers.%s: expected a string", name);
        if (!is_header_value(h->valuestring))
            return failf(err, errlen, "headers.%s: control characters (CR, LF, NUL...) are not allowed", name);
        if (header_refused(name))
            return failf(err, errlen, "headers.%s: this header is set by vramd (use the job's own fields for"
                                      " priority and deadline) or is hop-by-hop", name);
        if (job_request_header(out, name))
            return failf(err, errlen, "headers.%s: given twice", name);
        bytes += strlen(name) + strlen(h->valuestring) + 4;
        if (bytes > lim->max_header_bytes)
            return failf(err, errlen, "headers: more than %zu bytes in all", lim->max_header_bytes);
        job_header_t *slot = &out->headers[out->n_headers];
        slot->name = strdup(name);
        slot->value = strdup(h->valuestring);
        out->n_headers++;
        if (!slot->name || !slot->value)
            return failf(err, errlen, "headers: out of memory");
    }
    return 0;
}

static int parse_path(const cJSON *v, job_request_t *out, char *err, size_t errlen)
{
    if (!cJSON_IsString(v) || !v->valuestring)
        return failf(err, errlen, "path: expected a string starting with '/'");
    const char *p = v->valuestring;
    size_t n = strlen(p);
    if (n == 0 || p[0] != '/')
        return failf(err, errlen, "path: must start with '/'");
    if (n > JOB_REQUEST_MAX_PATH)
        return failf(err, errlen, "path: longer than %d bytes", JOB_REQUEST_MAX_PATH);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '#')
            return failf(err, errlen, "path: byte %zu is not allowed (visible ASCII only, no '#'; percent-encode)", i);
    }
    if (http_path_has_dot_segment(p, n)) /* the router would refuse it at every attempt */
        return failf(err, errlen, "path: has a dot segment (\".\" or \"..\", also as %%2e)");
    out->path = strdup(p);
    return out->path ? 0 : failf(err, errlen, "path: out of memory");
}

static int parse_body_json(const cJSON *v, const job_request_limits_t *lim, job_request_t *out, char *err,
                           size_t errlen)
{
    char *text = cJSON_PrintUnformatted(v);
    if (!text)
        return failf(err, errlen, "body: out of memory");
    size_t n = strlen(text);
    if (n > lim->max_body) {
        free(text);
        return failf(err, errlen, "body: %zu bytes, over limits.max_body (%llu)", n,
                     (unsigned long long)lim->max_body);
    }
    out->body = text;
    out->body_len = n;
    out->body_is_json = true;
    return 0;
}

static int parse_body_base64(const cJSON *v, const job_request_limits_t *lim, job_request_t *out, char *err,
                             size_t errlen)
{
    if (!cJSON_IsString(v) || !v->valuestring)
        return failf(err, errlen, "body_base64: expected a base64 string");
    size_t n = strlen(v->valuestring);
    if ((n / 4) * 3 > lim->max_body + 2)
        return failf(err, errlen, "body_base64: decodes to more than limits.max_body (%llu bytes)",
                     (unsigned long long)lim->max_body);
    unsigned char *bytes = malloc((n / 4) * 3 + 1);
    if (!bytes)
        return failf(err, errlen, "body_base64: out of memory");
    long got = job_base64_decode(v->valuestring, n, bytes, lim->max_body);
    if (got < 0) {
        free(bytes);
        return failf(err, errlen, "body_base64: not valid base64 (RFC 4648 with '=' padding, no whitespace),"
                                  " or over limits.max_body");
    }
    bytes[got] = '\0';
    out->body = (char *)bytes;
    out->body_len = (size_t)got;
    out->body_is_json = false;
    return 0;
}

static int parse_member(const cJSON *v, const job_request_limits_t *lim, job_request_t *out, char *err,
                        size_t errlen)
{
    const char *k = v->string;
    if (strcmp(k, "model") == 0) {
        if (!cJSON_IsString(v) || !v->valuestring || !v->valuestring[0] ||
            strlen(v->valuestring) > JOB_REQUEST_MAX_MODEL)
            return failf(err, errlen, "model: expected a model name or alias (1..%d bytes)", JOB_REQUEST_MAX_MODEL);
        for (const char *p = v->valuestring; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                return failf(err, errlen, "model: control characters are not allowed");
        out->model = strdup(v->valuestring);
        return out->model ? 0 : failf(err, errlen, "model: out of memory");
    }
    if (strcmp(k, "path") == 0)
        return parse_path(v, out, err, errlen);
    if (strcmp(k, "method") == 0) {
        if (!cJSON_IsString(v) || !v->valuestring || !is_token(v->valuestring, JOB_REQUEST_MAX_METHOD))
            return failf(err, errlen, "method: expected an HTTP method such as POST (a token of at most %d bytes)",
                         JOB_REQUEST_MAX_METHOD);
        for (const char *p = v->valuestring; *p; p++)
            if (*p >= 'a' && *p <= 'z')
                return failf(err, errlen, "method: must be upper case (\"%s\")", v->valuestring);
        if (strcmp(v->valuestring, "CONNECT") == 0)
            return failf(err, errlen, "method: CONNECT is not supported");
        out->method = strdup(v->valuestring);
        return out->method ? 0 : failf(err, errlen, "method: out of memory");
    }
    if (strcmp(k, "headers") == 0)
        return parse_headers(v, lim, out, err, errlen);
    if (strcmp(k, "body") == 0)
        return cJSON_IsNull(v) ? 0 : parse_body_json(v, lim, out, err, errlen);
    if (strcmp(k, "body_base64") == 0)
        return parse_body_base64(v, lim, out, err, errlen);
    if (strcmp(k, "priority") == 0) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d <= 9) || d != (double)(int)d)
            return failf(err, errlen, "priority: expected an integer 0..9");
        out->priority = (int)d;
        return 0;
    }
    if (strcmp(k, "deadline") == 0) {
        uint64_t ms = 0;
        if (!cJSON_IsString(v) || !v->valuestring || units_parse_duration_ms(v->valuestring, &ms) != 0 ||
            ms == 0 || ms > JOB_REQUEST_MAX_DEADLINE_MS)
            return failf(err, errlen, "deadline: expected a duration such as \"10m\" or \"30s\" (more than 0, at"
                                      " most 30 days)");
        out->deadline_ms = ms;
        return 0;
    }
    return failf(err, errlen, "%.64s: unknown field (known: model, path, method, headers, body, body_base64,"
                              " priority, deadline)", k);
}

static int parse_doc(const cJSON *doc, const job_request_limits_t *lim, job_request_t *out, char *err,
                     size_t errlen)
{
    if (!cJSON_IsObject(doc))
        return failf(err, errlen, "the job must be a JSON object");
    const cJSON *v;
    cJSON_ArrayForEach(v, doc) {
        if (!v->string)
            return failf(err, errlen, "the job must be a JSON object");
        for (const cJSON *w = doc->child; w != v; w = w->next)
            if (strcmp(w->string, v->string) == 0)
                return failf(err, errlen, "%.64s: given twice", v->string);
        if (strcmp(v->string, "body") == 0 && cJSON_GetObjectItemCaseSensitive(doc, "body_base64"))
            return failf(err, errlen, "body: give either body or body_base64, not both");
        if (parse_member(v, lim, out, err, errlen) != 0)
            return -1;
    }
    if (!out->model)
        return failf(err, errlen, "model: required");
    if (!out->path)
        return failf(err, errlen, "path: required");
    if (!out->method && !(out->method = strdup("POST")))
        return failf(err, errlen, "method: out of memory");
    const char *ct = job_request_header(out, "Content-Type");
    if (ct)
        out->content_type = ct;
    else if (out->body)
        out->content_type = out->body_is_json ? "application/json" : "application/octet-stream";
    return 0;
}

/* cJSON ends a string at an escaped NUL (\u0000) without saying so: refuse those, so that
 * nothing is silently cut short. Scans string literals, honouring backslash escapes. */
static bool has_escaped_nul(const char *json, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char ch = json[i];
        if (!in_string) {
            in_string = ch == '"';
            continue;
        }
        if (ch == '"') {
            in_string = false;
        } else if (ch == '\\' && i + 1 < len) {
            if (json[i + 1] == 'u' && i + 5 < len && memcmp(json + i + 2, "0000", 4) == 0)
                return true;
            i++; /* the escaped character */
        }
    }
    return false;
}

int job_request_parse(const char *json, size_t len, const job_request_limits_t *limits,
                      job_request_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->priority = -1;
    if (!json || len == 0)
        return failf(err, errlen, "the job must be a JSON object (empty body)");
    if (has_escaped_nul(json, len))
        return failf(err, errlen, "strings must not contain NUL (\\u0000)");
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!doc)
        return failf(err, errlen, "the body is not valid JSON");
    for (; end && end < json + len; end++) {
        if (!strchr(" \t\r\n", *end) || *end == '\0') {
            cJSON_Delete(doc);
            return failf(err, errlen, "the body is not valid JSON (bytes after the object)");
        }
    }
    int rc = parse_doc(doc, limits, out, err, errlen);
    cJSON_Delete(doc);
    if (rc != 0)
        job_request_free(out);
    return rc;
}
