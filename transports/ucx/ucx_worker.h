/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/ucx_worker.h: the UCX plugin's per-loop level: the
 * instance (ucx_loop) around the loop's ucp_worker, with its channel table
 * (slots), its pending list of channels with work from UCX callbacks, the
 * requests in flight (ucx_op), and the free lists of send contexts and
 * queue entries (loop.c).
 *
 * Separate from the endpoint header because it is the loop's glue, the
 * one place that knows the worker, the source fd and the loop's books;
 * the per-channel types it points at are only declared here. */
#ifndef WEFT_TRANSPORTS_UCX_UCX_WORKER_H
#define WEFT_TRANSPORTS_UCX_UCX_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include <weft/buf.h>
#include <weft/source.h>
#include <weft/timer.h>

#include "transports/ucx/ucx_context.h"

typedef struct ucx_loop ucx_loop;
typedef struct ucx_channel ucx_channel;
/* Defined in ucx_endpoint.h (ucx_epr, rq_entry, ucx_send) and
 * ucx_listener.h (ucx_listener, ucx_preconn, ucx_accept). */
typedef struct ucx_epr ucx_epr;
typedef struct rq_entry rq_entry;
typedef struct ucx_send ucx_send;
typedef struct ucx_listener ucx_listener;
typedef struct ucx_preconn ucx_preconn;
struct ucx_accept;

/* A UCX request whose callback has not run yet (a send, or a rendezvous
 * receive) and the pool buffer it reads or writes. The loop lists them all,
 * so that loop_fini can wait for them before it destroys the worker, and
 * give back the buffers of those that never end. First member of the
 * struct it is part of (ucx_send, rq_entry). */
typedef struct ucx_op {
  struct ucx_op *prev, *next;
  ucx_loop *tl;
  ucx_epr *epr;   /* its ep; NULL once that was closed */
  void *req;      /* NULL: not listed (completed at once, or not sent yet);
                     never an error status (UCS_PTR_IS_PTR checked) */
  bool cancelled; /* loop_fini asked UCX to cancel it */
  weft_buf **bp;  /* the buffer to give back if the request never ends */
} ucx_op;

typedef struct ucx_slot {
  ucx_channel *uc; /* NULL = free */
  uint32_t gen;
  uint32_t next_free;
} ucx_slot;

struct ucx_loop {
  weft_loop *loop;
  weft_source source;
  ucp_worker_h worker;
  ucx_settings cfg;
  ucx_slot *slots;
  uint32_t n_slots;
  uint32_t free_head, free_tail; /* FIFO of free slots; UINT32_MAX = none */
  uint32_t n_free;
  ucx_channel *pend_head, *pend_tail;
  size_t n_pend;
  void **closing; /* ucp_ep_close_nbx requests in flight */
  size_t n_closing, cap_closing;
  /* The ep records by ep (chained hash, a power of two of buckets): UCX
   * tells which ep a message (reply_ep) or an error came on, and that, not
   * the slot a message names, says whose it is. */
  ucx_epr **ep_buckets;
  size_t ep_mask;   /* buckets - 1 */
  size_t n_indexed; /* records in the index */
  ucx_listener *listeners;
  ucx_op *ops; /* requests in flight */
  size_t n_ops;
  ucx_epr *lingering;    /* closed channels' eps with requests in flight, or
                            waiting for the peer's disconnect */
  ucx_preconn *preconns; /* held by a listener until their HELLO */
  size_t n_preconns;
  bool preconn_hello; /* a HELLO arrived for one of them */
  weft_timer tick;    /* keepalive, lingering and redirect deadlines */
  size_t live_wraps;  /* UCX receive descriptors held by weft_bufs */
  /* Eps kept open with a HELLO nobody answered (error_mode = none): UCX
   * 1.13 aborts when ucp_worker_destroy meets them, so the worker is then
   * kept at loop stop (logged). */
  size_t n_unanswered;
  size_t n_awaiting; /* accepted channels waiting for their HELLO */
  uint64_t drains;   /* polls whose progress ran until nothing was left */
  uint64_t epoch;    /* polls so far: a channel's read budget is per poll */
  /* What a ucp_worker_progress that found nothing costs, in ns: the
   * least of UCX_PROGRESS_SAMPLES timed ones, one poll in
   * UCX_PROGRESS_SAMPLE timed. Over tcp lanes it is an epoll_wait (poll
   * then delivers before progressing again), over shared memory a few
   * loads (poll progresses until nothing is left, which delivers bigger
   * batches). 0 until measured. */
  uint64_t empty_progress_ns;
  uint64_t sample_min_ns;  /* the least of this round's samples so far */
  uint32_t n_samples;      /* samples in this round */
  uint32_t polls;          /* polls so far, for the sampling */
  bool warned_header;      /* logged a message of another wire format */
  bool warned_unsequenced; /* logged a message routed by its slot with
                              another sequence number (recv.c) */
  bool in_progress;        /* inside ucp_worker_progress: UCX callbacks may run,
                              the core must not (asserted where it calls in) */
  /* Connection requests conn_handler queued for poll: entries
   * [accept_head, n_accepts); a closed listener's have uln == NULL. */
  struct ucx_accept *accepts;
  size_t accept_head, n_accepts, cap_accepts;
  /* Recycled send contexts and queue entries (linked by op.next): every
   * message needs one of each, and a ping pong pays each malloc in its
   * round trip. */
  ucx_op *free_sends, *free_entries;
  size_t n_free_sends, n_free_entries;
};

/* -- loop.c: send contexts, queue entries, requests in flight -- */

/** A zeroed send context, from the loop's free list or malloc; NULL when
 *  out of memory. */
ucx_send *weft__ucx_send_get(ucx_loop *tl);

/** Gives a send context back to its loop's free list (freed once the list
 *  holds UCX_FREE_LIST_MAX). Also inside progress. */
void weft__ucx_send_put(ucx_send *s);

/** A zeroed reassembly queue entry, from the loop's free list or malloc;
 *  NULL when out of memory. Also inside progress. */
rq_entry *weft__ucx_entry_get(ucx_loop *tl);

/** Gives a queue entry back to its loop's free list (freed once the list
 *  holds UCX_FREE_LIST_MAX). Also inside progress. */
void weft__ucx_entry_put(rq_entry *e);

/**
 * Lists request `req`, which UCX returned for `op` on the ep of record
 * `r`, on loop `tl` (and counts it on `r`) until its callback runs; `bp` is
 * the buffer to give back if it never ends. Also inside progress.
 */
void weft__ucx_op_link(ucx_loop *tl, ucx_epr *r, ucx_op *op, weft_buf **bp,
                       void *req);

/** Takes `op` off the loop's list of requests, from its callback; nothing
 *  if it was not listed. Inside progress (or the worker's destruction). */
void weft__ucx_op_unlink(ucx_op *op);

/** This plugin's instance on `loop`, created on first use; NULL with the
 *  error in `*err` if loop_init failed. */
ucx_loop *weft__ucx_loop_state_of(weft_loop *loop, int *err);

/* -- loop.c: the channel table -- */

/**
 * Gives channel `uc` a slot in the loop's table (its id and generation),
 * growing the table while fewer than UCX_MIN_FREE_SLOTS are free. Returns
 * 0, or WEFT_ENOMEM or WEFT_ENOBUFS (UCX_MAX_SLOTS channels) when no slot
 * is free.
 */
int weft__ucx_slot_take(ucx_loop *tl, ucx_channel *uc);

/** Frees channel `uc`'s slot; its generation moves on, so that messages
 *  still naming the channel are refused. */
void weft__ucx_slot_free(ucx_loop *tl, ucx_channel *uc);

/** The channel slot reference `ref` names; NULL if the slot is free or of
 *  another generation. Routes messages only with error_mode = none (recv.c,
 *  weft__ucx_recv_route). Inside progress. */
ucx_channel *weft__ucx_slot_find(ucx_loop *tl, uint32_t ref);

/* -- loop.c: the eps' index -- */

/** Indexes ep record `r` by its ep (r->ep set), so that a message and an
 *  ep error find their channel or held connection in O(1). Never fails: a
 *  table that cannot grow makes longer chains. */
void weft__ucx_ep_index(ucx_loop *tl, ucx_epr *r);

/** Takes ep record `r` out of the index (nothing if it is not in it), at
 *  the ep's close. */
void weft__ucx_ep_unindex(ucx_loop *tl, ucx_epr *r);

/** The record of ep `ep` (its channel, held connection, or nothing when
 *  it lingers closed), NULL if none. Also inside progress. */
ucx_epr *weft__ucx_ep_find(ucx_loop *tl, ucp_ep_h ep);

/* -- loop.c: the pending list -- */

/** Records work `what` (PEND_*) for poll and lists the channel on the
 *  loop's pending list, taking a channel reference, unless it is listed
 *  already. Inside progress or outside it. */
void weft__ucx_pend_mark(ucx_channel *uc, unsigned what);

/** Takes the first channel off the pending list (NULL: empty); the caller
 *  releases the list's channel reference. */
ucx_channel *weft__ucx_pend_pop(ucx_loop *tl);

/** Takes a closing channel off the pending list, with its work. Returns
 *  true if it was listed: the caller then releases the list's channel
 *  reference. */
bool weft__ucx_pend_unlink(ucx_channel *uc);

/* -- loop.c: the per-loop instance -- */

/**
 * The ops' loop_init: takes a context reference, creates the loop's worker
 * (single-thread mode, the AM handler) and adds its event fd to the loop as
 * a source; stores the instance in `*loop_state`. Returns 0, or an error
 * (logged with its cause; nothing is left behind).
 */
int weft__ucx_loop_init(weft_loop *loop, void **loop_state);

/**
 * The ops' loop_fini, after the core closed every channel: closes the
 * listeners, waits (bounded) for requests in flight and ep closes, gives
 * back the buffers of requests that never end, destroys the worker and
 * drops the context reference; while received buffers are still held, the
 * worker, the reference and the instance are kept (logged).
 */
void weft__ucx_loop_fini(weft_loop *loop, void *loop_state);

#endif
