/*
 * process_test_util: what the process tests (test_process.c, test_process_child.c) share:
 * the exit record and its callback, running a loop until a flag or a condition with a
 * deadline, a fresh loop per test that must close cleanly, log capture into a file, and
 * readers of /proc (fds, stat, zombies, ignored signals, group members). The functions are
 * static and marked unused (not inline, so the compiler treats them as it did when they
 * lived in the test file), so a test that uses only part of them builds without
 * unused-function warnings. Include it after cmocka.h and the headers test_process.c
 * includes.
 */
#ifndef VRAMD_TESTS_PROCESS_TEST_UTIL_H
#define VRAMD_TESTS_PROCESS_TEST_UTIL_H

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

__attribute__((unused)) static void on_exit_rec(process_t *p, int status, int sig, void *ctx)
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

__attribute__((unused)) static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

__attribute__((unused)) static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((unused)) static void on_guard(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until *flag or the deadline; the guard timer makes UV_RUN_ONCE return. */
__attribute__((unused)) static bool run_until(uv_loop_t *loop, const bool *flag, uint64_t timeout_ms)
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
__attribute__((unused)) static bool poll_until(uv_loop_t *loop, cond_fn cond, void *arg, uint64_t timeout_ms)
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

__attribute__((unused)) static uv_loop_t *new_loop(void)
{
    uv_loop_t *loop = malloc(sizeof *loop);
    assert_non_null(loop);
    assert_int_equal(uv_loop_init(loop), 0);
    return loop;
}

__attribute__((unused)) static void end_loop(uv_loop_t *loop)
{
    assert_int_equal(process_count(), 0);
    uv_run(loop, UV_RUN_DEFAULT); /* pending closes (the SIGCHLD watcher) */
    assert_int_equal(uv_loop_close(loop), 0);
    free(loop);
}

__attribute__((unused)) static process_t *spawn_or_fail(uv_loop_t *loop, const process_spec_t *spec, exit_rec_t *rec)
{
    char err[256] = "";
    process_t *p = NULL;
    int rc = process_spawn(loop, spec, on_exit_rec, rec, &p, err, sizeof err);
    if (rc != 0)
        fail_msg("process_spawn: %s", err);
    assert_non_null(p);
    return p;
}

__attribute__((unused)) static char *read_whole(const char *path, size_t *len_out)
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

__attribute__((unused)) static int count_substr(const char *hay, const char *needle)
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

__attribute__((unused)) static void log_capture_start(log_capture_t *lc)
{
    strcpy(lc->path, "/tmp/test_process_log_XXXXXX");
    lc->fd = mkstemp(lc->path);
    assert_true(lc->fd >= 0);
    log_configure(LOG_FORMAT_JSON, LOG_INFO, lc->fd);
}

__attribute__((unused)) static char *log_capture_end(log_capture_t *lc)
{
    log_configure(LOG_FORMAT_JSON, LOG_INFO, 2);
    close(lc->fd);
    char *s = read_whole(lc->path, NULL);
    unlink(lc->path);
    return s;
}

__attribute__((unused)) static int count_fds(void)
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

__attribute__((unused)) static bool read_proc_stat(int pid, proc_stat_t *st)
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
__attribute__((unused)) static bool pid_is_dead(void *arg)
{
    int pid = *(int *)arg;
    proc_stat_t st;
    return !read_proc_stat(pid, &st) || st.state == 'Z' || st.state == 'X';
}

__attribute__((unused)) static int count_zombie_children(void)
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

__attribute__((unused)) static bool sigterm_ignored(int pid)
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

__attribute__((unused)) static bool group_member_ignoring_term(void *arg)
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

__attribute__((unused)) static bool leader_ignores_term(void *arg)
{
    return sigterm_ignored(*(int *)arg);
}


#endif
