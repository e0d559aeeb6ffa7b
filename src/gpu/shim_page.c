/*
 * shim_page: an instance's grant page, vramd's side (shim_page.h; the layout and the
 * protocol are in shim_abi.h). The worker's processes write the page too: what this file
 * reads from it is untrusted, and its sums saturate (units_sat_add) instead of wrapping.
 */
#include "gpu/shim_page.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/units.h"

int shim_page_create(const char *path, uint64_t epoch, uint64_t gpu_total, shim_page_t **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST && unlink(path) == 0) /* a page a vramd before this one left */
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (ftruncate(fd, SHIM_PAGE_SIZE) != 0) {
        snprintf(err, errlen, "%s: ftruncate: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    void *m = mmap(NULL, SHIM_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    shim_page_t *p = m; /* a fresh file reads as zeroes: every slot free, grant 0 */
    p->version = SHIM_ABI_VERSION;
    p->epoch = epoch;
    p->gpu_total = gpu_total;
    atomic_store(&p->vramd_alive, 1);
    atomic_thread_fence(memory_order_release);
    p->magic = SHIM_ABI_MAGIC;
    *out = p;
    return 0;
}

void shim_page_destroy(shim_page_t *p, const char *path)
{
    if (!p)
        return;
    atomic_store(&p->vramd_alive, 0);
    munmap(p, SHIM_PAGE_SIZE);
    if (path)
        unlink(path);
}

void shim_page_set_grant(shim_page_t *p, uint64_t grant)
{
    if (atomic_exchange(&p->grant, grant) != grant)
        atomic_fetch_add(&p->grant_changes, 1);
}

uint64_t shim_page_grant(const shim_page_t *p) { return atomic_load(&((shim_page_t *)p)->grant); }

uint64_t shim_page_live(const shim_page_t *p) { return atomic_load(&((shim_page_t *)p)->live_total); }

void shim_page_charge(shim_page_t *p, uint64_t n) { atomic_fetch_add(&p->live_total, n); }

void shim_page_read(const shim_page_t *cp, shim_page_figures_t *out)
{
    shim_page_t *p = (shim_page_t *)cp; /* atomic loads take non-const pointers */
    memset(out, 0, sizeof *out);
    out->grant = atomic_load(&p->grant);
    out->live = atomic_load(&p->live_total);
    for (unsigned i = 0; i < SHIM_PAGE_PROCS; i++) {
        shim_proc_slot_t *s = &p->procs[i];
        if (atomic_load(&s->pid) == 0)
            continue;
        uint32_t st = atomic_load(&s->state);
        if (st == SHIM_PROC_ATTACHED)
            out->attached++;
        else if (st == SHIM_PROC_DETACHED)
            out->detached++;
        uint64_t peak = atomic_load(&s->peak);
        if (peak > out->peak)
            out->peak = peak;
        out->allocs = units_sat_add(out->allocs, atomic_load(&s->allocs));
        out->parked = units_sat_add(out->parked, atomic_load(&s->parked));
        out->asks = units_sat_add(out->asks, atomic_load(&s->asks));
        out->waits = units_sat_add(out->waits, atomic_load(&s->waits));
        out->refusals = units_sat_add(out->refusals, atomic_load(&s->refusals));
    }
}

pid_t shim_page_slot_pid(const shim_page_t *p, unsigned slot)
{
    if (slot >= SHIM_PAGE_PROCS)
        return 0;
    return (pid_t)atomic_load(&((shim_page_t *)p)->procs[slot].pid);
}

uint64_t shim_page_clear_slot(shim_page_t *p, unsigned slot)
{
    if (slot >= SHIM_PAGE_PROCS)
        return 0;
    shim_proc_slot_t *s = &p->procs[slot];
    uint64_t live = atomic_exchange(&s->live, 0);
    /* live_total never goes below zero: a shim that freed more than it counted is its own
     * mistake, not a reason to wrap */
    uint64_t cur = atomic_load(&p->live_total);
    while (!atomic_compare_exchange_weak(&p->live_total, &cur, cur > live ? cur - live : 0)) {
    }
    atomic_store(&s->state, SHIM_PROC_FREE);
    atomic_store(&s->peak, 0);
    atomic_store(&s->allocs, 0);
    atomic_store(&s->asks, 0);
    atomic_store(&s->waits, 0);
    atomic_store(&s->refusals, 0);
    atomic_store(&s->pid, 0); /* last: the slot may be claimed again from here */
    return live;
}

unsigned shim_page_reap(shim_page_t *p, bool (*is_gone)(pid_t pid, void *ctx), void *ctx, uint64_t *bytes)
{
    unsigned n = 0;
    uint64_t freed = 0;
    for (unsigned i = 0; i < SHIM_PAGE_PROCS; i++) {
        pid_t pid = shim_page_slot_pid(p, i);
        if (pid > 0 && is_gone(pid, ctx)) {
            freed += shim_page_clear_slot(p, i);
            n++;
        }
    }
    if (bytes)
        *bytes = freed;
    return n;
}

void shim_page_orphan(shim_page_t *p)
{
    if (p)
        atomic_store(&p->vramd_alive, 0);
}
