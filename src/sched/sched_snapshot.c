/*
 * sched_snapshot: NVML for the scheduler. sched_init opens NVML (and sets up the shared
 * state), sched_shutdown closes it; each snapshot, read on the thread pool by gpu/nvml.c,
 * arrives here on the loop thread and is applied: each GPU's foreign usage (used minus
 * what the processes of managed instances use, attributed by proc/attrib.h: pid, process
 * group, or the listener pid of an external server; an external Ollama's instances share
 * one process and are measured by what it reports per model), each instance's measured usage
 * booked in its RESIDENT entry, the verified reclaim of unloading instances, the post-load
 * baseline and running peaks that learning uses, and recycling on memory growth. It only
 * reads instances' identities: their refresh is the supervisor's (refresh_identity action).
 * Invariants: foreign usage rises at once and falls only on two agreeing readings; an
 * idle READY instance is booked at max(declared, measured beyond running reservations,
 * floor + lent cache + memory of requests let go of while it ran them, until their
 * cancelled_hold is over), so it never under-counts; a reclaim ends settled or after
 * stop_timeout (+ RECLAIM_GRACE_MS for an exited process). Every snapshot ends with a
 * pump of all waiting models. A good snapshot's read start is the scheduler's freshness
 * (sched_gpu_stale); a timer only logs the turn to stale (gpu_stale) and the next good
 * snapshot its end (gpu_fresh). sched_shutdown never waits for a hung NVML read.
 * Calls down only, into sched_admit.c and scheduler.c.
 */
#include "sched/scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/units.h"
#include "core/core.h"
#include "gpu/gpu.h"
#include "policy/reclaim_rule.h"
#include "proc/attrib.h"
#include "sched/scheduler_int.h"

#define RECLAIM_GRACE_MS 5000
#define IDENTITY_REFRESH_INTERVAL_MS 5000

/* ---- which instance a process belongs to (proc/attrib.h answers, per identity) ------- */

/* The instance that owns pid: the first with the strongest claim (attrib.h); NULL = foreign. */
static instance_t *owner_of(pid_t pid, attrib_cache_t *cache)
{
    instance_t *owner = NULL;
    enum attrib_claim best = ATTRIB_NONE;
    list_foreach(mi, &sched_state.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            enum attrib_claim c = attrib_claim(&in->life.ident, pid, cache);
            if (c > best) {
                best = c;
                owner = in;
            }
            if (best == ATTRIB_PROCESS)
                return owner;
        }
    }
    return owner;
}

/* Before a snapshot is attributed, at most every IDENTITY_REFRESH_INTERVAL_MS: the
 * supervisor refreshes the identities of the instances of GPU models (an external
 * server's listener may have restarted). The scheduler only reads identities. */
static void refresh_identities(uint64_t now)
{
    uint64_t last = sched_state.last_identity_refresh_ms;
    if (now - last < IDENTITY_REFRESH_INTERVAL_MS && last)
        return;
    sched_state.last_identity_refresh_ms = now;
    list_foreach(mi, &sched_state.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        if (!sched_uses_gpu(m))
            continue;
        list_foreach(ii, &m->instances) sched_state.actions.refresh_identity(list_entry(ii, instance_t, link));
    }
}

/* ---- one snapshot applied ------------------------------------------------------------ */

/* Foreign usage rises at once but falls only when two readings in a row agree: one
 * reading taken while workers allocate cannot make capacity look larger than it is. */
static uint64_t settled_foreign(size_t pos, uint64_t raw)
{
    uint64_t foreign = raw;
    uint64_t current = sched_state.ledger.gpus[pos].foreign;
    if (raw < current) {
        foreign = raw > sched_state.foreign_raw[pos] ? raw : sched_state.foreign_raw[pos];
        if (foreign > current)
            foreign = current;
    }
    sched_state.foreign_raw[pos] = raw;
    return foreign;
}

/* An external Ollama or llama.cpp router (url:, model_config_t.report, served_model set)
 * that answered: one process may hold the models of several entries (each its own instance claiming the same
 * listener), so NVML's figure for it cannot be split by process; each instance's memory is
 * what the server reports for its model (Ollama's size_vram; the router's "loaded": the
 * declared resident), and what the processes hold beyond their sum (the server's overhead, a
 * model bigger than declared) stays foreign. */
static bool reports_own_vram(const instance_t *in)
{
    const model_config_t *mc = in->model->cfg;
    return in->external && mc->report != MODEL_REPORT_NONE && mc->served_model && in->life.server_vram >= 0;
}

/* The reporting instances on GPU pos get their reports as measured; returns how much of
 * shared (NVML's bytes of their processes) that covers. */
static uint64_t shared_reports(size_t pos, uint64_t shared)
{
    uint64_t reported = 0;
    list_foreach(mi, &sched_state.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (reports_own_vram(in) && in->memory.gpu_pos == (int)pos) {
                in->memory.measured = (uint64_t)in->life.server_vram;
                reported += in->memory.measured;
            }
        }
    }
    return reported < shared ? reported : shared;
}

/* Step 1, per GPU: each instance's measured usage (its processes' usage summed) and the
 * GPU's foreign usage (what no instance accounts for), booked in the ledger. */
static void measure_gpus(core_t *d, const gpu_snapshot_t *snap)
{
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) list_entry(ii, instance_t, link)->memory.measured = 0;
    }
    attrib_cache_t cache;
    attrib_cache_init(&cache);
    for (size_t pos = 0; pos < sched_state.ledger.n_gpus; pos++) {
        const gpu_device_t *dev = NULL;
        for (size_t k = 0; k < snap->n_devices; k++)
            if (snap->devices[k].index == sched_state.ledger.gpus[pos].index)
                dev = &snap->devices[k];
        if (!dev)
            continue;
        uint64_t attributed = 0, shared = 0;
        for (size_t p = 0; p < dev->n_procs; p++) {
            instance_t *in = owner_of(dev->procs[p].pid, &cache);
            if (!in)
                continue;
            if (reports_own_vram(in)) {
                shared += dev->procs[p].used; /* a server of several models: split by its reports */
                continue;
            }
            in->memory.measured += dev->procs[p].used;
            attributed += dev->procs[p].used;
        }
        attributed += shared_reports(pos, shared);
        uint64_t raw = dev->used > attributed ? dev->used - attributed : 0;
        uint64_t foreign = settled_foreign(pos, raw);
        if (!d->cfg->gpu.foreign_measure)
            foreign = 0;
        ledger_set_gpu(&sched_state.ledger, pos, dev->index, dev->total, d->cfg->gpu.headroom);
        ledger_set_foreign(&sched_state.ledger, pos, foreign);
    }
}

/* Step 2, an instance whose memory is on its way back: is the reclaim done (settled), or
 * has it waited too long? Either way its entry is released (its process is gone) or set
 * to what it still holds, and the supervisor is told. The instance may be gone after. */
static void check_reclaim(model_t *m, instance_t *in, uint64_t now)
{
    bool process_gone = !in->life.proc && !in->external;
    bool settled = false, by_keep = false;
    if (process_gone) {
        settled = in->memory.measured == 0;
    } else {
        /* a hook or a checkpoint: the process stays (CUDA context, residue); settled once
         * at least half came back and either it is down to what the process is known to
         * keep or its usage held still (reclaim_rule.h); until then keep waiting, up to
         * stop_timeout, after which the reclaim is declared incomplete below */
        reclaim_watch_t w = {.last = in->memory.reclaim_last, .stable = in->memory.reclaim_stable};
        settled = reclaim_settled(&w, in->memory.mem.bytes, in->memory.reclaim_keep, in->memory.measured, &by_keep);
        in->memory.reclaim_last = w.last;
        in->memory.reclaim_stable = w.stable;
        if (settled && !by_keep && in->memory.measured > in->memory.reclaim_keep)
            in->memory.reclaim_keep = in->memory.measured; /* what it keeps, learned: the next reclaim ends there */
    }
    if (settled) {
        log_event(LOG_INFO, "memory_reclaimed", "model=%s instance=%u gpu=%d wait_ms=%llu remaining=%llu keep=%llu "
                  "by_keep=%B", m->name, in->id, in->memory.gpu, (unsigned long long)(now - in->memory.reclaim_since_ms),
                  (unsigned long long)in->memory.measured, (unsigned long long)in->memory.reclaim_keep, by_keep);
        in->memory.reclaiming = false;
        if (process_gone && !in->external)
            ledger_release(&sched_state.ledger, &in->memory.mem);
        else
            ledger_resize(&sched_state.ledger, &in->memory.mem, in->memory.measured);
        sched_state.actions.reclaimed(in, true);
    } else if (now - in->memory.reclaim_since_ms > m->cfg->stop_timeout_ms + (process_gone ? RECLAIM_GRACE_MS : 0)) {
        /* bounded by stop_timeout (SPEC 4); an exited process also gets the
         * driver's release lag */
        log_event(LOG_WARN, "reclaim_timeout", "model=%s instance=%u gpu=%d still_held=%llu waited_ms=%llu", m->name,
                  in->id, in->memory.gpu, (unsigned long long)in->memory.measured,
                  (unsigned long long)(now - in->memory.reclaim_since_ms));
        in->memory.reclaiming = false;
        if (process_gone && !in->external)
            ledger_release(&sched_state.ledger, &in->memory.mem); /* what is still held shows as foreign */
        else
            ledger_resize(&sched_state.ledger, &in->memory.mem, in->memory.measured);
        sched_state.actions.reclaimed(in, false);
    }
}

/* Step 3, an idle READY instance: recycle.max_growth. Memory that stays after a request,
 * measured idle. A framework's allocator cache is not a leak: with a clear_cache hook the
 * cache is given back first and what remains is growth; without one, up to one request's
 * estimate is taken as cache and only growth beyond it counts. True when the supervisor
 * was asked to recycle it (the instance may be gone after). */
static bool recycle_on_growth(core_t *d, model_t *m, instance_t *in, uint64_t now)
{
    uint64_t growth_cap = m->cfg->recycle.max_growth;
    if (growth_cap && !m->cfg->clear_cache.set)
        growth_cap += sched_request_estimate(m);
    if (!growth_cap || !in->memory.baseline || in->memory.measured <= in->memory.baseline + growth_cap)
        return false;
    /* cleared: asked back a few readings ago, and no request has run since (one that took
     * the cache again right after the clear leaves it as cache, not growth) */
    bool cache_cleared = !m->cfg->clear_cache.set ||
                         (in->hook.last_clear_cache_ms && now - in->hook.last_clear_cache_ms < 10000 &&
                          now - in->hook.last_clear_cache_ms > 3 * d->cfg->gpu.poll_ms && !in->hook.hook_call &&
                          in->path.last_used_ms < in->hook.last_clear_cache_ms);
    if (cache_cleared) {
        char why[96];
        snprintf(why, sizeof why, "memory grew by %llu MiB since load",
                 (unsigned long long)((in->memory.measured - in->memory.baseline) >> 20));
        sched_state.actions.recycle(in, why);
        return true;
    }
    if (!in->hook.hook_call && now - in->hook.last_clear_cache_ms >= SCHED_CLEAR_CACHE_MIN_INTERVAL_MS)
        sched_clear_caches((size_t)in->memory.gpu_pos, NULL);
    return false;
}

/* Step 4, a READY instance that is not stopping: its post-load baseline and the growth
 * check while idle, its peak while running (learning), and its RESIDENT entry. */
static void book_ready(core_t *d, model_t *m, instance_t *in, uint64_t now)
{
    if (in->memory.cancelled_held && in->memory.cancelled_until <= now) {
        /* the requests let go of would have ended: their memory is cache again (this
         * snapshot's pump of every waiting model lends it) */
        log_event(LOG_INFO, "cancelled_hold_end", "model=%s instance=%u bytes=%llu", m->name, in->id,
                  (unsigned long long)in->memory.cancelled_held);
        in->memory.cancelled_held = 0;
    }
    /* A reading that began before its last request ended may show that request's memory
     * still allocated: taken as the idle instance's, it would be lent as verified cache to
     * the next request (a framework that freed it has none) and look like growth. The next
     * reading, begun after the end, verifies what was assumed. */
    if (in->path.in_flight == 0 && in->memory.unverified > 0 && sched_state.fresh_ms <= in->memory.unverified_ms)
        return;
    if (in->path.in_flight == 0) {
        /* the post-load baseline: taken from the first snapshot after READY (its
         * first request waited for it), and it only ever falls afterwards */
        if (in->memory.baseline_pending || (!in->memory.baseline && in->path.requests_total == 0) ||
            (in->memory.baseline && in->memory.measured < in->memory.baseline))
            in->memory.baseline = in->memory.measured;
        if (in->memory.baseline_pending) {
            in->memory.baseline_pending = false;
            model_schedule_pump(m);
        }
        if (recycle_on_growth(d, m, in, now))
            return;
    } else {
        if (in->memory.measured > in->memory.run_peak)
            in->memory.run_peak = in->memory.measured;
        if (in->path.in_flight > 1)
            in->memory.run_alone = false;
    }
    /* what it holds beyond its running requests' reservations (cache included),
     * never less than its floor plus the cache already lent to running requests and what
     * requests let go of while it had them may still take (a stopped or queueing worker
     * runs them later: a reading without them does not lower the booking, nor the driver's
     * limit that follows it, before memory.cancelled_hold is over) */
    uint64_t declared = m->cfg->memory.resident;
    uint64_t booked_apart = in->memory.running_reserved + (in->memory.grant_extra.gpu >= 0 ? in->memory.grant_extra.bytes : 0);
    uint64_t held = in->memory.measured > booked_apart ? in->memory.measured - booked_apart : 0;
    uint64_t lent = sched_instance_floor(in) + in->memory.credit_used + sched_instance_cancelled(in, now);
    uint64_t b = held > lent ? held : lent;
    if (b < declared)
        b = declared;
    in->memory.unverified = 0;
    if (b != in->memory.mem.bytes)
        ledger_resize(&sched_state.ledger, &in->memory.mem, b);
}

/* One instance that holds a ledger entry, by its state. The instance may be gone after
 * (reclaimed, recycled). */
static void book_instance(core_t *d, model_t *m, instance_t *in, uint64_t now)
{
    uint64_t declared = m->cfg->memory.resident;
    if (in->memory.reclaiming) {
        check_reclaim(m, in, now);
    } else if (in->life.state == INST_STARTING) {
        in->memory.reclaim_keep = reclaim_keep_from_start(in->memory.reclaim_keep, in->memory.measured); /* its context */
        uint64_t apart = in->memory.grant_extra.gpu >= 0 ? in->memory.grant_extra.bytes : 0; /* granted past its load */
        uint64_t held = in->memory.measured > apart ? in->memory.measured - apart : 0;
        uint64_t b = held > declared ? held : declared;
        if (b != in->memory.mem.bytes)
            ledger_resize(&sched_state.ledger, &in->memory.mem, b);
    } else if (in->life.state == INST_READY && !in->life.stop_requested) {
        book_ready(d, m, in, now);
    } else if (in->path.in_flight > 0) {
        if (in->memory.measured > in->memory.run_peak)
            in->memory.run_peak = in->memory.measured;
    } else if (in->life.state == INST_UNLOADED || in->life.state == INST_DOWN || in->life.state == INST_PARKED) {
        /* unloaded or parked (residue, context) or an external server that is down: vramd does
         * not control it, so it is booked at exactly what NVML shows it holding */
        if (in->memory.measured != in->memory.mem.bytes)
            ledger_resize(&sched_state.ledger, &in->memory.mem, in->memory.measured);
    }
}

static void apply_snapshot(const gpu_snapshot_t *snap)
{
    core_t *d = sched_state.core;
    uint64_t now = core_now();
    refresh_identities(now);
    measure_gpus(d, snap);
    /* residents, reclaim, peaks */
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach_safe(ii, tmp, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (in->memory.mem.gpu >= 0)
                book_instance(d, m, in, now);
        }
    }
    sched_pump_all(d);
    sched_idle_models_tick();
}

/* ---- NVML: start, snapshots, stop ---------------------------------------------------- */

static uint64_t g_snapshot_seq; /* snapshots applied (sched_snapshot_seq) */

uint64_t sched_snapshot_seq(void) { return g_snapshot_seq; }

void sched_poll_now(void)
{
    if (sched_state.gpu)
        gpu_poll_now(sched_state.gpu);
}

/* ---- staleness: the age of the last good snapshot (scheduler.h, sched_gpu_stale) ---- */

static void on_stale_timer(uv_timer_t *t);

/* Wake up when the snapshot would turn stale (only to say so: admission and readiness ask
 * sched_gpu_stale themselves, whenever they run). */
static void arm_stale_timer(void)
{
    if (!sched_state.stale_timer_on)
        return;
    uint64_t after = sched_stale_after_ms(), age = sched_snapshot_age_ms();
    uv_timer_start(&sched_state.stale_timer, on_stale_timer, age < after ? after - age + 1 : 1, 0);
}

static void on_stale_timer(uv_timer_t *t)
{
    (void)t;
    if (!sched_gpu_stale()) {
        arm_stale_timer(); /* stale_after grew (a reload) */
        return;
    }
    if (sched_state.stale_noted)
        return;
    sched_state.stale_noted = true;
    uint64_t age = sched_snapshot_age_ms();
    log_event(LOG_WARN, "gpu_stale", "age_ms=%llu stale_after_ms=%llu read_in_flight=%B last_error=%s",
              (unsigned long long)age, (unsigned long long)sched_stale_after_ms(),
              gpu_read_in_flight(sched_state.gpu), sched_state.ok ? "" : sched_state.error);
    core_note_event(sched_state.core, "GPU figures stale: no NVML reading for %llu ms; requests needing new memory wait",
                    (unsigned long long)age);
}

/* A good snapshot came: its read began at snap's taken_ms - read time (monotonic, the loop
 * clock's base). */
static void note_fresh(const gpu_snapshot_t *snap)
{
    uint64_t now = core_now();
    uint64_t began = snap->taken_ms - snap->read_us / 1000;
    sched_state.fresh_ms = began && began < now ? began : now;
    if (sched_state.stale_noted && !sched_gpu_stale()) {
        sched_state.stale_noted = false;
        log_event(LOG_INFO, "gpu_fresh", "read_ms=%llu", (unsigned long long)(snap->read_us / 1000));
        core_note_event(sched_state.core, "GPU figures fresh again (NVML read took %llu ms)",
                        (unsigned long long)(snap->read_us / 1000));
    }
    arm_stale_timer();
}

/* Once the first figures are in: every model that no GPU could ever hold is said at once
 * (it shows `failed` with `cannot_fit` in /v1/status and its /ready, and /readyz counts it
 * failed), not only to its first client as a 422. */
static void log_cannot_fit(core_t *d)
{
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        char why[256];
        if (!m->removed && sched_never_fits(m, why, sizeof why))
            log_event(LOG_WARN, "model_cannot_fit", "model=%s why=%s", m->name, why);
    }
}

static void on_snapshot(void *ctx, const gpu_snapshot_t *snap)
{
    (void)ctx;
    if (!snap->ok) {
        if (sched_state.ok)
            log_event(LOG_ERROR, "nvml_failed", "error=%s", snap->error);
        sched_state.ok = false;
        snprintf(sched_state.error, sizeof sched_state.error, "%s", snap->error);
        return;
    }
    if (!sched_state.ok)
        log_event(LOG_INFO, "nvml_ok", "devices=%zu read_us=%llu", snap->n_devices, (unsigned long long)snap->read_us);
    sched_state.ok = true;
    sched_state.error[0] = '\0';
    memcpy(sched_state.snap, snap, sizeof *snap);
    note_fresh(snap);
    g_snapshot_seq++;
    apply_snapshot(sched_state.snap); /* its pump admits what waited for fresh figures */
    if (g_snapshot_seq == 1)
        log_cannot_fit(sched_state.core);
}

typedef struct owned_by {
    const instance_t *inst;
    attrib_cache_t cache;
} owned_by_t;

static bool is_owned_by(void *ctx, pid_t pid)
{
    owned_by_t *o = ctx;
    return owner_of(pid, &o->cache) == o->inst;
}

size_t sched_instance_gpu_pids(const instance_t *inst, pid_t *out, size_t max)
{
    if (!sched_state.ok || !sched_state.snap)
        return 0;
    owned_by_t o = {.inst = inst};
    attrib_cache_init(&o.cache);
    return attrib_gpu_pids(sched_state.snap, is_owned_by, &o, out, max);
}

void sched_init(core_t *d, const sched_actions_t *actions)
{
    memset(&sched_state, 0, sizeof sched_state);
    sched_state.core = d;
    sched_state.actions = *actions;
    ledger_init(&sched_state.ledger);
    sched_state.snap = calloc(1, sizeof *sched_state.snap);
    const config_t *c = d->cfg;
    gpu_options_t opt = {
        .library = getenv("VRAMD_NVML_LIBRARY") ? NULL : c->gpu.nvml_library,
        .indexes = c->gpu.devices,
        .n_indexes = c->gpu.n_devices,
        .uuids = c->gpu.device_uuids,
        .n_uuids = c->gpu.n_device_uuids,
    };
    char err[256];
    sched_state.gpu = sched_state.snap ? gpu_open(&opt, err, sizeof err) : NULL;
    if (!sched_state.gpu) {
        snprintf(sched_state.error, sizeof sched_state.error, "NVML unavailable: %s",
                 sched_state.snap ? err : "out of memory");
        log_event(LOG_WARN, "nvml_unavailable", "error=%s", sched_state.error);
        return;
    }
    if (gpu_probe_once(sched_state.gpu, sched_state.snap) != 0 || !sched_state.snap->ok) {
        snprintf(sched_state.error, sizeof sched_state.error, "NVML read failed: %s", sched_state.snap->error);
        log_event(LOG_WARN, "nvml_unavailable", "error=%s", sched_state.error);
    } else {
        sched_state.ok = true;
        sched_state.fresh_ms = core_now();
        for (size_t i = 0; i < sched_state.snap->n_devices && i < LEDGER_MAX_GPUS; i++) {
            const gpu_device_t *dev = &sched_state.snap->devices[i];
            ledger_set_gpu(&sched_state.ledger, i, dev->index, dev->total, c->gpu.headroom);
            char t[32];
            units_format_size(dev->total, t, sizeof t);
            log_event(LOG_INFO, "gpu_found", "index=%d name=%s uuid=%s total=%s library=%s", dev->index, dev->name,
                      dev->uuid, t, gpu_library(sched_state.gpu));
        }
    }
    if (uv_timer_init(d->loop, &sched_state.stale_timer) == 0) {
        sched_state.stale_timer_on = true;
        uv_unref((uv_handle_t *)&sched_state.stale_timer); /* it never keeps the loop alive */
        arm_stale_timer();
    }
    gpu_poll_start(sched_state.gpu, d->loop, c->gpu.poll_ms, on_snapshot, NULL);
}

void sched_shutdown(core_t *d)
{
    (void)d;
    if (sched_state.stale_timer_on) {
        uv_close((uv_handle_t *)&sched_state.stale_timer, NULL); /* static memory: no callback */
        sched_state.stale_timer_on = false;
    }
    if (sched_state.gpu) {
        /* never waits for NVML: a read still in the driver is abandoned (gpu.h) */
        gpu_close(sched_state.gpu);
        sched_state.gpu = NULL;
    }
    free(sched_state.snap);
    sched_state.snap = NULL;
}
