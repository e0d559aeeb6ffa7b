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
 * A process that dies (even by SIGKILL) is detected on the next access by any process that
 * can see it (see "Pid namespaces"): its pid is gone, or its /proc starttime changed (pid
 * reuse), or it is a zombie; its memory is then released after the
 * set's release delay (the driver's lag), scaled by SIMGPU_TIMESCALE. Until then it still
 * shows as used, held by that (dead) pid, as NVML does.
 *
 * Pid namespaces (containers). The pids this API reports (simgpu_processes, park lists) are
 * host pids, as NVML's are: pids in the pid namespace of the process that created the set.
 * A process of another namespace (podman/docker with a private pid namespace, `unshare
 * --pid --fork --mount-proc`) is booked under its namespace's pid and starttime, and any
 * process of the creator's namespace that uses the set afterwards (vramd's NVML queries,
 * `simgpu show`, a host simworker) finds its host pid in /proc; until then it is reported as
 * pid 0 (simgpu_proc_t.ns_pid says which it is). A process only marks dead what it can see:
 * its own namespace's processes, or (creator's namespace) any translated one. What a
 * container needs: the set's shm object, /dev/shm/simgpu.NAME, shared with the host
 * (`-v /dev/shm/simgpu.NAME:/dev/shm/simgpu.NAME`, or --ipc=host); SIMGPU=NAME (and
 * SIMGPU_TIMESCALE as the host uses) in its environment; the simulated binaries and
 * libraries (simworker, libnvidia-ml-sim.so, libcuda-sim.so) bind-mounted or installed; its
 * own /proc (every container runtime mounts one). pid arguments (simgpu_cuda_*) are read in
 * the caller's namespace: host pids on the host side, the container's own pids inside it.
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
#define SIMGPU_MAX_LIMITS 64   /* per-cgroup limits per GPU */
#define SIMGPU_CGROUP_MAX 256  /* a cgroup directory's path, NUL included */

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
    pid_t pid; /* host pid (the creator's pid namespace); 0 while not known */
    uint64_t used;
    bool dead;       /* exited, memory not yet released */
    bool other_ns;   /* it lives in another pid namespace than the set's creator */
    pid_t ns_pid;    /* its pid in its own namespace (== pid when !other_ns) */
    uint64_t pid_ns; /* that namespace's inode (/proc/PID/ns/pid) */
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

/* ---- CUDA checkpoint state (simgpu_park.c), what libcuda-sim.so and simworker share ----
 *
 * Each process has a CUDA state: RUNNING (no park slot), LOCKED, CHECKPOINTED, FAILED, as
 * the driver's cuCheckpointProcess* calls move it:
 *   lock        RUNNING -> LOCKED. A process that registered (simgpu_gate_register, as
 *               simworker does) is asked to stop its GPU work and the call waits (up to
 *               timeout_ms, 0 = no limit) until it says it has (simgpu_gate_ack): ETIMEDOUT
 *               leaves it RUNNING. A process that did not register is locked at once, and
 *               its simgpu_alloc/simgpu_free fail with EBUSY until it runs again.
 *   checkpoint  LOCKED -> CHECKPOINTED: takes bytes / bandwidth (simulated, scaled by the
 *               caller's SIMGPU_TIMESCALE) in the caller, then moves the process's memory
 *               from every GPU (NVML no longer lists it) to its host account.
 *   restore     CHECKPOINTED -> LOCKED: ENOMEM (nothing changed) when the memory no longer
 *               fits each GPU it came from; else it is on the GPUs again at once, the copy
 *               takes bytes / bandwidth, then the host account is freed.
 *   unlock      LOCKED -> RUNNING; a registered process resumes its GPU work.
 * A process that dies is forgotten with its host bytes. An operation whose caller dies is
 * ended by the next access: a checkpoint is abandoned (LOCKED, memory still on the GPU), a
 * restore is completed (LOCKED, memory on the GPU).
 * Errors: ESRCH the pid is not a live process of this set (no memory on it, never
 * registered), EBUSY the process is not in the state the call needs or another call is at
 * work on it, ETIMEDOUT, ENOMEM, ENOSPC (the park table is full), EINVAL.
 */
#define SIMGPU_DEFAULT_PCIE_BW 20000000000ULL /* 20 GB/s: the link with pinned host memory (cuMemcpy) */
/* The driver's checkpoint does not run at the link's rate: measured on an H100 (driver 580),
 * 1.5-2.4 GB/s device to host and 3.5-6.6 GB/s back (shared/FIELD.md). */
#define SIMGPU_DEFAULT_CHECKPOINT_BW 2000000000ULL /* 2 GB/s */
#define SIMGPU_DEFAULT_RESTORE_BW 5000000000ULL    /* 5 GB/s */

enum simgpu_cuda_state {
    SIMGPU_CUDA_RUNNING = 0,
    SIMGPU_CUDA_LOCKED = 1,
    SIMGPU_CUDA_CHECKPOINTED = 2,
    SIMGPU_CUDA_FAILED = 3
};
enum simgpu_park_op { SIMGPU_OP_NONE = 0, SIMGPU_OP_CHECKPOINTING = 1, SIMGPU_OP_RESTORING = 2 };

typedef struct simgpu_park_info {
    pid_t pid;       /* host pid, as simgpu_proc_t's; 0 while not known */
    bool other_ns;   /* in another pid namespace than the set's creator */
    pid_t ns_pid;    /* its pid in its own namespace */
    int state; /* enum simgpu_cuda_state */
    int op;    /* enum simgpu_park_op */
    bool gate; /* registered */
    uint64_t parked[SIMGPU_MAX_GPUS];
    uint64_t parked_total;
} simgpu_park_info_t;

const char *simgpu_cuda_state_name(int state); /* "running", "locked", ... */
const char *simgpu_park_op_name(int op);       /* "", "checkpointing", "restoring" */
/* The set's copy bandwidth in bytes per simulated second (from simgpu create). */
uint64_t simgpu_pcie_bandwidth(simgpu_t *s);
/* Real milliseconds that copying bytes takes in this process (bandwidth, SIMGPU_TIMESCALE). */
uint64_t simgpu_copy_ms(simgpu_t *s, uint64_t bytes);
/* The driver checkpoint's rates (out: device to host; else back), bytes per simulated second
 * (simgpu create --checkpoint-bandwidth / --restore-bandwidth, $SIMGPU_CHECKPOINT_BW /
 * $SIMGPU_RESTORE_BW, else the defaults above), and the real milliseconds bytes take. */
uint64_t simgpu_checkpoint_bandwidth(simgpu_t *s, bool out);
uint64_t simgpu_checkpoint_ms(simgpu_t *s, uint64_t bytes, bool out);
/* Parse "20GB/s", "16GiB/s", "2e9" (bytes per second). 0 ok, -1 bad. */
int simgpu_parse_bandwidth(const char *text, uint64_t *out);

/* Per-cgroup limits, as NVIDIA's driver r615 has them (nvmlDeviceSetMemoryLimits_v1): a
 * hard limit on what the processes of a cgroup v2 directory (and of the cgroups under it)
 * hold on gpu together. cgroup is the directory's full path ("/sys/fs/cgroup/a/b"; a
 * trailing '/' is ignored); it must exist (ENOENT) and fit SIMGPU_CGROUP_MAX (ENAMETOOLONG).
 * soft 0 and hard SIMGPU_LIMIT_NONE clear it. An allocation past it fails with ENOMEM in the
 * process that makes it; a limit may be set below what its cgroup holds already (nothing
 * is taken back). simgpu_mem_view is what the calling process sees (cuMemGetInfo): under a
 * limit, total = the limit and free = min(the card's free, the room under it). A process's
 * cgroup is read once, when it opens the set (/proc/self/cgroup's "0::" line, under the
 * cgroup2 mount): one that moves afterwards keeps its first. A limit whose directory is
 * removed is dropped (NVIDIA: removing the cgroup clears its limits) and counted:
 * simgpu_limits_dropped. simgpu_limit_get: ENOENT when no limit is set there. */
#define SIMGPU_LIMIT_NONE UINT64_MAX
typedef struct simgpu_limit {
    char cgroup[SIMGPU_CGROUP_MAX];
    uint64_t soft, hard, used;
} simgpu_limit_t;
int simgpu_limit_set(simgpu_t *s, int gpu, const char *cgroup, uint64_t soft, uint64_t hard);
int simgpu_limit_get(simgpu_t *s, int gpu, const char *cgroup, simgpu_limit_t *out);
int simgpu_limit_list(simgpu_t *s, int gpu, simgpu_limit_t *out, size_t cap, size_t *n);
uint64_t simgpu_limits_dropped(simgpu_t *s);
int simgpu_mem_view(simgpu_t *s, int gpu, uint64_t *free_bytes, uint64_t *total);

/* The parked process's side. */
int simgpu_gate_register(simgpu_t *s);
/* 1: the calling process must hold its GPU work (*seq: the lock request to acknowledge once
 * it has, 0 none); 0: it may run; -1 error. Cheap: no reaping, no /proc reads. */
int simgpu_gate_poll(simgpu_t *s, uint32_t *seq);
int simgpu_gate_ack(simgpu_t *s, uint32_t seq);

/* The controller's side (libcuda-sim.so). */
int simgpu_cuda_state(simgpu_t *s, pid_t pid, int *state);
int simgpu_cuda_lock(simgpu_t *s, pid_t pid, uint64_t timeout_ms);
int simgpu_cuda_checkpoint(simgpu_t *s, pid_t pid);
int simgpu_cuda_restore(simgpu_t *s, pid_t pid);
/* The same in two halves, for a caller that copies the bytes itself (the driver's custom
 * storage): _begin starts the operation (the process must be LOCKED, resp. CHECKPOINTED; a
 * restore puts the parked bytes back on the GPUs first, ENOMEM when they do not fit) and
 * fills bytes[g] with what moves on GPU g; _end, called by the same process, completes it
 * (CHECKPOINTED, resp. LOCKED). A caller that dies in between leaves the operation to be
 * ended by the next access, as above. */
int simgpu_cuda_checkpoint_begin(simgpu_t *s, pid_t pid, uint64_t bytes[SIMGPU_MAX_GPUS]);
int simgpu_cuda_checkpoint_end(simgpu_t *s, pid_t pid);
int simgpu_cuda_restore_begin(simgpu_t *s, pid_t pid, uint64_t bytes[SIMGPU_MAX_GPUS]);
int simgpu_cuda_restore_end(simgpu_t *s, pid_t pid);
int simgpu_cuda_unlock(simgpu_t *s, pid_t pid);
/* Every process in the park table (registered, or not RUNNING). *n = how many
 * exist; at most cap are written. */
int simgpu_park_list(simgpu_t *s, simgpu_park_info_t *out, size_t cap, size_t *n);

#endif
