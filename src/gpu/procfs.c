/* procfs: process group and listening-socket owner lookups. See procfs.h. */
#include "gpu/procfs.h"

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

pid_t procfs_listener(int port)
{
    unsigned long inode = find_inode("/proc/net/tcp", port);
    if (!inode)
        inode = find_inode("/proc/net/tcp6", port);
    if (!inode)
        return 0;
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
        char fddir[300];
        snprintf(fddir, sizeof fddir, "/proc/%s/fd", de->d_name);
        DIR *fds = opendir(fddir);
        if (!fds)
            continue;
        struct dirent *fe;
        while ((fe = readdir(fds)) != NULL) {
            char link[600], target[64];
            snprintf(link, sizeof link, "%s/%s", fddir, fe->d_name);
            ssize_t n = readlink(link, target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            if (strcmp(target, want) == 0) {
                found = (pid_t)atoi(de->d_name);
                break;
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}
