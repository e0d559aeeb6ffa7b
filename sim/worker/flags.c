/*
 * flags: simworker's command line (see flags.h). Accepts "--flag value" and "--flag=value".
 * Defaults describe a small, well-behaved PyTorch-like server: 300 MiB context, caching
 * allocator on, HTTP 500 PyTorch-style OOM text, JSON output.
 */
#include "flags.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/units.h"

#define MIB (1024ull * 1024ull)

void sw_flags_usage(FILE *out)
{
    fputs(
        "usage: simworker [flags]   (a simulated model server on a simulated GPU)\n"
        "  --port P                 listen on 127.0.0.1:P (default: $PORT, else 8000; 0 = any free\n"
        "                           port, printed as \"listening on HOST:PORT\" on stderr)\n"
        "  --host ADDR              listen address (default 127.0.0.1)\n"
        "  --name NAME              model name in responses and logs (default: $VRAMD_MODEL or sim-model)\n"
        "  --simgpu NAME            simulated GPU set (default: $SIMGPU); GPU = first of $CUDA_VISIBLE_DEVICES\n"
        "  --context SIZE           CUDA-context-like overhead held from start (default 300MiB)\n"
        "  --resident SIZE          model memory allocated while loading (default 0)\n"
        "  --load-time DUR          how long loading takes (default 0)\n"
        "  --unload-time DUR        how long /unload_models/ takes (default 300ms)\n"
        "  --per-request SIZE       extra memory at the peak of one request (default 0)\n"
        "  --run-time DUR           duration of one request running alone (default 1s)\n"
        "  --run-jitter F           run time x uniform(1-F, 1+F) (default 0)\n"
        "  --contention C           k requests at once: each 1+(k-1)*C times slower (default 1)\n"
        "  --mem-scale P:BASE:EXP   per-request memory x (param P / BASE)^EXP (repeatable)\n"
        "  --time-scale P:BASE:EXP  run time x (param P / BASE)^EXP (repeatable)\n"
        "  --cache keep|release     keep freed request memory cached until /clear_cache/ (default keep)\n"
        "  --leak SIZE              memory never freed, per successful request\n"
        "  --unload-residue SIZE    memory /unload_models/ does not return\n"
        "  --sleep-time DUR         how long /sleep (vLLM sleep mode) takes (default 300ms)\n"
        "  --wake-time DUR          how long /wake_up takes (default 500ms)\n"
        "  --sleep-residue SIZE     memory /sleep does not return (default 0)\n"
        "  --hang-after N           request N+1 hangs forever (holding its memory)\n"
        "  --crash-after N          request N+1 kills the process mid-run (_exit, no cleanup)\n"
        "  --fail-prob P            probability a request fails (not OOM) at its end\n"
        "  --seed S                 random seed for --fail-prob and --run-jitter (default 1)\n"
        "  --oom-style http500|json200   PyTorch text with HTTP 500, or 200 {success:false}\n"
        "  --stream-oom-at N        chunk N (1 = the first after the role event) of a streamed chat\n"
        "                           answer is an out-of-memory error event; the stream ends there\n"
        "                           without data: [DONE] (0: never)\n"
        "  --stream-error-style event|data|llamacpp   how that error is written: event: error +\n"
        "                           data (default), data: {\"error\": ...}, or error: {...}\n"
        "  --output glb|ply|png|json     /generate output (default json)\n"
        "  --output-size SIZE       output bytes at memory factor 1 (default 64KiB)\n"
        "  --corrupt-every N        every Nth output is broken (truncated, bad CRC, bad length...)\n"
        "  --lock                   one request at a time; others wait (the hand-written fix)\n"
        "  --cuda-proc-address      resolve the CUDA driver's entry points with cuGetProcAddress_v2\n"
        "                           (as the CUDA runtime does) instead of dlsym\n"
        "  --data-chunk SIZE        through the driver: allocations of at most SIZE (64MiB at most),\n"
        "                           each with 64KiB of data of its own; /gpu_status/ checks it\n"
        "  --size-from-free F       after the load, keep a cache of F x cuMemGetInfo's total less\n"
        "                           what it holds (vLLM's --gpu-memory-utilization)\n"
        "  --global-lock FILE       one request at a time across all simworkers sharing FILE (flock)\n"
        "  --concurrency N          requests run at once without --lock (default 64)\n"
        "  --queue-max N            requests waiting inside the worker; beyond -> 503 (default 4096)\n"
        "  --path PATH              another POST path that acts like /generate (repeatable)\n"
        "  --max-body SIZE          request body bound (default 64MiB)\n"
        "  --keepalive-timeout DUR  idle keep-alive connections closed after (real time, default 5s)\n"
        "  --log-format text|json   (default text)\n"
        "Durations are simulated: SIMGPU_TIMESCALE=0.01 runs them 100x faster.\n",
        out);
    fputs("Routes (sim/worker/README.md, \"Endpoints\"):\n"
          "  GET  /health /ready /v1/models /gpu_status/ /is_sleeping\n"
          "  POST /generate (and --path ones) /v1/chat/completions\n"
          "  POST /unload_models/ /reload_models/ /sleep /wake_up /clear_cache/ (hooks)\n"
          "A request whose client closed the connection runs to its end, as in a Python server.\n",
          out);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int sw_scale_rule_parse(const char *spec, sw_scale_rule_t *out)
{
    const char *c1 = strchr(spec, ':');
    if (!c1 || c1 == spec || (size_t)(c1 - spec) >= sizeof(out->param))
        return -1;
    const char *c2 = strchr(c1 + 1, ':');
    if (!c2)
        return -1;
    char base_s[64], exp_s[64];
    size_t bl = (size_t)(c2 - c1 - 1);
    if (bl == 0 || bl >= sizeof(base_s) || strlen(c2 + 1) >= sizeof(exp_s))
        return -1;
    memcpy(base_s, c1 + 1, bl);
    base_s[bl] = 0;
    strcpy(exp_s, c2 + 1);
    sw_scale_rule_t r;
    memset(&r, 0, sizeof(r));
    memcpy(r.param, spec, (size_t)(c1 - spec));
    if (parse_double(base_s, 1e-12, 1e15, &r.base) != 0)
        return -1;
    if (parse_double(exp_s, -16, 16, &r.exp) != 0)
        return -1;
    *out = r;
    return 0;
}

static void set_defaults(sw_flags_t *f)
{
    memset(f, 0, sizeof(*f));
    strcpy(f->host, "127.0.0.1");
    f->port = 8000;
    const char *env_port = getenv("PORT");
    int64_t p;
    if (env_port && parse_int64(env_port, 1, 65535, &p) == 0)
        f->port = (int)p;
    const char *model = getenv("VRAMD_MODEL");
    snprintf(f->name, sizeof(f->name), "%s", model && *model ? model : "sim-model");
    f->context = 300 * MIB;
    f->unload_ms = 300;
    f->sleep_ms = 300;
    f->wake_ms = 500;
    f->run_ms = 1000;
    f->contention = 1.0;
    f->cache = SW_CACHE_KEEP;
    f->hang_after = -1;
    f->crash_after = -1;
    f->seed = 1;
    f->oom_style = SW_OOM_HTTP500;
    f->output = SW_OUT_JSON;
    f->output_size = 64 * 1024;
    f->concurrency = 64;
    f->queue_max = 4096;
    f->max_body = 64 * MIB;
    f->keepalive_ms = 5000;
    f->log_format = LOG_FORMAT_TEXT;
}

/* Copies s into dst (cap bytes); -1 when it does not fit or is empty. */
static int copy_str(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= cap)
        return -1;
    memcpy(dst, s, n + 1);
    return 0;
}

static int apply_flag(sw_flags_t *f, const char *name, const char *v, char *err, size_t errlen)
{
    int64_t i64;
#define BAD(what) do { set_err(err, errlen, "--%s: expected %s, got \"%s\"", name, what, v); return -1; } while (0)
    if (!strcmp(name, "port")) {
        if (parse_int64(v, 0, 65535, &i64)) BAD("a port number");
        f->port = (int)i64;
    } else if (!strcmp(name, "host")) {
        if (copy_str(f->host, sizeof(f->host), v)) BAD("an address");
    } else if (!strcmp(name, "name")) {
        if (copy_str(f->name, sizeof(f->name), v)) BAD("a name (1..127 bytes)");
    } else if (!strcmp(name, "simgpu")) {
        if (copy_str(f->simgpu, sizeof(f->simgpu), v)) BAD("a simulated GPU name");
    } else if (!strcmp(name, "context")) {
        if (units_parse_size(v, &f->context)) BAD("a size like 300MiB");
    } else if (!strcmp(name, "data-chunk")) {
        if (units_parse_size(v, &f->data_chunk) || f->data_chunk == 0 || f->data_chunk > 64 * MIB)
            BAD("a size up to 64MiB");
    } else if (!strcmp(name, "resident")) {
        if (units_parse_size(v, &f->resident)) BAD("a size like 6GiB");
    } else if (!strcmp(name, "per-request")) {
        if (units_parse_size(v, &f->per_request)) BAD("a size like 2.5GiB");
    } else if (!strcmp(name, "leak")) {
        if (units_parse_size(v, &f->leak)) BAD("a size like 200MiB");
    } else if (!strcmp(name, "unload-residue")) {
        if (units_parse_size(v, &f->unload_residue)) BAD("a size like 500MiB");
    } else if (!strcmp(name, "sleep-residue")) {
        if (units_parse_size(v, &f->sleep_residue)) BAD("a size like 2GiB");
    } else if (!strcmp(name, "sleep-time")) {
        if (units_parse_duration_ms(v, &f->sleep_ms)) BAD("a duration like 1s");
    } else if (!strcmp(name, "wake-time")) {
        if (units_parse_duration_ms(v, &f->wake_ms)) BAD("a duration like 1s");
    } else if (!strcmp(name, "output-size")) {
        if (units_parse_size(v, &f->output_size) || f->output_size > 256 * MIB) BAD("a size up to 256MiB");
    } else if (!strcmp(name, "max-body")) {
        if (units_parse_size(v, &f->max_body) || f->max_body > 1024 * MIB) BAD("a size up to 1GiB");
    } else if (!strcmp(name, "load-time")) {
        if (units_parse_duration_ms(v, &f->load_ms)) BAD("a duration like 40s");
    } else if (!strcmp(name, "unload-time")) {
        if (units_parse_duration_ms(v, &f->unload_ms)) BAD("a duration like 500ms");
    } else if (!strcmp(name, "run-time")) {
        if (units_parse_duration_ms(v, &f->run_ms)) BAD("a duration like 13s");
    } else if (!strcmp(name, "keepalive-timeout")) {
        if (units_parse_duration_ms(v, &f->keepalive_ms)) BAD("a duration like 5s");
    } else if (!strcmp(name, "run-jitter")) {
        if (parse_double(v, 0, 0.99, &f->run_jitter)) BAD("a fraction in [0, 0.99]");
    } else if (!strcmp(name, "contention")) {
        if (parse_double(v, 0, 100, &f->contention)) BAD("a number in [0, 100]");
    } else if (!strcmp(name, "mem-scale") || !strcmp(name, "time-scale")) {
        bool mem = name[0] == 'm';
        size_t *n = mem ? &f->n_mem_scale : &f->n_time_scale;
        sw_scale_rule_t *rules = mem ? f->mem_scale : f->time_scale;
        if (*n >= SW_MAX_SCALE_RULES) BAD("at most 8 rules");
        if (sw_scale_rule_parse(v, &rules[*n])) BAD("PARAM:BASE:EXP like resolution:1024:2");
        (*n)++;
    } else if (!strcmp(name, "size-from-free")) {
        if (parse_double(v, 0.01, 1, &f->size_from_free)) BAD("a fraction in [0.01, 1]");
    } else if (!strcmp(name, "cache")) {
        if (!strcmp(v, "keep")) f->cache = SW_CACHE_KEEP;
        else if (!strcmp(v, "release")) f->cache = SW_CACHE_RELEASE;
        else BAD("keep or release");
    } else if (!strcmp(name, "hang-after")) {
        if (parse_int64(v, 0, INT64_MAX / 2, &f->hang_after)) BAD("a count");
    } else if (!strcmp(name, "crash-after")) {
        if (parse_int64(v, 0, INT64_MAX / 2, &f->crash_after)) BAD("a count");
    } else if (!strcmp(name, "fail-prob")) {
        if (parse_double(v, 0, 1, &f->fail_prob)) BAD("a probability in [0, 1]");
    } else if (!strcmp(name, "seed")) {
        if (parse_int64(v, 0, INT64_MAX, &i64)) BAD("a non-negative integer");
        f->seed = (uint64_t)i64;
    } else if (!strcmp(name, "oom-style")) {
        if (!strcmp(v, "http500")) f->oom_style = SW_OOM_HTTP500;
        else if (!strcmp(v, "json200")) f->oom_style = SW_OOM_JSON200;
        else BAD("http500 or json200");
    } else if (!strcmp(name, "stream-oom-at")) {
        if (parse_int64(v, 0, 1000000, &i64)) BAD("a chunk number (0: never)");
        f->stream_oom_at = (unsigned)i64;
    } else if (!strcmp(name, "stream-error-style")) {
        if (!strcmp(v, "event")) f->stream_error_style = SW_SERR_EVENT;
        else if (!strcmp(v, "data")) f->stream_error_style = SW_SERR_DATA;
        else if (!strcmp(v, "llamacpp")) f->stream_error_style = SW_SERR_LLAMACPP;
        else BAD("event, data or llamacpp");
    } else if (!strcmp(name, "output")) {
        if (!strcmp(v, "glb")) f->output = SW_OUT_GLB;
        else if (!strcmp(v, "ply")) f->output = SW_OUT_PLY;
        else if (!strcmp(v, "png")) f->output = SW_OUT_PNG;
        else if (!strcmp(v, "json")) f->output = SW_OUT_JSON;
        else BAD("glb, ply, png or json");
    } else if (!strcmp(name, "corrupt-every")) {
        if (parse_int64(v, 0, INT64_MAX / 2, &i64)) BAD("a count");
        f->corrupt_every = (uint64_t)i64;
    } else if (!strcmp(name, "global-lock")) {
        if (copy_str(f->global_lock, sizeof(f->global_lock), v)) BAD("a file path");
    } else if (!strcmp(name, "concurrency")) {
        if (parse_int64(v, 1, 4096, &i64)) BAD("a count in [1, 4096]");
        f->concurrency = (unsigned)i64;
    } else if (!strcmp(name, "queue-max")) {
        if (parse_int64(v, 0, 65536, &i64)) BAD("a count in [0, 65536]");
        f->queue_max = (unsigned)i64;
    } else if (!strcmp(name, "path")) {
        if (f->n_paths >= SW_MAX_PATHS) BAD("at most 8 paths");
        if (v[0] != '/' || copy_str(f->paths[f->n_paths], SW_PATH_MAX, v)) BAD("a path starting with /");
        f->n_paths++;
    } else if (!strcmp(name, "log-format")) {
        int lf = log_format_parse(v);
        if (lf < 0) BAD("text or json");
        f->log_format = lf;
    } else {
        set_err(err, errlen, "unknown flag --%s (see --help)", name);
        return -1;
    }
#undef BAD
    return 0;
}

int sw_flags_parse(int argc, char **argv, sw_flags_t *f, char *err, size_t errlen)
{
    set_defaults(f);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            sw_flags_usage(stdout);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            set_err(err, errlen, "unexpected argument \"%s\" (see --help)", a);
            return -1;
        }
        char name[64];
        const char *value = NULL;
        const char *eq = strchr(a + 2, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof(name)) {
            set_err(err, errlen, "unknown flag %s", a);
            return -1;
        }
        memcpy(name, a + 2, nl);
        name[nl] = 0;
        if (!strcmp(name, "lock") || !strcmp(name, "cuda-proc-address")) {
            if (eq) {
                set_err(err, errlen, "--%s takes no value", name);
                return -1;
            }
            if (name[0] == 'l')
                f->lock = true;
            else
                f->cuda_proc_address = true;
            continue;
        }
        if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc) {
                set_err(err, errlen, "--%s needs a value", name);
                return -1;
            }
            value = argv[++i];
        }
        if (apply_flag(f, name, value, err, errlen) != 0)
            return -1;
    }
    return 0;
}
