/*
 * clock_step: an LD_PRELOAD shim for tests that steps the process's wall clock, as NTP or an
 * operator's `date -s` steps the system's, while the monotonic clocks run on untouched.
 *
 * It replaces clock_gettime (for CLOCK_REALTIME, CLOCK_REALTIME_COARSE and CLOCK_TAI),
 * gettimeofday and time: each adds the offset, in milliseconds (signed decimal), written in
 * the file $CLOCK_STEP_FILE. The file is read again at most every 20 ms of monotonic time;
 * no file, or no variable: offset 0. Every other clock id goes to the real call unchanged.
 *
 * Invariants: the shim never calls the replaced functions through itself (the real
 * clock_gettime is found once with dlsym(RTLD_NEXT)); the file is read with open/read/close
 * only (no stdio, no allocation), so it is safe in any thread; the offset is kept in an
 * atomic. Not built with sanitizers (it is preloaded into the sanitizer build too; the test
 * sets verify_asan_link_order=0).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

int clock_gettime(clockid_t id, struct timespec *ts);
int gettimeofday(struct timeval *restrict tv, void *restrict tz);
time_t time(time_t *out);

static _Atomic(clock_gettime_fn) real_fn;
static _Atomic int64_t offset_ms;
static _Atomic int64_t next_read_ms;

static clock_gettime_fn real(void)
{
    clock_gettime_fn f = atomic_load(&real_fn);
    if (f == NULL) {
        f = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        atomic_store(&real_fn, f);
    }
    return f;
}

static int64_t parse_ms(const char *s, ssize_t n)
{
    int64_t v = 0;
    int sign = 1;
    ssize_t i = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        sign = s[i++] == '-' ? -1 : 1;
    for (; i < n && s[i] >= '0' && s[i] <= '9' && v < INT64_MAX / 10 - 10; i++)
        v = v * 10 + (s[i] - '0');
    return sign * v;
}

/* The offset now, reading the file again when the last read is 20 ms old. */
static int64_t offset(void)
{
    struct timespec m;
    if (real()(CLOCK_MONOTONIC, &m) != 0)
        return atomic_load(&offset_ms);
    int64_t now = (int64_t)m.tv_sec * 1000 + m.tv_nsec / 1000000;
    if (now < atomic_load(&next_read_ms))
        return atomic_load(&offset_ms);
    atomic_store(&next_read_ms, now + 20);
    const char *path = getenv("CLOCK_STEP_FILE");
    int64_t v = 0;
    if (path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[32];
            ssize_t n = read(fd, buf, sizeof buf);
            close(fd);
            if (n > 0)
                v = parse_ms(buf, n);
        }
    }
    atomic_store(&offset_ms, v);
    return v;
}

static void shift(struct timespec *ts, int64_t ms)
{
    int64_t ns = (int64_t)ts->tv_nsec + (ms % 1000) * 1000000;
    int64_t sec = (int64_t)ts->tv_sec + ms / 1000;
    if (ns < 0) {
        ns += 1000000000;
        sec--;
    } else if (ns >= 1000000000) {
        ns -= 1000000000;
        sec++;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = real()(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI))
        shift(ts, offset());
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
