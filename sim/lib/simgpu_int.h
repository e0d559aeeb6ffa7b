/*
 * simgpu_int.h: the shared-memory layout of a simulated GPU set and the helpers that
 * simgpu.c (GPUs, allocations) and simgpu_park.c (CUDA checkpoint state) share. Internal to
 * sim/lib: nothing outside it may include this file.
 *
 * Layout of the shm object "/simgpu.NAME" (one mapping, fixed-size records):
 *
 *     struct set_header                      magic, version, layout sizes, robust mutex,
 *                                            n_gpus, release delays, PCIe bandwidth,
 *                                            the creator's pid namespace,
 *                                            parks[SIMGPU_MAX_PROCS] (checkpoint state)
 *     struct gpu_record gpus[n_gpus]         total, name, uuid, slots[SIMGPU_MAX_PROCS]
 *
 * A process is named by a struct sg_ident (simgpu_proc.c): its pid namespace, its pid in
 * that namespace, its starttime, and its host pid (its pid in the set creator's namespace),
 * which a host-side accessor fills in for a process of another namespace.
 *
 * Every field below is read and written under the set's mutex (sg_lock), except magic
 * (published last by the creator) and the immutable fields written before it.
 */
#ifndef VRAMD_SIM_SIMGPU_INT_H
#define VRAMD_SIM_SIMGPU_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "simgpu.h"

#define SET_MAGIC 0x31555047304d4953ULL /* "SIM0GPU1" */
#define SET_VERSION 4u /* 2: PCIe bandwidth and the park table; 3: pid namespaces; 4: cgroup limits */
#define SET_NAME_LEN_MAX 200

#define SG_HOST_PID_GONE (-1) /* sg_ident.host_pid: a host-side scan found no such process */

/* Who a process is, whatever pid namespace it lives in (simgpu_proc.c). Two idents are the
 * same process when ns_ino, ns_pid and starttime are equal (host_pid is derived). */
struct sg_ident {
    uint64_t ns_ino;    /* inode of its pid namespace (/proc/PID/ns/pid) */
    uint64_t starttime; /* /proc/PID/stat field 22, clock ticks since boot, as every namespace sees it */
    int32_t ns_pid;     /* its pid in ns_ino (getpid() there) */
    int32_t host_pid;   /* its pid in the set creator's namespace; 0 not known yet, SG_HOST_PID_GONE */
    uint64_t xlate_ms;  /* when a host-side scan last failed to settle host_pid (0: never tried) */
};

struct proc_slot {
    uint32_t in_use; /* written last when a slot is taken */
    struct sg_ident id;
    uint64_t bytes;
    uint32_t dead;
    uint32_t utilization; /* 0..100, set by the process itself */
    uint64_t dead_since_ms;
    char cgroup[SIMGPU_CGROUP_MAX]; /* its cgroup v2 directory ("" unknown: no limit applies) */
};

/* A per-cgroup limit (nvmlDeviceSetMemoryLimits_v1; simgpu_limits.c). */
struct limit_rec {
    uint32_t in_use;
    char cgroup[SIMGPU_CGROUP_MAX]; /* the cgroup v2 directory, no trailing '/' */
    uint64_t ino;                   /* its inode: a directory made again at that path is another cgroup */
    uint64_t soft, hard;
};

struct gpu_record {
    uint64_t total;
    char name[SIMGPU_NAME_MAX];
    char uuid[SIMGPU_UUID_LEN];
    struct proc_slot slots[SIMGPU_MAX_PROCS];
    struct limit_rec limits[SIMGPU_MAX_LIMITS];
};

/* One process's CUDA checkpoint state (simgpu_park.c). A process without a park slot is
 * RUNNING with nothing parked. */
struct park_slot {
    uint32_t in_use;
    struct sg_ident id;
    uint32_t state;        /* enum simgpu_cuda_state */
    uint32_t gate;         /* 1: the process registered and stops its GPU work when asked */
    uint32_t lock_request; /* a lock waiting for the process to stop (sequence number), 0 none */
    uint32_t acked;        /* the last lock_request the process said it stopped for */
    uint32_t op;           /* enum simgpu_park_op in progress */
    struct sg_ident op_id; /* the caller running op (its death abandons/completes op) */
    uint64_t parked[SIMGPU_MAX_GPUS]; /* host bytes, by the GPU they came from */
};

struct set_header {
    uint64_t magic; /* published last by the creator */
    uint32_t version;
    uint32_t header_size;     /* sizeof(struct set_header), a layout check */
    uint32_t gpu_record_size; /* sizeof(struct gpu_record) */
    uint32_t n_gpus;
    pthread_mutex_t lock;
    uint64_t release_delay_sim_ms;  /* as given to simgpu_create */
    uint64_t release_delay_real_ms; /* scaled by the creator's SIMGPU_TIMESCALE */
    char set_name[SET_NAME_LEN_MAX + 1];
    uint64_t pcie_bw;   /* bytes per simulated second for cuMemcpy between host and device */
    uint64_t checkpoint_bw, restore_bw; /* the driver checkpoint's rates (simulated bytes/s) */
    uint32_t park_seq;  /* the last lock request number handed out */
    uint64_t creator_ns_ino; /* the creator's pid namespace: "host side" (immutable) */
    uint64_t limits_dropped; /* limits whose cgroup was removed while they were set */
    struct park_slot parks[SIMGPU_MAX_PROCS];
    struct gpu_record gpus[];
};

struct simgpu {
    struct set_header *hdr;
    size_t map_len;
    int n_gpus;
    /* this process's park slot, once registered (simgpu_gate_register) */
    int park_index; /* -1: none */
    struct sg_ident own; /* who registered it (own.ns_pid: getpid() then) */
    /* this process's pid namespace (read at simgpu_open; a process never changes its own) */
    uint64_t self_ns_ino;
    bool host_side; /* self_ns_ino is the creator's namespace */
    bool proc_ok;   /* /proc is this namespace's (it names this process getpid()) */
    /* this process's cgroup v2 directory, read at open ("" when it cannot be told) */
    char self_cgroup[SIMGPU_CGROUP_MAX];
};

enum proc_state { PROC_ALIVE, PROC_GONE, PROC_UNKNOWN };

/* simgpu_proc.c */
uint64_t sg_monotonic_ms(void);
/* Reads /proc/<pid>/stat (pid 0: /proc/self/stat): its pid field, state and starttime. */
int sg_proc_stat(pid_t pid, pid_t *pid_out, char *state, uint64_t *starttime);
/* The calling process's starttime (from /proc/self/stat), 0 when unreadable. */
uint64_t sg_self_starttime(void);
/* Is (pid, starttime) still the live process, pid as the caller's /proc names it? */
enum proc_state sg_proc_check(pid_t pid, uint64_t starttime);
/* The inode of the calling process's pid namespace, 0 when /proc does not tell. */
uint64_t sg_pidns_self(void);
/* Fills s->self_ns_ino, host_side, proc_ok (at open). */
void sg_pidns_init(simgpu_t *s);
/* The calling process as it is now (host_pid filled when it is on the host side). */
void sg_self_ident(simgpu_t *s, struct sg_ident *out);
bool sg_ident_same(const struct sg_ident *a, const struct sg_ident *b);
/* Whether id is the process the caller calls pid (a host pid on the host side, else a pid
 * of the caller's own namespace). */
bool sg_ident_is_pid(simgpu_t *s, const struct sg_ident *id, pid_t pid);
/* The pid to report (host pid), 0 when it is not known. */
pid_t sg_ident_host_pid(const struct sg_ident *id);
/* Whether id's process is alive, as far as the caller can judge: PROC_UNKNOWN when it lives
 * in a namespace the caller cannot see into. */
enum proc_state sg_ident_check(simgpu_t *s, const struct sg_ident *id);
/* Host side only: finds the host pid of every live process of another namespace that has
 * none yet (one bounded /proc scan, only when there is one). */
void sg_translate_locked(simgpu_t *s);
/* Copies into id (without a host pid yet) the host pid the set already knows for it. */
void sg_ident_learn_locked(simgpu_t *s, struct sg_ident *id);

/* simgpu_table.c */
int sg_lock(simgpu_t *s);
void sg_unlock(simgpu_t *s);
/* Marks processes that died in the GPU slots, and frees the slots whose release delay passed. */
void sg_reap_slots_locked(simgpu_t *s);
uint64_t sg_used_locked(const struct gpu_record *gpu);
struct proc_slot *sg_own_slot_locked(struct gpu_record *gpu, const struct sg_ident *id);
struct proc_slot *sg_take_slot_locked(struct gpu_record *gpu, const struct sg_ident *id,
                                      uint64_t bytes);

/* simgpu_limits.c */
/* Fills s->self_cgroup (at open). */
void sg_cgroup_init(simgpu_t *s);
/* What a process in cgroup may still allocate on gpu under the limits that apply to it
 * (UINT64_MAX: none applies); *total_out (may be NULL) gets the tightest hard limit. Limits
 * whose cgroup is gone are dropped first (counted in limits_dropped). */
uint64_t sg_limit_room_locked(simgpu_t *s, struct gpu_record *gpu, const char *cgroup, uint64_t *total_out);

/* simgpu_park.c */
/* Translates host pids (host side), marks dead processes (GPU slots, then park slots: their
 * host bytes are freed with them, and operations whose caller died end) and releases what
 * is due. */
void sg_reap_locked(simgpu_t *s);
/* Whether process id may not touch GPU memory now (locked, checkpointed, failed). */
bool sg_park_blocks_locked(simgpu_t *s, const struct sg_ident *id);
/* The default bandwidth of a new set: $SIMGPU_PCIE_BW, else SIMGPU_DEFAULT_PCIE_BW. */
uint64_t sg_default_pcie_bw(void);
/* A rate from $env (simgpu_parse_bandwidth), else dflt. */
uint64_t sg_default_bw(const char *env, uint64_t dflt);

#endif
