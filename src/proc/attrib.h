/*
 * attrib: attribution, the one answer to "which processes, and so which GPU bytes, belong
 * to this instance". An instance is known here only by its identity (attrib_identity_t):
 * the worker vramd spawned and the process group it leads, or, for an external server
 * (url:), whoever listens on its port. The scheduler's snapshot (foreign usage, measured
 * usage), the supervisor's start check (is the port the worker's?) and parking (which
 * processes to checkpoint, who serves an external port) all ask this module; the /proc
 * reading itself is gpu/procfs.c's.
 *
 * Ownership of the identity, downward only: instance_t (core/model.h) carries one
 * attrib_identity_t, `ident`. The supervisor (workers/instance.c) owns it: it sets it when
 * it spawns a worker (attrib_set_worker) or creates an external instance
 * (attrib_set_external), and it alone refreshes it (attrib_refresh) in
 * instance_refresh_identity. The scheduler never writes it: before it attributes a
 * snapshot it asks the supervisor, through the refresh_identity action the composition
 * root (daemon/wiring.c) sets, to refresh the identities of the instances it is about to
 * measure (at most every few seconds), and then only reads them (attrib_claim). So the
 * scheduler learns who an external server is without writing a field the supervisor owns,
 * and neither domain module calls the other by name.
 *
 * Whose is a process: attrib_claim says how strongly one identity claims a pid
 * (ATTRIB_PROCESS: it is the worker or the external server's listener; ATTRIB_GROUP: it is
 * a member of that process group: a wrapper's child, a worker's own children). Among several
 * identities the owner is the first with the strongest claim (a process itself beats a
 * group; the first instance wins among equals); an unclaimed process is foreign. Group
 * lookups read /proc once per pid per attrib_cache_t (one cache per snapshot).
 *
 * A cgroup per worker (proc/cgroup.h) is such a way: ATTRIB_CGROUP, between GROUP and
 * PROCESS; a process is looked up by its /proc/PID/cgroup line that names vramd's subtree.
 *
 * Adding a way to find a worker's processes (a pid namespace, ...): a field
 * in attrib_identity_t, set in attrib_set_worker / attrib_refresh, a claim level in enum
 * attrib_claim (between GROUP and PROCESS, or below GROUP) answered in attrib_claim, and
 * the /proc reader in gpu/procfs.c. Nothing outside this module and procfs changes: the
 * callers compare claims, never look inside an identity.
 *
 * Invariants: an identity with pid, pgid and external_pid 0 claims nothing; a worker's
 * identity keeps its pid after the process exits (NVML may still show its memory while the
 * driver releases it); the cache holds ATTRIB_CACHE pids at most (lookups beyond it are
 * not cached); a gpu pid list is bounded by the caller's max. Loop thread only.
 */
#ifndef VRAMD_PROC_ATTRIB_H
#define VRAMD_PROC_ATTRIB_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "gpu/gpu.h"
#include "proc/cgroup.h"

#define ATTRIB_CACHE 64 /* pids whose process group one attrib_cache_t remembers */

typedef struct attrib_identity {
    bool external;      /* a server vramd did not start: found by who listens on port */
    pid_t pid;          /* supervised: the worker vramd spawned (kept after it exits); 0 = none */
    int port;           /* the TCP port it serves on */
    pid_t pgid;         /* every member of this process group is the instance's; 0 = unknown */
    pid_t external_pid; /* external: the pid listening on port; 0 = unknown */
    /* supervised in a cgroup leaf (proc/cgroup.h): every process in it or under it is the
     * instance's, whatever its process group (setsid helpers, a container's processes) */
    const cgroup_tree_t *tree; /* NULL = no cgroup */
    char cgroup[CGROUP_PATH_MAX]; /* the leaf as /proc/PID/cgroup names it; "" = none */
    bool container;     /* its server runs in a container: a runtime's port proxy may hold the port
                         * (the supervisor sets it after attrib_set_worker) */
} attrib_identity_t;

/* A spawned worker: pid serving on port, leading its own process group (proc/process.c
 * puts every worker in one) and, when tree is active, in the cgroup leaf named leaf. */
void attrib_set_worker(attrib_identity_t *id, pid_t pid, int port, const cgroup_tree_t *tree, const char *leaf);
/* An external server on port: nobody known until attrib_refresh finds the listener. */
void attrib_set_external(attrib_identity_t *id, int port);
/* Look again who the instance is, when that can have changed: an external server whose
 * known listener is gone (or never found) is looked up by its port (its listener and that
 * listener's process group). Scans every process: call it rarely. True when the identity
 * changed. A worker's identity does not change (false). */
bool attrib_refresh(attrib_identity_t *id);

/* Process groups looked up while attributing one snapshot (or one pid list). */
typedef struct attrib_cache {
    pid_t pid[ATTRIB_CACHE];
    pid_t pgid[ATTRIB_CACHE];
    size_t n;
    /* cgroup paths looked up (a second table: most snapshots need none) */
    pid_t cg_pid[ATTRIB_CACHE];
    char cg[ATTRIB_CACHE][CGROUP_PATH_MAX / 2];
    size_t n_cg;
} attrib_cache_t;

void attrib_cache_init(attrib_cache_t *c);

/* How strongly an identity claims a process; a larger value is a stronger claim. */
enum attrib_claim {
    ATTRIB_NONE = 0,
    ATTRIB_GROUP,   /* a member of its process group */
    ATTRIB_CGROUP,  /* a member of its cgroup leaf (or a cgroup under it) */
    ATTRIB_PROCESS, /* the worker itself, or the external server's listener (the strongest) */
};

/* How strongly id claims pid (cheapest proof first: the pid, then its group through c). */
enum attrib_claim attrib_claim(const attrib_identity_t *id, pid_t pid, attrib_cache_t *c);

/* Is pid the caller's instance's (its owner among every identity, by attrib_claim)? */
typedef bool (*attrib_mine_fn)(void *ctx, pid_t pid);
/* The processes in snap that hold GPU memory and that mine says are the instance's, each
 * once (a process on several GPUs is listed once), at most max into out; returns how many
 * there are (more than max when out was too small). */
size_t attrib_gpu_pids(const gpu_snapshot_t *snap, attrib_mine_fn mine, void *ctx, pid_t *out, size_t max);

/* The process serving on the identity's port: an external server's known listener, else
 * whoever listens on the port now (a scan of every process); 0 when none is visible. */
pid_t attrib_listener(const attrib_identity_t *id);
/* Is the process listening on a spawned worker's port the worker's: in its cgroup leaf, in
 * its process group, or (a container) a runtime's port proxy (docker-proxy, conmon,
 * rootlessport, slirp4netns, pasta)? False only when /proc shows another process holding it; true when it is the worker's, when
 * /proc cannot tell (nothing visible listening, another PID namespace), and for an external
 * server or a worker not spawned yet (nothing to compare with). */
bool attrib_port_is_workers(const attrib_identity_t *id);

#endif
