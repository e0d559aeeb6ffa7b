/*
 * process_guard: a tiny process that kills vramd's workers when vramd dies, however it dies.
 *
 * PR_SET_PDEATHSIG kills a worker's leader only: with cmd: [/bin/sh, -c, "python3 serve.py"]
 * (or bash start.sh) the shell dies with vramd and the server, its child in the same process
 * group, keeps its GPU memory until the next vramd starts. The guard closes that gap.
 *
 * process_guard_start (called by vramd at start, before any worker, before the listener,
 * the journal or any thread exists) forks twice: the guard is not vramd's child (vramd's
 * children are its workers, and it reaps whatever it is told about), sits in its own
 * session (a terminal's Ctrl-C or a kill of vramd's group does not reach it), ignores the
 * terminal signals, and keeps only stdin/stdout (/dev/null), stderr (the log) and, as fd 3,
 * the read end of a pipe whose write end only vramd holds (CLOEXEC: workers never inherit
 * it). It blocks reading the pipe. When vramd's process ends (SIGKILL, a crash, a watchdog
 * abort, or a clean exit 0), the kernel closes the write end, the read returns EOF, and the
 * guard SIGKILLs every worker process group that a pid file of *this* vramd names
 * (process_kill_owned: pidfile.c's stale-kill logic, restricted to files whose owner field
 * is this vramd's pid, so a vramd started after it is never touched), then exits. After a
 * drain no pid file is left, so it just exits.
 *
 * Then it kills and removes every leaf of vramd's cgroup subtree (proc/cgroup.h), when vramd
 * has one and the subtree is still the dead vramd's (the guard takes its owner lock first: a
 * vramd started since on the same state_dir holds it, and its own start sweep kills what the
 * dead one left; sweeping then would kill the new workers and remove the subtree under
 * them): a helper that left the worker's group (setsid, a daemonizing server, a container
 * under --cgroup-parent) dies too. The guard keeps its own copy of the tree (fork), as it was
 * when vramd started. Without a cgroup tree (subreaper or off mode) such a helper survives
 * vramd's SIGKILL (docs/operations.md).
 * Return convention: the pipe's write end (>= 0), or -1 with err.
 */
#include "proc/process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/pause_point.h"

#define GUARD_FD 3
#define GUARD_EXIT_WAIT_MS 5000 /* how long the guard waits for its dead vramd's files to close */

/* Descriptors: fd 3 = the pipe's read end, 0 and 1 = /dev/null, 2 kept (the log), the
 * rest closed. */
static void guard_descriptors(int rfd)
{
    if (rfd != GUARD_FD && dup2(rfd, GUARD_FD) < 0)
        _exit(1);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (rfd == 2)
            dup2(null, 2);
    }
    if (close_range(GUARD_FD + 1, ~0U, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (int fd = GUARD_FD + 1; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
            close(fd);
    }
}

/* Threads of pid's thread group still listed in /proc/PID/task (the leader included). */
static int task_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Until pid's process has released its files, at most GUARD_EXIT_WAIT_MS: gone, or a zombie
 * leader with no other thread left. A multi-threaded vramd's leader turns zombie as soon as
 * its own thread exits, while the other threads, which share its descriptor table (and the
 * flocks on it), may still be exiting: on a loaded host the guard then found the cgroup lock
 * still held and left the subtree unswept. The pipe's EOF can come first too: the kernel
 * closes a dying process's descriptors in number order, and the pipe may have a lower number
 * than the cgroup lock. */
static void wait_released(pid_t pid)
{
    struct timespec step = {0, 10 * 1000 * 1000};
    for (int waited = 0; waited < GUARD_EXIT_WAIT_MS; waited += 10) {
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return; /* gone */
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            return;
        buf[n] = '\0';
        const char *end = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold anything */
        if (end == NULL || end[1] != ' ')
            return;
        if ((end[2] == 'Z' || end[2] == 'X') && task_count(pid) <= 1)
            return;
        nanosleep(&step, NULL);
    }
}

static _Noreturn void guard_main(int rfd, const char *pid_dir, const cgroup_tree_t *cgroups, pid_t owner)
{
    static const int ignored[] = {SIGINT, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        signal(ignored[i], SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prctl(PR_SET_NAME, "vramd-guard", 0, 0, 0);
    guard_descriptors(rfd);
    char c;
    ssize_t n;
    do
        n = read(GUARD_FD, &c, 1);
    while (n > 0 || (n < 0 && errno == EINTR));
    int killed = process_kill_owned(pid_dir, owner);
    size_t cg_killed = 0, cg_removed = 0;
    /* what left the groups (setsid helpers, containers under --cgroup-parent), then the
     * subtree itself once no leaf is left in it */
    if (cgroups)
        wait_released(owner);
    bool owned = cgroups && cgroup_tree_lock_try(cgroups);
    if (cgroups && !owned)
        log_event(LOG_INFO, "guard_cgroup_left", "vramd_pid=%d lock=%s error=%s", (int)owner, cgroups->lock_path,
                  strerror(errno));
    if (owned)
        pause_point("guard_locked");
    if (owned && cgroup_sweep(cgroups, &cg_killed, &cg_removed) == 0)
        cgroup_tree_remove(cgroups);
    if (killed > 0 || cg_killed > 0)
        log_event(LOG_WARN, "guard_killed_workers", "count=%d cgroup_members=%zu cgroups_removed=%zu vramd_pid=%d",
                  killed, cg_killed, cg_removed, (int)owner);
    _exit(0);
}

int process_guard_start(const char *pid_dir, const cgroup_tree_t *cgroups, pid_t *guard_pid, char *err,
                        size_t errlen)
{
    int p[2], rep[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe2: %s", strerror(errno));
        return -1;
    }
    if (pipe2(rep, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe2: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    pid_t owner = getpid();
    pid_t mid = fork();
    if (mid == 0) {
        close(p[1]);
        close(rep[0]);
        setsid();
        pid_t g = fork();
        if (g == 0) {
            close(rep[1]);
            guard_main(p[0], pid_dir, cgroups, owner);
        }
        ssize_t w = write(rep[1], &g, sizeof g);
        _exit(w == (ssize_t)sizeof g && g > 0 ? 0 : 1);
    }
    int fork_errno = errno;
    close(p[0]);
    close(rep[1]);
    pid_t g = -1;
    ssize_t n = -1;
    if (mid > 0) {
        do
            n = read(rep[0], &g, sizeof g);
        while (n < 0 && errno == EINTR);
        while (waitpid(mid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    close(rep[0]);
    if (mid < 0 || n != (ssize_t)sizeof g || g <= 0) {
        snprintf(err, errlen, "fork: %s", strerror(mid < 0 ? fork_errno : EAGAIN));
        close(p[1]);
        return -1;
    }
    *guard_pid = g;
    return p[1];
}
