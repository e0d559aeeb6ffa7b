/*
 * buf: a growable byte buffer with a hard maximum.
 *
 * Every buffer in vramd is created with the largest size it may ever reach (from the
 * config's limits), so that no input can make vramd allocate without bound.
 * Invariants: len <= cap <= max (cap may be 0 with data NULL); data is NUL-terminated
 * after len whenever cap > len (handy for parsers that want a C string, never relied on
 * for binary data).
 * Fails closed (as curl's dynbuf): an append that would pass the maximum, or that runs out
 * of memory, empties the buffer and marks it failed; every later append fails too, until
 * buf_reset or buf_free. So a writer that builds a message and checks once at the end
 * (buf_failed) can never send half of one. Members are read through the functions here;
 * only buf.c writes them.
 * Return convention: 0 on success, -1 when the maximum would be exceeded or memory ran out
 * (the buffer is then failed). buf_room tells beforehand whether n more bytes fit.
 *
 * Budgets: a buffer may be charged to a byte budget (buf_budget_t, shared by many buffers:
 * core/mem_budget.c's for what vramd holds on behalf of requests). Its allocated capacity is
 * what is charged: a growth that would pass the budget's limit fails the buffer like any
 * other (buf_over_budget tells it apart), and freeing, failing or stealing the bytes gives
 * them back. Invariant: a budget's `used` is the sum of the capacities of the buffers
 * charged to it (buf_adopt charges even past the limit: those bytes exist already).
 */
#ifndef VRAMD_COMMON_BUF_H
#define VRAMD_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct buf_budget {
    uint64_t limit;   /* 0 = no limit */
    uint64_t used;    /* bytes charged now */
    uint64_t peak;
    uint64_t refused; /* growths refused */
} buf_budget_t;

typedef struct buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max;
    int failed; /* an append failed: empty, and appends fail until buf_reset / buf_free;
                   BUF_FAILED_BUDGET when it was the budget's limit */
    buf_budget_t *budget; /* charged with cap, or NULL */
} buf_t;

#define BUF_FAILED_BUDGET 2

void buf_init(buf_t *b, size_t max);
/* Charge the buffer (and its present capacity) to a budget from now on (NULL: none). */
void buf_set_budget(buf_t *b, buf_budget_t *budget);
/* Did the last failure come from the budget's limit? */
int buf_over_budget(const buf_t *b);
/* Would n more bytes of budget be available now? */
int buf_budget_fits(const buf_budget_t *bb, uint64_t n);
void buf_free(buf_t *b);
int buf_reserve(buf_t *b, size_t extra);
/* The same, allocating exactly len + extra (+ the NUL) when it must grow (a body whose
 * length is known: the budget is charged what it needs, not the next power of two). */
int buf_reserve_exact(buf_t *b, size_t extra);
int buf_append(buf_t *b, const void *p, size_t n);
int buf_append_str(buf_t *b, const char *s);
int buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(buf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Did an append fail since the last reset? */
int buf_failed(const buf_t *b);
/* Bytes that may still be appended before the maximum. */
size_t buf_room(const buf_t *b);
/* Give a buffer back the bytes taken by buf_steal (p came from this buffer, cap its size). */
void buf_adopt(buf_t *b, char *p, size_t len, size_t cap);
/* Drop the first n bytes (n <= len), moving the rest to the front. */
void buf_consume(buf_t *b, size_t n);
void buf_reset(buf_t *b);
/* Hand the bytes over to the caller (who frees them); the buffer becomes empty. */
char *buf_steal(buf_t *b, size_t *len);

#endif
