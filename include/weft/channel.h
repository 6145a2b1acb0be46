/* SPDX-License-Identifier: Apache-2.0 */
/* weft/channel.h: channels, the connections of weft.
 *
 * A channel is one connection over one transport, bound to one loop for its
 * whole life; its pipeline (pipeline.h) handles its events. States:
 *
 *   REGISTERED --(connected / accepted)--> ACTIVE --(close, reset, EOF)-->
 *   INACTIVE --(transport released, channel_inactive fired)--> CLOSED
 *
 * Writes (weft_channel_write) only queue; flush hands everything queued to
 * the transport in as few system calls or work requests as it can (gathering
 * writes). Queued bytes count against the write watermarks: above the high
 * watermark the channel becomes unwritable and writability_changed(false)
 * fires; once below the low watermark it becomes writable again and
 * writability_changed(true) fires. Unwritable is advice: writes are still
 * accepted. Nothing accepted by a write is dropped silently: its promise
 * completes with 0 once sent or with the error that stopped it (WEFT_ECLOSED
 * when the channel closed first).
 *
 * On a byte stream (tcp, uring, ucx), a write of up to 512 bytes
 * (WEFT_WRITE_COALESCE_MAX) may be copied into a buffer of the queue's own,
 * with the small writes before it that are not flushed yet (the written buffer
 * is released at once), so that a flush of many small messages is one buffer
 * and one iovec. A merged write's promise completes when its bytes were sent,
 * as always. Larger buffers are queued as they are and sent without a copy.
 *
 * Flow control (WEFT_OPT_FLOW_CONTROL, on for the channels a server
 * accepts): while the queued bytes are above the high watermark the
 * channel stops reading, and it reads again once they are below the low
 * watermark; then weft_event_read_resumed reaches the handlers as a
 * user_event. Decoders built on weft/decoder.h stop decoding at a paused
 * read too (the rest waits in their cumulation) and go on at that event,
 * so a peer that sends requests but never reads the replies holds about
 * the high watermark plus one reply, not all its replies. Limits
 * (WEFT_OPT_OUTPUT_LIMIT, WEFT_OPT_IDLE_TIMEOUT_MS) close the channel
 * through exception_caught (WEFT_ENOBUFS, WEFT_ETIMEDOUT) with a reason
 * that the tail logs.
 *
 * Threads: every function here runs on the channel's loop thread, except
 * weft_channel_retain / weft_channel_release / weft_channel_loop, which any
 * thread holding a reference may call. To act on a channel from another
 * thread, retain it, then weft_loop_execute() on weft_channel_loop().
 *
 * Lifetime: the channel holds one reference to itself while it is open; it
 * drops it once CLOSED. The memory is freed on the loop thread when the last
 * reference is gone. A handler may use its channel pointer freely inside
 * events; code that keeps the pointer past them must hold a reference.
 */
#ifndef WEFT_CHANNEL_H
#define WEFT_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/channel_option.h>
#include <weft/log.h>
#include <weft/loop.h>
#include <weft/msg.h>
#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Channel states, in the order a channel goes through them. */
typedef enum weft_channel_state {
  WEFT_CHANNEL_REGISTERED = 0, /* created, not yet connected */
  WEFT_CHANNEL_ACTIVE = 1,     /* connected: reads and writes flow */
  WEFT_CHANNEL_INACTIVE = 2,   /* closing: no more reads or writes */
  WEFT_CHANNEL_CLOSED = 3      /* closed; channel_inactive has fired */
} weft_channel_state;

/** The read budget's defaults (WEFT_OPT_MAX_MESSAGES_PER_READ and
 *  WEFT_OPT_MAX_BYTES_PER_READ): Netty's maxMessagesPerRead for a stream
 *  channel (16), and 16 reads of the largest receive buffer of the tcp
 *  transport's adaptive sizes (16 KiB; uring's ring slots are 16 KiB too).
 *  docs/architecture.md, "Read budget". */
#define WEFT_MAX_MESSAGES_PER_READ_DEFAULT 16
#define WEFT_MAX_BYTES_PER_READ_DEFAULT (256 * 1024)
/** The read budget's bounds: at most 65536 reads and 1 GiB per iteration. */
#define WEFT_MAX_MESSAGES_PER_READ_MAX 65536
#define WEFT_MAX_BYTES_PER_READ_MAX (1024 * 1024 * 1024)

/** Default write watermarks in bytes (Netty's). */
#define WEFT_WRITE_LOW_WATERMARK_DEFAULT (32 * 1024)
#define WEFT_WRITE_HIGH_WATERMARK_DEFAULT (64 * 1024)

/** Bytes: on a byte stream, writes up to this size may be copied into the
 *  outbound queue's own buffer (the file comment says when), and
 *  weft_channel_write_bytes() of up to this size usually allocates
 *  nothing. Larger writes are queued as buffers and sent without a copy. */
#define WEFT_WRITE_COALESCE_MAX 512

/** The channel's pipeline. */
weft_pipeline *weft_channel_pipeline(weft_channel *ch);

/** The loop the channel belongs to. Any thread holding a reference. */
weft_loop *weft_channel_loop(weft_channel *ch);

/** The current state. */
weft_channel_state weft_channel_state_of(const weft_channel *ch);

/** True while ACTIVE. */
bool weft_channel_is_active(const weft_channel *ch);

/**
 * True while the channel reads: auto-read is on, flow control has not
 * paused it and it has not yielded (weft_channel_yield_read). Decoders
 * check it between messages.
 */
bool weft_channel_is_reading(const weft_channel *ch);

/**
 * Yields the loop to its other channels: reading stops now and goes on
 * from a task queued now, which runs once the loop's sources and watchers
 * were polled (at the end of this loop iteration, or of the next one when
 * called from a task), followed by weft_event_read_resumed. Decoders stop
 * at the message being handled and decode the rest at that event, so a
 * handler whose work per read is not bounded by the read budget (a peer's
 * pipeline of costly requests in one read) calls it once its own budget
 * of work is spent, and the replies keep their order. Costs the transport
 * a pause and a resume of its reading (tcp: two epoll_ctl); free while not
 * reading. Returns 0, or WEFT_ECLOSED when the channel is not active. Loop
 * thread. docs/architecture.md, "Read budget".
 */
int weft_channel_yield_read(weft_channel *ch);

/**
 * The user_event fired (head to tail) when a channel reads again after
 * auto-read or flow control paused it; compare the event pointer with
 * &weft_event_read_resumed. Decoders (weft_decoder_user_event) decode what
 * waited in their cumulation, then pass it on.
 */
extern const int weft_event_read_resumed;

/** True while queued bytes have not crossed the high watermark. */
bool weft_channel_is_writable(const weft_channel *ch);

/** Bytes written but not yet handed to the transport, plus bytes it sent
 *  but still pins (a uring zero-copy send until the kernel releases it):
 *  what the write watermarks and the output limit count. */
size_t weft_channel_pending_bytes(const weft_channel *ch);

/** A number unique among this process's channels, for logs. */
uint64_t weft_channel_id(const weft_channel *ch);

/** The name of the channel's transport ("tcp", "uring", ...). */
const char *weft_channel_transport_name(const weft_channel *ch);

/**
 * Writes the peer's (or the local) address as text ("127.0.0.1:7000",
 * "[::1]:7000") into `buf`. Returns 0, WEFT_ENOTCONN, WEFT_ENOSPC (buffer
 * too small), or WEFT_ENOTSUP when the transport has no address.
 */
int weft_channel_remote_address(const weft_channel *ch, char *buf, size_t len);
int weft_channel_local_address(const weft_channel *ch, char *buf, size_t len);

/**
 * Logs a message about `ch` (weft_log), prefixed with the channel's id and,
 * where the transport knows it, the peer's address:
 * "channel 7 (peer 127.0.0.1:53312): <message>", so an operator can tell
 * which client a line is about. Nothing is formatted when `level` is not
 * enabled. The loop thread of `ch` (it asks the transport for the address).
 */
void weft_channel_log(const weft_channel *ch, weft_log_level level,
                      const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Starts a write at the tail of the pipeline: `msg` (one reference) passes
 * down through the outbound handlers and is queued at the head. See the
 * file comment for what the promise reports.
 */
void weft_channel_write(weft_channel *ch, void *msg, weft_promise promise);

/**
 * Writes a copy of `len` bytes at `data` from the tail of the pipeline, as
 * if a weft_buf holding them were passed to weft_channel_write(): the same
 * order, promise, watermarks and limits. The caller keeps `data` (not NULL
 * unless `len` is 0); it may change or free it as soon as the call
 * returns. Errors reach the promise only (WEFT_ECLOSED, WEFT_ENOBUFS past
 * the output limit, WEFT_ENOMEM, WEFT_EINVAL for NULL data), and it may
 * complete before the call returns.
 *
 * The cheap case: no outbound handler sits between the caller and the
 * head, the channel is a byte stream, `len` is 1 to
 * WEFT_WRITE_COALESCE_MAX, and the queue's own tail buffer is open for
 * copies (from the second small write of a run not yet flushed, until a
 * flush, a larger write, or a write with a callback promise). Then the
 * bytes are copied straight into that buffer: no buffer is allocated and
 * no handler runs, which is what makes many small writes cheap (Redis'
 * _addReplyToBuffer does the same for its replies). Pass
 * WEFT_PROMISE_NONE to stay in it: a callback promise ends the run.
 * Otherwise a buffer of `len` bytes is allocated from the loop's pool,
 * filled and written. Loop thread.
 */
void weft_channel_write_bytes(weft_channel *ch, const void *data, size_t len,
                              weft_promise promise);

/** Flushes everything written so far (from the tail of the pipeline). */
void weft_channel_flush(weft_channel *ch);

/** weft_channel_write() then weft_channel_flush(). */
void weft_channel_write_and_flush(weft_channel *ch, void *msg,
                                  weft_promise promise);

/**
 * Closes the channel (from the tail of the pipeline). Queued writes that
 * were not flushed fail with WEFT_ECLOSED; channel_inactive fires; the
 * promise completes with 0 once CLOSED. Closing a closed channel completes
 * the promise with 0 at once.
 */
void weft_channel_close(weft_channel *ch, weft_promise promise);

/**
 * Half-close: flushes, then shuts down the sending side (TCP FIN); reads
 * go on until the peer closes. The promise reports the shutdown result;
 * WEFT_ENOTSUP where the transport has no half-close.
 */
void weft_channel_shutdown_output(weft_channel *ch, weft_promise promise);

/**
 * Sets an option. Returns 0, WEFT_EINVAL (bad value, e.g. a low watermark
 * above the high one), WEFT_ENOTSUP (the transport has no such option), or
 * the system error.
 */
int weft_channel_set_option(weft_channel *ch, weft_channel_option opt,
                            int64_t value);

/** Reads an option into `*value`. Returns 0 or WEFT_ENOTSUP. */
int weft_channel_get_option(const weft_channel *ch, weft_channel_option opt,
                            int64_t *value);

/** The user's pointer (NULL until set). */
void *weft_channel_user_data(const weft_channel *ch);
void weft_channel_set_user_data(weft_channel *ch, void *data);

/** Adds a reference. Any thread holding one. Returns `ch`. */
weft_channel *weft_channel_retain(weft_channel *ch);

/**
 * Drops a reference; the last one frees the channel on its loop (from
 * another thread, the free is queued to the loop). Any thread holding one.
 */
void weft_channel_release(weft_channel *ch);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_CHANNEL_H */
