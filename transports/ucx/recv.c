/* transports/ucx/recv.c: the UCX transport's receive path: the AM handler
 * (HELLO, HELLO_ACK, DATA, CREDIT, FIN), each channel's reassembly queue in
 * sequence order (eager data kept without a copy or copied, rendezvous
 * data received into a pool buffer), the eps' error handler, and the
 * dispatch of the pending list, which runs from poll what those callbacks
 * recorded: delivery to the pipeline, connect outcomes, flushes, errors. */

#include <stdio.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/pipeline.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx_internal.h"

/* ---- receiving ---- */

static bool seq_before(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

/* Inserts `e` by sequence number; in-order arrival (the rule) appends. */
static void rq_insert(ucx_channel *uc, rq_entry *e) {
  e->next = NULL;
  if (uc->rq_tail == NULL) {
    uc->rq_head = uc->rq_tail = e;
    return;
  }
  if (!seq_before(e->seq, uc->rq_tail->seq)) {
    uc->rq_tail->next = e;
    uc->rq_tail = e;
    return;
  }
  rq_entry **pp = &uc->rq_head;
  while (*pp != NULL && !seq_before(e->seq, (*pp)->seq))
    pp = &(*pp)->next;
  e->next = *pp;
  *pp = e;
}

void weft__ucx_rq_check_head(ucx_channel *uc) {
  if (uc->reading && uc->rq_head != NULL && uc->rq_head->ready)
    weft__ucx_pend_mark(uc, PEND_DELIVER);
}

/* Frees the queue of a closing channel; a rendezvous receive in flight
 * still writes into its buffer, so its entry is orphaned and freed by the
 * completion. */
void weft__ucx_rq_free(ucx_channel *uc) {
  rq_entry *e = uc->rq_head;
  while (e != NULL) {
    rq_entry *next = e->next;
    if (!e->ready) {
      e->uc = NULL;
    } else {
      if (e->b != NULL)
        weft_buf_release(e->b);
      weft__ucx_entry_put(e);
    }
    e = next;
  }
  uc->rq_head = uc->rq_tail = NULL;
}

/* Also runs for a receive loop_fini gave up on (`b` is NULL then), if UCX
 * ends it while the worker is destroyed; its channel closed before. */
static void rndv_done(void *request, ucs_status_t status, size_t length,
                      void *user_data) {
  rq_entry *e = user_data;
  weft__ucx_op_unlink(&e->op);
  ucp_request_free(request);
  if (e->uc == NULL) {
    weft_buf_release(e->b);
    weft__ucx_entry_put(e);
    return;
  }
  e->ready = true;
  if (status != UCS_OK) {
    e->uc->err = weft__ucx_status_to_weft(status);
    weft__ucx_pend_mark(e->uc, PEND_ERROR);
    return;
  }
  e->b->writer_index += length;
  weft__ucx_rq_check_head(e->uc);
}

static void wrap_free(void *base, size_t capacity, void *arg) {
  ucx_loop *tl = arg;
  (void)capacity;
  ucp_am_data_release(tl->worker, base);
  tl->live_wraps--;
}

/* Takes one DATA message into the reassembly queue. Returns what the AM
 * handler returns to UCX. */
static ucs_status_t rq_data(ucx_channel *uc, uint32_t seq, void *data,
                            size_t len, const ucp_am_recv_param_t *param) {
  ucx_loop *tl = uc->tl;
  weft_pool *pool = weft_loop_pool(tl->loop);
  rq_entry *e = weft__ucx_entry_get(tl);
  if (e == NULL)
    goto failed;
  e->uc = uc;
  e->seq = seq;
  e->ready = true;
  ucs_status_t ret = UCS_OK;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    e->b = weft_buf_alloc(pool, len > 0 ? len : 1);
    if (e->b == NULL)
      goto failed_entry;
    e->ready = false;
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA,
                              .cb.recv_am = rndv_done,
                              .user_data = e};
    ucs_status_ptr_t req =
        ucp_am_recv_data_nbx(tl->worker, data, weft_buf_wptr(e->b), len, &rp);
    if (UCS_PTR_IS_ERR(req)) {
      weft_buf_release(e->b);
      weft__ucx_entry_put(e);
      uc->err = weft__ucx_status_to_weft(UCS_PTR_STATUS(req));
      weft__ucx_pend_mark(uc, PEND_ERROR);
      return UCS_OK;
    }
    if (req == NULL) {
      e->b->writer_index += len;
      e->ready = true;
    } else {
      weft__ucx_op_link(uc, &e->op, &e->b, req);
    }
  } else if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
    /* UCX lets us keep its descriptor: no copy. */
    e->b = weft_buf_wrap(pool, data, len, len, wrap_free, tl);
    if (e->b == NULL)
      goto failed_entry;
    tl->live_wraps++;
    ret = UCS_INPROGRESS;
  } else {
    e->b = weft_buf_alloc(pool, len > 0 ? len : 1);
    if (e->b == NULL)
      goto failed_entry;
    memcpy(weft_buf_wptr(e->b), data, len);
    e->b->writer_index += len;
  }
  rq_insert(uc, e);
  weft__ucx_rq_check_head(uc);
  return ret;

failed_entry:
  weft__ucx_entry_put(e);
failed:
  uc->err = WEFT_ENOMEM;
  weft__ucx_pend_mark(uc, PEND_ERROR);
  return UCS_OK;
}

static void rq_fin(ucx_channel *uc, uint32_t seq) {
  rq_entry *e = weft__ucx_entry_get(uc->tl);
  uc->fin_received = true;
  if (e == NULL) {
    uc->err = WEFT_ENOMEM;
    weft__ucx_pend_mark(uc, PEND_ERROR);
    return;
  }
  e->uc = uc;
  e->seq = seq;
  e->ready = true;
  rq_insert(uc, e);
  weft__ucx_rq_check_head(uc);
}

/* HELLO names no slot: the server finds the channel by the reply ep. */
static void on_hello(ucx_loop *tl, const ucx_hdr *h,
                     const ucp_am_recv_param_t *param) {
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
    return;
  ucx_channel *uc = weft__ucx_slot_find_ep(tl, param->reply_ep);
  if (uc == NULL || uc->peer_known)
    return;
  uc->peer_id = weft__ucx_ref_id(h->seq);
  uc->peer_gen = weft__ucx_ref_gen(h->seq);
  uc->peer_known = true;
  uc->send_credit += h->credit;
  int err = weft__ucx_send_ctrl(uc, UMSG_HELLO_ACK, 0);
  if (err < 0) {
    uc->err = err;
    weft__ucx_pend_mark(uc, PEND_ERROR);
    return;
  }
  weft__ucx_pend_mark(uc, PEND_FLUSH); /* bytes written before the HELLO */
}

ucs_status_t weft__ucx_am_recv(void *arg, const void *header, size_t header_len,
                               void *data, size_t len,
                               const ucp_am_recv_param_t *param) {
  ucx_loop *tl = arg;
  ucx_hdr h;
  if (header_len != sizeof h) {
    if (!tl->warned_header)
      weft_log(WEFT_LOG_WARN,
               "ucx: dropped a message with a %zu-byte header (weft's is "
               "%zu: a peer running an older weft?)",
               header_len, sizeof h);
    tl->warned_header = true;
    return UCS_OK; /* not ours: drop */
  }
  memcpy(&h, header, sizeof h);
  uint32_t type = weft__ucx_ref_type(h.to);
  if (type == UMSG_HELLO) {
    on_hello(tl, &h, param);
    return UCS_OK;
  }
  ucx_channel *uc = weft__ucx_slot_find(tl, h.to);
  if (uc == NULL)
    return UCS_OK; /* the channel closed: drop */
  if (h.credit > 0) {
    uc->send_credit += h.credit;
    weft__ucx_pend_mark(uc, PEND_FLUSH);
  }
  switch (type) {
  case UMSG_HELLO_ACK:
    if (!uc->peer_known) {
      uc->peer_id = weft__ucx_ref_id(h.seq);
      uc->peer_gen = weft__ucx_ref_gen(h.seq);
      uc->peer_known = true;
      weft__ucx_pend_mark(uc, PEND_CONNECTED | PEND_FLUSH);
    }
    return UCS_OK;
  case UMSG_DATA:
    return rq_data(uc, h.seq, data, len, param);
  case UMSG_FIN:
    rq_fin(uc, h.seq);
    return UCS_OK;
  default:
    return UCS_OK;
  }
}

/* Hands ready bytes to the pipeline from the queue's head, in order, while
 * the channel reads; FIN becomes an orderly close. */
static void deliver(ucx_channel *uc) {
  weft_pipeline *p = weft_channel_pipeline(uc->ch);
  bool fired = false;
  while (uc->reading && weft__ucx_channel_active(uc) && uc->rq_head != NULL &&
         uc->rq_head->ready) {
    rq_entry *e = uc->rq_head;
    uc->rq_head = e->next;
    if (uc->rq_head == NULL)
      uc->rq_tail = NULL;
    weft_buf *b = e->b;
    weft__ucx_entry_put(e);
    if (b == NULL) {
      if (fired)
        weft_pipeline_fire_channel_read_complete(p);
      fired = false;
      if (weft__ucx_channel_active(uc))
        weft_channel_transport_closed(uc->ch, 0, "peer closed");
      return;
    }
    uc->credit_owed += weft_buf_readable(b);
    fired = true;
    weft_pipeline_fire_channel_read(p, b);
  }
  if (fired && weft__ucx_channel_active(uc))
    weft_pipeline_fire_channel_read_complete(p);
  weft__ucx_return_credit(uc);
}

static void report_error(ucx_channel *uc, int err, const char *what) {
  char reason[128];
  snprintf(reason, sizeof reason, "ucx: %s: %s", what, weft_strerror(err));
  weft_channel_transport_closed(uc->ch, err, reason);
}

/* Runs what callbacks left for one channel. The list's reference is
 * released by the caller. */
static void run_pending(ucx_channel *uc) {
  unsigned what = uc->pend;
  uc->pend = 0;
  if ((what & PEND_ERROR) && uc->connecting) {
    uc->connecting = false;
    weft_channel_connected(uc->ch, uc->err);
    return;
  }
  if ((what & PEND_CONNECTED) && uc->connecting) {
    uc->connecting = false;
    weft_channel_connected(uc->ch, 0);
  }
  if ((what & PEND_FLUSH) && weft__ucx_channel_active(uc)) {
    int err = weft__ucx_flush_now(uc);
    if (err < 0 && weft__ucx_channel_active(uc))
      report_error(uc, err, "send");
  }
  if (what & (PEND_DELIVER | PEND_ERROR))
    deliver(uc); /* bytes that arrived before an error still count */
  if (!(what & PEND_ERROR) || !weft__ucx_channel_active(uc))
    return;
  /* The peer's FIN and its disconnect travel on different lanes (shared
   * memory and the sockaddr CM): a FIN already sent may not be received
   * yet when the disconnect is. Report the error only after a complete
   * progress drain since it came; a FIN found meanwhile closes in order. */
  if (uc->tl->drains < uc->err_drain + 2) {
    uc->pend |= PEND_ERROR;
    weft__ucx_pend_mark(uc, PEND_ERROR);
    return;
  }
  if (uc->fin_received)
    return; /* queued behind unread bytes (auto-read off): closes in order
               once read */
  report_error(uc, uc->err, "connection");
}

int weft__ucx_dispatch_pending(ucx_loop *tl) {
  size_t n = tl->n_pend; /* channels marked meanwhile wait for next poll */
  int done = 0;
  for (size_t i = 0; i < n; i++) {
    ucx_channel *uc = weft__ucx_pend_pop(tl);
    if (uc == NULL)
      break;
    weft_channel *ch = uc->ch;
    if (uc->has_slot)
      run_pending(uc);
    weft_channel_release(ch);
    done++;
  }
  return done;
}

/* Peer error handling: the ep is unusable. A peer that sent FIN first
 * closed in order; its disconnect is not an error. */
void weft__ucx_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  ucx_loop *tl = arg;
  ucx_channel *uc = weft__ucx_slot_find_ep(tl, ep);
  if (uc == NULL) {
    /* Closing already; a lingering ep is closed by force then. */
    for (ucx_epr *r = tl->lingering; r != NULL; r = r->next)
      if (r->ep == ep)
        r->force = !tl->cfg.err_mode_none;
    return;
  }
  uc->ep_failed = true;
  if (uc->fin_received && !uc->connecting)
    return;
  int err = weft__ucx_status_to_weft(status);
  if (uc->connecting &&
      (status == UCS_ERR_UNREACHABLE || status == UCS_ERR_CONNECTION_RESET ||
       status == UCS_ERR_REJECTED))
    err = WEFT_ECONNREFUSED;
  uc->err = err;
  uc->err_drain = tl->drains;
  weft__ucx_pend_mark(uc, PEND_ERROR);
}
