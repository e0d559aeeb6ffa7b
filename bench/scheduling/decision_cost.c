/*
 * decision_cost: what one scheduling decision costs vramd, with 100 models on 8 GPUs.
 *
 * A decision is what the model pump does for a queue head: pick the next request (priority
 * queue peek with aging), try to reserve its memory on its instance's GPU (ledger fit +
 * reserve), and, when the model is not loaded, choose a GPU and an eviction plan over every
 * idle instance (placer over ~100 candidates on 8 GPUs). This program builds such a state
 * (8 x 80 GiB GPUs, 100 models with one instance each and a queue of 10 requests each) and
 * times N decisions of each kind with CLOCK_MONOTONIC, printing the median of 15 rounds.
 *
 * Usage: build/bench/decision_cost [rounds]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy/ledger.h"
#include "policy/placer.h"
#include "policy/queue.h"

#define GiB (1024ULL * 1024 * 1024)
#define N_GPUS 8
#define N_MODELS 100
#define PER_QUEUE 10
#define DECISIONS 20000

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    ledger_t l;
    ledger_init(&l);
    for (int g = 0; g < N_GPUS; g++)
        ledger_set_gpu(&l, (size_t)g, g, 80 * GiB, GiB / 2);
    static ledger_entry_t resident[N_MODELS];
    static int owner[N_MODELS];
    static placer_candidate_t cands[N_MODELS];
    static queue_t queues[N_MODELS];
    static queue_entry_t entries[N_MODELS][PER_QUEUE];
    size_t n_cands = 0;
    for (int m = 0; m < N_MODELS; m++) {
        ledger_entry_init(&resident[m]);
        uint64_t size = (uint64_t)(2 + m % 5) * GiB;
        ledger_force(&l, (size_t)(m % N_GPUS), &resident[m], LEDGER_RESIDENT, size, "m", &owner[m]);
        if (n_cands < PLACER_MAX_EVICT)
            cands[n_cands++] = (placer_candidate_t){.instance = &owner[m], .gpu_pos = (size_t)(m % N_GPUS),
                                                    .bytes = size, .priority = m % 10,
                                                    .last_used_ms = (uint64_t)(m * 37 % 1000),
                                                    .return_cost_ms = (uint64_t)(m * 13 % 500),
                                                    .gap_ms = (uint64_t)(m * 7 % 900), .keep_alive_left_ms = 600000};
        queue_init(&queues[m], 1024, 30000);
        for (int k = 0; k < PER_QUEUE; k++) {
            queue_entry_init(&entries[m][k]);
            queue_push(&queues[m], &entries[m][k], (m + k) % 10, (uint64_t)k);
        }
    }
    bool allowed[LEDGER_MAX_GPUS];
    for (int g = 0; g < LEDGER_MAX_GPUS; g++)
        allowed[g] = g < N_GPUS;
    double *admit = calloc((size_t)rounds, sizeof *admit);
    double *place = calloc((size_t)rounds, sizeof *place);
    volatile uint64_t sink = 0;
    for (int r = 0; r < rounds; r++) {
        /* admission decision: queue peek + ledger reserve + release */
        ledger_entry_t req;
        ledger_entry_init(&req);
        double t0 = now_ns();
        for (int i = 0; i < DECISIONS; i++) {
            int m = i % N_MODELS;
            queue_entry_t *e = queue_peek(&queues[m], 5000 + (uint64_t)i);
            sink += (uint64_t)e->priority;
            size_t g = (size_t)(m % N_GPUS);
            if (ledger_reserve(&l, g, &req, LEDGER_REQUEST, 4 * GiB, "m", &owner[m]) == 0)
                ledger_release(&l, &req);
        }
        admit[r] = (now_ns() - t0) / DECISIONS;
        /* placement decision: a 60 GiB model over 8 GPUs and every idle instance */
        placer_plan_t plan;
        t0 = now_ns();
        for (int i = 0; i < DECISIONS / 10; i++) {
            enum placer_result res = placer_choose(&l, allowed, 60 * GiB + (uint64_t)(i % 7) * GiB, NULL, cands,
                                                   n_cands, &plan);
            sink += (uint64_t)res + plan.n_evict;
        }
        place[r] = (now_ns() - t0) / (DECISIONS / 10);
    }
    qsort(admit, (size_t)rounds, sizeof *admit, cmp_double);
    qsort(place, (size_t)rounds, sizeof *place, cmp_double);
    printf("{\"models\": %d, \"gpus\": %d, \"candidates\": %zu, \"rounds\": %d,"
           " \"admission_ns_median\": %.0f, \"placement_ns_median\": %.0f, \"target_ns\": 20000}\n",
           N_MODELS, N_GPUS, n_cands, rounds, admit[rounds / 2], place[rounds / 2]);
    free(admit);
    free(place);
    return sink == 42 ? 1 : 0;
}
