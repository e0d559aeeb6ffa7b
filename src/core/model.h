/*
 * model: the runtime objects of one configured model (model_t) and of one of its workers
 * (instance_t). They live in the core because every layer reads them: the request path
 * queues into model->queue and holds slots on instances, the scheduler books their memory,
 * the supervisor runs their lifecycle, the services show them.
 *
 * Who writes what: an instance's state is in parts, each a struct type below whose head
 * names its one writer, so that who may change a field is where the field is declared:
 *   inst->life    the process and its lifecycle: the supervisor (workers/: instance.c,
 *                 model_state.c, worker_cmds.c, ...); its identity (ident) through proc/attrib.h
 *   inst->memory  its GPU memory: the scheduler (sched/), also the only writer of the GPU
 *                 ledger those entries are on (everyone else books through its sched_book_*
 *                 verbs, sched/scheduler.h "Who holds what")
 *   inst->park    its park: the parking files (workers/park*.c, host_book.c); a park tier's
 *                 own state sits behind park.tier_state, made and freed by the tier
 *                 (workers/park_tier.h): a new tier adds no field here
 *   inst->hook    its hook calls: workers/hooks.c
 *   inst->gate    the CUDA shim's and the driver limit's state: gate/shim_grants.c, driver_limit.c
 *   inst->path    its requests (slots, counts, idle connections): the request path (path/)
 * link, model, id and external are set when the supervisor makes it. The dispatcher
 * (path/dispatch.c) owns the queue and the in-flight counts (inst->path.in_flight,
 * model->in_flight). The states and the restart policy are described in workers/supervisor.h.
 *
 * Invariants: inst->path.in_flight <= cfg->concurrency; model->in_flight is the sum of its
 * instances' path.in_flight; model->queue.depth counts the requests in QUEUED state of that
 * model; model->n_instances counts every instance object (any state) and never exceeds
 * cfg->instances.
 */
#ifndef VRAMD_CORE_MODEL_H
#define VRAMD_CORE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/line_ring.h"
#include "common/list.h"
#include "core/core.h"
#include "core/types.h"
#include "config/config.h"
#include "common/histogram.h"
#include "policy/estimate.h"
#include "policy/host_ledger.h"
#include "policy/ledger.h"
#include "policy/queue.h"
#include "proc/attrib.h"

#define MODEL_PEAK_SAMPLES 32 /* per-request peaks remembered for the estimate (scheduler) */

enum instance_state {
    INST_STARTING = 0,
    INST_READY,
    INST_DOWN,      /* external only: health failing */
    INST_STOPPING,
    INST_UNLOADING, /* its unload hook was called; waiting for NVML to show memory back */
    INST_UNLOADED,  /* process (or external server) up, models unloaded; reload hook brings it back */
    INST_RELOADING, /* reload hook called */
    INST_PARKING,   /* a park tier started (sleep hook called); waiting for NVML to show the memory gone */
    INST_PARKED,    /* parked: the process lives, its weights in host memory (inst->park.park_tier says how) */
    INST_RESUMING,  /* the tier's return started (wake hook); waiting for NVML to show the memory back */
};

/* How an instance in PARKING, PARKED or RESUMING is parked: an index into the park tier table
 * (workers/park_tier.h: one ops row per tier, walked in this order, cheapest first) and into
 * model_t.park_stats. A new tier is one value here (before PARK_TIER_COUNT), one file and one
 * row of that table. PARK_NONE: not parked. */
enum park_tier { PARK_SLEEP = 0, PARK_SHIM, PARK_CHECKPOINT, PARK_TIER_COUNT, PARK_NONE = PARK_TIER_COUNT };

/* A park tier's private state for one instance: the tier's own struct, which begins with this
 * head (defined in workers/park_tier.h); made and freed by the tier, never read by others. */
typedef struct park_tier_state park_tier_state_t;

/* What a model learned of one park tier (workers/park.c, park_cost.c): both halves of its
 * round trip (EWMA 0.7/0.3) and how often each was taken. */
typedef struct park_tier_stats {
    uint64_t out_ms_ewma;  /* way out: the park's start to the memory gone */
    uint64_t back_ms_ewma; /* way back: the return's start (wake hook, restore) to the memory back */
    uint64_t parks;        /* parks by this tier that settled */
    uint64_t returns;      /* returns from it that settled (READY again) */
} park_tier_stats_t;

enum model_state {
    MODEL_STOPPED = 0,
    MODEL_STARTING,
    MODEL_READY,
    MODEL_DRAINING,
    MODEL_UNLOADING,
    MODEL_FAILED,
};

#define MODEL_FAILURE_WINDOW 5 /* failures remembered for the failed-state rule */
#define MODEL_LAST_OUTPUT_LINES 5   /* a failed worker's last output lines kept (model.last_output) */
#define MODEL_LAST_OUTPUT_LINE 160  /* bytes kept of each */
#define MODEL_LAST_OUTPUT_MAX (MODEL_LAST_OUTPUT_LINES * (MODEL_LAST_OUTPUT_LINE + 1) + 1)

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

/* Which of a model's hooks vramd calls (vramd_hook_calls_total{hook}; workers/hooks.c makes
 * every call). Names: hook_kind_name. */
enum hook_kind {
    HOOK_CLEAR_CACHE = 0, /* give the allocator cache back (the scheduler's, or before a park) */
    HOOK_UNLOAD,          /* eviction without parking, the tier after a park */
    HOOK_RELOAD,          /* an UNLOADED instance needed again */
    HOOK_SLEEP,           /* park tier: weights to host memory */
    HOOK_WAKE,            /* a PARKED (sleep) instance needed again, or an external server found */
    HOOK_KINDS
};

/* How a hook call ended (vramd_hook_calls_total{outcome}). Names: hook_outcome_name. */
enum hook_outcome {
    HOOK_OK = 0,           /* a 2xx answer */
    HOOK_HTTP_ERROR,       /* an answer, not 2xx */
    HOOK_FAILED,           /* no valid answer (refused, reset, malformed) or the call could not be made */
    HOOK_TIMEOUT,          /* no answer within the hook's timeout */
    HOOK_LOCAL_SHORTAGE,   /* not made, or broken off, for want of vramd's own descriptors or memory */
    HOOK_OUTCOMES
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
    RESTART_PARK_FAILED,      /* a checkpoint or restore of it failed (the park tiers, workers/park.c) */
    RESTART_RECYCLE,          /* planned replacement (see UNLOAD_RECYCLE) */
    RESTART_REASONS
};

/* Per-model request metrics (obs/metrics.c); see docs/metrics.md for the label values. */
#define MODEL_OUTCOMES_MAX 32      /* distinct outcome labels kept per model */
#define MODEL_OUTCOME_NAME_MAX 32
#define MODEL_DEGRADE_LEVELS 33    /* ladder levels 0..32 (config's LADDER_MAX is 32) */

/* An instance's state comes in parts, each written by one module (named at its type; the
 * others only read it). instance_new (workers/instance.c) makes the instance zeroed and
 * sets each part's first values through its owner where it has one (sched_instance_init). */

/* The process and its lifecycle. Written only by the supervisor (src/workers: instance.c
 * for start, health, exit, stop, outliers and the request slot's release; model_state.c's
 * instance_set_state for `state`; worker_cmds.c for the stop commands; server_report.c for
 * server_vram; hooks.c, park*.c and supervisor.c for why it is stopped or unloaded);
 * `ident` only through proc/attrib.h. */
typedef struct instance_life {
    enum instance_state state;
    struct process *proc;    /* supervised: the process; NULL once exited */
    pid_t pid;
    char host[64];
    int port;
    attrib_identity_t ident; /* which processes are its (proc/attrib.h): set and refreshed through
                              * attrib only; the scheduler reads it */
    int64_t server_vram;     /* what the server itself reports for this model (Ollama's /api/ps
                              * size_vram, read from its health answers); -1 = never reported */
    uint64_t server_vram_ms; /* when that answer came (core_now) */
    unsigned failed_in_row;  /* consecutive requests that ended in a worker failure or 5xx */
    uint64_t started_ms, ready_ms;
    bool stop_requested;     /* vramd asked it to stop: its exit is not a crash */
    bool suspect;            /* its connection broke (or it hung): no new requests until a health check passes */
    const char *stop_reason;
    unsigned health_failures;
    struct http_call *health_call;
    enum unload_reason unload_reason; /* why vramd stops it (set with stop_requested) */
    enum restart_reason kill_reason;  /* RESTART_HANG / UNHEALTHY when vramd killed it; else CRASH */
    uv_timer_t timer;        /* startup polling / health interval (the sleep tier's confirmation retry) */
    uv_timer_t idle_timer;   /* keep_alive (park_evict.c), park_keep_alive (park_host.c) */
    int closing_handles;     /* uv handles still to close before the instance is freed */
    /* outlier ejection (workers/instance.c): out of rotation until ejected_until_ms */
    uint64_t ejected_until_ms;
    unsigned ejections;      /* times it was ejected; the next ejection lasts 30 s x this */
    bool hang_killed;        /* SIGABRT sent (a hang or failing health checks); SIGKILL follows after stop_timeout */
    /* stop commands (workers/worker_cmds.c): stop_cmd, and a container's removal, run one
     * after another while STOPPING; the instance is not freed before the last one ends */
    struct process *cmd_proc;   /* the command running; NULL = none */
    unsigned cmd_next;          /* the next step of the sequence */
    bool container_removed;     /* `ENGINE rm -f NAME` ran for this instance */
    void (*cmd_done)(instance_t *inst); /* called once the sequence ended */
} instance_life_t;

/* Its GPU memory. Written only by the scheduler (src/sched), which is also the only writer of
 * the GPU ledger its entries are on (sched/scheduler.h "Who holds what"); sched_instance_init
 * sets the first values (no GPU, entries unlinked). */
typedef struct instance_memory {
    int gpu;                 /* NVML index, -1 = not assigned (model uses no GPU memory) */
    int gpu_pos;             /* position in the ledger, -1 = none */
    ledger_entry_t mem;      /* RESIDENT reservation (scheduler.h says when it is held) */
    /* the CUDA shim (gate/shim_grants.c asks, sched_book_grant books): memory granted to its
     * processes' allocations past their grant while requests ran (a REQUEST entry; folded into
     * mem once it is idle) */
    ledger_entry_t grant_extra;
    uint64_t measured;       /* bytes NVML shows for its processes (last snapshot) */
    uint64_t baseline;       /* measured when it became ready (nothing cached yet) */
    bool baseline_pending;   /* READY, waiting for the first snapshot to take the baseline */
    uint64_t run_peak;       /* peak measured while requests ran */
    bool run_alone;          /* only one request ran since run_peak was reset */
    uint64_t credit_used;    /* cached memory lent to running requests */
    /* memory of requests let go of while the worker had them (request.abandoned): not lent
     * as cache before cancelled_until (loop clock; memory.cancelled_hold, sched_admit.c) */
    uint64_t cancelled_held;
    uint64_t cancelled_until;
    uint64_t running_reserved; /* sum of the REQUEST entries of its running requests */
    uint64_t unverified;     /* bytes assumed cached at request ends, not yet measured */
    uint64_t unverified_ms;  /* loop clock of the last such request end: a reading that began
                              * before it may show that request still running */
    bool reclaiming;         /* stopped/unloaded: waiting for NVML to show memory back */
    uint64_t reclaim_since_ms;
    uint64_t reclaim_last;   /* unload hooks: last measurement, to see the usage settle */
    unsigned reclaim_stable; /* consecutive snapshots without a further drop */
    uint64_t reclaim_keep;   /* what its processes are known to keep after an unload or sleep hook
                              * (CUDA context, residue): the least NVML showed while it started,
                              * or what a settled reclaim left; 0 = not known (sched_snapshot.c) */
} instance_memory_t;

/* Its park (SPEC 4.1). Written only by the parking files (src/workers: park.c, park_evict.c,
 * park_host.c, the tiers park_<name>.c, host_book.c for parked_host); model_state.c's
 * instance_set_state clears park_clearing at any state change; instance_new sets park_tier
 * PARK_NONE. A tier's own state is behind tier_state, never a field here. */
typedef struct instance_park {
    /* set while PARKING, PARKED or RESUMING */
    enum park_tier park_tier;
    /* where the tier reports how its call ended (workers/park_tier.h), set by park.c before
     * each tier call: an enum park_tier_outcome and a reason */
    void (*park_report)(instance_t *inst, int outcome, const char *why);
    uint64_t park_before;    /* GPU bytes booked when the park began */
    uint64_t park_left;      /* GPU bytes NVML still showed once parked (booked on the GPU ledger) */
    uint64_t park_since_ms;  /* when the park, or the return, began */
    uint64_t wake_seq;       /* RESUMING: the first NVML snapshot (sched_snapshot_seq) read after the wake answered */
    bool wake_found;         /* RESUMING an external server found at start (maybe left asleep) */
    host_entry_t parked_host; /* the host memory it holds while parked (workers/host_book.c) */
    /* each tier's private state (workers/park_tier.h), indexed by enum park_tier: made by the
     * tier on first use, freed with the instance; NULL = none yet */
    park_tier_state_t *tier_state[PARK_TIER_COUNT];
    /* an eviction's park waits for the clear_cache hook and a fresh NVML reading first
     * (workers/park_evict.c): not evicted again meanwhile, its memory counted as on its way */
    bool park_clearing;
    uint64_t park_clear_seq, park_clear_since_ms, park_clear_before;
    char park_clear_why[96];
    enum unload_reason park_clear_reason; /* who asked for the park: eviction, admin unload, keep_alive */
} instance_park_t;

/* Its hook calls. Written only by workers/hooks.c (every hook call, and the sleep tier's
 * confirmation through hooks_confirm_*): at most one call in flight. */
typedef struct instance_hook {
    struct http_call *hook_call;  /* the one hook call in flight */
    enum hook_kind hook_kind;     /* which hook it is */
    uint64_t hook_deadline_ms;    /* when its timeout runs out (core_now() clock) */
    /* whom its answer goes to after it is counted and logged (an http_call_cb) */
    void (*hook_cb)(void *ctx, int status, const char *body, size_t len, const char *error);
    uint64_t local_retry_ms; /* a hook failed for vramd's own shortage (EMFILE ...): no new try before this */
    uint64_t last_clear_cache_ms; /* its last clear_cache hook call (the scheduler reads it) */
} instance_hook_t;

/* The gate between its processes and the GPU (src/gate): each written only by its own file. */
typedef struct instance_gate {
    struct shim_inst *shim;           /* the CUDA shim's state (gate/shim_grants.c); NULL = no shim */
    struct driver_limit *dlimit;      /* the driver's per-cgroup limit on its leaf (gate/driver_limit.c); NULL = none */
} instance_gate_t;

/* Its requests. Written only by the request path: path/dispatch.c takes a slot (in_flight,
 * requests_total, last_used_ms), instance_request_done (workers/instance.c, which the proxy
 * calls once per slot) gives it back; path/proxy.c keeps the idle connections (pool, pool_size;
 * instance_new makes the list empty). */
typedef struct instance_path {
    unsigned in_flight;
    uint64_t requests_total;
    uint64_t last_used_ms;
    list_t pool;             /* idle upstream_t connections to this instance */
    unsigned pool_size;
} instance_path_t;

struct instance {
    /* fixed when workers/instance.c makes it (link: its place on the model's list) */
    list_t link; /* model->instances */
    model_t *model;
    unsigned id;             /* per model, increasing */
    bool external;
    instance_life_t life;
    instance_memory_t memory;
    instance_park_t park;
    instance_hook_t hook;
    instance_gate_t gate;
    instance_path_t path;
};

struct model {
    list_t link;             /* vramd->models */
    core_defer_t pump;       /* queued for the check phase: look at the queue (dispatch) */
    core_t *core;
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
    /* the last failure recorded (model_record_failure) and the last lines its worker wrote
     * (MODEL_LAST_OUTPUT_LINES at most, one per line, each cut to MODEL_LAST_OUTPUT_LINE):
     * shown while consecutive_failures > 0 or failed, in the 503 and in /v1/status */
    char last_failure[160];
    char last_output[MODEL_LAST_OUTPUT_MAX];
    bool unload_requested;   /* admin unload in progress */
    bool load_requested;     /* admin load waiting for an instance to be READY */
    bool unload_local_failed; /* admin unload: the hook could not be called for vramd's own shortage (503) */
    bool pinned_admin;       /* POST /v1/models/NAME/pin until .../unpin: kept like keep_alive: forever.
                              * Lives with the model_t: survives a config reload, not a restart of vramd */
    unsigned consecutive_failures;
    uint64_t failure_times[MODEL_FAILURE_WINDOW]; /* ring of monotonic ms */
    unsigned failure_next;
    uint64_t next_start_ms;  /* backoff: no start before this */
    uv_timer_t backoff_timer;
    list_t waiters;          /* admin load/unload requests waiting for a state (conn.h) */
    /* memory and time learned from NVML and completed requests */
    uint64_t est_per_request;  /* 0 = declared value; learned from every class (the base of a new class) */
    est_table_t est;           /* per-request memory per (ladder level, size class): policy/estimate.h */
    uint64_t peaks[MODEL_PEAK_SAMPLES];
    unsigned n_peaks, peak_next;
    uint64_t load_ms_ewma, run_ms_ewma;
    park_tier_stats_t park_stats[PARK_TIER_COUNT]; /* per park tier: learned way out and back, counts */
    uint64_t parks_total, wakes_total, park_refusals; /* all park tiers: parks done, returns, parks the host refused */
    uint64_t checkpoint_failures; /* checkpoint tier: parks or restores that failed */
    uint64_t last_arrival_ms;  /* when its last request arrived (0 = none yet) */
    uint64_t arrival_gap_ms;   /* mean gap between its requests (EWMA; 0 = fewer than two) */
    uint64_t oom_total;
    uint64_t cancelled_holds;  /* requests let go of while a worker ran them, memory held (sched_admit.c) */
    uint64_t deadline_rejections;
    uint64_t deadline_expiries[2]; /* 504 deadline_exceeded: [0] while queued, [1] while running (path/dispatch.c) */
    uint64_t degraded_total;   /* retries at a lower ladder level */
    uint64_t invalid_total;    /* outputs that failed validation */
    uint64_t hangs_total;
    uint64_t recycles_total;
    uint64_t retry_budget_refusals; /* 503 retry_budget_exhausted (path/verdict.c) */
    uint64_t ejections_total;  /* outlier ejections of its instances, replaced ones included */
    bool claiming;
    /* the claim's cutoff (sched/sched_turn.c): the model's requests queued no later than it
     * go ahead of the claim; 0 = the claimant's oldest queued request (a starving claim) */
    uint64_t claim_cutoff_ms;
    uint8_t claim_reason;    /* enum sched_swap_reason of the claim (sched/scheduler.h) */
    /* counters */
    uint64_t requests_total;
    uint64_t restarts_total;
    uint64_t loads_total;
    uint64_t unloads_total;
    /* metrics (obs/metrics.c). They live with the model_t, so they survive config reloads. */
    uint64_t unloads_by_reason[UNLOAD_REASONS];      /* sums to unloads_total */
    uint64_t restarts_by_reason[RESTART_REASONS];    /* all but RECYCLE sum to restarts_total */
    uint64_t hook_calls[HOOK_KINDS][HOOK_OUTCOMES];  /* hook calls by hook and how they ended */
    uint64_t degraded_by_level[MODEL_DEGRADE_LEVELS]; /* level a request was degraded to; sums to degraded_total */
    struct model_outcome {
        char name[MODEL_OUTCOME_NAME_MAX]; /* "ok", "client_error", "queue_full", ... */
        uint64_t n;
    } outcomes[MODEL_OUTCOMES_MAX];      /* requests ended, by outcome (model_note_outcome) */
    unsigned n_outcomes;
    line_ring_t logs;                    /* recent worker output lines (limits.worker_log_lines,
                                          * worker_log_bytes); freed with the model */
    histogram_t duration_hist;           /* arrival -> end, admitted requests (seconds) */
    histogram_t queue_wait_hist;         /* queued -> first dispatch, or -> left the queue (seconds) */
};

/* Pinned: loaded and kept (never evicted, never stopped by keep_alive), by the config
 * (keep_alive: forever) or by an admin pin (pinned_admin). */
static inline bool model_pinned_by_config(const model_t *m)
{
    return m->cfg->keep_alive_ms == CONFIG_FOREVER;
}
static inline bool model_pinned(const model_t *m)
{
    return model_pinned_by_config(m) || m->pinned_admin;
}

/* Ask for the model's queue to be looked at (dispatch, start instances) this loop turn. */
void model_schedule_pump(model_t *m);
/* The model named `name` (a name or an alias in the current config); NULL when none. */
model_t *model_find(core_t *core, const char *name);

#endif
