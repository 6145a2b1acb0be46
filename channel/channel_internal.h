/* SPDX-License-Identifier: Apache-2.0 */
/* Internal layout of channels, pipelines and listeners (channel/). */
#ifndef WEFT_CHANNEL_CHANNEL_INTERNAL_H
#define WEFT_CHANNEL_CHANNEL_INTERNAL_H

#include <assert.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include <weft/bootstrap.h>
#include <weft/channel.h>
#include <weft/file_region.h>
#include <weft/pipeline.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

/* One handler instance in a pipeline. */
struct weft_ctx {
  weft_pipeline *pipeline;
  weft_ctx *prev, *next; /* a removed ctx keeps them: forwarding goes on */
  const weft_handler *handler;
  void *state;
  char *name;
  bool removed;
  weft_ctx *graveyard_next; /* removed, freed when no event is running */
};

struct weft_pipeline {
  weft_channel *channel;
  weft_ctx head, tail; /* sentinels: head talks to the transport */
  int depth;           /* nesting of events running now */
  weft_ctx *graveyard; /* removed contexts waiting for depth 0 */
};

/* One written message waiting in the outbound queue: a buffer, or (on a
 * transport with WEFT_TRANSPORT_CAP_FILE_REGION) a file region, `buf` then
 * NULL. */
typedef struct weft__outbound_entry {
  weft_buf *buf;
  weft_file_region *region; /* NULL for a buffer */
  weft_promise promise;
  bool own; /* `buf` is the queue's own, small writes copied into it */
} weft__outbound_entry;

/* The outbound queue: a growable ring of entries. Entries [head, flushed)
 * are flushed (the transport may send them), [flushed, tail) are written
 * but not yet flushed. Indices grow without wrapping; slot = index & mask. */
typedef struct weft__outbound {
  weft__outbound_entry *ring;
  size_t mask; /* capacity - 1 (capacity is a power of two) */
  size_t head, flushed, tail;
  size_t pending_bytes; /* readable bytes in all entries, plus pinned */
  size_t pinned_bytes;  /* sent, but the transport still holds their
                           memory (weft_outbound_pinned) */
  size_t regions;       /* file regions among the entries */
  size_t low, high;     /* write watermarks in bytes */
  bool writable;
  /* The append window: the free bytes of the queue's own buffer
   * (append_buf) at the tail entry while small writes may be copied there
   * (outbound.c, above adopt_tail, says when): append_left bytes from
   * append_at. Closed: append_buf NULL, append_left 0. append_at is
   * always weft_buf_wptr(append_buf); it is kept because deriving it per
   * write measured 1 ns more (weft-microbench write_bytes, 6.6 ns
   * against 5.7). */
  uint8_t *append_at;
  size_t append_left;
  weft_buf *append_buf;
} weft__outbound;

/* Hooks an embedded channel sets to see what reaches the tail; NULL on
 * network channels. */
typedef struct weft__tail_hooks {
  bool (*read)(weft_channel *ch, void *msg); /* true = kept */
  void (*exception)(weft_channel *ch, int err);
} weft__tail_hooks;

typedef struct weft__close_waiter {
  weft_promise promise;
  struct weft__close_waiter *next;
} weft__close_waiter;

/* What a server shares with the channels it accepted: the count of those
 * open, and what refused ones get (the bootstrap's reject_init, then the
 * bytes). Freed by the last holder (the server may close before its
 * channels). */
typedef struct weft__conn_count {
  _Atomic int live;                 /* counted channels open now */
  _Atomic int refs;                 /* the server's, and one per channel */
  weft_channel_init_cb reject_init; /* the bootstrap's, or NULL */
  size_t reject_len; /* bytes of reject[]; 0 = close refused at once */
  char reject[];     /* the server's reject_message */
} weft__conn_count;

/* A channel's defences (limits.c): flow control, output limit, idle
 * timeout. Loop thread. */
typedef struct weft__limits {
  bool flow_control;        /* pause reading above the high watermark */
  bool read_paused;         /* paused by flow control now */
  bool read_yielded;        /* weft_channel_yield_read: until the resume */
  bool resume_queued;       /* a resume task is on the loop */
  bool output_hit;          /* the output limit fired once */
  size_t output_limit;      /* bytes; 0 = none */
  size_t output_hit_bytes;  /* queued and unsent when it fired: the log's
                               figure (by the close some may have left) */
  uint64_t idle_timeout_ns; /* 0 = never */
  weft_timer idle_timer;    /* ticks every idle_timeout_ns / 4 */
  uint32_t activity;        /* reads and sends so far (wraps) */
  uint32_t activity_seen;   /* `activity` at the last idle tick */
  uint8_t idle_ticks;       /* ticks in a row without either */
  weft__conn_count *count;  /* the server's share, if it holds one */
  bool counted;             /* counted in count->live */
} weft__limits;

struct weft_channel {
  const weft_transport_ops *transport;
  weft_loop *loop;
  weft_pipeline pipeline;
  _Atomic uint32_t refcnt;
  weft_channel_state state;
  uint64_t id;
  void *user_data;
  weft__outbound out;
  weft__limits limits;
  bool auto_read;
  weft_read_budget read_budget; /* per loop iteration (transport_plugin.h) */
  int64_t connect_timeout_ms;
  weft_timer connect_timer;
  weft_connect_cb on_connect;
  void *connect_arg;
  weft__close_waiter *close_waiters;
  const weft__tail_hooks *tail_hooks;
  weft_channel *loop_prev, *loop_next; /* the loop's open channels */
  bool free_pending; /* the last reference went inside a pipeline event */
  alignas(max_align_t) unsigned char priv[];
};

struct weft_listener {
  const weft_transport_ops *transport;
  weft_loop *loop;
  weft_server *server;
  void *priv;
  int index;               /* among its server's listeners; 0: the server's own
                              address, on loop 0 */
  bool accept_local;       /* adopt on `loop`, not round-robin (a listener per
                              loop: WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP) */
  char address[280];       /* bound address (listen_address), set once at bind,
                              published by the server's n_bound */
  uint64_t refused;        /* refused since the last log line; its loop */
  uint64_t refused_log_ns; /* when that line was written */
};

/**
 * Allocates a REGISTERED channel of `transport` on `loop` with an empty
 * pipeline, one reference held by the channel itself, options at their
 * defaults. Returns NULL on ENOMEM or when the transport's per-loop
 * instance cannot start (`*err` says why). Loop thread.
 */
weft_channel *weft__channel_new(const weft_transport_ops *transport,
                                weft_loop *loop, int *err);

/** Frees the channel's memory (its last reference is gone). Loop thread. */
void weft__channel_free(weft_channel *ch);

/** Makes a REGISTERED channel ACTIVE and fires channel_active. */
void weft__channel_activate(weft_channel *ch);

/** Starts the connect timeout (WEFT_OPT_CONNECT_TIMEOUT_MS), if any. */
int weft__channel_start_connect_timer(weft_channel *ch);

/** Closes the channel (what the head does for close). */
void weft__channel_close(weft_channel *ch, weft_promise promise);

/* Limits (limits.c). */
/** Sets WEFT_OPT_FLOW_CONTROL, OUTPUT_LIMIT or IDLE_TIMEOUT_MS. */
int weft__limits_set(weft_channel *ch, weft_channel_option opt, int64_t v);
/** Reads one of them; returns 0, or WEFT_ENOTSUP for another option. */
int weft__limits_get(const weft_channel *ch, weft_channel_option opt,
                     int64_t *v);
/** The writability just changed: pause or resume reading (flow control). */
void weft__limits_writability(weft_channel *ch, bool writable);
/** The queue just passed the output limit: the channel closes (from a
 *  task, not inside the write). weft__limits_queued's slow part. */
void weft__limits_output_exceeded(weft_channel *ch);
/** Bytes were queued: past the output limit, the channel closes (from a
 *  task, not inside the write). Inline, as it runs on every write: a
 *  channel without a limit, or within it, pays a compare or two. */
static inline void weft__limits_queued(weft_channel *ch) {
  const weft__limits *l = &ch->limits;
  if (l->output_limit != 0 && ch->out.pending_bytes > l->output_limit &&
      !l->output_hit)
    weft__limits_output_exceeded(ch);
}
/** True once the output limit was crossed: further writes are refused. */
static inline bool weft__limits_refuse_write(const weft_channel *ch) {
  return ch->limits.output_hit;
}
/** The channel became ACTIVE: starts the idle timer, if any. */
void weft__limits_activate(weft_channel *ch);
/** The channel is closing: stops timers, leaves the server's count. */
void weft__limits_close(weft_channel *ch);
/** Drops one reference to a server's share (frees it with the last). */
void weft__conn_count_release(weft__conn_count *c, bool counted);
/** Effective reading (auto-read and not paused) changed to `on`. */
int weft__channel_apply_read(weft_channel *ch, bool on);

/** weft_ctx_write_bytes' fast path: copies the bytes into the append
 *  window when the next writer from `ctx` is the head and the channel is
 *  open. Returns false, changing nothing, otherwise. Loop thread. */
bool weft__pipeline_write_bytes_fast(weft_ctx *ctx, const void *data,
                                     size_t len, weft_promise promise);
/** weft_ctx_write_bytes' general path: a buffer of `len` bytes, filled and
 *  written from `ctx` (WEFT_ENOMEM, or WEFT_EINVAL for data NULL with len >
 *  0, completes the promise instead). Loop thread. */
void weft__pipeline_write_bytes_slow(weft_ctx *ctx, const void *data,
                                     size_t len, weft_promise promise);

/** Initialises / tears down a pipeline (tear down calls handler_removed on
 *  every handler, tail to head). */
void weft__pipeline_init(weft_pipeline *p, weft_channel *ch);
void weft__pipeline_destroy(weft_pipeline *p);

/* Outbound queue (outbound.c). */
void weft__outbound_init(weft__outbound *o);
/** weft__outbound_add's general case: also the first small write of a
 *  run (which starts the queue's own buffer, then appends) and every other
 *  write. */
int weft__outbound_add_slow(weft_channel *ch, weft_buf *buf, weft_promise p);
/** Pending bytes crossed a watermark: sets `writable` and fires
 *  writability_changed (outbound.c). */
void weft__outbound_set_writable(weft_channel *ch, bool writable);

/** Updates writability after pending bytes changed: above high ->
 *  unwritable, below low -> writable again (hysteresis). Inline: every
 *  write asks, and almost every answer is "no change". */
static inline void weft__outbound_update_writability(weft_channel *ch) {
  const weft__outbound *o = &ch->out;
  if (o->writable ? o->pending_bytes > o->high : o->pending_bytes < o->low)
    weft__outbound_set_writable(ch, !o->writable);
}

/** Closes the append window: the tail entry no longer takes copies (it
 *  was flushed, has a promise, or is no longer the tail). */
static inline void weft__outbound_close_window(weft__outbound *o) {
  o->append_at = NULL;
  o->append_left = 0;
  o->append_buf = NULL;
}

/** Copies `n` (1 to WEFT_WRITE_COALESCE_MAX) bytes at `data` into the append
 *  window, gives the tail entry `p` (which closes the window: the entry's
 *  promise cannot wait for later bytes) and counts the bytes as pending.
 *  Returns false, changing nothing, when the window is closed or too small
 *  or `n` is 0 (an empty write stays an entry of its own, completed with
 *  the next consume). Inline: the per-write path of a stream of small
 *  writes. Loop thread. */
static inline bool weft__outbound_append_bytes(weft_channel *ch,
                                               const void *data, size_t n,
                                               weft_promise p) {
  weft__outbound *o = &ch->out;
  /* n - 1 wraps for 0, so one compare refuses both 0 and "no room". */
  if (n > WEFT_WRITE_COALESCE_MAX || n - 1 >= o->append_left)
    return false;
  assert(o->append_buf == o->ring[(o->tail - 1) & o->mask].buf &&
         o->flushed != o->tail && o->append_at == weft_buf_wptr(o->append_buf));
  if (n >= 8 && n <= 16) { /* two overlapping words: no call to memcpy */
    memcpy(o->append_at, data, 8);
    memcpy(o->append_at + n - 8, (const uint8_t *)data + n - 8, 8);
  } else {
    memcpy(o->append_at, data, n);
  }
  o->append_at += n;
  o->append_left -= n;
  o->append_buf->writer_index += n;
  o->pending_bytes += n;
  if (p.cb != NULL) {
    o->ring[(o->tail - 1) & o->mask].promise = p;
    weft__outbound_close_window(o);
  }
  return true;
}

/** Queues a copy of `n` bytes at `data` where weft__outbound_append_bytes
 *  applies and the output limit was not crossed, then checks the limit
 *  and updates writability, in that order, as every write does: the
 *  writability change runs handlers, which may close the channel and drop
 *  its last reference, so nothing here touches it after them, and neither
 *  may a caller after a true return. Returns false, changing nothing,
 *  otherwise: the caller then writes a buffer of its own (the general
 *  path). Loop thread. */
static inline bool weft__outbound_add_bytes(weft_channel *ch, const void *data,
                                            size_t n, weft_promise p) {
  if (weft__limits_refuse_write(ch) ||
      !weft__outbound_append_bytes(ch, data, n, p))
    return false;
  weft__limits_queued(ch);
  weft__outbound_update_writability(ch);
  return true;
}

/** Queues `buf`; returns 0, WEFT_ENOMEM, or WEFT_ENOBUFS past the output
 *  limit (the caller fails the promise and releases `buf`). Inline is the
 *  common case, a small write copied into the append window
 *  (weft__outbound_add_bytes; `buf` is then released); anything else goes
 *  to weft__outbound_add_slow. Loop thread. */
static inline int weft__outbound_add(weft_channel *ch, weft_buf *buf,
                                     weft_promise p) {
  if (!weft__outbound_add_bytes(ch, weft_buf_rptr(buf), weft_buf_readable(buf),
                                p))
    return weft__outbound_add_slow(ch, buf, p);
  weft_buf_release(buf); /* its bytes live in the queue's buffer now */
  return 0;
}
/** Queues file region `r` (the transport has WEFT_TRANSPORT_CAP_FILE_REGION):
 *  its bytes left count as pending, as a buffer's would. Returns 0,
 *  WEFT_ENOMEM, or WEFT_ENOBUFS past the output limit (the caller fails
 *  the promise and releases `r`). Loop thread. */
int weft__outbound_add_region(weft_channel *ch, weft_file_region *r,
                              weft_promise p);
/** Counts `bytes` of file regions sent by a transport (file_region.c). */
void weft__file_region_count_sent(uint64_t bytes);
/** Marks everything written so far as flushed (closes the window). */
void weft__outbound_mark_flushed(weft__outbound *o);
/** Fails every entry with `err` (buffers released, promises completed). */
void weft__outbound_fail_all(weft_channel *ch, int err);
void weft__outbound_destroy(weft__outbound *o);

#endif
