/*
 * shim_book: the CUDA shim's table of what it let through: a device pointer (or a
 * cuMemCreate handle) -> its bytes, so that a free gives back exactly what its allocation
 * took. Pure bookkeeping: no I/O, no locks (the caller holds one), bounded (SHIM_BOOK_CAP
 * entries, open addressing with tombstones; a full table refuses an entry, and that
 * allocation is then neither counted nor given back: the books stay balanced).
 * Invariants: bytes == the sum of the entries' bytes; a key is in the table at most once
 * per kind.
 */
#ifndef VRAMD_SHIM_BOOK_H
#define VRAMD_SHIM_BOOK_H

#include <stdbool.h>
#include <stdint.h>

#define SHIM_BOOK_CAP 65536u /* a power of two */

enum shim_book_kind { SHIM_KIND_PTR = 1, SHIM_KIND_HANDLE = 2 };

typedef struct shim_book_entry {
    uint64_t key;
    uint64_t bytes;
    uint8_t kind; /* 0 empty, 0xff tombstone, else enum shim_book_kind */
} shim_book_entry_t;

typedef struct shim_book {
    shim_book_entry_t e[SHIM_BOOK_CAP];
    uint64_t bytes;   /* sum of the entries */
    uint32_t used;    /* live entries */
    uint32_t dead;    /* tombstones */
} shim_book_t;

void shim_book_init(shim_book_t *b);
/* Add key -> bytes. false when the table is full or the key is there already. */
bool shim_book_add(shim_book_t *b, enum shim_book_kind kind, uint64_t key, uint64_t bytes);
/* Remove key: its bytes in *bytes. false when it is not there (a pointer the shim did not
 * count: a free of it passes through uncounted). */
bool shim_book_take(shim_book_t *b, enum shim_book_kind kind, uint64_t key, uint64_t *bytes);
/* 0 when the invariants hold. */
int shim_book_check(const shim_book_t *b);

#endif
