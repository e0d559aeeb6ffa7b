/* line_ring: a bounded ring of recent text lines. See line_ring.h. */
#include "common/line_ring.h"

#include <stdlib.h>
#include <string.h>

void line_ring_init(line_ring_t *r, size_t max_lines, size_t max_bytes)
{
    memset(r, 0, sizeof *r);
    r->max_lines = max_lines;
    r->max_bytes = max_bytes;
    r->next_seq = 1;
}

static void drop_oldest(line_ring_t *r)
{
    line_entry_t *e = r->slots[r->head];
    r->bytes -= e->len;
    free(e);
    r->slots[r->head] = NULL;
    r->head = (r->head + 1) % r->cap;
    r->count--;
    r->dropped++;
}

/* Move the kept lines into a new slot array of cap new_cap (>= count). -1 when out of memory. */
static int reslot(line_ring_t *r, size_t new_cap)
{
    line_entry_t **s = calloc(new_cap ? new_cap : 1, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < r->count; i++)
        s[i] = r->slots[(r->head + i) % r->cap];
    free(r->slots);
    r->slots = s;
    r->cap = new_cap;
    r->head = 0;
    return 0;
}

void line_ring_set_limits(line_ring_t *r, size_t max_lines, size_t max_bytes)
{
    r->max_lines = max_lines;
    r->max_bytes = max_bytes;
    while (r->count > 0 && (r->count > max_lines || r->bytes > max_bytes))
        drop_oldest(r);
    if (r->slots && r->cap != max_lines && max_lines > 0 && reslot(r, max_lines) != 0)
        return; /* keeps the old array: still bounded by count <= max_lines */
    if (max_lines == 0) {
        free(r->slots);
        r->slots = NULL;
        r->cap = 0;
        r->head = 0;
    }
}

int line_ring_push(line_ring_t *r, uint64_t wall_ms, int pid, char stream, const char *text, size_t len)
{
    if (len > LINE_RING_LINE_MAX)
        len = LINE_RING_LINE_MAX;
    if (len > r->max_bytes)
        len = r->max_bytes;
    if (r->max_lines == 0) {
        r->next_seq++;
        r->dropped++;
        return 0;
    }
    if (!r->slots && reslot(r, r->max_lines) != 0) {
        r->dropped++;
        return -1;
    }
    line_entry_t *e = malloc(sizeof *e + len + 1);
    if (!e) {
        r->dropped++;
        return -1;
    }
    e->wall_ms = wall_ms;
    e->pid = pid;
    e->stream = stream;
    e->len = len;
    memcpy(e->text, text, len);
    e->text[len] = '\0';
    while (r->count > 0 && (r->count >= r->cap || r->count >= r->max_lines || r->bytes + len > r->max_bytes))
        drop_oldest(r);
    r->next_seq++;
    r->slots[(r->head + r->count) % r->cap] = e;
    r->count++;
    r->bytes += len;
    return 0;
}

uint64_t line_ring_first_seq(const line_ring_t *r)
{
    return r->next_seq - r->count;
}

const line_entry_t *line_ring_get(const line_ring_t *r, uint64_t seq)
{
    uint64_t first = line_ring_first_seq(r);
    if (seq < first || seq >= r->next_seq)
        return NULL;
    return r->slots[(r->head + (size_t)(seq - first)) % r->cap];
}

void line_ring_free(line_ring_t *r)
{
    while (r->count > 0)
        drop_oldest(r);
    free(r->slots);
    r->slots = NULL;
    r->cap = 0;
}
