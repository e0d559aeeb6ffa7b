/*
 * simgpu: the command-line tool for simulated GPU sets (sim/lib/simgpu.h).
 *
 *   simgpu create NAME --memory SIZE [--gpus N] [--model-name TEXT] [--release-delay DUR]
 *                 [--pcie-bandwidth RATE] [--checkpoint-bandwidth RATE] [--restore-bandwidth RATE]
 *   simgpu show NAME [--json]
 *   simgpu rm NAME
 *   simgpu alloc NAME --bytes SIZE [--gpu I] [--hold DUR]
 *   simgpu list [--json]
 *
 * Sizes and durations use src/common/units.h ("24GiB", "1.5s"). `alloc` is a process that
 * takes memory and holds it (foreign usage, as another program on the card would): it prints
 * one line "allocated BYTES on gpu I of NAME pid PID" (PID: getpid(), its pid in its own pid
 * namespace) when it holds the memory, then holds it for --hold (simulated time, scaled by
 * SIMGPU_TIMESCALE; default: until SIGTERM/SIGINT), frees it (as cudaFree would) and exits 0. A SIGKILLed holder leaves its memory to the
 * set's release delay, like a crashed CUDA process.
 * `--pcie-bandwidth` is the simulated host<->GPU copy rate of cuMemcpy (libcuda-sim.so):
 * "20GB/s" (the default, or $SIMGPU_PCIE_BW), "16GiB/s", "2e9". The driver's checkpoint runs
 * slower, as measured (shared/FIELD.md): `--checkpoint-bandwidth` (device to host, default
 * 2GB/s or $SIMGPU_CHECKPOINT_BW) and `--restore-bandwidth` (back, 5GB/s or $SIMGPU_RESTORE_BW).
 * `show` lists each process's CUDA checkpoint state and its parked (host) bytes, per GPU.
 * Pids are host pids (see simgpu.h); a process of another pid namespace (a container) also
 * shows its pid there ("ns_pid", "pid_ns" in JSON) and pid 0 until the host side found its
 * host pid (show, run on the host, finds it).
 *
 * Exit codes: 0 ok, 1 error (message on stderr), 2 usage.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/units.h"
#include "simgpu.h"

#define EXIT_OK 0
#define EXIT_ERROR 1
#define EXIT_USAGE 2
#define ERR_LEN 512
#define SHM_DIR "/dev/shm"
#define SHM_PREFIX "simgpu."
#define LIST_MAX 1024 /* sets shown by `simgpu list` */

static const char usage_text[] =
    "usage: simgpu create NAME --memory SIZE [--gpus N] [--model-name TEXT] [--release-delay DUR]\n"
    "                     [--pcie-bandwidth RATE] [--checkpoint-bandwidth RATE]\n"
    "                     [--restore-bandwidth RATE]\n"
    "       simgpu show NAME [--json]\n"
    "       simgpu rm NAME\n"
    "       simgpu alloc NAME --bytes SIZE [--gpu I] [--hold DUR]\n"
    "       simgpu list [--json]\n"
    "SIZE: 24GiB, 512MiB, 1.5GiB, 1000000 (bytes). DUR: 500ms, 1.5s, 2m (simulated time;\n"
    "SIMGPU_TIMESCALE=0.01 makes it 100x shorter). RATE: 20GB/s (default), 16GiB/s, 2e9.\n";

/* Print "simgpu: PROBLEM[ 'ARG']" and the usage; returns the usage exit code. */
static int usage_error(const char *problem, const char *arg)
{
    if (arg)
        fprintf(stderr, "simgpu: %s '%s'\n%s", problem, arg, usage_text);
    else
        fprintf(stderr, "simgpu: %s\n%s", problem, usage_text);
    return EXIT_USAGE;
}

/* ---- option parsing: "--name value" or "--name=value"; flags take no value ---- */

struct option_spec {
    const char *name;  /* "--gpus" */
    bool takes_value;
    const char **value; /* set to the value (or to "" for a flag) */
};

/* Parse argv[first..argc) into NAME (the one positional) and options. Returns 0 or the
 * usage exit code after printing the problem. */
static int parse_options(int argc, char **argv, int first, const char **positional,
                         struct option_spec *specs, size_t n_specs)
{
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (!positional)
                return usage_error("unexpected argument", arg);
            if (*positional)
                return usage_error("unexpected extra argument", arg);
            *positional = arg;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        struct option_spec *spec = NULL;
        for (size_t k = 0; k < n_specs; k++)
            if (strlen(specs[k].name) == name_len && strncmp(specs[k].name, arg, name_len) == 0)
                spec = &specs[k];
        if (!spec)
            return usage_error("unknown option", arg);
        if (!spec->takes_value) {
            if (eq)
                return usage_error("this option takes no value:", arg);
            *spec->value = "";
        } else if (eq) {
            *spec->value = eq + 1;
        } else {
            if (i + 1 >= argc)
                return usage_error("this option needs a value:", arg);
            *spec->value = argv[++i];
        }
    }
    return 0;
}

static int parse_size_arg(const char *option, const char *text, uint64_t *out)
{
    if (units_parse_size(text, out) < 0) {
        fprintf(stderr, "simgpu: %s: invalid size '%s' (e.g. 24GiB, 512MiB, 1000000)\n", option,
                text);
        return -1;
    }
    return 0;
}

static int parse_duration_arg(const char *option, const char *text, uint64_t *out)
{
    if (units_parse_duration_ms(text, out) < 0) {
        fprintf(stderr, "simgpu: %s: invalid duration '%s' (e.g. 500ms, 1.5s, 2m)\n", option,
                text);
        return -1;
    }
    return 0;
}

static int parse_int_arg(const char *option, const char *text, int min, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno || v < min || v > max) {
        fprintf(stderr, "simgpu: %s: expected an integer %d..%d, got '%s'\n", option, min, max,
                text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static simgpu_t *open_set(const char *name)
{
    char err[ERR_LEN] = "";
    simgpu_t *s = simgpu_open(name, err, sizeof err);
    if (!s)
        fprintf(stderr, "simgpu: %s\n", err);
    return s;
}

/* ---- create / rm ---- */

static int cmd_create(int argc, char **argv)
{
    const char *name = NULL, *gpus_text = NULL, *memory_text = NULL, *model = NULL,
               *delay_text = NULL, *bw_text = NULL, *ckpt_text = NULL, *restore_text = NULL;
    struct option_spec specs[] = {
        {"--gpus", true, &gpus_text},
        {"--memory", true, &memory_text},
        {"--model-name", true, &model},
        {"--release-delay", true, &delay_text},
        {"--pcie-bandwidth", true, &bw_text},
        {"--checkpoint-bandwidth", true, &ckpt_text},
        {"--restore-bandwidth", true, &restore_text},
    };
    int rc = parse_options(argc, argv, 2, &name, specs, sizeof specs / sizeof specs[0]);
    if (rc)
        return rc;
    if (!name)
        return usage_error("create: missing NAME", NULL);
    if (!memory_text)
        return usage_error("create: --memory SIZE is required", NULL);
    int n_gpus = 1;
    uint64_t memory = 0, delay_ms = 0;
    if (gpus_text && parse_int_arg("--gpus", gpus_text, 1, SIMGPU_MAX_GPUS, &n_gpus) < 0)
        return EXIT_USAGE;
    if (parse_size_arg("--memory", memory_text, &memory) < 0)
        return EXIT_USAGE;
    if (memory == 0) {
        fprintf(stderr, "simgpu: --memory must be more than 0\n");
        return EXIT_USAGE;
    }
    if (delay_text && parse_duration_arg("--release-delay", delay_text, &delay_ms) < 0)
        return EXIT_USAGE;
    const struct {
        const char *flag, *text, *env;
    } rates[] = {{"--pcie-bandwidth", bw_text, "SIMGPU_PCIE_BW"},
                 {"--checkpoint-bandwidth", ckpt_text, "SIMGPU_CHECKPOINT_BW"},
                 {"--restore-bandwidth", restore_text, "SIMGPU_RESTORE_BW"}};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        uint64_t bw = 0;
        if (!rates[i].text)
            continue;
        if (simgpu_parse_bandwidth(rates[i].text, &bw) < 0 || bw == 0) {
            fprintf(stderr, "simgpu: %s: invalid rate '%s' (e.g. 20GB/s, 16GiB/s, 2e9)\n", rates[i].flag,
                    rates[i].text);
            return EXIT_USAGE;
        }
        setenv(rates[i].env, rates[i].text, 1); /* simgpu_create takes the set's rates from them */
    }
    char err[ERR_LEN] = "";
    if (simgpu_create(name, n_gpus, memory, model, delay_ms, err, sizeof err) < 0) {
        fprintf(stderr, "simgpu: create: %s\n", err);
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

static int cmd_rm(int argc, char **argv)
{
    const char *name = NULL;
    int rc = parse_options(argc, argv, 2, &name, NULL, 0);
    if (rc)
        return rc;
    if (!name)
        return usage_error("rm: missing NAME", NULL);
    char err[ERR_LEN] = "";
    if (simgpu_remove(name, err, sizeof err) < 0) {
        fprintf(stderr, "simgpu: rm: %s\n", err);
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

/* ---- show ---- */

static int park_state_of(const simgpu_park_info_t *parks, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (pid > 0 && parks[i].pid == pid)
            return parks[i].state;
    return SIMGPU_CUDA_RUNNING;
}

/* "checkpoint": every process with a CUDA state (registered or parked), "parked": the host
 * bytes of all. */
static bool add_parks_json(cJSON *root, const simgpu_park_info_t *parks, size_t *n)
{
    if (*n > SIMGPU_MAX_PROCS)
        *n = SIMGPU_MAX_PROCS;
    cJSON *list = cJSON_AddArrayToObject(root, "cuda_processes");
    if (!list)
        return false;
    uint64_t total = 0;
    for (size_t i = 0; i < *n; i++) {
        cJSON *p = cJSON_CreateObject();
        if (!p)
            return false;
        cJSON_AddItemToArray(list, p);
        cJSON_AddNumberToObject(p, "pid", parks[i].pid);
        if (parks[i].other_ns)
            cJSON_AddNumberToObject(p, "ns_pid", parks[i].ns_pid);
        cJSON_AddStringToObject(p, "state", simgpu_cuda_state_name(parks[i].state));
        cJSON_AddStringToObject(p, "op", simgpu_park_op_name(parks[i].op));
        cJSON_AddBoolToObject(p, "registered", parks[i].gate);
        cJSON_AddNumberToObject(p, "parked", (double)parks[i].parked_total);
        total += parks[i].parked_total;
    }
    cJSON_AddNumberToObject(root, "parked", (double)total);
    return true;
}

/* Per GPU: "parked" (host bytes that came from it) and "parked_processes". */
static bool add_gpu_parked_json(cJSON *gpu, int g, const simgpu_park_info_t *parks, size_t n)
{
    cJSON *list = cJSON_CreateArray();
    if (!list)
        return false;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!parks[i].parked[g])
            continue;
        cJSON *p = cJSON_CreateObject();
        if (!p) {
            cJSON_Delete(list);
            return false;
        }
        cJSON_AddItemToArray(list, p);
        cJSON_AddNumberToObject(p, "pid", parks[i].pid);
        cJSON_AddNumberToObject(p, "parked", (double)parks[i].parked[g]);
        cJSON_AddStringToObject(p, "state", simgpu_cuda_state_name(parks[i].state));
        total += parks[i].parked[g];
    }
    cJSON_AddNumberToObject(gpu, "parked", (double)total);
    cJSON_AddItemToObject(gpu, "parked_processes", list);
    return true;
}

/* The GPU's per-cgroup limits (nvmlDeviceSetMemoryLimits_v1) as "limits": [...]. */
static bool add_gpu_limits_json(simgpu_t *s, cJSON *gpu, int g)
{
    static simgpu_limit_t limits[SIMGPU_MAX_LIMITS];
    size_t n = 0;
    cJSON *list = cJSON_CreateArray();
    if (!list || simgpu_limit_list(s, g, limits, SIMGPU_MAX_LIMITS, &n) < 0) {
        cJSON_Delete(list);
        return false;
    }
    cJSON_AddItemToObject(gpu, "limits", list);
    for (size_t i = 0; i < n && i < SIMGPU_MAX_LIMITS; i++) {
        cJSON *l = cJSON_CreateObject();
        if (!l)
            return false;
        cJSON_AddItemToArray(list, l);
        cJSON_AddStringToObject(l, "cgroup", limits[i].cgroup);
        cJSON_AddNumberToObject(l, "soft", (double)limits[i].soft);
        cJSON_AddNumberToObject(l, "hard", (double)limits[i].hard);
        cJSON_AddNumberToObject(l, "used", (double)limits[i].used);
    }
    return true;
}

static cJSON *set_to_json(simgpu_t *s, const char *name)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *gpus = cJSON_CreateArray();
    if (!root || !gpus) {
        cJSON_Delete(root);
        cJSON_Delete(gpus);
        return NULL;
    }
    uint64_t delay_sim = 0, delay_real = 0;
    simgpu_release_delay(s, &delay_sim, &delay_real);
    cJSON_AddStringToObject(root, "name", name);
    cJSON_AddNumberToObject(root, "release_delay_ms", (double)delay_sim);
    cJSON_AddNumberToObject(root, "release_delay_real_ms", (double)delay_real);
    cJSON_AddNumberToObject(root, "pcie_bandwidth", (double)simgpu_pcie_bandwidth(s));
    cJSON_AddNumberToObject(root, "checkpoint_bandwidth", (double)simgpu_checkpoint_bandwidth(s, true));
    cJSON_AddNumberToObject(root, "restore_bandwidth", (double)simgpu_checkpoint_bandwidth(s, false));
    cJSON_AddItemToObject(root, "gpus", gpus);
    static simgpu_proc_t procs[SIMGPU_MAX_PROCS];
    static simgpu_park_info_t parks[SIMGPU_MAX_PROCS];
    size_t n_parks = 0;
    if (simgpu_park_list(s, parks, SIMGPU_MAX_PROCS, &n_parks) < 0 || !add_parks_json(root, parks, &n_parks))
        goto fail;
    for (int g = 0; g < simgpu_count(s); g++) {
        simgpu_info_t info;
        size_t n = 0;
        if (simgpu_info(s, g, &info) < 0 || simgpu_processes(s, g, procs, SIMGPU_MAX_PROCS, &n) < 0)
            goto fail;
        if (n > SIMGPU_MAX_PROCS)
            n = SIMGPU_MAX_PROCS;
        cJSON *gpu = cJSON_CreateObject();
        cJSON *list = cJSON_CreateArray();
        if (!gpu || !list) {
            cJSON_Delete(gpu);
            cJSON_Delete(list);
            goto fail;
        }
        cJSON_AddItemToArray(gpus, gpu);
        cJSON_AddNumberToObject(gpu, "index", g);
        cJSON_AddStringToObject(gpu, "name", info.name);
        cJSON_AddStringToObject(gpu, "uuid", info.uuid);
        cJSON_AddNumberToObject(gpu, "total", (double)info.total);
        cJSON_AddNumberToObject(gpu, "used", (double)info.used);
        cJSON_AddNumberToObject(gpu, "free", (double)info.free);
        cJSON_AddNumberToObject(gpu, "utilization_gpu", info.utilization_gpu);
        cJSON_AddNumberToObject(gpu, "utilization_memory", info.utilization_memory);
        cJSON_AddItemToObject(gpu, "processes", list);
        for (size_t i = 0; i < n; i++) {
            cJSON *p = cJSON_CreateObject();
            if (!p)
                goto fail;
            cJSON_AddItemToArray(list, p);
            cJSON_AddNumberToObject(p, "pid", procs[i].pid);
            cJSON_AddNumberToObject(p, "used", (double)procs[i].used);
            cJSON_AddBoolToObject(p, "dead", procs[i].dead);
            if (procs[i].other_ns) { /* a process of another pid namespace (a container) */
                cJSON_AddNumberToObject(p, "ns_pid", procs[i].ns_pid);
                cJSON_AddNumberToObject(p, "pid_ns", (double)procs[i].pid_ns);
            }
        }
        if (!add_gpu_parked_json(gpu, g, parks, n_parks) || !add_gpu_limits_json(s, gpu, g))
            goto fail;
    }
    /* after the GPUs' limit lists: listing drops the limits whose cgroup is gone */
    cJSON_AddNumberToObject(root, "limits_dropped", (double)simgpu_limits_dropped(s));
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}

/* "  parked 4GiB in host memory" and one line per parked process of GPU g. */
static void show_parked_human(int g, const simgpu_park_info_t *parks, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += parks[i].parked[g];
    if (!total)
        return;
    char a[32];
    units_format_size(total, a, sizeof a);
    printf("  parked %s in host memory\n", a);
    for (size_t i = 0; i < n; i++) {
        if (!parks[i].parked[g])
            continue;
        units_format_size(parks[i].parked[g], a, sizeof a);
        printf("  pid %-8d %10s  parked (%s%s%s)\n", (int)parks[i].pid, a,
               simgpu_cuda_state_name(parks[i].state), parks[i].op ? ", " : "",
               simgpu_park_op_name(parks[i].op));
    }
}

static int show_human(simgpu_t *s, const char *name)
{
    uint64_t delay_sim = 0, delay_real = 0;
    char a[32], b[32], c[32];
    simgpu_release_delay(s, &delay_sim, &delay_real);
    units_format_duration(delay_sim, a, sizeof a);
    units_format_duration(delay_real, b, sizeof b);
    int n_gpus = simgpu_count(s);
    printf("%s: %d GPU%s, release delay %s (%s real), PCIe %.1f GB/s, checkpoint %.1f GB/s out %.1f GB/s back\n",
           name, n_gpus, n_gpus == 1 ? "" : "s", a, b, (double)simgpu_pcie_bandwidth(s) / 1e9,
           (double)simgpu_checkpoint_bandwidth(s, true) / 1e9, (double)simgpu_checkpoint_bandwidth(s, false) / 1e9);
    static simgpu_proc_t procs[SIMGPU_MAX_PROCS];
    static simgpu_park_info_t parks[SIMGPU_MAX_PROCS];
    size_t n_parks = 0;
    if (simgpu_park_list(s, parks, SIMGPU_MAX_PROCS, &n_parks) < 0)
        n_parks = 0;
    if (n_parks > SIMGPU_MAX_PROCS)
        n_parks = SIMGPU_MAX_PROCS;
    for (int g = 0; g < n_gpus; g++) {
        simgpu_info_t info;
        size_t n = 0;
        if (simgpu_info(s, g, &info) < 0 || simgpu_processes(s, g, procs, SIMGPU_MAX_PROCS, &n) < 0) {
            fprintf(stderr, "simgpu: show: cannot read GPU %d: %s\n", g, strerror(errno));
            return EXIT_ERROR;
        }
        if (n > SIMGPU_MAX_PROCS)
            n = SIMGPU_MAX_PROCS;
        units_format_size(info.total, a, sizeof a);
        units_format_size(info.used, b, sizeof b);
        units_format_size(info.free, c, sizeof c);
        printf("GPU %d: %s  %s\n", g, info.name, info.uuid);
        printf("  total %s  used %s  free %s  util %u%%  mem %u%%\n", a, b, c,
               info.utilization_gpu, info.utilization_memory);
        if (n == 0)
            printf("  no processes\n");
        for (size_t i = 0; i < n; i++) {
            units_format_size(procs[i].used, a, sizeof a);
            int st = park_state_of(parks, n_parks, procs[i].pid);
            char ns[64] = "";
            if (procs[i].other_ns)
                snprintf(ns, sizeof ns, "  (pid %d in pid namespace %llu)", (int)procs[i].ns_pid,
                         (unsigned long long)procs[i].pid_ns);
            printf("  pid %-8d %10s%s%s%s%s\n", (int)procs[i].pid, a, ns,
                   procs[i].dead ? "  (dead, release pending)" : "", st ? "  " : "",
                   st ? simgpu_cuda_state_name(st) : "");
        }
        show_parked_human(g, parks, n_parks);
    }
    return EXIT_OK;
}

static int cmd_show(int argc, char **argv)
{
    const char *name = NULL, *json = NULL;
    struct option_spec specs[] = {{"--json", false, &json}};
    int rc = parse_options(argc, argv, 2, &name, specs, 1);
    if (rc)
        return rc;
    if (!name)
        return usage_error("show: missing NAME", NULL);
    simgpu_t *s = open_set(name);
    if (!s)
        return EXIT_ERROR;
    if (json) {
        cJSON *root = set_to_json(s, name);
        char *text = root ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        simgpu_close(s);
        if (!text) {
            fprintf(stderr, "simgpu: show: cannot build JSON\n");
            return EXIT_ERROR;
        }
        printf("%s\n", text);
        cJSON_free(text);
        return EXIT_OK;
    }
    rc = show_human(s, name);
    simgpu_close(s);
    return rc;
}

/* ---- list ---- */

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmd_list(int argc, char **argv)
{
    const char *json = NULL;
    struct option_spec specs[] = {{"--json", false, &json}};
    int rc = parse_options(argc, argv, 2, NULL, specs, 1);
    if (rc)
        return rc;
    DIR *dir = opendir(SHM_DIR);
    if (!dir) {
        fprintf(stderr, "simgpu: list: %s: %s\n", SHM_DIR, strerror(errno));
        return EXIT_ERROR;
    }
    static char *names[LIST_MAX];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL && n < LIST_MAX) {
        if (strncmp(de->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0)
            continue;
        const char *set_name = de->d_name + strlen(SHM_PREFIX);
        if (!simgpu_name_valid(set_name))
            continue;
        names[n] = strdup(set_name);
        if (names[n])
            n++;
    }
    closedir(dir);
    qsort(names, n, sizeof names[0], compare_names);

    cJSON *array = json ? cJSON_CreateArray() : NULL;
    for (size_t i = 0; i < n; i++) {
        simgpu_t *s = simgpu_open(names[i], NULL, 0);
        if (!s)
            continue; /* removed meanwhile, or a foreign object */
        simgpu_info_t info;
        int n_gpus = simgpu_count(s);
        uint64_t total = 0, used = 0;
        for (int g = 0; g < n_gpus; g++) {
            if (simgpu_info(s, g, &info) == 0) {
                total += info.total;
                used += info.used;
            }
        }
        simgpu_close(s);
        if (array) {
            cJSON *item = cJSON_CreateObject();
            if (item) {
                cJSON_AddStringToObject(item, "name", names[i]);
                cJSON_AddNumberToObject(item, "gpus", n_gpus);
                cJSON_AddNumberToObject(item, "total", (double)total);
                cJSON_AddNumberToObject(item, "used", (double)used);
                cJSON_AddItemToArray(array, item);
            }
        } else {
            char t[32], u[32];
            units_format_size(total, t, sizeof t);
            units_format_size(used, u, sizeof u);
            printf("%s  %d GPU%s  used %s of %s\n", names[i], n_gpus, n_gpus == 1 ? "" : "s", u, t);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    if (array) {
        char *text = cJSON_PrintUnformatted(array);
        cJSON_Delete(array);
        if (!text) {
            fprintf(stderr, "simgpu: list: cannot build JSON\n");
            return EXIT_ERROR;
        }
        printf("%s\n", text);
        cJSON_free(text);
    }
    return EXIT_OK;
}

/* ---- alloc ---- */

static int cmd_alloc(int argc, char **argv)
{
    const char *name = NULL, *gpu_text = NULL, *bytes_text = NULL, *hold_text = NULL;
    struct option_spec specs[] = {
        {"--gpu", true, &gpu_text},
        {"--bytes", true, &bytes_text},
        {"--hold", true, &hold_text},
    };
    int rc = parse_options(argc, argv, 2, &name, specs, sizeof specs / sizeof specs[0]);
    if (rc)
        return rc;
    if (!name)
        return usage_error("alloc: missing NAME", NULL);
    if (!bytes_text)
        return usage_error("alloc: --bytes SIZE is required", NULL);
    int gpu = 0;
    uint64_t bytes = 0, hold_ms = 0;
    if (gpu_text && parse_int_arg("--gpu", gpu_text, 0, SIMGPU_MAX_GPUS - 1, &gpu) < 0)
        return EXIT_USAGE;
    if (parse_size_arg("--bytes", bytes_text, &bytes) < 0)
        return EXIT_USAGE;
    if (hold_text && parse_duration_arg("--hold", hold_text, &hold_ms) < 0)
        return EXIT_USAGE;

    /* The stop signals are blocked and taken with sigtimedwait: no handler, no race. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);

    simgpu_t *s = open_set(name);
    if (!s)
        return EXIT_ERROR;
    if (gpu >= simgpu_count(s)) {
        fprintf(stderr, "simgpu: alloc: set '%s' has no GPU %d (it has %d)\n", name, gpu,
                simgpu_count(s));
        simgpu_close(s);
        return EXIT_ERROR;
    }
    if (simgpu_alloc(s, gpu, bytes) < 0) {
        int e = errno;
        char want[32], have[32];
        simgpu_info_t info;
        units_format_size(bytes, want, sizeof want);
        if (e == ENOMEM && simgpu_info(s, gpu, &info) == 0) {
            units_format_size(info.free, have, sizeof have);
            fprintf(stderr, "simgpu: alloc: out of memory on GPU %d of '%s': %s requested, %s free\n",
                    gpu, name, want, have);
        } else {
            fprintf(stderr, "simgpu: alloc: %s on GPU %d of '%s': %s\n", want, gpu, name,
                    strerror(e));
        }
        simgpu_close(s);
        return EXIT_ERROR;
    }
    printf("allocated %llu on gpu %d of %s pid %d\n", (unsigned long long)bytes, gpu, name,
           (int)getpid());
    fflush(stdout);

    uint64_t real_hold_ms = hold_text ? simgpu_scaled_ms(hold_ms) : 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        /* Wake at least every second so a long hold is measured on the monotonic clock. */
        uint64_t wait_ms = 1000;
        if (hold_text) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            uint64_t elapsed = (uint64_t)(now.tv_sec - start.tv_sec) * 1000u +
                               (uint64_t)((now.tv_nsec - start.tv_nsec) / 1000000);
            if (elapsed >= real_hold_ms)
                break;
            if (real_hold_ms - elapsed < wait_ms)
                wait_ms = real_hold_ms - elapsed;
        }
        struct timespec ts = {(time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000L};
        if (sigtimedwait(&stop_signals, NULL, &ts) >= 0)
            break;
    }
    simgpu_free(s, gpu, bytes);
    simgpu_close(s);
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("missing command", NULL);
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "create") == 0)
        return cmd_create(argc, argv);
    if (strcmp(cmd, "show") == 0)
        return cmd_show(argc, argv);
    if (strcmp(cmd, "rm") == 0)
        return cmd_rm(argc, argv);
    if (strcmp(cmd, "alloc") == 0)
        return cmd_alloc(argc, argv);
    if (strcmp(cmd, "list") == 0)
        return cmd_list(argc, argv);
    return usage_error("unknown command", cmd);
}
