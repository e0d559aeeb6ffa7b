/*
 * scheduler: memory-aware admission. Joins what NVML measures (gpu/), the memory book
 * (ledger.c) and the placement rules (placer.c) to the model runtimes (supervisor.c).
 *
 * Who holds what in the ledger (policy/ledger.h). The scheduler is its only writer: the
 * other modules book through the sched_book_* verbs below and read it through the const
 * sched_ledger(); `make lint` (mk/lint_ledger.py) fails a ledger write outside sched/.
 * Entries, each embedded in its holder:
 *   - RESIDENT, inst->memory.mem: an instance that needs GPU memory holds one from the moment it
 *     is placed (sched_place_instance, before its process starts) until NVML shows its
 *     memory returned after it stopped (verified reclaim) — or, bounded, stop_timeout + 5 s
 *     after its exit; released at once (sched_book_release) when its worker never ran or
 *     its reclaim cannot or need not be verified (no NVML, vramd stopping). While it is
 *     starting, or loaded and idle, the entry is max(declared resident, measured usage), so
 *     memory a framework keeps cached counts as held by that instance. Unloaded, down or
 *     PARKED it is what NVML shows (residue, a CUDA context, a shim park's context); a
 *     reload or a parked instance's way back sets it to its resident again before the hook
 *     or the tier is called (sched_book_resize, workers/hooks.c and park.c).
 *   - REQUEST, r->mem: a running request holds one, sized estimate - cache credit (the part
 *     of its instance's cached memory it can reuse), from dispatch (sched_admit) until its
 *     slot is released (sched_request_finished), however the request ends; the
 *     REQUEST_ENDED listener releases it once more as a safety net (sched_book_request_release,
 *     path/dispatch.c). Its bytes are folded into the RESIDENT entry when it ends on a
 *     READY instance (the framework keeps what it allocated until a reading says otherwise).
 *   - prompt hold, a REQUEST entry of a shadow request (path/prompt_hold.c): a queued
 *     ComfyUI prompt keeps its request's slot past the answer; the answered request's
 *     entry moves to the hold's shadow (sched_book_hold) and is released through
 *     sched_request_finished when the prompt is done, gone with its worker or timed out.
 *   - shim grant extra, inst->memory.grant_extra (a REQUEST entry; gate/shim_grants.c): what the
 *     CUDA shim was granted past the instance's bookings (sched_book_grant), folded into
 *     the RESIDENT entry once the instance is idle and a reading measured it
 *     (sched_book_grant_settle), dropped when its worker exits (sched_book_grant_drop).
 * Figures that are not entries:
 *   - asked, per GPU: the bytes the shim's waiting asks lack (sched_book_asks): no new
 *     reservation may take them;
 *   - claimed, per GPU: a starving queue head's or load's claim (below; sched/ only);
 *   - cancelled hold, per instance (inst->memory.cancelled_held/until, sched_admit.c): what requests
 *     let go of while the worker had them is folded into the RESIDENT entry like any ended
 *     request, and not lent as cache before memory.cancelled_hold is over;
 *   - parks (workers/park*.c): a tier books nothing itself; the RESIDENT entry follows
 *     NVML while it parks, and host memory is booked apart (policy/host_ledger.h).
 * Models that declare no memory (resident 0, per_request 0, no learning) never touch a
 * GPU: they are admitted on concurrency alone.
 *
 * Foreign usage: at each NVML snapshot, per GPU, foreign = used - usage of processes
 * vramd manages (an instance's pid, its process group, or for external servers the pid
 * listening on their port). Capacity = total - headroom - foreign.
 *
 * Learning: while exactly one request runs on an instance, its peak usage above the
 * instance's post-load baseline is a sample; the estimate for `per_request: learn` models
 * is the 95th percentile of the last 32 samples plus 10 % (the declared value until 3
 * samples exist); an OOM raises it at once. Load and run times are learned (EWMA) for
 * deadlines and eviction cost.
 *
 * Anti-starvation: a queue head that does not fit and has waited longer than its model's
 * learned run time (at least 1 s) claims the memory it needs on its GPU: smaller requests
 * of other models may no longer take it. A load or wake claims the same way after its
 * learned load time when only requests hold its room; when a model with work (running or
 * queued) holds it, models take turns instead (sched_turn.c): the claim waits until the
 * swap is due (a deadline, a higher priority, max_wait), and an idle card goes to the
 * waiting model worth most. An idle instance whose model has queued requests
 * is not evicted, except for a claimant whose oldest request has waited longer than that
 * model's oldest (otherwise each would wait for the other: the claim blocks that model's
 * next request, its queue blocks its eviction).
 * Return conventions: bool "did it"; enum placer_result for placement.
 */
#ifndef VRAMD_SCHED_SCHEDULER_H
#define VRAMD_SCHED_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/model.h"
#include "core/types.h"
#include "policy/ledger.h"
#include "policy/placer.h"

#define SCHED_PEAK_SAMPLES MODEL_PEAK_SAMPLES

/* What the scheduler decides and the supervisor carries out (set by the composition root,
 * so that the policy never calls the mechanism by name). */
typedef struct sched_actions {
    void (*evict)(instance_t *inst, const char *why);     /* make room: the cheapest tier (park, unload, stop) */
    void (*recycle)(instance_t *inst, const char *why);   /* replace once idle (memory growth) */
    void (*reclaimed)(instance_t *inst, bool ok);         /* NVML shows its memory back (or gave up) */
    /* ask an idle instance for its allocator cache (its clear_cache hook; an NVML reading
     * follows the answer); false when it was not asked */
    bool (*clear_cache)(instance_t *inst);
    /* how long a request would wait for inst to come back if evicted now (the tier evict
     * would take: a learned wake or restore, a reload, a start); NULL = its learned load time */
    uint64_t (*return_cost_ms)(const instance_t *inst);
    /* how long evict would take to free inst's memory (a park's copy out; 0 for a stop);
     * NULL = 0 */
    uint64_t (*way_out_ms)(const instance_t *inst);
    /* bytes of inst's entry an eviction now (or its park under way) would leave on the GPU
     * (a shim park keeps the CUDA context); NULL = 0 */
    uint64_t (*evict_leaves)(const instance_t *inst);
    /* refresh which processes are inst's (its identity, proc/attrib.h: an external server's
     * listener may have changed); asked before a snapshot is attributed, every few seconds
     * at most. Required: the scheduler only reads identities, the supervisor writes them */
    void (*refresh_identity)(instance_t *inst);
    /* gpu.idle_model: load m as an admin load would (it waits for memory like one); NULL:
     * idle models are never brought back */
    void (*bring_back)(model_t *m);
} sched_actions_t;

void sched_init(core_t *d, const sched_actions_t *actions);
void sched_shutdown(core_t *d);
bool sched_gpu_ok(void);
const char *sched_gpu_error(void);
/* Staleness: the last good NVML snapshot is older than gpu.stale_after (its read began that
 * long ago: a hung or failing NVML). While stale, readiness says so (503 gpu_stale), and
 * the figures are not trusted for NEW memory: a request is admitted only when its whole
 * reservation is covered by memory already booked for its instance (its verified cache;
 * a model without per-request memory: always), nothing is placed, loaded, woken or evicted;
 * the rest waits queued (bounded by its deadline) until a fresh snapshot pumps every model.
 * Never stale before the first good snapshot or without NVML (gpu_ok says so then). */
bool sched_gpu_stale(void);
/* Age of the last good snapshot in ms (0 before the first one). */
uint64_t sched_snapshot_age_ms(void);
/* gpu.stale_after in ms (the config's, resolved). */
uint64_t sched_stale_after_ms(void);
/* The GPU ledger, read-only: every write outside sched/ is one of the sched_book_* verbs. */
const ledger_t *sched_ledger(void);

/* ---- booking verbs (sched_book.c): the only ledger writes of other modules ----------
 * Each carries out what its caller decided on an entry its object embeds; none allocates.
 * inst's RESIDENT entry let go at once (its worker never ran or exited with no reclaim to
 * verify: no NVML, vramd stopping); a no-op when it holds none. */
void sched_book_release(instance_t *inst);
/* inst's RESIDENT entry set to bytes: a reload (workers/hooks.c) or a parked instance's way
 * back (workers/park.c) books its memory before the hook or the tier runs; a no-op while
 * the entry is not on a GPU. */
void sched_book_resize(instance_t *inst, uint64_t bytes);
/* r's REQUEST entry let go (the REQUEST_ENDED safety net; a no-op when already released). */
void sched_book_request_release(request_t *r);
/* The CUDA shim granted inst's processes bytes more past its bookings: its grant_extra
 * entry grows by them (made on inst's GPU when it has none); a no-op off a GPU or for 0. */
void sched_book_grant(instance_t *inst, uint64_t bytes);
/* inst is idle and measured: its grant_extra folded into its RESIDENT entry (when that is
 * on a GPU) and released. */
void sched_book_grant_settle(instance_t *inst);
/* inst's worker exited: its grant_extra let go. */
void sched_book_grant_drop(instance_t *inst);
/* The bytes the shim's waiting asks lack, per GPU position (replaces each GPU's figure). */
void sched_book_asks(const uint64_t per_gpu[LEDGER_MAX_GPUS]);
/* A prompt hold keeps r's slot booked past its answer: r's REQUEST entry moves, same GPU
 * and bytes, to the hold's shadow request (a no-op when r holds none). */
void sched_book_hold(request_t *r, request_t *shadow);

/* Does this model use GPU memory at all? */
bool sched_model_uses_gpu(const model_config_t *mc);
/* Current per-request estimate in bytes (declared, learned, raised by OOMs). */
uint64_t sched_request_estimate(const model_t *m);
/* The estimate at a ladder level (the level's own per_request when it declares one). */
uint64_t sched_level_estimate(const model_t *m, unsigned level);
/* Read r's size class from its body at its current level (memory.size_field; once per
 * level, as a ladder may rewrite the size). */
void sched_read_size(const model_t *m, request_t *r);
/* What r books: the estimate of its class (ladder level, size class; policy/estimate.h),
 * from the level's estimate as the base. */
uint64_t sched_request_need(const model_t *m, const request_t *r);
/* The most a request at level 0 may book now, over every known size class (status). */
uint64_t sched_request_estimate_max(const model_t *m);
/* The smallest estimate over the levels a request may run at (0 = as sent, then the
 * degrade ladder): what a load, or a parked instance's way back, needs room for. */
uint64_t sched_smallest_estimate(const model_t *m);
/* The first ladder level (0 = as sent) whose resident + reservation can ever fit on an
 * allowed GPU (total - headroom); -1 when none can (422). Levels above it would OOM for sure. */
int sched_first_possible_level(const model_t *m);
/* Can a request at this ladder level ever fit an allowed GPU (resident + the level's
 * estimate <= total - headroom)? True without NVML figures. */
bool sched_level_possible(const model_t *m, unsigned level);
/* 422: can this model's request never fit on any allowed GPU? */
bool sched_never_fits(const model_t *m, char *why, size_t whylen);
/* degrade.when: to_fit: the first ladder level (>= 1) whose reservation fits right now on
 * a READY instance of m with a free slot, or 0 when none does. */
unsigned sched_level_fitting_now(const model_t *m);
/* Predicted ms until a new request of m would start (0 when unknown or immediate). */
uint64_t sched_predicted_start_ms(const model_t *m);

/* Try to reserve memory for r on inst; true = reserved (or no GPU needed). */
bool sched_admit(request_t *r, instance_t *inst);
/* r's slot is released: release its reservation, learn from it. */
void sched_request_finished(request_t *r, instance_t *inst, uint64_t run_ms, bool ok);
/* The queue head r of m could not be admitted on inst: claim memory if it starves,
 * free cached memory of idle instances when a hook exists. */
void sched_blocked(model_t *m, request_t *r, instance_t *inst);
void sched_unblocked(model_t *m);

/* Find a GPU for a new instance of m (starting evictions when needed). On PLACER_FITS,
 * *gpu_pos is where to start it and the resident entry is already reserved by
 * sched_place_instance. */
enum placer_result sched_place(model_t *m, size_t *gpu_pos);
void sched_place_instance(instance_t *inst, size_t gpu_pos);
/* What asked sched_make_room_on for room: the reason its claims (memory_claimed) and the
 * evictions it starts (eviction) are logged with, sched_room_reason_name's words. */
enum sched_room_reason {
    SCHED_ROOM_WAKE = 0,   /* "wake waiting": a parked instance's way back (workers/park.c) */
    SCHED_ROOM_SHIM_GRANT, /* "shim grant": a CUDA shim's ask past its grant (gate/shim_grants.c) */
    SCHED_ROOM_REASON_COUNT
};
const char *sched_room_reason_name(enum sched_room_reason why);
/* Room for `extra` more bytes on one GPU (a parked instance's way back: its memory returns
 * where it was; a shim's waiting ask: on its instance's GPU), evicting idle instances as
 * sched_place does and claiming the GPU once the model has waited longer than its learned
 * load time. PLACER_FITS: it fits now or the evictions that make it fit have started. */
enum placer_result sched_make_room_on(model_t *m, size_t gpu_pos, uint64_t extra, enum sched_room_reason why);
/* What placing a new instance of m would meet now, changing nothing (no eviction, no
 * claim; for the fleet agent): FITS, EVICT (idle instances of other models would go), WAIT
 * or NEVER; out gets the need (resident + one request at its cheapest level) and the
 * figures of the allowed GPU with the most memory free to admit. */
typedef struct sched_room {
    uint64_t need, free, capacity;
    uint64_t largest_capacity; /* the largest capacity (total - headroom - foreign) of its GPUs */
} sched_room_t;
enum placer_result sched_place_dry(const model_t *m, sched_room_t *out);
/* Would one more request of its model fit now beside inst (its cache credit counted)? */
bool sched_request_fits_now(const instance_t *inst);
/* The instance stopped being loaded (exit or unload): its entry is released once NVML
 * shows the memory back. */
void sched_instance_unloading(instance_t *inst);
bool sched_instance_holds_memory(const instance_t *inst);
/* A new instance's memory part (inst->memory, the scheduler's alone): no GPU, no ledger
 * position, its entries unlinked (the supervisor calls it when it makes the instance). */
void sched_instance_init(instance_t *inst);
/* What an instance holds at least: max(declared resident, post-load baseline); what it
 * holds beyond that is cache (or growth). */
uint64_t sched_instance_floor(const instance_t *inst);
/* memory.cancelled_hold of m now (auto: twice its learned run time, at most 10 m; a minute
 * before one is learned), and what inst's requests let go of while it ran them still hold
 * from being lent at loop time now (0 once the hold is over). */
uint64_t sched_cancelled_hold_ms(const model_t *m);
uint64_t sched_instance_cancelled(const instance_t *inst, uint64_t now);
/* A request for m arrived (first attempts only): the mean gap between its requests is
 * learned for eviction cost (placer.h, rule 2b). */
void sched_note_arrival(model_t *m);
/* The expected time until m's next request: its mean gap, at least the time since its
 * last one (an idle model's gap grows); 0 when no request was ever seen. */
uint64_t sched_expected_gap_ms(const model_t *m);
/* Learned load time (ms) for eviction cost and deadlines. */
void sched_note_load(model_t *m, uint64_t load_ms);
/* An OOM was seen for r of m: raise the estimate of r's class (its ladder level and size
 * class) and of no other, by a quarter (at least 256 MiB), or to what the answer said the
 * process needed beyond the model's resident memory when that is more (process_need:
 * oom_message_need of the answer, 0 when unknown); never past what the largest allowed GPU
 * can give a request beside the model. With several requests in one process, process_need
 * holds all of them, so the raise errs on the large side. The raise falls again as the
 * class's requests succeed (policy/estimate.h). */
void sched_note_oom(model_t *m, const request_t *r, uint64_t process_need);
/* A request of (level, size_class) of m ran alone and took `need` bytes beyond the model's
 * resident memory, measured exactly (the CUDA shim's grants): the class's estimate is raised
 * as an OOM raises it (not counted as one) when need is above it. */
void sched_note_true_size(model_t *m, unsigned level, unsigned size_class, uint64_t need);

/* Add the "gpus" array and memory fields to a status object (cJSON *). */
void sched_status_json(void *gpus_array);

/* One GPU's figures, the same numbers /v1/status shows (for obs/metrics.c). */
typedef struct sched_gpu_figures {
    int index;               /* NVML index */
    bool seen;               /* the last NVML snapshot named it: uuid, name and used are valid */
    char uuid[96];
    char name[96];
    uint64_t total, used, foreign, headroom, capacity, reserved, free_to_admit;
    uint64_t age_ms; /* of the snapshot these figures come from (sched_snapshot_age_ms) */
    bool stale;      /* sched_gpu_stale */
} sched_gpu_figures_t;
/* How full, 0..1, the memory m's requests may use is: the reservations of its running
 * requests over those plus what is free to admit on the GPUs its instances are on (its
 * "KV cache utilization", /metrics vramd_model_memory_reserved_ratio); a model without
 * GPU memory: requests running over its slots; no instance on a GPU: 0. */
double sched_model_reserved_ratio(const model_t *m);
/* What a new request could get on the GPU at ledger position pos right now if the idle
 * instances there (evictable: nothing in flight or queued, not pinned) were evicted: its
 * free memory plus their resident entries. For job claims (jobs/jobs_attempt.c): work
 * that fits this is worth taking, the scheduler makes the room. */
uint64_t sched_room_with_evictions(size_t pos);
/* GPUs in the ledger (0 before NVML answered). */
size_t sched_gpu_count(void);
/* What is booked for an instance on its GPU: its resident entry, its running requests'
 * reservations and what its CUDA shim was granted past them (0 when not on a GPU). */
uint64_t sched_instance_booked(const instance_t *in);
/* The NVML probe (gpu/gpu.h), NULL without NVML: for driver calls beside the scheduler's
 * reads (the driver's per-cgroup limits). */
struct gpu *sched_gpu_handle(void);
/* The figures of the GPU at ledger position pos; false when pos is out of range. */
bool sched_gpu_figures(size_t pos, sched_gpu_figures_t *out);
/* An instance just became READY: take its post-load baseline from a snapshot read now
 * (its first request waits for it, one NVML read). */
void sched_instance_ready(instance_t *inst);
/* NVML snapshots applied so far (+1 per reading, after it was booked). A reading asked for
 * with sched_poll_now at seq s is applied by s + 2 at the latest (one in flight may be older). */
uint64_t sched_snapshot_seq(void);
/* Ask for an NVML reading now (queued after the one in flight, if any). */
void sched_poll_now(void);
/* The processes NVML's last reading shows holding GPU memory for inst (its pid, an external
 * server's listener, or a member of its process group), at most max into out; returns how
 * many there are (more than max when out was too small; 0 without a reading). */
size_t sched_instance_gpu_pids(const instance_t *inst, pid_t *out, size_t max);
/* ---- models that take turns on a card (sched_turn.c) ------------------------------- */
/* Why a model took a card from others (a swap): the card held no work (idle), its oldest
 * request passed max_wait (bound), a deadline, a higher priority, or a running model's
 * request starving for memory (memory). */
enum sched_swap_reason {
    SCHED_SWAP_NONE = 0,
    SCHED_SWAP_IDLE,
    SCHED_SWAP_BOUND,
    SCHED_SWAP_DEADLINE,
    SCHED_SWAP_PRIORITY,
    SCHED_SWAP_MEMORY,
    SCHED_SWAP_REASON_COUNT
};
const char *sched_swap_reason_name(enum sched_swap_reason r);
/* m's max_wait in ms: its config's, or auto = max(60 s, 6 x its learned way in). */
uint64_t sched_max_wait_ms(const model_t *m);
/* Swaps on the GPU at ledger position pos by reason, and the ms they took (evictions to
 * the newcomer READY); false when pos is out of range. */
bool sched_swap_figures(size_t pos, uint64_t counts[SCHED_SWAP_REASON_COUNT], uint64_t *ms);
/* inst became READY: a swap made for its model on its GPU ends (its seconds counted). */
void sched_turn_ready(const instance_t *inst);

/* ---- the visible queue (sched_queue.c; its model of the future is written there) ----- */
enum sched_wait_for {
    SCHED_WAIT_SLOT = 0, /* its model's running requests hold every slot */
    SCHED_WAIT_MEMORY,   /* a slot is free, its reservation does not fit yet */
    SCHED_WAIT_LOAD,     /* its model loads or wakes without displacing work */
    SCHED_WAIT_SWAP,     /* a model with work holds the card; the swap is not due */
    SCHED_WAIT_BOUND,    /* its swap is due (max_wait, a deadline, a priority) */
    SCHED_WAIT_FOR_COUNT
};
const char *sched_wait_for_name(enum sched_wait_for w);
typedef struct sched_queue_entry {
    const request_t *r;
    const model_t *m;
    int gpu;           /* NVML index where it will run (-1: not known, or no GPU) */
    unsigned position; /* 1.. in its model's service order */
    uint64_t waited_ms, eta_start_ms, eta_done_ms; /* expected times from now */
    enum sched_wait_for waiting_for;
} sched_queue_entry_t;
/* the waiting models planned per GPU (more wait, unplanned: their turn counts as now) */
#define SCHED_QUEUE_TURNS_MAX 64
/* m's queued requests in service order with their expected times, at most max into out;
 * how many. Reads only. */
size_t sched_queue_model(const model_t *m, sched_queue_entry_t *out, size_t max);
/* Expected ms from now until a new request of m would start (behind its queue, after its
 * turn on the card: what a 503's Retry-After and vramd_queue_eta_seconds say). */
uint64_t sched_queue_eta_ms(const model_t *m);

/* ---- gpu.idle_model (sched_idle_model.c) --------------------------------------------- */
/* After a snapshot: cards idle for gpu.idle_model_after bring their idle model back. */
void sched_idle_models_tick(void);
/* Is inst's model the idle model of its GPU (kept past its keep_alive while it is)? */
bool sched_is_idle_model(const instance_t *inst);

/* Pump every model that has queued requests (memory was released). */
void sched_pump_all(core_t *d);

#endif
