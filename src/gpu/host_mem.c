/* host_mem: MemAvailable and the cgroup's room. See host_mem.h. */
#include "gpu/host_mem.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* "MemAvailable:  N kB" in bytes; 0 when unknown. */
uint64_t host_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* A number in a file; 0 when missing or not a number ("max"). */
static uint64_t file_u64(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    uint64_t v = 0;
    if (fscanf(f, "%" SCNu64, &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

#define CGROUP_ROOT "/sys/fs/cgroup"
#define CGROUP_V1_MEMORY CGROUP_ROOT "/memory"
#define CGROUP_UNLIMITED (1ULL << 62) /* v1 shows "no limit" as about 2^63 */

/* The path of this process's cgroup in a hierarchy, from /proc/self/cgroup: the line
 * "0::PATH" (v2) when want is NULL, else the v1 line whose controller list holds want
 * ("4:memory:PATH", "3:cpu,memory:PATH"). "" for the root; -1 when there is no such line. */
static int self_cgroup(const char *want, char *out, size_t outlen)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return -1;
    char line[600];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        bool match = false;
        if (!want) {
            match = strcmp(line, "0") == 0 && ctrls[0] == '\0';
        } else {
            char list[200], *save = NULL;
            snprintf(list, sizeof list, "%s", ctrls);
            for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                match = match || strcmp(tok, want) == 0;
        }
        if (match) {
            snprintf(out, outlen, "%s", strcmp(path, "/") == 0 ? "" : path);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* A "NAME N" line of a v1 memory.stat; 0 when missing. */
static uint64_t stat_u64(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t v = 0;
    size_t nl = strlen(name);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, name, nl) == 0 && line[nl] == ' ') {
            if (sscanf(line + nl + 1, "%" SCNu64, &v) != 1)
                v = 0;
            break;
        }
    }
    fclose(f);
    return v;
}

/* cgroup v2: the least room (memory.max - memory.current) of the cgroup and its ancestors
 * (a parent's memory.max binds the children too); 0 when none has a limit. The namespaced
 * view (the cgroup mounted as the root) is read the same way. */
static uint64_t cgroup_v2_room(void)
{
    char rel[512] = "";
    if (self_cgroup(NULL, rel, sizeof rel) != 0)
        return 0;
    char dir[600], path[700];
    uint64_t room = 0;
    snprintf(dir, sizeof dir, "%s%s", CGROUP_ROOT, rel);
    for (;;) {
        snprintf(path, sizeof path, "%s/memory.max", dir);
        uint64_t max = file_u64(path); /* "max" (no limit) reads as 0 */
        if (max) {
            snprintf(path, sizeof path, "%s/memory.current", dir);
            uint64_t cur = file_u64(path);
            uint64_t r = max > cur ? max - cur : 1;
            if (!room || r < room)
                room = r;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < strlen(CGROUP_ROOT))
            break;
        *slash = '\0';
    }
    return room;
}

/* cgroup v1 (the memory controller in its own hierarchy, as on hybrid systems):
 * hierarchical_memory_limit (the least limit of the cgroup and its ancestors) less
 * memory.usage_in_bytes; 0 when unlimited or not mounted. */
static uint64_t cgroup_v1_room(void)
{
    char rel[512] = "", path[700];
    if (self_cgroup("memory", rel, sizeof rel) != 0)
        return 0;
    snprintf(path, sizeof path, "%s%s/memory.stat", CGROUP_V1_MEMORY, rel);
    uint64_t limit = stat_u64(path, "hierarchical_memory_limit");
    if (!limit) { /* a namespaced view: this cgroup mounted as the hierarchy's root */
        snprintf(rel, sizeof rel, "%s", "");
        snprintf(path, sizeof path, "%s/memory.stat", CGROUP_V1_MEMORY);
        limit = stat_u64(path, "hierarchical_memory_limit");
    }
    if (!limit || limit >= CGROUP_UNLIMITED)
        return 0;
    snprintf(path, sizeof path, "%s%s/memory.usage_in_bytes", CGROUP_V1_MEMORY, rel);
    uint64_t cur = file_u64(path);
    return limit > cur ? limit - cur : 1;
}

/* What the cgroup still allows: v2, else v1; 0 when unlimited or unknown. */
uint64_t host_mem_cgroup_room(void)
{
    uint64_t room = cgroup_v2_room();
    return room ? room : cgroup_v1_room();
}

uint64_t host_mem_room(const char **source, uint64_t *avail_out, uint64_t *room_out)
{
    uint64_t avail = host_mem_available();
    uint64_t room = host_mem_cgroup_room();
    const char *src = avail ? "meminfo" : "none";
    uint64_t base = avail;
    if (room && (!base || room < base)) {
        base = room;
        src = "cgroup";
    }
    if (source)
        *source = src;
    if (avail_out)
        *avail_out = avail;
    if (room_out)
        *room_out = room;
    return base;
}
