/*
 * test_cli_render: vramctl's pure text output (src/cli/cli_render.c, included here since
 * vramctl's sources are not in libvramd.a): size and elapsed-time formatting, how a memory
 * bar is cut into cells (exact total width, cumulative rounding, tiny segments kept
 * visible, over-full and empty cards), bars drawn plain and in colour, aligned tables, and
 * the status view rendered from a /v1/status document.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cli/cli_render.c"

#define GiB (1ULL << 30)
#define MiB (1ULL << 20)

static void test_format_sizes(void **state)
{
    (void)state;
    char b[32];
    cli_format_gib(0, b, sizeof b);
    assert_string_equal(b, "0.0");
    cli_format_gib(6 * GiB, b, sizeof b);
    assert_string_equal(b, "6.0");
    cli_format_gib(GiB + GiB / 2, b, sizeof b);
    assert_string_equal(b, "1.5");
    cli_format_gib(24 * GiB - 128 * MiB, b, sizeof b);
    assert_string_equal(b, "23.9");
    cli_format_bytes(0, b, sizeof b);
    assert_string_equal(b, "0 B");
    cli_format_bytes(1023, b, sizeof b);
    assert_string_equal(b, "1023 B");
    cli_format_bytes(64 * 1024, b, sizeof b);
    assert_string_equal(b, "64 KiB");
    cli_format_bytes(512 * MiB, b, sizeof b);
    assert_string_equal(b, "512 MiB");
    cli_format_bytes(11 * GiB + GiB / 2, b, sizeof b);
    assert_string_equal(b, "11.5 GiB");
    cli_format_bytes(2048 * GiB, b, sizeof b);
    assert_string_equal(b, "2.00 TiB");
}

static void test_format_elapsed(void **state)
{
    (void)state;
    char b[32];
    cli_format_elapsed(0, b, sizeof b);
    assert_string_equal(b, "0ms");
    cli_format_elapsed(850, b, sizeof b);
    assert_string_equal(b, "850ms");
    cli_format_elapsed(12400, b, sizeof b);
    assert_string_equal(b, "12.4s");
    cli_format_elapsed(185000, b, sizeof b);
    assert_string_equal(b, "3m05s");
    cli_format_elapsed(2 * 3600000 + 7 * 60000, b, sizeof b);
    assert_string_equal(b, "2h07m");
    cli_format_elapsed(3 * 86400000ULL + 4 * 3600000, b, sizeof b);
    assert_string_equal(b, "3d04h");
}

static int sum(const int *cells, size_t n)
{
    int s = 0;
    for (size_t i = 0; i < n; i++)
        s += cells[i];
    return s;
}

static void test_bar_cells_fill_exactly(void **state)
{
    (void)state;
    /* 24 GiB card: 6 + 3 + 2 + 0 + 0.125 headroom + the rest free */
    cli_segment_t s[] = {{"gen", 6 * GiB, '#', NULL}, {"val", 3 * GiB, '=', NULL}, {"requests", 2 * GiB, '+', NULL},
                         {"foreign", 0, 'x', NULL},   {"headroom", 128 * MiB, '/', NULL},
                         {"free", 24 * GiB - 11 * GiB - 128 * MiB, '.', NULL}};
    int cells[6];
    cli_bar_cells(s, 6, 24 * GiB, 96, cells);
    assert_int_equal(sum(cells, 6), 96);
    assert_int_equal(cells[0], 24); /* 6/24 of 96 */
    assert_int_equal(cells[1], 12);
    assert_int_equal(cells[2], 8);
    assert_int_equal(cells[3], 0);  /* empty stays empty */
    assert_int_equal(cells[4], 1);  /* 0.5 cells rounds to one: visible */
    assert_int_equal(cells[5], 51);
    for (int width = 20; width <= 100; width++) {
        cli_bar_cells(s, 6, 24 * GiB, width, cells);
        if (sum(cells, 6) != width)
            fail_msg("width %d: cells add up to %d", width, sum(cells, 6));
    }
}

static void test_bar_cells_tiny_segment_stays_visible(void **state)
{
    (void)state;
    cli_segment_t s[] = {{"big", 80 * GiB - 10 * MiB, '#', NULL}, {"tiny", 10 * MiB, '=', NULL}};
    int cells[2];
    cli_bar_cells(s, 2, 80 * GiB, 40, cells);
    assert_int_equal(cells[1], 1);
    assert_int_equal(cells[0], 39);
}

static void test_bar_cells_overfull_and_empty(void **state)
{
    (void)state;
    /* more booked than the card holds (a measured instance over its declaration): clamped */
    cli_segment_t over[] = {{"a", 20 * GiB, '#', NULL}, {"b", 20 * GiB, '=', NULL}};
    int cells[2];
    cli_bar_cells(over, 2, 24 * GiB, 24, cells);
    assert_int_equal(cells[0], 20);
    assert_int_equal(cells[1], 4);
    /* a card of 0 bytes (NVML not answering yet): nothing drawn */
    cli_bar_cells(over, 2, 0, 24, cells);
    assert_int_equal(cells[0], 0);
    assert_int_equal(cells[1], 0);
    /* segments that leave part of the card unaccounted: fewer cells, drawn blank */
    cli_segment_t part[] = {{"a", 6 * GiB, '#', NULL}};
    cli_bar_cells(part, 1, 24 * GiB, 24, cells);
    assert_int_equal(cells[0], 6);
}

static void test_render_bar_plain_and_colour(void **state)
{
    (void)state;
    cli_segment_t s[] = {{"a", 5, '#', "30;42"}, {"b", 3, '=', "30;44"}, {"free", 2, '.', NULL}};
    buf_t b;
    buf_init(&b, 4096);
    assert_int_equal(cli_render_bar(&b, s, 3, 10, 10, false), 0);
    assert_string_equal(b.data, "[#####===..]");
    buf_reset(&b);
    assert_int_equal(cli_render_bar(&b, s, 3, 10, 10, true), 0);
    assert_string_equal(b.data, "[\x1b[30;42m#####\x1b[0m\x1b[30;44m===\x1b[0m..]");
    buf_reset(&b);
    cli_segment_t half[] = {{"a", 5, '#', NULL}};
    assert_int_equal(cli_render_bar(&b, half, 1, 10, 10, false), 0);
    assert_string_equal(b.data, "[#####     ]");
    /* a bounded buffer: -1 when the bar does not fit */
    buf_t small;
    buf_init(&small, 4);
    assert_int_equal(cli_render_bar(&small, s, 3, 10, 10, false), -1);
    buf_free(&small);
    buf_free(&b);
}

static void test_table_aligns_columns(void **state)
{
    (void)state;
    cli_table_t t;
    cli_table_init(&t, 3);
    const char *h[] = {"MODEL", "STATE", "PID"};
    const char *r1[] = {"generator", "ready", "4242"};
    const char *r2[] = {"v", NULL, ""};
    assert_int_equal(cli_table_add(&t, h), 0);
    assert_int_equal(cli_table_add(&t, r1), 0);
    assert_int_equal(cli_table_add(&t, r2), 0);
    buf_t b;
    buf_init(&b, 4096);
    assert_int_equal(cli_table_render(&b, &t, "  ", false), 0);
    assert_string_equal(b.data, "  MODEL      STATE  PID\n"
                                "  generator  ready  4242\n"
                                "  v          -      -\n");
    buf_reset(&b);
    assert_int_equal(cli_table_render(&b, &t, "", true), 0);
    /* colour: the header bold, the state green, padding computed on the visible text */
    assert_non_null(strstr(b.data, "\x1b[32mready\x1b[0m  4242"));
    assert_non_null(strstr(b.data, "\x1b[1mMODEL\x1b[0m      "));
    buf_free(&b);
    cli_table_free(&t);
}

static const char status_doc[] =
    "{\"version\":\"0.1.0\",\"uptime_ms\":65000,\"draining\":false,"
    "\"connections\":{\"open\":1,\"max\":100,\"refused_total\":2,\"reserve\":{\"open\":1,\"max\":16,"
    "\"accepted_total\":5,\"refused_total\":1}},\"client_timeouts\":{\"header\":3,\"body\":0,\"send\":1},"
    "\"local_resource_exhausted\":{\"proxy\":0,\"health\":0,\"hook\":0},\"queues\":{\"queued\":2,\"max\":1024,\"in_flight\":1},"
    "\"requests_total\":7,\"nvml\":{\"ok\":true,\"attribution\":\"pid\"},"
    "\"gpus\":[{\"index\":0,\"uuid\":\"GPU-1\",\"name\":\"Test Card\",\"total\":25769803776,"
    "\"used\":10737418240,\"foreign\":1073741824,\"headroom\":536870912,\"reserved\":9663676416,"
    "\"free_to_admit\":13958643712,\"utilization\":40,\"ledger\":["
    "{\"owner\":\"gen\",\"kind\":\"resident\",\"bytes\":6442450944},"
    "{\"owner\":\"gen\",\"kind\":\"request\",\"bytes\":2147483648,\"request_id\":\"r1\"},"
    "{\"owner\":\"val\",\"kind\":\"resident\",\"bytes\":1073741824}]}],"
    "\"models\":[{\"name\":\"gen\",\"state\":\"ready\",\"kind\":\"supervised\",\"in_flight\":1,"
    "\"queue\":{\"depth\":2,\"max\":16,\"oldest_wait_ms\":1500},\"instances\":[{\"id\":1,\"pid\":4242,\"gpu\":0,"
    "\"suspect\":false,\"ejected\":false},{\"id\":2,\"suspect\":true,\"ejected\":true,\"ejected_for_ms\":25000,"
    "\"ejections\":2}]},"
    "{\"name\":\"val\",\"state\":\"failed\",\"failed_reason\":\"5 failed starts\",\"kind\":\"external\","
    "\"in_flight\":0,\"queue\":{\"depth\":0,\"max\":64,\"oldest_wait_ms\":0},\"instances\":[]}],"
    "\"events\":[{\"ts_ms\":1,\"text\":\"e1\"},{\"ts_ms\":2,\"text\":\"e2\"},{\"ts_ms\":3,\"text\":\"e3\"}]}";

static void test_status_view(void **state)
{
    (void)state;
    cJSON *j = cJSON_Parse(status_doc);
    assert_non_null(j);
    buf_t b;
    buf_init(&b, 1 << 20);
    cli_view_opts_t v = {.color = false, .width = 80, .url = "http://h:1", .wall_ms = 0, .max_events = 2};
    assert_int_equal(cli_render_status(&b, j, &v), 0);
    const char *out = b.data;
    assert_non_null(strstr(out, "vramd 0.1.0 at http://h:1  up 1m05s\n"));
    assert_non_null(strstr(out, "requests 7, queued 2/1024, in flight 1, connections 1/100"));
    assert_non_null(strstr(out, "GPU 0  Test Card  24.0 GiB total, 10.0 used (NVML), 9.0 reserved, 13.0 free to admit"));
    /* legend: per-model resident, all requests, foreign, headroom, the rest free */
    assert_non_null(strstr(out, "# gen 6.0  = val 1.0  + requests 2.0  x foreign 1.0  / headroom 0.5  . free 13.5"));
    /* bar 74 wide: gen 6/24 -> 18.5 -> 19 cells */
    assert_non_null(strstr(out, "[###################===++++++x"));
    assert_non_null(strstr(out, "gen    ready   supervised  2     4242  0    1          2/16   1.5s"));
    assert_non_null(strstr(out, "  gen instance 2: suspect (until a health check passes), ejected for 25.0s more "
                                "(ejection 2)\n"));
    assert_null(strstr(out, "gen instance 1"));
    assert_non_null(strstr(out, "  guards: timeouts header 3, body 0, send 1; reserve 1/16 open (accepted 5, "
                                "refused 1), connections refused 2\n"));
    assert_null(strstr(out, "short of descriptors"));
    assert_non_null(strstr(out, "val failed: 5 failed starts"));
    /* only the last two events */
    assert_null(strstr(out, "e1\n"));
    assert_non_null(strstr(out, "e2\n"));
    assert_non_null(strstr(out, "e3\n"));
    assert_null(strchr(out, '\x1b'));
    buf_free(&b);
    cJSON_Delete(j);
}

static void test_status_view_without_gpus(void **state)
{
    (void)state;
    cJSON *j = cJSON_Parse("{\"version\":\"0.1.0\",\"nvml\":{\"ok\":false,\"error\":\"libnvidia-ml.so.1: not found\"},"
                           "\"gpus\":[],\"models\":[],\"events\":[]}");
    assert_non_null(j);
    buf_t b;
    buf_init(&b, 1 << 16);
    cli_view_opts_t v = {.color = true, .width = 80, .url = "u", .max_events = 5};
    assert_int_equal(cli_render_status(&b, j, &v), 0);
    assert_non_null(strstr(b.data, "NVML unavailable: libnvidia-ml.so.1: not found"));
    assert_non_null(strstr(b.data, "not found\n  none (models that declare no memory run without one)"));
    assert_non_null(strstr(b.data, "MODELS: none configured"));
    assert_null(strstr(b.data, "guards:"));
    assert_non_null(strstr(b.data, "RECENT EVENTS\n  (none)"));
    buf_free(&b);
    cJSON_Delete(j);
}

/* Parked instances: a PARKED section with the host budget and one line per parked instance;
 * none at all when nothing is parked (the status_doc above has no host_memory). */
static void test_status_view_parked(void **state)
{
    (void)state;
    const char *doc =
        "{\"version\":\"0.1.0\",\"uptime_ms\":1,\"queues\":{},\"connections\":{},\"gpus\":[],"
        "\"host_memory\":{\"budget\":17179869184,\"reserve\":2147483648,\"parked\":4294967296},"
        "\"models\":[{\"name\":\"llm\",\"state\":\"stopped\",\"kind\":\"supervised\",\"queue\":{},"
        "\"instances\":[{\"id\":1,\"pid\":7,\"state\":\"parked\",\"tier\":\"sleeping\",\"parked_bytes\":4294967296,"
        "\"reserved_bytes\":1073741824}]},"
        "{\"name\":\"sd\",\"state\":\"ready\",\"kind\":\"supervised\",\"queue\":{},"
        "\"instances\":[{\"id\":2,\"pid\":8,\"tier\":\"resident\",\"parked_bytes\":0}]}],\"events\":[]}";
    cJSON *j = cJSON_Parse(doc);
    assert_non_null(j);
    buf_t b;
    buf_init(&b, 1 << 20);
    cli_view_opts_t v = {.color = false, .width = 80, .url = "http://h:1", .max_events = 0};
    assert_int_equal(cli_render_status(&b, j, &v), 0);
    assert_non_null(strstr(b.data, "\nPARKED  4.0 GiB in host memory of a 16.0 GiB budget (reserve 2.0 GiB)\n"));
    assert_non_null(strstr(b.data, "  llm instance 1: sleeping, 4.0 GiB parked, 1.0 GiB left on GPU\n"));
    assert_null(strstr(b.data, "sd instance"));
    /* the model row says parked, not stopped: its process is up, holding it in host memory */
    assert_non_null(strstr(b.data, "  llm    parked"));
    assert_null(strstr(b.data, "llm    stopped"));
    cJSON_Delete(j);
    buf_reset(&b);
    j = cJSON_Parse(status_doc);
    assert_int_equal(cli_render_status(&b, j, &v), 0);
    assert_null(strstr(b.data, "PARKED"));
    cJSON_Delete(j);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_sizes),
        cmocka_unit_test(test_format_elapsed),
        cmocka_unit_test(test_bar_cells_fill_exactly),
        cmocka_unit_test(test_bar_cells_tiny_segment_stays_visible),
        cmocka_unit_test(test_bar_cells_overfull_and_empty),
        cmocka_unit_test(test_render_bar_plain_and_colour),
        cmocka_unit_test(test_table_aligns_columns),
        cmocka_unit_test(test_status_view),
        cmocka_unit_test(test_status_view_without_gpus),
        cmocka_unit_test(test_status_view_parked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
