/*
 * model: the one action on a model every layer may take: ask for its queue to be looked at
 * (dispatch, start instances) at this turn's safe point. The pump itself is the
 * dispatcher's (path/dispatch.c), set as the model's deferred function when the
 * composition root creates the model.
 */
#include "core/model.h"

#include <string.h>

void model_schedule_pump(model_t *m)
{
    if (m->pump.fn)
        core_defer(m->core, &m->pump);
}

model_t *model_find(core_t *core, const char *name)
{
    const model_config_t *mc = config_find_model(core->cfg, name);
    if (!mc)
        return NULL;
    list_foreach(it, &core->models) {
        model_t *m = list_entry(it, model_t, link);
        if (!m->removed && strcmp(m->name, mc->name) == 0)
            return m;
    }
    return NULL;
}
