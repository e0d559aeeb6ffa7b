/* agent_view: the agent-check's figures from the ledger and the models. See agent_view.h. */
#include "fleet/agent_view.h"

#include <string.h>

#include "core/model.h"
#include "sched/scheduler.h"
#include "workers/instance.h"

#define MAXCONN_CAP 1000000u

static unsigned cap_u(uint64_t v, unsigned hi) { return v == 0 ? 1 : v > hi ? hi : (unsigned)v; }

/* Where a new request of m would start: an instance's free slot, one coming up, a parked
 * one, a new load (fits or evicts), or nowhere now. */
static void model_room(const model_t *m, agent_figures_t *f)
{
    const model_config_t *mc = m->cfg;
    uint64_t now = core_now();
    unsigned ready_slots = 0, free_slots = 0, warming_slots = 0;
    bool fits_now = false, parked = false;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (instance_usable(in, now)) {
            ready_slots += mc->concurrency;
            if (in->path.in_flight < mc->concurrency) {
                free_slots += mc->concurrency - in->path.in_flight;
                fits_now = fits_now || sched_request_fits_now(in);
            }
        } else if ((in->life.state == INST_STARTING || in->life.state == INST_RELOADING || in->life.state == INST_RESUMING) &&
                   !in->life.stop_requested) {
            warming_slots += mc->concurrency;
        } else if ((in->life.state == INST_UNLOADED || in->life.state == INST_PARKED) && !in->life.stop_requested) {
            parked = true; /* unloaded by its hook, or parked in host memory (sleep, checkpoint) */
        }
    }
    size_t queued = m->queue.depth;
    sched_room_t room;
    enum placer_result load = sched_place_dry(m, &room);
    f->foreign_blocked = sched_model_uses_gpu(mc) && room.largest_capacity < room.need;
    f->free = room.free;
    f->need = room.need;
    f->capacity = room.capacity;
    unsigned usable = fits_now ? free_slots : 0; /* free slots whose request's memory is free too */
    if (usable > queued) {
        f->room = AGENT_ROOM_RESIDENT;
        f->slots_ready = ready_slots;
        f->slots_free = usable - (unsigned)queued;
        return;
    }
    if (warming_slots > 0 && warming_slots + usable > queued) {
        f->room = AGENT_ROOM_WARMING;
        return;
    }
    /* loaded here with every slot busy (not blocked on memory): a wait shorter than a load
     * elsewhere beats it; a load that evicts another model costs that model a load too, so
     * the wait is weighed against two loads (AGENT_QUEUE_LOADS) */
    uint64_t wait = sched_predicted_start_ms(m);
    if (ready_slots > 0 && free_slots == 0 && (m->load_ms_ewma == 0 || wait <= AGENT_QUEUE_LOADS * m->load_ms_ewma)) {
        f->room = AGENT_ROOM_QUEUE;
        f->wait_ms = wait;
        f->load_ms = m->load_ms_ewma;
        return;
    }
    bool can_add = m->n_instances < mc->instances || parked;
    if (!can_add || load == PLACER_WAIT || load == PLACER_NEVER)
        f->room = AGENT_ROOM_WAIT;
    else if (parked)
        f->room = AGENT_ROOM_PARKED;
    else
        f->room = load == PLACER_FITS ? AGENT_ROOM_COLD_FITS : AGENT_ROOM_COLD_EVICT;
}

static void model_view(core_t *core, const model_t *m, agent_figures_t *f)
{
    const model_config_t *mc = m->cfg;
    f->maxconn = cap_u((uint64_t)mc->instances * mc->concurrency + mc->queue_max, MAXCONN_CAP);
    char why[200];
    if (sched_model_uses_gpu(mc) && !sched_gpu_ok()) {
        agent_set_down(f, "gpu_unavailable: %s", sched_gpu_error());
    } else if (m->failed) {
        agent_set_down(f, "model_failed: %s", m->failed_reason);
    } else if (sched_never_fits(m, why, sizeof why)) {
        agent_set_down(f, "cannot_fit: %s", why);
    } else if (m->queue.depth >= mc->queue_max || core_queued_total(core) >= core->cfg->limits.queue_max) {
        f->room = AGENT_ROOM_FULL;
    } else {
        model_room(m, f);
    }
}

static void host_view(core_t *core, agent_figures_t *f)
{
    const config_t *cfg = core->cfg;
    f->host = true;
    uint64_t slots = cfg->limits.queue_max;
    unsigned n_models = 0, n_failed = 0;
    bool gpu_needed = false;
    list_foreach(it, &core->models) {
        const model_t *m = list_entry(it, model_t, link);
        if (m->removed)
            continue;
        n_models++;
        n_failed += m->failed ? 1 : 0;
        gpu_needed = gpu_needed || sched_model_uses_gpu(m->cfg);
        slots += (uint64_t)m->cfg->instances * m->cfg->concurrency;
    }
    f->maxconn = cap_u(slots < cfg->limits.max_connections ? slots : cfg->limits.max_connections, MAXCONN_CAP);
    if (gpu_needed && !sched_gpu_ok()) {
        agent_set_down(f, "gpu_unavailable: %s", sched_gpu_error());
        return;
    }
    if (n_models > 0 && n_failed == n_models) {
        agent_set_down(f, "all_models_failed: every model (%u) has failed", n_models);
        return;
    }
    for (size_t pos = 0; pos < sched_gpu_count(); pos++) {
        sched_gpu_figures_t g;
        if (!sched_gpu_figures(pos, &g))
            continue;
        f->free += g.free_to_admit;
        f->capacity += g.total > g.headroom ? g.total - g.headroom : 0;
    }
}

void agent_view(core_t *core, const agent_req_t *req, agent_figures_t *out)
{
    memset(out, 0, sizeof *out);
    out->draining = core->draining;
    if (req->target == AGENT_HOST) {
        host_view(core, out);
        return;
    }
    model_t *m = model_find(core, req->name);
    if (m == NULL || m->removed) {
        out->maxconn = 1;
        agent_set_down(out, "unknown_model: no model \"%s\" on this host", req->name);
        return;
    }
    out->tier = req->tier;
    model_view(core, m, out);
}
