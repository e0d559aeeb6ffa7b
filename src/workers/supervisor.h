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
 *
 * Model state (what /v1/status shows) is derived: failed > ready (some instance READY) >
 * starting > draining (admin unload waiting for in-flight) > unloading (instances
 * STOPPING) > stopped.
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
#include "daemon/types.h"
#include "obs/histogram.h"
#include "sched/ledger.h"
#include "sched/queue.h"
#include "sched/scheduler.h"

enum instance_state {
    INST_STARTING = 0,
    INST_READY,
    INST_DOWN,      /* external only: health failing */
    INST_STOPPING,
    INST_UNLOADING, /* its unload hook was called; waiting for NVML to show memory back */
    INST_UNLOADED,  /* process (or external server) up, models unloaded; reload hook brings it back */
    INST_RELOADING, /* reload hook called */
};

enum model_state {
    MODEL_STOPPED = 0,
    MODEL_STARTING,
    MODEL_READY,
    MODEL_DRAINING,
    MODEL_UNLOADING,
    MODEL_FAILED,
};

#define MODEL_FAILURE_WINDOW 5 /* failures remembered for the failed-state rule */

/* Why an instance was stopped or unloaded on purpose (vramd_model_unloads_total{reason}).
 * OTHER: a stop no entry point below named. Names: unload_reason_name. */
enum unload_reason {
    UNLOAD_OTHER = 0,
    UNLOAD_IDLE,     /* keep_alive ran out (or keep_alive 0 after a request) */
    UNLOAD_EVICTED,  /* made room for another model (unload hook or stop) */
    UNLOAD_ADMIN,    /* POST /v1/models/{name}/unload */
    UNLOAD_RECYCLE,  /* recycle: after_requests, memory growth, failures in a row, on_oom */
    UNLOAD_DRAIN,    /* vramd draining or stopping */
    UNLOAD_REMOVED,  /* the model left the config */
    UNLOAD_FAILED,   /* a start that vramd gave up on (startup_timeout) */
    UNLOAD_REASONS
};

/* Why a worker had to be (re)started (vramd_worker_restarts_total{reason}). Every reason
 * but RECYCLE is a failure counted in restarts_total (backoff, failed state); RECYCLE is a
 * planned replacement (instance_recycle). Names: restart_reason_name. */
enum restart_reason {
    RESTART_CRASH = 0,        /* exited (or was killed) while READY without vramd asking */
    RESTART_START_FAILED,     /* could not be spawned, or exited before READY */
    RESTART_STARTUP_TIMEOUT,  /* not healthy within startup_timeout */
    RESTART_HANG,             /* killed by vramd: a request ran past recycle.hang_timeout */
    RESTART_UNHEALTHY,        /* killed by vramd: health checks failed `failures` times */
    RESTART_RELOAD_FAILED,    /* its reload hook failed */
    RESTART_RECYCLE,          /* planned replacement (see UNLOAD_RECYCLE) */
    RESTART_REASONS
};

/* Per-model request metrics (obs/metrics.c); see docs/metrics.md for the label values. */
#define MODEL_OUTCOMES_MAX 32      /* distinct outcome labels kept per model */
#define MODEL_OUTCOME_NAME_MAX 32
#define MODEL_DEGRADE_LEVELS 33    /* ladder levels 0..32 (config's LADDER_MAX is 32) */

struct instance {
    list_t link; /* model->instances */
    model_t *model;
    unsigned id;             /* per model, increasing */
    enum instance_state state;
    bool external;
    struct process *proc;    /* supervised: the process; NULL once exited */
    pid_t pid;
    char host[64];
    int port;
    int gpu;                 /* NVML index, -1 = not assigned (model uses no GPU memory) */
    int gpu_pos;             /* position in the ledger, -1 = none */
    ledger_entry_t mem;      /* RESIDENT reservation (scheduler.h says when it is held) */
    pid_t pgid;
    pid_t external_pid;      /* external servers: pid listening on the port, 0 = unknown */
    uint64_t measured;       /* bytes NVML shows for its processes (last snapshot) */
    uint64_t baseline;       /* measured when it became ready (nothing cached yet) */
    bool baseline_pending;   /* READY, waiting for the first snapshot to take the baseline */
    uint64_t run_peak;       /* peak measured while requests ran */
    bool run_alone;          /* only one request ran since run_peak was reset */
    uint64_t credit_used;    /* cached memory lent to running requests */
    uint64_t running_reserved; /* sum of the REQUEST entries of its running requests */
    uint64_t unverified;     /* bytes assumed cached at request ends, not yet measured */
    bool reclaiming;         /* stopped/unloaded: waiting for NVML to show memory back */
    uint64_t reclaim_since_ms;
    uint64_t reclaim_last;   /* unload hooks: last measurement, to see the usage settle */
    unsigned reclaim_stable; /* consecutive snapshots without a further drop */
    uint64_t reclaim_stable_since_ms;
    uint64_t last_clear_cache_ms;
    struct http_call *hook_call;
    unsigned in_flight;
    uint64_t requests_total;
    unsigned failed_in_row;  /* consecutive requests that ended in a worker failure or 5xx */
    uint64_t started_ms, ready_ms, last_used_ms;
    bool stop_requested;     /* vramd asked it to stop: its exit is not a crash */
    bool suspect;            /* its connection broke and its process looks dead: no new requests */
    const char *stop_reason;
    unsigned health_failures;
    struct http_call *health_call;
    enum unload_reason unload_reason; /* why vramd stops it (set with stop_requested) */
    enum restart_reason kill_reason;  /* RESTART_HANG / UNHEALTHY when vramd killed it; else CRASH */
    uv_timer_t timer;        /* startup polling / health interval */
    uv_timer_t idle_timer;   /* keep_alive */
    list_t pool;             /* idle upstream_t connections to this instance */
    unsigned pool_size;
    int closing_handles;     /* uv handles still to close before the instance is freed */
};

struct model {
    list_t link;             /* vramd->models */
    list_t pump_link;        /* vramd->pump_pending */
    vramd_t *d;
    char *name;
    const model_config_t *cfg;
    config_t *cfg_owner;     /* ref held on the config cfg points into */
    queue_t queue;
    list_t instances;
    unsigned n_instances;
    unsigned instances_closing; /* instances off the list whose handles are still closing */
    unsigned next_instance_id;
    unsigned in_flight;
    bool removed;            /* no longer in the config: finishing what it has, then freed */
    bool failed;
    char failed_reason[160];
    bool unload_requested;   /* admin unload in progress */
    bool load_requested;     /* admin load waiting for an instance to be READY */
    unsigned consecutive_failures;
    uint64_t failure_times[MODEL_FAILURE_WINDOW]; /* ring of monotonic ms */
    unsigned failure_next;
    uint64_t next_start_ms;  /* backoff: no start before this */
    uv_timer_t backoff_timer;
    list_t waiters;          /* admin load/unload requests waiting for a state (conn.h) */
    /* memory and time learned from NVML and completed requests */
    uint64_t est_per_request;  /* 0 = declared value */
    uint64_t peaks[SCHED_PEAK_SAMPLES];
    unsigned n_peaks, peak_next;
    uint64_t load_ms_ewma, run_ms_ewma;
    uint64_t oom_total;
    uint64_t deadline_rejections;
    uint64_t degraded_total;   /* retries at a lower ladder level */
    uint64_t invalid_total;    /* outputs that failed validation */
    uint64_t hangs_total;
    uint64_t recycles_total;
    bool claiming;
    /* counters */
    uint64_t requests_total;
    uint64_t restarts_total;
    uint64_t loads_total;
    uint64_t unloads_total;
    /* metrics (obs/metrics.c). They live with the model_t, so they survive config reloads. */
    uint64_t unloads_by_reason[UNLOAD_REASONS];      /* sums to unloads_total */
    uint64_t restarts_by_reason[RESTART_REASONS];    /* all but RECYCLE sum to restarts_total */
    uint64_t degraded_by_level[MODEL_DEGRADE_LEVELS]; /* level a request was degraded to; sums to degraded_total */
    struct model_outcome {
        char name[MODEL_OUTCOME_NAME_MAX]; /* "ok", "client_error", "queue_full", ... */
        uint64_t n;
    } outcomes[MODEL_OUTCOMES_MAX];      /* requests ended, by outcome (model_note_outcome) */
    unsigned n_outcomes;
    histogram_t duration_hist;           /* arrival -> end, admitted requests (seconds) */
    histogram_t queue_wait_hist;         /* queued -> first dispatch, or -> left the queue (seconds) */
};

model_t *model_create(vramd_t *d, const model_config_t *cfg, config_t *owner);
/* Point the model at a new config (reload). Running instances keep running. */
void model_update_config(model_t *m, const model_config_t *cfg, config_t *owner);
/* The model left the config: finish queued/in-flight, stop instances, then free it. */
void model_remove(model_t *m);
enum model_state model_state(const model_t *m);
const char *model_state_name(enum model_state s);
const char *instance_state_name(enum instance_state s);

/* Ask for the model's queue to be looked at (dispatch, start instances) this loop turn. */
void model_schedule_pump(model_t *m);
/* Run the pump now: dispatch queued requests to free instances, start instances on demand. */
void model_pump(model_t *m);

/* Admin load: clear FAILED and backoff, start an instance if none. */
void model_load(model_t *m);
/* Admin unload: stop every instance once idle (in-flight ones finish first). */
void model_unload(model_t *m, const char *reason);
/* Start pinned (keep_alive: forever) models and external health checks at startup. */
void model_start_pinned(model_t *m);
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

/* An instance finished one request (slot released by the proxy). */
void instance_request_done(instance_t *inst, bool worker_broken);
/* Make room: the unload hook when the model has one, else stop the process. */
void instance_evict(instance_t *inst, const char *why);
/* Replace the instance: stop it once its in-flight requests are done (recycling: after
 * N requests, memory growth, 5 failed requests in a row, OOM with recycle.on_oom). */
void instance_recycle(instance_t *inst, const char *why);
/* A request hung (recycle.hang_timeout): kill the worker now; its exit counts as a failure. */
void instance_kill_hung(instance_t *inst);
/* The scheduler saw the instance's memory come back (ok) or gave up waiting (!ok). */
void instance_reclaimed(instance_t *inst, bool ok);

#endif
