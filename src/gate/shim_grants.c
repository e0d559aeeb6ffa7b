/*
 * shim_grants: grants and asks of the CUDA shims in vramd's workers (shim_grants.h has the
 * rules). One module state for the loop: the socket, the library found, the asks waiting
 * (FIFO), one timer (every SHIM_GRANTS_TICK_MS while asks wait, else every
 * SHIM_GRANTS_REFRESH_MS). An instance's shim state (shim_inst_t) is owned here: created by
 * shim_grants_prepare, dropped by shim_grants_free, freed when its last connection closed.
 * Calls down only: sched (the ledger, making room, the estimate), net (the socket), gpu
 * (the page), proc (killing a worker whose shim sent garbage).
 */
#include "gate/shim_grants.h"
#include "gate/shim_grants_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/list.h"
#include "common/log.h"
#include "common/units.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "gpu/shim_page.h"
#include "net/grant_socket.h"
#include "proc/attrib.h"
#include "proc/process.h"
#include "sched/scheduler.h"
#include "gate/driver_limit.h"
#include "gate/shim_library.h"

typedef struct ask {
    list_t link;              /* shim_grants_state.asks, oldest first */
    shim_inst_t *si;
    grant_conn_t *conn;
    uint32_t seq;
    uint64_t bytes;
    uint64_t since_ms, deadline_ms;
    int pos;
    bool room_asked;
} ask_t;

/* A grant decided and booked, its answer held until the worker's driver limit covers it
 * (gate/driver_limit.h): the allocation must not fail on a limit that lags. */
typedef struct held_grant {
    list_t link;              /* shim_grants_state.held */
    shim_inst_t *si;
    grant_conn_t *conn;
    uint32_t seq;
} held_grant_t;

static struct {
    core_t *core;
    list_t held;
    grant_socket_t *sock;
    char library[4096];
    char dir[4096];
    char sock_path[4096];
    char unavailable[160];   /* why shims cannot be offered ("" = they can) */
    uint64_t epoch;
    uv_timer_t timer;
    bool timer_init;
    list_t asks;
    unsigned n_asks;
    shim_totals_t totals;
} shim_grants_state;

static const char *const refuse_names[] = {
    [0] = "", [SHIM_REFUSE_NO_ROOM] = "no_room", [SHIM_REFUSE_DEADLOCK] = "deadlock", [SHIM_REFUSE_TOO_BIG] = "too_big",
    [SHIM_REFUSE_STOPPING] = "stopping", [SHIM_REFUSE_BUSY] = "busy"};
_Static_assert(sizeof refuse_names / sizeof refuse_names[0] == SHIM_REFUSE_MAX + 1, "a name for every refusal");

static void *on_hello(void *ctx, grant_conn_t *c, const shim_msg_t *m, pid_t peer_pid);
static void on_ask(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m);
static void on_closed(void *ctx, grant_conn_t *c, void *owner, bool malformed);
static void on_tick(uv_timer_t *t);
static void on_request_event(void *ctx, enum core_event ev, void *subject);

void shim_grants_init(core_t *core)
{
    memset(&shim_grants_state, 0, sizeof shim_grants_state);
    shim_grants_state.core = core;
    list_init(&shim_grants_state.asks);
    list_init(&shim_grants_state.held);
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        rnd = (uint64_t)getpid() << 32 ^ core_now();
    shim_grants_state.epoch = rnd;
    shim_library_find(shim_grants_state.library, sizeof shim_grants_state.library);
    shim_grants_state.totals.library = shim_grants_state.library;
    snprintf(shim_grants_state.dir, sizeof shim_grants_state.dir, "%s/shim", core->cfg->state_dir);
    snprintf(shim_grants_state.sock_path, sizeof shim_grants_state.sock_path, "%s/grant.sock", shim_grants_state.dir);
    uv_timer_init(core->loop, &shim_grants_state.timer);
    shim_grants_state.timer_init = true;
    core_listen(core, CORE_EV_REQUEST_DISPATCHED, on_request_event, NULL);
    if (!shim_grants_state.library[0]) {
        snprintf(shim_grants_state.unavailable, sizeof shim_grants_state.unavailable, "libvramd-cuda.so not found");
        return;
    }
    if (mkdir(shim_grants_state.dir, 0700) != 0 && errno != EEXIST) {
        snprintf(shim_grants_state.unavailable, sizeof shim_grants_state.unavailable, "%s: %s", shim_grants_state.dir, strerror(errno));
        log_event(LOG_WARN, "shim_unavailable", "reason=%s", shim_grants_state.unavailable);
        return;
    }
    static const grant_socket_handlers_t h = {
        .hello = on_hello, .ask = on_ask, .control = shim_control_answer, .closed = on_closed};
    char err[256] = "";
    const grant_socket_limits_t lim = {core->cfg->limits.shim_conns_max, core->cfg->limits.shim_conns_per_proc,
                                       core->cfg->limits.shim_hello_ms};
    shim_grants_state.sock = grant_socket_listen(core->loop, shim_grants_state.sock_path, &lim, &h, NULL, err, sizeof err);
    if (!shim_grants_state.sock) {
        snprintf(shim_grants_state.unavailable, sizeof shim_grants_state.unavailable, "%s", err);
        log_event(LOG_WARN, "shim_unavailable", "reason=%s", err);
        return;
    }
    shim_grants_state.totals.listening = true;
    uv_timer_start(&shim_grants_state.timer, on_tick, SHIM_GRANTS_REFRESH_MS, SHIM_GRANTS_REFRESH_MS);
    log_event(LOG_INFO, "shim_listening", "socket=%s library=%s", shim_grants_state.sock_path, shim_grants_state.library);
}

void shim_grants_shutdown(void)
{
    if (shim_grants_state.timer_init) {
        uv_timer_stop(&shim_grants_state.timer);
        uv_close((uv_handle_t *)&shim_grants_state.timer, NULL);
        shim_grants_state.timer_init = false;
    }
    if (shim_grants_state.sock)
        grant_socket_close(shim_grants_state.sock); /* closed handlers drop the asks */
    shim_grants_state.sock = NULL;
    shim_grants_state.totals.listening = false;
}

/* ---- an instance's grant ---------------------------------------------------------------- */

static void refresh_grant(shim_inst_t *si)
{
    if (!si->inst || !si->page)
        return;
    uint64_t b = sched_instance_booked(si->inst);
    shim_page_set_grant(si->page, b > si->context ? b - si->context : 0);
}

static bool pid_gone(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

/* Did NVML's last good reading begin after the instance was seen idle? Only then do its
 * figure and the page describe the same still worker. */
static bool snapshot_since_idle(const shim_inst_t *si)
{
    uint64_t now = core_now(), age = sched_snapshot_age_ms();
    return si->idle_since_ms && now - age > si->idle_since_ms;
}

/* Idle: the extra granted while it ran is folded into its resident entry, and the context
 * (NVML's bytes beyond the shim's) learned; the cross-check logged once per instance. */
static void settle_idle(shim_inst_t *si)
{
    instance_t *in = si->inst;
    sched_book_grant_settle(in);
    if (si->extra_run && si->ran_alone) /* the request that ran needed more than it booked: learned */
        sched_note_true_size(in->model, si->run_level, si->run_class, si->run_booked + si->extra_run);
    si->extra_run = 0;
    si->ran_alone = false;
    uint64_t live = shim_page_live(si->page);
    if (in->memory.measured == 0 || in->life.state != INST_READY || !snapshot_since_idle(si))
        return; /* NVML's last reading may be of a moment its last request still allocated */
    si->context = in->memory.measured > live ? in->memory.measured - live : 0;
    if (live > in->memory.measured + SHIM_GRANTS_MISMATCH_SLACK) {
        si->mismatches++;
        shim_grants_state.totals.mismatches++;
        if (!si->mismatch_logged)
            log_event(LOG_WARN, "shim_mismatch", "model=%s instance=%u shim_bytes=%llu nvml_bytes=%llu", in->model->name,
                      in->id, (unsigned long long)live, (unsigned long long)in->memory.measured);
        si->mismatch_logged = true;
    }
}

static void refresh_all(void)
{
    list_foreach(mi, &shim_grants_state.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            shim_inst_t *si = in->gate.shim;
            if (!si || !si->page)
                continue;
            for (unsigned s = 0; s < SHIM_PAGE_PROCS; s++) { /* slots without a connection: pid gone? */
                pid_t pid = shim_page_slot_pid(si->page, s);
                if (pid > 0 && !si->slot_conn[s] && pid_gone(pid))
                    shim_page_clear_slot(si->page, s);
            }
            if (in->path.in_flight == 0) {
                if (!si->idle_since_ms)
                    si->idle_since_ms = core_now();
                settle_idle(si);
            } else {
                si->idle_since_ms = 0;
            }
            refresh_grant(si);
        }
    }
}

/* What an allocation of bytes needs booked beyond the grant now (only the part past the grant
 * is new memory). Read once per decision (grant() books what its caller checked). The sizes are
 * the worker's word (its ask, its page): sums saturate, so 2^64-1 or garbage is too_big. */
static uint64_t deficit(const shim_inst_t *si, uint64_t bytes)
{
    if (!si->page)
        return bytes;
    uint64_t need = units_sat_add(shim_page_live(si->page), bytes), g = shim_page_grant(si->page);
    return need > g ? need - g : 0;
}

/* Would it hold more than its GPU's capacity with need more? Refused at once, nothing evicted. */
static bool past_capacity(const instance_t *in, uint64_t need)
{
    return in && in->memory.gpu_pos >= 0 &&
           units_sat_add(sched_instance_booked(in), need) > ledger_capacity(sched_ledger(), (size_t)in->memory.gpu_pos);
}

/* ---- asks ----------------------------------------------------------------------------- */

static void update_asked(void)
{
    uint64_t per[LEDGER_MAX_GPUS] = {0};
    list_foreach(it, &shim_grants_state.asks) {
        ask_t *a = list_entry(it, ask_t, link);
        if (a->pos >= 0 && a->pos < LEDGER_MAX_GPUS)
            per[a->pos] = units_sat_add(per[a->pos], deficit(a->si, a->bytes));
    }
    sched_book_asks(per);
    shim_grants_state.totals.waiting = shim_grants_state.n_asks;
}

static void ask_drop(ask_t *a)
{
    list_remove(&a->link);
    shim_grants_state.n_asks--;
    free(a);
    update_asked();
}

static void answer(grant_conn_t *c, uint32_t seq, bool grant, uint64_t value)
{
    shim_msg_t m;
    shim_msg_init(&m, grant ? SHIM_MSG_GRANT : SHIM_MSG_REFUSE);
    m.seq = seq;
    if (grant)
        m.bytes = value;
    else
        m.aux = value;
    grant_conn_answer(c, &m);
}

static void refuse(shim_inst_t *si, grant_conn_t *c, uint32_t seq, uint64_t bytes, enum shim_refuse_reason why)
{
    si->refused++;
    if (why == SHIM_REFUSE_NO_ROOM)
        shim_grants_state.totals.refused_no_room++;
    else if (why == SHIM_REFUSE_DEADLOCK)
        shim_grants_state.totals.refused_deadlock++;
    else
        shim_grants_state.totals.refused_other++;
    const instance_t *in = si->inst;
    log_event(LOG_WARN, "shim_refused", "model=%s instance=%u pid=%d bytes=%llu reason=%s",
              in ? in->model->name : "-", in ? in->id : 0, (int)grant_conn_pid(c), (unsigned long long)bytes,
              refuse_names[why]);
    answer(c, seq, false, why);
}

static void grant(shim_inst_t *si, grant_conn_t *c, uint32_t seq, uint64_t bytes, uint64_t waited_ms)
{
    instance_t *in = si->inst;
    sched_book_grant(in, bytes); /* the caller checked it against the page (deficit) */
    if (in->path.in_flight > 0)
        si->extra_run += bytes;
    refresh_grant(si);
    si->granted++;
    shim_grants_state.totals.granted++;
    if (waited_ms) {
        si->waited++;
        si->wait_ms_total += waited_ms;
        shim_grants_state.totals.waited++;
    }
    log_event(LOG_DEBUG, "shim_granted", "model=%s instance=%u pid=%d bytes=%llu waited_ms=%llu grant=%llu",
              in->model->name, in->id, (int)grant_conn_pid(c), (unsigned long long)bytes, (unsigned long long)waited_ms,
              (unsigned long long)shim_page_grant(si->page));
    if (!driver_limit_covers(in)) {
        held_grant_t *h = calloc(1, sizeof *h);
        if (h) { /* answered by shim_grants_limit_applied (out of memory: at once, as without a limit) */
            *h = (held_grant_t){.si = si, .conn = c, .seq = seq};
            list_insert_tail(&shim_grants_state.held, &h->link);
            return;
        }
    }
    answer(c, seq, true, shim_page_grant(si->page));
}

void shim_grants_limit_applied(instance_t *inst)
{
    list_foreach_safe(it, tmp, &shim_grants_state.held) {
        held_grant_t *h = list_entry(it, held_grant_t, link);
        if (h->si->inst != inst || !driver_limit_covers(inst))
            continue;
        list_remove(&h->link);
        answer(h->conn, h->seq, true, h->si->page ? shim_page_grant(h->si->page) : 0);
        free(h);
    }
}

/* The held grants of a connection (closed) or of an instance (exited: refused). */
static void drop_held(const grant_conn_t *c, const shim_inst_t *si)
{
    list_foreach_safe(it, tmp, &shim_grants_state.held) {
        held_grant_t *h = list_entry(it, held_grant_t, link);
        if (h->conn != c && h->si != si)
            continue;
        list_remove(&h->link);
        if (si)
            answer(h->conn, h->seq, false, SHIM_REFUSE_STOPPING);
        free(h);
    }
}

/* Does the GPU have a's bytes now, the asks before it served first? */
static bool fits_now(const ask_t *a)
{
    if (a->pos < 0)
        return true;
    uint64_t before = 0;
    list_foreach(it, &shim_grants_state.asks) {
        const ask_t *o = list_entry(it, ask_t, link);
        if (o == a)
            break;
        if (o->pos == a->pos)
            before = units_sat_add(before, deficit(o->si, o->bytes));
    }
    return ledger_free_for_asks(sched_ledger(), (size_t)a->pos) >= units_sat_add(before, deficit(a->si, a->bytes));
}

static bool ask_waits(const instance_t *in)
{
    list_foreach(it, &shim_grants_state.asks) {
        const ask_t *a = list_entry(it, ask_t, link);
        if (a->si->inst == in)
            return true;
    }
    return false;
}

/* Nothing on GPU pos can give memory back while these asks wait: every instance there that
 * runs requests waits in an ask, none is reclaiming, parking or stopping. The ask to refuse
 * then (the one whose running began last), or NULL. */
static ask_t *deadlocked(int pos)
{
    unsigned waiting = 0;
    list_foreach(mi, &shim_grants_state.core->models) {
        const model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            const instance_t *in = list_entry(ii, instance_t, link);
            if (in->memory.gpu_pos != pos)
                continue;
            if (in->memory.reclaiming || in->life.state == INST_PARKING || in->life.state == INST_STOPPING || in->park.park_clearing)
                return NULL;
            if (in->path.in_flight > 0 && !ask_waits(in))
                return NULL;
        }
    }
    ask_t *youngest = NULL;
    list_foreach(it, &shim_grants_state.asks) {
        ask_t *a = list_entry(it, ask_t, link);
        if (a->pos != pos)
            continue;
        waiting++;
        if (!youngest || a->si->run_since_ms > youngest->si->run_since_ms)
            youngest = a;
    }
    return waiting >= 2 ? youngest : NULL;
}

/* Try every waiting ask, oldest first: granted when it fits, refused past its deadline or
 * when its GPU is deadlocked; the rest ask for room (once each). */
static void serve_asks(void)
{
    uint64_t now = core_now();
    list_foreach_safe(it, tmp, &shim_grants_state.asks) {
        ask_t *a = list_entry(it, ask_t, link);
        uint64_t need = deficit(a->si, a->bytes); /* read again: its page may have changed */
        bool too_big = past_capacity(a->si->inst, need);
        if (!too_big && fits_now(a)) {
            ask_t copy = *a;
            ask_drop(a);
            grant(copy.si, copy.conn, copy.seq, need, now - copy.since_ms);
        } else if (too_big || now >= a->deadline_ms) {
            ask_t copy = *a;
            ask_drop(a);
            refuse(copy.si, copy.conn, copy.seq, copy.bytes, too_big ? SHIM_REFUSE_TOO_BIG : SHIM_REFUSE_NO_ROOM);
        } else if (!a->room_asked && a->si->inst && a->pos >= 0) {
            a->room_asked = true;
            sched_make_room_on(a->si->inst->model, (size_t)a->pos, deficit(a->si, a->bytes), SCHED_ROOM_SHIM_GRANT);
        }
    }
    for (int pos = 0; pos < (int)sched_gpu_count(); pos++) {
        ask_t *victim = deadlocked(pos);
        if (victim) {
            ask_t copy = *victim;
            ask_drop(victim);
            refuse(copy.si, copy.conn, copy.seq, copy.bytes, SHIM_REFUSE_DEADLOCK);
        }
    }
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
    static uint64_t g_last_refresh;
    uint64_t now = core_now();
    if (now - g_last_refresh >= SHIM_GRANTS_REFRESH_MS || shim_grants_state.n_asks == 0) {
        g_last_refresh = now;
        refresh_all();
    }
    serve_asks();
    uint64_t every = shim_grants_state.n_asks ? SHIM_GRANTS_TICK_MS : SHIM_GRANTS_REFRESH_MS;
    if (uv_timer_get_repeat(&shim_grants_state.timer) != every)
        uv_timer_start(&shim_grants_state.timer, on_tick, every, every);
}

static void on_ask(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m)
{
    (void)ctx;
    shim_inst_t *si = owner;
    instance_t *in = si->inst;
    si->asks++;
    shim_grants_state.totals.asks++;
    if (!in || (in->life.state != INST_READY && in->life.state != INST_STARTING) || in->life.stop_requested) {
        refuse(si, c, m->seq, m->bytes, SHIM_REFUSE_STOPPING);
        return;
    }
    uint64_t need = deficit(si, m->bytes);
    if (past_capacity(in, need)) {
        refuse(si, c, m->seq, m->bytes, SHIM_REFUSE_TOO_BIG);
        return;
    }
    if (shim_grants_state.n_asks >= SHIM_GRANTS_ASKS_MAX) {
        refuse(si, c, m->seq, m->bytes, SHIM_REFUSE_BUSY);
        return;
    }
    ask_t *a = calloc(1, sizeof *a);
    if (!a) {
        refuse(si, c, m->seq, m->bytes, SHIM_REFUSE_BUSY);
        return;
    }
    uint64_t now = core_now();
    *a = (ask_t){.si = si, .conn = c, .seq = m->seq, .bytes = m->bytes, .since_ms = now, .pos = in->memory.gpu_pos,
                 .deadline_ms = now + in->model->cfg->grant_wait_ms};
    list_insert_tail(&shim_grants_state.asks, &a->link);
    shim_grants_state.n_asks++;
    if (fits_now(a)) {
        ask_drop(a);
        grant(si, c, m->seq, need, 0);
        return;
    }
    update_asked();
    log_event(LOG_INFO, "shim_waiting", "model=%s instance=%u pid=%d bytes=%llu", in->model->name, in->id,
              (int)grant_conn_pid(c), (unsigned long long)m->bytes);
    serve_asks(); /* room asked for, a deadlock resolved at once */
    if (shim_grants_state.n_asks && uv_timer_get_repeat(&shim_grants_state.timer) != SHIM_GRANTS_TICK_MS)
        uv_timer_start(&shim_grants_state.timer, on_tick, SHIM_GRANTS_TICK_MS, SHIM_GRANTS_TICK_MS);
}

/* ---- connections -------------------------------------------------------------------------- */

static shim_inst_t *by_token(const uint8_t *token)
{
    list_foreach(mi, &shim_grants_state.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (!in->gate.shim)
                continue;
            unsigned char diff = 0; /* every byte compared: the time says nothing of the token */
            for (unsigned k = 0; k < SHIM_TOKEN_LEN; k++)
                diff |= (unsigned char)(in->gate.shim->token[k] ^ token[k]);
            if (diff == 0)
                return in->gate.shim;
        }
    }
    return NULL;
}

static void *on_hello(void *ctx, grant_conn_t *c, const shim_msg_t *m, pid_t peer_pid)
{
    (void)ctx;
    shim_inst_t *si = by_token(m->token);
    unsigned slot = (unsigned)m->aux;
    if (!si || !si->page || si->failed || shim_page_slot_pid(si->page, slot) != peer_pid)
        return NULL; /* not its slot (a process of another pid namespace is not offered the shim) */
    if (grant_conn_is_control(c))
        return shim_control_hello(si, c, slot) ? si : NULL;
    if (si->slot_conn[slot])
        return NULL;
    for (unsigned s = 0; s < SHIM_PAGE_PROCS; s++) /* the same pid in another slot without a connection: it exec'd */
        if (s != slot && !si->slot_conn[s] && shim_page_slot_pid(si->page, s) == peer_pid)
            shim_page_clear_slot(si->page, s);
    si->slot_conn[slot] = true;
    si->conns++;
    return si;
}

static void fail_worker(shim_inst_t *si, const char *why)
{
    shim_grants_state.totals.malformed++;
    if (!si || !si->inst || si->failed)
        return;
    instance_t *in = si->inst;
    si->failed = true;
    snprintf(si->why, sizeof si->why, "%s", why);
    log_event(LOG_ERROR, "shim_malformed", "model=%s instance=%u reason=%s", in->model->name, in->id, why);
    if (in->life.proc)
        process_signal(in->life.proc, SIGKILL); /* its exit is a crash: restarted with the usual backoff */
}

/* The shim instance whose worker the process pid belongs to (its strongest claimant). */
static shim_inst_t *by_pid(pid_t pid)
{
    if (pid <= 0)
        return NULL;
    attrib_cache_t cache;
    attrib_cache_init(&cache);
    shim_inst_t *best = NULL;
    enum attrib_claim strongest = ATTRIB_NONE;
    list_foreach(mi, &shim_grants_state.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            enum attrib_claim cl = in->gate.shim ? attrib_claim(&in->life.ident, pid, &cache) : ATTRIB_NONE;
            if (cl > strongest) {
                strongest = cl;
                best = in->gate.shim;
            }
        }
    }
    return best;
}

static void on_closed(void *ctx, grant_conn_t *c, void *owner, bool malformed)
{
    (void)ctx;
    drop_held(c, NULL);
    list_foreach_safe(it, tmp, &shim_grants_state.asks) {
        ask_t *a = list_entry(it, ask_t, link);
        if (a->conn == c)
            ask_drop(a);
    }
    shim_inst_t *si = owner;
    if (malformed) /* before a HELLO (or a HELLO refused): whose it is, by the sender's pid */
        fail_worker(si ? si : by_pid(grant_conn_pid(c)), "malformed message on the grant socket");
    if (!si)
        return;
    unsigned slot = grant_conn_slot(c);
    if (grant_conn_is_control(c))
        shim_control_closed(si, c);
    else if (slot < SHIM_PAGE_PROCS && si->slot_conn[slot]) {
        si->slot_conn[slot] = false;
        si->conns--;
        pid_t pid = si->page ? shim_page_slot_pid(si->page, slot) : 0;
        if (pid > 0 && pid_gone(pid))
            shim_page_clear_slot(si->page, slot);
    }
    if (!si->inst && si->conns == 0)
        free(si);
}

/* ---- requests: the grant follows the booking ---------------------------------------------- */

static void on_request_event(void *ctx, enum core_event ev, void *subject)
{
    (void)ctx;
    request_t *r = subject;
    if (!r || !r->instance || !r->instance->gate.shim)
        return;
    instance_t *in = r->instance;
    shim_inst_t *si = in->gate.shim;
    if (ev != CORE_EV_REQUEST_DISPATCHED)
        return; /* an end is seen at the next refresh (the slot is released before it) */
    if (in->path.in_flight <= 1) {
        /* it was idle until now: NVML's last reading and the page agree on a still worker, so
         * the context is known before the request's first allocation (the first request
         * after a load may come before the refresh tick learned it) */
        uint64_t live = si->page ? shim_page_live(si->page) : 0;
        if (in->memory.measured > 0 && in->life.state == INST_READY && snapshot_since_idle(si))
            si->context = in->memory.measured > live ? in->memory.measured - live : 0;
        si->idle_since_ms = 0;
        si->run_since_ms = core_now();
        si->ran_alone = true;
        si->run_level = r->level;
        si->run_class = r->size_level == r->level + 1 ? r->size_class : 0;
        si->run_booked = r->mem.bytes + r->credit;
    } else {
        si->ran_alone = false;
    }
    refresh_grant(si);
}

/* ---- the worker's lifetime ------------------------------------------------------------------ */

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static const char *unavailable_for(const instance_t *inst)
{
    const model_t *m = inst->model;
    if (m->cfg->container.set)
        return "container workers do not get the shim yet";
    if (inst->memory.gpu_pos < 0)
        return "not memory-gated: no GPU memory is booked for it, so nothing to grant";
    if (shim_grants_state.unavailable[0])
        return shim_grants_state.unavailable;
    if (!shim_grants_state.sock)
        return "the grant socket is not listening";
    if (m->cfg->cuda_shim == CUDA_SHIM_AUTO && !shim_library_file_ok(m->core->cfg->gpu.cuda_library) &&
        strchr(m->core->cfg->gpu.cuda_library, '/'))
        return "no CUDA driver library";
    return NULL;
}

static void add_env(config_kv_t *env, size_t cap, size_t *n, const char *key, char *value)
{
    if (*n < cap) {
        env[*n].key = (char *)key;
        env[*n].value = value;
        (*n)++;
    }
}

int shim_grants_prepare(instance_t *inst, config_kv_t *env, size_t cap, size_t *n, char *why, size_t whylen)
{
    const model_t *m = inst->model;
    if (m->cfg->cuda_shim == CUDA_SHIM_OFF || inst->external)
        return 0;
    shim_inst_t *si = calloc(1, sizeof *si);
    if (!si) {
        snprintf(why, whylen, "out of memory");
        return m->cfg->cuda_shim == CUDA_SHIM_REQUIRED ? -1 : 0;
    }
    si->inst = inst;
    inst->gate.shim = si;
    const char *no = unavailable_for(inst);
    char err[256] = "";
    if (!no) {
        snprintf(si->page_path, sizeof si->page_path, "%s/%s-%u.page", shim_grants_state.dir, m->name, inst->id);
        uint64_t total = inst->memory.gpu_pos >= 0 ? sched_ledger()->gpus[inst->memory.gpu_pos].total : 0;
        if (shim_page_create(si->page_path, shim_grants_state.epoch, total, &si->page, err, sizeof err) != 0 ||
            getrandom(si->token, sizeof si->token, 0) != (ssize_t)sizeof si->token) {
            no = err[0] ? err : "no random bytes for its token";
            shim_page_destroy(si->page, si->page_path);
            si->page = NULL;
        }
    }
    if (no) {
        snprintf(si->why, sizeof si->why, "%s", no);
        log_event(m->cfg->cuda_shim == CUDA_SHIM_REQUIRED ? LOG_ERROR : LOG_INFO, "shim_unavailable",
                  "model=%s instance=%u reason=%s", m->name, inst->id, no);
        if (m->cfg->cuda_shim == CUDA_SHIM_REQUIRED) {
            snprintf(why, whylen, "cuda_shim: required, but %s", no);
            return -1;
        }
        return 0;
    }
    hex(si->token, sizeof si->token, si->token_hex);
    snprintf(si->wait_ms, sizeof si->wait_ms, "%llu", (unsigned long long)m->cfg->grant_wait_ms);
    const char *prev = NULL;
    for (size_t i = 0; i < *n; i++)
        if (env[i].key && strcmp(env[i].key, "LD_PRELOAD") == 0)
            prev = env[i].value;
    if (!prev)
        prev = getenv("LD_PRELOAD");
    snprintf(si->preload, sizeof si->preload, "%s%s%s", shim_grants_state.library, prev && prev[0] ? ":" : "", prev ? prev : "");
    refresh_grant(si);
    add_env(env, cap, n, "LD_PRELOAD", si->preload); /* after the model's own: it wins */
    add_env(env, cap, n, SHIM_ENV_PAGE, si->page_path);
    add_env(env, cap, n, SHIM_ENV_SOCKET, shim_grants_state.sock_path);
    add_env(env, cap, n, SHIM_ENV_TOKEN, si->token_hex);
    add_env(env, cap, n, SHIM_ENV_WAIT_MS, si->wait_ms);
    static char g_park_on[] = "1";
    if (m->cfg->shim_park)
        add_env(env, cap, n, SHIM_ENV_PARK, g_park_on);
    return 0;
}

void shim_grants_exited(instance_t *inst)
{
    shim_inst_t *si = inst->gate.shim;
    if (!si)
        return;
    list_foreach_safe(it, tmp, &shim_grants_state.asks) {
        ask_t *a = list_entry(it, ask_t, link);
        if (a->si == si) {
            ask_t copy = *a;
            ask_drop(a);
            refuse(copy.si, copy.conn, copy.seq, copy.bytes, SHIM_REFUSE_STOPPING);
        }
    }
    drop_held(NULL, si);
    sched_book_grant_drop(inst);
    si->extra_run = 0;
    shim_page_orphan(si->page);
}

void shim_grants_free(instance_t *inst)
{
    shim_inst_t *si = inst->gate.shim;
    if (!si)
        return;
    shim_grants_exited(inst);
    inst->gate.shim = NULL;
    si->inst = NULL;
    shim_page_destroy(si->page, si->page_path[0] ? si->page_path : NULL);
    si->page = NULL;
    if (si->conns == 0)
        free(si);
    /* else freed by the last connection's close (on_closed); the worker is gone, so they close */
}

uint64_t shim_grants_context(const instance_t *inst)
{
    return inst->gate.shim ? inst->gate.shim->context : 0;
}

bool shim_grants_figures(const instance_t *inst, shim_figures_t *out)
{
    const shim_inst_t *si = inst->gate.shim;
    memset(out, 0, sizeof *out);
    out->why = "";
    if (!si) {
        out->state = "off";
        return inst->model->cfg->cuda_shim != CUDA_SHIM_OFF && !inst->external;
    }
    shim_page_figures_t f = {0};
    if (si->page)
        shim_page_read(si->page, &f);
    out->grant = f.grant;
    out->live = f.live;
    out->parked = f.parked;
    out->context = si->context;
    out->extra = inst->memory.grant_extra.gpu >= 0 ? inst->memory.grant_extra.bytes : 0;
    out->processes = f.attached + f.detached;
    out->asks = si->asks;
    out->granted = si->granted;
    out->waited = si->waited;
    out->refused = si->refused;
    out->mismatches = si->mismatches;
    out->wait_ms_total = si->wait_ms_total;
    if (si->failed) {
        out->state = "failed";
        out->why = si->why;
    } else if (!si->page) {
        out->state = "unavailable";
        out->why = si->why;
    } else if (f.detached) {
        out->state = "detached";
    } else if (f.attached) {
        out->state = "attached";
    } else {
        out->state = "waiting";
    }
    return true;
}

void shim_grants_totals(shim_totals_t *out)
{
    *out = shim_grants_state.totals;
    out->library = shim_grants_state.library;
}
