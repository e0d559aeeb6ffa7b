/* Unit tests for policy/host_ledger: the budget, the live host check, settle and release
 * however a park ends, the refusal counters, and the invariants after every step of a long
 * random sequence (host_ledger_check). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>

#include "policy/host_ledger.h"

#define GiB (1024ULL * 1024 * 1024)
#define MiB (1024ULL * 1024)

static void assert_ok(const host_ledger_t *h)
{
    char why[256];
    if (host_ledger_check(h, why, sizeof why) != 0)
        fail_msg("host ledger invariant: %s", why);
}

static void test_budget(void **state)
{
    (void)state;
    host_ledger_t h;
    host_ledger_init(&h, 64 * GiB, 4 * GiB);
    host_entry_t a, b, c;
    host_entry_init(&a);
    host_entry_init(&b);
    host_entry_init(&c);
    assert_int_equal(host_ledger_free(&h), 60 * GiB);
    assert_int_equal(host_ledger_book(&h, &a, 40 * GiB, 0, "llm", &a), HOST_FITS);
    assert_int_equal(host_ledger_book(&h, &b, 20 * GiB, 0, "sd", &b), HOST_FITS);
    assert_int_equal(host_ledger_free(&h), 0);
    /* one more byte is over the budget: refused, untouched, counted */
    assert_int_equal(host_ledger_book(&h, &c, 1, 0, "x", &c), HOST_OVER_BUDGET);
    assert_false(c.held);
    assert_int_equal(h.refused_budget, 1);
    /* booking a held entry again is refused without counting */
    assert_int_equal(host_ledger_book(&h, &a, 1, 0, "llm", &a), HOST_OVER_BUDGET);
    assert_int_equal(h.refused_budget, 1);
    assert_int_equal(h.parked, 60 * GiB);
    assert_int_equal(h.pending, 60 * GiB);
    assert_ok(&h);
    /* settle: what was measured, never more than booked */
    host_ledger_settle(&h, &a, 35 * GiB);
    assert_int_equal(h.parked, 55 * GiB);
    assert_int_equal(h.pending, 20 * GiB);
    host_ledger_settle(&h, &b, 30 * GiB);
    assert_int_equal(b.bytes, 20 * GiB);
    assert_int_equal(h.pending, 0);
    assert_int_equal(host_ledger_parked_by(&h, "llm"), 35 * GiB);
    assert_int_equal(host_ledger_parked_by(&h, "sd"), 20 * GiB);
    assert_int_equal(host_ledger_parked_by(&h, "none"), 0);
    assert_int_equal(host_ledger_book(&h, &c, 5 * GiB, 0, "x", &c), HOST_FITS);
    assert_ok(&h);
    /* release however it ends; twice is harmless; back to nothing */
    host_ledger_release(&h, &a);
    host_ledger_release(&h, &a);
    host_ledger_release(&h, &b);
    host_ledger_release(&h, &c);
    assert_int_equal(h.parked, 0);
    assert_int_equal(h.pending, 0);
    assert_int_equal(h.n_entries, 0);
    assert_int_equal(h.peak, 60 * GiB);
    assert_ok(&h);
}

static void test_host_room(void **state)
{
    (void)state;
    host_ledger_t h;
    host_ledger_init(&h, 64 * GiB, 4 * GiB);
    host_entry_t a, b;
    host_entry_init(&a);
    host_entry_init(&b);
    /* the budget allows 20 GiB, but the host has only 22 GiB free now: 20 + 4 > 22 */
    assert_int_equal(host_ledger_verdict(&h, 20 * GiB, 22 * GiB), HOST_SHORT);
    assert_int_equal(host_ledger_book(&h, &a, 20 * GiB, 22 * GiB, "llm", &a), HOST_SHORT);
    assert_int_equal(h.refused_host, 1);
    assert_int_equal(h.parked, 0);
    assert_int_equal(host_ledger_verdict(&h, 18 * GiB, 22 * GiB), HOST_FITS);
    /* unknown host room (0): the budget alone decides */
    assert_int_equal(host_ledger_verdict(&h, 20 * GiB, 0), HOST_FITS);
    /* an unsettled park is not in MemAvailable yet: it counts against the host room */
    assert_int_equal(host_ledger_book(&h, &a, 10 * GiB, 40 * GiB, "llm", &a), HOST_FITS);
    assert_int_equal(host_ledger_verdict(&h, 20 * GiB, 30 * GiB), HOST_SHORT); /* 20 + 10 + 4 > 30 */
    host_ledger_settle(&h, &a, 10 * GiB);
    assert_int_equal(host_ledger_verdict(&h, 20 * GiB, 30 * GiB), HOST_FITS); /* the host shows it now */
    /* room smaller than the request or the reserve alone */
    assert_int_equal(host_ledger_verdict(&h, 1 * GiB, 512 * MiB), HOST_SHORT);
    assert_int_equal(host_ledger_verdict(&h, 1 * MiB, 4 * GiB), HOST_SHORT);
    assert_int_equal(host_ledger_verdict(&h, 0, 4 * GiB), HOST_FITS);
    assert_string_equal(host_verdict_name(HOST_SHORT), "host_short");
    assert_string_equal(host_verdict_name(HOST_OVER_BUDGET), "over_budget");
    host_ledger_release(&h, &a);
    assert_ok(&h);
}

static void test_limits_lowered(void **state)
{
    (void)state;
    host_ledger_t h;
    host_ledger_init(&h, 16 * GiB, 1 * GiB);
    host_entry_t a, b;
    host_entry_init(&a);
    host_entry_init(&b);
    assert_int_equal(host_ledger_book(&h, &a, 10 * GiB, 0, "a", &a), HOST_FITS);
    /* a reload lowers the budget below what is parked: it stays parked, flagged, nothing new fits */
    host_ledger_set_limits(&h, 8 * GiB, 1 * GiB);
    assert_true(h.over_limit);
    assert_ok(&h);
    assert_int_equal(host_ledger_book(&h, &b, 1, 0, "b", &b), HOST_OVER_BUDGET);
    assert_int_equal(host_ledger_free(&h), 0);
    host_ledger_release(&h, &a);
    assert_false(h.over_limit);
    assert_ok(&h);
    /* budget not above the reserve: nothing fits */
    host_ledger_set_limits(&h, 1 * GiB, 2 * GiB);
    assert_int_equal(host_ledger_free(&h), 0);
    assert_int_equal(host_ledger_verdict(&h, 1, 0), HOST_OVER_BUDGET);
}

static void test_check_catches_corruption(void **state)
{
    (void)state;
    host_ledger_t h;
    host_ledger_init(&h, 16 * GiB, 0);
    host_entry_t a;
    host_entry_init(&a);
    assert_int_equal(host_ledger_book(&h, &a, 1 * GiB, 0, "a", &a), HOST_FITS);
    char why[256];
    h.parked += 1;
    assert_int_equal(host_ledger_check(&h, why, sizeof why), -1);
    h.parked -= 1;
    h.pending = 0;
    assert_int_equal(host_ledger_check(&h, why, sizeof why), -1);
    h.pending = 1 * GiB;
    h.n_entries = 2;
    assert_int_equal(host_ledger_check(&h, why, sizeof why), -1);
    h.n_entries = 1;
    a.held = false;
    assert_int_equal(host_ledger_check(&h, why, sizeof why), -1);
    a.held = true;
    assert_int_equal(host_ledger_check(&h, why, sizeof why), 0);
}

/* A long random mix of book / settle / release over 16 instances: after every step the
 * invariants hold, the book never passes budget - reserve, and releasing all of them
 * returns it to nothing. */
static void test_random_sequence(void **state)
{
    (void)state;
    enum { N = 16 };
    host_ledger_t h;
    host_ledger_init(&h, 100 * GiB, 10 * GiB);
    host_entry_t e[N];
    for (int i = 0; i < N; i++)
        host_entry_init(&e[i]);
    unsigned seed = 1234;
    for (int step = 0; step < 20000; step++) {
        int i = rand_r(&seed) % N;
        int op = rand_r(&seed) % 3;
        uint64_t bytes = (uint64_t)(rand_r(&seed) % 20 + 1) * GiB;
        uint64_t room = rand_r(&seed) % 4 == 0 ? 0 : (uint64_t)(rand_r(&seed) % 200) * GiB;
        if (op == 0) {
            bool was = e[i].held;
            uint64_t before = h.parked;
            enum host_verdict v = host_ledger_book(&h, &e[i], bytes, room, "m", &e[i]);
            if (v == HOST_FITS) {
                assert_false(was);
                assert_true(h.parked <= 90 * GiB);
                assert_true(room == 0 || bytes + 10 * GiB <= room);
            } else {
                assert_int_equal(h.parked, before);
            }
        } else if (op == 1) {
            host_ledger_settle(&h, &e[i], bytes / 2);
        } else {
            host_ledger_release(&h, &e[i]);
            assert_false(e[i].held);
        }
        assert_ok(&h);
        assert_true(h.parked <= 90 * GiB);
    }
    for (int i = 0; i < N; i++)
        host_ledger_release(&h, &e[i]);
    assert_int_equal(h.parked, 0);
    assert_int_equal(h.pending, 0);
    assert_int_equal(h.n_entries, 0);
    assert_ok(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_host_room),
        cmocka_unit_test(test_limits_lowered),
        cmocka_unit_test(test_check_catches_corruption),
        cmocka_unit_test(test_random_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
