/*
 * simgpu_table.c: the lowest room of the simulated GPU set: the clock, processes identified
 * by pid and /proc starttime, the set's robust mutex, and the GPU slot table (see simgpu.c's
 * top comment for the slot invariants and simgpu_int.h for the layout). Both simgpu.c (the
 * public API) and simgpu_park.c (the checkpoint state) build on it; it calls neither.
 */
#include "simgpu.h"
#include "simgpu_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t sg_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

double simgpu_timescale(void)
{
    const char *v = getenv("SIMGPU_TIMESCALE");
    if (!v || !*v)
        return 1.0;
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || !isfinite(d) || d <= 0.0)
        return 1.0;
    return d;
}

uint64_t simgpu_scaled_ms(uint64_t simulated_ms)
{
    double v = (double)simulated_ms * simgpu_timescale();
    if (v >= 1.8e19)
        return UINT64_MAX;
    return (uint64_t)(v + 0.5); /* no llround: the .so links without libm */
}

static int proc_stat_read(pid_t pid, char *state, uint64_t *starttime)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int saved = errno;
    close(fd);
    if (n <= 0) {
        errno = n < 0 ? saved : ENOENT;
        return -1;
    }
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (!p || p[1] != ' ') {
        errno = EIO;
        return -1;
    }
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
    if (proc_stat_read(getpid(), &state, &st) < 0)
        return 0;
    return st;
}

/* Is (pid, starttime) still the live process that took the slot? */
enum proc_state sg_proc_check(pid_t pid, uint64_t starttime)
{
    if (pid <= 0)
        return PROC_GONE;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return PROC_GONE;
    char state;
    uint64_t st;
    if (proc_stat_read(pid, &state, &st) < 0)
        return errno == ENOENT || errno == ESRCH ? PROC_GONE : PROC_UNKNOWN;
    if (state == 'Z' || state == 'X')
        return PROC_GONE;
    if (starttime != 0 && st != starttime)
        return PROC_GONE;
    return PROC_ALIVE;
}

/* ---- locking ---- */

int sg_lock(simgpu_t *s)
{
    int rc = pthread_mutex_lock(&s->hdr->lock);
    if (rc == EOWNERDEAD) {
        /* The previous holder died; the tables are valid at every step (see top). */
        pthread_mutex_consistent(&s->hdr->lock);
        return 0;
    }
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

void sg_unlock(simgpu_t *s)
{
    pthread_mutex_unlock(&s->hdr->lock);
}

/* ---- reaping (caller holds the lock) ---- */

void sg_reap_slots_locked(simgpu_t *s)
{
    uint64_t now = sg_monotonic_ms();
    uint64_t delay = s->hdr->release_delay_real_ms;
    for (int g = 0; g < s->n_gpus; g++) {
        struct gpu_record *gpu = &s->hdr->gpus[g];
        for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
            struct proc_slot *slot = &gpu->slots[i];
            if (!slot->in_use)
                continue;
            if (!slot->dead && sg_proc_check(slot->pid, slot->starttime) == PROC_GONE) {
                slot->dead_since_ms = now;
                slot->utilization = 0;
                slot->dead = 1;
            }
            if (slot->dead && now - slot->dead_since_ms >= delay)
                slot->in_use = 0;
        }
    }
}

uint64_t sg_used_locked(const struct gpu_record *gpu)
{
    uint64_t used = 0;
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++)
        if (gpu->slots[i].in_use)
            used += gpu->slots[i].bytes;
    return used;
}

struct proc_slot *sg_own_slot_locked(struct gpu_record *gpu, pid_t pid, uint64_t starttime)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct proc_slot *slot = &gpu->slots[i];
        if (slot->in_use && !slot->dead && slot->pid == pid && slot->starttime == starttime)
            return slot;
    }
    return NULL;
}

/* Take an unused slot for (pid, starttime) holding bytes; NULL when the table is full. */
struct proc_slot *sg_take_slot_locked(struct gpu_record *gpu, pid_t pid, uint64_t starttime,
                                          uint64_t bytes)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct proc_slot *slot = &gpu->slots[i];
        if (slot->in_use)
            continue;
        slot->pid = pid;
        slot->starttime = starttime;
        slot->bytes = bytes;
        slot->dead = 0;
        slot->dead_since_ms = 0;
        slot->utilization = 0;
        __atomic_store_n(&slot->in_use, 1, __ATOMIC_RELEASE); /* visible last */
        return slot;
    }
    return NULL;
}

