/* buf: growable byte buffer with a hard maximum. See buf.h for the invariants. */
#include "common/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf_t *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
    b->failed = 0;
    b->budget = NULL;
}

/* ---- budget ---------------------------------------------------------------------------- */

static void give(buf_t *b, size_t n)
{
    if (!b->budget || n == 0)
        return;
    b->budget->used = b->budget->used > n ? b->budget->used - n : 0;
}

static void charge(buf_budget_t *bb, uint64_t n)
{
    bb->used += n;
    if (bb->used > bb->peak)
        bb->peak = bb->used;
}

int buf_budget_fits(const buf_budget_t *bb, uint64_t n)
{
    return !bb || !bb->limit || (bb->used <= bb->limit && n <= bb->limit - bb->used);
}

/* Take n more bytes of the buffer's budget; 0, or -1 when they would pass its limit. */
static int take(buf_t *b, size_t n)
{
    if (!b->budget)
        return 0;
    if (!buf_budget_fits(b->budget, n)) {
        b->budget->refused++;
        return -1;
    }
    charge(b->budget, n);
    return 0;
}

void buf_set_budget(buf_t *b, buf_budget_t *budget)
{
    give(b, b->cap);
    b->budget = budget;
    if (budget)
        charge(budget, b->cap);
}

int buf_over_budget(const buf_t *b) { return b->failed == BUF_FAILED_BUDGET; }

/* ---- the buffer ------------------------------------------------------------------------ */

void buf_free(buf_t *b)
{
    give(b, b->cap);
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

static int fail_as(buf_t *b, int why)
{
    give(b, b->cap);
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = why;
    return -1;
}

static int fail(buf_t *b) { return fail_as(b, 1); }

int buf_failed(const buf_t *b) { return b->failed; }

size_t buf_room(const buf_t *b) { return b->failed || b->len >= b->max ? 0 : b->max - b->len; }

void buf_adopt(buf_t *b, char *p, size_t len, size_t cap)
{
    give(b, b->cap);
    free(b->data);
    b->data = p;
    b->len = len;
    b->cap = cap;
    b->failed = 0;
    if (b->budget)
        charge(b->budget, cap); /* those bytes exist already: charged even past the limit */
}

/* Grow to cap bytes (more than now), charging the budget first. */
static int grow(buf_t *b, size_t cap)
{
    if (take(b, cap - b->cap) != 0)
        return fail_as(b, BUF_FAILED_BUDGET);
    char *p = realloc(b->data, cap);
    if (!p) {
        give(b, cap - b->cap);
        return fail(b);
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static int reserve(buf_t *b, size_t extra, int exact)
{
    if (b->failed)
        return -1;
    if (extra > b->max || b->len > b->max - extra)
        return fail(b);
    size_t need = b->len + extra + 1; /* room for the trailing NUL */
    if (need <= b->cap)
        return 0;
    size_t cap = exact ? need : (b->cap ? b->cap : 256);
    while (cap < need)
        cap = cap > ((size_t)-1) / 2 ? need : cap * 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    if (cap < need)
        cap = need;
    return grow(b, cap);
}

int buf_reserve(buf_t *b, size_t extra) { return reserve(b, extra, 0); }

int buf_reserve_exact(buf_t *b, size_t extra) { return reserve(b, extra, 1); }

int buf_append(buf_t *b, const void *p, size_t n)
{
    if (b->failed)
        return -1;
    if (n == 0)
        return 0;
    if (buf_reserve(b, n) != 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(buf_t *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_vprintf(buf_t *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0 || b->failed) {
        va_end(again);
        return n < 0 ? fail(b) : -1;
    }
    if ((size_t)n < sizeof small) {
        va_end(again);
        return buf_append(b, small, (size_t)n);
    }
    if (buf_reserve(b, (size_t)n) != 0) {
        va_end(again);
        return -1;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
    va_end(again);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void buf_consume(buf_t *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
    }
    if (b->data)
        b->data[b->len] = '\0';
}

void buf_reset(buf_t *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->data)
        b->data[0] = '\0';
}

char *buf_steal(buf_t *b, size_t *len)
{
    give(b, b->cap); /* the bytes are the caller's now */
    char *p = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
    return p;
}
