/* state_lock: one vramd per state directory (the contract is in state_lock.h). */
#include "proc/state_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

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
    if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        *holder = e == EWOULDBLOCK ? read_holder(lfd) : 0;
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
