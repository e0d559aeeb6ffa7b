/*
 * process_child: what a child is started with, and the child itself between fork and exec.
 *
 * Environment (process_env_build, in the parent): vramd's environ minus the variables
 * that are vramd's own (systemd's notify socket and socket activation) and minus those
 * the spec names, then the spec's values. Borrowed strings from environ come first; the
 * owned ones are the last process_env_owned_count() entries, freed by process_env_free.
 *
 * The child (process_child_exec): between fork and exec it calls only async-signal-safe
 * functions: the environment array is built in the parent, execvpe takes it. It joins its
 * cgroup leaf first (the parent opened the cgroup.procs files), then a process group of its
 * own, asks for PR_SET_PDEATHSIG(SIGKILL), resets every signal
 * disposition, keeps only fds 0, 1 and 2 (plus the CLOEXEC status pipe on fd 3), and
 * unblocks signals just before exec. A failed step writes a child_report_t on the status
 * pipe and _exits; EOF on that pipe means exec succeeded. process_child_failure turns a
 * report into the message process_spawn returns.
 */
#include "proc/process.h"
#include "proc/process_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

/* ---------------------------------------------------------------------------------------
 * The environment, built in the parent
 */

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

size_t process_env_owned_count(const config_kv_t *extra, size_t n_extra)
{
    size_t n = 0;
    for (size_t j = 0; j < n_extra; j++)
        n += extra[j].value != NULL;
    return n;
}

/* environ minus private variables and those named in extra, then extra's set values
 * (a NULL value only removes). The owned strings are the last process_env_owned_count(). */
char **process_env_build(const config_kv_t *extra, size_t n_extra)
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

void process_env_free(char **envp, size_t n_owned)
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

/* ---------------------------------------------------------------------------------------
 * The child, between fork and exec: async-signal-safe calls only.
 */

enum child_stage {
    STAGE_CGROUP = 1,
    STAGE_SETPGID,
    STAGE_PDEATHSIG,
    STAGE_STDIN,
    STAGE_FDS,
    STAGE_CHDIR,
    STAGE_EXEC,
};

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

_Noreturn void process_child_exec(const child_setup_t *s)
{
    int st = s->status_w;
    if (cgroup_child_join(s->cg_fds, s->n_cg_fds) != 0) /* first: nothing it starts escapes */
        child_report(st, STAGE_CGROUP);
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

void process_child_failure(const child_report_t *r, const process_spec_t *spec, char *err, size_t errlen)
{
    const char *what = "child setup failed";
    const char *detail = NULL;
    switch (r->stage) {
    case STAGE_CGROUP: what = "joining its cgroup failed"; detail = spec->cgroup_leaf; break;
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
