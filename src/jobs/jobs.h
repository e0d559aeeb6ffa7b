/*
 * jobs: the durable job runner. Jobs live in the journal (jobstore/journal.h); results in the
 * result store (jobstore/result_store.h); this module moves jobs from one to the other by
 * running each attempt through vramd's own front door (jobs/job_client.h builds the request,
 * net/http_client.h sends it), so that a job
 * gets exactly the routing, queues, priorities, deadlines, ladder, validation and retries
 * of a synchronous request.
 *
 * Window: at most jobs.max_active attempts are in flight (handed to vramd) at once, and per
 * model at most concurrency x instances x 2, bounded by half the model's queue_max, at
 * least 1, so synchronous traffic keeps room in the model's queue. The next jobs are taken
 * from the journal by priority (desc), then age (across models when max_active is short). The pump runs when a job ends, when one is
 * submitted, and every second (models backing off after a queue_full or a failed connect).
 *
 * A job is queued in the journal until vramd really hands its request to a worker
 * (CORE_EV_REQUEST_DISPATCHED, emitted by the dispatcher, matches the exact request id
 * "job-<id>-<nonce>"); it is then running (attempts + 1, GPU). How an attempt ends decides
 * what happens next; see docs/jobs.md ("Retry rules").
 *
 * Invariants:
 *   - a job has at most one attempt in flight (the run table is keyed by job id);
 *   - a 2xx answer is written to a result file as it streams, committed (fsync, rename) on
 *     a thread-pool thread, and only then is the job marked succeeded;
 *   - a job that was cancelled while its result was being committed keeps no result file;
 *   - while draining no attempt is started; the drain waits (jobs_busy) until
 *     every attempt in flight has ended and its result is committed. Queued jobs stay in the
 *     journal for the next start.
 * Threads: everything runs on the loop thread, except result commits (uv_queue_work).
 * Return convention: int functions give 0 on success, -1 on failure.
 */
#ifndef VRAMD_JOBS_JOBS_H
#define VRAMD_JOBS_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"
#include "jobstore/job_state.h"

typedef struct jobs jobs_t;

/* The runner's listener (REQUEST_DISPATCHED: an attempt reached a worker), set once by the
 * composition root (daemon/wiring.c) before jobs_init; it does nothing while there is no
 * runner. */
void jobs_listen(core_t *d);
/* Open state_dir/jobs.db and state_dir/results/, recover jobs that were running when vramd
 * last stopped, start the timers. On failure vramd runs without jobs (the routes answer
 * 503 jobs_unavailable) and err says why. */
int jobs_init(core_t *d, char *err, size_t errlen);
/* Before the loop's handles are closed: cancel attempts still in flight (they stay queued
 * or running in the journal; the next start recovers them). */
void jobs_shutdown(core_t *d);
/* After the loop has ended: free everything, close the journal and the result store. */
void jobs_close(core_t *d);

/* true while an attempt is in flight or a result is being committed. */
bool jobs_busy(const core_t *d);
/* Look at the journal and start attempts where the window has room. */
void jobs_pump(core_t *d);

/* Count of jobs in each state (for vramd_jobs{state}). 0 ok, -1 when jobs are not
 * available. */
int jobs_count_by_state(core_t *d, uint64_t out[JOB_STATE_COUNT]);

/* For jobs_api.c. */
jobs_t *jobs_get(const core_t *d);
struct jstore *jobs_store(jobs_t *J);
struct result_store *jobs_results(jobs_t *J);
/* Cancel a job's attempt in flight, if it has one (after jstore_cancel succeeded). */
void jobs_cancel_attempt(jobs_t *J, const char *id);

/* For a queued job's place (serve/queue_api.c): the request id of job id's attempt in
 * flight here that has not reached a worker yet (into request_id); false when it has none. */
bool jobs_attempt_sent(jobs_t *J, const char *id, char *request_id, size_t len);
/* How many attempts of `model` are in flight here and have not reached a worker yet (they
 * are still "queued" in the job store, and in the model's queue or on their way to it). */
size_t jobs_attempts_sent(const jobs_t *J, const char *model);

/* The jobs' clock, in unix-epoch milliseconds: the wall clock read once when the runner
 * starts (jobs_clock_start), advanced by the monotonic clock since. Job deadlines,
 * running and finishing times, results_ttl and records_ttl are measured on it, so a step
 * of the system clock within a run (NTP, an operator's date -s) neither fails queued jobs
 * nor expires results early, nor keeps them longer. Across a restart the wall clock is
 * read again: what a step moved takes effect then (a job whose stored deadline the new
 * clock has passed fails at recovery, as any job whose deadline passed while vramd was
 * down). Hosts sharing a PostgreSQL store compare leases on the server's clock. */
int64_t jobs_wall_ms(void);
void jobs_clock_start(void);

#endif
