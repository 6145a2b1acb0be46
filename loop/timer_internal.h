/* SPDX-License-Identifier: Apache-2.0 */
/* The per-loop timer heap behind weft/timer.h.
 *
 * A binary min-heap of weft_timer pointers ordered by (deadline_ns, seq);
 * each timer keeps its own slot number in heap_index, so stopping one is
 * O(log n) without a search. The loop owns the heap; the timers belong to
 * their callers.
 */
#ifndef WEFT_LOOP_TIMER_INTERNAL_H
#define WEFT_LOOP_TIMER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <weft/timer.h>

typedef struct weft__timer_heap {
  weft_timer **slots; /* slots[0] is the nearest deadline */
  size_t len;
  size_t cap;
  uint64_t next_seq; /* start order, so equal deadlines fire in start order */
} weft__timer_heap;

/** Initialises an empty heap (no allocation). */
void weft__timer_heap_init(weft__timer_heap *heap);

/** Frees the heap's array; timers still in it are simply forgotten. */
void weft__timer_heap_fini(weft__timer_heap *heap);

/** The nearest deadline in ns (CLOCK_MONOTONIC), or UINT64_MAX if none. */
uint64_t weft__timer_heap_next(const weft__timer_heap *heap);

/**
 * Runs every timer of `loop` whose deadline is <= `now_ns`, in deadline
 * order, re-arming periodic ones first. Returns how many callbacks ran.
 * Loop thread only.
 */
int weft__timers_run(weft_loop *loop, uint64_t now_ns);

#endif /* WEFT_LOOP_TIMER_INTERNAL_H */
