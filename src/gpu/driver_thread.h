/*
 * driver_thread: driver calls (NVML, the CUDA driver) off the event loop, each on a thread of
 * its own that is never joined, so that a call that hangs in the driver can be abandoned.
 *
 * Why not libuv's thread pool: a work item that never returns holds a pool thread for good,
 * keeps uv_run from ending (pending work is an active request) and hangs the exit of the
 * process (libuv's exit-time destructor joins every pool thread). A hung driver then blocks
 * shutdown until systemd kills vramd. Here, closing the owner gives the calls still in the
 * driver up: the loop keeps no reference to them, nothing waits for them, and the process can
 * exit while they hang.
 *
 * Use: an owner (one per driver handle, on one loop) starts calls; a call is a caller-made
 * drv_call_t (embedded in the caller's own struct) with three functions:
 *   work      on the call's own thread: the driver calls;
 *   done      on the loop thread, after work returned, while the owner is open;
 *   orphaned  exactly once instead of done when the owner was closed before done could run:
 *             on the call's thread when work returns after the close (maybe never: a hung
 *             call keeps its thread until the process ends), or on the loop thread inside
 *             drv_calls_close for a call that had finished but was not delivered yet.
 *             It frees what the call holds (the driver handle's last reference, say).
 *
 * Invariants:
 *   - Every started call gets exactly one of done or orphaned; after drv_calls_close no done
 *     runs (also not for calls delivered in the same loop turn as the close).
 *   - Nothing the owner frees is used by a call's thread: the part the threads share (a
 *     mutex, the finished list, the closed flag) is reference-counted (the owner + one per
 *     running call) and freed by whoever drops the last reference; the loop-side async handle
 *     is never signalled after the close (checked under the mutex).
 *   - At most max_in_flight calls run at once per owner (bounded threads, even when every
 *     call hangs): drv_calls_start refuses more.
 *   - Call threads block every signal (signals stay with the loop thread).
 * Return convention: 0 ok, -1 refused (closed owner, at the bound, no thread could be made).
 */
#ifndef VRAMD_GPU_DRIVER_THREAD_H
#define VRAMD_GPU_DRIVER_THREAD_H

#include <stdbool.h>
#include <uv.h>

typedef struct drv_call drv_call_t;
struct drv_call {
    void (*work)(drv_call_t *call);
    void (*done)(drv_call_t *call);
    void (*orphaned)(drv_call_t *call);
    drv_call_t *next; /* private: the finished list */
};

typedef struct drv_calls drv_calls_t;

/* NULL when out of memory or the async handle cannot be made. */
drv_calls_t *drv_calls_open(uv_loop_t *loop, unsigned max_in_flight);
/* Run call->work on a new detached thread. */
int drv_calls_start(drv_calls_t *o, drv_call_t *call);
/* Calls started and not yet done or orphaned (loop thread). */
unsigned drv_calls_in_flight(const drv_calls_t *o);
/* Loop thread; o is gone after. Calls still running are abandoned (see orphaned); the loop
 * must run once more for the async handle's close. */
void drv_calls_close(drv_calls_t *o);

#endif
