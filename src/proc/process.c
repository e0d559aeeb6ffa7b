/*
 * process: spawning and reaping worker processes under libuv (see process.h for the contract).
 * The other rooms of this module: process_child.c (environment, the child between fork and
 * exec), pidfile.c (pid files, stale groups); what they
 * share is in process_int.h.
 *
 * Spawning is fork/exec done here (not uv_spawn) because the child must call setpgid and
 * prctl(PR_SET_PDEATHSIG) before exec. Between fork and exec the child calls only
 * async-signal-safe functions: the environment array is built in the parent, execvpe takes
 * it. Child setup failures (chdir, exec, ...) travel back over a CLOEXEC "exec status" pipe:
 * EOF on it means exec succeeded, a child_report_t means it failed; process_spawn reads it
 * synchronously and so reports "exec failed: No such file or directory" itself.
 *
 * Life of a process_t (one state per flag, in this order):
 *   spawned   tracked on g_procs, pipes being read, SIGCHLD watcher of its loop held;
 *   exited    reaped (removed from g_procs; the rest of its group got SIGKILL just before
 *             the reap, while the zombie leader still pinned the pgid so it could not be
 *             reused); pid file removed; output pipes still draining (at most
 *             PROCESS_DRAIN_MS, then closed by force);
 *   finished  every uv handle it owns is closed: the exit callback runs, then it is freed.
 * The process_t is freed only from a uv close callback (the last of its handles), never
 * from a callback that may still touch it.
 *
 * Reaping: one uv_signal_t for SIGCHLD per loop (sigchld_watch_t), created at the first
 * spawn on that loop, closed when that loop's last process has finished (so uv_loop_close
 * succeeds). It is unref'd: the output pipes keep the loop alive. It is ref'd only while a
 * child of its loop has closed both output pipes but not exited yet, so uv_run never
 * returns before an exit callback is due. The handler loops waitid(WNOWAIT) + waitpid(pid)
 * over every exited child; untracked ones are simply reaped.
 *
 * Bounds: one waitpid sweep reaps at most PROCESS_REAP_MAX children; output bounds are with
 * the output streams below.
 *
 * Threading: all of this runs on one thread (the loop's). PR_SET_PDEATHSIG fires when the
 * *thread* that forked exits, so spawn only from a long-lived thread (vramd's main loop).
 * Writing stdin_data needs SIGPIPE ignored: process_spawn sets SIGPIPE to SIG_IGN if it is
 * still SIG_DFL (children get every disposition reset to default before exec).
 *
 * Return convention: 0 ok, -1 error with a message in err (process_kill_stale, in pidfile.c:
 * count, or -1).
 */
#include "proc/process.h"
#include "proc/process_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"

#define PROCESS_DRAIN_MS 2000
#define PROCESS_REAP_MAX 4096 /* bound on one waitpid sweep */

extern char **environ;

struct sigchld_watch {
    uv_signal_t sig;
    uv_loop_t *loop;
    list_t link;    /* on g_watches */
    size_t n_procs; /* process_t of this loop not finished yet (plus spawns in progress) */
};

static list_t g_procs = {&g_procs, &g_procs};
static list_t g_watches = {&g_watches, &g_watches};
static size_t g_live;

/* ---------------------------------------------------------------------------------------
 * Small helpers
 */

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void ignore_sigpipe_once(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO)) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGPIPE, &ign, NULL);
    }
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* ---------------------------------------------------------------------------------------
 * SIGCHLD watchers, one per loop
 */

static void reap_children(void);

static void on_sigchld(uv_signal_t *h, int signum)
{
    (void)h;
    (void)signum;
    reap_children();
}

static void on_watch_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Take a reference on the loop's watcher, creating and starting it if needed. */
static sigchld_watch_t *watch_acquire(uv_loop_t *loop, char *err, size_t errlen)
{
    list_foreach(it, &g_watches) {
        sigchld_watch_t *w = list_entry(it, sigchld_watch_t, link);
        if (w->loop == loop) {
            w->n_procs++;
            return w;
        }
    }
    sigchld_watch_t *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int rc = uv_signal_init(loop, &w->sig);
    if (rc != 0) {
        snprintf(err, errlen, "uv_signal_init: %s", uv_strerror(rc));
        free(w);
        return NULL;
    }
    w->sig.data = w;
    rc = uv_signal_start(&w->sig, on_sigchld, SIGCHLD);
    if (rc != 0) {
        snprintf(err, errlen, "uv_signal_start(SIGCHLD): %s", uv_strerror(rc));
        uv_close((uv_handle_t *)&w->sig, on_watch_closed);
        return NULL;
    }
    uv_unref((uv_handle_t *)&w->sig);
    w->loop = loop;
    w->n_procs = 1;
    list_insert_tail(&g_watches, &w->link);
    /* Children that exited while no watcher existed were not signalled to anyone. */
    reap_children();
    return w;
}

static void watch_release(sigchld_watch_t *w)
{
    if (--w->n_procs > 0)
        return;
    list_remove(&w->link);
    uv_close((uv_handle_t *)&w->sig, on_watch_closed);
}

/* Ref the watcher only while one of its children has no open output pipe left (nothing
 * else would keep uv_run going until that child's SIGCHLD). */
static void watch_update_ref(sigchld_watch_t *w)
{
    bool needed = false;
    list_foreach(it, &g_procs) {
        process_t *p = list_entry(it, process_t, link);
        if (p->watch == w && !p->out.open && !p->err.open) {
            needed = true;
            break;
        }
    }
    if (needed)
        uv_ref((uv_handle_t *)&w->sig);
    else
        uv_unref((uv_handle_t *)&w->sig);
}

/* ---------------------------------------------------------------------------------------
 * Exit, stop, drain
 */

static void on_timer(uv_timer_t *t);

/* Signal p's group and every member of its cgroup leaf. */
static void signal_all(process_t *p, int sig)
{
    kill(-p->pid, sig);
    if (p->cg)
        cgroup_leaf_signal(p->cg, p->cg_leaf, sig, p->pid); /* its group got it above */
}

void process_handle_closed(uv_handle_t *h)
{
    process_t *p = h->data;
    if (--p->handles_open > 0)
        return;
    /* Last handle closed: the safe point to run the exit callback and free. */
    sigchld_watch_t *w = p->watch;
    if (p->cb)
        p->cb(p, p->exit_status, p->term_signal, p->ctx);
    if (!p->cg_kept)
        process_leaf_finished(p->loop, p->cg, p->cg_leaf);
    buf_free(&p->captured);
    free(p->log_name);
    free(p->pidfile);
    free(p->in_data);
    free(p->cg_leaf);
    free(p);
    watch_release(w); /* after the callback: a respawn from it reuses the watcher */
}

static void close_stdin(process_t *p)
{
    if (!p->in_open)
        return;
    p->in_open = false;
    p->pipes_open--;
    uv_close((uv_handle_t *)&p->in, process_handle_closed);
}

static void on_stdin_written(uv_write_t *req, int status)
{
    process_t *p = req->data;
    /* status < 0: EPIPE (a validator may exit without reading) or ECANCELED: ignored. */
    (void)status;
    close_stdin(p);
    process_progress(p);
}

/* Drive a process toward "finished" after any event. Never frees p (only close callbacks do). */
void process_progress(process_t *p)
{
    if (!p->exited) {
        watch_update_ref(p->watch);
        return;
    }
    if (p->pipes_open > 0) {
        if (!p->draining) {
            p->draining = true;
            uv_timer_stop(&p->timer);
            uv_timer_start(&p->timer, on_timer, PROCESS_DRAIN_MS, 0);
        }
        return;
    }
    if (!uv_is_closing((uv_handle_t *)&p->timer))
        uv_close((uv_handle_t *)&p->timer, process_handle_closed);
}

static void on_timer(uv_timer_t *t)
{
    process_t *p = t->data;
    if (!p->exited) { /* stop timeout */
        log_event(LOG_WARN, "worker_kill", "model=%s pid=%d reason=%s",
                  p->log_name ? p->log_name : "", (int)p->pid, "stop timeout");
        signal_all(p, SIGKILL);
        return;
    }
    /* Drain limit: something outside the group still holds the pipes. */
    process_output_close(p, &p->out);
    process_output_close(p, &p->err);
    close_stdin(p);
    process_progress(p);
}

static void process_on_exit(process_t *p, int status)
{
    p->exited = true;
    list_remove(&p->link);
    g_live--;
    if (WIFEXITED(status)) {
        p->exit_status = WEXITSTATUS(status);
        p->term_signal = 0;
    } else if (WIFSIGNALED(status)) {
        p->exit_status = -1;
        p->term_signal = WTERMSIG(status);
    }
    if (p->pidfile)
        unlink(p->pidfile);
    uv_timer_stop(&p->timer);
    watch_update_ref(p->watch);
    process_progress(p);
}

static process_t *find_tracked(pid_t pid)
{
    list_foreach(it, &g_procs) {
        process_t *p = list_entry(it, process_t, link);
        if (p->pid == pid)
            return p;
    }
    return NULL;
}

static void reap_children(void)
{
    for (int i = 0; i < PROCESS_REAP_MAX; i++) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
            return;
        pid_t pid = si.si_pid;
        process_t *p = find_tracked(pid);
        if (p)
            signal_all(p, SIGKILL); /* the rest of the group (the zombie pins the pgid) and of its leaf */
        int status = 0;
        pid_t r;
        do
            r = waitpid(pid, &status, WNOHANG);
        while (r < 0 && errno == EINTR);
        if (r == pid && p)
            process_on_exit(p, status);
    }
}

/* ---------------------------------------------------------------------------------------
 * Public API
 */

static void start_stdin(process_t *p, int fd)
{
    uv_pipe_init(p->loop, &p->in, 0);
    p->in.data = p;
    p->in_open = true;
    p->pipes_open++;
    p->handles_open++;
    int rc = uv_pipe_open(&p->in, fd);
    if (rc != 0)
        close(fd);
    if (rc == 0 && p->in_len > 0) {
        uv_buf_t b = uv_buf_init(p->in_data, (unsigned)p->in_len);
        p->in_req.data = p;
        rc = uv_write(&p->in_req, (uv_stream_t *)&p->in, &b, 1, on_stdin_written);
        if (rc == 0)
            return;
    }
    close_stdin(p); /* nothing to write, or the write could not start */
}

/* The descriptors process_spawn opens: [0] read end, [1] write end, -1 when closed. */
typedef struct spawn_fds {
    int out[2], err[2], in[2], status[2];
} spawn_fds_t;

static void spawn_fds_close(spawn_fds_t *fds)
{
    close_fd(&fds->out[0]);
    close_fd(&fds->out[1]);
    close_fd(&fds->err[0]);
    close_fd(&fds->err[1]);
    close_fd(&fds->in[0]);
    close_fd(&fds->in[1]);
    close_fd(&fds->status[0]);
    close_fd(&fds->status[1]);
}

/* Frees a process_t that never became tracked (no uv handle of it was initialised). */
static void process_free_untracked(process_t *p)
{
    free(p->cg_leaf);
    buf_free(&p->captured);
    free(p->log_name);
    free(p->pidfile);
    free(p->in_data);
    free(p);
}

/* A process_t for spec, not tracked yet; NULL when out of memory. */
static process_t *process_new(uv_loop_t *loop, const process_spec_t *spec, process_exit_cb cb, void *ctx)
{
    process_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    list_init(&p->link);
    p->loop = loop;
    p->cb = cb;
    p->ctx = ctx;
    p->exit_status = -1;
    buf_init(&p->captured, PROCESS_CAPTURE_MAX);
    p->log_name = dup_or_null(spec->log_name);
    p->pidfile = dup_or_null(spec->pidfile);
    if (cgroup_tree_active(spec->cgroups) && spec->cgroup_leaf) {
        p->cg = spec->cgroups;
        p->cg_leaf = strdup(spec->cgroup_leaf);
    }
    if ((spec->log_name && !p->log_name) || (spec->pidfile && !p->pidfile) || (p->cg && !p->cg_leaf)) {
        process_free_untracked(p);
        return NULL;
    }
    if (spec->stdin_data) {
        p->in_len = spec->stdin_len;
        p->in_data = malloc(p->in_len ? p->in_len : 1);
        if (!p->in_data) {
            process_free_untracked(p);
            return NULL;
        }
        memcpy(p->in_data, spec->stdin_data, p->in_len);
        ignore_sigpipe_once();
    }
    return p;
}

/* Forks the child (which never returns: it execs or reports and exits) with every signal
 * blocked around fork, then closes the parent's copies of the child's pipe ends. Returns
 * the child's pid, or -1 with err. */
static pid_t spawn_fork(const process_spec_t *spec, char **envp, spawn_fds_t *fds, char *err, size_t errlen)
{
    int cg_fds[CGROUP_JOIN_MAX];
    size_t n_cg = 0;
    if (spec->cgroups && spec->cgroup_leaf &&
        cgroup_leaf_open(spec->cgroups, spec->cgroup_leaf, cg_fds, &n_cg, err, errlen) != 0) {
        close_fd(&fds->out[1]);
        close_fd(&fds->err[1]);
        close_fd(&fds->in[0]);
        close_fd(&fds->status[1]);
        return -1;
    }
    child_setup_t setup = {
        .argv = spec->argv,
        .envp = envp,
        .cwd = spec->cwd,
        .parent = getpid(),
        .in_r = fds->in[0],
        .out_w = fds->out[1],
        .err_w = fds->err[1],
        .status_w = fds->status[1],
        .cg_fds = cg_fds,
        .n_cg_fds = n_cg,
    };
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0)
        process_child_exec(&setup);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (size_t i = 0; i < n_cg; i++)
        close(cg_fds[i]);
    close_fd(&fds->out[1]);
    close_fd(&fds->err[1]);
    close_fd(&fds->in[0]);
    close_fd(&fds->status[1]);
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(fork_errno));
        return -1;
    }
    return pid;
}

/* Reads the status pipe. EOF = exec succeeded (the CLOEXEC write end vanished): 0. A
 * report = it failed: the child is killed and reaped, and -1 with err. */
static int spawn_await_exec(pid_t pid, const process_spec_t *spec, spawn_fds_t *fds, char *err, size_t errlen)
{
    child_report_t report;
    ssize_t n;
    do
        n = read(fds->status[0], &report, sizeof report);
    while (n < 0 && errno == EINTR);
    close_fd(&fds->status[0]);
    if (n == 0)
        return 0;
    if (n == (ssize_t)sizeof report)
        process_child_failure(&report, spec, err, errlen);
    else
        snprintf(err, errlen, "child setup failed (status pipe: %s)",
                 n < 0 ? strerror(errno) : "short read");
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return -1;
}

/* Writes p's pid file. On failure the child's group is killed and the child reaped: -1
 * with err. */
static int spawn_write_pidfile(const process_t *p, char *err, size_t errlen)
{
    pid_t pid = p->pid;
    unsigned long long starttime = 0;
    if (pidfile_read_starttime(pid, &starttime) != 0 || pidfile_write(p->pidfile, pid, starttime) != 0) {
        snprintf(err, errlen, "pid file %s: %s", p->pidfile, strerror(errno));
        kill(-pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        return -1;
    }
    return 0;
}

/* Tracks a started child: on g_procs, its timer and pipes handed to libuv (the fds taken
 * are set to -1). Nothing here fails. */
static void spawn_track(process_t *p, sigchld_watch_t *w, const process_spec_t *spec, spawn_fds_t *fds)
{
    p->watch = w;
    list_insert_tail(&g_procs, &p->link);
    g_live++;
    uv_timer_init(p->loop, &p->timer);
    p->timer.data = p;
    p->handles_open++;
    process_output_start(p, &p->out, fds->out[0], "stdout", spec->capture_stdout != 0);
    process_output_start(p, &p->err, fds->err[0], "stderr", false);
    fds->out[0] = fds->err[0] = -1;
    if (spec->stdin_data) {
        start_stdin(p, fds->in[1]);
        fds->in[1] = -1;
    }
    watch_update_ref(p->watch);
}

int process_spawn(uv_loop_t *loop, const process_spec_t *spec, process_exit_cb cb, void *ctx,
                  process_t **out, char *err, size_t errlen)
{
    spawn_fds_t fds = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    char **envp = NULL;
    process_t *p = NULL;
    sigchld_watch_t *w = NULL;
    int ret = -1;

    if (out)
        *out = NULL;
    if (!spec || !spec->argv || !spec->argv[0] || !spec->argv[0][0]) {
        snprintf(err, errlen, "empty argv");
        return -1;
    }
    if (spec->stdin_len > UINT32_MAX) {
        snprintf(err, errlen, "stdin_data too large");
        return -1;
    }
    p = process_new(loop, spec, cb, ctx);
    if (!p)
        goto oom;
    envp = process_env_build(spec->env, spec->n_env);
    if (!envp)
        goto oom;

    if (pipe2(fds.out, O_CLOEXEC) != 0 || pipe2(fds.err, O_CLOEXEC) != 0 || pipe2(fds.status, O_CLOEXEC) != 0 ||
        (spec->stdin_data && pipe2(fds.in, O_CLOEXEC) != 0)) {
        snprintf(err, errlen, "pipe2: %s", strerror(errno));
        goto fail;
    }
    /* The watcher exists before fork, so this child's SIGCHLD cannot be missed. */
    w = watch_acquire(loop, err, errlen);
    if (!w)
        goto fail;
    pid_t pid = spawn_fork(spec, envp, &fds, err, errlen);
    if (pid < 0 || spawn_await_exec(pid, spec, &fds, err, errlen) != 0)
        goto fail;
    p->pid = pid;
    if (p->pidfile && spawn_write_pidfile(p, err, errlen) != 0)
        goto fail;

    /* Tracked from here on; nothing below fails. */
    spawn_track(p, w, spec, &fds);
    w = NULL;
    if (out)
        *out = p;
    p = NULL;
    ret = 0;
    goto done;

oom:
    snprintf(err, errlen, "out of memory");
fail:
    if (p && p->cg)
        process_leaf_finished(loop, p->cg, p->cg_leaf); /* made for a child that never ran */
    if (p)
        process_free_untracked(p);
    if (w)
        watch_release(w);
done:
    if (envp != environ)
        process_env_free(envp, process_env_owned_count(spec->env, spec->n_env));
    spawn_fds_close(&fds);
    return ret;
}

int process_reap_always(uv_loop_t *loop, char *err, size_t errlen)
{
    return watch_acquire(loop, err, errlen) ? 0 : -1; /* a reference never released */
}

pid_t process_pid(const process_t *p)
{
    return p->pid;
}

void process_signal(process_t *p, int sig)
{
    if (!p->exited)
        signal_all(p, sig);
}

void process_stop(process_t *p, uint64_t timeout_ms)
{
    if (p->exited)
        return; /* its group already got SIGKILL at the reap */
    signal_all(p, SIGTERM);
    if (!p->stopping) {
        p->stopping = true;
        uv_timer_start(&p->timer, on_timer, timeout_ms, 0);
    }
}

const char *process_stdout(const process_t *p, size_t *len)
{
    if (len)
        *len = p->captured.len;
    return p->captured.data ? p->captured.data : "";
}

int process_stdout_truncated(const process_t *p)
{
    return p->captured_truncated ? 1 : 0;
}

size_t process_count(void)
{
    return g_live;
}

/* ---- output streams (stdout and stderr of a child) ---------------------------------------
 * process_output: a child's stdout and stderr pipes. Each line is logged as one JSON event
 * "worker_output" (model, pid, stream); or, for a capture_stdout child, stdout is kept in
 * process_t.captured instead.
 *
 * Bounds: an output line is at most PROCESS_LINE_MAX bytes (longer ones are logged in
 * pieces, and the '\n' that ends a line cut at the limit does not log an empty line);
 * captured stdout at most PROCESS_CAPTURE_MAX bytes (the rest is dropped and flagged, see
 * process_stdout_truncated). A trailing '\r' is dropped from each logged line, and a partial
 * last line is logged when the pipe closes.
 *
 * Invariants: a stream is read into its own fixed buffers (no allocation per read but the
 * capture buffer's); EOF or a read error closes the stream and then lets process.c
 * (process_progress) decide what comes next. A stream's pipe counts in pipes_open and
 * handles_open from process_output_start until process_output_close/its close callback.
 */

static process_line_hook_fn g_line_hook;
static void *g_line_hook_ctx;

void process_set_line_hook(process_line_hook_fn fn, void *ctx)
{
    g_line_hook = fn;
    g_line_hook_ctx = ctx;
}

static void stream_emit_line(process_t *p, output_stream_t *s)
{
    size_t len = s->line_len;
    if (len > 0 && s->line[len - 1] == '\r')
        len--;
    s->line[len] = '\0';
    log_event(LOG_INFO, "worker_output", "model=%s pid=%d stream=%s line=%s",
              p->log_name ? p->log_name : "", (int)p->pid, s->name, s->line);
    if (g_line_hook && p->log_name)
        g_line_hook(g_line_hook_ctx, p->log_name, p->pid, s->name, s->line, len);
    s->line_len = 0;
}

static void stream_log_bytes(process_t *p, output_stream_t *s, const char *data, size_t n)
{
    while (n > 0) {
        size_t room = PROCESS_LINE_MAX - s->line_len;
        const char *nl = memchr(data, '\n', n < room ? n : room);
        if (nl) {
            size_t k = (size_t)(nl - data);
            memcpy(s->line + s->line_len, data, k);
            s->line_len += k;
            if (k > 0 || !s->split_pending)
                stream_emit_line(p, s);
            s->split_pending = false;
            data += k + 1;
            n -= k + 1;
        } else if (n >= room) {
            memcpy(s->line + s->line_len, data, room);
            s->line_len += room;
            stream_emit_line(p, s);
            s->split_pending = true;
            data += room;
            n -= room;
        } else {
            memcpy(s->line + s->line_len, data, n);
            s->line_len += n;
            s->split_pending = false;
            n = 0;
        }
    }
}

static void stream_capture_bytes(process_t *p, const char *data, size_t n)
{
    size_t room = PROCESS_CAPTURE_MAX - p->captured.len;
    if (n > room) {
        p->captured_truncated = true;
        n = room;
    }
    if (n > 0 && buf_append(&p->captured, data, n) != 0)
        p->captured_truncated = true;
}

void process_output_close(process_t *p, output_stream_t *s)
{
    if (!s->open)
        return;
    if (s->line_len > 0)
        stream_emit_line(p, s); /* partial last line */
    s->open = false;
    p->pipes_open--;
    uv_close((uv_handle_t *)&s->pipe, process_handle_closed);
}

static output_stream_t *stream_of(process_t *p, const uv_handle_t *h)
{
    return h == (const uv_handle_t *)&p->out.pipe ? &p->out : &p->err;
}

static void on_output_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    output_stream_t *s = stream_of(h->data, h);
    *b = uv_buf_init(s->readbuf, sizeof s->readbuf);
}

static void on_output_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    process_t *p = st->data;
    output_stream_t *s = stream_of(p, (uv_handle_t *)st);
    if (n > 0) {
        if (s->capture)
            stream_capture_bytes(p, b->base, (size_t)n);
        else
            stream_log_bytes(p, s, b->base, (size_t)n);
        return;
    }
    if (n == 0)
        return; /* EAGAIN */
    process_output_close(p, s); /* EOF or read error */
    process_progress(p);
}

void process_output_start(process_t *p, output_stream_t *s, int fd, const char *name, bool capture)
{
    s->name = name;
    s->capture = capture;
    uv_pipe_init(p->loop, &s->pipe, 0);
    s->pipe.data = p;
    s->open = true;
    p->pipes_open++;
    p->handles_open++;
    int rc = uv_pipe_open(&s->pipe, fd);
    if (rc != 0)
        close(fd); /* not taken by the handle */
    else
        rc = uv_read_start((uv_stream_t *)&s->pipe, on_output_alloc, on_output_read);
    if (rc != 0) {
        log_event(LOG_WARN, "worker_output_lost", "model=%s pid=%d stream=%s error=%s",
                  p->log_name ? p->log_name : "", (int)p->pid, name, uv_strerror(rc));
        process_output_close(p, s);
    }
}

