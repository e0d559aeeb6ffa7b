/*
 * degrade_detect: OOM detection over a worker's answer (degrade_is_oom). Pure functions over
 * buffers: no I/O, no global state (the regex is compiled per call), nothing kept between
 * calls. The rule itself is written in degrade.h.
 *
 * Cheap signals (status, header) are tried first; the body regex looks at the first
 * DEGRADE_REGEX_WINDOW bytes only (NUL bytes in that window are read as spaces so that
 * text after them is still seen); the JSON signal parses the whole body, and only when
 * nothing cheaper has already decided the answer. A body is JSON when it is one JSON value
 * with nothing but whitespace around it and no NUL byte (degrade_parse_json_body, which
 * degrade_rewrite.c uses too). A body_matches that does not compile matches nothing.
 * degrade_error_is_oom: the text of an error event in a streamed answer (stream_watch.h) is
 * an OOM when body_matches (its default when not configured) matches it.
 */
#include "quality/degrade.h"
#include "quality/degrade_int.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/json_util.h"

#define DEGRADE_REGEX_WINDOW (64u * 1024u) /* body bytes the regex looks at */
#define DEGRADE_DEFAULT_BODY_MATCHES "out of memory"

/* Parses the body as one JSON value with only whitespace around it; NULL otherwise. */
cJSON *degrade_parse_json_body(const char *body, size_t len)
{
    if (body == NULL || len == 0)
        return NULL;
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    if (i == len || (body[i] != '{' && body[i] != '[' && body[i] != '"' && body[i] != '-' &&
                     (body[i] < '0' || body[i] > '9') && body[i] != 't' && body[i] != 'f' && body[i] != 'n'))
        return NULL;
    if (memchr(body, '\0', len) != NULL)
        return NULL;
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (doc == NULL)
        return NULL;
    if (end != NULL) {
        size_t used = (size_t)(end - body);
        for (; used < len; used++) {
            char c = body[used];
            if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
                cJSON_Delete(doc);
                return NULL;
            }
        }
    }
    return doc;
}


/* ------------------------------------------------------------------------------------ */
/* Detection                                                                             */

static bool status_listed(const config_detect_t *detect, int status)
{
    for (size_t i = 0; i < detect->n_statuses; i++)
        if (detect->statuses[i] == status)
            return true;
    return false;
}

/* Whether a "Name: value" line with this name (any case) is among the headers. */
static bool header_present(const char *headers, size_t len, const char *name)
{
    size_t name_len = strlen(name);
    if (headers == NULL || name_len == 0)
        return false;
    size_t pos = 0;
    while (pos < len) {
        const char *line = headers + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t line_len = nl ? (size_t)(nl - line) : len - pos;
        if (line_len > name_len && line[name_len] == ':' && strncasecmp(line, name, name_len) == 0)
            return true;
        pos += line_len + 1;
    }
    return false;
}

/* The body regex over the first DEGRADE_REGEX_WINDOW bytes; false when it does not compile. */
static bool body_matches(const char *pattern, const char *body, size_t len)
{
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_ICASE | REG_NOSUB) != 0)
        return false;
    size_t n = len < DEGRADE_REGEX_WINDOW ? len : DEGRADE_REGEX_WINDOW;
    char *text = malloc(n + 1);
    bool matched = false;
    if (text != NULL) {
        if (n > 0)
            memcpy(text, body, n);
        for (size_t i = 0; i < n; i++)
            if (text[i] == '\0')
                text[i] = ' ';
        text[n] = '\0';
        matched = regexec(&re, text, 0, NULL, 0) == 0;
        free(text);
    }
    regfree(&re);
    return matched;
}

/* The JSON signal: the pointer's value equals `equals` (present at all when equals is NULL). */
static bool json_signal(const char *body, size_t len, const char *pointer, const cJSON *equals)
{
    cJSON *doc = degrade_parse_json_body(body, len);
    if (doc == NULL)
        return false;
    const cJSON *node = json_pointer_get(doc, pointer);
    bool hit = node != NULL && (equals == NULL || json_equal(node, equals));
    cJSON_Delete(doc);
    return hit;
}

bool degrade_is_oom(const config_detect_t *detect, int status, const char *headers, size_t headers_len,
                    const char *body, size_t body_len)
{
    static const config_detect_t no_rules;
    if (detect == NULL)
        detect = &no_rules;
    if (body == NULL)
        body_len = 0;
    bool has_status = detect->statuses != NULL && detect->n_statuses > 0;
    bool has_header = detect->header != NULL && detect->header[0] != '\0';
    bool has_json = detect->json_path != NULL;
    bool any_signal = has_status || has_header || has_json;

    const char *pattern = detect->body_matches;
    if (pattern == NULL && !any_signal)
        pattern = DEGRADE_DEFAULT_BODY_MATCHES;

    /* Cheap signals first. */
    bool signal;
    if (any_signal)
        signal = (has_status && status_listed(detect, status)) ||
                 (has_header && header_present(headers, headers_len, detect->header));
    else
        signal = status >= 500;

    bool json_possible = any_signal ? has_json : true;
    if (!signal && !json_possible)
        return false;
    /* The qualifier (bounded work) before the JSON signal (whole-body parse). */
    if (pattern != NULL && !body_matches(pattern, body ? body : "", body_len))
        return false;
    if (signal)
        return true;
    if (any_signal)
        return has_json && json_signal(body, body_len, detect->json_path, detect->json_equals);
    cJSON *success_false = cJSON_CreateFalse();
    if (success_false == NULL)
        return false;
    bool hit = json_signal(body, body_len, "/success", success_false);
    cJSON_Delete(success_false);
    return hit;
}

bool degrade_error_is_oom(const config_detect_t *detect, const char *text, size_t len)
{
    const char *pattern = detect != NULL ? detect->body_matches : NULL;
    if (pattern == NULL)
        pattern = DEGRADE_DEFAULT_BODY_MATCHES;
    return body_matches(pattern, text != NULL ? text : "", text != NULL ? len : 0);
}

bool degrade_head_signal(const config_detect_t *detect, int status, const char *headers, size_t headers_len)
{
    if (detect == NULL)
        return false;
    bool has_status = detect->statuses != NULL && detect->n_statuses > 0;
    bool has_header = detect->header != NULL && detect->header[0] != '\0';
    return (has_status && status_listed(detect, status)) ||
           (has_header && header_present(headers, headers_len, detect->header));
}
