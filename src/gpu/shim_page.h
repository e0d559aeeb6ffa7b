/*
 * shim_page: vramd's side of an instance's grant page (gpu/shim_abi.h): the file is made
 * (0600, never following a link, never reusing an existing file), mapped, and its header
 * written before the worker starts; vramd then sets the grant, reads what the shims wrote,
 * and clears the slots of processes that are gone. The mapping is vramd's until
 * shim_page_destroy, which unmaps it and removes the file (a worker still mapping it keeps
 * its own mapping: the kernel frees the pages with the last one).
 *
 * Invariants: a slot is cleared only here, and its live bytes leave live_total with it, so
 * a crashed process never leaves its bytes counted; the figures read are a consistent sum
 * of the slots at the time of the read, not an atomic snapshot of all of them (each slot is
 * read atomically). No I/O but the file's creation and removal; no thread of its own.
 * Return convention: 0 ok, -1 error with a message in err.
 */
#ifndef VRAMD_GPU_SHIM_PAGE_H
#define VRAMD_GPU_SHIM_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu/shim_abi.h"

typedef struct shim_page_figures {
    uint64_t grant;
    uint64_t live;        /* live_total as the shims keep it */
    uint64_t parked;      /* the slots' parked bytes (in host memory: the shim park tier) */
    uint64_t peak;        /* the largest process peak */
    uint64_t allocs, asks, waits, refusals;
    unsigned attached, detached; /* processes by state */
} shim_page_figures_t;

/* Make the page at path (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), write its header (grant 0). */
int shim_page_create(const char *path, uint64_t epoch, uint64_t gpu_total, shim_page_t **out, char *err,
                     size_t errlen);
/* Unmap and (path not NULL) unlink. NULL page: nothing. */
void shim_page_destroy(shim_page_t *p, const char *path);
void shim_page_set_grant(shim_page_t *p, uint64_t grant);
uint64_t shim_page_grant(const shim_page_t *p);
uint64_t shim_page_live(const shim_page_t *p);
/* Add n to live_total (a grant answered: the shim adds nothing more for it). */
void shim_page_charge(shim_page_t *p, uint64_t n);
void shim_page_read(const shim_page_t *p, shim_page_figures_t *out);
/* The pid a slot holds (0 free, or an out-of-range slot). */
pid_t shim_page_slot_pid(const shim_page_t *p, unsigned slot);
/* Clear slot (its process is gone): its live bytes leave live_total. Returns those bytes. */
uint64_t shim_page_clear_slot(shim_page_t *p, unsigned slot);
/* Clear every used slot whose pid is_gone(pid, ctx) says is gone (vramd's pid namespace);
 * returns how many were cleared, *bytes (may be NULL) the live bytes they held. */
unsigned shim_page_reap(shim_page_t *p, bool (*is_gone)(pid_t pid, void *ctx), void *ctx, uint64_t *bytes);
/* vramd_alive = 0 (vramd stops serving it: shims detach at their next slow path). */
void shim_page_orphan(shim_page_t *p);

#endif
