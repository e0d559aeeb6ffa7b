/*
 * verdict: what happens to a worker's complete answer when its model declares `degrade`
 * or `validate` (the answer was held back, bounded by limits.max_body, instead of streamed).
 *
 *   OOM (degrade.detect)            -> the estimate grows (sched_note_oom), recycle.on_oom
 *                                      restarts the instance, and the request is queued again
 *                                      at the next ladder level (body rewritten from the
 *                                      client's original by the `set` of levels 1..k in
 *                                      order: levels are cumulative; that level's per_request); past the
 *                                      last level: 503 out_of_memory with the attempts.
 *   2xx that fails validation       -> retried once (same level), then 502 invalid_output.
 *   anything else                   -> delivered: status, headers, body, plus X-Request-Id,
 *                                      X-Vramd-Queue-Ms/Run-Ms/Attempts/Gpu and, when a level
 *                                      other than 0 was used, X-Vramd-Degrade-Level.
 * Retries are bounded by the ladder, by one invalid-output retry, and by the model's
 * retry_budget: at most `percent` of the requests queued or running may be retries, never
 * fewer than `min` at once; over budget, 503 retry_budget_exhausted (Retry-After).
 * A validate.cmd validator runs as a process with the body on stdin (exit 0 = valid) under
 * validate.timeout; a validator that times out or cannot start counts as "invalid".
 * Ownership: the request's slot and reservation are already released when verdict_judge runs;
 * the request still belongs to its conn. While a validator runs, the request's ops are the
 * verdict's (cancel stops the validator); a retry goes back through core_requeue (the
 * dispatcher's, set by the composition root), an answer through conn_respond*.
 * Why not a decision returned to the proxy: validation may finish later (a validator
 * process, the thread pool), when the proxy's callback has long returned.
 */
#ifndef VRAMD_PATH_VERDICT_H
#define VRAMD_PATH_VERDICT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/types.h"

/* Should the answer to r be held and judged (model declares degrade or validate)? */
bool verdict_wants_buffer(const request_t *r);
/* Is the held answer (r->resp_*) an out-of-memory error by the model's degrade.detect? */
bool verdict_is_oom(const request_t *r);
/* Act on the complete held answer. Called after the request's slot was released (so the
 * instance may be gone); oom is verdict_is_oom's answer. */
void verdict_judge(request_t *r, bool oom);
/* Body to send for r's current level (the original at level 0). */
int verdict_prepare_level(request_t *r, unsigned level, char *why, size_t whylen);

#endif
