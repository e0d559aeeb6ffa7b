/* conn_state: a client connection's state changes, checked against the state machine of
 * conn.h (HEAD -> BODY -> ACTIVE -> HEAD ..., CLOSING from anywhere, terminal) and logged at
 * debug level (see conn_int.h). */
#include "net/conn_int.h"

#include "common/check.h"
#include "common/log.h"

static const char *const conn_state_name[] = {"head", "body", "active", "closing"};

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
        log_event(LOG_DEBUG, "conn_state", "peer=%s from=%s to=%s line=%d", c->peer, conn_state_name[c->state],
                  conn_state_name[s], line);
    c->state = s;
}
