/* SPDX-License-Identifier: Apache-2.0 */
/* The loop's MPSC task queue (Vyukov's intrusive list); see task_queue.h.
 *
 * Memory ordering, in one place:
 * - push: the exchange on head is seq_cst so that, with the producer's
 *   seq_cst load of the loop's `sleeping` flag that follows it, it forms one
 *   half of a Dekker handshake (the loop stores `sleeping` seq_cst and then
 *   loads head seq_cst): either the producer sees the loop asleep and wakes
 *   it, or the loop sees the task and does not sleep.
 * - The store that links prev->next is release and the consumer's load of
 *   next is acquire, so the consumer sees the task's cb and arg.
 */
#include "loop/task_queue.h"

#include <assert.h>
#include <stdlib.h>

void weft__task_queue_init(weft__task_queue *q) {
  atomic_init(&q->stub.next, NULL);
  q->stub.cb = NULL;
  q->stub.arg = NULL;
  atomic_init(&q->head, &q->stub);
  q->tail = &q->stub;
}

void weft__task_queue_push(weft__task_queue *q, weft__task *task) {
  atomic_store_explicit(&task->next, NULL, memory_order_relaxed);
  /* seq_cst: see the file comment (Dekker with the loop's sleeping flag). */
  weft__task *prev = atomic_exchange(&q->head, task);
  /* A consumer reaching prev before this store sees next == NULL and a head
   * that moved on: the "pending" state. Release publishes cb and arg. */
  atomic_store_explicit(&prev->next, task, memory_order_release);
}

weft__task *weft__task_queue_mark(weft__task_queue *q) {
  return atomic_load_explicit(&q->head, memory_order_acquire);
}

weft__tq_status weft__task_queue_pop(weft__task_queue *q, weft__task *mark,
                                     weft__task **out) {
  weft__task *stub = &q->stub;
  weft__task *tail = q->tail;
  /* A batch ending at the stub is done once the consumer reaches the stub:
   * the stub is in the list at most once, so this is that position. */
  if (mark == stub && tail == stub)
    return WEFT__TQ_EMPTY;
  weft__task *next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (tail == stub) {
    if (next == NULL) {
      /* Head still at the stub: really empty. Head elsewhere: a producer
       * exchanged head but has not linked stub->next yet. */
      return atomic_load(&q->head) == stub ? WEFT__TQ_EMPTY : WEFT__TQ_PENDING;
    }
    /* Skip the stub; it is not a task. */
    q->tail = next;
    tail = next;
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
  }
  if (next != NULL) {
    q->tail = next;
    *out = tail;
    return WEFT__TQ_TASK;
  }
  /* tail is the last linked node. If head moved past it, a producer is half
   * way through a push behind it. */
  if (tail != atomic_load(&q->head))
    return WEFT__TQ_PENDING;
  /* tail is the newest node: push the stub behind it so tail can be handed
   * out while the list keeps one node. */
  weft__task_queue_push(q, stub);
  next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (next != NULL) {
    q->tail = next;
    *out = tail;
    return WEFT__TQ_TASK;
  }
  /* Another producer pushed between our head check and our stub push and
   * has not linked its node yet. */
  return WEFT__TQ_PENDING;
}

bool weft__task_queue_busy(weft__task_queue *q) {
  /* tail != stub means a node was reached but not yet handed out; head !=
   * stub means something was pushed after the stub. seq_cst: Dekker. */
  return q->tail != &q->stub || atomic_load(&q->head) != &q->stub;
}

void weft__task_queue_fini(weft__task_queue *q) {
  weft__task *t;
  weft__tq_status st;
  while ((st = weft__task_queue_pop(q, NULL, &t)) == WEFT__TQ_TASK)
    free(t);
  /* No producer may be running any more (the caller's contract), so no
   * push can be half done. */
  assert(st == WEFT__TQ_EMPTY);
}
