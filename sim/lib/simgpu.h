/*
 * simgpu: simulated GPUs in POSIX shared memory, the one way into the simulation for
 * simgpu (CLI), libnvidia-ml-sim.so and simworker.
 *
 * A simulated GPU set is named (NAME -> shm object "/simgpu.NAME"); it holds N GPUs, each
 * with a total memory size, a model name, a UUID, and a table of allocations per process.
 * Any number of processes may map it and allocate concurrently: a robust, process-shared
 * mutex guards the tables (a process SIGKILLed while holding it does not wedge the rest).
 *
 * Allocation is like cudaMalloc: simgpu_alloc either takes the bytes for the calling
 * process or fails (-1, errno ENOMEM) when used + bytes > total. Memory belongs to a pid.
 * A process that dies (even by SIGKILL) is detected on the next access by anyone: its pid
 * is gone, or its /proc starttime changed (pid reuse); its memory is then released after the
 * set's release delay (the driver's lag), scaled by SIMGPU_TIMESCALE. Until then it still
 * shows as used, held by that (dead) pid, as NVML does.
 *
 * Time: simgpu_timescale() reads SIMGPU_TIMESCALE (default 1.0; 0.01 = 100x faster);
 * simgpu_scaled_ms() applies it to a simulated duration.
 * Return convention: 0 ok, -1 error (errno set; err text where a buffer is given).
 */
#ifndef VRAMD_SIM_SIMGPU_H
#define VRAMD_SIM_SIMGPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SIMGPU_MAX_GPUS 16
#define SIMGPU_MAX_PROCS 256 /* allocation entries (processes) per GPU */
#define SIMGPU_NAME_MAX 96
#define SIMGPU_UUID_LEN 96

typedef struct simgpu simgpu_t;

typedef struct simgpu_info {
    char name[SIMGPU_NAME_MAX]; /* "NVIDIA GeForce RTX 4090" */
    char uuid[SIMGPU_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", stable per set+index */
    uint64_t total;
    uint64_t used; /* all allocations, dead-but-not-yet-released included */
    uint64_t free;
    unsigned utilization_gpu;    /* 0..100, set by simworkers while running requests */
    unsigned utilization_memory; /* 0..100: used/total */
} simgpu_info_t;

typedef struct simgpu_proc {
    pid_t pid;
    uint64_t used;
    bool dead; /* exited, memory not yet released */
} simgpu_proc_t;

/* Create a new set (fails if it exists). release_delay_ms is in simulated time. */
int simgpu_create(const char *name, int n_gpus, uint64_t memory_per_gpu, const char *model_name,
                  uint64_t release_delay_ms, char *err, size_t errlen);
/* Remove a set (the shm object); processes that have it mapped keep their mapping. */
int simgpu_remove(const char *name, char *err, size_t errlen);
/* Map an existing set; name NULL = getenv("SIMGPU"). */
simgpu_t *simgpu_open(const char *name, char *err, size_t errlen);
void simgpu_close(simgpu_t *s);

int simgpu_count(simgpu_t *s);
int simgpu_info(simgpu_t *s, int gpu, simgpu_info_t *out);
/* Processes holding memory on gpu (live and dead-pending-release). *n = how many exist;
 * at most cap are written. */
int simgpu_processes(simgpu_t *s, int gpu, simgpu_proc_t *out, size_t cap, size_t *n);

/* Allocate/free for the calling process. alloc fails with errno ENOMEM when it does not fit. */
int simgpu_alloc(simgpu_t *s, int gpu, uint64_t bytes);
int simgpu_free(simgpu_t *s, int gpu, uint64_t bytes);
/* Bytes the calling process holds on gpu. */
uint64_t simgpu_held(simgpu_t *s, int gpu);
/* Utilization the calling process reports (max over live processes is what NVML shows). */
int simgpu_set_utilization(simgpu_t *s, int gpu, unsigned percent);

/* Detect dead processes and release what is due. Every call above does this too. */
void simgpu_reap(simgpu_t *s);

double simgpu_timescale(void);
uint64_t simgpu_scaled_ms(uint64_t simulated_ms);

/* Additions (simgpu.c's owner): the set's release delay as given at creation (simulated) and
 * as applied (real ms, scaled once by the creator's SIMGPU_TIMESCALE); the index of the GPU
 * with this UUID (-1, errno ENOENT when none); whether NAME is a valid set name
 * (1-200 of [A-Za-z0-9._-], not starting with '.'). alloc fails with errno ENOSPC when
 * SIMGPU_MAX_PROCS processes already hold memory on the GPU; free with EINVAL when freeing
 * more than the process holds. */
int simgpu_release_delay(simgpu_t *s, uint64_t *simulated_ms, uint64_t *real_ms);
int simgpu_find_uuid(simgpu_t *s, const char *uuid);
bool simgpu_name_valid(const char *name);

#endif
