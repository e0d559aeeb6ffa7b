/* wiring: the composition root: every handler, hook, action and listener set once. See wiring.h. */
#include "daemon/wiring.h"

#include <string.h>

#include "core/model.h"
#include "proc/process.h"

#include "jobs/jobs.h"
#include "path/dispatch.h"
#include "path/prompt_hold.h"
#include "path/proxy.h"
#include "path/proxy_upgrade.h"
#include "sched/scheduler.h"
#include "gate/driver_limit.h"
#include "gate/shim_grants.h"
#include "workers/hooks.h"
#include "workers/instance.h"
#include "workers/park.h"
#include "workers/park_cost.h"
#include "workers/park_evict.h"
#include "workers/supervisor.h"

const conn_handlers_t *wiring_conn_handlers(void)
{
    static const conn_handlers_t handlers = {.on_request = api_on_request, .on_head = api_on_head};
    return &handlers;
}

/* A worker's output line (proc/process.c) into its model's ring (GET /v1/models/NAME/logs):
 * log_name is the model's name for its workers and validators; other processes (stop_cmd,
 * "NAME:rm") name no model and are only logged. */
static void on_worker_line(void *ctx, const char *log_name, pid_t pid, const char *stream, const char *line,
                           size_t len)
{
    core_t *core = ctx;
    list_foreach(it, &core->models) {
        model_t *m = list_entry(it, model_t, link);
        if (strcmp(m->name, log_name) == 0) {
            uint64_t wall = core->started_wall_ms + (core_now() - core->started_ms);
            (void)line_ring_push(&m->logs, wall, (int)pid, strcmp(stream, "stderr") == 0 ? 'e' : 'o', line, len);
            return;
        }
    }
}

/* A worker's driver limit changed: what was held for it goes on (path/proxy.h, the shim). */
static void on_limit_applied(instance_t *inst)
{
    proxy_limit_applied(inst, false);
    shim_grants_limit_applied(inst);
}

void wiring_connect(core_t *core, const wiring_root_t *root)
{
    process_set_line_hook(on_worker_line, core);
    core->requeue = dispatch_requeue;
    dispatch_init(core);
    proxy_init(core);
    proxy_upgrade_init(core); /* upgraded connections close with their worker */
    prompt_hold_init(core);
    static const sched_actions_t actions = {
        .evict = instance_evict, .recycle = instance_recycle, .reclaimed = instance_reclaimed,
        .clear_cache = instance_clear_cache,
        .return_cost_ms = instance_return_cost_ms, .way_out_ms = instance_way_out_ms,
        .evict_leaves = instance_evict_leaves,
        .refresh_identity = instance_refresh_identity, .bring_back = model_bring_back};
    sched_init(core, &actions);
    api_init(core, &root->admin);
    shim_grants_init(core); /* the CUDA shims' grant socket (gate/shim_grants.h) */
    driver_limit_init(core, on_limit_applied); /* the driver's per-cgroup limits (gate/driver_limit.h) */
    jobs_listen(core); /* the job runner hears its attempts dispatched (jobs/jobs.h) */
    if (root->on_progress) {
        core_listen(core, CORE_EV_REQUEST_ENDED, root->on_progress, root->progress_ctx);
        core_listen(core, CORE_EV_INSTANCE_GONE, root->on_progress, root->progress_ctx);
    }
}
