/* SPDX-License-Identifier: Apache-2.0 */
/* The loop's task queue: an intrusive multi-producer single-consumer list
 * (Dmitry Vyukov's algorithm) with malloc'd nodes.
 *
 * Producers (any thread) push with one atomic exchange and one store; the
 * consumer (the loop thread) pops without any atomic read-modify-write. A
 * producer preempted between its exchange and its store leaves the list
 * "half linked": the consumer cannot reach the nodes behind it yet, so it
 * stops and reports WEFT__TQ_PENDING, which keeps the loop from sleeping
 * until the producer finishes its store. Tasks from one producer run in the
 * order they were pushed.
 */
#ifndef WEFT_LOOP_TASK_QUEUE_H
#define WEFT_LOOP_TASK_QUEUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <weft/loop.h>

/** One queued task. Allocated by the producer, freed by the consumer. */
typedef struct weft__task {
  _Atomic(struct weft__task *) next;
  weft_task_cb cb;
  void *arg;
} weft__task;

/**
 * The queue. `head` is where producers push (the newest node), `tail` is
 * where the consumer pops (the oldest). `stub` is a permanent dummy node so
 * the list is never empty of nodes, which is what lets push be one exchange.
 */
typedef struct weft__task_queue {
  _Atomic(weft__task *) head; /* written by every producer */
  /* Producers hammer head; keep the consumer's field off their cache line. */
  _Alignas(64) weft__task *tail; /* consumer only */
  weft__task stub;
} weft__task_queue;

/** What weft__task_queue_pop() found. */
typedef enum weft__tq_status {
  WEFT__TQ_TASK = 0,    /* *out holds a task */
  WEFT__TQ_EMPTY = 1,   /* nothing queued */
  WEFT__TQ_PENDING = 2, /* a producer is half way through a push: try later */
} weft__tq_status;

/** Initialises an empty queue. Before any producer can see it. */
void weft__task_queue_init(weft__task_queue *q);

/**
 * Frees every task still queued without running it (group never started).
 * Consumer only, once no producer can push any more.
 */
void weft__task_queue_fini(weft__task_queue *q);

/** Pushes `task` (its fields cb and arg set). Any thread. Wait-free. */
void weft__task_queue_push(weft__task_queue *q, weft__task *task);

/**
 * The newest node pushed so far: a batch marker for weft__task_queue_pop().
 * Consumer only.
 */
weft__task *weft__task_queue_mark(weft__task_queue *q);

/**
 * Pops the oldest task into `*out`. With a `mark` from
 * weft__task_queue_mark(), pops only tasks pushed before the mark was taken
 * (the task equal to `mark` is the last of the batch; the caller compares
 * before freeing it) and then reports WEFT__TQ_EMPTY; NULL = no bound.
 * Consumer only.
 */
weft__tq_status weft__task_queue_pop(weft__task_queue *q, weft__task *mark,
                                     weft__task **out);

/**
 * True when a task is queued or a push is in progress (seq_cst load of
 * head). The loop calls it after setting its `sleeping` flag: the re-check
 * half of the Dekker handshake with producers. Consumer only.
 */
bool weft__task_queue_busy(weft__task_queue *q);

#endif /* WEFT_LOOP_TASK_QUEUE_H */
