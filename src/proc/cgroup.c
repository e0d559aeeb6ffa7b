/* cgroup: a cgroup per worker instance (the contract is in cgroup.h). */
#include "proc/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "gpu/procfs.h"

#define PROCS_READ_MAX (64 * 1024) /* bytes of one cgroup.procs read */
#define KILL_PASSES 8              /* passes over the members without a freezer */

const char *cgroup_mode_cannot_catch(enum cgroup_mode m)
{
    switch (m) {
    case CGROUP_V2:
    case CGROUP_V1: return NULL;
    case CGROUP_SUBREAPER:
        return "a helper a worker detaches (setsid, a double fork, a daemonizing server) leaves its process group: "
               "its memory counts as foreign, it is not killed with its instance, and it outlives a SIGKILL of "
               "vramd (use a cgroup mode: docs/operations.md)";
    default:
        return "no cgroup and no subreaper: a worker's orphans go to init, and only its process group is killed";
    }
}

const char *cgroup_mode_name(enum cgroup_mode m)
{
    switch (m) {
    case CGROUP_V2: return "v2";
    case CGROUP_V1: return "v1";
    case CGROUP_SUBREAPER: return "subreaper";
    default: return "off";
    }
}

bool cgroup_tree_active(const cgroup_tree_t *t)
{
    return t && (t->mode == CGROUP_V1 || t->mode == CGROUP_V2) && t->n_join > 0;
}

/* ---------------------------------------------------------------------------------------
 * Small file helpers
 */

static int write_text(const char *dir, const char *file, const char *text)
{
    char path[CGROUP_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int saved = errno;
    close(fd);
    errno = saved;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

static ssize_t read_text(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return (ssize_t)got;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* a + "/" + b without a doubled slash; false when it does not fit */
static bool join_path(char *out, size_t outlen, const char *a, const char *b)
{
    size_t la = strlen(a);
    bool slash = la > 0 && a[la - 1] == '/';
    while (*b == '/')
        b++;
    int n = snprintf(out, outlen, "%s%s%s", a, slash || !*b ? "" : "/", b);
    return n >= 0 && (size_t)n < outlen;
}

/* ---------------------------------------------------------------------------------------
 * Where the hierarchies are, and where vramd sits in them
 */

typedef struct mount_scan {
    char v2[CGROUP_PATH_MAX / 2];    /* the cgroup2 mount, "" none */
    char pids[CGROUP_PATH_MAX / 2];  /* the v1 mount with the pids controller */
    char freezer[CGROUP_PATH_MAX / 2];
} mount_scan_t;

/* Does the comma-separated list have the word? */
static bool has_word(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == wl && strncmp(p, word, wl) == 0)
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

/* The cgroup mounts from /proc/self/mountinfo: every one into t->mounts, the three that
 * matter into s. */
static void scan_mounts(cgroup_tree_t *t, mount_scan_t *s)
{
    memset(s, 0, sizeof *s);
    t->n_mounts = 0;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
        char root[1024], mnt[1024];
        if (sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2)
            continue;
        const char *sep = strstr(line, " - ");
        if (!sep)
            continue;
        char fstype[32], source[256], super[1024] = "";
        if (sscanf(sep + 3, "%31s %255s %1023s", fstype, source, super) < 2)
            continue;
        bool v2 = strcmp(fstype, "cgroup2") == 0;
        if (!v2 && strcmp(fstype, "cgroup") != 0)
            continue;
        if (strlen(mnt) >= sizeof t->mounts[0] || t->n_mounts >= CGROUP_MOUNTS_MAX)
            continue;
        snprintf(t->mounts[t->n_mounts++], sizeof t->mounts[0], "%s", mnt);
        if (v2 && !s->v2[0])
            snprintf(s->v2, sizeof s->v2, "%s", mnt);
        if (!v2 && has_word(super, "pids") && !s->pids[0])
            snprintf(s->pids, sizeof s->pids, "%s", mnt);
        if (!v2 && has_word(super, "freezer") && !s->freezer[0])
            snprintf(s->freezer, sizeof s->freezer, "%s", mnt);
    }
    fclose(f);
}

/* vramd's own cgroup in the v2 hierarchy (controller NULL) or in the v1 one with that
 * controller, from /proc/self/cgroup; "/" when not found. */
static void own_cgroup(const char *controller, char *out, size_t outlen)
{
    snprintf(out, outlen, "/");
    char buf[8192];
    if (read_text("/proc/self/cgroup", buf, sizeof buf) <= 0)
        return;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        bool match = controller ? has_word(c1 + 1, controller) : (strcmp(line, "0:") == 0 && c1[1] == '\0');
        if (match) {
            snprintf(out, outlen, "%s", c2 + 1);
            return;
        }
    }
}

/* mkdir dir (an existing one is fine) and check that vramd may add processes to it. */
static int make_writable_dir(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
    char procs[CGROUP_PATH_MAX + 16];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
    return access(procs, W_OK);
}

void cgroup_tree_name(const char *state_dir, char *out, size_t outlen)
{
    char real[PATH_MAX];
    const char *s = realpath(state_dir ? state_dir : ".", real) ? real : (state_dir ? state_dir : ".");
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = s; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    snprintf(out, outlen, "vramd-%08x", h);
}

/* The subtree in mount (at mount + rel): the directory, made and writable. */
static int open_in(const char *mount, const char *rel, char *dir, size_t dirlen)
{
    if (!mount[0] || !join_path(dir, dirlen, mount, rel)) {
        errno = ENOENT;
        return -1;
    }
    return make_writable_dir(dir);
}

static int tree_open_v2(cgroup_tree_t *t, const mount_scan_t *s, const char *name)
{
    char own[CGROUP_PATH_MAX / 2];
    own_cgroup(NULL, own, sizeof own);
    if (!join_path(t->rel, sizeof t->rel, own, name) || open_in(s->v2, t->rel, t->join[0], sizeof t->join[0]) != 0)
        return -1;
    t->n_join = 1;
    t->freezer = -1;
    char freeze_file[CGROUP_PATH_MAX + 16];
    snprintf(freeze_file, sizeof freeze_file, "%s/cgroup.freeze", t->join[0]);
    t->has_freeze = access(freeze_file, F_OK) == 0;
    t->mode = CGROUP_V2;
    return 0;
}

static int tree_open_v1(cgroup_tree_t *t, const mount_scan_t *s, const char *name)
{
    char own[CGROUP_PATH_MAX / 2];
    own_cgroup("pids", own, sizeof own);
    if (!s->pids[0] || !join_path(t->rel, sizeof t->rel, own, name))
        return -1;
    if (open_in(s->pids, t->rel, t->join[0], sizeof t->join[0]) != 0)
        return -1;
    t->n_join = 1;
    t->freezer = -1;
    /* the freezer at the same path, when it can be written (it stops forks mid-kill) */
    if (open_in(s->freezer, t->rel, t->join[1], sizeof t->join[1]) == 0) {
        t->freezer = 1;
        t->n_join = 2;
    }
    t->mode = CGROUP_V1;
    return 0;
}

/* An explicit subtree directory: its mount says the mode. */
static int tree_open_path(cgroup_tree_t *t, const mount_scan_t *s, const char *path, char *err, size_t errlen)
{
    const char *mounts[2] = {s->v2, s->pids};
    for (int i = 0; i < 2; i++) {
        size_t ml = strlen(mounts[i]);
        if (!ml || strncmp(path, mounts[i], ml) != 0 || (path[ml] != '/' && path[ml] != '\0'))
            continue;
        snprintf(t->rel, sizeof t->rel, "%s", path[ml] ? path + ml : "/");
        if (i == 0 ? open_in(s->v2, t->rel, t->join[0], sizeof t->join[0]) != 0
                   : open_in(s->pids, t->rel, t->join[0], sizeof t->join[0]) != 0) {
            snprintf(err, errlen, "cgroup.path %s: %s (a delegated directory vramd may write is needed)", path,
                     strerror(errno));
            return -1;
        }
        t->n_join = 1;
        t->freezer = -1;
        if (i == 0) {
            char freeze_file[CGROUP_PATH_MAX + 16];
            snprintf(freeze_file, sizeof freeze_file, "%s/cgroup.freeze", t->join[0]);
            t->has_freeze = access(freeze_file, F_OK) == 0;
            t->mode = CGROUP_V2;
        } else {
            if (open_in(s->freezer, t->rel, t->join[1], sizeof t->join[1]) == 0) {
                t->freezer = 1;
                t->n_join = 2;
            }
            t->mode = CGROUP_V1;
        }
        return 0;
    }
    snprintf(err, errlen, "cgroup.path %s is not in a cgroup2 mount (%s) nor in the v1 pids mount (%s)", path,
             s->v2[0] ? s->v2 : "none", s->pids[0] ? s->pids : "none");
    return -1;
}

int cgroup_tree_open(cgroup_tree_t *t, const char *want, const char *path, const char *name, char *err,
                     size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->lock_fd = -1;
    t->freezer = -1;
    want = want ? want : "auto";
    if (strcmp(want, "off") == 0)
        return 0;
    mount_scan_t s;
    scan_mounts(t, &s);
    bool is_auto = strcmp(want, "auto") == 0;
    if (strcmp(want, "subreaper") != 0) {
        if (path && path[0] && strcmp(path, "auto") != 0) {
            if (tree_open_path(t, &s, path, err, errlen) != 0)
                return -1;
            if (is_auto || strcmp(want, cgroup_mode_name(t->mode)) == 0)
                return 0;
            snprintf(err, errlen, "cgroup.path %s is a %s hierarchy, cgroup.mode says %s", path,
                     cgroup_mode_name(t->mode), want);
            return -1;
        }
        if ((is_auto || strcmp(want, "v2") == 0) && tree_open_v2(t, &s, name) == 0)
            return 0;
        if (strcmp(want, "v2") == 0) {
            snprintf(err, errlen, "cgroup v2: %s", s.v2[0] ? strerror(errno) : "no cgroup2 mount");
            return -1;
        }
        if ((is_auto || strcmp(want, "v1") == 0) && tree_open_v1(t, &s, name) == 0)
            return 0;
        if (strcmp(want, "v1") == 0) {
            snprintf(err, errlen, "cgroup v1: %s", s.pids[0] ? strerror(errno) : "no pids hierarchy mounted");
            return -1;
        }
        t->n_join = 0;
        t->rel[0] = '\0';
    }
    t->mode = CGROUP_SUBREAPER;
    return 0;
}

int cgroup_subreaper_start(const cgroup_tree_t *t)
{
    if (t->mode != CGROUP_SUBREAPER)
        return 0;
    return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------
 * Leaves
 */

void cgroup_leaf_path(const cgroup_tree_t *t, const char *leaf, char *out, size_t outlen)
{
    if (!cgroup_tree_active(t) || !join_path(out, outlen, t->rel, leaf))
        out[0] = '\0';
}

int cgroup_tree_ensure(const cgroup_tree_t *t)
{
    if (!cgroup_tree_active(t))
        return 0;
    int rc = 0;
    for (size_t i = 0; i < t->n_join; i++)
        if (mkdir(t->join[i], 0755) != 0 && errno != EEXIST)
            rc = -1;
    return rc;
}

/* mkdir of a leaf under the subtree directory dir; when the subtree itself is gone (a dead
 * vramd's guard removed it, or an operator did), it is made again first. */
static int mkdir_leaf(const char *dir, const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    if (errno != ENOENT)
        return -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
    log_event(LOG_WARN, "cgroup_subtree_remade", "path=%s", dir);
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

int cgroup_leaf_dir(const cgroup_tree_t *t, const char *leaf, char *out, size_t outlen)
{
    if (!t || t->mode != CGROUP_V2 || t->n_join < 1) {
        errno = ENOTSUP;
        return -1;
    }
    if (!leaf[0] || strchr(leaf, '/') || strcmp(leaf, ".") == 0 || strcmp(leaf, "..") == 0) {
        errno = EINVAL;
        return -1;
    }
    if (!join_path(out, outlen, t->join[0], leaf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkdir_leaf(t->join[0], out);
}

int cgroup_leaf_open(const cgroup_tree_t *t, const char *leaf, int fds[CGROUP_JOIN_MAX], size_t *n, char *err,
                     size_t errlen)
{
    *n = 0;
    if (!cgroup_tree_active(t))
        return 0;
    if (!leaf[0] || strchr(leaf, '/') || strcmp(leaf, ".") == 0 || strcmp(leaf, "..") == 0) {
        snprintf(err, errlen, "cgroup leaf name %s is not a plain name", leaf);
        return -1;
    }
    for (size_t i = 0; i < t->n_join; i++) {
        char dir[CGROUP_PATH_MAX], procs[CGROUP_PATH_MAX + 16];
        if (!join_path(dir, sizeof dir, t->join[i], leaf) || mkdir_leaf(t->join[i], dir) != 0) {
            snprintf(err, errlen, "cgroup %s/%s: %s", t->join[i], leaf, strerror(errno));
            goto fail;
        }
        snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
        int fd = open(procs, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "%s: %s", procs, strerror(errno));
            goto fail;
        }
        fds[(*n)++] = fd;
    }
    return 0;
fail:
    for (size_t i = 0; i < *n; i++)
        close(fds[i]);
    *n = 0;
    return -1;
}

int cgroup_child_join(const int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ssize_t w;
        do
            w = write(fds[i], "0", 1);
        while (w < 0 && errno == EINTR);
        if (w != 1)
            return -1;
    }
    return 0;
}

/* The directories of the leaf's subtree in one mount, parents before children, at most
 * CGROUP_WALK_MAX (a breadth-first walk over an explicit list: no recursion). Returns the
 * count; dirs is malloc'd (free it) or NULL when the leaf is not there. */
static size_t walk_leaf(const char *top, char (**dirs)[CGROUP_PATH_MAX])
{
    *dirs = NULL;
    struct stat st;
    if (stat(top, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    char(*list)[CGROUP_PATH_MAX] = malloc(CGROUP_WALK_MAX * sizeof *list);
    if (!list)
        return 0;
    size_t n = 0;
    snprintf(list[n++], CGROUP_PATH_MAX, "%s", top);
    for (size_t i = 0; i < n; i++) {
        DIR *d = opendir(list[i]);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && n < CGROUP_WALK_MAX) {
            if (e->d_type != DT_DIR || e->d_name[0] == '.')
                continue;
            if (!join_path(list[n], CGROUP_PATH_MAX, list[i], e->d_name))
                continue;
            n++;
        }
        closedir(d);
    }
    *dirs = list;
    return n;
}

/* The leaf's subtree in mount m of the tree (walk_leaf of <mount><rel>/<leaf>). */
static size_t walk_leaf_in(const cgroup_tree_t *t, size_t m, const char *leaf, char (**dirs)[CGROUP_PATH_MAX])
{
    char top[CGROUP_PATH_MAX], rel[CGROUP_PATH_MAX];
    *dirs = NULL;
    if (!join_path(rel, sizeof rel, t->rel, leaf) || !join_path(top, sizeof top, t->mounts[m], rel))
        return 0;
    return walk_leaf(top, dirs);
}

/* Calls fn on every pid in the leaf's subtree in every mount; returns how many calls. */
typedef void (*pid_fn)(pid_t pid, void *ctx);

static size_t for_each_member(const cgroup_tree_t *t, const char *leaf, pid_fn fn, void *ctx)
{
    size_t count = 0;
    char *buf = malloc(PROCS_READ_MAX);
    if (!buf)
        return 0;
    for (size_t m = 0; m < t->n_mounts; m++) {
        char(*dirs)[CGROUP_PATH_MAX];
        size_t nd = walk_leaf_in(t, m, leaf, &dirs);
        for (size_t i = 0; i < nd; i++) {
            char procs[CGROUP_PATH_MAX + 16];
            snprintf(procs, sizeof procs, "%s/cgroup.procs", dirs[i]);
            if (read_text(procs, buf, PROCS_READ_MAX) <= 0)
                continue;
            for (char *p = buf; *p;) {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p)
                    break;
                if (v > 0 && v <= INT_MAX) {
                    fn((pid_t)v, ctx);
                    count++;
                }
                p = end;
                while (*p == '\n')
                    p++;
            }
        }
        free(dirs);
    }
    free(buf);
    return count;
}

typedef struct signal_ctx {
    int sig;
    pid_t skip_pgid; /* members of this process group got the signal already; 0 = none */
} signal_ctx_t;

/* A container runtime's monitor (podman's conmon) is spared: once the container's
 * processes are gone it records their exit and runs the engine's clean-up (--rm) itself, then
 * exits; killed, it would leave the engine's state saying "running" for a container with no
 * process, which `podman rm -f` then waits on. It holds no GPU memory. */
static bool spared(pid_t pid)
{
    char comm[32];
    return procfs_comm(pid, comm, sizeof comm) == 0 && strcmp(comm, "conmon") == 0;
}

static void send_signal(pid_t pid, void *ctx)
{
    const signal_ctx_t *s = ctx;
    if (s->skip_pgid > 0 && getpgid(pid) == s->skip_pgid)
        return;
    if (spared(pid))
        return;
    kill(pid, s->sig);
}

/* v1 freezer or v2 cgroup.freeze of the leaf: on, and wait (bounded) until frozen; off.
 * True when the leaf could be frozen (or thawed). */
static bool leaf_freeze(const cgroup_tree_t *t, const char *leaf, bool on)
{
    char dir[CGROUP_PATH_MAX], state[CGROUP_PATH_MAX + 32], buf[256];
    if (t->mode == CGROUP_V1 && t->freezer >= 0) {
        if (!join_path(dir, sizeof dir, t->join[t->freezer], leaf) ||
            write_text(dir, "freezer.state", on ? "FROZEN" : "THAWED") != 0)
            return false;
        snprintf(state, sizeof state, "%s/freezer.state", dir);
    } else if (t->mode == CGROUP_V2 && t->has_freeze) {
        if (!join_path(dir, sizeof dir, t->join[0], leaf) || write_text(dir, "cgroup.freeze", on ? "1" : "0") != 0)
            return false;
        snprintf(state, sizeof state, "%s/cgroup.events", dir);
    } else {
        return false;
    }
    for (unsigned waited = 0; on && waited < CGROUP_FREEZE_WAIT_MS; waited += 5) {
        if (read_text(state, buf, sizeof buf) < 0)
            break;
        if (strncmp(buf, "FROZEN", 6) == 0 || strstr(buf, "frozen 1"))
            break;
        sleep_ms(5);
    }
    return true;
}

int cgroup_leaf_signal(const cgroup_tree_t *t, const char *leaf, int sig, pid_t skip_pgid)
{
    if (!cgroup_tree_active(t))
        return 0;
    signal_ctx_t sc = {sig, skip_pgid};
    if (sig != SIGKILL)
        return (int)for_each_member(t, leaf, send_signal, &sc);
    sc.skip_pgid = 0; /* SIGKILL twice does no harm, and a member between two reads is caught */
    /* frozen, nothing forks away between the read of the members and their kill (not
     * cgroup.kill: it would take a runtime's monitor too, see spared()) */
    bool frozen = leaf_freeze(t, leaf, true);
    size_t first = for_each_member(t, leaf, send_signal, &sc);
    for (int pass = 1; !frozen && pass < KILL_PASSES; pass++)
        if (for_each_member(t, leaf, send_signal, &sc) == 0)
            break;
    leaf_freeze(t, leaf, false); /* the killed processes die once thawed */
    return (int)first;
}

typedef struct member_list {
    pid_t *out;
    size_t max, n;
} member_list_t;

static void add_member(pid_t pid, void *ctx)
{
    member_list_t *l = ctx;
    for (size_t i = 0; i < l->n && i < l->max; i++)
        if (l->out[i] == pid)
            return;
    if (l->n < l->max)
        l->out[l->n] = pid;
    l->n++;
}

size_t cgroup_leaf_members(const cgroup_tree_t *t, const char *leaf, pid_t *out, size_t max)
{
    if (!cgroup_tree_active(t))
        return 0;
    member_list_t l = {out, max, 0};
    for_each_member(t, leaf, add_member, &l);
    return l.n;
}

int cgroup_leaf_remove(const cgroup_tree_t *t, const char *leaf)
{
    if (!cgroup_tree_active(t))
        return 0;
    int rc = 0, saved = 0;
    for (size_t m = 0; m < t->n_mounts; m++) {
        char(*dirs)[CGROUP_PATH_MAX];
        size_t nd = walk_leaf_in(t, m, leaf, &dirs);
        for (size_t i = nd; i-- > 0;) {
            if (rmdir(dirs[i]) != 0 && errno != ENOENT) {
                rc = -1;
                saved = errno;
            }
        }
        free(dirs);
    }
    errno = saved;
    return rc;
}

/* The leaf names under the subtree, in every mount, each once (at most max). */
static size_t list_leaves(const cgroup_tree_t *t, char (*names)[CGROUP_PATH_MAX / 2], size_t max)
{
    size_t n = 0;
    for (size_t m = 0; m < t->n_mounts; m++) {
        char top[CGROUP_PATH_MAX];
        if (!join_path(top, sizeof top, t->mounts[m], t->rel))
            continue;
        DIR *d = opendir(top);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && n < max) {
            if (e->d_type != DT_DIR || e->d_name[0] == '.' || strlen(e->d_name) >= CGROUP_PATH_MAX / 2)
                continue;
            bool seen = false;
            for (size_t i = 0; i < n && !seen; i++)
                seen = strcmp(names[i], e->d_name) == 0;
            if (!seen)
                snprintf(names[n++], CGROUP_PATH_MAX / 2, "%s", e->d_name);
        }
        closedir(d);
    }
    return n;
}

int cgroup_sweep(const cgroup_tree_t *t, size_t *killed, size_t *removed)
{
    *killed = *removed = 0;
    if (!cgroup_tree_active(t))
        return 0;
    char(*names)[CGROUP_PATH_MAX / 2] = malloc(CGROUP_WALK_MAX * sizeof *names);
    if (!names)
        return 0;
    size_t n = list_leaves(t, names, CGROUP_WALK_MAX);
    int left = 0;
    for (size_t i = 0; i < n; i++) {
        int k = cgroup_leaf_signal(t, names[i], SIGKILL, 0);
        *killed += k > 0 ? (size_t)k : 0;
        /* the killed leave their cgroup as they exit: a short bounded wait */
        bool gone = false;
        for (int tries = 0; tries < 50 && !gone; tries++) {
            gone = cgroup_leaf_remove(t, names[i]) == 0;
            if (!gone)
                sleep_ms(10);
        }
        if (gone)
            (*removed)++;
        else
            left++;
    }
    free(names);
    return left;
}

int cgroup_tree_lock(cgroup_tree_t *t, const char *path, unsigned wait_ms)
{
    snprintf(t->lock_path, sizeof t->lock_path, "%s", path);
    t->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (t->lock_fd < 0)
        return -1;
    struct timespec step = {0, 20 * 1000 * 1000};
    for (unsigned waited = 0;; waited += 20) {
        if (flock(t->lock_fd, LOCK_EX | LOCK_NB) == 0) {
            if (waited > 0)
                log_event(LOG_INFO, "cgroup_lock_taken", "path=%s waited_ms=%u", path, waited);
            return 0;
        }
        if ((errno != EWOULDBLOCK && errno != EINTR) || waited >= wait_ms)
            return -1;
        if (waited == 0) /* a dead vramd's guard is sweeping the subtree */
            log_event(LOG_INFO, "cgroup_lock_waiting", "path=%s wait_ms=%u", path, wait_ms);
        nanosleep(&step, NULL);
    }
}

bool cgroup_tree_lock_try(const cgroup_tree_t *t)
{
    if (!t->lock_path[0])
        return false;
    int fd = open(t->lock_path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return true; /* the fd stays open: released when the guard exits */
    close(fd);
    return false;
}

int cgroup_tree_remove(const cgroup_tree_t *t)
{
    if (!cgroup_tree_active(t))
        return 0;
    int rc = 0;
    for (size_t m = 0; m < t->n_mounts; m++) {
        char top[CGROUP_PATH_MAX];
        if (join_path(top, sizeof top, t->mounts[m], t->rel) && rmdir(top) != 0 && errno != ENOENT)
            rc = -1;
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Attribution
 */

bool cgroup_path_within(const char *path, const char *leaf_path)
{
    size_t l = strlen(leaf_path);
    if (l == 0 || strncmp(path, leaf_path, l) != 0)
        return false;
    return path[l] == '\0' || path[l] == '/';
}

bool cgroup_path_of(const cgroup_tree_t *t, pid_t pid, char *out, size_t outlen)
{
    out[0] = '\0';
    if (!cgroup_tree_active(t) || pid <= 0)
        return false;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    if (read_text(path, buf, sizeof buf) <= 0)
        return false;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 && cgroup_path_within(c2 + 1, t->rel) && strcmp(c2 + 1, t->rel) != 0) {
            snprintf(out, outlen, "%s", c2 + 1);
            return true;
        }
    }
    return false;
}
