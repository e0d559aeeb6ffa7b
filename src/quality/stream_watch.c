/*
 * stream_watch: reads a streamed answer's events as they pass (the rules and bounds are in
 * stream_watch.h). Each line is gathered in w->line (bounded; a longer line keeps its start
 * and its end is skipped) and read once complete. A JSON line is parsed with cJSON only when
 * it was kept whole; a cut one is read by its start alone (`{"error"`).
 */
#include "quality/stream_watch.h"

#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

enum stream_kind stream_kind_of(const char *ctype, size_t len)
{
    if (ctype == NULL)
        return STREAM_NONE;
    while (len && is_space(*ctype)) {
        ctype++;
        len--;
    }
    const char *semi = memchr(ctype, ';', len);
    size_t n = semi ? (size_t)(semi - ctype) : len;
    while (n && is_space(ctype[n - 1]))
        n--;
    static const struct {
        const char *type;
        enum stream_kind kind;
    } known[] = {{"text/event-stream", STREAM_SSE},
                 {"application/x-ndjson", STREAM_NDJSON},
                 {"application/ndjson", STREAM_NDJSON},
                 {"application/jsonl", STREAM_NDJSON},
                 {"application/x-jsonlines", STREAM_NDJSON}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strlen(known[i].type) == n && strncasecmp(ctype, known[i].type, n) == 0)
            return known[i].kind;
    return STREAM_NONE;
}

const char *stream_kind_name(enum stream_kind k)
{
    static const char *const names[] = {"none", "sse", "ndjson", "raw"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "none";
}

void stream_watch_init(stream_watch_t *w, enum stream_kind kind)
{
    w->kind = kind;
    w->in_error_event = w->line_over = w->saw_error = w->saw_done = w->expects_done = false;
    w->line_len = w->error_len = 0;
}

/* The first error seen keeps its text (bounded). */
static void note_error(stream_watch_t *w, const char *text, size_t len)
{
    if (!w->saw_error) {
        size_t n = len < sizeof w->error ? len : sizeof w->error;
        memcpy(w->error, text, n);
        w->error_len = n;
    }
    w->saw_error = true;
}

/* A JSON object line (SSE data or NDJSON). whole: the line was kept whole. */
static void json_line(stream_watch_t *w, const char *s, size_t len, bool whole)
{
    while (len && is_space(*s)) {
        s++;
        len--;
    }
    if (len == 0 || *s != '{')
        return;
    if (!whole) { /* only the start is known */
        static const char err[] = "{\"error\"";
        if (len >= sizeof err - 1 && memcmp(s, err, sizeof err - 1) == 0)
            note_error(w, s, len);
        return;
    }
    cJSON *doc = cJSON_ParseWithLength(s, len);
    if (doc == NULL)
        return;
    if (cJSON_GetObjectItemCaseSensitive(doc, "error") != NULL)
        note_error(w, s, len);
    if (w->kind == STREAM_NDJSON) {
        const cJSON *done = cJSON_GetObjectItemCaseSensitive(doc, "done");
        if (cJSON_IsBool(done)) {
            w->expects_done = true;
            if (cJSON_IsTrue(done))
                w->saw_done = true;
        }
    } else {
        const cJSON *obj = cJSON_GetObjectItemCaseSensitive(doc, "object");
        if (cJSON_IsString(obj) && (strncmp(obj->valuestring, "chat.completion", 15) == 0 ||
                                    strcmp(obj->valuestring, "text_completion") == 0))
            w->expects_done = true;
    }
    cJSON_Delete(doc);
}

/* "field: value" of an SSE line: value (one optional space after the colon dropped), or
 * NULL when the line is not that field. */
static const char *sse_field(const char *line, size_t len, const char *field, size_t *vlen)
{
    size_t f = strlen(field);
    if (len < f + 1 || memcmp(line, field, f) != 0 || line[f] != ':')
        return NULL;
    size_t at = f + 1;
    if (at < len && line[at] == ' ')
        at++;
    *vlen = len - at;
    return line + at;
}

static void sse_line(stream_watch_t *w, const char *line, size_t len, bool whole)
{
    if (len == 0) { /* the event ended */
        w->in_error_event = false;
        return;
    }
    size_t vlen;
    const char *v;
    if ((v = sse_field(line, len, "event", &vlen)) != NULL) {
        w->in_error_event = vlen == 5 && memcmp(v, "error", 5) == 0;
    } else if ((v = sse_field(line, len, "data", &vlen)) != NULL) {
        if (w->in_error_event)
            note_error(w, v, vlen);
        else if (vlen == 6 && memcmp(v, "[DONE]", 6) == 0)
            w->saw_done = true;
        else
            json_line(w, v, vlen, whole);
    } else if ((v = sse_field(line, len, "error", &vlen)) != NULL) {
        note_error(w, v, vlen); /* llama-server writes its errors as an `error:` line */
    }
}

static void read_line(stream_watch_t *w)
{
    size_t len = w->line_len;
    if (len && w->line[len - 1] == '\r')
        len--;
    bool whole = !w->line_over;
    if (w->kind == STREAM_SSE)
        sse_line(w, w->line, len, whole);
    else if (w->kind == STREAM_NDJSON)
        json_line(w, w->line, len, whole);
    w->line_len = 0;
    w->line_over = false;
}

static void keep(stream_watch_t *w, const char *data, size_t len)
{
    size_t room = sizeof w->line - w->line_len;
    if (len > room) {
        len = room;
        w->line_over = true;
    }
    memcpy(w->line + w->line_len, data, len);
    w->line_len += len;
}

void stream_watch_feed(stream_watch_t *w, const char *data, size_t len)
{
    if (w->kind != STREAM_SSE && w->kind != STREAM_NDJSON)
        return;
    while (len) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        keep(w, data, n);
        if (!nl)
            return;
        read_line(w);
        data += n + 1;
        len -= n + 1;
    }
}

void stream_watch_end(stream_watch_t *w)
{
    if ((w->kind == STREAM_SSE || w->kind == STREAM_NDJSON) && w->line_len)
        read_line(w);
}

bool stream_watch_incomplete(const stream_watch_t *w)
{
    return w->expects_done && !w->saw_done && !w->saw_error;
}
