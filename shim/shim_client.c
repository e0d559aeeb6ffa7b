/*
 * shim_client: grant page and grant socket, the shim's side (shim_client.h).
 */
#include "shim_client.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/hex.h"
#include "gpu/shim_abi.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static shim_page_t *g_page;          /* NULL: inert */
static uint8_t g_token[SHIM_TOKEN_LEN];
static char g_sock_path[4096];
static uint64_t g_wait_ms = 5000;

/* This process's slot: (pid << 32) | (slot + 1), 0 before the first claim. One word, so a
 * thread reads the pid and the slot together; written only under g_slot_lock (a claim). A
 * forked child sees its parent's pid in it and claims its own. */
static _Atomic uint64_t g_claim;
static pthread_mutex_t g_slot_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t g_sock_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1;                /* this process's connection */
static bool g_detached;
static uint64_t g_last_try_ms;
static uint32_t g_seq;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void after_fork_child(void)
{
    if (g_fd >= 0)
        close(g_fd); /* the parent's connection stays the parent's */
    g_fd = -1;
    atomic_store(&g_claim, 0);
    g_detached = false;
    g_last_try_ms = 0;
    pthread_mutex_init(&g_sock_lock, NULL);
    pthread_mutex_init(&g_slot_lock, NULL);
}

static void setup(void)
{
    const char *page = getenv(SHIM_ENV_PAGE), *sock = getenv(SHIM_ENV_SOCKET), *tok = getenv(SHIM_ENV_TOKEN);
    const char *wait = getenv(SHIM_ENV_WAIT_MS);
    if (!page || !sock || !tok || strlen(tok) != 2 * SHIM_TOKEN_LEN || strlen(sock) >= sizeof g_sock_path)
        return;
    for (unsigned i = 0; i < SHIM_TOKEN_LEN; i++) {
        int hi = hex_value(tok[2 * i]), lo = hex_value(tok[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return;
        g_token[i] = (uint8_t)(hi << 4 | lo);
    }
    if (wait && *wait)
        g_wait_ms = strtoull(wait, NULL, 10);
    snprintf(g_sock_path, sizeof g_sock_path, "%s", sock);
    int fd = open(page, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    void *m = mmap(NULL, SHIM_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    shim_page_t *p = m;
    if (p->magic != SHIM_ABI_MAGIC || p->version != SHIM_ABI_VERSION) {
        munmap(m, SHIM_PAGE_SIZE);
        return;
    }
    g_page = p;
    pthread_atfork(NULL, NULL, after_fork_child);
}

bool shim_client_active(void)
{
    pthread_once(&g_once, setup);
    return g_page != NULL;
}

/* The slot index g_claim holds for pid, or -1. */
static int claimed_slot(pid_t pid)
{
    uint64_t c = atomic_load(&g_claim);
    return c && (pid_t)(c >> 32) == pid ? (int)(uint32_t)c - 1 : -1;
}

/* This process's slot (claimed at first use), or NULL when the page is full. The claim is
 * made under g_slot_lock, so a process's threads making their first allocations at once take
 * ONE slot between them (two slots of one pid would make vramd clear one as an exec'd
 * process's, with its live bytes). */
static shim_proc_slot_t *my_slot(void)
{
    pid_t pid = getpid();
    int slot = claimed_slot(pid);
    if (slot >= 0)
        return &g_page->procs[slot];
    pthread_mutex_lock(&g_slot_lock);
    slot = claimed_slot(pid); /* another thread's claim while this one waited */
    for (unsigned i = 0; slot < 0 && i < SHIM_PAGE_PROCS; i++) {
        uint32_t expect = 0;
        if (atomic_compare_exchange_strong(&g_page->procs[i].pid, &expect, (uint32_t)pid)) {
            atomic_store(&g_page->procs[i].state, SHIM_PROC_ATTACHED);
            atomic_store(&g_claim, (uint64_t)(uint32_t)pid << 32 | (i + 1));
            slot = (int)i;
        }
    }
    pthread_mutex_unlock(&g_slot_lock);
    return slot >= 0 ? &g_page->procs[slot] : NULL;
}

static void slot_add(shim_proc_slot_t *s, uint64_t n)
{
    if (!s)
        return;
    uint64_t live = atomic_fetch_add(&s->live, n) + n;
    uint64_t peak = atomic_load(&s->peak);
    while (live > peak && !atomic_compare_exchange_weak(&s->peak, &peak, live)) {
    }
    atomic_store(&s->updated_ns, mono_ns());
}

static void sub_floor(_Atomic uint64_t *v, uint64_t n)
{
    uint64_t cur = atomic_load(v);
    while (!atomic_compare_exchange_weak(v, &cur, cur > n ? cur - n : 0)) {
    }
}

static void detach(shim_proc_slot_t *s)
{
    if (g_fd >= 0)
        close(g_fd);
    g_fd = -1;
    g_detached = true;
    g_last_try_ms = mono_ms();
    if (s)
        atomic_store(&s->state, SHIM_PROC_DETACHED);
}

static int send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* One whole message within timeout_ms (forever when it is UINT64_MAX); -1 on a timeout, an
 * error or EOF. */
static int recv_msg(int fd, shim_msg_t *m, uint64_t timeout_ms)
{
    char *p = (char *)m;
    size_t have = 0;
    bool forever = timeout_ms == UINT64_MAX;
    uint64_t end = forever ? 0 : mono_ms() + timeout_ms;
    while (have < sizeof *m) {
        uint64_t now = mono_ms();
        if (!forever && now >= end)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, forever ? -1 : (int)(end - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t n = recv(fd, p + have, sizeof *m - have, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    return shim_msg_valid(m);
}

/* Connect and say hello (HELLO, or HELLO_CONTROL); the connection when vramd answered
 * HELLO_OK, else -1. */
static int connect_as(enum shim_msg_type hello, int slot)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa;
    int dirfd = -1;
    if (shim_socket_address(g_sock_path, &sa, &dirfd) != 0) { /* too long even through its directory */
        close(fd);
        return -1;
    }
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (dirfd >= 0)
        close(dirfd);
    shim_msg_t m;
    shim_msg_init(&m, hello);
    m.aux = (uint64_t)slot;
    memcpy(m.token, g_token, SHIM_TOKEN_LEN);
    if (rc != 0 || send_all(fd, &m, sizeof m) != 0 || recv_msg(fd, &m, g_wait_ms + SHIM_ANSWER_SLACK_MS) != 0 ||
        m.type != SHIM_MSG_HELLO_OK) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Called with g_sock_lock held. */
static int connect_hello(int slot)
{
    g_fd = connect_as(SHIM_MSG_HELLO, slot);
    return g_fd >= 0 ? 0 : -1;
}

/* Past the grant: ask vramd. 0 granted (already added to live), -1 refused, 1 detached
 * (the caller adds it unchecked). */
static int ask(shim_proc_slot_t *s, uint64_t n)
{
    pthread_mutex_lock(&g_sock_lock);
    int slot = claimed_slot(getpid());
    if (slot < 0) { /* a forked child before its first own slot */
        pthread_mutex_unlock(&g_sock_lock);
        return 1;
    }
    if (g_detached && mono_ms() - g_last_try_ms < SHIM_RECONNECT_MS) {
        pthread_mutex_unlock(&g_sock_lock);
        return 1;
    }
    if (g_fd < 0) {
        if (connect_hello(slot) != 0) {
            detach(s);
            pthread_mutex_unlock(&g_sock_lock);
            return 1;
        }
        g_detached = false;
        atomic_store(&s->state, SHIM_PROC_ATTACHED);
    }
    shim_msg_t m;
    shim_msg_init(&m, SHIM_MSG_ASK);
    m.seq = ++g_seq;
    m.bytes = n;
    m.aux = atomic_load(&g_page->live_total);
    atomic_fetch_add(&s->asks, 1);
    uint64_t t0 = mono_ns();
    shim_msg_t r;
    if (send_all(g_fd, &m, sizeof m) != 0 || recv_msg(g_fd, &r, g_wait_ms + SHIM_ANSWER_SLACK_MS) != 0 ||
        r.seq != m.seq || (r.type != SHIM_MSG_GRANT && r.type != SHIM_MSG_REFUSE)) {
        detach(s);
        pthread_mutex_unlock(&g_sock_lock);
        return 1;
    }
    if (mono_ns() - t0 > 1000000)
        atomic_fetch_add(&s->waits, 1);
    int rc;
    if (r.type == SHIM_MSG_GRANT) {
        atomic_fetch_add(&g_page->live_total, n);
        slot_add(s, n);
        rc = 0;
    } else {
        atomic_fetch_add(&s->refusals, 1);
        rc = -1;
    }
    pthread_mutex_unlock(&g_sock_lock);
    return rc;
}

int shim_client_charge(uint64_t n)
{
    if (!shim_client_active())
        return 0;
    shim_proc_slot_t *s = my_slot();
    if (!s) /* the page's slots are all taken: unchecked, uncounted */
        return 0;
    for (;;) {
        uint64_t cur = atomic_load(&g_page->live_total);
        uint64_t grant = atomic_load(&g_page->grant);
        if (cur + n <= grant) {
            if (atomic_compare_exchange_weak(&g_page->live_total, &cur, cur + n)) {
                slot_add(s, n);
                return 0;
            }
            continue;
        }
        if (!atomic_load(&g_page->vramd_alive))
            break;
        int rc = ask(s, n);
        if (rc <= 0)
            return rc;
        break;
    }
    atomic_fetch_add(&g_page->live_total, n); /* detached: counted, unchecked */
    slot_add(s, n);
    return 0;
}

void shim_client_uncharge(uint64_t n)
{
    if (!shim_client_active())
        return;
    shim_proc_slot_t *s = my_slot();
    if (!s)
        return;
    sub_floor(&g_page->live_total, n);
    sub_floor(&s->live, n);
    atomic_store(&s->updated_ns, mono_ns());
}

void shim_client_note_alloc(void)
{
    if (!shim_client_active())
        return;
    shim_proc_slot_t *s = my_slot();
    if (s)
        atomic_fetch_add(&s->allocs, 1);
}

bool shim_client_view(uint64_t *grant, uint64_t *live)
{
    if (!shim_client_active() || g_detached)
        return false;
    *grant = atomic_load(&g_page->grant);
    *live = atomic_load(&g_page->live_total);
    return *grant > 0;
}

bool shim_client_park_wanted(void)
{
    if (!shim_client_active())
        return false;
    const char *v = getenv(SHIM_ENV_PARK);
    return v && strcmp(v, "1") == 0;
}

int shim_client_control_open(void)
{
    shim_proc_slot_t *s = shim_client_active() ? my_slot() : NULL;
    if (!s)
        return -1;
    return connect_as(SHIM_MSG_HELLO_CONTROL, (int)(s - g_page->procs));
}

int shim_client_control_recv(int fd, shim_msg_t *m) { return recv_msg(fd, m, UINT64_MAX); }

int shim_client_control_send(int fd, const shim_msg_t *m) { return send_all(fd, m, sizeof *m); }

uint64_t shim_client_live(void)
{
    if (!shim_client_active())
        return 0;
    shim_proc_slot_t *s = my_slot();
    return s ? atomic_load(&s->live) : 0;
}

void shim_client_move(uint64_t n, bool to_host)
{
    if (!shim_client_active())
        return;
    shim_proc_slot_t *s = my_slot();
    if (!s)
        return;
    if (to_host) {
        sub_floor(&g_page->live_total, n);
        sub_floor(&s->live, n);
        atomic_fetch_add(&s->parked, n);
    } else { /* vramd booked it before it asked for the restore */
        sub_floor(&s->parked, n);
        atomic_fetch_add(&g_page->live_total, n);
        slot_add(s, n);
    }
    atomic_store(&s->updated_ns, mono_ns());
}
