/*
 * cudadrv: simworker's device memory through the CUDA driver API, as a real server's
 * framework reaches it: the driver library loaded with dlopen ($VRAMD_CUDA_LIBRARY, else
 * libcuda-sim.so beside the binary: <dir of the executable>/../lib/libcuda-sim.so), its entry
 * points with dlsym, or (via_proc_address) with cuGetProcAddress_v2 as the CUDA runtime does.
 * So a CUDA shim in LD_PRELOAD (libvramd-cuda.so) sees simworker's allocations exactly as it
 * sees PyTorch's. Without a driver library simworker allocates on simgpu directly (gpumem.c).
 *
 * Allocations are a stack of (pointer, bytes); sw_cuda_free(n) frees from the top, and when
 * n ends inside an allocation that one is freed and its remainder allocated again (a smaller
 * allocation right after a larger free). Invariant: the stack's sum is what this module holds
 * through the driver. One thread (simworker's loop): the context is made current once.
 * Return convention: 0 ok, -1 error (errno ENOMEM: the driver's CUDA_ERROR_OUT_OF_MEMORY).
 */
#ifndef VRAMD_SIM_WORKER_CUDADRV_H
#define VRAMD_SIM_WORKER_CUDADRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sw_cuda sw_cuda_t;

/* NULL with why filled when no driver library could be used (then simgpu directly). */
sw_cuda_t *sw_cuda_open(bool via_proc_address, char *why, size_t whylen);
/* Allocate bytes (in allocations of at most the data chunk, when one is set). */
int sw_cuda_alloc(sw_cuda_t *d, uint64_t bytes);
/* --data-chunk: allocations of at most chunk bytes, the first 64 KiB of each written with
 * bytes of this process's own (a test's way to see data survive a park). */
void sw_cuda_set_data_chunk(sw_cuda_t *d, uint64_t chunk);
/* Read every allocation's data back: its FNV-1a checksum, and how many allocations differ
 * from what was written; -1 without a data chunk or when a copy failed. */
int sw_cuda_data_check(sw_cuda_t *d, uint64_t *checksum, unsigned *bad);
/* Free bytes from the most recent allocations (at most what is held). */
void sw_cuda_free(sw_cuda_t *d, uint64_t bytes);
uint64_t sw_cuda_held(const sw_cuda_t *d);
/* cuMemGetInfo_v2 as this process sees it (through a shim: its grant's view). */
int sw_cuda_mem_info(sw_cuda_t *d, uint64_t *free_bytes, uint64_t *total);
const char *sw_cuda_library(const sw_cuda_t *d);

#endif
