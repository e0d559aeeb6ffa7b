/*
 * fit: does each model fit a GPU it may use? For `vramd --check-config` with the cards'
 * sizes (--gpu-memory, or NVML): the rule the daemon applies at run time (sched_never_fits,
 * sched/scheduler.c: a request of such a model is refused 422 cannot_fit). A model that
 * books GPU memory (memory.resident, per_request or learn) needs resident plus its smallest
 * per-request reservation (per_request, or a ladder level's smaller one) within total -
 * gpu.headroom of at least one GPU: those of gpu.devices (all when unset), narrowed by its
 * own gpus: list. Pure: the totals come from the caller; every model that cannot fit is
 * reported, each as "FILE:LINE:COL: models.NAME.memory: ..." (its memory: key, else its
 * entry).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>

#include "common/units.h"
#include "config/config.h"

static bool allowed(const model_config_t *m, int index)
{
    if (m->gpus == NULL)
        return true;
    for (size_t k = 0; k < m->n_gpus; k++)
        if (m->gpus[k] == index)
            return true;
    return false;
}

size_t config_fit_errors(const config_t *c, const config_gpu_size_t *gpus, size_t n_gpus,
                         void (*emit)(void *ctx, const char *line), void *ctx)
{
    size_t errors = 0;
    for (size_t i = 0; i < c->n_models; i++) {
        const model_config_t *m = &c->models[i];
        if (m->memory.resident == 0 && m->memory.per_request == 0)
            continue; /* books nothing (or learns from 0): nothing to fit */
        uint64_t per = m->memory.per_request;
        for (size_t l = 0; l < m->degrade.n_ladder; l++)
            if (m->degrade.ladder[l].has_per_request && m->degrade.ladder[l].per_request < per)
                per = m->degrade.ladder[l].per_request;
        uint64_t need = m->memory.resident + per, biggest = 0, biggest_total = 0;
        bool fits = false, any = false;
        for (size_t g = 0; g < n_gpus && !fits; g++) {
            if (!allowed(m, gpus[g].index))
                continue;
            any = true;
            uint64_t room = gpus[g].total > c->gpu.headroom ? gpus[g].total - c->gpu.headroom : 0;
            fits = need <= room;
            if (room >= biggest) {
                biggest = room;
                biggest_total = gpus[g].total;
            }
        }
        if (fits)
            continue;
        char line[512], a[32], r[32], p[32], b[32], t[32], h[32];
        units_format_size(need, a, sizeof a);
        units_format_size(m->memory.resident, r, sizeof r);
        units_format_size(per, p, sizeof p);
        units_format_size(biggest, b, sizeof b);
        units_format_size(biggest_total, t, sizeof t);
        units_format_size(c->gpu.headroom, h, sizeof h);
        if (!any)
            snprintf(line, sizeof line, "%s: models.%s.gpus: none of the GPUs it may use is among the %zu given",
                     m->memory_at ? m->memory_at : c->path, m->name, n_gpus);
        else
            snprintf(line, sizeof line,
                     "%s: models.%s.memory: needs %s (resident %s + per request %s) but the largest GPU it may use "
                     "offers %s (%s - gpu.headroom %s): every request would be refused 422 cannot_fit",
                     m->memory_at ? m->memory_at : c->path, m->name, a, r, p, b, t, h);
        emit(ctx, line);
        errors++;
    }
    return errors;
}
