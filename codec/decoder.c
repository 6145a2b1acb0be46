/* SPDX-License-Identifier: Apache-2.0 */
/* The cumulating decoder base (see decoder.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <weft/clock.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>

#include <weft/decoder.h>

void weft_decoder_init(weft_decoder *d, weft_decode_cb decode,
                       void (*free_state)(weft_decoder *d)) {
  memset(d, 0, sizeof *d);
  d->decode = decode;
  d->free_state = free_state;
}

int weft_decoder_fail(weft_decoder *d, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->reason_buf, sizeof d->reason_buf, fmt, ap);
  va_end(ap);
  d->reason = d->reason_buf;
  return err;
}

bool weft_decoder_leave(weft_decoder *d) {
  if (--d->depth > 0 || !d->removed)
    return true;
  d->free_state(d);
  return false;
}

static void drop_cumulation(weft_decoder *d) {
  weft_buf_release(d->cum);
  d->cum = NULL;
}

/* Drops the cumulation once it is empty: an idle channel holds no
 * buffer. */
static void trim_cumulation(weft_decoder *d) {
  if (!d->failed && !d->removed && d->cum != NULL &&
      weft_buf_readable(d->cum) == 0)
    drop_cumulation(d);
}

/* ---- what the cumulation holds: the watcher and the frame timeout ---- */

static void frame_timer_fire(void *arg);

/* Arms the frame timeout for `delay_ns` (its timer is set up on first
 * use, on the channel's loop). */
static void frame_timer_arm(weft_decoder *d, uint64_t delay_ns) {
  if (d->frame_timer.loop == NULL)
    weft_timer_init(weft_channel_loop(weft_ctx_channel(d->ctx)),
                    &d->frame_timer);
  weft_timer_start(&d->frame_timer, delay_ns, 0, frame_timer_fire, d);
}

static void frame_timer_stop(weft_decoder *d) {
  if (d->frame_timer.loop != NULL)
    weft_timer_stop(&d->frame_timer);
}

/* Tells the watcher that the cumulation went from d->held to `held`
 * bytes; its refusal is returned (ignored when `held` is 0). */
static int tell_watcher(weft_decoder *d, size_t held) {
  size_t was = d->held;
  d->held = held;
  if (d->watch == NULL || was == held)
    return 0;
  int rc = d->watch(d, was, held, d->watch_arg);
  return held > 0 ? rc : 0;
}

/* After the cumulation may have changed: the watcher hears of it, and a
 * frame left incomplete starts the frame timeout (once: a frame that
 * trickles in does not restart it). Bytes held only because the channel
 * paused reading before decoding them (a yield, weft_channel_yield_read)
 * are not an incomplete frame: the timeout waits for the peer, not for
 * this side's turn, and starts when decode asks for more bytes
 * (d->waiting). Returns the watcher's refusal. */
static int note_held(weft_decoder *d) {
  size_t held = d->cum != NULL && !d->failed ? d->cum->capacity : 0;
  bool partial = d->cum != NULL && !d->failed && d->waiting &&
                 weft_buf_readable(d->cum) > 0;
  if (!partial)
    d->held_since_ns = 0;
  else if (d->held_since_ns == 0) {
    d->held_since_ns = weft_now_ns();
    if (d->frame_timeout_ns > 0 && d->ctx != NULL &&
        (d->frame_timer.loop == NULL || !weft_timer_active(&d->frame_timer)))
      frame_timer_arm(d, d->frame_timeout_ns);
  }
  return tell_watcher(d, held);
}

/* A failure from outside decode (the watcher, the timeout, no memory):
 * input is dropped from here, the watcher hears the cumulation is gone,
 * and exception_caught fires. */
static void fail_outside(weft_ctx *ctx, weft_decoder *d, int err,
                         const char *reason) {
  d->failed = true;
  drop_cumulation(d);
  frame_timer_stop(d);
  note_held(d);
  weft_ctx_fire_exception_caught(ctx, err, reason);
}

static void frame_timer_fire(void *arg) {
  weft_decoder *d = arg;
  if (d->failed || d->removed || d->held_since_ns == 0)
    return;
  uint64_t age = weft_now_ns() - d->held_since_ns;
  if (age < d->frame_timeout_ns) { /* a newer frame: its own deadline */
    frame_timer_arm(d, d->frame_timeout_ns - age);
    return;
  }
  weft_decoder_enter(d);
  weft_decoder_fail(d, WEFT_ETIMEDOUT,
                    "incomplete frame of %zu bytes held for %" PRIu64
                    " ms (timeout %" PRIu64 " ms)",
                    weft_buf_readable(d->cum), age / 1000000u,
                    d->frame_timeout_ns / 1000000u);
  fail_outside(d->ctx, d, WEFT_ETIMEDOUT, d->reason);
  weft_decoder_leave(d);
}

/* Makes room for `n` more bytes in the cumulation and appends them. The
 * bytes can be moved to the front only while no frame sliced from the
 * cumulation is alive (refcnt 1), or that frame's bytes would change. */
static int cumulate(weft_decoder *d, weft_pool *pool, const uint8_t *src,
                    size_t n) {
  weft_buf *c = d->cum;
  if (weft_buf_writable(c) >= n)
    return weft_buf_write_bytes(c, src, n);
  size_t readable = weft_buf_readable(c);
  if (weft_buf_refcnt(c) == 1 && c->capacity >= readable + n) {
    memmove(c->base, weft_buf_rptr(c), readable);
    c->reader_index = 0;
    c->writer_index = readable;
    return weft_buf_write_bytes(c, src, n);
  }
  size_t cap = readable + n;
  if (cap < d->need)
    cap = d->need;
  else if (cap < 2 * readable)
    cap = 2 * readable; /* amortise a frame that trickles in */
  weft_buf *grown = weft_buf_alloc(pool, cap);
  if (grown == NULL)
    return WEFT_ENOMEM;
  weft_buf_write_bytes(grown, weft_buf_rptr(c), readable);
  weft_buf_write_bytes(grown, src, n);
  weft_buf_release(c);
  d->cum = grown;
  return 0;
}

/* Keeps the bytes of `in` (the received buffer) that no frame used. */
static int keep_rest(weft_decoder *d, weft_pool *pool, weft_buf *in) {
  size_t rest = weft_buf_readable(in);
  size_t cap = rest > d->need ? rest : d->need;
  d->cum = weft_buf_alloc(pool, cap);
  if (d->cum == NULL)
    return WEFT_ENOMEM;
  return weft_buf_write_bytes(d->cum, weft_buf_rptr(in), rest);
}

/* True when the channel stopped reading (auto-read off, or flow control)
 * and this decoder can go on later: its handler takes the read-resumed
 * event. The rest of the bytes then wait in the cumulation. */
static bool paused(weft_ctx *ctx) {
  return weft_ctx_handler(ctx)->user_event == weft_decoder_user_event &&
         !weft_channel_is_reading(weft_ctx_channel(ctx));
}

/* Runs `decode` over `in` until it needs more bytes, fails, or the channel
 * pauses reading. Returns the messages it fired. */
static int decode_all(weft_ctx *ctx, weft_decoder *d, weft_buf *in) {
  int fired = 0;
  while (!d->failed && !d->removed && weft_buf_readable(in) > 0 &&
         !paused(ctx)) {
    void *out = NULL;
    d->need = 0;
    d->resync = false;
    int rc = d->decode(d, in, &out);
    if (rc == 0) {
      d->waiting = true; /* the frame timeout may run (note_held) */
      break;
    }
    if (rc > 0) {
      d->waiting = false; /* a frame's worth of progress */
      if (out != NULL) {
        fired++;
        weft_ctx_fire_channel_read(ctx, out);
      }
      continue;
    }
    if (!d->resync) {
      d->failed = true;
      drop_cumulation(d);
    }
    weft_ctx_fire_exception_caught(ctx, rc, d->reason ? d->reason : "decode");
  }
  return fired;
}

static void fail_nomem(weft_ctx *ctx, weft_decoder *d) {
  fail_outside(ctx, d, WEFT_ENOMEM, "decoder cumulation");
}

/* The end of an event that read: the watcher hears of the cumulation, and
 * its refusal fails the decoder. */
static void settle(weft_ctx *ctx, weft_decoder *d) {
  if (d->removed)
    drop_cumulation(d);
  int rc = note_held(d);
  if (rc < 0 && !d->removed)
    fail_outside(ctx, d, rc, d->reason ? d->reason : "decoder cumulation");
}

void weft_decoder_channel_read(weft_ctx *ctx, void *msg) {
  weft_decoder *d = weft_ctx_state(ctx);
  if (!weft_msg_is(msg, &weft_buf_msg_type)) {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  weft_buf *rx = msg;
  if (d->failed) {
    weft_buf_release(rx);
    return;
  }
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  weft_decoder_enter(d);
  d->ctx = ctx;
  if (d->cum != NULL) {
    int rc = cumulate(d, pool, weft_buf_rptr(rx), weft_buf_readable(rx));
    weft_buf_release(rx);
    if (rc < 0)
      fail_nomem(ctx, d);
    else
      decode_all(ctx, d, d->cum);
    trim_cumulation(d);
  } else {
    decode_all(ctx, d, rx);
    if (!d->failed && !d->removed && weft_buf_readable(rx) > 0 &&
        keep_rest(d, pool, rx) < 0)
      fail_nomem(ctx, d);
    weft_buf_release(rx);
  }
  settle(ctx, d);
  weft_decoder_leave(d);
}

void weft_decoder_user_event(weft_ctx *ctx, void *event) {
  weft_decoder *d = weft_ctx_state(ctx);
  /* Inside a running event of this decoder its own loop goes on by
   * itself; only a resume from outside decodes here. */
  if (event == &weft_event_read_resumed && d->depth == 0 && d->cum != NULL &&
      !d->failed) {
    weft_decoder_enter(d);
    d->ctx = ctx;
    int fired = decode_all(ctx, d, d->cum);
    trim_cumulation(d);
    settle(ctx, d);
    bool removed = d->removed;
    if (!weft_decoder_leave(d))
      return; /* freed: the channel is gone */
    if (fired > 0 && !removed)
      weft_ctx_fire_channel_read_complete(ctx);
  }
  weft_ctx_fire_user_event(ctx, event);
}

void weft_decoder_handler_removed(weft_ctx *ctx) {
  weft_decoder *d = weft_ctx_state(ctx);
  frame_timer_stop(d);
  if (d->depth > 0) {
    d->removed = true; /* the running event frees it on its way out */
    return;
  }
  drop_cumulation(d);
  tell_watcher(d, 0);
  d->free_state(d);
}

weft_decoder *weft_decoder_of(weft_pipeline *p, const char *name) {
  weft_ctx *ctx = weft_pipeline_context(p, name);
  if (ctx == NULL ||
      weft_ctx_handler(ctx)->channel_read != weft_decoder_channel_read)
    return NULL;
  return weft_ctx_state(ctx);
}

void weft_decoder_watch(weft_decoder *d, weft_decoder_watch_cb cb, void *arg) {
  d->watch = cb;
  d->watch_arg = arg;
}

int weft_decoder_add_last(weft_pipeline *p, const char *name,
                          const weft_handler *h, weft_decoder *d) {
  int rc = weft_pipeline_add_last(p, name, h, d);
  if (rc < 0)
    d->free_state(d);
  return rc;
}
