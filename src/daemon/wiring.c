/* wiring: the layers connected once, by function pointers and listeners. See wiring.h. */
#include "daemon/wiring.h"

#include "path/proxy.h"
#include "path/dispatch.h"
#include "sched/scheduler.h"
#include "workers/supervisor.h"

const conn_handlers_t *wiring_conn_handlers(void)
{
    static const conn_handlers_t handlers = {.on_request = api_on_request, .on_head = api_on_head};
    return &handlers;
}

void wiring_connect(core_t *core, const api_admin_ops_t *admin)
{
    core->requeue = dispatch_requeue;
    dispatch_init(core);
    proxy_init(core);
    static const sched_actions_t actions = {
        .evict = instance_evict, .recycle = instance_recycle, .reclaimed = instance_reclaimed,
        .clear_cache = instance_clear_cache,
        .return_cost_ms = instance_return_cost_ms, .way_out_ms = instance_way_out_ms,
        .refresh_identity = instance_refresh_identity};
    sched_init(core, &actions);
    api_init(core, admin);
}
