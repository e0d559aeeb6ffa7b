/*
 * cuda_storage: the CUDA driver checkpoint's custom storage (CUDA 13.4: customStorageInfo_out
 * in CUcheckpointCheckpointArgs / CUcheckpointRestoreArgs, cuCheckpointOperationComplete).
 * Where the driver has it, a checkpoint does not copy the process's GPU memory itself: it maps
 * it into vramd, which copies it into pinned host memory of its own (cuMemHostAlloc,
 * portable: the DMA lands in place, at the link's rate; on the driver thread of the
 * operation), and completes the operation; a restore maps the process's new GPU memory and
 * vramd copies the bytes back, then frees them. The driver's own copy runs at 1.5-6.6 GB/s
 * (shared/FIELD.md).
 *
 * Used by cuda.c only (internal to src/gpu). Probed through cuGetProcAddress (the driver's
 * "cuCheckpointOperationComplete"): without it, cuda_storage_open says why and cuda.c keeps
 * the driver's own copy. vramd makes a CUDA context of its own on each device it copies
 * from (the primary context, retained once: the driver's usual few hundred MiB of GPU memory
 * per device, which NVML shows as vramd's).
 *
 * Copies: per device, queued back to back in pieces of CUDA_STORAGE_PIECE_BYTES on the stream
 * the driver gave, then one synchronize. Why pinned storage and not a small pinned staging pool
 * into pageable memory: staging puts a memcpy of every byte on the critical path (measured
 * with the simulated driver: 0.8 s more per 8 GiB swap, docs/benchmarks.md).
 * The kept bytes: one entry per parked pid (a list under a mutex), one pinned buffer per
 * device, freed by the restore that used them, by cuda_storage_forget, at the next save once
 * the pid is gone (it died while parked), or at close.
 * Invariants: an operation the driver started is always completed (cuCheckpointOperationComplete),
 * also after a copy failed: a checkpoint whose bytes could not all be kept completes with
 * the error reported and its entry dropped (a restore of it fails: the caller stops the
 * process); a restore without an entry for its pid fails the same way.
 * Return convention: 0 ok, -1 error (err says why).
 */
#ifndef VRAMD_GPU_CUDA_STORAGE_H
#define VRAMD_GPU_CUDA_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CUDA_STORAGE_PIECE_BYTES (64ull << 20)

typedef struct cuda_storage cuda_storage_t;

/* The calls of the driver loaded as lib (through its cuGetProcAddress_v2); NULL with why
 * filled when it has no custom storage (or out of memory). */
cuda_storage_t *cuda_storage_open(void *lib, char *why, size_t whylen);
void cuda_storage_close(cuda_storage_t *st);
/* info: the CUcheckpointCustomStorageInfo a checkpoint (save) or restore (load) returned.
 * save keeps the bytes for pid and completes; load copies pid's bytes back, completes and
 * frees them. *bytes: the bytes copied; *copy_us: the time the copies and completion took. */
int cuda_storage_save(cuda_storage_t *st, pid_t pid, void *info, uint64_t *bytes, uint64_t *copy_us, char *err,
                      size_t errlen);
int cuda_storage_load(cuda_storage_t *st, pid_t pid, void *info, uint64_t *bytes, uint64_t *copy_us, char *err,
                      size_t errlen);
/* Drop what is kept for pid (it died while parked). */
void cuda_storage_forget(cuda_storage_t *st, pid_t pid);
/* Host bytes kept now, over every pid. */
uint64_t cuda_storage_held(cuda_storage_t *st);

#endif
