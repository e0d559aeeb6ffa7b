/*
 * test_simgpu: the simulated-GPU library (sim/lib/simgpu.c) on real shared memory.
 *
 * Covers create/open/remove and their errors, UUID format and determinism, alloc/free/held,
 * ENOMEM at the exact boundary, the process list with a short buffer, utilization, the time
 * scale, a SIGKILLed child whose memory shows as held by a dead pid until the release delay
 * has passed, a zombie child counted dead, children killed at random moments (the robust
 * mutex must never wedge), and many forked children allocating at once without the GPU ever
 * going over its total.
 * Every test uses its own set name ("ut.PID.N") and removes it. Children report through
 * pipes and exit codes, never through cmocka.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)
#define POLL_LIMIT_MS 20000 /* generous: a loaded 2-core machine */

static char set_name[64];
static int set_counter;

static int setup(void **state)
{
    (void)state;
    snprintf(set_name, sizeof set_name, "ut.%d.%d", (int)getpid(), ++set_counter);
    setenv("SIMGPU_TIMESCALE", "1", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    simgpu_remove(set_name, NULL, 0);
    return 0;
}

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

static simgpu_t *create_and_open(int n_gpus, uint64_t memory, uint64_t delay_ms)
{
    char err[256] = "";
    int rc = simgpu_create(set_name, n_gpus, memory, "NVIDIA Test GPU", delay_ms, err, sizeof err);
    if (rc != 0)
        fail_msg("simgpu_create: %s", err);
    simgpu_t *s = simgpu_open(set_name, err, sizeof err);
    if (!s)
        fail_msg("simgpu_open: %s", err);
    return s;
}

static bool uuid_well_formed(const char *uuid)
{
    /* GPU-8-4-4-4-12 lower-case hex */
    static const int groups[] = {8, 4, 4, 4, 12};
    if (strncmp(uuid, "GPU-", 4) != 0)
        return false;
    const char *p = uuid + 4;
    for (int g = 0; g < 5; g++) {
        for (int i = 0; i < groups[g]; i++, p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                return false;
        if (g < 4 && *p++ != '-')
            return false;
    }
    return *p == '\0';
}

/* Fork a child that allocates bytes on gpu, reports "1" (ok) or "0" over a pipe, then
 * either waits to be killed (mode 'w') or exits at once without freeing (mode 'x'). */
static pid_t spawn_holder(int gpu, uint64_t bytes, char mode)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        simgpu_t *s = simgpu_open(set_name, NULL, 0);
        char ok = (s && simgpu_alloc(s, gpu, bytes) == 0) ? '1' : '0';
        if (write(fds[1], &ok, 1) != 1)
            _exit(3);
        if (mode == 'x')
            _exit(0);
        for (;;)
            pause();
    }
    close(fds[1]);
    char ok = 0;
    assert_int_equal(read(fds[0], &ok, 1), 1);
    close(fds[0]);
    assert_int_equal(ok, '1');
    return pid;
}

/* Find pid in gpu's process list; returns its index or -1. */
static int find_proc(simgpu_t *s, int gpu, pid_t pid, simgpu_proc_t *out)
{
    simgpu_proc_t procs[SIMGPU_MAX_PROCS];
    size_t n = 0;
    assert_int_equal(simgpu_processes(s, gpu, procs, SIMGPU_MAX_PROCS, &n), 0);
    for (size_t i = 0; i < n && i < SIMGPU_MAX_PROCS; i++) {
        if (procs[i].pid == pid) {
            if (out)
                *out = procs[i];
            return (int)i;
        }
    }
    return -1;
}

/* ---- tests ---- */

static void test_create_open_info(void **state)
{
    (void)state;
    simgpu_t *s = create_and_open(3, 24 * GiB, 0);
    assert_int_equal(simgpu_count(s), 3);
    simgpu_info_t info[3];
    for (int g = 0; g < 3; g++) {
        assert_int_equal(simgpu_info(s, g, &info[g]), 0);
        assert_string_equal(info[g].name, "NVIDIA Test GPU");
        assert_true(uuid_well_formed(info[g].uuid));
        assert_int_equal(info[g].total, 24 * GiB);
        assert_int_equal(info[g].used, 0);
        assert_int_equal(info[g].free, 24 * GiB);
    }
    assert_string_not_equal(info[0].uuid, info[1].uuid);
    assert_string_not_equal(info[1].uuid, info[2].uuid);
    assert_int_equal(simgpu_find_uuid(s, info[2].uuid), 2);
    assert_int_equal(simgpu_find_uuid(s, "GPU-00000000-0000-0000-0000-000000000000"), -1);
    assert_int_equal(simgpu_info(s, 3, &info[0]), -1);
    assert_int_equal(simgpu_info(s, -1, &info[0]), -1);
    simgpu_close(s);

    /* Same name + index -> same UUID after re-creation; a different name -> different. */
    char err[256];
    assert_int_equal(simgpu_remove(set_name, err, sizeof err), 0);
    s = create_and_open(1, GiB, 0);
    simgpu_info_t again;
    assert_int_equal(simgpu_info(s, 0, &again), 0);
    assert_string_equal(again.uuid, info[0].uuid);
    simgpu_close(s);
}

static void test_create_errors(void **state)
{
    (void)state;
    char err[256] = "";
    assert_int_equal(simgpu_create(set_name, 1, GiB, NULL, 0, err, sizeof err), 0);
    err[0] = '\0';
    assert_int_equal(simgpu_create(set_name, 1, GiB, NULL, 0, err, sizeof err), -1);
    assert_int_equal(errno, EEXIST);
    assert_non_null(strstr(err, "exists"));
    assert_int_equal(simgpu_create("bad/name", 1, GiB, NULL, 0, err, sizeof err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(simgpu_create("", 1, GiB, NULL, 0, NULL, 0), -1);
    assert_int_equal(simgpu_create("ok-name", 0, GiB, NULL, 0, NULL, 0), -1);
    assert_int_equal(simgpu_create("ok-name", SIMGPU_MAX_GPUS + 1, GiB, NULL, 0, NULL, 0), -1);
    assert_int_equal(simgpu_create("ok-name", 1, 0, NULL, 0, NULL, 0), -1);
    assert_int_equal(errno, EINVAL);

    /* Default model name when none is given. */
    simgpu_t *s = simgpu_open(set_name, err, sizeof err);
    assert_non_null(s);
    simgpu_info_t info;
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_true(strlen(info.name) > 0);
    simgpu_close(s);
}

static void test_open_missing_and_env(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(simgpu_open(set_name, err, sizeof err));
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err, set_name));

    unsetenv("SIMGPU");
    assert_null(simgpu_open(NULL, err, sizeof err));
    assert_int_equal(errno, EINVAL);

    assert_int_equal(simgpu_create(set_name, 2, GiB, NULL, 0, err, sizeof err), 0);
    setenv("SIMGPU", set_name, 1);
    simgpu_t *s = simgpu_open(NULL, err, sizeof err);
    unsetenv("SIMGPU");
    assert_non_null(s);
    assert_int_equal(simgpu_count(s), 2);
    simgpu_close(s);
}

static void test_alloc_free_enomem(void **state)
{
    (void)state;
    simgpu_t *s = create_and_open(2, 10 * GiB, 0);
    assert_int_equal(simgpu_alloc(s, 0, 4 * GiB), 0);
    assert_int_equal(simgpu_alloc(s, 0, 5 * GiB), 0);
    assert_int_equal(simgpu_held(s, 0), 9 * GiB);
    assert_int_equal(simgpu_held(s, 1), 0);

    /* One byte over fails and changes nothing; the exact rest fits. */
    errno = 0;
    assert_int_equal(simgpu_alloc(s, 0, GiB + 1), -1);
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(simgpu_held(s, 0), 9 * GiB);
    assert_int_equal(simgpu_alloc(s, 0, GiB), 0);
    simgpu_info_t info;
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.used, 10 * GiB);
    assert_int_equal(info.free, 0);
    assert_int_equal(info.utilization_memory, 100);
    assert_int_equal(simgpu_alloc(s, 0, 1), -1);
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(simgpu_alloc(s, 1, 11 * GiB), -1); /* more than the card */
    assert_int_equal(errno, ENOMEM);

    /* The other GPU is independent. */
    assert_int_equal(simgpu_alloc(s, 1, 3 * GiB), 0);
    assert_int_equal(simgpu_info(s, 1, &info), 0);
    assert_int_equal(info.used, 3 * GiB);

    /* Freeing more than held fails; freeing everything removes the process. */
    assert_int_equal(simgpu_free(s, 1, 4 * GiB), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(simgpu_free(s, 0, 6 * GiB), 0);
    assert_int_equal(simgpu_held(s, 0), 4 * GiB);
    assert_int_equal(simgpu_free(s, 0, 4 * GiB), 0);
    assert_int_equal(find_proc(s, 0, getpid(), NULL), -1);
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.used, 0);
    assert_int_equal(info.free, 10 * GiB);
    assert_int_equal(simgpu_alloc(s, 7, 1), -1);
    assert_int_equal(errno, EINVAL);
    simgpu_close(s);
}

static void test_processes_short_buffer(void **state)
{
    (void)state;
    simgpu_t *s = create_and_open(1, 10 * GiB, 0);
    pid_t kids[3];
    for (int i = 0; i < 3; i++)
        kids[i] = spawn_holder(0, (uint64_t)(i + 1) * GiB, 'w');
    assert_int_equal(simgpu_alloc(s, 0, 512 * MiB), 0);

    simgpu_proc_t two[2];
    size_t n = 0;
    assert_int_equal(simgpu_processes(s, 0, two, 2, &n), 0);
    assert_int_equal(n, 4); /* all are counted, two are written */
    assert_int_equal(simgpu_processes(s, 0, NULL, 0, &n), 0);
    assert_int_equal(n, 4);

    simgpu_proc_t procs[SIMGPU_MAX_PROCS];
    assert_int_equal(simgpu_processes(s, 0, procs, SIMGPU_MAX_PROCS, &n), 0);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += procs[i].used;
        assert_false(procs[i].dead);
    }
    simgpu_info_t info;
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(sum, info.used);
    assert_int_equal(info.used, 6 * GiB + 512 * MiB);
    simgpu_proc_t mine;
    assert_true(find_proc(s, 0, kids[1], &mine) >= 0);
    assert_int_equal(mine.used, 2 * GiB);

    for (int i = 0; i < 3; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    /* Release delay 0: gone at the next access. */
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.used, 512 * MiB);
    simgpu_close(s);
}

static void test_sigkilled_child_released_after_delay(void **state)
{
    (void)state;
    const uint64_t delay_ms = 1500;
    simgpu_t *s = create_and_open(1, 8 * GiB, delay_ms);
    pid_t kid = spawn_holder(0, 3 * GiB, 'w');
    simgpu_proc_t p;
    assert_true(find_proc(s, 0, kid, &p) >= 0);
    assert_false(p.dead);

    assert_int_equal(kill(kid, SIGKILL), 0);
    assert_int_equal(waitpid(kid, NULL, 0), kid);
    uint64_t killed_at = now_ms();

    /* Detected dead at once, still held (the driver's lag). */
    assert_true(find_proc(s, 0, kid, &p) >= 0);
    assert_true(p.dead);
    assert_int_equal(p.used, 3 * GiB);
    simgpu_info_t info;
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.used, 3 * GiB);
    assert_int_equal(simgpu_alloc(s, 0, 6 * GiB), -1); /* dead memory still counts */
    assert_int_equal(errno, ENOMEM);

    /* Released after the delay, never before. */
    uint64_t released_at = 0;
    while (now_ms() - killed_at < POLL_LIMIT_MS) {
        assert_int_equal(simgpu_info(s, 0, &info), 0);
        if (info.used == 0) {
            released_at = now_ms();
            break;
        }
        sleep_ms(20);
    }
    assert_true(released_at != 0);
    assert_true(released_at - killed_at >= delay_ms);
    assert_int_equal(find_proc(s, 0, kid, NULL), -1);
    assert_int_equal(simgpu_alloc(s, 0, 8 * GiB), 0);
    simgpu_close(s);
}

static void test_zombie_counts_as_dead(void **state)
{
    (void)state;
    simgpu_t *s = create_and_open(1, 4 * GiB, 0);
    pid_t kid = spawn_holder(0, GiB, 'x'); /* exits without freeing; not reaped yet */
    /* Poll until the exit is visible (the child may still be running its last lines). */
    simgpu_info_t info = {0};
    uint64_t start = now_ms();
    do {
        assert_int_equal(simgpu_info(s, 0, &info), 0);
        if (info.used == 0)
            break;
        sleep_ms(10);
    } while (now_ms() - start < POLL_LIMIT_MS);
    assert_int_equal(info.used, 0);
    /* It was a zombie the whole time: nobody reaped it before this point. */
    int status = 0;
    assert_int_equal(waitpid(kid, &status, 0), kid);
    assert_true(WIFEXITED(status));
    simgpu_close(s);
}

static void test_remove_keeps_mappings(void **state)
{
    (void)state;
    simgpu_t *s = create_and_open(1, GiB, 0);
    char err[256] = "";
    assert_int_equal(simgpu_remove(set_name, err, sizeof err), 0);
    assert_null(simgpu_open(set_name, NULL, 0));
    assert_int_equal(simgpu_remove(set_name, err, sizeof err), -1);
    assert_int_equal(errno, ENOENT);
    /* The existing mapping keeps working. */
    assert_int_equal(simgpu_alloc(s, 0, MiB), 0);
    assert_int_equal(simgpu_held(s, 0), MiB);
    simgpu_close(s);
    /* The name can be created again. */
    assert_int_equal(simgpu_create(set_name, 1, GiB, NULL, 0, err, sizeof err), 0);
}

static void test_utilization(void **state)
{
    (void)state;
    simgpu_t *s = create_and_open(1, 4 * GiB, 0);
    simgpu_info_t info;
    assert_int_equal(simgpu_alloc(s, 0, GiB), 0);
    assert_int_equal(simgpu_set_utilization(s, 0, 70), 0);
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.utilization_gpu, 70);
    assert_int_equal(info.utilization_memory, 25);
    assert_int_equal(simgpu_set_utilization(s, 0, 250), 0); /* clamped */
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.utilization_gpu, 100);
    assert_int_equal(simgpu_set_utilization(s, 0, 0), 0);
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.utilization_gpu, 0);
    simgpu_close(s);
}

static void test_timescale(void **state)
{
    (void)state;
    setenv("SIMGPU_TIMESCALE", "0.01", 1);
    assert_true(simgpu_timescale() > 0.0099 && simgpu_timescale() < 0.0101);
    assert_int_equal(simgpu_scaled_ms(1000), 10);
    assert_int_equal(simgpu_scaled_ms(30000), 300);
    simgpu_t *s = create_and_open(1, GiB, 2000);
    uint64_t sim = 0, real = 0;
    assert_int_equal(simgpu_release_delay(s, &sim, &real), 0);
    assert_int_equal(sim, 2000);
    assert_int_equal(real, 20);
    simgpu_close(s);
    setenv("SIMGPU_TIMESCALE", "garbage", 1);
    assert_true(simgpu_timescale() == 1.0);
    setenv("SIMGPU_TIMESCALE", "-2", 1);
    assert_true(simgpu_timescale() == 1.0);
    unsetenv("SIMGPU_TIMESCALE");
    assert_true(simgpu_timescale() == 1.0);
    assert_int_equal(simgpu_scaled_ms(1234), 1234);
    setenv("SIMGPU_TIMESCALE", "1", 1);
}

/* Children allocate in a loop and are SIGKILLed at random moments, possibly while holding
 * the set's mutex; the parent must still get through (an alarm turns a hang into a
 * failure). */
static void test_killed_while_locking_does_not_wedge(void **state)
{
    (void)state;
    simgpu_t *s = create_and_open(1, 64 * GiB, 0);
    srand((unsigned)getpid());
    alarm(120);
    for (int round = 0; round < 20; round++) {
        pid_t kid = fork();
        assert_true(kid >= 0);
        if (kid == 0) {
            simgpu_t *c = simgpu_open(set_name, NULL, 0);
            if (!c)
                _exit(3);
            for (;;) {
                simgpu_alloc(c, 0, MiB);
                simgpu_free(c, 0, MiB);
            }
        }
        sleep_ms((unsigned)(rand() % 20));
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        simgpu_info_t info;
        assert_int_equal(simgpu_info(s, 0, &info), 0);
        assert_int_equal(info.used, 0); /* the killed child was reaped */
    }
    simgpu_info_t info;
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.used, 0);
    assert_int_equal(simgpu_alloc(s, 0, GiB), 0);
    alarm(0);
    simgpu_close(s);
}

/* Many children allocate concurrently until ENOMEM; together they never exceed the total. */
static void test_concurrent_children_never_exceed_total(void **state)
{
    (void)state;
    enum { CHILDREN = 16 };
    const uint64_t total = 10 * GiB, chunk = 96 * MiB;
    simgpu_t *s = create_and_open(1, total, 0);
    int go[2], report[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(report), 0);
    pid_t kids[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            close(go[1]);
            close(report[0]);
            simgpu_t *c = simgpu_open(set_name, NULL, 0);
            char byte;
            if (!c || read(go[0], &byte, 1) != 0) /* wait until the parent closes go */
                _exit(3);
            uint32_t granted = 0;
            while (simgpu_alloc(c, 0, chunk) == 0)
                granted++;
            if (errno != ENOMEM)
                _exit(4);
            if (simgpu_held(c, 0) != granted * chunk)
                _exit(5);
            if (write(report[1], &granted, sizeof granted) != sizeof granted)
                _exit(6);
            for (;;)
                pause();
        }
    }
    close(go[0]);
    close(report[1]);
    close(go[1]); /* start them all at once */

    uint64_t granted_total = 0;
    for (int i = 0; i < CHILDREN; i++) {
        uint32_t granted = 0;
        assert_int_equal(read(report[0], &granted, sizeof granted), sizeof granted);
        granted_total += granted;
    }
    close(report[0]);
    simgpu_info_t info;
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_true(info.used <= total);
    assert_int_equal(info.used, granted_total * chunk);
    assert_true(total - info.used < chunk); /* they filled it */
    size_t n = 0;
    assert_int_equal(simgpu_processes(s, 0, NULL, 0, &n), 0);
    assert_true(n <= CHILDREN);

    for (int i = 0; i < CHILDREN; i++) {
        kill(kids[i], SIGKILL);
        int status = 0;
        waitpid(kids[i], &status, 0);
        assert_true(WIFSIGNALED(status)); /* not an early exit with an error code */
    }
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.used, 0);
    simgpu_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_open_info, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_missing_and_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_free_enomem, setup, teardown),
        cmocka_unit_test_setup_teardown(test_processes_short_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkilled_child_released_after_delay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zombie_counts_as_dead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_keeps_mappings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_utilization, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timescale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_while_locking_does_not_wedge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_children_never_exceed_total, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
