/*
 * shim_park: the CUDA shim's park tier, the process's side (docs/shim.md, "Parking through
 * the shim"). With $VRAMD_SHIM_PARK=1, a cuMemAlloc_v2 of at least the driver's granularity
 * is backed by the driver's virtual memory management (cuMemAddressReserve + cuMemCreate +
 * cuMemMap + cuMemSetAccess), so its address survives a park: on PARK (vramd asks, only when
 * the instance has nothing in flight) the shim closes its gate (every wrapped call waits),
 * synchronizes, copies every such allocation to pinned host memory (cuMemHostAlloc; the copies
 * queued back to back, then one synchronize), unmaps it and releases the physical memory; on
 * RESTORE it creates the physical memory again, maps it at the same address, copies it back
 * and opens the gate. Smaller allocations, and the other calls of the family (pitched,
 * managed, stream-ordered, a program's own cuMemCreate), go to the driver as before: they
 * stay on the GPU while parked, up to SHIM_PARK_UNMOVABLE_MAX bytes; past that the park is
 * refused (SHIM_PARK_UNMOVABLE) and vramd takes the next tier.
 * The control connection (gpu/shim_abi.h) is served by a thread of its own, started at the
 * first allocation of each process (again in a forked child), so that vramd hears why a
 * process whose memory cannot move refuses.
 * Invariants: the table of parkable allocations changes only with the gate open (read side
 * held by the caller) under its own lock; a park or restore holds the gate's write side, and
 * a parked process keeps it closed until its restore; the bytes are moved between live and
 * parked on the page (shim_client_move) only once every copy of the round succeeded.
 */
#ifndef VRAMD_SHIM_PARK_H
#define VRAMD_SHIM_PARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Resolves a driver entry point the shim calls itself: base name for cuGetProcAddress, full
 * name for dlsym; NULL when the driver has none. Given by the caller (shim_hooks.c, which
 * knows how the program reached the driver), so this file calls nothing above it. */
typedef void *(*shim_resolve_fn)(const char *base, const char *full);

/* Are allocations backed so they can be parked ($VRAMD_SHIM_PARK=1 with the page in use)? */
bool shim_park_enabled(void);
/* The bytes a parkable allocation of n takes (n rounded up to the granularity), or 0 when n
 * is not one (too small, park off, or the driver lacks the calls: resolve finds them). */
uint64_t shim_park_size(uint64_t n, shim_resolve_fn resolve);
/* Allocate `size` (from shim_park_size) at a fixed address: CUDA_SUCCESS with *dptr set, or
 * the driver's error (nothing left behind). */
int shim_park_alloc(uint64_t *dptr, uint64_t size);
/* Free p when it is one of the shim's parkable allocations: true and *rc set (its size in
 * *size); false when it is not (the caller frees it through the driver). */
bool shim_park_free(uint64_t p, int *rc, uint64_t *size);
/* After any allocation went through: the control thread is started (once per process). */
void shim_park_note_alloc(void);
/* The gate around every wrapped call: enter waits while a park holds it. */
void shim_park_enter(void);
void shim_park_leave(void);

#endif
