/*
 * gate: simworker honours the simulated CUDA driver's lock (sim/lib/simgpu.h, "CUDA
 * checkpoint state"), as CUDA calls block in a real locked process.
 *
 * At start the worker registers with its simulated GPU set (simgpu_gate_register); then a
 * repeating timer asks every SW_GATE_POLL_MS (real time) whether its GPU work must stop
 * (a lock waits, or the process is LOCKED, CHECKPOINTED or FAILED). When it must:
 *   - running requests first advance to now, then stop advancing (their memory stays
 *     allocated and is what a checkpoint moves to host memory); waiting ones do not start;
 *   - model loads/unloads in progress stop at their next step;
 *   - /unload_models/, /reload_models/ and /clear_cache/ are held (at most SW_GATE_DEFERRED,
 *     then 503) and handled, in order, when the work resumes;
 *   - and only then is the lock acknowledged (simgpu_gate_ack), so the locker never sees a
 *     LOCKED process that still touches its GPU memory.
 * /health, /ready, /gpu_status/ and new requests (queued) go on answering meanwhile. When the
 * process is unlocked the work resumes where it stopped: the time held does not count as
 * progress. A worker told to stop (SIGTERM) while held finishes its requests, and so exits,
 * only once it is resumed (or killed), as a real locked process would.
 */
#ifndef VRAMD_SIM_WORKER_GATE_H
#define VRAMD_SIM_WORKER_GATE_H

#include <stdbool.h>

#include "httpd.h"

#define SW_GATE_POLL_MS 5
#define SW_GATE_DEFERRED 64

struct sw_worker;

/* How a request held while the GPU work was held is handled on resume (main.c passes the
 * route table, sw_routes_handle: the gate never calls up into routes by name). */
typedef void (*sw_gate_redo_fn)(sw_http_req_t *r, void *w);

/* Registers with the set's park table and polls it every SW_GATE_POLL_MS. The timer is
 * closed with the worker's other handles (sw_maybe_exit). */
void sw_gate_start(struct sw_worker *w, sw_gate_redo_fn redo);
/* While the GPU work is held: keeps r to be handled on resume (or answers 503 when too many
 * wait) and returns true. Returns false when r may be handled now. */
bool sw_gate_defer(struct sw_worker *w, sw_http_req_t *r);

#endif
