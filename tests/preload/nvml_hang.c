/*
 * nvml_hang: an NVML library for tests whose driver hangs on demand. vramd loads it as its
 * NVML library (VRAMD_NVML_LIBRARY=build/tests/nvml_hang.so; vramd dlopens NVML with
 * RTLD_LOCAL and looks symbols up in that handle, so an LD_PRELOAD shim would not be seen),
 * and it forwards every entry point vramd uses to the real library named by
 * $NVML_HANG_REAL (the simulated NVML, build/lib/libnvidia-ml-sim.so).
 *
 * The hang: while the file named by $NVML_HANG_FILE exists, a query (nvmlDeviceGetMemoryInfo,
 * nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetUtilizationRates) does not return:
 * it waits, checking every 10 ms, until the file is gone, then answers from the real library.
 * With the file left in place the call never returns, as in a hung driver. Each call that
 * starts waiting appends "hang" to $NVML_HANG_LOG, and "released" when it goes on, so a
 * test can see the hang was really on the path.
 *
 * Invariants: every variable is optional (no NVML_HANG_FILE: never hangs); init, count,
 * handles, names and UUIDs never hang (vramd starts); the real library is opened once,
 * under a mutex, at the first call. Not built with sanitizers (it is loaded into the
 * sanitizer build too, like the NVML simulation).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int nvml_ret;
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define NVML_ERROR_FUNCTION_NOT_FOUND 13

nvml_ret nvmlInit_v2(void);
nvml_ret nvmlShutdown(void);
const char *nvmlErrorString(nvml_ret result);
nvml_ret nvmlDeviceGetCount_v2(unsigned int *count);
nvml_ret nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device);
nvml_ret nvmlDeviceGetHandleByUUID(const char *uuid, void **device);
nvml_ret nvmlDeviceGetName(void *device, char *name, unsigned int length);
nvml_ret nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length);
nvml_ret nvmlDeviceGetMemoryInfo(void *device, void *memory);
nvml_ret nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, void *infos);
nvml_ret nvmlDeviceGetUtilizationRates(void *device, void *utilization);

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void *g_real;

static void *real(const char *name)
{
    pthread_mutex_lock(&g_lock);
    if (!g_real) {
        const char *path = getenv("NVML_HANG_REAL");
        g_real = path && path[0] ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    }
    void *fn = g_real ? dlsym(g_real, name) : NULL;
    pthread_mutex_unlock(&g_lock);
    return fn;
}

static void note(const char *what)
{
    const char *log = getenv("NVML_HANG_LOG");
    if (!log || !log[0])
        return;
    FILE *f = fopen(log, "a");
    if (f) {
        fprintf(f, "%s\n", what);
        fclose(f);
    }
}

/* Wait while the hang file exists. */
static void maybe_hang(void)
{
    const char *file = getenv("NVML_HANG_FILE");
    if (!file || !file[0] || access(file, F_OK) != 0)
        return;
    note("hang");
    const struct timespec tick = {0, 10 * 1000 * 1000};
    while (access(file, F_OK) == 0)
        nanosleep(&tick, NULL);
    note("released");
}

/* Call the real library's entry point of the same name and type (this very function's). */
#define FORWARD(func, ...)                                                                         \
    do {                                                                                           \
        __typeof__(&func) fn = (__typeof__(&func))real(#func);                                     \
        return fn ? fn(__VA_ARGS__) : (g_real ? NVML_ERROR_FUNCTION_NOT_FOUND                      \
                                              : NVML_ERROR_LIBRARY_NOT_FOUND);                     \
    } while (0)

nvml_ret nvmlInit_v2(void) { FORWARD(nvmlInit_v2, ); }
nvml_ret nvmlShutdown(void) { FORWARD(nvmlShutdown, ); }

const char *nvmlErrorString(nvml_ret result)
{
    typedef const char *(*fn_t)(nvml_ret);
    fn_t fn = (fn_t)real("nvmlErrorString");
    return fn ? fn(result) : "nvml_hang: no real NVML library (NVML_HANG_REAL)";
}

nvml_ret nvmlDeviceGetCount_v2(unsigned int *count) { FORWARD(nvmlDeviceGetCount_v2, count); }
nvml_ret nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device)
{
    FORWARD(nvmlDeviceGetHandleByIndex_v2, index, device);
}
nvml_ret nvmlDeviceGetHandleByUUID(const char *uuid, void **device)
{
    FORWARD(nvmlDeviceGetHandleByUUID, uuid, device);
}
nvml_ret nvmlDeviceGetName(void *device, char *name, unsigned int length)
{
    FORWARD(nvmlDeviceGetName, device, name, length);
}
nvml_ret nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length)
{
    FORWARD(nvmlDeviceGetUUID, device, uuid, length);
}

nvml_ret nvmlDeviceGetMemoryInfo(void *device, void *memory)
{
    maybe_hang();
    FORWARD(nvmlDeviceGetMemoryInfo, device, memory);
}

nvml_ret nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, void *infos)
{
    maybe_hang();
    FORWARD(nvmlDeviceGetComputeRunningProcesses_v3, device, count, infos);
}

nvml_ret nvmlDeviceGetUtilizationRates(void *device, void *utilization)
{
    maybe_hang();
    FORWARD(nvmlDeviceGetUtilizationRates, device, utilization);
}
