/* Unit tests for gpu/shim_page (a worker's grant page, vramd's side) and the message check of
 * gpu/shim_abi.h: the file made 0600 without following a link, its header, the grant, the
 * figures summed from the slots, a dead slot cleared with its bytes (never below zero),
 * reaping by a predicate, and destroy removing the file. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu/shim_abi.h"
#include "gpu/shim_page.h"

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/vramd-shim-page-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static void test_create_header_and_destroy(void **state)
{
    (void)state;
    char p[300], err[256] = "";
    path_of(p, sizeof p, "a.page");
    shim_page_t *pg = NULL;
    assert_int_equal(shim_page_create(p, 42, 24ULL << 30, &pg, err, sizeof err), 0);
    assert_non_null(pg);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, SHIM_PAGE_SIZE);
    assert_int_equal(pg->magic, SHIM_ABI_MAGIC);
    assert_int_equal(pg->version, SHIM_ABI_VERSION);
    assert_int_equal(pg->epoch, 42);
    assert_int_equal(pg->gpu_total, 24ULL << 30);
    assert_int_equal(atomic_load(&pg->vramd_alive), 1);
    assert_int_equal(shim_page_grant(pg), 0);
    shim_page_set_grant(pg, 5 << 20);
    assert_int_equal(shim_page_grant(pg), 5 << 20);
    assert_int_equal(atomic_load(&pg->grant_changes), 1);
    shim_page_set_grant(pg, 5 << 20); /* the same figure: no change counted */
    assert_int_equal(atomic_load(&pg->grant_changes), 1);
    shim_page_destroy(pg, p);
    assert_int_not_equal(access(p, F_OK), 0);
}

static void test_refuses_a_link_and_replaces_a_stale_page(void **state)
{
    (void)state;
    char p[300], target[300], err[256] = "";
    path_of(p, sizeof p, "link.page");
    path_of(target, sizeof target, "target");
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(symlink(target, p), 0);
    shim_page_t *pg = NULL;
    /* a link at the path is removed (it is not ours to follow) and a fresh file made */
    assert_int_equal(shim_page_create(p, 1, 0, &pg, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(st.st_size, 0); /* the link's target was never written */
    shim_page_destroy(pg, p);
    /* a directory that does not exist: an error, nothing mapped */
    char bad[300];
    path_of(bad, sizeof bad, "no/such/dir.page");
    assert_int_equal(shim_page_create(bad, 1, 0, &pg, err, sizeof err), -1);
    assert_null(pg);
    assert_non_null(strstr(err, "no/such/dir.page"));
}

static void put_slot(shim_page_t *pg, unsigned i, uint32_t pid, uint32_t state, uint64_t live)
{
    atomic_store(&pg->procs[i].pid, pid);
    atomic_store(&pg->procs[i].state, state);
    atomic_store(&pg->procs[i].live, live);
    atomic_store(&pg->procs[i].peak, live * 2);
    atomic_store(&pg->procs[i].allocs, 3);
    atomic_store(&pg->procs[i].asks, 2);
    atomic_store(&pg->procs[i].waits, 1);
    atomic_store(&pg->procs[i].refusals, 1);
    atomic_fetch_add(&pg->live_total, live);
}

static bool odd_pid_gone(pid_t pid, void *ctx)
{
    (*(int *)ctx)++;
    return pid % 2 == 1;
}

static void test_figures_clear_and_reap(void **state)
{
    (void)state;
    char p[300], err[256] = "";
    path_of(p, sizeof p, "b.page");
    shim_page_t *pg = NULL;
    assert_int_equal(shim_page_create(p, 7, 0, &pg, err, sizeof err), 0);
    put_slot(pg, 0, 100, SHIM_PROC_ATTACHED, 1000);
    put_slot(pg, 5, 101, SHIM_PROC_DETACHED, 300);
    put_slot(pg, 63, 103, SHIM_PROC_ATTACHED, 50);
    shim_page_figures_t f;
    shim_page_read(pg, &f);
    assert_int_equal(f.live, 1350);
    assert_int_equal(f.attached, 2);
    assert_int_equal(f.detached, 1);
    assert_int_equal(f.peak, 2000);
    assert_int_equal(f.allocs, 9);
    assert_int_equal(f.refusals, 3);
    assert_int_equal(shim_page_slot_pid(pg, 5), 101);
    assert_int_equal(shim_page_slot_pid(pg, SHIM_PAGE_PROCS), 0); /* out of range */
    /* clear one: its bytes leave the total, the slot is free again */
    assert_int_equal(shim_page_clear_slot(pg, 0), 1000);
    assert_int_equal(shim_page_live(pg), 350);
    assert_int_equal(shim_page_slot_pid(pg, 0), 0);
    assert_int_equal(shim_page_clear_slot(pg, SHIM_PAGE_PROCS + 3), 0);
    /* a slot claiming more than the total: the total stops at zero */
    put_slot(pg, 1, 200, SHIM_PROC_ATTACHED, 10);
    atomic_store(&pg->live_total, 5);
    assert_int_equal(shim_page_clear_slot(pg, 1), 10);
    assert_int_equal(shim_page_live(pg), 0);
    /* reap: odd pids are gone (101, 103), asked once per used slot */
    atomic_store(&pg->live_total, 350);
    int asked = 0;
    uint64_t freed = 0;
    assert_int_equal(shim_page_reap(pg, odd_pid_gone, &asked, &freed), 2);
    assert_int_equal(asked, 2);
    assert_int_equal(freed, 350);
    assert_int_equal(shim_page_live(pg), 0);
    shim_page_charge(pg, 64);
    assert_int_equal(shim_page_live(pg), 64);
    shim_page_orphan(pg);
    assert_int_equal(atomic_load(&pg->vramd_alive), 0);
    shim_page_destroy(pg, p);
    shim_page_destroy(NULL, NULL); /* harmless */
}

static void test_message_check(void **state)
{
    (void)state;
    shim_msg_t m;
    shim_msg_init(&m, SHIM_MSG_ASK);
    assert_int_equal(shim_msg_valid(&m), 0);
    shim_msg_t bad = m;
    bad.magic ^= 1;
    assert_int_equal(shim_msg_valid(&bad), -1);
    bad = m;
    bad.version = SHIM_ABI_VERSION + 1;
    assert_int_equal(shim_msg_valid(&bad), -1);
    bad.version = SHIM_ABI_VERSION - 1; /* a shim of the version before (no control messages) */
    assert_int_equal(shim_msg_valid(&bad), -1);
    bad = m;
    bad.type = 0;
    assert_int_equal(shim_msg_valid(&bad), -1);
    bad.type = SHIM_MSG_TYPE_MAX + 1;
    assert_int_equal(shim_msg_valid(&bad), -1);
    bad = m;
    bad.flags = 1;
    assert_int_equal(shim_msg_valid(&bad), -1);
    bad = m;
    bad.reserved[1] = 9;
    assert_int_equal(shim_msg_valid(&bad), -1);
}

/* A socket path longer than sun_path (a deep state_dir) is bound and reached through
 * /proc/self/fd/N/NAME of its directory; a short one is itself. */
static void test_socket_address_long_path(void **state)
{
    (void)state;
    struct sockaddr_un sa;
    int dirfd = -2;
    assert_int_equal(shim_socket_address("/tmp/x.sock", &sa, &dirfd), 0);
    assert_string_equal(sa.sun_path, "/tmp/x.sock");
    assert_int_equal(dirfd, -1);

    char dir[400];
    snprintf(dir, sizeof dir, "/tmp/shim-ut-%d-", (int)getpid());
    size_t n = strlen(dir);
    memset(dir + n, 'd', 150);
    dir[n + 150] = '\0';
    assert_int_equal(mkdir(dir, 0700), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/grant.sock", dir);
    assert_true(strlen(path) >= sizeof sa.sun_path);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(shim_socket_address(path, &sa, &dirfd), 0);
    assert_true(dirfd >= 0);
    assert_int_equal(strncmp(sa.sun_path, "/proc/self/fd/", 14), 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(dirfd);
    assert_int_equal(listen(lfd, 1), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0); /* the socket file is where the long path says */
    assert_true(S_ISSOCK(st.st_mode));
    int cfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(shim_socket_address(path, &sa, &dirfd), 0);
    assert_int_equal(connect(cfd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(dirfd);
    close(cfd);
    close(lfd);
    unlink(path);
    rmdir(dir);

    char huge[5000]; /* longer than any directory path it copies: refused */
    memset(huge, 'a', sizeof huge - 1);
    huge[0] = '/';
    huge[sizeof huge - 1] = '\0';
    errno = 0;
    assert_int_equal(shim_socket_address(huge, &sa, &dirfd), -1);
    assert_int_equal(errno, ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_header_and_destroy),
        cmocka_unit_test(test_refuses_a_link_and_replaces_a_stale_page),
        cmocka_unit_test(test_figures_clear_and_reap),
        cmocka_unit_test(test_message_check),
        cmocka_unit_test(test_socket_address_long_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
