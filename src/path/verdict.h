/*
 * verdict: which answers are held and judged whole (verdict_hold_of, from the answer's
 * head), what happens to a held answer once complete (held back, bounded by
 * limits.max_body, instead of streamed), and what a watched stream's events said when it
 * ended (verdict_stream_end: it was forwarded as it came; an OOM in it is counted, never
 * retried). For a held answer:
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
#include "http/http1.h"
#include "quality/stream_watch.h"

/* What becomes of an answer, decided from its head (docs/api.md, "Streamed answers"):
 *   HOLD   held whole (bounded by limits.max_body) and judged once complete: the model
 *          declares validate or prompt_hold; or it declares degrade and the answer is an
 *          error (not 2xx), carries a configured status/header signal, or is whole (its
 *          length declared and not SSE/NDJSON);
 *   WATCH  a 2xx stream of a degrade model (SSE or NDJSON by its Content-Type, or any body
 *          of unknown length): forwarded as it comes, its events watched;
 *   PASS   forwarded as it comes, not read.
 * watch is (re)started for this answer: its kind, or STREAM_NONE unless WATCH. */
enum verdict_hold { VERDICT_PASS = 0, VERDICT_HOLD, VERDICT_WATCH };
enum verdict_hold verdict_hold_of(const request_t *r, const char *head, const http1_msg_t *msg,
                                  stream_watch_t *watch);
/* A watched stream (VERDICT_WATCH) ended, whole or cut (cut: the worker's connection
 * broke; the caller counts the break). What its events said, before the caller releases the
 * request's slot on inst:
 *   an error event that degrade_error_is_oom calls an OOM: counted as a held OOM is (the
 *     estimate grows, the `oom` event with streamed=true, recycle.on_oom restarts inst);
 *     outcome out_of_memory; returns 503 (the status to release the slot with: a failed
 *     run, no learning, not the worker's ill health);
 *   another error event: `stream_error`, outcome stream_error, 500;
 *   a clean end without its dialect's last event: `stream_incomplete`, outcome
 *     stream_incomplete, 500;
 *   none of these (or a cut stream without an OOM): 0, the status as it is.
 * The answer itself already went to the client as it came; w is spent (judged once). */
int verdict_stream_end(request_t *r, instance_t *inst, stream_watch_t *w, bool cut);
/* Is the held answer (r->resp_*) an out-of-memory error by the model's degrade.detect? */
bool verdict_is_oom(const request_t *r);
/* Act on the complete held answer. Called after the request's slot was released (so the
 * instance may be gone); oom is verdict_is_oom's answer. */
void verdict_judge(request_t *r, bool oom);
/* Body to send for r's current level (the original at level 0). */
int verdict_prepare_level(request_t *r, unsigned level, char *why, size_t whylen);

#endif
