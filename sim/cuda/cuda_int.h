/*
 * cuda_int.h: what the simulated driver's files share (cuda_sim.c: init and checkpoints;
 * cuda_mem.c: contexts and the allocation table; cuda_vmm.c: virtual memory management,
 * host memory and copies). Internal to sim/cuda.
 *
 * The allocation table: one entry per device allocation of this process (cuMemAlloc and its
 * family, cuMemCreate's physical memory), under the table lock. An entry keeps the real bytes
 * written into its first CUDA_REAL_BYTES_MAX bytes (data, grown to the furthest byte written),
 * so a test can check that data survives a park; bytes never written (or past that) are on
 * the simulated GPU only: a read leaves them in the destination as they were (unspecified, as
 * uninitialised device memory is on a GPU), a write past the kept range is dropped.
 */
#ifndef VRAMD_SIM_CUDA_INT_H
#define VRAMD_SIM_CUDA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simgpu.h"

#define CUDA_MEM_ALLOCS_MAX 4096
#define CUDA_REAL_BYTES_MAX (64ULL << 20)
#define CUDA_ERR_INVALID_VALUE 1
#define CUDA_ERR_OUT_OF_MEMORY 2
#define CUDA_ERR_NOT_INITIALIZED 3
#define CUDA_ERR_NO_DEVICE 100
#define CUDA_ERR_INVALID_DEVICE 101
#define CUDA_ERR_INVALID_CONTEXT 201
#define CUDA_ERR_NOT_FOUND 500

typedef int CUresult_t;
typedef int CUdevice_t;
typedef uint64_t CUdeviceptr_t;
typedef void *CUstream_t;

typedef struct alloc_entry {
    CUdeviceptr_t ptr; /* 0: free slot */
    int gpu;
    uint64_t bytes;
    unsigned char *data; /* real bytes [0, data_len), made at the first write */
    uint64_t data_len;   /* at most CUDA_REAL_BYTES_MAX */
} alloc_entry_t;

simgpu_t *sim_cuda_set(void);
/* The table lock, and the entry whose allocation holds device address p (*off: p's offset
 * in it), NULL when none; with the lock held. */
void sim_alloc_lock(void);
void sim_alloc_unlock(void);
alloc_entry_t *sim_alloc_find_locked(CUdeviceptr_t p, uint64_t *off);
/* cuda_sim.c: is [p, p + n) inside a custom-storage mapping of an operation in flight (another
 * process's memory mapped here: copies through it take the link's time, no bytes move)? */
bool sim_custom_mapping(CUdeviceptr_t p, uint64_t n);

/* cuda_sim.c: custom storage present ($SIMGPU_CUSTOM_STORAGE=1), its completion call */
bool sim_custom_storage(void);
struct CUcheckpointOperation_st;
int cuCheckpointOperationComplete(struct CUcheckpointOperation_st *handle);

/* cuda_vmm.c's entry points, for cuGetProcAddress (cuda_mem.c) */
CUresult_t cuMemGetAllocationGranularity(size_t *granularity, const void *prop, int option);
CUresult_t cuMemAddressReserve(CUdeviceptr_t *ptr, size_t size, size_t alignment, CUdeviceptr_t addr,
                               unsigned long long flags);
CUresult_t cuMemAddressFree(CUdeviceptr_t ptr, size_t size);
CUresult_t cuMemMap(CUdeviceptr_t ptr, size_t size, size_t offset, uint64_t handle, unsigned long long flags);
CUresult_t cuMemUnmap(CUdeviceptr_t ptr, size_t size);
CUresult_t cuMemSetAccess(CUdeviceptr_t ptr, size_t size, const void *desc, size_t count);
CUresult_t cuMemHostAlloc(void **pp, size_t bytes, unsigned flags);
CUresult_t cuMemAllocHost_v2(void **pp, size_t bytes);
CUresult_t cuMemFreeHost(void *p);
CUresult_t cuMemcpyHtoD_v2(CUdeviceptr_t dst, const void *src, size_t n);
CUresult_t cuMemcpyDtoH_v2(void *dst, CUdeviceptr_t src, size_t n);
CUresult_t cuMemcpyHtoDAsync_v2(CUdeviceptr_t dst, const void *src, size_t n, CUstream_t stream);
CUresult_t cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr_t src, size_t n, CUstream_t stream);
CUresult_t cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr_t dst, const void *src, size_t n, CUstream_t stream);
CUresult_t cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr_t src, size_t n, CUstream_t stream);
CUresult_t cuStreamSynchronize(CUstream_t stream);

#endif
