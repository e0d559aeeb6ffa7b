/*
 * fuzz_degrade: libFuzzer entry for OOM detection and request rewriting (src/quality/degrade_detect.c, degrade_rewrite.c).
 *
 * Input layout: the first line (up to the first '\n', at most 4 KiB) is the `set` patch as
 * JSON; when it is not a JSON object a fixed set is used instead (steps, pipeline_type, a
 * null, a key that needs encoding). Everything after that line is the body. The first
 * input byte also picks the status (200, 500, 503 or 507) given to detection.
 *
 * For each input it:
 *   1. runs degrade_rewrite with the set under JSON, form-urlencoded, multipart (two fixed
 *      boundaries, plus the body's own first line when it starts with "--"), an unknown
 *      type and no type, and checks the return convention (0 with a buffer / -1 with no
 *      buffer and a reason), the growth bound of form/multipart outputs, and that a rewrite
 *      is idempotent (rewriting the output again gives the same bytes);
 *   2. runs the same with an empty set: a form or multipart body comes back byte for byte;
 *   3. runs degrade_is_oom over the body (and the body as the header block) under fixed
 *      detect configs: defaults, a status list, a status list + regex, the json rule, the
 *      header rule and the SPEC example; a status-only rule must answer exactly "status is
 *      listed", and the defaults never call a 2xx/4xx non-JSON answer an OOM;
 *   4. reads the body as an OOM message (oom_message_need): a need only where the text says
 *      "Tried to allocate".
 * Any broken promise aborts. No global state: the same input always does the same work.
 * Replayed over tests/fuzz/corpus/degrade by replay_main.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quality/degrade.h"
#include "quality/oom_message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SET_LINE_MAX 4096
#define GROWTH_BOUND ((size_t)1 << 20)

static const char *default_set = "{\"steps\": 12, \"pipeline_type\": \"512\", \"seed\": null, \"a b&c\": \"x=y%z \\u00e9\"}";

static void check(bool ok)
{
    if (!ok)
        abort();
}

/* Rewrites, checks the return convention; returns the output (or NULL on a refusal). */
static char *rewrite_checked(const cJSON *set, const char *ct, const char *body, size_t len, size_t *out_len)
{
    char *out = (char *)"sentinel";
    char why[200];
    why[0] = '\0';
    *out_len = 12345;
    int rc = degrade_rewrite(set, ct, body, len, &out, out_len, why, sizeof why);
    check(rc == 0 || rc == -1);
    if (rc == -1) {
        check(out == NULL && *out_len == 0 && why[0] != '\0' && strlen(why) < sizeof why);
        return NULL;
    }
    check(out != NULL);
    return out;
}

static bool is_form_or_multipart(const char *ct)
{
    return ct != NULL && (strncmp(ct, "application/x-www-form-urlencoded", 33) == 0 || strncmp(ct, "multipart/", 10) == 0);
}

static void run_rewrites(const cJSON *set, const cJSON *empty, const char *ct, const char *body, size_t len)
{
    size_t out_len;
    char *out = rewrite_checked(set, ct, body, len, &out_len);
    if (out != NULL) {
        if (is_form_or_multipart(ct))
            check(out_len <= len + GROWTH_BOUND);
        size_t again_len;
        char *again = rewrite_checked(set, ct, out, out_len, &again_len);
        check(again != NULL && again_len == out_len && memcmp(again, out, out_len) == 0);
        free(again);
        free(out);
    }
    if (is_form_or_multipart(ct)) {
        char *same = rewrite_checked(empty, ct, body, len, &out_len);
        if (same != NULL) {
            check(out_len == len && (len == 0 || memcmp(same, body, len) == 0));
            free(same);
        } else {
            check(strncmp(ct, "multipart/", 10) == 0); /* a form body is always rewritable */
        }
    }
}

/* "multipart/form-data; boundary="..."" from the body's first line when it starts with "--". */
static bool boundary_from_body(const char *body, size_t len, char *ct, size_t cap)
{
    if (len < 3 || body[0] != '-' || body[1] != '-')
        return false;
    size_t n = 0;
    int w = snprintf(ct, cap, "multipart/form-data; boundary=\"");
    size_t pos = (size_t)w;
    for (size_t i = 2; i < len && n < 70 && body[i] != '\r' && body[i] != '\n' && body[i] != '\0'; i++, n++) {
        if (pos + 3 >= cap)
            return false;
        if (body[i] == '"' || body[i] == '\\')
            ct[pos++] = '\\';
        ct[pos++] = body[i];
    }
    if (n == 0 || pos + 2 > cap)
        return false;
    ct[pos++] = '"';
    ct[pos] = '\0';
    return true;
}

static void run_detection(int status, const char *body, size_t len)
{
    int statuses[] = {500, 507};
    cJSON *f = cJSON_CreateFalse();
    check(f != NULL);
    config_detect_t defaults = {0};
    config_detect_t status_only = {.statuses = statuses, .n_statuses = 2};
    config_detect_t status_regex = {.statuses = statuses, .n_statuses = 2, .body_matches = (char *)"out of (gpu )?memory|oom"};
    config_detect_t json_rule = {.json_path = (char *)"/success", .json_equals = f};
    config_detect_t header_rule = {.header = (char *)"X-Generation-Error", .body_matches = (char *)"memory"};
    config_detect_t spec = {.statuses = statuses,
                            .n_statuses = 2,
                            .body_matches = (char *)"out of memory",
                            .json_path = (char *)"/success",
                            .json_equals = f};
    const config_detect_t *all[] = {&defaults, &status_only, &status_regex, &json_rule, &header_rule, &spec, NULL};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        bool a = degrade_is_oom(all[i], status, body, len, body, len);
        bool b = degrade_is_oom(all[i], status, NULL, 0, body, len);
        check(a == degrade_is_oom(all[i], status, body, len, body, len)); /* no hidden state */
        if (all[i] != &header_rule)
            check(a == b); /* headers matter to the header rule only */
    }
    bool listed = status == 500 || status == 507;
    check(degrade_is_oom(&status_only, status, body, len, body, len) == listed);
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    bool maybe_json = i < len && (body[i] == '{' || body[i] == '[');
    if (status < 500 && !maybe_json)
        check(!degrade_is_oom(&defaults, status, body, len, body, len));
    cJSON_Delete(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *input = (const char *)data;
    const char *nl = size ? memchr(input, '\n', size < SET_LINE_MAX ? size : SET_LINE_MAX) : NULL;
    size_t set_len = nl ? (size_t)(nl - input) : 0;
    const char *body = nl ? nl + 1 : input;
    size_t body_len = nl ? size - set_len - 1 : size;

    cJSON *set = set_len ? cJSON_ParseWithLength(input, set_len) : NULL;
    if (!cJSON_IsObject(set)) {
        cJSON_Delete(set);
        set = cJSON_Parse(default_set);
    }
    cJSON *empty = cJSON_CreateObject();
    check(set != NULL && empty != NULL);

    static const char *const types[] = {
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=B",
        "multipart/form-data; boundary=\"----WebKitFormBoundary7MA4YWxkTrZu0gW\"",
        "text/plain",
        NULL,
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        run_rewrites(set, empty, types[i], body, body_len);
    char own[200];
    if (boundary_from_body(body, body_len, own, sizeof own))
        run_rewrites(set, empty, own, body, body_len);

    static const int statuses[] = {200, 500, 503, 507};
    run_detection(statuses[size ? data[0] % 4 : 0], body, body_len);
    /* what an OOM answer says the process needed: only ever from "Tried to allocate" */
    uint64_t need = oom_message_need(body, body_len);
    check(need == 0 || memmem(body, body_len, "Tried to allocate ", 18) != NULL);

    cJSON_Delete(empty);
    cJSON_Delete(set);
    return 0;
}
