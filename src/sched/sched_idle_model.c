/*
 * sched_idle_model: gpu.idle_model, a model brought back when a card falls idle (llama-swap
 * users' "default model"). After every snapshot (sched_idle_models_tick) each GPU is idle
 * or busy: busy while an instance on it runs a request, a model with an instance there has
 * requests queued, or a model that may use it waits for a card (queued requests, an admin
 * load). Once a card has been idle for gpu.idle_model_after, its idle model (its own entry,
 * else the every-GPU one) is brought back (actions.bring_back: an admin load without the
 * admin: it waits for memory like one, and evicts only what is idle) unless it is serving
 * or on its way, failed or gone. A brought-back model is not stopped by its keep_alive while
 * it is its card's idle model (sched_is_idle_model): it stays until work for another model
 * needs the card (it is evicted like any idle instance).
 * Invariants: nothing is brought back onto a busy card; at most one bring-back per model
 * and idle spell (load_requested holds until its instance is READY); the walk is over the
 * models (bounded by the config) per GPU per snapshot. Calls down into scheduler.c only,
 * and out through the action table. Loop thread only.
 */
#include "sched/scheduler.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "sched/scheduler_int.h"

/* The idle model configured for the GPU with NVML index `index`: its own entry, else the
 * every-GPU one; NULL when none. */
static const char *idle_model_name(const config_t *cfg, int index)
{
    const char *every = NULL;
    for (size_t i = 0; i < cfg->gpu.n_idle_models; i++) {
        if (cfg->gpu.idle_models[i].gpu == index)
            return cfg->gpu.idle_models[i].model;
        if (cfg->gpu.idle_models[i].gpu < 0)
            every = cfg->gpu.idle_models[i].model;
    }
    return every;
}

/* Is the card at ledger position pos busy (see the top)? */
static bool card_busy(size_t pos)
{
    list_foreach(mi, &sched_state.core->models) {
        const model_t *m = list_entry(mi, model_t, link);
        bool here = false;
        list_foreach(it, &m->instances) {
            const instance_t *in = list_entry(it, instance_t, link);
            if (in->memory.gpu_pos == (int)pos && in->memory.mem.gpu >= 0) {
                here = true;
                if (in->path.in_flight > 0)
                    return true;
            }
        }
        if (!(m->queue.depth > 0 || m->load_requested) || !sched_uses_gpu(m))
            continue;
        bool allowed[LEDGER_MAX_GPUS];
        sched_allowed_mask(m, allowed);
        if (here || allowed[pos])
            return true;
    }
    return false;
}

/* Is m serving or on its way to serving (an instance READY, starting, reloading, waking)? */
static bool serving_or_coming(const model_t *m)
{
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (!in->life.stop_requested && (in->life.state == INST_READY || in->life.state == INST_STARTING ||
                                    in->life.state == INST_RELOADING || in->life.state == INST_RESUMING))
            return true;
    }
    return false;
}

void sched_idle_models_tick(void)
{
    core_t *d = sched_state.core;
    if (!d || !d->cfg || d->cfg->gpu.n_idle_models == 0 || !sched_state.actions.bring_back || d->stopping)
        return;
    uint64_t now = core_now();
    const ledger_t *l = &sched_state.ledger;
    for (size_t pos = 0; pos < l->n_gpus; pos++) {
        if (card_busy(pos)) {
            sched_state.idle_since_ms[pos] = 0;
            continue;
        }
        if (!sched_state.idle_since_ms[pos]) {
            sched_state.idle_since_ms[pos] = now;
            continue;
        }
        uint64_t idle = now - sched_state.idle_since_ms[pos];
        const char *name = idle_model_name(d->cfg, l->gpus[pos].index);
        model_t *m = name ? model_find(d, name) : NULL;
        if (idle < d->cfg->gpu.idle_model_after_ms || !m || m->removed || m->failed || m->load_requested ||
            serving_or_coming(m))
            continue;
        bool allowed[LEDGER_MAX_GPUS];
        sched_allowed_mask(m, allowed);
        if (!allowed[pos])
            continue; /* the every-GPU form: on each GPU its gpus: allows */
        log_event(LOG_INFO, "idle_model_back", "model=%s gpu=%d idle_ms=%llu", m->name, l->gpus[pos].index,
                  (unsigned long long)idle);
        core_note_event(d, "bringing %s back: GPU %d idle", m->name, l->gpus[pos].index);
        sched_state.actions.bring_back(m);
    }
}

bool sched_is_idle_model(const instance_t *inst)
{
    const core_t *d = sched_state.core;
    if (!d || !d->cfg || d->cfg->gpu.n_idle_models == 0 || inst->memory.gpu < 0)
        return false;
    const char *name = idle_model_name(d->cfg, inst->memory.gpu);
    return name && strcmp(name, inst->model->name) == 0;
}

void sched_idle_model_status_json(size_t pos, void *gpu_obj)
{
    cJSON *o = gpu_obj;
    const core_t *d = sched_state.core;
    const char *name = d && d->cfg ? idle_model_name(d->cfg, sched_state.ledger.gpus[pos].index) : NULL;
    if (name)
        cJSON_AddStringToObject(o, "idle_model", name);
    else
        cJSON_AddNullToObject(o, "idle_model");
    uint64_t since = sched_state.idle_since_ms[pos], now = core_now();
    cJSON_AddNumberToObject(o, "idle_ms", (double)(since && now > since ? now - since : 0));
}
