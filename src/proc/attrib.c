/* attrib: which processes belong to an instance (its identity). See attrib.h. */
#include "proc/attrib.h"

#include <signal.h>
#include <string.h>

#include "gpu/procfs.h"

void attrib_set_worker(attrib_identity_t *id, pid_t pid, int port, const cgroup_tree_t *tree, const char *leaf)
{
    memset(id, 0, sizeof *id);
    id->pid = pid;
    id->port = port;
    id->pgid = pid;
    if (cgroup_tree_active(tree) && leaf) {
        id->tree = tree;
        cgroup_leaf_path(tree, leaf, id->cgroup, sizeof id->cgroup);
    }
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

void attrib_cache_init(attrib_cache_t *c) { c->n = c->n_cg = 0; }

/* pid's cgroup path under the identity's tree ("" when outside), through the cache. */
static const char *cached_cgroup(attrib_cache_t *c, const cgroup_tree_t *tree, pid_t pid, char *tmp, size_t tmplen)
{
    for (size_t i = 0; i < c->n_cg; i++)
        if (c->cg_pid[i] == pid)
            return c->cg[i];
    cgroup_path_of(tree, pid, tmp, tmplen);
    if (c->n_cg < ATTRIB_CACHE && strlen(tmp) < sizeof c->cg[0]) {
        c->cg_pid[c->n_cg] = pid;
        snprintf(c->cg[c->n_cg], sizeof c->cg[0], "%s", tmp);
        return c->cg[c->n_cg++];
    }
    return tmp;
}

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
    if (id->tree && id->cgroup[0]) {
        char tmp[CGROUP_PATH_MAX];
        if (cgroup_path_within(cached_cgroup(c, id->tree, pid, tmp, sizeof tmp), id->cgroup))
            return ATTRIB_CGROUP;
    }
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

/* A container runtime's process that holds a published port for the container. */
static bool runtime_port_proxy(pid_t pid)
{
    static const char *const names[] = {"docker-proxy", "conmon", "rootlessport", "rootlessport-ch",
                                         "slirp4netns", "pasta", "pasta.avx2"};
    char comm[32];
    if (procfs_comm(pid, comm, sizeof comm) != 0)
        return false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(comm, names[i]) == 0)
            return true;
    return false;
}

bool attrib_port_is_workers(const attrib_identity_t *id)
{
    if (id->external || id->pgid <= 0)
        return true;
    int owned = procfs_port_owned(id->port, id->pgid);
    if (owned != 0)
        return true; /* its group's, or /proc cannot tell */
    if (!id->tree && !id->container)
        return false;
    /* another group holds it: the worker's still when it is in the worker's cgroup, or a
     * container runtime's proxy for a container worker */
    pid_t holder = procfs_listener(id->port);
    if (holder <= 0)
        return true;
    char path[CGROUP_PATH_MAX];
    if (id->tree && cgroup_path_of(id->tree, holder, path, sizeof path) && cgroup_path_within(path, id->cgroup))
        return true;
    return id->container && runtime_port_proxy(holder);
}
