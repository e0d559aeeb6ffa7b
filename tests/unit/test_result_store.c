/*
 * test_result_store: job ids and the result store (src/jobstore/job_id.c, src/jobstore/result_store.c)
 * on real files in a mkdtemp directory.
 *
 * Covers: id format and uniqueness; the validator refusing every path trick (.., /, %2e,
 * uppercase, 31/33 characters, embedded NUL); write + commit + read back (also committed on
 * another thread and adopted on this one); abort and failed writes leave no file; a second
 * writer for the same id is refused; replacing a result updates the index; open removes
 * leftover temp files, indexes results oldest first and ignores foreign names and symlinks;
 * the per-result limit (EFBIG); TTL expiry by mtime (utimensat); make_room evicting oldest
 * first and reporting ids; remove; reads of missing, invalid and symlinked ids; the disk
 * guard's free-space figure; ENOSPC on a 256 KiB tmpfs reported cleanly (skipped with a
 * message when tmpfs cannot be mounted, i.e. not root).
 * Run: make build/tests/test_result_store && build/tests/test_result_store (and with make SAN=1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobstore/job_id.h"
#include "jobstore/result_store.h"

typedef struct fixture {
    char root[64];
    char dir[128];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    snprintf(f->root, sizeof f->root, "/tmp/test_result_store.XXXXXX");
    if (mkdtemp(f->root) == NULL) {
        free(f);
        return -1;
    }
    snprintf(f->dir, sizeof f->dir, "%s/state/results", f->root);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "%s/tiny", f->root);
    umount2(cmd, MNT_DETACH); /* a failed tmpfs test must not leave its mount behind */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->root);
    free(f);
    return 0;
}

static result_store_t *open_store(const char *dir)
{
    char err[RESULT_STORE_ERR_MAX];
    result_store_t *s = result_store_open(dir, err, sizeof err);
    if (s == NULL)
        fail_msg("result_store_open: %s", err);
    return s;
}

/* Write and commit a result of n bytes (byte i = seed + i); returns its id in id. */
static void put(result_store_t *s, char id[JOB_ID_SIZE], size_t n, unsigned char seed)
{
    char err[RESULT_STORE_ERR_MAX];
    unsigned char buf[4096];
    assert_int_equal(job_id_generate(id), 0);
    result_writer_t *w = result_writer_open(s, id, 0, err, sizeof err);
    if (w == NULL)
        fail_msg("writer: %s", err);
    size_t done = 0;
    while (done < n) {
        size_t k = n - done < sizeof buf ? n - done : sizeof buf;
        for (size_t i = 0; i < k; i++)
            buf[i] = (unsigned char)(seed + done + i);
        assert_int_equal(result_writer_write(w, buf, k), 0);
        done += k;
    }
    assert_int_equal(result_writer_commit(w), 0);
    result_writer_close(s, w);
}

/* How many entries dir holds besides . and .. (for "nothing was left behind" checks). */
static size_t count_entries(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    }
    closedir(d);
    return n;
}

static void set_mtime(const char *dir, const char *name, time_t sec)
{
    char path[256];
    struct timespec ts[2] = {{.tv_sec = sec, .tv_nsec = 0}, {.tv_sec = sec, .tv_nsec = 0}};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void touch(const char *dir, const char *name, const char *content)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(content, fp);
    fclose(fp);
}

static bool exists(const char *dir, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

typedef struct removed {
    char ids[16][JOB_ID_SIZE];
    size_t n;
} removed_t;

static void removed_cb(const char *id, void *ctx)
{
    removed_t *r = ctx;
    assert_true(r->n < 16);
    memcpy(r->ids[r->n++], id, JOB_ID_SIZE);
}

/* ------------------------------------------------------------------------------------ */

static void test_id_generate(void **state)
{
    enum { N = 2000 };
    static char ids[N][JOB_ID_SIZE];
    for (int i = 0; i < N; i++) {
        assert_int_equal(job_id_generate(ids[i]), 0);
        assert_int_equal(strlen(ids[i]), JOB_ID_LEN);
        assert_true(job_id_valid(ids[i]));
    }
    for (int i = 0; i < N; i++)
        for (int k = i + 1; k < N; k++)
            assert_string_not_equal(ids[i], ids[k]);
    /* every hex digit shows up: the ids are not, say, decimal or a counter */
    bool seen[16] = {false};
    for (int i = 0; i < N; i++)
        for (int c = 0; c < JOB_ID_LEN; c++)
            seen[ids[i][c] <= '9' ? ids[i][c] - '0' : ids[i][c] - 'a' + 10] = true;
    for (int d = 0; d < 16; d++)
        assert_true(seen[d]);
}

static void test_id_validator(void **state)
{
    assert_true(job_id_valid("0123456789abcdef0123456789abcdef"));
    const char *bad[] = {
        "",
        "../x",
        "a/b",
        "..",
        ".",
        "/etc/passwd",
        "0123456789ABCDEF0123456789abcdef",   /* uppercase */
        "0123456789abcdef0123456789abcde",    /* 31 */
        "0123456789abcdef0123456789abcdef0",  /* 33 */
        "0123456789abcdef0123456789abcde/",
        "../3456789abcdef0123456789abcdef",
        "%2e%2e%2f456789abcdef0123456789ab",
        "0123456789abcdef0123456789abcdeg",
        " 123456789abcdef0123456789abcdef",
        "0123456789abcdef\n123456789abcdef",
        ".0123456789abcdef0123456789abcdef.tmp",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (job_id_valid(bad[i]))
            fail_msg("accepted \"%s\"", bad[i]);
    }
    assert_false(job_id_valid(NULL));
    /* an embedded NUL: as a C string it is short; as a slice it has a non-hex byte */
    const char with_nul[33] = "0123456789abcdef\0" "123456789abcdef";
    assert_false(job_id_valid(with_nul));
    assert_false(job_id_valid_n(with_nul, 32));
    assert_true(job_id_valid_n("0123456789abcdef0123456789abcdefXYZ", 32));
    assert_false(job_id_valid_n(NULL, 32));
}

static void test_write_commit_read(void **state)
{
    fixture_t *f = *state;
    char err[RESULT_STORE_ERR_MAX], id[JOB_ID_SIZE];
    result_store_t *s = open_store(f->dir); /* creates state/results */
    struct stat st;

    assert_int_equal(stat(f->dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(result_store_count(s), 0);
    assert_string_equal(result_store_dir(s), f->dir);

    assert_int_equal(job_id_generate(id), 0);
    result_writer_t *w = result_writer_open(s, id, 1000, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(result_writer_write(w, "hello ", 6), 0);
    assert_int_equal(result_writer_write(w, "world", 5), 0);
    assert_int_equal(result_writer_bytes(w), 11);
    /* a second writer for the same id is refused while the first is open */
    errno = 0;
    assert_null(result_writer_open(s, id, 0, err, sizeof err));
    assert_int_equal(errno, EEXIST);
    assert_non_null(strstr(err, "already in progress"));
    /* not visible before commit */
    int fd;
    uint64_t size;
    assert_int_equal(result_store_open_read(s, id, &fd, &size), -ENOENT);
    assert_false(result_writer_committed(w));
    assert_int_equal(result_writer_commit(w), 0);
    assert_true(result_writer_committed(w));
    assert_int_equal(result_writer_commit(w), 0); /* idempotent */
    result_writer_abort(w);                       /* harmless after commit */
    assert_false(result_store_has(s, id, NULL));  /* indexed on close */
    result_writer_close(s, w);
    uint64_t bytes = 0;
    assert_true(result_store_has(s, id, &bytes));
    assert_int_equal(bytes, 11);
    assert_int_equal(result_store_total_bytes(s), 11);
    assert_int_equal(result_store_count(s), 1);

    assert_int_equal(result_store_open_read(s, id, &fd, &size), 0);
    assert_int_equal(size, 11);
    char buf[32] = "";
    assert_int_equal(read(fd, buf, sizeof buf), 11);
    assert_memory_equal(buf, "hello world", 11);
    close(fd);
    assert_int_equal(count_entries(f->dir), 1); /* no temp file left */
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, id);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* writing the id again replaces the result; the index follows */
    w = result_writer_open(s, id, 0, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(result_writer_write(w, "bye", 3), 0);
    assert_int_equal(result_writer_commit(w), 0);
    result_writer_close(s, w);
    assert_int_equal(result_store_count(s), 1);
    assert_int_equal(result_store_total_bytes(s), 3);

    /* invalid ids never reach the filesystem */
    assert_null(result_writer_open(s, "../../etc/x", 0, err, sizeof err));
    assert_int_equal(errno, EINVAL);
    assert_int_equal(result_store_open_read(s, "../results/x", &fd, &size), -EINVAL);
    assert_int_equal(fd, -1);
    assert_int_equal(result_store_open_read(s, "", &fd, &size), -EINVAL);
    result_store_close(s);
}

static void test_abort_and_failures_leave_nothing(void **state)
{
    fixture_t *f = *state;
    char err[RESULT_STORE_ERR_MAX], id[JOB_ID_SIZE];
    result_store_t *s = open_store(f->dir);

    assert_int_equal(job_id_generate(id), 0);
    result_writer_t *w = result_writer_open(s, id, 0, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(result_writer_write(w, "partial", 7), 0);
    assert_int_equal(count_entries(f->dir), 1); /* the temp file */
    result_writer_abort(w);
    result_writer_abort(w); /* idempotent */
    assert_int_equal(count_entries(f->dir), 0);
    assert_int_equal(result_writer_commit(w), -1);
    result_writer_close(s, w);
    assert_int_equal(result_store_count(s), 0);

    /* closing an uncommitted writer aborts it */
    w = result_writer_open(s, id, 0, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(result_writer_write(w, "x", 1), 0);
    result_writer_close(s, w);
    assert_int_equal(count_entries(f->dir), 0);
    assert_int_equal(result_store_count(s), 0);

    /* the per-result limit */
    w = result_writer_open(s, id, 10, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(result_writer_write(w, "0123456789", 10), 0); /* exactly the limit */
    assert_int_equal(result_writer_write(w, "a", 1), -1);
    assert_int_equal(result_writer_errno(w), EFBIG);
    assert_false(result_writer_disk_full(w));
    assert_non_null(strstr(result_writer_error(w), "larger than its limit"));
    assert_non_null(strstr(result_writer_error(w), id));
    assert_int_equal(result_writer_write(w, "", 0), -1); /* stays failed */
    assert_int_equal(result_writer_commit(w), -1);
    result_writer_close(s, w);
    assert_int_equal(count_entries(f->dir), 0);
    assert_int_equal(result_store_count(s), 0);

    /* one huge write over the limit fails before writing anything */
    w = result_writer_open(s, id, 4, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(result_writer_write(w, "12345", 5), -1);
    assert_int_equal(result_writer_bytes(w), 0);
    result_writer_close(s, w);
    assert_int_equal(count_entries(f->dir), 0);
    result_store_close(s);
}

static void test_open_cleans_and_indexes(void **state)
{
    fixture_t *f = *state;
    char a[JOB_ID_SIZE], b[JOB_ID_SIZE], c[JOB_ID_SIZE], tmp[64], link_id[JOB_ID_SIZE], path[256], target[256];
    result_store_t *s = open_store(f->dir);

    put(s, a, 100, 1);
    put(s, b, 200, 2);
    put(s, c, 300, 3);
    result_store_close(s);
    set_mtime(f->dir, a, 3000);
    set_mtime(f->dir, b, 1000); /* b is the oldest */
    set_mtime(f->dir, c, 2000);
    /* leftovers of a crash, foreign files, a symlink named like an id */
    assert_int_equal(job_id_generate(tmp + 1), 0);
    tmp[0] = '.';
    strcat(tmp, ".tmp");
    touch(f->dir, tmp, "half a result");
    touch(f->dir, ".0123456789ABCDEF0123456789abcdef.tmp", "not ours (uppercase)");
    touch(f->dir, "README", "not ours");
    touch(f->dir, "0123456789abcdef", "not an id");
    assert_int_equal(job_id_generate(link_id), 0);
    snprintf(path, sizeof path, "%s/%s", f->dir, link_id);
    snprintf(target, sizeof target, "%s/README", f->dir);
    assert_int_equal(symlink(target, path), 0);

    s = open_store(f->dir);
    assert_false(exists(f->dir, tmp));
    assert_true(exists(f->dir, ".0123456789ABCDEF0123456789abcdef.tmp"));
    assert_true(exists(f->dir, "README"));
    assert_true(exists(f->dir, "0123456789abcdef"));
    assert_int_equal(result_store_count(s), 3);
    assert_int_equal(result_store_total_bytes(s), 600);
    assert_false(result_store_has(s, link_id, NULL));
    int fd;
    uint64_t size;
    assert_int_equal(result_store_open_read(s, link_id, &fd, &size), -ENOENT); /* never follows */

    /* oldest first: make room for 1 byte under a 600-byte cap removes b only */
    removed_t r = {.n = 0};
    assert_int_equal(result_store_make_room(s, 1, 600, removed_cb, &r), 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.ids[0], b);
    assert_false(exists(f->dir, b));
    assert_int_equal(result_store_total_bytes(s), 400);
    /* then c (mtime 2000), then a */
    assert_int_equal(result_store_make_room(s, 0, 100, removed_cb, &r), 1);
    assert_string_equal(r.ids[1], c);
    assert_int_equal(result_store_make_room(s, 0, 100, removed_cb, &r), 0); /* a (100) fits */
    assert_int_equal(result_store_make_room(s, 1, 100, removed_cb, &r), 1);
    assert_string_equal(r.ids[2], a);
    assert_int_equal(result_store_count(s), 0);
    assert_int_equal(result_store_total_bytes(s), 0);
    /* foreign files survive eviction */
    assert_true(exists(f->dir, "README"));
    assert_true(exists(f->dir, link_id));
    result_store_close(s);
}

static void test_make_room_incoming_larger_than_cap(void **state)
{
    fixture_t *f = *state;
    char a[JOB_ID_SIZE], b[JOB_ID_SIZE];
    result_store_t *s = open_store(f->dir);
    put(s, a, 10, 0);
    put(s, b, 10, 0);
    removed_t r = {.n = 0};
    /* nothing can make room for more than the cap: everything goes, and it stops */
    assert_int_equal(result_store_make_room(s, 1000, 100, removed_cb, &r), 2);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.ids[0], a); /* same mtime: insertion order */
    assert_int_equal(result_store_make_room(s, 1000, 100, removed_cb, &r), 0);
    result_store_close(s);
}

static bool keep_first_only(const char *id, void *ctx)
{
    return strcmp(id, (const char *)ctx) == 0;
}

static void test_retain(void **state)
{
    fixture_t *f = *state;
    char a[JOB_ID_SIZE], b[JOB_ID_SIZE], c[JOB_ID_SIZE];
    result_store_t *s = open_store(f->dir);
    put(s, a, 10, 0);
    put(s, b, 20, 0);
    put(s, c, 30, 0);
    assert_int_equal(result_store_retain(s, keep_first_only, a), 2);
    assert_true(exists(f->dir, a));
    assert_false(exists(f->dir, b));
    assert_false(exists(f->dir, c));
    assert_int_equal(result_store_count(s), 1);
    assert_int_equal(result_store_total_bytes(s), 10);
    assert_int_equal(result_store_retain(s, keep_first_only, a), 0);
    result_store_close(s);
}

static void test_expire(void **state)
{
    fixture_t *f = *state;
    char old1[JOB_ID_SIZE], old2[JOB_ID_SIZE], young[JOB_ID_SIZE];
    result_store_t *s = open_store(f->dir);
    put(s, old1, 5, 0);
    put(s, old2, 5, 0);
    put(s, young, 5, 0);
    result_store_close(s);
    set_mtime(f->dir, old1, 1000);
    set_mtime(f->dir, old2, 2000);
    set_mtime(f->dir, young, 9000);
    s = open_store(f->dir);

    removed_t r = {.n = 0};
    /* now = 10000 s, ttl = 7000 s: cutoff 3000 s */
    assert_int_equal(result_store_expire(s, 10000LL * 1000, 7000ULL * 1000, removed_cb, &r), 2);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.ids[0], old1);
    assert_string_equal(r.ids[1], old2);
    assert_false(exists(f->dir, old1));
    assert_true(exists(f->dir, young));
    assert_int_equal(result_store_count(s), 1);
    assert_int_equal(result_store_expire(s, 10000LL * 1000, 7000ULL * 1000, removed_cb, &r), 0);
    /* a ttl longer than the epoch removes nothing */
    assert_int_equal(result_store_expire(s, 10000LL * 1000, UINT64_MAX, removed_cb, &r), 0);
    assert_int_equal(result_store_expire(s, 10000LL * 1000 + 1, 1000ULL * 1000, NULL, NULL), 1);
    assert_int_equal(result_store_count(s), 0);
    result_store_close(s);
}

static void test_remove(void **state)
{
    fixture_t *f = *state;
    char a[JOB_ID_SIZE], missing[JOB_ID_SIZE];
    result_store_t *s = open_store(f->dir);
    put(s, a, 42, 0);
    assert_int_equal(result_store_remove(s, a), 0);
    assert_false(exists(f->dir, a));
    assert_int_equal(result_store_count(s), 0);
    assert_int_equal(result_store_total_bytes(s), 0);
    assert_int_equal(result_store_remove(s, a), -ENOENT);
    assert_int_equal(job_id_generate(missing), 0);
    assert_int_equal(result_store_remove(s, missing), -ENOENT);
    assert_int_equal(result_store_remove(s, "../state"), -EINVAL);
    assert_int_equal(result_store_remove(s, NULL), -EINVAL);
    result_store_close(s);
}

typedef struct thread_job {
    result_writer_t *w;
    int rc;
} thread_job_t;

static void *commit_thread(void *arg)
{
    thread_job_t *t = arg;
    t->rc = result_writer_write(t->w, "from a thread", 13);
    if (t->rc == 0)
        t->rc = result_writer_commit(t->w);
    return NULL;
}

static void test_commit_on_another_thread(void **state)
{
    fixture_t *f = *state;
    char err[RESULT_STORE_ERR_MAX], id[JOB_ID_SIZE];
    result_store_t *s = open_store(f->dir);
    pthread_t th;
    thread_job_t t = {0};

    assert_int_equal(job_id_generate(id), 0);
    t.w = result_writer_open(s, id, 0, err, sizeof err);
    assert_non_null(t.w);
    assert_int_equal(pthread_create(&th, NULL, commit_thread, &t), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(t.rc, 0);
    result_writer_close(s, t.w); /* the loop thread adopts it */
    uint64_t bytes;
    assert_true(result_store_has(s, id, &bytes));
    assert_int_equal(bytes, 13);
    result_store_close(s);
}

static void test_free_disk(void **state)
{
    fixture_t *f = *state;
    uint64_t free_bytes = 0;
    assert_int_equal(result_store_free_disk(f->root, &free_bytes), 0);
    assert_true(free_bytes > 0);
    assert_int_equal(result_store_free_disk("/nonexistent/dir/for/sure", &free_bytes), -ENOENT);
}

static void test_open_errors(void **state)
{
    fixture_t *f = *state;
    char err[RESULT_STORE_ERR_MAX], path[256];
    touch(f->root, "file", "x");
    snprintf(path, sizeof path, "%s/file/results", f->root);
    assert_null(result_store_open(path, err, sizeof err));
    assert_non_null(strstr(err, "creating directory"));
    assert_null(result_store_open("", err, sizeof err));
}

static void test_enospc_on_tiny_tmpfs(void **state)
{
    fixture_t *f = *state;
    char mnt[160], err[RESULT_STORE_ERR_MAX], id[JOB_ID_SIZE], small[JOB_ID_SIZE];
    unsigned char chunk[16384];

    snprintf(mnt, sizeof mnt, "%s/tiny", f->root);
    assert_int_equal(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=256k") != 0) {
        print_message("SKIPPED test_enospc_on_tiny_tmpfs: cannot mount a tmpfs (%s); needs root\n",
                      strerror(errno));
        skip();
    }
    result_store_t *s = open_store(mnt);
    memset(chunk, 'z', sizeof chunk);

    uint64_t free_before = 0;
    assert_int_equal(result_store_free_disk(mnt, &free_before), 0);
    assert_true(free_before <= 256 * 1024);

    assert_int_equal(job_id_generate(id), 0);
    result_writer_t *w = result_writer_open(s, id, 0, err, sizeof err);
    assert_non_null(w);
    int rc = 0;
    for (int i = 0; i < 64 && rc == 0; i++) /* 1 MiB into 256 KiB */
        rc = result_writer_write(w, chunk, sizeof chunk);
    assert_int_equal(rc, -1);
    assert_true(result_writer_disk_full(w));
    assert_int_equal(result_writer_errno(w), ENOSPC);
    assert_non_null(strstr(result_writer_error(w), "No space left on device"));
    assert_int_equal(result_writer_commit(w), -1);
    result_writer_close(s, w);
    /* nothing left behind: the space is back, and a small result still fits */
    assert_int_equal(count_entries(mnt), 0);
    assert_int_equal(result_store_count(s), 0);
    put(s, small, 1000, 7);
    assert_true(result_store_has(s, small, NULL));
    result_store_close(s);
    assert_int_equal(umount(mnt), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_generate),
        cmocka_unit_test(test_id_validator),
        cmocka_unit_test_setup_teardown(test_write_commit_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abort_and_failures_leave_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_cleans_and_indexes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_make_room_incoming_larger_than_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expire, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_on_another_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enospc_on_tiny_tmpfs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
