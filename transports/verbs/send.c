/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/send.c: the send path. flush gathers the flushed
 * outbound buffers into SEND_WITH_IMM work requests (inline, straight from
 * registered memory, or through one copy into a pool buffer), posts them
 * chained with sparse signaling, and spends the peer's credits while it
 * hands ours back in imm_data or in a credit message. Send records keep the
 * buffers until a signaled completion retires them (recv.c dispatches the
 * completions). "Send path" and "Flow control" in verbs_internal.h say why.
 */
#include <arpa/inet.h>
#include <sys/types.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>

#include "transports/verbs/verbs_internal.h"

/* ---- sending ---- */

static uint32_t take_returns(verbs_chan *vc) {
  uint32_t r = returnable(vc);
  vc->flow.granted += r;
  return r;
}

/* The lkey of registered memory at `p` inside `b`, or false. */
static bool lkey_of(const verbs_dev *d, const weft_buf *b, const uint8_t *p,
                    uint32_t *lkey) {
  if (slab_lkey(d, p, lkey))
    return true; /* a received buffer sent on (echo) */
  uint64_t k = weft_buf_mem_key(b, d->pool_hook);
  if (k == WEFT_MEM_KEY_NONE)
    return false;
  const struct ibv_mr *mr = (const struct ibv_mr *)(uintptr_t)k;
  if (mr->pd != d->pd)
    return false; /* another loop's pool: another PD */
  *lkey = mr->lkey;
  return true;
}

/* Releases the buffers of send records up to and including `seq`. */
void weft__verbs_retire_sends(verbs_chan *vc, uint64_t seq) {
  while (vc->sq_head < vc->sq_tail && vc->sq_head <= seq) {
    send_rec *r = &vc->recs[vc->sq_head % VERBS_SQ_DEPTH];
    for (uint8_t i = 0; i < r->n; i++)
      weft_buf_release(r->bufs[i]);
    r->n = 0;
    vc->sq_head++;
  }
}

/* Where the gather stands in the outbound queue. */
typedef struct gather {
  size_t idx; /* outbound buffer */
  size_t off; /* bytes of it already taken */
  size_t count;
} gather;

/* Fills one work request from the outbound queue. Returns its bytes (0 =
 * nothing left) or an error. */
static ssize_t build_wr(verbs_chan *vc, gather *g, struct ibv_send_wr *wr,
                        struct ibv_sge *sge, send_rec *rec) {
  verbs_dev *d = vc->dev;
  size_t total = 0;
  int n = 0;
  bool copy = false;
  weft_buf *bufs[VERBS_MAX_SGE];
  while (g->idx < g->count && n < d->max_sge && total < vc->peer_recv_size) {
    weft_buf *b = weft_outbound_buf(vc->ch, g->idx);
    size_t avail = weft_buf_readable(b) - g->off;
    if (avail == 0) {
      g->idx++, g->off = 0;
      continue;
    }
    size_t take =
        avail < vc->peer_recv_size - total ? avail : vc->peer_recv_size - total;
    uint8_t *p = weft_buf_rptr(b) + g->off;
    uint32_t lkey = 0;
    if (!lkey_of(d, b, p, &lkey))
      copy = true;
    sge[n] = (struct ibv_sge){
        .addr = (uintptr_t)p, .length = (uint32_t)take, .lkey = lkey};
    bufs[n++] = b;
    total += take;
    g->off += take;
    if (g->off == weft_buf_readable(b))
      g->idx++, g->off = 0;
  }
  if (total == 0)
    return 0;
  rec->n = 0;
  *wr = (struct ibv_send_wr){
      .opcode = IBV_WR_SEND_WITH_IMM, .sg_list = sge, .num_sge = n};
  if (total <= d->max_inline) {
    wr->send_flags = IBV_SEND_INLINE; /* copied at post time */
  } else if (copy) {
    /* Memory no hook registered: one copy into a registered pool buffer. */
    weft_buf *c =
        weft_buf_alloc(weft_loop_pool(weft_channel_loop(vc->ch)), total);
    if (c == NULL)
      return WEFT_ENOMEM;
    for (int i = 0; i < n; i++)
      weft_buf_write_bytes(c, (void *)(uintptr_t)sge[i].addr, sge[i].length);
    uint32_t lkey;
    if (!lkey_of(d, c, weft_buf_rptr(c), &lkey)) {
      weft_buf_release(c);
      return WEFT_EIO;
    }
    sge[0] = (struct ibv_sge){.addr = (uintptr_t)weft_buf_rptr(c),
                              .length = (uint32_t)total,
                              .lkey = lkey};
    wr->num_sge = 1;
    rec->bufs[rec->n++] = c;
  } else {
    for (int i = 0; i < n; i++)
      rec->bufs[rec->n++] = weft_buf_retain(bufs[i]);
  }
  return (ssize_t)total;
}

/* Releases the records of `n` work requests built but not posted. */
static void release_recs(verbs_chan *vc, int n) {
  for (int i = 0; i < n; i++) {
    send_rec *r = &vc->recs[(vc->sq_tail + (uint64_t)i) % VERBS_SQ_DEPTH];
    for (uint8_t k = 0; k < r->n; k++)
      weft_buf_release(r->bufs[k]);
    r->n = 0;
  }
}

/* Posts `n` chained work requests; on failure the records taken for them
 * are released again. */
static int post_chain(verbs_chan *vc, struct ibv_send_wr *wrs, int n) {
  for (int i = 0; i < n; i++) {
    uint64_t seq = vc->sq_tail + (uint64_t)i;
    wrs[i].wr_id = seq;
    wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
    /* Signal the last of the post, and one every half queue, so send
     * records retire and the queue cannot fill with unsignaled work. */
    if (i == n - 1 || seq - vc->last_signaled >= VERBS_SQ_DEPTH / 2) {
      wrs[i].send_flags |= IBV_SEND_SIGNALED;
      vc->last_signaled = seq;
    }
  }
  struct ibv_send_wr *bad = NULL;
  int rc = ibv_post_send(vc->qp, wrs, &bad);
  if (rc != 0) {
    release_recs(vc, n);
    return rc > 0 ? -rc : WEFT_EIO;
  }
  vc->sq_tail += (uint64_t)n;
  return 0;
}

/* Posts data while credits and send queue allow, gathering queued buffers.
 * Returns 0 or an error. Promises run in weft_outbound_consumed. */
static int post_data(verbs_chan *vc) {
  struct ibv_send_wr wrs[VERBS_POST_BATCH];
  struct ibv_sge sges[VERBS_POST_BATCH][VERBS_MAX_SGE];
  for (;;) {
    if (vc->state != VC_ESTABLISHED || !vc_active(vc) ||
        weft_outbound_is_empty(vc->ch))
      return 0;
    gather g = {.count = weft_outbound_count(vc->ch)};
    int n = 0;
    size_t bytes = 0;
    while (n < VERBS_POST_BATCH && vc->flow.credits > 0 &&
           vc->sq_tail + (uint64_t)n - vc->sq_head < VERBS_SQ_DEPTH) {
      send_rec *rec = &vc->recs[(vc->sq_tail + (uint64_t)n) % VERBS_SQ_DEPTH];
      ssize_t got = build_wr(vc, &g, &wrs[n], sges[n], rec);
      if (got < 0) {
        release_recs(vc, n);
        return (int)got;
      }
      if (got == 0)
        break;
      wrs[n].imm_data = htonl(take_returns(vc) & VERBS_IMM_CREDITS);
      vc->flow.credits--;
      bytes += (size_t)got;
      n++;
    }
    if (n == 0) {
      if (g.idx >= g.count) /* only empty buffers: complete them */
        weft_outbound_consumed(vc->ch, 0);
      return 0;
    }
    int err = post_chain(vc, wrs, n);
    if (err < 0)
      return err;
    weft_outbound_consumed(vc->ch, bytes);
  }
}

/* A zero-length message: returned credits, and FIN when closing. */
int weft__verbs_post_control(verbs_chan *vc, uint32_t flags) {
  struct ibv_send_wr wr = {.opcode = IBV_WR_SEND_WITH_IMM, .num_sge = 0};
  wr.imm_data = htonl(flags | (take_returns(vc) & VERBS_IMM_CREDITS));
  vc->recs[vc->sq_tail % VERBS_SQ_DEPTH].n = 0;
  return post_chain(vc, &wr, 1);
}

/* Sends what can go now: data, then a credit message if enough credits
 * wait and no data carried them. The caller holds a channel reference. */
int weft__verbs_send_pending(verbs_chan *vc) {
  if (vc->in_flush || vc->state != VC_ESTABLISHED || vc->errored)
    return 0;
  vc->in_flush = true;
  /* Slots that came back since the last refill: receives first, then the
   * credits for them (returnable() is 0 while the refill is short). */
  if (vc->grp != NULL)
    weft__verbs_group_refill(vc->grp);
  int err = post_data(vc);
  if (err == 0 && vc->state == VC_ESTABLISHED &&
      returnable(vc) >= VERBS_CREDIT_THRESHOLD && sq_room(vc))
    err = weft__verbs_post_control(vc, 0);
  vc->in_flush = false;
  return err;
}

int weft__verbs_flush(weft_channel *ch) {
  verbs_chan *vc = vc_of(ch);
  weft_channel_retain(ch); /* a promise may close and free the channel */
  int err = weft__verbs_send_pending(vc);
  weft_channel_release(ch);
  return err;
}
