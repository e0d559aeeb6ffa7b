/*
 * cli_admin: vramctl's admin commands (load, unload, pin, unpin, restart, drain, reload; they
 * send the bearer token) and check-config (local, no daemon). Each prints one line, or vramd's answer with
 * --json. See cli.h for the exit codes.
 */
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "cli/cli_http.h"
#include "config/config.h"

#define ADMIN_WAIT_DEFAULT_MS (5 * 60 * 1000)
#define DRAIN_WAIT_DEFAULT_MS (2 * 60 * 1000)

/* Parses argv[1..]: global options, at most one boolean flag (flag, NULL for none, into
 * *flag_set), and up to max_pos positional arguments into pos[]. Returns 0 or a usage exit
 * code. */
static int parse_args(cli_opts_t *o, int argc, char **argv, const char **pos, size_t max_pos, size_t *n_pos,
                      const char *flag, bool *flag_set)
{
    const cli_option_t opts[] = {{.name = flag, .flag = flag_set}};
    cli_command_line_t c = {.help = argv[0], .what = argv[0], .options = opts, .n_options = flag ? 1 : 0,
                            .args = pos, .max_args = max_pos};
    int rc = cli_parse_command(o, argc, argv, &c);
    *n_pos = c.n_args;
    return rc;
}

/* "MODEL: STATE (N instances)", and for pin, unpin and restart what became of it. */
static void print_model_line(const cJSON *j, const char *command, const char *asked)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(j, "state");
    const cJSON *inst = cJSON_GetObjectItemCaseSensitive(j, "instances");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(j, "pinned_by");
    int n = cJSON_IsNumber(inst) ? inst->valueint : 0;
    char tail[96] = "";
    if (strcmp(command, "pin") == 0 || strcmp(command, "unpin") == 0)
        snprintf(tail, sizeof tail, ", %s%s", cJSON_IsString(by) ? "pinned by " : "not pinned",
                 cJSON_IsString(by) ? by->valuestring : "");
    else if (strcmp(command, "restart") == 0)
        snprintf(tail, sizeof tail, ", restarted");
    printf("%s: %s (%d instance%s)%s\n", cJSON_IsString(model) ? model->valuestring : asked,
           cJSON_IsString(state) ? state->valuestring : "?", n, n == 1 ? "" : "s", tail);
}

int cli_cmd_model_admin(cli_opts_t *o, int argc, char **argv)
{
    const char *pos[1];
    size_t n_pos;
    int rc = parse_args(o, argc, argv, pos, 1, &n_pos, NULL, NULL);
    if (rc)
        return rc;
    if (n_pos != 1)
        return cli_usage_error(argv[0], "%s: which model? (vramctl %s MODEL)", argv[0], argv[0]);
    char name[512], path[600];
    if (pos[0][0] == '\0' || cli_url_escape(pos[0], name, sizeof name) != 0)
        return cli_usage_error(argv[0], "%s: bad model name", argv[0]);
    snprintf(path, sizeof path, "/v1/models/%s/%s", name, argv[0]);
    if (!o->timeout_set)
        o->timeout_ms = ADMIN_WAIT_DEFAULT_MS;
    cJSON *j;
    rc = cli_call_json(o, "POST", path, NULL, &j);
    if (rc)
        return rc;
    if (o->json)
        cli_print_json(j);
    else
        print_model_line(j, argv[0], pos[0]);
    cJSON_Delete(j);
    return CLI_OK;
}

/* True while vramd still accepts connections at o->url. */
static bool still_answering(const cli_opts_t *o)
{
    cli_url_t url;
    char err[256];
    if (cli_url_parse(o->url, &url, err, sizeof err) != 0)
        return false;
    cli_http_request_t req = {.method = "GET", .path = "/healthz", .timeout_ms = 2000};
    cli_response_t resp;
    bool connected = false;
    int rc = cli_http_exchange(&url, &req, NULL, &resp, &connected, err, sizeof err);
    if (rc == 0)
        cli_response_free(&resp);
    return connected;
}

int cli_cmd_drain(cli_opts_t *o, int argc, char **argv)
{
    bool wait = false;
    size_t n_pos;
    int rc = parse_args(o, argc, argv, NULL, 0, &n_pos, "--wait", &wait);
    if (rc)
        return rc;
    uint64_t wait_ms = o->timeout_set ? o->timeout_ms : DRAIN_WAIT_DEFAULT_MS;
    cli_response_t resp;
    rc = cli_call(o, "POST", "/v1/admin/drain", NULL, &resp);
    if (rc)
        return rc;
    if (o->json)
        cli_print_body_json(&resp);
    else
        printf("vramd at %s is draining: no new requests; it exits once the ones in flight are done\n", o->url);
    cli_response_free(&resp);
    if (!wait)
        return CLI_OK;
    fflush(stdout);
    struct timespec start, now, pause = {.tv_sec = 0, .tv_nsec = 200 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (!still_answering(o)) {
            if (!o->json)
                printf("vramd has exited\n");
            return CLI_OK;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t elapsed = (uint64_t)(now.tv_sec - start.tv_sec) * 1000 +
                           (uint64_t)((now.tv_nsec - start.tv_nsec) / 1000000);
        if (elapsed >= wait_ms) {
            fprintf(stderr, "vramctl: vramd at %s is still running after the wait (--timeout)\n", o->url);
            return CLI_EXIT_TIMEOUT;
        }
        nanosleep(&pause, NULL);
    }
}

int cli_cmd_reload(cli_opts_t *o, int argc, char **argv)
{
    size_t n_pos;
    int rc = parse_args(o, argc, argv, NULL, 0, &n_pos, NULL, NULL);
    if (rc)
        return rc;
    cli_response_t resp;
    rc = cli_call(o, "POST", "/v1/admin/reload", NULL, &resp);
    if (rc)
        return rc;
    if (o->json) {
        cli_print_body_json(&resp);
        cli_response_free(&resp);
        return CLI_OK;
    }
    printf("vramd at %s reloaded its config\n", o->url);
    /* models that stay failed (their config did not change): say so, and what retries them */
    cJSON *body = resp.body ? cJSON_Parse(resp.body) : NULL;
    const cJSON *failed = cJSON_GetObjectItemCaseSensitive(body, "failed");
    const cJSON *f;
    cJSON_ArrayForEach(f, failed) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "model");
        const cJSON *reason = cJSON_GetObjectItemCaseSensitive(f, "reason");
        const cJSON *retry = cJSON_GetObjectItemCaseSensitive(f, "failed_retry");
        printf("%s stays failed: %s\n  retry: %s\n", cJSON_IsString(name) ? name->valuestring : "?",
               cJSON_IsString(reason) ? reason->valuestring : "?",
               cJSON_IsString(retry) ? retry->valuestring : "vramctl load MODEL");
    }
    cJSON_Delete(body);
    cli_response_free(&resp);
    return CLI_OK;
}

int cli_cmd_check_config(cli_opts_t *o, int argc, char **argv)
{
    const char *pos[1];
    bool strict = false;
    size_t n_pos;
    int rc = parse_args(o, argc, argv, pos, 1, &n_pos, "--strict", &strict);
    if (rc)
        return rc;
    if (n_pos != 1)
        return cli_usage_error(argv[0], "check-config: which file? (vramctl check-config [--strict] FILE)");
    char err[CONFIG_ERR_MAX];
    config_t *c = config_load(pos[0], err, sizeof err);
    bool refused = c != NULL && strict && c->n_warnings > 0;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "file", pos[0]);
        cJSON_AddBoolToObject(j, "ok", c != NULL && !refused);
        if (c)
            cJSON_AddNumberToObject(j, "models", (double)c->n_models);
        else
            cJSON_AddStringToObject(j, "error", err);
        if (c && c->n_alias_ofs > 0) /* entries that name models (alias_of), not counted in models */
            cJSON_AddNumberToObject(j, "alias_of_entries", (double)c->n_alias_ofs);
        if (c && c->n_warnings > 0) {
            cJSON *list = cJSON_AddArrayToObject(j, "warnings");
            for (size_t w = 0; list && w < c->n_warnings; w++) {
                cJSON *item = cJSON_CreateObject();
                cJSON_AddStringToObject(item, "at", c->warnings[w].where);
                cJSON_AddStringToObject(item, "key", c->warnings[w].key);
                if (c->warnings[w].model)
                    cJSON_AddStringToObject(item, "model", c->warnings[w].model);
                cJSON_AddStringToObject(item, "message", c->warnings[w].message);
                cJSON_AddItemToArray(list, item);
            }
        }
        cli_print_json(j);
        cJSON_Delete(j);
    }
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return CLI_EXIT_ERROR;
    }
    for (size_t w = 0; !o->json && w < c->n_warnings; w++)
        fprintf(stderr, "%s\n", c->warnings[w].text);
    if (refused && !o->json)
        fprintf(stderr, "%s: %zu warning%s (--strict makes warnings errors)\n", pos[0], c->n_warnings,
                c->n_warnings == 1 ? "" : "s");
    else if (!o->json) {
        char summary[96];
        config_summary(c, summary, sizeof summary);
        printf("%s: ok (%s)\n", pos[0], summary);
    }
    config_unref(c);
    return refused ? CLI_EXIT_ERROR : CLI_OK;
}
