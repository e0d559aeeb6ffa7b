/*
 * cli_jobs: `vramctl jobs submit|get|wait|result|cancel|list`, the client side of vramd's
 * durable jobs (POST /v1/jobs, GET /v1/jobs/{id}[/result], DELETE /v1/jobs/{id},
 * GET /v1/jobs?state=&model=&limit=&cursor=).
 *
 * wait polls GET /v1/jobs/{id} with a backoff (100 ms growing to 2 s) until the job is in a
 * final state (succeeded, failed, cancelled) or the wait's deadline passes. A connection
 * failure on the first poll is exit 3 (vramd is not there); later ones are retried until
 * the deadline, since jobs survive a restart of vramd.
 * result streams the body to stdout or a file as it arrives (no size bound here; vramd
 * bounds what it stores); a file that could not be completed is removed.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_render.h"
#include "common/buf.h"
#include "common/units.h"

#define MAX_BODY_FILE (256u << 20)
#define MAX_HEADERS 64
#define WAIT_DEFAULT_MS (10 * 60 * 1000)
#define RESULT_TIMEOUT_DEFAULT_MS (10 * 60 * 1000)
#define MAX_ID 128

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > MAX_ID)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)id[i]) && id[i] != '-' && id[i] != '_')
            return false;
    return true;
}

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool state_is_final(const char *s)
{
    return s && (strcmp(s, "succeeded") == 0 || strcmp(s, "failed") == 0 || strcmp(s, "cancelled") == 0);
}

/* A timestamp as vramd writes it (UTC "2026-11-22T09:47:07.123Z", or epoch ms or s as a
 * number) -> local time "2026-11-22 10:47:07"; other strings as they are. */
static void format_time(const cJSON *v, char *out, size_t cap)
{
    if (cJSON_IsString(v)) {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *rest = strptime(v->valuestring, "%Y-%m-%dT%H:%M:%S", &tm);
        time_t t = rest ? timegm(&tm) : (time_t)-1;
        struct tm local;
        if (t == (time_t)-1 || !localtime_r(&t, &local) || strftime(out, cap, "%Y-%m-%d %H:%M:%S", &local) == 0)
            snprintf(out, cap, "%s", v->valuestring);
        return;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble <= 0) {
        snprintf(out, cap, "-");
        return;
    }
    double secs = v->valuedouble > 1e11 ? v->valuedouble / 1000.0 : v->valuedouble;
    time_t t = (time_t)secs;
    struct tm tm;
    if (!localtime_r(&t, &tm) || strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(out, cap, "%.0f", v->valuedouble);
}

/* --- submit --------------------------------------------------------------------------- */

static char *base64_encode(const unsigned char *in, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

/* Reads a file (or stdin for "-") into b. 0, or -1 after a message. */
static int read_body_file(const char *path, buf_t *b)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "vramctl: --body %s: %s\n", path, strerror(errno));
        return -1;
    }
    char chunk[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (buf_append(b, chunk, n) != 0) {
            fprintf(stderr, "vramctl: --body %s: larger than %u MiB\n", path, MAX_BODY_FILE >> 20);
            rc = -1;
            break;
        }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "vramctl: --body %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    if (f != stdin)
        fclose(f);
    return rc;
}

static int add_header(cJSON *headers, const char *spec, const char *cmd)
{
    const char *colon = strchr(spec, ':');
    if (!colon || colon == spec)
        return cli_usage_error(cmd, "--header: expected \"Name: value\", got \"%s\"", spec);
    size_t nl = (size_t)(colon - spec);
    while (nl > 0 && isspace((unsigned char)spec[nl - 1]))
        nl--;
    const char *value = colon + 1;
    while (*value == ' ' || *value == '\t')
        value++;
    char name[256];
    if (nl == 0 || nl >= sizeof name)
        return cli_usage_error(cmd, "--header: bad header name in \"%s\"", spec);
    memcpy(name, spec, nl);
    name[nl] = '\0';
    if (cJSON_GetArraySize(headers) >= MAX_HEADERS)
        return cli_usage_error(cmd, "--header: at most %d headers", MAX_HEADERS);
    cJSON_AddStringToObject(headers, name, value);
    return CLI_OK;
}

static int wait_job(cli_opts_t *o, const char *id, uint64_t wait_ms, cJSON **final);
static int print_final(const cli_opts_t *o, const cJSON *job);
static int fetch_result(cli_opts_t *o, const char *id, const char *out_path);

typedef struct submit_args {
    const char *model, *path, *method, *body_file, *json_body, *deadline, *out;
    int priority; /* -1: the model's */
    bool wait;
    uint64_t wait_ms;
    cJSON *headers; /* --header's, added here */
} submit_args_t;

static int submit_path(void *ctx, const char *v)
{
    submit_args_t *a = ctx;
    if (v[0] != '/')
        return cli_usage_error("jobs", "--path must start with '/', got \"%s\"", v);
    a->path = v;
    return CLI_OK;
}

static int submit_header(void *ctx, const char *v)
{
    submit_args_t *a = ctx;
    return add_header(a->headers, v, "jobs");
}

static int submit_priority(void *ctx, const char *v)
{
    submit_args_t *a = ctx;
    char *end;
    long p = strtol(v, &end, 10);
    if (*end || end == v || p < 0 || p > 9)
        return cli_usage_error("jobs", "--priority: expected 0-9, got \"%s\"", v);
    a->priority = (int)p;
    return CLI_OK;
}

static int submit_deadline(void *ctx, const char *v)
{
    (void)ctx;
    uint64_t ms;
    return cli_parse_duration("jobs", "--deadline", v, &ms) != 0 ? CLI_EXIT_USAGE : CLI_OK;
}

static int submit_wait_timeout(void *ctx, const char *v)
{
    submit_args_t *a = ctx;
    return cli_parse_duration("jobs", "--wait-timeout", v, &a->wait_ms) != 0 ? CLI_EXIT_USAGE : CLI_OK;
}

static int parse_submit(cli_opts_t *o, int argc, char **argv, submit_args_t *a, cJSON *headers)
{
    const char *cmd = "jobs";
    memset(a, 0, sizeof *a);
    a->path = "/";
    a->method = "POST";
    a->priority = -1;
    a->wait_ms = WAIT_DEFAULT_MS;
    a->headers = headers;
    const cli_option_t opts[] = {
        {.name = "--path", .parse = submit_path},
        {.name = "--method", .value = &a->method},
        {.name = "--body", .value = &a->body_file},
        {.name = "--json-body", .value = &a->json_body},
        {.name = "--header", .alias = "-H", .parse = submit_header},
        {.name = "--priority", .parse = submit_priority},
        {.name = "--deadline", .value = &a->deadline, .parse = submit_deadline},
        {.name = "--wait-timeout", .flag = &a->wait, .parse = submit_wait_timeout},
        {.name = "-o", .alias = "--output", .flag = &a->wait, .value = &a->out},
        {.name = "--wait", .flag = &a->wait},
    };
    cli_command_line_t c = {.help = cmd, .what = "jobs submit", .options = opts, .n_options = sizeof opts / sizeof opts[0],
                            .ctx = a, .args = &a->model, .max_args = 1};
    int rc = cli_parse_command(o, argc, argv, &c);
    if (rc != CLI_OK)
        return rc;
    if (!a->model)
        return cli_usage_error(cmd, "jobs submit: which model? (vramctl jobs submit MODEL ...)");
    if (a->body_file && a->json_body)
        return cli_usage_error(cmd, "jobs submit: --body and --json-body together");
    return CLI_OK;
}

static int jobs_submit(cli_opts_t *o, int argc, char **argv)
{
    submit_args_t a;
    cJSON *req = cJSON_CreateObject();
    cJSON *headers = cJSON_CreateObject();
    buf_t body;
    buf_init(&body, MAX_BODY_FILE);
    char *text = NULL;
    cJSON *answer = NULL;
    cli_response_t resp = {0};
    int rc = parse_submit(o, argc, argv, &a, headers);
    if (rc)
        goto out;
    cJSON_AddStringToObject(req, "model", a.model);
    cJSON_AddStringToObject(req, "path", a.path);
    cJSON_AddStringToObject(req, "method", a.method);
    if (cJSON_GetArraySize(headers) > 0) {
        cJSON_AddItemToObject(req, "headers", headers);
        headers = NULL;
    }
    if (a.json_body) {
        cJSON *b = cJSON_Parse(a.json_body);
        if (!b) {
            rc = cli_usage_error("jobs", "--json-body: not valid JSON: %.80s", a.json_body);
            goto out;
        }
        cJSON_AddItemToObject(req, "body", b);
    } else if (a.body_file) {
        if (read_body_file(a.body_file, &body) != 0) {
            rc = CLI_EXIT_USAGE;
            goto out;
        }
        char *b64 = base64_encode((const unsigned char *)(body.data ? body.data : ""), body.len);
        if (!b64) {
            rc = CLI_EXIT_ERROR;
            goto out;
        }
        cJSON_AddStringToObject(req, "body_base64", b64);
        free(b64);
    }
    if (a.priority >= 0)
        cJSON_AddNumberToObject(req, "priority", a.priority);
    if (a.deadline)
        cJSON_AddStringToObject(req, "deadline", a.deadline);
    text = cJSON_PrintUnformatted(req);
    if (!text) {
        rc = CLI_EXIT_ERROR;
        goto out;
    }
    rc = cli_call(o, "POST", "/v1/jobs", text, &resp);
    if (rc)
        goto out;
    answer = cli_parse_json(&resp);
    const char *id = json_str(answer, "id");
    if (!id) {
        if (answer)
            fprintf(stderr, "vramctl: vramd's answer has no job id: %.200s\n", resp.body);
        rc = CLI_EXIT_ERROR;
        goto out;
    }
    if (!a.wait) {
        if (o->json)
            cli_print_json(answer);
        else
            printf("%s\n", id);
        goto out;
    }
    if (!o->json) {
        fprintf(stderr, "submitted %s; waiting\n", id);
    }
    cJSON *final = NULL;
    rc = wait_job(o, id, a.wait_ms, &final);
    if (final) {
        int state_rc = print_final(o, final);
        cJSON_Delete(final);
        if (rc == CLI_OK)
            rc = state_rc;
    }
    if (rc == CLI_OK && a.out)
        rc = fetch_result(o, id, a.out);
out:
    cli_response_free(&resp);
    cJSON_Delete(answer);
    free(text);
    buf_free(&body);
    cJSON_Delete(headers);
    cJSON_Delete(req);
    return rc;
}

/* --- get / wait ----------------------------------------------------------------------- */

static int get_job(cli_opts_t *o, const char *id, cJSON **job, bool quiet_unreachable, int *transport)
{
    char path[64 + MAX_ID];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    cli_response_t resp;
    char msg[1024];
    int rc = cli_call_quiet(o, "GET", path, &resp, msg, sizeof msg);
    *transport = rc == CLI_EXIT_UNREACHABLE;
    if (rc) {
        if (!(quiet_unreachable && rc == CLI_EXIT_UNREACHABLE))
            fprintf(stderr, "vramctl: %s\n", msg);
        return rc;
    }
    *job = cli_parse_json(&resp);
    cli_response_free(&resp);
    return *job ? CLI_OK : CLI_EXIT_ERROR;
}

static void print_job_text(const cJSON *job)
{
    char t[64];
    const cJSON *v;
    printf("id           %s\n", json_str(job, "id") ? json_str(job, "id") : "?");
    printf("model        %s\n", json_str(job, "model") ? json_str(job, "model") : "?");
    printf("state        %s\n", json_str(job, "state") ? json_str(job, "state") : "?");
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "priority")))
        printf("priority     %d\n", v->valueint);
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(job, "max_attempts");
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "attempts"))) {
        if (cJSON_IsNumber(max))
            printf("attempts     %d of %d\n", v->valueint, max->valueint);
        else
            printf("attempts     %d\n", v->valueint);
    }
    static const char *const times[][2] = {{"created_at", "created"}, {"started_at", "started"},
                                           {"finished_at", "finished"}};
    for (size_t i = 0; i < 3; i++) {
        format_time(cJSON_GetObjectItemCaseSensitive(job, times[i][0]), t, sizeof t);
        printf("%-12s %s\n", times[i][1], t);
    }
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "gpu")))
        printf("gpu          %d\n", v->valueint);
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "degrade_level")) && v->valueint > 0)
        printf("degraded     level %d\n", v->valueint);
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "http_status")))
        printf("http status  %d\n", v->valueint);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(job, "result");
    if (cJSON_IsObject(res)) {
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(res, "bytes");
        char size[32] = "?";
        if (cJSON_IsNumber(bytes))
            cli_format_bytes((uint64_t)bytes->valuedouble, size, sizeof size);
        printf("result       %s, %s (vramctl jobs result %s)\n",
               json_str(res, "content_type") ? json_str(res, "content_type") : "?", size,
               json_str(job, "id") ? json_str(job, "id") : "ID");
    }
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(job, "error");
    if (cJSON_IsObject(err))
        printf("error        %s: %s\n", json_str(err, "code") ? json_str(err, "code") : "?",
               json_str(err, "message") ? json_str(err, "message") : "");
}

/* Exit code of a final job, after printing it (JSON or one line). */
static int print_final(const cli_opts_t *o, const cJSON *job)
{
    const char *state = json_str(job, "state");
    const char *id = json_str(job, "id");
    bool ok = state && strcmp(state, "succeeded") == 0;
    if (o->json) {
        cli_print_json(job);
    } else {
        printf("%s %s", id ? id : "?", state ? state : "?");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(job, "http_status");
        if (cJSON_IsNumber(v))
            printf(" (http %d)", v->valueint);
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(job, "error");
        if (cJSON_IsObject(err))
            printf(": %s: %s", json_str(err, "code") ? json_str(err, "code") : "?",
                   json_str(err, "message") ? json_str(err, "message") : "");
        printf("\n");
    }
    return ok ? CLI_OK : CLI_EXIT_JOB_FAILED;
}

/* Polls until the job is final (*final set; CLI_OK) or the wait ends (an exit code). */
static int wait_job(cli_opts_t *o, const char *id, uint64_t wait_ms, cJSON **final)
{
    *final = NULL;
    uint64_t deadline = mono_ms() + wait_ms;
    uint64_t pause = 100;
    bool reached = false;
    for (;;) {
        cJSON *job = NULL;
        int transport = 0;
        int rc = get_job(o, id, &job, reached, &transport);
        if (rc && !(transport && reached))
            return rc;
        if (rc == CLI_OK) {
            reached = true;
            if (state_is_final(json_str(job, "state"))) {
                *final = job;
                return CLI_OK;
            }
            cJSON_Delete(job);
        }
        uint64_t now = mono_ms();
        if (now >= deadline) {
            char d[32];
            units_format_duration(wait_ms, d, sizeof d);
            fprintf(stderr, "vramctl: job %s is not done after %s\n", id, d);
            return CLI_EXIT_TIMEOUT;
        }
        sleep_ms(pause < deadline - now ? pause : deadline - now);
        pause = pause * 3 / 2 > 2000 ? 2000 : pause * 3 / 2;
    }
}

static int id_timeout(void *ctx, const char *v)
{
    return cli_parse_duration("jobs", "--timeout", v, ctx) != 0 ? CLI_EXIT_USAGE : CLI_OK;
}

/* jobs get|wait|result|cancel ID; wait_ms (wait's --timeout, before the global one) and
 * out_path (-o) when the subcommand takes them. */
static int one_id(cli_opts_t *o, int argc, char **argv, const char **id, const char *sub, uint64_t *wait_ms,
                  const char **out_path)
{
    *id = NULL;
    cli_option_t opts[2];
    size_t n = 0;
    if (wait_ms)
        opts[n++] = (cli_option_t){.name = "--timeout", .parse = id_timeout};
    if (out_path)
        opts[n++] = (cli_option_t){.name = "-o", .alias = "--output", .value = out_path};
    char what[32];
    snprintf(what, sizeof what, "jobs %s", sub);
    cli_command_line_t c = {.help = "jobs", .what = what, .options = opts, .n_options = n, .ctx = wait_ms,
                            .args = id, .max_args = 1};
    int rc = cli_parse_command(o, argc, argv, &c);
    if (rc != CLI_OK)
        return rc;
    if (!*id)
        return cli_usage_error("jobs", "jobs %s: which job? (vramctl jobs %s ID)", sub, sub);
    if (!id_ok(*id))
        return cli_usage_error("jobs", "jobs %s: \"%.80s\" is not a job id", sub, *id);
    return CLI_OK;
}

static int jobs_get(cli_opts_t *o, int argc, char **argv)
{
    const char *id;
    int rc = one_id(o, argc, argv, &id, "get", NULL, NULL);
    if (rc)
        return rc;
    cJSON *job = NULL;
    int transport;
    rc = get_job(o, id, &job, false, &transport);
    if (rc)
        return rc;
    if (o->json)
        cli_print_json(job);
    else
        print_job_text(job);
    cJSON_Delete(job);
    return CLI_OK;
}

static int jobs_wait(cli_opts_t *o, int argc, char **argv)
{
    const char *id;
    uint64_t wait_ms = WAIT_DEFAULT_MS;
    int rc = one_id(o, argc, argv, &id, "wait", &wait_ms, NULL);
    if (rc)
        return rc;
    cJSON *final = NULL;
    rc = wait_job(o, id, wait_ms, &final);
    if (rc)
        return rc;
    rc = print_final(o, final);
    cJSON_Delete(final);
    return rc;
}

/* --- result / cancel / list ----------------------------------------------------------- */

static int fetch_result(cli_opts_t *o, const char *id, const char *out_path)
{
    char path[64 + MAX_ID];
    snprintf(path, sizeof path, "/v1/jobs/%s/result", id);
    bool to_stdout = !out_path || strcmp(out_path, "-") == 0;
    FILE *f = to_stdout ? stdout : fopen(out_path, "wb");
    if (!f) {
        fprintf(stderr, "vramctl: -o %s: %s\n", out_path, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    if (!o->timeout_set)
        o->timeout_ms = RESULT_TIMEOUT_DEFAULT_MS;
    cli_response_t resp;
    bool json = o->json;
    o->json = false; /* the result is the worker's bytes; errors are reported as text */
    int rc = cli_call_to(o, "GET", path, f, &resp);
    o->json = json;
    cli_response_free(&resp);
    if (to_stdout) {
        if (fflush(stdout) != 0 && rc == CLI_OK) {
            fprintf(stderr, "vramctl: writing the result: %s\n", strerror(errno));
            rc = CLI_EXIT_ERROR;
        }
        return rc;
    }
    if (fclose(f) != 0 && rc == CLI_OK) {
        fprintf(stderr, "vramctl: -o %s: %s\n", out_path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    if (rc != CLI_OK)
        unlink(out_path);
    return rc;
}

static int jobs_result(cli_opts_t *o, int argc, char **argv)
{
    const char *id;
    const char *out_path = NULL;
    int rc = one_id(o, argc, argv, &id, "result", NULL, &out_path);
    if (rc)
        return rc;
    return fetch_result(o, id, out_path);
}

static int jobs_cancel(cli_opts_t *o, int argc, char **argv)
{
    const char *id;
    int rc = one_id(o, argc, argv, &id, "cancel", NULL, NULL);
    if (rc)
        return rc;
    char path[64 + MAX_ID];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    cli_response_t resp;
    rc = cli_call(o, "DELETE", path, NULL, &resp);
    if (rc)
        return rc;
    if (o->json) {
        cli_print_body_json(&resp);
    } else {
        cJSON *j = resp.body ? cJSON_ParseWithLength(resp.body, resp.body_len) : NULL;
        const char *state = json_str(j, "state");
        const char *was = json_str(j, "was");
        printf("%s %s", id, state ? state : "cancelled");
        if (was)
            printf(" (was %s)", was);
        printf("\n");
        cJSON_Delete(j);
    }
    cli_response_free(&resp);
    return CLI_OK;
}

static int jobs_list(cli_opts_t *o, int argc, char **argv)
{
    const char *state = NULL, *model = NULL, *limit = NULL, *cursor = NULL;
    const cli_option_t opts[] = {
        {.name = "--state", .value = &state},
        {.name = "--model", .value = &model},
        {.name = "--limit", .value = &limit},
        {.name = "--cursor", .value = &cursor},
    };
    cli_command_line_t c = {.help = "jobs", .what = "jobs list", .options = opts, .n_options = sizeof opts / sizeof opts[0]};
    int rc = cli_parse_command(o, argc, argv, &c);
    if (rc != CLI_OK)
        return rc;
    if (state && !state_is_final(state) && strcmp(state, "queued") != 0 && strcmp(state, "running") != 0)
        return cli_usage_error("jobs", "--state: one of queued, running, succeeded, failed, cancelled");
    if (limit) {
        char *end;
        long n = strtol(limit, &end, 10);
        if (*end || end == limit || n < 1 || n > 100000)
            return cli_usage_error("jobs", "--limit: expected a positive number, got \"%s\"", limit);
    }
    char path[2048] = "/v1/jobs";
    const char *keys[] = {"state", "model", "limit", "cursor"};
    const char *vals[] = {state, model, limit, cursor};
    char sep = '?';
    for (size_t k = 0; k < 4; k++) {
        if (!vals[k])
            continue;
        char esc[512];
        if (cli_url_escape(vals[k], esc, sizeof esc) != 0)
            return cli_usage_error("jobs", "--%s: too long", keys[k]);
        size_t len = strlen(path);
        snprintf(path + len, sizeof path - len, "%c%s=%s", sep, keys[k], esc);
        sep = '&';
    }
    cJSON *j;
    rc = cli_call_json(o, "GET", path, NULL, &j);
    if (rc)
        return rc;
    if (o->json) {
        cli_print_json(j);
        cJSON_Delete(j);
        return CLI_OK;
    }
    const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(j, "jobs");
    if (cJSON_GetArraySize(jobs) == 0) {
        printf("no jobs\n");
    } else {
        cli_table_t t;
        cli_table_init(&t, 8);
        static const char *const head[] = {"ID", "MODEL", "STATE", "PRIO", "ATTEMPTS", "CREATED", "FINISHED", "HTTP"};
        cli_table_add(&t, head);
        const cJSON *job;
        cJSON_ArrayForEach(job, jobs) {
            char prio[16] = "", attempts[32] = "", created[64], finished[64], http[16] = "";
            const cJSON *v;
            if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "priority")))
                snprintf(prio, sizeof prio, "%d", v->valueint);
            if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "attempts")))
                snprintf(attempts, sizeof attempts, "%d", v->valueint);
            if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(job, "http_status")))
                snprintf(http, sizeof http, "%d", v->valueint);
            format_time(cJSON_GetObjectItemCaseSensitive(job, "created_at"), created, sizeof created);
            format_time(cJSON_GetObjectItemCaseSensitive(job, "finished_at"), finished, sizeof finished);
            const char *row[] = {json_str(job, "id"), json_str(job, "model"), json_str(job, "state"), prio,
                                 attempts, created, finished, http};
            cli_table_add(&t, row);
        }
        buf_t out;
        buf_init(&out, 64u << 20);
        cli_table_render(&out, &t, "", o->color);
        fwrite(out.data, 1, out.len, stdout);
        buf_free(&out);
        cli_table_free(&t);
    }
    const char *next = json_str(j, "next_cursor");
    if (next)
        printf("more: vramctl jobs list --cursor %s\n", next);
    cJSON_Delete(j);
    return CLI_OK;
}

int cli_cmd_jobs(cli_opts_t *o, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(cli_opts_t *o, int argc, char **argv);
    } subs[] = {
        {"submit", jobs_submit}, {"get", jobs_get},       {"wait", jobs_wait},
        {"result", jobs_result}, {"cancel", jobs_cancel}, {"list", jobs_list},
    };
    int i = 1;
    /* global options may come before the subcommand */
    for (; i < argc && argv[i][0] == '-'; i++) {
        int g = cli_global_option(o, argc, argv, &i);
        if (g < 0)
            return CLI_EXIT_USAGE;
        if (g == 0)
            return cli_usage_error("jobs", "jobs: unknown option %s", argv[i]);
    }
    if (i >= argc)
        return cli_usage_error("jobs", "jobs: which subcommand? (submit, get, wait, result, cancel, list)");
    for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++)
        if (strcmp(subs[k].name, argv[i]) == 0)
            return subs[k].run(o, argc - i, argv + i);
    return cli_usage_error("jobs", "jobs: unknown subcommand \"%s\"", argv[i]);
}
