/*
 * shim_park: parkable allocations, the gate, and the park and restore of one process
 * (shim_park.h has the rules).
 */
#include "shim_park.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/shim_abi.h"
#include "shim_client.h"

#define SHIM_PARK_MAX 16384u /* parkable allocations of one process; a power of two */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef uint64_t CUdeviceptr;
typedef uint64_t CUmemHandle;

typedef struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE */
    int id;
} cu_location_t;

typedef struct { /* CUmemAllocationProp */
    int type;    /* CU_MEM_ALLOCATION_TYPE_PINNED */
    int requested_handle_types;
    cu_location_t location;
    void *win32_meta;
    struct {
        unsigned char compression_type, gpu_direct_rdma;
        unsigned short usage;
        unsigned char reserved[4];
    } alloc_flags;
} cu_alloc_prop_t;

typedef struct { /* CUmemAccessDesc */
    cu_location_t location;
    int flags; /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
} cu_access_t;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_SUPPORTED 801

enum drv {
    D_GRAN, D_RESERVE, D_ADDR_FREE, D_CREATE, D_RELEASE, D_MAP, D_UNMAP, D_ACCESS, D_CTX_GET, D_CTX_SET,
    D_CTX_DEV, D_CTX_SYNC, D_HOST_ALLOC, D_HOST_FREE, D_DTOH, D_HTOD, D_COUNT
};

static const char *const drv_names[D_COUNT][2] = {
    {"cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity"},
    {"cuMemAddressReserve", "cuMemAddressReserve"},
    {"cuMemAddressFree", "cuMemAddressFree"},
    {"cuMemCreate", "cuMemCreate"},
    {"cuMemRelease", "cuMemRelease"},
    {"cuMemMap", "cuMemMap"},
    {"cuMemUnmap", "cuMemUnmap"},
    {"cuMemSetAccess", "cuMemSetAccess"},
    {"cuCtxGetCurrent", "cuCtxGetCurrent"},
    {"cuCtxSetCurrent", "cuCtxSetCurrent"},
    {"cuCtxGetDevice", "cuCtxGetDevice"},
    {"cuCtxSynchronize", "cuCtxSynchronize"},
    {"cuMemHostAlloc", "cuMemHostAlloc"},
    {"cuMemFreeHost", "cuMemFreeHost"},
    {"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2"},
    {"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2"},
};

typedef struct vmm_entry {
    CUdeviceptr va; /* 0: empty */
    uint64_t size;
    CUmemHandle handle; /* 0 while parked */
    CUcontext ctx;
    CUdevice dev;
    void *host; /* its copy while parked (pinned) */
    uint8_t state; /* 0 empty, 1 in use, 2 tombstone */
} vmm_entry_t;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_enabled;
static uint64_t g_gran;
static void *g_fn[D_COUNT];

static pthread_rwlock_t g_gate;
static pthread_mutex_t g_table_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_entry_t g_table[SHIM_PARK_MAX];
static uint64_t g_bytes; /* sum of the entries' sizes */
static unsigned g_used, g_dead;
static bool g_parked;    /* the control thread holds the gate's write side */
static pid_t g_ctl_pid;  /* the process whose control thread runs */
static _Atomic bool g_ctl_started; /* in this process (cleared in a forked child) */

typedef CUresult (*gran_fn)(size_t *, const cu_alloc_prop_t *, int);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addr_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemHandle *, size_t, const cu_alloc_prop_t *, unsigned long long);
typedef CUresult (*release_fn)(CUmemHandle);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const cu_access_t *, size_t);
typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_set_fn)(CUcontext);
typedef CUresult (*ctx_dev_fn)(CUdevice *);
typedef CUresult (*ctx_sync_fn)(void);
typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned);
typedef CUresult (*host_free_fn)(void *);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t, CUstream);

#define DRV(id, type) ((type)g_fn[id])

static void after_fork_child(void)
{
    g_ctl_pid = 0;
    g_ctl_started = false;
    g_parked = false;
    pthread_rwlock_init(&g_gate, NULL);
    pthread_mutex_init(&g_table_lock, NULL);
}

static void setup(void)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&g_gate, &a);
    pthread_rwlockattr_destroy(&a);
    pthread_atfork(NULL, NULL, after_fork_child);
    if (!shim_client_park_wanted())
        return;
    g_enabled = true; /* the gate is used from now on; allocations are parkable once the driver answers */
}

bool shim_park_enabled(void)
{
    pthread_once(&g_once, setup);
    return g_enabled;
}

/* The driver's calls and its granularity, resolved at the first parkable allocation (after
 * the program initialised the driver); false when one is missing. */
static bool driver_ready(shim_resolve_fn resolve)
{
    if (g_gran)
        return true;
    for (int i = 0; i < D_COUNT; i++)
        if (!g_fn[i] && !(g_fn[i] = resolve(drv_names[i][0], drv_names[i][1])))
            return false;
    CUdevice dev = 0;
    if (DRV(D_CTX_DEV, ctx_dev_fn)(&dev) != CUDA_SUCCESS)
        return false;
    cu_alloc_prop_t prop = {.type = 1, .location = {.type = 1, .id = dev}};
    size_t gran = 0;
    if (DRV(D_GRAN, gran_fn)(&gran, &prop, 0) != CUDA_SUCCESS || gran == 0)
        return false;
    __atomic_store_n(&g_gran, (uint64_t)gran, __ATOMIC_RELEASE);
    return true;
}

uint64_t shim_park_size(uint64_t n, shim_resolve_fn resolve)
{
    if (!shim_park_enabled() || n == 0)
        return 0;
    uint64_t gran = __atomic_load_n(&g_gran, __ATOMIC_ACQUIRE);
    if (!gran) {
        pthread_mutex_lock(&g_table_lock);
        bool ok = driver_ready(resolve);
        pthread_mutex_unlock(&g_table_lock);
        if (!ok)
            return 0;
        gran = g_gran;
    }
    if (n < gran || n > UINT64_MAX - gran)
        return 0;
    return (n + gran - 1) / gran * gran;
}

void shim_park_enter(void)
{
    if (shim_park_enabled())
        pthread_rwlock_rdlock(&g_gate);
}

void shim_park_leave(void)
{
    if (g_enabled)
        pthread_rwlock_unlock(&g_gate);
}

/* ---- the table ------------------------------------------------------------------------------ */

static size_t slot_of(CUdeviceptr va) { return (size_t)((va >> 21) * 0x9E3779B97F4A7C15ull) & (SHIM_PARK_MAX - 1); }

static vmm_entry_t *table_find(CUdeviceptr va)
{
    for (size_t i = slot_of(va), k = 0; k < SHIM_PARK_MAX; i = (i + 1) & (SHIM_PARK_MAX - 1), k++) {
        if (g_table[i].state == 0)
            return NULL;
        if (g_table[i].state == 1 && g_table[i].va == va)
            return &g_table[i];
    }
    return NULL;
}

static vmm_entry_t *table_insert(const vmm_entry_t *e)
{
    for (size_t i = slot_of(e->va);; i = (i + 1) & (SHIM_PARK_MAX - 1)) {
        if (g_table[i].state == 1)
            continue;
        if (g_table[i].state == 2)
            g_dead--;
        g_table[i] = *e;
        g_table[i].state = 1;
        g_used++;
        return &g_table[i];
    }
}

/* Add e; NULL when half the table is in use (that allocation is then not made parkable). */
static vmm_entry_t *table_add(const vmm_entry_t *e)
{
    if (g_used >= SHIM_PARK_MAX / 2)
        return NULL;
    if (g_used + g_dead >= SHIM_PARK_MAX * 3 / 4) { /* rehash without the tombstones */
        vmm_entry_t *old = malloc(sizeof g_table);
        if (!old)
            return NULL;
        memcpy(old, g_table, sizeof g_table);
        memset(g_table, 0, sizeof g_table);
        g_used = g_dead = 0;
        for (size_t i = 0; i < SHIM_PARK_MAX; i++)
            if (old[i].state == 1)
                (void)table_insert(&old[i]);
        free(old);
    }
    return table_insert(e);
}

/* ---- allocation and free ------------------------------------------------------------------ */

/* Physical memory of e's size on its device, mapped at e->va, readable and writable. */
static CUresult map_new(vmm_entry_t *e)
{
    cu_alloc_prop_t prop = {.type = 1, .location = {.type = 1, .id = e->dev}};
    CUmemHandle h = 0;
    CUresult rc = DRV(D_CREATE, create_fn)(&h, e->size, &prop, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = DRV(D_MAP, map_fn)(e->va, e->size, 0, h, 0);
    if (rc == CUDA_SUCCESS) {
        cu_access_t acc = {.location = {.type = 1, .id = e->dev}, .flags = 3};
        rc = DRV(D_ACCESS, access_fn)(e->va, e->size, &acc, 1);
        if (rc != CUDA_SUCCESS)
            DRV(D_UNMAP, unmap_fn)(e->va, e->size);
    }
    if (rc != CUDA_SUCCESS) {
        DRV(D_RELEASE, release_fn)(h);
        return rc;
    }
    e->handle = h;
    return CUDA_SUCCESS;
}

static CUresult unmap_release(vmm_entry_t *e)
{
    CUresult rc = DRV(D_UNMAP, unmap_fn)(e->va, e->size);
    if (rc == CUDA_SUCCESS)
        rc = DRV(D_RELEASE, release_fn)(e->handle);
    if (rc == CUDA_SUCCESS)
        e->handle = 0;
    return rc;
}


int shim_park_alloc(uint64_t *dptr, uint64_t size)
{
    vmm_entry_t e = {0};
    if (DRV(D_CTX_GET, ctx_get_fn)(&e.ctx) != CUDA_SUCCESS || DRV(D_CTX_DEV, ctx_dev_fn)(&e.dev) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_INITIALIZED;
    e.size = size;
    CUresult rc = DRV(D_RESERVE, reserve_fn)(&e.va, size, 0, 0, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = map_new(&e);
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_table_lock);
        vmm_entry_t *in = table_add(&e);
        if (in)
            g_bytes += size;
        pthread_mutex_unlock(&g_table_lock);
        if (!in) {
            unmap_release(&e);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS) {
        DRV(D_ADDR_FREE, addr_free_fn)(e.va, size);
        return rc;
    }
    *dptr = e.va;
    shim_park_note_alloc();
    return CUDA_SUCCESS;
}

bool shim_park_free(uint64_t p, int *rc, uint64_t *size)
{
    if (!g_enabled || !g_gran || p == 0)
        return false;
    pthread_mutex_lock(&g_table_lock);
    vmm_entry_t *e = table_find(p);
    vmm_entry_t copy = e ? *e : (vmm_entry_t){0};
    if (e) {
        e->state = 2;
        g_used--;
        g_dead++;
        g_bytes -= e->size;
    }
    pthread_mutex_unlock(&g_table_lock);
    if (!e)
        return false;
    *rc = unmap_release(&copy);
    if (*rc == CUDA_SUCCESS)
        *rc = DRV(D_ADDR_FREE, addr_free_fn)(copy.va, copy.size);
    *size = copy.size;
    return true;
}

/* ---- park and restore (the control thread, with the gate's write side) --------------------- */

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Make e's context current (when it is not already) after synchronizing the one before. */
static CUresult switch_ctx(CUcontext *cur, CUcontext want)
{
    if (*cur == want)
        return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    if (*cur)
        rc = DRV(D_CTX_SYNC, ctx_sync_fn)();
    if (rc == CUDA_SUCCESS)
        rc = DRV(D_CTX_SET, ctx_set_fn)(want);
    if (rc == CUDA_SUCCESS)
        *cur = want;
    return rc;
}

static void free_hosts(void)
{
    for (size_t i = 0; i < SHIM_PARK_MAX; i++)
        if (g_table[i].state == 1 && g_table[i].host) {
            DRV(D_HOST_FREE, host_free_fn)(g_table[i].host);
            g_table[i].host = NULL;
        }
}

/* Copy every entry one way (to_host: device -> its host copy), the copies queued back to
 * back per context, then synchronized. */
static CUresult copy_all(bool to_host)
{
    CUcontext cur = NULL;
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < SHIM_PARK_MAX && rc == CUDA_SUCCESS; i++) {
        vmm_entry_t *e = &g_table[i];
        if (e->state != 1)
            continue;
        rc = switch_ctx(&cur, e->ctx);
        if (rc == CUDA_SUCCESS)
            rc = to_host ? DRV(D_DTOH, dtoh_fn)(e->host, e->va, e->size, NULL)
                         : DRV(D_HTOD, htod_fn)(e->va, e->host, e->size, NULL);
    }
    if (cur) {
        CUresult s = DRV(D_CTX_SYNC, ctx_sync_fn)();
        if (rc == CUDA_SUCCESS)
            rc = s;
    }
    return rc;
}

/* Map every entry that has no physical memory again (from its host copy). */
static CUresult bring_back(void)
{
    CUcontext cur = NULL;
    for (size_t i = 0; i < SHIM_PARK_MAX; i++) {
        vmm_entry_t *e = &g_table[i];
        if (e->state != 1 || e->handle)
            continue;
        CUresult rc = switch_ctx(&cur, e->ctx);
        if (rc == CUDA_SUCCESS)
            rc = map_new(e);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return copy_all(false);
}

static void answer(shim_msg_t *a, enum shim_msg_type type, uint64_t bytes, uint64_t aux)
{
    a->type = (uint16_t)type;
    a->bytes = bytes;
    a->aux = aux;
}

static void park(shim_msg_t *a)
{
    if (g_parked) {
        answer(a, SHIM_MSG_PARK_FAILED, 0, SHIM_PARK_STATE);
        return;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SHIM_PARK_GATE_MS / 1000;
    if (pthread_rwlock_timedwrlock(&g_gate, &until) != 0) {
        answer(a, SHIM_MSG_PARK_FAILED, 0, SHIM_PARK_BUSY);
        return;
    }
    uint64_t live = shim_client_live(), bytes = g_bytes;
    enum shim_park_refusal why = 0;
    if (live > bytes + SHIM_PARK_UNMOVABLE_MAX)
        why = SHIM_PARK_UNMOVABLE;
    for (size_t i = 0; i < SHIM_PARK_MAX && !why; i++) /* host memory is pinned for a context */
        if (g_table[i].state == 1) {
            if (DRV(D_CTX_SET, ctx_set_fn)(g_table[i].ctx) != CUDA_SUCCESS)
                why = SHIM_PARK_DRIVER;
            break;
        }
    for (size_t i = 0; i < SHIM_PARK_MAX && !why; i++)
        if (g_table[i].state == 1 && DRV(D_HOST_ALLOC, host_alloc_fn)(&g_table[i].host, g_table[i].size, 0) != CUDA_SUCCESS)
            why = SHIM_PARK_HOST_MEMORY;
    uint64_t t0 = mono_us();
    if (!why && copy_all(true) != CUDA_SUCCESS)
        why = SHIM_PARK_DRIVER;
    uint64_t copy_us = mono_us() - t0;
    for (size_t i = 0; i < SHIM_PARK_MAX && !why; i++)
        if (g_table[i].state == 1 && unmap_release(&g_table[i]) != CUDA_SUCCESS)
            why = SHIM_PARK_DRIVER;
    if (why) {
        if (why == SHIM_PARK_DRIVER)
            (void)bring_back(); /* what was released comes back from its copy */
        free_hosts();
        pthread_rwlock_unlock(&g_gate);
        answer(a, SHIM_MSG_PARK_FAILED, 0, why);
        return;
    }
    g_parked = true; /* the gate stays closed until the restore */
    shim_client_move(bytes, true);
    answer(a, SHIM_MSG_PARK_DONE, bytes, copy_us);
}

static void restore(shim_msg_t *a)
{
    if (!g_parked) {
        answer(a, SHIM_MSG_RESTORE_FAILED, 0, SHIM_PARK_STATE);
        return;
    }
    uint64_t t0 = mono_us();
    CUresult rc = bring_back();
    uint64_t copy_us = mono_us() - t0;
    if (rc != CUDA_SUCCESS) { /* the process cannot run on: vramd stops it; the gate stays closed */
        answer(a, SHIM_MSG_RESTORE_FAILED, 0, rc == CUDA_ERROR_OUT_OF_MEMORY ? SHIM_PARK_GPU_MEMORY : SHIM_PARK_DRIVER);
        return;
    }
    shim_client_move(g_bytes, false);
    g_parked = false;
    answer(a, SHIM_MSG_RESTORE_DONE, g_bytes, copy_us);
    /* the gate opens once the host copies are freed (after the answer went out: control_main) */
}

/* ---- the control thread --------------------------------------------------------------------- */

static void *control_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = shim_client_control_open();
        if (fd < 0) {
            sleep(1);
            continue;
        }
        shim_msg_t m;
        while (shim_client_control_recv(fd, &m) == 0) {
            shim_msg_t a;
            shim_msg_init(&a, SHIM_MSG_PARK_FAILED);
            a.seq = m.seq;
            if (m.type == SHIM_MSG_PARK)
                park(&a);
            else if (m.type == SHIM_MSG_RESTORE)
                restore(&a);
            else
                break;
            int sent = shim_client_control_send(fd, &a);
            if (a.type == SHIM_MSG_RESTORE_DONE) { /* the host copies go after the answer: not on the way back */
                free_hosts();
                pthread_rwlock_unlock(&g_gate);
            }
            if (sent != 0)
                break;
        }
        close(fd);
        sleep(1);
    }
    return NULL;
}

void shim_park_note_alloc(void)
{
    if (!g_enabled || g_ctl_started)
        return;
    g_ctl_started = true;
    pid_t pid = getpid();
    pthread_mutex_lock(&g_table_lock);
    bool start = g_ctl_pid != pid;
    g_ctl_pid = pid;
    pthread_mutex_unlock(&g_table_lock);
    if (!start)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signal of the program's */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &attr, control_main, NULL) != 0) {
        pthread_mutex_lock(&g_table_lock);
        g_ctl_pid = 0;
        pthread_mutex_unlock(&g_table_lock);
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
