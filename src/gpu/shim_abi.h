/*
 * shim_abi: what vramd and libvramd-cuda.so (the CUDA allocation shim, shim/) share: the
 * grant page of a worker instance and the messages of the grant socket. Header only, no
 * dependencies but C11 atomics, included by both sides; a change of any layout below bumps
 * SHIM_ABI_VERSION (a shim that meets another version detaches: the worker runs as without it).
 *
 * The grant page (one file per supervised instance, SHIM_PAGE_SIZE bytes, mapped MAP_SHARED
 * by vramd and by every process of the worker; its path in $VRAMD_SHIM_PAGE):
 *   vramd writes  magic, version, epoch, gpu_total once before the worker starts;
 *                 grant (bytes every process of the instance together may hold without
 *                 asking) whenever its booking changes; vramd_alive.
 *   a shim writes its own process slot (claimed by compare-and-swap of pid 0 -> its pid) and
 *                 live_total (the sum of every slot's live), both with atomic adds.
 * Fast path of an allocation of n bytes: cur = live_total; while cur + n <= grant:
 *   CAS(live_total, cur, cur + n) -> go ahead (no system call). Otherwise the slow path: an
 *   ASK on the grant socket, the thread blocks until GRANT (vramd raised grant by at least n
 *   first; the shim then adds n to live_total unconditionally) or REFUSE
 *   (CUDA_ERROR_OUT_OF_MEMORY returned to the caller). A driver call that then fails gives
 *   its n back (atomic sub). A free gives its bytes back. live_total may exceed grant (vramd
 *   lowered the grant when requests ended, or a detached shim): only new allocations ask.
 * Dead processes: only vramd clears a slot whose pid is gone (and subtracts its live from
 *   live_total), so counters never drift from a crash.
 *
 * The grant socket (a Unix stream socket; path in $VRAMD_SHIM_SOCKET; one connection per
 * shim process, opened at its first slow path or at start): fixed-size shim_msg_t messages,
 * both ways, native byte order (same host). The first message is HELLO with the instance's
 * token ($VRAMD_SHIM_TOKEN, 32 hex characters, as bytes) and the slot index in aux; vramd
 * answers HELLO_OK or closes. A message with a wrong magic, version, type, or a token that
 * names no instance makes vramd close that connection and count it (a worker whose shim
 * sends garbage is failed, never vramd). vramd learns the sender's pid from SO_PEERCRED (the
 * host pid, also for a process in a container), not from the message.
 * The control connection (the shim's park tier, docs/shim.md "Parking through the shim"): a
 * process whose allocations are parkable ($VRAMD_SHIM_PARK=1) opens a second connection at its
 * first allocation, from a thread of its own, with HELLO_CONTROL (token, slot in aux) and then
 * only listens: vramd sends PARK or RESTORE (seq; one command at a time per connection), the
 * shim answers PARK_DONE (bytes = bytes copied to host memory, aux = copy time in us),
 * PARK_FAILED (aux = enum shim_park_refusal; the process runs on as before) or RESTORE_DONE /
 * RESTORE_FAILED (aux = the same enum; the process cannot run on: vramd stops it). An answer
 * that names no command of that connection is malformed. While parked, the slot's live is 0
 * and its parked bytes are what waits in pinned host memory.
 * Timeouts: vramd answers every ASK within the instance's grant_wait (+ its own reaction);
 * a shim that gets no answer within grant_wait + SHIM_ANSWER_SLACK_MS, or loses the
 * connection, detaches (state SHIM_PROC_DETACHED: allocations go straight to the driver) and
 * tries to connect again at most once per SHIM_RECONNECT_MS.
 */
#ifndef VRAMD_GPU_SHIM_ABI_H
#define VRAMD_GPU_SHIM_ABI_H

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SHIM_ABI_MAGIC 0x48534d56u /* "VMSH" little-endian */
#define SHIM_ABI_VERSION 2u
#define SHIM_PAGE_SIZE 8192u
#define SHIM_PAGE_PROCS 64u        /* processes of one instance that can use the shim at once */
#define SHIM_TOKEN_LEN 16u         /* bytes; 32 hex characters in $VRAMD_SHIM_TOKEN */
#define SHIM_ANSWER_SLACK_MS 2000u
#define SHIM_RECONNECT_MS 1000u
#define SHIM_PARK_GATE_MS 2000u               /* a park waits this long for allocation calls to stop */
#define SHIM_PARK_UNMOVABLE_MAX (64ull << 20) /* live bytes it cannot move that stay on the GPU, at most */

/* Environment a supervised worker gets (workers/ sets them; the shim reads them). */
#define SHIM_ENV_PAGE "VRAMD_SHIM_PAGE"
#define SHIM_ENV_SOCKET "VRAMD_SHIM_SOCKET"
#define SHIM_ENV_TOKEN "VRAMD_SHIM_TOKEN"
#define SHIM_ENV_WAIT_MS "VRAMD_SHIM_GRANT_WAIT_MS" /* the instance's grant_wait, in ms */
#define SHIM_ENV_PARK "VRAMD_SHIM_PARK"            /* "1": back allocations so they can be parked */

enum shim_proc_state {
    SHIM_PROC_FREE = 0,     /* slot unused */
    SHIM_PROC_ATTACHED = 1, /* counting, connected (or not yet needing) the grant socket */
    SHIM_PROC_DETACHED = 2  /* counting, but allocations past the grant go straight to the driver */
};

typedef struct shim_proc_slot {
    _Atomic uint32_t pid;        /* 0 = free; the process's pid in its own namespace */
    _Atomic uint32_t state;      /* enum shim_proc_state */
    _Atomic uint64_t live;       /* device bytes this process holds through the shim now */
    _Atomic uint64_t peak;       /* the most live has been */
    _Atomic uint64_t allocs;     /* allocation calls seen (every family member) */
    _Atomic uint64_t asks;       /* slow-path asks sent */
    _Atomic uint64_t waits;      /* asks that vramd held before granting */
    _Atomic uint64_t refusals;   /* asks refused (CUDA_ERROR_OUT_OF_MEMORY returned) */
    _Atomic uint64_t updated_ns; /* CLOCK_MONOTONIC of the last change of live */
    _Atomic uint64_t parked;     /* device bytes this process holds in host memory (parked) now */
} shim_proc_slot_t;

typedef struct shim_page {
    uint32_t magic;               /* SHIM_ABI_MAGIC, written last by vramd when set up */
    uint32_t version;             /* SHIM_ABI_VERSION */
    uint64_t epoch;               /* vramd's start (a random 64-bit id): a new vramd, a new page */
    uint64_t gpu_total;           /* the card's total bytes (NVML), 0 = not known */
    _Atomic uint64_t grant;       /* bytes the instance may hold without asking */
    _Atomic uint64_t live_total;  /* sum of the slots' live */
    _Atomic uint32_t vramd_alive; /* 1 while the vramd that made the page serves it */
    uint32_t reserved0;
    _Atomic uint64_t grant_changes; /* bumped by vramd at each change of grant */
    uint64_t reserved[10];
    shim_proc_slot_t procs[SHIM_PAGE_PROCS];
} shim_page_t;

_Static_assert(sizeof(shim_page_t) <= SHIM_PAGE_SIZE, "the grant page fits its file");

enum shim_msg_type {
    SHIM_MSG_HELLO = 1,    /* shim -> vramd: token; aux = slot index */
    SHIM_MSG_HELLO_OK = 2, /* vramd -> shim */
    SHIM_MSG_ASK = 3,      /* shim -> vramd: bytes = the allocation; aux = live_total when asking; seq */
    SHIM_MSG_GRANT = 4,    /* vramd -> shim: seq; bytes = the grant now (already in the page) */
    SHIM_MSG_REFUSE = 5,   /* vramd -> shim: seq; aux = enum shim_refuse_reason */
    SHIM_MSG_HELLO_CONTROL = 6,  /* shim -> vramd: token; aux = slot index: a control connection */
    SHIM_MSG_PARK = 7,           /* vramd -> shim: seq */
    SHIM_MSG_RESTORE = 8,        /* vramd -> shim: seq */
    SHIM_MSG_PARK_DONE = 9,      /* shim -> vramd: seq; bytes moved to host; aux = copy time (us) */
    SHIM_MSG_PARK_FAILED = 10,   /* shim -> vramd: seq; aux = enum shim_park_refusal (still resident) */
    SHIM_MSG_RESTORE_DONE = 11,  /* shim -> vramd: seq; bytes moved back; aux = copy time (us) */
    SHIM_MSG_RESTORE_FAILED = 12, /* shim -> vramd: seq; aux = enum shim_park_refusal */
    SHIM_MSG_TYPE_MAX = 12
};

/* Why the shim did not park (or restore) a process. */
enum shim_park_refusal {
    SHIM_PARK_UNMOVABLE = 1, /* it holds memory the shim did not map itself (async pools, managed,
                                pitched, its own cuMemCreate mappings) */
    SHIM_PARK_HOST_MEMORY = 2, /* no pinned host memory for the copies */
    SHIM_PARK_DRIVER = 3,      /* a driver call failed (the process is as it was, for a park) */
    SHIM_PARK_STATE = 4,       /* parked already (PARK) or not parked (RESTORE) */
    SHIM_PARK_GPU_MEMORY = 5,  /* RESTORE: the device memory could not be created again */
    SHIM_PARK_BUSY = 6,        /* allocation calls did not stop within SHIM_PARK_GATE_MS */
    SHIM_PARK_REFUSAL_MAX = 6
};

enum shim_refuse_reason {
    SHIM_REFUSE_NO_ROOM = 1,   /* no room within grant_wait */
    SHIM_REFUSE_DEADLOCK = 2,  /* workers waiting for each other: the younger request's ask */
    SHIM_REFUSE_TOO_BIG = 3,   /* larger than the card's capacity for vramd's workers */
    SHIM_REFUSE_STOPPING = 4,  /* the instance is stopping or parking */
    SHIM_REFUSE_BUSY = 5,      /* too many asks waiting (bounded) */
    SHIM_REFUSE_MAX = 5
};

typedef struct shim_msg {
    uint32_t magic;   /* SHIM_ABI_MAGIC */
    uint16_t version; /* SHIM_ABI_VERSION */
    uint16_t type;    /* enum shim_msg_type */
    uint32_t seq;     /* the ask's number (per connection), echoed in its answer */
    uint32_t flags;   /* 0 */
    uint64_t bytes;
    uint64_t aux;
    uint8_t token[SHIM_TOKEN_LEN];
    uint64_t reserved[2]; /* 0 */
} shim_msg_t;

_Static_assert(sizeof(shim_msg_t) == 64, "one message is 64 bytes");

/* 0 when m is a well-formed message of vramd's version (magic, version, type in range,
 * flags and reserved zero), -1 otherwise. */
static inline int shim_msg_valid(const shim_msg_t *m)
{
    if (m->magic != SHIM_ABI_MAGIC || m->version != SHIM_ABI_VERSION)
        return -1;
    if (m->type < SHIM_MSG_HELLO || m->type > SHIM_MSG_TYPE_MAX || m->flags != 0)
        return -1;
    if (m->reserved[0] != 0 || m->reserved[1] != 0)
        return -1;
    return 0;
}

static inline void shim_msg_init(shim_msg_t *m, enum shim_msg_type type)
{
    *m = (shim_msg_t){.magic = SHIM_ABI_MAGIC, .version = SHIM_ABI_VERSION, .type = (uint16_t)type};
}

/* The socket's address for path (both sides: vramd binds, the shim connects): path itself,
 * or /proc/self/fd/N/NAME through its directory (opened O_PATH into *dirfd; the caller closes
 * it after bind or connect) when path is longer than sun_path holds, as a deep state_dir
 * makes it. 0, or -1 with errno (ENAMETOOLONG: not even that fits). Inline: the shim links
 * nothing of vramd. */
static inline int shim_socket_address(const char *path, struct sockaddr_un *sa, int *dirfd)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    *dirfd = -1;
    size_t len = strlen(path);
    if (len < sizeof sa->sun_path) {
        memcpy(sa->sun_path, path, len + 1);
        return 0;
    }
    char dir[4096], base[4096];
    if (len >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(dir, path, len + 1);
    memcpy(base, path, len + 1);
    *dirfd = open(dirname(dir), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*dirfd < 0)
        return -1;
    int n = snprintf(sa->sun_path, sizeof sa->sun_path, "/proc/self/fd/%d/%s", *dirfd, basename(base));
    if (n < 0 || (size_t)n >= sizeof sa->sun_path) {
        close(*dirfd);
        *dirfd = -1;
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

#endif
