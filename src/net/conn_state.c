/* conn_state: a client connection's state machine: the states' names, the legal
 * transitions (conn.h draws them) and the one setter, which checks and logs each change (see
 * conn_int.h). */
#include "net/conn_int.h"

#include "common/check.h"
#include "common/log.h"

static const char *conn_state_name(enum conn_state s)
{
    static const char *const n[] = {"head", "body", "active", "closing"};
    return n[s];
}

/* allowed[from]: the states `from` may change to (CLOSING is terminal) */
static const unsigned conn_allowed[] = {
    [CONN_HEAD] = 1u << CONN_BODY | 1u << CONN_ACTIVE | 1u << CONN_CLOSING,
    [CONN_BODY] = 1u << CONN_ACTIVE | 1u << CONN_CLOSING,
    [CONN_ACTIVE] = 1u << CONN_HEAD | 1u << CONN_CLOSING,
    [CONN_CLOSING] = 0,
};

void conn_set_state_at(conn_t *c, enum conn_state s, int line)
{
    if (c->state == s)
        return;
    CHECK_IF(!(conn_allowed[c->state] & (1u << s)));
    if (log_enabled(LOG_DEBUG))
        log_event(LOG_DEBUG, "conn_state", "peer=%s from=%s to=%s line=%d", c->peer, conn_state_name(c->state),
                  conn_state_name(s), line);
    c->state = s;
}
