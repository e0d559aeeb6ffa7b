/*
 * simgpu_proc.c: the lowest room of the simulated GPU set: the clock, and processes: who a
 * process is (struct sg_ident, simgpu_int.h), whether it is still alive, and its host pid.
 * It reads the set's tables (layout in simgpu_int.h) but calls no other room; simgpu_table.c,
 * simgpu_park.c and simgpu.c build on it.
 *
 * Pid namespaces. The set's "host side" is the pid namespace of the process that created it
 * (set_header.creator_ns_ino, the inode readlink /proc/self/ns/pid shows). NVML reports host
 * pids, so the pid a slot reports is its process's pid in that namespace. A process records
 * (its namespace's inode, getpid(), starttime from /proc/self/stat: the same value in every
 * namespace); on the host side getpid() is its host pid. A process in another namespace (a
 * container) cannot see its host pid, so the host side finds it: sg_translate_locked, part of
 * every host-side reap, scans /proc once when some live ident has no host pid yet, and a
 * /proc/N whose ns/pid inode is the ident's, whose innermost NSpid (status) is the ident's
 * ns_pid and whose starttime is the ident's is that process: host_pid = N, in every ident of
 * it. When the caller may not look at /proc/N/ns/pid (another user's process; root may), a
 * process of a nested namespace (NSpid with more than one entry) with that innermost pid
 * and starttime is a candidate: a single candidate is taken, several settle nothing. A
 * complete scan without a match or candidate means the process is gone (SG_HOST_PID_GONE).
 * The scan is bounded (SCAN_MAX_ENTRIES, SCAN_BUDGET_MS, XLATE_MAX processes at once), and
 * an ident it could not settle is tried again after XLATE_RETRY_MS at the earliest.
 * Namespaces are the creator's and those below it: a process of an ancestor namespace of the
 * creator's is not in the host side's /proc and would be taken for gone.
 *
 * Liveness (sg_ident_check) is judged only by a process that can see the other: one of the
 * same namespace (by ns_pid), or the host side (by host pid, once known); any other answers
 * PROC_UNKNOWN, and nobody marks a slot dead on PROC_UNKNOWN. A process whose /proc is not
 * its own namespace's (a new pid namespace without its own /proc mount: /proc/self is not
 * getpid()) judges nothing, but still reads its starttime right from /proc/self/stat.
 */
#include "simgpu.h"
#include "simgpu_int.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SCAN_MAX_ENTRIES 65536 /* /proc entries one translation looks at */
#define SCAN_BUDGET_MS 250     /* and how long it may take (the set's mutex is held) */
#define XLATE_MAX 64           /* processes one scan translates; the rest wait for the next */
#define XLATE_RETRY_MS 1000    /* an ident a scan could not settle waits this long */

uint64_t sg_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- /proc ---- */

/* Reads a small /proc file into buf (NUL-terminated); its length, or -1 with errno. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    int saved = errno;
    close(fd);
    if (n <= 0) {
        errno = n < 0 ? saved : ENOENT;
        return -1;
    }
    buf[n] = '\0';
    return n;
}

int sg_proc_stat(pid_t pid, pid_t *pid_out, char *state, uint64_t *starttime)
{
    char path[64], buf[1024];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/stat");
    if (read_small(path, buf, sizeof buf) < 0)
        return -1;
    char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (!p || p[1] != ' ') {
        errno = EIO;
        return -1;
    }
    if (pid_out)
        *pid_out = (pid_t)strtol(buf, NULL, 10);
    p += 2;
    *state = *p;
    /* p is at field 3 (state); starttime is field 22: skip 19 separators. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) {
            errno = EIO;
            return -1;
        }
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno) {
        errno = EIO;
        return -1;
    }
    *starttime = v;
    return 0;
}

uint64_t sg_self_starttime(void)
{
    char state;
    uint64_t st = 0;
    if (sg_proc_stat(0, NULL, &state, &st) < 0)
        return 0;
    return st;
}

enum proc_state sg_proc_check(pid_t pid, uint64_t starttime)
{
    if (pid <= 0)
        return PROC_GONE;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return PROC_GONE;
    char state;
    uint64_t st;
    if (sg_proc_stat(pid, NULL, &state, &st) < 0)
        return errno == ENOENT || errno == ESRCH ? PROC_GONE : PROC_UNKNOWN;
    if (state == 'Z' || state == 'X')
        return PROC_GONE;
    if (starttime != 0 && st != starttime)
        return PROC_GONE;
    return PROC_ALIVE;
}

/* The inode of the pid namespace link at path (/proc/PID/ns/pid), 0 with errno. */
static uint64_t ns_inode_at(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return 0;
    return (uint64_t)st.st_ino;
}

uint64_t sg_pidns_self(void)
{
    return ns_inode_at("/proc/self/ns/pid");
}

/* The innermost pid of /proc/PID/status's NSpid line and how many levels it has. */
static int nspid_read(pid_t pid, int32_t *inner, int *levels)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (read_small(path, buf, sizeof buf) < 0)
        return -1;
    char *p = strstr(buf, "\nNSpid:");
    if (!p)
        return -1;
    p += 7;
    *levels = 0;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        *inner = (int32_t)v;
        (*levels)++;
        p = end;
    }
    return *levels > 0 ? 0 : -1;
}

/* ---- identity ---- */

void sg_pidns_init(simgpu_t *s)
{
    s->self_ns_ino = sg_pidns_self();
    s->host_side = s->self_ns_ino == s->hdr->creator_ns_ino;
    pid_t seen = 0;
    char state;
    uint64_t st;
    s->proc_ok = sg_proc_stat(0, &seen, &state, &st) == 0 && seen == getpid();
}

void sg_self_ident(simgpu_t *s, struct sg_ident *out)
{
    memset(out, 0, sizeof *out);
    out->ns_ino = s->self_ns_ino;
    out->ns_pid = (int32_t)getpid();
    out->starttime = sg_self_starttime();
    out->host_pid = s->host_side ? out->ns_pid : 0;
}

bool sg_ident_same(const struct sg_ident *a, const struct sg_ident *b)
{
    return a->ns_ino == b->ns_ino && a->ns_pid == b->ns_pid && a->starttime == b->starttime;
}

bool sg_ident_is_pid(simgpu_t *s, const struct sg_ident *id, pid_t pid)
{
    if (pid <= 0)
        return false;
    if (s->host_side)
        return id->host_pid == (int32_t)pid;
    return id->ns_ino == s->self_ns_ino && id->ns_pid == (int32_t)pid;
}

pid_t sg_ident_host_pid(const struct sg_ident *id)
{
    return id->host_pid > 0 ? (pid_t)id->host_pid : 0;
}

enum proc_state sg_ident_check(simgpu_t *s, const struct sg_ident *id)
{
    if (!s->proc_ok)
        return PROC_UNKNOWN;
    if (id->ns_ino == s->self_ns_ino)
        return sg_proc_check(id->ns_pid, id->starttime);
    if (!s->host_side)
        return PROC_UNKNOWN;
    if (id->host_pid > 0)
        return sg_proc_check(id->host_pid, id->starttime);
    return id->host_pid == SG_HOST_PID_GONE ? PROC_GONE : PROC_UNKNOWN;
}

/* ---- host pid translation (caller holds the lock) ---- */

typedef void (*ident_fn)(struct sg_ident *id, void *ctx);

/* Every ident of a live slot: GPU slots not yet dead, park slots, running operations. */
static void each_ident(simgpu_t *s, ident_fn fn, void *ctx)
{
    for (int g = 0; g < s->n_gpus; g++) {
        struct gpu_record *gpu = &s->hdr->gpus[g];
        for (int i = 0; i < SIMGPU_MAX_PROCS; i++)
            if (gpu->slots[i].in_use && !gpu->slots[i].dead)
                fn(&gpu->slots[i].id, ctx);
    }
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct park_slot *p = &s->hdr->parks[i];
        if (!p->in_use)
            continue;
        fn(&p->id, ctx);
        if (p->op != SIMGPU_OP_NONE)
            fn(&p->op_id, ctx);
    }
}

struct xlate_want {
    struct sg_ident id; /* ns_ino, ns_pid, starttime */
    int32_t found;      /* the host pid, verified by the namespace inode; 0 none */
    int32_t candidate;  /* the last unverified candidate */
    int n_candidates;
};

struct xlate {
    struct xlate_want want[XLATE_MAX];
    int n;
    bool complete; /* the scan saw every /proc entry */
    uint64_t now;
};

static struct xlate_want *want_of(struct xlate *x, const struct sg_ident *id)
{
    for (int i = 0; i < x->n; i++)
        if (sg_ident_same(&x->want[i].id, id))
            return &x->want[i];
    return NULL;
}

static void collect(struct sg_ident *id, void *ctx)
{
    struct xlate *x = ctx;
    if (id->host_pid != 0 || id->ns_ino == 0 || x->n == XLATE_MAX)
        return;
    if (id->xlate_ms && x->now - id->xlate_ms < XLATE_RETRY_MS)
        return;
    if (want_of(x, id))
        return;
    memset(&x->want[x->n], 0, sizeof x->want[x->n]);
    x->want[x->n++].id = *id;
}

static bool ns_wanted(const struct xlate *x, uint64_t ino)
{
    for (int i = 0; i < x->n; i++)
        if (x->want[i].id.ns_ino == ino)
            return true;
    return false;
}

/* Looks at /proc/pid for the processes x wants. */
static void scan_one(struct xlate *x, pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
    uint64_t ino = ns_inode_at(path);
    if (ino == 0 && errno != EACCES && errno != EPERM)
        return; /* gone meanwhile */
    if (ino != 0 && !ns_wanted(x, ino))
        return; /* most processes: one stat */
    int32_t inner = 0;
    int levels = 0;
    char state;
    uint64_t start;
    if (nspid_read(pid, &inner, &levels) < 0 || (ino == 0 && levels < 2))
        return; /* unreadable, or (unverified) a process of the caller's own namespace */
    if (sg_proc_stat(pid, NULL, &state, &start) < 0)
        return;
    for (int i = 0; i < x->n; i++) {
        struct xlate_want *w = &x->want[i];
        if (w->id.ns_pid != inner || w->id.starttime != start)
            continue;
        if (ino == 0) {
            w->candidate = (int32_t)pid;
            w->n_candidates++;
        } else if (w->id.ns_ino == ino) {
            w->found = (int32_t)pid;
        }
    }
}

static void scan_proc(struct xlate *x)
{
    DIR *d = opendir("/proc");
    x->complete = d != NULL;
    if (!d)
        return;
    uint64_t started = sg_monotonic_ms();
    unsigned entries = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        if (++entries > SCAN_MAX_ENTRIES ||
            (entries % 256 == 0 && sg_monotonic_ms() - started > SCAN_BUDGET_MS)) {
            x->complete = false;
            break;
        }
        scan_one(x, (pid_t)strtol(e->d_name, NULL, 10));
    }
    closedir(d);
}

static void apply(struct sg_ident *id, void *ctx)
{
    struct xlate *x = ctx;
    if (id->host_pid != 0)
        return;
    const struct xlate_want *w = want_of(x, id);
    if (!w)
        return;
    if (w->found)
        id->host_pid = w->found;
    else if (w->n_candidates == 1)
        id->host_pid = w->candidate;
    else if (w->n_candidates == 0 && x->complete)
        id->host_pid = SG_HOST_PID_GONE;
    else
        id->xlate_ms = x->now;
}

void sg_translate_locked(simgpu_t *s)
{
    if (!s->host_side || !s->proc_ok)
        return;
    struct xlate x;
    x.n = 0;
    x.complete = false;
    x.now = sg_monotonic_ms() | 1; /* never 0: 0 is "never tried" */
    each_ident(s, collect, &x);
    if (x.n == 0)
        return;
    scan_proc(&x);
    each_ident(s, apply, &x);
}

struct learn {
    struct sg_ident *id;
};

static void learn_from(struct sg_ident *known, void *ctx)
{
    struct sg_ident *id = ((struct learn *)ctx)->id;
    if (known->host_pid > 0 && id->host_pid == 0 && sg_ident_same(known, id))
        id->host_pid = known->host_pid;
}

void sg_ident_learn_locked(simgpu_t *s, struct sg_ident *id)
{
    if (id->host_pid != 0)
        return;
    struct learn l = {id};
    each_ident(s, learn_from, &l);
}
