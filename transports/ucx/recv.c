/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/recv.c: the UCX transport's receive path: the AM handler
 * (HELLO, HELLO_ACK, REDIRECT, DATA, CREDIT, FIN, PING, PONG; the HELLO of
 * a connection a listener holds goes to listen.c), each channel's
 * reassembly queue in
 * sequence order (eager data kept without a copy or copied, rendezvous
 * data received into a pool buffer), the eps' error handler, and the
 * dispatch of the pending list, which runs from poll what those callbacks
 * recorded: delivery to the pipeline, connect outcomes, flushes, errors. */

#include <stdio.h>
#include <stdlib.h>
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

/* Appends `e`: weft__ucx_hdr_check let DATA and FIN in only in sequence,
 * and UCX hands a channel's messages over in the order they were sent, so
 * the queue is in sequence order (a rendezvous entry waits for its bytes
 * at its place). */
static void rq_append(ucx_channel *uc, rq_entry *e) {
  e->next = NULL;
  if (uc->rq_tail == NULL)
    uc->rq_head = e;
  else
    uc->rq_tail->next = e;
  uc->rq_tail = e;
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

/* Takes one DATA message, which weft__ucx_hdr_check passed (so `len` is
 * within max_message and the credit this side granted), into the
 * reassembly queue. Returns what the AM handler returns to UCX. */
static ucs_status_t rq_data(ucx_channel *uc, void *data, size_t len,
                            const ucp_am_recv_param_t *param) {
  ucx_loop *tl = uc->tl;
  weft_pool *pool = weft_loop_pool(tl->loop);
  rq_entry *e = weft__ucx_entry_get(tl);
  if (e == NULL)
    goto failed;
  e->uc = uc;
  e->cost = (uint32_t)len + UCX_MSG_COST;
  e->ready = true;
  ucs_status_t ret = UCS_OK;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    e->b = weft_buf_alloc(pool, len);
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
      weft__ucx_op_link(tl, uc->epr, &e->op, &e->b, req);
    }
  } else if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) &&
             len >= UCX_WRAP_MIN) {
    /* UCX lets us keep its descriptor: no copy. */
    e->b = weft_buf_wrap(pool, data, len, len, wrap_free, tl);
    if (e->b == NULL)
      goto failed_entry;
    tl->live_wraps++;
    ret = UCS_INPROGRESS;
  } else {
    e->b = weft_buf_alloc(pool, len);
    if (e->b == NULL)
      goto failed_entry;
    memcpy(weft_buf_wptr(e->b), data, len);
    e->b->writer_index += len;
  }
  rq_append(uc, e);
  weft__ucx_rq_check_head(uc);
  return ret;

failed_entry:
  weft__ucx_entry_put(e);
failed:
  uc->err = WEFT_ENOMEM;
  weft__ucx_pend_mark(uc, PEND_ERROR);
  return UCS_OK;
}

/* The peer's FIN, which weft__ucx_hdr_check passed: EOF after the bytes
 * queued before it. */
static void rq_fin(ucx_channel *uc) {
  rq_entry *e = weft__ucx_entry_get(uc->tl);
  if (e == NULL) {
    uc->err = WEFT_ENOMEM;
    weft__ucx_pend_mark(uc, PEND_ERROR);
    return;
  }
  e->uc = uc;
  e->ready = true;
  rq_append(uc, e);
  /* Even while the channel does not read: run_pending closes it at once
   * if bytes of ours wait that the peer will never read. */
  weft__ucx_pend_mark(uc, PEND_DELIVER);
}

/* The peer of channel `uc` broke the protocol (`err`, `why`): its
 * messages are dropped from now on, and poll closes the channel alone
 * (run_pending). */
static void violated(ucx_channel *uc, int err, const char *why) {
  snprintf(uc->violation, sizeof uc->violation, "ucx: %s", why);
  uc->err = err;
  weft__ucx_pend_mark(uc, PEND_ERROR);
}

/* What the AM handler returns for a message it does not take: a
 * rendezvous is refused (the sender's send ends with UCS_ERR_REJECTED),
 * other data is left to UCX. */
static ucs_status_t refuse(const ucp_am_recv_param_t *param) {
  return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_REJECTED
                                                         : UCS_OK;
}

/* Logs once per loop that a message was dropped for `what`: a peer that
 * does not speak this weft's protocol (or an older weft). */
static void warn_foreign(ucx_loop *tl, const char *what) {
  if (!tl->warned_header)
    weft_log(WEFT_LOG_WARN,
             "ucx: dropped a message %s (a peer running an older weft?)", what);
  tl->warned_header = true;
}

/* Logs once per loop that a message routed by its slot (error_mode =
 * none), header `h`, was dropped: it did not show it came from the peer
 * of the channel it names (weft__ucx_wire_from_peer). */
static void warn_unsequenced(ucx_loop *tl, const ucx_hdr *h) {
  if (!tl->warned_unsequenced)
    weft_log(WEFT_LOG_WARN,
             "ucx: dropped a message without its sender's ep that names a "
             "channel without its next sequence number (%s for slot %u with "
             "sequence number %u): not that channel's peer's (error_mode = "
             "none: forged?); further ones are dropped without a word",
             weft__ucx_msg_name(weft__ucx_ref_type(h->to)),
             weft__ucx_ref_id(h->to), h->seq);
  tl->warned_unsequenced = true;
}

/* Whose message it is: the ep it came on (every weft message is sent with
 * UCP_AM_SEND_FLAG_REPLY), never the slot it names, which is the sender's
 * to write. A message naming another slot than its ep's channel's breaks a
 * rule there (weft__ucx_hdr_check): the sender's channel closes, the other
 * is not touched. */
ucx_recv_action weft__ucx_recv_route(ucx_loop *tl, const ucx_recv_msg *m,
                                     ucx_recv_verdict *v) {
  /* field by field: `why` (112 B) is written only for a violation, and
   * this runs for every message */
  v->action = UCX_RECV_DROP;
  v->r = NULL;
  v->uc = NULL;
  v->type = 0;
  v->err = 0;
  v->credit_came = false;
  if (m->header_len != sizeof(ucx_hdr)) {
    warn_foreign(tl, "with a header of another size than weft's 12 bytes");
    return v->action;
  }
  ucx_hdr h;
  memcpy(&h, m->header, sizeof h);
  ucx_channel *uc = NULL;
  if (m->has_ep) {
    v->r = weft__ucx_ep_find(tl, m->ep);
    if (v->r != NULL && v->r->pc != NULL)
      return v->action = UCX_RECV_HELD; /* poll checks it is a HELLO */
    uc = v->r != NULL ? v->r->uc : NULL;
  } else if (tl->cfg.err_mode_none && weft__ucx_ref_type(h.to) != UMSG_HELLO) {
    /* error_mode = none: peers send their ep with HELLO only (send.c), and
     * the slot a message names routes it; after the handshake it must also
     * carry that channel's next sequence number, which started at a random
     * value only the channel's peer was told (docs/transports/ucx.md,
     * "Whose message it is") */
    uc = weft__ucx_slot_find(tl, h.to);
  } else {
    warn_foreign(tl, "without its sender's ep (no UCP_AM_SEND_FLAG_REPLY: "
                     "a peer with error_mode = none? both sides need peer)");
    return v->action;
  }
  if (uc == NULL || uc->violation[0] != '\0')
    return v->action; /* closed, or closing for a broken rule: drop */
  if (!m->has_ep && !weft__ucx_wire_from_peer(&uc->w, &h)) {
    /* routed by the slot it names, without that channel's next sequence
     * number (random from its start): not its peer's, whose messages
     * UCX hands over in order, and nothing says whose; the channel is
     * not touched */
    warn_unsequenced(tl, &h);
    return v->action;
  }
  v->uc = uc;
  v->type = weft__ucx_ref_type(h.to);
  uint64_t credit = uc->w.send_credit;
  v->err = weft__ucx_hdr_check(&uc->w, m->header, m->header_len,
                               m->rndv ? NULL : m->data, m->len, m->rndv,
                               v->why, sizeof v->why);
  if (v->err < 0)
    return v->action = UCX_RECV_VIOLATION;
  v->credit_came = uc->w.send_credit > credit;
  return v->action = UCX_RECV_TAKE;
}

ucs_status_t weft__ucx_am_recv(void *arg, const void *header, size_t header_len,
                               void *data, size_t len,
                               const ucp_am_recv_param_t *param) {
  ucx_loop *tl = arg;
  bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  ucx_recv_msg m = {
      .has_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0,
      .ep = param->reply_ep,
      .header = header,
      .header_len = header_len,
      .data = data,
      .len = len,
      .rndv = rndv};
  ucx_recv_verdict v;
  switch (weft__ucx_recv_route(tl, &m, &v)) {
  case UCX_RECV_DROP:
    return refuse(param);
  case UCX_RECV_HELD:
    weft__ucx_preconn_hello(v.r->pc, header, header_len, data, len, rndv);
    return refuse(param);
  case UCX_RECV_VIOLATION:
    violated(v.uc, v.err, v.why);
    return refuse(param);
  case UCX_RECV_TAKE:
    break;
  }
  ucx_channel *uc = v.uc;
  int err;
  uc->heard = true; /* keepalive: the peer is there */
  if (v.credit_came)
    weft__ucx_pend_mark(uc, PEND_FLUSH);
  switch (v.type) {
  case UMSG_HELLO:
    weft__ucx_hello_came(uc);
    err = weft__ucx_send_ctrl(uc, UMSG_HELLO_ACK, 0);
    if (err < 0) {
      uc->err = err;
      weft__ucx_pend_mark(uc, PEND_ERROR);
    }
    return UCS_OK; /* PEND_FLUSH: bytes written before the HELLO */
  case UMSG_HELLO_ACK:
    weft__ucx_pend_mark(uc, PEND_CONNECTED | PEND_FLUSH);
    return UCS_OK;
  case UMSG_REDIRECT:
    /* the server's listeners, for this process's later connects */
    if (uc->dial != NULL)
      weft__ucx_route_learn(&uc->dial->primary, uc->w.peer_server_id,
                            (uint32_t)(len - UCX_REDIRECT_HEAD) / 4u,
                            (const char *)data + UCX_REDIRECT_HEAD);
    weft__ucx_pend_mark(uc, PEND_REDIRECT); /* poll connects there */
    return UCS_OK;
  case UMSG_PING:
    err = weft__ucx_send_ctrl(uc, UMSG_PONG, 0);
    if (err < 0) {
      uc->err = err;
      weft__ucx_pend_mark(uc, PEND_ERROR);
    }
    return UCS_OK;
  case UMSG_DATA:
    return rq_data(uc, data, len, param);
  case UMSG_FIN:
    rq_fin(uc);
    return UCS_OK;
  default:
    return UCS_OK; /* CREDIT, PONG: taken above */
  }
}

/* ---- The read budget (docs/architecture.md, "Read budget") ----
 *
 * A channel fires at most its budget of reads (weft_channel_read_budget:
 * DATA messages and bytes) per loop iteration; the loop polls the worker
 * once per iteration, so a poll is an epoch. UCX's callbacks only queue
 * (the reassembly queue, bounded by the window), and delivery runs from
 * the pending list, one channel after the other: the delivery that spends
 * the budget stops there and lists the channel again, at the list's tail,
 * which this poll's dispatch does not reach (it runs the channels listed
 * when it began). The next poll delivers the rest, after the other
 * channels listed before it; the list is not empty meanwhile, so the
 * worker refuses to arm and the loop does not sleep on queued bytes. The
 * bytes wait in the queue and hold their credit, so the sender waits too:
 * a flood holds at most one window, as a reader that does not read. A FIN
 * is not a read: it closes in order right after the last byte, budget or
 * not. Counting costs two compares per message. */

/* Counts one read of `bytes` against the channel's budget of this poll;
 * true when it spent it. */
static bool budget_spend(ucx_channel *uc, size_t bytes) {
  return weft_read_meter_spend(&uc->rb, uc->ch, uc->tl->epoch, bytes);
}

/* Whether the channel spent its budget in this poll already. */
static bool budget_spent(const ucx_channel *uc) {
  return weft_read_meter_spent(&uc->rb, uc->tl->epoch);
}

/* Whether bytes the channel would read wait for its next budget: an
 * error then waits for them, as they arrived before it. */
static bool rq_waits_for_budget(const ucx_channel *uc) {
  return uc->reading && uc->rq_head != NULL && uc->rq_head->ready &&
         uc->rq_head->b != NULL && budget_spent(uc);
}

/* Hands ready bytes to the pipeline from the queue's head, in order, while
 * the channel reads and its read budget lasts (above); FIN becomes an
 * orderly close. */
static void deliver(ucx_channel *uc) {
  weft_pipeline *p = weft_channel_pipeline(uc->ch);
  bool fired = false;
  while (uc->reading && weft__ucx_channel_active(uc) && uc->rq_head != NULL &&
         uc->rq_head->ready) {
    rq_entry *e = uc->rq_head;
    if (e->b != NULL && budget_spent(uc)) {
      weft__ucx_pend_mark(uc, PEND_DELIVER); /* the next poll goes on */
      break;
    }
    uc->rq_head = e->next;
    if (uc->rq_head == NULL)
      uc->rq_tail = NULL;
    weft_buf *b = e->b;
    uc->credit_owed += e->cost;
    weft__ucx_entry_put(e);
    if (b == NULL) {
      if (fired)
        weft_pipeline_fire_channel_read_complete(p);
      fired = false;
      if (weft__ucx_channel_active(uc))
        weft_channel_transport_closed(uc->ch, 0, "peer closed");
      return;
    }
    fired = true;
    budget_spend(uc, weft_buf_readable(b));
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

/* Closes channel `uc`, whose peer broke the protocol, with the rule in
 * the reason (logged: the application may not log its exceptions); the
 * bytes still queued are dropped with it. A connect in progress fails. */
static void close_violated(ucx_channel *uc) {
  char peer[64] = "?";
  if (weft_channel_remote_address(uc->ch, peer, sizeof peer) < 0)
    snprintf(peer, sizeof peer, "?");
  weft_log(WEFT_LOG_WARN, "%s; closing the channel to %s", uc->violation, peer);
  if (uc->connecting) {
    uc->connecting = false;
    weft_channel_connected(uc->ch, uc->err);
  } else if (weft__ucx_channel_active(uc)) {
    weft_channel_transport_closed(uc->ch, uc->err, uc->violation);
  }
}

/* Runs what callbacks left for one channel. The list's reference is
 * released by the caller. */
static void run_pending(ucx_channel *uc) {
  unsigned what = uc->pend;
  uc->pend = 0;
  if (uc->violation[0] != '\0') {
    close_violated(uc);
    return;
  }
  if ((what & PEND_REDIRECT) && uc->connecting) {
    /* an error of the old ep is moot */
    int err = weft__ucx_reconnect(uc, (uint16_t)uc->w.redirect_port, true);
    if (err < 0) {
      uc->connecting = false;
      weft_channel_connected(uc->ch, err);
    }
    return;
  }
  if ((what & PEND_ERROR) && uc->connecting) {
    /* A REDIRECT or HELLO_ACK sent before the server closed may still be
     * on the data lane when the disconnect came on the connection
     * manager's: it wins if it arrives within a full drain. */
    if (uc->tl->drains < uc->err_drain + 2) {
      weft__ucx_pend_mark(uc, what & (PEND_ERROR | PEND_CONNECTED));
      return;
    }
    if (weft__ucx_dial_retry(uc))
      return; /* a stale route: the server's own address now */
    uc->connecting = false;
    weft_channel_connected(uc->ch, uc->err);
    return;
  }
  if ((what & PEND_CONNECTED) && uc->connecting) {
    if (weft__ucx_dial_check(uc))
      return; /* another server answered there: its own address now */
    uc->connecting = false;
    free(uc->dial); /* no REDIRECT any more */
    uc->dial = NULL;
    weft_channel_connected(uc->ch, 0);
  }
  if ((what & PEND_FLUSH) && weft__ucx_channel_active(uc)) {
    int err = weft__ucx_flush_now(uc);
    if (err < 0 && weft__ucx_channel_active(uc))
      report_error(uc, err, "send");
  }
  /* The peer closed (FIN) and reads nothing more: bytes of ours still
   * unsent, waiting for credit it will never grant, can never arrive. As
   * TCP answers them with a reset, the channel closes now, even while it
   * does not read (flow control paused it because of those very bytes). */
  if (uc->w.fin_received && !weft_outbound_is_empty(uc->ch) &&
      weft__ucx_channel_active(uc)) {
    report_error(uc, WEFT_ECONNRESET, "the peer closed with our bytes unsent");
    return;
  }
  if (what & (PEND_DELIVER | PEND_ERROR))
    deliver(uc); /* bytes that arrived before an error still count */
  if (!(what & PEND_ERROR) || !weft__ucx_channel_active(uc))
    return;
  /* The peer's FIN and its disconnect travel on different lanes (shared
   * memory and the sockaddr CM): a FIN already sent may not be received
   * yet when the disconnect is. Report the error only after a complete
   * progress drain since it came; a FIN found meanwhile closes in order. */
  if (uc->tl->drains < uc->err_drain + 2 || rq_waits_for_budget(uc)) {
    uc->pend |= PEND_ERROR;
    weft__ucx_pend_mark(uc, PEND_ERROR);
    return;
  }
  if (uc->w.fin_received)
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
  ucx_epr *r = weft__ucx_ep_find(tl, ep);
  if (r == NULL)
    return; /* closed already */
  if (r->pc != NULL) {
    weft__ucx_preconn_error(r->pc); /* a held connection's client left */
    return;
  }
  ucx_channel *uc = r->uc;
  if (uc == NULL) {
    /* Closing already: a lingering ep is closed by force then. */
    r->force = !tl->cfg.err_mode_none;
    r->peer_left = true;
    return;
  }
  uc->ep_failed = true;
  uc->epr->peer_left = true;
  if (uc->w.fin_received && !uc->connecting)
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
