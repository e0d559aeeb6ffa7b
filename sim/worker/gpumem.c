/*
 * gpumem: PyTorch-like memory holdings on a simulated GPU. See gpumem.h for the model and
 * its invariant (the books here always equal what simgpu says this process holds).
 */
#include "gpumem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sw_format_torch_size(uint64_t bytes, char *out, size_t cap)
{
    if (bytes <= 1024)
        snprintf(out, cap, "%llu bytes", (unsigned long long)bytes);
    else if (bytes <= 1048576)
        snprintf(out, cap, "%.2f KiB", (double)bytes / 1024.0);
    else if (bytes <= 1073741824ull)
        snprintf(out, cap, "%.2f MiB", (double)bytes / 1048576.0);
    else
        snprintf(out, cap, "%.2f GiB", (double)bytes / 1073741824.0);
}

uint64_t sw_gpumem_held(const sw_gpumem_t *m)
{
    return m->context + m->resident + m->active + m->pool + m->leaked;
}

static void note_peak(sw_gpumem_t *m)
{
    uint64_t h = sw_gpumem_held(m);
    if (h > m->peak)
        m->peak = h;
}

static void format_oom(sw_gpumem_t *m, uint64_t tried, char *oom, size_t cap)
{
    if (!oom || !cap)
        return;
    simgpu_info_t info;
    memset(&info, 0, sizeof(info));
    simgpu_info(m->gpu, m->index, &info);
    char t[32], total[32], alloc[32], fr[32], reserved[32];
    sw_format_torch_size(tried, t, sizeof(t));
    sw_format_torch_size(info.total, total, sizeof(total));
    /* PyTorch's "allocated" is what tensors use (weights + running requests); "reserved"
     * adds its cached-but-free blocks and what leaked through it. */
    sw_format_torch_size(m->resident + m->active, alloc, sizeof(alloc));
    sw_format_torch_size(info.free, fr, sizeof(fr));
    sw_format_torch_size(m->resident + m->active + m->pool + m->leaked, reserved, sizeof(reserved));
    snprintf(oom, cap,
             "CUDA out of memory. Tried to allocate %s (GPU 0; %s total capacity; %s already "
             "allocated; %s free; %s reserved in total by PyTorch) If reserved memory is >> "
             "allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
             "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
             t, total, alloc, fr, reserved);
}

/* Allocates bytes on the GPU or writes the OOM text. */
static int raw_alloc_as(sw_gpumem_t *m, uint64_t bytes, bool context, char *oom, size_t cap)
{
    if (bytes == 0)
        return 0;
    int rc = m->cuda && !context ? sw_cuda_alloc(m->cuda, bytes) : simgpu_alloc(m->gpu, m->index, bytes);
    if (rc == 0)
        return 0;
    int e = errno;
    if (e == ENOMEM)
        format_oom(m, bytes, oom, cap);
    else if (oom && cap)
        snprintf(oom, cap, "CUDA error: simulated GPU allocation failed: %s", strerror(e));
    errno = ENOMEM; /* any allocation failure is an OOM for the caller */
    return -1;
}

static int raw_alloc(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap)
{
    return raw_alloc_as(m, bytes, false, oom, cap);
}

static void raw_free(sw_gpumem_t *m, uint64_t bytes)
{
    if (!bytes)
        return;
    if (m->cuda)
        sw_cuda_free(m->cuda, bytes);
    else
        simgpu_free(m->gpu, m->index, bytes);
}

bool sw_gpumem_use_driver(sw_gpumem_t *m, bool via_proc_address, char *why, size_t whylen)
{
    const char *set = getenv("SIMGPU");
    if (!set || strcmp(set, m->set_name) != 0) { /* the driver answers from $SIMGPU only */
        snprintf(why, whylen, "--simgpu %s is not $SIMGPU: the driver would allocate elsewhere", m->set_name);
        return false;
    }
    m->cuda = sw_cuda_open(via_proc_address, why, whylen);
    return m->cuda != NULL;
}

int sw_gpumem_driver_info(sw_gpumem_t *m, uint64_t *free_bytes, uint64_t *total)
{
    if (m->cuda)
        return sw_cuda_mem_info(m->cuda, free_bytes, total);
    simgpu_info_t info;
    if (simgpu_info(m->gpu, m->index, &info) != 0)
        return -1;
    *free_bytes = info.free;
    *total = info.total;
    return 0;
}

int sw_gpumem_grow_pool(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap)
{
    if (raw_alloc(m, bytes, oom, cap) != 0)
        return -1;
    m->pool += bytes;
    note_peak(m);
    return 0;
}

/* The device this process sees as device 0: the first CUDA_VISIBLE_DEVICES entry. */
static int pick_device(simgpu_t *s, char *err, size_t errlen)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    int count = simgpu_count(s);
    if (!cvd)
        return 0;
    char first[128];
    size_t n = strcspn(cvd, ",");
    if (n == 0 || n >= sizeof(first)) {
        snprintf(err, errlen, "no CUDA GPUs are available (CUDA_VISIBLE_DEVICES=\"%s\")", cvd);
        return -1;
    }
    memcpy(first, cvd, n);
    first[n] = 0;
    if (strncmp(first, "GPU-", 4) == 0) {
        int g = simgpu_find_uuid(s, first);
        if (g < 0)
            snprintf(err, errlen, "no CUDA GPU with UUID %s", first);
        return g;
    }
    char *end = NULL;
    long v = strtol(first, &end, 10);
    if (*end || end == first || v < 0 || v >= count) {
        snprintf(err, errlen, "no CUDA GPUs are available (CUDA_VISIBLE_DEVICES=\"%s\", %d simulated)",
                 cvd, count);
        return -1;
    }
    return (int)v;
}

int sw_gpumem_open(sw_gpumem_t *m, const char *set_name, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    const char *name = set_name && *set_name ? set_name : getenv("SIMGPU");
    if (!name || !*name) {
        snprintf(err, errlen, "no simulated GPU: set SIMGPU or --simgpu");
        return -1;
    }
    snprintf(m->set_name, sizeof(m->set_name), "%s", name);
    char e[256] = "";
    m->gpu = simgpu_open(name, e, sizeof(e));
    if (!m->gpu) {
        snprintf(err, errlen, "simulated GPU %s: %s", name, e);
        return -1;
    }
    m->index = pick_device(m->gpu, err, errlen);
    if (m->index < 0) {
        simgpu_close(m->gpu);
        m->gpu = NULL;
        return -1;
    }
    simgpu_info_t info;
    if (simgpu_info(m->gpu, m->index, &info) == 0)
        m->total = info.total;
    return 0;
}

int sw_gpumem_grow_context(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap)
{
    if (raw_alloc_as(m, bytes, true, oom, cap) != 0)
        return -1;
    m->context += bytes;
    note_peak(m);
    return 0;
}

int sw_gpumem_grow_resident(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap)
{
    if (raw_alloc(m, bytes, oom, cap) != 0)
        return -1;
    m->resident += bytes;
    note_peak(m);
    return 0;
}

int sw_gpumem_grow_leak(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap)
{
    if (raw_alloc(m, bytes, oom, cap) != 0)
        return -1;
    m->leaked += bytes;
    note_peak(m);
    return 0;
}

uint64_t sw_gpumem_shrink_resident(sw_gpumem_t *m, uint64_t keep)
{
    if (m->resident <= keep)
        return 0;
    uint64_t freed = m->resident - keep;
    raw_free(m, freed);
    m->resident = keep;
    return freed;
}

int sw_gpumem_request_grow(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap)
{
    uint64_t from_pool = bytes < m->pool ? bytes : m->pool;
    if (raw_alloc(m, bytes - from_pool, oom, cap) != 0)
        return -1;
    m->pool -= from_pool;
    m->active += bytes;
    note_peak(m);
    return 0;
}

void sw_gpumem_request_release(sw_gpumem_t *m, uint64_t bytes, bool keep_cached)
{
    if (bytes > m->active)
        bytes = m->active;
    m->active -= bytes;
    if (keep_cached)
        m->pool += bytes;
    else
        raw_free(m, bytes);
}

uint64_t sw_gpumem_clear_cache(sw_gpumem_t *m)
{
    uint64_t freed = m->pool;
    raw_free(m, freed);
    m->pool = 0;
    return freed;
}

uint64_t sw_gpumem_held_measured(sw_gpumem_t *m)
{
    return simgpu_held(m->gpu, m->index);
}

int sw_gpumem_info(sw_gpumem_t *m, simgpu_info_t *info)
{
    return simgpu_info(m->gpu, m->index, info);
}

void sw_gpumem_set_utilization(sw_gpumem_t *m, unsigned percent)
{
    simgpu_set_utilization(m->gpu, m->index, percent);
}
