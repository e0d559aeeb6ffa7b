/*
 * sched_admit: a request's way through the memory book: admission (its REQUEST entry,
 * sized estimate - cache credit), the claim it no longer needs, what is learned when it
 * finishes (run time, peak samples, OOMs, load times), and choosing the idle instances
 * asked to give their cached memory back (the supervisor calls their clear_cache hook:
 * actions.clear_cache; this file fills no supervisor field and makes no HTTP call).
 * Invariants: a request holds its entry from sched_admit until sched_request_finished,
 * however it ends; the credit it took from its instance's verified cache is returned with
 * it; memory a finished request leaves behind is booked on its instance (unverified) until
 * the next snapshot measures it, and what a request let go of while the worker ran it used
 * (its reservation and credit) is not lent as cache until its memory.cancelled_hold is over
 * (the worker may still be running it: readings cannot tell its memory from cache); a
 * request younger than the GPU's claim does not lock
 * away, in a busy instance, cache the claimant lacks (sched_yields_to_claim); while the
 * snapshot is stale, only a request whose reservation its instance's verified cache covers
 * (nothing new to book) is admitted, and a blocked one evicts or claims nothing. Calls down
 * only, into scheduler.c (scheduler_int.h), and out through the action table.
 * Loop thread only.
 */
#include "sched/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/units.h"
#include "core/core.h"
#include "core/request.h"
#include "sched/scheduler_int.h"

#define LEARN_MIN_SAMPLES 3

/* ---- cached memory given back ----------------------------------------------------- */

/* Ask idle instances on GPU pos that hold cached memory (and have a clear_cache hook) to
 * give it back, through the supervisor (actions.clear_cache: the hook as configured, its
 * answer followed by an NVML reading). Instances without a hook keep holding it until
 * unloaded. */
void sched_clear_caches(size_t pos, const model_t *except)
{
    core_t *d = sched_state.core;
    uint64_t now = core_now();
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        if (m == except || !m->cfg->clear_cache.set)
            continue;
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (in->memory.gpu_pos != (int)pos || in->life.state != INST_READY || in->path.in_flight > 0 || in->hook.hook_call ||
                sched_instance_cache(in) < SCHED_YIELD_MIN_BYTES ||
                now - in->hook.last_clear_cache_ms < SCHED_CLEAR_CACHE_MIN_INTERVAL_MS)
                continue;
            uint64_t cached = sched_instance_cache(in);
            if (sched_state.actions.clear_cache(in))
                log_event(LOG_INFO, "clear_cache", "model=%s instance=%u cached=%llu", m->name, in->id,
                          (unsigned long long)cached);
        }
    }
}

/* ---- admission --------------------------------------------------------------------- */

/* Is r (of m) ahead of the claim on its GPU: queued no later than the claim's cutoff (the
 * claimant's oldest request, or the moment a swap's bound was reached: sched_turn.c)? No
 * claim, or m's own: true. */
static bool ahead_of_claim(const model_t *m, const request_t *r, const ledger_gpu_t *g)
{
    const model_t *claimant = g->claimed ? g->claim_holder : NULL;
    if (!claimant || claimant == m)
        return true;
    uint64_t cutoff = sched_claim_cutoff_ms(claimant);
    uint64_t own_oldest = queue_oldest_ms(&m->queue);
    if (r->t_queued && (!own_oldest || r->t_queued < own_oldest))
        own_oldest = r->t_queued;
    return own_oldest && (!cutoff || own_oldest <= cutoff);
}

bool sched_yields_to_claim(const request_t *r, const instance_t *inst)
{
    const model_t *m = inst->model;
    if (inst->memory.gpu_pos < 0 || !sched_uses_gpu(m))
        return false;
    const ledger_t *l = &sched_state.ledger;
    const ledger_gpu_t *g = &l->gpus[inst->memory.gpu_pos];
    if (!g->claimed || ahead_of_claim(m, r, g))
        return false;
    uint64_t est = sched_request_need(m, r);
    uint64_t cache = sched_instance_cache(inst);
    uint64_t avail = cache > inst->memory.credit_used ? cache - inst->memory.credit_used : 0;
    uint64_t credit = est < avail ? est : avail;
    uint64_t left = avail - credit; /* cache this request would leave unused, but locked in */
    if (credit == 0 || left < SCHED_YIELD_MIN_BYTES || m->cfg->clear_cache.set == false)
        return false;
    /* a hook that gave nothing back when last asked (answered, no request since, a few
     * readings after it, the cache still there) is not waited for: the request runs as
     * before, so a pinned model whose hook frees nothing cannot be held back for good */
    uint64_t now = core_now();
    if (inst->hook.last_clear_cache_ms && inst->path.last_used_ms < inst->hook.last_clear_cache_ms && !inst->hook.hook_call &&
        now - inst->hook.last_clear_cache_ms > 3 * sched_state.core->cfg->gpu.poll_ms)
        return false;
    uint64_t claimant_free = ledger_free_for(l, (size_t)inst->memory.gpu_pos, g->claim_holder);
    return claimant_free < g->claimed && claimant_free + left >= g->claimed;
}

bool sched_admit(request_t *r, instance_t *inst)
{
    model_t *m = inst->model;
    if (inst->memory.gpu_pos < 0 || !sched_uses_gpu(m))
        return true;
    sched_read_size(m, r);
    uint64_t est = sched_request_need(m, r);
    uint64_t cache = sched_instance_cache(inst);
    uint64_t avail = cache > inst->memory.credit_used ? cache - inst->memory.credit_used : 0;
    uint64_t credit = est < avail ? est : avail;
    uint64_t need = est - credit;
    ledger_t *l = &sched_state.ledger;
    /* Stale figures (no NVML reading for gpu.stale_after): only what memory already booked
     * for the instance covers runs; the rest waits for a fresh snapshot, which pumps. */
    if (need > 0 && sched_gpu_stale())
        return false;
    /* A younger request that its instance's cache would fund, while the instance holds more
     * cache than it takes, would lock that rest away from an older claimant that needs it
     * (the instance stays busy, so its cache cannot be cleared): it waits instead, the
     * instance goes idle, and the claimant's make_room asks for the cache back. Found with
     * bench/scheduling's mixed-80gb burst: TRELLIS's queue, cached for two requests and
     * running one at a time, kept TRELLIS.2's older requests waiting for its whole queue. */
    if (sched_yields_to_claim(r, inst))
        return false;
    if (ledger_reserve(l, (size_t)inst->memory.gpu_pos, &r->mem, LEDGER_REQUEST, need, m->name, m) != 0) {
        /* A claim holds back models whose oldest waiting request is younger than the
         * claimant's oldest, not older (ties: not held back). evictable() is the exact
         * complement (it evicts a queued model only for a strictly older claimant), so a
         * model whose queue blocks its own eviction and a claimant waiting for that
         * eviction can never wait for each other. */
        const ledger_gpu_t *g = &l->gpus[inst->memory.gpu_pos];
        const model_t *claimant = g->claimed ? g->claim_holder : NULL;
        if (!claimant || claimant == m)
            return false;
        if (!ahead_of_claim(m, r, g) || ledger_reserve_ahead_of_claim(l, (size_t)inst->memory.gpu_pos, &r->mem,
                                                                      LEDGER_REQUEST, need, m->name, m) != 0)
            return false;
    }
    r->credit = credit;
    inst->memory.credit_used += credit;
    inst->memory.running_reserved += need;
    if (inst->path.in_flight == 0) {
        inst->memory.run_peak = inst->memory.measured;
        inst->memory.run_alone = true;
    } else {
        inst->memory.run_alone = false;
    }
    sched_unblocked(m);
    return true;
}

_Static_assert(SCHED_PEAK_SAMPLES <= EST_PEAKS_MAX, "every remembered peak is read by est_from_peaks");

static void learn_peak(model_t *m, uint64_t sample)
{
    m->peaks[m->peak_next] = sample;
    m->peak_next = (m->peak_next + 1) % SCHED_PEAK_SAMPLES;
    if (m->n_peaks < SCHED_PEAK_SAMPLES)
        m->n_peaks++;
    if (!m->cfg->memory.learn || m->n_peaks < LEARN_MIN_SAMPLES)
        return;
    uint64_t est = est_from_peaks(m->peaks, m->n_peaks);
    if (est != m->est_per_request) {
        char a[32], b[32];
        units_format_size(m->est_per_request ? m->est_per_request : m->cfg->memory.per_request, a, sizeof a);
        units_format_size(est, b, sizeof b);
        log_event(LOG_INFO, "per_request_learned", "model=%s from=%s to=%s samples=%u", m->name, a, b, m->n_peaks);
        m->est_per_request = est;
    }
}

/* A request of the class succeeded: an OOM raise of the class may fall (logged when it does). */
static void learn_success(model_t *m, unsigned level, unsigned cls)
{
    uint64_t base = sched_level_estimate(m, level);
    uint64_t before = est_get(&m->est, level, cls, base, m->cfg->memory.learn);
    if (!est_success(&m->est, level, cls, base, m->cfg->memory.learn))
        return;
    uint64_t after = est_get(&m->est, level, cls, base, m->cfg->memory.learn);
    log_event(LOG_INFO, "per_request_lowered", "model=%s level=%u size_class=%u from=%llu to=%llu", m->name, level,
              cls, (unsigned long long)before, (unsigned long long)after);
}

/* r was let go of while its worker had it (a client that left, a total deadline): a Python
 * server goes on running it, with the memory it was booked (its reservation, and the cache
 * it was lent). That memory stays booked on the instance (assumed cached, then measured),
 * but readings cannot tell it from idle cache: lent to the next request, the worker would
 * need it twice. So it is not lent until the request would have ended: its dispatch plus
 * memory.cancelled_hold, and at least half the hold after the cancel (a request that ran
 * past its expected time, the kind whose client gives up, still runs; a later cancel
 * extends the hold; an earlier hold that is over is dropped first). */
static void hold_cancelled(const request_t *r, instance_t *inst, uint64_t bytes)
{
    model_t *m = inst->model;
    uint64_t hold = sched_cancelled_hold_ms(m);
    if (!bytes || !hold || inst->life.state != INST_READY || inst->life.stop_requested)
        return;
    uint64_t now = core_now();
    uint64_t ran = r->t_dispatched && now > r->t_dispatched ? now - r->t_dispatched : 0;
    uint64_t until = now + (hold > ran + hold / 2 ? hold - ran : hold / 2);
    if (inst->memory.cancelled_until <= now)
        inst->memory.cancelled_held = 0;
    inst->memory.cancelled_held += bytes;
    m->cancelled_holds++;
    if (until > inst->memory.cancelled_until)
        inst->memory.cancelled_until = until;
    log_event(LOG_INFO, "cancelled_hold", "request_id=%s model=%s instance=%u bytes=%llu held=%llu until_ms=%llu",
              r->id, m->name, inst->id, (unsigned long long)bytes, (unsigned long long)inst->memory.cancelled_held,
              (unsigned long long)(inst->memory.cancelled_until - now));
}

void sched_request_finished(request_t *r, instance_t *inst, uint64_t run_ms, bool ok)
{
    model_t *m = inst->model;
    bool held = r->mem.gpu >= 0;
    uint64_t released = r->mem.bytes;
    if (r->abandoned && (held || r->credit))
        hold_cancelled(r, inst, (held ? released : 0) + r->credit);
    ledger_release(&sched_state.ledger, &r->mem);
    inst->memory.running_reserved = inst->memory.running_reserved > released ? inst->memory.running_reserved - released : 0;
    /* Until NVML says otherwise, assume the framework kept what the request allocated
     * (PyTorch's caching allocator does): the instance holds it now. The next idle
     * snapshot sets the entry to what is really measured, so this never under-counts. */
    if (held && released && inst->memory.mem.gpu >= 0 && inst->life.state == INST_READY && !inst->life.stop_requested) {
        ledger_resize(&sched_state.ledger, &inst->memory.mem, inst->memory.mem.bytes + released);
        inst->memory.unverified += released;
        inst->memory.unverified_ms = core_now();
    }
    inst->memory.credit_used = inst->memory.credit_used > r->credit ? inst->memory.credit_used - r->credit : 0;
    r->credit = 0;
    if (ok) {
        m->run_ms_ewma = m->run_ms_ewma ? (m->run_ms_ewma * 7 + run_ms * 3) / 10 : run_ms;
        unsigned cls = r->size_level == r->level + 1 ? r->size_class : 0;
        if (inst->memory.run_alone && held) {
            uint64_t floor = inst->memory.baseline ? inst->memory.baseline : m->cfg->memory.resident;
            if (inst->memory.run_peak > floor) {
                learn_peak(m, inst->memory.run_peak - floor);
                est_learn(&m->est, r->level, cls, inst->memory.run_peak - floor);
            }
        }
        if (held)
            learn_success(m, r->level, cls);
    }
    if (held)
        sched_pump_all(m->core);
}

void sched_note_oom(model_t *m, const request_t *r, uint64_t process_need)
{
    m->oom_total++;
    unsigned cls = r->size_level == r->level + 1 ? r->size_class : 0;
    uint64_t base = sched_level_estimate(m, r->level);
    uint64_t est = est_get(&m->est, r->level, cls, base, m->cfg->memory.learn);
    /* the answer said how much the process wanted (PyTorch's message: held + tried to
     * allocate): beyond the model's resident memory, that much was one request's need at
     * least. Without it, one OOM of an under-declared model would leave the estimate far
     * below what the next such request grabs before it fails, and neighbours admitted
     * beside it (a worker's start, another request) would run out of memory with it. */
    uint64_t resident = m->cfg->memory.resident;
    uint64_t evidence = process_need > resident ? process_need - resident : 0;
    /* never past what the largest allowed GPU can give a request next to the model: the
     * request ran there, so it can fit; an estimate over the card would refuse every later
     * request with 422 cannot_fit, for good (an OOM can also come from memory others took) */
    uint64_t room = sched_largest_room(m);
    uint64_t cap = room > resident ? room - resident : 0;
    uint64_t raised = est_oom(&m->est, r->level, cls, base, m->cfg->memory.learn, evidence, cap);
    log_event(LOG_WARN, "per_request_raised", "model=%s level=%u size_class=%u from=%llu to=%llu reason=%s evidence=%llu",
              m->name, r->level, cls, (unsigned long long)est, (unsigned long long)raised, "oom",
              (unsigned long long)evidence);
}

void sched_note_true_size(model_t *m, unsigned level, unsigned size_class, uint64_t need)
{
    uint64_t base = sched_level_estimate(m, level);
    uint64_t est = est_get(&m->est, level, size_class, base, m->cfg->memory.learn);
    if (need <= est)
        return;
    uint64_t room = sched_largest_room(m);
    uint64_t resident = m->cfg->memory.resident;
    uint64_t cap = room > resident ? room - resident : 0;
    uint64_t raised = est_oom(&m->est, level, size_class, base, m->cfg->memory.learn, need, cap);
    log_event(LOG_INFO, "per_request_raised", "model=%s level=%u size_class=%u from=%llu to=%llu reason=%s evidence=%llu",
              m->name, level, size_class, (unsigned long long)est, (unsigned long long)raised, "shim",
              (unsigned long long)need);
}

void sched_note_arrival(model_t *m)
{
    uint64_t now = core_now();
    if (m->last_arrival_ms && now >= m->last_arrival_ms) {
        uint64_t gap = now - m->last_arrival_ms;
        m->arrival_gap_ms = m->arrival_gap_ms ? (m->arrival_gap_ms * 7 + gap * 3) / 10 : gap;
        if (m->arrival_gap_ms == 0)
            m->arrival_gap_ms = 1;
    }
    m->last_arrival_ms = now;
}

uint64_t sched_expected_gap_ms(const model_t *m)
{
    if (!m->last_arrival_ms)
        return 0;
    uint64_t since = core_now() - m->last_arrival_ms;
    uint64_t gap = m->arrival_gap_ms ? m->arrival_gap_ms : since;
    return gap > since ? gap : (since ? since : 1);
}

void sched_note_load(model_t *m, uint64_t load_ms)
{
    m->load_ms_ewma = m->load_ms_ewma ? (m->load_ms_ewma * 7 + load_ms * 3) / 10 : load_ms;
}

void sched_unblocked(model_t *m)
{
    if (!m->claiming)
        return;
    ledger_unclaim(&sched_state.ledger, m);
    m->claiming = false;
    m->claim_cutoff_ms = 0;
    m->claim_reason = SCHED_SWAP_NONE;
}
