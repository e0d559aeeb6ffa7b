/*
 * test_process: spawning, output logging, stdin, stopping and reaping of src/proc/process.c
 * (and process_output.c), with real children (/bin/sh, sleep, cat, echo). The child's setup
 * (exec failures, environment, fds, PDEATHSIG) and pid files are in test_process_child.c.
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
        cmocka_unit_test(test_stdin_data),
        cmocka_unit_test(test_many_cycles_no_leaks),
        cmocka_unit_test(test_exit_after_closing_output),
        cmocka_unit_test(test_escaped_descendant_does_not_block_exit),
        cmocka_unit_test(test_respawn_from_exit_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
