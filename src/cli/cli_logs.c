/*
 * cli_logs: `vramctl logs MODEL [-n N] [-f [--for D]] [--timestamps]`, a model's recent
 * worker output from GET /v1/models/MODEL/logs (admin token when vramd has one).
 *
 * Prints the lines as the worker wrote them, one per line (--timestamps: the UTC time and
 * the stream before each; --json: each answer's document). -f follows: it polls every
 * second with the cursor of the last answer (after=SEQ), so each line is printed once; a
 * gap the ring's bound caused is reported on stderr. Following ends on Ctrl-C/SIGTERM
 * (exit 0), after --for D, or when vramd cannot be reached (exit 3).
 * Invariants: one request in flight; memory per poll bounded by the answer.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

#define LOGS_POLL_MS 1000
#define LOGS_MAX_LINES 100000

typedef struct logs_args {
    const char *model;
    long lines;
    bool follow, timestamps;
    uint64_t for_ms; /* 0: until stopped */
} logs_args_t;

static int logs_lines(void *ctx, const char *v)
{
    logs_args_t *la = ctx;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v || n < 1 || n > LOGS_MAX_LINES)
        return cli_usage_error("logs", "logs: -n: expected a number of lines 1-%d, got \"%s\"", LOGS_MAX_LINES, v);
    la->lines = n;
    return CLI_OK;
}

static int logs_for(void *ctx, const char *v)
{
    logs_args_t *la = ctx;
    return cli_parse_duration("logs", "--for", v, &la->for_ms) != 0 ? CLI_EXIT_USAGE : CLI_OK;
}

static int parse_logs_args(cli_opts_t *o, int argc, char **argv, logs_args_t *la)
{
    memset(la, 0, sizeof *la);
    la->lines = 100;
    const cli_option_t opts[] = {
        {.name = "-n", .alias = "--lines", .parse = logs_lines},
        {.name = "--for", .parse = logs_for},
        {.name = "-f", .alias = "--follow", .flag = &la->follow},
        {.name = "--timestamps", .alias = "-t", .flag = &la->timestamps},
    };
    cli_command_line_t c = {.help = argv[0], .what = "logs", .options = opts, .n_options = sizeof opts / sizeof opts[0],
                            .ctx = la, .args = &la->model, .max_args = 1};
    int rc = cli_parse_command(o, argc, argv, &c);
    if (rc != CLI_OK)
        return rc;
    if (!la->model || !la->model[0])
        return cli_usage_error(argv[0], "logs: which model? (vramctl logs MODEL)");
    if (la->for_ms && !la->follow)
        return cli_usage_error(argv[0], "logs: --for goes with -f");
    return CLI_OK;
}

static void print_line(const cJSON *l, bool timestamps)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(l, "line");
    if (!cJSON_IsString(text))
        return;
    if (timestamps) {
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(l, "ts_ms");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(l, "stream");
        double ms = cJSON_IsNumber(ts) ? ts->valuedouble : 0;
        time_t secs = (time_t)(ms / 1000);
        struct tm tm;
        char when[32] = "?";
        if (gmtime_r(&secs, &tm))
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        printf("%s.%03dZ %s ", when, (int)((uint64_t)ms % 1000), cJSON_IsString(st) ? st->valuestring : "?");
    }
    printf("%s\n", text->valuestring);
}

/* One GET; prints what came and moves *cursor. *have_cursor: a cursor was given (after=). */
static int fetch_once(cli_opts_t *o, const logs_args_t *la, const char *name, uint64_t *cursor, bool *have_cursor)
{
    char path[700];
    if (*have_cursor)
        snprintf(path, sizeof path, "/v1/models/%s/logs?lines=%ld&after=%llu", name,
                 la->follow ? LOGS_MAX_LINES : la->lines, (unsigned long long)*cursor);
    else
        snprintf(path, sizeof path, "/v1/models/%s/logs?lines=%ld", name, la->lines);
    cJSON *j;
    int rc = cli_call_json(o, "GET", path, NULL, &j);
    if (rc)
        return rc;
    if (o->json)
        cli_print_json(j);
    const cJSON *missed = cJSON_GetObjectItemCaseSensitive(j, "missed");
    if (*have_cursor && cJSON_IsNumber(missed) && missed->valuedouble > 0)
        fprintf(stderr, "vramctl: logs: %.0f lines were dropped before they could be read (limits.worker_log_lines)\n",
                missed->valuedouble);
    const cJSON *lines = cJSON_GetObjectItemCaseSensitive(j, "lines");
    const cJSON *l;
    if (!o->json) {
        cJSON_ArrayForEach(l, lines) {
            print_line(l, la->timestamps);
        }
    }
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(j, "cursor");
    if (cJSON_IsNumber(cur)) {
        *cursor = (uint64_t)cur->valuedouble;
        *have_cursor = true;
    }
    cJSON_Delete(j);
    fflush(stdout);
    return CLI_OK;
}

static void on_stop(int sig)
{
    (void)sig;
    g_cli_stop = 1;
}

int cli_cmd_logs(cli_opts_t *o, int argc, char **argv)
{
    logs_args_t la;
    int rc = parse_logs_args(o, argc, argv, &la);
    if (rc)
        return rc;
    char name[512];
    if (cli_url_escape(la.model, name, sizeof name) != 0)
        return cli_usage_error(argv[0], "logs: bad model name");
    uint64_t cursor = 0;
    bool have_cursor = false;
    rc = fetch_once(o, &la, name, &cursor, &have_cursor);
    if (rc || !la.follow)
        return rc;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop; /* no SA_RESTART: the sleep ends at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!g_cli_stop) {
        struct timespec pause = {.tv_sec = LOGS_POLL_MS / 1000, .tv_nsec = (LOGS_POLL_MS % 1000) * 1000000L};
        nanosleep(&pause, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t elapsed = (uint64_t)(now.tv_sec - start.tv_sec) * 1000 +
                           (uint64_t)((now.tv_nsec - start.tv_nsec) / 1000000);
        if (g_cli_stop)
            break;
        rc = fetch_once(o, &la, name, &cursor, &have_cursor);
        if (rc)
            return rc;
        if (la.for_ms && elapsed >= la.for_ms)
            break;
    }
    return CLI_OK;
}
