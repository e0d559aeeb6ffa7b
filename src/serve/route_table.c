/* route_table: the matcher over vramd's route rows and the texts made from them. See
 * route_table.h; nothing here allocates, and a match only points into the caller's path. */
#include "serve/route_table.h"

#include <stdio.h>
#include <string.h>

static const struct {
    unsigned bit;
    const char *name;
} method_names[] = {
    {API_GET, "GET"},
    {API_HEAD, "HEAD"},
    {API_POST, "POST"},
    {API_DELETE, "DELETE"},
};

#define N_METHOD_NAMES (sizeof method_names / sizeof method_names[0])

unsigned route_method(const char *head, http1_span_t method)
{
    for (size_t i = 0; i < N_METHOD_NAMES; i++)
        if (http1_span_eq(head, method, method_names[i].name))
            return method_names[i].bit;
    return API_OTHER;
}

/* row's pattern against path[0..len); its '*' spans into *a. */
static bool pattern_match(const api_route_t *row, const char *path, size_t len, route_args_t *a)
{
    const char *p = row->path;
    size_t i = 0;
    a->n = 0;
    while (*p) {
        if (p[0] == '*' && p[1] == '*' && p[2] == '\0')
            return true; /* the rest, whatever it is */
        if (p[0] != '*') {
            if (i >= len || path[i] != p[0])
                return false;
            i++;
            p++;
            continue;
        }
        size_t start = i;
        while (i < len && path[i] != '/')
            i++;
        if (a->n == ROUTE_ARGS_MAX || (row->arg_ok && !row->arg_ok(path + start, i - start)))
            return false;
        a->arg[a->n] = path + start;
        a->len[a->n++] = i - start;
        p++;
    }
    return i == len;
}

void route_find(const api_route_t *const *tables, unsigned method, const char *path, size_t len,
                route_match_t *m)
{
    route_args_t args;
    memset(m, 0, sizeof *m);
    for (const api_route_t *const *t = tables; *t; t++) {
        for (const api_route_t *row = *t; row->path; row++) {
            if (m->first ? strcmp(row->path, m->first->path) != 0 : !pattern_match(row, path, len, &args))
                continue;
            if (!m->first) {
                m->first = row;
                m->args = args;
            }
            m->allowed |= row->methods;
            if (!m->row && (row->methods & method))
                m->row = row;
        }
    }
}

/* Append s to buf (size bytes, *used so far), cut at size; always NUL-terminated. */
static void append(char *buf, size_t size, size_t *used, const char *s)
{
    size_t n = strlen(s);
    if (*used + 1 >= size)
        return;
    if (n > size - 1 - *used)
        n = size - 1 - *used;
    memcpy(buf + *used, s, n);
    *used += n;
    buf[*used] = '\0';
}

void route_methods_text(unsigned methods, const char *sep, char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    if ((methods & API_ANY) == API_ANY) {
        append(buf, size, &used, "any");
        return;
    }
    for (size_t i = 0; i < N_METHOD_NAMES; i++) {
        if (!(methods & method_names[i].bit))
            continue;
        if (used)
            append(buf, size, &used, sep);
        append(buf, size, &used, method_names[i].name);
    }
    if (methods & API_OTHER) {
        if (used)
            append(buf, size, &used, sep);
        append(buf, size, &used, "other");
    }
}

void route_reserve_text(const api_route_t *const *tables, char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    for (const api_route_t *const *t = tables; *t; t++) {
        for (const api_route_t *row = *t; row->path; row++) {
            if (!row->reserve)
                continue;
            if (used)
                append(buf, size, &used, ", ");
            if ((row->methods & API_ANY) != API_ANY) {
                char methods[64];
                route_methods_text(row->methods, "|", methods, sizeof methods);
                append(buf, size, &used, methods);
                append(buf, size, &used, " ");
            }
            append(buf, size, &used, row->path);
        }
    }
}
