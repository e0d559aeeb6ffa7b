/* host_mem: MemAvailable and the cgroup's room. See host_mem.h. */
#include "gpu/host_mem.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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

uint64_t host_mem_cgroup_room(void)
{
    char dir[512] = "/sys/fs/cgroup";
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char line[400];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "0::", 3) == 0) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", strcmp(line + 3, "/") == 0 ? "" : line + 3);
                break;
            }
        }
        fclose(f);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/memory.max", dir);
    uint64_t max = file_u64(path);
    if (max == 0) {
        snprintf(path, sizeof path, "/sys/fs/cgroup/memory.max"); /* a namespaced view */
        max = file_u64(path);
        snprintf(dir, sizeof dir, "/sys/fs/cgroup");
    }
    if (max == 0)
        return 0;
    snprintf(path, sizeof path, "%s/memory.current", dir);
    uint64_t cur = file_u64(path);
    return max > cur ? max - cur : 1;
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
