/*
 * cli_ps: `vramctl ps`, one line per worker instance from GET /v1/status: model, instance
 * id, state, GPU, GiB measured/reserved, requests in flight, the model's queue depth, when
 * its keep_alive runs out, pid; SHIM (its state, GiB live/grant) when an instance has a CUDA
 * shim. A model without instances gets one line with id "-" (its
 * state: stopped, failed, ...), so that every configured model is listed.
 * --json prints the same rows as a JSON array of objects (keys in docs/vramctl.md).
 * Invariant: reads only /v1/status; one request; exit codes as cli.h.
 */
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_render.h"

#define PS_OUT_MAX (4u << 20)

enum { PS_COLS = 10 }; /* the last, SHIM, only when some instance has a CUDA shim */

/* One row's cells from a model and one of its instances (inst NULL: the model has none). */
static void ps_cells(const cJSON *model, const cJSON *inst, char cells[PS_COLS][64])
{
    const cJSON *queue = cJSON_GetObjectItemCaseSensitive(model, "queue");
    bool pinned = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "pinned"));
    snprintf(cells[0], 64, "%s", cli_str_of(model, "name", "?"));
    snprintf(cells[6], 64, "%.0f", cli_num_of(queue, "depth", 0));
    if (!inst) {
        snprintf(cells[1], 64, "-");
        snprintf(cells[2], 64, "%s", cli_str_of(model, "state", "?"));
        for (int k = 3; k < PS_COLS; k++)
            if (k != 6)
                snprintf(cells[k], 64, "-");
        if (pinned)
            snprintf(cells[7], 64, "pinned");
        return;
    }
    snprintf(cells[1], 64, "%.0f", cli_num_of(inst, "id", 0));
    snprintf(cells[2], 64, "%s", cli_str_of(inst, "state", "?"));
    double gpu = cli_num_of(inst, "gpu", -1);
    if (gpu >= 0)
        snprintf(cells[3], 64, "%.0f", gpu);
    else
        snprintf(cells[3], 64, "-");
    char meas[24], resv[24];
    cli_format_gib((uint64_t)cli_num_of(inst, "measured_bytes", 0), meas, sizeof meas);
    cli_format_gib((uint64_t)cli_num_of(inst, "reserved_bytes", 0), resv, sizeof resv);
    snprintf(cells[4], 64, "%s/%s", meas, resv);
    snprintf(cells[5], 64, "%.0f", cli_num_of(inst, "in_flight", 0));
    double left = cli_num_of(inst, "keep_alive_left_ms", -1);
    if (pinned) {
        snprintf(cells[7], 64, "pinned");
    } else if (left >= 0) {
        char el[24];
        cli_format_elapsed((uint64_t)left, el, sizeof el);
        snprintf(cells[7], 64, "in %s", el);
    } else {
        snprintf(cells[7], 64, "-");
    }
    double pid = cli_num_of(inst, "pid", -1);
    if (pid > 0)
        snprintf(cells[8], 64, "%.0f", pid);
    else
        snprintf(cells[8], 64, "-");
    const cJSON *shim = cJSON_GetObjectItemCaseSensitive(inst, "shim");
    if (cJSON_IsObject(shim)) {
        char live[24], grant[24];
        cli_format_gib((uint64_t)cli_num_of(shim, "live_bytes", 0), live, sizeof live);
        cli_format_gib((uint64_t)cli_num_of(shim, "grant_bytes", 0), grant, sizeof grant);
        snprintf(cells[9], 64, "%s %s/%s", cli_str_of(shim, "state", "?"), live, grant);
    } else {
        snprintf(cells[9], 64, "-");
    }
}

static bool any_shim(const cJSON *models)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, models) {
        const cJSON *in;
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(m, "instances"))
            if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(in, "shim")))
                return true;
    }
    return false;
}

/* The JSON row of one instance (inst NULL: the model has none). */
static cJSON *ps_json_row(const cJSON *model, const cJSON *inst)
{
    const cJSON *queue = cJSON_GetObjectItemCaseSensitive(model, "queue");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "model", cli_str_of(model, "name", "?"));
    cJSON_AddBoolToObject(r, "pinned", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "pinned")));
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(model, "pinned_by");
    if (cJSON_IsString(by))
        cJSON_AddStringToObject(r, "pinned_by", by->valuestring);
    else
        cJSON_AddNullToObject(r, "pinned_by");
    cJSON_AddNumberToObject(r, "queue_depth", cli_num_of(queue, "depth", 0));
    if (!inst) {
        cJSON_AddNullToObject(r, "id");
        cJSON_AddStringToObject(r, "state", cli_str_of(model, "state", "?"));
        return r;
    }
    static const char *const keys[] = {"id", "state", "tier", "gpu", "measured_bytes", "reserved_bytes",
                                       "server_vram_bytes", "in_flight", "keep_alive_left_ms",
                                       "keep_alive_expires", "pid", "shim", "driver_limit",
                                       "cancelled_held_bytes"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(inst, keys[k]);
        cJSON_AddItemToObject(r, keys[k], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    return r;
}

/* Rows of every model's instances, as a table or (json) a JSON array. */
static int ps_render(const cJSON *status, bool json, buf_t *out)
{
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(status, "models");
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    cli_table_t t;
    int cols = any_shim(models) ? PS_COLS : PS_COLS - 1;
    cli_table_init(&t, (size_t)cols);
    const char *const head[PS_COLS] = {"MODEL", "ID", "STATE", "GPU", "GIB", "IN_FLIGHT", "QUEUE", "KEEP_ALIVE", "PID", "SHIM"};
    int rc = cli_table_add(&t, head);
    const cJSON *m;
    cJSON_ArrayForEach(m, models) {
        const cJSON *insts = cJSON_GetObjectItemCaseSensitive(m, "instances");
        int n = cJSON_GetArraySize(insts);
        for (int i = 0; i < (n > 0 ? n : 1) && rc == 0; i++) {
            const cJSON *in = n > 0 ? cJSON_GetArrayItem(insts, i) : NULL;
            if (arr) {
                cJSON_AddItemToArray(arr, ps_json_row(m, in));
                continue;
            }
            char cells[PS_COLS][64];
            const char *row[PS_COLS];
            ps_cells(m, in, cells);
            for (int k = 0; k < cols; k++)
                row[k] = cells[k];
            rc = cli_table_add(&t, row);
        }
    }
    if (arr) {
        char *s = cJSON_Print(arr);
        rc = s ? buf_append(out, s, strlen(s)) : -1;
        if (rc == 0)
            rc = buf_append(out, "\n", 1);
        cJSON_free(s);
        cJSON_Delete(arr);
    } else if (rc == 0) {
        rc = cli_table_render(out, &t, "", false);
    }
    cli_table_free(&t);
    return rc;
}

int cli_cmd_ps(cli_opts_t *o, int argc, char **argv)
{
    cli_command_line_t c = {.help = argv[0], .what = "ps"};
    int rc = cli_parse_command(o, argc, argv, &c);
    if (rc != CLI_OK)
        return rc;
    cJSON *j;
    rc = cli_call_json(o, "GET", "/v1/status", NULL, &j);
    if (rc)
        return rc;
    buf_t out;
    buf_init(&out, PS_OUT_MAX);
    rc = ps_render(j, o->json, &out);
    cJSON_Delete(j);
    if (rc != 0) {
        buf_free(&out);
        fprintf(stderr, "vramctl: ps: the answer is too large to print\n");
        return CLI_EXIT_ERROR;
    }
    fwrite(out.data, 1, out.len, stdout);
    buf_free(&out);
    return CLI_OK;
}
