/*
 * cli_call: one request from a vramctl command to vramd, and how its outcome is reported
 * (the "cannot connect" message and exit 3, vramd's error JSON and exit 1), plus JSON
 * printing shared by the commands. See cli.h.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_http.h"

/* The error message goes to msg when given, else to stderr (with "vramctl: " before it). */
static int call(const cli_opts_t *o, const char *method, const char *path, const char *json_body, FILE *sink,
                cli_response_t *resp, char *msg, size_t msgcap)
{
    cli_url_t url;
    char err[512];
    char text[1024];
    int rc;
    memset(resp, 0, sizeof *resp);
    if (cli_url_parse(o->url, &url, err, sizeof err) != 0) {
        snprintf(text, sizeof text, "--url: %s", err);
        rc = CLI_EXIT_USAGE;
        goto report;
    }
    cli_http_request_t req = {
        .method = method,
        .path = path,
        .token = o->token,
        .content_type = json_body ? "application/json" : NULL,
        .body = json_body,
        .body_len = json_body ? strlen(json_body) : 0,
        .timeout_ms = o->timeout_ms,
    };
    bool connected = false;
    if (cli_http_exchange(&url, &req, sink, resp, &connected, err, sizeof err) != 0) {
        if (!connected)
            snprintf(text, sizeof text, "cannot connect to vramd at %s: %s \xe2\x80\x94 is vramd running? "
                                        "(set --url or VRAMD_URL)", o->url, err);
        else
            snprintf(text, sizeof text, "no usable answer from vramd at %s: %s", o->url, err);
        rc = CLI_EXIT_UNREACHABLE;
        goto report;
    }
    if (resp->status >= 200 && resp->status < 300)
        return CLI_OK;

    cJSON *j = resp->body ? cJSON_ParseWithLength(resp->body, resp->body_len) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
    const cJSON *message = cJSON_GetObjectItemCaseSensitive(e, "message");
    const cJSON *retry = cJSON_GetObjectItemCaseSensitive(e, "retry_after_s");
    if (cJSON_IsString(code)) {
        char after[48] = "";
        if (cJSON_IsNumber(retry))
            snprintf(after, sizeof after, " (retry after %ds)", retry->valueint);
        snprintf(text, sizeof text, "vramd answered %d %s: %s%s", resp->status, code->valuestring,
                 cJSON_IsString(message) ? message->valuestring : "(no message)", after);
    } else if (resp->body) {
        snprintf(text, sizeof text, "vramd answered %d: %.200s", resp->status, resp->body);
    } else {
        snprintf(text, sizeof text, "vramd answered %d", resp->status);
    }
    if (o->json && j)
        cli_print_json(j);
    cJSON_Delete(j);
    rc = CLI_EXIT_ERROR;
report:
    cli_response_free(resp);
    if (msg)
        snprintf(msg, msgcap, "%s", text);
    else
        fprintf(stderr, "vramctl: %s\n", text);
    return rc;
}

int cli_call(const cli_opts_t *o, const char *method, const char *path, const char *json_body, cli_response_t *resp)
{
    return call(o, method, path, json_body, NULL, resp, NULL, 0);
}

int cli_call_to(const cli_opts_t *o, const char *method, const char *path, FILE *sink, cli_response_t *resp)
{
    return call(o, method, path, NULL, sink, resp, NULL, 0);
}

int cli_call_quiet(const cli_opts_t *o, const char *method, const char *path, cli_response_t *resp, char *msg,
                   size_t msgcap)
{
    return call(o, method, path, NULL, NULL, resp, msg, msgcap);
}

int cli_call_json(const cli_opts_t *o, const char *method, const char *path, const char *json_body, cJSON **doc)
{
    cli_response_t resp;
    *doc = NULL;
    int rc = call(o, method, path, json_body, NULL, &resp, NULL, 0);
    if (rc)
        return rc;
    *doc = cli_parse_json(&resp);
    cli_response_free(&resp);
    return *doc ? CLI_OK : CLI_EXIT_ERROR;
}

void cli_response_free(cli_response_t *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
}

cJSON *cli_parse_json(const cli_response_t *r)
{
    cJSON *j = r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL;
    if (!j)
        fprintf(stderr, "vramctl: vramd's answer is not JSON: %.200s\n", r->body ? r->body : "");
    return j;
}

void cli_print_json(const cJSON *j)
{
    char *s = cJSON_Print(j);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
}

void cli_print_body_json(const cli_response_t *r)
{
    cJSON *j = r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL;
    if (j) {
        cli_print_json(j);
        cJSON_Delete(j);
    } else if (r->body) {
        fwrite(r->body, 1, r->body_len, stdout);
        if (r->body_len == 0 || r->body[r->body_len - 1] != '\n')
            fputc('\n', stdout);
    }
}
