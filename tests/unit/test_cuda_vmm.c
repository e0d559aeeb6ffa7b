/*
 * test_cuda_vmm: the simulated driver's virtual memory management, host memory and copies
 * (sim/cuda/cuda_vmm.c), through build/lib/libcuda-sim.so loaded with dlopen as a program
 * loads the driver.
 *
 * Covers: an address range reserved, physical memory from cuMemCreate mapped at it and made
 * accessible; bytes copied in through the mapping come back out; the "park at the same
 * address" sequence (copy out, unmap, release: the GPU's bytes go; create again, map at the
 * same address, copy back: the data is there); a copy's time follows the set's PCIe
 * bandwidth; the errors (a map outside a reservation or over another mapping, a copy past an
 * allocation's end, freeing a range still mapped, an unknown address).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

#define MiB (1024ULL * 1024ULL)

typedef int (*init_fn)(unsigned);
typedef int (*get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*setcur_fn)(void *);
typedef int (*gran_fn)(size_t *, const void *, int);
typedef int (*create_fn)(uint64_t *, size_t, const void *, unsigned long long);
typedef int (*release_fn)(uint64_t);
typedef int (*reserve_fn)(uint64_t *, size_t, size_t, uint64_t, unsigned long long);
typedef int (*afree_fn)(uint64_t, size_t);
typedef int (*map_fn)(uint64_t, size_t, size_t, uint64_t, unsigned long long);
typedef int (*unmap_fn)(uint64_t, size_t);
typedef int (*access_fn)(uint64_t, size_t, const void *, size_t);
typedef int (*halloc_fn)(void **, size_t, unsigned);
typedef int (*hfree_fn)(void *);
typedef int (*htod_fn)(uint64_t, const void *, size_t);
typedef int (*dtoh_fn)(void *, uint64_t, size_t);

static struct {
    void *lib;
    init_fn init;
    get_fn get;
    retain_fn retain;
    setcur_fn setcur;
    gran_fn gran;
    create_fn create;
    release_fn release;
    reserve_fn reserve;
    afree_fn afree;
    map_fn map;
    unmap_fn unmap;
    access_fn access;
    halloc_fn halloc;
    hfree_fn hfree;
    htod_fn htod;
    dtoh_fn dtoh;
} D;

static char set_name[64];

static void *sym(const char *name)
{
    void *f = dlsym(D.lib, name);
    if (!f)
        fail_msg("libcuda-sim lacks %s", name);
    return f;
}

static int setup(void **state)
{
    (void)state;
    char exe[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    snprintf(path, sizeof path, "%s/lib/libcuda-sim.so", dirname(dirname(exe)));
    snprintf(set_name, sizeof set_name, "utvmm.%d", (int)getpid());
    setenv("SIMGPU", set_name, 1);
    setenv("SIMGPU_TIMESCALE", "1", 1);
    setenv("SIMGPU_PCIE_BW", "1e9", 1); /* 1 GB/s: 4 MiB take 4.2 ms */
    char err[256];
    if (simgpu_create(set_name, 1, 1024 * MiB, "VMM GPU", 0, err, sizeof err) != 0)
        return -1;
    D.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return D.lib ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    simgpu_remove(set_name, NULL, 0);
    return 0;
}

static uint64_t used(void)
{
    simgpu_t *s = simgpu_open(set_name, NULL, 0);
    simgpu_info_t info;
    simgpu_info(s, 0, &info);
    simgpu_close(s);
    return info.used;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_park_at_the_same_address(void **state)
{
    (void)state;
    D.init = (init_fn)sym("cuInit");
    D.get = (get_fn)sym("cuDeviceGet");
    D.retain = (retain_fn)sym("cuDevicePrimaryCtxRetain");
    D.setcur = (setcur_fn)sym("cuCtxSetCurrent");
    D.gran = (gran_fn)sym("cuMemGetAllocationGranularity");
    D.create = (create_fn)sym("cuMemCreate");
    D.release = (release_fn)sym("cuMemRelease");
    D.reserve = (reserve_fn)sym("cuMemAddressReserve");
    D.afree = (afree_fn)sym("cuMemAddressFree");
    D.map = (map_fn)sym("cuMemMap");
    D.unmap = (unmap_fn)sym("cuMemUnmap");
    D.access = (access_fn)sym("cuMemSetAccess");
    D.halloc = (halloc_fn)sym("cuMemHostAlloc");
    D.hfree = (hfree_fn)sym("cuMemFreeHost");
    D.htod = (htod_fn)sym("cuMemcpyHtoD_v2");
    D.dtoh = (dtoh_fn)sym("cuMemcpyDtoH_v2");

    int dev = -1;
    void *ctx = NULL;
    assert_int_equal(D.init(0), 0);
    assert_int_equal(D.get(&dev, 0), 0);
    assert_int_equal(D.retain(&ctx, dev), 0);
    assert_int_equal(D.setcur(ctx), 0);
    char prop[64] = {0}, desc[16] = {0};
    size_t g = 0;
    assert_int_equal(D.gran(&g, prop, 0), 0);
    assert_int_equal(g, 2 * MiB);

    const size_t size = 4 * MiB;
    uint64_t base = used();
    uint64_t h = 0, va = 0;
    assert_int_equal(D.create(&h, size, prop, 0), 0);
    assert_int_equal(used(), base + size);
    assert_int_equal(D.reserve(&va, size, 0, 0, 0), 0);
    assert_int_equal(D.map(va, size, 0, h, 0), 0);
    assert_int_equal(D.access(va, size, desc, 1), 0);

    unsigned char *host = NULL, *saved = NULL;
    assert_int_equal(D.halloc((void **)&host, size, 0), 0);
    assert_int_equal(D.halloc((void **)&saved, size, 0), 0);
    for (size_t i = 0; i < size; i++)
        host[i] = (unsigned char)(i * 31 + 7);
    double t0 = now_ms();
    assert_int_equal(D.htod(va, host, size), 0);
    double took = now_ms() - t0;
    assert_true(took >= 4.0); /* 4 MiB at 1 GB/s: 4.19 ms at least */

    /* park: out to host memory, unmapped, physical memory released (the GPU's bytes go) */
    assert_int_equal(D.dtoh(saved, va, size), 0);
    assert_memory_equal(saved, host, size);
    assert_int_equal(D.afree(va, size), 1); /* still mapped */
    assert_int_equal(D.unmap(va, size), 0);
    assert_int_equal(D.release(h), 0);
    assert_int_equal(used(), base);
    assert_int_equal(D.dtoh(host, va, 16), 1); /* nothing there now */

    /* restore: new physical memory at the same address, copied back */
    uint64_t h2 = 0;
    assert_int_equal(D.create(&h2, size, prop, 0), 0);
    assert_int_equal(D.map(va, size, 0, h2, 0), 0);
    assert_int_equal(D.htod(va, saved, size), 0);
    memset(host, 0, size);
    assert_int_equal(D.dtoh(host, va + MiB, size - MiB), 0); /* from inside the mapping */
    assert_memory_equal(host, saved + MiB, size - MiB);

    /* errors */
    assert_int_equal(D.dtoh(host, va + MiB, size), 1);      /* past the end */
    assert_int_equal(D.map(va, size, 0, h2, 0), 1);         /* over a mapping */
    assert_int_equal(D.map(va + 64 * MiB, size, 0, h2, 0), 1); /* outside any reservation */
    assert_int_equal(D.htod(0x1000, host, 16), 1);          /* no allocation there */

    assert_int_equal(D.unmap(va, size), 0);
    assert_int_equal(D.afree(va, size), 0);
    assert_int_equal(D.release(h2), 0);
    assert_int_equal(D.hfree(host), 0);
    assert_int_equal(D.hfree(saved), 0);
    assert_int_equal(used(), base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_park_at_the_same_address, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
