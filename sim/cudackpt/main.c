/*
 * simcuda-checkpoint: NVIDIA's cuda-checkpoint command line, over vramd's own driver
 * interface (src/gpu/cuda.h), so that trying it by hand exercises the same code and the
 * same library as vramd.
 *
 *   simcuda-checkpoint --get-state --pid PID
 *   simcuda-checkpoint --action lock|checkpoint|restore|unlock --pid PID [--timeout MS]
 *   simcuda-checkpoint --toggle --pid PID [--timeout MS]
 *   options: -p/--pid, -t/--timeout (the lock's, in ms; 0 or absent: no limit),
 *            --json (print the result as one JSON object: states, timings, error),
 *            -h/--help
 *
 * --toggle parks a running process (lock + checkpoint) and unparks a checkpointed one
 * (restore + unlock), as vramd's checkpoint tier does. --get-state prints running, locked,
 * checkpointed or failed. The library is $VRAMD_CUDA_LIBRARY, else libcuda-sim.so in the
 * lib/ folder beside this binary's bin/ (so VRAMD_CUDA_LIBRARY=libcuda.so.1 drives a real
 * GPU); the simulated library reads the set named by $SIMGPU.
 *
 * Exit codes: 0 ok, 1 the operation failed (the driver's error on stderr), 2 usage.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/cuda.h"

#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2

static const char usage_text[] =
    "simcuda-checkpoint: cuda-checkpoint's command line over vramd's CUDA interface\n"
    "\n"
    "Operations:\n"
    "--get-state --pid <pid>\n"
    "        Prints the checkpoint state of <pid>: running, locked, checkpointed or failed\n"
    "--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>]\n"
    "        Performs the action on <pid>; the lock waits up to <ms> milliseconds\n"
    "--toggle --pid <pid> [--timeout <ms>]\n"
    "        Running -> lock + checkpoint; checkpointed -> restore + unlock\n"
    "\n"
    "Options:\n"
    "--pid|-p <pid>, --timeout|-t <ms>, --json (print the result as JSON), --help|-h\n"
    "\n"
    "Library: $VRAMD_CUDA_LIBRARY, else ../lib/libcuda-sim.so beside this binary (which\n"
    "answers from the simulated GPU set named by $SIMGPU).\n";

typedef struct cli_args {
    bool get_state, toggle, json;
    const char *action;
    long pid;
    unsigned long timeout_ms;
} cli_args_t;

static int usage_error(const char *problem, const char *arg)
{
    fprintf(stderr, "simcuda-checkpoint: %s%s%s\n%s", problem, arg ? " " : "", arg ? arg : "",
            usage_text);
    return EXIT_USAGE;
}

static bool parse_number(const char *text, unsigned long max, unsigned long *out)
{
    char *end = NULL;
    if (!text || !*text || *text == '-')
        return false;
    unsigned long v = strtoul(text, &end, 10);
    if (*end || v > max)
        return false;
    *out = v;
    return true;
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, cli_args_t *a)
{
    memset(a, 0, sizeof *a);
    a->pid = -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long v = 0;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            fputs(usage_text, stdout);
            return EXIT_OK;
        } else if (!strcmp(arg, "--get-state")) {
            a->get_state = true;
        } else if (!strcmp(arg, "--toggle")) {
            a->toggle = true;
        } else if (!strcmp(arg, "--json")) {
            a->json = true;
        } else if (!strcmp(arg, "--action")) {
            if (!next)
                return usage_error("--action needs a value", NULL);
            a->action = argv[++i];
        } else if (!strcmp(arg, "--pid") || !strcmp(arg, "-p")) {
            if (!parse_number(next, INT_MAX, &v) || v == 0)
                return usage_error("--pid needs a process id, got", next ? next : "nothing");
            a->pid = (long)v;
            i++;
        } else if (!strcmp(arg, "--timeout") || !strcmp(arg, "-t")) {
            if (!parse_number(next, UINT_MAX, &v))
                return usage_error("--timeout needs milliseconds, got", next ? next : "nothing");
            a->timeout_ms = v;
            i++;
        } else {
            return usage_error("unknown argument", arg);
        }
    }
    int ops = (int)a->get_state + (int)a->toggle + (a->action != NULL);
    if (ops != 1)
        return usage_error("give exactly one of --get-state, --action, --toggle", NULL);
    if (a->pid <= 0)
        return usage_error("--pid is required", NULL);
    return -1;
}

/* $VRAMD_CUDA_LIBRARY, else BIN/../lib/libcuda-sim.so. */
static void library_path(char *out, size_t cap)
{
    const char *env = getenv("VRAMD_CUDA_LIBRARY");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(out, cap, "libcuda-sim.so");
        return;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0'; /* BIN */
    snprintf(out, cap, "%s/../lib/libcuda-sim.so", exe);
}

static void print_json(const cuda_result_t *r, const char *library)
{
    printf("{\"op\": \"%s\", \"pid\": %d, \"status\": \"%s\", \"driver_error\": %d, "
           "\"state_before\": \"%s\", \"state\": \"%s\", \"nothing_to_do\": %s, "
           "\"lock_ms\": %.3f, \"copy_ms\": %.3f, \"unlock_ms\": %.3f, \"total_ms\": %.3f, "
           "\"library\": \"",
           cuda_op_name(r->op), (int)r->pid, cuda_status_name(r->status), r->driver_error,
           cuda_state_name(r->state_before), cuda_state_name(r->state),
           r->nothing_to_do ? "true" : "false", (double)r->lock_us / 1000.0,
           (double)r->copy_us / 1000.0, (double)r->unlock_us / 1000.0,
           (double)r->total_us / 1000.0);
    for (const char *p = library; *p; p++)
        printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
    printf("\", \"error\": \"");
    for (const char *p = r->error; *p; p++)
        printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", (unsigned char)*p < 0x20 ? ' ' : *p);
    printf("\"}\n");
}

static bool op_of_action(const char *action, cuda_op_t *op)
{
    static const struct {
        const char *name;
        cuda_op_t op;
    } table[] = {{"lock", CUDA_OP_LOCK},
                 {"checkpoint", CUDA_OP_CHECKPOINT},
                 {"restore", CUDA_OP_RESTORE},
                 {"unlock", CUDA_OP_UNLOCK}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (!strcmp(action, table[i].name)) {
            *op = table[i].op;
            return true;
        }
    }
    return false;
}

int main(int argc, char **argv)
{
    cli_args_t a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    cuda_op_t op = CUDA_OP_STATE;
    if (a.action && !op_of_action(a.action, &op))
        return usage_error("--action must be lock, checkpoint, restore or unlock, not", a.action);

    char library[PATH_MAX + 32];
    library_path(library, sizeof library);
    cuda_t *c = cuda_open(library);
    if (!c) {
        fprintf(stderr, "simcuda-checkpoint: out of memory\n");
        return EXIT_FAILED;
    }
    cuda_result_t r;
    if (a.toggle) {
        /* The state decides the direction, as cuda-checkpoint --toggle does. */
        cuda_run(c, CUDA_OP_STATE, (pid_t)a.pid, 0, &r);
        if (r.status == CUDA_OK)
            op = r.state == CUDA_STATE_RUNNING ? CUDA_OP_PARK : CUDA_OP_UNPARK;
    }
    if (!a.toggle || r.status == CUDA_OK)
        cuda_run(c, op, (pid_t)a.pid, a.timeout_ms, &r);
    if (a.json)
        print_json(&r, cuda_library(c));
    else if (r.status == CUDA_OK && op == CUDA_OP_STATE)
        printf("%s\n", cuda_state_name(r.state));
    if (r.status != CUDA_OK)
        fprintf(stderr, "simcuda-checkpoint: %s\n", r.error);
    cuda_close(c);
    return r.status == CUDA_OK ? EXIT_OK : EXIT_FAILED;
}
