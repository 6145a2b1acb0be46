/* SPDX-License-Identifier: Apache-2.0 */
/* Timers: one binary min-heap per loop, ordered by (deadline, start order).
 *
 * Timers are caller-owned and carry their heap slot, so start, stop and
 * restart are O(log n) and never search. A due timer leaves the heap before
 * its callback runs (periodic ones are first put back with their next
 * deadline), so the callback may stop or restart its own timer freely.
 */
#include "loop/timer_internal.h"

#include <assert.h>
#include <stdlib.h>

#include <weft/clock.h>
#include <weft/error.h>

#include "loop/loop_internal.h"

#define NOT_IN_HEAP SIZE_MAX

void weft__timer_heap_init(weft__timer_heap *heap) {
  heap->slots = NULL;
  heap->len = 0;
  heap->cap = 0;
  heap->next_seq = 0;
}

void weft__timer_heap_fini(weft__timer_heap *heap) {
  /* Timers still scheduled outlive the loop in their owners' memory: mark
   * them inactive so weft_timer_active() tells the truth afterwards. */
  for (size_t i = 0; i < heap->len; i++)
    heap->slots[i]->heap_index = NOT_IN_HEAP;
  free(heap->slots);
  weft__timer_heap_init(heap);
}

uint64_t weft__timer_heap_next(const weft__timer_heap *heap) {
  return heap->len == 0 ? UINT64_MAX : heap->slots[0]->deadline_ns;
}

static bool earlier(const weft_timer *a, const weft_timer *b) {
  if (a->deadline_ns != b->deadline_ns)
    return a->deadline_ns < b->deadline_ns;
  return a->seq < b->seq;
}

static void place(weft__timer_heap *heap, size_t i, weft_timer *t) {
  heap->slots[i] = t;
  t->heap_index = i;
}

static void sift_up(weft__timer_heap *heap, size_t i) {
  weft_timer *t = heap->slots[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!earlier(t, heap->slots[parent]))
      break;
    place(heap, i, heap->slots[parent]);
    i = parent;
  }
  place(heap, i, t);
}

static void sift_down(weft__timer_heap *heap, size_t i) {
  weft_timer *t = heap->slots[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= heap->len)
      break;
    if (child + 1 < heap->len &&
        earlier(heap->slots[child + 1], heap->slots[child]))
      child++;
    if (!earlier(heap->slots[child], t))
      break;
    place(heap, i, heap->slots[child]);
    i = child;
  }
  place(heap, i, t);
}

static int heap_reserve(weft__timer_heap *heap) {
  if (heap->len < heap->cap)
    return 0;
  size_t cap = heap->cap == 0 ? 16 : heap->cap * 2;
  weft_timer **slots = realloc(heap->slots, cap * sizeof *slots);
  if (slots == NULL)
    return WEFT_ENOMEM;
  heap->slots = slots;
  heap->cap = cap;
  return 0;
}

/* The caller reserved room (heap_reserve) or just removed a timer. */
static void heap_insert(weft__timer_heap *heap, weft_timer *t) {
  assert(heap->len < heap->cap); /* room was reserved by the caller */
  t->seq = heap->next_seq++;
  heap->len++;
  place(heap, heap->len - 1, t);
  sift_up(heap, heap->len - 1);
}

static void heap_remove(weft__timer_heap *heap, weft_timer *t) {
  size_t i = t->heap_index;
  /* heap_index is only ever set by place(): a mismatch is memory damage. */
  assert(i < heap->len && heap->slots[i] == t);
  t->heap_index = NOT_IN_HEAP;
  heap->len--;
  if (i == heap->len)
    return;
  /* Move the last timer into the hole; it may belong above or below. */
  weft_timer *last = heap->slots[heap->len];
  place(heap, i, last);
  if (i > 0 && earlier(last, heap->slots[(i - 1) / 2]))
    sift_up(heap, i);
  else
    sift_down(heap, i);
}

void weft_timer_init(weft_loop *loop, weft_timer *timer) {
  timer->loop = loop;
  timer->deadline_ns = 0;
  timer->period_ns = 0;
  timer->seq = 0;
  timer->cb = NULL;
  timer->arg = NULL;
  timer->heap_index = NOT_IN_HEAP;
}

static uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

int weft_timer_start(weft_timer *timer, uint64_t delay_ns, uint64_t period_ns,
                     weft_task_cb cb, void *arg) {
  if (cb == NULL)
    return WEFT_EINVAL;
  weft__timer_heap *heap = &timer->loop->timers;
  if (timer->heap_index != NOT_IN_HEAP) {
    heap_remove(heap, timer);
  } else {
    int err = heap_reserve(heap);
    if (err != 0)
      return err;
  }
  timer->deadline_ns = add_sat(weft_now_ns(), delay_ns);
  timer->period_ns = period_ns;
  timer->cb = cb;
  timer->arg = arg;
  heap_insert(heap, timer);
  return 0;
}

void weft_timer_stop(weft_timer *timer) {
  if (timer->heap_index == NOT_IN_HEAP)
    return;
  heap_remove(&timer->loop->timers, timer);
}

bool weft_timer_active(const weft_timer *timer) {
  return timer->heap_index != NOT_IN_HEAP;
}

/* The first deadline of a periodic timer after `now`: the previous deadline
 * plus whole periods. A loop that fell behind runs the timer once for all
 * the periods it missed, then returns to the original phase. */
static uint64_t next_periodic_deadline(const weft_timer *t, uint64_t now) {
  uint64_t next = add_sat(t->deadline_ns, t->period_ns);
  if (next > now)
    return next;
  uint64_t missed = (now - t->deadline_ns) / t->period_ns;
  return add_sat(t->deadline_ns, (missed + 1) * t->period_ns);
}

int weft__timers_run(weft_loop *loop, uint64_t now_ns) {
  weft__timer_heap *heap = &loop->timers;
  int fired = 0;
  /* Deadlines set by callbacks are computed from a later clock reading than
   * now_ns, and periodic deadlines land after now_ns, so this ends. */
  while (heap->len > 0 && heap->slots[0]->deadline_ns <= now_ns) {
    weft_timer *t = heap->slots[0];
    heap_remove(heap, t);
    if (t->period_ns > 0) {
      t->deadline_ns = next_periodic_deadline(t, now_ns);
      heap_insert(heap, t); /* the slot just freed is still allocated */
    }
    t->cb(t->arg);
    fired++;
  }
  if (fired > 0)
    weft__stat_add(&loop->stats.timers_fired, (uint64_t)fired);
  return fired;
}
