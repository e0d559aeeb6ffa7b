/*
 * process: spawning and reaping worker processes under libuv (see process.h for the contract).
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
 * Bounds: an output line is at most PROCESS_LINE_MAX bytes (longer ones are logged in
 * pieces); captured stdout at most PROCESS_CAPTURE_MAX bytes (the rest is dropped and
 * flagged, see process_stdout_truncated).
 *
 * Threading: all of this runs on one thread (the loop's). PR_SET_PDEATHSIG fires when the
 * *thread* that forked exits, so spawn only from a long-lived thread (vramd's main loop).
 * Writing stdin_data needs SIGPIPE ignored: process_spawn sets SIGPIPE to SIG_IGN if it is
 * still SIG_DFL (children get every disposition reset to default before exec).
 *
 * Return convention: 0 ok, -1 error with a message in err (process_kill_stale: count, or -1).
 */
#include "workers/process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "gpu/procfs.h"

#define PROCESS_LINE_MAX 8192
#define PROCESS_CAPTURE_MAX (64 * 1024)
#define PROCESS_DRAIN_MS 2000
#define PROCESS_READ_CHUNK 8192
#define PROCESS_REAP_MAX 4096 /* bound on one waitpid sweep */

extern char **environ;

typedef struct sigchld_watch {
    uv_signal_t sig;
    uv_loop_t *loop;
    list_t link;    /* on g_watches */
    size_t n_procs; /* process_t of this loop not finished yet (plus spawns in progress) */
} sigchld_watch_t;

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

/* Field 22 of /proc/PID/stat (process start time in clock ticks since boot). */
static int read_starttime(pid_t pid, unsigned long long *out)
{
    char path[64], data[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, data, sizeof data - 1);
    close(fd);
    if (n <= 0)
        return -1;
    data[n] = '\0';
    char *p = strrchr(data, ')'); /* comm may hold spaces and parens */
    if (!p)
        return -1;
    p++;
    /* After ')' come fields 3.. ; starttime is field 22, i.e. the 20th after ')'. */
    for (int field = 3; field < 22; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
        if (!*p)
            return -1;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || end == p)
        return -1;
    *out = v;
    return 0;
}

static int write_pidfile(const char *path, pid_t pid, unsigned long long starttime)
{
    char tmp[4096], line[96];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int len = snprintf(line, sizeof line, "%d %d %llu\n", (int)pid, (int)pid, starttime);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, line, (size_t)len);
    int saved = errno;
    if (close(fd) != 0 && w == len) {
        saved = errno;
        w = -1;
    }
    if (w != len || rename(tmp, path) != 0) {
        if (w == len)
            saved = errno;
        unlink(tmp);
        errno = saved ? saved : EIO;
        return -1;
    }
    return 0;
}

/* Variables a supervised worker never inherits from vramd: systemd's notify socket and
 * socket-activation fds are vramd's own (a worker writing to NOTIFY_SOCKET would speak
 * for vramd). */
static bool env_private(const char *kv)
{
    static const char *const names[] = {"NOTIFY_SOCKET=", "LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES=",
                                         "WATCHDOG_USEC=", "WATCHDOG_PID="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(kv, names[i], strlen(names[i])) == 0)
            return true;
    return false;
}

static size_t env_owned_count(const config_kv_t *extra, size_t n_extra)
{
    size_t n = 0;
    for (size_t j = 0; j < n_extra; j++)
        n += extra[j].value != NULL;
    return n;
}

/* environ minus private variables and those named in extra, then extra's set values
 * (a NULL value only removes). The owned strings are the last env_owned_count(). */
static char **build_env(const config_kv_t *extra, size_t n_extra)
{
    size_t n_base = 0;
    while (environ && environ[n_base])
        n_base++;
    char **envp = calloc(n_base + n_extra + 1, sizeof *envp);
    if (!envp)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < n_base; i++) {
        bool overridden = env_private(environ[i]);
        for (size_t j = 0; j < n_extra && !overridden; j++) {
            size_t kl = strlen(extra[j].key);
            overridden = strncmp(environ[i], extra[j].key, kl) == 0 && environ[i][kl] == '=';
        }
        if (!overridden)
            envp[n++] = environ[i]; /* borrowed: not freed */
    }
    size_t first_owned = n;
    for (size_t j = 0; j < n_extra; j++) {
        if (!extra[j].value)
            continue;
        size_t len = strlen(extra[j].key) + 1 + strlen(extra[j].value) + 1;
        char *kv = malloc(len);
        if (!kv) {
            for (size_t k = first_owned; k < n; k++)
                free(envp[k]);
            free(envp);
            return NULL;
        }
        snprintf(kv, len, "%s=%s", extra[j].key, extra[j].value);
        envp[n++] = kv;
    }
    envp[n] = NULL;
    return envp;
}

static void free_env(char **envp, size_t n_owned)
{
    if (!envp || envp == environ)
        return;
    size_t n = 0;
    while (envp[n])
        n++;
    for (size_t k = n - n_owned; k < n; k++)
        free(envp[k]);
    free(envp);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* ---------------------------------------------------------------------------------------
 * The child, between fork and exec: async-signal-safe calls only.
 */

typedef struct child_report {
    int stage;
    int err;
} child_report_t;

enum child_stage {
    STAGE_SETPGID = 1,
    STAGE_PDEATHSIG,
    STAGE_STDIN,
    STAGE_FDS,
    STAGE_CHDIR,
    STAGE_EXEC,
};

typedef struct child_setup {
    char *const *argv;
    char **envp;
    const char *cwd;
    pid_t parent;
    int in_r; /* -1: /dev/null */
    int out_w, err_w, status_w;
} child_setup_t;

static void child_report(int status_fd, int stage)
{
    child_report_t r = {stage, errno};
    ssize_t n;
    do
        n = write(status_fd, &r, sizeof r);
    while (n < 0 && errno == EINTR);
    _exit(127);
}

/* Close every fd >= from. */
static void child_close_from(int from)
{
    if (close_range((unsigned)from, ~0U, 0) == 0)
        return;
    int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        char dents[4096];
        long n;
        while ((n = syscall(SYS_getdents64, dfd, dents, sizeof dents)) > 0) {
            for (long off = 0; off < n;) {
                /* struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[] */
                unsigned short reclen;
                memcpy(&reclen, dents + off + 16, sizeof reclen);
                const char *name = dents + off + 19;
                int fd = 0;
                bool digits = *name != '\0';
                for (const char *c = name; *c; c++) {
                    if (*c < '0' || *c > '9') {
                        digits = false;
                        break;
                    }
                    fd = fd * 10 + (*c - '0');
                }
                if (digits && fd >= from && fd != dfd)
                    close(fd);
                off += reclen;
            }
        }
        close(dfd);
        return;
    }
    for (int fd = from; fd < 65536; fd++)
        close(fd);
}

static _Noreturn void child_exec(const child_setup_t *s)
{
    int st = s->status_w;
    if (setpgid(0, 0) != 0)
        child_report(st, STAGE_SETPGID);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        child_report(st, STAGE_PDEATHSIG);
    if (getppid() != s->parent)
        _exit(126); /* vramd died before prctl: nobody to report to */

    /* Signals blocked by the parent around fork stay blocked until just before exec. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL); /* EINVAL for libc-reserved ones: fine */

    int in_fd = s->in_r;
    if (in_fd < 0) {
        in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in_fd < 0)
            child_report(st, STAGE_STDIN);
    }
    /* Move everything above 2 first so the dup2s below never clobber a source. */
    int hi_in = fcntl(in_fd, F_DUPFD_CLOEXEC, 3);
    int hi_out = fcntl(s->out_w, F_DUPFD_CLOEXEC, 3);
    int hi_err = fcntl(s->err_w, F_DUPFD_CLOEXEC, 3);
    int hi_st = fcntl(st, F_DUPFD_CLOEXEC, 3);
    if (hi_st >= 0)
        st = hi_st;
    if (hi_in < 0 || hi_out < 0 || hi_err < 0 || hi_st < 0)
        child_report(st, STAGE_FDS);
    if (dup2(hi_in, 0) < 0 || dup2(hi_out, 1) < 0 || dup2(hi_err, 2) < 0)
        child_report(st, STAGE_FDS);
    if (st != 3) {
        if (dup3(st, 3, O_CLOEXEC) < 0)
            child_report(st, STAGE_FDS);
        st = 3;
    }
    child_close_from(4);

    if (s->cwd && chdir(s->cwd) != 0)
        child_report(st, STAGE_CHDIR);

    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(s->argv[0], s->argv, s->envp);
    child_report(st, STAGE_EXEC);
    _exit(127);
}

static void format_child_failure(const child_report_t *r, const process_spec_t *spec, char *err,
                                 size_t errlen)
{
    const char *what = "child setup failed";
    const char *detail = NULL;
    switch (r->stage) {
    case STAGE_SETPGID: what = "setpgid failed"; break;
    case STAGE_PDEATHSIG: what = "prctl(PR_SET_PDEATHSIG) failed"; break;
    case STAGE_STDIN: what = "open /dev/null failed"; break;
    case STAGE_FDS: what = "fd setup failed"; break;
    case STAGE_CHDIR: what = "chdir failed"; detail = spec->cwd; break;
    case STAGE_EXEC: what = "exec failed"; detail = spec->argv[0]; break;
    default: break;
    }
    if (detail)
        snprintf(err, errlen, "%s: %s (%s)", what, strerror(r->err), detail);
    else
        snprintf(err, errlen, "%s: %s", what, strerror(r->err));
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
 * Output pipes
 */

static void process_progress(process_t *p);
static void on_timer(uv_timer_t *t);

static void on_handle_closed(uv_handle_t *h)
{
    process_t *p = h->data;
    if (--p->handles_open > 0)
        return;
    /* Last handle closed: the safe point to run the exit callback and free. */
    sigchld_watch_t *w = p->watch;
    if (p->cb)
        p->cb(p, p->exit_status, p->term_signal, p->ctx);
    buf_free(&p->captured);
    free(p->log_name);
    free(p->pidfile);
    free(p->in_data);
    free(p);
    watch_release(w); /* after the callback: a respawn from it reuses the watcher */
}

static void stream_emit_line(process_t *p, output_stream_t *s)
{
    size_t len = s->line_len;
    if (len > 0 && s->line[len - 1] == '\r')
        len--;
    s->line[len] = '\0';
    log_event(LOG_INFO, "worker_output", "model=%s pid=%d stream=%s line=%s",
              p->log_name ? p->log_name : "", (int)p->pid, s->name, s->line);
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

static void stream_close(process_t *p, output_stream_t *s)
{
    if (!s->open)
        return;
    if (s->line_len > 0)
        stream_emit_line(p, s); /* partial last line */
    s->open = false;
    p->pipes_open--;
    uv_close((uv_handle_t *)&s->pipe, on_handle_closed);
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
    stream_close(p, s); /* EOF or read error */
    process_progress(p);
}

static void close_stdin(process_t *p)
{
    if (!p->in_open)
        return;
    p->in_open = false;
    p->pipes_open--;
    uv_close((uv_handle_t *)&p->in, on_handle_closed);
}

static void on_stdin_written(uv_write_t *req, int status)
{
    process_t *p = req->data;
    /* status < 0: EPIPE (a validator may exit without reading) or ECANCELED: ignored. */
    (void)status;
    close_stdin(p);
    process_progress(p);
}

/* ---------------------------------------------------------------------------------------
 * Exit, stop, drain
 */

/* Drive a process toward "finished" after any event. Never frees p (only close callbacks do). */
static void process_progress(process_t *p)
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
        uv_close((uv_handle_t *)&p->timer, on_handle_closed);
}

static void on_timer(uv_timer_t *t)
{
    process_t *p = t->data;
    if (!p->exited) { /* stop timeout */
        log_event(LOG_WARN, "worker_kill", "model=%s pid=%d reason=%s",
                  p->log_name ? p->log_name : "", (int)p->pid, "stop timeout");
        kill(-p->pid, SIGKILL);
        return;
    }
    /* Drain limit: something outside the group still holds the pipes. */
    stream_close(p, &p->out);
    stream_close(p, &p->err);
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
            kill(-p->pid, SIGKILL); /* the rest of the group, while the zombie pins the pgid */
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

static void start_output(process_t *p, output_stream_t *s, int fd, const char *name, bool capture)
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
        stream_close(p, s);
    }
}

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

int process_spawn(uv_loop_t *loop, const process_spec_t *spec, process_exit_cb cb, void *ctx,
                  process_t **out, char *err, size_t errlen)
{
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1};
    int status_pipe[2] = {-1, -1};
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
    p = calloc(1, sizeof *p);
    if (!p)
        goto oom;
    list_init(&p->link);
    p->loop = loop;
    p->cb = cb;
    p->ctx = ctx;
    p->exit_status = -1;
    buf_init(&p->captured, PROCESS_CAPTURE_MAX);
    p->log_name = dup_or_null(spec->log_name);
    p->pidfile = dup_or_null(spec->pidfile);
    if ((spec->log_name && !p->log_name) || (spec->pidfile && !p->pidfile))
        goto oom;
    if (spec->stdin_data) {
        p->in_len = spec->stdin_len;
        p->in_data = malloc(p->in_len ? p->in_len : 1);
        if (!p->in_data)
            goto oom;
        memcpy(p->in_data, spec->stdin_data, p->in_len);
        ignore_sigpipe_once();
    }
    envp = build_env(spec->env, spec->n_env);
    if (!envp)
        goto oom;

    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
        pipe2(status_pipe, O_CLOEXEC) != 0 ||
        (spec->stdin_data && pipe2(in_pipe, O_CLOEXEC) != 0)) {
        snprintf(err, errlen, "pipe2: %s", strerror(errno));
        goto fail;
    }
    /* The watcher exists before fork, so this child's SIGCHLD cannot be missed. */
    w = watch_acquire(loop, err, errlen);
    if (!w)
        goto fail;

    child_setup_t setup = {
        .argv = spec->argv,
        .envp = envp,
        .cwd = spec->cwd,
        .parent = getpid(),
        .in_r = in_pipe[0],
        .out_w = out_pipe[1],
        .err_w = err_pipe[1],
        .status_w = status_pipe[1],
    };
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0)
        child_exec(&setup);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close_fd(&out_pipe[1]);
    close_fd(&err_pipe[1]);
    close_fd(&in_pipe[0]);
    close_fd(&status_pipe[1]);
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(fork_errno));
        goto fail;
    }

    /* EOF = exec succeeded (the CLOEXEC write end vanished); a report = it failed. */
    child_report_t report;
    ssize_t n;
    do
        n = read(status_pipe[0], &report, sizeof report);
    while (n < 0 && errno == EINTR);
    close_fd(&status_pipe[0]);
    if (n != 0) {
        if (n == (ssize_t)sizeof report)
            format_child_failure(&report, spec, err, errlen);
        else
            snprintf(err, errlen, "child setup failed (status pipe: %s)",
                     n < 0 ? strerror(errno) : "short read");
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        goto fail;
    }

    p->pid = pid;
    if (p->pidfile) {
        unsigned long long starttime = 0;
        if (read_starttime(pid, &starttime) != 0 || write_pidfile(p->pidfile, pid, starttime) != 0) {
            snprintf(err, errlen, "pid file %s: %s", p->pidfile, strerror(errno));
            kill(-pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
            }
            goto fail;
        }
    }

    /* Tracked from here on; nothing below fails. */
    p->watch = w;
    w = NULL;
    list_insert_tail(&g_procs, &p->link);
    g_live++;
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    p->handles_open++;
    start_output(p, &p->out, out_pipe[0], "stdout", spec->capture_stdout != 0);
    start_output(p, &p->err, err_pipe[0], "stderr", false);
    out_pipe[0] = err_pipe[0] = -1;
    if (spec->stdin_data) {
        start_stdin(p, in_pipe[1]);
        in_pipe[1] = -1;
    }
    watch_update_ref(p->watch);
    if (out)
        *out = p;
    p = NULL;
    ret = 0;
    goto done;

oom:
    snprintf(err, errlen, "out of memory");
fail:
    if (p) {
        buf_free(&p->captured);
        free(p->log_name);
        free(p->pidfile);
        free(p->in_data);
        free(p);
    }
    if (w)
        watch_release(w);
done:
    if (envp != environ)
        free_env(envp, env_owned_count(spec->env, spec->n_env));
    close_fd(&out_pipe[0]);
    close_fd(&out_pipe[1]);
    close_fd(&err_pipe[0]);
    close_fd(&err_pipe[1]);
    close_fd(&in_pipe[0]);
    close_fd(&in_pipe[1]);
    close_fd(&status_pipe[0]);
    close_fd(&status_pipe[1]);
    return ret;
}

pid_t process_pid(const process_t *p)
{
    return p->pid;
}

void process_signal(process_t *p, int sig)
{
    if (!p->exited)
        kill(-p->pid, sig);
}

void process_stop(process_t *p, uint64_t timeout_ms)
{
    if (p->exited)
        return; /* its group already got SIGKILL at the reap */
    kill(-p->pid, SIGTERM);
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

/* ---------------------------------------------------------------------------------------
 * Stale pid files
 */

static int mkdir_p(const char *dir)
{
    char path[4096];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        path[i] = saved;
    }
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls > lx && strcmp(s + ls - lx, suffix) == 0;
}

/* The group's leader died (PR_SET_PDEATHSIG killed it with vramd) but processes it started
 * (a wrapper's child, say) may live on in its process group. Kill the members of pgid that
 * are orphans of it: started no earlier than the leader, not a leader themselves (a live
 * process with pid == pgid is a new group that reused the number), and whose parent is
 * outside the group (orphans are re-parented to init or a subreaper). Returns 1 when
 * something was killed. */
static int kill_orphaned_group(int pgid, unsigned long long leader_start, const char *path)
{
    DIR *proc = opendir("/proc");
    if (!proc)
        return 0;
    int killed = 0;
    struct dirent *de;
    while ((de = readdir(proc)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        int pid = atoi(de->d_name);
        char fn[64], data[1024];
        snprintf(fn, sizeof fn, "/proc/%d/stat", pid);
        int fd = open(fn, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, data, sizeof data - 1);
        close(fd);
        if (n <= 0)
            continue;
        data[n] = '\0';
        char *rp = strrchr(data, ')');
        char state;
        int ppid, pgrp;
        if (!rp || sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3 || pgrp != pgid || pid == pgid)
            continue;
        unsigned long long st = 0;
        if (read_starttime(pid, &st) != 0 || st < leader_start)
            continue;
        /* an orphan of our dead worker has been re-parented away from the group */
        bool parent_in_group = ppid > 1 && procfs_pgid(ppid) == pgid;
        if (parent_in_group)
            continue;
        kill(-pgid, SIGKILL);
        kill(pid, SIGKILL);
        log_event(LOG_WARN, "stale_worker_killed", "pid=%d pgid=%d pidfile=%s reason=%s", pid, pgid, path,
                  "leader gone, group member left");
        killed = 1;
    }
    closedir(proc);
    return killed;
}

/* Kill the process a pid file names if it is still the same process; 1 if killed. */
static int kill_if_same(const char *path)
{
    char data[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, data, sizeof data - 1);
    close(fd);
    if (n <= 0)
        return 0;
    data[n] = '\0';
    int pid = 0, pgid = 0;
    unsigned long long starttime = 0, now = 0;
    if (sscanf(data, "%d %d %llu", &pid, &pgid, &starttime) != 3 || pid <= 1 || pgid <= 1)
        return 0;
    if (pid == getpid() || pgid == getpgrp())
        return 0; /* never ourselves */
    if (read_starttime(pid, &now) != 0 || now != starttime)
        return kill_orphaned_group(pgid, starttime, path); /* the leader is gone: its group may not be */
    kill(-pgid, SIGKILL);
    kill(pid, SIGKILL);
    log_event(LOG_WARN, "stale_worker_killed", "pid=%d pgid=%d pidfile=%s", pid, pgid, path);
    return 1;
}

int process_kill_stale(const char *pid_dir)
{
    if (mkdir_p(pid_dir) != 0) {
        log_event(LOG_WARN, "pid_dir_error", "dir=%s error=%s", pid_dir, strerror(errno));
        return -1;
    }
    DIR *d = opendir(pid_dir);
    if (!d) {
        log_event(LOG_WARN, "pid_dir_error", "dir=%s error=%s", pid_dir, strerror(errno));
        return -1;
    }
    int killed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!ends_with(de->d_name, ".pid"))
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", pid_dir, de->d_name) >= (int)sizeof path)
            continue;
        killed += kill_if_same(path);
        unlink(path);
    }
    closedir(d);
    return killed;
}
