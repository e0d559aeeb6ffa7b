/*
 * supervisor: the runtime of each model and the lifecycle of its workers (instances).
 *
 * Instance states (instance_set_state logs every change old -> new):
 *
 *   STARTING --health 200--> READY --stop/idle/unload--> STOPPING --exit--> (freed)
 *      |                       |  \--health fails `failures` times / crash--> (restart)
 *      +--exit/startup_timeout--> failure counted, restart after backoff if wanted
 *   External servers (url:) are one instance that is never started or stopped: READY while
 *   health checks pass, DOWN after `failures` failed checks, READY again on the next pass.
 *   Eviction through an unload hook (external servers, or supervised ones that declare it):
 *   READY --unload hook--> UNLOADING --NVML shows memory back--> UNLOADED --reload hook-->
 *   RELOADING --> STARTING (health) --> READY. A supervised worker whose memory does not
 *   come back within stop_timeout is killed; an external one is marked failed.
 *   Parking through sleep/wake hooks (park.c), tried first when the model has them and the
 *   host can afford it: READY --sleep hook--> PARKING --NVML shows it gone--> PARKED
 *   --wake hook--> RESUMING --NVML shows it back--> READY; too little back, or evicted again
 *   while parked: the next tier (unload hook, stop). The checkpoint tier (checkpoint: true)
 *   takes the same states with the CUDA driver in place of the hooks (park.c).
 *
 * Model state (what /v1/status shows) is derived: failed > ready (some instance READY) >
 * starting > draining (admin unload waiting for in-flight) > unloading (instances
 * STOPPING) > stopped.
 *
 * Outliers (instance_request_done): only exchanges that show a broken worker count, never a
 * well-formed answer a client could drive (4xx, 500); five in a row eject the instance for
 * outlier.base_ejection_time x its ejections (30 s by default; capped at
 * outlier.max_ejection_time, 5 min); the last healthy instance is never ejected.
 *
 * Restart policy: every failed start (exit before READY, startup_timeout) and every crash
 * (exit while READY that vramd did not ask for) is a failure. The next start waits
 * 1 s * 2^(consecutive failures - 1), at most 5 min; consecutive failures reset when an
 * instance becomes READY. 5 failures within 10 min -> the model is FAILED: its queued
 * requests get 503 model_failed, new ones too, until an admin load (model_load).
 * Workers are started on demand (a queued request and no free instance), or at startup
 * and after crashes when keep_alive is forever (pinned). An idle instance (nothing in
 * flight, nothing queued) is stopped after keep_alive.
 *
 * This header declares supervisor.c's functions (model runtimes, the pump's supervisor part,
 * admin load/unload/pin/restart); the other files of workers/ have their own (instance.h,
 * model_state.h, hooks.h, park.h, park_evict.h, park_cost.h, park_tier.h, worker_cmds.h).
 *
 * Invariants: instance->path.in_flight <= cfg->concurrency; an instance in STOPPING never gets
 * a new request; model->n_instances counts every instance object (any state) and never
 * exceeds cfg->instances; a model is freed only after it was removed from the config and
 * has no instance, queued or in-flight request left.
 */
#ifndef VRAMD_WORKERS_SUPERVISOR_H
#define VRAMD_WORKERS_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/list.h"
#include "config/config.h"
#include "core/types.h"
#include "core/model.h"

/* A new model runtime; pump is its deferred pump (the dispatcher's, given by the composition root). */
model_t *model_create(core_t *d, const model_config_t *cfg, config_t *owner, void (*pump)(core_defer_t *));
/* Point the model at a new config (reload). Running instances keep running. */
void model_update_config(model_t *m, const model_config_t *cfg, config_t *owner);
/* The model left the config: finish queued/in-flight, stop instances, then free it. */
void model_remove(model_t *m);

/* The supervisor's part of a pump (path/dispatch.c runs it): before dispatch, make sure an
 * external model's instance exists; after it, start or reload instances on demand, arm idle
 * timers, free a removed model. supervisor_tend returns PLACER_NEVER when the model can
 * never be placed (its queue must then fail with 422), else PLACER_FITS. */
void supervisor_prepare(model_t *m);
int supervisor_tend(model_t *m);

/* Admin load: clear FAILED and backoff, start an instance if none. */
void model_load(model_t *m);
/* gpu.idle_model brings m back (sched_idle_model.c): an admin load, less clearing a failed
 * state (a failed model is not brought back). */
void model_bring_back(model_t *m);
/* Clear FAILED (logged with why), the failure count and the backoff: the next request or
 * load starts an instance (admin load; a reload that changed the model's config). */
void model_clear_failed(model_t *m, const char *why);
/* The answer to a request for a FAILED model, into buf: its reason, its worker's last
 * output lines, and what retries it (a load, or a reload that changes its config). The
 * length snprintf would have written. */
size_t model_failed_text(const model_t *m, char *buf, size_t cap);
/* Admin unload: park every idle instance by its sleep hook or a checkpoint when the model
 * has one and the host can afford it (workers/park.c), stop the others once idle (in-flight ones finish
 * first); a parked instance unloaded again is stopped. An external server (url:) is never
 * stopped: its sleep hook, else its unload hook, is called once it is idle (a model with
 * neither: nothing happens; the admin route answers 409 no_unload_hook). */
void model_unload(model_t *m, const char *reason);
/* Admin pin (on) or unpin: a pinned model is loaded (model_load) and then never evicted nor
 * stopped by keep_alive (model_pinned); unpinned, it goes back to its configured keep_alive.
 * A model its config pins (keep_alive: forever) is only loaded: pinned_admin stays false.
 * The flag lives on the model_t: it survives a config reload, not a restart of vramd. */
void model_set_pinned(model_t *m, bool on);
/* Admin restart of a supervised model: every live instance is stopped gracefully (no new
 * request; in-flight ones finish, then stop_timeout), queued requests stay queued, and a new
 * instance is started (model_load) once there is room. Returns the highest instance id
 * before the restart, for model_restart_done. */
unsigned model_restart(model_t *m);
/* The restart is over: an instance newer than last_old is READY (or the model failed). */
bool model_restart_done(const model_t *m, unsigned last_old);
/* An admin unload of an external server is still under way (hook not called or answered,
 * memory not back yet). */
bool model_unload_pending(const model_t *m);
/* An admin unload has done what it can: no instance left, or every one parked (supervised),
 * or (external) the hook answered and the memory is back, or the model failed. */
bool model_unload_done(const model_t *m);
/* Start pinned (keep_alive: forever) models and external health checks at startup. */
void model_start_pinned(model_t *m);

#endif
