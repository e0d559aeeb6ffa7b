/*
 * test_driver_thread: driver calls on threads of their own, abandoned at close
 * (src/gpu/driver_thread.c).
 *
 * Covers: work runs off the loop thread and done on it, in the loop; the bound on calls in
 * flight (refused past it, accepted again once one is done); the loop kept alive only while
 * calls are in flight; close with a call blocked in its work (standing in for a hung driver):
 * the loop ends at once, done never runs, orphaned runs on the call's thread when it is let
 * go; close from inside a done: a call finished in the same turn is orphaned, not done.
 * A "driver" here is a gate (mutex + condition) the test opens. Every wait polls with a
 * deadline.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "gpu/driver_thread.h"

static uv_loop_t loop;
static pthread_t loop_thread;

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_int entered; /* works that reached the gate */

typedef struct test_call {
    drv_call_t call;
    bool gated;
    atomic_bool worked_off_loop;
    atomic_int dones;
    atomic_int orphans;
    atomic_bool orphaned_off_loop;
    drv_calls_t **close_in_done; /* done closes this owner (then sets it NULL) */
} test_call_t;

static test_call_t *of(drv_call_t *c)
{
    return (test_call_t *)((char *)c - offsetof(test_call_t, call));
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void on_work(drv_call_t *c)
{
    test_call_t *t = of(c);
    atomic_store(&t->worked_off_loop, !pthread_equal(pthread_self(), loop_thread));
    if (!t->gated)
        return;
    atomic_fetch_add(&entered, 1);
    pthread_mutex_lock(&gate_mu);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static void on_done(drv_call_t *c)
{
    test_call_t *t = of(c);
    assert_true(pthread_equal(pthread_self(), loop_thread));
    atomic_fetch_add(&t->dones, 1);
    if (t->close_in_done && *t->close_in_done) {
        drv_calls_close(*t->close_in_done);
        *t->close_in_done = NULL;
    }
}

static void on_orphaned(drv_call_t *c)
{
    test_call_t *t = of(c);
    atomic_store(&t->orphaned_off_loop, !pthread_equal(pthread_self(), loop_thread));
    atomic_fetch_add(&t->orphans, 1);
}

static void init_call(test_call_t *t, bool gated)
{
    memset(t, 0, sizeof *t);
    t->call.work = on_work;
    t->call.done = on_done;
    t->call.orphaned = on_orphaned;
    t->gated = gated;
}

static void set_gate(bool open)
{
    pthread_mutex_lock(&gate_mu);
    gate_open = open;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

static void wait_entered(int n)
{
    for (int i = 0; i < 2000 && atomic_load(&entered) < n; i++)
        sleep_ms(5);
    assert_true(atomic_load(&entered) >= n);
}

static int setup(void **state)
{
    (void)state;
    loop_thread = pthread_self();
    atomic_store(&entered, 0);
    set_gate(false);
    return uv_loop_init(&loop);
}

static int teardown(void **state)
{
    (void)state;
    set_gate(true);
    uv_run(&loop, UV_RUN_DEFAULT);
    return uv_loop_close(&loop);
}

static void test_done_on_the_loop_and_the_bound(void **state)
{
    (void)state;
    drv_calls_t *o = drv_calls_open(&loop, 2);
    assert_non_null(o);
    assert_int_equal(uv_loop_alive(&loop), 0); /* nothing in flight: the loop may end */
    test_call_t a, b, c;
    init_call(&a, true);
    init_call(&b, true);
    init_call(&c, false);
    assert_int_equal(drv_calls_start(o, &a.call), 0);
    assert_int_equal(drv_calls_start(o, &b.call), 0);
    assert_int_equal(drv_calls_in_flight(o), 2);
    assert_int_equal(drv_calls_start(o, &c.call), -1); /* at the bound */
    assert_int_equal(uv_loop_alive(&loop), 1);
    wait_entered(2);
    set_gate(true);
    uv_run(&loop, UV_RUN_DEFAULT); /* ends once both are done */
    assert_int_equal(atomic_load(&a.dones), 1);
    assert_int_equal(atomic_load(&b.dones), 1);
    assert_true(atomic_load(&a.worked_off_loop));
    assert_int_equal(drv_calls_in_flight(o), 0);
    assert_int_equal(drv_calls_start(o, &c.call), 0); /* room again */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(atomic_load(&c.dones), 1);
    assert_int_equal(atomic_load(&a.orphans) + atomic_load(&b.orphans) + atomic_load(&c.orphans), 0);
    drv_calls_close(o);
    uv_run(&loop, UV_RUN_DEFAULT);
}

static void test_close_abandons_a_hung_call(void **state)
{
    (void)state;
    drv_calls_t *o = drv_calls_open(&loop, 1);
    assert_non_null(o);
    test_call_t a;
    init_call(&a, true);
    assert_int_equal(drv_calls_start(o, &a.call), 0);
    wait_entered(1);
    drv_calls_close(o);
    assert_int_equal(drv_calls_start(NULL, &a.call), -1);
    /* The loop ends while the call is still in its work: nothing waits for it. */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_alive(&loop), 0);
    assert_int_equal(atomic_load(&a.dones), 0);
    assert_int_equal(atomic_load(&a.orphans), 0);
    set_gate(true); /* the driver returns: orphaned on the call's own thread */
    for (int i = 0; i < 2000 && atomic_load(&a.orphans) == 0; i++)
        sleep_ms(5);
    assert_int_equal(atomic_load(&a.orphans), 1);
    assert_true(atomic_load(&a.orphaned_off_loop));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(atomic_load(&a.dones), 0);
}

static void test_close_inside_done(void **state)
{
    (void)state;
    drv_calls_t *o = drv_calls_open(&loop, 4);
    assert_non_null(o);
    test_call_t a, b;
    init_call(&a, false);
    init_call(&b, false);
    a.close_in_done = &o;
    b.close_in_done = &o;
    assert_int_equal(drv_calls_start(o, &a.call), 0);
    assert_int_equal(drv_calls_start(o, &b.call), 0);
    /* The first done closes the owner: the other call is orphaned, never done (on the loop
     * when it was delivered in the same turn, else on its own thread). */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_null(o);
    for (int i = 0; i < 2000 && atomic_load(&a.orphans) + atomic_load(&b.orphans) == 0; i++)
        sleep_ms(5);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(atomic_load(&a.dones) + atomic_load(&b.dones), 1);
    assert_int_equal(atomic_load(&a.orphans) + atomic_load(&b.orphans), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_done_on_the_loop_and_the_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_abandons_a_hung_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_inside_done, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
