/*
 * alloc_bench: what one device allocation costs through the CUDA driver API, with or
 * without the CUDA shim (libvramd-cuda.so) in LD_PRELOAD; bench/shim/run.py runs it.
 *
 *   alloc_bench [--n N] [--size BYTES] [--rounds R] [--mode pairs|grow] [--out FILE]
 *               [--serve PORT]
 *
 * The driver is $VRAMD_CUDA_LIBRARY (else libcuda.so.1), loaded with dlopen, its entry
 * points with dlsym, as a program linked against the driver would reach them.
 *   pairs  R rounds of N x (cuMemAlloc_v2(size); cuMemFree_v2): the fast path
 *   grow   R rounds of N x cuMemAlloc_v2(size) kept, then all freed: under vramd with a
 *          small grant, every allocation of a round past the grant asks vramd (a round trip)
 * Prints one JSON line: the median (over rounds) of ns per allocation (pairs: per
 * alloc+free), every round's figure, and the errors seen. --out writes the same line to
 * FILE. --serve PORT: afterwards answer every HTTP request on 127.0.0.1:PORT with 200 (a
 * worker's /health for vramd) until killed.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef int (*cu_init_t)(unsigned);
typedef int (*cu_device_get_t)(int *, int);
typedef int (*cu_ctx_retain_t)(void **, int);
typedef int (*cu_ctx_set_t)(void *);
typedef int (*cu_alloc_t)(uint64_t *, size_t);
typedef int (*cu_free_t)(uint64_t);

#define ROUNDS_MAX 64

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void serve(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0) {
        perror("alloc_bench: listen");
        exit(1);
    }
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n"
                             "Connection: close\r\n\r\n{\"status\":\"ok\"}";
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        char buf[4096];
        (void)read(c, buf, sizeof buf);
        (void)write(c, ok, sizeof ok - 1);
        close(c);
    }
}

int main(int argc, char **argv)
{
    long n = 1000, rounds = 5, port = 0;
    size_t size = 1 << 20;
    const char *mode = "pairs", *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n"))
            n = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--size"))
            size = (size_t)atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--mode"))
            mode = argv[i + 1];
        else if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
        else if (!strcmp(argv[i], "--serve"))
            port = atol(argv[i + 1]);
    }
    if (n < 1 || n > 100000 || rounds < 1 || rounds > ROUNDS_MAX || (strcmp(mode, "pairs") && strcmp(mode, "grow"))) {
        fprintf(stderr, "alloc_bench: --n 1..100000, --rounds 1..%d, --mode pairs|grow\n", ROUNDS_MAX);
        return 2;
    }
    const char *lib = getenv("VRAMD_CUDA_LIBRARY");
    void *h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "alloc_bench: %s\n", dlerror());
        return 1;
    }
    cu_init_t cu_init = (cu_init_t)dlsym(h, "cuInit");
    cu_device_get_t dev_get = (cu_device_get_t)dlsym(h, "cuDeviceGet");
    cu_ctx_retain_t retain = (cu_ctx_retain_t)dlsym(h, "cuDevicePrimaryCtxRetain");
    cu_ctx_set_t set = (cu_ctx_set_t)dlsym(h, "cuCtxSetCurrent");
    cu_alloc_t alloc = (cu_alloc_t)dlsym(h, "cuMemAlloc_v2");
    cu_free_t release = (cu_free_t)dlsym(h, "cuMemFree_v2");
    int dev = 0;
    void *ctx = NULL;
    if (!cu_init || !dev_get || !retain || !set || !alloc || !release || cu_init(0) || dev_get(&dev, 0) ||
        retain(&ctx, dev) || set(ctx)) {
        fprintf(stderr, "alloc_bench: the driver did not start\n");
        return 1;
    }
    uint64_t *ptrs = calloc((size_t)n, sizeof *ptrs);
    uint64_t per[ROUNDS_MAX];
    long errors = 0;
    for (long r = 0; r < rounds; r++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < n; i++) {
            if (alloc(&ptrs[i], size) != 0) {
                errors++;
                ptrs[i] = 0;
            }
            if (!strcmp(mode, "pairs") && ptrs[i])
                release(ptrs[i]);
        }
        uint64_t t1 = now_ns();
        if (!strcmp(mode, "grow"))
            for (long i = 0; i < n; i++)
                if (ptrs[i])
                    release(ptrs[i]);
        per[r] = (t1 - t0) / (uint64_t)n;
    }
    uint64_t sorted[ROUNDS_MAX];
    memcpy(sorted, per, sizeof(uint64_t) * (size_t)rounds);
    qsort(sorted, (size_t)rounds, sizeof sorted[0], cmp_u64);
    char line[2048];
    int o = snprintf(line, sizeof line, "{\"mode\":\"%s\",\"n\":%ld,\"size\":%zu,\"median_ns\":%llu,\"rounds_ns\":[",
                     mode, n, size, (unsigned long long)sorted[rounds / 2]);
    for (long r = 0; r < rounds && o < (int)sizeof line - 32; r++)
        o += snprintf(line + o, sizeof line - (size_t)o, "%s%llu", r ? "," : "", (unsigned long long)per[r]);
    snprintf(line + o, sizeof line - (size_t)o, "],\"errors\":%ld,\"preload\":\"%s\"}", errors,
             getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
    printf("%s\n", line);
    fflush(stdout);
    if (out) {
        FILE *f = fopen(out, "w");
        if (f) {
            fprintf(f, "%s\n", line);
            fclose(f);
        }
    }
    free(ptrs);
    if (port > 0)
        serve((int)port);
    return errors ? 1 : 0;
}
