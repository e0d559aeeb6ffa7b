/*
 * simgpu.c: simulated GPUs in POSIX shared memory (see simgpu.h for the contract).
 *
 * Layout of the shm object "/simgpu.NAME": see simgpu_int.h. The rooms below this one:
 * simgpu_park.c (the CUDA checkpoint state; sg_reap_locked), simgpu_table.c (time scale, the
 * mutex, the slot table), which the park room builds on too, and simgpu_proc.c (clock,
 * process identity across pid namespaces, liveness, host pid translation) under both.
 *
 * A slot is one process's holding on one GPU: (ident, bytes, dead, dead_since_ms,
 * utilization). A process is identified by its pid namespace, its pid there AND its /proc
 * starttime, so a recycled pid is a different process, and a process in a container (its own
 * pid namespace) is told apart from the host process with the same number. The pid a slot
 * reports (simgpu_processes, hence NVML) is the host pid: the pid in the set creator's
 * namespace, found by the host side for a process of another namespace (simgpu_proc.c).
 *
 * Invariants (all under the set's mutex):
 *   - "used" is never stored: it is the sum of the bytes of the slots in use, so a process
 *     that dies in the middle of an update cannot leave a wrong counter behind.
 *   - used <= total after every successful simgpu_alloc (the fit check and the write happen
 *     under the same lock); dead-but-unreleased memory counts as used, like the driver.
 *   - A live process has at most one live slot per GPU.
 *   - A slot is marked dead (dead_since_ms = CLOCK_MONOTONIC ms) the first time an access by
 *     a process that can judge it finds its process gone: kill(pid, 0) == ESRCH,
 *     /proc/PID/stat missing, state 'Z' (zombie), or a different starttime (pid reuse). Who
 *     can judge: a process of the slot's own pid namespace (by its pid there), or one of the
 *     creator's namespace (by the host pid, once found; a slot whose host pid the host side
 *     finds no process for is gone too). Nobody else marks it. Anyone clears a dead slot once
 *     now - dead_since_ms >= the set's release delay.
 *   - The release delay is scaled by SIMGPU_TIMESCALE once, when the set is created, and
 *     stored in real milliseconds, so every process sees the same delay whatever its own
 *     environment says.
 *
 * The mutex is PTHREAD_PROCESS_SHARED and PTHREAD_MUTEX_ROBUST: when its holder died
 * (EOWNERDEAD) the next locker marks it consistent and carries on (the tables are valid at
 * every step because a slot becomes visible only when its in_use flag is written last).
 *
 * Creation is race-free for openers: the creator makes the object with O_EXCL, sizes and
 * fills it, then publishes the magic number with a release store; an opener that sees no
 * magic yet polls briefly before giving up.
 *
 * Return convention (as the header): 0 ok, -1 error with errno set (and err text where a
 * buffer is given).
 */
#include "simgpu.h"
#include "simgpu_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OPEN_WAIT_MS 2000 /* how long an opener waits for a set being created */
#define DEFAULT_MODEL_NAME "NVIDIA Simulated GPU"

/* ---- small helpers ---- */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static size_t set_size_for(int n_gpus)
{
    return sizeof(struct set_header) + (size_t)n_gpus * sizeof(struct gpu_record);
}

static bool set_name_valid(const char *name)
{
    if (!name || !name[0] || name[0] == '.')
        return false;
    size_t len = strlen(name);
    if (len > SET_NAME_LEN_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!(isalnum(c) || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static void shm_path_for(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "/simgpu.%s", name);
}

/* 64-bit FNV-1a over data, continuing from h. */
static uint64_t fnv1a64(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", deterministic from set name + index. */
static void uuid_for(const char *set_name, int index, char *out, size_t cap)
{
    uint64_t h = fnv1a64(0xcbf29ce484222325ULL, set_name, strlen(set_name));
    uint32_t idx = (uint32_t)index;
    h = fnv1a64(h, &idx, sizeof idx);
    uint64_t hi = mix64(h), lo = mix64(h ^ 0x9e3779b97f4a7c15ULL);
    snprintf(out, cap, "GPU-%08x-%04x-%04x-%04x-%04x%08x", (unsigned)(hi >> 32),
             (unsigned)((hi >> 16) & 0xffff), (unsigned)(hi & 0xffff), (unsigned)(lo >> 48),
             (unsigned)((lo >> 32) & 0xffff), (unsigned)(lo & 0xffffffffu));
}

/* A locked or checkpointed process's CUDA calls block in the real driver; here they fail. */
static void set_unlock_busy(simgpu_t *s)
{
    sg_unlock(s);
    errno = EBUSY;
}

static bool gpu_index_ok(simgpu_t *s, int gpu)
{
    if (!s || gpu < 0 || gpu >= s->n_gpus) {
        errno = EINVAL;
        return false;
    }
    return true;
}

/* ---- public API ---- */

int simgpu_create(const char *name, int n_gpus, uint64_t memory_per_gpu, const char *model_name,
                  uint64_t release_delay_ms, char *err, size_t errlen)
{
    if (!set_name_valid(name)) {
        set_err(err, errlen, "invalid set name (1-%d of [A-Za-z0-9._-], not starting with '.')",
                SET_NAME_LEN_MAX);
        errno = EINVAL;
        return -1;
    }
    if (n_gpus < 1 || n_gpus > SIMGPU_MAX_GPUS) {
        set_err(err, errlen, "number of GPUs must be 1..%d", SIMGPU_MAX_GPUS);
        errno = EINVAL;
        return -1;
    }
    if (memory_per_gpu == 0) {
        set_err(err, errlen, "memory per GPU must be > 0");
        errno = EINVAL;
        return -1;
    }
    if (!model_name || !*model_name)
        model_name = DEFAULT_MODEL_NAME;
    if (strlen(model_name) >= SIMGPU_NAME_MAX) {
        set_err(err, errlen, "model name longer than %d bytes", SIMGPU_NAME_MAX - 1);
        errno = EINVAL;
        return -1;
    }

    char path[SET_NAME_LEN_MAX + 16];
    shm_path_for(name, path, sizeof path);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        if (e == EEXIST)
            set_err(err, errlen, "simulated GPU set '%s' already exists", name);
        else
            set_err(err, errlen, "shm_open %s: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    fchmod(fd, 0666); /* umask must not keep other users' processes out */
    size_t len = set_size_for(n_gpus);
    if (ftruncate(fd, (off_t)len) < 0) {
        int e = errno;
        set_err(err, errlen, "ftruncate %s: %s", path, strerror(e));
        close(fd);
        shm_unlink(path);
        errno = e;
        return -1;
    }
    struct set_header *hdr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (hdr == MAP_FAILED) {
        set_err(err, errlen, "mmap %s: %s", path, strerror(map_errno));
        shm_unlink(path);
        errno = map_errno;
        return -1;
    }

    /* ftruncate zero-filled the object; fill in everything but the magic. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(&hdr->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
        set_err(err, errlen, "pthread_mutex_init: %s", strerror(rc));
        munmap(hdr, len);
        shm_unlink(path);
        errno = rc;
        return -1;
    }
    hdr->version = SET_VERSION;
    hdr->header_size = (uint32_t)sizeof(struct set_header);
    hdr->gpu_record_size = (uint32_t)sizeof(struct gpu_record);
    hdr->n_gpus = (uint32_t)n_gpus;
    hdr->release_delay_sim_ms = release_delay_ms;
    hdr->release_delay_real_ms = simgpu_scaled_ms(release_delay_ms);
    hdr->pcie_bw = sg_default_pcie_bw();
    hdr->checkpoint_bw = sg_default_bw("SIMGPU_CHECKPOINT_BW", SIMGPU_DEFAULT_CHECKPOINT_BW);
    hdr->restore_bw = sg_default_bw("SIMGPU_RESTORE_BW", SIMGPU_DEFAULT_RESTORE_BW);
    hdr->creator_ns_ino = sg_pidns_self(); /* the set's host side (simgpu_proc.c) */
    snprintf(hdr->set_name, sizeof hdr->set_name, "%s", name);
    for (int g = 0; g < n_gpus; g++) {
        struct gpu_record *gpu = &hdr->gpus[g];
        gpu->total = memory_per_gpu;
        snprintf(gpu->name, sizeof gpu->name, "%s", model_name);
        uuid_for(name, g, gpu->uuid, sizeof gpu->uuid);
    }
    __atomic_store_n(&hdr->magic, SET_MAGIC, __ATOMIC_RELEASE);
    munmap(hdr, len);
    return 0;
}

int simgpu_remove(const char *name, char *err, size_t errlen)
{
    if (!set_name_valid(name)) {
        set_err(err, errlen, "invalid set name");
        errno = EINVAL;
        return -1;
    }
    char path[SET_NAME_LEN_MAX + 16];
    shm_path_for(name, path, sizeof path);
    if (shm_unlink(path) < 0) {
        int e = errno;
        if (e == ENOENT)
            set_err(err, errlen, "no simulated GPU set named '%s'", name);
        else
            set_err(err, errlen, "shm_unlink %s: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    return 0;
}

simgpu_t *simgpu_open(const char *name, char *err, size_t errlen)
{
    if (!name) {
        name = getenv("SIMGPU");
        if (!name || !*name) {
            set_err(err, errlen, "SIMGPU is not set (name of the simulated GPU set)");
            errno = EINVAL;
            return NULL;
        }
    }
    if (!set_name_valid(name)) {
        set_err(err, errlen, "invalid set name '%s'", name);
        errno = EINVAL;
        return NULL;
    }
    char path[SET_NAME_LEN_MAX + 16];
    shm_path_for(name, path, sizeof path);
    int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            set_err(err, errlen, "no simulated GPU set named '%s'", name);
        else
            set_err(err, errlen, "shm_open %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }

    /* Wait (briefly) for a creator that is still sizing/filling the object. */
    struct stat st;
    struct set_header *hdr = MAP_FAILED;
    size_t len = 0;
    const char *why = "is being created";
    int why_errno = EAGAIN;
    for (int waited = 0; waited <= OPEN_WAIT_MS; waited++) {
        if (fstat(fd, &st) < 0) {
            why = "cannot be examined";
            why_errno = errno;
            break;
        }
        if ((size_t)st.st_size >= 16 && (size_t)st.st_size < sizeof(struct set_header)) {
            /* too small for this layout: a set of an older simgpu once its magic is there
             * (published last, so a set still being made shows none yet) */
            uint64_t head[2];
            if (pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && head[0] == SET_MAGIC) {
                why = "has an incompatible layout (made by another simgpu version)";
                why_errno = EPROTO;
                break;
            }
        }
        if ((size_t)st.st_size >= sizeof(struct set_header)) {
            len = (size_t)st.st_size;
            hdr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (hdr == MAP_FAILED) {
                why = "cannot be mapped";
                why_errno = errno;
                break;
            }
            if (__atomic_load_n(&hdr->magic, __ATOMIC_ACQUIRE) == SET_MAGIC)
                break;
            munmap(hdr, len);
            hdr = MAP_FAILED;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    close(fd);
    if (hdr == MAP_FAILED) {
        set_err(err, errlen, "simulated GPU set '%s' %s", name, why);
        errno = why_errno;
        return NULL;
    }
    if (hdr->version != SET_VERSION || hdr->header_size != sizeof(struct set_header) ||
        hdr->gpu_record_size != sizeof(struct gpu_record) || hdr->n_gpus < 1 ||
        hdr->n_gpus > SIMGPU_MAX_GPUS || len < set_size_for((int)hdr->n_gpus)) {
        set_err(err, errlen, "simulated GPU set '%s' has an incompatible layout (version %u)",
                name, hdr->version);
        munmap(hdr, len);
        errno = EPROTO;
        return NULL;
    }
    simgpu_t *s = calloc(1, sizeof *s);
    if (!s) {
        munmap(hdr, len);
        set_err(err, errlen, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    s->hdr = hdr;
    s->map_len = len;
    s->n_gpus = (int)hdr->n_gpus;
    s->park_index = -1;
    sg_pidns_init(s);
    sg_cgroup_init(s);
    return s;
}

void simgpu_close(simgpu_t *s)
{
    if (!s)
        return;
    munmap(s->hdr, s->map_len);
    free(s);
}

int simgpu_count(simgpu_t *s)
{
    if (!s) {
        errno = EINVAL;
        return -1;
    }
    return s->n_gpus;
}

int simgpu_info(simgpu_t *s, int gpu, simgpu_info_t *out)
{
    if (!gpu_index_ok(s, gpu) || !out) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", rec->name);
    snprintf(out->uuid, sizeof out->uuid, "%s", rec->uuid);
    out->total = rec->total;
    out->used = sg_used_locked(rec);
    out->free = out->used >= out->total ? 0 : out->total - out->used;
    unsigned util = 0;
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        const struct proc_slot *slot = &rec->slots[i];
        if (slot->in_use && !slot->dead && slot->utilization > util)
            util = slot->utilization;
    }
    out->utilization_gpu = util;
    out->utilization_memory =
        rec->total ? (unsigned)((out->used * 100.0) / (double)rec->total + 0.5) : 0;
    if (out->utilization_memory > 100)
        out->utilization_memory = 100;
    sg_unlock(s);
    return 0;
}

int simgpu_processes(simgpu_t *s, int gpu, simgpu_proc_t *out, size_t cap, size_t *n)
{
    if (!gpu_index_ok(s, gpu) || !n || (cap > 0 && !out)) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    size_t count = 0;
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        const struct proc_slot *slot = &rec->slots[i];
        if (!slot->in_use)
            continue;
        if (count < cap) {
            memset(&out[count], 0, sizeof out[count]);
            out[count].pid = sg_ident_host_pid(&slot->id);
            out[count].used = slot->bytes;
            out[count].dead = slot->dead != 0;
            out[count].ns_pid = slot->id.ns_pid;
            out[count].pid_ns = slot->id.ns_ino;
            out[count].other_ns = slot->id.ns_ino != s->hdr->creator_ns_ino;
        }
        count++;
    }
    sg_unlock(s);
    *n = count;
    return 0;
}

int simgpu_alloc(simgpu_t *s, int gpu, uint64_t bytes)
{
    if (!gpu_index_ok(s, gpu))
        return -1;
    struct sg_ident me;
    sg_self_ident(s, &me);
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    if (sg_park_blocks_locked(s, &me)) {
        set_unlock_busy(s);
        return -1;
    }
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    uint64_t used = sg_used_locked(rec);
    if (bytes > rec->total || used > rec->total - bytes ||
        bytes > sg_limit_room_locked(s, rec, s->self_cgroup, NULL)) { /* the card, or its cgroup's limit */
        sg_unlock(s);
        errno = ENOMEM;
        return -1;
    }
    struct proc_slot *slot = sg_own_slot_locked(rec, &me);
    if (slot) {
        slot->bytes += bytes;
        if (!slot->cgroup[0]) /* taken for it by a restore: its cgroup is known now */
            snprintf(slot->cgroup, sizeof slot->cgroup, "%s", s->self_cgroup);
        sg_unlock(s);
        return 0;
    }
    if (bytes == 0) {
        sg_unlock(s);
        return 0;
    }
    sg_ident_learn_locked(s, &me); /* a process of another namespace: its host pid if known */
    slot = sg_take_slot_locked(rec, &me, bytes);
    if (slot)
        snprintf(slot->cgroup, sizeof slot->cgroup, "%s", s->self_cgroup);
    sg_unlock(s);
    if (slot)
        return 0;
    errno = ENOSPC; /* SIMGPU_MAX_PROCS processes already hold memory on this GPU */
    return -1;
}

int simgpu_free(simgpu_t *s, int gpu, uint64_t bytes)
{
    if (!gpu_index_ok(s, gpu))
        return -1;
    struct sg_ident me;
    sg_self_ident(s, &me);
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    if (sg_park_blocks_locked(s, &me)) {
        set_unlock_busy(s);
        return -1;
    }
    struct proc_slot *slot = sg_own_slot_locked(&s->hdr->gpus[gpu], &me);
    uint64_t held = slot ? slot->bytes : 0;
    if (bytes > held) {
        sg_unlock(s);
        errno = EINVAL; /* freeing more than this process holds */
        return -1;
    }
    if (slot) {
        slot->bytes -= bytes;
        if (slot->bytes == 0)
            slot->in_use = 0;
    }
    sg_unlock(s);
    return 0;
}

uint64_t simgpu_held(simgpu_t *s, int gpu)
{
    if (!gpu_index_ok(s, gpu))
        return 0;
    struct sg_ident me;
    sg_self_ident(s, &me);
    if (sg_lock(s) < 0)
        return 0;
    sg_reap_locked(s);
    struct proc_slot *slot = sg_own_slot_locked(&s->hdr->gpus[gpu], &me);
    uint64_t held = slot ? slot->bytes : 0;
    sg_unlock(s);
    return held;
}

int simgpu_set_utilization(simgpu_t *s, int gpu, unsigned percent)
{
    if (!gpu_index_ok(s, gpu))
        return -1;
    if (percent > 100)
        percent = 100;
    struct sg_ident me;
    sg_self_ident(s, &me);
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    struct proc_slot *slot = sg_own_slot_locked(rec, &me);
    if (!slot && percent > 0) {
        /* A process busy on the GPU without memory of its own: give it an empty slot. */
        sg_ident_learn_locked(s, &me);
        slot = sg_take_slot_locked(rec, &me, 0);
        if (!slot) {
            sg_unlock(s);
            errno = ENOSPC;
            return -1;
        }
    }
    if (slot)
        slot->utilization = percent;
    sg_unlock(s);
    return 0;
}

void simgpu_reap(simgpu_t *s)
{
    if (!s || sg_lock(s) < 0)
        return;
    sg_reap_locked(s);
    sg_unlock(s);
}

/* ---- additions beyond the original interface (declared in simgpu.h) ---- */

int simgpu_release_delay(simgpu_t *s, uint64_t *simulated_ms, uint64_t *real_ms)
{
    if (!s) {
        errno = EINVAL;
        return -1;
    }
    if (simulated_ms)
        *simulated_ms = s->hdr->release_delay_sim_ms;
    if (real_ms)
        *real_ms = s->hdr->release_delay_real_ms;
    return 0;
}

int simgpu_find_uuid(simgpu_t *s, const char *uuid)
{
    if (!s || !uuid) {
        errno = EINVAL;
        return -1;
    }
    for (int g = 0; g < s->n_gpus; g++)
        if (strcmp(s->hdr->gpus[g].uuid, uuid) == 0) /* immutable after creation */
            return g;
    errno = ENOENT;
    return -1;
}

bool simgpu_name_valid(const char *name)
{
    return set_name_valid(name);
}
