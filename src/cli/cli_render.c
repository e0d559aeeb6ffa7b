/* cli_render: vramctl's tables, memory bars and the status view. See cli_render.h. */
#include "cli/cli_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GiB_F 1073741824.0

const char *cli_str_of(const cJSON *o, const char *key, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

double cli_num_of(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

void cli_format_gib(uint64_t bytes, char *out, size_t cap)
{
    snprintf(out, cap, "%.1f", (double)bytes / GiB_F);
}

void cli_format_bytes(uint64_t bytes, char *out, size_t cap)
{
    if (bytes < 1024)
        snprintf(out, cap, "%llu B", (unsigned long long)bytes);
    else if (bytes < (1ULL << 20))
        snprintf(out, cap, "%.0f KiB", (double)bytes / 1024.0);
    else if (bytes < (1ULL << 30))
        snprintf(out, cap, "%.0f MiB", (double)bytes / 1048576.0);
    else if (bytes < (1ULL << 40))
        snprintf(out, cap, "%.1f GiB", (double)bytes / GiB_F);
    else
        snprintf(out, cap, "%.2f TiB", (double)bytes / (GiB_F * 1024.0));
}

void cli_format_elapsed(uint64_t ms, char *out, size_t cap)
{
    uint64_t s = ms / 1000;
    if (ms < 1000)
        snprintf(out, cap, "%llums", (unsigned long long)ms);
    else if (ms < 60000)
        snprintf(out, cap, "%.1fs", (double)ms / 1000.0);
    else if (s < 3600)
        snprintf(out, cap, "%llum%02llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
    else if (s < 86400)
        snprintf(out, cap, "%lluh%02llum", (unsigned long long)(s / 3600), (unsigned long long)(s % 3600 / 60));
    else
        snprintf(out, cap, "%llud%02lluh", (unsigned long long)(s / 86400), (unsigned long long)(s % 86400 / 3600));
}

/* --- bars ----------------------------------------------------------------------------- */

void cli_bar_cells(const cli_segment_t *segs, size_t n, uint64_t total, int width, int *cells)
{
    int prev = 0;
    uint64_t cum = 0;
    for (size_t i = 0; i < n; i++) {
        cells[i] = 0;
        if (total == 0 || width <= 0)
            continue;
        cum += segs[i].bytes;
        if (cum > total || cum < segs[i].bytes) /* more than the card, or overflow */
            cum = total;
        int end = (int)((double)cum * width / (double)total + 0.5);
        if (end > width)
            end = width;
        cells[i] = end - prev;
        prev = end;
    }
    /* keep every non-empty segment visible: take a cell from the widest one */
    for (size_t i = 0; i < n; i++) {
        if (segs[i].bytes == 0 || cells[i] > 0 || total == 0 || width <= 0)
            continue;
        size_t widest = i;
        for (size_t j = 0; j < n; j++)
            if (cells[j] > cells[widest])
                widest = j;
        if (cells[widest] > 1) {
            cells[widest]--;
            cells[i] = 1;
        }
    }
}

int cli_render_bar(buf_t *out, const cli_segment_t *segs, size_t n, uint64_t total, int width, bool color)
{
    int cells[CLI_BAR_MAX_SEGMENTS];
    if (n > CLI_BAR_MAX_SEGMENTS)
        n = CLI_BAR_MAX_SEGMENTS;
    cli_bar_cells(segs, n, total, width, cells);
    int rc = buf_append_str(out, "[");
    int used = 0;
    for (size_t i = 0; i < n; i++) {
        if (cells[i] <= 0)
            continue;
        if (color && segs[i].sgr)
            rc |= buf_printf(out, "\x1b[%sm", segs[i].sgr);
        for (int k = 0; k < cells[i]; k++)
            rc |= buf_append(out, &segs[i].glyph, 1);
        if (color && segs[i].sgr)
            rc |= buf_append_str(out, "\x1b[0m");
        used += cells[i];
    }
    for (; used < width; used++)
        rc |= buf_append_str(out, " ");
    rc |= buf_append_str(out, "]");
    return rc ? -1 : 0;
}

/* --- tables --------------------------------------------------------------------------- */

void cli_table_init(cli_table_t *t, size_t n_cols)
{
    memset(t, 0, sizeof *t);
    t->n_cols = n_cols > CLI_TABLE_MAX_COLS ? CLI_TABLE_MAX_COLS : n_cols;
}

int cli_table_add(cli_table_t *t, const char *const *cells)
{
    if (t->n_rows == t->cap_rows) {
        size_t cap = t->cap_rows ? t->cap_rows * 2 : 8;
        char **grown = realloc(t->cells, cap * t->n_cols * sizeof *grown);
        if (!grown)
            return -1;
        t->cells = grown;
        t->cap_rows = cap;
    }
    for (size_t c = 0; c < t->n_cols; c++) {
        const char *s = cells[c] && cells[c][0] ? cells[c] : "-";
        char *copy = strdup(s);
        if (!copy) {
            for (size_t k = 0; k < c; k++)
                free(t->cells[t->n_rows * t->n_cols + k]);
            return -1;
        }
        t->cells[t->n_rows * t->n_cols + c] = copy;
    }
    t->n_rows++;
    return 0;
}

void cli_table_free(cli_table_t *t)
{
    for (size_t i = 0; i < t->n_rows * t->n_cols; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

static const char *state_sgr(const char *state)
{
    static const struct { const char *state, *sgr; } colours[] = {
        {"ready", "32"},     {"succeeded", "32"}, {"running", "36"},  {"starting", "33"},
        {"loading", "33"},   {"queued", "33"},    {"draining", "33"}, {"unloading", "33"},
        {"failed", "31;1"},  {"cancelled", "31"}, {"stopped", "2"},
    };
    for (size_t i = 0; i < sizeof colours / sizeof colours[0]; i++)
        if (strcmp(state, colours[i].state) == 0)
            return colours[i].sgr;
    return NULL;
}

int cli_table_render(buf_t *out, const cli_table_t *t, const char *indent, bool color)
{
    size_t widths[CLI_TABLE_MAX_COLS] = {0};
    int state_col = -1;
    for (size_t r = 0; r < t->n_rows; r++)
        for (size_t c = 0; c < t->n_cols; c++) {
            size_t l = strlen(t->cells[r * t->n_cols + c]);
            if (l > widths[c])
                widths[c] = l;
        }
    for (size_t c = 0; c < t->n_cols && t->n_rows > 0; c++)
        if (strcmp(t->cells[c], "STATE") == 0)
            state_col = (int)c;
    int rc = 0;
    for (size_t r = 0; r < t->n_rows; r++) {
        rc |= buf_append_str(out, indent);
        for (size_t c = 0; c < t->n_cols; c++) {
            const char *cell = t->cells[r * t->n_cols + c];
            bool last = c + 1 == t->n_cols;
            const char *sgr = NULL;
            if (color && r == 0)
                sgr = "1";
            else if (color && (int)c == state_col)
                sgr = state_sgr(cell);
            if (sgr)
                rc |= buf_printf(out, "\x1b[%sm%s\x1b[0m", sgr, cell);
            else
                rc |= buf_append_str(out, cell);
            if (!last)
                rc |= buf_printf(out, "%*s", (int)(widths[c] - strlen(cell) + 2), "");
        }
        rc |= buf_append_str(out, "\n");
    }
    return rc ? -1 : 0;
}

/* --- the status view ------------------------------------------------------------------ */

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static uint64_t bytes_of(const cJSON *o, const char *key)
{
    double v = num(o, key);
    return v > 0 ? (uint64_t)v : 0;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char model_glyphs[] = "#=%@&$*ABCDEFGH";
static const char *const model_sgr[] = {"30;42", "30;44", "30;46", "30;45", "30;102", "30;104", "30;106", "30;105"};

/* A model's glyph and colour: by its position in the status's model list, so that it is the
 * same on every GPU and in every frame of `top`. */
static void model_style(const cJSON *status, const char *owner, size_t fallback, char *glyph, const char **sgr)
{
    size_t pos = fallback;
    size_t i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(status, "models")) {
        const char *name = str(m, "name");
        if (name && owner && strcmp(name, owner) == 0) {
            pos = i;
            break;
        }
        i++;
    }
    *glyph = model_glyphs[pos % (sizeof model_glyphs - 1)];
    *sgr = model_sgr[pos % (sizeof model_sgr / sizeof model_sgr[0])];
}

static int render_legend(buf_t *out, const cli_segment_t *segs, size_t n, bool color)
{
    int rc = buf_append_str(out, "   ");
    for (size_t i = 0; i < n; i++) {
        char g[32];
        cli_format_gib(segs[i].bytes, g, sizeof g);
        if (color && segs[i].sgr)
            rc |= buf_printf(out, "  \x1b[%sm%c\x1b[0m %s %s", segs[i].sgr, segs[i].glyph, segs[i].label, g);
        else
            rc |= buf_printf(out, "  %c %s %s", segs[i].glyph, segs[i].label, g);
    }
    rc |= buf_append_str(out, "  (GiB)\n");
    return rc;
}

static int render_gpu(buf_t *out, const cJSON *status, const cJSON *g, const cli_view_opts_t *v)
{
    cli_segment_t segs[CLI_BAR_MAX_SEGMENTS];
    size_t n = 0;
    uint64_t total = bytes_of(g, "total");
    uint64_t accounted = 0;
    uint64_t requests = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "ledger")) {
        const char *kind = str(e, "kind");
        uint64_t b = bytes_of(e, "bytes");
        if (kind && strcmp(kind, "request") == 0) {
            requests += b;
            continue;
        }
        const char *owner = str(e, "owner");
        size_t k;
        for (k = 0; k < n; k++)
            if (owner && strcmp(segs[k].label, owner) == 0)
                break;
        if (k == n) {
            if (n >= CLI_BAR_MAX_SEGMENTS - 4) /* room for requests, foreign, headroom, free */
                continue;
            segs[n].label = owner ? owner : "?";
            segs[n].bytes = 0;
            model_style(status, owner, n, &segs[n].glyph, &segs[n].sgr);
            n++;
        }
        segs[k].bytes += b;
    }
    for (size_t k = 0; k < n; k++)
        accounted += segs[k].bytes;
    uint64_t foreign = bytes_of(g, "foreign");
    uint64_t headroom = bytes_of(g, "headroom");
    segs[n++] = (cli_segment_t){"requests", requests, '+', "30;43"};
    segs[n++] = (cli_segment_t){"foreign", foreign, 'x', "30;41"};
    segs[n++] = (cli_segment_t){"headroom", headroom, '/', "30;47"};
    accounted += requests + foreign + headroom;
    segs[n++] = (cli_segment_t){"free", total > accounted ? total - accounted : 0, '.', "2"};

    char t[32], used[32], reserved[32], admit[32];
    cli_format_gib(total, t, sizeof t);
    cli_format_gib(bytes_of(g, "used"), used, sizeof used);
    cli_format_gib(bytes_of(g, "reserved"), reserved, sizeof reserved);
    cli_format_gib(bytes_of(g, "free_to_admit"), admit, sizeof admit);
    const char *name = str(g, "name");
    int rc = buf_printf(out, "  GPU %d  %s  %s GiB total, %s used (NVML), %s reserved, %s free to admit, util %d%%\n",
                        (int)num(g, "index"), name && name[0] ? name : "(unknown)", t, used, reserved, admit,
                        (int)num(g, "utilization"));
    int bar_width = v->width - 6;
    if (bar_width > 100)
        bar_width = 100;
    if (bar_width < 20)
        bar_width = 20;
    rc |= buf_append_str(out, "    ");
    rc |= cli_render_bar(out, segs, n, total, bar_width, v->color);
    rc |= buf_append_str(out, "\n");
    rc |= render_legend(out, segs, n, v->color);
    return rc;
}

static void join_instances(const cJSON *m, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    size_t len = 0;
    const cJSON *in;
    cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(m, "instances")) {
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(in, key);
        if (!cJSON_IsNumber(val))
            continue;
        int w = snprintf(out + len, cap - len, "%s%d", len ? "," : "", val->valueint);
        if (w < 0 || (size_t)w >= cap - len) {
            out[len] = '\0';
            return;
        }
        len += (size_t)w;
    }
}

/* Parked instances (sleep, checkpoint) and the host-memory budget they are booked on;
 * nothing when no instance is parked. */
static int render_parked(buf_t *out, const cJSON *status)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(status, "host_memory");
    if (!h || bytes_of(h, "parked") == 0)
        return 0;
    char parked[32], budget[32], reserve[32];
    cli_format_bytes(bytes_of(h, "parked"), parked, sizeof parked);
    cli_format_bytes(bytes_of(h, "budget"), budget, sizeof budget);
    cli_format_bytes(bytes_of(h, "reserve"), reserve, sizeof reserve);
    int rc = buf_printf(out, "\nPARKED  %s in host memory of a %s budget (reserve %s)\n", parked, budget, reserve);
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(status, "models")) {
        const cJSON *in;
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(m, "instances")) {
            if (bytes_of(in, "parked_bytes") == 0)
                continue;
            char b[32], left[32];
            cli_format_bytes(bytes_of(in, "parked_bytes"), b, sizeof b);
            cli_format_bytes(bytes_of(in, "reserved_bytes"), left, sizeof left);
            const char *tier = str(in, "tier");
            rc |= buf_printf(out, "  %s instance %d: %s, %s parked, %s left on GPU\n", str(m, "name") ? str(m, "name") : "?",
                             (int)num(in, "id"), tier ? tier : "?", b, left);
        }
    }
    return rc;
}

/* Instances out of rotation: suspect (until a health check passes) or ejected (for how long). */
static int render_out_of_rotation(buf_t *out, const cJSON *m)
{
    int rc = 0;
    const char *name = str(m, "name") ? str(m, "name") : "?";
    const cJSON *in;
    cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(m, "instances")) {
        bool suspect = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "suspect"));
        bool ejected = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "ejected"));
        if (!suspect && !ejected)
            continue;
        rc |= buf_printf(out, "  %s instance %d:", name, (int)num(in, "id"));
        if (suspect)
            rc |= buf_append_str(out, " suspect (until a health check passes)");
        if (ejected) {
            char left[32];
            cli_format_elapsed(bytes_of(in, "ejected_for_ms"), left, sizeof left);
            rc |= buf_printf(out, "%s ejected for %s more (ejection %d)", suspect ? "," : "", left,
                             (int)num(in, "ejections"));
        }
        rc |= buf_append_str(out, "\n");
    }
    return rc;
}

/* One line for the guards when any has acted: client timeouts, the reserve, refused
 * connections, vramd's own shortages. Nothing when all are 0 (or the fields are absent). */
static int render_guards(buf_t *out, const cJSON *status)
{
    const cJSON *conns = cJSON_GetObjectItemCaseSensitive(status, "connections");
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(conns, "reserve");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(status, "client_timeouts");
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(status, "local_resource_exhausted");
    double timeouts = num(to, "header") + num(to, "body") + num(to, "send");
    double reserve = num(rv, "accepted_total") + num(conns, "refused_total");
    double local = num(lo, "proxy") + num(lo, "health") + num(lo, "hook");
    if (timeouts + reserve + local <= 0)
        return 0;
    int rc = buf_append_str(out, "  guards:");
    if (timeouts > 0)
        rc |= buf_printf(out, " timeouts header %d, body %d, send %d;", (int)num(to, "header"), (int)num(to, "body"),
                         (int)num(to, "send"));
    if (reserve > 0)
        rc |= buf_printf(out, " reserve %d/%d open (accepted %llu, refused %llu), connections refused %llu;",
                         (int)num(rv, "open"), (int)num(rv, "max"), (unsigned long long)bytes_of(rv, "accepted_total"),
                         (unsigned long long)bytes_of(rv, "refused_total"),
                         (unsigned long long)bytes_of(conns, "refused_total"));
    if (local > 0)
        rc |= buf_printf(out, " vramd short of descriptors: proxy %d, health %d, hook %d;", (int)num(lo, "proxy"),
                         (int)num(lo, "health"), (int)num(lo, "hook"));
    if (out->len && out->data[out->len - 1] == ';')
        out->len--;
    return rc | buf_append_str(out, "\n");
}

/* The model's state as shown: a model whose only instances are parked is "stopped" to the
 * scheduler (nothing serving) but its processes are up, holding it in host memory: shown as
 * the parked instance's state (parking, parked, resuming). */
static const char *model_state_shown(const cJSON *m)
{
    const char *state = str(m, "state");
    if (!state || strcmp(state, "stopped") != 0)
        return state;
    const cJSON *in;
    cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(m, "instances")) {
        const char *is = str(in, "state");
        if (is && (!strcmp(is, "parked") || !strcmp(is, "parking") || !strcmp(is, "resuming")))
            return is;
    }
    return state;
}

/* A model's last failure while it retries or has failed: its worker's last output lines,
 * and what retries a failed one. */
static int render_last_failure(buf_t *out, const cJSON *m)
{
    const cJSON *lf = cJSON_GetObjectItemCaseSensitive(m, "last_failure");
    const char *name = str(m, "name") ? str(m, "name") : "?";
    int rc = 0;
    if (cJSON_IsObject(lf) && !str(m, "failed_reason") && str(lf, "reason"))
        rc |= buf_printf(out, "  %s last failure: %s\n", name, str(lf, "reason"));
    const cJSON *lines = cJSON_GetObjectItemCaseSensitive(lf, "output");
    if (cJSON_GetArraySize(lines) > 0)
        rc |= buf_printf(out, "    its worker's last output:\n");
    const cJSON *line;
    cJSON_ArrayForEach(line, lines) {
        if (cJSON_IsString(line))
            rc |= buf_printf(out, "    | %s\n", line->valuestring);
    }
    if (str(m, "failed_retry"))
        rc |= buf_printf(out, "    stays failed until: %s\n", str(m, "failed_retry"));
    return rc;
}

static int render_models(buf_t *out, const cJSON *status, const cli_view_opts_t *v)
{
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(status, "models");
    if (cJSON_GetArraySize(models) == 0)
        return buf_append_str(out, "\nMODELS: none configured\n");
    cli_table_t t;
    cli_table_init(&t, 9);
    static const char *const head[] = {"MODEL", "STATE", "KIND", "INST", "PID", "GPU", "IN FLIGHT", "QUEUE",
                                       "OLDEST WAIT"};
    int rc = cli_table_add(&t, head);
    const cJSON *m;
    cJSON_ArrayForEach(m, models) {
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(m, "queue");
        char inst[16], pids[128], gpus[64], inflight[16], queue[32], oldest[32];
        snprintf(inst, sizeof inst, "%d", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "instances")));
        join_instances(m, "pid", pids, sizeof pids);
        join_instances(m, "gpu", gpus, sizeof gpus);
        snprintf(inflight, sizeof inflight, "%d", (int)num(m, "in_flight"));
        snprintf(queue, sizeof queue, "%d/%d", (int)num(q, "depth"), (int)num(q, "max"));
        uint64_t wait = bytes_of(q, "oldest_wait_ms");
        if (num(q, "depth") > 0)
            cli_format_elapsed(wait, oldest, sizeof oldest);
        else
            oldest[0] = '\0';
        const char *row[] = {str(m, "name"), model_state_shown(m), str(m, "kind"), inst, pids, gpus, inflight, queue,
                             oldest};
        rc |= cli_table_add(&t, row);
    }
    rc |= buf_append_str(out, "\nMODELS\n");
    rc |= cli_table_render(out, &t, "  ", v->color);
    cli_table_free(&t);
    cJSON_ArrayForEach(m, models) {
        const char *reason = str(m, "failed_reason");
        if (reason && reason[0])
            rc |= buf_printf(out, "  %s failed: %s\n", str(m, "name") ? str(m, "name") : "?", reason);
        rc |= render_last_failure(out, m);
        rc |= render_out_of_rotation(out, m);
    }
    rc |= render_parked(out, status);
    return rc;
}

static void clock_text(uint64_t wall_ms, char *out, size_t cap)
{
    time_t s = (time_t)(wall_ms / 1000);
    struct tm tm;
    if (!localtime_r(&s, &tm) || strftime(out, cap, "%H:%M:%S", &tm) == 0)
        snprintf(out, cap, "?");
}

static int render_events(buf_t *out, const cJSON *status, const cli_view_opts_t *v)
{
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(status, "events");
    int n = cJSON_GetArraySize(events);
    if (v->max_events <= 0)
        return 0;
    int rc = buf_append_str(out, "\nRECENT EVENTS\n");
    if (n == 0)
        return rc | buf_append_str(out, "  (none)\n");
    int first = n > v->max_events ? n - v->max_events : 0;
    for (int i = first; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(events, i);
        char when[32];
        clock_text(bytes_of(e, "ts_ms"), when, sizeof when);
        const char *text = str(e, "text");
        rc |= buf_printf(out, "  %s  %s\n", when, text ? text : "");
    }
    return rc;
}

int cli_render_status(buf_t *out, const cJSON *status, const cli_view_opts_t *v)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(status, "queues");
    const cJSON *conns = cJSON_GetObjectItemCaseSensitive(status, "connections");
    char up[32];
    cli_format_elapsed(bytes_of(status, "uptime_ms"), up, sizeof up);
    const char *version = str(status, "version");
    int rc = buf_printf(out, "vramd %s at %s  up %s", version ? version : "?", v->url ? v->url : "?", up);
    if (v->wall_ms) {
        char now[32];
        clock_text(v->wall_ms, now, sizeof now);
        rc |= buf_printf(out, "  %s", now);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(status, "draining")))
        rc |= buf_printf(out, "  %sDRAINING%s", v->color ? "\x1b[33;1m" : "", v->color ? "\x1b[0m" : "");
    rc |= buf_printf(out, "\n  requests %llu, queued %d/%d, in flight %d, connections %d/%d\n",
                     (unsigned long long)bytes_of(status, "requests_total"), (int)num(q, "queued"),
                     (int)num(q, "max"), (int)num(q, "in_flight"), (int)num(conns, "open"), (int)num(conns, "max"));
    rc |= render_guards(out, status);

    const cJSON *nvml = cJSON_GetObjectItemCaseSensitive(status, "nvml");
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(status, "gpus");
    rc |= buf_append_str(out, "\nGPUS\n");
    if (nvml && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(nvml, "ok"))) {
        const char *err = str(nvml, "error");
        rc |= buf_printf(out, "  NVML unavailable: %s\n", err ? err : "unknown error");
    }
    if (cJSON_GetArraySize(gpus) == 0) {
        rc |= buf_append_str(out, "  none (models that declare no memory run without one)\n");
    } else {
        const cJSON *g;
        cJSON_ArrayForEach(g, gpus) rc |= render_gpu(out, status, g, v);
    }
    rc |= render_models(out, status, v);
    rc |= render_events(out, status, v);
    return rc ? -1 : 0;
}
