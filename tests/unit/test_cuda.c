/*
 * test_cuda: the CUDA checkpoint interface (src/gpu/cuda.c) against the simulated driver,
 * build/lib/libcuda-sim.so beside this binary's build directory (/proc/self/exe -> ../lib/),
 * so a build-san test loads the build-san library.
 *
 * Each test creates its own simulated GPU set ("utcuda.PID.N"), points SIMGPU at it and
 * removes it in teardown, killing the children it forked. The parked processes are forked
 * children: "holders" allocate simulated GPU memory and wait (a process that never
 * registered: the driver locks it at once), "gated" children register like simworker and
 * acknowledge lock requests from a poll loop, or never do (to see a lock time out).
 *
 * Covers: availability and its reasons (no library, a library without the CUDA symbols,
 * cuInit failing without a simulated GPU, VRAMD_CUDA_LIBRARY), park/unpark with the memory
 * leaving and coming back as NVML (simgpu) sees it, the state read back at every step,
 * park/unpark that have nothing to do, a restore that does not fit (CUDA_NO_MEMORY, still
 * CHECKPOINTED) and succeeds once memory is free, the lock's timeout with a process that
 * does not answer (still RUNNING), a process that waits for its lock answer, single
 * actions and the driver's ILLEGAL_STATE, a pid the driver does not know, copy time
 * following bytes / bandwidth, a process on two GPUs (parked per GPU; a restore that does not
 * fit on one GPU brings nothing back), bandwidth parsing, a parked process that dies (its
 * host bytes freed), and the
 * async path on a uv loop including cuda_close with an operation in flight (no callback, the
 * loop does not wait for it, the handle freed on the operation's thread when it returns).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu/cuda.h"
#include "simgpu.h"

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)
#define MAX_CHILDREN 8

static char set_name[64];
static int set_counter;
static char cuda_sim[PATH_MAX];
static char nvml_sim[PATH_MAX];
static pid_t children[MAX_CHILDREN];
static int child_pipes[MAX_CHILDREN];
static size_t n_children;
static simgpu_t *own_set;
static uv_loop_t loop;
static cuda_t *opened; /* closed by teardown when a failed test left it open */

static int find_libraries(void **state)
{
    (void)state;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *build = dirname(dirname(exe));
    snprintf(cuda_sim, sizeof cuda_sim, "%s/lib/libcuda-sim.so", build);
    snprintf(nvml_sim, sizeof nvml_sim, "%s/lib/libnvidia-ml-sim.so", build);
    if (access(cuda_sim, R_OK) != 0) {
        fprintf(stderr, "test_cuda: %s is missing (make %s)\n", cuda_sim, cuda_sim);
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(set_name, sizeof set_name, "utcuda.%d.%d", (int)getpid(), ++set_counter);
    setenv("SIMGPU", set_name, 1);
    setenv("SIMGPU_TIMESCALE", "0.01", 1);
    unsetenv("SIMGPU_PCIE_BW");
    unsetenv("SIMGPU_CHECKPOINT_BW");
    unsetenv("SIMGPU_RESTORE_BW");
    unsetenv("SIMGPU_CUSTOM_STORAGE");
    unsetenv("VRAMD_CUDA_LIBRARY");
    n_children = 0;
    own_set = NULL;
    return uv_loop_init(&loop);
}

static int teardown(void **state)
{
    (void)state;
    if (opened)
        cuda_close(opened);
    opened = NULL;
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    for (size_t i = 0; i < n_children; i++) {
        kill(children[i], SIGKILL);
        waitpid(children[i], NULL, 0);
        close(child_pipes[i]);
    }
    n_children = 0;
    if (own_set)
        simgpu_close(own_set);
    own_set = NULL;
    simgpu_remove(set_name, NULL, 0);
    return 0;
}

static void create_gpus(int n_gpus, uint64_t memory)
{
    char err[256] = "";
    if (simgpu_create(set_name, n_gpus, memory, "NVIDIA Test GPU", 0, err, sizeof err) != 0)
        fail_msg("simgpu_create: %s", err);
    own_set = simgpu_open(set_name, err, sizeof err);
    if (!own_set)
        fail_msg("simgpu_open: %s", err);
}

static void create_set(uint64_t memory)
{
    create_gpus(1, memory);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

enum child_kind { HOLDER, GATED, DEAF, HOLDER_GPU1 };

/* HOLDER: allocates and waits. GATED: registers, allocates, answers lock requests every
 * millisecond. DEAF: registers, allocates, never answers. Each exits when its pipe closes
 * (or is killed). Returns the pid once the memory is held. */
static pid_t spawn(enum child_kind kind, uint64_t bytes)
{
    assert_true(n_children < MAX_CHILDREN);
    int ready[2], hold[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(hold), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(hold[1]);
        simgpu_t *s = simgpu_open(set_name, NULL, 0);
        bool gated = kind == GATED || kind == DEAF;
        bool ok = s && (!gated || simgpu_gate_register(s) == 0) && simgpu_alloc(s, 0, bytes) == 0 &&
                  (kind != HOLDER_GPU1 || simgpu_alloc(s, 1, 2 * bytes) == 0);
        char c = ok ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || !ok)
            _exit(1);
        for (;;) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
            uint32_t seq = 0;
            if (kind == GATED && simgpu_gate_poll(s, &seq) > 0 && seq)
                simgpu_gate_ack(s, seq);
            if (getppid() == 1)
                _exit(0);
        }
    }
    close(ready[1]);
    close(hold[0]);
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    assert_int_equal(c, 'y');
    children[n_children] = pid;
    child_pipes[n_children++] = hold[1];
    return pid;
}

static uint64_t gpu_bytes_on(int gpu, pid_t pid)
{
    simgpu_proc_t procs[16];
    size_t n = 0;
    assert_int_equal(simgpu_processes(own_set, gpu, procs, 16, &n), 0);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n && i < 16; i++)
        if (procs[i].pid == pid && !procs[i].dead)
            bytes += procs[i].used;
    return bytes;
}

static uint64_t gpu_bytes_of(pid_t pid)
{
    return gpu_bytes_on(0, pid);
}

static uint64_t parked_bytes_of(pid_t pid)
{
    simgpu_park_info_t parks[16];
    size_t n = 0;
    assert_int_equal(simgpu_park_list(own_set, parks, 16, &n), 0);
    for (size_t i = 0; i < n && i < 16; i++)
        if (parks[i].pid == pid)
            return parks[i].parked_total;
    return 0;
}

static cuda_t *open_sim(void)
{
    cuda_t *c = cuda_open(cuda_sim);
    assert_non_null(c);
    if (!cuda_available(c))
        fail_msg("libcuda-sim unavailable: %s", cuda_unavailable_reason(c));
    opened = c;
    return c;
}

static void close_sim(cuda_t *c)
{
    if (c == opened)
        opened = NULL;
    cuda_close(c);
}

static cuda_result_t run(cuda_t *c, cuda_op_t op, pid_t pid, uint64_t timeout_ms)
{
    cuda_result_t r;
    assert_int_equal(cuda_run(c, op, pid, timeout_ms, &r), 0);
    return r;
}

/* ---- availability ---- */

static void test_unavailable_library(void **state)
{
    (void)state;
    cuda_t *c = cuda_open("/nonexistent/libcuda.so.1");
    assert_non_null(c);
    assert_false(cuda_available(c));
    assert_non_null(strstr(cuda_unavailable_reason(c), "checkpoint unavailable: cannot load /nonexistent/libcuda.so.1"));
    cuda_result_t r = run(c, CUDA_OP_PARK, getpid(), 1000);
    assert_int_equal(r.status, CUDA_UNAVAILABLE);
    assert_string_equal(r.error, cuda_unavailable_reason(c));
    cuda_close(c);

    /* a library without the driver's symbols (the NVML simulation) */
    c = cuda_open(nvml_sim);
    assert_false(cuda_available(c));
    assert_non_null(strstr(cuda_unavailable_reason(c), "has no cuInit"));
    close_sim(c);
}

static void test_unavailable_without_gpu_and_env_choice(void **state)
{
    (void)state;
    unsetenv("SIMGPU"); /* the simulated "no driver, no GPU" */
    setenv("VRAMD_CUDA_LIBRARY", cuda_sim, 1);
    cuda_t *c = cuda_open(NULL);
    assert_false(cuda_available(c));
    assert_non_null(strstr(cuda_unavailable_reason(c), "cuInit failed"));
    assert_non_null(strstr(cuda_unavailable_reason(c), "CUDA_ERROR_NO_DEVICE"));
    assert_non_null(strstr(cuda_library(c), "libcuda-sim.so"));
    cuda_close(c);

    setenv("SIMGPU", set_name, 1);
    create_set(8 * GiB);
    c = cuda_open(NULL);
    assert_true(cuda_available(c));
    assert_int_equal(cuda_driver_version(c), 12080);
    assert_string_equal(cuda_unavailable_reason(c), "");
    cuda_close(c);
    unsetenv("VRAMD_CUDA_LIBRARY");
}

/* ---- park / unpark ---- */

/* Custom storage (CUDA 13.4, gpu/cuda_storage.c): with the driver having it and the owner
 * turning it on, a park maps the memory into this process, which keeps the bytes (pinned)
 * and completes; the unpark copies them back and frees them. Without it: the driver's copy. */
static void test_custom_storage_keeps_the_bytes_here(void **state)
{
    (void)state;
    create_set(8 * GiB);
    pid_t pid = spawn(HOLDER, 1 * GiB);
    cuda_t *plain = open_sim();
    assert_false(cuda_custom_storage(plain)); /* the driver has none (580) */
    assert_non_null(strstr(cuda_custom_storage_reason(plain), "cuCheckpointOperationComplete"));
    close_sim(plain);

    setenv("SIMGPU_CUSTOM_STORAGE", "1", 1);
    cuda_t *c = open_sim();
    assert_false(cuda_custom_storage(c)); /* not until the owner asks: a one-shot tool must not */
    assert_string_equal(cuda_custom_storage_reason(c), "turned off");
    cuda_use_custom_storage(c, true);
    assert_true(cuda_custom_storage(c));
    cuda_result_t r = run(c, CUDA_OP_PARK, pid, 1000);
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.state, CUDA_STATE_CHECKPOINTED);
    assert_int_equal(r.custom_bytes, 1 * GiB);
    assert_int_equal(cuda_custom_storage_held(c), 1 * GiB);
    assert_int_equal(parked_bytes_of(pid), 1 * GiB);
    r = run(c, CUDA_OP_UNPARK, pid, 0);
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.state, CUDA_STATE_RUNNING);
    assert_int_equal(r.custom_bytes, 1 * GiB);
    assert_int_equal(cuda_custom_storage_held(c), 0);
    assert_int_equal(parked_bytes_of(pid), 0);
    /* a restore with nothing kept for the pid (parked by the driver's own copy): it fails,
     * completed, and the process stays where the driver left it */
    cuda_use_custom_storage(c, false);
    assert_int_equal(run(c, CUDA_OP_PARK, pid, 1000).status, CUDA_OK);
    cuda_use_custom_storage(c, true);
    r = run(c, CUDA_OP_UNPARK, pid, 0);
    assert_int_equal(r.status, CUDA_FAILED);
    assert_non_null(strstr(r.error, "nothing kept"));
    unsetenv("SIMGPU_CUSTOM_STORAGE");
    close_sim(c);
}

static void test_park_unpark_moves_memory(void **state)
{
    (void)state;
    create_set(8 * GiB);
    pid_t pid = spawn(HOLDER, 3 * GiB);
    cuda_t *c = open_sim();
    assert_int_equal(run(c, CUDA_OP_STATE, pid, 0).state, CUDA_STATE_RUNNING);

    cuda_result_t r = run(c, CUDA_OP_PARK, pid, 1000);
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.state_before, CUDA_STATE_RUNNING);
    assert_int_equal(r.state, CUDA_STATE_CHECKPOINTED);
    assert_false(r.nothing_to_do);
    assert_int_equal(gpu_bytes_of(pid), 0);
    assert_int_equal(parked_bytes_of(pid), 3 * GiB);
    simgpu_info_t info;
    assert_int_equal(simgpu_info(own_set, 0, &info), 0);
    assert_int_equal(info.used, 0);

    r = run(c, CUDA_OP_PARK, pid, 1000); /* already parked */
    assert_int_equal(r.status, CUDA_OK);
    assert_true(r.nothing_to_do);

    r = run(c, CUDA_OP_UNPARK, pid, 0);
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.state_before, CUDA_STATE_CHECKPOINTED);
    assert_int_equal(r.state, CUDA_STATE_RUNNING);
    assert_int_equal(gpu_bytes_of(pid), 3 * GiB);
    assert_int_equal(parked_bytes_of(pid), 0);

    r = run(c, CUDA_OP_UNPARK, pid, 0); /* running already */
    assert_int_equal(r.status, CUDA_OK);
    assert_true(r.nothing_to_do);
    close_sim(c);
}

static void test_restore_that_does_not_fit(void **state)
{
    (void)state;
    create_set(4 * GiB);
    pid_t pid = spawn(HOLDER, 3 * GiB);
    cuda_t *c = open_sim();
    assert_int_equal(run(c, CUDA_OP_PARK, pid, 1000).status, CUDA_OK);
    assert_int_equal(simgpu_alloc(own_set, 0, 2 * GiB), 0); /* someone took the room */

    cuda_result_t r = run(c, CUDA_OP_UNPARK, pid, 0);
    assert_int_equal(r.status, CUDA_NO_MEMORY);
    assert_int_equal(r.driver_error, 2); /* CUDA_ERROR_OUT_OF_MEMORY */
    assert_int_equal(r.state, CUDA_STATE_CHECKPOINTED);
    assert_non_null(strstr(r.error, "cuCheckpointProcessRestore"));
    assert_non_null(strstr(r.error, "CUDA_ERROR_OUT_OF_MEMORY"));
    assert_int_equal(gpu_bytes_of(pid), 0);
    assert_int_equal(parked_bytes_of(pid), 3 * GiB);

    assert_int_equal(simgpu_free(own_set, 0, 2 * GiB), 0);
    r = run(c, CUDA_OP_UNPARK, pid, 0);
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(gpu_bytes_of(pid), 3 * GiB);
    close_sim(c);
}

static void test_lock_waits_for_the_process(void **state)
{
    (void)state;
    create_set(8 * GiB);
    pid_t gated = spawn(GATED, 1 * GiB);
    pid_t deaf = spawn(DEAF, 1 * GiB);
    cuda_t *c = open_sim();

    cuda_result_t r = run(c, CUDA_OP_PARK, gated, 5000);
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.state, CUDA_STATE_CHECKPOINTED);
    assert_int_equal(run(c, CUDA_OP_UNPARK, gated, 0).status, CUDA_OK);

    r = run(c, CUDA_OP_PARK, deaf, 100);
    assert_int_equal(r.status, CUDA_TIMEOUT);
    assert_int_equal(r.driver_error, 909);
    assert_int_equal(r.state, CUDA_STATE_RUNNING);
    assert_true(r.lock_us >= 100000);
    assert_non_null(strstr(r.error, "cuCheckpointProcessLock"));
    assert_int_equal(gpu_bytes_of(deaf), 1 * GiB);
    close_sim(c);
}

static void test_single_actions_and_bad_states(void **state)
{
    (void)state;
    create_set(8 * GiB);
    pid_t pid = spawn(HOLDER, 1 * GiB);
    cuda_t *c = open_sim();

    cuda_result_t r = run(c, CUDA_OP_CHECKPOINT, pid, 0); /* must be locked first */
    assert_int_equal(r.status, CUDA_BAD_STATE);
    assert_int_equal(r.driver_error, 401);
    assert_int_equal(r.state, CUDA_STATE_RUNNING);

    r = run(c, CUDA_OP_LOCK, pid, 1000);
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.state, CUDA_STATE_LOCKED);
    /* a locked process's own CUDA calls do not go through */
    assert_int_equal(gpu_bytes_of(pid), 1 * GiB);

    r = run(c, CUDA_OP_PARK, pid, 1000); /* from LOCKED: checkpoint only */
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.state_before, CUDA_STATE_LOCKED);
    assert_int_equal(r.lock_us, 0);
    assert_int_equal(r.state, CUDA_STATE_CHECKPOINTED);

    r = run(c, CUDA_OP_UNLOCK, pid, 0);
    assert_int_equal(r.status, CUDA_BAD_STATE);
    assert_int_equal(r.state, CUDA_STATE_CHECKPOINTED);

    assert_int_equal(run(c, CUDA_OP_RESTORE, pid, 0).state, CUDA_STATE_LOCKED);
    r = run(c, CUDA_OP_UNPARK, pid, 0); /* from LOCKED: unlock only */
    assert_int_equal(r.status, CUDA_OK);
    assert_int_equal(r.copy_us, 0);
    assert_int_equal(r.state, CUDA_STATE_RUNNING);

    /* a process the driver does not know (no memory on the simulated GPU) */
    r = run(c, CUDA_OP_STATE, getppid(), 0);
    assert_int_equal(r.status, CUDA_NOT_FOUND);
    assert_int_equal(r.state, CUDA_STATE_UNKNOWN);
    assert_int_equal(cuda_run(c, CUDA_OP_PARK, 0, 0, &r), -1);
    close_sim(c);
}

static void test_copy_time_follows_bandwidth(void **state)
{
    (void)state;
    setenv("SIMGPU_TIMESCALE", "1", 1);
    setenv("SIMGPU_CHECKPOINT_BW", "20GiB/s", 1); /* taken by simgpu_create */
    setenv("SIMGPU_RESTORE_BW", "20GiB/s", 1);
    create_set(8 * GiB);
    assert_int_equal(simgpu_checkpoint_bandwidth(own_set, true), 20 * GiB);
    assert_int_equal(simgpu_checkpoint_bandwidth(own_set, false), 20 * GiB);
    pid_t small = spawn(HOLDER, 1 * GiB);
    pid_t large = spawn(HOLDER, 3 * GiB);
    cuda_t *c = open_sim();
    cuda_result_t a = run(c, CUDA_OP_PARK, small, 1000);
    cuda_result_t b = run(c, CUDA_OP_PARK, large, 1000);
    assert_int_equal(a.status, CUDA_OK);
    assert_int_equal(b.status, CUDA_OK);
    /* 1 GiB / 20 GiB/s = 50 ms, 3 GiB = 150 ms; never faster, a loaded box may be slower */
    assert_true(a.copy_us >= 49000 && a.copy_us < 1000000);
    assert_true(b.copy_us >= 149000 && b.copy_us < 1100000);
    cuda_result_t ra = run(c, CUDA_OP_UNPARK, large, 0);
    assert_true(ra.copy_us >= 149000);
    close_sim(c);
}

static void test_parked_process_dies(void **state)
{
    (void)state;
    create_set(8 * GiB);
    pid_t pid = spawn(HOLDER, 2 * GiB);
    cuda_t *c = open_sim();
    assert_int_equal(run(c, CUDA_OP_PARK, pid, 1000).status, CUDA_OK);
    assert_int_equal(parked_bytes_of(pid), 2 * GiB);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(child_pipes[0]);
    n_children = 0; /* reaped already */
    assert_int_equal(parked_bytes_of(pid), 0);
    size_t n = 1;
    assert_int_equal(simgpu_park_list(own_set, NULL, 0, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(run(c, CUDA_OP_STATE, pid, 0).status, CUDA_NOT_FOUND);
    close_sim(c);
}

static void test_two_gpus_parked_and_restored_per_gpu(void **state)
{
    (void)state;
    create_gpus(2, 4 * GiB);
    pid_t pid = spawn(HOLDER_GPU1, 1 * GiB); /* 1 GiB on GPU 0, 2 GiB on GPU 1 */
    cuda_t *c = open_sim();
    assert_int_equal(run(c, CUDA_OP_PARK, pid, 1000).status, CUDA_OK);
    assert_int_equal(gpu_bytes_on(0, pid) + gpu_bytes_on(1, pid), 0);
    simgpu_park_info_t parks[4];
    size_t n = 0;
    assert_int_equal(simgpu_park_list(own_set, parks, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(parks[0].parked[0], 1 * GiB);
    assert_int_equal(parks[0].parked[1], 2 * GiB);
    assert_int_equal(parks[0].state, SIMGPU_CUDA_CHECKPOINTED);

    /* GPU 1 full: nothing comes back, not even GPU 0's share */
    assert_int_equal(simgpu_alloc(own_set, 1, 3 * GiB), 0);
    assert_int_equal(run(c, CUDA_OP_UNPARK, pid, 0).status, CUDA_NO_MEMORY);
    assert_int_equal(gpu_bytes_on(0, pid), 0);
    assert_int_equal(simgpu_free(own_set, 1, 3 * GiB), 0);
    assert_int_equal(run(c, CUDA_OP_UNPARK, pid, 0).status, CUDA_OK);
    assert_int_equal(gpu_bytes_on(0, pid), 1 * GiB);
    assert_int_equal(gpu_bytes_on(1, pid), 2 * GiB);
    close_sim(c);
}

static void test_bandwidth_parsing(void **state)
{
    (void)state;
    uint64_t bw = 0;
    assert_int_equal(simgpu_parse_bandwidth("20GB/s", &bw), 0);
    assert_int_equal(bw, 20000000000ULL);
    assert_int_equal(simgpu_parse_bandwidth("16GiB/s", &bw), 0);
    assert_int_equal(bw, 16 * GiB);
    assert_int_equal(simgpu_parse_bandwidth("2e9", &bw), 0);
    assert_int_equal(bw, 2000000000ULL);
    assert_int_equal(simgpu_parse_bandwidth("512MB", &bw), 0);
    assert_int_equal(bw, 512000000ULL);
    const char *bad[] = {"", "0", "-1GB/s", "fast", "20GB/h", "1e400", "inf", "20 GB/s", "GB/s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(simgpu_parse_bandwidth(bad[i], &bw), -1);
    setenv("SIMGPU_PCIE_BW", "nonsense", 1); /* ignored: the default applies */
    setenv("SIMGPU_CHECKPOINT_BW", "0", 1);
    unsetenv("SIMGPU_RESTORE_BW");
    create_set(1 * GiB);
    assert_int_equal(simgpu_pcie_bandwidth(own_set), SIMGPU_DEFAULT_PCIE_BW);
    /* the driver's checkpoint at the field's rates, not the link's */
    assert_int_equal(simgpu_checkpoint_bandwidth(own_set, true), SIMGPU_DEFAULT_CHECKPOINT_BW);
    assert_int_equal(simgpu_checkpoint_bandwidth(own_set, false), SIMGPU_DEFAULT_RESTORE_BW);
    setenv("SIMGPU_TIMESCALE", "1", 1);
    assert_int_equal(simgpu_copy_ms(own_set, 20000000000ULL), 1000);
    assert_int_equal(simgpu_copy_ms(own_set, 0), 0);
    assert_int_equal(simgpu_checkpoint_ms(own_set, 20000000000ULL, true), 10000);
    assert_int_equal(simgpu_checkpoint_ms(own_set, 20000000000ULL, false), 4000);
}

/* ---- the thread pool ---- */

typedef struct done_log {
    int calls;
    cuda_result_t last;
} done_log_t;

static void on_done(void *ctx, const cuda_result_t *res)
{
    done_log_t *log = ctx;
    log->calls++;
    log->last = *res;
}

static void test_async_park_and_unpark(void **state)
{
    (void)state;
    create_set(8 * GiB);
    pid_t pid = spawn(GATED, 2 * GiB);
    cuda_t *c = open_sim();
    done_log_t log = {0};
    assert_int_equal(cuda_park(c, &loop, pid, 5000, on_done, &log), 0);
    assert_int_equal(log.calls, 0); /* never inside the call */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(log.calls, 1);
    assert_int_equal(log.last.op, CUDA_OP_PARK);
    assert_int_equal(log.last.status, CUDA_OK);
    assert_int_equal(log.last.state, CUDA_STATE_CHECKPOINTED);
    assert_int_equal(gpu_bytes_of(pid), 0);

    assert_int_equal(cuda_unpark(c, &loop, pid, on_done, &log), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(log.calls, 2);
    assert_int_equal(log.last.op, CUDA_OP_UNPARK);
    assert_int_equal(log.last.state, CUDA_STATE_RUNNING);
    assert_int_equal(gpu_bytes_of(pid), 2 * GiB);

    /* unavailable handles answer through the loop too */
    cuda_t *none = cuda_open("/nonexistent/libcuda.so.1");
    assert_int_equal(cuda_park(none, &loop, pid, 100, on_done, &log), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(log.calls, 3);
    assert_int_equal(log.last.status, CUDA_UNAVAILABLE);
    cuda_close(none);
    close_sim(c);
}

static void test_close_with_operation_in_flight(void **state)
{
    (void)state;
    setenv("SIMGPU_TIMESCALE", "1", 1);
    setenv("SIMGPU_CHECKPOINT_BW", "2GiB/s", 1);
    create_set(8 * GiB);
    pid_t pid = spawn(HOLDER, 4 * GiB); /* a 2 s copy */
    unsigned live = cuda_live_count();
    cuda_t *c = open_sim();
    done_log_t log = {0};
    assert_int_equal(cuda_park(c, &loop, pid, 1000, on_done, &log), 0);
    sleep_ms(20);
    close_sim(c); /* the driver call goes on; the callback must not run */
    assert_int_equal(cuda_park(c, &loop, pid, 1000, on_done, &log), -1);
    /* The loop ends without waiting for the driver (a hung driver must not hold up exit):
     * the handle is still alive, held by the operation in the copy. */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(log.calls, 0);
    assert_int_equal(cuda_live_count(), live + 1);
    assert_int_equal(parked_bytes_of(pid), 0);
    /* When the checkpoint returns, its own thread frees the handle (ASan checks). */
    for (int i = 0; i < 3000 && cuda_live_count() != live; i++)
        sleep_ms(5);
    assert_int_equal(cuda_live_count(), live);
    assert_int_equal(log.calls, 0);
    assert_int_equal(parked_bytes_of(pid), 4 * GiB); /* the park itself was done */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unavailable_library, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unavailable_without_gpu_and_env_choice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_park_unpark_moves_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_custom_storage_keeps_the_bytes_here, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_that_does_not_fit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_waits_for_the_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_actions_and_bad_states, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_time_follows_bandwidth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parked_process_dies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_gpus_parked_and_restored_per_gpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bandwidth_parsing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async_park_and_unpark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_operation_in_flight, setup, teardown),
    };
    return cmocka_run_group_tests(tests, find_libraries, NULL);
}
