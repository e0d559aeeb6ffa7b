/* Unit test for the shim's page slot claim (shim/shim_client.c, compiled in here: the shim is
 * not in libvramd.a). A fresh process whose threads make their first allocations at once takes
 * ONE slot of the grant page, and that slot's live bytes are all the process charged: two slots
 * for one pid would make vramd's on_hello clear one as if the process had exec'd, dropping its
 * live bytes.
 *
 * Each round forks a child that has never called the shim (a fresh process: its first call
 * sets the client up); the child starts THREADS threads that wait at a barrier and then each
 * charge CHUNK bytes (within the page's grant: the fast path, no socket). The parent, after the
 * child exited, counts the child's slots on the page and their live bytes, then clears them
 * for the next round. The race is narrow (a few instructions): before the claim took a lock it
 * split a process about once in 100 to 400 rounds, so it runs up to ROUNDS rounds (within
 * ROUNDS_SECONDS) and stops at the first split. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../shim/shim_client.c"
#include "gpu/shim_page.h"

#define THREADS 8
#define ROUNDS 1500
#define ROUNDS_SECONDS 30 /* at most this long in all (a slow machine runs fewer rounds) */
#define CHUNK (1ull << 20)

static char g_dir[256];

static pthread_barrier_t g_start;

static void *first_allocation(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&g_start);
    return (void *)(intptr_t)shim_client_charge(CHUNK);
}

/* The child: THREADS threads' first allocations at once; exit 0 when each was let through. */
static void child_round(void)
{
    pthread_t t[THREADS];
    int bad = 0;
    pthread_barrier_init(&g_start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, first_allocation, NULL) != 0)
            _exit(2);
    for (int i = 0; i < THREADS; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        bad |= rc != NULL;
    }
    _exit(bad ? 3 : 0);
}

static void test_threads_first_allocations_take_one_slot(void **state)
{
    (void)state;
    char page[300], sock[300], err[256] = "";
    snprintf(page, sizeof page, "%s/w.page", g_dir);
    snprintf(sock, sizeof sock, "%s/none.sock", g_dir); /* never asked: every charge fits */
    shim_page_t *pg = NULL;
    assert_int_equal(shim_page_create(page, 7, 80ull << 30, &pg, err, sizeof err), 0);
    shim_page_set_grant(pg, 1ull << 30);
    setenv(SHIM_ENV_PAGE, page, 1);
    setenv(SHIM_ENV_SOCKET, sock, 1);
    setenv(SHIM_ENV_TOKEN, "00112233445566778899aabbccddeeff", 1);
    unsigned split = 0;
    int round;
    time_t end = time(NULL) + ROUNDS_SECONDS;
    for (round = 0; round < ROUNDS && !split && time(NULL) < end; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            child_round();
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        unsigned slots = 0;
        uint64_t live = 0, slot_live = 0;
        for (unsigned i = 0; i < SHIM_PAGE_PROCS; i++) {
            if (shim_page_slot_pid(pg, i) != pid)
                continue;
            slots++;
            slot_live = atomic_load(&pg->procs[i].live);
            live += slot_live;
            shim_page_clear_slot(pg, i);
        }
        assert_int_equal(live, THREADS * CHUNK); /* every byte counted, in one slot or another */
        if (slots != 1 || slot_live != THREADS * CHUNK) {
            split++;
            print_message("round %d: pid %d took %u slots\n", round, (int)pid, slots);
        }
        assert_int_equal(shim_page_live(pg), 0); /* cleared for the next round */
    }
    shim_page_destroy(pg, page);
    print_message("%d rounds of %d threads\n", round, THREADS);
    assert_int_equal(split, 0);
}

static int dir_setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/vramd-shim-slots-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int dir_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_threads_first_allocations_take_one_slot, dir_setup, dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
