/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the bytes a verbs peer controls (no device needed):
 * the hello of the handshake (weft__verbs_hello_parse), then a run of
 * received messages (weft__verbs_rx_check: kind, imm_data, length) mixed
 * with what this side does meanwhile (deliver a held message, in its slot
 * or as a copy past VERBS_ZC_MAX; a handler releases a slot; return
 * credits with weft__verbs_returnable; send a data message), against one
 * channel's credit books.
 *
 * Input: byte 0 is the hello's length (0xff: no private data at all), the
 * hello follows; then records of 10 bytes: an op byte, imm_data (network
 * order, as on the wire) and a length (network order). After every step
 * the books must keep their invariants: granted + in_use <= VERBS_CREDITS
 * (in_use: held plus the handlers' slots, so held[] cannot overflow and a
 * channel never holds more slots than its share), handlers' slots <=
 * VERBS_ZC_MAX, 0 <= credits <= window; a rejected message must leave the
 * books unchanged and say why. A violation aborts. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transports/verbs/verbs_internal.h"

/* The channel as the receive path sees it: the books, the held count and
 * the slots its handlers keep (recv.c, group.c). */
typedef struct model {
  verbs_flow flow;
  uint32_t held;
  uint32_t zc;
} model;

static void check(const model *m) {
  const verbs_flow *f = &m->flow;
  if (f->granted + m->held + m->zc > VERBS_CREDITS || m->zc > VERBS_ZC_MAX ||
      f->credits < 0 || (uint32_t)f->credits > f->window ||
      f->window > VERBS_CREDITS)
    abort();
}

static uint32_t be32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return ntohl(v);
}

/* The reason buffer's size: small ones test truncation. */
static size_t why_len_of(uint8_t op) {
  static const size_t lens[4] = {0, 1, 24, 160};
  return lens[(op >> 4) & 3];
}

static void peer_message(model *m, uint8_t op, uint32_t imm, uint32_t len) {
  verbs_rx rx = {.rdma_write = (op & 0x04) != 0,
                 .with_imm = (op & 0x08) == 0,
                 .imm = imm,
                 .len = len % (2 * VERBS_SLOT_SIZE + 1)};
  char why[160];
  size_t why_len = why_len_of(op);
  memset(why, 0, sizeof why);
  verbs_flow before = m->flow;
  int rc = weft__verbs_rx_check(&m->flow, &rx, why, why_len);
  if (rc == 0) {
    if (rx.len > 0)
      m->held++; /* held_push: must have room */
    return;
  }
  if (rc != WEFT_EPROTO || memcmp(&before, &m->flow, sizeof before) != 0)
    abort();
  if (why_len > 1 && why[0] == '\0')
    abort(); /* a violation without a reason */
  if (why_len > 0 && strnlen(why, why_len) == why_len)
    abort(); /* not terminated */
}

/* What this side does between the peer's messages (recv.c, send.c,
 * group.c). */
static void local_step(model *m, uint8_t op) {
  switch (op & 3) {
  case 1: /* a held message goes up the pipeline (deliver_held) */
    if (m->held > 0) {
      m->held--;
      if (m->zc + 1 <= VERBS_ZC_MAX)
        m->zc++; /* in its slot; past VERBS_ZC_MAX a copy, the slot freed */
    }
    break;
  case 2: /* take_returns: the credits for slots no longer held */
    m->flow.granted += weft__verbs_returnable(&m->flow, m->held + m->zc);
    break;
  case 3:
    if (op & 4) { /* a handler releases a received buffer */
      if (m->zc > 0)
        m->zc--;
    } else if (m->flow.credits > 0) { /* post_data spends a credit */
      m->flow.credits--;
    }
    break;
  default:
    break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  size_t hlen = data[0] == 0xff ? 0 : data[0];
  const uint8_t *hello = data[0] == 0xff ? NULL : data + 1;
  data++, size--;
  if (hlen > size)
    hlen = size;
  verbs_peer peer = {0};
  char why[160];
  model m = {.flow = {.granted = VERBS_CREDITS}};
  if (weft__verbs_hello_parse(hello, hlen, &peer, why, sizeof why) == 0) {
    if (peer.credits == 0 || peer.credits > VERBS_CREDITS ||
        peer.recv_size == 0 || peer.recv_size > VERBS_MAX_RECV_SIZE)
      abort();
    m.flow.window = peer.credits;
    m.flow.credits = peer.credits;
  } else if (why[0] == '\0') {
    abort();
  }
  if (hello != NULL)
    data += hlen, size -= hlen;
  for (; size >= 10; data += 10, size -= 10) {
    if ((data[0] & 3) == 0)
      peer_message(&m, data[0], be32(data + 1), be32(data + 5));
    else
      local_step(&m, data[0]);
    check(&m);
  }
  return 0;
}
