/* Unit tests for obs/metrics (rendering from a hand-built daemon and model, no loop, no GPU)
 * and the per-model metric counters of workers/supervisor (outcome table bound, degrade
 * levels, hook outcomes). The Prometheus-side checks (promtool, a real server) are in tests/metrics/. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/histogram.h"
#include "config/config.h"
#include "core/core.h"
#include "net/http_call.h"
#include "obs/metrics.h"
#include "workers/model_state.h"

typedef struct fixture {
    core_t d;
    config_t cfg; /* what the renderer reads of the config: fleet.host_name */
    model_config_t mc;
    model_t m;
} fixture_t;

static fixture_t *fixture_new(const char *name)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    list_init(&f->d.models);
    list_init(&f->d.conns);
    f->d.ready = true;
    f->cfg.fleet.host_name = (char *)"unit-host";
    f->d.cfg = &f->cfg;
    f->mc.name = (char *)name;
    f->mc.memory.per_request = 1024;
    f->mc.degrade.n_ladder = 2;
    f->m.name = (char *)name;
    f->m.cfg = &f->mc;
    f->m.core = &f->d;
    list_init(&f->m.instances);
    list_init(&f->m.link);
    histogram_init(&f->m.duration_hist, HISTOGRAM_DURATION_BOUNDS, HISTOGRAM_DURATION_N);
    histogram_init(&f->m.queue_wait_hist, HISTOGRAM_WAIT_BOUNDS, HISTOGRAM_WAIT_N);
    list_insert_tail(&f->d.models, &f->m.link);
    return f;
}

static char *render(fixture_t *f)
{
    size_t len = 0;
    char *text = metrics_render(&f->d, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

/* The line that starts with `prefix` followed by a space, its value; fails when absent. */
static double value_of(const char *text, const char *prefix)
{
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, prefix, pl) == 0 && p[pl] == ' ')
            return strtod(p + pl + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    fail_msg("no line %s", prefix);
    return -1;
}

static unsigned count_lines_starting(const char *text, const char *prefix)
{
    unsigned n = 0;
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, prefix, pl) == 0)
            n++;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return n;
}

static void test_every_family_has_help_and_type_once(void **state)
{
    (void)state;
    fixture_t *f = fixture_new("gen");
    char *text = render(f);
    assert_true(strlen(text) > 0);
    assert_int_equal(text[strlen(text) - 1], '\n');
    assert_null(strstr(text, "\n\n"));
    static const char *spec[] = {
        "vramd_gpu_memory_total_bytes gauge", "vramd_gpu_memory_used_bytes gauge",
        "vramd_gpu_memory_reserved_bytes gauge", "vramd_gpu_memory_foreign_bytes gauge",
        "vramd_queue_depth gauge", "vramd_requests_total counter", "vramd_request_duration_seconds histogram",
        "vramd_queue_wait_seconds histogram", "vramd_model_loads_total counter",
        "vramd_model_unloads_total counter", "vramd_oom_total counter", "vramd_degraded_total counter",
        "vramd_worker_restarts_total counter", "vramd_deadline_rejections_total counter", "vramd_jobs gauge",
        "vramd_host_info gauge", "vramd_model_memory_bytes gauge", "vramd_model_memory_reserved_ratio gauge",
        "vramd_agent_checks_total counter", "vramd_agent_errors_total counter", "vramd_hook_calls_total counter",
    };
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        char line[160], name[120];
        snprintf(line, sizeof line, "# TYPE %s\n", spec[i]);
        assert_non_null(strstr(text, line));
        snprintf(name, sizeof name, "%s", spec[i]);
        *strchr(name, ' ') = '\0';
        snprintf(line, sizeof line, "# HELP %s ", name);
        assert_int_equal(count_lines_starting(text, line), 1);
        snprintf(line, sizeof line, "# TYPE %s ", name);
        assert_int_equal(count_lines_starting(text, line), 1);
    }
    assert_int_equal(value_of(text, "vramd_host_info{host_name=\"unit-host\"}"), 1);
    assert_int_equal(value_of(text, "vramd_model_memory_reserved_ratio{model=\"gen\"}"), 0);
    assert_int_equal(value_of(text, "vramd_agent_errors_total{reason=\"refused\"}"), 0);
    /* every counter's name ends in _total */
    for (const char *p = strstr(text, "# TYPE "); p; p = strstr(p + 1, "# TYPE ")) {
        const char *end = strchr(p, '\n');
        if (end - p > 8 && strncmp(end - 8, " counter", 8) == 0)
            assert_memory_equal(end - 14, "_total", 6);
    }
    /* no GPU known, no jobs journal: zeros, not missing series */
    assert_true(value_of(text, "vramd_nvml_up") == 0);
    assert_true(value_of(text, "vramd_jobs{state=\"queued\"}") == 0);
    assert_true(value_of(text, "vramd_jobs{state=\"cancelled\"}") == 0);
    assert_true(value_of(text, "vramd_jobs_available") == 0);
    assert_true(value_of(text, "vramd_ready") == 1);
    free(text);
    free(f);
}

static void test_label_values_are_escaped(void **state)
{
    (void)state;
    fixture_t *f = fixture_new("we\"ird\\name\nx");
    char *text = render(f);
    assert_non_null(strstr(text, "vramd_queue_depth{model=\"we\\\"ird\\\\name\\nx\"} 0\n"));
    /* the raw name never appears: no line is broken by its newline */
    assert_null(strstr(text, "ird\\name\nx"));
    free(text);
    free(f);
}

static void test_histograms_are_cumulative_with_inf(void **state)
{
    (void)state;
    fixture_t *f = fixture_new("gen");
    histogram_observe(&f->m.duration_hist, 0.2);
    histogram_observe(&f->m.duration_hist, 3);
    histogram_observe(&f->m.duration_hist, 700);
    histogram_observe(&f->m.queue_wait_hist, 0.004);
    char *text = render(f);
    assert_true(value_of(text, "vramd_request_duration_seconds_bucket{model=\"gen\",le=\"0.1\"}") == 0);
    assert_true(value_of(text, "vramd_request_duration_seconds_bucket{model=\"gen\",le=\"0.25\"}") == 1);
    assert_true(value_of(text, "vramd_request_duration_seconds_bucket{model=\"gen\",le=\"5\"}") == 2);
    assert_true(value_of(text, "vramd_request_duration_seconds_bucket{model=\"gen\",le=\"600\"}") == 2);
    assert_true(value_of(text, "vramd_request_duration_seconds_bucket{model=\"gen\",le=\"+Inf\"}") == 3);
    assert_true(value_of(text, "vramd_request_duration_seconds_count{model=\"gen\"}") == 3);
    assert_true(value_of(text, "vramd_request_duration_seconds_sum{model=\"gen\"}") == 703.2);
    assert_true(value_of(text, "vramd_queue_wait_seconds_bucket{model=\"gen\",le=\"0.005\"}") == 1);
    assert_int_equal(count_lines_starting(text, "vramd_request_duration_seconds_bucket{model=\"gen\""),
                     HISTOGRAM_DURATION_N + 1);
    free(text);
    free(f);
}

static void test_outcomes_bounded_with_other(void **state)
{
    (void)state;
    fixture_t *f = fixture_new("gen");
    model_note_outcome(&f->m, "ok");
    model_note_outcome(&f->m, "ok");
    model_note_outcome(&f->m, "queue_full");
    model_note_outcome(&f->m, NULL);
    model_note_outcome(&f->m, "a_name_far_too_long_for_the_outcome_table_slot");
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "code_%d", i);
        model_note_outcome(&f->m, name);
    }
    /* ok, queue_full, other (NULL and the long name went there), then code_0..code_27 fill
     * the table up to its last slot, which is kept for other; code_28..code_39 count there */
    assert_int_equal(f->m.n_outcomes, MODEL_OUTCOMES_MAX - 1);
    char *text = render(f);
    assert_true(value_of(text, "vramd_requests_total{model=\"gen\",outcome=\"ok\"}") == 2);
    assert_true(value_of(text, "vramd_requests_total{model=\"gen\",outcome=\"queue_full\"}") == 1);
    assert_true(value_of(text, "vramd_requests_total{model=\"gen\",outcome=\"other\"}") == 2 + 12);
    assert_true(value_of(text, "vramd_requests_total{model=\"gen\",outcome=\"code_27\"}") == 1);
    assert_null(strstr(text, "outcome=\"code_28\""));
    assert_int_equal(count_lines_starting(text, "vramd_requests_total{"), MODEL_OUTCOMES_MAX - 1);
    free(text);
    free(f);
}

static void test_reasons_and_levels(void **state)
{
    (void)state;
    fixture_t *f = fixture_new("gen");
    char *text = render(f);
    /* a fresh model: "ok" 0, every reason 0, both ladder levels 0 */
    assert_true(value_of(text, "vramd_requests_total{model=\"gen\",outcome=\"ok\"}") == 0);
    assert_int_equal(count_lines_starting(text, "vramd_model_unloads_total{model=\"gen\""), UNLOAD_REASONS);
    assert_int_equal(count_lines_starting(text, "vramd_worker_restarts_total{model=\"gen\""), RESTART_REASONS);
    assert_int_equal(count_lines_starting(text, "vramd_degraded_total{model=\"gen\""), 2);
    assert_true(value_of(text, "vramd_model_state{model=\"gen\",state=\"stopped\"}") == 1);
    assert_true(value_of(text, "vramd_model_state{model=\"gen\",state=\"ready\"}") == 0);
    free(text);

    model_note_degraded(&f->m, 2);
    model_note_degraded(&f->m, 5);  /* a level counted before a reload shortened the ladder */
    model_note_degraded(&f->m, 99); /* clamped to the last level kept */
    f->m.unloads_by_reason[UNLOAD_IDLE] = 3;
    f->m.restarts_by_reason[RESTART_HANG] = 1;
    text = render(f);
    assert_int_equal(f->m.degraded_total, 3);
    assert_true(value_of(text, "vramd_degraded_total{model=\"gen\",level=\"1\"}") == 0);
    assert_true(value_of(text, "vramd_degraded_total{model=\"gen\",level=\"2\"}") == 1);
    assert_true(value_of(text, "vramd_degraded_total{model=\"gen\",level=\"5\"}") == 1);
    assert_true(value_of(text, "vramd_degraded_total{model=\"gen\",level=\"32\"}") == 1);
    assert_true(value_of(text, "vramd_model_unloads_total{model=\"gen\",reason=\"idle\"}") == 3);
    assert_true(value_of(text, "vramd_worker_restarts_total{model=\"gen\",reason=\"hang\"}") == 1);
    assert_true(value_of(text, "vramd_worker_restarts_total{model=\"gen\",reason=\"crash\"}") == 0);
    free(text);
    free(f);
}

/* A hook call's outcome from its answer: the labels of vramd_hook_calls_total. */
static void test_hook_outcome_of_answers(void **state)
{
    (void)state;
    assert_int_equal(hook_outcome_of(200, false), HOOK_OK);
    assert_int_equal(hook_outcome_of(204, true), HOOK_OK); /* an answer is an answer, however late */
    assert_int_equal(hook_outcome_of(300, false), HOOK_HTTP_ERROR);
    assert_int_equal(hook_outcome_of(404, false), HOOK_HTTP_ERROR);
    assert_int_equal(hook_outcome_of(503, true), HOOK_HTTP_ERROR);
    assert_int_equal(hook_outcome_of(-1, false), HOOK_FAILED); /* refused, reset, malformed */
    assert_int_equal(hook_outcome_of(-1, true), HOOK_TIMEOUT);
    assert_int_equal(hook_outcome_of(HTTP_CALL_LOCAL_SHORTAGE, false), HOOK_LOCAL_SHORTAGE);
    assert_int_equal(hook_outcome_of(HTTP_CALL_LOCAL_SHORTAGE, true), HOOK_LOCAL_SHORTAGE);
    assert_string_equal(hook_kind_name(HOOK_CLEAR_CACHE), "clear_cache");
    assert_string_equal(hook_kind_name(HOOK_WAKE), "wake");
    assert_string_equal(hook_outcome_name(HOOK_LOCAL_SHORTAGE), "local_shortage");
    assert_string_equal(hook_outcome_name(HOOK_HTTP_ERROR), "http_error");
}

/* vramd_hook_calls_total: every outcome of each hook the model has, or had calls of. */
static void test_hook_calls_by_hook_and_outcome(void **state)
{
    (void)state;
    fixture_t *f = fixture_new("gen");
    char *text = render(f);
    assert_int_equal(count_lines_starting(text, "vramd_hook_calls_total{"), 0); /* no hooks, no calls */
    free(text);

    f->mc.clear_cache.set = true;
    f->m.hook_calls[HOOK_CLEAR_CACHE][HOOK_OK] = 3;
    f->m.hook_calls[HOOK_UNLOAD][HOOK_TIMEOUT] = 2; /* a hook a reload took away: still shown */
    text = render(f);
    assert_int_equal(count_lines_starting(text, "vramd_hook_calls_total{model=\"gen\",hook=\"clear_cache\","),
                     HOOK_OUTCOMES);
    assert_int_equal(count_lines_starting(text, "vramd_hook_calls_total{model=\"gen\",hook=\"unload\","),
                     HOOK_OUTCOMES);
    assert_int_equal(count_lines_starting(text, "vramd_hook_calls_total{"), 2 * HOOK_OUTCOMES);
    assert_true(value_of(text, "vramd_hook_calls_total{model=\"gen\",hook=\"clear_cache\",outcome=\"ok\"}") == 3);
    assert_true(value_of(text, "vramd_hook_calls_total{model=\"gen\",hook=\"clear_cache\",outcome=\"failed\"}") ==
                0);
    assert_true(value_of(text, "vramd_hook_calls_total{model=\"gen\",hook=\"unload\",outcome=\"timeout\"}") == 2);
    assert_true(
        value_of(text, "vramd_hook_calls_total{model=\"gen\",hook=\"unload\",outcome=\"local_shortage\"}") == 0);
    free(text);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_family_has_help_and_type_once),
        cmocka_unit_test(test_label_values_are_escaped),
        cmocka_unit_test(test_histograms_are_cumulative_with_inf),
        cmocka_unit_test(test_outcomes_bounded_with_other),
        cmocka_unit_test(test_reasons_and_levels),
        cmocka_unit_test(test_hook_outcome_of_answers),
        cmocka_unit_test(test_hook_calls_by_hook_and_outcome),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
