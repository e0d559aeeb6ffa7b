/*
 * worker_cmds: the words a worker is started and stopped with, and the commands run to stop
 * it another way than by signals.
 *
 * Placeholders (worker_cmds_subst), filled per instance in cmd, stop_cmd and a container's
 * words (and in env values and hook bodies): {port}, {gpu}, {model}, {served_model} (the
 * model's served_model, else its name), {name} (the model's name, or NAME-ID when the model may run
 * more than one instance: what a container is named after), {pid} (the worker's main
 * process, stop_cmd only), {owner} (the daemon's subtree name, "vramd-1a2b3c4d": the
 * vramd.owner label of its containers) and {cgroup} (the instance's cgroup path; an
 * argument "--cgroup-parent={cgroup}" is left out when there is none) and {mem_fraction}
 * (the instance's memory reservation over its GPU's total memory, rounded up to 2 decimals,
 * 0.01..1.00: what vLLM's --gpu-memory-utilization and SGLang's --mem-fraction-static take;
 * 0.90, vLLM's default, when the instance has no GPU yet). worker_cmds_check_fraction warns
 * (mem_fraction_mismatch) when a preset model's cmd gives an explicit fraction that disagrees
 * with its reservation on the GPU it starts on.
 *
 * Stop commands (worker_cmds_stop): when vramd stops an instance, first its stop_cmd (for a
 * container without one: `ENGINE stop -t GRACE NAME`), then for a container
 * `ENGINE rm -f NAME`; each bounded by stop_timeout (SIGTERM, then SIGKILL after 1 s more),
 * a failure or timeout logged (stop_cmd_failed) and the sequence carried on; then the
 * caller's done callback (instance.c signals what is left: the group and the cgroup).
 * After any exit of a container worker whose container was not removed yet (its CLI
 * crashed or was killed), worker_cmds_after_exit runs `ENGINE rm -f NAME`.
 *
 * At start (supervisor_sweep_containers), the containers labelled with this daemon's owner
 * name that a previous run left (vramd SIGKILLed, the host rebooted mid-run) are removed,
 * synchronously and bounded, before any worker starts.
 *
 * Invariants: at most one command per instance at a time (inst->life.cmd_proc); the instance
 * is not freed while one runs (instance_maybe_free checks cmd_proc); the commands run with
 * the model's env and cwd, in vramd's own cgroup (never in the instance's leaf, which is
 * killed after them); inst->life.timer bounds each command (the instance is STOPPING: no health
 * check uses the timer then).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "core/core.h"
#include "proc/cgroup.h"
#include "proc/process.h"
#include "sched/scheduler.h"
#include "workers/supervisor_int.h"
#include "workers/worker_cmds.h"

#define CMD_KILL_GRACE_MS 1000

enum cmd_step { STEP_STOP = 0, STEP_REMOVE, STEP_END };

/* ---------------------------------------------------------------------------------------
 * Placeholders
 */

void worker_cmds_name(const instance_t *inst, char *out, size_t outlen)
{
    const model_t *m = inst->model;
    if (m->cfg->instances <= 1)
        snprintf(out, outlen, "%s", m->name);
    else
        snprintf(out, outlen, "%s-%u", m->name, inst->id);
}

void worker_cmds_leaf(const instance_t *inst, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s-%u", inst->model->name, inst->id);
}

/* The instance's reservation and its GPU's total; false when it has no GPU (yet). */
static bool fraction_inputs(const instance_t *inst, uint64_t *bytes, uint64_t *total)
{
    sched_gpu_figures_t g;
    *bytes = inst->memory.mem.bytes ? inst->memory.mem.bytes : inst->model->cfg->memory.resident;
    if (inst->memory.gpu_pos < 0 || !sched_gpu_figures((size_t)inst->memory.gpu_pos, &g) || g.total == 0)
        return false;
    *total = g.total;
    return true;
}

void worker_cmds_mem_fraction(const instance_t *inst, char *out, size_t outlen)
{
    uint64_t bytes, total;
    if (!fraction_inputs(inst, &bytes, &total)) {
        snprintf(out, outlen, "0.90");
        return;
    }
    uint64_t hundredths = (bytes * 100 + total - 1) / total; /* rounded up */
    if (hundredths < 1)
        hundredths = 1;
    if (hundredths > 100)
        hundredths = 100;
    snprintf(out, outlen, "%llu.%02llu", (unsigned long long)(hundredths / 100), (unsigned long long)(hundredths % 100));
}

void worker_cmds_check_fraction(const instance_t *inst)
{
    const model_config_t *mc = inst->model->cfg;
    const char *flag = config_preset_fraction_flag(mc->preset);
    uint64_t bytes, total;
    if (flag == NULL || mc->cmd == NULL || !fraction_inputs(inst, &bytes, &total))
        return;
    size_t n = strlen(flag);
    for (size_t i = 0; i < mc->n_cmd; i++) {
        const char *w = mc->cmd[i], *value = NULL;
        if (strncmp(w, flag, n) == 0 && w[n] == '=')
            value = w + n + 1;
        else if (strcmp(w, flag) == 0 && i + 1 < mc->n_cmd)
            value = mc->cmd[i + 1];
        if (value == NULL || strstr(value, "{mem_fraction}") != NULL)
            continue;
        char *end;
        double f = strtod(value, &end);
        if (end == value || *end != '\0' || f <= 0 || f > 1)
            continue; /* the server reports a bad value itself */
        double takes = f * (double)total;
        if (takes + 0.5 >= (double)bytes && takes <= (double)bytes + (double)total / 100.0)
            return; /* agrees, within the 2-decimal step */
        char want[16], key[200], message[600];
        worker_cmds_mem_fraction(inst, want, sizeof want);
        snprintf(key, sizeof key, "models.%s.cmd", mc->name);
        snprintf(message, sizeof message, "%s %s takes %.2f GiB of GPU %d (%.2f GiB), the model reserves %.2f GiB "
                 "(memory.resident): give %s {mem_fraction} (%s here), or leave the flag out, so they agree", flag,
                 value, takes / 1073741824.0, inst->memory.gpu, (double)total / 1073741824.0, (double)bytes / 1073741824.0,
                 flag, want);
        log_event(LOG_WARN, "mem_fraction_mismatch", "model=%s instance=%u key=%s flag=%s value=%s takes=%llu "
                  "resident=%llu gpu=%d gpu_total=%llu suggested=%s message=%s", mc->name, inst->id, key, flag, value,
                  (unsigned long long)takes, (unsigned long long)bytes, inst->memory.gpu, (unsigned long long)total, want,
                  message);
        return;
    }
}

char *worker_cmds_subst(const instance_t *inst, const char *arg)
{
    const model_t *m = inst->model;
    char fraction[16];
    if (strstr(arg, "{mem_fraction}") != NULL)
        worker_cmds_mem_fraction(inst, fraction, sizeof fraction);
    else
        fraction[0] = '\0';
    char port[16], gpu[16], pid[16], name[160], owner[32], leaf[160], cgroup[CGROUP_PATH_MAX];
    snprintf(port, sizeof port, "%d", inst->life.port);
    snprintf(gpu, sizeof gpu, "%d", inst->memory.gpu < 0 ? 0 : inst->memory.gpu);
    snprintf(pid, sizeof pid, "%d", (int)inst->life.pid);
    worker_cmds_name(inst, name, sizeof name);
    cgroup_tree_name(m->core->cfg->state_dir, owner, sizeof owner);
    worker_cmds_leaf(inst, leaf, sizeof leaf);
    cgroup_leaf_path(m->core->cgroups, leaf, cgroup, sizeof cgroup);
    if (strcmp(arg, "--cgroup-parent={cgroup}") == 0 && !cgroup[0])
        return NULL; /* no cgroup to give: the argument is left out */
    const struct {
        const char *key;
        const char *value;
    } vars[] = {{"{port}", port}, {"{gpu}", gpu}, {"{pid}", pid}, {"{name}", name},
                {"{model}", m->name}, {"{owner}", owner}, {"{cgroup}", cgroup},
                {"{mem_fraction}", fraction},
                {"{served_model}", m->cfg->served_model ? m->cfg->served_model : m->name}};
    buf_t b;
    buf_init(&b, 64 * 1024);
    for (const char *p = arg; *p;) {
        size_t k = 0;
        while (k < sizeof vars / sizeof vars[0] && strncmp(p, vars[k].key, strlen(vars[k].key)) != 0)
            k++;
        if (k < sizeof vars / sizeof vars[0]) {
            buf_append_str(&b, vars[k].value);
            p += strlen(vars[k].key);
        } else {
            buf_append(&b, p, 1);
            p++;
        }
    }
    if (!b.data)
        return strdup("");
    return buf_steal(&b, NULL);
}

char **worker_cmds_argv(const instance_t *inst, char *const *words, size_t n)
{
    char **argv = calloc(n + 1, sizeof *argv);
    if (!argv)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char *w = worker_cmds_subst(inst, words[i]);
        if (w)
            argv[k++] = w;
    }
    return argv;
}

void worker_cmds_free_argv(char **argv)
{
    if (!argv)
        return;
    for (size_t i = 0; argv[i]; i++)
        free(argv[i]);
    free(argv);
}

/* ---------------------------------------------------------------------------------------
 * Stop commands
 */

static void run_next(instance_t *inst);

static void on_cmd_timeout(uv_timer_t *t)
{
    instance_t *inst = t->data;
    if (!inst->life.cmd_proc)
        return;
    log_event(LOG_WARN, "stop_cmd_failed", "model=%s instance=%u error=%s", inst->model->name, inst->id,
              "timed out (stop_timeout)");
    process_stop(inst->life.cmd_proc, CMD_KILL_GRACE_MS);
}

static void on_cmd_exit(process_t *p, int exit_status, int term_signal, void *ctx)
{
    (void)p;
    instance_t *inst = ctx;
    inst->life.cmd_proc = NULL;
    uv_timer_stop(&inst->life.timer);
    if (exit_status != 0 || term_signal != 0)
        log_event(LOG_WARN, "stop_cmd_failed", "model=%s instance=%u exit_status=%d signal=%d", inst->model->name,
                  inst->id, exit_status, term_signal);
    else
        log_event(LOG_INFO, "stop_cmd_done", "model=%s instance=%u", inst->model->name, inst->id);
    run_next(inst);
}

/* The words of a step ({engine, stop, -t, N, NAME}, {engine, rm, -f, NAME} or stop_cmd),
 * placeholders filled; NULL when the step has nothing to run. */
static char **step_argv(instance_t *inst, enum cmd_step step)
{
    const model_config_t *mc = inst->model->cfg;
    const config_container_t *k = &mc->container;
    if (step == STEP_STOP && mc->stop_cmd)
        return worker_cmds_argv(inst, mc->stop_cmd, mc->n_stop_cmd);
    if (!k->set || !k->engine || !k->name)
        return NULL;
    char grace[24];
    snprintf(grace, sizeof grace, "%llu", (unsigned long long)((mc->stop_timeout_ms + 999) / 1000));
    if (step == STEP_STOP) {
        char *const words[] = {k->engine, "stop", "-t", grace, k->name};
        return worker_cmds_argv(inst, words, 5);
    }
    char *const words[] = {k->engine, "rm", "-f", k->name};
    return worker_cmds_argv(inst, words, 4);
}

static bool start_step(instance_t *inst, enum cmd_step step)
{
    const model_config_t *mc = inst->model->cfg;
    char **argv = step_argv(inst, step);
    if (!argv || !argv[0]) {
        worker_cmds_free_argv(argv);
        return false;
    }
    if (step == STEP_REMOVE)
        inst->life.container_removed = true;
    char log_name[200];
    snprintf(log_name, sizeof log_name, "%s:%s", inst->model->name, step == STEP_REMOVE ? "rm" : "stop_cmd");
    process_spec_t spec = {
        .argv = argv,
        .env = mc->env,
        .n_env = mc->n_env,
        .cwd = mc->cwd,
        .log_name = log_name,
    };
    char err[256];
    int rc = process_spawn(inst->model->core->loop, &spec, on_cmd_exit, inst, &inst->life.cmd_proc, err, sizeof err);
    log_event(rc == 0 ? LOG_INFO : LOG_WARN, rc == 0 ? "stop_cmd" : "stop_cmd_failed",
              "model=%s instance=%u cmd=%s error=%s", inst->model->name, inst->id, argv[0], rc == 0 ? "" : err);
    worker_cmds_free_argv(argv);
    if (rc != 0) {
        inst->life.cmd_proc = NULL;
        return false;
    }
    uint64_t limit = mc->stop_timeout_ms > 0 ? mc->stop_timeout_ms : CMD_KILL_GRACE_MS;
    uv_timer_start(&inst->life.timer, on_cmd_timeout, limit + CMD_KILL_GRACE_MS, 0);
    return true;
}

static void run_next(instance_t *inst)
{
    while (inst->life.cmd_next < STEP_END) {
        enum cmd_step step = (enum cmd_step)inst->life.cmd_next++;
        if (step == STEP_REMOVE && inst->life.container_removed)
            continue;
        if (start_step(inst, step))
            return;
    }
    void (*done)(instance_t *) = inst->life.cmd_done;
    inst->life.cmd_done = NULL;
    if (done)
        done(inst);
}

bool worker_cmds_stop(instance_t *inst, void (*done)(instance_t *inst))
{
    const model_config_t *mc = inst->model->cfg;
    if (inst->life.cmd_proc || (!mc->stop_cmd && !mc->container.set))
        return false;
    inst->life.cmd_next = STEP_STOP;
    inst->life.cmd_done = done;
    run_next(inst);
    return true;
}

bool worker_cmds_after_exit(instance_t *inst, void (*done)(instance_t *inst))
{
    if (inst->life.cmd_proc || !inst->model->cfg->container.set || inst->life.container_removed)
        return false;
    inst->life.cmd_next = STEP_REMOVE;
    inst->life.cmd_done = done;
    run_next(inst);
    return true;
}

bool worker_cmds_running(const instance_t *inst)
{
    return inst->life.cmd_proc != NULL;
}

/* ---------------------------------------------------------------------------------------
 * What a previous run left
 */

#define SWEEP_TIMEOUT_MS 20000
#define SWEEP_IDS_MAX 64

/* The ids `ENGINE ps -aq --filter label=vramd.owner=OWNER` lists for the model's engine and
 * env, removed with `ENGINE rm -f`. Returns how many. */
static size_t sweep_model(const model_config_t *mc, const char *owner)
{
    char label[64], out[8192], err[256];
    snprintf(label, sizeof label, "label=vramd.owner=%s", owner);
    char *const ps[] = {mc->container.engine, "ps", "-aq", "--filter", label, NULL};
    int status = 0;
    if (process_run_sync(ps, mc->env, mc->n_env, SWEEP_TIMEOUT_MS, out, sizeof out, &status, err, sizeof err) != 0 ||
        status != 0) {
        log_event(LOG_WARN, "container_sweep_failed", "model=%s engine=%s status=%d error=%s", mc->name,
                  mc->container.engine, status, status == -2 ? "timed out" : status == -1 ? err : out);
        return 0;
    }
    char *argv[SWEEP_IDS_MAX + 4] = {mc->container.engine, "rm", "-f"};
    size_t n = 3;
    char *save = NULL;
    for (char *id = strtok_r(out, " \t\r\n", &save); id && n < SWEEP_IDS_MAX + 3; id = strtok_r(NULL, " \t\r\n", &save))
        argv[n++] = id;
    argv[n] = NULL;
    if (n == 3)
        return 0;
    char rm_out[1024];
    if (process_run_sync(argv, mc->env, mc->n_env, SWEEP_TIMEOUT_MS, rm_out, sizeof rm_out, &status, err,
                         sizeof err) != 0 || status != 0)
        log_event(LOG_WARN, "container_sweep_failed", "model=%s engine=%s status=%d error=%s", mc->name,
                  mc->container.engine, status, status == -2 ? "timed out" : status == -1 ? err : rm_out);
    return n - 3;
}

size_t supervisor_sweep_containers(const config_t *cfg)
{
    char owner[32];
    cgroup_tree_name(cfg->state_dir, owner, sizeof owner);
    size_t removed = 0;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const model_config_t *mc = &cfg->models[i];
        if (!mc->container.set || !mc->container.engine)
            continue;
        /* one sweep per engine and env: a later model with the same ones finds nothing left */
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) {
            const model_config_t *o = &cfg->models[j];
            seen = o->container.set && o->container.engine && strcmp(o->container.engine, mc->container.engine) == 0 &&
                   o->n_env == mc->n_env;
            for (size_t e = 0; seen && e < mc->n_env; e++)
                seen = strcmp(o->env[e].key, mc->env[e].key) == 0 &&
                       (o->env[e].value && mc->env[e].value ? strcmp(o->env[e].value, mc->env[e].value) == 0
                                                            : o->env[e].value == mc->env[e].value);
        }
        if (seen)
            continue;
        size_t n = sweep_model(mc, owner);
        if (n > 0)
            log_event(LOG_WARN, "containers_swept", "model=%s engine=%s owner=%s count=%zu", mc->name,
                      mc->container.engine, owner, n);
        removed += n;
    }
    return removed;
}
