/*
 * list: intrusive circular doubly-linked list (the kernel's and libuv's QUEUE shape).
 *
 * A list head is a list_t whose next/prev point to itself when empty. Elements embed a
 * list_t and are recovered with list_entry(). Insert and remove are O(1); an element
 * that is not on any list has next == prev == itself (after list_init or list_remove),
 * so list_remove on it is harmless.
 */
#ifndef VRAMD_COMMON_LIST_H
#define VRAMD_COMMON_LIST_H

#include <stddef.h>
#include <stdbool.h>

typedef struct list {
    struct list *next, *prev;
} list_t;

#define list_entry(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void list_init(list_t *l) { l->next = l->prev = l; }
static inline bool list_empty(const list_t *l) { return l->next == l; }
static inline bool list_linked(const list_t *e) { return e->next != e; }

static inline void list_insert_tail(list_t *head, list_t *e)
{
    e->prev = head->prev;
    e->next = head;
    head->prev->next = e;
    head->prev = e;
}

static inline void list_insert_head(list_t *head, list_t *e)
{
    e->next = head->next;
    e->prev = head;
    head->next->prev = e;
    head->next = e;
}

static inline void list_remove(list_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->next = e->prev = e;
}

static inline list_t *list_first(const list_t *head)
{
    return list_empty(head) ? NULL : head->next;
}

#define list_foreach(it, head) for (list_t *it = (head)->next; it != (head); it = it->next)
#define list_foreach_safe(it, tmp, head) \
    for (list_t *it = (head)->next, *tmp = it->next; it != (head); it = tmp, tmp = it->next)

#endif
