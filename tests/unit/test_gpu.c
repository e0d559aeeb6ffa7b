/*
 * test_gpu: the GPU probe (src/gpu/nvml.c) against the simulated NVML library.
 *
 * The library is build/lib/libnvidia-ml-sim.so beside this binary's build directory
 * (/proc/self/exe -> ../lib/), so a build-san test loads the build-san library. Each test
 * creates its own simulated GPU set ("utgpu.PID.N"), points SIMGPU at it, and removes it in
 * teardown, killing any child it forked.
 *
 * Covers: open/close, count, names, UUIDs, totals; per-process usage of this process and of
 * forked children, with more processes than the first guess of the list size (the
 * INSUFFICIENT_SIZE path); utilization; device selection by index, by UUID, both, and
 * unknown ones; library choice (option, VRAMD_NVML_LIBRARY, default) and its errors (bad
 * path, a library lacking NVML symbols, nvmlInit_v2 failing); polling on a real uv loop
 * (an allocation made after polling started shows up; gpu_poll_now; poll_now and close from
 * inside the callback; stop and restart); gpu_close while a read is in flight (held there
 * deterministically through the probe's own lock, as a hung driver would hold it: the loop
 * ends without waiting, the read's thread frees the probe when it returns); SIGKILLed foreign processes whose memory
 * disappears only after the set's release delay.
 *
 * nvml.c is included (h2o's way of reaching static functions), so the pure pieces
 * (procs_from_nvml's truncation and NVML_VALUE_NOT_AVAILABLE) and the probe's private state
 * (the process buffer's growth, the lock) can be checked too; the test binary's gpu_*
 * symbols are this copy, so libvramd.a's nvml.o is not linked in.
 *
 * Children report through pipes and exit codes, never through cmocka. Every wait polls a
 * condition with a generous deadline; no assertion depends on how fast the machine is.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpu/nvml.c"

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)
#define WAIT_LIMIT_MS 20000 /* generous: a loaded 2-core machine */
#define MAX_CHILDREN 32
#define TEST_GPU_NAME "NVIDIA Test GPU"

static char set_name[64];
static int set_counter;
static char sim_library[PATH_MAX];
static pid_t children[MAX_CHILDREN];
static size_t n_children;
static simgpu_t *own_set; /* this process's own mapping, for its allocations */
/* Probes a test opened and has not closed yet; teardown closes them, so that a failed test
 * does not leave NVML initialised on its set for the next one. */
#define MAX_TRACKED 8
static gpu_t *tracked[MAX_TRACKED];
static uv_loop_t test_loop; /* every polling test runs on this loop */

/* ---- fixtures ---- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* BUILD/tests/test_gpu -> BUILD/lib/libnvidia-ml-sim.so (BUILD: build or build-san) */
static int find_sim_library(void **state)
{
    (void)state;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *tests_dir = dirname(exe);          /* build/tests */
    char *build_dir = dirname(tests_dir);    /* build */
    snprintf(sim_library, sizeof sim_library, "%s/lib/libnvidia-ml-sim.so", build_dir);
    if (access(sim_library, R_OK) != 0) {
        fprintf(stderr, "test_gpu: %s is missing (make %s)\n", sim_library, sim_library);
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(set_name, sizeof set_name, "utgpu.%d.%d", (int)getpid(), ++set_counter);
    setenv("SIMGPU_TIMESCALE", "1", 1);
    setenv("SIMGPU", set_name, 1);
    unsetenv("VRAMD_NVML_LIBRARY");
    n_children = 0;
    own_set = NULL;
    memset(tracked, 0, sizeof tracked);
    return uv_loop_init(&test_loop);
}

static void reap_children(void)
{
    for (size_t i = 0; i < n_children; i++) {
        if (children[i] > 0) {
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
    n_children = 0;
}

static void close_probe(gpu_t *g)
{
    for (size_t i = 0; i < MAX_TRACKED; i++)
        if (tracked[i] == g)
            tracked[i] = NULL;
    gpu_close(g);
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < MAX_TRACKED; i++)
        if (tracked[i])
            close_probe(tracked[i]);
    uv_run(&test_loop, UV_RUN_DEFAULT);
    uv_loop_close(&test_loop);
    reap_children();
    if (own_set) {
        simgpu_close(own_set);
        own_set = NULL;
    }
    simgpu_remove(set_name, NULL, 0);
    unsetenv("VRAMD_NVML_LIBRARY");
    return 0;
}

static void create_set(int n_gpus, uint64_t memory, uint64_t release_delay_ms)
{
    char err[256] = "";
    if (simgpu_create(set_name, n_gpus, memory, TEST_GPU_NAME, release_delay_ms, err,
                      sizeof err) != 0)
        fail_msg("simgpu_create: %s", err);
    own_set = simgpu_open(set_name, err, sizeof err);
    if (!own_set)
        fail_msg("simgpu_open: %s", err);
}

/* Does g read the set this test made? A call an earlier test abandoned in the driver (a
 * close during a read) holds the library's init reference until it returns, and an
 * nvmlInit meanwhile only takes another reference on the set that earlier test opened. */
static bool reads_this_set(gpu_t *g)
{
    gpu_snapshot_t *snap = calloc(1, sizeof *snap);
    assert_non_null(snap);
    bool ok = gpu_probe_once(g, snap) != 0 || !snap->ok || snap->n_devices == 0;
    simgpu_t *s = ok ? NULL : simgpu_open(set_name, NULL, 0);
    for (int i = 0; s && i < simgpu_count(s) && !ok; i++) {
        simgpu_info_t info;
        ok = simgpu_info(s, i, &info) == 0 && strcmp(info.uuid, snap->devices[0].uuid) == 0;
    }
    if (s)
        simgpu_close(s);
    free(snap);
    return ok;
}

static gpu_t *open_sim(const gpu_options_t *extra)
{
    gpu_options_t opt = {0};
    if (extra)
        opt = *extra;
    opt.library = sim_library;
    char err[512] = "";
    gpu_t *g = gpu_open(&opt, err, sizeof err);
    for (int tries = 0; g && !reads_this_set(g) && tries < 200; tries++) {
        gpu_close(g); /* an earlier test's set: wait for its abandoned call to let go */
        struct timespec ts = {0, 25 * 1000000L};
        nanosleep(&ts, NULL);
        g = gpu_open(&opt, err, sizeof err);
    }
    if (!g)
        fail_msg("gpu_open: %s", err);
    for (size_t i = 0; i < MAX_TRACKED; i++) {
        if (!tracked[i]) {
            tracked[i] = g;
            break;
        }
    }
    return g;
}

static gpu_snapshot_t *probe(gpu_t *g)
{
    gpu_snapshot_t *snap = calloc(1, sizeof *snap);
    assert_non_null(snap);
    if (gpu_probe_once(g, snap) != 0)
        fail_msg("gpu_probe_once: %s", snap->error);
    assert_true(snap->ok);
    return snap;
}

/* Fork a child that allocates bytes on gpu and then waits to be killed. Returns its pid
 * once the allocation is done. */
static pid_t spawn_holder(int gpu, uint64_t bytes)
{
    assert_true(n_children < MAX_CHILDREN);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        simgpu_t *s = simgpu_open(set_name, NULL, 0);
        char status = (s && simgpu_alloc(s, gpu, bytes) == 0) ? 'y' : 'n';
        if (write(ready[1], &status, 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    children[n_children++] = pid;
    close(ready[1]);
    char status = 0;
    ssize_t n;
    do {
        n = read(ready[0], &status, 1);
    } while (n < 0 && errno == EINTR);
    close(ready[0]);
    if (n != 1 || status != 'y')
        fail_msg("child %d could not allocate %llu bytes on GPU %d", (int)pid,
                 (unsigned long long)bytes, gpu);
    return pid;
}

static void kill_child(pid_t pid)
{
    for (size_t i = 0; i < n_children; i++) {
        if (children[i] == pid) {
            assert_int_equal(kill(pid, SIGKILL), 0);
            assert_int_equal(waitpid(pid, NULL, 0), pid);
            children[i] = 0;
        }
    }
}

static bool contains(const char *haystack, const char *needle)
{
    return strstr(haystack, needle) != NULL;
}

static bool snapshot_lists(const gpu_device_t *dev, pid_t pid)
{
    for (size_t i = 0; i < dev->n_procs; i++)
        if (dev->procs[i].pid == pid)
            return true;
    return false;
}

/* ---- polling fixtures ---- */

typedef struct poll_record {
    gpu_t *g;
    int count;
    gpu_snapshot_t *last;
    int close_at;       /* gpu_close from inside the callback at this count (0 = never) */
    int poll_now_until; /* gpu_poll_now from inside the callback while count < this */
    bool overlap;       /* a read was in flight while the callback ran */
} poll_record_t;

static void on_snapshot(void *ctx, const gpu_snapshot_t *snap)
{
    poll_record_t *rec = ctx;
    rec->count++;
    memcpy(rec->last, snap, sizeof *snap);
    if (rec->g->read_in_flight)
        rec->overlap = true;
    if (rec->close_at && rec->count == rec->close_at) {
        close_probe(rec->g);
    } else if (rec->count < rec->poll_now_until) {
        gpu_poll_now(rec->g);
        /* The next read must wait until this callback is done with the snapshot. */
        if (rec->g->read_in_flight)
            rec->overlap = true;
    }
}

static void poll_record_init(poll_record_t *rec, gpu_t *g)
{
    memset(rec, 0, sizeof *rec);
    rec->g = g;
    rec->last = calloc(1, sizeof *rec->last);
    assert_non_null(rec->last);
}

typedef bool (*poll_cond)(const poll_record_t *rec, const void *arg);

static void on_tick(uv_timer_t *timer)
{
    (void)timer;
}

/* Run the loop until cond holds or timeout_ms pass; a 10 ms tick bounds each wait. */
static bool run_until(uv_loop_t *loop, poll_record_t *rec, poll_cond cond, const void *arg,
                      uint64_t timeout_ms)
{
    uv_timer_t tick;
    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, on_tick, 10, 10);
    uint64_t deadline = now_ms() + timeout_ms;
    bool met;
    while (!(met = cond(rec, arg)) && now_ms() < deadline)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return met;
}

static bool count_at_least(const poll_record_t *rec, const void *arg)
{
    return rec->count >= *(const int *)arg;
}

typedef struct usage_wanted {
    size_t device;
    pid_t pid;
    uint64_t bytes;
} usage_wanted_t;

static bool last_shows_usage(const poll_record_t *rec, const void *arg)
{
    const usage_wanted_t *want = arg;
    const gpu_snapshot_t *s = rec->last;
    return rec->count > 0 && s->ok && s->n_devices > want->device &&
           gpu_proc_used(&s->devices[want->device], want->pid) == want->bytes;
}

/* The loop must end on its own once the probe is closed: nothing of ours stays active. */
static void finish_loop(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_alive(loop), 0);
}

/* ---- tests: opening and reading ---- */

static void test_open_identity_totals(void **state)
{
    (void)state;
    create_set(2, 24 * GiB, 0);
    gpu_t *g = open_sim(NULL);
    assert_true(contains(gpu_library(g), "libnvidia-ml-sim.so"));
    gpu_snapshot_t *snap = probe(g);
    assert_int_equal(snap->n_devices, 2);
    for (int i = 0; i < 2; i++) {
        simgpu_info_t info;
        assert_int_equal(simgpu_info(own_set, i, &info), 0);
        const gpu_device_t *dev = &snap->devices[i];
        assert_int_equal(dev->index, i);
        assert_string_equal(dev->name, TEST_GPU_NAME);
        assert_string_equal(dev->uuid, info.uuid);
        assert_true(strncmp(dev->uuid, "GPU-", 4) == 0);
        assert_int_equal(dev->total, 24 * GiB);
        assert_int_equal(dev->used, 0);
        assert_int_equal(dev->free, 24 * GiB);
        assert_int_equal(dev->n_procs, 0);
        assert_false(dev->procs_truncated);
    }
    assert_string_not_equal(snap->devices[0].uuid, snap->devices[1].uuid);
    assert_true(snap->taken_ms > 0);
    free(snap);
    close_probe(g);
}

static void test_usage_of_self_and_children(void **state)
{
    (void)state;
    create_set(2, 8 * GiB, 0);
    gpu_t *g = open_sim(NULL);
    gpu_snapshot_t *before = probe(g);
    assert_int_equal(before->devices[1].n_procs, 0);
    free(before);
    assert_int_equal(g->proc_cap, PROCS_FIRST_GUESS);

    assert_int_equal(simgpu_alloc(own_set, 0, 5 * MiB), 0);
    assert_int_equal(simgpu_alloc(own_set, 1, 7 * MiB), 0);
    assert_int_equal(simgpu_set_utilization(own_set, 0, 37), 0);
    /* More processes on GPU 1 than the first guess of the list size. */
    const int n_kids = PROCS_FIRST_GUESS + 4;
    pid_t kids[PROCS_FIRST_GUESS + 4];
    uint64_t expected_used = 7 * MiB;
    for (int i = 0; i < n_kids; i++) {
        kids[i] = spawn_holder(1, (uint64_t)(i + 1) * MiB);
        expected_used += (uint64_t)(i + 1) * MiB;
    }

    gpu_snapshot_t *snap = probe(g);
    const gpu_device_t *d0 = &snap->devices[0], *d1 = &snap->devices[1];
    assert_int_equal(d0->n_procs, 1);
    assert_int_equal(gpu_proc_used(d0, getpid()), 5 * MiB);
    assert_int_equal(d0->used, 5 * MiB);
    assert_int_equal(d0->util_gpu, 37);
    assert_int_equal(d1->n_procs, (size_t)n_kids + 1);
    assert_false(d1->procs_truncated);
    assert_int_equal(gpu_proc_used(d1, getpid()), 7 * MiB);
    for (int i = 0; i < n_kids; i++)
        assert_int_equal(gpu_proc_used(d1, kids[i]), (uint64_t)(i + 1) * MiB);
    assert_int_equal(d1->used, expected_used);
    assert_int_equal(d1->free, d1->total - expected_used);
    assert_int_equal(gpu_proc_used(d1, 1), 0); /* init holds nothing */
    /* The first call could not hold the list: the buffer grew past the guess. */
    assert_true(g->proc_cap > PROCS_FIRST_GUESS);
    assert_true(g->proc_cap >= (unsigned)n_kids + 1);
    free(snap);

    /* A child that goes away releases at once (delay 0) and the list shrinks again. */
    kill_child(kids[0]);
    snap = probe(g);
    assert_false(snapshot_lists(&snap->devices[1], kids[0]));
    assert_int_equal(snap->devices[1].n_procs, (size_t)n_kids);
    assert_int_equal(snap->devices[1].used, expected_used - 1 * MiB);
    free(snap);
    assert_int_equal(simgpu_free(own_set, 0, 5 * MiB), 0);
    assert_int_equal(simgpu_free(own_set, 1, 7 * MiB), 0);
    close_probe(g);
}

static void test_select_by_index(void **state)
{
    (void)state;
    create_set(3, 4 * GiB, 0);
    int indexes[] = {1};
    gpu_options_t opt = {.indexes = indexes, .n_indexes = 1};
    gpu_t *g = open_sim(&opt);
    gpu_snapshot_t *snap = probe(g);
    simgpu_info_t info;
    assert_int_equal(simgpu_info(own_set, 1, &info), 0);
    assert_int_equal(snap->n_devices, 1);
    assert_int_equal(snap->devices[0].index, 1);
    assert_string_equal(snap->devices[0].uuid, info.uuid);
    free(snap);
    close_probe(g);
}

static void test_select_by_uuid_and_mixed(void **state)
{
    (void)state;
    create_set(3, 4 * GiB, 0);
    simgpu_info_t info0, info2;
    assert_int_equal(simgpu_info(own_set, 0, &info0), 0);
    assert_int_equal(simgpu_info(own_set, 2, &info2), 0);

    char *only2[] = {info2.uuid};
    gpu_options_t opt = {.uuids = only2, .n_uuids = 1};
    gpu_t *g = open_sim(&opt);
    gpu_snapshot_t *snap = probe(g);
    assert_int_equal(snap->n_devices, 1);
    assert_int_equal(snap->devices[0].index, 2);
    assert_string_equal(snap->devices[0].uuid, info2.uuid);
    free(snap);
    close_probe(g);

    /* Index 2 and UUIDs of 0 and 2: two devices, in NVML order, no duplicate. */
    int indexes[] = {2};
    char *both[] = {info2.uuid, info0.uuid};
    gpu_options_t mixed = {.indexes = indexes, .n_indexes = 1, .uuids = both, .n_uuids = 2};
    g = open_sim(&mixed);
    snap = probe(g);
    assert_int_equal(snap->n_devices, 2);
    assert_int_equal(snap->devices[0].index, 0);
    assert_string_equal(snap->devices[0].uuid, info0.uuid);
    assert_int_equal(snap->devices[1].index, 2);
    assert_string_equal(snap->devices[1].uuid, info2.uuid);
    free(snap);
    close_probe(g);
}

static void test_select_unknown(void **state)
{
    (void)state;
    create_set(2, 4 * GiB, 0);
    char err[512] = "";
    int bad_index[] = {0, 2};
    gpu_options_t opt = {.library = sim_library, .indexes = bad_index, .n_indexes = 2};
    assert_null(gpu_open(&opt, err, sizeof err));
    assert_true(contains(err, "index 2"));
    assert_true(contains(err, "2 devices"));

    int negative[] = {-1};
    gpu_options_t neg = {.library = sim_library, .indexes = negative, .n_indexes = 1};
    err[0] = '\0';
    assert_null(gpu_open(&neg, err, sizeof err));
    assert_true(contains(err, "index -1"));

    char unknown_uuid[] = "GPU-00000000-0000-0000-0000-000000000000";
    char *uuids[] = {unknown_uuid};
    gpu_options_t bad_uuid = {.library = sim_library, .uuids = uuids, .n_uuids = 1};
    err[0] = '\0';
    assert_null(gpu_open(&bad_uuid, err, sizeof err));
    assert_true(contains(err, unknown_uuid));
    assert_true(contains(err, "Not Found"));

    /* Failures undo nvmlInit_v2: a later open still works. */
    gpu_t *g = open_sim(NULL);
    close_probe(g);
}

/* ---- tests: library choice and its errors ---- */

static void test_library_from_environment(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    char err[512] = "";
    setenv("VRAMD_NVML_LIBRARY", sim_library, 1);
    gpu_t *g = gpu_open(NULL, err, sizeof err);
    if (!g)
        fail_msg("gpu_open with VRAMD_NVML_LIBRARY: %s", err);
    assert_true(contains(gpu_library(g), "libnvidia-ml-sim.so"));
    close_probe(g);

    /* The option wins over the environment. */
    setenv("VRAMD_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    g = open_sim(NULL);
    close_probe(g);
    gpu_options_t from_env = {0};
    err[0] = '\0';
    assert_null(gpu_open(&from_env, err, sizeof err));
    assert_true(contains(err, "/nonexistent/libnvidia-ml.so.1"));

    /* Neither: the driver's library. Present on a GPU host, absent here. */
    unsetenv("VRAMD_NVML_LIBRARY");
    err[0] = '\0';
    g = gpu_open(NULL, err, sizeof err);
    if (g) {
        assert_true(gpu_library(g)[0] != '\0');
        close_probe(g);
    } else {
        assert_true(contains(err, "libnvidia-ml.so.1"));
    }
}

static void test_bad_library_path(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    char err[512] = "";
    gpu_options_t opt = {.library = "/nonexistent/dir/libnvidia-ml.so.1"};
    assert_null(gpu_open(&opt, err, sizeof err));
    assert_true(contains(err, "cannot load NVML library"));
    assert_true(contains(err, "/nonexistent/dir/libnvidia-ml.so.1"));
    assert_true(contains(err, "No such file")); /* dlerror()'s text */
}

static void test_library_missing_symbol(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    char err[512] = "";
    gpu_options_t opt = {.library = "libc.so.6"};
    assert_null(gpu_open(&opt, err, sizeof err));
    assert_true(contains(err, "nvmlInit_v2"));
    assert_true(contains(err, "libc.so.6"));
    assert_true(contains(err, "lacks"));
}

static void test_init_failure(void **state)
{
    (void)state;
    /* No set by that name: the simulated "driver not loaded". */
    setenv("SIMGPU", "utgpu.no-such-set", 1);
    char err[512] = "";
    gpu_options_t opt = {.library = sim_library};
    assert_null(gpu_open(&opt, err, sizeof err));
    assert_true(contains(err, "nvmlInit_v2"));
    assert_true(contains(err, "Driver Not Loaded")); /* nvmlErrorString's text */
}

/* ---- tests: pure pieces ---- */

static void test_procs_not_available_and_truncation(void **state)
{
    (void)state;
    gpu_device_t *dev = calloc(1, sizeof *dev);
    assert_non_null(dev);
    nvmlProcessInfo_t two[2] = {{100, NVML_VALUE_NOT_AVAILABLE, 0, 0}, {101, 3 * MiB, 0, 0}};
    procs_from_nvml(dev, two, 2);
    assert_int_equal(dev->n_procs, 2);
    assert_false(dev->procs_truncated);
    assert_int_equal(gpu_proc_used(dev, 100), 0);
    assert_int_equal(gpu_proc_used(dev, 101), 3 * MiB);
    assert_int_equal(gpu_proc_used(dev, 102), 0);
    assert_int_equal(gpu_proc_used(NULL, 101), 0);

    /* More than GPU_MAX_PROCS: the largest holders are kept. */
    const size_t n = GPU_MAX_PROCS + 44;
    nvmlProcessInfo_t *many = calloc(n, sizeof *many);
    assert_non_null(many);
    for (size_t i = 0; i < n; i++) {
        many[i].pid = (unsigned)(1000 + i);
        many[i].usedGpuMemory = (unsigned long long)(i + 1) * MiB;
    }
    many[n - 1].usedGpuMemory = NVML_VALUE_NOT_AVAILABLE; /* counts as 0: dropped */
    memset(dev, 0, sizeof *dev);
    procs_from_nvml(dev, many, n);
    assert_int_equal(dev->n_procs, GPU_MAX_PROCS);
    assert_true(dev->procs_truncated);
    for (size_t i = 0; i < dev->n_procs; i++) {
        assert_true(dev->procs[i].used >= 44 * MiB);
        assert_true(dev->procs[i].used <= (n - 1) * MiB);
    }
    assert_int_equal(gpu_proc_used(dev, (pid_t)(1000 + n - 2)), (n - 1) * MiB);
    assert_int_equal(gpu_proc_used(dev, 1000), 0);

    /* One pid listed twice (MIG): gpu_proc_used sums. */
    nvmlProcessInfo_t dup[2] = {{7, 1 * MiB, 1, 0}, {7, 2 * MiB, 2, 0}};
    memset(dev, 0, sizeof *dev);
    procs_from_nvml(dev, dup, 2);
    assert_int_equal(gpu_proc_used(dev, 7), 3 * MiB);
    free(many);
    free(dev);
}

/* ---- tests: polling ---- */

static void test_poll_sees_later_allocation(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    gpu_t *g = open_sim(NULL);
    uv_loop_t *loop = &test_loop;
    poll_record_t rec;
    poll_record_init(&rec, g);
    assert_int_equal(gpu_poll_start(g, loop, 20, on_snapshot, &rec), 0);
    assert_int_equal(gpu_poll_start(g, loop, 20, on_snapshot, &rec), 0); /* again: fine */

    int three = 3;
    assert_true(run_until(loop, &rec, count_at_least, &three, WAIT_LIMIT_MS));
    assert_true(rec.last->ok);
    assert_int_equal(rec.last->n_devices, 1);
    assert_int_equal(gpu_proc_used(&rec.last->devices[0], getpid()), 0);

    assert_int_equal(simgpu_alloc(own_set, 0, 64 * MiB), 0);
    usage_wanted_t want = {0, getpid(), 64 * MiB};
    assert_true(run_until(loop, &rec, last_shows_usage, &want, WAIT_LIMIT_MS));
    assert_int_equal(rec.last->devices[0].used, 64 * MiB);

    /* Stopped: no more snapshots, even from a read that was in flight. */
    gpu_poll_now(g);
    assert_true(g->read_in_flight);
    gpu_poll_stop(g);
    int stopped_at = rec.count;
    int never = stopped_at + 1;
    assert_false(run_until(loop, &rec, count_at_least, &never, 300));
    assert_int_equal(rec.count, stopped_at);

    /* Restarted: snapshots again, showing the memory freed meanwhile. */
    assert_int_equal(simgpu_free(own_set, 0, 64 * MiB), 0);
    assert_int_equal(gpu_poll_start(g, loop, 20, on_snapshot, &rec), 0);
    want.bytes = 0;
    assert_true(run_until(loop, &rec, last_shows_usage, &want, WAIT_LIMIT_MS));
    assert_true(rec.count > stopped_at);

    close_probe(g);
    int after_close = rec.count;
    finish_loop(loop);
    assert_int_equal(rec.count, after_close);
    free(rec.last);
}

static void test_poll_now(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    gpu_t *g = open_sim(NULL);
    uv_loop_t *loop = &test_loop;
    poll_record_t rec;
    poll_record_init(&rec, g);
    /* An interval far beyond the wait limit: only gpu_poll_now can bring a new snapshot. */
    const uint64_t long_interval = 10 * 60 * 1000;
    assert_int_equal(gpu_poll_start(g, loop, long_interval, on_snapshot, &rec), 0);
    int one = 1;
    assert_true(run_until(loop, &rec, count_at_least, &one, WAIT_LIMIT_MS));

    assert_int_equal(simgpu_alloc(own_set, 0, 32 * MiB), 0);
    gpu_poll_now(g);
    gpu_poll_now(g); /* while one is in flight: folded into one more read at most */
    usage_wanted_t want = {0, getpid(), 32 * MiB};
    assert_true(run_until(loop, &rec, last_shows_usage, &want, WAIT_LIMIT_MS));

    /* gpu_poll_now from inside the callback chains reads without the interval. */
    int from = rec.count;
    rec.poll_now_until = from + 5;
    gpu_poll_now(g);
    int target = from + 5;
    assert_true(run_until(loop, &rec, count_at_least, &target, WAIT_LIMIT_MS));
    assert_false(rec.overlap);

    assert_int_equal(simgpu_free(own_set, 0, 32 * MiB), 0);
    close_probe(g);
    finish_loop(loop);
    free(rec.last);
}

static void test_close_inside_callback(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    gpu_t *g = open_sim(NULL);
    uv_loop_t *loop = &test_loop;
    poll_record_t rec;
    poll_record_init(&rec, g);
    rec.close_at = 2;
    assert_int_equal(gpu_poll_start(g, loop, 5, on_snapshot, &rec), 0);
    /* The loop ends by itself once the probe closed from its own callback. */
    int two = 2;
    assert_true(run_until(loop, &rec, count_at_least, &two, WAIT_LIMIT_MS));
    finish_loop(loop);
    assert_int_equal(rec.count, 2);
    free(rec.last);
}

static void test_close_during_read(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    unsigned live = gpu_live_count();
    gpu_t *g = open_sim(NULL);
    uv_loop_t *loop = &test_loop;
    poll_record_t rec;
    poll_record_init(&rec, g);

    /* Hold the probe's NVML lock: the read thread's read blocks inside on_read_work, as it
     * would in a hung driver. */
    pthread_mutex_t *nvml_lock = &g->nvml_lock;
    pthread_mutex_lock(nvml_lock);
    if (gpu_poll_start(g, loop, 5, on_snapshot, &rec) != 0) {
        pthread_mutex_unlock(nvml_lock);
        fail_msg("gpu_poll_start failed");
    }
    bool in_flight = gpu_read_in_flight(g);
    close_probe(g);
    /* The loop ends while the read still hangs: nothing waits for it (vramd's exit is not
     * held up by a hung NVML); the probe is alive, the read's now. */
    finish_loop(loop);
    assert_true(in_flight);
    assert_int_equal(gpu_live_count(), live + 1);
    pthread_mutex_unlock(nvml_lock);
    /* The read completes on its thread, its snapshot is dropped, and that thread frees the
     * probe (ASan checks). */
    for (int i = 0; i < 2000 && gpu_live_count() != live; i++)
        sleep_ms(5);
    assert_int_equal(gpu_live_count(), live);
    assert_int_equal(rec.count, 0);
    free(rec.last);
}

static void test_close_without_polling_and_probe_while_polling(void **state)
{
    (void)state;
    create_set(1, 4 * GiB, 0);
    gpu_t *g = open_sim(NULL);
    close_probe(g); /* never polled: freed at once */
    gpu_close(NULL); /* harmless */

    g = open_sim(NULL);
    uv_loop_t *loop = &test_loop;
    poll_record_t rec;
    poll_record_init(&rec, g);
    assert_int_equal(gpu_poll_start(g, loop, 1, on_snapshot, &rec), 0);
    /* Synchronous reads interleaved with a fast poll: serialised by the probe's lock. */
    for (int i = 0; i < 20; i++) {
        gpu_snapshot_t *snap = probe(g);
        assert_int_equal(snap->n_devices, 1);
        free(snap);
        uv_run(loop, UV_RUN_NOWAIT);
    }
    int some = rec.count + 2;
    assert_true(run_until(loop, &rec, count_at_least, &some, WAIT_LIMIT_MS));
    close_probe(g);
    finish_loop(loop);
    free(rec.last);
}

/* ---- tests: foreign processes dying ---- */

typedef struct gone_wanted {
    const pid_t *pids;
    size_t n;
} gone_wanted_t;

static bool last_shows_none_of(const poll_record_t *rec, const void *arg)
{
    const gone_wanted_t *want = arg;
    if (rec->count == 0 || !rec->last->ok)
        return false;
    for (size_t i = 0; i < want->n; i++)
        if (snapshot_lists(&rec->last->devices[0], want->pids[i]))
            return false;
    return true;
}

static bool last_shows_all_of(const poll_record_t *rec, const void *arg)
{
    const gone_wanted_t *want = arg;
    if (rec->count == 0 || !rec->last->ok)
        return false;
    for (size_t i = 0; i < want->n; i++)
        if (gpu_proc_used(&rec->last->devices[0], want->pids[i]) != 100 * MiB)
            return false;
    return true;
}

static void test_killed_foreign_processes_release_after_delay(void **state)
{
    (void)state;
    const uint64_t release_delay_ms = 400;
    create_set(1, 4 * GiB, release_delay_ms);
    gpu_t *g = open_sim(NULL);
    uv_loop_t *loop = &test_loop;
    poll_record_t rec;
    poll_record_init(&rec, g);
    assert_int_equal(gpu_poll_start(g, loop, 25, on_snapshot, &rec), 0);

    pid_t pids[3];
    for (int i = 0; i < 3; i++)
        pids[i] = spawn_holder(0, 100 * MiB);
    gone_wanted_t want = {pids, 3};
    assert_true(run_until(loop, &rec, last_shows_all_of, &want, WAIT_LIMIT_MS));
    assert_int_equal(rec.last->devices[0].used, 300 * MiB);

    uint64_t before_kill = now_ms();
    for (int i = 0; i < 3; i++)
        kill_child(pids[i]);
    /* Dead but not yet released: the driver still shows them (by their dead pids). */
    gpu_snapshot_t *snap = probe(g);
    if (snap->taken_ms < before_kill + release_delay_ms) {
        for (int i = 0; i < 3; i++)
            assert_int_equal(gpu_proc_used(&snap->devices[0], pids[i]), 100 * MiB);
        assert_int_equal(snap->devices[0].used, 300 * MiB);
    }
    free(snap);

    assert_true(run_until(loop, &rec, last_shows_none_of, &want, WAIT_LIMIT_MS));
    assert_int_equal(rec.last->devices[0].used, 0);
    assert_int_equal(rec.last->devices[0].free, 4 * GiB);
    /* Not before the release delay (1 ms for the two clocks' rounding). */
    assert_true(rec.last->taken_ms + 1 >= before_kill + release_delay_ms);

    close_probe(g);
    finish_loop(loop);
    free(rec.last);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_identity_totals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_of_self_and_children, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_by_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_by_uuid_and_mixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_from_environment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_library_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_missing_symbol, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_failure, setup, teardown),
        cmocka_unit_test(test_procs_not_available_and_truncation),
        cmocka_unit_test_setup_teardown(test_poll_sees_later_allocation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poll_now, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_inside_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_during_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_without_polling_and_probe_while_polling,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_foreign_processes_release_after_delay,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, find_sim_library, NULL);
}
