/*
 * driver_limit: the driver's own hard limit on each supervised worker (NVML
 * nvmlDeviceSetMemoryLimits_v1, driver r615+; gpu/gpu.h gpu_limit_set). Where the driver has
 * per-cgroup limits, `gpu.driver_limits` is auto (the default) and the worker has a cgroup v2
 * leaf of its own (proc/cgroup.h), the leaf's limit on the worker's GPU is what vramd booked
 * for the instance (sched_instance_booked: resident entry + running requests + shim extra):
 *   - set before the worker starts (the leaf is made first, the worker spawned once the
 *     driver took the limit; a driver that does not answer within DRIVER_LIMIT_WAIT_MS lets
 *     the start go on without waiting);
 *   - raised before a request reaches the worker: the proxy holds a dispatched request
 *     (driver_limit_covers false) until the raise is applied, and a CUDA shim's grant is
 *     answered only then (both told through the on_applied callback), so an allocation
 *     vramd admitted never fails on a limit that lags;
 *   - lowered lazily, once the booking stayed lower for DRIVER_LIMIT_LOWER_MS (an idle
 *     worker allocates nothing new, and back-to-back requests cost no driver call);
 *   - reset (cleared) when the worker exited, before its leaf is removed (the leaf is kept
 *     from the process layer until the reset returned; NVIDIA: removing the cgroup clears
 *     its limits too, which covers a vramd that died).
 * An allocation past the limit fails with CUDA_ERROR_OUT_OF_MEMORY in that worker alone: its
 * usual OOM, and the degradation ladder goes on as ever. A container worker is covered too:
 * its runtime puts the container's cgroups under the leaf (--cgroup-parent).
 *
 * Failure is never worse than without it: a limit that cannot be set (the driver refuses, a
 * call fails or hangs) lets the worker and its requests go on unlimited (status says why).
 * Invariants: at most one driver call in flight per instance (the latest target is set
 * next); a per-instance state outlives its instance while a call is in flight (freed by the
 * call's end); every limit set is reset or its leaf swept; nothing here blocks the loop.
 */
#ifndef VRAMD_GATE_DRIVER_LIMIT_H
#define VRAMD_GATE_DRIVER_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/types.h"

struct process;

#define DRIVER_LIMIT_TICK_MS 100    /* lowering and stuck calls looked at this often */
#define DRIVER_LIMIT_LOWER_MS 200   /* a booking lower this long lowers the limit */
#define DRIVER_LIMIT_WAIT_MS 2000   /* a driver call slower than this stops holding anything */

typedef struct driver_limit_figures {
    const char *state;    /* set, pending, failed, stuck, resetting */
    uint64_t limit;       /* applied hard limit (0 none yet) */
    uint64_t target;      /* what it follows (the booking) */
    uint64_t sets, failures;
    const char *error;    /* the last failure ("" none) */
    const char *cgroup;   /* the leaf's directory */
} driver_limit_figures_t;

typedef struct driver_limit_totals {
    uint64_t sets, failures, resets, held_requests;
    unsigned active;         /* instances with a limit */
    const char *unavailable; /* why no worker gets one ("" = they can) */
} driver_limit_totals_t;

/* on_applied(inst) runs (loop thread) after a limit change of inst was applied, failed, or
 * stopped being waited for: held requests and shim grants go on then. */
void driver_limit_init(core_t *core, void (*on_applied)(instance_t *inst));
/* After the NVML probe is closed (no call's end is delivered any more). */
void driver_limit_shutdown(void);
/* Before a supervised worker starts, with its leaf's name: 1 = the limit is being set and
 * ready(inst) runs once it was (or failed, or timed out: the worker starts anyway); 0 = no
 * limit for it, start now. */
int driver_limit_before_start(instance_t *inst, const char *leaf, void (*ready)(instance_t *inst));
/* Is the applied limit at least what is booked for inst now? false starts the raise (then
 * on_applied). True whenever inst has no limit, or its limit failed or is stuck. */
bool driver_limit_covers(instance_t *inst);
/* Is inst waiting for its limit before it starts (it must not be freed)? */
bool driver_limit_starting(const instance_t *inst);
/* The worker's process exited (from its exit callback; p is its process_t): the limit is
 * reset and the leaf kept until then, then removed. */
void driver_limit_exited(instance_t *inst, struct process *p);
/* The instance is freed: its state goes now, or when its last call ends. */
void driver_limit_free(instance_t *inst);
bool driver_limit_figures(const instance_t *inst, driver_limit_figures_t *out);
void driver_limit_totals(driver_limit_totals_t *out);

#endif
