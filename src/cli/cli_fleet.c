/*
 * cli_fleet: `vramctl status` with --url given more than once: several hosts (a fleet
 * behind HAProxy, docs/fleet.md) shown together. Each host's GET /v1/status is fetched in
 * turn (each bounded by --timeout); the view is one line per host (its name, address,
 * state, GPU memory free to admit over total - headroom, queued and running requests) and
 * one line per model with its state, queue and running count on every host. A host that
 * cannot be reached is shown "unreachable" (why: on stderr), and the exit code is then 3
 * (the others are still shown). With --json: {"hosts": [{"url", "status"} or {"url", "error"}]}.
 * The rendering (cli_render_fleet) is a pure function of the fetched documents.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_render.h"

#define FLEET_FRAME_MAX (4u << 20)
#define FLEET_MODELS_MAX 256

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *key, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static const char *host_state(const cJSON *st)
{
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "draining")))
        return "draining";
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "nvml"), "ok")))
        return "nvml-down";
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "ready")) ? "ready" : "starting";
}

static const cJSON *find_model(const cJSON *st, const char *name)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(st, "models"))
    if (strcmp(str(m, "name", ""), name) == 0)
        return m;
    return NULL;
}

static int render_hosts(buf_t *out, const cli_fleet_host_t *hosts, size_t n, const cli_view_opts_t *v)
{
    cli_table_t t;
    cli_table_init(&t, 7);
    const char *head[] = {"HOST", "URL", "STATE", "FREE/TOTAL GiB", "GPUS", "QUEUED", "RUNNING"};
    cli_table_add(&t, head);
    for (size_t i = 0; i < n; i++) {
        const cJSON *st = hosts[i].status;
        char state[200], mem[64] = "-", gpus[16] = "-", q[16] = "-", r[16] = "-";
        const char *name = "?";
        if (!st) {
            snprintf(state, sizeof state, "unreachable"); /* why: on stderr, one line per host */
        } else {
            name = str(st, "host", "?");
            snprintf(state, sizeof state, "%s", host_state(st));
            uint64_t free = 0, room = 0;
            int ng = 0;
            const cJSON *g;
            cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(st, "gpus"))
            {
                ng++;
                free += (uint64_t)num(g, "free_to_admit");
                double t_ = num(g, "total") - num(g, "headroom");
                room += t_ > 0 ? (uint64_t)t_ : 0;
            }
            char a[32], b[32];
            cli_format_gib(free, a, sizeof a);
            cli_format_gib(room, b, sizeof b);
            snprintf(mem, sizeof mem, "%s/%s", a, b);
            snprintf(gpus, sizeof gpus, "%d", ng);
            const cJSON *qs = cJSON_GetObjectItemCaseSensitive(st, "queues");
            snprintf(q, sizeof q, "%.0f", num(qs, "queued"));
            snprintf(r, sizeof r, "%.0f", num(qs, "in_flight"));
        }
        const char *row[] = {name, hosts[i].url, state, mem, gpus, q, r};
        cli_table_add(&t, row);
    }
    int rc = cli_table_render(out, &t, "", v->color);
    cli_table_free(&t);
    return rc;
}

/* One column per host: "ready 2q/1r" (state, queued, running), "-" where it is not configured. */
static int render_models(buf_t *out, const cli_fleet_host_t *hosts, size_t n, const cli_view_opts_t *v)
{
    const char *names[FLEET_MODELS_MAX];
    size_t n_names = 0;
    for (size_t i = 0; i < n; i++) {
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(hosts[i].status, "models"))
        {
            const char *name = str(m, "name", NULL);
            bool seen = false;
            for (size_t k = 0; name && k < n_names; k++)
                seen = seen || strcmp(names[k], name) == 0;
            if (name && !seen && n_names < FLEET_MODELS_MAX)
                names[n_names++] = name;
        }
    }
    size_t cols = n + 1 > CLI_TABLE_MAX_COLS ? CLI_TABLE_MAX_COLS : n + 1; /* more hosts: the first ones */
    cli_table_t t;
    cli_table_init(&t, cols);
    const char *row[CLI_TABLE_MAX_COLS];
    char cells[CLI_TABLE_MAX_COLS][96];
    row[0] = "MODEL";
    for (size_t i = 0; i + 1 < cols; i++)
        row[i + 1] = hosts[i].status ? str(hosts[i].status, "host", hosts[i].url) : hosts[i].url;
    cli_table_add(&t, row);
    for (size_t k = 0; k < n_names; k++) {
        row[0] = names[k];
        for (size_t i = 0; i + 1 < cols; i++) {
            const cJSON *m = hosts[i].status ? find_model(hosts[i].status, names[k]) : NULL;
            if (!m) {
                row[i + 1] = "-";
                continue;
            }
            snprintf(cells[i + 1], sizeof cells[i + 1], "%s %.0fq/%.0fr", str(m, "state", "?"),
                     num(cJSON_GetObjectItemCaseSensitive(m, "queue"), "depth"), num(m, "in_flight"));
            row[i + 1] = cells[i + 1];
        }
        cli_table_add(&t, row);
    }
    int rc = cli_table_render(out, &t, "", v->color);
    cli_table_free(&t);
    return rc;
}

int cli_render_fleet(buf_t *out, const cli_fleet_host_t *hosts, size_t n, const cli_view_opts_t *v)
{
    size_t ready = 0, down = 0;
    for (size_t i = 0; i < n; i++) {
        if (!hosts[i].status)
            down++;
        else if (strcmp(host_state(hosts[i].status), "ready") == 0)
            ready++;
    }
    buf_printf(out, "vramd fleet: %zu hosts, %zu ready", n, ready);
    if (down)
        buf_printf(out, ", %zu unreachable", down);
    buf_append_str(out, "\n\n");
    if (render_hosts(out, hosts, n, v) != 0)
        return -1;
    buf_append_str(out, "\n");
    return render_models(out, hosts, n, v);
}

int cli_status_fleet(cli_opts_t *o, bool color, int width)
{
    cli_fleet_host_t hosts[CLI_MAX_URLS];
    char errors[CLI_MAX_URLS][256];
    int rc = CLI_OK;
    for (size_t i = 0; i < o->n_urls; i++) {
        cli_opts_t one = *o;
        one.url = o->urls[i];
        hosts[i] = (cli_fleet_host_t){.url = o->urls[i]};
        cli_response_t resp;
        errors[i][0] = '\0';
        int r = cli_call_quiet(&one, "GET", "/v1/status", &resp, errors[i], sizeof errors[i]);
        if (r == CLI_OK) {
            hosts[i].status = cJSON_ParseWithLength(resp.body, resp.body_len);
            cli_response_free(&resp);
            if (!hosts[i].status) {
                snprintf(errors[i], sizeof errors[i], "its /v1/status answer is not JSON");
                r = CLI_EXIT_ERROR;
            }
        }
        if (r != CLI_OK) {
            hosts[i].error = errors[i];
            rc = rc == CLI_OK ? r : rc;
        }
    }
    if (o->json) {
        cJSON *root = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(root, "hosts");
        for (size_t i = 0; i < o->n_urls; i++) {
            cJSON *h = cJSON_CreateObject();
            cJSON_AddStringToObject(h, "url", hosts[i].url);
            if (hosts[i].status)
                cJSON_AddItemReferenceToObject(h, "status", hosts[i].status);
            else
                cJSON_AddStringToObject(h, "error", hosts[i].error);
            cJSON_AddItemToArray(arr, h);
        }
        cli_print_json(root);
        cJSON_Delete(root);
    } else {
        buf_t frame;
        buf_init(&frame, FLEET_FRAME_MAX);
        cli_view_opts_t v = {.color = color, .width = width};
        cli_render_fleet(&frame, hosts, o->n_urls, &v);
        fwrite(frame.data, 1, frame.len, stdout);
        buf_free(&frame);
    }
    for (size_t i = 0; i < o->n_urls; i++) {
        if (hosts[i].error)
            fprintf(stderr, "vramctl: %s: %s\n", hosts[i].url, hosts[i].error);
        cJSON_Delete(hosts[i].status);
    }
    return rc;
}
