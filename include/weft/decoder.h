/* The cumulating decoder base every codec/ decoder builds on (Netty's
 * ByteToMessageDecoder).
 *
 * A decoder's state begins with a weft__decoder. For each received
 * weft_buf the base calls `decode` until it needs more bytes:
 *
 *  - with no bytes left over from earlier reads, `decode` sees the received
 *    buffer itself, so frames that lie in it whole are sliced out of it
 *    without a copy;
 *  - bytes left over after the last whole frame are copied into the
 *    cumulation buffer (sized by the decoder's `need` hint, so a frame is
 *    copied at most once more), and the received buffer is released, so a
 *    slow peer never pins receive memory; the next read is appended there.
 *
 * Errors from `decode` go to exception_caught. Handlers may be removed (the
 * channel closed by the tail on that very exception) while the base is
 * running: the state is then freed when the outermost event returns.
 */
#ifndef WEFT_CODEC_DECODER_H
#define WEFT_CODEC_DECODER_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/buf.h>
#include <weft/pipeline.h>

typedef struct weft__decoder weft__decoder;

/**
 * Decodes at most one message from `in`'s readable bytes. Returns 1 with
 * `*out` (one reference) and the reader index past what it used, or 1 with
 * `*out` NULL when it only consumed bytes (skipping); 0 when it needs more
 * bytes (it may set d->need to the bytes, from the reader index, that the
 * pending message takes in all); a negative weft error with d->reason set.
 * After an error the base drops all further input unless `decode` set
 * d->resync (it skipped the bad bytes and can go on).
 */
typedef int (*weft__decode_cb)(weft__decoder *d, weft_buf *in, void **out);

struct weft__decoder {
  weft__decode_cb decode;
  void (*free_state)(weft__decoder *d); /* frees the whole state */
  weft_buf *cum;      /* cumulation: bytes of an incomplete frame */
  size_t need;        /* decode's hint, see weft__decode_cb */
  const char *reason; /* decode's error text (static or in `reason_buf`) */
  char reason_buf[160];
  bool resync;
  bool failed;  /* a fatal error was reported: drop input */
  bool removed; /* handler_removed ran inside an event */
  int depth;    /* events of this handler on the stack */
};

/** Initialises the base part of a decoder's state. */
void weft__decoder_init(weft__decoder *d, weft__decode_cb decode,
                        void (*free_state)(weft__decoder *d));

/* Handler ops: state is the weft__decoder (the first member). */
void weft__decoder_channel_read(weft_ctx *ctx, void *msg);
void weft__decoder_handler_removed(weft_ctx *ctx);

/**
 * Marks the start / end of an event of this handler that may fire events
 * (so handler_removed inside it defers the free). weft__decoder_leave
 * returns false when the state was freed: touch nothing afterwards.
 */
static inline void weft__decoder_enter(weft__decoder *d) { d->depth++; }
bool weft__decoder_leave(weft__decoder *d);

/** Formats d->reason into reason_buf (printf-style). Returns `err`. */
int weft__decoder_fail(weft__decoder *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Adds the decoder state `d` with handler `h` at the tail end of `p`; on
 * failure frees the state and returns the error.
 */
int weft__decoder_add_last(weft_pipeline *p, const char *name,
                           const weft_handler *h, weft__decoder *d);

#endif /* WEFT_CODEC_DECODER_H */
