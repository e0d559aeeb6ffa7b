/*
 * shim_book: pointer -> bytes table of the CUDA shim (shim_book.h).
 */
#include "shim_book.h"

#include <string.h>

#define TOMB 0xffu

static uint32_t slot_of(enum shim_book_kind kind, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)kind << 61)) * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing */
    return (uint32_t)(h >> 48) & (SHIM_BOOK_CAP - 1);
}

void shim_book_init(shim_book_t *b) { memset(b, 0, sizeof *b); }

static shim_book_entry_t *find(shim_book_t *b, enum shim_book_kind kind, uint64_t key)
{
    uint32_t i = slot_of(kind, key);
    for (uint32_t n = 0; n < SHIM_BOOK_CAP; n++, i = (i + 1) & (SHIM_BOOK_CAP - 1)) {
        shim_book_entry_t *e = &b->e[i];
        if (e->kind == 0)
            return NULL;
        if (e->kind == kind && e->key == key)
            return e;
    }
    return NULL;
}

/* Rebuild without tombstones (when they fill a quarter of the table). */
static void compact(shim_book_t *b)
{
    static shim_book_entry_t g_old[SHIM_BOOK_CAP]; /* the caller holds the shim's lock */
    memcpy(g_old, b->e, sizeof g_old);
    memset(b->e, 0, sizeof b->e);
    b->dead = 0;
    for (uint32_t k = 0; k < SHIM_BOOK_CAP; k++) {
        if (g_old[k].kind == 0 || g_old[k].kind == TOMB)
            continue;
        uint32_t i = slot_of((enum shim_book_kind)g_old[k].kind, g_old[k].key);
        while (b->e[i].kind != 0)
            i = (i + 1) & (SHIM_BOOK_CAP - 1);
        b->e[i] = g_old[k];
    }
}

bool shim_book_add(shim_book_t *b, enum shim_book_kind kind, uint64_t key, uint64_t bytes)
{
    if (b->used + 1 > SHIM_BOOK_CAP * 3 / 4 || find(b, kind, key))
        return false;
    if (b->dead > SHIM_BOOK_CAP / 4)
        compact(b);
    uint32_t i = slot_of(kind, key);
    while (b->e[i].kind != 0 && b->e[i].kind != TOMB)
        i = (i + 1) & (SHIM_BOOK_CAP - 1);
    if (b->e[i].kind == TOMB)
        b->dead--;
    b->e[i] = (shim_book_entry_t){.key = key, .bytes = bytes, .kind = (uint8_t)kind};
    b->used++;
    b->bytes += bytes;
    return true;
}

bool shim_book_take(shim_book_t *b, enum shim_book_kind kind, uint64_t key, uint64_t *bytes)
{
    shim_book_entry_t *e = find(b, kind, key);
    if (!e)
        return false;
    *bytes = e->bytes;
    b->bytes -= e->bytes;
    e->kind = TOMB;
    b->used--;
    b->dead++;
    return true;
}

int shim_book_check(const shim_book_t *b)
{
    uint64_t sum = 0;
    uint32_t used = 0, dead = 0;
    for (uint32_t i = 0; i < SHIM_BOOK_CAP; i++) {
        if (b->e[i].kind == TOMB)
            dead++;
        else if (b->e[i].kind) {
            used++;
            sum += b->e[i].bytes;
        }
    }
    return sum == b->bytes && used == b->used && dead == b->dead ? 0 : -1;
}
