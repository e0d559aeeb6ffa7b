/*
 * test_process: spawning, output logging, stopping, reaping and pid files of
 * src/workers/process.c, with real children (/bin/sh, sleep, cat, echo).
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
#include "workers/process.h"

#define DEADLINE_MS 20000

typedef struct exit_rec {
    bool done;
    int status;
    int sig;
    pid_t pid;
    char out[70 * 1024];
    size_t out_len;
    int truncated;
} exit_rec_t;

static void on_exit_rec(process_t *p, int status, int sig, void *ctx)
{
    exit_rec_t *r = ctx;
    assert_false(r->done); /* exactly once */
    r->done = true;
    r->status = status;
    r->sig = sig;
    r->pid = process_pid(p);
    size_t len = 0;
    const char *out = process_stdout(p, &len);
    assert_true(len <= sizeof r->out);
    memcpy(r->out, out, len);
    r->out_len = len;
    r->truncated = process_stdout_truncated(p);
}

/* ---- helpers ---------------------------------------------------------------------------- */

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void on_guard(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until *flag or the deadline; the guard timer makes UV_RUN_ONCE return. */
static bool run_until(uv_loop_t *loop, const bool *flag, uint64_t timeout_ms)
{
    uv_timer_t guard;
    uv_timer_init(loop, &guard);
    uv_timer_start(&guard, on_guard, 10, 10);
    uint64_t end = now_ms() + timeout_ms;
    while (!*flag && now_ms() < end)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return *flag;
}

/* Poll the loop (so reaping happens) while waiting for a condition outside it. */
typedef bool (*cond_fn)(void *arg);
static bool poll_until(uv_loop_t *loop, cond_fn cond, void *arg, uint64_t timeout_ms)
{
    uint64_t end = now_ms() + timeout_ms;
    while (now_ms() < end) {
        if (cond(arg))
            return true;
        if (loop)
            uv_run(loop, UV_RUN_NOWAIT);
        sleep_ms(5);
    }
    return cond(arg);
}

static uv_loop_t *new_loop(void)
{
    uv_loop_t *loop = malloc(sizeof *loop);
    assert_non_null(loop);
    assert_int_equal(uv_loop_init(loop), 0);
    return loop;
}

static void end_loop(uv_loop_t *loop)
{
    assert_int_equal(process_count(), 0);
    uv_run(loop, UV_RUN_DEFAULT); /* pending closes (the SIGCHLD watcher) */
    assert_int_equal(uv_loop_close(loop), 0);
    free(loop);
}

static process_t *spawn_or_fail(uv_loop_t *loop, const process_spec_t *spec, exit_rec_t *rec)
{
    char err[256] = "";
    process_t *p = NULL;
    int rc = process_spawn(loop, spec, on_exit_rec, rec, &p, err, sizeof err);
    if (rc != 0)
        fail_msg("process_spawn: %s", err);
    assert_non_null(p);
    return p;
}

static char *read_whole(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 20, len = 0;
    char *data = malloc(cap + 1);
    assert_non_null(data);
    size_t n;
    while ((n = fread(data + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            cap *= 2;
            data = realloc(data, cap + 1);
            assert_non_null(data);
        }
    }
    fclose(f);
    data[len] = '\0';
    if (len_out)
        *len_out = len;
    return data;
}

static int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Log capture into a temporary file. */
typedef struct log_capture {
    char path[64];
    int fd;
} log_capture_t;

static void log_capture_start(log_capture_t *lc)
{
    strcpy(lc->path, "/tmp/test_process_log_XXXXXX");
    lc->fd = mkstemp(lc->path);
    assert_true(lc->fd >= 0);
    log_configure(LOG_FORMAT_JSON, LOG_INFO, lc->fd);
}

static char *log_capture_end(log_capture_t *lc)
{
    log_configure(LOG_FORMAT_JSON, LOG_INFO, 2);
    close(lc->fd);
    char *s = read_whole(lc->path, NULL);
    unlink(lc->path);
    return s;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the DIR's own fd */
}

typedef struct proc_stat {
    char state;
    int ppid;
    int pgrp;
    unsigned long long starttime;
} proc_stat_t;

static bool read_proc_stat(int pid, proc_stat_t *st)
{
    char path[64], data[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *file = fopen(path, "r");
    if (!file)
        return false;
    size_t n = fread(data, 1, sizeof data - 1, file);
    fclose(file);
    data[n] = '\0';
    char *p = strrchr(data, ')');
    if (!p)
        return false;
    /* fields 3.. after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime */
    unsigned long long f[20];
    char state;
    int got = sscanf(p + 2,
                     "%c %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
                     "%llu %llu %llu %llu %llu %llu",
                     &state, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8],
                     &f[9], &f[10], &f[11], &f[12], &f[13], &f[14], &f[15], &f[16], &f[17],
                     &f[18]);
    if (got < 20)
        return false;
    st->state = state;
    st->ppid = (int)f[0];
    st->pgrp = (int)f[1];
    st->starttime = f[18];
    return true;
}

/* Dead: no such process, or a zombie nobody has reaped yet. */
static bool pid_is_dead(void *arg)
{
    int pid = *(int *)arg;
    proc_stat_t st;
    return !read_proc_stat(pid, &st) || st.state == 'Z' || st.state == 'X';
}

static int count_zombie_children(void)
{
    DIR *d = opendir("/proc");
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int pid = atoi(de->d_name);
        proc_stat_t st;
        if (pid > 0 && read_proc_stat(pid, &st) && st.ppid == getpid() && st.state == 'Z')
            n++;
    }
    closedir(d);
    return n;
}

static bool sigterm_ignored(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    unsigned long long mask = 0;
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "SigIgn: %llx", &mask) == 1) {
            found = true;
            break;
        }
    fclose(f);
    return found && (mask & (1ULL << (SIGTERM - 1)));
}

typedef struct group_probe {
    int pgid;
    int leader;
    int found; /* out: a member other than the leader that ignores SIGTERM */
} group_probe_t;

static bool group_member_ignoring_term(void *arg)
{
    group_probe_t *g = arg;
    DIR *d = opendir("/proc");
    assert_non_null(d);
    struct dirent *de;
    g->found = 0;
    while ((de = readdir(d)) != NULL) {
        int pid = atoi(de->d_name);
        proc_stat_t st;
        if (pid > 0 && pid != g->leader && read_proc_stat(pid, &st) && st.pgrp == g->pgid &&
            st.state != 'Z' && sigterm_ignored(pid)) {
            g->found = pid;
            break;
        }
    }
    closedir(d);
    return g->found != 0;
}

static bool leader_ignores_term(void *arg)
{
    return sigterm_ignored(*(int *)arg);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_echo_exits_zero(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    log_capture_t lc;
    log_capture_start(&lc);
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"/bin/echo", "hello world", NULL};
    process_spec_t spec = {.argv = argv, .log_name = "echo-model"};
    process_t *p = spawn_or_fail(loop, &spec, rec);
    pid_t pid = process_pid(p);
    assert_true(pid > 0);
    assert_int_equal(process_count(), 1);
    /* Plain uv_run: the module must keep the loop alive until the exit callback. */
    uv_run(loop, UV_RUN_DEFAULT);
    assert_true(rec->done);
    assert_int_equal(rec->status, 0);
    assert_int_equal(rec->sig, 0);
    assert_int_equal(rec->pid, pid);
    assert_int_equal(process_count(), 0);
    char *log = log_capture_end(&lc);
    char expect[128];
    snprintf(expect, sizeof expect, "\"model\":\"echo-model\",\"pid\":%d,\"stream\":\"stdout\",", (int)pid);
    assert_non_null(strstr(log, "\"event\":\"worker_output\""));
    assert_non_null(strstr(log, expect));
    assert_non_null(strstr(log, "\"line\":\"hello world\"}"));
    free(log);
    free(rec);
    end_loop(loop);
}

static void test_output_lines_logged(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    log_capture_t lc;
    log_capture_start(&lc);
    exit_rec_t *rec = calloc(3, sizeof *rec);
    /* stdout and stderr, CRLF, and a last line without newline (flushed at EOF). */
    char *a1[] = {"sh", "-c", "echo out1; echo err1 >&2; printf 'crlf\\r\\n'; printf no-newline", NULL};
    /* 20000 bytes without newline: split into 8192 + 8192 + 3616. */
    char *a2[] = {"sh", "-c", "head -c 20000 /dev/zero | tr '\\000' a; echo", NULL};
    /* exactly 8192 then newline: one line, no spurious empty line. */
    char *a3[] = {"sh", "-c", "head -c 8192 /dev/zero | tr '\\000' b; echo; echo next", NULL};
    process_spec_t s1 = {.argv = a1, .log_name = "lines"};
    process_spec_t s2 = {.argv = a2, .log_name = "long"};
    process_spec_t s3 = {.argv = a3, .log_name = "exact"};
    spawn_or_fail(loop, &s1, &rec[0]);
    spawn_or_fail(loop, &s2, &rec[1]);
    spawn_or_fail(loop, &s3, &rec[2]);
    uv_run(loop, UV_RUN_DEFAULT);
    for (int i = 0; i < 3; i++) {
        assert_true(rec[i].done);
        assert_int_equal(rec[i].status, 0);
    }
    char *log = log_capture_end(&lc);
    assert_non_null(strstr(log, "\"stream\":\"stdout\",\"line\":\"out1\"}"));
    assert_non_null(strstr(log, "\"stream\":\"stderr\",\"line\":\"err1\"}"));
    assert_non_null(strstr(log, "\"stream\":\"stdout\",\"line\":\"crlf\"}"));
    assert_non_null(strstr(log, "\"stream\":\"stdout\",\"line\":\"no-newline\"}"));

    char *want = malloc(8192 + 64);
    assert_int_equal(count_substr(log, "\"model\":\"long\""), 3);
    strcpy(want, "\"line\":\"");
    memset(want + 8, 'a', 8192);
    strcpy(want + 8 + 8192, "\"}");
    assert_int_equal(count_substr(log, want), 2);
    strcpy(want + 8 + 3616, "\"}");
    assert_int_equal(count_substr(log, want), 1);

    assert_int_equal(count_substr(log, "\"model\":\"exact\""), 2);
    memset(want + 8, 'b', 8192);
    strcpy(want + 8 + 8192, "\"}");
    assert_int_equal(count_substr(log, want), 1);
    assert_non_null(strstr(log, "\"line\":\"next\"}"));
    free(want);
    free(log);
    free(rec);
    end_loop(loop);
}

static void test_exit_codes(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(3, sizeof *rec);
    char *a0[] = {"sh", "-c", "exit 3", NULL};
    char *a1[] = {"false", NULL};
    char *a2[] = {"sh", "-c", "exit 255", NULL};
    process_spec_t s0 = {.argv = a0}, s1 = {.argv = a1}, s2 = {.argv = a2};
    spawn_or_fail(loop, &s0, &rec[0]);
    spawn_or_fail(loop, &s1, &rec[1]);
    spawn_or_fail(loop, &s2, &rec[2]);
    assert_int_equal(process_count(), 3);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_true(rec[0].done && rec[1].done && rec[2].done);
    assert_int_equal(rec[0].status, 3);
    assert_int_equal(rec[1].status, 1);
    assert_int_equal(rec[2].status, 255);
    assert_int_equal(rec[0].sig + rec[1].sig + rec[2].sig, 0);
    free(rec);
    end_loop(loop);
}

static void test_stop_sends_sigterm(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"sleep", "100", NULL};
    process_spec_t spec = {.argv = argv};
    process_t *p = spawn_or_fail(loop, &spec, rec);
    assert_int_equal(process_count(), 1);
    process_stop(p, 30000);
    assert_true(run_until(loop, &rec->done, DEADLINE_MS));
    assert_int_equal(rec->sig, SIGTERM);
    free(rec);
    end_loop(loop);
}

static void test_signal_reaches_group(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"sleep", "100", NULL};
    process_spec_t spec = {.argv = argv};
    process_t *p = spawn_or_fail(loop, &spec, rec);
    /* The child is its own group leader. */
    proc_stat_t st;
    assert_true(read_proc_stat(process_pid(p), &st));
    assert_int_equal(st.pgrp, process_pid(p));
    process_signal(p, SIGINT);
    assert_true(run_until(loop, &rec->done, DEADLINE_MS));
    assert_int_equal(rec->sig, SIGINT);
    free(rec);
    end_loop(loop);
}

static void test_stop_escalates_to_sigkill(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"sh", "-c", "trap '' TERM; sleep 100", NULL};
    process_spec_t spec = {.argv = argv};
    process_t *p = spawn_or_fail(loop, &spec, rec);
    int pid = process_pid(p);
    assert_true(poll_until(loop, leader_ignores_term, &pid, DEADLINE_MS));
    process_stop(p, 300);
    assert_true(run_until(loop, &rec->done, DEADLINE_MS));
    assert_int_equal(rec->sig, SIGKILL);
    free(rec);
    end_loop(loop);
}

static void test_grandchild_dies_with_group(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(1, sizeof *rec);
    /* The leader dies of SIGTERM; the grandchild ignores it and must get the group SIGKILL. */
    char *argv[] = {"sh", "-c", "(trap '' TERM; exec sleep 100) & wait", NULL};
    process_spec_t spec = {.argv = argv};
    process_t *p = spawn_or_fail(loop, &spec, rec);
    group_probe_t g = {.pgid = process_pid(p), .leader = process_pid(p)};
    assert_true(poll_until(loop, group_member_ignoring_term, &g, DEADLINE_MS));
    int grandchild = g.found;
    process_stop(p, 60000); /* long: the kill must come from the reap, not the timer */
    assert_true(run_until(loop, &rec->done, DEADLINE_MS));
    assert_int_equal(rec->sig, SIGTERM);
    assert_true(poll_until(NULL, pid_is_dead, &grandchild, DEADLINE_MS));
    free(rec);
    end_loop(loop);
}

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

static void test_stdin_data(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(3, sizeof *rec);

    const char small[] = "hello stdin\nsecond line without newline";
    char *cat[] = {"cat", NULL};
    process_spec_t s0 = {.argv = cat, .stdin_data = small, .stdin_len = strlen(small),
                         .capture_stdout = 1};
    spawn_or_fail(loop, &s0, &rec[0]);

    /* 200 KiB through cat: more than a pipe buffer each way, and more than the 64 KiB cap. */
    size_t big_len = 200 * 1024;
    char *big = malloc(big_len);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (char)('a' + i % 26);
    process_spec_t s1 = {.argv = cat, .stdin_data = big, .stdin_len = big_len, .capture_stdout = 1};
    spawn_or_fail(loop, &s1, &rec[1]);

    /* A validator that exits without reading: EPIPE is ignored, no SIGPIPE kills us. */
    char *quit[] = {"sh", "-c", "exit 0", NULL};
    size_t huge_len = 1024 * 1024;
    char *huge = calloc(1, huge_len);
    process_spec_t s2 = {.argv = quit, .stdin_data = huge, .stdin_len = huge_len};
    spawn_or_fail(loop, &s2, &rec[2]);
    free(huge); /* the module keeps its own copy */

    uv_run(loop, UV_RUN_DEFAULT);
    for (int i = 0; i < 3; i++) {
        assert_true(rec[i].done);
        assert_int_equal(rec[i].status, 0);
    }
    assert_int_equal(rec[0].out_len, strlen(small));
    assert_memory_equal(rec[0].out, small, strlen(small));
    assert_int_equal(rec[0].truncated, 0);
    assert_int_equal(rec[1].out_len, 64 * 1024);
    assert_memory_equal(rec[1].out, big, 64 * 1024);
    assert_int_equal(rec[1].truncated, 1);
    free(big);
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
    int pid = 0, pgid = 0;
    unsigned long long start = 0;
    char nl = 0;
    assert_int_equal(sscanf(content, "%d %d %llu%c", &pid, &pgid, &start, &nl), 4);
    assert_int_equal(nl, '\n');
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

typedef struct batch {
    exit_rec_t rec[8];
} batch_t;

static void test_many_cycles_no_leaks(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    batch_t *b = calloc(1, sizeof *b);
    char *t_argv[] = {"true", NULL};
    char *c_argv[] = {"cat", NULL};

    /* Warm-up: the loop opens its signal pipe at the first uv_signal_start. */
    process_spec_t warm = {.argv = t_argv};
    spawn_or_fail(loop, &warm, &b->rec[0]);
    assert_true(run_until(loop, &b->rec[0].done, DEADLINE_MS));
    int fds_before = count_fds();

    int spawned = 0;
    while (spawned < 200) {
        memset(b, 0, sizeof *b);
        for (int i = 0; i < 8; i++) {
            /* Every third one also gets stdin and captured stdout. */
            process_spec_t s = {.argv = t_argv};
            if (i % 3 == 0)
                s = (process_spec_t){.argv = c_argv, .stdin_data = "x\n", .stdin_len = 2,
                                     .capture_stdout = 1};
            spawn_or_fail(loop, &s, &b->rec[i]);
        }
        spawned += 8;
        uv_run(loop, UV_RUN_DEFAULT);
        for (int i = 0; i < 8; i++) {
            assert_true(b->rec[i].done);
            assert_int_equal(b->rec[i].status, 0);
            if (i % 3 == 0)
                assert_int_equal(b->rec[i].out_len, 2);
        }
        assert_int_equal(process_count(), 0);
    }
    assert_int_equal(count_zombie_children(), 0);
    assert_int_equal(count_fds(), fds_before);
    free(b);
    end_loop(loop);
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

/* A child that closes its output early: the loop must still wait for its exit. */
static void test_exit_after_closing_output(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"sh", "-c", "exec >&- 2>&-; sleep 0.3; exit 7", NULL};
    process_spec_t spec = {.argv = argv};
    spawn_or_fail(loop, &spec, rec);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_true(rec->done);
    assert_int_equal(rec->status, 7);
    free(rec);
    end_loop(loop);
}

/* A descendant outside the group keeps stdout open: the callback still comes (drain limit). */
static void test_escaped_descendant_does_not_block_exit(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    exit_rec_t *rec = calloc(1, sizeof *rec);
    char *argv[] = {"sh", "-c", "setsid sh -c 'echo $$; exec sleep 60' & sleep 0.2; exit 5", NULL};
    process_spec_t spec = {.argv = argv, .capture_stdout = 1};
    spawn_or_fail(loop, &spec, rec);
    assert_true(run_until(loop, &rec->done, DEADLINE_MS));
    assert_int_equal(rec->status, 5);
    int escaped = atoi(rec->out);
    assert_true(escaped > 1);
    kill(escaped, SIGKILL);
    free(rec);
    end_loop(loop);
}

typedef struct respawn_ctx {
    uv_loop_t *loop;
    exit_rec_t first, second;
    int spawned_second;
} respawn_ctx_t;

static void on_second_exit(process_t *p, int status, int sig, void *ctx)
{
    respawn_ctx_t *r = ctx;
    on_exit_rec(p, status, sig, &r->second);
}

static void on_first_exit_respawn(process_t *p, int status, int sig, void *ctx)
{
    respawn_ctx_t *r = ctx;
    on_exit_rec(p, status, sig, &r->first);
    char *argv[] = {"sh", "-c", "exit 4", NULL};
    process_spec_t spec = {.argv = argv};
    char err[256];
    process_t *q = NULL;
    if (process_spawn(r->loop, &spec, on_second_exit, r, &q, err, sizeof err) == 0)
        r->spawned_second = 1;
}

static void test_respawn_from_exit_callback(void **state)
{
    (void)state;
    uv_loop_t *loop = new_loop();
    respawn_ctx_t *r = calloc(1, sizeof *r);
    r->loop = loop;
    char *argv[] = {"sh", "-c", "exit 2", NULL};
    process_spec_t spec = {.argv = argv};
    char err[256];
    process_t *p = NULL;
    assert_int_equal(process_spawn(loop, &spec, on_first_exit_respawn, r, &p, err, sizeof err), 0);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_true(r->first.done);
    assert_int_equal(r->first.status, 2);
    assert_int_equal(r->spawned_second, 1);
    assert_true(r->second.done);
    assert_int_equal(r->second.status, 4);
    free(r);
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
        cmocka_unit_test(test_echo_exits_zero),
        cmocka_unit_test(test_output_lines_logged),
        cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_stop_sends_sigterm),
        cmocka_unit_test(test_signal_reaches_group),
        cmocka_unit_test(test_stop_escalates_to_sigkill),
        cmocka_unit_test(test_grandchild_dies_with_group),
        cmocka_unit_test(test_exec_failures_reported),
        cmocka_unit_test(test_env_and_cwd_applied),
        cmocka_unit_test(test_env_unset_and_private),
        cmocka_unit_test(test_stdin_data),
        cmocka_unit_test(test_pidfile_written_and_removed),
        cmocka_unit_test(test_kill_stale),
        cmocka_unit_test(test_many_cycles_no_leaks),
        cmocka_unit_test(test_child_inherits_only_stdio),
        cmocka_unit_test(test_exit_after_closing_output),
        cmocka_unit_test(test_escaped_descendant_does_not_block_exit),
        cmocka_unit_test(test_respawn_from_exit_callback),
        cmocka_unit_test(test_pdeathsig_kills_orphan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
