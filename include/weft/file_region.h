/* SPDX-License-Identifier: Apache-2.0 */
/* weft/file_region.h: a region of a file, written down a pipeline like any
 * outbound message (Netty's FileRegion / DefaultFileRegion).
 *
 * A handler (or weft_channel_write) writes a weft_file_region where it
 * would write a weft_buf holding the same bytes: `count` bytes of file
 * `fd` from byte `position` on. Where the transport can send from a file
 * (WEFT_TRANSPORT_CAP_FILE_REGION: tcp, with sendfile(2)) and every
 * outbound handler on the way says it takes regions
 * (weft_handler.file_regions), the region reaches the outbound queue as
 * it is and its bytes go from the page cache to the socket without
 * passing through user memory. Anywhere else the pipeline reads the
 * region's bytes with pread(2) into weft_bufs of up to 64 KiB, in order,
 * and writes those instead, right before the first handler (or the head)
 * that cannot take the region: the TLS handler, which must see the bytes
 * it encrypts, and the uring, ucx and verbs transports get buffers.
 * docs/architecture.md, "File regions", says why it is done there.
 *
 * Accounting: a queued region counts its unsent bytes as pending bytes
 * (weft_channel_pending_bytes) exactly as a buffer of that size would, so
 * the write watermarks, flow control and the output limit hold. A writer
 * of a large file therefore writes it in pieces as the channel stays
 * writable (weft-http: 1 MiB regions), as it would with buffers.
 *
 * Ownership: a region is a message (weft/msg.h); writing it passes it on,
 * and whoever holds it last releases it (weft_file_region_release, or
 * weft_msg_release). It never owns the file's data, only, with
 * WEFT_FILE_REGION_CLOSE_FD, the descriptor. Without that flag the caller
 * keeps `fd` open until the region is released: the pipeline releases a
 * written region before its write's promise completes (sent, failed, or
 * the channel closed: queued regions are released before channel_inactive
 * fires), so closing the descriptor in the promise's callback, in
 * channel_inactive or in handler_removed is safe.
 *
 * Errors: the file must hold the region's bytes while they are sent. If it
 * turns out shorter (it shrank under us: pread or sendfile returns 0
 * before `count`), the write's promise fails with WEFT_EIO and the channel
 * closes through exception_caught with a reason naming the file and the
 * bytes missing, which the tail logs; a read error likewise with its
 * error. Never the process, never a hang.
 *
 * Threads: a region belongs to the thread that holds it; once written, to
 * the channel's loop thread. weft_file_region_stats_get: any thread.
 */
#ifndef WEFT_FILE_REGION_H
#define WEFT_FILE_REGION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>
#include <weft/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_ctx weft_ctx; /* pipeline.h */

/** A region of a file. Fields read-only once made; `transferred` is
 *  advanced by whoever sends or reads the region. */
typedef struct weft_file_region {
  weft_msg msg;         /* private: the message header */
  int fd;               /* read-only: the file, open for reading */
  uint64_t position;    /* read-only: the file offset of the first byte */
  uint64_t count;       /* read-only: bytes in the region */
  uint64_t transferred; /* read-only: bytes sent (or read) so far */
  bool close_fd;        /* read-only: release closes `fd` */
} weft_file_region;

/** The message type of weft_file_region: weft_msg_is(msg,
 *  &weft_file_region_type) tells a region from other messages. */
extern const weft_msg_type weft_file_region_type;

/** Flag of weft_file_region_new: the region owns `fd` and closes it when
 *  it is released (also when it is not written, or fails). */
#define WEFT_FILE_REGION_CLOSE_FD 0x1u

/**
 * Makes a region of `count` bytes of file `fd` from byte `position` on,
 * into `*out` (one reference: the caller's). `flags` is 0 or
 * WEFT_FILE_REGION_CLOSE_FD. The file is not read nor checked here: a
 * file shorter than the region fails the write (file comment). Returns 0,
 * WEFT_EINVAL (fd negative, unknown flags, or position + count past
 * INT64_MAX, the largest offset pread takes) or WEFT_ENOMEM; on an error
 * nothing is made, and `fd` is left open even with
 * WEFT_FILE_REGION_CLOSE_FD. Any thread.
 */
int weft_file_region_new(weft_file_region **out, int fd, uint64_t position,
                         uint64_t count, unsigned flags);

/** Drops the region (closing its fd with WEFT_FILE_REGION_CLOSE_FD). A
 *  region has one reference, so this frees it. NULL is ignored. */
void weft_file_region_release(weft_file_region *r);

/** Bytes of `r` not yet sent or read: count - transferred. */
static inline uint64_t weft_file_region_left(const weft_file_region *r) {
  return r->count - r->transferred;
}

/**
 * Reads the next up to `max` bytes of `r` (from position + transferred,
 * with pread: the descriptor's own offset is neither used nor moved) into
 * a new buffer from `pool` (at most WEFT_POOL_MAX_CLASS bytes, whatever
 * `max` says) and advances `transferred` by what was read. `*out` gets the
 * buffer (the caller's reference; empty when nothing is left). Returns
 * 0; WEFT_EIO when the file ends before the region does (it shrank);
 * WEFT_ENOMEM; or pread's error. On an error `*out` is NULL and
 * `transferred` unchanged. What the pipeline does for a transport or
 * handler that cannot take the region; a handler may call it too. Loop
 * thread of `pool`.
 */
int weft_file_region_read(weft_file_region *r, weft_pool *pool, size_t max,
                          weft_buf **out);

/**
 * Writes why a transfer of `r` failed with `err` into `buf` (`size` bytes,
 * NUL-terminated, cut short if need be), for the log reason a channel
 * closes with (weft_channel_transport_closed,
 * weft_outbound_file_region_failed): `what` (the call that failed, such as
 * "sendfile" or "pread"), the fd, the file offset it reached (position +
 * transferred), the bytes left, and for WEFT_EIO, a read that found the
 * file's end before the region's, the hint that the file shrank. One
 * wording for the transports and the pipeline's read path. Returns `buf`.
 * Any thread (it reads `r` only).
 */
const char *weft_file_region_failure(char *buf, size_t size,
                                     const weft_file_region *r,
                                     const char *what, int err);

/**
 * True when a region written from `ctx` (weft_ctx_write) reaches the
 * transport as it is and is sent from the file: every outbound handler
 * between `ctx` and the head takes regions (weft_handler.file_regions) and
 * the transport has WEFT_TRANSPORT_CAP_FILE_REGION. False where the
 * pipeline would read it into buffers: a writer may then size its regions
 * as it sizes buffers (the whole region is read at once). Costs a walk of
 * the handlers towards the head. Loop thread.
 */
bool weft_ctx_file_region_direct(weft_ctx *ctx);

/** Process-wide counts of region bytes, for evidence of which path ran. */
typedef struct weft_file_region_stats {
  uint64_t sent_bytes; /* sent by a transport straight from the file
                          (sendfile): WEFT_TRANSPORT_CAP_FILE_REGION */
  uint64_t read_bytes; /* read into buffers (weft_file_region_read): the
                          path of other transports and handlers */
} weft_file_region_stats;

/** Reads the counts since the process started (each read whole; not a
 *  consistent cut). Any thread. */
void weft_file_region_stats_get(weft_file_region_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_FILE_REGION_H */
