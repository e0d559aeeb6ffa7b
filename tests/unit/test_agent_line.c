/* Unit tests for fleet/agent_line: the agent-send parser (host, model=NAME, NAME, refusals),
 * the weight per room, and the answer lines HAProxy reads (agent-check). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "fleet/agent_line.h"

#define GiB (1ULL << 30)

static int parse(const char *s, agent_req_t *r, char *err)
{
    return agent_parse_request(s, strlen(s), r, err, 160);
}

static void test_parse_host(void **state)
{
    (void)state;
    static const char *const hosts[] = {"", "\n", "\r\n", "  \t \n", "host", "host\n", " host \r\n", "\nchat\n"};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        agent_req_t r;
        char err[160] = "";
        assert_int_equal(parse(hosts[i], &r, err), 0);
        assert_int_equal(r.target, AGENT_HOST);
    }
}

static void test_parse_model(void **state)
{
    (void)state;
    static const char *const lines[] = {"chat\n", "model=chat\n", "  model=chat  \r\n", "chat", "chat\nignored words\n"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        agent_req_t r;
        char err[160] = "";
        assert_int_equal(parse(lines[i], &r, err), 0);
        assert_int_equal(r.target, AGENT_MODEL);
        assert_string_equal(r.name, "chat");
    }
    agent_req_t r;
    char err[160];
    assert_int_equal(parse("model=org/llama3:8b@q4+x.v_1-2\n", &r, err), 0);
    assert_string_equal(r.name, "org/llama3:8b@q4+x.v_1-2");
    assert_int_equal(r.tier, AGENT_TIER_ONE);
    assert_int_equal(parse("model=chat resident\n", &r, err), 0);
    assert_string_equal(r.name, "chat");
    assert_int_equal(r.tier, AGENT_TIER_RESIDENT);
    assert_int_equal(parse(" chat \t load \r\n", &r, err), 0);
    assert_string_equal(r.name, "chat");
    assert_int_equal(r.tier, AGENT_TIER_LOAD);
}

static void test_parse_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *needle;
    } bad[] = {
        {"a b\n", "after the name"}, {"chat resident x\n", "after the name"}, {"model=a,b\n", "a comma"},
        {"model=\n", "names no model"}, {"host load\n", "host takes no tier"}, {"chat Load\n", "after the name"},
        {"weight=3\n", "unknown key"}, {"chat#x\n", "not allowed"}, {"ch\x01t\n", "0x01"},
        {"ch\xfft\n", "0xff"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        agent_req_t r;
        char err[160] = "";
        assert_int_equal(parse(bad[i].in, &r, err), -1);
        assert_non_null(strstr(err, bad[i].needle));
        assert_int_equal(r.target, AGENT_HOST);
        for (const char *p = err; *p; p++)
            assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
    }
    char longname[AGENT_NAME_MAX + 3];
    memset(longname, 'x', sizeof longname);
    longname[AGENT_NAME_MAX + 1] = '\n';
    longname[AGENT_NAME_MAX + 2] = '\0';
    agent_req_t r;
    char err[160];
    assert_int_equal(parse(longname, &r, err), -1);
    assert_non_null(strstr(err, "longer than"));
    longname[AGENT_NAME_MAX] = '\n';
    longname[AGENT_NAME_MAX + 1] = '\0';
    assert_int_equal(parse(longname, &r, err), 0); /* exactly AGENT_NAME_MAX */
    char big[AGENT_REQ_MAX + 1];
    memset(big, ' ', sizeof big);
    assert_int_equal(agent_parse_request(big, sizeof big, &r, err, sizeof err), -1);
    assert_int_equal(agent_parse_request(big, AGENT_REQ_MAX, &r, err, sizeof err), 0);
}

static void test_request_complete(void **state)
{
    (void)state;
    assert_false(agent_request_complete("chat", 4));
    assert_true(agent_request_complete("chat\n", 5));
    assert_true(agent_request_complete("chat\r", 5));
    assert_false(agent_request_complete("", 0));
}

static void test_weights_by_room(void **state)
{
    (void)state;
    agent_figures_t f = {0};
    f.room = AGENT_ROOM_RESIDENT;
    f.slots_ready = 4;
    f.slots_free = 4;
    assert_int_equal(agent_weight(&f), 100);
    f.slots_free = 2;
    assert_int_equal(agent_weight(&f), 75);
    f.slots_free = 0;
    assert_int_equal(agent_weight(&f), 50);
    f.slots_free = 9; /* more than ready: clamped */
    assert_int_equal(agent_weight(&f), 100);
    f.room = AGENT_ROOM_WARMING;
    assert_int_equal(agent_weight(&f), 10);
    f.room = AGENT_ROOM_PARKED;
    assert_int_equal(agent_weight(&f), 10);
    f.room = AGENT_ROOM_COLD_FITS;
    f.capacity = 20 * GiB;
    f.need = 4 * GiB;
    f.free = 20 * GiB; /* 16 GiB spare of 20: 2 + 8 * 0.8 */
    assert_int_equal(agent_weight(&f), 8);
    f.free = 4 * GiB; /* exactly the need */
    assert_int_equal(agent_weight(&f), 2);
    f.free = 200 * GiB; /* more free than capacity (stale figures): clamped */
    assert_int_equal(agent_weight(&f), 10);
    f.room = AGENT_ROOM_COLD_EVICT;
    assert_int_equal(agent_weight(&f), 1);
    f.room = AGENT_ROOM_WAIT;
    assert_int_equal(agent_weight(&f), 0);
    f.room = AGENT_ROOM_FULL;
    assert_int_equal(agent_weight(&f), 0);
    /* a resident model always outweighs any load elsewhere */
    agent_figures_t res = {.room = AGENT_ROOM_RESIDENT, .slots_ready = 1, .slots_free = 0};
    agent_figures_t cold = {.room = AGENT_ROOM_COLD_FITS, .capacity = GiB, .free = GiB};
    assert_true(agent_weight(&res) > 4 * agent_weight(&cold));
    /* down and draining weigh nothing whatever the room */
    f.room = AGENT_ROOM_RESIDENT;
    f.slots_free = 4;
    f.draining = true;
    assert_int_equal(agent_weight(&f), 0);
    f.draining = false;
    agent_set_down(&f, "x");
    assert_int_equal(agent_weight(&f), 0);
}

/* The two tiers of contrib/haproxy/haproxy.cfg: resident on the servers, load on backups. */
static void test_weights_by_tier(void **state)
{
    (void)state;
    static const struct {
        enum agent_room room;
        bool blocked;
        unsigned one, resident, load;
    } rows[] = {
        {AGENT_ROOM_RESIDENT, false, 100, 100, 100}, {AGENT_ROOM_WARMING, false, 10, 10, 50},
        {AGENT_ROOM_QUEUE, false, 10, 0, 100},      {AGENT_ROOM_PARKED, false, 10, 0, 50},
        {AGENT_ROOM_COLD_FITS, false, 10, 0, 60},   {AGENT_ROOM_COLD_EVICT, false, 1, 0, 2},
        {AGENT_ROOM_WAIT, false, 0, 0, 1},
        {AGENT_ROOM_WAIT, true, 0, 0, 0},           {AGENT_ROOM_FULL, false, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        agent_figures_t f = {.room = rows[i].room, .foreign_blocked = rows[i].blocked, .slots_ready = 2,
                             .slots_free = 2, .capacity = 10 * GiB, .free = 10 * GiB, .need = 0};
        f.tier = AGENT_TIER_ONE;
        assert_int_equal(agent_weight(&f), rows[i].one);
        f.tier = AGENT_TIER_RESIDENT;
        assert_int_equal(agent_weight(&f), rows[i].resident);
        f.tier = AGENT_TIER_LOAD;
        assert_int_equal(agent_weight(&f), rows[i].load);
    }
    /* load tier: spare memory orders the hosts a load may go to */
    agent_figures_t a = {.tier = AGENT_TIER_LOAD, .room = AGENT_ROOM_COLD_FITS, .capacity = 20 * GiB,
                         .need = 4 * GiB, .free = 20 * GiB};
    agent_figures_t b = a;
    b.free = 6 * GiB;
    assert_int_equal(agent_weight(&a), 20 + 32);
    assert_int_equal(agent_weight(&b), 20 + 4);
    /* a short queue where it is loaded beats any load elsewhere */
    agent_figures_t q = {.tier = AGENT_TIER_LOAD, .room = AGENT_ROOM_QUEUE};
    assert_true(agent_weight(&q) >= agent_weight(&a) && agent_weight(&q) > 20 * 2);
    /* among hosts where it queues, the shorter queue weighs more: 100 with no wait, 20 at
     * two learned loads (bench/fleet/scaling.py --mix fits: with equal weights the whole
     * overflow went to the model's hash host) */
    q.load_ms = 1000;
    q.wait_ms = 0;
    assert_int_equal(agent_weight(&q), 100);
    q.wait_ms = 1000;
    assert_int_equal(agent_weight(&q), 60);
    q.wait_ms = 2000;
    assert_int_equal(agent_weight(&q), 20);
    q.wait_ms = 9000; /* the view answers WAIT past two loads; clamp all the same */
    assert_int_equal(agent_weight(&q), 20);
    q.load_ms = UINT64_MAX; /* no overflow in two load times */
    q.wait_ms = UINT64_MAX;
    assert_int_equal(agent_weight(&q), 20);
    q.wait_ms = 0;
    assert_int_equal(agent_weight(&q), 100);
    q.tier = AGENT_TIER_RESIDENT;
    assert_int_equal(agent_weight(&q), 0);
    q.tier = AGENT_TIER_ONE;
    assert_int_equal(agent_weight(&q), 10);
}

static void test_host_weight(void **state)
{
    (void)state;
    agent_figures_t f = {.host = true};
    assert_int_equal(agent_weight(&f), 100); /* no GPU: nothing to weigh */
    f.capacity = 100 * GiB;
    f.free = 50 * GiB;
    assert_int_equal(agent_weight(&f), 50);
    f.free = GiB / 10; /* a sliver: still 1, it can take a small request */
    assert_int_equal(agent_weight(&f), 1);
    f.free = 0;
    assert_int_equal(agent_weight(&f), 0);
    f.free = 300 * GiB;
    assert_int_equal(agent_weight(&f), 100);
}

static void test_format_lines(void **state)
{
    (void)state;
    char line[AGENT_LINE_MAX];
    agent_figures_t f = {.room = AGENT_ROOM_RESIDENT, .slots_ready = 2, .slots_free = 1, .maxconn = 66};
    size_t n = agent_format(&f, line);
    assert_string_equal(line, "75% maxconn:66 ready up\n");
    assert_int_equal(n, strlen(line));
    f.draining = true;
    agent_format(&f, line);
    assert_string_equal(line, "0% maxconn:66 drain\n");
    f.draining = false;
    agent_set_down(&f, "model_failed: exit\n%s", "code 3\x7f");
    agent_format(&f, line);
    assert_string_equal(line, "0% maxconn:66 ready down #model_failed: exit code 3 \n");
    agent_figures_t z = {.room = AGENT_ROOM_WAIT}; /* maxconn 0 would mean "no limit" to HAProxy: never sent */
    agent_format(&z, line);
    assert_string_equal(line, "0% maxconn:1 ready up\n");
    /* a reason too long is cut, the line stays one line within bounds */
    agent_figures_t d = {.maxconn = 4000000000u};
    char reason[1000];
    memset(reason, 'r', sizeof reason - 1);
    reason[sizeof reason - 1] = '\0';
    agent_set_down(&d, "%s", reason);
    n = agent_format(&d, line);
    assert_true(n < AGENT_LINE_MAX);
    assert_int_equal(line[n - 1], '\n');
    assert_null(memchr(line, '\n', n - 1));
    assert_string_equal(agent_room_name(AGENT_ROOM_COLD_EVICT), "cold_evict");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_host),     cmocka_unit_test(test_parse_model),
        cmocka_unit_test(test_parse_refusals), cmocka_unit_test(test_request_complete),
        cmocka_unit_test(test_weights_by_room), cmocka_unit_test(test_weights_by_tier),
        cmocka_unit_test(test_host_weight),
        cmocka_unit_test(test_format_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
