/*
 * agent_line: the pure half of vramd's HAProxy agent-check (fleet.agent_listen): what
 * HAProxy's `agent-send` string asks, how a weight is derived from what this host can
 * admit now, and the one line answered. No I/O, no allocation, no global state (fuzzed:
 * tests/fuzz/fuzz_agent_line.c; the socket side is fleet/agent.c).
 *
 * The agent-send string (HAProxy sends it verbatim on connect, if configured):
 *   ""  (nothing, or an empty line)   the whole host
 *   "host"                            the whole host
 *   "model=NAME" or "NAME"            one model (a name or an alias of this host's config),
 *                                     every way it could start here (one tier)
 *   "model=NAME resident"             only where it starts without a load (first tier)
 *   "model=NAME load"                 where it could be loaded, or queue (backup tier)
 * Words are separated by blanks (spaces, tabs); leading and trailing blanks and one end of
 * line (LF, CR or CRLF) are ignored; what follows the first end of line is ignored too
 * (HAProxy sends one line). A NAME is 1 to AGENT_NAME_MAX bytes of A-Z a-z 0-9 . _ - : /
 * @ +; anything else (a third word, an unknown second one, a control byte, an unknown
 * key=value, a name too long, a line longer than AGENT_REQ_MAX) is refused with a message,
 * which the agent answers as `down #bad agent-send: ...`.
 *
 * The answer (HAProxy's doc/configuration.txt, "agent-check"): words separated by spaces,
 *   "<weight>% maxconn:<n> ready up"          admitting (weight 0..100)
 *   "0% maxconn:<n> drain"                    vramd is draining (no new work)
 *   "0% maxconn:<n> ready down #<reason>"     cannot serve it here (reason: the rest of
 *                                             the line, shown on HAProxy's stats page)
 * always ending in "\n". Every answer names the admin state (ready/drain), since HAProxy
 * lets only the agent undo its own drain. The weight is a percentage of the server's
 * configured weight: HAProxy computes weight * pct / 100 in integers, so servers are
 * declared with `weight 100` (contrib/haproxy/haproxy.cfg).
 *
 * The weight (agent_weight), for one model, from what a new request would meet now (the
 * room), by tier:                                             one tier  resident  load
 *   RESIDENT  an instance is ready with a free slot and the request's memory is free:
 *             R = 50 + 50 * free slots / slots of the ready instances   R        R       100
 *   WARMING   an instance is starting, reloading or resuming and will take it: 10  10      50
 *   QUEUE     loaded here, every slot busy, and the predicted wait for a
 *             slot (queue ahead / slots x learned run time) is at most two
 *             learned load times (a load elsewhere that evicts another model
 *             costs that model a load too): waiting here is cheaper:   10       0       Q
 *             Q = 100 - 80 * wait / (two load times): 100 with no wait (or no
 *             load time learned yet), 20 at two loads, so that among hosts
 *             where the model queues the shorter queue weighs more (with
 *             HAProxy's hash-balance-factor the weights are shares of the work
 *             in flight; equal weights would send all of it to the hash host)
 *   PARKED    an instance sits unloaded (reload hook) or parked in host
 *             memory (sleep, checkpoint), and its return fits:          10       0       50
 *   COLD_FITS a new instance fits now without evicting anything,
 *             s = (free - need) / capacity:                    2 + 8s   0       20 + 40s
 *   COLD_EVICT a new instance fits once idle models are evicted:        1        0       2
 *   WAIT      nothing can start here now: behind vramd's own work       0        0       1
 *             (running requests, other models), or blocked by memory
 *             vramd does not manage (foreign_blocked: the GPU's capacity
 *             less foreign use is below the need)                       0        0       0
 *   FULL      its queue is full:                                        0        0       0
 * With HAProxy's weighted round robin, one tier: a model loaded on one host keeps nearly
 * all of its requests there (100 against 1..10) until that host is saturated (0). Two
 * tiers (the resident answer on the servers, the load answer on `backup` servers of the
 * same hosts with `option allbackups`; contrib/haproxy/haproxy.cfg): every request goes
 * where the model is loaded and has room, and only when no such host is left does HAProxy
 * turn to the backups: the host where it is loaded, when waiting there for a slot is
 * cheaper than a load (100), hosts with free memory by how much (20..60), a host that
 * would have to evict another model barely (2: the evicted model reloads later, somewhere),
 * and when nothing can start anywhere, the hosts busy with their own work (1) rather than
 * fail; a host whose GPU is taken by memory vramd does not manage gets none of it (0).
 * For the whole host: 100 * free to admit / (total - headroom) summed over its GPUs (100
 * when it has none), at least 1 while any memory is free.
 */
#ifndef VRAMD_FLEET_AGENT_LINE_H
#define VRAMD_FLEET_AGENT_LINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_REQ_MAX 256     /* bytes of agent-send read, end of line included */
#define AGENT_NAME_MAX 128    /* bytes of a model name in it */
#define AGENT_REASON_MAX 200  /* bytes of a down reason (cut, never split in a word's middle) */
#define AGENT_LINE_MAX 320    /* bytes of an answer line, "\n" and NUL included */
#define AGENT_QUEUE_LOADS 2   /* QUEUE while the predicted wait <= this many learned load times */

enum agent_target { AGENT_HOST = 0, AGENT_MODEL = 1 };
enum agent_tier { AGENT_TIER_ONE = 0, AGENT_TIER_RESIDENT = 1, AGENT_TIER_LOAD = 2 };

typedef struct agent_req {
    enum agent_target target;
    enum agent_tier tier;          /* AGENT_MODEL only */
    char name[AGENT_NAME_MAX + 1]; /* AGENT_MODEL: NUL-terminated */
} agent_req_t;

/* Parse what HAProxy sent (len bytes, any bytes). 0 with *out set, or -1 with a message in
 * err (never empty, no control bytes) and *out left as the host. */
int agent_parse_request(const char *buf, size_t len, agent_req_t *out, char *err, size_t errlen);
/* Has buf[0..len) a complete request line (an LF or a CR in it)? */
bool agent_request_complete(const char *buf, size_t len);

enum agent_room {
    AGENT_ROOM_RESIDENT = 0,
    AGENT_ROOM_WARMING,
    AGENT_ROOM_QUEUE,
    AGENT_ROOM_PARKED,
    AGENT_ROOM_COLD_FITS,
    AGENT_ROOM_COLD_EVICT,
    AGENT_ROOM_WAIT,
    AGENT_ROOM_FULL,
};

/* What the agent found, for agent_weight and agent_format. */
typedef struct agent_figures {
    bool draining;
    bool down;
    char reason[AGENT_REASON_MAX + 1]; /* when down */
    bool host;               /* the whole host (free/capacity), not one model */
    enum agent_tier tier;    /* one model: which answer */
    enum agent_room room;    /* one model */
    bool foreign_blocked;    /* WAIT: memory vramd does not manage keeps it from ever fitting now */
    unsigned slots_free;     /* RESIDENT: free slots of its ready instances */
    unsigned slots_ready;    /* RESIDENT: slots of its ready instances */
    uint64_t wait_ms;        /* QUEUE: predicted wait for a slot here */
    uint64_t load_ms;        /* QUEUE: learned load time (0: none learned yet) */
    uint64_t free;           /* bytes free to admit (host: summed; model: its best GPU) */
    uint64_t need;           /* model: bytes a new instance and one request need */
    uint64_t capacity;       /* bytes (host: summed total - headroom; model: that GPU's) */
    unsigned maxconn;        /* what HAProxy may send at once (at least 1) */
} agent_figures_t;

/* The weight in percent (0..100) for these figures; 0 when down or draining. */
unsigned agent_weight(const agent_figures_t *f);
/* Write the answer line (ends in "\n", NUL-terminated, at most AGENT_LINE_MAX bytes with
 * the NUL). Returns its length without the NUL. out must hold AGENT_LINE_MAX bytes. */
size_t agent_format(const agent_figures_t *f, char out[AGENT_LINE_MAX]);
/* Set f down with a reason (printf-like; control bytes become spaces, cut to fit). */
void agent_set_down(agent_figures_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *agent_room_name(enum agent_room r);

#endif
