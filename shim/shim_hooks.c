/*
 * shim_hooks: libvramd-cuda.so's entry points, what it interposes on the CUDA driver API
 * (docs/shim.md). LD_PRELOADed by vramd into a supervised worker (cuda_shim in the config).
 *
 * A program reaches the driver's allocation calls three ways, and each is caught:
 *   - by symbol (linked against libcuda.so.1): the functions below of the same names,
 *     the real ones from dlsym(RTLD_NEXT);
 *   - by dlsym(handle, "cuMemAlloc_v2") on the driver it dlopen'ed: dlsym itself is
 *     interposed (the real one from dlvsym), and a wrapped name gives the wrapper, the real
 *     function remembered from that handle;
 *   - by cuGetProcAddress / cuGetProcAddress_v2 (the CUDA runtime's way, by base name and
 *     CUDA version, "_ptsz" variants for the per-thread default stream): the real answer is
 *     remembered and the wrapper handed out instead.
 * Wrapped: cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged, cuMemAllocAsync(_ptsz),
 * cuMemAllocFromPoolAsync(_ptsz), cuMemFree_v2, cuMemFreeAsync(_ptsz), cuMemCreate,
 * cuMemRelease, cuMemGetInfo_v2. An allocation is charged (shim_client.h) before the driver
 * is called and given back when the driver fails it; the book (shim_book.h) remembers what
 * each pointer or handle took, so its free gives back exactly that.
 * cuMemGetInfo_v2, with the page in use: total = min(total, grant), free = min(free, total
 * - live) (0 when live is above it).
 * With $VRAMD_SHIM_PARK=1 (shim_park.h) a cuMemAlloc_v2 of at least the granularity is made
 * at a fixed address by the shim itself, and every wrapped call passes the park gate.
 * Invariant: this process's live bytes on the page (shim_client.h: atomics, no lock) are
 * charged before the driver is called and given back when it fails or when the book cannot
 * hold the pointer; the book (under g_book_lock) takes a pointer or handle after the driver
 * gave it, and its free gives back exactly the bytes the book says. So outside the calls in
 * progress, live (+ parked, shim_park.h) = the book's bytes; during one, live also holds its
 * bytes. g_book_lock is not held across the driver call: every allocation would wait behind
 * another's ask, up to grant_wait.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shim_book.h"
#include "shim_client.h"
#include "shim_park.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef uint64_t CUmemGenericAllocationHandle;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2ull

#define EXPORT __attribute__((visibility("default")))

static shim_book_t g_book;
static pthread_mutex_t g_book_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the real functions ----------------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn g_real_dlsym;

static void *real_dlsym(void *handle, const char *name)
{
    if (!g_real_dlsym) {
        g_real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!g_real_dlsym)
            g_real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return g_real_dlsym ? g_real_dlsym(handle, name) : NULL;
}

enum fn_id {
    F_ALLOC, F_PITCH, F_MANAGED, F_ASYNC, F_ASYNC_PTSZ, F_POOL, F_POOL_PTSZ, F_FREE, F_FREE_ASYNC,
    F_FREE_ASYNC_PTSZ, F_CREATE, F_RELEASE, F_GETINFO, F_PROC, F_PROC_V2, F_COUNT
};

static void *g_real[F_COUNT];

typedef CUresult (*proc_fn_t)(const char *, void **, int, uint64_t);
typedef CUresult (*proc_v2_fn_t)(const char *, void **, int, uint64_t, int *);

static const char *const g_names[F_COUNT] = {
    "cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
    "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", "cuMemFree_v2", "cuMemFreeAsync",
    "cuMemFreeAsync_ptsz", "cuMemCreate", "cuMemRelease", "cuMemGetInfo_v2", "cuGetProcAddress",
    "cuGetProcAddress_v2"};

static bool is_ours(const void *f);

static void *real(enum fn_id id)
{
    void *f = __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE);
    if (!f) {
        f = real_dlsym(RTLD_NEXT, g_names[id]);
        if (f && is_ours(f))
            f = NULL;
        if (f)
            __atomic_store_n(&g_real[id], f, __ATOMIC_RELEASE);
    }
    return f;
}

/* f is the driver's function for id; never one of our own wrappers (a driver whose own
 * references bind to the preloaded names would hand ours back: calling it would recurse). */
static void remember(enum fn_id id, void *f)
{
    if (f && !is_ours(f))
        __atomic_store_n(&g_real[id], f, __ATOMIC_RELEASE);
}

static void *g_driver_handle; /* the handle a program dlsym'ed a driver name from */

/* How the shim finds a driver call of its own (shim_park.h's shim_resolve_fn): through the
 * program's own cuGetProcAddress, else the handle it dlsym'ed from, else the next object. */
static void *driver_symbol(const char *base, const char *full)
{
    void *f = NULL;
    proc_v2_fn_t p2 = (proc_v2_fn_t)__atomic_load_n(&g_real[F_PROC_V2], __ATOMIC_ACQUIRE);
    proc_fn_t p1 = (proc_fn_t)__atomic_load_n(&g_real[F_PROC], __ATOMIC_ACQUIRE);
    if (p2 && p2(base, &f, 12000, 0, NULL) == CUDA_SUCCESS && f)
        return f;
    if (p1 && p1(base, &f, 12000, 0) == CUDA_SUCCESS && f)
        return f;
    void *h = __atomic_load_n(&g_driver_handle, __ATOMIC_ACQUIRE);
    if (h && (f = real_dlsym(h, full)) != NULL)
        return f;
    f = real_dlsym(RTLD_NEXT, full);
    return f && !is_ours(f) ? f : NULL;
}

/* ---- charging ----------------------------------------------------------------------------- */

static int charge(uint64_t n) { return shim_client_charge(n); }

/* The driver said yes: remember what key took (or give it back when the book is full). */
static void booked(enum shim_book_kind kind, uint64_t key, uint64_t n)
{
    if (!shim_client_active())
        return;
    pthread_mutex_lock(&g_book_lock);
    bool ok = shim_book_add(&g_book, kind, key, n);
    pthread_mutex_unlock(&g_book_lock);
    if (!ok)
        shim_client_uncharge(n);
    shim_client_note_alloc();
    shim_park_note_alloc();
}

static void unbook(enum shim_book_kind kind, uint64_t key)
{
    if (!shim_client_active())
        return;
    uint64_t n = 0;
    pthread_mutex_lock(&g_book_lock);
    bool had = shim_book_take(&g_book, kind, key, &n);
    pthread_mutex_unlock(&g_book_lock);
    if (had)
        shim_client_uncharge(n);
}

/* ---- the wrappers ---------------------------------------------------------------------------- */

#define ALLOC_BODY(id, type, call, key_expr, n)                                                         \
    do {                                                                                                \
        type f = (type)real(id);                                                                        \
        if (!f)                                                                                         \
            return CUDA_ERROR_NOT_INITIALIZED;                                                          \
        shim_park_enter();                                                                              \
        CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;                                                         \
        if (charge(n) == 0) {                                                                           \
            rc = call;                                                                                  \
            if (rc != CUDA_SUCCESS)                                                                     \
                shim_client_uncharge(n);                                                                \
            else                                                                                        \
                booked(SHIM_KIND_PTR, (uint64_t)(key_expr), n);                                         \
        }                                                                                               \
        shim_park_leave();                                                                              \
        return rc;                                                                                      \
    } while (0)

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const void *, unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*getinfo_fn)(size_t *, size_t *);

/* A parkable allocation (shim_park.h): charged at the bytes the device holds for it. */
static CUresult park_alloc(CUdeviceptr *dptr, uint64_t size)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    shim_park_enter();
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (charge(size) == 0) {
        rc = shim_park_alloc(dptr, size);
        if (rc != CUDA_SUCCESS)
            shim_client_uncharge(size);
        else
            booked(SHIM_KIND_PTR, *dptr, size);
    }
    shim_park_leave();
    return rc;
}

/* p was one of the shim's parkable allocations: freed here (true, *rc set). */
static bool park_free(CUdeviceptr p, CUresult *rc)
{
    uint64_t size = 0;
    shim_park_enter();
    bool ours = shim_park_free(p, rc, &size);
    if (ours && *rc == CUDA_SUCCESS)
        unbook(SHIM_KIND_PTR, p);
    shim_park_leave();
    return ours;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n)
{
    uint64_t size = real(F_ALLOC) ? shim_park_size(n, driver_symbol) : 0;
    if (size)
        return park_alloc(dptr, size);
    ALLOC_BODY(F_ALLOC, alloc_fn, f(dptr, n), *dptr, n);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    pitch_fn f = (pitch_fn)real(F_PITCH);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t n = (uint64_t)((width + 511) & ~(size_t)511) * height; /* the driver's pitch, as it usually rounds */
    shim_park_enter();
    if (charge(n) != 0) {
        shim_park_leave();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = f(dptr, pitch, width, height, elem);
    if (rc != CUDA_SUCCESS) {
        shim_client_uncharge(n);
        shim_park_leave();
        return rc;
    }
    uint64_t actual = pitch ? (uint64_t)*pitch * height : n;
    if (actual > n)
        (void)charge(actual - n); /* already allocated: counted whatever vramd says */
    else if (actual < n)
        shim_client_uncharge(n - actual);
    booked(SHIM_KIND_PTR, *dptr, actual);
    shim_park_leave();
    return rc;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned flags)
{
    ALLOC_BODY(F_MANAGED, managed_fn, f(dptr, n, flags), *dptr, n);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
    ALLOC_BODY(F_ASYNC, async_fn, f(dptr, n, s), *dptr, n);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s)
{
    ALLOC_BODY(F_ASYNC_PTSZ, async_fn, f(dptr, n, s), *dptr, n);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s)
{
    ALLOC_BODY(F_POOL, pool_fn, f(dptr, n, pool, s), *dptr, n);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s)
{
    ALLOC_BODY(F_POOL_PTSZ, pool_fn, f(dptr, n, pool, s), *dptr, n);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const void *prop, unsigned long long flags)
{
    create_fn f = (create_fn)real(F_CREATE);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    shim_park_enter();
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (charge(n) == 0) {
        rc = f(h, n, prop, flags);
        if (rc != CUDA_SUCCESS)
            shim_client_uncharge(n);
        else
            booked(SHIM_KIND_HANDLE, *h, n);
    }
    shim_park_leave();
    return rc;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    release_fn f = (release_fn)real(F_RELEASE);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    shim_park_enter();
    CUresult rc = f(h);
    if (rc == CUDA_SUCCESS)
        unbook(SHIM_KIND_HANDLE, h);
    shim_park_leave();
    return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    free_fn f = (free_fn)real(F_FREE);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc;
    if (park_free(p, &rc))
        return rc;
    shim_park_enter();
    rc = f(p);
    if (rc == CUDA_SUCCESS)
        unbook(SHIM_KIND_PTR, p);
    shim_park_leave();
    return rc;
}

static CUresult free_async(enum fn_id id, CUdeviceptr p, CUstream s)
{
    free_async_fn f = (free_async_fn)real(id);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc;
    if (park_free(p, &rc)) /* not stream-ordered: the caller's stream must be done with it */
        return rc;
    shim_park_enter();
    rc = f(p, s);
    if (rc == CUDA_SUCCESS)
        unbook(SHIM_KIND_PTR, p); /* stream-ordered: given back when the free is queued */
    shim_park_leave();
    return rc;
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return free_async(F_FREE_ASYNC, p, s); }

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return free_async(F_FREE_ASYNC_PTSZ, p, s); }

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    getinfo_fn f = (getinfo_fn)real(F_GETINFO);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(free_b, total);
    uint64_t grant, live;
    if (rc != CUDA_SUCCESS || !free_b || !total || !shim_client_view(&grant, &live))
        return rc;
    uint64_t t = *total < grant ? *total : grant;
    uint64_t fr = t > live ? t - live : 0;
    *total = (size_t)t;
    if (fr < *free_b)
        *free_b = (size_t)fr;
    return rc;
}

/* ---- cuGetProcAddress ------------------------------------------------------------------------ */

/* The wrapper for a symbol the driver was asked for by base name (or by its full name), the
 * real answer remembered; NULL when it is not one of ours. */
static void *wrap_proc(const char *sym, void *got, int version, uint64_t flags)
{
    bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    struct {
        const char *base;
        int min_version; /* the _v2 entry points came with CUDA 3.2 */
        enum fn_id id, id_ptsz;
        void *w, *w_ptsz;
    } map[] = {
        {"cuMemAlloc", 3020, F_ALLOC, F_ALLOC, (void *)cuMemAlloc_v2, (void *)cuMemAlloc_v2},
        {"cuMemAllocPitch", 3020, F_PITCH, F_PITCH, (void *)cuMemAllocPitch_v2, (void *)cuMemAllocPitch_v2},
        {"cuMemAllocManaged", 0, F_MANAGED, F_MANAGED, (void *)cuMemAllocManaged, (void *)cuMemAllocManaged},
        {"cuMemAllocAsync", 0, F_ASYNC, F_ASYNC_PTSZ, (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz},
        {"cuMemAllocFromPoolAsync", 0, F_POOL, F_POOL_PTSZ, (void *)cuMemAllocFromPoolAsync,
         (void *)cuMemAllocFromPoolAsync_ptsz},
        {"cuMemFree", 3020, F_FREE, F_FREE, (void *)cuMemFree_v2, (void *)cuMemFree_v2},
        {"cuMemFreeAsync", 0, F_FREE_ASYNC, F_FREE_ASYNC_PTSZ, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz},
        {"cuMemCreate", 0, F_CREATE, F_CREATE, (void *)cuMemCreate, (void *)cuMemCreate},
        {"cuMemRelease", 0, F_RELEASE, F_RELEASE, (void *)cuMemRelease, (void *)cuMemRelease},
        {"cuMemGetInfo", 3020, F_GETINFO, F_GETINFO, (void *)cuMemGetInfo_v2, (void *)cuMemGetInfo_v2},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t bl = strlen(map[i].base);
        bool by_base = strcmp(sym, map[i].base) == 0 && version >= map[i].min_version;
        bool by_full = strncmp(sym, map[i].base, bl) == 0 && strcmp(sym + bl, ptsz ? "_ptsz" : "_v2") == 0;
        if (!by_base && !by_full && strcmp(sym, g_names[map[i].id]) != 0)
            continue;
        remember(ptsz ? map[i].id_ptsz : map[i].id, got);
        return ptsz ? map[i].w_ptsz : map[i].w;
    }
    return NULL;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, uint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, uint64_t flags, int *status);

static void *wrap_or_self(const char *sym, void *got, int version, uint64_t flags)
{
    if (strcmp(sym, "cuGetProcAddress") == 0 || strcmp(sym, "cuGetProcAddress_v2") == 0) {
        bool v2 = strcmp(sym, "cuGetProcAddress_v2") == 0 || version >= 12000;
        remember(v2 ? F_PROC_V2 : F_PROC, got);
        return v2 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    }
    void *w = wrap_proc(sym, got, version, flags);
    return w ? w : got;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, uint64_t flags)
{
    proc_fn_t f = (proc_fn_t)real(F_PROC);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(sym, pfn, version, flags);
    if (rc == CUDA_SUCCESS && sym && pfn && *pfn)
        *pfn = wrap_or_self(sym, *pfn, version, flags);
    return rc;
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, uint64_t flags, int *status)
{
    proc_v2_fn_t f = (proc_v2_fn_t)real(F_PROC_V2);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(sym, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && sym && pfn && *pfn)
        *pfn = wrap_or_self(sym, *pfn, version, flags);
    return rc;
}

/* ---- dlsym ---------------------------------------------------------------------------------- */

static void *const g_wrappers[F_COUNT] = {
    (void *)cuMemAlloc_v2, (void *)cuMemAllocPitch_v2, (void *)cuMemAllocManaged, (void *)cuMemAllocAsync,
    (void *)cuMemAllocAsync_ptsz, (void *)cuMemAllocFromPoolAsync, (void *)cuMemAllocFromPoolAsync_ptsz,
    (void *)cuMemFree_v2, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz, (void *)cuMemCreate,
    (void *)cuMemRelease, (void *)cuMemGetInfo_v2, (void *)cuGetProcAddress, (void *)cuGetProcAddress_v2};

static bool is_ours(const void *f)
{
    for (int i = 0; i < F_COUNT; i++)
        if (g_wrappers[i] == f)
            return true;
    return false;
}

/* dlsym(RTLD_NEXT, name) means "after the caller's object", and glibc takes the caller from
 * its return address: so it is handed on as a tail call (a jump: the return address stays
 * the caller's), never as a call from here, which would mean "after the shim" (an ASan
 * runtime asking for the next malloc would get its own back). Only names of the driver are
 * wrapped, and a caller asking by RTLD_NEXT never gets a wrapper. */
EXPORT void *dlsym(void *handle, const char *name)
{
    if (handle == RTLD_NEXT) {
        if (!g_real_dlsym)
            (void)real_dlsym(NULL, "dlsym");
        return g_real_dlsym(handle, name); /* a sibling call: see above */
    }
    void *got = real_dlsym(handle, name);
    if (!got || name[0] != 'c' || name[1] != 'u')
        return got;
    __atomic_store_n(&g_driver_handle, handle, __ATOMIC_RELEASE);
    for (int id = 0; id < F_COUNT; id++) {
        if (strcmp(name, g_names[id]) != 0)
            continue;
        remember((enum fn_id)id, got);
        return g_wrappers[id];
    }
    return got;
}
