/*
 * process_int: what the files of the process module share; only they include it. The
 * public contract is in process.h.
 *
 *   process.c          spawn, SIGCHLD reaping, stop, drain, the life of a process_t
 *   process_child.c    the child's environment, and the child between fork and exec
 *   process.c          also the child's stdout/stderr: logged line by line, or captured
 *   process_leaves.c   removing a finished process's cgroup leaf (retried while busy)
 *   process_sync.c     a short command run to its end, synchronously (start-up only)
 *   pidfile.c          pid files, and killing what a previous vramd left behind
 *
 * Invariants: a process_t is owned by process.c and freed only from
 * process_handle_closed, the close callback of its last uv handle; the other files touch
 * it only from callbacks of handles it still owns, and close a handle only through the
 * functions declared here, which keep pipes_open and handles_open right. Everything runs
 * on the loop's thread, except process_child_exec, which runs in the forked child and
 * calls only async-signal-safe functions.
 */
#ifndef VRAMD_PROC_PROCESS_INT_H
#define VRAMD_PROC_PROCESS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "common/buf.h"
#include "common/list.h"
#include "config/config.h"
#include "proc/process.h"

#define PROCESS_LINE_MAX 8192
#define PROCESS_CAPTURE_MAX (64 * 1024)
#define PROCESS_READ_CHUNK 8192

typedef struct sigchld_watch sigchld_watch_t; /* process.c */

typedef struct output_stream {
    uv_pipe_t pipe;
    const char *name; /* "stdout" / "stderr" */
    bool open;        /* handle initialised and uv_close not called yet */
    bool capture;     /* stdout kept in process_t.captured instead of logged */
    bool split_pending; /* last line was cut at PROCESS_LINE_MAX: a '\n' next ends nothing */
    size_t line_len;
    char line[PROCESS_LINE_MAX + 1];
    char readbuf[PROCESS_READ_CHUNK];
} output_stream_t;

struct process {
    list_t link; /* on g_procs while not reaped */
    uv_loop_t *loop;
    sigchld_watch_t *watch;
    pid_t pid; /* also the process group id */
    char *log_name;
    char *pidfile;
    process_exit_cb cb;
    void *ctx;

    output_stream_t out, err;
    uv_pipe_t in;
    bool in_open;
    char *in_data;
    size_t in_len;
    uv_write_t in_req;

    uv_timer_t timer; /* stop timeout before exit, drain limit after */
    bool stopping;
    bool draining;

    unsigned pipes_open;   /* output/input pipes not being closed yet */
    unsigned handles_open; /* uv handles whose close callback has not run */

    bool exited;
    int exit_status;
    int term_signal;

    buf_t captured;
    bool captured_truncated;

    const cgroup_tree_t *cg; /* NULL: no cgroup leaf */
    char *cg_leaf;
    bool cg_kept; /* process_leaf_keep: the exit callback's owner removes the leaf */
};

/* ------------------------------------------------------------------ process.c */

/* Close callback of every handle a process_t owns; the last one runs the exit callback
 * and frees the process_t. */
void process_handle_closed(uv_handle_t *h);
/* Drive a process toward "finished" after any event. Never frees p (only close callbacks do). */
void process_progress(process_t *p);

/* ------------------------------------------------------------- process.c (output streams) */

/* Starts reading fd (taken over, or closed on failure) into s: logged or captured. */
void process_output_start(process_t *p, output_stream_t *s, int fd, const char *name, bool capture);
/* Logs a partial last line and closes s's pipe (no-op when already closed). */
void process_output_close(process_t *p, output_stream_t *s);

/* ------------------------------------------------------------------ process_leaves.c */

/* The leaf of a finished process (tree NULL: nothing): removed now, or retried later. */
void process_leaf_finished(uv_loop_t *loop, const cgroup_tree_t *tree, const char *leaf);

/* ------------------------------------------------------------------ process_child.c */

/* What a child whose setup failed writes on the status pipe: the stage (enum child_stage,
 * process_child.c) and errno. */
typedef struct child_report {
    int stage;
    int err;
} child_report_t;

/* What the child needs between fork and exec, all prepared by the parent. */
typedef struct child_setup {
    char *const *argv;
    char **envp;
    const char *cwd;
    pid_t parent;
    int in_r; /* -1: /dev/null */
    int out_w, err_w, status_w;
    const int *cg_fds; /* cgroup.procs files of the leaf to join first */
    size_t n_cg_fds;
} child_setup_t;

/* environ minus private variables and those named in extra, then extra's set values
 * (a NULL value only removes). The owned strings are the last process_env_owned_count(). */
char **process_env_build(const config_kv_t *extra, size_t n_extra);
size_t process_env_owned_count(const config_kv_t *extra, size_t n_extra);
void process_env_free(char **envp, size_t n_owned);
/* In the forked child: set up and exec, or report the failed stage on status_w and _exit. */
_Noreturn void process_child_exec(const child_setup_t *s);
/* The message for a child's failure report, into err. */
void process_child_failure(const child_report_t *r, const process_spec_t *spec, char *err, size_t errlen);

/* ------------------------------------------------------------------ pidfile.c */

/* Field 22 of /proc/PID/stat (process start time in clock ticks since boot); 0 or -1. */
int pidfile_read_starttime(pid_t pid, unsigned long long *out);
/* Writes "<pid> <pid> <starttime>\n" to path (through path.tmp and a rename); 0, or -1 with errno. */
int pidfile_write(const char *path, pid_t pid, unsigned long long starttime);

#endif
