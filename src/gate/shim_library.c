/*
 * shim_library: finding libvramd-cuda.so (the order is in shim_library.h).
 */
#include "gate/shim_library.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool shim_library_file_ok(const char *path)
{
    struct stat st;
    return path && path[0] && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool shim_library_find(char *out, size_t cap)
{
    out[0] = '\0';
    const char *env = getenv("VRAMD_CUDA_SHIM_LIBRARY");
    if (env && env[0]) {
        if (shim_library_file_ok(env))
            snprintf(out, cap, "%s", env);
        return out[0] != '\0';
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            const char *rel[] = {"../lib/libvramd-cuda.so", "../lib/vramd/libvramd-cuda.so"};
            for (size_t i = 0; i < 2; i++) {
                char p[PATH_MAX + 64];
                snprintf(p, sizeof p, "%s/%s", exe, rel[i]);
                char real[PATH_MAX];
                if (shim_library_file_ok(p) && realpath(p, real)) {
                    snprintf(out, cap, "%s", real);
                    return true;
                }
            }
        }
    }
    if (shim_library_file_ok("/usr/lib/vramd/libvramd-cuda.so"))
        snprintf(out, cap, "%s", "/usr/lib/vramd/libvramd-cuda.so");
    return out[0] != '\0';
}
