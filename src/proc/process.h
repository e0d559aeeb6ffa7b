/*
 * process: spawning and reaping worker processes (and validator commands) under libuv.
 *
 * Every child runs in its own process group (setpgid) and, when the spec names a cgroup
 * tree, in a cgroup leaf of its own (proc/cgroup.h: whatever it starts stays in it, setsid
 * or not); it gets PR_SET_PDEATHSIG(SIGKILL) so it dies with vramd, and inherits only fds 0 (/dev/null), 1 and 2 (pipes read by vramd).
 * Each line the child writes is logged as one JSON event "worker_output" with the model
 * name, pid and stream (lines are capped at 8 KiB; longer ones are split), and handed to
 * the line hook when one is set (process_set_line_hook). Optionally the
 * child's stdin is fed from a buffer (validators read the body on stdin).
 *
 * Children are reaped from a SIGCHLD handler (uv_signal) with a waitpid(WNOHANG) loop, so
 * there are never zombies. vramd spawns children only through this module (never uv_spawn),
 * so the loop may reap any pid.
 *
 * Pid files: when spec->pidfile is set, "<pid> <pgid> <starttime> <vramd pid>\n" is written
 * there at spawn and removed at exit. process_kill_stale(dir) kills (SIGKILL, whole group)
 * every process named by a pid file in dir whose /proc starttime still matches (so a reused
 * pid is never hit) and removes the files: workers left by a previous vramd that died.
 *
 * The guard (process_guard.c): a process outside vramd's tree that, when vramd's process
 * ends however it ends, SIGKILLs the groups of the workers that vramd's pid files name, so
 * that what a wrapper (sh -c, start.sh) started dies with vramd too, not only the wrapper
 * that PR_SET_PDEATHSIG reaches.
 *
 * Ownership: a process_t belongs to this module. The exit callback is the last callback
 * for it; it runs after the process has exited AND its output pipes reached EOF (so no log
 * line is lost); the process_t is freed right after the callback returns.
 * Return convention: 0 ok, -1 error with a message in err.
 */
#ifndef VRAMD_PROC_PROCESS_H
#define VRAMD_PROC_PROCESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config/config.h"
#include "proc/cgroup.h"

typedef struct process process_t;

/* exit_status is the exit code when term_signal == 0. */
typedef void (*process_exit_cb)(process_t *p, int exit_status, int term_signal, void *ctx);

typedef struct process_spec {
    char *const *argv;        /* argv[0] looked up in PATH (relative to cwd when it has a '/') */
    const config_kv_t *env;   /* added to (and overriding) vramd's environment */
    size_t n_env;
    const char *cwd;          /* NULL = vramd's */
    const char *log_name;     /* tag for output lines ("model" field) */
    const char *pidfile;      /* NULL = none */
    const char *stdin_data;   /* NULL = /dev/null; else written to the child's stdin, then closed */
    size_t stdin_len;
    int capture_stdout;       /* 1: keep stdout in a buffer (up to 64 KiB) instead of logging it */
    /* NULL (or a tree not active) = none; else the child joins the leaf cgroup_leaf of this
     * tree before exec (made when missing), and the leaf's members are signalled with the
     * group, killed when the child exits, and the leaf removed once it is empty. The tree
     * must outlive the process_t. */
    const cgroup_tree_t *cgroups;
    const char *cgroup_leaf;
} process_spec_t;

int process_spawn(uv_loop_t *loop, const process_spec_t *spec, process_exit_cb cb, void *ctx,
                  process_t **out, char *err, size_t errlen);
pid_t process_pid(const process_t *p);
/* From p's exit callback only: its cgroup leaf is not removed after the callback; the
 * caller removes it later with process_leaf_release (after the driver's limit on it is
 * reset, say). The leaf's members were killed when p was reaped. */
void process_leaf_keep(process_t *p);
/* Remove a kept leaf (of tree, named leaf): now, or retried while members are leaving, as
 * a finished process's leaf is. tree NULL or not active: nothing. */
void process_leaf_release(uv_loop_t *loop, const cgroup_tree_t *tree, const char *leaf);

/* Send sig to the whole process group (and every member of its cgroup leaf). */
void process_signal(process_t *p, int sig);
/* SIGTERM to the group (and its cgroup leaf) now, SIGKILL to both after timeout_ms if it has
 * not exited. */
void process_stop(process_t *p, uint64_t timeout_ms);
/* Where each output line also goes, beside the log (the composition root sets it once, so
 * that the line reaches its model's ring without this layer knowing models): log_name as
 * in the spec, the child's pid, "stdout" or "stderr", the line (NUL-terminated, no '\n').
 * NULL (the default): lines are only logged. */
typedef void (*process_line_hook_fn)(void *ctx, const char *log_name, pid_t pid, const char *stream,
                                     const char *line, size_t len);
void process_set_line_hook(process_line_hook_fn fn, void *ctx);
/* Captured stdout (capture_stdout), valid inside the exit callback. */
const char *process_stdout(const process_t *p, size_t *len);
/* 1 when the child wrote more than 64 KiB to a captured stdout (the rest was dropped). */
int process_stdout_truncated(const process_t *p);
/* Kill workers left behind by an earlier run; returns how many were killed. */
int process_kill_stale(const char *pid_dir);
/* Kill the workers (whole groups) that pid files in pid_dir name with owner as their vramd;
 * the files stay. Returns how many were killed, or -1. */
int process_kill_owned(const char *pid_dir, pid_t owner);
/* Start the guard for pid_dir and the cgroup tree (NULL: none) (call once, early, before any thread, listener or worker).
 * Returns the write end of its pipe, to keep open for the life of the process (CLOEXEC);
 * *guard_pid gets the guard's pid. -1 with err when it could not be started. */
int process_guard_start(const char *pid_dir, const cgroup_tree_t *cgroups, pid_t *guard_pid, char *err,
                        size_t errlen);
/* Leaves of finished processes that could not be removed yet (members still dying): tried
 * again now; returns how many are still left. */
size_t process_cgroup_retry(void);
/* Run argv to its end, synchronously, at most timeout_ms (proc/process_sync.c: blocks the
 * caller; for start-up only). stdout and stderr into out (NUL-terminated, cut at outlen - 1). 0 with
 * *status = exit status (-1 signal, -2 timed out: its group was SIGKILLed), or -1 with err. */
int process_run_sync(char *const argv[], const config_kv_t *env, size_t n_env, uint64_t timeout_ms, char *out,
                     size_t outlen, int *status, char *err, size_t errlen);
/* Keep the loop's SIGCHLD watcher for good, not only while a child is tracked: a child
 * subreaper (proc/cgroup.h) adopts orphans at any time, and each must be reaped. */
int process_reap_always(uv_loop_t *loop, char *err, size_t errlen);
/* Number of live children (for tests and status). */
size_t process_count(void);

#endif
