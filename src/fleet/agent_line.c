/* agent_line: HAProxy agent-check requests, weights and answer lines. See agent_line.h. */
#include "fleet/agent_line.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool is_blank(char ch) { return ch == ' ' || ch == '\t'; }

static bool name_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != '\0' && strchr("._-:/@+", ch) != NULL);
}

bool agent_request_complete(const char *buf, size_t len)
{
    return memchr(buf, '\n', len) != NULL || memchr(buf, '\r', len) != NULL;
}

/* printable copy of at most 24 bytes of what was refused, for the message */
static void quote(const char *s, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len && i < 24 && n + 1 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        out[n++] = (ch > 0x20 && ch < 0x7f && ch != '#') ? (char)ch : '?';
    }
    out[n] = '\0';
}

int agent_parse_request(const char *buf, size_t len, agent_req_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->target = AGENT_HOST;
    if (len > AGENT_REQ_MAX) {
        snprintf(err, errlen, "longer than %d bytes", AGENT_REQ_MAX);
        return -1;
    }
    /* the first line only */
    size_t end = 0;
    while (end < len && buf[end] != '\n' && buf[end] != '\r')
        end++;
    size_t b = 0, e = end;
    while (b < e && is_blank(buf[b]))
        b++;
    while (e > b && is_blank(buf[e - 1]))
        e--;
    if (b == e)
        return 0;
    const char *w = buf + b;
    size_t wl = e - b;
    /* a second word: the tier */
    size_t sp = 0;
    while (sp < wl && !is_blank(w[sp]))
        sp++;
    enum agent_tier tier = AGENT_TIER_ONE;
    char q[32];
    if (sp < wl) {
        const char *t = w + sp;
        size_t tl = wl - sp;
        while (tl > 0 && is_blank(*t)) {
            t++;
            tl--;
        }
        if (tl == 8 && memcmp(t, "resident", 8) == 0) {
            tier = AGENT_TIER_RESIDENT;
        } else if (tl == 4 && memcmp(t, "load", 4) == 0) {
            tier = AGENT_TIER_LOAD;
        } else {
            quote(t, tl, q, sizeof q);
            snprintf(err, errlen, "expected NAME, NAME resident or NAME load, got \"%s\" after the name", q);
            return -1;
        }
        wl = sp;
    }
    if (wl == 4 && memcmp(w, "host", 4) == 0) {
        if (tier != AGENT_TIER_ONE) {
            snprintf(err, errlen, "host takes no tier (resident or load are for a model)");
            return -1;
        }
        return 0;
    }
    if (wl >= 6 && memcmp(w, "model=", 6) == 0) {
        w += 6;
        wl -= 6;
        if (wl == 0) {
            snprintf(err, errlen, "model= names no model");
            return -1;
        }
    }
    for (size_t i = 0; i < wl; i++) {
        unsigned char ch = (unsigned char)w[i];
        if (is_blank((char)ch) || ch == ',') {
            quote(w, wl, q, sizeof q);
            snprintf(err, errlen, "expected host, model=NAME or NAME, got a comma in \"%s\"", q);
            return -1;
        }
        if (ch == '=') {
            quote(w, wl, q, sizeof q);
            snprintf(err, errlen, "unknown key in \"%s\" (expected model=NAME)", q);
            return -1;
        }
        if (!name_char(ch)) {
            quote(w, wl, q, sizeof q);
            snprintf(err, errlen, "byte 0x%02x not allowed in a model name (\"%s\")", ch, q);
            return -1;
        }
    }
    if (wl > AGENT_NAME_MAX) {
        snprintf(err, errlen, "model name longer than %d bytes", AGENT_NAME_MAX);
        return -1;
    }
    out->target = AGENT_MODEL;
    out->tier = tier;
    memcpy(out->name, w, wl);
    out->name[wl] = '\0';
    return 0;
}

/* a * b / c without overflow for the sizes here (bytes of GPU memory, c > 0) */
static uint64_t scale(uint64_t a, uint64_t b, uint64_t c)
{
    return (uint64_t)((double)a * (double)b / (double)c);
}

/* QUEUE, load tier: 100 with no wait, down to 20 at AGENT_QUEUE_LOADS load times */
static unsigned queue_weight(const agent_figures_t *f)
{
    if (f->load_ms == 0)
        return 100;
    uint64_t span = f->load_ms > UINT64_MAX / AGENT_QUEUE_LOADS ? UINT64_MAX : AGENT_QUEUE_LOADS * f->load_ms;
    uint64_t wait = f->wait_ms < span ? f->wait_ms : span;
    return 100 - (unsigned)scale(80, wait, span);
}

unsigned agent_weight(const agent_figures_t *f)
{
    if (f->down || f->draining)
        return 0;
    if (f->host) {
        if (f->capacity == 0)
            return 100;
        if (f->free == 0)
            return 0;
        uint64_t free = f->free > f->capacity ? f->capacity : f->free;
        uint64_t w = scale(100, free, f->capacity);
        return w < 1 ? 1 : (unsigned)w;
    }
    bool one = f->tier == AGENT_TIER_ONE, load = f->tier == AGENT_TIER_LOAD;
    switch (f->room) {
    case AGENT_ROOM_RESIDENT: {
        if (load)
            return 100;
        if (f->slots_ready == 0)
            return 50;
        unsigned fr = f->slots_free > f->slots_ready ? f->slots_ready : f->slots_free;
        return 50 + 50 * fr / f->slots_ready;
    }
    case AGENT_ROOM_WARMING:
        return load ? 50 : 10;
    case AGENT_ROOM_QUEUE:
        return load ? queue_weight(f) : one ? 10 : 0;
    case AGENT_ROOM_PARKED:
        return load ? 50 : one ? 10 : 0;
    case AGENT_ROOM_COLD_FITS: {
        if (!one && !load)
            return 0;
        unsigned lo = one ? 2 : 20, span = one ? 8 : 40;
        if (f->capacity == 0 || f->free <= f->need)
            return lo;
        uint64_t spare = f->free - f->need;
        if (spare > f->capacity)
            spare = f->capacity;
        return lo + (unsigned)scale(span, spare, f->capacity);
    }
    case AGENT_ROOM_COLD_EVICT:
        return load ? 2 : one ? 1 : 0;
    case AGENT_ROOM_WAIT:
        return load && !f->foreign_blocked ? 1 : 0;
    case AGENT_ROOM_FULL:
    default:
        return 0;
    }
}

void agent_set_down(agent_figures_t *f, const char *fmt, ...)
{
    char tmp[AGENT_REASON_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    for (char *p = tmp; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    memcpy(f->reason, tmp, sizeof f->reason);
    f->reason[AGENT_REASON_MAX] = '\0';
    f->down = true;
}

size_t agent_format(const agent_figures_t *f, char out[AGENT_LINE_MAX])
{
    unsigned maxconn = f->maxconn ? f->maxconn : 1;
    int n;
    if (f->draining)
        n = snprintf(out, AGENT_LINE_MAX, "0%% maxconn:%u drain\n", maxconn);
    else if (f->down)
        n = snprintf(out, AGENT_LINE_MAX, "0%% maxconn:%u ready down #%.*s\n", maxconn, AGENT_REASON_MAX,
                     f->reason[0] ? f->reason : "unavailable");
    else
        n = snprintf(out, AGENT_LINE_MAX, "%u%% maxconn:%u ready up\n", agent_weight(f), maxconn);
    if (n < 0) {
        out[0] = '\n';
        out[1] = '\0';
        return 1;
    }
    if ((size_t)n >= AGENT_LINE_MAX) { /* cannot happen with the bounds above; keep the line whole */
        out[AGENT_LINE_MAX - 2] = '\n';
        out[AGENT_LINE_MAX - 1] = '\0';
        return AGENT_LINE_MAX - 1;
    }
    return (size_t)n;
}

const char *agent_room_name(enum agent_room r)
{
    static const char *const names[] = {"resident", "warming",    "queue", "parked",
                                        "cold_fits", "cold_evict", "wait",  "full"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown";
}
