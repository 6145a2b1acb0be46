/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/recv.c: the receive path, driven by a device's CQ
 * source, which polls every group's CQ in turn. Each poll batch refills
 * its group's SRQ before any handler runs, then hands every completion to
 * its channel: a received message goes up the pipeline as a buffer
 * wrapping its slot, or as a copy once the handlers hold VERBS_ZC_MAX
 * slots (or is held while the channel does not read), the credits and FIN
 * it carries are taken in, and a send completion retires send records.
 * The batch ends with read_complete, the peer's FIN as EOF, and the sends
 * the new credits allow (send.c). See "Receive path" and "Flow control" in
 * verbs_internal.h.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/pipeline.h>

#include "transports/verbs/verbs_internal.h"

/* ---- conversions at the edge ---- */

/* What a failed work completion means for the channel. */
static int wc_status_to_weft(enum ibv_wc_status s) {
  switch (s) {
  case IBV_WC_RETRY_EXC_ERR:
    return WEFT_ETIMEDOUT;
  case IBV_WC_RNR_RETRY_EXC_ERR:
    return WEFT_ENOBUFS;
  case IBV_WC_WR_FLUSH_ERR:
    return WEFT_ECONNRESET;
  case IBV_WC_LOC_LEN_ERR:
    return WEFT_EMSGSIZE;
  default:
    return WEFT_EIO;
  }
}

/* ---- receiving ---- */

/* The slot of a receive's wr_id (device.c tags it with VERBS_WR_RECV),
 * UINT32_MAX if it names none of ours. */
static uint32_t slot_of(const verbs_dev *d, uint64_t wr_id) {
  uint64_t slot = wr_id & ~VERBS_WR_RECV;
  return slot < d->n_slots ? (uint32_t)slot : UINT32_MAX;
}

static void touch(verbs_dev *d, verbs_chan *vc) {
  if (vc->touched || d->n_touched == 2 * VERBS_POLL_BATCH)
    return;
  vc->touched = true;
  weft_channel_retain(vc->ch);
  d->touched[d->n_touched++] = vc;
}

/* Holds a received message until the channel reads. Room is certain: a
 * data message is taken only on a credit the peer held (rx_check), and
 * granted + in_use (held among them) never exceeds VERBS_CREDITS. */
static void held_push(verbs_chan *vc, weft_buf *b) {
  assert(vc->n_held < VERBS_CREDITS);
  uint32_t tail = (vc->held_head + vc->n_held) % VERBS_CREDITS;
  vc->held[tail] = b;
  vc->n_held++;
}

static bool can_deliver(const verbs_chan *vc) {
  return vc->reading && vc_active(vc) && vc->state != VC_LINGER &&
         vc->state != VC_DONE;
}

/* A copy of received buffer `b` in pool memory, `b` released (its slot
 * freed); `b` itself when there is no memory for the copy. */
static weft_buf *copy_out(verbs_chan *vc, weft_buf *b) {
  size_t len = weft_buf_readable(b); /* > 0: a data message */
  weft_buf *c = weft_buf_alloc(weft_loop_pool(weft_channel_loop(vc->ch)), len);
  if (c == NULL)
    return b; /* zero-copy after all: still within the channel's credits */
  weft_buf_write_bytes(c, weft_buf_rptr(b), len);
  weft_buf_release(b);
  return c;
}

/* ---- The read budget (docs/architecture.md, "Read budget") ----
 *
 * A channel fires at most its budget of reads (weft_channel_read_budget:
 * messages and bytes) per loop iteration; the loop polls the device once
 * per iteration, so a poll is an epoch. The delivery that would go past
 * the budget stops: the messages stay in held[] (in order, at most
 * VERBS_CREDITS: each holds a credit, so the peer waits too) and the
 * channel goes on the device's deliver list, which the next poll runs
 * first, before its CQs; the source refuses to arm meanwhile, so the loop
 * does not sleep on held messages (what arm's own poll and the drain of
 * a disconnect find waits for the next poll too: weft__verbs_dev_take_in).
 * A completion for the channel that
 * arrives before then is held behind them. The peer's FIN waits for the
 * held messages, as while the channel does not read. Counting costs two
 * compares per message. */

/* Counts one read of `bytes` against the channel's budget of this poll;
 * true when it spent it. */
static bool budget_spend(verbs_chan *vc, size_t bytes) {
  return weft_read_meter_spend(&vc->rb, vc->ch, vc->dev->epoch, bytes);
}

/* Whether the channel spent its budget in this poll already; always
 * in a poll that only takes in (`taking_in`): arm's (after the loop
 * counted its iteration, which found no work) and the drain of rdma_cm's
 * DISCONNECTED (weft__verbs_dev_take_in). The next poll delivers, so that
 * one iteration never delivers two budgets. */
static bool budget_spent(const verbs_chan *vc) {
  return vc->dev->taking_in || weft_read_meter_spent(&vc->rb, vc->dev->epoch);
}

/* Delivers held messages while the channel reads and its budget lasts;
 * returns how many. */
int weft__verbs_deliver_held(verbs_chan *vc) {
  int n = 0;
  while (vc->n_held > 0 && can_deliver(vc)) {
    if (budget_spent(vc)) {
      weft__verbs_queue_deliver(vc); /* the next poll goes on */
      break;
    }
    weft_buf *b = vc->held[vc->held_head];
    vc->held_head = (vc->held_head + 1) % VERBS_CREDITS;
    vc->n_held--;
    /* The handlers' slots, this one among them: past VERBS_ZC_MAX the
     * message goes up as a copy, so what they keep beyond that costs the
     * channel no credits. */
    if (vc->in_use - vc->n_held > VERBS_ZC_MAX)
      b = copy_out(vc, b);
    vc->got_data = true;
    n++;
    budget_spend(vc, weft_buf_readable(b));
    weft_pipeline_fire_channel_read(weft_channel_pipeline(vc->ch), b);
  }
  if (vc->n_held == 0 && vc->flow.fin)
    vc->fin_pending = true;
  return n;
}

/* What the peer chose of a successful receive, for the checks of wire.c. */
static verbs_rx rx_of(const struct ibv_wc *wc) {
  bool imm = (wc->wc_flags & IBV_WC_WITH_IMM) != 0;
  return (verbs_rx){.rdma_write = wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM,
                    .with_imm = imm,
                    .imm = imm ? ntohl(wc->imm_data) : 0,
                    .len = wc->byte_len};
}

/* A checked data message goes up, or is held while the channel does not
 * read. */
static void take_data(verbs_dev *d, verbs_chan *vc, uint32_t slot,
                      uint32_t len) {
  weft_buf *b =
      weft_buf_wrap(weft_loop_pool(d->vl->loop), slot_ptr(d, slot),
                    VERBS_SLOT_SIZE, len, weft__verbs_slot_release, vc);
  if (b == NULL) {
    slot_put(d, slot);
    weft__verbs_vc_fail(vc, WEFT_ENOMEM,
                        "verbs: no memory for a received buffer");
    return;
  }
  d->refs++;
  vc->in_use++; /* until weft__verbs_slot_release */
  vc->grp->in_use++;
  held_push(vc, b);
  weft__verbs_deliver_held(vc);
}

verbs_recv_action weft__verbs_recv_route(verbs_dev *d, const struct ibv_wc *wc,
                                         verbs_recv_verdict *v) {
  v->action = VERBS_RECV_DROP;
  v->vc = weft__verbs_hash_find(d, wc->qp_num);
  v->slot = UINT32_MAX;
  v->err = 0;
  v->len = 0;
  v->fin = false;
  if (!(wc->wr_id & VERBS_WR_RECV))
    return v->action = VERBS_RECV_SEND;
  if ((v->slot = slot_of(d, wc->wr_id)) == UINT32_MAX)
    return v->action = VERBS_RECV_BAD_SLOT;
  verbs_chan *vc = v->vc;
  if (vc == NULL || vc->state == VC_DONE || vc->state == VC_LINGER)
    return v->action; /* for a channel that is gone or closing */
  if (wc->status != IBV_WC_SUCCESS) {
    v->err = wc_status_to_weft(wc->status);
    snprintf(v->why, sizeof v->why, "verbs: receive failed: %s",
             ibv_wc_status_str(wc->status));
    return v->action = VERBS_RECV_FAILED;
  }
  /* Nothing of the message is used before it passed the checks. */
  verbs_rx m = rx_of(wc);
  if (weft__verbs_rx_check(&vc->flow, &m, v->why, sizeof v->why) < 0) {
    v->err = WEFT_EPROTO;
    return v->action = VERBS_RECV_VIOLATION;
  }
  if (vc->state == VC_CONNECTING && vc->passive)
    vc->state = VC_ESTABLISHED; /* data before the ESTABLISHED event */
  v->len = m.len;
  v->fin = (m.imm & VERBS_IMM_FIN) != 0;
  return v->action = m.len > 0 ? VERBS_RECV_DATA : VERBS_RECV_CONTROL;
}

/* Acts on a receive completion's verdict (weft__verbs_recv_route). */
static void on_recv(verbs_dev *d, const verbs_recv_verdict *v) {
  verbs_chan *vc = v->vc;
  if (v->action == VERBS_RECV_DROP) {
    slot_put(d, v->slot);
    return;
  }
  touch(d, vc);
  switch (v->action) {
  case VERBS_RECV_FAILED:
    slot_put(d, v->slot);
    weft__verbs_vc_fail(vc, v->err, "%s", v->why);
    return;
  case VERBS_RECV_VIOLATION:
    slot_put(d, v->slot);
    weft__verbs_vc_violation(vc, v->why);
    return;
  case VERBS_RECV_DATA:
    take_data(d, vc, v->slot, v->len);
    break;
  default:
    slot_put(d, v->slot); /* credits or FIN only */
  }
  if (v->fin && vc->n_held == 0)
    vc->fin_pending = true;
}

static void on_send(verbs_dev *d, verbs_chan *vc, const struct ibv_wc *wc) {
  if (vc == NULL || vc->state == VC_DONE)
    return;
  /* Touched first: slots the retired sends give back (an echo) then wait
   * for this batch's end, not for the deliver list. */
  touch(d, vc);
  weft__verbs_retire_sends(vc, wc->wr_id);
  if (wc->status != IBV_WC_SUCCESS) {
    weft__verbs_vc_fail(vc, wc_status_to_weft(wc->status),
                        "verbs: send failed: %s",
                        ibv_wc_status_str(wc->status));
    return;
  }
  if (vc->state == VC_LINGER && wc->wr_id >= vc->fin_seq)
    weft__verbs_vc_teardown(vc); /* FIN delivered: disconnect */
}

/* After a batch: read_complete, FIN as EOF, sends the new credits allow. */
static void finish_batch(verbs_dev *d) {
  for (int i = 0; i < d->n_touched; i++) {
    verbs_chan *vc = d->touched[i];
    weft_channel *ch = vc->ch;
    vc->touched = false;
    if (vc->got_data && vc_active(vc)) {
      vc->got_data = false;
      weft_pipeline_fire_channel_read_complete(weft_channel_pipeline(ch));
    }
    vc->got_data = false;
    if (vc->fin_pending && vc_active(vc)) {
      vc->fin_pending = false;
      weft_channel_transport_closed(ch, 0, "peer closed");
    }
    int err = vc_active(vc) ? weft__verbs_send_pending(vc) : 0;
    if (err < 0)
      weft__verbs_vc_fail(vc, err, "verbs: send: %s", weft_strerror(err));
    weft_channel_release(ch);
  }
  d->n_touched = 0;
}

void weft__verbs_queue_deliver(verbs_chan *vc) {
  if (vc->in_deliver || vc->dev == NULL)
    return;
  vc->in_deliver = true;
  vc->deliver_next = vc->dev->deliver;
  vc->dev->deliver = vc;
}

/* Channels whose held messages may go up now (auto-read came back, or a
 * new read budget), or whose handlers gave slots back: finish_batch sends
 * their credits. The list is taken whole first: a channel that spends its
 * budget here goes on the next poll's list, not this one's again. */
static int deliver_pending(verbs_dev *d) {
  int n = 0;
  verbs_chan *list = d->deliver;
  d->deliver = NULL;
  while (list != NULL && d->n_touched < VERBS_POLL_BATCH) {
    verbs_chan *vc = list;
    list = vc->deliver_next;
    vc->in_deliver = false;
    touch(d, vc);
    n += weft__verbs_deliver_held(vc) + 1;
  }
  while (list != NULL) { /* past the batch: the next poll's */
    verbs_chan *vc = list;
    list = vc->deliver_next;
    vc->in_deliver = false;
    weft__verbs_queue_deliver(vc);
  }
  return n;
}

/* One batch of group `g`'s CQ, at most `max` completions. */
static int group_poll(verbs_group *g, int max) {
  verbs_dev *d = g->dev;
  struct ibv_wc wcs[VERBS_POLL_BATCH];
  int n =
      ibv_poll_cq(g->cq, max < VERBS_POLL_BATCH ? max : VERBS_POLL_BATCH, wcs);
  if (n < 0) {
    weft_log(WEFT_LOG_ERROR, "verbs: ibv_poll_cq failed");
    n = 0;
  }
  /* Refill the SRQ before any handler runs. */
  for (int i = 0; i < n; i++)
    if (wcs[i].wr_id & VERBS_WR_RECV)
      g->posted--;
  if (n > 0)
    weft__verbs_group_refill(g);
  for (int i = 0; i < n; i++) {
    verbs_recv_verdict v;
    switch (weft__verbs_recv_route(d, &wcs[i], &v)) {
    case VERBS_RECV_SEND:
      on_send(d, v.vc, &wcs[i]);
      break;
    case VERBS_RECV_BAD_SLOT:
      weft_log(WEFT_LOG_ERROR, "verbs: a receive completion names slot %llu",
               (unsigned long long)(wcs[i].wr_id & ~VERBS_WR_RECV));
      break; /* not a slot of ours: nothing to put back */
    default:
      on_recv(d, &v);
    }
  }
  return n;
}

int weft__verbs_dev_poll(weft_source *src, int budget) {
  verbs_dev *d = src->data;
  if (!d->taking_in)
    d->epoch++; /* a new read budget for every channel */
  int handled = deliver_pending(d);
  if (handled > 0)
    finish_batch(d);
  /* Every group's CQ in turn, starting one further each time, so a busy
   * group cannot keep the others waiting. */
  int left = budget > 0 ? budget : 1;
  uint32_t n_groups = d->n_groups;
  for (uint32_t k = 0; k < n_groups && left > 0; k++) {
    verbs_group *g = d->groups[(d->next_poll + k) % n_groups];
    int n = group_poll(g, left);
    finish_batch(d);
    handled += n;
    left -= n;
  }
  if (n_groups > 0)
    d->next_poll = (d->next_poll + 1) % n_groups;
  return handled;
}

/* Arms the groups' CQs, then polls once more: a completion that landed
 * between the last poll and the arm raises no event. That poll takes the
 * completions in but delivers no message (`taking_in`: the read budget):
 * the next poll does. A CQ stays armed until its event comes
 * (dev_wakeup), so an idle loop asks once. */
int weft__verbs_dev_arm(weft_source *src) {
  verbs_dev *d = src->data;
  if (d->deliver != NULL)
    return 1;
  for (uint32_t i = 0; i < d->n_groups; i++) {
    verbs_group *g = d->groups[i];
    if (g->armed)
      continue;
    if (ibv_req_notify_cq(g->cq, 0) != 0)
      weft_log(WEFT_LOG_ERROR, "verbs: ibv_req_notify_cq failed");
    else
      g->armed = true;
  }
  d->taking_in = true;
  int n = weft__verbs_dev_poll(src, VERBS_POLL_BATCH);
  d->taking_in = false;
  return n > 0 ? n : d->deliver != NULL;
}

void weft__verbs_dev_take_in(verbs_dev *d) {
  bool was = d->taking_in;
  d->taking_in = true;
  int n;
  do {
    n = 0;
    for (uint32_t k = 0; k < d->n_groups; k++) {
      n += group_poll(d->groups[k], VERBS_POLL_BATCH);
      finish_batch(d);
    }
  } while (n > 0);
  d->taking_in = was;
}

/* Takes the CQ events off the completion channel; acknowledges in batches
 * (ibv_ack_cq_events takes a lock). */
void weft__verbs_dev_wakeup(weft_source *src, uint32_t events) {
  (void)events;
  verbs_dev *d = src->data;
  struct ibv_cq *cq;
  void *ctx;
  while (ibv_get_cq_event(d->cc, &cq, &ctx) == 0) {
    verbs_group *g = ctx;
    g->armed = false;
    if (++g->cq_unacked >= VERBS_CQ_ACK_BATCH) {
      ibv_ack_cq_events(g->cq, g->cq_unacked);
      g->cq_unacked = 0;
    }
  }
}
