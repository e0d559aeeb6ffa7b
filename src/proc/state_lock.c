/* state_lock: one vramd per state directory (the contract is in state_lock.h). */
#include "proc/state_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define STATE_LOCK_DYING_MS 2000 /* how long a start waits for a dead holder's last threads */

/* The pid the holder wrote, 0 when none can be read. */
static pid_t read_holder(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end = NULL;
    long v = strtol(buf, &end, 10);
    return end != buf && v > 0 && v < (1L << 30) ? (pid_t)v : 0;
}

/* Is pid a live process (not gone, not a zombie whose threads are still letting go)? */
static bool holder_alive(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *end = strrchr(buf, ')');
    return end && end[1] == ' ' && end[2] != 'Z' && end[2] != 'X';
}

/* flock without waiting, but for up to STATE_LOCK_DYING_MS while the holder it names is dead
 * or dying: a vramd killed with SIGKILL releases its descriptors only once its last thread
 * exited, and a restart that did not wait for that (kill -9; vramd ...) is no second vramd. */
static int lock_or_wait_dying(int lfd, pid_t *holder)
{
    struct timespec step = {0, 10 * 1000 * 1000};
    for (int waited = 0;; waited += 10) {
        if (flock(lfd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        *holder = read_holder(lfd);
        if ((*holder > 0 && holder_alive(*holder)) || waited >= STATE_LOCK_DYING_MS) {
            errno = EWOULDBLOCK;
            return -1;
        }
        nanosleep(&step, NULL);
    }
}

int state_lock_take(const char *state_dir, int *fd, pid_t *holder, char *err, size_t errlen)
{
    char path[4096];
    *fd = -1;
    *holder = 0;
    snprintf(path, sizeof path, "%s/vramd.lock", state_dir);
    int lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (lock_or_wait_dying(lfd, holder) != 0) {
        int e = errno;
        if (e != EWOULDBLOCK)
            *holder = 0;
        if (e == EWOULDBLOCK && *holder > 0)
            snprintf(err, errlen,
                     "another vramd (pid %d) is running on state_dir %s: stop it first, or give this one "
                     "another state_dir", (int)*holder, state_dir);
        else if (e == EWOULDBLOCK)
            snprintf(err, errlen, "another vramd is running on state_dir %s (%s is locked)", state_dir, path);
        else
            snprintf(err, errlen, "cannot lock %s: %s", path, strerror(e));
        close(lfd);
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(lfd, 0) != 0 || pwrite(lfd, pid, (size_t)n, 0) != n) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        close(lfd);
        return -1;
    }
    *fd = lfd;
    return 0;
}
