/*
 * jstore_pg_rows: reading the PostgreSQL store's answers. Queries ask for results in
 * binary format, so a text or bytea value is its bytes as they are and an integer is a
 * big-endian int4 or int8 (the SQL casts every integer column to one of the two). A job
 * row is the COLS list of jstore_pg.c, in that order, optionally followed by the body and
 * the submitter (client).
 * Pure functions of a PGresult; no I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobstore/jstore_pg_int.h"

char *pg_col_str(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return NULL;
    int len = PQgetlength(r, row, col);
    char *s = malloc((size_t)len + 1);
    if (s) {
        memcpy(s, PQgetvalue(r, row, col), (size_t)len);
        s[len] = '\0';
    }
    return s;
}

int64_t pg_col_int(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return 0;
    const unsigned char *v = (const unsigned char *)PQgetvalue(r, row, col);
    int len = PQgetlength(r, row, col);
    uint64_t x = 0;
    for (int i = 0; i < len && i < 8; i++)
        x = (x << 8) | v[i];
    if (len == 4)
        return (int32_t)(uint32_t)x;
    return (int64_t)x;
}

void pg_read_record(const PGresult *r, int row, job_record_t *rec, bool with_body)
{
    job_record_init(rec);
    char *id = pg_col_str(r, row, 0);
    snprintf(rec->id, sizeof rec->id, "%s", id ? id : "");
    free(id);
    rec->model = pg_col_str(r, row, 1);
    rec->method = pg_col_str(r, row, 2);
    rec->path = pg_col_str(r, row, 3);
    rec->headers_json = pg_col_str(r, row, 4);
    rec->priority = (int)pg_col_int(r, row, 5);
    rec->deadline_wall_ms = pg_col_int(r, row, 6);
    char *st = pg_col_str(r, row, 7);
    int state = job_state_parse(st);
    free(st);
    rec->state = state < 0 ? JOB_FAILED : (enum job_state)state;
    rec->attempts = (int)pg_col_int(r, row, 8);
    rec->max_attempts = (int)pg_col_int(r, row, 9);
    rec->created_ms = pg_col_int(r, row, 10);
    rec->seq = pg_col_int(r, row, 11);
    rec->started_ms = pg_col_int(r, row, 12);
    rec->finished_ms = pg_col_int(r, row, 13);
    rec->degrade_level = (int)pg_col_int(r, row, 14);
    rec->gpu = (int)pg_col_int(r, row, 15);
    rec->http_status = (int)pg_col_int(r, row, 16);
    rec->error_code = pg_col_str(r, row, 17);
    rec->error_message = pg_col_str(r, row, 18);
    rec->result_type = pg_col_str(r, row, 19);
    rec->result_bytes = (uint64_t)pg_col_int(r, row, 20);
    char *rs = pg_col_str(r, row, 21);
    int rstate = job_result_state_parse(rs);
    free(rs);
    rec->result_state = rstate < 0 ? JOB_RESULT_NONE : (enum job_result_state)rstate;
    rec->est_bytes = (uint64_t)pg_col_int(r, row, 22);
    char *tok = pg_col_str(r, row, 23);
    snprintf(rec->token, sizeof rec->token, "%s", tok ? tok : "");
    free(tok);
    if (with_body && PQnfields(r) > PG_N_COLS && !PQgetisnull(r, row, PG_N_COLS)) {
        int len = PQgetlength(r, row, PG_N_COLS);
        rec->body = malloc(len ? (size_t)len : 1);
        if (rec->body) {
            memcpy(rec->body, PQgetvalue(r, row, PG_N_COLS), (size_t)len);
            rec->body_len = (size_t)len;
        }
    }
    if (with_body && PQnfields(r) > PG_N_COLS + 1)
        rec->client_json = pg_col_str(r, row, PG_N_COLS + 1); /* the submitter (limits.per_client) */
}

/* Rows changed by a command (UPDATE without RETURNING) or the first int column of a query. */
int64_t pg_changed(const PGresult *r)
{
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        return PQntuples(r) > 0 ? pg_col_int(r, 0, 0) : 0;
    return strtoll(PQcmdTuples((PGresult *)r), NULL, 10);
}

