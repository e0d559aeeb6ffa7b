/*
 * host_book: the daemon's one host-memory ledger (policy/host_ledger.h) for parked
 * instances, kept in step with the config's host_memory {budget, reserve}, and the host
 * read at each park (gpu/host_mem.h: min(MemAvailable, cgroup room)).
 *
 * budget auto: half of min(MemAvailable, cgroup room) measured the first time it is needed
 * (at start: /v1/status asks at once), HOST_BOOK_FALLBACK when neither can be read; a reload
 * re-applies an explicit value (auto keeps the figure measured at start).
 *
 * Invariants: an instance holds at most one entry (inst->park.parked_host), booked only by
 * host_book_park and given back by host_book_release, which instance_set_state calls for
 * every state but PARKING, PARKED and RESUMING, so every way a park ends releases it.
 * Loop thread only. The lowest file of the supervisor (see supervisor_int.h).
 */
#ifndef VRAMD_WORKERS_HOST_BOOK_H
#define VRAMD_WORKERS_HOST_BOOK_H

#include <stdint.h>

#include "config/config.h"
#include "core/model.h"
#include "policy/host_ledger.h"

#define HOST_BOOK_FALLBACK (4ULL << 30)

/* The ledger, its limits set from cfg (a changed config is applied here; NULL: as it is). */
const host_ledger_t *host_book(const config_t *cfg);
/* "config", "meminfo", "cgroup" or "fallback": where the budget came from. */
const char *host_book_source(void);
/* Book a park of `bytes` for inst, the host read now: HOST_FITS, or why it was refused. */
enum host_verdict host_book_park(instance_t *inst, uint64_t bytes);
/* The park is done: it holds `bytes` (what left the GPU, at most what was booked). */
void host_book_settle(instance_t *inst, uint64_t bytes);
/* The park ended however it ended; harmless when nothing is held. */
void host_book_release(instance_t *inst);
/* Bytes the instances of model `name` hold parked. */
uint64_t host_book_parked_by(const char *name);

#endif
