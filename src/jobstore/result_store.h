/*
 * result_store: job results as files in one directory (state_dir/results/), written
 * atomically, with an in-memory index for the TTL and the size cap, and the disk guard.
 * Pure storage: no libuv, no HTTP, no clock (callers pass wall-clock ms). Content-agnostic:
 * the Content-Type of a result lives in the journal, not here.
 *
 * Layout: <dir>/<id> is a committed result; <dir>/.<id>.tmp is a write in progress. <id> is
 * always a string that passed job_id_valid (32 lowercase hex), and every path is built only
 * from such an id, so no caller input can name a file outside <dir>. Files whose names are
 * not ids are never indexed, served or removed.
 *
 * Atomic write: write to .<id>.tmp (O_CREAT|O_EXCL, 0600), fsync it, rename to <id>, fsync
 * the directory. A reader therefore sees either no file or the whole result; after a crash
 * only temp files can be incomplete, and result_store_open removes them.
 *
 * Index: every committed result with its size and mtime, oldest first (a list in mtime
 * order + a hash by id), and the total of their sizes. Eviction (expire, make_room) walks
 * from the oldest.
 *
 * Threads:
 *   - result_writer_open / _write / _commit / _abort, result_store_open_read and
 *     result_store_free_disk touch only the writer
 *     and the store's immutable fields (directory path and fd): they may run on a libuv
 *     thread-pool thread (one thread at a time per writer).
 *   - everything else (open/close, result_writer_open, result_writer_close, expire, make_room,
 *     remove, the getters) reads or changes the index: call them from ONE thread (the loop).
 *   A committed result enters the index only in result_writer_close (loop thread).
 *
 * Return convention: int functions return 0 on success and -1 on failure with the reason in
 * the err buffer they take (or in result_writer_error), except where a function says it
 * returns -errno.
 */
#ifndef VRAMD_JOBSTORE_RESULT_STORE_H
#define VRAMD_JOBSTORE_RESULT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobstore/job_id.h"

#define RESULT_STORE_ERR_MAX 512

typedef struct result_store result_store_t;
typedef struct result_writer result_writer_t;

/* Create dir when missing (mkdir -p, mode 0700), remove leftover .<id>.tmp files, and index
 * the committed results (size, mtime). NULL with the reason in err on failure. */
result_store_t *result_store_open(const char *dir, char *err, size_t errlen);
/* Free the index (files stay). NULL is a no-op. Every writer must be closed first. */
void result_store_close(result_store_t *s);

/* Date results committed from now on by now_ms (the jobs' clock, which a step of the system
 * clock does not move) instead of their files' mtimes; results found at open keep their
 * mtimes (read when the clocks agree). result_store_expire compares on the same clock. */
void result_store_set_clock(result_store_t *s, int64_t (*now_ms)(void));
const char *result_store_dir(const result_store_t *s);
uint64_t result_store_total_bytes(const result_store_t *s);
size_t result_store_count(const result_store_t *s);
/* Whether a committed result is indexed; its size into *bytes (may be NULL). */
bool result_store_has(const result_store_t *s, const char *id, uint64_t *bytes);

/* ---- writing ---- */

/* Start a result for id: creates <dir>/.<id>.tmp. max_bytes > 0 is the most this result may
 * hold (a write that would pass it fails with EFBIG); 0 = no limit. NULL with the reason in
 * err when id is not valid (EINVAL), a write for it is already in progress (EEXIST), or the
 * file cannot be created (ENOSPC...); errno is set. Any thread (touches no index). Writing
 * again an id that already has a committed result replaces it when committed. */
result_writer_t *result_writer_open(result_store_t *s, const char *id, uint64_t max_bytes, char *err,
                                    size_t errlen);
/* Append len bytes (retries short writes and EINTR). -1 on failure: the writer is then
 * failed (later writes and commit fail too); see result_writer_errno / _error. Any thread. */
int result_writer_write(result_writer_t *w, const void *data, size_t len);
/* fsync the file, rename it to <dir>/<id>, fsync the directory. -1 on failure (the temp file
 * is removed). On success the result is on disk for good; it enters the index when the
 * writer is closed. Any thread. */
int result_writer_commit(result_writer_t *w);
/* Give up: close and unlink the temp file. Idempotent; harmless after commit (does nothing).
 * Any thread. */
void result_writer_abort(result_writer_t *w);
/* Finish with a writer (loop thread): a committed result is added to the index (size, mtime
 * = now); an uncommitted one is aborted. Frees w. NULL is a no-op. */
void result_writer_close(result_store_t *s, result_writer_t *w);

uint64_t result_writer_bytes(const result_writer_t *w);   /* bytes written so far */
bool result_writer_committed(const result_writer_t *w);
/* errno of the failure (0 = none): ENOSPC/EDQUOT = disk full, EFBIG = over max_bytes. */
int result_writer_errno(const result_writer_t *w);
/* ENOSPC or EDQUOT */
bool result_writer_disk_full(const result_writer_t *w);
/* "writing result 0123...: No space left on device" ("" when none). */
const char *result_writer_error(const result_writer_t *w);

/* ---- reading ---- */

/* Open a committed result read-only (O_CLOEXEC): *fd (caller closes) and *size. Returns 0,
 * or -errno: -EINVAL (id not valid), -ENOENT (no such result), other -errno. Any thread. */
int result_store_open_read(const result_store_t *s, const char *id, int *fd, uint64_t *size);

/* ---- housekeeping (loop thread) ---- */

/* Told which result was removed, so the caller can mark it in the journal. */
typedef void (*result_removed_cb)(const char *id, void *ctx);

/* Remove results whose mtime is older than now_wall_ms - ttl_ms. Returns how many. */
size_t result_store_expire(result_store_t *s, int64_t now_wall_ms, uint64_t ttl_ms, result_removed_cb cb,
                           void *ctx);
/* Remove oldest results until total + incoming <= max_bytes (or none is left). Returns how
 * many were removed. */
size_t result_store_make_room(result_store_t *s, uint64_t incoming, uint64_t max_bytes, result_removed_cb cb,
                              void *ctx);
/* Remove one result (e.g. its job record was purged, or it was cancelled). 0 = removed,
 * -ENOENT = there was none, -EINVAL = id not valid, other -errno. cb is not called. */
int result_store_remove(result_store_t *s, const char *id);

/* Remove every stored result for which keep(id, ctx) is false (e.g. a file whose job record
 * was purged, or one committed just before a crash whose job was then requeued). Call it
 * on the loop thread while no writer is open. Returns how many were removed. */
typedef bool (*result_keep_cb)(const char *id, void *ctx);
size_t result_store_retain(result_store_t *s, result_keep_cb keep, void *ctx);

/* ---- disk guard ---- */

/* Bytes available to unprivileged users on the filesystem holding path (statvfs:
 * f_bavail * f_frsize). 0 ok, -errno on failure. Any thread. */
int result_store_free_disk(const char *path, uint64_t *free_bytes);

#endif
