/*
 * route_table: the row of vramd's own route table and the one matcher over it (HAProxy's
 * cli_kw_list style: each module of serve/ hands a {0}-terminated array of rows; api.c
 * matches a request once against the NULL-terminated list of those arrays).
 *
 * A row: the methods it takes, a path pattern, its handler, the token it needs, whether a
 * connection on the reserve (past limits.max_connections) may reach it, whether another
 * method on its path is answered 405 here (else the request goes on to the router), an
 * optional check of its '*' segments, and an optional 401 message.
 *
 * Patterns are byte-exact over the path (the caller cuts the query off): no percent-
 * decoding, no case folding, no trailing-slash tolerance ("/healthz/" is not "/healthz").
 * '*' is one whole segment: any bytes but '/', possibly none ("/v1/models//load" names the
 * model ""); "**" as the last segment is the rest of the path, '/' included, possibly none.
 * A row whose arg_ok refuses one of its '*' segments does not match.
 *
 * Which row: the first row (tables in order, rows in order) whose pattern matches the path
 * decides the path's pattern; the rows with that same pattern string are its methods, and
 * the first of them that takes the request's method is the row. Rows sharing a pattern
 * share own_path and arg_ok (test_route_table checks vramd's tables).
 * Invariants: at most ROUTE_ARGS_MAX '*' per pattern; matching never allocates or copies:
 * the arguments are spans of the caller's path, valid while it is.
 */
#ifndef VRAMD_SERVE_ROUTE_TABLE_H
#define VRAMD_SERVE_ROUTE_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/types.h"
#include "http/http1.h"

/* Method bits of a row; API_OTHER is every method not named here (PUT, PATCH, ...). */
enum api_method {
    API_GET = 1u << 0,
    API_HEAD = 1u << 1,
    API_POST = 1u << 2,
    API_DELETE = 1u << 3,
    API_OTHER = 1u << 4,
    API_ANY = (1u << 5) - 1,
};

enum api_access {
    API_PUBLIC = 0, /* anyone */
    API_ADMIN,      /* "Authorization: Bearer TOKEN" when admin_token_file is set, else 401 */
};

#define ROUTE_ARGS_MAX 2

/* The '*' segments of the matched path, in order. */
typedef struct route_args {
    const char *arg[ROUTE_ARGS_MAX];
    size_t len[ROUTE_ARGS_MAX];
    unsigned n;
} route_args_t;

typedef void api_handler_fn(conn_t *c, request_t *r, const route_args_t *a);

typedef struct api_route {
    unsigned methods;                       /* enum api_method bits */
    const char *path;                       /* pattern; NULL ends a table */
    api_handler_fn *handler;                /* answers r exactly once (or parks it) */
    enum api_access access;                 /* checked before the handler runs */
    bool reserve;                           /* a reserve connection may reach it */
    bool own_path;                          /* another method on this path: 405 here */
    bool (*arg_ok)(const char *s, size_t n); /* each '*' must pass; NULL: any segment */
    const char *unauthorized;               /* API_ADMIN: the 401 message; NULL: the default */
} api_route_t;

/* The outcome of one match. */
typedef struct route_match {
    const api_route_t *row;   /* the row for this path and method; NULL when none */
    const api_route_t *first; /* the first row whose pattern matched; NULL: no pattern did */
    unsigned allowed;         /* the methods of the rows sharing first's pattern */
    route_args_t args;
} route_match_t;

/* The method bit of a request line's method (API_OTHER for one not named above). */
unsigned route_method(const char *head, http1_span_t method);

/* Match path[0..len) and a method bit against tables (NULL-terminated list of {0}-ended
 * arrays). Fills *m; m->row is NULL when no row takes this method on this path. */
void route_find(const api_route_t *const *tables, unsigned method, const char *path, size_t len,
                route_match_t *m);

/* methods as "GET, HEAD" (sep between names) or "any"; always NUL-terminated. */
void route_methods_text(unsigned methods, const char *sep, char *buf, size_t size);

/* The reserve rows as "/healthz, GET|HEAD /v1/status, ..." (methods left out for any);
 * always NUL-terminated, cut at size. */
void route_reserve_text(const api_route_t *const *tables, char *buf, size_t size);

#endif
