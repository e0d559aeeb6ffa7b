/*
 * nvml_probe: loads an NVML library with dlopen (argv[1]: a path such as
 * build/lib/libnvidia-ml-sim.so, or libnvidia-ml.so.1 on a GPU host), queries it the way
 * vramd does, prints one JSON document on stdout and checks NVML's contract itself.
 *
 *   nvml_probe LIBRARY [--first-guess N] [--skip-process-sum]
 *
 * Checks (each failure is listed under "violations" and makes the exit code 1):
 *   - calls before nvmlInit_v2 and after the last nvmlShutdown return UNINITIALIZED; init
 *     refcounts (two inits need two shutdowns); a third shutdown returns UNINITIALIZED;
 *   - per device: nvmlDeviceGetIndex gives the index back, nvmlDeviceGetHandleByUUID gives
 *     the same handle, an unknown UUID is NOT_FOUND, index == count is INVALID_ARGUMENT,
 *     a 1-byte name buffer is INSUFFICIENT_SIZE;
 *   - the process list through the two-call protocol: a first call with room for
 *     --first-guess entries (default 1; 0 means infos NULL) returns SUCCESS when they fit
 *     or INSUFFICIENT_SIZE with *infoCount raised to the number needed, and a second call
 *     with that many succeeds (retried while processes come and go);
 *   - free + used == total, and the processes' usedGpuMemory sum to used (memory is read
 *     before and after the process list; a snapshot where the two reads differ is retried).
 *     --skip-process-sum drops the second check: on a real GPU "used" also counts memory the
 *     driver reserves, which no process holds; the simulation has none.
 * Exit codes: 0 all checks hold, 1 a violation (or a missing symbol), 2 usage,
 * 3 nvmlInit_v2 failed (the JSON then holds "init" and "init_error").
 *
 * The NVML declarations below are written from NVIDIA's NVML API Reference (nvml.h is not
 * packaged in Debian main: `apt-cache policy libnvidia-ml-dev nvidia-cuda-dev` has no
 * candidate), with the same layouts and values as nvml.h.
 */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- NVML declarations (from the NVML API Reference) ---- */
typedef int nvmlReturn_t; /* enum nvmlReturn_enum; int-sized */
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;
typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

struct nvml_api {
    nvmlReturn_t (*init_v2)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*system_get_driver_version)(char *, unsigned int);
    nvmlReturn_t (*device_get_count_v2)(unsigned int *);
    nvmlReturn_t (*device_get_handle_by_index_v2)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*device_get_handle_by_uuid)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*device_get_index)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*device_get_name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*device_get_uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*device_get_memory_info)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*device_get_utilization_rates)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*device_get_compute_running_processes_v3)(nvmlDevice_t, unsigned int *,
                                                            nvmlProcessInfo_t *);
};

#define PROCESS_LIST_MAX 65536 /* the probe refuses a count above this */
#define SNAPSHOT_TRIES 50

static struct nvml_api nvml;
static cJSON *violations;
static bool check_process_sum = true;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cJSON_AddItemToArray(violations, cJSON_CreateString(text));
}

static void expect_ret(const char *what, nvmlReturn_t got, nvmlReturn_t want)
{
    if (got != want)
        violation("%s returned %d (%s), expected %d", what, got, nvml.error_string(got), want);
}

static int load_api(void *lib)
{
    struct {
        const char *name;
        void **slot;
    } table[] = {
        {"nvmlInit_v2", (void **)&nvml.init_v2},
        {"nvmlShutdown", (void **)&nvml.shutdown},
        {"nvmlErrorString", (void **)&nvml.error_string},
        {"nvmlSystemGetDriverVersion", (void **)&nvml.system_get_driver_version},
        {"nvmlDeviceGetCount_v2", (void **)&nvml.device_get_count_v2},
        {"nvmlDeviceGetHandleByIndex_v2", (void **)&nvml.device_get_handle_by_index_v2},
        {"nvmlDeviceGetHandleByUUID", (void **)&nvml.device_get_handle_by_uuid},
        {"nvmlDeviceGetIndex", (void **)&nvml.device_get_index},
        {"nvmlDeviceGetName", (void **)&nvml.device_get_name},
        {"nvmlDeviceGetUUID", (void **)&nvml.device_get_uuid},
        {"nvmlDeviceGetMemoryInfo", (void **)&nvml.device_get_memory_info},
        {"nvmlDeviceGetUtilizationRates", (void **)&nvml.device_get_utilization_rates},
        {"nvmlDeviceGetComputeRunningProcesses_v3",
         (void **)&nvml.device_get_compute_running_processes_v3},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        *table[i].slot = dlsym(lib, table[i].name);
        if (!*table[i].slot) {
            fprintf(stderr, "nvml_probe: missing symbol %s\n", table[i].name);
            return -1;
        }
    }
    return 0;
}

/* The process list via the two-call protocol. Returns a malloc'd array (count in *n), or
 * NULL with *n = 0 on error (a violation is recorded). first_* receive the first call's
 * return code and *infoCount. */
static nvmlProcessInfo_t *read_processes(nvmlDevice_t dev, unsigned first_guess, unsigned *n,
                                         nvmlReturn_t *first_ret, unsigned *first_count)
{
    unsigned cap = first_guess;
    nvmlProcessInfo_t *buf = cap ? calloc(cap, sizeof *buf) : NULL;
    unsigned count = cap;
    nvmlReturn_t ret = nvml.device_get_compute_running_processes_v3(dev, &count, buf);
    *first_ret = ret;
    *first_count = count;
    for (int attempt = 0; attempt < SNAPSHOT_TRIES; attempt++) {
        if (ret == NVML_SUCCESS) {
            if (count > cap) {
                violation("process list: SUCCESS with *infoCount %u above the buffer's %u", count,
                          cap);
                break;
            }
            *n = count;
            return buf ? buf : calloc(1, sizeof *buf);
        }
        if (ret != NVML_ERROR_INSUFFICIENT_SIZE) {
            expect_ret("nvmlDeviceGetComputeRunningProcesses_v3", ret, NVML_SUCCESS);
            break;
        }
        if (count <= cap || count > PROCESS_LIST_MAX) {
            violation("process list: INSUFFICIENT_SIZE with *infoCount %u for a buffer of %u",
                      count, cap);
            break;
        }
        free(buf);
        cap = count;
        buf = calloc(cap, sizeof *buf);
        if (!buf)
            break;
        ret = nvml.device_get_compute_running_processes_v3(dev, &count, buf);
    }
    free(buf);
    *n = 0;
    return NULL;
}

static cJSON *probe_device(unsigned index, unsigned count, unsigned first_guess)
{
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "index", index);
    nvmlDevice_t dev = NULL, by_uuid = NULL;
    nvmlReturn_t ret = nvml.device_get_handle_by_index_v2(index, &dev);
    if (ret != NVML_SUCCESS) {
        expect_ret("nvmlDeviceGetHandleByIndex_v2", ret, NVML_SUCCESS);
        return out;
    }
    unsigned got_index = 0;
    ret = nvml.device_get_index(dev, &got_index);
    expect_ret("nvmlDeviceGetIndex", ret, NVML_SUCCESS);
    if (ret == NVML_SUCCESS && got_index != index)
        violation("device %u: nvmlDeviceGetIndex says %u", index, got_index);

    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    expect_ret("nvmlDeviceGetName", nvml.device_get_name(dev, name, sizeof name), NVML_SUCCESS);
    expect_ret("nvmlDeviceGetUUID", nvml.device_get_uuid(dev, uuid, sizeof uuid), NVML_SUCCESS);
    char tiny[1];
    expect_ret("nvmlDeviceGetName(length 1)", nvml.device_get_name(dev, tiny, sizeof tiny),
               NVML_ERROR_INSUFFICIENT_SIZE);
    cJSON_AddStringToObject(out, "name", name);
    cJSON_AddStringToObject(out, "uuid", uuid);
    ret = nvml.device_get_handle_by_uuid(uuid, &by_uuid);
    expect_ret("nvmlDeviceGetHandleByUUID", ret, NVML_SUCCESS);
    if (ret == NVML_SUCCESS && by_uuid != dev)
        violation("device %u: nvmlDeviceGetHandleByUUID(%s) gives another handle", index, uuid);
    (void)count;

    /* A consistent snapshot: memory, processes, memory again, until both reads agree. */
    nvmlMemory_t mem = {0}, mem_after = {0};
    nvmlProcessInfo_t *procs = NULL;
    unsigned n = 0, first_count = 0;
    nvmlReturn_t first_ret = NVML_SUCCESS;
    bool stable = false;
    for (int attempt = 0; attempt < SNAPSHOT_TRIES && !stable; attempt++) {
        free(procs);
        procs = NULL;
        ret = nvml.device_get_memory_info(dev, &mem);
        if (ret != NVML_SUCCESS) {
            expect_ret("nvmlDeviceGetMemoryInfo", ret, NVML_SUCCESS);
            break;
        }
        nvmlReturn_t fr;
        unsigned fc;
        procs = read_processes(dev, first_guess, &n, &fr, &fc);
        if (attempt == 0) {
            first_ret = fr;
            first_count = fc;
        }
        if (!procs)
            break;
        ret = nvml.device_get_memory_info(dev, &mem_after);
        if (ret != NVML_SUCCESS) {
            expect_ret("nvmlDeviceGetMemoryInfo", ret, NVML_SUCCESS);
            break;
        }
        stable = memcmp(&mem, &mem_after, sizeof mem) == 0;
    }
    cJSON *memory = cJSON_AddObjectToObject(out, "memory");
    cJSON_AddNumberToObject(memory, "total", (double)mem.total);
    cJSON_AddNumberToObject(memory, "free", (double)mem.free);
    cJSON_AddNumberToObject(memory, "used", (double)mem.used);
    cJSON *first = cJSON_AddObjectToObject(out, "processes_first_call");
    cJSON_AddNumberToObject(first, "ret", first_ret);
    cJSON_AddNumberToObject(first, "count", first_count);
    cJSON_AddNumberToObject(first, "guess", first_guess);
    cJSON *list = cJSON_AddArrayToObject(out, "processes");
    unsigned long long sum = 0;
    for (unsigned i = 0; i < n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "pid", procs[i].pid);
        cJSON_AddNumberToObject(p, "used", (double)procs[i].usedGpuMemory);
        cJSON_AddNumberToObject(p, "gpu_instance_id", procs[i].gpuInstanceId);
        cJSON_AddNumberToObject(p, "compute_instance_id", procs[i].computeInstanceId);
        cJSON_AddItemToArray(list, p);
        sum += procs[i].usedGpuMemory;
    }
    free(procs);
    if (!stable) {
        violation("device %u: memory never stable across a process-list read", index);
    } else {
        if (mem.free + mem.used != mem.total)
            violation("device %u: free %llu + used %llu != total %llu", index, mem.free, mem.used,
                      mem.total);
        if (check_process_sum && sum != mem.used)
            violation("device %u: processes sum to %llu but used is %llu", index, sum, mem.used);
    }

    nvmlUtilization_t util = {0};
    ret = nvml.device_get_utilization_rates(dev, &util);
    expect_ret("nvmlDeviceGetUtilizationRates", ret, NVML_SUCCESS);
    cJSON *u = cJSON_AddObjectToObject(out, "utilization");
    cJSON_AddNumberToObject(u, "gpu", util.gpu);
    cJSON_AddNumberToObject(u, "memory", util.memory);
    if (util.gpu > 100 || util.memory > 100)
        violation("device %u: utilization above 100%%", index);
    return out;
}

static int finish(cJSON *root, int exit_code)
{
    char *text = cJSON_PrintUnformatted(root);
    if (text) {
        printf("%s\n", text);
        cJSON_free(text);
    }
    cJSON_Delete(root);
    return exit_code;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: nvml_probe LIBRARY [--first-guess N] [--skip-process-sum]\n");
        return 2;
    }
    unsigned first_guess = 1;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--first-guess") == 0 && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > PROCESS_LIST_MAX) {
                fprintf(stderr, "nvml_probe: bad --first-guess\n");
                return 2;
            }
            first_guess = (unsigned)v;
        } else if (strcmp(argv[i], "--skip-process-sum") == 0) {
            check_process_sum = false;
        } else {
            fprintf(stderr, "usage: nvml_probe LIBRARY [--first-guess N] [--skip-process-sum]\n");
            return 2;
        }
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "nvml_probe: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    if (load_api(lib) < 0)
        return 1;

    cJSON *root = cJSON_CreateObject();
    violations = cJSON_CreateArray();
    unsigned count = 0;
    expect_ret("nvmlDeviceGetCount_v2 before init", nvml.device_get_count_v2(&count),
               NVML_ERROR_UNINITIALIZED);

    nvmlReturn_t ret = nvml.init_v2();
    if (ret != NVML_SUCCESS) {
        cJSON_AddNumberToObject(root, "init", ret);
        cJSON_AddStringToObject(root, "init_error", nvml.error_string(ret));
        cJSON_AddItemToObject(root, "violations", violations);
        return finish(root, 3);
    }
    cJSON_AddNumberToObject(root, "init", ret);
    expect_ret("second nvmlInit_v2", nvml.init_v2(), NVML_SUCCESS);

    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    expect_ret("nvmlSystemGetDriverVersion",
               nvml.system_get_driver_version(version, sizeof version), NVML_SUCCESS);
    cJSON_AddStringToObject(root, "driver_version", version);

    ret = nvml.device_get_count_v2(&count);
    expect_ret("nvmlDeviceGetCount_v2", ret, NVML_SUCCESS);
    cJSON_AddNumberToObject(root, "count", ret == NVML_SUCCESS ? count : 0);
    if (ret != NVML_SUCCESS)
        count = 0;

    nvmlDevice_t dev;
    expect_ret("nvmlDeviceGetHandleByIndex_v2(count)",
               nvml.device_get_handle_by_index_v2(count, &dev), NVML_ERROR_INVALID_ARGUMENT);
    expect_ret("nvmlDeviceGetHandleByUUID(unknown)",
               nvml.device_get_handle_by_uuid("GPU-00000000-0000-0000-0000-000000000000", &dev),
               NVML_ERROR_NOT_FOUND);

    cJSON *devices = cJSON_AddArrayToObject(root, "devices");
    for (unsigned i = 0; i < count; i++)
        cJSON_AddItemToArray(devices, probe_device(i, count, first_guess));

    expect_ret("first nvmlShutdown", nvml.shutdown(), NVML_SUCCESS);
    expect_ret("nvmlDeviceGetCount_v2 while still initialised once",
               nvml.device_get_count_v2(&count), NVML_SUCCESS);
    expect_ret("second nvmlShutdown", nvml.shutdown(), NVML_SUCCESS);
    expect_ret("nvmlDeviceGetCount_v2 after shutdown", nvml.device_get_count_v2(&count),
               NVML_ERROR_UNINITIALIZED);
    expect_ret("third nvmlShutdown", nvml.shutdown(), NVML_ERROR_UNINITIALIZED);

    cJSON_AddStringToObject(root, "error_string_9", nvml.error_string(9));
    bool failed = cJSON_GetArraySize(violations) > 0;
    cJSON_AddItemToObject(root, "violations", violations);
    dlclose(lib);
    return finish(root, failed ? 1 : 0);
}
