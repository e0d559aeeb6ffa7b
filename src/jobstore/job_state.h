/*
 * job_state: the states of a durable job and of its stored result, with their names.
 * Kept apart from the journal so that modules that only count or show jobs (metrics,
 * status) can include it without SQLite.
 *
 * Job state diagram (the journal enforces it; every other transition is refused):
 *
 *     queued --mark_running--> running --mark_finished--> succeeded | failed
 *       ^                        |  \
 *       +------requeue-----------+   +--cancel--> cancelled
 *     queued --cancel--> cancelled          queued --mark_finished(failed)--> failed
 *     (at start, journal_recover: running -> queued, or -> failed when attempts are used up)
 *
 * succeeded, failed and cancelled are final: nothing leaves them (only purge deletes them).
 * Result states: none (no result file), stored (a file in the result store), removed (the
 * file was removed by results_ttl, the size cap or an operator; the record stays).
 */
#ifndef VRAMD_JOBSTORE_JOB_STATE_H
#define VRAMD_JOBSTORE_JOB_STATE_H

#include <stdbool.h>

enum job_state {
    JOB_QUEUED = 0,
    JOB_RUNNING = 1,
    JOB_SUCCEEDED = 2,
    JOB_FAILED = 3,
    JOB_CANCELLED = 4,
    JOB_STATE_COUNT = 5
};

enum job_result_state {
    JOB_RESULT_NONE = 0,
    JOB_RESULT_STORED = 1,
    JOB_RESULT_REMOVED = 2,
    JOB_RESULT_STATE_COUNT = 3
};

/* "queued" | "running" | "succeeded" | "failed" | "cancelled"; "unknown" out of range. */
const char *job_state_name(enum job_state s);
/* The inverse of job_state_name (exact, lowercase); -1 when s is not a state name or NULL. */
int job_state_parse(const char *s);
/* succeeded, failed, cancelled */
bool job_state_is_final(enum job_state s);

/* "none" | "stored" | "removed"; "unknown" out of range. */
const char *job_result_state_name(enum job_result_state s);
int job_result_state_parse(const char *s);

#endif
