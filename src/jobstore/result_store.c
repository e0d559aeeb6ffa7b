/*
 * result_store: job result files under one directory, written atomically, indexed oldest
 * first for the TTL and the size cap. See result_store.h for the layout, the thread rules and
 * the return convention.
 *
 * Invariants:
 *   - every name this module creates, opens or removes is "<id>" or ".<id>.tmp" for an id that
 *     passed job_id_valid, resolved relative to the store's directory fd (openat & co.), so no
 *     input can reach a path outside the directory, and symlinks are never followed (O_NOFOLLOW);
 *   - total_bytes == sum of the bytes of the indexed entries; an entry is on the order list
 *     and in the hash at the same time, or on neither (freed);
 *   - the order list is sorted by (mtime, insertion), oldest at the head;
 *   - writers touch only their own fields and the store's immutable dir/dirfd, so they may run
 *     on another thread; the index is touched only by loop-thread functions.
 */
#include "jobstore/result_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/list.h"
#include "common/log.h"

#define TMP_NAME_SIZE (JOB_ID_SIZE + 6) /* "." id ".tmp" NUL */
#define HASH_MIN_BUCKETS 64

typedef struct result_entry {
    list_t order;                 /* on store->order, oldest first */
    struct result_entry *hnext;   /* hash chain */
    char id[JOB_ID_SIZE];
    uint64_t bytes;
    int64_t mtime_ms;
} result_entry_t;

struct result_store {
    char *dir;
    int dirfd;                    /* O_DIRECTORY; immutable after open */
    list_t order;
    result_entry_t **buckets;
    size_t n_buckets;             /* a power of two */
    size_t count;
    uint64_t total_bytes;
    int64_t (*now_ms)(void);      /* the clock a committed result is dated by; NULL = its mtime */
};

struct result_writer {
    const result_store_t *store;  /* only dir and dirfd are used (immutable) */
    char id[JOB_ID_SIZE];
    char tmp_name[TMP_NAME_SIZE];
    int fd;                       /* -1 once closed */
    uint64_t bytes;
    uint64_t max_bytes;           /* 0 = no limit */
    int64_t mtime_ms;             /* of the committed file */
    bool committed;
    bool failed;
    int err_no;
    char err[RESULT_STORE_ERR_MAX];
};

/* ---------------------------------------------------------------------------------------- */
/* Index                                                                                     */
/* ---------------------------------------------------------------------------------------- */

static size_t id_hash(const char *id)
{
    /* ids are random: their first 16 hex digits are already a good hash */
    size_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = id[i];
        h = (h << 4) | (size_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return h;
}

static result_entry_t **bucket_of(const result_store_t *s, const char *id)
{
    return &s->buckets[id_hash(id) & (s->n_buckets - 1)];
}

static result_entry_t *index_find(const result_store_t *s, const char *id)
{
    for (result_entry_t *e = *bucket_of(s, id); e != NULL; e = e->hnext) {
        if (memcmp(e->id, id, JOB_ID_LEN) == 0)
            return e;
    }
    return NULL;
}

static int index_grow(result_store_t *s)
{
    size_t n = s->n_buckets * 2;
    result_entry_t **b = calloc(n, sizeof *b);
    if (b == NULL)
        return -1;
    for (size_t i = 0; i < s->n_buckets; i++) {
        result_entry_t *e = s->buckets[i];
        while (e != NULL) {
            result_entry_t *next = e->hnext;
            size_t k = id_hash(e->id) & (n - 1);
            e->hnext = b[k];
            b[k] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->n_buckets = n;
    return 0;
}

/* Unlink e from the hash and the order list, update the totals, free it. */
static void index_drop(result_store_t *s, result_entry_t *e)
{
    result_entry_t **pp = bucket_of(s, e->id);
    while (*pp != NULL && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp == e)
        *pp = e->hnext;
    list_remove(&e->order);
    s->count--;
    s->total_bytes -= e->bytes;
    free(e);
}

/* Add (or replace) an entry, keeping the order list sorted by mtime (newest are the common
 * case, so the walk starts at the tail). -1 when out of memory. */
static int index_add(result_store_t *s, const char *id, uint64_t bytes, int64_t mtime_ms)
{
    result_entry_t *old = index_find(s, id);
    if (old != NULL)
        index_drop(s, old);
    if (s->count + 1 > s->n_buckets && index_grow(s) != 0)
        return -1;
    result_entry_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    memcpy(e->id, id, JOB_ID_SIZE);
    e->bytes = bytes;
    e->mtime_ms = mtime_ms;
    result_entry_t **b = bucket_of(s, id);
    e->hnext = *b;
    *b = e;

    list_t *pos = s->order.prev; /* insert after the last entry not newer than e */
    while (pos != &s->order && list_entry(pos, result_entry_t, order)->mtime_ms > mtime_ms)
        pos = pos->prev;
    list_insert_head(pos, &e->order); /* insert right after pos */
    s->count++;
    s->total_bytes += bytes;
    return 0;
}

static int64_t stat_mtime_ms(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------------------------- */
/* Open / close                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* mkdir -p with mode 0700 for the directories it creates. */
static int mkdir_p(const char *dir)
{
    char *path = strdup(dir);
    int rc = 0;

    if (path == NULL) {
        errno = ENOMEM;
        return -1;
    }
    for (char *p = path + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0700) != 0 && errno != EEXIST) {
                rc = -1;
                break;
            }
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    free(path);
    return rc;
}

/* ".<id>.tmp" -> true */
static bool is_tmp_name(const char *name)
{
    size_t len = strlen(name);
    return len == JOB_ID_LEN + 5 && name[0] == '.' && strcmp(name + 1 + JOB_ID_LEN, ".tmp") == 0 &&
           job_id_valid_n(name + 1, JOB_ID_LEN);
}

typedef struct scan_item {
    char id[JOB_ID_SIZE];
    uint64_t bytes;
    int64_t mtime_ms;
} scan_item_t;

static int scan_item_cmp(const void *a, const void *b)
{
    const scan_item_t *x = a, *y = b;
    if (x->mtime_ms != y->mtime_ms)
        return x->mtime_ms < y->mtime_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* Remove leftover temp files and index committed results, oldest first. */
static int scan(result_store_t *s, char *err, size_t errlen)
{
    scan_item_t *items = NULL;
    size_t n = 0, cap = 0;
    size_t removed_tmp = 0;
    int rc = 0;

    int fd = dup(s->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        snprintf(err, errlen, "result store %s: reading directory: %s", s->dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    rewinddir(d);
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (de == NULL) {
            if (errno != 0) {
                snprintf(err, errlen, "result store %s: reading directory: %s", s->dir, strerror(errno));
                rc = -1;
            }
            break;
        }
        if (is_tmp_name(de->d_name)) {
            if (unlinkat(s->dirfd, de->d_name, 0) == 0)
                removed_tmp++;
            continue;
        }
        if (!job_id_valid(de->d_name))
            continue; /* not ours: never touched */
        struct stat st;
        if (fstatat(s->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            size_t ncap = cap == 0 ? 64 : cap * 2;
            scan_item_t *grown = realloc(items, ncap * sizeof *items);
            if (grown == NULL) {
                snprintf(err, errlen, "result store %s: out of memory", s->dir);
                rc = -1;
                break;
            }
            items = grown;
            cap = ncap;
        }
        memcpy(items[n].id, de->d_name, JOB_ID_SIZE);
        items[n].bytes = (uint64_t)st.st_size;
        items[n].mtime_ms = stat_mtime_ms(&st);
        n++;
    }
    closedir(d);
    if (rc == 0 && n > 0) {
        qsort(items, n, sizeof *items, scan_item_cmp);
        for (size_t i = 0; i < n && rc == 0; i++) {
            if (index_add(s, items[i].id, items[i].bytes, items[i].mtime_ms) != 0) {
                snprintf(err, errlen, "result store %s: out of memory", s->dir);
                rc = -1;
            }
        }
    }
    free(items);
    if (removed_tmp > 0)
        log_event(LOG_INFO, "result_store_temp_removed", "dir=%s count=%zu", s->dir, removed_tmp);
    return rc;
}

result_store_t *result_store_open(const char *dir, char *err, size_t errlen)
{
    result_store_t *s;

    if (dir == NULL || dir[0] == '\0') {
        snprintf(err, errlen, "result store: no directory");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errlen, "result store %s: out of memory", dir);
        return NULL;
    }
    s->dirfd = -1;
    list_init(&s->order);
    s->dir = strdup(dir);
    s->n_buckets = HASH_MIN_BUCKETS;
    s->buckets = calloc(s->n_buckets, sizeof *s->buckets);
    if (s->dir == NULL || s->buckets == NULL) {
        snprintf(err, errlen, "result store %s: out of memory", dir);
        goto fail;
    }
    if (mkdir_p(dir) != 0) {
        snprintf(err, errlen, "result store %s: creating directory: %s", dir, strerror(errno));
        goto fail;
    }
    s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dirfd < 0) {
        snprintf(err, errlen, "result store %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (scan(s, err, errlen) != 0)
        goto fail;
    return s;

fail:
    result_store_close(s);
    return NULL;
}

void result_store_close(result_store_t *s)
{
    if (s == NULL)
        return;
    list_foreach_safe(it, tmp, &s->order) {
        free(list_entry(it, result_entry_t, order));
    }
    free(s->buckets);
    if (s->dirfd >= 0)
        close(s->dirfd);
    free(s->dir);
    free(s);
}

void result_store_set_clock(result_store_t *s, int64_t (*now_ms)(void)) { s->now_ms = now_ms; }

const char *result_store_dir(const result_store_t *s)
{
    return s->dir;
}

uint64_t result_store_total_bytes(const result_store_t *s)
{
    return s->total_bytes;
}

size_t result_store_count(const result_store_t *s)
{
    return s->count;
}

bool result_store_has(const result_store_t *s, const char *id, uint64_t *bytes)
{
    if (!job_id_valid(id))
        return false;
    const result_entry_t *e = index_find(s, id);
    if (e != NULL && bytes != NULL)
        *bytes = e->bytes;
    return e != NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Writer                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static int writer_fail(result_writer_t *w, int err_no, const char *what)
{
    w->failed = true;
    if (w->err_no == 0) {
        w->err_no = err_no;
        snprintf(w->err, sizeof w->err, "%s result %s: %s", what, w->id,
                 err_no == EFBIG ? "result larger than its limit" : strerror(err_no));
    }
    return -1;
}

result_writer_t *result_writer_open(result_store_t *s, const char *id, uint64_t max_bytes, char *err,
                                    size_t errlen)
{
    if (!job_id_valid(id)) {
        snprintf(err, errlen, "result: id is not valid");
        errno = EINVAL;
        return NULL;
    }
    result_writer_t *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "result %s: out of memory", id);
        errno = ENOMEM;
        return NULL;
    }
    w->store = s;
    memcpy(w->id, id, JOB_ID_SIZE);
    snprintf(w->tmp_name, sizeof w->tmp_name, ".%s.tmp", id);
    w->max_bytes = max_bytes;
    w->fd = openat(s->dirfd, w->tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w->fd < 0) {
        int e = errno;
        snprintf(err, errlen, "creating result %s in %s: %s", id, s->dir,
                 e == EEXIST ? "a write for it is already in progress" : strerror(e));
        free(w);
        errno = e;
        return NULL;
    }
    return w;
}

int result_writer_write(result_writer_t *w, const void *data, size_t len)
{
    const char *p = data;

    if (w->failed)
        return -1;
    if (w->committed || w->fd < 0)
        return writer_fail(w, EBADF, "writing");
    if (w->max_bytes > 0 && (len > w->max_bytes || w->bytes > w->max_bytes - len))
        return writer_fail(w, EFBIG, "writing");
    while (len > 0) {
        ssize_t n = write(w->fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return writer_fail(w, errno, "writing");
        }
        if (n == 0)
            return writer_fail(w, EIO, "writing");
        p += n;
        len -= (size_t)n;
        w->bytes += (uint64_t)n;
    }
    return 0;
}

int result_writer_commit(result_writer_t *w)
{
    struct stat st;
    int dirfd = w->store->dirfd;

    if (w->committed)
        return 0;
    if (w->failed || w->fd < 0) {
        if (!w->failed)
            writer_fail(w, EBADF, "committing");
        result_writer_abort(w);
        return -1;
    }
    if (fsync(w->fd) != 0) {
        writer_fail(w, errno, "syncing");
        result_writer_abort(w);
        return -1;
    }
    w->mtime_ms = fstat(w->fd, &st) == 0 ? stat_mtime_ms(&st) : 0;
    if (close(w->fd) != 0) {
        w->fd = -1;
        writer_fail(w, errno, "closing");
        result_writer_abort(w);
        return -1;
    }
    w->fd = -1;
    if (renameat(dirfd, w->tmp_name, dirfd, w->id) != 0) {
        writer_fail(w, errno, "renaming");
        result_writer_abort(w);
        return -1;
    }
    /* the rename is durable only once the directory is synced */
    if (fsync(dirfd) != 0) {
        int e = errno;
        unlinkat(dirfd, w->id, 0);
        writer_fail(w, e, "syncing directory for");
        return -1;
    }
    w->committed = true;
    return 0;
}

void result_writer_abort(result_writer_t *w)
{
    if (w == NULL || w->committed)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (w->tmp_name[0] != '\0') {
        unlinkat(w->store->dirfd, w->tmp_name, 0);
        w->tmp_name[0] = '\0';
    }
    w->failed = true;
}

void result_writer_close(result_store_t *s, result_writer_t *w)
{
    if (w == NULL)
        return;
    if (w->committed) {
        if (index_add(s, w->id, w->bytes, s->now_ms ? s->now_ms() : w->mtime_ms) != 0)
            log_event(LOG_ERROR, "result_store_index_failed", "id=%s reason=%s", w->id, "out of memory");
    } else {
        result_writer_abort(w);
    }
    free(w);
}

uint64_t result_writer_bytes(const result_writer_t *w)
{
    return w->bytes;
}

bool result_writer_committed(const result_writer_t *w)
{
    return w->committed;
}

int result_writer_errno(const result_writer_t *w)
{
    return w->err_no;
}

bool result_writer_disk_full(const result_writer_t *w)
{
    return w->err_no == ENOSPC || w->err_no == EDQUOT;
}

const char *result_writer_error(const result_writer_t *w)
{
    return w->err;
}

/* ---------------------------------------------------------------------------------------- */
/* Reading                                                                                   */
/* ---------------------------------------------------------------------------------------- */

int result_store_open_read(const result_store_t *s, const char *id, int *fd, uint64_t *size)
{
    struct stat st;

    *fd = -1;
    if (!job_id_valid(id))
        return -EINVAL;
    int f = openat(s->dirfd, id, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0)
        return errno == ELOOP ? -ENOENT : -errno;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return -ENOENT;
    }
    *fd = f;
    if (size != NULL)
        *size = (uint64_t)st.st_size;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Housekeeping                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* Unlink the file of e, drop it from the index, tell cb. */
static void evict(result_store_t *s, result_entry_t *e, const char *reason, result_removed_cb cb, void *ctx)
{
    char id[JOB_ID_SIZE];

    memcpy(id, e->id, JOB_ID_SIZE);
    if (unlinkat(s->dirfd, id, 0) != 0 && errno != ENOENT)
        log_event(LOG_WARN, "result_remove_failed", "id=%s reason=%s error=%s", id, reason, strerror(errno));
    index_drop(s, e);
    if (cb != NULL)
        cb(id, ctx);
}

size_t result_store_expire(result_store_t *s, int64_t now_wall_ms, uint64_t ttl_ms, result_removed_cb cb,
                           void *ctx)
{
    size_t removed = 0;
    int64_t cutoff = ttl_ms > (uint64_t)now_wall_ms ? INT64_MIN : now_wall_ms - (int64_t)ttl_ms;

    list_foreach_safe(it, tmp, &s->order) {
        result_entry_t *e = list_entry(it, result_entry_t, order);
        if (e->mtime_ms >= cutoff)
            break; /* oldest first: the rest are younger */
        evict(s, e, "ttl", cb, ctx);
        removed++;
    }
    return removed;
}

size_t result_store_make_room(result_store_t *s, uint64_t incoming, uint64_t max_bytes, result_removed_cb cb,
                              void *ctx)
{
    size_t removed = 0;

    while (!list_empty(&s->order) &&
           (incoming > max_bytes || s->total_bytes > max_bytes - incoming)) {
        evict(s, list_entry(s->order.next, result_entry_t, order), "size_cap", cb, ctx);
        removed++;
    }
    return removed;
}

size_t result_store_retain(result_store_t *s, result_keep_cb keep, void *ctx)
{
    size_t removed = 0;

    list_foreach_safe(it, tmp, &s->order) {
        result_entry_t *e = list_entry(it, result_entry_t, order);
        if (!keep(e->id, ctx)) {
            evict(s, e, "orphan", NULL, NULL);
            removed++;
        }
    }
    return removed;
}

int result_store_remove(result_store_t *s, const char *id)
{
    if (!job_id_valid(id))
        return -EINVAL;
    result_entry_t *e = index_find(s, id);
    int rc = unlinkat(s->dirfd, id, 0) == 0 ? 0 : -errno;
    if (e != NULL) {
        index_drop(s, e);
        if (rc == -ENOENT)
            rc = 0; /* the index had it: it is gone now either way */
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Disk guard                                                                                */
/* ---------------------------------------------------------------------------------------- */

int result_store_free_disk(const char *path, uint64_t *free_bytes)
{
    struct statvfs v;

    if (statvfs(path, &v) != 0)
        return -errno;
    *free_bytes = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    return 0;
}
