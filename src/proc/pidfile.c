/*
 * pidfile: pid files of workers, and killing what a previous vramd left behind.
 *
 * A pid file holds "<pid> <pgid> <starttime> <owner>\n" (the worker leads its own group, so
 * pgid == pid; starttime is field 22 of /proc/PID/stat; owner is the pid of the vramd that
 * started it). It is written through "<path>.tmp" and a rename, so a reader never sees half
 * a line; process.c writes it at spawn and removes it at exit. (Files of older vramds have
 * no owner field: the stale kill reads the first three fields only.)
 *
 * process_kill_stale(dir) creates dir if needed, then for each "*.pid" file in it: when
 * the named process still has the recorded starttime it SIGKILLs the whole group (a pid
 * reused by another process is never hit, nor vramd's own pid or group); when the leader
 * is gone it kills only members of the group that are its orphans (see
 * kill_orphaned_group). Every pid file it reads is removed.
 *
 * process_kill_owned(dir, owner) does the same kills for the files whose owner field is
 * owner, and removes none: the guard (process_guard.c) calls it when its vramd has died,
 * and must never touch the workers of a vramd started after it (they have another owner).
 */
#include "proc/process.h"
#include "proc/process_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/log.h"
#include "gpu/procfs.h"

/* Field 22 of /proc/PID/stat (process start time in clock ticks since boot). */
int pidfile_read_starttime(pid_t pid, unsigned long long *out)
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

int pidfile_write(const char *path, pid_t pid, unsigned long long starttime)
{
    char tmp[4096], line[96];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int len = snprintf(line, sizeof line, "%d %d %llu %d\n", (int)pid, (int)pid, starttime, (int)getpid());
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
static int kill_orphaned_group(int pgid, unsigned long long leader_start, const char *path, const char *event)
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
        if (pidfile_read_starttime(pid, &st) != 0 || st < leader_start)
            continue;
        /* an orphan of our dead worker has been re-parented away from the group */
        bool parent_in_group = ppid > 1 && procfs_pgid(ppid) == pgid;
        if (parent_in_group)
            continue;
        kill(-pgid, SIGKILL);
        kill(pid, SIGKILL);
        log_event(LOG_WARN, event, "pid=%d pgid=%d pidfile=%s reason=%s", pid, pgid, path,
                  "leader gone, group member left");
        killed = 1;
    }
    closedir(proc);
    return killed;
}

/* Which pid files a sweep acts on, and how it reports a kill. */
typedef struct sweep {
    pid_t owner;       /* 0: every file; else only files whose owner field is this pid */
    bool unlink_files; /* remove each file read */
    const char *event; /* log event of a kill */
} sweep_t;

/* Kill the process a pid file names if it is still the same process; 1 if killed. */
static int kill_if_same(const char *path, const sweep_t *sw)
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
    int pid = 0, pgid = 0, owner = 0;
    unsigned long long starttime = 0, now = 0;
    int fields = sscanf(data, "%d %d %llu %d", &pid, &pgid, &starttime, &owner);
    if (fields < 3 || pid <= 1 || pgid <= 1)
        return 0;
    if (sw->owner > 0 && (fields < 4 || owner != (int)sw->owner))
        return 0; /* another vramd's worker */
    if (pid == getpid() || pgid == getpgrp())
        return 0; /* never ourselves */
    if (pidfile_read_starttime(pid, &now) != 0 || now != starttime)
        return kill_orphaned_group(pgid, starttime, path, sw->event); /* the leader is gone: its group may not be */
    kill(-pgid, SIGKILL);
    kill(pid, SIGKILL);
    log_event(LOG_WARN, sw->event, "pid=%d pgid=%d pidfile=%s", pid, pgid, path);
    return 1;
}

static int sweep_dir(const char *pid_dir, const sweep_t *sw)
{
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
        killed += kill_if_same(path, sw);
        if (sw->unlink_files)
            unlink(path);
    }
    closedir(d);
    return killed;
}

int process_kill_stale(const char *pid_dir)
{
    if (mkdir_p(pid_dir) != 0) {
        log_event(LOG_WARN, "pid_dir_error", "dir=%s error=%s", pid_dir, strerror(errno));
        return -1;
    }
    sweep_t sw = {.owner = 0, .unlink_files = true, .event = "stale_worker_killed"};
    return sweep_dir(pid_dir, &sw);
}

int process_kill_owned(const char *pid_dir, pid_t owner)
{
    sweep_t sw = {.owner = owner, .unlink_files = false, .event = "guard_killed_worker"};
    return owner > 0 ? sweep_dir(pid_dir, &sw) : -1;
}
