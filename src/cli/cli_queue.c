/*
 * cli_queue: `vramctl queue [MODEL] [--limit N]`, the visible queue from GET /v1/queue: per
 * GPU ("GPU 0", "no GPU") one table of the waiting requests, MODEL, ID, POS, WAITED,
 * START IN, DONE IN, WAITING FOR (a job attempt's id shows as "job" unless the token lets
 * vramd show it), then one line per model: how many wait (and how many the table leaves
 * out), when a new request would start, its max_wait. --json prints vramd's answer.
 * Invariant: reads only /v1/queue; one request; exit codes as cli.h.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_render.h"

#define QUEUE_OUT_MAX (8u << 20)

enum { Q_COLS = 7 };

static void elapsed_of(const cJSON *o, const char *key, char *out, size_t cap)
{
    double v = cli_num_of(o, key, -1);
    if (v < 0)
        snprintf(out, cap, "-");
    else
        cli_format_elapsed((uint64_t)v, out, cap);
}

/* One request's row. */
static int queue_row(cli_table_t *t, const cJSON *req)
{
    char cells[Q_COLS][96];
    const char *row[Q_COLS];
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
    snprintf(cells[0], sizeof cells[0], "%s", cli_str_of(req, "model", "?"));
    snprintf(cells[1], sizeof cells[1], "%s", cJSON_IsString(id) ? id->valuestring : "job");
    snprintf(cells[2], sizeof cells[2], "%.0f", cli_num_of(req, "position", 0));
    elapsed_of(req, "waited_ms", cells[3], sizeof cells[3]);
    elapsed_of(req, "eta_start_ms", cells[4], sizeof cells[4]);
    elapsed_of(req, "eta_done_ms", cells[5], sizeof cells[5]);
    snprintf(cells[6], sizeof cells[6], "%s", cli_str_of(req, "waiting_for", "?"));
    for (int k = 0; k < Q_COLS; k++)
        row[k] = cells[k];
    return cli_table_add(t, row);
}

/* One model's summary line. */
static int model_line(buf_t *out, const cJSON *m)
{
    char eta[24], bound[24];
    elapsed_of(m, "eta_new_ms", eta, sizeof eta);
    elapsed_of(m, "max_wait_ms", bound, sizeof bound);
    double depth = cli_num_of(m, "depth", 0);
    int listed = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "requests"));
    int rc = buf_printf(out, "  %s: %.0f waiting", cli_str_of(m, "model", "?"), depth);
    if (depth > listed)
        rc |= buf_printf(out, " (%.0f not listed)", depth - listed);
    rc |= buf_printf(out, "; a new request would start in %s (max_wait %s)\n", eta, bound);
    return rc;
}

/* One GPU's table and model lines. */
static int gpu_render(buf_t *out, const cJSON *g)
{
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(g, "gpu");
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(g, "models");
    int rc = cJSON_IsNumber(gpu) ? buf_printf(out, "GPU %d\n", gpu->valueint) : buf_printf(out, "no GPU\n");
    if (cJSON_GetArraySize(models) == 0)
        return rc | buf_printf(out, "  nothing waiting\n");
    cli_table_t t;
    cli_table_init(&t, Q_COLS);
    const char *const head[Q_COLS] = {"MODEL", "ID", "POS", "WAITED", "START IN", "DONE IN", "WAITING FOR"};
    bool any = false;
    rc |= cli_table_add(&t, head);
    const cJSON *m, *req;
    cJSON_ArrayForEach(m, models) {
        cJSON_ArrayForEach(req, cJSON_GetObjectItemCaseSensitive(m, "requests")) {
            rc |= queue_row(&t, req);
            any = true;
        }
    }
    if (any && rc == 0)
        rc = cli_table_render(out, &t, "  ", false);
    cli_table_free(&t);
    cJSON_ArrayForEach(m, models)
        rc |= model_line(out, m);
    return rc;
}

int cli_cmd_queue(cli_opts_t *o, int argc, char **argv)
{
    const char *model = NULL, *limit = NULL;
    const cli_option_t opts[] = {{"--limit", NULL, NULL, &limit, NULL}};
    cli_command_line_t c = {.help = argv[0], .what = "queue", .options = opts, .n_options = 1,
                            .args = &model, .max_args = 1};
    int rc = cli_parse_command(o, argc, argv, &c);
    if (rc != CLI_OK)
        return rc;
    char path[512] = "/v1/queue", esc[400];
    const char *sep = "?";
    if (model) {
        if (!model[0] || cli_url_escape(model, esc, sizeof esc) != 0)
            return cli_usage_error(argv[0], "queue: bad model name");
        snprintf(path + strlen(path), sizeof path - strlen(path), "%smodel=%s", sep, esc);
        sep = "&";
    }
    if (limit) {
        char *end = NULL;
        long v = strtol(limit, &end, 10);
        if (!limit[0] || *end || v < 1)
            return cli_usage_error(argv[0], "queue: --limit takes a number 1 or more");
        snprintf(path + strlen(path), sizeof path - strlen(path), "%slimit=%ld", sep, v);
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
    buf_t out;
    buf_init(&out, QUEUE_OUT_MAX);
    const cJSON *g;
    int wrc = 0, groups = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(j, "gpus")) {
        wrc |= gpu_render(&out, g);
        groups++;
    }
    if (!groups)
        wrc |= buf_printf(&out, "nothing waiting (no GPU known yet)\n");
    cJSON_Delete(j);
    if (wrc != 0) {
        buf_free(&out);
        fprintf(stderr, "vramctl: queue: the answer is too large to print\n");
        return CLI_EXIT_ERROR;
    }
    fwrite(out.data, 1, out.len, stdout);
    buf_free(&out);
    return CLI_OK;
}
