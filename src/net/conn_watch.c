/* conn_watch: what the kernel knows of a client socket, read without reading from it, and
 * which lingering connection gives its slot at the cap (see conn_int.h). */
#include "net/conn_int.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>

#include "core/core.h"

bool conn_peer_closed(const uv_tcp_t *tcp)
{
#ifdef TCP_INFO
    uv_os_fd_t fd;
    if (uv_fileno((const uv_handle_t *)tcp, &fd) != 0)
        return false;
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return false;
    /* CLOSE_WAIT: the peer's FIN arrived (bytes before it may still be unread); CLOSE: a
     * RST arrived. */
    return ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_CLOSE;
#else
    (void)tcp;
    return false;
#endif
}

size_t conn_send_waiting(const uv_tcp_t *tcp)
{
    return uv_stream_get_write_queue_size((const uv_stream_t *)tcp);
}

void conn_send_queued(conn_send_watch_t *w, const uv_tcp_t *tcp, size_t len, uint64_t now_ms)
{
    if (conn_send_waiting(tcp) == 0) {
        /* nothing was waiting: the stall clock starts now */
        w->flushed_seen = w->queued_total;
        w->progress_ms = now_ms;
    }
    w->queued_total += len;
}

uint64_t conn_send_stalled_ms(conn_send_watch_t *w, const uv_tcp_t *tcp, uint64_t now_ms)
{
    size_t waiting = conn_send_waiting(tcp);
    if (waiting == 0)
        return 0;
    /* libuv's write queue size falls as the kernel takes bytes, partial writes included */
    uint64_t flushed = w->queued_total - waiting;
    if (flushed != w->flushed_seen) {
        w->flushed_seen = flushed;
        w->progress_ms = now_ms;
        return 0;
    }
    return now_ms > w->progress_ms ? now_ms - w->progress_ms : 0;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

uint64_t conn_watch_next_ms(const conn_t *c, uint64_t now_ms)
{
    uint64_t next = UINT64_MAX;
    if (c->read_paused)
        next = CONN_PAUSED_CHECK_MS;
    if (conn_send_waiting(&c->tcp) > 0) {
        uint64_t limit = c->core->cfg->limits.send_timeout_ms;
        uint64_t step = limit / 4 ? limit / 4 : 1;
        uint64_t due = c->send.progress_ms + limit;
        next = min_u64(next, min_u64(step, due > now_ms ? due - now_ms : 1));
    }
    return next;
}

conn_t *conn_oldest_lingering(core_t *core)
{
    if (core->n_lingering == 0)
        return NULL;
    list_foreach(it, &core->conns) {
        conn_t *c = list_entry(it, conn_t, link);
        if (c->lingering)
            return c;
    }
    return NULL;
}

void conn_peer_name(uv_tcp_t *tcp, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len) != 0)
        return;
    char ip[48] = "";
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
        snprintf(out, cap, "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
        snprintf(out, cap, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    }
}
