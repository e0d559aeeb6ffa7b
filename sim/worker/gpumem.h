/*
 * gpumem: the simulated worker's GPU memory, kept the way a PyTorch process keeps it.
 *
 * The process holds, on one simulated GPU (simgpu), the sum of:
 *   context   CUDA-context-like overhead, taken at start, never returned
 *   resident  model weights (grows while loading; after an unload only the residue stays)
 *   active    per-request memory of the requests now running
 *   pool      the caching allocator's cached-but-free blocks (--cache keep): a request takes
 *             from the pool first and allocates only the difference; /clear_cache/ (like
 *             torch.cuda.empty_cache) returns the pool to the GPU
 *   leaked    never returned while the process lives
 * Invariant: context + resident + active + pool + leaked == simgpu_held() of this process
 * (checked by sw_gpumem_check in debug paths). Other processes see all of it as used, as
 * NVML shows a real process's memory.
 *
 * Allocation is all-or-nothing: a grow that does not fit allocates nothing, leaves the pool
 * as it was, and writes PyTorch's out-of-memory text into the caller's buffer:
 *   CUDA out of memory. Tried to allocate 2.10 GiB (GPU 0; 5.60 GiB total capacity; 3.00 GiB
 *   already allocated; 1.95 GiB free; 3.40 GiB reserved in total by PyTorch) ...
 * ("GPU 0" because a worker sees its one visible device as device 0.)
 *
 * The GPU is the simgpu set named by the caller (or $SIMGPU), device = the first entry of
 * $CUDA_VISIBLE_DEVICES (an index or a GPU UUID; unset = 0; empty = no GPU).
 * Return convention: 0 ok, -1 error (ENOMEM: out of memory with the text in oom/err).
 */
#ifndef VRAMD_SIM_WORKER_GPUMEM_H
#define VRAMD_SIM_WORKER_GPUMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cudadrv.h"
#include "simgpu.h"

#define SW_OOM_TEXT_MAX 512

typedef struct sw_gpumem {
    simgpu_t *gpu;
    int index;
    char set_name[128];
    uint64_t total;
    uint64_t context;
    uint64_t resident;
    uint64_t active;
    uint64_t pool;
    uint64_t leaked;
    uint64_t peak; /* highest context+resident+active+pool+leaked seen */
    sw_cuda_t *cuda; /* NULL: simgpu directly; else every holding but the context goes
                      * through the CUDA driver API (cudadrv.h), as a framework's do */
} sw_gpumem_t;

int sw_gpumem_open(sw_gpumem_t *m, const char *set_name, char *err, size_t errlen);
/* From now on allocate through the CUDA driver API (cudadrv.h) when a driver library is
 * there (the context stays the driver's own, outside the allocation calls, as a real CUDA
 * context is); false (why filled) when simgpu stays in use. Call before any grow. */
bool sw_gpumem_use_driver(sw_gpumem_t *m, bool via_proc_address, char *why, size_t whylen);
/* What cuMemGetInfo tells this process (free, total): through the driver (and a shim in
 * LD_PRELOAD) when in use, else simgpu's figures. */
int sw_gpumem_driver_info(sw_gpumem_t *m, uint64_t *free_bytes, uint64_t *total);
/* Grow the allocator's pool by bytes (a cache sized at start, as vLLM's KV cache). */
int sw_gpumem_grow_pool(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap);

/* Raw grows of one kind of holding (context, resident, leaked): all or nothing. */
int sw_gpumem_grow_context(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap);
int sw_gpumem_grow_resident(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap);
int sw_gpumem_grow_leak(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap);
/* Frees resident memory down to keep bytes (keep >= resident: nothing). Returns freed. */
uint64_t sw_gpumem_shrink_resident(sw_gpumem_t *m, uint64_t keep);

/* A running request needs bytes more: taken from the pool first, the rest allocated. */
int sw_gpumem_request_grow(sw_gpumem_t *m, uint64_t bytes, char *oom, size_t cap);
/* A request is done with bytes: to the pool (keep) or back to the GPU (release). */
void sw_gpumem_request_release(sw_gpumem_t *m, uint64_t bytes, bool keep_cached);
/* torch.cuda.empty_cache(): returns the pool to the GPU. Returns the bytes freed. */
uint64_t sw_gpumem_clear_cache(sw_gpumem_t *m);

uint64_t sw_gpumem_held(const sw_gpumem_t *m); /* our own books */
uint64_t sw_gpumem_held_measured(sw_gpumem_t *m); /* what simgpu says we hold */
int sw_gpumem_info(sw_gpumem_t *m, simgpu_info_t *info);
void sw_gpumem_set_utilization(sw_gpumem_t *m, unsigned percent);
/* PyTorch's size formatting: "512 bytes", "12.00 KiB", "2.50 MiB", "23.65 GiB". */
void sw_format_torch_size(uint64_t bytes, char *out, size_t cap);

#endif
