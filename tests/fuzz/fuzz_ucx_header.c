/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for what a UCX peer controls: the 12-byte message
 * header and the data length (and the handshake's 8 bytes of data, a
 * REDIRECT's listener ports) that
 * weft__ucx_hdr_check (transports/ucx/wire.c) judges against a channel's
 * wire state. No UCX is needed: the check is pure.
 *
 * The input is a script. Its first byte picks this side's settings (window,
 * max_message, connecting or accepting side); then each step is an opcode
 * byte and its operands:
 *
 *   0  a raw message: 12 header bytes, 4 length bytes, a flags byte
 *      (bit 0: rendezvous), 8 bytes of data (the rest of the data: 0);
 *   1  a message built from the state and perturbed by the input, so the
 *      fuzzer reaches the valid paths too: type, sequence delta, length,
 *      credit, version, window, max_message, flags or server id; for a
 *      REDIRECT its server id, index, listener count and ports;
 *   2  the pipeline reads everything queued: its credit becomes owed;
 *   3  this side grants the owed credit back (a CREDIT message);
 *   4  this side sends a DATA message of up to the length given, carrying
 *      the owed credit.
 *
 * After every step the accounting must hold: the credit this side granted
 * is either still the peer's, queued, or owed (recv_credit + queued + owed
 * == window); the credit the peer granted is either left or outstanding
 * (send_credit + send_unacked == the peer's window); the queue holds at
 * most window / (UCX_MSG_COST + 1) messages; a refused message leaves the
 * state as it was and says why. A broken invariant aborts: a finding. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

#include "tests/fuzz/fuzz_script.h"
#include "transports/ucx/ucx_internal.h"

/* The most data a check reads: a REDIRECT's for UCX_MAX_LISTENERS. */
#define DATA_MAX (UCX_REDIRECT_HEAD + 4u * UCX_MAX_LISTENERS)

/* The receiver's side beyond the check: what is queued and owed. */
typedef struct model {
  ucx_wire w;
  uint64_t queued;   /* credit of the messages in the queue */
  uint64_t n_queued; /* messages (DATA) in the queue */
  uint64_t owed;     /* credit delivered, not granted back */
  uint32_t peer_window;
} model;

/* Aborts unless the accounting holds (see the top of this file). */
static void check_invariants(const model *m) {
  const ucx_wire *w = &m->w;
  if (w->recv_credit + m->queued + m->owed != w->window)
    abort();
  if (m->n_queued > w->window / (UCX_MSG_COST + 1))
    abort();
  if (w->peer_known && w->send_credit + w->send_unacked != m->peer_window)
    abort();
  if (!w->peer_known && (w->send_credit != 0 || w->send_unacked != 0))
    abort();
  size_t n = weft__ucx_wire_sendable(w);
  if (n > w->max_message || n > w->peer_max_message)
    abort();
  if (n > 0 && n + UCX_MSG_COST > w->send_credit)
    abort();
}

/* One message from the peer, through the check. */
static void receive(model *m, const ucx_hdr *h, size_t len, bool rndv,
                    const uint8_t data[DATA_MAX]) {
  ucx_wire before = m->w;
  char why[128];
  why[0] = '\0';
  int rc = weft__ucx_hdr_check(&m->w, h, sizeof *h, rndv ? NULL : data, len,
                               rndv, why, sizeof why);
  if (rc == UCX_HDR_FOREIGN)
    abort(); /* weft's size */
  if (rc != 0) {
    if (memcmp(&before, &m->w, sizeof before) != 0)
      abort(); /* a refused message changed the state */
    if (rc != WEFT_EPROTO && rc != WEFT_EMSGSIZE)
      abort();
    if (why[0] == '\0' || memchr(why, '\0', sizeof why) == NULL)
      abort(); /* no reason given */
    return;
  }
  uint32_t type = weft__ucx_ref_type(h->to);
  if (type == UMSG_HELLO || type == UMSG_HELLO_ACK) {
    if (before.peer_known || !m->w.peer_known)
      abort();
    m->peer_window = h->credit;
  } else if (type == UMSG_DATA) {
    if (len == 0 || len > m->w.max_message)
      abort();
    if (m->w.recv_seq != before.recv_seq + 1)
      abort();
    m->queued += len + UCX_MSG_COST;
    m->n_queued++;
  } else if (type == UMSG_FIN) {
    if (!m->w.fin_received || before.fin_received)
      abort();
  } else if (type == UMSG_REDIRECT) {
    /* only to the connecting side, before HELLO_ACK, once; no credit */
    if (!m->w.client || before.peer_known || before.redirected ||
        !m->w.redirected || m->w.redirect_port == 0 ||
        m->w.redirect_port > 65535 || m->w.peer_server_id == 0 ||
        m->w.send_credit != before.send_credit ||
        m->w.recv_credit != before.recv_credit)
      abort();
    return;
  }
  if (type != UMSG_HELLO && type != UMSG_HELLO_ACK &&
      (before.fin_received || !before.peer_known))
    abort(); /* taken after FIN, or before the handshake */
  if (type != UMSG_HELLO && type != UMSG_HELLO_ACK && h->seq != before.recv_seq)
    abort(); /* every message after the handshake has the next sequence */
}

/* Opcode 1: a header from the state, perturbed by the input. */
static void receive_built(model *m, script *s) {
  uint8_t type = take8(s) % 10; /* 0 and 9: unknown */
  int8_t dseq = (int8_t)take8(s);
  uint32_t len = take32(s) % (m->w.max_message + 2u * UCX_MSG_COST);
  uint8_t flags = take8(s);
  ucx_hdr h = {.to = weft__ucx_slot_ref(type, 1, 1)};
  uint32_t d[DATA_MAX / 4] = {0};
  if (type == UMSG_REDIRECT) {
    h.seq = weft__ucx_slot_ref((flags & 2) ? take8(s) & 15 : UCX_WIRE_VERSION,
                               0, 0);
    h.credit = (flags & 4) ? take32(s) : 0;
    uint32_t n = (flags & 8) ? take32(s) : 2u + take8(s) % 63u;
    d[0] = (flags & 32) ? 0 : 1u + take8(s); /* server id */
    d[1] = (flags & 64) ? take32(s) : 1u + take8(s) % (n > 1 ? n - 1 : 1);
    d[2] = n;
    for (uint32_t i = 0; i < n && i < UCX_MAX_LISTENERS; i++)
      d[3 + i] = (flags & 128) ? take32(s) : 1024u + take8(s);
    receive(m, &h, (flags & 16) ? len : UCX_REDIRECT_HEAD + 4u * n, flags & 1,
            (const uint8_t *)d);
    return;
  }
  if (type == UMSG_HELLO || type == UMSG_HELLO_ACK) {
    h.seq = weft__ucx_slot_ref((flags & 2) ? take8(s) & 15 : UCX_WIRE_VERSION,
                               7, 3);
    h.credit = (flags & 4) ? take32(s) : UCX_WINDOW_MIN << (take8(s) % 19);
    uint32_t mm =
        (flags & 8) ? take32(s) : UCX_MAX_MESSAGE_MIN << (take8(s) % 17);
    d[0] = mm;
    /* HELLO: flags (UCX_HELLO_ROUTED); HELLO_ACK: the server id */
    d[1] = (flags & 32) ? take32(s) : (type == UMSG_HELLO ? take8(s) & 1u : 7u);
    d[2] = take32(s); /* the first sequence number of the peer's DATA */
    receive(m, &h, (flags & 16) ? len : UCX_HELLO_DATA, flags & 1,
            (const uint8_t *)d);
    return;
  }
  h.seq = m->w.recv_seq + (uint32_t)(dseq > 100 || dseq < -100 ? dseq : 0);
  h.credit = (flags & 2) ? take32(s) : (uint32_t)(m->w.send_unacked >> 1);
  if (type != UMSG_DATA && !(flags & 16))
    len = 0;
  receive(m, &h, len, flags & 1, (const uint8_t *)d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  script s = {data, size};
  uint8_t cfg = take8(&s);
  static const uint32_t windows[] = {UCX_WINDOW_MIN, 65536, UCX_DEFAULT_WINDOW,
                                     UCX_WINDOW_MAX};
  static const uint32_t maxes[] = {UCX_MAX_MESSAGE_MIN, UCX_DEFAULT_MAX_MESSAGE,
                                   UCX_MAX_MESSAGE_MAX};
  model m = {0};
  weft__ucx_wire_init(&m.w, windows[cfg & 3], maxes[(cfg >> 2) % 3],
                      (cfg & 16) != 0);
  while (s.left > 0) {
    switch (take8(&s) % 5) {
    case 0: {
      uint8_t raw[sizeof(ucx_hdr)];
      for (size_t i = 0; i < sizeof raw; i++)
        raw[i] = take8(&s);
      ucx_hdr h;
      memcpy(&h, raw, sizeof h);
      uint32_t len = take32(&s);
      uint8_t flags = take8(&s);
      if (flags & 2) { /* a header of another size: never taken */
        ucx_wire before = m.w;
        size_t hl = sizeof raw + 1 + (flags >> 2);
        uint8_t other[sizeof raw + 64] = {0};
        memcpy(other, raw, sizeof raw);
        if (weft__ucx_hdr_check(&m.w, other, hl % 2 ? hl : sizeof raw - 1, NULL,
                                len, flags & 1, NULL, 0) != UCX_HDR_FOREIGN ||
            memcmp(&before, &m.w, sizeof before) != 0)
          abort();
        break;
      }
      uint32_t d[DATA_MAX / 4] = {0};
      d[0] = take32(&s);
      d[1] = take32(&s);
      receive(&m, &h, len, flags & 1, (const uint8_t *)d);
      break;
    }
    case 1:
      receive_built(&m, &s);
      break;
    case 2:
      m.owed += m.queued;
      m.queued = m.n_queued = 0;
      break;
    case 3:
      if (m.owed > UINT32_MAX)
        abort();
      weft__ucx_wire_granted(&m.w, (uint32_t)m.owed);
      m.owed = 0;
      break;
    default: {
      size_t n = weft__ucx_wire_sendable(&m.w);
      size_t want = take32(&s) % (UCX_MAX_MESSAGE_MAX + 1u);
      if (want > n)
        want = n;
      if (want > 0) {
        weft__ucx_wire_sent_data(&m.w, want, (uint32_t)m.owed);
        m.owed = 0;
      }
      break;
    }
    }
    check_invariants(&m);
  }
  return 0;
}
