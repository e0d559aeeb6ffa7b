/* procfs: process group and listening-socket owner lookups. See procfs.h. */
#include "gpu/procfs.h"

#include <stdbool.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pid_t procfs_pgid(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (!rp)
        return -1;
    char state;
    int ppid, pgrp;
    if (sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3)
        return -1;
    return (pid_t)pgrp;
}

int procfs_is_dead(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    char state = 0;
    if (!rp || sscanf(rp + 1, " %c", &state) != 1)
        return 0;
    return state == 'Z' || state == 'X';
}

int procfs_comm(pid_t pid, char *out, size_t outlen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f || outlen == 0) {
        if (f)
            fclose(f);
        return -1;
    }
    size_t n = fread(out, 1, outlen - 1, f);
    fclose(f);
    out[n] = '\0';
    if (n > 0 && out[n - 1] == '\n')
        out[n - 1] = '\0';
    return n > 0 ? 0 : -1;
}

static unsigned long find_inode(const char *table, int port)
{
    FILE *f = fopen(table, "r");
    if (!f)
        return 0;
    char line[512];
    unsigned long inode = 0;
    if (!fgets(line, sizeof line, f)) { /* header */
        fclose(f);
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        char local[128];
        unsigned st;
        unsigned long ino;
        /* sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode */
        if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*d %*d %lu", local, &st, &ino) != 3)
            continue;
        char *colon = strrchr(local, ':');
        if (!colon || st != 0x0A) /* LISTEN */
            continue;
        if ((int)strtol(colon + 1, NULL, 16) == port) {
            inode = ino;
            break;
        }
    }
    fclose(f);
    return inode;
}

static unsigned long listening_inode(int port)
{
    unsigned long inode = find_inode("/proc/net/tcp", port);
    return inode ? inode : find_inode("/proc/net/tcp6", port);
}

/* Does /proc/<pid>/fd hold "socket:[inode]"? pid given as its decimal text. */
static bool holds_socket(const char *pid, const char *want)
{
    char fddir[300];
    snprintf(fddir, sizeof fddir, "/proc/%s/fd", pid);
    DIR *fds = opendir(fddir);
    if (!fds)
        return false;
    bool found = false;
    struct dirent *fe;
    while (!found && (fe = readdir(fds)) != NULL) {
        char link[600], target[64];
        snprintf(link, sizeof link, "%s/%s", fddir, fe->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        found = strcmp(target, want) == 0;
    }
    closedir(fds);
    return found;
}

static pid_t socket_holder(unsigned long inode)
{
    char want[64];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    DIR *proc = opendir("/proc");
    if (!proc)
        return 0;
    pid_t found = 0;
    struct dirent *de;
    while (!found && (de = readdir(proc)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        if (holds_socket(de->d_name, want))
            found = (pid_t)atoi(de->d_name);
    }
    closedir(proc);
    return found;
}

pid_t procfs_listener(int port)
{
    unsigned long inode = listening_inode(port);
    return inode ? socket_holder(inode) : 0;
}

int procfs_port_owned(int port, pid_t pgid)
{
    unsigned long inode = listening_inode(port);
    if (!inode || pgid <= 0)
        return -1;
    char want[64], leader[24];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    snprintf(leader, sizeof leader, "%d", (int)pgid);
    if (holds_socket(leader, want))
        return 1;
    pid_t holder = socket_holder(inode);
    if (holder <= 0)
        return -1;
    return procfs_pgid(holder) == pgid ? 1 : 0;
}
