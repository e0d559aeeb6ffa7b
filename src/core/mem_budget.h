/*
 * mem_budget: the host-memory budget for what vramd holds on behalf of requests
 * (limits.memory_budget): request bodies, the degradation ladder's copy of the original
 * body, and held answers (resp_body). Each of those buffers is charged to one process-wide
 * buf_budget_t by its allocated capacity (common/buf.h): growth past the limit fails the
 * buffer (the request gets 503 memory_budget), and the bytes come back when the buffer is
 * freed, failed or reset to nothing, so however a request ends its charge goes with it.
 *
 * The limit: limits.memory_budget when given; else ("auto") a quarter of what the host can
 * spare at start: min(MemAvailable from /proc/meminfo, the cgroup's room), never less than
 * limits.max_body (so one body of the largest size always fits); 1 GiB when neither can be
 * read. The cgroup's room: v2, the least memory.max - memory.current of the cgroup and its
 * ancestors; else v1 (memory controller mounted at /sys/fs/cgroup/memory),
 * hierarchical_memory_limit - memory.usage_in_bytes. The figure and where it came from are logged at
 * start (event memory_budget) and shown in /v1/status. A reload re-applies an explicit value
 * (auto keeps the figure measured at start).
 *
 * Not charged: connection input buffers (bounded per connection by max_header + one read),
 * answers streamed straight through (bounded by the client's write backlog mark), job files.
 */
#ifndef VRAMD_CORE_MEM_BUDGET_H
#define VRAMD_CORE_MEM_BUDGET_H

#include <stdint.h>

#include "common/buf.h"
#include "config/config.h"
#include "core/types.h"

#define MEM_BUDGET_FALLBACK (1ULL << 30)

/* Set the limit from the config (at start and after a reload); logs it at start. */
void mem_budget_configure(const config_t *cfg);
buf_budget_t *mem_budget(void);
/* "config", "meminfo", "cgroup" or "fallback". */
const char *mem_budget_source(void);
/* Charge a new request's body, ladder copy and held-answer buffers to the budget. */
void mem_budget_attach(request_t *r);
/* Reserve a body of n bytes (its Content-Length) before reading it: 0, or -1 when it would
 * pass the budget (nothing is then reserved). */
int mem_budget_reserve_body(request_t *r, uint64_t n);

#endif
