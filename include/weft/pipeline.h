/* SPDX-License-Identifier: Apache-2.0 */
/* weft/pipeline.h: handlers, handler contexts and the channel pipeline.
 *
 * Every channel has a pipeline: a list of handlers that see its inbound
 * events and outbound operations, Netty's ChannelPipeline in C.
 *
 *                                                 I/O request
 *                                            via weft_channel_* or
 *                                                weft_ctx_* (outbound)
 *                                                      |
 *  +---------------------------------------------------+---------------+
 *  |                        weft_pipeline              |               |
 *  |                                                  \|/              |
 *  |    +---------------------+            +-----------+----------+    |
 *  |    |     handler  N      |            |     handler  M       |    |
 *  |    +----------+----------+            +-----------+----------+    |
 *  |              /|\                                  |               |
 *  |               |                                  \|/              |
 *  |    +----------+----------+            +-----------+----------+    |
 *  |    |     handler  2      |            |     handler  2       |    |
 *  |    +----------+----------+            +-----------+----------+    |
 *  |              /|\                                  .               |
 *  |               .                                   .               |
 *  | weft_ctx_fire_*() (inbound)        weft_ctx_write/flush/close()   |
 *  |          [ method call ]                    [ method call ]       |
 *  |               .                                   .               |
 *  |               .                                  \|/              |
 *  |    +----------+----------+            +-----------+----------+    |
 *  |    |     handler  1      |            |     handler  1       |    |
 *  |    +----------+----------+            +-----------+----------+    |
 *  |              /|\                                  |               |
 *  +---------------+-----------------------------------+---------------+
 *                  |           (head)                 \|/
 *  +---------------+-----------------------------------+---------------+
 *  |               |                                   |               |
 *  |        [ receive ]                           [ write, flush ]     |
 *  |                                                                   |
 *  |   transport: tcp (epoll) | uring (io_uring) | verbs (RC) | ucx    |
 *  +-------------------------------------------------------------------+
 *
 * Inbound events flow up, from the transport at the head towards the tail;
 * outbound operations flow down, from the tail (or the handler that starts
 * them) towards the head, where the transport carries them out. A handler
 * takes part in a direction by setting the ops of that direction; a NULL op
 * forwards the event unchanged, so a handler implements only what it needs.
 *
 * Worked example. A pipeline built with
 *
 *     weft_pipeline_add_last(p, "decoder", &frame_decoder, d);  // 1 inbound
 *     weft_pipeline_add_last(p, "encoder", &frame_encoder, e);  // 2 outbound
 *     weft_pipeline_add_last(p, "logic",   &kv_handler,    k);  // 3 both
 *
 * evaluates inbound events in the order 1, 3 (2 has no inbound ops) and
 * outbound operations started with weft_channel_write() in the order 3, 2
 * (1 has no outbound ops). A write started by handler 3 itself with
 * weft_ctx_write(ctx, ...) begins below it: 2 only.
 *
 * Inbound events (fired with weft_ctx_fire_*, handled by the op of the same
 * name): channel_active, channel_inactive, channel_read, channel_read_complete,
 * writability_changed, user_event, exception_caught.
 * Outbound operations (started with weft_ctx_* / weft_channel_*): write,
 * flush, close.
 * Lifecycle (called on the handler itself, never forwarded): handler_added,
 * handler_removed.
 *
 * A handler that implements an op and wants the event to go on forwards it
 * itself, as in Netty:
 *
 *     static void my_read(weft_ctx *ctx, void *msg) {
 *       count_message(weft_ctx_state(ctx));
 *       weft_ctx_fire_channel_read(ctx, msg);   // pass it on, with ownership
 *     }
 *
 * Past the ends: a message that reaches the tail unhandled is released (with
 * a DEBUG log line naming its type); an exception that reaches the tail is
 * logged with the channel and reason, at INFO for WEFT_ECONNRESET and
 * WEFT_EPIPE (the peer went away) and at WARN for every other error, and
 * the channel is closed;
 * other inbound events end silently at the tail. Outbound operations that
 * reach the head go to the transport: write queues a weft_buf (any other
 * message type fails its promise with WEFT_EINVAL and is released), flush
 * sends what is queued, close closes the channel.
 *
 * Threads: a pipeline belongs to its channel's loop; every function here must
 * be called on that loop's thread. Handlers may be added and removed at any
 * time, also from inside an event of the handler being removed: a removed
 * handler gets no new events, and an event it forwards after its removal
 * still continues from its old position.
 */
#ifndef WEFT_PIPELINE_H
#define WEFT_PIPELINE_H

#include <stdbool.h>

#include <weft/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A connection (channel.h; opaque). */
typedef struct weft_channel weft_channel;
/** A channel's chain of handlers (opaque). */
typedef struct weft_pipeline weft_pipeline;
/** A handler's place in a pipeline, passed to each of its ops (opaque). */
typedef struct weft_ctx weft_ctx;

/**
 * A handler's operations (usually a static const struct). Any op may be
 * NULL: the event is forwarded unchanged. Ops run on the channel's loop.
 * Ownership: channel_read and write receive one reference to `msg` and must
 * pass it on or release it. user_event's `event` is borrowed for the call.
 */
typedef struct weft_handler {
  const char *name; /* the handler's type, for logs */

  /* lifecycle */
  void (*handler_added)(weft_ctx *ctx);
  void (*handler_removed)(weft_ctx *ctx); /* free the state here */

  /* inbound */
  void (*channel_active)(weft_ctx *ctx);
  void (*channel_inactive)(weft_ctx *ctx);
  void (*channel_read)(weft_ctx *ctx, void *msg);
  void (*channel_read_complete)(weft_ctx *ctx);
  void (*writability_changed)(weft_ctx *ctx, bool writable);
  void (*user_event)(weft_ctx *ctx, void *event);
  /* `err` is a negative weft error; `reason` a static or short-lived text
   * naming what happened (valid during the call). */
  void (*exception_caught)(weft_ctx *ctx, int err, const char *reason);

  /* outbound */
  void (*write)(weft_ctx *ctx, void *msg, weft_promise promise);
  void (*flush)(weft_ctx *ctx);
  void (*close)(weft_ctx *ctx, weft_promise promise);

  /* True: `write` takes file regions (weft/file_region.h), handling them
   * or passing them on. False (the default): a region written towards
   * this handler reaches its `write` as weft_bufs read from the file, in
   * order, the region's promise on the last (so a handler that must see
   * the bytes, as TLS must, sees them). */
  bool file_regions;
} weft_handler;

/* ---- building the pipeline ---- */

/**
 * Adds a handler named `name` (unique in this pipeline, copied) with
 * per-instance `state` first (next to the head) or last (next to the tail),
 * or before/after the handler named `base`. Calls handler_added. Returns 0,
 * WEFT_EEXIST (name taken), WEFT_ENOENT (no `base`), WEFT_EINVAL or
 * WEFT_ENOMEM. Loop thread.
 */
int weft_pipeline_add_first(weft_pipeline *p, const char *name,
                            const weft_handler *h, void *state);
int weft_pipeline_add_last(weft_pipeline *p, const char *name,
                           const weft_handler *h, void *state);
int weft_pipeline_add_before(weft_pipeline *p, const char *base,
                             const char *name, const weft_handler *h,
                             void *state);
int weft_pipeline_add_after(weft_pipeline *p, const char *base,
                            const char *name, const weft_handler *h,
                            void *state);

/**
 * Removes the handler named `name` and calls its handler_removed. Returns 0
 * or WEFT_ENOENT. Safe from inside any event, including the removed
 * handler's own. Loop thread.
 */
int weft_pipeline_remove(weft_pipeline *p, const char *name);

/**
 * Replaces the handler named `old_name` by a new one at the same position
 * (handler_removed of the old, then handler_added of the new). Returns 0,
 * WEFT_ENOENT, WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_pipeline_replace(weft_pipeline *p, const char *old_name,
                          const char *new_name, const weft_handler *h,
                          void *state);

/** The context of the handler named `name`, or NULL. Loop thread. */
weft_ctx *weft_pipeline_context(weft_pipeline *p, const char *name);

/** The channel a pipeline belongs to. */
weft_channel *weft_pipeline_channel(weft_pipeline *p);

/* ---- the handler context ---- */

/** The state pointer given when the handler was added. */
void *weft_ctx_state(weft_ctx *ctx);

/** The handler (ops) of a context. Loop thread. */
const weft_handler *weft_ctx_handler(const weft_ctx *ctx);
/** Replaces the state pointer (e.g. a handler that allocates lazily). */
void weft_ctx_set_state(weft_ctx *ctx, void *state);
/** The handler's name in this pipeline. */
const char *weft_ctx_name(const weft_ctx *ctx);
/** The channel of this context. */
weft_channel *weft_ctx_channel(weft_ctx *ctx);
/** The pipeline of this context. */
weft_pipeline *weft_ctx_pipeline(weft_ctx *ctx);
/** True once the handler was removed from its pipeline. */
bool weft_ctx_is_removed(const weft_ctx *ctx);

/* Inbound: pass the event to the next handler towards the tail. */
void weft_ctx_fire_channel_active(weft_ctx *ctx);
void weft_ctx_fire_channel_inactive(weft_ctx *ctx);
void weft_ctx_fire_channel_read(weft_ctx *ctx, void *msg);
void weft_ctx_fire_channel_read_complete(weft_ctx *ctx);
void weft_ctx_fire_writability_changed(weft_ctx *ctx, bool writable);
void weft_ctx_fire_user_event(weft_ctx *ctx, void *event);
void weft_ctx_fire_exception_caught(weft_ctx *ctx, int err, const char *reason);

/*
 * Outbound: pass the operation to the next handler towards the head. write
 * takes one reference to `msg`; the promise completes when the transport
 * has handed the bytes to the kernel or device (0), or with the error that
 * made it fail (the message is then released). close's promise completes
 * when the channel is closed.
 */
void weft_ctx_write(weft_ctx *ctx, void *msg, weft_promise promise);
/** Writes a copy of `len` bytes at `data` from `ctx` towards the head:
 *  weft_channel_write_bytes() (channel.h: when it is cheap, and the
 *  errors its promise reports) started below this handler. The caller
 *  keeps `data`. Loop thread. */
void weft_ctx_write_bytes(weft_ctx *ctx, const void *data, size_t len,
                          weft_promise promise);
void weft_ctx_flush(weft_ctx *ctx);
void weft_ctx_write_and_flush(weft_ctx *ctx, void *msg, weft_promise promise);
void weft_ctx_close(weft_ctx *ctx, weft_promise promise);

/* Fire an inbound event at the head (what a transport does). Loop thread. */
void weft_pipeline_fire_channel_active(weft_pipeline *p);
void weft_pipeline_fire_channel_inactive(weft_pipeline *p);
void weft_pipeline_fire_channel_read(weft_pipeline *p, void *msg);
void weft_pipeline_fire_channel_read_complete(weft_pipeline *p);
void weft_pipeline_fire_writability_changed(weft_pipeline *p, bool writable);
void weft_pipeline_fire_user_event(weft_pipeline *p, void *event);
void weft_pipeline_fire_exception_caught(weft_pipeline *p, int err,
                                         const char *reason);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_PIPELINE_H */
