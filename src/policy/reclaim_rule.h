/*
 * reclaim_rule: when the memory a live process gave back (an unload or sleep hook, a
 * checkpoint) counts as reclaimed, from one NVML reading at a time (the verified reclaim,
 * docs/design.md "Memory"; sched_snapshot.c's check_reclaim applies it). Pure: no clock, no
 * I/O, no daemon state.
 *
 * A reclaim of `booked` bytes is settled at a reading `measured` when at least half came
 * back (measured <= booked / 2) and one of:
 *   - little is left: measured <= booked / 10;
 *   - it is down to what the process is known to keep (`keep`: its CUDA context measured
 *     while it started, or the leftover of its last settled reclaim), within
 *     RECLAIM_KEEP_SLACK + booked / 100: nothing more is coming back, so there is nothing to
 *     wait for;
 *   - the usage held still (no drop of more than booked / 100) for RECLAIM_STABLE_READINGS
 *     readings in a row: the guard for a driver that releases memory late, when what stays
 *     is more than the process is known to keep (or nothing is known).
 * Invariant: never settled while more than half of the booking is still held.
 */
#ifndef VRAMD_POLICY_RECLAIM_RULE_H
#define VRAMD_POLICY_RECLAIM_RULE_H

#include <stdbool.h>
#include <stdint.h>

#define RECLAIM_STABLE_READINGS 3
#define RECLAIM_KEEP_SLACK (32ULL << 20)

typedef struct reclaim_watch {
    uint64_t last;   /* the previous reading; UINT64_MAX before the first */
    unsigned stable; /* readings in a row without a further drop */
} reclaim_watch_t;

/* Start watching a reclaim. */
void reclaim_watch_init(reclaim_watch_t *w);
/* One reading of what the process still holds: true when the reclaim of `booked` is settled
 * (see above); `keep` 0 = not known. *by_keep (may be NULL) says it settled by the keep rule. */
bool reclaim_settled(reclaim_watch_t *w, uint64_t booked, uint64_t keep, uint64_t measured, bool *by_keep);
/* The least reading taken while a process started: an upper bound of what it keeps after its
 * weights leave (its CUDA context); 0 readings (not on the GPU yet) do not count. */
uint64_t reclaim_keep_from_start(uint64_t keep, uint64_t measured);

#endif
