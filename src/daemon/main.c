/*
 * main: vramd's command line.
 *
 *   vramd --config FILE        run (default ./vramd.yaml)
 *   vramd --check-config [--strict] [--gpu-memory SIZE]... FILE
 *                              validate a config and exit (0 ok, 1 error); its warnings
 *                              (config/warnings.c) go to stderr, and --strict makes them errors;
 *                              every model that fits none of its GPUs is an error (config/fit.c):
 *                              the GPUs' sizes are --gpu-memory's (one per GPU vramd uses), else
 *                              NVML's where it answers (gpu.nvml_library, $VRAMD_NVML_LIBRARY),
 *                              else (no NVML here) the fit is not checked
 *   vramd --version
 *
 * Exit codes: 0 after a drain or a clean stop, 1 when the config is bad or vramd cannot
 * start, 2 for a usage error. A failed start writes exactly one line on stderr: the
 * vramd_start_failed log event (JSON, or text when the config was read and says
 * log.format: text), where the logs go, so that journald keeps one structured record and a
 * person at a terminal reads the reason once. (--check-config prints the plain message.)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/log.h"
#include "common/units.h"
#include "config/config.h"
#include "gpu/gpu.h"
#include "daemon/notify.h"
#include "daemon/vramd.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vramd [--config FILE]\n"
            "       vramd --check-config [--strict] [--gpu-memory SIZE]... FILE\n"
            "       vramd --version\n"
            "\n"
            "vramd is a GPU-memory gatekeeper for model servers: it queues requests, admits each\n"
            "only when its memory fits, supervises workers and shows what the GPU is doing.\n"
            "\n"
            "Options:\n"
            "  -c, --config FILE      the config file (default ./vramd.yaml; docs/config.md, vramd.yaml(5))\n"
            "  --check-config FILE    validate FILE and exit: 0 valid, 1 not; --strict: warnings fail too\n"
            "  --gpu-memory SIZE      with --check-config: a GPU's memory (24GiB), once per GPU vramd uses;\n"
            "                         a model that fits none of its GPUs is an error (without it: NVML's)\n"
            "  -V, --version          vramd's version\n"
            "  -h, --help             this help\n"
            "\n"
            "Environment:\n"
            "  VRAMD_NVML_LIBRARY     NVML library to load, instead of gpu.nvml_library\n"
            "  VRAMD_CUDA_LIBRARY     CUDA driver library (checkpoint tier), instead of gpu.cuda_library\n"
            "  NOTIFY_SOCKET          systemd's notify socket (Type=notify: READY, RELOADING, STOPPING)\n"
            "  WATCHDOG_USEC, WATCHDOG_PID   systemd's watchdog (WatchdogSec=); not passed to workers\n"
            "  VRAMD_CUDA_SHIM_LIBRARY   the CUDA shim (libvramd-cuda.so) for cuda_shim models, instead of\n"
            "                         the one beside vramd (../lib/vramd/) or /usr/lib/vramd/\n"
            "  LD_PRELOAD             kept after the shim in a cuda_shim worker's LD_PRELOAD\n"
            "  PATH                   where a worker's program (cmd[0]) is looked up\n"
            "  PGHOST, PGPASSWORD, ... (libpq)   with jobs.backend: postgres, as psql reads them\n"
            "  VRAMD_PAUSE_AT         for tests: named points where vramd (or its guard) stops itself\n"
            "                         (SIGSTOP) until SIGCONT, comma-separated: cgroup_opened, guard_locked\n"
            "\n"
            "Files:\n"
            "  ./vramd.yaml           the config, unless --config names another\n"
            "  admin_token_file       the admin bearer token (a config key)\n"
            "  state_dir/             jobs.db (the job journal), results/, pid files (default ./var);\n"
            "                         shim/: the CUDA shims' grant socket and pages (docs/shim.md)\n"
            "  /proc/meminfo, /proc/self/cgroup, /sys/fs/cgroup   host memory, the cgroup's room,\n"
            "                         the workers' cgroups (cgroup.mode)\n"
            "  libnvidia-ml.so.1, libcuda.so.1   the GPU driver's libraries (dlopen)\n"
            "\n"
            "Signals:\n"
            "  SIGHUP                 re-read the config file (a bad one is refused, the old one stays)\n"
            "  SIGTERM, SIGINT        drain: stop admitting, finish what runs, stop the workers, exit 0\n"
            "\n"
            "Exit codes:\n"
            "  0  after a drain or a clean stop\n"
            "  1  a bad config, or vramd could not start (one vramd_start_failed line on stderr)\n"
            "  2  usage error\n"
            "\n"
            "Example:\n"
            "  vramd --check-config --strict /etc/vramd/vramd.yaml && vramd --config /etc/vramd/vramd.yaml\n");
}

static void print_line(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "%s\n", line);
}

/* The GPUs vramd would use, from NVML (the config's library and gpu.devices): their count
 * (0 when NVML does not answer: why, on stderr). */
static size_t gpus_from_nvml(const config_t *c, config_gpu_size_t *out, size_t cap)
{
    gpu_options_t opt = {.library = c->gpu.nvml_library, .indexes = c->gpu.devices, .n_indexes = c->gpu.n_devices,
                         .uuids = c->gpu.device_uuids, .n_uuids = c->gpu.n_device_uuids};
    char err[256];
    gpu_t *g = gpu_open(&opt, err, sizeof err);
    static gpu_snapshot_t g_snap; /* large: not on the stack */
    size_t n = 0;
    /* no NVML (a machine without the GPUs): no card to check against; --gpu-memory gives them */
    if (g && gpu_probe_once(g, &g_snap) == 0 && g_snap.ok) {
        for (size_t i = 0; i < g_snap.n_devices && n < cap; i++)
            out[n++] = (config_gpu_size_t){g_snap.devices[i].index, g_snap.devices[i].total};
    }
    if (g)
        gpu_close(g);
    return n;
}

/* argv[from..]: --check-config [--strict] [--gpu-memory SIZE]... FILE, in any order: 0
 * valid, 1 an error (or a warning under --strict), 2 usage. */
static int check_config(int argc, char **argv, int from)
{
    const char *file = NULL;
    bool strict = false;
    config_gpu_size_t gpus[GPU_MAX_DEVICES];
    size_t n_given = 0;
    for (int j = from; j < argc; j++) {
        if (!strcmp(argv[j], "--check-config"))
            continue;
        if (!strcmp(argv[j], "--gpu-memory")) {
            uint64_t v = 0;
            if (j + 1 >= argc || units_parse_size(argv[j + 1], &v) != 0 || v == 0 || n_given >= GPU_MAX_DEVICES) {
                fprintf(stderr, "vramd: --gpu-memory needs a size like 24GiB (at most %d of them), got %s\n",
                        GPU_MAX_DEVICES, j + 1 < argc ? argv[j + 1] : "nothing");
                return 2;
            }
            gpus[n_given] = (config_gpu_size_t){(int)n_given, v};
            n_given++;
            j++;
        } else if (!strcmp(argv[j], "--strict"))
            strict = true;
        else if (file == NULL)
            file = argv[j];
        else
            file = ""; /* two files */
    }
    if (file == NULL || file[0] == '\0') {
        usage(stderr);
        return 2;
    }
    char err[CONFIG_ERR_MAX];
    config_t *c = config_load(file, err, sizeof err);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (size_t w = 0; w < c->n_warnings; w++)
        fprintf(stderr, "%s\n", c->warnings[w].text);
    /* --gpu-memory's i-th size is the i-th GPU vramd uses: gpu.devices' i-th index when set */
    for (size_t i = 0; i < n_given && i < c->gpu.n_devices; i++)
        gpus[i].index = c->gpu.devices[i];
    size_t n_gpus = n_given ? n_given : c->n_models ? gpus_from_nvml(c, gpus, GPU_MAX_DEVICES) : 0;
    size_t misfits = n_gpus ? config_fit_errors(c, gpus, n_gpus, print_line, NULL) : 0;
    int rc = 0;
    if (misfits > 0) {
        fprintf(stderr, "%s: %zu model%s cannot fit the GPUs\n", file, misfits, misfits == 1 ? "" : "s");
        rc = 1;
    } else if (c->n_warnings > 0 && strict) {
        fprintf(stderr, "%s: %zu warning%s (--strict makes warnings errors)\n", file, c->n_warnings,
                c->n_warnings == 1 ? "" : "s");
        rc = 1;
    } else {
        char summary[96];
        config_summary(c, summary, sizeof summary);
        printf("%s: ok (%s)\n", file, summary);
    }
    config_unref(c);
    return rc;
}

static void close_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int main(int argc, char **argv)
{
    const char *config = "vramd.yaml";
    for (int i = 1; i < argc; i++) /* --check-config's options may come before it */
        if (!strcmp(argv[i], "--check-config"))
            return check_config(argc, argv, 1);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
            printf("vramd %s\n", VRAMD_VERSION);
            return 0;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((!strcmp(argv[i], "--config") || !strcmp(argv[i], "-c")) && i + 1 < argc) {
            config = argv[++i];
            continue;
        }
        if (!strncmp(argv[i], "--config=", 9)) {
            config = argv[i] + 9;
            continue;
        }
        usage(stderr);
        return 2;
    }
    notify_init(); /* before any thread: it takes WATCHDOG_* out of the environment */
    uv_loop_t loop;
    uv_loop_init(&loop);
    static vramd_t g_daemon;
    char err[CONFIG_ERR_MAX];
    if (vramd_init(&g_daemon, &loop, config, err, sizeof err) != 0) {
        log_event(LOG_ERROR, "vramd_start_failed", "error=%s", err);
        notify_start_failed(err);
        uv_walk(&loop, close_handle, NULL); /* a listener that could not bind, say */
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        return 1;
    }
    notify_ready(&g_daemon.core);
    int rc = vramd_run(&g_daemon);
    uv_loop_close(&loop);
    return rc;
}
