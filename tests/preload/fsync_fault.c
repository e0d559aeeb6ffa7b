/*
 * fsync_fault: an LD_PRELOAD shim for tests that makes the disk under vramd's job journal
 * fail its syncs, and records what a disk would hold after a power cut.
 *
 * It replaces fsync, fdatasync and syncfs (SQLite's unix VFS calls fdatasync for the
 * database and its WAL, fsync for the directory; strace shows which). A call on a
 * descriptor whose path (/proc/self/fd/N) contains $FSYNC_FAULT_MATCH is "watched":
 *
 *   - failing: while the file named by $FSYNC_FAULT_FAIL exists, a watched sync does not
 *     reach the disk and returns -1 with errno EIO (what Linux reports when writeback
 *     failed: the data may be lost); when the file's text starts with "once", only the
 *     next watched sync fails, and the shim removes the file;
 *   - durable state: after a watched sync of a regular file succeeded, the file's bytes at
 *     that moment are copied into the directory $FSYNC_FAULT_SNAP under its base name
 *     (written to NAME.tmp, then renamed). The snapshot directory is thus what the disk
 *     holds for sure: a power cut keeps at least the bytes of each file's last successful
 *     sync, and writes not followed by one may be lost. A test that kills the process and
 *     puts these files in place of the live ones simulates the worst power cut;
 *   - log: each watched sync appends one line "ok|eio fsync|fdatasync|syncfs PATH" to
 *     $FSYNC_FAULT_LOG (so a test can check the shim was really on the path).
 *
 * Invariants: the copy reads through the same descriptor with pread (opening and closing
 * another descriptor of the file would drop the process's POSIX locks on it, which SQLite
 * relies on); every variable is optional (unset: nothing watched, the real call only); the
 * shim never calls the sync functions through itself. Not built with sanitizers (it is
 * preloaded into the sanitizer build too; the test sets verify_asan_link_order=0).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*sync_fn)(int);

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static sync_fn real(const char *name)
{
    return (sync_fn)dlsym(RTLD_NEXT, name);
}

/* The descriptor's path when the shim watches it, else NULL. */
static const char *watched(int fd, char *path, size_t len)
{
    const char *match = getenv("FSYNC_FAULT_MATCH");
    char link[64];
    if (match == NULL || match[0] == '\0')
        return NULL;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, len - 1);
    if (n <= 0)
        return NULL;
    path[n] = '\0';
    return strstr(path, match) != NULL ? path : NULL;
}

static void note(const char *what, const char *call, const char *path)
{
    const char *log = getenv("FSYNC_FAULT_LOG");
    if (log == NULL || log[0] == '\0')
        return;
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[PATH_MAX + 64];
    int n = snprintf(line, sizeof line, "%s %s %s\n", what, call, path);
    if (n > 0 && write(fd, line, (size_t)n) < 0) {
        /* nothing to do: the log is a convenience */
    }
    close(fd);
}

/* Copy the bytes of fd (a regular file) to $FSYNC_FAULT_SNAP/basename(path). */
static void snapshot(int fd, const char *path)
{
    const char *dir = getenv("FSYNC_FAULT_SNAP");
    struct stat st;
    if (dir == NULL || dir[0] == '\0' || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    char tmp[PATH_MAX], dst[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, base);
    snprintf(dst, sizeof dst, "%s/%s", dir, base);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        return;
    char buf[65536];
    off_t off = 0;
    int ok = 1;
    while (off < st.st_size) {
        ssize_t n = pread(fd, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (write(out, buf, (size_t)n) != n) {
            ok = 0;
            break;
        }
        off += n;
    }
    close(out);
    if (ok)
        rename(tmp, dst);
    else
        unlink(tmp);
}

static int faulty(const char *call, int fd)
{
    char path[PATH_MAX];
    const char *p = watched(fd, path, sizeof path);
    if (p == NULL)
        return real(call)(fd);
    pthread_mutex_lock(&g_lock);
    const char *fail = getenv("FSYNC_FAULT_FAIL");
    int rc;
    if (fail != NULL && fail[0] != '\0' && access(fail, F_OK) == 0) {
        char text[8] = "";
        int cfd = open(fail, O_RDONLY | O_CLOEXEC);
        if (cfd >= 0) {
            ssize_t n = read(cfd, text, sizeof text - 1);
            text[n > 0 ? n : 0] = '\0';
            close(cfd);
        }
        if (strncmp(text, "once", 4) == 0)
            unlink(fail);
        note("eio", call, p);
        errno = EIO;
        rc = -1;
    } else {
        rc = real(call)(fd);
        int saved = errno;
        if (rc == 0)
            snapshot(fd, p);
        note(rc == 0 ? "ok" : "err", call, p);
        errno = saved;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int fsync(int fd)
{
    return faulty("fsync", fd);
}

int fdatasync(int fd)
{
    return faulty("fdatasync", fd);
}

int syncfs(int fd)
{
    return faulty("syncfs", fd);
}
