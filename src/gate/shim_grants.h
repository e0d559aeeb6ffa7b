/*
 * shim_grants: vramd in its workers' allocation path. A supervised worker whose model says
 * `cuda_shim: auto|required` gets libvramd-cuda.so in LD_PRELOAD, a grant page of its own
 * (gpu/shim_page.h) and the grant socket (net/grant_socket.h); this module decides what
 * each instance may allocate (docs/shim.md).
 *
 * The grant of an instance (written to its page) is what vramd booked for it minus its CUDA
 * context (which the driver allocates outside the calls the shim sees):
 *   grant = resident entry + its running requests' entries + grant_extra - context
 * where context = NVML's bytes for its processes minus the shim's live bytes, learned while
 * it is idle. An allocation within the grant never reaches vramd. One past it is an ASK:
 *   - granted at once when its GPU has the bytes free (ledger_free_for_asks, older asks
 *     first): booked in the instance's grant_extra entry, the page's grant raised, GRANT;
 *   - else held (FIFO per GPU; the bytes are held against new admissions, ledger asked) while
 *     room is made (idle instances evicted or parked: sched_make_room_on; caches cleared),
 *     retried every SHIM_GRANTS_TICK_MS, until grant_wait: then REFUSE (the allocation
 *     fails with CUDA_ERROR_OUT_OF_MEMORY in that worker alone, a usual OOM);
 *   - refused at once when the instance would then hold more than its GPU's capacity (no
 *     eviction could ever make room for it: nothing is evicted), when the instance is not
 *     READY/STARTING, when SHIM_GRANTS_ASKS_MAX asks wait, or (deadlock) when every instance
 *     running requests on that GPU waits in an ask and nothing is being reclaimed there: the
 *     ask of the instance whose running began last (the younger request) is refused.
 * Granted extra memory stays booked while the instance runs requests; once it is idle the
 * extra is folded into its resident entry (the allocator keeps what it took; NVML's next
 * reading corrects it), and the model's estimate for the request's class is raised as an
 * OOM raises it (sched_note_true_size, when one request ran alone), so the next request books
 * its true size.
 *
 * Failure is never worse than without the shim: no library, no socket, a container worker
 * (the shim is not passed into containers yet) -> `auto` runs the worker without it (status
 * says why), `required` refuses to start it (start failed, with the reason). A shim that
 * cannot reach vramd detaches itself (pass-through). A malformed message fails that worker
 * (killed, restarted as a crash), never vramd. A vramd that dies takes its workers with it
 * (the guard), so no shim outlives its page's vramd.
 * Every reservation is released however it ends: grant_extra at the worker's exit, pending
 * asks with their connection or instance.
 * Return convention: 0 ok, -1 error (why filled).
 */
#ifndef VRAMD_GATE_SHIM_GRANTS_H
#define VRAMD_GATE_SHIM_GRANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/types.h"

#define SHIM_GRANTS_TICK_MS 10        /* waiting asks are tried again this often */
#define SHIM_GRANTS_REFRESH_MS 100    /* grants, contexts and dead slots refreshed this often */
#define SHIM_GRANTS_ASKS_MAX 1024     /* asks waiting at once, over every worker */
#define SHIM_GRANTS_MISMATCH_SLACK (64ULL << 20) /* shim bytes over NVML's beyond this are a mismatch */

typedef struct shim_figures {
    const char *state;   /* off, unavailable, waiting, attached, detached, failed */
    const char *why;     /* unavailable/failed: the reason; else "" */
    uint64_t grant, live, context, extra;
    uint64_t parked;     /* in host memory, by the shim park tier */
    unsigned processes;  /* slots in use */
    uint64_t asks, granted, waited, refused, mismatches;
    uint64_t wait_ms_total; /* time asks spent held */
} shim_figures_t;

typedef struct shim_totals {
    uint64_t asks, granted, waited, refused_no_room, refused_deadlock, refused_other, malformed, mismatches;
    unsigned waiting;      /* asks held now */
    bool listening;
    const char *library;   /* the shim library found ("" = none) */
} shim_totals_t;

/* Find the shim library ($VRAMD_CUDA_SHIM_LIBRARY, else beside the binary: ../lib/,
 * ../lib/vramd/, else /usr/lib/vramd/) and listen on <state_dir>/shim/grant.sock. A failure
 * is logged (shim_unavailable) and leaves shims unavailable; never fatal. */
void shim_grants_init(core_t *core);
void shim_grants_shutdown(void);
/* Before a supervised worker starts: env gets the shim's variables (at most cap - *n more
 * entries; the strings live in the instance's shim state). -1: it must not start
 * (cuda_shim: required and the shim is unavailable; why says so). */
int shim_grants_prepare(instance_t *inst, config_kv_t *env, size_t cap, size_t *n, char *why, size_t whylen);
/* The driver's limit of inst changed (gate/driver_limit.h): grants held for it are
 * answered once it covers them. */
void shim_grants_limit_applied(instance_t *inst);
/* The worker's process exited: asks refused, grant_extra released, the page orphaned. */
void shim_grants_exited(instance_t *inst);
/* The instance is being freed: its shim state is dropped (freed once its connections closed). */
void shim_grants_free(instance_t *inst);
/* inst's CUDA context as the shim learned it (NVML's bytes beyond the shim's while idle); 0
 * before it is known or without a shim. */
uint64_t shim_grants_context(const instance_t *inst);
/* false when the instance has no shim state (cuda_shim off, external). */
bool shim_grants_figures(const instance_t *inst, shim_figures_t *out);
void shim_grants_totals(shim_totals_t *out);

#endif
