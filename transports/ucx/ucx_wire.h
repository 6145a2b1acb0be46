/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/ucx_wire.h: the UCX plugin's wire protocol: the one AM
 * id, the message types and the wire version, the 12-byte header and the
 * slot references in it, the data the handshake and REDIRECT carry, the
 * limits a peer's HELLO must respect, and a channel's wire state
 * (ucx_wire) with the check every message passes and the credit
 * accounting (weft__ucx_hdr_check and friends, inline: they run for every
 * message; the rare parts and the rules' texts are in wire.c).
 *
 * Separate from the endpoint and worker state because it is pure: it
 * includes nothing of UCX and calls nothing of it, so that the fuzz target
 * (tests/fuzz/fuzz_ucx_header.c) and a reader of the protocol need only
 * this file. The protocol itself is described in ucx_internal.h. */
#ifndef WEFT_TRANSPORTS_UCX_UCX_WIRE_H
#define WEFT_TRANSPORTS_UCX_UCX_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/error.h>

#define UCX_AM_ID 0x77u /* the one AM id weft uses */
/* Limits of the [transport.ucx] settings, which a peer's HELLO or
 * HELLO_ACK must respect too. Credit travels in 32 bits (ucx_hdr). */
#define UCX_WINDOW_MIN 4096u
#define UCX_WINDOW_MAX (1u << 30)
#define UCX_MAX_MESSAGE_MIN 1024u
#define UCX_MAX_MESSAGE_MAX (1u << 26)
/* Credit each DATA message costs on top of its bytes: about what it takes
 * at the receiver while queued (an 80 B rq_entry, a 120 B weft_buf, a 64 B
 * block at least). With it the window bounds the reassembly queue's
 * entries (window / (UCX_MSG_COST + 1)), not only its bytes: a peer that
 * sends 1-byte messages to a reader that does not read cannot queue a
 * million of them. Both ends must use the same value (UCX_WIRE_VERSION). */
#define UCX_MSG_COST 256u

/* ---- wire header ---- */

enum ucx_msg {
  UMSG_HELLO = 1,
  UMSG_HELLO_ACK,
  UMSG_DATA,
  UMSG_CREDIT,
  UMSG_FIN,
  UMSG_REDIRECT,
  UMSG_PING,
  UMSG_PONG
};

/* The wire version, in the type bits of HELLO's, HELLO_ACK's and
 * REDIRECT's `seq`: 4 since each side starts its sequence numbers at a
 * random value it announces in its HELLO or HELLO_ACK, and every message
 * after the handshake carries the sender's next sequence number (CREDIT,
 * PING and PONG without taking it), so that with error_mode = none, where
 * a message carries no ep and the slot it names routes it, a peer that
 * names another channel must also guess that channel's 32-bit sequence
 * (recv.c, weft__ucx_recv_route); 3 since every message is sent with
 * UCP_AM_SEND_FLAG_REPLY, so that the receiver finds the channel by the ep
 * the message came on and a message naming another channel's slot closes
 * its sender's channel (a version 2 peer's messages carry no ep); 2 since a
 * server spreads connections with REDIRECT and channels keep alive with PING
 * and PONG; 1 since DATA messages cost UCX_MSG_COST of credit and the handshake
 * carries max_message (0 before: that weft put nothing there). */
#define UCX_WIRE_VERSION 4u
/* Bytes of data a HELLO carries: the client's max_message, its flags and
 * the sequence number of its first DATA or FIN (uint32_t each, host byte
 * order). */
#define UCX_HELLO_DATA 12u
#define UCX_HELLO_ROUTED                                                       \
  1u /* HELLO flag: this listener was named by a                               \
        REDIRECT; do not redirect again */
/* Bytes of data a HELLO_ACK carries: the server's max_message, its id
 * (weft_listener_server_id) and the sequence number of its first DATA or
 * FIN (uint32_t each, host byte order). */
#define UCX_HELLO_ACK_DATA 12u
/* A REDIRECT's data: the server's id, the index of the listener to use
 * (1 .. n-1), the number n of listeners (2 .. UCX_MAX_LISTENERS), then n
 * ports (1 .. 65535); uint32_t each, host byte order. */
#define UCX_REDIRECT_HEAD 12u
#define UCX_MAX_LISTENERS 64u

/* The header of every message: 12 bytes, host byte order (both ends run
 * this code on the same kind of host; UCX itself does not mix endianness
 * either). It is this small because on UCX 1.13's shared-memory lanes a
 * 16 B message round trip took 0.84 us with a header of up to 12 B and
 * 1.0 us from 16 B on (weft-ucx-peer, docs/journal/2026-11-22-ucx.md): a user
 * header plus data of at most 28 B is cheaper to move, and every byte of header
 * rides on every message anyway. */
typedef struct ucx_hdr {
  uint32_t to;     /* type and the receiver's slot: weft__ucx_slot_ref() */
  uint32_t seq;    /* DATA, FIN: order in the channel; CREDIT, PING, PONG:
                      the sender's next DATA or FIN's; HELLO, HELLO_ACK,
                      REDIRECT: the wire version and (HELLO, HELLO_ACK)
                      the sender's slot, weft__ucx_slot_ref() */
  uint32_t credit; /* bytes granted to the receiver of this message
                      (HELLO, HELLO_ACK: the whole window) */
} ucx_hdr;

/* A slot reference packs a message type (4 bits; in HELLO's and
 * HELLO_ACK's `seq`, the wire version), a slot generation (the
 * low 8 bits) and a slot index (20 bits) into 32. Freed slots are reused
 * last (a FIFO) and only while UCX_MIN_FREE_SLOTS are free
 * (weft__ucx_slot_take). */
#define UCX_SLOT_BITS 20u
#define UCX_MAX_SLOTS (1u << UCX_SLOT_BITS) /* channels per loop */
#define UCX_GEN_MASK 0xffu
#define UCX_MIN_FREE_SLOTS 1024u

static inline uint32_t weft__ucx_slot_ref(uint32_t type, uint32_t id,
                                          uint32_t gen) {
  return type << 28 | (gen & UCX_GEN_MASK) << UCX_SLOT_BITS | id;
}

static inline uint32_t weft__ucx_ref_type(uint32_t ref) { return ref >> 28; }
static inline uint32_t weft__ucx_ref_id(uint32_t ref) {
  return ref & (UCX_MAX_SLOTS - 1);
}

static inline uint32_t weft__ucx_ref_gen(uint32_t ref) {
  return (ref >> UCX_SLOT_BITS) & UCX_GEN_MASK;
}

/* What a channel's side of the wire protocol knows and has promised: the
 * state weft__ucx_hdr_check checks a peer's header against and updates.
 * Credit counts bytes plus UCX_MSG_COST per DATA message. Kept apart from
 * ucx_channel so that the check needs nothing of UCX (fuzz_ucx_header). */
typedef struct ucx_wire {
  /* this side's settings, fixed at channel start */
  uint32_t window;      /* credit granted in this side's HELLO / HELLO_ACK */
  uint32_t max_message; /* the largest DATA this side takes */
  bool client;          /* this side connected: sent HELLO, awaits HELLO_ACK */
  /* this side's slot, which every message but HELLO must name: the ep a
   * message came on says whose it is, the slot it names must agree */
  uint32_t self_id, self_gen;
  /* the peer, from its HELLO or HELLO_ACK */
  bool peer_known;
  bool fin_received;       /* the peer's FIN was taken: nothing may follow */
  bool redirected;         /* this connect took a REDIRECT: no second one */
  uint32_t redirect_port;  /* the port that REDIRECT named */
  uint32_t peer_flags;     /* from its HELLO (UCX_HELLO_ROUTED) */
  uint32_t peer_server_id; /* from its HELLO_ACK, or the REDIRECT's */
  uint32_t peer_id, peer_gen;
  uint32_t peer_max_message; /* the largest DATA the peer takes */
  /* receiving */
  uint32_t recv_seq;    /* the sequence the peer's next message carries
                           (from its HELLO or HELLO_ACK: random) */
  uint64_t recv_credit; /* credit the peer has left: granted, not used */
  /* sending */
  uint64_t send_credit;  /* credit this side has left */
  uint64_t send_unacked; /* credit this side used, not granted back yet */
} ucx_wire;

/* ---- wire.c and the inline checks: what a peer may send ---- */

/**
 * Starts channel state `w` with this side's `window` (credit it grants in
 * its HELLO or HELLO_ACK) and `max_message`; `client` when this side
 * connects (sends HELLO). Any thread.
 */
void weft__ucx_wire_init(ucx_wire *w, uint32_t window, uint32_t max_message,
                         bool client);

/** weft__ucx_hdr_check's answer for a header that is not weft's (another
 *  size): drop the message, nobody to blame. */
#define UCX_HDR_FOREIGN 1

/** The name of message type `type` ("DATA"), "?" for one weft does not
 *  know. Any thread. */
const char *weft__ucx_msg_name(uint32_t type);

/** Formats the rule a peer broke into `why` (`why_len` bytes, nothing if
 *  0) and returns `err`: weft__ucx_hdr_check's way out. Any thread. */
__attribute__((cold, format(printf, 4, 5))) int
weft__ucx_wire_broken(int err, char *why, size_t why_len, const char *fmt, ...);

/** weft__ucx_hdr_check for a HELLO or HELLO_ACK (`h`, of type `type`):
 *  rare, so out of line. Any thread. */
int weft__ucx_hdr_check_hello(ucx_wire *w, const ucx_hdr *h, uint32_t type,
                              const void *data, size_t len, bool rndv,
                              char *why, size_t why_len);

/** weft__ucx_hdr_check for a REDIRECT (`h`): only to the side that
 *  connects, before HELLO_ACK, once per connect, with UCX_WIRE_VERSION, no
 *  credit, eager data of UCX_REDIRECT_HEAD bytes plus 4 per listener (2 ..
 *  UCX_MAX_LISTENERS of them, a server id not 0, an index 1 .. n-1, ports
 *  1 .. 65535); the chosen port goes to w->redirect_port, the id to
 *  w->peer_server_id. Any thread. */
int weft__ucx_hdr_check_redirect(ucx_wire *w, const ucx_hdr *h,
                                 const void *data, size_t len, bool rndv,
                                 char *why, size_t why_len);

/**
 * Checks one message a peer sent on a channel whose wire state is `w`:
 * `header` (`header_len` bytes, UCX's user header), and `len` bytes of
 * data, at `data` unless `rndv` (a rendezvous: only its length is known
 * yet). Nothing is trusted: the type must be known; every message but
 * HELLO must name this side's slot (w->self_id, w->self_gen: the ep it
 * came on is the channel's, so a message naming another slot is a peer
 * reaching for another peer's channel); the type must come in handshake
 * order (HELLO on the accepting side, HELLO_ACK on the connecting side,
 * once, with UCX_WIRE_VERSION, a window and max_message within the
 * settings' limits, as eager data of UCX_HELLO_DATA (HELLO, flags known) or
 * UCX_HELLO_ACK_DATA (HELLO_ACK, a server id not 0) bytes; REDIRECT:
 * weft__ucx_hdr_check_redirect); DATA, CREDIT, FIN, PING and PONG only
 * after the handshake and before the peer's FIN, each with the next
 * sequence number (which DATA and FIN take); DATA of 1 .. max_message bytes
 * within the credit left (bytes + UCX_MSG_COST); CREDIT, FIN, PING and PONG
 * eager and empty; a credit grant no larger than the credit used and not yet
 * granted back (a CREDIT message's not 0). Takes a valid message into `w`
 * (handshake fields, sequence, credit both ways) and returns 0; returns
 * UCX_HDR_FOREIGN for a header of another size (`w` untouched); else, with
 * `w` untouched and a sentence in `why` (`why_len` bytes, "peer sent ..."),
 * WEFT_EMSGSIZE for DATA over max_message or WEFT_EPROTO for any other
 * broken rule. Pure: no UCX call, no allocation;
 * any thread. Inline: it runs for every message (the rules' texts are out of
 * line, in wire.c).
 */
static inline int weft__ucx_hdr_check(ucx_wire *w, const void *header,
                                      size_t header_len, const void *data,
                                      size_t len, bool rndv, char *why,
                                      size_t why_len) {
  ucx_hdr h;
  if (header_len != sizeof h)
    return UCX_HDR_FOREIGN;
  __builtin_memcpy(&h, header, sizeof h);
  uint32_t type = weft__ucx_ref_type(h.to);
  if (type < UMSG_HELLO || type > UMSG_PONG)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent a message of unknown type %u",
                                 type);
  if (type != UMSG_HELLO && (weft__ucx_ref_id(h.to) != w->self_id ||
                             weft__ucx_ref_gen(h.to) != w->self_gen))
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent %s naming another channel (slot %u generation %u; its "
        "own: slot %u generation %u)",
        weft__ucx_msg_name(type), weft__ucx_ref_id(h.to),
        weft__ucx_ref_gen(h.to), w->self_id, w->self_gen);
  if (type == UMSG_HELLO || type == UMSG_HELLO_ACK)
    return weft__ucx_hdr_check_hello(w, &h, type, data, len, rndv, why,
                                     why_len);
  if (type == UMSG_REDIRECT)
    return weft__ucx_hdr_check_redirect(w, &h, data, len, rndv, why, why_len);
  if (!w->peer_known)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len, "peer sent %s before %s",
        weft__ucx_msg_name(type), w->client ? "HELLO_ACK" : "HELLO");
  if (w->fin_received)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent %s after its FIN",
                                 weft__ucx_msg_name(type));
  if (h.seq != w->recv_seq)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent %s with sequence number %u, expected %u",
        weft__ucx_msg_name(type), h.seq, w->recv_seq);
  if (type == UMSG_DATA) {
    if (len == 0)
      return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                   "peer sent a DATA message without data");
    if (len > w->max_message)
      return weft__ucx_wire_broken(
          WEFT_EMSGSIZE, why, why_len,
          "peer sent %zu B in one message, max_message is %u", len,
          w->max_message);
  } else if (len > 0 || rndv) {
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent %s with %zu B of data",
                                 weft__ucx_msg_name(type), len);
  }
  bool sequenced = type == UMSG_DATA || type == UMSG_FIN;
  uint64_t cost = type == UMSG_DATA ? len + UCX_MSG_COST : 0;
  if (cost > w->recv_credit)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent %zu B beyond its credit window (%u B): it costs %llu B, "
        "%llu B are left",
        len, w->window, (unsigned long long)cost,
        (unsigned long long)w->recv_credit);
  if (h.credit > w->send_unacked)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer granted %u B of credit, only %llu B are outstanding", h.credit,
        (unsigned long long)w->send_unacked);
  if (type == UMSG_CREDIT && h.credit == 0)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent a CREDIT of 0 B");

  w->send_unacked -= h.credit;
  w->send_credit += h.credit;
  if (!sequenced)
    return 0; /* CREDIT, PING, PONG */
  w->recv_seq++;
  w->recv_credit -= cost;
  if (type == UMSG_FIN)
    w->fin_received = true;
  return 0;
}

/**
 * Whether a message with header `h` that came without its sender's ep and
 * names the channel whose wire state is `w` (error_mode = none routes such
 * messages by that slot) shows that its sender is the channel's peer: a
 * DATA, CREDIT, FIN, PING or PONG after the handshake and before the
 * peer's FIN with the channel's next sequence number, which started at a
 * random value only the peer was told; or HELLO_ACK or REDIRECT to a
 * channel that connects and has not heard its peer yet (the handshake,
 * which has no sequence yet). Any other such message is not the peer's
 * (UCX keeps an ep's order) or cannot be told from a forgery, so the
 * receiver drops it without touching the channel. Pure; any thread.
 */
static inline bool weft__ucx_wire_from_peer(const ucx_wire *w,
                                            const ucx_hdr *h) {
  uint32_t type = weft__ucx_ref_type(h->to);
  if (type == UMSG_HELLO_ACK || type == UMSG_REDIRECT)
    return w->client && !w->peer_known;
  if (type < UMSG_DATA || type > UMSG_PONG) /* REDIRECT: above */
    return false;
  return w->peer_known && !w->fin_received && h->seq == w->recv_seq;
}

/** Records that this side grants `granted` credit back (a CREDIT message,
 *  or a DATA header: weft__ucx_wire_sent_data). Any thread. */
static inline void weft__ucx_wire_granted(ucx_wire *w, uint32_t granted) {
  w->recv_credit += granted;
}

/**
 * Records that this side sends a DATA message of `len` bytes, granting
 * `granted` credit back in its header: takes len + UCX_MSG_COST from the
 * send credit (the caller checked it is there: weft__ucx_wire_sendable)
 * and adds `granted` to the peer's. Any thread.
 */
static inline void weft__ucx_wire_sent_data(ucx_wire *w, size_t len,
                                            uint32_t granted) {
  uint64_t cost = len + UCX_MSG_COST;
  w->send_credit -= cost;
  w->send_unacked += cost;
  weft__ucx_wire_granted(w, granted);
}

/** The DATA bytes this side may send in one message now: what its credit
 *  allows after UCX_MSG_COST, at most the smaller max_message of the two
 *  sides; 0 while the peer is unknown. Any thread. */
static inline size_t weft__ucx_wire_sendable(const ucx_wire *w) {
  if (!w->peer_known || w->send_credit <= UCX_MSG_COST)
    return 0;
  uint64_t n = w->send_credit - UCX_MSG_COST;
  uint32_t max = w->max_message < w->peer_max_message ? w->max_message
                                                      : w->peer_max_message;
  return n < max ? (size_t)n : max;
}

#endif
