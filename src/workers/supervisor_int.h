/*
 * supervisor_int: what the supervisor's own files share; nothing outside src/workers may
 * include it. The states, the restart policy and the invariants are in supervisor.h; each
 * file's public functions are in its own header (supervisor.h, instance.h, model_state.h,
 * hooks.h, park.h, park_evict.h, park_cost.h, park_tier.h, worker_cmds.h, host_book.h).
 *
 * Calls between the files go one way only (mk/lint_layers.py rejects a cycle):
 *   supervisor.c (model runtime, demand, admin load/unload)
 *     -> park_evict.c (who parks: eviction, admin unload, keep_alive; cache cleared first)
 *     -> park.c (what the park tiers share: book, parked, escalate, the way back; walks the
 *        tier table to park, falls back to the next tier; the reclaim entry point)
 *     -> park_host.c (a parked instance's host keep-alive; room made on the host book)
 *     -> park_cost.c (what a park costs: way out, way back; which tier an eviction takes now)
 *     -> park_tiers.c (the ONE ordered table of park tiers, park_tier.h: lookups, names)
 *     -> park_sleep.c, park_shim.c, park_checkpoint.c (the tiers: sleep/wake hooks, the
 *        CUDA shim in the worker, the CUDA driver; each reports to park.c through
 *        inst->park.park_report, never by a call)
 *     -> hooks.c (every hook call; unload/reload hooks, eviction without parking, reclaim)
 *     -> instance.c (instance lifecycle: start, health, exit, stop, idle, free)
 *     -> worker_cmds.c (placeholders in cmd and stop_cmd; stop_cmd and a container's removal)
 *     -> server_report.c (the server's own figure for the served model: /api/ps, /models)
 *     -> model_state.c (names, derived model state, state changes, failure counting)
 *     -> host_book.c (the host-memory ledger of parked instances)
 * A file may call any file below it, never one above. Beside them, in src/gate/ (same rank):
 * gate/shim_grants.c (the CUDA shims' grants), gate/shim_control.c (their control
 * connections, which park_shim.c drives), gate/shim_library.c (where the shim library is)
 * and gate/driver_limit.c (the driver's per-cgroup limit on each worker); workers/ calls
 * them, they never call workers/.
 */
#ifndef VRAMD_WORKERS_SUPERVISOR_INT_H
#define VRAMD_WORKERS_SUPERVISOR_INT_H

#include <stddef.h>
#include <uv.h>

#include "net/http_call.h"
#include "workers/supervisor.h"

/* ---- model_state.c ---- */
/* The one way an instance changes state: checks the table of legal changes (model_state.c),
 * logs old -> new with the caller's line, logs the derived model state when it changed,
 * and emits CORE_EV_MODEL_CHANGED. */
#define instance_set_state(inst, s, why) instance_set_state_at((inst), (s), (why), __LINE__, __FILE__)
void instance_set_state_at(instance_t *inst, enum instance_state s, const char *why, int line, const char *file);
bool instance_transition_ok(enum instance_state from, enum instance_state to);
/* Log the model's derived state when it differs from `before` (every model state log line
 * comes from here). */
void model_note_state(model_t *m, enum model_state before, const char *why);
/* Mark the model FAILED (until an admin load): its queue is answered 503 model_failed. */
void model_set_failed(model_t *m, const char *reason);
/* Count a failed start or crash: backoff for the next start; FAILED after too many. */
void model_record_failure(model_t *m, enum restart_reason kind, const char *why);
/* The same for a failure of worker pid: its last output lines are kept (model.last_output). */
void model_record_worker_failure(model_t *m, enum restart_reason kind, const char *why, pid_t pid);

/* ---- server_report.c ---- */
/* The served model's figure from the server's health answer body (Ollama /api/ps, llama.cpp
 * router /models) into inst->life.server_vram; a body of another shape changes nothing. Returns
 * what the answer said of the served model. */
enum server_said {
    SERVER_SAID_NOTHING = 0, /* not the documented shape */
    SERVER_SAID_ABSENT,      /* not listed, or listed as not loaded */
    SERVER_SAID_LOADING,     /* llama.cpp's router: status "loading" */
    SERVER_SAID_LOADED,      /* listed as loaded (Ollama: listed at all) */
    SERVER_SAID_FAILED,      /* llama.cpp's router: its last load failed (status.failed) */
};
enum server_said server_report_note(instance_t *inst, const char *body, size_t len);

/* ---- worker_cmds.c ---- */
/* {name}: the model's name, or NAME-ID when it may run several instances. */
void worker_cmds_name(const instance_t *inst, char *out, size_t outlen);
/* The instance's cgroup leaf: NAME-ID. */
void worker_cmds_leaf(const instance_t *inst, char *out, size_t outlen);
/* arg with every placeholder filled (malloc'd); NULL for an argument to leave out. */
char *worker_cmds_subst(const instance_t *inst, const char *arg);
/* {mem_fraction}: the instance's reservation over its GPU's total, "0.01".."1.00". */
void worker_cmds_mem_fraction(const instance_t *inst, char *out, size_t outlen);
/* Logs mem_fraction_mismatch when a preset model's cmd gives an explicit fraction that
 * disagrees with the instance's reservation on its GPU. */
void worker_cmds_check_fraction(const instance_t *inst);
/* words[0..n-1] filled, NULL-terminated, arguments left out removed; free with
 * worker_cmds_free_argv. NULL when out of memory. */
char **worker_cmds_argv(const instance_t *inst, char *const *words, size_t n);
void worker_cmds_free_argv(char **argv);
/* vramd stops the instance: its stop_cmd, then a container's removal, one after another;
 * done(inst) once they ended (maybe before this returns). False when there is nothing to
 * run (done is not called). */
bool worker_cmds_stop(instance_t *inst, void (*done)(instance_t *inst));
/* A container worker's process exited and its container was not removed yet: remove it;
 * done(inst) after. False when there is nothing to run. */
bool worker_cmds_after_exit(instance_t *inst, void (*done)(instance_t *inst));
bool worker_cmds_running(const instance_t *inst);

/* ---- instance.c ---- */
/* Start a supervised worker on ledger position gpu_pos (placed already). */
void instance_start(model_t *m, size_t gpu_pos);
/* A new instance of m, STARTING, on its list (NULL when out of memory). */
instance_t *instance_new(model_t *m);
/* The health check timer callback: one GET of the health path. */
void instance_health_tick(uv_timer_t *t);
/* An external Ollama unloading: its /api/ps read every gpu.poll_ms until it leaves UNLOADING. */
void instance_report_poll(instance_t *inst);
/* Stop the instance (after its in-flight requests when it has some). */
void instance_stop(instance_t *inst, const char *reason);
/* Free the instance once nothing refers to it any more. */
void instance_maybe_free(instance_t *inst);
/* Free a removed model once nothing is left of it (stops its instances first). */
void model_maybe_free(model_t *m);

/* ---- hooks.c ---- */
/* The one way vramd calls a worker's hook: the model's hook of that kind as configured
 * (method, path, body, timeout: hooks_timeout_ms) for inst, logged (hook_call) and counted
 * (model->hook_calls, vramd_hook_calls_total) however it ends. 0: cb follows, after the
 * answer was counted and logged as the hook's *_done event (and, for vramd's own shortage,
 * the instance's hooks held back for a second); -1 when it could not be started (logged
 * hook_failed); -2 not made for vramd's own shortage (descriptors, memory: logged, counted
 * as CORE_CNT_LOCAL_HOOK too, the instance's hooks held back for a second, then the model
 * is pumped again). At most one at a time (inst->hook.hook_call). */
int instance_call_hook(instance_t *inst, enum hook_kind kind, http_call_cb cb);
/* The hook's timeout: its own, else 60 s for reload and wake, 30 s for the others. */
uint64_t hooks_timeout_ms(const model_t *m, enum hook_kind k);
/* A confirmation of the sleep or wake hook `after` (park_sleep.c: GET on the preset's
 * sleep_confirm path), the instance's one hook call like any other: hooks_confirm_begin
 * starts its time (the hook's timeout from now, inst->hook.hook_deadline_ms);
 * hooks_confirm_get makes one GET of `path` within what is left of it: 0 started (cb gets
 * the answer, inst->hook.hook_call cleared first), -1 not (err says why). Not counted: the
 * hook it confirms was. */
void hooks_confirm_begin(instance_t *inst, enum hook_kind after);
int hooks_confirm_get(instance_t *inst, const char *path, http_call_cb cb, char *err, size_t errlen);
/* An idle READY instance's clear_cache hook through instance_call_hook, last_clear_cache_ms
 * noted: 0 asked (cb follows); otherwise not asked: -1 no hook, not READY, a hook in flight
 * or hooks held back, else instance_call_hook's -1 or -2. */
int hooks_clear_cache(instance_t *inst, http_call_cb cb);
/* Make room without parking: the unload hook when the model has one, else stop the process
 * (an external server without one: marked failed). */
void hooks_evict(instance_t *inst, const char *why);
/* NVML shows an unloading or stopped instance's memory back (ok) or the wait ran out. */
void hooks_reclaimed(instance_t *inst, bool ok);
/* An UNLOADED instance is needed again: book its memory back and call the reload hook. */
void instance_reload(instance_t *inst);
/* A READY (or PARKING/PARKED: the tier after a park) instance's unload hook (eviction, an
 * admin unload of an external server):
 * UNLOADING, then UNLOADED once its memory is back (at once without GPU memory booked).
 * -1 when the model has no unload hook or the hook could not be called (still READY);
 * -2 when vramd's own shortage of descriptors or memory kept it from being called (still
 * READY; an admin unload is then answered 503 local_resource_exhausted). */
int instance_unload(instance_t *inst, enum unload_reason reason, const char *why);

/* ---- park_evict.c ---- */
/* Free an instance's GPU memory, parked when it can be: its cache cleared first (clear_cache
 * hook), then park_instance, else the next tier of whoever asked (reason): UNLOAD_EVICTED
 * -> hooks_evict; UNLOAD_ADMIN -> stop (supervised) or the unload hook (external);
 * UNLOAD_IDLE -> stop. 0 parking (or clearing first), -2 not now (vramd's own shortage: an
 * admin unload is answered 503), 1 the next tier taken. */
int park_or_free(instance_t *inst, enum unload_reason reason, const char *why);
/* Arm the keep_alive timers of the model's idle instances; at expiry (at once at keep_alive
 * 0) an instance is parked when its model has a park tier the host affords, else stopped. */
void model_arm_idle_timers(model_t *m);

/* ---- park.c ---- */
/* Park an idle READY instance by the first tier of the table (park_tier.h: its sleep hook,
 * else a checkpoint by the CUDA driver) it has, that pays (an eviction's) and the host
 * affords: 0 started, -1 when none can (the caller takes the next tier: unload hook or
 * stop); -2 not now for vramd's own shortage (an admin unload is answered 503
 * local_resource_exhausted): try again later, no other tier. */
int park_instance(instance_t *inst, enum unload_reason reason, const char *why);
#define PARK_RESUME_TICK_MS 5   /* how often a RESUMING or clearing instance looks for a fresh reading */
#define PARK_CLEAR_MIN_BYTES (64ULL << 20) /* less cache than this is parked as it is (as sched_clear_caches) */
/* A PARKED instance is needed again: book its memory back, then its tier's way back (the
 * wake hook, the driver's restore + unlock of each parked process). */
void park_wake(instance_t *inst);
/* An external server just found (its instance created at start): the first tier whose
 * found() takes it brings it back in case a vramd that stopped while it was parked left it
 * parked (the wake hook; without one but with checkpoint, its listener's driver state,
 * restored when left checkpointed); READY again once it holds still (a failed return: its
 * health checks decide). */
void park_wake_found(instance_t *inst);
/* A PARKED instance must free what it still holds: the next tier (unload hook, stop). */
void park_escalate(instance_t *inst, const char *why);

/* ---- park_cost.c ---- */
/* Does parking inst by `tier` cost less than the reload it saves (way out + way back <
 * learned load time)? True until both the way out and the load time were measured. */
bool park_tier_pays(const instance_t *inst, enum park_tier tier);
/* A park of inst (its park_tier) settled took_ms after it began: learn its way out. */
void park_learn_way_out(instance_t *inst, uint64_t took_ms);
/* Would a park asked for `reason` be taken now? An eviction: a park tier it has, the host
 * affords, and that pays (park_tier_pays); an admin unload or keep_alive's expiry: a park tier it has and the host affords (nobody waits for
 * their way out, so it need not pay). */
bool park_would_park(const instance_t *inst, enum unload_reason reason);
/* What a return from a park by `tier` of `bytes` is expected to take: the learned way back,
 * else the tier's guess (back_guess_ms). */
uint64_t park_way_back_ms(const model_t *m, enum park_tier tier, uint64_t bytes);

/* ---- park_host.c ---- */
/* A PARKED instance's host keep-alive (park_keep_alive): on inst->life.idle_timer; when it runs
 * out the instance is stopped (supervised; logged park_expired) and its host memory freed. */
void park_host_arm(instance_t *inst);
/* A park of `bytes` for inst by `tier` is over the host budget: stop older parked instances
 * when that is cheaper than refusing this park (logged park_displaced). True when some were
 * stopped (their host entries released: book again). */
bool park_host_make_room(instance_t *inst, enum park_tier tier, uint64_t bytes);

#endif
