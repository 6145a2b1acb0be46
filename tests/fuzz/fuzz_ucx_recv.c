/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the UCX receive path's routing, the real one:
 * weft__ucx_recv_route (transports/ucx/recv.c), which the AM handler calls
 * for every message, with the loop's real channel table
 * (weft__ucx_slot_take/free) and ep index (weft__ucx_ep_index/find), and
 * weft__ucx_hdr_check behind it. Several peers (eps) interleave; their
 * messages name their own channel, another peer's, or a slot of a past
 * generation. No UCX runs: the route makes no UCX call, and the eps are
 * addresses the target makes up.
 *
 * The input is a script; each step is an opcode byte and its operands:
 *
 *   0 k      peer k (of PEERS) connects: its channel takes a slot, its ep
 *            is indexed (nothing if it is open);
 *   1 k      peer k's channel closes: slot freed (its generation moves
 *            on), ep out of the index;
 *   2 k      peer k says HELLO (valid, window and max_message from the
 *            input);
 *   3 k j .. peer k sends a message naming peer j's channel (j == k: its
 *            own) with a generation delta, a type, a sequence delta, a
 *            length, a credit grant and a rendezvous flag from the input;
 *   4 k j .. peer k sends a message without its ep (no reply flag), as
 *            message 3 names peer j's channel.
 *
 * The first byte's bit 0 sets error_mode = none, where a message without
 * its ep is routed by the slot it names (recv.c); else it is dropped.
 *
 * After every message the isolation must hold (a broken one aborts: a
 * finding): only the sending peer's channel may change (without an ep,
 * with error_mode = none: only the channel named, and only by a message
 * with that channel's next sequence number, which its HELLO chose from
 * the input: weft__ucx_wire_from_peer); a message taken (TAKE)
 * named that channel's own slot and generation (or was its HELLO); a
 * message on a closed peer's ep, or without an ep where that is not
 * allowed, is dropped; a VIOLATION is the sender's, and its later messages
 * are dropped. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

#include "tests/fuzz/fuzz_script.h"
#include "transports/ucx/ucx_internal.h"

#define PEERS 6

/* A peer: its ep (an address of this array, never dereferenced), the
 * record the index holds, its channel on this side. */
typedef struct peer {
  char ep_mem;
  ucx_epr r;
  ucx_channel uc;
  bool open;
} peer;

static ucx_loop tl;
static peer peers[PEERS];

/* A fresh loop: no channel, no ep (the table keeps its slots between
 * inputs only within one; it is freed after each). */
static void loop_reset(void) {
  free(tl.slots);
  free(tl.ep_buckets);
  memset(&tl, 0, sizeof tl);
  tl.free_head = tl.free_tail = UINT32_MAX;
  tl.ep_mask = 63;
  tl.ep_buckets = calloc(tl.ep_mask + 1, sizeof *tl.ep_buckets);
  if (tl.ep_buckets == NULL)
    abort();
  tl.warned_header = true; /* no log line per input */
  memset(peers, 0, sizeof peers);
}

static void peer_open(peer *p) {
  if (p->open)
    return;
  memset(&p->uc, 0, sizeof p->uc);
  p->uc.tl = &tl;
  weft__ucx_wire_init(&p->uc.w, 64u * 1024u, 4096u, false);
  if (weft__ucx_slot_take(&tl, &p->uc) < 0)
    return;
  p->r = (ucx_epr){.ep = (ucp_ep_h)&p->ep_mem, .uc = &p->uc};
  p->uc.epr = &p->r;
  p->uc.ep = p->r.ep;
  weft__ucx_ep_index(&tl, &p->r);
  p->open = true;
}

static void peer_close(peer *p) {
  if (!p->open)
    return;
  weft__ucx_slot_free(&tl, &p->uc);
  weft__ucx_ep_unindex(&tl, &p->r);
  p->open = false;
}

/* The open peer whose channel slot reference `ref` names, -1 if none. */
static int named_peer(uint32_t ref) {
  for (int i = 0; i < PEERS; i++)
    if (peers[i].open && peers[i].uc.id == weft__ucx_ref_id(ref) &&
        peers[i].uc.gen == weft__ucx_ref_gen(ref))
      return i;
  return -1;
}

/* Sends `h` (+ `len` bytes, `rndv`) on peer k's ep (`with_ep`; without
 * it, as a peer with error_mode = none sends) and checks the isolation:
 * only the channel of the ep, or without one (error_mode = none here) of
 * the slot named, may take it. */
static void deliver(int k, const ucx_hdr *h, size_t len, bool rndv,
                    bool with_ep) {
  static uint8_t data[UCX_HELLO_DATA + 4096];
  if (len > sizeof data && !rndv)
    len = sizeof data;
  ucx_wire before[PEERS];
  for (int i = 0; i < PEERS; i++)
    before[i] = peers[i].uc.w;
  ucx_recv_msg m = {.has_ep = with_ep,
                    .ep = (ucp_ep_h)&peers[k].ep_mem,
                    .header = h,
                    .header_len = sizeof *h,
                    .data = data,
                    .len = len,
                    .rndv = rndv};
  ucx_recv_verdict v;
  ucx_recv_action a = weft__ucx_recv_route(&tl, &m, &v);
  int owner = with_ep ? k : -1;
  if (!with_ep && tl.cfg.err_mode_none &&
      weft__ucx_ref_type(h->to) != UMSG_HELLO)
    owner = named_peer(h->to);
  for (int i = 0; i < PEERS; i++)
    if (i != owner && memcmp(&before[i], &peers[i].uc.w, sizeof before[i]) != 0)
      abort(); /* another peer's channel changed */
  if (owner < 0) {
    if (a != UCX_RECV_DROP)
      abort(); /* taken from nobody's */
    return;
  }
  k = owner;
  peer *p = &peers[k];
  if ((!p->open || p->uc.violation[0] != '\0') && a != UCX_RECV_DROP)
    abort(); /* taken for a closed or closing channel */
  if (a == UCX_RECV_DROP || a == UCX_RECV_HELD) {
    if (memcmp(&before[k], &p->uc.w, sizeof before[k]) != 0)
      abort();
    return;
  }
  if (v.uc != &p->uc)
    abort(); /* judged as another peer's */
  if (!with_ep && !weft__ucx_wire_from_peer(&before[k], h))
    abort(); /* without its ep, it did not show it is the peer's, yet it
                was taken or closed the channel */
  if (a == UCX_RECV_VIOLATION) {
    if (memcmp(&before[k], &p->uc.w, sizeof before[k]) != 0 || v.why[0] == 0)
      abort(); /* a refused message leaves the state and says why */
    p->uc.violation[0] = 'x'; /* as the AM handler marks it */
    return;
  }
  if (v.type != UMSG_HELLO && (weft__ucx_ref_id(h->to) != p->uc.id ||
                               weft__ucx_ref_gen(h->to) != p->uc.gen))
    abort(); /* took a message naming another channel */
}

/* Peer k's HELLO: valid unless the input's window or max_message is out
 * of the limits. */
static void hello(script *s, int k) {
  uint32_t window = UCX_WINDOW_MIN + (take32(s) % (2u * UCX_WINDOW_MIN));
  ucx_hdr h = {.to = weft__ucx_slot_ref(UMSG_HELLO, 0, 0),
               .seq = weft__ucx_slot_ref(UCX_WIRE_VERSION, (uint32_t)k, 0),
               .credit = window};
  static uint32_t d[3];
  d[0] = UCX_MAX_MESSAGE_MIN + take8(s);
  d[1] = 0;
  d[2] = take32(s); /* the first sequence number of its DATA */
  peer *p = &peers[k];
  ucx_wire before[PEERS];
  for (int i = 0; i < PEERS; i++)
    before[i] = peers[i].uc.w;
  ucx_recv_msg hm = {.has_ep = true,
                     .ep = (ucp_ep_h)&p->ep_mem,
                     .header = &h,
                     .header_len = sizeof h,
                     .data = d,
                     .len = sizeof d};
  ucx_recv_verdict v;
  ucx_recv_action a = weft__ucx_recv_route(&tl, &hm, &v);
  for (int i = 0; i < PEERS; i++)
    if (i != k && memcmp(&before[i], &peers[i].uc.w, sizeof before[i]) != 0)
      abort();
  if (a == UCX_RECV_VIOLATION)
    p->uc.violation[0] = 'x';
  if (a == UCX_RECV_TAKE && v.uc != &p->uc)
    abort();
}

/* Peer k's message naming peer j's channel, perturbed by the input; sent
 * with its ep unless `no_ep`. */
static void message(script *s, int k, bool no_ep) {
  int j = take8(s) % PEERS;
  uint8_t gen_delta = take8(s) % 4; /* 0: the slot's current generation */
  uint32_t type = 1u + take8(s) % 9u;
  uint32_t seq = peers[j].uc.w.recv_seq + (take8(s) % 3u);
  uint32_t len = take32(s) % 8192u;
  uint32_t credit = take8(s) % 2 ? 0 : take32(s) % 4096u;
  bool rndv = take8(s) % 8 == 0;
  ucx_hdr h = {
      .to = weft__ucx_slot_ref(type, peers[j].uc.id,
                               (peers[j].uc.gen - gen_delta) & UCX_GEN_MASK),
      .seq =
          type == UMSG_HELLO || type == UMSG_HELLO_ACK || type == UMSG_REDIRECT
              ? weft__ucx_slot_ref(UCX_WIRE_VERSION, (uint32_t)k, 0)
              : seq,
      .credit = credit};
  if (type != UMSG_DATA)
    len = len % 16 == 0 ? len : 0;
  deliver(k, &h, len, rndv, !no_ep);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  script s = {data, size};
  loop_reset();
  tl.cfg.err_mode_none = (take8(&s) & 1) != 0;
  while (s.left > 0) {
    uint8_t op = take8(&s) % 5;
    int k = take8(&s) % PEERS;
    switch (op) {
    case 0:
      peer_open(&peers[k]);
      break;
    case 1:
      peer_close(&peers[k]);
      break;
    case 2:
      hello(&s, k);
      break;
    case 3:
      message(&s, k, false);
      break;
    default:
      message(&s, k, true);
    }
  }
  for (int i = 0; i < PEERS; i++)
    peer_close(&peers[i]);
  return 0;
}
