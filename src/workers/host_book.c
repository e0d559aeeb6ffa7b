/* host_book: the host-memory ledger of parked instances. See host_book.h. */
#include "workers/host_book.h"

#include <stdbool.h>

#include "common/log.h"
#include "common/units.h"
#include "core/core.h"
#include "gpu/host_mem.h"

static host_ledger_t g_book;
static bool g_init;   /* g_book initialised */
static bool g_synced; /* limits taken from a config at least once */
static uint64_t g_cfg_budget, g_cfg_reserve; /* the config values applied last */
static uint64_t g_auto;                       /* auto budget measured once, 0 until then */
static const char *g_source = "fallback";

static void sync_limits(const config_t *cfg)
{
    if (g_synced && cfg->host_memory.budget == g_cfg_budget && cfg->host_memory.reserve == g_cfg_reserve)
        return;
    uint64_t budget = cfg->host_memory.budget;
    uint64_t avail = 0, room = 0;
    if (budget) {
        g_source = "config";
    } else {
        if (!g_auto) {
            const char *src;
            uint64_t base = host_mem_room(&src, &avail, &room);
            g_auto = base ? base / 2 : HOST_BOOK_FALLBACK;
            g_source = base ? src : "fallback";
        }
        budget = g_auto;
    }
    if (!g_init) {
        host_ledger_init(&g_book, budget, cfg->host_memory.reserve);
        g_init = true;
    } else {
        host_ledger_set_limits(&g_book, budget, cfg->host_memory.reserve);
    }
    g_synced = true;
    g_cfg_budget = cfg->host_memory.budget;
    g_cfg_reserve = cfg->host_memory.reserve;
    char b[32], r[32];
    units_format_size(budget, b, sizeof b);
    units_format_size(cfg->host_memory.reserve, r, sizeof r);
    log_event(LOG_INFO, "host_memory_budget", "bytes=%llu size=%s reserve=%s source=%s mem_available=%llu "
              "cgroup_room=%llu parked=%llu", (unsigned long long)budget, b, r, g_source, (unsigned long long)avail,
              (unsigned long long)room, (unsigned long long)g_book.parked);
}

const host_ledger_t *host_book(const config_t *cfg)
{
    if (cfg) {
        sync_limits(cfg);
    } else if (!g_init) { /* no config yet (a test's bare core): an empty book */
        host_ledger_init(&g_book, 0, 0);
        g_init = true;
    }
    return &g_book;
}

const char *host_book_source(void) { return g_source; }

enum host_verdict host_book_park(instance_t *inst, uint64_t bytes)
{
    sync_limits(inst->model->core->cfg);
    uint64_t room = host_mem_room(NULL, NULL, NULL);
    return host_ledger_book(&g_book, &inst->park.parked_host, bytes, room, inst->model->name, inst);
}

void host_book_settle(instance_t *inst, uint64_t bytes)
{
    host_ledger_settle(&g_book, &inst->park.parked_host, bytes);
}

void host_book_release(instance_t *inst)
{
    if (g_init)
        host_ledger_release(&g_book, &inst->park.parked_host);
}

uint64_t host_book_parked_by(const char *name)
{
    return g_init ? host_ledger_parked_by(&g_book, name) : 0;
}
