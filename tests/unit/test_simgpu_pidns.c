/*
 * test_simgpu_pidns: the simulated GPU set with processes in other pid namespaces
 * (sim/lib/simgpu_proc.c), as containers run them.
 *
 * The test process is the set's creator ("host side"). A holder is forked through an
 * intermediate child that unshares a pid namespace (and, by default, a mount namespace in
 * which the holder mounts its own /proc, as `unshare --pid --fork --mount-proc` does), so the
 * holder is pid 1 of its namespace. The intermediate tells the host pid it forked.
 * Covered: the holder's bytes are listed under its host pid (ns_pid 1, other_ns); its own
 * slot lookup works from inside; its accesses never mark the host's slots (or another
 * container's) dead; two containers' pid 1 are told apart; a holder killed is marked dead by
 * the host and released after the delay, also one that died before the host ever looked
 * (pid 0, found gone); a holder without its own /proc judges nothing but is booked right;
 * lock / checkpoint / restore / unlock by host pid, and a host pid of 1 is not the
 * container's pid 1.
 * Needs CAP_SYS_ADMIN (root) for unshare(CLONE_NEWPID); every test skips without it.
 * Children report through pipes and exit codes, never through cmocka.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

#define MiB (1024ULL * 1024ULL)
#define DELAY_MS 300ULL        /* the sets' release delay (SIMGPU_TIMESCALE=1) */
#define POLL_LIMIT_MS 10000ULL /* generous: a loaded 2-core machine */

static char set_name[64];
static int set_counter;

struct holder {
    pid_t mid;      /* the intermediate child (host namespace), which waits for the holder */
    pid_t host_pid; /* the holder, as the host sees it */
    int cmd;        /* write end: one command byte */
    int rep;        /* read end: one int64_t answer */
};

static int setup(void **state)
{
    (void)state;
    snprintf(set_name, sizeof set_name, "utns.%d.%d", (int)getpid(), ++set_counter);
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

/* Skips the test where this process may not make a pid namespace. */
static void require_pidns(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(unshare(CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : 1);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        print_message("SKIPPED: unshare(CLONE_NEWPID) is not permitted here; needs root\n");
        skip();
    }
}

static simgpu_t *create_and_open(uint64_t memory)
{
    char err[256] = "";
    if (simgpu_create(set_name, 1, memory, "NVIDIA Test GPU", DELAY_MS, err, sizeof err) != 0)
        fail_msg("simgpu_create: %s", err);
    simgpu_t *s = simgpu_open(set_name, err, sizeof err);
    if (!s)
        fail_msg("simgpu_open: %s", err);
    return s;
}

static void answer(int fd, int64_t v)
{
    if (write(fd, &v, sizeof v) != (ssize_t)sizeof v)
        _exit(3);
}

/* The holder (pid 1 of its namespace): allocates bytes, answers getpid() and the result,
 * then serves commands: 'a' allocate 1 MiB (0 or -errno), 'h' bytes held, 'q' exit. */
static void holder_main(int cmd, int rep, uint64_t bytes, bool exit_at_once)
{
    simgpu_t *s = simgpu_open(set_name, NULL, 0);
    answer(rep, getpid());
    answer(rep, s && simgpu_alloc(s, 0, bytes) == 0 ? 0 : -errno);
    if (exit_at_once)
        _exit(0);
    char c;
    while (read(cmd, &c, 1) == 1) {
        if (c == 'a')
            answer(rep, simgpu_alloc(s, 0, MiB) == 0 ? 0 : -errno);
        else if (c == 'h')
            answer(rep, (int64_t)simgpu_held(s, 0));
        else
            break;
    }
    _exit(0);
}

/* The intermediate: a new pid namespace (own_proc: and mount namespace), the holder in it. */
static void mid_main(int cmd, int rep, int info, uint64_t bytes, bool own_proc, bool exit_at_once)
{
    if (unshare(CLONE_NEWPID | (own_proc ? CLONE_NEWNS : 0)) < 0)
        _exit(10);
    if (own_proc && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        _exit(11);
    pid_t pid = fork();
    if (pid < 0)
        _exit(12);
    if (pid == 0) {
        close(info);
        if (own_proc && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
            _exit(13);
        holder_main(cmd, rep, bytes, exit_at_once);
    }
    if (write(info, &pid, sizeof pid) != (ssize_t)sizeof pid)
        _exit(14);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    _exit(0);
}

static int64_t ask(struct holder *h, char c)
{
    assert_int_equal(write(h->cmd, &c, 1), 1);
    int64_t v = 0;
    assert_int_equal(read(h->rep, &v, sizeof v), (ssize_t)sizeof v);
    return v;
}

/* Starts a holder of bytes in a new pid namespace; returns once it holds them. */
static void spawn(struct holder *h, uint64_t bytes, bool own_proc, bool exit_at_once)
{
    int cmd[2], rep[2], info[2];
    assert_int_equal(pipe(cmd), 0);
    assert_int_equal(pipe(rep), 0);
    assert_int_equal(pipe(info), 0);
    h->mid = fork();
    assert_true(h->mid >= 0);
    if (h->mid == 0) {
        close(cmd[1]);
        close(rep[0]);
        close(info[0]);
        mid_main(cmd[0], rep[1], info[1], bytes, own_proc, exit_at_once);
    }
    close(cmd[0]);
    close(rep[1]);
    close(info[1]);
    h->cmd = cmd[1];
    h->rep = rep[0];
    assert_int_equal(read(info[0], &h->host_pid, sizeof h->host_pid), (ssize_t)sizeof h->host_pid);
    close(info[0]);
    int64_t v = 0;
    assert_int_equal(read(h->rep, &v, sizeof v), (ssize_t)sizeof v);
    assert_int_equal(v, 1); /* pid 1 of its namespace */
    assert_int_equal(read(h->rep, &v, sizeof v), (ssize_t)sizeof v);
    assert_int_equal(v, 0); /* allocated */
    assert_true(h->host_pid > 1);
}

/* Kills the holder by its host pid and reaps the intermediate. */
static void kill_holder(struct holder *h)
{
    kill(h->host_pid, SIGKILL);
    int st;
    assert_int_equal(waitpid(h->mid, &st, 0), h->mid);
    close(h->cmd);
    close(h->rep);
}

/* The entry of pid (pid 0: the one with ns_pid 1 of namespace ns) on GPU 0, or false. */
static bool find_proc(simgpu_t *s, pid_t pid, uint64_t ns, simgpu_proc_t *out)
{
    simgpu_proc_t procs[SIMGPU_MAX_PROCS];
    size_t n = 0;
    assert_int_equal(simgpu_processes(s, 0, procs, SIMGPU_MAX_PROCS, &n), 0);
    for (size_t i = 0; i < n && i < SIMGPU_MAX_PROCS; i++) {
        if (pid ? procs[i].pid == pid : (procs[i].pid_ns == ns && procs[i].ns_pid == 1)) {
            if (out)
                *out = procs[i];
            return true;
        }
    }
    return false;
}

static void assert_alive_host_slot(simgpu_t *s, uint64_t bytes)
{
    simgpu_proc_t me;
    assert_true(find_proc(s, getpid(), 0, &me));
    assert_false(me.dead);
    assert_false(me.other_ns);
    assert_int_equal(me.ns_pid, getpid());
    assert_int_equal(me.used, bytes);
}

/* Polls until the slot (by pid, or ns) is dead, then until it is gone. t0: a time before
 * anyone could have found it dead (only this process can), so the delay runs from after t0. */
static void wait_released(simgpu_t *s, pid_t pid, uint64_t ns, uint64_t t0)
{
    simgpu_proc_t p;
    while (find_proc(s, pid, ns, &p) && !p.dead) {
        assert_true(now_ms() - t0 < POLL_LIMIT_MS);
        sleep_ms(10);
    }
    while (find_proc(s, pid, ns, NULL)) {
        assert_true(now_ms() - t0 < POLL_LIMIT_MS);
        sleep_ms(10);
    }
    assert_true(now_ms() - t0 >= DELAY_MS);
}

/* ---- tests ---- */

static void booked_under_host_pid(bool own_proc)
{
    require_pidns();
    simgpu_t *s = create_and_open(8192 * MiB);
    assert_int_equal(simgpu_alloc(s, 0, 64 * MiB), 0);

    struct holder a, b;
    spawn(&a, 128 * MiB, own_proc, false);
    spawn(&b, 256 * MiB, own_proc, false); /* another container, also pid 1 */
    simgpu_proc_t pa, pb;
    assert_true(find_proc(s, a.host_pid, 0, &pa));
    assert_true(find_proc(s, b.host_pid, 0, &pb));
    assert_int_equal(pa.used, 128 * MiB);
    assert_int_equal(pb.used, 256 * MiB);
    assert_true(pa.other_ns && pb.other_ns);
    assert_int_equal(pa.ns_pid, 1);
    assert_int_equal(pb.ns_pid, 1);
    assert_true(pa.pid_ns != 0 && pa.pid_ns != pb.pid_ns);
    assert_false(pa.dead || pb.dead);

    /* Inside: its own slot is found (after the host wrote its host pid into it), and its
     * accesses (each reaps) mark nothing of the host's or the other container's dead. */
    assert_int_equal(ask(&a, 'a'), 0);
    assert_int_equal(ask(&b, 'a'), 0);
    assert_int_equal(ask(&a, 'h'), (int64_t)(129 * MiB));
    assert_int_equal(ask(&b, 'h'), (int64_t)(257 * MiB));
    assert_alive_host_slot(s, 64 * MiB);
    assert_true(find_proc(s, a.host_pid, 0, &pa) && !pa.dead && pa.used == 129 * MiB);
    assert_true(find_proc(s, b.host_pid, 0, &pb) && !pb.dead && pb.used == 257 * MiB);

    /* Killed inside its namespace: the host finds its host pid gone; released after the
     * delay, while the other container's slot stays. */
    kill_holder(&a);
    uint64_t t0 = now_ms();
    assert_int_equal(ask(&b, 'a'), 0); /* b's reap must not judge a, nor the host */
    wait_released(s, a.host_pid, 0, t0);
    assert_true(find_proc(s, b.host_pid, 0, &pb) && !pb.dead);
    assert_alive_host_slot(s, 64 * MiB);
    kill_holder(&b);
    wait_released(s, b.host_pid, 0, now_ms());
    simgpu_close(s);
}

static void test_booked_under_host_pid(void **state)
{
    (void)state;
    booked_under_host_pid(true);
}

static void test_without_own_proc(void **state)
{
    (void)state;
    booked_under_host_pid(false);
}

static void test_died_before_the_host_looked(void **state)
{
    (void)state;
    require_pidns();
    simgpu_t *s = create_and_open(8192 * MiB);
    struct holder h;
    spawn(&h, 128 * MiB, true, true); /* exits at once without freeing */
    int st;
    assert_int_equal(waitpid(h.mid, &st, 0), h.mid);
    close(h.cmd);
    close(h.rep);
    uint64_t t0 = now_ms();
    /* Never translated: listed as pid 0 (ns pid 1) and found gone by the host's scan. */
    simgpu_proc_t procs[4];
    size_t n = 0;
    assert_int_equal(simgpu_processes(s, 0, procs, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(procs[0].pid, 0);
    assert_int_equal(procs[0].ns_pid, 1);
    assert_true(procs[0].other_ns);
    assert_true(procs[0].dead);
    assert_int_equal(procs[0].used, 128 * MiB);
    wait_released(s, 0, procs[0].pid_ns, t0);
    simgpu_info_t info;
    assert_int_equal(simgpu_info(s, 0, &info), 0);
    assert_int_equal(info.used, 0);
    simgpu_close(s);
}

static void test_park_by_host_pid(void **state)
{
    (void)state;
    require_pidns();
    simgpu_t *s = create_and_open(8192 * MiB);
    struct holder h;
    spawn(&h, 128 * MiB, true, false);
    int cuda = -1;
    /* pid 1 here is the host's init, not the container's pid 1 */
    assert_int_equal(simgpu_cuda_state(s, 1, &cuda), -1);
    assert_int_equal(errno, ESRCH);
    assert_int_equal(simgpu_cuda_state(s, h.host_pid, &cuda), 0);
    assert_int_equal(cuda, SIMGPU_CUDA_RUNNING);

    assert_int_equal(simgpu_cuda_lock(s, h.host_pid, 0), 0); /* not registered: at once */
    assert_int_equal(ask(&h, 'a'), -EBUSY);                  /* its own CUDA calls block */
    assert_int_equal(simgpu_cuda_checkpoint(s, h.host_pid), 0);
    assert_false(find_proc(s, h.host_pid, 0, NULL));
    simgpu_park_info_t parks[4];
    size_t n = 0;
    assert_int_equal(simgpu_park_list(s, parks, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(parks[0].pid, h.host_pid);
    assert_true(parks[0].other_ns);
    assert_int_equal(parks[0].ns_pid, 1);
    assert_int_equal(parks[0].state, SIMGPU_CUDA_CHECKPOINTED);
    assert_int_equal(parks[0].parked_total, 128 * MiB);

    assert_int_equal(simgpu_cuda_restore(s, h.host_pid), 0);
    assert_int_equal(simgpu_cuda_unlock(s, h.host_pid), 0);
    assert_int_equal(ask(&h, 'a'), 0);
    assert_int_equal(ask(&h, 'h'), (int64_t)(129 * MiB));
    simgpu_proc_t p;
    assert_true(find_proc(s, h.host_pid, 0, &p) && p.used == 129 * MiB && !p.dead);

    /* A parked holder that dies frees its host bytes, found by the host. */
    assert_int_equal(simgpu_cuda_lock(s, h.host_pid, 0), 0);
    assert_int_equal(simgpu_cuda_checkpoint(s, h.host_pid), 0);
    kill_holder(&h);
    uint64_t start = now_ms();
    for (;;) {
        assert_int_equal(simgpu_park_list(s, parks, 4, &n), 0);
        if (n == 0)
            break;
        assert_true(now_ms() - start < POLL_LIMIT_MS);
        sleep_ms(10);
    }
    simgpu_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_booked_under_host_pid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_own_proc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_died_before_the_host_looked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_park_by_host_pid, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
