/*
 * cgroup: a cgroup per worker instance, so that every process a worker starts (a setsid
 * helper, a double fork, a daemonizing server, a container's processes placed under it with
 * --cgroup-parent) is found, booked and killed with it; membership, not the process group.
 *
 * One subtree per daemon (cgroup_tree_t), named after its state directory
 * ("vramd-<8 hex>"), so the next start of the same daemon finds what a run before it left
 * and two daemons on one host never touch each other's. Under it, one leaf per instance
 * ("<model>-<instance id>"), which the child joins between fork and exec (it writes "0" to
 * the leaf's cgroup.procs files, opened by the parent), so nothing it starts escapes.
 *
 * Modes (cgroup_tree_open, `cgroup.mode` in the config):
 *   v2         the unified hierarchy (/sys/fs/cgroup when it is cgroup2, else
 *              /sys/fs/cgroup/unified on a hybrid host); the subtree goes under vramd's own
 *              cgroup (systemd's Delegate=yes gives a service one it may write). Kill is
 *              the leaf frozen (cgroup.freeze, kernel 5.2+), SIGKILL to each member, thawed.
 *   v1         the `pids` and `freezer` hierarchies: a leaf in each; kill = freeze, SIGKILL
 *              every member, thaw (nothing forks away mid-kill).
 *   subreaper  neither can be written: vramd becomes a child subreaper
 *              (PR_SET_CHILD_SUBREAPER), so orphans of its workers are re-parented to it and
 *              reaped; membership falls back to the process group (a setsid helper is not
 *              found, see docs/operations.md).
 *   off        nothing: process groups only.
 *   auto       v2 if it can be written, else v1, else subreaper.
 *
 * Every hierarchy mounted on the host is looked at when a leaf is killed or removed: a
 * container engine given --cgroup-parent=<leaf path> makes the container's cgroups under
 * that same path in the hierarchies it uses (podman's cgroupfs manager on a v1 host: pids,
 * memory, cpu, ...), and they are the instance's too. Attribution (cgroup_path_of) reads
 * /proc/PID/cgroup and answers with the path in whichever line names the daemon's subtree.
 *
 * The subtree a running vramd believes it has is there: cgroup_tree_ensure makes it again
 * once vramd holds the owner lock (after any sweep of an earlier run's guard), and a leaf
 * made (cgroup_leaf_open, cgroup_leaf_dir) under a subtree that is gone makes the subtree
 * first (event cgroup_subtree_remade), so a worker's start never fails for it.
 *
 * Invariants: walks are iterative and bounded (CGROUP_WALK_MAX directories a leaf, no
 * recursion); a leaf is removed bottom-up and only when empty (EBUSY otherwise: the caller
 * retries); nothing here blocks longer than CGROUP_FREEZE_WAIT_MS (the freezer wait). Every
 * function but cgroup_child_join runs on the loop thread (or in the guard);
 * cgroup_child_join runs between fork and exec and is async-signal-safe.
 * Return convention: 0 ok, -1 error with a message in err (or errno).
 */
#ifndef VRAMD_PROC_CGROUP_H
#define VRAMD_PROC_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CGROUP_PATH_MAX 512
#define CGROUP_MOUNTS_MAX 16  /* cgroup hierarchies looked at (a host has about 13) */
#define CGROUP_JOIN_MAX 2     /* hierarchies a worker joins: v2 one, v1 pids + freezer */
#define CGROUP_WALK_MAX 256   /* directories in one leaf's subtree walked at most */
#define CGROUP_FREEZE_WAIT_MS 200
#define CGROUP_LOCK_WAIT_MS 30000 /* how long a start waits for a dead vramd's guard to sweep */

enum cgroup_mode { CGROUP_OFF = 0, CGROUP_SUBREAPER, CGROUP_V1, CGROUP_V2 };

typedef struct cgroup_tree {
    enum cgroup_mode mode;
    char rel[CGROUP_PATH_MAX];   /* the subtree as /proc/PID/cgroup names it: "/vramd-1a2b3c4d" */
    /* where a worker joins: v2 [0] = the unified hierarchy; v1 [0] = pids, [1] = freezer */
    char join[CGROUP_JOIN_MAX][CGROUP_PATH_MAX];
    size_t n_join;
    int freezer;                 /* v1: index in join[] of the freezer, -1 none */
    bool has_freeze;             /* v2: cgroup.freeze exists (kernel 5.2+) */
    /* every cgroup hierarchy mounted (v1 and v2), for kills and removals of whatever an
     * engine made under a leaf's path */
    char mounts[CGROUP_MOUNTS_MAX][CGROUP_PATH_MAX / 2];
    size_t n_mounts;
    /* The subtree's owner lock (cgroup_tree_lock): a file the running vramd holds an flock on
     * for its whole life; "" when none. The guard of a vramd that died sweeps the subtree only
     * when it can take the lock, so it never sweeps a later vramd's workers nor removes the
     * subtree under it (same state_dir, same subtree). */
    char lock_path[CGROUP_PATH_MAX];
    int lock_fd; /* held by this process (O_CLOEXEC); -1 none */
} cgroup_tree_t;

const char *cgroup_mode_name(enum cgroup_mode m);
/* What a mode cannot catch, in words, for /v1/status and the cgroup_ready log line; NULL for
 * the cgroup modes (v1, v2), which hold every process a worker starts. */
const char *cgroup_mode_cannot_catch(enum cgroup_mode m);
/* want: "auto", "v2", "v1", "subreaper" or "off". path: NULL or "auto" for the default place
 * (vramd's own cgroup in the chosen hierarchy), else the directory of the subtree itself (in
 * a cgroup2 mount for v2, in the pids mount for v1: what a delegation handed to the service
 * user). name: the subtree's name under the default place ("vramd-1a2b3c4d"). A mode asked
 * for by name that cannot be used is an error; auto falls back as the header says.
 * Subreaper mode only records the choice: cgroup_subreaper_start arms it. */
int cgroup_tree_open(cgroup_tree_t *t, const char *want, const char *path, const char *name, char *err,
                     size_t errlen);
/* In subreaper mode, make the calling process a child subreaper (after the guard is
 * started: the guard must not become vramd's child). 0, or -1 with errno. */
int cgroup_subreaper_start(const cgroup_tree_t *t);
/* "vramd-" + 8 hex digits of a hash of state_dir's real path (or of the text when it does
 * not resolve), into out. */
void cgroup_tree_name(const char *state_dir, char *out, size_t outlen);
/* Make the subtree's directories again where they are gone (each joined hierarchy; an
 * existing one is kept). vramd calls it once it holds the owner lock: a dead vramd's guard
 * may have swept and removed the subtree after cgroup_tree_open found it still there.
 * 0, or -1 with errno. */
int cgroup_tree_ensure(const cgroup_tree_t *t);
/* Does the tree hold workers in cgroups (v1 or v2)? */
bool cgroup_tree_active(const cgroup_tree_t *t);

/* The leaf's path as /proc/PID/cgroup names it ("/vramd-1a2b3c4d/trellis-3"); "" when the
 * tree is not active. */
void cgroup_leaf_path(const cgroup_tree_t *t, const char *leaf, char *out, size_t outlen);
/* Make the leaf in each joined hierarchy and open its cgroup.procs files (CLOEXEC) into fds
 * (*n set; the caller closes them after fork). An existing leaf is reused. */
int cgroup_leaf_open(const cgroup_tree_t *t, const char *leaf, int fds[CGROUP_JOIN_MAX], size_t *n, char *err,
                     size_t errlen);
/* v2 only: make the leaf's directory (an existing one is reused) and put its full path
 * ("/sys/fs/cgroup/.../vramd-1a2b3c4d/trellis-3") into out, for what names a cgroup by its
 * directory (the driver's per-cgroup limits). 0, or -1 with errno (ENOTSUP: not v2). */
int cgroup_leaf_dir(const cgroup_tree_t *t, const char *leaf, char *out, size_t outlen);
/* In the child, between fork and exec: join every fd's cgroup. 0, or -1 with errno. */
int cgroup_child_join(const int *fds, size_t n);
/* Signal every process in the leaf's subtree, in every hierarchy, but (for signals other
 * than SIGKILL) those in process group skip_pgid, which the caller signalled already (a
 * worker must not see one SIGTERM twice); 0 = skip none; and never a container runtime's
 * monitor (conmon: it cleans up after the container once its processes are gone). SIGKILL
 * kills for good: freeze, SIGKILL each member, thaw (without a freezer: repeated passes).
 * Returns how many processes were signalled in the first pass. */
int cgroup_leaf_signal(const cgroup_tree_t *t, const char *leaf, int sig, pid_t skip_pgid);
/* Processes in the leaf's subtree (every hierarchy, each once), at most max into out; returns
 * how many there are. */
size_t cgroup_leaf_members(const cgroup_tree_t *t, const char *leaf, pid_t *out, size_t max);
/* Remove the leaf's directories bottom-up in every hierarchy: 0 when none is left, -1 with
 * errno (EBUSY: members are still dying) when one could not be. */
int cgroup_leaf_remove(const cgroup_tree_t *t, const char *leaf);
/* Kill and remove every leaf under the subtree (what an earlier run, or this one, left).
 * *killed gets the processes killed, *removed the leaves removed; returns the leaves that
 * could not be removed yet. */
int cgroup_sweep(const cgroup_tree_t *t, size_t *killed, size_t *removed);
/* Remove the subtree's own directory (at a clean exit, after the sweep); 0 or -1. */
int cgroup_tree_remove(const cgroup_tree_t *t);
/* vramd at start, before its sweep: take the subtree's owner lock at path (created if
 * needed), waiting up to wait_ms while a dead vramd's guard holds it (it is sweeping); kept
 * until this process ends. 0; -1 with errno when it could not be opened or stayed held
 * (vramd runs on: the lock only orders it after a guard's sweep). */
int cgroup_tree_lock(cgroup_tree_t *t, const char *path, unsigned wait_ms);
/* The guard, once its vramd died: take the owner lock without waiting. true: the subtree is
 * the dead vramd's to sweep (held until the guard exits); false: a later vramd owns it now
 * (its start sweeps what is left), or there is no lock. */
bool cgroup_tree_lock_try(const cgroup_tree_t *t);

/* The cgroup path of pid (from /proc/PID/cgroup) in the line that names t's subtree, into
 * out: true when pid is in the subtree; false (out "") otherwise. */
bool cgroup_path_of(const cgroup_tree_t *t, pid_t pid, char *out, size_t outlen);
/* Is path (a cgroup path as /proc names it) the leaf at leaf_path or under it? */
bool cgroup_path_within(const char *path, const char *leaf_path);

#endif
