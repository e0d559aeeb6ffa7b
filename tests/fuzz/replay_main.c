/*
 * replay_main: runs a libFuzzer entry point (LLVMFuzzerTestOneInput) over a committed
 * corpus without libFuzzer, so every fuzzer's corpus is a regression test under gcc and
 * ASan/UBSan (build/tests/replay_<name>, build-san/tests/replay_<name>).
 *
 * Usage: replay_<name> [FILE|DIR]...   Each file, and each regular file directly inside
 * each directory, is read into a buffer of exactly its size (so ASan sees any overread)
 * and passed to the entry point once. With no arguments it replays
 * tests/fuzz/corpus/<name>, <name> being the program name without "replay_".
 * A crash or failed check inside the entry point aborts the process (non-zero exit).
 * Exit status: 0 when at least one input was replayed, 1 when an input could not be
 * read or none was found (a replay of nothing must not pass).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (16u << 20) /* corpus files are small; refuse anything absurd */

/* Replays one file. Returns 0, or -1 when it cannot be read. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0 || st.st_size > REPLAY_MAX_INPUT) {
        fprintf(stderr, "replay: %s: cannot size, or larger than %u bytes\n", path,
                REPLAY_MAX_INPUT);
        fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *data = malloc(size ? size : 1);
    if (!data || fread(data, 1, size, f) != size) {
        fprintf(stderr, "replay: %s: read failed\n", path);
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Replays every regular file directly inside dir, in name order. Returns the count, or -1. */
static long replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    long result = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t grown = cap ? cap * 2 : 64;
            char **more = realloc(names, grown * sizeof *names);
            if (!more) {
                result = -1;
                break;
            }
            names = more;
            cap = grown;
        }
        size_t len = strlen(dir) + 1 + strlen(e->d_name) + 1;
        names[n] = malloc(len);
        if (!names[n]) {
            result = -1;
            break;
        }
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (result == 0) {
        qsort(names, n, sizeof *names, compare_names);
        for (size_t i = 0; i < n; i++) {
            struct stat st;
            if (stat(names[i], &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            if (replay_file(names[i]) != 0) {
                result = -1;
                break;
            }
            result++;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return result;
}

int main(int argc, char **argv)
{
    char default_dir[512];
    char *default_args[2];
    if (argc < 2) {
        const char *prog = strrchr(argv[0], '/');
        prog = prog ? prog + 1 : argv[0];
        if (strncmp(prog, "replay_", 7) == 0)
            prog += 7;
        snprintf(default_dir, sizeof default_dir, "tests/fuzz/corpus/%s", prog);
        default_args[0] = argv[0];
        default_args[1] = default_dir;
        argv = default_args;
        argc = 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        long n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) ? -1 : 1);
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replayed %ld inputs\n", total);
    return total > 0 ? 0 : 1;
}
