/* SPDX-License-Identifier: Apache-2.0 */
/* weft/timer.h: one-shot and periodic timers on a loop.
 *
 * Timers live in one binary min-heap per loop ordered by deadline (ties in
 * start order). The nearest deadline bounds the selector's sleep, which uses
 * nanosecond timeouts (epoll_pwait2), so a 100 µs timer does not wait a whole
 * millisecond. Deadlines are on CLOCK_MONOTONIC (weft_now_ns()).
 *
 * The caller owns the weft_timer memory (usually embedded in its own
 * struct): no allocation happens when a timer starts or stops.
 */
#ifndef WEFT_TIMER_H
#define WEFT_TIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/loop.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A timer. All fields are private; initialise with weft_timer_init(). */
typedef struct weft_timer {
  /* private */
  weft_loop *loop;
  uint64_t deadline_ns; /* CLOCK_MONOTONIC */
  uint64_t period_ns;   /* 0 = one-shot */
  uint64_t seq;         /* start order, breaks deadline ties */
  weft_task_cb cb;
  void *arg;
  size_t heap_index; /* SIZE_MAX when not in the heap */
} weft_timer;

/** Binds `timer` to `loop`, inactive. Any thread; no allocation. */
void weft_timer_init(weft_loop *loop, weft_timer *timer);

/**
 * Starts (or restarts) `timer`: `cb(arg)` runs on the loop thread
 * `delay_ns` nanoseconds from now, then every `period_ns` nanoseconds if
 * `period_ns` > 0 (the next deadline is the previous deadline plus the period;
 * missed periods are not run twice). Returns 0, WEFT_EINVAL if `cb` is NULL,
 * or WEFT_ENOMEM if the heap cannot grow. Loop thread only; may be called
 * from inside any callback, including the timer's own.
 */
int weft_timer_start(weft_timer *timer, uint64_t delay_ns, uint64_t period_ns,
                     weft_task_cb cb, void *arg);

/**
 * Stops `timer`; its callback will not run again. Idempotent, and safe from
 * inside the timer's own callback. Loop thread only.
 */
void weft_timer_stop(weft_timer *timer);

/** True while `timer` is scheduled. Loop thread only. */
bool weft_timer_active(const weft_timer *timer);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_TIMER_H */
