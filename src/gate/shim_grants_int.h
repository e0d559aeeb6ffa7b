/*
 * shim_grants_int: an instance's shim state, shared by the two files of vramd's side of the
 * shim (shim_grants.c: the page, grants and asks; shim_control.c: the control connections the
 * park tier commands). Internal to those files; owned by shim_grants.c (created by
 * shim_grants_prepare, dropped by shim_grants_free, freed when its last connection closed).
 */
#ifndef VRAMD_GATE_SHIM_GRANTS_INT_H
#define VRAMD_GATE_SHIM_GRANTS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/types.h"
#include "gpu/shim_abi.h"
#include "net/grant_socket.h"
#include "gate/shim_control.h"

typedef struct shim_inst {
    instance_t *inst;         /* NULL once the instance is freed */
    shim_page_t *page;
    char page_path[4096];
    uint8_t token[SHIM_TOKEN_LEN];
    char token_hex[2 * SHIM_TOKEN_LEN + 1];
    char wait_ms[24];
    char preload[8192];
    unsigned conns;
    bool slot_conn[SHIM_PAGE_PROCS]; /* a connection speaks for the slot */
    bool failed;
    char why[160];
    uint64_t context;
    uint64_t extra_run;       /* granted past the grant since it last went idle */
    uint64_t run_since_ms;    /* its running began (in_flight 0 -> 1), for the deadlock rule */
    uint64_t idle_since_ms;   /* seen idle since then (0: running); NVML and the page agree only after it */
    bool ran_alone;           /* one request ran since then: what was granted was its need */
    unsigned run_level, run_class; /* that request's ladder level and size class */
    uint64_t run_booked;      /* what it booked (its entry and the cache it reused) */
    uint64_t asks, granted, waited, refused, mismatches, wait_ms_total;
    bool mismatch_logged;
    /* control connections (shim_control.c), one per slot at most, and the command waiting on each */
    grant_conn_t *ctl[SHIM_PAGE_PROCS];
    shim_control_done_fn ctl_done[SHIM_PAGE_PROCS];
    uint32_t ctl_seq;
} shim_inst_t;

/* shim_control.c, called by shim_grants.c's connection handlers */
/* A HELLO_CONTROL for slot (the pid checked): true when the connection is taken. */
bool shim_control_hello(shim_inst_t *si, grant_conn_t *c, unsigned slot);
/* A control connection closed: its waiting command is answered NULL (lost). */
void shim_control_closed(shim_inst_t *si, grant_conn_t *c);
/* The grant socket's control handler (an answer to a command). */
void shim_control_answer(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m);

#endif
