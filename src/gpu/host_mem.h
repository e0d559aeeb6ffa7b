/*
 * host_mem: what the host can still give, read from the kernel: MemAvailable in
 * /proc/meminfo and the room left in vramd's cgroup (v2: memory.max - memory.current).
 * Used by core/mem_budget.c (the auto request-buffer budget) and workers/park.c (the
 * host-memory budget for parked models, checked at each park).
 *
 * Invariants: every reader returns 0 for "unknown" (file missing, unreadable, "max"); the
 * cgroup room is never 0 when a limit exists (a full cgroup reads as 1 byte). No state.
 */
#ifndef VRAMD_GPU_HOST_MEM_H
#define VRAMD_GPU_HOST_MEM_H

#include <stdint.h>

/* MemAvailable in bytes; 0 when unknown. */
uint64_t host_mem_available(void);
/* What vramd's cgroup still allows: v2, the least memory.max - memory.current of the cgroup
 * and its ancestors; else v1 (memory controller at /sys/fs/cgroup/memory),
 * hierarchical_memory_limit - memory.usage_in_bytes; 0 when unlimited or unknown. */
uint64_t host_mem_cgroup_room(void);
/* min of the two that are known; 0 when neither is. *source (may be NULL) becomes
 * "meminfo", "cgroup" or "none". avail and room (may be NULL) get the two readings. */
uint64_t host_mem_room(const char **source, uint64_t *avail, uint64_t *room);

#endif
