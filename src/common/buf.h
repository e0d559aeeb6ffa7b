/*
 * buf: a growable byte buffer with a hard maximum.
 *
 * Every buffer in vramd is created with the largest size it may ever reach (from the
 * config's limits), so that no input can make vramd allocate without bound.
 * Invariants: len <= cap <= max (cap may be 0 with data NULL); data is NUL-terminated
 * after len whenever cap > len (handy for parsers that want a C string, never relied on
 * for binary data).
 * Return convention: 0 on success, -1 when the maximum would be exceeded (buffer
 * unchanged) or memory ran out.
 */
#ifndef VRAMD_COMMON_BUF_H
#define VRAMD_COMMON_BUF_H

#include <stddef.h>

typedef struct buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max;
} buf_t;

void buf_init(buf_t *b, size_t max);
void buf_free(buf_t *b);
int buf_reserve(buf_t *b, size_t extra);
int buf_append(buf_t *b, const void *p, size_t n);
int buf_append_str(buf_t *b, const char *s);
int buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the first n bytes (n <= len), moving the rest to the front. */
void buf_consume(buf_t *b, size_t n);
void buf_reset(buf_t *b);
/* Hand the bytes over to the caller (who frees them); the buffer becomes empty. */
char *buf_steal(buf_t *b, size_t *len);

#endif
