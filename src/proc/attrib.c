/* attrib: which processes belong to an instance (its identity). See attrib.h. */
#include "proc/attrib.h"

#include <signal.h>
#include <string.h>

#include "gpu/procfs.h"

void attrib_set_worker(attrib_identity_t *id, pid_t pid, int port)
{
    memset(id, 0, sizeof *id);
    id->pid = pid;
    id->port = port;
    id->pgid = pid;
}

void attrib_set_external(attrib_identity_t *id, int port)
{
    memset(id, 0, sizeof *id);
    id->external = true;
    id->port = port;
}

bool attrib_refresh(attrib_identity_t *id)
{
    if (!id->external)
        return false;
    if (id->external_pid > 0 && kill(id->external_pid, 0) == 0)
        return false;
    pid_t p = procfs_listener(id->port);
    if (p == id->external_pid)
        return false;
    id->external_pid = p;
    id->pgid = p > 0 ? procfs_pgid(p) : 0;
    return true;
}

void attrib_cache_init(attrib_cache_t *c) { c->n = 0; }

static pid_t cached_pgid(attrib_cache_t *c, pid_t pid)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->pid[i] == pid)
            return c->pgid[i];
    pid_t g = procfs_pgid(pid);
    if (c->n < ATTRIB_CACHE) {
        c->pid[c->n] = pid;
        c->pgid[c->n] = g;
        c->n++;
    }
    return g;
}

enum attrib_claim attrib_claim(const attrib_identity_t *id, pid_t pid, attrib_cache_t *c)
{
    if (pid <= 0)
        return ATTRIB_NONE;
    if ((id->pid > 0 && id->pid == pid) || (id->external_pid > 0 && id->external_pid == pid))
        return ATTRIB_PROCESS;
    if (id->pgid > 0 && cached_pgid(c, pid) == id->pgid)
        return ATTRIB_GROUP;
    return ATTRIB_NONE;
}

size_t attrib_gpu_pids(const gpu_snapshot_t *snap, attrib_mine_fn mine, void *ctx, pid_t *out, size_t max)
{
    size_t n = 0;
    for (size_t k = 0; k < snap->n_devices; k++) {
        const gpu_device_t *dev = &snap->devices[k];
        for (size_t p = 0; p < dev->n_procs; p++) {
            if (dev->procs[p].used == 0 || !mine(ctx, dev->procs[p].pid))
                continue;
            bool seen = false; /* one process on several GPUs is listed once */
            for (size_t i = 0; i < n && i < max; i++)
                seen = seen || out[i] == dev->procs[p].pid;
            if (seen)
                continue;
            if (n < max)
                out[n] = dev->procs[p].pid;
            n++;
        }
    }
    return n;
}

pid_t attrib_listener(const attrib_identity_t *id)
{
    if (id->external && id->external_pid > 0)
        return id->external_pid;
    return procfs_listener(id->port);
}

bool attrib_port_is_workers(const attrib_identity_t *id)
{
    if (id->external || id->pgid <= 0)
        return true;
    return procfs_port_owned(id->port, id->pgid) != 0;
}
