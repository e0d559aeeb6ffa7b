/* mem_budget: the host-memory budget for request buffers. See mem_budget.h. */
#include "core/mem_budget.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/units.h"
#include "core/request.h"

static buf_budget_t g_budget;
static const char *g_source = "fallback";
static uint64_t g_auto;  /* the auto figure measured at start, 0 until then */

/* "MemAvailable:  N kB" in bytes; 0 when unknown. */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* A number in a file; 0 when missing or not a number ("max"). */
static uint64_t file_u64(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    uint64_t v = 0;
    if (fscanf(f, "%" SCNu64, &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

/* What the cgroup (v2: memory.max - memory.current) still allows; 0 when unlimited or unknown. */
static uint64_t cgroup_room(void)
{
    char dir[512] = "/sys/fs/cgroup";
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char line[400];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "0::", 3) == 0) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", strcmp(line + 3, "/") == 0 ? "" : line + 3);
                break;
            }
        }
        fclose(f);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/memory.max", dir);
    uint64_t max = file_u64(path);
    if (max == 0) {
        snprintf(path, sizeof path, "/sys/fs/cgroup/memory.max"); /* a namespaced view */
        max = file_u64(path);
        snprintf(dir, sizeof dir, "/sys/fs/cgroup");
    }
    if (max == 0)
        return 0;
    snprintf(path, sizeof path, "%s/memory.current", dir);
    uint64_t cur = file_u64(path);
    return max > cur ? max - cur : 1;
}

/* A quarter of min(MemAvailable, cgroup room), at least max_body; the fallback when neither is known. */
static uint64_t auto_limit(uint64_t max_body, uint64_t *avail, uint64_t *room)
{
    *avail = mem_available();
    *room = cgroup_room();
    uint64_t base = *avail;
    g_source = "meminfo";
    if (*room && (!base || *room < base)) {
        base = *room;
        g_source = "cgroup";
    }
    if (!base) {
        g_source = "fallback";
        return MEM_BUDGET_FALLBACK > max_body ? MEM_BUDGET_FALLBACK : max_body;
    }
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
