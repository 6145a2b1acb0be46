/* SPDX-License-Identifier: Apache-2.0 */
/* A channel's defences against slow, greedy and silent peers:
 *
 *   flow control   (WEFT_OPT_FLOW_CONTROL) reading pauses while the queued
 *                  bytes are above the high write watermark and resumes
 *                  below the low one: Netty's autoRead driven by
 *                  writability, which a server's channels get by default;
 *   output limit   (WEFT_OPT_OUTPUT_LIMIT) past that many bytes queued and
 *                  unsent the channel is closed: Redis'
 *                  client-output-buffer-limit, for handlers that write
 *                  without looking at writability;
 *   idle timeout   (WEFT_OPT_IDLE_TIMEOUT_MS) a channel that neither reads
 *                  nor sends a byte for that long is closed: Redis'
 *                  `timeout`, which also counts both (lastinteraction).
 *
 * A resume is deferred to a task on the channel's loop: it is decided
 * inside the transport's flush (bytes left the queue), and turning reading
 * back on there, with decoders running again at the read-resumed event,
 * would re-enter the transport and the pipeline from inside themselves. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <weft/error.h>
#include <weft/log.h>

#include "channel/channel_internal.h"

const int weft_event_read_resumed = 1;

/* The idle timer ticks four times per timeout, so a channel is closed
 * after between 1 and 1.25 timeouts without a read or a send, and a busy
 * channel costs one counter increment per read or send, no clock read. */
#define IDLE_TICKS 4

bool weft_channel_is_reading(const weft_channel *ch) {
  return ch->auto_read && !ch->limits.read_paused && !ch->limits.read_yielded;
}

/* ---- flow control ---- */

/* Also ends a yield (weft_channel_yield_read): whichever resume runs
 * first after it, the loop's other channels were polled meanwhile. */
static void resume_task(void *arg) {
  weft_channel *ch = arg;
  ch->limits.resume_queued = false;
  ch->limits.read_yielded = false;
  if (ch->state == WEFT_CHANNEL_ACTIVE && weft_channel_is_reading(ch)) {
    int rc = ch->transport->set_read(ch, true);
    if (rc < 0)
      weft_pipeline_fire_exception_caught(&ch->pipeline, rc, "resume reading");
    else
      weft_pipeline_fire_user_event(&ch->pipeline,
                                    (void *)&weft_event_read_resumed);
  }
  weft_channel_release(ch);
}

/* Reading goes on at the next loop iteration; the event follows it. */
static void queue_resume(weft_channel *ch) {
  if (ch->limits.resume_queued)
    return;
  weft_channel_retain(ch);
  ch->limits.resume_queued = true;
  if (weft_loop_execute(ch->loop, resume_task, ch) < 0) {
    ch->limits.resume_queued = false; /* the loop is finishing */
    weft_channel_release(ch);
  }
}

int weft__channel_apply_read(weft_channel *ch, bool on) {
  if (ch->state != WEFT_CHANNEL_ACTIVE || ch->transport->set_read == NULL)
    return 0;
  if (on) {
    queue_resume(ch);
    return 0;
  }
  return ch->transport->set_read(ch, false);
}

void weft__limits_writability(weft_channel *ch, bool writable) {
  weft__limits *l = &ch->limits;
  if (!l->flow_control || l->read_paused == !writable)
    return;
  bool was_reading = weft_channel_is_reading(ch);
  l->read_paused = !writable;
  if (was_reading != weft_channel_is_reading(ch))
    weft__channel_apply_read(ch, writable);
}

/* ---- the yield (docs/architecture.md, "Read budget") ---- */

int weft_channel_yield_read(weft_channel *ch) {
  if (ch->state != WEFT_CHANNEL_ACTIVE)
    return WEFT_ECLOSED;
  weft__limits *l = &ch->limits;
  if (l->read_yielded)
    return 0;
  bool was_reading = weft_channel_is_reading(ch);
  l->read_yielded = true;
  /* The resume ends the yield even when another reason (auto-read off,
   * flow control) keeps the channel from reading then. */
  queue_resume(ch);
  if (was_reading && ch->transport->set_read != NULL)
    return ch->transport->set_read(ch, false);
  return 0;
}

/* ---- output limit ---- */

/* The close is a task of its own: the write that crossed the limit runs
 * inside a handler's event, and closing the channel there would free
 * handler state under the handler. Writes until then are refused. */
static void output_limit_task(void *arg) {
  weft_channel *ch = arg;
  if (ch->state == WEFT_CHANNEL_ACTIVE) {
    char reason[160];
    int n = snprintf(reason, sizeof reason,
                     "output limit of %zu bytes exceeded: %zu bytes queued "
                     "and unsent",
                     ch->limits.output_limit, ch->limits.output_hit_bytes);
    if (ch->out.pinned_bytes > 0 && n > 0 && (size_t)n < sizeof reason)
      snprintf(reason + n, sizeof reason - (size_t)n,
               " (%zu of them sent, pinned by the transport)",
               ch->out.pinned_bytes);
    weft_pipeline_fire_exception_caught(&ch->pipeline, WEFT_ENOBUFS, reason);
    if (ch->state == WEFT_CHANNEL_ACTIVE) { /* a handler kept it open */
      weft_channel_log(ch, WEFT_LOG_WARN, "%s; closing", reason);
      weft__channel_close(ch, WEFT_PROMISE_NONE);
    }
  }
  weft_channel_release(ch);
}

void weft__limits_output_exceeded(weft_channel *ch) {
  weft__limits *l = &ch->limits;
  if (ch->state != WEFT_CHANNEL_ACTIVE)
    return;
  l->output_hit = true;
  l->output_hit_bytes = ch->out.pending_bytes;
  weft_channel_retain(ch);
  if (weft_loop_execute(ch->loop, output_limit_task, ch) < 0)
    weft_channel_release(ch); /* the loop is finishing: it closes it */
}

/* ---- idle timeout ---- */

static void idle_tick(void *arg) {
  weft_channel *ch = arg;
  weft__limits *l = &ch->limits;
  if (l->activity != l->activity_seen) {
    l->activity_seen = l->activity;
    l->idle_ticks = 0;
    return;
  }
  if (++l->idle_ticks < IDLE_TICKS)
    return;
  weft_timer_stop(&l->idle_timer);
  char reason[96];
  snprintf(reason, sizeof reason,
           "idle timeout: no read or send for %" PRIu64 " ms",
           l->idle_timeout_ns / 1000000u);
  weft_channel_retain(ch); /* the exception may close and free it */
  weft_pipeline_fire_exception_caught(&ch->pipeline, WEFT_ETIMEDOUT, reason);
  if (ch->state == WEFT_CHANNEL_ACTIVE) {
    weft_channel_log(ch, WEFT_LOG_INFO, "%s; closing", reason);
    weft__channel_close(ch, WEFT_PROMISE_NONE);
  }
  weft_channel_release(ch);
}

static int idle_start(weft_channel *ch) {
  weft__limits *l = &ch->limits;
  weft_timer_stop(&l->idle_timer);
  l->idle_ticks = 0;
  l->activity_seen = l->activity;
  if (l->idle_timeout_ns == 0 || ch->state != WEFT_CHANNEL_ACTIVE)
    return 0;
  uint64_t tick = l->idle_timeout_ns / IDLE_TICKS;
  return weft_timer_start(&l->idle_timer, tick, tick, idle_tick, ch);
}

void weft__limits_activate(weft_channel *ch) { idle_start(ch); }

/* ---- options and lifecycle ---- */

int weft__limits_set(weft_channel *ch, weft_channel_option opt, int64_t v) {
  weft__limits *l = &ch->limits;
  switch (opt) {
  case WEFT_OPT_FLOW_CONTROL:
    if (v != 0 && v != 1)
      return WEFT_EINVAL;
    l->flow_control = v != 0;
    weft__limits_writability(ch, l->flow_control ? ch->out.writable : true);
    return 0;
  case WEFT_OPT_OUTPUT_LIMIT:
    if (v < 0)
      return WEFT_EINVAL;
    l->output_limit = (size_t)v;
    weft__limits_queued(ch);
    return 0;
  case WEFT_OPT_IDLE_TIMEOUT_MS:
    if (v < 0 || v > INT32_MAX)
      return WEFT_EINVAL;
    l->idle_timeout_ns = (uint64_t)v * 1000000u;
    return idle_start(ch);
  default:
    return WEFT_ENOTSUP;
  }
}

int weft__limits_get(const weft_channel *ch, weft_channel_option opt,
                     int64_t *v) {
  const weft__limits *l = &ch->limits;
  switch (opt) {
  case WEFT_OPT_FLOW_CONTROL:
    *v = l->flow_control;
    return 0;
  case WEFT_OPT_OUTPUT_LIMIT:
    *v = (int64_t)l->output_limit;
    return 0;
  case WEFT_OPT_IDLE_TIMEOUT_MS:
    *v = (int64_t)(l->idle_timeout_ns / 1000000u);
    return 0;
  default:
    return WEFT_ENOTSUP;
  }
}

void weft__limits_close(weft_channel *ch) {
  weft__limits *l = &ch->limits;
  weft_timer_stop(&l->idle_timer);
  weft__conn_count *c = l->count;
  l->count = NULL;
  if (c != NULL)
    weft__conn_count_release(c, l->counted);
}

void weft__conn_count_release(weft__conn_count *c, bool counted) {
  if (counted)
    atomic_fetch_sub_explicit(&c->live, 1, memory_order_relaxed);
  if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
    free(c);
}
