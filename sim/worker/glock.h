/*
 * glock: a lock shared by every simworker that names the same file (--global-lock FILE),
 * so that only one request runs on the GPU at a time across processes, the way teams
 * serialise separate servers by hand. flock(2) on a file opened for each acquisition; the
 * kernel releases it when the holder dies, even by SIGKILL.
 *
 * Acquiring blocks in a libuv threadpool thread; the callback runs on the loop. At most one
 * acquisition per glock at a time (the worker serialises its own requests first).
 * Return convention: 0 ok (callback will run), -1 error (errno set, no callback).
 */
#ifndef VRAMD_SIM_WORKER_GLOCK_H
#define VRAMD_SIM_WORKER_GLOCK_H

#include <stdbool.h>
#include <uv.h>

typedef struct sw_glock sw_glock_t;
/* ok: the lock is held (false: could not open/lock the file, errno_value says why). */
typedef void (*sw_glock_cb)(void *ctx, bool ok, int errno_value);

struct sw_glock {
    uv_work_t work;
    char path[256];
    int fd;      /* held lock's fd, -1 when not held */
    int pending_fd;
    int error;
    bool busy;   /* an acquisition is in flight */
    sw_glock_cb cb;
    void *ctx;
};

void sw_glock_init(sw_glock_t *g, const char *path);
int sw_glock_acquire(sw_glock_t *g, uv_loop_t *loop, sw_glock_cb cb, void *ctx);
void sw_glock_release(sw_glock_t *g);
bool sw_glock_held(const sw_glock_t *g);

#endif
