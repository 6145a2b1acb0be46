/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the verbs receive path's routing, the real one:
 * weft__verbs_recv_route (transports/verbs/recv.c), which group_poll
 * calls for every work completion, with the device's real QP number map
 * (weft__verbs_hash_add/del/find, loop.c) and weft__verbs_rx_check
 * behind it. Several channels interleave; channels close (lingering, then
 * gone) and their QP numbers come back with new channels, as a device
 * reuses them. No device: the completions are made up, and the route
 * makes no verbs call.
 *
 * The input is a script; each step is an opcode byte and its operands:
 *
 *   0 k q    channel k opens on QP number q (of QPNS): books as after the
 *            handshake (granted VERBS_CREDITS, a window from the input),
 *            established or a passive one still connecting; its old self
 *            is gone first;
 *   1 k      channel k closes: lingering (its QP still mapped), or, a
 *            second time, gone (out of the map);
 *   2 k ..   a receive completion on channel k's QP number (or any of
 *            QPNS), with a slot (sometimes not ours), a status, an
 *            opcode, wc_flags, imm_data and a length from the input;
 *   3 k ..   a send completion on that QP number;
 *   4 k      channel k's handlers release a slot and it returns its
 *            credits (weft__verbs_returnable, as send.c does).
 *
 * After every completion the isolation and the books must hold (a broken
 * one aborts: a finding): only the channel mapped to the completion's QP
 * number may change, and not at all when it is closing or gone, when the
 * completion is a send's, names no slot of ours or failed; a message taken
 * (DATA, CONTROL) was not after the peer's FIN, a DATA message spent one
 * credit the peer held, and granted + slots in use never exceed
 * VERBS_CREDITS; a refused one leaves the books as they were and says
 * why. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_script.h"
#include "transports/verbs/verbs_internal.h"

#define CHANS 6
#define QPNS 4     /* QP numbers in use: channels share and reuse them */
#define SLOTS 64u  /* the device's slots; wr_ids name up to twice that */
#define BUCKETS 8u /* the map's buckets (a power of two) */

/* A channel as the receive path sees it, and the slots its handlers hold
 * (the real path's in_use, which take_data and the slot release keep). */
typedef struct chan {
  verbs_chan vc;
  bool mapped; /* in the device's map */
  uint32_t in_use;
} chan;

static verbs_dev dev;
static verbs_chan *buckets[BUCKETS];
static chan chans[CHANS];

static uint32_t qpn(uint32_t i) { return 0x100u + (i % QPNS) * BUCKETS; }

static void dev_reset(void) {
  memset(&dev, 0, sizeof dev);
  memset(buckets, 0, sizeof buckets);
  memset(chans, 0, sizeof chans);
  dev.hash = buckets;
  dev.hash_mask = BUCKETS - 1;
  dev.n_slots = SLOTS;
}

/* Gone: out of the map. */
static void chan_gone(chan *c) {
  if (c->mapped)
    weft__verbs_hash_del(&dev, &c->vc);
  c->mapped = false;
  c->vc.state = VC_DONE;
}

static void chan_open(chan *c, uint32_t q, uint8_t how) {
  chan_gone(c);
  for (int i = 0; i < CHANS; i++) /* a QP number comes back only once its
                                     QP was destroyed */
    if (chans[i].mapped && chans[i].vc.qp_num == qpn(q))
      chan_gone(&chans[i]);
  memset(c, 0, sizeof *c);
  c->vc.kind = KIND_CHANNEL;
  c->vc.qp_num = qpn(q);
  c->vc.passive = (how & 1) != 0;
  c->vc.state = (how & 2) ? VC_CONNECTING : VC_ESTABLISHED;
  c->vc.flow.granted = VERBS_CREDITS;
  c->vc.flow.window = 1u + (how >> 4) % VERBS_CREDITS;
  c->vc.flow.credits = (int32_t)c->vc.flow.window;
  weft__verbs_hash_add(&dev, &c->vc);
  c->mapped = true;
}

static void chan_close(chan *c) {
  if (c->mapped && c->vc.state != VC_LINGER)
    c->vc.state = VC_LINGER; /* FIN posted, its QP still there */
  else
    chan_gone(c);
}

/* The channel the map gives `q`: the one mapped on that QP number (one
 * at most: chan_open). */
static chan *owner_of(uint32_t q) {
  verbs_chan *vc = weft__verbs_hash_find(&dev, q);
  for (int i = 0; i < CHANS; i++)
    if (vc == &chans[i].vc)
      return &chans[i];
  return NULL;
}

static void check_books(const chan *c) {
  const verbs_flow *f = &c->vc.flow;
  if (f->granted + c->in_use > VERBS_CREDITS || f->credits < 0 ||
      (uint32_t)f->credits > f->window || f->window > VERBS_CREDITS)
    abort();
}

/* One completion `wc` through the route; the isolation and the books. */
static void complete(const struct ibv_wc *wc) {
  chan before[CHANS];
  memcpy(before, chans, sizeof before);
  chan *own = owner_of(wc->qp_num);
  verbs_recv_verdict v;
  memset(&v, 0, sizeof v);
  verbs_recv_action a = weft__verbs_recv_route(&dev, wc, &v);
  for (int i = 0; i < CHANS; i++)
    if (&chans[i] != own && (memcmp(&before[i].vc.flow, &chans[i].vc.flow,
                                    sizeof(verbs_flow)) != 0 ||
                             before[i].vc.state != chans[i].vc.state))
      abort(); /* another channel changed */
  if (v.vc != (own != NULL ? &own->vc : NULL))
    abort(); /* judged as another channel's */
  if (own == NULL)
    return;
  size_t k = (size_t)(own - chans);
  const verbs_flow *f0 = &before[k].vc.flow, *f = &own->vc.flow;
  bool changed = memcmp(f0, f, sizeof *f) != 0;
  switch (a) {
  case VERBS_RECV_DATA:
  case VERBS_RECV_CONTROL:
    if (before[k].vc.state == VC_DONE || before[k].vc.state == VC_LINGER ||
        f0->fin)
      abort(); /* taken for a closing channel, or after FIN */
    if (a == VERBS_RECV_DATA) {
      if (v.len == 0 || v.len > VERBS_SLOT_SIZE ||
          f->granted + 1 != f0->granted)
        abort(); /* a data message spends one credit the peer held */
      own->in_use++;
    } else if (f->granted != f0->granted || v.len != 0) {
      abort();
    }
    if (v.fin != f->fin)
      abort();
    break;
  case VERBS_RECV_FAILED:
  case VERBS_RECV_VIOLATION:
    if (changed || v.why[0] == '\0' || v.err >= 0)
      abort(); /* refused: the books as they were, and why */
    break;
  default: /* SEND, BAD_SLOT, DROP */
    if (changed || before[k].vc.state != own->vc.state)
      abort();
  }
  check_books(own);
}

static void receive(script *s, int k, bool recv) {
  uint8_t pick = take8(s);
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.qp_num = (pick & 1) ? qpn(take8(s)) : chans[k].vc.qp_num;
  uint32_t slot = take8(s) % (2u * SLOTS);
  wc.wr_id = recv ? (VERBS_WR_RECV | slot) : take32(s) & ~VERBS_WR_RECV;
  wc.status = (pick & 2) ? (enum ibv_wc_status)(take8(s) % 22) : IBV_WC_SUCCESS;
  wc.opcode = (pick & 4) ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  wc.wc_flags = (pick & 8) ? 0 : IBV_WC_WITH_IMM;
  uint32_t imm = (pick & 16) ? take32(s) : take8(s) % 4u;
  if (pick & 32)
    imm |= VERBS_IMM_FIN;
  wc.imm_data = htonl(imm);
  wc.byte_len = (pick & 64) ? take32(s) : take8(s) % 2 ? 0 : 1u + take8(s);
  complete(&wc);
}

/* The handlers release a slot, and the channel returns its credits. */
static void release(chan *c) {
  if (c->in_use > 0)
    c->in_use--;
  c->vc.flow.granted += weft__verbs_returnable(&c->vc.flow, c->in_use);
  check_books(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  script s = {data, size};
  dev_reset();
  for (int i = 0; i < CHANS; i++)
    chans[i].vc.state = VC_DONE;
  while (s.left > 0) {
    uint8_t op = take8(&s) % 5;
    int k = take8(&s) % CHANS;
    switch (op) {
    case 0: {
      uint32_t q = take8(&s);
      chan_open(&chans[k], q, take8(&s));
      break;
    }
    case 1:
      chan_close(&chans[k]);
      break;
    case 2:
      receive(&s, k, true);
      break;
    case 3:
      receive(&s, k, false);
      break;
    default:
      release(&chans[k]);
    }
  }
  return 0;
}
