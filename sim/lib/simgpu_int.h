/*
 * simgpu_int.h: the shared-memory layout of a simulated GPU set and the helpers that
 * simgpu.c (GPUs, allocations) and simgpu_park.c (CUDA checkpoint state) share. Internal to
 * sim/lib: nothing outside it may include this file.
 *
 * Layout of the shm object "/simgpu.NAME" (one mapping, fixed-size records):
 *
 *     struct set_header                      magic, version, layout sizes, robust mutex,
 *                                            n_gpus, release delays, PCIe bandwidth,
 *                                            parks[SIMGPU_MAX_PROCS] (checkpoint state)
 *     struct gpu_record gpus[n_gpus]         total, name, uuid, slots[SIMGPU_MAX_PROCS]
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
#define SET_VERSION 2u                  /* 2: PCIe bandwidth and the park table */
#define SET_NAME_LEN_MAX 200

struct proc_slot {
    uint32_t in_use; /* written last when a slot is taken */
    int32_t pid;
    uint64_t starttime; /* /proc/PID/stat field 22, clock ticks since boot */
    uint64_t bytes;
    uint32_t dead;
    uint32_t utilization; /* 0..100, set by the process itself */
    uint64_t dead_since_ms;
};

struct gpu_record {
    uint64_t total;
    char name[SIMGPU_NAME_MAX];
    char uuid[SIMGPU_UUID_LEN];
    struct proc_slot slots[SIMGPU_MAX_PROCS];
};

/* One process's CUDA checkpoint state (simgpu_park.c). A process without a park slot is
 * RUNNING with nothing parked. */
struct park_slot {
    uint32_t in_use;
    int32_t pid;
    uint64_t starttime;
    uint32_t state;        /* enum simgpu_cuda_state */
    uint32_t gate;         /* 1: the process registered and stops its GPU work when asked */
    uint32_t lock_request; /* a lock waiting for the process to stop (sequence number), 0 none */
    uint32_t acked;        /* the last lock_request the process said it stopped for */
    uint32_t op;           /* enum simgpu_park_op in progress */
    int32_t op_pid;        /* the caller running op (its death abandons/completes op) */
    uint64_t op_starttime;
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
    uint64_t pcie_bw;   /* bytes per simulated second for checkpoint/restore copies */
    uint32_t park_seq;  /* the last lock request number handed out */
    struct park_slot parks[SIMGPU_MAX_PROCS];
    struct gpu_record gpus[];
};

struct simgpu {
    struct set_header *hdr;
    size_t map_len;
    int n_gpus;
    /* this process's park slot, once registered (simgpu_gate_register) */
    int park_index; /* -1: none */
    pid_t own_pid;
    uint64_t own_starttime;
};

enum proc_state { PROC_ALIVE, PROC_GONE, PROC_UNKNOWN };

/* simgpu_table.c */
uint64_t sg_monotonic_ms(void);
uint64_t sg_self_starttime(void);
enum proc_state sg_proc_check(pid_t pid, uint64_t starttime);
int sg_lock(simgpu_t *s);
void sg_unlock(simgpu_t *s);
/* Marks processes that died in the GPU slots, and frees the slots whose release delay passed. */
void sg_reap_slots_locked(simgpu_t *s);
uint64_t sg_used_locked(const struct gpu_record *gpu);
struct proc_slot *sg_own_slot_locked(struct gpu_record *gpu, pid_t pid, uint64_t starttime);
struct proc_slot *sg_take_slot_locked(struct gpu_record *gpu, pid_t pid, uint64_t starttime,
                                      uint64_t bytes);

/* simgpu_park.c */
/* Marks dead processes (GPU slots, then park slots: their host bytes are freed with them,
 * and operations whose caller died end) and releases what is due. */
void sg_reap_locked(simgpu_t *s);
/* Whether (pid, starttime) may not touch GPU memory now (locked, checkpointed, failed). */
bool sg_park_blocks_locked(simgpu_t *s, pid_t pid, uint64_t starttime);
/* The default bandwidth of a new set: $SIMGPU_PCIE_BW, else SIMGPU_DEFAULT_PCIE_BW. */
uint64_t sg_default_pcie_bw(void);

#endif
