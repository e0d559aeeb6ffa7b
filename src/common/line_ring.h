/*
 * line_ring: a bounded ring of recent text lines (a model's worker output, for
 * GET /v1/models/NAME/logs). Each line gets the next sequence number (1, 2, ...), so a
 * reader that polls with "after SEQ" gets each line once and sees when lines it had not
 * read were dropped (the first seq kept is past its cursor).
 *
 * Bounds: at most max_lines lines and max_bytes bytes of text (the oldest lines go first);
 * each line is cut to LINE_RING_LINE_MAX bytes. max_lines 0 keeps nothing. Memory is taken
 * on the first push (one pointer array of max_lines, one allocation per line) and given
 * back by line_ring_free; line_ring_set_limits trims at once.
 * Invariants: count <= max_lines, bytes <= max_bytes; seq of the i-th kept line (oldest
 * first) is first_seq + i. Not thread-safe (one event loop).
 */
#ifndef VRAMD_COMMON_LINE_RING_H
#define VRAMD_COMMON_LINE_RING_H

#include <stddef.h>
#include <stdint.h>

#define LINE_RING_LINE_MAX 4096

typedef struct line_entry {
    uint64_t wall_ms;
    int pid;
    char stream;   /* 'o' stdout, 'e' stderr */
    size_t len;
    char text[];   /* NUL-terminated */
} line_entry_t;

typedef struct line_ring {
    line_entry_t **slots; /* max_lines slots; NULL until the first push */
    size_t cap;           /* slots allocated */
    size_t head;          /* slot of the oldest line */
    size_t count;
    size_t bytes;         /* text bytes kept */
    size_t max_lines, max_bytes;
    uint64_t next_seq;    /* seq the next pushed line gets (starts at 1) */
    uint64_t dropped;     /* lines pushed out by the bounds (or not kept: max_lines 0) */
} line_ring_t;

void line_ring_init(line_ring_t *r, size_t max_lines, size_t max_bytes);
/* Change the bounds (config reload); lines past them are dropped now. */
void line_ring_set_limits(line_ring_t *r, size_t max_lines, size_t max_bytes);
/* Append one line (cut to LINE_RING_LINE_MAX, and to max_bytes). -1 when out of memory
 * (the line is lost, counted in dropped, and gets no seq), else 0. */
int line_ring_push(line_ring_t *r, uint64_t wall_ms, int pid, char stream, const char *text, size_t len);
/* The seq of the oldest line kept (next_seq when none). */
uint64_t line_ring_first_seq(const line_ring_t *r);
/* The line with this seq, or NULL when it is not kept. */
const line_entry_t *line_ring_get(const line_ring_t *r, uint64_t seq);
void line_ring_free(line_ring_t *r);

#endif
