/*
 * test_process_child: what a child of src/proc/process.c starts with and what it leaves
 * behind (process_child.c, pidfile.c): exec and chdir failures reported by process_spawn,
 * the environment and cwd, inherited fds, PR_SET_PDEATHSIG, pid files and
 * process_kill_stale, with real children (/bin/sh, sleep). Spawning, output, stopping and
 * reaping are in test_process.c.
 *
 * Each test runs its own uv_loop_t and ends with uv_loop_close() == 0, which fails if the
 * module left a handle (the SIGCHLD watcher, a pipe, a timer) behind. Waiting is always
 * "poll a condition with a generous deadline", never a fixed sleep.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "proc/process.h"
#include "process_test_util.h"

/* ---- tests ------------------------------------------------------------------------------ */

static void test_exec_failures_reported(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    int fds_before = count_fds();
    char err[256];
    process_t *p = (process_t *)1;
    exit_rec_t rec = {0};

    char *a1[] = {"/nonexistent/vramd-no-such-binary", NULL};
    process_spec_t s1 = {.argv = a1};
    assert_int_equal(process_spawn(loop, &s1, on_exit_rec, &rec, &p, err, sizeof err), -1);
    assert_null(p);
    assert_non_null(strstr(err, "exec failed: No such file or directory"));

    char *a2[] = {"vramd-no-such-binary-in-path", NULL};
    process_spec_t s2 = {.argv = a2};
    assert_int_equal(process_spawn(loop, &s2, on_exit_rec, &rec, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "exec failed: No such file or directory"));

    char *a3[] = {"true", NULL};
    process_spec_t s3 = {.argv = a3, .cwd = "/nonexistent-dir-for-vramd-test"};
    assert_int_equal(process_spawn(loop, &s3, on_exit_rec, &rec, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "chdir failed"));

    char noexec[] = "/tmp/test_process_noexec_XXXXXX"; /* exists, not executable */
    int fd = mkstemp(noexec);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "#!/bin/sh\n", 10), 10);
    close(fd);
    assert_int_equal(chmod(noexec, 0644), 0);
    char *a4[] = {noexec, NULL};
    process_spec_t s4 = {.argv = a4};
    assert_int_equal(process_spawn(loop, &s4, on_exit_rec, &rec, &p, err, sizeof err), -1);
    unlink(noexec);
    assert_non_null(strstr(err, "exec failed: Permission denied"));

    char *a5[] = {NULL};
    process_spec_t s5 = {.argv = a5};
    assert_int_equal(process_spawn(loop, &s5, on_exit_rec, &rec, &p, err, sizeof err), -1);

    assert_false(rec.done);
    assert_int_equal(process_count(), 0);
    assert_int_equal(count_zombie_children(), 0);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_false(rec.done);
    assert_int_equal(count_fds(), fds_before);
    end_loop(loop);
}

static void test_env_and_cwd_applied(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    log_capture_t lc;
    log_capture_start(&lc);
    char tmpl[] = "/tmp/test_process_cwd_XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char real[PATH_MAX];
    assert_non_null(realpath(tmpl, real));
    setenv("VRAMD_TEST_INHERITED", "inherited-value", 1);
    setenv("VRAMD_TEST_OVERRIDDEN", "old", 1);
    config_kv_t env[] = {{"FOO", "bar baz"}, {"VRAMD_TEST_OVERRIDDEN", "new"}};
    char *argv[] = {"sh", "-c",
                    "echo \"$FOO\"; pwd; echo \"$VRAMD_TEST_INHERITED\"; echo \"$VRAMD_TEST_OVERRIDDEN\";"
                    "env | grep -c '^VRAMD_TEST_OVERRIDDEN='",
                    NULL};
    exit_rec_t *rec = calloc(1, sizeof *rec);
    process_spec_t spec = {.argv = argv, .env = env, .n_env = 2, .cwd = tmpl, .capture_stdout = 1,
                           .log_name = "envtest"};
    spawn_or_fail(loop, &spec, rec);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_true(rec->done);
    assert_int_equal(rec->status, 0);
    char expect[PATH_MAX + 128];
    snprintf(expect, sizeof expect, "bar baz\n%s\ninherited-value\nnew\n1\n", real);
    assert_int_equal(rec->out_len, strlen(expect));
    assert_memory_equal(rec->out, expect, rec->out_len);
    assert_int_equal(rec->truncated, 0);
    char *log = log_capture_end(&lc);
    assert_null(strstr(log, "bar baz")); /* captured stdout is not logged */
    free(log);
    unsetenv("VRAMD_TEST_INHERITED");
    unsetenv("VRAMD_TEST_OVERRIDDEN");
    rmdir(tmpl);
    free(rec);
    end_loop(loop);
}

/* A null env value removes an inherited variable; systemd's NOTIFY_SOCKET, WATCHDOG_ and LISTEN_
 * are never inherited (they belong to vramd). */
static void test_env_unset_and_private(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    setenv("VRAMD_TEST_REMOVED", "should-not-see", 1);
    setenv("NOTIFY_SOCKET", "/run/systemd/notify", 1);
    setenv("LISTEN_FDS", "1", 1);
    config_kv_t env[] = {{"VRAMD_TEST_REMOVED", NULL}, {"KEPT", "k"}};
    char *argv[] = {"sh", "-c", "echo \"${VRAMD_TEST_REMOVED-unset}|${NOTIFY_SOCKET-unset}|${LISTEN_FDS-unset}|$KEPT\"",
                    NULL};
    exit_rec_t *rec = calloc(1, sizeof *rec);
    process_spec_t spec = {.argv = argv, .env = env, .n_env = 2, .capture_stdout = 1, .log_name = "envunset"};
    spawn_or_fail(loop, &spec, rec);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_true(rec->done);
    assert_int_equal(rec->status, 0);
    static const char expect[] = "unset|unset|unset|k\n";
    assert_int_equal(rec->out_len, sizeof expect - 1);
    assert_memory_equal(rec->out, expect, rec->out_len);
    unsetenv("VRAMD_TEST_REMOVED");
    unsetenv("NOTIFY_SOCKET");
    unsetenv("LISTEN_FDS");
    free(rec);
    end_loop(loop);
}

static void test_pidfile_written_and_removed(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    char dir[] = "/tmp/test_process_pid_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/worker.pid", dir);
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"sleep", "100", NULL};
    process_spec_t spec = {.argv = argv, .pidfile = path};
    process_t *p = spawn_or_fail(loop, &spec, rec);
    char *content = read_whole(path, NULL);
    int pid = 0, pgid = 0, owner = 0;
    unsigned long long start = 0;
    char nl = 0;
    assert_int_equal(sscanf(content, "%d %d %llu %d%c", &pid, &pgid, &start, &owner, &nl), 5);
    assert_int_equal(nl, '\n');
    assert_int_equal(owner, getpid()); /* the owner field: the vramd that started it */
    assert_int_equal(pid, process_pid(p));
    assert_int_equal(pgid, process_pid(p));
    proc_stat_t st;
    assert_true(read_proc_stat(pid, &st));
    assert_true(start == st.starttime);
    free(content);
    process_stop(p, 30000);
    assert_true(run_until(loop, &rec->done, DEADLINE_MS));
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(rmdir(dir), 0); /* no leftover temp file either */
    free(rec);
    end_loop(loop);
}

static void write_text(const char *path, const char *fmt, ...)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static pid_t fork_pauser(pid_t join_group)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, join_group);
        for (;;)
            pause();
    }
    setpgid(pid, join_group ? join_group : pid); /* both sides: no race */
    return pid;
}

static void test_kill_stale(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_process_stale_XXXXXX";
    assert_non_null(mkdtemp(dir));

    /* A leftover worker group: leader + a second member. */
    pid_t leader = fork_pauser(0);
    pid_t member = fork_pauser(leader);
    /* A live process whose pid file has another start time: a reused pid, to be spared. */
    pid_t bystander = fork_pauser(0);
    proc_stat_t st;
    int tries = 0;
    while (!(read_proc_stat(member, &st) && st.pgrp == leader) && tries++ < 1000)
        sleep_ms(5);
    assert_int_equal(st.pgrp, leader);
    proc_stat_t ls, bs;
    assert_true(read_proc_stat(leader, &ls));
    assert_true(read_proc_stat(bystander, &bs));

    char path[256];
    snprintf(path, sizeof path, "%s/old-worker.pid", dir);
    write_text(path, "%d %d %llu\n", (int)leader, (int)leader, ls.starttime);
    snprintf(path, sizeof path, "%s/reused.pid", dir);
    write_text(path, "%d %d %llu\n", (int)bystander, (int)bystander, bs.starttime + 1);
    snprintf(path, sizeof path, "%s/garbage.pid", dir);
    write_text(path, "not a pid file\n");
    snprintf(path, sizeof path, "%s/keep.txt", dir); /* not *.pid: untouched */
    write_text(path, "1 1 1\n");

    assert_int_equal(process_kill_stale(dir), 1);

    int status = 0;
    assert_int_equal(waitpid(leader, &status, 0), leader);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(waitpid(member, &status, 0), member);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(waitpid(bystander, &status, WNOHANG), 0); /* still alive */
    kill(bystander, SIGKILL);
    assert_int_equal(waitpid(bystander, &status, 0), bystander);

    /* Every *.pid file is gone, the other file stays. */
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    int left = 0;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.') {
            assert_string_equal(de->d_name, "keep.txt");
            left++;
        }
    closedir(d);
    assert_int_equal(left, 1);
    unlink(path);
    assert_int_equal(rmdir(dir), 0);

    /* A missing directory is created (and is empty). */
    char nested[256];
    snprintf(nested, sizeof nested, "%s/a/b", dir);
    assert_int_equal(process_kill_stale(nested), 0);
    struct stat sb;
    assert_int_equal(stat(nested, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    rmdir(nested);
    snprintf(nested, sizeof nested, "%s/a", dir);
    rmdir(nested);
    rmdir(dir);
}

/* process_kill_owned (the guard's sweep): only the groups whose pid file names the given
 * vramd as owner are killed; another vramd's worker and an old file without an owner
 * field are spared; no file is removed. */
static void test_kill_owned(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_process_owned_XXXXXX";
    assert_non_null(mkdtemp(dir));
    pid_t mine = fork_pauser(0), member = fork_pauser(mine), other = fork_pauser(0), old = fork_pauser(0);
    proc_stat_t st;
    int tries = 0;
    while (!(read_proc_stat(member, &st) && st.pgrp == mine) && tries++ < 1000)
        sleep_ms(5);
    proc_stat_t ms, os, olds;
    assert_true(read_proc_stat(mine, &ms) && read_proc_stat(other, &os) && read_proc_stat(old, &olds));
    char path[256];
    snprintf(path, sizeof path, "%s/a.1.pid", dir);
    write_text(path, "%d %d %llu %d\n", (int)mine, (int)mine, ms.starttime, 4242);
    snprintf(path, sizeof path, "%s/b.1.pid", dir);
    write_text(path, "%d %d %llu %d\n", (int)other, (int)other, os.starttime, 4243);
    snprintf(path, sizeof path, "%s/c.1.pid", dir);
    write_text(path, "%d %d %llu\n", (int)old, (int)old, olds.starttime);

    assert_int_equal(process_kill_owned(dir, 4242), 1);
    int status = 0;
    assert_int_equal(waitpid(mine, &status, 0), mine);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(waitpid(member, &status, 0), member);
    assert_int_equal(waitpid(other, &status, WNOHANG), 0);
    assert_int_equal(waitpid(old, &status, WNOHANG), 0);
    kill(other, SIGKILL);
    kill(old, SIGKILL);
    waitpid(other, &status, 0);
    waitpid(old, &status, 0);
    const char *names[] = {"a.1.pid", "b.1.pid", "c.1.pid"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(access(path, F_OK), 0); /* files stay for the next start */
        unlink(path);
    }
    assert_int_equal(rmdir(dir), 0);
}

/* The child inherits fds 0, 1 and 2 only, even an fd the parent forgot to mark CLOEXEC. */
static void test_child_inherits_only_stdio(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    int leaked = open("/dev/null", O_RDONLY); /* deliberately without O_CLOEXEC */
    assert_true(leaked > 2);
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"sh", "-c", "ls /proc/$$/fd", NULL};
    process_spec_t spec = {.argv = argv, .capture_stdout = 1};
    spawn_or_fail(loop, &spec, rec);
    uv_run(loop, UV_RUN_DEFAULT);
    close(leaked);
    assert_true(rec->done);
    assert_int_equal(rec->status, 0);
    rec->out[rec->out_len] = '\0';
    assert_string_equal(rec->out, "0\n1\n2\n");
    free(rec);
    end_loop(loop);
}

/* The middle process spawns a child through the module and is then SIGKILLed: the child
 * must die of PR_SET_PDEATHSIG. We are a subreaper for the test, so the orphan comes to us. */
static void test_pdeathsig_kills_orphan(void **state)
{
    (void)state;
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int report[2];
    assert_int_equal(pipe(report), 0);
    pid_t middle = fork();
    assert_true(middle >= 0);
    if (middle == 0) {
        close(report[0]);
        uv_loop_t loop;
        uv_loop_init(&loop);
        char *argv[] = {"sleep", "100", NULL};
        process_spec_t spec = {.argv = argv};
        char err[256];
        process_t *p = NULL;
        int pid = -1;
        if (process_spawn(&loop, &spec, NULL, NULL, &p, err, sizeof err) == 0)
            pid = process_pid(p);
        if (write(report[1], &pid, sizeof pid) != sizeof pid)
            _exit(1);
        for (;;)
            pause();
    }
    close(report[1]);
    int child = -1;
    assert_int_equal(read(report[0], &child, sizeof child), sizeof child);
    close(report[0]);
    assert_true(child > 0);
    proc_stat_t st;
    assert_true(read_proc_stat(child, &st));
    assert_int_equal(st.ppid, middle);

    kill(middle, SIGKILL);
    int status = 0;
    assert_int_equal(waitpid(middle, &status, 0), middle);

    /* The orphan is re-parented to us and must die of SIGKILL. */
    uint64_t end = now_ms() + DEADLINE_MS;
    pid_t r = 0;
    while ((r = waitpid(child, &status, WNOHANG)) == 0 && now_ms() < end)
        sleep_ms(5);
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
    if (r == 0)
        kill(child, SIGKILL);
    assert_int_equal(r, child);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exec_failures_reported),
        cmocka_unit_test(test_env_and_cwd_applied),
        cmocka_unit_test(test_env_unset_and_private),
        cmocka_unit_test(test_pidfile_written_and_removed),
        cmocka_unit_test(test_kill_stale),
        cmocka_unit_test(test_kill_owned),
        cmocka_unit_test(test_child_inherits_only_stdio),
        cmocka_unit_test(test_pdeathsig_kills_orphan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
