/*
 * shim_client: the CUDA shim's side of vramd's grant page and grant socket
 * (src/gpu/shim_abi.h has the protocol). Set up at the first call of any function here
 * ($VRAMD_SHIM_PAGE, _SOCKET, _TOKEN, _GRANT_WAIT_MS); without them, or with a page of
 * another magic or version, every function lets everything through and counts nothing.
 *
 * charge(n) before an allocation: the fast path is a compare-and-swap of the page's live
 * total against its grant; past the grant the calling thread asks vramd (one thread at a
 * time on the socket) and blocks until GRANT or REFUSE. A shim that cannot reach vramd
 * (connect, HELLO, an answer past grant_wait + SHIM_ANSWER_SLACK_MS) detaches: its slot says
 * DETACHED and allocations go through counted but unchecked; it tries to connect again at
 * most once per SHIM_RECONNECT_MS. uncharge(n) after a free (or a failed allocation).
 * A process takes ONE slot of the page, at its first allocation (the claim is locked: its
 * threads' first allocations at once share it). fork: the child forgets the parent's slot and
 * connection (pthread_atfork) and takes its own at its first allocation.
 */
#ifndef VRAMD_SHIM_CLIENT_H
#define VRAMD_SHIM_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

/* 0: go ahead (counted when the page is in use); -1: refused (CUDA_ERROR_OUT_OF_MEMORY). */
int shim_client_charge(uint64_t n);
void shim_client_uncharge(uint64_t n);
/* Counted after an allocation went through the driver. */
void shim_client_note_alloc(void);
/* The grant's view for cuMemGetInfo: true (grant, live set) when the page is in use, this
 * process is not detached, and the grant is known (> 0). */
bool shim_client_view(uint64_t *grant, uint64_t *live);
/* Is the page in use (counting)? */
bool shim_client_active(void);

/* ---- the park tier's side (shim_park.h) ---- */
struct shim_msg;
/* The page is in use and $VRAMD_SHIM_PARK is "1": allocations are backed so they can be parked. */
bool shim_client_park_wanted(void);
/* A control connection (HELLO_CONTROL for this process's slot, answered HELLO_OK), or -1. */
int shim_client_control_open(void);
/* The next whole, valid message on it, waiting as long as it takes; -1 on EOF or garbage. */
int shim_client_control_recv(int fd, struct shim_msg *m);
int shim_client_control_send(int fd, const struct shim_msg *m);
/* This process's live bytes through the shim. */
uint64_t shim_client_live(void);
/* n bytes of this process went to host memory (to_host: live -> parked) or came back
 * (parked -> live, unconditionally: vramd booked them before it asked for the restore). */
void shim_client_move(uint64_t n, bool to_host);

#endif
