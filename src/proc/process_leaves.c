/*
 * process_leaves: removing the cgroup leaf of a finished process (proc/cgroup.h). The leaf's
 * members were SIGKILLed when the process was reaped; the leaf goes once they have left:
 * at once, after a short settle (CG_SETTLE_MS, on the loop thread), or from a retry timer
 * every CG_RETRY_MS for up to a minute, then it is logged (cgroup_left) and let go (the next
 * start's sweep removes it).
 *
 * Invariants: at most CG_PENDING_MAX leaves wait; the retry timer is unref'd (it keeps no
 * loop running) and stops once nothing waits. Loop thread only.
 */
#include "proc/process.h"
#include "proc/process_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "common/log.h"

#define CG_PENDING_MAX 64
#define CG_RETRY_MS 100
#define CG_RETRIES 600      /* a minute of tries, then the leaf is logged (cgroup_left) and let go */
#define CG_SETTLE_MS 50     /* how long a removal waits for just-killed members to leave */

static struct {
    const cgroup_tree_t *tree;
    char leaf[CGROUP_PATH_MAX / 2];
    unsigned tries;
} g_cg_pending[CG_PENDING_MAX];
static size_t g_cg_npending;
static uv_timer_t g_cg_timer; /* retries the pending removals; unref'd: it holds no loop open */
static bool g_cg_timer_made;

size_t process_cgroup_retry(void)
{
    size_t kept = 0;
    for (size_t i = 0; i < g_cg_npending; i++) {
        cgroup_leaf_signal(g_cg_pending[i].tree, g_cg_pending[i].leaf, SIGKILL, 0);
        if (cgroup_leaf_remove(g_cg_pending[i].tree, g_cg_pending[i].leaf) == 0)
            continue;
        if (++g_cg_pending[i].tries >= CG_RETRIES) {
            log_event(LOG_WARN, "cgroup_left", "leaf=%s error=%s", g_cg_pending[i].leaf, strerror(errno));
            continue;
        }
        g_cg_pending[kept++] = g_cg_pending[i];
    }
    g_cg_npending = kept;
    return kept;
}

static void on_cg_retry(uv_timer_t *t)
{
    if (process_cgroup_retry() == 0)
        uv_timer_stop(t);
}

/* The leaf of a finished process: removed once its last members (killed at the reap) have
 * left; a leaf still busy after CG_SETTLE_MS is retried every CG_RETRY_MS. */
void process_leaf_finished(uv_loop_t *loop, const cgroup_tree_t *tree, const char *leaf)
{
    if (!tree || !leaf)
        return;
    for (unsigned waited = 0;; waited += 5) {
        if (cgroup_leaf_remove(tree, leaf) == 0 || errno == ENOENT)
            return;
        if (waited >= CG_SETTLE_MS)
            break;
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (g_cg_npending >= CG_PENDING_MAX || strlen(leaf) >= sizeof g_cg_pending[0].leaf) {
        log_event(LOG_WARN, "cgroup_left", "leaf=%s error=%s", leaf, strerror(errno));
        return;
    }
    g_cg_pending[g_cg_npending].tree = tree;
    g_cg_pending[g_cg_npending].tries = 0;
    snprintf(g_cg_pending[g_cg_npending].leaf, sizeof g_cg_pending[0].leaf, "%s", leaf);
    g_cg_npending++;
    if (!g_cg_timer_made) {
        uv_timer_init(loop, &g_cg_timer);
        uv_unref((uv_handle_t *)&g_cg_timer);
        g_cg_timer_made = true;
    }
    if (!uv_is_closing((uv_handle_t *)&g_cg_timer))
        uv_timer_start(&g_cg_timer, on_cg_retry, CG_RETRY_MS, CG_RETRY_MS);
}


void process_leaf_keep(process_t *p)
{
    if (p)
        p->cg_kept = true;
}

void process_leaf_release(uv_loop_t *loop, const cgroup_tree_t *tree, const char *leaf)
{
    if (cgroup_tree_active(tree))
        process_leaf_finished(loop, tree, leaf);
}
