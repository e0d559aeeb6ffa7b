/* mem_budget: the host-memory budget for request buffers. See mem_budget.h. */
#include "core/mem_budget.h"

#include <stdio.h>

#include "common/log.h"
#include "common/units.h"
#include "core/request.h"
#include "gpu/host_mem.h"

static buf_budget_t g_budget;
static const char *g_source = "fallback";
static uint64_t g_auto;  /* the auto figure measured at start, 0 until then */

/* A quarter of min(MemAvailable, cgroup room) (gpu/host_mem.h), at least max_body; the fallback when neither is known. */
static uint64_t auto_limit(uint64_t max_body, uint64_t *avail, uint64_t *room)
{
    const char *source;
    uint64_t base = host_mem_room(&source, avail, room);
    if (!base) {
        g_source = "fallback";
        return MEM_BUDGET_FALLBACK > max_body ? MEM_BUDGET_FALLBACK : max_body;
    }
    g_source = source;
    return base / 4 > max_body ? base / 4 : max_body;
}

void mem_budget_configure(const config_t *cfg)
{
    bool first = g_budget.limit == 0;
    uint64_t avail = 0, room = 0;
    if (cfg->memory_budget) {
        g_budget.limit = cfg->memory_budget;
        g_source = "config";
    } else {
        if (!g_auto)
            g_auto = auto_limit(cfg->limits.max_body, &avail, &room);
        g_budget.limit = g_auto;
    }
    if (!first)
        return;
    char lim[32];
    units_format_size(g_budget.limit, lim, sizeof lim);
    log_event(LOG_INFO, "memory_budget", "bytes=%llu size=%s source=%s mem_available=%llu cgroup_room=%llu",
              (unsigned long long)g_budget.limit, lim, g_source, (unsigned long long)avail,
              (unsigned long long)room);
}

buf_budget_t *mem_budget(void) { return &g_budget; }

const char *mem_budget_source(void) { return g_source; }

void mem_budget_attach(request_t *r)
{
    buf_set_budget(&r->body, &g_budget);
    buf_set_budget(&r->orig_body, &g_budget);
    buf_set_budget(&r->resp_body, &g_budget);
}

int mem_budget_reserve_body(request_t *r, uint64_t n)
{
    if (n == 0)
        return 0;
    if (n >= SIZE_MAX || !buf_budget_fits(&g_budget, n + 1)) {
        g_budget.refused++;
        return -1;
    }
    return buf_reserve_exact(&r->body, (size_t)n) == 0 ? 0 : -1;
}
