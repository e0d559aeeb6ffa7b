/*
 * glock: cross-process request lock over flock(2). See glock.h.
 * Invariant: g->fd >= 0 exactly while the lock is held by this process.
 */
#include "glock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

void sw_glock_init(sw_glock_t *g, const char *path)
{
    memset(g, 0, sizeof(*g));
    snprintf(g->path, sizeof(g->path), "%s", path);
    g->fd = -1;
    g->pending_fd = -1;
}

static void acquire_in_thread(uv_work_t *w)
{
    sw_glock_t *g = w->data;
    g->error = 0;
    int fd = open(g->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        g->error = errno;
        return;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            g->error = errno;
            close(fd);
            return;
        }
    }
    g->pending_fd = fd;
}

static void acquired_on_loop(uv_work_t *w, int status)
{
    sw_glock_t *g = w->data;
    g->busy = false;
    if (status != 0 && g->pending_fd < 0 && g->error == 0)
        g->error = ECANCELED;
    g->fd = g->pending_fd;
    g->pending_fd = -1;
    g->cb(g->ctx, g->fd >= 0, g->error);
}

int sw_glock_acquire(sw_glock_t *g, uv_loop_t *loop, sw_glock_cb cb, void *ctx)
{
    if (g->busy || g->fd >= 0) {
        errno = EBUSY;
        return -1;
    }
    g->cb = cb;
    g->ctx = ctx;
    g->busy = true;
    g->work.data = g;
    int rc = uv_queue_work(loop, &g->work, acquire_in_thread, acquired_on_loop);
    if (rc != 0) {
        g->busy = false;
        errno = -rc;
        return -1;
    }
    return 0;
}

void sw_glock_release(sw_glock_t *g)
{
    if (g->fd >= 0) {
        flock(g->fd, LOCK_UN);
        close(g->fd);
        g->fd = -1;
    }
}

bool sw_glock_held(const sw_glock_t *g) { return g->fd >= 0; }
