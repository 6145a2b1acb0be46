/* SPDX-License-Identifier: Apache-2.0 */
/* A loop's counters (weft_loop_stats): read from any thread, and written
 * out as one line of key=value pairs for logs and benchmark reports. */
#include <inttypes.h>
#include <stdio.h>

#include <weft/loop.h>

#include "loop/loop_internal.h"

void weft_loop_stats_get(const weft_loop *loop, weft_loop_stats *out) {
  const weft__loop_counters *c = &loop->stats;
  /* Relaxed loads: each counter is a figure of its own, read while the
   * loop goes on counting. */
#define LOAD(field) atomic_load_explicit(&c->field, memory_order_relaxed)
#define COPY(field) out->field = LOAD(field)
  COPY(iterations);
  COPY(polls_busy);
  COPY(arms);
  COPY(arms_refused);
  COPY(sleeps);
  COPY(wakeups);
  COPY(tasks_run);
  COPY(timers_fired);
  COPY(watcher_polls);
  COPY(watcher_events);
  COPY(busy_reads);
  COPY(busy_read_hits);
  out->busy_poll_window_ns = LOAD(window_ns);
  COPY(window_shrinks);
  COPY(window_grows);
  COPY(preemptions);
  COPY(window_contended);
  COPY(window_misses);
  COPY(window_drops);
  COPY(window_probes);
  COPY(window_hits);
  COPY(spin_ns);
#undef COPY
#undef LOAD
}

int weft_loop_stats_format(const weft_loop_stats *st, char *buf, size_t len) {
  /* busy_poll_window_ns is UINT64_MAX for pure busy polling: -1 then. */
  long long window = st->busy_poll_window_ns == UINT64_MAX
                         ? -1LL
                         : (long long)st->busy_poll_window_ns;
  return snprintf(
      buf, len,
      "iterations=%" PRIu64 " polls_busy=%" PRIu64 " arms=%" PRIu64
      " arms_refused=%" PRIu64 " sleeps=%" PRIu64 " wakeups=%" PRIu64
      " tasks_run=%" PRIu64 " timers_fired=%" PRIu64 " watcher_polls=%" PRIu64
      " watcher_events=%" PRIu64 " busy_reads=%" PRIu64
      " busy_read_hits=%" PRIu64 " busy_poll_window_ns=%lld"
      " window_shrinks=%" PRIu64 " window_grows=%" PRIu64
      " preemptions=%" PRIu64 " window_contended=%" PRIu64
      " window_misses=%" PRIu64 " window_drops=%" PRIu64
      " window_probes=%" PRIu64 " window_hits=%" PRIu64 " spin_ns=%" PRIu64,
      st->iterations, st->polls_busy, st->arms, st->arms_refused, st->sleeps,
      st->wakeups, st->tasks_run, st->timers_fired, st->watcher_polls,
      st->watcher_events, st->busy_reads, st->busy_read_hits, window,
      st->window_shrinks, st->window_grows, st->preemptions,
      st->window_contended, st->window_misses, st->window_drops,
      st->window_probes, st->window_hits, st->spin_ns);
}
