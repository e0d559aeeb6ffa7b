/*
 * test_attrib: src/proc/attrib.c, which processes are an instance's, over real processes.
 * Each test forks a "family": a leader in a new process group and a member (the leader's
 * child) in that group, optionally holding a listening TCP socket on 127.0.0.1 (the port
 * it got is sent back through a pipe). The test process is a child subreaper, so the
 * member is reaped here when the group is killed (never left as a zombie that /proc still
 * shows in the group). A failed assertion leaves no family behind: each test's teardown
 * kills the groups it spawned, and the families hold no descriptor of the test's output.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/attrib.h"

typedef struct family {
    pid_t leader; /* leads its own process group */
    pid_t member; /* the leader's child, in that group */
    int port;     /* the member listens on it (0 when not asked to) */
} family_t;

#define FAMILIES_MAX 4
static pid_t g_leaders[FAMILIES_MAX]; /* the groups this test spawned and has not ended */

/* A socket listening on 127.0.0.1 at a port the kernel picks; its port in *port. */
static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* The family holds none of the test's descriptors but its own pipe end: stdio on /dev/null. */
static void detach_stdio(void)
{
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd <= 2 && null >= 0; fd++)
        dup2(null, fd);
}

static void member_main(int wfd, bool listen_port)
{
    family_t f = {.leader = getpgrp(), .member = getpid()};
    int fd = listen_port ? listen_any(&f.port) : -1;
    if (listen_port && fd < 0)
        _exit(1);
    if (write(wfd, &f, sizeof f) != (ssize_t)sizeof f)
        _exit(1);
    close(wfd);
    for (;;)
        pause();
}

static family_t spawn_family(bool listen_port)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t leader = fork();
    assert_true(leader >= 0);
    if (leader == 0) {
        close(p[0]);
        detach_stdio();
        if (setpgid(0, 0) != 0)
            _exit(1);
        pid_t member = fork();
        if (member < 0)
            _exit(1);
        if (member == 0)
            member_main(p[1], listen_port);
        close(p[1]);
        for (;;)
            pause();
    }
    close(p[1]);
    for (size_t i = 0; i < FAMILIES_MAX; i++)
        if (g_leaders[i] == 0) {
            g_leaders[i] = leader;
            break;
        }
    family_t f;
    assert_int_equal(read(p[0], &f, sizeof f), (ssize_t)sizeof f);
    close(p[0]);
    assert_int_equal(f.leader, leader);
    assert_true(f.member > 0 && f.member != leader);
    assert_true(!listen_port || f.port > 0);
    return f;
}

static void end_family(const family_t *f)
{
    for (size_t i = 0; i < FAMILIES_MAX; i++)
        if (g_leaders[i] == f->leader)
            g_leaders[i] = 0;
    kill(-f->leader, SIGKILL);
    assert_int_equal(waitpid(f->leader, NULL, 0), f->leader);
    assert_int_equal(waitpid(f->member, NULL, 0), f->member); /* ours: we are its subreaper */
}

/* After each test: the groups a failed assertion left running are killed and reaped. */
static int end_families(void **state)
{
    (void)state;
    for (size_t i = 0; i < FAMILIES_MAX; i++)
        if (g_leaders[i] > 0) {
            kill(-g_leaders[i], SIGKILL);
            g_leaders[i] = 0;
        }
    while (waitpid(-1, NULL, 0) > 0)
        ;
    return 0;
}

/* A port that nothing listens on: one the kernel gave, let go at once. */
static int free_port(void)
{
    int port = 0;
    int fd = listen_any(&port);
    assert_true(fd >= 0);
    close(fd);
    return port;
}

/* ---- whose is a process ------------------------------------------------------------------ */

static void test_worker_claims_itself_and_its_group(void **state)
{
    (void)state;
    family_t f = spawn_family(false);
    family_t other = spawn_family(false);
    attrib_identity_t id;
    attrib_set_worker(&id, f.leader, 4242, NULL, NULL);
    assert_int_equal(id.pgid, f.leader);
    assert_false(id.external);
    attrib_cache_t c;
    attrib_cache_init(&c);
    assert_int_equal(attrib_claim(&id, f.leader, &c), ATTRIB_PROCESS);
    assert_int_equal(attrib_claim(&id, f.member, &c), ATTRIB_GROUP);
    assert_int_equal(attrib_claim(&id, other.leader, &c), ATTRIB_NONE);
    assert_int_equal(attrib_claim(&id, other.member, &c), ATTRIB_NONE);
    assert_int_equal(attrib_claim(&id, getpid(), &c), ATTRIB_NONE);
    assert_int_equal(attrib_claim(&id, 0, &c), ATTRIB_NONE);
    /* an identity that knows nobody claims nobody, not even processes without a group */
    attrib_identity_t none;
    attrib_set_external(&none, 4242);
    assert_int_equal(attrib_claim(&none, f.leader, &c), ATTRIB_NONE);
    assert_int_equal(attrib_claim(&none, f.member, &c), ATTRIB_NONE);
    end_family(&f);
    end_family(&other);
}

static void test_group_lookups_cached_and_bounded(void **state)
{
    (void)state;
    family_t f = spawn_family(false);
    attrib_identity_t id;
    attrib_set_worker(&id, f.leader, 4242, NULL, NULL);
    attrib_cache_t c;
    attrib_cache_init(&c);
    assert_int_equal(attrib_claim(&id, f.member, &c), ATTRIB_GROUP);
    size_t cached = c.n;
    assert_int_equal(cached, 1);
    assert_int_equal(attrib_claim(&id, f.member, &c), ATTRIB_GROUP);
    assert_int_equal(c.n, cached); /* asked again: answered from the cache */
    /* the own pid is matched without a lookup */
    assert_int_equal(attrib_claim(&id, f.leader, &c), ATTRIB_PROCESS);
    assert_int_equal(c.n, cached);
    pid_t member = f.member;
    end_family(&f);
    /* one snapshot's cache keeps what it read; a new one reads /proc again */
    assert_int_equal(attrib_claim(&id, member, &c), ATTRIB_GROUP);
    attrib_cache_t fresh;
    attrib_cache_init(&fresh);
    assert_int_equal(attrib_claim(&id, member, &fresh), ATTRIB_NONE);
    /* bounded: more pids than it holds are still answered, the rest uncached */
    for (pid_t p = 1; p <= ATTRIB_CACHE + 10; p++)
        (void)attrib_claim(&id, 4000000 + p, &fresh);
    assert_int_equal(fresh.n, ATTRIB_CACHE);
}

/* The claims the scheduler compares: the listener itself beats a group membership. */
static void test_process_claim_beats_group_claim(void **state)
{
    (void)state;
    family_t f = spawn_family(true);
    attrib_identity_t worker, ext;
    attrib_set_worker(&worker, f.leader, 4242, NULL, NULL);
    attrib_set_external(&ext, f.port);
    assert_true(attrib_refresh(&ext));
    attrib_cache_t c;
    attrib_cache_init(&c);
    enum attrib_claim by_worker = attrib_claim(&worker, f.member, &c);
    enum attrib_claim by_ext = attrib_claim(&ext, f.member, &c);
    assert_int_equal(by_worker, ATTRIB_GROUP);
    assert_int_equal(by_ext, ATTRIB_PROCESS);
    assert_true(by_ext > by_worker);
    end_family(&f);
}

/* ---- an external server's identity ------------------------------------------------------- */

static void test_external_refresh_follows_the_listener(void **state)
{
    (void)state;
    family_t f = spawn_family(true);
    attrib_identity_t id;
    attrib_set_external(&id, f.port);
    assert_true(id.external);
    assert_int_equal(id.external_pid, 0);
    assert_true(attrib_refresh(&id));
    assert_int_equal(id.external_pid, f.member);
    assert_int_equal(id.pgid, f.leader);
    assert_false(attrib_refresh(&id)); /* its listener lives: nothing changes */
    attrib_cache_t c;
    attrib_cache_init(&c);
    assert_int_equal(attrib_claim(&id, f.member, &c), ATTRIB_PROCESS);
    assert_int_equal(attrib_claim(&id, f.leader, &c), ATTRIB_GROUP);
    end_family(&f);
    /* the listener went away and nobody took the port */
    assert_true(attrib_refresh(&id));
    assert_int_equal(id.external_pid, 0);
    assert_int_equal(id.pgid, 0);
    assert_false(attrib_refresh(&id));
    /* a worker's identity never changes by a refresh */
    attrib_identity_t w;
    attrib_set_worker(&w, getpid(), f.port, NULL, NULL);
    assert_false(attrib_refresh(&w));
    assert_int_equal(w.pid, getpid());
}

/* ---- ports ------------------------------------------------------------------------------- */

static void test_listener_of_a_port(void **state)
{
    (void)state;
    family_t f = spawn_family(true);
    attrib_identity_t id;
    attrib_set_external(&id, f.port);
    assert_int_equal(attrib_listener(&id), f.member); /* not known yet: found on the port */
    id.external_pid = f.leader; /* a known listener is taken as it is, without a scan */
    assert_int_equal(attrib_listener(&id), f.leader);
    attrib_identity_t nobody;
    attrib_set_external(&nobody, free_port());
    assert_int_equal(attrib_listener(&nobody), 0);
    end_family(&f);
}

static void test_port_is_the_workers(void **state)
{
    (void)state;
    family_t f = spawn_family(true);
    family_t other = spawn_family(false);
    attrib_identity_t id;
    /* held by a member of the worker's group (not the leader itself: found by the scan) */
    attrib_set_worker(&id, f.leader, f.port, NULL, NULL);
    assert_true(attrib_port_is_workers(&id));
    /* another worker's group: the port is not its */
    attrib_set_worker(&id, other.leader, f.port, NULL, NULL);
    assert_false(attrib_port_is_workers(&id));
    /* a port thief: this process listens where a worker was to be */
    int thief_port = 0;
    int fd = listen_any(&thief_port);
    assert_true(fd >= 0);
    attrib_set_worker(&id, other.leader, thief_port, NULL, NULL);
    assert_false(attrib_port_is_workers(&id));
    attrib_set_worker(&id, getpgrp(), thief_port, NULL, NULL); /* this process's own group: its */
    assert_true(attrib_port_is_workers(&id));
    close(fd);
    /* nothing listening: /proc cannot tell, taken as the worker's */
    attrib_set_worker(&id, other.leader, free_port(), NULL, NULL);
    assert_true(attrib_port_is_workers(&id));
    /* an external server, or a worker not spawned yet: nothing to compare with */
    attrib_set_external(&id, f.port);
    assert_true(attrib_port_is_workers(&id));
    attrib_set_worker(&id, 0, f.port, NULL, NULL);
    assert_true(attrib_port_is_workers(&id));
    end_family(&f);
    end_family(&other);
}

/* ---- an instance's GPU processes from an NVML list ---------------------------------------- */

typedef struct mine_ctx {
    const attrib_identity_t *id;
    attrib_cache_t cache;
    unsigned asked;
} mine_ctx_t;

static bool mine(void *ctx, pid_t pid)
{
    mine_ctx_t *m = ctx;
    m->asked++;
    return attrib_claim(m->id, pid, &m->cache) != ATTRIB_NONE;
}

static void add_proc(gpu_device_t *dev, pid_t pid, uint64_t used)
{
    dev->procs[dev->n_procs].pid = pid;
    dev->procs[dev->n_procs].used = used;
    dev->n_procs++;
}

static void test_gpu_pids_of_an_instance(void **state)
{
    (void)state;
    family_t f = spawn_family(false);
    family_t other = spawn_family(false);
    gpu_snapshot_t *snap = calloc(1, sizeof *snap);
    assert_non_null(snap);
    snap->ok = true;
    snap->n_devices = 2;
    add_proc(&snap->devices[0], f.leader, 100);
    add_proc(&snap->devices[0], other.leader, 100); /* another instance's */
    add_proc(&snap->devices[0], f.member, 0);       /* in the group, holding nothing */
    add_proc(&snap->devices[1], f.leader, 50);      /* the same process on a second GPU */
    add_proc(&snap->devices[1], f.member, 10);
    attrib_identity_t id;
    attrib_set_worker(&id, f.leader, 4242, NULL, NULL);
    mine_ctx_t ctx = {.id = &id};
    attrib_cache_init(&ctx.cache);
    pid_t out[4] = {0};
    assert_int_equal(attrib_gpu_pids(snap, mine, &ctx, out, 4), 2);
    assert_int_equal(out[0], f.leader);
    assert_int_equal(out[1], f.member);
    assert_int_equal(out[2], 0);
    assert_int_equal(ctx.asked, 4); /* the process holding nothing is not asked about */
    /* bounded: a short out gets what fits, the count says how many there are */
    pid_t one[2] = {0, -7};
    assert_int_equal(attrib_gpu_pids(snap, mine, &ctx, one, 1), 2);
    assert_int_equal(one[0], f.leader);
    assert_int_equal(one[1], -7);
    free(snap);
    end_family(&f);
    end_family(&other);
}

int main(void)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_worker_claims_itself_and_its_group, end_families),
        cmocka_unit_test_teardown(test_group_lookups_cached_and_bounded, end_families),
        cmocka_unit_test_teardown(test_process_claim_beats_group_claim, end_families),
        cmocka_unit_test_teardown(test_external_refresh_follows_the_listener, end_families),
        cmocka_unit_test_teardown(test_listener_of_a_port, end_families),
        cmocka_unit_test_teardown(test_port_is_the_workers, end_families),
        cmocka_unit_test_teardown(test_gpu_pids_of_an_instance, end_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
