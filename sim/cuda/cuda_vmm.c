/*
 * cuda_vmm: the simulated driver's virtual memory management, host memory and copies, as
 * NVIDIA's Driver API reference documents them (what a park tier that keeps a process's
 * device addresses needs: reserve an address range, map physical memory from cuMemCreate at
 * it, copy it to pinned host memory and back).
 *
 * Behaviour:
 *   cuMemGetAllocationGranularity  2 MiB, minimum and recommended.
 *   cuMemAddressReserve / cuMemAddressFree  a range of this process's simulated address
 *              space (granularity-aligned sizes; a requested fixed address is a hint, not
 *              honoured, as the driver may do); freeing needs the exact range, unmapped.
 *   cuMemMap / cuMemUnmap  a whole cuMemCreate handle (offset 0, size = its size) at an
 *              address inside a reservation, not overlapping another mapping; unmapping
 *              needs the exact mapping. cuMemSetAccess: the range must be mapped.
 *   cuMemHostAlloc / cuMemAllocHost_v2 / cuMemFreeHost  anonymous mappings (pinning is not
 *              simulated; the bytes are real); a copy from one moves real bytes only up to the
 *              last page of it ever touched (mincore), the rest being zeros.
 *   cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 (+ Async_v2, _ptsz)  through an allocation's address
 *              (cuMemAlloc's pointer, or a mapped range): real bytes for the first
 *              CUDA_REAL_BYTES_MAX of an allocation (cuda_int.h: never-written bytes read
 *              back unspecified, as on a GPU), and the time the copy takes over the
 *              set's PCIe bandwidth (simgpu_pcie_bandwidth, scaled by SIMGPU_TIMESCALE),
 *              slept in the caller; async copies complete before they return (stream order
 *              holds trivially). cuStreamSynchronize: nothing to wait for.
 * Errors: an address that is no allocation or mapping, or a copy past one's end:
 * CUDA_ERROR_INVALID_VALUE; before cuInit: CUDA_ERROR_NOT_INITIALIZED.
 *
 * Invariants: the reservation and mapping tables (bounded: CUDA_VMM_MAX each) change under
 * the allocation table's lock, as do the allocations' real bytes.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cuda_int.h"

#define CUDA_VMM_MAX 1024
#define CUDA_GRANULARITY (2ULL << 20)

typedef uint64_t CUmemHandle_t;

typedef struct range {
    CUdeviceptr_t va; /* 0: free slot */
    uint64_t size;
    CUmemHandle_t handle; /* mappings: the physical allocation mapped there */
} range_t;

static range_t reserved[CUDA_VMM_MAX];
static range_t mapped[CUDA_VMM_MAX];
static CUdeviceptr_t next_va = 0x7e0000000000ULL;

CUresult_t cuMemGetAllocationGranularity(size_t *granularity, const void *prop, int option)
{
    if (!granularity || !prop || (option != 0 && option != 1))
        return CUDA_ERR_INVALID_VALUE;
    *granularity = CUDA_GRANULARITY;
    return 0;
}

static bool overlaps(const range_t *r, CUdeviceptr_t va, uint64_t size)
{
    return r->va && va < r->va + r->size && r->va < va + size;
}

CUresult_t cuMemAddressReserve(CUdeviceptr_t *ptr, size_t size, size_t alignment, CUdeviceptr_t addr,
                               unsigned long long flags)
{
    (void)alignment;
    (void)addr; /* a hint */
    if (!ptr || size == 0 || size % CUDA_GRANULARITY || flags != 0)
        return CUDA_ERR_INVALID_VALUE;
    if (!sim_cuda_set())
        return CUDA_ERR_NOT_INITIALIZED;
    CUresult_t rc = CUDA_ERR_OUT_OF_MEMORY;
    sim_alloc_lock();
    for (size_t i = 0; i < CUDA_VMM_MAX; i++) {
        if (reserved[i].va)
            continue;
        reserved[i] = (range_t){next_va, size, 0};
        *ptr = next_va;
        next_va += size + CUDA_GRANULARITY; /* a guard gap; never reused */
        rc = 0;
        break;
    }
    sim_alloc_unlock();
    return rc;
}

CUresult_t cuMemAddressFree(CUdeviceptr_t ptr, size_t size)
{
    CUresult_t rc = CUDA_ERR_INVALID_VALUE;
    sim_alloc_lock();
    for (size_t i = 0; i < CUDA_VMM_MAX; i++) {
        if (reserved[i].va != ptr || reserved[i].size != size || ptr == 0)
            continue;
        bool busy = false;
        for (size_t k = 0; k < CUDA_VMM_MAX; k++)
            busy = busy || overlaps(&mapped[k], ptr, size);
        if (!busy) {
            reserved[i].va = 0;
            rc = 0;
        }
        break;
    }
    sim_alloc_unlock();
    return rc;
}

CUresult_t cuMemMap(CUdeviceptr_t ptr, size_t size, size_t offset, uint64_t handle, unsigned long long flags)
{
    if (offset != 0 || flags != 0 || size == 0)
        return CUDA_ERR_INVALID_VALUE;
    CUresult_t rc = CUDA_ERR_INVALID_VALUE;
    sim_alloc_lock();
    uint64_t off = 0;
    const alloc_entry_t *e = sim_alloc_find_locked(handle, &off);
    bool inside = false, clash = false;
    for (size_t i = 0; i < CUDA_VMM_MAX; i++) {
        inside = inside || (reserved[i].va && ptr >= reserved[i].va && ptr + size <= reserved[i].va + reserved[i].size);
        clash = clash || overlaps(&mapped[i], ptr, size);
    }
    if (e && off == 0 && e->bytes == size && inside && !clash) {
        for (size_t i = 0; i < CUDA_VMM_MAX; i++) {
            if (!mapped[i].va) {
                mapped[i] = (range_t){ptr, size, handle};
                rc = 0;
                break;
            }
        }
        if (rc)
            rc = CUDA_ERR_OUT_OF_MEMORY;
    }
    sim_alloc_unlock();
    return rc;
}

CUresult_t cuMemUnmap(CUdeviceptr_t ptr, size_t size)
{
    CUresult_t rc = CUDA_ERR_INVALID_VALUE;
    sim_alloc_lock();
    for (size_t i = 0; i < CUDA_VMM_MAX; i++) {
        if (mapped[i].va == ptr && mapped[i].size == size && ptr) {
            mapped[i].va = 0;
            rc = 0;
            break;
        }
    }
    sim_alloc_unlock();
    return rc;
}

CUresult_t cuMemSetAccess(CUdeviceptr_t ptr, size_t size, const void *desc, size_t count)
{
    if (!desc || count == 0)
        return CUDA_ERR_INVALID_VALUE;
    CUresult_t rc = CUDA_ERR_INVALID_VALUE;
    sim_alloc_lock();
    for (size_t i = 0; i < CUDA_VMM_MAX; i++)
        if (mapped[i].va && ptr >= mapped[i].va && ptr + size <= mapped[i].va + mapped[i].size)
            rc = 0;
    sim_alloc_unlock();
    return rc;
}

/* ---- host memory ---- */

/* Host memory of this driver: anonymous mappings, so a copy from one moves only up to its
 * last page ever touched (mincore): pages never touched are zeros, and the simulation need
 * not read them (a 4 GiB park holds the test's few real bytes, not 4 GiB). */
typedef struct host_block {
    unsigned char *p; /* NULL: free slot */
    uint64_t size;
} host_block_t;

static host_block_t hosts[CUDA_VMM_MAX];

static host_block_t *host_find_locked(const void *p)
{
    for (size_t i = 0; i < CUDA_VMM_MAX; i++)
        if (hosts[i].p && (const unsigned char *)p >= hosts[i].p && (const unsigned char *)p < hosts[i].p + hosts[i].size)
            return &hosts[i];
    return NULL;
}

/* How many of the n bytes at p (inside a host block) matter: up to the end of the last page
 * of them that was ever touched (clamped to n). */
static uint64_t touched_extent(const unsigned char *p, uint64_t n)
{
    const uint64_t page = 4096;
    uintptr_t first = (uintptr_t)p & ~(uintptr_t)(page - 1);
    uint64_t pages = ((uintptr_t)p + n - first + page - 1) / page;
    unsigned char vec[1024];
    uint64_t last_end = 0;
    for (uint64_t done = 0; done < pages; done += sizeof vec) {
        uint64_t k = pages - done < sizeof vec ? pages - done : sizeof vec;
        if (mincore((void *)(first + done * page), k * page, vec) != 0)
            return n; /* cannot tell: every byte */
        for (uint64_t i = 0; i < k; i++)
            if (vec[i] & 1)
                last_end = (done + i + 1) * page;
    }
    uint64_t lead = (uintptr_t)p - first;
    uint64_t ext = last_end > lead ? last_end - lead : 0;
    return ext < n ? ext : n;
}

CUresult_t cuMemHostAlloc(void **pp, size_t bytes, unsigned flags)
{
    if (!pp || bytes == 0 || flags > 0xf)
        return CUDA_ERR_INVALID_VALUE;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERR_OUT_OF_MEMORY;
    CUresult_t rc = CUDA_ERR_OUT_OF_MEMORY;
    sim_alloc_lock();
    for (size_t i = 0; i < CUDA_VMM_MAX; i++)
        if (!hosts[i].p) {
            hosts[i] = (host_block_t){m, bytes};
            rc = 0;
            break;
        }
    sim_alloc_unlock();
    if (rc != 0)
        munmap(m, bytes);
    else
        *pp = m;
    return rc;
}

CUresult_t cuMemAllocHost_v2(void **pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

CUresult_t cuMemFreeHost(void *p)
{
    sim_alloc_lock();
    host_block_t *h = host_find_locked(p);
    host_block_t gone = h && h->p == p ? *h : (host_block_t){0};
    if (gone.p)
        h->p = NULL;
    sim_alloc_unlock();
    if (!gone.p)
        return CUDA_ERR_INVALID_VALUE;
    munmap(gone.p, gone.size);
    return 0;
}

/* ---- copies ---- */

/* The allocation behind a device address (a pointer of the table, or inside a mapping), with
 * the address's offset in it; the lock held. */
static alloc_entry_t *resolve_locked(CUdeviceptr_t p, uint64_t *off)
{
    alloc_entry_t *e = sim_alloc_find_locked(p, off);
    if (e)
        return e;
    for (size_t i = 0; i < CUDA_VMM_MAX; i++) {
        if (mapped[i].va && p >= mapped[i].va && p - mapped[i].va < mapped[i].size) {
            uint64_t base_off = 0;
            e = sim_alloc_find_locked(mapped[i].handle, &base_off);
            *off = p - mapped[i].va + base_off;
            return e;
        }
    }
    return NULL;
}

/* Sleep what n bytes take over the set's PCIe link (simulated seconds, scaled). */
static void link_time(size_t n)
{
    simgpu_t *s = sim_cuda_set();
    uint64_t bw = s ? simgpu_pcie_bandwidth(s) : 0;
    if (!bw || !n)
        return;
    double ns = (double)n / (double)bw * 1e9 * simgpu_timescale();
    struct timespec ts = {(time_t)(ns / 1e9), (long)((uint64_t)ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static CUresult_t copy(CUdeviceptr_t dev, void *host, size_t n, bool to_device)
{
    if (!host && n)
        return CUDA_ERR_INVALID_VALUE;
    if (!sim_cuda_set())
        return CUDA_ERR_NOT_INITIALIZED;
    CUresult_t rc = 0;
    sim_alloc_lock();
    uint64_t off = 0;
    alloc_entry_t *e = resolve_locked(dev, &off);
    if (!e && sim_custom_mapping(dev, n)) {
        rc = 0; /* another process's memory (custom storage): only the link's time */
    } else if (!e || n > e->bytes - off) {
        rc = CUDA_ERR_INVALID_VALUE;
    } else if (to_device && off < CUDA_REAL_BYTES_MAX) { /* kept: [off, end) of the first MAX bytes */
        uint64_t real = host_find_locked(host) ? touched_extent(host, n) : n;
        uint64_t end = off + real < CUDA_REAL_BYTES_MAX ? off + real : CUDA_REAL_BYTES_MAX;
        if (end > e->data_len) {
            unsigned char *grown = realloc(e->data, end);
            if (!grown) {
                rc = CUDA_ERR_OUT_OF_MEMORY;
            } else {
                memset(grown + e->data_len, 0, end - e->data_len);
                e->data = grown;
                e->data_len = end;
            }
        }
        if (rc == 0 && end > off)
            memcpy(e->data + off, host, end - off);
        uint64_t zero_to = off + n < e->data_len ? off + n : e->data_len; /* untouched host pages are zeros */
        if (rc == 0 && zero_to > end)
            memset(e->data + end, 0, zero_to - end);
    } else if (!to_device && off < e->data_len) { /* the rest of the destination is left as it is */
        uint64_t end = off + n < e->data_len ? off + n : e->data_len;
        memcpy(host, e->data + off, end - off);
    }
    sim_alloc_unlock();
    if (rc == 0)
        link_time(n);
    return rc;
}

CUresult_t cuMemcpyHtoD_v2(CUdeviceptr_t dst, const void *src, size_t n) { return copy(dst, (void *)src, n, true); }

CUresult_t cuMemcpyDtoH_v2(void *dst, CUdeviceptr_t src, size_t n) { return copy(src, dst, n, false); }

CUresult_t cuMemcpyHtoDAsync_v2(CUdeviceptr_t dst, const void *src, size_t n, CUstream_t stream)
{
    (void)stream;
    return copy(dst, (void *)src, n, true);
}

CUresult_t cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr_t src, size_t n, CUstream_t stream)
{
    (void)stream;
    return copy(src, dst, n, false);
}

CUresult_t cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr_t dst, const void *src, size_t n, CUstream_t stream)
{
    return cuMemcpyHtoDAsync_v2(dst, src, n, stream);
}

CUresult_t cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr_t src, size_t n, CUstream_t stream)
{
    return cuMemcpyDtoHAsync_v2(dst, src, n, stream);
}

CUresult_t cuStreamSynchronize(CUstream_t stream)
{
    (void)stream;
    return sim_cuda_set() ? 0 : CUDA_ERR_NOT_INITIALIZED;
}
