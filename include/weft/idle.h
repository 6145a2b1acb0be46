/* SPDX-License-Identifier: Apache-2.0 */
/* weft/idle.h: the idle-state handler (Netty's IdleStateHandler).
 *
 * Fires a user_event when a channel has not read, not written, or neither,
 * for a configured time. The event is a weft_idle_event (it begins with a
 * weft_msg header, so a handler recognises it with
 * weft_msg_is(event, &weft_idle_event_type)); it is borrowed for the call.
 * A typical use closes the channel on it. Reads count when channel_read
 * passes the handler, writes when a write passes it (towards the head).
 * The handler keeps one loop timer per configured kind; it starts on
 * channel_active (or when added to an active channel) and stops on
 * channel_inactive. Loop thread.
 */
#ifndef WEFT_IDLE_H
#define WEFT_IDLE_H

#include <stdbool.h>
#include <stdint.h>

#include <weft/msg.h>
#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Which kind of idleness an event reports. */
typedef enum weft_idle_state {
  WEFT_IDLE_READER = 1, /* nothing read for reader_idle_ns */
  WEFT_IDLE_WRITER = 2, /* nothing written for writer_idle_ns */
  WEFT_IDLE_ALL = 3     /* neither for all_idle_ns */
} weft_idle_state;

/** The user_event the handler fires. Fields are read-only. */
typedef struct weft_idle_event {
  weft_msg msg;          /* type weft_idle_event_type (release: no-op) */
  weft_idle_state state; /* which kind of idleness */
  bool first;            /* first event of this kind since the last activity */
} weft_idle_event;

/** The message type of weft_idle_event. */
extern const weft_msg_type weft_idle_event_type;

/** Timeouts in nanoseconds; 0 switches that kind off. */
typedef struct weft_idle_options {
  uint64_t reader_idle_ns; /* nothing read for this long */
  uint64_t writer_idle_ns; /* nothing written for this long */
  uint64_t all_idle_ns;    /* neither read nor written for this long */
} weft_idle_options;

/**
 * Adds the idle-state handler at the tail end of `p` (put it near the head
 * to see all traffic). Returns 0, WEFT_EINVAL (all timeouts 0),
 * WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_idle_add_last(weft_pipeline *p, const char *name,
                       const weft_idle_options *opts);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_IDLE_H */
