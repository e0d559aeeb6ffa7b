/*
 * scheduler: memory-aware admission, placement, eviction and learning.
 * The rules (who holds which ledger entry, when; foreign usage; learning; claims) are
 * written in scheduler.h. All state here is touched on the loop thread only; NVML is read
 * on the thread pool by gpu/nvml.c and arrives through on_snapshot.
 */
#include "sched/scheduler.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/log.h"
#include "common/units.h"
#include "core/core.h"
#include "gpu/gpu.h"
#include "gpu/procfs.h"
#include "core/request.h"
#include "workers/http_call.h"

#define CLEAR_CACHE_MIN_INTERVAL_MS 2000
#define RECLAIM_GRACE_MS 5000
#define LISTENER_LOOKUP_INTERVAL_MS 5000
#define STARVE_MIN_MS 1000
#define LEARN_MIN_SAMPLES 3
#define PGID_CACHE 64

static enum placer_result make_room(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need,
                                    size_t *gpu_pos);
static void claim_if_starving(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, uint64_t threshold,
                              const char *why);

static struct {
    core_t *core;
    gpu_t *gpu;
    bool ok;
    char error[400];
    ledger_t ledger;
    gpu_snapshot_t *snap; /* last good snapshot (heap: it is large) */
    placer_candidate_t cands[PLACER_MAX_EVICT];
    uint64_t foreign_raw[LEDGER_MAX_GPUS]; /* last raw reading: a drop needs two in a row */
    uint64_t last_listener_lookup_ms;
    sched_actions_t actions; /* what the scheduler has the supervisor do */
} S;

ledger_t *sched_ledger(void) { return &S.ledger; }
bool sched_gpu_ok(void) { return S.ok; }
const char *sched_gpu_error(void) { return S.error; }

bool sched_model_uses_gpu(const model_config_t *mc)
{
    return mc->memory.resident > 0 || mc->memory.per_request > 0 || mc->memory.learn;
}

static bool uses_gpu(const model_t *m) { return sched_model_uses_gpu(m->cfg); }

uint64_t sched_request_estimate(const model_t *m)
{
    return m->est_per_request ? m->est_per_request : m->cfg->memory.per_request;
}

uint64_t sched_level_estimate(const model_t *m, unsigned level)
{
    const model_config_t *mc = m->cfg;
    if (level > 0 && level <= mc->degrade.n_ladder && mc->degrade.ladder[level - 1].has_per_request)
        return mc->degrade.ladder[level - 1].per_request;
    return sched_request_estimate(m);
}

static void allowed_mask(const model_t *m, bool out[LEDGER_MAX_GPUS])
{
    for (size_t i = 0; i < LEDGER_MAX_GPUS; i++) {
        out[i] = false;
        if (i >= S.ledger.n_gpus)
            continue;
        if (!m->cfg->gpus) {
            out[i] = true;
            continue;
        }
        for (size_t k = 0; k < m->cfg->n_gpus; k++)
            if (m->cfg->gpus[k] == S.ledger.gpus[i].index)
                out[i] = true;
    }
}

static uint64_t largest_room(const model_t *m)
{
    bool allowed[LEDGER_MAX_GPUS];
    allowed_mask(m, allowed);
    uint64_t biggest = 0;
    for (size_t i = 0; i < S.ledger.n_gpus; i++) {
        const ledger_gpu_t *g = &S.ledger.gpus[i];
        uint64_t room = g->total > g->headroom ? g->total - g->headroom : 0;
        if (allowed[i] && room > biggest)
            biggest = room;
    }
    return biggest;
}

int sched_first_possible_level(const model_t *m)
{
    if (!uses_gpu(m) || !S.ok || S.ledger.n_gpus == 0)
        return 0;
    uint64_t room = largest_room(m);
    for (unsigned level = 0; level <= m->cfg->degrade.n_ladder; level++)
        if (m->cfg->memory.resident + sched_level_estimate(m, level) <= room)
            return (int)level;
    return -1;
}

bool sched_never_fits(const model_t *m, char *why, size_t whylen)
{
    if (!uses_gpu(m) || !S.ok || S.ledger.n_gpus == 0)
        return false;
    const model_config_t *mc = m->cfg;
    uint64_t per = sched_request_estimate(m);
    for (size_t i = 0; i < mc->degrade.n_ladder; i++)
        if (mc->degrade.ladder[i].has_per_request && mc->degrade.ladder[i].per_request < per)
            per = mc->degrade.ladder[i].per_request;
    uint64_t need = mc->memory.resident + per;
    bool allowed[LEDGER_MAX_GPUS];
    allowed_mask(m, allowed);
    uint64_t biggest = 0;
    for (size_t i = 0; i < S.ledger.n_gpus; i++) {
        if (!allowed[i])
            continue;
        const ledger_gpu_t *g = &S.ledger.gpus[i];
        uint64_t room = g->total > g->headroom ? g->total - g->headroom : 0;
        if (room > biggest)
            biggest = room;
        if (need <= room)
            return false;
    }
    char a[32], b[32];
    units_format_size(need, a, sizeof a);
    units_format_size(biggest, b, sizeof b);
    snprintf(why, whylen, "model %s needs %s (resident + per request) but the largest allowed GPU offers %s",
             m->name, a, b);
    return true;
}

unsigned sched_level_fitting_now(const model_t *m)
{
    for (unsigned level = 1; level <= m->cfg->degrade.n_ladder; level++) {
        uint64_t est = sched_level_estimate(m, level);
        list_foreach(it, &m->instances) {
            const instance_t *in = list_entry(it, instance_t, link);
            if (in->state != INST_READY || in->stop_requested || in->in_flight >= m->cfg->concurrency)
                continue;
            if (in->gpu_pos < 0 || ledger_fits(&S.ledger, (size_t)in->gpu_pos, est, m))
                return level;
        }
    }
    return 0;
}

uint64_t sched_predicted_start_ms(const model_t *m)
{
    uint64_t run = m->run_ms_ewma;
    unsigned ready = 0;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->state == INST_READY && !in->stop_requested)
            ready++;
    }
    unsigned slots = m->cfg->concurrency * (ready ? ready : 1);
    uint64_t ahead = m->queue.depth + m->in_flight;
    uint64_t wait = 0;
    if (run && ahead >= slots)
        wait = ((ahead - slots) / slots + 1) * run;
    if (!ready)
        wait += m->load_ms_ewma;
    return wait;
}

/* ---- cached memory ----------------------------------------------------------------- */

static uint64_t instance_floor(const instance_t *inst)
{
    uint64_t floor = inst->model->cfg->memory.resident;
    return inst->baseline > floor ? inst->baseline : floor;
}

/* Cached memory the instance really holds (measured), excluding what is only assumed
 * cached since the last snapshot: only verified cache can be lent to its next requests. */
static uint64_t instance_cache(const instance_t *inst)
{
    uint64_t floor = instance_floor(inst);
    uint64_t verified = inst->mem.bytes > inst->unverified ? inst->mem.bytes - inst->unverified : 0;
    return verified > floor ? verified - floor : 0;
}

static void on_hook_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    inst->hook_call = NULL;
    log_event(status >= 200 && status < 300 ? LOG_INFO : LOG_WARN, "clear_cache_done",
              "model=%s instance=%u status=%d error=%s", inst->model->name, inst->id, status, error);
    if (S.gpu)
        gpu_poll_now(S.gpu);
}

/* Ask idle instances on GPU pos that hold cached memory (and have a clear_cache hook) to
 * give it back. Instances without a hook keep holding it until unloaded. */
static void clear_caches(size_t pos, const model_t *except)
{
    core_t *d = S.core;
    uint64_t now = core_now();
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        if (m == except || !m->cfg->clear_cache.set)
            continue;
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (in->gpu_pos != (int)pos || in->state != INST_READY || in->in_flight > 0 || in->hook_call ||
                instance_cache(in) < 64ULL * 1024 * 1024 ||
                now - in->last_clear_cache_ms < CLEAR_CACHE_MIN_INTERVAL_MS)
                continue;
            in->last_clear_cache_ms = now;
            http_call_req_t req = {.host = in->host,
                                   .port = in->port,
                                   .method = m->cfg->clear_cache.method ? m->cfg->clear_cache.method : "POST",
                                   .path = m->cfg->clear_cache.path,
                                   .timeout_ms = m->cfg->clear_cache.timeout_ms ? m->cfg->clear_cache.timeout_ms : 30000};
            char err[160];
            log_event(LOG_INFO, "clear_cache", "model=%s instance=%u cached=%llu", m->name, in->id,
                      (unsigned long long)instance_cache(in));
            if (http_call_start(d->loop, &req, on_hook_answer, in, &in->hook_call, err, sizeof err) != 0)
                in->hook_call = NULL;
        }
    }
}

/* ---- admission --------------------------------------------------------------------- */

bool sched_admit(request_t *r, instance_t *inst)
{
    model_t *m = inst->model;
    if (inst->gpu_pos < 0 || !uses_gpu(m))
        return true;
    uint64_t est = sched_level_estimate(m, r->level);
    uint64_t cache = instance_cache(inst);
    uint64_t avail = cache > inst->credit_used ? cache - inst->credit_used : 0;
    uint64_t credit = est < avail ? est : avail;
    uint64_t need = est - credit;
    if (ledger_reserve(&S.ledger, (size_t)inst->gpu_pos, &r->mem, LEDGER_REQUEST, need, m->name, m) != 0) {
        /* A claim holds back models whose oldest waiting request is younger than the
         * claimant's oldest, not older (ties: not held back). evictable() is the exact
         * complement (it evicts a queued model only for a strictly older claimant), so a
         * model whose queue blocks its own eviction and a claimant waiting for that
         * eviction can never wait for each other. */
        const ledger_gpu_t *g = &S.ledger.gpus[inst->gpu_pos];
        const model_t *claimant = g->claimed ? g->claim_holder : NULL;
        if (!claimant || claimant == m)
            return false;
        uint64_t claimant_oldest = queue_oldest_ms(&claimant->queue);
        uint64_t own_oldest = queue_oldest_ms(&m->queue);
        if (r->t_queued && (!own_oldest || r->t_queued < own_oldest))
            own_oldest = r->t_queued;
        bool ahead = own_oldest && (!claimant_oldest || own_oldest <= claimant_oldest);
        if (!ahead || ledger_reserve_ahead_of_claim(&S.ledger, (size_t)inst->gpu_pos, &r->mem, LEDGER_REQUEST,
                                                    need, m->name, m) != 0)
            return false;
    }
    r->credit = credit;
    inst->credit_used += credit;
    inst->running_reserved += need;
    if (inst->in_flight == 0) {
        inst->run_peak = inst->measured;
        inst->run_alone = true;
    } else {
        inst->run_alone = false;
    }
    sched_unblocked(m);
    return true;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void learn_peak(model_t *m, uint64_t sample)
{
    m->peaks[m->peak_next] = sample;
    m->peak_next = (m->peak_next + 1) % SCHED_PEAK_SAMPLES;
    if (m->n_peaks < SCHED_PEAK_SAMPLES)
        m->n_peaks++;
    if (!m->cfg->memory.learn || m->n_peaks < LEARN_MIN_SAMPLES)
        return;
    uint64_t sorted[SCHED_PEAK_SAMPLES];
    memcpy(sorted, m->peaks, m->n_peaks * sizeof sorted[0]);
    qsort(sorted, m->n_peaks, sizeof sorted[0], cmp_u64);
    size_t idx = (m->n_peaks * 95 + 99) / 100;
    if (idx > 0)
        idx--;
    uint64_t q = sorted[idx];
    uint64_t est = q + q / 10;
    if (est != m->est_per_request) {
        char a[32], b[32];
        units_format_size(m->est_per_request ? m->est_per_request : m->cfg->memory.per_request, a, sizeof a);
        units_format_size(est, b, sizeof b);
        log_event(LOG_INFO, "per_request_learned", "model=%s from=%s to=%s samples=%u", m->name, a, b, m->n_peaks);
        m->est_per_request = est;
    }
}

void sched_request_finished(request_t *r, instance_t *inst, uint64_t run_ms, bool ok)
{
    model_t *m = inst->model;
    bool held = r->mem.gpu >= 0;
    uint64_t released = r->mem.bytes;
    ledger_release(&S.ledger, &r->mem);
    inst->running_reserved = inst->running_reserved > released ? inst->running_reserved - released : 0;
    /* Until NVML says otherwise, assume the framework kept what the request allocated
     * (PyTorch's caching allocator does): the instance holds it now. The next idle
     * snapshot sets the entry to what is really measured, so this never under-counts. */
    if (held && released && inst->mem.gpu >= 0 && inst->state == INST_READY && !inst->stop_requested) {
        ledger_resize(&S.ledger, &inst->mem, inst->mem.bytes + released);
        inst->unverified += released;
    }
    inst->credit_used = inst->credit_used > r->credit ? inst->credit_used - r->credit : 0;
    r->credit = 0;
    if (ok) {
        m->run_ms_ewma = m->run_ms_ewma ? (m->run_ms_ewma * 7 + run_ms * 3) / 10 : run_ms;
        if (inst->run_alone && held) {
            uint64_t floor = inst->baseline ? inst->baseline : m->cfg->memory.resident;
            if (inst->run_peak > floor)
                learn_peak(m, inst->run_peak - floor);
        }
    }
    if (held)
        sched_pump_all(m->core);
}

void sched_note_oom(model_t *m)
{
    m->oom_total++;
    uint64_t est = sched_request_estimate(m);
    uint64_t raised = est + est / 4;
    if (raised < est + 256ULL * 1024 * 1024)
        raised = est + 256ULL * 1024 * 1024;
    log_event(LOG_WARN, "per_request_raised", "model=%s from=%llu to=%llu reason=%s", m->name,
              (unsigned long long)est, (unsigned long long)raised, "oom");
    m->est_per_request = raised;
}

void sched_note_load(model_t *m, uint64_t load_ms)
{
    m->load_ms_ewma = m->load_ms_ewma ? (m->load_ms_ewma * 7 + load_ms * 3) / 10 : load_ms;
}

void sched_blocked(model_t *m, request_t *r, instance_t *inst)
{
    if (inst->gpu_pos < 0 || !S.ok)
        return;
    uint64_t est = sched_level_estimate(m, r->level);
    uint64_t cache = instance_cache(inst);
    uint64_t avail = cache > inst->credit_used ? cache - inst->credit_used : 0;
    uint64_t need = est - (est < avail ? est : avail);
    /* Memory the last request left cached is lent only once a snapshot has measured it.
     * When that unverified part would cover this request, evicting another model for it
     * would be a waste (a reload later): measure now, the snapshot pumps again. */
    if (inst->unverified > 0 && S.gpu &&
        need <= inst->unverified + ledger_free_for(&S.ledger, (size_t)inst->gpu_pos, m)) {
        gpu_poll_now(S.gpu);
        return;
    }
    bool only[LEDGER_MAX_GPUS] = {false};
    only[inst->gpu_pos] = true;
    size_t pos;
    enum placer_result res = make_room(m, only, need, &pos);
    if (res == PLACER_FITS) {
        model_schedule_pump(m); /* e.g. the claim it needed is now its own */
        return;
    }
    if (res == PLACER_WAIT) {
        uint64_t threshold = m->run_ms_ewma > STARVE_MIN_MS ? m->run_ms_ewma : STARVE_MIN_MS;
        bool was_claiming = m->claiming;
        claim_if_starving(m, only, need, threshold, "request waiting");
        if (!was_claiming && m->claiming && make_room(m, only, need, &pos) == PLACER_FITS)
            model_schedule_pump(m);
    }
}

void sched_unblocked(model_t *m)
{
    if (!m->claiming)
        return;
    ledger_unclaim(&S.ledger, m);
    m->claiming = false;
}

/* ---- placement and eviction -------------------------------------------------------- */

/* May `in` be evicted to make room for model `for_m`? Idle (nothing in flight), not
 * pinned, not busy with a hook. A model with queued requests is normally kept (its queue
 * is about to use it), with one exception that breaks a mutual wait: `for_m` claims memory
 * (it starves) and its oldest request has waited longer than this model's oldest. Then this
 * model's queued requests are blocked by that claim and the claimant by this model's
 * queue; the older wait goes first (FIFO across models), and this model reloads after. */
static bool evictable(const instance_t *in, const model_t *for_m)
{
    const model_t *m = in->model;
    /* a supervised worker left unloaded with memory still held (residue): stop it */
    if (in->state == INST_UNLOADED && !in->external && in->proc && in->mem.gpu >= 0 && in->mem.bytes > 0 &&
        !in->hook_call)
        return m->queue.depth == 0;
    if (in->state != INST_READY || in->in_flight > 0 || in->stop_requested || in->gpu_pos < 0 || in->hook_call)
        return false;
    if (m->cfg->keep_alive_ms == CONFIG_FOREVER)
        return false;
    if (in->external && !m->cfg->unload.set)
        return false;
    if (m->queue.depth > 0) {
        uint64_t own_oldest = queue_oldest_ms(&m->queue);
        uint64_t their_oldest = queue_oldest_ms(&for_m->queue);
        if (!for_m->claiming || !their_oldest || !own_oldest || their_oldest >= own_oldest)
            return false; /* sched_admit lets this model's work go ahead of the claim instead */
    }
    return true;
}

/* Memory on GPU pos that is on its way back: evicted or stopping instances whose entries
 * are still held until NVML shows the memory returned. */
static uint64_t incoming(size_t pos)
{
    uint64_t sum = 0;
    list_foreach(mi, &S.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (in->gpu_pos != (int)pos || in->mem.gpu < 0)
                continue;
            if (in->reclaiming || in->state == INST_UNLOADING || in->state == INST_STOPPING ||
                (in->stop_requested && in->state == INST_READY))
                sum += in->mem.bytes;
        }
    }
    return sum;
}

/* The load waiting for memory (or the request starving) claims the GPU, so that smaller
 * work of other models stops taking what it needs. */
static void claim_if_starving(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, uint64_t threshold,
                              const char *why)
{
    uint64_t now = core_now();
    uint64_t oldest = queue_oldest_ms(&m->queue);
    if (m->claiming || !oldest || now - oldest <= threshold)
        return;
    size_t best = 0;
    uint64_t cap = 0;
    bool any = false;
    for (size_t g = 0; g < S.ledger.n_gpus; g++)
        if (allowed[g] && ledger_capacity(&S.ledger, g) >= cap) {
            cap = ledger_capacity(&S.ledger, g);
            best = g;
            any = true;
        }
    if (any && ledger_claim(&S.ledger, best, need, m) == 0) {
        m->claiming = true;
        log_event(LOG_INFO, "memory_claimed", "model=%s gpu=%d bytes=%llu waited_ms=%llu reason=%s", m->name,
                  S.ledger.gpus[best].index, (unsigned long long)need, (unsigned long long)(now - oldest), why);
    }
}

/* Find room for `need` bytes for model m on one of the allowed GPUs: it fits now (FITS,
 * *gpu_pos set), or idle instances of other models are being evicted for it (EVICT), or
 * it has to wait for running work or for memory already on its way back (WAIT), or it
 * can never fit (NEVER). */
static enum placer_result make_room(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, size_t *gpu_pos)
{
    placer_candidate_t *cands = S.cands;
    size_t n = 0;
    list_foreach(mi, &S.core->models) {
        model_t *om = list_entry(mi, model_t, link);
        if (om == m)
            continue;
        list_foreach(ii, &om->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (n >= PLACER_MAX_EVICT || !evictable(in, m))
                continue;
            cands[n++] = (placer_candidate_t){.instance = in,
                                              .gpu_pos = (size_t)in->gpu_pos,
                                              .bytes = in->mem.bytes,
                                              .priority = om->cfg->priority,
                                              .last_used_ms = in->last_used_ms,
                                              .reload_cost_ms = om->load_ms_ewma};
        }
    }
    placer_plan_t plan;
    enum placer_result res = placer_choose(&S.ledger, allowed, need, m, cands, n, &plan);
    if (res == PLACER_FITS) {
        *gpu_pos = plan.gpu_pos;
        return res;
    }
    if (res == PLACER_NEVER)
        return res;
    /* memory already on its way back may be enough: do not evict more while it comes */
    for (size_t g = 0; g < S.ledger.n_gpus; g++)
        if (allowed[g] && incoming(g) > 0 && ledger_free_for(&S.ledger, g, m) + incoming(g) >= need)
            return PLACER_WAIT;
    if (res == PLACER_EVICT) {
        if (ledger_claim(&S.ledger, plan.gpu_pos, need, m) != 0)
            return PLACER_WAIT; /* another waiter holds this GPU's claim */
        m->claiming = true;
        for (size_t i = 0; i < plan.n_evict; i++) {
            instance_t *victim = (instance_t *)cands[plan.evict[i]].instance;
            char why[160];
            snprintf(why, sizeof why, "evicted for %s", m->name);
            log_event(LOG_INFO, "eviction", "model=%s instance=%u gpu=%d bytes=%llu for=%s", victim->model->name,
                      victim->id, victim->gpu, (unsigned long long)victim->mem.bytes, m->name);
            core_note_event(S.core, "evicting %s from GPU %d for %s", victim->model->name, victim->gpu, m->name);
            S.actions.evict(victim, why);
        }
        return res;
    }
    for (size_t g = 0; g < S.ledger.n_gpus; g++)
        if (allowed[g])
            clear_caches(g, m);
    return res;
}

enum placer_result sched_place(model_t *m, size_t *gpu_pos)
{
    *gpu_pos = 0;
    if (!uses_gpu(m))
        return PLACER_FITS;
    if (!S.ok || S.ledger.n_gpus == 0)
        return PLACER_WAIT;
    bool allowed[LEDGER_MAX_GPUS];
    allowed_mask(m, allowed);
    /* room for the instance and one request at the cheapest level it can serve */
    uint64_t per = sched_request_estimate(m);
    for (unsigned level = 1; level <= m->cfg->degrade.n_ladder; level++)
        if (sched_level_estimate(m, level) < per)
            per = sched_level_estimate(m, level);
    uint64_t need = m->cfg->memory.resident + per;
    enum placer_result res = make_room(m, allowed, need, gpu_pos);
    if (res == PLACER_WAIT) {
        uint64_t threshold = m->load_ms_ewma > STARVE_MIN_MS ? m->load_ms_ewma : STARVE_MIN_MS;
        bool was_claiming = m->claiming;
        claim_if_starving(m, allowed, need, threshold, "load waiting");
        if (!was_claiming && m->claiming) /* a claimant may evict what it could not before (evictable) */
            res = make_room(m, allowed, need, gpu_pos);
    }
    return res;
}

void sched_place_instance(instance_t *inst, size_t gpu_pos)
{
    model_t *m = inst->model;
    if (!uses_gpu(m) || gpu_pos >= S.ledger.n_gpus) {
        inst->gpu_pos = -1;
        return;
    }
    sched_unblocked(m);
    inst->gpu_pos = (int)gpu_pos;
    inst->gpu = S.ledger.gpus[gpu_pos].index;
    ledger_force(&S.ledger, gpu_pos, &inst->mem, LEDGER_RESIDENT, m->cfg->memory.resident, m->name, inst);
}

void sched_instance_ready(instance_t *inst)
{
    inst->baseline = 0;
    if (inst->gpu_pos < 0 || !S.ok || !S.gpu)
        return;
    inst->baseline_pending = true;
    gpu_poll_now(S.gpu);
}

void sched_instance_unloading(instance_t *inst)
{
    if (inst->mem.gpu < 0)
        return;
    inst->reclaim_last = UINT64_MAX;
    inst->reclaim_stable = 0;
    inst->reclaiming = true;
    inst->reclaim_since_ms = core_now();
    if (S.gpu)
        gpu_poll_now(S.gpu);
}

bool sched_instance_holds_memory(const instance_t *inst) { return inst->mem.gpu >= 0; }

/* ---- NVML snapshots ---------------------------------------------------------------- */

typedef struct pgid_cache {
    pid_t pid[PGID_CACHE];
    pid_t pgid[PGID_CACHE];
    size_t n;
} pgid_cache_t;

static pid_t cached_pgid(pgid_cache_t *c, pid_t pid)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->pid[i] == pid)
            return c->pgid[i];
    pid_t g = procfs_pgid(pid);
    if (c->n < PGID_CACHE) {
        c->pid[c->n] = pid;
        c->pgid[c->n] = g;
        c->n++;
    }
    return g;
}

static instance_t *owner_of(pid_t pid, pgid_cache_t *cache)
{
    pid_t pgid = 0;
    bool looked = false;
    list_foreach(mi, &S.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if ((in->pid > 0 && in->pid == pid) || (in->external_pid > 0 && in->external_pid == pid))
                return in;
        }
    }
    list_foreach(mi, &S.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            pid_t group = in->pgid > 0 ? in->pgid : 0;
            if (!group)
                continue;
            if (!looked) {
                pgid = cached_pgid(cache, pid);
                looked = true;
            }
            if (pgid > 0 && pgid == group)
                return in;
        }
    }
    return NULL;
}

static void find_external_pids(uint64_t now)
{
    if (now - S.last_listener_lookup_ms < LISTENER_LOOKUP_INTERVAL_MS && S.last_listener_lookup_ms)
        return;
    S.last_listener_lookup_ms = now;
    list_foreach(mi, &S.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (!in->external || !uses_gpu(m))
                continue;
            if (in->external_pid > 0 && kill(in->external_pid, 0) == 0)
                continue;
            pid_t p = procfs_listener(in->port);
            if (p != in->external_pid) {
                in->external_pid = p;
                in->pgid = p > 0 ? procfs_pgid(p) : 0;
                log_event(LOG_INFO, "external_pid", "model=%s port=%d pid=%d", m->name, in->port, (int)p);
            }
        }
    }
}

static void apply_snapshot(const gpu_snapshot_t *snap)
{
    core_t *d = S.core;
    uint64_t now = core_now();
    find_external_pids(now);
    /* measured usage per instance */
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) list_entry(ii, instance_t, link)->measured = 0;
    }
    pgid_cache_t cache;
    cache.n = 0;
    for (size_t pos = 0; pos < S.ledger.n_gpus; pos++) {
        const gpu_device_t *dev = NULL;
        for (size_t k = 0; k < snap->n_devices; k++)
            if (snap->devices[k].index == S.ledger.gpus[pos].index)
                dev = &snap->devices[k];
        if (!dev)
            continue;
        uint64_t attributed = 0;
        for (size_t p = 0; p < dev->n_procs; p++) {
            instance_t *in = owner_of(dev->procs[p].pid, &cache);
            if (!in)
                continue;
            in->measured += dev->procs[p].used;
            attributed += dev->procs[p].used;
        }
        uint64_t raw = dev->used > attributed ? dev->used - attributed : 0;
        /* foreign usage rises at once but falls only when two readings in a row agree: one
         * reading taken while workers allocate cannot make capacity look larger than it is */
        uint64_t foreign = raw;
        uint64_t current = S.ledger.gpus[pos].foreign;
        if (raw < current) {
            foreign = raw > S.foreign_raw[pos] ? raw : S.foreign_raw[pos];
            if (foreign > current)
                foreign = current;
        }
        S.foreign_raw[pos] = raw;
        if (!d->cfg->gpu.foreign_measure)
            foreign = 0;
        ledger_set_gpu(&S.ledger, pos, dev->index, dev->total, d->cfg->gpu.headroom);
        ledger_set_foreign(&S.ledger, pos, foreign);
    }
    /* residents, reclaim, peaks */
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach_safe(ii, tmp, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (in->mem.gpu < 0)
                continue;
            uint64_t declared = m->cfg->memory.resident;
            if (in->reclaiming) {
                bool process_gone = !in->proc && !in->external;
                bool settled = false, enough = false;
                if (process_gone) {
                    settled = enough = in->measured == 0;
                } else {
                    /* unload hook: the process stays (CUDA context, residue); done when the
                     * usage stops falling; "returned" when at least half came back */
                    if (in->measured <= in->reclaim_last && in->reclaim_last - in->measured <= in->mem.bytes / 100) {
                        if (in->reclaim_stable++ == 0)
                            in->reclaim_stable_since_ms = now;
                    } else {
                        in->reclaim_stable = 0;
                    }
                    in->reclaim_last = in->measured;
                    /* done when most of it came back (at least half) and the usage held still
                     * for 3 snapshots (what stays is residue, booked as held); while little has
                     * come back (a driver can lag 0.5-1.5 s) keep waiting, up to stop_timeout
                     * + RECLAIM_GRACE_MS, after which the reclaim is declared incomplete below */
                    enough = in->measured <= in->mem.bytes / 2;
                    settled = enough && (in->measured <= in->mem.bytes / 10 || in->reclaim_stable >= 3);
                }
                if (settled) {
                    log_event(LOG_INFO, "memory_reclaimed", "model=%s instance=%u gpu=%d wait_ms=%llu remaining=%llu",
                              m->name, in->id, in->gpu, (unsigned long long)(now - in->reclaim_since_ms),
                              (unsigned long long)in->measured);
                    in->reclaiming = false;
                    if (process_gone && !in->external)
                        ledger_release(&S.ledger, &in->mem);
                    else
                        ledger_resize(&S.ledger, &in->mem, in->measured);
                    S.actions.reclaimed(in, true);
                } else if (now - in->reclaim_since_ms >
                           m->cfg->stop_timeout_ms + (process_gone ? RECLAIM_GRACE_MS : 0)) {
                    /* bounded by stop_timeout (SPEC 4); an exited process also gets the
                     * driver's release lag */
                    log_event(LOG_WARN, "reclaim_timeout", "model=%s instance=%u gpu=%d still_held=%llu waited_ms=%llu",
                              m->name, in->id, in->gpu, (unsigned long long)in->measured,
                              (unsigned long long)(now - in->reclaim_since_ms));
                    in->reclaiming = false;
                    if (process_gone && !in->external)
                        ledger_release(&S.ledger, &in->mem); /* what is still held shows as foreign */
                    else
                        ledger_resize(&S.ledger, &in->mem, in->measured);
                    S.actions.reclaimed(in, false);
                }
                continue;
            }
            if (in->state == INST_STARTING) {
                uint64_t b = in->measured > declared ? in->measured : declared;
                if (b != in->mem.bytes)
                    ledger_resize(&S.ledger, &in->mem, b);
            } else if (in->state == INST_READY && !in->stop_requested) {
                if (in->in_flight == 0) {
                    /* the post-load baseline: taken from the first snapshot after READY (its
                     * first request waited for it), and it only ever falls afterwards */
                    if (in->baseline_pending || (!in->baseline && in->requests_total == 0) ||
                        (in->baseline && in->measured < in->baseline))
                        in->baseline = in->measured;
                    if (in->baseline_pending) {
                        in->baseline_pending = false;
                        model_schedule_pump(m);
                    }
                    /* recycle.max_growth: memory that stays after a request, measured idle. A
                     * framework's allocator cache is not a leak: with a clear_cache hook the
                     * cache is given back first and what remains is growth; without one, up to
                     * one request's estimate is taken as cache and only growth beyond it counts */
                    uint64_t growth_cap = m->cfg->recycle.max_growth;
                    if (growth_cap && !m->cfg->clear_cache.set)
                        growth_cap += sched_request_estimate(m);
                    if (growth_cap && in->baseline && in->measured > in->baseline + growth_cap) {
                        bool cache_cleared = !m->cfg->clear_cache.set ||
                                             (in->last_clear_cache_ms && now - in->last_clear_cache_ms < 10000 &&
                                              now - in->last_clear_cache_ms > 3 * d->cfg->gpu.poll_ms && !in->hook_call);
                        if (cache_cleared) {
                            char why[96];
                            snprintf(why, sizeof why, "memory grew by %llu MiB since load",
                                     (unsigned long long)((in->measured - in->baseline) >> 20));
                            S.actions.recycle(in, why);
                            continue;
                        }
                        if (!in->hook_call && now - in->last_clear_cache_ms >= CLEAR_CACHE_MIN_INTERVAL_MS)
                            clear_caches((size_t)in->gpu_pos, NULL);
                    }
                } else {
                    if (in->measured > in->run_peak)
                        in->run_peak = in->measured;
                    if (in->in_flight > 1)
                        in->run_alone = false;
                }
                /* what it holds beyond its running requests' reservations (cache included),
                 * never less than its floor plus the cache already lent to running requests */
                uint64_t held = in->measured > in->running_reserved ? in->measured - in->running_reserved : 0;
                uint64_t lent = instance_floor(in) + in->credit_used;
                uint64_t b = held > lent ? held : lent;
                if (b < declared)
                    b = declared;
                in->unverified = 0;
                if (b != in->mem.bytes)
                    ledger_resize(&S.ledger, &in->mem, b);
            } else if (in->in_flight > 0) {
                if (in->measured > in->run_peak)
                    in->run_peak = in->measured;
            } else if (in->state == INST_UNLOADED || in->state == INST_DOWN) {
                /* unloaded (residue, context) or an external server that is down: vramd does
                 * not control it, so it is booked at exactly what NVML shows it holding */
                if (in->measured != in->mem.bytes)
                    ledger_resize(&S.ledger, &in->mem, in->measured);
            }
        }
    }
    sched_pump_all(d);
}

static void on_snapshot(void *ctx, const gpu_snapshot_t *snap)
{
    (void)ctx;
    if (!snap->ok) {
        if (S.ok)
            log_event(LOG_ERROR, "nvml_failed", "error=%s", snap->error);
        S.ok = false;
        snprintf(S.error, sizeof S.error, "%s", snap->error);
        return;
    }
    if (!S.ok)
        log_event(LOG_INFO, "nvml_ok", "devices=%zu read_us=%llu", snap->n_devices, (unsigned long long)snap->read_us);
    S.ok = true;
    S.error[0] = '\0';
    memcpy(S.snap, snap, sizeof *snap);
    apply_snapshot(S.snap);
}

void sched_pump_all(core_t *d)
{
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        /* an admin load waits for memory like a queued request does */
        if (m->queue.depth > 0 || m->load_requested)
            model_schedule_pump(m);
    }
}

void sched_init(core_t *d, const sched_actions_t *actions)
{
    memset(&S, 0, sizeof S);
    S.core = d;
    S.actions = *actions;
    ledger_init(&S.ledger);
    S.snap = calloc(1, sizeof *S.snap);
    const config_t *c = d->cfg;
    gpu_options_t opt = {
        .library = getenv("VRAMD_NVML_LIBRARY") ? NULL : c->gpu.nvml_library,
        .indexes = c->gpu.devices,
        .n_indexes = c->gpu.n_devices,
        .uuids = c->gpu.device_uuids,
        .n_uuids = c->gpu.n_device_uuids,
    };
    char err[256];
    S.gpu = S.snap ? gpu_open(&opt, err, sizeof err) : NULL;
    if (!S.gpu) {
        snprintf(S.error, sizeof S.error, "NVML unavailable: %s", S.snap ? err : "out of memory");
        log_event(LOG_WARN, "nvml_unavailable", "error=%s", S.error);
        return;
    }
    if (gpu_probe_once(S.gpu, S.snap) != 0 || !S.snap->ok) {
        snprintf(S.error, sizeof S.error, "NVML read failed: %s", S.snap->error);
        log_event(LOG_WARN, "nvml_unavailable", "error=%s", S.error);
    } else {
        S.ok = true;
        for (size_t i = 0; i < S.snap->n_devices && i < LEDGER_MAX_GPUS; i++) {
            const gpu_device_t *dev = &S.snap->devices[i];
            ledger_set_gpu(&S.ledger, i, dev->index, dev->total, c->gpu.headroom);
            char t[32];
            units_format_size(dev->total, t, sizeof t);
            log_event(LOG_INFO, "gpu_found", "index=%d name=%s uuid=%s total=%s library=%s", dev->index, dev->name,
                      dev->uuid, t, gpu_library(S.gpu));
        }
    }
    gpu_poll_start(S.gpu, d->loop, c->gpu.poll_ms, on_snapshot, NULL);
}

void sched_shutdown(core_t *d)
{
    (void)d;
    if (S.gpu) {
        gpu_close(S.gpu);
        S.gpu = NULL;
    }
    free(S.snap);
    S.snap = NULL;
}

/* ---- status ------------------------------------------------------------------------ */

size_t sched_gpu_count(void) { return S.ledger.n_gpus; }

bool sched_gpu_figures(size_t pos, sched_gpu_figures_t *out)
{
    memset(out, 0, sizeof *out);
    if (pos >= S.ledger.n_gpus)
        return false;
    const ledger_gpu_t *g = &S.ledger.gpus[pos];
    out->index = g->index;
    if (S.snap) {
        for (size_t k = 0; k < S.snap->n_devices; k++) {
            const gpu_device_t *dev = &S.snap->devices[k];
            if (dev->index != g->index)
                continue;
            out->seen = true;
            snprintf(out->uuid, sizeof out->uuid, "%s", dev->uuid);
            snprintf(out->name, sizeof out->name, "%s", dev->name);
            out->used = dev->used;
        }
    }
    out->total = g->total;
    out->foreign = g->foreign;
    out->headroom = g->headroom;
    out->capacity = ledger_capacity(&S.ledger, pos);
    out->reserved = g->reserved;
    out->free_to_admit = ledger_free(&S.ledger, pos);
    return true;
}

void sched_status_json(void *gpus_array)
{
    cJSON *arr = gpus_array;
    for (size_t pos = 0; pos < S.ledger.n_gpus; pos++) {
        const ledger_gpu_t *g = &S.ledger.gpus[pos];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", g->index);
        const gpu_device_t *dev = NULL;
        if (S.snap)
            for (size_t k = 0; k < S.snap->n_devices; k++)
                if (S.snap->devices[k].index == g->index)
                    dev = &S.snap->devices[k];
        cJSON_AddStringToObject(o, "uuid", dev ? dev->uuid : "");
        cJSON_AddStringToObject(o, "name", dev ? dev->name : "");
        cJSON_AddNumberToObject(o, "total", (double)g->total);
        cJSON_AddNumberToObject(o, "used", dev ? (double)dev->used : 0);
        cJSON_AddNumberToObject(o, "foreign", (double)g->foreign);
        cJSON_AddNumberToObject(o, "headroom", (double)g->headroom);
        cJSON_AddNumberToObject(o, "capacity", (double)ledger_capacity(&S.ledger, pos));
        cJSON_AddNumberToObject(o, "reserved", (double)g->reserved);
        cJSON_AddNumberToObject(o, "reserved_resident", (double)ledger_sum_kind(&S.ledger, pos, LEDGER_RESIDENT));
        cJSON_AddNumberToObject(o, "reserved_requests", (double)ledger_sum_kind(&S.ledger, pos, LEDGER_REQUEST));
        cJSON_AddNumberToObject(o, "claimed", (double)g->claimed);
        cJSON_AddNumberToObject(o, "free_to_admit", (double)ledger_free(&S.ledger, pos));
        cJSON_AddNumberToObject(o, "utilization", dev ? dev->util_gpu : 0);
        cJSON *entries = cJSON_AddArrayToObject(o, "ledger");
        list_foreach(it, &g->entries) {
            const ledger_entry_t *e = list_entry(it, ledger_entry_t, link);
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "owner", e->owner ? e->owner : "");
            cJSON_AddStringToObject(j, "kind", e->kind == LEDGER_RESIDENT ? "resident" : "request");
            cJSON_AddNumberToObject(j, "bytes", (double)e->bytes);
            if (e->kind == LEDGER_REQUEST) {
                const request_t *r = (const request_t *)((const char *)e - offsetof(request_t, mem));
                cJSON_AddStringToObject(j, "request_id", r->id);
            }
            cJSON_AddItemToArray(entries, j);
        }
        cJSON_AddItemToArray(arr, o);
    }
}
