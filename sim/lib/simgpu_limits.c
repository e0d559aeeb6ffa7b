/*
 * simgpu_limits: per-cgroup memory limits of a simulated GPU, as NVIDIA's driver r615 has
 * them (nvmlDeviceSetMemoryLimits_v1 / nvmlDeviceGetMemoryLimits_v1; simgpu.h has the rules).
 *
 * A limit is a (cgroup v2 directory, soft, hard) record in its GPU's limits table. A process
 * is under a limit when its own cgroup directory (read once, at simgpu_open) is that
 * directory or one below it; what a limit's cgroup holds is the sum of the GPU slots whose
 * cgroup is within it (dead-but-not-yet-released slots included: the driver still holds that
 * memory). The soft limit is recorded and reported, never enforced (the driver's "guaranteed
 * before allocations may fail due to memory pressure" has no pressure to model here).
 *
 * Invariants: every table access holds the set's mutex; paths are stored without a trailing
 * '/', NUL-terminated within SIMGPU_CGROUP_MAX, with the directory's inode; a limit whose
 * directory is gone, or was made again (another inode: another cgroup), is dropped at the
 * next look (counted in the header's limits_dropped).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "simgpu_int.h"

/* ---- the calling process's cgroup ---- */

/* The cgroup2 mount's point and root (mountinfo fields 5 and 4) into point/root. */
static bool cgroup2_mount(char *point, size_t pcap, char *root, size_t rcap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        const char *sep = strstr(line, " - ");
        if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
            continue;
        char r[512], p[512];
        if (sscanf(line, "%*s %*s %*s %511s %511s", r, p) == 2 && strlen(p) < pcap && strlen(r) < rcap) {
            snprintf(point, pcap, "%s", p);
            snprintf(root, rcap, "%s", r);
            found = true;
        }
    }
    fclose(f);
    return found;
}

static void strip_slash(char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = '\0';
}

void sg_cgroup_init(simgpu_t *s)
{
    s->self_cgroup[0] = '\0';
    char rel[SIMGPU_CGROUP_MAX] = "", point[SIMGPU_CGROUP_MAX], root[SIMGPU_CGROUP_MAX];
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return;
    char line[SIMGPU_CGROUP_MAX + 16];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(rel, sizeof rel, "%s", line + 3);
            break;
        }
    }
    fclose(f);
    if (rel[0] != '/' || !cgroup2_mount(point, sizeof point, root, sizeof root))
        return;
    const char *tail = rel;
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0) { /* the mount shows a subtree: rel must be within it */
        if (strncmp(rel, root, rl) != 0 || (rel[rl] != '/' && rel[rl] != '\0'))
            return;
        tail = rel + rl;
    }
    int n = snprintf(s->self_cgroup, sizeof s->self_cgroup, "%s%s", point, tail);
    if (n < 0 || (size_t)n >= sizeof s->self_cgroup)
        s->self_cgroup[0] = '\0';
    strip_slash(s->self_cgroup);
}

/* ---- the table ---- */

static bool within(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (!path[0] || strncmp(path, dir, n) != 0)
        return false;
    return path[n] == '\0' || path[n] == '/' || (n == 1 && dir[0] == '/');
}

/* The directory's inode, 0 when path is no directory. */
static uint64_t dir_ino(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? (uint64_t)st.st_ino : 0;
}

static uint64_t held_within(const struct gpu_record *gpu, const char *dir)
{
    uint64_t used = 0;
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++)
        if (gpu->slots[i].in_use && within(gpu->slots[i].cgroup, dir))
            used += gpu->slots[i].bytes;
    return used;
}

/* Drop the limits whose directory is gone (or was made again: another cgroup, as the
 * driver clears a limit when its cgroup is removed). */
static void drop_stale_locked(simgpu_t *s, struct gpu_record *gpu)
{
    for (int i = 0; i < SIMGPU_MAX_LIMITS; i++) {
        struct limit_rec *l = &gpu->limits[i];
        if (l->in_use && dir_ino(l->cgroup) != l->ino) {
            l->in_use = 0;
            s->hdr->limits_dropped++;
        }
    }
}

uint64_t sg_limit_room_locked(simgpu_t *s, struct gpu_record *gpu, const char *cgroup, uint64_t *total_out)
{
    uint64_t room = UINT64_MAX, total = UINT64_MAX;
    if (!cgroup || !cgroup[0]) {
        if (total_out)
            *total_out = total;
        return room;
    }
    bool any = false;
    for (int i = 0; i < SIMGPU_MAX_LIMITS && !any; i++)
        any = gpu->limits[i].in_use;
    if (any)
        drop_stale_locked(s, gpu);
    for (int i = 0; any && i < SIMGPU_MAX_LIMITS; i++) {
        const struct limit_rec *l = &gpu->limits[i];
        if (!l->in_use || !within(cgroup, l->cgroup))
            continue;
        uint64_t used = held_within(gpu, l->cgroup);
        uint64_t r = used >= l->hard ? 0 : l->hard - used;
        if (r < room)
            room = r;
        if (l->hard < total)
            total = l->hard;
    }
    if (total_out)
        *total_out = total;
    return room;
}

static bool gpu_ok(simgpu_t *s, int gpu)
{
    if (!s || gpu < 0 || gpu >= s->n_gpus) {
        errno = EINVAL;
        return false;
    }
    return true;
}

/* The normalised form of a limit's directory into out; -1 with errno when it cannot be one. */
static int normalise(const char *cgroup, char out[SIMGPU_CGROUP_MAX])
{
    if (!cgroup || cgroup[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    if (strlen(cgroup) >= SIMGPU_CGROUP_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(out, SIMGPU_CGROUP_MAX, "%s", cgroup);
    strip_slash(out);
    return 0;
}

int simgpu_limit_set(simgpu_t *s, int gpu, const char *cgroup, uint64_t soft, uint64_t hard)
{
    char dir[SIMGPU_CGROUP_MAX];
    if (!gpu_ok(s, gpu) || normalise(cgroup, dir) != 0)
        return -1;
    bool clear = soft == 0 && hard == SIMGPU_LIMIT_NONE;
    if (!clear && (soft > hard)) {
        errno = EINVAL;
        return -1;
    }
    uint64_t ino = clear ? 0 : dir_ino(dir);
    if (!clear && !ino) {
        errno = ENOENT;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    struct limit_rec *free_rec = NULL;
    for (int i = 0; i < SIMGPU_MAX_LIMITS; i++) {
        struct limit_rec *l = &rec->limits[i];
        if (l->in_use && strcmp(l->cgroup, dir) == 0) {
            if (clear) {
                l->in_use = 0;
            } else {
                l->soft = soft;
                l->hard = hard;
                l->ino = ino;
            }
            sg_unlock(s);
            return 0;
        }
        if (!l->in_use && !free_rec)
            free_rec = l;
    }
    if (clear) { /* nothing set there: clearing it is a no-op, as NVML's is */
        sg_unlock(s);
        return 0;
    }
    if (!free_rec) {
        sg_unlock(s);
        errno = ENOSPC;
        return -1;
    }
    snprintf(free_rec->cgroup, sizeof free_rec->cgroup, "%s", dir);
    free_rec->ino = ino;
    free_rec->soft = soft;
    free_rec->hard = hard;
    free_rec->in_use = 1;
    sg_unlock(s);
    return 0;
}

static void fill(const struct gpu_record *rec, const struct limit_rec *l, simgpu_limit_t *out)
{
    snprintf(out->cgroup, sizeof out->cgroup, "%s", l->cgroup);
    out->soft = l->soft;
    out->hard = l->hard;
    out->used = held_within(rec, l->cgroup);
}

int simgpu_limit_get(simgpu_t *s, int gpu, const char *cgroup, simgpu_limit_t *out)
{
    char dir[SIMGPU_CGROUP_MAX];
    if (!gpu_ok(s, gpu) || !out || normalise(cgroup, dir) != 0)
        return -1;
    if (sg_lock(s) < 0)
        return -1;
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    drop_stale_locked(s, rec);
    for (int i = 0; i < SIMGPU_MAX_LIMITS; i++) {
        if (rec->limits[i].in_use && strcmp(rec->limits[i].cgroup, dir) == 0) {
            fill(rec, &rec->limits[i], out);
            sg_unlock(s);
            return 0;
        }
    }
    sg_unlock(s);
    errno = ENOENT;
    return -1;
}

int simgpu_limit_list(simgpu_t *s, int gpu, simgpu_limit_t *out, size_t cap, size_t *n)
{
    if (!gpu_ok(s, gpu) || !n)
        return -1;
    if (sg_lock(s) < 0)
        return -1;
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    drop_stale_locked(s, rec);
    size_t count = 0;
    for (int i = 0; i < SIMGPU_MAX_LIMITS; i++) {
        if (!rec->limits[i].in_use)
            continue;
        if (count < cap)
            fill(rec, &rec->limits[i], &out[count]);
        count++;
    }
    sg_unlock(s);
    *n = count;
    return 0;
}

uint64_t simgpu_limits_dropped(simgpu_t *s)
{
    if (!s || sg_lock(s) < 0)
        return 0;
    uint64_t n = s->hdr->limits_dropped;
    sg_unlock(s);
    return n;
}

int simgpu_mem_view(simgpu_t *s, int gpu, uint64_t *free_bytes, uint64_t *total)
{
    if (!gpu_ok(s, gpu) || !free_bytes || !total)
        return -1;
    if (sg_lock(s) < 0)
        return -1;
    struct gpu_record *rec = &s->hdr->gpus[gpu];
    uint64_t used = sg_used_locked(rec);
    uint64_t card_free = used >= rec->total ? 0 : rec->total - used;
    uint64_t limit_total = UINT64_MAX;
    uint64_t room = sg_limit_room_locked(s, rec, s->self_cgroup, &limit_total);
    sg_unlock(s);
    *total = limit_total < rec->total ? limit_total : rec->total;
    *free_bytes = room < card_free ? room : card_free;
    return 0;
}
