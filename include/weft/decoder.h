/* SPDX-License-Identifier: Apache-2.0 */
/* weft/decoder.h: the cumulating decoder base for framing codecs (Netty's
 * ByteToMessageDecoder).
 *
 * A decoder turns a byte stream, which a transport may split or merge at
 * any byte, into messages. Write only the `decode` step; the base does the
 * bookkeeping. A decoder's state begins with a weft_decoder. For each
 * received weft_buf the base calls `decode` until it needs more bytes:
 *
 *  - with no bytes left over from earlier reads, `decode` sees the received
 *    buffer itself, so frames that lie in it whole are sliced out of it
 *    without a copy;
 *  - bytes left over after the last whole frame are copied into the
 *    cumulation buffer (sized by the decoder's `need` hint, so a frame is
 *    copied at most once more), and the received buffer is released, so a
 *    slow peer never pins receive memory; the next read is appended there.
 *
 * Flow control: with weft_decoder_user_event as the handler's user_event,
 * the base stops decoding as soon as the channel stops reading (auto-read
 * off, or a server's flow control above the high watermark: channel.h),
 * keeps the rest in the cumulation, and goes on when reading resumes
 * (weft_event_read_resumed), followed by a channel_read_complete. So a
 * peer that pipelines a thousand requests in one read and never reads the
 * replies holds the replies up to the high watermark, not a thousand.
 * Without it the base decodes every whole message of a read, as Netty's
 * ByteToMessageDecoder does.
 *
 * Errors from `decode` go to exception_caught (the tail logs them and
 * closes the channel). Handlers may be removed (the channel closed by the
 * tail on that very exception) while the base is running: the state is
 * then freed when the outermost event returns.
 *
 * A decoder of one-byte-length-prefixed frames, complete:
 *
 *   typedef struct u8_frames { weft_decoder base; } u8_frames;
 *
 *   static int u8_decode(weft_decoder *d, weft_buf *in, void **out) {
 *     size_t have = weft_buf_readable(in);
 *     if (have < 1)
 *       return 0;
 *     size_t len = weft_buf_rptr(in)[0];       // from the peer: bounded by
 *     if (have < 1 + len) {                    // its type (255), so no
 *       d->need = 1 + len;                     // maximum to check here
 *       return 0;
 *     }
 *     in->reader_index += 1;
 *     *out = weft_buf_read_slice(in, len);     // no copy; NULL on ENOMEM
 *     return *out != NULL ? 1
 *                         : weft_decoder_fail(d, WEFT_ENOMEM, "u8: slice");
 *   }
 *   static void u8_free(weft_decoder *d) { free(d); }
 *   static const weft_handler u8_handler = {
 *       .name = "u8-frames",
 *       .channel_read = weft_decoder_channel_read,
 *       .handler_removed = weft_decoder_handler_removed,
 *       .user_event = weft_decoder_user_event};
 *
 *   int u8_frames_add_last(weft_pipeline *p) {
 *     u8_frames *s = malloc(sizeof *s);
 *     if (s == NULL)
 *       return WEFT_ENOMEM;
 *     weft_decoder_init(&s->base, u8_decode, u8_free);
 *     return weft_decoder_add_last(p, "u8", &u8_handler, &s->base);
 *   }
 *
 * A length a peer sends must be checked against a maximum before anything
 * is allocated for it: return weft_decoder_fail(d, WEFT_ETOOLONG, ...) as
 * the length-field decoder (frame.h) does.
 *
 * Threads: a decoder lives on its channel's loop; every call here runs
 * there.
 */
#ifndef WEFT_DECODER_H
#define WEFT_DECODER_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/buf.h>
#include <weft/pipeline.h>
#include <weft/timer.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The state a decoder handler keeps per channel (defined below). */
typedef struct weft_decoder weft_decoder;

/**
 * Decodes at most one message from `in`'s readable bytes. Returns 1 with
 * `*out` (one reference) and the reader index past what it used, or 1 with
 * `*out` NULL when it only consumed bytes (skipping); 0 when it needs more
 * bytes (it may set d->need to the bytes, from the reader index, that the
 * pending message takes in all); a negative weft error with d->reason set.
 * After an error the base drops all further input unless `decode` set
 * d->resync (it skipped the bad bytes and can go on).
 */
typedef int (*weft_decode_cb)(weft_decoder *d, weft_buf *in, void **out);

/**
 * Told that the cumulation of `d` now holds `held` bytes of memory (its
 * capacity: what an incomplete frame costs, including room reserved for
 * a length the peer announced), was `was`. Runs on the channel's loop
 * after each change, and with `held` 0 when the handler goes. Returning
 * a negative weft error (with a reason set by weft_decoder_fail) fails
 * the decoder as a decode error does: the cumulation is dropped, further
 * input too, and exception_caught fires with that error; the return is
 * ignored when `held` is 0. For servers that bound what peers may make
 * them buffer: Redis' client-query-buffer-limit, a process-wide total.
 */
typedef int (*weft_decoder_watch_cb)(weft_decoder *d, size_t was, size_t held,
                                     void *arg);

/** The base of a decoder's state: its first member. */
struct weft_decoder {
  /* set by weft_decoder_init */
  weft_decode_cb decode;
  void (*free_state)(weft_decoder *d); /* frees the whole state */
  /* public: decode may set these */
  size_t need;        /* bytes the pending frame takes in all, from the
                         reader index (a hint that sizes the cumulation) */
  const char *reason; /* the error's text; weft_decoder_fail sets it */
  bool resync;        /* after an error: the bad bytes were skipped and
                         decoding may go on */
  /* public: a handler may set these (weft_decoder_watch) */
  weft_decoder_watch_cb watch; /* told of each change of `held` */
  void *watch_arg;             /* passed to `watch` */
  size_t held; /* read-only: bytes of memory the cumulation holds now (its
                  capacity; 0 when there is none) */
  uint64_t frame_timeout_ns; /* public: an incomplete frame held this long
                                (from the read after which decode asked
                                for more bytes) fails the decoder with
                                WEFT_ETIMEDOUT, checked by a timer armed
                                only while such bytes are held; bytes that
                                wait because the channel paused reading
                                (weft_channel_yield_read) do not count;
                                0 = never (default) */
  /* private */
  uint64_t held_since_ns; /* when decode last began waiting for bytes */
  bool waiting;           /* the last decode asked for more bytes (no frame
                             since) */
  weft_timer frame_timer; /* frame_timeout_ns's; its loop is NULL until
                             first armed */
  weft_ctx *ctx;          /* the handler's context, for the timer */
  weft_buf *cum;          /* cumulation: bytes of an incomplete frame */
  char reason_buf[160];
  bool failed;  /* a fatal error was reported: drop input */
  bool removed; /* handler_removed ran inside an event */
  int depth;    /* events of this handler on the stack */
};

/**
 * Initialises the base part of a decoder's state: `decode` is called for
 * every readable stretch, `free_state` when the handler goes (it frees the
 * whole state, of which `d` is the first member). Never fails.
 */
void weft_decoder_init(weft_decoder *d, weft_decode_cb decode,
                       void (*free_state)(weft_decoder *d));

/**
 * The handler ops of every decoder: put them in its weft_handler as
 * channel_read and handler_removed; the handler's state is the decoder
 * (weft_decoder_add_last adds it so). channel_read takes the reference to
 * a received weft_buf (released, or kept as the cumulation) and passes any
 * other message on unchanged; handler_removed releases the cumulation and
 * calls free_state, at once or when the running event returns.
 */
void weft_decoder_channel_read(weft_ctx *ctx, void *msg);
void weft_decoder_handler_removed(weft_ctx *ctx);

/**
 * The user_event op of a decoder: on weft_event_read_resumed it decodes
 * what waited in the cumulation (then fires channel_read_complete if it
 * produced messages), and passes every event on. Put it in the handler so
 * the decoder pauses with the channel's reading (see above).
 */
void weft_decoder_user_event(weft_ctx *ctx, void *event);

/**
 * Marks the start / end of an event of this handler that may fire events
 * (so handler_removed inside it defers the free). weft_decoder_leave
 * returns false when the state was freed: touch nothing afterwards.
 */
static inline void weft_decoder_enter(weft_decoder *d) { d->depth++; }
/** The end of an event weft_decoder_enter started: false when the state was
 *  freed meanwhile (touch nothing). */
bool weft_decoder_leave(weft_decoder *d);

/**
 * For decode's error return: formats the reason (printf-style, up to 159
 * bytes; longer text is cut) into the state and returns `err`, e.g.
 * `return weft_decoder_fail(d, WEFT_ETOOLONG, "frame of %zu bytes", n);`.
 */
int weft_decoder_fail(weft_decoder *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * The decoder named `name` in `p` (any decoder built on this base), or
 * NULL when there is no such handler or it is not one. Loop thread.
 */
weft_decoder *weft_decoder_of(weft_pipeline *p, const char *name);

/**
 * Sets the watcher of `d`'s cumulation (see weft_decoder_watch_cb), or
 * none with NULL. It is told of the next change. Loop thread.
 */
void weft_decoder_watch(weft_decoder *d, weft_decoder_watch_cb cb, void *arg);

/**
 * Adds the decoder state `d` with handler `h` at the tail end of `p` under
 * `name`. Returns 0, or the pipeline's error (WEFT_EEXIST for a name in
 * use, WEFT_ENOMEM), having freed the state with free_state. The pipeline
 * owns `d` from here. Loop thread.
 */
int weft_decoder_add_last(weft_pipeline *p, const char *name,
                          const weft_handler *h, weft_decoder *d);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_DECODER_H */
