/*
 * simworker: a simulated model server on a simulated GPU (see worker.h for its parts and
 * flags.c for its command line). Start-up: parse flags, open the simulated GPU, listen,
 * take the CUDA-context-like memory, then load the model (health answers 503 "loading"
 * meanwhile). SIGTERM/SIGINT: stop accepting, finish the requests in progress, exit 0 (a
 * hung request keeps it alive until SIGKILL, like a real server). Exit 1 on bad flags, no
 * GPU, a port in use, or out of memory at load (PyTorch's error on stderr). Memory is not
 * freed by hand on the way out: the process's exit returns it (after the simulated GPU's
 * release delay), as the driver does.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "worker.h"

static void on_signal(uv_signal_t *h, int signum)
{
    sw_worker_t *w = h->data;
    if (w->stopping)
        return;
    w->stopping = true;
    log_event(LOG_INFO, "stopping", "model=%s signal=%d running=%u waiting=%u", w->f.name, signum,
              w->n_running, w->n_waiting);
    if (w->httpd)
        sw_httpd_stop(w->httpd);
    sw_maybe_exit(w);
}

int main(int argc, char **argv)
{
    static sw_worker_t w;
    char err[512] = "";
    int rc = sw_flags_parse(argc, argv, &w.f, err, sizeof(err));
    if (rc == 1)
        return 0;
    if (rc != 0) {
        fprintf(stderr, "simworker: %s\n", err);
        return 2;
    }
    log_configure((enum log_format)w.f.log_format, LOG_INFO, 2);
    signal(SIGPIPE, SIG_IGN);
    w.timescale = simgpu_timescale();
    w.rng = w.f.seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (sw_gpumem_open(&w.mem, w.f.simgpu, err, sizeof(err)) != 0) {
        fprintf(stderr, "simworker: %s\n", err);
        log_event(LOG_ERROR, "no_gpu", "model=%s error=%s", w.f.name, err);
        return 1;
    }
    char why[512] = "";
    if (sw_gpumem_use_driver(&w.mem, w.f.cuda_proc_address, why, sizeof why)) {
        sw_cuda_set_data_chunk(w.mem.cuda, w.f.data_chunk);
        log_event(LOG_INFO, "cuda_driver", "model=%s library=%s entry_points=%s", w.f.name, sw_cuda_library(w.mem.cuda),
                  w.f.cuda_proc_address ? "cuGetProcAddress" : "dlsym");
    } else
        log_event(LOG_INFO, "cuda_driver", "model=%s library=none reason=\"%s\" allocations=simgpu", w.f.name, why);
    w.loop = uv_default_loop();
    sw_model_init(&w);
    sw_jobs_init(&w);

    sw_httpd_opts_t ho = {w.f.host, w.f.port, w.f.max_body, w.f.keepalive_ms, sw_routes_handle, &w};
    w.httpd = sw_httpd_start(w.loop, &ho, &w.port, err, sizeof(err));
    if (!w.httpd) {
        fprintf(stderr, "simworker: %s\n", err);
        return 1;
    }
    log_event(LOG_INFO, "listening", "model=%s host=%s port=%d pid=%d gpu=%d simgpu=%s", w.f.name,
              w.f.host, w.port, (int)getpid(), w.mem.index, w.mem.set_name);

    char oom[SW_OOM_TEXT_MAX];
    if (sw_gpumem_grow_context(&w.mem, w.f.context, oom, sizeof(oom)) != 0) {
        fprintf(stderr, "torch.OutOfMemoryError: %s\n", oom);
        log_event(LOG_ERROR, "load_failed", "model=%s error=%s", w.f.name, oom);
        return 1;
    }

    uv_signal_init(w.loop, &w.sigterm);
    uv_signal_init(w.loop, &w.sigint);
    w.sigterm.data = w.sigint.data = &w;
    uv_signal_start(&w.sigterm, on_signal, SIGTERM);
    uv_signal_start(&w.sigint, on_signal, SIGINT);

    sw_gate_start(&w, sw_routes_handle);
    sw_model_start_load(&w, NULL);
    uv_run(w.loop, UV_RUN_DEFAULT);
    return 0;
}
