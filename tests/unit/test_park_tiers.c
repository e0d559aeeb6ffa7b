/* Unit tests for workers/park_tiers.c: the one ordered table of park tiers (park_tier.h),
 * walked without a daemon: its rows in order with their names, and the walk's skipping of a
 * tier whose needs (configuration, an idle READY instance, the CUDA driver) are unmet, and a
 * tier's private state (park_tier.h): made on first use, freed with the instance. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "config/config.h"
#include "core/core.h"
#include "workers/park_tier.h"

typedef struct fixture {
    core_t d; /* no CUDA driver handle: the checkpoint tier's needs are never met */
    model_config_t mc;
    model_t m;
    instance_t in;
} fixture_t;

static fixture_t *fixture_new(void)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->mc.name = (char *)"unit";
    f->mc.park_keep_alive_ms = 60000;
    f->m.name = (char *)"unit";
    f->m.cfg = &f->mc;
    f->m.core = &f->d;
    f->in.model = &f->m;
    f->in.life.state = INST_READY;
    f->in.memory.gpu_pos = 0;
    f->in.park.park_tier = PARK_NONE;
    return f;
}

/* Row t is the tier of enum value t, in walk order: sleep, shim, then checkpoint; every row
 * has its names and the ops every walk calls. */
static void test_order_and_names(void **state)
{
    (void)state;
    static const char *names[] = {"sleep", "shim", "checkpoint"}, *backs[] = {"wake", "shim_restore", "restore"},
                      *parked[] = {"sleeping", "shim_parked", "checkpointed"};
    assert_int_equal(PARK_TIER_COUNT, 3);
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++) {
        const park_tier_ops_t *ops = park_tier_ops((enum park_tier)t);
        assert_non_null(ops);
        assert_int_equal(ops->tier, t);
        assert_string_equal(ops->name, names[t]);
        assert_string_equal(park_tier_name((enum park_tier)t), names[t]);
        assert_string_equal(ops->back_name, backs[t]);
        assert_string_equal(ops->parked_as, parked[t]);
        assert_non_null(ops->parked_why);
        assert_non_null(ops->resumed_why);
        assert_non_null(ops->reclaim_failed);
        assert_non_null(ops->can);
        assert_non_null(ops->prepare);
        assert_non_null(ops->park);
        assert_non_null(ops->resume);
        assert_non_null(ops->back_guess_ms);
    }
    assert_null(park_tier_ops(PARK_NONE));
    assert_string_equal(park_tier_name(PARK_NONE), "none");
    /* the guesses before a way back was measured: a wake 1 s, the shim at 20 GB/s, a restore at 10 GB/s */
    assert_int_equal(park_tier_ops(PARK_SLEEP)->back_guess_ms(20000000000ULL), 1000);
    assert_int_equal(park_tier_ops(PARK_SHIM)->back_guess_ms(20000000000ULL), 1001);
    assert_int_equal(park_tier_ops(PARK_CHECKPOINT)->back_guess_ms(20000000000ULL), 2001);
}

/* The walk returns the first tier whose needs are met, from where it is asked to start. */
static void test_walk_skips_unmet(void **state)
{
    (void)state;
    fixture_t *f = fixture_new();
    /* nothing configured: no tier */
    assert_int_equal(park_tier_first(&f->in, 0), PARK_NONE);
    /* checkpoint configured but no CUDA driver: skipped */
    f->mc.checkpoint = true;
    assert_int_equal(park_tier_first(&f->in, 0), PARK_NONE);
    /* shim_park configured but no shim in the worker (no control connection): skipped */
    f->mc.shim_park = true;
    assert_int_equal(park_tier_first(&f->in, 0), PARK_NONE);
    /* sleep and wake hooks: the sleep tier, first in order; after it nothing is met */
    f->mc.sleep.set = f->mc.wake.set = true;
    assert_int_equal(park_tier_first(&f->in, 0), PARK_SLEEP);
    assert_int_equal(park_tier_first(&f->in, PARK_CHECKPOINT), PARK_NONE);
    /* a sleep hook without a wake hook is no tier */
    f->mc.wake.set = false;
    assert_int_equal(park_tier_first(&f->in, 0), PARK_NONE);
    f->mc.wake.set = true;
    /* not idle, not READY, or park_keep_alive 0: no tier */
    f->in.path.in_flight = 1;
    assert_int_equal(park_tier_first(&f->in, 0), PARK_NONE);
    f->in.path.in_flight = 0;
    f->in.life.state = INST_STARTING;
    assert_int_equal(park_tier_first(&f->in, 0), PARK_NONE);
    f->in.life.state = INST_READY;
    f->mc.park_keep_alive_ms = 0;
    assert_int_equal(park_tier_first(&f->in, 0), PARK_NONE);
    free(f);
}

/* An instance's tier in status: the parked tier's name while PARKING, PARKED or RESUMING. */
static void test_instance_tier_name(void **state)
{
    (void)state;
    fixture_t *f = fixture_new();
    assert_string_equal(instance_tier_name(&f->in), "resident");
    f->in.life.state = INST_PARKED;
    f->in.park.park_tier = PARK_CHECKPOINT;
    assert_string_equal(instance_tier_name(&f->in), "checkpointed");
    f->in.park.park_tier = PARK_SHIM;
    assert_string_equal(instance_tier_name(&f->in), "shim_parked");
    f->in.life.state = INST_RESUMING;
    f->in.park.park_tier = PARK_SLEEP;
    assert_string_equal(instance_tier_name(&f->in), "sleeping");
    f->in.life.state = INST_UNLOADED;
    f->in.park.park_tier = PARK_NONE;
    assert_string_equal(instance_tier_name(&f->in), "unloaded");
    free(f);
}

/* A tier's private state: made zeroed with its head on first use, the same one after, only
 * in its own slot; not held by anyone while no call is in flight; freed (every tier's) with
 * the instance through the tier's state_free (under ASan a missed free is a leak). */
#define TEST_STATE_SIZE 4096 /* more than any tier's own struct: holds() reads it as its own */

static void test_tier_state(void **state)
{
    (void)state;
    fixture_t *f = fixture_new();
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++) {
        const park_tier_ops_t *ops = park_tier_ops((enum park_tier)t);
        assert_non_null(ops->state_free); /* any tier may make one: each must free it */
        assert_null(park_tier_state_peek(&f->in, (enum park_tier)t));
        unsigned char *s = park_tier_state(&f->in, ops, TEST_STATE_SIZE);
        assert_non_null(s);
        assert_ptr_equal(((park_tier_state_t *)s)->ops, ops);
        for (size_t i = sizeof(park_tier_state_t); i < TEST_STATE_SIZE; i++)
            assert_int_equal(s[i], 0);
        assert_ptr_equal(park_tier_state(&f->in, ops, TEST_STATE_SIZE), s);
        assert_ptr_equal(park_tier_state_peek(&f->in, (enum park_tier)t), s);
    }
    assert_false(park_tier_holds(&f->in)); /* no driver call in flight */
    park_tier_release(&f->in);
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++)
        assert_null(park_tier_state_peek(&f->in, (enum park_tier)t));
    park_tier_release(&f->in); /* nothing left: a second release frees nothing */
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_names),
        cmocka_unit_test(test_walk_skips_unmet),
        cmocka_unit_test(test_instance_tier_name),
        cmocka_unit_test(test_tier_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
