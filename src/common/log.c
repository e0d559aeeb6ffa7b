/* log: structured one-line-per-event logging. See log.h for the field mini-language. */
#include "common/log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum log_format g_format = LOG_FORMAT_JSON;
static enum log_level g_min = LOG_INFO;
static int g_fd = 2;

void log_configure(enum log_format format, enum log_level min_level, int fd)
{
    g_format = format;
    g_min = min_level;
    g_fd = fd;
}

bool log_enabled(enum log_level level) { return level >= g_min; }

const char *log_level_name(enum log_level level)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    return (level >= LOG_DEBUG && level <= LOG_ERROR) ? names[level] : "info";
}

int log_level_parse(const char *s)
{
    for (int i = LOG_DEBUG; i <= LOG_ERROR; i++)
        if (strcmp(s, log_level_name((enum log_level)i)) == 0)
            return i;
    return -1;
}

int log_format_parse(const char *s)
{
    if (strcmp(s, "json") == 0)
        return LOG_FORMAT_JSON;
    if (strcmp(s, "text") == 0)
        return LOG_FORMAT_TEXT;
    return -1;
}

size_t log_json_escape(char *out, size_t cap, const char *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 7 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': out[o++] = '\\'; out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; out[o++] = '\\'; break;
        case '\n': out[o++] = '\\'; out[o++] = 'n'; break;
        case '\r': out[o++] = '\\'; out[o++] = 'r'; break;
        case '\t': out[o++] = '\\'; out[o++] = 't'; break;
        default:
            if (c < 0x20 || c == 0x7f)
                o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
            else
                out[o++] = (char)c;
        }
    }
    return o;
}

typedef struct line {
    char buf[LOG_LINE_MAX];
    size_t len;
} line_t;

static void put(line_t *l, const char *s, size_t n)
{
    if (l->len + n >= sizeof l->buf - 2)
        n = sizeof l->buf - 2 - l->len;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void putf(line_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(line_t *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = sizeof l->buf - 2 - l->len;
    int n = vsnprintf(l->buf + l->len, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        l->len += (size_t)n < room ? (size_t)n : room - 1;
}

static void put_str(line_t *l, const char *s, bool json)
{
    if (!s) {
        put(l, json ? "null" : "-", json ? 4 : 1);
        return;
    }
    if (json) {
        put(l, "\"", 1);
        l->len += log_json_escape(l->buf + l->len, sizeof l->buf - 2 - l->len, s, strlen(s));
        put(l, "\"", 1);
    } else {
        bool quote = strchr(s, ' ') != NULL || *s == '\0';
        if (quote)
            put(l, "\"", 1);
        l->len += log_json_escape(l->buf + l->len, sizeof l->buf - 2 - l->len, s, strlen(s));
        if (quote)
            put(l, "\"", 1);
    }
}

void log_eventv(enum log_level level, const char *event, const char *fields, va_list ap)
{
    if (level < g_min)
        return;
    line_t l;
    l.len = 0;
    bool json = g_format == LOG_FORMAT_JSON;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char tsbuf[96];
    snprintf(tsbuf, sizeof tsbuf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    if (json) {
        putf(&l, "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":", tsbuf, log_level_name(level));
        put_str(&l, event, true);
    } else {
        putf(&l, "%s %-5s %s", tsbuf, log_level_name(level), event);
    }
    const char *p = fields ? fields : "";
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *eq = strchr(p, '=');
        if (!eq || eq[1] != '%') {
            put(&l, json ? ",\"log_format_error\":" : " log_format_error=", json ? 20 : 18);
            put_str(&l, p, json);
            break;
        }
        char key[64];
        size_t kl = (size_t)(eq - p) < sizeof key - 1 ? (size_t)(eq - p) : sizeof key - 1;
        memcpy(key, p, kl);
        key[kl] = '\0';
        if (json) {
            put(&l, ",", 1);
            put_str(&l, key, true);
            put(&l, ":", 1);
        } else {
            putf(&l, " %s=", key);
        }
        const char *spec = eq + 2;
        const char *end = spec;
        while (*end && *end != ' ')
            end++;
        size_t sl = (size_t)(end - spec);
        if (sl == 1 && *spec == 's') {
            put_str(&l, va_arg(ap, const char *), json);
        } else if (sl == 3 && !strncmp(spec, ".*s", 3)) {
            int n = va_arg(ap, int);
            const char *v = va_arg(ap, const char *);
            char span[512];
            if (v)
                snprintf(span, sizeof span, "%.*s", n < 0 ? 0 : n, v);
            put_str(&l, v ? span : NULL, json);
        } else if (sl == 1 && *spec == 'd') {
            putf(&l, "%d", va_arg(ap, int));
        } else if (sl == 1 && *spec == 'u') {
            putf(&l, "%u", va_arg(ap, unsigned));
        } else if (sl == 2 && !strncmp(spec, "ld", 2)) {
            putf(&l, "%ld", va_arg(ap, long));
        } else if (sl == 2 && !strncmp(spec, "lu", 2)) {
            putf(&l, "%lu", va_arg(ap, unsigned long));
        } else if (sl == 3 && !strncmp(spec, "lld", 3)) {
            putf(&l, "%lld", va_arg(ap, long long));
        } else if (sl == 3 && !strncmp(spec, "llu", 3)) {
            putf(&l, "%llu", va_arg(ap, unsigned long long));
        } else if (sl == 2 && !strncmp(spec, "zu", 2)) {
            putf(&l, "%zu", va_arg(ap, size_t));
        } else if (sl == 1 && *spec == 'f') {
            putf(&l, "%.6g", va_arg(ap, double));
        } else if (sl == 1 && *spec == 'B') {
            const char *v = va_arg(ap, int) ? "true" : "false";
            put(&l, v, strlen(v));
        } else if (sl == 1 && *spec == 'J') {
            const char *v = va_arg(ap, const char *);
            if (json) {
                put(&l, v ? v : "null", v ? strlen(v) : 4);
            } else {
                put_str(&l, v, false);
            }
        } else {
            put(&l, "\"log_format_error\"", 18);
            break;
        }
        p = end;
    }
    if (json)
        put(&l, "}", 1);
    l.buf[l.len++] = '\n';
    ssize_t w = write(g_fd, l.buf, l.len);
    (void)w;
}

void log_event(enum log_level level, const char *event, const char *fields, ...)
{
    va_list ap;
    va_start(ap, fields);
    log_eventv(level, event, fields, ap);
    va_end(ap);
}
