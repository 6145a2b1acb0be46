/* SPDX-License-Identifier: Apache-2.0 */
/* weft/embedded.h: a channel with no network, driven by a test.
 *
 * An embedded channel runs a real pipeline on the calling thread with no
 * loop thread and no transport: the test feeds inbound messages with
 * weft_embedded_write_inbound() and collects what the pipeline wrote with
 * weft_embedded_read_outbound() (Netty's EmbeddedChannel). Codecs and
 * handlers are unit-tested this way. It owns a buffer pool of its own
 * (weft_embedded_pool) and reports leaked buffers when freed.
 *
 * Auto-read and flow control can be set and are reported by
 * weft_channel_is_reading(); weft_embedded_write_inbound() delivers
 * whatever they say, since the test drives the reads.
 *
 * Threads: one thread only, the one that created it. It acts as a loop of
 * its own: weft_loop_in_loop() is true there; timers and weft_loop_execute
 * run when the test calls weft_embedded_run_pending().
 */
#ifndef WEFT_EMBEDDED_H
#define WEFT_EMBEDDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A channel without a network, for tests of handlers (opaque). */
typedef struct weft_embedded weft_embedded;

/**
 * Creates an ACTIVE embedded channel; `init` (may be NULL) builds the
 * pipeline before channel_active fires. Returns 0 and `*out`, or
 * WEFT_ENOMEM. The caller frees it with weft_embedded_free().
 */
int weft_embedded_new(weft_embedded **out, weft_channel_init_cb init,
                      void *arg);

/** The embedded channel and its pool. */
weft_channel *weft_embedded_channel(weft_embedded *e);
weft_pool *weft_embedded_pool(weft_embedded *e);

/**
 * Fires channel_read(msg) (one reference passed) and then
 * channel_read_complete at the head. Returns 0, or WEFT_ECLOSED when the
 * channel is closed (msg is then released).
 */
int weft_embedded_write_inbound(weft_embedded *e, void *msg);

/** Copies `len` bytes into a pool buffer and writes it inbound. */
int weft_embedded_write_inbound_bytes(weft_embedded *e, const void *data,
                                      size_t len);

/**
 * Takes the next message that reached the head (written and flushed, in
 * order), or NULL. The caller owns it (release it). Written but unflushed
 * messages are not returned.
 */
void *weft_embedded_read_outbound(weft_embedded *e);

/**
 * Takes the next message that reached the tail unhandled, or NULL. While
 * the test has not called this, the tail keeps them instead of releasing.
 */
void *weft_embedded_read_inbound(weft_embedded *e);

/**
 * The exceptions that reached the tail, oldest first: the error of the
 * i-th, or 0 past the end. The tail closes the channel on the first one.
 */
int weft_embedded_exception(const weft_embedded *e, size_t i);

/**
 * Makes the channel unwritable-aware: the next flush sends only `bytes`
 * bytes (the rest stays queued, counting against the watermarks) until
 * this is called again; SIZE_MAX (the default) sends all.
 */
void weft_embedded_set_write_limit(weft_embedded *e, size_t bytes);

/**
 * Makes the channel a byte stream (as tcp and uring are) or, by default, a
 * message channel: on a stream, small writes that are not flushed yet are
 * merged into one buffer (channel.h), so weft_embedded_read_outbound()
 * returns them together. Call before writing.
 */
void weft_embedded_set_stream(weft_embedded *e, bool on);

/** Runs queued tasks and due timers of the embedded loop; returns count. */
int weft_embedded_run_pending(weft_embedded *e);

/**
 * Closes the channel if open, releases every message still queued, and
 * frees everything. Returns the number of leaked buffers (0 = clean).
 */
size_t weft_embedded_free(weft_embedded *e);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_EMBEDDED_H */
