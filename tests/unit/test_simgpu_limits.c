/*
 * test_simgpu_limits: per-cgroup limits of the simulated GPU (sim/lib/simgpu_limits.c), as
 * NVIDIA's driver r615 has them (nvmlDeviceSetMemoryLimits_v1), on real shared memory and a
 * real cgroup v2 directory.
 *
 * Covers: a limit caps the processes of its cgroup alone (a child that joined it: its
 * allocation past the limit fails with ENOMEM, cuMemGetInfo's view is the limit, the limit's
 * `used` is what it holds, while the parent outside allocates freely); clearing it; the
 * argument errors; a limit whose directory is removed while set is dropped and counted.
 * Skipped where no cgroup2 hierarchy can be written (not root, no cgroup2 mount).
 * Every test uses its own set name and cgroup directory and removes both.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simgpu.h"

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)

static char set_name[64];
static char cg_dir[512];
static int counter;

/* The cgroup2 mount point into out; false when there is none. */
static bool cgroup2_mount(char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        const char *sep = strstr(line, " - ");
        char point[512];
        if (sep && strncmp(sep + 3, "cgroup2 ", 8) == 0 && sscanf(line, "%*s %*s %*s %*s %511s", point) == 1) {
            snprintf(out, cap, "%s", point);
            found = true;
        }
    }
    fclose(f);
    return found;
}

static int setup(void **state)
{
    (void)state;
    counter++;
    snprintf(set_name, sizeof set_name, "utl.%d.%d", (int)getpid(), counter);
    setenv("SIMGPU_TIMESCALE", "1", 1);
    char mount[400];
    cg_dir[0] = '\0';
    if (!cgroup2_mount(mount, sizeof mount))
        return 0;
    snprintf(cg_dir, sizeof cg_dir, "%s/simgpu-ut-%d-%d", mount, (int)getpid(), counter);
    if (mkdir(cg_dir, 0755) != 0)
        cg_dir[0] = '\0';
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    simgpu_remove(set_name, NULL, 0);
    if (cg_dir[0])
        rmdir(cg_dir);
    return 0;
}

static simgpu_t *make_set(uint64_t total)
{
    char err[256];
    assert_int_equal(simgpu_create(set_name, 1, total, "Limit GPU", 0, err, sizeof err), 0);
    simgpu_t *s = simgpu_open(set_name, err, sizeof err);
    assert_non_null(s);
    return s;
}

/* In a child: join dir's cgroup, then run the checks; the exit code says which failed. */
static int child_in_cgroup(const char *dir)
{
    char procs[600];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1)
        return 20;
    close(fd);
    simgpu_t *s = simgpu_open(set_name, NULL, 0);
    if (!s)
        return 21;
    if (simgpu_alloc(s, 0, 512 * MiB) != 0)
        return 10; /* within the limit */
    errno = 0;
    if (simgpu_alloc(s, 0, 600 * MiB) == 0 || errno != ENOMEM)
        return 11; /* past it: refused though the card has room */
    uint64_t free_b = 0, total = 0;
    if (simgpu_mem_view(s, 0, &free_b, &total) != 0 || total != GiB || free_b != 512 * MiB)
        return 12;
    simgpu_limit_t l;
    if (simgpu_limit_get(s, 0, dir, &l) != 0 || l.used != 512 * MiB || l.hard != GiB)
        return 13;
    if (simgpu_alloc(s, 0, 512 * MiB) != 0)
        return 14; /* exactly up to the limit */
    simgpu_close(s);
    return 0;
}

static void test_limit_caps_its_cgroup_alone(void **state)
{
    (void)state;
    if (!cg_dir[0])
        skip();
    simgpu_t *s = make_set(8 * GiB);
    assert_int_equal(simgpu_limit_set(s, 0, cg_dir, 0, GiB), 0);
    /* the parent is not in that cgroup: no limit for it */
    assert_int_equal(simgpu_alloc(s, 0, 4 * GiB), 0);
    uint64_t free_b = 0, total = 0;
    assert_int_equal(simgpu_mem_view(s, 0, &free_b, &total), 0);
    assert_int_equal(total, 8 * GiB);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child_in_cgroup(cg_dir));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* cleared: gone from the list, nothing dropped */
    assert_int_equal(simgpu_limit_set(s, 0, cg_dir, 0, SIMGPU_LIMIT_NONE), 0);
    simgpu_limit_t list[4];
    size_t n = 9;
    assert_int_equal(simgpu_limit_list(s, 0, list, 4, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(simgpu_limits_dropped(s), 0);
    simgpu_close(s);
}

static void test_removed_cgroup_drops_its_limit(void **state)
{
    (void)state;
    if (!cg_dir[0])
        skip();
    simgpu_t *s = make_set(8 * GiB);
    char slashed[600];
    snprintf(slashed, sizeof slashed, "%s/", cg_dir); /* a trailing '/' names the same directory */
    assert_int_equal(simgpu_limit_set(s, 0, slashed, GiB / 2, GiB), 0);
    assert_int_equal(simgpu_limit_set(s, 0, cg_dir, 0, 2 * GiB), 0); /* changed, not added */
    simgpu_limit_t list[4];
    size_t n = 0;
    assert_int_equal(simgpu_limit_list(s, 0, list, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].cgroup, cg_dir);
    assert_int_equal(list[0].hard, 2 * GiB);
    assert_int_equal(list[0].soft, 0);
    assert_int_equal(rmdir(cg_dir), 0);
    assert_int_equal(simgpu_limit_list(s, 0, list, 4, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(simgpu_limits_dropped(s), 1);
    /* removed and made again before anyone looked: another cgroup, the old limit is not its */
    assert_int_equal(simgpu_limit_set(s, 0, cg_dir, 0, GiB), -1); /* gone: ENOENT */
    assert_int_equal(mkdir(cg_dir, 0755), 0);
    assert_int_equal(simgpu_limit_set(s, 0, cg_dir, 0, GiB), 0);
    assert_int_equal(rmdir(cg_dir), 0);
    assert_int_equal(mkdir(cg_dir, 0755), 0);
    assert_int_equal(simgpu_limit_list(s, 0, list, 4, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(simgpu_limits_dropped(s), 2);
    simgpu_close(s);
}

static void test_argument_errors(void **state)
{
    (void)state;
    simgpu_t *s = make_set(8 * GiB);
    errno = 0;
    assert_int_equal(simgpu_limit_set(s, 0, "relative/path", 0, GiB), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(simgpu_limit_set(s, 0, "/nonexistent/cgroup/dir", 0, GiB), -1);
    assert_int_equal(errno, ENOENT);
    errno = 0;
    assert_int_equal(simgpu_limit_set(s, 1, "/", 0, GiB), -1); /* one GPU only */
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(simgpu_limit_set(s, 0, "/", 2 * GiB, GiB), -1); /* soft over hard */
    assert_int_equal(errno, EINVAL);
    char longpath[SIMGPU_CGROUP_MAX + 10];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    errno = 0;
    assert_int_equal(simgpu_limit_set(s, 0, longpath, 0, GiB), -1);
    assert_int_equal(errno, ENAMETOOLONG);
    /* clearing what was never set is a no-op; reading it: ENOENT */
    assert_int_equal(simgpu_limit_set(s, 0, "/nonexistent/cgroup/dir", 0, SIMGPU_LIMIT_NONE), 0);
    simgpu_limit_t l;
    errno = 0;
    assert_int_equal(simgpu_limit_get(s, 0, "/nonexistent/cgroup/dir", &l), -1);
    assert_int_equal(errno, ENOENT);
    simgpu_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_limit_caps_its_cgroup_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_cgroup_drops_its_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_argument_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
