/*
 * driver_thread.c: driver calls on threads of their own, abandoned at close (driver_thread.h).
 *
 * Two parts:
 *   drv_calls_t (loop side): the uv_async_t that wakes the loop when a call finished
 *               (referenced, so keeping the loop alive, only while calls are in flight, as
 *               libuv's pending work would), the count of calls in flight, a closed flag;
 *               freed in the async handle's close
 *               callback (so a done that closes the owner leaves it valid until the delivery
 *               loop ends).
 *   shared_t    (loop and call threads): mutex, reference count (1 for the owner + 1 per
 *               running call), closed flag, the finished list (FIFO), the async handle to
 *               signal (NULL once closed); freed by whoever drops the last reference.
 * A call thread: work -> lock -> owner open: append to finished, uv_async_send; closed:
 * orphaned after unlocking -> drop its reference. The loop: on the async, take the finished
 * list under the lock and call done for each (orphaned instead once closed meanwhile).
 */
#include "gpu/driver_thread.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

typedef struct shared {
    pthread_mutex_t mu;
    unsigned refs;
    bool closed;
    uv_async_t *async; /* NULL once closed */
    drv_call_t *head, *tail;
} shared_t;

struct drv_calls {
    uv_async_t async; /* first: the close callback frees the whole struct */
    shared_t *sh;
    unsigned in_flight;
    unsigned max_in_flight;
    bool closed;
};

typedef struct thread_arg {
    shared_t *sh;
    drv_call_t *call;
} thread_arg_t;

static void shared_unref(shared_t *sh)
{
    pthread_mutex_lock(&sh->mu);
    bool last = --sh->refs == 0;
    pthread_mutex_unlock(&sh->mu);
    if (last) {
        pthread_mutex_destroy(&sh->mu);
        free(sh);
    }
}

/* The finished calls, taken out of the shared list (loop thread). */
static drv_call_t *take_finished(shared_t *sh)
{
    pthread_mutex_lock(&sh->mu);
    drv_call_t *list = sh->head;
    sh->head = sh->tail = NULL;
    pthread_mutex_unlock(&sh->mu);
    return list;
}

static void on_async(uv_async_t *async)
{
    drv_calls_t *o = (drv_calls_t *)async;
    if (o->closed)
        return; /* drv_calls_close orphaned what was left */
    drv_call_t *call = take_finished(o->sh);
    while (call) {
        drv_call_t *next = call->next;
        if (--o->in_flight == 0 && !o->closed)
            uv_unref((uv_handle_t *)&o->async);
        if (o->closed)
            call->orphaned(call); /* a done before it closed the owner */
        else
            call->done(call);
        call = next;
    }
}

static void *call_main(void *p)
{
    thread_arg_t arg = *(thread_arg_t *)p;
    free(p);
    shared_t *sh = arg.sh;
    drv_call_t *call = arg.call;
    call->work(call);
    pthread_mutex_lock(&sh->mu);
    bool closed = sh->closed;
    if (!closed) {
        call->next = NULL;
        if (sh->tail)
            sh->tail->next = call;
        else
            sh->head = call;
        sh->tail = call;
        uv_async_send(sh->async); /* under the lock: the close clears sh->async first */
    }
    pthread_mutex_unlock(&sh->mu);
    if (closed)
        call->orphaned(call);
    shared_unref(sh);
    return NULL;
}

drv_calls_t *drv_calls_open(uv_loop_t *loop, unsigned max_in_flight)
{
    drv_calls_t *o = calloc(1, sizeof *o);
    shared_t *sh = calloc(1, sizeof *sh);
    if (!o || !sh || pthread_mutex_init(&sh->mu, NULL) != 0) {
        free(o);
        free(sh);
        return NULL;
    }
    if (uv_async_init(loop, &o->async, on_async) != 0) {
        pthread_mutex_destroy(&sh->mu);
        free(o);
        free(sh);
        return NULL;
    }
    uv_unref((uv_handle_t *)&o->async); /* referenced only while calls are in flight */
    sh->refs = 1;
    sh->async = &o->async;
    o->sh = sh;
    o->max_in_flight = max_in_flight ? max_in_flight : 1;
    return o;
}

/* A detached thread with every signal blocked (the mask is inherited from this thread). */
static int spawn(thread_arg_t *arg)
{
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return -1;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int rc = pthread_create(&t, &attr, call_main, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc == 0 ? 0 : -1;
}

int drv_calls_start(drv_calls_t *o, drv_call_t *call)
{
    if (!o || o->closed || !call || !call->work || !call->done || !call->orphaned ||
        o->in_flight >= o->max_in_flight)
        return -1;
    thread_arg_t *arg = malloc(sizeof *arg);
    if (!arg)
        return -1;
    arg->sh = o->sh;
    arg->call = call;
    pthread_mutex_lock(&o->sh->mu);
    o->sh->refs++;
    pthread_mutex_unlock(&o->sh->mu);
    if (spawn(arg) != 0) {
        free(arg);
        shared_unref(o->sh); /* never the last: the owner holds one */
        return -1;
    }
    if (o->in_flight++ == 0)
        uv_ref((uv_handle_t *)&o->async);
    return 0;
}

unsigned drv_calls_in_flight(const drv_calls_t *o)
{
    return o ? o->in_flight : 0;
}

static void on_async_closed(uv_handle_t *h)
{
    free(h); /* the drv_calls_t: async is its first member */
}

void drv_calls_close(drv_calls_t *o)
{
    if (!o || o->closed)
        return;
    o->closed = true;
    shared_t *sh = o->sh;
    pthread_mutex_lock(&sh->mu);
    sh->closed = true;
    sh->async = NULL;
    drv_call_t *call = sh->head;
    sh->head = sh->tail = NULL;
    pthread_mutex_unlock(&sh->mu);
    while (call) { /* finished, not delivered: never to be */
        drv_call_t *next = call->next;
        o->in_flight--;
        call->orphaned(call);
        call = next;
    }
    o->sh = NULL;
    shared_unref(sh);
    uv_close((uv_handle_t *)&o->async, on_async_closed);
}
