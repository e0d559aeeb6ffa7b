/*
 * test_oom_message: what an OOM answer says the process needed (quality/oom_message.c).
 * Covers PyTorch's two wordings (up to 2.0 and from 2.1), the messages as a server passes
 * them on (inside JSON, after a traceback), every unit, other processes' sizes ignored,
 * texts that say nothing (no "Tried to allocate", no size, cut mid-number), and the bounds
 * (huge numbers, a size past the scan limit).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quality/oom_message.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static uint64_t need(const char *s) { return oom_message_need(s, strlen(s)); }

static void test_pytorch_up_to_2_0(void **state)
{
    (void)state;
    const char *m = "CUDA out of memory. Tried to allocate 10.00 GiB (GPU 0; 24.00 GiB total capacity; 11.00 GiB "
                    "already allocated; 7.62 GiB free; 11.00 GiB reserved in total by PyTorch) If reserved memory is "
                    ">> allocated memory try setting max_split_size_mb";
    assert_int_equal(need(m), 21 * GiB);
    /* reserved above allocated: the reserved figure is what the process holds */
    const char *r = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 23.65 GiB total capacity; 22.52 GiB "
                    "already allocated; 7.06 MiB free; 22.79 GiB reserved in total by PyTorch)";
    uint64_t want = 20 * MiB + (uint64_t)(22.79 * (double)GiB);
    uint64_t got = need(r);
    assert_true(got > want - MiB && got < want + MiB);
}

static void test_pytorch_from_2_1(void **state)
{
    (void)state;
    const char *m = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
                    "capacity of 14.75 GiB of which 7.06 MiB is free. Process 4242 has 3.00 GiB memory in use. "
                    "Including non-PyTorch memory, this process has 11.50 GiB memory in use. Of the allocated "
                    "memory 10.46 GiB is allocated by PyTorch, and 162.00 MiB is reserved by PyTorch but unallocated.";
    /* 11.5 GiB of this process + 512 MiB; the other process's 3 GiB is not ours */
    assert_int_equal(need(m), 12 * GiB);
}

static void test_inside_json_and_tracebacks(void **state)
{
    (void)state;
    const char *j = "{\"success\": false, \"error\": \"Traceback (most recent call last):\\n  File \\\"w.py\\\", "
                    "line 3\\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
                    "8.00 GiB total capacity; 5.50 GiB already allocated; 0 bytes free; 6.00 GiB reserved in total "
                    "by PyTorch)\"}";
    assert_int_equal(need(j), 8 * GiB);
}

static void test_units(void **state)
{
    (void)state;
    assert_int_equal(need("Tried to allocate 512 bytes (1024 bytes already allocated)"), 1536);
    assert_int_equal(need("Tried to allocate 1 B; 2 KiB already allocated"), 2 * KiB + 1);
    assert_int_equal(need("Tried to allocate 1.50 TiB"), 1536 * GiB);
    assert_int_equal(need("Tried to allocate 0.5 GiB; 1.25 GiB reserved in total by PyTorch"), 1792 * MiB);
}

static void test_says_nothing(void **state)
{
    (void)state;
    assert_int_equal(need(""), 0);
    assert_int_equal(oom_message_need(NULL, 10), 0);
    assert_int_equal(need("out of memory"), 0);
    assert_int_equal(need("CUDA out of memory; 11.00 GiB already allocated"), 0); /* no "Tried to allocate" */
    assert_int_equal(need("Tried to allocate lots"), 0);
    assert_int_equal(need("Tried to allocate 12"), 0);           /* no unit */
    assert_int_equal(need("Tried to allocate 12 GiBs"), 0);      /* not a unit word */
    assert_int_equal(need("Tried to allocate 1.2.3 GiB"), 0);    /* a version, not a size */
    assert_int_equal(need("Tried to allocate x12 GiB"), 0);      /* inside a word */
    /* only the size named by the words counts as held */
    assert_int_equal(need("Tried to allocate 1 GiB; 7 GiB free; 3 GiB total capacity"), GiB);
}

static void test_bounds(void **state)
{
    (void)state;
    assert_int_equal(need("Tried to allocate 99999999999999999999999 GiB"), 0);
    assert_int_equal(need("Tried to allocate 2000000 GiB"), 0); /* over 1 PiB: no information */
    assert_int_equal(need("Tried to allocate 1 GiB; 999999 TiB already allocated"), GiB);
    /* a message past the scan limit is not read */
    size_t n = OOM_MESSAGE_SCAN + 100;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, ' ', n);
    memcpy(big + OOM_MESSAGE_SCAN + 10, "Tried to allocate 1 GiB", 23);
    big[n] = '\0';
    assert_int_equal(oom_message_need(big, n), 0);
    memcpy(big + 10, "Tried to allocate 1 GiB", 23);
    assert_int_equal(oom_message_need(big, n), GiB);
    /* cut in the middle of a number or a unit */
    const char *m = "Tried to allocate 10.00 GiB";
    for (size_t k = 0; k < strlen(m); k++)
        assert_true(oom_message_need(m, k) <= 10 * GiB);
    assert_int_equal(oom_message_need(m, strlen(m) - 1), 0); /* "Gi" */
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_up_to_2_0),
        cmocka_unit_test(test_pytorch_from_2_1),
        cmocka_unit_test(test_inside_json_and_tracebacks),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_says_nothing),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
