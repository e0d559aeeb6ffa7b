/*
 * test_route_docs: vramd's own route table (serve/api.h api_route_tables: api.c's rows, then
 * jobs_api.c's) against the table of docs/api.md "vramd's own routes", and the table's
 * own rules.
 * Covers: the same rows on both sides, as a multiset of (methods, path, token, reserve)
 * (docs write `{name}` where the table has '*'): a row either side has and the other lacks,
 * or a row written twice, fails and is named; every row is well formed ('*' a whole segment,
 * "**" only last, at most ROUTE_ARGS_MAX, a handler, rows sharing a pattern share own_path
 * and arg_ok and take disjoint methods, a 401 message only on admin rows); and the answers
 * the table gives for paths whose behaviour it must keep (405 only under /v1/jobs; another
 * method on vramd's other paths goes on to the router; a malformed job id is the last row).
 * Runs from the repository root (tests/run_tests.py does), where docs/api.md is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "serve/route_table.h"

#define MAX_ROWS 128
#define KEY_MAX 256

static const char docs_path[] = "docs/api.md";
static const char docs_header[] = "| method | path | token | reserve | answer |";

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A row's key: "GET, HEAD /v1/models/<star>/ready token=no reserve=yes". */
static void row_key(const api_route_t *row, char *key, size_t size)
{
    char methods[64];
    route_methods_text(row->methods, ", ", methods, sizeof methods);
    snprintf(key, size, "%s %s token=%s reserve=%s", methods, row->path, row->access == API_ADMIN ? "yes" : "no",
             row->reserve ? "yes" : "no");
}

static size_t table_keys(char **keys)
{
    size_t n = 0;
    for (const api_route_t *const *t = api_route_tables(); *t; t++)
        for (const api_route_t *row = *t; row->path; row++) {
            assert_true(n < MAX_ROWS);
            keys[n] = malloc(KEY_MAX);
            assert_non_null(keys[n]);
            row_key(row, keys[n++], KEY_MAX);
        }
    return n;
}

/* cell without its blanks and backticks, "{...}" written as '*', into out. */
static void cell_text(const char *cell, size_t len, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < size; i++) {
        if (cell[i] == '`')
            continue;
        if (cell[i] == '{') {
            const char *close = memchr(cell + i, '}', len - i);
            assert_non_null(close);
            i = (size_t)(close - cell);
            out[o++] = '*';
            continue;
        }
        out[o++] = cell[i];
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
    size_t lead = strspn(out, " ");
    memmove(out, out + lead, strlen(out + lead) + 1);
}

/* One docs row "| m | p | t | r | answer |" as a key. */
static void docs_key(const char *line, char *key, size_t size)
{
    char cells[4][KEY_MAX];
    const char *p = line + 1;
    for (int i = 0; i < 4; i++) {
        const char *bar = strchr(p, '|');
        if (!bar)
            fail_msg("%s: a row with fewer than 5 cells: %s", docs_path, line);
        cell_text(p, (size_t)(bar - p), cells[i], sizeof cells[i]);
        p = bar + 1;
    }
    snprintf(key, size, "%s %s token=%s reserve=%s", cells[0], cells[1], cells[2], cells[3]);
}

static size_t docs_keys(char **keys)
{
    FILE *f = fopen(docs_path, "r");
    if (!f)
        fail_msg("%s: cannot open (run from the repository root)", docs_path);
    char line[16384];
    size_t n = 0;
    bool in_table = false, seen = false;
    while (fgets(line, sizeof line, f)) {
        if (!in_table) {
            in_table = strncmp(line, docs_header, sizeof docs_header - 1) == 0;
            seen |= in_table;
            continue;
        }
        if (line[0] != '|')
            break;
        if (strncmp(line, "|---", 4) == 0)
            continue;
        assert_true(n < MAX_ROWS);
        keys[n] = malloc(KEY_MAX);
        assert_non_null(keys[n]);
        docs_key(line, keys[n++], KEY_MAX);
    }
    fclose(f);
    if (!seen)
        fail_msg("%s: no table headed \"%s\"", docs_path, docs_header);
    return n;
}

static void test_docs_list_the_same_rows(void **state)
{
    (void)state;
    char *code[MAX_ROWS], *docs[MAX_ROWS];
    size_t nc = table_keys(code), nd = docs_keys(docs);
    qsort(code, nc, sizeof code[0], cmp_str);
    qsort(docs, nd, sizeof docs[0], cmp_str);
    size_t i = 0, j = 0, bad = 0;
    while (i < nc || j < nd) {
        int d = i == nc ? 1 : j == nd ? -1 : strcmp(code[i], docs[j]);
        if (d < 0)
            fprintf(stderr, "# in the route table, not in %s: %s\n", docs_path, code[i++]);
        else if (d > 0)
            fprintf(stderr, "# in %s, not in the route table: %s\n", docs_path, docs[j++]);
        else
            i++, j++;
        bad += d != 0;
    }
    for (i = 0; i < nc; i++)
        free(code[i]);
    for (j = 0; j < nd; j++)
        free(docs[j]);
    assert_true(nc > 0);
    if (bad)
        fail_msg("%zu row(s) differ between the route table and %s (listed above)", bad, docs_path);
}

/* '*' stands for whole segments, "**" only last; returns how many '*' segments. */
static unsigned pattern_stars(const char *p)
{
    unsigned n = 0;
    if (p[0] != '/')
        fail_msg("pattern \"%s\" does not start with '/'", p);
    for (const char *s = strchr(p, '*'); s; s = strchr(s + 1, '*')) {
        if (s[-1] != '/')
            fail_msg("pattern \"%s\": '*' inside a segment", p);
        if (s[1] == '*') {
            if (s[2] != '\0')
                fail_msg("pattern \"%s\": \"**\" before the end", p);
            break;
        }
        if (s[1] != '/' && s[1] != '\0')
            fail_msg("pattern \"%s\": '*' inside a segment", p);
        n++;
    }
    return n;
}

static void test_rows_are_well_formed(void **state)
{
    (void)state;
    for (const api_route_t *const *t = api_route_tables(); *t; t++) {
        for (const api_route_t *row = *t; row->path; row++) {
            assert_true(pattern_stars(row->path) <= ROUTE_ARGS_MAX);
            assert_non_null(row->handler);
            assert_true(row->methods != 0 && (row->methods & ~(unsigned)API_ANY) == 0);
            if (row->unauthorized && row->access != API_ADMIN)
                fail_msg("%s: a 401 message on a public row", row->path);
            for (const api_route_t *const *u = api_route_tables(); *u; u++)
                for (const api_route_t *o = *u; o->path; o++) {
                    if (o == row || strcmp(o->path, row->path) != 0)
                        continue;
                    if (o->own_path != row->own_path || o->arg_ok != row->arg_ok)
                        fail_msg("%s: rows of one pattern differ in own_path or arg_ok", row->path);
                    if (o->methods & row->methods)
                        fail_msg("%s: two rows take one method", row->path);
                }
        }
    }
}

static route_match_t find(unsigned method, const char *path)
{
    route_match_t m;
    route_find(api_route_tables(), method, path, strlen(path), &m);
    return m;
}

static void test_answers_kept(void **state)
{
    (void)state;
    static const char id[] = "/v1/jobs/0123456789abcdef0123456789abcdef";
    char result[sizeof id + 8];
    snprintf(result, sizeof result, "%s/result", id);
    route_match_t m = find(API_OTHER, id); /* PUT on a job: 405 naming its methods */
    assert_null(m.row);
    assert_true(m.first && m.first->own_path);
    assert_int_equal(m.allowed, API_GET | API_HEAD | API_DELETE);
    m = find(API_POST, result);
    assert_null(m.row);
    assert_true(m.first && m.first->own_path);
    assert_int_equal(m.allowed, API_GET | API_HEAD);
    m = find(API_OTHER, "/v1/jobs");
    assert_null(m.row);
    assert_true(m.first && m.first->own_path);
    static const char *const not_jobs[] = {"/v1/jobs/0123456789ABCDEF0123456789ABCDEF", "/v1/jobs/",
                                           "/v1/jobs/x/result", "/v1/jobs/0123456789abcdef0123456789abcdef/",
                                           "/v1/jobs/a/b/c"};
    for (size_t i = 0; i < sizeof not_jobs / sizeof not_jobs[0]; i++) {
        m = find(API_GET, not_jobs[i]);
        if (!m.row || strcmp(m.row->path, "/v1/jobs/**") != 0)
            fail_msg("GET %s: row %s, wanted the catch-all", not_jobs[i], m.row ? m.row->path : "(none)");
    }
    /* another method on vramd's other paths goes on to the router, as before the table */
    static const struct {
        unsigned method;
        const char *path;
    } to_router[] = {{API_POST, "/v1/status"}, {API_POST, "/"},        {API_DELETE, "/metrics"},
                     {API_GET, "/v1/admin/drain"}, {API_POST, "/v1/models/x/ready"},
                     {API_GET, "/v1/models/x/load"}, {API_POST, "/v1/models/x/y"}, {API_GET, "/v1/jobsx"}};
    for (size_t i = 0; i < sizeof to_router / sizeof to_router[0]; i++) {
        m = find(to_router[i].method, to_router[i].path);
        if (m.row || (m.first && m.first->own_path))
            fail_msg("%s: answered by vramd, wanted the router", to_router[i].path);
    }
    m = find(API_OTHER, "/healthz");
    assert_true(m.row && m.row->reserve);
    m = find(API_POST, "/v1/models//load"); /* the empty name is a name: 404 unknown_model */
    assert_true(m.row && m.row->access == API_ADMIN && m.args.len[0] == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_docs_list_the_same_rows),
        cmocka_unit_test(test_rows_are_well_formed),
        cmocka_unit_test(test_answers_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
