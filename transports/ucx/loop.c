/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/loop.c: the UCX transport's per-loop instance: the
 * loop's worker, its event fd as a source (poll, arm), its start and its
 * bounded drain at loop stop; the channel table, by which a message finds
 * its channel; the pending list of channels whose UCX callbacks left work
 * for poll; and the free lists and the list of requests in flight. Kept
 * together because they are one loop's bookkeeping, which every other
 * file reaches through ucx_loop. */

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/source.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx.h"
#include "transports/ucx/ucx_internal.h"

/* ---- per-loop and per-channel state ---- */

/* Takes a zeroed send context or queue entry (`size` bytes, an ucx_op
 * first) from a free list, or from malloc. */
static void *op_get(ucx_loop *tl, ucx_op **list, size_t *n, size_t size) {
  ucx_op *op = *list;
  if (op != NULL) {
    *list = op->next;
    (*n)--;
    memset(op, 0, size);
  } else {
    op = calloc(1, size);
    if (op == NULL)
      return NULL;
  }
  op->tl = tl;
  return op;
}

/* Gives a context back to its free list, or to free() once it is full. */
static void op_put(ucx_op *op, ucx_op **list, size_t *n) {
  if (*n >= UCX_FREE_LIST_MAX) {
    free(op);
    return;
  }
  op->next = *list;
  *list = op;
  (*n)++;
}

static void free_list_clear(ucx_op **list, size_t *n) {
  while (*list != NULL) {
    ucx_op *op = *list;
    *list = op->next;
    free(op);
  }
  *n = 0;
}

ucx_send *weft__ucx_send_get(ucx_loop *tl) {
  return op_get(tl, &tl->free_sends, &tl->n_free_sends, sizeof(ucx_send));
}

void weft__ucx_send_put(ucx_send *s) {
  ucx_op *op = (ucx_op *)s; /* its first member */
  op_put(op, &op->tl->free_sends, &op->tl->n_free_sends);
}

rq_entry *weft__ucx_entry_get(ucx_loop *tl) {
  return op_get(tl, &tl->free_entries, &tl->n_free_entries, sizeof(rq_entry));
}

void weft__ucx_entry_put(rq_entry *e) {
  op_put(&e->op, &e->op.tl->free_entries, &e->op.tl->n_free_entries);
}

/* Lists a request UCX returned; its callback unlinks it. */
void weft__ucx_op_link(ucx_loop *tl, ucx_epr *r, ucx_op *op, weft_buf **bp,
                       void *req) {
  /* a request, never NULL or an error status: cancel_all hands it to UCX */
  assert(req != NULL && !UCS_PTR_IS_ERR(req));
  op->tl = tl;
  op->epr = r;
  op->epr->n_ops++;
  op->req = req;
  op->bp = bp;
  op->prev = NULL;
  op->next = tl->ops;
  if (tl->ops != NULL)
    tl->ops->prev = op;
  tl->ops = op;
  tl->n_ops++;
}

void weft__ucx_op_unlink(ucx_op *op) {
  ucx_loop *tl = op->tl;
  if (op->req == NULL)
    return;
  if (op->prev != NULL)
    op->prev->next = op->next;
  else
    tl->ops = op->next;
  if (op->next != NULL)
    op->next->prev = op->prev;
  if (op->epr != NULL)
    op->epr->n_ops--; /* its ep may be closed on the next poll */
  op->req = NULL;
  tl->n_ops--;
}

ucx_loop *weft__ucx_loop_state_of(weft_loop *loop, int *err) {
  return weft_transport_loop_state(&weft__transport_ucx, loop, err);
}

/* ---- the channel table ---- */

/* Adds slots at the free FIFO's tail, doubling the table. */
static int slots_grow(ucx_loop *tl) {
  uint32_t old = tl->n_slots;
  uint32_t n = old ? old * 2 : 2 * UCX_MIN_FREE_SLOTS;
  if (n > UCX_MAX_SLOTS)
    return WEFT_ENOBUFS;
  ucx_slot *s = realloc(tl->slots, n * sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  for (uint32_t i = old; i < n; i++)
    s[i] = (ucx_slot){.next_free = i + 1 < n ? i + 1 : UINT32_MAX};
  if (tl->free_tail != UINT32_MAX)
    s[tl->free_tail].next_free = old;
  else
    tl->free_head = old;
  tl->free_tail = n - 1;
  tl->slots = s;
  tl->n_slots = n;
  tl->n_free += n - old;
  return 0;
}

/* A slot is reused only while UCX_MIN_FREE_SLOTS are free (else the table
 * grows), so its 8-bit generation comes round again only after 256 x that
 * many channels opened: a stale message in flight that long is dropped
 * by the generation check rather than reaching a new channel. */
int weft__ucx_slot_take(ucx_loop *tl, ucx_channel *uc) {
  if (tl->n_free < UCX_MIN_FREE_SLOTS) {
    int err = slots_grow(tl);
    if (err < 0 && tl->n_free == 0) {
      if (err == WEFT_ENOBUFS)
        weft_log(WEFT_LOG_WARN, "ucx: more than %u channels on one loop",
                 UCX_MAX_SLOTS);
      return err;
    }
  }
  uint32_t i = tl->free_head;
  tl->free_head = tl->slots[i].next_free;
  if (tl->free_head == UINT32_MAX)
    tl->free_tail = UINT32_MAX;
  tl->n_free--;
  tl->slots[i].uc = uc;
  uc->id = i;
  uc->gen = tl->slots[i].gen;
  uc->w.self_id = uc->id; /* what the peer's messages must name */
  uc->w.self_gen = uc->gen;
  uc->has_slot = true;
  return 0;
}

void weft__ucx_slot_free(ucx_loop *tl, ucx_channel *uc) {
  ucx_slot *s = &tl->slots[uc->id];
  s->uc = NULL;
  /* messages still addressed to the old channel are dropped */
  s->gen = (s->gen + 1) & UCX_GEN_MASK;
  s->next_free = UINT32_MAX;
  if (tl->free_tail != UINT32_MAX)
    tl->slots[tl->free_tail].next_free = uc->id;
  else
    tl->free_head = uc->id;
  tl->free_tail = uc->id;
  tl->n_free++;
  uc->has_slot = false;
}

ucx_channel *weft__ucx_slot_find(ucx_loop *tl, uint32_t ref) {
  uint32_t id = weft__ucx_ref_id(ref);
  if (id >= tl->n_slots || tl->slots[id].gen != weft__ucx_ref_gen(ref))
    return NULL;
  return tl->slots[id].uc;
}

/* ---- the eps' index ---- */

#define EP_BUCKETS_MIN 64u

/* The bucket of `ep`: a multiplicative hash of its address (eps are
 * allocations, aligned: the low bits carry nothing). */
static size_t ep_bucket(const ucx_loop *tl, ucp_ep_h ep) {
  uint64_t x = (uint64_t)(uintptr_t)ep * 0x9e3779b97f4a7c15ull;
  return (size_t)(x >> 32) & tl->ep_mask;
}

/* Doubles the buckets once there are as many records as buckets; keeps
 * the old table when memory is short (chains grow instead). */
static void ep_index_grow(ucx_loop *tl) {
  size_t n = (tl->ep_mask + 1) * 2;
  ucx_epr **b = calloc(n, sizeof *b);
  if (b == NULL)
    return;
  ucx_epr **old = tl->ep_buckets;
  size_t old_n = tl->ep_mask + 1;
  tl->ep_buckets = b;
  tl->ep_mask = n - 1;
  for (size_t i = 0; i < old_n; i++)
    for (ucx_epr *r = old[i], *next; r != NULL; r = next) {
      next = r->hash_next;
      size_t k = ep_bucket(tl, r->ep);
      r->hash_next = b[k];
      b[k] = r;
    }
  free(old);
}

void weft__ucx_ep_index(ucx_loop *tl, ucx_epr *r) {
  if (tl->n_indexed >= tl->ep_mask + 1)
    ep_index_grow(tl);
  size_t k = ep_bucket(tl, r->ep);
  r->hash_next = tl->ep_buckets[k];
  tl->ep_buckets[k] = r;
  r->indexed = true;
  tl->n_indexed++;
}

void weft__ucx_ep_unindex(ucx_loop *tl, ucx_epr *r) {
  if (!r->indexed)
    return;
  ucx_epr **pp = &tl->ep_buckets[ep_bucket(tl, r->ep)];
  while (*pp != r)
    pp = &(*pp)->hash_next;
  *pp = r->hash_next;
  r->indexed = false;
  tl->n_indexed--;
}

ucx_epr *weft__ucx_ep_find(ucx_loop *tl, ucp_ep_h ep) {
  for (ucx_epr *r = tl->ep_buckets[ep_bucket(tl, ep)]; r != NULL;
       r = r->hash_next)
    if (r->ep == ep)
      return r;
  return NULL;
}

/* ---- the pending list ---- */

void weft__ucx_pend_mark(ucx_channel *uc, unsigned what) {
  ucx_loop *tl = uc->tl;
  uc->pend |= what;
  if (uc->listed)
    return;
  uc->listed = true;
  uc->pend_next = NULL;
  weft_channel_retain(uc->ch); /* the list holds a reference */
  if (tl->pend_tail != NULL)
    tl->pend_tail->pend_next = uc;
  else
    tl->pend_head = uc;
  tl->pend_tail = uc;
  tl->n_pend++;
}

ucx_channel *weft__ucx_pend_pop(ucx_loop *tl) {
  ucx_channel *uc = tl->pend_head;
  if (uc == NULL)
    return NULL;
  tl->pend_head = uc->pend_next;
  if (tl->pend_head == NULL)
    tl->pend_tail = NULL;
  tl->n_pend--;
  uc->listed = false;
  return uc;
}

/* Takes a closing channel off the list; the caller drops the reference. */
bool weft__ucx_pend_unlink(ucx_channel *uc) {
  ucx_loop *tl = uc->tl;
  if (!uc->listed)
    return false;
  ucx_channel *prev = NULL;
  for (ucx_channel *p = tl->pend_head; p != NULL; prev = p, p = p->pend_next) {
    if (p != uc)
      continue;
    if (prev != NULL)
      prev->pend_next = p->pend_next;
    else
      tl->pend_head = p->pend_next;
    if (tl->pend_tail == p)
      tl->pend_tail = prev;
    tl->n_pend--;
    break;
  }
  uc->listed = false;
  uc->pend = 0;
  return true;
}

/* ---- the per-loop instance ---- */

static void reap_closing(ucx_loop *tl) {
  size_t j = 0;
  for (size_t i = 0; i < tl->n_closing; i++) {
    if (ucp_request_check_status(tl->closing[i]) == UCS_INPROGRESS)
      tl->closing[j++] = tl->closing[i];
    else
      ucp_request_free(tl->closing[i]);
  }
  tl->n_closing = j;
}

/* Every ucp_worker_progress of the plugin goes through here, so that the
 * asserts in adopt, flush and close see where UCX callbacks may run. */
static unsigned progress(ucx_loop *tl) {
  tl->in_progress = true;
  unsigned k = ucp_worker_progress(tl->worker);
  tl->in_progress = false;
  return k;
}

/* progress, timing it if this poll is a sample and it found nothing:
 * empty_progress_ns is the least of every UCX_PROGRESS_SAMPLES such
 * times (a preempted sample does not count). */
static unsigned progress_sampled(ucx_loop *tl, bool sample) {
  if (!sample)
    return progress(tl);
  uint64_t t0 = weft__ucx_now_ns();
  unsigned k = progress(tl);
  if (k != 0)
    return k;
  uint64_t d = weft__ucx_now_ns() - t0;
  if (tl->n_samples == 0 || d < tl->sample_min_ns)
    tl->sample_min_ns = d;
  if (++tl->n_samples == UCX_PROGRESS_SAMPLES) {
    tl->empty_progress_ns = tl->sample_min_ns;
    tl->n_samples = 0;
  }
  return 0;
}

/* Progresses until UCX has nothing left; where an empty progress is a
 * system call (UCX's tcp lanes: an epoll_wait per ucp_worker_progress),
 * only until its callbacks left work, which is then done at once (the
 * selector polls again while there was work): progressing once more
 * before delivering put that system call into every message's path on
 * each side (docs/journal/2026-11-22-ucx.md, "Delivering before the next
 * progress"). Over shared memory an empty progress is cheap, and
 * progressing to the end delivers bigger batches (the pipelined message
 * rate fell when it did not). */
static int ucx_loop_poll(weft_source *src, int budget) {
  ucx_loop *tl = src->data;
  bool sample = tl->polls++ % UCX_PROGRESS_SAMPLE == 0;
  bool deliver_first = tl->empty_progress_ns >= UCX_COSTLY_PROGRESS_NS;
  int n = 0;
  tl->epoch++; /* a new read budget for every channel (recv.c) */
  while (n < budget) {
    unsigned k = progress_sampled(tl, sample);
    if (k == 0) {
      tl->drains++;
      break;
    }
    n += (int)k;
    if (deliver_first && (tl->pend_head != NULL || tl->n_accepts > 0))
      break;
  }
  if (tl->n_accepts > 0)
    n += weft__ucx_accept_pending(tl);
  n += weft__ucx_dispatch_pending(tl);
  if (tl->preconn_hello)
    n += weft__ucx_preconn_dispatch(tl, false);
  if (tl->lingering != NULL)
    weft__ucx_linger_check(tl, false);
  if (tl->n_closing > 0)
    reap_closing(tl);
  return n;
}

/* UCS_ERR_BUSY: events arrived since the last progress, so sleeping now
 * could miss them; poll again. */
static int ucx_loop_arm(weft_source *src) {
  ucx_loop *tl = src->data;
  if (tl->pend_head != NULL || tl->n_accepts > 0 || tl->preconn_hello)
    return 1;
  ucs_status_t st = ucp_worker_arm(tl->worker);
  if (st == UCS_ERR_BUSY)
    return 1;
  if (st != UCS_OK) {
    weft_log(WEFT_LOG_WARN, "ucx: ucp_worker_arm: %s", ucs_status_string(st));
    return 1;
  }
  return 0;
}

static const weft_source_ops ucx_source_ops = {
    .name = "ucx", .poll = ucx_loop_poll, .arm = ucx_loop_arm};

static int worker_create(ucx_loop *tl) {
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  ucs_status_t st = ucp_worker_create(weft__ucx_ctx, &wp, &tl->worker);
  if (st != UCS_OK)
    return weft__ucx_status_to_weft(st);
  ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                             UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                                             UCP_AM_HANDLER_PARAM_FIELD_CB |
                                             UCP_AM_HANDLER_PARAM_FIELD_ARG,
                               .id = UCX_AM_ID,
                               .flags = UCP_AM_FLAG_WHOLE_MSG,
                               .cb = weft__ucx_am_recv,
                               .arg = tl};
  st = ucp_worker_set_am_recv_handler(tl->worker, &hp);
  if (st != UCS_OK) {
    ucp_worker_destroy(tl->worker);
    return weft__ucx_status_to_weft(st);
  }
  return 0;
}

int weft__ucx_loop_init(weft_loop *loop, void **loop_state) {
  char why[256] = "";
  int err;
  ucx_loop *tl = calloc(1, sizeof *tl);
  if (tl == NULL)
    return WEFT_ENOMEM;
  tl->loop = loop;
  tl->free_head = tl->free_tail = UINT32_MAX;
  tl->ep_buckets = calloc(EP_BUCKETS_MIN, sizeof *tl->ep_buckets);
  if (tl->ep_buckets == NULL) {
    free(tl);
    return WEFT_ENOMEM;
  }
  tl->ep_mask = EP_BUCKETS_MIN - 1;
  weft_timer_init(loop, &tl->tick);
  err = weft__ucx_ctx_acquire(&tl->cfg, why, sizeof why);
  if (err < 0)
    goto failed_context;
  err = worker_create(tl);
  if (err < 0) {
    snprintf(why, sizeof why, "ucp_worker_create: %s", weft_strerror(err));
    goto failed_worker;
  }
  int efd = -1;
  ucs_status_t st = ucp_worker_get_efd(tl->worker, &efd);
  if (st != UCS_OK) {
    err = weft__ucx_status_to_weft(st);
    snprintf(why, sizeof why, "ucp_worker_get_efd: %s", ucs_status_string(st));
    goto failed_efd;
  }
  weft_source_init(&tl->source, &ucx_source_ops, efd, tl);
  err = weft_loop_add_source(loop, &tl->source);
  if (err < 0) {
    snprintf(why, sizeof why, "adding the worker's fd: %s", weft_strerror(err));
    goto failed_efd;
  }
  *loop_state = tl;
  return 0;

failed_efd:
  ucp_worker_destroy(tl->worker);
failed_worker:
  weft__ucx_ctx_release();
failed_context:
  weft_log(WEFT_LOG_ERROR, "ucx: cannot start on loop %d: %s",
           weft_loop_index(loop), why);
  free(tl->ep_buckets);
  free(tl);
  return err;
}

/* Progresses until every request in flight ended and every ep closed
 * (requests first: see ucx_epr), or twice UCX_CLOSE_WAIT_NS passed (a
 * vanished peer is not waited for forever; a lingering ep's own deadline
 * comes first). */
static void drain(ucx_loop *tl) {
  uint64_t t0 = weft__ucx_now_ns();
  while (tl->n_closing > 0 || tl->ops != NULL || tl->lingering != NULL) {
    progress(tl);
    weft__ucx_linger_check(tl, false);
    reap_closing(tl);
    if (weft__ucx_now_ns() - t0 > 2 * UCX_CLOSE_WAIT_NS)
      break;
  }
  weft__ucx_linger_check(tl, true);
  if (tl->n_closing > 0) {
    weft_log(WEFT_LOG_WARN, "ucx: %zu endpoint closes did not finish",
             tl->n_closing);
    for (size_t i = 0; i < tl->n_closing; i++)
      ucp_request_free(tl->closing[i]);
    tl->n_closing = 0;
  }
}

/* Asks UCX to cancel every request in flight. A cancel may end its
 * request at once (a rendezvous receive): the callback then unlinks the op
 * and recycles it (its `next` then points into a free list, and its `req`
 * is NULL), so the list is walked afresh after each cancel, skipping the
 * ops asked before (`cancelled`). Following `next` past a cancel once
 * handed UCX a NULL request (SIGSEGV in ucp_request_cancel at
 * 0xfffffffffffffef4: NULL less the request header, test_ucx_shm). */
static void cancel_all(ucx_loop *tl) {
  for (;;) {
    ucx_op *op = tl->ops;
    while (op != NULL && op->cancelled)
      op = op->next;
    if (op == NULL)
      return;
    op->cancelled = true;
    ucp_request_cancel(tl->worker, op->req);
  }
}

/* Requests that did not end: ask UCX to cancel them (1.13 cancels neither
 * sends nor rendezvous AM receives, seen here), then give their buffers
 * back to the pool, which is destroyed after this. Their memory stays with
 * the worker, which loop_fini then keeps (UCX aborts when it destroys an
 * ep with such a request). */
static void abandon_ops(ucx_loop *tl) {
  if (tl->ops == NULL)
    return;
  cancel_all(tl);
  for (int i = 0; i < 64 && progress(tl) != 0; i++)
    continue;
  if (tl->ops == NULL)
    return;
  weft_log(WEFT_LOG_WARN,
           "ucx: %zu requests still in flight at loop stop; their buffers "
           "are released",
           tl->n_ops);
  for (ucx_op *op = tl->ops; op != NULL; op = op->next) {
    weft_buf_release(*op->bp);
    *op->bp = NULL;
  }
}

/* After ucp_worker_destroy: the requests it ended (their callbacks ran
 * during the destroy) leave nothing; others cannot be here (loop_fini
 * keeps the worker then). */
static void free_abandoned(ucx_loop *tl) {
  while (tl->ops != NULL) {
    ucx_op *op = tl->ops;
    tl->ops = op->next;
    free(op); /* the first member of its ucx_send or rq_entry */
  }
  tl->n_ops = 0;
}

/* Channels were closed by the core before; their ep closes and requests
 * may still be in flight, so progress until they end (drain). */
void weft__ucx_loop_fini(weft_loop *loop, void *loop_state) {
  ucx_loop *tl = loop_state;
  while (tl->listeners != NULL) {
    weft_listener_set_priv(tl->listeners->l, NULL);
    weft__ucx_listener_free(tl->listeners);
  }
  while (tl->pend_head != NULL)
    weft_channel_release(weft__ucx_pend_pop(tl)->ch);
  weft_timer_stop(&tl->tick);
  weft__ucx_preconn_dispatch(tl, true);
  drain(tl);
  abandon_ops(tl);
  weft_loop_remove_source(loop, &tl->source);
  if (tl->live_wraps > 0) {
    /* A handler still holds received buffers that point into UCX's memory:
     * keeping the worker is the lesser evil (the leak detector names them). */
    weft_log(WEFT_LOG_ERROR,
             "ucx: %zu received buffers still held at loop stop; the worker "
             "is not destroyed",
             tl->live_wraps);
    return;
  }
  if (tl->ops != NULL || tl->n_unanswered > 0) {
    /* UCX 1.13 aborts when ucp_worker_destroy meets an ep with a request
     * it never ended: a rendezvous receive whose data never came (a client
     * sent its RTS and stopped: "ucp_ep.c:437 Assertion
     * `ucs_hlist_is_empty(&ucp_ep_ext_gen(ep)->proto_reqs)'"; 1.13 does
     * not cancel those) or a HELLO nobody answered (error_mode = none:
     * "pending request ... should have been flushed"). Keeping the worker,
     * never progressed again, is the lesser evil: its memory stays. */
    weft_log(WEFT_LOG_WARN,
             "ucx: %zu requests never ended and %zu endpoints to peers that "
             "never answered the HELLO are open at loop stop; UCX 1.13 "
             "aborts when it destroys them, so the worker is not destroyed",
             tl->n_ops, tl->n_unanswered);
    return;
  }
  ucp_worker_destroy(tl->worker);
  free_abandoned(tl);
  free_list_clear(&tl->free_sends, &tl->n_free_sends);
  free_list_clear(&tl->free_entries, &tl->n_free_entries);
  weft__ucx_ctx_release();
  free(tl->closing);
  free(tl->accepts);
  free(tl->slots);
  free(tl->ep_buckets);
  free(tl);
}
