/* SPDX-License-Identifier: Apache-2.0 */
/* The outbound queue of a channel (Netty's ChannelOutboundBuffer): written
 * buffers with their promises, the flushed mark, pending bytes and the
 * write watermarks. Transports read it through weft_outbound_*. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

#include "channel/channel_internal.h"

#define INITIAL_SLOTS 16

void weft__outbound_init(weft__outbound *o) {
  memset(o, 0, sizeof *o);
  o->low = WEFT_WRITE_LOW_WATERMARK_DEFAULT;
  o->high = WEFT_WRITE_HIGH_WATERMARK_DEFAULT;
  o->writable = true;
}

static weft__outbound_entry *slot(const weft__outbound *o, size_t i) {
  return &o->ring[i & o->mask];
}

/* Bytes of an entry still to send: a buffer's readable bytes, a file
 * region's bytes left. */
static size_t entry_left(const weft__outbound_entry *e) {
  return e->region != NULL ? (size_t)weft_file_region_left(e->region)
                           : weft_buf_readable(e->buf);
}

/* Doubles the ring, copying live entries so index i keeps slot i & mask. */
static int grow(weft__outbound *o) {
  size_t cap = o->ring == NULL ? INITIAL_SLOTS : (o->mask + 1) * 2;
  weft__outbound_entry *ring = malloc(cap * sizeof *ring);
  if (ring == NULL)
    return WEFT_ENOMEM;
  for (size_t i = o->head; i != o->tail; i++)
    ring[i & (cap - 1)] = *slot(o, i);
  free(o->ring);
  o->ring = ring;
  o->mask = cap - 1;
  return 0;
}

/* Fires writability_changed: pending bytes crossed a watermark (above
 * high -> unwritable, below low -> writable again; the inline
 * weft__outbound_update_writability decides). */
void weft__outbound_set_writable(weft_channel *ch, bool writable) {
  ch->out.writable = writable;
  weft__limits_writability(ch, writable);
  weft_pipeline_fire_writability_changed(&ch->pipeline, writable);
}

/* Small writes are copied into a buffer of the queue's own at its tail,
 * as Netty's and nginx's chained output buffers do for tiny writes: a
 * flush of many 16 B messages is then one iovec, one queue entry and one
 * buffer to complete, not one each. Only on byte streams (a message
 * transport keeps each write a message of its own), only into entries not
 * flushed yet (nothing may change under a send in flight), and only where
 * the tail entry's promise, if any, can wait for the new bytes (it has
 * none: the merged entry takes the new write's promise). While all of
 * that holds, the buffer's free bytes are the queue's append window
 * (weft__outbound_append_bytes): adopt_tail opens it, and a promise, a
 * flush or another entry closes it. Writes of up to
 * WEFT_WRITE_COALESCE_MAX bytes (weft/channel.h) are copied. */
#define COALESCE_BUF 16384 /* bytes: the queue's own buffer (a pool class) */

/* Where small `buf` could be merged but the unflushed tail entry holds
 * the writer's own small buffer: moves its bytes into a buffer of the
 * queue's, which weft__outbound_add_bytes then copies small writes into
 * (it opens the append window).
 * Once per run of small writes, so out of line. */
static __attribute__((noinline)) void adopt_tail(weft_channel *ch,
                                                 const weft_buf *buf) {
  weft__outbound *o = &ch->out;
  if (weft_buf_readable(buf) > WEFT_WRITE_COALESCE_MAX ||
      o->tail == o->flushed ||
      !(ch->transport->caps & WEFT_TRANSPORT_CAP_STREAM))
    return;
  weft__outbound_entry *last = slot(o, o->tail - 1);
  if (last->region != NULL)
    return; /* a file region takes no copies */
  size_t have = weft_buf_readable(last->buf);
  if (last->own || last->promise.cb != NULL || have > WEFT_WRITE_COALESCE_MAX)
    return;
  weft_buf *own = weft_buf_alloc(weft_loop_pool(ch->loop), COALESCE_BUF);
  if (own == NULL)
    return; /* not merged: queued as an entry of its own */
  weft_buf_write_bytes(own, weft_buf_rptr(last->buf), have);
  weft_buf_release(last->buf);
  last->buf = own;
  last->own = true;
  o->append_buf = own;
  o->append_at = weft_buf_wptr(own);
  o->append_left = weft_buf_writable(own);
}

int weft__outbound_add_slow(weft_channel *ch, weft_buf *buf, weft_promise p) {
  weft__outbound *o = &ch->out;
  if (weft__limits_refuse_write(ch))
    return WEFT_ENOBUFS; /* past the output limit: closing */
  adopt_tail(ch, buf);
  if (weft__outbound_add_bytes(ch, weft_buf_rptr(buf), weft_buf_readable(buf),
                               p)) {
    weft_buf_release(buf); /* its bytes live in the queue's buffer now */
    return 0;
  }
  if ((o->ring == NULL || o->tail - o->head > o->mask) && grow(o) < 0)
    return WEFT_ENOMEM;
  weft__outbound_close_window(o); /* the tail moves on */
  *slot(o, o->tail++) = (weft__outbound_entry){.buf = buf, .promise = p};
  o->pending_bytes += weft_buf_readable(buf);
  weft__limits_queued(ch);
  weft__outbound_update_writability(ch); /* last: it runs handlers */
  return 0;
}

/* A region is queued as it is: the transport sends it from the file.
 * Its bytes count as pending exactly as a buffer of that size would, so
 * the watermarks and the output limit see no difference. */
int weft__outbound_add_region(weft_channel *ch, weft_file_region *r,
                              weft_promise p) {
  weft__outbound *o = &ch->out;
  if (weft__limits_refuse_write(ch))
    return WEFT_ENOBUFS; /* past the output limit: closing */
  if ((o->ring == NULL || o->tail - o->head > o->mask) && grow(o) < 0)
    return WEFT_ENOMEM;
  weft__outbound_close_window(o); /* the tail moves on */
  *slot(o, o->tail++) = (weft__outbound_entry){.region = r, .promise = p};
  o->regions++;
  o->pending_bytes += (size_t)weft_file_region_left(r);
  weft__limits_queued(ch);
  weft__outbound_update_writability(ch); /* last: it runs handlers */
  return 0;
}

void weft__outbound_mark_flushed(weft__outbound *o) {
  weft__outbound_close_window(o); /* nothing may change under a send */
  o->flushed = o->tail;
}

bool weft_outbound_is_empty(const weft_channel *ch) {
  return ch->out.head == ch->out.flushed;
}

size_t weft_outbound_count(const weft_channel *ch) {
  return ch->out.flushed - ch->out.head;
}

weft_buf *weft_outbound_buf(const weft_channel *ch, size_t i) {
  return i < weft_outbound_count(ch) ? slot(&ch->out, ch->out.head + i)->buf
                                     : NULL;
}

int weft_outbound_iov(weft_channel *ch, struct iovec *iov, int max,
                      size_t *bytes) {
  const weft__outbound *o = &ch->out;
  int n = 0;
  size_t total = 0;
  for (size_t i = o->head; i != o->flushed && n < max; i++) {
    const weft__outbound_entry *e = slot(o, i);
    size_t len = entry_left(e);
    if (len == 0)
      continue; /* an empty write completes with the next consume */
    if (e->region != NULL)
      break; /* its bytes are in a file: weft_outbound_file_region */
    weft_buf *b = e->buf;
    iov[n++] = (struct iovec){.iov_base = weft_buf_rptr(b), .iov_len = len};
    total += len;
  }
  *bytes = total;
  return n;
}

/* Completes and removes the head entry. The promise runs after the entry
 * left the queue, so a callback that writes again sees a consistent one. */
static weft__outbound_entry take_head(weft__outbound *o) {
  weft__outbound_entry e = *slot(o, o->head++);
  if (o->flushed < o->head)
    o->flushed = o->head;
  o->pending_bytes -= entry_left(&e);
  if (e.region != NULL)
    o->regions--;
  return e;
}

/* Releases a removed entry's message, then completes its promise. */
static void finish_entry(weft__outbound_entry e, int status) {
  if (e.region != NULL)
    weft_file_region_release(e.region); /* before the promise: see
                                           weft/file_region.h */
  else
    weft_buf_release(e.buf);
  weft_promise_complete(e.promise, status);
}

static void complete_head(weft_channel *ch, int status) {
  finish_entry(take_head(&ch->out), status);
}

/* The count of queued regions spares the walk of the queue on the
 * sends of a channel that has none (the common case, on every send). */
const weft_file_region *weft_outbound_file_region(const weft_channel *ch) {
  const weft__outbound *o = &ch->out;
  if (o->regions == 0)
    return NULL;
  for (size_t i = o->head; i != o->flushed; i++) {
    const weft__outbound_entry *e = slot(o, i);
    if (e->region != NULL && entry_left(e) > 0)
      return e->region;
  }
  return NULL;
}

void weft_outbound_file_region_failed(weft_channel *ch, int err,
                                      const char *reason) {
  weft__outbound *o = &ch->out;
  /* The empty entries before the region go as a consume of 0 would take
   * them (their promises may close the channel). */
  while (o->head != o->flushed && entry_left(slot(o, o->head)) == 0 &&
         ch->state == WEFT_CHANNEL_ACTIVE)
    complete_head(ch, 0);
  if (o->head == o->flushed || slot(o, o->head)->region == NULL) {
    weft_channel_transport_closed(ch, err, reason);
    return;
  }
  /* The region leaves the queue first, so that the close fails the
   * entries after it with WEFT_ECLOSED and its own promise gets `err`;
   * the reason is fired (and logged) before any promise can close the
   * channel quietly. */
  weft__outbound_entry e = take_head(o);
  weft_channel_transport_closed(ch, err, reason);
  finish_entry(e, err);
}

void weft_outbound_consumed(weft_channel *ch, size_t bytes) {
  weft__outbound *o = &ch->out;
  if (bytes > 0)
    ch->limits.activity++; /* a peer that reads replies is not idle */
  while (o->head != o->flushed) {
    weft__outbound_entry *e = slot(o, o->head);
    size_t len = entry_left(e);
    if (e->region != NULL)
      weft__file_region_count_sent(len < bytes ? len : bytes);
    if (len > bytes) { /* partly sent: the rest goes next time */
      if (e->region != NULL)
        e->region->transferred += bytes;
      else
        e->buf->reader_index += bytes;
      o->pending_bytes -= bytes;
      break;
    }
    bytes -= len;
    complete_head(ch, 0);
  }
  weft__outbound_update_writability(ch);
}

/* Pinned bytes stay in pending_bytes, so the watermarks and the output
 * limit see them as they see queued ones: a peer that never reads keeps a
 * zero-copy send's buffers pinned exactly as it keeps queued buffers. */
void weft_outbound_pinned(weft_channel *ch, size_t bytes) {
  weft__outbound *o = &ch->out;
  o->pinned_bytes += bytes;
  o->pending_bytes += bytes;
  weft__limits_queued(ch); /* writability: the consumed that follows */
}

void weft_outbound_unpinned(weft_channel *ch, size_t bytes) {
  weft__outbound *o = &ch->out;
  assert(bytes <= o->pinned_bytes); /* the transport pinned them first */
  o->pinned_bytes -= bytes;
  o->pending_bytes -= bytes;
  if (ch->state == WEFT_CHANNEL_ACTIVE) /* closing: no more events */
    weft__outbound_update_writability(ch);
}

void weft__outbound_fail_all(weft_channel *ch, int err) {
  weft__outbound *o = &ch->out;
  weft__outbound_mark_flushed(o);
  while (o->head != o->tail)
    complete_head(ch, err);
  /* No writability event here: the channel is closing. */
}

void weft__outbound_destroy(weft__outbound *o) {
  weft__outbound_close_window(o);
  free(o->ring);
  o->ring = NULL;
}
