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
 * Invariants: instance->in_flight <= cfg->concurrency; an instance in STOPPING never gets
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
enum model_state model_state(const model_t *m);
const char *model_state_name(enum model_state s);
const char *instance_state_name(enum instance_state s);
/* Its eviction tier now: "resident", "sleeping", "checkpointed" or "unloaded" (/v1/status). */
const char *instance_tier_name(const instance_t *in);

/* The supervisor's part of a pump (path/dispatch.c runs it): before dispatch, make sure an
 * external model's instance exists; after it, start or reload instances on demand, arm idle
 * timers, free a removed model. supervisor_tend returns PLACER_NEVER when the model can
 * never be placed (its queue must then fail with 422), else PLACER_FITS. */
void supervisor_prepare(model_t *m);
int supervisor_tend(model_t *m);

/* Admin load: clear FAILED and backoff, start an instance if none. */
void model_load(model_t *m);
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
/* At start, before any worker: remove every container that a previous run of this daemon
 * left (label vramd.owner=<its subtree name>), for each container model's engine and env,
 * synchronously, each command bounded. Returns how many were removed. */
size_t supervisor_sweep_containers(const config_t *cfg);
/* Drain: stop every instance (after in-flight), no restarts. */
void model_stop_all(model_t *m, const char *reason);
bool model_has_live_instances(const model_t *m);

/* Metrics: a request of m was degraded to ladder `level` (degraded_total too). */
void model_note_degraded(model_t *m, unsigned level);
/* Metrics: one request of m ended with this outcome (copied; over MODEL_OUTCOMES_MAX
 * distinct names, into "other"). */
void model_note_outcome(model_t *m, const char *outcome);
const char *unload_reason_name(enum unload_reason r);
const char *restart_reason_name(enum restart_reason r);
const char *hook_kind_name(enum hook_kind k);
const char *hook_outcome_name(enum hook_outcome o);
/* How a hook call that ended with this status (an http_call_cb's) went; past_deadline: it
 * ended at or after the deadline its timeout set (a status -1 then is the timeout). */
enum hook_outcome hook_outcome_of(int status, bool past_deadline);

/* An instance finished one request (slot released by the proxy). worker_broken: the
 * exchange showed a broken worker (connection failure, reset, timeout, malformed answer,
 * 502/504 from it); INSTANCE_OUTLIER_IN_ROW of them in a row eject the instance for
 * the model's outlier.base_ejection_time x its ejections (at most outlier.max_ejection_time),
 * unless it is the model's last healthy instance. */
#define INSTANCE_OUTLIER_IN_ROW 5
void instance_request_done(instance_t *inst, bool worker_broken);
/* The same for a request that ended for vramd's own shortage (EMFILE ...): neither a
 * broken nor a sound exchange, so the run of failures is left as it was. */
void instance_request_done_local(instance_t *inst);
/* May the instance take a new request now (READY, not stopping, suspect nor ejected)? */
bool instance_usable(const instance_t *inst, uint64_t now);
/* Make room by the cheapest tier the model has and the host affords (workers/park.c): its
 * sleep hook (parked), else a checkpoint by the CUDA driver (parked), else the unload hook,
 * else stop the process; a parked instance goes to the next tier. */
void instance_evict(instance_t *inst, const char *why);
/* What instance_evict(inst) would cost to come back from, in ms: the learned wake time when
 * it would sleep (1 s until measured), the learned restore time when it would be
 * checkpointed (bytes at 10 GB/s until measured), else the learned load time. For the scheduler's
 * cost-aware eviction (a candidate's return cost); reads the host's free memory. A park tier
 * is taken only when it pays (park_cost.c): way out + way back < the learned load time. */
uint64_t instance_return_cost_ms(const instance_t *inst);
/* How long instance_evict(inst) would take to free its memory, in ms: a park tier's learned
 * way out (0 until measured), 0 for an unload or a stop. */
uint64_t instance_way_out_ms(const instance_t *inst);
/* What an eviction of inst now (or its park under way) would leave on its GPU: the tier's
 * leaves() (a shim park keeps the CUDA context), 0 for the others and a stop. */
uint64_t instance_evict_leaves(const instance_t *inst);
/* The scheduler asks an idle READY instance for its allocator cache (actions.clear_cache):
 * its clear_cache hook, as every hook is called (instance_call_hook: body, timeout, logged,
 * counted), then an NVML reading at once after the answer. Notes last_clear_cache_ms. False
 * when it was not asked: no hook, not READY, a hook call in flight, hooks held back after
 * vramd's own shortage, or the call could not be made. */
bool instance_clear_cache(instance_t *inst);
/* Replace the instance: stop it once its in-flight requests are done (recycling: after
 * N requests, memory growth, OOM with recycle.on_oom). */
void instance_recycle(instance_t *inst, const char *why);
/* A request's worker went silent (response_timeout, recycle.hang_timeout): a supervised
 * worker gets SIGABRT (a core dump for the operator), then SIGKILL after stop_timeout; its
 * exit counts as a failure (RESTART_HANG) and a replacement starts on demand. An external
 * server is marked DOWN (its health check brings it back). */
void instance_kill_hung(instance_t *inst, const char *why);
/* The instance's connection broke without an answer: no new requests until its next health
 * check (started now) passes; a dead worker's exit is reaped meanwhile. */
void instance_mark_suspect(instance_t *inst, const char *why);
/* Refresh who the instance is (proc/attrib.h's attrib_refresh: an external server's listener
 * that went away is looked up again on its port, logged as external_pid); the scheduler
 * asks before it attributes a snapshot. Scans /proc: called every few seconds at most. */
void instance_refresh_identity(instance_t *inst);
/* The scheduler saw the instance's memory come back (ok) or gave up waiting (!ok). */
void instance_reclaimed(instance_t *inst, bool ok);

#endif
